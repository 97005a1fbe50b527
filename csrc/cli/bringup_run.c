/* bringup-run: run a bringup-built model. No Python at run time.
 *
 *   bringup-run -m DIR [options]            (DIR: what a build or an export produced)
 *   bringup-run LIBMODEL WEIGHTS [options]
 *
 * LIBMODEL is dlopen'ed: the runtime API comes from its bu_api_get(), the tokenizer and sampler
 * from their exported functions (all built into libmodel.so by `bringup build`). The tokenizer
 * blob and the chat format are read from the weights file (tensors "tokenizer.blob" and
 * "chat.format"). Options and exit codes: args.c and docs/runtime.md. The other files of this
 * program are listed in bringup_run.h.
 */
#include "bringup_run.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *const prog = "bringup-run";

/* The code point of the UTF-8 sequence at s[0..n), its length in *len; -1 (and *len = 1) when
 * the bytes are not a valid, shortest-form sequence. */
static long utf8_at(const unsigned char *s, size_t n, size_t *len)
{
    *len = 1;
    unsigned c = s[0];
    size_t k = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    if (!k || k > n || (c >= 0xF5)) return -1;
    long cp = (long)(c & (0x7F >> k));
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((k == 3 && (cp < 0x800 || (cp >= 0xD800 && cp < 0xE000))) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return -1;
    *len = k;
    return cp;
}

/* Code points that could start a line, rewrite the terminal or reorder the text around them:
 * C1 controls, zero-width and bidi format characters, the line and paragraph separators, BOM
 * (bringup's Python rule, errors.one_line, escapes the same Unicode categories Cc, Cf, Zl, Zp). */
static int unsafe_cp(long cp)
{
    return (cp >= 0x80 && cp <= 0x9F) || cp == 0xAD || (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202E) ||
           (cp >= 0x2060 && cp <= 0x206F) || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB);
}

void put_shown(FILE *f, const char *text, size_t n)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t shown = n > SHOWN_MAX ? SHOWN_MAX : n;
    for (size_t i = 0; i < shown;) {
        unsigned c = s[i];
        size_t len = 1;
        long cp = c < 0x80 ? (long)c : utf8_at(s + i, n - i, &len);
        if (c == '\n') fputs("\\n", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c == '\t') fputs("\\t", f);
        else if (cp < 0 || c < 0x20 || c == 0x7F || (cp >= 0 && cp < 0x100 && unsafe_cp(cp))) fprintf(f, "\\x%02x", cp < 0 ? c : (unsigned)cp);
        else if (unsafe_cp(cp)) fprintf(f, "\\u%04lx", cp);
        else fwrite(s + i, 1, len, f);
        i += len;
    }
    if (shown < n) fprintf(f, "...[%zu more bytes]", n - shown);
}

/* "bringup-run: <head><message>" and a newline on stderr, the message shown escaped. */
static void vsay(const char *head, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    char small[512];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    char *msg = n < (int)sizeof small ? small : xrealloc(NULL, (size_t)n + 1);
    if (msg != small) vsnprintf(msg, (size_t)n + 1, fmt, again);
    va_end(again);
    fprintf(stderr, "%s: %s", prog, head);
    put_shown(stderr, msg, n < 0 ? 0 : (size_t)n);
    fputc('\n', stderr);
    if (msg != small) free(msg);
}

int die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay("error: ", fmt, ap);
    va_end(ap);
    return code;
}

void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay("", fmt, ap);
    va_end(ap);
}

int exit_for_status(int s)
{
    switch (s) {
    case BU_RT_ERR_ARG: case BU_RT_ERR_CONTEXT: return EX_USAGE;
    case BU_RT_ERR_FORMAT: case BU_RT_ERR_INTEGRITY: case BU_RT_ERR_WRONG_MODEL: return EX_INTEGRITY;
    case BU_RT_ERR_IO: case BU_RT_ERR_NOMEM: return EX_UNAVAILABLE;
    default: return EX_INTERNAL;
    }
}

static void out_of_memory(size_t n)
{
    fprintf(stderr, "%s: error: out of memory (%zu bytes)\n", prog, n);
    exit(EX_UNAVAILABLE);
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) out_of_memory(n);
    return q;
}

void str_add(bu_str *s, const char *p, size_t n)
{
    if (bu_str_add(s, p, n)) out_of_memory(s->n + n + 1);
}

void str_adds(bu_str *s, const char *z) { str_add(s, z, strlen(z)); }

void ids_add(ids_t *v, int32_t id)
{
    if (ids_t_push(v, id)) out_of_memory((v->n + 1) * sizeof *v->v);
}

double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* The tokenizer (tensor "tokenizer.blob"; without it only --prompt-tokens works) and the chat
 * format (tensor "chat.format"; --chat and the interactive loop need it) from the weights file. */
static int load_text_side(sess_t *s, const opts_t *o, char *err, size_t cap)
{
    size_t blob_n = 0;
    const void *blob = s->L.rt->tensor(s->m, "tokenizer.blob", &blob_n);
    if (blob) {
        if (s->L.tok_load(blob, blob_n, &s->tok, err, cap) != BU_TOK_OK)
            return die(EX_INTEGRITY, "tokenizer.blob in %s: %s", o->weights, err);
        if (s->L.tok_n_vocab(s->tok) != s->L.rt->n_vocab(s->m))
            return die(EX_INTEGRITY, "tokenizer.blob has %d tokens, the model %d", s->L.tok_n_vocab(s->tok),
                       s->L.rt->n_vocab(s->m));
    } else if (!o->prompt_tokens) {
        return die(EX_UNSUPPORTED, "%s has no tokenizer.blob: only --prompt-tokens can be used", o->weights);
    }
    size_t chat_n = 0;
    const void *chat_blob = s->L.rt->tensor(s->m, "chat.format", &chat_n);
    if (chat_blob) {
        if (chat_parse(chat_blob, chat_n, &s->chat, err, cap) != 0)
            return die(EX_INTEGRITY, "chat.format in %s: %s", o->weights, err);
        s->have_chat = 1;
    }
    int want_chat = !o->srv.on && (o->chat || o->interactive || (!o->prompt && !o->prompt_tokens));
    if (want_chat && !s->have_chat)
        return die(EX_UNSUPPORTED, "%s carries no chat format (tensor chat.format): use --prompt without --chat",
                   o->weights);
    if (want_chat) {
        /* the format is circuit data chosen at convert time, not the GGUF's template run here:
         * say once which one and why (gemma3's GGUF has no template at all) */
        int recorded;
        char *why = chat_format_source(o->weights, &recorded);
        if (recorded)
            say("%s (tensor chat.format)", why);
        else
            say("chat format '%s' (tensor chat.format); %s", s->chat.f[CF_NAME], why);
        free(why);
    }
    return EX_OK;
}

static void verbose_report(const sess_t *s, const opts_t *o)
{
    const bu_sampler_params *sp = &o->sp;
    say("library %s", o->lib);
    say("weights %s", o->weights);
    say("found by: %s", o->found_by);
    fprintf(stderr, "%s: context %d tokens (planned maximum %d), KV cache %s, %d threads, payload SHA-256 %s\n", prog,
            s->L.rt->n_ctx(s->m), s->L.rt->max_ctx(), s->L.rt->kv_dtype(s->m), o->threads,
            s->L.rt->payload_verified(s->m) ? "verified" : "NOT verified");
    fprintf(stderr, "%s: sampler: temperature %g, top-k %d, top-p %g, min-p %g, repeat penalty %g over %d ids, seed %llu\n",
            prog, sp->temperature, sp->top_k, sp->top_p, sp->min_p, sp->repeat_penalty, sp->repeat_last_n,
            (unsigned long long)sp->seed);
}

/* -s -1: a seed from the clock and the process id, printed so the run can be repeated. */
static uint64_t drawn_seed(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t x = ((uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec) ^ ((uint64_t)getpid() << 32);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;   /* MurmurHash3's fmix64, so nearby clocks give unrelated seeds */
    return x ^ (x >> 33);
}

static void free_opts(opts_t *o)
{
    for (int i = 0; i < N_OWNED; i++) free(o->owned[i]);
}

int main(int argc, char **argv)
{
    double start = now_ms();
    opts_t o;
    int rc = parse_args(argc, argv, &o);
    if (!rc) rc = resolve_model(&o);
    if (!rc) rc = read_prompt_file(&o);
    if (!rc) rc = apply_escapes(&o);
    if (!rc) habit_notes(&o);
    if (!rc && o.all_logits) rc = check_output_path("--all-logits", o.all_logits);   /* before any work */
    if (rc) {
        free_opts(&o);
        return rc;
    }
    sess_t s;
    memset(&s, 0, sizeof s);
    s.o = &o;
    s.t.start_ms = start;
    if ((rc = load_lib(o.lib, &s.L))) {
        free_opts(&o);
        return rc;
    }
    bu_open_params p = s.L.rt->default_params();
    p.n_ctx = o.ctx;
    p.verify_payload = o.verify;
    p.n_threads = o.threads;
    char err[1024];
    double t_open = now_ms();
    int st = s.L.rt->open(o.weights, &p, &s.m, err, sizeof err);
    s.t.open_ms = now_ms() - t_open;
    if (st != BU_RT_OK) {
        free_opts(&o);
        return die(exit_for_status(st), "%s", err);
    }
    if (!o.verify) fprintf(stderr, "%s: warning: weights payload SHA-256 NOT verified (--no-verify)\n", prog);
    if (o.seed_random) {
        o.sp.seed = drawn_seed();
        fprintf(stderr, "%s: seed %llu (drawn; -s %llu repeats this run)\n", prog, (unsigned long long)o.sp.seed,
                (unsigned long long)o.sp.seed);
    }
    o.sp.repeat_last_n = o.repeat_last_n < 0 ? s.L.rt->n_ctx(s.m) : o.repeat_last_n;
    s.t.verified = s.L.rt->payload_verified(s.m);
    s.t.sha256_impl = s.L.sha256_impl();
    if (o.verbose) verbose_report(&s, &o);
    if (o.mlock && (rc = lock_weights(&s))) goto done;
    batch_note(&s);
    if ((rc = load_text_side(&s, &o, err, sizeof err))) goto done;
    set_prompt_cap(&s);
    if (o.prompt && (rc = check_prompt_size(&s, strlen(o.prompt), o.prompt_file ? "-f" : "-p", o.prompt_file)))
        goto done;
    s.smp = s.L.sampler_new(&o.sp, (size_t)s.L.rt->n_vocab(s.m), err, sizeof err);
    if (!s.smp) {
        rc = die(EX_USAGE, "%s", err);
        goto done;
    }
    s.t.load_ms = now_ms() - start;
    if (o.srv.on)
        rc = server_run(&s);
    else if ((o.prompt || o.prompt_tokens) && !o.interactive)
        rc = one_shot(&s);
    else
        rc = interactive(&s);
    if (rc == EX_OK && o.timing) timing_report(stderr, &s.t, s.L.rt->memory_bytes(s.m));
    if (rc == EX_OK && o.timing) fprintf(stderr, "  kernels ISA: %s (BU_ISA to force a lower level)\n", s.L.isa_name());
    if (rc == EX_OK && o.timing) perf_report(stderr, &s.t);
done:
    s.L.sampler_free(s.smp);
    if (s.tok) s.L.tok_free(s.tok);
    free(s.chat.mem);
    s.L.rt->close(s.m);
    free_opts(&o);
    return rc;
}
