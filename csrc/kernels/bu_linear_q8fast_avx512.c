/*
 * bu_linear_q8fast_avx512.c - the avx512 level of the ggml-q8 fast providers on a CPU with
 * AVX-512 VNNI: the AVX2 level's code with each 4-product integer sum formed by _mm256_dpbusd_epi32
 * (VNNI on 256-bit registers, AVX-512 VL) instead of maddubs + madd, and the sub-block scale applied
 * by an int32 multiply. The int32 lanes are the same integers, so this level gives the AVX2
 * level's bits (contract "q8lanes8fma", bu_q8fast.h). Compiled for the avx512 level + VNNI by the
 * pragma below; bu_linear_q8fast.c calls it only when CPUID reports avx512vnni.
 */
#ifdef BU_EMULATE_AVX512
#include "bu_avx512_emulated.h" /* test builds only */
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#endif

#define BU_Q8FAST_VNNI 1
#define BU_Q8FAST_ENTRY bu__q8fast_avx512
#include "bu_q8fast_body.h"
