/*  actors/api/http.c: a connection and the requests on it (see api_int.h).

    DESIGN. The listener is raw: lws accepts, reads and writes bytes, and
    this file speaks HTTP/1.1 over them, so the request line is routed as
    the client sent it (proto/http.h), Expect: 100-continue is answered,
    a refused upgrade gets a status, and nothing of a request is decided
    by a library first.

    A connection serves one request at a time: bytes that arrive ahead of
    the next request (pipelining) wait in conn->in. Its states:
      HEAD      reading a request head
      BODY      reading the body (into req->body, into the route's
                consumer for R_STREAM routes, or dropped for a refused one)
      HANDLING  the handler has it: the answer is being made or written
      WS        a WebSocket now (ws.c)
    Everything written goes through conn->out, one lws_write of at most
    API_CHUNK per WRITEABLE. Reading pauses while conn->in holds more than
    API_IN_HIGH (a consumer that does not take a streamed body, a client
    that pipelines without reading).

    An upload's body spliced from the socket is upload.c's, the JSON
    helpers json.c's.                                                    */
#include "actors/api/api_int.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

//  --------------------------------------------------------------------
//  Writing

//  A WebSocket's frames (a terminal's output) are written when the turn
//  ends (api_conns_flush), straight to the socket if nothing waits ahead
//  of them in lws: one send, no WRITEABLE round. Everything else, and
//  any write outside a turn, waits for WRITEABLE.
void api_conn_want_write (conn_t *conn)
{
    if (conn->state == CONN_CLOSED || conn->flush_queued)
        return;
    if (conn->sub) {
        api_sub_kick (conn->sub);   //  an internal request has no socket (sub.c)
        return;
    }
    if (conn->state == CONN_WS && !conn->closing && ah_actor_flush_later (conn->api->actor)) {
        conn->flush_queued = true;
        conn->flush_next = conn->api->flush;
        conn->api->flush = conn;
        return;
    }
    lws_callback_on_writable (conn->wsi);
}

static void s_flush_forget (conn_t *conn)
{
    if (!conn->flush_queued)
        return;
    for (conn_t **p = &conn->api->flush; *p; p = &(*p)->flush_next)
        if (*p == conn) {
            *p = conn->flush_next;
            break;
        }
    conn->flush_queued = false;
}

void api_want_write (req_t *r)
{
    api_conn_want_write (r->conn);
}

bool api_req_alive (const req_t *r)
{
    return r->conn && r->conn->state != CONN_CLOSED;
}

int api_out (req_t *r, const void *data, size_t size)
{
    if (ah_buf_append (&r->conn->out, data, size))
        return -1;
    api_want_write (r);
    return 0;
}

int api_out_chunk (req_t *r, const void *data, size_t size, bool last)
{
    ah_buf_t *out = &r->conn->out;
    int rc = 0;
    if (size) {
        if (r->chunked)
            rc |= ah_buf_appendf (out, "%zx\r\n", size);
        rc |= ah_buf_append (out, data, size);
        if (r->chunked)
            rc |= ah_buf_append (out, "\r\n", 2);
    }
    if (last && r->chunked)
        rc |= ah_buf_append (out, "0\r\n\r\n", 5);
    api_want_write (r);
    return rc ? -1 : 0;
}

size_t api_out_pending (req_t *r)
{
    return ah_buf_size (&r->conn->out);
}

static const char *s_method_names [] = { "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS" };

//  The status line and headers. length >= 0: Content-Length; -1:
//  chunked; -2: the body ends when the connection closes.
static void s_head (req_t *r, int status, const char *type, int64_t length, unsigned allowed)
{
    ah_buf_t *out = &r->conn->out;
    r->status = status;
    api_metrics_request (r->api->metrics, r->route ? r->route->pattern : NULL, status);
    if (length == -2)
        r->close_after = true;
    ah_buf_appendf (out, "HTTP/1.1 %d %s\r\n", status, ah_http_reason (status));
    if (type)
        ah_buf_appendf (out, "Content-Type: %s\r\n", type);
    if (length >= 0)
        ah_buf_appendf (out, "Content-Length: %lld\r\n", (long long) length);
    else if (length == -1)
        ah_buf_appendf (out, "Transfer-Encoding: chunked\r\n");
    if (allowed) {
        ah_buf_appendf (out, "Allow: ");
        bool first = true;
        for (size_t i = 0; i < sizeof s_method_names / sizeof s_method_names [0]; i++)
            if (allowed & (1u << i)) {
                ah_buf_appendf (out, "%s%s", first ? "" : ", ", s_method_names [i]);
                first = false;
            }
        ah_buf_appendf (out, "\r\n");
    }
    if (status == 401)
        ah_buf_appendf (out, "WWW-Authenticate: Bearer\r\n");
    if (r->set_cookie [0])
        ah_buf_appendf (out, "Set-Cookie: %s\r\n", r->set_cookie);
    if (r->location)
        ah_buf_appendf (out, "Location: %s\r\n", r->location);
    ah_buf_appendf (out, "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n");
    if (r->close_after)
        ah_buf_appendf (out, "Connection: close\r\n");
    ah_buf_appendf (out, "\r\n");
}

//  A refused body: read and drop it when it is small enough, so clients
//  that send it all before reading see the answer; else close after.
static void s_refuse_body (req_t *r)
{
    if (r->body_done || r->content_length <= r->body_seen)
        return;
    r->discard = true;
    if ((r->expect_continue && !r->continue_sent) || r->content_length > API_MAX_DISCARD)
        r->close_after = r->abandon = true;
}

static void s_respond_bytes (req_t *r, int status, const char *type, const void *data, size_t n,
                             unsigned allowed)
{
    s_refuse_body (r);
    r->responded = true;
    r->streaming = false;
    s_head (r, status, type, (int64_t) n, allowed);
    ah_buf_append (&r->conn->out, data, n);
    api_want_write (r);
    api_conn_process (r->conn);     //  a body being dropped goes on
}

static void s_respond_body (req_t *r, int status, json_t *json, unsigned allowed)
{
    if (r->responded || !api_req_alive (r)) {
        json_decref (json);
        return;
    }
    char *text = json_dumps (json ? json : json_object (), JSON_COMPACT);
    json_decref (json);
    if (!text) {
        status = 500;
        text = strdup ("{\"error\":\"cannot encode the response\"}");
    }
    s_respond_bytes (r, status, "application/json", text, text ? strlen (text) : 0, allowed);
    free (text);
}

void api_respond_text (req_t *r, int status, const char *content_type, ah_buf_t *body)
{
    api_respond_bytes (r, status, content_type, ah_buf_head (body), ah_buf_size (body));
}

void api_respond_bytes (req_t *r, int status, const char *content_type, const void *data, size_t n)
{
    if (r->responded || !api_req_alive (r))
        return;
    s_respond_bytes (r, status, content_type, data, n, 0);
}

void api_respond (req_t *r, int status, json_t *json)
{
    s_respond_body (r, status, json, 0);
}

static void s_respond_errorv (req_t *r, int status, unsigned allowed, const char *fmt, va_list ap)
{
    char message [1024];
    vsnprintf (message, sizeof message, fmt, ap);
    if (status >= 500)
        ah_warn (AREA, "%s %s -> %d %s", r->head.method, r->path, status, message);
    else
        ah_debug (AREA, "%s %s -> %d %s", r->head.method, r->path, status, message);
    json_t *body = json_object ();
    json_object_set_new (body, "error", api_json_text (message));
    s_respond_body (r, status, body, allowed);
}

void api_respond_error (req_t *r, int status, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    s_respond_errorv (r, status, 0, fmt, ap);
    va_end (ap);
}

static void s_respond_allowed (req_t *r, unsigned allowed, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void s_respond_allowed (req_t *r, unsigned allowed, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    s_respond_errorv (r, 405, allowed, fmt, ap);
    va_end (ap);
}

void api_respond_method (req_t *r, unsigned allowed)
{
    char names [64] = "";
    for (size_t i = 0; i < sizeof s_method_names / sizeof s_method_names [0]; i++)
        if (allowed & (1u << i))
            snprintf (names + strlen (names), sizeof names - strlen (names), "%s%s",
                      *names ? ", " : "", s_method_names [i]);
    s_respond_allowed (r, allowed, "%s takes %s", r->path, names);
}

void api_respond_stream (req_t *r, int status, const char *content_type, int64_t length)
{
    if (r->responded || !api_req_alive (r))
        return;
    r->responded = true;
    r->streaming = true;
    r->chunked = length == -1;
    s_head (r, status, content_type, length, 0);
    api_want_write (r);
}

void api_respond_redirect (req_t *r, int status, const char *location)
{
    if (r->responded || !api_req_alive (r))
        return;
    r->location = location;
    s_respond_bytes (r, status, NULL, "", 0, 0);
    r->location = NULL;
}

void api_continue (req_t *r)
{
    if (r->expect_continue && !r->continue_sent && !r->responded && api_req_alive (r)) {
        ah_buf_append (&r->conn->out, "HTTP/1.1 100 Continue\r\n\r\n", 25);
        api_want_write (r);
    }
    r->continue_sent = true;
    api_conn_process (r->conn);
}

void api_body_resume (req_t *r)
{
    if (api_req_alive (r))
        api_conn_process (r->conn);
}

//  --------------------------------------------------------------------
//  A request's life

//  lws's timeout of the connection; an internal request (sub.c) has none.
static void s_timeout (conn_t *conn, enum pending_timeout reason, int secs)
{
    if (conn->wsi)
        lws_set_timeout (conn->wsi, reason, secs);
}

static void s_req_free (req_t *r)
{
    api_splice_stop (r->conn);      //  the consumer that read the socket goes
    if (r->ext_ops && r->ext_ops->free)
        r->ext_ops->free (r);
    r->ext = NULL;
    r->ext_ops = NULL;
    api_unpark (r);
    ah_api_events_wake_cancel (r->api->events, r);
    for (int i = 0; i < API_MAX_PARAMS; i++)
        free (r->params [i]);
    for (size_t i = 0; i < r->nquery; i++) {
        free (r->qkey [i]);
        free (r->qval [i]);
    }
    ah_http_head_clear (&r->head);
    ah_buf_free (&r->body);
    conn_t *conn = r->conn;
    api_t *api = r->api;
    memset (r, 0, sizeof *r);
    r->conn = conn;
    r->api = api;
}

//  The answer is out: the connection serves the next request, or closes.
static void s_req_done (conn_t *conn)
{
    req_t *r = &conn->req;
    bool close = r->close_after;
    s_req_free (r);
    if (conn->sub) {
        conn->state = CONN_CLOSED;
        api_sub_ended (conn->sub);  //  its answer is whole
        return;
    }
    if (close) {
        conn->closing = true;       //  s_writeable closes once all is sent
        return;
    }
    conn->state = CONN_HEAD;
    s_timeout (conn, PENDING_TIMEOUT_USER_OK, API_IDLE_S);
    api_conn_process (conn);
}

void api_conn_upgraded (conn_t *conn)
{
    conn->req.close_after = false;
    s_req_free (&conn->req);
    conn->state = CONN_WS;
    s_timeout (conn, NO_PENDING_TIMEOUT, 0);
}

void api_conn_pipe (req_t *r)
{
    conn_t *conn = r->conn;
    r->piped = true;
    r->close_after = true;
    r->content_length = UINT64_MAX;
    r->body_done = false;
    conn->state = CONN_BODY;
    s_timeout (conn, NO_PENDING_TIMEOUT, 0);
    api_conn_process (conn);        //  what the client sent after its head
}

static method_t s_method (const char *name)
{
    for (size_t i = 0; i < sizeof s_method_names / sizeof s_method_names [0]; i++)
        if (streq (s_method_names [i], name))
            return (method_t) (1u << i);
    return 0;
}

//  Content-Length, Transfer-Encoding, Expect, Connection: 0, or the
//  request is answered and the connection closes after.
static int s_framing (req_t *r)
{
    const ah_http_head_t *h = &r->head;
    if (ah_http_header (h, "transfer-encoding")) {
        r->close_after = true;
        api_respond_error (r, 411, "send the body with a Content-Length (no Transfer-Encoding)");
        return -1;
    }
    size_t n = ah_http_header_count (h, "content-length");
    if (n > 0) {
        const char *first = ah_http_header (h, "content-length");
        for (size_t i = 0; i < h->nheaders; i++)
            if (streq (h->headers [i].name, "content-length") && !streq (h->headers [i].value, first)) {
                r->close_after = true;
                api_respond_error (r, 400, "Content-Length given twice, differently");
                return -1;
            }
        const char *p = first;
        unsigned long long v = 0;
        bool ok = *p != 0 && strlen (p) <= 19;
        for (; ok && *p; p++) {
            if (*p < '0' || *p > '9')
                ok = false;
            else
                v = v * 10 + (unsigned) (*p - '0');
        }
        if (!ok) {
            r->close_after = true;
            api_respond_error (r, 400, "bad Content-Length '%.40s'", first);
            return -1;
        }
        r->content_length = v;
    }
    const char *expect = ah_http_header (h, "expect");
    if (expect) {
        if (strcasecmp (expect, "100-continue") != 0) {
            r->close_after = true;
            api_respond_error (r, 417, "only 'Expect: 100-continue' is understood");
            return -1;
        }
        r->expect_continue = true;
    }
    if (ah_http_header_has (h, "connection", "close") || (r->head.minor == 0
        && !ah_http_header_has (h, "connection", "keep-alive")))
        r->close_after = true;
    return 0;
}

//  A complete head: frame, route, authenticate, then run the handler now
//  (no body, or a streamed one) or once the body is in.
static void s_begin (conn_t *conn)
{
    req_t *r = &conn->req;
    conn->state = CONN_BODY;
    s_timeout (conn, NO_PENDING_TIMEOUT, 0);
    const char *target = r->head.target;
    const char *q = strchr (target, '?');
    size_t plen = q ? (size_t) (q - target) : strlen (target);
    snprintf (r->path, sizeof r->path, "%.*s", (int) plen, target);
    r->method = s_method (r->head.method);
    if (s_framing (r))
        return;
    if (!r->method) {
        api_respond_error (r, 501, "method %s is not implemented", r->head.method);
        return;
    }
    char why [512];
    unsigned allowed = 0;
    int status = api_route (r, why, sizeof why, &allowed);
    if (status == 400) {
        api_respond_error (r, 400, "%s", why);
        return;
    }
    if (!(r->route && (r->route->flags & R_PUBLIC)) && (conn->sub ? api_sub_auth (conn->sub, r) : api_auth (r)))
        return;                     //  answered
    const char *run = ah_http_header (&r->head, "x-agenthold-run");
    if (run) {
        const char *bad = api_run_check (run);
        if (bad) {
            api_respond_error (r, 400, "header X-Agenthold-Run %s", bad);
            return;
        }
        snprintf (r->run, sizeof r->run, "%s", run);
    }
    if (status == 405) {
        s_respond_allowed (r, allowed, "%s", why);
        return;
    }
    if (status) {
        api_respond_error (r, status, "%s", why);
        return;
    }
    const route_t *route = r->route;
    bool upgrade = ah_http_header_has (&r->head, "upgrade", "websocket");
    if ((route->flags & R_UPGRADE) && !upgrade) {
        api_respond_error (r, 426, "%s is a WebSocket: send Upgrade: websocket", r->path);
        return;
    }
    if (!(route->flags & (R_UPGRADE | R_PIPE)) && upgrade) {
        api_respond_error (r, 400, "%s is not a WebSocket", r->path);
        return;
    }
    uint64_t cap = (route->flags & R_STREAM) ? AH_API_MAX_UPLOAD
                 : (route->flags & R_RPC) ? AH_API_MAX_RPC : AH_API_MAX_BODY;
    if (r->content_length > cap) {
        api_respond_error (r, 413, "request body of %llu bytes is over the limit of %llu bytes",
                           (unsigned long long) r->content_length, (unsigned long long) cap);
        return;
    }
    if (r->content_length > 0 && !(route->flags & (R_BODY | R_STREAM))) {
        api_respond_error (r, 400, "%s takes no body", r->path);
        return;
    }
    //  A proxied request (R_RAW) without one has no body, as HTTP says.
    if ((route->flags & R_STREAM) && !(route->flags & R_RAW) && !ah_http_header (&r->head, "content-length")) {
        r->close_after = true;
        api_respond_error (r, 411, "an upload needs a Content-Length");
        return;
    }
    if (r->content_length == 0 || (route->flags & R_STREAM)) {
        r->body_done = r->content_length == 0;
        r->handled = true;
        conn->state = r->body_done ? CONN_HANDLING : CONN_BODY;
        route->fn (r);
        return;
    }
    //  A JSON body: all checks passed, so ask for it.
    api_continue (r);
}

//  Body bytes from conn->in: dropped, kept or streamed. false when the
//  connection must wait (the consumer is full, or not ready).
static bool s_body (conn_t *conn)
{
    req_t *r = &conn->req;
    uint64_t want = r->content_length - r->body_seen;
    size_t have = ah_buf_size (&conn->in);
    size_t n = want < have ? (size_t) want : have;
    if (n > 0) {
        if (r->discard)
            ;
        else if (r->route && (r->route->flags & R_STREAM)) {
            if (!r->continue_sent || !r->ext_ops || !r->ext_ops->body)
                return false;
            n = r->ext_ops->body (r, ah_buf_head (&conn->in), n);
        }
        else if (ah_buf_append (&r->body, ah_buf_head (&conn->in), n)) {
            r->close_after = true;
            api_respond_error (r, 503, "out of memory for the request body");
            return true;
        }
        ah_buf_consume (&conn->in, n);
        r->body_seen += n;
        if (!api_req_alive (r))
            return false;
    }
    if (r->body_seen < r->content_length)
        return false;
    r->body_done = true;
    conn->state = CONN_HANDLING;
    if (r->discard) {
        api_want_write (r);         //  the held answer may go now
        return true;
    }
    if (!r->route || r->responded)
        return true;                //  refused before its handler: nothing to run
    if (r->route->flags & R_STREAM) {
        if (r->ext_ops && r->ext_ops->body_end)
            r->ext_ops->body_end (r);
    }
    else if (!r->handled && (r->route->flags & R_RPC)) {
        r->handled = true;
        r->route->fn (r);           //  its handler answers a bad body in its protocol
    }
    else if (!r->handled) {
        r->handled = true;
        //  A JSON body is a JSON object, whether the route reads it or not
        //  (its handler parses it again: bodies are small).
        json_t *obj = api_body_object (r, true);
        if (!obj)
            return true;
        int bad = api_body_check (r, obj);
        json_decref (obj);
        if (!bad)
            r->route->fn (r);
    }
    return true;
}

//  A streamed body's bytes as lws read them, when nothing waits in
//  conn->in before them: straight to the route's consumer, not copied
//  into conn->in first. Returns how many it took (what is left goes to
//  conn->in; api_conn_process then goes on as with any body byte).
static size_t s_body_direct (conn_t *conn, const void *data, size_t size)
{
    req_t *r = &conn->req;
    if (conn->processing || conn->state != CONN_BODY || ah_buf_size (&conn->in) || r->discard
    ||  !r->route || !(r->route->flags & R_STREAM) || !r->continue_sent
    ||  !r->ext_ops || !r->ext_ops->body || r->body_seen >= r->content_length)
        return 0;
    uint64_t want = r->content_length - r->body_seen;
    size_t n = want < size ? (size_t) want : size;
    conn->processing = true;        //  a resume from inside waits for api_conn_process below
    n = r->ext_ops->body (r, data, n);
    conn->processing = false;
    r->body_seen += n;
    return n;
}

//  A body that stops coming: body_stall_s after the last byte read or
//  taken, the connection closes (a streamed upload is dropped, never
//  kept half). Not while we are the ones who wait: our consumer not ready
//  yet (an upload whose sandbox is waking) or full (reading paused).
void api_conn_stall_watch (conn_t *conn)
{
    req_t *r = &conn->req;
    bool reading = conn->state == CONN_BODY || (conn->state == CONN_HANDLING && r->discard);
    bool ready = !(r->route && (r->route->flags & R_STREAM)) || r->discard
              || (r->continue_sent && r->ext_ops && r->ext_ops->body);
    bool waiting = conn->rx_paused || (conn->splicing && !conn->splice_watching);
    if (reading && !r->body_done && ready && !waiting && !r->piped)
        s_timeout (conn, PENDING_TIMEOUT_USER_OK, conn->api->body_stall_s);
    else if (conn->state == CONN_BODY || conn->state == CONN_HANDLING)
        s_timeout (conn, NO_PENDING_TIMEOUT, 0);
}

//  Take what conn->in holds as far as the state allows.
void api_conn_process (conn_t *conn)
{
    if (conn->processing || conn->state == CONN_CLOSED)
        return;                     //  the outer call goes on
    conn->processing = true;
    for (bool more = true; more && conn->state != CONN_CLOSED && !conn->closing; ) {
        more = false;
        req_t *r = &conn->req;
        switch (conn->state) {
            case CONN_HEAD: {
                if (ah_buf_size (&conn->in) == 0)
                    break;
                size_t used = 0;
                const char *why = NULL;
                int rc = ah_http_head_parse (ah_buf_head (&conn->in), ah_buf_size (&conn->in),
                                             &r->head, &used, &why);
                if (rc == 0)
                    break;
                if (rc < 0) {
                    //  Not a request we can read: say why and close.
                    conn->state = CONN_HANDLING;
                    snprintf (r->path, sizeof r->path, "(unreadable request)");
                    snprintf (r->head.method, sizeof r->head.method, "?");
                    r->close_after = true;
                    r->body_done = true;        //  nothing more is read: the answer, then close
                    ah_buf_clear (&conn->in);
                    api_respond_error (r, -rc, "%s", why ? why : "malformed request");
                    break;
                }
                ah_buf_consume (&conn->in, used);
                s_begin (conn);
                more = true;
                break;
            }
            case CONN_BODY:
                more = s_body (conn);
                break;
            case CONN_HANDLING:
                //  A refused request still has its body read and dropped.
                if (r->discard && !r->body_done)
                    more = s_body (conn);
                break;
            case CONN_WS:
                api_ws_rx (conn);
                break;
            case CONN_CLOSED:
                break;
        }
    }
    //  Read again once what waits is small.
    if (conn->rx_paused && ah_buf_size (&conn->in) < API_IN_HIGH / 2 && conn->state != CONN_CLOSED) {
        conn->rx_paused = false;
        lws_rx_flow_control (conn->wsi, 1);
    }
    if (conn->state != CONN_CLOSED && !conn->closing) {
        api_splice_start (conn);
        api_conn_stall_watch (conn);
    }
    conn->processing = false;
}

//  A connection that is to close does, once lws has sent what it kept of
//  a partial write too: -1 closes, 0 waits for the next WRITEABLE.
static int s_close_when_sent (conn_t *conn)
{
    if (!conn->closing || ah_buf_size (&conn->out) > 0)
        return 0;
    if (lws_partial_buffered (conn->wsi)) {
        api_conn_want_write (conn);
        return 0;
    }
    return -1;
}

//  One lws_write from conn->out; when it has drained, a streamed body is
//  asked for more, and a finished answer ends the request.
int api_conn_writeable (conn_t *conn)
{
    req_t *r = &conn->req;
    //  A refused request's answer waits until its body has been dropped.
    bool hold = r->discard && !r->body_done && !r->abandon && conn->state != CONN_WS;
    if (hold)
        return 0;
    if (ah_buf_size (&conn->out) == 0 && r->streaming && r->ext_ops && r->ext_ops->produce) {
        int rc = r->ext_ops->produce (r);
        if (rc < 0)
            return -1;
        if (rc == 0)
            r->streaming = false;
        else if (ah_buf_size (&conn->out) == 0)
            return 0;               //  the producer calls api_want_write when it has more
    }
    size_t n = ah_buf_size (&conn->out);
    if (n > 0) {
        if (conn->sub) {
            if (api_sub_take (conn->sub, ah_buf_head (&conn->out), n))
                return -1;          //  over its cap
        }
        else {
            if (n > API_CHUNK)
                n = API_CHUNK;
            if (lws_write (conn->wsi, ah_buf_head (&conn->out), n, LWS_WRITE_RAW) < (int) n)
                return -1;
        }
        ah_buf_consume (&conn->out, n);
        if (r->ext_ops && r->ext_ops->written)
            r->ext_ops->written (r, n);
        if (ah_buf_size (&conn->out) > 0 || r->streaming)
            api_conn_want_write (conn);
    }
    if (conn->state == CONN_WS) {
        api_ws_written (conn);
        return s_close_when_sent (conn);
    }
    if (ah_buf_size (&conn->out) == 0 && r->responded && !r->streaming && !conn->closing) {
        if (!r->body_done && !r->discard)
            return 0;               //  answered early; the body still streams in
        s_req_done (conn);
    }
    return conn->sub ? 0 : s_close_when_sent (conn);
}

void api_conns_flush (void *api_)
{
    api_t *api = api_;
    api_subs_run (api);             //  internal requests first: they may queue writes
    while (api->flush) {
        conn_t *conn = api->flush;
        api->flush = conn->flush_next;
        conn->flush_queued = false;
        conn->flush_next = NULL;
        if (conn->state == CONN_CLOSED)
            continue;
        if (conn->state != CONN_WS || conn->closing || lws_partial_buffered (conn->wsi))
            lws_callback_on_writable (conn->wsi);
        else
        if (api_conn_writeable (conn) < 0)
            lws_set_timeout (conn->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
    }
}

void api_conn_closed (conn_t *conn)
{
    if (conn->state != CONN_CLOSED) {
        conn_state_t was = conn->state;
        api_splice_watch (conn, false);
        s_flush_forget (conn);
        conn->state = CONN_CLOSED;
        if (was == CONN_WS)
            api_ws_gone (conn);
        s_req_free (&conn->req);
    }
    ah_buf_free (&conn->in);
    ah_buf_free (&conn->out);
}

static int s_serve (struct lws *wsi, enum lws_callback_reasons reason, void *user,
                    void *in, size_t len);

//  The callbacks that carry a connection's work are turns of the actor
//  (common/actor.h): what they hand the tunnel, and what the tunnel's
//  handlers send back, is delivered before the callback returns.
static int s_callback (struct lws *wsi, enum lws_callback_reasons reason, void *user,
                       void *in, size_t len)
{
    switch (reason) {
        case LWS_CALLBACK_RAW_ADOPT:
        case LWS_CALLBACK_RAW_RX:
        case LWS_CALLBACK_RAW_WRITEABLE:
        case LWS_CALLBACK_RAW_CLOSE: {
            ah_lwsloop_t *loop = ah_lwsloop_from_wsi (wsi);
            api_t *api = loop ? (api_t *) ah_lwsloop_user (loop) : NULL;
            ah_actor_t *actor = api ? api->actor : NULL;
            ah_actor_turn_begin (actor);
            int rc = s_serve (wsi, reason, user, in, len);
            ah_actor_turn_end (actor);
            return rc;
        }
        default:
            return s_serve (wsi, reason, user, in, len);
    }
}

static int s_serve (struct lws *wsi, enum lws_callback_reasons reason, void *user,
                    void *in, size_t len)
{
    conn_t *conn = user;
    switch (reason) {
        case LWS_CALLBACK_RAW_ADOPT: {
            if (!conn)
                return -1;
            api_t *api = ah_lwsloop_user (ah_lwsloop_from_wsi (wsi));
            memset (conn, 0, sizeof *conn);
            conn->wsi = wsi;
            conn->api = api;
            conn->state = CONN_HEAD;
            ah_buf_init (&conn->in, 0);
            ah_buf_init (&conn->out, LWS_PRE);
            conn->req.conn = conn;
            conn->req.api = api;
            lws_set_timeout (wsi, PENDING_TIMEOUT_USER_OK, API_IDLE_S);
            return 0;
        }
        case LWS_CALLBACK_RAW_RX: {
            if (!conn || conn->state == CONN_CLOSED)
                return -1;
            if (conn->splicing) {
                //  Bytes lws kept would come after some the consumer took:
                //  out of order. Never kept half: close.
                ah_error ("api", "%s: lws delivered body bytes while the body was spliced; closing",
                          conn->req.path);
                return -1;
            }
            size_t used = s_body_direct (conn, in, len);
            if (len > used && ah_buf_append (&conn->in, (const uint8_t *) in + used, len - used))
                return -1;
            if (ah_buf_size (&conn->in) > API_IN_HIGH && !conn->rx_paused) {
                conn->rx_paused = true;
                lws_rx_flow_control (wsi, 0);
            }
            api_conn_process (conn);
            if (conn->closing)
                api_conn_want_write (conn);
            return 0;
        }
        case LWS_CALLBACK_RAW_WRITEABLE:
            if (!conn || conn->state == CONN_CLOSED)
                return -1;
            return api_conn_writeable (conn);
        case LWS_CALLBACK_RAW_CLOSE:
            //  conn->api is unset when TLS failed before the adoption.
            if (conn && conn->api)
                api_conn_closed (conn);
            return 0;
        default:
            break;
    }
    return 0;
}

//  Reads and direct writes of up to 256 KiB (lws's default moves 4 KiB and
//  copies the rest of a write aside).
const struct lws_protocols api_http_protocol = {
    "ah-api", s_callback, sizeof (conn_t), API_CHUNK, 0, NULL, API_CHUNK
};
