/* libFuzzer target: what bringup-run --server reads from a client (csrc/cli/bu_http.c, bu_request.c,
 * bu_json.c) on arbitrary bytes.
 *
 * The input is read as a request head (http_parse_head), as a JSON document (j_parse) and as the
 * body of a chat and of a completion request (rq_parse). A refusal must be an HTTP status with a
 * one-line message; a success must keep the promises the server relies on: the document's values
 * all reachable from the root, nested at most J_MAX_DEPTH, strings as long as said, valid UTF-8,
 * no NUL, object keys unique; a request's sampler values inside the CLI's domains, its messages
 * user / assistant in turn ending with a user turn, its stop strings non-empty.
 *
 * Built by tests/fuzz/run.py with clang -fsanitize=fuzzer,address,undefined; not part of any
 * binary of the pipeline (bringup.build.sources.FUZZ).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bu_http.h"

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_server_request: broken promise: %s\n", what);
        abort();
    }
}

static void one_line(const char *err)
{
    check(err[0] != 0 && strchr(err, '\n') == NULL, "a refusal gives a one-line message");
}

static int valid_utf8(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!k || i + k > n) return 0;
        for (size_t j = 1; j < k; j++)
            if ((p[i + j] & 0xC0) != 0x80) return 0;
        if ((c == 0xE0 && p[i + 1] < 0xA0) || (c == 0xED && p[i + 1] > 0x9F) || (c == 0xF0 && p[i + 1] < 0x90) ||
            (c == 0xF4 && p[i + 1] > 0x8F))
            return 0;
        i += k;
    }
    return 1;
}

/* The values under v (v included), checking each. */
static size_t walk(const jval *v, int depth)
{
    check(depth <= J_MAX_DEPTH, "nesting within J_MAX_DEPTH");
    if (v->t == J_STR) {
        check(v->s && strlen(v->s) == v->n, "a string's length is its byte count (no NUL inside)");
        check(valid_utf8((const unsigned char *)v->s, v->n), "strings are valid UTF-8");
    }
    if (v->t == J_NUM) check(isfinite(v->num), "numbers are finite");
    size_t count = 1, members = 0;
    for (const jval *m = v->kid; m; m = m->next, members++) {
        if (v->t == J_OBJ) {
            check(m->key && valid_utf8((const unsigned char *)m->key, strlen(m->key)), "keys are valid UTF-8");
            for (const jval *o = v->kid; o != m; o = o->next) check(strcmp(o->key, m->key) != 0, "keys are unique");
        }
        count += walk(m, depth + 1);
    }
    if (v->t == J_ARR || v->t == J_OBJ) check(members == v->n, "a container's count is its members'");
    return count;
}

static void request(int kind, const char *p, size_t n)
{
    const bu_sampler_params sp = {0.0f, 0, 1.0f, 0.0f, 1.0f, 64, 0};
    rq_t r;
    char err[300];
    err[0] = 0;
    int rc = rq_parse(&r, kind, p, n, &sp, 128, err, sizeof err);
    if (rc) {
        check(rc == 400, "a refused body is a 400");
        one_line(err);
    } else {
        check(isfinite(r.sp.temperature) && r.sp.temperature >= 0, "temperature in its domain");
        check(r.sp.top_p > 0 && r.sp.top_p <= 1 && r.sp.min_p >= 0 && r.sp.min_p <= 1, "top_p, min_p in their domains");
        check(isfinite(r.sp.repeat_penalty) && r.sp.repeat_penalty > 0 && r.sp.top_k >= 0, "penalty, top_k in their domains");
        check(r.max_tokens >= 0 && r.n_stop <= RQ_MAX_STOP, "max_tokens >= 0, at most RQ_MAX_STOP stops");
        for (int i = 0; i < r.n_stop; i++) check(r.stop[i][0] != 0, "stop strings are not empty");
        if (kind == RQ_CHAT) {
            check(r.n_msgs >= 1 && r.msgs[r.n_msgs - 1].user, "a chat ends with a user turn");
            for (size_t i = 0; i < r.n_msgs; i++) check(r.msgs[i].user == (i % 2 == 0) && r.msgs[i].content, "turns alternate");
        } else {
            check((r.prompt != NULL) != (r.prompt_ids != NULL), "a completion has a text or ids");
        }
    }
    rq_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    const char *p = (const char *)data;
    http_req h;
    char err[300];
    err[0] = 0;
    int code = http_parse_head(p, n, &h, err, sizeof err);
    if (code) {
        check(code >= 400 && code < 600, "a refused head is a 4xx/5xx");
        one_line(err);
    } else {
        check(h.path[0] == '/' && strlen(h.method) > 0 && (h.minor == 0 || h.minor == 1), "a head has a method, path, version");
    }
    jdoc d;
    err[0] = 0;
    if (j_parse(&d, p, n, err, sizeof err) == 0) check(walk(&d.v[0], 1) == d.n, "every value is reachable from the root");
    else one_line(err);
    j_free(&d);
    request(RQ_CHAT, p, n);
    request(RQ_COMPLETION, p, n);
    return 0;
}
