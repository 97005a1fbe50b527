/*
 * bu_attention_f16.h - internal to the attention providers over an F16 KV cache (bu_attention_f16.c,
 * bu_attention_f16_fast.c, bu_attention_f16_avx2.c; docs/kernels.md, "attention.f16.*"): one call's arguments and the
 * per-level bodies. The fp32 providers' argument checks and softmax are reused (bu_attention.h).
 */
#ifndef BU_ATTENTION_F16_H
#define BU_ATTENTION_F16_H

#include "bu_attention.h"

/* One call: `a` holds q, k, v, out, the dims and params (a.k_cache / a.v_cache point at the F16
 * caches only for the argument checks and are never read through); the caches are IEEE binary16. */
typedef struct {
    bu_attn a;
    uint16_t *k_cache, *v_cache;
} bu_attn16;

/* Key (value) row j of KV head hk as F16: cache rows below pos; from pos on this call's rows, from
 * `call` ([n_tokens, head_dim] of head hk, rounded as the cache stores them) when it is not NULL,
 * else from the cache (the reference, which appended them before reading). */
static inline const uint16_t *bu__attn16_key(const bu_attn16 *x, const uint16_t *call, int64_t j, int64_t hk) {
    const bu_attn *a = &x->a;
    if (call && j >= a->pos) return call + (size_t)(j - a->pos) * (size_t)a->head_dim;
    return x->k_cache + ((size_t)j * (size_t)a->n_head_kv + (size_t)hk) * (size_t)a->head_dim;
}
static inline const uint16_t *bu__attn16_value(const bu_attn16 *x, const uint16_t *call, int64_t j, int64_t hk) {
    const bu_attn *a = &x->a;
    if (call && j >= a->pos) return call + (size_t)(j - a->pos) * (size_t)a->head_dim_v;
    return x->v_cache + ((size_t)j * (size_t)a->n_head_kv + (size_t)hk) * (size_t)a->head_dim_v;
}

/* out[t, h] for every token and h in [h0, h1) over the F16 cache, arguments checked and the cache
 * appended. `call` NULL (the reference): this call's rows are read from the cache; else `call` has
 * room for one KV head's rows of this call (n_tokens * (head_dim + head_dim_v) halves) and each head's rows are rounded
 * from k / v into it, the same bits the cache holds. Scalar: lanes8 q.k on the exactly widened keys,
 * the reference's softmax and fp32 V sums, sc = n_ctx floats. AVX2 + FMA + F16C: lanes8fma,
 * sc = BU_ATTN_TILE * n_ctx floats. */
__attribute__((visibility("hidden"))) void bu__attention16_heads_scalar(const bu_attn16 *x, int64_t h0, int64_t h1,
                                                                        float *sc, uint16_t *call);
__attribute__((visibility("hidden"))) void bu__attention16_heads_avx2(const bu_attn16 *x, int64_t h0, int64_t h1,
                                                                      float *sc, uint16_t *call);

/* Appends the call's K / V rows, rounded to F16, for the KV heads whose first query head lies in
 * [h0, h1) (as bu__attention_append). */
__attribute__((visibility("hidden"))) void bu__attention16_append(const bu_attn16 *x, int64_t h0, int64_t h1);

/* This call's rows t of KV head hk rounded to F16 (round to nearest even): K into call[0 ..
 * n_tokens * head_dim), V after it. */
__attribute__((visibility("hidden"))) void bu__attention16_round_call(const bu_attn16 *x, int64_t hk, uint16_t *call);

#endif /* BU_ATTENTION_F16_H */
