/* The HTTP/1.1 request head of bringup-run --server (RFC 9112), read strictly: a request line
 * "METHOD SP origin-form SP HTTP/1.x", header lines "name: value" ended by CRLF, an empty line.
 * Anything else is refused with the status a client can act on; nothing is guessed. */
#include "bu_http.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static int bad(char *err, size_t cap, int code, const char *what)
{
    snprintf(err, cap, "%s", what);
    return code;
}

/* RFC 9110 tchar: the characters of a method and a header name. */
static int tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int request_line(const char *p, size_t n, http_req *r, char *err, size_t cap)
{
    size_t i = 0, k = 0;
    while (i < n && tchar((unsigned char)p[i])) i++;
    if (!i || i >= sizeof r->method || i == n || p[i] != ' ') return bad(err, cap, 400, "bad request line (method)");
    memcpy(r->method, p, i);
    r->method[i] = 0;
    const char *t = p + ++i;
    while (i < n && p[i] > 0x20 && p[i] < 0x7F) i++, k++;
    if (k >= HTTP_MAX_TARGET) return bad(err, cap, 414, "request target too long");
    if (!k || t[0] != '/' || i == n || p[i] != ' ') return bad(err, cap, 400, "bad request line (target: an absolute path)");
    size_t q = strcspn(t, "? ");
    memcpy(r->path, t, q);
    r->path[q] = 0;
    i++;
    if (n - i != 8 || memcmp(p + i, "HTTP/1.", 7)) {
        if (n - i >= 5 && !memcmp(p + i, "HTTP/", 5)) return bad(err, cap, 505, "only HTTP/1.0 and HTTP/1.1 are served");
        return bad(err, cap, 400, "bad request line (version)");
    }
    if (p[i + 7] != '0' && p[i + 7] != '1') return bad(err, cap, 505, "only HTTP/1.0 and HTTP/1.1 are served");
    r->minor = p[i + 7] - '0';
    return 0;
}

static int header(const char *p, size_t n, http_req *r, char *err, size_t cap)
{
    size_t i = 0;
    while (i < n && tchar((unsigned char)p[i])) i++;
    if (!i || i == n || p[i] != ':') return bad(err, cap, 400, "bad header line");
    size_t name_n = i++;
    while (i < n && (p[i] == ' ' || p[i] == '\t')) i++;
    size_t v = i, e = n;
    while (e > v && (p[e - 1] == ' ' || p[e - 1] == '\t')) e--;
    for (size_t k = v; k < e; k++)
        if (((unsigned char)p[k] < 0x20 && p[k] != '\t') || p[k] == 0x7F) return bad(err, cap, 400, "control character in a header value");
#define IS(name) (name_n == sizeof name - 1 && !strncasecmp(p, name, name_n))
    if (IS("Content-Length")) {
        uint64_t x = 0;
        if (v == e || e - v > 18) return bad(err, cap, 400, "bad Content-Length");
        for (size_t k = v; k < e; k++) {
            if (p[k] < '0' || p[k] > '9') return bad(err, cap, 400, "bad Content-Length");
            x = x * 10 + (uint64_t)(p[k] - '0');
        }
        if (r->has_length && x != r->content_length) return bad(err, cap, 400, "two different Content-Length headers");
        r->has_length = 1;
        r->content_length = x;
    } else if (IS("Transfer-Encoding")) {
        return bad(err, cap, 501, "Transfer-Encoding is not accepted: send the body with a Content-Length");
    } else if (IS("Expect")) {
        if (e - v != 12 || strncasecmp(p + v, "100-continue", 12)) return bad(err, cap, 417, "only Expect: 100-continue is understood");
        r->expect_continue = 1;
    }
#undef IS
    return 0;
}

int http_parse_head(const char *head, size_t n, http_req *r, char *err, size_t cap)
{
    memset(r, 0, sizeof *r);
    if (n > HTTP_MAX_HEAD) return bad(err, cap, 431, "request head larger than 16384 bytes");
    if (n < 4 || memcmp(head + n - 4, "\r\n\r\n", 4)) return bad(err, cap, 400, "request head does not end with an empty line");
    size_t at = 0;
    int lines = 0, rc;
    while (at < n - 2) {
        const char *p = head + at;
        const char *eol = memchr(p, '\n', n - at);
        if (!eol || eol == p || eol[-1] != '\r') return bad(err, cap, 400, "a line does not end with CRLF");
        size_t len = (size_t)(eol - p) - 1;
        if (memchr(p, '\r', len) || memchr(p, 0, len)) return bad(err, cap, 400, "CR or NUL inside a line");
        if (lines == 0) rc = request_line(p, len, r, err, cap);
        else if (p[0] == ' ' || p[0] == '\t') rc = bad(err, cap, 400, "obsolete line folding");
        else if (lines > HTTP_MAX_HEADERS) rc = bad(err, cap, 431, "more than 64 header lines");
        else rc = header(p, len, r, err, cap);
        if (rc) return rc;
        lines++;
        at += len + 2;
    }
    return 0;
}

const char *http_reason(int code)
{
    switch (code) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Internal Server Error";
    }
}
