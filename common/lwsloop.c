/*  common/lwsloop.c: an lws context and zsocks served by one thread.
    See lwsloop.h for the design (a libev loop under lws, ZMQ_FDs as
    ev_io, readiness decided by ZMQ_EVENTS before every sleep).         */
#include "common/lwsloop.h"
#include "common/log.h"

#include "common/str.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <string.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

typedef struct {
    ev_io io;                   //  on zmq's own ZMQ_FD (never closed here)
    ah_lwsloop_t *loop;
    zsock_t *sock;
    ah_lwsloop_fn *fn;
    void *arg;
    bool dead;                  //  unwatched: no more calls; freed by the next sweep
    bool check;                 //  its ZMQ_EVENTS must be asked before the next sleep
} s_watch_t;

struct ah_lwsloop_t {
    struct ev_loop *ev;
    bool own_ev;                        //  false: beside another loop, on its ev
    ev_prepare prepare;                 //  drain before every sleep
    ev_idle idle;                       //  active: messages wait, do not sleep
    struct lws_context *context;
    struct lws_vhost *vhost;
    void *user;                         //  caller's info->user
    s_watch_t **watches;
    size_t nwatches, cap;
    bool ours_ran;                      //  a zsock or timer callback ran this round
    bool stopped;
    bool destroying;
    uint64_t rounds;
};

//  lws logs through ah_log. lws_set_log_level sets process-wide state:
//  do it once, whichever loop comes first.
static void s_lws_log (int level, const char *line)
{
    size_t n = strlen (line);
    while (n && (line [n - 1] == '\n' || line [n - 1] == '\r'))
        n--;
    ah_log (level & LLL_ERR ? AH_LOG_ERROR : AH_LOG_WARN, "lws", "%.*s", (int) n, line);
}

//  lws's own allocations. Each WebSocket connection gets an rx buffer of
//  its protocol's rx_buffer_size (64 KiB for the tunnel's) that a quiet
//  connection never fills: from pages of its own it costs only what is
//  written, but from malloc's heap it may land on pages another
//  allocation already touched and freed (the API's requests, in the same
//  thread), and is then resident whole: 1,000 idle sandboxd took 92 MiB
//  instead of 37 (bench/scale). So an rx buffer (lws's reason "rx_ubuf")
//  of S_LWS_OWN_PAGES or more gets an anonymous mapping of its own, and
//  everything else goes to malloc: the buffers lws makes while a
//  connection's reading is held back ("lws_buflist_append_segment", up
//  to 192 KiB each, one per read of an upload) come and go too often to
//  pay a mapping each (server CPU per GiB uploaded 1.2 -> 2.0 s when
//  they did). A header in front says which, and the size asked for
//  (realloc's copy).
#define S_LWS_OWN_PAGES (32u << 10)

typedef struct {
    size_t size;                        //  asked for
    size_t mapped;                      //  bytes mapped, header included; 0: malloc's
} s_lws_hdr_t;                          //  16 bytes: what follows keeps malloc's alignment

static void s_lws_release (s_lws_hdr_t *h)
{
    if (h && h->mapped)
        munmap (h, h->mapped);
    else
        free (h);
}

static void *s_lws_realloc (void *ptr, size_t size, const char *reason)
{
    s_lws_hdr_t *old = ptr ? (s_lws_hdr_t *) ptr - 1 : NULL;
    if (size == 0) {                    //  lws_free
        s_lws_release (old);
        return NULL;
    }
    if (size > SIZE_MAX / 2)
        return NULL;
    s_lws_hdr_t *h;
    if ((size >= S_LWS_OWN_PAGES && reason && streq (reason, "rx_ubuf")) || (old && old->mapped)) {
        size_t total = (size + sizeof *h + 4095) & ~(size_t) 4095;
        if (old && old->mapped >= total) {
            old->size = size;
            return ptr;
        }
        h = mmap (NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (h == MAP_FAILED)
            return NULL;
        h->mapped = total;
    }
    else
    if (old) {
        h = realloc (old, size + sizeof *h);
        if (!h)
            return NULL;
        h->size = size;
        return h + 1;
    }
    else {
        h = malloc (size + sizeof *h);
        if (!h)
            return NULL;
        h->mapped = 0;
    }
    h->size = size;
    if (old) {
        memcpy (h + 1, ptr, old->size < size ? old->size : size);
        s_lws_release (old);
    }
    return h + 1;
}

static void s_lws_log_init (void)
{
    lws_set_log_level (LLL_ERR | LLL_WARN, s_lws_log);
    //  Before any context: nothing lws allocated earlier is freed here.
    lws_set_allocator (s_lws_realloc);
}

//  Free the watches that are dead. Only at a safe point (no drain
//  running): callbacks may hold a watch pointer.
static void s_sweep (ah_lwsloop_t *self, bool all)
{
    size_t kept = 0;
    for (size_t i = 0; i < self->nwatches; i++) {
        s_watch_t *w = self->watches [i];
        if (all || w->dead) {
            ev_io_stop (self->ev, &w->io);
            free (w);
        }
        else
            self->watches [kept++] = w;
    }
    self->nwatches = kept;
}

//  Drain one socket: true if it still has messages after a batch.
//  Asking ZMQ_EVENTS costs two system calls (zmq's fork check and a
//  poll of its mailbox): a socket is asked only when its descriptor
//  fired, it was touched (a send), or the last batch left messages.
static bool s_drain (ah_lwsloop_t *self, s_watch_t *w)
{
    w->check = false;
    for (int i = 0; i < AH_LWSLOOP_BATCH; i++) {
        if (w->dead || self->stopped)
            return false;
        if (!(zsock_events (w->sock) & ZMQ_POLLIN))
            return false;
        self->ours_ran = true;
        w->fn (self, w->sock, w->arg);
    }
    w->check = !w->dead && !self->stopped && (zsock_events (w->sock) & ZMQ_POLLIN);
    return w->check;
}

//  Drain every live watch; true if any has more. The array may change
//  under us (a callback may watch or unwatch), so iterate by index and
//  re-check bounds.
static bool s_drain_all (ah_lwsloop_t *self)
{
    bool more = false;
    for (size_t i = 0; i < self->nwatches && !self->stopped; i++) {
        s_watch_t *w = self->watches [i];
        if (!w->dead && w->check && s_drain (self, w))
            more = true;
    }
    return more;
}

//  ZMQ_FD fired: zmq has news (or only commands: the drain asks).
//  Leftovers beyond a batch are picked up by the prepare watcher.
static void s_on_zmq_fd (struct ev_loop *ev, ev_io *io, int revents)
{
    s_watch_t *w = (s_watch_t *) io->data;
    ah_lwsloop_t *self = w->loop;
    if (!w->dead && !self->destroying)
        s_drain (self, w);
}

//  Right before libev would sleep: the point the old poll() loop drained at.
static void s_on_prepare (struct ev_loop *ev, ev_prepare *prepare, int revents)
{
    ah_lwsloop_t *self = (ah_lwsloop_t *) prepare->data;
    self->rounds++;
    s_sweep (self, false);
    bool more = !self->stopped && s_drain_all (self);
    if (self->stopped) {
        if (self->own_ev)
            ev_break (ev, EVBREAK_ALL);
        ev_idle_stop (ev, &self->idle);
        return;
    }
    if (more)
        ev_idle_start (ev, &self->idle);
    else
        ev_idle_stop (ev, &self->idle);
    if (self->ours_ran) {
        self->ours_ran = false;
        lws_cancel_service (self->context);
    }
}

//  Active only while messages wait: its being active keeps libev from
//  sleeping; the prepare watcher does the work.
static void s_on_idle (struct ev_loop *ev, ev_idle *idle, int revents)
{
}

static ah_lwsloop_t *s_new (ah_lwsloop_t *beside, const struct lws_context_creation_info *info)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once (&once, s_lws_log_init);

    ah_lwsloop_t *self = (ah_lwsloop_t *) calloc (1, sizeof *self);
    if (!self)
        return NULL;
    //  epoll explicitly: libev's automatic choice could be poll or
    //  select on some kernels, which is what this loop exists to avoid.
    self->own_ev = !beside;
    self->ev = beside ? beside->ev : ev_loop_new (EVBACKEND_EPOLL | EVFLAG_NOENV);
    if (!self->ev) {
        ah_error ("lwsloop", "cannot create the libev loop (epoll): %s", strerror (errno));
        goto fail;
    }
    ev_prepare_init (&self->prepare, s_on_prepare);
    self->prepare.data = self;
    ev_prepare_start (self->ev, &self->prepare);
    ev_idle_init (&self->idle, s_on_idle);

    struct lws_context_creation_info copy = *info;
    void *foreign_loops [1] = { self->ev };
    self->user = info->user;
    copy.user = self;
    copy.options |= LWS_SERVER_OPTION_LIBEV;
    copy.foreign_loops = foreign_loops;     //  lws copies the pointer out at creation
    self->context = lws_create_context (&copy);
    if (!self->context) {
        ah_error ("lwsloop", "cannot create the libwebsockets context (port %d; lws on libev needs "
                  "the libwebsockets-evlib-ev package: %s)", info->port,
                  access (LWS_INSTALL_LIBDIR "/libwebsockets-evlib_ev.so", R_OK) == 0
                  ? "installed" : "missing");
        goto fail;
    }
    self->vhost = lws_get_vhost_by_name (self->context,
                                         info->vhost_name ? info->vhost_name : "default");
    if (!self->vhost) {
        ah_error ("lwsloop", "the libwebsockets context has no default vhost");
        goto fail;
    }
    return self;
fail:
    ah_lwsloop_destroy (&self);
    return NULL;
}

ah_lwsloop_t *ah_lwsloop_new (const struct lws_context_creation_info *info)
{
    return s_new (NULL, info);
}

ah_lwsloop_t *ah_lwsloop_new_beside (ah_lwsloop_t *beside, const struct lws_context_creation_info *info)
{
    return beside ? s_new (beside, info) : NULL;
}

void ah_lwsloop_destroy (ah_lwsloop_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_lwsloop_t *self = *self_p;
    self->destroying = true;
    //  lws stops its watchers on our loop (a foreign libev loop needs no
    //  more rounds to finish: the plugin has no asynchronous close).
    if (self->context)
        lws_context_destroy (self->context);
    self->context = NULL;
    if (self->ev) {
        s_sweep (self, true);
        ev_prepare_stop (self->ev, &self->prepare);
        ev_idle_stop (self->ev, &self->idle);
        if (self->own_ev)
            ev_loop_destroy (self->ev);
    }
    free (self->watches);
    free (self);
    *self_p = NULL;
}

struct lws_context *ah_lwsloop_context (ah_lwsloop_t *self) { return self->context; }
struct lws_vhost *ah_lwsloop_vhost (ah_lwsloop_t *self) { return self->vhost; }
void *ah_lwsloop_user (ah_lwsloop_t *self) { return self->user; }
struct ev_loop *ah_lwsloop_ev (ah_lwsloop_t *self) { return self->ev; }
uint64_t ah_lwsloop_rounds (ah_lwsloop_t *self) { return self->rounds; }

ah_lwsloop_t *ah_lwsloop_from_wsi (struct lws *wsi)
{
    struct lws_context *context = wsi ? lws_get_context (wsi) : NULL;
    return context ? (ah_lwsloop_t *) lws_context_user (context) : NULL;
}

int ah_lwsloop_port (ah_lwsloop_t *self)
{
    int port = self->vhost ? lws_get_vhost_listen_port (self->vhost) : -1;
    return port > 0 ? port : -1;
}

struct lws_vhost *ah_lwsloop_listen (ah_lwsloop_t *self, const char *name, const char *host, int port,
                                     const struct lws_protocols *protocols, const char *raw_protocol,
                                     const char *tls_cert, const char *tls_key, uint64_t options,
                                     char **err)
{
    struct in_addr v4;
    struct in6_addr v6;
    bool ipv4 = host && inet_pton (AF_INET, host, &v4) == 1;
    bool ipv6 = host && inet_pton (AF_INET6, host, &v6) == 1;
    if (host && *host && !ipv4 && !ipv6) {
        if (err)
            *err = ah_strf ("'%s' is not an IP address (give an IPv4 or an IPv6 literal, or none "
                            "for every address)", host);
        return NULL;
    }
    struct lws_context_creation_info info;
    memset (&info, 0, sizeof info);
    info.vhost_name = name;
    info.port = port;
    info.protocols = protocols;
    info.options = options;
    //  lws binds an IPv6 socket unless told otherwise: an IPv4 address
    //  would then be taken as every address.
    info.iface = host && *host ? host : NULL;
    if (ipv4)
        info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    if (tls_cert && tls_key) {
        info.ssl_cert_filepath = tls_cert;
        info.ssl_private_key_filepath = tls_key;
        //  lws reads this from the vhost's options too: without it the
        //  vhost quietly serves plain TCP.
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        //  A raw listener's owner speaks HTTP/1.1 itself: offer nothing else.
        if (raw_protocol)
            info.alpn = "http/1.1";
    }
    if (raw_protocol) {
        info.options |= LWS_SERVER_OPTION_ADOPT_APPLY_LISTEN_ACCEPT_CONFIG;
        info.listen_accept_role = "raw-skt";
        info.listen_accept_protocol = raw_protocol;
    }
    struct lws_vhost *vhost = lws_create_vhost (self->context, &info);
    if (!vhost || lws_get_vhost_listen_port (vhost) <= 0) {
        if (err)
            *err = ah_strf ("cannot listen on %s%s%s:%d: address in use or not available",
                            ipv6 ? "[" : "", host && *host ? host : "", ipv6 ? "]" : "", port);
        return NULL;
    }
    return vhost;
}

struct lws_vhost *ah_lwsloop_listen_unix (ah_lwsloop_t *self, const char *name, const char *path,
                                          const struct lws_protocols *protocols, uint64_t options,
                                          char **err)
{
    struct sockaddr_un su;
    if (!path || path [0] != '/' || strlen (path) >= sizeof su.sun_path) {
        if (err)
            *err = ah_strf ("'%s' is not an absolute path shorter than %zu bytes", path ? path : "",
                            sizeof su.sun_path);
        return NULL;
    }
    struct stat st;
    if (lstat (path, &st) == 0 && !S_ISSOCK (st.st_mode)) {
        if (err)
            *err = ah_strf ("%s exists and is not a socket", path);
        return NULL;
    }
    unlink (path);
    struct lws_context_creation_info info;
    memset (&info, 0, sizeof info);
    info.vhost_name = name;
    info.port = 0;
    info.iface = path;
    info.protocols = protocols;
    info.options = options | LWS_SERVER_OPTION_UNIX_SOCK;
    struct lws_vhost *vhost = lws_create_vhost (self->context, &info);
    if (!vhost || lstat (path, &st) != 0 || !S_ISSOCK (st.st_mode)) {
        if (err)
            *err = ah_strf ("cannot listen on the unix socket %s: %s", path,
                            vhost ? "no socket appeared" : "lws refused the vhost");
        return NULL;
    }
    chmod (path, 0666);
    return vhost;
}

int ah_lwsloop_watch (ah_lwsloop_t *self, zsock_t *sock, ah_lwsloop_fn *fn, void *arg)
{
    if (!self || !sock || !fn || self->destroying)
        return -1;
    ah_lwsloop_unwatch (self, sock);
    if (self->nwatches == self->cap) {
        size_t cap = self->cap ? 2 * self->cap : 8;
        s_watch_t **grown = (s_watch_t **) realloc (self->watches, cap * sizeof *grown);
        if (!grown)
            return -1;
        self->watches = grown;
        self->cap = cap;
    }
    s_watch_t *w = (s_watch_t *) calloc (1, sizeof *w);
    if (!w)
        return -1;
    w->loop = self;
    w->check = true;
    w->sock = sock;
    w->fn = fn;
    w->arg = arg;
    ev_io_init (&w->io, s_on_zmq_fd, zsock_fd (sock), EV_READ);
    w->io.data = w;
    ev_io_start (self->ev, &w->io);
    self->watches [self->nwatches++] = w;
    return 0;
}

void ah_lwsloop_unwatch (ah_lwsloop_t *self, zsock_t *sock)
{
    if (!self)
        return;
    for (size_t i = 0; i < self->nwatches; i++) {
        s_watch_t *w = self->watches [i];
        if (w->sock == sock && !w->dead) {
            w->dead = true;
            //  Stop now (the caller may destroy the socket, and its
            //  descriptor with it, before the sweep frees the watch).
            ev_io_stop (self->ev, &w->io);
        }
    }
}

void ah_lwsloop_touch (ah_lwsloop_t *self, zsock_t *sock)
{
    for (size_t i = 0; self && i < self->nwatches; i++)
        if (self->watches [i]->sock == sock)
            self->watches [i]->check = true;
}

int ah_lwsloop_run (ah_lwsloop_t *self)
{
    if (!self->own_ev)
        return -1;                  //  the loop it is beside runs the thread
    self->stopped = false;
    //  The prepare watcher drains first, then libev sleeps in epoll
    //  until a descriptor (lws's or a ZMQ_FD) or a timer is due.
    ev_run (self->ev, 0);
    return 0;
}

void ah_lwsloop_stop (ah_lwsloop_t *self)
{
    if (!self)
        return;
    self->stopped = true;
    if (self->ev && self->own_ev)
        ev_break (self->ev, EVBREAK_ALL);
}

static void s_timer_fired (struct ev_loop *ev, ev_timer *w, int revents)
{
    ah_lwsloop_timer_t *timer = lws_container_of (w, ah_lwsloop_timer_t, ev);
    ah_lwsloop_t *self = timer->loop;
    self->ours_ran = true;
    timer->fn (timer, timer->arg);          //  may free the timer or set it again
}

void ah_lwsloop_timer_set (ah_lwsloop_t *self, ah_lwsloop_timer_t *timer, int64_t delay_ms,
                           ah_lwsloop_timer_fn *fn, void *arg)
{
    if (timer->loop)
        ev_timer_stop (timer->loop->ev, &timer->ev);
    timer->loop = self;
    timer->fn = fn;
    timer->arg = arg;
    if (delay_ms < 0)
        delay_ms = 0;
    //  ev_now is the time the round began: a timer set late in a long
    //  round would fire early by that much. Measure from now.
    ev_now_update (self->ev);
    ev_timer_init (&timer->ev, s_timer_fired, (ev_tstamp) delay_ms / 1000.0, 0.);
    ev_timer_start (self->ev, &timer->ev);
}

void ah_lwsloop_timer_cancel (ah_lwsloop_timer_t *timer)
{
    if (timer && timer->loop)
        ev_timer_stop (timer->loop->ev, &timer->ev);
}

static void s_io_fired (struct ev_loop *ev, ev_io *w, int revents)
{
    ah_lwsloop_io_t *io = lws_container_of (w, ah_lwsloop_io_t, ev);
    io->loop->ours_ran = true;
    io->fn (io, revents & (EV_READ | EV_WRITE), io->arg);  //  may free io or set it again
}

void ah_lwsloop_io_set (ah_lwsloop_t *self, ah_lwsloop_io_t *io, int fd, int events,
                        ah_lwsloop_io_fn *fn, void *arg)
{
    if (io->loop)
        ev_io_stop (io->loop->ev, &io->ev);
    io->loop = self;
    io->fn = fn;
    io->arg = arg;
    events &= EV_READ | EV_WRITE;
    if (!events)
        return;
    ev_io_init (&io->ev, s_io_fired, fd, events);
    ev_io_start (self->ev, &io->ev);
}

void ah_lwsloop_io_cancel (ah_lwsloop_io_t *io)
{
    if (io && io->loop) {
        ev_io_stop (io->loop->ev, &io->ev);
        io->loop = NULL;
    }
}
