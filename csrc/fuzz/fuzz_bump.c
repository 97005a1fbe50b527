/* libFuzzer target: the BUMP reader (csrc/runtime/bu_bump.c) on arbitrary file contents.
 *
 * bu_bump_open reads a path, so each input is written to one memfd (a regular file in memory,
 * opened again through /proc/self/fd) and opened twice:
 *   1. as is: every check of docs/bump_format.md "Reader checks" runs on hostile bytes; a mutated
 *      file almost never carries matching SHA-256s, so this pass ends at the hash checks;
 *   2. with the file size, payload size and both SHA-256 fields made to match the input (when the
 *      header's regions lie inside it),
 *      so that structurally valid mutations open successfully and every tensor's data pointer is
 *      then read end to end: a pointer outside the mapping is an ASan/SEGV crash.
 * A successful open must satisfy the reader's promises (asserted, abort = crash): tensors in
 * bounds of the payload, 64-byte aligned, sorted and disjoint, found by name, and of exactly the
 * size their type and shape need (computed here in 128-bit arithmetic).
 *
 * Built by tests/fuzz/run.py with clang -fsanitize=fuzzer,address,undefined; not part of any
 * binary of the pipeline (bringup.build.sources.FUZZ).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bu_bump.h"
#include "bu_common.h"
#include "bu_formats.h"
#include "bu_sha256.h"

static int g_fd = -1;
static char g_path[64];

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_bump: broken reader promise: %s\n", what);
        abort();
    }
}

/* Replace the file's contents by data[0..n). */
static void put_file(const uint8_t *data, size_t n)
{
    if (g_fd < 0) {
        g_fd = memfd_create("fuzz_bump", MFD_CLOEXEC);
        if (g_fd < 0) { perror("memfd_create"); abort(); }
        snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
    }
    if (ftruncate(g_fd, 0) != 0 || (n && pwrite(g_fd, data, n, 0) != (ssize_t)n)) { perror("memfd write"); abort(); }
}

static volatile uint8_t g_sink;

static void open_and_use(int verify_payload)
{
    bu_bump *b = NULL;
    char err[512];
    int rc = bu_bump_open(g_path, verify_payload, &b, err, sizeof err);
    if (rc != BU_BUMP_OK) {
        check(b == NULL, "failed open leaves *out NULL");
        check(err[0] != 0 && memchr(err, '\n', strlen(err)) == NULL, "failed open gives a one-line message");
        return;
    }
    check(b != NULL, "successful open gives a reader");
    uint64_t prev_end = 0;
    for (uint64_t i = 0; i < b->n_tensors; i++) {
        const bu_bump_tensor *t = &b->tensors[i];
        check(t->offset % BU_ALIGN == 0 && t->offset >= prev_end, "tensors aligned, sorted, disjoint");
        check(t->offset + t->size <= b->payload_size, "tensor inside the payload");
        check(bu_bump_find(b, t->name) != NULL, "every tensor is found by its name");
        /* the size its type and shape need, in 128-bit arithmetic (no wrap possible) */
        uint64_t be, bb;
        check(bu_format_block(t->ggml_type, &be, &bb) && t->shape[0] % be == 0, "known type, whole blocks");
        unsigned __int128 need = (unsigned __int128)(t->shape[0] / be) * bb;
        for (int d = 1; d < 4 && need <= UINT64_MAX; d++) need *= t->shape[d];
        check(need == t->size, "size == shape x block bytes, exactly");
        const uint8_t *p = t->data;
        uint8_t acc = 0;
        for (uint64_t k = 0; k < t->size; k++) acc ^= p[k];
        g_sink = acc;
        prev_end = t->offset + t->size;
    }
    check(bu_bump_find(b, "no.such.tensor") == NULL || b->n_tensors > 0, "find on an empty table");
    bu_bump_close(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    put_file(data, n);
    open_and_use(1);
    if (n < BU_BUMP_HEADER_BYTES || n > (64u << 20)) return 0;

    /* pass 2: the same bytes with the header's file size, payload size and two SHA-256 fields
     * made to match, so that mutations that move or resize regions reach the table checks */
    uint64_t meta_off = bu_rd_u64(data + 16), pay_off = bu_rd_u64(data + 48);
    if (meta_off > pay_off || pay_off > n) return 0;
    uint8_t *copy = malloc(n);
    if (!copy) abort();
    memcpy(copy, data, n);
    for (int k = 0; k < 8; k++) {
        copy[8 + k] = (uint8_t)((uint64_t)n >> (8 * k));
        copy[56 + k] = (uint8_t)((n - pay_off) >> (8 * k));
    }
    bu_sha256(copy + meta_off, pay_off - meta_off, copy + 96);
    bu_sha256(copy + pay_off, n - pay_off, copy + 64);
    put_file(copy, n);
    free(copy);
    open_and_use(1);
    return 0;
}
