/* bu_server.h - bringup-run --server (docs/runtime.md "The server"), shared by its files:
 *
 *   bu_server.c     the listening socket, one thread per connection (at most --queue + 4), reading a
 *                   request within the limits, the queue in front of the model, SIGTERM/SIGINT
 *   bu_endpoints.c  /health, /v1/models, /v1/completions, /v1/chat/completions (JSON and SSE)
 *   bu_http.c       the request head (pure; fuzzed)      bu_request.c  the request body's fields (pure; fuzzed)
 *   bu_json.c       the strict JSON reader (pure; fuzzed)
 */
#ifndef BU_SERVER_H
#define BU_SERVER_H

#include "util.h"

#include "args.h"
#include "bu_http.h"
#include "chat.h"
#include "generate.h"
#include "habits.h"
#include "modes.h"

typedef struct {
    int fd;
    char peer[64];            /* "127.0.0.1:53422", for the log */
    int sent_head;            /* a status line went out (a later error cannot change it) */
    int gone;                 /* the client closed or stopped reading (a send failed or timed out) */
} conn_t;

/* Set by SIGTERM / SIGINT: stop accepting, abort the current generation, answer 503 to the waiting. */
extern volatile sig_atomic_t srv_stop;

/* Send all n bytes within the --timeout (MSG_NOSIGNAL). 0, or -1 (c->gone set) when the client is gone. */
int conn_send(conn_t *c, const char *p, size_t n);
/* 0 when the peer has closed its side or reset the connection (checked without blocking). */
int conn_alive(conn_t *c);
/* A complete response with a body of type ctype (Content-Length, Connection: close). */
void send_response(conn_t *c, int code, const char *ctype, const char *body, size_t n);
/* An OpenAI error object {"error": {"message", "type", "param", "code"}} (the message escaped). */
void send_error(conn_t *c, int code, const char *param, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Wait for the model (requests are served one at a time, in order of arrival). 0 when it is this
 * request's turn; 503 (answered here) when --queue requests already wait or the server stops. */
int model_acquire(conn_t *c);
void model_release(void);
/* One line on stderr (escaped, one writer at a time). */
void srv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The model's name in /v1/models and every response (--alias, else from the model folder). */
const char *model_id(void);

/* bu_endpoints.c: answer one request whose head is read (body: n bytes, NULL for GET). */
void endpoint(sess_t *s, conn_t *c, const http_req *h, const char *body, size_t n);

#endif /* BU_SERVER_H */
