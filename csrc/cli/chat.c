/* The chat format (tensor "chat.format", docs/runtime.md): the one chat renderer in C.
 *
 * The semantics are bringup.formats.chat.render_chat_format's (the reference the tests hold the
 * GGUF's jinja template against): an optional system message (--system, else the format's
 * default), either as its own turn or merged (content + separator) into the first user message;
 * every turn is prefix + content + suffix, contents trimmed of " \t\n\v\f\r" when the format says
 * so; the generation prompt opens the reply. */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

/* A "0" / "1" flag field. */
static int is_flag(const char *z) { return (z[0] == '0' || z[0] == '1') && !z[1]; }

/* Blob: "BUCHAT2\0", then CF_N NUL-terminated strings, then a decimal count of stop strings
 * (NUL-terminated) and that many NUL-terminated strings; nothing after. The flags are "0" or "1"
 * and the count one digit: anything else is refused, not read as something (a file is data). No
 * message quotes the blob's bytes. On failure nothing stays allocated (c->mem NULL). */
static int parse_fields(chat_t *c, size_t n, char *err, size_t cap)
{
    size_t at = 8;
    const char *fields[CF_N + 1 + CF_MAX_STOP];
    int nf = 0, want = CF_N + 1;
    while (at < n && nf < want) {
        const char *z = c->mem + at;
        size_t len = strnlen(z, n - at);
        if (at + len >= n)
            return bu_errf(err, cap, -1, "chat.format: field %d is not NUL-terminated", nf);
        fields[nf++] = z;
        at += len + 1;
        if (nf == CF_N + 1) {
            const char *k = fields[CF_N];
            if (!(k[0] >= '0' && k[0] <= '0' + CF_MAX_STOP && !k[1]))
                return bu_errf(err, cap, -1, "chat.format: the stop-string count is not one digit 0..%d", CF_MAX_STOP);
            want = CF_N + 1 + (k[0] - '0');
        }
    }
    if (nf != want || at != n)
        return bu_errf(err, cap, -1, "chat.format: %d fields, %d expected, %zu trailing bytes", nf, want, n - at);
    for (int i = 0; i < CF_N; i++) c->f[i] = fields[i];
    c->n_stop = want - CF_N - 1;
    for (int i = 0; i < c->n_stop; i++) c->stop[i] = fields[CF_N + 1 + i];
    if (!is_flag(c->f[CF_HAS_SYSTEM]) || !is_flag(c->f[CF_HAS_DEFAULT_SYSTEM]) || !is_flag(c->f[CF_TRIM]))
        return bu_errf(err, cap, -1, "chat.format: a flag field (system role, default system, trim) is not 0 or 1");
    int merge = !strcmp(c->f[CF_SYSTEM_MODE], "merge_into_first_user");
    if (!merge && strcmp(c->f[CF_SYSTEM_MODE], "turn"))
        return bu_errf(err, cap, -1, "chat.format: unknown system mode (neither turn nor merge_into_first_user)");
    if (!merge && strcmp(c->f[CF_HAS_SYSTEM], "1"))
        return bu_errf(err, cap, -1, "chat.format: system mode 'turn' without a system role");
    return 0;
}

int chat_parse(const uint8_t *blob, size_t n, chat_t *c, char *err, size_t cap)
{
    memset(c, 0, sizeof *c);
    if (n < 8 || memcmp(blob, "BUCHAT2", 8) != 0)
        return bu_errf(err, cap, -1, "chat.format: bad magic (expected BUCHAT2)");
    c->mem = xrealloc(NULL, n + 1);
    memcpy(c->mem, blob, n);
    c->mem[n] = 0;
    if (parse_fields(c, n, err, cap) == 0) return 0;
    free(c->mem);
    memset(c, 0, sizeof *c);
    return -1;
}

static void chat_content(const chat_t *c, bu_str *out, const char *z)
{
    size_t n = strlen(z);
    if (!strcmp(c->f[CF_TRIM], "1")) {
        static const char ws[] = " \t\n\v\f\r";
        while (n && strchr(ws, z[0])) { z++; n--; }
        while (n && strchr(ws, z[n - 1])) n--;
    }
    str_add(out, z, n);
}

/* The opening of a conversation: [system] + the first user message + the generation prompt.
 * system: --system, or NULL for the format's default (if it has one). */
void chat_first(const chat_t *c, bu_str *out, const char *system, const char *user)
{
    if (!system && !strcmp(c->f[CF_HAS_DEFAULT_SYSTEM], "1")) system = c->f[CF_DEFAULT_SYSTEM];
    bu_str sys = {0};
    if (system) chat_content(c, &sys, system);
    if (system && !strcmp(c->f[CF_SYSTEM_MODE], "turn")) {
        str_adds(out, c->f[CF_SYS_PRE]);
        if (sys.n) str_add(out, sys.p, sys.n);
        str_adds(out, c->f[CF_SYS_SUF]);
    }
    str_adds(out, c->f[CF_USER_PRE]);
    if (system && sys.n && strcmp(c->f[CF_SYSTEM_MODE], "turn")) {
        /* merged: an empty system message adds nothing, not even the separator */
        str_add(out, sys.p, sys.n);
        str_adds(out, c->f[CF_SYSTEM_SEP]);
    }
    chat_content(c, out, user);
    str_adds(out, c->f[CF_USER_SUF]);
    str_adds(out, c->f[CF_GEN_PROMPT]);
    free(sys.p);
}

/* A later user message and the generation prompt. */
void chat_next(const chat_t *c, bu_str *out, const char *user)
{
    str_adds(out, c->f[CF_USER_PRE]);
    chat_content(c, out, user);
    str_adds(out, c->f[CF_USER_SUF]);
    str_adds(out, c->f[CF_GEN_PROMPT]);
}

/* An earlier answer of the assistant (after the generation prompt that chat_first / chat_next end
 * with): its content and the turn's suffix, as the chat loop closes a turn (the server's history). */
void chat_answer(const chat_t *c, bu_str *out, const char *text)
{
    chat_content(c, out, text);
    str_adds(out, c->f[CF_ASSIST_SUF]);
}
