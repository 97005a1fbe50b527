/*
 * bu_fast_deq.h - GGML weights -> fp32 SIMD registers, 32 weights ("a chunk") at a time, for the
 * fast linear providers. Included only by files compiled for AVX2 + FMA + F16C or higher (their
 * `#pragma GCC target` applies to these inline functions).
 *
 * deq_<fmt>(row, j, w, ks) puts weights 32j .. 32j+31 of a weight row into w[0..3] (8 each, in
 * order). ks is the row's scale cache (16 floats per row being read): Q4_K, Q5_K and Q6_K fill it
 * at a block's first chunk (j % 8 == 0) with the block's sub-block scales (unpacking them once per
 * block, not per chunk, halves Q4_K's decode time), so callers read each row's chunks in
 * increasing j from a block's start; the other formats ignore it.
 * Every weight is the value bu_dequant.c (the reference) computes, bit for bit. Where the reference
 * rounds a product and then adds an offset (Q4_1 / Q5_1 / K-quant minimum; Q4_0 / Q5_0's q - 8 /
 * q - 16 taken as q * d - 8d), one fused multiply-add gives the same value: the product of a
 * quant (<= 8 bits) and an fp16 scale (11 bits, or fp16 x 6-bit sub-scale = 17 bits) is exact in
 * fp32, so only the sum is rounded, once, as in the reference (-ffp-contract=off there). Saving
 * the separate add / integer offset made Q4_1 / Q5_0 / Q5_1 / Q4_K decode 9-16 % faster (AVX2, A/B
 * 2026-12-02). A zero weight may come out as +0 where the reference has -0 (q - 16 = 0 with d < 0);
 * the product lanes16fma forms with it is the same (an accumulator starting at +0 is never -0).
 * Block layouts as in bu_dequant.c
 * (ggml-common.h). The F32 / F16 / BF16 forms read 32 consecutive elements; a row's tail shorter
 * than 32 is handled by the caller.
 */
#ifndef BU_FAST_DEQ_H
#define BU_FAST_DEQ_H

#include <immintrin.h>

#include "bu_internal.h"

#define BU_AI __attribute__((always_inline)) static inline
/* the 4 groups of a chunk: fully unrolled so w[] and q[] stay in registers */
#define BU_UNROLL _Pragma("GCC unroll 4")

BU_AI __m256 u8_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }
BU_AI __m256 i8_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }
/* fp16 scale -> fp32 with F16C (exact, as bu__fp16_to_fp32) */
BU_AI float f16(const uint8_t *p) { return _cvtsh_ss(bu__ld16(p)); }

/* Q5_0 / Q5_1 high bits by table: BU_Q5_HI[b][i] = 16 * (bit i of b). Byte g of a block's 32-bit qh
 * holds the high bits of weights 8g .. 8g+7, so one aligned 32-byte load gives group g's 16s and
 * one integer add puts them on the nibbles (q = nibble + 16 * bit, the format's 5-bit value). It
 * replaces 2-3 vector shifts and logic ops per 8 weights, which contend with the conversions for
 * the same ports: one-token Q5_0 1.10-1.37x on one thread, hot and cold (AVX2 EPYC, 2026-12-02,
 * same bits). 8 KiB, L1-resident while the rows stream past. */
#define BU_Q5_E(b, i) ((((b) >> (i)) & 1) * 16)
#define BU_Q5_R1(b) {BU_Q5_E(b, 0), BU_Q5_E(b, 1), BU_Q5_E(b, 2), BU_Q5_E(b, 3), BU_Q5_E(b, 4), BU_Q5_E(b, 5), \
                     BU_Q5_E(b, 6), BU_Q5_E(b, 7)}
#define BU_Q5_R4(b) BU_Q5_R1(b), BU_Q5_R1((b) + 1), BU_Q5_R1((b) + 2), BU_Q5_R1((b) + 3)
#define BU_Q5_R16(b) BU_Q5_R4(b), BU_Q5_R4((b) + 4), BU_Q5_R4((b) + 8), BU_Q5_R4((b) + 12)
#define BU_Q5_R64(b) BU_Q5_R16(b), BU_Q5_R16((b) + 16), BU_Q5_R16((b) + 32), BU_Q5_R16((b) + 48)
static const int32_t BU_Q5_HI[256][8] __attribute__((aligned(32))) = {BU_Q5_R64(0), BU_Q5_R64(64), BU_Q5_R64(128),
                                                                       BU_Q5_R64(192)};
#undef BU_Q5_R64
#undef BU_Q5_R16
#undef BU_Q5_R4
#undef BU_Q5_R1
#undef BU_Q5_E

/* 16 bytes of 4-bit values (low nibbles: weights 0..15, high: 16..31) -> 4 x 8 int32 in weight
 * order: each byte zero-extended once, then masked (low) or shifted (high) */
BU_AI void nib32(const uint8_t *qs, __m256i q[4]) {
    const __m256i m = _mm256_set1_epi32(0x0f);
    const __m256i z0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)qs));
    const __m256i z1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8)));
    q[0] = _mm256_and_si256(z0, m);
    q[1] = _mm256_and_si256(z1, m);
    q[2] = _mm256_srli_epi32(z0, 4);
    q[3] = _mm256_srli_epi32(z1, 4);
}

BU_AI void deq_f32(const uint8_t *row, int64_t j, __m256 w[4], float *ks) {
    (void)ks;
    const float *p = (const float *)(const void *)row + 32 * j;
    BU_UNROLL
    for (int g = 0; g < 4; g++) w[g] = _mm256_loadu_ps(p + 8 * g);
}

BU_AI void deq_f16(const uint8_t *row, int64_t j, __m256 w[4], float *ks) {
    (void)ks;
    const uint8_t *p = row + 64 * j;
    BU_UNROLL
    for (int g = 0; g < 4; g++) w[g] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * g)));
}

BU_AI void deq_bf16(const uint8_t *row, int64_t j, __m256 w[4], float *ks) {
    (void)ks;
    const uint8_t *p = row + 64 * j;
    BU_UNROLL
    for (int g = 0; g < 4; g++)
        w[g] = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 16 * g))), 16));
}

/* Q4_0: w = fp32(q - 8) * d */
BU_AI void deq_q4_0(const uint8_t *row, int64_t j, __m256 w[4], float *ks) {
    (void)ks;
    const uint8_t *b = row + BU_Q4_0_BLOCK_BYTES * j;
    const __m256 d = _mm256_set1_ps(f16(b));
    __m256i q[4];
    nib32(b + 2, q);
    const __m256 dm = _mm256_mul_ps(_mm256_set1_ps(-8.0f), d); /* -8d, exact */
    BU_UNROLL
    for (int g = 0; g < 4; g++) w[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[g]), d, dm);
}

/* Q4_1: w = fp32(q) * d + m (product rounded, then sum) */
BU_AI void deq_q4_1(const uint8_t *row, int64_t j, __m256 w[4], float *ks) {
    (void)ks;
    const uint8_t *b = row + BU_Q4_1_BLOCK_BYTES * j;
    const __m256 d = _mm256_set1_ps(f16(b)), m = _mm256_set1_ps(f16(b + 2));
    __m256i q[4];
    nib32(b + 4, q);
    BU_UNROLL
    for (int g = 0; g < 4; g++) w[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[g]), d, m);
}

/* The 32 5-bit values of a Q5_0 / Q5_1 block as int32: q = nibble + 16 * (bit i of the 32-bit qh) */
BU_AI void q5_values(const uint8_t *qh_at, const uint8_t *qs_at, __m256i q[4]) {
    nib32(qs_at, q);
    BU_UNROLL
    for (int g = 0; g < 4; g++) q[g] = _mm256_add_epi32(q[g], _mm256_load_si256((const __m256i *)BU_Q5_HI[qh_at[g]]));
}

/* Q5_0: w = fp32(q - 16) * d, taken as fma(q, d, -16d): q * d is exact and so is the sum's true
 * value (q - 16) * d, so the one rounding gives the reference's weight. */
BU_AI void deq_q5_0(const uint8_t *row, int64_t j, __m256 w[4], float *ks) {
    (void)ks;
    const uint8_t *b = row + BU_Q5_0_BLOCK_BYTES * j;
    const __m256 d = _mm256_set1_ps(f16(b));
    const __m256 dm = _mm256_mul_ps(_mm256_set1_ps(-16.0f), d); /* -16d, exact */
    __m256i q[4];
    q5_values(b + 2, b + 6, q);
    BU_UNROLL
    for (int g = 0; g < 4; g++) w[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[g]), d, dm);
}

/* Q5_1: w = fp32(q) * d + m */
BU_AI void deq_q5_1(const uint8_t *row, int64_t j, __m256 w[4], float *ks) {
    (void)ks;
    const uint8_t *b = row + BU_Q5_1_BLOCK_BYTES * j;
    const __m256 d = _mm256_set1_ps(f16(b)), m = _mm256_set1_ps(f16(b + 2));
    __m256i q[4];
    q5_values(b + 4, b + 8, q);
    BU_UNROLL
    for (int g = 0; g < 4; g++) w[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[g]), d, m);
}

/* Q8_0: w = fp32(q) * d */
BU_AI void deq_q8_0(const uint8_t *row, int64_t j, __m256 w[4], float *ks) {
    (void)ks;
    const uint8_t *b = row + BU_Q8_0_BLOCK_BYTES * j;
    const __m256 d = _mm256_set1_ps(f16(b));
    BU_UNROLL
    for (int g = 0; g < 4; g++) w[g] = _mm256_mul_ps(i8_ps(_mm_loadl_epi64((const __m128i *)(b + 2 + 8 * g))), d);
}

/* 32 bytes -> 4 x 8 bytes */
BU_AI void split32(__m256i v, __m128i q[4]) {
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    q[0] = lo;
    q[1] = _mm_srli_si128(lo, 8);
    q[2] = hi;
    q[3] = _mm_srli_si128(hi, 8);
}

/* K-quant chunk with a scale and a minimum: w = dl * q - ml for the 4 groups of 8 bytes of v,
 * given nml = -ml (dl * q is exact, so one fused multiply-add rounds as the reference's product
 * then difference) */
BU_AI void kq_min_apply(__m256i v, __m256 dl, __m256 nml, __m256 w[4]) {
    __m128i q[4];
    split32(v, q);
    BU_UNROLL
    for (int g = 0; g < 4; g++) w[g] = _mm256_fmadd_ps(dl, u8_ps(q[g]), nml);
}

/* Q2_K chunk j = (n, s) = (j / 4, j % 4): bits 2s of qs[32n + i], scale/min byte 8n + 2s + i/16;
 * w = (d*sc) * q - (dmin*m) */
BU_AI void deq_q2_k(const uint8_t *row, int64_t j, __m256 w[4], float *ks) {
    (void)ks;
    const uint8_t *b = row + BU_Q2_K_BLOCK_BYTES * (j >> 3);
    const int c = (int)(j & 7), n = c >> 2, s = c & 3;
    const float d = f16(b + 80), dmin = f16(b + 82);
    const __m256i qs = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * n));
    const __m256i v = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * s)), _mm256_set1_epi8(3));
    __m128i q[4];
    split32(v, q);
    BU_UNROLL
    for (int h = 0; h < 2; h++) {
        const uint8_t scm = b[8 * n + 2 * s + h];
        const __m256 dl = _mm256_set1_ps(d * (float)(scm & 0x0f)), nml = _mm256_set1_ps(-(dmin * (float)(scm >> 4)));
        w[2 * h] = _mm256_fmadd_ps(dl, u8_ps(q[2 * h]), nml);
        w[2 * h + 1] = _mm256_fmadd_ps(dl, u8_ps(q[2 * h + 1]), nml);
    }
}

/* Q3_K chunk j = (n, s): q = (bits 2s of qs[32n + i]) - (bit 4n+s of hmask[i] ? 0 : 4),
 * scale 8n + 2s + i/16 (6-bit, minus 32); w = (d*sc) * q */
BU_AI void deq_q3_k(const uint8_t *row, int64_t j, __m256 w[4], float *ks) {
    (void)ks;
    const uint8_t *b = row + BU_Q3_K_BLOCK_BYTES * (j >> 3);
    const int c = (int)(j & 7), n = c >> 2, s = c & 3;
    const uint8_t *sb = b + 96;
    const float d = f16(b + 108);
    const __m256i qs = _mm256_loadu_si256((const __m256i *)(b + 32 + 32 * n));
    const __m256i q2 = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * s)), _mm256_set1_epi8(3));
    const __m256i hm = _mm256_loadu_si256((const __m256i *)b);
    const __m256i bit = _mm256_set1_epi8((char)(1u << (4 * n + s)));
    /* clear bit -> subtract 4: 4 & ~(hm == bit) */
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
    const __m256i v = _mm256_sub_epi8(q2, _mm256_andnot_si256(set, _mm256_set1_epi8(4)));
    __m128i q[4];
    split32(v, q);
    BU_UNROLL
    for (int h = 0; h < 2; h++) {
        const int k = 8 * n + 2 * s + h;
        const int lo = k < 8 ? (sb[k] & 0x0f) : (sb[k - 8] >> 4);
        const int hi = (sb[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
        const __m256 dl = _mm256_set1_ps(d * (float)((lo | (hi << 4)) - 32));
        w[2 * h] = _mm256_mul_ps(dl, i8_ps(q[2 * h]));
        w[2 * h + 1] = _mm256_mul_ps(dl, i8_ps(q[2 * h + 1]));
    }
}

/* All 8 sub-blocks' d*sc and -(dmin*m) of a Q4_K / Q5_K block b into ks[0..7] and ks[8..15]: the
 * 6-bit fields of ggml's get_scale_min_k4 unpacked 4 at a time from the 12 scale bytes (at 4) read
 * as 32-bit words (sub-block c < 4: sc = q[c] & 63, m = q[c+4] & 63; c >= 4: the low 4 bits from
 * q[c+4], the high 2 from the top bits of q[c-4] / q[c]), then one fp32 product each, d * sc and
 * dmin * m, as the reference forms them (bu_dequant.c), so the same values. */
BU_AI void kq45_block_scales(const uint8_t *b, float *ks) {
    const uint32_t u0 = bu__ld32(b + 4), u1 = bu__ld32(b + 8), u2 = bu__ld32(b + 12);
    const uint32_t sc_lo = u0 & 0x3f3f3f3fu, mn_lo = u1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u);
    const uint32_t mn_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u);
    const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)sc_hi, (int)sc_lo)));
    const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)mn_hi, (int)mn_lo)));
    _mm256_storeu_ps(ks, _mm256_mul_ps(_mm256_set1_ps(f16(b)), sc));
    _mm256_storeu_ps(ks + 8, _mm256_mul_ps(_mm256_set1_ps(-f16(b + 2)), mn)); /* -(dmin * m): kq_min_apply */
}

/* Q4_K / Q5_K chunk j = sub-block c = j % 8: nibble c % 2 of qs[32 (c/2) + i] (qs at byte qs_off),
 * Q5_K adds 16 * (bit c of qh[i]) (qh at byte 16); w = (d*sc) * q - (dmin*m). The arguments are
 * constants at both call sites, so the inlined copies have no branch. */
BU_AI void kq45(const uint8_t *row, int64_t j, size_t block_bytes, int qs_off, int has_qh, __m256 w[4], float *ks) {
    const uint8_t *b = row + block_bytes * (size_t)(j >> 3);
    const int c = (int)(j & 7);
    if (c == 0) kq45_block_scales(b, ks);
    const __m256 dl = _mm256_broadcast_ss(ks + c), nml = _mm256_broadcast_ss(ks + 8 + c);
    if (!has_qh) { /* Q4_K: each byte zero-extended from memory, then its nibble: 4 shuffles where
                    * splitting one 32-byte register took 7; 1.24x hot (AVX2, 2026-12-02) */
        const uint8_t *qs = b + qs_off + 32 * (c >> 1);
        BU_UNROLL
        for (int g = 0; g < 4; g++) {
            const __m256i z = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8 * g)));
            const __m256i q = c & 1 ? _mm256_srli_epi32(z, 4) : _mm256_and_si256(z, _mm256_set1_epi32(0x0f));
            w[g] = _mm256_fmadd_ps(dl, _mm256_cvtepi32_ps(q), nml);
        }
        return;
    }
    const __m256i qs = _mm256_loadu_si256((const __m256i *)(b + qs_off + 32 * (c >> 1)));
    __m256i q = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(4 * (c & 1))), _mm256_set1_epi8(0x0f));
    if (has_qh) {
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 16));
        const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(c)), _mm256_set1_epi8(1));
        q = _mm256_or_si256(q, _mm256_slli_epi16(hb, 4));
    }
    kq_min_apply(q, dl, nml, w);
}

BU_AI void deq_q4_k(const uint8_t *row, int64_t j, __m256 w[4], float *ks) { kq45(row, j, BU_Q4_K_BLOCK_BYTES, 16, 0, w, ks); }
BU_AI void deq_q5_k(const uint8_t *row, int64_t j, __m256 w[4], float *ks) { kq45(row, j, BU_Q5_K_BLOCK_BYTES, 48, 1, w, ks); }

/* Q6_K chunk j = (n, g) = (j / 4, j % 4): low 4 bits from nibble g/2 of ql[64n + 32 (g%2) + i],
 * high 2 bits = bits 2g of qh[32n + i]; scale int8 8n + 2g + i/16; w = (d*sc) * (q - 32) */
BU_AI void deq_q6_k(const uint8_t *row, int64_t j, __m256 w[4], float *ks) {
    const uint8_t *b = row + BU_Q6_K_BLOCK_BYTES * (j >> 3);
    const int c = (int)(j & 7), n = c >> 2, g = c & 3;
    if (c == 0) { /* the block's 16 d * sc (int8 scales at 192, fp16 d at 208), as the reference */
        const __m256 d = _mm256_set1_ps(f16(b + 208));
        const __m128i sc = _mm_loadu_si128((const __m128i *)(b + 192));
        _mm256_storeu_ps(ks, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
        _mm256_storeu_ps(ks + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
    }
    const __m256i ql = _mm256_loadu_si256((const __m256i *)(b + 64 * n + 32 * (g & 1)));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * n));
    const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(ql, _mm_cvtsi32_si128(4 * (g >> 1))), _mm256_set1_epi8(0x0f));
    const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g)), _mm256_set1_epi8(3));
    const __m256i v = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
    __m128i q[4];
    split32(v, q);
    BU_UNROLL
    for (int h = 0; h < 2; h++) {
        const __m256 dl = _mm256_broadcast_ss(ks + 8 * n + 2 * g + h);
        w[2 * h] = _mm256_mul_ps(dl, i8_ps(q[2 * h]));
        w[2 * h + 1] = _mm256_mul_ps(dl, i8_ps(q[2 * h + 1]));
    }
}

/* The F32 / F16 / BF16 tail of a row (its last n < 32 elements from k0), as fp32 zero-padded to
 * a chunk: a padded element adds fma(0, 0, lane) = lane, leaving every lane's value as it is. */
BU_AI void tail_w32(int32_t type, const uint8_t *row, int64_t k0, int64_t n, float buf[32]) {
    for (int64_t k = 0; k < 32; k++) {
        const int64_t e = k0 + k;
        buf[k] = k >= n ? 0.0f
                 : type == BU_TYPE_F32 ? ((const float *)(const void *)row)[e]
                 : type == BU_TYPE_F16 ? bu__fp16_to_fp32(bu__ld16(row + 2 * e))
                                       : bu__bf16_to_fp32(bu__ld16(row + 2 * e));
    }
}

BU_AI void tail_x(const float *x, int64_t k0, int64_t n, float buf[32]) {
    for (int k = 0; k < 32; k++) buf[k] = k < n ? x[k0 + k] : 0.0f;
}

#include "bu_fast_deq_iq.h" /* IQ4_NL, IQ4_XS, TQ1_0, TQ2_0 */

#endif /* BU_FAST_DEQ_H */
