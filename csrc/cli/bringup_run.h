/* bringup_run.h - what the files of the bringup-run CLI share (not installed). One file per concern:
 *
 *   bringup_run.c   main(): open the model, the tokenizer and the chat format, run, exit codes
 *   args.c          options (one table: parsing, domains, --help)
 *   model_files.c   -m DIR (which library and weights), -f FILE, the chat format's recorded source
 *   library.c       the functions taken from libmodel.so (dlopen)
 *   chat.c          the chat format (tensor "chat.format"): parse and render conversation turns
 *   generate.c      tokenizing, sampling and the generation loop
 *   one_shot.c      a --prompt / --prompt-tokens run (with --all-logits, --dump-hidden, --json)
 *   interactive.c   the chat loop: turns, slash commands, Ctrl-C
 *   line_edit.c     the line editor of the chat loop on a terminal (history, arrows, Ctrl-A/E)
 *   json_out.c      JSON strings and ids, the timing fields and the --timing report
 *   out_file.c      output files: only regular files, written atomically (--all-logits)
 *   dump_hidden.c   the --dump-hidden folder (every prefill op's output, for X-ray)
 *   habits.c        llama-cli's habits: -e, -r, -b, --mlock, the prompt's echo, the notes
 *   bu_server.c ... --server: the OpenAI-compatible HTTP endpoint (its files: bu_server.h)
 *
 * Errors print one line "bringup-run: error: ..." on stderr and map to bringup's exit codes.
 */
#ifndef BRINGUP_RUN_H
#define BRINGUP_RUN_H

#define _POSIX_C_SOURCE 200809L   /* first: fsync, getpid, strdup, clock_gettime, getrusage */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "bu_common.h"
#include "bu_runtime.h"
#include "bu_sampler.h"
#include "bu_tokenizer.h"

/* Exit codes (bringup's convention, bringup/core/errors.py). */
enum { EX_OK = 0, EX_INTERNAL = 1, EX_USAGE = 2, EX_INTEGRITY = 3, EX_UNSUPPORTED = 4, EX_UNAVAILABLE = 5 };

/* The project version (pyproject.toml; tests/test_cli_native.py holds them equal). */
#define BRINGUP_VERSION "0.1.0"

extern const char *const prog;   /* "bringup-run", the name in every message */

/* ---------------- bringup_run.c: messages, memory ---------------- */

/* The one escaping rule for what bringup-run prints that came from a file or the command line
 * (paths, names and strings from the weights, typed lines): newline, tab and CR as \n \t \r,
 * other C0 controls, DEL, C1 controls and bytes that are not UTF-8 as \xNN, bidi / zero-width /
 * separator code points as \uNNNN (bringup's Python rule, errors.one_line, escapes the same), and
 * past SHOWN_MAX bytes a cut said in the text ("...[N more bytes]"). Every die() and say()
 * message goes through it whole, so one message is one line and cannot drive the terminal. */
#define SHOWN_MAX 8192
void put_shown(FILE *f, const char *s, size_t n);
/* Print "bringup-run: error: <message>" on stderr (escaped: put_shown); returns code. */
int die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print "bringup-run: <message>" on stderr (escaped: put_shown): a note that shows a name. */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
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

/* 0 when path names a regular file (a symlink to one is fine); 1 when it is something else, *what
 * saying what ("a FIFO", "a folder", "a character device", ...); -1 when it cannot be opened,
 * *what = strerror. Opened with O_NONBLOCK, so a FIFO cannot block the check; closed again. */
int file_kind(const char *path, const char **what);

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
    int (*sampler_accept)(bu_sampler *, int32_t);
    void (*sampler_reset)(bu_sampler *);
    const char *(*isa_name)(void); /* bu_isa_name: ISA level of the fast kernels (printed by --timing, --json) */
    size_t (*isa_report)(char *, size_t); /* bu_isa_report: each linear class's level and why (--json) */
    const char *(*sha256_impl)(void); /* bu_sha256_impl: "sha-ni" / "portable" */
} lib_t;

/* dlopen the model library at path and take the runtime table and the tokenizer and sampler
 * functions (checking the runtime's and the sampler's ABI versions). EX_OK, or EX_UNAVAILABLE
 * with a message printed. */
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
/* An earlier assistant answer: its content and the turn's suffix (the server renders a history). */
void chat_answer(const chat_t *c, bu_str *out, const char *text);

/* ---------------- args.c ---------------- */

typedef struct {
    const char *model_dir;          /* -m DIR, or NULL (LIB WEIGHTS given) */
    const char *lib, *weights;      /* as given, or found in DIR (model_files.c) */
    const char *found_by;           /* how lib and weights were chosen, for -v and --json */
    const char *prompt, *prompt_file, *prompt_tokens, *system, *all_logits, *dump_hidden;
    int chat, interactive, timing, json, verify, stop, verbose;
    /* llama-cli's habits (issue 33) */
    int cnv, no_cnv, single_turn, color, escape, display_prompt, mlock, no_mmap;
    int batch;                      /* -b: prompt tokens per prefill call; 0 = the planned chunk */
    const char *ngl;                /* -ngl N as given (a note: CPU only), or NULL */
#define MAX_REVERSE 16
    const char *reverse[MAX_REVERSE];   /* -r: stop when the generated text ends with one */
    int n_reverse;
    int max_tokens;                 /* -n: >= 0, or -1 = until end-of-generation or a full context */
    int threads, ctx, repeat_last_n;/* repeat_last_n -1: the context length */
    int seed_random;                /* -s -1: a seed drawn at start (printed) */
    bu_sampler_params sp;
    struct {                        /* --server (bu_server.c) */
        int on, set, port, timeout_s, queue;   /* set: a server option was given */
        long max_body;
        const char *host, *alias;
    } srv;
#define N_OWNED (3 + 2 + MAX_REVERSE)
    char *owned[N_OWNED];           /* storage of a -f prompt, the paths found in DIR, the -e copies */
} opts_t;

/* Parse argv into o (--help / --version print and exit 0). EX_OK, or EX_USAGE with a message. */
int parse_args(int argc, char **argv, opts_t *o);
/* The threads used when -t is not given: the CPUs this process may run on (at most 256). */
int default_threads(void);

/* ---------------- model_files.c ---------------- */

/* -m DIR: set o->lib, o->weights, o->found_by (lookup order in docs/runtime.md). EX_OK, or an exit
 * code with a message naming every path tried. Without -m: found_by = "given". */
int resolve_model(opts_t *o);
/* -f FILE: read the prompt into o->prompt (a regular file or a pipe, at most 64 MiB, no NUL). */
int read_prompt_file(opts_t *o);
/* Where the chat format in the weights came from, as weights_manifest.json beside the weights
 * records it (the convert stage's "reason": *recorded = 1), or a sentence saying why that is not
 * known (*recorded = 0). Owned by the caller; printed with say() (escaped). */
char *chat_format_source(const char *weights, int *recorded);

/* ---------------- json_out.c ---------------- */

typedef struct {
    double prompt_ms, decode_ms, ttft_ms, sample_ms;
    long prompt_tokens, decode_runs, sample_runs;
    double start_ms;         /* now_ms() when main started */
    double open_ms;          /* the runtime's open: mapping, header checks, the payload SHA-256 when verified */
    double load_ms;          /* start to ready for the prompt: options, library, open, tokenizer, chat format, sampler */
    double first_token_ms;   /* start to the first generated token (0: none was generated) */
    int verified;            /* the payload SHA-256 was checked in open */
    const char *sha256_impl; /* the runtime's SHA-256 path ("sha-ni", "portable", "unknown": an older library) */
} timing_t;

/* n bytes as a JSON string; a byte that is not valid UTF-8 becomes U+FFFD and sets *replaced. */
void json_str(FILE *f, const char *s, size_t n, int *replaced);
void json_ids(FILE *f, const int32_t *v, size_t n);
/* The "timing" object's fields (no braces), sep between them; total_ms is start to now. */
void timing_fields(FILE *f, const timing_t *t, const char *sep);
/* The human-readable --timing report (perf_report follows it). */
void timing_report(FILE *f, const timing_t *t, size_t model_bytes);
/* --timing in llama.cpp's llama_perf shape: sampling, load (open, weights check, first token),
 * prompt eval, eval and total time (start to now). */
void perf_report(FILE *f, const timing_t *t);

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

/* ---------------- one_shot.c, interactive.c ---------------- */

int one_shot(sess_t *s);
int interactive(sess_t *s);
/* --server (bu_server.c, bu_server.h): serve until SIGTERM / SIGINT; EX_OK then. */
int server_run(sess_t *s);

/* ---------------- line_edit.c ---------------- */

enum { LE_LINE, LE_EOF, LE_INTERRUPT, LE_TOOLONG };
typedef struct {
    size_t max;       /* bytes a turn may hold (s->prompt_cap); past it the line is read to its end,
                       * not kept, and LE_TOOLONG returned; 0: no cap */
    char **hist;      /* oldest first */
    size_t n_hist;
    int raw;          /* 1: stdin and stderr are a terminal (not TERM=dumb): edit in raw mode */
    volatile sig_atomic_t *interrupt;  /* set by a SIGINT handler: a waiting read returns LE_INTERRUPT */
} ledit_t;
#define LE_HISTORY_MAX 500   /* lines kept; the oldest is dropped beyond */

/* Whether to edit (raw mode) or read plain lines; no terminal state is touched yet. interrupt:
 * the flag a SIGINT handler sets (or NULL). */
void le_init(ledit_t *e, volatile sig_atomic_t *interrupt);
/* One line (without its newline; NUL bytes kept, n counts them) appended to out: LE_LINE, LE_EOF (end of
 * input on an empty line), LE_INTERRUPT (Ctrl-C at the prompt; or SIGINT while reading) or
 * LE_TOOLONG (out would pass e->max bytes: the rest of the line was read and dropped). A line
 * read is added to the history (unless it holds a NUL). */
int le_read(ledit_t *e, const char *prompt, bu_str *out);
void le_free(ledit_t *e);

/* ---------------- habits.c ---------------- */

/* -e: the escapes of the prompt, --system and -r processed (copies owned by o). EX_OK or EX_USAGE. */
int apply_escapes(opts_t *o);
/* One note each on stderr for -ngl (CPU only), --no-mmap, -cnv with a prompt. */
void habit_notes(const opts_t *o);
/* -b with a value the plan cannot honour as given: say what runs. */
void batch_note(const sess_t *s);
/* --mlock: mlock the weights mapping. EX_OK, or EX_UNAVAILABLE with RLIMIT_MEMLOCK in the message. */
int lock_weights(sess_t *s);
/* The runtime's prefill in calls of at most -b tokens (all at once without -b). A runtime status. */
int prefill_batched(sess_t *s, const int32_t *ids, int32_t n);
/* The prompt's echo on stdout (--color: yellow on a terminal). */
void echo_prompt(const sess_t *s, const char *text);
/* 1 when one of the -r texts occurs in text[from..) ending past byte before (the newest piece). */
int reverse_prompt_seen(const sess_t *s, const bu_str *text, size_t from, size_t before);

/* ---------------- out_file.c ---------------- */

/* Check that path can be created or replaced as a regular file: not a directory, FIFO, device,
 * socket or symbolic link, in an existing folder. EX_OK, or EX_USAGE with a message (what: the
 * option, for the message). */
int check_output_path(const char *what, const char *path);
/* Write n bytes to path: a temporary file in the same folder, fsync, rename over path (checked
 * again just before). path is then complete or as it was. EX_OK or an exit code (message printed). */
int write_output_file(const char *what, const char *path, const void *data, size_t n);
/* --all-logits: n_floats little-endian float32. */
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
