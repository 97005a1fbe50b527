/*
 * bu_attention_avx2_body.h - the avx2 level's attention body, once for both KV cache types: included
 * by bu_attention_avx2.c (fp32 cache, attention.f32.fast) and bu_attention_f16_avx2.c (F16 cache,
 * attention.f16.fast) after their target pragma and these definitions:
 *   ATT_X            the call's argument struct (bu_attn / bu_attn16); ATT_A(x): its const bu_attn *
 *   ATT_KT           element type of a key / value row (float / uint16_t)
 *   ATT_KEY(x, call, j, hk), ATT_VALUE(x, call, j, hk): row j of KV head hk (const ATT_KT *)
 *   ATT_LD8(p)       8 elements at p as fp32 (exact)
 *   ATT_LDLAST(p, n, m)  the last register of a row: n <= 8 elements, lanes past n +0 (m: lanes < n)
 *   ATT_PREP(x, hk, call)  run once per KV head before its rows (the F16 level rounds the call's rows)
 *   ATT_HEADS        the name of the body's entry point
 *
 * Work: the query rows (t, h) of one KV head hk, h in [h0, h1), head-major then token, are taken
 * BU_ATTN_TILE = 4 at a time (decode: 4 heads of one group; prefill: 4 consecutive tokens of one
 * head). Every key and value row of the tile's key range is loaded once for the 4 rows.
 * Contract "lanes8fma" (docs/kernels.md): q.k element d goes to fp32 lane d mod 8 with one fused
 * multiply-add in increasing d (a tail of head_dim mod 8 is padded with +0), lanes combine as
 * ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)); the softmax is bu__attention_softmax_avx2 (polynomial exp,
 * double sum in 8 lanes); out[d] = fma(w_j, v_j[d], out[d]) in increasing j over the row's own keys
 * only. Which rows share a tile changes no bit of any row, so any head range gives the bits of the
 * whole call. Not a header of declarations: it defines static functions, once per including file.
 */
#include "bu_attention_simd.h"

#define TR BU_ATTN_TILE
/* constant-trip loops over rows, keys and registers are unrolled so the accumulators stay in registers */
#define U_ _Pragma("GCC unroll 16")
#define TK 3 /* keys per step of the q.k kernel: 4 x 3 accumulators + 3 keys + 1 query = 16 registers */
/* q.k reads the KV cache straight from DRAM in decode (a step's weights evict it), and a software
 * prefetch two steps ahead made gemma3's decode at depth 1024 1.04x faster at 2 threads (A/B, 6
 * alternations; no change at 1 thread) */
#define PREFETCH_KEYS (2 * TK)

/* sc[i * n_ctx + (j - jlo)] = q_i . k_j for the tile's 4 query rows and every j in [jlo, jhi]. */
static void qk_tile(const ATT_X *x, const ATT_KT *call, int64_t hk, const float *const qp[TR], int64_t jlo,
                    int64_t jhi, float *sc) {
    const bu_attn *a = ATT_A(x);
    const int64_t D = a->head_dim, Dm = D & ~(int64_t)7;
    const __m256i m = bu__attn_tail_mask(D - Dm);
    (void)call;
    for (int64_t j = jlo; j <= jhi; j += TK) {
        const ATT_KT *kp[TK];
        U_ for (int c = 0; c < TK; c++) kp[c] = ATT_KEY(x, call, j + c <= jhi ? j + c : jhi, hk); /* pad: recompute */
        const char *pf[TK]; /* the key rows PREFETCH_KEYS ahead, asked for a line per 16 floats as these are read */
        U_ for (int c = 0; c < TK; c++)
            pf[c] = (const char *)ATT_KEY(x, call, j + c + PREFETCH_KEYS <= jhi ? j + c + PREFETCH_KEYS : jhi, hk);
        __m256 acc[TR][TK];
        U_ for (int i = 0; i < TR; i++)
            U_ for (int c = 0; c < TK; c++) acc[i][c] = _mm256_setzero_ps();
        for (int64_t d = 0; d < Dm; d += 8) {
            if ((d & 15) == 0) U_ for (int c = 0; c < TK; c++) __builtin_prefetch(pf[c] + d * sizeof(ATT_KT), 0, 3);
            const __m256 k0 = ATT_LD8(kp[0] + d), k1 = ATT_LD8(kp[1] + d), k2 = ATT_LD8(kp[2] + d);
            U_ for (int i = 0; i < TR; i++) {
                const __m256 q = _mm256_loadu_ps(qp[i] + d);
                acc[i][0] = _mm256_fmadd_ps(q, k0, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(q, k1, acc[i][1]);
                acc[i][2] = _mm256_fmadd_ps(q, k2, acc[i][2]);
            }
        }
        if (Dm < D) {
            const __m256 k0 = ATT_LDLAST(kp[0] + Dm, D - Dm, m), k1 = ATT_LDLAST(kp[1] + Dm, D - Dm, m),
                         k2 = ATT_LDLAST(kp[2] + Dm, D - Dm, m);
            U_ for (int i = 0; i < TR; i++) {
                const __m256 q = _mm256_maskload_ps(qp[i] + Dm, m);
                acc[i][0] = _mm256_fmadd_ps(q, k0, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(q, k1, acc[i][1]);
                acc[i][2] = _mm256_fmadd_ps(q, k2, acc[i][2]);
            }
        }
        U_ for (int c = 0; c < TK; c++) {
            if (j + c > jhi) break;
            float r[4];
            _mm_storeu_ps(r, bu__attn_combine4(acc[0][c], acc[1][c], acc[2][c], acc[3][c]));
            U_ for (int i = 0; i < TR; i++) sc[(size_t)i * (size_t)a->n_ctx + (size_t)(j + c - jlo)] = r[i];
        }
    }
}

/* The tile's R output rows: op[i] = the sum over row i's own keys j in [lo_i, hi_i] of w_ij v_j, each
 * element one chain of FMAs in increasing j from +0 (the contract's order). One pass over the value
 * rows in key order, each row read whole and once for the R rows: the partial sums live in out (4 KB
 * for gemma3's 4 x 256, in L1) and are loaded and stored once per two keys. Before (2026-12-02),
 * the sums lived in registers, 24 floats of the 4 rows per pass, so a 256-float row took 11 strided
 * passes over the keys and a row check spilled an accumulator: gemma3's decode at depth 1024 spent
 * 1.7x as long in V as in q.k, which reads the same bytes. The keys every row attends to run in one
 * unchecked loop; the few at either end that only some rows see (a prefill tile's last keys, a
 * window's first) run before and after it, one at a time, checked. R is a constant at each call
 * (v_rows_R), so the row loops unroll. */
static inline __attribute__((always_inline)) void v_seq(const ATT_X *x, const ATT_KT *cv, int64_t hk, const int R,
                                                        const int64_t lo[TR], const int64_t hi[TR], int64_t jlo,
                                                        int64_t jhi, const float *sc, float *const op[TR]) {
    const bu_attn *a = ATT_A(x);
    const int64_t Dv = a->head_dim_v, Dm = Dv & ~(int64_t)7, nt = Dv - Dm;
    const __m256i m = bu__attn_tail_mask(nt);
    const float *sp[TR]; /* sp[i] + j: row i's weight of key j */
    int64_t clo = lo[0], chi = hi[0]; /* the keys every row attends to */
    (void)cv;
    U_ for (int i = 0; i < R; i++) {
        sp[i] = sc + (size_t)i * (size_t)a->n_ctx - jlo;
        clo = lo[i] > clo ? lo[i] : clo;
        chi = hi[i] < chi ? hi[i] : chi;
        for (int64_t d = 0; d < Dm; d += 8) _mm256_storeu_ps(op[i] + d, _mm256_setzero_ps());
        if (nt) _mm256_maskstore_ps(op[i] + Dm, m, _mm256_setzero_ps());
    }
#define V_ONE_KEY_(j, CHECK)                                                                                       \
    do {                                                                                                           \
        const ATT_KT *vp = ATT_VALUE(x, cv, (j), hk);                                                              \
        U_ for (int i = 0; i < R; i++) {                                                                           \
            if (CHECK && ((j) < lo[i] || (j) > hi[i])) continue;                                                   \
            const __m256 w = _mm256_broadcast_ss(sp[i] + (j));                                                    \
            for (int64_t d = 0; d < Dm; d += 8)                                                                    \
                _mm256_storeu_ps(op[i] + d, _mm256_fmadd_ps(w, ATT_LD8(vp + d), _mm256_loadu_ps(op[i] + d)));     \
            if (nt)                                                                                                \
                _mm256_maskstore_ps(op[i] + Dm, m, _mm256_fmadd_ps(w, ATT_LDLAST(vp + Dm, nt, m),                 \
                                                                   _mm256_maskload_ps(op[i] + Dm, m)));           \
        }                                                                                                          \
    } while (0)
    const int64_t e0 = clo - 1 < jhi ? clo - 1 : jhi;                      /* [jlo, e0]: before the common keys */
    const int64_t b1 = clo > jlo ? clo : jlo, e1 = chi < jhi ? chi : jhi; /* [b1, e1]: the common keys */
    const int64_t b2 = (e1 > e0 ? e1 : e0) + 1;                            /* [b2, jhi]: after them */
    for (int64_t j = jlo; j <= e0; j++) V_ONE_KEY_(j, 1);
    int64_t j = b1;
    for (; j + 1 <= e1; j += 2) {
        const ATT_KT *v0 = ATT_VALUE(x, cv, j, hk), *v1 = ATT_VALUE(x, cv, j + 1, hk);
        __m256 w0[TR], w1[TR];
        U_ for (int i = 0; i < R; i++) {
            w0[i] = _mm256_broadcast_ss(sp[i] + j);
            w1[i] = _mm256_broadcast_ss(sp[i] + j + 1);
        }
        for (int64_t d = 0; d < Dm; d += 8) {
            const __m256 a0 = ATT_LD8(v0 + d), a1 = ATT_LD8(v1 + d);
            U_ for (int i = 0; i < R; i++)
                _mm256_storeu_ps(op[i] + d,
                                 _mm256_fmadd_ps(w1[i], a1, _mm256_fmadd_ps(w0[i], a0, _mm256_loadu_ps(op[i] + d))));
        }
        if (nt) {
            const __m256 a0 = ATT_LDLAST(v0 + Dm, nt, m), a1 = ATT_LDLAST(v1 + Dm, nt, m);
            U_ for (int i = 0; i < R; i++)
                _mm256_maskstore_ps(
                    op[i] + Dm, m,
                    _mm256_fmadd_ps(w1[i], a1, _mm256_fmadd_ps(w0[i], a0, _mm256_maskload_ps(op[i] + Dm, m))));
        }
    }
    if (j <= e1) V_ONE_KEY_(j, 0);
    for (j = b2; j <= jhi; j++) V_ONE_KEY_(j, 1);
#undef V_ONE_KEY_
}
#define V_ROWS_(R)                                                                                                 \
    static void v_rows_##R(const ATT_X *x, const ATT_KT *cv, int64_t hk, const int64_t lo[TR], const int64_t hi[TR], \
                           int64_t jlo, int64_t jhi, const float *sc, float *const op[TR]) {                       \
        v_seq(x, cv, hk, R, lo, hi, jlo, jhi, sc, op);                                                             \
    }
V_ROWS_(1)
V_ROWS_(2)
V_ROWS_(3)
V_ROWS_(4)
#undef V_ROWS_
static void (*const v_rows[TR])(const ATT_X *, const ATT_KT *, int64_t, const int64_t *, const int64_t *, int64_t,
                                int64_t, const float *, float *const *) = {v_rows_1, v_rows_2, v_rows_3, v_rows_4};

/* out[t, h] for every token and h in [h0, h1); `call`: the including file's per-call rows (F16: this
 * call's rows of the current KV head, K then V; fp32: unused, NULL). */
static void ATT_HEADS(const ATT_X *x, int64_t h0, int64_t h1, float *sc, ATT_KT *call) {
    const bu_attn *a = ATT_A(x);
    const int64_t group = a->n_head / a->n_head_kv, T = a->n_tokens, Dv = a->head_dim_v;
    const ATT_KT *cv = call ? call + (size_t)T * (size_t)a->head_dim : NULL;
    for (int64_t hk = h0 / group; hk * group < h1; hk++) {
        const int64_t hb = hk * group > h0 ? hk * group : h0, he = (hk + 1) * group < h1 ? (hk + 1) * group : h1;
        const int64_t n_rows = (he - hb) * T;
        ATT_PREP(x, hk, call);
        for (int64_t r0 = 0; r0 < n_rows; r0 += TR) {
            const int nr = n_rows - r0 < TR ? (int)(n_rows - r0) : TR;
            const float *qp[TR];
            float *op[TR];
            int64_t lo[TR], hi[TR], jlo = INT64_MAX, jhi = -1;
            for (int i = 0; i < TR; i++) {
                const int64_t r = r0 + (i < nr ? i : 0), h = hb + r / T, t = r % T; /* padding: row r0 again */
                const size_t row = (size_t)(t * a->n_head + h);
                qp[i] = a->q + row * (size_t)a->head_dim;
                op[i] = a->out + row * (size_t)Dv;
                hi[i] = a->pos + t;
                lo[i] = bu__attn_first(a, hi[i]);
                if (i < nr) {
                    jlo = lo[i] < jlo ? lo[i] : jlo;
                    jhi = hi[i] > jhi ? hi[i] : jhi;
                }
            }
            qk_tile(x, call, hk, qp, jlo, jhi, sc);
            for (int i = 0; i < nr; i++) /* row i's weights stay at index j - jlo of its score row */
                bu__attention_softmax_avx2(a, sc + (size_t)i * (size_t)a->n_ctx + (size_t)(lo[i] - jlo),
                                           hi[i] - lo[i] + 1);
            v_rows[nr - 1](x, cv, hk, lo, hi, jlo, jhi, sc, op);
        }
    }
}
