/*
 * bu_q8fast.h - the dispatched ggml-q8 linear providers (bu_linear_q8fast.c): the per-level entry
 * points and the integer-dot-product body the SIMD levels compile (internal, not the public ABI;
 * docs/kernels.md "Fast providers").
 *
 * The entry (bu_linear_q8fast.c) checks the arguments, quantizes up to BU_Q8FAST_ROWS token rows
 * at a time into the scratch (bu__q8_quantize: the contract's bits) and hands them to the level's
 * bu__q8fast_<level>, which computes y for those tokens and every weight row.
 *
 * Contract "q8lanes8fma" (the SIMD levels; the integer parts are the ggml-q8 contract's, exact):
 * each 32-element chunk of a block gives 8 int32 lanes, lane j = the (sub-block scale *) sum of the
 * 4 products q_w * q_x of elements 4j..4j+3 (exact: maddubs pairs never saturate for these
 * ranges, VNNI's dpbusd forms the same sums); a block's lanes are summed over its chunks in int32
 * (exact, every lane below 2^24 so its fp32 conversion is exact too). Per block b, in increasing b:
 * acc_j = fma(dw*dx, float(isum_j), acc_j) (dw*dx one fp32 rounding, as the scalar provider), then
 * for Q2_K / Q4_K / Q5_K acc_j = fma(-(dminw*dx), float(msum_j), acc_j) with msum_j = m_2j*bsum_2j
 * + m_2j+1*bsum_2j+1 (exact); Q4_1 / Q5_1 add ms = ((0 + mw_0*sx_0) + mw_1*sx_1) + ... (products
 * rounded, no FMA). Then u_j = acc_j + acc_j+4, s_j = u_j + u_j+2, dot = s_0 + s_1 (+ ms), + bias.
 * The order never depends on n_tokens, on tiling or on the rows a call covers.
 */
#ifndef BU_Q8FAST_H
#define BU_Q8FAST_H

#include "bu_q8.h"

/* Token rows quantized per pass (the kernel maps' scratch is this many quantized rows). */
#define BU_Q8FAST_ROWS 32

/* y[t * n_out + r] for t < n_tokens (<= BU_Q8FAST_ROWS), r < n_out, from the quantized activation
 * rows xq (xrow_bytes apart) and the weight rows w (row_bytes apart). Arguments already checked. */
typedef void (*bu_q8fast_fn)(int32_t type, const uint8_t *xq, size_t xrow_bytes, int64_t n_tokens,
                             const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t n_out, const float *bias,
                             float *y);

__attribute__((visibility("hidden"))) void bu__q8fast_avx2(int32_t type, const uint8_t *xq, size_t xrow_bytes,
                                                           int64_t n_tokens, const uint8_t *w, size_t row_bytes,
                                                           int64_t n_in, int64_t n_out, const float *bias, float *y);
__attribute__((visibility("hidden"))) void bu__q8fast_avx512(int32_t type, const uint8_t *xq, size_t xrow_bytes,
                                                             int64_t n_tokens, const uint8_t *w, size_t row_bytes,
                                                             int64_t n_in, int64_t n_out, const float *bias,
                                                             float *y);

#endif /* BU_Q8FAST_H */
