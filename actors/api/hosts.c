/*  actors/api/hosts.c: the host agents (docs/api.md "Hosts"): each one
    as the server last found it (the hosts table, written by lifecycle on
    the reconciler's HOST_STATE), with how many sandboxes it holds that
    are unreachable. For admins: a host is the installation's, not a
    tenant's.                                                            */
#include "actors/api/api_int.h"

static void s_list (req_t *r)
{
    ah_store_t *store = r->api->store;
    sqlite3_stmt *st = ah_store_prepare (store,
        "SELECT name, endpoint, state, version, protocol, error, seen_at, updated_at,"
        " (SELECT count(*) FROM sandboxes WHERE unreachable IS NOT NULL)"
        " FROM hosts ORDER BY name");
    if (!st) {
        api_respond_error (r, 500, "cannot read the hosts table");
        return;
    }
    json_t *hosts = json_array ();
    int rc;
    while ((rc = ah_store_step (store, st)) == SQLITE_ROW) {
        json_t *h = json_object ();
        static const char *cols [] = { "name", "endpoint", "state", "version", "protocol", "error",
                                       "seen_at", "updated_at" };
        for (int i = 0; i < 8; i++)
            json_object_set_new (h, cols [i], sqlite3_column_type (st, i) == SQLITE_INTEGER
                                 ? json_integer (sqlite3_column_int64 (st, i))
                                 : api_json_column (st, i));
        json_object_set_new (h, "unreachable_sandboxes",
                             json_integer (streq ((const char *) sqlite3_column_text (st, 2), "up")
                                           ? 0 : sqlite3_column_int64 (st, 8)));
        json_array_append_new (hosts, h);
    }
    sqlite3_reset (st);
    if (rc != SQLITE_DONE) {
        json_decref (hosts);
        api_respond_error (r, 500, "cannot read the hosts table");
        return;
    }
    api_respond (r, 200, json_pack ("{s:o}", "hosts", hosts));
}

const route_t api_host_routes [] = {
    { M_GET, "/api/v1/hosts", s_list, R_ADMIN, "", NULL },
    { 0 }
};
