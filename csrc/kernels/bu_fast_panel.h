/*
 * bu_fast_panel.h - the many-token (prefill) form of the fast linear providers, one text for the
 * AVX2 and the AVX-512 level (included by bu_linear_fast_avx2.c / _avx512.c, so compiled under
 * each file's target pragma).
 *
 * When n_in is a multiple of 32, the weight rows are unpacked bu__panel_rows(n_in) at a time into an fp32
 * panel in the workspace (F32 weights are their own panel) and every token of the call is
 * multiplied with the panel by the level's micro-kernel. Each output keeps its own lanes and the
 * lanes16fma reduction, so a row of a many-token call has the bits of that token alone.
 *
 * The including file defines first: PANEL_R x PANEL_T, the full tile (weight rows x tokens);
 * micro(R, T, p, ldp, x, ldx, n_in, bias, y, ldy), its micro-kernel for R <= PANEL_R rows and
 * T <= PANEL_T tokens; unpack_chunk(deq, row, j, p, ks), which stores weights 32j..32j+31 of a row
 * at p; gemv_rows(deq, type, R, x, wr, rs, row_bytes, pf, n_in, bias, y, ys), one token times
 * R <= 4 rows rs bytes apart (outputs ys apart), prefetching pf bytes ahead; and deq_fn.
 *
 * The one-token form (decode_linear, at the end) is shared text too: which 4 rows make a group.
 */
#ifndef BU_FAST_PANEL_H
#define BU_FAST_PANEL_H

/* The micro-kernel's four shapes (full tile, one row, one token, one of each), each compiled with
 * its sizes as constants */
#define BU_MICRO(name, R, T)                                                                            \
    static void micro_##name(const float *p, int64_t ldp, const float *x, int64_t ldx, int64_t n_in,   \
                             const float *b, float *y, int64_t ldy) {                                   \
        micro(R, T, p, ldp, x, ldx, n_in, b, y, ldy);                                                   \
    }
BU_MICRO(full, PANEL_R, PANEL_T)
BU_MICRO(row1, 1, PANEL_T)
BU_MICRO(tok1, PANEL_R, 1)
BU_MICRO(one, 1, 1)

/* Every token x every row of one panel (nr rows of p): full tiles, then the 1-row / 1-token edges */
static void panel_gemm(const float *p, int64_t ldp, int64_t nr, const float *x, int64_t n_tokens, int64_t n_in,
                       const float *bias, float *y, int64_t n_out) {
    int64_t t = 0;
    for (; t + PANEL_T <= n_tokens; t += PANEL_T) {
        int64_t r = 0;
        for (; r + PANEL_R <= nr; r += PANEL_R)
            micro_full(p + r * ldp, ldp, x + t * n_in, n_in, n_in, bias ? bias + r : NULL, y + t * n_out + r, n_out);
        for (; r < nr; r++)
            micro_row1(p + r * ldp, ldp, x + t * n_in, n_in, n_in, bias ? bias + r : NULL, y + t * n_out + r, n_out);
    }
    for (; t < n_tokens; t++) {
        int64_t r = 0;
        for (; r + PANEL_R <= nr; r += PANEL_R)
            micro_tok1(p + r * ldp, ldp, x + t * n_in, n_in, n_in, bias ? bias + r : NULL, y + t * n_out + r, n_out);
        for (; r < nr; r++)
            micro_one(p + r * ldp, ldp, x + t * n_in, n_in, n_in, bias ? bias + r : NULL, y + t * n_out + r, n_out);
    }
}

/* The many-token form, for n_tokens > 1 and n_in % 32 == 0 (returns 1); other calls: 0, nothing done.
 * ws holds bu__panel_rows(n_in) * n_in floats unless the type is F32. */
BU_AI int panel_linear(deq_fn deq, int32_t type, const float *x, const uint8_t *w, const float *bias, float *y,
                       int64_t n_tokens, int64_t n_in, int64_t n_out, size_t row_bytes, float *ws) {
    if (n_tokens < 2 || n_in % 32 != 0) return 0;
    const int64_t pr = bu__panel_rows(n_in);
    for (int64_t r0 = 0; r0 < n_out; r0 += pr) {
        const int64_t nr = n_out - r0 < pr ? n_out - r0 : pr;
        const uint8_t *wr = w + (size_t)r0 * row_bytes;
        const float *p = (const float *)(const void *)wr;
        if (type != BU_TYPE_F32) {
            float ks[16]; /* the row's scale cache (bu_fast_deq.h) */
            for (int64_t r = 0; r < nr; r++)
                for (int64_t j = 0; j < n_in / 32; j++)
                    unpack_chunk(deq, wr + (size_t)r * row_bytes, j, ws + r * n_in + 32 * j, ks);
            p = ws;
        }
        panel_gemm(p, n_in, nr, x, n_tokens, n_in, bias ? bias + r0 : NULL, y + r0, n_out);
    }
    return 1;
}

/* The one-token form: 4 rows at a time, BU_DECODE_STREAMS (bu_fast.h) says which 4: a quarter of
 * the call apart (4 long streams, prefetched BU_PF_AHEAD down each) or adjacent (the next group's
 * chunk prefetched); the last n_out % 4 rows one at a time. */
BU_AI void decode_linear(deq_fn deq, int32_t type, const float *x, const uint8_t *w, const float *bias, float *y,
                         int64_t n_in, int64_t n_out, size_t row_bytes) {
    const int split = BU_DECODE_STREAMS(type);
    const int64_t q = n_out / 4, apart = split ? q : 1;
    const size_t pf = split ? BU_PF_AHEAD : 4 * row_bytes;
    for (int64_t g = 0; g < q; g++) {
        const int64_t r = split ? g : 4 * g; /* the group's first row */
        gemv_rows(deq, type, 4, x, w + (size_t)r * row_bytes, (size_t)apart * row_bytes, row_bytes, pf, n_in,
                  bias ? bias + r : NULL, y + r, apart);
    }
    for (int64_t r = 4 * q; r < n_out; r++)
        gemv_rows(deq, type, 1, x, w + (size_t)r * row_bytes, row_bytes, row_bytes, pf, n_in, bias ? bias + r : NULL,
                  y + r, 1);
}

#endif /* BU_FAST_PANEL_H */
