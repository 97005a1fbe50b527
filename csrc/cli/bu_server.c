/* bringup-run --server: an OpenAI-compatible HTTP/1.1 endpoint for the loaded model (docs/runtime.md
 * "The server"). The main thread accepts; each connection gets a thread (at most --queue + 4 at once:
 * past that the acceptor answers 503 itself) that reads one request within the limits (head 16 KiB,
 * body --max-body, everything within --timeout), answers it and closes (Connection: close). The model
 * serves one generation at a time, in order of arrival; at most --queue requests wait for it, more
 * get 503 at once. SIGTERM / SIGINT: stop accepting, abort the generation at its next token (its
 * client gets an error event or a 503), answer 503 to the waiting, join every connection, exit 0. */
#define _GNU_SOURCE   /* POLLRDHUP, accept4 */
#include "bu_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

volatile sig_atomic_t srv_stop;
static int wake_pipe[2] = {-1, -1};
static const opts_t *O;
static sess_t *S;
static char ID[256];

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER, log_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned long next_ticket, serving;   /* the model's queue: tickets in order of arrival */
static int waiting, conns;

const char *model_id(void) { return ID; }

void srv_log(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&log_mu);
    say("%s", line);
    pthread_mutex_unlock(&log_mu);
}

/* Wait until fd is ready for ev or the deadline passes, in slices that notice srv_stop (when
 * watch_stop). 1 ready, 0 timed out or stopping, -1 error. */
static int wait_fd(int fd, short ev, double deadline, int watch_stop)
{
    for (;;) {
        if (watch_stop && srv_stop) return 0;
        double left = deadline - now_ms();
        if (left <= 0) return 0;
        struct pollfd p = {fd, ev, 0};
        int r = poll(&p, 1, left > 200 ? 200 : (int)left + 1);
        if (r < 0 && errno != EINTR) return -1;
        if (r > 0) return 1;
    }
}

int conn_send(conn_t *c, const char *p, size_t n)
{
    double deadline = now_ms() + O->srv.timeout_s * 1e3;
    while (n && !c->gone) {
        ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            p += k, n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) c->gone = 1;
        else if (k < 0 && wait_fd(c->fd, POLLOUT, deadline, 0) != 1) c->gone = 1;   /* not reading for --timeout */
    }
    return c->gone ? -1 : 0;
}

int conn_alive(conn_t *c)
{
    struct pollfd p = {c->fd, POLLRDHUP, 0};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) c->gone = 1;
    return !c->gone;
}

void send_response(conn_t *c, int code, const char *ctype, const char *body, size_t n)
{
    char head[256];
    int k = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                     code, http_reason(code), ctype, n);
    c->sent_head = 1;
    if (!conn_send(c, head, (size_t)k)) conn_send(c, body, n);
}

void send_error(conn_t *c, int code, const char *param, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return;
    int replaced = 0;
    const char *type = code == 503 ? "unavailable_error" : code == 404 ? "not_found_error" : code >= 500 ? "server_error"
                     : "invalid_request_error";
    fputs("{\"error\": {\"message\": ", f);
    json_str(f, msg, strlen(msg), &replaced);
    fprintf(f, ", \"type\": \"%s\", \"param\": ", type);
    if (param) json_str(f, param, strlen(param), &replaced);
    else fputs("null", f);
    fprintf(f, ", \"code\": %d}}\n", code);
    fclose(f);
    if (c->sent_head) {   /* inside an event stream: an event of its own (no [DONE] follows) */
        if (!conn_send(c, "data: ", 6) && !conn_send(c, buf, n)) conn_send(c, "\n", 1);
    } else {
        send_response(c, code, "application/json", buf, n);
    }
    free(buf);
    srv_log("%s: %d %s", c->peer, code, msg);
}

int model_acquire(conn_t *c)
{
    pthread_mutex_lock(&mu);
    if (srv_stop || (next_ticket != serving && waiting >= O->srv.queue)) {   /* busy and the queue full */
        int stopping = srv_stop;
        pthread_mutex_unlock(&mu);
        if (stopping) send_error(c, 503, NULL, "the server is shutting down");
        else send_error(c, 503, NULL, "busy: one request is generating and %d wait (--queue %d); try again later", O->srv.queue,
                        O->srv.queue);
        return 503;
    }
    unsigned long me = next_ticket++;
    waiting++;
    while (serving != me && !srv_stop) pthread_cond_wait(&cv, &mu);
    waiting--;
    int stop = srv_stop;
    pthread_mutex_unlock(&mu);
    if (stop) {
        send_error(c, 503, NULL, "the server is shutting down");
        return 503;
    }
    return 0;
}

void model_release(void)
{
    pthread_mutex_lock(&mu);
    serving++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

/* Read the head (up to its empty line) into buf[HTTP_MAX_HEAD + 1]: its length, with *got the bytes
 * read (the head and the start of the body); 0 when the client left (*code 0, or 400 inside the head),
 * the time ran out (*code 408; 503 when stopping) or the head is too large (*code 431). */
static size_t read_head(conn_t *c, char *buf, size_t *got, double deadline, int *code)
{
    size_t n = 0;
    *code = 0;
    while (n < HTTP_MAX_HEAD + 1) {
        if (wait_fd(c->fd, POLLIN, deadline, 1) != 1) {
            *code = srv_stop ? 503 : n ? 408 : 0;
            return 0;
        }
        ssize_t k = recv(c->fd, buf + n, HTTP_MAX_HEAD + 1 - n, 0);
        if (k <= 0) {
            *code = n ? 400 : 0;   /* the client stopped sending inside the head */
            return 0;
        }
        size_t from = n >= 3 ? n - 3 : 0;
        n += (size_t)k;
        char *end = memmem(buf + from, n - from, "\r\n\r\n", 4);
        if (end) {
            *got = n;
            return (size_t)(end - buf) + 4;
        }
    }
    *code = 431;
    return 0;
}

/* Read the rest of a body of h->content_length bytes; the caller checked the size. NULL when the
 * client left or the time ran out. */
static char *read_body(conn_t *c, const http_req *h, const char *have, size_t n_have, double deadline)
{
    size_t n = (size_t)h->content_length;
    char *body = malloc(n + 1);
    if (!body) return NULL;
    size_t got = n_have < n ? n_have : n;
    memcpy(body, have, got);
    if (got < n && h->expect_continue) conn_send(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    while (got < n) {
        ssize_t k = wait_fd(c->fd, POLLIN, deadline, 1) == 1 ? recv(c->fd, body + got, n - got, 0) : 0;
        if (k <= 0) {
            free(body);
            return NULL;
        }
        got += (size_t)k;
    }
    body[n] = 0;
    return body;
}

/* After an early answer (413, 400, ...): stop sending, read and drop what the client still sends for
 * up to a second, so its socket gets our answer rather than a reset. */
static void linger_close(conn_t *c)
{
    shutdown(c->fd, SHUT_WR);
    char sink[4096];
    double deadline = now_ms() + 1000;
    while (wait_fd(c->fd, POLLIN, deadline, 0) == 1 && recv(c->fd, sink, sizeof sink, 0) > 0) {}
    close(c->fd);
}

static void serve_one(conn_t *c)
{
    char head[HTTP_MAX_HEAD + 1], err[200];
    size_t got = 0;
    int code;
    double deadline = now_ms() + O->srv.timeout_s * 1e3;
    size_t hn = read_head(c, head, &got, deadline, &code);
    if (!hn) {
        if (code == 431) send_error(c, code, NULL, "request head larger than %d bytes", HTTP_MAX_HEAD);
        else if (code == 408) send_error(c, code, NULL, "request not received within --timeout %d s", O->srv.timeout_s);
        else if (code == 400) send_error(c, code, NULL, "incomplete request head (CRLF line ends, then an empty line)");
        else if (code) send_error(c, code, NULL, "the server is shutting down");
        return;
    }
    http_req h;
    if ((code = http_parse_head(head, hn, &h, err, sizeof err))) {
        send_error(c, code, NULL, "%s", err);
        return;
    }
    if (strcmp(h.method, "POST")) {
        endpoint(S, c, &h, NULL, 0);
        return;
    }
    if (!h.has_length) {
        send_error(c, 411, NULL, "a POST needs a Content-Length");
        return;
    }
    if (h.content_length > (uint64_t)O->srv.max_body) {   /* before anything is allocated for it */
        send_error(c, 413, NULL, "request body of %llu bytes; at most %ld are accepted (--max-body)",
                   (unsigned long long)h.content_length, O->srv.max_body);
        return;
    }
    char *body = read_body(c, &h, head + hn, got - hn, deadline);
    if (!body) {
        send_error(c, srv_stop ? 503 : 408, NULL, "request body not received within --timeout %d s", O->srv.timeout_s);
        return;
    }
    endpoint(S, c, &h, body, (size_t)h.content_length);
    free(body);
}

static void *conn_main(void *arg)
{
    conn_t *c = arg;
    serve_one(c);
    linger_close(c);
    free(c);
    pthread_mutex_lock(&mu);
    conns--;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void on_signal(int sig)
{
    (void)sig;
    srv_stop = 1;
    int e = errno;
    if (write(wake_pipe[1], "x", 1) < 0) {}   /* the pipe is non-blocking; one byte is enough */
    errno = e;
}

/* The listening socket on --host:--port (getaddrinfo: a name or a numeric address). -1 with a message. */
static int listen_on(char *shown, size_t cap)
{
    char port[16];
    snprintf(port, sizeof port, "%d", O->srv.port);
    struct addrinfo hints = {0}, *res, *a;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int rc = getaddrinfo(O->srv.host, port, &hints, &res);
    if (rc) return die(EX_USAGE, "--host %s: %s", O->srv.host, gai_strerror(rc)), -1;
    int fd = -1, e = 0;
    for (a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        int one = 1;
        if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (fd >= 0 && (bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, 64))) e = errno, close(fd), fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) return die(EX_UNAVAILABLE, "cannot listen on %s port %d: %s", O->srv.host, O->srv.port, strerror(e)), -1;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "?";
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    int v6 = ss.ss_family == AF_INET6;
    const void *addr = v6 ? (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr : (void *)&((struct sockaddr_in *)&ss)->sin_addr;
    inet_ntop(ss.ss_family, addr, host, sizeof host);
    int p = ntohs(v6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
    snprintf(shown, cap, v6 ? "http://[%s]:%d" : "http://%s:%d", host, p);
    return fd;
}

/* A connection past the limit: a fixed 503, without a thread. */
static void refuse_busy(int fd)
{
    static const char msg[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: 88\r\n"
                              "Connection: close\r\n\r\n{\"error\": {\"message\": \"too many connections\", \"type\": "
                              "\"unavailable_error\", \"code\": 503}}\n";
    if (send(fd, msg, sizeof msg - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {}
    close(fd);
}

static void accept_one(int lfd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    if (fd < 0) return;
    pthread_mutex_lock(&mu);
    int full = conns >= O->srv.queue + 4;
    if (!full) conns++;
    pthread_mutex_unlock(&mu);
    if (full) {
        srv_log("connection refused: %d connections are open (--queue %d + 4)", O->srv.queue + 4, O->srv.queue);
        refuse_busy(fd);
        return;
    }
    conn_t *c = calloc(1, sizeof *c);
    if (!c) {
        refuse_busy(fd);
        return;
    }
    c->fd = fd;
    char host[INET6_ADDRSTRLEN] = "?";
    int v6 = ss.ss_family == AF_INET6;
    inet_ntop(ss.ss_family, v6 ? (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr : (void *)&((struct sockaddr_in *)&ss)->sin_addr,
              host, sizeof host);
    snprintf(c->peer, sizeof c->peer, "%s:%d", host, ntohs(v6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port));
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    if (pthread_create(&t, &at, conn_main, c)) {
        free(c);
        pthread_mutex_lock(&mu);
        conns--;
        pthread_mutex_unlock(&mu);
        refuse_busy(fd);
    }
    pthread_attr_destroy(&at);
}

/* The model's name: --alias, else the -m folder's name (results/NAME/build: NAME), else the weights
 * file's name without its extension; the path resolved first, so "-m ." in a bundle names the bundle's
 * folder, not "." (an OpenAI client always sends "model"). */
static void choose_id(void)
{
    if (O->srv.alias) {
        snprintf(ID, sizeof ID, "%s", O->srv.alias);
        return;
    }
    const char *src = O->model_dir ? O->model_dir : O->weights;
    char tmp[PATH_MAX];
    if (!realpath(src, tmp)) snprintf(tmp, sizeof tmp, "%s", src);   /* opened already: a name is enough */
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
    char *base = strrchr(tmp, '/') ? strrchr(tmp, '/') + 1 : tmp;
    if (O->model_dir && !strcmp(base, "build") && base > tmp + 1) {
        base[-1] = 0;
        base = strrchr(tmp, '/') ? strrchr(tmp, '/') + 1 : tmp;
    } else if (!O->model_dir && strrchr(base, '.')) {
        *strrchr(base, '.') = 0;
    }
    snprintf(ID, sizeof ID, "%s", base);
}

int server_run(sess_t *s)
{
    S = s;
    O = s->o;
    choose_id();
    char shown[128];
    int lfd = listen_on(shown, sizeof shown);
    if (lfd < 0) return O->srv.port ? EX_UNAVAILABLE : EX_USAGE;
    if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK)) return die(EX_UNAVAILABLE, "pipe: %s", strerror(errno));
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    sigset_t block, old;   /* connection threads inherit a mask without them: the main thread takes the signals */
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    srv_log("listening on %s (model %s; one generation at a time, up to %d waiting; --timeout %d s, --max-body %ld "
            "bytes); SIGTERM or Ctrl-C stops", shown, ID, O->srv.queue, O->srv.timeout_s, O->srv.max_body);
    fflush(stderr);
    while (!srv_stop) {
        struct pollfd p[2] = {{lfd, POLLIN, 0}, {wake_pipe[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0 && errno != EINTR) break;
        if (srv_stop) break;
        if (p[0].revents & POLLIN) {
            pthread_sigmask(SIG_BLOCK, &block, &old);
            accept_one(lfd);
            pthread_sigmask(SIG_SETMASK, &old, NULL);
        }
    }
    close(lfd);
    srv_log("stopping: aborting the current generation, answering the waiting requests 503");
    pthread_mutex_lock(&mu);
    pthread_cond_broadcast(&cv);
    while (conns > 0) pthread_cond_wait(&cv, &mu);   /* every thread notices srv_stop within 200 ms of a wait */
    pthread_mutex_unlock(&mu);
    close(wake_pipe[0]);
    close(wake_pipe[1]);
    srv_log("stopped");
    return EX_OK;
}
