/* The body of a /v1/chat/completions or /v1/completions request (OpenAI's fields, llama-server's
 * sampling extensions), read from the strict JSON document (bu_json.c). Every field is checked for
 * its JSON type and its domain (the CLI's domains: args.c); a field this server does not know is
 * refused, and one it knows but does not implement (n, penalties, logprobs, echo, best_of) is
 * accepted only at the value that means "off". null means "not given", as OpenAI's API has it. */
#include "bu_http.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bad(rq_t *r, char *err, size_t cap, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    r->param = param;
    return 400;
}

/* A name from the request for a message: printable ASCII as is, other bytes as \xNN, at most 40
 * bytes shown (the message stays one line whatever the client sent). */
static const char *shown(const char *z, char out[200])
{
    size_t k = 0, i = 0;
    for (; z[i] && i < 40; i++) {
        unsigned char c = (unsigned char)z[i];
        if (c >= 0x20 && c < 0x7F) out[k++] = (char)c;
        else k += (size_t)snprintf(out + k, 5, "\\x%02x", c);
    }
    if (z[i]) memcpy(out + k, "...", 3), k += 3;
    out[k] = 0;
    return out;
}

enum { F_FLOAT, F_INT, F_SEED };
typedef struct {
    const char *name;
    int kind;
    double lo, hi;
    int open_lo;
    const char *domain;
} numfield;

/* The sampling fields, the CLI's domains (--temp, --top-k, ...). */
static const numfield NUMS[] = {
    {"temperature", F_FLOAT, 0, INFINITY, 0, "a finite number >= 0 (0 = greedy)"},
    {"top_p", F_FLOAT, 0, 1, 1, "a number in (0, 1]"},
    {"min_p", F_FLOAT, 0, 1, 0, "a number in [0, 1]"},
    {"repeat_penalty", F_FLOAT, 0, INFINITY, 1, "a finite number > 0 (1 = off)"},
    {"top_k", F_INT, 0, INT32_MAX, 0, "an integer >= 0 (0 = all)"},
    {"repeat_last_n", F_INT, 0, INT32_MAX, 0, "an integer >= 0 (0 = off)"},
    {"max_tokens", F_INT, 0, INT32_MAX, 0, "an integer >= 0"},
    {"max_completion_tokens", F_INT, 0, INT32_MAX, 0, "an integer >= 0"},
    {"seed", F_SEED, 0, 9.2e18, 0, "an integer >= 0"},
};

static int number(rq_t *r, const numfield *f, const jval *v, char *err, size_t cap)
{
    if (v->t != J_NUM) return bad(r, err, cap, f->name, "%s must be %s, not %s", f->name, f->domain, j_kind(v));
    if (f->kind != F_FLOAT && !v->is_int)
        return bad(r, err, cap, f->name, "%s must be %s (written without a fraction or exponent)", f->name, f->domain);
    double x = f->kind == F_FLOAT ? v->num : (double)v->i;
    float fl = (float)x;
    if ((f->kind != F_FLOAT && (v->i < (int64_t)f->lo || (f->kind == F_INT && v->i > (int64_t)f->hi))) ||
        (f->kind == F_FLOAT && (!isfinite(fl) || x < f->lo || (f->open_lo && x == f->lo) || x > f->hi)))
        return bad(r, err, cap, f->name, "%s must be %s", f->name, f->domain);
    bu_sampler_params *sp = &r->sp;
    const char *n = f->name;
    if (!strcmp(n, "temperature")) sp->temperature = fl;
    else if (!strcmp(n, "top_p")) sp->top_p = fl;
    else if (!strcmp(n, "min_p")) sp->min_p = fl;
    else if (!strcmp(n, "repeat_penalty")) sp->repeat_penalty = fl;
    else if (!strcmp(n, "top_k")) sp->top_k = (int32_t)v->i;
    else if (!strcmp(n, "repeat_last_n")) sp->repeat_last_n = (int32_t)v->i;
    else if (!strcmp(n, "seed")) sp->seed = (uint64_t)v->i;
    else r->max_tokens = (int)v->i;
    return 0;
}

/* Fields accepted only at their "off" value: what they would ask for is not implemented. */
static int off_only(rq_t *r, const jval *m, char *err, size_t cap)
{
    const char *k = m->key;
    int ok = !strcmp(k, "n") || !strcmp(k, "best_of") ? m->t == J_NUM && m->is_int && m->i == 1
           : !strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty") ? m->t == J_NUM && m->num == 0
           : m->t == J_FALSE;   /* logprobs, echo */
    if (!ok) return bad(r, err, cap, k, "%s is not supported by this server (only its default value is accepted)", k);
    return 0;
}

static int stops(rq_t *r, const jval *v, char *err, size_t cap)
{
    if (v->t == J_STR) {
        if (!v->n) return bad(r, err, cap, "stop", "stop: an empty string would stop at once");
        r->stop[r->n_stop++] = v->s;
        return 0;
    }
    if (v->t != J_ARR) return bad(r, err, cap, "stop", "stop must be a string or an array of strings, not %s", j_kind(v));
    if (v->n > RQ_MAX_STOP) return bad(r, err, cap, "stop", "stop: at most %d strings", RQ_MAX_STOP);
    for (const jval *s = v->kid; s; s = s->next) {
        if (s->t != J_STR || !s->n) return bad(r, err, cap, "stop", "stop: every member must be a non-empty string");
        r->stop[r->n_stop++] = s->s;
    }
    return 0;
}

/* A message's content: a string, or an array of {"type": "text", "text": "..."} parts (joined). */
static int content(rq_t *r, const jval *c, const char **out, char *err, size_t cap)
{
    if (c && c->t == J_STR) {
        *out = c->s;
        return 0;
    }
    if (!c || c->t != J_ARR) return bad(r, err, cap, "messages", "a message's content must be a string or an array of text parts");
    if (r->owned) return bad(r, err, cap, "messages", "content as an array of parts: only one message may use it");
    size_t total = 1;
    for (const jval *p = c->kid; p; p = p->next) {
        const jval *type = j_get(p, "type"), *text = j_get(p, "text");
        if (p->t != J_OBJ || p->n != 2 || !type || type->t != J_STR || strcmp(type->s, "text") || !text || text->t != J_STR)
            return bad(r, err, cap, "messages", "a content part must be {\"type\": \"text\", \"text\": STRING}");
        total += text->n;
    }
    r->owned = malloc(total);
    if (!r->owned) return bad(r, err, cap, "messages", "out of memory");
    size_t at = 0;
    for (const jval *p = c->kid; p; p = p->next) {
        const jval *text = j_get(p, "text");
        memcpy(r->owned + at, text->s, text->n);
        at += text->n;
    }
    r->owned[at] = 0;
    *out = r->owned;
    return 0;
}

/* messages: [system], then user and assistant turns in turn, the last a user turn. */
static int messages(rq_t *r, const jval *v, char *err, size_t cap)
{
    if (v->t != J_ARR || !v->n) return bad(r, err, cap, "messages", "messages must be a non-empty array");
    if (v->n > RQ_MAX_MESSAGES) return bad(r, err, cap, "messages", "more than %d messages", RQ_MAX_MESSAGES);
    r->msgs = calloc(v->n, sizeof *r->msgs);
    if (!r->msgs) return bad(r, err, cap, "messages", "out of memory");
    size_t i = 0;
    char name[200];
    for (const jval *m = v->kid; m; m = m->next, i++) {
        const jval *role = m->t == J_OBJ ? j_get(m, "role") : NULL;
        if (!role || role->t != J_STR) return bad(r, err, cap, "messages", "message %zu: an object with a string role", i);
        for (const jval *f = m->kid; f; f = f->next)
            if (strcmp(f->key, "role") && strcmp(f->key, "content") && strcmp(f->key, "name"))
                return bad(r, err, cap, "messages", "message %zu: unknown field %s", i, shown(f->key, name));
        const char *text = NULL;
        if (content(r, j_get(m, "content"), &text, err, cap)) return 400;
        int sys = !strcmp(role->s, "system") || !strcmp(role->s, "developer");
        int user = !strcmp(role->s, "user");
        if (sys && i == 0) {
            r->system = text;
            continue;
        }
        if (!user && strcmp(role->s, "assistant"))
            return bad(r, err, cap, "messages", "message %zu: role must be user or assistant (system only first), not %s", i,
                       shown(role->s, name));
        if (user != (r->n_msgs % 2 == 0))
            return bad(r, err, cap, "messages", "message %zu: user and assistant turns must alternate, starting with user", i);
        r->msgs[r->n_msgs++] = (rq_msg){user, text};
    }
    if (!r->n_msgs || !r->msgs[r->n_msgs - 1].user) return bad(r, err, cap, "messages", "the last message must be a user turn");
    return 0;
}

/* prompt: a string, or an array of token ids. */
static int prompt(rq_t *r, const jval *v, char *err, size_t cap)
{
    if (v->t == J_STR) {
        r->prompt = v->s;
        return 0;
    }
    if (v->t != J_ARR || !v->n) return bad(r, err, cap, "prompt", "prompt must be a string or a non-empty array of token ids");
    r->prompt_ids = malloc(v->n * sizeof *r->prompt_ids);
    if (!r->prompt_ids) return bad(r, err, cap, "prompt", "out of memory");
    for (const jval *t = v->kid; t; t = t->next) {
        if (t->t != J_NUM || !t->is_int || t->i < 0 || t->i > INT32_MAX)
            return bad(r, err, cap, "prompt", "prompt: an array must hold token ids (integers >= 0); one prompt per request");
        r->prompt_ids[r->n_prompt_ids++] = (int32_t)t->i;
    }
    return 0;
}

static int member(rq_t *r, const jval *m, char *err, size_t cap)
{
    const char *k = m->key;
    for (size_t i = 0; i < sizeof NUMS / sizeof *NUMS; i++)
        if (!strcmp(k, NUMS[i].name) && (r->kind == RQ_CHAT || strcmp(k, "max_completion_tokens")))
            return number(r, &NUMS[i], m, err, cap);
    if (!strcmp(k, "model")) {
        if (m->t != J_STR) return bad(r, err, cap, k, "model must be a string, not %s", j_kind(m));
        r->model = m->s;
        return 0;
    }
    if (!strcmp(k, "stream")) {
        if (m->t != J_TRUE && m->t != J_FALSE) return bad(r, err, cap, k, "stream must be true or false, not %s", j_kind(m));
        r->stream = m->t == J_TRUE;
        return 0;
    }
    if (!strcmp(k, "stream_options")) {
        const jval *u = j_get(m, "include_usage");
        if (m->t != J_OBJ || m->n != 1 || !u || (u->t != J_TRUE && u->t != J_FALSE))
            return bad(r, err, cap, k, "stream_options must be {\"include_usage\": true or false}");
        r->include_usage = u->t == J_TRUE;
        return 0;
    }
    if (!strcmp(k, "user")) return m->t == J_STR ? 0 : bad(r, err, cap, k, "user must be a string, not %s", j_kind(m));
    if (!strcmp(k, "stop")) return stops(r, m, err, cap);
    if (!strcmp(k, "n") || !strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty") || !strcmp(k, "logprobs") ||
        (r->kind == RQ_COMPLETION && (!strcmp(k, "echo") || !strcmp(k, "best_of"))))
        return off_only(r, m, err, cap);
    if (r->kind == RQ_CHAT && !strcmp(k, "messages")) return messages(r, m, err, cap);
    if (r->kind == RQ_COMPLETION && !strcmp(k, "prompt")) return prompt(r, m, err, cap);
    char name[200];
    return bad(r, err, cap, NULL, "unknown field %s (docs/runtime.md lists the fields this server reads)", shown(k, name));
}

int rq_parse(rq_t *r, int kind, const char *body, size_t n, const bu_sampler_params *sp, int max_tokens, char *err,
             size_t cap)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->sp = *sp;
    r->max_tokens = max_tokens;
    char jerr[200];
    if (j_parse(&r->doc, body, n, jerr, sizeof jerr)) return bad(r, err, cap, NULL, "malformed JSON: %s", jerr);
    const jval *root = &r->doc.v[0];
    if (root->t != J_OBJ) return bad(r, err, cap, NULL, "the body must be a JSON object, not %s", j_kind(root));
    if (j_get(root, "max_tokens") && j_get(root, "max_completion_tokens") && j_get(root, "max_tokens")->t != J_NULL &&
        j_get(root, "max_completion_tokens")->t != J_NULL)
        return bad(r, err, cap, "max_tokens", "give max_tokens or max_completion_tokens, not both");
    for (const jval *m = root->kid; m; m = m->next)
        if (m->t != J_NULL && member(r, m, err, cap)) return 400;
    const char *need = kind == RQ_CHAT ? "messages" : "prompt";
    const jval *v = j_get(root, need);
    if (!v || v->t == J_NULL) return bad(r, err, cap, need, "%s is required", need);
    return 0;
}

void rq_free(rq_t *r)
{
    free(r->prompt_ids);
    free(r->msgs);
    free(r->owned);
    j_free(&r->doc);
    memset(r, 0, sizeof *r);
}
