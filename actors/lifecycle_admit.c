/*  actors/lifecycle_admit.c: admission for the lifecycle actor (see
    lifecycle_int.h): the fields a create or an update asks for, checked
    for type and grammar (common/ident.h), then lua/limits.lua's admit
    (through policy/) and the tenant's own limits.                     */
#include "actors/lifecycle_int.h"
#include "common/log.h"

#include <math.h>
#include <string.h>

// --------------------------------------------------------------------------
//  Optional fields of a request: absent is fine, a wrong type is not.

static int s_opt_double (const ah_msg_t *msg, const char *key, double *out)
{
    if (!ah_msg_has (msg, key) || ah_msg_is_nil (msg, key))
        return 0;
    double v = ah_msg_double (msg, key, NAN);
    if (isnan (v) || isinf (v))
        return -1;
    *out = v;
    return 1;
}

static int s_opt_int (const ah_msg_t *msg, const char *key, int64_t *out)
{
    double v;
    int rc = s_opt_double (msg, key, &v);
    if (rc <= 0)
        return rc;
    if (v != floor (v) || v < -9e15 || v > 9e15)
        return -1;
    *out = ah_msg_int (msg, key, (int64_t) v);
    return 1;
}

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
    const char *bad = NULL, *image = NULL;
    int rc;
    if ((rc = ah_lc_opt_str (msg, "image", &image)) < 0)
        bad = "image: want a string";
    else
    if (rc && ah_lc_ident (self, msg, AH_IDENT_IMAGE, image))
        return -1;
    if ((d->has_image = rc > 0))
        snprintf (d->image, sizeof d->image, "%s", image);
    if (!bad && (rc = s_opt_double (msg, "cpus", &d->cpus)) < 0)
        bad = "cpus: want a number";
    d->has_cpus = rc > 0;
    if (!bad && (rc = s_opt_int (msg, "memory_mb", &d->memory_mb)) < 0)
        bad = "memory_mb: want a whole number of MiB";
    d->has_memory = rc > 0;
    if (!bad && (rc = s_opt_double (msg, "idle_minutes", &d->idle_minutes)) < 0)
        bad = "idle_minutes: want a number";
    d->has_idle = rc > 0;
    if (bad) {
        ah_actor_reply_error (self->actor, msg, 400, "%s", bad);
        return -1;
    }
    return 0;
}

// --------------------------------------------------------------------------
//  Limits

//  The tenant's own limits (tenants table; NULL or no row = none) against what its
//  agents would hold with this one at `want`. `except`: the agent being
//  updated, counted at its new values only. 0 / 1 refused (*why) / -1.
static int s_tenant_fits (self_t *self, const char *tenant, const char *except,
                          const desired_t *want, char **why)
{
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT count(a.id), coalesce(sum(a.cpus), 0), coalesce(sum(a.memory_mb), 0),"
        " t.max_agents, t.max_cpus, t.max_memory_mb"
        " FROM tenants t LEFT JOIN agents a ON a.tenant = t.name AND a.id <> :except"
        " WHERE t.name = :tenant GROUP BY t.name");
    if (!st || ah_store_bind_text (st, ":tenant", tenant)
            || ah_store_bind_text (st, ":except", except ? except : "")) {
        *why = strdup ("cannot read the tenant's usage");
        return -1;
    }
    int rc = ah_store_step (self->store, st);
    if (rc != SQLITE_ROW) {
        //  No row for the tenant: it has no limits of its own.
        sqlite3_reset (st);
        if (rc != SQLITE_DONE)
            *why = strdup ("cannot read the tenant's usage");
        return rc == SQLITE_DONE ? 0 : -1;
    }
    int64_t agents = sqlite3_column_int64 (st, 0) + 1;
    double cpus = sqlite3_column_double (st, 1) + want->cpus;
    int64_t memory = sqlite3_column_int64 (st, 2) + want->memory_mb;
    if (sqlite3_column_type (st, 3) != SQLITE_NULL && agents > sqlite3_column_int64 (st, 3))
        *why = zsys_sprintf ("tenant '%s' may have at most %lld agents", tenant,
                             (long long) sqlite3_column_int64 (st, 3));
    else
    if (sqlite3_column_type (st, 4) != SQLITE_NULL && cpus > sqlite3_column_double (st, 4))
        *why = zsys_sprintf ("tenant '%s' would hold %g cpus, over its limit of %g", tenant,
                             cpus, sqlite3_column_double (st, 4));
    else
    if (sqlite3_column_type (st, 5) != SQLITE_NULL && memory > sqlite3_column_int64 (st, 5))
        *why = zsys_sprintf ("tenant '%s' would hold %lld MiB, over its limit of %lld MiB", tenant,
                             (long long) memory, (long long) sqlite3_column_int64 (st, 5));
    sqlite3_reset (st);
    return *why ? 1 : 0;
}

//  lua/limits.lua admit(request, limits) says yes or no and fills in
//  defaults; then the tenant's quota. `asked` are the fields the request
//  named.
int ah_lc_admit (self_t *self, const char *op, const char *name, const char *tenant,
                 const char *except, const desired_t *asked, desired_t *out, char **why)
{
    *why = NULL;
    const ah_config_t *c = self->config;
    ah_msg_t *request = ah_msg_new ("ADMIT");
    ah_msg_set_str (request, "op", op);
    ah_msg_set_str (request, "name", name);
    if (asked->has_image)  ah_msg_set_str (request, "image", asked->image);
    if (asked->has_cpus)   ah_msg_set_double (request, "cpus", asked->cpus);
    if (asked->has_memory) ah_msg_set_int (request, "memory_mb", asked->memory_mb);
    if (asked->has_idle)   ah_msg_set_double (request, "idle_minutes", asked->idle_minutes);
    ah_msg_t *limits = ah_msg_new ("LIMITS");
    ah_msg_set_str (limits, "default_image", c->default_image);
    ah_msg_set_double (limits, "default_cpus", c->default_cpus);
    ah_msg_set_int (limits, "default_memory_mb", c->default_memory_mb);
    ah_msg_set_double (limits, "max_cpus", c->max_cpus);
    ah_msg_set_int (limits, "max_memory_mb", c->max_memory_mb);
    ah_msg_set_double (limits, "default_idle_minutes", c->idle_minutes);
    ah_msg_t *result = NULL;
    char *err = NULL;
    int rc = ah_policy_call (self->policy, "admit", request, limits, &result, &err);
    ah_msg_destroy (&request);
    ah_msg_destroy (&limits);
    if (rc) {
        ah_error (AREA, "admit policy: %s", err ? err : "failed");
        *why = zsys_sprintf ("the admit policy failed: %s", err ? err : "?");
        free (err);
        return -1;
    }
    if (!ah_msg_bool (result, "allow", false)) {
        const char *message = ah_msg_str (result, "message");
        *why = strdup (message ? message : "refused by the admit policy");
        ah_msg_destroy (&result);
        return 1;
    }
    //  The policy's values win (it fills defaults and may round).
    const char *image = ah_msg_str (result, "image");
    if (ah_ident_ok (AH_IDENT_IMAGE, image))
        snprintf (out->image, sizeof out->image, "%s", image);
    out->cpus = ah_msg_double (result, "cpus", out->cpus);
    out->memory_mb = ah_msg_int (result, "memory_mb", out->memory_mb);
    out->idle_minutes = ah_msg_double (result, "idle_minutes", out->idle_minutes);
    ah_msg_destroy (&result);
    if (!ah_ident_ok (AH_IDENT_IMAGE, out->image) || out->cpus <= 0 || out->memory_mb <= 0) {
        *why = strdup ("the admit policy returned an unusable image or resources");
        return -1;
    }
    return s_tenant_fits (self, tenant, except, out, why);
}
