/*
 * bu_isa_cache.h - the per-host, per-library file of measured ISA choices (bu_isa_cache.c;
 * docs/kernels.md "The dispatch cache"). Internal to the kernel sources, not part of the ABI.
 */
#ifndef BU_ISA_CACHE_H
#define BU_ISA_CACHE_H

#include <stddef.h>
#include <stdint.h>

#define BU_ISA_CACHE_MAX 128 /* classes in one file (bu_cpu.c PICK_SLOTS) */

/* One decided class: the key of bu_cpu.c's pick slot and what its calibration found. */
typedef struct {
    uint64_t key;    /* 1 + (type | phase << 8 | q8act << 9 | n_in << 10), as bu_cpu.c */
    int level;       /* BU_ISA_AVX2 or BU_ISA_AVX512 */
    int n[2];        /* timed calls at [avx2, avx512] */
    float q1[2];     /* their first quartiles, ns per output row and token */
} bu_isa_cached;

/* BU_ISA_CACHE: 1 unset, empty or "on"; 0 "off"; -1 anything else (an error, as a bad BU_ISA). */
__attribute__((visibility("hidden"))) int bu__isa_cache_env(void);

/* Reads this host's and this library's file into out[0..BU_ISA_CACHE_MAX) and returns the count
 * (0 on a miss, a disabled cache or an ignored file). *state (static text) says which:
 * "hit", "miss", "off (BU_ISA_CACHE=off)", or "ignored: <why>" - an ignored file is also named
 * in one line on stderr. Call once, from the library's constructor. */
__attribute__((visibility("hidden"))) int bu__isa_cache_load(bu_isa_cached *out, const char **state);

/* Writes the n classes atomically (a temporary file in the cache folder, then rename) over the
 * file; a failure is recorded for bu__isa_cache_info and named once on stderr, never fatal. */
__attribute__((visibility("hidden"))) void bu__isa_cache_save(const bu_isa_cached *in, int n);

/* The cache's account for bu_isa_report: a JSON object's members (no braces), escaped. */
__attribute__((visibility("hidden"))) void bu__isa_cache_info(char *buf, size_t cap);

#endif
