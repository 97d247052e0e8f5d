/*  tests/fuzz/fuzz_wsframe.c: libFuzzer target for the WebSocket frame
    reader: the frame header parser (proto/wsframe.c) on both sides, and
    the client (proto/ws.c ah_ws_read) reading a server's bytes through a
    transport that hands them over in pieces of a size the input picks.

    Checks beyond "no crash": a complete header never claims more header
    bytes than it was given, 2..14, and a control frame is never over 125
    bytes or fragmented; every shorter prefix of a complete header is
    "need more"; the header re-encoded by ah_wsframe_append parses to the
    same fields (round trip); unmasking twice gives the bytes back; the
    client hands on no data message piece past its message cap.        */
#include "proto/ws.h"
#include "proto/wsframe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { fprintf (stderr, __VA_ARGS__); fputc ('\n', stderr); abort (); } while (0)
#define MAX_MESSAGE 4096

static void s_header (const uint8_t *data, size_t size, bool want_mask)
{
    ah_wsframe_t f;
    const char *why = NULL;
    int rc = ah_wsframe_parse (data, size, want_mask, &f, &why);
    if (rc == -1) {
        if (!why)
            FAIL ("protocol error without a reason");
        return;
    }
    if (rc == 0)
        return;
    if (rc != 1 || f.header < 2 || f.header > 14 || f.header > size || f.masked != want_mask)
        FAIL ("complete header with inconsistent results (header %zu of %zu)", f.header, size);
    if (f.opcode >= 8 && (f.length > 125 || !f.fin))
        FAIL ("control frame over 125 bytes or fragmented accepted");
    if (f.length >> 63)
        FAIL ("length with the top bit set accepted");
    for (size_t n = 0; n < f.header; n++) {
        ah_wsframe_t g;
        if (ah_wsframe_parse (data, n, want_mask, &g, &why) != 0)
            FAIL ("prefix of %zu bytes of a complete header is not need-more", n);
    }
    //  Round trip: the same frame appended parses to the same fields
    //  (payload only when it is there and small).
    size_t have = size - f.header;
    if (f.length <= have && f.length <= 70000) {
        ah_buf_t out;
        memset (&out, 0, sizeof out);
        if (ah_wsframe_append (&out, f.opcode, f.fin, data + f.header, (size_t) f.length,
                               want_mask ? f.mask : NULL) == 0) {
            ah_wsframe_t g;
            if (ah_wsframe_parse (ah_buf_head (&out), ah_buf_size (&out), want_mask, &g, &why) != 1
            ||  g.fin != f.fin || g.opcode != f.opcode || g.length != f.length
            ||  g.masked != f.masked || (f.masked && memcmp (g.mask, f.mask, 4))
            ||  g.header + g.length != ah_buf_size (&out))
                FAIL ("appended frame does not parse back to the same fields");
            //  Masked payload: unmasking gives the input's bytes back,
            //  in one piece or at any offset split.
            if (f.masked && f.length) {
                uint8_t *p = (uint8_t *) ah_buf_head (&out) + g.header;
                size_t cut = (size_t) (f.length / 3);
                ah_wsframe_unmask (p, cut, g.mask, 0);
                ah_wsframe_unmask (p + cut, (size_t) f.length - cut, g.mask, cut);
                if (memcmp (p, data + f.header, (size_t) f.length))
                    FAIL ("unmask is not the inverse of the mask");
            }
        }
        ah_buf_free (&out);
    }
}

typedef struct {
    const uint8_t *data;
    size_t size, at, piece;
} feed_t;

static ssize_t s_read (ah_ws_io_t *io, void *buf, size_t size)
{
    feed_t *f = io->ctx;
    if (f->at == f->size)
        return 0;
    size_t n = f->size - f->at;
    if (n > f->piece)
        n = f->piece;
    if (n > size)
        n = size;
    memcpy (buf, f->data + f->at, n);
    f->at += n;
    return (ssize_t) n;
}

static ssize_t s_write (ah_ws_io_t *io, const void *buf, size_t size)
{
    (void) io; (void) buf;
    return (ssize_t) size;
}

static void s_close (ah_ws_io_t *io)
{
    (void) io;
}

typedef struct {
    size_t msg;                     //  bytes of the open message
    int op;
} seen_t;

static void s_on_message (void *ud, int opcode, const uint8_t *data, size_t size, bool last)
{
    seen_t *s = ud;
    if (opcode != AH_WS_TEXT && opcode != AH_WS_BIN)
        FAIL ("a message piece of opcode %d", opcode);
    if (s->op && s->op != opcode)
        FAIL ("a message changed its opcode mid-way");
    if (size && !data)
        FAIL ("a piece without data");
    s->msg += size;
    s->op = opcode;
    if (s->msg > MAX_MESSAGE)
        FAIL ("a message of %zu bytes passed the cap of %d", s->msg, MAX_MESSAGE);
    if (last) {
        s->msg = 0;
        s->op = 0;
    }
}

static void s_on_close (void *ud, unsigned code, const char *reason)
{
    (void) ud;
    if (!reason || strlen (reason) > 123)
        FAIL ("close reason missing or over 123 bytes");
    if (code > 0xffff)
        FAIL ("close code %u handed on", code);
}

static void s_client (const uint8_t *data, size_t size)
{
    if (size < 1)
        return;
    feed_t f = { .data = data + 1, .size = size - 1, .piece = 1 + data [0] % 64 };
    seen_t seen = { 0 };
    ah_ws_io_t io = { .read = s_read, .write = s_write, .close = s_close, .fd = -1, .ctx = &f };
    ah_ws_opts_t opts = { .max_message = MAX_MESSAGE, .binary_only = data [0] & 0x80,
                          .on_message = s_on_message, .on_close = s_on_close, .ud = &seen };
    ah_ws_t *ws = ah_ws_new (&io, &opts);
    if (!ws)
        return;
    int rounds = 0;
    while (ah_ws_read (ws, 1 + data [0] % 200) == 0)
        if (++rounds > 100000)
            FAIL ("the reader never ends");
    if (!*ah_ws_error (ws))
        FAIL ("the reader ended without saying why");
    ah_ws_flush (ws);
    ah_ws_destroy (&ws);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    s_header (data, size, true);
    s_header (data, size, false);
    s_client (data, size);
    return 0;
}
