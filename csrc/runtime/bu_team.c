/* bu_team.c - running the generated forward pass on the model's threads, and the helpers that
 * the generated code calls on every thread (bu_runtime.h: bu_linear_rows, bu_linear_tiles,
 * bu_op_done). */
#include "bu_team.h"

#include "bu_bump.h"
#include "bu_kernels.h"

/* Record the call's first stop; later ones (other threads at the same op) are dropped. */
static void stop(struct bu_team *t, int32_t op, int kernel_rc, int observer_rc)
{
    int32_t expect = 0;
    if (atomic_compare_exchange_strong(&t->stopped, &expect, 1)) {
        t->failed_op = op;
        t->kernel_status = kernel_rc;
        t->observer_status = observer_rc;
    }
}

static int observe(bu_exec *x, const bu_op_info *ops, int32_t op, const void *out, int64_t row0, int64_t n_rows)
{
    bu_observation o = {x->phase, op, &ops[op], out, x->pos, row0, n_rows};
    return x->observer(x->observer_ctx, &o);
}

int bu_op_done(bu_exec *x, const bu_op_info *ops, int32_t op, int rc, const void *out, int64_t row0, int64_t n_rows)
{
    struct bu_team *t = x->team;
    if (x->n_threads < 2) {
        if (rc != 0) {
            stop(t, op, rc, 0);
            return rc;
        }
        int o = x->observer ? observe(x, ops, op, out, row0, n_rows) : 0;
        if (o != 0) stop(t, op, 0, o);
        return o;
    }
    if (rc != 0) stop(t, op, rc, 0);
    bu_pool_barrier(t->pool);
    if (atomic_load_explicit(&t->stopped, memory_order_acquire)) return -1;
    if (x->observer) {
        /* the op's whole output is written (barrier above); the next op waits for the observer */
        if (x->ith == 0) {
            int o = observe(x, ops, op, out, row0, n_rows);
            if (o != 0) stop(t, op, 0, o);
        }
        bu_pool_barrier(t->pool);
        if (atomic_load_explicit(&t->stopped, memory_order_acquire)) return -1;
    }
    return 0;
}

int bu_op_next(bu_exec *x, const bu_op_info *ops, int32_t op, int rc, const void *out, int64_t row0, int64_t n_rows)
{
    if (x->observer) return bu_op_done(x, ops, op, rc, out, row0, n_rows);
    if (rc != 0) stop(x->team, op, rc, 0);
    return x->n_threads < 2 ? rc : 0;
}

/* Rows per claimed chunk: about 8 chunks per thread (few enough that the claims cost nothing
 * against the rows' work, enough that a thread the host stalls leaves little for the others to
 * wait for), in whole 16-row units so that each chunk's y starts on its own cache line, at least
 * 64 rows (a 640-wide Q5_0 row is ~0.1 us of work; a claim is one shared atomic). */
static int64_t chunk_rows(int64_t n_out, int64_t nth)
{
    const int64_t per = (n_out + 8 * nth - 1) / (8 * nth);
    const int64_t rows = (per + 15) / 16 * 16;
    return rows < 64 ? 64 : rows;
}

int bu_linear_rows(bu_exec *x, bu_linear_fn f, int32_t w_type, const float *in, const void *w, const float *bias,
                   float *y, int64_t n_in, int64_t n_out, void *ws, size_t ws_cap)
{
    uint64_t be, bb;
    /* a shape the kernel will reject: one whole call on thread 0, which reports the kernel's error */
    if (x->n_threads < 2 || !w || !bu_format_block((uint32_t)w_type, &be, &bb) || n_in < 0 || n_in % (int64_t)be
        || n_out < 0)
        return x->ith == 0 ? f(in, w, bias, y, 1, n_in, n_out, ws, ws_cap) : 0;
    const size_t row_bytes = (size_t)(n_in / (int64_t)be) * (size_t)bb;
    const int64_t rows = chunk_rows(n_out, x->n_threads), n_chunks = (n_out + rows - 1) / rows;
    /* this call's tickets: [base, base + n_chunks), the same numbers on every thread */
    const int64_t base = x->chunk_base, end = base + n_chunks;
    x->chunk_base = end;
    void *tws = x->ith ? x->thread_ws : ws;
    const size_t tcap = x->ith ? x->thread_ws_cap : ws_cap;
    int rc = 0;
    for (;;) {
        int64_t c;
        if (x->chunk_held) {   /* drawn during an earlier call: it is >= that call's end = our base */
            c = x->chunk_held - 1;
            x->chunk_held = 0;
        } else {
            c = atomic_fetch_add_explicit(&x->team->next_chunk, 1, memory_order_relaxed);
        }
        if (c >= end) {        /* a later call's: keep it for that call */
            x->chunk_held = c + 1;
            return rc;
        }
        const int64_t r0 = (c - base) * rows, r1 = r0 + rows < n_out ? r0 + rows : n_out;
        const int k = f(in, (const uint8_t *)w + (size_t)r0 * row_bytes, bias ? bias + r0 : NULL, y + r0, 1, n_in,
                        r1 - r0, tws, tcap);
        if (k != 0 && rc == 0) rc = k;
    }
}

int bu_linear_tiles(bu_exec *x, bu_linear_fn f, int32_t w_type, const float *in, const void *w, const float *bias,
                    float *y, int64_t n_tokens, int64_t n_in, int64_t n_out, void *ws, size_t ws_cap)
{
    if (n_tokens == 1) return bu_linear_rows(x, f, w_type, in, w, bias, y, n_in, n_out, ws, ws_cap);
    if (x->n_threads < 2 || n_tokens < 0 || n_in < 0 || n_out < 0)
        return x->ith == 0 ? f(in, w, bias, y, n_tokens, n_in, n_out, ws, ws_cap) : 0;
    int64_t t0, t1;
    bu_split(x, n_tokens, 1, &t0, &t1);
    if (t0 >= t1) return 0;
    return f(in + t0 * n_in, w, bias, y + t0 * n_out, t1 - t0, n_in, n_out, x->ith ? x->thread_ws : ws,
             x->ith ? x->thread_ws_cap : ws_cap);
}

/* One thread's part of a pool job: its own copy of the call, its own scratch. */
static void forward_part(void *arg, int ith, int nth)
{
    struct bu_team *t = arg;
    bu_exec x = *t->call;
    x.ith = ith;
    x.n_threads = nth;
    bu_isa_set_team(nth);   /* the ISA choice of each linear class is made per team size */
    x.thread_ws = ith ? t->thread_ws + (size_t)(ith - 1) * t->thread_ws_cap : NULL;
    x.chunk_base = x.chunk_held = 0;
    int rc = t->fwd(&x);
    if (ith == 0) t->rc0 = rc;
}

int bu_team_forward(struct bu_team *t, const bu_exec *call, bu_forward_fn fwd, int threaded, int32_t *failed_op,
                    int32_t *kernel_status, int32_t *observer_status)
{
    atomic_store(&t->stopped, 0);
    t->failed_op = -1;
    t->kernel_status = t->observer_status = 0;
    int rc;
    bu_exec x0 = *call;
    if (threaded && t->pool) {
        t->call = call;
        t->fwd = fwd;
        atomic_store(&t->next_chunk, 0);
        bu_pool_run(t->pool, forward_part, t);
        rc = t->rc0;
    } else {
        x0.ith = 0;
        x0.n_threads = 1;
        bu_isa_set_team(1);
        x0.thread_ws = NULL;
        rc = fwd(&x0);
    }
    if (atomic_load(&t->stopped)) {
        *failed_op = t->failed_op;
        *kernel_status = t->kernel_status;
        *observer_status = t->observer_status;
    } else {   /* a forward that reports through its bu_exec (one thread, not bu_op_done) */
        *failed_op = x0.failed_op;
        *kernel_status = x0.kernel_status;
        *observer_status = x0.observer_status;
    }
    return rc;
}
