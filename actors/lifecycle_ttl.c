/*  actors/lifecycle_ttl.c: lifetimes and tombstones (see lifecycle_int.h,
    docs/lifecycle.md "Lifetimes" and "Tombstones").

    One timer (sandbox.ttl_check_interval) looks for three things, and
    each decision is a guarded UPDATE like any request's, so a lifetime
    never races a start:

      - a sandbox asleep (or in error, not after a failed destroy) longer
        than sandbox.container_ttl: op 'expire' (the row stays sleeping,
        or in error with its error), then driver remove_container; its
        home stays and the next start re-creates the container (job
        recreate);
      - a sandbox asleep (or in error) and unused longer than
        sandbox.workspace_ttl: op 'expire-home', then driver destroy; the
        row stays, marked home_lost, so a session opened on it is
        reported lost;
      - a destroy that failed (error, op destroy) whose tombstone's next
        attempt is due: destroying again. Each failure doubles the pause
        (sandbox.destroy_retry_min up to destroy_retry_max), stored in the
        tombstone so the schedule survives restarts.

    Both lifetimes are read at each sweep as they are in force (the
    configuration's, or what PUT /api/v1/policy set: policy/values.h), so
    a change applies to the next expiry without a restart.

    Each decision is recorded in the audit trail (actor "ttl" or
    "tombstone-retry"). Runs on the actor's thread only.               */
#include "actors/lifecycle_int.h"
#include "common/log.h"

#include <math.h>
#include <string.h>

#define SWEEP_MAX   200             //  rows taken per kind per sweep

void ah_lc_record (self_t *self, const char *agent_id, const char *kind, const char *detail,
                   bool ok, const char *error)
{
    ah_msg_t *rec = ah_msg_new ("OP_RECORD");
    if (agent_id)
        ah_msg_set_str (rec, "agent_id", agent_id);
    ah_msg_set_str (rec, "actor", self->cause [0] ? self->cause : "lifecycle");
    ah_msg_set_str (rec, "kind", kind);
    if (detail)
        ah_msg_set_str (rec, "detail", detail);
    ah_msg_set_bool (rec, "ok", ok);
    if (!ok && error)
        ah_msg_set_str (rec, "error", error);
    ah_actor_send (self->actor, "recorder", &rec);
}

//  The ids a query finds (one :now bound, one column).
static zlist_t *s_ids (self_t *self, const char *sql, int64_t now, double seconds)
{
    zlist_t *ids = zlist_new ();
    zlist_autofree (ids);
    sqlite3_stmt *st = ah_store_prepare (self->store, sql);
    if (!st || ah_store_bind_int64 (st, ":now", now)
    ||  (seconds > 0 && ah_store_bind_int64 (st, ":ttl", (int64_t) (seconds * 1000))))
        return ids;
    while (ah_store_step (self->store, st) == SQLITE_ROW && zlist_size (ids) < SWEEP_MAX)
        zlist_append (ids, (void *) sqlite3_column_text (st, 0));
    sqlite3_reset (st);
    return ids;
}

//  The guarded decision, then the driver call. guard: constant SQL. A
//  sleeping row stays sleeping; an error row stays in error with its
//  error, and the operation that failed waits in failed_op.
static void s_decide (self_t *self, const char *id, const char *guard, const char *to, const char *op)
{
    row_t row;
    if (ah_lc_busy (self, id) || ah_lc_lookup (self, id, &row) != 1)
        return;
    bool error = streq (row.state, "error") && streq (to, "error");
    if (error && ah_lc_run (self, "UPDATE sandboxes SET failed_op = op WHERE agent_id = :id AND state = 'error'"
                                  " AND coalesce (op, '') NOT IN ('expire','expire-home')", id))
        return;
    if (ah_lc_move (self, id, guard, to, op, error ? row.error : NULL) != 1)
        return;                     //  a request came first
    if (ah_lc_lookup (self, id, &row) == 1)
        ah_lc_launch (self, &row, op, false);
}

//  Sleeping, or in error for any reason but a failed destroy (the
//  tombstone's), and not expiring already: a lifetime may end.
#define STOPPED(s) "((" s "state = 'sleeping' AND " s "op IS NULL) OR (" s "state = 'error'" \
                   " AND coalesce (" s "op, '') NOT IN ('destroy','expire','expire-home')))"

void ah_lc_ttl_sweep (void *self_, void *arg)
{
    self_t *self = self_;
    const double container_ttl = ah_policy_value (self->store, self->config, "container_ttl");
    const double workspace_ttl = ah_policy_value (self->store, self->config, "workspace_ttl");
    int64_t now = ah_store_now_ms ();
    zlist_t *ids;
    //  Expiries a previous run left in flight: run them again.
    ids = s_ids (self, "SELECT agent_id FROM sandboxes WHERE state IN ('sleeping','error')"
                       " AND op IN ('expire','expire-home') AND :now > 0", now, 0);
    for (const char *id = zlist_first (ids); id; id = zlist_next (ids)) {
        row_t row;
        if (!ah_lc_busy (self, id) && ah_lc_lookup (self, id, &row) == 1)
            ah_lc_launch (self, &row, row.op, false);
    }
    zlist_destroy (&ids);

    snprintf (self->cause, sizeof self->cause, "ttl");
    if (workspace_ttl > 0) {
        ids = s_ids (self, "SELECT s.agent_id FROM sandboxes s WHERE " STOPPED ("s.")
                           " AND s.home_lost IS NULL"
                           " AND max (coalesce (s.last_activity_at, 0), coalesce (s.stopped_at, 0))"
                           "     <= :now - :ttl", now, workspace_ttl);
        for (const char *id = zlist_first (ids); id; id = zlist_next (ids)) {
            s_decide (self, id, STOPPED ("") " AND state = 'sleeping' AND home_lost IS NULL",
                      "sleeping", "expire-home");
            s_decide (self, id, STOPPED ("") " AND state = 'error' AND home_lost IS NULL",
                      "error", "expire-home");
        }
        zlist_destroy (&ids);
    }
    if (container_ttl > 0 && self->driver->remove_container) {
        ids = s_ids (self, "SELECT agent_id FROM sandboxes WHERE " STOPPED ("")
                           " AND container_removed_at IS NULL AND stopped_at <= :now - :ttl",
                     now, container_ttl);
        for (const char *id = zlist_first (ids); id; id = zlist_next (ids)) {
            s_decide (self, id, STOPPED ("") " AND state = 'sleeping' AND container_removed_at IS NULL",
                      "sleeping", "expire");
            s_decide (self, id, STOPPED ("") " AND state = 'error' AND container_removed_at IS NULL",
                      "error", "expire");
        }
        zlist_destroy (&ids);
    }
    snprintf (self->cause, sizeof self->cause, "tombstone-retry");
    ids = s_ids (self, "SELECT t.agent_id FROM tombstones t JOIN sandboxes s ON s.agent_id = t.agent_id"
                       " WHERE s.state = 'error' AND s.op = 'destroy' AND t.next_at <= :now"
                       " ORDER BY t.next_at", now, 0);
    for (const char *id = zlist_first (ids); id; id = zlist_next (ids)) {
        ah_info (AREA, "%s: retrying its destroy (its tombstone's next attempt is due)", id);
        s_decide (self, id, "state = 'error' AND op = 'destroy'", "destroying", "destroy");
    }
    zlist_destroy (&ids);
    self->cause [0] = 0;
}

void ah_lc_expired (self_t *self, const ah_msg_t *done, const char *agent_id, const char *op)
{
    bool ok = ah_msg_bool (done, "ok", false);
    const char *why = ah_msg_str (done, "error");
    bool home = streq (op, "expire-home");
    snprintf (self->cause, sizeof self->cause, "ttl");
    char detail [200];
    if (home)
        snprintf (detail, sizeof detail, "home removed after %.0f s unused (sandbox.workspace_ttl)",
                  ah_policy_value (self->store, self->config, "workspace_ttl"));
    else
        snprintf (detail, sizeof detail, "container removed after %.0f s asleep (sandbox.container_ttl);"
                  " home kept", ah_policy_value (self->store, self->config, "container_ttl"));
    if (ok) {
        sqlite3_stmt *st = ah_store_prepare (self->store, home
            ? "UPDATE sandboxes SET container_removed_at = :now,"
              " home_lost = coalesce (home_lost, :why) WHERE agent_id = :id"
            : "UPDATE sandboxes SET container_removed_at = :now WHERE agent_id = :id");
        if (!st || ah_store_bind_int64 (st, ":now", ah_store_now_ms ()) || ah_store_bind_text (st, ":id", agent_id)
        ||  (home && ah_store_bind_text (st, ":why", detail)) || ah_store_step (self->store, st) != SQLITE_DONE)
            ah_error (AREA, "%s: %s done, but the row could not say so", agent_id, op);
        if (st)
            sqlite3_reset (st);
        ah_info (AREA, "%s: %s", agent_id, detail);
    }
    ah_lc_record (self, agent_id, home ? "workspace.expire" : "container.expire", detail, ok, why);
    row_t row;
    if (ah_lc_lookup (self, agent_id, &row) == 1) {
        char guard [96];
        snprintf (guard, sizeof guard, "state = '%s' AND op = '%s'",
                  streq (row.state, "error") ? "error" : "sleeping", home ? "expire-home" : "expire");
        if (streq (row.state, "sleeping") && streq (row.op, op))
            //  Done (or failed: the next sweep tries again; it stays asleep).
            ah_lc_move (self, agent_id, guard, "sleeping", NULL, NULL);
        else
        if (streq (row.state, "error") && streq (row.op, op)) {
            //  Back to the error it was in, with the operation that failed
            //  (a start re-creates what the lifetime removed).
            char failed [16] = "start";
            sqlite3_stmt *st = ah_store_prepare (self->store,
                "SELECT failed_op FROM sandboxes WHERE agent_id = :id AND failed_op IS NOT NULL");
            if (st && !ah_store_bind_text (st, ":id", agent_id) && ah_store_step (self->store, st) == SQLITE_ROW)
                snprintf (failed, sizeof failed, "%s", (const char *) sqlite3_column_text (st, 0));
            if (st)
                sqlite3_reset (st);
            if (ah_lc_move (self, agent_id, guard, "error", failed, row.error) == 1)
                ah_lc_run (self, "UPDATE sandboxes SET failed_op = NULL WHERE agent_id = :id", agent_id);
        }
        else
            //  A request came while the driver worked (a start): now it runs,
            //  re-creating the container when it is gone.
            ah_lc_launch_for_row (self, &row);
    }
    self->cause [0] = 0;
}

void ah_lc_tombstone_failed (self_t *self, const char *agent_id, const char *why)
{
    const ah_config_t *c = self->config;
    sqlite3_stmt *st = ah_store_prepare (self->store, "SELECT attempts FROM tombstones WHERE agent_id = :id");
    int64_t attempts = 0;
    if (st && !ah_store_bind_text (st, ":id", agent_id) && ah_store_step (self->store, st) == SQLITE_ROW)
        attempts = sqlite3_column_int64 (st, 0);
    if (st)
        sqlite3_reset (st);
    //  2 min, 4, 8, ... up to 6 h (the configured bounds).
    double pause = c->destroy_retry_min_s * pow (2, attempts > 40 ? 40 : (double) attempts);
    if (pause > c->destroy_retry_max_s)
        pause = c->destroy_retry_max_s;
    int64_t next = ah_store_now_ms () + (int64_t) (pause * 1000);
    st = ah_store_prepare (self->store,
        "UPDATE tombstones SET attempts = attempts + 1, last_error = :why, next_at = :next WHERE agent_id = :id");
    if (!st || ah_store_bind_text (st, ":why", why) || ah_store_bind_int64 (st, ":next", next)
    ||  ah_store_bind_text (st, ":id", agent_id) || ah_store_step (self->store, st) != SQLITE_DONE)
        ah_error (AREA, "%s: cannot write its tombstone's next attempt", agent_id);
    if (st)
        sqlite3_reset (st);
    ah_warn (AREA, "%s: destroy failed (attempt %lld); retried in %.0f s: %s", agent_id,
             (long long) attempts + 1, pause, why);
}

//  The admin gives up: the tombstone and the agent's rows go; whatever
//  the driver still holds stays (its name is in the log and the audit).
void ah_lc_on_tombstone_forget (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *id = ah_msg_str (msg, "agent");
    if (!ah_ident_ok (AH_IDENT_AGENT_ID, id)) {
        ah_actor_reply_error (self->actor, msg, 400, "agent: an agent id (12 hex digits)");
        return;
    }
    if (ah_lc_busy (self, id)) {
        ah_actor_reply_error (self->actor, msg, 409, "a destroy of %s is in flight: wait for its outcome", id);
        return;
    }
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT s.state FROM tombstones t LEFT JOIN sandboxes s ON s.agent_id = t.agent_id WHERE t.agent_id = :id");
    int rc = st && !ah_store_bind_text (st, ":id", id) ? ah_store_step (self->store, st) : SQLITE_ERROR;
    char state [16] = "";
    if (rc == SQLITE_ROW && sqlite3_column_text (st, 0))
        snprintf (state, sizeof state, "%s", (const char *) sqlite3_column_text (st, 0));
    if (st)
        sqlite3_reset (st);
    if (rc == SQLITE_DONE) {
        ah_actor_reply_error (self->actor, msg, 404, "no tombstone for %s", id);
        return;
    }
    if (rc != SQLITE_ROW) {
        ah_actor_reply_error (self->actor, msg, 500, "cannot read the tombstones");
        return;
    }
    if (streq (state, "destroying")) {
        ah_actor_reply_error (self->actor, msg, 409, "a destroy of %s is in flight: wait for its outcome", id);
        return;
    }
    //  The row's last cause: the audit row below names the admin.
    bool ok = ah_store_begin (self->store) == 0;
    ok = ok && ah_lc_run (self, "DELETE FROM tombstones WHERE agent_id = :id", id) == 0;
    int forgotten = ok ? ah_store_changes (self->store) : 0;
    ok = ok && ah_lc_run (self, "DELETE FROM sandboxes WHERE agent_id = :id", id) == 0;
    ok = ok && ah_lc_run (self, "DELETE FROM agents WHERE id = :id", id) == 0;
    if (!ok || ah_store_commit (self->store)) {
        ah_store_rollback (self->store);
        ah_actor_reply_error (self->actor, msg, 500, "cannot forget the tombstone (see the server log)");
        return;
    }
    char detail [96];
    snprintf (detail, sizeof detail, "forgot %d tombstone%s (the driver may still hold its sandbox)",
              forgotten, forgotten == 1 ? "" : "s");
    ah_warn (AREA, "%s: tombstone forgotten by %s; whatever the driver still holds of it stays", id,
             self->cause [0] ? self->cause : "?");
    ah_lc_record (self, id, "tombstone.forget", detail, true, NULL);
    ah_lc_publish (self, id, "destroyed", NULL, NULL);
    ah_lc_forget_agent (self, id);
    ah_msg_t *reply = ah_msg_reply_ok (msg);
    ah_msg_set_int (reply, "status", 200);
    ah_msg_set_int (reply, "forgotten", forgotten);
    ah_actor_reply (self->actor, msg, reply);
}
