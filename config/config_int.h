/*  config/config_int.h: what config.c and check.c share, nobody else.  */
#ifndef AH_CONFIG_INT_H
#define AH_CONFIG_INT_H

#include "config/config.h"

//  Every check of a loaded configuration (check.c): NULL when it holds,
//  else one sentence naming the key (the caller's to free).
char *ah_config_check (const ah_config_t *self);

#endif
