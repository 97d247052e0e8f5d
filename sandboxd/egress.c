/*  sandboxd/egress.c: the sandbox's one way out (docs/egress.md): an
    HTTP proxy on 127.0.0.1 whose every connection is a stream sandboxd
    opens to the server over the tunnel (docs/tunnel.md, "egress").

    A connection to the proxy is a channel without a stream at first
    (K_EGRESS, id 0): its request head is read into ch->out (at most
    AH_HTTP_MAX_HEAD bytes, within EGRESS_HEAD_MS) and checked
    (proto/egress.h). Then sandboxd opens a stream with the header
    {"ch": "egress", "host", "port", "kind": "connect"|"http"} and waits
    for the server's answer (EGRESS_REPLY_MS): ok, and the connection
    becomes a port channel's (port.c: the socket's bytes and the
    stream's both ways, within the windows), after "200 Connection
    established" for CONNECT, or with the head itself as the first bytes
    upstream for a plain request (the upstream takes the absolute-form
    target, RFC 9112 3.2.2); refused, and the client reads an HTTP
    answer whose body is the server's sentence (403 for EACCES: the rule
    that refused it), and the stream is reset.

    At most AH_SBD_EGRESS_MAX connections at once; the one beyond is
    answered 503 at once. Everything dies with the session (a lost
    tunnel ends every connection through it); the listener is the
    instance's and outlives sessions (clients wait in its backlog while
    sandboxd redials).                                                 */
#include "sandboxd/chan_int.h"
#include "common/log.h"
#include "proto/egress.h"
#include "proto/http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define EGRESS_HEAD_MS      10000       //  a client's whole request head within this
#define EGRESS_REPLY_MS     30000       //  the server's answer (it resolves and connects)

//  An HTTP answer of the proxy's own, best effort (a fresh socket takes
//  a few hundred bytes at once; a client that does not read loses it).
static void s_answer (int fd, int status, const char *text)
{
    char buf [1024];
    int body = (int) strlen (text) + 1;
    int n = snprintf (buf, sizeof buf, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                      "Content-Length: %d\r\nConnection: close\r\nX-Agenthold-Egress: refused\r\n\r\n%s\n",
                      status, ah_http_reason (status), body, text);
    if (n > 0)
        (void) !send (fd, buf, (size_t) n < sizeof buf ? (size_t) n : sizeof buf - 1,
                      MSG_NOSIGNAL | MSG_DONTWAIT);
}

//  A connection that ends before or without its stream.
static void s_end (ah_sbd_session_t *self, chan_t *ch, int status, const char *text)
{
    if (ch->file >= 0 && status)
        s_answer (ch->file, status, text);
    if (ch->id)
        ah_sbd_reset (self, ch, text);
    else {
        ah_sbd_release (self, ch);
        ch->gone = true;
    }
    ah_debug ("sandboxd", "egress: %d %s", status, text);
}

void ah_sbd_egress_accept (ah_sbd_session_t *self)
{
    for (int round = 0; round < 64; round++) {
        int fd = accept4 (self->env.proxy_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        if (self->egress_count >= AH_SBD_EGRESS_MAX) {
            char text [160];
            snprintf (text, sizeof text, "egress refused: this sandbox has %d connections out "
                      "already, the most it may have at once", AH_SBD_EGRESS_MAX);
            s_answer (fd, 503, text);
            close (fd);
            continue;
        }
        chan_t *ch = calloc (1, sizeof *ch);
        if (!ch) {
            close (fd);
            return;
        }
        ch->kind = K_EGRESS;
        ch->file = fd;
        ch->dir = -1;
        ch->egress = true;
        ch->deadline = ah_sbd_now () + EGRESS_HEAD_MS;
        ah_proc_init (&ch->proc);
        ch->next = self->chans;
        self->chans = ch;
        self->egress_count++;
    }
}

void ah_sbd_egress_poll (ah_sbd_session_t *self, chan_t *ch, int *timeout_ms,
                         void (*add) (ah_sbd_session_t *, int, short, chan_t *, kept_t *, role_t))
{
    if (!ch) {
        add (self, self->env.proxy_fd, POLLIN, NULL, NULL, R_PROXY);
        return;
    }
    if (ch->file >= 0 && !ch->egress_reply)
        add (self, ch->file, POLLIN, ch, NULL, R_SOCK);
    int64_t d = ch->deadline - ah_sbd_now ();
    if (d < 0)
        d = 0;
    if (*timeout_ms < 0 || d < *timeout_ms)
        *timeout_ms = (int) d;
}

//  The head is whole: what it asks for, then the stream.
static void s_open (ah_sbd_session_t *self, chan_t *ch, const ah_http_head_t *head, size_t used)
{
    ah_egress_target_t t;
    const char *why = NULL;
    int rc = ah_egress_target (head, &t, &why);
    if (rc < 0) {
        char text [300];
        snprintf (text, sizeof text, "egress refused: %s", why);
        s_end (self, ch, -rc, text);
        return;
    }
    uint32_t id = 0;
    if (ah_yamux_open (self->yamux, &id)) {
        s_end (self, ch, 503, "egress refused: no stream to the server can be opened now "
               "(the tunnel is down or full)");
        return;
    }
    ch->id = id;
    ah_msg_t *req = ah_msg_new ("");
    ah_msg_set_str (req, "ch", "egress");
    ah_msg_set_str (req, "host", t.host);
    ah_msg_set_int (req, "port", t.port);
    ah_msg_set_str (req, "kind", t.connect ? "connect" : "http");
    uint8_t *hdr = NULL;
    size_t size = 0;
    int bad = ah_chan_header_encode (req, &hdr, &size);
    ah_msg_destroy (&req);
    if (bad || ah_yamux_write (self->yamux, id, hdr, size) != (ssize_t) size) {
        free (hdr);
        s_end (self, ch, 502, "egress refused: the request to the server could not be sent");
        return;
    }
    free (hdr);
    //  CONNECT's head is the proxy's alone; a plain request goes on whole.
    if (t.connect)
        ah_buf_consume (&ch->out, used);
    ch->egress_reply = true;
    ch->egress_connect = t.connect;
    ch->deadline = ah_sbd_now () + EGRESS_REPLY_MS;
}

void ah_sbd_egress_event (ah_sbd_session_t *self, chan_t *ch)
{
    if (ch->egress_reply || ch->file < 0)
        return;
    size_t have = ah_buf_size (&ch->out);
    size_t room = AH_HTTP_MAX_HEAD + 1 - have;
    uint8_t *p = room ? ah_buf_reserve (&ch->out, room) : NULL;
    if (!p) {
        s_end (self, ch, 431, "egress refused: the request head is over 16384 bytes");
        return;
    }
    ssize_t r = recv (ch->file, p, room, 0);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (r <= 0) {
        s_end (self, ch, 0, "the client went before its request was whole");
        return;
    }
    ah_buf_commit (&ch->out, (size_t) r);
    ah_http_head_t head = { 0 };
    size_t used = 0;
    const char *why = NULL;
    int rc = ah_http_head_parse (ah_buf_head (&ch->out), ah_buf_size (&ch->out), &head, &used, &why);
    if (rc == 0 && ah_buf_size (&ch->out) > AH_HTTP_MAX_HEAD) {
        rc = -431;
        why = "the request head is over 16384 bytes";
    }
    if (rc < 0) {
        char text [300];
        snprintf (text, sizeof text, "egress refused: %s", why ? why : "malformed request");
        s_end (self, ch, -rc, text);
    }
    else
    if (rc == 1)
        s_open (self, ch, &head, used);
    ah_http_head_clear (&head);
}

size_t ah_sbd_egress_in (ah_sbd_session_t *self, chan_t *ch)
{
    ah_msg_t *reply = NULL;
    size_t used = 0;
    const char *err = NULL;
    int rc = ah_chan_header_decode (ah_buf_head (&ch->in), ah_buf_size (&ch->in), &reply, &used, &err);
    if (rc == 0) {
        if (ch->peer_eof)
            s_end (self, ch, 502, "egress refused: the server ended the stream without an answer");
        return 0;
    }
    if (rc < 0) {
        s_end (self, ch, 502, "egress refused: the server's answer was malformed");
        return 0;
    }
    if (!ah_msg_bool (reply, "ok", false)) {
        const char *code = ah_msg_str (reply, "code");
        const char *error = ah_msg_str (reply, "error");
        code = code ? code : "EIO";
        error = error ? error : "egress refused by the server";
        int status = !strcmp (code, "EACCES") ? 403 : !strcmp (code, "ETIMEDOUT") ? 504
                   : !strcmp (code, "EAGAIN") ? 503 : 502;
        char text [600];
        snprintf (text, sizeof text, "%s", error);
        ah_msg_destroy (&reply);
        s_end (self, ch, status, text);
        return 0;
    }
    ah_msg_destroy (&reply);
    if (ch->egress_connect) {
        static const char ok [] = "HTTP/1.1 200 Connection established\r\n\r\n";
        if (send (ch->file, ok, sizeof ok - 1, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t) (sizeof ok - 1)) {
            s_end (self, ch, 0, "the client went before the connection was made");
            return 0;
        }
    }
    //  From here it is a port channel's connection (port.c).
    ch->kind = K_PORT;
    ch->egress_reply = false;
    ch->port_connecting = false;
    ch->deadline = 0;
    ah_sbd_flush (self, ch);
    return used;
}

void ah_sbd_egress_timers (ah_sbd_session_t *self, chan_t *ch, int64_t now)
{
    if (ch->kind != K_EGRESS || !ch->deadline || now < ch->deadline)
        return;
    if (ch->egress_reply)
        s_end (self, ch, 504, "egress refused: the server did not answer within 30 s");
    else
        s_end (self, ch, 408, "egress refused: the request head did not come whole within 10 s");
}

void ah_sbd_egress_reset (chan_t *ch)
{
    if (ch->kind == K_EGRESS && ch->egress_reply && ch->file >= 0)
        s_answer (ch->file, 502, "egress refused: the server reset the stream before answering "
                  "(a server older than the egress channel resets every stream sandboxd opens)");
}

void ah_sbd_egress_gone (ah_sbd_session_t *self, chan_t *ch)
{
    if (ch->egress && self->egress_count > 0) {
        self->egress_count--;
        ch->egress = false;
    }
}
