/*  cli/doctor.h: `agenthold doctor`: checks the whole installation the
    configuration describes and says what to do about each problem
    (docs/cli.md, "doctor").                                            */
#ifndef AH_CLI_DOCTOR_H
#define AH_CLI_DOCTOR_H

#include <stdbool.h>

//  config_path: the configuration file (NULL: the usual sources). json:
//  one JSON object on stdout instead of lines. Returns the exit status:
//  0 only when every check passed, 1 otherwise.
int ah_cli_doctor (const char *config_path, bool json);

#endif
