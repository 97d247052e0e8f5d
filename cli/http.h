/*  cli/http.h: the agenthold command's HTTP/1.1 client (the REST calls,
    the event stream, file transfers), over a plain socket or TLS
    (cli/tls.h), the response read by proto/httpresp.h.

    Why not libcurl: loading it (33 shared libraries, every one bound at
    load time) cost the command more than a sandbox's stop takes, and the
    command needs one request a connection to one server (bench/cli,
    docs/cli.md).

    One request a connection ("Connection: close"). A request is started
    (connect, send the head and the body, read until the answer's head is
    in), then pumped: the body comes to on_body in pieces, as it arrives.
    Deadlines: connect_ms for the connection (and TLS), timeout_ms for the
    whole exchange (0: none; a stream pumps with its own waits). An
    upload is streamed from a FILE; an answer that comes before the upload
    ended (a refusal) is read and the upload stops.                  */
#ifndef AH_CLI_HTTP_H
#define AH_CLI_HTTP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "proto/httpresp.h"
#include "proto/ws.h"

typedef struct {
    const char *method;             //  "GET"
    const char *url;                //  http(s)://host[:port]/target
    const char *ca;                 //  PEM to trust for https; NULL: the system's
    const char *headers;            //  more header lines, each ending "\r\n"; or NULL
    const void *body;               //  sent with its Content-Length; or NULL
    size_t body_size;
    FILE *upload;                   //  or a body read from this file, upload_size bytes
    int64_t upload_size;
    ah_httpresp_body_fn *on_body;   //  the answer's body, in pieces (NULL: dropped)
    void *ud;
    int connect_ms;                 //  0: 10 s
    int timeout_ms;                 //  the whole exchange; 0: no limit
} ah_hc_req_t;

typedef struct ah_hc_t ah_hc_t;

//  Connects, sends, and reads the answer's head. NULL with *err (caller
//  frees): unreachable, refused by TLS, the deadline, a malformed answer.
ah_hc_t *ah_hc_start (const ah_hc_req_t *req, char **err);
int  ah_hc_status (const ah_hc_t *self);
//  A new limit for the rest of the exchange, from now (0: none): a
//  stream whose head came in time.
void ah_hc_set_timeout (ah_hc_t *self, int timeout_ms);
//  Reads what comes within wait_ms (-1: until the exchange's deadline)
//  and hands the body on: 0 not complete yet, 1 complete, 2 on_body
//  stopped, -1 failed (*err, caller frees: the connection broke, the
//  deadline, a malformed answer).
int  ah_hc_pump (ah_hc_t *self, int wait_ms, char **err);
void ah_hc_destroy (ah_hc_t **self_p);

//  The whole exchange: the answer's status, or 0 with *err (caller
//  frees). A status with a failed body (broken off, malformed) is 0 too.
//  *malformed (may be NULL): a 0 because the answer broke HTTP's rules
//  (proto/httpresp.h), not because the server could not be reached or
//  went away.
long ah_hc_perform (const ah_hc_req_t *req, bool *malformed, char **err);

//  A connection to url's server (plain or TLS), as a proto/ws transport:
//  0 with *io, or -1 with err. For the terminal's WebSocket too.
int  ah_hc_connect (const ah_ws_url_t *url, const char *ca, int timeout_ms, ah_ws_io_t *io,
                    char *err, size_t err_size);

//  s percent-encoded (all but A-Z a-z 0-9 - _ . ~, and '/' when
//  keep_slash). Caller frees; NULL: no memory.
char *ah_hc_escape (const char *s, bool keep_slash);

#endif
