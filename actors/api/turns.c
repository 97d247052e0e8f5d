/*  actors/api/turns.c: turns, the leases an agent harness holds while it
    works (docs/api.md "Turns"), kept by the sleeper. A turn on an agent
    that is not running wakes it first (events.c) and starts once it runs. */
#include "actors/api/api_int.h"

//  Start and renew take a lease (common/bounds.h "lease_ms"); an end none.
static const body_field_t s_fields [] = { { "lease_ms", B_NUM, NULL }, { NULL, 0, NULL } };

//  TURN_START, TURN_RENEW: {turn_id, agent_id, expires_at}; TURN_END: ok.
static void s_reply (req_t *r, ah_msg_t *msg)
{
    json_t *body = json_object ();
    const char *turn_id = ah_msg_str (msg, "turn_id");
    json_object_set_new (body, "turn_id", api_json_text (turn_id ? turn_id : r->params [0]));
    if (turn_id && r->kind && streq (r->kind, "turn.begin")) {
        snprintf (r->detail, sizeof r->detail, "turn %.64s", turn_id);
        //  A turn that names no run is its own: its id is the run.
        snprintf (r->turn_run, sizeof r->turn_run, "%s", turn_id);
    }
    if (r->kind)
        api_record (r, true, NULL);
    if (streq (r->asked_type, "TURN_END")) {
        json_object_set_new (body, "ended", json_true ());
        api_respond (r, 200, body);
        return;
    }
    const char *agent_id = ah_msg_str (msg, "agent_id");
    json_object_set_new (body, "agent_id", agent_id ? api_json_text (agent_id) : json_null ());
    int64_t expires = ah_msg_int (msg, "expires_at", 0);
    json_object_set_new (body, "expires_at", api_json_time (expires));
    json_object_set_new (body, "expires_at_ms", json_integer (expires));
    api_respond (r, streq (r->asked_type, "TURN_START") ? 201 : 200, body);
}

//  The turn's own message: lease_ms from the body. NULL when answered.
static ah_msg_t *s_message (req_t *r, const char *type)
{
    json_t *obj = api_body_object (r, true);
    if (!obj)
        return NULL;
    ah_msg_t *msg = ah_msg_new (type);
    api_copy_fields (obj, msg);
    json_decref (obj);
    return msg;
}

static void s_begin (req_t *r)
{
    ah_msg_t *msg = s_message (r, "TURN_START");
    if (!msg)
        return;
    ah_msg_set_str (msg, "agent", r->agent_id);
    //  The run the turn works for, and whose turn it is: what this token
    //  does on the agent while the turn is open is recorded with the run.
    if (r->run [0])
        ah_msg_set_str (msg, "run", r->run);
    ah_msg_set_strf (msg, "actor", "api:%s", r->who.token_name);
    api_activity (r->api, r->agent_id, "turn");
    r->kind = "turn.begin";
    api_ask (r, "sleeper", &msg, s_reply);
}

static void s_woken (void *ctx, int status, const char *error)
{
    req_t *r = ctx;
    if (status)
        api_respond_error (r, status, "%s", error);
    else
        s_begin (r);
}

static void s_start (req_t *r)
{
    json_t *agent = api_agent_resolve (r);
    if (!agent)
        return;
    json_decref (agent);
    char why [300];
    int rc = ah_api_events_wake (r->api->events, r->agent_id, r, s_woken, AH_API_WAKE_TIMEOUT_S,
                                 why, sizeof why);
    if (rc == 0)
        s_begin (r);
    else if (rc != 1)
        api_respond_error (r, rc, "%s", why);
    //  1: s_woken comes back once it runs.
}

//  A turn of another tenant is no turn: 404 like one that does not exist.
static bool s_turn_in_scope (req_t *r)
{
    const char *id = r->params [0];
    sqlite3_stmt *st = ah_store_prepare (r->api->store,
        "SELECT a.tenant, a.id, a.name, coalesce (t.run, t.id) FROM turns t JOIN agents a ON a.id = t.agent_id"
        " WHERE t.id = :id");
    int rc = st && !ah_store_bind_text (st, ":id", id) ? ah_store_step (r->api->store, st) : SQLITE_ERROR;
    bool ok = rc == SQLITE_ROW && (!r->who.scope [0]
              || streq ((const char *) sqlite3_column_text (st, 0), r->who.scope));
    if (ok) {
        //  The agent, for the audit trail.
        snprintf (r->agent_id, sizeof r->agent_id, "%s", (const char *) sqlite3_column_text (st, 1));
        snprintf (r->name, sizeof r->name, "%s", (const char *) sqlite3_column_text (st, 2));
        snprintf (r->turn_run, sizeof r->turn_run, "%s", (const char *) sqlite3_column_text (st, 3));
    }
    else if (rc == SQLITE_DONE && !r->who.scope [0])
        ok = true;                  //  an admin: the sleeper says 404 itself
    if (st)
        sqlite3_reset (st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        api_respond_error (r, 500, "cannot read the turns");
    else if (!ok)
        api_respond_error (r, 404, "no turn '%.64s'", id);
    return ok;
}

static void s_renew (req_t *r)
{
    if (!s_turn_in_scope (r))
        return;
    ah_msg_t *msg = s_message (r, "TURN_RENEW");
    if (!msg)
        return;
    ah_msg_set_str (msg, "turn_id", r->params [0]);
    api_ask (r, "sleeper", &msg, s_reply);
}

static void s_end (req_t *r)
{
    if (!s_turn_in_scope (r))
        return;
    ah_msg_t *msg = s_message (r, "TURN_END");
    if (!msg)
        return;
    ah_msg_set_str (msg, "turn_id", r->params [0]);
    r->kind = "turn.end";
    snprintf (r->detail, sizeof r->detail, "turn %.64s", r->params [0]);
    api_ask (r, "sleeper", &msg, s_reply);
}

const route_t api_turn_routes [] = {
    { M_POST, "/api/v1/agents/{agent}/turns", s_start, R_BODY, "", s_fields },
    { M_POST, "/api/v1/turns/{turn}/renew", s_renew, R_BODY, "", s_fields },
    { M_DELETE, "/api/v1/turns/{turn}", s_end, R_BODY, "", api_no_body },
    { 0 }
};
