/*  tests/proto/peer.h: a yamux session with an in-memory transport and an
    event log, for the unit tests (and the two-session fuzzer). Two peers
    are wired back to back by peer_pump, which moves each side's output
    into the other's input until both are quiet.                         */
#ifndef AH_TEST_PEER_H
#define AH_TEST_PEER_H

#include "proto/yamux.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEER_MAX_ID 4096

typedef struct {
    uint8_t *data;
    size_t   len, cap;
} bytes_t;

static inline void bytes_add (bytes_t *b, const void *data, size_t size)
{
    if (b->len + size > b->cap) {
        size_t cap = b->cap? b->cap: 256;
        while (cap < b->len + size)
            cap *= 2;
        uint8_t *p = realloc (b->data, cap);
        if (!p) {
            fprintf (stderr, "out of memory\n");
            abort ();
        }
        b->data = p;
        b->cap = cap;
    }
    if (size)
        memcpy (b->data + b->len, data, size);
    b->len += size;
}

static inline void bytes_free (bytes_t *b)
{
    free (b->data);
    memset (b, 0, sizeof *b);
}

typedef struct peer_t {
    ah_yamux_t *y;
    bytes_t  out;                   //  produced, not yet delivered
    bytes_t *rx;                    //  received data per stream id
    int      opened [PEER_MAX_ID];
    int      eof [PEER_MAX_ID];
    int      closed [PEER_MAX_ID];
    int      reset [PEER_MAX_ID];
    int      writable [PEER_MAX_ID];
    uint32_t pongs [16];
    int      npongs;
    int      pings;             //  pings the other side sent us (on_ping)
    int      goaways;
    uint32_t goaway_code;
    const char *err;                //  last input error
    bytes_t  log;                   //  every event, as text (split tests)
    //  Behaviour switches
    bool     consume;               //  call ah_yamux_consumed in on_data
    bool     echo;                  //  write received data back (and close on eof)
    bool     reset_on_data;         //  reset a stream when data arrives
    bool     destroy_on_goaway;     //  destroy the session from on_goaway
    bool     reenter_input;         //  call ah_yamux_input from on_data
    bool     quiet;                 //  log no data bytes (a bulk transfer's test)
    int      reenter_rc;
    //  Data to send on on_writable (flow control test)
    const uint8_t *pending;
    size_t   pending_len;
    uint32_t pending_id;
    int64_t  clock_ms;              //  the yamux's clock (p_now_ms); moved by tests
} peer_t;

static inline void peer_logf (peer_t *p, const char *fmt, unsigned long a, unsigned long b)
{
    char line [96];
    int n = snprintf (line, sizeof line, fmt, a, b);
    bytes_add (&p->log, line, (size_t) n);
}

static inline void p_output (void *ud, const uint8_t *data, size_t size)
{
    peer_t *p = ud;
    bytes_add (&p->out, data, size);
}

static inline void p_open (void *ud, uint32_t id)
{
    peer_t *p = ud;
    if (id < PEER_MAX_ID)
        p->opened [id]++;
    peer_logf (p, "open %lu%lu\n", id, 0);
}

static inline void p_data (void *ud, uint32_t id, const uint8_t *data, size_t size)
{
    peer_t *p = ud;
    if (id < PEER_MAX_ID)
        bytes_add (&p->rx [id], data, size);
    //  The log records content, not the split: adjacent pieces merge
    for (size_t i = 0; i < size && !p->quiet; i++)
        peer_logf (p, "%lu:%02lx ", id, data [i]);
    if (p->reenter_input) {
        const char *err;
        p->reenter_rc = ah_yamux_input (p->y, data, size, &err);
    }
    if (p->consume)
        ah_yamux_consumed (p->y, id, size);
    if (p->echo) {
        ssize_t n = ah_yamux_write (p->y, id, data, size);
        if (n != (ssize_t) size)
            fprintf (stderr, "echo write short: %zd of %zu\n", n, size);
    }
    if (p->reset_on_data)
        ah_yamux_reset (p->y, id);
}

static inline void p_eof (void *ud, uint32_t id)
{
    peer_t *p = ud;
    if (id < PEER_MAX_ID)
        p->eof [id]++;
    peer_logf (p, "\neof %lu%lu\n", id, 0);
    if (p->echo)
        ah_yamux_close (p->y, id);
}

static inline void p_closed (void *ud, uint32_t id, bool reset)
{
    peer_t *p = ud;
    if (id < PEER_MAX_ID) {
        p->closed [id]++;
        if (reset)
            p->reset [id]++;
    }
    peer_logf (p, "\nclosed %lu %lu\n", id, reset);
}

static inline void p_writable (void *ud, uint32_t id)
{
    peer_t *p = ud;
    if (id < PEER_MAX_ID)
        p->writable [id]++;
    if (p->pending_len && id == p->pending_id) {
        ssize_t n = ah_yamux_write (p->y, id, p->pending, p->pending_len);
        if (n > 0) {
            p->pending += n;
            p->pending_len -= (size_t) n;
        }
    }
}

static inline void p_pong (void *ud, uint32_t opaque)
{
    peer_t *p = ud;
    if (p->npongs < 16)
        p->pongs [p->npongs++] = opaque;
    peer_logf (p, "\npong %lu%lu\n", opaque, 0);
}

static inline void p_ping (void *ud, uint32_t opaque)
{
    ((peer_t *) ud)->pings++;
}

static inline void p_goaway (void *ud, uint32_t code)
{
    peer_t *p = ud;
    p->goaways++;
    p->goaway_code = code;
    peer_logf (p, "\ngoaway %lu%lu\n", code, 0);
    if (p->destroy_on_goaway)
        ah_yamux_destroy (&p->y);
}

//  The peer's clock for the window's auto-tuning: the test moves it
//  (peer_t.clock_ms); 0 until a test sets it, and it never moves alone.
static inline int64_t p_now_ms (void *ud)
{
    return ((peer_t *) ud)->clock_ms;
}

static const ah_yamux_callbacks_t peer_callbacks = {
    p_output, p_open, p_data, p_eof, p_closed, p_writable, p_pong, p_goaway, p_ping, p_now_ms, NULL
};

static inline peer_t *peer_new (bool is_client)
{
    peer_t *p = calloc (1, sizeof *p);
    p->rx = calloc (PEER_MAX_ID, sizeof (bytes_t));
    p->clock_ms = 1000;             //  not 0: yamux reads 0 as "never"
    p->y = ah_yamux_new (is_client, &peer_callbacks, p);
    p->consume = true;
    return p;
}

static inline void peer_destroy (peer_t **p_p)
{
    peer_t *p = *p_p;
    if (!p)
        return;
    ah_yamux_destroy (&p->y);
    for (int i = 0; i < PEER_MAX_ID; i++)
        bytes_free (&p->rx [i]);
    free (p->rx);
    bytes_free (&p->out);
    bytes_free (&p->log);
    free (p);
    *p_p = NULL;
}

//  Feed bytes to a peer, in one call. Returns ah_yamux_input's result.
static inline int peer_feed (peer_t *p, const uint8_t *data, size_t size)
{
    if (!p->y)
        return -1;
    return ah_yamux_input (p->y, data, size, &p->err);
}

//  Move a's output into b's input and back until both are quiet.
//  Returns 0, or -1 if either side reported a protocol error.
static inline int peer_pump (peer_t *a, peer_t *b)
{
    int rc = 0;
    for (int round = 0; round < 10000 && (a->out.len || b->out.len); round++) {
        peer_t *from = a->out.len? a: b;
        peer_t *to = from == a? b: a;
        bytes_t chunk = from->out;
        memset (&from->out, 0, sizeof from->out);
        if (peer_feed (to, chunk.data, chunk.len) < 0)
            rc = -1;
        bytes_free (&chunk);
    }
    return rc;
}

//  A raw frame, for tests that play a misbehaving peer.
static inline void raw_frame (bytes_t *b, uint8_t type, uint16_t flags, uint32_t id,
                       uint32_t length, const void *payload, size_t psize)
{
    ah_yamux_header_t h = { 0, type, flags, id, length };
    uint8_t hdr [AH_YAMUX_HEADER_SIZE];
    ah_yamux_header_encode (&h, hdr);
    bytes_add (b, hdr, sizeof hdr);
    if (psize)
        bytes_add (b, payload, psize);
}

#endif
