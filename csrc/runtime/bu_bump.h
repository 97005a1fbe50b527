/* C reader of the BUMP weights file, version 1 (docs/bump_format.md).
 *
 * The file is mmap'd read-only; tensor data pointers point into the mapping (no copies). Every
 * check of the spec's "Reader checks" section is done at open; each failure returns a status code
 * and a one-line message, never an abort.
 */
#ifndef BU_BUMP_H
#define BU_BUMP_H

#include <stddef.h>
#include <stdint.h>

#define BU_BUMP_MAGIC "BUMP"
#define BU_BUMP_VERSION 1u
#define BU_BUMP_HEADER_BYTES 256u
#define BU_BUMP_ENTRY_BYTES 160u
#define BU_BUMP_NAME_BYTES 96u
#define BU_BUMP_N_DIMS 16u   /* u32 model-dims slots in the header */

/* Index of each model dimension in the header's dims array (bump_format.md, offset 128). */
enum {
    BU_DIM_N_LAYER = 0, BU_DIM_N_EMBD, BU_DIM_N_HEAD, BU_DIM_N_HEAD_KV, BU_DIM_HEAD_DIM,
    BU_DIM_HEAD_DIM_V, BU_DIM_N_FF, BU_DIM_N_VOCAB, BU_DIM_N_CTX_TRAIN, BU_DIM_COUNT
};

typedef struct {
    char name[BU_BUMP_NAME_BYTES];   /* NUL-terminated, [A-Za-z0-9_.]+ */
    uint32_t ggml_type;
    uint32_t n_dims;                 /* 1..4 */
    uint64_t shape[4];               /* GGUF order: ne0 (contiguous) first, unused dims 1 */
    uint64_t offset;                 /* relative to the payload */
    uint64_t size;                   /* bytes */
    const void *data;                /* into the mapping */
} bu_bump_tensor;

typedef struct bu_bump {
    int fd;
    const uint8_t *map;
    size_t map_size;
    uint32_t version;
    uint64_t file_size, meta_offset, meta_size, table_offset, n_tensors, payload_offset, payload_size;
    uint8_t payload_sha256[32];      /* as stored in the header */
    uint8_t header_sha256[32];       /* as stored in the header */
    uint32_t dims[BU_BUMP_N_DIMS];
    int payload_verified;            /* 1 when the payload hash was recomputed and matched */
    const char *meta;                /* meta_size bytes of canonical JSON, not NUL-terminated */
    bu_bump_tensor *tensors;         /* n_tensors entries, in file order (sorted by offset) */
} bu_bump;

/* Status codes of the BUMP reader (a subset of the runtime's bu_status). */
#define BU_BUMP_OK 0
#define BU_BUMP_ERR_ARG 1        /* the path is not a regular file (a FIFO, a device, a folder) */
#define BU_BUMP_ERR_IO 2         /* cannot open / stat / map the file */
#define BU_BUMP_ERR_FORMAT 3     /* not a BUMP file, unsupported version, malformed header/table */
#define BU_BUMP_ERR_INTEGRITY 4  /* truncated file or hash mismatch */
#define BU_BUMP_ERR_NOMEM 6

/* Open and check `path`. verify_payload: 1 recomputes the payload SHA-256 (the default everywhere);
 * 0 skips only that check (the caller must say so to the user). On failure *out is NULL and err
 * holds a message (err may be NULL). */
int bu_bump_open(const char *path, int verify_payload, bu_bump **out, char *err, size_t err_cap);

/* The tensor named `name`, or NULL. */
const bu_bump_tensor *bu_bump_find(const bu_bump *b, const char *name);

/* Unmap and free; NULL is a no-op. */
void bu_bump_close(bu_bump *b);

/* Block size of a GGML type from the project's format table (bu_formats.h): 0 if unknown. */
int bu_format_block(uint32_t ggml_type, uint64_t *block_elems, uint64_t *block_bytes);

#endif
