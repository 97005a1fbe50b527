/* llama-cli's habits in bringup-run (issue 33; docs/runtime.md "llama-cli's options"): escapes in
 * the prompt (-e), the notes for options that mean nothing on this program (-ngl, --no-mmap), the
 * prompt's echo (--no-display-prompt, --color), reverse prompts (-r), the prefill batch (-b) and
 * --mlock of the weights mapping. */
#define _GNU_SOURCE   /* mlock's ENOMEM reason, getrlimit */
#include "habits.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

static int hex(int c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; }

/* A copy of z with llama.cpp's escapes processed (string_process_escapes: \n \t \r \\ \' \" \a \b
 * \f \v \xHH; any other backslash stays as typed). NULL with a message when one makes a NUL. */
static char *unescape(const char *what, const char *z)
{
    size_t n = strlen(z), k = 0;
    char *out = xrealloc(NULL, n + 1);
    for (size_t i = 0; i < n; i++) {
        char c = z[i];
        if (c != '\\' || i + 1 == n) {
            out[k++] = c;
            continue;
        }
        char e = z[++i];
        const char *from = "ntr\\'\"abfv", *to = "\n\t\r\\'\"\a\b\f\v", *at = strchr(from, e);
        if (e && at) {
            out[k++] = to[at - from];
        } else if (e == 'x' && i + 2 < n + 1 && hex(z[i + 1]) >= 0 && hex(z[i + 2]) >= 0) {
            int v = hex(z[i + 1]) * 16 + hex(z[i + 2]);
            if (!v) {
                free(out);
                die(EX_USAGE, "-e: %s holds \\x00 at byte %zu: a NUL cannot be passed", what, i - 1);
                return NULL;
            }
            out[k++] = (char)v;
            i += 2;
        } else {
            out[k++] = '\\';
            out[k++] = e;
        }
    }
    out[k] = 0;
    return out;
}

int apply_escapes(opts_t *o)
{
    if (!o->escape) return EX_OK;
    const char **which[2 + MAX_REVERSE] = {&o->prompt, &o->system};
    const char *names[2] = {o->prompt_file ? "the -f file" : "-p", "--system"};
    for (int i = 0; i < o->n_reverse; i++) which[2 + i] = &o->reverse[i];
    for (int i = 0; i < 2 + o->n_reverse; i++) {
        if (!*which[i]) continue;
        char *e = unescape(i < 2 ? names[i] : "-r", *which[i]);
        if (!e) return EX_USAGE;
        if (i == 0 && o->owned[0]) free(o->owned[0]), o->owned[0] = NULL;   /* the -f text, replaced */
        o->owned[i == 0 ? 0 : 2 + i] = e;
        *which[i] = e;
    }
    return EX_OK;
}

void habit_notes(const opts_t *o)
{
    if (o->ngl)
        say("note: -ngl %s: this program runs on the CPU only (no GPU offload); running on the CPU", o->ngl);
    if (o->flash_attn)
        say("note: -fa %s: the attention is this build's certified kernel whatever is given; running it",
            o->flash_attn);
    if (o->no_mmap)
        say("note: --no-mmap: the weights are always mapped read-only (pages shared with the page cache); "
            "--mlock keeps them resident");
    if (o->cnv && o->prompt)
        say("note: -cnv with a prompt: the prompt is the first user turn (llama-cli takes it as the system "
            "message; -sys TEXT gives one)");
}

/* The mapping of /proc/self/maps that holds p: [*lo, *hi). 0, or -1 when none does. */
static int mapping_of(const void *p, uintptr_t *lo, uintptr_t *hi)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[512];
    int found = -1;
    while (found && fgets(line, sizeof line, f)) {
        uintptr_t a, b;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &a, &b) == 2 && (uintptr_t)p >= a && (uintptr_t)p < b)
            *lo = a, *hi = b, found = 0;
    }
    fclose(f);
    return found;
}

int lock_weights(sess_t *s)
{
    size_t n = 0;
    const void *t = s->L.rt->tensor(s->m, "tokenizer.blob", &n);
    if (!t) t = s->L.rt->tensor(s->m, "chat.format", &n);
    uintptr_t lo, hi;
    if (!t || mapping_of(t, &lo, &hi))
        return die(EX_UNAVAILABLE, "--mlock: cannot find the weights mapping of %s in /proc/self/maps", s->o->weights);
    if (mlock((const void *)lo, hi - lo) == 0) {
        if (s->o->verbose) say("--mlock: %.1f MiB of weights locked in RAM", (double)(hi - lo) / 1048576.0);
        return EX_OK;
    }
    int e = errno;
    struct rlimit rl;
    char lim[64] = "unknown";
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY) snprintf(lim, sizeof lim, "unlimited");
        else snprintf(lim, sizeof lim, "%.1f MiB", (double)rl.rlim_cur / 1048576.0);
    }
    return die(EX_UNAVAILABLE, "--mlock: cannot lock the %.1f MiB weights mapping: %s (RLIMIT_MEMLOCK is %s: raise "
               "it with ulimit -l, or run without --mlock)", (double)(hi - lo) / 1048576.0, strerror(e), lim);
}

int prefill_batched(sess_t *s, const int32_t *ids, int32_t n)
{
    int32_t b = s->o->batch, chunk = s->L.rt->chunk(s->m);
    if (b <= 0 || b >= n) return s->L.rt->prefill(s->m, ids, n);
    for (int32_t i = 0; i < n; i += b) {
        int st = s->L.rt->prefill(s->m, ids + i, n - i < b ? n - i : b);
        if (st != BU_RT_OK) return st;
    }
    (void)chunk;
    return BU_RT_OK;
}

void batch_note(const sess_t *s)
{
    int32_t chunk = s->L.rt->chunk(s->m);
    if (s->o->batch > chunk)
        say("note: -b %d: the library's prefill is planned for %d tokens per chunk (its buffers are sized for "
            "it); prompts are evaluated %d at a time", s->o->batch, chunk, chunk);
    if (s->o->batch && (s->o->all_logits || s->o->dump_hidden))
        say("note: -b %d: --all-logits and --dump-hidden evaluate the prompt in the planned chunks of %d",
            s->o->batch, chunk);
}

void echo_prompt(const sess_t *s, const char *text)
{
    int color = s->o->color && isatty(STDOUT_FILENO);
    if (color) fputs("\033[33m", stdout);   /* yellow, as llama-cli shows the prompt */
    fputs(text, stdout);
    if (color) fputs("\033[0m", stdout);
    fflush(stdout);
}

int reverse_prompt_seen(const sess_t *s, const bu_str *text, size_t from, size_t before)
{
    for (int i = 0; i < s->o->n_reverse; i++) {
        size_t k = strlen(s->o->reverse[i]);
        /* a match that ends in the newest piece (it may end inside a token, as llama-cli finds it) */
        size_t start = before >= from + k - 1 ? before - (k - 1) : from;
        if (text->n - start >= k && memmem(text->p + start, text->n - start, s->o->reverse[i], k)) return 1;
    }
    return 0;
}
