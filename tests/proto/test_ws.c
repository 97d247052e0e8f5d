/*  tests/proto/test_ws.c: the WebSocket client (proto/ws.c).

    Wire-level cases against a scripted peer on a socketpair (a thread
    answers the upgrade with canned bytes; the test then reads what the
    client sent): fragments, ping, close with code and reason, frames that
    came with the 101, client framing and masking, refused upgrades (a bad
    accept key, non-101 answers with their body, a closed connection, a
    timeout, an abort), protocol errors and the message cap with the close
    code each sends. Then interop with a real server (python3-websockets,
    ws_peer.py, path in argv[1]) over TCP.                              */
#include "proto/ws.h"
#include "proto/base64.h"
#include "proto/sha1.h"
#include "tests/common/check.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/un.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

//  ---------------------------------------------------------------- scripted peer

typedef struct {
    int fd;
    const char *head;               //  the answer's head; "%s" is the right accept key
    const uint8_t *extra;           //  bytes right after the head
    size_t extra_len;
    const char *later;              //  bytes sent 100 ms later
    bool close_first;               //  close without answering
} script_t;

static void *s_peer (void *arg)
{
    script_t *s = arg;
    char req [8192] = "";
    size_t got = 0;
    while (got < sizeof req - 1 && !strstr (req, "\r\n\r\n")) {
        ssize_t r = read (s->fd, req + got, sizeof req - 1 - got);
        if (r <= 0)
            return NULL;
        got += (size_t) r;
        req [got] = 0;
    }
    if (s->close_first) {
        shutdown (s->fd, SHUT_WR);
        return NULL;
    }
    if (!s->head)
        return NULL;                //  say nothing: the client times out
    char key [64] = "", accept [29];
    const char *k = strstr (req, "Sec-WebSocket-Key: ");
    if (k)
        snprintf (key, sizeof key, "%.*s", (int) strcspn (k + 19, "\r"), k + 19);
    ah_ws_accept_for (key, accept);
    char head [1024];
    int n = snprintf (head, sizeof head, s->head, accept);
    if (write (s->fd, head, (size_t) n) != n
    ||  (s->extra_len && write (s->fd, s->extra, s->extra_len) != (ssize_t) s->extra_len))
        return NULL;
    if (s->later) {
        usleep (100000);
        if (write (s->fd, s->later, strlen (s->later)) < 0)
            return NULL;
    }
    return NULL;
}

static const char *S_101 = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n";

typedef struct {
    ah_buf_t log;                   //  "B:abc|B:de$|": opcode, piece, $ when last
    unsigned close_code;
    char close_reason [128];
} seen_t;

static void s_on_message (void *ud, int opcode, const uint8_t *data, size_t size, bool last)
{
    seen_t *seen = ud;
    ah_buf_appendf (&seen->log, "%c:%.*s%s|", opcode == AH_WS_BIN ? 'B' : opcode == AH_WS_TEXT ? 'T' : '?',
                    (int) (size > 40 ? 40 : size), (const char *) data, last ? "$" : "");
}

static void s_on_close (void *ud, unsigned code, const char *reason)
{
    seen_t *seen = ud;
    seen->close_code = code;
    snprintf (seen->close_reason, sizeof seen->close_reason, "%s", reason);
}

//  A client on one end of a socketpair, the scripted peer on the other,
//  after the handshake. *peer_fd: the peer's end (the caller closes it).
static ah_ws_t *s_connect (script_t *script, const ah_ws_opts_t *opts, int timeout_ms,
                           int abort_fd, int *hs, char *err, size_t err_size, int *peer_fd)
{
    int sv [2];
    if (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
        return NULL;
    fcntl (sv [0], F_SETFL, O_NONBLOCK);
    struct timeval tv = { 5, 0 };
    setsockopt (sv [1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    script->fd = sv [1];
    pthread_t th;
    pthread_create (&th, NULL, s_peer, script);
    ah_ws_io_t io = ah_ws_io_plain (sv [0]);
    ah_ws_t *ws = ah_ws_new (&io, opts);
    ah_ws_url_t url;
    const char *uerr;
    ah_ws_url_parse ("ws://127.0.0.1:8090/tunnel?x=1", &url, &uerr);
    err [0] = 0;
    *hs = ah_ws_handshake (ws, &url, "X-Test: yes\r\n", timeout_ms, abort_fd, err, err_size);
    pthread_join (th, NULL);
    *peer_fd = sv [1];
    return ws;
}

//  One client frame read by the peer: checks the mask bit, unmasks.
//  The payload's length, or -1.
static ssize_t s_client_frame (int fd, int *opcode, uint8_t *out, size_t cap)
{
    uint8_t h [14];
    if (recv (fd, h, 2, MSG_WAITALL) != 2 || !(h [1] & 0x80))
        return -1;
    *opcode = h [0] & 0x0f;
    uint64_t len = h [1] & 0x7f;
    size_t ext = len == 126 ? 2 : len == 127 ? 8 : 0;
    if (recv (fd, h + 2, ext + 4, MSG_WAITALL) != (ssize_t) (ext + 4))
        return -1;
    if (ext) {
        len = 0;
        for (size_t i = 0; i < ext; i++)
            len = len << 8 | h [2 + i];
    }
    if (len > cap || (len && recv (fd, out, len, MSG_WAITALL) != (ssize_t) len))
        return -1;
    for (size_t i = 0; i < len; i++)
        out [i] ^= h [2 + ext + (i & 3)];
    return (ssize_t) len;
}

//  ---------------------------------------------------------------- cases

static void test_accept_and_url (void)
{
    //  RFC 6455 section 1.3's example.
    char acc [29];
    ah_ws_accept_for ("dGhlIHNhbXBsZSBub25jZQ==", acc);
    CHECK_STR (acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    //  Its parts: FIPS 180's "abc" and a two-block message; RFC 4648's
    //  vectors (each padding).
    uint8_t d [AH_SHA1_SIZE];
    char hex [2 * AH_SHA1_SIZE + 1];
    ah_sha1 ("abc", 3, d);
    for (int i = 0; i < AH_SHA1_SIZE; i++)
        sprintf (hex + 2 * i, "%02x", d [i]);
    CHECK_STR (hex, "a9993e364706816aba3e25717850c26c9cd0d89d");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    ah_sha1 (two, strlen (two), d);
    for (int i = 0; i < AH_SHA1_SIZE; i++)
        sprintf (hex + 2 * i, "%02x", d [i]);
    CHECK_STR (hex, "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
    char b [AH_BASE64_LEN (6) + 1];
    ah_base64_encode ("foobar", 6, b);
    CHECK_STR (b, "Zm9vYmFy");
    ah_base64_encode ("fooba", 5, b);
    CHECK_STR (b, "Zm9vYmE=");
    ah_base64_encode ("foob", 4, b);
    CHECK_STR (b, "Zm9vYg==");
    ah_base64_encode ("", 0, b);
    CHECK_STR (b, "");

    ah_ws_url_t u;
    const char *err = NULL;
    CHECK (ah_ws_url_parse ("ws://10.213.0.2:8090/tunnel", &u, &err) == 0);
    CHECK_STR (u.host, "10.213.0.2");
    CHECK_STR (u.port, "8090");
    CHECK_STR (u.path, "/tunnel");
    CHECK (!u.secure && u.addr_len > 0 && u.addr.ss_family == AF_INET);
    CHECK (ah_ws_url_parse ("http://[::1]:9", &u, &err) == 0 && !strcmp (u.host, "::1")
           && !strcmp (u.path, "/") && u.addr.ss_family == AF_INET6);
    CHECK (ah_ws_url_parse ("http://localhost:8080/a?b=c", &u, &err) == 0
           && !strcmp (u.host, "localhost") && u.addr_len == 0 && !strcmp (u.path, "/a?b=c"));
    CHECK (ah_ws_url_parse ("wss://example.org/t", &u, &err) == 0 && u.secure && !strcmp (u.port, "443"));
    CHECK (ah_ws_url_parse ("ws://h", &u, &err) == 0 && !strcmp (u.port, "80"));
    CHECK (ah_ws_url_parse ("ftp://10.0.0.1/", &u, &err) == -1);
    CHECK (ah_ws_url_parse ("ws://10.0.0.1:99999/tunnel", &u, &err) == -1 && strstr (err, "port"));
    CHECK (ah_ws_url_parse ("ws://10.0.0.1:80/a b", &u, &err) == -1 && strstr (err, "path"));
    CHECK (ah_ws_url_parse ("ws://[::1/x", &u, &err) == -1);
    CHECK (ah_ws_url_parse ("ws:///x", &u, &err) == -1 && strstr (err, "host"));
    //  A unix socket: the socket's path, then ':' and the request path.
    CHECK (ah_ws_url_parse ("ws+unix:///run/agenthold/tunnel.sock:/tunnel", &u, &err) == 0);
    CHECK (u.addr.ss_family == AF_UNIX && !strcmp (u.path, "/tunnel") && !strcmp (u.host, "localhost"));
    CHECK_STR (((struct sockaddr_un *) &u.addr)->sun_path, "/run/agenthold/tunnel.sock");
    CHECK (u.addr_len == offsetof (struct sockaddr_un, sun_path) + strlen ("/run/agenthold/tunnel.sock") + 1);
    const char *bad_unix [] = {
        "ws+unix://run/t.sock:/tunnel",             //  relative
        "ws+unix:///run/t.sock",                    //  no request path
        "ws+unix:///run/t.sock:tunnel",             //  request path without '/'
        "ws+unix://:/tunnel",                       //  no socket
        "ws+unix:///run/t\n.sock:/tunnel",          //  a control character
        "ws+unix:///run/t .sock:/tunnel",           //  a space
    };
    for (size_t i = 0; i < sizeof bad_unix / sizeof *bad_unix; i++)
        CHECK (ah_ws_url_parse (bad_unix [i], &u, &err) == -1);
    char long_url [300];
    snprintf (long_url, sizeof long_url, "ws+unix:///%0120d:/tunnel", 0);
    CHECK (ah_ws_url_parse (long_url, &u, &err) == -1 && strstr (err, "108"));
}

//  Fragments across frames, a ping between them, frames that came with
//  the 101, a close with code and reason; our frames masked and framed at
//  each length size, the pong and the close echo.
static void test_session (void)
{
    static const uint8_t frames [] = {
        0x02, 3, 'a', 'b', 'c',                 //  binary, not final
        0x89, 1, 'P',                           //  ping between fragments
        0x80, 2, 'd', 'e',                      //  continuation, final
        0x81, 2, 'h', 'i',                      //  text
        0x82, 0,                                //  empty binary
        0x88, 5, 0x0f, 0xa1, 'b', 'y', 'e',     //  close 4001 "bye"
        0x82, 1, 'x',                           //  after the close: ignored
    };
    script_t script = { .head = S_101, .extra = frames, .extra_len = sizeof frames };
    seen_t seen = { 0 };
    ah_ws_opts_t opts = { .on_message = s_on_message, .on_close = s_on_close, .ud = &seen };
    int hs, peer;
    char err [512];
    ah_ws_t *ws = s_connect (&script, &opts, 2000, -1, &hs, err, sizeof err, &peer);
    CHECK (ws && hs == 0 && ah_ws_status (ws) == 101);
    if (hs)
        fprintf (stderr, "  handshake: %s\n", err);
    static uint8_t big [70000];
    for (size_t i = 0; i < sizeof big; i++)
        big [i] = (uint8_t) (i * 13);
    CHECK (ah_ws_send (ws, AH_WS_BIN, big, 200) == 0);
    CHECK (ah_ws_send (ws, AH_WS_BIN, big, sizeof big) == 0);
    CHECK (ah_ws_send (ws, AH_WS_TEXT, "resize", 6) == 0);
    CHECK (ah_ws_send (ws, AH_WS_PING, big, 126) == -1);    //  control frames stay small
    CHECK (ah_ws_read (ws, 1 << 20) == -1);
    CHECK_STR (ah_buf_cstr (&seen.log), "B:abc|B:de$|T:hi$|B:$|");
    CHECK (seen.close_code == 4001);
    CHECK_STR (seen.close_reason, "bye");
    CHECK (strstr (ah_ws_error (ws), "closed the WebSocket (code 4001: bye)") != NULL);
    CHECK (ah_ws_send (ws, AH_WS_BIN, "late", 4) == -1);     //  closed: nothing more
    CHECK (ah_ws_flush (ws) == 0 && ah_ws_pending (ws) == 0);
    static uint8_t got [70000];
    int op = -1;
    CHECK (s_client_frame (peer, &op, got, sizeof got) == 200 && op == AH_WS_BIN && !memcmp (got, big, 200));
    CHECK (s_client_frame (peer, &op, got, sizeof got) == (ssize_t) sizeof big && op == AH_WS_BIN
           && !memcmp (got, big, sizeof big));
    CHECK (s_client_frame (peer, &op, got, sizeof got) == 6 && op == AH_WS_TEXT && !memcmp (got, "resize", 6));
    CHECK (s_client_frame (peer, &op, got, sizeof got) == 1 && op == AH_WS_PONG && got [0] == 'P');
    CHECK (s_client_frame (peer, &op, got, sizeof got) == 2 && op == AH_WS_CLOSE
           && got [0] == 0x0f && got [1] == 0xa1);
    ah_ws_destroy (&ws);
    CHECK (ws == NULL);
    close (peer);
    ah_buf_free (&seen.log);
}

//  Upgrades refused, each with its reason.
static void test_refusals (void)
{
    static const struct {
        const char *head, *later, *protocol;
        bool close_first, hang, abort;
        int status;
        const char *err, *body;
    } cases [] = {
        { .head = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
          .status = 101, .err = "lacks a matching Sec-WebSocket-Accept" },
        { .head = "HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: %s\r\n\r\n",
          .status = 101, .err = "lacks Upgrade: websocket" },
        { .head = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: %s\r\n"
                  "Sec-WebSocket-Protocol: other\r\n\r\n", .protocol = "agenthold-tunnel",
          .status = 101, .err = "subprotocol other than agenthold-tunnel" },
        { .head = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: %s\r\n"
                  "Sec-WebSocket-Protocol: other\r\n\r\n",
          .status = 101, .err = "subprotocol where none was offered" },
        { .head = "HTTP/1.1 401 Unauthorized\r\nContent-Length: 16\r\n\r\n{\"error\":\"nope\"}",
          .status = 401, .err = "upgrade refused: HTTP/1.1 401 Unauthorized: {\"error\":\"nope\"}",
          .body = "{\"error\":\"nope\"}" },
        { .head = "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n", .later = "not here\n",
          .status = 404, .err = "upgrade refused: HTTP/1.1 404 Not Found: not here", .body = "not here\n" },
        { .close_first = true, .err = "closed the connection during the upgrade", .body = "" },
        { .hang = true, .err = "timed out" },
        { .hang = true, .abort = true, .err = "aborted" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        script_t script = { .head = cases [i].hang ? NULL : cases [i].head, .later = cases [i].later,
                            .close_first = cases [i].close_first };
        int ab [2] = { -1, -1 };
        if (cases [i].abort && (pipe (ab) || write (ab [1], "x", 1) != 1))
            CHECK (false);
        ah_ws_opts_t opts = { .protocol = cases [i].protocol };
        int hs, peer;
        char err [512];
        ah_ws_t *ws = s_connect (&script, &opts, 300, ab [0], &hs, err, sizeof err, &peer);
        CHECK (hs == -1 && strstr (err, cases [i].err));
        if (!strstr (err, cases [i].err))
            fprintf (stderr, "  refusal %zu: \"%s\" lacks \"%s\"\n", i, err, cases [i].err);
        CHECK (ah_ws_status (ws) == cases [i].status);
        if (cases [i].body)
            CHECK_STR (ah_ws_body (ws), cases [i].body);
        ah_ws_destroy (&ws);
        close (peer);
        if (ab [0] >= 0) {
            close (ab [0]);
            close (ab [1]);
        }
    }
}

//  Protocol errors and the message cap: the connection ends, the close
//  code says why.
static void test_protocol_errors (void)
{
    static uint8_t two_frames [128] = { 0x02, 60 };
    two_frames [62] = 0x80;
    two_frames [63] = 60;
    static const struct {
        uint8_t bytes [16];
        size_t n;
        const uint8_t *big;
        bool binary_only;
        unsigned code;
        const char *err;
    } cases [] = {
        { { 0x82, 0x81, 1, 2, 3, 4, 'x' }, 7, NULL, false, 1002, "masked" },
        { { 0x81, 1, 'x' }, 3, NULL, true, 1003, "text message" },
        { { 0xc2, 1, 'x' }, 3, NULL, false, 1002, "reserved bits" },
        { { 0x80, 1, 'x' }, 3, NULL, false, 1002, "continuation frame without a message" },
        { { 0x09, 0 }, 2, NULL, false, 1002, "fragmented" },
        { { 0x8a, 126, 0, 200 }, 4, NULL, false, 1002, "over 125 bytes" },
        { { 0x83, 0 }, 2, NULL, false, 1002, "unknown opcode" },
        { { 0x8b, 0 }, 2, NULL, false, 1002, "unknown opcode" },
        { { 0x02, 1, 'a', 0x82, 1, 'b' }, 6, NULL, false, 1002, "inside a fragmented" },
        { { 0x82, 127, 0, 0, 0, 0, 0, 0x20, 0, 0 }, 10, NULL, false, 1009, "message over 1048576 bytes" },
        { { 0 }, 124, two_frames, false, 1009, "message over 100 bytes" },
        //  Close frames a peer may not send (RFC 6455 5.5.1, 7.4).
        { { 0x88, 1, 0x03 }, 3, NULL, false, 1002, "close frame of one byte" },
        { { 0x88, 2, 0x00, 0x00 }, 4, NULL, false, 1002, "close code 0 is not" },
        { { 0x88, 2, 0x03, 0xe7 }, 4, NULL, false, 1002, "close code 999 is not" },
        { { 0x88, 2, 0x03, 0xed }, 4, NULL, false, 1002, "close code 1005 is not" },
        { { 0x88, 2, 0x03, 0xee }, 4, NULL, false, 1002, "close code 1006 is not" },
        { { 0x88, 2, 0x03, 0xf7 }, 4, NULL, false, 1002, "close code 1015 is not" },
        { { 0x88, 2, 0x07, 0xd0 }, 4, NULL, false, 1002, "close code 2000 is not" },
        { { 0x88, 2, 0x13, 0x88 }, 4, NULL, false, 1002, "close code 5000 is not" },
        { { 0x88, 4, 0x03, 0xe8, 0xc3, 0x28 }, 6, NULL, false, 1007, "reason is not UTF-8" },
        { { 0x88, 3, 0x03, 0xe8, 0xff }, 5, NULL, false, 1007, "reason is not UTF-8" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        script_t script = { .head = S_101, .extra = cases [i].big ? cases [i].big : cases [i].bytes,
                            .extra_len = cases [i].n };
        seen_t seen = { 0 };
        ah_ws_opts_t opts = { .binary_only = cases [i].binary_only, .on_message = s_on_message,
                              .ud = &seen, .max_message = cases [i].big ? 100 : 0 };
        int hs, peer;
        char err [512];
        ah_ws_t *ws = s_connect (&script, &opts, 2000, -1, &hs, err, sizeof err, &peer);
        CHECK (hs == 0);
        CHECK (ah_ws_read (ws, 1 << 20) == -1);
        CHECK (strstr (ah_ws_error (ws), cases [i].err) != NULL);
        if (!strstr (ah_ws_error (ws), cases [i].err))
            fprintf (stderr, "  protocol error %zu: \"%s\" lacks \"%s\"\n", i, ah_ws_error (ws), cases [i].err);
        CHECK (ah_ws_flush (ws) == 0);
        uint8_t got [200];
        int op = -1;
        CHECK (s_client_frame (peer, &op, got, sizeof got) == 2 && op == AH_WS_CLOSE
               && (unsigned) (got [0] << 8 | got [1]) == cases [i].code);
        ah_ws_destroy (&ws);
        close (peer);
        ah_buf_free (&seen.log);
    }
}

//  ---------------------------------------------------------------- interop

static int64_t s_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct {
    seen_t   seen;                  //  messages whole: "B:frag-one|frag-two|frag-three$|"
    ah_buf_t msg;                   //  the message being received
    int      pieces;                //  of the first message
    int      messages;              //  messages ended
} interop_t;

static void s_interop_message (void *ud, int opcode, const uint8_t *data, size_t size, bool last)
{
    interop_t *x = ud;
    ah_buf_append (&x->msg, data, size);
    x->pieces += x->messages == 0;
    if (last) {
        if (ah_buf_size (&x->msg) > 1000)
            ah_buf_appendf (&x->seen.log, "%c:%zu bytes$|", opcode == AH_WS_BIN ? 'B' : 'T', ah_buf_size (&x->msg));
        else
            s_on_message (&x->seen, opcode, ah_buf_head (&x->msg), ah_buf_size (&x->msg), true);
        ah_buf_clear (&x->msg);
        x->messages++;
    }
}

//  Serve the client until want messages ended or the server closed.
static void s_pump (ah_ws_t *ws, interop_t *x, int want)
{
    int64_t until = s_ms () + 10000;
    while (x->messages < want && !x->seen.close_code && s_ms () < until) {
        struct pollfd p = { ah_ws_fd (ws), POLLIN | (ah_ws_pending (ws) ? POLLOUT : 0), 0 };
        poll (&p, 1, 200);
        if (ah_ws_flush (ws) || ah_ws_read (ws, 1 << 20))
            break;
    }
    ah_ws_flush (ws);
}

static void test_interop (const char *peer_script)
{
    int out [2];
    CHECK (pipe (out) == 0);
    pid_t pid = fork ();
    if (pid == 0) {
        dup2 (out [1], 1);
        execl ("/usr/bin/python3", "python3", peer_script, (char *) NULL);
        _exit (127);
    }
    close (out [1]);
    char line [32] = "";
    FILE *f = fdopen (out [0], "r");
    CHECK (fgets (line, sizeof line, f) != NULL);
    fclose (f);
    char text [64];
    snprintf (text, sizeof text, "ws://127.0.0.1:%d/anything", atoi (line));
    ah_ws_url_t url;
    const char *uerr;
    CHECK (ah_ws_url_parse (text, &url, &uerr) == 0);
    char err [512] = "";
    int fd = ah_ws_dial ((struct sockaddr *) &url.addr, url.addr_len, 5000, -1, err, sizeof err);
    CHECK (fd >= 0);
    interop_t x = { 0 };
    ah_ws_io_t io = ah_ws_io_plain (fd);
    ah_ws_opts_t opts = { .protocol = "agenthold-tunnel", .on_message = s_interop_message,
                          .on_close = s_on_close, .ud = &x };
    ah_ws_t *ws = fd >= 0 ? ah_ws_new (&io, &opts) : NULL;
    CHECK (ws && ah_ws_handshake (ws, &url, NULL, 5000, -1, err, sizeof err) == 0);
    if (err [0])
        fprintf (stderr, "  interop: %s\n", err);
    if (ws) {
        //  Three fragments of one message, then the word that our pong came.
        s_pump (ws, &x, 2);
        CHECK_STR (ah_buf_cstr (&x.seen.log), "B:frag-one|frag-two|frag-three$|T:pong ok$|");
        CHECK (x.pieces >= 3);
        static uint8_t big [300000];
        CHECK (ah_ws_send (ws, AH_WS_BIN, big, sizeof big) == 0);
        s_pump (ws, &x, 4);
        CHECK (strstr (ah_buf_cstr (&x.seen.log), "T:binary 300000$|B:300000 bytes$|") != NULL);
        CHECK (ah_ws_send (ws, AH_WS_TEXT, "bye", 3) == 0);
        s_pump (ws, &x, 100);
        CHECK (x.seen.close_code == 4000);
        CHECK_STR (x.seen.close_reason, "done");
        ah_ws_destroy (&ws);
    }
    int status = -1;
    waitpid (pid, &status, 0);
    CHECK (WIFEXITED (status) && WEXITSTATUS (status) == 0);
    ah_buf_free (&x.seen.log);
    ah_buf_free (&x.msg);

    //  Nobody listens any more: the dial says so.
    fd = ah_ws_dial ((struct sockaddr *) &url.addr, url.addr_len, 2000, -1, err, sizeof err);
    CHECK (fd == -1 && strstr (err, "connect 127.0.0.1:") && strstr (err, "refused"));
}

//  proto/wsframe on the server's side: masks required, the rules every
//  peer checks, a round trip masked and not.
static void test_frames_server_side (void)
{
    ah_buf_t b = { 0 };
    uint8_t mask [4] = { 1, 2, 3, 4 };
    uint8_t big [70000];
    memset (big, 'x', sizeof big);
    CHECK (ah_wsframe_append (&b, AH_WS_BIN, true, big, sizeof big, mask) == 0);
    ah_wsframe_t f;
    const char *why = NULL;
    for (size_t i = 0; i < 14; i++)         //  "need more" until the header is whole
        CHECK (ah_wsframe_parse (ah_buf_head (&b), i, true, &f, &why) == (i >= 14 ? 1 : 0));
    CHECK (ah_wsframe_parse (ah_buf_head (&b), ah_buf_size (&b), true, &f, &why) == 1);
    CHECK (f.fin && f.opcode == AH_WS_BIN && f.masked && f.length == sizeof big && f.header == 14);
    uint8_t *payload = ah_buf_head (&b) + f.header;
    ah_wsframe_unmask (payload, 100, f.mask, 0);
    ah_wsframe_unmask (payload + 100, sizeof big - 100, f.mask, 100);
    CHECK (memcmp (payload, big, sizeof big) == 0);
    CHECK (ah_wsframe_parse (ah_buf_head (&b), ah_buf_size (&b), false, &f, &why) == -1 && why);
    ah_buf_clear (&b);
    ah_wsframe_append (&b, AH_WS_TEXT, true, "hi", 2, NULL);            //  unmasked: a server's
    CHECK (ah_wsframe_parse (ah_buf_head (&b), ah_buf_size (&b), true, &f, &why) == -1);
    CHECK (ah_wsframe_parse (ah_buf_head (&b), ah_buf_size (&b), false, &f, &why) == 1 && f.length == 2);
    uint8_t reserved [] = { 0xc2, 0x80, 0, 0, 0, 0 };
    CHECK (ah_wsframe_parse (reserved, sizeof reserved, true, &f, &why) == -1);
    uint8_t long_ping [] = { 0x89, 0x80 | 126, 0, 200 };
    CHECK (ah_wsframe_parse (long_ping, sizeof long_ping, true, &f, &why) == -1);
    uint8_t split_close [] = { 0x08, 0x80 };
    CHECK (ah_wsframe_parse (split_close, sizeof split_close, true, &f, &why) == -1);
    uint8_t unknown [] = { 0x83, 0x80 };
    CHECK (ah_wsframe_parse (unknown, sizeof unknown, true, &f, &why) == -1);
    uint8_t top_bit [14] = { 0x82, 0x80 | 127, 0x80 };
    CHECK (ah_wsframe_parse (top_bit, sizeof top_bit, true, &f, &why) == -1);
    ah_buf_free (&b);
}

int main (int argc, char **argv)
{
    test_frames_server_side ();
    test_accept_and_url ();
    test_session ();
    test_refusals ();
    test_protocol_errors ();
    if (argc > 1)
        test_interop (argv [1]);
    else
        CHECK (!"the interop peer's path is needed (ws_peer.py)");
    return CHECK_DONE ();
}
