/* bu_threadpool.c - persistent SPMD worker pool; see bu_threadpool.h for the contract.
 *
 * Synchronisation is two 32-bit generation words, each a futex: job_gen (bumped by bu_pool_run
 * to start a job) and bar_phase (bumped by the last thread to reach a barrier). A waiter spins
 * on its word for some rounds of the CPU's pause hint (at barriers an adaptive budget, below),
 * then sleeps in FUTEX_WAIT. A waker makes the system call only when a thread sleeps (the `sleepers` count): the sleeper increments
 * it before re-reading the word, the waker stores the word before reading the count, both
 * sequentially consistent, so one of them always sees the other (and FUTEX_WAIT re-checks the
 * word in the kernel).
 */
#define _GNU_SOURCE
#include "bu_threadpool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Spin rounds before sleeping, adapted per thread between SPIN_MIN and SPIN_MAX (pause hints:
 * 5-55 ns each by CPU: 32 are 0.2-2 us, 2048 are 10-110 us). A wait that ends while spinning
 * doubles the thread's budget; one that has to sleep halves it. On a quiet host the peers arrive
 * within the spin and it stays long (no futex wake-up, ~10-50 us on a VM, on the critical path);
 * on a busy host, where a peer has lost its core to another process, the waits that sleep shrink
 * it within a few barriers to a few microseconds, so the waiting thread yields its core (to that
 * very peer, often) instead of burning a time slice in pause loops, which is what made 2-thread
 * runs fall below 1-thread speed when one core was taken. */
#define SPIN_MIN 32
#define SPIN_MAX 2048
/* this thread's barrier budget. initial-exec: a 4-byte slot of the static TLS block, read without
 * __tls_get_addr, so libmodel.so needs no ld-linux symbol (its NEEDED stays libc and libm, what an
 * exported bundle declares; tests/test_export.py) */
static _Thread_local int t_spin __attribute__((tls_model("initial-exec"))) = SPIN_MAX;

typedef struct {
    bu_pool *p;
    int ith;
} worker_arg;

struct bu_pool {
    /* each hot word on its own cache line */
    _Alignas(64) _Atomic uint32_t job_gen;
    _Alignas(64) _Atomic uint32_t bar_arrived;
    _Alignas(64) _Atomic uint32_t bar_phase;
    _Alignas(64) _Atomic int32_t sleepers;
    _Atomic int32_t stop;
    _Alignas(64) int nth;
    int started;                    /* workers created */
    bu_pool_fn fn;                  /* the current job, written by thread 0 before job_gen */
    void *arg;
    pthread_t th[BU_POOL_MAX_THREADS];
    worker_arg wa[BU_POOL_MAX_THREADS];
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void futex_wait(_Atomic uint32_t *w, uint32_t old)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, old, NULL, NULL, 0);
}

/* Return once *w != old (acquire). `budget`: the spin rounds, adapted by the outcome (a barrier's
 * t_spin), or NULL for SPIN_MAX unadapted (a worker awaiting the next job: between decode steps
 * it usually sleeps, which says nothing about the peers' arrival at barriers). */
static void wait_change(bu_pool *p, _Atomic uint32_t *w, uint32_t old, int *budget)
{
    const int spin = budget ? *budget : SPIN_MAX;
    for (int i = 0; i < spin; i++) {
        if (atomic_load_explicit(w, memory_order_acquire) != old) {
            if (budget && *budget < SPIN_MAX) *budget *= 2;
            return;
        }
        cpu_relax();
    }
    if (budget && *budget > SPIN_MIN) *budget /= 2;
    atomic_fetch_add(&p->sleepers, 1);
    while (atomic_load(w) == old) futex_wait(w, old);
    atomic_fetch_sub(&p->sleepers, 1);
}

/* After a sequentially consistent change of *w: wake its sleepers, if any thread sleeps. */
static void wake(bu_pool *p, _Atomic uint32_t *w)
{
    if (atomic_load(&p->sleepers) > 0) syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

void bu_pool_barrier(bu_pool *p)
{
    if (p->nth < 2) return;
    /* the phase cannot move before this thread arrives, so this is the barrier's own phase */
    uint32_t ph = atomic_load_explicit(&p->bar_phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&p->bar_arrived, 1, memory_order_acq_rel) == (uint32_t)p->nth - 1) {
        /* last to arrive: reset the count (nobody can arrive again before the phase moves) */
        atomic_store_explicit(&p->bar_arrived, 0, memory_order_relaxed);
        atomic_store(&p->bar_phase, ph + 1);
        wake(p, &p->bar_phase);
    } else {
        wait_change(p, &p->bar_phase, ph, &t_spin);
    }
}

static void *worker_main(void *a)
{
    bu_pool *p = ((worker_arg *)a)->p;
    int ith = ((worker_arg *)a)->ith;
    uint32_t seen = 0;
    for (;;) {
        wait_change(p, &p->job_gen, seen, NULL);
        seen = atomic_load_explicit(&p->job_gen, memory_order_acquire);
        if (atomic_load(&p->stop)) break;
        p->fn(p->arg, ith, p->nth);
        /* the job's closing barrier: thread 0 returns from bu_pool_run only after it */
        bu_pool_barrier(p);
    }
    return NULL;
}

void bu_pool_run(bu_pool *p, bu_pool_fn fn, void *arg)
{
    p->fn = fn;
    p->arg = arg;
    atomic_fetch_add(&p->job_gen, 1);
    wake(p, &p->job_gen);
    fn(arg, 0, p->nth);
    bu_pool_barrier(p);
}

void bu_pool_stop(bu_pool *p)
{
    if (!p) return;
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->job_gen, 1);
    wake(p, &p->job_gen);
    for (int i = 0; i < p->started; i++) pthread_join(p->th[i], NULL);
    free(p);
}

int bu_pool_start(int n_threads, bu_pool **out)
{
    *out = NULL;
    if (n_threads < 2 || n_threads > BU_POOL_MAX_THREADS) return -1;
    void *mem = NULL;
    if (posix_memalign(&mem, 64, sizeof(bu_pool)) != 0) return -1;
    bu_pool *p = memset(mem, 0, sizeof(bu_pool));
    p->nth = n_threads;
    for (int i = 0; i < n_threads - 1; i++) {
        p->wa[i].p = p;
        p->wa[i].ith = i + 1;
        if (pthread_create(&p->th[i], NULL, worker_main, &p->wa[i]) != 0) break;
        p->started++;
    }
    if (p->started != n_threads - 1) {
        bu_pool_stop(p);
        return -1;
    }
    *out = p;
    return 0;
}

int bu_cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
