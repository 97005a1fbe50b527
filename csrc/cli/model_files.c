/* Which files bringup-run reads: the library and weights of -m DIR, the prompt of -f FILE, and the
 * recorded source of the chat format (weights_manifest.json beside the weights).
 *
 * -m DIR lookup (docs/runtime.md), the first layout that has both files wins and is reported
 * (-v, --json "files"); no other place is searched:
 *   1. bundle          DIR/libmodel.so + DIR/weights.bump           (an export: all files together)
 *   2. workflow build  DIR/libmodel.so + DIR/../convert/weights.bump (results/NAME/build)
 *   3. workflow model  DIR/build/libmodel.so + DIR/convert/weights.bump (results/NAME)
 * Either way bu_open then checks that the weights are the ones the library was generated for. */
#include "model_files.h"
#include "library.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The ceiling of a -f prompt before the model is open (a pipe is read up to it, a regular file
 * refused by its size); once the tokenizer is loaded the prompt must also fit n_ctx x the longest
 * token (set_prompt_cap), which is checked before tokenizing. */
#define PROMPT_FILE_MAX (64u << 20)
#define MANIFEST_MAX (64u << 20)

static char *join(const char *dir, const char *rel)
{
    size_t n = strlen(dir) + strlen(rel) + 2;
    char *p = xrealloc(NULL, n);
    snprintf(p, n, "%s/%s", dir, rel);
    return p;
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int resolve_model(opts_t *o)
{
    if (!o->model_dir) {
        o->found_by = "given as LIBMODEL WEIGHTS";
        return EX_OK;
    }
    const char *dir = o->model_dir;
    struct stat st;
    if (stat(dir, &st) != 0) return die(EX_UNAVAILABLE, "-m %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return die(EX_USAGE, "-m %s: not a folder; -m takes the folder a build produced (results/NAME/build or an "
                             "export bundle), or give LIBMODEL WEIGHTS", dir);
    static const struct { const char *lib, *weights, *how; } layouts[] = {
        {"libmodel.so", "weights.bump", "bundle: DIR/libmodel.so + DIR/weights.bump"},
        {"libmodel.so", "../convert/weights.bump", "workflow build folder: DIR/libmodel.so + DIR/../convert/weights.bump"},
        {"build/libmodel.so", "convert/weights.bump", "workflow model folder: DIR/build/libmodel.so + DIR/convert/weights.bump"},
    };
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        char *lib = join(dir, layouts[i].lib), *w = join(dir, layouts[i].weights);
        /* a FIFO or device in the model's place is named, not skipped (nor opened: it would block) */
        const char *paths[2] = {lib, w}, *what;
        for (int k = 0; k < 2; k++) {
            if (file_kind(paths[k], &what) == 1) {
                int rc = die(EX_USAGE, "-m %s: %s is %s, not a regular file", dir, paths[k], what);
                free(lib);
                free(w);
                return rc;
            }
        }
        if (is_file(lib) && is_file(w)) {
            o->lib = o->owned[1] = lib;
            o->weights = o->owned[2] = w;
            o->found_by = layouts[i].how;
            return EX_OK;
        }
        free(lib);
        free(w);
    }
    return die(EX_UNAVAILABLE, "-m %s: no model found; looked for DIR/libmodel.so + DIR/weights.bump, "
                               "DIR/libmodel.so + DIR/../convert/weights.bump, DIR/build/libmodel.so + "
                               "DIR/convert/weights.bump (build it: snakemake build --config model=NAME)", dir);
}

/* The whole of fd (at most max bytes) into out. 0, or an errno / EFBIG. */
static int slurp(int fd, size_t max, bu_str *out)
{
    char buf[65536];
    for (;;) {
        ssize_t k = read(fd, buf, sizeof buf);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return errno;
        if (k == 0) return 0;
        if (out->n + (size_t)k > max) return EFBIG;
        str_add(out, buf, (size_t)k);
    }
}

int read_prompt_file(opts_t *o)
{
    const char *path = o->prompt_file;
    if (!path) return EX_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return die(errno == ENOENT ? EX_USAGE : EX_UNAVAILABLE, "-f %s: %s", path, strerror(errno));
    struct stat st;
    /* a pipe (process substitution, a FIFO) is text that ends; a device or folder is not */
    if (fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode))) {
        close(fd);
        return die(EX_USAGE, "-f %s: not a regular file or a pipe", path);
    }
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > PROMPT_FILE_MAX) {   /* by its size, before reading it */
        close(fd);
        return die(EX_USAGE, "-f %s: %lld bytes, larger than %u MiB; refusing to read it as a prompt", path,
                   (long long)st.st_size, PROMPT_FILE_MAX >> 20);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);   /* opened non-blocking only so a FIFO cannot hang open() */
    bu_str s = {0};
    int e = slurp(fd, PROMPT_FILE_MAX, &s);
    close(fd);
    if (e) {
        free(s.p);
        if (e == EFBIG) return die(EX_USAGE, "-f %s: larger than %u MiB; refusing to read it as a prompt", path, PROMPT_FILE_MAX >> 20);
        return die(EX_UNAVAILABLE, "-f %s: %s", path, strerror(e));
    }
    const char *nul = s.n ? memchr(s.p, 0, s.n) : NULL;
    if (nul) {
        size_t at = (size_t)(nul - s.p);
        free(s.p);
        return die(EX_USAGE, "-f %s: byte %zu is NUL; a prompt is text", path, at);
    }
    if (!s.p) str_add(&s, "", 0);
    o->prompt = o->owned[0] = s.p;
    return EX_OK;
}

/* ---- a strict reader for the one string wanted from weights_manifest.json (RFC 8259 grammar) ---- */

typedef struct {
    const char *p, *end;
    int depth;
} jr;

static void ws(jr *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

/* A JSON string at j->p; into out when out != NULL (\u escapes of the BMP only, else kept as
 * written: this reads a message to print, not a key). 0 or -1. */
static int jstr(jr *j, bu_str *out)
{
    if (j->p >= j->end || *j->p != '"') return -1;
    for (j->p++; j->p < j->end; j->p++) {
        char c = *j->p;
        if (c == '"') {
            j->p++;
            if (out) str_add(out, "", 0);
            return 0;
        }
        if ((unsigned char)c < 0x20) return -1;
        if (c == '\\') {
            if (++j->p >= j->end) return -1;
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *k = strchr(from, *j->p);
            if (k && *j->p) c = to[k - from];
            else if (*j->p == 'u' && j->end - j->p > 4) {
                char hex[5] = {j->p[1], j->p[2], j->p[3], j->p[4], 0}, *e;
                unsigned long u = strtoul(hex, &e, 16);
                if (*e) return -1;
                j->p += 4;
                if (out) {
                    char b[3] = {(char)(u < 0x80 ? u : u < 0x800 ? 0xC0 | (u >> 6) : 0xE0 | (u >> 12)),
                                 (char)(u < 0x800 ? 0x80 | (u & 0x3F) : 0x80 | ((u >> 6) & 0x3F)),
                                 (char)(0x80 | (u & 0x3F))};
                    str_add(out, b, u < 0x80 ? 1 : u < 0x800 ? 2 : 3);
                }
                continue;
            } else return -1;
        }
        if (out) str_add(out, &c, 1);
    }
    return -1;
}

/* Skip one value. in_extra: 2 = this value is the top-level member "extra", 1 = an element of it;
 * an element object whose "name" is "chat.format" hands its "reason" string to *found. 0 or -1. */
static int jvalue(jr *j, int in_extra, char **found)
{
    ws(j);
    if (j->p >= j->end || ++j->depth > 64) return -1;
    int rc = 0;
    if (*j->p == '"') {
        rc = jstr(j, NULL);
    } else if (*j->p == '{' || *j->p == '[') {
        int obj = *j->p++ == '{', first = 1;
        bu_str nm = {0}, rs = {0};
        for (;;) {
            ws(j);
            if (j->p < j->end && *j->p == (obj ? '}' : ']') && first) { j->p++; break; }
            bu_str key = {0};
            if (obj) {
                if (jstr(j, &key)) { free(key.p); rc = -1; break; }
                ws(j);
                if (j->p >= j->end || *j->p++ != ':') { free(key.p); rc = -1; break; }
                ws(j);
            }
            int top_extra = obj && j->depth == 1 && key.p && !strcmp(key.p, "extra");
            bu_str *into = obj && in_extra == 1 && key.p ? (!strcmp(key.p, "name") ? &nm : !strcmp(key.p, "reason") ? &rs : NULL) : NULL;
            free(key.p);
            if (into && j->p < j->end && *j->p == '"') rc = jstr(j, into);
            else rc = jvalue(j, top_extra ? 2 : (in_extra == 2 && !obj), found);
            if (rc) break;
            ws(j);
            if (j->p < j->end && *j->p == ',') { j->p++; first = 0; continue; }
            if (j->p < j->end && *j->p == (obj ? '}' : ']')) { j->p++; break; }
            rc = -1;
            break;
        }
        if (!rc && obj && in_extra == 1 && nm.p && !strcmp(nm.p, "chat.format") && rs.p && !*found) {
            *found = rs.p;
            rs.p = NULL;
        }
        free(nm.p);
        free(rs.p);
    } else {
        /* number, true, false, null: the characters they may hold */
        const char *s = j->p;
        while (j->p < j->end && strchr("0123456789+-.eEtruefalsn", *j->p)) j->p++;
        rc = j->p == s ? -1 : 0;
    }
    j->depth--;
    return rc;
}

char *chat_format_source(const char *weights, int *recorded)
{
    *recorded = 0;
    const char *slash = strrchr(weights, '/');
    size_t dn = slash ? (size_t)(slash - weights) : 1;
    char *dir = xrealloc(NULL, dn + 1);
    memcpy(dir, slash ? weights : ".", dn);
    dir[dn] = 0;
    char *path = join(dir, "weights_manifest.json");
    free(dir);
    bu_str msg = {0}, text = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || slurp(fd, MANIFEST_MAX, &text)) {
        str_adds(&msg, "its source is not recorded here (no readable weights_manifest.json beside the weights)");
    } else {
        jr j = {text.p, text.p + text.n, 0};
        char *found = NULL;
        int rc = text.p ? jvalue(&j, 0, &found) : -1;
        if (!rc && found) {
            str_adds(&msg, found);
            *recorded = 1;
        }
        else str_adds(&msg, rc ? "weights_manifest.json beside the weights is not valid JSON"
                              : "weights_manifest.json beside the weights does not record it");
        free(found);
    }
    if (fd >= 0) close(fd);
    free(text.p);
    free(path);
    return msg.p;   /* printed by say(), escaped */
}
