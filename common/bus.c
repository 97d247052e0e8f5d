/*  common/bus.c: routes messages between actors by name (see bus.h).

    DESIGN. One actor thread owns a ROUTER bound at AH_BUS_ENDPOINT, with
    ROUTER_MANDATORY set so that a message for an actor that is not
    connected fails at once instead of vanishing, and ROUTER_HANDOVER so
    that an actor reconnecting under its name (a restart, a test that
    runs an actor twice) takes the name over at once instead of being
    ignored until its old connection is gone; and an optional PUB
    tap. The bus decodes a map only to learn "req" when it must answer
    for an absent destination, and to put a CHAN_DATA's metadata on the
    tap in place of its data. A message's frames are received and sent
    on as ZeroMQ messages (zmq_msg_t, moved: no copy, no allocation of
    ours); czmq frames are made only for the tap and for an answer to an
    undeliverable message. With czmq's zmsg (four frames allocated and
    two copied per message) the bus ran at 0.30-0.35 of a raw PAIR on a
    VM where this runs at 0.64-0.67 (bench/bus).                       */
#include "common/bus.h"
#include "common/log.h"
#include "common/msg.h"

#include <string.h>

typedef struct {
    zsock_t *router;
    zsock_t *tap;           //  NULL when off
} self_t;

//  Sends every frame of msg without blocking (msg stays the caller's).
//  A destination whose queue is full (EAGAIN under ROUTER_MANDATORY) or
//  absent (EHOSTUNREACH) fails at the first frame: the bus never stalls
//  on one slow actor.
static int s_send_nowait (zsock_t *router, zmsg_t *msg)
{
    void *handle = zsock_resolve (router);
    size_t n = zmsg_size (msg), i = 0;
    for (zframe_t *f = zmsg_first (msg); f; f = zmsg_next (msg), i++)
        if (zmq_send (handle, zframe_data (f), zframe_size (f),
                      ZMQ_DONTWAIT | (i + 1 < n ? ZMQ_SNDMORE : 0)) < 0)
            return -1;
    return 0;
}

//  The tap's copy, [type][sender][dest][map]. A CHAN_DATA carries the
//  bytes of a terminal or a file: the tap gets {chan, bytes} instead (an
//  empty map when it does not decode), never the data (nor a spliced
//  upload's pipe: its byte count is its bytes).
static void s_tap (self_t *self, zframe_t *sender, zframe_t *dest, zframe_t *type, zframe_t *body)
{
    zmsg_t *copy = zmsg_new ();
    zmsg_addmem (copy, zframe_data (type), zframe_size (type));
    zmsg_addmem (copy, zframe_data (sender), zframe_size (sender));
    zmsg_addmem (copy, zframe_data (dest), zframe_size (dest));
    if (zframe_streq (type, "CHAN_DATA")) {
        ah_msg_t *data = ah_msg_decode ("CHAN_DATA", zframe_data (body), zframe_size (body), NULL);
        ah_msg_t *meta = ah_msg_new ("CHAN_DATA");
        size_t size = 0;
        if (data && ah_msg_has (data, "chan"))
            ah_msg_set_int (meta, "chan", ah_msg_int (data, "chan", -1));
        if (data && ah_msg_bin (data, "data", &size))
            ah_msg_set_int (meta, "bytes", (int64_t) size);
        else if (data && ah_msg_has (data, "pipe"))     //  spliced bytes, counted in the pipe
            ah_msg_set_int (meta, "bytes", ah_msg_int (data, "pipe", 0));
        uint8_t *encoded = NULL;
        if (ah_msg_encode (meta, &encoded, &size) == 0)
            zmsg_addmem (copy, encoded, size);
        else
            zmsg_addmem (copy, "\x80", 1);
        free (encoded);
        ah_msg_destroy (&meta);
        ah_msg_destroy (&data);
    }
    else
        zmsg_addmem (copy, zframe_data (body), zframe_size (body));
    //  PUB never blocks: it drops at its high-water mark.
    zmsg_send (&copy, self->tap);
    zmsg_destroy (&copy);
}

//  The destination cannot take msg: log, and answer a request.
static void s_undeliverable (self_t *self, zframe_t *sender, zframe_t *dest, zframe_t *type,
                             zframe_t *body)
{
    bool full = zmq_errno () == EAGAIN;
    char *d = zframe_strdup (dest), *s = zframe_strdup (sender), *t = zframe_strdup (type);
    ah_warn ("bus", full ? "actor '%s' is not keeping up: dropped %s from '%s'"
                         : "no actor '%s' for %s from '%s'", d, t, s);
    ah_msg_t *req = ah_msg_decode (t, zframe_data (body), zframe_size (body), NULL);
    if (req && ah_msg_has (req, "req") && strcmp (t, "REPLY") != 0) {
        ah_msg_t *reply = ah_msg_reply_error (req, 503, full ? "actor '%s' is overloaded"
                                                           : "actor '%s' is not running", d);
        uint8_t *data;
        size_t size;
        if (reply && ah_msg_encode (reply, &data, &size) == 0) {
            zmsg_t *out = zmsg_new ();
            zmsg_addmem (out, zframe_data (sender), zframe_size (sender));
            zmsg_addstr (out, d);
            zmsg_addstr (out, "REPLY");
            zmsg_addmem (out, data, size);
            s_send_nowait (self->router, out);
            zmsg_destroy (&out);
            free (data);
        }
        ah_msg_destroy (&reply);
    }
    ah_msg_destroy (&req);
    free (d);
    free (s);
    free (t);
}

//  Frames from the router: [sender][dest][type][map], received and sent
//  on as ZeroMQ messages (zmq_msg_t): the frames move from one pipe to
//  the other without a copy or an allocation of ours; czmq frames are
//  made only for the tap and for an undeliverable message.
static void s_frames_of (zmq_msg_t part [4], zframe_t *f [4])
{
    for (int i = 0; i < 4; i++)
        if (!f [i])
            f [i] = zframe_new (zmq_msg_data (&part [i]), zmq_msg_size (&part [i]));
}

static void s_route_one (self_t *self, void *handle)
{
    zmq_msg_t part [4], extra;
    int n = 0;
    for (bool more = true; more; n++) {
        zmq_msg_t *p = n < 4 ? &part [n] : &extra;     //  a fifth frame on: counted, dropped
        zmq_msg_init (p);
        if (zmq_msg_recv (p, handle, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close (p);
            break;
        }
        more = zmq_msg_more (p);
        if (p == &extra)
            zmq_msg_close (p);
    }
    int kept = n < 4 ? n : 4;
    if (n != 4) {
        if (n > 0) {
            char who [256];
            size_t len = zmq_msg_size (&part [0]) < sizeof who - 1 ? zmq_msg_size (&part [0]) : sizeof who - 1;
            memcpy (who, zmq_msg_data (&part [0]), len);
            who [len] = 0;
            ah_warn ("bus", "dropped a message of %d frames from '%s' (want [dest][type][map])",
                     n - 1, who);
        }
        for (int i = 0; i < kept; i++)
            zmq_msg_close (&part [i]);
        return;
    }
    //  czmq copies [sender][dest][type][map], made when needed.
    zframe_t *f [4] = { NULL };
    if (self->tap) {
        s_frames_of (part, f);
        s_tap (self, f [0], f [1], f [2], f [3]);
    }
    //  Out: [dest][sender][type][map]. Under ROUTER_MANDATORY a full or
    //  absent destination fails at the first frame, and the frame stays ours.
    static const int order [4] = { 1, 0, 2, 3 };
    int sent = 0;
    for (; sent < 4; sent++)
        if (zmq_msg_send (&part [order [sent]], handle, ZMQ_DONTWAIT | (sent < 3 ? ZMQ_SNDMORE : 0)) < 0)
            break;
    if (sent < 4) {
        int err = zmq_errno ();
        s_frames_of (part, f);
        errno = err;
        if (sent == 0)
            s_undeliverable (self, f [0], f [1], f [2], f [3]);
        else
            ah_error ("bus", "a message was cut after %d of its frames: %s", sent, zmq_strerror (err));
    }
    for (int i = 0; i < 4; i++) {
        zmq_msg_close (&part [i]);  //  a sent one is empty: closing it is a no-op
        zframe_destroy (&f [i]);
    }
}

static void s_route (void *arg, zsock_t *router)
{
    s_route_one ((self_t *) arg, zsock_resolve (router));
}

static void s_destroy (void *arg)
{
    self_t *self = arg;
    zsock_destroy (&self->tap);
    zsock_destroy (&self->router);
    free (self);
}

static void *s_init (ah_actor_t *actor, void *args)
{
    const ah_bus_args_t *a = args;
    self_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->router = zsock_new (ZMQ_ROUTER);
    if (!self->router || zsock_bind (self->router, "%s", AH_BUS_ENDPOINT) != 0) {
        ah_actor_fail (actor, "cannot bind the bus at %s: %s", AH_BUS_ENDPOINT, zmq_strerror (zmq_errno ()));
        s_destroy (self);
        return NULL;
    }
    zsock_set_router_mandatory (self->router, 1);
    zsock_set_router_handover (self->router, 1);
    zsock_set_sndhwm (self->router, 100000);
    zsock_set_rcvhwm (self->router, 100000);
    if (a && a->tap_endpoint && *a->tap_endpoint) {
        self->tap = zsock_new (ZMQ_PUB);
        if (self->tap)
            zsock_set_sndhwm (self->tap, 10000);
        if (!self->tap || zsock_bind (self->tap, "%s", a->tap_endpoint) < 0) {
            ah_actor_fail (actor, "cannot bind the tap at %s (tap.endpoint): %s", a->tap_endpoint,
                           zmq_strerror (zmq_errno ()));
            s_destroy (self);
            return NULL;
        }
        ah_info ("bus", "tap publishing every message on %s", a->tap_endpoint);
    }
    if (ah_actor_reader (actor, self->router, s_route)) {
        ah_actor_fail (actor, "cannot serve the bus's socket");
        s_destroy (self);
        return NULL;
    }
    return self;
}

const ah_actor_def_t ah_bus_actor = {
    .name = "bus", .on_bus = false, .init = s_init, .destroy = s_destroy,
};

zsock_t *ah_bus_connect (const char *name)
{
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    if (!sock)
        return NULL;
    zsock_set_identity (sock, name);
    zsock_set_sndhwm (sock, 100000);
    zsock_set_rcvhwm (sock, 100000);
    zsock_set_linger (sock, 0);
    if (zsock_connect (sock, "%s", AH_BUS_ENDPOINT) != 0) {
        zsock_destroy (&sock);
        return NULL;
    }
    return sock;
}
