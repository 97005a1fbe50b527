/* bringup native runtime: the public API of libmodel.so, and the descriptor through which the
 * generated model code (codegen/model.c) plugs into it.
 *
 * Reentrant: no global model state; every call takes the bu_model it works on. One bu_model must
 * not be used by two threads at once; two bu_models are independent.
 * Errors are status codes (bu_rt_status) plus a message (bu_last_error / the err buffer of
 * bu_open), never an abort.
 *
 * Memory: bu_open makes ONE allocation holding, 64-byte aligned and in this order, the activation
 * arena (the larger of the planned prefill and decode arenas: the phases never run at once), the
 * kernel workspace (the plan's, then thread_ws_bytes per extra thread), the KV cache (every state
 * buffer, n_ctx rows of its planned per-position bytes) and the last-position logits (n_vocab
 * fp32). Weights are not copied: they are pointers into the mmap'd BUMP. Kernels get pointer +
 * capacity; nothing allocates after bu_open.
 *
 * Threads: with n_threads > 1, bu_open also starts n_threads - 1 worker threads once (a pool,
 * bu_threadpool.h; joined by bu_close). Every prefill / decode call runs the generated forward
 * pass on all of them at once: each thread does its share of every op (rows of a matrix product,
 * token rows or elements of the other ops), with a barrier between ops. Every output element is
 * computed by the same kernel code in the same order whatever the split, so the results are
 * bit-identical for any thread count.
 */
#ifndef BU_RUNTIME_H
#define BU_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef BU_API
#define BU_API __attribute__((visibility("default")))
#endif

/* Bumped whenever bu_api or bu_model_desc changes layout or meaning. */
#define BU_RT_ABI_VERSION 5

typedef enum {
    BU_RT_OK = 0,
    BU_RT_ERR_ARG = 1,        /* bad argument: NULL, token id out of range, n = 0, bad ctx */
    BU_RT_ERR_IO = 2,         /* cannot open / read / map the weights file */
    BU_RT_ERR_FORMAT = 3,     /* not a valid BUMP v1 file */
    BU_RT_ERR_INTEGRITY = 4,  /* truncated file, hash mismatch */
    BU_RT_ERR_WRONG_MODEL = 5,/* valid BUMP, but not the weights this library was generated for */
    BU_RT_ERR_NOMEM = 6,      /* the one allocation failed */
    BU_RT_ERR_CONTEXT = 7,    /* the tokens do not fit in the context (n_past + n > n_ctx) */
    BU_RT_ERR_KERNEL = 8,     /* a kernel returned an error status (a bug: message names the op) */
    BU_RT_ERR_STATE = 9,      /* call out of order (e.g. logits before any evaluation) */
    BU_RT_ERR_OBSERVER = 10   /* the caller's observer (bu_set_observer) stopped the call */
} bu_rt_status;

typedef struct bu_model bu_model;

typedef struct {
    int32_t n_ctx;          /* context length in tokens; 0 = the planned maximum (bu_max_ctx) */
    int32_t verify_payload; /* 1 (default): recompute the payload SHA-256 at open; 0: skip, and
                               bu_payload_verified() says so */
    int32_t n_threads;      /* threads of the forward pass, 1..256; 0 (default) = every CPU this
                               process may run on (bu_cpu_count(), as llama.cpp defaults to) */
} bu_open_params;

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

/* Element type of an op's output, as an observer sees it. */
typedef enum { BU_OBS_F32 = 0, BU_OBS_I32 = 1 } bu_obs_dtype;

typedef struct {
    const char *kernel;     /* C function name */
    const char *circuit_op; /* circuit op id */
    int32_t layer;          /* -1: not in a layer */
    const char *id;         /* IR op id ([A-Za-z0-9_.]+, validated by codegen): names observations */
    int32_t out_dtype;      /* bu_obs_dtype of the op's (single) output */
    int64_t out_row_elems;  /* elements per token row of the output (heads flattened) */
} bu_op_info;

/* What an observer sees after one op: rows [row0, row0 + n_rows) of the op's output for this call
 * (token rows of the call; position of row r = pos + r). Ops of the logits tail report one row
 * per requested logits row. `data` is valid only during the callback (the arena is reused). */
typedef struct {
    const char *phase;      /* "prefill" or "decode" */
    int32_t op;             /* index into the phase's op list */
    const bu_op_info *info; /* the op: id, kernel, circuit op, layer, output dtype and row width */
    const void *data;       /* row row0 of the output */
    int64_t pos;            /* position of the call's first token */
    int64_t row0;
    int64_t n_rows;
} bu_observation;

/* Called after each op when installed (bu_set_observer); nonzero stops the call with
 * BU_RT_ERR_OBSERVER. */
typedef int (*bu_observer_fn)(void *ctx, const bu_observation *obs);

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

/* ---------------- public API ---------------- */

BU_API bu_open_params bu_default_params(void);

/* Open `weights_path` for this library's model. On failure *out is NULL, err holds a one-line
 * message, and the status says which check failed. */
BU_API int bu_open(const char *weights_path, const bu_open_params *p, bu_model **out, char *err, size_t err_cap);

/* Evaluate n prompt tokens at positions n_past .. n_past+n-1, in chunks of the planned prefill
 * chunk; afterwards bu_logits() is the next-token distribution after the last of them.
 * BU_RT_ERR_CONTEXT if n_past + n > n_ctx (nothing is evaluated). */
BU_API int bu_prefill(bu_model *m, const int32_t *tokens, int32_t n);

/* As bu_prefill, and also write every position's logits (teacher forcing) into out:
 * row-major [n, n_vocab] fp32; out_cap is out's size in floats (must be >= n * n_vocab). */
BU_API int bu_prefill_all_logits(bu_model *m, const int32_t *tokens, int32_t n, float *out, size_t out_cap);

/* Evaluate one token at position n_past (the decode graph). */
BU_API int bu_decode(bu_model *m, int32_t token);

/* The n_vocab logits of the last evaluated position, or NULL before any evaluation. */
BU_API const float *bu_logits(const bu_model *m);

/* Forget the context (n_past = 0). The KV cache bytes are not cleared: positions >= n_past are
 * never read (the attention kernel attends to j <= pos only). */
BU_API int bu_reset(bu_model *m);

BU_API void bu_close(bu_model *m);

BU_API const char *bu_last_error(const bu_model *m);
BU_API const char *bu_status_name(int status);

BU_API int32_t bu_n_vocab(const bu_model *m);
BU_API int32_t bu_n_ctx(const bu_model *m);
BU_API int32_t bu_n_past(const bu_model *m);
BU_API int32_t bu_n_ctx_train(const bu_model *m);
BU_API int32_t bu_chunk(const bu_model *m);
BU_API int32_t bu_n_threads(const bu_model *m);   /* threads of the forward pass (n_threads 0 resolved) */
BU_API const char *bu_kv_dtype(const bu_model *m);  /* KV cache element type ("F32", "F16"; NULL without m) */
BU_API int32_t bu_max_ctx(void);                    /* the planned context maximum */
BU_API int bu_payload_verified(const bu_model *m);
BU_API size_t bu_memory_bytes(const bu_model *m);   /* size of the one allocation */

/* Raw bytes of a BUMP tensor (e.g. "tokenizer.blob"), NULL if absent. */
BU_API const void *bu_tensor(const bu_model *m, const char *name, size_t *size);

/* The BUMP metadata (canonical JSON, not NUL-terminated). */
BU_API const char *bu_metadata(const bu_model *m, size_t *len);

/* The payload SHA-256 this library was generated for (hex). */
BU_API const char *bu_expected_payload_sha256(void);

/* Install (fn != NULL) or remove (fn == NULL) an observer called after every op of every later
 * prefill / decode call with that op's output (bu_observation). For debugging and X-ray
 * (bringup-run --dump-hidden); a model without one pays one branch per op. */
BU_API int bu_set_observer(bu_model *m, bu_observer_fn fn, void *ctx);

/* Everything above as one table, for hosts that dlopen libmodel.so (the CLI): one dlsym of
 * "bu_api_get", then a check of abi_version. */
typedef struct {
    int32_t abi_version;
    int32_t struct_size;
    bu_open_params (*default_params)(void);
    int (*open)(const char *, const bu_open_params *, bu_model **, char *, size_t);
    int (*prefill)(bu_model *, const int32_t *, int32_t);
    int (*prefill_all_logits)(bu_model *, const int32_t *, int32_t, float *, size_t);
    int (*decode)(bu_model *, int32_t);
    const float *(*logits)(const bu_model *);
    int (*reset)(bu_model *);
    void (*close)(bu_model *);
    const char *(*last_error)(const bu_model *);
    const char *(*status_name)(int);
    int32_t (*n_vocab)(const bu_model *);
    int32_t (*n_ctx)(const bu_model *);
    int32_t (*n_past)(const bu_model *);
    int32_t (*n_ctx_train)(const bu_model *);
    int32_t (*chunk)(const bu_model *);
    int32_t (*max_ctx)(void);
    int (*payload_verified)(const bu_model *);
    size_t (*memory_bytes)(const bu_model *);
    const void *(*tensor)(const bu_model *, const char *, size_t *);
    const char *(*metadata)(const bu_model *, size_t *);
    const char *(*expected_payload_sha256)(void);
    int (*set_observer)(bu_model *, bu_observer_fn, void *);
    int32_t (*n_threads)(const bu_model *);   /* ABI 4 */
    const char *(*kv_dtype)(const bu_model *); /* ABI 5 */
} bu_api;

BU_API const bu_api *bu_api_get(void);

/* Defined by the generated model.c. */
extern const bu_model_desc bu_model_descriptor;

#ifdef __cplusplus
}
#endif

#endif
