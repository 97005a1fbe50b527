/*
 * bu_linear_fast_avx2.c - the AVX2 + FMA level of the fast linear providers (bu_linear_fast.c).
 *
 * Weights are dequantized straight into registers (bu_fast_deq.h: the reference's fp32 values, bit
 * for bit) and multiplied into fp32 accumulators with FMA. Contract "lanes16fma" (docs/kernels.md):
 * element k of a dot product goes to lane k mod 16 (here: two 8-lane registers, lanes 0-7 and
 * 8-15), lane = fma(x_k, w_k, lane) in increasing k from +0; then v_j = l_j + l_{j+8},
 * u_j = v_j + v_{j+4}, s_j = u_j + u_{j+2}, dot = s_0 + s_1; then + bias. The AVX-512 level
 * computes exactly the same operations, so both levels give the same bits; the order never
 * depends on n_tokens, on how rows are blocked or on a thread's row range.
 *
 * Forms: one token (decode) streams each weight row once, 4 rows at a time so that 8 FMA chains
 * are in flight. Many tokens (prefill), when n_in is a multiple of 32: the weight rows are unpacked
 * bu__panel_rows(n_in) (bu_fast.h) at a time into an fp32 panel in the workspace (F32 weights are their own panel),
 * and every token of the call is multiplied with the panel by a 2-row x 3-token micro-kernel (12
 * accumulator registers; activations and weights both read as vectors, as the contract's lanes are
 * positions k mod 16, not tokens), so each weight is unpacked once per call instead of once per 4
 * tokens. Other many-token shapes unpack each 32-weight chunk into registers and use it for 4
 * tokens. Compiled for avx2,fma,f16c by the pragma below; only called when bu_cpu.c chose this
 * level.
 */
#pragma GCC target("avx2,fma,f16c")

#include "bu_fast.h"
#include "bu_fast_deq.h"

typedef void (*deq_fn)(const uint8_t *row, int64_t j, __m256 w[4], float *ks);

#define TB 32 /* tokens whose activations are reused across all weight rows */

#include "bu_fast_gemv256.h" /* the one-token form (shared with the AVX-512 level) */

#define hsum16 hsum16x2
#define tail_w tail_w256
#define FMA_CHUNK FMA_CHUNK256
#define gemv_rows gemv256_rows

/* T tokens (T <= 4, rows of x `ldx` apart), one weight row: y[t * ldy] for t < T. */
BU_AI void gemm_row(deq_fn deq, int32_t type, int T, const float *x, int64_t ldx, const uint8_t *wr,
                    int64_t n_in, const float *bias, float *y, int64_t ldy) {
    __m256 a0[4], a1[4], w[4];
    float ks[16];
    for (int t = 0; t < 4; t++) a0[t] = a1[t] = _mm256_setzero_ps();
    const int64_t nc = n_in / 32, rem = type <= BU_TYPE_F16 || type == BU_TYPE_BF16 ? n_in % 32 : 0;
    for (int64_t j = 0; j < nc; j++) {
        deq(wr, j, w, ks);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) FMA_CHUNK(a0[t], a1[t], x + t * ldx + 32 * j, w);
    }
    if (rem) {
        tail_w(type, wr, 32 * nc, rem, w);
        for (int t = 0; t < T; t++) {
            float xb[32];
            tail_x(x + t * ldx, 32 * nc, rem, xb);
            FMA_CHUNK(a0[t], a1[t], xb, w);
        }
    }
    for (int t = 0; t < T; t++) {
        const float s = hsum16(a0[t], a1[t]);
        y[t * ldy] = bias ? s + *bias : s;
    }
}

/* Keeps v in a register: the compiler would otherwise fold its load into each FMA that uses it,
 * loading the same activations once per weight row (loads, not FMAs, then bound the loop). */
#define BU_IN_REGISTER(v) __asm__("" : "+x"(v))

#define PANEL_R 2 /* the many-token micro-kernel's tile: weight rows x tokens (bu_fast_panel.h) */
#define PANEL_T 3

/* R panel rows (p, rows ldp floats apart) x T tokens (x, rows ldx apart), n_in % 16 == 0:
 * y[t * ldy + r] = dot + bias[r]. Lanes 0-7 take k mod 16 < 8, lanes 8-15 the rest, as above. */
BU_AI void micro(int R, int T, const float *p, int64_t ldp, const float *x, int64_t ldx, int64_t n_in,
                 const float *bias, float *y, int64_t ldy) {
    __m256 lo[PANEL_T][PANEL_R], hi[PANEL_T][PANEL_R];
    for (int t = 0; t < PANEL_T; t++)
        for (int r = 0; r < PANEL_R; r++) lo[t][r] = hi[t][r] = _mm256_setzero_ps();
    for (int64_t k = 0; k < n_in; k += 16) {
        __m256 w[2];
        BU_UNROLL
        for (int r = 0; r < R; r++) w[r] = _mm256_loadu_ps(p + r * ldp + k);
        BU_UNROLL
        for (int t = 0; t < T; t++) {
            __m256 xv = _mm256_loadu_ps(x + t * ldx + k);
            BU_IN_REGISTER(xv);
            BU_UNROLL
            for (int r = 0; r < R; r++) lo[t][r] = _mm256_fmadd_ps(xv, w[r], lo[t][r]);
        }
        BU_UNROLL
        for (int r = 0; r < R; r++) w[r] = _mm256_loadu_ps(p + r * ldp + k + 8);
        BU_UNROLL
        for (int t = 0; t < T; t++) {
            __m256 xv = _mm256_loadu_ps(x + t * ldx + k + 8);
            BU_IN_REGISTER(xv);
            BU_UNROLL
            for (int r = 0; r < R; r++) hi[t][r] = _mm256_fmadd_ps(xv, w[r], hi[t][r]);
        }
    }
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++) {
            const float s = hsum16(lo[t][r], hi[t][r]);
            y[t * ldy + r] = bias ? s + bias[r] : s;
        }
}

/* Weights 32j..32j+31 of a row, as fp32 at p (the panel): the decoder's values */
BU_AI void unpack_chunk(deq_fn deq, const uint8_t *row, int64_t j, float *p, float *ks) {
    __m256 v[4];
    deq(row, j, v, ks);
    for (int g = 0; g < 4; g++) _mm256_storeu_ps(p + 8 * g, v[g]);
}

#include "bu_fast_panel.h"

BU_AI void linear(deq_fn deq, int32_t type, const float *x, const uint8_t *w, const float *bias, float *y,
                  int64_t n_tokens, int64_t n_in, int64_t n_out, size_t row_bytes, float *ws) {
    if (panel_linear(deq, type, x, w, bias, y, n_tokens, n_in, n_out, row_bytes, ws)) return;
    if (n_tokens == 1) {
        decode_linear(deq, type, x, w, bias, y, n_in, n_out, row_bytes);
        return;
    }
    for (int64_t t0 = 0; t0 < n_tokens; t0 += TB) {
        const int64_t t1 = t0 + TB < n_tokens ? t0 + TB : n_tokens;
        for (int64_t r = 0; r < n_out; r++) {
            const uint8_t *wr = w + (size_t)r * row_bytes;
            const float *b = bias ? bias + r : NULL;
            int64_t t = t0;
            for (; t + 4 <= t1; t += 4)
                gemm_row(deq, type, 4, x + t * n_in, n_in, wr, n_in, b, y + t * n_out + r, n_out);
            for (; t < t1; t++)
                gemv_rows(deq, type, 1, x + t * n_in, wr, row_bytes, row_bytes, 0, n_in, b, y + t * n_out + r, 1);
        }
    }
}

BU_FAST_INSTANCES

BU_FAST_ENTRY(bu__fast_avx2)
