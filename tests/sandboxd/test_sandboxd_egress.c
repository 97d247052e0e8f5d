/*  tests/sandboxd/test_sandboxd_egress.c: sandboxd's egress proxy
    (sandboxd/egress.c, docs/egress.md) against a real instance
    (in-process, raw yamux over a socketpair); the test plays the server:
    it takes the streams sandboxd opens, reads their egress header,
    allows "allowed.test" (and then answers as the upstream itself) and
    refuses anything else with EACCES and a sentence naming a rule.
    Shown: CONNECT through to the upstream both ways after "200
    Connection established"; a plain absolute-URI request going upstream
    whole; a refusal read by the client as 403 with the rule in the body;
    malformed request lines, a raw numeric-looking host and a huge head
    answered by the proxy itself without a stream; the connection beyond
    the cap answered 503 while the others wait.                        */
#include "tests/sandboxd/sbd_peer.h"

#include "sandboxd/chan.h"

#include <pthread.h>

typedef struct {
    int port;                   //  the proxy's
    const char *request;        //  sent first
    const char *then;           //  sent after the answer's head (CONNECT), or NULL
    size_t want;                //  bytes of answer to wait for after `then` (0: until close)
    char answer [8192];
    size_t got;
    volatile bool done;
} client_t;

static int s_connect (int port)
{
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port),
                              .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    if (fd < 0 || connect (fd, (struct sockaddr *) &sa, sizeof sa)) {
        if (fd >= 0)
            close (fd);
        return -1;
    }
    struct timeval tv = { .tv_sec = 5 };
    setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static void *s_client (void *arg)
{
    client_t *c = arg;
    int fd = s_connect (c->port);
    if (fd >= 0) {
        (void) !write (fd, c->request, strlen (c->request));
        bool sent_then = false;
        for (;;) {
            ssize_t r = read (fd, c->answer + c->got, sizeof c->answer - 1 - c->got);
            if (r <= 0)
                break;
            c->got += (size_t) r;
            c->answer [c->got] = 0;
            if (c->then && !sent_then && strstr (c->answer, "\r\n\r\n")) {
                (void) !write (fd, c->then, strlen (c->then));
                sent_then = true;
            }
            char *body = strstr (c->answer, "\r\n\r\n");
            if (c->want && body && c->got - (size_t) (body + 4 - c->answer) >= c->want)
                break;
        }
        close (fd);
    }
    c->done = true;
    return NULL;
}

//  The streams sandboxd opens, recorded like the test's own.
static void s_on_open (void *ud, uint32_t id)
{
    peer_t *p = ud;
    if (p->n == MAXS)
        return;
    tstream_t *s = &p->s [p->n++];
    memset (s, 0, sizeof *s);
    s->id = id;
}

typedef struct {
    bool answered;
    bool allowed;
    char host [64];
    int port;
    char kind [16];
} served_t;

static served_t served [MAXS];
static int opened;              //  egress streams seen

//  The test's server: answer each new egress header, then be the
//  upstream: echo CONNECT's bytes uppercased; answer a plain request.
static void s_serve (peer_t *p)
{
    for (int i = 0; i < p->n; i++) {
        tstream_t *s = &p->s [i];
        if (s->id % 2)
            continue;                       //  ours (odd): the hello
        served_t *sv = &served [i];
        if (!sv->answered) {
            ah_msg_t *req = NULL;
            size_t used = 0;
            const char *err = NULL;
            if (ah_chan_header_decode (s->buf, s->len, &req, &used, &err) != 1)
                continue;
            take (s, used);
            sv->answered = true;
            opened++;
            snprintf (sv->host, sizeof sv->host, "%s", ah_msg_str (req, "host") ? ah_msg_str (req, "host") : "");
            snprintf (sv->kind, sizeof sv->kind, "%s", ah_msg_str (req, "kind") ? ah_msg_str (req, "kind") : "");
            sv->port = (int) ah_msg_int (req, "port", 0);
            CHECK_STR (ah_msg_str (req, "ch"), "egress");
            ah_msg_destroy (&req);
            ah_msg_t *rep = ah_msg_new ("");
            if (!strcmp (sv->host, "reset.test")) {
                //  A server older than the channel: RST, no answer.
                ah_yamux_reset (p->y, s->id);
                ah_msg_destroy (&rep);
                continue;
            }
            sv->allowed = !strcmp (sv->host, "allowed.test");
            ah_msg_set_bool (rep, "ok", sv->allowed);
            if (sv->allowed)
                ah_msg_set_str (rep, "address", "192.0.2.7");
            else {
                ah_msg_set_str (rep, "code", "EACCES");
                ah_msg_set_str (rep, "error", "egress refused: 'denied.test' is on no allow list "
                                "(rule: catalog egress + tenant allow)");
            }
            uint8_t *hdr = NULL;
            size_t size = 0;
            CHECK (ah_chan_header_encode (rep, &hdr, &size) == 0);
            ah_msg_destroy (&rep);
            CHECK (ah_yamux_write (p->y, s->id, hdr, size) == (ssize_t) size);
            free (hdr);
            if (!sv->allowed)
                ah_yamux_close (p->y, s->id);
        }
        if (!sv->allowed || !s->len)
            continue;
        if (!strcmp (sv->kind, "http")) {
            char *end = memmem (s->buf, s->len, "\r\n\r\n", 4);
            if (!end)
                continue;
            bool absolute = s->len > 30 && !memcmp (s->buf, "GET http://allowed.test:8080/x HTTP/1.1", 39);
            CHECK (absolute);
            take (s, s->len);
            const char *resp = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nupstream";
            CHECK (ah_yamux_write (p->y, s->id, (const uint8_t *) resp, strlen (resp)) == (ssize_t) strlen (resp));
            ah_yamux_close (p->y, s->id);
        }
        else {
            uint8_t up [256];
            size_t n = s->len < sizeof up ? s->len : sizeof up;
            for (size_t k = 0; k < n; k++)
                up [k] = (uint8_t) (s->buf [k] >= 'a' && s->buf [k] <= 'z' ? s->buf [k] - 32 : s->buf [k]);
            take (s, n);
            CHECK (ah_yamux_write (p->y, s->id, up, n) == (ssize_t) n);
        }
    }
}

static void s_run (peer_t *p, client_t *c)
{
    pthread_t th;
    CHECK (pthread_create (&th, NULL, s_client, c) == 0);
    int64_t until = now_ms () + 8000;
    while (!c->done && now_ms () < until) {
        pump (p, 20);
        s_serve (p);
    }
    pthread_join (th, NULL);
}

static int s_free_port (void)
{
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    socklen_t len = sizeof sa;
    CHECK (bind (fd, (struct sockaddr *) &sa, sizeof sa) == 0);
    CHECK (getsockname (fd, (struct sockaddr *) &sa, &len) == 0);
    close (fd);
    return ntohs (sa.sin_port);
}

static void test_connect (peer_t *p, int port)
{
    client_t c = { .port = port, .request = "CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n",
                   .then = "hello upstream", .want = 14 };
    int before = opened;
    s_run (p, &c);
    CHECK (opened == before + 1);
    CHECK (!strncmp (c.answer, "HTTP/1.1 200 Connection established\r\n\r\n", 39));
    CHECK (strstr (c.answer, "HELLO UPSTREAM") != NULL);
    CHECK_STR (served [p->n - 1].kind, "connect");
    CHECK (served [p->n - 1].port == 443);
}

static void test_plain (peer_t *p, int port)
{
    client_t c = { .port = port, .request = "GET http://allowed.test:8080/x HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n" };
    s_run (p, &c);
    CHECK (!strncmp (c.answer, "HTTP/1.1 200 OK", 15));
    CHECK (strstr (c.answer, "\r\n\r\nupstream") != NULL);
    CHECK_STR (served [p->n - 1].kind, "http");
    CHECK (served [p->n - 1].port == 8080);
}

static void test_refused (peer_t *p, int port)
{
    client_t c = { .port = port, .request = "CONNECT denied.test:443 HTTP/1.1\r\n\r\n" };
    s_run (p, &c);
    CHECK (!strncmp (c.answer, "HTTP/1.1 403 ", 13));
    CHECK (strstr (c.answer, "rule: catalog egress + tenant allow") != NULL);
}

//  A server that resets the stream: 502, saying why.
static void test_reset (peer_t *p, int port)
{
    client_t c = { .port = port, .request = "CONNECT reset.test:443 HTTP/1.1\r\n\r\n" };
    s_run (p, &c);
    CHECK (!strncmp (c.answer, "HTTP/1.1 502 ", 13));
    CHECK (strstr (c.answer, "reset the stream") != NULL);
}

//  Answered by the proxy itself: no stream reaches the server.
static void s_local (peer_t *p, int port, const char *request, const char *status, const char *says)
{
    int before = opened;
    client_t c = { .port = port, .request = request };
    s_run (p, &c);
    if (strncmp (c.answer, status, strlen (status)) || (says && !strstr (c.answer, says)))
        fprintf (stderr, "request '%.60s': answer '%.200s'\n", request, c.answer);
    CHECK (!strncmp (c.answer, status, strlen (status)));
    CHECK (!says || strstr (c.answer, says));
    CHECK (opened == before);
}

static void test_hostile (peer_t *p, int port)
{
    s_local (p, port, "CONNECT allowed.test HTTP/1.1\r\n\r\n", "HTTP/1.1 400 ", "host:port");
    s_local (p, port, "CONNECT 0x7f.1:80 HTTP/1.1\r\n\r\n", "HTTP/1.1 400 ", "number");
    s_local (p, port, "CONNECT 2130706433:80 HTTP/1.1\r\n\r\n", "HTTP/1.1 400 ", NULL);
    s_local (p, port, "CONNECT allowed.test:99999 HTTP/1.1\r\n\r\n", "HTTP/1.1 400 ", "port");
    s_local (p, port, "GARBAGE\r\n\r\n", "HTTP/1.1 400 ", NULL);
    s_local (p, port, "CONNECT a:1\nHTTP/1.1\r\n\r\n", "HTTP/1.1 400 ", NULL);
    s_local (p, port, "GET /local HTTP/1.1\r\n\r\n", "HTTP/1.1 400 ", NULL);
    s_local (p, port, "GET https://allowed.test/ HTTP/1.1\r\n\r\n", "HTTP/1.1 400 ", "CONNECT");
    s_local (p, port, "GET ftp://allowed.test/ HTTP/1.1\r\n\r\n", "HTTP/1.1 405 ", NULL);
    //  A head past 16 KiB.
    size_t big = 40000;
    char *huge = malloc (big + 1);
    memcpy (huge, "CONNECT allowed.test:443 HTTP/1.1\r\nX: ", 38);
    memset (huge + 38, 'x', big - 38);
    huge [big] = 0;
    s_local (p, port, huge, "HTTP/1.1 431 ", NULL);
    free (huge);
}

//  AH_SBD_EGRESS_MAX connections that send nothing, then one more: 503.
static void test_cap (peer_t *p, int port)
{
    int fds [AH_SBD_EGRESS_MAX];
    int n = 0;
    for (int i = 0; i < AH_SBD_EGRESS_MAX; i++) {
        fds [i] = s_connect (port);
        if (fds [i] >= 0)
            n++;
    }
    CHECK (n == AH_SBD_EGRESS_MAX);
    //  Let the instance accept them all.
    for (int i = 0; i < 20; i++)
        pump (p, 10);
    s_local (p, port, "CONNECT allowed.test:443 HTTP/1.1\r\n\r\n", "HTTP/1.1 503 ", "256 connections");
    for (int i = 0; i < AH_SBD_EGRESS_MAX; i++)
        if (fds [i] >= 0)
            close (fds [i]);
    for (int i = 0; i < 20; i++)
        pump (p, 10);
    //  Room again once they went.
    test_connect (p, port);
}

int main (void)
{
    int port = s_free_port ();
    ah_sandboxd_t *sbd = NULL;
    peer_t *p = peer_start ("ah-sandboxd-egress", port, s_on_open, &sbd);
    ah_msg_t *req = req_new ("hello");
    ah_msg_set_int (req, "version", AH_PROTOCOL_VERSION);
    ah_msg_t *r = simple (p, req);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);

    test_connect (p, port);
    test_plain (p, port);
    test_refused (p, port);
    test_reset (p, port);
    test_hostile (p, port);
    test_cap (p, port);
    CHECK (!p->failed);

    peer_finish (p, &sbd);
    return CHECK_DONE ();
}
