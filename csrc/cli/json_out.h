/* json_out.h (bringup-run): JSON strings and ids, the timing fields and the --timing report (json_out.c). */
#ifndef BU_CLI_JSON_OUT_H
#define BU_CLI_JSON_OUT_H

#include "util.h"

typedef struct {
    double prompt_ms, decode_ms, ttft_ms, sample_ms;
    long prompt_tokens, decode_runs, sample_runs;
    double start_ms;         /* now_ms() when main started */
    double open_ms;          /* the runtime's open: mapping, header checks, the payload SHA-256 when verified */
    double load_ms;          /* start to ready for the prompt: options, library, open, tokenizer, chat format, sampler */
    double first_token_ms;   /* start to the first generated token (0: none was generated) */
    int verified;            /* the payload SHA-256 was checked in open */
    const char *sha256_impl; /* the runtime's SHA-256 path ("sha-ni", "portable", "unknown": an older library) */
} timing_t;

/* n bytes as a JSON string; a byte that is not valid UTF-8 becomes U+FFFD and sets *replaced. */
void json_str(FILE *f, const char *s, size_t n, int *replaced);
void json_ids(FILE *f, const int32_t *v, size_t n);
/* The "timing" object's fields (no braces), sep between them; total_ms is start to now. */
void timing_fields(FILE *f, const timing_t *t, const char *sep);
/* The human-readable --timing report (perf_report follows it). */
void timing_report(FILE *f, const timing_t *t, size_t model_bytes);
/* --timing in llama.cpp's llama_perf shape: sampling, load (open, weights check, first token),
 * prompt eval, eval and total time (start to now). */
void perf_report(FILE *f, const timing_t *t);

#endif /* BU_CLI_JSON_OUT_H */
