/*
 * bu_glu_avx2.c - the avx2 (and avx512) level of swiglu.f32.fast and geglu.f32.fast (dispatch in
 * bu_elementwise.c), AVX2 + FMA through a file-level target pragma, run only where bu_cpu.c chose
 * such a level. Arguments are already checked; y may be exactly gate or up (each lane is read
 * before it is written).
 *
 * SwiGLU: y = (g / (1 + e^-g)) * up, the reference's operations with e^x from bu_simd_exp.h.
 * GeGLU: gelu_tanh(g) = 0.5 g (1 + tanh z) = g / (1 + e^(-2z)), z = sqrt(2/pi) (g + 0.044715 g^3)
 * formed with the reference's fp32 operations (no FMA); the sigmoid form has no cancellation where
 * 1 + tanh z is small (the reference's 1 + tanhf(z) loses relative accuracy there).
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>

#include "bu_internal.h"
#include "bu_simd_exp.h"

static inline __m256i lanes(size_t n) { /* lanes [0, n) set, n <= 8 */
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline __m256 swiglu8(__m256 g, __m256 u) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = bu__exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
}

static inline __m256 geglu8(__m256 g, __m256 u) {
    const __m256 one = _mm256_set1_ps(1.0f);
    /* k0 * (g + k1 * g * g * g), left to right as the reference writes it */
    const __m256 c = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), g), g), g);
    const __m256 z = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_add_ps(g, c));
    const __m256 e = bu__exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), z));   /* exact doubling */
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
}

#define GLU_LOOP(name, f)                                                                       \
    void name(const float *gate, const float *up, float *y, size_t cnt) {                       \
        size_t i = 0;                                                                           \
        for (; i + 8 <= cnt; i += 8)                                                            \
            _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));     \
        if (i < cnt) {                                                                          \
            const __m256i m = lanes(cnt - i);                                                   \
            const __m256 r = f(_mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m)); \
            _mm256_maskstore_ps(y + i, m, r);                                                   \
        }                                                                                       \
    }
GLU_LOOP(bu__swiglu_avx2, swiglu8)
GLU_LOOP(bu__geglu_avx2, geglu8)
