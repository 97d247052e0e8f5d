/*  actors/api/audit.c: the audit trail (from the recorder) and the
    policies' status (docs/api.md "Operations", "Policy").              */
#include "actors/api/api_int.h"
#include "common/bounds.h"
#include "policy/values.h"

//  The recorder's answer; gone: the agent is not there (destroyed, or
//  never within the caller's tenant), so a trail with nothing of the
//  caller's is a 404, as for an agent that never was.
static void s_answer (req_t *r, ah_msg_t *msg, bool gone)
{
    json_t *ops = api_json_raw (msg, "operations");
    if (!json_is_array (ops)) {
        json_decref (ops);
        api_respond_error (r, 502, "the recorder answered without operations");
        return;
    }
    if (gone && json_array_size (ops) == 0 && !api_query (r, "before")) {
        json_decref (ops);
        api_respond_error (r, 404, "no agent '%s'", r->agent_id);
        return;
    }
    size_t i;
    json_t *op;
    json_array_foreach (ops, i, op) {
        json_t *at = json_object_get (op, "at");
        if (json_is_integer (at)) {
            json_int_t ms = json_integer_value (at);
            json_object_set_new (op, "at_ms", json_integer (ms));
            json_object_set_new (op, "at", api_json_time (ms));
        }
    }
    json_t *body = json_pack ("{s:o}", "operations", ops);
    int64_t next = ah_msg_int (msg, "next", 0);
    json_object_set_new (body, "next", next > 0 ? json_integer (next) : json_null ());
    api_respond (r, 200, body);
}

static void s_operations_reply (req_t *r, ah_msg_t *msg)
{
    s_answer (r, msg, false);
}

static void s_gone_reply (req_t *r, ah_msg_t *msg)
{
    s_answer (r, msg, true);
}

//  OP_LIST for one agent (agent_id) or all (NULL: ?agent= may name one,
//  by id or name, gone or not); the filters of docs/api.md "Operations".
static void s_list (req_t *r, const char *agent_id, reply_fn *reply)
{
    int64_t limit = 0, before = 0;
    bool failed = false;
    if (api_query_int (r, "limit", 1, 1000, &limit) || api_query_int (r, "before", 1, INT64_MAX, &before)
    ||  api_query_bool (r, "failed", &failed))
        return;
    const char *agent = agent_id ? agent_id : api_query (r, "agent");
    const char *kind = api_query (r, "operation");
    const char *run = api_query (r, "run");
    const char *text = api_query (r, "q");
    if (agent && !ah_ident_ok (AH_IDENT_AGENT_NAME, agent) && !ah_ident_ok (AH_IDENT_AGENT_ID, agent)) {
        api_respond_error (r, 400, "query 'agent' must be an agent's name or id");
        return;
    }
    if (kind && (!*kind || strlen (kind) > 64)) {
        api_respond_error (r, 400, "query 'operation' must be 1 to 64 characters (e.g. exec, fs.read, state)");
        return;
    }
    const char *bad = run ? api_run_check (run) : NULL;
    if (bad) {
        api_respond_error (r, 400, "query 'run' %s", bad);
        return;
    }
    if (text && (!*text || strlen (text) > 256)) {
        api_respond_error (r, 400, "query 'q' must be 1 to 256 characters");
        return;
    }
    ah_msg_t *msg = ah_msg_new ("OP_LIST");
    if (agent)
        ah_msg_set_str (msg, "agent_id", agent);
    if (kind)
        ah_msg_set_str (msg, "kind", kind);
    if (run)
        ah_msg_set_str (msg, "run", run);
    if (text)
        ah_msg_set_str (msg, "q", text);
    if (failed)
        ah_msg_set_bool (msg, "failed", true);
    if (r->who.scope [0])
        ah_msg_set_str (msg, "tenant", r->who.scope);
    if (limit)
        ah_msg_set_int (msg, "limit", limit);
    if (before)
        ah_msg_set_int (msg, "before", before);
    api_ask (r, "recorder", &msg, reply);
}

static void s_all (req_t *r)
{
    s_list (r, NULL, s_operations_reply);
}

//  A destroyed agent's trail stays readable by its id.
static void s_agent (req_t *r)
{
    const char *key = r->params [0];
    int status = 404;
    json_t *agent = ah_ident_ok (AH_IDENT_AGENT_NAME, key) || ah_ident_ok (AH_IDENT_AGENT_ID, key)
                  ? api_agent_get (r->api, key, r->who.scope, &status) : NULL;
    if (agent) {
        snprintf (r->agent_id, sizeof r->agent_id, "%s", json_string_value (json_object_get (agent, "id")));
        json_decref (agent);
        s_list (r, r->agent_id, s_operations_reply);
    }
    else if (status == 404 && (ah_ident_ok (AH_IDENT_AGENT_ID, key) || ah_ident_ok (AH_IDENT_AGENT_NAME, key))) {
        //  A destroyed agent's trail, read by its id or the name its rows
        //  kept (within the scope: the recorder filters by tenant too).
        snprintf (r->agent_id, sizeof r->agent_id, "%s", key);
        s_list (r, key, s_gone_reply);
    }
    else {
        json_t *again = api_agent_resolve (r);      //  answers 400, 404 or 500
        if (again) {
            json_decref (again);
            s_list (r, r->agent_id, s_operations_reply);
        }
    }
}

//  The values in force (policy/values.h): the configuration, then
//  policy_values; whole numbers where the value's bound is whole.
static json_t *s_values_json (req_t *r)
{
    json_t *values = json_object ();
    const ah_policy_value_t *p;
    for (size_t i = 0; (p = ah_policy_value_at (i)); i++) {
        double v = ah_policy_value (r->api->store, r->api->config, p->key);
        const ah_bound_t *b = ah_bound (p->key);
        json_object_set_new (values, p->key, b && b->whole ? json_integer ((json_int_t) v) : json_real (v));
    }
    return values;
}

static void s_policies (req_t *r)
{
    sqlite3_stmt *stmt = ah_store_prepare (r->api->store,
        "SELECT holder, script, loaded_at, error, error_at FROM policy_status ORDER BY holder, script");
    json_t *list = stmt ? json_array () : NULL;
    int rc = SQLITE_ERROR;
    while (stmt && (rc = ah_store_step (r->api->store, stmt)) == SQLITE_ROW) {
        json_t *p = json_object ();
        json_object_set_new (p, "holder", api_json_column (stmt, 0));
        json_object_set_new (p, "script", api_json_column (stmt, 1));
        json_object_set_new (p, "loaded_at", api_json_time (sqlite3_column_int64 (stmt, 2)));
        json_object_set_new (p, "error", api_json_column (stmt, 3));
        json_object_set_new (p, "error_at", api_json_time (sqlite3_column_int64 (stmt, 4)));
        json_array_append_new (list, p);
    }
    if (stmt)
        sqlite3_reset (stmt);
    if (rc != SQLITE_DONE) {
        json_decref (list);
        api_respond_error (r, 500, "cannot read the database");
        return;
    }
    api_respond (r, 200, json_pack ("{s:o, s:o}", "policies", list, "values", s_values_json (r)));
}

//  Its body: the values of policy/values.h, each a number within its
//  bound (common/bounds.h) or null; and what the seed keeps out of the
//  policy, each refused with why (the deployment fixes it: a change
//  would alter what every sandbox is, not how many or for how long).
#define CATALOG_HERE "the runtime catalog is not changed here: edit catalog/runtimes.json " \
                     "(its composition is part of the deployment)"
#define NETWORK_HERE "the network mode is not changed here: each sandbox has its own internal network, " \
                     "and whether a runtime gets a way out is its needs_network in catalog/runtimes.json " \
                     "(the isolation is part of the deployment)"
#define OCI_HERE     "the OCI runtime is not changed here: it is sandbox.docker.runtime in the configuration, " \
                     "read at start (the isolation is part of the deployment)"
#define RUNTIME_HERE "neither the OCI runtime (sandbox.docker.runtime in the configuration) nor the runtime " \
                     "catalog (catalog/runtimes.json) is changed here: both are part of the deployment"
#define UID_HERE     "the sandbox's uid is not changed here: commands run as the image's account (agent, " \
                     "else its USER, else uid 10001), never root (the isolation is part of the deployment)"
#define WORKDIR_HERE "the work directory is not changed here: it is /home/agent, the agent's home, kept " \
                     "while the agent sleeps (part of the deployment)"
#define PERSIST_HERE "whether containers persist is not changed here: a sleeping agent's container is kept " \
                     "until container_ttl and its home until workspace_ttl, which are changed here"
static const body_field_t s_values_fields [] = {
    { "tenant_max_sandboxes", B_NUM | B_NULL, NULL }, { "pool_max_sandboxes", B_NUM | B_NULL, NULL },
    { "tenant_max_running", B_NUM | B_NULL, NULL }, { "pool_max_running", B_NUM | B_NULL, NULL },
    { "idle_minutes", B_NUM | B_NULL, NULL }, { "container_ttl", B_NUM | B_NULL, NULL },
    { "workspace_ttl", B_NUM | B_NULL, NULL }, { "max_exec_timeout", B_NUM | B_NULL, NULL },
    { "runtimes", 0, CATALOG_HERE }, { "catalog", 0, CATALOG_HERE },
    { "network_mode", 0, NETWORK_HERE }, { "network", 0, NETWORK_HERE }, { "needs_network", 0, NETWORK_HERE },
    { "oci_runtime", 0, OCI_HERE }, { "runtime", 0, RUNTIME_HERE },
    { "uid", 0, UID_HERE }, { "user", 0, UID_HERE },
    { "workdir", 0, WORKDIR_HERE }, { "work_dir", 0, WORKDIR_HERE },
    { "persist", 0, PERSIST_HERE }, { "persistent", 0, PERSIST_HERE },
    { NULL, 0, NULL }
};

//  PUT /api/v1/policy {KEY: number or null}: changes the values of
//  policy/values.h, at once and without a restart; null goes back to the
//  configuration's value. Lifecycle hears of it (POLICY_VALUES, sent and
//  not waited for) to move the agents that follow the default idle
//  timeout; every other reader reads the table at its next decision.
//  The writer's (a worker): the values in one transaction.
static int s_values_write (ah_store_t *store, void *arg, char *why, size_t size)
{
    json_t *obj = arg;
    const char *key;
    json_t *v;
    bool ok = ah_store_begin (store) == 0;
    json_object_foreach (obj, key, v) {
        sqlite3_stmt *st = ok ? ah_store_prepare (store, json_is_null (v)
            ? "DELETE FROM policy_values WHERE key = :key"
            : "INSERT OR REPLACE INTO policy_values (key, value, updated_at) VALUES (:key, :value, :now)") : NULL;
        ok = st && !ah_store_bind_text (st, ":key", key)
          && (json_is_null (v) || (!ah_store_bind_double (st, ":value", json_number_value (v))
                                   && !ah_store_bind_int64 (st, ":now", ah_store_now_ms ())))
          && ah_store_step (store, st) == SQLITE_DONE;
        if (st)
            sqlite3_reset (st);
    }
    if (!ok || ah_store_commit (store)) {
        ah_store_rollback (store);
        snprintf (why, size, "cannot write the policy values");
        return 500;
    }
    return 0;
}

static void s_values_written (api_t *api, req_t *r, void *arg, int status, const char *why)
{
    json_t *obj = arg;
    char *text = status ? NULL : json_dumps (obj, JSON_COMPACT | JSON_SORT_KEYS);
    if (!status) {
        ah_info (AREA, "policy values changed by %s: %s", r ? r->who.token_name : "a client that left",
                 text ? text : "?");
        ah_msg_t *told = ah_msg_new ("POLICY_VALUES");
        api_send (api, "lifecycle", &told);
    }
    if (r) {
        r->kind = "policy";
        snprintf (r->detail, sizeof r->detail, "%s", text ? text : "");
        api_record (r, status == 0, status ? why : NULL);
        if (status)
            api_respond_error (r, status, "%s", why);
        else
            api_respond (r, 200, json_pack ("{s:o}", "values", s_values_json (r)));
    }
    free (text);
    json_decref (obj);
}

static void s_put_values (req_t *r)
{
    json_t *obj = api_body_object (r, false);
    if (!obj)
        return;
    if (json_object_size (obj) == 0) {
        api_respond_error (r, 400, "nothing to change");
        json_decref (obj);
        return;
    }
    if (api_write (r, r->api, s_values_write, s_values_written, obj)) {
        json_decref (obj);
        api_respond_error (r, 503, "out of memory");
    }
}

static void s_reload (req_t *r)
{
    static const char *holders [] = { "lifecycle", "sleeper", "builder", "conversations" };
    json_t *sent = json_array ();
    for (size_t i = 0; i < sizeof holders / sizeof holders [0]; i++) {
        ah_msg_t *msg = ah_msg_new ("POLICY_RELOAD");
        if (api_send (r->api, holders [i], &msg) == 0)
            json_array_append_new (sent, json_string (holders [i]));
    }
    api_respond (r, 202, json_pack ("{s:b, s:o}", "ok", 1, "sent_to", sent));
}

const route_t api_audit_routes [] = {
    { M_GET, "/api/v1/operations", s_all, 0, "limit before agent operation run failed q", NULL },
    { M_GET, "/api/v1/agents/{agent}/operations", s_agent, 0, "limit before operation run failed q", NULL },
    { M_GET, "/api/v1/policy", s_policies, 0, "", NULL },
    { M_PUT, "/api/v1/policy", s_put_values, R_BODY | R_ADMIN, "", s_values_fields },
    { M_POST, "/api/v1/policy/reload", s_reload, R_BODY | R_ADMIN, "", api_no_body },
    { 0 }
};
