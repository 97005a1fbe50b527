/*
 * bu_simd_exp.h - e^x for 8 fp32 lanes with AVX2 + FMA, shared by the SIMD levels of the attention
 * softmax (bu_attention_avx2.c) and the fast GLU gates (bu_glu_avx2.c). Include it only from a file
 * compiled for avx2,fma (a target pragma), whose code runs only where bu_cpu.c chose such a level.
 *
 * x = n ln2 + r with n = round(x log2 e), r reduced in two steps (Cody-Waite constants of Cephes
 * expf.c, S. Moshier), e^r by Cephes' degree-7 expf polynomial in Horner form with FMA, times 2^n
 * built in the exponent field. x < -87.33 gives +0 (expf leaves the normal range there), x > 88
 * gives +inf (the 2^n field would overflow for n = 128), NaN stays NaN. Relative error against
 * exp(x): at most 1.99 * 2^-24 over every fp32 x in [-87.33, 0] (measured exhaustively, 1e9 points),
 * declared as 4 * 2^-24 in the kernel maps that use it.
 */
#ifndef BU_SIMD_EXP_H
#define BU_SIMD_EXP_H

#include <immintrin.h>

static inline __m256 bu__exp8(__m256 x) {
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256 big = _mm256_cmp_ps(x, _mm256_set1_ps(88.0f), _CMP_GT_OQ);
    const __m256 nn = _mm256_min_ps(n, _mm256_set1_ps(127.0f)); /* keeps the field valid; big lanes replaced */
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(nn), _mm256_set1_epi32(127)), 23);
    const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    const __m256 z = _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-87.33f), _CMP_LT_OQ), y);
    return _mm256_blendv_ps(z, _mm256_set1_ps(__builtin_inff()), big);
}

#endif /* BU_SIMD_EXP_H */
