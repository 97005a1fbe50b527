/*
 * bu_q8.h - what the quantized-activation linear providers (contract "ggml-q8") share: the
 * activation block layouts in the scratch, the activation quantization and the argument checks
 * (bu_linear_q8act.c defines them; bu_linear_q8fast.c and its SIMD levels use them). Internal,
 * not part of the public ABI; docs/kernels.md "Numerical contracts".
 */
#ifndef BU_Q8_H
#define BU_Q8_H

#include "bu_internal.h"

/* Quantized activation block layouts in the scratch (ours, not ggml's; fp32 scales so the dot
 * product reads them without conversion; values are exactly ggml's):
 *   Q8_0: f32 d (the fp16-rounded scale) | i8 q[32]                 = 36 bytes
 *   Q8_1: f32 d (fp16-rounded) | f32 s (fp16-rounded) | i8 q[32]    = 40 bytes
 *   Q8_K: f32 d | i16 bsums[16] | i8 q[256]                         = 292 bytes */
#define XQ8_0_BYTES 36
#define XQ8_1_BYTES 40
#define XQ8_K_BYTES 292

enum { ACT_Q8_0 = 0, ACT_Q8_1 = 1, ACT_Q8_K = 2 };

/* Quantize nb blocks of fp32 activations x (nb * 32, or nb * 256 for Q8_K) to activation format
 * `act` into `out` (nb blocks of the layout above). Bit for bit the contract's quantization. */
__attribute__((visibility("hidden"))) void bu__q8_quantize(int act, const float *x, uint8_t *out, int64_t nb);

/* The argument checks of every ggml-q8 provider of weight type `type` with activation format `act`,
 * whose scratch holds `rows` quantized activation rows; the order and codes of bu__linear_args.
 * On BU_OK fills *row_bytes (one weight row), *xrow_bytes (one quantized activation row) and
 * *empty (nothing to do). */
__attribute__((visibility("hidden"))) int bu__q8act_check(int32_t type, int act, int64_t rows, const float *x,
                                                          const void *w, const float *bias, const float *y,
                                                          int64_t n_tokens, int64_t n_in, int64_t n_out,
                                                          const void *ws, size_t ws_cap, size_t *row_bytes,
                                                          size_t *xrow_bytes, int *empty);

#endif /* BU_Q8_H */
