/* Tokenizing, detokenizing and the generation loop of bringup-run: sample (bu_sampler), stop at
 * end-of-generation, decode the next token, time each part. */
#include "generate.h"
#include "habits.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

int rt_fail(sess_t *s, int status)
{
    return die(exit_for_status(status), "%s", s->L.rt->last_error(s->m));
}

int encode(sess_t *s, const char *text, size_t n, unsigned flags, ids_t *out)
{
    char err[256];
    int64_t need = s->L.tok_encode(s->tok, text, n, flags, NULL, 0, err, sizeof err);
    if (need < 0) return die(EX_USAGE, "cannot tokenize the prompt: %s", err);
    size_t base = out->n;
    for (int64_t i = 0; i < need; i++) ids_add(out, 0);
    int64_t got = s->L.tok_encode(s->tok, text, n, flags, out->v + base, (size_t)need, err, sizeof err);
    if (got != need) return die(EX_INTERNAL, "tokenizer gave %" PRId64 " ids, then %" PRId64, need, got);
    return EX_OK;
}

void set_prompt_cap(sess_t *s)
{
    if (!s->tok) return;
    int64_t longest = 4;
    for (int32_t id = 0; id < s->L.tok_n_vocab(s->tok); id++) {
        int64_t n = s->L.tok_decode(s->tok, id, BU_TOK_DECODE_SPECIAL, NULL, 0);
        if (n > longest) longest = n;
    }
    s->longest_token = longest;
    s->prompt_cap = (size_t)s->L.rt->n_ctx(s->m) * (size_t)longest;
}

int check_prompt_size(const sess_t *s, size_t n, const char *what, const char *name)
{
    if (!s->prompt_cap || n <= s->prompt_cap) return EX_OK;
    return die(EX_USAGE, "%s%s%s is %zu bytes; at most %zu bytes can fit the %d-token context (%lld bytes per token, "
               "the vocabulary's longest): refused before tokenizing", what, name ? " " : "", name ? name : "", n,
               s->prompt_cap, s->L.rt->n_ctx(s->m), (long long)s->longest_token);
}

/* Append the bytes of token id to out (growing as needed). */
static void piece(sess_t *s, int32_t id, bu_str *out)
{
    char buf[256];
    int64_t n = s->L.tok_decode(s->tok, id, 0, buf, sizeof buf);
    if (n < 0) {
        /* never drop a token silently: a token with no bytes is a broken vocabulary */
        exit(die(EX_INTEGRITY, "cannot detokenize token id %d (tokenizer status %lld)", (int)id, (long long)n));
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

static int ends_with_stop(const sess_t *s, const bu_str *text, size_t from)
{
    if (!s->have_chat || !s->o->stop) return 0;
    for (int i = 0; i < s->chat.n_stop; i++) {
        size_t k = strlen(s->chat.stop[i]);
        if (k && text->n >= k && text->n - k >= from && !memcmp(text->p + text->n - k, s->chat.stop[i], k)) return 1;
    }
    return 0;
}

void accept_ids(sess_t *s, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) s->L.sampler_accept(s->smp, ids[i]);   /* ids were range-checked by the runtime */
}

int generate(sess_t *s, int max, ids_t *gen, bu_str *text, int stream, double t_start, int *pending)
{
    char err[256];
    size_t text0 = text->n;
    *pending = 0;  /* 1 when the last generated id is not yet in the KV cache */
    s->interrupted = 0;
    for (int i = 0; i < max; i++) {
        if (s->interrupt && *s->interrupt) {   /* Ctrl-C: every id so far is in the KV cache */
            s->interrupted = 1;
            break;
        }
        double t0 = now_ms();
        const float *lg = s->L.rt->logits(s->m);
        int32_t id = lg ? s->L.sampler_sample(s->smp, lg, err, sizeof err) : -1;
        s->t.sample_ms += now_ms() - t0;
        s->t.sample_runs++;
        if (id < 0) return die(EX_INTERNAL, "sampling failed: %s", lg ? err : "no logits");
        if (gen->n == 0 && i == 0) s->t.ttft_ms = now_ms() - t_start;
        if (!s->t.first_token_ms) s->t.first_token_ms = now_ms() - s->t.start_ms;
        if (s->tok && s->o->stop && s->L.tok_is_eog(s->tok, id)) break;
        ids_add(gen, id);
        s->L.sampler_accept(s->smp, id);
        if (s->tok) {
            size_t before = text->n;
            piece(s, id, text);
            if (stream) {
                fwrite(text->p + before, 1, text->n - before, stdout);
                fflush(stdout);
            }
            if (s->on_piece && s->on_piece(s->piece_ctx, text, before)) { *pending = 1; break; }
            if (ends_with_stop(s, text, text0) || reverse_prompt_seen(s, text, text0, before)) { *pending = 1; break; }
        }
        if (i + 1 == max) { *pending = 1; break; }  /* no need to evaluate the last one */
        t0 = now_ms();
        int rc = s->L.rt->decode(s->m, id);
        s->t.decode_ms += now_ms() - t0;
        s->t.decode_runs++;
        if (rc != BU_RT_OK) return rt_fail(s, rc);
    }
    return EX_OK;
}
