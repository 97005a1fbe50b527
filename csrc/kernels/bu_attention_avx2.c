/*
 * bu_attention_avx2.c - the avx2 (and avx512) level of attention.f32.fast: AVX2 + FMA, compiled with
 * a file-level target pragma and only called when bu_cpu.c chose a level that has them.
 *
 * Work: the query rows (t, h) of one KV head hk, h in [h0, h1), head-major then token, are taken
 * BU_ATTN_TILE = 4 at a time (decode: 4 heads of one group; prefill: 4 consecutive tokens of one
 * head). Every key and value row of the tile's key range is loaded once for the 4 rows.
 * Contract "lanes8fma" (docs/kernels.md): q.k element d goes to fp32 lane d mod 8 with one fused
 * multiply-add in increasing d (a tail of head_dim mod 8 is padded with +0), lanes combine as
 * ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)); the softmax is softmax_row's (polynomial exp, double sum
 * in 8 lanes); out[d] = fma(w_j, v_j[d], out[d]) in increasing j over the row's own keys only. Which rows share a
 * tile changes no bit of any row, so any head range gives the bits of the whole call.
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include <math.h>

#include "bu_attention.h"
#include "bu_simd_exp.h"

#define TR BU_ATTN_TILE
/* constant-trip loops over rows, keys and registers are unrolled so the accumulators stay in registers */
#define U_ _Pragma("GCC unroll 16")
#define TK 3 /* keys per step of the q.k kernel: 4 x 3 accumulators + 3 keys + 1 query = 16 registers */

static __m256i tail_mask(int64_t n) { /* lanes [0, n) set, 0 <= n <= 8 */
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx);
}

/* The lanes of 4 dot products combined in the contract's tree: [a, b, c, d]. */
static inline __m128 combine4(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d); /* (l0+l1), (l2+l3) per row */
    const __m256 abcd = _mm256_hadd_ps(ab, cd);                         /* (l0+l1)+(l2+l3) | (l4+l5)+(l6+l7) */
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* The avx2 level's softmax of one row of n raw dots, in place: logit = scale * dot (and the soft-cap,
 * as the reference: tanhf); max; e_j = bu__exp8(logit_j - max) (bu_simd_exp.h); the sum of e_j in
 * double, key j into lane j mod 8, lanes combined as ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7));
 * weight_j = e_j * fp32(1 / sum). */
static void softmax_row(const bu_attn *a, float *s, int64_t n) {
    const int64_t n8 = n & ~(int64_t)7;
    const __m256 sv = _mm256_set1_ps(a->scale);
    __m256 mx = _mm256_set1_ps(-INFINITY);
    if (a->softcap > 0.0f) {
        bu__attention_softmax_logits(a, s, n);
    } else {
        for (int64_t j = 0; j < n8; j += 8) _mm256_storeu_ps(s + j, _mm256_mul_ps(sv, _mm256_loadu_ps(s + j)));
        for (int64_t j = n8; j < n; j++) s[j] = a->scale * s[j];
    }
    float m = -INFINITY;
    for (int64_t j = 0; j < n8; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + j));
    {
        float l[8];
        _mm256_storeu_ps(l, mx);
        for (int c = 0; c < 8; c++) m = l[c] > m ? l[c] : m;
        for (int64_t j = n8; j < n; j++) m = s[j] > m ? s[j] : m;
    }
    const __m256 mv = _mm256_set1_ps(m);
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (int64_t j = 0; j < n; j += 8) {
        const __m256i mask = tail_mask(n - j < 8 ? n - j : 8);
        const __m256 e = bu__exp8(_mm256_sub_ps(_mm256_maskload_ps(s + j, mask), mv));
        _mm256_maskstore_ps(s + j, mask, e);
        const __m256 ez = _mm256_and_ps(e, _mm256_castsi256_ps(mask)); /* lanes past the row add +0 */
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(ez)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(ez, 1)));
    }
    double l[4];
    _mm256_storeu_pd(l, _mm256_add_pd(lo, hi));
    const __m256 inv = _mm256_set1_ps((float)(1.0 / ((l[0] + l[1]) + (l[2] + l[3]))));
    for (int64_t j = 0; j < n8; j += 8) _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), inv));
    for (int64_t j = n8; j < n; j++) s[j] = s[j] * _mm256_cvtss_f32(inv);
}

/* sc[i * n_ctx + (j - jlo)] = q_i . k_j for the tile's 4 query rows and every j in [jlo, jhi]. */
static void qk_tile(const bu_attn *a, int64_t hk, const float *const qp[TR], int64_t jlo, int64_t jhi, float *sc) {
    const int64_t D = a->head_dim, Dm = D & ~(int64_t)7;
    const __m256i m = tail_mask(D - Dm);
    for (int64_t j = jlo; j <= jhi; j += TK) {
        const float *kp[TK];
        U_ for (int c = 0; c < TK; c++) kp[c] = bu__attn_key(a, j + c <= jhi ? j + c : jhi, hk); /* pad: recompute */
        __m256 acc[TR][TK];
        U_ for (int i = 0; i < TR; i++)
            U_ for (int c = 0; c < TK; c++) acc[i][c] = _mm256_setzero_ps();
        for (int64_t d = 0; d < Dm; d += 8) {
            const __m256 k0 = _mm256_loadu_ps(kp[0] + d), k1 = _mm256_loadu_ps(kp[1] + d),
                         k2 = _mm256_loadu_ps(kp[2] + d);
            U_ for (int i = 0; i < TR; i++) {
                const __m256 x = _mm256_loadu_ps(qp[i] + d);
                acc[i][0] = _mm256_fmadd_ps(x, k0, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(x, k1, acc[i][1]);
                acc[i][2] = _mm256_fmadd_ps(x, k2, acc[i][2]);
            }
        }
        if (Dm < D) {
            const __m256 k0 = _mm256_maskload_ps(kp[0] + Dm, m), k1 = _mm256_maskload_ps(kp[1] + Dm, m),
                         k2 = _mm256_maskload_ps(kp[2] + Dm, m);
            U_ for (int i = 0; i < TR; i++) {
                const __m256 x = _mm256_maskload_ps(qp[i] + Dm, m);
                acc[i][0] = _mm256_fmadd_ps(x, k0, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(x, k1, acc[i][1]);
                acc[i][2] = _mm256_fmadd_ps(x, k2, acc[i][2]);
            }
        }
        U_ for (int c = 0; c < TK; c++) {
            if (j + c > jhi) break;
            float r[4];
            _mm_storeu_ps(r, combine4(acc[0][c], acc[1][c], acc[2][c], acc[3][c]));
            U_ for (int i = 0; i < TR; i++) sc[(size_t)i * (size_t)a->n_ctx + (size_t)(j + c - jlo)] = r[i];
        }
    }
}

/* One block of W = 8 * NV output floats [d0, d0 + W) of the tile's rows (NV accumulators per row; the
 * last block may be partial: `m` masks its final register). Row i adds w_ij v_j for j in [lo_i, hi_i]. */
#define V_BLOCK(NV)                                                                                           \
    static void v_block##NV(const bu_attn *a, int64_t hk, int nr, const int64_t lo[TR], const int64_t hi[TR],  \
                            int64_t jlo, int64_t jhi, const float *sc, float *const op[TR], int64_t d0,        \
                            __m256i m) {                                                                       \
        __m256 acc[TR][NV];                                                                                    \
        U_ for (int i = 0; i < TR; i++)                                                                        \
            U_ for (int c = 0; c < NV; c++) acc[i][c] = _mm256_setzero_ps();                                   \
        for (int64_t j = jlo; j <= jhi; j++) {                                                                 \
            const float *vp = bu__attn_value(a, j, hk) + d0;                                                   \
            __m256 x[NV];                                                                                      \
            U_ for (int c = 0; c < NV; c++)                                                                    \
                x[c] = c + 1 < NV ? _mm256_loadu_ps(vp + 8 * c) : _mm256_maskload_ps(vp + 8 * c, m);          \
            U_ for (int i = 0; i < TR; i++) {                                                                  \
                if (i >= nr || j < lo[i] || j > hi[i]) continue; /* only the row's own keys */                 \
                const __m256 w = _mm256_broadcast_ss(sc + (size_t)i * (size_t)a->n_ctx + (size_t)(j - jlo));   \
                U_ for (int c = 0; c < NV; c++) acc[i][c] = _mm256_fmadd_ps(w, x[c], acc[i][c]);               \
            }                                                                                                  \
        }                                                                                                      \
        U_ for (int i = 0; i < TR; i++)                                                                        \
            U_ for (int c = 0; c < NV; c++) {                                                                  \
                if (i >= nr) continue;                                                                         \
                if (c + 1 < NV) _mm256_storeu_ps(op[i] + d0 + 8 * c, acc[i][c]);                               \
                else _mm256_maskstore_ps(op[i] + d0 + 8 * c, m, acc[i][c]);                                    \
            }                                                                                                  \
    }
V_BLOCK(3)
V_BLOCK(1)

void bu__attention_heads_avx2(const bu_attn *a, int64_t h0, int64_t h1, float *sc) {
    const int64_t group = a->n_head / a->n_head_kv, T = a->n_tokens, Dv = a->head_dim_v;
    const __m256i full = tail_mask(8);
    for (int64_t hk = h0 / group; hk * group < h1; hk++) {
        const int64_t hb = hk * group > h0 ? hk * group : h0, he = (hk + 1) * group < h1 ? (hk + 1) * group : h1;
        const int64_t n_rows = (he - hb) * T;
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
            qk_tile(a, hk, qp, jlo, jhi, sc);
            for (int i = 0; i < nr; i++) /* row i's weights stay at index j - jlo of its score row */
                softmax_row(a, sc + (size_t)i * (size_t)a->n_ctx + (size_t)(lo[i] - jlo), hi[i] - lo[i] + 1);
            int64_t d = 0;
            for (; d + 24 <= Dv; d += 24) v_block3(a, hk, nr, lo, hi, jlo, jhi, sc, op, d, full);
            for (; d < Dv; d += 8) v_block1(a, hk, nr, lo, hi, jlo, jhi, sc, op, d, tail_mask(Dv - d < 8 ? Dv - d : 8));
        }
    }
}
