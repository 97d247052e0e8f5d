/*  common/bounds.c: the table of numbers (see bounds.h).               */
#include "common/bounds.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TWO_53  9007199254740992.0      //  past this a double skips whole numbers

static const ah_bound_t s_bounds [] = {
    //  A sandbox: what a create or an update asks for, and the
    //  configuration's defaults and maxima (sandbox.*). Docker takes no
    //  less than 0.01 CPU and 6 MiB; a pids limit of 0 is none.
    { "cpus",                 false, 0.01, 1024, 0.01, NULL, "CPUs" },
    { "memory_mb",            true,  6, 1099511627776.0, 1, NULL, "MiB" },
    { "idle_minutes",         false, 0.01, 525600, 0.01, NULL, "minutes" },
    { "pids_limit",           true,  1, 4194304, 1, NULL, "processes" },
    //  A tenant's own limits (PATCH /api/v1/tenants/{tenant}).
    { "max_sandboxes",        true,  1, 100000, 1, "no limit at all", "sandboxes" },
    { "max_running",          true,  1, 100000, 1, "no limit at all", "sandboxes" },
    { "max_cpus",             false, 0.01, 1048576, 0.01, "no limit", "CPUs" },
    { "max_memory_mb",        true,  6, 1125899906842624.0, 1, "no limit", "MiB" },
    //  The server's limits (limits.*, PUT /api/v1/policy).
    { "tenant_max_sandboxes", true,  1, 100000, 1, "no limit", "sandboxes" },
    { "pool_max_sandboxes",   true,  1, 100000, 1, "no limit", "sandboxes" },
    { "tenant_max_running",   true,  1, 100000, 1, "no limit", "sandboxes" },
    { "pool_max_running",     true,  1, 100000, 1, "no limit", "sandboxes" },
    //  A turn's lease, an exec's timeout, a token's lifetime in seconds.
    { "lease_ms",             true,  1000, 3600000, 1, NULL, "ms" },
    { "timeout",              false, 0.001, 604800, 0.001, NULL, "seconds" },
    //  The ceiling of an exec's timeout (sandbox.max_exec_timeout, PUT
    //  /api/v1/policy): the same range.
    { "max_exec_timeout",     false, 0.001, 604800, 0.001, NULL, "seconds" },
    { "expires",              true,  1, 315360000, 1, NULL, "seconds" },
    //  A terminal's size (POST /api/v1/agents/{agent}/terminals).
    { "cols",                 true,  1, 1000, 1, NULL, "columns" },
    { "rows",                 true,  1, 1000, 1, NULL, "rows" },
    //  The configuration's durations (seconds; "500ms" is 0.5) and the
    //  audit trail's retention: no denormal that removes a home at once,
    //  no interval so long that a check never comes.
    { "container_ttl",        false, 1, 3153600000.0, 0.001, "never", "seconds" },
    { "workspace_ttl",        false, 1, 3153600000.0, 0.001, "never", "seconds" },
    { "check_interval",       false, 0.1, 86400, 0.001, NULL, "seconds" },
    { "destroy_retry",        false, 0.1, 31536000, 0.001, NULL, "seconds" },
    { "terminal_bytes_interval", false, 0.1, 86400, 0.001, "at close only", "seconds" },
    { "permission_timeout",   false, 0.001, 3600, 0.001, "at once (lua/permission.lua decides)", "seconds" },
    { "retention_days",       false, 0.01, 36500, 0.01, NULL, "days" },
};
#define BOUND_COUNT (sizeof s_bounds / sizeof s_bounds [0])

const ah_bound_t *ah_bound (const char *name)
{
    for (size_t i = 0; name && i < BOUND_COUNT; i++)
        if (strcmp (s_bounds [i].name, name) == 0)
            return &s_bounds [i];
    return NULL;
}

const ah_bound_t *ah_bound_at (size_t index)
{
    return index < BOUND_COUNT ? &s_bounds [index] : NULL;
}

const char *ah_bound_number (double v, char *buf, size_t size)
{
    for (int digits = 1; digits <= 17; digits++) {
        snprintf (buf, size, "%.*g", digits, v);
        if (strtod (buf, NULL) == v)
            break;
    }
    return buf;
}

const char *ah_bound_rule (const ah_bound_t *b, char *buf, size_t size)
{
    char zero [80] = "", step [40] = "";
    if (b->zero)
        snprintf (zero, sizeof zero, "0 (%s) or ", b->zero);
    if (!b->whole)
        snprintf (step, sizeof step, " in steps of %.15g", b->step);
    snprintf (buf, size, "%s%s from %.15g to %.15g %s%s", zero, b->whole ? "a whole number" : "a number",
              b->min, b->max, b->unit, step);
    return buf;
}

static bool s_good (const ah_bound_t *b, double v)
{
    if (!isfinite (v) || signbit (v))
        return false;               //  NaN, infinities, anything negative, and -0
    if (v == 0)
        return b->zero || b->min == 0;
    if (v < b->min || v > b->max)
        return false;               //  denormals and 1e308 too: no table range reaches them
    if (b->whole)
        return v == floor (v) && v <= TWO_53;
    //  A multiple of the step, as far as a double tells (0.07 / 0.01 is
    //  7.000000000000001).
    double q = v / b->step;
    return fabs (q - nearbyint (q)) <= 1e-6;
}

const char *ah_bound_check (const ah_bound_t *b, double v, char *buf, size_t size)
{
    if (s_good (b, v))
        return NULL;
    char rule [200], got [40];
    snprintf (buf, size, "field '%s' must be %s (got %s)", b->name, ah_bound_rule (b, rule, sizeof rule),
              ah_bound_number (v, got, sizeof got));
    return buf;
}

const char *ah_bound_check_named (const char *name, double v, char *buf, size_t size)
{
    const ah_bound_t *b = ah_bound (name);
    return b ? ah_bound_check (b, v, buf, size) : NULL;
}
