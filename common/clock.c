/*  common/clock.c: see clock.h. */
#include "common/clock.h"

#include <errno.h>
#include <time.h>

int64_t ah_clock_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ah_clock_sleep_ms (int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000 };
    while (nanosleep (&ts, &ts) && errno == EINTR)
        ;
}
