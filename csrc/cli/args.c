/* bringup-run's options (docs/runtime.md "bringup-run"): one table gives the names (llama.cpp's
 * where it has one, the older bringup names as aliases), the parsing, the domain checks and --help,
 * so --help documents every option there is. libc's getopt_long parses (built from the table, in
 * argument order: "-" mode, so positionals may come anywhere; "--" ends the options). Long options
 * take their value as the next argument or after '=' (--temp=0.7); a value may start with '-'
 * (-n -1). llama.cpp's single-dash names (-ngl, -fa, -cnv, -no-cnv, -st, -sys) are table entries too:
 * an argument that is exactly one of them is handed to getopt_long as its long name. Any other
 * single-dash argument longer than one letter is refused (with the nearest name), so -fx is never
 * read as -f a, and short options are neither bundled (-iv) nor glued to a value (-n5). A long
 * name must be typed whole (getopt_long's abbreviations are refused, as before). */
#define _GNU_SOURCE   /* sched_getaffinity, CPU_COUNT */
#include "args.h"

#include "bu_runtime.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
    O_MODEL, O_PROMPT, O_FILE, O_PROMPT_TOKENS, O_NPREDICT, O_THREADS, O_CTX, O_SEED, O_TEMP, O_TOP_K, O_TOP_P,
    O_MIN_P, O_REPEAT_PENALTY, O_REPEAT_LAST_N, O_INTERACTIVE, O_CHAT, O_SYSTEM, O_TIMING, O_JSON, O_VERBOSE,
    O_ALL_LOGITS, O_DUMP_HIDDEN, O_NO_VERIFY, O_NO_STOP, O_VERSION, O_HELP,
    /* llama-cli's habits (issue 33) */
    O_NGL, O_FLASH_ATTN, O_CNV, O_NO_CNV, O_SINGLE_TURN, O_COLOR, O_REVERSE, O_ESCAPE, O_NO_ESCAPE, O_NO_DISPLAY_PROMPT, O_BATCH,
    O_MLOCK, O_NO_MMAP,
    /* --server (bu_server.c; llama-server's names) */
    O_SERVER, O_HOST, O_PORT, O_TIMEOUT, O_QUEUE, O_MAX_BODY, O_ALIAS
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
    {O_NO_STOP, NULL, "--no-stop", "--ignore-eos", NULL,
     "do not stop at end-of-generation tokens or chat stop strings (-r still stops)"},
    {O_REVERSE, "-r", "--reverse-prompt", NULL, "TEXT",
     "stop generating once the generated text contains TEXT (the token completing it is printed); up "
     "to 16 times. In the chat loop the answer ends there"},
    {O_ESCAPE, "-e", "--escape", NULL, NULL,
     "process escapes (\\n \\t \\r \\\\ \\' \\\" \\a \\b \\f \\v \\xHH) in the prompt (-p, -f), --system and -r; "
     "others stay as typed; a NUL is refused. Off by default (llama-cli: on)"},
    {O_NO_ESCAPE, NULL, "--no-escape", NULL, NULL, "take the prompt as typed (the default)"},
    {O_NO_DISPLAY_PROMPT, NULL, "--no-display-prompt", NULL, NULL,
     "do not echo the prompt text (-p, -f) on stdout before the answer of a one-shot run (echoed by "
     "default, as llama-cli does; never with --json or --prompt-tokens)"},
    {O_COLOR, NULL, "--color", NULL, NULL, "show the echoed prompt in a color when stdout is a terminal"},
    {O_CNV, "-cnv", "--conversation", NULL, NULL,
     "the chat loop (= -i); -p/-f is its first user turn (llama-cli takes it as the system message: use -sys)"},
    {O_NO_CNV, "-no-cnv", "--no-conversation", NULL, NULL, "a one-shot run (the default with a prompt); needs a prompt"},
    {O_SINGLE_TURN, "-st", "--single-turn", NULL, NULL,
     "one chat turn, then exit: with a prompt = --chat; without, the chat loop ends after its first answer"},
    {O_BATCH, "-b", "--batch-size", NULL, "N",
     "prompt tokens per prefill call, >= 1 (default: all, which the library evaluates in its planned "
     "prefill chunks; N larger than the chunk runs in planned chunks, said on stderr)"},
    {O_NGL, "-ngl", "--n-gpu-layers", NULL, "N",
     "accepted for llama-cli's command lines (an integer >= -1, auto or all): this program runs on the "
     "CPU only, says so once on stderr and runs"},
    {O_FLASH_ATTN, "-fa", "--flash-attn", NULL, "on|off|auto",
     "accepted for llama-cli's command lines: the attention is the certified kernel of the build "
     "(docs/kernels.md) whatever is given; says so once on stderr and runs"},
    {O_MLOCK, NULL, "--mlock", NULL, NULL,
     "lock the weights mapping in RAM (mlock); refused with exit 5 when RLIMIT_MEMLOCK (ulimit -l) is too small"},
    {O_NO_MMAP, NULL, "--no-mmap", NULL, NULL,
     "accepted: the weights are always mapped read-only (the runtime's design), said once on stderr; "
     "--mlock keeps them resident"},
    {O_SERVER, NULL, "--server", NULL, NULL,
     "serve the model over HTTP (OpenAI-compatible: /v1/chat/completions, /v1/completions, /v1/models, "
     "/health; docs/runtime.md \"The server\") until SIGTERM or Ctrl-C; -n, --temp, --top-k, --top-p, "
     "--min-p, --repeat-penalty, -s, -r are the defaults a request may override"},
    {O_HOST, NULL, "--host", NULL, "HOST", "--server: the address to listen on (default 127.0.0.1: this machine only)"},
    {O_PORT, NULL, "--port", NULL, "N", "--server: the TCP port, 0..65535 (default 8080; 0 = a free port, printed)"},
    {O_TIMEOUT, "-to", "--timeout", NULL, "S",
     "--server: seconds a client has to send its request and to take each part of the answer, 1..3600 (default 60)"},
    {O_QUEUE, NULL, "--queue", NULL, "N",
     "--server: requests that may wait while one generates, 0..64 (default 8); more get 503 at once"},
    {O_MAX_BODY, NULL, "--max-body", NULL, "BYTES",
     "--server: the largest request body accepted, 1024..67108864 (default 1048576); larger gets 413 unread"},
    {O_ALIAS, "-a", "--alias", NULL, "NAME", "--server: the model's name in /v1/models and the responses (default: the -m folder's)"},
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
    case O_CNV: o->interactive = o->cnv = 1; return EX_OK;
    case O_NO_CNV: o->no_cnv = 1; return EX_OK;
    case O_SINGLE_TURN: o->single_turn = 1; return EX_OK;
    case O_COLOR: o->color = 1; return EX_OK;
    case O_ESCAPE: o->escape = 1; return EX_OK;
    case O_NO_ESCAPE: o->escape = 0; return EX_OK;
    case O_NO_DISPLAY_PROMPT: o->display_prompt = 0; return EX_OK;
    case O_MLOCK: o->mlock = 1; return EX_OK;
    case O_NO_MMAP: o->no_mmap = 1; return EX_OK;
    case O_BATCH: return int_in(name, v, 1, INT32_MAX, "an integer >= 1", &o->batch);
    case O_SERVER: o->srv.on = 1; return EX_OK;
    case O_HOST: o->srv.set = 1, o->srv.host = v; return v[0] ? EX_OK : die(EX_USAGE, "%s: empty address", name);
    case O_ALIAS: o->srv.set = 1, o->srv.alias = v; return v[0] && strlen(v) < 200 ? EX_OK : die(EX_USAGE, "%s: 1 to 199 bytes", name);
    case O_PORT: o->srv.set = 1; return int_in(name, v, 0, 65535, "an integer in [0, 65535] (0 = a free port)", &o->srv.port);
    case O_TIMEOUT: o->srv.set = 1; return int_in(name, v, 1, 3600, "an integer in [1, 3600] (seconds)", &o->srv.timeout_s);
    case O_QUEUE: o->srv.set = 1; return int_in(name, v, 0, 64, "an integer in [0, 64]", &o->srv.queue);
    case O_MAX_BODY: {
        int b;
        o->srv.set = 1;
        if (int_in(name, v, 1024, 64 << 20, "an integer in [1024, 67108864] (bytes)", &b)) return EX_USAGE;
        o->srv.max_body = b;
        return EX_OK;
    }
    case O_NGL: {
        int n;
        if (strcmp(v, "auto") && strcmp(v, "all") && int_in(name, v, -1, INT32_MAX, "an integer >= -1, auto or all", &n))
            return EX_USAGE;
        o->ngl = v;
        return EX_OK;
    }
    case O_FLASH_ATTN:
        if (strcmp(v, "on") && strcmp(v, "off") && strcmp(v, "auto"))
            return die(EX_USAGE, "%s: '%s' is not on, off or auto", name, v);
        o->flash_attn = v;
        return EX_OK;
    case O_REVERSE:
        if (!v[0]) return die(EX_USAGE, "%s: empty text (it would stop at once)", name);
        if (o->n_reverse == MAX_REVERSE) return die(EX_USAGE, "%s: at most %d reverse prompts", name, MAX_REVERSE);
        o->reverse[o->n_reverse++] = v;
        return EX_OK;
    }
    return die(EX_INTERNAL, "option table entry %d has no handler", d->id);
}

/* The entry named name exactly ("-p", "--prompt", "--max-tokens", "-ngl"), or NULL. */
static const optdef *find(const char *name)
{
    for (size_t i = 0; i < N_OPTS; i++) {
        const optdef *d = &OPTS[i];
        if ((d->shrt && !strcmp(name, d->shrt)) || !strcmp(name, d->lng) || (d->alias && !strcmp(name, d->alias)))
            return d;
    }
    return NULL;
}

/* Edit distance (optimal string alignment: a swap of two neighbours counts 1) of a and b, both
 * under 64 bytes. */
static size_t distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b), d[64][64];
    for (size_t i = 0; i <= n; i++) d[i][0] = i;
    for (size_t j = 0; j <= m; j++) d[0][j] = j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

/* "unknown option NAME (see --help)", with the nearest name when it is at most a third of NAME's
 * letters away (a typo, not another word). */
static int unknown(const char *name)
{
    if (strlen(name) >= 64) return die(EX_USAGE, "unknown option %.40s... (see --help)", name);
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < N_OPTS; i++) {
        const char *names[3] = {OPTS[i].shrt, OPTS[i].lng, OPTS[i].alias};
        for (int k = 0; k < 3; k++) {
            size_t dd = names[k] ? distance(name, names[k]) : (size_t)-1;
            if (dd < best_d) best_d = dd, best = names[k];
        }
    }
    if (best && best_d * 3 <= strlen(name) && best_d <= 3)
        return die(EX_USAGE, "unknown option %s; did you mean %s? (see --help)", name, best);
    return die(EX_USAGE, "unknown option %s (see --help)", name);
}

/* getopt_long's tables from OPTS: the one-letter short names in shorts ("-:" first: arguments in
 * order, a missing value reported as ':'), every long name and alias in longs; a long option's
 * val is 256 + its OPTS index. */
static void getopt_tables(char *shorts, struct option *longs)
{
    char *p = shorts;
    *p++ = '-';
    *p++ = ':';
    size_t k = 0;
    for (size_t i = 0; i < N_OPTS; i++) {
        const optdef *d = &OPTS[i];
        if (d->shrt && strlen(d->shrt) == 2) {
            *p++ = d->shrt[1];
            if (d->arg) *p++ = ':';
        }
        const char *names[2] = {d->lng, d->alias};
        for (int j = 0; j < 2; j++)
            if (names[j]) longs[k++] = (struct option){names[j] + 2, d->arg ? required_argument : no_argument, NULL, 256 + (int)i};
    }
    *p = 0;
    longs[k] = (struct option){0, 0, 0, 0};
}

/* The entry getopt_long returned (c: a short letter or 256 + index). */
static const optdef *entry_of(int c)
{
    if (c >= 256) return &OPTS[c - 256];
    char s[3] = {'-', (char)c, 0};
    return find(s);
}

/* The option's name as typed in arg (up to '=' for a long one), in name[64]; 0 when too long. */
static int typed_name(const char *arg, char name[64])
{
    size_t len = arg[1] == '-' && strchr(arg, '=') ? (size_t)(strchr(arg, '=') - arg) : strlen(arg);
    if (len >= 64) return 0;
    memcpy(name, arg, len);
    name[len] = 0;
    return 1;
}

/* --server: the server's options need it; it takes no prompt and no one-shot output. */
static int server_combinations(opts_t *o)
{
    if (!o->srv.on) return die(EX_USAGE, "--host, --port, --timeout, --queue, --max-body and --alias apply to --server");
    if (o->prompt || o->prompt_file || o->prompt_tokens || o->interactive || o->chat || o->json || o->all_logits ||
        o->dump_hidden || o->system || o->single_turn || o->no_cnv)
        return die(EX_USAGE, "--server takes its prompts from HTTP requests: -p, -f, --prompt-tokens, -i, --chat, --system, "
                   "-st, -no-cnv, --json, --all-logits and --dump-hidden do not apply");
    return EX_OK;
}

/* The combinations that cannot mean anything. */
static int check_combinations(opts_t *o, int npos)
{
    if (o->model_dir && npos) return die(EX_USAGE, "give -m DIR or LIBMODEL WEIGHTS, not both");
    /* one line that says what is missing, not the whole --help */
    if (!o->model_dir && !npos)
        return die(EX_USAGE, "no model: give -m DIR (what a build or an export made) or LIBMODEL WEIGHTS; "
                   "--help lists the options");
    if (!o->model_dir && npos != 2)
        return die(EX_USAGE, "give LIBMODEL and WEIGHTS (%d of 2 given), or -m DIR; --help lists the options", npos);
    if (o->model_dir && !o->model_dir[0]) return die(EX_USAGE, "-m: empty folder name");
    if (o->srv.on || o->srv.set) return server_combinations(o);
    int sources = !!o->prompt + !!o->prompt_file + !!o->prompt_tokens;
    if (o->single_turn && sources && !o->interactive && !o->prompt_tokens) o->chat = 1;
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
    if (o->system && !o->chat && !chat_loop && !o->single_turn)
        return die(EX_USAGE, "--system applies to --chat (or the chat loop)");
    if (o->no_cnv && o->interactive) return die(EX_USAGE, "-no-cnv (a one-shot run) contradicts -i/-cnv");
    if (o->no_cnv && !prompt) return die(EX_USAGE, "-no-cnv runs one prompt: give -p, -f or --prompt-tokens");
    if (o->single_turn && o->prompt_tokens) return die(EX_USAGE, "-st formats a chat turn; it cannot wrap --prompt-tokens");
    if (o->escape && o->prompt_tokens) return die(EX_USAGE, "-e processes escapes in text; --prompt-tokens has none");
    return EX_OK;
}

static void defaults(opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->verify = 1;
    o->stop = 1;
    o->display_prompt = 1;
    o->max_tokens = 128;
    o->threads = default_threads();
    o->repeat_last_n = 64;
    o->sp.top_p = 1.0f;
    o->sp.repeat_penalty = 1.0f;
    o->srv.host = "127.0.0.1";
    o->srv.port = 8080;
    o->srv.timeout_s = 60;
    o->srv.queue = 8;
    o->srv.max_body = 1 << 20;
}

static int positional(opts_t *o, int *npos, const char *a)
{
    if (*npos == 0) o->lib = a;
    else if (*npos == 1) o->weights = a;
    else return die(EX_USAGE, "unexpected argument %s (see --help)", a);
    (*npos)++;
    return EX_OK;
}

int parse_args(int argc, char **argv, opts_t *o)
{
    defaults(o);
    char shorts[2 + 3 * N_OPTS + 1];
    struct option longs[2 * N_OPTS + 1];
    getopt_tables(shorts, longs);
    int npos = 0, rc = EX_OK;
    opterr = 0;   /* the messages are ours: one line, the typed name, the nearest option */
    optind = 1;
    while (!rc) {
        int at = optind;
        const char *typed = at < argc ? argv[at] : NULL;
        char name[64];
        if (typed && typed[0] == '-' && typed[1] && typed[1] != '-' && typed[2]) {
            const optdef *d = find(typed);   /* -ngl, -cnv, -no-cnv, -st, -sys: their long name */
            if (!d) return unknown(typed);
            argv[at] = (char *)d->lng;
        }
        int li = -1, c = getopt_long(argc, argv, shorts, longs, &li);
        if (typed && argv[at] != typed) argv[at] = (char *)typed;   /* argv as it was, for ps and messages */
        if (c == -1) break;
        if (c == 1) {
            rc = positional(o, &npos, optarg);
            continue;
        }
        if (!typed_name(typed, name)) return unknown(typed);
        const optdef *d = find(name);
        if (c == '?' || (c >= 256 && d != &OPTS[c - 256])) {   /* unknown, or an abbreviation getopt_long took */
            if (d && d->arg == NULL && strchr(typed, '=')) return die(EX_USAGE, "%s takes no value", name);
            return unknown(name);
        }
        if (c == ':') return die(EX_USAGE, "%s needs a value (%s)", name, d ? d->arg : "?");
        rc = apply(entry_of(c), name, optarg, o);
    }
    for (int i = optind; !rc && i < argc; i++) rc = positional(o, &npos, argv[i]);   /* after "--" */
    return rc ? rc : check_combinations(o, npos);
}
