/* bringup-run: run a bringup-built model. No Python at run time.
 *
 *   bringup-run LIBMODEL WEIGHTS [options]
 *
 * LIBMODEL is dlopen'ed: the runtime API comes from its bu_api_get(), the tokenizer and sampler
 * from their exported functions (all built into libmodel.so by `bringup build`). The tokenizer
 * blob and the chat format are read from the weights file (tensors "tokenizer.blob" and
 * "chat.format"). Options and exit codes: usage() below and docs/runtime.md.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bu_runtime.h"
#include "bu_sampler.h"
#include "bu_tokenizer.h"

/* Exit codes (bringup's convention, bringup/errors.py). */
enum { EX_OK = 0, EX_INTERNAL = 1, EX_USAGE = 2, EX_INTEGRITY = 3, EX_UNSUPPORTED = 4, EX_UNAVAILABLE = 5 };

static const char *prog = "bringup-run";

static void usage(FILE *f)
{
    fprintf(f,
        "usage: %s LIBMODEL WEIGHTS [options]\n"
        "\n"
        "  --prompt TEXT          prompt text (special-token texts in it are parsed as tokens)\n"
        "  --prompt-tokens IDS    prompt as token ids, comma or space separated (no tokenizer)\n"
        "  --chat                 wrap --prompt as a user turn in the model's chat format\n"
        "  --system TEXT          system message for --chat and the interactive loop (default: the\n"
        "                         chat format's default system message, if it has one)\n"
        "  --max-tokens N         tokens to generate (default 128); stops earlier at end-of-generation\n"
        "  --temperature T        0 = greedy (default 0)\n"
        "  --top-k K              keep the K most likely tokens (default 0 = all)\n"
        "  --top-p P              nucleus mass in (0, 1] (default 1 = all)\n"
        "  --seed S               sampler seed (default 0)\n"
        "  --threads N            threads for the one-token matrix products (decode, logits head);\n"
        "                         results are bit-identical for any N (default 1)\n"
        "  --ctx N                context length (default: the planned maximum of the library)\n"
        "  --timing               print prompt-eval / decode times, TTFT, peak RSS to stderr\n"
        "  --json                 print one JSON object {prompt_tokens, generated_tokens, text, timing}\n"
        "  --all-logits PATH      write the teacher-forced logits of every prompt position to PATH as raw\n"
        "                         little-endian float32 [n_prompt_tokens, n_vocab]\n"
        "  --no-verify            skip the weights payload SHA-256 check (says so on stderr)\n"
        "  --no-stop              do not stop at end-of-generation tokens\n"
        "  --dump-hidden DIR      write every prefill op's output (all prompt rows, all chunks) to DIR:\n"
        "                         manifest.json + <IR op id>.f32 (docs/parity.md); needs --max-tokens 0.\n"
        "                         DIR must be absent or empty; it appears complete or not at all\n"
        "  -h, --help             this text\n"
        "\n"
        "With neither --prompt nor --prompt-tokens: an interactive chat loop on stdin (one line = one\n"
        "user turn; an empty line or end of input quits; /reset clears the conversation).\n"
        "\n"
        "exit codes: 0 ok, 1 internal error (kernel failure), 2 usage or bad input (prompt longer than\n"
        "the context, token id out of range), 3 integrity (hash mismatch, corrupt or wrong weights),\n"
        "4 unsupported (no chat format in the weights), 5 unavailable (cannot load the library, cannot\n"
        "read the weights, out of memory)\n", prog);
}

static int die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: error: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

static int exit_for_status(int s)
{
    switch (s) {
    case BU_RT_ERR_ARG: case BU_RT_ERR_CONTEXT: return EX_USAGE;
    case BU_RT_ERR_FORMAT: case BU_RT_ERR_INTEGRITY: case BU_RT_ERR_WRONG_MODEL: return EX_INTEGRITY;
    case BU_RT_ERR_IO: case BU_RT_ERR_NOMEM: return EX_UNAVAILABLE;
    default: return EX_INTERNAL;
    }
}

/* ---------------- functions taken from libmodel.so ---------------- */

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

static int load_lib(const char *path, lib_t *L)
{
    /* dlopen searches the path as given; a bare name would search the system, so require a '/'. */
    char buf[4096];
    if (!strchr(path, '/')) {
        snprintf(buf, sizeof buf, "./%s", path);
        path = buf;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return die(EX_UNAVAILABLE, "cannot load model library %s: %s", path, dlerror());
    const bu_api *(*get)(void) = (const bu_api *(*)(void))dlsym(h, "bu_api_get");
    if (!get) return die(EX_UNAVAILABLE, "%s is not a bringup model library (no bu_api_get)", path);
    L->rt = get();
    if (L->rt->abi_version != BU_RT_ABI_VERSION || L->rt->struct_size != (int32_t)sizeof(bu_api))
        return die(EX_UNAVAILABLE, "%s has runtime ABI %d, this CLI speaks %d: rebuild both with `bringup build`",
                   path, L->rt->abi_version, BU_RT_ABI_VERSION);
#define SYM(field, name)                                                                   \
    do {                                                                                   \
        *(void **)(&L->field) = dlsym(h, name);                                            \
        if (!L->field) return die(EX_UNAVAILABLE, "%s does not export %s", path, name);    \
    } while (0)
    SYM(tok_load, "bu_tok_load");
    SYM(tok_free, "bu_tok_free");
    SYM(tok_encode, "bu_tok_encode");
    SYM(tok_decode, "bu_tok_decode");
    SYM(tok_is_eog, "bu_tok_is_eog");
    SYM(tok_n_vocab, "bu_tok_n_vocab");
    SYM(sampler_new, "bu_sampler_new");
    SYM(sampler_free, "bu_sampler_free");
    SYM(sampler_sample, "bu_sampler_sample");
#undef SYM
    return EX_OK;
}

/* ---------------- growable buffers (every length handled, nothing truncated) ---------------- */

typedef struct { char *p; size_t n, cap; } str_t;
typedef struct { int32_t *p; size_t n, cap; } ids_t;

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "%s: error: out of memory (%zu bytes)\n", prog, n);
        exit(EX_UNAVAILABLE);
    }
    return q;
}

static void str_add(str_t *s, const char *p, size_t n)
{
    if (s->n + n + 1 > s->cap) {
        s->cap = (s->n + n + 1) * 2;
        s->p = xrealloc(s->p, s->cap);
    }
    memcpy(s->p + s->n, p, n);
    s->n += n;
    s->p[s->n] = 0;
}

static void str_adds(str_t *s, const char *z) { str_add(s, z, strlen(z)); }

static void ids_add(ids_t *v, int32_t id)
{
    if (v->n + 1 > v->cap) {
        v->cap = v->cap ? v->cap * 2 : 256;
        v->p = xrealloc(v->p, v->cap * sizeof *v->p);
    }
    v->p[v->n++] = id;
}

/* ---------------- chat format (tensor "chat.format", docs/runtime.md) ----------------
 * The semantics are bringup.chat.render_chat_format's (the reference the tests hold the GGUF's
 * jinja template against): an optional system message (--system, else the format's default),
 * either as its own turn or merged (content + separator) into the first user message; every turn
 * is prefix + content + suffix, contents trimmed of " \t\n\v\f\r" when the format says so; the
 * generation prompt opens the reply. */

enum { CF_NAME, CF_HAS_SYSTEM, CF_SYS_PRE, CF_SYS_SUF, CF_USER_PRE, CF_USER_SUF, CF_ASSIST_PRE, CF_ASSIST_SUF,
       CF_GEN_PROMPT, CF_HAS_DEFAULT_SYSTEM, CF_DEFAULT_SYSTEM, CF_SYSTEM_MODE, CF_SYSTEM_SEP, CF_TRIM, CF_N };
#define CF_MAX_STOP 8

typedef struct {
    const char *f[CF_N];
    int n_stop;
    const char *stop[CF_MAX_STOP];
    char *mem;
} chat_t;

/* Blob: "BUCHAT2\0", then CF_N NUL-terminated strings, then a decimal count of stop strings
 * (NUL-terminated) and that many NUL-terminated strings; nothing after. */
static int chat_parse(const uint8_t *blob, size_t n, chat_t *c, char *err, size_t cap)
{
    memset(c, 0, sizeof *c);
    if (n < 8 || memcmp(blob, "BUCHAT2", 8) != 0) {
        snprintf(err, cap, "chat.format: bad magic (expected BUCHAT2)");
        return -1;
    }
    c->mem = xrealloc(NULL, n + 1);
    memcpy(c->mem, blob, n);
    c->mem[n] = 0;
    size_t at = 8;
    const char *fields[CF_N + 1 + CF_MAX_STOP];
    int nf = 0, want = CF_N + 1;
    while (at < n && nf < want) {
        const char *z = c->mem + at;
        size_t len = strnlen(z, n - at);
        if (at + len >= n) {
            snprintf(err, cap, "chat.format: field %d is not NUL-terminated", nf);
            return -1;
        }
        fields[nf++] = z;
        at += len + 1;
        if (nf == CF_N + 1) {
            char *end;
            long k = strtol(fields[CF_N], &end, 10);
            if (*end || k < 0 || k > CF_MAX_STOP) {
                snprintf(err, cap, "chat.format: bad stop-string count %s", fields[CF_N]);
                return -1;
            }
            want = CF_N + 1 + (int)k;
        }
    }
    if (nf != want || at != n) {
        snprintf(err, cap, "chat.format: %d fields, %d expected, %zu trailing bytes", nf, want, n - at);
        return -1;
    }
    for (int i = 0; i < CF_N; i++) c->f[i] = fields[i];
    c->n_stop = want - CF_N - 1;
    for (int i = 0; i < c->n_stop; i++) c->stop[i] = fields[CF_N + 1 + i];
    int merge = !strcmp(c->f[CF_SYSTEM_MODE], "merge_into_first_user");
    if (!merge && strcmp(c->f[CF_SYSTEM_MODE], "turn")) {
        snprintf(err, cap, "chat.format: unknown system mode %s", c->f[CF_SYSTEM_MODE]);
        return -1;
    }
    if (!merge && strcmp(c->f[CF_HAS_SYSTEM], "1")) {
        snprintf(err, cap, "chat.format: system mode 'turn' without a system role");
        return -1;
    }
    return 0;
}

static void chat_content(const chat_t *c, str_t *out, const char *z)
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
static void chat_first(const chat_t *c, str_t *out, const char *system, const char *user)
{
    if (!system && !strcmp(c->f[CF_HAS_DEFAULT_SYSTEM], "1")) system = c->f[CF_DEFAULT_SYSTEM];
    str_t sys = {0};
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
static void chat_next(const chat_t *c, str_t *out, const char *user)
{
    str_adds(out, c->f[CF_USER_PRE]);
    chat_content(c, out, user);
    str_adds(out, c->f[CF_USER_SUF]);
    str_adds(out, c->f[CF_GEN_PROMPT]);
}

/* ---------------- options ---------------- */

typedef struct {
    const char *lib, *weights, *prompt, *prompt_tokens, *system, *all_logits, *dump_hidden;
    int chat, timing, json, verify, stop, max_tokens, threads, ctx;
    bu_sampler_params sp;
} opts_t;

static int parse_int(const char *opt, const char *v, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return die(EX_USAGE, "%s %s: need an integer in [%ld, %ld]", opt, v, lo, hi);
    *out = (int)x;
    return 0;
}

static int parse_float(const char *opt, const char *v, float *out)
{
    char *end;
    errno = 0;
    float x = strtof(v, &end);
    if (errno || end == v || *end || x != x)
        return die(EX_USAGE, "%s %s: need a number", opt, v);
    *out = x;
    return 0;
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->verify = 1;
    o->stop = 1;
    o->max_tokens = 128;
    o->threads = 1;
    o->sp.top_p = 1.0f;
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define NEXT() (i + 1 < argc ? argv[++i] : (die(EX_USAGE, "%s needs a value", a), (char *)NULL))
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(EX_OK); }
        else if (!strcmp(a, "--prompt")) { if (!(o->prompt = NEXT())) return EX_USAGE; }
        else if (!strcmp(a, "--prompt-tokens")) { if (!(o->prompt_tokens = NEXT())) return EX_USAGE; }
        else if (!strcmp(a, "--system")) { if (!(o->system = NEXT())) return EX_USAGE; }
        else if (!strcmp(a, "--all-logits")) { if (!(o->all_logits = NEXT())) return EX_USAGE; }
        else if (!strcmp(a, "--dump-hidden")) { if (!(o->dump_hidden = NEXT())) return EX_USAGE; }
        else if (!strcmp(a, "--chat")) o->chat = 1;
        else if (!strcmp(a, "--timing")) o->timing = 1;
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--no-verify")) o->verify = 0;
        else if (!strcmp(a, "--no-stop")) o->stop = 0;
        else if (!strcmp(a, "--max-tokens")) { const char *v = NEXT(); if (!v || parse_int(a, v, 0, INT32_MAX, &o->max_tokens)) return EX_USAGE; }
        else if (!strcmp(a, "--top-k")) { const char *v = NEXT(); if (!v || parse_int(a, v, 0, INT32_MAX, &o->sp.top_k)) return EX_USAGE; }
        else if (!strcmp(a, "--threads")) { const char *v = NEXT(); if (!v || parse_int(a, v, 1, 256, &o->threads)) return EX_USAGE; }
        else if (!strcmp(a, "--ctx")) { const char *v = NEXT(); if (!v || parse_int(a, v, 1, INT32_MAX, &o->ctx)) return EX_USAGE; }
        else if (!strcmp(a, "--temperature")) { const char *v = NEXT(); if (!v || parse_float(a, v, &o->sp.temperature)) return EX_USAGE; }
        else if (!strcmp(a, "--top-p")) { const char *v = NEXT(); if (!v || parse_float(a, v, &o->sp.top_p)) return EX_USAGE; }
        else if (!strcmp(a, "--seed")) {
            const char *v = NEXT();
            char *end;
            if (!v) return EX_USAGE;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || end == v || *end || v[0] == '-') return die(EX_USAGE, "--seed %s: need an integer >= 0", v);
            o->sp.seed = (uint64_t)s;
        }
        else if (a[0] == '-' && a[1]) return die(EX_USAGE, "unknown option %s (see --help)", a);
        else if (npos == 0) { o->lib = a; npos++; }
        else if (npos == 1) { o->weights = a; npos++; }
        else return die(EX_USAGE, "unexpected argument %s (see --help)", a);
#undef NEXT
    }
    if (npos != 2) {
        usage(stderr);
        return EX_USAGE;
    }
    if (o->prompt && o->prompt_tokens) return die(EX_USAGE, "give --prompt or --prompt-tokens, not both");
    if (o->chat && o->prompt_tokens) return die(EX_USAGE, "--chat formats text; it cannot wrap --prompt-tokens");
    if (o->all_logits && !o->prompt && !o->prompt_tokens) return die(EX_USAGE, "--all-logits needs a prompt");
    if (o->dump_hidden && !o->prompt && !o->prompt_tokens) return die(EX_USAGE, "--dump-hidden needs a prompt");
    if (o->dump_hidden && o->max_tokens != 0)
        return die(EX_USAGE, "--dump-hidden records the prompt's prefill only: add --max-tokens 0");
    if (o->dump_hidden && !o->dump_hidden[0]) return die(EX_USAGE, "--dump-hidden: empty directory name");
    if (o->system && !o->chat && (o->prompt || o->prompt_tokens))
        return die(EX_USAGE, "--system applies to --chat (or the interactive loop)");
    if (!(o->sp.top_p > 0.0f && o->sp.top_p <= 1.0f)) return die(EX_USAGE, "--top-p must be in (0, 1]");
    return EX_OK;
}

/* ---------------- timing ---------------- */

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

typedef struct {
    double prompt_ms, decode_ms, ttft_ms, sample_ms;
    long prompt_tokens, decode_runs;
} timing_t;

/* ---------------- JSON output ---------------- */

/* JSON string of arbitrary bytes: valid UTF-8 passes through (escaped as JSON needs); an invalid
 * byte becomes U+FFFD and *replaced is set, so the caller can say so. */
static void json_str(FILE *f, const char *s, size_t n, int *replaced)
{
    fputc('"', f);
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c < 0x80) {
            if (c == '"') fputs("\\\"", f);
            else if (c == '\\') fputs("\\\\", f);
            else if (c == '\n') fputs("\\n", f);
            else if (c == '\r') fputs("\\r", f);
            else if (c == '\t') fputs("\\t", f);
            else if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
            else fputc((int)c, f);
            i++;
            continue;
        }
        int len = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
        if (len && c >= 0xf5) len = 0;
        int ok = len > 0 && i + (size_t)len <= n;
        for (int k = 1; ok && k < len; k++) ok = (p[i + k] & 0xc0) == 0x80;
        if (ok && len == 3 && ((c == 0xe0 && p[i + 1] < 0xa0) || (c == 0xed && p[i + 1] >= 0xa0))) ok = 0;
        if (ok && len == 4 && ((c == 0xf0 && p[i + 1] < 0x90) || (c == 0xf4 && p[i + 1] >= 0x90))) ok = 0;
        if (ok) {
            fwrite(p + i, 1, (size_t)len, f);
            i += (size_t)len;
        } else {
            fputs("\\ufffd", f);
            *replaced = 1;
            i++;
        }
    }
    fputc('"', f);
}

static void json_ids(FILE *f, const int32_t *v, size_t n)
{
    fputc('[', f);
    for (size_t i = 0; i < n; i++) fprintf(f, "%s%" PRId32, i ? ", " : "", v[i]);
    fputc(']', f);
}

static void timing_fields(FILE *f, const timing_t *t, const char *sep)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double ptps = t->prompt_ms > 0 ? t->prompt_tokens / (t->prompt_ms / 1e3) : 0;
    double dtps = t->decode_ms > 0 ? t->decode_runs / (t->decode_ms / 1e3) : 0;
    fprintf(f, "\"prompt_eval_ms\": %.3f,%s\"prompt_tokens\": %ld,%s\"prompt_tok_per_s\": %.3f,%s"
               "\"decode_ms\": %.3f,%s\"decode_runs\": %ld,%s\"decode_tok_per_s\": %.3f,%s"
               "\"ttft_ms\": %.3f,%s\"sample_ms\": %.3f,%s\"peak_rss_kib\": %ld,%s"
               "\"minor_page_faults\": %ld,%s\"major_page_faults\": %ld",
            t->prompt_ms, sep, t->prompt_tokens, sep, ptps, sep, t->decode_ms, sep, t->decode_runs, sep, dtps, sep,
            t->ttft_ms, sep, t->sample_ms, sep, ru.ru_maxrss, sep, ru.ru_minflt, sep, ru.ru_majflt);
}

/* Human-readable --timing report (stderr). */
static void timing_report(FILE *f, const timing_t *t, size_t model_bytes)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(f, "timing:\n");
    fprintf(f, "  prompt eval: %10.2f ms, %6ld tokens, %8.2f tok/s\n", t->prompt_ms, t->prompt_tokens,
            t->prompt_ms > 0 ? t->prompt_tokens / (t->prompt_ms / 1e3) : 0.0);
    fprintf(f, "  decode:      %10.2f ms, %6ld runs,   %8.2f tok/s\n", t->decode_ms, t->decode_runs,
            t->decode_ms > 0 ? t->decode_runs / (t->decode_ms / 1e3) : 0.0);
    fprintf(f, "  time to first token: %.2f ms (prompt eval + first sample); sampling total %.2f ms\n",
            t->ttft_ms, t->sample_ms);
    fprintf(f, "  peak RSS: %.1f MiB; page faults: %ld minor, %ld major; runtime allocation %.1f MiB\n",
            ru.ru_maxrss / 1024.0, ru.ru_minflt, ru.ru_majflt, model_bytes / 1048576.0);
}

/* ---------------- the session ---------------- */

typedef struct {
    lib_t L;
    bu_model *m;
    bu_tok *tok;
    bu_sampler *smp;
    chat_t chat;
    int have_chat;
    const opts_t *o;
    timing_t t;
} sess_t;

static int rt_fail(sess_t *s, int rc)
{
    return die(exit_for_status(rc), "%s", s->L.rt->last_error(s->m));
}

static int encode(sess_t *s, const char *text, size_t n, unsigned flags, ids_t *out)
{
    char err[256];
    int64_t need = s->L.tok_encode(s->tok, text, n, flags, NULL, 0, err, sizeof err);
    if (need < 0) return die(EX_USAGE, "cannot tokenize the prompt: %s", err);
    size_t base = out->n;
    for (int64_t i = 0; i < need; i++) ids_add(out, 0);
    int64_t got = s->L.tok_encode(s->tok, text, n, flags, out->p + base, (size_t)need, err, sizeof err);
    if (got != need) return die(EX_INTERNAL, "tokenizer gave %" PRId64 " ids, then %" PRId64, need, got);
    return EX_OK;
}

/* Append the bytes of token id to out (growing as needed). */
static void piece(sess_t *s, int32_t id, str_t *out)
{
    char buf[256];
    int64_t n = s->L.tok_decode(s->tok, id, 0, buf, sizeof buf);
    if (n < 0) {
        /* never drop a token silently: a token with no bytes is a broken vocabulary */
        fprintf(stderr, "bringup-run: error: cannot detokenize token id %d (tokenizer status %lld)\n",
                (int)id, (long long)n);
        exit(EX_INTEGRITY);
    }
    if ((size_t)n <= sizeof buf) {
        str_add(out, buf, (size_t)n);
        return;
    }
    char *big = xrealloc(NULL, (size_t)n);
    s->L.tok_decode(s->tok, id, 0, big, (size_t)n);
    str_add(out, big, (size_t)n);
    free(big);
}

static int ends_with_stop(const sess_t *s, const str_t *text, size_t from)
{
    if (!s->have_chat || !s->o->stop) return 0;
    for (int i = 0; i < s->chat.n_stop; i++) {
        size_t k = strlen(s->chat.stop[i]);
        if (k && text->n >= k && text->n - k >= from && !memcmp(text->p + text->n - k, s->chat.stop[i], k)) return 1;
    }
    return 0;
}

/* Generate after the evaluated context: up to max_tokens, stopping at end-of-generation.
 * stream: print each piece to stdout as it comes. */
static int generate(sess_t *s, ids_t *gen, str_t *text, int stream, double t_start, int *pending)
{
    char err[256];
    size_t text0 = text->n;
    *pending = 0;  /* 1 when the last generated id is not yet in the KV cache */
    for (int i = 0; i < s->o->max_tokens; i++) {
        double t0 = now_ms();
        const float *lg = s->L.rt->logits(s->m);
        int32_t id = lg ? s->L.sampler_sample(s->smp, lg, err, sizeof err) : -1;
        s->t.sample_ms += now_ms() - t0;
        if (id < 0) return die(EX_INTERNAL, "sampling failed: %s", lg ? err : "no logits");
        if (gen->n == 0 && i == 0) s->t.ttft_ms = now_ms() - t_start;
        if (s->tok && s->o->stop && s->L.tok_is_eog(s->tok, id)) break;
        ids_add(gen, id);
        if (s->tok) {
            size_t before = text->n;
            piece(s, id, text);
            if (stream) {
                fwrite(text->p + before, 1, text->n - before, stdout);
                fflush(stdout);
            }
            if (ends_with_stop(s, text, text0)) { *pending = 1; break; }
        }
        if (i + 1 == s->o->max_tokens) { *pending = 1; break; }  /* no need to evaluate the last one */
        t0 = now_ms();
        int rc = s->L.rt->decode(s->m, id);
        s->t.decode_ms += now_ms() - t0;
        s->t.decode_runs++;
        if (rc != BU_RT_OK) return rt_fail(s, rc);
    }
    return EX_OK;
}

static int write_all_logits(const char *path, const float *x, size_t n_floats)
{
    const uint16_t one = 1;
    if (*(const uint8_t *)&one != 1) return die(EX_UNSUPPORTED, "--all-logits writes little-endian; this host is not");
    size_t plen = strlen(path);
    char *tmp = xrealloc(NULL, plen + 32);
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        free(tmp);
        return die(EX_USAGE, "cannot write %s: %s", path, strerror(errno));
    }
    size_t w = fwrite(x, sizeof(float), n_floats, f);
    int bad = w != n_floats || fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        free(tmp);
        return die(EX_UNAVAILABLE, "writing %s failed: %s", path, strerror(e));
    }
    free(tmp);
    return EX_OK;
}

/* ---------------- --dump-hidden: every prefill op's output, for X-ray (docs/parity.md) ----------------
 * An observer (bu_set_observer) appends each observation's rows to <stage>/<IR op id>.f32; rows
 * must arrive in position order with no gap (chunk after chunk, tail rows one by one), which is
 * checked. After the prefill every op must hold exactly the prompt's T rows; then manifest.json is
 * written and the staging folder renamed onto DIR (absent or empty), so DIR is complete or absent.
 * Outputs that are not float32 (argmax ids) are listed under "skipped" with the reason. */

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

static int dump_fail(dump_t *d, const char *fmt, ...)
{
    if (!d->msg[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->msg, sizeof d->msg, fmt, ap);
        va_end(ap);
    }
    return 1;
}

/* Op ids come from our own IR through codegen's pattern, but this CLI loads any library: check
 * again before a name becomes a path (no '/', not "." or ".."). */
static int dump_name_ok(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > 95 || !strcmp(id, ".") || !strcmp(id, "..")) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

static char *dump_path(const dump_t *d, const char *name, const char *suffix)
{
    size_t n = strlen(d->stage) + strlen(name) + strlen(suffix) + 2;
    char *p = xrealloc(NULL, n);
    snprintf(p, n, "%s/%s%s", d->stage, name, suffix);
    return p;
}

static int dump_observe(void *ctx, const bu_observation *o)
{
    dump_t *d = ctx;
    if (strcmp(o->phase, "prefill") != 0) return 0;
    const bu_op_info *info = o->info;
    if (!info || !dump_name_ok(info->id))
        return dump_fail(d, "prefill op %d has no usable IR op id (%s)", o->op, info && info->id ? info->id : "NULL");
    if (o->op < 0 || o->op >= (1 << 20)) return dump_fail(d, "prefill op index %d out of range", o->op);
    if (o->op >= d->n_ops) {
        int32_t n = o->op + 1;
        d->ops = xrealloc(d->ops, (size_t)n * sizeof *d->ops);
        memset(d->ops + d->n_ops, 0, (size_t)(n - d->n_ops) * sizeof *d->ops);
        d->n_ops = n;
    }
    dump_op *e = &d->ops[o->op];
    if (!e->id) {
        for (int32_t i = 0; i < d->n_order; i++)
            if (!strcmp(d->ops[d->order[i]].id, info->id))
                return dump_fail(d, "two prefill ops are named %s", info->id);
        e->id = strdup(info->id);
        if (!e->id) return dump_fail(d, "out of memory");
        e->dtype = info->out_dtype;
        e->row_elems = info->out_row_elems;
        if (e->row_elems < 1) return dump_fail(d, "op %s: %lld elements per row", e->id, (long long)e->row_elems);
        d->order = xrealloc(d->order, (size_t)(d->n_order + 1) * sizeof *d->order);
        d->order[d->n_order++] = o->op;
    } else if (strcmp(e->id, info->id) || e->row_elems != info->out_row_elems || e->dtype != info->out_dtype) {
        return dump_fail(d, "op %d changed its id or row width between calls (%s)", o->op, info->id);
    }
    if (o->pos + o->row0 != e->rows || o->n_rows < 1)
        return dump_fail(d, "op %s: rows %lld..%lld arrived, expected row %lld next", e->id,
                         (long long)(o->pos + o->row0), (long long)(o->pos + o->row0 + o->n_rows - 1),
                         (long long)e->rows);
    e->rows += o->n_rows;
    if (e->dtype != BU_OBS_F32) return 0;  /* listed as skipped in the manifest */
    char *path = dump_path(d, e->id, ".f32");
    FILE *f = fopen(path, e->created ? "ab" : "wb");
    if (!f) {
        dump_fail(d, "cannot write %s: %s", path, strerror(errno));
        free(path);
        return 1;
    }
    e->created = 1;
    size_t n = (size_t)o->n_rows * (size_t)e->row_elems;
    int bad = fwrite(o->data, sizeof(float), n, f) != n;
    bad |= fclose(f) != 0;
    if (bad) dump_fail(d, "writing %s failed: %s", path, strerror(errno));
    free(path);
    return bad;
}

/* DIR must be absent or an empty folder (rename(2) replaces an empty folder). */
static int dump_begin(dump_t *d, const char *dir_arg)
{
    memset(d, 0, sizeof *d);
    /* "out/" and "out" are the same folder; the staging folder must be its sibling, not inside it */
    size_t len = strlen(dir_arg);
    while (len > 1 && dir_arg[len - 1] == '/') len--;
    char *dir = xrealloc(NULL, len + 1);
    memcpy(dir, dir_arg, len);
    dir[len] = 0;
    d->final = dir;
    DIR *h = opendir(dir);
    if (h) {
        struct dirent *ent;
        int empty = 1;
        while ((ent = readdir(h)))
            if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, "..")) empty = 0;
        closedir(h);
        if (!empty) return die(EX_USAGE, "--dump-hidden %s: the folder is not empty; refusing to mix dumps", dir);
    } else if (errno != ENOENT) {
        return die(EX_USAGE, "--dump-hidden %s: %s", dir, strerror(errno));
    }
    if (!strcmp(dir, "/") || !strcmp(dir, ".") || !strcmp(dir, ".."))
        return die(EX_USAGE, "--dump-hidden %s: name a new or empty folder", dir);
    size_t n = strlen(dir) + 48;
    d->stage = xrealloc(NULL, n);
    snprintf(d->stage, n, "%s.partial.%ld", dir, (long)getpid());
    if (mkdir(d->stage, 0777) != 0) {
        int e = errno;
        free(d->stage);
        d->stage = NULL;
        return die(EX_UNAVAILABLE, "--dump-hidden: cannot create %s.partial.%ld: %s", dir, (long)getpid(), strerror(e));
    }
    return EX_OK;
}

/* Remove the staging folder and what was written into it. */
static void dump_discard(dump_t *d)
{
    if (!d->stage) return;
    for (int32_t i = 0; i < d->n_order; i++) {
        dump_op *e = &d->ops[d->order[i]];
        if (e->created) {
            char *p = dump_path(d, e->id, ".f32");
            unlink(p);
            free(p);
        }
    }
    char *p = dump_path(d, "manifest.json", "");
    unlink(p);
    free(p);
    rmdir(d->stage);
}

static void dump_free(dump_t *d)
{
    for (int32_t i = 0; i < d->n_ops; i++) free(d->ops[i].id);
    free(d->ops);
    free(d->order);
    free(d->stage);
    free(d->final);
    memset(d, 0, sizeof *d);
}

/* After a successful prefill of T tokens: check coverage, write the manifest, publish the folder. */
static int dump_finish(dump_t *d, int64_t T)
{
    if (d->n_order == 0) return die(EX_INTERNAL, "--dump-hidden: the library reported no op outputs");
    for (int32_t i = 0; i < d->n_order; i++) {
        const dump_op *e = &d->ops[d->order[i]];
        if (e->rows != T)
            return die(EX_INTERNAL, "--dump-hidden: op %s reported %lld rows for a %lld-token prompt", e->id,
                       (long long)e->rows, (long long)T);
    }
    char *path = dump_path(d, "manifest.json", "");
    FILE *f = fopen(path, "wb");
    if (!f) {
        int e = errno;
        free(path);
        return die(EX_UNAVAILABLE, "--dump-hidden: cannot write the manifest: %s", strerror(e));
    }
    fprintf(f, "{\"format\": \"bringup-hidden-dump\", \"version\": 1, \"n_tokens\": %lld, \"tensors\": [", (long long)T);
    int k = 0;
    for (int32_t i = 0; i < d->n_order; i++) {
        const dump_op *e = &d->ops[d->order[i]];
        if (e->dtype != BU_OBS_F32) continue;
        fprintf(f, "%s\n  {\"name\": \"%s\", \"file\": \"%s.f32\", \"shape\": [%lld, %lld]}", k++ ? "," : "", e->id,
                e->id, (long long)T, (long long)e->row_elems);
    }
    fprintf(f, "], \"skipped\": [");
    k = 0;
    for (int32_t i = 0; i < d->n_order; i++) {
        const dump_op *e = &d->ops[d->order[i]];
        if (e->dtype == BU_OBS_F32) continue;
        fprintf(f, "%s\n  {\"name\": \"%s\", \"reason\": \"output is not float32\"}", k++ ? "," : "", e->id);
    }
    fprintf(f, "]}\n");
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    free(path);
    if (bad) return die(EX_UNAVAILABLE, "--dump-hidden: writing the manifest failed: %s", strerror(errno));
    if (rename(d->stage, d->final) != 0)
        return die(EX_UNAVAILABLE, "--dump-hidden: cannot move %s to %s: %s", d->stage, d->final, strerror(errno));
    free(d->stage);
    d->stage = NULL;   /* published: nothing to discard */
    return EX_OK;
}

static int parse_ids(const char *z, int32_t n_vocab, ids_t *out)
{
    const char *p = z;
    while (*p) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= n_vocab)
            return die(EX_USAGE, "--prompt-tokens: '%.20s' is not a token id in [0, %d)", p, n_vocab);
        ids_add(out, (int32_t)v);
        p = end;
    }
    if (out->n == 0) return die(EX_USAGE, "--prompt-tokens: no token ids");
    return EX_OK;
}

static int one_shot(sess_t *s)
{
    const opts_t *o = s->o;
    ids_t prompt = {0}, gen = {0};
    str_t text = {0};
    int rc = EX_OK;
    if (o->prompt_tokens) {
        if ((rc = parse_ids(o->prompt_tokens, s->L.rt->n_vocab(s->m), &prompt))) goto out;
    } else {
        str_t src = {0};
        if (o->chat) {
            chat_first(&s->chat, &src, o->system, o->prompt);
        } else {
            str_adds(&src, o->prompt);
        }
        rc = encode(s, src.p, src.n, BU_TOK_ADD_SPECIAL | BU_TOK_PARSE_SPECIAL, &prompt);
        free(src.p);
        if (rc) goto out;
        if (prompt.n == 0) {
            rc = die(EX_USAGE, "the prompt encodes to no tokens");
            goto out;
        }
    }
    if (prompt.n > (size_t)s->L.rt->n_ctx(s->m)) {
        rc = die(EX_USAGE, "the prompt has %zu tokens, the context holds %d (--ctx)", prompt.n, s->L.rt->n_ctx(s->m));
        goto out;
    }
    dump_t dump;
    memset(&dump, 0, sizeof dump);
    if (o->dump_hidden) {
        const uint16_t one = 1;
        if (*(const uint8_t *)&one != 1) {
            rc = die(EX_UNSUPPORTED, "--dump-hidden writes little-endian float32; this host is not little-endian");
            goto out;
        }
        if ((rc = dump_begin(&dump, o->dump_hidden))) {
            dump_free(&dump);
            goto out;
        }
        s->L.rt->set_observer(s->m, dump_observe, &dump);
    }
    double t0 = now_ms();
    int st;
    if (o->all_logits || o->dump_hidden) {
        /* a dump covers every row, footer ops included: the logits tail runs for every position */
        size_t nf = prompt.n * (size_t)s->L.rt->n_vocab(s->m);
        float *all = malloc(nf * sizeof(float));
        if (!all) {
            rc = die(EX_UNAVAILABLE, "out of memory for %zu logits", nf);
            dump_discard(&dump);
            dump_free(&dump);
            goto out;
        }
        st = s->L.rt->prefill_all_logits(s->m, prompt.p, (int32_t)prompt.n, all, nf);
        s->t.prompt_ms = now_ms() - t0;
        if (o->dump_hidden) {
            s->L.rt->set_observer(s->m, NULL, NULL);
            if (st == BU_RT_ERR_OBSERVER)
                rc = die(EX_UNAVAILABLE, "--dump-hidden: %s", dump.msg[0] ? dump.msg : s->L.rt->last_error(s->m));
            else if (st == BU_RT_OK)
                rc = dump_finish(&dump, (int64_t)prompt.n);
            if (rc || st != BU_RT_OK) dump_discard(&dump);
            dump_free(&dump);
            if (rc) {
                free(all);
                goto out;
            }
        }
        if (st == BU_RT_OK && o->all_logits) rc = write_all_logits(o->all_logits, all, nf);
        free(all);
        if (st == BU_RT_ERR_OBSERVER) goto out;
    } else {
        st = s->L.rt->prefill(s->m, prompt.p, (int32_t)prompt.n);
        s->t.prompt_ms = now_ms() - t0;
    }
    s->t.prompt_tokens = (long)prompt.n;
    if (st != BU_RT_OK) {
        rc = rt_fail(s, st);
        goto out;
    }
    if (rc) goto out;
    int room = s->L.rt->n_ctx(s->m) - s->L.rt->n_past(s->m);
    if (o->max_tokens > room + 1) {
        /* Generating past the context would need more KV rows than exist: say so, do not truncate. */
        rc = die(EX_USAGE, "--max-tokens %d does not fit: %d of %d context positions are left after the prompt",
                 o->max_tokens, room, s->L.rt->n_ctx(s->m));
        goto out;
    }
    int pending;
    if ((rc = generate(s, &gen, &text, !o->json && s->tok != NULL, t0, &pending))) goto out;
    if (!o->json && s->tok != NULL) {
        fputc('\n', stdout);   /* end the streamed answer's line */
        fflush(stdout);
    }
    if (o->json) {
        int replaced = 0;
        printf("{\"prompt_tokens\": ");
        json_ids(stdout, prompt.p, prompt.n);
        printf(", \"generated_tokens\": ");
        json_ids(stdout, gen.p, gen.n);
        printf(", \"text\": ");
        if (s->tok) json_str(stdout, text.p ? text.p : "", text.n, &replaced);
        else printf("null");
        printf(", \"text_lossless\": %s", replaced ? "false" : "true");
        printf(", \"n_ctx\": %d, \"payload_verified\": %s, \"timing\": {", s->L.rt->n_ctx(s->m),
               s->L.rt->payload_verified(s->m) ? "true" : "false");
        timing_fields(stdout, &s->t, " ");
        printf("}}\n");
    } else if (s->tok) {
        fputc('\n', stdout);
    } else {
        json_ids(stdout, gen.p, gen.n);
        fputc('\n', stdout);
    }
out:
    free(prompt.p);
    free(gen.p);
    free(text.p);
    return rc;
}

static char *read_line(FILE *f)
{
    str_t s = {0};
    int c;
    while ((c = fgetc(f)) != EOF && c != '\n') {
        char ch = (char)c;
        str_add(&s, &ch, 1);
    }
    if (c == EOF && s.n == 0) {
        free(s.p);
        return NULL;
    }
    if (!s.p) str_add(&s, "", 0);
    return s.p;
}

/* Interactive chat: the conversation stays in the KV cache; each turn evaluates only its new
 * tokens. When a turn does not fit the context, the user is told and the conversation restarts. */
static int interactive(sess_t *s)
{
    const opts_t *o = s->o;
    int first = 1;
    fprintf(stderr, "%s: interactive chat (empty line or end of input quits, /reset restarts)\n", prog);
    for (;;) {
        fflush(stdout);   /* the answer before the next prompt, also when stdout is a pipe */
        fprintf(stderr, "> ");
        char *line = read_line(stdin);
        if (!line || !line[0]) {
            free(line);
            return EX_OK;
        }
        if (!strcmp(line, "/reset")) {
            s->L.rt->reset(s->m);
            first = 1;
            free(line);
            continue;
        }
        str_t src = {0};
        if (first)
            chat_first(&s->chat, &src, o->system, line);
        else
            chat_next(&s->chat, &src, line);
        free(line);
        ids_t turn = {0}, gen = {0};
        str_t text = {0};
        int rc = encode(s, src.p, src.n, (first ? BU_TOK_ADD_SPECIAL : 0) | BU_TOK_PARSE_SPECIAL, &turn);
        free(src.p);
        if (rc) return rc;
        int32_t room = s->L.rt->n_ctx(s->m) - s->L.rt->n_past(s->m);
        if ((int64_t)turn.n + o->max_tokens > room) {
            fprintf(stderr, "%s: this turn (%zu tokens + up to %d generated) does not fit the %d positions left; "
                            "the conversation restarts\n", prog, turn.n, o->max_tokens, room);
            s->L.rt->reset(s->m);
            free(turn.p);
            first = 1;
            continue;
        }
        double t0 = now_ms();
        int st = s->L.rt->prefill(s->m, turn.p, (int32_t)turn.n);
        if (st != BU_RT_OK) return rt_fail(s, st);
        int pending;
        if ((rc = generate(s, &gen, &text, 1, t0, &pending))) return rc;
        fputc('\n', stdout);
        /* close the assistant turn in the context: the generated ids are in the KV cache except
         * a pending last one, which is evaluated with the turn suffix */
        str_t close_ = {0};
        str_adds(&close_, s->chat.f[CF_ASSIST_SUF]);
        ids_t tail = {0};
        if (pending && gen.n) ids_add(&tail, gen.p[gen.n - 1]);
        if ((rc = encode(s, close_.p, close_.n, BU_TOK_PARSE_SPECIAL, &tail))) return rc;
        free(close_.p);
        if (tail.n && (int64_t)s->L.rt->n_past(s->m) + (int64_t)tail.n <= s->L.rt->n_ctx(s->m)) {
            st = s->L.rt->prefill(s->m, tail.p, (int32_t)tail.n);
            if (st != BU_RT_OK) return rt_fail(s, st);
        } else {
            s->L.rt->reset(s->m);
            first = 1;
            free(turn.p); free(gen.p); free(text.p); free(tail.p);
            continue;
        }
        first = 0;
        free(turn.p); free(gen.p); free(text.p); free(tail.p);
    }
}

int main(int argc, char **argv)
{
    opts_t o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    sess_t s;
    memset(&s, 0, sizeof s);
    s.o = &o;
    if ((rc = load_lib(o.lib, &s.L))) return rc;

    bu_open_params p = s.L.rt->default_params();
    p.n_ctx = o.ctx;
    p.verify_payload = o.verify;
    p.n_threads = o.threads;
    char err[1024];
    int st = s.L.rt->open(o.weights, &p, &s.m, err, sizeof err);
    if (st != BU_RT_OK) return die(exit_for_status(st), "%s", err);
    if (!o.verify) fprintf(stderr, "%s: warning: weights payload SHA-256 NOT verified (--no-verify)\n", prog);
    size_t blob_n = 0;
    const void *blob = s.L.rt->tensor(s.m, "tokenizer.blob", &blob_n);
    if (blob) {
        if (s.L.tok_load(blob, blob_n, &s.tok, err, sizeof err) != BU_TOK_OK) {
            rc = die(EX_INTEGRITY, "tokenizer.blob in %s: %s", o.weights, err);
            goto done;
        }
        if (s.L.tok_n_vocab(s.tok) != s.L.rt->n_vocab(s.m)) {
            rc = die(EX_INTEGRITY, "tokenizer.blob has %d tokens, the model %d", s.L.tok_n_vocab(s.tok),
                     s.L.rt->n_vocab(s.m));
            goto done;
        }
    } else if (!o.prompt_tokens) {
        rc = die(EX_UNSUPPORTED, "%s has no tokenizer.blob: only --prompt-tokens can be used", o.weights);
        goto done;
    }
    size_t chat_n = 0;
    const void *chat_blob = s.L.rt->tensor(s.m, "chat.format", &chat_n);
    if (chat_blob) {
        if (chat_parse(chat_blob, chat_n, &s.chat, err, sizeof err) != 0) {
            rc = die(EX_INTEGRITY, "chat.format in %s: %s", o.weights, err);
            goto done;
        }
        s.have_chat = 1;
    }
    int want_chat = o.chat || (!o.prompt && !o.prompt_tokens);
    if (want_chat && !s.have_chat) {
        rc = die(EX_UNSUPPORTED, "%s carries no chat format (tensor chat.format): use --prompt without --chat",
                 o.weights);
        goto done;
    }
    s.smp = s.L.sampler_new(&o.sp, (size_t)s.L.rt->n_vocab(s.m), err, sizeof err);
    if (!s.smp) {
        rc = die(EX_USAGE, "%s", err);
        goto done;
    }
    if (o.prompt || o.prompt_tokens)
        rc = one_shot(&s);
    else
        rc = interactive(&s);
    if (rc == EX_OK && o.timing) timing_report(stderr, &s.t, s.L.rt->memory_bytes(s.m));
done:
    s.L.sampler_free(s.smp);
    if (s.tok) s.L.tok_free(s.tok);
    free(s.chat.mem);
    s.L.rt->close(s.m);
    return rc;
}
