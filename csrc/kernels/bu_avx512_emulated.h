/*
 * bu_avx512_emulated.h - test builds only: the avx512 files' intrinsics as SIMDe's portable code.
 *
 * A kernel test library compiled with -DBU_EMULATE_AVX512 (bringup.build.kernel_lib
 * AVX512_EMULATION_FLAGS) includes this instead of the files' AVX-512 target pragma: every
 * _mm512_* / VNNI intrinsic is SIMDe's implementation (https://github.com/simd-everywhere/simde,
 * Debian libsimde-dev) on the AVX2 + FMA + F16C level, so the AVX-512 level's code runs, and is
 * checked bit for bit against the AVX2 level, on a host without AVX-512 (tests/test_kernels_fast.py,
 * tests/test_kernels_q8fast.py). It checks the code's arithmetic, not its speed. bu_cpu.c then
 * offers the avx512 level on any AVX2 host. Program builds never define BU_EMULATE_AVX512.
 */
#ifndef BU_AVX512_EMULATED_H
#define BU_AVX512_EMULATED_H

#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

/* SIMDe's FMA without native FMA is a multiply then an add (two roundings): the emulation would
 * then not be the hardware's arithmetic, so refuse to build rather than test something else. */
#if !defined(SIMDE_X86_FMA_NATIVE) || !defined(SIMDE_X86_AVX2_NATIVE) || !defined(SIMDE_X86_F16C_NATIVE)
#error "BU_EMULATE_AVX512 needs SIMDe on native AVX2 + FMA + F16C"
#endif

#endif /* BU_AVX512_EMULATED_H */
