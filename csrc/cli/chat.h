/* chat.h (bringup-run): The chat format (tensor "chat.format"): parse the blob, render conversation turns
 * (chat.c). The blob is untrusted: chat_parse is fuzzed (csrc/fuzz/fuzz_chat.c). */
#ifndef BU_CLI_CHAT_H
#define BU_CLI_CHAT_H

#include "util.h"

enum { CF_NAME, CF_HAS_SYSTEM, CF_SYS_PRE, CF_SYS_SUF, CF_USER_PRE, CF_USER_SUF, CF_ASSIST_PRE, CF_ASSIST_SUF,
       CF_GEN_PROMPT, CF_HAS_DEFAULT_SYSTEM, CF_DEFAULT_SYSTEM, CF_SYSTEM_MODE, CF_SYSTEM_SEP, CF_TRIM, CF_N };
#define CF_MAX_STOP 8

typedef struct {
    const char *f[CF_N];              /* the fields, by CF_* index, NUL-terminated inside mem */
    int n_stop;
    const char *stop[CF_MAX_STOP];    /* stop strings */
    char *mem;                        /* owned copy of the blob */
} chat_t;

/* Parse the blob of tensor "chat.format" (docs/runtime.md): 0, with c->mem owned by the caller; or
 * -1 with a one-line message in err and nothing allocated (c zeroed). Fuzzed: csrc/fuzz/fuzz_chat.c. */
int chat_parse(const uint8_t *blob, size_t n, chat_t *c, char *err, size_t cap);
/* The opening of a conversation: [system] + the first user message + the generation prompt.
 * system: --system, or NULL for the format's default (if it has one). */
void chat_first(const chat_t *c, bu_str *out, const char *system, const char *user);
/* A later user message and the generation prompt. */
void chat_next(const chat_t *c, bu_str *out, const char *user);
/* An earlier assistant answer: its content and the turn's suffix (the server renders a history). */
void chat_answer(const chat_t *c, bu_str *out, const char *text);

#endif /* BU_CLI_CHAT_H */
