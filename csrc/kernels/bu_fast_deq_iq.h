/*
 * bu_fast_deq_iq.h - the fast providers' chunk decoders (bu_fast_deq.h's interface: deq_<fmt>(row,
 * j, w, ks) puts weights 32j .. 32j+31 of a row into w[0..3]) for IQ4_NL, IQ4_XS, TQ1_0 and TQ2_0.
 * Included by bu_fast_deq.h, so compiled under the including SIMD file's target pragma. None of
 * them uses the scale cache ks (a chunk's scale costs a few integer operations), so any chunk may
 * be read first. Every weight is bu_dequant.c's value bit for bit: each is one product of an fp16
 * scale (or d * (ls - 32), exact in fp32) with a small integer, exact in fp32 as in the
 * reference; only a zero weight's sign may differ where the reference has -0 (d < 0), which
 * lanes16fma cannot see (bu_fast_deq.h).
 */
#ifndef BU_FAST_DEQ_IQ_H
#define BU_FAST_DEQ_IQ_H

/* 16 bytes of 4-bit IQ4 indices (low nibbles: weights 0..15, high: 16..31) -> the kvalues_iq4nl
 * values (ggml-common.h) times dl: one byte shuffle per half looks the 16 values up */
BU_AI void iq4_apply(const uint8_t *qs, __m256 dl, __m256 w[4]) {
    const __m128i kv = _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    const __m128i v = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_shuffle_epi8(kv, _mm_and_si128(v, m));
    const __m128i hi = _mm_shuffle_epi8(kv, _mm_and_si128(_mm_srli_epi16(v, 4), m));
    w[0] = _mm256_mul_ps(dl, i8_ps(lo));
    w[1] = _mm256_mul_ps(dl, i8_ps(_mm_srli_si128(lo, 8)));
    w[2] = _mm256_mul_ps(dl, i8_ps(hi));
    w[3] = _mm256_mul_ps(dl, i8_ps(_mm_srli_si128(hi, 8)));
}

/* IQ4_NL: chunk j = block j; w = d * kvalues[q] */
BU_AI void deq_iq4_nl(const uint8_t *row, int64_t j, __m256 w[4], float *ks) {
    (void)ks;
    const uint8_t *b = row + BU_IQ4_NL_BLOCK_BYTES * j;
    iq4_apply(b + 2, _mm256_set1_ps(f16(b)), w);
}

/* IQ4_XS: chunk j = sub-block s = j % 8 of block j / 8; dl = d * (ls - 32) with the 6-bit ls of
 * bu_dequant.c, then as IQ4_NL on qs[16s ..] */
BU_AI void deq_iq4_xs(const uint8_t *row, int64_t j, __m256 w[4], float *ks) {
    (void)ks;
    const uint8_t *b = row + BU_IQ4_XS_BLOCK_BYTES * (size_t)(j >> 3);
    const int s = (int)(j & 7);
    const int ls = ((b[4 + s / 2] >> (4 * (s & 1))) & 0x0f) | (((bu__ld16(b + 2) >> (2 * s)) & 3) << 4);
    iq4_apply(b + 8 + 16 * s, _mm256_set1_ps(f16(b) * (float)(ls - 32)), w);
}

/* TQ2_0: chunk j = (h, l) = ((j % 8) / 4, j % 4) of block j / 8: bits 2l of qs[32h + i];
 * w = (q - 1) * d */
BU_AI void deq_tq2_0(const uint8_t *row, int64_t j, __m256 w[4], float *ks) {
    (void)ks;
    const uint8_t *b = row + BU_TQ2_0_BLOCK_BYTES * (size_t)(j >> 3);
    const int c = (int)(j & 7);
    const __m256 d = _mm256_set1_ps(f16(b + 64));
    const __m256i qs = _mm256_loadu_si256((const __m256i *)(b + 32 * (c >> 2)));
    const __m256i q = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * (c & 3))), _mm256_set1_epi8(3));
    __m128i v[4];
    split32(_mm256_sub_epi8(q, _mm256_set1_epi8(1)), v);
    BU_UNROLL
    for (int g = 0; g < 4; g++) w[g] = _mm256_mul_ps(d, i8_ps(v[g]));
}

/* 16 TQ1_0 bytes x with per-byte multipliers p (3^n): digit - 1 = (((uint8)(x * p) * 3) >> 8) - 1,
 * as 16 int16, into two groups of 8 fp32 weights times d */
BU_AI void tq1_apply(__m128i x, __m256i p, __m256 d, __m256 *w) {
    __m256i v = _mm256_and_si256(_mm256_mullo_epi16(_mm256_cvtepu8_epi16(x), p), _mm256_set1_epi16(0xff));
    v = _mm256_sub_epi16(_mm256_srli_epi16(_mm256_mullo_epi16(v, _mm256_set1_epi16(3)), 8), _mm256_set1_epi16(1));
    w[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(v))));
    w[1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(v, 1))));
}

/* TQ1_0 chunk c = j % 8 of block j / 8 (bu_dequant.c's weight order): c < 5: digit c of qs[0..31];
 * 5 and 6: digits 2(c-5) and 2(c-5)+1 of qs[32..47]; 7: digit 4 of qs[32..47], then digit n of
 * qh[m] for weight 4n + m (qh's 4 bytes repeated 4 times, multipliers 1, 3, 9, 27 per 4) */
BU_AI void deq_tq1_0(const uint8_t *row, int64_t j, __m256 w[4], float *ks) {
    (void)ks;
    static const int16_t POW[5] = {1, 3, 9, 27, 81};
    const uint8_t *b = row + BU_TQ1_0_BLOCK_BYTES * (size_t)(j >> 3);
    const int c = (int)(j & 7);
    const __m256 d = _mm256_set1_ps(f16(b + 52));
    if (c < 5) {
        const __m256i p = _mm256_set1_epi16(POW[c]);
        tq1_apply(_mm_loadu_si128((const __m128i *)b), p, d, w);
        tq1_apply(_mm_loadu_si128((const __m128i *)(b + 16)), p, d, w + 2);
        return;
    }
    const __m128i x = _mm_loadu_si128((const __m128i *)(b + 32));
    if (c < 7) {
        tq1_apply(x, _mm256_set1_epi16(POW[2 * (c - 5)]), d, w);
        tq1_apply(x, _mm256_set1_epi16(POW[2 * (c - 5) + 1]), d, w + 2);
        return;
    }
    tq1_apply(x, _mm256_set1_epi16(81), d, w);
    tq1_apply(_mm_set1_epi32((int)bu__ld32(b + 48)),
              _mm256_setr_epi16(1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27), d, w + 2);
}

#endif /* BU_FAST_DEQ_IQ_H */
