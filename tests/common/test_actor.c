/*  tests/common/test_actor.c: the actor skeleton (common/actor.h), on
    both loops: dispatch by type, refusals, pipe commands, timers,
    readers, start-up failure reported to the starter, $TERM.          */
#include "common/actor.h"
#include "common/bus.h"
#include "common/msg.h"
#include "tests/common/check.h"
#include "tests/common/actor_probe.h"

#include <unistd.h>

typedef struct {
    ah_actor_t *actor;
    ah_lwsloop_t *lws;
    bool fail;
    int once, ticks, tick_id;
    zsock_t *pull;
    int pulled;
    bool termed;
} self_t;

typedef struct {
    bool fail;
    bool lws;
    const char *link;               //  bind a link to "peer" here
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
    ah_actor_reply (self->actor, msg, reply);
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
    if (args->lws) {
        static const struct lws_protocols protocols [] = {
            { "http", lws_callback_http_dummy, 0, 0, 0, NULL, 0 }, { NULL, NULL, 0, 0, 0, NULL, 0 } };
        struct lws_context_creation_info info = { 0 };
        info.port = CONTEXT_PORT_NO_LISTEN;
        info.protocols = protocols;
        self->lws = ah_lwsloop_new (&info);
        ah_actor_use_lws (actor, self->lws);
    }
    if (args->link && ah_actor_link (actor, "peer", args->link, true)) {
        ah_actor_fail (actor, "cannot link");
        ah_lwsloop_destroy (&self->lws);
        free (self);
        return NULL;
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
    zsock_destroy (&client);

    actor_probe_refusals ("tester");

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

//  A link: what "peer" sends over it is dispatched like bus traffic, and
//  the answer to "peer" takes the link, in order, not the bus.
static void s_link (void)
{
    //  On the lws loop, as the api and the tunnel run; a name of its own
    //  (the bus takes a while to let go of a name it saw).
    fprintf (stderr, "-- link, lws loop\n");
    const char *endpoint = "inproc://test-actor-link";
    args_t args = { .lws = true, .link = endpoint };
    char *err = NULL;
    zactor_t *actor = ah_actor_new (&s_link_def, &args, &err);
    CHECK (actor != NULL && err == NULL);
    if (!actor)
        return;
    zsock_t *bus_peer = ah_bus_connect ("peer");       //  where a stray answer would land
    zsock_set_rcvtimeo (bus_peer, 1000);
    zclock_sleep (20);
    //  Nobody on the link yet: the answer to "peer" takes the bus (asked
    //  again while the bus does not know the new actor yet: 503)
    ah_msg_t *early = NULL;
    for (int tries = 0; tries < 50; tries++) {
        ah_msg_destroy (&early);
        early = ah_msg_new ("ECHO");
        ah_msg_set_int (early, "req", 900);
        ah_msg_set_str (early, "text", "by bus");
        CHECK (ah_msg_send (&early, bus_peer, "linked") == 0);
        early = ah_msg_recv (bus_peer, true, NULL);
        if (early && ah_msg_bool (early, "ok", false))
            break;
        zclock_sleep (20);
    }
    CHECK (early && ah_msg_int (early, "req", 0) == 900);
    CHECK_STR (early ? ah_msg_str (early, "echo") : NULL, "by bus");
    ah_msg_destroy (&early);
    zsock_t *pair = zsock_new (ZMQ_PAIR);
    CHECK (zsock_connect (pair, "%s", endpoint) == 0);
    zsock_set_rcvtimeo (pair, 1000);
    zsock_set_rcvtimeo (bus_peer, 200);
    for (int i = 1; i <= 100; i++) {
        ah_msg_t *m = ah_msg_new ("ECHO");
        ah_msg_set_int (m, "req", i);
        ah_msg_set_str (m, "text", "over the link");
        CHECK (ah_msg_send (&m, pair, "peer") == 0);
    }
    for (int i = 1; i <= 100; i++) {
        ah_msg_t *reply = ah_msg_recv (pair, true, NULL);
        CHECK (reply && ah_msg_int (reply, "req", 0) == i);        //  in order
        CHECK_STR (reply ? ah_msg_peer (reply) : NULL, "linked");
        CHECK_STR (reply ? ah_msg_str (reply, "echo") : NULL, "over the link");
        ah_msg_destroy (&reply);
    }
    ah_msg_t *stray = ah_msg_recv (bus_peer, true, NULL);
    CHECK (stray == NULL);
    ah_msg_destroy (&stray);
    //  A type it does not know, over the link: refused to the sender
    ah_msg_t *m = ah_msg_new ("NO_SUCH");
    ah_msg_set_int (m, "req", 500);
    CHECK (ah_msg_send (&m, pair, "peer") == 0);
    ah_msg_t *refusal = ah_msg_recv (pair, true, NULL);
    CHECK (refusal && !ah_msg_bool (refusal, "ok", true) && ah_msg_int (refusal, "status", 0) == 400);
    ah_msg_destroy (&refusal);
    zsock_destroy (&pair);
    zsock_destroy (&bus_peer);
    zactor_destroy (&actor);
}

int main (void)
{
    zsys_init ();
    zsys_handler_set (NULL);
    ah_bus_args_t args = { 0 };
    zactor_t *bus = ah_actor_new (&ah_bus_actor, &args, NULL);
    s_run (false);
    s_run (true);
    s_link ();
    zactor_destroy (&bus);
    return CHECK_DONE ();
}
