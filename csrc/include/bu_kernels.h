/*
 * bu_kernels.h - the bringup kernel ABI: status codes and every kernel's declaration.
 *
 * Contract (docs/architecture.md, "Kernel ABI"; docs/kernels.md):
 *   - every kernel returns int: BU_OK, or one of the BU_ERR_* codes below; on error no output
 *     byte has been written;
 *   - arguments: pointers, then dimensions (int64_t, element counts), then runtime values and
 *     parameters, then `void *ws, size_t ws_cap` (workspace pointer and its capacity in bytes);
 *   - kernels never allocate: every byte they touch is passed in;
 *   - activations are fp32, row-major, outermost dimension first ([n_tokens, n]);
 *   - weights point into the mmap'd BUMP payload, in GGML block layout (ggml/src/ggml-common.h):
 *     row r of a [n_out, n_in] matrix is the n_in weights of output r, row_bytes(n_in) long;
 *   - aliasing rules are declared per kernel below and in its kernel map; an output that must not
 *     alias an input is checked and rejected with BU_ERR_ARG.
 * Each exported kernel is marked BU_KERNEL and has exactly one kernel map (kernel_maps/<id>.json)
 * whose impl.declaration is the declaration written here (tests/test_kernel_maps.py checks it).
 */
#ifndef BU_KERNELS_H
#define BU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "bu_formats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes: the only values a kernel returns. */
#define BU_OK 0
#define BU_ERR_NULL (-1)   /* a required pointer is NULL */
#define BU_ERR_ARG (-2)    /* invalid dimension or argument (negative, not a block multiple,
                              overflowing size, out-of-range token / position, forbidden aliasing,
                              NaN where a total order is needed) */
#define BU_ERR_WS (-3)     /* workspace too small (ws_cap below the map's scratch expression) */

/* Largest value any single dimension may take (INT32_MAX); larger gives BU_ERR_ARG. The one source:
 * bringup reads it from here (bringup.core.c_defines), so keep it a literal. */
#define BU_DIM_MAX ((int64_t)2147483647)

/* Version of this ABI (status codes, argument conventions). bringup.ir.kernel_maps.ABI_VERSION must equal it
 * (the map loader checks); bu_kernels_abi_version() reports the value a library was built with. */
#define BU_KERNELS_ABI_VERSION 1

#ifndef BU_KERNEL
#define BU_KERNEL
#endif
#ifndef BU_API
#define BU_API
#endif

/* ---- helpers (not kernels: no map, used by tests and the runtime) ---- */

/* Value of BU_KERNELS_ABI_VERSION the library was built with. */
BU_API int bu_kernels_abi_version(void);

/* Bytes of one row of n elements of GGML type ggml_type into *out.
 * BU_ERR_ARG: unknown type, n < 0, n not a multiple of the block, or overflow. */
BU_API int bu_row_bytes(int32_t ggml_type, int64_t n, size_t *out);

/* Dequantize one row of n elements of GGML type ggml_type from src into dst (fp32).
 * Same code path as the kernels below. BU_ERR_ARG as bu_row_bytes. */
BU_API int bu_dequantize_row(int32_t ggml_type, const void *src, float *dst, int64_t n);

/* ISA level of the dispatched providers (bu_linear_<fmt>_fast), chosen once when the library is
 * loaded (csrc/kernels/bu_cpu.c): the best of "avx512" (AVX-512 F/BW/VL + the avx2 level), "avx2"
 * (AVX2 + FMA + F16C) and "scalar" the CPU supports, or the level the environment variable BU_ISA
 * names. "invalid" when BU_ISA names an unknown level or one this CPU lacks. */
BU_API const char *bu_isa_name(void);

/* BU_OK when a level was chosen; else BU_ERR_ARG and a one-line reason in err (cap bytes,
 * NUL-terminated), e.g. "BU_ISA=avx512: this CPU supports only up to avx2". */
BU_API int bu_isa_check(char *err, size_t cap);

/* The calling thread's team size (1..256, clamped) for the classes below: the runtime sets it on
 * every thread of a forward pass; a thread that never set it is a team of 1. */
BU_API void bu_isa_set_team(int n_threads);

/* Which level serves each class of dispatched linear call (weight format, activations, n_in,
 * decode or prefill, team size) and why, as one JSON object written to buf (cap bytes,
 * NUL-terminated when it fits): {"default", "how", "classes_overflowed", "classes": [{"format",
 * "activations", "n_in", "phase", "threads", "level", "why", "ns_per_row": {"avx2", "avx512"}}]}. With both avx2 and avx512 (the same bits) and no
 * BU_ISA, each class's first calls time both levels and the faster median wins (bu_cpu.c);
 * "level" is null while a class is still calibrating. Returns the length of the whole text
 * (without the NUL), as snprintf: a return >= cap means buf was too small. */
BU_API size_t bu_isa_report(char *buf, size_t cap);

/* The per-format kernels are declared from the format table (bu_formats.h, generated from
 * config/ggml_formats.json): BU_DOT_FORMATS(BU_DECLARE_X) declares BU_DECLARE_X's prototype for every
 * weight format, BU_Q8ACT_FORMATS for every format with integer-dot kernels; bringup reads them
 * the same way (bringup.ir.kernel_maps.header_kernels), so adding a format to the table declares
 * its kernels here and asks for their maps. */

/* ---- embed: out[t, :] = scale * dequant(table row tokens[t]) ----
 * table: [n_vocab, n_embd] in the provider's format; tokens: n_tokens int32 in [0, n_vocab).
 * out must not overlap table or tokens. No workspace (ws may be NULL). */
#define BU_EMBED_ARGS const int32_t *tokens, const void *table, float *out, int64_t n_tokens, int64_t n_embd, int64_t n_vocab, float scale, void *ws, size_t ws_cap
#define BU_DECLARE_EMBED(NAME, name, VD, vd) BU_KERNEL int bu_embed_##name##_scalar(BU_EMBED_ARGS);
BU_DOT_FORMATS(BU_DECLARE_EMBED)

/* ---- linear: y[t, r] = dot(x[t, :], dequant(W row r)) (+ bias[r]) ----
 * x: [n_tokens, n_in] fp32; w: [n_out, n_in] in the provider's format (n_in a multiple of the
 * block); bias: [n_out] fp32 or NULL; y: [n_tokens, n_out] fp32, must not overlap x, w or bias.
 * Workspace: n_in * 4 bytes for block formats (one dequantized row), 0 for F32.
 * Matrix-vector (decode) is n_tokens = 1; matrix-matrix (prefill) n_tokens > 1: each weight row is
 * dequantized once per call and used for every token. */
#define BU_LINEAR_ARGS const float *x, const void *w, const float *bias, float *y, int64_t n_tokens, int64_t n_in, int64_t n_out, void *ws, size_t ws_cap
#define BU_DECLARE_LINEAR(NAME, name, VD, vd) BU_KERNEL int bu_linear_##name##_scalar(BU_LINEAR_ARGS);
BU_DOT_FORMATS(BU_DECLARE_LINEAR)


/* Dispatched providers of the same interface (bu_linear_fast.c): at the ISA level chosen at load
 * (bu_isa_name) they run the scalar provider above (level scalar, same bits) or AVX2+FMA /
 * AVX-512 code that dequantizes into registers and accumulates with FMA (contract "lanes16fma",
 * the same bits at both SIMD levels, within the bound of their kernel maps of the scalar ones).
 * Same arguments, workspace and status codes as the scalar providers; with an invalid level
 * (bu_isa_check) every call returns BU_ERR_ARG. */
#define BU_DECLARE_LINEAR_FAST(NAME, name, VD, vd) BU_KERNEL int bu_linear_##name##_fast(BU_LINEAR_ARGS);
BU_DOT_FORMATS(BU_DECLARE_LINEAR_FAST)

/* Quantized-activation providers (contract "ggml-q8", csrc/kernels/bu_linear_q8act.c): each token's
 * activation row is first quantized into the workspace the way llama.cpp's CPU backend does (Q8_0 /
 * Q8_1 blocks of 32 for the 32-element formats, Q8_K blocks of 256 for the K-quants), then every
 * weight block is an integer dot product scaled in fp32; block terms are summed in fp32 in
 * increasing block order. Workspace: 8 quantized activation rows (tokens are taken 8 at a time),
 * 8 * (n_in / 32) * 36 bytes (Q8_0 activations), 8 * (n_in / 32) * 40 (Q8_1),
 * 8 * (n_in / 256) * 292 (Q8_K); it must not overlap any other argument. Other rules as the fp32 providers above. */
#define BU_DECLARE_Q8ACT(NAME, name, VD, vd) BU_KERNEL int bu_linear_##name##_##vd##_scalar(BU_LINEAR_ARGS);
BU_Q8ACT_FORMATS(BU_DECLARE_Q8ACT)

/* Dispatched providers of the ggml-q8 contract (bu_linear_q8fast.c): at the ISA level chosen at load
 * they run the scalar ones above (level scalar, same bits) or AVX2 / AVX-512 VNNI integer dot
 * products (contract "q8lanes8fma": the same integer parts, fp32 block terms accumulated in 8 lanes
 * with FMA; within the bound of their kernel maps of the scalar ones). Workspace: 32 quantized
 * activation rows, 32 * (n_in / 32) * 36 bytes (Q8_0), 32 * (n_in / 32) * 40 (Q8_1),
 * 32 * (n_in / 256) * 292 (Q8_K). Other rules as the scalar ones. */
#define BU_DECLARE_Q8ACT_FAST(NAME, name, VD, vd) BU_KERNEL int bu_linear_##name##_##vd##_fast(BU_LINEAR_ARGS);
BU_Q8ACT_FORMATS(BU_DECLARE_Q8ACT_FAST)

/* ---- rmsnorm: y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w  (w as stored, fp32 [n]) ----
 * y may alias x exactly (in place); partial overlap is rejected. No workspace. */
BU_KERNEL int bu_rmsnorm_f32_scalar(const float *x, const float *w, float *y, int64_t n_tokens, int64_t n, float eps, void *ws, size_t ws_cap);

/* ---- rmsnorm_heads: RMSNorm of every head vector (Q/K norm) ----
 * x, y: [n_tokens, n_heads, head_dim]; w: [head_dim] shared by all heads. Aliasing as rmsnorm. */
BU_KERNEL int bu_rmsnorm_heads_f32_scalar(const float *x, const float *w, float *y, int64_t n_tokens, int64_t n_heads, int64_t head_dim, float eps, void *ws, size_t ws_cap);

/* ---- rope: rotary position embedding on x [n_tokens, n_heads, head_dim] ----
 * Token t has position p = pos + t. Pair i (0 <= i < rope_dim/2) rotates by angle
 * p * freq_scale * theta^(-2i/rope_dim). "normal" (llama): pair = elements (2i, 2i+1);
 * "neox" (qwen2, qwen3, gemma3): pair = elements (i, i + rope_dim/2). Elements at index >= rope_dim
 * are copied unchanged. rope_dim even, 0 < rope_dim <= head_dim, pos >= 0, theta > 0.
 * y may alias x exactly (in place). No workspace. */
BU_KERNEL int bu_rope_normal_f32_scalar(const float *x, float *y, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t rope_dim, int64_t pos, float theta, float freq_scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_rope_neox_f32_scalar(const float *x, float *y, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t rope_dim, int64_t pos, float theta, float freq_scale, void *ws, size_t ws_cap);

/* ---- attention: causal grouped-query attention over an fp32 KV cache ----
 * q: [n_tokens, n_head, head_dim]; k: [n_tokens, n_head_kv, head_dim];
 * v: [n_tokens, n_head_kv, head_dim_v]; k_cache: [n_ctx, n_head_kv, head_dim];
 * v_cache: [n_ctx, n_head_kv, head_dim_v]; out: [n_tokens, n_head, head_dim_v].
 * First copies k, v into cache rows pos .. pos+n_tokens-1 (requires pos + n_tokens <= n_ctx),
 * then query t (position p = pos + t), head h attends with KV head h / (n_head / n_head_kv) to
 * cache positions j with j <= p and, if window > 0, p - j < window (window = 0: no window).
 * logit = scale * dot(q, k_j); if softcap > 0: logit = softcap * tanh(logit / softcap)
 * (softcap = 0: none); weights = softmax over the attended positions; out = sum_j weight_j v_j.
 * n_head must be a multiple of n_head_kv. out must not overlap any other argument.
 * Workspace: n_ctx * 4 bytes (one row of scores). */
BU_KERNEL int bu_attention_f32_scalar(const float *q, const float *k, const float *v, float *k_cache, float *v_cache, float *out, int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t head_dim_v, int64_t n_ctx, int64_t pos, int64_t window, float scale, float softcap, void *ws, size_t ws_cap);
/* attention_f32_fast: the same attention for the query heads [head_begin, head_end) only
 * (0 <= head_begin <= head_end <= n_head; the whole call is [0, n_head)); appends the K/V rows of the
 * KV heads whose first query head h = hk * (n_head / n_head_kv) is in the range, and reads this call's
 * keys from k / v (never the cache rows another range appends), so disjoint ranges may run at once.
 * ISA level chosen at load (bu_isa_name): scalar = the bits of bu_attention_f32_scalar; avx2 / avx512
 * = AVX2+FMA (lanes8fma), within the bound of kernel_maps/attention.f32.fast.json. BU_ERR_ARG when
 * the level is invalid (bu_isa_check). Workspace: n_ctx * 16 bytes (4 rows of scores). */
BU_KERNEL int bu_attention_f32_fast(const float *q, const float *k, const float *v, float *k_cache, float *v_cache, float *out, int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t head_dim_v, int64_t n_ctx, int64_t pos, int64_t head_begin, int64_t head_end, int64_t window, float scale, float softcap, void *ws, size_t ws_cap);
/* ---- attention over an F16 KV cache (bringup ir --kv-type f16): k_cache / v_cache hold IEEE binary16,
 * same layout. The call's K / V rows are rounded to F16 (nearest even) when stored, and every key and
 * value a query sees, this call's included, is the F16 value widened exactly to fp32 (as llama.cpp
 * reads its own tokens back from its F16 cache); then the fp32 providers' computation.
 * attention_f16_scalar: the reference, arguments and statuses as attention_f32_scalar (workspace
 * n_ctx * 4 bytes). attention_f16_fast: head ranges and ISA levels as attention_f32_fast; workspace
 * n_ctx * 16 + n_tokens * (head_dim + head_dim_v) * 2 bytes (4 score rows, then one KV head's rows of
 * this call as F16). */
BU_KERNEL int bu_attention_f16_scalar(const float *q, const float *k, const float *v, uint16_t *k_cache, uint16_t *v_cache, float *out, int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t head_dim_v, int64_t n_ctx, int64_t pos, int64_t window, float scale, float softcap, void *ws, size_t ws_cap);
BU_KERNEL int bu_attention_f16_fast(const float *q, const float *k, const float *v, uint16_t *k_cache, uint16_t *v_cache, float *out, int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t head_dim_v, int64_t n_ctx, int64_t pos, int64_t head_begin, int64_t head_end, int64_t window, float scale, float softcap, void *ws, size_t ws_cap);

/* ---- elementwise on [n_tokens, n] fp32; y may alias any input exactly; no workspace ---- */
/* swiglu: y = silu(gate) * up, silu(g) = g / (1 + exp(-g)) */
BU_KERNEL int bu_swiglu_f32_scalar(const float *gate, const float *up, float *y, int64_t n_tokens, int64_t n, void *ws, size_t ws_cap);
/* geglu: y = gelu_tanh(gate) * up, gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) */
BU_KERNEL int bu_geglu_f32_scalar(const float *gate, const float *up, float *y, int64_t n_tokens, int64_t n, void *ws, size_t ws_cap);
/* swiglu_f32_fast, geglu_f32_fast: the same ops, ISA level chosen at load (bu_isa_name): scalar =
 * the bits of the *_scalar providers; avx2 / avx512 = AVX2+FMA with a polynomial exp (GeGLU in the
 * form g / (1 + exp(-2z))), within the bound of kernel_maps/{swiglu,geglu}.f32.fast.json. BU_ERR_ARG
 * when the level is invalid (bu_isa_check). */
BU_KERNEL int bu_swiglu_f32_fast(const float *gate, const float *up, float *y, int64_t n_tokens, int64_t n, void *ws, size_t ws_cap);
BU_KERNEL int bu_geglu_f32_fast(const float *gate, const float *up, float *y, int64_t n_tokens, int64_t n, void *ws, size_t ws_cap);
/* add: y = a + b (residual) */
BU_KERNEL int bu_add_f32_scalar(const float *a, const float *b, float *y, int64_t n_tokens, int64_t n, void *ws, size_t ws_cap);
/* scale: y = s * x */
BU_KERNEL int bu_scale_f32_scalar(const float *x, float *y, int64_t n_tokens, int64_t n, float s, void *ws, size_t ws_cap);
/* softcap: y = cap * tanh(x / cap), cap > 0 */
BU_KERNEL int bu_softcap_f32_scalar(const float *x, float *y, int64_t n_tokens, int64_t n, float cap, void *ws, size_t ws_cap);
/* copy: y = x; y must not overlap x (an explicit, visible copy) */
BU_KERNEL int bu_copy_f32_scalar(const float *x, float *y, int64_t n_tokens, int64_t n, void *ws, size_t ws_cap);
/* argmax: idx[t] = smallest index of the largest x[t, :]; n >= 1; a NaN in a row is BU_ERR_ARG */
BU_KERNEL int bu_argmax_f32_scalar(const float *x, int32_t *idx, int64_t n_tokens, int64_t n, void *ws, size_t ws_cap);

/* ---- mixture of experts (bu_moe.c): llama.cpp build_moe_ffn ----
 * moe_route: ids[t, :] = the n_used experts of largest gate value (softmax: gating 0, sigmoid: 1) in
 * decreasing order, ties to the lower index; wts = their gate values, renormalized to sum 1 when
 * norm != 0, times scale. A NaN logit, n_used outside [1, n_expert] or another gating is BU_ERR_ARG. */
BU_KERNEL int bu_moe_route_f32_scalar(const float *logits, int32_t *ids, float *wts, int64_t n_tokens, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
/* moe_ffn: routes the router logits [n_tokens, n_expert] as moe_route, then y[t] = sum over t's selected
 * experts e (increasing e) of their weight * down_e(silu(gate_e x) * up_e x);
 * w_gate, w_up: [n_expert][n_ff][n_embd], w_down: [n_expert][n_embd][n_ff] in GGML layout; only the
 * selected experts' rows are read. */
BU_KERNEL int bu_moe_ffn_f32_scalar(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_f16_scalar(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_bf16_scalar(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_q4_0_scalar(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_q4_1_scalar(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_q5_0_scalar(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_q5_1_scalar(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_q8_0_scalar(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_q4_k_scalar(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_q6_k_scalar(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
/* moe_ffn through the dispatched linear providers (bu_moe_fast.c): level scalar gives the bits of
 * bu_moe_ffn_<fmt>_scalar; avx2 / avx512 each expert product as bu_linear_<fmt>_fast. */
BU_KERNEL int bu_moe_ffn_f32_fast(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_f16_fast(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_bf16_fast(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_q4_0_fast(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_q4_1_fast(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_q5_0_fast(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_q5_1_fast(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_q8_0_fast(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_q4_k_fast(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);
BU_KERNEL int bu_moe_ffn_q6_k_fast(const float *x, const float *logits, const void *w_gate, const void *w_up, const void *w_down, float *y, int64_t n_tokens, int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t n_used, int64_t gating, int64_t norm, float scale, void *ws, size_t ws_cap);

#ifdef __cplusplus
}
#endif

#endif /* BU_KERNELS_H */
