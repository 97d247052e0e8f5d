/*  cli/admin.h: the commands of tenants, tokens, sessions and policies:
    `agenthold tenant create|ls|show|set|rm`, `agenthold token
    create|ls|revoke`, `agenthold session open|ls|show|close` and
    `agenthold policy status|reload|set` (docs/cli.md, docs/sessions.md).
    Tenants, tokens and policy changes need an admin's token.          */
#ifndef AH_CLI_ADMIN_H
#define AH_CLI_ADMIN_H

#include "cli/cmd.h"

//  argv: what follows the command's name (the subcommand first). Return
//  the exit status (cli/cmd.h).
int ah_cli_tenant (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co);
int ah_cli_token (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co);
int ah_cli_session (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co);
int ah_cli_policy (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co);

#endif
