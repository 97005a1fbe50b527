/*
 * bu_attention_f16_avx2.c - the avx2 (and avx512) level of attention.f16.fast: AVX2 + FMA + F16C,
 * compiled with a file-level target pragma and only called when bu_cpu.c chose a level that has them.
 *
 * attention.f32.fast's avx2 body (bu_attention_avx2_body.h: tiles of 4 query rows sharing a KV head,
 * contract "lanes8fma", bu__attention_softmax_avx2) on keys and values that are F16: each 8 halves
 * are widened exactly (vcvtph2ps) before the fused multiply-adds; a row's tail of head_dim
 * (head_dim_v) mod 8 is padded with +0. This call's rows of the KV head come from the scratch `call`,
 * rounded per KV head by bu__attention16_round_call (the cache's bits), never from cache rows another
 * head range of the same call appends.
 */
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>
#include <string.h>

#include "bu_attention_f16.h"

/* 8 halves at p widened exactly; the last n <= 8 of a row: the first n, the others +0. */
static inline __m256 ld8(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}
static inline __m256 ld_last(const uint16_t *p, int64_t n) {
    uint16_t t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (n == 8) return ld8(p);
    memcpy(t, p, (size_t)n * sizeof(uint16_t));
    return ld8(t);
}

#define ATT_X bu_attn16
#define ATT_A(x) (&(x)->a)
#define ATT_KT uint16_t
#define ATT_KEY(x, call, j, hk) bu__attn16_key(x, call, j, hk)
#define ATT_VALUE(x, call, j, hk) bu__attn16_value(x, call, j, hk)
#define ATT_LD8(p) ld8(p)
#define ATT_LDLAST(p, n, m) ld_last(p, n)
#define ATT_PREP(x, hk, call) bu__attention16_round_call(x, hk, call)
#define ATT_HEADS heads_f16
#include "bu_attention_avx2_body.h"

void bu__attention16_heads_avx2(const bu_attn16 *x, int64_t h0, int64_t h1, float *sc, uint16_t *call) {
    heads_f16(x, h0, h1, sc, call);
}
