/*  proto/yamux.c: yamux sessions without I/O (see yamux.h, docs/tunnel.md).

    Follows hashicorp/yamux spec.md and the behaviour of its Go session
    (session.go, stream.go) so the two interoperate.

    DESIGN: one session belongs to one thread. Input is parsed by a small
    state machine that holds at most one frame header (12 bytes); data
    payloads are handed to on_data as they arrive, in as many pieces as the
    transport split them into, so nothing is buffered here: memory per
    session is the stream table, each stream a few dozen bytes, capped at
    S_MAX_STREAMS. Writes never queue: ah_yamux_write takes what the peer's
    window allows and returns short.

    Callbacks may call back into the session (write from on_writable, reset
    from on_data, destroy from on_goaway, ...). Therefore no stream pointer
    is held across a callback (streams are looked up by id again), each
    outgoing frame goes to the output callback in one piece so re-entrant
    writes interleave whole frames only, ah_yamux_input refuses to be
    re-entered for the same session, and a destroy from inside a callback
    only marks the session; the outermost call frees it on the way out.  */
#include "proto/yamux.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S_MAX_STREAMS   1024        //  live streams per session
#define S_BUCKETS       256         //  stream table buckets (power of two)
#define S_MAX_FRAME     (256u << 10) //  largest data payload we send in one frame (output_data)
#define S_COPY_FRAME    65536       //  ... when yamux copies it into a frame of its own
#define S_GROW_MS       20          //  half a window consumed this fast: the window is short

typedef struct s_stream_t {
    struct s_stream_t *next;        //  bucket chain
    uint32_t id;
    uint32_t send_window;           //  bytes we may still send
    uint32_t recv_window;           //  bytes the peer may still send
    uint32_t unconsumed;            //  received, not yet consumed by the app
    uint32_t pending;               //  consumed, not yet given back to the peer
    uint32_t window;                //  our receive window's size now (grows)
    int64_t  last_update_ms;        //  when we last gave bytes back (0: never)
    bool     local_fin;             //  we sent FIN
    bool     remote_fin;            //  the peer sent FIN
    bool     want_writable;         //  a write came back short
} s_stream_t;

struct ah_yamux_t {
    bool     is_client;
    ah_yamux_callbacks_t cb;
    void    *ud;
    s_stream_t *buckets [S_BUCKETS];
    size_t   nstreams;
    uint32_t next_id;               //  next id we open
    bool     local_goaway;
    bool     remote_goaway;
    bool     failed;                //  protocol error: the session is dead
    const char *fail_reason;

    //  Input state: a header being assembled, or a payload being passed on
    uint8_t  hdr [AH_YAMUX_HEADER_SIZE];
    size_t   hdr_len;
    uint32_t cur_id;                //  stream of the payload in flight
    uint16_t cur_flags;
    uint32_t payload_left;
    bool     deliver;               //  payload goes to cur_id, else skipped

    //  Re-entrancy
    int      depth;                 //  public calls in progress
    bool     doomed;                //  destroyed from a callback
    bool     in_input;
};

//  ---------------------------------------------------------------------
//  Frame codec

static void s_put32 (uint8_t *p, uint32_t v)
{
    p [0] = (uint8_t) (v >> 24);
    p [1] = (uint8_t) (v >> 16);
    p [2] = (uint8_t) (v >> 8);
    p [3] = (uint8_t) v;
}

static uint32_t s_get32 (const uint8_t *p)
{
    return (uint32_t) p [0] << 24 | (uint32_t) p [1] << 16
         | (uint32_t) p [2] << 8 | (uint32_t) p [3];
}

void ah_yamux_header_encode (const ah_yamux_header_t *h, uint8_t out [AH_YAMUX_HEADER_SIZE])
{
    out [0] = h->version;
    out [1] = h->type;
    out [2] = (uint8_t) (h->flags >> 8);
    out [3] = (uint8_t) h->flags;
    s_put32 (out + 4, h->stream_id);
    s_put32 (out + 8, h->length);
}

int ah_yamux_header_decode (const uint8_t in [AH_YAMUX_HEADER_SIZE], ah_yamux_header_t *h)
{
    h->version = in [0];
    h->type = in [1];
    h->flags = (uint16_t) (in [2] << 8 | in [3]);
    h->stream_id = s_get32 (in + 4);
    h->length = s_get32 (in + 8);
    if (h->version != AH_YAMUX_VERSION || h->type > AH_YAMUX_GO_AWAY)
        return -1;
    return 0;
}

//  ---------------------------------------------------------------------
//  Stream table

static size_t s_bucket (uint32_t id)
{
    //  Ids of one side step by two: drop the parity bit before hashing
    return (id >> 1) & (S_BUCKETS - 1);
}

static s_stream_t *s_find (const ah_yamux_t *self, uint32_t id)
{
    for (s_stream_t *s = self->buckets [s_bucket (id)]; s; s = s->next)
        if (s->id == id)
            return s;
    return NULL;
}

static int64_t s_now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static s_stream_t *s_add (ah_yamux_t *self, uint32_t id)
{
    s_stream_t *s = calloc (1, sizeof *s);
    if (!s)
        return NULL;
    s->id = id;
    s->send_window = AH_YAMUX_INITIAL_WINDOW;
    s->recv_window = AH_YAMUX_INITIAL_WINDOW;
    s->window = AH_YAMUX_INITIAL_WINDOW;
    s->next = self->buckets [s_bucket (id)];
    self->buckets [s_bucket (id)] = s;
    self->nstreams++;
    return s;
}

static void s_remove (ah_yamux_t *self, uint32_t id)
{
    s_stream_t **pp = &self->buckets [s_bucket (id)];
    while (*pp && (*pp)->id != id)
        pp = &(*pp)->next;
    if (*pp) {
        s_stream_t *s = *pp;
        *pp = s->next;
        free (s);
        self->nstreams--;
    }
}

//  ---------------------------------------------------------------------
//  Output and callbacks. Each returns false once the session was
//  destroyed from inside the callback: the caller must stop touching it.

static bool s_output (ah_yamux_t *self, const uint8_t *data, size_t size)
{
    if (self->cb.output)
        self->cb.output (self->ud, data, size);
    return !self->doomed;
}

static bool s_send (ah_yamux_t *self, uint8_t type, uint16_t flags, uint32_t id, uint32_t length)
{
    ah_yamux_header_t h = { AH_YAMUX_VERSION, type, flags, id, length };
    uint8_t buf [AH_YAMUX_HEADER_SIZE];
    ah_yamux_header_encode (&h, buf);
    return s_output (self, buf, sizeof buf);
}

static bool s_closed (ah_yamux_t *self, uint32_t id, bool reset)
{
    if (self->cb.on_closed)
        self->cb.on_closed (self->ud, id, reset);
    return !self->doomed;
}

//  A protocol error: tell the peer (go away 1) and refuse everything after.
static int s_fail (ah_yamux_t *self, const char *reason)
{
    if (!self->failed) {
        self->failed = true;
        self->fail_reason = reason;
        s_send (self, AH_YAMUX_GO_AWAY, 0, 0, AH_YAMUX_GOAWAY_PROTOCOL);
    }
    return -1;
}

static void s_enter (ah_yamux_t *self)
{
    self->depth++;
}

static void s_free (ah_yamux_t *self)
{
    for (size_t b = 0; b < S_BUCKETS; b++) {
        s_stream_t *s = self->buckets [b];
        while (s) {
            s_stream_t *next = s->next;
            free (s);
            s = next;
        }
    }
    free (self);
}

static void s_leave (ah_yamux_t *self)
{
    if (--self->depth == 0 && self->doomed)
        s_free (self);
}

//  ---------------------------------------------------------------------
//  Session

ah_yamux_t *ah_yamux_new (bool is_client, const ah_yamux_callbacks_t *cb, void *ud)
{
    ah_yamux_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->is_client = is_client;
    if (cb)
        self->cb = *cb;
    self->ud = ud;
    self->next_id = is_client ? 1 : 2;
    return self;
}

void ah_yamux_destroy (ah_yamux_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_yamux_t *self = *self_p;
    *self_p = NULL;
    if (self->depth > 0)
        self->doomed = true;        //  freed when the outermost call returns
    else
        s_free (self);
}

//  The peer's FIN for id (after any data of the same frame).
static int s_remote_fin (ah_yamux_t *self, uint32_t id)
{
    s_stream_t *s = s_find (self, id);
    if (!s)
        return 0;
    if (s->remote_fin)
        return s_fail (self, "yamux: second FIN on a stream");
    s->remote_fin = true;
    if (self->cb.on_eof) {
        self->cb.on_eof (self->ud, id);
        if (self->doomed)
            return 0;
        s = s_find (self, id);
    }
    if (s && s->local_fin) {
        s_remove (self, id);
        s_closed (self, id, false);
    }
    return 0;
}

//  The peer opens id (SYN). Returns 1 if the stream now exists, 0 if it
//  was refused with RST (the frame's payload is then skipped), -1 on a
//  protocol error.
static int s_accept (ah_yamux_t *self, uint32_t id)
{
    bool peer_parity = self->is_client ? (id % 2 == 0) : (id % 2 == 1);
    if (!peer_parity)
        return s_fail (self, "yamux: SYN with a stream id of the wrong parity");
    //  Only live ids can be checked: Go opens streams from several
    //  goroutines, so their SYNs need not arrive in id order.
    if (s_find (self, id))
        return s_fail (self, "yamux: SYN reuses the id of a live stream");

    //  Like Go's backlog: refuse the stream, keep the session
    if (self->local_goaway || self->nstreams >= S_MAX_STREAMS || !s_add (self, id)) {
        s_send (self, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_RST, id, 0);
        return 0;
    }
    if (!s_send (self, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_ACK, id, 0))
        return 0;
    if (self->cb.on_open)
        self->cb.on_open (self->ud, id);
    return 1;
}

//  A data or window update frame header has arrived.
static int s_stream_frame (ah_yamux_t *self, const ah_yamux_header_t *h)
{
    uint32_t id = h->stream_id;
    bool data = h->type == AH_YAMUX_DATA;
    if (id == 0)
        return s_fail (self, data? "yamux: data frame on stream 0":
                                   "yamux: window update on stream 0");
    if (h->flags & AH_YAMUX_SYN) {
        if (s_accept (self, id) < 0)
            return -1;
        if (self->doomed)
            return 0;
    }
    s_stream_t *s = s_find (self, id);
    if (s && (h->flags & AH_YAMUX_RST)) {
        s_remove (self, id);
        s = NULL;
        if (!s_closed (self, id, true))
            return 0;
    }
    if (!s) {
        //  Gone or never ours (we sent RST, or refused it): drop the frame
        if (data && h->length > 0) {
            self->payload_left = h->length;
            self->deliver = false;
        }
        return 0;
    }
    if (!data) {
        uint64_t window = (uint64_t) s->send_window + h->length;
        s->send_window = window > UINT32_MAX? UINT32_MAX: (uint32_t) window;
        if (s->want_writable && s->send_window > 0 && !s->local_fin) {
            s->want_writable = false;
            if (self->cb.on_writable) {
                self->cb.on_writable (self->ud, id);
                if (self->doomed)
                    return 0;
            }
        }
        if (h->flags & AH_YAMUX_FIN)
            return s_remote_fin (self, id);
        return 0;
    }
    if (s->remote_fin && (h->length > 0 || (h->flags & AH_YAMUX_FIN)))
        return s_fail (self, "yamux: data after FIN");
    if (h->length > s->recv_window)
        return s_fail (self, "yamux: data beyond the receive window");
    s->recv_window -= h->length;
    s->unconsumed += h->length;
    if (h->length > 0) {
        //  FIN, if any, applies once the payload has been passed on
        self->payload_left = h->length;
        self->deliver = true;
        self->cur_id = id;
        self->cur_flags = h->flags;
        return 0;
    }
    if (h->flags & AH_YAMUX_FIN)
        return s_remote_fin (self, id);
    return 0;
}

//  A whole header has arrived in self->hdr.
static int s_frame (ah_yamux_t *self)
{
    ah_yamux_header_t h;
    if (ah_yamux_header_decode (self->hdr, &h) < 0)
        return s_fail (self, h.version != AH_YAMUX_VERSION?
                             "yamux: unsupported protocol version":
                             "yamux: unknown frame type");
    switch (h.type) {
        case AH_YAMUX_PING:
            if (h.stream_id != 0)
                return s_fail (self, "yamux: ping on a stream");
            if (h.flags & AH_YAMUX_SYN) {
                s_send (self, AH_YAMUX_PING, AH_YAMUX_ACK, 0, h.length);
                if (self->cb.on_ping)
                    self->cb.on_ping (self->ud, h.length);
            }
            else
            if ((h.flags & AH_YAMUX_ACK) && self->cb.on_pong)
                self->cb.on_pong (self->ud, h.length);
            return 0;
        case AH_YAMUX_GO_AWAY:
            if (h.stream_id != 0)
                return s_fail (self, "yamux: go away on a stream");
            self->remote_goaway = true;
            if (self->cb.on_goaway)
                self->cb.on_goaway (self->ud, h.length);
            return 0;
        default:
            return s_stream_frame (self, &h);
    }
}

int ah_yamux_input (ah_yamux_t *self, const uint8_t *data, size_t size, const char **err)
{
    const char *dummy;
    if (!err)
        err = &dummy;
    *err = NULL;
    if (!self) {
        *err = "yamux: no session";
        return -1;
    }
    if (self->failed) {
        *err = self->fail_reason;
        return -1;
    }
    if (self->in_input) {
        *err = "yamux: input called from inside the same session's callback";
        return -1;
    }
    if (!data && size > 0) {
        *err = "yamux: input without a buffer";
        return -1;
    }
    s_enter (self);
    self->in_input = true;
    while (size > 0 && !self->doomed && !self->failed) {
        if (self->payload_left > 0) {
            size_t n = size < self->payload_left? size: self->payload_left;
            self->payload_left -= (uint32_t) n;
            if (self->deliver && self->cb.on_data && s_find (self, self->cur_id))
                self->cb.on_data (self->ud, self->cur_id, data, n);
            data += n;
            size -= n;
            if (self->payload_left == 0 && self->deliver && !self->doomed
            &&  (self->cur_flags & AH_YAMUX_FIN))
                s_remote_fin (self, self->cur_id);
            continue;
        }
        size_t n = AH_YAMUX_HEADER_SIZE - self->hdr_len;
        if (n > size)
            n = size;
        memcpy (self->hdr + self->hdr_len, data, n);
        self->hdr_len += n;
        data += n;
        size -= n;
        if (self->hdr_len < AH_YAMUX_HEADER_SIZE)
            break;
        self->hdr_len = 0;
        s_frame (self);
    }
    int rc = 0;
    if (!self->doomed) {
        self->in_input = false;
        if (self->failed) {
            *err = self->fail_reason;
            rc = -1;
        }
    }
    s_leave (self);
    return rc;
}

int ah_yamux_open (ah_yamux_t *self, uint32_t *id)
{
    if (!self || self->failed || self->local_goaway || self->remote_goaway
    ||  self->nstreams >= S_MAX_STREAMS || self->next_id > UINT32_MAX - 2)
        return -1;
    uint32_t new_id = self->next_id;
    if (!s_add (self, new_id))
        return -1;
    self->next_id += 2;
    if (id)
        *id = new_id;
    s_enter (self);
    s_send (self, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, new_id, 0);
    s_leave (self);
    return 0;
}

//  Up to want bytes (at most most) of s's send window, taken for one data
//  frame; 0 when it is shut, and on_writable is owed when it opens.
static size_t s_take_window (s_stream_t *s, size_t want, size_t most)
{
    size_t n = want < s->send_window ? want : s->send_window;
    if (n > most)
        n = most;
    if (n == 0 && want)
        s->want_writable = true;
    s->send_window -= (uint32_t) n;
    return n;
}

ssize_t ah_yamux_write (ah_yamux_t *self, uint32_t id, const uint8_t *data, size_t size)
{
    if (!self || self->failed || (!data && size > 0))
        return -1;
    s_stream_t *s = s_find (self, id);
    if (!s || s->local_fin)
        return -1;
    if (size > SSIZE_MAX)
        size = SSIZE_MAX;
    size_t total = 0;
    s_enter (self);
    while (total < size) {
        //  Looked up again: the output callback may have closed it
        s = s_find (self, id);
        if (!s || s->local_fin)
            break;
        size_t n = s_take_window (s, size - total, self->cb.output_data ? S_MAX_FRAME : S_COPY_FRAME);
        if (n == 0)
            break;
        ah_yamux_header_t h = { AH_YAMUX_VERSION, AH_YAMUX_DATA, 0, id, (uint32_t) n };
        const uint8_t *payload = data + total;
        total += n;
        if (self->cb.output_data) {
            uint8_t head [AH_YAMUX_HEADER_SIZE];
            ah_yamux_header_encode (&h, head);
            self->cb.output_data (self->ud, head, sizeof head, payload, n);
            if (self->doomed)
                break;
            continue;
        }
        uint8_t frame [AH_YAMUX_HEADER_SIZE + S_COPY_FRAME];
        ah_yamux_header_encode (&h, frame);
        memcpy (frame + AH_YAMUX_HEADER_SIZE, payload, n);
        if (!s_output (self, frame, AH_YAMUX_HEADER_SIZE + n))
            break;
    }
    s_leave (self);
    return (ssize_t) total;
}

ssize_t ah_yamux_write_header (ah_yamux_t *self, uint32_t id, size_t size,
                               uint8_t head [AH_YAMUX_HEADER_SIZE])
{
    if (!self || self->failed)
        return -1;
    s_stream_t *s = s_find (self, id);
    if (!s || s->local_fin)
        return -1;
    size_t n = s_take_window (s, size, S_MAX_FRAME);
    if (n == 0)
        return 0;
    ah_yamux_header_t h = { AH_YAMUX_VERSION, AH_YAMUX_DATA, 0, id, (uint32_t) n };
    ah_yamux_header_encode (&h, head);
    return (ssize_t) n;
}

void ah_yamux_consumed (ah_yamux_t *self, uint32_t id, size_t n)
{
    if (!self || self->failed)
        return;
    s_stream_t *s = s_find (self, id);
    if (!s)
        return;
    if (n > s->unconsumed)
        n = s->unconsumed;          //  more than arrived: an application slip
    s->unconsumed -= (uint32_t) n;
    if (s->remote_fin)
        return;                     //  nothing more will come: no credit needed
    s->pending += (uint32_t) n;
    if (s->pending < s->window / 2)
        return;
    uint32_t delta = s->pending;
    s->pending = 0;
    //  Auto-tuning: when the application used half the window within
    //  S_GROW_MS of the last update, the window, not the reader, is what
    //  limits the stream: double it (the update carries the growth too),
    //  up to AH_YAMUX_MAX_WINDOW. A slow reader never grows it.
    int64_t now = self->cb.now_ms ? self->cb.now_ms (self->ud) : s_now_ms ();
    if (s->last_update_ms && now - s->last_update_ms < S_GROW_MS && s->window < AH_YAMUX_MAX_WINDOW) {
        uint32_t grown = s->window * 2 > AH_YAMUX_MAX_WINDOW ? AH_YAMUX_MAX_WINDOW : s->window * 2;
        delta += grown - s->window;
        s->window = grown;
    }
    s->last_update_ms = now;
    s->recv_window += delta;
    s_enter (self);
    s_send (self, AH_YAMUX_WINDOW_UPDATE, 0, id, delta);
    s_leave (self);
}

int ah_yamux_close (ah_yamux_t *self, uint32_t id)
{
    if (!self || self->failed)
        return -1;
    s_stream_t *s = s_find (self, id);
    if (!s || s->local_fin)
        return -1;
    s->local_fin = true;
    bool done = s->remote_fin;
    if (done)
        s_remove (self, id);
    s_enter (self);
    if (s_send (self, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_FIN, id, 0) && done)
        s_closed (self, id, false);
    s_leave (self);
    return 0;
}

int ah_yamux_reset (ah_yamux_t *self, uint32_t id)
{
    if (!self || self->failed || !s_find (self, id))
        return -1;
    s_remove (self, id);
    s_enter (self);
    if (s_send (self, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_RST, id, 0))
        s_closed (self, id, true);
    s_leave (self);
    return 0;
}

int ah_yamux_ping (ah_yamux_t *self, uint32_t opaque)
{
    if (!self || self->failed)
        return -1;
    s_enter (self);
    s_send (self, AH_YAMUX_PING, AH_YAMUX_SYN, 0, opaque);
    s_leave (self);
    return 0;
}

void ah_yamux_goaway (ah_yamux_t *self, uint32_t code)
{
    if (!self || self->failed || self->local_goaway)
        return;
    self->local_goaway = true;
    s_enter (self);
    s_send (self, AH_YAMUX_GO_AWAY, 0, 0, code);
    s_leave (self);
}

uint32_t ah_yamux_window (const ah_yamux_t *self, uint32_t id)
{
    s_stream_t *s = self ? s_find ((ah_yamux_t *) self, id) : NULL;
    return s ? s->window : 0;
}

uint32_t ah_yamux_send_window (const ah_yamux_t *self, uint32_t id)
{
    const s_stream_t *s = self? s_find (self, id): NULL;
    return s? s->send_window: 0;
}

size_t ah_yamux_stream_count (const ah_yamux_t *self)
{
    return self? self->nstreams: 0;
}
