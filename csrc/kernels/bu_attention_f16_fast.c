/*
 * bu_attention_f16_fast.c - attention.f16.fast: the dispatched attention provider over an F16 KV cache.
 * One entry point whose ISA level was chosen when the library loaded (bu_cpu.c; BU_ISA forces one):
 * scalar runs the reference's code (same bits as attention.f16.scalar), avx2 and avx512 run
 * bu_attention_f16_avx2.c (contract lanes8fma, within the bound its kernel map declares). As
 * attention.f32.fast, a call computes the query heads [head_begin, head_end), so the runtime's threads
 * each take a range with no barrier between the append and the reads: each range rounds this call's
 * rows of the KV heads it reads into its own scratch (the bits the cache gets) and reads cache rows
 * below pos only.
 */
#include "bu_attention_f16.h"
#include "bu_fast.h"

int bu_attention_f16_fast(const float *q, const float *k, const float *v, uint16_t *k_cache, uint16_t *v_cache,
                          float *out, int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                          int64_t head_dim_v, int64_t n_ctx, int64_t pos, int64_t head_begin, int64_t head_end,
                          int64_t window, float scale, float softcap, void *ws, size_t ws_cap) {
    const bu_attn16 x = {{q, k, v, (float *)(void *)k_cache, (float *)(void *)v_cache, out, n_tokens, n_head,
                          n_head_kv, head_dim, head_dim_v, n_ctx, pos, window, scale, softcap},
                         k_cache, v_cache};
    int empty;
    const int level = bu__isa_level();
    /* scratch after the score rows: one KV head's rows of this call, F16 (bu__attention16_round_call) */
    size_t extra = 0;
    if (bu__dim_ok(n_tokens) && bu__dim_ok(head_dim) && bu__dim_ok(head_dim_v) &&
        !bu__bytes(n_tokens, head_dim + head_dim_v, sizeof(uint16_t), &extra))
        return BU_ERR_ARG; /* the byte count overflows size_t */
    const int st = bu__attention_args(&x.a, sizeof(uint16_t), head_begin, head_end, ws, ws_cap, BU_ATTN_TILE, extra,
                                      &empty);
    if (st != BU_OK || empty) return st;
    if (level == BU_ISA_INVALID) return BU_ERR_ARG;
    bu__attention16_append(&x, head_begin, head_end);
    float *sc = (float *)ws;
    uint16_t *call = (uint16_t *)(void *)(sc + (size_t)BU_ATTN_TILE * (size_t)n_ctx);
    if (level == BU_ISA_SCALAR)
        bu__attention16_heads_scalar(&x, head_begin, head_end, sc, call);
    else
        bu__attention16_heads_avx2(&x, head_begin, head_end, sc, call);
    return BU_OK;
}
