/* bringup_run.h - what the files of the bringup-run CLI share (not installed). One file per concern:
 *
 *   bringup_run.c   main(): open the model, the tokenizer and the chat format, run, exit codes
 *   args.c          options and --help
 *   library.c       the functions taken from libmodel.so (dlopen)
 *   chat.c          the chat format (tensor "chat.format"): parse and render conversation turns
 *   generate.c      tokenizing, sampling and the generation loop
 *   one_shot.c      a --prompt / --prompt-tokens run (with --all-logits, --dump-hidden, --json)
 *   interactive.c   the chat loop on stdin
 *   json_out.c      JSON strings and ids, the timing fields and the --timing report
 *   all_logits.c    the --all-logits file
 *   dump_hidden.c   the --dump-hidden folder (every prefill op's output, for X-ray)
 *
 * Errors print one line "bringup-run: error: ..." on stderr and map to bringup's exit codes.
 */
#ifndef BRINGUP_RUN_H
#define BRINGUP_RUN_H

#define _POSIX_C_SOURCE 200809L   /* first: fsync, getpid, strdup, clock_gettime, getrusage */
#include <stdint.h>
#include <stdio.h>

#include "bu_common.h"
#include "bu_runtime.h"
#include "bu_sampler.h"
#include "bu_tokenizer.h"

/* Exit codes (bringup's convention, bringup/core/errors.py). */
enum { EX_OK = 0, EX_INTERNAL = 1, EX_USAGE = 2, EX_INTEGRITY = 3, EX_UNSUPPORTED = 4, EX_UNAVAILABLE = 5 };

extern const char *const prog;   /* "bringup-run", the name in every message */

/* ---------------- bringup_run.c: messages, memory ---------------- */

/* Print "bringup-run: error: <message>" on stderr; returns code. */
int die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The exit code for a runtime status (docs/runtime.md's table). */
int exit_for_status(int status);
/* realloc that exits (EX_UNAVAILABLE, with a message) when out of memory. */
void *xrealloc(void *p, size_t n);
/* bu_str_add / push that exit the same way when out of memory. */
void str_add(bu_str *s, const char *p, size_t n);
void str_adds(bu_str *s, const char *z);
BU_VEC(ids_t, int32_t, -1)
void ids_add(ids_t *v, int32_t id);
/* CLOCK_MONOTONIC in milliseconds. */
double now_ms(void);

/* ---------------- library.c ---------------- */

typedef struct {
    const bu_api *rt;
    int (*tok_load)(const void *, size_t, bu_tok **, char *, size_t);
    void (*tok_free)(bu_tok *);
    int64_t (*tok_encode)(const bu_tok *, const char *, size_t, unsigned, int32_t *, size_t, char *, size_t);
    int64_t (*tok_decode)(const bu_tok *, int32_t, unsigned, char *, size_t);
    int (*tok_is_eog)(const bu_tok *, int32_t);
    int32_t (*tok_n_vocab)(const bu_tok *);
    bu_sampler *(*sampler_new)(const bu_sampler_params *, size_t, char *, size_t);
    void (*sampler_free)(bu_sampler *);
    int32_t (*sampler_sample)(bu_sampler *, const float *, char *, size_t);
} lib_t;

/* dlopen the model library at path and take the runtime table (checking its ABI version) and the
 * tokenizer and sampler functions. EX_OK, or EX_UNAVAILABLE with a message printed. */
int load_lib(const char *path, lib_t *L);

/* ---------------- chat.c ---------------- */

enum { CF_NAME, CF_HAS_SYSTEM, CF_SYS_PRE, CF_SYS_SUF, CF_USER_PRE, CF_USER_SUF, CF_ASSIST_PRE, CF_ASSIST_SUF,
       CF_GEN_PROMPT, CF_HAS_DEFAULT_SYSTEM, CF_DEFAULT_SYSTEM, CF_SYSTEM_MODE, CF_SYSTEM_SEP, CF_TRIM, CF_N };
#define CF_MAX_STOP 8

typedef struct {
    const char *f[CF_N];              /* the fields, by CF_* index, NUL-terminated inside mem */
    int n_stop;
    const char *stop[CF_MAX_STOP];    /* stop strings */
    char *mem;                        /* owned copy of the blob */
} chat_t;

/* Parse the blob of tensor "chat.format" (docs/runtime.md). 0, or -1 with a message in err. */
int chat_parse(const uint8_t *blob, size_t n, chat_t *c, char *err, size_t cap);
/* The opening of a conversation: [system] + the first user message + the generation prompt.
 * system: --system, or NULL for the format's default (if it has one). */
void chat_first(const chat_t *c, bu_str *out, const char *system, const char *user);
/* A later user message and the generation prompt. */
void chat_next(const chat_t *c, bu_str *out, const char *user);

/* ---------------- args.c ---------------- */

typedef struct {
    const char *lib, *weights, *prompt, *prompt_tokens, *system, *all_logits, *dump_hidden;
    int chat, timing, json, verify, stop, max_tokens, threads, ctx;
    bu_sampler_params sp;
} opts_t;

/* Parse argv into o (--help prints the usage and exits 0). EX_OK, or EX_USAGE with a message. */
int parse_args(int argc, char **argv, opts_t *o);

/* ---------------- json_out.c ---------------- */

typedef struct {
    double prompt_ms, decode_ms, ttft_ms, sample_ms;
    long prompt_tokens, decode_runs;
} timing_t;

/* n bytes as a JSON string; a byte that is not valid UTF-8 becomes U+FFFD and sets *replaced. */
void json_str(FILE *f, const char *s, size_t n, int *replaced);
void json_ids(FILE *f, const int32_t *v, size_t n);
/* The "timing" object's fields (no braces), sep between them. */
void timing_fields(FILE *f, const timing_t *t, const char *sep);
/* The human-readable --timing report. */
void timing_report(FILE *f, const timing_t *t, size_t model_bytes);

/* ---------------- generate.c: one run's state ---------------- */

typedef struct {
    lib_t L;
    bu_model *m;
    bu_tok *tok;        /* NULL: the weights have no tokenizer (only --prompt-tokens) */
    bu_sampler *smp;
    chat_t chat;
    int have_chat;
    const opts_t *o;
    timing_t t;
} sess_t;

/* die() with the runtime's message and the exit code of its status. */
int rt_fail(sess_t *s, int status);
/* Append the ids of text[0..n) (BU_TOK_* flags) to out. EX_OK, or an exit code with a message. */
int encode(sess_t *s, const char *text, size_t n, unsigned flags, ids_t *out);
/* Generate after the evaluated context: up to --max-tokens, stopping at end-of-generation ids and
 * (with a chat format) its stop strings unless --no-stop. stream: print each piece as it comes.
 * *pending = 1 when the last generated id is not yet in the KV cache. */
int generate(sess_t *s, ids_t *gen, bu_str *text, int stream, double t_start, int *pending);

/* ---------------- one_shot.c, interactive.c ---------------- */

int one_shot(sess_t *s);
int interactive(sess_t *s);

/* ---------------- all_logits.c ---------------- */

/* Write n_floats little-endian float32 to path atomically (temporary file, fsync, rename). */
int write_all_logits(const char *path, const float *x, size_t n_floats);

/* ---------------- dump_hidden.c ---------------- */

typedef struct {
    char *id;            /* IR op id, validated as a file name stem */
    int32_t dtype;
    int64_t row_elems;
    int64_t rows;        /* rows written so far = the next expected position */
    int created;         /* the .f32 file exists in the staging folder */
} dump_op;

typedef struct {
    char *stage;         /* staging folder, renamed onto final at the end */
    char *final;         /* DIR without trailing slashes */
    dump_op *ops;        /* by prefill op index */
    int32_t n_ops;
    int32_t *order;      /* op indices in first-observed (execution) order */
    int32_t n_order;
    char msg[768];       /* the first error */
} dump_t;

/* Check DIR (absent or empty) and create its staging folder. EX_OK or an exit code (message printed). */
int dump_begin(dump_t *d, const char *dir_arg);
/* The observer (bu_observer_fn) that appends each prefill observation to its op's file. */
int dump_observe(void *ctx, const bu_observation *o);
/* After a successful prefill of T tokens: check coverage, write the manifest, publish the folder. */
int dump_finish(dump_t *d, int64_t T);
/* Remove the staging folder and what was written into it. */
void dump_discard(dump_t *d);
void dump_free(dump_t *d);

#endif /* BRINGUP_RUN_H */
