/* bu_team.h - private to the runtime: the threads of one model (bu_team.c). */
#ifndef BU_TEAM_H
#define BU_TEAM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "bu_model_abi.h"
#include "bu_threadpool.h"

struct bu_team {
    bu_pool *pool;                /* NULL with one thread */
    int nth;                      /* threads of a threaded forward call */
    uint8_t *thread_ws;           /* (nth - 1) x thread_ws_cap bytes: scratch of threads 1.. */
    size_t thread_ws_cap;
    /* per call: the first stop (kernel error or observer), written once by the thread that set
     * `stopped`, read by every thread after a barrier */
    _Atomic int32_t stopped;
    int32_t failed_op, kernel_status, observer_status;
    /* the call being run by the pool */
    const bu_exec *call;
    bu_forward_fn fwd;
    int rc0;                      /* thread 0's return */
    /* the next row-chunk ticket of the call (bu_linear_rows): tickets are numbered across all of
     * the call's bu_linear_rows calls in order, so no reset is needed between them */
    _Atomic int64_t next_chunk;
};

/* Run fwd for one call described by `call` (its thread-independent fields): on every thread when
 * `threaded` and the team has several, else on the caller only. Returns thread 0's return value;
 * when it is nonzero, *failed_op, *kernel_status and *observer_status say why (as bu_exec's). */
int bu_team_forward(struct bu_team *t, const bu_exec *call, bu_forward_fn fwd, int threaded, int32_t *failed_op,
                    int32_t *kernel_status, int32_t *observer_status);

#endif
