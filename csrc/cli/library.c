/* The functions bringup-run takes from libmodel.so: the runtime's bu_api table (ABI-checked) and
 * the tokenizer's and sampler's exported functions. */
#include "library.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int file_kind(const char *path, const char **what)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        *what = strerror(errno);
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    mode_t m = st.st_mode;
    *what = S_ISREG(m) ? "a regular file" : S_ISDIR(m) ? "a folder" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
            : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "a special file";
    return !S_ISREG(m);
}

int exit_for_status(int s)
{
    switch (s) {
    case BU_RT_ERR_ARG: case BU_RT_ERR_CONTEXT: return EX_USAGE;
    case BU_RT_ERR_FORMAT: case BU_RT_ERR_INTEGRITY: case BU_RT_ERR_WRONG_MODEL: return EX_INTEGRITY;
    case BU_RT_ERR_IO: case BU_RT_ERR_NOMEM: return EX_UNAVAILABLE;
    default: return EX_INTERNAL;
    }
}

int load_lib(const char *path, lib_t *L)
{
    /* dlopen searches the path as given; a bare name would search the system, so require a '/'. */
    char buf[4096];
    if (!strchr(path, '/')) {
        snprintf(buf, sizeof buf, "./%s", path);
        path = buf;
    }
    /* dlopen of a FIFO blocks forever and of a device reads without end: only a regular file is
     * loaded (checked on an O_NONBLOCK descriptor, then dlopen'ed by the same path) */
    const char *kind;
    if (file_kind(path, &kind) == 1) return die(EX_USAGE, "model library %s is %s, not a regular file", path, kind);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return die(EX_UNAVAILABLE, "cannot load model library %s: %s", path, dlerror());
    const bu_api *(*get)(void) = (const bu_api *(*)(void))dlsym(h, "bu_api_get");
    if (!get) return die(EX_UNAVAILABLE, "%s is not a bringup model library (no bu_api_get)", path);
    L->rt = get();
    if (L->rt->abi_version != BU_RT_ABI_VERSION || L->rt->struct_size != (int32_t)sizeof(bu_api))
        return die(EX_UNAVAILABLE, "%s has runtime ABI %d, this CLI speaks %d: rebuild both with `bringup build`",
                   path, L->rt->abi_version, BU_RT_ABI_VERSION);
    /* the sampler's parameters are a struct passed by pointer: a library built from other sources
     * would read them with another layout, so its version must be ours */
    int32_t (*smp_abi)(void);
    *(void **)(&smp_abi) = dlsym(h, "bu_sampler_abi_version");
    if (!smp_abi || smp_abi() != BU_SAMPLER_ABI_VERSION)
        return die(EX_UNAVAILABLE, "%s has sampler ABI %d, this CLI speaks %d: rebuild both with `bringup build`", path,
                   smp_abi ? smp_abi() : 1, BU_SAMPLER_ABI_VERSION);
#define SYM(field, name)                                                                   \
    do {                                                                                   \
        *(void **)(&L->field) = dlsym(h, name);                                            \
        if (!L->field) return die(EX_UNAVAILABLE, "%s does not export %s", path, name);    \
    } while (0)
    SYM(tok_load, "bu_tok_load");
    SYM(tok_free, "bu_tok_free");
    SYM(tok_encode, "bu_tok_encode");
    SYM(tok_decode, "bu_tok_decode");
    SYM(tok_is_eog, "bu_tok_is_eog");
    SYM(tok_n_vocab, "bu_tok_n_vocab");
    SYM(sampler_new, "bu_sampler_new");
    SYM(sampler_free, "bu_sampler_free");
    SYM(sampler_sample, "bu_sampler_sample");
    SYM(isa_name, "bu_isa_name");
    SYM(isa_report, "bu_isa_report");
    SYM(sampler_accept, "bu_sampler_accept");
    SYM(sampler_reset, "bu_sampler_reset");
    SYM(sha256_impl, "bu_sha256_impl");
#undef SYM
    return EX_OK;
}

/* ---------------- growable buffers (every length handled, nothing truncated) ---------------- */
