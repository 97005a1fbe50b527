/* modes.h (bringup-run): The ways a run goes: one answer (one_shot.c), the chat loop
 * (interactive.c), or the HTTP server (bu_server.c). */
#ifndef BU_CLI_MODES_H
#define BU_CLI_MODES_H

#include "util.h"

#include "generate.h"

int one_shot(sess_t *s);
int interactive(sess_t *s);
/* --server (bu_server.c, bu_server.h): serve until SIGTERM / SIGINT; EX_OK then. */
int server_run(sess_t *s);

#endif /* BU_CLI_MODES_H */
