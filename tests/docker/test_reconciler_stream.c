/*  tests/docker/test_reconciler_stream.c: the reconciler's handling of a
    driver event stream that breaks (an engine restart), with a stub
    driver, so it needs no Docker: it reconnects with backoff, inspects
    every stored sandbox again once back (source "resync"), forwards
    events (source "event"), removes orphans through the driver, and
    stops promptly while following the stream. The engine is down for
    the start-up pass's list: the orphan goes at the first resync.     */
#include "actors/reconciler.h"
#include "common/bus.h"
#include "common/msg.h"
#include "store/store.h"
#include "../common/check.h"
#include "tests/common/actor_probe.h"

#include <stdlib.h>
#include <unistd.h>

//  The stub's counters are touched by the reconciler's worker threads
//  and read by main: atomics.
typedef struct {
    int list_calls;
    int watch_calls;
    int destroyed_orphan;
    int destroyed_other;
    int64_t watch_times [8];            //  when each watch call began (ms)
} stub_t;

static int
s_inspect (ah_driver_t *self, const char *agent_id, ah_sandbox_status_t *status, char **err)
{
    memset (status, 0, sizeof *status);
    status->exists = true;
    status->running = false;
    status->exit_code = 3;
    snprintf (status->detail, sizeof status->detail, "exited (3)");
    return 0;
}

//  The engine is down for the start-up pass's list; later lists show the
//  orphan until it is destroyed.
static int
s_list (ah_driver_t *self, char ***ids, char **err)
{
    stub_t *stub = self->impl;
    if (__atomic_add_fetch (&stub->list_calls, 1, __ATOMIC_SEQ_CST) == 1) {
        *err = strdup ("cannot reach the Docker Engine (stub)");
        return -1;
    }
    *ids = calloc (3, sizeof (char *));
    (*ids) [0] = strdup ("s1");
    if (!__atomic_load_n (&stub->destroyed_orphan, __ATOMIC_SEQ_CST))
        (*ids) [1] = strdup ("orphan1");
    return 0;
}

static int
s_destroy (ah_driver_t *self, const char *agent_id, char **err)
{
    stub_t *stub = self->impl;
    if (streq (agent_id, "orphan1"))
        __atomic_add_fetch (&stub->destroyed_orphan, 1, __ATOMIC_SEQ_CST);
    else
        __atomic_add_fetch (&stub->destroyed_other, 1, __ATOMIC_SEQ_CST);
    return 0;
}

//  1st call: the engine is down. 2nd: connected, one event, then the
//  stream ends (engine restart). 3rd and later: connected, then follow
//  until told to stop.
static int
s_watch (ah_driver_t *self, void (*on_change) (void *, const char *, const char *),
         void *arg, volatile int *stop, char **err)
{
    stub_t *stub = self->impl;
    int n = __atomic_add_fetch (&stub->watch_calls, 1, __ATOMIC_SEQ_CST);
    if (n <= 8)
        __atomic_store_n (&stub->watch_times [n - 1], zclock_mono (), __ATOMIC_SEQ_CST);
    if (n == 1) {
        *err = strdup ("cannot reach the Docker Engine (stub)");
        return -1;
    }
    on_change (arg, NULL, "connected");
    if (n == 2) {
        on_change (arg, "s1", "die");
        on_change (arg, "unknown7", "die");         //  not stored: ignored
        on_change (arg, NULL, "image");             //  an image went: the builder checks
        *err = strdup ("the engine closed the stream (stub)");
        return -1;
    }
    while (!*stop)
        zclock_sleep (20);
    return 0;
}

int
main (void)
{
    zsys_init ();
    char dir [128], dbpath [192];
    snprintf (dir, sizeof dir, "/tmp/ahrecstub%d", getpid ());
    mkdir (dir, 0755);
    snprintf (dbpath, sizeof dbpath, "%s/agenthold.db", dir);
    char *err = NULL;
    ah_store_t *store = ah_store_open (dbpath, true, &err);
    CHECK (store != NULL);
    CHECK (ah_store_exec (store,
        "INSERT INTO agents (id, name, image, cpus, memory_mb, idle_minutes, created_at)"
        "  VALUES ('s1', 's1', 'img', 1, 64, 15, 0);"
        "INSERT INTO sandboxes (agent_id, state, image, cpus, memory_mb, updated_at)"
        "  VALUES ('s1', 'running', 'img', 1, 64, 0);", &err) == 0);

    stub_t stub = { 0 };
    ah_driver_t driver = {
        .name = "stub", .inspect = s_inspect, .list = s_list, .destroy = s_destroy,
        .watch = s_watch, .impl = &stub,
    };
    ah_bus_args_t bargs = { 0 };
    zactor_t *bus = ah_actor_new (&ah_bus_actor, &bargs, NULL);
    zsock_t *lifecycle = ah_bus_connect ("lifecycle");
    zsock_t *recorder = ah_bus_connect ("recorder");
    zsock_t *builder = ah_bus_connect ("builder");
    zclock_sleep (50);
    ah_reconciler_args_t args = { .db_path = dbpath, .driver = &driver,
                                  .backoff_min_ms = 100, .backoff_max_ms = 400 };
    zactor_t *rec = ah_actor_new (&ah_reconciler_actor, &args, NULL);
    CHECK (rec != NULL);

    //  Collect what lifecycle hears for 3 seconds.
    int startup = 0, event = 0, resync = 0, other = 0;
    zsock_set_rcvtimeo (lifecycle, 100);
    int64_t until = zclock_mono () + 3000;
    while (zclock_mono () < until) {
        ah_msg_t *m = ah_msg_recv (lifecycle, true, NULL);
        if (!m)
            continue;
        const char *src = ah_msg_str (m, "source");
        const char *id = ah_msg_str (m, "agent_id");
        CHECK_STR (ah_msg_type (m), "SANDBOX_OBSERVED");
        CHECK_STR (id, "s1");
        CHECK (ah_msg_int (m, "exit_code", 0) == 3 && !ah_msg_bool (m, "running", true));
        if (src && streq (src, "startup"))
            startup++;
        else
        if (src && streq (src, "event") && streq (ah_msg_str (m, "action"), "die"))
            event++;
        else
        if (src && streq (src, "resync"))
            resync++;
        else
            other++;
        ah_msg_destroy (&m);
    }
    CHECK (startup == 1);
    CHECK (event == 1);
    //  Reconnected twice after a break (calls 2 and 3): one resync each.
    CHECK (resync == 2);
    CHECK (other == 0);
    int calls = __atomic_load_n (&stub.watch_calls, __ATOMIC_SEQ_CST);
    CHECK (calls == 3);
    //  Backoff: call 2 came >= 100 ms after call 1, call 3 >= 100 ms after 2 (a stream that connected resets the backoff).
    CHECK (stub.watch_times [1] - stub.watch_times [0] >= 90);
    CHECK (stub.watch_times [2] - stub.watch_times [1] >= 90);    //  "connected" reset it
    CHECK (__atomic_load_n (&stub.destroyed_orphan, __ATOMIC_SEQ_CST) == 1);
    CHECK (__atomic_load_n (&stub.destroyed_other, __ATOMIC_SEQ_CST) == 0);

    //  The builder is told to check its images each time the stream
    //  connects (twice) and when an image went (once), in that order.
    zsock_set_rcvtimeo (builder, 1000);
    const char *whys [] = { "connected", "image", "connected" };
    for (int i = 0; i < 3; i++) {
        ah_msg_t *check = ah_msg_recv (builder, true, NULL);
        CHECK (check && streq (ah_msg_type (check), "RUNTIME_CHECK") && ah_msg_str (check, "why")
               && streq (ah_msg_str (check, "why"), whys [i]));
        ah_msg_destroy (&check);
    }
    zsock_set_rcvtimeo (builder, 200);
    ah_msg_t *extra = ah_msg_recv (builder, true, NULL);
    CHECK (extra == NULL);
    ah_msg_destroy (&extra);

    zsock_set_rcvtimeo (recorder, 1000);
    ah_msg_t *m = ah_msg_recv (recorder, true, NULL);
    CHECK (m && streq (ah_msg_type (m), "OP_RECORD") && streq (ah_msg_str (m, "agent_id"), "orphan1")
           && streq (ah_msg_str (m, "kind"), "reconcile.orphan") && ah_msg_bool (m, "ok", false));
    ah_msg_destroy (&m);

    //  Unknown requests get a 400 answer.
    m = ah_msg_new ("NONSENSE");
    ah_msg_set_int (m, "req", 5);
    ah_msg_send (&m, lifecycle, "reconciler");
    zsock_set_rcvtimeo (lifecycle, 1000);
    m = ah_msg_recv (lifecycle, true, NULL);
    CHECK (m && streq (ah_msg_type (m), "REPLY") && ah_msg_int (m, "status", 0) == 400
           && ah_msg_int (m, "req", 0) == 5);
    ah_msg_destroy (&m);
    actor_probe_refusals ("reconciler");

    //  SCAN runs the start-up pass again.
    zstr_send (rec, "SCAN");
    CHECK (zsock_wait (rec) == 0);
    zsock_set_rcvtimeo (lifecycle, 2000);
    m = ah_msg_recv (lifecycle, true, NULL);
    CHECK (m && streq (ah_msg_str (m, "source"), "startup"));
    ah_msg_destroy (&m);

    int64_t t0 = zclock_mono ();
    zactor_destroy (&rec);
    CHECK (zclock_mono () - t0 < 2000);

    zsock_destroy (&lifecycle);
    zsock_destroy (&recorder);
    zsock_destroy (&builder);
    zactor_destroy (&bus);
    ah_store_close (&store);
    char cmd [256];
    snprintf (cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system (cmd)) { /* nothing more to do */ }
    free (err);
    return CHECK_DONE ();
}
