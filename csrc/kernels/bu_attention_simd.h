/*
 * bu_attention_simd.h - AVX2 helpers shared by the avx2 levels of attention.f32.fast
 * (bu_attention_avx2.c) and attention.f16.fast (bu_attention_f16_avx2.c). Include after the file's
 * `#pragma GCC target("avx2,fma...")`: these are only called on levels that have AVX2 + FMA.
 */
#ifndef BU_ATTENTION_SIMD_H
#define BU_ATTENTION_SIMD_H

#include <immintrin.h>

#include "bu_attention.h"

static inline __m256i bu__attn_tail_mask(int64_t n) { /* lanes [0, n) set, 0 <= n <= 8 */
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx);
}

/* The lanes of 4 dot products combined in the contract's tree: [a, b, c, d]. */
static inline __m128 bu__attn_combine4(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d); /* (l0+l1), (l2+l3) per row */
    const __m256 abcd = _mm256_hadd_ps(ab, cd);                         /* (l0+l1)+(l2+l3) | (l4+l5)+(l6+l7) */
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* The avx2 level's softmax of one row of n raw dots, in place (bu_attention_avx2.c): logit = scale *
 * dot (and the soft-cap, as the reference: tanhf); max; e_j = bu__exp8(logit_j - max); the sum of e_j
 * in double, key j into lane j mod 8, lanes combined as ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7));
 * weight_j = e_j * fp32(1 / sum). */
__attribute__((visibility("hidden"))) void bu__attention_softmax_avx2(const bu_attn *a, float *s, int64_t n);

#endif /* BU_ATTENTION_SIMD_H */
