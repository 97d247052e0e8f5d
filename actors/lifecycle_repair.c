/*  actors/lifecycle_repair.c: what the lifecycle actor learns from
    outside its own requests (see lifecycle_int.h): the reconciler's
    observations and the repair rules (docs/lifecycle.md, "Repairs"),
    sandboxd's hello and lost tunnels, and the start-up scan that
    finishes what a previous run left half done.                       */
#include "actors/lifecycle_int.h"
#include "common/log.h"

#include <string.h>

#define REMOVED "sandbox container was removed outside agenthold"
#define HOME_GONE "its home directory was removed outside agenthold: its files are lost; a start makes " \
                  "the sandbox again, with an empty home"

//  Did the row's sandbox have a home to lose? Not before its first
//  create succeeded (an error there has op 'create' and the driver's
//  words), nor while it is made or destroyed.
bool ah_lc_had_home (const row_t *row)
{
    const char *s = row->state;
    if (streq (s, "error"))
        return !streq (row->op, "create") || !strncmp (row->error, REMOVED, strlen (REMOVED));
    return streq (s, "running") || streq (s, "sleeping") || streq (s, "starting") || streq (s, "stopping")
        || streq (s, "freezing") || streq (s, "frozen") || streq (s, "thawing");
}

//  Its home is gone: its files with it. Kept on the row (a session on it
//  is lost, docs/sessions.md); the sandbox itself is repaired as usual.
void ah_lc_home_lost (self_t *self, const row_t *row, const char *detail)
{
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "UPDATE sandboxes SET home_lost = :why WHERE agent_id = :id AND home_lost IS NULL");
    char why [256];
    snprintf (why, sizeof why, "its home was removed outside agenthold (%s)", detail ? detail : "no home");
    if (!st || ah_store_bind_text (st, ":id", row->id) || ah_store_bind_text (st, ":why", why))
        return;
    int rc = ah_store_step (self->store, st);
    bool changed = rc == SQLITE_DONE && ah_store_changes (self->store) > 0;
    sqlite3_reset (st);
    if (changed)
        ah_warn (AREA, "%s: %s", row->id, why);
}

void ah_lc_repair (self_t *self, const char *agent_id, const ah_msg_t *seen, bool startup)
{
    bool exists = ah_msg_bool (seen, "exists", true);
    bool running = ah_msg_bool (seen, "running", false);
    bool paused = running && ah_msg_bool (seen, "paused", false);
    int exit_code = (int) ah_msg_int (seen, "exit_code", -1);
    const char *detail = ah_msg_str (seen, "detail");
    row_t row;
    if (ah_lc_lookup (self, agent_id, &row) != 1) {
        ah_debug (AREA, "observed %s, which has no row (the reconciler's to judge)", agent_id);
        return;
    }
    if (ah_lc_busy (self, row.id)) {
        ah_debug (AREA, "observed %s while %s is in flight: the operation decides", row.id, row.op);
        return;
    }
    //  Looked at before the row last changed (a hello came while the
    //  driver was asked; the engine may even say so late): it describes
    //  what was, and a newer look (an event) will follow if it matters.
    if (ah_msg_has (seen, "at_ms") && row.updated_at > ah_msg_int (seen, "at_ms", 0)) {
        ah_debug (AREA, "observed %s before its last change (%s): ignored", row.id, row.state);
        return;
    }
    ah_lc_reachable (self, &row);           //  it was observed: its host answers
    //  Its home's files are gone: with the sandbox (no container, no
    //  home), or under a sandbox still standing (a directory removed
    //  behind the engine's back, its volume still there).
    bool home_gone = ah_msg_bool (seen, "home_gone", false) && ah_lc_had_home (&row);
    if (home_gone)
        ah_lc_home_lost (self, &row, detail);
    //  A sleeping sandbox standing over a home whose files are gone would
    //  fail its next start: it waits in error as a removed one does, and
    //  a START makes it again with an empty home.
    bool gone_under = home_gone && exists && !running;
    home_gone = home_gone && !exists;
    //  Driver events follow our own operations too (a rebuild removes the
    //  container), and may arrive late: a transitional row is left to its
    //  operation (a sandbox that dies while starting meets the hello
    //  timeout). Only the start-up pass finishes interrupted operations.
    if (!startup && ah_lc_op_for_state (row.state)) {
        ah_debug (AREA, "observed %s while %s: ignored", row.id, row.state);
        return;
    }
    const char *id = row.id;
    const char *removed = home_gone ? REMOVED " with its home" : REMOVED;
    const char *s = row.state;
    char why [160];
    //  Paused or unpaused behind our back (docker pause / unpause): the
    //  row follows what the engine shows, and says who (the reconciler).
    if (streq (s, "running") && exists && paused) {
        ah_warn (AREA, "%s is running but its sandbox is paused (%s): frozen", id, detail ? detail : "");
        ah_lc_move (self, id, "state = 'running'", "frozen", NULL, NULL);
        return;
    }
    if (streq (s, "frozen") && exists && running && !paused) {
        ah_warn (AREA, "%s is frozen but its sandbox runs (%s): running", id, detail ? detail : "");
        ah_lc_move (self, id, "state = 'frozen'", "running", NULL, NULL);
        return;
    }
    if (streq (s, "frozen") && exists && running)
        return;                     //  as it should be
    if (streq (s, "freezing") || streq (s, "thawing")) {
        ah_lc_launch_for_row (self, &row);      //  both are safe to ask again
        return;
    }
    if (streq (s, "running") || streq (s, "frozen")) {
        char guard [40];
        snprintf (guard, sizeof guard, "state = '%s'", s);
        if (!exists)
            ah_lc_move (self, id, guard, "error", "create", removed);
        else
        if (!running) {
            //  Ended for it (evicted, its node lost): an error with the
            //  backend's reason. 0, SIGKILL, SIGTERM: stopped by hand
            //  (docker stop); else it died.
            const char *reason = ah_msg_str (seen, "reason");
            if (reason && *reason) {
                snprintf (why, sizeof why, "sandbox ended: %s", reason);
                ah_lc_move (self, id, guard, "error", "start", why);
            }
            else
            if (exit_code == 0 || exit_code == 137 || exit_code == 143)
                ah_lc_move (self, id, guard, "sleeping", NULL, NULL);
            else {
                snprintf (why, sizeof why, "sandbox exited with code %d", exit_code);
                ah_lc_move (self, id, guard, "error", "start", why);
            }
        }
    }
    else
    if (streq (s, "starting")) {
        if (!exists && row.container_removed)
            ah_lc_launch (self, &row, "start", false);      //  expired: re-created, then started
        else
        if (!exists)
            ah_lc_move (self, id, "state = 'starting'", "error", "create", removed);
        else
        if (running && self->driver->waits_for_hello)
            //  It kept running while we were away: its sandboxd reconnects
            //  with the token it has (whose hash we kept).
            ah_lc_hello_wait (self, id);
        else
        if (running)
            ah_lc_move (self, id, "state = 'starting'", "running", NULL, NULL);
        else
            ah_lc_launch (self, &row, "start", false);      //  fresh token
    }
    else
    if (streq (s, "creating")) {
        if (exists)
            ah_lc_begin_start (self, &row, "creating");
        else
            ah_lc_launch (self, &row, "create", false);
    }
    else
    if (streq (s, "stopping")) {
        if (!exists)
            ah_lc_move (self, id, "state = 'stopping'", "error", "create", removed);
        else
        if (running)
            ah_lc_launch (self, &row, "stop", false);
        else
            ah_lc_move (self, id, "state = 'stopping'", "sleeping", NULL, NULL);
    }
    else
    if (streq (s, "rebuilding") || streq (s, "destroying"))
        ah_lc_launch_for_row (self, &row);
    else
    if (streq (s, "sleeping")) {
        if (!exists && row.container_removed)
            ;                       //  its lifetime ended (sandbox.container_ttl): as it should be
        else
        if (!exists)
            ah_lc_move (self, id, "state = 'sleeping'", "error", "create", removed);
        else
        if (gone_under)
            ah_lc_move (self, id, "state = 'sleeping'", "error", "create", HOME_GONE);
        else
        if (running) {
            //  Started by hand: without a boot token of ours it cannot
            //  reach us, so stored state wins and it is stopped again.
            ah_warn (AREA, "%s is sleeping but its sandbox runs (%s): stopping it", id,
                     detail ? detail : "");
            ah_lc_launch (self, &row, "stop", true);
        }
    }
}

void ah_lc_on_observed (void *self, ah_msg_t *msg)
{
    const char *id = ah_msg_str (msg, "agent_id");
    const char *source = ah_msg_str (msg, "source");
    if (!id || !ah_msg_has (msg, "exists") || !ah_msg_has (msg, "running")) {
        ah_warn (AREA, "SANDBOX_OBSERVED from '%s' without agent_id, exists and running",
                 ah_msg_peer (msg));
        return;
    }
    ah_lc_repair (self, id, msg, source && streq (source, "startup"));
}

void ah_lc_on_hello (void *self, ah_msg_t *msg)
{
    const char *id = ah_msg_str (msg, "agent_id");
    if (!id) {
        ah_warn (AREA, "SANDBOX_HELLO from '%s' without agent_id", ah_msg_peer (msg));
        return;
    }
    bool moved = ah_lc_move (self, id, "state = 'starting'", "running", NULL, NULL) == 1;
    //  Connected from now on (a redial after a server restart or a lost
    //  connection says hello while running): GET says "connected".
    if (ah_lc_run (self, "UPDATE sandboxes SET connected = 1"
                   " WHERE agent_id = :id AND state = 'running' AND connected = 0", id) == 0
    &&  ah_store_changes (((self_t *) self)->store) == 1)
        ah_lc_connected (self, id, true);
    if (moved) {
        ah_lc_hello_cancel (self, id);
        //  Its container is there again (a hello can come before the
        //  start job's own end is handled, which says the same).
        ah_lc_run (self, "UPDATE sandboxes SET container_removed_at = NULL WHERE agent_id = :id", id);
        ah_info (AREA, "%s: sandboxd said hello; running", id);
    }
    else
        ah_debug (AREA, "%s: hello while not starting (ignored)", id);
}

//  TUNNEL_LOST {agent_id, reason, fatal}: a connection that redialling
//  cannot mend (a protocol version mismatch) puts the sandbox in error
//  with the reason, and stops it; a passing loss is left to sandboxd's
//  reconnect and the reconciler.
void ah_lc_on_tunnel_lost (void *self, ah_msg_t *msg)
{
    const char *id = ah_msg_str (msg, "agent_id");
    const char *reason = ah_msg_str (msg, "reason");
    if (!id) {
        ah_warn (AREA, "TUNNEL_LOST from '%s' without agent_id", ah_msg_peer (msg));
        return;
    }
    if (ah_lc_run (self, "UPDATE sandboxes SET connected = 0 WHERE agent_id = :id AND connected <> 0", id) == 0
    &&  ah_store_changes (((self_t *) self)->store) == 1)
        ah_lc_connected (self, id, false);
    if (!ah_msg_bool (msg, "fatal", false)) {
        ah_info (AREA, "%s: tunnel connection lost (%s); sandboxd will redial", id, reason ? reason : "?");
        return;
    }
    if (ah_lc_move (self, id, "state IN ('starting','running')", "error", "start",
                    reason ? reason : "the sandbox's tunnel failed") == 1) {
        ah_lc_hello_cancel (self, id);
        row_t row;
        if (ah_lc_lookup (self, id, &row) == 1)
            ah_lc_launch (self, &row, "stop", true);
    }
}

//  Transitional rows left by a previous run, and running ones (which may
//  have stopped while we were away): look at each through the driver,
//  then repair (startup = true). The reconciler's start-up pass says the
//  same; whichever comes second finds the row settled.
void ah_lc_startup_scan (void *self_, void *arg)
{
    self_t *self = self_;
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT agent_id FROM sandboxes"
        " WHERE state IN ('creating','starting','running','stopping','rebuilding','destroying',"
        "                 'freezing','frozen','thawing')");
    if (!st)
        return;
    zlist_t *ids = zlist_new ();
    zlist_autofree (ids);
    while (ah_store_step (self->store, st) == SQLITE_ROW)
        zlist_append (ids, (void *) sqlite3_column_text (st, 0));
    sqlite3_reset (st);
    for (const char *id = zlist_first (ids); id; id = zlist_next (ids)) {
        row_t row;
        if (ah_lc_lookup (self, id, &row) == 1) {
            ah_info (AREA, "%s was left %s: looking at it to finish the %s", id, row.state, row.op);
            ah_lc_launch (self, &row, "inspect", false);
        }
    }
    zlist_destroy (&ids);
}
