/*
 * bu_attention_f16.c - causal grouped-query attention over an F16 KV cache (as llama.cpp's default
 * cache type): attention.f16.scalar, the reference, and the append, call-row rounding and scalar body
 * shared with attention.f16.fast (bu_attention_f16_fast.c). The cache is laid out as the fp32 one,
 * [n_ctx, n_head_kv, head_dim], with IEEE binary16 elements.
 *
 * Contract (kernel_maps/attention.f16.scalar.json): the call's K and V rows are rounded to F16, round
 * to nearest even (bu__fp32_to_fp16: F16C vcvtps2ph with _MM_FROUND_TO_NEAREST_INT, numpy
 * astype(float16)), and stored at positions pos..pos+n_tokens-1; every key and value a query sees,
 * this call's included, is such an F16 value, widened exactly to fp32 (as llama.cpp reads its own
 * tokens back from the F16 cache). From there the fp32 reference's contract: logit_j = scale *
 * dot_lanes8(q, k_j), optional softcap * tanhf(logit / softcap), softmax with expf and the sum in
 * double, out[d] accumulated in fp32 in increasing j.
 */
#include "bu_attention_f16.h"

static void store_f16(void *dst, const float *src, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = bu__fp32_to_fp16(src[i]);
}

void bu__attention16_append(const bu_attn16 *x, int64_t h0, int64_t h1) {
    bu__attention_append_as(&x->a, x->k_cache, x->v_cache, sizeof(uint16_t), store_f16, h0, h1);
}

void bu__attention16_round_call(const bu_attn16 *x, int64_t hk, uint16_t *call) {
    const bu_attn *a = &x->a;
    const size_t kr = (size_t)a->n_head_kv * (size_t)a->head_dim, vr = (size_t)a->n_head_kv * (size_t)a->head_dim_v;
    uint16_t *cv = call + (size_t)a->n_tokens * (size_t)a->head_dim;
    for (int64_t t = 0; t < a->n_tokens; t++) {
        const float *ks = a->k + (size_t)t * kr + (size_t)hk * (size_t)a->head_dim;
        const float *vs = a->v + (size_t)t * vr + (size_t)hk * (size_t)a->head_dim_v;
        store_f16(call + (size_t)t * (size_t)a->head_dim, ks, a->head_dim);
        store_f16(cv + (size_t)t * (size_t)a->head_dim_v, vs, a->head_dim_v);
    }
}

/* q . k with k F16 widened exactly, in the "lanes8" order of bu__dot_f32 (products rounded, no FMA). */
static float dot16(const float *q, const uint16_t *k, int64_t n) {
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) l[j] += q[i + j] * bu__fp16_to_fp32(k[i + j]);
    for (int j = 0; i < n; i++, j++) l[j] += q[i] * bu__fp16_to_fp32(k[i]);
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

void bu__attention16_heads_scalar(const bu_attn16 *x, int64_t h0, int64_t h1, float *sc, uint16_t *call) {
    const bu_attn *a = &x->a;
    const int64_t group = a->n_head / a->n_head_kv;
    const uint16_t *cv = call ? call + (size_t)a->n_tokens * (size_t)a->head_dim : NULL;
    for (int64_t hk = h0 / group; hk * group < h1; hk++) {
        const int64_t hb = hk * group > h0 ? hk * group : h0, he = (hk + 1) * group < h1 ? (hk + 1) * group : h1;
        if (call) bu__attention16_round_call(x, hk, call);
        for (int64_t t = 0; t < a->n_tokens; t++) {
            const int64_t p = a->pos + t, j0 = bu__attn_first(a, p);
            for (int64_t h = hb; h < he; h++) {
                const float *qh = a->q + (size_t)(t * a->n_head + h) * (size_t)a->head_dim;
                for (int64_t j = j0; j <= p; j++) sc[j - j0] = dot16(qh, bu__attn16_key(x, call, j, hk), a->head_dim);
                bu__attention_softmax(a, sc, p - j0 + 1);
                float *o = a->out + (size_t)(t * a->n_head + h) * (size_t)a->head_dim_v;
                for (int64_t d = 0; d < a->head_dim_v; d++) o[d] = 0.0f;
                for (int64_t j = j0; j <= p; j++) {
                    const float wj = sc[j - j0];
                    const uint16_t *vj = bu__attn16_value(x, cv, j, hk);
                    for (int64_t d = 0; d < a->head_dim_v; d++) o[d] += wj * bu__fp16_to_fp32(vj[d]);
                }
            }
        }
    }
}

int bu_attention_f16_scalar(const float *q, const float *k, const float *v, uint16_t *k_cache, uint16_t *v_cache,
                            float *out, int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                            int64_t head_dim_v, int64_t n_ctx, int64_t pos, int64_t window, float scale,
                            float softcap, void *ws, size_t ws_cap) {
    const bu_attn16 x = {{q, k, v, (float *)(void *)k_cache, (float *)(void *)v_cache, out, n_tokens, n_head,
                          n_head_kv, head_dim, head_dim_v, n_ctx, pos, window, scale, softcap},
                         k_cache, v_cache};
    int empty;
    const int st = bu__attention_args(&x.a, sizeof(uint16_t), 0, n_head, ws, ws_cap, 1, 0, &empty);
    if (st != BU_OK || empty) return st;
    bu__attention16_append(&x, 0, n_head);
    bu__attention16_heads_scalar(&x, 0, n_head, (float *)ws, NULL);
    return BU_OK;
}
