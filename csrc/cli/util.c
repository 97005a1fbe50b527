/* util.c - the leaf of bringup-run (util.h): the escaping rule of every message, die() and say(),
 * memory that exits when exhausted, the clock. Knows nothing of the model, its library or the run. */
#include "util.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const prog = "bringup-run";

/* The code point of the UTF-8 sequence at s[0..n), its length in *len; -1 (and *len = 1) when
 * the bytes are not a valid, shortest-form sequence. */
static long utf8_at(const unsigned char *s, size_t n, size_t *len)
{
    *len = 1;
    unsigned c = s[0];
    size_t k = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    if (!k || k > n || (c >= 0xF5)) return -1;
    long cp = (long)(c & (0x7F >> k));
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((k == 3 && (cp < 0x800 || (cp >= 0xD800 && cp < 0xE000))) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return -1;
    *len = k;
    return cp;
}

/* Code points that could start a line, rewrite the terminal or reorder the text around them:
 * C1 controls, zero-width and bidi format characters, the line and paragraph separators, BOM
 * (bringup's Python rule, errors.one_line, escapes the same Unicode categories Cc, Cf, Zl, Zp). */
static int unsafe_cp(long cp)
{
    return (cp >= 0x80 && cp <= 0x9F) || cp == 0xAD || (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202E) ||
           (cp >= 0x2060 && cp <= 0x206F) || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB);
}

void put_shown(FILE *f, const char *text, size_t n)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t shown = n > SHOWN_MAX ? SHOWN_MAX : n;
    for (size_t i = 0; i < shown;) {
        unsigned c = s[i];
        size_t len = 1;
        long cp = c < 0x80 ? (long)c : utf8_at(s + i, n - i, &len);
        if (c == '\n') fputs("\\n", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c == '\t') fputs("\\t", f);
        else if (cp < 0 || c < 0x20 || c == 0x7F || (cp >= 0 && cp < 0x100 && unsafe_cp(cp))) fprintf(f, "\\x%02x", cp < 0 ? c : (unsigned)cp);
        else if (unsafe_cp(cp)) fprintf(f, "\\u%04lx", cp);
        else fwrite(s + i, 1, len, f);
        i += len;
    }
    if (shown < n) fprintf(f, "...[%zu more bytes]", n - shown);
}

/* "bringup-run: <head><message>" and a newline on stderr, the message shown escaped. */
static void vsay(const char *head, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    char small[512];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    char *msg = n < (int)sizeof small ? small : xrealloc(NULL, (size_t)n + 1);
    if (msg != small) vsnprintf(msg, (size_t)n + 1, fmt, again);
    va_end(again);
    fprintf(stderr, "%s: %s", prog, head);
    put_shown(stderr, msg, n < 0 ? 0 : (size_t)n);
    fputc('\n', stderr);
    if (msg != small) free(msg);
}

int die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay("error: ", fmt, ap);
    va_end(ap);
    return code;
}

void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay("", fmt, ap);
    va_end(ap);
}

static void out_of_memory(size_t n)
{
    fprintf(stderr, "%s: error: out of memory (%zu bytes)\n", prog, n);
    exit(EX_UNAVAILABLE);
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) out_of_memory(n);
    return q;
}

void str_add(bu_str *s, const char *p, size_t n)
{
    if (bu_str_add(s, p, n)) out_of_memory(s->n + n + 1);
}

void str_adds(bu_str *s, const char *z) { str_add(s, z, strlen(z)); }

void ids_add(ids_t *v, int32_t id)
{
    if (ids_t_push(v, id)) out_of_memory((v->n + 1) * sizeof *v->v);
}

double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}
