/*  proto/httpinject.h: a header added to every request of an HTTP/1.1
    client's byte stream (docs/egress.md "Secrets"): the server, having
    terminated the sandbox's TLS for a host a tenant attached a secret
    to, passes the decrypted requests through this before they go on to
    the real host.

    Each request's head is read whole (proto/http.c's strict parser:
    CRLF only, no control bytes, no folding, 16 KiB, 64 header lines),
    then checked: an origin-form target (or `*`), not CONNECT, exactly one
    Host naming the connection's host (and its port, if any), at most one
    Content-Length of digits alone, a Transfer-Encoding only as
    `chunked` alone and never with a Content-Length (no request
    smuggling past this). The head goes on as it came, every line whose
    name is the secret's (any case) dropped and the secret's line added
    before its end. The body follows untouched, its length known from
    Content-Length or the chunked framing (each chunk size line, the
    trailer section, checked as it passes), so the next request of a
    keep-alive connection, pipelined or not, is found and gets the
    header too. A request that asks to upgrade the connection (Upgrade)
    ends the parsing: what follows passes as it is.

    Anything malformed stops the stream for good (-1, *why a static
    sentence that never holds a byte of the input). Pure byte work: no
    I/O; the value is wiped when the state goes.                         */
#ifndef AH_PROTO_HTTPINJECT_H
#define AH_PROTO_HTTPINJECT_H

#include "proto/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ah_http_inject_t ah_http_inject_t;

//  For requests to host (proto/egress.h's normalised form; an IPv6
//  literal bare) on port: name: value added to each. NULL out of memory.
ah_http_inject_t *ah_http_inject_new (const char *host, int port, const char *name, const char *value);
void ah_http_inject_destroy (ah_http_inject_t **self_p);

//  n more bytes of the client's stream: what goes upstream appended to
//  out (a head once it is whole, body bytes as they come). 0, or -1
//  with *why: the stream is refused from here on.
int  ah_http_inject_feed (ah_http_inject_t *self, const uint8_t *in, size_t n, ah_buf_t *out, const char **why);

//  Requests that went on with the header; whether the stream passes
//  untouched now (after an upgrade).
uint64_t ah_http_inject_requests (const ah_http_inject_t *self);
bool     ah_http_inject_raw (const ah_http_inject_t *self);

#endif
