/* modes.h (bringup-run): The two ways a run goes: one answer (one_shot.c) or the chat loop
 * (interactive.c). */
#ifndef BU_CLI_MODES_H
#define BU_CLI_MODES_H

#include "util.h"

#include "generate.h"

int one_shot(sess_t *s);
int interactive(sess_t *s);

#endif /* BU_CLI_MODES_H */
