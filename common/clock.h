/*  common/clock.h: the monotonic clock in milliseconds (part of ah_log:
    no dependencies, so the agenthold command links it without czmq).  */
#ifndef AH_CLOCK_H
#define AH_CLOCK_H

#include <stdint.h>

//  Milliseconds on CLOCK_MONOTONIC (only differences mean anything).
int64_t ah_clock_ms (void);
//  Sleep ms milliseconds (resumed after a signal).
void ah_clock_sleep_ms (int64_t ms);

#endif
