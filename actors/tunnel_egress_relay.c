/*  actors/tunnel_egress_relay.c: an allowed egress connection
    (docs/egress.md), from the connect to the end.

    The connect. A job of the actor's workers (ah_actor_job) resolves
    the name (getaddrinfo; a literal is not looked up), checks EVERY
    address it gave (proto/egress.c: loopback, private, link-local,
    metadata, ...; and the host's own addresses: the kernel's route to
    each, asked over rtnetlink, is local) and refuses the whole request
    when one is refused and no admin's entry names it
    (a name that resolves to a public and a private address is refused:
    the sandbox does not get to pick), or when a deny entry names one.
    Then it connects to the addresses it checked, in order, with one
    deadline (sandbox.egress_connect_timeout): never to a name, so the
    address connected to is the address checked (no DNS rebinding).
    The job owns copies of all it reads (job_t); of the actor it reads
    only egress_stop, so that a server that stops does not wait out a
    connect. Its done, on the actor's thread, finds the channel again by
    its id: gone, and the socket is closed. An address literal takes the
    same way (not looked up, AI_NUMERICHOST; its own-address check, an
    rtnetlink round trip, is the worker's like a name's), so nothing of
    a connect runs on the tunnel's thread.

    The relay. The connected socket (non-blocking) is watched on the
    tunnel's loop (ah_lwsloop_io_t). Sandbox -> upstream: the stream's
    bytes wait in down and are given back to yamux's window
    (ah_yamux_consumed) only once the socket took them, so the window
    (at most AH_YAMUX_MAX_WINDOW) bounds down and stops sandboxd.
    Upstream -> sandbox: the socket is read (UP_CHUNK at most) only while
    up is empty; what yamux's window does not take waits in up and the
    socket is not read until on_writable. A FIN either way shuts the
    other side's writing (shutdown SHUT_WR, or our FIN once up is out);
    a socket error resets the stream, a reset stream closes the socket.
    When both FINs crossed (the channel ends) while down still holds
    bytes, the egress_t lives on without its channel on
    self->egress_draining until the socket took them (DRAIN_MS at most).

    The record: "egress" when the attempt is decided here (a refusal of
    the address check, a failed connect, or connected: ok, to which
    address, and the rule's sentence), "egress.end" when a connected one
    ends: bytes each way, how long, and why when it did not end cleanly
    (paths and counts, never contents).                                 */
#include "actors/tunnel_int.h"
#include "common/log.h"
#include "proto/egress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define UP_CHUNK        (64u << 10)     //  one read from the upstream
#define ADDRS_MAX       32              //  addresses of one name we look at
#define ADDR_TEXT_MAX   (INET6_ADDRSTRLEN + 8)
#define DRAIN_MS        10000           //  after a clean end, the upstream takes the last bytes within this

struct egress_t {
    self_t *self;
    int64_t chan_id;
    char agent_id [AGENT_ID_MAX];
    int fd;                         //  the upstream; -1 until connected
    struct job_t *job;              //  waiting its turn for a worker (then the worker's)
    egress_t *wait_next;            //  on the conn's egress_wait
    egress_t *drain_next;           //  on self->egress_draining (its channel gone)
    ah_lwsloop_timer_t drain_timer;
    ah_lwsloop_io_t io;
    int io_events;
    bool connecting;                //  a worker's job has it
    ah_buf_t down;                  //  from the sandbox, not yet taken by the socket (unconsumed)
    bool down_eof, down_shut;       //  sandboxd's FIN; the socket's writing side shut
    ah_buf_t up;                    //  from the socket, not yet taken by yamux
    bool up_eof, up_fin;            //  the upstream's EOF; our FIN sent
    uint64_t bytes_out, bytes_in;   //  to the upstream, from it
    ah_tun_egress_counts_t *counts; //  its tenant's (self->egress_counts'), NULL: not counted
    int64_t started_ms, connected_ms;
    char detail [AH_EGRESS_HOST_MAX + 40];  //  "host:port (kind)"
    char why [300];                 //  the rule's sentence
    char address [ADDR_TEXT_MAX];
    //  A host with a secret (tunnel_egress_tls.c): its TLS terminated.
    //  down and up then hold ciphertext of the upstream's and the
    //  sandbox's sessions; the stream's bytes are given back to the
    //  window once down is empty (all that came of them was taken).
    ah_tun_tls_t *tls;
    size_t tls_unconsumed;
};

//  A worker's job (its own copies; see DESIGN).
typedef struct job_t {
    int64_t chan_id;
    char agent_id [AGENT_ID_MAX];
    char host [AH_EGRESS_HOST_MAX + 1];
    int port;
    bool literal;
    char **open, **deny;
    size_t n_open, n_deny;
    int timeout_ms;
    atomic_bool *stop;
    ah_tun_tls_job_t *tls;          //  a secret: the upstream's TLS made here too
    //  The outcome
    int fd;                         //  connected, non-blocking; -1 on failure
    const char *code;               //  on failure: EACCES, ETIMEDOUT, ECONNREFUSED, ENOENT, EIO
    char address [ADDR_TEXT_MAX];
    char error [600];
} job_t;

static void s_strv_free (char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free (v [i]);
    free (v);
}

static char **s_strv_copy (const char *const *v, size_t n)
{
    char **out = (char **) calloc (n + 1, sizeof *out);
    for (size_t i = 0; out && i < n; i++)
        if (!(out [i] = strdup (v [i]))) {
            s_strv_free (out, i);
            return NULL;
        }
    return out;
}

static void s_job_free (job_t *job)
{
    if (job->fd >= 0)
        close (job->fd);
    s_strv_free (job->open, job->n_open);
    s_strv_free (job->deny, job->n_deny);
    ah_tun_tls_job_free (&job->tls);
    free (job);
}

//  "1.2.3.4:443" or "[::1]:443".
static void s_addr_text (const struct sockaddr *sa, char out [ADDR_TEXT_MAX])
{
    char ip [INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *) sa;
        inet_ntop (AF_INET, &s4->sin_addr, ip, sizeof ip);
        port = ntohs (s4->sin_port);
        snprintf (out, ADDR_TEXT_MAX, "%s:%d", ip, port);
    }
    else {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *) sa;
        inet_ntop (AF_INET6, &s6->sin6_addr, ip, sizeof ip);
        port = ntohs (s6->sin6_port);
        snprintf (out, ADDR_TEXT_MAX, "[%s]:%d", ip, port);
    }
}

static bool s_same_ip (const struct sockaddr *a, const struct sockaddr *b)
{
    if (!a || !b || a->sa_family != b->sa_family)
        return false;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *) a)->sin_addr.s_addr == ((const struct sockaddr_in *) b)->sin_addr.s_addr;
    if (a->sa_family == AF_INET6)
        return !memcmp (&((const struct sockaddr_in6 *) a)->sin6_addr, &((const struct sockaddr_in6 *) b)->sin6_addr,
                        sizeof (struct in6_addr));
    return false;
}

//  The host's own addresses, asked per address: the kernel's route to
//  sa, looked up over rtnetlink (RTM_GETROUTE, what `ip route get`
//  does), is of type local exactly when sa is one of this host's
//  addresses (every interface's, in this network namespace). One
//  request and its answer, a few microseconds, always current; a
//  listing of every interface (getifaddrs: every link's and address's
//  dump) cost about 0.1 ms a connection. 1: own, 0: not, -1: the
//  lookup failed (then the listing decides, s_own).
static int s_route_local (const struct sockaddr *sa)
{
    struct {
        struct nlmsghdr nh;
        struct rtmsg rt;
        char attrs [RTA_SPACE (sizeof (struct in6_addr))];
    } req;
    memset (&req, 0, sizeof req);
    const void *addr = NULL;
    size_t alen = 0;
    if (sa->sa_family == AF_INET) {
        addr = &((const struct sockaddr_in *) sa)->sin_addr;
        alen = sizeof (struct in_addr);
    }
    else if (sa->sa_family == AF_INET6) {
        addr = &((const struct sockaddr_in6 *) sa)->sin6_addr;
        alen = sizeof (struct in6_addr);
    }
    else
        return -1;
    req.nh.nlmsg_len = NLMSG_LENGTH (sizeof req.rt);
    req.nh.nlmsg_type = RTM_GETROUTE;
    req.nh.nlmsg_flags = NLM_F_REQUEST;
    req.nh.nlmsg_seq = 1;
    req.rt.rtm_family = (unsigned char) sa->sa_family;
    req.rt.rtm_dst_len = (unsigned char) (alen * 8);
    struct rtattr *rta = (struct rtattr *) ((char *) &req + NLMSG_ALIGN (req.nh.nlmsg_len));
    rta->rta_type = RTA_DST;
    rta->rta_len = (unsigned short) RTA_LENGTH (alen);
    memcpy (RTA_DATA (rta), addr, alen);
    req.nh.nlmsg_len = NLMSG_ALIGN (req.nh.nlmsg_len) + RTA_LENGTH (alen);

    int fd = socket (AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0)
        return -1;
    struct timeval tv = { .tv_sec = 1 };
    setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
    int rc = -1;
    union { struct nlmsghdr nh; char bytes [4096]; } ans;
    if (sendto (fd, &req, req.nh.nlmsg_len, 0, (struct sockaddr *) &kernel, sizeof kernel)
        == (ssize_t) req.nh.nlmsg_len) {
        ssize_t n = recv (fd, &ans, sizeof ans, 0);
        struct nlmsghdr *nh = &ans.nh;
        if (n > 0 && NLMSG_OK (nh, (size_t) n) && nh->nlmsg_seq == 1) {
            if (nh->nlmsg_type == RTM_NEWROUTE && nh->nlmsg_len >= NLMSG_LENGTH (sizeof (struct rtmsg)))
                rc = ((struct rtmsg *) NLMSG_DATA (nh))->rtm_type == RTN_LOCAL;
            else
            if (nh->nlmsg_type == NLMSG_ERROR && nh->nlmsg_len >= NLMSG_LENGTH (sizeof (struct nlmsgerr))) {
                int err = -((struct nlmsgerr *) NLMSG_DATA (nh))->error;
                //  No route there at all: not an address of ours.
                rc = err == ENETUNREACH || err == EHOSTUNREACH ? 0 : -1;
            }
        }
    }
    close (fd);
    return rc;
}

//  The listing, read once a job when the lookup fails (s_route_local).
typedef struct {
    bool listed;
    struct ifaddrs *ifa;            //  NULL: none could be read (then the address check alone)
} own_t;

static bool s_own (const struct sockaddr *sa, own_t *own)
{
    int local = s_route_local (sa);
    if (local >= 0)
        return local == 1;
    if (!own->listed) {
        own->listed = true;
        if (getifaddrs (&own->ifa))
            own->ifa = NULL;
    }
    for (const struct ifaddrs *i = own->ifa; i; i = i->ifa_next)
        if (s_same_ip (i->ifa_addr, sa))
            return true;
    return false;
}

//  Why the server must not connect to sa (NULL: it may): the address
//  check, the host's own addresses, the admin's entries.
static const char *s_check (const job_t *job, const struct sockaddr *sa, own_t *own, const char **entry)
{
    *entry = NULL;
    for (size_t i = 0; i < job->n_deny; i++)
        if (ah_egress_addr_names (job->deny [i], sa, job->port)) {
            *entry = job->deny [i];
            return "on the tenant's deny list";
        }
    const char *why = ah_egress_addr_refusal (sa);
    if (!why && s_own (sa, own))
        why = "one of this server's own addresses";
    if (!why)
        return NULL;
    for (size_t i = 0; i < job->n_open; i++)
        if (ah_egress_addr_names (job->open [i], sa, job->port))
            return NULL;                //  the admin's explicit opening
    return why;
}

//  A non-blocking connect to sa within the deadline: the socket, or -1
//  with *err (errno's).
static int s_connect (job_t *job, const struct sockaddr *sa, socklen_t len, int64_t deadline, int *err)
{
    int fd = socket (sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    if (connect (fd, sa, len) == 0)
        return fd;
    if (errno != EINPROGRESS) {
        *err = errno;
        close (fd);
        return -1;
    }
    while (true) {
        int64_t left = deadline - zclock_mono ();
        if (left <= 0 || atomic_load (job->stop)) {
            *err = ETIMEDOUT;
            break;
        }
        //  In slices, so that a stopping server is not kept waiting.
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        int r = poll (&p, 1, left > 200 ? 200 : (int) left);
        if (r < 0 && errno != EINTR) {
            *err = errno;
            break;
        }
        if (r > 0) {
            int so = 0;
            socklen_t sl = sizeof so;
            if (getsockopt (fd, SOL_SOCKET, SO_ERROR, &so, &sl) < 0)
                so = errno;
            if (so == 0)
                return fd;
            *err = so;
            break;
        }
    }
    close (fd);
    return -1;
}

//  Resolve host and check every address it gave, before any connect:
//  the addresses that may be connected to, in order, into ok (res holds
//  them: freeaddrinfo); 0 with job->code and job->error when none.
static size_t s_resolve (job_t *job, struct addrinfo **res, const struct addrinfo *ok [ADDRS_MAX])
{
    char port [8];
    snprintf (port, sizeof port, "%d", job->port);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV | (job->literal ? AI_NUMERICHOST : AI_ADDRCONFIG) };
    *res = NULL;
    int gai = getaddrinfo (job->host, port, &hints, res);
    if (gai) {
        *res = NULL;
        job->code = gai == EAI_NONAME || gai == EAI_NODATA ? "ENOENT" : "EIO";
        snprintf (job->error, sizeof job->error, "egress failed: %s does not resolve (%s)", job->host,
                  gai == EAI_SYSTEM ? strerror (errno) : gai_strerror (gai));
        return 0;
    }
    own_t own = { .listed = false };
    size_t n = 0;
    for (const struct addrinfo *ai = *res; ai && n < ADDRS_MAX; ai = ai->ai_next) {
        if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
            continue;
        const char *entry = NULL;
        const char *why = s_check (job, ai->ai_addr, &own, &entry);
        if (why) {
            char text [ADDR_TEXT_MAX];
            s_addr_text (ai->ai_addr, text);
            job->code = "EACCES";
            if (entry)
                snprintf (job->error, sizeof job->error, "egress refused: %s:%d resolves to %s, %s (entry '%s')",
                          job->host, job->port, text, why, entry);
            else
            if (job->literal)
                snprintf (job->error, sizeof job->error, "egress refused: %s: %s, refused whatever the rule "
                          "says; only an admin's entry naming that address or its range opens it "
                          "(docs/egress.md)", text, why);
            else
                snprintf (job->error, sizeof job->error, "egress refused: %s resolves to %s: %s, refused "
                          "whatever the rule says; only an admin's entry naming that address or its range "
                          "opens it (docs/egress.md)", job->host, text, why);
            snprintf (job->address, sizeof job->address, "%s", text);
            n = 0;
            break;
        }
        ok [n++] = ai;
    }
    if (own.ifa)
        freeifaddrs (own.ifa);
    if (!n && !job->code) {
        job->code = "ENOENT";
        snprintf (job->error, sizeof job->error, "egress failed: %s has no IPv4 or IPv6 address", job->host);
    }
    return n;
}

//  The connect failed with err (errno's): job->code and job->error.
static void s_connect_failed (job_t *job, int err)
{
    if (err == ETIMEDOUT) {
        job->code = "ETIMEDOUT";
        snprintf (job->error, sizeof job->error, "egress failed: %s:%d (%s) did not accept the connection "
                  "within %d ms (sandbox.egress_connect_timeout)", job->host, job->port, job->address,
                  job->timeout_ms);
    }
    else {
        job->code = err == ECONNREFUSED ? "ECONNREFUSED" : "EIO";
        snprintf (job->error, sizeof job->error, "egress failed: %s:%d (%s) %s", job->host, job->port,
                  job->address, err == ECONNREFUSED ? "refused the connection" : strerror (err));
    }
}

static void s_connected_opts (int fd)
{
    int one = 1;
    setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt (fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
}

//  The work, in a worker: resolve, check, connect.
static void s_work (void *arg)
{
    job_t *job = (job_t *) arg;
    int64_t deadline = zclock_mono () + job->timeout_ms;
    struct addrinfo *res = NULL;
    const struct addrinfo *ok [ADDRS_MAX];
    size_t n = s_resolve (job, &res, ok);
    int err = 0;
    for (size_t i = 0; i < n && job->fd < 0; i++) {
        s_addr_text (ok [i]->ai_addr, job->address);
        job->fd = s_connect (job, ok [i]->ai_addr, ok [i]->ai_addrlen, deadline, &err);
        if (err == ETIMEDOUT)
            break;                      //  the deadline is the whole attempt's
    }
    if (res)
        freeaddrinfo (res);
    if (job->fd >= 0) {
        s_connected_opts (job->fd);
        if (job->tls && ah_tun_tls_work (job->tls, job->fd, deadline, job->stop, job->error, sizeof job->error)) {
            close (job->fd);
            job->fd = -1;
            job->code = "EIO";
        }
        return;
    }
    if (!job->code)
        s_connect_failed (job, err);
}

//  ---------------------------------------------------------------------
//  The relay, on the actor's thread

static void s_on_io (ah_lwsloop_io_t *io, int revents, void *arg);

//  Watch the socket for what the relay can do now.
static void s_arm (egress_t *e)
{
    int want = 0;
    if (!e->up_eof && !ah_buf_size (&e->up) && (!e->tls || ah_tun_tls_ready (e->tls)))
        want |= EV_READ;
    if (ah_buf_size (&e->down))
        want |= EV_WRITE;
    if (want != e->io_events) {
        e->io_events = want;
        ah_lwsloop_io_set (e->self->loop, &e->io, e->fd, want, s_on_io, e);
    }
}

//  The connection fails: recorded with why, the stream reset (chan and
//  e are gone after this).
static void s_fail (self_t *self, chan_t *chan, const char *why)
{
    ah_debug (AREA, "agent '%s': egress %s: %s", chan->egress->agent_id, chan->egress->detail, why);
    ah_tun_chan_abort (self, chan, 0, why);
}

//  up into the stream, within the window; our FIN after the upstream's
//  EOF. false when the channel is gone.
static bool s_pump_up (self_t *self, chan_t *chan)
{
    egress_t *e = chan->egress;
    conn_t *conn = chan->conn;
    if (ah_buf_size (&e->up)) {
        ssize_t n = ah_yamux_write (conn->yamux, chan->stream, ah_buf_head (&e->up), ah_buf_size (&e->up));
        if (n < 0) {
            s_fail (self, chan, "the stream to the sandbox cannot take more");
            return false;
        }
        ah_buf_consume (&e->up, (size_t) n);
    }
    if (e->up_eof && !e->up_fin && !ah_buf_size (&e->up)) {
        e->up_fin = true;
        int64_t id = e->chan_id;
        ah_yamux_close (conn->yamux, chan->stream);     //  both closed: the channel ends here
        return ah_tun_chan_find (self, id) != NULL;
    }
    return true;
}

//  down into the socket as far as it takes it: the bytes sent, or -1
//  with why.
static ssize_t s_write_down (egress_t *e, char *why, size_t why_size)
{
    size_t sent = 0;
    while (ah_buf_size (&e->down)) {
        ssize_t n = send (e->fd, ah_buf_head (&e->down), ah_buf_size (&e->down), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            snprintf (why, why_size, "writing to the upstream failed: %s", n < 0 ? strerror (errno) : "closed");
            return -1;
        }
        ah_buf_consume (&e->down, (size_t) n);
        e->bytes_out += (uint64_t) n;
        if (e->counts)
            e->counts->bytes_out += (uint64_t) n;
        sent += (size_t) n;
    }
    return (ssize_t) sent;
}

//  down into the socket; the socket's writing side shut after sandboxd's
//  FIN. false when the channel is gone.
static bool s_pump_down (self_t *self, chan_t *chan)
{
    egress_t *e = chan->egress;
    char why [200];
    ssize_t sent = s_write_down (e, why, sizeof why);
    if (sent < 0) {
        s_fail (self, chan, why);
        return false;
    }
    if (e->tls && !ah_buf_size (&e->down) && e->tls_unconsumed) {
        ah_yamux_consumed (chan->conn->yamux, chan->stream, e->tls_unconsumed);
        e->tls_unconsumed = 0;
    }
    else if (sent && !e->tls)
        ah_yamux_consumed (chan->conn->yamux, chan->stream, (size_t) sent);
    if (e->down_eof && !e->down_shut && !ah_buf_size (&e->down)) {
        e->down_shut = true;
        shutdown (e->fd, SHUT_WR);
    }
    return true;
}

//  The socket is readable: one read while up is empty.
static bool s_read_up (self_t *self, chan_t *chan)
{
    egress_t *e = chan->egress;
    if (e->up_eof || ah_buf_size (&e->up))
        return true;
    uint8_t *p = ah_buf_reserve (&e->up, UP_CHUNK);
    if (!p) {
        s_fail (self, chan, "out of memory");
        return false;
    }
    ssize_t r = recv (e->fd, p, UP_CHUNK, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return true;
    if (r < 0) {
        char why [200];
        snprintf (why, sizeof why, "reading from the upstream failed: %s", strerror (errno));
        s_fail (self, chan, why);
        return false;
    }
    if (r == 0) {
        e->up_eof = true;
        if (e->tls)
            ah_tun_tls_close (e->tls, true, &e->up);
    }
    else {
        ah_buf_commit (&e->up, (size_t) r);
        e->bytes_in += (uint64_t) r;
        if (e->counts)
            e->counts->bytes_in += (uint64_t) r;
    }
    if (r > 0 && e->tls) {
        //  Ciphertext of the upstream's session: what it decrypts to goes
        //  into the sandbox's (and what the upstream's session answers, to it).
        ah_buf_t cipher = e->up;
        memset (&e->up, 0, sizeof e->up);
        char why [300];
        int rc = ah_tun_tls_from_upstream (e->tls, ah_buf_head (&cipher), ah_buf_size (&cipher), &e->up, &e->down,
                                           why, sizeof why);
        ah_buf_free (&cipher);
        if (rc) {
            s_fail (self, chan, why);
            return false;
        }
        if (ah_buf_size (&e->down) && !s_pump_down (self, chan))
            return false;
    }
    return s_pump_up (self, chan);
}

static void s_on_io (ah_lwsloop_io_t *io, int revents, void *arg)
{
    egress_t *e = (egress_t *) arg;
    self_t *self = e->self;
    chan_t *chan = ah_tun_chan_find (self, e->chan_id);
    if (!chan || chan->egress != e) {
        ah_lwsloop_io_cancel (io);      //  cannot be: the end cancels it
        return;
    }
    ah_actor_turn_begin (self->actor);
    bool alive = true;
    if (revents & EV_WRITE)
        alive = s_pump_down (self, chan);
    if (alive && (revents & EV_READ))
        alive = s_read_up (self, chan);
    if (alive)
        s_arm (e);
    ah_actor_turn_end (self->actor);
}

//  agent_id's connects in the workers now.
static intptr_t s_jobs_of (self_t *self, const char *agent_id)
{
    return self->egress_jobs ? (intptr_t) zhashx_lookup (self->egress_jobs, agent_id) : 0;
}

static void s_jobs_add (self_t *self, const char *agent_id, int delta)
{
    intptr_t n = s_jobs_of (self, agent_id) + delta;
    if (!self->egress_jobs)
        return;
    if (n > 0)
        zhashx_update (self->egress_jobs, agent_id, (void *) n);
    else
        zhashx_delete (self->egress_jobs, agent_id);
}

static void s_done (void *self_, void *arg, bool ran);
static void s_connected (self_t *self, chan_t *chan, egress_t *e, job_t *job);

//  e's job to a worker. 0, or -1 (the job stays e's).
static int s_launch (self_t *self, egress_t *e)
{
    if (ah_actor_job (self->actor, s_work, s_done, e->job))
        return -1;
    s_jobs_add (self, e->job->agent_id, 1);
    e->job = NULL;
    return 0;
}

//  agent_id's waiting requests, in order, as its workers' share frees.
static void s_next (self_t *self, const char *agent_id)
{
    conn_t *conn = (conn_t *) zhashx_lookup (self->agents, agent_id);
    while (conn && conn->egress_wait && s_jobs_of (self, agent_id) < AH_TUN_EGRESS_CONNECTING) {
        egress_t *e = conn->egress_wait;
        conn->egress_wait = e->wait_next;
        if (!conn->egress_wait)
            conn->egress_wait_tail = NULL;
        e->wait_next = NULL;
        chan_t *chan = ah_tun_chan_find (self, e->chan_id);
        if (s_launch (self, e) && chan) {
            ah_tun_egress_answer (conn, chan, "EIO", "egress failed: no worker could take the connection", NULL);
            ah_tun_chan_fail (self, chan, 0, "egress failed: no worker could take the connection");
        }
    }
}

//  The job is back: the answer, the record, the relay.
static void s_done (void *self_, void *arg, bool ran)
{
    self_t *self = (self_t *) self_;
    job_t *job = (job_t *) arg;
    char agent_id [AGENT_ID_MAX];
    snprintf (agent_id, sizeof agent_id, "%s", job->agent_id);
    if (self)
        s_jobs_add (self, agent_id, -1);
    chan_t *chan = self && ran ? ah_tun_chan_find (self, job->chan_id) : NULL;
    egress_t *e = chan ? chan->egress : NULL;
    if (!e || atomic_load (&self->egress_stop)) {
        s_job_free (job);               //  its channel went meanwhile (recorded then)
        if (self && !atomic_load (&self->egress_stop))
            s_next (self, agent_id);
        return;
    }
    s_connected (self, chan, e, job);
    s_next (self, agent_id);
}

//  The job's outcome for its channel, still there.
static void s_connected (self_t *self, chan_t *chan, egress_t *e, job_t *job)
{
    conn_t *conn = chan->conn;
    e->connecting = false;
    snprintf (e->address, sizeof e->address, "%s", job->address);
    char detail [sizeof e->detail + ADDR_TEXT_MAX + 8];
    snprintf (detail, sizeof detail, "%s%s%s", e->detail, e->address [0] ? " to " : "", e->address);
    if (job->fd < 0) {
        ah_debug (AREA, "agent '%s': egress %s: %s", e->agent_id, detail, job->error);
        ah_tun_egress_record (self, e->agent_id, "egress", detail, false, job->error, -1);
        if (e->counts && job->code && streq (job->code, "EACCES"))
            e->counts->denied++;    //  the address check
        else if (e->counts)
            e->counts->failed++;
        chan->egress = NULL;
        uint32_t stream = chan->stream;
        if (ah_tun_egress_answer (conn, chan, job->code ? job->code : "EIO", job->error, NULL))
            ah_yamux_reset (conn->yamux, stream);
        conn->egress_open--;
        ah_buf_free (&e->down);
        free (e);
        //  What sandboxd sent meanwhile: nobody reads it.
        s_job_free (job);
        ah_tun_chan_free (self, chan);
        return;
    }
    e->fd = job->fd;
    job->fd = -1;
    const char *twhy = NULL;
    if (job->tls && !(e->tls = ah_tun_tls_take (self, job->tls, &twhy))) {
        s_job_free (job);
        s_fail (self, chan, twhy);
        return;
    }
    if (job->tls) {
        //  The handshake with the upstream, made in the worker, counts too.
        uint64_t sent = 0, received = 0;
        ah_tun_tls_job_bytes (job->tls, &sent, &received);
        e->bytes_out += sent;
        e->bytes_in += received;
        if (e->counts) {
            e->counts->bytes_out += sent;
            e->counts->bytes_in += received;
        }
    }
    s_job_free (job);
    e->connected_ms = zclock_mono ();
    if (e->counts)
        e->counts->allowed++;
    if (ah_tun_egress_answer (conn, chan, NULL, NULL, e->address)) {
        s_fail (self, chan, "the answer could not be sent to sandboxd");
        return;
    }
    //  The answer goes out now, not at the turn's end: the log line and
    //  the record below are not the sandbox's client's to wait for.
    ah_tun_conns_flush (self);
    ah_info (AREA, "agent '%s': egress %s: connected%s%s%s", e->agent_id, detail,
             e->tls ? " (TLS terminated, header " : "", e->tls ? ah_tun_tls_header (e->tls) : "", e->tls ? " added)" : "");
    //  The verdict and the address, on the record at once; the bytes at the end.
    char sentence [sizeof detail + sizeof e->why + 160];
    snprintf (sentence, sizeof sentence, "%s: %s%s%s%s", detail, e->why,
              e->tls ? "; TLS terminated by the server, the tenant's secret header '" : "",
              e->tls ? ah_tun_tls_header (e->tls) : "", e->tls ? "' added to each request" : "");
    ah_tun_egress_record (self, e->agent_id, "egress", sentence, true, NULL, -1);
    if (e->tls && ah_buf_size (&e->down)) {
        //  What sandboxd sent before the connect: the start of the sandbox's TLS.
        ah_buf_t early = e->down;
        memset (&e->down, 0, sizeof e->down);
        e->tls_unconsumed += ah_buf_size (&early);
        char why [300];
        int rc = ah_tun_tls_from_sandbox (e->tls, ah_buf_head (&early), ah_buf_size (&early), &e->up, &e->down,
                                          why, sizeof why);
        ah_buf_free (&early);
        if (rc) {
            s_fail (self, chan, why);
            return;
        }
        if (!s_pump_up (self, chan))
            return;
    }
    if (s_pump_down (self, chan))
        s_arm (e);
}

int ah_tun_egress_start (self_t *self, chan_t *chan, const ah_tun_egress_req_t *req,
                         const uint8_t *early, size_t early_size, char *why, size_t why_size)
{
    egress_t *e = (egress_t *) calloc (1, sizeof *e);
    job_t *job = (job_t *) calloc (1, sizeof *job);
    if (!e || !job || (early_size && ah_buf_append (&e->down, early, early_size))
    ||  !(job->open = s_strv_copy (req->open, req->n_open))
    ||  !(job->deny = s_strv_copy (req->deny, req->n_deny))) {
        snprintf (why, why_size, "egress failed: out of memory");
        goto fail;
    }
    e->self = self;
    e->chan_id = chan->id;
    e->fd = -1;
    e->connecting = true;
    e->started_ms = zclock_mono ();
    e->counts = req->counts;
    snprintf (e->agent_id, sizeof e->agent_id, "%s", chan->conn->agent_id);
    snprintf (e->detail, sizeof e->detail, "%s", req->detail);
    snprintf (e->why, sizeof e->why, "%s", req->why);
    job->fd = -1;
    job->chan_id = chan->id;
    snprintf (job->agent_id, sizeof job->agent_id, "%s", chan->conn->agent_id);
    snprintf (job->host, sizeof job->host, "%s", req->host);
    job->port = req->port;
    job->literal = req->literal;
    job->n_open = req->n_open;
    job->n_deny = req->n_deny;
    job->timeout_ms = self->egress_connect_ms;
    job->stop = &self->egress_stop;
    if (req->secret && ah_tun_tls_prepare (self, req->tenant, req->secret, req->host, req->port, req->literal,
                                           &job->tls, why, why_size))
        goto fail;
    conn_t *conn = chan->conn;
    if ((e->job = job) && s_jobs_of (self, conn->agent_id) < AH_TUN_EGRESS_CONNECTING) {
        if (s_launch (self, e)) {
            snprintf (why, why_size, "egress failed: no worker could take the connection");
            goto fail;
        }
    }
    else {
        //  Its turn comes when one of the sandbox's connects is back.
        if (conn->egress_wait_tail)
            conn->egress_wait_tail->wait_next = e;
        else
            conn->egress_wait = e;
        conn->egress_wait_tail = e;
    }
    chan->egress = e;
    conn->egress_open++;
    return 0;
fail:
    if (e)
        ah_buf_free (&e->down);
    free (e);
    if (job) {
        job->fd = -1;
        s_job_free (job);
    }
    return -1;
}

//  e off its conn's waiting list.
static void s_unwait (conn_t *conn, egress_t *e)
{
    egress_t **p = &conn->egress_wait, *prev = NULL;
    while (*p && *p != e) {
        prev = *p;
        p = &(*p)->wait_next;
    }
    if (!*p)
        return;
    *p = e->wait_next;
    if (conn->egress_wait_tail == e)
        conn->egress_wait_tail = prev;
    e->wait_next = NULL;
}

//  The end of e (its channel forgotten already): recorded, closed, freed.
static void s_finish (self_t *self, egress_t *e, const char *error)
{
    ah_lwsloop_io_cancel (&e->io);
    ah_lwsloop_timer_cancel (&e->drain_timer);
    if (e->connecting) {
        //  A worker's job goes on; its done finds no channel and closes the socket.
        char why [300];
        snprintf (why, sizeof why, "egress ended before the connection was made: %s",
                  error ? error : "the sandbox closed the stream");
        ah_tun_egress_record (self, e->agent_id, "egress", e->detail, false, why, -1);
        if (e->counts)
            e->counts->failed++;
    }
    else {
        int64_t ms = zclock_mono () - e->connected_ms;
        char secret [160] = "";
        char detail [sizeof e->detail + ADDR_TEXT_MAX + sizeof secret + 100];
        if (e->tls)
            snprintf (secret, sizeof secret, ", TLS terminated, header '%s' added to %llu requests",
                      ah_tun_tls_header (e->tls), (unsigned long long) ah_tun_tls_requests (e->tls));
        snprintf (detail, sizeof detail, "%s to %s: %llu bytes out, %llu bytes in, %lld ms%s", e->detail,
                  e->address, (unsigned long long) e->bytes_out, (unsigned long long) e->bytes_in,
                  (long long) ms, secret);
        ah_tun_egress_record (self, e->agent_id, "egress.end", detail, error == NULL, error,
                              (int64_t) (e->bytes_out + e->bytes_in));
        ah_debug (AREA, "agent '%s': egress %s%s%s", e->agent_id, detail, error ? ": " : "", error ? error : "");
    }
    if (e->fd >= 0)
        close (e->fd);
    ah_tun_tls_free (&e->tls);
    ah_buf_free (&e->down);
    ah_buf_free (&e->up);
    free (e);
}

//  e off self->egress_draining.
static void s_undrain (self_t *self, egress_t *e)
{
    for (egress_t **p = &self->egress_draining; *p; p = &(*p)->drain_next)
        if (*p == e) {
            *p = e->drain_next;
            return;
        }
}

static void s_on_drain_timeout (ah_lwsloop_timer_t *timer, void *arg)
{
    egress_t *e = (egress_t *) arg;
    self_t *self = e->self;
    char why [200];
    snprintf (why, sizeof why, "the upstream did not take the last %zu bytes within %d ms",
              ah_buf_size (&e->down), DRAIN_MS);
    s_undrain (self, e);
    s_finish (self, e, why);
}

//  A draining connection's socket can take more: the last bytes, then
//  the upstream's writing side shut (sandboxd's FIN) and the end.
static void s_on_drain (ah_lwsloop_io_t *io, int revents, void *arg)
{
    egress_t *e = (egress_t *) arg;
    self_t *self = e->self;
    char why [200];
    if (s_write_down (e, why, sizeof why) < 0) {
        s_undrain (self, e);
        s_finish (self, e, why);
        return;
    }
    if (ah_buf_size (&e->down))
        return;                     //  called again when the socket takes more
    shutdown (e->fd, SHUT_WR);
    s_undrain (self, e);
    s_finish (self, e, NULL);
}

void ah_tun_egress_end (self_t *self, chan_t *chan, const char *error)
{
    egress_t *e = chan->egress;
    if (!e)
        return;
    chan->egress = NULL;
    ah_lwsloop_io_cancel (&e->io);
    if (chan->conn && chan->conn->egress_open > 0)
        chan->conn->egress_open--;
    if (e->job) {
        //  Still waiting its turn: it never reaches a worker.
        if (chan->conn)
            s_unwait (chan->conn, e);
        e->job->fd = -1;
        s_job_free (e->job);
        e->job = NULL;
    }
    if (!error && !e->connecting && e->fd >= 0 && ah_buf_size (&e->down) && self->loop) {
        //  Both FINs crossed while the upstream had not taken all the
        //  sandbox sent (it shut its side first and reads on): the rest
        //  goes on without the stream, within DRAIN_MS.
        e->drain_next = self->egress_draining;
        self->egress_draining = e;
        ah_lwsloop_io_set (self->loop, &e->io, e->fd, EV_WRITE, s_on_drain, e);
        ah_lwsloop_timer_set (self->loop, &e->drain_timer, DRAIN_MS, s_on_drain_timeout, e);
        return;
    }
    s_finish (self, e, error);
}

void ah_tun_egress_drains_end (self_t *self)
{
    while (self->egress_draining) {
        egress_t *e = self->egress_draining;
        self->egress_draining = e->drain_next;
        s_finish (self, e, "the server is shutting down");
    }
}

void ah_tun_egress_data (self_t *self, chan_t *chan, const uint8_t *data, size_t size)
{
    egress_t *e = chan->egress;
    if (chan->parked) {
        ah_tun_egress_parked_data (self, chan, data, size);
        return;
    }
    if (!e) {
        ah_yamux_consumed (chan->conn->yamux, chan->stream, size);
        return;
    }
    if (e->down_eof) {
        s_fail (self, chan, "sandboxd sent data after its FIN");
        return;
    }
    if (e->tls) {
        //  The sandbox's TLS: decrypted, the header added, encrypted on.
        e->tls_unconsumed += size;
        char why [300];
        if (ah_tun_tls_from_sandbox (e->tls, data, size, &e->up, &e->down, why, sizeof why)) {
            s_fail (self, chan, why);
            return;
        }
        if (!s_pump_up (self, chan))
            return;
    }
    else
    //  The window bounds it (yamux refuses data beyond it).
    if (ah_buf_append (&e->down, data, size)) {
        s_fail (self, chan, "out of memory");
        return;
    }
    if (e->fd >= 0 && s_pump_down (self, chan))
        s_arm (e);
}

void ah_tun_egress_eof (self_t *self, chan_t *chan)
{
    egress_t *e = chan->egress;
    if (chan->parked)
        ah_tun_egress_parked_eof (self, chan);
    if (!e)
        return;
    e->down_eof = true;
    if (e->tls)
        ah_tun_tls_close (e->tls, false, &e->down);
    if (e->fd >= 0 && s_pump_down (self, chan))
        s_arm (e);
}

void ah_tun_egress_writable (self_t *self, chan_t *chan)
{
    egress_t *e = chan->egress;
    if (e && e->fd >= 0 && s_pump_up (self, chan))
        s_arm (e);
}
