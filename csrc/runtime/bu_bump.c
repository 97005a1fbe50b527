/* C reader of BUMP v1; see bu_bump.h and docs/bump_format.md (the checks below follow its
 * "Reader checks" list, in order). */
#define _POSIX_C_SOURCE 200809L
#include "bu_bump.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bu_common.h"
#include "bu_formats.h"
#include "bu_sha256.h"

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

int bu_format_block(uint32_t ggml_type, uint64_t *block_elems, uint64_t *block_bytes)
{
    switch (ggml_type) {
#define BU_FORMAT_CASE(name, type, elems, bytes) \
    case type: *block_elems = elems; *block_bytes = bytes; return 1;
        BU_FORMATS(BU_FORMAT_CASE)
#undef BU_FORMAT_CASE
    default: return 0;
    }
}

static int name_ok(const uint8_t *p, char *out)
{
    size_t n = 0;
    while (n < BU_BUMP_NAME_BYTES && p[n]) {
        uint8_t c = p[n];
        int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
        if (!ok) return 0;
        n++;
    }
    if (n == 0 || n >= BU_BUMP_NAME_BYTES) return 0;      /* empty, or no NUL in 96 bytes */
    if (!all_zero(p + n, BU_BUMP_NAME_BYTES - n)) return 0; /* padding must be NUL */
    memcpy(out, p, n);
    out[n] = 0;
    return 1;
}

static int parse_table(bu_bump *b, char *err, size_t cap)
{
    const uint8_t *tab = b->map + b->table_offset;
    uint64_t prev_end = 0;
    for (uint64_t i = 0; i < b->n_tensors; i++) {
        const uint8_t *e = tab + i * BU_BUMP_ENTRY_BYTES;
        bu_bump_tensor *t = &b->tensors[i];
        if (!name_ok(e, t->name))
            return bu_errf(err, cap, BU_BUMP_ERR_FORMAT,
                        "BUMP tensor %llu: name is not [A-Za-z0-9_.]{1,95} NUL-padded", (unsigned long long)i);
        t->ggml_type = bu_rd_u32(e + 96);
        t->n_dims = bu_rd_u32(e + 100);
        for (int d = 0; d < 4; d++) t->shape[d] = bu_rd_u64(e + 104 + 8 * d);
        t->offset = bu_rd_u64(e + 136);
        t->size = bu_rd_u64(e + 144);
        if (bu_rd_u64(e + 152) != 0)
            return bu_errf(err, cap, BU_BUMP_ERR_FORMAT, "BUMP tensor %s: reserved field is not zero", t->name);
        uint64_t be, bb;
        if (!bu_format_block(t->ggml_type, &be, &bb))
            return bu_errf(err, cap, BU_BUMP_ERR_FORMAT, "BUMP tensor %s: unknown GGML type id %u",
                        t->name, t->ggml_type);
        if (t->n_dims < 1 || t->n_dims > 4)
            return bu_errf(err, cap, BU_BUMP_ERR_FORMAT, "BUMP tensor %s: n_dims %u not in 1..4", t->name, t->n_dims);
        uint64_t rows = 1;
        for (uint32_t d = 0; d < 4; d++) {
            if (d >= t->n_dims && t->shape[d] != 1)
                return bu_errf(err, cap, BU_BUMP_ERR_FORMAT, "BUMP tensor %s: unused dim %u is %llu, not 1",
                            t->name, d, (unsigned long long)t->shape[d]);
            if (t->shape[d] == 0)
                return bu_errf(err, cap, BU_BUMP_ERR_FORMAT, "BUMP tensor %s: dim %u is 0", t->name, d);
            if (d > 0 && __builtin_mul_overflow(rows, t->shape[d], &rows))
                return bu_errf(err, cap, BU_BUMP_ERR_FORMAT, "BUMP tensor %s: shape overflows", t->name);
        }
        if (t->shape[0] % be)
            return bu_errf(err, cap, BU_BUMP_ERR_FORMAT,
                        "BUMP tensor %s: row length %llu is not a multiple of the block size %llu",
                        t->name, (unsigned long long)t->shape[0], (unsigned long long)be);
        uint64_t want, row_bytes;
        /* both products checked: a row length near 2^64 must not wrap to a small size (fuzzing) */
        if (__builtin_mul_overflow(t->shape[0] / be, bb, &row_bytes) || __builtin_mul_overflow(row_bytes, rows, &want))
            return bu_errf(err, cap, BU_BUMP_ERR_FORMAT, "BUMP tensor %s: size overflows", t->name);
        if (t->size != want)
            return bu_errf(err, cap, BU_BUMP_ERR_FORMAT, "BUMP tensor %s: size %llu, but its type and shape need %llu",
                        t->name, (unsigned long long)t->size, (unsigned long long)want);
        if (t->offset % BU_ALIGN)
            return bu_errf(err, cap, BU_BUMP_ERR_FORMAT, "BUMP tensor %s: offset %llu is not %d-aligned",
                        t->name, (unsigned long long)t->offset, BU_ALIGN);
        if (t->offset < prev_end)
            return bu_errf(err, cap, BU_BUMP_ERR_FORMAT,
                        "BUMP tensor %s: offset %llu overlaps the previous tensor (ends at %llu) or is out of order",
                        t->name, (unsigned long long)t->offset, (unsigned long long)prev_end);
        if (t->offset > b->payload_size || t->size > b->payload_size - t->offset)
            return bu_errf(err, cap, BU_BUMP_ERR_FORMAT, "BUMP tensor %s: [%llu, +%llu) lies outside the payload (%llu bytes)",
                        t->name, (unsigned long long)t->offset, (unsigned long long)t->size,
                        (unsigned long long)b->payload_size);
        prev_end = t->offset + t->size;
        t->data = b->map + b->payload_offset + t->offset;
    }
    return BU_BUMP_OK;
}

static int check_header(bu_bump *b, char *err, size_t cap)
{
    const uint8_t *h = b->map;
    if (memcmp(h, BU_BUMP_MAGIC, 4) != 0)
        return bu_errf(err, cap, BU_BUMP_ERR_FORMAT, "not a BUMP file (bad magic)");
    b->version = bu_rd_u32(h + 4);
    if (b->version != BU_BUMP_VERSION)
        return bu_errf(err, cap, BU_BUMP_ERR_FORMAT, "BUMP version %u is not supported (this reader reads %u)",
                    b->version, BU_BUMP_VERSION);
    b->file_size = bu_rd_u64(h + 8);
    b->meta_offset = bu_rd_u64(h + 16);
    b->meta_size = bu_rd_u64(h + 24);
    b->table_offset = bu_rd_u64(h + 32);
    b->n_tensors = bu_rd_u64(h + 40);
    b->payload_offset = bu_rd_u64(h + 48);
    b->payload_size = bu_rd_u64(h + 56);
    memcpy(b->payload_sha256, h + 64, 32);
    memcpy(b->header_sha256, h + 96, 32);
    for (unsigned i = 0; i < BU_BUMP_N_DIMS; i++) b->dims[i] = bu_rd_u32(h + 128 + 4 * i);
    if (b->file_size != b->map_size)
        return bu_errf(err, cap, BU_BUMP_ERR_INTEGRITY,
                    "BUMP header says %llu bytes but the file has %llu (truncated or appended to)",
                    (unsigned long long)b->file_size, (unsigned long long)b->map_size);
    for (unsigned i = BU_DIM_COUNT; i < BU_BUMP_N_DIMS; i++)
        if (b->dims[i]) return bu_errf(err, cap, BU_BUMP_ERR_FORMAT, "BUMP header: reserved dim slot %u is not zero", i);
    if (!all_zero(h + 192, 64))
        return bu_errf(err, cap, BU_BUMP_ERR_FORMAT, "BUMP header: reserved bytes are not zero");

    uint64_t table_bytes = 0, meta_end = 0, table_end = 0;
    if (b->meta_offset < BU_BUMP_HEADER_BYTES
        || __builtin_add_overflow(b->meta_offset, b->meta_size, &meta_end)
        || __builtin_mul_overflow(b->n_tensors, (uint64_t)BU_BUMP_ENTRY_BYTES, &table_bytes)
        || __builtin_add_overflow(b->table_offset, table_bytes, &table_end)
        || meta_end > b->table_offset || table_end > b->payload_offset
        || b->payload_offset > b->file_size || b->payload_size != b->file_size - b->payload_offset)
        return bu_errf(err, cap, BU_BUMP_ERR_FORMAT,
                    "BUMP regions are out of order, overlap, or leave the file "
                    "(meta %llu+%llu, table %llu+%llu, payload %llu+%llu, file %llu)",
                    (unsigned long long)b->meta_offset, (unsigned long long)b->meta_size,
                    (unsigned long long)b->table_offset, (unsigned long long)table_bytes,
                    (unsigned long long)b->payload_offset, (unsigned long long)b->payload_size,
                    (unsigned long long)b->file_size);
    if (b->table_offset % BU_ALIGN || b->payload_offset % BU_ALIGN)
        return bu_errf(err, cap, BU_BUMP_ERR_FORMAT, "BUMP table or payload offset is not %d-aligned",
                       BU_ALIGN);
    b->meta = (const char *)h + b->meta_offset;
    return BU_BUMP_OK;
}

/* The SHA-256 of data[0..n) must be `want` (a header field); `what` names the region. */
static int check_sha256(const uint8_t *data, uint64_t n, const uint8_t want[32], const char *path, const char *what,
                        char *err, size_t cap)
{
    uint8_t d[32];
    bu_sha256(data, n, d);
    if (memcmp(d, want, 32) == 0) return BU_BUMP_OK;
    char want_hex[65], got_hex[65];
    bu_sha256_hex(want, want_hex);
    bu_sha256_hex(d, got_hex);
    return bu_errf(err, cap, BU_BUMP_ERR_INTEGRITY, "%s: %s SHA-256 is %s, header says %s (corrupt file)", path, what,
                   got_hex, want_hex);
}

int bu_bump_open(const char *path, int verify_payload, bu_bump **out, char *err, size_t cap)
{
    if (err && cap) err[0] = 0;
    if (!out || !path) return bu_errf(err, cap, BU_BUMP_ERR_IO, "bu_bump_open: NULL argument");
    *out = NULL;
    bu_bump *b = calloc(1, sizeof *b);
    if (!b) return bu_errf(err, cap, BU_BUMP_ERR_NOMEM, "out of memory");
    /* O_NONBLOCK: opening a FIFO would otherwise block until a writer came (forever); the fstat
     * below then refuses anything but a regular file (on regular files the flag does nothing) */
    b->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (b->fd < 0) {
        int e = errno;
        free(b);
        return bu_errf(err, cap, BU_BUMP_ERR_IO, "cannot open weights %s: %s", path, strerror(e));
    }
    int rc;
    struct stat st;
    if (fstat(b->fd, &st) != 0) {
        rc = bu_errf(err, cap, BU_BUMP_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
        goto bad;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = bu_errf(err, cap, BU_BUMP_ERR_ARG, "weights %s is %s, not a regular file", path,
                     S_ISDIR(st.st_mode) ? "a folder" : S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) ? "a character device"
                     : S_ISBLK(st.st_mode) ? "a block device" : S_ISSOCK(st.st_mode) ? "a socket" : "a special file");
        goto bad;
    }
    if ((uint64_t)st.st_size < BU_BUMP_HEADER_BYTES) {
        rc = bu_errf(err, cap, BU_BUMP_ERR_FORMAT, "%s: %lld bytes is too short for a BUMP header (256 bytes)",
                  path, (long long)st.st_size);
        goto bad;
    }
    b->map_size = (size_t)st.st_size;
    void *m = mmap(NULL, b->map_size, PROT_READ, MAP_PRIVATE, b->fd, 0);
    if (m == MAP_FAILED) {
        rc = bu_errf(err, cap, BU_BUMP_ERR_IO, "cannot mmap %s: %s", path, strerror(errno));
        goto bad;
    }
    b->map = m;
    if ((rc = check_header(b, err, cap)) != BU_BUMP_OK) goto bad;
    b->tensors = calloc(b->n_tensors ? b->n_tensors : 1, sizeof *b->tensors);
    if (!b->tensors) {
        rc = bu_errf(err, cap, BU_BUMP_ERR_NOMEM, "out of memory for %llu tensor entries",
                  (unsigned long long)b->n_tensors);
        goto bad;
    }
    if ((rc = parse_table(b, err, cap)) != BU_BUMP_OK) goto bad;

    if ((rc = check_sha256(b->map + b->meta_offset, b->payload_offset - b->meta_offset, b->header_sha256, path,
                           "metadata+table", err, cap)) != BU_BUMP_OK)
        goto bad;
    if (verify_payload) {
        if ((rc = check_sha256(b->map + b->payload_offset, b->payload_size, b->payload_sha256, path, "payload", err,
                               cap)) != BU_BUMP_OK)
            goto bad;
        b->payload_verified = 1;
    }
    *out = b;
    return BU_BUMP_OK;
bad:
    bu_bump_close(b);
    return rc;
}

const bu_bump_tensor *bu_bump_find(const bu_bump *b, const char *name)
{
    if (!b || !name) return NULL;
    for (uint64_t i = 0; i < b->n_tensors; i++)
        if (strcmp(b->tensors[i].name, name) == 0) return &b->tensors[i];
    return NULL;
}

void bu_bump_close(bu_bump *b)
{
    if (!b) return;
    if (b->map) munmap((void *)b->map, b->map_size);
    if (b->fd >= 0) close(b->fd);
    free(b->tensors);
    free(b);
}
