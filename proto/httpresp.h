/*  proto/httpresp.h: an HTTP/1.1 response read as it arrives (RFC 9112):
    the status line and headers, then the body framed by
    Transfer-Encoding: chunked, Content-Length or the end of the
    connection, handed on in pieces. For the agenthold command's client
    (cli/http.c); pure byte work, no I/O.

    The server is a peer like any other: every length is capped before it
    is believed (the head at AH_HTTPRESP_HEAD_MAX, a chunk-size line at
    1 KiB, a trailer at the head's cap, sizes below 2^53), the status line
    must be HTTP/1.x and three digits, a Content-Length of digits only
    (twice, it must agree), a Transfer-Encoding other than chunked is
    refused (the client asks for no coding), interim 1xx answers are read
    past, and 204, 304 and answers to HEAD have no body.             */
#ifndef AH_PROTO_HTTPRESP_H
#define AH_PROTO_HTTPRESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "proto/buf.h"

#define AH_HTTPRESP_HEAD_MAX    16384

//  A piece of the body; nonzero stops the reading (feed returns 2).
typedef int (ah_httpresp_body_fn) (void *ud, const uint8_t *data, size_t size);

typedef struct {
    int phase;                      //  private
    bool head_request;              //  set before feeding: the request was HEAD
    int status;                     //  once the head is in (> 0)
    int64_t length;                 //  Content-Length, -1 none (chunked or to the close)
    bool chunked;
    uint64_t left;                  //  private: bytes left of the body or the chunk
    ah_buf_t line;                  //  private: the head, a chunk-size line, a trailer
} ah_httpresp_t;

void ah_httpresp_init (ah_httpresp_t *self, bool head_request);
void ah_httpresp_clear (ah_httpresp_t *self);

//  Feed size bytes: 0 more wanted, 1 the response is complete (*used:
//  the bytes of data it took), 2 body_fn stopped, -1 malformed (*why, a
//  static sentence). Once complete or failed, feed no more.
int  ah_httpresp_feed (ah_httpresp_t *self, const uint8_t *data, size_t size, size_t *used,
                       ah_httpresp_body_fn *body_fn, void *ud, const char **why);
//  The connection ended: 1 when that completes the response (a body to
//  the close), else -1 with *why.
int  ah_httpresp_eof (ah_httpresp_t *self, const char **why);
//  True once the head was read (status set).
bool ah_httpresp_has_head (const ah_httpresp_t *self);

#endif
