/*
 * bu_linear_avx2.c - AVX2 providers of linear/1 for Q4_1 and Q8_0 weights (experimental).
 *
 * Same checks (bu__linear_driver) and the same numerical contract as the scalar reference, so
 * the result is bit-identical to linear.q4_1.scalar / linear.q8_0.scalar: the 8 AVX lanes are the
 * 8 lanes of the "lanes8" dot product (product rounded, then added: no FMA, the target is "avx2"
 * without "fma"), and dequantization performs the same fp32 operations as bu_dequant.c.
 * Compiled with a function-level target attribute so the library's baseline flags stay
 * x86-64-v2; the kernels refuse to run (BU_ERR_ARG) on a CPU without AVX2.
 */
#include <immintrin.h>

#include "bu_internal.h"

#define BU_AVX2 __attribute__((target("avx2")))

BU_AVX2 static float dot_avx2(const float *a, const float *b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k)));
    float l[8];
    _mm256_storeu_ps(l, acc);
    for (int j = 0; k < n; k++, j++) l[j] += a[k] * b[k];
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* 8 unsigned bytes -> 8 fp32 */
BU_AVX2 static inline __m256 u8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

/* Q4_1: w = q * d + m (product rounded, then sum) */
BU_AVX2 static void deq_q4_1_avx2(const uint8_t *restrict b, float *restrict y, int64_t nb) {
    const __m128i low4 = _mm_set1_epi8(0x0f);
    for (int64_t i = 0; i < nb; i++, b += BU_Q4_1_BLOCK_BYTES, y += 32) {
        const __m256 d = _mm256_set1_ps(bu__fp16_to_fp32(bu__ld16(b)));
        const __m256 m = _mm256_set1_ps(bu__fp16_to_fp32(bu__ld16(b + 2)));
        const __m128i qs = _mm_loadu_si128((const __m128i *)(b + 4));
        const __m128i lo = _mm_and_si128(qs, low4);
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(qs, 4), low4);
        _mm256_storeu_ps(y + 0, _mm256_add_ps(_mm256_mul_ps(u8x8_to_ps(lo), d), m));
        _mm256_storeu_ps(y + 8, _mm256_add_ps(_mm256_mul_ps(u8x8_to_ps(_mm_srli_si128(lo, 8)), d), m));
        _mm256_storeu_ps(y + 16, _mm256_add_ps(_mm256_mul_ps(u8x8_to_ps(hi), d), m));
        _mm256_storeu_ps(y + 24, _mm256_add_ps(_mm256_mul_ps(u8x8_to_ps(_mm_srli_si128(hi, 8)), d), m));
    }
}

/* Q8_0: w = q * d */
BU_AVX2 static void deq_q8_0_avx2(const uint8_t *restrict b, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += BU_Q8_0_BLOCK_BYTES, y += 32) {
        const __m256 d = _mm256_set1_ps(bu__fp16_to_fp32(bu__ld16(b)));
        for (int k = 0; k < 4; k++) {
            const __m128i q = _mm_loadl_epi64((const __m128i *)(b + 2 + 8 * k));
            _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
        }
    }
}

static int have_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

int bu_linear_q4_1_avx2(const float *x, const void *w, const float *bias, float *y, int64_t n_tokens,
                        int64_t n_in, int64_t n_out, void *ws, size_t ws_cap) {
    if (!have_avx2()) return BU_ERR_ARG;
    return bu__linear_driver(BU_TYPE_Q4_1, x, w, bias, y, n_tokens, n_in, n_out, ws, ws_cap, deq_q4_1_avx2, dot_avx2);
}

int bu_linear_q8_0_avx2(const float *x, const void *w, const float *bias, float *y, int64_t n_tokens,
                        int64_t n_in, int64_t n_out, void *ws, size_t ws_cap) {
    if (!have_avx2()) return BU_ERR_ARG;
    return bu__linear_driver(BU_TYPE_Q8_0, x, w, bias, y, n_tokens, n_in, n_out, ws, ws_cap, deq_q8_0_avx2, dot_avx2);
}
