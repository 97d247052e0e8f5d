/*  actors/api/sub.c: internal requests (api_int.h "Internal requests"):
    a route served for another of the API's parts, MCP's tools (mcp.c),
    by the very code that serves it over a socket.

    DESIGN. The API's thread only. An internal request is a conn_t of its
    own (heap, wsi NULL, conn->sub pointing back here). Its request is
    written as bytes into conn->in, and http.c reads it as any
    connection's: framing, the route, who asks and the tenant, the body's
    checks, the handler, a
    streamed body fed to its consumer with its back-pressure; only the
    token is not read again: the parent's who is judged against the
    route (api_auth_as). What http.c
    would write to the socket comes here instead (api_sub_take), and a
    round on a 0 ms timer of the API's loop stands for lws's WRITEABLE
    (api_sub_kick arms it). Every step runs from that timer, never inside
    the caller's own call, so a handler that answers at once never
    re-enters the code that asked: at the end of the API's turn (the
    actor's flush, api_conns_flush) when asked during one, else on the
    timer. The answer is kept whole (at most
    API_SUB_MAX bytes of body), then parsed back: status, Content-Type,
    the body de-chunked.                                                 */
#include "actors/api/api_int.h"

#include <string.h>

#define SUB_HEAD_ROOM   (64u << 10)     //  the answer's head and chunk framing beyond the body's cap

struct api_sub_t {
    conn_t conn;
    api_t *api;
    api_sub_fn *done;
    void *owner;
    ah_buf_t answer;                //  the bytes http.c wrote, as written
    ah_lwsloop_timer_t timer;       //  a round outside a turn
    bool armed;
    bool due;                       //  on api->subs_due: a round at the turn's end
    api_sub_t *due_next;
    bool started;                   //  conn->in handed to http.c
    bool ended;                     //  the answer is whole
    bool over;                      //  ... or went over the cap
    bool failed;                    //  ... or the connection had to close
    who_t who;                      //  the parent's, as its token was judged
};

//  s's n bytes percent-encoded into buf (unreserved bytes as they are,
//  '/' too when slash).
void api_url_encode (ah_buf_t *buf, const char *s, size_t n, bool slash)
{
    static const char hex [] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) s [i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
        ||  c == '-' || c == '.' || c == '_' || c == '~' || (slash && c == '/'))
            ah_buf_append (buf, &c, 1);
        else {
            char esc [3] = { '%', hex [c >> 4], hex [c & 15] };
            ah_buf_append (buf, esc, 3);
        }
    }
}

static void s_round (ah_lwsloop_timer_t *timer, void *arg);

//  A round soon: at the end of the API's turn when in one (the actor's
//  flush: no round of the loop between), else on a 0 ms timer.
void api_sub_kick (api_sub_t *self)
{
    if (self->armed || self->due)
        return;
    if (ah_actor_flush_later (self->api->actor)) {
        self->due = true;
        self->due_next = self->api->subs_due;
        self->api->subs_due = self;
        return;
    }
    self->armed = true;
    ah_lwsloop_timer_set (self->api->loop, &self->timer, 0, s_round, self);
}

void api_subs_run (api_t *api)
{
    while (api->subs_due) {
        api_sub_t *self = api->subs_due;
        api->subs_due = self->due_next;
        self->due = false;
        self->due_next = NULL;
        s_round (NULL, self);       //  self may be gone after
    }
}

static void s_undue (api_sub_t *self)
{
    for (api_sub_t **p = &self->api->subs_due; self->due && *p; p = &(*p)->due_next)
        if (*p == self) {
            *p = self->due_next;
            self->due = false;
            break;
        }
}

int api_sub_take (api_sub_t *self, const void *data, size_t n)
{
    if (ah_buf_size (&self->answer) + n > API_SUB_MAX + SUB_HEAD_ROOM
    ||  ah_buf_append (&self->answer, data, n)) {
        self->over = true;
        return -1;
    }
    return 0;
}

void api_sub_ended (api_sub_t *self)
{
    self->ended = true;
}

int api_sub_auth (api_sub_t *self, req_t *r)
{
    return api_auth_as (r, &self->who);
}

char *api_error_of (const uint8_t *body, size_t size)
{
    json_t *j = json_loadb ((const char *) body, size, 0, NULL);
    const char *e = json_string_value (json_object_get (j, "error"));
    char *copy = e ? strdup (e) : NULL;
    json_decref (j);
    return copy;
}

//  A chunked body (as http.c frames it: hex size, CRLF, bytes, CRLF;
//  0 ends) into out. 0 / -1.
static int s_dechunk (const uint8_t *p, size_t n, ah_buf_t *out)
{
    size_t i = 0;
    while (i < n) {
        size_t size = 0, digits = 0;
        for (; i < n && p [i] != '\r'; i++, digits++) {
            int c = p [i];
            int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (v < 0 || digits > 12)
                return -1;
            size = size * 16 + (size_t) v;
        }
        if (!digits || i + 2 > n || p [i + 1] != '\n')
            return -1;
        i += 2;
        if (size == 0)
            return 0;
        if (size > n - i || n - i - size < 2 || ah_buf_append (out, p + i, size))
            return -1;
        i += size + 2;
    }
    return -1;                      //  cut before its last chunk
}

//  This layer's own answer, when the route's cannot be handed on.
static void s_own (api_sub_fn *done, void *owner, int code, const char *sentence)
{
    char body [200];
    snprintf (body, sizeof body, "{\"error\":\"%s\"}", sentence);
    done (owner, code, "application/json", (const uint8_t *) body, strlen (body));
}

#define SUB_OVER    "the answer is over the 8 MiB an internal request carries: use the REST API for it"

//  The answer parsed and handed to done, which may destroy self.
static void s_finish (api_sub_t *self)
{
    api_sub_fn *done = self->done;
    void *owner = self->owner;
    self->done = NULL;
    if (self->conn.state != CONN_CLOSED)
        api_conn_closed (&self->conn);      //  a request still served ends here
    if (!done)
        return;
    const char *text = (const char *) ah_buf_head (&self->answer);
    size_t n = ah_buf_size (&self->answer);
    const char *end = n && self->ended ? memmem (text, n, "\r\n\r\n", 4) : NULL;
    int status = 0;
    if (end && n > 12 && strncmp (text, "HTTP/1.1 ", 9) == 0)
        status = atoi (text + 9);
    if (self->over || self->failed || !end || status < 100) {
        if (self->over)
            s_own (done, owner, 413, SUB_OVER);
        else
            s_own (done, owner, 502, "the answer broke off before its end");
        return;
    }
    char type [128] = "";
    bool chunked = false;
    for (const char *line = memchr (text, '\n', (size_t) (end - text)); line && line < end; ) {
        line++;
        const char *eol = memchr (line, '\r', (size_t) (end + 2 - line));
        if (!eol)
            break;
        size_t len = (size_t) (eol - line);
        if (len > 14 && strncasecmp (line, "Content-Type: ", 14) == 0)
            snprintf (type, sizeof type, "%.*s", (int) (len - 14), line + 14);
        if (len == 26 && strncasecmp (line, "Transfer-Encoding: chunked", 26) == 0)
            chunked = true;
        line = eol + 1;
    }
    const uint8_t *body = (const uint8_t *) end + 4;
    size_t size = n - (size_t) (end + 4 - text);
    ah_buf_t plain;
    ah_buf_init (&plain, 0);
    if (chunked && s_dechunk (body, size, &plain)) {
        ah_buf_free (&plain);
        s_own (done, owner, 502, "the answer's chunks broke off");
        return;
    }
    if (chunked) {
        body = ah_buf_head (&plain);
        size = ah_buf_size (&plain);
    }
    //  The cap is the body's, to the byte: the head room taken above is
    //  for the head and the chunks' framing, not for more body.
    if (size > API_SUB_MAX)
        s_own (done, owner, 413, SUB_OVER);
    else
        done (owner, status, type, body ? body : (const uint8_t *) "", size);
    ah_buf_free (&plain);
}

//  A round: the request read (first), one write as a WRITEABLE would.
static void s_round (ah_lwsloop_timer_t *timer, void *arg)
{
    api_sub_t *self = arg;
    ah_actor_t *actor = self->api->actor;
    if (timer)
        self->armed = false;
    ah_actor_turn_begin (actor);
    conn_t *conn = &self->conn;
    if (!self->started) {
        self->started = true;
        api_conn_process (conn);
    }
    if (!self->ended && conn->state != CONN_CLOSED && api_conn_writeable (conn) < 0)
        self->failed = true;
    if (self->ended || self->failed || self->over)
        s_finish (self);            //  self may be gone
    ah_actor_turn_end (actor);
}

api_sub_t *api_sub_new (req_t *parent, const char *method, const char *target, const char *content_type,
                        const void *body, size_t size, api_sub_fn *done, void *owner)
{
    api_sub_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->api = parent->api;
    self->done = done;
    self->owner = owner;
    conn_t *conn = &self->conn;
    conn->api = parent->api;
    conn->sub = self;
    conn->state = CONN_HEAD;
    ah_buf_init (&conn->in, 0);
    ah_buf_init (&conn->out, 0);
    ah_buf_init (&self->answer, 0);
    conn->req.conn = conn;
    conn->req.api = parent->api;
    ah_buf_t *in = &conn->in;
    int rc = ah_buf_appendf (in, "%s %s", method, target);
    const char *tenant = api_query (parent, "tenant");
    if (tenant) {
        rc |= ah_buf_append (in, strchr (target, '?') ? "&tenant=" : "?tenant=", 8);
        api_url_encode (in, tenant, strlen (tenant), false);
    }
    rc |= ah_buf_appendf (in, " HTTP/1.1\r\n");
    //  Who asks: the parent as its credentials were judged (api_auth_as
    //  judges them against this route), with the headers the route's
    //  checks read (parsed header values hold no CR or LF).
    self->who = parent->who;
    static const char *const carried [] = { "host", "x-agenthold-csrf", "origin", "x-agenthold-run" };
    for (size_t i = 0; i < sizeof carried / sizeof carried [0]; i++) {
        const char *value = ah_http_header (&parent->head, carried [i]);
        if (value && ah_http_header_count (&parent->head, carried [i]) == 1)
            rc |= ah_buf_appendf (in, "%s: %s\r\n", carried [i], value);
    }
    if (content_type)
        rc |= ah_buf_appendf (in, "Content-Type: %s\r\n", content_type);
    rc |= ah_buf_appendf (in, "Connection: close\r\nContent-Length: %zu\r\n\r\n", size);
    if (size)
        rc |= ah_buf_append (in, body, size);
    if (rc) {
        api_sub_destroy (&self);
        return NULL;
    }
    api_sub_kick (self);
    return self;
}

void api_sub_destroy (api_sub_t **self_p)
{
    api_sub_t *self = *self_p;
    if (!self)
        return;
    *self_p = NULL;
    self->done = NULL;
    api_conn_closed (&self->conn);  //  the request's state freed as when a client leaves
    ah_lwsloop_timer_cancel (&self->timer);
    s_undue (self);
    ah_buf_free (&self->answer);
    free (self);
}
