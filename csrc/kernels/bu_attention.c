/*
 * bu_attention.c - causal scaled dot-product attention (Vaswani et al. 2017) with grouped-query
 * heads (Ainslie et al. 2023, GQA), an optional sliding window (Gemma 2/3 local layers), optional
 * logit soft-capping, over an fp32 KV cache laid out [n_ctx, n_head_kv, head_dim]: the reference
 * provider, and the argument checks and softmax shared with attention.f32.fast (bu_attention_fast.c).
 *
 * Contract: logit_j = scale * dot_lanes8(q, k_j) (one fp32 multiply after the dot); optional
 * softcap * tanhf(logit / softcap); softmax subtracts the row max, e_j = expf(logit_j - max) in
 * fp32, the sum of e_j accumulates in double in increasing j; weight_j = e_j * (float)(1/sum);
 * out[d] accumulates weight_j * v_j[d] in fp32 in increasing j. Key positions are visited in
 * increasing order, from max(0, p - window + 1) (or 0) to p.
 */
#include <math.h>

#include "bu_attention.h"

int bu__attention_args(const bu_attn *a, size_t kv_elem, int64_t h0, int64_t h1, const void *ws, size_t ws_cap,
                       int64_t ws_rows, size_t ws_extra, int *empty) {
    size_t q_b, k_b, v_b, kc_b, vc_b, o_b, need, tmp;
    *empty = 0;
    if (!bu__dim_ok(a->n_tokens) || !bu__dim_ok(a->n_head) || !bu__dim_ok(a->n_head_kv) ||
        !bu__dim_ok(a->head_dim) || !bu__dim_ok(a->head_dim_v) || !bu__dim_ok(a->n_ctx) || !bu__dim_ok(a->pos) ||
        !bu__dim_ok(a->window))
        return BU_ERR_ARG;
    if (a->n_head_kv == 0 || a->n_head % a->n_head_kv) return BU_ERR_ARG;
    if (a->pos + a->n_tokens > a->n_ctx) return BU_ERR_ARG;
    if (h0 < 0 || h0 > h1 || h1 > a->n_head) return BU_ERR_ARG;
    if (!isfinite(a->scale) || !(a->softcap >= 0.0f) || !isfinite(a->softcap)) return BU_ERR_ARG;
    if (!bu__bytes(a->n_tokens, a->n_head, 1, &tmp) || !bu__bytes((int64_t)tmp, a->head_dim, 4, &q_b))
        return BU_ERR_ARG;
    if (!bu__bytes(a->n_tokens, a->n_head_kv, 1, &tmp) || !bu__bytes((int64_t)tmp, a->head_dim, 4, &k_b))
        return BU_ERR_ARG;
    if (!bu__bytes((int64_t)tmp, a->head_dim_v, 4, &v_b)) return BU_ERR_ARG;
    if (!bu__bytes(a->n_ctx, a->n_head_kv, 1, &tmp) || !bu__bytes((int64_t)tmp, a->head_dim, kv_elem, &kc_b))
        return BU_ERR_ARG;
    if (!bu__bytes((int64_t)tmp, a->head_dim_v, kv_elem, &vc_b)) return BU_ERR_ARG;
    if (!bu__bytes(a->n_tokens, a->n_head, 1, &tmp) || !bu__bytes((int64_t)tmp, a->head_dim_v, 4, &o_b))
        return BU_ERR_ARG;
    if (!bu__bytes(a->n_ctx, ws_rows, sizeof(float), &need) || __builtin_add_overflow(need, ws_extra, &need))
        return BU_ERR_ARG;
    if (a->n_tokens == 0 || h0 == h1) {
        *empty = 1;
        return BU_OK;
    }
    if (!a->q || !a->k || !a->v || !a->k_cache || !a->v_cache || !a->out) return BU_ERR_NULL;
    if (!ws) return BU_ERR_NULL;
    if (ws_cap < need) return BU_ERR_WS;
    {
        const void *p[7] = {a->q, a->k, a->v, a->k_cache, a->v_cache, a->out, ws};
        const size_t s[7] = {q_b, k_b, v_b, kc_b, vc_b, o_b, need};
        /* out, the caches and the workspace are written: none may overlap anything else */
        for (int x = 3; x < 7; x++)
            for (int y = 0; y < 7; y++)
                if (x != y && bu__overlap(p[x], s[x], p[y], s[y])) return BU_ERR_ARG;
    }
    return BU_OK;
}

void bu__attention_append_as(const bu_attn *a, void *k_cache, void *v_cache, size_t elem, bu_attn_store_fn store,
                             int64_t h0, int64_t h1) {
    const int64_t group = a->n_head / a->n_head_kv;
    const size_t kr = (size_t)a->n_head_kv * (size_t)a->head_dim, vr = (size_t)a->n_head_kv * (size_t)a->head_dim_v;
    for (int64_t hk = 0; hk < a->n_head_kv; hk++) {
        if (hk * group < h0 || hk * group >= h1) continue;
        for (int64_t t = 0; t < a->n_tokens; t++) {
            const size_t r = (size_t)(a->pos + t);
            store((char *)k_cache + (r * kr + (size_t)hk * (size_t)a->head_dim) * elem,
                  a->k + (size_t)t * kr + (size_t)hk * (size_t)a->head_dim, a->head_dim);
            store((char *)v_cache + (r * vr + (size_t)hk * (size_t)a->head_dim_v) * elem,
                  a->v + (size_t)t * vr + (size_t)hk * (size_t)a->head_dim_v, a->head_dim_v);
        }
    }
}

static void store_f32(void *dst, const float *src, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

void bu__attention_append(const bu_attn *a, int64_t h0, int64_t h1) {
    bu__attention_append_as(a, a->k_cache, a->v_cache, sizeof(float), store_f32, h0, h1);
}

void bu__attention_softmax_logits(const bu_attn *a, float *s, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        float l = a->scale * s[j];
        if (a->softcap > 0.0f) l = a->softcap * tanhf(l / a->softcap);
        s[j] = l;
    }
}

void bu__attention_softmax(const bu_attn *a, float *s, int64_t n) {
    float mx = -INFINITY;
    bu__attention_softmax_logits(a, s, n);
    for (int64_t j = 0; j < n; j++)
        if (s[j] > mx) mx = s[j];
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++) {
        s[j] = expf(s[j] - mx);
        sum += (double)s[j];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j < n; j++) s[j] = s[j] * inv;
}

void bu__attention_heads_scalar(const bu_attn *a, int64_t h0, int64_t h1, float *sc) {
    const int64_t group = a->n_head / a->n_head_kv;
    for (int64_t t = 0; t < a->n_tokens; t++) {
        const int64_t p = a->pos + t, j0 = bu__attn_first(a, p);
        for (int64_t h = h0; h < h1; h++) {
            const int64_t hk = h / group;
            const float *qh = a->q + (size_t)(t * a->n_head + h) * (size_t)a->head_dim;
            for (int64_t j = j0; j <= p; j++) sc[j - j0] = bu__dot_f32(qh, bu__attn_key(a, j, hk), a->head_dim);
            bu__attention_softmax(a, sc, p - j0 + 1);
            float *o = a->out + (size_t)(t * a->n_head + h) * (size_t)a->head_dim_v;
            for (int64_t d = 0; d < a->head_dim_v; d++) o[d] = 0.0f;
            for (int64_t j = j0; j <= p; j++) {
                const float wj = sc[j - j0];
                const float *vj = bu__attn_value(a, j, hk);
                for (int64_t d = 0; d < a->head_dim_v; d++) o[d] += wj * vj[d];
            }
        }
    }
}

int bu_attention_f32_scalar(const float *q, const float *k, const float *v, float *k_cache, float *v_cache,
                            float *out, int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                            int64_t head_dim_v, int64_t n_ctx, int64_t pos, int64_t window, float scale,
                            float softcap, void *ws, size_t ws_cap) {
    const bu_attn a = {q, k, v, k_cache, v_cache, out, n_tokens, n_head, n_head_kv, head_dim, head_dim_v,
                       n_ctx, pos, window, scale, softcap};
    int empty;
    const int st = bu__attention_args(&a, sizeof(float), 0, n_head, ws, ws_cap, 1, 0, &empty);
    if (st != BU_OK || empty) return st;
    bu__attention_append(&a, 0, n_head);
    bu__attention_heads_scalar(&a, 0, n_head, (float *)ws);
    return BU_OK;
}
