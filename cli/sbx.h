/*  cli/sbx.h: the sandbox commands of the agenthold CLI:
    `agenthold exec NAME -- CMD...` and `agenthold fs ls|get|put|mkdir|rm
    NAME PATH [LOCAL]` over the REST API (docs/cli.md).               */
#ifndef AH_CLI_SBX_H
#define AH_CLI_SBX_H

//  argv: what follows the command's name. config: --config's file or
//  NULL. Return the exit status: exec the command's (128+N when signal N
//  ended it, 124 when it timed out), 1 on an error (said why on stderr),
//  2 bad usage.
int ah_cli_exec (int argc, char **argv, const char *config);
int ah_cli_fs (int argc, char **argv, const char *config);

#endif
