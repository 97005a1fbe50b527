/*
 * bu_linear_fast_avx512.c - the AVX-512 (F, BW, VL) level of the fast linear providers.
 *
 * Same contract as the AVX2 level ("lanes16fma", bu_linear_fast_avx2.c): one 16-lane register per
 * dot product, lane k mod 16 takes element k with an FMA in increasing k, then the same reduction
 * tree (v_j = l_j + l_{j+8} is the sum of the register's two 256-bit halves). The operations are
 * those of the AVX2 level one for one, so both give the same bits (tests/test_kernels_fast.py checks
 * it on every AVX2 host: without AVX-512 through SIMDe, bu_avx512_emulated.h). Weights are unpacked
 * by the same decoders (bu_fast_deq.h) and paired into 512-bit registers. One token (decode): the
 * AVX2 level's 256-bit form (bu_fast_gemv256.h: the 512-bit one was 1.2-1.5x slower). Many tokens, n_in a multiple of 32: the AVX2 level's fp32 panel
 * (bu__panel_rows(n_in) unpacked weight rows in the workspace; F32 weights are their own panel), with a
 * 4-row x 6-token micro-kernel (24 accumulators of the 32 registers); other many-token shapes: 8
 * tokens x 2 rows per chunk unpacked into registers (16 accumulators). Compiled for
 * avx512f,avx512bw,avx512vl (+ the avx2 level) by the pragma below; only called when bu_cpu.c
 * chose this level.
 */
#ifdef BU_EMULATE_AVX512
#include "bu_avx512_emulated.h" /* test builds only */
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
#endif

#include "bu_fast.h"
#include "bu_fast_deq.h"

typedef void (*deq_fn)(const uint8_t *row, int64_t j, __m256 w[4], float *ks);

#define TB 32 /* tokens whose activations are reused across all weight rows */

BU_AI __m512 pair(__m256 lo, __m256 hi) {
    const __m512d l = _mm512_castps_pd(_mm512_castps256_ps512(lo));
    return _mm512_castpd_ps(_mm512_insertf64x4(l, _mm256_castps_pd(hi), 1));
}

/* the lanes16fma reduction: v = low half + high half, then as the AVX2 level */
BU_AI float hsum16(__m512 a) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
    const __m256 v = _mm256_add_ps(_mm512_castps512_ps256(a), hi);
    const __m128 u = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

/* 32 weights as two 16-lane registers: elements 0-15 and 16-31 */
BU_AI void deq2(deq_fn deq, const uint8_t *row, int64_t j, __m512 W[2], float *ks) {
    __m256 w[4];
    deq(row, j, w, ks);
    W[0] = pair(w[0], w[1]);
    W[1] = pair(w[2], w[3]);
}

BU_AI void tail_w(int32_t type, const uint8_t *row, int64_t k0, int64_t n, __m512 W[2]) {
    float buf[32];
    tail_w32(type, row, k0, n, buf);
    W[0] = _mm512_loadu_ps(buf);
    W[1] = _mm512_loadu_ps(buf + 16);
}

#define FMA_CHUNK(a, xp, W)                                        \
    do {                                                           \
        a = _mm512_fmadd_ps(_mm512_loadu_ps((xp) + 0), W[0], a);   \
        a = _mm512_fmadd_ps(_mm512_loadu_ps((xp) + 16), W[1], a);  \
    } while (0)

/* T tokens (<= 8) x R rows (<= 4), row r at wr + r * rs: y[t * ldy + r * yr] (+ bias[r * yr]); with
 * one token each chunk read also asks for the bytes pf further on (bu_fast.h, BU_DECODE_STREAMS) */
BU_AI void tile(deq_fn deq, int32_t type, int T, int R, const float *x, int64_t ldx, const uint8_t *wr, size_t rs,
                size_t row_bytes, size_t pf, int64_t n_in, const float *bias, float *y, int64_t ldy, int64_t yr) {
    __m512 a[8][4], W[4][2];
    float ks[4][16]; /* each row's scale cache (bu_fast_deq.h) */
    for (int t = 0; t < 8; t++)
        for (int r = 0; r < 4; r++) a[t][r] = _mm512_setzero_ps();
    const int64_t nc = n_in / 32, rem = type <= BU_TYPE_F16 || type == BU_TYPE_BF16 ? n_in % 32 : 0;
    const size_t cb = nc ? row_bytes / (size_t)nc : 0; /* bytes of one 32-weight chunk */
    const int kb = T == 1 ? BU_CHUNKS_UNROLLED(type) : 1; /* decode: a K-quant block per trip (bu_fast.h) */
    for (int64_t jb = 0; jb < nc / kb; jb++) {
#pragma GCC unroll 8
        for (int c = 0; c < kb; c++) {
            const int64_t j = kb * jb + c;
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                if (T == 1) bu__prefetch(wr + (size_t)r * rs + (size_t)j * cb + pf, cb); /* decode */
                deq2(deq, wr + (size_t)r * rs, j, W[r], ks[r]);
            }
#pragma GCC unroll 8
            for (int t = 0; t < T; t++)
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) FMA_CHUNK(a[t][r], x + t * ldx + 32 * j, W[r]);
        }
    }
    if (rem) {
        for (int r = 0; r < R; r++) tail_w(type, wr + (size_t)r * rs, 32 * nc, rem, W[r]);
        for (int t = 0; t < T; t++) {
            float xb[32];
            tail_x(x + t * ldx, 32 * nc, rem, xb);
            for (int r = 0; r < R; r++) FMA_CHUNK(a[t][r], xb, W[r]);
        }
    }
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++) {
            const float s = hsum16(a[t][r]);
            y[t * ldy + r * yr] = bias ? s + bias[r * yr] : s;
        }
}

#define PANEL_R 4 /* the many-token micro-kernel's tile: weight rows x tokens (bu_fast_panel.h) */
#define PANEL_T 6

/* R panel rows (p, rows ldp floats apart) x T tokens (x, rows ldx apart), n_in % 16 == 0:
 * y[t * ldy + r] = dot + bias[r], one 16-lane accumulator per output (lane = k mod 16). */
BU_AI void micro(int R, int T, const float *p, int64_t ldp, const float *x, int64_t ldx, int64_t n_in,
                 const float *bias, float *y, int64_t ldy) {
    __m512 a[PANEL_T][PANEL_R];
    for (int t = 0; t < PANEL_T; t++)
        for (int r = 0; r < PANEL_R; r++) a[t][r] = _mm512_setzero_ps();
    for (int64_t k = 0; k < n_in; k += 16) {
        __m512 w[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) w[r] = _mm512_loadu_ps(p + r * ldp + k);
#pragma GCC unroll 6
        for (int t = 0; t < T; t++) {
            const __m512 xv = _mm512_loadu_ps(x + t * ldx + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) a[t][r] = _mm512_fmadd_ps(xv, w[r], a[t][r]);
        }
    }
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++) {
            const float s = hsum16(a[t][r]);
            y[t * ldy + r] = bias ? s + bias[r] : s;
        }
}

/* Weights 32j..32j+31 of a row, as fp32 at p (the panel): the decoder's values */
BU_AI void unpack_chunk(deq_fn deq, const uint8_t *row, int64_t j, float *p, float *ks) {
    __m512 v[2];
    deq2(deq, row, j, v, ks);
    _mm512_storeu_ps(p, v[0]);
    _mm512_storeu_ps(p + 16, v[1]);
}

/* one token, R rows rs bytes apart (bu_fast_panel.h's decode_linear): the 256-bit form, as the
 * AVX2 level (bu_fast_gemv256.h says why) */
#include "bu_fast_gemv256.h"
#define gemv_rows gemv256_rows

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
        int64_t r = 0;
        for (; r + 2 <= n_out; r += 2) {
            const uint8_t *wr = w + (size_t)r * row_bytes;
            const float *b = bias ? bias + r : NULL;
            int64_t t = t0;
            for (; t + 8 <= t1; t += 8)
                tile(deq, type, 8, 2, x + t * n_in, n_in, wr, row_bytes, row_bytes, 0, n_in, b, y + t * n_out + r, n_out, 1);
            for (; t < t1; t++)
                for (int64_t i = r; i < r + 2; i++)
                    tile(deq, type, 1, 1, x + t * n_in, n_in, w + (size_t)i * row_bytes, row_bytes, row_bytes, 0,
                         n_in, bias ? bias + i : NULL, y + t * n_out + i, n_out, 1);
        }
        for (; r < n_out; r++)
            for (int64_t t = t0; t < t1; t++)
                tile(deq, type, 1, 1, x + t * n_in, n_in, w + (size_t)r * row_bytes, row_bytes, row_bytes, 0, n_in,
                     bias ? bias + r : NULL, y + t * n_out + r, n_out, 1);
    }
}

BU_FAST_INSTANCES

BU_FAST_ENTRY(bu__fast_avx512)
