/*  tests/sandboxd/test_sandboxd_port.c: the port and ports channels
    (docs/tunnel.md) against a real sandboxd instance (in-process, raw
    yamux over a socketpair) and real TCP servers of the test's own on
    the loopback: the listening ports listed; 4 MiB through an echo
    server and back whole, in order; the opener's FIN reaching the server
    and the server's close ending the stream; a server that pushes while
    the opener does not read held to the window; a port nobody listens
    on refused; hostile port arguments.                                  */
#include "tests/sandboxd/sbd_peer.h"

#include <pthread.h>


//  A listening socket on 127.0.0.1 (port in *port).
static int s_listen (int *port)
{
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK (fd >= 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    CHECK (bind (fd, (struct sockaddr *) &sa, sizeof sa) == 0);
    CHECK (listen (fd, 16) == 0);
    socklen_t len = sizeof sa;
    CHECK (getsockname (fd, (struct sockaddr *) &sa, &len) == 0);
    *port = ntohs (sa.sin_port);
    return fd;
}

typedef enum { ECHO, CLOSE_AT_ONCE, PUSH } mode_t_;
typedef struct {
    int lfd;
    mode_t_ mode;
    size_t got;                 //  ECHO: bytes echoed; PUSH: bytes the kernel took
    bool saw_eof;               //  ECHO: the opener's FIN arrived
} server_t;

static void *s_serve (void *arg)
{
    server_t *sv = arg;
    int fd = accept (sv->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    if (sv->mode == CLOSE_AT_ONCE) {
        close (fd);
        return NULL;
    }
    if (sv->mode == PUSH) {
        fcntl (fd, F_SETFL, O_NONBLOCK);
        static uint8_t block [65536];
        int64_t until = now_ms () + 1500;
        while (now_ms () < until) {
            ssize_t w = send (fd, block, sizeof block, MSG_NOSIGNAL);
            if (w > 0)
                __atomic_add_fetch (&sv->got, (size_t) w, __ATOMIC_SEQ_CST);
            else
                usleep (10000);
        }
        close (fd);
        return NULL;
    }
    uint8_t buf [65536];
    for (;;) {
        ssize_t r = read (fd, buf, sizeof buf);
        if (r <= 0) {
            sv->saw_eof = r == 0;
            break;
        }
        size_t off = 0;
        while (off < (size_t) r) {
            ssize_t w = write (fd, buf + off, (size_t) r - off);
            if (w <= 0)
                break;
            off += (size_t) w;
        }
        __atomic_add_fetch (&sv->got, (size_t) r, __ATOMIC_SEQ_CST);
    }
    close (fd);
    return NULL;
}

static uint32_t s_open_port (peer_t *p, int64_t port, ah_msg_t **reply)
{
    ah_msg_t *req = req_new ("port");
    ah_msg_set_int (req, "port", port);
    uint32_t id = open_chan (p, &req);
    *reply = wait_header (p, id, 5000);
    return id;
}

static void test_ports (peer_t *p, int port)
{
    ah_msg_t *r = simple (p, req_new ("ports"));
    CHECK (reply_ok (r));
    size_t size = 0;
    const uint8_t *raw = r ? ah_msg_raw (r, "ports", &size) : NULL;
    CHECK (raw != NULL);
    bool found = false;
    if (raw) {
        msgpack_unpacked u;
        msgpack_unpacked_init (&u);
        CHECK (msgpack_unpack_next (&u, (const char *) raw, size, NULL) == MSGPACK_UNPACK_SUCCESS);
        CHECK (u.data.type == MSGPACK_OBJECT_ARRAY);
        for (uint32_t i = 0; u.data.type == MSGPACK_OBJECT_ARRAY && i < u.data.via.array.size; i++) {
            msgpack_object e = u.data.via.array.ptr [i];
            int64_t got = -1;
            char addr [64] = "";
            for (uint32_t k = 0; e.type == MSGPACK_OBJECT_MAP && k < e.via.map.size; k++) {
                msgpack_object key = e.via.map.ptr [k].key, val = e.via.map.ptr [k].val;
                if (key.via.str.size == 4 && !memcmp (key.via.str.ptr, "port", 4))
                    got = (int64_t) val.via.u64;
                if (key.via.str.size == 7 && !memcmp (key.via.str.ptr, "address", 7))
                    snprintf (addr, sizeof addr, "%.*s", (int) val.via.str.size, val.via.str.ptr);
            }
            if (got == port && !strcmp (addr, "127.0.0.1"))
                found = true;
        }
        msgpack_unpacked_destroy (&u);
    }
    CHECK (found);
    ah_msg_destroy (&r);
}

static void test_echo (peer_t *p)
{
    int port = 0;
    server_t sv = { .lfd = s_listen (&port), .mode = ECHO };
    pthread_t t;
    pthread_create (&t, NULL, s_serve, &sv);
    test_ports (p, port);
    ah_msg_t *r = NULL;
    uint32_t id = s_open_port (p, port, &r);
    CHECK (reply_ok (r) && !strcmp (ah_msg_str (r, "address"), "127.0.0.1"));
    ah_msg_destroy (&r);
    tstream_t *s = find (p, id);
    enum { TOTAL = 4 << 20 };
    uint8_t *data = malloc (TOTAL);
    for (size_t i = 0; i < TOTAL; i++)
        data [i] = (uint8_t) (i * 2654435761u >> 13);
    size_t sent = 0;
    int64_t until = now_ms () + 30000;
    while ((sent < TOTAL || s->len < TOTAL) && now_ms () < until && !p->failed) {
        if (sent < TOTAL) {
            ssize_t w = ah_yamux_write (p->y, id, data + sent, TOTAL - sent);
            if (w > 0)
                sent += (size_t) w;
        }
        pump (p, 20);
    }
    //  (total counts the reply header too, which wait_header took)
    CHECK (sent == TOTAL && s->len == TOTAL && fnv (s->buf, s->len, 0) == fnv (data, TOTAL, 0));
    //  The opener's FIN reaches the server; its close ends the stream.
    ah_yamux_close (p->y, id);
    CHECK (wait_until (p, &s->eof, 5000));
    pthread_join (t, NULL);
    CHECK (sv.saw_eof && sv.got == TOTAL);
    free (data);
    close (sv.lfd);
}

//  A server of mode on a fresh port, served by thread t, and a port
//  stream to it whose reply was ok.
static uint32_t s_serve_and_open (peer_t *p, server_t *sv, mode_t_ mode, pthread_t *t)
{
    int port = 0;
    *sv = (server_t) { .lfd = s_listen (&port), .mode = mode };
    pthread_create (t, NULL, s_serve, sv);
    ah_msg_t *r = NULL;
    uint32_t id = s_open_port (p, port, &r);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
    return id;
}

static void test_close_at_once (peer_t *p)
{
    server_t sv;
    pthread_t t;
    uint32_t id = s_serve_and_open (p, &sv, CLOSE_AT_ONCE, &t);
    CHECK (wait_until (p, &find (p, id)->eof, 5000));
    pthread_join (t, NULL);
    close (sv.lfd);
}

//  A server that pushes as fast as it can while the opener reads nothing:
//  sandboxd sends no more than the window and buffers nothing beyond it.
static void test_port_flow (peer_t *p)
{
    server_t sv;
    pthread_t t;
    uint32_t id = s_serve_and_open (p, &sv, PUSH, &t);
    p->hold = true;
    int64_t until = now_ms () + 1200;
    while (now_ms () < until)
        pump (p, 20);
    tstream_t *s = find (p, id);
    printf ("flow: the server pushed %zu bytes, the opener (not reading) got %zu\n",
            __atomic_load_n (&sv.got, __ATOMIC_SEQ_CST), s->len);
    CHECK (s->len > 0 && s->len <= AH_YAMUX_MAX_WINDOW);
    p->hold = false;
    ah_yamux_consumed (p->y, id, s->len);
    pthread_join (t, NULL);
    ah_yamux_reset (p->y, id);
    pump (p, 20);
    close (sv.lfd);
}

static void test_refused (peer_t *p)
{
    int port = 0;
    int lfd = s_listen (&port);
    close (lfd);                        //  nobody listens there now
    ah_msg_t *r = NULL;
    s_open_port (p, port, &r);
    CHECK (r && !reply_ok (r) && !strcmp (reply_code (r), "ECONNREFUSED"));
    CHECK (r && strstr (ah_msg_str (r, "error"), "nothing answers on port"));
    ah_msg_destroy (&r);
    //  Hostile arguments.
    const int64_t bad [] = { 0, -1, 65536, 1LL << 40 };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        s_open_port (p, bad [i], &r);
        CHECK (r && !reply_ok (r) && !strcmp (reply_code (r), "EINVAL"));
        ah_msg_destroy (&r);
    }
    ah_msg_t *req = req_new ("port");
    ah_msg_set_str (req, "port", "80");
    r = simple (p, req);
    CHECK (r && !reply_ok (r) && !strcmp (reply_code (r), "EINVAL"));
    ah_msg_destroy (&r);
    r = simple (p, req_new ("port"));
    CHECK (r && !reply_ok (r) && !strcmp (reply_code (r), "EINVAL"));
    ah_msg_destroy (&r);
}

int main (void)
{
    peer_t *p;
    ah_sandboxd_t *sbd = instance_start ("ah-sandboxd-port", &p);
    test_echo (p);
    test_close_at_once (p);
    test_port_flow (p);
    test_refused (p);
    CHECK (!p->failed);
    instance_end (&sbd, &p);
    return CHECK_DONE ();
}
