/* A --prompt / --prompt-tokens run of bringup-run: the prompt's prefill (with the --all-logits and
 * --dump-hidden outputs, which need every position's row), then generation, then the answer as
 * streamed text, as ids (no tokenizer) or as one JSON object (--json). */
#include "modes.h"
#include "dump_hidden.h"
#include "habits.h"
#include "json_out.h"
#include "out_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

/* The prompt's ids: --prompt-tokens as given, or --prompt (wrapped as a user turn with --chat)
 * through the tokenizer, special-token texts parsed, BOS/EOS as the model says. */
static int prompt_ids(sess_t *s, ids_t *prompt)
{
    const opts_t *o = s->o;
    if (o->prompt_tokens) return parse_ids(o->prompt_tokens, s->L.rt->n_vocab(s->m), prompt);
    bu_str src = {0};
    if (o->chat)
        chat_first(&s->chat, &src, o->system, o->prompt);
    else
        str_adds(&src, o->prompt);
    int rc = encode(s, src.p, src.n, BU_TOK_ADD_SPECIAL | BU_TOK_PARSE_SPECIAL, prompt);
    free(src.p);
    if (rc) return rc;
    if (prompt->n == 0) return die(EX_USAGE, "the prompt encodes to no tokens");
    return EX_OK;
}

/* The prefill that records every position (bu_prefill_all_logits), for --all-logits and
 * --dump-hidden: a dump covers every row, footer ops included, so the logits tail runs for every
 * position. *t0 is when the evaluation started (after the dump folder's setup), *st the runtime
 * status (reported by the caller); the return value is an exit code, its message printed, when an
 * output failed. */
static int prefill_recorded(sess_t *s, const ids_t *prompt, double *t0, int *st)
{
    const opts_t *o = s->o;
    dump_t dump;
    memset(&dump, 0, sizeof dump);
    int rc = EX_OK;
    *st = BU_RT_OK;
    if (o->dump_hidden) {
        if (!bu_host_is_little_endian())
            return die(EX_UNSUPPORTED, "--dump-hidden writes little-endian float32; this host is not little-endian");
        if ((rc = dump_begin(&dump, o->dump_hidden))) {
            dump_free(&dump);
            return rc;
        }
        s->L.rt->set_observer(s->m, dump_observe, &dump);
    }
    *t0 = now_ms();
    size_t nf = prompt->n * (size_t)s->L.rt->n_vocab(s->m);
    float *all = malloc(nf * sizeof(float));
    if (!all) {
        rc = die(EX_UNAVAILABLE, "out of memory for %zu logits", nf);
        s->L.rt->set_observer(s->m, NULL, NULL);
        dump_discard(&dump);
        dump_free(&dump);
        return rc;
    }
    *st = s->L.rt->prefill_all_logits(s->m, prompt->v, (int32_t)prompt->n, all, nf);
    s->t.prompt_ms = now_ms() - *t0;
    if (o->dump_hidden) {
        s->L.rt->set_observer(s->m, NULL, NULL);
        if (*st == BU_RT_ERR_OBSERVER)
            rc = die(EX_UNAVAILABLE, "--dump-hidden: %s", dump.msg[0] ? dump.msg : s->L.rt->last_error(s->m));
        else if (*st == BU_RT_OK)
            rc = dump_finish(&dump, (int64_t)prompt->n);
        if (rc || *st != BU_RT_OK) dump_discard(&dump);
        dump_free(&dump);
    }
    if (!rc && *st == BU_RT_OK && o->all_logits) rc = write_all_logits(o->all_logits, all, nf);
    free(all);
    return rc;
}

/* The kernel library's JSON account of which ISA level serves each class of linear call and why
 * (bu_isa_report): the library's own text, numbers and fixed words only; sized by a first call. */
static void print_isa_report(sess_t *s)
{
    const size_t n = s->L.isa_report(NULL, 0);
    char *buf = malloc(n + 1);
    if (buf && s->L.isa_report(buf, n + 1) == n) {
        fputs(buf, stdout);
    } else {
        printf("null");
        fprintf(stderr, "bringup-run: warning: no memory for the ISA dispatch report; --json shows null\n");
    }
    free(buf);
}

/* stdout after generation: the ids (no tokenizer) or --json (the streamed text's line was ended by
 * one_shot; a second newline here printed an empty line after every answer). */
static void print_answer(sess_t *s, const ids_t *prompt, const ids_t *gen, const bu_str *text)
{
    if (s->o->json) {
        int replaced = 0;
        printf("{\"prompt_tokens\": ");
        json_ids(stdout, prompt->v, prompt->n);
        printf(", \"generated_tokens\": ");
        json_ids(stdout, gen->v, gen->n);
        printf(", \"text\": ");
        if (s->tok) json_str(stdout, text->p ? text->p : "", text->n, &replaced);
        else printf("null");
        printf(", \"text_lossless\": %s", replaced ? "false" : "true");
        printf(", \"n_ctx\": %d, \"kv_dtype\": \"%s\", \"payload_verified\": %s, \"threads\": %d, \"isa\": \"%s\", "
               "\"files\": {\"library\": ",
               s->L.rt->n_ctx(s->m), s->L.rt->kv_dtype(s->m), s->L.rt->payload_verified(s->m) ? "true" : "false",
               s->o->threads, s->L.isa_name());
        int r2 = 0;   /* paths are bytes; a non-UTF-8 path shows U+FFFD here */
        json_str(stdout, s->o->lib, strlen(s->o->lib), &r2);
        printf(", \"weights\": ");
        json_str(stdout, s->o->weights, strlen(s->o->weights), &r2);
        printf(", \"found_by\": ");
        json_str(stdout, s->o->found_by, strlen(s->o->found_by), &r2);
        const bu_sampler_params *sp = &s->o->sp;
        printf("}, \"sampler\": {\"temperature\": %.9g, \"top_k\": %d, \"top_p\": %.9g, \"min_p\": %.9g, "
               "\"repeat_penalty\": %.9g, \"repeat_last_n\": %d, \"seed\": %llu}, \"timing\": {",
               sp->temperature, sp->top_k, sp->top_p, sp->min_p, sp->repeat_penalty, sp->repeat_last_n,
               (unsigned long long)sp->seed);
        timing_fields(stdout, &s->t, " ");
        printf("}, \"isa_dispatch\": ");
        print_isa_report(s);
        printf("}\n");
    } else if (!s->tok) {
        json_ids(stdout, gen->v, gen->n);
        fputc('\n', stdout);
    }
}

int one_shot(sess_t *s)
{
    const opts_t *o = s->o;
    ids_t prompt = {0}, gen = {0};
    bu_str text = {0};
    int rc = prompt_ids(s, &prompt);
    if (rc) goto out;
    if (prompt.n > (size_t)s->L.rt->n_ctx(s->m)) {
        rc = die(EX_USAGE, "the prompt has %zu tokens, the context holds %d (--ctx)", prompt.n, s->L.rt->n_ctx(s->m));
        goto out;
    }
    /* -n checked before anything is printed: a refused run writes nothing on stdout. The prompt is
     * evaluated from an empty cache, so after it n_ctx - prompt.n positions are left. */
    int room = s->L.rt->n_ctx(s->m) - s->L.rt->n_past(s->m) - (int)prompt.n;
    /* the last generated id needs no KV row: room + 1 ids fit */
    int max = o->max_tokens < 0 ? room + 1 : o->max_tokens;
    if (max > room + 1) {
        /* Generating past the context would need more KV rows than exist: say so, do not truncate. */
        rc = die(EX_USAGE, "-n %d does not fit: %d of %d context positions are left after the prompt (-n -1: until "
                 "the context is full)", o->max_tokens, room, s->L.rt->n_ctx(s->m));
        goto out;
    }
    double t0;
    int st;
    if (o->display_prompt && !o->json && o->prompt && s->tok) {
        echo_prompt(s, o->prompt);   /* as llama-cli */
        if (o->chat) fputs("\n", stdout);   /* a chat turn's answer is a message of its own, not a continuation */
    }
    if (o->all_logits || o->dump_hidden) {
        if ((rc = prefill_recorded(s, &prompt, &t0, &st))) goto out;
    } else {
        t0 = now_ms();
        st = prefill_batched(s, prompt.v, (int32_t)prompt.n);
        s->t.prompt_ms = now_ms() - t0;
    }
    s->t.prompt_tokens = (long)prompt.n;
    if (st != BU_RT_OK) {
        rc = rt_fail(s, st);
        goto out;
    }
    accept_ids(s, prompt.v, prompt.n);
    if (s->L.rt->n_ctx(s->m) - s->L.rt->n_past(s->m) != room) {
        rc = die(EX_INTERNAL, "the prompt of %zu tokens left %d positions, not %d", prompt.n,
                 s->L.rt->n_ctx(s->m) - s->L.rt->n_past(s->m), room);
        goto out;
    }
    int pending;
    if ((rc = generate(s, max, &gen, &text, !o->json && s->tok != NULL, t0, &pending))) goto out;
    if (o->max_tokens < 0 && gen.n == (size_t)max)
        fprintf(stderr, "%s: the context (%d tokens) is full: generation stopped\n", prog, s->L.rt->n_ctx(s->m));
    if (!o->json && s->tok != NULL) {
        fputc('\n', stdout);   /* end the streamed answer's line */
        fflush(stdout);
    }
    print_answer(s, &prompt, &gen, &text);
out:
    free(prompt.v);
    free(gen.v);
    free(text.p);
    return rc;
}
