/* dump_hidden.h (bringup-run): The --dump-hidden folder: every prefill op's output, for X-ray
 * (dump_hidden.c). */
#ifndef BU_CLI_DUMP_HIDDEN_H
#define BU_CLI_DUMP_HIDDEN_H

#include "util.h"

#include "bu_runtime.h"

typedef struct {
    char *id;            /* IR op id, validated as a file name stem */
    int32_t dtype;
    int64_t row_elems;
    int64_t rows;        /* rows written so far = the next expected position */
    int created;         /* the .f32 file exists in the staging folder */
} dump_op;

typedef struct {
    char *stage;         /* staging folder, renamed onto final at the end */
    char *final;         /* DIR without trailing slashes */
    dump_op *ops;        /* by prefill op index */
    int32_t n_ops;
    int32_t *order;      /* op indices in first-observed (execution) order */
    int32_t n_order;
    char msg[768];       /* the first error */
} dump_t;

/* Check DIR (absent or empty) and create its staging folder. EX_OK or an exit code (message printed). */
int dump_begin(dump_t *d, const char *dir_arg);
/* The observer (bu_observer_fn) that appends each prefill observation to its op's file. */
int dump_observe(void *ctx, const bu_observation *o);
/* After a successful prefill of T tokens: check coverage, write the manifest, publish the folder. */
int dump_finish(dump_t *d, int64_t T);
/* Remove the staging folder and what was written into it. */
void dump_discard(dump_t *d);
void dump_free(dump_t *d);

#endif /* BU_CLI_DUMP_HIDDEN_H */
