/*
 * bu_q8fast_body.h - the SIMD body of the ggml-q8 fast providers (contract "q8lanes8fma",
 * bu_q8fast.h), included once per ISA level by a file whose `#pragma GCC target` applies to it:
 * bu_linear_q8fast_avx2.c (integer dot products by _mm256_maddubs_epi16 + _mm256_madd_epi16) and
 * bu_linear_q8fast_avx512.c (BU_Q8FAST_VNNI: _mm256_dpbusd_epi32). Both form the same int32 lanes
 * and the same fp32 operations, so both levels give the same bits. The including file defines
 * BU_Q8FAST_ENTRY, the name of its level's entry point.
 *
 * Weights are unpacked 32 at a time into one register of bytes (block layouts: ggml-common.h, as
 * bu_linear_q8act.c): unsigned (Q4_1 Q5_1 Q2_K Q4_K Q5_K) straight into maddubs' unsigned operand;
 * signed (Q4_0 Q5_0 Q8_0 Q3_K Q6_K) as |w| with the activation's sign moved by w's sign.
 * Forms: one token (decode) 4 weight rows at a time, in the fp32 providers' order (bu_fast.h,
 * BU_DECODE_STREAMS: Q8_0's 4 rows a quarter of the call apart, 4 long streams with a software
 * prefetch BU_PF_AHEAD down each; the other formats 4 adjacent rows); many tokens, per weight row
 * 4 tokens at a time (each unpacked chunk reused for the 4).
 */
#ifndef BU_Q8FAST_BODY_H
#define BU_Q8FAST_BODY_H

#include <immintrin.h>

#include "bu_fast.h" /* BU_DECODE_STREAMS, BU_PF_AHEAD: decode's row order, shared with the fp32 providers */
#include "bu_q8fast.h"

#define Q8_AI __attribute__((always_inline)) static inline

#ifdef BU_Q8FAST_VNNI
/* lane j = sum of the 4 products of bytes 4j..4j+3 (u8 * s8, no intermediate saturation) */
Q8_AI __m256i dot4(__m256i wu, __m256i xs) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), wu, xs); }
Q8_AI __m256i dot4s(__m256i wu, __m256i xs, __m256i sv) { return _mm256_mullo_epi32(dot4(wu, xs), sv); }
/* lanes 0-3 (elements 0-15 of the chunk) scaled by lo, lanes 4-7 by hi */
Q8_AI __m256i scale_vec(int lo, int hi) { return _mm256_setr_m128i(_mm_set1_epi32(lo), _mm_set1_epi32(hi)); }
#else
/* the same lanes: maddubs' pairs stay within int16 here (|w| <= 128 or w <= 63, |x| <= 127) */
Q8_AI __m256i dot4(__m256i wu, __m256i xs) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(wu, xs), _mm256_set1_epi16(1));
}
Q8_AI __m256i dot4s(__m256i wu, __m256i xs, __m256i sv) { return _mm256_madd_epi16(_mm256_maddubs_epi16(wu, xs), sv); }
Q8_AI __m256i scale_vec(int lo, int hi) {
    return _mm256_setr_m128i(_mm_set1_epi16((short)lo), _mm_set1_epi16((short)hi));
}
#endif

Q8_AI float f16s(const uint8_t *p) { return _cvtsh_ss(bu__ld16(p)); }
Q8_AI float ldf(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}
Q8_AI __m256i ld256(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)(const void *)p); }

/* dot = (acc_0 + acc_4 + ...): u_j = a_j + a_j+4, s_j = u_j + u_j+2, s_0 + s_1 */
Q8_AI float hsum8(__m256 a) {
    const __m128 u = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 s = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

/* byte j = 0xFF where bit j of qh is set */
Q8_AI __m256i bits32(uint32_t qh) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
    const __m256i bm = _mm256_set1_epi64x(0x8040201008040201LL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf), bm), bm);
}

/* 16 bytes of nibbles: low nibbles = elements 0..15, high = 16..31 */
Q8_AI __m256i nib32(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)qs);
    return _mm256_and_si256(_mm256_setr_m128i(q, _mm_srli_epi16(q, 4)), _mm256_set1_epi8(0x0f));
}

/* ---- 32-element formats: one chunk per block; d the block scale, m its min (Q4_1, Q5_1) ---- */
Q8_AI __m256i w_q4_0(const uint8_t *b, float *d, float *m) {
    *d = f16s(b);
    *m = 0.0f;
    return _mm256_sub_epi8(nib32(b + 2), _mm256_set1_epi8(8));
}
Q8_AI __m256i w_q4_1(const uint8_t *b, float *d, float *m) {
    *d = f16s(b);
    *m = f16s(b + 2);
    return nib32(b + 4);
}
Q8_AI __m256i w_q5_0(const uint8_t *b, float *d, float *m) { /* (q | h << 4) - 16 = q | (h ? 0 : 0xF0) */
    *d = f16s(b);
    *m = 0.0f;
    return _mm256_or_si256(nib32(b + 6), _mm256_andnot_si256(bits32(bu__ld32(b + 2)), _mm256_set1_epi8((char)0xF0)));
}
Q8_AI __m256i w_q5_1(const uint8_t *b, float *d, float *m) {
    *d = f16s(b);
    *m = f16s(b + 2);
    return _mm256_or_si256(nib32(b + 8), _mm256_and_si256(bits32(bu__ld32(b + 4)), _mm256_set1_epi8(0x10)));
}
Q8_AI __m256i w_q8_0(const uint8_t *b, float *d, float *m) {
    *d = f16s(b);
    *m = 0.0f;
    return ld256(b + 2);
}

typedef __m256i (*w32_fn)(const uint8_t *b, float *d, float *m);

/* R weight rows (rs bytes apart) x T tokens (R, T <= 4) of a 32-element format: y[t * ldy + r * ys]
 * (+ bias[r * ys]). Decode (T = 1) asks for the bytes pf past each block it reads. */
Q8_AI void tile32(w32_fn wf, int sgn, int has_m, int R, int T, const uint8_t *w, size_t rs, size_t pf, int64_t nb,
                  int64_t bb, const uint8_t *xq, size_t xrow_bytes, const float *bias, float *y, int64_t ldy,
                  int64_t ys) {
    const int64_t xb = has_m ? XQ8_1_BYTES : XQ8_0_BYTES, xo = has_m ? 8 : 4;
    __m256 acc[4][4];
    float ms[4][4];
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < 4; t++) {
            acc[r][t] = _mm256_setzero_ps();
            ms[r][t] = 0.0f;
        }
    for (int64_t b = 0; b < nb; b++) {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            float d, m;
            if (T == 1) bu__prefetch(w + (size_t)r * rs + (size_t)(b * bb) + pf, (size_t)bb);
            const __m256i wv = wf(w + (size_t)r * rs + (size_t)(b * bb), &d, &m);
            const __m256i wu = sgn ? _mm256_sign_epi8(wv, wv) : wv;
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const uint8_t *xp = xq + (size_t)t * xrow_bytes + (size_t)(b * xb);
                const __m256i xv = ld256(xp + xo);
                const __m256i p = dot4(wu, sgn ? _mm256_sign_epi8(xv, wv) : xv);
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(d * ldf(xp)), _mm256_cvtepi32_ps(p), acc[r][t]);
                if (has_m) ms[r][t] += m * ldf(xp + 4);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            float s = hsum8(acc[r][t]);
            if (has_m) s += ms[r][t];
            y[t * ldy + r * ys] = bias ? s + bias[r * ys] : s;
        }
}

/* ---- K-quants (blocks of 256, activations Q8_K): header (scales per 16 elements) + 8 chunks ---- */
typedef struct {
    float d, dmin;
    int16_t sc[16], mn[16];
} khdr;

Q8_AI void store16(int16_t *dst, __m256i v) { _mm256_storeu_si256((__m256i *)(void *)dst, v); }

Q8_AI void h_q2_k(const uint8_t *b, khdr *h) { /* scales[g]: low nibble scale, high nibble min */
    const __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)b));
    h->d = f16s(b + 80);
    h->dmin = f16s(b + 82);
    store16(h->sc, _mm256_and_si256(v, _mm256_set1_epi16(0x0f)));
    store16(h->mn, _mm256_srli_epi16(v, 4));
}
Q8_AI void h_q3_k(const uint8_t *b, khdr *h) {
    const uint8_t *sb = b + 96;
    h->d = f16s(b + 108);
    h->dmin = 0.0f;
    for (int k = 0; k < 16; k++) {
        const int lo = k < 8 ? (sb[k] & 0x0f) : (sb[k - 8] >> 4);
        const int hi = (sb[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
        h->sc[k] = (int16_t)((lo | (hi << 4)) - 32);
        h->mn[k] = 0;
    }
}
/* 8 bytes -> 16 int16, each twice (a 32-element sub-block covers two 16-element groups) */
Q8_AI __m256i twice16(uint32_t lo, uint32_t hi) {
    const __m128i v = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)hi, (int)lo));
    return _mm256_setr_m128i(_mm_unpacklo_epi16(v, v), _mm_unpackhi_epi16(v, v));
}
/* Q4_K / Q5_K: eight 6-bit scale / min pairs in 12 bytes q (ggml-common.h; bu_linear_q8act.c
 * kq_scale_min): j < 4: sc = q[j] & 63, m = q[j+4] & 63; j >= 4: sc = q[j+4] & 15 | (q[j-4] >> 6) << 4,
 * m = q[j+4] >> 4 | (q[j] >> 6) << 4; here four bytes at a time in 32-bit words w0 w1 w2 */
Q8_AI void h_q4_k(const uint8_t *b, khdr *h) {
    const uint32_t w0 = bu__ld32(b + 4), w1 = bu__ld32(b + 8), w2 = bu__ld32(b + 12);
    const uint32_t m6 = 0x3f3f3f3fu, m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    h->d = f16s(b);
    h->dmin = f16s(b + 2);
    store16(h->sc, twice16(w0 & m6, (w2 & m4) | (((w0 >> 6) & m2) << 4)));
    store16(h->mn, twice16(w1 & m6, ((w2 >> 4) & m4) | (((w1 >> 6) & m2) << 4)));
}
Q8_AI void h_q6_k(const uint8_t *b, khdr *h) {
    h->d = f16s(b + 208);
    h->dmin = 0.0f;
    store16(h->sc, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(b + 192))));
}

/* chunk c (elements 32c .. 32c+31) of a block as bytes */
Q8_AI __m256i k_q2_k(const uint8_t *b, int c) { /* (qs[32n + l] >> 2s) & 3, c = 4n + s */
    return _mm256_and_si256(_mm256_srli_epi16(ld256(b + 16 + 32 * (c >> 2)), 2 * (c & 3)), _mm256_set1_epi8(3));
}
Q8_AI __m256i k_q3_k(const uint8_t *b, int c) { /* 2 low bits - (hmask bit c clear ? 4 : 0) */
    const __m256i q = _mm256_and_si256(_mm256_srli_epi16(ld256(b + 32 + 32 * (c >> 2)), 2 * (c & 3)),
                                       _mm256_set1_epi8(3));
    const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(ld256(b), _mm256_set1_epi8((char)(1 << c))),
                                            _mm256_setzero_si256());
    return _mm256_sub_epi8(q, _mm256_and_si256(clear, _mm256_set1_epi8(4)));
}
Q8_AI __m256i k_q4_k(const uint8_t *b, int c) { /* (qs[32(c/2) + l] >> 4(c%2)) & 15 */
    return _mm256_and_si256(_mm256_srli_epi16(ld256(b + 16 + 32 * (c >> 1)), 4 * (c & 1)), _mm256_set1_epi8(0x0f));
}
Q8_AI __m256i k_q5_k(const uint8_t *b, int c) { /* Q4_K's nibble (qs at 48) | bit c of qh[l] << 4 */
    const __m256i q = _mm256_and_si256(_mm256_srli_epi16(ld256(b + 48 + 32 * (c >> 1)), 4 * (c & 1)),
                                       _mm256_set1_epi8(0x0f));
    const __m256i bit = _mm256_set1_epi8((char)(1 << c));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(ld256(b + 16), bit), bit);
    return _mm256_or_si256(q, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
}
Q8_AI __m256i k_q6_k(const uint8_t *b, int c) { /* (4 low bits | 2 high bits << 4) - 32, c = 4n + g */
    const int n = c >> 2, g = c & 3;
    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(ld256(b + 64 * n + 32 * (g & 1)), 4 * (g >> 1)),
                                        _mm256_set1_epi8(0x0f));
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(ld256(b + 128 + 32 * n), 2 * g), _mm256_set1_epi8(3));
    return _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
}

typedef void (*khdr_fn)(const uint8_t *b, khdr *h);
typedef __m256i (*kchunk_fn)(const uint8_t *b, int c);

/* R weight rows (rs bytes apart) x T tokens (R, T <= 4) of a K-quant: y[t * ldy + r * ys]
 * (+ bias[r * ys]). Decode (T = 1) asks for the bytes pf past each block it reads. */
Q8_AI void tilek(khdr_fn hf, kchunk_fn cf, int sgn, int has_m, int R, int T, const uint8_t *w, size_t rs, size_t pf,
                 int64_t nb, int64_t bb, const uint8_t *xq, size_t xrow_bytes, const float *bias, float *y,
                 int64_t ldy, int64_t ys) {
    __m256 acc[4][4];
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < 4; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        khdr h[4];
        __m256i si[4][4];
        const uint8_t *xp[4], *wp[4];
        for (int t = 0; t < T; t++) xp[t] = xq + (size_t)t * xrow_bytes + (size_t)(b * XQ8_K_BYTES);
        for (int r = 0; r < R; r++) {
            wp[r] = w + (size_t)r * rs + (size_t)(b * bb);
            if (T == 1) bu__prefetch(wp[r] + pf, (size_t)bb);
            hf(wp[r], &h[r]);
            for (int t = 0; t < T; t++) si[r][t] = _mm256_setzero_si256();
        }
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const __m256i wv = cf(wp[r], c);
                const __m256i wu = sgn ? _mm256_sign_epi8(wv, wv) : wv;
                const __m256i sv = scale_vec(h[r].sc[2 * c], h[r].sc[2 * c + 1]);
#pragma GCC unroll 4
                for (int t = 0; t < T; t++) {
                    const __m256i xv = ld256(xp[t] + 36 + 32 * c);
                    si[r][t] = _mm256_add_epi32(si[r][t], dot4s(wu, sgn ? _mm256_sign_epi8(xv, wv) : xv, sv));
                }
            }
        }
        for (int r = 0; r < R; r++)
            for (int t = 0; t < T; t++) {
                const float dx = ldf(xp[t]);
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(h[r].d * dx), _mm256_cvtepi32_ps(si[r][t]), acc[r][t]);
                if (has_m) {
                    const __m256i mv = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)h[r].mn),
                                                         ld256(xp[t] + 4));
                    acc[r][t] = _mm256_fnmadd_ps(_mm256_set1_ps(h[r].dmin * dx), _mm256_cvtepi32_ps(mv), acc[r][t]);
                }
            }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            const float s = hsum8(acc[r][t]);
            y[t * ldy + r * ys] = bias ? s + bias[r * ys] : s;
        }
}

/* One format's whole call: decode 4 rows at a time (a group's rows `apart` rows apart: a quarter of
 * the call for a BU_DECODE_STREAMS format, else adjacent; the same bits either way, only the order
 * rows are visited changes), prefill 4 tokens at a time per row. TILE(R, T, w, rs, pf, xq, bias, y,
 * ys) expands to the format's tile call. */
#define Q8_FORMAT(fmt, TYPE, TILE)                                                                        \
    static void q8f_##fmt(const uint8_t *xq, size_t xrow_bytes, int64_t n_tokens, const uint8_t *w,      \
                          size_t row_bytes, int64_t nb, int64_t bb, int64_t n_out, const float *bias,    \
                          float *y) {                                                                     \
        if (n_tokens == 1) {                                                                              \
            const int split = BU_DECODE_STREAMS(TYPE);                                                    \
            const int64_t q = n_out / 4, apart = split ? q : 1;                                           \
            const size_t pf = split ? BU_PF_AHEAD : 4 * row_bytes; /* else: the next group's block */    \
            for (int64_t g = 0; g < q; g++) {                                                             \
                const int64_t r = split ? g : 4 * g; /* the group's first row */                          \
                TILE(4, 1, w + (size_t)r * row_bytes, (size_t)apart * row_bytes, pf, xq, bias ? bias + r : NULL, \
                     y + r, apart);                                                                       \
            }                                                                                             \
            for (int64_t r = 4 * q; r < n_out; r++)                                                       \
                TILE(1, 1, w + (size_t)r * row_bytes, row_bytes, pf, xq, bias ? bias + r : NULL, y + r, 1); \
            return;                                                                                       \
        }                                                                                                 \
        for (int64_t r = 0; r < n_out; r++) {                                                             \
            const uint8_t *wr = w + (size_t)r * row_bytes;                                                \
            const float *br = bias ? bias + r : NULL;                                                     \
            int64_t t = 0;                                                                                \
            for (; t + 4 <= n_tokens; t += 4)                                                             \
                TILE(1, 4, wr, row_bytes, 0, xq + (size_t)t * xrow_bytes, br, y + t * n_out + r, 1);      \
            for (; t < n_tokens; t++)                                                                     \
                TILE(1, 1, wr, row_bytes, 0, xq + (size_t)t * xrow_bytes, br, y + t * n_out + r, 1);      \
        }                                                                                                 \
    }

#define TILE32(wf, sgn, has_m, R, T, W, RS, PF, X, B, Y, YS) \
    tile32(wf, sgn, has_m, R, T, W, RS, PF, nb, bb, X, xrow_bytes, B, Y, n_out, YS)
#define TILEK(hf, cf, sgn, has_m, R, T, W, RS, PF, X, B, Y, YS) \
    tilek(hf, cf, sgn, has_m, R, T, W, RS, PF, nb, bb, X, xrow_bytes, B, Y, n_out, YS)
#define TILE_Q4_0(...) TILE32(w_q4_0, 1, 0, __VA_ARGS__)
#define TILE_Q4_1(...) TILE32(w_q4_1, 0, 1, __VA_ARGS__)
#define TILE_Q5_0(...) TILE32(w_q5_0, 1, 0, __VA_ARGS__)
#define TILE_Q5_1(...) TILE32(w_q5_1, 0, 1, __VA_ARGS__)
#define TILE_Q8_0(...) TILE32(w_q8_0, 1, 0, __VA_ARGS__)
#define TILE_Q2_K(...) TILEK(h_q2_k, k_q2_k, 0, 1, __VA_ARGS__)
#define TILE_Q3_K(...) TILEK(h_q3_k, k_q3_k, 1, 0, __VA_ARGS__)
#define TILE_Q4_K(...) TILEK(h_q4_k, k_q4_k, 0, 1, __VA_ARGS__)
#define TILE_Q5_K(...) TILEK(h_q4_k, k_q5_k, 0, 1, __VA_ARGS__)
#define TILE_Q6_K(...) TILEK(h_q6_k, k_q6_k, 1, 0, __VA_ARGS__)

#define BU_Q8_FORMAT(NAME, name, VD, vd) Q8_FORMAT(name, BU_TYPE_##NAME, TILE_##NAME)
BU_Q8ACT_FORMATS(BU_Q8_FORMAT)
#define BU_Q8_CASE(NAME, name, VD, vd) case BU_TYPE_##NAME: f = q8f_##name; break;

void BU_Q8FAST_ENTRY(int32_t type, const uint8_t *xq, size_t xrow_bytes, int64_t n_tokens, const uint8_t *w,
                     size_t row_bytes, int64_t n_in, int64_t n_out, const float *bias, float *y) {
    const bu_format_info *fi = bu__format(type);
    const int64_t nb = n_in / fi->block_elems, bb = fi->block_bytes;
    void (*f)(const uint8_t *, size_t, int64_t, const uint8_t *, size_t, int64_t, int64_t, int64_t, const float *,
              float *);
    switch (type) {
        BU_Q8ACT_FORMATS(BU_Q8_CASE)
    default: return; /* not reached: bu_linear_q8fast.c passes only the types of BU_Q8ACT_FORMATS */
    }
    f(xq, xrow_bytes, n_tokens, w, row_bytes, nb, bb, n_out, bias, y);
}

#endif /* BU_Q8FAST_BODY_H */
