/*
 * bu_fast.h - the dispatched ("fast") linear providers: ISA levels and the per-level entry points
 * (internal, not part of the public ABI; docs/kernels.md "Fast providers").
 */
#ifndef BU_FAST_H
#define BU_FAST_H

#include "bu_internal.h"

#define BU_ISA_INVALID (-1) /* BU_ISA forced a level the host lacks, or an unknown name */
#define BU_ISA_SCALAR 0
#define BU_ISA_AVX2 1
#define BU_ISA_AVX512 2

/* The level chosen at load (bu_cpu.c): the default, and the highest a call may use. */
__attribute__((visibility("hidden"))) int bu__isa_level(void);

/* One call's level by measurement (bu_cpu.c, "the level of each linear op class"): bu__isa_pick
 * returns the level for a linear call of n_tokens tokens with n_in inputs of GGML type `type`,
 * fp32 activations (q8act 0: bu_linear_fast.c) or quantized ones (1: bu_linear_q8fast.c) (BU_ISA_INVALID when BU_ISA was bad); when the call is one of its class's timed calibration
 * calls, turn->slot is set and the caller must call bu__isa_pick_done(turn, n_tokens * n_out)
 * right after the kernel returns (it may always call it). Thread-safe, lock-free. */
typedef struct {
    void *slot;
    int level, cand, idx;
    double t0;
} bu_isa_turn;
__attribute__((visibility("hidden"))) int bu__isa_pick(int32_t type, int q8act, int64_t n_tokens,
                                                       int64_t n_in, bu_isa_turn *turn);
__attribute__((visibility("hidden"))) void bu__isa_pick_done(const bu_isa_turn *turn, int64_t units);

/* Weight rows a many-token call unpacks at a time into the workspace (fp32), for every format but
 * F32: the most, in whole 16s from 16 to 64, whose panel stays within 160 KiB (n_in 640: 64 rows,
 * 1024: 32, 2048: 16), so that the panel and the token rows streaming past it share a 512 KiB L2
 * and each token row is read once per up to 64 weight rows rather than per 16 (gemma3 pp512
 * 1.03-1.05x at 1 thread, 2026-12-02). The fast providers' workspace is bu__panel_rows(n_in) *
 * n_in * 4 bytes: kernel map scratch "panel", the same rule (kernel_map_table.py FAST_PANEL_BYTES). */
static inline int64_t bu__panel_rows(int64_t n_in) {
    const int64_t r = 40960 / (n_in > 1 ? n_in : 1) / 16 * 16;
    return r < 16 ? 16 : r > 64 ? 64 : r;
}

/* Decode (one token) multiplies 4 weight rows at a time (8 FMA chains in flight). For the formats
 * whose decode is bound by memory, not by unpacking, the 4 rows are a quarter of the call apart:
 * each group continues 4 long sequential streams, which the hardware prefetcher follows, and the
 * software prefetch asks for the bytes BU_PF_AHEAD down each. For the others the 4 rows are
 * adjacent and the prefetch asks for the same chunk of the next group: 4 adjacent rows are 4
 * short interleaved streams (a 640-wide Q8_0 row is 680 bytes, ~10 cache lines) that the
 * prefetcher does not follow, but those formats are bound by their decoders (Q5_0 3-8 % slower
 * split). Measured A/B on an AVX2 host (docs/kernels.md, 2026-12-02): gemma3's 262144 x 640 Q8_0
 * head 8 -> 12.5 GB/s on one thread (adjacent -> split), F16 1.35x, F32 1.3-1.8x. Only the order
 * rows are visited in changes: each row's dot product, so every bit, is the same. */
#define BU_DECODE_STREAMS(type)                                                                         \
    ((type) == BU_TYPE_Q8_0 || (type) == BU_TYPE_F16 || (type) == BU_TYPE_BF16 || (type) == BU_TYPE_F32)
#define BU_PF_AHEAD 4096

/* Decode reads a K-quant row a whole block (8 chunks) per loop trip, unrolled: each chunk's
 * position in its block is then a constant (shift counts, scale index, the block-scale unpack at
 * chunk 0 without a branch). Other formats: one chunk per trip. */
#define BU_CHUNKS_UNROLLED(type) ((type) >= BU_TYPE_Q2_K && (type) <= BU_TYPE_Q6_K ? 8 : 1)

/* y[t, r] = dot(x[t], dequant(W row r)) (+ bias[r]) for t < n_tokens, r < n_out, with the
 * "lanes16fma" order (docs/kernels.md). Arguments are already checked (bu__linear_args): x, w, y
 * valid, n_in a multiple of the block, nothing overlaps, ws holds bu__panel_rows(n_in) * n_in floats
 * unless the type is F32. row_bytes = bytes of one weight row. */
typedef void (*bu_fast_fn)(int32_t type, const float *x, const uint8_t *w, const float *bias, float *y,
                           int64_t n_tokens, int64_t n_in, int64_t n_out, size_t row_bytes, float *ws);

__attribute__((visibility("hidden"))) void bu__fast_avx2(int32_t type, const float *x, const uint8_t *w,
                                                         const float *bias, float *y, int64_t n_tokens,
                                                         int64_t n_in, int64_t n_out, size_t row_bytes, float *ws);
__attribute__((visibility("hidden"))) void bu__fast_avx512(int32_t type, const float *x, const uint8_t *w,
                                                           const float *bias, float *y, int64_t n_tokens,
                                                           int64_t n_in, int64_t n_out, size_t row_bytes, float *ws);

/* In each SIMD file: fast_<fmt>, the file's `linear` body for one format's decoder (deq_<fmt>,
 * bu_fast_deq.h) with the type a constant, and the level's entry point choosing among them. */
#define BU_FAST_ONE(NAME, name, VD, vd)                                                                 \
    static void fast_##name(int32_t type, const float *x, const uint8_t *w, const float *bias, float *y, \
                           int64_t n_tokens, int64_t n_in, int64_t n_out, size_t row_bytes, float *ws) { \
        (void)type;                                                                                     \
        linear(deq_##name, BU_TYPE_##NAME, x, w, bias, y, n_tokens, n_in, n_out, row_bytes, ws);        \
    }
#define BU_FAST_INSTANCES BU_DOT_FORMATS(BU_FAST_ONE)
/* The level's entry point: one table from ggml type id to its instance (bu_linear_fast.c passes
 * only the types of BU_DOT_FORMATS, so every lookup hits a filled slot). */
#define BU_FAST_SLOT(NAME, name, VD, vd) [BU_TYPE_##NAME] = fast_##name,
#define BU_FAST_ENTRY(name)                                                                             \
    void name(int32_t type, const float *x, const uint8_t *w, const float *bias, float *y,             \
              int64_t n_tokens, int64_t n_in, int64_t n_out, size_t row_bytes, float *ws) {             \
        static const bu_fast_fn BY_TYPE[BU_TYPE_ID_MAX + 1] = {BU_DOT_FORMATS(BU_FAST_SLOT)};           \
        BY_TYPE[type](type, x, w, bias, y, n_tokens, n_in, n_out, row_bytes, ws);                       \
    }

#endif /* BU_FAST_H */
