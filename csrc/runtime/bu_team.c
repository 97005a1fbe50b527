/* bu_team.c - running the generated forward pass on the model's threads, and the helpers that
 * the generated code calls on every thread (bu_runtime.h: bu_linear_rows, bu_linear_tiles,
 * bu_op_done). */
#include "bu_team.h"

#include "bu_bump.h"

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

int bu_linear_rows(bu_exec *x, bu_linear_fn f, int32_t w_type, const float *in, const void *w, const float *bias,
                   float *y, int64_t n_in, int64_t n_out, void *ws, size_t ws_cap)
{
    uint64_t be, bb;
    /* a shape the kernel will reject: one whole call on thread 0, which reports the kernel's error */
    if (x->n_threads < 2 || !w || !bu_format_block((uint32_t)w_type, &be, &bb) || n_in < 0 || n_in % (int64_t)be
        || n_out < 0)
        return x->ith == 0 ? f(in, w, bias, y, 1, n_in, n_out, ws, ws_cap) : 0;
    int64_t r0, r1;
    bu_split(x, n_out, 16, &r0, &r1);   /* 16 rows: each thread's y starts on its own cache line */
    if (r0 >= r1) return 0;
    size_t row_bytes = (size_t)(n_in / (int64_t)be) * (size_t)bb;
    return f(in, (const uint8_t *)w + (size_t)r0 * row_bytes, bias ? bias + r0 : NULL, y + r0, 1, n_in, r1 - r0,
             x->ith ? x->thread_ws : ws, x->ith ? x->thread_ws_cap : ws_cap);
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
    x.thread_ws = ith ? t->thread_ws + (size_t)(ith - 1) * t->thread_ws_cap : NULL;
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
        bu_pool_run(t->pool, forward_part, t);
        rc = t->rc0;
    } else {
        x0.ith = 0;
        x0.n_threads = 1;
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
