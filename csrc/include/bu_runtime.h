/* bringup native runtime: the public API of libmodel.so (what a host such as bringup-run calls).
 * The generated model code (codegen/model.c) plugs into the runtime through bu_model_abi.h, which
 * builds on this header; nothing here depends on it.
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

/* Bumped whenever bu_api or bu_model_desc (bu_model_abi.h) changes layout or meaning. bringup's
 * Python reads it from here (bringup.codegen.emit.RUNTIME_ABI_VERSION): the one source. */
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


#ifdef __cplusplus
}
#endif

#endif