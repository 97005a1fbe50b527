/* bu_bandwidth: the host's DRAM read bandwidth, for the bench stage (docs/bench.md).
 *
 *   bu_bandwidth --bytes N --threads T --repeats R
 *
 * Allocates one buffer of N bytes (N should be many times the last-level cache, so every pass
 * streams from DRAM), each of T threads first-touches and then sums its own contiguous slice of
 * it (64-bit integer adds over 16-byte SSE2 loads, four independent accumulators, so the loop is
 * bound by memory, not by a dependency chain), R times. One pass = all T threads reading their
 * slices once, timed by the readers themselves: from the first thread's start to the last thread's
 * end (each reads the clock right before its first load and right after its last). The main
 * thread's own clock after the start barrier is not used: with T = the CPU count it is a (T+1)-th
 * thread that the scheduler can run late, after the readers have begun, which gave 2-thread passes
 * of up to 92 GB/s on a host whose one thread reads 21 GB/s (2026-12-02). Prints one
 * JSON object on stdout: {"threads", "bytes", "repeats", "best_gb_per_s", "median_gb_per_s",
 * "passes_gb_per_s": [...], "checksum"}; GB = 1e9 bytes. The checksum (the sum of every 64-bit
 * word) keeps the compiler from dropping the loads and is checked against the fill pattern.
 *
 * Exit codes (bringup's classes): 0 ok, 2 usage, 5 unavailable (out of memory, no thread). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define MAX_THREADS 1024
#define MAX_REPEATS 1000

typedef struct {
    uint64_t *p;            /* this thread's slice */
    size_t n;               /* 64-bit words in it */
    int repeats;
    pthread_barrier_t *start, *done;
    uint64_t sum;
    double *t_start, *t_end; /* per pass: this thread's clock right before its first load, after its last */
} slice_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sum of the n words at p (n a multiple of 8). */
static uint64_t sum_words(const uint64_t *p, size_t n)
{
#if defined(__SSE2__)
    __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 8) {
        a0 = _mm_add_epi64(a0, _mm_load_si128((const __m128i *)(p + i)));
        a1 = _mm_add_epi64(a1, _mm_load_si128((const __m128i *)(p + i + 2)));
        a2 = _mm_add_epi64(a2, _mm_load_si128((const __m128i *)(p + i + 4)));
        a3 = _mm_add_epi64(a3, _mm_load_si128((const __m128i *)(p + i + 6)));
    }
    uint64_t lanes[2];
    _mm_storeu_si128((__m128i *)lanes, _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3)));
    return lanes[0] + lanes[1];
#else
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < n; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
    }
    return s0 + s1 + s2 + s3;
#endif
}

static void *worker(void *arg)
{
    slice_t *s = arg;
    for (size_t i = 0; i < s->n; i++) s->p[i] = i;  /* first touch: pages land near this thread */
    s->sum = 0;
    for (int r = 0; r < s->repeats; r++) {
        pthread_barrier_wait(s->start);
        s->t_start[r] = now_s();
        s->sum += sum_words(s->p, s->n);
        s->t_end[r] = now_s();
        pthread_barrier_wait(s->done);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int usage(const char *msg)
{
    fprintf(stderr, "bu_bandwidth: %s\nusage: bu_bandwidth --bytes N --threads T --repeats R\n", msg);
    return 2;
}

int main(int argc, char **argv)
{
    unsigned long long bytes = 0;
    long threads = 0, repeats = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: bu_bandwidth --bytes N --threads T --repeats R\n"
                   "DRAM read bandwidth: T threads sum their slices of an N-byte buffer, R passes; JSON on stdout\n");
            return 0;
        }
        if (i + 1 >= argc) return usage("every option takes a value");
        char *end;
        unsigned long long v = strtoull(argv[++i], &end, 10);
        if (*end || end == argv[i]) return usage("values are decimal integers");
        if (!strcmp(a, "--bytes")) bytes = v;
        else if (!strcmp(a, "--threads")) threads = (long)v;
        else if (!strcmp(a, "--repeats")) repeats = (long)v;
        else return usage("unknown option");
    }
    if (threads < 1 || threads > MAX_THREADS) return usage("--threads must be in [1, 1024]");
    if (repeats < 1 || repeats > MAX_REPEATS) return usage("--repeats must be in [1, 1000]");
    /* every slice a whole number of 4 KiB pages (so slices never share a page or a cache line) */
    size_t slice = (size_t)(bytes / (unsigned long long)threads) & ~(size_t)4095;
    if (slice == 0) return usage("--bytes must give every thread at least 4096 bytes");
    size_t total = slice * (size_t)threads;
    uint64_t *buf = NULL;
    if (posix_memalign((void **)&buf, 2u << 20, total)) {
        fprintf(stderr, "bu_bandwidth: cannot allocate %zu bytes\n", total);
        return 5;
    }
#ifdef MADV_HUGEPAGE
    madvise(buf, total, MADV_HUGEPAGE);  /* advice only: fewer TLB misses where THP is enabled */
#endif
    pthread_barrier_t start, done;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&done, NULL, (unsigned)threads + 1);
    slice_t *sl = calloc((size_t)threads, sizeof *sl);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    double *gbps = calloc((size_t)repeats, sizeof *gbps);
    double *clocks = calloc((size_t)threads * (size_t)repeats * 2, sizeof *clocks);
    if (!sl || !tid || !gbps || !clocks) {
        fprintf(stderr, "bu_bandwidth: out of memory\n");
        return 5;
    }
    for (long t = 0; t < threads; t++) {
        double *c = clocks + (size_t)t * (size_t)repeats * 2;
        sl[t] = (slice_t){buf + (size_t)t * (slice / 8), slice / 8, (int)repeats, &start, &done, 0, c, c + repeats};
        if (pthread_create(&tid[t], NULL, worker, &sl[t])) {
            fprintf(stderr, "bu_bandwidth: cannot start thread %ld\n", t);
            return 5;
        }
    }
    for (long r = 0; r < repeats; r++) {
        pthread_barrier_wait(&start);
        pthread_barrier_wait(&done);
        double t0 = sl[0].t_start[r], t1 = sl[0].t_end[r];
        for (long t = 1; t < threads; t++) {
            t0 = sl[t].t_start[r] < t0 ? sl[t].t_start[r] : t0;
            t1 = sl[t].t_end[r] > t1 ? sl[t].t_end[r] : t1;
        }
        gbps[r] = (double)total / (t1 - t0) / 1e9;
    }
    uint64_t sum = 0;
    for (long t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        sum += sl[t].sum;
    }
    /* expected: each slice holds 0..n-1, summed once per pass */
    uint64_t n = slice / 8, want = (uint64_t)repeats * (uint64_t)threads * (n * (n - 1) / 2);
    if (sum != want) {
        fprintf(stderr, "bu_bandwidth: checksum %llu != expected %llu\n", (unsigned long long)sum,
                (unsigned long long)want);
        return 1;
    }
    double *sorted = malloc((size_t)repeats * sizeof *sorted);
    if (!sorted) return 5;
    memcpy(sorted, gbps, (size_t)repeats * sizeof *sorted);
    qsort(sorted, (size_t)repeats, sizeof *sorted, cmp_double);
    double median = repeats % 2 ? sorted[repeats / 2] : 0.5 * (sorted[repeats / 2 - 1] + sorted[repeats / 2]);
    printf("{\"threads\": %ld, \"bytes\": %zu, \"repeats\": %ld, \"best_gb_per_s\": %.4f, "
           "\"median_gb_per_s\": %.4f, \"passes_gb_per_s\": [", threads, total, repeats,
           sorted[repeats - 1], median);
    for (long r = 0; r < repeats; r++) printf("%s%.4f", r ? ", " : "", gbps[r]);
    printf("], \"checksum\": %llu}\n", (unsigned long long)sum);
    free(sorted);
    free(gbps);
    free(clocks);
    free(tid);
    free(sl);
    free(buf);
    return 0;
}
