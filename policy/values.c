/*  policy/values.c: the values PUT /api/v1/policy changes (values.h). */
#include "policy/values.h"
#include "common/bounds.h"
#include "common/log.h"

#include <math.h>
#include <string.h>

#define AREA "policy"

static const ah_policy_value_t s_values [] = {
    { "tenant_max_sandboxes", "limits.tenant_max_sandboxes" },
    { "pool_max_sandboxes",   "limits.pool_max_sandboxes" },
    { "tenant_max_running",   "limits.tenant_max_running" },
    { "pool_max_running",     "limits.pool_max_running" },
    { "idle_minutes",         "sandbox.idle_minutes" },
    { "container_ttl",        "sandbox.container_ttl" },
    { "workspace_ttl",        "sandbox.workspace_ttl" },
    { "max_exec_timeout",     "sandbox.max_exec_timeout" },
};
#define VALUE_COUNT (sizeof s_values / sizeof s_values [0])

const ah_policy_value_t *ah_policy_value_at (size_t index)
{
    return index < VALUE_COUNT ? &s_values [index] : NULL;
}

int ah_policy_value_index (const char *key)
{
    for (size_t i = 0; key && i < VALUE_COUNT; i++)
        if (strcmp (s_values [i].key, key) == 0)
            return (int) i;
    return -1;
}

double ah_policy_value_config (const ah_config_t *c, size_t index)
{
    const double v [] = { (double) c->tenant_max_sandboxes, (double) c->pool_max_sandboxes,
                          (double) c->tenant_max_running, (double) c->pool_max_running,
                          c->idle_minutes, c->container_ttl_s, c->workspace_ttl_s, c->max_exec_timeout_s };
    _Static_assert (sizeof v / sizeof v [0] == VALUE_COUNT, "one configuration value per policy value");
    return index < VALUE_COUNT ? v [index] : NAN;
}

double ah_policy_value (ah_store_t *store, const ah_config_t *config, const char *key)
{
    int i = ah_policy_value_index (key);
    if (i < 0)
        return NAN;
    double v = ah_policy_value_config (config, (size_t) i);
    sqlite3_stmt *st = ah_store_prepare (store, "SELECT value FROM policy_values WHERE key = :key");
    int rc = st && !ah_store_bind_text (st, ":key", key) ? ah_store_step (store, st) : SQLITE_ERROR;
    if (rc == SQLITE_ROW) {
        //  The API checked it against its bound; a row written by hand
        //  that is off it is not taken.
        double row = sqlite3_column_double (st, 0);
        char why [300];
        if (ah_bound_check_named (key, row, why, sizeof why))
            ah_warn (AREA, "policy_values: %s ignored, the configuration's %s stays", why, s_values [i].config);
        else
            v = row;
    }
    else
    if (rc != SQLITE_DONE)
        ah_warn (AREA, "cannot read policy_values for %s: the configuration's value stays", key);
    if (st)
        sqlite3_reset (st);
    return v;
}
