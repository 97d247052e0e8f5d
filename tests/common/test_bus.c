/*  tests/common/test_bus.c: routing by name, answers for absent actors,
    malformed frames, and the tap.                                      */
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
    zactor_t *bus = zactor_new (ah_bus_actor, &args);
    CHECK (bus != NULL);
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
    //  Too few frames: dropped by the bus with a log line; the bus lives on.
    zstr_send (a, "beta");
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

    zsock_destroy (&a);
    zsock_destroy (&b);
    zsock_destroy (&sub);
    zactor_destroy (&bus);
    char path [128];
    snprintf (path, sizeof path, "/tmp/ah-test-bus-tap-%d", getpid ());
    unlink (path);
    return CHECK_DONE ();
}
