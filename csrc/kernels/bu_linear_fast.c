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

#define BU_FAST(NAME, name, VD, vd)                                                                \
    int bu_linear_##name##_fast(BU_LINEAR_ARGS) {                                                   \
        return fast(BU_TYPE_##NAME, x, w, bias, y, n_tokens, n_in, n_out, ws, ws_cap);             \
    }
BU_DOT_FORMATS(BU_FAST)
