/*  tests/lifecycle/test_lifecycle_repair.c: the lifecycle actor told what
    the driver observes (repairs), hosts that stop answering, destroys,
    tenant limits, repairs at restart, runtimes being prepared and
    images gone behind its back; main is test_lifecycle.c's (the same
    harness, lc_harness.h).                                             */
#include "tests/lifecycle/lc_harness.h"

//  SANDBOX_OBSERVED as the reconciler sends it (source "event").
//  at_ms: when the driver was asked (0: not said).
static void s_observe_at (zsock_t *rec, const char *id, bool exists, bool running, int exit_code,
                          int64_t at_ms)
{
    ah_msg_t *m = ah_msg_new ("SANDBOX_OBSERVED");
    ah_msg_set_str (m, "agent_id", id);
    ah_msg_set_bool (m, "exists", exists);
    ah_msg_set_bool (m, "running", running);
    ah_msg_set_int (m, "exit_code", exit_code);
    ah_msg_set_str (m, "source", "event");
    if (at_ms)
        ah_msg_set_int (m, "at_ms", at_ms);
    ah_msg_send (&m, rec, "lifecycle");
}

static void s_observe (zsock_t *rec, const char *id, bool exists, bool running, int exit_code)
{
    s_observe_at (rec, id, exists, running, exit_code, 0);
}

void test_observed (const char *id)
{
    zsock_t *rec = ah_bus_connect ("reconciler");
    //  A look taken before the row's last change (the engine said
    //  "exited" while sandboxd's hello made it running) is stale: ignored.
    int64_t last_change = lc_count ("SELECT updated_at FROM sandboxes WHERE agent_id = :id", id);
    s_observe_at (rec, id, true, false, 0, last_change - 1);
    zclock_sleep (200);
    CHECK (lc_col_is (id, "state", "running"));
    //  Died on its own (a look after the change): error naming the exit code.
    s_observe_at (rec, id, true, false, 3, last_change);
    CHECK (lc_wait_state (id, "error", 5000));
    CHECK (lc_col_is (id, "error", "sandbox exited with code 3"));
    ah_msg_t *reply = lc_op ("SANDBOX_START", id);
    CHECK (lc_status (&reply) == 202);
    CHECK (lc_wait_state (id, "running", 5000));
    //  Stopped by hand (137): asleep.
    s_observe (rec, id, true, false, 137);
    CHECK (lc_wait_state (id, "sleeping", 5000));
    //  Removed behind our back: error; a start re-creates it.
    s_observe (rec, id, false, false, -1);
    CHECK (lc_wait_state (id, "error", 5000));
    CHECK (lc_col_is (id, "error", "sandbox container was removed outside agenthold"));
    int creates = atomic_load (&lc_drv.creates);
    char *dir = lc_fake_path (id, NULL);
    char *cmd = zsys_sprintf ("rm -rf '%s'", dir);
    CHECK (system (cmd) == 0);
    free (cmd);
    free (dir);
    reply = lc_op ("SANDBOX_START", id);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 202 && streq (ah_msg_str (reply, "state"), "creating"));
    ah_msg_destroy (&reply);
    CHECK (lc_wait_state (id, "running", 5000));
    CHECK (atomic_load (&lc_drv.creates) == creates + 1);
    //  Started by hand while asleep: stopped again, stays sleeping.
    reply = lc_op ("SANDBOX_STOP", id);
    ah_msg_destroy (&reply);
    CHECK (lc_wait_state (id, "sleeping", 5000));
    int stops = atomic_load (&lc_drv.stops);
    char *state = lc_fake_path (id, "state");
    lc_write (state, "running\n");
    s_observe (rec, id, true, true, -1);
    int64_t until = zclock_mono () + 5000;
    while (atomic_load (&lc_drv.stops) == stops && zclock_mono () < until)
        zclock_sleep (10);
    CHECK (atomic_load (&lc_drv.stops) == stops + 1);
    zclock_sleep (100);
    CHECK (lc_col_is (id, "state", "sleeping"));
    ah_sandbox_status_t status;
    CHECK (lc_drv.inner->inspect (lc_drv.inner, id, &status, NULL) == 0 && !status.running);
    free (state);
    //  An event about a row in a transitional state is left to its operation.
    CHECK (ah_store_exec (lc_store, "UPDATE sandboxes SET state = 'rebuilding', op = 'rebuild'", NULL) == 0);
    s_observe (rec, id, false, false, -1);
    zclock_sleep (200);
    CHECK (lc_col_is (id, "state", "rebuilding"));
    CHECK (ah_store_exec (lc_store, "UPDATE sandboxes SET state = 'sleeping', op = NULL", NULL) == 0);
    reply = lc_op ("SANDBOX_START", id);
    CHECK (lc_status (&reply) == 202);
    CHECK (lc_wait_state (id, "running", 5000));
    //  Activity moves last_activity_at (in a batch, within a second).
    //  The sleeper (a subscriber) is told, so its due index asks again.
    zsock_t *sleeper = ah_bus_connect ("sleeper");
    int64_t before = lc_count ("SELECT last_activity_at FROM sandboxes WHERE agent_id = :id", id);
    zclock_sleep (20);
    ah_msg_t *m = ah_msg_new ("AGENT_ACTIVITY");
    ah_msg_set_str (m, "agent_id", id);
    ah_msg_set_str (m, "what", "turn");
    ah_msg_send (&m, rec, "lifecycle");
    zclock_sleep (1500);
    CHECK (lc_count ("SELECT last_activity_at FROM sandboxes WHERE agent_id = :id", id) > before);
    //  The sleeper is told, with the use written (it keeps it unread).
    bool changed = false;
    zsock_set_rcvtimeo (sleeper, 500);
    while (!changed && (m = ah_msg_recv (sleeper, true, NULL))) {
        changed = streq (ah_msg_type (m), "AGENT_CHANGED") && ah_msg_str (m, "agent_id")
               && streq (ah_msg_str (m, "agent_id"), id)
               && ah_msg_int (m, "last_activity_at", -1)
                  == lc_count ("SELECT last_activity_at FROM sandboxes WHERE agent_id = :id", id);
        ah_msg_destroy (&m);
    }
    CHECK (changed);
    //  So is an update, with the idle_minutes it wrote.
    m = ah_msg_new ("AGENT_UPDATE");
    ah_msg_set_str (m, "agent", id);
    ah_msg_set_double (m, "idle_minutes", 7.5);
    ah_msg_t *reply2 = lc_call (m);
    CHECK (reply2 && ah_msg_int (reply2, "status", 0) == 200);
    ah_msg_destroy (&reply2);
    changed = false;
    while (!changed && (m = ah_msg_recv (sleeper, true, NULL))) {
        changed = streq (ah_msg_type (m), "AGENT_CHANGED") && ah_msg_str (m, "agent_id")
               && streq (ah_msg_str (m, "agent_id"), id) && ah_msg_double (m, "idle_minutes", -1) == 7.5
               && ah_msg_int (m, "last_activity_at", -1) == -1;
        ah_msg_destroy (&m);
    }
    CHECK (changed);
    zsock_destroy (&sleeper);
    zsock_destroy (&rec);
}

//  HOST_STATE as the reconciler sends it with the remote driver.
static void s_host_state (zsock_t *rec, const char *state, const char *error)
{
    ah_msg_t *m = ah_msg_new ("HOST_STATE");
    ah_msg_set_str (m, "host", "b1");
    ah_msg_set_str (m, "endpoint", "ipc:///run/agenthold-hostd/hostd.sock");
    ah_msg_set_str (m, "state", state);
    ah_msg_set_str (m, "version", "0.1.0");
    ah_msg_set_int (m, "protocol", 1);
    if (error)
        ah_msg_set_str (m, "error", error);
    ah_msg_send (&m, rec, "lifecycle");
}

//  A host agent away: the sandbox at rest shows unreachable with why, its
//  state kept underneath; requests but destroy are refused; back, the
//  flag goes and its state is published again. Nothing is re-created.
void test_unreachable (const char *id)
{
    //  Another name than test_observed's (a bus name is taken until its
    //  old connection is gone).
    zsock_t *rec = ah_bus_connect ("reconciler-host");
    lc_drain_events ();
    int creates = atomic_load (&lc_drv.creates), starts = atomic_load (&lc_drv.starts);
    //  A sentence that names the endpoint reaches the hosts row (admins)
    //  only; the agent (its tenant reads it) is told the host by name.
    const char *said = "host b1 (ipc:///run/agenthold-hostd/hostd.sock) does not answer";
    const char *why = "host b1 does not answer";
    s_host_state (rec, "unreachable", said);
    char error [256] = "";
    CHECK (lc_saw_event (id, "unreachable", error, sizeof error) && streq (error, why));
    CHECK (lc_col_is (id, "state", "running") && lc_col_is (id, "unreachable", why));
    CHECK (lc_count ("SELECT count(*) FROM hosts WHERE name = 'b1' AND state = 'unreachable'"
                    " AND error LIKE '%hostd.sock%' AND :id IS NOT NULL", id) == 1);
    ah_msg_t *reply = lc_op ("SANDBOX_START", id);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 409
           && strstr (ah_msg_str (reply, "error"), "is unreachable")
           && strstr (ah_msg_str (reply, "error"), why));
    ah_msg_destroy (&reply);
    reply = lc_op ("SANDBOX_STOP", id);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 409);
    ah_msg_destroy (&reply);
    //  Hostile: no state, an unknown state; nothing moves.
    s_host_state (rec, "exploded", NULL);
    ah_msg_t *m = ah_msg_new ("HOST_STATE");
    ah_msg_send (&m, rec, "lifecycle");
    zclock_sleep (100);
    CHECK (lc_col_is (id, "unreachable", why));
    //  Back: the flag goes, running is published again.
    s_host_state (rec, "up", NULL);
    CHECK (lc_saw_event (id, "running", NULL, 0));
    CHECK (lc_count ("SELECT count(*) FROM sandboxes WHERE agent_id = :id AND unreachable IS NULL", id) == 1);
    CHECK (lc_count ("SELECT count(*) FROM hosts WHERE state = 'up' AND seen_at IS NOT NULL"
                    " AND :id IS NOT NULL", id) == 1);
    CHECK (atomic_load (&lc_drv.creates) == creates && atomic_load (&lc_drv.starts) == starts);
    reply = lc_op ("SANDBOX_STOP", id);
    CHECK (lc_status (&reply) == 202);
    CHECK (lc_wait_state (id, "sleeping", 5000));
    reply = lc_op ("SANDBOX_START", id);
    CHECK (lc_status (&reply) == 202);
    CHECK (lc_wait_state (id, "running", 5000));
    zsock_destroy (&rec);
}

void test_destroy (const char *id)
{
    lc_drain_events ();
    //  A failing destroy: error, and then only destroy may continue.
    char *fail = lc_fake_path (id, "fail-destroy");
    lc_write (fail, "busy volume");
    ah_msg_t *reply = lc_op ("SANDBOX_DESTROY", id);
    CHECK (lc_status (&reply) == 202);
    CHECK (lc_wait_state (id, "error", 5000));
    CHECK (lc_col_is (id, "op", "destroy"));
    CHECK (lc_col_is (id, "error", "busy volume"));
    CHECK (lc_count ("SELECT count(*) FROM tombstones WHERE agent_id = :id", id) == 1);
    reply = lc_op ("SANDBOX_START", id);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 409);
    CHECK (reply && strstr (ah_msg_str (reply, "error"), "only destroy"));
    ah_msg_destroy (&reply);
    unlink (fail);
    free (fail);
    reply = lc_op ("SANDBOX_DESTROY", id);
    CHECK (lc_status (&reply) == 202);
    CHECK (lc_wait_state (id, NULL, 5000));
    CHECK (lc_saw_event (id, "destroyed", NULL, 0));
    CHECK (lc_count ("SELECT count(*) FROM agents WHERE id = :id", id) == 0);
    CHECK (lc_count ("SELECT count(*) FROM tombstones WHERE agent_id = :id", id) == 0);
    char *dir = lc_fake_path (id, NULL);
    CHECK (!lc_exists (dir));
    free (dir);
    CHECK (lc_status ((reply = lc_op ("SANDBOX_START", id), &reply)) == 404);
}

void test_destroy_during_start (void)
{
    char *id = lc_create ("beta");
    if (!id)
        return;
    CHECK (lc_wait_state (id, "running", 5000));
    ah_msg_t *reply = lc_op ("SANDBOX_STOP", id);
    ah_msg_destroy (&reply);
    CHECK (lc_wait_state (id, "sleeping", 5000));
    int starts = atomic_load (&lc_drv.starts), destroys = atomic_load (&lc_drv.destroys);
    atomic_store (&lc_drv.start_delay_ms, 400);
    reply = lc_op ("SANDBOX_START", id);
    CHECK (lc_status (&reply) == 202);
    reply = lc_op ("SANDBOX_DESTROY", id);
    CHECK (lc_status (&reply) == 202);
    CHECK (lc_col_is (id, "state", "destroying"));
    CHECK (lc_wait_state (id, NULL, 5000));
    CHECK (atomic_load (&lc_drv.starts) == starts + 1);
    CHECK (atomic_load (&lc_drv.destroys) == destroys + 1);
    char *dir = lc_fake_path (id, NULL);
    CHECK (!lc_exists (dir));
    free (dir);
    atomic_store (&lc_drv.start_delay_ms, 0);
    free (id);
}

void test_tenant_limits (void)
{
    CHECK (ah_store_exec (lc_store, "INSERT INTO tenants (name, max_agents, max_cpus) VALUES ('small', 1, 3)",
                          NULL) == 0);
    ah_msg_t *m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", "small-1");
    ah_msg_set_str (m, "tenant", "small");
    ah_msg_set_double (m, "cpus", 2);
    ah_msg_t *reply = lc_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 201);
    char *id = reply && ah_msg_str (reply, "agent_id") ? strdup (ah_msg_str (reply, "agent_id")) : NULL;
    ah_msg_destroy (&reply);
    m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", "small-2");
    ah_msg_set_str (m, "tenant", "small");
    reply = lc_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 422);
    CHECK (reply && strstr (ah_msg_str (reply, "error"), "tenant 'small' already holds 1 of 1 kept sandboxes, asleep or not (its max_sandboxes)"));
    ah_msg_destroy (&reply);
    //  Its own update is counted once: 2 -> 3 cpus fits, 4 does not.
    m = ah_msg_new ("AGENT_UPDATE");
    ah_msg_set_str (m, "agent", "small-1");
    ah_msg_set_double (m, "cpus", 3);
    CHECK (lc_status ((reply = lc_call (m), &reply)) == 200);
    m = ah_msg_new ("AGENT_UPDATE");
    ah_msg_set_str (m, "agent", "small-1");
    ah_msg_set_double (m, "cpus", 4);
    reply = lc_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 422);
    CHECK (reply && strstr (ah_msg_str (reply, "error"), "over its limit of 3"));
    ah_msg_destroy (&reply);
    if (id) {
        CHECK (lc_wait_state (id, "running", 5000));
        CHECK (lc_status ((reply = lc_op ("SANDBOX_DESTROY", id), &reply)) == 202);
        CHECK (lc_wait_state (id, NULL, 5000));
    }
    free (id);
}

void test_restart_repairs (void)
{
    //  Agents left mid-operation by a server that went away: "stopping"
    //  whose sandbox still runs, "destroying", "creating" whose create
    //  never happened, "starting" whose sandbox is stopped.
    const char *names [4] = { "gamma", "delta", "epsilon", "zeta" };
    char *ids [4];
    for (int i = 0; i < 4; i++) {
        ids [i] = lc_create (names [i]);
        CHECK (ids [i] && lc_wait_state (ids [i], "running", 5000));
    }
    if (!ids [0] || !ids [1] || !ids [2] || !ids [3])
        return;
    zactor_destroy (&lc_lifecycle);
    int creates = atomic_load (&lc_drv.creates), starts = atomic_load (&lc_drv.starts);
    char sql [1024];
    snprintf (sql, sizeof sql,
              "UPDATE sandboxes SET state = 'stopping', op = 'stop' WHERE agent_id = '%s';"
              "UPDATE sandboxes SET state = 'destroying', op = 'destroy' WHERE agent_id = '%s';"
              "INSERT INTO tombstones (agent_id, at) VALUES ('%s', 1);"
              "UPDATE sandboxes SET state = 'creating', op = 'create' WHERE agent_id = '%s';"
              "UPDATE sandboxes SET state = 'starting', op = 'start' WHERE agent_id = '%s';",
              ids [0], ids [1], ids [1], ids [2], ids [3]);
    CHECK (ah_store_exec (lc_store, sql, NULL) == 0);
    char *err = NULL;
    CHECK (lc_drv.inner->destroy (lc_drv.inner, ids [2], &err) == 0);
    CHECK (lc_drv.inner->stop (lc_drv.inner, ids [3], &err) == 0);
    //  zeta cannot even be looked at: its start is run again regardless.
    char *blind = lc_fake_path (ids [3], "fail-inspect");
    lc_write (blind, "inspect is broken");
    lc_start_lifecycle (1000);
    CHECK (lc_wait_state (ids [0], "sleeping", 5000));
    CHECK (lc_wait_state (ids [1], NULL, 5000));
    CHECK (lc_count ("SELECT count(*) FROM tombstones WHERE agent_id = :id", ids [1]) == 0);
    CHECK (lc_wait_state (ids [2], "running", 5000));
    CHECK (lc_wait_state (ids [3], "running", 5000));
    unlink (blind);
    free (blind);
    CHECK (atomic_load (&lc_drv.creates) == creates + 1);
    CHECK (atomic_load (&lc_drv.starts) == starts + 2);
    for (int i = 0; i < 4; i++)
        free (ids [i]);
}


//  The next message the "builder" socket gets: RUNTIME_ENSURE's runtime ("" none).
static void s_builder_expect (zsock_t *builder, const char *runtime)
{
    zsock_set_rcvtimeo (builder, 5000);
    ah_msg_t *m = ah_msg_recv (builder, true, NULL);
    CHECK (m && streq (ah_msg_type (m), "RUNTIME_ENSURE") && streq (ah_msg_str (m, "runtime"), runtime));
    ah_msg_destroy (&m);
}

static void s_builder_ready (zsock_t *builder, const char *runtime, const char *error)
{
    ah_msg_t *m = ah_msg_new ("RUNTIME_READY");
    ah_msg_set_str (m, "runtime", runtime);
    ah_msg_set_bool (m, "ok", error == NULL);
    ah_msg_set_str (m, error ? "error" : "briefing", error ? error : "# the briefing");
    ah_msg_send (&m, builder, "lifecycle");
}

//  The agent ends in error (within 5 s) from op, its error holding want.
static bool s_ended_in_error (const char *id, const char *op, const char *want)
{
    bool ok = lc_wait_state (id, "error", 5000);
    char *error = lc_col (id, "error");
    ok = ok && error && strstr (error, want);
    if (!ok)
        fprintf (stderr, "  %s: error '%s', want '%s'\n", id, error ? error : "", want);
    free (error);
    return ok && lc_col_is (id, "op", op);
}

//  With the builder (a socket of the test's standing in for it): a create
//  on a runtime waits for its image (RUNTIME_ENSURE, no driver call), shows
//  the builder's progress on the row and in SANDBOX_STATE, goes on once
//  RUNTIME_READY says ok (and the start asks again), and ends in error
//  with the build's reason when it says not ok.
void test_preparing (void)
{
    zactor_destroy (&lc_lifecycle);
    zsock_t *builder = ah_bus_connect ("builder");
    zclock_sleep (50);
    lc_start_lifecycle_with (1000, true);
    lc_drain_events ();
    int creates = atomic_load (&lc_drv.creates);
    ah_msg_t *m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", "prep");
    ah_msg_set_str (m, "runtime", "busybox");
    ah_msg_t *reply = lc_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 201 && streq (ah_msg_str (reply, "runtime"), "busybox"));
    char *id = reply && ah_msg_str (reply, "agent_id") ? strdup (ah_msg_str (reply, "agent_id")) : NULL;
    ah_msg_destroy (&reply);
    if (!id) {
        zsock_destroy (&builder);
        return;
    }
    s_builder_expect (builder, "busybox");
    zclock_sleep (100);
    CHECK (atomic_load (&lc_drv.creates) == creates);        //  no driver call while preparing
    CHECK (lc_col_is (id, "state", "creating"));
    CHECK (lc_count ("SELECT runtime = 'busybox' AND memory_mb = 256 FROM agents WHERE id = :id", id) == 1);
    //  The builder's progress: on the row, and as SANDBOX_STATE {progress}.
    lc_drain_events ();
    m = ah_msg_new ("RUNTIME_PROGRESS");
    ah_msg_set_str (m, "runtime", "busybox");
    ah_msg_set_str (m, "text", "Step 2/5 : RUN true");
    ah_msg_send (&m, builder, "lifecycle");
    bool seen = false;
    for (int i = 0; i < 50 && !seen; i++) {
        ah_msg_t *e = ah_msg_recv (lc_watch, true, NULL);
        seen = e && streq (ah_msg_str (e, "agent_id"), id) && streq (ah_msg_str (e, "state"), "creating")
            && ah_msg_str (e, "progress") && strstr (ah_msg_str (e, "progress"), "Preparing the sandbox")
            && strstr (ah_msg_str (e, "progress"), "Step 2/5");
        ah_msg_destroy (&e);
    }
    CHECK (seen);
    CHECK (lc_count ("SELECT progress LIKE 'Preparing the sandbox% Step 2/5 : RUN true' FROM sandboxes"
                    " WHERE agent_id = :id", id) == 1);
    //  Progress of another runtime is not this agent's.
    s_builder_ready (builder, "debian", NULL);
    zclock_sleep (100);
    CHECK (lc_col_is (id, "state", "creating"));
    //  Ready: create, then the start asks again (answered at once), then running.
    s_builder_ready (builder, "busybox", NULL);
    s_builder_expect (builder, "busybox");
    s_builder_ready (builder, "busybox", NULL);
    CHECK (lc_wait_state (id, "running", 5000));
    CHECK (atomic_load (&lc_drv.creates) == creates + 1);
    CHECK (lc_count ("SELECT progress IS NULL FROM sandboxes WHERE agent_id = :id", id) == 1);
    free (id);

    //  A build that failed: the agent's error says why; nothing was created.
    id = lc_create ("doomed");
    if (id) {
        s_builder_expect (builder, "debian");
        s_builder_ready (builder, "debian", "the disk is full");
        CHECK (s_ended_in_error (id, "create", "preparing the sandbox: runtime debian: the disk is full"));
        CHECK (atomic_load (&lc_drv.creates) == creates + 1);
    }
    free (id);
    zsock_destroy (&builder);
}

//  RUNTIME_ENSURE with gone=true for runtime, within 5 s.
static void s_builder_expect_gone (zsock_t *builder, const char *runtime)
{
    zsock_set_rcvtimeo (builder, 5000);
    ah_msg_t *m = ah_msg_recv (builder, true, NULL);
    CHECK (m && streq (ah_msg_type (m), "RUNTIME_ENSURE") && streq (ah_msg_str (m, "runtime"), runtime)
           && ah_msg_bool (m, "gone", false));
    ah_msg_destroy (&m);
}

//  op (202) on the busybox agent id: the builder says the image is
//  there, the driver call meets it gone, lifecycle asks again (gone).
static void s_meets_gone (zsock_t *builder, const char *op, const char *id)
{
    ah_msg_t *reply = lc_op (op, id);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 202);
    ah_msg_destroy (&reply);
    s_builder_expect (builder, "busybox");
    s_builder_ready (builder, "busybox", NULL);
    s_builder_expect_gone (builder, "busybox");
}

//  A runtime's image removed behind the builder's back (docker rmi): a
//  create, a start and a rebuild that meet it missing ask the builder to
//  make it again (RUNTIME_ENSURE gone), wait for it in their transitional
//  state and go on; an image still gone after that ends in error with
//  the driver's reason (once per operation, never a loop).
void test_image_gone (void)
{
    zactor_destroy (&lc_lifecycle);
    zsock_t *builder = ah_bus_connect ("builder");
    lc_drv.base.image_exists = c_image_exists;
    zclock_sleep (50);
    lc_start_lifecycle_with (1000, true);
    int creates = atomic_load (&lc_drv.creates);
    ah_msg_t *m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", "rmied");
    ah_msg_set_str (m, "runtime", "busybox");
    ah_msg_t *reply = lc_call (m);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 201);
    char *id = reply && ah_msg_str (reply, "agent_id") ? strdup (ah_msg_str (reply, "agent_id")) : NULL;
    ah_msg_destroy (&reply);
    if (!id) {
        zsock_destroy (&builder);
        return;
    }
    //  Create: the builder believed the image present; the driver says no.
    atomic_store (&lc_drv.image_gone, 1);
    s_builder_expect (builder, "busybox");
    s_builder_ready (builder, "busybox", NULL);
    s_builder_expect_gone (builder, "busybox");
    CHECK (atomic_load (&lc_drv.creates) == creates + 1);
    CHECK (lc_col_is (id, "state", "creating"));
    atomic_store (&lc_drv.image_gone, 0);            //  the builder made it again
    s_builder_ready (builder, "busybox", NULL);
    s_builder_expect (builder, "busybox");          //  the start asks as usual
    s_builder_ready (builder, "busybox", NULL);
    CHECK (lc_wait_state (id, "running", 5000));
    CHECK (atomic_load (&lc_drv.creates) == creates + 2);

    //  Start of a sleeping agent whose container went (container_ttl):
    //  the container is made again from the image, which is gone.
    reply = lc_op ("SANDBOX_STOP", id);
    ah_msg_destroy (&reply);
    CHECK (lc_wait_state (id, "sleeping", 5000));
    CHECK (lc_sql ("UPDATE sandboxes SET container_removed_at = 1 WHERE agent_id = :id", id) == 0);
    atomic_store (&lc_drv.image_gone, 1);
    int starts = atomic_load (&lc_drv.starts);
    int rebuilds = atomic_load (&lc_drv.rebuilds);
    s_meets_gone (builder, "SANDBOX_START", id);
    CHECK (lc_col_is (id, "state", "starting"));
    atomic_store (&lc_drv.image_gone, 0);
    s_builder_ready (builder, "busybox", NULL);
    CHECK (lc_wait_state (id, "running", 5000));
    CHECK (atomic_load (&lc_drv.rebuilds) == rebuilds + 2 && atomic_load (&lc_drv.starts) == starts + 1);
    CHECK (lc_count ("SELECT container_removed_at IS NULL FROM sandboxes WHERE agent_id = :id", id) == 1);
    //  A start of an existing container needs no image: one that fails
    //  while the image is gone is not taken for the image's fault.
    reply = lc_op ("SANDBOX_STOP", id);
    ah_msg_destroy (&reply);
    CHECK (lc_wait_state (id, "sleeping", 5000));
    atomic_store (&lc_drv.image_gone, 1);
    atomic_store (&lc_drv.start_fails, 1);
    reply = lc_op ("SANDBOX_START", id);
    ah_msg_destroy (&reply);
    s_builder_expect (builder, "busybox");
    s_builder_ready (builder, "busybox", NULL);
    CHECK (s_ended_in_error (id, "start", "the engine is unwell"));
    atomic_store (&lc_drv.start_fails, 0);
    atomic_store (&lc_drv.image_gone, 0);

    //  Rebuild whose image stays gone after the builder's answer: asked
    //  once, then error with the driver's reason.
    atomic_store (&lc_drv.image_gone, 1);
    rebuilds = atomic_load (&lc_drv.rebuilds);
    s_meets_gone (builder, "SANDBOX_REBUILD", id);
    CHECK (lc_col_is (id, "state", "rebuilding"));
    s_builder_ready (builder, "busybox", NULL);
    CHECK (s_ended_in_error (id, "rebuild", "image 'agenthold/busybox:2' not found"));
    CHECK (atomic_load (&lc_drv.rebuilds) == rebuilds + 2);
    zsock_set_rcvtimeo (builder, 300);
    ah_msg_t *more = ah_msg_recv (builder, true, NULL);
    CHECK (more == NULL);                           //  no third ask
    ah_msg_destroy (&more);
    //  The driver said the image was not found, and it is back when
    //  asked after (the builder made it meanwhile): the driver's words
    //  are enough for a second try.
    atomic_store (&lc_drv.image_gone, 0);
    atomic_store (&lc_drv.gone_once, 1);
    s_meets_gone (builder, "SANDBOX_REBUILD", id);
    s_builder_ready (builder, "busybox", NULL);
    s_builder_expect (builder, "busybox");          //  the start after the rebuild
    s_builder_ready (builder, "busybox", NULL);
    CHECK (lc_wait_state (id, "running", 5000));
    free (id);
    lc_drv.base.image_exists = NULL;
    zsock_destroy (&builder);
}

