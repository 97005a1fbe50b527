/*
 * bu_moe.c - the routed feed-forward of mixture-of-experts models (llama.cpp build_moe_ffn).
 *
 * moe_route: router logits [T, n_expert] -> the n_used selected experts per token and their
 *   weights. Gating softmax (max-subtracted, expf, one fp32 sum in increasing expert order, then
 *   each exp divided by it) or sigmoid (1 / (1 + expf(-z))); selection: the n_used largest gate
 *   values, in decreasing order, ties to the lower expert index (llama.cpp: std::sort of a
 *   descending comparator, an insertion sort - stable - for up to 16 experts); weights: the gate
 *   values of the selected, divided by their fp32 sum (summed in slot order, clamped below at
 *   6.103515625e-5 as llama.cpp) when norm != 0, then multiplied by scale when scale != 1.
 * moe_ffn: routes x's router logits as moe_route (into its workspace), then
 *   y[t] = sum over t's selected experts e, in increasing e, of
 *   w[t, e] * down_e(silu(gate_e(x[t])) * up_e(x[t])). Experts are visited in increasing index;
 *   an expert no token selected is never read (decode reads only n_used experts' rows). The rows
 *   routed to one expert are gathered and go through the format's scalar linear provider (one
 *   dequantization per weight row per expert per call), so each expert's matrix products are the
 *   linear contract exactly; silu and the product as the swiglu kernel (expf in fp32).
 * Kernels never allocate: the workspace holds the gathered rows, the gate/up/down results and
 * the linear provider's row buffer (the kernel maps' scratch expressions).
 */
#include <math.h>

#include "bu_internal.h"

/* llama.cpp build_moe_ffn: weights_sum clamped to the smallest normal fp16 before the division */
#define BU_MOE_SUM_MIN 6.103515625e-5f

int bu_moe_route_f32_scalar(const float *logits, int32_t *ids, float *wts, int64_t n_tokens, int64_t n_expert,
                            int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap) {
    size_t lbytes, obytes, need;
    if (!bu__dim_ok(n_tokens) || !bu__dim_ok(n_expert) || n_used < 1 || n_used > n_expert ||
        (gating != 0 && gating != 1) || !isfinite(scale))
        return BU_ERR_ARG;
    if (!bu__bytes(n_tokens, n_expert, sizeof(float), &lbytes) || !bu__bytes(n_tokens, n_used, sizeof(float), &obytes) ||
        !bu__bytes(n_expert, 1, sizeof(float), &need))
        return BU_ERR_ARG;
    if (n_tokens == 0) return BU_OK;
    if (!logits || !ids || !wts || !ws) return BU_ERR_NULL;
    if (ws_cap < need) return BU_ERR_WS;
    if (bu__overlap(ids, obytes, wts, obytes) || bu__overlap(ids, obytes, logits, lbytes) ||
        bu__overlap(wts, obytes, logits, lbytes) || bu__overlap(ws, need, logits, lbytes) ||
        bu__overlap(ws, need, ids, obytes) || bu__overlap(ws, need, wts, obytes))
        return BU_ERR_ARG;
    for (int64_t i = 0; i < n_tokens * n_expert; i++)
        if (isnan(logits[i])) return BU_ERR_ARG;  /* selection needs a total order */
    float *p = (float *)ws;
    for (int64_t t = 0; t < n_tokens; t++) {
        const float *z = logits + t * n_expert;
        if (gating == 0) {
            float m = z[0], sum = 0.0f;
            for (int64_t e = 1; e < n_expert; e++) m = z[e] > m ? z[e] : m;
            for (int64_t e = 0; e < n_expert; e++) { p[e] = expf(z[e] - m); sum += p[e]; }
            for (int64_t e = 0; e < n_expert; e++) p[e] = p[e] / sum;
        } else {
            for (int64_t e = 0; e < n_expert; e++) p[e] = 1.0f / (1.0f + expf(-z[e]));
        }
        int32_t *id = ids + t * n_used;
        float *w = wts + t * n_used;
        /* selection: slot j takes the largest value not yet taken, the lowest index on a tie */
        for (int64_t j = 0; j < n_used; j++) {
            int64_t best = -1;
            for (int64_t e = 0; e < n_expert; e++) {
                int taken = 0;
                for (int64_t i = 0; i < j; i++) taken |= id[i] == (int32_t)e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            id[j] = (int32_t)best;
            w[j] = p[best];
        }
        if (norm) {
            float sum = 0.0f;
            for (int64_t j = 0; j < n_used; j++) sum += w[j];
            sum = sum < BU_MOE_SUM_MIN ? BU_MOE_SUM_MIN : sum;
            for (int64_t j = 0; j < n_used; j++) w[j] = w[j] / sum;
        }
        if (scale != 1.0f)
            for (int64_t j = 0; j < n_used; j++) w[j] = w[j] * scale;
    }
    return BU_OK;
}

/* Byte sizes of moe_ffn's operands and workspace; BU_ERR_ARG on a bad dimension or overflow. */
typedef struct { size_t x, ids, gu_row, down_row, gu_exp, down_exp, ws; } bu_moe_sizes;

static int bu__moe_sizes(int32_t type, bu_moe_lin_ws_fn lin_ws, int64_t T, int64_t n_embd, int64_t n_ff,
                         int64_t n_expert, int64_t n_used, bu_moe_sizes *s, size_t *lin_bytes) {
    size_t a, b, c;
    if (!bu__dim_ok(T) || !bu__dim_ok(n_embd) || !bu__dim_ok(n_ff) || !bu__dim_ok(n_expert) || n_used < 1 ||
        n_used > n_expert)
        return BU_ERR_ARG;
    if (bu_row_bytes(type, n_embd, &s->gu_row) != BU_OK || bu_row_bytes(type, n_ff, &s->down_row) != BU_OK)
        return BU_ERR_ARG;
    if (!bu__bytes(T, n_embd, sizeof(float), &s->x) || !bu__bytes(T, n_used, sizeof(int32_t), &s->ids) ||
        !bu__bytes(n_ff, (int64_t)s->gu_row, 1, &s->gu_exp) || !bu__bytes(n_embd, (int64_t)s->down_row, 1, &s->down_exp))
        return BU_ERR_ARG;
    /* workspace: rows [T, n_embd], gate and up [T, n_ff] each, down [T, n_embd], (t, slot) [T] x 2,
     * then the linear provider's own workspace for both shapes (lin_ws: the provider's need) */
    if (!bu__bytes(T, 2 * n_embd + 2 * n_ff + 2, sizeof(float), &a) || lin_ws(type, n_embd, n_ff, &b) != BU_OK)
        return BU_ERR_ARG;
    *lin_bytes = b;
    c = a + b;
    if (c < a) return BU_ERR_ARG;
    s->ws = c;
    /* the stacked tensors must be addressable: n_expert whole matrices */
    if (!bu__bytes(n_expert, (int64_t)s->gu_exp, 1, &a) || !bu__bytes(n_expert, (int64_t)s->down_exp, 1, &b))
        return BU_ERR_ARG;
    return BU_OK;
}

/* The experts of moe_ffn for routed (ids, wts): y[t] = sum over e (increasing) of wts * expert_e(x[t]).
 * ids are in range and distinct per token (bu_moe_route made them); ws holds s->ws bytes. */
static int bu__moe_experts(const bu_moe_sizes *s, bu_linear_fn lin, size_t row_cap, const float *x, const int32_t *ids,
                           const float *wts, const void *w_gate, const void *w_up, const void *w_down, float *y,
                           int64_t T, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, float *ws) {
    float *xs = ws, *g = xs + T * n_embd, *u = g + T * n_ff, *d = u + T * n_ff;
    int32_t *tok = (int32_t *)(d + T * n_embd);
    float *tw = (float *)(tok + T), *row = tw + T;
    int rc;
    for (int64_t i = 0; i < T * n_embd; i++) y[i] = 0.0f;
    for (int64_t e = 0; e < n_expert; e++) {
        int64_t cnt = 0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < n_used; j++)
                if (ids[t * n_used + j] == (int32_t)e) {
                    tok[cnt] = (int32_t)t;
                    tw[cnt] = wts[t * n_used + j];
                    for (int64_t k = 0; k < n_embd; k++) xs[cnt * n_embd + k] = x[t * n_embd + k];
                    cnt++;
                }
        if (cnt == 0) continue;  /* not selected: its rows are never read */
        const uint8_t *wg = (const uint8_t *)w_gate + (size_t)e * s->gu_exp;
        const uint8_t *wu = (const uint8_t *)w_up + (size_t)e * s->gu_exp;
        const uint8_t *wd = (const uint8_t *)w_down + (size_t)e * s->down_exp;
        if ((rc = lin(xs, wg, NULL, g, cnt, n_embd, n_ff, row, row_cap)) != BU_OK) return rc;
        if ((rc = lin(xs, wu, NULL, u, cnt, n_embd, n_ff, row, row_cap)) != BU_OK) return rc;
        for (int64_t i = 0; i < cnt * n_ff; i++) {
            const float gv = g[i];
            g[i] = gv / (1.0f + expf(-gv)) * u[i];
        }
        if ((rc = lin(g, wd, NULL, d, cnt, n_ff, n_embd, row, row_cap)) != BU_OK) return rc;
        for (int64_t i = 0; i < cnt; i++) {
            float *yt = y + (int64_t)tok[i] * n_embd;
            for (int64_t k = 0; k < n_embd; k++) yt[k] += tw[i] * d[i * n_embd + k];
        }
    }
    return BU_OK;
}

int bu__moe_ffn(int32_t type, bu_linear_fn lin, bu_moe_lin_ws_fn lin_ws, const float *x, const float *logits, const void *w_gate,
                       const void *w_up, const void *w_down, float *y, int64_t T, int64_t n_embd, int64_t n_ff,
                       int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws,
                       size_t ws_cap) {
    bu_moe_sizes s;
    size_t lbytes, route, gates_bytes, total, lin_bytes = 0;
    int rc;
    if ((rc = bu__moe_sizes(type, lin_ws, T, n_embd, n_ff, n_expert, n_used, &s, &lin_bytes)) != BU_OK) return rc;
    if ((gating != 0 && gating != 1) || !isfinite(scale)) return BU_ERR_ARG;
    /* routing part of the workspace: ids and weights [T, n_used], one token's gates [n_expert];
     * each product through bu__bytes (T * n_used may exceed int64 range at the dimension limits) */
    if (!bu__bytes(T, n_expert, sizeof(float), &lbytes) || !bu__bytes(T, 2 * n_used, sizeof(float), &route) ||
        !bu__bytes(n_expert, 1, sizeof(float), &gates_bytes))
        return BU_ERR_ARG;
    total = s.ws + route;
    if (total < s.ws || total + gates_bytes < total) return BU_ERR_ARG;
    total += gates_bytes;
    if (T == 0 || n_embd == 0) return BU_OK;
    if (!x || !logits || !w_gate || !w_up || !w_down || !y || !ws) return BU_ERR_NULL;
    if (ws_cap < total) return BU_ERR_WS;
    if (bu__overlap(y, s.x, x, s.x) || bu__overlap(y, s.x, logits, lbytes) || bu__overlap(ws, total, y, s.x) ||
        bu__overlap(ws, total, x, s.x) || bu__overlap(ws, total, logits, lbytes))
        return BU_ERR_ARG;
    int32_t *ids = (int32_t *)ws;
    float *wts = (float *)(ids + T * n_used), *gates = wts + T * n_used, *rest = gates + n_expert;
    if ((rc = bu_moe_route_f32_scalar(logits, ids, wts, T, n_expert, n_used, gating, norm, scale, gates,
                                      (size_t)n_expert * sizeof(float))) != BU_OK)
        return rc;
    return bu__moe_experts(&s, lin, lin_bytes, x, ids, wts, w_gate, w_up, w_down, y, T, n_embd, n_ff, n_expert, n_used, rest);
}

/* linear.<fmt>.scalar's workspace for both of moe_ffn's shapes: one row of n_embd or n_ff floats
 * (sized n_embd + n_ff, as the scalar maps declare: their expressions predate max) */
static int bu__moe_scalar_lin_ws(int32_t type, int64_t n_embd, int64_t n_ff, size_t *bytes) {
    (void)type;
    return bu__bytes(n_embd + n_ff, 1, sizeof(float), bytes) ? BU_OK : BU_ERR_ARG;
}

#define BU_MOE_FFN(fmt, TYPE)                                                                       \
    int bu_moe_ffn_##fmt##_scalar(const float *x, const float *logits, const void *w_gate,             \
                                  const void *w_up, const void *w_down, float *y, int64_t n_tokens,    \
                                  int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used,      \
                                  int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap) { \
        return bu__moe_ffn(TYPE, bu_linear_##fmt##_scalar, bu__moe_scalar_lin_ws, x, logits, w_gate, w_up, w_down, y, n_tokens, \
                           n_embd, n_ff, n_expert, n_used, gating, norm, scale, ws, ws_cap);           \
    }

BU_MOE_FFN(f32, BU_TYPE_F32)
BU_MOE_FFN(f16, BU_TYPE_F16)
BU_MOE_FFN(bf16, BU_TYPE_BF16)
BU_MOE_FFN(q4_0, BU_TYPE_Q4_0)
BU_MOE_FFN(q4_1, BU_TYPE_Q4_1)
BU_MOE_FFN(q5_0, BU_TYPE_Q5_0)
BU_MOE_FFN(q5_1, BU_TYPE_Q5_1)
BU_MOE_FFN(q8_0, BU_TYPE_Q8_0)
BU_MOE_FFN(q4_k, BU_TYPE_Q4_K)
BU_MOE_FFN(q6_k, BU_TYPE_Q6_K)
