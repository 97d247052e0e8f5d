/*  common/bus.c: routes messages between actors by name (see bus.h).

    DESIGN. One thread (this zactor) owns a ROUTER bound at
    AH_BUS_ENDPOINT, with ROUTER_MANDATORY set so that a message for an
    actor that is not connected fails at once instead of vanishing, and an
    optional PUB tap. The bus does not decode maps except to learn "req"
    when it must answer for an absent destination.                      */
#include "common/bus.h"
#include "common/log.h"
#include "common/msg.h"

#include <string.h>

typedef struct {
    zsock_t *pipe;
    zsock_t *router;
    zsock_t *tap;           //  NULL when off
} self_t;

static void s_destroy (self_t *self)
{
    zsock_destroy (&self->tap);
    zsock_destroy (&self->router);
}

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

//  Frames from the router: [sender][dest][type][map].
static void s_route (self_t *self)
{
    zmsg_t *msg = zmsg_recv (self->router);
    if (!msg)
        return;
    if (zmsg_size (msg) != 4) {
        char *who = zmsg_size (msg) ? zframe_strdup (zmsg_first (msg)) : strdup ("?");
        ah_warn ("bus", "dropped a message of %zu frames from '%s' (want [dest][type][map])",
                 zmsg_size (msg) ? zmsg_size (msg) - 1 : 0, who);
        free (who);
        zmsg_destroy (&msg);
        return;
    }
    zframe_t *sender = zmsg_pop (msg);
    zframe_t *dest = zmsg_pop (msg);
    zframe_t *type = zmsg_first (msg);
    zframe_t *body = zmsg_next (msg);

    if (self->tap) {
        //  [type][sender][dest][map]; PUB never blocks: it drops at HWM.
        zmsg_t *copy = zmsg_new ();
        zmsg_addmem (copy, zframe_data (type), zframe_size (type));
        zmsg_addmem (copy, zframe_data (sender), zframe_size (sender));
        zmsg_addmem (copy, zframe_data (dest), zframe_size (dest));
        zmsg_addmem (copy, zframe_data (body), zframe_size (body));
        zmsg_send (&copy, self->tap);
        zmsg_destroy (&copy);
    }
    //  Out: [dest][sender][type][map]
    zframe_t *dest_copy = zframe_dup (dest);
    zframe_t *sender_copy = zframe_dup (sender);
    zmsg_prepend (msg, &sender_copy);
    zmsg_prepend (msg, &dest_copy);
    if (s_send_nowait (self->router, msg) != 0) {
        bool full = zmq_errno () == EAGAIN;
        char *d = zframe_strdup (dest), *s = zframe_strdup (sender);
        char *t = zframe_strdup (type);
        ah_warn ("bus", full ? "actor '%s' is not keeping up: dropped %s from '%s'"
                             : "no actor '%s' for %s from '%s'", d, t, s);
        //  Answer if the sender waits for one.
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
    zmsg_destroy (&msg);
    zframe_destroy (&sender);
    zframe_destroy (&dest);
}

void ah_bus_actor (zsock_t *pipe, void *args)
{
    const ah_bus_args_t *a = args;
    self_t self = { .pipe = pipe };
    self.router = zsock_new (ZMQ_ROUTER);
    if (!self.router || zsock_bind (self.router, "%s", AH_BUS_ENDPOINT) != 0) {
        ah_error ("bus", "cannot bind %s: %s", AH_BUS_ENDPOINT, zmq_strerror (zmq_errno ()));
        s_destroy (&self);
        zsock_signal (pipe, 1);
        return;
    }
    zsock_set_router_mandatory (self.router, 1);
    zsock_set_sndhwm (self.router, 100000);
    zsock_set_rcvhwm (self.router, 100000);
    if (a && a->tap_endpoint && *a->tap_endpoint) {
        self.tap = zsock_new (ZMQ_PUB);
        zsock_set_sndhwm (self.tap, 10000);
        if (!self.tap || zsock_bind (self.tap, "%s", a->tap_endpoint) < 0) {
            ah_error ("bus", "cannot bind the tap at %s (tap.endpoint): %s", a->tap_endpoint,
                      zmq_strerror (zmq_errno ()));
            s_destroy (&self);
            zsock_signal (pipe, 1);
            return;
        }
        ah_info ("bus", "tap publishing every message on %s", a->tap_endpoint);
    }
    zsock_signal (pipe, 0);

    zpoller_t *poller = zpoller_new (pipe, self.router, NULL);
    while (true) {
        void *which = zpoller_wait (poller, -1);
        if (which == pipe) {
            char *cmd = zstr_recv (pipe);
            bool term = !cmd || streq (cmd, "$TERM");
            zstr_free (&cmd);
            if (term)
                break;
        }
        else if (which == self.router)
            s_route (&self);
        else if (zpoller_terminated (poller))
            break;
    }
    zpoller_destroy (&poller);
    s_destroy (&self);
}

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
