/* The strict JSON reader of bringup-run --server (bu_json.h says what is refused and why). A
 * recursive descent over the bytes, depth-bounded; values go into one growing array (members linked
 * by index while parsing, by pointer once the array stops moving), strings into one buffer of the
 * input's size (a decoded string plus its NUL is always shorter than its quoted text). */
#include "bu_json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    jdoc *d;
    const unsigned char *p;
    size_t n, at;
    char *err;
    size_t cap;
    int failed;
    size_t *kid, *next;   /* by value index: the first member / next sibling, + 1 (0 = none) */
    size_t *str_at, *key_at;   /* offsets into d->str, + 1 (0 = none) */
} jp;

static int fail(jp *j, const char *fmt, ...)
{
    if (j->failed++) return -1;
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(j->err, j->cap, "%s at byte %zu", what, j->at);
    return -1;
}

static void skip_ws(jp *j)
{
    while (j->at < j->n && (j->p[j->at] == ' ' || j->p[j->at] == '\t' || j->p[j->at] == '\n' || j->p[j->at] == '\r'))
        j->at++;
}

/* A new value (index), or (size_t)-1 when the value count or memory runs out. */
static size_t new_value(jp *j, jtype t)
{
    jdoc *d = j->d;
    if (d->n == J_MAX_VALUES) return fail(j, "more than %d values", J_MAX_VALUES), (size_t)-1;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 64;
        if (cap > J_MAX_VALUES) cap = J_MAX_VALUES;
        jval *v = realloc(d->v, cap * sizeof *v);
        size_t *a = realloc(j->kid, cap * sizeof *a), *b = a ? realloc(j->next, cap * sizeof *b) : NULL;
        if (a) j->kid = a;
        if (b) j->next = b;
        size_t *c = b ? realloc(j->str_at, cap * sizeof *c) : NULL, *e = c ? realloc(j->key_at, cap * sizeof *e) : NULL;
        if (c) j->str_at = c;
        if (e) j->key_at = e;
        if (v) d->v = v;
        if (!v || !e) return fail(j, "out of memory"), (size_t)-1;
        d->cap = cap;
    }
    size_t k = d->n++;
    memset(&d->v[k], 0, sizeof d->v[k]);
    d->v[k].t = t;
    j->kid[k] = j->next[k] = j->str_at[k] = j->key_at[k] = 0;
    return k;
}

static int hex4(jp *j, unsigned *out)
{
    if (j->n - j->at < 4) return fail(j, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int c = j->p[j->at + i];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0) return fail(j, "bad \\u escape");
        v = v * 16 + (unsigned)h;
    }
    j->at += 4;
    *out = v;
    return 0;
}

static void put_utf8(jdoc *d, unsigned cp)
{
    char *o = d->str + d->str_n;
    if (cp < 0x80) o[0] = (char)cp, d->str_n += 1;
    else if (cp < 0x800) o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), d->str_n += 2;
    else if (cp < 0x10000)
        o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[2] = (char)(0x80 | (cp & 0x3F)), d->str_n += 3;
    else
        o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3F)), o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)),
        o[3] = (char)(0x80 | (cp & 0x3F)), d->str_n += 4;
}

/* The length of the valid, shortest-form UTF-8 sequence at p[0..n), or 0. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t k = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!k || k > n) return 0;
    for (size_t i = 1; i < k; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && p[1] < 0xA0) return 0;   /* overlong */
    if (c == 0xED && p[1] > 0x9F) return 0;   /* a surrogate */
    if (c == 0xF0 && p[1] < 0x90) return 0;   /* overlong */
    if (c == 0xF4 && p[1] > 0x8F) return 0;   /* past U+10FFFF */
    return k;
}

/* A string at j->at (the opening quote): decoded into d->str; *off its offset. */
static int string_at(jp *j, size_t *off)
{
    jdoc *d = j->d;
    j->at++;
    *off = d->str_n;
    for (;;) {
        if (j->at >= j->n) return fail(j, "unterminated string");
        unsigned c = j->p[j->at];
        if (c == '"') break;
        if (c < 0x20) return fail(j, "control character 0x%02x in a string", c);
        if (c >= 0x80) {
            size_t k = utf8_len(j->p + j->at, j->n - j->at);
            if (!k) return fail(j, "invalid UTF-8 in a string");
            memcpy(d->str + d->str_n, j->p + j->at, k);
            d->str_n += k;
            j->at += k;
            continue;
        }
        j->at++;
        if (c != '\\') {
            d->str[d->str_n++] = (char)c;
            continue;
        }
        if (j->at >= j->n) return fail(j, "unterminated string");
        char e = (char)j->p[j->at++];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *at = e ? strchr(from, e) : NULL;
        if (at) {
            d->str[d->str_n++] = to[at - from];
            continue;
        }
        if (e != 'u') return fail(j, "bad escape \\%c", e >= 0x20 && e < 0x7F ? e : '?');
        unsigned cp, lo;
        if (hex4(j, &cp)) return -1;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(j, "lone low surrogate \\u%04x", cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (j->n - j->at < 2 || j->p[j->at] != '\\' || j->p[j->at + 1] != 'u') return fail(j, "lone high surrogate");
            j->at += 2;
            if (hex4(j, &lo)) return -1;
            if (lo < 0xDC00 || lo > 0xDFFF) return fail(j, "high surrogate without its low half");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp == 0) return fail(j, "U+0000 in a string");
        put_utf8(d, cp);
    }
    j->at++;
    d->str[d->str_n++] = 0;
    return 0;
}

static int number_at(jp *j, jval *v)
{
    size_t s = j->at, n = j->n;
    const unsigned char *p = j->p;
    int is_int = 1;
    if (j->at < n && p[j->at] == '-') j->at++;
    if (j->at < n && p[j->at] == '0') j->at++;
    else if (j->at < n && p[j->at] >= '1' && p[j->at] <= '9') while (j->at < n && p[j->at] >= '0' && p[j->at] <= '9') j->at++;
    else return fail(j, "bad number");
    if (j->at < n && p[j->at] == '.') {
        is_int = 0;
        if (++j->at >= n || p[j->at] < '0' || p[j->at] > '9') return fail(j, "bad number (a digit must follow '.')");
        while (j->at < n && p[j->at] >= '0' && p[j->at] <= '9') j->at++;
    }
    if (j->at < n && (p[j->at] == 'e' || p[j->at] == 'E')) {
        is_int = 0;
        j->at++;
        if (j->at < n && (p[j->at] == '+' || p[j->at] == '-')) j->at++;
        if (j->at >= n || p[j->at] < '0' || p[j->at] > '9') return fail(j, "bad number (a digit must follow the exponent)");
        while (j->at < n && p[j->at] >= '0' && p[j->at] <= '9') j->at++;
    }
    char buf[64];
    if (j->at - s >= sizeof buf) return fail(j, "number longer than %zu characters", sizeof buf - 1);
    memcpy(buf, p + s, j->at - s);
    buf[j->at - s] = 0;
    char *end;
    errno = 0;
    v->num = strtod(buf, &end);
    if (errno == ERANGE && (v->num > 1 || v->num < -1)) return fail(j, "number out of range");
    if (is_int) {
        errno = 0;
        long long x = strtoll(buf, &end, 10);
        is_int = !errno;
        v->i = (int64_t)x;
    }
    v->is_int = is_int;
    return 0;
}

static int literal(jp *j, const char *word)
{
    size_t k = strlen(word);
    if (j->n - j->at < k || memcmp(j->p + j->at, word, k)) return fail(j, "unexpected character");
    j->at += k;
    return 0;
}

static int value(jp *j, int depth, size_t *out);

/* An array or object at j->at: members linked in order; object keys unique. */
static int container(jp *j, int depth, size_t k, char close)
{
    int obj = close == '}';
    size_t last = 0, count = 0;
    j->at++;
    skip_ws(j);
    if (j->at < j->n && j->p[j->at] == (unsigned char)close) {
        j->at++;
        return 0;
    }
    for (;;) {
        size_t key = 0, kid;
        skip_ws(j);
        if (obj) {
            if (j->at >= j->n || j->p[j->at] != '"') return fail(j, "expected a string key");
            if (string_at(j, &key)) return -1;
            for (size_t m = j->kid[k]; m; m = j->next[m - 1])
                if (!strcmp(j->d->str + j->key_at[m - 1] - 1, j->d->str + key)) return fail(j, "duplicate key");
            skip_ws(j);
            if (j->at >= j->n || j->p[j->at] != ':') return fail(j, "expected ':'");
            j->at++;
        }
        if (obj && count == J_MAX_KEYS) return fail(j, "more than %d keys in an object", J_MAX_KEYS);
        if (value(j, depth + 1, &kid)) return -1;
        if (obj) j->key_at[kid] = key + 1;
        if (last) j->next[last - 1] = kid + 1;
        else j->kid[k] = kid + 1;
        last = kid + 1;
        count++;
        skip_ws(j);
        if (j->at < j->n && j->p[j->at] == ',') {
            j->at++;
            continue;
        }
        if (j->at < j->n && j->p[j->at] == (unsigned char)close) break;
        return fail(j, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    j->at++;
    j->d->v[k].n = count;
    return 0;
}

static int value(jp *j, int depth, size_t *out)
{
    if (depth > J_MAX_DEPTH) return fail(j, "nested deeper than %d", J_MAX_DEPTH);
    skip_ws(j);
    if (j->at >= j->n) return fail(j, "unexpected end");
    unsigned c = j->p[j->at];
    jtype t = c == '{' ? J_OBJ : c == '[' ? J_ARR : c == '"' ? J_STR : c == 't' ? J_TRUE : c == 'f' ? J_FALSE
            : c == 'n' ? J_NULL : J_NUM;
    size_t k = new_value(j, t);
    if (k == (size_t)-1) return -1;
    *out = k;
    switch (t) {
    case J_OBJ: return container(j, depth, k, '}');
    case J_ARR: return container(j, depth, k, ']');
    case J_STR: {
        size_t off;
        if (string_at(j, &off)) return -1;
        j->str_at[k] = off + 1;
        j->d->v[k].n = strlen(j->d->str + off);   /* no NUL inside: U+0000 is refused */
        return 0;
    }
    case J_TRUE: return literal(j, "true");
    case J_FALSE: return literal(j, "false");
    case J_NULL: return literal(j, "null");
    default: return number_at(j, &j->d->v[k]);
    }
}

int j_parse(jdoc *d, const char *text, size_t n, char *err, size_t cap)
{
    memset(d, 0, sizeof *d);
    jp j = {d, (const unsigned char *)text, n, 0, err, cap, 0, NULL, NULL, NULL, NULL};
    d->str = malloc(n + 1);
    d->str_cap = n + 1;
    size_t root;
    int rc = d->str ? value(&j, 1, &root) : fail(&j, "out of memory");
    if (!rc) {
        skip_ws(&j);
        if (j.at != n) rc = fail(&j, "trailing characters after the value");
    }
    if (!rc)
        for (size_t k = 0; k < d->n; k++) {   /* the arrays stopped moving: indices become pointers */
            jval *v = &d->v[k];
            v->kid = j.kid[k] ? &d->v[j.kid[k] - 1] : NULL;
            v->next = j.next[k] ? &d->v[j.next[k] - 1] : NULL;
            v->s = j.str_at[k] ? d->str + j.str_at[k] - 1 : NULL;
            v->key = j.key_at[k] ? d->str + j.key_at[k] - 1 : NULL;
        }
    free(j.kid);
    free(j.next);
    free(j.str_at);
    free(j.key_at);
    return rc;
}

void j_free(jdoc *d)
{
    free(d->v);
    free(d->str);
    memset(d, 0, sizeof *d);
}

const jval *j_get(const jval *o, const char *key)
{
    if (!o || o->t != J_OBJ) return NULL;
    for (const jval *m = o->kid; m; m = m->next)
        if (!strcmp(m->key, key)) return m;
    return NULL;
}

const char *j_kind(const jval *v)
{
    static const char *const names[] = {"null", "false", "true", "a number", "a string", "an array", "an object"};
    return names[v->t];
}
