/*  cli/tap.h: `agenthold tap`: subscribe to the bus tap (common/bus.h)
    and print each message as one JSON line (common/msg.h).           */
#ifndef AH_CLI_TAP_H
#define AH_CLI_TAP_H

//  Subscribe at endpoint; print messages whose type matches glob (fnmatch,
//  NULL = all); stop after count messages (0 = until SIGINT/SIGTERM).
//  Returns the exit status: 0, or 1 when the endpoint is unusable.
int ah_cli_tap (const char *endpoint, const char *glob, long count);

#endif
