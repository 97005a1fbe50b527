/* bringup-run's options (docs/runtime.md "bringup-run"): one table gives the names (llama.cpp's
 * where it has one, the older bringup names as aliases), the parsing, the domain checks and --help,
 * so --help documents every option there is. Long options take their value as the next argument
 * or after '=' (--temp=0.7); a value may start with '-' (-n -1). */
#define _GNU_SOURCE   /* sched_getaffinity, CPU_COUNT */
#include "bringup_run.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
    O_MODEL, O_PROMPT, O_FILE, O_PROMPT_TOKENS, O_NPREDICT, O_THREADS, O_CTX, O_SEED, O_TEMP, O_TOP_K, O_TOP_P,
    O_MIN_P, O_REPEAT_PENALTY, O_REPEAT_LAST_N, O_INTERACTIVE, O_CHAT, O_SYSTEM, O_TIMING, O_JSON, O_VERBOSE,
    O_ALL_LOGITS, O_DUMP_HIDDEN, O_NO_VERIFY, O_NO_STOP, O_VERSION, O_HELP
};

typedef struct {
    int id;
    const char *shrt, *lng, *alias;  /* "-p", "--prompt", "--max-tokens": any may be NULL but lng */
    const char *arg;                 /* the value's name; NULL: a flag */
    const char *help;                /* wrapped by usage() */
} optdef;

static const optdef OPTS[] = {
    {O_MODEL, "-m", "--model", NULL, "DIR",
     "the folder a build produced: results/NAME/build (weights from ../convert/) or an export "
     "bundle (libmodel.so and weights.bump side by side); instead of LIBMODEL WEIGHTS. "
     "Lookup order in docs/runtime.md; -v and --json say which files were used"},
    {O_PROMPT, "-p", "--prompt", NULL, "TEXT", "prompt text (special-token texts in it are parsed as tokens)"},
    {O_FILE, "-f", "--file", NULL, "FILE", "read the prompt from FILE (a regular file or a pipe, at most 64 MiB and n_ctx x the longest token, no NUL)"},
    {O_PROMPT_TOKENS, NULL, "--prompt-tokens", NULL, "IDS", "prompt as token ids, comma or space separated (no tokenizer)"},
    {O_NPREDICT, "-n", "--n-predict", "--max-tokens", "N",
     "tokens to generate (default 128), >= 0; -1 = until end-of-generation or a full context. "
     "Generation also stops earlier at end-of-generation (see --no-stop)"},
    {O_THREADS, "-t", "--threads", NULL, "N",
     "threads for every op of prefill and decode (one persistent pool), 1..256; results are "
     "bit-identical for any N (default: the CPUs this process may run on, at most 256)"},
    {O_CTX, "-c", "--ctx-size", "--ctx", "N", "context length in tokens (default 0 = the planned maximum of the library)"},
    {O_SEED, "-s", "--seed", NULL, "S", "sampler seed >= 0 (default 0); -1 = drawn at start and printed"},
    {O_TEMP, NULL, "--temp", "--temperature", "T", "temperature, a finite number >= 0; 0 = greedy (default 0)"},
    {O_TOP_K, NULL, "--top-k", NULL, "K", "keep the K most likely tokens, K >= 0 (default 0 = all)"},
    {O_TOP_P, NULL, "--top-p", NULL, "P", "keep the smallest set of tokens with mass >= P, P in (0, 1] (default 1 = all)"},
    {O_MIN_P, NULL, "--min-p", NULL, "P",
     "keep tokens with probability >= P x the best one's, P in [0, 1] (default 0 = all)"},
    {O_REPEAT_PENALTY, NULL, "--repeat-penalty", NULL, "F",
     "divide (logit > 0) or multiply (logit <= 0) the logits of the ids among the last "
     "--repeat-last-n context ids by F, a finite number > 0 (default 1 = off)"},
    {O_REPEAT_LAST_N, NULL, "--repeat-last-n", NULL, "N",
     "ids the repeat penalty looks back over, >= 0 (default 64; 0 = off; -1 = the context length)"},
    {O_INTERACTIVE, "-i", "--interactive", NULL, NULL,
     "chat on the terminal (the default without a prompt); with -p/-f the prompt is the first turn"},
    {O_CHAT, NULL, "--chat", NULL, NULL, "wrap the prompt as a user turn in the model's chat format"},
    {O_SYSTEM, "-sys", "--system", "--system-prompt", "TEXT",
     "system message for --chat and the chat loop (default: the chat format's own, if any)"},
    {O_TIMING, NULL, "--timing", NULL, NULL, "print prompt-eval / decode times, TTFT, peak RSS to stderr"},
    {O_JSON, NULL, "--json", NULL, NULL,
     "print one JSON object {prompt_tokens, generated_tokens, text, files, sampler, timing, ...}"},
    {O_VERBOSE, "-v", "--verbose", NULL, NULL, "say on stderr which files, threads, context and sampler are used"},
    {O_ALL_LOGITS, NULL, "--all-logits", NULL, "PATH",
     "write the teacher-forced logits of every prompt position to PATH as raw little-endian "
     "float32 [n_prompt_tokens, n_vocab]; PATH must be a regular file or absent (written atomically)"},
    {O_DUMP_HIDDEN, NULL, "--dump-hidden", NULL, "DIR",
     "write every prefill op's output (all prompt rows, all chunks) to DIR: manifest.json + "
     "<IR op id>.f32 (docs/parity.md); needs -n 0. DIR must be absent or an empty folder (not a "
     "symbolic link); it appears complete or not at all"},
    {O_NO_VERIFY, NULL, "--no-verify", NULL, NULL, "skip the weights payload SHA-256 check (says so on stderr)"},
    {O_NO_STOP, NULL, "--no-stop", NULL, NULL, "do not stop at end-of-generation tokens or chat stop strings"},
    {O_VERSION, NULL, "--version", NULL, NULL, "print the version and exit"},
    {O_HELP, "-h", "--help", NULL, NULL, "this text"},
};
#define N_OPTS (sizeof OPTS / sizeof OPTS[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: %s -m DIR [options]\n       %s LIBMODEL WEIGHTS [options]\n\n"
               "Run a model that bringup built. Options (long ones also as --name=value):\n\n", prog, prog);
    for (size_t i = 0; i < N_OPTS; i++) {
        const optdef *d = &OPTS[i];
        char left[64];
        snprintf(left, sizeof left, "%s%s%s%s%s", d->shrt ? d->shrt : "", d->shrt ? ", " : "    ", d->lng,
                 d->arg ? " " : "", d->arg ? d->arg : "");
        fprintf(f, "  %-24s", left);
        if (strlen(left) > 24) fprintf(f, "\n  %-24s", "");
        /* the help words, wrapped at 100 columns */
        size_t col = 0;
        for (const char *h = d->help; *h;) {
            size_t w = strcspn(h, " ");
            if (col && col + 1 + w > 73) {
                fprintf(f, "\n  %-24s", "");
                col = 0;
            }
            fprintf(f, " %.*s", (int)w, h);
            col += w + 1;
            h += w;
            while (*h == ' ') h++;
        }
        fputc('\n', f);
        if (d->alias) fprintf(f, "  %-24s (also %s)\n", "", d->alias);
    }
    fprintf(f,
        "\n"
        "Without -p, -f or --prompt-tokens (or with -i): a chat on stdin. On a terminal lines can be\n"
        "edited (arrows, Home/End, Ctrl-A/E/K/U, Backspace, Delete; Up/Down for history). A line ending\n"
        "in '\\' continues on the next. /help lists the slash commands (/reset, /stats, /system, /quit),\n"
        "which are not sent to the model ('//' sends a line starting with '/'). Ctrl-C stops the answer;\n"
        "Ctrl-C at the prompt, a second Ctrl-C, or end of input (Ctrl-D) quits.\n"
        "\n"
        "exit codes: 0 ok, 1 internal error (kernel failure), 2 usage or bad input (an option outside\n"
        "its domain, a prompt longer than the context, a token id out of range, an output path that is\n"
        "not a regular file), 3 integrity (hash mismatch, corrupt or wrong weights), 4 unsupported (no\n"
        "chat format in the weights), 5 unavailable (cannot find or load the library, cannot read the\n"
        "weights, out of memory)\n");
}

static void version(void)
{
    printf("%s %s (bringup %s; runtime ABI %d, sampler ABI %d; built with gcc %s)\n", prog, BRINGUP_VERSION,
           BRINGUP_VERSION, BU_RT_ABI_VERSION, BU_SAMPLER_ABI_VERSION, __VERSION__);
}

int default_threads(void)
{
    cpu_set_t set;
    int n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n < 1) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    return n > 256 ? 256 : n;
}

static int int_in(const char *opt, const char *v, long lo, long hi, const char *what, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) return die(EX_USAGE, "%s %s: must be %s", opt, v, what);
    *out = (int)x;
    return EX_OK;
}

/* A float option: a finite number (NaN and infinities refused, also once rounded to float) in
 * [lo, hi], with lo excluded when open_lo. */
static int float_in(const char *opt, const char *v, double lo, int open_lo, double hi, const char *what, float *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    float f = (float)x;
    if (end == v || *end || !isfinite(x) || !isfinite(f) || x < lo || (open_lo && x == lo) || x > hi)
        return die(EX_USAGE, "%s %s: must be %s", opt, v, what);
    *out = f;
    return EX_OK;
}

static int seed_arg(const char *opt, const char *v, opts_t *o)
{
    if (!strcmp(v, "-1")) {
        o->seed_random = 1;
        return EX_OK;
    }
    char *end;
    errno = 0;
    unsigned long long s = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || v[0] == '+' || v[0] == ' ')
        return die(EX_USAGE, "%s %s: must be an integer in [0, 2^64) or -1 (drawn at start)", opt, v);
    o->sp.seed = (uint64_t)s;
    o->seed_random = 0;
    return EX_OK;
}

static int apply(const optdef *d, const char *name, const char *v, opts_t *o)
{
    switch (d->id) {
    case O_MODEL: o->model_dir = v; return EX_OK;
    case O_PROMPT: o->prompt = v; return EX_OK;
    case O_FILE: o->prompt_file = v; return EX_OK;
    case O_PROMPT_TOKENS: o->prompt_tokens = v; return EX_OK;
    case O_SYSTEM: o->system = v; return EX_OK;
    case O_ALL_LOGITS: o->all_logits = v; return EX_OK;
    case O_DUMP_HIDDEN: o->dump_hidden = v; return EX_OK;
    case O_NPREDICT: return int_in(name, v, -1, INT32_MAX, "an integer >= 0, or -1 (until the context is full)", &o->max_tokens);
    case O_THREADS: return int_in(name, v, 1, 256, "an integer in [1, 256]", &o->threads);
    case O_CTX: return int_in(name, v, 0, INT32_MAX, "an integer >= 0 (0 = the planned maximum)", &o->ctx);
    case O_TOP_K: return int_in(name, v, 0, INT32_MAX, "an integer >= 0 (0 = all)", &o->sp.top_k);
    case O_REPEAT_LAST_N: return int_in(name, v, -1, INT32_MAX, "an integer >= 0, or -1 (the context length)", &o->repeat_last_n);
    case O_SEED: return seed_arg(name, v, o);
    case O_TEMP: return float_in(name, v, 0, 0, INFINITY, "a finite number >= 0 (0 = greedy)", &o->sp.temperature);
    case O_TOP_P: return float_in(name, v, 0, 1, 1, "a number in (0, 1]", &o->sp.top_p);
    case O_MIN_P: return float_in(name, v, 0, 0, 1, "a number in [0, 1]", &o->sp.min_p);
    case O_REPEAT_PENALTY: return float_in(name, v, 0, 1, INFINITY, "a finite number > 0 (1 = off)", &o->sp.repeat_penalty);
    case O_INTERACTIVE: o->interactive = 1; return EX_OK;
    case O_CHAT: o->chat = 1; return EX_OK;
    case O_TIMING: o->timing = 1; return EX_OK;
    case O_JSON: o->json = 1; return EX_OK;
    case O_VERBOSE: o->verbose = 1; return EX_OK;
    case O_NO_VERIFY: o->verify = 0; return EX_OK;
    case O_NO_STOP: o->stop = 0; return EX_OK;
    case O_VERSION: version(); exit(EX_OK);
    case O_HELP: usage(stdout); exit(EX_OK);
    }
    return die(EX_INTERNAL, "option table entry %d has no handler", d->id);
}

static const optdef *find(const char *name)
{
    for (size_t i = 0; i < N_OPTS; i++) {
        const optdef *d = &OPTS[i];
        if ((d->shrt && !strcmp(name, d->shrt)) || !strcmp(name, d->lng) || (d->alias && !strcmp(name, d->alias)))
            return d;
    }
    return NULL;
}

/* The combinations that cannot mean anything. */
static int check_combinations(const opts_t *o, int npos)
{
    if (o->model_dir && npos) return die(EX_USAGE, "give -m DIR or LIBMODEL WEIGHTS, not both");
    if (!o->model_dir && npos != 2) {
        usage(stderr);
        return EX_USAGE;
    }
    if (o->model_dir && !o->model_dir[0]) return die(EX_USAGE, "-m: empty folder name");
    int sources = !!o->prompt + !!o->prompt_file + !!o->prompt_tokens;
    if (sources > 1) return die(EX_USAGE, "give one of -p/--prompt, -f/--file, --prompt-tokens");
    int prompt = sources > 0;
    if (o->chat && o->prompt_tokens) return die(EX_USAGE, "--chat formats text; it cannot wrap --prompt-tokens");
    if (o->interactive && o->prompt_tokens) return die(EX_USAGE, "-i chats in text; it cannot start from --prompt-tokens");
    if (o->all_logits && !prompt) return die(EX_USAGE, "--all-logits needs a prompt");
    if (o->dump_hidden && !prompt) return die(EX_USAGE, "--dump-hidden needs a prompt");
    int chat_loop = o->interactive || !prompt;
    if (chat_loop && (o->all_logits || o->dump_hidden || o->json))
        return die(EX_USAGE, "--all-logits, --dump-hidden and --json apply to a one-shot run (a prompt without -i)");
    if (o->dump_hidden && o->max_tokens != 0)
        return die(EX_USAGE, "--dump-hidden records the prompt's prefill only: add -n 0 (--max-tokens 0)");
    if (o->dump_hidden && !o->dump_hidden[0]) return die(EX_USAGE, "--dump-hidden: empty directory name");
    if (o->all_logits && !o->all_logits[0]) return die(EX_USAGE, "--all-logits: empty file name");
    if (o->system && !o->chat && !chat_loop)
        return die(EX_USAGE, "--system applies to --chat (or the chat loop)");
    return EX_OK;
}

int parse_args(int argc, char **argv, opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->verify = 1;
    o->stop = 1;
    o->max_tokens = 128;
    o->threads = default_threads();
    o->repeat_last_n = 64;
    o->sp.top_p = 1.0f;
    o->sp.repeat_penalty = 1.0f;
    int npos = 0, only_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && !strcmp(a, "--")) {
            only_pos = 1;
            continue;
        }
        if (only_pos || a[0] != '-' || !a[1]) {
            if (npos == 0) o->lib = a;
            else if (npos == 1) o->weights = a;
            else return die(EX_USAGE, "unexpected argument %s (see --help)", a);
            npos++;
            continue;
        }
        char name[64];
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL, *v = NULL;
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        if (len >= sizeof name) return die(EX_USAGE, "unknown option %.40s... (see --help)", a);
        memcpy(name, a, len);
        name[len] = 0;
        const optdef *d = find(name);
        if (!d) return die(EX_USAGE, "unknown option %s (see --help)", name);
        if (d->arg) {
            if (eq) v = eq + 1;
            else if (i + 1 < argc) v = argv[++i];
            else return die(EX_USAGE, "%s needs a value (%s)", name, d->arg);
        } else if (eq) {
            return die(EX_USAGE, "%s takes no value", name);
        }
        int rc = apply(d, name, v, o);
        if (rc) return rc;
    }
    return check_combinations(o, npos);
}
