/*  tests/proto/test_channel.c: channel headers and records (channel.h).  */
#include "tests/common/check.h"
#include "proto/channel.h"
#include "tests/proto/peer.h"

#include <stdlib.h>

static void test_header_roundtrip (void)
{
    ah_msg_t *m = ah_msg_new ("X");
    ah_msg_set_str (m, "ch", "fs.read");
    ah_msg_set_str (m, "path", "notes.txt");
    ah_msg_set_int (m, "version", AH_PROTOCOL_VERSION);
    uint8_t *buf = NULL;
    size_t size = 0;
    CHECK (ah_chan_header_encode (m, &buf, &size) == 0);
    CHECK (size > 4);
    uint32_t n = (uint32_t) buf [0] << 24 | buf [1] << 16 | buf [2] << 8 | buf [3];
    CHECK (n == size - 4);
    CHECK (buf [4] == 0x83);                //  a msgpack fixmap of three

    //  Partial input: every prefix says "need more", then complete
    for (size_t i = 0; i < size; i++) {
        ah_msg_t *out = NULL;
        size_t used = 0;
        const char *err = NULL;
        int rc = ah_chan_header_decode (buf, i, &out, &used, &err);
        CHECK (rc == 0 && out == NULL && err == NULL);
    }
    //  Complete, with trailing stream bytes that are not part of it
    uint8_t *more = malloc (size + 3);
    memcpy (more, buf, size);
    memcpy (more + size, "raw", 3);
    ah_msg_t *out = NULL;
    size_t used = 0;
    const char *err = NULL;
    CHECK (ah_chan_header_decode (more, size + 3, &out, &used, &err) == 1);
    CHECK (used == size);
    CHECK (out != NULL);
    if (out) {
        CHECK_STR (ah_msg_str (out, "ch"), "fs.read");
        CHECK_STR (ah_msg_str (out, "path"), "notes.txt");
        CHECK (ah_msg_int (out, "version", 0) == AH_PROTOCOL_VERSION);
    }
    ah_msg_destroy (&out);
    free (more);
    free (buf);
    ah_msg_destroy (&m);
}

static void test_header_oversize (void)
{
    //  Encoding refuses a map bigger than the cap
    ah_msg_t *m = ah_msg_new ("X");
    char *big = malloc (AH_CHAN_HEADER_MAX + 1);
    memset (big, 'a', AH_CHAN_HEADER_MAX);
    big [AH_CHAN_HEADER_MAX] = 0;
    ah_msg_set_str (m, "blob", big);
    uint8_t *buf = NULL;
    size_t size = 0;
    CHECK (ah_chan_header_encode (m, &buf, &size) == -1);
    CHECK (buf == NULL);
    free (big);
    ah_msg_destroy (&m);

    //  Decoding refuses a length over the cap from the 4 bytes alone
    uint8_t hdr [4] = { 0, 1, 0, 1 };       //  65537
    ah_msg_t *out = NULL;
    size_t used = 0;
    const char *err = NULL;
    CHECK (ah_chan_header_decode (hdr, 4, &out, &used, &err) == -1);
    CHECK (err && strstr (err, "65536"));
    uint8_t huge [4] = { 0xff, 0xff, 0xff, 0xff };
    CHECK (ah_chan_header_decode (huge, 4, &out, &used, &err) == -1);
    uint8_t zero [5] = { 0, 0, 0, 0, 0x80 };
    CHECK (ah_chan_header_decode (zero, 5, &out, &used, &err) == -1);
    CHECK (err && strstr (err, "zero"));
    CHECK (out == NULL);
    //  Exactly at the cap is allowed (waits for the bytes)
    uint8_t at_cap [4] = { 0, 1, 0, 0 };
    CHECK (ah_chan_header_decode (at_cap, 4, &out, &used, &err) == 0);
}

static void s_expect_bad (const uint8_t *body, size_t n, const char *why)
{
    uint8_t buf [64];
    buf [0] = 0; buf [1] = 0; buf [2] = 0; buf [3] = (uint8_t) n;
    memcpy (buf + 4, body, n);
    ah_msg_t *out = NULL;
    size_t used = 0;
    const char *err = NULL;
    CHECK (ah_chan_header_decode (buf, 4 + n, &out, &used, &err) == -1);
    CHECK (out == NULL);
    CHECK (err != NULL);
    if (err && why && !strstr (err, why)) {
        fprintf (stderr, "  expected '%s' in '%s'\n", why, err);
        CHECK (0);
    }
}

static void test_header_malformed (void)
{
    s_expect_bad ((const uint8_t *) "\x93\x01\x02\x03", 4, "map");    //  an array
    s_expect_bad ((const uint8_t *) "\xa2hi", 3, "map");              //  a string
    s_expect_bad ((const uint8_t *) "\x81\xa2" "ch", 4, "truncated"); //  value missing
    s_expect_bad ((const uint8_t *) "\x81\x01\x02", 3, "field");      //  int key
    s_expect_bad ((const uint8_t *) "\x80\x80", 2, "trailing");       //  two maps
    s_expect_bad ((const uint8_t *) "\xc1", 1, NULL);                 //  reserved byte
    //  A map claiming 2^32 pairs in a 5-byte body
    s_expect_bad ((const uint8_t *) "\xdf\xff\xff\xff\xff", 5, NULL);
    //  An empty map is a valid header (the reader then finds no "ch")
    uint8_t ok [5] = { 0, 0, 0, 1, 0x80 };
    ah_msg_t *out = NULL;
    size_t used = 0;
    const char *err = NULL;
    CHECK (ah_chan_header_decode (ok, 5, &out, &used, &err) == 1);
    CHECK (out && ah_msg_count (out) == 0 && used == 5);
    ah_msg_destroy (&out);
    CHECK (ah_chan_header_decode (NULL, 0, &out, &used, &err) == 0);
}

static void test_records (void)
{
    uint8_t hdr [5];
    ah_rec_prefix (AH_REC_STDOUT, 0x01020304, hdr);
    const uint8_t want [5] = { 1, 1, 2, 3, 4 };
    CHECK (memcmp (hdr, want, 5) == 0);

    uint8_t buf [32];
    ah_rec_prefix (AH_REC_STDIN, 3, buf);
    memcpy (buf + 5, "abc", 3);
    ah_rec_prefix (AH_REC_EOF, 0, buf + 8);
    uint8_t kind = 99;
    const uint8_t *payload = NULL;
    uint32_t plen = 0;
    size_t used = 0;
    const char *err = NULL;
    for (size_t i = 0; i < 8; i++)
        CHECK (ah_rec_decode (buf, i, &kind, &payload, &plen, &used, &err) == 0);
    CHECK (ah_rec_decode (buf, 13, &kind, &payload, &plen, &used, &err) == 1);
    CHECK (kind == AH_REC_STDIN && plen == 3 && used == 8 && payload == buf + 5);
    CHECK (ah_rec_decode (buf + used, 5, &kind, &payload, &plen, &used, &err) == 1);
    CHECK (kind == AH_REC_EOF && plen == 0 && used == 5);

    //  Unknown kind: refused from the first byte
    buf [0] = AH_REC_KILL + 1;
    CHECK (ah_rec_decode (buf, 1, &kind, &payload, &plen, &used, &err) == -1);
    CHECK (err && strstr (err, "kind"));
    //  Too long: refused from the prefix, before waiting for the payload
    ah_rec_prefix (AH_REC_STDOUT, AH_REC_MAX + 1, buf);
    CHECK (ah_rec_decode (buf, 5, &kind, &payload, &plen, &used, &err) == -1);
    CHECK (err && strstr (err, "1 MiB"));
    ah_rec_prefix (AH_REC_STDOUT, AH_REC_MAX, buf);
    CHECK (ah_rec_decode (buf, 5, &kind, &payload, &plen, &used, &err) == 0);
}

//  A header and records written in 3-byte pieces on a yamux stream: the
//  receiver decodes them incrementally from whatever has arrived.
static void test_over_yamux (void)
{
    peer_t *c = peer_new (true), *s = peer_new (false);
    ah_msg_t *m = ah_msg_new ("X");
    ah_msg_set_str (m, "ch", "exec");
    ah_msg_set_str (m, "cmd", "cat");
    ah_msg_set_int (m, "timeout", 5);
    bytes_t wire = { 0 };
    uint8_t *hdr = NULL;
    size_t hsize = 0;
    CHECK (ah_chan_header_encode (m, &hdr, &hsize) == 0);
    bytes_add (&wire, hdr, hsize);
    uint8_t pre [5];
    ah_rec_prefix (AH_REC_STDIN, 5, pre);
    bytes_add (&wire, pre, 5);
    bytes_add (&wire, "hello", 5);
    ah_rec_prefix (AH_REC_EOF, 0, pre);
    bytes_add (&wire, pre, 5);

    uint32_t id;
    CHECK (ah_yamux_open (c->y, &id) == 0);
    int headers = 0, records = 0, bad = 0;
    size_t at = 0;                      //  receiver's parse position
    for (size_t off = 0; off < wire.len; off += 3) {
        size_t n = wire.len - off < 3? wire.len - off: 3;
        CHECK (ah_yamux_write (c->y, id, wire.data + off, n) == (ssize_t) n);
        CHECK (peer_pump (c, s) == 0);
        bytes_t *rx = &s->rx [id];
        for (;;) {
            const char *err = NULL;
            size_t used = 0;
            int rc;
            if (headers == 0) {
                ah_msg_t *got = NULL;
                rc = ah_chan_header_decode (rx->data + at, rx->len - at, &got, &used, &err);
                if (rc == 1) {
                    headers++;
                    CHECK_STR (ah_msg_str (got, "ch"), "exec");
                    CHECK_STR (ah_msg_str (got, "cmd"), "cat");
                    CHECK (ah_msg_int (got, "timeout", 0) == 5);
                    ah_msg_destroy (&got);
                }
            }
            else {
                uint8_t kind;
                const uint8_t *payload;
                uint32_t plen;
                rc = ah_rec_decode (rx->data + at, rx->len - at, &kind, &payload, &plen, &used, &err);
                if (rc == 1) {
                    records++;
                    if (records == 1)
                        CHECK (kind == AH_REC_STDIN && plen == 5 && memcmp (payload, "hello", 5) == 0);
                    else
                        CHECK (kind == AH_REC_EOF && plen == 0);
                }
            }
            if (rc < 0)
                bad++;
            if (rc != 1)
                break;
            at += used;
        }
    }
    CHECK (headers == 1 && records == 2 && bad == 0);
    CHECK (at == wire.len);
    free (hdr);
    bytes_free (&wire);
    ah_msg_destroy (&m);
    peer_destroy (&c);
    peer_destroy (&s);
}

//  The byte buffer: append, consume, compaction, headroom, C strings.
static void test_buf (void)
{
    ah_buf_t b;
    ah_buf_init (&b, 16);
    CHECK (ah_buf_size (&b) == 0 && ah_buf_head (&b) == NULL);
    CHECK (ah_buf_append (&b, "hello", 5) == 0);
    CHECK (ah_buf_size (&b) == 5 && memcmp (ah_buf_head (&b), "hello", 5) == 0);
    CHECK (ah_buf_head (&b) - b.data >= 16);            //  headroom kept
    ah_buf_consume (&b, 2);
    CHECK (ah_buf_size (&b) == 3 && memcmp (ah_buf_head (&b), "llo", 3) == 0);
    CHECK (ah_buf_appendf (&b, "-%d", 42) == 0);
    CHECK_STR (ah_buf_cstr (&b), "llo-42");
    //  Grow far past the first allocation, bytes intact, headroom intact
    uint8_t big [10000];
    for (size_t i = 0; i < sizeof big; i++)
        big [i] = (uint8_t) (i * 7);
    for (int round = 0; round < 20; round++) {
        CHECK (ah_buf_append (&b, big, sizeof big) == 0);
        ah_buf_consume (&b, sizeof big / 2);
    }
    CHECK (ah_buf_head (&b) - b.data >= 16);
    size_t size = ah_buf_size (&b);
    CHECK (size == 6 + 20 * sizeof big - 20 * (sizeof big / 2));
    ah_buf_consume (&b, size - sizeof big / 2);
    CHECK (memcmp (ah_buf_head (&b), big + sizeof big / 2, sizeof big / 2) == 0);
    ah_buf_consume (&b, SIZE_MAX);
    CHECK (ah_buf_size (&b) == 0);
    uint8_t *w = ah_buf_reserve (&b, 3);
    CHECK (w != NULL);
    memcpy (w, "abc", 3);
    ah_buf_commit (&b, 3);
    CHECK (ah_buf_size (&b) == 3);
    CHECK (ah_buf_reserve (&b, SIZE_MAX) == NULL && ah_buf_size (&b) == 3);
    ah_buf_free (&b);
    CHECK (ah_buf_size (&b) == 0 && b.headroom == 16);
}

typedef struct {
    ah_buf_t out [6];
    int records [6];
    int calls;
} rec_sink_t;

static int s_rec_sink (void *arg, uint8_t kind, const uint8_t *data, size_t size, bool last)
{
    rec_sink_t *s = arg;
    s->calls++;
    ah_buf_append (&s->out [kind], data, size);
    if (last)
        s->records [kind]++;
    return 0;
}

static int s_rec_stop (void *arg, uint8_t kind, const uint8_t *data, size_t size, bool last)
{
    return kind == AH_REC_EXIT ? 7 : 0;
}

//  The streaming reader gets the same records whatever the pieces.
static void test_rec_reader (void)
{
    ah_buf_t wire = { 0 };
    uint8_t payload [3000];
    for (size_t i = 0; i < sizeof payload; i++)
        payload [i] = (uint8_t) i;
    CHECK (ah_rec_append (&wire, AH_REC_STDOUT, payload, sizeof payload) == 0);
    CHECK (ah_rec_append (&wire, AH_REC_STDERR, "err", 3) == 0);
    CHECK (ah_rec_append (&wire, AH_REC_STDOUT, NULL, 0) == 0);
    CHECK (ah_rec_append (&wire, AH_REC_EXIT, "\x80", 1) == 0);
    CHECK (ah_buf_size (&wire) == 4 * 5 + sizeof payload + 3 + 1);
    for (size_t piece = 1; piece <= ah_buf_size (&wire); piece = piece * 3 + 1) {
        rec_sink_t sink = { 0 };
        ah_rec_reader_t reader = { 0 };
        const uint8_t *p = ah_buf_head (&wire);
        size_t left = ah_buf_size (&wire);
        while (left) {
            size_t n = piece < left ? piece : left;
            CHECK (ah_rec_read (&reader, p, n, s_rec_sink, &sink, NULL) == 0);
            p += n, left -= n;
        }
        CHECK (ah_rec_reader_idle (&reader));
        CHECK (sink.records [AH_REC_STDOUT] == 2 && sink.records [AH_REC_STDERR] == 1);
        CHECK (sink.records [AH_REC_EXIT] == 1);
        CHECK (ah_buf_size (&sink.out [AH_REC_STDOUT]) == sizeof payload);
        CHECK (memcmp (ah_buf_head (&sink.out [AH_REC_STDOUT]), payload, sizeof payload) == 0);
        for (int k = 0; k < 6; k++)
            ah_buf_free (&sink.out [k]);
    }
    //  fn stops the reader with its value
    ah_rec_reader_t reader = { 0 };
    CHECK (ah_rec_read (&reader, ah_buf_head (&wire), ah_buf_size (&wire), s_rec_stop, NULL, NULL) == 7);
    //  A bad kind and an over-long record are refused, with a reason
    const char *err = NULL;
    uint8_t bad [5] = { 9, 0, 0, 0, 1 };
    memset (&reader, 0, sizeof reader);
    CHECK (ah_rec_read (&reader, bad, 5, s_rec_stop, NULL, &err) == -1 && err != NULL);
    uint8_t huge [5];
    ah_rec_prefix (AH_REC_STDOUT, AH_REC_MAX + 1, huge);
    memset (&reader, 0, sizeof reader);
    err = NULL;
    CHECK (ah_rec_read (&reader, huge, 5, s_rec_stop, NULL, &err) == -1 && err != NULL);
    ah_buf_free (&wire);
}

//  A consumer that takes at most `room` bytes a call, then refuses until
//  given room again (a pipe that fills up), and stops at EXIT.
typedef struct {
    rec_sink_t sink;
    size_t room;
} taker_t;

static ssize_t s_rec_taker (void *arg, uint8_t kind, const uint8_t *data, size_t size, bool last)
{
    taker_t *t = arg;
    if (kind == AH_REC_EXIT && !t->room)
        return -1;
    size_t took = size < t->room ? size : t->room;
    t->room -= took;
    t->sink.calls++;
    ah_buf_append (&t->sink.out [kind], data, took);
    if (last && took == size)
        t->sink.records [kind]++;
    return (ssize_t) took;
}

//  The partial-taking reader: whatever the pieces and however little the
//  consumer takes at a time, the same records come out, and what was not
//  taken is offered again.
static void test_rec_take (void)
{
    ah_buf_t wire = { 0 };
    uint8_t payload [3000];
    for (size_t i = 0; i < sizeof payload; i++)
        payload [i] = (uint8_t) (i * 7);
    CHECK (ah_rec_append (&wire, AH_REC_STDIN, payload, sizeof payload) == 0);
    CHECK (ah_rec_append (&wire, AH_REC_EOF, NULL, 0) == 0);
    CHECK (ah_rec_append (&wire, AH_REC_STDIN, "tail", 4) == 0);
    CHECK (ah_rec_append (&wire, AH_REC_EXIT, NULL, 0) == 0);
    for (size_t room = 1; room < 5000; room = room * 5 + 3) {
        taker_t t = { .room = room };
        ah_rec_reader_t reader = { 0 };
        ah_buf_t in = { 0 };            //  received, not yet taken
        size_t fed = 0, rounds = 0;
        while ((fed < ah_buf_size (&wire) || ah_buf_size (&in)) && rounds++ < 100000) {
            size_t n = ah_buf_size (&wire) - fed < 11 ? ah_buf_size (&wire) - fed : 11;
            ah_buf_append (&in, ah_buf_head (&wire) + fed, n);
            fed += n;
            ssize_t used = ah_rec_take (&reader, ah_buf_head (&in), ah_buf_size (&in),
                                        s_rec_taker, &t, NULL);
            CHECK (used >= 0 && (size_t) used <= ah_buf_size (&in));
            if (used < 0)
                break;
            ah_buf_consume (&in, (size_t) used);
            t.room = room;
        }
        CHECK (ah_buf_size (&in) == 0 && ah_rec_reader_idle (&reader));
        CHECK (t.sink.records [AH_REC_STDIN] == 2 && t.sink.records [AH_REC_EOF] == 1);
        CHECK (t.sink.records [AH_REC_EXIT] == 1);
        CHECK (ah_buf_size (&t.sink.out [AH_REC_STDIN]) == sizeof payload + 4);
        CHECK (memcmp (ah_buf_head (&t.sink.out [AH_REC_STDIN]), payload, sizeof payload) == 0);
        for (int k = 0; k < 6; k++)
            ah_buf_free (&t.sink.out [k]);
        ah_buf_free (&in);
    }
    //  A consumer with no room: the prefix is used, the payload waits.
    taker_t t = { .room = 0 };
    ah_rec_reader_t reader = { 0 };
    CHECK (ah_rec_take (&reader, ah_buf_head (&wire), 20, s_rec_taker, &t, NULL) == 5);
    CHECK (!ah_rec_reader_idle (&reader));
    //  An empty record refused: nothing used, offered again.
    uint8_t exit_rec [5];
    ah_rec_prefix (AH_REC_EXIT, 0, exit_rec);
    memset (&reader, 0, sizeof reader);
    CHECK (ah_rec_take (&reader, exit_rec, 5, s_rec_taker, &t, NULL) == 0);
    CHECK (ah_rec_reader_idle (&reader) && t.sink.records [AH_REC_EXIT] == 0);
    t.room = 1;
    CHECK (ah_rec_take (&reader, exit_rec, 5, s_rec_taker, &t, NULL) == 5);
    CHECK (ah_rec_reader_idle (&reader) && t.sink.records [AH_REC_EXIT] == 1);
    //  A bad kind is refused with a reason.
    const char *err = NULL;
    uint8_t bad [5] = { 9, 0, 0, 0, 1 };
    memset (&reader, 0, sizeof reader);
    CHECK (ah_rec_take (&reader, bad, 5, s_rec_taker, &t, &err) == -1 && err != NULL);
    ah_buf_free (&wire);
}

int main (void)
{
    test_buf ();
    test_rec_reader ();
    test_rec_take ();
    test_over_yamux ();
    test_header_roundtrip ();
    test_header_oversize ();
    test_header_malformed ();
    test_records ();
    return CHECK_DONE ();
}
