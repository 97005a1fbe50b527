/* generate.h (bringup-run): One run's state (sess_t): tokenizing, sampling and the generation loop
 * (generate.c). */
#ifndef BU_CLI_GENERATE_H
#define BU_CLI_GENERATE_H

#include "util.h"
#include <signal.h>

#include "args.h"
#include "chat.h"
#include "json_out.h"
#include "library.h"

typedef struct {
    lib_t L;
    bu_model *m;
    bu_tok *tok;        /* NULL: the weights have no tokenizer (only --prompt-tokens) */
    bu_sampler *smp;
    chat_t chat;
    int have_chat;
    const opts_t *o;
    timing_t t;
    volatile sig_atomic_t *interrupt; /* set by the chat loop's SIGINT handler; NULL elsewhere */
    int interrupted;         /* the last generate() stopped at *interrupt */
    size_t prompt_cap;       /* bytes of text that can fit the context at all (set_prompt_cap); 0: no tokenizer */
    int64_t longest_token;   /* bytes of the vocabulary's longest token (special tokens' text included) */
    /* --server: called by generate() after each piece is added to text (before the stop checks);
     * nonzero stops the generation there (a stop string, a client gone, a shutdown) */
    int (*on_piece)(void *ctx, const bu_str *text, size_t before);
    void *piece_ctx;
} sess_t;

/* Set s->prompt_cap: n_ctx x the longest token's bytes (at least 4, a UTF-8 character). Every
 * token of an encoding stands for at most that many bytes of the text, so a longer text needs
 * more than n_ctx tokens and cannot fit the context: it is refused by its length before the
 * tokenizer runs (a 20 MB one-word prompt took the tokenizer 40 s and 1.9 GB before the
 * token-count error), and an interactive line never grows past it. */
void set_prompt_cap(sess_t *s);
/* EX_OK when n bytes of prompt text (named by what, "-p" or "-f", and name, the file or NULL) are within
 * s->prompt_cap; else EX_USAGE with one line saying the cap and why. */
int check_prompt_size(const sess_t *s, size_t n, const char *what, const char *name);

/* die() with the runtime's message and the exit code of its status. */
int rt_fail(sess_t *s, int status);
/* Append the ids of text[0..n) (BU_TOK_* flags) to out. EX_OK, or an exit code with a message. */
int encode(sess_t *s, const char *text, size_t n, unsigned flags, ids_t *out);
/* Tell the sampler's repeat-penalty window that ids entered the context. */
void accept_ids(sess_t *s, const int32_t *ids, size_t n);
/* Generate after the evaluated context: up to max ids, stopping at end-of-generation ids and (with
 * a chat format) its stop strings unless --no-stop, and when *s->interrupt is set (Ctrl-C; then
 * s->interrupted = 1). stream: print each piece as it comes. *pending = 1 when the last generated id
 * is not yet in the KV cache. */
int generate(sess_t *s, int max, ids_t *gen, bu_str *text, int stream, double t_start, int *pending);

#endif /* BU_CLI_GENERATE_H */
