/*
 * bu_fast_gemv256.h - the one-token (decode) form of the fast linear providers in 256-bit
 * registers, one text for the AVX2 and the AVX-512 level (included by bu_linear_fast_avx2.c /
 * _avx512.c after bu_fast_deq.h, so compiled under each file's target pragma).
 *
 * Why the AVX-512 level decodes in 256-bit registers too: on an Ice Lake Xeon (2 vCPUs,
 * 2026-12-03, docs/kernels.md) its 512-bit one-token form was 1.27-1.48x slower than this one for
 * every format and shape of smollm2 and gemma3, the memory-bound Q8_0 head included (12.8 against
 * 9.4 GB/s). Decode is bound by unpacking and by memory, not by FMAs: while 512-bit operations
 * are in flight the core's port-1 vector unit is fused into them, leaving two ports for the
 * unpacking's conversions, shifts and logic instead of three, and the 512-bit FMAs lower the
 * core's frequency licence; the pairing of two 256-bit unpacked halves into one 512-bit register
 * adds a shuffle per 16 weights. Under the AVX-512 target the compiler may still use EVEX
 * encodings and 32 registers for this code (no licence or port cost at 256 bits).
 *
 * Contract lanes16fma (docs/kernels.md): two 8-lane registers, lanes 0-7 and 8-15; element k of a
 * dot product goes to lane k mod 16 with one FMA in increasing k; then v_j = l_j + l_{j+8},
 * u_j = v_j + v_{j+4}, s_j = u_j + u_{j+2}, dot = s_0 + s_1; then + bias. So both levels give
 * the same bits (tests/test_kernels_fast.py).
 */
#ifndef BU_FAST_GEMV256_H
#define BU_FAST_GEMV256_H

/* dot = the lanes16fma reduction of the accumulator pair (lanes 0-7, lanes 8-15) */
BU_AI float hsum16x2(__m256 a0, __m256 a1) {
    const __m256 v = _mm256_add_ps(a0, a1);
    const __m128 u = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

BU_AI void tail_w256(int32_t type, const uint8_t *row, int64_t k0, int64_t n, __m256 w[4]) {
    float buf[32];
    tail_w32(type, row, k0, n, buf);
    for (int g = 0; g < 4; g++) w[g] = _mm256_loadu_ps(buf + 8 * g);
}

/* acc pair += x[0..31] * w[0..3]: elements 0-7 and 16-23 to lanes 0-7, 8-15 and 24-31 to 8-15 */
#define FMA_CHUNK256(a0, a1, xp, w)                                     \
    do {                                                                \
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps((xp) + 0), w[0], a0);     \
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps((xp) + 8), w[1], a1);     \
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps((xp) + 16), w[2], a0);    \
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps((xp) + 24), w[3], a1);    \
    } while (0)

/* One token, R rows (R <= 4): row r at wr + r * rs, its output y[r * ys] (+ bias[r * ys]). Each
 * chunk read also asks for the bytes pf further on (bu_fast.h, BU_DECODE_STREAMS). deq is the
 * format's decoder (bu_fast_deq.h). */
BU_AI void gemv256_rows(void (*deq)(const uint8_t *, int64_t, __m256 *, float *), int32_t type, int R,
                        const float *x, const uint8_t *wr, size_t rs, size_t row_bytes, size_t pf, int64_t n_in,
                        const float *bias, float *y, int64_t ys) {
    __m256 a0[4], a1[4], w[4];
    float ks[4][16]; /* each row's scale cache (bu_fast_deq.h) */
    for (int r = 0; r < 4; r++) a0[r] = a1[r] = _mm256_setzero_ps();
    const int64_t nc = n_in / 32, rem = type <= BU_TYPE_F16 || type == BU_TYPE_BF16 ? n_in % 32 : 0;
    const size_t cb = nc ? row_bytes / (size_t)nc : 0; /* bytes of one 32-weight chunk */
    const int kb = BU_CHUNKS_UNROLLED(type);
    for (int64_t jb = 0; jb < nc / kb; jb++) {
#pragma GCC unroll 8
        for (int c = 0; c < kb; c++) {
            const int64_t j = kb * jb + c; /* c, so j % 8 for a K-quant, a constant in each unrolled copy */
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                bu__prefetch(wr + (size_t)r * rs + (size_t)j * cb + pf, cb);
                deq(wr + (size_t)r * rs, j, w, ks[r]);
                FMA_CHUNK256(a0[r], a1[r], x + 32 * j, w);
            }
        }
    }
    if (rem) {
        float xb[32];
        tail_x(x, 32 * nc, rem, xb);
        for (int r = 0; r < R; r++) {
            tail_w256(type, wr + (size_t)r * rs, 32 * nc, rem, w);
            FMA_CHUNK256(a0[r], a1[r], xb, w);
        }
    }
    for (int r = 0; r < R; r++) {
        const float s = hsum16x2(a0[r], a1[r]);
        y[r * ys] = bias ? s + bias[r * ys] : s;
    }
}

#endif /* BU_FAST_GEMV256_H */
