/* bu_json.h - the strict JSON reader of bringup-run --server (request bodies are untrusted).
 *
 * RFC 8259 exactly, nothing lenient: one value (the caller checks it is an object), whitespace only
 * space/tab/LF/CR, no comments, no trailing commas, no NaN/Infinity, no leading zeros or '+', no
 * lone surrogates, only valid UTF-8, no U+0000 in a string (a C string would end there), no
 * duplicate keys in an object. Bounded: the input's size is the caller's (checked before the body is
 * read), nesting at most J_MAX_DEPTH, at most J_MAX_VALUES values and J_MAX_KEYS keys per object. A number keeps whether it was
 * written as an integer (no fraction, no exponent, within int64), so a field that wants an integer
 * can refuse 1.5 or 1e3 instead of rounding it. Standalone (malloc only): the fuzz target links it.
 */
#ifndef BU_JSON_H
#define BU_JSON_H

#include <stddef.h>
#include <stdint.h>

#define J_MAX_DEPTH 32
#define J_MAX_VALUES 100000
#define J_MAX_KEYS 256       /* members of one object (each key is checked against the others) */

typedef enum { J_NULL, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
    jtype t;
    const char *s;        /* J_STR: the decoded bytes (UTF-8, NUL-terminated); n: their count */
    size_t n;             /* J_STR: bytes; J_ARR / J_OBJ: members */
    double num;           /* J_NUM: the value (finite) */
    int is_int;           /* J_NUM: written as an integer within int64 */
    int64_t i;            /* J_NUM with is_int: the value */
    const char *key;      /* a member of an object: its key (decoded, NUL-terminated) */
    struct jval *kid;     /* J_ARR / J_OBJ: the first member */
    struct jval *next;    /* the next member of the parent */
} jval;

typedef struct {
    jval *v;              /* v[0] is the root */
    size_t n, cap;
    char *str;            /* decoded strings and keys */
    size_t str_n, str_cap;
} jdoc;

/* Parse n bytes. 0 and the root in d->v[0], or -1 with "what at byte N" in err. j_free(d) either way. */
int j_parse(jdoc *d, const char *text, size_t n, char *err, size_t cap);
void j_free(jdoc *d);
/* The member of object o named key, or NULL. */
const jval *j_get(const jval *o, const char *key);
/* "a string", "an object", ... for messages. */
const char *j_kind(const jval *v);

#endif /* BU_JSON_H */
