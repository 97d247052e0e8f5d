/*  actors/lifecycle_admit.c: admission for the lifecycle actor (see
    lifecycle_int.h): the fields a create or an update asks for, checked
    for type and grammar (common/ident.h), then lua/limits.lua's admit
    (through policy/) and the tenant's own limits.                     */
#include "actors/lifecycle_int.h"
#include "actors/desired.h"
#include "common/bounds.h"
#include "common/log.h"

#include <math.h>
#include <string.h>

int ah_lc_opt_str (const ah_msg_t *msg, const char *key, const char **out)
{
    if (!ah_msg_has (msg, key) || ah_msg_is_nil (msg, key))
        return 0;
    const char *v = ah_msg_str (msg, key);
    if (!v)
        return -1;
    *out = v;
    return 1;
}

int ah_lc_ident (self_t *self, const ah_msg_t *msg, ah_ident_t kind, const char *value)
{
    const char *why = ah_ident_check (kind, value);
    if (!why)
        return 0;
    ah_actor_reply_error (self->actor, msg, 400, "%s '%.300s' %s", ah_ident_what (kind),
                          value ? value : "", why);
    return -1;
}

int ah_lc_desired (self_t *self, const ah_msg_t *msg, desired_t *d)
{
    memset (d, 0, sizeof *d);
    char why [1200];
    if (ah_desired_check (msg, why, sizeof why)) {
        ah_actor_reply_error (self->actor, msg, 400, "%s", why);
        return -1;
    }
    //  Checked: each is absent or good.
    const char *image = NULL, *runtime = NULL;
    if ((d->has_image = ah_lc_opt_str (msg, "image", &image) > 0))
        snprintf (d->image, sizeof d->image, "%s", image);
    if ((d->has_cpus = ah_msg_has (msg, "cpus") && !ah_msg_is_nil (msg, "cpus")))
        d->cpus = ah_msg_double (msg, "cpus", 0);
    if ((d->has_memory = ah_msg_has (msg, "memory_mb") && !ah_msg_is_nil (msg, "memory_mb")))
        d->memory_mb = (int64_t) ah_msg_double (msg, "memory_mb", 0);
    if ((d->has_idle = ah_msg_has (msg, "idle_minutes") && !ah_msg_is_nil (msg, "idle_minutes")))
        d->idle_minutes = ah_msg_double (msg, "idle_minutes", 0);
    if (ah_lc_opt_str (msg, "runtime", &runtime) > 0) {
        const ah_runtime_t *rt = ah_catalog_find (self->catalog, runtime);
        if (!rt) {
            ah_actor_reply_error (self->actor, msg, 400, "runtime: no runtime '%s' in the catalog "
                                  "(agenthold runtimes lists them)", runtime);
            return -1;
        }
        ah_lc_runtime_apply (d, rt);
    }
    return 0;
}

void ah_lc_runtime_apply (desired_t *d, const ah_runtime_t *rt)
{
    d->has_runtime = true;
    snprintf (d->runtime, sizeof d->runtime, "%s", rt->alias);
    d->has_image = true;
    snprintf (d->image, sizeof d->image, "%s", rt->image);
    if (!d->has_memory && rt->mem_limit_mb > 0) {
        d->has_memory = true;
        d->memory_mb = rt->mem_limit_mb;
    }
}

// --------------------------------------------------------------------------
//  Limits: lua/limits.lua's admit (tenant, request, usage, limits)

//  The tenant's record: its name and the limits an admin set on it
//  (absent: none set). 0 / -1.
static int s_tenant (self_t *self, const char *tenant, ah_msg_t *out)
{
    ah_msg_set_str (out, "name", tenant);
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT max_agents, max_running, max_cpus, max_memory_mb FROM tenants WHERE name = :tenant");
    if (!st || ah_store_bind_text (st, ":tenant", tenant))
        return -1;
    int rc = ah_store_step (self->store, st);
    if (rc == SQLITE_ROW) {
        static const char *keys [] = { "max_sandboxes", "max_running", "max_cpus", "max_memory_mb" };
        for (int c = 0; c < 4; c++)
            if (sqlite3_column_type (st, c) != SQLITE_NULL) {
                if (c == 2)
                    ah_msg_set_double (out, keys [c], sqlite3_column_double (st, c));
                else
                    ah_msg_set_int (out, keys [c], sqlite3_column_int64 (st, c));
            }
    }
    sqlite3_reset (st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

//  What the tenant holds, without `except` (the agent asking), and what
//  the pool holds: sandboxes (kept, in every state), those holding the
//  host (AH_LIFECYCLE_HOLDING_SQL), their cpus and memory. Warm
//  sandboxes count for nobody (sandbox.warm_pool_max bounds them). 0 / -1.
static int s_usage (self_t *self, const char *tenant, const char *except, ah_msg_t *out)
{
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT count(*), coalesce(sum(s.state IN " AH_LIFECYCLE_HOLDING_SQL "), 0),"
        " coalesce(sum(a.cpus), 0), coalesce(sum(a.memory_mb), 0),"
        " coalesce(sum(a.tenant = :tenant), 0),"
        " coalesce(sum(a.tenant = :tenant AND s.state IN " AH_LIFECYCLE_HOLDING_SQL "), 0),"
        " coalesce(sum(CASE WHEN a.tenant = :tenant THEN a.cpus END), 0),"
        " coalesce(sum(CASE WHEN a.tenant = :tenant THEN a.memory_mb END), 0)"
        " FROM agents a JOIN sandboxes s ON s.agent_id = a.id WHERE a.id <> :except AND a.pool IS NULL");
    if (!st || ah_store_bind_text (st, ":tenant", tenant) || ah_store_bind_text (st, ":except", except ? except : ""))
        return -1;
    int rc = ah_store_step (self->store, st);
    if (rc == SQLITE_ROW) {
        ah_msg_set_int (out, "sandboxes", sqlite3_column_int64 (st, 4));
        ah_msg_set_int (out, "running", sqlite3_column_int64 (st, 5));
        ah_msg_set_double (out, "cpus", sqlite3_column_double (st, 6));
        ah_msg_set_int (out, "memory_mb", sqlite3_column_int64 (st, 7));
        ah_msg_set_int (out, "pool_sandboxes", sqlite3_column_int64 (st, 0));
        ah_msg_set_int (out, "pool_running", sqlite3_column_int64 (st, 1));
        ah_msg_set_double (out, "pool_cpus", sqlite3_column_double (st, 2));
        ah_msg_set_int (out, "pool_memory_mb", sqlite3_column_int64 (st, 3));
    }
    sqlite3_reset (st);
    return rc == SQLITE_ROW ? 0 : -1;
}

//  The server's limits: the configuration, and the values PUT
//  /api/v1/policy changes as they are in force (policy/values.h). 0.
static int s_limits (self_t *self, ah_msg_t *out)
{
    const ah_config_t *c = self->config;
    ah_msg_set_str (out, "default_image", c->default_image);
    ah_msg_set_double (out, "default_cpus", c->default_cpus);
    ah_msg_set_int (out, "default_memory_mb", c->default_memory_mb);
    ah_msg_set_double (out, "max_cpus", c->max_cpus);
    ah_msg_set_int (out, "max_memory_mb", c->max_memory_mb);
    ah_msg_set_double (out, "default_idle_minutes", ah_policy_value (self->store, c, "idle_minutes"));
    static const char *caps [] = { "tenant_max_sandboxes", "pool_max_sandboxes", "tenant_max_running",
                                   "pool_max_running" };
    for (size_t i = 0; i < sizeof caps / sizeof caps [0]; i++)
        ah_msg_set_int (out, caps [i], (int64_t) ah_policy_value (self->store, c, caps [i]));
    return 0;
}

//  The agents that follow the default idle timeout (idle_default, those
//  whose create named none) take the one in force, and the sleeper hears
//  of each one moved: after PUT /api/v1/policy and at start (the
//  configuration may have changed meanwhile).
void ah_lc_idle_defaults (self_t *self)
{
    double v = ah_policy_value (self->store, self->config, "idle_minutes");
    zlist_t *ids = zlist_new ();
    zlist_autofree (ids);
    bool ok = ah_store_begin (self->store) == 0;
    sqlite3_stmt *st = ok ? ah_store_prepare (self->store,
        "SELECT id FROM agents WHERE idle_default = 1 AND idle_minutes <> :v") : NULL;
    ok = st && !ah_store_bind_double (st, ":v", v);
    int rc = SQLITE_ERROR;
    while (ok && (rc = ah_store_step (self->store, st)) == SQLITE_ROW)
        zlist_append (ids, (void *) sqlite3_column_text (st, 0));
    ok = ok && rc == SQLITE_DONE;
    if (st)
        sqlite3_reset (st);
    st = ok ? ah_store_prepare (self->store,
        "UPDATE agents SET idle_minutes = :v WHERE idle_default = 1 AND idle_minutes <> :v") : NULL;
    ok = st && !ah_store_bind_double (st, ":v", v) && ah_store_step (self->store, st) == SQLITE_DONE;
    if (st)
        sqlite3_reset (st);
    if (!ok || ah_store_commit (self->store)) {
        ah_store_rollback (self->store);
        ah_error (AREA, "cannot give the agents that follow it the default idle timeout of %.15g minutes", v);
    }
    else {
        if (zlist_size (ids))
            ah_info (AREA, "%zu agent(s) follow the default idle timeout: now %.15g minutes",
                     zlist_size (ids), v);
        for (const char *id = zlist_first (ids); id; id = zlist_next (ids))
            ah_lc_changed (self, id, -1, v);
    }
    zlist_destroy (&ids);
}

int ah_lc_admit (self_t *self, const char *op, const char *name, const char *tenant,
                 const char *except, const desired_t *asked, desired_t *out, char **why)
{
    *why = NULL;
    ah_msg_t *t = ah_msg_new ("TENANT"), *request = ah_msg_new ("ADMIT");
    ah_msg_t *usage = ah_msg_new ("USAGE"), *limits = ah_msg_new ("LIMITS");
    ah_msg_t *result = NULL;
    char *err = NULL;
    int rc = -1;
    ah_msg_set_str (request, "op", op);
    ah_msg_set_str (request, "name", name);
    if (asked->has_image)  ah_msg_set_str (request, "image", asked->image);
    if (asked->has_runtime) ah_msg_set_str (request, "runtime", asked->runtime);
    if (asked->has_cpus)   ah_msg_set_double (request, "cpus", asked->cpus);
    if (asked->has_memory) ah_msg_set_int (request, "memory_mb", asked->memory_mb);
    if (asked->has_idle)   ah_msg_set_double (request, "idle_minutes", asked->idle_minutes);
    if (!streq (op, "create")) {
        //  What the agent holds now, for a start (and an update's defaults).
        ah_msg_set_str (request, "current_image", out->image);
        ah_msg_set_double (request, "current_cpus", out->cpus);
        ah_msg_set_int (request, "current_memory_mb", out->memory_mb);
    }
    if (s_tenant (self, tenant, t) || s_usage (self, tenant, except, usage) || s_limits (self, limits)) {
        *why = strdup ("cannot read the tenant's usage (see the server log)");
        goto out;
    }
    const ah_msg_t *args [] = { t, request, usage, limits };
    if (ah_policy_callv (self->policy, "admit", args, 4, &result, &err)) {
        ah_error (AREA, "admit policy: %s", err ? err : "failed");
        *why = zsys_sprintf ("the admit policy failed: %s", err ? err : "?");
        goto out;
    }
    if (!ah_msg_bool (result, "allow", false)) {
        const char *message = ah_msg_str (result, "message");
        *why = strdup (message ? message : "refused by the admit policy");
        rc = 1;
        goto out;
    }
    //  The policy's values win (it fills defaults and may round).
    const char *image = ah_msg_str (result, "image");
    if (ah_ident_ok (AH_IDENT_IMAGE, image))
        snprintf (out->image, sizeof out->image, "%s", image);
    out->cpus = ah_msg_double (result, "cpus", out->cpus);
    out->memory_mb = ah_msg_int (result, "memory_mb", out->memory_mb);
    out->idle_minutes = ah_msg_double (result, "idle_minutes", out->idle_minutes);
    //  What the policy answers is held to the same bounds as what a
    //  client asks: a policy that rounds to 0 makes no unlimited sandbox.
    char bad [300];
    if (!ah_ident_ok (AH_IDENT_IMAGE, out->image)) {
        *why = strdup ("the admit policy returned an unusable image");
        goto out;
    }
    if (ah_bound_check_named ("cpus", out->cpus, bad, sizeof bad)
    ||  ah_bound_check_named ("memory_mb", (double) out->memory_mb, bad, sizeof bad)
    ||  (streq (op, "start") ? NULL : ah_bound_check_named ("idle_minutes", out->idle_minutes, bad, sizeof bad))) {
        *why = zsys_sprintf ("the admit policy returned an unusable value: %s", bad);
        goto out;
    }
    rc = 0;
out:
    free (err);
    ah_msg_destroy (&t);
    ah_msg_destroy (&request);
    ah_msg_destroy (&usage);
    ah_msg_destroy (&limits);
    ah_msg_destroy (&result);
    return rc;
}
