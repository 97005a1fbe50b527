/* model_files.h (bringup-run): -m DIR (which library and weights), -f FILE, the chat format's recorded
 * source (model_files.c). */
#ifndef BU_CLI_MODEL_FILES_H
#define BU_CLI_MODEL_FILES_H

#include "util.h"

#include "args.h"

/* -m DIR: set o->lib, o->weights, o->found_by (lookup order in docs/runtime.md). EX_OK, or an exit
 * code with a message naming every path tried. Without -m: found_by = "given". */
int resolve_model(opts_t *o);
/* -f FILE: read the prompt into o->prompt (a regular file or a pipe, at most 64 MiB, no NUL). */
int read_prompt_file(opts_t *o);
/* Where the chat format in the weights came from, as weights_manifest.json beside the weights
 * records it (the convert stage's "reason": *recorded = 1), or a sentence saying why that is not
 * known (*recorded = 0). Owned by the caller; printed with say() (escaped). */
char *chat_format_source(const char *weights, int *recorded);

#endif /* BU_CLI_MODEL_FILES_H */
