/*  tests/common/test_bus.c: the bus actor: routing by name, answers for
    absent actors, malformed frames, and the tap, which never carries
    the bytes of a CHAN_DATA (only its chan and length).               */
#include "common/bus.h"
#include "common/msg.h"
#include "check.h"
#include <stdlib.h>
#include <unistd.h>

int main (void)
{
    zsys_init ();
    char tap [128];
    snprintf (tap, sizeof tap, "ipc:///tmp/ah-test-bus-tap-%d", getpid ());
    ah_bus_args_t args = { .tap_endpoint = tap };
    char *why = NULL;
    zactor_t *bus = ah_actor_new (&ah_bus_actor, &args, &why);
    CHECK (bus != NULL && why == NULL);
    //  A second bus cannot bind: the start fails with the reason.
    zactor_t *second = ah_actor_new (&ah_bus_actor, &args, &why);
    CHECK (second == NULL && why && strstr (why, "cannot bind"));
    free (why);
    zsock_t *sub = zsock_new_sub (tap, "");
    zclock_sleep (100);                            //  let the SUB join

    zsock_t *a = ah_bus_connect ("alpha");
    zsock_t *b = ah_bus_connect ("beta");
    zclock_sleep (50);

    ah_msg_t *m = ah_msg_new ("PING");
    ah_msg_set_int (m, "req", 1);
    ah_msg_set_str (m, "hello", "world");
    CHECK (ah_msg_send (&m, a, "beta") == 0);
    CHECK (m == NULL);
    zsock_set_rcvtimeo (b, 2000);
    char *err = NULL;
    ah_msg_t *got = ah_msg_recv (b, true, &err);
    CHECK (got != NULL);
    if (got) {
        CHECK_STR (ah_msg_type (got), "PING");
        CHECK_STR (ah_msg_peer (got), "alpha");
        CHECK_STR (ah_msg_str (got, "hello"), "world");
        ah_msg_t *reply = ah_msg_reply_ok (got);
        CHECK (ah_msg_send (&reply, b, ah_msg_peer (got)) == 0);
    }
    ah_msg_destroy (&got);
    zsock_set_rcvtimeo (a, 2000);
    got = ah_msg_recv (a, true, &err);
    CHECK (got && ah_msg_bool (got, "ok", false) && ah_msg_int (got, "req", 0) == 1);
    ah_msg_destroy (&got);

    //  Absent destination: a 503 REPLY naming it.
    m = ah_msg_new ("SANDBOX_START");
    ah_msg_set_int (m, "req", 77);
    ah_msg_send (&m, a, "nobody");
    got = ah_msg_recv (a, true, &err);
    CHECK (got && ah_msg_int (got, "status", 0) == 503 && ah_msg_int (got, "req", 0) == 77);
    CHECK (got && strstr (ah_msg_str (got, "error"), "nobody"));
    ah_msg_destroy (&got);

    //  A malformed map reaches the receiver as a clean NULL + reason.
    zstr_sendm (a, "beta");
    zstr_sendm (a, "BROKEN");
    zmq_send (zsock_resolve (a), "\xdf\xff\xff\xff\xff", 5, 0);
    got = ah_msg_recv (b, true, &err);
    CHECK (got == NULL && err && strstr (err, "BROKEN"));
    free (err);
    err = NULL;
    //  Too few frames, and too many: dropped by the bus with a log line
    //  (every frame of them taken); the bus lives on.
    zstr_send (a, "beta");
    zstr_sendm (a, "beta");
    zstr_sendm (a, "PING");
    zstr_sendm (a, "\x80");
    zstr_sendm (a, "fifth");
    zstr_send (a, "sixth");
    m = ah_msg_new ("AFTER");
    ah_msg_send (&m, a, "beta");
    got = ah_msg_recv (b, true, &err);
    CHECK (got && streq (ah_msg_type (got), "AFTER"));
    ah_msg_destroy (&got);

    //  The tap saw the routed messages as [type][sender][dest][map].
    zsock_set_rcvtimeo (sub, 1000);
    zmsg_t *t = zmsg_recv (sub);
    CHECK (t && zmsg_size (t) == 4);
    if (t) {
        char *type = zmsg_popstr (t), *from = zmsg_popstr (t), *to = zmsg_popstr (t);
        CHECK_STR (type, "PING");
        CHECK_STR (from, "alpha");
        CHECK_STR (to, "beta");
        free (type); free (from); free (to);
    }
    zmsg_destroy (&t);

    //  CHAN_DATA: the receiver gets the bytes, the tap only their count.
    m = ah_msg_new ("CHAN_DATA");
    ah_msg_set_int (m, "chan", 12);
    ah_msg_set_bin (m, "data", "SECRET-KEYSTROKES", 17);
    ah_msg_send (&m, a, "beta");
    got = ah_msg_recv (b, true, &err);
    size_t size = 0;
    const void *data = got ? ah_msg_bin (got, "data", &size) : NULL;
    CHECK (data && size == 17 && memcmp (data, "SECRET-KEYSTROKES", 17) == 0);
    ah_msg_destroy (&got);
    //  One that does not decode: still nothing of it on the tap.
    zstr_sendm (a, "beta");
    zstr_sendm (a, "CHAN_DATA");
    zmq_send (zsock_resolve (a), "\x82\xa4" "chan\x07\xa4" "data\xc4\x20" "SECRET-KEYSTROKES", 29, 0);
    got = ah_msg_recv (b, true, &err);
    CHECK (got == NULL);
    free (err);
    err = NULL;
    int seen = 0;
    while ((t = zmsg_recv (sub))) {
        char *type = zmsg_popstr (t);
        zframe_t *body = zmsg_last (t);
        for (zframe_t *f = zmsg_first (t); f; f = zmsg_next (t))
            CHECK (!memmem (zframe_data (f), zframe_size (f), "SECRET", 6));
        if (streq (type, "CHAN_DATA")) {
            ah_msg_t *meta = ah_msg_decode (type, zframe_data (body), zframe_size (body), NULL);
            CHECK (meta && !ah_msg_has (meta, "data"));
            if (seen++ == 0)
                CHECK (meta && ah_msg_int (meta, "chan", 0) == 12 && ah_msg_int (meta, "bytes", 0) == 17);
            ah_msg_destroy (&meta);
        }
        free (type);
        zmsg_destroy (&t);
    }
    CHECK (seen == 2);

    zsock_destroy (&a);
    zsock_destroy (&b);
    zsock_destroy (&sub);
    zactor_destroy (&bus);
    char path [128];
    snprintf (path, sizeof path, "/tmp/ah-test-bus-tap-%d", getpid ());
    unlink (path);
    return CHECK_DONE ();
}
