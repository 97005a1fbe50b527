/* library.h (bringup-run): The functions taken from libmodel.so (dlopen, ABI-checked) and the exit code of
 * a runtime status (library.c). */
#ifndef BU_CLI_LIBRARY_H
#define BU_CLI_LIBRARY_H

#include "util.h"

#include "bu_runtime.h"
#include "bu_sampler.h"
#include "bu_tokenizer.h"

/* The exit code for a runtime status (docs/runtime.md's table). */
int exit_for_status(int status);

/* 0 when path names a regular file (a symlink to one is fine); 1 when it is something else, *what
 * saying what ("a FIFO", "a folder", "a character device", ...); -1 when it cannot be opened,
 * *what = strerror. Opened with O_NONBLOCK, so a FIFO cannot block the check; closed again. */
int file_kind(const char *path, const char **what);

typedef struct {
    const bu_api *rt;
    int (*tok_load)(const void *, size_t, bu_tok **, char *, size_t);
    void (*tok_free)(bu_tok *);
    int64_t (*tok_encode)(const bu_tok *, const char *, size_t, unsigned, int32_t *, size_t, char *, size_t);
    int64_t (*tok_decode)(const bu_tok *, int32_t, unsigned, char *, size_t);
    int (*tok_is_eog)(const bu_tok *, int32_t);
    int32_t (*tok_n_vocab)(const bu_tok *);
    bu_sampler *(*sampler_new)(const bu_sampler_params *, size_t, char *, size_t);
    void (*sampler_free)(bu_sampler *);
    int32_t (*sampler_sample)(bu_sampler *, const float *, char *, size_t);
    int (*sampler_accept)(bu_sampler *, int32_t);
    void (*sampler_reset)(bu_sampler *);
    const char *(*isa_name)(void); /* bu_isa_name: ISA level of the fast kernels (printed by --timing, --json) */
    size_t (*isa_report)(char *, size_t); /* bu_isa_report: each linear class's level and why (--json) */
    const char *(*sha256_impl)(void); /* bu_sha256_impl: "sha-ni" / "portable" */
} lib_t;

/* dlopen the model library at path and take the runtime table and the tokenizer and sampler
 * functions (checking the runtime's and the sampler's ABI versions). EX_OK, or EX_UNAVAILABLE
 * with a message printed. */
int load_lib(const char *path, lib_t *L);

#endif /* BU_CLI_LIBRARY_H */
