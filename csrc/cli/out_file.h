/* out_file.h (bringup-run): Output files: only regular files, written atomically (out_file.c). */
#ifndef BU_CLI_OUT_FILE_H
#define BU_CLI_OUT_FILE_H

#include "util.h"

/* Check that path can be created or replaced as a regular file: not a directory, FIFO, device,
 * socket or symbolic link, in an existing folder. EX_OK, or EX_USAGE with a message (what: the
 * option, for the message). */
int check_output_path(const char *what, const char *path);
/* Write n bytes to path: a temporary file in the same folder, fsync, rename over path (checked
 * again just before). path is then complete or as it was. EX_OK or an exit code (message printed). */
int write_output_file(const char *what, const char *path, const void *data, size_t n);
/* --all-logits: n_floats little-endian float32. */
int write_all_logits(const char *path, const float *x, size_t n_floats);

#endif /* BU_CLI_OUT_FILE_H */
