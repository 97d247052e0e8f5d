/*  proto/ws.h: the one WebSocket client (RFC 6455), for sandboxd's tunnel
    and the CLI's terminal. Dependency-free (sandboxd links it into a
    static binary): its handshake's SHA-1 and base64 are proto/sha1.c
    and proto/base64.c.

    The client speaks over a byte transport (ah_ws_io_t: read, write and
    close callbacks, and the fd to poll), so a TLS session can sit under
    it where a caller may link a TLS library; ah_ws_io_plain() is a plain
    socket. The transport is non-blocking: the handshake waits in poll(2)
    up to a deadline; afterwards the caller's own loop polls ah_ws_fd()
    (POLLOUT too while ah_ws_pending()) and calls ah_ws_read() and
    ah_ws_flush().

    The handshake sends a random Sec-WebSocket-Key (and the subprotocol,
    when one is asked for) and checks the answer: 101, the matching
    Sec-WebSocket-Accept, Upgrade: websocket, and no subprotocol but the
    one offered. Client frames are masked. Server frames are parsed as
    they arrive: a data message is handed on in pieces, each with the
    message's opcode (continuation frames included), the last piece
    marked, so memory stays bounded whatever the peer sends; a message
    over max_message is refused with close 1009. Pings are answered; a
    close is answered and reported with its code and reason. Masked
    server frames, reserved bits, unknown opcodes and misplaced fragments
    are protocol errors (close 1002). One owner, no threads.          */
#ifndef AH_PROTO_WS_H
#define AH_PROTO_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include "proto/buf.h"
#include "proto/wsframe.h"      //  the frames and their opcodes (AH_WS_*)

#define AH_WS_MESSAGE_MAX (1u << 20)    //  received message cap unless told otherwise
#define AH_WS_HTTP_MAX    16384         //  largest upgrade answer head
#define AH_WS_BODY_MAX    1024          //  a refused upgrade's body kept


//  A parsed ws:// (or http://) URL; wss:// and https:// parse with secure
//  set, for a transport that can do TLS. ws+unix://SOCKET:PATH names a
//  unix socket (addr holds its sockaddr_un, host is "localhost").
typedef struct {
    char host [256];                //  name or IP literal, no brackets
    char port [8];
    char path [1024];               //  from the first '/': path and query
    bool secure;
    //  When host is an IP literal: its address with the port (else 0).
    struct sockaddr_storage addr;
    socklen_t addr_len;
} ah_ws_url_t;

//  0, or -1 with *err (static).
int ah_ws_url_parse (const char *url, ah_ws_url_t *out, const char **err);
//  ah_ws_dial connects to addr whatever its family (AF_INET, AF_INET6, AF_UNIX).

//  A non-blocking TCP connection to addr, waiting at most timeout_ms
//  (-1: no limit) and only while abort_fd (or -1) is not readable. The
//  socket, or -1 with a message in err and errno set (ECONNREFUSED,
//  ENOENT: nobody listens there).
int ah_ws_dial (const struct sockaddr *addr, socklen_t addr_len, int timeout_ms,
                int abort_fd, char *err, size_t err_size);

//  The byte transport.
typedef struct ah_ws_io_t ah_ws_io_t;
struct ah_ws_io_t {
    //  Like recv and send on a non-blocking socket: bytes moved, 0 at the
    //  end of the stream (read), or -1 with errno (EAGAIN and EINTR: again
    //  once fd is ready). A TLS transport maps its want-read/want-write
    //  to EAGAIN.
    ssize_t (*read)  (ah_ws_io_t *io, void *buf, size_t size);
    ssize_t (*write) (ah_ws_io_t *io, const void *buf, size_t size);
    void    (*close) (ah_ws_io_t *io);
    int   fd;                       //  what to poll
    void *ctx;                      //  the transport's own state
};

//  recv/send on a connected non-blocking socket; close closes it.
ah_ws_io_t ah_ws_io_plain (int fd);

//  A piece of a data message (AH_WS_TEXT or AH_WS_BIN), in order; last on
//  the piece that ends the message (which may be empty).
typedef void (ah_ws_message_fn) (void *ud, int opcode, const uint8_t *data, size_t size, bool last);
//  The server's close (code, 1005 when it gave none; reason, maybe "").
//  Already answered.
typedef void (ah_ws_close_fn) (void *ud, unsigned code, const char *reason);

typedef struct {
    const char *protocol;           //  subprotocol to offer and require, or NULL (copied)
    size_t max_message;             //  0: AH_WS_MESSAGE_MAX
    bool   binary_only;             //  a text message is an error (close 1003)
    ah_ws_message_fn *on_message;
    ah_ws_close_fn   *on_close;     //  or NULL
    void *ud;
} ah_ws_opts_t;

typedef struct ah_ws_t ah_ws_t;

//  A client over io, which it takes over (closed by destroy, or here on
//  failure). NULL when out of memory.
ah_ws_t *ah_ws_new (const ah_ws_io_t *io, const ah_ws_opts_t *opts);
//  Closes the transport; pending output is dropped (flush first).
void ah_ws_destroy (ah_ws_t **self_p);

//  The upgrade: GET url->path with Host from url, and headers (more
//  header lines, "Name: value\r\n"..., or NULL). Waits at most timeout_ms
//  (-1: no limit), and only while abort_fd (or -1) is not readable.
//  0, or -1 with a message in err (a refusal: "upgrade refused: " and the
//  status line, with the first line of the body when one came). On
//  failure errno is ECONNRESET when the peer closed the connection before
//  any answer (a relay whose server is away; other failures leave it
//  as the failing call set it).
int ah_ws_handshake (ah_ws_t *self, const ah_ws_url_t *url, const char *headers,
                     int timeout_ms, int abort_fd, char *err, size_t err_size);
//  The upgrade answer's HTTP status (0 when none came), and the first
//  bytes (at most AH_WS_BODY_MAX) of a refusal's body, NUL-terminated.
int ah_ws_status (const ah_ws_t *self);
const char *ah_ws_body (const ah_ws_t *self);

int ah_ws_fd (const ah_ws_t *self);

//  Reads what the transport has (at most about max bytes) and hands the
//  messages on. 0, or -1 once the connection is over (the server closed
//  it or the WebSocket, a protocol error: ah_ws_error says which; a close
//  frame to send may be pending: flush).
int ah_ws_read (ah_ws_t *self, size_t max);
//  Queue one message (a control frame: at most 125 bytes). -1 after a
//  close was queued or out of memory.
int ah_ws_send (ah_ws_t *self, int opcode, const void *data, size_t size);
//  Queue a close (once; reason may be NULL, cut at 123 bytes).
void ah_ws_close (ah_ws_t *self, unsigned code, const char *reason);
//  Write queued bytes as far as the transport takes them. 0, or -1 on a
//  transport error (ah_ws_error).
int ah_ws_flush (ah_ws_t *self);
size_t ah_ws_pending (const ah_ws_t *self);
//  Why the connection is over ("" while it is not).
const char *ah_ws_error (const ah_ws_t *self);

//  Sec-WebSocket-Accept for a key (base64 of SHA-1 of key + GUID).
void ah_ws_accept_for (const char *key, char out [29]);

#endif
