/*  proto/yamux.h: yamux (hashicorp/yamux spec.md), sans I/O.

    A session is fed the bytes that arrive from the transport
    (ah_yamux_input, any split: frames may straddle calls) and hands the
    bytes to send to its output callback. It never blocks and owns no
    socket, so the server (lws thread), sandboxd and tests drive it alike.
    Not thread-safe: one session is used by one thread.

    Wire: 12-byte big-endian header version(8)=0 type(8) flags(16)
    stream id(32) length(32); types 0 data, 1 window update, 2 ping,
    3 go away; flags SYN 1, ACK 2, FIN 4, RST 8. Client stream ids are
    odd, server ids even. 256 KiB initial receive window per stream.

    Flow control: ah_yamux_write accepts at most the peer's remaining
    window and returns how much it took (0 = blocked: wait for
    on_writable). Received data counts against our window until the
    application calls ah_yamux_consumed; the window update is sent when the
    consumed delta reaches half the window, as the Go implementation does.
    A receive window grows (doubling, up to AH_YAMUX_MAX_WINDOW) when half
    of it was consumed within 20 ms of the last update: the window, not the
    reader, limits that stream. The spec allows a window update to carry
    more than was consumed; a peer just adds it to its send window. */
#ifndef AH_YAMUX_H
#define AH_YAMUX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define AH_YAMUX_VERSION        0
#define AH_YAMUX_HEADER_SIZE    12
#define AH_YAMUX_INITIAL_WINDOW (256u * 1024u)
#define AH_YAMUX_MAX_WINDOW     (4u * 1024u * 1024u)    //  most a receive window grows to

enum { AH_YAMUX_DATA = 0, AH_YAMUX_WINDOW_UPDATE = 1, AH_YAMUX_PING = 2, AH_YAMUX_GO_AWAY = 3 };
enum { AH_YAMUX_SYN = 1, AH_YAMUX_ACK = 2, AH_YAMUX_FIN = 4, AH_YAMUX_RST = 8 };
enum { AH_YAMUX_GOAWAY_NORMAL = 0, AH_YAMUX_GOAWAY_PROTOCOL = 1, AH_YAMUX_GOAWAY_INTERNAL = 2 };

typedef struct {
    uint8_t  version;
    uint8_t  type;
    uint16_t flags;
    uint32_t stream_id;
    uint32_t length;
} ah_yamux_header_t;

//  Pure frame codec (fuzzed). decode: 0 ok, -1 bad version/type.
void ah_yamux_header_encode (const ah_yamux_header_t *h, uint8_t out [AH_YAMUX_HEADER_SIZE]);
int  ah_yamux_header_decode (const uint8_t in [AH_YAMUX_HEADER_SIZE], ah_yamux_header_t *h);

typedef struct {
    //  Bytes for the transport, in order. Must take them all (copy/queue).
    void (*output) (void *ud, const uint8_t *data, size_t size);
    //  The peer opened stream id (SYN). We ACK automatically.
    void (*on_open) (void *ud, uint32_t id);
    //  Data for stream id. Call ah_yamux_consumed when the bytes are used.
    void (*on_data) (void *ud, uint32_t id, const uint8_t *data, size_t size);
    //  The peer half-closed (FIN): no more data will come on id.
    void (*on_eof) (void *ud, uint32_t id);
    //  The stream is gone: RST (from either side), or both sides closed.
    //  Exactly once per stream, also from inside our own ah_yamux_reset /
    //  ah_yamux_close. Last callback for id.
    void (*on_closed) (void *ud, uint32_t id, bool reset);
    //  Window opened after a write returned less than asked.
    void (*on_writable) (void *ud, uint32_t id);
    //  A ping we sent came back.
    void (*on_pong) (void *ud, uint32_t opaque);
    //  The peer sent go away (code as above).
    void (*on_goaway) (void *ud, uint32_t code);
    //  The peer pinged us (already answered); may be NULL.
    void (*on_ping) (void *ud, uint32_t opaque);
    //  The clock the receive window's auto-tuning reads (milliseconds,
    //  monotonic); NULL: CLOCK_MONOTONIC. Tests drive it, so that what
    //  they check does not depend on how fast the machine is.
    int64_t (*now_ms) (void *ud);
    //  Optional: a data frame as its header and its payload (borrowed),
    //  to be queued as one piece as output would; saves yamux copying the
    //  payload into a frame of its own. NULL: data frames go to output.
    void (*output_data) (void *ud, const uint8_t *head, size_t head_size,
                         const uint8_t *data, size_t size);
} ah_yamux_callbacks_t;

typedef struct ah_yamux_t ah_yamux_t;

ah_yamux_t *ah_yamux_new (bool is_client, const ah_yamux_callbacks_t *cb, void *ud);
void ah_yamux_destroy (ah_yamux_t **self_p);

//  Feed transport bytes. 0, or -1 on a protocol error (a go away with
//  code 1 has been output; the session is dead): *err says what.
//  Callbacks may call any function here, ah_yamux_destroy included (the
//  free is deferred until the outermost call returns), except
//  ah_yamux_input on the same session (refused with -1, session intact).
//  At most 1024 live streams: a SYN beyond is refused with RST.
int ah_yamux_input (ah_yamux_t *self, const uint8_t *data, size_t size, const char **err);

//  Open a stream (sends a window update with SYN). 0 and *id, or -1.
int ah_yamux_open (ah_yamux_t *self, uint32_t *id);
//  Queue up to size bytes within the peer's window: bytes taken, or -1
//  if the stream is not writable (closed, reset, unknown).
ssize_t ah_yamux_write (ah_yamux_t *self, uint32_t id, const uint8_t *data, size_t size);
//  One data frame whose payload the caller moves itself (a splice): takes
//  up to size bytes of id's send window, at most one frame's worth, and
//  writes the frame's header to head. Returns how many, 0 when the window
//  is shut (on_writable follows), -1 if id is not writable. Nothing is
//  output: the caller writes head and then exactly that many payload
//  bytes, before any other output of this session.
ssize_t ah_yamux_write_header (ah_yamux_t *self, uint32_t id, size_t size,
                               uint8_t head [AH_YAMUX_HEADER_SIZE]);
//  The application used n received bytes of id: may send a window update.
void ah_yamux_consumed (ah_yamux_t *self, uint32_t id, size_t n);
//  Half-close our side (FIN). 0 / -1.
int ah_yamux_close (ah_yamux_t *self, uint32_t id);
//  Abort the stream (RST). 0 / -1.
int ah_yamux_reset (ah_yamux_t *self, uint32_t id);
//  Session ping with an opaque value; answered through on_pong.
int ah_yamux_ping (ah_yamux_t *self, uint32_t opaque);
//  Send go away; no new streams are accepted afterwards.
void ah_yamux_goaway (ah_yamux_t *self, uint32_t code);
//  Remaining send window of id (0 if unknown).
uint32_t ah_yamux_send_window (const ah_yamux_t *self, uint32_t id);
//  The size of id's receive window now: AH_YAMUX_INITIAL_WINDOW, grown up
//  to AH_YAMUX_MAX_WINDOW (0 if unknown). The peer never has more than
//  this in flight or unconsumed.
uint32_t ah_yamux_window (const ah_yamux_t *self, uint32_t id);
size_t ah_yamux_stream_count (const ah_yamux_t *self);

#endif
