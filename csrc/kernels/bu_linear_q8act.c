/*
 * bu_linear_q8act.c - linear layers with quantized activations: the numerics of llama.cpp's CPU
 * backend (contract "ggml-q8").
 *
 * ggml-cpu does not multiply a quantized weight by fp32 activations: it first quantizes each
 * activation row to the weight type's vec_dot_type (type_traits_cpu in ggml-cpu.c: Q8_0 for Q4_0,
 * Q5_0, Q8_0; Q8_1 for Q4_1, Q5_1; Q8_K for the K-quants), then takes integer dot products per
 * block and scales them in fp32. Doing the same here removes the systematic difference between
 * our logits and the oracle's (fp32 activations gave ~97% teacher-forced top-1 agreement).
 *
 * Activation quantization (the formulas of ggml-cpu/arch/x86/quants.c quantize_row_q8_0/_1, the
 * path an AVX/AVX2 build of llama.cpp runs, and ggml-quants.c quantize_row_q8_K_ref):
 *   Q8_0 / Q8_1, blocks of 32: amax = max |x|; d = amax / 127 (fp32); id = 127 / amax (fp32, 0 when
 *     amax = 0); q = round-half-to-even(x * id); the stored d is d rounded to fp16 (what ggml stores
 *     and uses); Q8_1 also s = fp16(d * sum(q)) with the fp32 d, not the fp16 one.
 *   Q8_K, blocks of 256: max = the first x of largest |x|; iscale = -127 / max; q = min(127,
 *     round-half-to-even(iscale * x)); d = 1 / iscale in fp32; bsums = sums of q over 16.
 * Dot product of one weight row with one quantized activation row, per block b (all integer sums
 * exact in int32, every product and sum below one fp32 rounding, no FMA):
 *   Q4_0 Q5_0 Q8_0:  t_b = (dw*dx) * isum
 *   Q4_1 Q5_1:       t_b = (dw*dx) * isum + mw * sx
 *   Q4_K Q5_K Q2_K:  t_b = (dw*dx) * isum - (dminw*dx) * msum
 *   Q6_K Q3_K:       t_b = (dw*dx) * isum
 * with isum = sum over sub-blocks of (sub-block scale * sum of q_w*q_x) and msum = sum over
 * sub-blocks of (sub-block min * sum of q_x); y = ((0 + t_0) + t_1) + ... in increasing b, then
 * + bias (one rounding). Integer parts equal ggml's; ggml's SIMD code sums the t_b in other fp32
 * orders (lanes, FMA), so results agree with llama.cpp to fp32 rounding, not bit for bit.
 *
 * Scratch: BU_Q8ACT_ROWS (8) quantized activation rows: the tokens are taken 8 at a time, each row
 * quantized once and reused for all n_out weight rows, each weight block unpacked once per 8 tokens
 * (layout below; the kernel maps give the byte counts).
 */
#include <math.h>

#include "bu_q8.h"

/* round half to even for |v| < 2^22: adding 1.5 * 2^23 leaves an integer-spaced fp32 */
static inline int round_even(float v) {
    const float t = v + 12582912.0f;
    return (int)(t - 12582912.0f);
}

static void quantize_q8_32(const float *x, uint8_t *out, int64_t nb, int with_s) {
    const size_t bb = with_s ? XQ8_1_BYTES : XQ8_0_BYTES;
    for (int64_t i = 0; i < nb; i++, x += 32, out += bb) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float a = fabsf(x[j]);
            amax = a > amax ? a : amax;
        }
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int8_t *q = (int8_t *)(out + (with_s ? 8 : 4));
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            q[j] = (int8_t)round_even(x[j] * id);
            sum += q[j];
        }
        const float d16 = bu__fp16_round(d);
        memcpy(out, &d16, 4);
        if (with_s) {
            const float s16 = bu__fp16_round(d * (float)sum);
            memcpy(out + 4, &s16, 4);
        }
    }
}

static void quantize_q8_k(const float *x, uint8_t *out, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 256, out += XQ8_K_BYTES) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 256; j++) {
            const float a = fabsf(x[j]);
            if (a > amax) {
                amax = a;
                max = x[j];
            }
        }
        int8_t *q = (int8_t *)(out + 36);
        int16_t bs[16];
        float d = 0.0f;
        if (amax == 0.0f) {
            memset(q, 0, 256);
            memset(bs, 0, sizeof bs);
        } else {
            const float iscale = -127.0f / max;
            for (int j = 0; j < 256; j++) {
                const int v = round_even(iscale * x[j]);
                q[j] = (int8_t)(v < 127 ? v : 127);
            }
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int l = 0; l < 16; l++) s += q[16 * g + l];
                bs[g] = (int16_t)s;
            }
            d = 1.0f / iscale;
        }
        memcpy(out, &d, 4);
        memcpy(out + 4, bs, sizeof bs);
    }
}

void bu__q8_quantize(int act, const float *x, uint8_t *out, int64_t nb) {
    if (act == ACT_Q8_K)
        quantize_q8_k(x, out, nb);
    else
        quantize_q8_32(x, out, nb, act == ACT_Q8_1);
}

int bu__q8act_check(int32_t type, int act, int64_t rows, const float *x, const void *w, const float *bias,
                    const float *y, int64_t n_tokens, int64_t n_in, int64_t n_out, const void *ws, size_t ws_cap,
                    size_t *row_bytes, size_t *xrow_bytes, int *empty) {
    const int64_t be = act == ACT_Q8_K ? 256 : 32;
    const size_t xbb = act == ACT_Q8_K ? XQ8_K_BYTES : act == ACT_Q8_1 ? XQ8_1_BYTES : XQ8_0_BYTES;
    bu_linear_sizes sz;
    size_t need;
    int rc;
    if ((rc = bu__linear_sizes(type, n_tokens, n_in, n_out, &sz)) != BU_OK) return rc;
    if (bu__format(type)->block_elems != be) return BU_ERR_ARG;
    if (!bu__bytes(n_in / be, 1, xbb, xrow_bytes)) return BU_ERR_ARG;
    if (!bu__bytes(rows, (int64_t)*xrow_bytes, 1, &need)) return BU_ERR_ARG;
    if ((rc = bu__linear_args(&sz, n_tokens, n_out, x, w, bias, y, ws, ws_cap, need, empty)) != BU_OK) return rc;
    *row_bytes = sz.row;
    return BU_OK;
}

/* One weight block unpacked to integers: q[k] the integer weight of element k, sc[g] / mn[g] the
 * integer scale / min of the 16-element group g (32-element formats: one group of 32, sc = 1),
 * d the block scale, m the block min term (Q4_1/Q5_1: m; K-quants: dmin; else 0). */
typedef struct {
    int8_t q[256];
    int32_t sc[16], mn[16];
    float d, m;
} wblock;

static void unpack_q4_0(const uint8_t *b, wblock *w) {
    w->d = bu__fp16_to_fp32(bu__ld16(b));
    w->m = 0.0f;
    for (int j = 0; j < 16; j++) {
        w->q[j] = (int8_t)((b[2 + j] & 0x0f) - 8);
        w->q[j + 16] = (int8_t)((b[2 + j] >> 4) - 8);
    }
}

static void unpack_q4_1(const uint8_t *b, wblock *w) {
    w->d = bu__fp16_to_fp32(bu__ld16(b));
    w->m = bu__fp16_to_fp32(bu__ld16(b + 2));
    for (int j = 0; j < 16; j++) {
        w->q[j] = (int8_t)(b[4 + j] & 0x0f);
        w->q[j + 16] = (int8_t)(b[4 + j] >> 4);
    }
}

static void unpack_q5_0(const uint8_t *b, wblock *w) {
    const uint32_t qh = bu__ld32(b + 2);
    w->d = bu__fp16_to_fp32(bu__ld16(b));
    w->m = 0.0f;
    for (int j = 0; j < 16; j++) {
        w->q[j] = (int8_t)(((b[6 + j] & 0x0f) | (((qh >> j) & 1u) << 4)) - 16);
        w->q[j + 16] = (int8_t)(((b[6 + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16);
    }
}

static void unpack_q5_1(const uint8_t *b, wblock *w) {
    const uint32_t qh = bu__ld32(b + 4);
    w->d = bu__fp16_to_fp32(bu__ld16(b));
    w->m = bu__fp16_to_fp32(bu__ld16(b + 2));
    for (int j = 0; j < 16; j++) {
        w->q[j] = (int8_t)((b[8 + j] & 0x0f) | (((qh >> j) & 1u) << 4));
        w->q[j + 16] = (int8_t)((b[8 + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
    }
}

static void unpack_q8_0(const uint8_t *b, wblock *w) {
    w->d = bu__fp16_to_fp32(bu__ld16(b));
    w->m = 0.0f;
    memcpy(w->q, b + 2, 32);
}

/* K-quant layouts as in bu_dequant.c (ggml-common.h block_q2_K ... block_q6_K). */
static void unpack_q2_k(const uint8_t *b, wblock *w) {
    const uint8_t *sc = b, *qs = b + 16;
    w->d = bu__fp16_to_fp32(bu__ld16(b + 80));
    w->m = bu__fp16_to_fp32(bu__ld16(b + 82));
    for (int g = 0; g < 16; g++) {
        w->sc[g] = sc[g] & 0x0f;
        w->mn[g] = sc[g] >> 4;
    }
    int8_t *q = w->q;
    for (int n = 0; n < 2; n++)
        for (int s = 0; s < 4; s++)
            for (int l = 0; l < 32; l++) *q++ = (int8_t)((qs[32 * n + l] >> (2 * s)) & 3);
}

static void unpack_q3_k(const uint8_t *b, wblock *w) {
    const uint8_t *hm = b, *qs = b + 32, *sb = b + 96;
    w->d = bu__fp16_to_fp32(bu__ld16(b + 108));
    w->m = 0.0f;
    for (int k = 0; k < 16; k++) {
        const int lo = k < 8 ? (sb[k] & 0x0f) : (sb[k - 8] >> 4);
        const int hi = (sb[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
        w->sc[k] = (lo | (hi << 4)) - 32;
        w->mn[k] = 0;
    }
    int8_t *q = w->q;
    for (int n = 0; n < 2; n++)
        for (int s = 0; s < 4; s++) {
            const uint8_t m = (uint8_t)(1u << (4 * n + s));
            for (int l = 0; l < 32; l++)
                *q++ = (int8_t)(((qs[32 * n + l] >> (2 * s)) & 3) - ((hm[l] & m) ? 0 : 4));
        }
}

static inline void kq_scale_min(int j, const uint8_t *q, int32_t *sc, int32_t *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Q4_K and Q5_K share their header: fp16 d and dmin, then eight 6-bit scale/min pairs, each
 * covering 32 weights (two 16-weight sub-blocks of wblock). */
static void unpack_kq_header(const uint8_t *b, wblock *w) {
    w->d = bu__fp16_to_fp32(bu__ld16(b));
    w->m = bu__fp16_to_fp32(bu__ld16(b + 2));
    for (int j = 0; j < 8; j++) {
        kq_scale_min(j, b + 4, &w->sc[2 * j], &w->mn[2 * j]);
        w->sc[2 * j + 1] = w->sc[2 * j];
        w->mn[2 * j + 1] = w->mn[2 * j];
    }
}

static void unpack_q4_k(const uint8_t *b, wblock *w) {
    unpack_kq_header(b, w);
    const uint8_t *qs = b + 16;
    for (int c = 0; c < 4; c++)
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) w->q[64 * c + 32 * h + l] = (int8_t)((qs[32 * c + l] >> (4 * h)) & 0x0f);
}

static void unpack_q5_k(const uint8_t *b, wblock *w) {
    unpack_kq_header(b, w);
    const uint8_t *qh = b + 16, *qs = b + 48;
    for (int c = 0; c < 4; c++)
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++)
                w->q[64 * c + 32 * h + l] =
                    (int8_t)(((qs[32 * c + l] >> (4 * h)) & 0x0f) | (((qh[l] >> (2 * c + h)) & 1) << 4));
}

static void unpack_q6_k(const uint8_t *b, wblock *w) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    w->d = bu__fp16_to_fp32(bu__ld16(b + 208));
    w->m = 0.0f;
    for (int g = 0; g < 16; g++) {
        w->sc[g] = sc[g];
        w->mn[g] = 0;
    }
    for (int n = 0; n < 2; n++)
        for (int g = 0; g < 4; g++) {
            const uint8_t *lq = ql + 64 * n + 32 * (g & 1);
            const int shift = 4 * (g >> 1);
            for (int l = 0; l < 32; l++) {
                const int qv = ((lq[l] >> shift) & 0x0f) | (((qh[32 * n + l] >> (2 * g)) & 3) << 4);
                w->q[128 * n + 32 * g + l] = (int8_t)(qv - 32);
            }
        }
}

typedef void (*unpack_fn)(const uint8_t *b, wblock *w);

typedef struct {
    int32_t type;
    int act;       /* ACT_Q8_0 / ACT_Q8_1 / ACT_Q8_K */
    int has_min;   /* Q4_1, Q5_1 (+ m*s) or Q2_K, Q4_K, Q5_K (- dmin*dx*msum) */
    unpack_fn unpack;
} q8act_format;

/* Per format of BU_Q8ACT_FORMATS: its activation format is the table's vec_dot_type (ACT_<VD>);
 * whether its blocks carry a minimum is a fact of the layout (HAS_MIN_<NAME>). */
enum { HAS_MIN_Q4_0 = 0, HAS_MIN_Q4_1 = 1, HAS_MIN_Q5_0 = 0, HAS_MIN_Q5_1 = 1, HAS_MIN_Q8_0 = 0,
       HAS_MIN_Q2_K = 1, HAS_MIN_Q3_K = 0, HAS_MIN_Q4_K = 1, HAS_MIN_Q5_K = 1, HAS_MIN_Q6_K = 0 };
#define BU_Q8ACT_FORMAT(NAME, name, VD, vd) \
    static const q8act_format F_##NAME = {BU_TYPE_##NAME, ACT_##VD, HAS_MIN_##NAME, unpack_##name};
BU_Q8ACT_FORMATS(BU_Q8ACT_FORMAT)

static inline int32_t idot(const int8_t *a, const int8_t *b, int n) {
    int32_t s = 0;
    for (int k = 0; k < n; k++) s += (int32_t)a[k] * (int32_t)b[k];
    return s;
}

/* Integer dot product of 32 weights with 32 activations (exact in int32 whatever the order). */
typedef int32_t (*idot32_fn)(const int8_t *a, const int8_t *b);

static inline int32_t idot32_scalar(const int8_t *a, const int8_t *b) { return idot(a, b, 32); }

/* t_b of one weight block against one quantized activation block (formulas at the top). */
static inline __attribute__((always_inline)) float block_term(const q8act_format *f, const wblock *w,
                                                             const uint8_t *xb, idot32_fn idot32) {
    float dx;
    memcpy(&dx, xb, 4);
    if (f->act == ACT_Q8_K) {
        const int8_t *xq = (const int8_t *)(xb + 36);
        int16_t bs[16];
        memcpy(bs, xb + 4, sizeof bs);
        int32_t isum = 0, msum = 0;
        for (int g = 0; g < 16; g++) {
            isum += w->sc[g] * idot(w->q + 16 * g, xq + 16 * g, 16);
            msum += w->mn[g] * (int32_t)bs[g];
        }
        const float t = (w->d * dx) * (float)isum;
        return f->has_min ? t - (w->m * dx) * (float)msum : t;
    }
    const int8_t *xq = (const int8_t *)(xb + (f->act == ACT_Q8_1 ? 8 : 4));
    const float t = (w->d * dx) * (float)idot32(w->q, xq);
    if (!f->has_min) return t;
    float sx;
    memcpy(&sx, xb + 4, 4);
    return t + w->m * sx;
}

/* Tokens quantized per pass: the scratch holds this many activation rows, so each weight block is
 * unpacked once per pass instead of once per token (prefill), while the scratch size stays
 * independent of n_tokens (the kernel maps' expressions: BU_Q8ACT_ROWS * row bytes). */
#define BU_Q8ACT_ROWS 8

/* The checked body of every provider in this file; always inlined so each entry point gets its own
 * copy with its integer dot product (idot32: the scalar one; the SIMD levels live in
 * bu_linear_q8fast*.c since the separate AVX2 providers were deleted, issue 31) inlined. */
static inline __attribute__((always_inline)) int linear_q8act(
    const q8act_format *f, const float *x, const void *w, const float *bias, float *y, int64_t n_tokens,
    int64_t n_in, int64_t n_out, void *ws, size_t ws_cap, idot32_fn idot32) {
    const bu_format_info *fi = bu__format(f->type);
    const int64_t be = f->act == ACT_Q8_K ? 256 : 32;
    const size_t xbb = f->act == ACT_Q8_K ? XQ8_K_BYTES : f->act == ACT_Q8_1 ? XQ8_1_BYTES : XQ8_0_BYTES;
    size_t row_bytes, xrow_bytes;
    int rc, empty;
    if ((rc = bu__q8act_check(f->type, f->act, BU_Q8ACT_ROWS, x, w, bias, y, n_tokens, n_in, n_out, ws, ws_cap,
                              &row_bytes, &xrow_bytes, &empty)) != BU_OK || empty)
        return rc;

    const int64_t nb = n_in / be;
    uint8_t *xq = (uint8_t *)ws;
    wblock wb;
    for (int64_t t0 = 0; t0 < n_tokens; t0 += BU_Q8ACT_ROWS) {
        const int64_t g = n_tokens - t0 < BU_Q8ACT_ROWS ? n_tokens - t0 : BU_Q8ACT_ROWS;
        for (int64_t i = 0; i < g; i++) {
            bu__q8_quantize(f->act, x + (t0 + i) * n_in, xq + (size_t)i * xrow_bytes, nb);
        }
        for (int64_t r = 0; r < n_out; r++) {
            const uint8_t *wr = (const uint8_t *)w + (size_t)r * row_bytes;
            float acc[BU_Q8ACT_ROWS] = {0};
            for (int64_t b = 0; b < nb; b++) {
                f->unpack(wr + (size_t)b * (size_t)fi->block_bytes, &wb);
                for (int64_t i = 0; i < g; i++)
                    acc[i] += block_term(f, &wb, xq + (size_t)i * xrow_bytes + (size_t)b * xbb, idot32);
            }
            for (int64_t i = 0; i < g; i++) y[(t0 + i) * n_out + r] = bias ? acc[i] + bias[r] : acc[i];
        }
    }
    return BU_OK;
}

#define BU_LINEAR_Q8ACT(NAME, name, VD, vd)                                                         \
    int bu_linear_##name##_##vd##_scalar(BU_LINEAR_ARGS) {                                            \
        return linear_q8act(&F_##NAME, x, w, bias, y, n_tokens, n_in, n_out, ws, ws_cap, idot32_scalar); \
    }
BU_Q8ACT_FORMATS(BU_LINEAR_Q8ACT)
