/*  cli/audit.h: the audit trail and the destroys still owed:
    `agenthold log` (filtered, paged) and `agenthold tombstones
    [forget ID]` (docs/cli.md).                                        */
#ifndef AH_CLI_AUDIT_H
#define AH_CLI_AUDIT_H

#include "cli/cmd.h"

//  argv: what follows the command's name. Return the exit status.
int ah_cli_log (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co);
int ah_cli_tombstones (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co);

#endif
