/*
 * bu_dequant.c - GGML block formats -> fp32, one block at a time.
 *
 * Block layouts: ggml/src/ggml-common.h (block_q4_0 ... block_q6_K); block sizes come from
 * bu_formats.h (generated from config/ggml_formats.json) and every layout below is checked against
 * it at compile time. Rounding points follow ggml's dequantize_row_*: a block's fp16 scale is
 * widened exactly to fp32; K-quant sub-block scales are formed in fp32 (d * sc, dmin * m); each
 * weight is then one fp32 multiply (and one fp32 add/subtract of the minimum).
 */
#include "bu_internal.h"

/* ---- 1-element "blocks" ---- */

static void deq_f32(const uint8_t *restrict src, float *restrict dst, int64_t nb) {
    memcpy(dst, src, (size_t)nb * 4);
}

/* F16 / BF16 rows are 2-byte aligned whenever the tensor is (BUMP: 64); that path reads uint16_t
 * directly so the loop vectorises, the byte-wise path serves any other address. */
static void deq_f16(const uint8_t *restrict src, float *restrict dst, int64_t nb) {
    if (((uintptr_t)src & 1u) == 0) {
        const uint16_t *restrict h = (const uint16_t *)(const void *)src;
        for (int64_t i = 0; i < nb; i++) dst[i] = bu__fp16_to_fp32(h[i]);
    } else {
        for (int64_t i = 0; i < nb; i++) dst[i] = bu__fp16_to_fp32(bu__ld16(src + 2 * i));
    }
}

static void deq_bf16(const uint8_t *restrict src, float *restrict dst, int64_t nb) {
    if (((uintptr_t)src & 1u) == 0) {
        const uint16_t *restrict h = (const uint16_t *)(const void *)src;
        for (int64_t i = 0; i < nb; i++) dst[i] = bu__bf16_to_fp32(h[i]);
    } else {
        for (int64_t i = 0; i < nb; i++) dst[i] = bu__bf16_to_fp32(bu__ld16(src + 2 * i));
    }
}

/* ---- 32-element blocks. Nibble j (low) is weight j, nibble j (high) weight j + 16. ---- */

/* Q4_0: f16 d | u8 qs[16]; w = (q - 8) * d */
_Static_assert(2 + 16 == BU_Q4_0_BLOCK_BYTES && BU_Q4_0_BLOCK_ELEMS == 32, "Q4_0 layout");
static void deq_q4_0(const uint8_t *restrict b, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += BU_Q4_0_BLOCK_BYTES, y += 32) {
        const float d = bu__fp16_to_fp32(bu__ld16(b));
        const uint8_t *qs = b + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((qs[j] & 0x0f) - 8) * d;
            y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

/* Q4_1: f16 d | f16 m | u8 qs[16]; w = q * d + m */
_Static_assert(4 + 16 == BU_Q4_1_BLOCK_BYTES && BU_Q4_1_BLOCK_ELEMS == 32, "Q4_1 layout");
static void deq_q4_1(const uint8_t *restrict b, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += BU_Q4_1_BLOCK_BYTES, y += 32) {
        const float d = bu__fp16_to_fp32(bu__ld16(b));
        const float m = bu__fp16_to_fp32(bu__ld16(b + 2));
        const uint8_t *qs = b + 4;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(qs[j] & 0x0f) * d + m;
            y[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

/* 1 << j, so that testing bit j of qh vectorises (SSE has no per-lane variable shift) */
static const uint32_t BIT[32] = {
    1u << 0, 1u << 1, 1u << 2, 1u << 3, 1u << 4, 1u << 5, 1u << 6, 1u << 7,
    1u << 8, 1u << 9, 1u << 10, 1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15,
    1u << 16, 1u << 17, 1u << 18, 1u << 19, 1u << 20, 1u << 21, 1u << 22, 1u << 23,
    1u << 24, 1u << 25, 1u << 26, 1u << 27, 1u << 28, 1u << 29, 1u << 30, 1u << 31};

/* Q5_0: f16 d | u32 qh (bit j = 5th bit of weight j) | u8 qs[16]; w = (q - 16) * d */
_Static_assert(2 + 4 + 16 == BU_Q5_0_BLOCK_BYTES && BU_Q5_0_BLOCK_ELEMS == 32, "Q5_0 layout");
static void deq_q5_0(const uint8_t *restrict b, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += BU_Q5_0_BLOCK_BYTES, y += 32) {
        const float d = bu__fp16_to_fp32(bu__ld16(b));
        const uint32_t qh = bu__ld32(b + 2);
        const uint8_t *qs = b + 6;
        for (int j = 0; j < 16; j++) {
            const int lo = (qs[j] & 0x0f) | ((qh & BIT[j]) ? 16 : 0);
            const int hi = (qs[j] >> 4) | ((qh & BIT[j + 16]) ? 16 : 0);
            y[j] = (float)(lo - 16) * d;
            y[j + 16] = (float)(hi - 16) * d;
        }
    }
}

/* Q5_1: f16 d | f16 m | u32 qh | u8 qs[16]; w = q * d + m */
_Static_assert(2 + 2 + 4 + 16 == BU_Q5_1_BLOCK_BYTES && BU_Q5_1_BLOCK_ELEMS == 32, "Q5_1 layout");
static void deq_q5_1(const uint8_t *restrict b, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += BU_Q5_1_BLOCK_BYTES, y += 32) {
        const float d = bu__fp16_to_fp32(bu__ld16(b));
        const float m = bu__fp16_to_fp32(bu__ld16(b + 2));
        const uint32_t qh = bu__ld32(b + 4);
        const uint8_t *qs = b + 8;
        for (int j = 0; j < 16; j++) {
            const int lo = (qs[j] & 0x0f) | ((qh & BIT[j]) ? 16 : 0);
            const int hi = (qs[j] >> 4) | ((qh & BIT[j + 16]) ? 16 : 0);
            y[j] = (float)lo * d + m;
            y[j + 16] = (float)hi * d + m;
        }
    }
}

/* Q8_0: f16 d | i8 qs[32]; w = q * d */
_Static_assert(2 + 32 == BU_Q8_0_BLOCK_BYTES && BU_Q8_0_BLOCK_ELEMS == 32, "Q8_0 layout");
static void deq_q8_0(const uint8_t *restrict b, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += BU_Q8_0_BLOCK_BYTES, y += 32) {
        const float d = bu__fp16_to_fp32(bu__ld16(b));
        const int8_t *qs = (const int8_t *)(b + 2);
        for (int j = 0; j < 32; j++) y[j] = (float)qs[j] * d;
    }
}

/* ---- 256-element K-quant super-blocks ---- */

/* Q2_K: u8 scales[16] (low nibble scale, high nibble min, per 16 weights) | u8 qs[64] (2-bit) |
 * f16 d | f16 dmin. Weight n*128 + s*32 + h*16 + l (n<2, s<4 = bit pair, h<2, l<16) is bits 2s of
 * qs[n*32 + h*16 + l], with sub-block 16-weight index 8n + 2s + h; w = (d*sc)*q - (dmin*m). */
_Static_assert(16 + 64 + 2 + 2 == BU_Q2_K_BLOCK_BYTES && BU_Q2_K_BLOCK_ELEMS == 256, "Q2_K layout");
static void deq_q2_k(const uint8_t *restrict b, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += BU_Q2_K_BLOCK_BYTES) {
        const uint8_t *sc = b, *qs = b + 16;
        const float d = bu__fp16_to_fp32(bu__ld16(b + 80));
        const float dmin = bu__fp16_to_fp32(bu__ld16(b + 82));
        for (int n = 0; n < 2; n++) {
            const uint8_t *q = qs + 32 * n;
            for (int s = 0; s < 4; s++) {
                for (int h = 0; h < 2; h++) {
                    const uint8_t scm = sc[8 * n + 2 * s + h];
                    const float dl = d * (float)(scm & 0x0f), ml = dmin * (float)(scm >> 4);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (float)((q[16 * h + l] >> (2 * s)) & 3) - ml;
                }
            }
        }
    }
}

/* Q3_K: u8 hmask[32] (3rd bit) | u8 qs[64] (low 2 bits) | u8 scales[12] (16 six-bit scales,
 * offset 32) | f16 d. Same weight order as Q2_K; the high bit of weight n*128 + s*32 + h*16 + l is
 * bit 4n + s of hmask[h*16 + l], and a clear bit subtracts 4. w = (d*(sc-32)) * q. */
_Static_assert(32 + 64 + 12 + 2 == BU_Q3_K_BLOCK_BYTES && BU_Q3_K_BLOCK_ELEMS == 256, "Q3_K layout");
static void deq_q3_k(const uint8_t *restrict b, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += BU_Q3_K_BLOCK_BYTES) {
        const uint8_t *hm = b, *qs = b + 32, *sb = b + 96;
        const float d = bu__fp16_to_fp32(bu__ld16(b + 108));
        int sc[16];
        /* scale k: low 4 bits in byte k (k<8) or the high nibble of byte k-8; high 2 bits are
         * bits 2*(k/4) of byte 8 + k%4 */
        for (int k = 0; k < 16; k++) {
            const int lo = k < 8 ? (sb[k] & 0x0f) : (sb[k - 8] >> 4);
            const int hi = (sb[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
            sc[k] = (lo | (hi << 4)) - 32;
        }
        for (int n = 0; n < 2; n++) {
            const uint8_t *q = qs + 32 * n;
            for (int s = 0; s < 4; s++) {
                const uint8_t m = (uint8_t)(1u << (4 * n + s));
                for (int h = 0; h < 2; h++) {
                    const float dl = d * (float)sc[8 * n + 2 * s + h];
                    for (int l = 0; l < 16; l++) {
                        const int q2 = (q[16 * h + l] >> (2 * s)) & 3;
                        const int qv = q2 - ((hm[16 * h + l] & m) ? 0 : 4);
                        *y++ = dl * (float)qv;
                    }
                }
            }
        }
    }
}

/* 6-bit scale and min j (0..7) of Q4_K / Q5_K packed in 12 bytes (ggml get_scale_min_k4). */
static inline void kq_scale_min(int j, const uint8_t *q, int *sc, int *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Q4_K: f16 d | f16 dmin | u8 scales[12] | u8 qs[128]. Weight 64c + 32h + l is the low (h=0) or
 * high (h=1) nibble of qs[32c + l], sub-block 2c + h; w = (d*sc)*q - (dmin*m). */
_Static_assert(2 + 2 + 12 + 128 == BU_Q4_K_BLOCK_BYTES && BU_Q4_K_BLOCK_ELEMS == 256, "Q4_K layout");
static void deq_q4_k(const uint8_t *restrict b, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += BU_Q4_K_BLOCK_BYTES) {
        const float d = bu__fp16_to_fp32(bu__ld16(b));
        const float dmin = bu__fp16_to_fp32(bu__ld16(b + 2));
        const uint8_t *sb = b + 4, *qs = b + 16;
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = qs + 32 * c;
            for (int h = 0; h < 2; h++) {
                int sc, mn;
                kq_scale_min(2 * c + h, sb, &sc, &mn);
                const float dl = d * (float)sc, ml = dmin * (float)mn;
                for (int l = 0; l < 32; l++) *y++ = dl * (float)((q[l] >> (4 * h)) & 0x0f) - ml;
            }
        }
    }
}

/* Q5_K: f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128]. As Q4_K, plus a 5th bit
 * (value 16): bit 2c + h of qh[l]. */
_Static_assert(2 + 2 + 12 + 32 + 128 == BU_Q5_K_BLOCK_BYTES && BU_Q5_K_BLOCK_ELEMS == 256, "Q5_K layout");
static void deq_q5_k(const uint8_t *restrict b, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += BU_Q5_K_BLOCK_BYTES) {
        const float d = bu__fp16_to_fp32(bu__ld16(b));
        const float dmin = bu__fp16_to_fp32(bu__ld16(b + 2));
        const uint8_t *sb = b + 4, *qh = b + 16, *qs = b + 48;
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = qs + 32 * c;
            for (int h = 0; h < 2; h++) {
                int sc, mn;
                kq_scale_min(2 * c + h, sb, &sc, &mn);
                const float dl = d * (float)sc, ml = dmin * (float)mn;
                const int bit = 2 * c + h;
                for (int l = 0; l < 32; l++) {
                    const int qv = ((q[l] >> (4 * h)) & 0x0f) | (((qh[l] >> bit) & 1) << 4);
                    *y++ = dl * (float)qv - ml;
                }
            }
        }
    }
}

/* Q6_K: u8 ql[128] (low 4 bits) | u8 qh[64] (high 2 bits) | i8 scales[16] | f16 d.
 * Weight 128n + 32g + l (n<2, g<4, l<32): low nibble of ql[64n + l] (g=0), of ql[64n + 32 + l]
 * (g=1), high nibble of ql[64n + l] (g=2), of ql[64n + 32 + l] (g=3); high bits 2g of qh[32n + l];
 * scale scales[8n + 2g + l/16]; w = (d*sc) * (q - 32). */
_Static_assert(128 + 64 + 16 + 2 == BU_Q6_K_BLOCK_BYTES && BU_Q6_K_BLOCK_ELEMS == 256, "Q6_K layout");
static void deq_q6_k(const uint8_t *restrict b, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += BU_Q6_K_BLOCK_BYTES) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        const float d = bu__fp16_to_fp32(bu__ld16(b + 208));
        for (int n = 0; n < 2; n++) {
            for (int g = 0; g < 4; g++) {
                const uint8_t *lq = ql + 64 * n + 32 * (g & 1);
                const int shift = 4 * (g >> 1);
                for (int half = 0; half < 2; half++) {
                    /* one scale per 16 weights; split so the inner loop has constant shifts */
                    const float dl = d * (float)sc[8 * n + 2 * g + half];
                    const uint8_t *lh = lq + 16 * half, *hh = qh + 32 * n + 16 * half;
                    for (int l = 0; l < 16; l++) {
                        const int qv = ((lh[l] >> shift) & 0x0f) | (((hh[l] >> (2 * g)) & 3) << 4);
                        y[l] = dl * (float)(qv - 32);
                    }
                    y += 16;
                }
            }
        }
    }
}

/* ---- IQ4 (non-linear 4-bit, no importance matrix needed) and ternary formats ---- */

/* The 16 values a 4-bit IQ4 index selects (ggml-common.h kvalues_iq4nl). */
static const int8_t KVALUES_IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* IQ4_NL: f16 d | u8 qs[16]; nibbles as Q4_0 (low: weight j, high: j + 16); w = d * kvalues[q]
 * (fp16 d times an int8: exact in fp32, so one rounding that never rounds) */
_Static_assert(2 + 16 == BU_IQ4_NL_BLOCK_BYTES && BU_IQ4_NL_BLOCK_ELEMS == 32, "IQ4_NL layout");
static void deq_iq4_nl(const uint8_t *restrict b, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += BU_IQ4_NL_BLOCK_BYTES, y += 32) {
        const float d = bu__fp16_to_fp32(bu__ld16(b));
        const uint8_t *qs = b + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)KVALUES_IQ4NL[qs[j] & 0x0f];
            y[j + 16] = d * (float)KVALUES_IQ4NL[qs[j] >> 4];
        }
    }
}

/* IQ4_XS: f16 d | u16 scales_h | u8 scales_l[4] | u8 qs[128]. Sub-block s (32 weights) has the
 * 6-bit scale ls = nibble s % 2 of scales_l[s / 2] | (bits 2s of scales_h) << 4; dl = d * (ls - 32)
 * rounded to fp32 (exact: 11 x 6 bits); weight 32s + j (j < 16) is kvalues[low nibble of
 * qs[16s + j]], 32s + 16 + j the high nibble; w = dl * kvalues[q] (dequantize_row_iq4_xs). */
_Static_assert(2 + 2 + 4 + 128 == BU_IQ4_XS_BLOCK_BYTES && BU_IQ4_XS_BLOCK_ELEMS == 256, "IQ4_XS layout");
static void deq_iq4_xs(const uint8_t *restrict b, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += BU_IQ4_XS_BLOCK_BYTES) {
        const float d = bu__fp16_to_fp32(bu__ld16(b));
        const unsigned sh = bu__ld16(b + 2);
        const uint8_t *sl = b + 4, *qs = b + 8;
        for (int s = 0; s < 8; s++, qs += 16, y += 32) {
            const int ls = ((sl[s / 2] >> (4 * (s % 2))) & 0x0f) | (int)(((sh >> (2 * s)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)KVALUES_IQ4NL[qs[j] & 0x0f];
                y[j + 16] = dl * (float)KVALUES_IQ4NL[qs[j] >> 4];
            }
        }
    }
}

/* TQ1_0: u8 qs[48] | u8 qh[4] | f16 d. Five (qs) or four (qh) base-3 digits per byte, stored as
 * ceil(v * 256 / 243); digit n of byte x is ((uint8)(x * 3^n) * 3) >> 8. Weights 0..159: digit n of
 * qs[m] (m < 32) is weight 32n + m; 160..239: digit n of qs[32 + m] (m < 16) is 160 + 16n + m;
 * 240..255: digit n of qh[m] is 240 + 4n + m. w = (digit - 1) * d (dequantize_row_tq1_0). */
_Static_assert(48 + 4 + 2 == BU_TQ1_0_BLOCK_BYTES && BU_TQ1_0_BLOCK_ELEMS == 256, "TQ1_0 layout");
static const uint8_t POW3[5] = {1, 3, 9, 27, 81};
static inline int tq1_digit(uint8_t x, int n) { return (((uint8_t)(x * POW3[n])) * 3) >> 8; }
static void deq_tq1_0(const uint8_t *restrict b, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += BU_TQ1_0_BLOCK_BYTES) {
        const float d = bu__fp16_to_fp32(bu__ld16(b + 52));
        for (int n = 0; n < 5; n++)
            for (int m = 0; m < 32; m++) *y++ = (float)(tq1_digit(b[m], n) - 1) * d;
        for (int n = 0; n < 5; n++)
            for (int m = 0; m < 16; m++) *y++ = (float)(tq1_digit(b[32 + m], n) - 1) * d;
        for (int n = 0; n < 4; n++)
            for (int m = 0; m < 4; m++) *y++ = (float)(tq1_digit(b[48 + m], n) - 1) * d;
    }
}

/* TQ2_0: u8 qs[64] | f16 d. Weight 128h + 32l + m (h < 2, l < 4, m < 32) is bits 2l of
 * qs[32h + m]; w = (q - 1) * d (dequantize_row_tq2_0). */
_Static_assert(64 + 2 == BU_TQ2_0_BLOCK_BYTES && BU_TQ2_0_BLOCK_ELEMS == 256, "TQ2_0 layout");
static void deq_tq2_0(const uint8_t *restrict b, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += BU_TQ2_0_BLOCK_BYTES) {
        const float d = bu__fp16_to_fp32(bu__ld16(b + 64));
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++) *y++ = (float)(((b[32 * h + m] >> (2 * l)) & 3) - 1) * d;
    }
}

#define BU_FORMAT_INFO(NAME, name, VD, vd) {BU_TYPE_##NAME, BU_##NAME##_BLOCK_ELEMS, BU_##NAME##_BLOCK_BYTES, deq_##name},
static const bu_format_info FORMATS[] = {BU_DOT_FORMATS(BU_FORMAT_INFO)};

const bu_format_info *bu__format(int32_t ggml_type) {
    for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++)
        if (FORMATS[i].ggml_type == ggml_type) return &FORMATS[i];
    return NULL;
}

int bu_kernels_abi_version(void) { return BU_KERNELS_ABI_VERSION; }

int bu_row_bytes(int32_t ggml_type, int64_t n, size_t *out) {
    const bu_format_info *f = bu__format(ggml_type);
    if (!out) return BU_ERR_NULL;
    if (!f || !bu__dim_ok(n) || n % f->block_elems) return BU_ERR_ARG;
    if (!bu__bytes(n / f->block_elems, f->block_bytes, 1, out)) return BU_ERR_ARG;
    return BU_OK;
}

int bu_dequantize_row(int32_t ggml_type, const void *src, float *dst, int64_t n) {
    size_t rb;
    const int st = bu_row_bytes(ggml_type, n, &rb);
    if (st) return st;
    if (n == 0) return BU_OK;
    if (!src || !dst) return BU_ERR_NULL;
    const bu_format_info *f = bu__format(ggml_type);
    f->dequant((const uint8_t *)src, dst, n / f->block_elems);
    return BU_OK;
}
