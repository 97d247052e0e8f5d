/*  tests/lifecycle/test_lifecycle_freeze.c: the frozen tier (issue 29)
    on the fake driver: FREEZE and THAW as guarded transitions, a START
    of a frozen agent thaws it (no driver start), STOP of a frozen one,
    frozen_at, the cause, and a sandbox paused or unpaused behind the
    server's back. main is test_lifecycle.c's (lc_harness.h).           */
#include "tests/lifecycle/lc_harness.h"

static void s_observe (zsock_t *rec, const char *id, bool running, bool paused)
{
    ah_msg_t *m = ah_msg_new ("SANDBOX_OBSERVED");
    ah_msg_set_str (m, "agent_id", id);
    ah_msg_set_bool (m, "exists", true);
    ah_msg_set_bool (m, "running", running);
    ah_msg_set_bool (m, "paused", paused);
    ah_msg_set_int (m, "exit_code", -1);
    ah_msg_set_str (m, "source", "event");
    ah_msg_send (&m, rec, "lifecycle");
}

static bool s_fake_state_is (const char *id, const char *want)
{
    char *path = lc_fake_path (id, "state");
    char line [64] = "";
    FILE *f = path ? fopen (path, "r") : NULL;
    if (f) {
        if (!fgets (line, sizeof line, f))
            line [0] = 0;
        fclose (f);
    }
    free (path);
    line [strcspn (line, "\n")] = 0;
    return streq (line, want);
}

static int s_status_of (const char *type, const char *agent, const char *state)
{
    ah_msg_t *reply = lc_op (type, agent);
    int status = reply ? (int) ah_msg_int (reply, "status", 0) : 0;
    if (state && (!reply || !streq (ah_msg_str (reply, "state"), state)))
        status = -status;
    ah_msg_destroy (&reply);
    return status;
}

void test_freeze (const char *id)
{
    CHECK (lc_wait_state (id, "running", 5000));
    int starts = atomic_load (&lc_drv.starts), freezes = atomic_load (&lc_drv.freezes);
    int thaws = atomic_load (&lc_drv.thaws);
    //  Thawing what is not frozen: a 200 "already" (it runs).
    CHECK (s_status_of ("SANDBOX_THAW", id, "running") == 200);
    CHECK (s_status_of ("SANDBOX_FREEZE", id, "freezing") == 202);
    CHECK (lc_wait_state (id, "frozen", 5000));
    CHECK (s_fake_state_is (id, "paused"));
    CHECK (atomic_load (&lc_drv.freezes) == freezes + 1);
    CHECK (lc_count ("SELECT count(*) FROM sandboxes WHERE agent_id = :id AND frozen_at > 0", id) == 1);
    CHECK (lc_col_is (id, "cause", "api"));
    //  Frozen keeps its boot token (sandboxd keeps its connection).
    char *token = lc_col (id, "boot_token_hash");
    CHECK (token && *token);
    free (token);
    //  Again: already.
    CHECK (s_status_of ("SANDBOX_FREEZE", id, "frozen") == 200);
    //  A START (any wake) of a frozen agent is a thaw, not a start.
    CHECK (s_status_of ("SANDBOX_START", id, "thawing") == 202);
    CHECK (lc_wait_state (id, "running", 5000));
    CHECK (s_fake_state_is (id, "running"));
    CHECK (atomic_load (&lc_drv.thaws) == thaws + 1);
    CHECK (atomic_load (&lc_drv.starts) == starts);
    CHECK (lc_count ("SELECT count(*) FROM sandboxes WHERE agent_id = :id AND frozen_at IS NULL", id) == 1);
    //  Freeze, then STOP from frozen: sleeping, as a running one would.
    CHECK (s_status_of ("SANDBOX_FREEZE", id, "freezing") == 202);
    CHECK (lc_wait_state (id, "frozen", 5000));
    CHECK (s_status_of ("SANDBOX_STOP", id, "stopping") == 202);
    CHECK (lc_wait_state (id, "sleeping", 5000));
    CHECK (s_fake_state_is (id, "exited 143"));
    //  A sleeping agent cannot be frozen (409, its state named).
    CHECK (s_status_of ("SANDBOX_FREEZE", id, "sleeping") == 409);
    CHECK (s_status_of ("SANDBOX_START", id, "starting") == 202);
    CHECK (lc_wait_state (id, "running", 5000));

    //  Paused behind the server's back (docker pause): frozen; unpaused
    //  behind its back: running again. A running sandbox seen running
    //  stays so.
    zsock_t *rec = ah_bus_connect ("reconciler");
    s_observe (rec, id, true, false);
    zclock_sleep (200);
    CHECK (lc_col_is (id, "state", "running"));
    s_observe (rec, id, true, true);
    CHECK (lc_wait_state (id, "frozen", 5000));
    CHECK (lc_col_is (id, "cause", "reconciler"));
    s_observe (rec, id, true, true);
    zclock_sleep (200);
    CHECK (lc_col_is (id, "state", "frozen"));
    s_observe (rec, id, true, false);
    CHECK (lc_wait_state (id, "running", 5000));
    //  Frozen, then its container stopped behind the server's back: sleeping.
    s_observe (rec, id, true, true);
    CHECK (lc_wait_state (id, "frozen", 5000));
    ah_msg_t *m = ah_msg_new ("SANDBOX_OBSERVED");
    ah_msg_set_str (m, "agent_id", id);
    ah_msg_set_bool (m, "exists", true);
    ah_msg_set_bool (m, "running", false);
    ah_msg_set_int (m, "exit_code", 137);
    ah_msg_set_str (m, "source", "event");
    ah_msg_send (&m, rec, "lifecycle");
    CHECK (lc_wait_state (id, "sleeping", 5000));
    zsock_destroy (&rec);
    CHECK (s_status_of ("SANDBOX_START", id, "starting") == 202);
    CHECK (lc_wait_state (id, "running", 5000));
    lc_drain_events ();
}
