/*
 * bu_linear.c - y[T, n_out] = x[T, n_in] . W^T (+ bias), W in GGML block layout.
 *
 * Each weight row is dequantized once per call into the workspace, then dotted with every token's
 * activation row (so prefill pays one dequantization per row, not one per token). The dot product
 * is bu__dot_f32 (contract "lanes8"); the bias is added after it, one fp32 rounding.
 */
#include "bu_internal.h"

float bu__dot_lanes8(const float *a, const float *b, int64_t n) { return bu__dot_f32(a, b, n); }

int bu__linear_driver(int32_t type, const float *x, const void *w, const float *bias, float *y,
                      int64_t n_tokens, int64_t n_in, int64_t n_out, void *ws, size_t ws_cap,
                      bu_dequant_fn dequant, bu_dot_fn dot) {
    const bu_format_info *f = bu__format(type);
    bu_linear_sizes sz;
    size_t need = 0;
    int rc, empty;
    if ((rc = bu__linear_sizes(type, n_tokens, n_in, n_out, &sz)) != BU_OK) return rc;
    /* F32 weights are read in place; other formats need one dequantized row */
    if (type != BU_TYPE_F32 && !bu__bytes(n_in, 1, sizeof(float), &need)) return BU_ERR_ARG;
    if ((rc = bu__linear_args(&sz, n_tokens, n_out, x, w, bias, y, ws, ws_cap, need, &empty)) != BU_OK || empty)
        return rc;
    const size_t row_bytes = sz.row;
    const int64_t nb = n_in / f->block_elems;
    float *row = (float *)ws;
    for (int64_t r = 0; r < n_out; r++) {
        const uint8_t *wr = (const uint8_t *)w + (size_t)r * row_bytes;
        const float *wf;
        if (type == BU_TYPE_F32) {
            wf = (const float *)wr;
        } else {
            dequant(wr, row, nb);
            wf = row;
        }
        const float b = bias ? bias[r] : 0.0f;
        for (int64_t t = 0; t < n_tokens; t++) {
            const float s = dot(x + t * n_in, wf, n_in);
            y[t * n_out + r] = bias ? s + b : s;
        }
    }
    return BU_OK;
}

#define BU_LINEAR(NAME, name, VD, vd)                                                              \
    int bu_linear_##name##_scalar(BU_LINEAR_ARGS) {                                                 \
        return bu__linear_driver(BU_TYPE_##NAME, x, w, bias, y, n_tokens, n_in, n_out, ws, ws_cap,  \
                                 bu__format(BU_TYPE_##NAME)->dequant, bu__dot_lanes8);              \
    }
BU_DOT_FORMATS(BU_LINEAR)
