/*  tests/sandboxd/sbd_peer.c: the test's side of sandboxd's channel layer
    (see sbd_peer.h).                                                    */
#include "tests/sandboxd/sbd_peer.h"

int64_t now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

tstream_t *find (peer_t *p, uint32_t id)
{
    for (int i = 0; i < p->n; i++)
        if (p->s [i].id == id)
            return &p->s [i];
    return NULL;
}

void cb_output (void *ud, const uint8_t *d, size_t n)
{
    peer_t *p = ud;
    while (n > 0) {
        ssize_t w = write (p->fd, d, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pf = { p->fd, POLLOUT, 0 };
            poll (&pf, 1, 100);
            continue;
        }
        if (w <= 0) {
            p->failed = true;
            return;
        }
        d += w;
        n -= (size_t) w;
    }
}

void cb_data (void *ud, uint32_t id, const uint8_t *d, size_t n)
{
    peer_t *p = ud;
    tstream_t *s = find (p, id);
    if (!s)
        return;
    if (s->len + n > s->cap) {
        s->cap = (s->len + n) * 2;
        s->buf = realloc (s->buf, s->cap);
    }
    memcpy (s->buf + s->len, d, n);
    s->len += n;
    s->total += n;
    if (!p->hold)
        ah_yamux_consumed (p->y, id, n);
}

void cb_eof (void *ud, uint32_t id)
{
    tstream_t *s = find (ud, id);
    if (s)
        s->eof = true;
}

void cb_closed (void *ud, uint32_t id, bool reset)
{
    tstream_t *s = find (ud, id);
    if (s) {
        s->closed = true;
        s->reset = reset;
    }
}

int peer_up (peer_t *p)
{
    int sv [2];
    CHECK (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    fcntl (sv [1], F_SETFL, O_NONBLOCK);
    memset (p, 0, sizeof *p);
    p->fd = sv [0];
    ah_yamux_callbacks_t cb = { .output = cb_output, .on_data = cb_data, .on_eof = cb_eof,
                                .on_closed = cb_closed };
    p->y = ah_yamux_new (true, &cb, p);
    return sv [1];
}

void peer_down (peer_t *p)
{
    ah_yamux_destroy (&p->y);
    for (int i = 0; i < p->n; i++)
        free (p->s [i].buf);
    close (p->fd);
    p->fd = -1;
}

void hello (peer_t *p)
{
    ah_msg_t *req = req_new ("hello");
    ah_msg_set_int (req, "version", AH_PROTOCOL_VERSION);
    ah_msg_t *r = simple (p, req);
    CHECK (reply_ok (r));
    ah_msg_destroy (&r);
}

ah_sandboxd_t *instance_start (const char *name, peer_t **p)
{
    ah_sandboxd_t *sbd = NULL;
    *p = peer_start (name, 0, NULL, &sbd);
    if (sbd)
        hello (*p);
    return sbd;
}

void instance_end (ah_sandboxd_t **sbd, peer_t **p)
{
    peer_finish (*p, sbd);
    *p = NULL;
}

//  Read what the socket has (waiting up to ms) and feed it to yamux.
int redial_pipe [2];

int redial (void *ud)
{
    (void) ud;
    int fd = -1;
    if (read (redial_pipe [0], &fd, sizeof fd) != (ssize_t) sizeof fd)
        return -1;
    return fd;
}

void pump (peer_t *p, int ms)
{
    struct pollfd pf = { p->fd, POLLIN, 0 };
    if (poll (&pf, 1, ms) <= 0)
        return;
    uint8_t buf [65536];
    ssize_t r = read (p->fd, buf, sizeof buf);
    if (r <= 0) {
        p->failed = true;
        return;
    }
    const char *err = NULL;
    if (ah_yamux_input (p->y, buf, (size_t) r, &err)) {
        fprintf (stderr, "test yamux: %s\n", err);
        p->failed = true;
    }
}

uint32_t open_raw (peer_t *p, const uint8_t *hdr, size_t size)
{
    uint32_t id = 0;
    if (ah_yamux_open (p->y, &id) || p->n == MAXS)
        return 0;
    tstream_t *s = &p->s [p->n++];
    memset (s, 0, sizeof *s);
    s->id = id;
    ssize_t w = ah_yamux_write (p->y, id, hdr, size);
    CHECK (w == (ssize_t) size);
    return id;
}

uint32_t open_chan (peer_t *p, ah_msg_t **req)
{
    uint8_t *hdr = NULL;
    size_t size = 0;
    CHECK (ah_chan_header_encode (*req, &hdr, &size) == 0);
    ah_msg_destroy (req);
    uint32_t id = open_raw (p, hdr, size);
    free (hdr);
    return id;
}

void take (tstream_t *s, size_t n)
{
    memmove (s->buf, s->buf + n, s->len - n);
    s->len -= n;
}

//  Wait for a header on stream id (reply or trailer).
ah_msg_t *wait_header (peer_t *p, uint32_t id, int ms)
{
    int64_t until = now_ms () + ms;
    tstream_t *s = find (p, id);
    while (s && now_ms () < until && !p->failed) {
        ah_msg_t *m = NULL;
        size_t used = 0;
        const char *err = NULL;
        int rc = ah_chan_header_decode (s->buf, s->len, &m, &used, &err);
        if (rc == 1) {
            take (s, used);
            return m;
        }
        if (rc < 0 || s->closed)
            return NULL;
        pump (p, 50);
    }
    return NULL;
}

bool wait_until (peer_t *p, bool *flag, int ms)
{
    int64_t until = now_ms () + ms;
    while (!*flag && now_ms () < until && !p->failed)
        pump (p, 50);
    return *flag;
}

ah_msg_t *req_new (const char *ch)
{
    ah_msg_t *m = ah_msg_new ("");
    ah_msg_set_str (m, "ch", ch);
    return m;
}

//  Open a channel that answers in its header alone; return the reply.
ah_msg_t *simple (peer_t *p, ah_msg_t *req)
{
    uint32_t id = open_chan (p, &req);
    ah_yamux_close (p->y, id);
    ah_msg_t *r = wait_header (p, id, 5000);
    tstream_t *s = find (p, id);
    if (s)
        wait_until (p, &s->eof, 5000);
    return r;
}

bool reply_ok (ah_msg_t *r)
{
    return r && ah_msg_bool (r, "ok", false);
}

const char *reply_code (ah_msg_t *r)
{
    return r ? ah_msg_str (r, "code") : NULL;
}

char home [PATH_MAX], outside [PATH_MAX], root [PATH_MAX];

void make_tree (const char *name)
{
    snprintf (root, sizeof root, "/tmp/%s-XXXXXX", name);
    CHECK (mkdtemp (root) != NULL);
    CHECK (snprintf (home, sizeof home, "%s/home", root) < (int) sizeof home);
    CHECK (snprintf (outside, sizeof outside, "%s/outside", root) < (int) sizeof outside);
    CHECK (mkdir (home, 0755) == 0);
    CHECK (mkdir (outside, 0755) == 0);
}

bool file_exists (const char *dir, const char *name)
{
    char path [PATH_MAX * 2];
    snprintf (path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return lstat (path, &st) == 0;
}

uint64_t fnv (const uint8_t *d, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ d [i]) * 1099511628211ull;
    return h;
}


void peer_finish (peer_t *p, ah_sandboxd_t **sbd)
{
    peer_down (p);
    int none = -1;
    CHECK (write (redial_pipe [1], &none, sizeof none) == (ssize_t) sizeof none);
    ah_sandboxd_stop (sbd);
    free (p);
    close (redial_pipe [0]);
    close (redial_pipe [1]);
    char cmd [PATH_MAX + 16];
    snprintf (cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system (cmd) != 0) { }
}

peer_t *peer_start (const char *name, int egress_port, void (*on_open) (void *, uint32_t),
                    ah_sandboxd_t **sbd)
{
    signal (SIGPIPE, SIG_IGN);
    make_tree (name);
    CHECK (pipe2 (redial_pipe, O_CLOEXEC) == 0);
    int sv [2];
    CHECK (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    fcntl (sv [1], F_SETFL, O_NONBLOCK);
    peer_t *p = calloc (1, sizeof *p);
    p->fd = sv [0];
    ah_yamux_callbacks_t cb = { .output = cb_output, .on_data = cb_data, .on_eof = cb_eof,
                                .on_closed = cb_closed, .on_open = on_open };
    p->y = ah_yamux_new (true, &cb, p);
    ah_sandboxd_opts_t opts = {
        .agent_id = "agent-test", .home = home, .switch_user = false, .egress_port = egress_port,
        .raw_transport = true, .raw_fd = sv [1], .raw_redial = redial,
    };
    *sbd = ah_sandboxd_start (&opts);
    CHECK (*sbd != NULL);
    return p;
}
