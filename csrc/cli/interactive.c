/* bringup-run's chat loop (-i, or no prompt). The conversation stays in the KV cache; each turn
 * evaluates only its new tokens. When a turn does not fit the context, the user is told and the
 * conversation restarts.
 *
 * Lines come from line_edit.c (an editor on a terminal, plain lines otherwise). A line that starts
 * with '/' is a command for this program, never sent to the model ("//x" sends "/x"); a line
 * ending in '\' continues on the next; a line holding a NUL byte is refused with a message (the
 * model would see only the text before it). Ctrl-C while the model answers stops the answer (the
 * conversation keeps what was said); Ctrl-C at the prompt, a second Ctrl-C before the first was
 * handled, or end of input quits. */
#include "modes.h"
#include "line_edit.h"
#include "habits.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t sigint_seen;

static void on_sigint(int sig)
{
    if (sigint_seen) {   /* a second Ctrl-C before the loop took the first: quit now */
        static const char msg[] = "\nbringup-run: interrupted twice: quitting\n";
        ssize_t k = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)k;
        signal(sig, SIG_DFL);
        raise(sig);
    }
    sigint_seen = 1;
}

typedef struct {
    sess_t *s;
    ledit_t ed;
    int first;           /* the next turn opens a conversation (system message, BOS) */
    char *system;        /* --system or /system; NULL: the chat format's default */
    long turns;
    long last_prompt, last_gen;
    double last_prompt_ms, last_gen_ms;
} chat_state;

static void restart(chat_state *c)
{
    c->s->L.rt->reset(c->s->m);
    c->s->L.sampler_reset(c->s->smp);
    c->first = 1;
}

static void help(void)
{
    fprintf(stderr,
            "  /help            this list\n"
            "  /reset           forget the conversation (the KV cache restarts empty)\n"
            "  /stats           context use, turns, last answer's speed\n"
            "  /system [TEXT]   show the system message, or set it (and reset the conversation)\n"
            "  /quit, /exit     leave (so do Ctrl-D on an empty line and Ctrl-C at the prompt)\n"
            "  //text           send \"/text\" to the model; a line ending in '\\' continues on the next\n");
}

static void stats(const chat_state *c)
{
    const sess_t *s = c->s;
    fprintf(stderr, "%s: context %d of %d positions used; %ld turns; ", prog, s->L.rt->n_past(s->m), s->L.rt->n_ctx(s->m),
            c->turns);
    if (!c->turns) {
        fprintf(stderr, "no answer yet\n");
        return;
    }
    fprintf(stderr, "last turn: %ld prompt tokens in %.1f ms, %ld generated in %.1f ms (%.2f tok/s)\n", c->last_prompt,
            c->last_prompt_ms, c->last_gen, c->last_gen_ms, c->last_gen_ms > 0 ? c->last_gen / (c->last_gen_ms / 1e3) : 0.0);
}

/* A slash command. 1: quit, 0: go on. */
static int command(chat_state *c, const char *line)
{
    const char *arg = strchr(line, ' ');
    size_t n = arg ? (size_t)(arg - line) : strlen(line);
    while (arg && *arg == ' ') arg++;
#define IS(name) (n == strlen(name) && !strncmp(line, name, n))
    if (IS("/quit") || IS("/exit")) return 1;
    if (IS("/help")) help();
    else if (IS("/reset")) {
        restart(c);
        fprintf(stderr, "%s: conversation reset\n", prog);
    } else if (IS("/stats")) stats(c);
    else if (IS("/system")) {
        if (arg && *arg) {
            free(c->system);
            c->system = strdup(arg);
            if (!c->system) exit(die(EX_UNAVAILABLE, "out of memory"));
            restart(c);
            fprintf(stderr, "%s: system message set; conversation reset\n", prog);
        } else if (c->system) {
            say("system message: %s", c->system);
        } else {
            say("system message: the chat format's default (%s)",
                    strcmp(c->s->chat.f[CF_HAS_DEFAULT_SYSTEM], "1") ? "none" : c->s->chat.f[CF_DEFAULT_SYSTEM]);
        }
    } else {
        say("unknown command %.*s (/help lists them; '//' sends a line starting with '/')", (int)n, line);
    }
#undef IS
    return 0;
}

/* One user turn: render, evaluate, answer, close the turn in the KV cache. EX_OK or an exit code. */
static int turn(chat_state *c, const char *user)
{
    sess_t *s = c->s;
    const opts_t *o = s->o;
    bu_str src = {0};
    if (c->first)
        chat_first(&s->chat, &src, c->system, user);
    else
        chat_next(&s->chat, &src, user);
    ids_t ids = {0}, gen = {0}, tail = {0};
    bu_str text = {0}, close_ = {0};
    int rc = encode(s, src.p, src.n, (c->first ? BU_TOK_ADD_SPECIAL : 0) | BU_TOK_PARSE_SPECIAL, &ids);
    free(src.p);
    if (rc) goto out;
    int32_t room = s->L.rt->n_ctx(s->m) - s->L.rt->n_past(s->m);
    /* -n -1: answer until the context is full (then the conversation restarts) */
    int max = o->max_tokens < 0 ? (int)(room - (int64_t)ids.n) : o->max_tokens;
    if (o->max_tokens < 0 ? max < 1 : (int64_t)ids.n + max > room) {
        fprintf(stderr, "%s: this turn (%zu tokens + up to %d generated) does not fit the %d positions left; "
                        "the conversation restarts\n", prog, ids.n, o->max_tokens < 0 ? 0 : o->max_tokens, room);
        restart(c);
        goto out;   /* the user may say it again, shorter, or in the fresh context */
    }
    double t0 = now_ms();
    int st = prefill_batched(s, ids.v, (int32_t)ids.n);
    if (st != BU_RT_OK) {
        rc = rt_fail(s, st);
        goto out;
    }
    c->last_prompt_ms = now_ms() - t0;
    c->last_prompt = (long)ids.n;
    s->t.prompt_ms += c->last_prompt_ms;
    s->t.prompt_tokens += (long)ids.n;
    accept_ids(s, ids.v, ids.n);
    int pending;
    double g0 = now_ms();
    if ((rc = generate(s, max, &gen, &text, 1, t0, &pending))) goto out;
    c->last_gen_ms = now_ms() - g0;
    c->last_gen = (long)gen.n;
    c->turns++;
    fputc('\n', stdout);
    fflush(stdout);
    if (s->interrupted) fprintf(stderr, "%s: [answer stopped by Ctrl-C]\n", prog);
    /* close the assistant turn in the context: the generated ids are in the KV cache except a
     * pending last one, which is evaluated with the turn suffix */
    str_adds(&close_, s->chat.f[CF_ASSIST_SUF]);
    if (pending && gen.n) ids_add(&tail, gen.v[gen.n - 1]);
    size_t n_pending = tail.n;
    if ((rc = encode(s, close_.p, close_.n, BU_TOK_PARSE_SPECIAL, &tail))) goto out;
    if (tail.n && (int64_t)s->L.rt->n_past(s->m) + (int64_t)tail.n <= s->L.rt->n_ctx(s->m)) {
        st = prefill_batched(s, tail.v, (int32_t)tail.n);
        if (st != BU_RT_OK) {
            rc = rt_fail(s, st);
            goto out;
        }
        accept_ids(s, tail.v + n_pending, tail.n - n_pending);   /* the pending id was accepted when sampled */
        c->first = 0;
    } else {
        fprintf(stderr, "%s: the context is full; the conversation restarts\n", prog);
        restart(c);
    }
out:
    free(ids.v); free(gen.v); free(tail.v); free(text.p); free(close_.p);
    return rc;
}

/* One user turn's text: lines joined while they end in '\'. LE_* of the last read. */
static int read_turn(chat_state *c, bu_str *line)
{
    int r = le_read(&c->ed, "> ", line);
    while (r == LE_LINE && line->n && line->p[line->n - 1] == '\\') {
        line->p[--line->n] = '\n';
        line->n++;
        r = le_read(&c->ed, "... ", line);
        if (r == LE_EOF) r = LE_LINE;   /* end of input ends the continued turn, then the loop */
    }
    return r;
}

int interactive(sess_t *s)
{
    const opts_t *o = s->o;
    chat_state c;
    memset(&c, 0, sizeof c);
    c.s = s;
    c.first = 1;
    if (o->system && !(c.system = strdup(o->system))) return die(EX_UNAVAILABLE, "out of memory");
    le_init(&c.ed, &sigint_seen);
    c.ed.max = s->prompt_cap;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;   /* no SA_RESTART: a read at the prompt returns, and the loop quits */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    s->interrupt = &sigint_seen;
    fprintf(stderr, "%s: interactive chat (/help lists commands; Ctrl-C stops an answer; Ctrl-C at the prompt or Ctrl-D quits)\n",
            prog);
    const char *opening = o->prompt;   /* -i with -p / -f: the first turn */
    int rc = EX_OK;
    for (;;) {
        fflush(stdout);   /* the answer before the next prompt, also when stdout is a pipe */
        bu_str line = {0};
        sigint_seen = 0;
        if (opening) {
            str_adds(&line, opening);
            opening = NULL;
        } else {
            int r = read_turn(&c, &line);
            if (r == LE_TOOLONG || (r == LE_LINE && s->prompt_cap && line.n > s->prompt_cap)) {
                /* refused, not cut: the line never grew past the cap, and the chat goes on */
                say("this line is longer than %zu bytes, more than the %d-token context can hold (%lld bytes per "
                    "token at most); not sent to the model", s->prompt_cap, s->L.rt->n_ctx(s->m),
                    (long long)s->longest_token);
                free(line.p);
                continue;
            }
            if (r != LE_LINE) {
                free(line.p);
                break;
            }
        }
        const char *nul = line.n ? memchr(line.p, 0, line.n) : NULL;
        if (nul) {
            fprintf(stderr, "%s: this line holds a NUL byte (byte %zu); not sent to the model\n", prog,
                    (size_t)(nul - line.p));
        } else if (line.n && line.p[0] == '/' && line.p[1] != '/') {
            int quit = command(&c, line.p);
            free(line.p);
            if (quit) break;
            continue;
        } else if (line.n) {
            rc = turn(&c, line.p[0] == '/' ? line.p + 1 : line.p);
        }
        free(line.p);
        if (rc || (o->single_turn && c.turns)) break;   /* -st: one answer, then exit */
    }
    signal(SIGINT, SIG_DFL);
    s->interrupt = NULL;
    le_free(&c.ed);
    free(c.system);
    return rc;
}
