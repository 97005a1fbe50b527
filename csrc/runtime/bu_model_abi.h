/* bu_model_abi.h - the ABI between the generated model code (codegen/model.c) and the runtime:
 * the descriptor model.c defines (bu_model_descriptor), what one forward call works on (bu_exec)
 * and the runtime functions the generated forward pass calls on every thread. Not for hosts: they
 * use bu_runtime.h (the public API), which this header builds on; the runtime's private headers
 * (bu_team.h) build on this one. Layout or meaning changes bump BU_RT_ABI_VERSION.
 */
#ifndef BU_MODEL_ABI_H
#define BU_MODEL_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "bu_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------- the generated model's descriptor (model.c defines bu_model_descriptor) -------- */

typedef struct {
    const char *name;       /* canonical weight name, [A-Za-z0-9_.]+ (validated by codegen) */
    uint32_t ggml_type;
    uint32_t n_dims;
    uint64_t shape[4];      /* GGUF order, unused dims 1 */
} bu_weight_spec;

typedef struct {
    const char *name;       /* e.g. "layer.3.k_cache" */
    uint64_t bytes_per_pos; /* bytes of one context position; buffer = n_ctx * bytes_per_pos */
} bu_state_spec;

/* What one forward call of the generated code works on. Filled by the runtime. */
typedef struct {
    uint8_t *arena;               /* planned activations; arena_cap bytes */
    size_t arena_cap;
    uint8_t *ws;                  /* kernel workspace; ws_cap bytes */
    size_t ws_cap;
    const void *const *weights;   /* by index of bu_model_desc.weights */
    void *const *state;           /* by index of bu_model_desc.states; n_ctx rows each */
    const int32_t *tokens;        /* n_tokens token ids (io tensor "tokens") */
    float *logits;                /* io tensor "logits": n_logit_rows x n_vocab fp32 */
    int64_t pos;                  /* position of tokens[0] (runtime:pos) */
    int64_t n_tokens;             /* runtime:n_tokens, 1..chunk */
    int64_t n_ctx;                /* runtime:n_ctx */
    int64_t n_threads;            /* runtime:n_threads: threads running this forward call */
    int64_t n_logit_rows;         /* 1 (last token) or n_tokens (every token) */
    int32_t failed_op;            /* set by the generated code when a kernel fails */
    int32_t kernel_status;
    struct bu_team *team;         /* shared by the call's threads (bu_op_done; opaque) */
    int64_t ith;                  /* this thread: 0 .. n_threads - 1 (each has its own bu_exec) */
    uint8_t *thread_ws;           /* this thread's scratch, thread_ws_cap bytes (threads >= 1; thread
                                     0 uses the plan's scratch in the arena) */
    size_t thread_ws_cap;
    bu_observer_fn observer;      /* NULL (default): the generated code pays one branch per op */
    void *observer_ctx;
    const char *phase;            /* "prefill" / "decode", for observations */
    int32_t observer_status;      /* the observer's nonzero return, when it stopped the call */
    /* this thread's place in the call's row-chunk tickets (bu_linear_rows; 0 at the call's start):
     * the first ticket of the next bu_linear_rows call, and a ticket drawn past the end of an
     * earlier one (+1; 0 = none), which belongs to a later call and is worked there */
    int64_t chunk_base, chunk_held;
} bu_exec;

/* The linear/1 kernel signature (kernel_maps/linear.*.json, bu_kernels.h). */
typedef int (*bu_linear_fn)(const float *x, const void *w, const float *bias, float *y, int64_t n_tokens,
                            int64_t n_in, int64_t n_out, void *ws, size_t ws_cap);

/* ---- called by the generated forward pass, on every thread of the call (x is the thread's own) ---- */

/* Thread x->ith's share [*b, *e) of n items, cut in whole units of `align` items (contiguous,
 * in thread order; a share may be empty). */
static inline void bu_split(const bu_exec *x, int64_t n, int64_t align, int64_t *b, int64_t *e)
{
    int64_t units = (n + align - 1) / align, nth = x->n_threads;
    int64_t u0 = units * x->ith / nth, u1 = units * (x->ith + 1) / nth;
    *b = u0 * align < n ? u0 * align : n;
    *e = u1 * align < n ? u1 * align : n;
}

/* One linear/1 call with n_tokens = 1, its output rows split over the threads in chunks that the
 * threads claim as they become free (as llama.cpp's mul_mat does: a thread slowed by the host
 * takes fewer, instead of holding every other one at the next barrier). For each chunk [r0, r1)
 * this thread calls f on those rows (the weight rows r0.., y + r0, bias + r0) with its own
 * workspace (thread 0: ws; others: x->thread_ws). Each output is the same dot product as in one
 * call, so the result is bit-identical for any thread count and any claiming order. Every thread
 * must make the same sequence of calls within a forward call (the generated code does). A shape
 * the kernel will reject goes whole to thread 0 (which reports the kernel's error). Returns this
 * thread's first nonzero kernel status, else 0. */
int bu_linear_rows(bu_exec *x, bu_linear_fn f, int32_t w_type, const float *in, const void *w, const float *bias,
                   float *y, int64_t n_in, int64_t n_out, void *ws, size_t ws_cap);

/* One linear/1 call of n_tokens tokens (prefill): n_tokens = 1 is bu_linear_rows; else each
 * thread takes a contiguous range of token rows (x + t0 * n_in, y + t0 * n_out) and all output
 * rows, with its own workspace. Bit-identical for any thread count, as above. */
int bu_linear_tiles(bu_exec *x, bu_linear_fn f, int32_t w_type, const float *in, const void *w, const float *bias,
                    float *y, int64_t n_tokens, int64_t n_in, int64_t n_out, void *ws, size_t ws_cap);

/* After op `op` (index into ops) returned rc on this thread: with several threads, waits for all
 * of them (a barrier); if any thread's kernel failed, every thread gets nonzero (stop the call,
 * all at the same op); an installed observer then sees rows [row0, row0 + n_rows) of the op's
 * output `out` (on thread 0, then a second barrier), and its nonzero return stops the call too.
 * Returns 0 to go on. */
int bu_op_done(bu_exec *x, const bu_op_info *ops, int32_t op, int rc, const void *out, int64_t row0, int64_t n_rows);

/* As bu_op_done where the generated code needs no barrier before the next op: a kernel failure is
 * recorded and stops the call at the next bu_op_done (nonzero at once with one thread); with an
 * observer installed it is bu_op_done. */
int bu_op_next(bu_exec *x, const bu_op_info *ops, int32_t op, int rc, const void *out, int64_t row0, int64_t n_rows);

typedef int (*bu_forward_fn)(bu_exec *x);

typedef struct {
    int32_t phase_chunk;          /* tokens per call: prefill chunk, 1 for decode */
    uint64_t arena_bytes;         /* planned arena of the phase */
    uint64_t ws_bytes;            /* planned workspace of the phase */
    int32_t all_logits;           /* 1 if this forward can write logits for every token */
    bu_forward_fn forward;
    int32_t n_ops;
    const bu_op_info *ops;
    int32_t threaded;             /* 1: forward runs on every thread (generated code, bu_split /
                                     bu_op_done); 0: on one thread */
} bu_phase_desc;

typedef struct {
    int32_t abi_version;              /* BU_RT_ABI_VERSION at generation time */
    const char *payload_sha256;       /* hex SHA-256 of the BUMP payload it was generated for */
    uint32_t dims[9];                 /* n_layer n_embd n_head n_head_kv head_dim head_dim_v n_ff
                                         n_vocab n_ctx_train, as in the BUMP header */
    int32_t n_weights;
    const bu_weight_spec *weights;
    int32_t n_states;
    const bu_state_spec *states;
    int32_t max_ctx;                  /* the plan's n_ctx: scratch and KV are sized for at most this */
    uint64_t thread_ws_bytes;         /* scratch each thread but thread 0 needs: the largest scratch
                                         of an op whose work is split over threads */
    bu_phase_desc prefill;
    bu_phase_desc decode;
    const char *kv_dtype;             /* ABI 5: element type of every KV cache buffer, from the IR
                                         (bringup ir --kv-type): "F32" or "F16"; "none" without state */
} bu_model_desc;

/* Defined by the generated model.c. */
extern const bu_model_desc bu_model_descriptor;

#ifdef __cplusplus
}
#endif

#endif /* BU_MODEL_ABI_H */
