/*
 * bu_linear_q8fast.c - the dispatched ggml-q8 linear/1 providers bu_linear_<fmt>_<act>_fast
 * (kernel maps linear.<fmt>.q8act.fast): one entry point per weight format, whose ISA level
 * bu_cpu.c chose once at load time (CPUID, or BU_ISA).
 *
 *   scalar  runs bu_linear_<fmt>_<act>_scalar (bu_linear_q8act.c): the same bits;
 *   avx2    bu_linear_q8fast_avx2.c, contract "q8lanes8fma" (bu_q8fast.h);
 *   avx512  bu_linear_q8fast_avx512.c (AVX-512 VNNI) when the CPU has avx512vnni, else the avx2
 *           code; both give the avx2 level's bits.
 *
 * Argument checks are bu__q8act_check's with a scratch of BU_Q8FAST_ROWS quantized rows, so every
 * level returns the same status for the same arguments (a BU_ISA level the host lacks: BU_ERR_ARG
 * for every call, nothing written). The SIMD levels quantize up to BU_Q8FAST_ROWS token rows at a
 * time into the scratch, once per call, and reuse them for every weight row. The result of every
 * level depends only on x[t] and weight row r, so bu_linear_rows' row split and bu_linear_tiles'
 * token split give the same bits for any thread count.
 */
#include "bu_fast.h"
#include "bu_q8fast.h"

typedef int (*scalar_fn)(const float *x, const void *w, const float *bias, float *y, int64_t n_tokens,
                         int64_t n_in, int64_t n_out, void *ws, size_t ws_cap);

static int have_vnni(void) {
#ifdef BU_EMULATE_AVX512
    return 1; /* test builds: VNNI emulated too (bu_avx512_emulated.h) */
#else
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni");
#endif
}

static int q8fast(int32_t type, int act, scalar_fn scalar, const float *x, const void *w, const float *bias,
                  float *y, int64_t n_tokens, int64_t n_in, int64_t n_out, void *ws, size_t ws_cap) {
    size_t row_bytes, xrow_bytes;
    int rc, empty;
    if (bu__isa_level() == BU_ISA_INVALID) return BU_ERR_ARG;
    if ((rc = bu__q8act_check(type, act, BU_Q8FAST_ROWS, x, w, bias, y, n_tokens, n_in, n_out, ws, ws_cap,
                              &row_bytes, &xrow_bytes, &empty)) != BU_OK || empty)
        return rc;
    bu_isa_turn turn; /* avx2 or avx512 (VNNI) by measurement (bu_cpu.c), or the forced level */
    const int level = bu__isa_pick(type, 1, n_tokens, n_in, &turn);
    if (level == BU_ISA_SCALAR) return scalar(x, w, bias, y, n_tokens, n_in, n_out, ws, ws_cap);
    const bu_q8fast_fn f = level == BU_ISA_AVX512 && have_vnni() ? bu__q8fast_avx512 : bu__q8fast_avx2;
    const int64_t nb = n_in / (act == ACT_Q8_K ? 256 : 32);
    uint8_t *xq = (uint8_t *)ws;
    for (int64_t t0 = 0; t0 < n_tokens; t0 += BU_Q8FAST_ROWS) {
        const int64_t g = n_tokens - t0 < BU_Q8FAST_ROWS ? n_tokens - t0 : BU_Q8FAST_ROWS;
        for (int64_t i = 0; i < g; i++) bu__q8_quantize(act, x + (t0 + i) * n_in, xq + (size_t)i * xrow_bytes, nb);
        f(type, xq, xrow_bytes, g, (const uint8_t *)w, row_bytes, n_in, n_out, bias, y + t0 * n_out);
    }
    bu__isa_pick_done(&turn, n_tokens * n_out);
    return BU_OK;
}

#define BU_Q8FAST(NAME, name, VD, vd)                                                                    \
    int bu_linear_##name##_##vd##_fast(BU_LINEAR_ARGS) {                                                  \
        return q8fast(BU_TYPE_##NAME, ACT_##VD, bu_linear_##name##_##vd##_scalar, x, w, bias, y, n_tokens, n_in, \
                      n_out, ws, ws_cap);                                                                 \
    }
BU_Q8ACT_FORMATS(BU_Q8FAST)
