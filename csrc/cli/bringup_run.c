/* bringup-run: run a bringup-built model. No Python at run time.
 *
 *   bringup-run -m DIR [options]            (DIR: what a build or an export produced)
 *   bringup-run LIBMODEL WEIGHTS [options]
 *
 * LIBMODEL is dlopen'ed: the runtime API comes from its bu_api_get(), the tokenizer and sampler
 * from their exported functions (all built into libmodel.so by `bringup build`). The tokenizer
 * blob and the chat format are read from the weights file (tensors "tokenizer.blob" and
 * "chat.format"). Options and exit codes: args.c and docs/runtime.md. The other files of this
 * program are listed in docs/runtime.md; each has its header here (util.h is the leaf).
 */
#include "args.h"
#include "habits.h"
#include "library.h"
#include "model_files.h"
#include "modes.h"
#include "out_file.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
