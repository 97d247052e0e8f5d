/*  tests/fuzz/fuzz_yamux.c: libFuzzer target for proto/yamux.c.

    First byte picks the mode:
    - even: the input path. The rest is fed to one session (client or
      server by bit 1) in pieces whose sizes come from the input, with
      callbacks that call back into the session (write, consume, close,
      reset, ping) as a real user would. Checks: no crash or leak, every
      byte the session outputs parses as yamux frames, the stream cap
      holds, and a session that reported an error stays failed.
    - odd: a round trip. The rest is a program of operations on two
      sessions wired back to back (open, write, consume, close, reset,
      ping, go away, deliver part of the bytes in flight). Checks: no
      protocol error ever, and every byte delivered on a stream is the
      byte written at that offset (a prefix of what was sent).        */
#include "proto/yamux.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { fprintf (stderr, __VA_ARGS__); fputc ('\n', stderr); abort (); } while (0)

//  Checks the output byte stream frame by frame, across calls.
typedef struct {
    uint8_t  hdr [AH_YAMUX_HEADER_SIZE];
    size_t   hdr_len;
    uint32_t payload_left;
} checker_t;

static void s_check_output (checker_t *c, const uint8_t *data, size_t size)
{
    while (size > 0) {
        if (c->payload_left) {
            size_t n = size < c->payload_left? size: c->payload_left;
            c->payload_left -= (uint32_t) n;
            data += n;
            size -= n;
            continue;
        }
        size_t n = AH_YAMUX_HEADER_SIZE - c->hdr_len;
        if (n > size)
            n = size;
        memcpy (c->hdr + c->hdr_len, data, n);
        c->hdr_len += n;
        data += n;
        size -= n;
        if (c->hdr_len == AH_YAMUX_HEADER_SIZE) {
            ah_yamux_header_t h;
            c->hdr_len = 0;
            if (ah_yamux_header_decode (c->hdr, &h) < 0)
                FAIL ("session output an invalid frame header");
            if ((h.type == AH_YAMUX_PING || h.type == AH_YAMUX_GO_AWAY) && h.stream_id != 0)
                FAIL ("session output a session frame on stream %u", h.stream_id);
            if ((h.type == AH_YAMUX_DATA || h.type == AH_YAMUX_WINDOW_UPDATE) && h.stream_id == 0)
                FAIL ("session output a stream frame on stream 0");
            if (h.type == AH_YAMUX_DATA) {
                if (h.length > AH_YAMUX_INITIAL_WINDOW * 64u)
                    FAIL ("session output an oversized data frame");
                c->payload_left = h.length;
            }
        }
    }
}

//  ---------------------------------------------------------------------
//  Mode 1: one session, fuzzed input

typedef struct {
    ah_yamux_t *y;
    checker_t check;
    const uint8_t *script;      //  drives what the callbacks do
    size_t   script_len, script_at;
} single_t;

static uint8_t s_next (single_t *s)
{
    if (s->script_len == 0)
        return 0;
    return s->script [s->script_at++ % s->script_len];
}

static const uint8_t s_junk [4096];

static void m1_output (void *ud, const uint8_t *data, size_t size)
{
    single_t *s = ud;
    s_check_output (&s->check, data, size);
}

static void m1_open (void *ud, uint32_t id)
{
    single_t *s = ud;
    uint8_t op = s_next (s);
    if (op & 1)
        ah_yamux_write (s->y, id, s_junk, op * 16u);
    if (op & 2)
        ah_yamux_close (s->y, id);
    if ((op & 0x0c) == 0x0c)
        ah_yamux_reset (s->y, id);
}

static void m1_data (void *ud, uint32_t id, const uint8_t *data, size_t size)
{
    single_t *s = ud;
    uint8_t op = s_next (s);
    if (!(op & 1))
        ah_yamux_consumed (s->y, id, size);
    if (op & 2)
        ah_yamux_write (s->y, id, data, size);
    if ((op & 0x1c) == 0x04)
        ah_yamux_close (s->y, id);
    if ((op & 0x1c) == 0x08)
        ah_yamux_reset (s->y, id);
    if ((op & 0xe0) == 0x20) {
        uint32_t nid;
        ah_yamux_open (s->y, &nid);
    }
    if (op == 0xff)
        ah_yamux_destroy (&s->y);   //  from inside a callback: deferred free
}

static void m1_eof (void *ud, uint32_t id)
{
    single_t *s = ud;
    if (s_next (s) & 1)
        ah_yamux_close (s->y, id);
}

static void m1_writable (void *ud, uint32_t id)
{
    single_t *s = ud;
    ah_yamux_write (s->y, id, s_junk, sizeof s_junk);
}

static void m1_closed (void *ud, uint32_t id, bool reset)
{
    single_t *s = ud;
    uint8_t op = s_next (s);
    if (op & 1)                     //  the id is gone: every call must refuse it
        if (ah_yamux_write (s->y, id, s_junk, 1) != -1 || ah_yamux_close (s->y, id) != -1)
            FAIL ("stream %u still usable inside its on_closed", id);
    if (op & 2)
        ah_yamux_ping (s->y, id);
}

static void m1_pong (void *ud, uint32_t opaque)
{
    single_t *s = ud;
    if (s_next (s) == 0xfe)
        ah_yamux_destroy (&s->y);
}

static void m1_goaway (void *ud, uint32_t code)
{
    single_t *s = ud;
    if (s_next (s) & 1)
        ah_yamux_ping (s->y, code);
}

static void s_mode_single (const uint8_t *data, size_t size, bool is_client)
{
    single_t s = { 0 };
    ah_yamux_callbacks_t cb = { m1_output, m1_open, m1_data, m1_eof, m1_closed,
                                m1_writable, m1_pong, m1_goaway, NULL, NULL, NULL };
    s.y = ah_yamux_new (is_client, &cb, &s);
    if (!s.y)
        return;
    //  The first bytes size the pieces and drive the callbacks
    size_t nsplit = size > 0? data [0] % 16: 0;
    const uint8_t *splits = data + 1;
    if (size < 1 + nsplit)
        nsplit = size > 0? size - 1: 0;
    s.script = splits;
    s.script_len = nsplit;
    data += size > 0? 1 + nsplit: 0;
    size -= size > 0? 1 + nsplit: 0;
    uint32_t id;
    ah_yamux_open (s.y, &id);
    size_t at = 0, k = 0;
    bool failed = false;
    while (at < size && s.y) {
        size_t n = nsplit? (size_t) splits [k++ % nsplit] + 1: size - at;
        if (n > size - at)
            n = size - at;
        const char *err = NULL;
        int rc = ah_yamux_input (s.y, data + at, n, &err);
        if (rc < 0) {
            if (!err)
                FAIL ("input failed without a reason");
            failed = true;
        }
        else
        if (failed)
            FAIL ("input succeeded after a protocol error");
        if (s.y && ah_yamux_stream_count (s.y) > 1024)
            FAIL ("stream cap exceeded");
        at += n;
    }
    ah_yamux_destroy (&s.y);
    if (s.y)
        FAIL ("destroy did not null the pointer");
}

//  ---------------------------------------------------------------------
//  Mode 2: two sessions back to back, operations from the input

#define MAX_IDS 64

typedef struct side_t side_t;
struct side_t {
    ah_yamux_t *y;
    side_t  *other;
    uint8_t *out;               //  bytes in flight to the other side
    size_t   out_head;          //  out [out_head .. out_len) not delivered yet
    size_t   out_len, out_cap;
    uint64_t sent [MAX_IDS];    //  bytes written per stream
    uint64_t got [MAX_IDS];     //  bytes received per stream
    uint64_t consumed [MAX_IDS];    //  of those, handed to ah_yamux_consumed
    bool     consume;
};

//  Stream id's byte at offset is s_table [(offset + id * 977) % S_PERIOD]:
//  a table, so writing and checking are memcpy and memcmp, not byte loops
//  (every comparison in a loop here is traced by the fuzzer: slow).
#define S_PERIOD 65521u             //  prime: streams do not line up
static uint8_t s_table [S_PERIOD];

static void s_table_init (void)
{
    static bool done = false;
    if (done)
        return;
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < S_PERIOD; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        s_table [i] = (uint8_t) x;
    }
    done = true;
}

//  Copy (or compare, when check) n pattern bytes of stream id from offset.
static bool s_pattern (uint32_t id, uint64_t offset, uint8_t *buf, const uint8_t *check, size_t n)
{
    size_t at = (size_t) ((offset + (uint64_t) id * 977u) % S_PERIOD);
    while (n > 0) {
        size_t k = S_PERIOD - at < n? S_PERIOD - at: n;
        if (check? memcmp (check, s_table + at, k) != 0: (memcpy (buf, s_table + at, k), false))
            return false;
        if (check)
            check += k;
        else
            buf += k;
        n -= k;
        at = 0;
    }
    return true;
}

static void m2_output (void *ud, const uint8_t *data, size_t size)
{
    side_t *s = ud;
    if (s->out_head > 0 && s->out_len + size > s->out_cap) {
        memmove (s->out, s->out + s->out_head, s->out_len - s->out_head);
        s->out_len -= s->out_head;
        s->out_head = 0;
    }
    if (s->out_len + size > s->out_cap) {
        size_t cap = s->out_cap? s->out_cap * 2: 4096;
        while (cap < s->out_len + size)
            cap *= 2;
        uint8_t *p = realloc (s->out, cap);
        if (!p)
            abort ();
        s->out = p;
        s->out_cap = cap;
    }
    memcpy (s->out + s->out_len, data, size);
    s->out_len += size;
}

static void m2_data (void *ud, uint32_t id, const uint8_t *data, size_t size)
{
    side_t *s = ud;
    if (id >= MAX_IDS) {            //  not tracked: many opens
        ah_yamux_consumed (s->y, id, size);
        return;
    }
    if (!s_pattern (id, s->got [id], NULL, data, size))
        FAIL ("stream %u: bytes from offset %llu differ from what was sent",
              id, (unsigned long long) s->got [id]);
    s->got [id] += size;
    if (s->got [id] > s->other->sent [id])
        FAIL ("stream %u: more bytes arrived than were sent", id);
    if (s->consume) {
        s->consumed [id] += size;
        ah_yamux_consumed (s->y, id, size);
    }
}

static void s_consume (side_t *s, uint32_t id, size_t n)
{
    if (id >= MAX_IDS)
        return;
    if (n > s->got [id] - s->consumed [id])
        n = (size_t) (s->got [id] - s->consumed [id]);
    s->consumed [id] += n;
    ah_yamux_consumed (s->y, id, n);
}

//  Write up to n pattern bytes on id, as far as the window allows.
static void s_write (side_t *s, uint32_t id, size_t n)
{
    if (id >= MAX_IDS)
        return;
    uint8_t buf [20000];            //  more than one frame (16 KiB)
    while (n > 0) {
        size_t k = n < sizeof buf? n: sizeof buf;
        s_pattern (id, s->sent [id], buf, NULL, k);
        ssize_t w = ah_yamux_write (s->y, id, buf, k);
        if (w > (ssize_t) k)
            FAIL ("write took more than offered");
        if (w <= 0)
            return;
        s->sent [id] += (uint64_t) w;
        //  Flow control: never more in flight or unconsumed than the
        //  receiver's window (it only grows; gone: at most the largest)
        uint32_t window = ah_yamux_window (s->other->y, id);
        if (s->sent [id] - s->other->consumed [id] > (window ? window : AH_YAMUX_MAX_WINDOW))
            FAIL ("stream %u: %llu bytes sent beyond what the peer consumed", id,
                  (unsigned long long) (s->sent [id] - s->other->consumed [id]));
        n -= (size_t) w;
        if ((size_t) w < k)
            return;
    }
}

static void m2_writable (void *ud, uint32_t id)
{
    side_t *s = ud;
    s_write (s, id, 1000);
}

//  Deliver up to n bytes in flight from s to its other side.
static void s_deliver (side_t *s, size_t n)
{
    if (n > s->out_len - s->out_head)
        n = s->out_len - s->out_head;
    if (n == 0)
        return;
    //  Copy first: the input may append to s->out through callbacks
    uint8_t *chunk = malloc (n);
    if (!chunk)
        abort ();
    memcpy (chunk, s->out + s->out_head, n);
    s->out_head += n;
    if (s->out_head == s->out_len)
        s->out_head = s->out_len = 0;
    const char *err = NULL;
    if (ah_yamux_input (s->other->y, chunk, n, &err) < 0)
        FAIL ("protocol error between two of our own sessions: %s", err? err: "?");
    free (chunk);
}

static void s_mode_pair (const uint8_t *data, size_t size)
{
    s_table_init ();
    side_t a = { 0 }, b = { 0 };
    a.other = &b;
    b.other = &a;
    a.consume = b.consume = true;
    ah_yamux_callbacks_t cb = { m2_output, NULL, m2_data, NULL, NULL, m2_writable, NULL, NULL, NULL, NULL, NULL };
    a.y = ah_yamux_new (true, &cb, &a);
    b.y = ah_yamux_new (false, &cb, &b);
    if (!a.y || !b.y)
        goto done;
    for (size_t i = 0; i + 1 < size; i += 2) {
        uint8_t op = data [i], arg = data [i + 1];
        side_t *s = (op & 0x80)? &b: &a;
        uint32_t id = (uint32_t) (arg % MAX_IDS);
        uint32_t nid;
        switch (op & 0x0f) {
            case 0: ah_yamux_open (s->y, &nid); break;
            case 1: s_write (s, id, (size_t) arg * 1031u); break;
            case 2: ah_yamux_close (s->y, id); break;
            case 3: ah_yamux_reset (s->y, id); break;
            case 4: ah_yamux_ping (s->y, arg); break;
            case 5: s_deliver (s, (size_t) arg * 11u + 1); break;
            case 6: s_deliver (s, SIZE_MAX); break;
            case 7: s->consume = !s->consume; break;
            case 8: s_consume (s, id, (size_t) arg * 1024u); break;
            case 9: if (arg == 0x42) ah_yamux_goaway (s->y, 0); break;
            default: s_deliver (s, 1); break;
        }
    }
    //  Drain: everything in flight must still be accepted
    for (int round = 0; round < 1000 && (a.out_len || b.out_len); round++) {
        s_deliver (&a, SIZE_MAX);
        s_deliver (&b, SIZE_MAX);
    }
done:
    ah_yamux_destroy (&a.y);
    ah_yamux_destroy (&b.y);
    free (a.out);
    free (b.out);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data [0] & 1)
        s_mode_pair (data + 1, size - 1);
    else
        s_mode_single (data + 1, size - 1, (data [0] & 2) != 0);
    return 0;
}
