/*
 * bu_attention_avx2.c - the avx2 (and avx512) level of attention.f32.fast: AVX2 + FMA, compiled with
 * a file-level target pragma and only called when bu_cpu.c chose a level that has them. The body
 * (tiles of 4 query rows sharing a KV head, contract "lanes8fma") is bu_attention_avx2_body.h, over
 * fp32 key and value rows; this file also holds the level's softmax, shared with attention.f16.fast.
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include <math.h>

#include "bu_attention_simd.h"
#include "bu_simd_exp.h"

/* bu_attention_simd.h; exp by bu__exp8 (bu_simd_exp.h). */
void bu__attention_softmax_avx2(const bu_attn *a, float *s, int64_t n) {
    const int64_t n8 = n & ~(int64_t)7;
    const __m256 sv = _mm256_set1_ps(a->scale);
    __m256 mx = _mm256_set1_ps(-INFINITY);
    if (a->softcap > 0.0f) {
        bu__attention_softmax_logits(a, s, n);
    } else {
        for (int64_t j = 0; j < n8; j += 8) _mm256_storeu_ps(s + j, _mm256_mul_ps(sv, _mm256_loadu_ps(s + j)));
        for (int64_t j = n8; j < n; j++) s[j] = a->scale * s[j];
    }
    float m = -INFINITY;
    for (int64_t j = 0; j < n8; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + j));
    {
        float l[8];
        _mm256_storeu_ps(l, mx);
        for (int c = 0; c < 8; c++) m = l[c] > m ? l[c] : m;
        for (int64_t j = n8; j < n; j++) m = s[j] > m ? s[j] : m;
    }
    const __m256 mv = _mm256_set1_ps(m);
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (int64_t j = 0; j < n; j += 8) {
        const __m256i mask = bu__attn_tail_mask(n - j < 8 ? n - j : 8);
        const __m256 e = bu__exp8(_mm256_sub_ps(_mm256_maskload_ps(s + j, mask), mv));
        _mm256_maskstore_ps(s + j, mask, e);
        const __m256 ez = _mm256_and_ps(e, _mm256_castsi256_ps(mask)); /* lanes past the row add +0 */
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(ez)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(ez, 1)));
    }
    double l[4];
    _mm256_storeu_pd(l, _mm256_add_pd(lo, hi));
    const __m256 inv = _mm256_set1_ps((float)(1.0 / ((l[0] + l[1]) + (l[2] + l[3]))));
    for (int64_t j = 0; j < n8; j += 8) _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), inv));
    for (int64_t j = n8; j < n; j++) s[j] = s[j] * _mm256_cvtss_f32(inv);
}

#define ATT_X bu_attn
#define ATT_A(x) (x)
#define ATT_KT float
#define ATT_KEY(x, call, j, hk) bu__attn_key(x, j, hk)
#define ATT_VALUE(x, call, j, hk) bu__attn_value(x, j, hk)
#define ATT_LD8(p) _mm256_loadu_ps(p)
#define ATT_LDLAST(p, n, m) _mm256_maskload_ps(p, m)
#define ATT_PREP(x, hk, call) ((void)0)
#define ATT_HEADS heads_f32
#include "bu_attention_avx2_body.h"

void bu__attention_heads_avx2(const bu_attn *a, int64_t h0, int64_t h1, float *sc) { heads_f32(a, h0, h1, sc, NULL); }
