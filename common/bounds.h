/*  common/bounds.h: the range and step of every number agenthold takes
    from a client or a file, in one table. The API (its body checks,
    actors/api/route.c), lifecycle (what a create or an update asks for,
    and what lua/limits.lua answers), the configuration and the drivers
    all check numbers here, so no value one of them takes becomes 0, a
    denormal or "no limit" in another (a unit conversion included: 0.01
    CPU is Docker's floor, 10^7 NanoCpus).

    A number is good when it is finite, not negative zero, within
    [min, max] (or exactly 0 where 0 is allowed and means something
    stated: "no limit", "never"), a whole number where the field is
    whole, and a multiple of its step.

    docs/api.md ("Numbers") states the same table for clients.          */
#ifndef AH_BOUNDS_H
#define AH_BOUNDS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *name;               //  the field as clients name it ("cpus")
    bool whole;                     //  whole numbers only (JSON: no fraction, no exponent past 2^53)
    double min, max;
    double step;                    //  values are multiples of it (whole: 1)
    const char *zero;               //  NULL: 0 is refused (unless min is 0); else what 0 means
    const char *unit;               //  for a person: "CPUs", "MiB", "minutes", ...
} ah_bound_t;

//  The bound of a field, NULL when it has none.
const ah_bound_t *ah_bound (const char *name);
//  The index-th bound, NULL past the last (for tests and docs).
const ah_bound_t *ah_bound_at (size_t index);

//  NULL when v is good for b; else why in buf (a sentence naming the
//  field, its range and its step: "field 'cpus' must be from 0.01 to 1024
//  CPUs in steps of 0.01 (got 1e-12)"), returned.
const char *ah_bound_check (const ah_bound_t *b, double v, char *buf, size_t size);
//  The same for a field by name (a field without a bound: NULL).
const char *ah_bound_check_named (const char *name, double v, char *buf, size_t size);
//  v as its shortest decimal that reads back as v ("0.015", "1e-12").
const char *ah_bound_number (double v, char *buf, size_t size);
//  The rule of b for a person: "from 0.01 to 1024 CPUs in steps of 0.01".
const char *ah_bound_rule (const ah_bound_t *b, char *buf, size_t size);

#endif
