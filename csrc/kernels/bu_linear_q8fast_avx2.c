/*
 * bu_linear_q8fast_avx2.c - the AVX2 level of the ggml-q8 fast providers (bu_linear_q8fast.c):
 * integer dot products by _mm256_maddubs_epi16 + _mm256_madd_epi16, contract "q8lanes8fma"
 * (bu_q8fast.h). Compiled for avx2,fma,f16c by the pragma below; only called when bu_cpu.c chose a
 * level with AVX2 (also the avx512 level of a CPU without AVX-512 VNNI: the same bits).
 */
#pragma GCC target("avx2,fma,f16c")

#define BU_Q8FAST_ENTRY bu__q8fast_avx2
#include "bu_q8fast_body.h"
