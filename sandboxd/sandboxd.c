/*  sandboxd/sandboxd.c: the instance: boot card, dial, serve, reconnect.

    DESIGN (see sandboxd.h): one poll loop per instance, in the instance's
    own thread (ah_sandboxd_start) or in the main thread (the binary). The
    transport below the yamux session is either a WebSocket (ws.c) or, for
    tests, a raw socket carrying yamux bytes directly. Output from yamux is
    queued here: yamux bytes are framed into WebSocket messages of at most
    64 KiB when the socket can take them. The queue is bounded in practice
    by the yamux windows (256 KiB per stream); the channel layer also
    stops reading ptys, pipes and files while it holds over 1 MiB.

    The binary may be PID 1 (no --init): it then also reaps orphans, once a
    second, and hands statuses that belong to a channel to the session.  */
#include "sandboxd/sandboxd.h"
#include "sandboxd/boot.h"
#include "sandboxd/chan.h"
#include "sandboxd/ws.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_CONNECT_MS   10000        //  dial + upgrade time limit
#define S_STABLE_MS    10000        //  a connection this old resets the backoff
#define S_READ_MAX     (256 * 1024) //  transport bytes read per loop turn

struct ah_sandboxd_t {
    ah_sandboxd_opts_t opts;        //  string fields point at the copies below
    char *boot_path, *agent_id, *token, *tunnel_url, *home;
    int   home_fd;
    int   wake [2];                 //  written by stop (any thread) or a signal
    atomic_bool stop;
    atomic_int  connections;
    pthread_t thread;
    bool  threaded;
    bool  pid1;
    int64_t reaped_ns;              //  loop thread only
    char  last_error [256];         //  loop thread only: log each new error once at warn
    char  dialled_id [AH_BOOT_VALUE];   //  loop thread only: agent id of this connection
};

typedef struct {
    ah_sandboxd_t *owner;
    int   fd;
    bool  ws;
    ah_ws_parser_t parser;
    uint8_t *yq;                    //  yamux bytes not yet framed (ws)
    size_t   yq_len, yq_cap;
    uint8_t *wq;                    //  wire bytes not yet sent
    size_t   wq_off, wq_len, wq_cap;
    const char *closed;             //  why the transport ended
    char     why [200];
    ah_sbd_session_t *session;
} s_transport_t;

static int64_t s_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int s_append (uint8_t **buf, size_t *len, size_t *cap, const uint8_t *data, size_t size)
{
    if (*len + size > *cap) {
        size_t c = *cap ? *cap : 65536;
        while (c < *len + size)
            c *= 2;
        uint8_t *p = realloc (*buf, c);
        if (!p)
            return -1;
        *buf = p;
        *cap = c;
    }
    memcpy (*buf + *len, data, size);
    *len += size;
    return 0;
}

static void s_t_fail (s_transport_t *t, const char *fmt, const char *detail)
{
    if (t->closed)
        return;
    snprintf (t->why, sizeof t->why, fmt, detail);
    t->closed = t->why;
}

static void s_wq_add (s_transport_t *t, const uint8_t *data, size_t size)
{
    if (t->wq_off == t->wq_len)
        t->wq_off = t->wq_len = 0;
    if (s_append (&t->wq, &t->wq_len, &t->wq_cap, data, size))
        s_t_fail (t, "%s", "out of memory queueing output");
}

//  yamux output
static void s_t_output (void *ud, const uint8_t *data, size_t size)
{
    s_transport_t *t = ud;
    if (t->ws) {
        if (s_append (&t->yq, &t->yq_len, &t->yq_cap, data, size))
            s_t_fail (t, "%s", "out of memory queueing output");
    }
    else
        s_wq_add (t, data, size);
}

static size_t s_t_backlog (void *ud)
{
    s_transport_t *t = ud;
    return t->yq_len + (t->wq_len - t->wq_off);
}

//  Frame pending yamux bytes into WebSocket messages, then send.
static void s_t_flush (s_transport_t *t)
{
    if (t->ws && t->yq_len) {
        uint8_t frame [AH_WS_SEND_MAX + 14];
        size_t off = 0;
        while (off < t->yq_len) {
            size_t n = t->yq_len - off;
            if (n > AH_WS_SEND_MAX)
                n = AH_WS_SEND_MAX;
            size_t fl = ah_ws_frame (AH_WS_BIN, t->yq + off, n, frame);
            s_wq_add (t, frame, fl);
            off += n;
        }
        t->yq_len = 0;
    }
    while (t->wq_off < t->wq_len && !t->closed) {
        ssize_t r = send (t->fd, t->wq + t->wq_off, t->wq_len - t->wq_off, MSG_NOSIGNAL);
        if (r > 0)
            t->wq_off += (size_t) r;
        else if (r < 0 && errno == EINTR)
            continue;
        else if (r < 0 && errno == EAGAIN)
            break;
        else
            s_t_fail (t, "send: %s", strerror (errno));
    }
    if (t->wq_off == t->wq_len)
        t->wq_off = t->wq_len = 0;
}

static void s_ws_data (void *ud, const uint8_t *data, size_t size)
{
    s_transport_t *t = ud;
    const char *err = NULL;
    if (!t->closed && ah_sbd_session_input (t->session, data, size, &err))
        s_t_fail (t, "yamux: %s", err ? err : "protocol error");
}

static void s_ws_reply (void *ud, uint8_t opcode, const uint8_t *data, size_t size)
{
    s_transport_t *t = ud;
    uint8_t frame [125 + 14];
    s_t_flush (t);          //  keep order: pending data first
    s_wq_add (t, frame, ah_ws_frame (opcode, data, size, frame));
}

static void s_ws_close (void *ud, unsigned code)
{
    s_transport_t *t = ud;
    char c [16];
    snprintf (c, sizeof c, "%u", code);
    s_t_fail (t, "server closed the WebSocket (code %s)", c);
}

static void s_reap_orphans (ah_sandboxd_t *self, ah_sbd_session_t *session)
{
    int st;
    pid_t pid;
    while ((pid = waitpid (-1, &st, WNOHANG)) > 0)
        if (session)
            ah_sbd_session_reaped (session, pid, st);
}

static bool s_drain_wake (ah_sandboxd_t *self)
{
    char buf [64];
    while (read (self->wake [0], buf, sizeof buf) > 0)
        ;
    return atomic_load (&self->stop);
}

//  Serve one connection until it ends or we are stopped. Returns why.
static void s_serve (ah_sandboxd_t *self, int fd, bool ws, const uint8_t *extra,
                     size_t extra_len, char *why, size_t why_size)
{
    s_transport_t t = { .owner = self, .fd = fd, .ws = ws };
    ah_sbd_env_t env = {
        .home_fd = self->home_fd, .home = self->home,
        .agent_id = self->dialled_id,
        .switch_user = self->opts.switch_user, .stats = self->opts.stats,
        .reaped_ns = &self->reaped_ns,
        .output = s_t_output, .backlog = s_t_backlog, .ud = &t,
    };
    t.session = ah_sbd_session_new (&env);
    if (!t.session) {
        snprintf (why, why_size, "out of memory");
        close (fd);
        return;
    }
    ah_ws_callbacks_t cb = { .on_data = s_ws_data, .on_reply = s_ws_reply, .on_close = s_ws_close };
    ah_ws_parser_init (&t.parser, &cb, &t);
    uint8_t *rbuf = malloc (65536);
    if (!rbuf)
        s_t_fail (&t, "%s", "out of memory");
    if (extra_len && !t.closed) {
        const char *err = NULL;
        unsigned code;
        if (ah_ws_parser_feed (&t.parser, extra, extra_len, &err, &code))
            s_t_fail (&t, "websocket: %s", err);
    }
    bool stopping = false;
    int64_t last_reap = 0;
    while (!t.closed) {
        int n = 0, timeout = -1;
        s_t_flush (&t);
        struct pollfd *p = ah_sbd_session_poll_prepare (t.session, 2, &n, &timeout);
        p [0] = (struct pollfd) { .fd = self->wake [0], .events = POLLIN };
        p [1] = (struct pollfd) { .fd = fd, .events = POLLIN | (s_t_backlog (&t) ? POLLOUT : 0) };
        if (self->pid1 && (timeout < 0 || timeout > 1000))
            timeout = 1000;
        int rc = poll (p, (nfds_t) n, timeout);
        if (rc < 0 && errno != EINTR) {
            s_t_fail (&t, "poll: %s", strerror (errno));
            break;
        }
        if (rc > 0 && p [0].revents && s_drain_wake (self)) {
            stopping = true;
            break;
        }
        if (rc > 0 && (p [1].revents & (POLLIN | POLLHUP | POLLERR))) {
            size_t total = 0;
            while (!t.closed && total < S_READ_MAX) {
                ssize_t r = recv (fd, rbuf, 65536, 0);
                if (r == 0) {
                    s_t_fail (&t, "%s", "the server closed the connection");
                    break;
                }
                if (r < 0) {
                    if (errno != EAGAIN && errno != EINTR)
                        s_t_fail (&t, "recv: %s", strerror (errno));
                    break;
                }
                total += (size_t) r;
                const char *err = NULL;
                if (ws) {
                    unsigned code = 1002;
                    if (ah_ws_parser_feed (&t.parser, rbuf, (size_t) r, &err, &code)) {
                        uint8_t c [2] = { (uint8_t) (code >> 8), (uint8_t) code };
                        s_ws_reply (&t, AH_WS_CLOSE, c, 2);
                        s_t_flush (&t);
                        s_t_fail (&t, "websocket: %s", err);
                    }
                }
                else if (ah_sbd_session_input (t.session, rbuf, (size_t) r, &err))
                    s_t_fail (&t, "yamux: %s", err ? err : "protocol error");
            }
        }
        ah_sbd_session_service (t.session);
        const char *dead = ah_sbd_session_dead (t.session);
        if (dead)
            s_t_fail (&t, "%s", dead);
        if (self->pid1 && s_now () - last_reap >= 1000) {
            s_reap_orphans (self, t.session);
            last_reap = s_now ();
        }
    }
    if (stopping) {
        //  Say goodbye; best effort, the socket is non-blocking.
        ah_sbd_session_goaway (t.session);
        if (ws) {
            static const uint8_t normal [2] = { 0x03, 0xe8 };
            s_ws_reply (&t, AH_WS_CLOSE, normal, 2);
        }
        s_t_flush (&t);
        snprintf (why, why_size, "stopped");
    }
    else {
        snprintf (why, why_size, "%s", t.closed ? t.closed : "ended");
        t.closed = NULL;        //  best effort: a go away explaining a protocol error
        s_t_flush (&t);
    }
    ah_sbd_session_destroy (&t.session);
    close (fd);
    free (rbuf);
    free (t.yq);
    free (t.wq);
}

//  Sleep ms unless stopped (returns true when stopped).
static bool s_sleep (ah_sandboxd_t *self, int ms)
{
    int64_t until = s_now () + ms;
    while (!atomic_load (&self->stop)) {
        int64_t left = until - s_now ();
        if (left <= 0)
            return false;
        if (self->pid1 && left > 1000)
            left = 1000;
        struct pollfd p = { self->wake [0], POLLIN, 0 };
        if (poll (&p, 1, (int) left) > 0 && s_drain_wake (self))
            return true;
        if (self->pid1)
            s_reap_orphans (self, NULL);
    }
    return true;
}

static void s_note_error (ah_sandboxd_t *self, const char *msg)
{
    if (strcmp (self->last_error, msg) != 0) {
        ah_warn ("sandboxd", "%s", msg);
        snprintf (self->last_error, sizeof self->last_error, "%s", msg);
    }
    else
        ah_debug ("sandboxd", "%s", msg);
}

static bool s_header_safe (const char *s)
{
    for (; *s; s++)
        if ((unsigned char) *s < 0x20 || *s == 0x7f)
            return false;
    return true;
}

static void s_run (ah_sandboxd_t *self)
{
    char why [256];
    if (self->opts.raw_transport) {
        snprintf (self->dialled_id, sizeof self->dialled_id, "%s",
                  self->agent_id ? self->agent_id : "");
        atomic_fetch_add (&self->connections, 1);
        s_serve (self, self->opts.raw_fd, false, NULL, 0, why, sizeof why);
        self->opts.raw_fd = -1;
        ah_debug ("sandboxd", "raw session ended: %s", why);
        return;
    }
    int min = self->opts.backoff_min_ms > 0 ? self->opts.backoff_min_ms : 1000;
    int max = self->opts.backoff_max_ms > 0 ? self->opts.backoff_max_ms : 30000;
    if (max < min)
        max = min;
    int backoff = min;
    while (!atomic_load (&self->stop)) {
        ah_boot_card_t card;
        char err [512];
        bool ready = true;
        if (self->agent_id) {
            snprintf (card.agent_id, sizeof card.agent_id, "%s", self->agent_id);
            snprintf (card.token, sizeof card.token, "%s", self->token ? self->token : "");
            snprintf (card.tunnel_url, sizeof card.tunnel_url, "%s",
                      self->tunnel_url ? self->tunnel_url : "");
        }
        else if (ah_boot_load (self->boot_path, &card, err, sizeof err)) {
            s_note_error (self, err);
            ready = false;
        }
        ah_ws_url_t url;
        const char *uerr = NULL;
        if (ready && ah_ws_url_parse (card.tunnel_url, &url, &uerr)) {
            snprintf (err, sizeof err, "%s (\"%.200s\")", uerr, card.tunnel_url);
            s_note_error (self, err);
            ready = false;
        }
        if (ready && (!s_header_safe (card.token) || !s_header_safe (card.agent_id))) {
            s_note_error (self, "boot card: agent_id and token must not hold control characters");
            ready = false;
        }
        if (ready) {
            char headers [2 * AH_BOOT_VALUE + 64];
            snprintf (headers, sizeof headers, "Authorization: Bearer %s\r\nX-Agenthold-Agent: %s\r\n",
                      card.token, card.agent_id);
            uint8_t extra [4096];
            size_t extra_len = 0;
            int fd = ah_ws_connect (&url, headers, S_CONNECT_MS, self->wake [0], extra,
                                    sizeof extra, &extra_len, err, sizeof err);
            if (fd < 0) {
                if (atomic_load (&self->stop))
                    break;
                s_note_error (self, err);
            }
            else {
                //  The agent id in hello replies is the one we dialled with.
                snprintf (self->dialled_id, sizeof self->dialled_id, "%s", card.agent_id);
                atomic_fetch_add (&self->connections, 1);
                self->last_error [0] = 0;
                ah_info ("sandboxd", "connected to %s as %s", card.tunnel_url, card.agent_id);
                int64_t t0 = s_now ();
                s_serve (self, fd, true, extra, extra_len, why, sizeof why);
                if (atomic_load (&self->stop))
                    break;
                ah_warn ("sandboxd", "connection lost: %s", why);
                if (s_now () - t0 >= S_STABLE_MS)
                    backoff = min;
            }
        }
        //  Jitter: somewhere in [backoff/2, backoff], so a fleet of
        //  sandboxes does not reconnect in step after a server restart.
        uint32_t r = 0;
        if (getrandom (&r, sizeof r, GRND_NONBLOCK) != sizeof r)
            r = (uint32_t) s_now ();
        int delay = backoff / 2 + (int) (r % (uint32_t) (backoff / 2 + 1));
        if (s_sleep (self, delay))
            break;
        backoff = backoff >= max / 2 ? max : backoff * 2;
    }
}

static void *s_thread (void *arg)
{
    //  A write to a pipe whose reader died must give EPIPE, not kill the
    //  process hosting us: SIGPIPE stays pending on this thread.
    sigset_t set;
    sigemptyset (&set);
    sigaddset (&set, SIGPIPE);
    pthread_sigmask (SIG_BLOCK, &set, NULL);
    s_run (arg);
    return NULL;
}

static char *s_dup (const char *s)
{
    return s ? strdup (s) : NULL;
}

static void s_destroy (ah_sandboxd_t *self)
{
    if (self->home_fd >= 0)
        close (self->home_fd);
    for (int i = 0; i < 2; i++)
        if (self->wake [i] >= 0)
            close (self->wake [i]);
    if (self->opts.raw_transport && self->opts.raw_fd >= 0)
        close (self->opts.raw_fd);
    free (self->boot_path);
    free (self->agent_id);
    free (self->token);
    free (self->tunnel_url);
    free (self->home);
    free (self);
}

static ah_sandboxd_t *s_new (const ah_sandboxd_opts_t *opts, bool binary)
{
    ah_sandboxd_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->opts = *opts;
    self->home_fd = self->wake [0] = self->wake [1] = -1;
    self->boot_path = strdup (opts->boot_path ? opts->boot_path : "/etc/agenthold/boot.json");
    self->agent_id = s_dup (opts->agent_id);
    self->token = s_dup (opts->token);
    self->tunnel_url = s_dup (opts->tunnel_url);
    self->home = strdup (opts->home ? opts->home : "/home/agent");
    self->opts.agent_id = self->agent_id;
    if (self->opts.stats == AH_SANDBOXD_STATS_AUTO)
        self->opts.stats = binary ? AH_SANDBOXD_STATS_ALL : AH_SANDBOXD_STATS_TREE;
    self->pid1 = binary && getpid () == 1;
    if (!self->boot_path || !self->home) {
        s_destroy (self);
        return NULL;
    }
    self->home_fd = open (self->home, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (self->home_fd < 0) {
        ah_error ("sandboxd", "home %s: %s", self->home, strerror (errno));
        s_destroy (self);
        return NULL;
    }
    if (pipe2 (self->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        ah_error ("sandboxd", "pipe: %s", strerror (errno));
        s_destroy (self);
        return NULL;
    }
    return self;
}

ah_sandboxd_t *ah_sandboxd_start (const ah_sandboxd_opts_t *opts)
{
    ah_sandboxd_t *self = s_new (opts, false);
    if (!self)
        return NULL;
    if (pthread_create (&self->thread, NULL, s_thread, self) != 0) {
        ah_error ("sandboxd", "cannot start the instance thread");
        s_destroy (self);
        return NULL;
    }
    self->threaded = true;
    return self;
}

void ah_sandboxd_stop (ah_sandboxd_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_sandboxd_t *self = *self_p;
    *self_p = NULL;
    atomic_store (&self->stop, true);
    if (write (self->wake [1], "x", 1) < 0) { }
    if (self->threaded)
        pthread_join (self->thread, NULL);
    s_destroy (self);
}

int ah_sandboxd_connections (ah_sandboxd_t *self)
{
    return self ? atomic_load (&self->connections) : 0;
}

//  ---------------------------------------------------------------------
//  The binary

//  The signal handler's only way in: the running instance's stop flag
//  (lock-free atomic) and wake pipe. Set by main before the handlers are
//  installed; the binary only, never an in-process instance.
static atomic_bool *volatile s_signal_stop = NULL;
static volatile sig_atomic_t s_signal_fd = -1;

static void s_on_signal (int sig)
{
    int saved = errno;
    if (s_signal_stop)
        atomic_store (s_signal_stop, true);
    if (s_signal_fd >= 0 && write (s_signal_fd, "x", 1) < 0) { }
    errno = saved;
}

static void s_usage (FILE *out)
{
    fprintf (out,
        "usage: sandboxd [--boot FILE] [--home DIR] [--no-switch-user]\n"
        "\n"
        "The agenthold daemon inside a sandbox: reads the boot card, dials the\n"
        "server's tunnel over WebSocket and serves terminals, files and commands.\n"
        "\n"
        "  --boot FILE        boot card (default /etc/agenthold/boot.json):\n"
        "                     {\"agent_id\": .., \"token\": .., \"tunnel_url\": \"ws://IP:PORT/tunnel\"}\n"
        "  --home DIR         the agent's home (default /home/agent)\n"
        "  --no-switch-user   run terminals and commands as the current user even\n"
        "                     when root and /etc/passwd has an `agent` account\n"
        "  --help             this text\n"
        "\n"
        "Reconnects with backoff (1 s doubling to 30 s, with jitter) until SIGTERM.\n"
        "AGENTHOLD_LOG=debug|info|warn|error sets the log level.\n");
}

int ah_sandboxd_main (int argc, char **argv)
{
    ah_sandboxd_opts_t opts = { .switch_user = true };
    static const struct option longs [] = {
        { "boot", required_argument, NULL, 'b' },
        { "home", required_argument, NULL, 'H' },
        { "no-switch-user", no_argument, NULL, 'n' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int c;
    optind = 1;
    while ((c = getopt_long (argc, argv, "b:H:h", longs, NULL)) != -1) {
        switch (c) {
            case 'b': opts.boot_path = optarg; break;
            case 'H': opts.home = optarg; break;
            case 'n': opts.switch_user = false; break;
            case 'h': s_usage (stdout); return 0;
            default:  s_usage (stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf (stderr, "sandboxd: unexpected argument \"%s\"\n", argv [optind]);
        s_usage (stderr);
        return 2;
    }
    ah_sandboxd_t *self = s_new (&opts, true);
    if (!self)
        return 1;
    signal (SIGPIPE, SIG_IGN);
    s_signal_stop = &self->stop;
    s_signal_fd = self->wake [1];
    struct sigaction sa;
    memset (&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigemptyset (&sa.sa_mask);
    sigaction (SIGTERM, &sa, NULL);
    sigaction (SIGINT, &sa, NULL);
    ah_info ("sandboxd", "starting (home %s, boot card %s%s)", self->home, self->boot_path,
             self->pid1 ? ", PID 1: reaping orphans" : "");
    s_run (self);
    s_signal_fd = -1;
    s_signal_stop = NULL;
    ah_info ("sandboxd", "exiting");
    s_destroy (self);
    return 0;
}
