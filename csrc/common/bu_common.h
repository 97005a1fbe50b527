/* bu_common.h - what the tokenizer, the runtime and the CLI all need, written once: one-line error
 * messages into a caller's buffer, growable arrays, little-endian reads, strict UTF-8 decoding.
 *
 * C11 (also clean under -Wpedantic). No global state; nothing aborts: allocation failures are
 * return values the caller maps to its own status code. The functions are hidden in a shared
 * library (BU_INTERNAL): they are not part of libmodel.so's API (bu_runtime.h, bu_tokenizer.h).
 */
#ifndef BU_COMMON_H
#define BU_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Functions shared between the C files of one binary, never exported from a shared library
 * (a test build defines BU_INTERNAL as empty to call them through ctypes). */
#ifndef BU_INTERNAL
#define BU_INTERNAL __attribute__((visibility("hidden")))
#endif

/* ---------------- error messages ---------------- */

/* Format `fmt` into err[0..cap) (NUL-terminated, truncated to fit; err may be NULL or cap 0) and
 * return `code`, so a failure path is one statement: `return bu_errf(err, cap, E_X, "...", ...);`. */
BU_INTERNAL int bu_errf(char *err, size_t cap, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
BU_INTERNAL int bu_verrf(char *err, size_t cap, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* ---------------- little-endian reads ----------------
 * The BUMP file (docs/bump_format.md) and the tokenizer blob (docs/tokenizer.md) store integers
 * and floats little-endian; these read them on any host, at any alignment. */

static inline uint32_t bu_rd_u32(const void *p)
{
    const uint8_t *b = p;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static inline uint64_t bu_rd_u64(const void *p)
{
    return (uint64_t)bu_rd_u32(p) | (uint64_t)bu_rd_u32((const uint8_t *)p + 4) << 32;
}

/* IEEE 754 binary32 from its little-endian bytes. */
static inline float bu_rd_f32(const void *p)
{
    uint32_t u = bu_rd_u32(p);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* 1 on a little-endian host: raw float32 files (--all-logits, --dump-hidden) are written in host
 * order, so they are only written where that order is the documented one. */
static inline int bu_host_is_little_endian(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

/* ---------------- growable arrays: every length handled, nothing truncated ---------------- */

/* Room for at least `need` elements of `elem` >= 1 bytes in `arr` (capacity *cap elements; NULL/0 for a
 * new array): the capacity doubles (from 16) until it fits. Returns the possibly moved array and
 * updates *cap, or NULL when out of memory or the size overflows; then `arr` and *cap are
 * unchanged and still valid. */
BU_INTERNAL void *bu_grow(void *arr, size_t *cap, size_t need, size_t elem);

/* Declares the array type `name` ({T *v; size_t n, cap;}, zero-initialised = empty) and
 * `int name##_push(name *a, T x)`: 0, or `oom` when out of memory (the array is unchanged). */
#define BU_VEC(name, T, oom)                                                                   \
    typedef struct {                                                                           \
        T *v;                                                                                  \
        size_t n, cap;                                                                         \
    } name;                                                                                    \
    static inline int name##_push(name *a, T x)                                                \
    {                                                                                          \
        T *v = a->n < a->cap ? a->v : (T *)bu_grow(a->v, &a->cap, a->n + 1, sizeof *a->v);   \
        if (!v) return (oom);                                                                  \
        a->v = v;                                                                              \
        a->v[a->n++] = x;                                                                      \
        return 0;                                                                              \
    }

/* A byte string: p[0..n) plus a NUL at p[n] once anything was added (p is NULL while empty). */
typedef struct {
    char *p;
    size_t n, cap;
} bu_str;

/* Append n bytes (any bytes, NULs included). 0, or -1 when out of memory (s unchanged). */
BU_INTERNAL int bu_str_add(bu_str *s, const void *bytes, size_t n);

/* ---------------- UTF-8 ---------------- */

/* Decode the UTF-8 sequence at s[0..n), n >= 1, strictly as RFC 3629 says (no overlong forms, no
 * surrogates, nothing above U+10FFFF, no truncated sequence): its length in bytes (1-4) with the
 * code point in *cp, or 0 when the bytes are not valid UTF-8 there. */
BU_INTERNAL size_t bu_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

#endif /* BU_COMMON_H */
