/* Shared helpers of the tokenizer, runtime and CLI; see bu_common.h. */
#include "bu_common.h"

#include <stdio.h>
#include <stdlib.h>

int bu_verrf(char *err, size_t cap, int code, const char *fmt, va_list ap)
{
    if (err && cap) vsnprintf(err, cap, fmt, ap);
    return code;
}

int bu_errf(char *err, size_t cap, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bu_verrf(err, cap, code, fmt, ap);
    va_end(ap);
    return code;
}

void *bu_grow(void *arr, size_t *cap, size_t need, size_t elem)
{
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2) return NULL;
        c *= 2;
    }
    if (c > SIZE_MAX / elem) return NULL;
    void *p = realloc(arr, c * elem);
    if (!p) return NULL;
    *cap = c;
    return p;
}

int bu_str_add(bu_str *s, const void *bytes, size_t n)
{
    if (n > SIZE_MAX - s->n - 1) return -1;
    if (s->n + n + 1 > s->cap) {
        char *p = bu_grow(s->p, &s->cap, s->n + n + 1, 1);
        if (!p) return -1;
        s->p = p;
    }
    if (n) memcpy(s->p + s->n, bytes, n);
    s->n += n;
    s->p[s->n] = 0;
    return 0;
}

size_t bu_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;   /* min: the smallest code point that needs this length (no overlong forms) */
    if ((c & 0xE0) == 0xC0) { len = 2; v = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { len = 3; v = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}
