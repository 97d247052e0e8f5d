/*  actors/api/agents.c: the agents (docs/api.md "The agent object" and
    its routes): reads from SQLite, changes through lifecycle, and ?wait
    for a transition to end.                                            */
#include "actors/api/api_int.h"
#include "actors/desired.h"
#include "actors/sleeper.h"
#include "policy/values.h"

#include <string.h>

#define AGENT_SELECT \
    "SELECT a.id, a.name, CASE WHEN s.unreachable IS NULL THEN s.state ELSE 'unreachable' END," \
    " coalesce (s.unreachable, s.error), a.image, a.cpus, a.memory_mb, a.idle_minutes," \
    " s.needs_rebuild, a.created_at, s.last_activity_at, f.sleeps_at, f.why, a.tenant," \
    " s.home_lost, a.runtime, s.progress, s.stopped_at, s.container_removed_at, s.op," \
    " coalesce (s.connected, 0), a.idle_default, f.stops_at - f.sleeps_at, f.stops_at, s.frozen_at," \
    " a.harness" \
    " FROM agents a LEFT JOIN sandboxes s ON s.agent_id = a.id" \
    " LEFT JOIN sleep_forecast f ON f.agent_id = a.id"

bool api_transitional (const char *state)
{
    return state && (streq (state, "creating") || streq (state, "starting")
                     || streq (state, "stopping") || streq (state, "rebuilding")
                     || streq (state, "destroying") || streq (state, "freezing")
                     || streq (state, "thawing"));
}

bool api_thaw (req_t *r, const char *state, const char *why)
{
    if (!state || !(streq (state, "frozen") || streq (state, "freezing") || streq (state, "thawing")))
        return false;
    if (!streq (state, "thawing")) {
        ah_msg_t *msg = ah_msg_new ("SANDBOX_THAW");
        ah_msg_set_str (msg, "agent", r->agent_id);
        ah_msg_set_strf (msg, "by", "api:%s", r->who.token_name);
        ah_msg_set_str (msg, "reason", why);
        ah_actor_send (r->api->actor, "lifecycle", &msg);
        ah_info (AREA, "thawing agent '%s' (%s): %s", r->name, state, why);
    }
    return true;
}

//  When a stopped sandbox's lifetimes end (docs/lifecycle.md "Lifetimes";
//  sleeping, or in error but for a failed destroy): its container at
//  stopped_at + container_ttl (until it is removed), its home at its last
//  use + workspace_ttl (until it is gone), as they are in force (PUT
//  /api/v1/policy may have changed them). Null when the lifetime is off,
//  not running out (awake), or over.
static void s_lifetimes (const api_t *api, sqlite3_stmt *stmt, json_t *a, bool sleeping)
{
    double container_ttl = sleeping ? ah_policy_value (api->store, api->config, "container_ttl") : 0;
    double workspace_ttl = sleeping ? ah_policy_value (api->store, api->config, "workspace_ttl") : 0;
    bool stopped = sqlite3_column_type (stmt, 17) != SQLITE_NULL;
    int64_t stopped_at = sqlite3_column_int64 (stmt, 17);
    bool removed = sqlite3_column_type (stmt, 18) != SQLITE_NULL;
    bool home_lost = sqlite3_column_type (stmt, 14) != SQLITE_NULL;
    int64_t used = sqlite3_column_int64 (stmt, 10);
    if (stopped_at > used)
        used = stopped_at;
    json_object_set_new (a, "container_expires_at",
                         sleeping && stopped && !removed && container_ttl > 0
                         ? api_json_time (stopped_at + (int64_t) (container_ttl * 1000)) : json_null ());
    json_object_set_new (a, "workspace_expires_at",
                         sleeping && stopped && !home_lost && workspace_ttl > 0
                         ? api_json_time (used + (int64_t) (workspace_ttl * 1000)) : json_null ());
    json_object_set_new (a, "container_removed", json_boolean (removed));
}

//  When a running agent falls asleep if nothing more happens, and what
//  keeps it awake. The sleeper's forecast (sleep_forecast) is written on
//  its passes, every idle_check_interval: before its first pass on this
//  agent (just started or woken) there is none, and a use since its last
//  pass moved the time on. So the forecast is taken with the rule every
//  idle.lua starts from: idle_minutes after the last use (or after the
//  start of this server, as the sleeper counts it), whichever is later
//  (ah_sleeper_sleeps_at, the sleeper's own rule).
//  stops_at: when the ladder stops it (lua/idle.lua): for a running
//  agent, sleeps_at (when it is frozen) plus the freezing time of the
//  sleeper's last verdict (null before its first); for a frozen one, the
//  sleeper's forecast of its stop.
static void s_sleeps_at (const api_t *api, sqlite3_stmt *stmt, json_t *a, bool running, bool frozen)
{
    //  Why the idle ladder skips frozen here (null: it freezes first).
    const char *no_freeze = api->config ? ah_config_no_freeze (api->config) : NULL;
    json_object_set_new (a, "no_freeze", no_freeze ? json_string (no_freeze) : json_null ());
    json_object_set_new (a, "frozen_at", frozen && sqlite3_column_type (stmt, 24) != SQLITE_NULL
                         ? api_json_time (sqlite3_column_int64 (stmt, 24)) : json_null ());
    if (!running) {
        json_object_set_new (a, "sleeps_at", json_null ());
        json_object_set_new (a, "awake_because", json_null ());
        json_object_set_new (a, "stops_at", frozen && sqlite3_column_type (stmt, 23) != SQLITE_NULL
                             ? api_json_time (sqlite3_column_int64 (stmt, 23)) : json_null ());
        return;
    }
    int64_t used = sqlite3_column_int64 (stmt, 10);
    if (used < api->started_ms)
        used = api->started_ms;
    bool by_use;
    int64_t at = ah_sleeper_sleeps_at (used, sqlite3_column_double (stmt, 7),
                                       sqlite3_column_type (stmt, 11) != SQLITE_NULL,
                                       sqlite3_column_int64 (stmt, 11), &by_use);
    json_object_set_new (a, "sleeps_at", api_json_time (at));
    json_object_set_new (a, "stops_at", sqlite3_column_type (stmt, 22) != SQLITE_NULL
                         ? api_json_time (at + sqlite3_column_int64 (stmt, 22)) : json_null ());
    json_object_set_new (a, "awake_because", by_use ? json_string ("recent use") : api_json_column (stmt, 12));
}

//  An admin's harness override as the agent object and the audit show
//  it: its command, and its environment's names (their values may be
//  keys: never shown). h NULL or not an object: null.
static json_t *s_harness_shown (json_t *h)
{
    if (!json_is_object (h))
        return json_null ();
    json_t *names = json_array ();
    const char *key;
    json_t *value;
    json_object_foreach (json_object_get (h, "env"), key, value)
        json_array_append_new (names, api_json_text (key));
    json_t *command = json_array ();
    size_t i;
    json_array_foreach (json_object_get (h, "command"), i, value)
        json_array_append_new (command, api_json_text (json_string_value (value)));
    return json_pack ("{s:o s:o}", "command", command, "env", names);
}

static json_t *s_row (const api_t *api, sqlite3_stmt *stmt)
{
    json_t *a = json_object ();
    json_object_set_new (a, "id", api_json_column (stmt, 0));
    json_object_set_new (a, "name", api_json_column (stmt, 1));
    json_object_set_new (a, "state", api_json_column (stmt, 2));
    json_object_set_new (a, "error", api_json_column (stmt, 3));
    json_object_set_new (a, "image", api_json_column (stmt, 4));
    json_object_set_new (a, "cpus", json_real (sqlite3_column_double (stmt, 5)));
    json_object_set_new (a, "memory_mb", json_integer (sqlite3_column_int64 (stmt, 6)));
    json_object_set_new (a, "idle_minutes", json_real (sqlite3_column_double (stmt, 7)));
    json_object_set_new (a, "needs_rebuild", json_boolean (sqlite3_column_int (stmt, 8) != 0));
    json_object_set_new (a, "created_at", api_json_time (sqlite3_column_int64 (stmt, 9)));
    json_object_set_new (a, "last_activity_at",
                         sqlite3_column_type (stmt, 10) == SQLITE_NULL
                         ? json_null () : api_json_time (sqlite3_column_int64 (stmt, 10)));
    //  The sleeper's forecast means something only while it runs.
    bool running = sqlite3_column_type (stmt, 2) != SQLITE_NULL
                && streq ((const char *) sqlite3_column_text (stmt, 2), "running");
    bool frozen = sqlite3_column_type (stmt, 2) != SQLITE_NULL
               && streq ((const char *) sqlite3_column_text (stmt, 2), "frozen");
    s_sleeps_at (api, stmt, a, running, frozen);
    //  Its sandboxd holds the tunnel now (lifecycle's word): false while
    //  a running agent's sandboxd redials (after a server restart).
    json_object_set_new (a, "connected", json_boolean (sqlite3_column_int (stmt, 20) != 0));
    json_object_set_new (a, "idle_default", json_boolean (sqlite3_column_int (stmt, 21) != 0));
    json_object_set_new (a, "tenant", api_json_column (stmt, 13));
    json_object_set_new (a, "home_lost", api_json_column (stmt, 14));
    json_object_set_new (a, "runtime", api_json_column (stmt, 15));
    const char *harness = (const char *) sqlite3_column_text (stmt, 25);
    json_t *h = harness ? json_loads (harness, 0, NULL) : NULL;
    json_object_set_new (a, "harness", s_harness_shown (h));
    json_decref (h);
    //  While a transition waits for its runtime's image: what the build does.
    bool moving = sqlite3_column_type (stmt, 2) != SQLITE_NULL
               && api_transitional ((const char *) sqlite3_column_text (stmt, 2));
    json_object_set_new (a, "progress", moving ? api_json_column (stmt, 16) : json_null ());
    const char *state = (const char *) sqlite3_column_text (stmt, 2);
    const char *op = (const char *) sqlite3_column_text (stmt, 19);
    bool stopped = state && (streq (state, "sleeping")
                             || (streq (state, "error") && !(op && streq (op, "destroy"))));
    s_lifetimes (api, stmt, a, stopped);
    return a;
}

json_t *api_agent_get (api_t *api, const char *key, const char *scope, int *status)
{
    char id [AH_AGENT_ID_LEN + 1];
    int found = ah_store_agent_find (api->store, key, scope, id, sizeof id);
    if (found != 1) {
        *status = found == 0 ? 404 : found == -2 ? 409 : 500;
        return NULL;
    }
    sqlite3_stmt *stmt = ah_store_prepare (api->store, AGENT_SELECT " WHERE a.id = :id");
    if (!stmt || ah_store_bind_text (stmt, ":id", id)) {
        *status = 500;
        return NULL;
    }
    json_t *agent = NULL;
    int rc = ah_store_step (api->store, stmt);
    *status = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? 404 : 500;
    if (rc == SQLITE_ROW)
        agent = s_row (api, stmt);
    sqlite3_reset (stmt);
    return agent;
}

json_t *api_agent_resolve (req_t *r)
{
    const char *key = r->params [0];
    if (!ah_ident_ok (AH_IDENT_AGENT_NAME, key) && !ah_ident_ok (AH_IDENT_AGENT_ID, key)) {
        api_respond_error (r, 400, "'%s' is neither an agent name nor an agent id: an agent name %s",
                           key, ah_ident_check (AH_IDENT_AGENT_NAME, key));
        return NULL;
    }
    int status;
    json_t *agent = api_agent_get (r->api, key, r->who.scope, &status);
    if (!agent) {
        if (status == 404)
            api_respond_error (r, 404, "no agent named '%s'", key);
        else if (status == 409) {
            char why [160];
            api_respond_error (r, 409, "%s", ah_store_agent_ambiguous (key, why, sizeof why));
        }
        else
            api_respond_error (r, 500, "cannot read the database");
        return NULL;
    }
    snprintf (r->agent_id, sizeof r->agent_id, "%s", json_string_value (json_object_get (agent, "id")));
    const char *name = json_string_value (json_object_get (agent, "name"));
    snprintf (r->name, sizeof r->name, "%s", name ? name : key);
    api_turn_run (r);               //  what it does is its open turn's, if any
    return agent;
}

//  The agent as it is now, for a response; a stand-in when it is gone.
static json_t *s_agent_now (req_t *r, const char *state_if_gone)
{
    int status;
    json_t *agent = api_agent_get (r->api, r->agent_id [0] ? r->agent_id : r->name, r->who.scope, &status);
    if (!agent) {
        agent = json_object ();
        json_object_set_new (agent, "id", api_json_text (r->agent_id));
        json_object_set_new (agent, "name", api_json_text (r->name));
        json_object_set_new (agent, "state", json_string (state_if_gone));
    }
    return agent;
}

//  ?wait=1 [&timeout=S]: 0, or -1 answered 400.
static int s_wait_query (req_t *r, bool *wait, int64_t *timeout_s)
{
    *wait = false;
    *timeout_s = AH_API_WAIT_DEFAULT_S;
    return api_query_bool (r, "wait", wait) || api_query_int (r, "timeout", 1, AH_API_WAIT_MAX_S, timeout_s)
         ? -1 : 0;
}

//  A parked ?wait request: answer it once the transition has ended.
static void s_wait_check (req_t *r)
{
    int status;
    json_t *agent = api_agent_get (r->api, r->agent_id, "", &status);
    if (!agent && status == 500)
        return;                     //  again at the next tick
    bool destroy = streq (r->kind ? r->kind : "", "destroy");
    if (!agent) {
        api_unpark (r);
        if (destroy) {
            agent = json_object ();
            json_object_set_new (agent, "id", api_json_text (r->agent_id));
            json_object_set_new (agent, "name", api_json_text (r->name));
            json_object_set_new (agent, "state", json_string ("destroyed"));
            api_respond (r, 200, agent);
        }
        else
            api_respond_error (r, 404, "agent '%s' was destroyed", r->name);
        return;
    }
    const char *state = json_string_value (json_object_get (agent, "state"));
    if (api_transitional (state)) {
        json_decref (agent);
        return;
    }
    api_unpark (r);
    api_respond (r, streq (r->kind, "create") ? 201 : 200, agent);
}

static void s_wait_deadline (req_t *r)
{
    int status;
    json_t *agent = api_agent_get (r->api, r->agent_id, "", &status);
    const char *state = agent ? json_string_value (json_object_get (agent, "state")) : NULL;
    bool wait;
    int64_t timeout_s;
    s_wait_query (r, &wait, &timeout_s);
    api_respond_error (r, 504, "agent '%s' is still %s after %lld s", r->name,
                       state ? state : "changing", (long long) timeout_s);
    json_decref (agent);
}

//  A successful lifecycle REPLY: the agent as it is now, or a wait.
static void s_lifecycle_reply (req_t *r, ah_msg_t *msg)
{
    const char *agent_id = ah_msg_str (msg, "agent_id");
    if (agent_id && !r->agent_id [0])
        snprintf (r->agent_id, sizeof r->agent_id, "%s", agent_id);
    api_record (r, true, NULL);
    bool wait;
    int64_t timeout_s;
    s_wait_query (r, &wait, &timeout_s);        //  checked before asking
    bool create = streq (r->kind, "create");
    if (create && !r->agent_id [0]) {
        api_respond_error (r, 500, "lifecycle created the agent but did not say its id");
        return;
    }
    if (streq (r->kind, "update")) {
        api_respond (r, 200, s_agent_now (r, "destroyed"));
        return;
    }
    if (wait) {
        r->on_state = s_wait_check;
        r->on_deadline = s_wait_deadline;
        api_park (r, zclock_mono () + timeout_s * 1000);
        s_wait_check (r);
        return;
    }
    if (create) {
        json_t *agent = s_agent_now (r, "creating");
        if (ah_msg_bool (msg, "warm", false))       //  taken from a warm pool: running already
            json_object_set_new (agent, "warm", json_true ());
        api_respond (r, 201, agent);
        return;
    }
    //  202: the transition won; 200: already there or on its way.
    json_t *agent = s_agent_now (r, "destroying");
    const char *state = ah_msg_str (msg, "state");
    if (state && *state)
        json_object_set_new (agent, "state", api_json_text (state));
    int status = (int) ah_msg_int (msg, "status", 202);
    api_respond (r, status >= 200 && status < 300 ? status : 202, agent);
}

//  --------------------------------------------------------------------
//  Routes

static const body_field_t s_create_fields [] = {
    { "name", B_STR, NULL }, { "image", B_STR, NULL }, { "runtime", B_STR, NULL }, { "cpus", B_NUM, NULL },
    { "memory_mb", B_NUM, NULL }, { "idle_minutes", B_NUM, NULL }, { "harness", B_OBJ, NULL }, { NULL, 0, NULL }
};
//  "name" is taken to say it cannot change; idle_minutes null: follow the
//  default idle timeout again.
static const body_field_t s_update_fields [] = {
    { "name", B_STR, NULL }, { "image", B_STR, NULL }, { "runtime", B_STR, NULL }, { "cpus", B_NUM, NULL },
    { "memory_mb", B_NUM, NULL }, { "idle_minutes", B_NUM | B_NULL, NULL }, { "harness", B_OBJ | B_NULL, NULL },
    { NULL, 0, NULL }
};

//  The body's fields into msg, checked as lifecycle checks them
//  (actors/desired.h). 0, or -1 answered 400.
static int s_desired (req_t *r, json_t *obj, ah_msg_t *msg)
{
    api_copy_fields (obj, msg);
    //  Which program runs as the agent's harness is an admin's choice
    //  (docs/conversations.md "Choosing the harness"): it runs in the
    //  sandbox with the agent's home and is sent every prompt.
    json_t *harness = json_object_get (obj, "harness");
    if (harness && !r->who.admin) {
        api_respond_error (r, 403, "field 'harness' (the program that runs as the agent's harness) is "
                           "an admin's to set; token '%s' is a tenant's", r->who.token_name);
        return -1;
    }
    if (json_is_object (harness)) {
        char *text = json_dumps (harness, JSON_COMPACT | JSON_SORT_KEYS);
        if (!text) {
            api_respond_error (r, 503, "out of memory");
            return -1;
        }
        ah_msg_set_str (msg, "harness", text);
        free (text);
    }
    char why [1200];
    if (ah_desired_check (msg, why, sizeof why)) {
        api_respond_error (r, 400, "%s", why);
        return -1;
    }
    return 0;
}

static void s_list (req_t *r)
{
    sqlite3_stmt *stmt = ah_store_prepare (r->api->store,
        AGENT_SELECT " WHERE a.pool IS NULL AND (:scope = '' OR a.tenant = :scope) ORDER BY a.tenant, a.name");
    if (stmt && ah_store_bind_text (stmt, ":scope", r->who.scope))
        stmt = NULL;
    json_t *list = stmt ? json_array () : NULL;
    int rc = SQLITE_ERROR;
    while (stmt && (rc = ah_store_step (r->api->store, stmt)) == SQLITE_ROW)
        json_array_append_new (list, s_row (r->api, stmt));
    if (stmt)
        sqlite3_reset (stmt);
    if (rc != SQLITE_DONE) {
        json_decref (list);
        api_respond_error (r, 500, "cannot read the database");
        return;
    }
    api_respond (r, 200, json_pack ("{s:o}", "agents", list));
}

static void s_create (req_t *r)
{
    bool wait;
    int64_t timeout_s;
    if (s_wait_query (r, &wait, &timeout_s))
        return;
    json_t *obj = api_body_object (r, false);
    if (!obj)
        return;
    ah_msg_t *msg = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_strf (msg, "by", "api:%s", r->who.token_name);
    if (s_desired (r, obj, msg))
        goto out;
    const char *name = ah_msg_str (msg, "name");
    const char *why = name ? ah_ident_check (AH_IDENT_AGENT_NAME, name) : NULL;
    if (!name)
        api_respond_error (r, 400, "field 'name' is required");
    else if (why)
        api_respond_error (r, 400, "field 'name': agent name '%s' %s", name, why);
    else {
        snprintf (r->name, sizeof r->name, "%s", name);
        snprintf (r->detail, sizeof r->detail, "%s", name);
        ah_msg_set_str (msg, "tenant", api_tenant (r));
        r->kind = "create";
        api_ask (r, "lifecycle", &msg, s_lifecycle_reply);
    }
out:
    ah_msg_destroy (&msg);
    json_decref (obj);
}

static void s_show (req_t *r)
{
    json_t *agent = api_agent_resolve (r);
    if (agent)
        api_respond (r, 200, agent);
}

static void s_update (req_t *r)
{
    json_t *obj = api_body_object (r, false);
    if (!obj)
        return;
    ah_msg_t *msg = ah_msg_new ("AGENT_UPDATE");
    json_t *agent = NULL;
    if (json_object_get (obj, "name"))
        api_respond_error (r, 400, "field 'name' cannot be changed");
    else if (s_desired (r, obj, msg))
        ;
    else if (json_object_size (obj) == 0)
        api_respond_error (r, 400, "nothing to change: give runtime, image, cpus, memory_mb, idle_minutes or harness");
    else if ((agent = api_agent_resolve (r))) {
        ah_msg_set_str (msg, "agent", r->agent_id);
        //  The audit detail: the fields asked for, as compact JSON (a
        //  harness as the agent object shows it: no environment values).
        if (json_object_get (obj, "harness"))
            json_object_set_new (obj, "harness", s_harness_shown (json_object_get (obj, "harness")));
        char *fields = json_dumps (obj, JSON_COMPACT | JSON_SORT_KEYS);
        snprintf (r->detail, sizeof r->detail, "%s", fields ? fields : "");
        free (fields);
        r->kind = "update";
        api_ask (r, "lifecycle", &msg, s_lifecycle_reply);
    }
    json_decref (agent);
    ah_msg_destroy (&msg);
    json_decref (obj);
}

static void s_transition (req_t *r, const char *type, const char *kind)
{
    bool wait;
    int64_t timeout_s;
    if (s_wait_query (r, &wait, &timeout_s))
        return;
    json_t *agent = api_agent_resolve (r);
    if (!agent)
        return;
    json_decref (agent);
    ah_msg_t *msg = ah_msg_new (type);
    ah_msg_set_str (msg, "agent", r->agent_id);
    ah_msg_set_strf (msg, "by", "api:%s", r->who.token_name);
    if (streq (kind, "stop"))
        ah_msg_set_strf (msg, "reason", "api:%s", r->who.token_name);
    if (streq (kind, "start"))
        api_activity (r->api, r->agent_id, "start");
    snprintf (r->detail, sizeof r->detail, "%s", r->name);
    r->kind = kind;
    api_ask (r, "lifecycle", &msg, s_lifecycle_reply);
}

//  GET /agents/{agent}/briefing: the briefing of the agent's runtime, as
//  the sandbox has it in /etc/agenthold/briefing.md.
static void s_briefing_reply (req_t *r, ah_msg_t *msg)
{
    const char *text = ah_msg_str (msg, "text");
    json_t *body = json_object ();
    json_object_set_new (body, "agent", api_json_text (r->name));
    json_object_set_new (body, "runtime", api_json_text (ah_msg_str (msg, "runtime") ? ah_msg_str (msg, "runtime") : ""));
    json_object_set_new (body, "text", text ? api_json_text (text) : json_null ());
    api_respond (r, 200, body);
}

static void s_briefing (req_t *r)
{
    json_t *agent = api_agent_resolve (r);
    if (!agent)
        return;
    const char *runtime = json_string_value (json_object_get (agent, "runtime"));
    snprintf (r->name, sizeof r->name, "%s", json_string_value (json_object_get (agent, "name")));
    if (!runtime)
        api_respond_error (r, 404, "agent '%s' runs an image outside the catalog (%s): it has no briefing",
                           r->name, json_string_value (json_object_get (agent, "image")));
    else {
        ah_msg_t *msg = ah_msg_new ("BRIEFING");
        ah_msg_set_str (msg, "runtime", runtime);
        api_ask (r, "builder", &msg, s_briefing_reply);
    }
    json_decref (agent);
}

static void s_start (req_t *r)   { s_transition (r, "SANDBOX_START", "start"); }
static void s_stop (req_t *r)    { s_transition (r, "SANDBOX_STOP", "stop"); }
static void s_rebuild (req_t *r) { s_transition (r, "SANDBOX_REBUILD", "rebuild"); }
static void s_destroy (req_t *r) { s_transition (r, "SANDBOX_DESTROY", "destroy"); }

const route_t api_agent_routes [] = {
    { M_GET, "/api/v1/agents", s_list, 0, "", NULL },
    { M_POST, "/api/v1/agents", s_create, R_BODY, "wait timeout", s_create_fields },
    { M_GET, "/api/v1/agents/{agent}", s_show, 0, "", NULL },
    { M_GET, "/api/v1/agents/{agent}/briefing", s_briefing, 0, "", NULL },
    { M_PATCH, "/api/v1/agents/{agent}", s_update, R_BODY, "", s_update_fields },
    { M_DELETE, "/api/v1/agents/{agent}", s_destroy, R_BODY, "wait timeout", api_no_body },
    { M_POST, "/api/v1/agents/{agent}/start", s_start, R_BODY, "wait timeout", api_no_body },
    { M_POST, "/api/v1/agents/{agent}/stop", s_stop, R_BODY, "wait timeout", api_no_body },
    { M_POST, "/api/v1/agents/{agent}/rebuild", s_rebuild, R_BODY, "wait timeout", api_no_body },
    { 0 }
};
