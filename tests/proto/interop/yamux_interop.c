/*  tests/proto/interop/yamux_interop.c: our yamux against hashicorp's.

    Usage: yamux_interop PEER_BINARY client|server [WINDOW]
    Starts the Go peer (peer.go) with one end of a socketpair as its stdin
    and stdout and drives our session over the other end with poll():
    opens streams that the peer echoes (0 bytes to several windows, checked
    byte for byte), resets one, echoes the streams the peer opens (the peer
    checks those by SHA-256), pings, answers the peer's pings, receives
    the peer's go away, then goes away itself and closes. Passes only if both sides say so.        */
#include "tests/common/check.h"
#include "tests/proto/peer.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ID 256

typedef struct {
    bool     ours;              //  we opened it (else the Go side did)
    bool     used;
    //  Ours: what we send and what came back
    uint8_t *send;
    size_t   send_len, sent;
    bool     fin_sent;
    bytes_t  back;
    //  Theirs: echo buffer (bounded by our receive window: we consume
    //  only what we have written back)
    bytes_t  pending;
    bool     eof;
    bool     closed, reset;
} stream_t;

typedef struct {
    ah_yamux_t *y;
    bytes_t  out;
    size_t   out_off;
    stream_t streams [MAX_ID];
    int      pongs;
    int      theirs_closed;
    int      goaways;
    uint32_t goaway_code;
} ctx_t;

static void s_pump_send (ctx_t *c, uint32_t id)
{
    stream_t *s = &c->streams [id];
    while (s->sent < s->send_len) {
        ssize_t n = ah_yamux_write (c->y, id, s->send + s->sent, s->send_len - s->sent);
        if (n <= 0)
            return;             //  blocked: on_writable resumes
        s->sent += (size_t) n;
    }
    if (!s->fin_sent) {
        s->fin_sent = true;
        CHECK (ah_yamux_close (c->y, id) == 0);
    }
}

static void s_pump_echo (ctx_t *c, uint32_t id)
{
    stream_t *s = &c->streams [id];
    size_t done = 0;
    while (done < s->pending.len) {
        ssize_t n = ah_yamux_write (c->y, id, s->pending.data + done, s->pending.len - done);
        if (n <= 0)
            break;
        done += (size_t) n;
    }
    if (done) {
        memmove (s->pending.data, s->pending.data + done, s->pending.len - done);
        s->pending.len -= done;
        ah_yamux_consumed (c->y, id, done);
    }
    if (s->eof && s->pending.len == 0 && !s->fin_sent) {
        s->fin_sent = true;
        CHECK (ah_yamux_close (c->y, id) == 0);
    }
}

static void c_output (void *ud, const uint8_t *data, size_t size)
{
    ctx_t *c = ud;
    bytes_add (&c->out, data, size);
}

static void c_open (void *ud, uint32_t id)
{
    ctx_t *c = ud;
    CHECK (id < MAX_ID);
    if (id >= MAX_ID) {
        ah_yamux_reset (c->y, id);
        return;
    }
    c->streams [id].used = true;
    c->streams [id].ours = false;
}

static void c_data (void *ud, uint32_t id, const uint8_t *data, size_t size)
{
    ctx_t *c = ud;
    if (id >= MAX_ID)
        return;
    stream_t *s = &c->streams [id];
    if (s->ours) {
        bytes_add (&s->back, data, size);
        ah_yamux_consumed (c->y, id, size);
    }
    else {
        bytes_add (&s->pending, data, size);
        s_pump_echo (c, id);
    }
}

static void c_eof (void *ud, uint32_t id)
{
    ctx_t *c = ud;
    if (id >= MAX_ID)
        return;
    c->streams [id].eof = true;
    if (!c->streams [id].ours)
        s_pump_echo (c, id);
}

static void c_closed (void *ud, uint32_t id, bool reset)
{
    ctx_t *c = ud;
    if (id >= MAX_ID)
        return;
    c->streams [id].closed = true;
    c->streams [id].reset = reset;
    if (!c->streams [id].ours)
        c->theirs_closed++;
}

static void c_writable (void *ud, uint32_t id)
{
    ctx_t *c = ud;
    if (id >= MAX_ID)
        return;
    if (c->streams [id].ours)
        s_pump_send (c, id);
    else
        s_pump_echo (c, id);
}

static void c_pong (void *ud, uint32_t opaque)
{
    ctx_t *c = ud;
    CHECK (opaque == 0x5eed1234);
    c->pongs++;
}

static void c_goaway (void *ud, uint32_t code)
{
    ctx_t *c = ud;
    c->goaways++;
    c->goaway_code = code;
}

static double s_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

//  One poll round: flush output, read input. -1 on EOF/error.
static int s_io (ctx_t *c, int fd, int timeout_ms)
{
    struct pollfd p = { fd, POLLIN, 0 };
    if (c->out.len > c->out_off)
        p.events |= POLLOUT;
    int rc = poll (&p, 1, timeout_ms);
    if (rc < 0)
        return errno == EINTR? 0: -1;
    if (p.revents & POLLOUT) {
        ssize_t n = write (fd, c->out.data + c->out_off, c->out.len - c->out_off);
        if (n > 0) {
            c->out_off += (size_t) n;
            if (c->out_off == c->out.len)
                c->out.len = c->out_off = 0;
        }
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
        uint8_t buf [65536];
        ssize_t n = read (fd, buf, sizeof buf);
        if (n == 0)
            return -1;
        if (n < 0)
            return errno == EAGAIN || errno == EINTR? 0: -1;
        const char *err = NULL;
        if (c->y && ah_yamux_input (c->y, buf, (size_t) n, &err) < 0) {
            fprintf (stderr, "C side: input error: %s\n", err? err: "?");
            CHECK (0);
            return -1;
        }
    }
    return 0;
}

int main (int argc, char **argv)
{
    if (argc < 3) {
        fprintf (stderr, "usage: yamux_interop PEER_BINARY client|server [WINDOW]\n");
        return 2;
    }
    bool is_client = strcmp (argv [2], "client") == 0;
    const char *window = argc > 3? argv [3]: "262144";
    signal (SIGPIPE, SIG_IGN);

    int sv [2];
    if (socketpair (AF_UNIX, SOCK_STREAM, 0, sv) < 0) {
        perror ("socketpair");
        return 2;
    }
    //  Our streams: sizes from empty to several windows; the last is reset
    static const size_t sizes [] = { 0, 1, 100000, 3u << 20, 1000 };
    const int nours = (int) (sizeof sizes / sizeof sizes [0]);
    char accept_arg [32], resets_arg [32], window_arg [48];
    snprintf (accept_arg, sizeof accept_arg, "-accept=%d", nours);
    snprintf (resets_arg, sizeof resets_arg, "-resets=1");
    snprintf (window_arg, sizeof window_arg, "-window=%s", window);

    pid_t pid = fork ();
    if (pid < 0) {
        perror ("fork");
        return 2;
    }
    if (pid == 0) {
        dup2 (sv [1], 0);
        dup2 (sv [1], 1);
        close (sv [0]);
        close (sv [1]);
        execl (argv [1], argv [1], is_client? "-role=server": "-role=client",
               accept_arg, resets_arg, window_arg, (char *) NULL);
        fprintf (stderr, "cannot run %s: %s\n", argv [1], strerror (errno));
        _exit (127);
    }
    close (sv [1]);
    int fd = sv [0];
    fcntl (fd, F_SETFL, fcntl (fd, F_GETFL) | O_NONBLOCK);

    ctx_t *c = calloc (1, sizeof *c);
    ah_yamux_callbacks_t cb = { c_output, c_open, c_data, c_eof, c_closed,
                                c_writable, c_pong, c_goaway, NULL, NULL, NULL };
    c->y = ah_yamux_new (is_client, &cb, c);

    uint32_t ids [8];
    for (int i = 0; i < nours; i++) {
        CHECK (ah_yamux_open (c->y, &ids [i]) == 0);
        CHECK (ids [i] % 2 == (is_client? 1u: 0u));
        stream_t *s = &c->streams [ids [i]];
        s->used = s->ours = true;
        s->send_len = sizes [i];
        s->send = malloc (sizes [i] + 1);
        uint32_t x = 12345u + (uint32_t) i;
        for (size_t k = 0; k < sizes [i]; k++) {
            x = x * 1664525u + 1013904223u;
            s->send [k] = (uint8_t) (x >> 24);
        }
        if (i == nours - 1) {
            //  Some data, then abort: the Go side must see a reset
            CHECK (ah_yamux_write (c->y, ids [i], s->send, s->send_len) == (ssize_t) s->send_len);
            CHECK (ah_yamux_reset (c->y, ids [i]) == 0);
            CHECK (s->closed && s->reset);
        }
        else
            s_pump_send (c, ids [i]);
    }
    CHECK (ah_yamux_ping (c->y, 0x5eed1234) == 0);

    //  Run until our streams came back, theirs (3) were echoed, and the pong
    double deadline = s_now () + 40;
    bool done = false;
    while (s_now () < deadline) {
        if (s_io (c, fd, 100) < 0)
            break;
        done = c->pongs >= 1 && c->theirs_closed >= 3 && c->goaways >= 1;
        for (int i = 0; i < nours; i++)
            done = done && c->streams [ids [i]].closed;
        if (done)
            break;
    }
    CHECK (done);
    if (!done)
        fprintf (stderr, "C side: not done: pongs %d, peer streams closed %d, go aways %d\n",
                 c->pongs, c->theirs_closed, c->goaways);
    //  After the peer's go away we open nothing more
    uint32_t late;
    CHECK (c->goaways == 1 && c->goaway_code == AH_YAMUX_GOAWAY_NORMAL);
    CHECK (ah_yamux_open (c->y, &late) == -1);
    for (int i = 0; i < nours - 1; i++) {
        stream_t *s = &c->streams [ids [i]];
        bool same = s->back.len == s->send_len
                 && (s->send_len == 0 || memcmp (s->back.data, s->send, s->send_len) == 0);
        CHECK (same);
        CHECK (s->eof && s->closed && !s->reset);
        fprintf (stderr, "C side: stream %u: %zu bytes sent, %zu echoed back, %s\n",
                 ids [i], s->send_len, s->back.len, same? "identical": "DIFFERENT");
    }
    for (uint32_t id = 0; id < MAX_ID; id++) {
        stream_t *s = &c->streams [id];
        if (s->used && !s->ours)
            CHECK (s->closed && !s->reset && s->pending.len == 0);
    }
    CHECK (ah_yamux_stream_count (c->y) == 0);

    //  Go away, flush, close our direction; the peer then closes too
    ah_yamux_goaway (c->y, AH_YAMUX_GOAWAY_NORMAL);
    while (c->out.len > c->out_off && s_now () < deadline)
        if (s_io (c, fd, 100) < 0)
            break;
    shutdown (fd, SHUT_WR);
    while (s_now () < deadline)
        if (s_io (c, fd, 100) < 0)
            break;

    int status = 0;
    pid_t w = 0;
    while (s_now () < deadline + 5 && (w = waitpid (pid, &status, WNOHANG)) == 0)
        usleep (10000);
    if (w == 0) {
        kill (pid, SIGKILL);
        waitpid (pid, &status, 0);
        fprintf (stderr, "C side: the Go peer did not exit\n");
        CHECK (0);
    }
    else {
        CHECK (WIFEXITED (status) && WEXITSTATUS (status) == 0);
        if (!WIFEXITED (status) || WEXITSTATUS (status) != 0)
            fprintf (stderr, "C side: the Go peer failed (status %d)\n", status);
    }
    close (fd);
    ah_yamux_destroy (&c->y);
    for (uint32_t id = 0; id < MAX_ID; id++) {
        free (c->streams [id].send);
        bytes_free (&c->streams [id].back);
        bytes_free (&c->streams [id].pending);
    }
    bytes_free (&c->out);
    free (c);
    return CHECK_DONE ();
}
