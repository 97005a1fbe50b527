/* libFuzzer target: the chat-format parser of bringup-run (csrc/cli/chat.c, chat_parse) on
 * arbitrary bytes: the blob of tensor "chat.format" comes from the weights file, i.e. from whoever
 * wrote it.
 *
 * A blob that fails must leave nothing allocated (c zeroed) with a one-line message. A blob that
 * parses must then be usable: every field and stop string lies inside the parser's copy and ends
 * there, the flags are "0" / "1", and rendering a conversation (chat_first with the format's
 * default system message, with a given one and with none; chat_next) gives exactly the prefixes,
 * contents and suffixes the format says, in that order (ASan/UBSan and the checks below abort
 * otherwise). Each input is parsed as is and again behind the magic, so mutations reach the fields.
 *
 * Built by tests/fuzz/run.py with clang -fsanitize=fuzzer,address,undefined, linked with
 * common/bu_common.c, cli/util.c and cli/chat.c; not part of any binary of the pipeline
 * (bringup.build.sources.FUZZ).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_chat: broken parser promise: %s\n", what);
        abort();
    }
}

/* 1 when z is a string that ends inside mem[0..n]. */
static int inside(const chat_t *c, size_t n, const char *z)
{
    return z >= c->mem && z <= c->mem + n && memchr(z, 0, (size_t)(c->mem + n + 1 - z)) != NULL;
}

static void expect_next(const chat_t *c, const char *user, const char *trimmed)
{
    bu_str want = {0}, got = {0};
    str_adds(&want, c->f[CF_USER_PRE]);
    str_adds(&want, trimmed);
    str_adds(&want, c->f[CF_USER_SUF]);
    str_adds(&want, c->f[CF_GEN_PROMPT]);
    chat_next(c, &got, user);
    check(got.n == want.n && (!got.n || !memcmp(got.p, want.p, got.n)), "chat_next renders prefix + content + suffix");
    free(want.p);
    free(got.p);
}

static void use(const chat_t *c, size_t n)
{
    for (int i = 0; i < CF_N; i++) check(inside(c, n, c->f[i]), "every field lies inside the copy");
    check(c->n_stop >= 0 && c->n_stop <= CF_MAX_STOP, "at most CF_MAX_STOP stop strings");
    for (int i = 0; i < c->n_stop; i++) check(inside(c, n, c->stop[i]), "every stop string lies inside the copy");
    const int flags[] = {CF_HAS_SYSTEM, CF_HAS_DEFAULT_SYSTEM, CF_TRIM};
    for (size_t k = 0; k < sizeof flags / sizeof *flags; k++)
        check((c->f[flags[k]][0] == '0' || c->f[flags[k]][0] == '1') && !c->f[flags[k]][1], "flags are 0 or 1");
    int trim = c->f[CF_TRIM][0] == '1';
    expect_next(c, " \thi there\n", trim ? "hi there" : " \thi there\n");
    expect_next(c, "", "");
    const char *systems[] = {NULL, "", "  be brief  "};
    for (size_t k = 0; k < sizeof systems / sizeof *systems; k++) {
        bu_str out = {0};
        chat_first(c, &out, systems[k], "hello");
        size_t tail = strlen(c->f[CF_GEN_PROMPT]);
        check(out.n >= tail && !memcmp(out.p + out.n - tail, c->f[CF_GEN_PROMPT], tail),
              "chat_first ends with the generation prompt");
        free(out.p);
    }
}

static void parse_and_use(const uint8_t *data, size_t n)
{
    chat_t c;
    char err[256];
    err[0] = 0;
    if (chat_parse(data, n, &c, err, sizeof err) != 0) {
        check(c.mem == NULL && c.n_stop == 0, "a failed parse leaves nothing allocated");
        check(err[0] != 0 && strchr(err, '\n') == NULL, "a failed parse gives a one-line message");
        return;
    }
    use(&c, n);
    free(c.mem);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    parse_and_use(data, n);
    /* again behind the magic, so that mutations of the first bytes still reach the fields */
    if (n > (1u << 20)) return 0;
    uint8_t *copy = malloc(n + 8);
    if (!copy) abort();
    memcpy(copy, "BUCHAT2", 8);
    if (n) memcpy(copy + 8, data, n);
    parse_and_use(copy, n + 8);
    free(copy);
    return 0;
}
