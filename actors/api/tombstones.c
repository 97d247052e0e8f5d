/*  actors/api/tombstones.c: the destroys still owed to the driver
    (docs/api.md "Tombstones"): listed from SQLite, forgotten through
    lifecycle (which owns the table). Admin tokens only.                */
#include "actors/api/api_int.h"

static void s_list (req_t *r)
{
    sqlite3_stmt *st = ah_store_prepare (r->api->store,
        "SELECT t.agent_id, a.name, a.tenant, t.at, t.attempts, t.next_at, t.last_error, s.state"
        " FROM tombstones t LEFT JOIN agents a ON a.id = t.agent_id"
        " LEFT JOIN sandboxes s ON s.agent_id = t.agent_id"
        " WHERE :scope = '' OR a.tenant = :scope ORDER BY t.at");
    if (!st || ah_store_bind_text (st, ":scope", r->who.scope)) {
        api_respond_error (r, 500, "cannot read the tombstones");
        return;
    }
    json_t *list = json_array ();
    int rc;
    while ((rc = ah_store_step (r->api->store, st)) == SQLITE_ROW) {
        json_t *t = json_object ();
        json_object_set_new (t, "agent_id", api_json_column (st, 0));
        json_object_set_new (t, "name", api_json_column (st, 1));
        json_object_set_new (t, "tenant", api_json_column (st, 2));
        json_object_set_new (t, "since", api_json_time (sqlite3_column_int64 (st, 3)));
        json_object_set_new (t, "attempts", json_integer (sqlite3_column_int64 (st, 4)));
        //  No next attempt: the first destroy is still in flight (or was
        //  interrupted; the start-up pass finishes it).
        json_object_set_new (t, "next_attempt_at", sqlite3_column_type (st, 5) == SQLITE_NULL
                             ? json_null () : api_json_time (sqlite3_column_int64 (st, 5)));
        json_object_set_new (t, "last_error", api_json_column (st, 6));
        json_object_set_new (t, "state", api_json_column (st, 7));
        json_array_append_new (list, t);
    }
    sqlite3_reset (st);
    if (rc != SQLITE_DONE) {
        json_decref (list);
        api_respond_error (r, 500, "cannot read the tombstones");
        return;
    }
    api_respond (r, 200, json_pack ("{s:o}", "tombstones", list));
}

//  Lifecycle records the forgetting (with its count); a refusal is
//  recorded here (r->kind).
static void s_forgotten (req_t *r, ah_msg_t *msg)
{
    api_respond (r, 200, json_pack ("{s:s, s:I}", "agent_id", r->agent_id,
                                    "forgotten", (json_int_t) ah_msg_int (msg, "forgotten", 0)));
}

static void s_forget (req_t *r)
{
    const char *id = r->params [0];
    if (!ah_ident_ok (AH_IDENT_AGENT_ID, id)) {
        api_respond_error (r, 400, "a tombstone is named by its agent's id (12 hex digits)");
        return;
    }
    snprintf (r->agent_id, sizeof r->agent_id, "%s", id);
    r->kind = "tombstone.forget";
    snprintf (r->detail, sizeof r->detail, "%s", id);
    ah_msg_t *msg = ah_msg_new ("TOMBSTONE_FORGET");
    ah_msg_set_str (msg, "agent", id);
    ah_msg_set_strf (msg, "by", "api:%s", r->who.token_name);
    api_ask (r, "lifecycle", &msg, s_forgotten);
}

const route_t api_tombstone_routes [] = {
    { M_GET, "/api/v1/tombstones", s_list, R_ADMIN, "", NULL },
    { M_DELETE, "/api/v1/tombstones/{agent}", s_forget, R_ADMIN, "", NULL },
    { 0 }
};
