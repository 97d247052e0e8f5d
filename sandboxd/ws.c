/*  sandboxd/ws.c: see ws.h. SHA-1 and base64 are here (handshake only)
    so the static binary needs no libcrypto.                          */
#include "sandboxd/ws.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

//  ---------------------------------------------------------------- SHA-1

typedef struct { uint32_t h [5]; uint64_t len; uint8_t buf [64]; size_t n; } s_sha1_t;

#define ROL(x, n) (((x) << (n)) | ((x) >> (32 - (n))))

static void s_sha1_block (s_sha1_t *s, const uint8_t *p)
{
    uint32_t w [80];
    for (int i = 0; i < 16; i++)
        w [i] = (uint32_t) p [4 * i] << 24 | (uint32_t) p [4 * i + 1] << 16
              | (uint32_t) p [4 * i + 2] << 8 | p [4 * i + 3];
    for (int i = 16; i < 80; i++)
        w [i] = ROL (w [i - 3] ^ w [i - 8] ^ w [i - 14] ^ w [i - 16], 1);
    uint32_t a = s->h [0], b = s->h [1], c = s->h [2], d = s->h [3], e = s->h [4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20)      { f = (b & c) | (~b & d);           k = 0x5A827999; }
        else if (i < 40) { f = b ^ c ^ d;                    k = 0x6ED9EBA1; }
        else if (i < 60) { f = (b & c) | (b & d) | (c & d);  k = 0x8F1BBCDC; }
        else             { f = b ^ c ^ d;                    k = 0xCA62C1D6; }
        uint32_t t = ROL (a, 5) + f + e + k + w [i];
        e = d; d = c; c = ROL (b, 30); b = a; a = t;
    }
    s->h [0] += a; s->h [1] += b; s->h [2] += c; s->h [3] += d; s->h [4] += e;
}

static void s_sha1 (const uint8_t *data, size_t size, uint8_t out [20])
{
    s_sha1_t s = { { 0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0 }, 0, { 0 }, 0 };
    s.len = (uint64_t) size * 8;
    while (size >= 64) {
        s_sha1_block (&s, data);
        data += 64;
        size -= 64;
    }
    uint8_t tail [128] = { 0 };
    memcpy (tail, data, size);
    tail [size] = 0x80;
    size_t total = size + 9 <= 64 ? 64 : 128;
    for (int i = 0; i < 8; i++)
        tail [total - 1 - i] = (uint8_t) (s.len >> (8 * i));
    s_sha1_block (&s, tail);
    if (total == 128)
        s_sha1_block (&s, tail + 64);
    for (int i = 0; i < 5; i++) {
        out [4 * i] = (uint8_t) (s.h [i] >> 24);
        out [4 * i + 1] = (uint8_t) (s.h [i] >> 16);
        out [4 * i + 2] = (uint8_t) (s.h [i] >> 8);
        out [4 * i + 3] = (uint8_t) s.h [i];
    }
}

static void s_base64 (const uint8_t *in, size_t n, char *out)
{
    static const char tab [] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t) in [i] << 16;
        if (i + 1 < n) v |= (uint32_t) in [i + 1] << 8;
        if (i + 2 < n) v |= in [i + 2];
        out [o++] = tab [(v >> 18) & 63];
        out [o++] = tab [(v >> 12) & 63];
        out [o++] = i + 1 < n ? tab [(v >> 6) & 63] : '=';
        out [o++] = i + 2 < n ? tab [v & 63] : '=';
    }
    out [o] = 0;
}

void ah_ws_accept_for (const char *key, char out [29])
{
    char buf [128];
    int n = snprintf (buf, sizeof buf, "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
    uint8_t digest [20];
    s_sha1 ((const uint8_t *) buf, n > 0 && (size_t) n < sizeof buf ? (size_t) n : 0, digest);
    s_base64 (digest, 20, out);
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

//  ---------------------------------------------------------------- URL

int ah_ws_url_parse (const char *url, ah_ws_url_t *out, const char **err)
{
    memset (out, 0, sizeof *out);
    if (!url || strncmp (url, "ws://", 5) != 0) {
        *err = "tunnel_url must start with ws:// (wss is not supported inside the sandbox)";
        return -1;
    }
    const char *p = url + 5;
    const char *host_end;
    const char *rest;
    if (*p == '[') {
        host_end = strchr (p, ']');
        if (!host_end) {
            *err = "tunnel_url: unterminated [IPv6] host";
            return -1;
        }
        p++;
        rest = host_end + 1;
    }
    else {
        host_end = p + strcspn (p, ":/");
        rest = host_end;
    }
    size_t hl = (size_t) (host_end - p);
    if (hl == 0 || hl >= sizeof out->host) {
        *err = "tunnel_url: missing or over-long host";
        return -1;
    }
    memcpy (out->host, p, hl);
    struct in6_addr a6;
    struct in_addr a4;
    if (inet_pton (AF_INET, out->host, &a4) != 1 && inet_pton (AF_INET6, out->host, &a6) != 1) {
        *err = "tunnel_url: host must be an IP literal (no DNS resolver in the sandbox)";
        return -1;
    }
    strcpy (out->port, "80");
    if (*rest == ':') {
        rest++;
        size_t pl = strspn (rest, "0123456789");
        if (pl == 0 || pl > 5 || atoi (rest) <= 0 || atoi (rest) > 65535) {
            *err = "tunnel_url: bad port";
            return -1;
        }
        memcpy (out->port, rest, pl);
        out->port [pl] = 0;
        rest += pl;
    }
    if (*rest == 0)
        rest = "/";
    if (*rest != '/' || strlen (rest) >= sizeof out->path || strpbrk (rest, " \r\n")) {
        *err = "tunnel_url: bad path";
        return -1;
    }
    strcpy (out->path, rest);
    return 0;
}

//  ---------------------------------------------------------------- connect

static int64_t s_now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

//  Wait for events on fd (or abort_fd) until deadline. 1 ready, 0 timeout,
//  -1 aborted or error.
static int s_wait (int fd, short events, int abort_fd, int64_t deadline)
{
    while (true) {
        int64_t left = deadline - s_now_ms ();
        if (left <= 0)
            return 0;
        struct pollfd p [2] = { { fd, events, 0 }, { abort_fd, POLLIN, 0 } };
        int rc = poll (p, abort_fd >= 0 ? 2 : 1, (int) left);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0)
            return -1;
        if (abort_fd >= 0 && p [1].revents)
            return -1;
        if (p [0].revents)
            return 1;
    }
}

int ah_ws_connect (const ah_ws_url_t *url, const char *headers, int timeout_ms,
                   int abort_fd, uint8_t *extra, size_t extra_cap,
                   size_t *extra_len, char *err, size_t err_size)
{
    *extra_len = 0;
    int64_t deadline = s_now_ms () + timeout_ms;
    struct sockaddr_storage ss;
    socklen_t sl;
    memset (&ss, 0, sizeof ss);
    struct sockaddr_in *s4 = (struct sockaddr_in *) &ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *) &ss;
    if (inet_pton (AF_INET, url->host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons ((uint16_t) atoi (url->port));
        sl = sizeof *s4;
    }
    else if (inet_pton (AF_INET6, url->host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons ((uint16_t) atoi (url->port));
        sl = sizeof *s6;
    }
    else {
        snprintf (err, err_size, "host %s is not an IP literal", url->host);
        return -1;
    }
    int fd = socket (ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf (err, err_size, "socket: %s", strerror (errno));
        return -1;
    }
    int one = 1;
    setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt (fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    if (connect (fd, (struct sockaddr *) &ss, sl) < 0 && errno != EINPROGRESS) {
        snprintf (err, err_size, "connect %s:%s: %s", url->host, url->port, strerror (errno));
        goto fail;
    }
    int w = s_wait (fd, POLLOUT, abort_fd, deadline);
    if (w <= 0) {
        snprintf (err, err_size, "connect %s:%s: %s", url->host, url->port,
                  w == 0 ? "timed out" : "aborted");
        goto fail;
    }
    int soerr = 0;
    socklen_t el = sizeof soerr;
    getsockopt (fd, SOL_SOCKET, SO_ERROR, &soerr, &el);
    if (soerr) {
        snprintf (err, err_size, "connect %s:%s: %s", url->host, url->port, strerror (soerr));
        goto fail;
    }
    //  The upgrade request.
    uint8_t raw [16];
    s_random (raw, sizeof raw);
    char key [32];
    s_base64 (raw, sizeof raw, key);
    char req [4096];
    bool v6 = ss.ss_family == AF_INET6;
    int n = snprintf (req, sizeof req,
                      "GET %s HTTP/1.1\r\nHost: %s%s%s:%s\r\nUpgrade: websocket\r\n"
                      "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                      "Sec-WebSocket-Version: 13\r\n"
                      "Sec-WebSocket-Protocol: agenthold-tunnel\r\n%s\r\n",
                      url->path, v6 ? "[" : "", url->host, v6 ? "]" : "", url->port,
                      key, headers ? headers : "");
    if (n <= 0 || (size_t) n >= sizeof req) {
        snprintf (err, err_size, "upgrade request too long");
        goto fail;
    }
    size_t sent = 0;
    while (sent < (size_t) n) {
        ssize_t r = send (fd, req + sent, (size_t) n - sent, MSG_NOSIGNAL);
        if (r > 0) {
            sent += (size_t) r;
            continue;
        }
        if (r < 0 && errno != EAGAIN && errno != EINTR) {
            snprintf (err, err_size, "send upgrade: %s", strerror (errno));
            goto fail;
        }
        if (s_wait (fd, POLLOUT, abort_fd, deadline) <= 0) {
            snprintf (err, err_size, "send upgrade: timed out or aborted");
            goto fail;
        }
    }
    //  The response, up to the blank line.
    char resp [AH_WS_HTTP_MAX + 1];
    size_t got = 0;
    char *end = NULL;
    while (!end) {
        if (got == AH_WS_HTTP_MAX) {
            snprintf (err, err_size, "upgrade response over %d bytes", AH_WS_HTTP_MAX);
            goto fail;
        }
        ssize_t r = recv (fd, resp + got, AH_WS_HTTP_MAX - got, 0);
        if (r == 0) {
            snprintf (err, err_size, "server closed the connection during the upgrade");
            goto fail;
        }
        if (r < 0) {
            if (errno != EAGAIN && errno != EINTR) {
                snprintf (err, err_size, "recv upgrade: %s", strerror (errno));
                goto fail;
            }
            if (s_wait (fd, POLLIN, abort_fd, deadline) <= 0) {
                snprintf (err, err_size, "upgrade response: timed out or aborted");
                goto fail;
            }
            continue;
        }
        got += (size_t) r;
        resp [got] = 0;
        end = memmem (resp, got, "\r\n\r\n", 4);
    }
    size_t head = (size_t) (end - resp) + 4;
    if (memchr (resp, 0, head)) {
        snprintf (err, err_size, "upgrade response holds a NUL byte");
        goto fail;
    }
    *end = 0;
    int status = 0;
    if (sscanf (resp, "HTTP/1.1 %d", &status) != 1 || status != 101) {
        //  The first line says why (401 bad token, 404 wrong path...),
        //  the body says more: wait a little for its first bytes when
        //  they did not come with the head (Content-Length, else close).
        const char *cl = strcasestr (resp, "\r\nContent-Length:");
        size_t body = cl ? (size_t) strtoul (cl + 17, NULL, 10) : 200;
        if (body > 200)
            body = 200;
        int64_t body_deadline = s_now_ms () + 1000;
        if (body_deadline > deadline)
            body_deadline = deadline;
        while (got - head < body && got < AH_WS_HTTP_MAX
               && s_wait (fd, POLLIN, abort_fd, body_deadline) > 0) {
            ssize_t r = recv (fd, resp + got, AH_WS_HTTP_MAX - got, 0);
            if (r <= 0)
                break;
            got += (size_t) r;
        }
        char *eol = strstr (resp, "\r\n");
        if (eol)
            *eol = 0;
        //  The server says why in the body (when it came with the head):
        //  first line, printable bytes only.
        char why [201];
        size_t wl = 0;
        for (size_t i = head; i < got && wl < sizeof why - 1; i++) {
            char ch = resp [i];
            if (ch == '\n' || ch == '\r')
                break;
            why [wl++] = (ch >= 0x20 && ch < 0x7f) ? ch : '?';
        }
        why [wl] = 0;
        snprintf (err, err_size, "upgrade refused: %.200s%s%s", resp, wl ? ": " : "", why);
        goto fail;
    }
    char want [29];
    ah_ws_accept_for (key, want);
    bool accepted = false, upgraded = false, proto_ok = true;
    for (char *line = strstr (resp, "\r\n"); line; line = strstr (line, "\r\n")) {
        line += 2;
        if (strncasecmp (line, "Sec-WebSocket-Accept:", 21) == 0) {
            const char *v = line + 21;
            while (*v == ' ' || *v == '\t')
                v++;
            accepted = strncmp (v, want, 28) == 0 && (v [28] == '\r' || v [28] == 0
                                                      || v [28] == ' ');
        }
        else if (strncasecmp (line, "Upgrade:", 8) == 0) {
            const char *v = line + 8;
            while (*v == ' ' || *v == '\t')
                v++;
            upgraded = strncasecmp (v, "websocket", 9) == 0;
        }
        else if (strncasecmp (line, "Sec-WebSocket-Protocol:", 23) == 0) {
            const char *v = line + 23;
            while (*v == ' ' || *v == '\t')
                v++;
            proto_ok = strncmp (v, "agenthold-tunnel", 16) == 0
                    && (v [16] == '\r' || v [16] == 0 || v [16] == ' ');
        }
    }
    if (!accepted || !upgraded || !proto_ok) {
        snprintf (err, err_size, "upgrade response %s",
                  !accepted ? "lacks a matching Sec-WebSocket-Accept"
                  : !upgraded ? "lacks Upgrade: websocket"
                  : "names a subprotocol other than agenthold-tunnel");
        goto fail;
    }
    size_t rest = got - head;
    if (rest > extra_cap) {
        snprintf (err, err_size, "too many bytes after the upgrade response");
        goto fail;
    }
    memcpy (extra, resp + head, rest);
    *extra_len = rest;
    return fd;
fail:
    close (fd);
    return -1;
}

//  ---------------------------------------------------------------- frames

size_t ah_ws_frame (uint8_t opcode, const uint8_t *data, size_t size, uint8_t *out)
{
    size_t o = 0;
    out [o++] = 0x80 | (opcode & 0x0f);
    if (size < 126)
        out [o++] = 0x80 | (uint8_t) size;
    else if (size <= 0xffff) {
        out [o++] = 0x80 | 126;
        out [o++] = (uint8_t) (size >> 8);
        out [o++] = (uint8_t) size;
    }
    else {
        out [o++] = 0x80 | 127;
        for (int i = 7; i >= 0; i--)
            out [o++] = (uint8_t) ((uint64_t) size >> (8 * i));
    }
    uint8_t mask [4];
    s_random (mask, 4);
    memcpy (out + o, mask, 4);
    o += 4;
    for (size_t i = 0; i < size; i++)
        out [o + i] = data [i] ^ mask [i & 3];
    return o + size;
}

void ah_ws_parser_init (ah_ws_parser_t *p, const ah_ws_callbacks_t *cb, void *ud)
{
    memset (p, 0, sizeof *p);
    p->cb = *cb;
    p->ud = ud;
}

//  Bytes of header needed given what we have (2, or 2 + extended length).
static size_t s_hdr_need (const ah_ws_parser_t *p)
{
    if (p->hlen < 2)
        return 2;
    uint8_t l = p->hdr [1] & 0x7f;
    return 2 + (l == 126 ? 2 : l == 127 ? 8 : 0) + ((p->hdr [1] & 0x80) ? 4 : 0);
}

static void s_control_done (ah_ws_parser_t *p)
{
    if (p->opcode == AH_WS_PING) {
        if (p->cb.on_reply)
            p->cb.on_reply (p->ud, AH_WS_PONG, p->ctl, p->ctl_len);
    }
    else if (p->opcode == AH_WS_CLOSE) {
        unsigned code = p->ctl_len >= 2 ? (unsigned) p->ctl [0] << 8 | p->ctl [1] : 1005;
        p->closed = true;
        if (p->cb.on_reply)
            p->cb.on_reply (p->ud, AH_WS_CLOSE, p->ctl, p->ctl_len >= 2 ? 2 : 0);
        if (p->cb.on_close)
            p->cb.on_close (p->ud, code);
    }
    //  Pong: nothing to do (we do not send pings; the yamux layer does).
}

int ah_ws_parser_feed (ah_ws_parser_t *p, const uint8_t *data, size_t size,
                       const char **err, unsigned *close_code)
{
    *close_code = 1002;
    while (size > 0) {
        if (p->closed) {
            return 0;       //  ignore anything after close
        }
        if (!p->in_payload) {
            size_t need = s_hdr_need (p);
            while (p->hlen < need && size > 0) {
                p->hdr [p->hlen++] = *data++;
                size--;
                need = s_hdr_need (p);
            }
            if (p->hlen < need)
                return 0;
            uint8_t b0 = p->hdr [0], b1 = p->hdr [1];
            if (b0 & 0x70) {
                *err = "websocket frame with reserved bits set";
                return -1;
            }
            if (b1 & 0x80) {
                *err = "websocket frame from the server is masked";
                return -1;
            }
            uint8_t op = b0 & 0x0f;
            bool fin = b0 & 0x80;
            uint64_t len = b1 & 0x7f;
            if (len == 126)
                len = (uint64_t) p->hdr [2] << 8 | p->hdr [3];
            else if (len == 127) {
                len = 0;
                for (int i = 0; i < 8; i++)
                    len = len << 8 | p->hdr [2 + i];
            }
            if (op >= 8) {
                if (op != AH_WS_CLOSE && op != AH_WS_PING && op != AH_WS_PONG) {
                    *err = "websocket control frame with an unknown opcode";
                    return -1;
                }
                if (!fin || len > 125) {
                    *err = "websocket control frame fragmented or over 125 bytes";
                    return -1;
                }
                p->ctl_len = 0;
            }
            else if (op == AH_WS_TEXT) {
                *err = "websocket text frame on the tunnel (binary expected)";
                *close_code = 1003;
                return -1;
            }
            else if (op == AH_WS_BIN) {
                if (p->in_message) {
                    *err = "websocket binary frame inside a fragmented message";
                    return -1;
                }
                p->in_message = !fin;
                p->msg_total = 0;
            }
            else if (op == AH_WS_CONT) {
                if (!p->in_message) {
                    *err = "websocket continuation frame without a message";
                    return -1;
                }
                p->in_message = !fin;
            }
            else {
                *err = "websocket frame with an unknown opcode";
                return -1;
            }
            if (op < 8) {
                if (len > AH_WS_MESSAGE_MAX || p->msg_total + len > AH_WS_MESSAGE_MAX) {
                    *err = "websocket message over 1 MiB";
                    *close_code = 1009;
                    return -1;
                }
                p->msg_total += len;
            }
            p->opcode = op;
            p->left = len;
            p->in_payload = true;
            p->hlen = 0;
            if (len == 0 && op >= 8) {
                p->in_payload = false;
                s_control_done (p);
            }
            else if (len == 0)
                p->in_payload = false;
            continue;
        }
        size_t take = size < p->left ? size : (size_t) p->left;
        if (p->opcode >= 8) {
            memcpy (p->ctl + p->ctl_len, data, take);
            p->ctl_len += take;
        }
        else if (take && p->cb.on_data)
            p->cb.on_data (p->ud, data, take);
        data += take;
        size -= take;
        p->left -= take;
        if (p->left == 0) {
            p->in_payload = false;
            if (p->opcode >= 8)
                s_control_done (p);
        }
    }
    return 0;
}
