/* bu_threadpool.h - the runtime's persistent worker pool (bu_threadpool.c).
 *
 * bu_open starts n_threads - 1 workers once; bu_close joins them. A job is run by every thread of
 * the team at once (the caller is thread 0), SPMD like llama.cpp's graph compute: the generated
 * forward pass runs on all threads, each doing its share of every op, with a barrier between ops.
 * Waiting (for a job, at a barrier) spins for a short while, then sleeps on a futex, so a pool
 * that is idle between calls costs no CPU and a barrier between two ops costs no system call.
 * Nothing allocates after bu_pool_start; no thread is created after it.
 */
#ifndef BU_THREADPOOL_H
#define BU_THREADPOOL_H

#include <stdint.h>

#define BU_POOL_MAX_THREADS 256

typedef struct bu_pool bu_pool;

/* One thread's part of a job: thread ith of nth. */
typedef void (*bu_pool_fn)(void *arg, int ith, int nth);

/* Start a pool of n_threads (2..BU_POOL_MAX_THREADS) threads: the caller plus n_threads - 1
 * workers. Returns 0, or -1 (nothing left running) if the memory or a thread cannot be had. */
int bu_pool_start(int n_threads, bu_pool **out);

/* Stop and join the workers and free the pool (NULL: no-op). Not during a job. */
void bu_pool_stop(bu_pool *p);

/* Run fn(arg, ith, nth) on every thread (the caller is ith 0) and return when all have finished. */
void bu_pool_run(bu_pool *p, bu_pool_fn fn, void *arg);

/* Inside a job: wait until all nth threads of the job have called it. Memory written before the
 * barrier by any thread is visible after it to all. */
void bu_pool_barrier(bu_pool *p);

/* Threads this process may run on (sched_getaffinity; the online CPUs if that fails), >= 1: what
 * n_threads = 0 means at bu_open (llama.cpp likewise defaults to the machine's cores). */
int bu_cpu_count(void);

#endif
