/*
 * bu_internal.h - helpers shared by the kernel sources (not part of the public ABI).
 */
#ifndef BU_INTERNAL_H
#define BU_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "bu_kernels.h"

/* Dequantize nb consecutive blocks (nb * block_elems weights) from src into dst. */
typedef void (*bu_dequant_fn)(const uint8_t *restrict src, float *restrict dst, int64_t nb);

typedef struct {
    int32_t ggml_type;
    int64_t block_elems;
    int64_t block_bytes;
    bu_dequant_fn dequant;
} bu_format_info;

/* Format entry for a GGML type id, or NULL when the kernels cannot read that type. Hidden: internal
 * to whatever library or program the kernel sources are compiled into. */
__attribute__((visibility("hidden"))) const bu_format_info *bu__format(int32_t ggml_type);

/* fp32 dot product of n elements with the "lanes8" order (see bu__dot_f32). */
typedef float (*bu_dot_fn)(const float *a, const float *b, int64_t n);

/* bu__dot_f32 as a function (bu_linear.c), for the drivers that take a bu_dot_fn. */
__attribute__((visibility("hidden"))) float bu__dot_lanes8(const float *a, const float *b, int64_t n);

/* The checked body of every linear provider: validates dims, pointers, workspace and aliasing, then
 * for each weight row dequantizes it with `dequant` into ws (or reads F32 rows in place) and
 * computes y[t, r] = dot(x[t], row) (+ bias[r]) for every token. Providers differ only in the
 * two function pointers, so every provider has identical argument checking. */
__attribute__((visibility("hidden"))) int bu__linear_driver(
    int32_t type, const float *x, const void *w, const float *bias, float *y, int64_t n_tokens,
    int64_t n_in, int64_t n_out, void *ws, size_t ws_cap, bu_dequant_fn dequant, bu_dot_fn dot);

/* 0 <= d <= BU_DIM_MAX */
static inline int bu__dim_ok(int64_t d) { return d >= 0 && d <= BU_DIM_MAX; }

/* *out = a * b * elem_bytes as size_t; 0 on overflow. Dims are already range-checked. */
static inline int bu__bytes(int64_t a, int64_t b, size_t elem_bytes, size_t *out) {
    size_t ab;
    if (__builtin_mul_overflow((size_t)a, (size_t)b, &ab)) return 0;
    if (__builtin_mul_overflow(ab, elem_bytes, out)) return 0;
    return 1;
}

/* Byte ranges [a, a+na) and [b, b+nb) share at least one byte. Compared as integers because the
 * ranges may belong to different objects. */
static inline int bu__overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    if (na == 0 || nb == 0) return 0;
    return pa < pb + nb && pb < pa + na;
}

/* Allowed relation for an in-place capable kernel: no overlap, or exactly the same range. */
static inline int bu__same_or_disjoint(const void *a, size_t na, const void *b, size_t nb) {
    return !bu__overlap(a, na, b, nb) || ((uintptr_t)a == (uintptr_t)b && na == nb);
}

/* Decode's one-token products stream every weight from DRAM once, and the hardware prefetcher
 * alone keeps too few cache lines in flight (docs/kernels.md "Prefetch": smollm2's Q8_0 output
 * head was read at 0.5 GB/s without, 1.75 GB/s with, on a shared host). So while a group of rows
 * reads n bytes at p in each of its rows, the fast kernels ask for the same bytes of the next
 * group. A hint only: it never faults (even past a matrix's end) and changes no value. */
static inline void bu__prefetch(const void *p, size_t n) {
    /* the first line unconditionally: a quantized chunk (n <= 64) then costs one instruction and a
     * predicted branch, not a loop (4-10 % of a Q5_0 / Q4_K / Q6_K decode row, measured A/B) */
    __builtin_prefetch(p, 0, 3);
    for (size_t o = 64; o < n; o += 64) __builtin_prefetch((const char *)p + o, 0, 3);
}

/* IEEE binary16 -> binary32, exact for every input (subnormals, inf, NaN with its payload). Bit
 * arithmetic rather than _Float16 so the result does not depend on the ISA flags, and branch-free
 * so loops over it vectorise: a normal or inf/NaN half keeps its mantissa and has its exponent
 * rebiased (+112, or +224 to reach 255 for inf/NaN); a zero or subnormal half is m * 2^-24, which
 * fp32 represents exactly. */
static inline float bu__fp16_to_fp32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t em = (uint32_t)(h & 0x7fffu) << 13;
    const uint32_t e = (uint32_t)(h >> 10) & 0x1fu;
    union { float f; uint32_t u; } sub, out; /* type punning through a union is defined in C11 */
    sub.f = (float)(h & 0x3ffu) * 0x1p-24f;
    const uint32_t sub_bits = sub.u;
    const uint32_t is_sub = 0u - (uint32_t)(e == 0), is_inf = 0u - (uint32_t)(e == 0x1fu); /* masks */
    const uint32_t mag = (sub_bits & is_sub) | ((em + (112u << 23) + (is_inf & (112u << 23))) & ~is_sub);
    out.u = sign | mag;
    return out.f;
}

/* IEEE binary32 -> binary16, round to nearest even (what F16C's vcvtps2ph with imm 0 and numpy's
 * float16 cast do): overflow to inf, subnormal halves, NaN kept quiet. */
static inline uint16_t bu__fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) {
        /* below 2^-14: the half is m * 2^-24; scaling by 2^24 is exact, then adding and removing
         * 2^23 rounds to an integer, ties to even (default rounding mode, no fast-math) */
        float v;
        memcpy(&v, &ax, 4);
        const float t = v * 0x1p24f + 0x1p23f;
        return (uint16_t)(sign | (uint32_t)(t - 0x1p23f));
    }
    uint32_t r = ax - (112u << 23);
    r = (r + 0x0fffu + ((r >> 13) & 1u)) >> 13; /* a carry out of the mantissa bumps the exponent */
    return (uint16_t)(sign | r);
}

/* f rounded to the nearest binary16 (ties to even), widened back exactly. */
static inline float bu__fp16_round(float f) { return bu__fp16_to_fp32(bu__fp32_to_fp16(f)); }

static inline float bu__bf16_to_fp32(uint16_t h) {
    union { float f; uint32_t u; } v;
    v.u = (uint32_t)h << 16;
    return v.f;
}

/* Little-endian loads from possibly unaligned weight bytes. */
static inline uint16_t bu__ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t bu__ld32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* The declared fp32 dot product (contract "lanes8"): element k accumulates into lane k mod 8 in
 * increasing k, each product rounded to fp32 then added (no FMA: built with -ffp-contract=off);
 * lanes combine as ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)). Eight independent lanes let the
 * compiler vectorise without reassociating. */
static inline float bu__dot_f32(const float *a, const float *b, int64_t n) {
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        for (int j = 0; j < 8; j++) l[j] += a[k + j] * b[k + j];
    }
    for (int j = 0; k < n; k++, j++) l[j] += a[k] * b[k];
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* Argument checks shared by every linear provider (fp32 and quantized activations), in the order
 * the status codes are documented: dimensions and size arithmetic (-2), nothing to do (0), NULL
 * pointers (-1), workspace capacity `need` (-3), then forbidden overlaps (-2): y and the workspace
 * may alias neither x, W, the bias nor each other. bu__linear_sizes fills the byte counts;
 * bu__linear_args returns BU_OK with *empty = 1 when n_tokens or n_out is 0. */
typedef struct { size_t row, w, x, y, b; } bu_linear_sizes;

static inline int bu__linear_sizes(int32_t type, int64_t n_tokens, int64_t n_in, int64_t n_out,
                                   bu_linear_sizes *s) {
    if (!bu__dim_ok(n_tokens) || !bu__dim_ok(n_in) || !bu__dim_ok(n_out)) return BU_ERR_ARG;
    if (bu_row_bytes(type, n_in, &s->row) != BU_OK) return BU_ERR_ARG;
    if (!bu__bytes(n_out, (int64_t)s->row, 1, &s->w) || !bu__bytes(n_tokens, n_in, sizeof(float), &s->x) ||
        !bu__bytes(n_tokens, n_out, sizeof(float), &s->y) || !bu__bytes(n_out, 1, sizeof(float), &s->b))
        return BU_ERR_ARG;
    return BU_OK;
}

static inline int bu__linear_args(const bu_linear_sizes *s, int64_t n_tokens, int64_t n_out, const float *x,
                                  const void *w, const float *bias, const float *y, const void *ws,
                                  size_t ws_cap, size_t need, int *empty) {
    *empty = n_tokens == 0 || n_out == 0;
    if (*empty) return BU_OK;
    if (!x || !w || !y) return BU_ERR_NULL;
    if (need > 0 && !ws) return BU_ERR_NULL;
    if (ws_cap < need) return BU_ERR_WS;
    if (bu__overlap(y, s->y, x, s->x) || bu__overlap(y, s->y, w, s->w) ||
        (bias && bu__overlap(y, s->y, bias, s->b)) ||
        (need > 0 && (bu__overlap(ws, need, y, s->y) || bu__overlap(ws, need, x, s->x) ||
                      bu__overlap(ws, need, w, s->w) || (bias && bu__overlap(ws, need, bias, s->b)))))
        return BU_ERR_ARG;
    return BU_OK;
}

/* moe_ffn over a given linear provider (bu_moe.c): `lin` applies each selected expert's gate, up and
 * down (linear/1's calling convention); `lin_ws` gives the workspace bytes `lin` needs for both of
 * its shapes (n_embd -> n_ff and n_ff -> n_embd), which moe_ffn's workspace ends with. The scalar
 * providers pass bu_linear_<fmt>_scalar, the fast ones bu_linear_<fmt>_fast (bu_moe_fast.c). */
typedef int (*bu_linear_fn)(const float *x, const void *w, const float *bias, float *y, int64_t n_tokens,
                            int64_t n_in, int64_t n_out, void *ws, size_t ws_cap);
typedef int (*bu_moe_lin_ws_fn)(int32_t type, int64_t n_embd, int64_t n_ff, size_t *bytes);
__attribute__((visibility("hidden"))) int bu__moe_ffn(
    int32_t type, bu_linear_fn lin, bu_moe_lin_ws_fn lin_ws, const float *x, const float *logits, const void *w_gate,
    const void *w_up, const void *w_down, float *y, int64_t T, int64_t n_embd, int64_t n_ff, int64_t n_expert,
    int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);

#endif /* BU_INTERNAL_H */
