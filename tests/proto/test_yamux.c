/*  tests/proto/test_yamux.c: the yamux session, two sessions back to back
    in memory, plus raw frames for the misbehaving-peer cases.          */
#include "tests/common/check.h"
#include "tests/proto/peer.h"

#include <unistd.h>

//  Does the byte stream hold a frame with this header (any payload after)?
static bool s_has_frame (const bytes_t *b, uint8_t type, uint16_t flags, uint32_t id, uint32_t length)
{
    size_t at = 0;
    while (at + AH_YAMUX_HEADER_SIZE <= b->len) {
        ah_yamux_header_t h;
        if (ah_yamux_header_decode (b->data + at, &h) < 0)
            return false;
        if (h.type == type && h.flags == flags && h.stream_id == id && h.length == length)
            return true;
        at += AH_YAMUX_HEADER_SIZE + (h.type == AH_YAMUX_DATA? h.length: 0);
    }
    return false;
}

static void test_header_codec (void)
{
    ah_yamux_header_t h = { 0, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN | AH_YAMUX_FIN, 0x01020304, 0xa0b0c0d0 };
    uint8_t buf [12];
    ah_yamux_header_encode (&h, buf);
    const uint8_t want [12] = { 0, 1, 0, 5, 1, 2, 3, 4, 0xa0, 0xb0, 0xc0, 0xd0 };
    CHECK (memcmp (buf, want, 12) == 0);
    ah_yamux_header_t d;
    CHECK (ah_yamux_header_decode (buf, &d) == 0);
    CHECK (d.type == 1 && d.flags == 5 && d.stream_id == 0x01020304 && d.length == 0xa0b0c0d0);
    for (int type = 0; type < 256; type++) {
        buf [1] = (uint8_t) type;
        CHECK ((ah_yamux_header_decode (buf, &d) == 0) == (type <= 3));
    }
    buf [1] = 0;
    buf [0] = 1;
    CHECK (ah_yamux_header_decode (buf, &d) == -1);
}

static void test_open_accept (void)
{
    peer_t *c = peer_new (true), *s = peer_new (false);
    uint32_t id1 = 0, id2 = 0, id3 = 0;
    CHECK (ah_yamux_open (c->y, &id1) == 0);
    CHECK (id1 == 1);
    //  Opening sends a window update with SYN, delta 0: exactly 12 bytes
    const uint8_t syn [12] = { 0, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0 };
    CHECK (c->out.len == 12 && memcmp (c->out.data, syn, 12) == 0);
    //  Data may follow before the ACK
    CHECK (ah_yamux_write (c->y, id1, (const uint8_t *) "hello", 5) == 5);
    CHECK (ah_yamux_open (c->y, &id3) == 0);
    CHECK (id3 == 3);
    CHECK (ah_yamux_stream_count (c->y) == 2);
    CHECK (peer_pump (c, s) == 0);
    CHECK (s->opened [1] == 1 && s->opened [3] == 1);
    CHECK (s->rx [1].len == 5 && memcmp (s->rx [1].data, "hello", 5) == 0);
    CHECK (ah_yamux_stream_count (s->y) == 2);

    //  The server opens even ids
    CHECK (ah_yamux_open (s->y, &id2) == 0);
    CHECK (id2 == 2);
    CHECK (ah_yamux_write (s->y, id2, (const uint8_t *) "x", 1) == 1);
    CHECK (ah_yamux_write (s->y, id1, (const uint8_t *) "reply", 5) == 5);
    CHECK (peer_pump (c, s) == 0);
    CHECK (c->opened [2] == 1);
    CHECK (c->rx [2].len == 1 && c->rx [1].len == 5);
    CHECK (memcmp (c->rx [1].data, "reply", 5) == 0);
    CHECK (ah_yamux_stream_count (c->y) == 3);
    //  Unknown stream
    CHECK (ah_yamux_write (c->y, 99, (const uint8_t *) "x", 1) == -1);
    CHECK (ah_yamux_send_window (c->y, 99) == 0);
    CHECK (ah_yamux_close (c->y, 99) == -1);
    CHECK (ah_yamux_reset (c->y, 99) == -1);
    peer_destroy (&c);
    peer_destroy (&s);
}

static void test_accept_wire (void)
{
    //  Accepting answers a SYN with a window update carrying ACK
    peer_t *s = peer_new (false);
    bytes_t in = { 0 };
    raw_frame (&in, AH_YAMUX_DATA, AH_YAMUX_SYN, 7, 3, "abc", 3);
    CHECK (peer_feed (s, in.data, in.len) == 0);
    CHECK (s->opened [7] == 1);
    CHECK (s->rx [7].len == 3);
    const uint8_t ack [12] = { 0, 1, 0, 2, 0, 0, 0, 7, 0, 0, 0, 0 };
    CHECK (s->out.len == 12 && memcmp (s->out.data, ack, 12) == 0);
    bytes_free (&in);
    peer_destroy (&s);
}

static void test_half_close (void)
{
    peer_t *c = peer_new (true), *s = peer_new (false);
    uint32_t id;
    CHECK (ah_yamux_open (c->y, &id) == 0);
    CHECK (ah_yamux_write (c->y, id, (const uint8_t *) "req", 3) == 3);
    CHECK (ah_yamux_close (c->y, id) == 0);
    CHECK (ah_yamux_close (c->y, id) == -1);          //  twice
    CHECK (ah_yamux_write (c->y, id, (const uint8_t *) "x", 1) == -1);
    CHECK (peer_pump (c, s) == 0);
    CHECK (s->eof [id] == 1);
    CHECK (s->closed [id] == 0);
    //  The other direction still works after the peer's FIN
    CHECK (ah_yamux_write (s->y, id, (const uint8_t *) "answer", 6) == 6);
    CHECK (peer_pump (c, s) == 0);
    CHECK (c->rx [id].len == 6);
    CHECK (c->closed [id] == 0);
    CHECK (ah_yamux_close (s->y, id) == 0);
    CHECK (s->closed [id] == 1 && s->reset [id] == 0);  //  both sides closed
    CHECK (peer_pump (c, s) == 0);
    CHECK (c->eof [id] == 1);
    CHECK (c->closed [id] == 1 && c->reset [id] == 0);
    CHECK (ah_yamux_stream_count (c->y) == 0);
    CHECK (ah_yamux_stream_count (s->y) == 0);

    //  A data frame carrying FIN: the data first, then eof
    peer_t *t = peer_new (false);
    bytes_t in = { 0 };
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 1, 0, NULL, 0);
    raw_frame (&in, AH_YAMUX_DATA, AH_YAMUX_FIN, 1, 4, "last", 4);
    CHECK (peer_feed (t, in.data, in.len) == 0);
    CHECK (t->rx [1].len == 4 && t->eof [1] == 1);
    const char *want = "open 10\n1:6c 1:61 1:73 1:74 \neof 10\n";
    CHECK (t->log.len == strlen (want) && memcmp (t->log.data, want, t->log.len) == 0);
    bytes_free (&in);
    peer_destroy (&t);
    peer_destroy (&c);
    peer_destroy (&s);
}

static void test_reset (void)
{
    peer_t *c = peer_new (true), *s = peer_new (false);
    uint32_t id;
    CHECK (ah_yamux_open (c->y, &id) == 0);
    CHECK (peer_pump (c, s) == 0);
    CHECK (s->opened [id] == 1);
    CHECK (ah_yamux_reset (c->y, id) == 0);
    CHECK (c->closed [id] == 1 && c->reset [id] == 1);
    CHECK (ah_yamux_write (c->y, id, (const uint8_t *) "x", 1) == -1);
    CHECK (s_has_frame (&c->out, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_RST, id, 0));
    CHECK (peer_pump (c, s) == 0);
    CHECK (s->closed [id] == 1 && s->reset [id] == 1);
    CHECK (ah_yamux_write (s->y, id, (const uint8_t *) "x", 1) == -1);
    CHECK (ah_yamux_stream_count (s->y) == 0);

    //  Data in flight for a stream we reset is dropped, not an error
    CHECK (ah_yamux_open (c->y, &id) == 0);
    CHECK (peer_pump (c, s) == 0);
    CHECK (ah_yamux_write (c->y, id, (const uint8_t *) "late data", 9) == 9);
    CHECK (ah_yamux_reset (s->y, id) == 0);
    CHECK (peer_pump (c, s) == 0);
    CHECK (s->rx [id].len == 0);
    CHECK (c->reset [id] == 1);
    //  Frames for a stream never opened are dropped too
    bytes_t in = { 0 };
    raw_frame (&in, AH_YAMUX_DATA, 0, 41, 2, "zz", 2);
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_ACK, 43, 100, NULL, 0);
    CHECK (peer_feed (s, in.data, in.len) == 0);
    //  Reset from inside on_data: the rest of the payload is skipped
    s->reset_on_data = true;
    CHECK (ah_yamux_open (c->y, &id) == 0);
    CHECK (ah_yamux_write (c->y, id, (const uint8_t *) "0123456789", 10) == 10);
    bytes_t chunk = c->out;
    memset (&c->out, 0, sizeof c->out);
    CHECK (peer_feed (s, chunk.data, chunk.len - 5) == 0);
    CHECK (peer_feed (s, chunk.data + chunk.len - 5, 5) == 0);
    CHECK (s->rx [id].len == 5);
    CHECK (s->reset [id] == 1);
    bytes_free (&chunk);
    bytes_free (&in);
    peer_destroy (&c);
    peer_destroy (&s);
}

static void test_flow_control (void)
{
    peer_t *c = peer_new (true), *s = peer_new (false);
    s->consume = false;
    size_t big = 3 * AH_YAMUX_INITIAL_WINDOW + 1000;
    uint8_t *payload = malloc (big);
    for (size_t i = 0; i < big; i++)
        payload [i] = (uint8_t) (i * 7 + 3);
    uint32_t id;
    CHECK (ah_yamux_open (c->y, &id) == 0);
    CHECK (ah_yamux_send_window (c->y, id) == AH_YAMUX_INITIAL_WINDOW);
    ssize_t n = ah_yamux_write (c->y, id, payload, big);
    CHECK (n == AH_YAMUX_INITIAL_WINDOW);           //  short: the window is full
    CHECK (ah_yamux_send_window (c->y, id) == 0);
    CHECK (ah_yamux_write (c->y, id, payload, big) == 0);      //  blocked
    CHECK (peer_pump (c, s) == 0);
    CHECK (s->rx [id].len == AH_YAMUX_INITIAL_WINDOW);
    CHECK (c->writable [id] == 0);

    //  Less than half the window consumed: no window update yet
    ah_yamux_consumed (s->y, id, AH_YAMUX_INITIAL_WINDOW / 2 - 1);
    CHECK (s->out.len == 0);
    ah_yamux_consumed (s->y, id, 1);
    CHECK (s_has_frame (&s->out, AH_YAMUX_WINDOW_UPDATE, 0, id, AH_YAMUX_INITIAL_WINDOW / 2));

    //  The blocked writer resumes from on_writable (re-entrant write)
    c->pending = payload + n;
    c->pending_len = big - (size_t) n;
    c->pending_id = id;
    CHECK (peer_pump (c, s) == 0);
    CHECK (c->writable [id] == 1);
    CHECK (c->pending_len == big - (size_t) n - AH_YAMUX_INITIAL_WINDOW / 2);
    CHECK (s->rx [id].len == AH_YAMUX_INITIAL_WINDOW * 3 / 2);

    //  Consume everything as it comes: the rest flows through
    s->consume = true;
    ah_yamux_consumed (s->y, id, AH_YAMUX_INITIAL_WINDOW);
    CHECK (peer_pump (c, s) == 0);
    CHECK (c->pending_len == 0);
    CHECK (s->rx [id].len == big);
    CHECK (s->rx [id].len == big && memcmp (s->rx [id].data, payload, big) == 0);

    //  Consuming more than arrived is capped, never a bigger window than
    //  the receiver's (which may have grown: this test consumes fast)
    ah_yamux_consumed (s->y, id, 10u << 20);
    CHECK (peer_pump (c, s) == 0);
    CHECK (ah_yamux_window (s->y, id) >= AH_YAMUX_INITIAL_WINDOW);
    CHECK (ah_yamux_window (s->y, id) <= AH_YAMUX_MAX_WINDOW);
    CHECK (ah_yamux_send_window (c->y, id) <= ah_yamux_window (s->y, id));
    free (payload);
    peer_destroy (&c);
    peer_destroy (&s);
}

//  Move `total` bytes from c to s on stream id, s consuming each piece as
//  it arrives after `pause_ms` on s's clock; returns the window s ends with.
static uint32_t s_stream_through (peer_t *c, peer_t *s, uint32_t id, size_t total, int pause_ms)
{
    static uint8_t block [64u << 10];
    size_t sent = 0, consumed = 0;
    for (int rounds = 0; consumed < total && rounds < 100000; rounds++) {
        while (sent < total) {
            size_t k = total - sent < sizeof block ? total - sent : sizeof block;
            ssize_t n = ah_yamux_write (c->y, id, block, k);
            if (n <= 0)
                break;
            sent += (size_t) n;
        }
        CHECK (peer_pump (c, s) == 0);
        size_t ready = s->rx [id].len;
        if (ready) {
            s->clock_ms += pause_ms;
            ah_yamux_consumed (s->y, id, ready);
            consumed += ready;
            s->rx [id].len = 0;     //  used: keep the buffer small
        }
        CHECK (peer_pump (c, s) == 0);
        //  Never more in flight or unconsumed than the receiver's window
        CHECK (sent - consumed <= ah_yamux_window (s->y, id));
    }
    CHECK (consumed == total);
    return ah_yamux_window (s->y, id);
}

static void test_window_growth (void)
{
    //  A reader that keeps up: the window, not the reader, limits the
    //  stream, so the window doubles up to the most it may be
    peer_t *c = peer_new (true), *s = peer_new (false);
    s->consume = false;
    s->quiet = true;
    uint32_t id;
    CHECK (ah_yamux_open (c->y, &id) == 0);
    CHECK (ah_yamux_window (s->y, id) == 0);        //  not seen yet
    CHECK (peer_pump (c, s) == 0);
    CHECK (ah_yamux_window (s->y, id) == AH_YAMUX_INITIAL_WINDOW);
    uint32_t w = s_stream_through (c, s, id, 64u << 20, 0);
    CHECK (w == AH_YAMUX_MAX_WINDOW);
    CHECK (ah_yamux_send_window (c->y, id) <= AH_YAMUX_MAX_WINDOW);
    peer_destroy (&c);
    peer_destroy (&s);

    //  A slow reader (30 ms per piece, over the 20 ms mark): it stays
    c = peer_new (true);
    s = peer_new (false);
    s->consume = false;
    s->quiet = true;
    CHECK (ah_yamux_open (c->y, &id) == 0);
    CHECK (peer_pump (c, s) == 0);
    w = s_stream_through (c, s, id, 4 * AH_YAMUX_INITIAL_WINDOW, 30);
    CHECK (w == AH_YAMUX_INITIAL_WINDOW);
    peer_destroy (&c);
    peer_destroy (&s);
}

static void test_window_exceeded (void)
{
    //  A peer that ignores our window: protocol error, go away 1
    peer_t *s = peer_new (false);
    s->consume = false;
    bytes_t in = { 0 };
    uint8_t *junk = calloc (1, AH_YAMUX_INITIAL_WINDOW);
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 1, 0, NULL, 0);
    raw_frame (&in, AH_YAMUX_DATA, 0, 1, AH_YAMUX_INITIAL_WINDOW, junk, AH_YAMUX_INITIAL_WINDOW);
    CHECK (peer_feed (s, in.data, in.len) == 0);
    in.len = 0;
    raw_frame (&in, AH_YAMUX_DATA, 0, 1, 1, "x", 1);
    CHECK (peer_feed (s, in.data, in.len) == -1);
    CHECK (s->err && strstr (s->err, "window"));
    CHECK (s_has_frame (&s->out, AH_YAMUX_GO_AWAY, 0, 0, AH_YAMUX_GOAWAY_PROTOCOL));
    CHECK (s->rx [1].len == AH_YAMUX_INITIAL_WINDOW);
    //  The session is dead from now on
    CHECK (peer_feed (s, in.data, 0) == -1);
    CHECK (ah_yamux_write (s->y, 1, (const uint8_t *) "x", 1) == -1);
    uint32_t id;
    CHECK (ah_yamux_open (s->y, &id) == -1);

    //  The window counts from the header: one frame over the window fails at once
    peer_t *t = peer_new (false);
    in.len = 0;
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 1, 0, NULL, 0);
    raw_frame (&in, AH_YAMUX_DATA, 0, 1, AH_YAMUX_INITIAL_WINDOW + 1, NULL, 0);
    CHECK (peer_feed (t, in.data, in.len) == -1);
    CHECK (t->rx [1].len == 0);
    free (junk);
    bytes_free (&in);
    peer_destroy (&s);
    peer_destroy (&t);
}

static void test_ping (void)
{
    peer_t *c = peer_new (true), *s = peer_new (false);
    CHECK (ah_yamux_ping (c->y, 0xdeadbeef) == 0);
    const uint8_t ping [12] = { 0, 2, 0, 1, 0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef };
    CHECK (c->out.len == 12 && memcmp (c->out.data, ping, 12) == 0);
    CHECK (peer_pump (c, s) == 0);
    CHECK (c->npongs == 1 && c->pongs [0] == 0xdeadbeef);
    CHECK (s->npongs == 0);
    CHECK (s->pings == 1 && c->pings == 0);     //  on_ping: the peer pinged (the tunnel's liveness)
    CHECK (ah_yamux_ping (s->y, 7) == 0);
    CHECK (peer_pump (c, s) == 0);
    CHECK (s->npongs == 1 && s->pongs [0] == 7);
    CHECK (c->pings == 1 && s->pings == 1);
    //  The answer carries ACK and the same value
    peer_t *t = peer_new (false);
    bytes_t in = { 0 };
    raw_frame (&in, AH_YAMUX_PING, AH_YAMUX_SYN, 0, 42, NULL, 0);
    CHECK (peer_feed (t, in.data, in.len) == 0);
    CHECK (s_has_frame (&t->out, AH_YAMUX_PING, AH_YAMUX_ACK, 0, 42));
    bytes_free (&in);
    peer_destroy (&t);
    peer_destroy (&c);
    peer_destroy (&s);
}

static void test_goaway (void)
{
    peer_t *c = peer_new (true), *s = peer_new (false);
    uint32_t id, id2;
    CHECK (ah_yamux_open (c->y, &id) == 0);
    CHECK (peer_pump (c, s) == 0);
    ah_yamux_goaway (s->y, AH_YAMUX_GOAWAY_NORMAL);
    CHECK (s_has_frame (&s->out, AH_YAMUX_GO_AWAY, 0, 0, 0));
    CHECK (peer_pump (c, s) == 0);
    CHECK (c->goaways == 1 && c->goaway_code == 0);
    //  No new streams after a go away, either side; running ones carry on
    CHECK (ah_yamux_open (c->y, &id2) == -1);
    CHECK (ah_yamux_open (s->y, &id2) == -1);
    CHECK (ah_yamux_write (c->y, id, (const uint8_t *) "still", 5) == 5);
    CHECK (peer_pump (c, s) == 0);
    CHECK (s->rx [id].len == 5);
    //  A SYN after our go away is refused with RST
    bytes_t in = { 0 };
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 5, 0, NULL, 0);
    s->out.len = 0;
    CHECK (peer_feed (s, in.data, in.len) == 0);
    CHECK (s->opened [5] == 0);
    CHECK (s_has_frame (&s->out, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_RST, 5, 0));

    //  Destroying the session from on_goaway is safe (checked under ASan)
    peer_t *t = peer_new (true);
    t->destroy_on_goaway = true;
    in.len = 0;
    raw_frame (&in, AH_YAMUX_GO_AWAY, 0, 0, AH_YAMUX_GOAWAY_INTERNAL, NULL, 0);
    raw_frame (&in, AH_YAMUX_PING, AH_YAMUX_SYN, 0, 1, NULL, 0);
    CHECK (peer_feed (t, in.data, in.len) == 0);
    CHECK (t->y == NULL && t->goaway_code == AH_YAMUX_GOAWAY_INTERNAL);
    CHECK (t->out.len == 0);        //  nothing after the destroy
    bytes_free (&in);
    peer_destroy (&t);
    peer_destroy (&c);
    peer_destroy (&s);
}

//  One recorded conversation fed at every split: same events each time.
static void test_split_everywhere (void)
{
    bytes_t in = { 0 };
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 1, 0, NULL, 0);
    raw_frame (&in, AH_YAMUX_DATA, 0, 1, 5, "hello", 5);
    raw_frame (&in, AH_YAMUX_PING, AH_YAMUX_SYN, 0, 9, NULL, 0);
    raw_frame (&in, AH_YAMUX_DATA, AH_YAMUX_SYN, 3, 3, "abc", 3);
    raw_frame (&in, AH_YAMUX_PING, AH_YAMUX_ACK, 0, 77, NULL, 0);
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, 0, 1, 1000, NULL, 0);
    raw_frame (&in, AH_YAMUX_DATA, AH_YAMUX_FIN, 1, 2, "!!", 2);
    raw_frame (&in, AH_YAMUX_DATA, 0, 3, 0, NULL, 0);
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_RST, 3, 0, NULL, 0);
    raw_frame (&in, AH_YAMUX_GO_AWAY, 0, 0, 0, NULL, 0);

    peer_t *ref = peer_new (false);
    CHECK (peer_feed (ref, in.data, in.len) == 0);
    CHECK (ref->rx [1].len == 7 && ref->eof [1] == 1 && ref->reset [3] == 1);
    CHECK (ref->npongs == 1 && ref->goaways == 1);

    int mismatches = 0;
    for (size_t a = 0; a <= in.len; a++) {
        for (size_t b = a; b <= in.len; b++) {
            peer_t *p = peer_new (false);
            int rc = peer_feed (p, in.data, a);
            rc |= peer_feed (p, in.data + a, b - a);
            rc |= peer_feed (p, in.data + b, in.len - b);
            if (rc != 0 || p->log.len != ref->log.len
            ||  memcmp (p->log.data, ref->log.data, ref->log.len)
            ||  p->out.len != ref->out.len
            ||  memcmp (p->out.data, ref->out.data, ref->out.len))
                mismatches++;
            peer_destroy (&p);
        }
    }
    CHECK (mismatches == 0);
    //  And one byte at a time
    peer_t *p = peer_new (false);
    int rc = 0;
    for (size_t i = 0; i < in.len; i++)
        rc |= peer_feed (p, in.data + i, 1);
    CHECK (rc == 0);
    CHECK (p->log.len == ref->log.len && memcmp (p->log.data, ref->log.data, ref->log.len) == 0);
    peer_destroy (&p);
    peer_destroy (&ref);
    bytes_free (&in);
}

//  Each malformed input: -1, a reason, go away 1 on the wire.
static void s_expect_error (bytes_t *in, bool is_client, const char *why)
{
    peer_t *p = peer_new (is_client);
    int rc = peer_feed (p, in->data, in->len);
    CHECK (rc == -1);
    if (rc != -1 || !p->err || !strstr (p->err, why))
        fprintf (stderr, "  expected error '%s', got '%s'\n", why, p->err? p->err: "(none)");
    CHECK (s_has_frame (&p->out, AH_YAMUX_GO_AWAY, 0, 0, AH_YAMUX_GOAWAY_PROTOCOL));
    peer_destroy (&p);
    in->len = 0;
}

static void test_malformed (void)
{
    bytes_t in = { 0 };
    uint8_t bad [12] = { 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0 };
    bytes_add (&in, bad, 12);
    s_expect_error (&in, false, "version");
    bad [0] = 0;
    bad [1] = 4;
    bytes_add (&in, bad, 12);
    s_expect_error (&in, false, "type");
    raw_frame (&in, AH_YAMUX_DATA, 0, 0, 1, "x", 1);
    s_expect_error (&in, false, "stream 0");
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 0, 0, NULL, 0);
    s_expect_error (&in, false, "stream 0");
    raw_frame (&in, AH_YAMUX_PING, AH_YAMUX_SYN, 5, 0, NULL, 0);
    s_expect_error (&in, false, "ping");
    raw_frame (&in, AH_YAMUX_GO_AWAY, 0, 5, 0, NULL, 0);
    s_expect_error (&in, false, "go away");
    //  Parity: a server accepts odd ids only, a client even ids only
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 2, 0, NULL, 0);
    s_expect_error (&in, false, "parity");
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 1, 0, NULL, 0);
    s_expect_error (&in, true, "parity");
    //  A reused id: the same live one twice (SYN on data too)
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 1, 0, NULL, 0);
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 1, 0, NULL, 0);
    s_expect_error (&in, false, "reuses");
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 5, 0, NULL, 0);
    raw_frame (&in, AH_YAMUX_DATA, AH_YAMUX_SYN, 5, 1, "x", 1);
    s_expect_error (&in, false, "reuses");
    //  A second FIN, data after FIN
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 1, 0, NULL, 0);
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_FIN, 1, 0, NULL, 0);
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_FIN, 1, 0, NULL, 0);
    s_expect_error (&in, false, "FIN");
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 1, 0, NULL, 0);
    raw_frame (&in, AH_YAMUX_DATA, AH_YAMUX_FIN, 1, 1, "a", 1);
    raw_frame (&in, AH_YAMUX_DATA, 0, 1, 1, "b", 1);
    s_expect_error (&in, false, "after FIN");
    //  The error stops the input at once: later frames are not acted on
    peer_t *p = peer_new (false);
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 2, 0, NULL, 0);
    raw_frame (&in, AH_YAMUX_PING, AH_YAMUX_SYN, 0, 1, NULL, 0);
    CHECK (peer_feed (p, in.data, in.len) == -1);
    CHECK (!s_has_frame (&p->out, AH_YAMUX_PING, AH_YAMUX_ACK, 0, 1));
    CHECK (ah_yamux_ping (p->y, 1) == -1);
    peer_destroy (&p);
    //  SYNs out of id order are fine: Go opens from several goroutines
    p = peer_new (false);
    in.len = 0;
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 5, 0, NULL, 0);
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 3, 0, NULL, 0);
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 1, 0, NULL, 0);
    CHECK (peer_feed (p, in.data, in.len) == 0);
    CHECK (p->opened [1] && p->opened [3] && p->opened [5]);
    peer_destroy (&p);
    //  Unknown flag bits are ignored (the spec defines four)
    p = peer_new (false);
    in.len = 0;
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN | 0x100, 1, 0, NULL, 0);
    CHECK (peer_feed (p, in.data, in.len) == 0);
    CHECK (p->opened [1] == 1);
    peer_destroy (&p);
    bytes_free (&in);
}

static void test_stream_cap (void)
{
    peer_t *c = peer_new (true), *s = peer_new (false);
    uint32_t id = 0;
    int opened = 0;
    while (ah_yamux_open (c->y, &id) == 0)
        opened++;
    CHECK (opened == 1024);
    CHECK (ah_yamux_stream_count (c->y) == 1024);
    CHECK (peer_pump (c, s) == 0);
    CHECK (ah_yamux_stream_count (s->y) == 1024);
    //  A SYN beyond the cap is refused with RST; the session carries on
    bytes_t in = { 0 };
    raw_frame (&in, AH_YAMUX_DATA, AH_YAMUX_SYN, 4001, 3, "abc", 3);
    raw_frame (&in, AH_YAMUX_PING, AH_YAMUX_SYN, 0, 5, NULL, 0);
    s->out.len = 0;
    CHECK (peer_feed (s, in.data, in.len) == 0);
    CHECK (s->opened [4001] == 0);
    CHECK (s_has_frame (&s->out, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_RST, 4001, 0));
    CHECK (s_has_frame (&s->out, AH_YAMUX_PING, AH_YAMUX_ACK, 0, 5));
    CHECK (ah_yamux_stream_count (s->y) == 1024);
    s->out.len = 0;
    //  Closing one makes room again, on both sides
    CHECK (ah_yamux_reset (c->y, 1) == 0);
    CHECK (ah_yamux_open (c->y, &id) == 0);
    CHECK (id == 2049);
    c->out.len = 0;
    CHECK (peer_pump (c, s) == 0);
    CHECK (ah_yamux_stream_count (s->y) == 1024);    //  c's RST and SYN were dropped above
    s->out.len = 0;
    in.len = 0;
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_RST, 3, 0, NULL, 0);
    raw_frame (&in, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_SYN, 4003, 0, NULL, 0);
    CHECK (peer_feed (s, in.data, in.len) == 0);
    CHECK (s->opened [4003] == 1);
    CHECK (s_has_frame (&s->out, AH_YAMUX_WINDOW_UPDATE, AH_YAMUX_ACK, 4003, 0));
    bytes_free (&in);
    peer_destroy (&c);
    peer_destroy (&s);
}

static void test_reentrant_input (void)
{
    peer_t *c = peer_new (true), *s = peer_new (false);
    s->reenter_input = true;
    s->reenter_rc = 0;
    uint32_t id;
    CHECK (ah_yamux_open (c->y, &id) == 0);
    CHECK (ah_yamux_write (c->y, id, (const uint8_t *) "x", 1) == 1);
    CHECK (peer_pump (c, s) == 0);
    CHECK (s->reenter_rc == -1);
    CHECK (s->rx [id].len == 1);
    //  Echo from inside on_data and close from inside on_eof
    s->reenter_input = false;
    s->echo = true;
    CHECK (ah_yamux_write (c->y, id, (const uint8_t *) "ping", 4) == 4);
    CHECK (ah_yamux_close (c->y, id) == 0);
    CHECK (peer_pump (c, s) == 0);
    CHECK (c->rx [id].len == 4 && memcmp (c->rx [id].data, "ping", 4) == 0);
    CHECK (c->closed [id] == 1 && s->closed [id] == 1);
    CHECK (ah_yamux_stream_count (c->y) == 0 && ah_yamux_stream_count (s->y) == 0);
    peer_destroy (&c);
    peer_destroy (&s);
}

static void test_null_safety (void)
{
    ah_yamux_t *y = NULL;
    ah_yamux_destroy (&y);
    ah_yamux_destroy (NULL);
    const char *err = NULL;
    CHECK (ah_yamux_input (NULL, (const uint8_t *) "x", 1, &err) == -1);
    CHECK (ah_yamux_stream_count (NULL) == 0);
    //  A session without callbacks does not crash
    y = ah_yamux_new (false, NULL, NULL);
    bytes_t in = { 0 };
    raw_frame (&in, AH_YAMUX_DATA, AH_YAMUX_SYN, 1, 2, "hi", 2);
    raw_frame (&in, AH_YAMUX_PING, AH_YAMUX_SYN, 0, 1, NULL, 0);
    CHECK (ah_yamux_input (y, in.data, in.len, NULL) == 0);
    CHECK (ah_yamux_stream_count (y) == 1);
    ah_yamux_destroy (&y);
    CHECK (y == NULL);
    bytes_free (&in);
}

int main (void)
{
    test_header_codec ();
    test_open_accept ();
    test_accept_wire ();
    test_half_close ();
    test_reset ();
    test_flow_control ();
    test_window_growth ();
    test_window_exceeded ();
    test_ping ();
    test_goaway ();
    test_split_everywhere ();
    test_malformed ();
    test_stream_cap ();
    test_reentrant_input ();
    test_null_safety ();
    return CHECK_DONE ();
}
