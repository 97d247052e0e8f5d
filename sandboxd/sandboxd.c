/*  sandboxd/sandboxd.c: the instance: boot card, dial, serve, reconnect.

    DESIGN (see sandboxd.h): one poll loop per instance, in the instance's
    own thread (ah_sandboxd_start) or in the main thread (the binary). The
    transport below the yamux session is either a WebSocket (proto/ws.c)
    or, for tests, a raw socket carrying yamux bytes directly. Output from
    yamux is queued here: yamux bytes are framed into WebSocket messages of at most
    256 KiB when the socket can take them. The queue is bounded in practice
    by the yamux windows (256 KiB per stream, growing to 4 MiB on a fast
    stream); the channel layer also
    stops reading ptys, pipes and files while it holds over 1 MiB.

    The binary may be PID 1 (no --init): it then also reaps orphans, once a
    second, and hands statuses that belong to a channel to the session.  */
#include "sandboxd/sandboxd.h"
#include "sandboxd/trust.h"
#include "sandboxd/boot.h"
#include "sandboxd/chan.h"
#include "sandboxd/net.h"
#include "sandboxd/proc.h"
#include "proto/ws.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_CONNECT_MS   10000        //  dial + upgrade time limit
#define S_FIRST_RETRY_MS 50       //  the first retries of a fresh start
#define S_PROBE_MS     250          //  redial a server that is away this often
#define S_FLAP_MS      1000         //  at most one connection this often
#define S_READ_MAX     (256 * 1024) //  transport bytes read per loop turn
#define S_SEND_MAX     (256 * 1024) //  largest WebSocket message sent

struct ah_sandboxd_t {
    ah_sandboxd_opts_t opts;        //  string fields point at the copies below
    char *boot_path, *agent_id, *token, *tunnel_url, *home;
    int   home_fd;
    int   proxy_fd;                 //  the egress proxy's listener, -1 none
    int   wake [2];                 //  written by stop (any thread) or a signal
    atomic_bool stop;
    atomic_int  connections;
    pthread_t thread;
    bool  threaded;
    bool  pid1;
    int64_t reaped_ns;              //  loop thread only
    ah_sbd_kept_t *kept;            //  loop thread only: the proc channel's processes,
                                    //  kept across connections
    char  last_error [256];         //  loop thread only: log each new error once at warn
    char  dialled_id [AH_BOOT_VALUE];   //  loop thread only: agent id of this connection
};

typedef struct {
    int   fd;                       //  raw transport (WebSocket: ah_ws_fd)
    ah_ws_t *ws;                    //  NULL: yamux bytes straight on fd
    ah_buf_t q;                     //  WebSocket: yamux bytes not yet framed;
                                    //  raw: bytes not yet sent
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

static void s_t_fail (s_transport_t *t, const char *fmt, const char *detail)
{
    if (t->closed)
        return;
    snprintf (t->why, sizeof t->why, fmt, detail);
    t->closed = t->why;
}

//  yamux output
static void s_t_output (void *ud, const uint8_t *data, size_t size)
{
    s_transport_t *t = ud;
    if (ah_buf_append (&t->q, data, size))
        s_t_fail (t, "%s", "out of memory queueing output");
}

static void s_t_output_data (void *ud, const uint8_t *head, size_t head_size,
                             const uint8_t *data, size_t size)
{
    s_transport_t *t = ud;
    if (ah_buf_append (&t->q, head, head_size) || ah_buf_append (&t->q, data, size))
        s_t_fail (t, "%s", "out of memory queueing output");
}

static size_t s_t_backlog (void *ud)
{
    s_transport_t *t = ud;
    return ah_buf_size (&t->q) + (t->ws ? ah_ws_pending (t->ws) : 0);
}

//  Frame pending yamux bytes into WebSocket messages, then send.
static void s_t_flush (s_transport_t *t)
{
    if (t->ws) {
        while (ah_buf_size (&t->q)) {
            size_t n = ah_buf_size (&t->q) < S_SEND_MAX ? ah_buf_size (&t->q) : S_SEND_MAX;
            if (ah_ws_send (t->ws, AH_WS_BIN, ah_buf_head (&t->q), n)) {
                ah_buf_clear (&t->q);
                s_t_fail (t, "%s", "the WebSocket is closing");
            }
            ah_buf_consume (&t->q, n);
        }
        if (ah_ws_flush (t->ws))
            s_t_fail (t, "%s", ah_ws_error (t->ws));
        return;
    }
    while (ah_buf_size (&t->q) && !t->closed) {
        ssize_t r = send (t->fd, ah_buf_head (&t->q), ah_buf_size (&t->q), MSG_NOSIGNAL);
        if (r > 0)
            ah_buf_consume (&t->q, (size_t) r);
        else if (r < 0 && errno == EINTR)
            continue;
        else if (r < 0 && errno == EAGAIN)
            break;
        else
            s_t_fail (t, "send: %s", strerror (errno));
    }
}

//  Payload bytes of the server's binary messages: the yamux stream.
static void s_ws_data (void *ud, int opcode, const uint8_t *data, size_t size, bool last)
{
    s_transport_t *t = ud;
    const char *err = NULL;
    if (size && !t->closed && ah_sbd_session_input (t->session, data, size, &err))
        s_t_fail (t, "yamux: %s", err ? err : "protocol error");
}

//  Read what the transport has and hand it on.
static void s_t_read (s_transport_t *t, uint8_t *rbuf)
{
    if (t->ws) {
        if (ah_ws_read (t->ws, S_READ_MAX))
            s_t_fail (t, "%s", ah_ws_error (t->ws));
        return;
    }
    size_t total = 0;
    while (!t->closed && total < S_READ_MAX) {
        ssize_t r = recv (t->fd, rbuf, 65536, 0);
        if (r == 0)
            s_t_fail (t, "%s", "the server closed the connection");
        if (r <= 0) {
            if (r < 0 && errno != EAGAIN && errno != EINTR)
                s_t_fail (t, "recv: %s", strerror (errno));
            break;
        }
        total += (size_t) r;
        const char *err = NULL;
        if (ah_sbd_session_input (t->session, rbuf, (size_t) r, &err))
            s_t_fail (t, "yamux: %s", err ? err : "protocol error");
    }
}

static void s_reap_orphans (ah_sandboxd_t *self, ah_sbd_session_t *session)
{
    int st;
    pid_t pid;
    while ((pid = waitpid (-1, &st, WNOHANG)) > 0) {
        if (session)
            ah_sbd_session_reaped (session, pid, st);
        else if (self->kept)
            ah_sbd_kept_reaped (self->kept, pid, st);
    }
}

static bool s_drain_wake (ah_sandboxd_t *self)
{
    char buf [64];
    while (read (self->wake [0], buf, sizeof buf) > 0)
        ;
    return atomic_load (&self->stop);
}

//  Serve one connection (t->ws, or the raw socket t->fd; taken over
//  either way) until it ends or we are stopped. Returns why.
static void s_serve (ah_sandboxd_t *self, s_transport_t *t, char *why, size_t why_size)
{
    if (t->ws)
        t->fd = ah_ws_fd (t->ws);
    ah_sbd_env_t env = {
        .home_fd = self->home_fd, .home = self->home,
        .agent_id = self->dialled_id,
        .switch_user = self->opts.switch_user, .read_only = self->opts.read_only,
        .stats = self->opts.stats,
        .reaped_ns = &self->reaped_ns, .kept = self->kept, .proxy_fd = self->proxy_fd,
        .trust_dir = self->opts.trust_dir, .trust_env = self->opts.trust_env,
        .output = s_t_output, .output_data = s_t_output_data, .backlog = s_t_backlog, .ud = t,
    };
    t->session = ah_sbd_session_new (&env);
    uint8_t *rbuf = t->ws ? NULL : malloc (65536);
    if (!t->session || (!t->ws && !rbuf))
        s_t_fail (t, "%s", "out of memory");
    else if (t->ws)
        s_t_read (t, NULL);            //  frames that came with the upgrade
    bool stopping = false;
    int64_t last_reap = 0;
    while (!t->closed) {
        int n = 0, timeout = -1;
        s_t_flush (t);
        struct pollfd *p = ah_sbd_session_poll_prepare (t->session, 2, &n, &timeout);
        p [0] = (struct pollfd) { .fd = self->wake [0], .events = POLLIN };
        p [1] = (struct pollfd) { .fd = t->fd, .events = POLLIN | (s_t_backlog (t) ? POLLOUT : 0) };
        if (self->pid1 && (timeout < 0 || timeout > 1000))
            timeout = 1000;
        int rc = poll (p, (nfds_t) n, timeout);
        if (rc < 0 && errno != EINTR) {
            s_t_fail (t, "poll: %s", strerror (errno));
            break;
        }
        if (rc > 0 && p [0].revents && s_drain_wake (self)) {
            stopping = true;
            break;
        }
        if (rc > 0 && (p [1].revents & (POLLIN | POLLHUP | POLLERR)))
            s_t_read (t, rbuf);
        ah_sbd_session_service (t->session);
        const char *dead = ah_sbd_session_dead (t->session);
        if (dead)
            s_t_fail (t, "%s", dead);
        if (self->pid1 && s_now () - last_reap >= 1000) {
            s_reap_orphans (self, t->session);
            last_reap = s_now ();
        }
    }
    if (stopping) {
        //  Say goodbye; best effort, the socket is non-blocking.
        ah_sbd_session_goaway (t->session);
        s_t_flush (t);
        if (t->ws)
            ah_ws_close (t->ws, 1000, NULL);
        s_t_flush (t);
        snprintf (why, why_size, "stopped");
    }
    else {
        snprintf (why, why_size, "%s", t->closed ? t->closed : "ended");
        t->closed = NULL;        //  best effort: a go away explaining a protocol error
        s_t_flush (t);
    }
    ah_sbd_session_destroy (&t->session);
    if (t->ws)
        ah_ws_destroy (&t->ws);
    else
        close (t->fd);
    free (rbuf);
    ah_buf_free (&t->q);
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

//  Dial the tunnel and upgrade, within S_CONNECT_MS all told; a stop
//  cuts the wait short. The WebSocket, or NULL with err; *absent then says
//  that nobody listens there now (the socket is gone or refuses, or a
//  relay closed before any answer: its server is away), as opposed to a
//  server that answered and refused.
static ah_ws_t *s_dial (ah_sandboxd_t *self, const ah_boot_card_t *card, const ah_ws_url_t *url,
                        s_transport_t *t, bool *absent, char *err, size_t err_size)
{
    *absent = false;
    int64_t deadline = s_now () + S_CONNECT_MS;
    int fd = ah_ws_dial ((const struct sockaddr *) &url->addr, url->addr_len, S_CONNECT_MS,
                         self->wake [0], err, err_size);
    if (fd < 0) {
        *absent = errno == ECONNREFUSED || errno == ENOENT;
        return NULL;
    }
    ah_ws_io_t io = ah_ws_io_plain (fd);
    ah_ws_opts_t opts = { .protocol = "agenthold-tunnel", .binary_only = true,
                          .on_message = s_ws_data, .ud = t };
    ah_ws_t *ws = ah_ws_new (&io, &opts);
    char headers [2 * AH_BOOT_VALUE + 64];
    snprintf (headers, sizeof headers, "Authorization: Bearer %s\r\nX-Agenthold-Agent: %s\r\n",
              card->token, card->agent_id);
    int left = (int) (deadline - s_now ());
    if (!ws)
        snprintf (err, err_size, "out of memory");
    else if (ah_ws_handshake (ws, url, headers, left > 0 ? left : 0, self->wake [0], err, err_size)) {
        *absent = errno == ECONNRESET;
        ah_ws_destroy (&ws);
    }
    return ws;
}

static void s_run (ah_sandboxd_t *self)
{
    char why [256];
    if (self->opts.raw_transport) {
        snprintf (self->dialled_id, sizeof self->dialled_id, "%s",
                  self->agent_id ? self->agent_id : "");
        atomic_fetch_add (&self->connections, 1);
        while (self->opts.raw_fd >= 0) {
            s_transport_t t = { .fd = self->opts.raw_fd };
            s_serve (self, &t, why, sizeof why);
            self->opts.raw_fd = -1;
            ah_debug ("sandboxd", "raw session ended: %s", why);
            if (atomic_load (&self->stop) || !self->opts.raw_redial)
                break;
            self->opts.raw_fd = self->opts.raw_redial (self->opts.raw_ud);
            if (self->opts.raw_fd >= 0)
                atomic_fetch_add (&self->connections, 1);
        }
        return;
    }
    int min = self->opts.backoff_min_ms > 0 ? self->opts.backoff_min_ms : 1000;
    int max = self->opts.backoff_max_ms > 0 ? self->opts.backoff_max_ms : 30000;
    if (max < min)
        max = min;
    //  Until the first connection the retries start short: a sandbox that
    //  wakes before its network or the server's listener is there should
    //  not wait a whole second for the next try.
    int backoff = min > S_FIRST_RETRY_MS ? S_FIRST_RETRY_MS : min;
    int64_t connected_at = 0;           //  of the last connection, 0 none yet
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
        if (ready && ah_boot_tunnel_url (card.tunnel_url, &url, &uerr)) {
            snprintf (err, sizeof err, "tunnel_url: %s (\"%.200s\")", uerr, card.tunnel_url);
            s_note_error (self, err);
            ready = false;
        }
        if (ready && (!s_header_safe (card.token) || !s_header_safe (card.agent_id))) {
            s_note_error (self, "boot card: agent_id and token must not hold control characters");
            ready = false;
        }
        s_transport_t t = { .fd = -1 };
        bool absent = false;
        t.ws = ready ? s_dial (self, &card, &url, &t, &absent, err, sizeof err) : NULL;
        //  How long to wait before the next dial. The backoff is for a
        //  server that is there and refuses (or a boot card not there
        //  yet). A server that is away is watched for instead, every
        //  S_PROBE_MS: after a restart the sandbox is back within that,
        //  however often the server restarted (a failed connect costs a
        //  syscall; the unix socket never leaves the machine).
        int wait = backoff;
        int64_t gap = 0;
        if (t.ws) {
            //  The agent id in hello replies is the one we dialled with.
            snprintf (self->dialled_id, sizeof self->dialled_id, "%s", card.agent_id);
            atomic_fetch_add (&self->connections, 1);
            self->last_error [0] = 0;
            ah_info ("sandboxd", "connected to %s as %s", card.tunnel_url, card.agent_id);
            connected_at = s_now ();
            backoff = min;              //  a listener that took us: the server is back
            s_serve (self, &t, why, sizeof why);
            if (atomic_load (&self->stop))
                break;
            ah_warn ("sandboxd", "connection lost: %s", why);
            //  The server may be restarting: the next dial says whether it
            //  is away (probe), refuses (backoff) or is back. At most one
            //  connection every S_FLAP_MS, so a server that takes and drops
            //  connections is not hammered.
            wait = S_PROBE_MS;
            gap = connected_at + S_FLAP_MS - s_now ();
        }
        else if (ready) {
            if (atomic_load (&self->stop))
                break;
            s_note_error (self, err);
            if (absent)
                wait = backoff < S_PROBE_MS ? backoff : S_PROBE_MS;
        }
        //  Jitter: somewhere in [wait/2, wait], so a fleet of sandboxes
        //  does not reconnect in step after a server restart.
        uint32_t r = 0;
        if (getrandom (&r, sizeof r, GRND_NONBLOCK) != sizeof r)
            r = (uint32_t) s_now ();
        int delay = wait / 2 + (int) (r % (uint32_t) (wait / 2 + 1));
        if (delay < gap)
            delay = (int) gap;
        if (s_sleep (self, delay))
            break;
        if (wait == backoff)
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
    pthread_setname_np (pthread_self (), "ah-sandboxd");
    s_run (arg);
    return NULL;
}

static char *s_dup (const char *s)
{
    return s ? strdup (s) : NULL;
}

static void s_destroy (ah_sandboxd_t *self)
{
    ah_sbd_kept_destroy (&self->kept, &self->reaped_ns);
    if (self->home_fd >= 0)
        close (self->home_fd);
    if (self->proxy_fd >= 0)
        close (self->proxy_fd);
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

//  The egress proxy's listener on the sandbox's own loopback. Its backlog
//  is the system's most (SOMAXCONN): a burst of connections larger than the
//  cap is accepted and answered (503 past AH_SBD_EGRESS_MAX) at once, not
//  left to the client's SYN retransmits (bench/egress's 1,000 at once: 1.5 s
//  to every answer in its smoke runs with a backlog of 128, 0.5 s with this).
static int s_proxy_listen (ah_sandboxd_t *self)
{
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) self->opts.egress_port),
                              .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    if (fd < 0 || setsockopt (fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one)
    ||  bind (fd, (struct sockaddr *) &sa, sizeof sa) || listen (fd, SOMAXCONN)) {
        ah_error ("sandboxd", "egress proxy on 127.0.0.1:%d: %s", self->opts.egress_port, strerror (errno));
        if (fd >= 0)
            close (fd);
        return -1;
    }
    self->proxy_fd = fd;
    ah_info ("sandboxd", "egress proxy on 127.0.0.1:%d", self->opts.egress_port);
    return 0;
}

static ah_sandboxd_t *s_new (const ah_sandboxd_opts_t *opts, bool binary)
{
    ah_sandboxd_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->opts = *opts;
    self->home_fd = self->proxy_fd = self->wake [0] = self->wake [1] = -1;
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
    if (!self->opts.read_only && !(self->kept = ah_sbd_kept_new ())) {
        s_destroy (self);
        return NULL;
    }
    if (!self->opts.read_only && self->opts.egress_port > 0 && s_proxy_listen (self)) {
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

//  --install DIR: this very binary into DIR/sandboxd (a temporary name,
//  then a rename), for the kubernetes driver's init container: its image
//  is FROM scratch and holds nothing else that could copy a file.
static int s_install (const char *dir)
{
    char path [4096], tmp [4096];
    if (snprintf (path, sizeof path, "%s/sandboxd", dir) >= (int) sizeof path
    ||  snprintf (tmp, sizeof tmp, "%s/.sandboxd.tmp", dir) >= (int) sizeof tmp) {
        fprintf (stderr, "sandboxd: --install %s: path too long\n", dir);
        return 1;
    }
    int in = open ("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    int out = in >= 0 ? open (tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0755) : -1;
    bool ok = out >= 0;
    char buf [65536];
    ssize_t n;
    while (ok && (n = read (in, buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        for (ssize_t done = 0; ok && n > 0 && done < n; ) {
            ssize_t w = write (out, buf + done, (size_t) (n - done));
            if (w < 0 && errno == EINTR)
                continue;
            ok = w > 0;
            done += w > 0 ? w : 0;
        }
        ok = ok && n > 0;
    }
    ok = ok && fchmod (out, 0755) == 0;
    if (out >= 0 && close (out) != 0)
        ok = false;
    if (in >= 0)
        close (in);
    if (!ok || rename (tmp, path) != 0) {
        fprintf (stderr, "sandboxd: --install %s: %s\n", dir, strerror (errno));
        unlink (tmp);
        return 1;
    }
    printf ("sandboxd: installed %s\n", path);
    return 0;
}

static void s_usage (FILE *out)
{
    fprintf (out,
        "usage: sandboxd [--boot FILE] [--home DIR] [--no-switch-user] [--read-only]\n"
        "\n"
        "The agenthold daemon inside a sandbox: reads the boot card, dials the\n"
        "server's tunnel over WebSocket and serves terminals, files and commands.\n"
        "\n"
        "  --boot FILE        boot card (default /etc/agenthold/boot.json):\n"
        "                     {\"agent_id\": .., \"token\": .., \"tunnel_url\": \"ws://IP:PORT/tunnel\"}\n"
        "  --home DIR         the agent's home (default /home/agent)\n"
        "  --no-switch-user   run terminals and commands as the current user even\n"
        "                     when root and /etc/passwd has an `agent` account\n"
        "  --read-only        a reader of a sleeping agent's home: fs.list, fs.tree,\n"
        "                     fs.read, ping and stats only (pty, exec, writes refused),\n"
        "                     the home never chowned; the hello says \"mode\": \"read\"\n"
        "  --egress-port N    the egress proxy on 127.0.0.1:N (docs/egress.md); what\n"
        "                     runs gets HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY\n"
        "                     (and the lowercase forms) pointing at it. The driver\n"
        "                     says it with AGENTHOLD_EGRESS_PORT instead\n"
        "  --host-addresses   print this network namespace's IPv4 addresses (not\n"
        "                     loopback's), one a line, and exit\n"
        "  --install DIR      copy this binary to DIR/sandboxd (mode 0755) and exit:\n"
        "                     how an init container delivers it (Kubernetes)\n"
        "  --help             this text\n"
        "\n"
        "Dials at once; retries start at 50 ms until the first connection, then\n"
        "with backoff (1 s doubling to 30 s, with jitter) while the server refuses;\n"
        "a server that is away (nothing listens) is redialled every 250 ms, and a\n"
        "lost connection at once, until SIGTERM.\n"
        "AGENTHOLD_LOG=debug|info|warn|error sets the log level.\n");
}

//  A port argument: 1..65535, or -1 (said).
static int s_port_arg (const char *text)
{
    char *end = NULL;
    long v = text ? strtol (text, &end, 10) : 0;
    if (!text || !*text || *end || v < 1 || v > 65535) {
        fprintf (stderr, "sandboxd: the egress port must be a number from 1 to 65535, not '%s'\n",
                 text ? text : "");
        return -1;
    }
    return (int) v;
}

//  What runs finds the proxy (docs/egress.md): sandboxd's environment is
//  what its children inherit.
static void s_proxy_env (int port)
{
    char url [64];
    snprintf (url, sizeof url, "http://127.0.0.1:%d", port);
    static const char *names [] = { "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                                    "http_proxy", "https_proxy", "all_proxy" };
    for (size_t i = 0; i < sizeof names / sizeof names [0]; i++)
        setenv (names [i], url, 1);
    setenv ("NO_PROXY", "localhost,127.0.0.1", 1);
    setenv ("no_proxy", "localhost,127.0.0.1", 1);
}

int ah_sandboxd_main (int argc, char **argv)
{
    ah_sandboxd_opts_t opts = { .switch_user = true };
    static const struct option longs [] = {
        { "boot", required_argument, NULL, 'b' },
        { "home", required_argument, NULL, 'H' },
        { "no-switch-user", no_argument, NULL, 'n' },
        { "read-only", no_argument, NULL, 'r' },
        { "egress-port", required_argument, NULL, 'e' },
        { "host-addresses", no_argument, NULL, 'A' },
        { "install", required_argument, NULL, 'i' },
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
            case 'r': opts.read_only = true; break;
            case 'e': opts.egress_port = s_port_arg (optarg); if (opts.egress_port < 0) return 2; break;
            case 'A': return ah_net_print_addresses (stdout) == 0 ? 0 : 1;
            case 'i': return s_install (optarg);
            case 'h': s_usage (stdout); return 0;
            default:  s_usage (stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf (stderr, "sandboxd: unexpected argument \"%s\"\n", argv [optind]);
        s_usage (stderr);
        return 2;
    }
    const char *egress = getenv ("AGENTHOLD_EGRESS_PORT");
    if (egress && *egress && !opts.egress_port && (opts.egress_port = s_port_arg (egress)) < 0)
        return 2;
    unsetenv ("AGENTHOLD_EGRESS_PORT");         //  the server's business, not the agent's
    if (opts.egress_port > 0 && !opts.read_only) {
        s_proxy_env (opts.egress_port);
        opts.trust_dir = AH_SBD_TRUST_DIR;
        opts.trust_env = true;
    }
    ah_proc_take_image_user ();
    ah_sandboxd_t *self = s_new (&opts, true);
    if (!self)
        return 1;
    //  A reader takes nothing over: the home is read as it is.
    if (opts.switch_user && geteuid () == 0 && !opts.read_only) {
        //  Root's supplementary groups (the engine gives it a dozen) are
        //  no business of ours: file operations take the agent's per
        //  thread. Then the home becomes the agent's.
        if (setgroups (0, NULL) != 0)
            ah_warn ("sandboxd", "dropping root's supplementary groups: %s", strerror (errno));
        ah_proc_user_t user;
        ah_proc_user_resolve (&user, true, self->home);
        char err [512];
        if (ah_proc_home_own (&user, self->home, err, sizeof err))
            ah_error ("sandboxd", "%s", err);
        ah_info ("sandboxd", "shells, commands and files run as %s (uid %u, gid %u, %d groups)",
                 user.name, (unsigned) user.uid, (unsigned) user.gid, user.ngroups);
        //  A sandbox with a network: the destinations the driver names
        //  become unreachable before anything of the agent runs. Not
        //  able to: not run at all.
        ah_boot_card_t card;
        if (!opts.agent_id && ah_boot_load (self->boot_path, &card, err, sizeof err) == 0
        &&  card.blocked [0]) {
            int n = ah_net_block (card.blocked, err, sizeof err);
            if (n < 0) {
                ah_error ("sandboxd", "%s: refusing to run", err);
                s_destroy (self);
                return 1;
            }
            ah_info ("sandboxd", "%d destinations made unreachable (the host, other networks)", n);
        }
    }
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
