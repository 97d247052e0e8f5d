/*  actors/api/tenants.c: tenants and API tokens, for an admin (docs/api.md
    "Tenants and tokens"). The API owns these tables (tenants, api_tokens):
    it writes them through its own connection; lifecycle reads the
    tenants' limits when it admits.

    A token is shown once, when it is made: 32 random bytes as hex; only
    its SHA-256 is kept. Revoking sets revoked_at: auth.c refuses it at
    once. Removing a tenant that holds sandboxes needs ?force=1, which
    destroys them first and answers once they are gone.                  */
#include "actors/api/api_int.h"
#include "actors/lifecycle.h"
#include "common/token.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

#define FORCE_WAIT_S    600

//  --------------------------------------------------------------------
//  Tenants

static json_t *s_limit_json (sqlite3_stmt *st, int col, bool real)
{
    if (sqlite3_column_type (st, col) == SQLITE_NULL)
        return json_null ();
    return real ? json_real (sqlite3_column_double (st, col)) : json_integer (sqlite3_column_int64 (st, col));
}

#define TENANT_SELECT \
    "SELECT t.name, t.max_agents, t.max_running, t.max_cpus, t.max_memory_mb, t.created_at," \
    " (SELECT count(*) FROM agents a WHERE a.tenant = t.name)," \
    " (SELECT count(*) FROM agents a JOIN sandboxes s ON s.agent_id = a.id" \
    "   WHERE a.tenant = t.name AND s.state IN " AH_LIFECYCLE_HOLDING_SQL ")," \
    " (SELECT count(*) FROM api_tokens k WHERE k.tenant = t.name AND k.revoked_at IS NULL)" \
    " FROM tenants t"

static json_t *s_tenant_row (sqlite3_stmt *st)
{
    json_t *t = json_object ();
    json_object_set_new (t, "name", api_json_column (st, 0));
    json_object_set_new (t, "max_sandboxes", s_limit_json (st, 1, false));
    json_object_set_new (t, "max_running", s_limit_json (st, 2, false));
    json_object_set_new (t, "max_cpus", s_limit_json (st, 3, true));
    json_object_set_new (t, "max_memory_mb", s_limit_json (st, 4, false));
    json_object_set_new (t, "created_at", api_json_time (sqlite3_column_int64 (st, 5)));
    json_object_set_new (t, "sandboxes", json_integer (sqlite3_column_int64 (st, 6)));
    json_object_set_new (t, "running", json_integer (sqlite3_column_int64 (st, 7)));
    json_object_set_new (t, "tokens", json_integer (sqlite3_column_int64 (st, 8)));
    return t;
}

//  One tenant as JSON; NULL with *status 404 or 500.
static json_t *s_tenant_get (api_t *api, const char *name, int *status)
{
    sqlite3_stmt *st = ah_store_prepare (api->store, TENANT_SELECT " WHERE t.name = :name");
    int rc = st && !ah_store_bind_text (st, ":name", name) ? ah_store_step (api->store, st) : SQLITE_ERROR;
    json_t *t = rc == SQLITE_ROW ? s_tenant_row (st) : NULL;
    if (st)
        sqlite3_reset (st);
    *status = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? 404 : 500;
    return t;
}

static const char *s_limit_keys [] = { "max_sandboxes", "max_running", "max_cpus", "max_memory_mb" };
static const char *s_limit_columns [] = { "max_agents", "max_running", "max_cpus", "max_memory_mb" };

#define LIMIT_FIELDS \
    { "max_sandboxes", B_NUM | B_NULL, NULL }, { "max_running", B_NUM | B_NULL, NULL }, \
    { "max_cpus", B_NUM | B_NULL, NULL }, { "max_memory_mb", B_NUM | B_NULL, NULL }
//  The bodies (checked before the handlers: their bounds are
//  common/bounds.h's).
static const body_field_t s_create_fields [] = { { "name", B_STR, NULL }, LIMIT_FIELDS, { NULL, 0, NULL } };
static const body_field_t s_update_fields [] = { LIMIT_FIELDS, { NULL, 0, NULL } };

//  The limits in a body (each within its bound, or null: none) into the
//  tenant's row. 0, or -1 answered.
static int s_limits_write (req_t *r, json_t *obj, const char *name)
{
    const char *key;
    json_t *v;
    json_object_foreach (obj, key, v) {
        int k = -1;
        for (int i = 0; i < 4; i++)
            if (streq (s_limit_keys [i], key))
                k = i;
        if (k < 0)
            continue;               //  "name"
        bool real = k == 2;
        char sql [128];
        snprintf (sql, sizeof sql, "UPDATE tenants SET %s = :v WHERE name = :name", s_limit_columns [k]);
        sqlite3_stmt *st = ah_store_prepare (r->api->store, sql);
        int bad = !st || ah_store_bind_text (st, ":name", name);
        if (!bad && json_is_null (v))
            bad = sqlite3_bind_null (st, sqlite3_bind_parameter_index (st, ":v")) != SQLITE_OK;
        else if (!bad && real)
            bad = ah_store_bind_double (st, ":v", json_number_value (v));
        else if (!bad)
            bad = ah_store_bind_int64 (st, ":v", json_integer_value (v));
        bad = bad || ah_store_step (r->api->store, st) != SQLITE_DONE;
        if (st)
            sqlite3_reset (st);
        if (bad) {
            api_respond_error (r, 500, "cannot write the tenant's limits");
            return -1;
        }
    }
    return 0;
}

static void s_tenant_create (req_t *r)
{
    json_t *obj = api_body_object (r, false);
    if (!obj)
        return;
    const char *name = json_string_value (json_object_get (obj, "name"));
    const char *why = ah_ident_check (AH_IDENT_TENANT, name);
    ah_store_t *store = r->api->store;
    int status;
    if (!name)
        api_respond_error (r, 400, "field 'name' is required (a tenant name)");
    else if (why)
        api_respond_error (r, 400, "field 'name': tenant name '%s' %s", name, why);
    else if (ah_store_begin (store))
        api_respond_error (r, 500, "cannot write the tenants");
    else {
        sqlite3_stmt *st = ah_store_prepare (store,
            "INSERT OR IGNORE INTO tenants (name, created_at) VALUES (:name, :now)");
        bool ok = st && !ah_store_bind_text (st, ":name", name)
               && !ah_store_bind_int64 (st, ":now", ah_store_now_ms ())
               && ah_store_step (store, st) == SQLITE_DONE;
        bool fresh = ok && ah_store_changes (store) == 1;
        if (st)
            sqlite3_reset (st);
        if (!ok)
            api_respond_error (r, 500, "cannot write the tenants");
        else if (!fresh)
            api_respond_error (r, 409, "tenant '%s' exists already", name);
        if (!ok || !fresh || s_limits_write (r, obj, name) || ah_store_commit (store)) {
            ah_store_rollback (store);
            if (!r->responded)
                api_respond_error (r, 500, "cannot write the tenants");
        }
        else {
            json_t *t = s_tenant_get (r->api, name, &status);
            if (t)
                api_respond (r, 201, t);
            else
                api_respond_error (r, 500, "the tenant was made but cannot be read");
            ah_info (AREA, "tenant '%s' created by %s", name, r->who.token_name);
        }
    }
    json_decref (obj);
}

static void s_tenant_list (req_t *r)
{
    sqlite3_stmt *st = ah_store_prepare (r->api->store, TENANT_SELECT " ORDER BY t.name");
    json_t *list = st ? json_array () : NULL;
    int rc = SQLITE_ERROR;
    while (st && (rc = ah_store_step (r->api->store, st)) == SQLITE_ROW)
        json_array_append_new (list, s_tenant_row (st));
    if (st)
        sqlite3_reset (st);
    if (rc != SQLITE_DONE) {
        json_decref (list);
        api_respond_error (r, 500, "cannot read the tenants");
        return;
    }
    api_respond (r, 200, json_pack ("{s:o}", "tenants", list));
}

//  {tenant}: a tenant name that exists. NULL answered.
static json_t *s_tenant_resolve (req_t *r)
{
    const char *name = r->params [0];
    const char *why = ah_ident_check (AH_IDENT_TENANT, name);
    if (why) {
        api_respond_error (r, 400, "tenant name '%s' %s", name, why);
        return NULL;
    }
    int status;
    json_t *t = s_tenant_get (r->api, name, &status);
    if (!t)
        api_respond_error (r, status, status == 404 ? "no tenant '%s'" : "cannot read tenant '%s'", name);
    return t;
}

static void s_tenant_show (req_t *r)
{
    json_t *t = s_tenant_resolve (r);
    if (t)
        api_respond (r, 200, t);
}

static void s_tenant_update (req_t *r)
{
    json_t *obj = api_body_object (r, false);
    json_t *t = obj ? s_tenant_resolve (r) : NULL;
    if (t) {
        json_decref (t);
        if (json_object_size (obj) == 0)
            api_respond_error (r, 400, "nothing to change: give max_sandboxes, max_running, max_cpus "
                               "or max_memory_mb");
        else if (ah_store_begin (r->api->store) == 0) {
            if (s_limits_write (r, obj, r->params [0]))
                ah_store_rollback (r->api->store);      //  answered
            else if (ah_store_commit (r->api->store)) {
                ah_store_rollback (r->api->store);
                api_respond_error (r, 500, "cannot write the tenant's limits");
            }
            else {
                int status;
                t = s_tenant_get (r->api, r->params [0], &status);
                api_respond (r, 200, t);
            }
        }
        else
            api_respond_error (r, 500, "cannot write the tenants");
    }
    json_decref (obj);
}

//  The tenant's rows go: its tokens and sessions, then the tenant.
static int s_tenant_delete_rows (req_t *r, const char *name)
{
    ah_store_t *store = r->api->store;
    static const char *sql [] = {
        "DELETE FROM api_tokens WHERE tenant = :name AND admin = 0",
        "DELETE FROM sessions WHERE tenant = :name",
        "DELETE FROM tenants WHERE name = :name",
    };
    if (ah_store_begin (store))
        return -1;
    for (size_t i = 0; i < sizeof sql / sizeof sql [0]; i++) {
        sqlite3_stmt *st = ah_store_prepare (store, sql [i]);
        bool ok = st && !ah_store_bind_text (st, ":name", name) && ah_store_step (store, st) == SQLITE_DONE;
        if (st)
            sqlite3_reset (st);
        if (!ok) {
            ah_store_rollback (store);
            return -1;
        }
    }
    if (ah_store_commit (store))
        return -1;
    //  Its tokens' sessions and tickets end now (their ids go to the next tokens made).
    api_passes_sweep (r->api);
    return 0;
}

static int64_t s_held (api_t *api, const char *name)
{
    sqlite3_stmt *st = ah_store_prepare (api->store, "SELECT count(*) FROM agents WHERE tenant = :name");
    int64_t n = -1;
    if (st && !ah_store_bind_text (st, ":name", name) && ah_store_step (api->store, st) == SQLITE_ROW)
        n = sqlite3_column_int64 (st, 0);
    if (st)
        sqlite3_reset (st);
    return n;
}

static void s_tenant_removed (req_t *r, ah_msg_t *reply)
{
    const char *label = ah_msg_str (reply, "label");
    api_respond (r, 200, json_pack ("{s:s, s:b, s:s?, s:I}", "name", r->params [0], "removed", 1,
                                    "audit_label", label, "audit_rows", (json_int_t) ah_msg_int (reply, "relabelled", 0)));
}

static void s_tenant_relabel_refused (req_t *r, const char *why)
{
    ah_error (AREA, "tenant '%s' removed, but its audit rows were not relabelled: %s", r->params [0], why);
    api_respond_error (r, 500, "tenant '%s' was removed, but its audit rows could not be relabelled (%s): a "
                       "tenant made later with that name still does not see them", r->params [0], why);
}

//  The tenant goes: its rows (one transaction), its open event streams,
//  then its audit rows are relabelled by the recorder, which answers.
//  Nothing it left is visible to a later tenant of the same name
//  (docs/api.md "Removing a tenant").
static void s_tenant_remove (req_t *r, const char *name)
{
    if (s_tenant_delete_rows (r, name)) {
        api_respond_error (r, 500, "cannot remove the tenant's rows");
        return;
    }
    ah_info (AREA, "tenant '%s' removed by %s", name, r->who.token_name);
    ah_api_events_end (r->api->events, NULL, name);
    ah_msg_t *m = ah_msg_new ("TENANT_REMOVED");
    ah_msg_set_str (m, "tenant", name);
    ah_msg_set_int (m, "at", ah_store_now_ms ());
    r->on_refused = s_tenant_relabel_refused;
    api_ask (r, "recorder", &m, s_tenant_removed);
}

//  ?force=1: waits until every sandbox of the tenant is gone.
static void s_tenant_gone_check (req_t *r)
{
    int64_t n = s_held (r->api, r->params [0]);
    if (n != 0)
        return;                     //  again on the next state or tick
    api_unpark (r);
    s_tenant_remove (r, r->params [0]);
}

static void s_tenant_gone_late (req_t *r)
{
    api_respond_error (r, 504, "tenant '%s' still holds %lld sandboxes after %d s (they are being destroyed)",
                       r->params [0], (long long) s_held (r->api, r->params [0]), FORCE_WAIT_S);
}

static void s_tenant_delete (req_t *r)
{
    bool force = false;
    if (api_query_bool (r, "force", &force))
        return;
    json_t *t = s_tenant_resolve (r);
    if (!t)
        return;
    json_decref (t);
    const char *name = r->params [0];
    if (streq (name, "default")) {
        api_respond_error (r, 400, "the default tenant stays (the admin token belongs to it)");
        return;
    }
    int64_t held = s_held (r->api, name);
    if (held < 0) {
        api_respond_error (r, 500, "cannot read the tenant's sandboxes");
        return;
    }
    if (held > 0 && !force) {
        api_respond_error (r, 409, "tenant '%s' still holds %lld sandboxes: remove them first, or "
                           "force the removal (?force=1, agenthold tenant rm --force), which destroys them",
                           name, (long long) held);
        return;
    }
    if (held > 0) {
        //  Destroy each; the answer comes once none is left.
        sqlite3_stmt *st = ah_store_prepare (r->api->store, "SELECT id FROM agents WHERE tenant = :name");
        int rc = st && !ah_store_bind_text (st, ":name", name) ? SQLITE_ROW : SQLITE_ERROR;
        while (rc == SQLITE_ROW && (rc = ah_store_step (r->api->store, st)) == SQLITE_ROW) {
            ah_msg_t *m = ah_msg_new ("SANDBOX_DESTROY");
            ah_msg_set_str (m, "agent", (const char *) sqlite3_column_text (st, 0));
            ah_msg_set_strf (m, "by", "api:%s", r->who.token_name);
            api_send (r->api, "lifecycle", &m);
        }
        if (st)
            sqlite3_reset (st);
        ah_info (AREA, "tenant '%s': destroying its %lld sandboxes (asked by %s)", name,
                 (long long) held, r->who.token_name);
        r->on_state = s_tenant_gone_check;
        r->on_deadline = s_tenant_gone_late;
        api_park (r, zclock_mono () + FORCE_WAIT_S * 1000);
        return;
    }
    s_tenant_remove (r, name);
}

//  --------------------------------------------------------------------
//  Tokens

#define TOKEN_SELECT \
    "SELECT name, tenant, admin, user, created_at, last_used_at, expires_at, revoked_at, metrics_only" \
    " FROM api_tokens"

static json_t *s_token_row (sqlite3_stmt *st)
{
    json_t *t = json_object ();
    json_object_set_new (t, "name", api_json_column (st, 0));
    bool metrics = sqlite3_column_int (st, 8) != 0;
    json_object_set_new (t, "tenant", sqlite3_column_int (st, 2) || metrics ? json_null () : api_json_column (st, 1));
    json_object_set_new (t, "admin", json_boolean (sqlite3_column_int (st, 2)));
    json_object_set_new (t, "metrics", json_boolean (metrics));
    json_object_set_new (t, "user", api_json_column (st, 3));
    json_object_set_new (t, "created_at", api_json_time (sqlite3_column_int64 (st, 4)));
    json_object_set_new (t, "last_used_at", api_json_time (sqlite3_column_int64 (st, 5)));
    json_object_set_new (t, "expires_at", api_json_time (sqlite3_column_int64 (st, 6)));
    json_object_set_new (t, "revoked_at", api_json_time (sqlite3_column_int64 (st, 7)));
    return t;
}

//  "30d", "12h", "90m", "45s" or seconds as a number: > 0, at most ten years.
static int64_t s_duration_s (json_t *v)
{
    if (json_is_integer (v))
        return json_integer_value (v) > 0 && json_integer_value (v) <= 3650LL * 86400 ? json_integer_value (v) : -1;
    const char *s = json_string_value (v);
    if (!s || !*s || !isdigit ((unsigned char) *s))
        return -1;
    char *end = NULL;
    errno = 0;
    long long n = strtoll (s, &end, 10);
    if (errno || n <= 0)
        return -1;
    int64_t unit = !*end ? 1 : streq (end, "s") ? 1 : streq (end, "m") ? 60 : streq (end, "h") ? 3600
                 : streq (end, "d") ? 86400 : -1;
    return unit < 0 || n > 3650LL * 86400 / unit ? -1 : n * unit;
}

//  A person's identity: 1 to 128 bytes of free text (common/ident.h)
//  without a blank.
static bool s_user_ok (const char *user)
{
    size_t n = user ? strlen (user) : 0;
    if (n < 1 || n > 128 || strchr (user, ' ') || ah_text_check (user, n, false))
        return false;
    return true;
}

//  expires: a duration string, or seconds (common/bounds.h "expires").
static const body_field_t s_token_fields [] = {
    { "tenant", B_STR, NULL }, { "name", B_STR, NULL }, { "user", B_STR, NULL }, { "expires", B_STR | B_NUM, NULL },
    { "admin", B_BOOL, NULL }, { "metrics", B_BOOL, NULL }, { NULL, 0, NULL }
};

static void s_token_create (req_t *r)
{
    json_t *obj = api_body_object (r, true);
    if (!obj)
        return;
    bool admin = json_is_true (json_object_get (obj, "admin"));
    //  A metrics token reads GET /metrics and nothing else.
    bool metrics = json_is_true (json_object_get (obj, "metrics"));
    const char *tenant = json_string_value (json_object_get (obj, "tenant"));
    if (!tenant && !admin && !metrics && r->who.scope [0])
        tenant = r->who.scope;          //  ?tenant=: the tenant acted within (not for an admin's)
    const char *name = json_string_value (json_object_get (obj, "name"));
    const char *user = json_string_value (json_object_get (obj, "user"));
    json_t *expires = json_object_get (obj, "expires");
    int64_t expires_s = expires ? s_duration_s (expires) : 0;
    char made_name [80], token [AH_TOKEN_HEX], hash [AH_TOKEN_HEX], why_buf [300] = "";
    const char *why = NULL;
    int status;
    json_t *t = NULL;
    if (metrics && (admin || tenant))
        why = "a metrics token reads /metrics only: give metrics alone, without tenant or admin";
    else if (admin && tenant)
        why = "an admin token belongs to no tenant: give tenant or admin, not both";
    else if (!admin && !tenant && !metrics)
        why = "field 'tenant' is required (the tenant the token acts for), or admin: true";
    else if (json_object_get (obj, "user") && !s_user_ok (user))
        why = "field 'user' must be 1 to 128 bytes of UTF-8 without blanks or control characters (C0, DEL, C1):"
              " the person it acts for";
    else if (expires && expires_s <= 0)
        why = "field 'expires' must be a duration such as 30d, 12h, 90m or seconds (at most ten years)";
    else if (name && ah_ident_check (AH_IDENT_TOKEN_NAME, name)) {
        snprintf (why_buf, sizeof why_buf, "field 'name': token name '%.64s' %s", name,
                  ah_ident_check (AH_IDENT_TOKEN_NAME, name));
        why = why_buf;
    }
    else if (tenant && ah_ident_check (AH_IDENT_TENANT, tenant)) {
        snprintf (why_buf, sizeof why_buf, "field 'tenant': tenant name '%.64s' %s", tenant,
                  ah_ident_check (AH_IDENT_TENANT, tenant));
        why = why_buf;
    }
    if (why) {
        api_respond_error (r, 400, "%s", why);
        goto out;
    }
    if (tenant && !(t = s_tenant_get (r->api, tenant, &status))) {
        api_respond_error (r, status, status == 404 ? "no tenant '%s'" : "cannot read tenant '%s'", tenant);
        goto out;
    }
    if (!name) {
        char id [7];
        ah_token_id (id, sizeof id, 6);
        snprintf (made_name, sizeof made_name, "%s-%s", admin ? "admin" : metrics ? "metrics" : tenant, id);
        name = made_name;
    }
    if (ah_token_new (token)) {
        api_respond_error (r, 503, "no entropy for a token");
        goto out;
    }
    ah_token_hash (token, hash);
    int64_t now = ah_store_now_ms ();
    sqlite3_stmt *st = ah_store_prepare (r->api->store,
        "INSERT INTO api_tokens (name, hash, tenant, admin, user, created_at, expires_at, metrics_only)"
        " VALUES (:name, :hash, :tenant, :admin, :user, :now, :expires, :metrics)");
    bool ok = st && !ah_store_bind_text (st, ":name", name) && !ah_store_bind_text (st, ":hash", hash)
           && !ah_store_bind_text (st, ":tenant", admin || metrics ? "default" : tenant)
           && !ah_store_bind_int64 (st, ":metrics", metrics)
           && !ah_store_bind_int64 (st, ":admin", admin) && !ah_store_bind_text (st, ":user", user)
           && !ah_store_bind_int64 (st, ":now", now);
    if (ok && expires_s > 0)
        ok = !ah_store_bind_int64 (st, ":expires", now + expires_s * 1000);
    else if (ok)
        ok = sqlite3_bind_null (st, sqlite3_bind_parameter_index (st, ":expires")) == SQLITE_OK;
    int rc = ok ? ah_store_step (r->api->store, st) : SQLITE_ERROR;
    if (st)
        sqlite3_reset (st);
    if (rc == SQLITE_CONSTRAINT || (rc & 0xff) == SQLITE_CONSTRAINT)
        api_respond_error (r, 409, "a token named '%s' exists already", name);
    else if (rc != SQLITE_DONE)
        api_respond_error (r, 500, "cannot write the token");
    else {
        json_t *body = json_object ();
        json_object_set_new (body, "token", json_string (token));
        json_object_set_new (body, "name", api_json_text (name));
        json_object_set_new (body, "tenant", admin || metrics ? json_null () : api_json_text (tenant));
        json_object_set_new (body, "admin", json_boolean (admin));
        json_object_set_new (body, "metrics", json_boolean (metrics));
        json_object_set_new (body, "user", user ? api_json_text (user) : json_null ());
        json_object_set_new (body, "created_at", api_json_time (now));
        json_object_set_new (body, "expires_at", api_json_time (expires_s > 0 ? now + expires_s * 1000 : 0));
        json_object_set_new (body, "note", json_string ("the token is shown this once; only its hash is kept"));
        ah_info (AREA, "token '%s' made for %s by %s", name,
                 admin ? "an admin" : metrics ? "reading /metrics" : tenant, r->who.token_name);
        api_respond (r, 201, body);
    }
    explicit_bzero (token, sizeof token);
out:
    json_decref (t);
    json_decref (obj);
}

static void s_token_list (req_t *r)
{
    sqlite3_stmt *st = ah_store_prepare (r->api->store,
        TOKEN_SELECT " WHERE :scope = '' OR (tenant = :scope AND admin = 0) ORDER BY tenant, name");
    if (st && ah_store_bind_text (st, ":scope", r->who.scope))
        st = NULL;
    json_t *list = st ? json_array () : NULL;
    int rc = SQLITE_ERROR;
    while (st && (rc = ah_store_step (r->api->store, st)) == SQLITE_ROW)
        json_array_append_new (list, s_token_row (st));
    if (st)
        sqlite3_reset (st);
    if (rc != SQLITE_DONE) {
        json_decref (list);
        api_respond_error (r, 500, "cannot read the tokens");
        return;
    }
    api_respond (r, 200, json_pack ("{s:o}", "tokens", list));
}

static void s_token_revoke (req_t *r)
{
    const char *name = r->params [0];
    if (ah_ident_check (AH_IDENT_TOKEN_NAME, name)) {
        api_respond_error (r, 400, "token name '%.64s' %s", name, ah_ident_check (AH_IDENT_TOKEN_NAME, name));
        return;
    }
    if (r->who.token_id && streq (name, r->who.token_name)) {
        api_respond_error (r, 409, "a token cannot revoke itself (use another admin token)");
        return;
    }
    sqlite3_stmt *st = ah_store_prepare (r->api->store,
        "UPDATE api_tokens SET revoked_at = :now WHERE name = :name AND revoked_at IS NULL"
        " AND (:scope = '' OR (tenant = :scope AND admin = 0))");
    bool ok = st && !ah_store_bind_int64 (st, ":now", ah_store_now_ms ()) && !ah_store_bind_text (st, ":name", name)
           && !ah_store_bind_text (st, ":scope", r->who.scope) && ah_store_step (r->api->store, st) == SQLITE_DONE;
    int changed = ok ? ah_store_changes (r->api->store) : 0;
    if (st)
        sqlite3_reset (st);
    if (!ok)
        api_respond_error (r, 500, "cannot write the tokens");
    else if (!changed)
        api_respond_error (r, 404, "no token '%s' to revoke (or it is revoked already)", name);
    else {
        ah_info (AREA, "token '%s' revoked by %s", name, r->who.token_name);
        ah_api_events_end (r->api->events, name, NULL);
        api_passes_sweep (r->api);          //  its sessions and tickets end now
        api_respond (r, 200, json_pack ("{s:s, s:b}", "name", name, "revoked", 1));
    }
}

const route_t api_tenant_routes [] = {
    { M_POST, "/api/v1/tenants", s_tenant_create, R_BODY | R_ADMIN, "", s_create_fields },
    { M_GET, "/api/v1/tenants", s_tenant_list, R_ADMIN, "", NULL },
    { M_GET, "/api/v1/tenants/{tenant}", s_tenant_show, R_ADMIN, "", NULL },
    { M_PATCH, "/api/v1/tenants/{tenant}", s_tenant_update, R_BODY | R_ADMIN, "", s_update_fields },
    { M_DELETE, "/api/v1/tenants/{tenant}", s_tenant_delete, R_ADMIN, "force", NULL },
    { M_POST, "/api/v1/tokens", s_token_create, R_BODY | R_ADMIN, "", s_token_fields },
    { M_GET, "/api/v1/tokens", s_token_list, R_ADMIN, "", NULL },
    { M_DELETE, "/api/v1/tokens/{token}", s_token_revoke, R_ADMIN, "", NULL },
    { 0 }
};
