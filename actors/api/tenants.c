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
#include "proto/egress.h"

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
    " (SELECT count(*) FROM api_tokens k WHERE k.tenant = t.name AND k.revoked_at IS NULL)," \
    " (SELECT json_group_array(entry) FROM (SELECT entry FROM tenant_egress e" \
    "   WHERE e.tenant = t.name AND e.list = 'allow' ORDER BY pos))," \
    " (SELECT json_group_array(entry) FROM (SELECT entry FROM tenant_egress e" \
    "   WHERE e.tenant = t.name AND e.list = 'deny' ORDER BY pos))" \
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
    for (int col = 9; col <= 10; col++) {
        const char *text = (const char *) sqlite3_column_text (st, col);
        json_t *list = text ? json_loads (text, 0, NULL) : NULL;
        json_object_set_new (t, col == 9 ? "egress_allow" : "egress_deny", list ? list : json_array ());
    }
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
    { "max_cpus", B_NUM | B_NULL, NULL }, { "max_memory_mb", B_NUM | B_NULL, NULL }, \
    { "egress_allow", B_ARR, NULL }, { "egress_deny", B_ARR, NULL }
//  The bodies (checked before the handlers: their bounds are
//  common/bounds.h's).
static const body_field_t s_create_fields [] = { { "name", B_STR, NULL }, LIMIT_FIELDS, { NULL, 0, NULL } };
static const body_field_t s_update_fields [] = { LIMIT_FIELDS, { NULL, 0, NULL } };

//  A tenant's row written (the writer's, in a worker): made (create),
//  then the limits of the body (each within its bound, or null: none).
typedef struct {
    json_t *obj;
    char name [128];
    bool create;
} tenant_write_t;

static int s_limits_write (ah_store_t *store, json_t *obj, const char *name)
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
        sqlite3_stmt *st = ah_store_prepare (store, sql);
        int bad = !st || ah_store_bind_text (st, ":name", name);
        if (!bad && json_is_null (v))
            bad = ah_store_bind_null (st, ":v");
        else if (!bad && real)
            bad = ah_store_bind_double (st, ":v", json_number_value (v));
        else if (!bad)
            bad = ah_store_bind_int64 (st, ":v", json_integer_value (v));
        bad = bad || ah_store_step (store, st) != SQLITE_DONE;
        if (st)
            sqlite3_reset (st);
        if (bad)
            return -1;
    }
    return 0;
}

#define EGRESS_LIST_MAX     256     //  entries in a tenant's allow or deny list

static const char *const s_egress_keys [] = { "egress_allow", "egress_deny" };
static const char *const s_egress_lists [] = { "allow", "deny" };

//  egress_allow / egress_deny in a body: arrays of proto/egress.h's
//  entries (docs/egress.md), checked in the API's thread. 0, or -1 answered.
static int s_egress_check (req_t *r, json_t *obj)
{
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get (obj, s_egress_keys [k]);
        if (!v)
            continue;
        if (json_array_size (v) > EGRESS_LIST_MAX) {
            api_respond_error (r, 400, "field '%s' has %zu entries (at most %d)", s_egress_keys [k],
                               json_array_size (v), EGRESS_LIST_MAX);
            return -1;
        }
        size_t i;
        json_t *e;
        json_array_foreach (v, i, e) {
            const char *why = "is not a string";
            const char *text = json_string_value (e);
            if (!text || strlen (text) != json_string_length (e)
            ||  ah_egress_pattern_check (text, &why)) {
                char shown [80];
                api_respond_error (r, 400, "field '%s': entry %zu%s%s%s %s (docs/egress.md: name, *.name, *, "
                                   "an address or range, each with an optional :port)", s_egress_keys [k], i,
                                   text ? " '" : "", text ? api_show (text, strlen (text), shown, sizeof shown) : "",
                                   text ? "'" : "", text && strlen (text) != json_string_length (e)
                                   ? "holds a NUL character" : why);
                return -1;
            }
        }
    }
    return 0;
}

//  The lists a body gives replace the tenant's whole (in the writer's
//  transaction). 0 / -1.
static int s_egress_write (ah_store_t *store, json_t *obj, const char *name)
{
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get (obj, s_egress_keys [k]);
        if (!v)
            continue;
        sqlite3_stmt *st = ah_store_prepare (store, "DELETE FROM tenant_egress WHERE tenant = :name AND list = :list");
        bool ok = st && !ah_store_bind_text (st, ":name", name) && !ah_store_bind_text (st, ":list", s_egress_lists [k])
               && ah_store_step (store, st) == SQLITE_DONE;
        if (st)
            sqlite3_reset (st);
        size_t i;
        json_t *e;
        json_array_foreach (v, i, e) {
            st = ok ? ah_store_prepare (store, "INSERT INTO tenant_egress (tenant, list, pos, entry)"
                                               " VALUES (:name, :list, :pos, :entry)") : NULL;
            ok = st && !ah_store_bind_text (st, ":name", name) && !ah_store_bind_text (st, ":list", s_egress_lists [k])
              && !ah_store_bind_int64 (st, ":pos", (int64_t) i)
              && !ah_store_bind_text (st, ":entry", json_string_value (e))
              && ah_store_step (store, st) == SQLITE_DONE;
            if (st)
                sqlite3_reset (st);
        }
        if (!ok)
            return -1;
    }
    return 0;
}

static int s_tenant_write (ah_store_t *store, void *arg, char *why, size_t size)
{
    tenant_write_t *w = arg;
    if (ah_store_begin (store)) {
        snprintf (why, size, "cannot write the tenants");
        return 500;
    }
    if (w->create) {
        sqlite3_stmt *st = ah_store_prepare (store,
            "INSERT OR IGNORE INTO tenants (name, created_at) VALUES (:name, :now)");
        bool ok = st && !ah_store_bind_text (st, ":name", w->name)
               && !ah_store_bind_int64 (st, ":now", ah_store_now_ms ())
               && ah_store_step (store, st) == SQLITE_DONE;
        bool fresh = ok && ah_store_changes (store) == 1;
        if (st)
            sqlite3_reset (st);
        if (!fresh) {
            ah_store_rollback (store);
            snprintf (why, size, ok ? "tenant '%s' exists already" : "cannot write the tenants", w->name);
            return ok ? 409 : 500;
        }
    }
    if (s_limits_write (store, w->obj, w->name) || s_egress_write (store, w->obj, w->name)
    ||  ah_store_commit (store)) {
        ah_store_rollback (store);
        snprintf (why, size, "cannot write the tenant's limits or egress lists");
        return 500;
    }
    return 0;
}

static void s_tenant_written (api_t *api, req_t *r, void *arg, int status, const char *why)
{
    tenant_write_t *w = arg;
    if (json_object_get (w->obj, s_egress_keys [0]) || json_object_get (w->obj, s_egress_keys [1]))
        api_egress_changed (api, w->name);
    if (!status && w->create)
        ah_info (AREA, "tenant '%s' created by %s", w->name, r ? r->who.token_name : "a client that left");
    for (int k = 0; !status && k < 2; k++)
        if (json_object_get (w->obj, s_egress_keys [k]))
            ah_info (AREA, "tenant '%s': egress %s list set to %zu entries by %s", w->name, s_egress_lists [k],
                     json_array_size (json_object_get (w->obj, s_egress_keys [k])),
                     r ? r->who.token_name : "a client that left");
    if (r && status)
        api_respond_error (r, status, "%s", why);
    else
    if (r) {
        json_t *t = s_tenant_get (api, w->name, &status);
        if (t)
            api_respond (r, w->create ? 201 : 200, t);
        else
            api_respond_error (r, 500, "the tenant was written but cannot be read");
    }
    json_decref (w->obj);
    free (w);
}

//  obj taken.
static void s_tenant_write_ask (req_t *r, json_t *obj, const char *name, bool create)
{
    tenant_write_t *w = calloc (1, sizeof *w);
    if (w) {
        *w = (tenant_write_t) { .obj = obj, .create = create };
        snprintf (w->name, sizeof w->name, "%s", name);
    }
    if (!w || api_write (r, r->api, s_tenant_write, s_tenant_written, w)) {
        free (w);
        json_decref (obj);
        api_respond_error (r, 503, "out of memory");
    }
}

static void s_tenant_create (req_t *r)
{
    json_t *obj = api_body_object (r, false);
    if (!obj)
        return;
    const char *name = json_string_value (json_object_get (obj, "name"));
    const char *why = ah_ident_check (AH_IDENT_TENANT, name);
    if (!name)
        api_respond_error (r, 400, "field 'name' is required (a tenant name)");
    else if (why)
        api_respond_error (r, 400, "field 'name': tenant name '%s' %s", name, why);
    else if (s_egress_check (r, obj) == 0) {
        s_tenant_write_ask (r, obj, name, true);
        return;
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
            api_respond_error (r, 400, "nothing to change: give max_sandboxes, max_running, max_cpus, "
                               "max_memory_mb, egress_allow or egress_deny");
        else if (s_egress_check (r, obj) == 0) {
            s_tenant_write_ask (r, obj, r->params [0], false);
            return;
        }
    }
    json_decref (obj);
}

//  The tenant's rows go (the writer's, in a worker): its tokens and
//  sessions, then the tenant, in one transaction.
static int s_tenant_delete_rows (ah_store_t *store, void *arg, char *why, size_t size)
{
    const char *name = arg;
    static const char *sql [] = {
        "DELETE FROM api_tokens WHERE tenant = :name AND admin = 0",
        "DELETE FROM sessions WHERE tenant = :name",
        "DELETE FROM tenant_egress WHERE tenant = :name",
        "DELETE FROM egress_secrets WHERE tenant = :name",
        "DELETE FROM tenants WHERE name = :name",
    };
    bool ok = ah_store_begin (store) == 0;
    for (size_t i = 0; ok && i < sizeof sql / sizeof sql [0]; i++) {
        sqlite3_stmt *st = ah_store_prepare (store, sql [i]);
        ok = st && !ah_store_bind_text (st, ":name", name) && ah_store_step (store, st) == SQLITE_DONE;
        if (st)
            sqlite3_reset (st);
    }
    if (!ok || ah_store_commit (store)) {
        ah_store_rollback (store);
        snprintf (why, size, "cannot remove the tenant's rows");
        return 500;
    }
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

static void s_tenant_rows_gone (api_t *api, req_t *r, void *arg, int status, const char *why)
{
    char *name = arg;
    if (!status) {
        //  Its tokens' sessions and tickets end now (their ids go to the next tokens made).
        api_passes_sweep (api);
        api_egress_changed (api, name);
        ah_info (AREA, "tenant '%s' removed by %s", name, r ? r->who.token_name : "a client that left");
        ah_api_events_end (api->events, NULL, name);
        ah_msg_t *m = ah_msg_new ("TENANT_REMOVED");
        ah_msg_set_str (m, "tenant", name);
        ah_msg_set_int (m, "at", ah_store_now_ms ());
        if (r) {
            r->on_refused = s_tenant_relabel_refused;
            api_ask (r, "recorder", &m, s_tenant_removed);
        }
        else
            api_send (api, "recorder", &m);
    }
    else
    if (r)
        api_respond_error (r, status, "%s", why);
    free (name);
}

//  The tenant goes: its rows (one transaction), its open event streams,
//  then its audit rows are relabelled by the recorder, which answers.
//  Nothing it left is visible to a later tenant of the same name
//  (docs/api.md "Removing a tenant").
static void s_tenant_remove (req_t *r, const char *name)
{
    char *copy = strdup (name);
    if (!copy || api_write (r, r->api, s_tenant_delete_rows, s_tenant_rows_gone, copy)) {
        free (copy);
        api_respond_error (r, 503, "out of memory");
    }
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

//  The answer of a token create, its token wiped before it goes.
static void s_token_forget (json_t *body)
{
    json_t *token = json_object_get (body, "token");
    const char *text = json_string_value (token);
    if (text)
        explicit_bzero ((char *) text, strlen (text));
    json_decref (body);
}

static void s_token_written (api_t *api, req_t *r, void *arg, int status, const char *why)
{
    (void) api;
    json_t *body = api_stmt_ctx (arg);
    const char *name = json_string_value (json_object_get (body, "name"));
    if (!status)
        ah_info (AREA, "token '%s' made for %s by %s", name,
                 json_string_value (json_object_get (body, "for")), r ? r->who.token_name : "a client that left");
    if (r && status == 409)
        api_respond_error (r, 409, "a token named '%s' exists already", name);
    else if (r && status)
        api_respond_error (r, status, "cannot write the token: %s", why);
    else if (r) {
        json_object_del (body, "for");
        api_respond (r, 201, json_incref (body));
    }
    s_token_forget (body);
}

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
    api_stmt_t *st = api_stmt (
        "INSERT INTO api_tokens (name, hash, tenant, admin, user, created_at, expires_at, metrics_only)"
        " VALUES (:name, :hash, :tenant, :admin, :user, :now, :expires, :metrics)");
    st = api_stmt_text (api_stmt_text (st, ":name", name), ":hash", hash);
    st = api_stmt_text (st, ":tenant", admin || metrics ? "default" : tenant);
    st = api_stmt_int (api_stmt_int (st, ":metrics", metrics), ":admin", admin);
    st = api_stmt_int (api_stmt_text (st, ":user", user), ":now", now);
    st = expires_s > 0 ? api_stmt_int (st, ":expires", now + expires_s * 1000) : api_stmt_text (st, ":expires", NULL);
    //  The answer, given once the row is written.
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
    json_object_set_new (body, "for", json_string (admin ? "an admin" : metrics ? "reading /metrics" : tenant));
    explicit_bzero (token, sizeof token);
    if (api_stmt_write (r, r->api, st, s_token_written, body)) {
        s_token_forget (body);
        api_respond_error (r, 503, "out of memory");
    }
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

static void s_token_revoked (api_t *api, req_t *r, void *arg, int status, const char *why)
{
    char *name = api_stmt_ctx (arg);
    if (status) {
        if (r)
            api_respond_error (r, 500, "cannot write the tokens: %s", why);
    }
    else
    if (!api_stmt_changes (arg)) {
        if (r)
            api_respond_error (r, 404, "no token '%s' to revoke (or it is revoked already)", name);
    }
    else {
        //  It stands no more: its event streams, sessions and tickets end
        //  now, whether or not its asker still waits.
        ah_api_events_end (api->events, name, NULL);
        api_passes_sweep (api);
        ah_info (AREA, "token '%s' revoked by %s", name, r ? r->who.token_name : "a client that left");
        if (r)
            api_respond (r, 200, json_pack ("{s:s, s:b}", "name", name, "revoked", 1));
    }
    free (name);
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
    api_stmt_t *st = api_stmt (
        "UPDATE api_tokens SET revoked_at = :now WHERE name = :name AND revoked_at IS NULL"
        " AND (:scope = '' OR (tenant = :scope AND admin = 0))");
    st = api_stmt_text (api_stmt_int (st, ":now", ah_store_now_ms ()), ":name", name);
    st = api_stmt_text (st, ":scope", r->who.scope);
    char *copy = strdup (name);
    if (!copy || api_stmt_write (r, r->api, st, s_token_revoked, copy)) {
        free (copy);
        api_respond_error (r, 503, "out of memory");
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
