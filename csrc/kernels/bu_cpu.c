/*
 * bu_cpu.c - the ISA level of the dispatched ("fast") kernels, chosen once when the library loads.
 *
 * One binary runs on any x86-64: the SIMD variants are compiled with per-file target pragmas
 * (bu_linear_fast_avx2.c, bu_linear_fast_avx512.c) and only called when CPUID says the host has
 * them. Levels (docs/kernels.md, "ISA levels"):
 *   scalar  the reference providers (no SIMD requirement),
 *   avx2    AVX2 + FMA + F16C,
 *   avx512  the avx2 level plus AVX-512 F, BW and VL.
 * The best level the host has is chosen, unless the environment variable BU_ISA names one
 * (scalar | avx2 | avx512): then exactly that level is used, and a level the host lacks, or an
 * unknown name, is an error (bu_isa_check gives the message; the fast kernels return BU_ERR_ARG),
 * never a silent fallback. __builtin_cpu_supports also checks that the OS saves the wider
 * registers (XCR0), so a level is only chosen when it can run.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bu_fast.h"

static int g_level = BU_ISA_INVALID;
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

/* Runs when the library (libmodel.so, or the kernel test library) is loaded: before any kernel
 * can be called, and once, so every later call sees one fixed level. */
__attribute__((constructor)) static void bu__isa_init(void) {
    const int host = host_level();
    const char *want = getenv("BU_ISA");
    if (!want || !*want) {
        g_level = host;
        return;
    }
    for (int l = BU_ISA_SCALAR; l <= BU_ISA_AVX512; l++) {
        if (strcmp(want, NAMES[l]) != 0) continue;
        if (l > host) {
            snprintf(g_error, sizeof g_error, "BU_ISA=%s: this CPU supports only up to %s", want, NAMES[host]);
            g_level = BU_ISA_INVALID;
        } else {
            g_level = l;
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
