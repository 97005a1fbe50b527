/*
 * bu_glu_fast.c - swiglu.f32.fast and geglu.f32.fast: the dispatched GLU gates. The reference's
 * checks (bu__ew_check), then the ISA level chosen when the library loaded (bu_cpu.c; BU_ISA forces
 * one): scalar = the reference providers (same bits), avx2 / avx512 = bu_glu_avx2.c (within the bound
 * of their kernel maps); an invalid level returns -2 with nothing written.
 */
#include "bu_elementwise.h"
#include "bu_fast.h"

__attribute__((visibility("hidden"))) void bu__swiglu_avx2(const float *gate, const float *up, float *y, size_t cnt);
__attribute__((visibility("hidden"))) void bu__geglu_avx2(const float *gate, const float *up, float *y, size_t cnt);

typedef int (*bu_glu_ref)(const float *, const float *, float *, int64_t, int64_t, void *, size_t);
typedef void (*bu_glu_simd)(const float *, const float *, float *, size_t);

static int glu(bu_glu_ref ref, bu_glu_simd simd, const float *gate, const float *up, float *y, int64_t n_tokens,
               int64_t n, void *ws, size_t ws_cap) {
    size_t cnt;
    const int st = bu__ew_check(2, gate, up, y, n_tokens, n, sizeof(float), Y_MAY_ALIAS, &cnt);
    if (st) return st < 0 ? st : BU_OK;
    const int level = bu__isa_level();
    if (level == BU_ISA_INVALID) return BU_ERR_ARG;
    if (level == BU_ISA_SCALAR) return ref(gate, up, y, n_tokens, n, ws, ws_cap);
    simd(gate, up, y, cnt);
    return BU_OK;
}

int bu_swiglu_f32_fast(const float *gate, const float *up, float *y, int64_t n_tokens, int64_t n, void *ws,
                       size_t ws_cap) {
    return glu(bu_swiglu_f32_scalar, bu__swiglu_avx2, gate, up, y, n_tokens, n, ws, ws_cap);
}

int bu_geglu_f32_fast(const float *gate, const float *up, float *y, int64_t n_tokens, int64_t n, void *ws,
                      size_t ws_cap) {
    return glu(bu_geglu_f32_scalar, bu__geglu_avx2, gate, up, y, n_tokens, n, ws, ws_cap);
}
