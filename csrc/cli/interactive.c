/* bringup-run without a prompt: a chat on stdin. The conversation stays in the KV cache; each turn
 * evaluates only its new tokens. When a turn does not fit the context, the user is told and the
 * conversation restarts. */
#include "bringup_run.h"

#include <stdlib.h>
#include <string.h>

/* One line of f without its '\n' (any length), or NULL at the end of input. */
static char *read_line(FILE *f)
{
    bu_str s = {0};
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

int interactive(sess_t *s)
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
        bu_str src = {0};
        if (first)
            chat_first(&s->chat, &src, o->system, line);
        else
            chat_next(&s->chat, &src, line);
        free(line);
        ids_t turn = {0}, gen = {0};
        bu_str text = {0};
        int rc = encode(s, src.p, src.n, (first ? BU_TOK_ADD_SPECIAL : 0) | BU_TOK_PARSE_SPECIAL, &turn);
        free(src.p);
        if (rc) return rc;
        int32_t room = s->L.rt->n_ctx(s->m) - s->L.rt->n_past(s->m);
        if ((int64_t)turn.n + o->max_tokens > room) {
            fprintf(stderr, "%s: this turn (%zu tokens + up to %d generated) does not fit the %d positions left; "
                            "the conversation restarts\n", prog, turn.n, o->max_tokens, room);
            s->L.rt->reset(s->m);
            free(turn.v);
            first = 1;
            continue;
        }
        double t0 = now_ms();
        int st = s->L.rt->prefill(s->m, turn.v, (int32_t)turn.n);
        if (st != BU_RT_OK) return rt_fail(s, st);
        int pending;
        if ((rc = generate(s, &gen, &text, 1, t0, &pending))) return rc;
        fputc('\n', stdout);
        /* close the assistant turn in the context: the generated ids are in the KV cache except
         * a pending last one, which is evaluated with the turn suffix */
        bu_str close_ = {0};
        str_adds(&close_, s->chat.f[CF_ASSIST_SUF]);
        ids_t tail = {0};
        if (pending && gen.n) ids_add(&tail, gen.v[gen.n - 1]);
        if ((rc = encode(s, close_.p, close_.n, BU_TOK_PARSE_SPECIAL, &tail))) return rc;
        free(close_.p);
        if (tail.n && (int64_t)s->L.rt->n_past(s->m) + (int64_t)tail.n <= s->L.rt->n_ctx(s->m)) {
            st = s->L.rt->prefill(s->m, tail.v, (int32_t)tail.n);
            if (st != BU_RT_OK) return rt_fail(s, st);
            first = 0;
        } else {
            s->L.rt->reset(s->m);   /* no room to close the turn: the conversation restarts */
            first = 1;
        }
        free(turn.v); free(gen.v); free(text.p); free(tail.v);
    }
}
