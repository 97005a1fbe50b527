/* SHA-256 (FIPS 180-4), incremental. The BUMP reader checks its header and payload hashes with it,
 * so the runtime needs no crypto library. Tested against Python's hashlib. */
#ifndef BU_SHA256_H
#define BU_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t n_bytes;      /* total bytes absorbed */
    uint8_t buf[64];
    size_t buf_len;
} bu_sha256_ctx;

void bu_sha256_init(bu_sha256_ctx *c);
void bu_sha256_update(bu_sha256_ctx *c, const void *data, size_t n);
void bu_sha256_final(bu_sha256_ctx *c, uint8_t out[32]);
/* One-shot digest of n bytes. */
void bu_sha256(const void *data, size_t n, uint8_t out[32]);
/* Which block function bu_sha256_update uses on this CPU: "sha-ni" (x86 SHA extensions, found by
 * cpuid) or "portable" (also when BU_SHA256=portable). Never NULL. */
const char *bu_sha256_impl(void);
/* One-shot digest through the portable block function only (the reference the test holds the
 * other path to, bit for bit). */
void bu_sha256_portable(const void *data, size_t n, uint8_t out[32]);
/* Lower-case hex of a 32-byte digest into out[65] (NUL-terminated). */
void bu_sha256_hex(const uint8_t digest[32], char out[65]);

#endif
