/*  policy/values.h: the values PUT /api/v1/policy changes at run time
    (docs/api.md "PUT /api/v1/policy", docs/policy.md "Values").

    Each one is a configuration key an admin may change while the server
    runs: the caps lua/limits.lua reads, the default idle timeout, the
    lifetimes of a stopped container and of an unused home, and the
    ceiling of a command's timeout. A value set is a row of
    policy_values (docs/schema.md), so it outlives a restart; no row is
    the configuration's value. Each value's range is its bound of the same
    name (common/bounds.h).

    Whoever decides with a value reads it here at each decision, from its
    own SQLite connection (the API for exec, lifecycle for admissions and
    lifetimes), so a change is in force at the next one. The default idle
    timeout is written into the agents that follow it by lifecycle
    (POLICY_VALUES, docs/messages.md), which tells the sleeper.        */
#ifndef AH_POLICY_VALUES_H
#define AH_POLICY_VALUES_H

#include "config/config.h"
#include "store/store.h"
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *key;                //  the body's field, the row's key and its bound's name
    const char *config;             //  the configuration key it overrides
} ah_policy_value_t;

//  The index-th value, NULL past the last.
const ah_policy_value_t *ah_policy_value_at (size_t index);
//  The index of key, -1 when it is not one.
int ah_policy_value_index (const char *key);
//  The configuration's value of the index-th value.
double ah_policy_value_config (const ah_config_t *config, size_t index);
//  The value of key in force: its row in policy_values, else the
//  configuration's (also when the row cannot be read, which is logged).
//  key must be one of the table's.
double ah_policy_value (ah_store_t *store, const ah_config_t *config, const char *key);

#endif
