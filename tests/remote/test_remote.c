/*  tests/remote/test_remote.c: the remote driver (drivers/remote.h)
    against a stand-in host agent: a ROUTER on ipc:// in a thread of this
    test that answers as the script of the moment says. Checks that a
    long call kept alive by heartbeats outlives sandbox.remote.timeout,
    that silence ends a call with the sentence naming the host, that a
    host of another protocol is refused with the sentence naming what
    runs and what to deploy, that hostile answers (garbage frames, other
    reqs, bad ids in a list, an event for no agent id) are ignored, and
    that the host's state follows (host_info).                         */
#include "drivers/remote.h"
#include "drivers/remote/wire.h"
#include "common/msg.h"
#include "common/log.h"
#include "tests/common/check.h"

#include <czmq.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef enum { M_OK, M_SLOW, M_SILENT, M_OLD, M_HOSTILE } mode_t_;

static volatile int s_mode = M_OK;
static volatile int s_stop;
static char s_endpoint [128];

static void
s_send_reply (zsock_t *router, const char *peer, int64_t req, int protocol, ah_msg_t *extra)
{
    ah_msg_t *r = extra ? extra : ah_msg_new ("REPLY");
    ah_msg_set_int (r, "req", req);
    ah_msg_set_bool (r, "ok", true);
    ah_msg_set_int (r, "status", 200);
    ah_msg_set_int (r, "protocol", protocol);
    ah_msg_set_str (r, "version", protocol == AH_HOSTD_PROTOCOL ? AH_VERSION : "0.0.9");
    ah_msg_set_str (r, "host", "b7");
    ah_msg_send (&r, router, peer);
}

//  DRIVER_EVENT {req, agent_id?, action, protocol?} to peer.
static void
s_event (zsock_t *router, const char *peer, int64_t req, const char *agent_id, const char *action,
         int64_t protocol)
{
    ah_msg_t *ev = ah_msg_new ("DRIVER_EVENT");
    ah_msg_set_int (ev, "req", req);
    if (agent_id)
        ah_msg_set_str (ev, "agent_id", agent_id);
    ah_msg_set_str (ev, "action", action);
    if (protocol)
        ah_msg_set_int (ev, "protocol", protocol);
    ah_msg_send (&ev, router, peer);
}

static void *
s_stub (void *arg)
{
    zsock_t *router = zsock_new (ZMQ_ROUTER);
    zsock_set_linger (router, 0);
    if (zsock_bind (router, "%s", s_endpoint) != 0) {
        fprintf (stderr, "stub: cannot bind %s\n", s_endpoint);
        zsock_destroy (&router);
        return NULL;
    }
    zsock_set_rcvtimeo (router, 100);
    while (!s_stop) {
        ah_msg_t *m = ah_msg_recv (router, true, NULL);
        if (!m)
            continue;
        char peer [80];
        snprintf (peer, sizeof peer, "%s", ah_msg_peer (m));
        int64_t req = ah_msg_int (m, "req", 0);
        const char *type = ah_msg_type (m);
        ah_msg_t *extra = ah_msg_new ("REPLY");
        if (streq (type, "DRIVER_LIST"))
            ah_msg_set_str (extra, "ids", "0000000000a1,../../etc,0000000000a2,,ZZZ");
        if (streq (type, "DRIVER_INSPECT")) {
            ah_msg_set_bool (extra, "exists", true);
            ah_msg_set_bool (extra, "running", true);
            ah_msg_set_int (extra, "exit_code", -1);
            ah_msg_set_str (extra, "detail", "running");
        }
        switch (s_mode) {
            case M_OK:
                s_send_reply (router, peer, req, AH_HOSTD_PROTOCOL, extra);
                break;
            case M_SLOW:
                //  3 s of work with a heartbeat each 500 ms (the timeout is 1 s).
                for (int i = 0; i < 6; i++) {
                    zclock_sleep (500);
                    ah_msg_t *beat = ah_msg_new ("HOSTD_WORKING");
                    ah_msg_set_int (beat, "req", req);
                    ah_msg_send (&beat, router, peer);
                }
                s_send_reply (router, peer, req, AH_HOSTD_PROTOCOL, extra);
                break;
            case M_SILENT:
                ah_msg_destroy (&extra);
                break;
            case M_OLD:
                s_send_reply (router, peer, req, AH_HOSTD_PROTOCOL + 1, extra);
                break;
            case M_HOSTILE: {
                //  Garbage, a reply to another req, an event for a bad id,
                //  then the answer.
                zstr_sendx (router, peer, "REPLY", "\xc1\xc1\xc1", NULL);
                zstr_sendx (router, peer, "ONE FRAME", NULL);
                ah_msg_t *other = ah_msg_new ("REPLY");
                ah_msg_set_bool (other, "ok", false);
                ah_msg_set_str (other, "error", "not yours");
                s_send_reply (router, peer, req + 1000, AH_HOSTD_PROTOCOL, other);
                s_event (router, peer, req, "../etc/passwd", "die", 0);
                s_event (router, peer, req, "0000000000a1", "die", 0);
                //  An image event before the host said it is connected
                //  (in our protocol) is dropped; after, it is passed on;
                //  an action without an agent that means nothing, dropped.
                s_event (router, peer, req, NULL, "image", 0);
                s_event (router, peer, req, NULL, "connected", AH_HOSTD_PROTOCOL);
                s_event (router, peer, req, NULL, "image", 0);
                s_event (router, peer, req, NULL, "home-destroy", 0);
                ah_msg_t *r = ah_msg_new ("REPLY");
                ah_msg_set_bool (r, "ok", false);
                ah_msg_set_int (r, "status", 500);
                ah_msg_set_str (r, "error", "the event stream ended");
                ah_msg_set_int (r, "req", req);
                ah_msg_set_int (r, "protocol", AH_HOSTD_PROTOCOL);
                ah_msg_set_str (r, "host", "b7");
                ah_msg_send (&r, router, peer);
                ah_msg_destroy (&extra);
                break;
            }
        }
        ah_msg_destroy (&m);
    }
    zsock_destroy (&router);
    return NULL;
}

static int s_events, s_connected, s_unreachable, s_images, s_other;
static char s_last_id [32];

static void
s_on_change (void *arg, const char *agent_id, const char *action)
{
    if (!agent_id) {
        s_connected += streq (action, "connected");
        s_unreachable += streq (action, "unreachable");
        s_images += streq (action, "image");
        s_other += !streq (action, "connected") && !streq (action, "unreachable") && !streq (action, "image");
        return;
    }
    s_events++;
    snprintf (s_last_id, sizeof s_last_id, "%s", agent_id);
}

int main (void)
{
    zsys_init ();
    zsys_handler_set (NULL);
    char dir [] = "/tmp/ah-remote-XXXXXX";
    CHECK (mkdtemp (dir) != NULL);
    snprintf (s_endpoint, sizeof s_endpoint, "ipc://%s/hostd.sock", dir);
    ah_config_t *config = ah_config_new_defaults ();
    free (config->data_dir);
    config->data_dir = strdup (dir);
    free (config->remote_endpoint);
    config->remote_endpoint = strdup (s_endpoint);
    config->remote_timeout_s = 1;
    char *err = NULL;
    ah_driver_t *d = ah_remote_driver_new (config, &err);
    CHECK (d && streq (d->name, "remote") && d->host_info && d->watch);
    ah_host_info_t info;
    CHECK (d->host_info (d, &info) == 0 && streq (info.name, s_endpoint) && streq (info.state, "unknown"));

    //  Nobody there: the call ends after the timeout with the sentence.
    int64_t t0 = zclock_mono ();
    char **ids = NULL;
    //  The error may reach a tenant (an agent's error): it never names
    //  the endpoint; the hosts view (admins) does.
    CHECK (d->list (d, &ids, &err) == -1 && err && strstr (err, "does not answer")
           && strstr (err, "the host agent") && !strstr (err, s_endpoint)
           && !strstr (err, "hostd.sock") && strstr (err, "agenthold hostd"));
    CHECK (zclock_mono () - t0 >= 900 && zclock_mono () - t0 < 3000);
    CHECK (d->host_info (d, &info) == 0 && streq (info.state, "unreachable") && strstr (info.error, "does not answer")
           && strstr (info.error, s_endpoint));
    free (err);
    err = NULL;

    pthread_t stub;
    pthread_create (&stub, NULL, s_stub, NULL);
    zclock_sleep (100);

    //  Up: a list keeps only agent ids; the host's facts follow.
    s_mode = M_OK;
    CHECK (d->list (d, &ids, &err) == 0 && ids);
    CHECK (ids && ids [0] && streq (ids [0], "0000000000a1") && ids [1] && streq (ids [1], "0000000000a2")
           && !ids [2]);
    ah_driver_free_ids (&ids);
    CHECK (d->host_info (d, &info) == 0 && streq (info.state, "up") && streq (info.name, "b7")
           && streq (info.version, AH_VERSION) && info.protocol == AH_HOSTD_PROTOCOL && !*info.error);
    ah_sandbox_status_t st;
    CHECK (d->inspect (d, "0000000000a1", &st, &err) == 0 && st.exists && st.running
           && streq (st.detail, "running"));

    //  A long call kept alive by heartbeats outlives the 1 s timeout.
    s_mode = M_SLOW;
    t0 = zclock_mono ();
    CHECK (d->stop (d, "0000000000a1", &err) == 0);
    CHECK (zclock_mono () - t0 >= 2500);

    //  Silence in the middle of a call: unreachable, named.
    s_mode = M_SILENT;
    CHECK (d->stop (d, "0000000000a1", &err) == -1 && err && strstr (err, "host b7")
           && strstr (err, "does not answer") && !strstr (err, s_endpoint));
    free (err);
    err = NULL;
    s_unreachable = 0;
    volatile int stop = 0;
    CHECK (d->watch (d, s_on_change, NULL, &stop, &err) == -1 && s_unreachable == 1);
    free (err);
    err = NULL;

    //  Another protocol: the sentence, the host refused, its facts kept.
    s_mode = M_OLD;
    CHECK (d->start (d, &(ah_boot_t) { .agent_id = "0000000000a1", .token = "t", .tunnel_port = 1 }, &err) == -1);
    char want [300];
    snprintf (want, sizeof want, "host b7 runs agenthold hostd 0.0.9 (protocol %d); this server speaks "
              "protocol %d: install agenthold %s on b7 and restart hostd", AH_HOSTD_PROTOCOL + 1,
              AH_HOSTD_PROTOCOL, AH_VERSION);
    CHECK (err && streq (err, want));
    if (err && !streq (err, want))
        fprintf (stderr, "  got: %s\n", err);
    CHECK (d->host_info (d, &info) == 0 && streq (info.state, "refused") && streq (info.error, want)
           && streq (info.version, "0.0.9") && info.protocol == AH_HOSTD_PROTOCOL + 1);
    free (err);
    err = NULL;

    //  Hostile answers are ignored; events with bad ids are dropped; the
    //  watch ends with the host's error and the host is up (it answered).
    s_mode = M_HOSTILE;
    s_events = s_connected = s_unreachable = s_images = s_other = 0;
    CHECK (d->watch (d, s_on_change, NULL, &stop, &err) == -1 && err && streq (err, "the event stream ended"));
    CHECK (s_events == 1 && streq (s_last_id, "0000000000a1") && s_connected == 1 && s_unreachable == 0);
    CHECK (s_images == 1 && s_other == 0);
    CHECK (d->host_info (d, &info) == 0 && streq (info.state, "up"));
    free (err);
    err = NULL;

    //  A watch stopped by its caller returns 0.
    s_mode = M_SLOW;
    stop = 1;
    CHECK (d->watch (d, s_on_change, NULL, &stop, &err) == 0);

    s_stop = 1;
    pthread_join (stub, NULL);
    d->destroy_driver (&d);
    CHECK (d == NULL);
    ah_config_destroy (&config);
    char *cmd = zsys_sprintf ("rm -rf '%s'", dir);
    CHECK (system (cmd) == 0);
    free (cmd);
    return CHECK_DONE ();
}
