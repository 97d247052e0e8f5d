/*  tests/tunnel/test_lwsloop.c: one thread serving lws and zsocks.

    1. Many messages from another thread on a watched PULL all arrive.
    2. An idle loop sleeps (little CPU in 300 ms, ended by a loop timer).
    3. Ping-pong across both worlds in one thread: a peer thread sends on
       a PAIR -> the loop makes an lws client write to an lws server in
       the same context -> the server's RECEIVE sends back on the same
       PAIR (a send from a callback: the ZMQ_FD edge case) -> repeat.
    4. unwatch from inside a callback, then the socket is destroyed.    */
#include "common/lwsloop.h"
#include "common/log.h"
#include "../common/check.h"

#include <stdlib.h>
#include <unistd.h>
#include <sys/resource.h>

#define ROUNDS 200

typedef struct {
    ah_lwsloop_t *loop;
    zsock_t *pair;              //  to the peer thread
    struct lws *client;         //  the client wsi
    bool client_up;
    char pending [64];          //  what the client must send next
    size_t pending_len;
    int server_got;
    int pulled;
    int pull_target;
    ah_lwsloop_timer_t timer;
    bool timer_fired;
} state_t;

static state_t *s_state (struct lws *wsi)
{
    return (state_t *) ah_lwsloop_user (ah_lwsloop_from_wsi (wsi));
}

static int s_server_cb (struct lws *wsi, enum lws_callback_reasons reason,
                        void *user, void *in, size_t len)
{
    state_t *st = s_state (wsi);
    if (reason == LWS_CALLBACK_RECEIVE) {
        st->server_got++;
        //  Back to the peer thread, from inside an lws callback.
        zstr_sendf (st->pair, "echo:%.*s", (int) len, (const char *) in);
    }
    return 0;
}

static int s_client_cb (struct lws *wsi, enum lws_callback_reasons reason,
                        void *user, void *in, size_t len)
{
    state_t *st = s_state (wsi);
    switch (reason) {
        case LWS_CALLBACK_CLIENT_ESTABLISHED:
            st->client_up = true;
            zstr_send (st->pair, "up");
            break;
        case LWS_CALLBACK_CLIENT_WRITEABLE:
            if (st->pending_len) {
                unsigned char buf [LWS_PRE + 64];
                memcpy (buf + LWS_PRE, st->pending, st->pending_len);
                lws_write (wsi, buf + LWS_PRE, st->pending_len, LWS_WRITE_TEXT);
                st->pending_len = 0;
            }
            break;
        case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
            fprintf (stderr, "client connection error: %s\n", in ? (char *) in : "?");
            ah_lwsloop_stop (st->loop);
            break;
        case LWS_CALLBACK_CLIENT_CLOSED:
            st->client = NULL;
            break;
        default:
            break;
    }
    return 0;
}

static struct lws_protocols s_protocols [] = {
    { "http", lws_callback_http_dummy, 0, 0, 0, NULL, 0 },
    { "test-echo", s_server_cb, 0, 4096, 0, NULL, 0 },
    { "test-client", s_client_cb, 0, 4096, 0, NULL, 0 },
    { NULL, NULL, 0, 0, 0, NULL, 0 }
};

//  The peer thread's messages, received in the loop thread.
static void s_on_pair (ah_lwsloop_t *loop, zsock_t *sock, void *arg)
{
    state_t *st = (state_t *) arg;
    char *s = zstr_recv (sock);
    if (!s)
        return;
    if (streq (s, "$STOP"))
        ah_lwsloop_stop (loop);
    else if (st->client && strlen (s) < sizeof st->pending) {
        st->pending_len = strlen (s);
        memcpy (st->pending, s, st->pending_len);
        lws_callback_on_writable (st->client);
    }
    free (s);
}

static void s_on_pull (ah_lwsloop_t *loop, zsock_t *sock, void *arg)
{
    state_t *st = (state_t *) arg;
    char *s = zstr_recv (sock);
    free (s);
    if (++st->pulled == st->pull_target)
        ah_lwsloop_stop (loop);
}

static void s_on_unwatch (ah_lwsloop_t *loop, zsock_t *sock, void *arg)
{
    int *calls = (int *) arg;
    char *s = zstr_recv (sock);
    free (s);
    (*calls)++;
    ah_lwsloop_unwatch (loop, sock);
}

static void s_timer (ah_lwsloop_timer_t *timer, void *arg)
{
    state_t *st = (state_t *) arg;
    st->timer_fired = true;
    ah_lwsloop_stop (st->loop);
}

//  Peer thread: waits for "up", then plays ROUNDS ping-pongs and stops.
static void s_peer (zsock_t *pipe, void *args)
{
    zsock_t *pair = zsock_new_pair ((const char *) args);
    zsock_signal (pipe, 0);
    zsock_set_rcvtimeo (pair, 5000);
    char *s = zstr_recv (pair);
    bool ok = s && streq (s, "up");
    free (s);
    int good = 0;
    for (int i = 0; ok && i < ROUNDS; i++) {
        zstr_sendf (pair, "m%d", i);
        s = zstr_recv (pair);
        char want [32];
        snprintf (want, sizeof want, "echo:m%d", i);
        if (s && streq (s, want))
            good++;
        else
            ok = false;
        free (s);
    }
    zstr_send (pair, "$STOP");
    zstr_sendf (pipe, "%d", good);
    //  Wait for $TERM.
    free (zstr_recv (pipe));
    zsock_destroy (&pair);
}

static void s_pusher (zsock_t *pipe, void *args)
{
    zsock_t *push = zsock_new_push ((const char *) args);
    zsock_signal (pipe, 0);
    for (int i = 0; i < 5000; i++)
        zstr_sendf (push, "n%d", i);
    free (zstr_recv (pipe));
    zsock_destroy (&push);
}

int main (void)
{
    zsys_init ();
    state_t st;
    memset (&st, 0, sizeof st);

    struct lws_context_creation_info info;
    memset (&info, 0, sizeof info);
    info.port = 0;                          //  the OS picks
    info.iface = "127.0.0.1";
    info.protocols = s_protocols;
    info.user = &st;
    ah_lwsloop_t *loop = ah_lwsloop_new (&info);
    CHECK (loop != NULL);
    if (!loop)
        return CHECK_DONE ();
    st.loop = loop;
    CHECK (ah_lwsloop_user (loop) == &st);
    int port = ah_lwsloop_port (loop);
    CHECK (port > 0);

    //  1. Bulk messages from another thread.
    char ep [64];
    snprintf (ep, sizeof ep, "inproc://lwsloop-pull-%d", getpid ());
    zsock_t *pull = zsock_new_pull (ep);
    st.pull_target = 5000;
    CHECK (ah_lwsloop_watch (loop, pull, s_on_pull, &st) == 0);
    zactor_t *pusher = zactor_new (s_pusher, ep);
    int64_t t0 = zclock_mono ();
    CHECK (ah_lwsloop_run (loop) == 0);
    CHECK (st.pulled == 5000);
    CHECK (zclock_mono () - t0 < 5000);
    ah_lwsloop_unwatch (loop, pull);
    zactor_destroy (&pusher);

    //  2. Idle: a loop timer ends the run; the loop must have slept
    //  (count CPU time: lws's own idle watcher may add a round or two).
    struct rusage ru0, ru1;
    getrusage (RUSAGE_THREAD, &ru0);
    ah_lwsloop_timer_set (loop, &st.timer, 300, s_timer, &st);
    t0 = zclock_mono ();
    CHECK (ah_lwsloop_run (loop) == 0);
    CHECK (st.timer_fired);
    CHECK (zclock_mono () - t0 >= 250);
    getrusage (RUSAGE_THREAD, &ru1);
    int64_t cpu_us = (ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) * 1000000
                   + (ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec)
                   + (ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) * 1000000
                   + (ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec);
    fprintf (stderr, "idle 300 ms: %lld us of CPU\n", (long long) cpu_us);
    CHECK (cpu_us < 30000);

    //  3. Ping-pong between zmq and lws in one thread.
    char pep [64], pep_connect [64];
    snprintf (pep, sizeof pep, "@inproc://lwsloop-pair-%d", getpid ());
    snprintf (pep_connect, sizeof pep_connect, ">inproc://lwsloop-pair-%d", getpid ());
    st.pair = zsock_new_pair (pep);
    CHECK (st.pair);
    CHECK (ah_lwsloop_watch (loop, st.pair, s_on_pair, &st) == 0);
    zactor_t *peer = zactor_new (s_peer, pep_connect);
    struct lws_client_connect_info ci;
    memset (&ci, 0, sizeof ci);
    ci.context = ah_lwsloop_context (loop);
    ci.address = "127.0.0.1";
    ci.port = port;
    ci.path = "/";
    ci.host = "127.0.0.1";
    ci.origin = "127.0.0.1";
    ci.protocol = "test-echo";
    ci.local_protocol_name = "test-client";
    ci.pwsi = &st.client;
    lws_client_connect_via_info (&ci);
    CHECK (st.client != NULL);
    //  Safety net: stop after 10 s whatever happens.
    ah_lwsloop_timer_set (loop, &st.timer, 10000, s_timer, &st);
    st.timer_fired = false;
    CHECK (ah_lwsloop_run (loop) == 0);
    CHECK (!st.timer_fired);
    char *good = zstr_recv (peer);
    CHECK_STR (good, "200");
    free (good);
    CHECK (st.server_got == ROUNDS);
    zactor_destroy (&peer);
    ah_lwsloop_timer_cancel (&st.timer);

    //  4. unwatch from inside the callback: called once, then silent.
    char uep [64];
    snprintf (uep, sizeof uep, "inproc://lwsloop-un-%d", getpid ());
    zsock_t *upull = zsock_new_pull (uep);
    zsock_t *upush = zsock_new_push (uep);
    int calls = 0;
    CHECK (ah_lwsloop_watch (loop, upull, s_on_unwatch, &calls) == 0);
    zstr_send (upush, "a");
    zstr_send (upush, "b");
    ah_lwsloop_timer_set (loop, &st.timer, 200, s_timer, &st);
    CHECK (ah_lwsloop_run (loop) == 0);
    CHECK (calls == 1);

    ah_lwsloop_unwatch (loop, st.pair);
    ah_lwsloop_destroy (&loop);
    CHECK (loop == NULL);
    zsock_destroy (&upull);
    zsock_destroy (&upush);
    zsock_destroy (&pull);
    zsock_destroy (&st.pair);
    return CHECK_DONE ();
}
