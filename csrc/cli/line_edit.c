/* The chat loop's line reader: a small line editor when stdin and stderr are a terminal (raw mode,
 * like linenoise, but no dependency), plain lines otherwise.
 *
 * Keys: printable bytes and UTF-8 insert at the cursor; Left/Right (Ctrl-B/F) move by code point;
 * Home/End (Ctrl-A/E); Backspace and Delete; Ctrl-K / Ctrl-U / Ctrl-W delete to the end / to the
 * start / the word before; Up/Down (Ctrl-P/N) walk the history (the last LE_HISTORY_MAX lines);
 * Ctrl-L clears the screen; Enter submits; Ctrl-C returns LE_INTERRUPT; Ctrl-D on an empty line
 * returns LE_EOF (else deletes under the cursor). A NUL byte (Ctrl-@) is kept and shown as ^@ so
 * the caller can refuse the line; other control bytes are shown as ^X. One column per code point
 * (wide characters are not measured); a line wider than the terminal scrolls horizontally.
 * Echo goes to stderr (stdout carries the model's text). In both modes a SIGINT (the chat loop's
 * handler sets e->interrupt) ends a waiting read with LE_INTERRUPT (wait_input). */
#include "line_edit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <termios.h>
#include <unistd.h>

static struct termios saved;
static int raw_now;

static void raw_off(void)
{
    if (raw_now) tcsetattr(STDIN_FILENO, TCSADRAIN, &saved);
    raw_now = 0;
}

static int raw_on(void)
{
    static int registered;
    if (tcgetattr(STDIN_FILENO, &saved) != 0) return -1;
    struct termios t = saved;
    t.c_iflag &= ~(tcflag_t)(BRKINT | ICRNL | INPCK | ISTRIP | IXON);
    t.c_cflag |= CS8;
    t.c_lflag &= ~(tcflag_t)(ECHO | ICANON | IEXTEN | ISIG);   /* Ctrl-C arrives as byte 3 */
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    /* TCSADRAIN, not TCSAFLUSH: what was typed ahead while the model answered is kept */
    if (tcsetattr(STDIN_FILENO, TCSADRAIN, &t) != 0) return -1;
    raw_now = 1;
    if (!registered) atexit(raw_off);
    registered = 1;
    return 0;
}

void le_init(ledit_t *e, volatile sig_atomic_t *interrupt)
{
    memset(e, 0, sizeof *e);
    e->interrupt = interrupt;
    const char *term = getenv("TERM");
    e->raw = isatty(STDIN_FILENO) && isatty(STDERR_FILENO) && !(term && (!strcmp(term, "dumb") || !*term));
}

static void history_add(ledit_t *e, const char *line)
{
    if (!line[0] || (e->n_hist && !strcmp(e->hist[e->n_hist - 1], line))) return;
    if (e->n_hist == LE_HISTORY_MAX) {
        free(e->hist[0]);
        memmove(e->hist, e->hist + 1, (e->n_hist - 1) * sizeof *e->hist);
        e->n_hist--;
    }
    e->hist = xrealloc(e->hist, (e->n_hist + 1) * sizeof *e->hist);
    size_t n = strlen(line);
    e->hist[e->n_hist] = xrealloc(NULL, n + 1);
    memcpy(e->hist[e->n_hist++], line, n + 1);
}

void le_free(ledit_t *e)
{
    for (size_t i = 0; i < e->n_hist; i++) free(e->hist[i]);
    free(e->hist);
    memset(e, 0, sizeof *e);
}

/* Wait until stdin has input. -1 when SIGINT came, also when it came after the prompt was shown
 * but before the wait began: SIGINT is blocked while *interrupt is checked and pselect unblocks
 * it atomically, so a signal cannot slip in between and leave a read blocked. */
static int wait_input(const ledit_t *e)
{
    if (!e->interrupt) return 0;
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &old);
    int rc = 0;
    if (*e->interrupt) {
        rc = -1;
    } else {
        fd_set r;
        FD_ZERO(&r);
        FD_SET(STDIN_FILENO, &r);
        if (pselect(STDIN_FILENO + 1, &r, NULL, NULL, NULL, &old) < 0 && errno == EINTR) rc = -1;
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* ---- plain lines (a pipe, a file, a dumb terminal) ---- */

static int plain_read(const ledit_t *e, bu_str *out)
{
    static char buf[4096];
    static size_t at, have;
    int any = 0, over = 0;   /* over: past e->max; the rest of the line is read and dropped */
    for (;;) {
        if (at == have) {
            if (wait_input(e) < 0) return LE_INTERRUPT;
            ssize_t k = read(STDIN_FILENO, buf, sizeof buf);
            if (k < 0 && errno == EINTR) return LE_INTERRUPT;   /* SIGINT at the prompt */
            if (k <= 0) return over ? LE_TOOLONG : any ? LE_LINE : LE_EOF;   /* a last line without '\n' counts */
            at = 0;
            have = (size_t)k;
        }
        char *nl = memchr(buf + at, '\n', have - at);
        size_t n = nl ? (size_t)(nl - (buf + at)) : have - at;
        if (e->max && out->n + n > e->max) over = 1;
        if (!over) str_add(out, buf + at, n);
        any = 1;
        at += n + (nl != NULL);
        if (nl) return over ? LE_TOOLONG : LE_LINE;
    }
}

/* ---- the editor ---- */

typedef struct {
    bu_str b;          /* the line (b.p may hold NULs) */
    size_t pos;        /* cursor, a byte offset at a code point boundary */
    const char *prompt;
    int capped;        /* 1: at most max bytes (the turn's cap less the lines before this one) */
    size_t max;        /* a byte past it is dropped and sets over */
    int over;          /* a byte was dropped: Enter returns LE_TOOLONG */
} line_t;

static int cont(unsigned char c) { return (c & 0xC0) == 0x80; }
static size_t prev_cp(const line_t *l, size_t i) { while (i > 0 && cont((unsigned char)l->b.p[--i])) {} return i; }
static size_t next_cp(const line_t *l, size_t i) { if (i < l->b.n) i++; while (i < l->b.n && cont((unsigned char)l->b.p[i])) i++; return i; }

/* Columns of b[from, to): one per code point, two for a control byte (^X). */
static size_t cols(const line_t *l, size_t from, size_t to)
{
    size_t c = 0;
    for (size_t i = from; i < to; i++) {
        unsigned char ch = (unsigned char)l->b.p[i];
        if (ch < 0x20 || ch == 0x7f) c += 2;
        else if (!cont(ch)) c++;
    }
    return c;
}

static void put(const char *s, size_t n)
{
    while (n) {
        ssize_t k = write(STDERR_FILENO, s, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return;
        s += k;
        n -= (size_t)k;
    }
}

static void refresh(const line_t *l)
{
    struct winsize ws;
    size_t width = ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
    /* the first code point shown: walk back from the cursor while the text fits (O(width) per key,
     * not a scan of the whole line: a pasted line of the prompt cap's length stays quick) */
    size_t plen = strlen(l->prompt), start = l->pos, before = 0;
    while (start > 0) {
        size_t p = prev_cp(l, start), w = cols(l, p, start);
        if (plen + before + w + 1 >= width) break;
        before += w;
        start = p;
    }
    bu_str o = {0};
    str_adds(&o, "\r");
    str_adds(&o, l->prompt);
    size_t used = plen;
    for (size_t i = start; i < l->b.n;) {
        size_t j = next_cp(l, i), w = cols(l, i, j);
        if (used + w + 1 > width) break;
        unsigned char ch = (unsigned char)l->b.p[i];
        if (ch < 0x20 || ch == 0x7f) {
            char caret[2] = {'^', (char)(ch ^ 0x40)};
            str_add(&o, caret, 2);
        } else {
            str_add(&o, l->b.p + i, j - i);
        }
        used += w;
        i = j;
    }
    char mv[32];
    snprintf(mv, sizeof mv, "\x1b[0K\r\x1b[%zuC", plen + cols(l, start, l->pos));
    str_adds(&o, mv);
    put(o.p, o.n);
    free(o.p);
}

static void erase(line_t *l, size_t from, size_t to)
{
    memmove(l->b.p + from, l->b.p + to, l->b.n - to + 1);
    l->b.n -= to - from;
    if (l->pos > to) l->pos -= to - from;
    else if (l->pos > from) l->pos = from;
}

static void insert(line_t *l, const char *s, size_t n)
{
    size_t tail = l->b.n - l->pos;
    str_add(&l->b, s, n);   /* grows b by n (and keeps the NUL after it) */
    memmove(l->b.p + l->pos + n, l->b.p + l->pos, tail);
    memcpy(l->b.p + l->pos, s, n);
    l->pos += n;
}

static void set_line(line_t *l, const char *s)
{
    l->b.n = 0;
    str_adds(&l->b, s);
    l->pos = l->b.n;
}

static int read_byte(const ledit_t *e, unsigned char *c)
{
    for (;;) {
        if (wait_input(e) < 0) return -1;
        ssize_t k = read(STDIN_FILENO, c, 1);
        if (k == 1) return 1;
        if (k < 0 && errno == EINTR) return -1;   /* a signal (kill -INT): treated as Ctrl-C */
        if (k <= 0) return 0;
    }
}

/* The key after ESC: 'A'..'D', 'H', 'F', or '3' for Delete; 0 for anything else. */
static int escape_key(const ledit_t *e)
{
    unsigned char a, b, c;
    if (read_byte(e, &a) != 1) return 0;
    if (a == 'O') return read_byte(e, &b) == 1 && (b == 'H' || b == 'F') ? b : 0;
    if (a != '[' || read_byte(e, &b) != 1) return 0;
    if (b < '0' || b > '9') return b;
    if (read_byte(e, &c) != 1 || c != '~') return 0;
    return b == '1' || b == '7' ? 'H' : b == '4' || b == '8' ? 'F' : b == '3' ? '3' : 0;
}

static int edit(ledit_t *e, line_t *l)
{
    size_t h = e->n_hist;        /* the history entry shown; n_hist = the line being typed */
    char *typed = NULL;          /* that line, while an older entry is shown */
    int rc = LE_LINE;
    refresh(l);
    for (;;) {
        unsigned char c;
        int got = read_byte(e, &c);
        if (got <= 0) { rc = got < 0 ? LE_INTERRUPT : (l->b.n ? LE_LINE : LE_EOF); break; }
        int key = c == 27 ? escape_key(e) : 0;
        if (c == '\r' || c == '\n') break;
        if (c == 3) { put("^C\n", 3); rc = LE_INTERRUPT; break; }
        if (c == 4 && l->b.n == 0) { put("\n", 1); rc = LE_EOF; break; }
        if (c == 4 || key == '3') { if (l->pos < l->b.n) erase(l, l->pos, next_cp(l, l->pos)); }
        else if (c == 127 || c == 8) { if (l->pos) erase(l, prev_cp(l, l->pos), l->pos); }
        else if (c == 1 || key == 'H') l->pos = 0;
        else if (c == 5 || key == 'F') l->pos = l->b.n;
        else if (c == 2 || key == 'D') l->pos = prev_cp(l, l->pos);
        else if (c == 6 || key == 'C') l->pos = next_cp(l, l->pos);
        else if (c == 11) erase(l, l->pos, l->b.n);
        else if (c == 21) erase(l, 0, l->pos);
        else if (c == 23) {
            size_t i = l->pos;
            while (i && l->b.p[i - 1] == ' ') i--;
            while (i && l->b.p[i - 1] != ' ') i--;
            erase(l, i, l->pos);
        } else if (c == 12) put("\x1b[H\x1b[2J", 7);
        else if ((c == 16 || key == 'A') && h > 0) {
            if (h == e->n_hist) { free(typed); typed = strdup(l->b.p ? l->b.p : ""); }
            set_line(l, e->hist[--h]);
        } else if ((c == 14 || key == 'B') && h < e->n_hist) {
            h++;
            set_line(l, h == e->n_hist ? (typed ? typed : "") : e->hist[h]);
        } else if ((c == 0 || c >= 0x20) && l->capped && l->b.n >= l->max) {
            if (!l->over) put("\a", 1);   /* the cap: the line will be refused at Enter */
            l->over = 1;
        } else if (c == 0 || c >= 0x20) insert(l, (const char *)&c, 1);
        /* other control bytes and unknown escape sequences are keys without a binding */
        refresh(l);
    }
    free(typed);
    if (rc == LE_LINE) put("\n", 1);
    return rc == LE_LINE && l->over ? LE_TOOLONG : rc;
}

int le_read(ledit_t *e, const char *prompt, bu_str *out)
{
    if (!e->raw) {
        put(prompt, strlen(prompt));
        return plain_read(e, out);
    }
    if (raw_on() != 0) {   /* the terminal refused: read plain lines from now on */
        e->raw = 0;
        put(prompt, strlen(prompt));
        return plain_read(e, out);
    }
    line_t l = {{0}, 0, prompt, e->max != 0, out->n < e->max ? e->max - out->n : 0, 0};
    str_add(&l.b, "", 0);
    int rc = edit(e, &l);
    raw_off();
    if (rc == LE_LINE) {
        if (!memchr(l.b.p, 0, l.b.n)) history_add(e, l.b.p);
        str_add(out, l.b.p, l.b.n);
    }
    free(l.b.p);
    return rc;
}
