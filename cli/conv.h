/*  cli/conv.h: `agenthold prompt NAME [--conversation ID] TEXT...` and
    `agenthold conversations NAME` (docs/cli.md "Conversations").      */
#ifndef AH_CLI_CONV_H
#define AH_CLI_CONV_H

#include "cli/cmd.h"

int ah_cli_prompt (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co);
int ah_cli_conversations (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co);

#endif
