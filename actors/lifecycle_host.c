/*  actors/lifecycle_host.c: what the lifecycle actor does when a host
    agent stops answering or comes back (HOST_STATE from the reconciler;
    docs/lifecycle.md "Unreachable", docs/hostd.md).

    unreachable is shown over the state a sandbox had: the row keeps
    `state` (running, sleeping) and `unreachable` says why, so that when
    the host answers again the flag goes and the reconciler's inspection
    moves the row as it would after any absence. Nothing is re-created:
    only an observation moves a row, and a container that is gone is an
    error for the user to decide on.                                   */
#include "actors/lifecycle_int.h"
#include "common/log.h"

#include <string.h>

//  Each row of the listed ids gets SANDBOX_STATE (state, or unreachable).
static void
s_publish_each (self_t *self, zlistx_t *ids, const char *why)
{
    for (const char *id = zlistx_first (ids); id; id = zlistx_next (ids)) {
        row_t row;
        if (ah_lc_lookup (self, id, &row) != 1)
            continue;
        if (why)
            ah_lc_publish (self, id, "unreachable", NULL, why);
        else
            ah_lc_publish (self, id, row.state, row.op, row.error);
    }
}

//  The ids the statement (with :why bound, or not) selects.
static zlistx_t *
s_ids (self_t *self, const char *sql)
{
    zlistx_t *ids = zlistx_new ();
    zlistx_set_destructor (ids, (zlistx_destructor_fn *) zstr_free);
    zlistx_set_duplicator (ids, (zlistx_duplicator_fn *) strdup);
    sqlite3_stmt *st = ah_store_prepare (self->store, sql);
    while (st && ah_store_step (self->store, st) == SQLITE_ROW) {
        const char *id = (const char *) sqlite3_column_text (st, 0);
        if (id)
            zlistx_add_end (ids, (void *) id);
    }
    if (st)
        sqlite3_reset (st);
    return ids;
}

static void
s_host_row (self_t *self, const ah_msg_t *msg, const char *state)
{
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "INSERT INTO hosts (name, endpoint, state, version, protocol, error, seen_at, updated_at)"
        " VALUES (:name, :endpoint, :state, :version, :protocol, :error,"
        "         CASE WHEN :state = 'up' THEN :now END, :now)"
        " ON CONFLICT (name) DO UPDATE SET endpoint = excluded.endpoint, state = excluded.state,"
        "  version = coalesce (excluded.version, version), protocol = coalesce (excluded.protocol, protocol),"
        "  error = excluded.error, seen_at = coalesce (excluded.seen_at, seen_at),"
        "  updated_at = excluded.updated_at");
    const char *version = ah_msg_str (msg, "version");
    int64_t protocol = ah_msg_int (msg, "protocol", 0);
    if (!st || ah_store_bind_text (st, ":name", ah_msg_str (msg, "host"))
    ||  ah_store_bind_text (st, ":endpoint", ah_msg_str (msg, "endpoint"))
    ||  ah_store_bind_text (st, ":state", state)
    ||  ah_store_bind_text (st, ":version", version)
    ||  (protocol ? ah_store_bind_int64 (st, ":protocol", protocol)
                  : ah_store_bind_text (st, ":protocol", NULL))
    ||  ah_store_bind_text (st, ":error", ah_msg_str (msg, "error"))
    ||  ah_store_bind_int64 (st, ":now", ah_store_now_ms ()))
        return;
    if (ah_store_step (self->store, st) != SQLITE_DONE)
        ah_warn (AREA, "cannot record host %s", ah_msg_str (msg, "host"));
    sqlite3_reset (st);
    //  One host per server for now (sandbox.remote.endpoint): the rows of
    //  another endpoint (the configuration changed) or of this one under
    //  another name (named by its endpoint before it first answered) go.
    st = ah_store_prepare (self->store,
        "DELETE FROM hosts WHERE endpoint <> :endpoint OR name <> :name");
    if (st && !ah_store_bind_text (st, ":endpoint", ah_msg_str (msg, "endpoint"))
    &&  !ah_store_bind_text (st, ":name", ah_msg_str (msg, "host"))) {
        ah_store_step (self->store, st);
        sqlite3_reset (st);
    }
}

void ah_lc_on_host_state (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *host = ah_msg_str (msg, "host");
    const char *state = ah_msg_str (msg, "state");
    const char *endpoint = ah_msg_str (msg, "endpoint");
    if (!host || !endpoint || !state
    ||  !(streq (state, "up") || streq (state, "unreachable") || streq (state, "refused"))) {
        ah_warn (AREA, "HOST_STATE from '%s' without host, endpoint and a state (up, unreachable, "
                 "refused): ignored", ah_msg_peer (msg));
        return;
    }
    s_host_row (self, msg, state);
    if (streq (state, "up")) {
        zlistx_t *ids = s_ids (self, "SELECT agent_id FROM sandboxes WHERE unreachable IS NOT NULL");
        if (zlistx_size (ids) > 0) {
            sqlite3_stmt *st = ah_store_prepare (self->store,
                "UPDATE sandboxes SET unreachable = NULL WHERE unreachable IS NOT NULL");
            if (st) {
                ah_store_step (self->store, st);
                sqlite3_reset (st);
            }
            ah_info (AREA, "host %s answers again: %zu sandbox(es) reachable; each is inspected",
                     host, zlistx_size (ids));
            s_publish_each (self, ids, NULL);
        }
        zlistx_destroy (&ids);
        return;
    }
    //  The reason each agent shows, which its tenant reads: the host by
    //  its name, never its endpoint (seed 004); the driver's sentence
    //  names none, and one that does is not passed on. The endpoint is in
    //  the hosts row above, for admins.
    const char *why = ah_msg_str (msg, "error");
    char fallback [160];
    if (!why || strstr (why, endpoint)) {
        if (streq (host, endpoint))
            snprintf (fallback, sizeof fallback, "the host agent does not answer");
        else
            snprintf (fallback, sizeof fallback, "host %.100s does not answer", host);
        why = fallback;
    }
    //  Rows at rest: an operation in flight meets the silence itself.
    zlistx_t *ids = s_ids (self, "SELECT agent_id FROM sandboxes"
                                 " WHERE state IN ('running','sleeping') AND unreachable IS NULL");
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "UPDATE sandboxes SET unreachable = :why"
        " WHERE state IN ('running','sleeping') AND unreachable IS NULL");
    if (st && !ah_store_bind_text (st, ":why", why)) {
        if (ah_store_step (self->store, st) != SQLITE_DONE)
            ah_warn (AREA, "cannot mark host %s's sandboxes unreachable", host);
        sqlite3_reset (st);
    }
    if (zlistx_size (ids) > 0)
        ah_warn (AREA, "%zu sandbox(es) unreachable: %s", zlistx_size (ids), why);
    s_publish_each (self, ids, why);
    zlistx_destroy (&ids);
}

int ah_lc_unreachable (self_t *self, const char *agent_id, char *why, size_t size)
{
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT unreachable FROM sandboxes WHERE agent_id = :id AND unreachable IS NOT NULL");
    if (!st || ah_store_bind_text (st, ":id", agent_id))
        return 0;
    int found = ah_store_step (self->store, st) == SQLITE_ROW;
    if (found && why)
        snprintf (why, size, "%s", (const char *) sqlite3_column_text (st, 0));
    sqlite3_reset (st);
    return found;
}

void ah_lc_reachable (self_t *self, const row_t *row)
{
    if (!ah_lc_unreachable (self, row->id, NULL, 0))
        return;
    ah_lc_run (self, "UPDATE sandboxes SET unreachable = NULL WHERE agent_id = :id", row->id);
    ah_lc_publish (self, row->id, row->state, row->op, row->error);
}
