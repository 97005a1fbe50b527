/*
 * bu_attention.h - internal to the attention providers (bu_attention.c, bu_attention_fast.c,
 * bu_attention_avx2.c): one call's arguments, the shared argument checks, and the per-level bodies
 * that compute the query heads [h0, h1) of a call (docs/kernels.md, "attention.f32.fast").
 */
#ifndef BU_ATTENTION_H
#define BU_ATTENTION_H

#include "bu_internal.h"

/* One call's arguments, as the public prototypes take them. */
typedef struct {
    const float *q, *k, *v;
    float *k_cache, *v_cache, *out;
    int64_t n_tokens, n_head, n_head_kv, head_dim, head_dim_v, n_ctx, pos, window;
    float scale, softcap;
} bu_attn;

/* Query rows the fast provider's SIMD level processes together (one score row each in ws). */
#define BU_ATTN_TILE 4

/* Checks in the documented order: dims and params, heads 0 <= h0 <= h1 <= n_head (-2); nothing to do
 * (n_tokens = 0 or h0 = h1: 0 with *empty set); NULL pointers (-1); ws_cap below ws_rows * n_ctx * 4
 * + ws_extra (-3); out, the caches (kv_elem bytes per element: 4 for fp32, 2 for F16) or ws overlapping anything
 * else (-2). */
__attribute__((visibility("hidden"))) int bu__attention_args(const bu_attn *a, size_t kv_elem, int64_t h0, int64_t h1,
                                                             const void *ws, size_t ws_cap, int64_t ws_rows,
                                                             size_t ws_extra, int *empty);

/* Appends this call's K and V rows (positions pos ..) for the KV heads whose first query head
 * hk * (n_head / n_head_kv) lies in [h0, h1): over any partition of [0, n_head) into ranges each KV
 * head is appended exactly once. */
__attribute__((visibility("hidden"))) void bu__attention_append(const bu_attn *a, int64_t h0, int64_t h1);

/* The same rows into caches of `elem` bytes per element, each K / V row of n fp32 values written by
 * `store` (fp32: a copy; F16: round to nearest even, bu_attention_f16.c). */
typedef void (*bu_attn_store_fn)(void *dst, const float *src, int64_t n);
__attribute__((visibility("hidden"))) void bu__attention_append_as(const bu_attn *a, void *k_cache, void *v_cache,
                                                                   size_t elem, bu_attn_store_fn store, int64_t h0,
                                                                   int64_t h1);

/* Key j's row of KV head hk: cache rows before pos, this call's k (v) from pos on, so a head range
 * never reads a cache row that another range of the same call appends. */
static inline const float *bu__attn_key(const bu_attn *a, int64_t j, int64_t hk) {
    const size_t row = (size_t)a->n_head_kv * (size_t)a->head_dim;
    return j < a->pos ? a->k_cache + (size_t)j * row + (size_t)hk * (size_t)a->head_dim
                      : a->k + (size_t)(j - a->pos) * row + (size_t)hk * (size_t)a->head_dim;
}
static inline const float *bu__attn_value(const bu_attn *a, int64_t j, int64_t hk) {
    const size_t row = (size_t)a->n_head_kv * (size_t)a->head_dim_v;
    return j < a->pos ? a->v_cache + (size_t)j * row + (size_t)hk * (size_t)a->head_dim_v
                      : a->v + (size_t)(j - a->pos) * row + (size_t)hk * (size_t)a->head_dim_v;
}

/* First key position a query at position p attends to (window 0: none). */
static inline int64_t bu__attn_first(const bu_attn *a, int64_t p) {
    return (a->window > 0 && p - a->window + 1 > 0) ? p - a->window + 1 : 0;
}

/* Row of n raw dot products -> logits in place: scale * dot, then the optional soft-cap
 * softcap * tanhf(l / softcap), each rounded to fp32 (every level). */
__attribute__((visibility("hidden"))) void bu__attention_softmax_logits(const bu_attn *a, float *s, int64_t n);

/* Row of n raw dot products -> softmax weights, in place: logit = scale * dot, the optional
 * soft-cap, max subtracted, e = expf in fp32, sum in double in increasing j, weight = e * fp32(1 / sum).
 * The reference's (and the scalar level's); the avx2 level has its own exp and sum order. */
__attribute__((visibility("hidden"))) void bu__attention_softmax(const bu_attn *a, float *s, int64_t n);

/* out[t, h] for every token and h in [h0, h1), arguments already checked. Scalar: the reference's
 * contract (lanes8 q.k, fp32 products and sums), sc = n_ctx floats. AVX2 + FMA: lanes8fma, sc =
 * BU_ATTN_TILE * n_ctx floats. */
__attribute__((visibility("hidden"))) void bu__attention_heads_scalar(const bu_attn *a, int64_t h0, int64_t h1,
                                                                      float *sc);
__attribute__((visibility("hidden"))) void bu__attention_heads_avx2(const bu_attn *a, int64_t h0, int64_t h1,
                                                                    float *sc);

#endif /* BU_ATTENTION_H */
