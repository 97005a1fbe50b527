/* --all-logits PATH: the teacher-forced logits of every prompt position as raw little-endian float32
 * [n_prompt_tokens, n_vocab], written atomically (a temporary file beside PATH, fsync, rename),
 * so PATH is complete or absent. */
#include "bringup_run.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int write_all_logits(const char *path, const float *x, size_t n_floats)
{
    if (!bu_host_is_little_endian()) return die(EX_UNSUPPORTED, "--all-logits writes little-endian; this host is not");
    size_t plen = strlen(path);
    char *tmp = xrealloc(NULL, plen + 32);
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        free(tmp);
        return die(EX_USAGE, "cannot write %s: %s", path, strerror(errno));
    }
    size_t w = fwrite(x, sizeof(float), n_floats, f);
    int bad = w != n_floats || fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        free(tmp);
        return die(EX_UNAVAILABLE, "writing %s failed: %s", path, strerror(e));
    }
    free(tmp);
    return EX_OK;
}
