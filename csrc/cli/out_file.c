/* Output files of bringup-run (--all-logits): created or replaced only as regular files, atomically.
 *
 * rename(2) replaces whatever name it is given: a FIFO, a device node (as root, /dev/null), a
 * symbolic link. So the target is checked with lstat first (absent, or a regular file; never a
 * symbolic link, even to a regular file: the link would be replaced, not its target), the data
 * go to a new temporary file in the same folder (O_EXCL | O_NOFOLLOW), are fsync'ed, the target
 * is checked once more and the temporary file renamed onto it. On any failure the temporary file
 * is removed and the target is as it was. */
#include "out_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : S_ISLNK(m) ? "a symbolic link" : "not a regular file";
}

int check_output_path(const char *what, const char *path)
{
    size_t n = strlen(path);
    if (n == 0 || path[n - 1] == '/') return die(EX_USAGE, "%s '%s': name a file, not a folder", what, path);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode))
            return die(EX_USAGE, "%s %s is %s; refusing to replace it (name a regular file or a new path)", what, path,
                       kind(st.st_mode));
        return EX_OK;
    }
    if (errno != ENOENT) return die(EX_USAGE, "%s %s: %s", what, path, strerror(errno));
    /* a new file: its folder must exist (checked now, not after the run that fills it) */
    const char *slash = strrchr(path, '/');
    if (slash) {
        char *dir = xrealloc(NULL, (size_t)(slash - path) + 2);
        memcpy(dir, path, (size_t)(slash - path) + 1);
        dir[slash - path + (slash == path)] = 0;
        int ok = stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
        int e = errno;
        if (!ok) die(EX_USAGE, "%s %s: the folder %s %s", what, path, dir, e == ENOENT ? "does not exist" : "is not usable");
        free(dir);
        if (!ok) return EX_USAGE;
    }
    return EX_OK;
}

int write_output_file(const char *what, const char *path, const void *data, size_t n)
{
    int rc = check_output_path(what, path);
    if (rc) return rc;
    /* the temporary file: ".<name>.tmp.<pid>.<k>" in the target's folder, so rename stays on one file system */
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0, cap = strlen(path) + 64;
    char *tmp = xrealloc(NULL, cap);
    int fd = -1;
    for (int k = 0; k < 100 && fd < 0; k++) {
        snprintf(tmp, cap, "%.*s.%s.tmp.%ld.%d", (int)dlen, path, path + dlen, (long)getpid(), k);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return die(e == ENOENT || e == ENOTDIR ? EX_USAGE : EX_UNAVAILABLE, "%s %s: cannot create a file beside it: %s",
                   what, path, strerror(e));
    }
    const char *p = data;
    size_t left = n;
    int e = 0;
    while (left && !e) {
        ssize_t k = write(fd, p, left);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) e = errno;
        else {
            p += k;
            left -= (size_t)k;
        }
    }
    if (!e && fsync(fd) != 0) e = errno;
    if (close(fd) != 0 && !e) e = errno;
    if (e) {
        unlink(tmp);
        free(tmp);
        return die(EX_UNAVAILABLE, "writing %s %s failed: %s", what, path, strerror(e));
    }
    if ((rc = check_output_path(what, path)) != EX_OK) {   /* it may have changed while we wrote */
        unlink(tmp);
        free(tmp);
        return rc;
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        free(tmp);
        return die(EX_UNAVAILABLE, "%s %s: cannot replace it: %s", what, path, strerror(e));
    }
    free(tmp);
    return EX_OK;
}

int write_all_logits(const char *path, const float *x, size_t n_floats)
{
    if (!bu_host_is_little_endian()) return die(EX_UNSUPPORTED, "--all-logits writes little-endian; this host is not");
    return write_output_file("--all-logits", path, x, n_floats * sizeof(float));
}
