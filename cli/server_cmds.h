/*  cli/server_cmds.h: the commands that need the server's own code
    (serve, hostd, doctor, routes, tap), marked `server` in the command
    table of cli/main.c.

    The agenthold command is two binaries so that a client command loads
    only what a client needs (a process start with the server's libraries
    costs more than a stop of a sandbox takes; bench/cli):
      - agenthold: the REST client commands. Its ah_cli_server_cmd
        (cli/server_exec.c) execs agenthold-server next to it (the same
        directory as /proc/self/exe) with the same command and arguments:
        the process, its pid and its signals stay the same.
      - agenthold-server: every command; its ah_cli_server_cmd
        (cli/server_cmds.c) runs them.                                  */
#ifndef AH_CLI_SERVER_CMDS_H
#define AH_CLI_SERVER_CMDS_H

#include "cli/cmd.h"

ah_cmd_fn ah_cli_server_cmd;

#endif
