/*
 * bu_attention_fast.c - attention.f32.fast: the dispatched attention provider. One entry point whose
 * ISA level was chosen when the library loaded (bu_cpu.c; BU_ISA forces one): scalar runs the
 * reference's code (same bits as attention.f32.scalar), avx2 and avx512 run bu_attention_avx2.c
 * (contract lanes8fma, within the bound its kernel map declares). A call computes the query heads
 * [head_begin, head_end) of the whole call's attention, so the runtime's threads each take a range
 * of heads (bringup/codegen/split.py) with no barrier between the K/V append and the reads: every
 * range reads this call's keys from k and v, and cache rows below pos only.
 */
#include "bu_attention.h"
#include "bu_fast.h"

int bu_attention_f32_fast(const float *q, const float *k, const float *v, float *k_cache, float *v_cache,
                          float *out, int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                          int64_t head_dim_v, int64_t n_ctx, int64_t pos, int64_t head_begin, int64_t head_end,
                          int64_t window, float scale, float softcap, void *ws, size_t ws_cap) {
    const bu_attn a = {q, k, v, k_cache, v_cache, out, n_tokens, n_head, n_head_kv, head_dim, head_dim_v,
                       n_ctx, pos, window, scale, softcap};
    int empty;
    const int level = bu__isa_level();
    const int st = bu__attention_args(&a, sizeof(float), head_begin, head_end, ws, ws_cap, BU_ATTN_TILE, 0, &empty);
    if (st != BU_OK || empty) return st;
    if (level == BU_ISA_INVALID) return BU_ERR_ARG;
    bu__attention_append(&a, head_begin, head_end);
    if (level == BU_ISA_SCALAR)
        bu__attention_heads_scalar(&a, head_begin, head_end, (float *)ws);
    else
        bu__attention_heads_avx2(&a, head_begin, head_end, (float *)ws);
    return BU_OK;
}
