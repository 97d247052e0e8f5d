/*  proto/wsframe.h: WebSocket frames (RFC 6455 section 5), for both
    ends: the client (proto/ws.h) and the API's server side.

    Pure byte work: a frame header is parsed from what has arrived, and a
    frame is appended to an ah_buf_t, masked (a client's) or not (a
    server's). The checks every peer must make are made here once:
    reserved bits, unknown opcodes, a control frame over 125 bytes or
    fragmented, a 64-bit length with its top bit set, and the masking
    rule of the receiving side.                                         */
#ifndef AH_PROTO_WSFRAME_H
#define AH_PROTO_WSFRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "proto/buf.h"

enum { AH_WS_CONT = 0, AH_WS_TEXT = 1, AH_WS_BIN = 2, AH_WS_CLOSE = 8,
       AH_WS_PING = 9, AH_WS_PONG = 10 };

typedef struct {
    bool     fin;
    int      opcode;
    bool     masked;
    uint8_t  mask [4];
    uint64_t length;                //  payload bytes
    size_t   header;                //  header bytes (before the payload)
} ah_wsframe_t;

//  The header at the start of buf: 1 complete, 0 more bytes needed, -1
//  a protocol error (*why, static; the peer gets close 1002). want_mask:
//  true on a server (client frames must be masked), false on a client
//  (server frames must not be).
int  ah_wsframe_parse (const uint8_t *buf, size_t size, bool want_mask, ah_wsframe_t *frame,
                       const char **why);
//  XOR the mask over size bytes that start offset bytes into the payload.
void ah_wsframe_unmask (uint8_t *data, size_t size, const uint8_t mask [4], uint64_t offset);
//  Append a frame; mask NULL: unmasked (a server's). 0 / -1.
int  ah_wsframe_append (ah_buf_t *out, int opcode, bool fin, const void *data, size_t size,
                        const uint8_t *mask);
//  A close code a peer may send (RFC 6455 7.4.1/7.4.2): 1000..1003,
//  1007..1014 (never 1004, 1005, 1006, 1015) and 3000..4999.
bool ah_wsframe_close_code_ok (unsigned code);

#endif
