/*  tests/common/actor_probe.h: what every actor must do with what it
    cannot serve (common/actor.h): a malformed message and an unknown
    type that carry a req are answered with REPLY 400 and a reason
    (waited for up to 2 s: a loaded machine is slow, not wrong), and the
    actor goes on serving. Each actor's unit test
    calls actor_probe_refusals (bus name) with the actor running on a bus. */
#ifndef AH_TEST_ACTOR_PROBE_H
#define AH_TEST_ACTOR_PROBE_H

#include "common/bus.h"
#include "common/msg.h"
#include "tests/common/check.h"

//  One REPLY for req within 2 s: its status, or 0 when none came.
static int actor_probe_reply (zsock_t *probe, int64_t req, char *why, size_t why_size)
{
    zsock_set_rcvtimeo (probe, 2000);
    int64_t until = zclock_mono () + 2000;
    while (zclock_mono () <= until) {
        char *err = NULL;
        ah_msg_t *m = ah_msg_recv (probe, true, &err);
        free (err);
        if (!m)
            return 0;
        int status = 0;
        if (streq (ah_msg_type (m), "REPLY") && ah_msg_int (m, "req", -1) == req) {
            status = (int) ah_msg_int (m, "status", 0);
            snprintf (why, why_size, "%s", ah_msg_str (m, "error") ? ah_msg_str (m, "error") : "");
            CHECK (!ah_msg_bool (m, "ok", true));
        }
        ah_msg_destroy (&m);
        if (status)
            return status;
    }
    return 0;
}

//  Malformed (a map that breaks after its req), bad frames, an unknown
//  type: each answered 400, twice over (the actor lives).
static void actor_probe_refusals (const char *actor)
{
    zsock_t *probe = ah_bus_connect ("probe");
    CHECK (probe != NULL);
    if (!probe)
        return;
    zclock_sleep (20);
    char why [512];
    for (int round = 0; round < 2; round++) {
        int64_t req = 4200 + round * 10;
        //  {"req": req, "x": <a str8 that claims 200 bytes and has 2>}
        uint8_t broken [] = { 0x82, 0xa3, 'r', 'e', 'q', 0xcd, (uint8_t) (req >> 8), (uint8_t) req,
                              0xa1, 'x', 0xd9, 200, 'h', 'i' };
        zstr_sendm (probe, actor);
        zstr_sendm (probe, "AGENT_CREATE");
        zmq_send (zsock_resolve (probe), broken, sizeof broken, 0);
        int status = actor_probe_reply (probe, req, why, sizeof why);
        if (status != 400)
            fprintf (stderr, "%s: a malformed map got status %d\n", actor, status);
        CHECK (status == 400 && strstr (why, "malformed"));

        //  A type frame with a byte no type may hold
        ah_msg_t *m = ah_msg_new ("X");
        ah_msg_set_int (m, "req", req + 1);
        uint8_t *data = NULL;
        size_t size = 0;
        ah_msg_encode (m, &data, &size);
        ah_msg_destroy (&m);
        zstr_sendm (probe, actor);
        zstr_sendm (probe, "BAD TYPE");
        zmq_send (zsock_resolve (probe), data, size, 0);
        free (data);
        status = actor_probe_reply (probe, req + 1, why, sizeof why);
        if (status != 400)
            fprintf (stderr, "%s: a bad type frame got status %d\n", actor, status);
        CHECK (status == 400);

        //  A type nobody knows
        m = ah_msg_new ("NO_SUCH_TYPE");
        ah_msg_set_int (m, "req", req + 2);
        ah_msg_send (&m, probe, actor);
        status = actor_probe_reply (probe, req + 2, why, sizeof why);
        if (status != 400)
            fprintf (stderr, "%s: an unknown type got status %d\n", actor, status);
        CHECK (status == 400 && strstr (why, "NO_SUCH_TYPE"));
    }
    zsock_destroy (&probe);
}

#endif
