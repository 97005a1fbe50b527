/*
 * bu_norm.c - RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"), over whole
 * rows and per attention head (Q/K norm of qwen3 and gemma3).
 *
 * Contract: the sum of squares accumulates in double in increasing index order (as ggml's
 * ggml_float sum); inv = 1 / sqrt(sum / n + eps) is computed in double and rounded once to fp32;
 * then y = (x * inv) * w with two fp32 roundings (ggml scales, then multiplies by the weight).
 */
#include <math.h>

#include "bu_internal.h"

static void rms_rows(const float *x, const float *w, float *y, int64_t rows, int64_t n, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        double ss = 0.0;
        for (int64_t i = 0; i < n; i++) ss += (double)xr[i] * (double)xr[i];
        const float inv = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
        for (int64_t i = 0; i < n; i++) yr[i] = (xr[i] * inv) * w[i];
    }
}

static int rms_check(const float *x, const float *w, float *y, int64_t rows_a, int64_t rows_b,
                     int64_t n, float eps) {
    size_t rows_sz, bytes;
    if (!bu__dim_ok(rows_a) || !bu__dim_ok(rows_b) || !bu__dim_ok(n)) return BU_ERR_ARG;
    if (!(eps >= 0.0f) || !isfinite(eps)) return BU_ERR_ARG;
    if (!bu__bytes(rows_a, rows_b, 1, &rows_sz) || !bu__bytes((int64_t)rows_sz, n, sizeof(float), &bytes))
        return BU_ERR_ARG;
    if (bytes == 0) return 1; /* nothing to do */
    if (!x || !w || !y) return BU_ERR_NULL;
    if (!bu__same_or_disjoint(x, bytes, y, bytes) || bu__overlap(y, bytes, w, (size_t)n * sizeof(float)))
        return BU_ERR_ARG;
    return BU_OK;
}

int bu_rmsnorm_f32_scalar(const float *x, const float *w, float *y, int64_t n_tokens, int64_t n,
                          float eps, void *ws, size_t ws_cap) {
    (void)ws; (void)ws_cap;
    const int st = rms_check(x, w, y, n_tokens, 1, n, eps);
    if (st) return st < 0 ? st : BU_OK;
    rms_rows(x, w, y, n_tokens, n, eps);
    return BU_OK;
}

int bu_rmsnorm_heads_f32_scalar(const float *x, const float *w, float *y, int64_t n_tokens,
                                int64_t n_heads, int64_t head_dim, float eps, void *ws, size_t ws_cap) {
    (void)ws; (void)ws_cap;
    const int st = rms_check(x, w, y, n_tokens, n_heads, head_dim, eps);
    if (st) return st < 0 ? st : BU_OK;
    rms_rows(x, w, y, n_tokens * n_heads, head_dim, eps);
    return BU_OK;
}
