/*  tests/docker/test_docker_reconciler.c: the reconciler against the real
    engine. A stored, running sandbox is reported at start-up; an orphan
    (labelled objects with no stored agent) is removed and recorded; what
    an operator does by hand through the Engine API (stop, start, rm -f)
    reaches a fake "lifecycle" on the bus as SANDBOX_OBSERVED within
    seconds; and an engine that goes away (a proxy in front of it is
    killed) and comes back is followed again, with what happened
    meanwhile reported as source "resync".                             */
#include "actors/reconciler.h"
#include "common/bus.h"
#include "common/msg.h"
#include "drivers/docker.h"
#include "store/store.h"
#include "../common/check.h"
#include "engine.h"
#include "proxy.h"

//  Waits for a SANDBOX_OBSERVED for agent_id with the given source (and
//  action, unless NULL) matching want_exists / want_running (-1: any).
//  Returns it or NULL. (An observation is an inspect made when the event
//  is handled, so an earlier event may already show a later state: match
//  the action that must show it.)
static ah_msg_t *
s_wait_observed_action (zsock_t *lifecycle, const char *agent_id, const char *source,
                        const char *action, int want_exists, int want_running, int timeout_ms)
{
    int64_t deadline = zclock_mono () + timeout_ms;
    while (zclock_mono () < deadline) {
        zsock_set_rcvtimeo (lifecycle, (int) (deadline - zclock_mono ()) + 1);
        ah_msg_t *m = ah_msg_recv (lifecycle, true, NULL);
        if (!m)
            return NULL;
        fprintf (stderr, "lifecycle got %s %s exists=%d running=%d detail='%s' source=%s action=%s\n",
                 ah_msg_type (m), ah_msg_str (m, "agent_id"), ah_msg_bool (m, "exists", false),
                 ah_msg_bool (m, "running", false), ah_msg_str (m, "detail"),
                 ah_msg_str (m, "source"), ah_msg_str (m, "action") ? ah_msg_str (m, "action") : "-");
        const char *id = ah_msg_str (m, "agent_id");
        const char *src = ah_msg_str (m, "source");
        if (streq (ah_msg_type (m), "SANDBOX_OBSERVED") && id && streq (id, agent_id)
        &&  src && streq (src, source)
        &&  (!action || (ah_msg_str (m, "action") && streq (ah_msg_str (m, "action"), action)))
        &&  (want_exists < 0 || ah_msg_bool (m, "exists", false) == want_exists)
        &&  (want_running < 0 || ah_msg_bool (m, "running", false) == want_running))
            return m;
        ah_msg_destroy (&m);
    }
    return NULL;
}

static ah_msg_t *
s_wait_observed (zsock_t *lifecycle, const char *agent_id, const char *source,
                 int want_exists, int want_running, int timeout_ms)
{
    return s_wait_observed_action (lifecycle, agent_id, source, NULL, want_exists, want_running,
                                   timeout_ms);
}

static void
s_store_agent (ah_store_t *store, const char *id, const char *image)
{
    sqlite3_stmt *st = ah_store_prepare (store,
        "INSERT INTO agents (id, name, image, cpus, memory_mb, idle_minutes, created_at)"
        " VALUES (:id, :id, :image, 1, 64, 15, 0)");
    ah_store_bind_text (st, ":id", id);
    ah_store_bind_text (st, ":image", image);
    CHECK (ah_store_step (store, st) == SQLITE_DONE);
    sqlite3_reset (st);
    st = ah_store_prepare (store,
        "INSERT INTO sandboxes (agent_id, state, image, cpus, memory_mb, updated_at)"
        " VALUES (:id, 'running', :image, 1, 64, 0)");
    ah_store_bind_text (st, ":id", id);
    ah_store_bind_text (st, ":image", image);
    CHECK (ah_store_step (store, st) == SQLITE_DONE);
    sqlite3_reset (st);
}

int
main (int argc, char **argv)
{
    if (argc == 4 && streq (argv [1], "--proxy"))
        return proxy_main (argv [2], argv [3]);
    if (!eng_available ())
        return eng_skip ("docker.reconciler");
    zsys_init ();
    char name [160];
    eng_fixture_t fx;
    const char *prefix = fx.prefix, *tag = fx.tag, *dbpath = fx.dbpath;
    zactor_t *bus = NULL, *rec = NULL;
    zsock_t *lifecycle = NULL, *recorder = NULL;
    ah_driver_t *d = NULL, *dp = NULL;
    ah_store_t *store = NULL;
    pid_t proxy = -1;
    char proxy_path [256];
    snprintf (proxy_path, sizeof proxy_path, "/tmp/ahrec%d-engine.sock", getpid ());
    if (eng_fixture_init (&fx, "ahrec", "10.213.32.0/20")) {
        CHECK (0);
        goto cleanup;
    }
    ah_config_t config = fx.config;
    char *err = NULL;
    d = ah_docker_driver_new (&config, &err);
    CHECK (d != NULL);
    if (!d)
        goto cleanup;
    store = ah_store_open (dbpath, true, &err);
    CHECK (store != NULL);
    s_store_agent (store, "0000000000e1", tag);

    //  A stored, running sandbox and an orphan (made by the driver, never stored).
    ah_sandbox_spec_t r1 = { .agent_id = "0000000000e1", .image = tag };
    ah_sandbox_spec_t o9 = { .agent_id = "0000000000f9", .image = tag };
    CHECK (d->create (d, &r1, &err) == 0);
    CHECK (d->create (d, &o9, &err) == 0);
    ah_boot_t boot = { .agent_id = "0000000000e1", .token = "t", .tunnel_port = 18300 };
    CHECK (d->start (d, &boot, &err) == 0);

    ah_bus_args_t bargs = { .tap_endpoint = NULL };
    bus = ah_actor_new (&ah_bus_actor, &bargs, NULL);
    lifecycle = ah_bus_connect ("lifecycle");
    recorder = ah_bus_connect ("recorder");
    zclock_sleep (50);
    //  The reconciler reaches the engine through a proxy the test can kill.
    proxy = proxy_start (argv [0], proxy_path, ENG_SOCKET);
    CHECK (proxy > 0);
    ah_config_t proxied = config;
    proxied.docker_socket = proxy_path;
    dp = ah_docker_driver_new (&proxied, &err);
    CHECK (dp != NULL);
    if (!dp || proxy <= 0)
        goto cleanup;
    ah_reconciler_args_t rargs = { .db_path = dbpath, .driver = dp,
                                   .backoff_min_ms = 200, .backoff_max_ms = 1000 };
    rec = ah_actor_new (&ah_reconciler_actor, &rargs, NULL);
    CHECK (rec != NULL);

    //  Start-up: r1 is running.
    ah_msg_t *m = s_wait_observed (lifecycle, "0000000000e1", "startup", 1, 1, 10000);
    CHECK (m != NULL);
    CHECK (m && ah_msg_int (m, "exit_code", 99) == -1);
    ah_msg_destroy (&m);

    //  The orphan is gone and recorded.
    zsock_set_rcvtimeo (recorder, 15000);
    m = ah_msg_recv (recorder, true, NULL);
    CHECK (m && streq (ah_msg_type (m), "OP_RECORD"));
    CHECK_STR (m ? ah_msg_str (m, "kind") : NULL, "reconcile.orphan");
    CHECK_STR (m ? ah_msg_str (m, "agent_id") : NULL, "0000000000f9");
    CHECK (m && ah_msg_bool (m, "ok", false));
    ah_msg_destroy (&m);
    long st;
    snprintf (name, sizeof name, "%s-0000000000f9", prefix);
    free (eng_call ("GET", NULL, &st, "/containers/%s/json", name));
    CHECK (st == 404);
    snprintf (name, sizeof name, "%s-net-0000000000f9", prefix);
    free (eng_call ("GET", NULL, &st, "/networks/%s", name));
    CHECK (st == 404);
    snprintf (name, sizeof name, "%s-home-0000000000f9", prefix);
    free (eng_call ("GET", NULL, &st, "/volumes/%s", name));
    CHECK (st == 404);
    //  r1 was left alone.
    snprintf (name, sizeof name, "%s-0000000000e1", prefix);
    free (eng_call ("GET", NULL, &st, "/containers/%s/json", name));
    CHECK (st == 200);

    //  Give the follower a moment to be on the stream, then act by hand.
    zclock_sleep (500);
    struct {
        const char *method, *path, *what;
        int exists, running;
        const char *action, *detail;   //  expected, or NULL
    } steps [] = {
        { "POST", "/containers/%s/stop?t=1", "docker stop", 1, 0, NULL, "exited" },
        { "POST", "/containers/%s/start", "docker start", 1, 1, "start", "running" },
        { "DELETE", "/containers/%s?force=true", "docker rm -f", 0, 0, "destroy", "home volume present" },
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps [0]; i++) {
        double t0 = eng_now ();
        free (eng_call (steps [i].method, NULL, &st, steps [i].path, name));
        CHECK (st == 204);
        m = s_wait_observed_action (lifecycle, "0000000000e1", "event", steps [i].action,
                                    steps [i].exists, steps [i].running, 10000);
        double latency = eng_now () - t0;
        CHECK (m != NULL);
        CHECK (m && ah_msg_str (m, "action")
               && (!steps [i].action || streq (ah_msg_str (m, "action"), steps [i].action)));
        CHECK (m && strstr (ah_msg_str (m, "detail"), steps [i].detail));
        ah_msg_destroy (&m);
        fprintf (stderr, "%s -> SANDBOX_OBSERVED in %.2f s (the operation included)\n",
                 steps [i].what, latency);
        CHECK (latency < 8);
    }

    //  The engine goes away; meanwhile r2 stops; the engine comes back.
    s_store_agent (store, "0000000000e2", tag);
    ah_sandbox_spec_t r2 = { .agent_id = "0000000000e2", .image = tag };
    CHECK (d->create (d, &r2, &err) == 0);
    boot.agent_id = "0000000000e2";
    CHECK (d->start (d, &boot, &err) == 0);
    m = s_wait_observed (lifecycle, "0000000000e2", "event", 1, 1, 10000);
    CHECK (m != NULL);
    ah_msg_destroy (&m);
    proxy_kill (&proxy);
    snprintf (name, sizeof name, "%s-0000000000e2", prefix);
    free (eng_call ("POST", NULL, &st, "/containers/%s/stop?t=1", name));
    CHECK (st == 204);
    zclock_sleep (1500);                    //  a few failed reconnects
    proxy = proxy_start (argv [0], proxy_path, ENG_SOCKET);
    CHECK (proxy > 0);
    double back = eng_now ();
    m = s_wait_observed (lifecycle, "0000000000e2", "resync", 1, 0, 15000);
    CHECK (m != NULL);
    CHECK (m && strstr (ah_msg_str (m, "detail"), "exited"));
    ah_msg_destroy (&m);
    fprintf (stderr, "engine back -> resync observed in %.2f s\n", eng_now () - back);
    //  And events flow again.
    free (eng_call ("POST", NULL, &st, "/containers/%s/start", name));
    m = s_wait_observed (lifecycle, "0000000000e2", "event", 1, 1, 10000);
    CHECK (m != NULL);
    ah_msg_destroy (&m);

    //  Stopping the actor is prompt even while it follows the stream.
    double t0 = eng_now ();
    zactor_destroy (&rec);
    CHECK (eng_now () - t0 < 3);

cleanup:
    zactor_destroy (&rec);
    zsock_destroy (&lifecycle);
    zsock_destroy (&recorder);
    zactor_destroy (&bus);
    if (d) {
        d->destroy (d, "0000000000e1", &err);
        d->destroy (d, "0000000000f9", &err);
        d->destroy (d, "0000000000e2", &err);
        d->destroy_driver (&d);
    }
    if (dp)
        dp->destroy_driver (&dp);
    proxy_kill (&proxy);
    unlink (proxy_path);
    ah_store_close (&store);
    CHECK (eng_fixture_cleanup (&fx) == 0);
    return CHECK_DONE ();
}
