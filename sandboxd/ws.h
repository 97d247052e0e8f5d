/*  sandboxd/ws.h: a minimal RFC 6455 WebSocket client, sans I/O framing.

    Written for the tunnel: the server's binary messages carry one yamux
    byte stream, so message boundaries do not matter and the parser hands
    out payload bytes of binary (and continuation) frames as they arrive,
    never reassembling a whole message: memory stays bounded whatever the
    peer sends. Control frames (ping, pong, close; at most 125 bytes, never
    fragmented) are buffered and answered. Text frames, masked server
    frames, reserved bits and oversized frames are protocol errors.

    The handshake (ah_ws_connect) dials an IPv4/IPv6 literal (there is no
    resolver in a scratch image), sends the HTTP/1.1 upgrade with a random
    Sec-WebSocket-Key and the agenthold-tunnel subprotocol, and checks the
    101, Sec-WebSocket-Accept and (when the server names one) the
    subprotocol. Messages we send stay under AH_WS_SEND_MAX; messages over
    AH_WS_MESSAGE_MAX are refused with 1009 (docs/tunnel.md).         */
#ifndef AH_SANDBOXD_WS_H
#define AH_SANDBOXD_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AH_WS_MESSAGE_MAX (1u << 20)    //  largest message accepted (tunnel.md)
#define AH_WS_SEND_MAX    (64u << 10)   //  largest message we send
#define AH_WS_HTTP_MAX    8192          //  largest handshake response

enum { AH_WS_CONT = 0, AH_WS_TEXT = 1, AH_WS_BIN = 2, AH_WS_CLOSE = 8,
       AH_WS_PING = 9, AH_WS_PONG = 10 };

//  A parsed ws://host:port/path URL. host is an IP literal.
typedef struct {
    char host [64];
    char port [8];
    char path [512];
} ah_ws_url_t;

//  0, or -1 with *err (static) for anything but ws://IP[:port]/path.
int ah_ws_url_parse (const char *url, ah_ws_url_t *out, const char **err);

//  Sec-WebSocket-Accept for a key (base64 of SHA-1 of key + GUID).
void ah_ws_accept_for (const char *key, char out [29]);

//  Connect and upgrade, waiting at most timeout_ms overall; abort_fd
//  (or -1), when readable, cancels the wait. headers: extra header lines
//  ("Name: value\r\n"...), or NULL. Returns a connected non-blocking
//  socket, or -1 with a message in err. Bytes that followed the 101
//  response (the server may send frames right away) are copied to
//  extra (up to extra_cap; *extra_len).
int ah_ws_connect (const ah_ws_url_t *url, const char *headers, int timeout_ms,
                   int abort_fd, uint8_t *extra, size_t extra_cap,
                   size_t *extra_len, char *err, size_t err_size);

//  Frame a client message (masked). out needs size + 14 bytes.
//  Returns the total frame length.
size_t ah_ws_frame (uint8_t opcode, const uint8_t *data, size_t size, uint8_t *out);

//  Incremental frame parser.
typedef struct {
    //  Payload bytes of binary messages, in order, as they arrive.
    void (*on_data) (void *ud, const uint8_t *data, size_t size);
    //  A control frame to send back (pong for ping, close echo).
    void (*on_reply) (void *ud, uint8_t opcode, const uint8_t *data, size_t size);
    //  The peer sent close (code, or 1005 if none).
    void (*on_close) (void *ud, unsigned code);
} ah_ws_callbacks_t;

typedef struct {
    ah_ws_callbacks_t cb;
    void    *ud;
    uint8_t  hdr [14];      //  header bytes gathered so far
    size_t   hlen;
    uint8_t  opcode;        //  of the current frame
    bool     in_message;    //  a fragmented binary message is open
    uint64_t left;          //  payload bytes left in the current frame
    uint64_t msg_total;     //  bytes of the current message so far
    bool     in_payload;
    uint8_t  ctl [125];     //  control frame payload
    size_t   ctl_len;
    bool     closed;
} ah_ws_parser_t;

void ah_ws_parser_init (ah_ws_parser_t *p, const ah_ws_callbacks_t *cb, void *ud);
//  Feed received bytes: 0, or -1 with *err and *close_code (the code to
//  close the connection with: 1002 protocol error, 1003 text, 1009 too big).
int ah_ws_parser_feed (ah_ws_parser_t *p, const uint8_t *data, size_t size,
                       const char **err, unsigned *close_code);

#endif
