/*
 * bu_elementwise.h - internal to the elementwise providers (bu_elementwise.c) and the fast GLU
 * providers (bu_glu_fast.c): the shared argument checks.
 */
#ifndef BU_ELEMENTWISE_H
#define BU_ELEMENTWISE_H

#include "bu_internal.h"

/* Aliasing rule of an elementwise op's output. */
enum { Y_DISJOINT = 0, Y_MAY_ALIAS = 1 };

/* Common checks for an op with inputs a and (when n_in == 2) b and output y, all [n_tokens, n] of
 * `elem` bytes: dims (-2), NULLs (-1), aliasing (-2: y may be exactly an input when `alias` is
 * Y_MAY_ALIAS, otherwise must be disjoint). Returns 1 when there is nothing to do, 0 to proceed,
 * or a BU_ERR_* code; *count = elements. */
__attribute__((visibility("hidden"))) int bu__ew_check(int n_in, const void *a, const void *b, const void *y,
                                                       int64_t n_tokens, int64_t n, size_t elem, int alias,
                                                       size_t *count);

#endif /* BU_ELEMENTWISE_H */
