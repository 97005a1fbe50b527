/*
 * bu_linear_fast.c - the dispatched linear/1 providers bu_linear_<fmt>_fast (kernel maps
 * linear.<fmt>.fast): one entry point per weight format, whose ISA level bu_cpu.c chose once at
 * load time (CPUID, or BU_ISA); with both avx2 and avx512 (the same bits), per class of call by
 * measurement (bu_cpu.c, bu__isa_pick).
 *
 *   scalar  runs the reference provider bu_linear_<fmt>_scalar: contract lanes8, the same bits;
 *   avx2    bu_linear_fast_avx2.c, contract lanes16fma;
 *   avx512  bu_linear_fast_avx512.c, contract lanes16fma (the same bits as avx2).
 *
 * Argument checking is the reference's (bu__linear_sizes / bu__linear_args) with one workspace
 * size for every level, bu__panel_rows(n_in) * n_in * 4 bytes for all formats but F32 (the SIMD levels'
 * many-token panel; the scalar level uses its first n_in * 4 bytes), so every level returns the
 * same status for the same arguments. A BU_ISA level the host lacks
 * leaves no level: every call returns BU_ERR_ARG and writes nothing (bu_isa_check says why).
 * The result of every level depends only on x[t] and weight row r, never on n_tokens or on
 * which rows a call covers, so bu_linear_rows' row split gives the same bits for any thread count.
 */
#include "bu_fast.h"

static int fast(int32_t type, const float *x, const void *w, const float *bias, float *y, int64_t n_tokens,
                int64_t n_in, int64_t n_out, void *ws, size_t ws_cap) {
    bu_linear_sizes sz;
    size_t need = 0;
    int rc, empty;
    if ((rc = bu__linear_sizes(type, n_tokens, n_in, n_out, &sz)) != BU_OK) return rc;
    if (type != BU_TYPE_F32 && !bu__bytes(n_in, bu__panel_rows(n_in), sizeof(float), &need)) return BU_ERR_ARG;
    if (bu__isa_level() == BU_ISA_INVALID) return BU_ERR_ARG;
    if ((rc = bu__linear_args(&sz, n_tokens, n_out, x, w, bias, y, ws, ws_cap, need, &empty)) != BU_OK || empty)
        return rc;
    bu_isa_turn turn;
    const int level = bu__isa_pick(type, 0, n_tokens, n_in, &turn);
    if (level == BU_ISA_SCALAR)
        return bu__linear_driver(type, x, w, bias, y, n_tokens, n_in, n_out, ws, ws_cap, bu__format(type)->dequant,
                                 bu__dot_lanes8);
    (level == BU_ISA_AVX512 ? bu__fast_avx512 : bu__fast_avx2)(type, x, (const uint8_t *)w, bias, y, n_tokens, n_in,
                                                               n_out, sz.row, (float *)ws);
    bu__isa_pick_done(&turn, n_tokens * n_out);
    return BU_OK;
}

#define BU_FAST(fmt, TYPE)                                                                                   \
    int bu_linear_##fmt##_fast(const float *x, const void *w, const float *bias, float *y, int64_t n_tokens, \
                               int64_t n_in, int64_t n_out, void *ws, size_t ws_cap) {                       \
        return fast(TYPE, x, w, bias, y, n_tokens, n_in, n_out, ws, ws_cap);                                 \
    }

BU_FAST(f32, BU_TYPE_F32)
BU_FAST(f16, BU_TYPE_F16)
BU_FAST(bf16, BU_TYPE_BF16)
BU_FAST(q4_0, BU_TYPE_Q4_0)
BU_FAST(q4_1, BU_TYPE_Q4_1)
BU_FAST(q5_0, BU_TYPE_Q5_0)
BU_FAST(q5_1, BU_TYPE_Q5_1)
BU_FAST(q8_0, BU_TYPE_Q8_0)
BU_FAST(q2_k, BU_TYPE_Q2_K)
BU_FAST(q3_k, BU_TYPE_Q3_K)
BU_FAST(q4_k, BU_TYPE_Q4_K)
BU_FAST(q5_k, BU_TYPE_Q5_K)
BU_FAST(q6_k, BU_TYPE_Q6_K)
BU_FAST(iq4_nl, BU_TYPE_IQ4_NL)
BU_FAST(iq4_xs, BU_TYPE_IQ4_XS)
BU_FAST(tq1_0, BU_TYPE_TQ1_0)
BU_FAST(tq2_0, BU_TYPE_TQ2_0)
