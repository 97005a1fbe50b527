/* --dump-hidden DIR: every prefill op's output, for X-ray (docs/parity.md "hidden-state dump").
 *
 * An observer (bu_set_observer) appends each observation's rows to <stage>/<IR op id>.f32; rows
 * must arrive in position order with no gap (chunk after chunk, tail rows one by one), which is
 * checked. After the prefill every op must hold exactly the prompt's T rows; then manifest.json is
 * written and the staging folder renamed onto DIR (absent or empty), so DIR is complete or absent.
 * Outputs that are not float32 (argmax ids) are listed under "skipped" with the reason. */
#include "dump_hidden.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Keep the first error (the observer's nonzero return stops the prefill; the CLI prints it). */
static int dump_fail(dump_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int dump_fail(dump_t *d, const char *fmt, ...)
{
    if (!d->msg[0]) {
        va_list ap;
        va_start(ap, fmt);
        bu_verrf(d->msg, sizeof d->msg, 1, fmt, ap);
        va_end(ap);
    }
    return 1;
}

/* Op ids come from our own IR through codegen's pattern, but this CLI loads any library: check
 * again before a name becomes a path (no '/', not "." or ".."). */
static int dump_name_ok(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > 95 || !strcmp(id, ".") || !strcmp(id, "..")) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

static char *dump_path(const dump_t *d, const char *name, const char *suffix)
{
    size_t n = strlen(d->stage) + strlen(name) + strlen(suffix) + 2;
    char *p = xrealloc(NULL, n);
    snprintf(p, n, "%s/%s%s", d->stage, name, suffix);
    return p;
}

int dump_observe(void *ctx, const bu_observation *o)
{
    dump_t *d = ctx;
    if (strcmp(o->phase, "prefill") != 0) return 0;
    const bu_op_info *info = o->info;
    if (!info || !dump_name_ok(info->id))
        return dump_fail(d, "prefill op %d has no usable IR op id (%s)", o->op, info && info->id ? info->id : "NULL");
    if (o->op < 0 || o->op >= (1 << 20)) return dump_fail(d, "prefill op index %d out of range", o->op);
    if (o->op >= d->n_ops) {
        int32_t n = o->op + 1;
        d->ops = xrealloc(d->ops, (size_t)n * sizeof *d->ops);
        memset(d->ops + d->n_ops, 0, (size_t)(n - d->n_ops) * sizeof *d->ops);
        d->n_ops = n;
    }
    dump_op *e = &d->ops[o->op];
    if (!e->id) {
        for (int32_t i = 0; i < d->n_order; i++)
            if (!strcmp(d->ops[d->order[i]].id, info->id))
                return dump_fail(d, "two prefill ops are named %s", info->id);
        e->id = strdup(info->id);
        if (!e->id) return dump_fail(d, "out of memory");
        e->dtype = info->out_dtype;
        e->row_elems = info->out_row_elems;
        if (e->row_elems < 1) return dump_fail(d, "op %s: %lld elements per row", e->id, (long long)e->row_elems);
        d->order = xrealloc(d->order, (size_t)(d->n_order + 1) * sizeof *d->order);
        d->order[d->n_order++] = o->op;
    } else if (strcmp(e->id, info->id) || e->row_elems != info->out_row_elems || e->dtype != info->out_dtype) {
        return dump_fail(d, "op %d changed its id or row width between calls (%s)", o->op, info->id);
    }
    if (o->pos + o->row0 != e->rows || o->n_rows < 1)
        return dump_fail(d, "op %s: rows %lld..%lld arrived, expected row %lld next", e->id,
                         (long long)(o->pos + o->row0), (long long)(o->pos + o->row0 + o->n_rows - 1),
                         (long long)e->rows);
    e->rows += o->n_rows;
    if (e->dtype != BU_OBS_F32) return 0;  /* listed as skipped in the manifest */
    char *path = dump_path(d, e->id, ".f32");
    FILE *f = fopen(path, e->created ? "ab" : "wb");
    if (!f) {
        dump_fail(d, "cannot write %s: %s", path, strerror(errno));
        free(path);
        return 1;
    }
    e->created = 1;
    size_t n = (size_t)o->n_rows * (size_t)e->row_elems;
    int bad = fwrite(o->data, sizeof(float), n, f) != n;
    bad |= fclose(f) != 0;
    if (bad) dump_fail(d, "writing %s failed: %s", path, strerror(errno));
    free(path);
    return bad;
}

/* rename(2) replaces an empty folder, so DIR may exist if it is empty. */
int dump_begin(dump_t *d, const char *dir_arg)
{
    memset(d, 0, sizeof *d);
    /* "out/" and "out" are the same folder; the staging folder must be its sibling, not inside it */
    size_t len = strlen(dir_arg);
    while (len > 1 && dir_arg[len - 1] == '/') len--;
    char *dir = xrealloc(NULL, len + 1);
    memcpy(dir, dir_arg, len);
    dir[len] = 0;
    d->final = dir;
    struct stat st;
    /* rename(2) would replace a symbolic link itself, not the folder it names: refuse it */
    if (lstat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
        return die(EX_USAGE, "--dump-hidden %s is %s; name a new or empty folder", dir,
                   S_ISLNK(st.st_mode) ? "a symbolic link" : "not a folder");
    DIR *h = opendir(dir);
    if (h) {
        struct dirent *ent;
        int empty = 1;
        while ((ent = readdir(h)))
            if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, "..")) empty = 0;
        closedir(h);
        if (!empty) return die(EX_USAGE, "--dump-hidden %s: the folder is not empty; refusing to mix dumps", dir);
    } else if (errno != ENOENT) {
        return die(EX_USAGE, "--dump-hidden %s: %s", dir, strerror(errno));
    }
    if (!strcmp(dir, "/") || !strcmp(dir, ".") || !strcmp(dir, ".."))
        return die(EX_USAGE, "--dump-hidden %s: name a new or empty folder", dir);
    size_t n = strlen(dir) + 48;
    d->stage = xrealloc(NULL, n);
    snprintf(d->stage, n, "%s.partial.%ld", dir, (long)getpid());
    if (mkdir(d->stage, 0777) != 0) {
        int e = errno;
        free(d->stage);
        d->stage = NULL;
        return die(EX_UNAVAILABLE, "--dump-hidden: cannot create %s.partial.%ld: %s", dir, (long)getpid(), strerror(e));
    }
    return EX_OK;
}

void dump_discard(dump_t *d)
{
    if (!d->stage) return;
    for (int32_t i = 0; i < d->n_order; i++) {
        dump_op *e = &d->ops[d->order[i]];
        if (e->created) {
            char *p = dump_path(d, e->id, ".f32");
            unlink(p);
            free(p);
        }
    }
    char *p = dump_path(d, "manifest.json", "");
    unlink(p);
    free(p);
    rmdir(d->stage);
}

void dump_free(dump_t *d)
{
    for (int32_t i = 0; i < d->n_ops; i++) free(d->ops[i].id);
    free(d->ops);
    free(d->order);
    free(d->stage);
    free(d->final);
    memset(d, 0, sizeof *d);
}

int dump_finish(dump_t *d, int64_t T)
{
    if (d->n_order == 0) return die(EX_INTERNAL, "--dump-hidden: the library reported no op outputs");
    for (int32_t i = 0; i < d->n_order; i++) {
        const dump_op *e = &d->ops[d->order[i]];
        if (e->rows != T)
            return die(EX_INTERNAL, "--dump-hidden: op %s reported %lld rows for a %lld-token prompt", e->id,
                       (long long)e->rows, (long long)T);
    }
    char *path = dump_path(d, "manifest.json", "");
    FILE *f = fopen(path, "wb");
    if (!f) {
        int e = errno;
        free(path);
        return die(EX_UNAVAILABLE, "--dump-hidden: cannot write the manifest: %s", strerror(e));
    }
    fprintf(f, "{\"format\": \"bringup-hidden-dump\", \"version\": 1, \"n_tokens\": %lld, \"tensors\": [", (long long)T);
    int k = 0;
    for (int32_t i = 0; i < d->n_order; i++) {
        const dump_op *e = &d->ops[d->order[i]];
        if (e->dtype != BU_OBS_F32) continue;
        fprintf(f, "%s\n  {\"name\": \"%s\", \"file\": \"%s.f32\", \"shape\": [%lld, %lld]}", k++ ? "," : "", e->id,
                e->id, (long long)T, (long long)e->row_elems);
    }
    fprintf(f, "], \"skipped\": [");
    k = 0;
    for (int32_t i = 0; i < d->n_order; i++) {
        const dump_op *e = &d->ops[d->order[i]];
        if (e->dtype == BU_OBS_F32) continue;
        fprintf(f, "%s\n  {\"name\": \"%s\", \"reason\": \"output is not float32\"}", k++ ? "," : "", e->id);
    }
    fprintf(f, "]}\n");
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    free(path);
    if (bad) return die(EX_UNAVAILABLE, "--dump-hidden: writing the manifest failed: %s", strerror(errno));
    if (rename(d->stage, d->final) != 0)
        return die(EX_UNAVAILABLE, "--dump-hidden: cannot move %s to %s: %s", d->stage, d->final, strerror(errno));
    free(d->stage);
    d->stage = NULL;   /* published: nothing to discard */
    return EX_OK;
}
