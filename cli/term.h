/*  cli/term.h: `agenthold term NAME`: our terminal, in raw
    mode, on the API's terminal WebSocket (docs/cli.md).              */
#ifndef AH_CLI_TERM_H
#define AH_CLI_TERM_H

//  argv: what follows "term". config: --config's file or NULL. Returns
//  the shell's exit status (128+N when signal N ended it or us), 1 when
//  the terminal could not open or broke, 2 bad usage.
int ah_cli_term (int argc, char **argv, const char *config);

//  `agenthold terms NAME [--json]`: the agent's terminals that last.
#include "cli/cmd.h"
int ah_cli_terms (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co);

#endif
