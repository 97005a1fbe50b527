/* line_edit.h (bringup-run): The line editor of the chat loop on a terminal: history, arrows, Ctrl-A/E
 * (line_edit.c). */
#ifndef BU_CLI_LINE_EDIT_H
#define BU_CLI_LINE_EDIT_H

#include "util.h"
#include <signal.h>

enum { LE_LINE, LE_EOF, LE_INTERRUPT, LE_TOOLONG };
typedef struct {
    size_t max;       /* bytes a turn may hold (s->prompt_cap); past it the line is read to its end,
                       * not kept, and LE_TOOLONG returned; 0: no cap */
    char **hist;      /* oldest first */
    size_t n_hist;
    int raw;          /* 1: stdin and stderr are a terminal (not TERM=dumb): edit in raw mode */
    volatile sig_atomic_t *interrupt;  /* set by a SIGINT handler: a waiting read returns LE_INTERRUPT */
} ledit_t;
#define LE_HISTORY_MAX 500   /* lines kept; the oldest is dropped beyond */

/* Whether to edit (raw mode) or read plain lines; no terminal state is touched yet. interrupt:
 * the flag a SIGINT handler sets (or NULL). */
void le_init(ledit_t *e, volatile sig_atomic_t *interrupt);
/* One line (without its newline; NUL bytes kept, n counts them) appended to out: LE_LINE, LE_EOF (end of
 * input on an empty line), LE_INTERRUPT (Ctrl-C at the prompt; or SIGINT while reading) or
 * LE_TOOLONG (out would pass e->max bytes: the rest of the line was read and dropped). A line
 * read is added to the history (unless it holds a NUL). */
int le_read(ledit_t *e, const char *prompt, bu_str *out);
void le_free(ledit_t *e);

#endif /* BU_CLI_LINE_EDIT_H */
