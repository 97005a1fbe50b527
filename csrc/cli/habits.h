/* habits.h (bringup-run): llama-cli's habits: -e, -r, -b, --mlock, the prompt's echo, the notes
 * (habits.c). */
#ifndef BU_CLI_HABITS_H
#define BU_CLI_HABITS_H

#include "util.h"

#include "args.h"
#include "generate.h"

/* -e: the escapes of the prompt, --system and -r processed (copies owned by o). EX_OK or EX_USAGE. */
int apply_escapes(opts_t *o);
/* One note each on stderr for -ngl (CPU only), --no-mmap, -cnv with a prompt. */
void habit_notes(const opts_t *o);
/* -b with a value the plan cannot honour as given: say what runs. */
void batch_note(const sess_t *s);
/* --mlock: mlock the weights mapping. EX_OK, or EX_UNAVAILABLE with RLIMIT_MEMLOCK in the message. */
int lock_weights(sess_t *s);
/* The runtime's prefill in calls of at most -b tokens (all at once without -b). A runtime status. */
int prefill_batched(sess_t *s, const int32_t *ids, int32_t n);
/* The prompt's echo on stdout (--color: yellow on a terminal). */
void echo_prompt(const sess_t *s, const char *text);
/* 1 when one of the -r texts occurs in text[from..) ending past byte before (the newest piece). */
int reverse_prompt_seen(const sess_t *s, const bu_str *text, size_t from, size_t before);

#endif /* BU_CLI_HABITS_H */
