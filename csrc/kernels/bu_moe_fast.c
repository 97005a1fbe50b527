/*
 * bu_moe_fast.c - the dispatched moe_ffn providers bu_moe_ffn_<fmt>_fast (kernel maps
 * moe_ffn.<fmt>.fast): bu_moe.c's routed feed-forward with each selected expert's gate, up and
 * down applied through the dispatched linear provider bu_linear_<fmt>_fast instead of the
 * reference bu_linear_<fmt>_scalar. Routing, the gather of the rows routed to an expert, silu * up,
 * and the weighted sum in increasing expert index are bu_moe.c's, unchanged, so:
 *   scalar  (BU_ISA level chosen at load) the linear runs its reference: the same bits as
 *           bu_moe_ffn_<fmt>_scalar;
 *   avx2 / avx512  each matrix product is linear.<fmt>.fast's lanes16fma (the same bits at both
 *           levels; within its declared bound of the reference's lanes8).
 * The workspace is bu_moe.c's, its last part sized for linear.<fmt>.fast's own workspace (the
 * many-token panel of the wider of n_embd and n_ff; none for F32) instead of the reference's row.
 * Never allocates.
 */
#include "bu_fast.h"

/* linear.<fmt>.fast's workspace (bu_linear_fast.c: bu__panel_rows(n_in) * n_in floats, none for
 * F32) for n_in = n_embd (gate, up) and n_in = n_ff (down): the larger of the two */
static int bu__moe_fast_lin_ws(int32_t type, int64_t n_embd, int64_t n_ff, size_t *bytes) {
    size_t a, b;
    if (type == BU_TYPE_F32) {
        *bytes = 0;
        return BU_OK;
    }
    if (!bu__bytes(n_embd, bu__panel_rows(n_embd), sizeof(float), &a) ||
        !bu__bytes(n_ff, bu__panel_rows(n_ff), sizeof(float), &b))
        return BU_ERR_ARG;
    *bytes = a > b ? a : b;
    return BU_OK;
}

#define BU_MOE_FFN_FAST(fmt, TYPE)                                                                     \
    int bu_moe_ffn_##fmt##_fast(const float *x, const float *logits, const void *w_gate, const void *w_up,  \
                                const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, \
                                int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, \
                                void *ws, size_t ws_cap) {                                                \
        return bu__moe_ffn(TYPE, bu_linear_##fmt##_fast, bu__moe_fast_lin_ws, x, logits, w_gate, w_up, w_down, y, \
                           n_tokens, n_embd, n_ff, n_expert, n_used, gating, norm, scale, ws, ws_cap);      \
    }

BU_MOE_FFN_FAST(f32, BU_TYPE_F32)
BU_MOE_FFN_FAST(f16, BU_TYPE_F16)
BU_MOE_FFN_FAST(bf16, BU_TYPE_BF16)
BU_MOE_FFN_FAST(q4_0, BU_TYPE_Q4_0)
BU_MOE_FFN_FAST(q4_1, BU_TYPE_Q4_1)
BU_MOE_FFN_FAST(q5_0, BU_TYPE_Q5_0)
BU_MOE_FFN_FAST(q5_1, BU_TYPE_Q5_1)
BU_MOE_FFN_FAST(q8_0, BU_TYPE_Q8_0)
BU_MOE_FFN_FAST(q4_k, BU_TYPE_Q4_K)
BU_MOE_FFN_FAST(q6_k, BU_TYPE_Q6_K)
