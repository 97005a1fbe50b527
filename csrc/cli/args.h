/* args.h (bringup-run): The options: one table for parsing, domains and --help (args.c). */
#ifndef BU_CLI_ARGS_H
#define BU_CLI_ARGS_H

#include "util.h"

#include "bu_sampler.h"

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
    const char *flash_attn;         /* -fa on|off|auto as given (a note: the build's kernel), or NULL */
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

#endif /* BU_CLI_ARGS_H */
