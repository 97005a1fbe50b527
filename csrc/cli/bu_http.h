/* bu_http.h - what bringup-run --server reads from a client: the HTTP/1.1 request head (bu_http.c)
 * and the request body's fields (bu_request.c). Both are pure functions on untrusted bytes (no
 * socket, no model, malloc only), so the libFuzzer target csrc/fuzz/fuzz_server_request.c links
 * them alone. Limits are checked before anything is allocated for the request. */
#ifndef BU_HTTP_H
#define BU_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "bu_json.h"
#include "bu_sampler.h"

#define HTTP_MAX_HEAD 16384     /* bytes of the request line and headers together (431 past it) */
#define HTTP_MAX_HEADERS 64     /* header lines (431 past it) */
#define HTTP_MAX_TARGET 1024    /* bytes of the request target (414 past it) */

typedef struct {
    char method[8];             /* "GET", "POST", ... (at most 7 letters) */
    char path[HTTP_MAX_TARGET]; /* the target up to '?' (the query is not used) */
    int minor;                  /* HTTP/1.minor: 0 or 1 */
    int has_length;             /* a Content-Length header was given */
    uint64_t content_length;
    int expect_continue;        /* Expect: 100-continue */
} http_req;

/* Parse the head: n bytes that end with the first "\r\n\r\n" (CRLF line ends only, no obsolete line
 * folding, no Transfer-Encoding: bodies have a Content-Length). 0, or the HTTP status to answer
 * (400, 414, 417, 431, 501, 505) with one line in err. */
int http_parse_head(const char *head, size_t n, http_req *r, char *err, size_t cap);
/* The status line's reason phrase for code ("Bad Request"). */
const char *http_reason(int code);

/* ---------------- bu_request.c: the body of a completion request ---------------- */

enum { RQ_CHAT, RQ_COMPLETION };
#define RQ_MAX_STOP 16          /* stop strings in one request */
#define RQ_MAX_MESSAGES 4096

typedef struct {
    int user;                   /* 1: a user turn, 0: an assistant turn (a system message is rq_t.system) */
    const char *content;        /* NUL-terminated (in the parsed document or rq_t.owned) */
} rq_msg;

typedef struct {
    int kind;                   /* RQ_CHAT or RQ_COMPLETION */
    int stream, include_usage;  /* "stream": server-sent events; stream_options.include_usage */
    bu_sampler_params sp;       /* the server's options, each overridden by the request's field */
    int max_tokens;             /* -1: until the context is full */
    const char *stop[RQ_MAX_STOP];
    int n_stop;
    const char *model;          /* NULL: not given */
    const char *prompt;         /* RQ_COMPLETION: text, or NULL when ids are given */
    int32_t *prompt_ids;        /* RQ_COMPLETION: token ids (range-checked against the vocabulary later) */
    size_t n_prompt_ids;
    const char *system;         /* RQ_CHAT: the system message, or NULL */
    rq_msg *msgs;               /* RQ_CHAT: user, assistant, user, ..., user */
    size_t n_msgs;
    char *owned;                /* joined content parts */
    const char *param;          /* the field an error is about, or NULL */
    jdoc doc;
} rq_t;

/* Read a JSON body into r: every field type- and range-checked (sp and max_tokens give the
 * defaults). 0, or 400 with one line in err and r->param naming the field. rq_free(r) either way. */
int rq_parse(rq_t *r, int kind, const char *body, size_t n, const bu_sampler_params *sp, int max_tokens,
             char *err, size_t cap);
void rq_free(rq_t *r);

#endif /* BU_HTTP_H */
