/*  tests/common/test_actor.c: the actor skeleton (common/actor.h), on
    both loops: dispatch by type, refusals, pipe commands, timers,
    readers, start-up failure reported to the starter, $TERM.          */
#include "common/actor.h"
#include "common/bus.h"
#include "common/msg.h"
#include "tests/common/check.h"
#include "tests/common/actor_probe.h"

#include <pthread.h>
#include <unistd.h>

typedef struct {
    ah_actor_t *actor;
    ah_lwsloop_t *lws;
    bool fail;
    int once, ticks, tick_id;
    zsock_t *pull;
    int pulled;
    bool termed;
    int jobs, jobs_done, jobs_right;    //  JOBS: asked, came back, in the right threads
    char asker [64];                //  RELAY: who asked, and their req
    int64_t asker_req;
    pthread_t thread;
} self_t;

typedef struct {
    bool fail;
    bool lws;
    const char *pull;               //  bind a PULL here (one per run: a
                                    //  closed socket's inproc name is
                                    //  freed asynchronously)
} args_t;

static void s_on_tick (void *arg, void *timer_arg)
{
    self_t *self = arg;
    if (++self->ticks == 3)
        ah_actor_timer_end (self->actor, self->tick_id);
}

static void s_on_once (void *arg, void *timer_arg)
{
    self_t *self = arg;
    self->once += (int) (intptr_t) timer_arg;
}

static void s_on_echo (void *arg, ah_msg_t *msg)
{
    self_t *self = arg;
    ah_msg_t *reply = ah_msg_reply_ok (msg);
    ah_msg_set_int (reply, "ticks", self->ticks);
    ah_msg_set_int (reply, "once", self->once);
    ah_msg_set_int (reply, "pulled", self->pulled);
    ah_msg_set_str (reply, "echo", ah_msg_str (msg, "text"));
    size_t size = 0;
    const char *bin = ah_msg_bin (msg, "bin", &size);
    if (bin)
        ah_msg_set_strf (reply, "bin", "%.*s", (int) size, bin);
    if (ah_msg_has (msg, "thread"))
        ah_msg_set_bool (reply, "same_thread", ah_msg_int (msg, "thread", 0) == (int64_t) pthread_self ());
    ah_actor_reply (self->actor, msg, reply);
}

//  RELAY {to, text}: an ECHO of text to `to` with a borrowed bin that
//  is overwritten at once (a hand-off must have copied it); its REPLY
//  goes back to the asker with what came back, who sent it, and whether
//  the answer ran in the same thread.
static void s_on_relay (void *arg, ah_msg_t *msg)
{
    self_t *self = arg;
    snprintf (self->asker, sizeof self->asker, "%s", ah_msg_peer (msg));
    self->asker_req = ah_msg_int (msg, "req", 0);
    char bytes [16] = "borrowed";
    ah_msg_t *m = ah_msg_new ("ECHO");
    ah_msg_set_int (m, "req", 4242);
    ah_msg_set_str (m, "text", ah_msg_str (msg, "text"));
    ah_msg_set_bin_borrowed (m, "bin", bytes, 8);
    ah_msg_set_int (m, "thread", (int64_t) pthread_self ());
    CHECK (ah_actor_send (self->actor, ah_msg_str (msg, "to"), &m) == 0);
    memcpy (bytes, "clobbered", 9);
}

static void s_on_reply (void *arg, ah_msg_t *msg)
{
    self_t *self = arg;
    if (ah_msg_int (msg, "req", 0) != 4242 || !self->asker [0])
        return;
    ah_msg_t *m = ah_msg_new ("REPLY");
    ah_msg_set_int (m, "req", self->asker_req);
    ah_msg_set_bool (m, "ok", ah_msg_bool (msg, "ok", false));
    ah_msg_set_str (m, "echo", ah_msg_str (msg, "echo"));
    ah_msg_set_str (m, "bin", ah_msg_str (msg, "bin"));
    ah_msg_set_str (m, "via", ah_msg_peer (msg));
    ah_msg_set_bool (m, "same_thread", ah_msg_bool (msg, "same_thread", false));
    ah_actor_send (self->actor, self->asker, &m);
    self->asker [0] = 0;
}

//  JOBS {n, ms}: n jobs that each sleep ms in a worker; the REPLY
//  once all came back, saying how many ran in a worker and came back in
//  the actor's thread.
typedef struct {
    self_t *self;
    int ms;
    pthread_t ran_in;
} job_arg_t;

static void s_job_work (void *arg)
{
    job_arg_t *j = arg;
    j->ran_in = pthread_self ();
    zclock_sleep (j->ms);
}

static void s_job_done (void *arg, void *job, bool ran)
{
    self_t *self = arg;
    job_arg_t *j = job;
    self->jobs_done++;
    if (ran && !pthread_equal (j->ran_in, self->thread) && pthread_equal (pthread_self (), self->thread))
        self->jobs_right++;
    free (j);
    if (self->jobs_done == self->jobs && self->asker [0]) {
        ah_msg_t *m = ah_msg_new ("REPLY");
        ah_msg_set_int (m, "req", self->asker_req);
        ah_msg_set_bool (m, "ok", true);
        ah_msg_set_int (m, "done", self->jobs_done);
        ah_msg_set_int (m, "right", self->jobs_right);
        ah_actor_send (self->actor, self->asker, &m);
        self->asker [0] = 0;
    }
}

static void s_on_jobs (void *arg, ah_msg_t *msg)
{
    self_t *self = arg;
    snprintf (self->asker, sizeof self->asker, "%s", ah_msg_peer (msg));
    self->asker_req = ah_msg_int (msg, "req", 0);
    self->jobs = self->jobs_done = self->jobs_right = 0;
    int n = (int) ah_msg_int (msg, "n", 0);
    for (int i = 0; i < n; i++) {
        job_arg_t *j = calloc (1, sizeof *j);
        j->self = self;
        j->ms = (int) ah_msg_int (msg, "ms", 0);
        CHECK (ah_actor_job (self->actor, s_job_work, s_job_done, j) == 0);
        self->jobs++;
    }
}

static void s_on_pull (void *arg, zsock_t *sock)
{
    self_t *self = arg;
    char *s = zstr_recv (sock);
    self->pulled++;
    zstr_free (&s);
}

static void s_cmd_count (void *arg, zmsg_t *cmd)
{
    self_t *self = arg;
    zsock_send (ah_actor_pipe (self->actor), "si", "COUNT", self->ticks);
}

static void *s_init (ah_actor_t *actor, void *arg)
{
    args_t *args = arg;
    if (args->fail) {
        ah_actor_fail (actor, "the test asked to fail (%d)", 42);
        return NULL;
    }
    self_t *self = calloc (1, sizeof *self);
    self->actor = actor;
    self->thread = pthread_self ();
    if (args->lws) {
        static const struct lws_protocols protocols [] = {
            { "http", lws_callback_http_dummy, 0, 0, 0, NULL, 0 }, { NULL, NULL, 0, 0, 0, NULL, 0 } };
        struct lws_context_creation_info info = { 0 };
        info.port = CONTEXT_PORT_NO_LISTEN;
        info.protocols = protocols;
        ah_lwsloop_t *host = ah_actor_host_lws (actor);
        self->lws = host ? ah_lwsloop_new_beside (host, &info) : ah_lwsloop_new (&info);
        ah_actor_use_lws (actor, self->lws);
    }
    self->pull = zsock_new_pull (args->pull ? args->pull : "inproc://test-actor-pull");
    CHECK (self->pull != NULL);
    ah_actor_reader (actor, self->pull, s_on_pull);
    self->tick_id = ah_actor_timer (actor, 10, 10, s_on_tick, NULL);
    ah_actor_timer (actor, 30, 0, s_on_once, (void *) (intptr_t) 1);
    int never = ah_actor_timer (actor, 20, 0, s_on_once, (void *) (intptr_t) 100);
    ah_actor_timer_end (actor, never);
    return self;
}

static void s_destroy (void *arg)
{
    self_t *self = arg;
    ah_lwsloop_destroy (&self->lws);
    zsock_destroy (&self->pull);
    free (self);
}

static const ah_actor_handler_t s_handlers [] = {
    { "ECHO", s_on_echo },
    { "RELAY", s_on_relay },
    { "REPLY", s_on_reply },
    { "JOBS", s_on_jobs },
    { NULL, NULL }
};
static const ah_actor_command_t s_commands [] = {
    { "COUNT", s_cmd_count },
    { NULL, NULL }
};
static const ah_actor_def_t s_def = {
    .name = "tester", .on_bus = true, .init = s_init, .destroy = s_destroy,
    .handlers = s_handlers, .commands = s_commands
};

static const ah_actor_def_t s_link_def = {
    .name = "linked", .on_bus = true, .init = s_init, .destroy = s_destroy,
    .handlers = s_handlers, .commands = s_commands
};

static void s_run (bool lws)
{
    fprintf (stderr, "-- %s loop\n", lws ? "lws" : "own");
    //  A failing init: NULL and its reason, at once.
    args_t bad = { .fail = true, .lws = lws };
    char *err = NULL;
    int64_t t0 = zclock_mono ();
    zactor_t *actor = ah_actor_new (&s_def, &bad, &err);
    CHECK (actor == NULL);
    CHECK_STR (err, "the test asked to fail (42)");
    CHECK (zclock_mono () - t0 < 1000);
    free (err);
    err = NULL;

    const char *pull = lws ? "inproc://test-actor-pull-lws" : "inproc://test-actor-pull-own";
    args_t good = { .lws = lws, .pull = pull };
    actor = ah_actor_new (&s_def, &good, &err);
    CHECK (actor != NULL && err == NULL);
    if (!actor)
        return;
    zsock_t *push = zsock_new_push (pull);      //  a PUSH connects by default
    zstr_send (push, "one");
    zstr_send (push, "two");
    zsock_t *client = ah_bus_connect ("client");
    zsock_set_rcvtimeo (client, 1000);
    //  Ask until the timers and the reader have done their part (a
    //  loaded machine is slow, not wrong): up to 5 s.
    ah_msg_t *reply = NULL;
    for (int64_t until = zclock_mono () + 5000; zclock_mono () < until; ) {
        ah_msg_destroy (&reply);
        ah_msg_t *m = ah_msg_new ("ECHO");
        ah_msg_set_int (m, "req", 7);
        ah_msg_set_str (m, "text", "hi");
        ah_msg_send (&m, client, "tester");
        reply = ah_msg_recv (client, true, NULL);
        if (reply && ah_msg_int (reply, "ticks", 0) >= 3 && ah_msg_int (reply, "pulled", 0) >= 2
        &&  ah_msg_int (reply, "once", 0) >= 1)
            break;
        zclock_sleep (20);
    }
    CHECK (reply && ah_msg_bool (reply, "ok", false) && ah_msg_int (reply, "req", 0) == 7);
    CHECK (reply && ah_msg_int (reply, "ticks", 0) == 3);       //  ended itself after 3
    CHECK (reply && ah_msg_int (reply, "once", 0) == 1);        //  the ended one never fired
    CHECK (reply && ah_msg_int (reply, "pulled", 0) == 2);
    CHECK_STR (reply ? ah_msg_str (reply, "echo") : NULL, "hi");
    ah_msg_destroy (&reply);

    actor_probe_refusals ("tester");

    //  Jobs: 8 of 100 ms each run in workers (4 at once: about 200 ms),
    //  the actor answering meanwhile, and come back in its thread.
    {
        zsock_set_rcvtimeo (client, 5000);
        ah_msg_t *m = ah_msg_new ("JOBS");
        ah_msg_set_int (m, "req", 31);
        ah_msg_set_int (m, "n", 8);
        ah_msg_set_int (m, "ms", 100);
        int64_t t1 = zclock_mono ();
        ah_msg_send (&m, client, "tester");
        m = ah_msg_new ("ECHO");
        ah_msg_set_int (m, "req", 32);
        ah_msg_send (&m, client, "tester");
        reply = ah_msg_recv (client, true, NULL);
        CHECK (reply && ah_msg_int (reply, "req", 0) == 32);    //  served while the jobs run
        CHECK (zclock_mono () - t1 < 100);
        ah_msg_destroy (&reply);
        reply = ah_msg_recv (client, true, NULL);
        CHECK (reply && ah_msg_int (reply, "req", 0) == 31);
        CHECK (reply && ah_msg_int (reply, "done", 0) == 8 && ah_msg_int (reply, "right", 0) == 8);
        CHECK (zclock_mono () - t1 < 750);                      //  in parallel, not 800 ms
        ah_msg_destroy (&reply);
        //  Jobs still queued when the actor ends: done (ran false) frees them.
        m = ah_msg_new ("JOBS");
        ah_msg_set_int (m, "n", 12);
        ah_msg_set_int (m, "ms", 50);
        ah_msg_send (&m, client, "tester");
    }
    zsock_destroy (&client);

    //  A pipe command, answered on the pipe
    zstr_send (actor, "COUNT");
    char *what = NULL;
    int count = -1;
    CHECK (zsock_recv (actor, "si", &what, &count) == 0);
    CHECK_STR (what, "COUNT");
    CHECK (count == 3);
    zstr_free (&what);
    zsock_destroy (&push);
    zactor_destroy (&actor);
    CHECK (actor == NULL);
}

//  One RELAY through `via` to `to`: the answer's fields, checked.
static void s_relay (zsock_t *client, const char *via, const char *to, int64_t req)
{
    ah_msg_t *m = ah_msg_new ("RELAY");
    ah_msg_set_int (m, "req", req);
    ah_msg_set_str (m, "to", to);
    ah_msg_set_str (m, "text", "in-thread");
    CHECK (ah_msg_send (&m, client, via) == 0);
    ah_msg_t *reply = ah_msg_recv (client, true, NULL);
    CHECK (reply && ah_msg_bool (reply, "ok", false) && ah_msg_int (reply, "req", 0) == req);
    CHECK_STR (reply ? ah_msg_str (reply, "echo") : NULL, "in-thread");
    CHECK_STR (reply ? ah_msg_str (reply, "bin") : NULL, "borrowed");     //  copied at hand-off
    CHECK_STR (reply ? ah_msg_str (reply, "via") : NULL, to);
    CHECK (reply && ah_msg_bool (reply, "same_thread", false));
    ah_msg_destroy (&reply);
}

//  A guest: its own name, handlers and bus identity, in its host's
//  thread; what the two send each other is handed over in the thread
//  (the borrowed bin copied), in order; the guest stops alone, and a
//  host that stops ends its guest first.
static void s_guest (void)
{
    fprintf (stderr, "-- guest, lws loop\n");
    char *err = NULL;
    args_t host_args = { .lws = true, .pull = "inproc://test-actor-pull-host" };
    zactor_t *host = ah_actor_new (&s_def, &host_args, &err);
    CHECK (host != NULL && err == NULL);
    //  A guest whose init fails: NULL and its reason, the host unharmed.
    args_t bad = { .fail = true, .lws = true };
    zactor_t *guest = ah_actor_new_guest (&s_link_def, &bad, host, &err);
    CHECK (guest == NULL);
    CHECK_STR (err, "the test asked to fail (42)");
    free (err);
    err = NULL;
    args_t guest_args = { .lws = true, .pull = "inproc://test-actor-pull-guest" };
    guest = ah_actor_new_guest (&s_link_def, &guest_args, host, &err);
    CHECK (guest != NULL && err == NULL);
    if (!host || !guest)
        return;
    zsock_t *client = ah_bus_connect ("client2");
    zsock_set_rcvtimeo (client, 2000);
    //  Each on the bus under its own name (asked until the bus knows it).
    const char *names [] = { "tester", "linked" };
    for (int n = 0; n < 2; n++) {
        ah_msg_t *reply = NULL;
        for (int tries = 0; tries < 50; tries++) {
            ah_msg_destroy (&reply);
            ah_msg_t *m = ah_msg_new ("ECHO");
            ah_msg_set_int (m, "req", 900 + n);
            ah_msg_set_str (m, "text", names [n]);
            CHECK (ah_msg_send (&m, client, names [n]) == 0);
            reply = ah_msg_recv (client, true, NULL);
            if (reply && ah_msg_bool (reply, "ok", false))
                break;
            zclock_sleep (20);
        }
        CHECK_STR (reply ? ah_msg_peer (reply) : NULL, names [n]);
        CHECK_STR (reply ? ah_msg_str (reply, "echo") : NULL, names [n]);
        ah_msg_destroy (&reply);
    }
    //  The guest's readers and timers run (in the host's loop).
    zsock_t *push = zsock_new_push ("inproc://test-actor-pull-guest");
    zstr_send (push, "one");
    ah_msg_t *reply = NULL;
    for (int64_t until = zclock_mono () + 5000; zclock_mono () < until; ) {
        ah_msg_destroy (&reply);
        ah_msg_t *m = ah_msg_new ("ECHO");
        ah_msg_set_int (m, "req", 950);
        ah_msg_send (&m, client, "linked");
        reply = ah_msg_recv (client, true, NULL);
        if (reply && ah_msg_int (reply, "ticks", 0) >= 3 && ah_msg_int (reply, "pulled", 0) >= 1)
            break;
        zclock_sleep (20);
    }
    CHECK (reply && ah_msg_int (reply, "ticks", 0) == 3 && ah_msg_int (reply, "pulled", 0) == 1);
    ah_msg_destroy (&reply);
    zsock_destroy (&push);
    //  Host -> guest -> host and guest -> host -> guest, in the thread.
    for (int i = 0; i < 20; i++) {
        s_relay (client, "tester", "linked", 1000 + i);
        s_relay (client, "linked", "tester", 2000 + i);
    }
    actor_probe_refusals ("linked");
    //  The guest stops alone; the host goes on serving, and what it sends
    //  to the name takes the bus (nobody there: no answer, no crash).
    zactor_destroy (&guest);
    CHECK (guest == NULL);
    ah_msg_t *m = ah_msg_new ("ECHO");
    ah_msg_set_int (m, "req", 960);
    ah_msg_send (&m, client, "tester");
    reply = ah_msg_recv (client, true, NULL);
    CHECK (reply && ah_msg_int (reply, "req", 0) == 960);
    ah_msg_destroy (&reply);
    //  A host that stops ends its guest first: the guest's pipe speaks.
    guest_args.pull = "inproc://test-actor-pull-guest2";
    guest = ah_actor_new_guest (&s_link_def, &guest_args, host, &err);
    CHECK (guest != NULL);
    zactor_destroy (&host);
    if (guest) {
        zpoller_t *poller = zpoller_new (guest, NULL);
        CHECK (zpoller_wait (poller, 2000) == guest);
        zpoller_destroy (&poller);
        zactor_destroy (&guest);
    }
    zsock_destroy (&client);
}

int main (void)
{
    zsys_init ();
    zsys_handler_set (NULL);
    ah_bus_args_t args = { 0 };
    zactor_t *bus = ah_actor_new (&ah_bus_actor, &args, NULL);
    s_run (false);
    s_run (true);
    s_guest ();
    zactor_destroy (&bus);
    return CHECK_DONE ();
}
