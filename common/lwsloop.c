/*  common/lwsloop.c: an lws context and zsocks served by one thread.
    See lwsloop.h for the design (ZMQ_FD adopted as a raw descriptor,
    readiness decided by ZMQ_EVENTS before every sleep).               */
#include "common/lwsloop.h"
#include "common/log.h"

#include "common/str.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define S_PROTOCOL_NAME "ah-lwsloop-zmq"

typedef struct {
    zsock_t *sock;
    ah_lwsloop_fn *fn;
    void *arg;
    struct lws *wsi;            //  the adopted dup of ZMQ_FD; NULL once closed
    bool dead;                  //  unwatched: no more calls; freed once wsi is gone
} s_watch_t;

struct ah_lwsloop_t {
    struct lws_context *context;
    struct lws_vhost *vhost;
    struct lws_protocols *protocols;    //  caller's protocols + ours + terminator
    void *user;                         //  caller's info->user
    s_watch_t **watches;
    size_t nwatches, cap;
    struct lws *in_wsi;                 //  the adopted wsi whose callback is running
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

static void s_lws_log_init (void)
{
    lws_set_log_level (LLL_ERR | LLL_WARN, s_lws_log);
}

//  Free the watches that are dead and whose wsi lws has closed. Only at
//  a safe point (no drain running): callbacks may hold a watch pointer.
static void s_sweep (ah_lwsloop_t *self, bool all)
{
    size_t kept = 0;
    for (size_t i = 0; i < self->nwatches; i++) {
        s_watch_t *w = self->watches [i];
        if (all || (w->dead && !w->wsi))
            free (w);
        else
            self->watches [kept++] = w;
    }
    self->nwatches = kept;
}

//  Drain one socket: true if it still has messages after a batch.
static bool s_drain (ah_lwsloop_t *self, s_watch_t *w)
{
    for (int i = 0; i < AH_LWSLOOP_BATCH; i++) {
        if (w->dead || self->stopped)
            return false;
        if (!(zsock_events (w->sock) & ZMQ_POLLIN))
            return false;
        w->fn (self, w->sock, w->arg);
    }
    return !w->dead && !self->stopped && (zsock_events (w->sock) & ZMQ_POLLIN);
}

//  Drain every live watch; true if any has more. The array may change
//  under us (a callback may watch or unwatch), so iterate by index over
//  a snapshot of the count and re-check bounds.
static bool s_drain_all (ah_lwsloop_t *self)
{
    bool more = false;
    for (size_t i = 0; i < self->nwatches && !self->stopped; i++) {
        s_watch_t *w = self->watches [i];
        if (!w->dead && s_drain (self, w))
            more = true;
    }
    return more;
}

static int s_callback (struct lws *wsi, enum lws_callback_reasons reason,
                       void *user, void *in, size_t len)
{
    ah_lwsloop_t *self = ah_lwsloop_from_wsi (wsi);
    s_watch_t *w = (s_watch_t *) lws_get_opaque_user_data (wsi);
    switch (reason) {
        case LWS_CALLBACK_RAW_RX_FILE:
            if (self && w && !w->dead && !self->destroying) {
                self->in_wsi = wsi;
                s_drain (self, w);
                self->in_wsi = NULL;
            }
            //  Leftovers are picked up by the drain before the next sleep.
            return 0;
        case LWS_CALLBACK_RAW_CLOSE_FILE:
            if (self && w) {
                w->wsi = NULL;
                if (!w->dead && !self->destroying)
                    ah_warn ("lwsloop", "a watched socket's descriptor was closed by lws");
                w->dead = true;                 //  freed by the next sweep
            }
            return 0;
        default:
            return 0;
    }
}

ah_lwsloop_t *ah_lwsloop_new (const struct lws_context_creation_info *info)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once (&once, s_lws_log_init);

    ah_lwsloop_t *self = (ah_lwsloop_t *) calloc (1, sizeof *self);
    if (!self)
        return NULL;
    struct lws_context_creation_info copy = *info;
    size_t n = 0;
    if (info->protocols)
        while (info->protocols [n].name || info->protocols [n].callback)
            n++;
    self->protocols = (struct lws_protocols *) calloc (n + 2, sizeof (struct lws_protocols));
    if (!self->protocols)
        goto fail;
    if (n)
        memcpy (self->protocols, info->protocols, n * sizeof (struct lws_protocols));
    self->protocols [n].name = S_PROTOCOL_NAME;
    self->protocols [n].callback = s_callback;
    self->user = info->user;
    copy.protocols = self->protocols;
    copy.user = self;
    self->context = lws_create_context (&copy);
    if (!self->context) {
        ah_error ("lwsloop", "cannot create the libwebsockets context (port %d)", info->port);
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

void ah_lwsloop_destroy (ah_lwsloop_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_lwsloop_t *self = *self_p;
    self->destroying = true;
    if (self->context)
        lws_context_destroy (self->context);     //  closes the adopted dups (CLOSE_FILE frees)
    self->context = NULL;
    s_sweep (self, true);
    free (self->watches);
    free (self->protocols);
    free (self);
    *self_p = NULL;
}

struct lws_context *ah_lwsloop_context (ah_lwsloop_t *self) { return self->context; }
struct lws_vhost *ah_lwsloop_vhost (ah_lwsloop_t *self) { return self->vhost; }
void *ah_lwsloop_user (ah_lwsloop_t *self) { return self->user; }
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
    w->sock = sock;
    w->fn = fn;
    w->arg = arg;
    int fd = dup (zsock_fd (sock));
    if (fd < 0) {
        ah_error ("lwsloop", "dup of ZMQ_FD failed: %s", strerror (errno));
        free (w);
        return -1;
    }
    lws_sock_file_fd_type u;
    memset (&u, 0, sizeof u);
    u.filefd = (lws_filefd_type) fd;
    self->watches [self->nwatches++] = w;
    w->wsi = lws_adopt_descriptor_vhost (self->vhost, LWS_ADOPT_RAW_FILE_DESC, u,
                                         S_PROTOCOL_NAME, NULL);
    if (!w->wsi) {
        ah_error ("lwsloop", "libwebsockets refused to adopt a ZMQ_FD descriptor");
        //  lws closes the descriptor on a failed adoption only sometimes;
        //  a leaked dup of an eventfd is harmless, a double close is not.
        self->nwatches--;
        free (w);
        return -1;
    }
    lws_set_opaque_user_data (w->wsi, w);
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
            if (!w->wsi || self->destroying)
                continue;
            //  Close the dup now: nobody asks ZMQ_EVENTS for a dead watch,
            //  so its eventfd could stay readable and make poll() spin.
            //  Inside that wsi's own callback lws forbids a synchronous
            //  close: stop polling it and let lws close it afterwards.
            if (w->wsi == self->in_wsi) {
                lws_rx_flow_control (w->wsi, 0);
                lws_set_timeout (w->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
            }
            else
                lws_set_timeout (w->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_SYNC);
        }
    }
}

int ah_lwsloop_run (ah_lwsloop_t *self)
{
    self->stopped = false;
    while (!self->stopped) {
        self->rounds++;
        s_sweep (self, false);
        bool more = s_drain_all (self);
        if (self->stopped)
            break;
        //  -1: do not sleep in poll (messages are waiting); 0: sleep until
        //  an fd (ours included) or an lws timer wakes us.
        if (lws_service (self->context, more ? -1 : 0) < 0) {
            ah_error ("lwsloop", "lws_service failed");
            return -1;
        }
    }
    return 0;
}

void ah_lwsloop_stop (ah_lwsloop_t *self)
{
    if (!self)
        return;
    self->stopped = true;
    //  If we are in an lws timer, poll() comes next: make it return.
    if (self->context && !self->destroying)
        lws_cancel_service (self->context);
}

static void s_timer_fired (lws_sorted_usec_list_t *sul)
{
    ah_lwsloop_timer_t *timer = lws_container_of (sul, ah_lwsloop_timer_t, sul);
    ah_lwsloop_t *loop = timer->loop;       //  fn may free the timer
    timer->fn (timer, timer->arg);
    //  lws sleeps in poll() right after its timers: wake it so the drain
    //  runs (the callback may have sent on a zsock).
    if (loop->context && !loop->destroying)
        lws_cancel_service (loop->context);
}

void ah_lwsloop_timer_set (ah_lwsloop_t *self, ah_lwsloop_timer_t *timer, int64_t delay_ms,
                           ah_lwsloop_timer_fn *fn, void *arg)
{
    timer->loop = self;
    timer->fn = fn;
    timer->arg = arg;
    if (delay_ms < 0)
        delay_ms = 0;
    lws_sul_schedule (self->context, 0, &timer->sul, s_timer_fired,
                      (lws_usec_t) delay_ms * LWS_US_PER_MS);
}

void ah_lwsloop_timer_cancel (ah_lwsloop_timer_t *timer)
{
    if (timer && timer->loop)
        lws_sul_cancel (&timer->sul);
}
