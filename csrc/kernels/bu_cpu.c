/*
 * bu_cpu.c - the ISA level of the dispatched ("fast") kernels, chosen once when the library loads.
 *
 * One binary runs on any x86-64: the SIMD variants are compiled with per-file target pragmas
 * (bu_linear_fast_avx2.c, bu_linear_fast_avx512.c) and only called when CPUID says the host has
 * them. Levels (docs/kernels.md, "ISA levels"):
 *   scalar  the reference providers (no SIMD requirement),
 *   avx2    AVX2 + FMA + F16C,
 *   avx512  the avx2 level plus AVX-512 F, BW and VL.
 * The best level the host has is the default (and the highest a call may use); with both avx2 and
 * avx512, each class of linear call runs the one measured faster (below). Unless the environment
 * variable BU_ISA names one
 * (scalar | avx2 | avx512): then exactly that level is used, and a level the host lacks, or an
 * unknown name, is an error (bu_isa_check gives the message; the fast kernels return BU_ERR_ARG),
 * never a silent fallback. __builtin_cpu_supports also checks that the OS saves the wider
 * registers (XCR0), so a level is only chosen when it can run.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include "bu_fast.h"
#include "bu_isa_cache.h"

static int g_level = BU_ISA_INVALID;
static int g_forced; /* BU_ISA named the level: no measuring */
static char g_error[160];

static int host_level(void) {
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")))
        return BU_ISA_SCALAR;
#ifdef BU_EMULATE_AVX512
    return BU_ISA_AVX512; /* test builds: the avx512 files run on SIMDe (bu_avx512_emulated.h) */
#endif
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return BU_ISA_AVX512;
    return BU_ISA_AVX2;
}

static const char *const NAMES[] = {"scalar", "avx2", "avx512"};

/* ---- the level of each linear op class, by measurement (docs/kernels.md, "Dispatch by measurement") ----
 *
 * The avx2 and avx512 levels share one contract (lanes16fma: the same bits), so which of them runs
 * a call is a speed question only, and CPUID cannot answer it (AVX-512 frequency licences, a VM's
 * vector units, memory-bound decode against compute-bound prefill: on an Ice Lake Xeon the avx512
 * decode measured 1.3-5x slower than avx2 while its prefill was faster). So when the host has both
 * and BU_ISA forces neither, each class of call - (weight format, n_in, decode or prefill) - is
 * calibrated on its own first real calls: they alternate between the two levels, each timed
 * (CLOCK_MONOTONIC, per output row and token). The stop rule: once each level has at least
 * PICK_MIN timed calls, the class is decided as soon as the middle halves of the two levels'
 * times no longer overlap (the faster level's third quartile below the slower's first); at
 * PICK_MAX calls each it is decided anyway. Either way the level with the lower first quartile
 * of its times wins (quartile1, below; when the middle halves overlap the two are close, and
 * either choice costs little). The chosen level serves every later call of the class.
 * Calibrating on the program's own calls measures the op's real shape at the thread count and
 * load in use. Decided classes are kept per host and library (bu_isa_cache.c), so a later process
 * starts from them instead of measuring again. Since both levels give the same bits, the choice -
 * and the calibration itself - never changes a result. bu_isa_report lists every class: the
 * level, why, where the choice came from, and the quartiles. */
#define PICK_SLOTS BU_ISA_CACHE_MAX /* classes tracked; a model has ~10. Past that: the default level, reported */
#define PICK_MAX 64 /* the most timed calls per level a class can hold */
/* [decode, prefill]: timed calls per level before the stop rule applies, and the most. Prefill
 * calls are 100-1000x longer and fewer (a class sees ~6 ops x threads per layer, ~180 per prompt
 * for smollm2); with 4 per level and the median, a loaded host (load 11-13 on 2 CPUs) picked the
 * slower level for 3 of 20 one-thread class choices, with 8-24 and the quartile for 0 of 20
 * (docs/kernels.md). */
static const int PICK_MIN_N[2] = {16, 8}, PICK_MAX_N[2] = {48, 24};

typedef struct {
    _Atomic uint64_t key;      /* 0 = free; else class_key(): type, phase, activations, team size, n_in */
    _Atomic int64_t calls;     /* calls of the class so far (the calibration's turn counter) */
    _Atomic int32_t recorded;  /* timed calls written to ns[][] */
    _Atomic int32_t chosen;    /* 0 while calibrating; else 1 + the level */
    _Atomic int32_t deciding;  /* a thread is applying the stop rule */
    _Atomic uint32_t ns[2][PICK_MAX]; /* [avx2, avx512]: float bits of ns per output row and token; 0 = not yet */
    int from_cache, separated, n[2];  /* written before `chosen` */
    float q1[2];
} pick_slot;

static pick_slot g_pick[PICK_SLOTS];

static int slot_phase(pick_slot *s) {
    return (int)((atomic_load_explicit(&s->key, memory_order_relaxed) - 1) >> 8 & 1);
}
static _Atomic int32_t g_pick_full; /* a class found no free slot: it ran the default level */

#ifdef BU_TEST_HOOKS
/* Test builds only (kernel_lib TEST_HOOK_FLAGS): BU_TEST_SLOW_LEVEL=<level> makes every call at
 * that level 2 ms slower (a busy wait; more than SIMDe's emulated avx512 costs on the tests'
 * shapes), so a test can see the calibration avoid it. */
static int g_slow_level = BU_ISA_INVALID;
static void test_hooks_init(void) {
    const char *s = getenv("BU_TEST_SLOW_LEVEL");
    for (int l = BU_ISA_SCALAR; s && l <= BU_ISA_AVX512; l++)
        if (strcmp(s, NAMES[l]) == 0) g_slow_level = l;
}
#endif

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static pick_slot *pick_slot_of(uint64_t key) {
    const unsigned h = (unsigned)((key * 0x9E3779B97F4A7C15ull) >> 57) % PICK_SLOTS;
    for (unsigned i = 0; i < PICK_SLOTS; i++) {
        pick_slot *s = &g_pick[(h + i) % PICK_SLOTS];
        uint64_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (k == key) return s;
        if (k == 0) {
            uint64_t expect = 0;
            if (atomic_compare_exchange_strong(&s->key, &expect, key) || expect == key) return s;
        }
    }
    atomic_store(&g_pick_full, 1);
    return NULL;
}

static void sort(float *a, int n) {
    for (int i = 1; i < n; i++) /* insertion sort: n <= PICK_MAX */
        for (int j = i; j > 0 && a[j - 1] > a[j]; j--) {
            const float t = a[j];
            a[j] = a[j - 1];
            a[j - 1] = t;
        }
}

/* The first quartile of sorted a[0..n): the statistic a level is judged by. Another process taking
 * the core only ever adds time to a call, so the lower part of the times is the op's own cost; the
 * quartile rather than the minimum, so that one lucky reading cannot decide. */
static float quartile1(const float *a, int n) { return a[(n - 1) / 4]; }

static void cache_save_all(void);

/* Applies the stop rule to the samples written so far (the caller holds s->deciding); `last`: all
 * PICK_MAX_N are in, decide by the first quartiles even where the middle halves overlap. */
static void decide(pick_slot *s, int last) {
    if (atomic_load_explicit(&s->chosen, memory_order_acquire)) return;
    const int ph = slot_phase(s);
    float a[2][PICK_MAX];
    int n[2] = {0, 0};
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < PICK_MAX_N[ph]; i++) {
            const uint32_t b = atomic_load(&s->ns[l][i]);
            if (b) memcpy(&a[l][n[l]++], &b, sizeof b);
        }
    if (n[0] < PICK_MIN_N[ph] || n[1] < PICK_MIN_N[ph]) return;
    sort(a[0], n[0]);
    sort(a[1], n[1]);
    const float m0 = quartile1(a[0], n[0]), m1 = quartile1(a[1], n[1]);
    const int fast = m1 < m0, slow = !fast;
    const int separated = a[fast][3 * n[fast] / 4] < a[slow][n[slow] / 4];
    if (!separated && !last) return;
    s->q1[0] = m0;
    s->q1[1] = m1;
    s->n[0] = n[0];
    s->n[1] = n[1];
    s->separated = separated;
    atomic_store_explicit(&s->chosen, 1 + (fast ? BU_ISA_AVX512 : BU_ISA_AVX2), memory_order_release);
    cache_save_all();
}

/* The size of the team the calling thread belongs to (bu_isa_set_team): part of every class, since
 * which level is faster depends on how many threads share the memory bus (a memory-bound decode
 * at 2 threads is not the decode at 1). initial-exec: no __tls_get_addr, so libmodel.so needs no
 * ld-linux symbol (bu_threadpool.c's t_spin likewise). */
static _Thread_local int t_team __attribute__((tls_model("initial-exec"))) = 1;

void bu_isa_set_team(int n_threads) { t_team = n_threads < 1 ? 1 : n_threads > 256 ? 256 : n_threads; }

/* A class's key (never 0): bits 0-7 the GGML type, 8 prefill, 9 q8 activations, 10-17 the team size
 * - 1, 18.. n_in (bu_isa_cache.c checks this layout when it reads a key back). */
static uint64_t class_key(int32_t type, int q8act, int64_t n_tokens, int64_t n_in) {
    return 1 + ((uint64_t)(uint8_t)type | (uint64_t)(n_tokens > 1) << 8 | (uint64_t)q8act << 9 |
                (uint64_t)(t_team - 1) << 10 | (uint64_t)n_in << 18);
}

static int pick(int32_t type, int q8act, int64_t n_tokens, int64_t n_in, bu_isa_turn *turn) {
    if (g_forced || g_level != BU_ISA_AVX512) return g_level; /* one candidate: nothing to measure */
    pick_slot *s = pick_slot_of(class_key(type, q8act, n_tokens, n_in));
    if (!s) return g_level;
    const int32_t c = atomic_load_explicit(&s->chosen, memory_order_acquire);
    if (c) return c - 1;
    const int64_t i = atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
    if (i >= 2 * PICK_MAX_N[slot_phase(s)]) return g_level; /* all turns taken: the last timed calls are finishing */
    turn->slot = s;
    turn->cand = (int)(i & 1);
    turn->idx = (int)(i >> 1);
    turn->t0 = now_ns();
    return turn->cand ? BU_ISA_AVX512 : BU_ISA_AVX2;
}

int bu__isa_pick(int32_t type, int q8act, int64_t n_tokens, int64_t n_in, bu_isa_turn *turn) {
    turn->slot = NULL;
    turn->level = pick(type, q8act, n_tokens, n_in, turn);
    return turn->level;
}

void bu__isa_pick_done(const bu_isa_turn *turn, int64_t units) {
#ifdef BU_TEST_HOOKS
    if (turn->level == g_slow_level)
        for (const double t = now_ns(); now_ns() - t < 2e6;) {
        }
#endif
    pick_slot *s = turn->slot;
    if (!s) return;
    float ns = (float)((now_ns() - turn->t0) / (double)(units > 0 ? units : 1));
    uint32_t bits;
    if (!(ns > 0)) ns = 1e-3f; /* a zero-length reading still counts as written */
    memcpy(&bits, &ns, sizeof bits);
    atomic_store(&s->ns[turn->cand][turn->idx], bits);
    const int ph = slot_phase(s), r = atomic_fetch_add(&s->recorded, 1) + 1;
    if (r == 2 * PICK_MAX_N[ph]) { /* the last timed call: every sample is written; it must decide */
        while (atomic_exchange(&s->deciding, 1)) sched_yield(); /* another thread is trying the rule */
        decide(s, 1);
        atomic_store(&s->deciding, 0);
    } else if (r >= 2 * PICK_MIN_N[ph] && !atomic_exchange(&s->deciding, 1)) {
        decide(s, 0);
        atomic_store(&s->deciding, 0);
    }
}

/* Every decided class to the cache file. Lock-free: whoever finds the writer busy leaves `dirty`
 * set, and the writer loops until it finds it clear (so the last decision is always written). */
static void cache_save_all(void) {
    static _Atomic int dirty, writing;
    atomic_store(&dirty, 1);
    while (atomic_load(&dirty) && !atomic_exchange(&writing, 1)) {
        atomic_store(&dirty, 0);
        static bu_isa_cached out[PICK_SLOTS];
        int n = 0;
        for (int i = 0; i < PICK_SLOTS; i++) {
            pick_slot *s = &g_pick[i];
            const int32_t c = atomic_load_explicit(&s->chosen, memory_order_acquire);
            if (!c) continue;
            out[n++] = (bu_isa_cached){atomic_load(&s->key), c - 1, {s->n[0], s->n[1]}, {s->q1[0], s->q1[1]}};
        }
        bu__isa_cache_save(out, n);
        atomic_store(&writing, 0);
    }
}

/* The decided classes of this host's and library's cache file into their slots. */
static void cache_load_all(void) {
    static bu_isa_cached in[PICK_SLOTS];
    const char *state;
    const int n = bu__isa_cache_load(in, &state);
    for (int i = 0; i < n; i++) {
        pick_slot *s = pick_slot_of(in[i].key);
        if (!s) break;
        s->q1[0] = in[i].q1[0];
        s->q1[1] = in[i].q1[1];
        s->n[0] = in[i].n[0];
        s->n[1] = in[i].n[1];
        s->from_cache = 1;
        atomic_store_explicit(&s->chosen, 1 + in[i].level, memory_order_release);
    }
}

#define BU_TYPE_NAME(NAME, name, VD, vd) [BU_TYPE_##NAME] = #NAME,
static const char *type_name(uint32_t t) {
    static const char *const N[BU_TYPE_ID_MAX + 1] = {BU_DOT_FORMATS(BU_TYPE_NAME)};
    return t <= BU_TYPE_ID_MAX && N[t] ? N[t] : "?";
}

/* appends to buf[*at..cap) like snprintf; *at counts what was wanted, so an overflow is seen */
static void put(char *buf, size_t cap, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t cap, size_t *at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(*at < cap ? buf + *at : NULL, *at < cap ? cap - *at : 0, fmt, ap);
    va_end(ap);
    if (n > 0) *at += (size_t)n;
}

size_t bu_isa_report(char *buf, size_t cap) {
    size_t at = 0;
    const char *mode = g_level == BU_ISA_INVALID ? "invalid" : g_forced ? "forced by BU_ISA"
                       : g_level == BU_ISA_AVX512 ? "measured per class (avx2, avx512)" : "the only level of its contract";
    put(buf, cap, &at, "{\"default\": \"%s\", \"how\": \"%s\", \"classes_overflowed\": %s, \"classes\": [",
        bu_isa_name(), mode, atomic_load(&g_pick_full) ? "true" : "false");
    int first = 1;
    for (int i = 0; i < PICK_SLOTS; i++) {
        pick_slot *s = &g_pick[i];
        const uint64_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (!k) continue;
        const uint64_t v = k - 1;
        const int32_t c = atomic_load_explicit(&s->chosen, memory_order_acquire);
        put(buf, cap, &at, "%s{\"format\": \"%s\", \"activations\": \"%s\", \"n_in\": %llu, \"phase\": \"%s\", "
            "\"threads\": %d, ", first ? "" : ", ", type_name((uint32_t)(v & 0xff)), (v >> 9 & 1) ? "q8" : "f32",
            (unsigned long long)(v >> 18), (v >> 8 & 1) ? "prefill" : "decode", (int)(v >> 10 & 0xff) + 1);
        if (c)
            put(buf, cap, &at, "\"level\": \"%s\", \"source\": \"%s\", \"why\": \"%s\", "
                "\"samples\": {\"avx2\": %d, \"avx512\": %d}, \"ns_per_row\": {\"avx2\": %.4g, \"avx512\": %.4g}}",
                NAMES[c - 1], s->from_cache ? "cache" : "measured",
                s->from_cache  ? "lower first quartile, measured by an earlier process on this host and library"
                : s->separated ? "lower first quartile; the middle halves of the two levels' times do not overlap"
                               : "lower first quartile after the most timed calls; the middle halves overlap (a close call)",
                s->n[0], s->n[1], s->q1[0], s->q1[1]);
        else
            put(buf, cap, &at, "\"level\": null, \"source\": null, \"why\": \"calibrating: %d timed calls of at most %d\"}",
                (int)atomic_load(&s->recorded), 2 * PICK_MAX_N[(v >> 8) & 1]);
        first = 0;
    }
    char cache[400];
    bu__isa_cache_info(cache, sizeof cache);
    put(buf, cap, &at, "], %s}", cache);
    return at;
}

/* Runs when the library (libmodel.so, or the kernel test library) is loaded: before any kernel
 * can be called, and once, so every later call sees one fixed level. */
__attribute__((constructor)) static void bu__isa_init(void) {
    const int host = host_level();
    const char *want = getenv("BU_ISA");
#ifdef BU_TEST_HOOKS
    test_hooks_init();
#endif
    const int cache = bu__isa_cache_env();
    if (cache < 0) {
        snprintf(g_error, sizeof g_error, "BU_ISA_CACHE=%.40s is not a setting; use on or off", getenv("BU_ISA_CACHE"));
        g_level = BU_ISA_INVALID;
        return;
    }
    if (!want || !*want) {
        g_level = host;
        if (host == BU_ISA_AVX512) cache_load_all(); /* two candidates: choices to measure, or to reuse */
        return;
    }
    for (int l = BU_ISA_SCALAR; l <= BU_ISA_AVX512; l++) {
        if (strcmp(want, NAMES[l]) != 0) continue;
        if (l > host) {
            snprintf(g_error, sizeof g_error, "BU_ISA=%s: this CPU supports only up to %s", want, NAMES[host]);
            g_level = BU_ISA_INVALID;
        } else {
            g_level = l;
            g_forced = 1;
        }
        return;
    }
    snprintf(g_error, sizeof g_error, "BU_ISA=%.40s is not an ISA level; use scalar, avx2 or avx512", want);
    g_level = BU_ISA_INVALID;
}

int bu__isa_level(void) { return g_level; }

const char *bu_isa_name(void) { return g_level == BU_ISA_INVALID ? "invalid" : NAMES[g_level]; }

int bu_isa_check(char *err, size_t cap) {
    if (g_level != BU_ISA_INVALID) return BU_OK;
    if (err && cap) snprintf(err, cap, "%s", g_error[0] ? g_error : "ISA level not initialised");
    return BU_ERR_ARG;
}
