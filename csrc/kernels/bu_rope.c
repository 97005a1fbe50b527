/*
 * bu_rope.c - rotary position embedding (Su et al. 2021, "RoFormer"), in the two pair layouts
 * GGUF models use: "normal" (adjacent pairs, llama) and "neox" (halves, GPT-NeoX / qwen2 / gemma3).
 *
 * Contract: the angle p * freq_scale * theta^(-2i/rope_dim) and its cos/sin are computed in double
 * and rounded once to fp32; the rotation is fp32: y0 = x0*c - x1*s, y1 = x0*s + x1*c (each product
 * rounded, then the sum; no FMA).
 */
#include <math.h>

#include "bu_internal.h"

static int rope(int neox, const float *x, float *y, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                int64_t rope_dim, int64_t pos, float theta, float freq_scale) {
    size_t rows, bytes;
    if (!bu__dim_ok(n_tokens) || !bu__dim_ok(n_heads) || !bu__dim_ok(head_dim)) return BU_ERR_ARG;
    if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2) return BU_ERR_ARG;
    if (pos < 0 || pos > BU_DIM_MAX || n_tokens > BU_DIM_MAX - pos) return BU_ERR_ARG;
    if (!(theta > 0.0f) || !isfinite(theta) || !(freq_scale > 0.0f) || !isfinite(freq_scale)) return BU_ERR_ARG;
    if (!bu__bytes(n_tokens, n_heads, 1, &rows) || !bu__bytes((int64_t)rows, head_dim, sizeof(float), &bytes))
        return BU_ERR_ARG;
    if (bytes == 0) return BU_OK;
    if (!x || !y) return BU_ERR_NULL;
    if (!bu__same_or_disjoint(x, bytes, y, bytes)) return BU_ERR_ARG;
    const int64_t half = rope_dim / 2;
    /* theta^(-2i/rope_dim) does not depend on the token: computed once per pair index and call (a
     * block of RB indices at a time, on the stack) instead of once per token; the same doubles. */
    enum { RB = 64 };
    double inv_freq[RB];
    for (int64_t i0 = 0; i0 < half; i0 += RB) {
        const int64_t nb = half - i0 < RB ? half - i0 : RB;
        for (int64_t i = 0; i < nb; i++) inv_freq[i] = pow((double)theta, -2.0 * (double)(i0 + i) / (double)rope_dim);
        for (int64_t t = 0; t < n_tokens; t++) {
            const double p = (double)(pos + t) * (double)freq_scale;
            for (int64_t i = i0; i < i0 + nb; i++) {
                const double ang = p * inv_freq[i - i0];
                const float c = (float)cos(ang), s = (float)sin(ang);
                const int64_t j0 = neox ? i : 2 * i, j1 = neox ? i + half : 2 * i + 1;
                for (int64_t h = 0; h < n_heads; h++) {
                    const int64_t base = (t * n_heads + h) * head_dim;
                    const float x0 = x[base + j0], x1 = x[base + j1];
                    y[base + j0] = x0 * c - x1 * s;
                    y[base + j1] = x0 * s + x1 * c;
                }
            }
        }
    }
    if (x != y && rope_dim < head_dim) {
        for (int64_t t = 0; t < n_tokens; t++)
            for (int64_t h = 0; h < n_heads; h++) {
                const int64_t base = (t * n_heads + h) * head_dim;
                memcpy(y + base + rope_dim, x + base + rope_dim, (size_t)(head_dim - rope_dim) * sizeof(float));
            }
    }
    return BU_OK;
}

int bu_rope_normal_f32_scalar(const float *x, float *y, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                              int64_t rope_dim, int64_t pos, float theta, float freq_scale, void *ws, size_t ws_cap) {
    (void)ws; (void)ws_cap;
    return rope(0, x, y, n_tokens, n_heads, head_dim, rope_dim, pos, theta, freq_scale);
}

int bu_rope_neox_f32_scalar(const float *x, float *y, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                            int64_t rope_dim, int64_t pos, float theta, float freq_scale, void *ws, size_t ws_cap) {
    (void)ws; (void)ws_cap;
    return rope(1, x, y, n_tokens, n_heads, head_dim, rope_dim, pos, theta, freq_scale);
}
