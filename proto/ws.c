/*  proto/ws.c: the WebSocket client (see ws.h). Its handshake's SHA-1
    and base64 are proto/sha1.c and proto/base64.c, so the static
    sandboxd needs no libcrypto.                                        */
#include "proto/ws.h"
#include "proto/base64.h"
#include "proto/sha1.h"
#include "proto/wsframe.h"
#include "common/ident.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define S_READ_CHUNK    (256 * 1024)
#define S_BODY_WAIT_MS  1000        //  a refusal's body that did not come with the head

struct ah_ws_t {
    ah_ws_io_t   io;
    ah_ws_opts_t opts;
    char     protocol [64];
    ah_buf_t in;                    //  received, not yet parsed
    ah_buf_t out;                   //  frames not yet written
    int      status;                //  of the upgrade answer
    char     body [AH_WS_BODY_MAX + 1];
    bool     close_sent;
    bool     over;                  //  nothing more will be read
    char     error [256];

    //  The frame being parsed.
    uint8_t  hdr [14];              //  header bytes gathered so far
    size_t   hlen;
    bool     in_payload;
    uint8_t  op;
    bool     fin;
    uint64_t left;                  //  payload bytes still to come
    uint8_t  msg_op;                //  the data message open across frames, 0 none
    uint64_t msg_total;
    uint8_t  ctl [126];             //  a control frame's payload (and a NUL)
    size_t   ctl_len;
    uint8_t  masks [256];           //  masking keys from getrandom, 4 bytes a frame
    size_t   masks_used;            //  taken of masks (starts at its size: none fetched)
};

void ah_ws_accept_for (const char *key, char out [29])
{
    char buf [128];
    int n = snprintf (buf, sizeof buf, "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
    uint8_t digest [AH_SHA1_SIZE];
    ah_sha1 (buf, n > 0 && (size_t) n < sizeof buf ? (size_t) n : 0, digest);
    ah_base64_encode (digest, sizeof digest, out);
}

static void s_random (uint8_t *out, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom (out + got, n - got, 0);
        if (r > 0)
            got += (size_t) r;
        else if (r < 0 && errno != EINTR)
            break;
    }
    //  No entropy source at all: still mask (RFC wants it), less randomly.
    for (; got < n; got++)
        out [got] = (uint8_t) (rand () ^ (int) time (NULL));
}

//  ---------------------------------------------------------------- URL, dial

//  The request path rest (from '/') into out->path, when it and all of
//  text (which holds it) are printable without spaces. 0, or -1 with *err.
static int s_request_path (const char *text, const char *rest, ah_ws_url_t *out, const char **err)
{
    for (const char *c = text; *c; c++)
        if ((unsigned char) *c <= 0x20 || *c == 0x7f) {
            *err = "bad path";
            return -1;
        }
    if (*rest != '/' || strlen (rest) >= sizeof out->path) {
        *err = "bad path";
        return -1;
    }
    strcpy (out->path, rest);
    return 0;
}

int ah_ws_url_parse (const char *url, ah_ws_url_t *out, const char **err)
{
    static const struct { const char *scheme; bool secure; const char *port; } schemes [] = {
        { "ws://", false, "80" }, { "http://", false, "80" },
        { "wss://", true, "443" }, { "https://", true, "443" },
    };
    memset (out, 0, sizeof *out);
    //  ws+unix://<socket path>:<request path>: a WebSocket over a unix
    //  socket (host "localhost" in the request).
    if (url && strncmp (url, "ws+unix://", 10) == 0) {
        const char *sock = url + 10;
        const char *colon = strchr (sock, ':');
        struct sockaddr_un *su = (struct sockaddr_un *) &out->addr;
        size_t sl = colon ? (size_t) (colon - sock) : 0;
        if (!colon || sl == 0 || sock [0] != '/' || sl >= sizeof su->sun_path) {
            *err = "ws+unix:// needs an absolute socket path (shorter than 108 bytes), ':' and the request path";
            return -1;
        }
        if (s_request_path (sock, colon + 1, out, err))
            return -1;
        strcpy (out->host, "localhost");
        strcpy (out->port, "80");
        su->sun_family = AF_UNIX;
        memcpy (su->sun_path, sock, sl);
        out->addr_len = (socklen_t) (offsetof (struct sockaddr_un, sun_path) + sl + 1);
        return 0;
    }
    const char *p = NULL;
    for (size_t i = 0; url && !p && i < sizeof schemes / sizeof *schemes; i++)
        if (strncmp (url, schemes [i].scheme, strlen (schemes [i].scheme)) == 0) {
            p = url + strlen (schemes [i].scheme);
            out->secure = schemes [i].secure;
            strcpy (out->port, schemes [i].port);
        }
    if (!p) {
        *err = "the URL must start with ws://, http://, wss:// or https://";
        return -1;
    }
    const char *host_end, *rest;
    if (*p == '[') {
        host_end = strchr (++p, ']');
        if (!host_end) {
            *err = "unterminated [IPv6] host";
            return -1;
        }
        rest = host_end + 1;
    }
    else {
        host_end = p + strcspn (p, ":/?");
        rest = host_end;
    }
    size_t hl = (size_t) (host_end - p);
    if (hl == 0 || hl >= sizeof out->host) {
        *err = "missing or over-long host";
        return -1;
    }
    memcpy (out->host, p, hl);
    if (*rest == ':') {
        rest++;
        size_t pl = strspn (rest, "0123456789");
        if (pl == 0 || pl > 5 || atoi (rest) <= 0 || atoi (rest) > 65535) {
            *err = "bad port";
            return -1;
        }
        memcpy (out->port, rest, pl);
        out->port [pl] = 0;
        rest += pl;
    }
    if (*rest == 0)
        rest = "/";
    if (s_request_path (rest, rest, out, err))
        return -1;
    struct sockaddr_in *s4 = (struct sockaddr_in *) &out->addr;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *) &out->addr;
    uint16_t port = htons ((uint16_t) atoi (out->port));
    if (inet_pton (AF_INET, out->host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = port;
        out->addr_len = sizeof *s4;
    }
    else if (inet_pton (AF_INET6, out->host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = port;
        out->addr_len = sizeof *s6;
    }
    return 0;
}

static int64_t s_now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

//  Wait for events on fd until deadline (-1: none), unless abort_fd is
//  readable first. 1 ready, 0 timed out, -1 aborted or error.
static int s_wait (int fd, short events, int abort_fd, int64_t deadline)
{
    while (true) {
        int64_t left = deadline < 0 ? -1 : deadline - s_now_ms ();
        if (deadline >= 0 && left <= 0)
            return 0;
        struct pollfd p [2] = { { fd, events, 0 }, { abort_fd, POLLIN, 0 } };
        int rc = poll (p, abort_fd >= 0 ? 2 : 1, (int) left);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0 || (abort_fd >= 0 && p [1].revents))
            return -1;
        if (p [0].revents)
            return 1;
    }
}

static int64_t s_deadline (int timeout_ms)
{
    return timeout_ms < 0 ? -1 : s_now_ms () + timeout_ms;
}

int ah_ws_dial (const struct sockaddr *addr, socklen_t addr_len, int timeout_ms,
                int abort_fd, char *err, size_t err_size)
{
    int64_t deadline = s_deadline (timeout_ms);
    char name [INET6_ADDRSTRLEN + 8] = "?";
    const void *ip = addr->sa_family == AF_INET6 ? (const void *) &((const struct sockaddr_in6 *) addr)->sin6_addr
                                                 : (const void *) &((const struct sockaddr_in *) addr)->sin_addr;
    uint16_t port = addr->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *) addr)->sin6_port
                                                : ((const struct sockaddr_in *) addr)->sin_port;
    if (addr->sa_family == AF_UNIX)
        snprintf (name, sizeof name, "the unix socket");
    else
    if (inet_ntop (addr->sa_family, ip, name, INET6_ADDRSTRLEN))
        snprintf (name + strlen (name), 8, ":%u", ntohs (port));
    int fd = socket (addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf (err, err_size, "socket: %s", strerror (errno));
        return -1;
    }
    int one = 1;
    if (addr->sa_family != AF_UNIX)
        setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt (fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    int e = 0;
    if (connect (fd, addr, addr_len) < 0) {
        e = errno;
        if (e == EINPROGRESS) {
            int w = s_wait (fd, POLLOUT, abort_fd, deadline);
            socklen_t el = sizeof e;
            if (w <= 0) {
                snprintf (err, err_size, "connect %s: %s", name, w == 0 ? "timed out" : "aborted");
                close (fd);
                return -1;
            }
            e = 0;
            getsockopt (fd, SOL_SOCKET, SO_ERROR, &e, &el);
        }
    }
    if (e) {
        snprintf (err, err_size, "connect %s: %s", name, strerror (e));
        close (fd);
        errno = e;                  //  the caller tells "nobody listens" apart
        return -1;
    }
    return fd;
}

//  ---------------------------------------------------------------- transport

static ssize_t s_plain_read (ah_ws_io_t *io, void *buf, size_t size)
{
    return recv (io->fd, buf, size, 0);
}

static ssize_t s_plain_write (ah_ws_io_t *io, const void *buf, size_t size)
{
    return send (io->fd, buf, size, MSG_NOSIGNAL);
}

static void s_plain_close (ah_ws_io_t *io)
{
    if (io->fd >= 0)
        close (io->fd);
    io->fd = -1;
}

ah_ws_io_t ah_ws_io_plain (int fd)
{
    return (ah_ws_io_t) { .read = s_plain_read, .write = s_plain_write,
                          .close = s_plain_close, .fd = fd };
}

ah_ws_t *ah_ws_new (const ah_ws_io_t *io, const ah_ws_opts_t *opts)
{
    ah_ws_t *self = calloc (1, sizeof *self);
    if (!self) {
        ah_ws_io_t copy = *io;
        copy.close (&copy);
        return NULL;
    }
    self->masks_used = sizeof self->masks;     //  none fetched yet
    self->io = *io;
    self->opts = *opts;
    snprintf (self->protocol, sizeof self->protocol, "%s", opts->protocol ? opts->protocol : "");
    self->opts.protocol = NULL;
    if (!self->opts.max_message)
        self->opts.max_message = AH_WS_MESSAGE_MAX;
    return self;
}

void ah_ws_destroy (ah_ws_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_ws_t *self = *self_p;
    self->io.close (&self->io);
    ah_buf_free (&self->in);
    ah_buf_free (&self->out);
    free (self);
    *self_p = NULL;
}

int ah_ws_fd (const ah_ws_t *self)
{
    return self->io.fd;
}

int ah_ws_status (const ah_ws_t *self)
{
    return self->status;
}

const char *ah_ws_body (const ah_ws_t *self)
{
    return self->body;
}

size_t ah_ws_pending (const ah_ws_t *self)
{
    return ah_buf_size (&self->out);
}

const char *ah_ws_error (const ah_ws_t *self)
{
    return self->error;
}

//  ---------------------------------------------------------------- frames out

static int s_frame (ah_ws_t *self, int opcode, const void *data, size_t size)
{
    //  A key a frame from the kernel's generator, fetched 64 at a time:
    //  a getrandom per keystroke was a sixth of sandboxd's system calls.
    if (self->masks_used + 4 > sizeof self->masks) {
        s_random (self->masks, sizeof self->masks);
        self->masks_used = 0;
    }
    const uint8_t *mask = self->masks + self->masks_used;
    self->masks_used += 4;
    return ah_wsframe_append (&self->out, opcode, true, data, size, mask);
}

int ah_ws_send (ah_ws_t *self, int opcode, const void *data, size_t size)
{
    if (self->close_sent || (opcode >= 8 && size > 125))
        return -1;
    return s_frame (self, opcode, data, size);
}

void ah_ws_close (ah_ws_t *self, unsigned code, const char *reason)
{
    if (self->close_sent)
        return;
    uint8_t p [125] = { (uint8_t) (code >> 8), (uint8_t) code };
    size_t rl = reason ? strnlen (reason, 123) : 0;
    memcpy (p + 2, reason ? reason : "", rl);
    s_frame (self, AH_WS_CLOSE, p, 2 + rl);
    self->close_sent = true;
}

int ah_ws_flush (ah_ws_t *self)
{
    while (ah_buf_size (&self->out)) {
        ssize_t w = self->io.write (&self->io, ah_buf_head (&self->out), ah_buf_size (&self->out));
        if (w > 0)
            ah_buf_consume (&self->out, (size_t) w);
        else if (w < 0 && errno == EINTR)
            continue;
        else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        else {
            if (!self->error [0])
                snprintf (self->error, sizeof self->error, "send: %s",
                          w < 0 ? strerror (errno) : "the transport took nothing");
            self->over = true;
            ah_buf_clear (&self->out);
            return -1;
        }
    }
    return 0;
}

//  The connection is over: say why (the first reason sticks) and, with a
//  close code, tell the server. Returns -1.
static int s_fail (ah_ws_t *self, unsigned code, const char *fmt, ...)
{
    if (!self->over) {
        va_list ap;
        va_start (ap, fmt);
        vsnprintf (self->error, sizeof self->error, fmt, ap);
        va_end (ap);
        self->over = true;
    }
    if (code)
        ah_ws_close (self, code, NULL);
    return -1;
}

//  ---------------------------------------------------------------- frames in

//  A whole header (proto/wsframe checks what every peer must): check it
//  against the message state.
static int s_frame_start (ah_ws_t *self, const ah_wsframe_t *f)
{
    int op = f->opcode;
    uint64_t len = f->length;
    self->op = op;
    self->fin = f->fin;
    self->left = len;
    if (op >= 8) {
        self->ctl_len = 0;
        return 0;
    }
    if (op == AH_WS_TEXT || op == AH_WS_BIN) {
        if (self->msg_op)
            return s_fail (self, 1002, "websocket: a new message inside a fragmented one");
        if (op == AH_WS_TEXT && self->opts.binary_only)
            return s_fail (self, 1003, "websocket: text message where binary is expected");
        self->msg_op = op;
        self->msg_total = 0;
    }
    else if (!self->msg_op)
        return s_fail (self, 1002, "websocket: continuation frame without a message");
    if (len > self->opts.max_message - self->msg_total)
        return s_fail (self, 1009, "websocket: message over %zu bytes", self->opts.max_message);
    self->msg_total += len;
    return 0;
}

static void s_control (ah_ws_t *self)
{
    if (self->op == AH_WS_PING && !self->close_sent)
        s_frame (self, AH_WS_PONG, self->ctl, self->ctl_len);
    else if (self->op == AH_WS_CLOSE) {
        unsigned code = self->ctl_len >= 2 ? (unsigned) self->ctl [0] << 8 | self->ctl [1] : 1005;
        self->ctl [self->ctl_len] = 0;
        const char *reason = self->ctl_len > 2 ? (const char *) self->ctl + 2 : "";
        //  RFC 6455 5.5.1 and 7.4: a code is two bytes, one a peer may
        //  send, and the reason is UTF-8; anything else is the peer's error.
        if (self->ctl_len == 1) {
            s_fail (self, 1002, "websocket: a close frame of one byte (a code is two)");
            return;
        }
        if (self->ctl_len >= 2 && !ah_wsframe_close_code_ok (code)) {
            s_fail (self, 1002, "websocket: close code %u is not one a peer may send", code);
            return;
        }
        for (size_t at = 2, n; at < self->ctl_len; at += n) {
            uint32_t cp;
            if (!(n = ah_utf8_next ((const char *) self->ctl + at, self->ctl_len - at, &cp))) {
                s_fail (self, 1007, "websocket: the close frame's reason is not UTF-8");
                return;
            }
        }
        if (!self->close_sent) {
            s_frame (self, AH_WS_CLOSE, self->ctl, self->ctl_len >= 2 ? 2 : 0);
            self->close_sent = true;
        }
        s_fail (self, 0, "server closed the WebSocket (code %u%s%.120s)", code,
                *reason ? ": " : "", reason);
        if (self->opts.on_close)
            self->opts.on_close (self->opts.ud, code, reason);
    }
    //  A pong: nothing to do.
}

//  Received bytes through the frame parser. 0, or -1 (the connection is over).
static int s_feed (ah_ws_t *self, const uint8_t *data, size_t size)
{
    while (size > 0 && !self->over) {
        if (!self->in_payload) {
            ah_wsframe_t f;
            const char *why = NULL;
            int rc = 0;
            while (size > 0 && rc == 0 && self->hlen < sizeof self->hdr) {
                self->hdr [self->hlen++] = *data++;
                size--;
                rc = ah_wsframe_parse (self->hdr, self->hlen, false, &f, &why);
            }
            if (rc < 0)
                return s_fail (self, 1002, "websocket: %s", why);
            if (rc == 0)
                break;
            self->hlen = 0;
            if (s_frame_start (self, &f))
                return -1;
            self->in_payload = true;
        }
        size_t take = size < self->left ? size : (size_t) self->left;
        if (self->op >= 8) {
            memcpy (self->ctl + self->ctl_len, data, take);
            self->ctl_len += take;
        }
        else {
            bool last = self->fin && take == self->left;
            if ((take || last) && self->opts.on_message)
                self->opts.on_message (self->opts.ud, self->msg_op, data, take, last);
            if (last)
                self->msg_op = 0;
        }
        data += take;
        size -= take;
        self->left -= take;
        if (self->left == 0) {
            self->in_payload = false;
            if (self->op >= 8)
                s_control (self);
        }
    }
    return self->over ? -1 : 0;
}

int ah_ws_read (ah_ws_t *self, size_t max)
{
    size_t total = 0;
    while (!self->over) {
        //  First what the handshake read past the answer's head.
        if (ah_buf_size (&self->in)) {
            int rc = s_feed (self, ah_buf_head (&self->in), ah_buf_size (&self->in));
            ah_buf_clear (&self->in);
            if (rc)
                break;
        }
        if (total >= max)
            break;
        uint8_t *p = ah_buf_reserve (&self->in, S_READ_CHUNK);
        if (!p)
            return s_fail (self, 1011, "out of memory");
        ssize_t r = self->io.read (&self->io, p, S_READ_CHUNK);
        if (r == 0)
            return s_fail (self, 0, "the server closed the connection");
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            break;
        if (r < 0)
            return s_fail (self, 0, "recv: %s", strerror (errno));
        ah_buf_commit (&self->in, (size_t) r);
        total += (size_t) r;
    }
    return self->over ? -1 : 0;
}

//  ---------------------------------------------------------------- handshake

//  Reads more of the answer into self->in, waiting until deadline. 1 read
//  something, 0 the server closed, -1 timed out, aborted or failed (*why).
static int s_read_more (ah_ws_t *self, int abort_fd, int64_t deadline, const char **why)
{
    while (true) {
        uint8_t *p = ah_buf_reserve (&self->in, 4096);
        if (!p) {
            *why = "out of memory";
            return -1;
        }
        ssize_t r = self->io.read (&self->io, p, 4096);
        if (r > 0) {
            ah_buf_commit (&self->in, (size_t) r);
            return 1;
        }
        if (r == 0)
            return 0;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            *why = strerror (errno);
            return -1;
        }
        int w = s_wait (self->io.fd, POLLIN, abort_fd, deadline);
        if (w <= 0) {
            *why = w == 0 ? "timed out" : "aborted";
            return -1;
        }
    }
}

//  The value of header name (with its colon) in head, or NULL; *len its length.
static const char *s_header (const char *head, const char *name, size_t *len)
{
    size_t nl = strlen (name);
    for (const char *line = strstr (head, "\r\n"); line; line = strstr (line, "\r\n")) {
        line += 2;
        if (strncasecmp (line, name, nl) == 0) {
            const char *v = line + nl;
            v += strspn (v, " \t");
            *len = strcspn (v, "\r");
            while (*len && (v [*len - 1] == ' ' || v [*len - 1] == '\t'))
                (*len)--;
            return v;
        }
    }
    return NULL;
}

static bool s_header_is (const char *head, const char *name, const char *want, bool nocase)
{
    size_t len = 0;
    const char *v = s_header (head, name, &len);
    return v && len == strlen (want) && (nocase ? strncasecmp (v, want, len) : strncmp (v, want, len)) == 0;
}

//  A refused upgrade: keep the body's first bytes (waiting a little when
//  they did not come with the head) and say why, with its first line.
static void s_refused (ah_ws_t *self, const char *head, size_t head_len, int abort_fd,
                       int64_t deadline, char *err, size_t err_size)
{
    size_t cl_len = 0;
    const char *cl = s_header (head, "Content-Length:", &cl_len);
    size_t want = cl ? (size_t) strtoul (cl, NULL, 10) : AH_WS_BODY_MAX;
    if (want > AH_WS_BODY_MAX)
        want = AH_WS_BODY_MAX;
    int64_t body_deadline = s_now_ms () + S_BODY_WAIT_MS;
    if (deadline >= 0 && body_deadline > deadline)
        body_deadline = deadline;
    const char *why;
    while (ah_buf_size (&self->in) - head_len < want
           && s_read_more (self, abort_fd, body_deadline, &why) > 0)
        ;
    size_t bl = ah_buf_size (&self->in) - head_len;
    if (bl > AH_WS_BODY_MAX)
        bl = AH_WS_BODY_MAX;
    memcpy (self->body, ah_buf_head (&self->in) + head_len, bl);
    self->body [bl] = 0;
    //  The first line of the body, printable bytes only.
    char line [201];
    size_t ll = 0;
    for (size_t i = 0; i < bl && ll < sizeof line - 1; i++) {
        char ch = self->body [i];
        if (ch == '\n' || ch == '\r')
            break;
        line [ll++] = (ch >= 0x20 && ch < 0x7f) ? ch : '?';
    }
    line [ll] = 0;
    snprintf (err, err_size, "upgrade refused: %.*s%s%s", (int) strcspn (head, "\r\n"), head,
              ll ? ": " : "", line);
}

int ah_ws_handshake (ah_ws_t *self, const ah_ws_url_t *url, const char *headers,
                     int timeout_ms, int abort_fd, char *err, size_t err_size)
{
    int64_t deadline = s_deadline (timeout_ms);
    uint8_t raw [16];
    s_random (raw, sizeof raw);
    char key [25];
    ah_base64_encode (raw, sizeof raw, key);
    bool v6 = strchr (url->host, ':') != NULL;
    ah_buf_t req = { 0 };
    ah_buf_appendf (&req, "GET %s HTTP/1.1\r\nHost: %s%s%s:%s\r\nUpgrade: websocket\r\n"
                    "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n",
                    url->path, v6 ? "[" : "", url->host, v6 ? "]" : "", url->port, key);
    if (self->protocol [0])
        ah_buf_appendf (&req, "Sec-WebSocket-Protocol: %s\r\n", self->protocol);
    if (ah_buf_appendf (&req, "%s\r\n", headers ? headers : "")) {
        snprintf (err, err_size, "out of memory");
        ah_buf_free (&req);
        return -1;
    }
    //  The request goes out through the same queue as frames.
    ah_buf_append (&self->out, ah_buf_head (&req), ah_buf_size (&req));
    ah_buf_free (&req);
    while (ah_buf_size (&self->out)) {
        int w = 1;
        if (ah_ws_flush (self) || (ah_buf_size (&self->out)
            && (w = s_wait (self->io.fd, POLLOUT, abort_fd, deadline)) <= 0)) {
            snprintf (err, err_size, "send upgrade: %s", w == 0 ? "timed out"
                      : w < 0 ? "aborted" : self->error);
            return -1;
        }
    }
    //  The answer, up to the blank line.
    const uint8_t *end = NULL;
    while (!ah_buf_size (&self->in)
           || !(end = memmem (ah_buf_head (&self->in), ah_buf_size (&self->in), "\r\n\r\n", 4))) {
        if (ah_buf_size (&self->in) >= AH_WS_HTTP_MAX) {
            snprintf (err, err_size, "upgrade response over %d bytes", AH_WS_HTTP_MAX);
            return -1;
        }
        const char *why = NULL;
        int rc = s_read_more (self, abort_fd, deadline, &why);
        if (rc <= 0) {
            snprintf (err, err_size, rc == 0 ? "server closed the connection during the upgrade"
                      : "upgrade response: %s", why);
            errno = rc == 0 ? ECONNRESET : EPROTO;
            return -1;
        }
    }
    size_t head_len = (size_t) (end - ah_buf_head (&self->in)) + 4;
    if (memchr (ah_buf_head (&self->in), 0, head_len)) {
        snprintf (err, err_size, "upgrade response holds a NUL byte");
        return -1;
    }
    char *head = strndup ((const char *) ah_buf_head (&self->in), head_len);
    if (!head) {
        snprintf (err, err_size, "out of memory");
        return -1;
    }
    int rc = -1;
    if (sscanf (head, "HTTP/1.%*d %d", &self->status) != 1 || self->status != 101) {
        s_refused (self, head, head_len, abort_fd, deadline, err, err_size);
        goto out;
    }
    char want [29];
    ah_ws_accept_for (key, want);
    size_t len = 0;
    if (!s_header_is (head, "Sec-WebSocket-Accept:", want, false))
        snprintf (err, err_size, "upgrade response lacks a matching Sec-WebSocket-Accept");
    else if (!s_header_is (head, "Upgrade:", "websocket", true))
        snprintf (err, err_size, "upgrade response lacks Upgrade: websocket");
    else if (s_header (head, "Sec-WebSocket-Protocol:", &len)
             && !s_header_is (head, "Sec-WebSocket-Protocol:", self->protocol, false))
        snprintf (err, err_size, "upgrade response names a subprotocol %s%s",
                  self->protocol [0] ? "other than " : "where none was offered", self->protocol);
    else {
        ah_buf_consume (&self->in, head_len);   //  frames that came with it stay
        rc = 0;
    }
out:
    free (head);
    return rc;
}
