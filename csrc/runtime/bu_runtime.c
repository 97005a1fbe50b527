/* bringup native runtime; see bu_runtime.h for the contract. */
#define _POSIX_C_SOURCE 200809L
#include "bu_runtime.h"
#include "bu_model_abi.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "bu_bump.h"
#include "bu_common.h"
#include "bu_formats.h"
#include "bu_kernels.h"
#include "bu_sha256.h"
#include "bu_team.h"
#include "bu_threadpool.h"

struct bu_model {
    const bu_model_desc *desc;
    bu_bump *bump;
    const void **weights;      /* desc->n_weights pointers into the mapping */
    void **state;              /* desc->n_states pointers into mem */
    uint8_t *mem;              /* the one allocation */
    size_t mem_size;
    uint8_t *arena;
    size_t arena_cap;
    uint8_t *ws;
    size_t ws_cap;
    struct bu_team team;       /* the pool, the scratch of threads 1.., the call's stop record */
    float *logits;             /* n_vocab */
    int32_t n_vocab, n_ctx, n_past, n_threads;
    int32_t have_logits;
    bu_observer_fn observer;   /* NULL unless bu_set_observer installed one */
    void *observer_ctx;
    char err[512];
};

/* bu_errf into the model's message buffer (bu_last_error). */
static int set_err(bu_model *m, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_err(bu_model *m, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bu_verrf(m->err, sizeof m->err, code, fmt, ap);
    va_end(ap);
    return code;
}

/* Each region of the one allocation starts at the format table's alignment (BU_ALIGN). */
static size_t align_up(size_t n) { return (n + BU_ALIGN - 1) / BU_ALIGN * BU_ALIGN; }

bu_open_params bu_default_params(void)
{
    bu_open_params p = {0, 1, 0};
    return p;
}

const char *bu_status_name(int s)
{
    switch (s) {
    case BU_RT_OK: return "ok";
    case BU_RT_ERR_ARG: return "bad argument";
    case BU_RT_ERR_IO: return "i/o error";
    case BU_RT_ERR_FORMAT: return "bad weights format";
    case BU_RT_ERR_INTEGRITY: return "integrity check failed";
    case BU_RT_ERR_WRONG_MODEL: return "weights do not belong to this model library";
    case BU_RT_ERR_NOMEM: return "out of memory";
    case BU_RT_ERR_CONTEXT: return "context full";
    case BU_RT_ERR_KERNEL: return "kernel error";
    case BU_RT_ERR_STATE: return "call out of order";
    case BU_RT_ERR_OBSERVER: return "stopped by the observer";
    default: return "unknown status";
    }
}

const char *bu_expected_payload_sha256(void) { return bu_model_descriptor.payload_sha256; }

static const char *const dim_names[BU_DIM_COUNT] = {
    "n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "head_dim_v", "n_ff", "n_vocab", "n_ctx_train"};

/* The weights must be the ones the library was generated for: same payload hash, same model
 * dims, and every weight of the canonical list present with its type and shape. */
static int check_identity(const bu_model_desc *d, const bu_bump *b, const char *path, char *err, size_t cap)
{
    char got[65];
    bu_sha256_hex(b->payload_sha256, got);
    if (!d->payload_sha256 || strcmp(got, d->payload_sha256) != 0)
        return bu_errf(err, cap, BU_RT_ERR_WRONG_MODEL,
                         "%s has payload SHA-256 %s, but this model library was generated for %s: "
                         "use the libmodel.so built from these weights", path, got,
                         d->payload_sha256 ? d->payload_sha256 : "(none)");
    for (int i = 0; i < BU_DIM_COUNT; i++)
        if (b->dims[i] != d->dims[i])
            return bu_errf(err, cap, BU_RT_ERR_WRONG_MODEL, "%s: %s is %u, this model library expects %u",
                             path, dim_names[i], b->dims[i], d->dims[i]);
    for (int i = 0; i < d->n_weights; i++) {
        const bu_weight_spec *w = &d->weights[i];
        const bu_bump_tensor *t = bu_bump_find(b, w->name);
        if (!t)
            return bu_errf(err, cap, BU_RT_ERR_WRONG_MODEL, "%s has no tensor %s, which this model needs", path, w->name);
        int same = t->ggml_type == w->ggml_type && t->n_dims == w->n_dims;
        for (int k = 0; k < 4; k++) same = same && t->shape[k] == w->shape[k];
        if (!same)
            return bu_errf(err, cap, BU_RT_ERR_WRONG_MODEL,
                             "%s: tensor %s is type %u shape [%llu,%llu,%llu,%llu], this model expects type %u "
                             "shape [%llu,%llu,%llu,%llu]", path, w->name, t->ggml_type,
                             (unsigned long long)t->shape[0], (unsigned long long)t->shape[1],
                             (unsigned long long)t->shape[2], (unsigned long long)t->shape[3], w->ggml_type,
                             (unsigned long long)w->shape[0], (unsigned long long)w->shape[1],
                             (unsigned long long)w->shape[2], (unsigned long long)w->shape[3]);
    }
    return BU_RT_OK;
}

int bu_open(const char *path, const bu_open_params *pp, bu_model **out, char *err, size_t cap)
{
    if (err && cap) err[0] = 0;
    if (!out || !path) return bu_errf(err, cap, BU_RT_ERR_ARG, "bu_open: NULL argument");
    *out = NULL;
    /* BU_ISA named an unknown ISA level or one this CPU lacks (csrc/kernels/bu_cpu.c): refuse, never fall back */
    if (bu_isa_check(err, cap) != 0) return BU_RT_ERR_ARG;
    const bu_model_desc *d = &bu_model_descriptor;
    if (d->abi_version != BU_RT_ABI_VERSION)
        return bu_errf(err, cap, BU_RT_ERR_WRONG_MODEL, "model code was generated for runtime ABI %d, runtime is %d",
                         d->abi_version, BU_RT_ABI_VERSION);
    if (!d->kv_dtype) return bu_errf(err, cap, BU_RT_ERR_WRONG_MODEL, "model code names no KV cache dtype");
    bu_open_params p = pp ? *pp : bu_default_params();
    int32_t n_ctx_train = (int32_t)d->dims[BU_DIM_N_CTX_TRAIN];
    if (p.n_ctx == 0) p.n_ctx = d->max_ctx;
    if (p.n_ctx < 1)
        return bu_errf(err, cap, BU_RT_ERR_ARG, "context length %d: must be >= 1", p.n_ctx);
    if (p.n_ctx > d->max_ctx)
        return bu_errf(err, cap, BU_RT_ERR_ARG,
                         "context length %d exceeds the %d positions this library was planned for "
                         "(re-run the pipeline with a larger --ctx)", p.n_ctx, d->max_ctx);
    if (n_ctx_train > 0 && p.n_ctx > n_ctx_train)
        return bu_errf(err, cap, BU_RT_ERR_ARG,
                         "context length %d exceeds the model's training context %d", p.n_ctx, n_ctx_train);
    if (p.n_threads == 0)   /* every CPU we may run on (documented: at most the pool's maximum) */
        p.n_threads = bu_cpu_count() < BU_POOL_MAX_THREADS ? bu_cpu_count() : BU_POOL_MAX_THREADS;
    if (p.n_threads < 1 || p.n_threads > BU_POOL_MAX_THREADS)
        return bu_errf(err, cap, BU_RT_ERR_ARG, "thread count %d: must be in [1, %d], or 0 for all CPUs",
                       p.n_threads, BU_POOL_MAX_THREADS);

    bu_bump *b = NULL;
    int rc = bu_bump_open(path, p.verify_payload != 0, &b, err, cap);
    if (rc != BU_BUMP_OK) return rc; /* bu_bump codes are the runtime's codes */
    if ((rc = check_identity(d, b, path, err, cap)) != BU_RT_OK) {
        bu_bump_close(b);
        return rc;
    }

    bu_model *m = calloc(1, sizeof *m);
    if (!m) {
        bu_bump_close(b);
        return bu_errf(err, cap, BU_RT_ERR_NOMEM, "out of memory");
    }
    m->desc = d;
    m->bump = b;
    m->n_vocab = (int32_t)d->dims[BU_DIM_N_VOCAB];
    m->n_ctx = p.n_ctx;
    m->n_threads = p.n_threads;
    m->weights = calloc(d->n_weights ? (size_t)d->n_weights : 1, sizeof *m->weights);
    m->state = calloc(d->n_states ? (size_t)d->n_states : 1, sizeof *m->state);
    if (!m->weights || !m->state) {
        rc = bu_errf(err, cap, BU_RT_ERR_NOMEM, "out of memory");
        goto bad;
    }
    for (int i = 0; i < d->n_weights; i++) m->weights[i] = bu_bump_find(b, d->weights[i].name)->data;

    /* One allocation: arena | workspace | state buffers | logits, each 64-aligned. */
    size_t arena = d->prefill.arena_bytes > d->decode.arena_bytes ? d->prefill.arena_bytes : d->decode.arena_bytes;
    size_t ws = d->prefill.ws_bytes > d->decode.ws_bytes ? d->prefill.ws_bytes : d->decode.ws_bytes;
    size_t tws = align_up((size_t)d->thread_ws_bytes), n_extra = (size_t)p.n_threads - 1;
    size_t total = align_up(arena) + align_up(ws) + tws * n_extra, state_bytes = 0;
    for (int i = 0; i < d->n_states; i++) {
        size_t sb;
        if (__builtin_mul_overflow((size_t)d->states[i].bytes_per_pos, (size_t)p.n_ctx, &sb)
            || __builtin_add_overflow(state_bytes, align_up(sb), &state_bytes)) {
            rc = bu_errf(err, cap, BU_RT_ERR_NOMEM, "KV cache for %d positions overflows size_t", p.n_ctx);
            goto bad;
        }
    }
    total += state_bytes + align_up((size_t)m->n_vocab * sizeof(float));
    if (posix_memalign((void **)&m->mem, BU_ALIGN, total ? total : BU_ALIGN) != 0) {
        m->mem = NULL;
        rc = bu_errf(err, cap, BU_RT_ERR_NOMEM,
                       "cannot allocate %zu bytes (arena %zu, workspace %zu, KV cache %zu for %d positions)",
                       total, arena, ws, state_bytes, p.n_ctx);
        goto bad;
    }
    m->mem_size = total;
    /* Touch every page now: the memory model predicts peak RSS from these sizes, and a KV cache
     * whose pages fault in during decode would make RSS grow per token (issue 7's proof). */
    memset(m->mem, 0, total);
    uint8_t *q = m->mem;
    m->arena = q; m->arena_cap = arena; q += align_up(arena);
    m->ws = q; m->ws_cap = ws; q += align_up(ws);
    m->team.nth = p.n_threads;
    m->team.thread_ws = q; m->team.thread_ws_cap = tws; q += tws * n_extra;
    for (int i = 0; i < d->n_states; i++) {
        m->state[i] = q;
        q += align_up((size_t)d->states[i].bytes_per_pos * (size_t)p.n_ctx);
    }
    m->logits = (float *)q;
    if (p.n_threads > 1 && bu_pool_start(p.n_threads, &m->team.pool) != 0) {
        rc = bu_errf(err, cap, BU_RT_ERR_NOMEM, "cannot start %d worker threads", p.n_threads - 1);
        goto bad;
    }
    *out = m;
    return BU_RT_OK;
bad:
    bu_close(m);
    return rc;
}

void bu_close(bu_model *m)
{
    if (!m) return;
    bu_pool_stop(m->team.pool);
    bu_bump_close(m->bump);
    free(m->mem);
    free(m->weights);
    free(m->state);
    free(m);
}

static int run(bu_model *m, const bu_phase_desc *ph, const char *phase, const int32_t *tokens, int32_t n,
               float *logits, int64_t n_logit_rows)
{
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->n_vocab)
            return set_err(m, BU_RT_ERR_ARG, "token id %d at index %d is outside the vocabulary [0, %d)",
                           tokens[i], i, m->n_vocab);
    /* the members not named here (kernel_status, observer_status) start at 0 */
    bu_exec x = {.arena = m->arena, .arena_cap = m->arena_cap, .ws = m->ws, .ws_cap = m->ws_cap,
                 .weights = (const void *const *)m->weights, .state = m->state, .tokens = tokens,
                 .logits = logits, .pos = m->n_past, .n_tokens = n, .n_ctx = m->n_ctx, .n_threads = m->n_threads,
                 .n_logit_rows = n_logit_rows, .failed_op = -1, .team = &m->team,
                 .thread_ws_cap = m->team.thread_ws_cap, .observer = m->observer, .observer_ctx = m->observer_ctx,
                 .phase = phase};
    int32_t op = -1, kernel_status = 0, observer_status = 0;
    int rc = bu_team_forward(&m->team, &x, ph->forward, ph->threaded, &op, &kernel_status, &observer_status);
    if (rc != 0) {
        /* The KV rows of this call may be partly written: the context is no longer consistent. */
        m->have_logits = 0;
        if (observer_status != 0)
            return set_err(m, BU_RT_ERR_OBSERVER, "the observer stopped %s after op %d (%s) with status %d at pos "
                           "%lld; call bu_reset before reusing the model", phase, op,
                           op >= 0 && op < ph->n_ops && ph->ops[op].id ? ph->ops[op].id : "?", observer_status,
                           (long long)x.pos);
        if (op >= 0 && op < ph->n_ops)
            return set_err(m, BU_RT_ERR_KERNEL, "%s op %d (%s, circuit op %s, layer %d) returned %d at pos %lld, "
                           "n_tokens %d; call bu_reset before reusing the model", phase, op, ph->ops[op].kernel,
                           ph->ops[op].circuit_op, ph->ops[op].layer, kernel_status, (long long)x.pos, n);
        return set_err(m, BU_RT_ERR_KERNEL, "%s forward failed with %d; call bu_reset before reusing the model",
                       phase, rc);
    }
    m->n_past += n;
    return BU_RT_OK;
}

static int prefill(bu_model *m, const int32_t *tokens, int32_t n, float *all, size_t all_cap)
{
    if (!m) return BU_RT_ERR_ARG;
    if (!tokens || n < 1) return set_err(m, BU_RT_ERR_ARG, "prefill needs at least one token");
    if ((int64_t)m->n_past + n > m->n_ctx)
        return set_err(m, BU_RT_ERR_CONTEXT, "%d tokens after %d already in the context exceed the context length %d",
                       n, m->n_past, m->n_ctx);
    const bu_phase_desc *ph = &m->desc->prefill;
    if (all) {
        if (!ph->all_logits)
            return set_err(m, BU_RT_ERR_ARG, "this model library was generated without all-position logits");
        if (all_cap / (size_t)m->n_vocab < (size_t)n)
            return set_err(m, BU_RT_ERR_ARG, "all-logits buffer holds %zu floats, %d x %d needed",
                           all_cap, n, m->n_vocab);
    }
    m->have_logits = 0;
    for (int32_t i = 0; i < n; i += ph->phase_chunk) {
        int32_t c = n - i < ph->phase_chunk ? n - i : ph->phase_chunk;
        int rc;
        if (all) {
            float *rows = all + (size_t)i * (size_t)m->n_vocab;
            rc = run(m, ph, "prefill", tokens + i, c, rows, c);
            if (rc == BU_RT_OK && i + c == n)
                memcpy(m->logits, rows + (size_t)(c - 1) * (size_t)m->n_vocab, (size_t)m->n_vocab * sizeof(float));
        } else {
            rc = run(m, ph, "prefill", tokens + i, c, m->logits, 1);
        }
        if (rc != BU_RT_OK) return rc;
    }
    m->have_logits = 1;
    return BU_RT_OK;
}

int bu_prefill(bu_model *m, const int32_t *tokens, int32_t n) { return prefill(m, tokens, n, NULL, 0); }

int bu_prefill_all_logits(bu_model *m, const int32_t *tokens, int32_t n, float *out, size_t out_cap)
{
    if (m && !out) return set_err(m, BU_RT_ERR_ARG, "all-logits buffer is NULL");
    return prefill(m, tokens, n, out, out_cap);
}

int bu_decode(bu_model *m, int32_t token)
{
    if (!m) return BU_RT_ERR_ARG;
    if (m->n_past + 1 > m->n_ctx)
        return set_err(m, BU_RT_ERR_CONTEXT, "the context is full (%d tokens)", m->n_ctx);
    m->have_logits = 0;
    int rc = run(m, &m->desc->decode, "decode", &token, 1, m->logits, 1);
    if (rc == BU_RT_OK) m->have_logits = 1;
    return rc;
}

const float *bu_logits(const bu_model *m) { return m && m->have_logits ? m->logits : NULL; }

int bu_reset(bu_model *m)
{
    if (!m) return BU_RT_ERR_ARG;
    m->n_past = 0;
    m->have_logits = 0;
    m->err[0] = 0;
    return BU_RT_OK;
}

int bu_set_observer(bu_model *m, bu_observer_fn fn, void *ctx)
{
    if (!m) return BU_RT_ERR_ARG;
    m->observer = fn;
    m->observer_ctx = fn ? ctx : NULL;
    return BU_RT_OK;
}

const char *bu_last_error(const bu_model *m) { return m ? m->err : "no model"; }
int32_t bu_n_vocab(const bu_model *m) { return m ? m->n_vocab : 0; }
int32_t bu_n_ctx(const bu_model *m) { return m ? m->n_ctx : 0; }
int32_t bu_n_past(const bu_model *m) { return m ? m->n_past : 0; }
int32_t bu_n_ctx_train(const bu_model *m) { return m ? (int32_t)m->desc->dims[BU_DIM_N_CTX_TRAIN] : 0; }
int32_t bu_n_threads(const bu_model *m) { return m ? m->n_threads : 0; }
const char *bu_kv_dtype(const bu_model *m) { return m ? m->desc->kv_dtype : NULL; }
int32_t bu_chunk(const bu_model *m) { return m ? m->desc->prefill.phase_chunk : 0; }
int32_t bu_max_ctx(void) { return bu_model_descriptor.max_ctx; }
int bu_payload_verified(const bu_model *m) { return m ? m->bump->payload_verified : 0; }
size_t bu_memory_bytes(const bu_model *m) { return m ? m->mem_size : 0; }

const void *bu_tensor(const bu_model *m, const char *name, size_t *size)
{
    const bu_bump_tensor *t = m ? bu_bump_find(m->bump, name) : NULL;
    if (size) *size = t ? (size_t)t->size : 0;
    return t ? t->data : NULL;
}

const char *bu_metadata(const bu_model *m, size_t *len)
{
    if (len) *len = m ? (size_t)m->bump->meta_size : 0;
    return m ? m->bump->meta : NULL;
}

const bu_api *bu_api_get(void)
{
    static const bu_api api = {
        BU_RT_ABI_VERSION, (int32_t)sizeof(bu_api), bu_default_params, bu_open, bu_prefill,
        bu_prefill_all_logits, bu_decode, bu_logits, bu_reset, bu_close, bu_last_error, bu_status_name,
        bu_n_vocab, bu_n_ctx, bu_n_past, bu_n_ctx_train, bu_chunk, bu_max_ctx, bu_payload_verified, bu_memory_bytes,
        bu_tensor, bu_metadata, bu_expected_payload_sha256, bu_set_observer, bu_n_threads, bu_kv_dtype,
    };
    return &api;
}
