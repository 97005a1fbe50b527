/*
 * bu_elementwise.c - row-wise fp32 ops on [n_tokens, n]: SwiGLU (Shazeer 2020), GeGLU with the
 * tanh GELU approximation (Hendrycks & Gimpel 2016), residual add, scale, tanh soft-capping
 * (Gemma 2), an explicit copy, and argmax.
 *
 * Contract: transcendental functions are the C library's float versions (expf, tanhf) evaluated
 * in fp32; each arithmetic operation rounds to fp32 in the order written.
 */
#include <math.h>

#include "bu_elementwise.h"

/* declared in bu_elementwise.h (shared with bu_glu_fast.c) */
int bu__ew_check(int n_in, const void *a, const void *b, const void *y, int64_t n_tokens, int64_t n,
                 size_t elem, int alias, size_t *count) {
    size_t bytes;
    if (!bu__dim_ok(n_tokens) || !bu__dim_ok(n)) return BU_ERR_ARG;
    if (!bu__bytes(n_tokens, n, elem, &bytes)) return BU_ERR_ARG;
    *count = bytes / elem;
    if (bytes == 0) return 1;
    if (!a || !y || (n_in == 2 && !b)) return BU_ERR_NULL;
    for (int i = 0; i < n_in; i++) {
        const void *in = i == 0 ? a : b;
        if (alias == Y_MAY_ALIAS ? !bu__same_or_disjoint(in, bytes, y, bytes) : bu__overlap(in, bytes, y, bytes))
            return BU_ERR_ARG;
    }
    return 0;
}

#define EW_PROLOGUE(n_in, a, b, y, alias)                                              \
    (void)ws; (void)ws_cap;                                                            \
    size_t cnt;                                                                        \
    const int st = bu__ew_check(n_in, a, b, y, n_tokens, n, sizeof(float), alias, &cnt);   \
    if (st) return st < 0 ? st : BU_OK;

int bu_swiglu_f32_scalar(const float *gate, const float *up, float *y, int64_t n_tokens, int64_t n,
                         void *ws, size_t ws_cap) {
    EW_PROLOGUE(2, gate, up, y, Y_MAY_ALIAS)
    for (size_t i = 0; i < cnt; i++) {
        const float g = gate[i];
        y[i] = (g / (1.0f + expf(-g))) * up[i];
    }
    return BU_OK;
}

int bu_geglu_f32_scalar(const float *gate, const float *up, float *y, int64_t n_tokens, int64_t n,
                        void *ws, size_t ws_cap) {
    EW_PROLOGUE(2, gate, up, y, Y_MAY_ALIAS)
    const float k0 = 0.7978845608028654f; /* sqrt(2/pi) */
    const float k1 = 0.044715f;
    for (size_t i = 0; i < cnt; i++) {
        const float g = gate[i];
        const float gelu = 0.5f * g * (1.0f + tanhf(k0 * (g + k1 * g * g * g)));
        y[i] = gelu * up[i];
    }
    return BU_OK;
}

int bu_add_f32_scalar(const float *a, const float *b, float *y, int64_t n_tokens, int64_t n,
                      void *ws, size_t ws_cap) {
    EW_PROLOGUE(2, a, b, y, Y_MAY_ALIAS)
    for (size_t i = 0; i < cnt; i++) y[i] = a[i] + b[i];
    return BU_OK;
}

int bu_scale_f32_scalar(const float *x, float *y, int64_t n_tokens, int64_t n, float s, void *ws,
                        size_t ws_cap) {
    EW_PROLOGUE(1, x, NULL, y, Y_MAY_ALIAS)
    for (size_t i = 0; i < cnt; i++) y[i] = s * x[i];
    return BU_OK;
}

int bu_softcap_f32_scalar(const float *x, float *y, int64_t n_tokens, int64_t n, float cap, void *ws,
                          size_t ws_cap) {
    if (!(cap > 0.0f) || !isfinite(cap)) return BU_ERR_ARG;
    EW_PROLOGUE(1, x, NULL, y, Y_MAY_ALIAS)
    for (size_t i = 0; i < cnt; i++) y[i] = cap * tanhf(x[i] / cap);
    return BU_OK;
}

int bu_copy_f32_scalar(const float *x, float *y, int64_t n_tokens, int64_t n, void *ws, size_t ws_cap) {
    EW_PROLOGUE(1, x, NULL, y, Y_DISJOINT)
    memcpy(y, x, cnt * sizeof(float));
    return BU_OK;
}

int bu_argmax_f32_scalar(const float *x, int32_t *idx, int64_t n_tokens, int64_t n, void *ws,
                         size_t ws_cap) {
    (void)ws; (void)ws_cap;
    size_t bytes;
    if (!bu__dim_ok(n_tokens) || !bu__dim_ok(n)) return BU_ERR_ARG;
    if (!bu__bytes(n_tokens, n, sizeof(float), &bytes)) return BU_ERR_ARG;
    if (n_tokens == 0) return BU_OK;
    if (n == 0) return BU_ERR_ARG; /* the argmax of an empty row does not exist */
    if (!x || !idx) return BU_ERR_NULL;
    if (bu__overlap(x, bytes, idx, (size_t)n_tokens * sizeof(int32_t))) return BU_ERR_ARG;
    for (int64_t t = 0; t < n_tokens; t++)
        for (int64_t i = 0; i < n; i++)
            if (isnan(x[t * n + i])) return BU_ERR_ARG;
    for (int64_t t = 0; t < n_tokens; t++) {
        const float *r = x + t * n;
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++)
            if (r[i] > r[best]) best = i;
        idx[t] = (int32_t)best;
    }
    return BU_OK;
}
