/*  cli/turn.h: `agenthold turn NAME [--lease S] -- CMD...`:
    hold a turn on an agent while a local command runs, and the "sleeps
    in" column of `agenthold ls`.                                       */
#ifndef AH_CLI_TURN_H
#define AH_CLI_TURN_H

//  argv: what follows "turn". config: --config's file or NULL. Returns
//  the exit status: CMD's (128+N when a signal N ended it), 1 when the
//  turn could not start, 2 bad usage.
int ah_cli_turn (int argc, char **argv, const char *config);

//  "in 4m", "in 35s", "in 1h5m", "now" for an RFC 3339 sleeps_at; "-"
//  for NULL or an unreadable time. Caller frees.
char *ah_cli_sleeps_in (const char *sleeps_at);

#endif
