/*  bench/lifecycle/bench_lifecycle.c: lifecycle transitions per second.

    Drives stop/start cycles through the real actor (bus, SQLite file,
    worker threads, the fake driver without waiting for a tunnel hello)
    and waits for each SANDBOX_STATE;
    then, as the baseline in the same run, does the same number of
    guarded UPDATEs straight on SQLite (the floor any lifecycle pays).
    Prints both and their ratio: how much the actor, the messages and
    the driver calls cost on top of the database work.

    usage: bench_lifecycle [cycles]    (default 200)                    */
#include "actors/lifecycle.h"
#include "common/bus.h"
#include "common/msg.h"
#include "config/config.h"
#include "store/store.h"

#include <ftw.h>
#include <stdio.h>
#include <unistd.h>

static zsock_t *s_client, *s_watch;

//  Ask, then wait for the sandbox to reach `state` (SANDBOX_STATE events).
static int s_cycle_step (const char *type, const char *id, const char *state)
{
    ah_msg_t *m = ah_msg_new (type);
    ah_msg_set_str (m, "agent", id);
    ah_msg_set_int (m, "req", 1);
    ah_msg_send (&m, s_client, "lifecycle");
    ah_msg_t *reply = ah_msg_recv (s_client, true, NULL);
    int status = reply ? (int) ah_msg_int (reply, "status", 0) : 0;
    ah_msg_destroy (&reply);
    if (status != 202)
        return -1;
    while (true) {
        ah_msg_t *e = ah_msg_recv (s_watch, true, NULL);
        if (!e)
            return -1;
        bool done = streq (ah_msg_str (e, "state"), state);
        bool failed = streq (ah_msg_str (e, "state"), "error");
        ah_msg_destroy (&e);
        if (failed)
            return -1;
        if (done)
            return 0;
    }
}

static int s_rm (const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    return remove (path);
}

int main (int argc, char **argv)
{
    int cycles = argc > 1 ? atoi (argv [1]) : 200;
    if (cycles < 1 || cycles > 1000000) {
        fprintf (stderr, "usage: bench_lifecycle [cycles 1..1000000]\n");
        return 2;
    }
    //  In-process sandboxd dials a tunnel that is not there: quiet.
    setenv ("AGENTHOLD_LOG", "error", 0);
    zsys_init ();
    zsys_handler_set (NULL);
    char dir [] = "/tmp/ah-bench-lifecycle-XXXXXX";
    if (!mkdtemp (dir)) {
        perror ("mkdtemp");
        return 1;
    }
    char db_path [128];
    snprintf (db_path, sizeof db_path, "%s/agenthold.db", dir);
    ah_config_t *config = ah_config_new_defaults ();
    free (config->data_dir);
    config->data_dir = strdup (dir);
    free (config->driver);
    config->driver = strdup ("fake");
    free (config->lua_dir);
    config->lua_dir = strdup (AH_SOURCE_DIR "/lua");
    char *err = NULL;
    ah_store_t *store = ah_store_open (db_path, true, &err);
    ah_driver_t *driver = store ? ah_driver_new (config, &err) : NULL;
    if (!driver) {
        fprintf (stderr, "setup: %s\n", err ? err : "?");
        return 1;
    }
    //  No tunnel here: "running" once the driver's start returns (the
    //  fake's in-process sandboxd threads still start and stop each cycle).
    driver->waits_for_hello = false;
    ah_bus_args_t bus_args = { NULL };
    zactor_t *bus = ah_actor_new (&ah_bus_actor, &bus_args, NULL);
    s_client = ah_bus_connect ("api");
    s_watch = ah_bus_connect ("watch");
    zsock_set_rcvtimeo (s_client, 10000);
    zsock_set_rcvtimeo (s_watch, 10000);
    const char *subscribers [] = { "watch", NULL };
    ah_lifecycle_args_t args = { .config = config, .driver = driver, .db_path = db_path,
                                 .subscribers = subscribers };
    zactor_t *lifecycle = ah_actor_new (&ah_lifecycle_actor, &args, NULL);

    ah_msg_t *m = ah_msg_new ("AGENT_CREATE");
    ah_msg_set_str (m, "name", "bench");
    ah_msg_set_int (m, "req", 1);
    ah_msg_send (&m, s_client, "lifecycle");
    ah_msg_t *reply = ah_msg_recv (s_client, true, NULL);
    char id [32] = "";
    if (reply && ah_msg_str (reply, "agent_id"))
        snprintf (id, sizeof id, "%s", ah_msg_str (reply, "agent_id"));
    ah_msg_destroy (&reply);
    int rc = 1;
    for (ah_msg_t *e; *id && (e = ah_msg_recv (s_watch, true, NULL)); ) {
        bool running = streq (ah_msg_str (e, "state"), "running");
        ah_msg_destroy (&e);
        if (running) {
            rc = 0;
            break;
        }
    }
    //  Through the actor: each cycle is two requests and four state changes.
    int64_t t0 = zclock_usecs ();
    for (int i = 0; i < cycles && rc == 0; i++)
        if (s_cycle_step ("SANDBOX_STOP", id, "sleeping") || s_cycle_step ("SANDBOX_START", id, "running"))
            rc = 1;
    double actor_s = (zclock_usecs () - t0) / 1e6;
    zactor_destroy (&lifecycle);

    //  Baseline: the same four guarded UPDATEs per cycle, straight on SQLite.
    const char *moves [4][2] = { { "stopping", "running" }, { "sleeping", "stopping" },
                                 { "starting", "sleeping" }, { "running", "starting" } };
    t0 = zclock_usecs ();
    for (int i = 0; i < cycles && rc == 0; i++)
        for (int k = 0; k < 4; k++) {
            sqlite3_stmt *st = ah_store_prepare (store,
                "UPDATE sandboxes SET state = :to, updated_at = :now WHERE agent_id = :id AND state = :from");
            ah_store_bind_text (st, ":to", moves [k][0]);
            ah_store_bind_text (st, ":from", moves [k][1]);
            ah_store_bind_int64 (st, ":now", ah_store_now_ms ());
            ah_store_bind_text (st, ":id", id);
            if (ah_store_step (store, st) != SQLITE_DONE || ah_store_changes (store) != 1)
                rc = 1;
            sqlite3_reset (st);
        }
    double direct_s = (zclock_usecs () - t0) / 1e6;

    if (rc == 0) {
        double actor_rate = 4.0 * cycles / actor_s, direct_rate = 4.0 * cycles / direct_s;
        printf ("lifecycle: %d stop/start cycles, %d transitions\n", cycles, 4 * cycles);
        printf ("  through the actor (fake driver): %10.0f transitions/s (%.1f ms per stop+start)\n",
                actor_rate, 1000.0 * actor_s / cycles);
        printf ("  baseline, guarded UPDATEs only:  %10.0f transitions/s\n", direct_rate);
        printf ("  ratio actor/baseline: %.3f (the actor does %.1fx the work per transition)\n",
                actor_rate / direct_rate, direct_rate / actor_rate);
    }
    else
        fprintf (stderr, "bench_lifecycle: a transition failed (see the log)\n");
    zsock_destroy (&s_client);
    zsock_destroy (&s_watch);
    zactor_destroy (&bus);
    ah_store_close (&store);
    driver->destroy_driver (&driver);
    ah_config_destroy (&config);
    nftw (dir, s_rm, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
