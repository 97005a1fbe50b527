/*
 * bu_attention.c - causal scaled dot-product attention (Vaswani et al. 2017) with grouped-query
 * heads (Ainslie et al. 2023, GQA), an optional sliding window (Gemma 2/3 local layers), optional
 * logit soft-capping, over an fp32 KV cache laid out [n_ctx, n_head_kv, head_dim].
 *
 * Contract: logit_j = scale * dot_lanes8(q, k_j) (one fp32 multiply after the dot); optional
 * softcap * tanhf(logit / softcap); softmax subtracts the row max, e_j = expf(logit_j - max) in
 * fp32, the sum of e_j accumulates in double in increasing j; weight_j = e_j * (float)(1/sum);
 * out[d] accumulates weight_j * v_j[d] in fp32 in increasing j. Key positions are visited in
 * increasing order, from max(0, p - window + 1) (or 0) to p.
 */
#include <math.h>

#include "bu_internal.h"

int bu_attention_f32_scalar(const float *q, const float *k, const float *v, float *k_cache, float *v_cache,
                            float *out, int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                            int64_t head_dim_v, int64_t n_ctx, int64_t pos, int64_t window, float scale,
                            float softcap, void *ws, size_t ws_cap) {
    size_t q_b, k_b, v_b, kc_b, vc_b, o_b, need, tmp;
    if (!bu__dim_ok(n_tokens) || !bu__dim_ok(n_head) || !bu__dim_ok(n_head_kv) || !bu__dim_ok(head_dim) ||
        !bu__dim_ok(head_dim_v) || !bu__dim_ok(n_ctx) || !bu__dim_ok(pos) || !bu__dim_ok(window))
        return BU_ERR_ARG;
    if (n_head_kv == 0 || n_head % n_head_kv) return BU_ERR_ARG;
    if (pos + n_tokens > n_ctx) return BU_ERR_ARG;
    if (!isfinite(scale) || !(softcap >= 0.0f) || !isfinite(softcap)) return BU_ERR_ARG;
    if (!bu__bytes(n_tokens, n_head, 1, &tmp) || !bu__bytes((int64_t)tmp, head_dim, 4, &q_b)) return BU_ERR_ARG;
    if (!bu__bytes(n_tokens, n_head_kv, 1, &tmp) || !bu__bytes((int64_t)tmp, head_dim, 4, &k_b)) return BU_ERR_ARG;
    if (!bu__bytes((int64_t)tmp, head_dim_v, 4, &v_b)) return BU_ERR_ARG;
    if (!bu__bytes(n_ctx, n_head_kv, 1, &tmp) || !bu__bytes((int64_t)tmp, head_dim, 4, &kc_b)) return BU_ERR_ARG;
    if (!bu__bytes((int64_t)tmp, head_dim_v, 4, &vc_b)) return BU_ERR_ARG;
    if (!bu__bytes(n_tokens, n_head, 1, &tmp) || !bu__bytes((int64_t)tmp, head_dim_v, 4, &o_b)) return BU_ERR_ARG;
    if (!bu__bytes(n_ctx, 1, sizeof(float), &need)) return BU_ERR_ARG;
    if (n_tokens == 0) return BU_OK;
    if (!q || !k || !v || !k_cache || !v_cache || !out) return BU_ERR_NULL;
    if (!ws) return BU_ERR_NULL;
    if (ws_cap < need) return BU_ERR_WS;
    {
        const void *p[7] = {q, k, v, k_cache, v_cache, out, ws};
        const size_t s[7] = {q_b, k_b, v_b, kc_b, vc_b, o_b, need};
        /* out, the caches and the workspace are written: none may overlap anything else */
        for (int a = 3; a < 7; a++)
            for (int b = 0; b < 7; b++)
                if (a != b && bu__overlap(p[a], s[a], p[b], s[b])) return BU_ERR_ARG;
    }
    const size_t kv_row = (size_t)n_head_kv * (size_t)head_dim, vv_row = (size_t)n_head_kv * (size_t)head_dim_v;
    /* append this call's K and V rows at positions pos .. pos + n_tokens - 1 */
    memcpy(k_cache + (size_t)pos * kv_row, k, k_b);
    memcpy(v_cache + (size_t)pos * vv_row, v, v_b);

    const int64_t group = n_head / n_head_kv;
    float *sc = (float *)ws;
    for (int64_t t = 0; t < n_tokens; t++) {
        const int64_t p = pos + t;
        const int64_t j0 = (window > 0 && p - window + 1 > 0) ? p - window + 1 : 0;
        for (int64_t h = 0; h < n_head; h++) {
            const int64_t hk = h / group;
            const float *qh = q + (t * n_head + h) * head_dim;
            float mx = -INFINITY;
            for (int64_t j = j0; j <= p; j++) {
                float l = scale * bu__dot_f32(qh, k_cache + (size_t)j * kv_row + (size_t)hk * head_dim, head_dim);
                if (softcap > 0.0f) l = softcap * tanhf(l / softcap);
                sc[j] = l;
                if (l > mx) mx = l;
            }
            double sum = 0.0;
            for (int64_t j = j0; j <= p; j++) {
                sc[j] = expf(sc[j] - mx);
                sum += (double)sc[j];
            }
            const float inv = (float)(1.0 / sum);
            float *o = out + (t * n_head + h) * head_dim_v;
            for (int64_t d = 0; d < head_dim_v; d++) o[d] = 0.0f;
            for (int64_t j = j0; j <= p; j++) {
                const float wj = sc[j] * inv;
                const float *vj = v_cache + (size_t)j * vv_row + (size_t)hk * head_dim_v;
                for (int64_t d = 0; d < head_dim_v; d++) o[d] += wj * vj[d];
            }
        }
    }
    return BU_OK;
}
