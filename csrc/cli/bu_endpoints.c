/* The endpoints of bringup-run --server (docs/runtime.md "The server"): GET /health, GET /v1/models,
 * POST /v1/completions and POST /v1/chat/completions (OpenAI's shapes; "stream": true as server-sent
 * events). A generation is the one-shot run's: the prompt (a chat request rendered with the model's
 * chat format, chat.c; special-token texts parsed as the CLI does), the KV cache reset, prefill,
 * generate() with the request's sampler; the text ends before the first stop string (the chat
 * format's, the server's -r, the request's), which a stream holds back until it is sure. */
#define _GNU_SOURCE   /* memmem */
#include "bu_server.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    sess_t *s;
    conn_t *c;
    const rq_t *r;
    const char *stop[CF_MAX_STOP + MAX_REVERSE + RQ_MAX_STOP];
    int n_stop;
    size_t sent;          /* bytes of the text already streamed */
    size_t end;           /* where the text ends: the first stop string, else its length */
    int stopped, aborted; /* a stop string was seen; the server is stopping */
    char id[48];
    long created;
} gen_t;

static unsigned long counter;   /* response ids; changed under the model's lock only */

/* Where the first stop string starts in text, or text->n. */
static size_t first_stop(const gen_t *g, const bu_str *t)
{
    size_t best = t->n;
    for (int i = 0; i < g->n_stop; i++) {
        const char *at = t->n ? memmem(t->p, t->n, g->stop[i], strlen(g->stop[i])) : NULL;
        if (at && (size_t)(at - t->p) < best) best = (size_t)(at - t->p);
    }
    return best;
}

/* Bytes at the end of text that could begin a stop string or are an incomplete UTF-8 character:
 * a stream sends them only once the next piece decides. */
static size_t holdback(const gen_t *g, const bu_str *t)
{
    size_t hold = 0;
    for (int i = 0; i < g->n_stop; i++) {
        size_t k = strlen(g->stop[i]);
        for (size_t l = k - 1 < t->n ? k - 1 : t->n; l > hold; l--)
            if (!memcmp(t->p + t->n - l, g->stop[i], l)) {
                hold = l;
                break;
            }
    }
    size_t back = 0;   /* a lead byte within the last 3 whose sequence is not complete */
    for (size_t k = 1; k <= 3 && k <= t->n; k++) {
        unsigned char b = (unsigned char)t->p[t->n - k];
        if ((b & 0xC0) == 0x80) continue;
        size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
        if (need > k) back = k;
        break;
    }
    return hold > back ? hold : back;
}

/* One event of the stream: "data: " + a chunk object + a blank line. text: the delta (NULL: none);
 * finish: the finish_reason (NULL: null); usage: prompt and completion tokens (NULL: none). */
static int send_chunk(gen_t *g, const char *text, size_t n, const char *finish, const long *usage, int role)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return -1;
    int chat = g->r->kind == RQ_CHAT, rep = 0;
    fprintf(f, "data: {\"id\": \"%s\", \"object\": \"%s\", \"created\": %ld, \"model\": ", g->id,
            chat ? "chat.completion.chunk" : "text_completion", g->created);
    json_str(f, model_id(), strlen(model_id()), &rep);
    if (usage) {
        fprintf(f, ", \"choices\": [], \"usage\": {\"prompt_tokens\": %ld, \"completion_tokens\": %ld, \"total_tokens\": %ld}",
                usage[0], usage[1], usage[0] + usage[1]);
    } else {
        fputs(", \"choices\": [{\"index\": 0, ", f);
        fputs(chat ? "\"delta\": {" : "\"text\": ", f);
        if (chat && role) fputs("\"role\": \"assistant\"", f);
        if (chat && role && text) fputs(", ", f);
        if (chat && text) fputs("\"content\": ", f);
        if (text || !chat) json_str(f, text ? text : "", text ? n : 0, &rep);
        fprintf(f, "%s, \"logprobs\": null, \"finish_reason\": ", chat ? "}" : "");
        if (finish) fprintf(f, "\"%s\"}]", finish);
        else fputs("null}]", f);
    }
    fputs("}\n\n", f);
    fclose(f);
    int rc = conn_send(g->c, buf, len);
    free(buf);
    return rc;
}

/* generate()'s hook: find the stop strings, stream what is certain, notice a client gone or a shutdown. */
static int on_piece(void *ctx, const bu_str *t, size_t before)
{
    gen_t *g = ctx;
    (void)before;
    if (srv_stop) return g->aborted = 1;
    g->end = first_stop(g, t);
    g->stopped = g->end < t->n;
    if (!g->r->stream) return g->stopped || !conn_alive(g->c);
    size_t upto = g->stopped ? g->end : t->n - holdback(g, t);
    if (upto > g->sent && send_chunk(g, t->p + g->sent, upto - g->sent, NULL, NULL, 0)) return 1;
    if (upto > g->sent) g->sent = upto;
    return g->stopped || !conn_alive(g->c);
}

/* The prompt's text: the chat request rendered with the model's chat format, or the completion's prompt. */
static int render(sess_t *s, conn_t *c, const rq_t *r, bu_str *src)
{
    if (r->kind == RQ_COMPLETION) {
        str_adds(src, r->prompt);
        return 0;
    }
    if (!s->have_chat) {
        send_error(c, 400, "messages", "this model carries no chat format (tensor chat.format): use /v1/completions");
        return 400;
    }
    for (size_t i = 0; i < r->n_msgs; i++) {
        const char *m = r->msgs[i].content;
        if (i == 0) chat_first(&s->chat, src, r->system, m);
        else if (r->msgs[i].user) chat_next(&s->chat, src, m);
        else chat_answer(&s->chat, src, m);
    }
    return 0;
}

/* The prompt's token ids, checked to fit the context with max_tokens; *max the generation's cap. */
static int prompt_of(sess_t *s, conn_t *c, const rq_t *r, ids_t *ids, int *max)
{
    int32_t nv = s->L.rt->n_vocab(s->m), n_ctx = s->L.rt->n_ctx(s->m);
    if (r->prompt_ids) {
        for (size_t i = 0; i < r->n_prompt_ids; i++) {
            if (r->prompt_ids[i] >= nv) return send_error(c, 400, "prompt", "token id %d is not in [0, %d)", r->prompt_ids[i], nv), 400;
            ids_add(ids, r->prompt_ids[i]);
        }
    } else {
        if (!s->tok) return send_error(c, 400, "prompt", "the weights have no tokenizer: give the prompt as token ids"), 400;
        bu_str src = {0};
        int rc = render(s, c, r, &src);
        if (!rc && s->prompt_cap && src.n > s->prompt_cap)
            rc = 400, send_error(c, 400, r->kind == RQ_CHAT ? "messages" : "prompt", "the prompt is %zu bytes; at most %zu can "
                                 "fit the %d-token context: refused before tokenizing", src.n, s->prompt_cap, n_ctx);
        if (!rc && encode(s, src.p, src.n, BU_TOK_ADD_SPECIAL | BU_TOK_PARSE_SPECIAL, ids))
            rc = 400, send_error(c, 400, "prompt", "the prompt cannot be tokenized (the server's log says why)");
        free(src.p);
        if (rc) return rc;
        if (!ids->n) return send_error(c, 400, "prompt", "the prompt encodes to no tokens"), 400;
    }
    int room = n_ctx - (int)ids->n;
    if (room < 0) return send_error(c, 400, "prompt", "the prompt has %zu tokens, the context holds %d", ids->n, n_ctx), 400;
    *max = r->max_tokens < 0 ? room + 1 : r->max_tokens;   /* the last generated id needs no KV row */
    if (*max > room + 1)
        return send_error(c, 400, "max_tokens", "max_tokens %d does not fit: %d of %d context positions are left after the "
                          "prompt's %zu tokens", r->max_tokens, room, n_ctx, ids->n), 400;
    return 0;
}

static void send_final(gen_t *g, const bu_str *text, const char *finish, long np, long ng)
{
    const rq_t *r = g->r;
    if (r->stream) {
        long usage[2] = {np, ng};
        if (g->end > g->sent) send_chunk(g, text->p + g->sent, g->end - g->sent, NULL, NULL, 0);
        send_chunk(g, NULL, 0, finish, NULL, 0);
        if (r->include_usage) send_chunk(g, NULL, 0, NULL, usage, 0);
        conn_send(g->c, "data: [DONE]\n\n", 14);
        return;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        send_error(g->c, 500, NULL, "out of memory");
        return;
    }
    int chat = r->kind == RQ_CHAT, rep = 0;
    fprintf(f, "{\"id\": \"%s\", \"object\": \"%s\", \"created\": %ld, \"model\": ", g->id, chat ? "chat.completion" : "text_completion",
            g->created);
    json_str(f, model_id(), strlen(model_id()), &rep);
    fputs(chat ? ", \"choices\": [{\"index\": 0, \"message\": {\"role\": \"assistant\", \"content\": " : ", \"choices\": [{\"index\": 0, \"text\": ", f);
    json_str(f, text->p ? text->p : "", g->end, &rep);
    fprintf(f, "%s, \"logprobs\": null, \"finish_reason\": \"%s\"}], \"usage\": {\"prompt_tokens\": %ld, \"completion_tokens\": %ld, "
            "\"total_tokens\": %ld}}\n", chat ? "}" : "", finish, np, ng, np + ng);
    fclose(f);
    send_response(g->c, 200, "application/json", buf, len);
    free(buf);
}

/* Prefill and generate for a request that holds the model. */
static void run(sess_t *s, conn_t *c, const rq_t *r)
{
    ids_t ids = {0}, gen = {0};
    bu_str text = {0};
    int max;
    char err[256];
    double t0 = now_ms();
    if (prompt_of(s, c, r, &ids, &max)) goto out;
    bu_sampler *smp = s->L.sampler_new(&r->sp, (size_t)s->L.rt->n_vocab(s->m), err, sizeof err);
    if (!smp) {
        send_error(c, 400, NULL, "%s", err);
        goto out;
    }
    s->L.sampler_free(s->smp);
    s->smp = smp;
    gen_t g = {.s = s, .c = c, .r = r, .created = (long)time(NULL)};
    snprintf(g.id, sizeof g.id, "%s-%lu", r->kind == RQ_CHAT ? "chatcmpl" : "cmpl", ++counter);
    for (int i = 0; s->have_chat && s->o->stop && i < s->chat.n_stop; i++)
        if (s->chat.stop[i][0]) g.stop[g.n_stop++] = s->chat.stop[i];
    for (int i = 0; i < s->o->n_reverse; i++) g.stop[g.n_stop++] = s->o->reverse[i];
    for (int i = 0; i < r->n_stop; i++) g.stop[g.n_stop++] = r->stop[i];
    if (r->stream) {
        static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                                   "Connection: close\r\n\r\n";
        c->sent_head = 1;
        if (conn_send(c, head, sizeof head - 1) || (r->kind == RQ_CHAT && send_chunk(&g, "", 0, NULL, NULL, 1))) goto out;
    }
    int st = s->L.rt->reset(s->m);
    if (st == BU_RT_OK) st = prefill_batched(s, ids.v, (int32_t)ids.n);
    if (st != BU_RT_OK) {
        send_error(c, 500, NULL, "the runtime failed: %s", s->L.rt->last_error(s->m));
        goto out;
    }
    accept_ids(s, ids.v, ids.n);
    s->on_piece = on_piece;
    s->piece_ctx = &g;
    int pending, rc = generate(s, max, &gen, &text, 0, t0, &pending);
    s->on_piece = NULL;
    g.end = first_stop(&g, &text);
    if (rc) send_error(c, 500, NULL, "generation failed (the server's log says why)");
    else if (g.aborted && r->stream) send_error(c, 503, NULL, "the server is shutting down: the answer was cut");
    else if (g.aborted) send_error(c, 503, NULL, "the server is shutting down");
    else if (!c->gone) send_final(&g, &text, g.end < text.n || (int)gen.n < max ? "stop" : "length", (long)ids.n, (long)gen.n);
    srv_log("%s: %s %d prompt + %zu generated tokens in %.0f ms%s", c->peer, r->kind == RQ_CHAT ? "chat" : "completion",
            (int)ids.n, gen.n, now_ms() - t0, c->gone ? " (the client left: stopped)" : "");
out:
    free(ids.v);
    free(gen.v);
    free(text.p);
}

static void completion(sess_t *s, conn_t *c, int kind, const char *body, size_t n)
{
    rq_t r;
    char err[300];
    if (rq_parse(&r, kind, body, n, &s->o->sp, s->o->max_tokens, err, sizeof err)) {
        send_error(c, 400, r.param, "%s", err);
    } else if (r.model && strcmp(r.model, model_id())) {
        send_error(c, 404, "model", "model %s is not served here; this server serves %s", r.model, model_id());
    } else if (!model_acquire(c)) {
        if (conn_alive(c)) run(s, c, &r);
        model_release();
    }
    rq_free(&r);
}

static void models(conn_t *c)
{
    char *buf = NULL;
    size_t len = 0;
    int rep = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        send_error(c, 500, NULL, "out of memory");
        return;
    }
    fputs("{\"object\": \"list\", \"data\": [{\"id\": ", f);
    json_str(f, model_id(), strlen(model_id()), &rep);
    fputs(", \"object\": \"model\", \"created\": 0, \"owned_by\": \"bringup\"}]}\n", f);
    fclose(f);
    send_response(c, 200, "application/json", buf, len);
    free(buf);
}

void endpoint(sess_t *s, conn_t *c, const http_req *h, const char *body, size_t n)
{
    int get = !strcmp(h->method, "GET");
    int post = !strcmp(h->method, "POST");
    static const char health[] = "{\"status\": \"ok\"}\n";
    if (!strcmp(h->path, "/health") || !strcmp(h->path, "/v1/health")) {
        if (get) send_response(c, 200, "application/json", health, sizeof health - 1);
        else send_error(c, 405, NULL, "%s takes GET", h->path);
        return;
    }
    if (!strcmp(h->path, "/v1/models") || !strcmp(h->path, "/models")) {
        if (get) models(c);
        else send_error(c, 405, NULL, "%s takes GET", h->path);
        return;
    }
    int chat = !strcmp(h->path, "/v1/chat/completions") || !strcmp(h->path, "/chat/completions");
    int comp = !strcmp(h->path, "/v1/completions") || !strcmp(h->path, "/completions");
    if (!chat && !comp)
        send_error(c, 404, NULL, "no endpoint %.200s (see /v1/models, /v1/completions, /v1/chat/completions, /health)", h->path);
    else if (!post || !body)
        send_error(c, 405, NULL, "%s takes POST", h->path);
    else
        completion(s, c, chat ? RQ_CHAT : RQ_COMPLETION, body, n);
}
