/*  common/lwsloop.h: one thread runs a libwebsockets context and ZeroMQ
    sockets together, so an actor that speaks WebSocket (tunnel, api)
    owns its zsocks (bus DEALER, actor pipe) and its lws objects in the
    same thread and nothing crosses threads.

    DESIGN. The thread runs a libev loop (epoll) and lws sits on it as a
    foreign loop (LWS_SERVER_OPTION_LIBEV: Debian's lws 4.1.6 loads its
    libev support from the libwebsockets-evlib_ev.so plugin). lws's own
    poll() loop scanned every socket on every wakeup, which at a thousand
    idle sandboxd connections cost more than the idle work itself; epoll
    costs only what is ready.
    Each watched zsock's ZMQ_FD (an eventfd owned by zmq) gets an ev_io.
    ZMQ_FD is edge-like: it only says "zmq has commands to process", and
    any zmq call on the socket (a send from a callback included) may
    consume that signal while messages wait. So readiness is always
    decided by ZMQ_EVENTS, never by the descriptor: when the descriptor
    fires, and again in an ev_prepare watcher (libev runs it right before
    it would sleep, after every round of callbacks: lws's, timers', ours)
    for each socket that was used since it was last found empty (its
    descriptor fired, its own callback received, or the owner said it
    sent on it: ah_lwsloop_touch; asking ZMQ_EVENTS costs two system
    calls, and a round that asked every socket cost more than the
    round's own work), each such socket is drained while ZMQ_EVENTS says
    POLLIN, at most
    AH_LWSLOOP_BATCH messages per socket per round; if one still has
    messages an ev_idle watcher keeps libev from sleeping, so lws
    connections are served between batches and the drain goes on next
    round.
    Timers are ev_timers: they fire in libev's round and the prepare
    watcher drains after them, so a timer may send on a zsock or stop
    the loop freely.
    lws re-arms its own timers (lws_sul: timeouts, rx flow) only after
    one of its own callbacks; when ours ran (a zsock message or a timer,
    which may have called lws_set_timeout or lws_rx_flow_control), the
    prepare watcher calls lws_cancel_service once so that lws takes a
    turn and looks.

    A second loop may live beside the first (ah_lwsloop_new_beside): its
    own lws context, zsocks and timers, on the first's libev loop, so
    two actors' lws connections are served by one thread (the api and
    the tunnel, common/actor.h "guests"). It is never run itself: the
    first's ah_lwsloop_run serves both. Destroy it before the first.

    Only the thread that calls ah_lwsloop_run may call anything here
    (including ah_lwsloop_new/destroy: create the loop in that thread).

    info->user is kept for you (ah_lwsloop_user): the context's
    own user pointer is the loop (ah_lwsloop_from_wsi). The default vhost
    (info->vhost_name, or "default") must exist: do not set
    LWS_SERVER_OPTION_EXPLICIT_VHOSTS.                                  */
#ifndef AH_LWSLOOP_H
#define AH_LWSLOOP_H

#include <czmq.h>
#include <libwebsockets.h>
#include <ev.h>

#define AH_LWSLOOP_BATCH 64

typedef struct ah_lwsloop_t ah_lwsloop_t;

//  Called while the socket has a message: receive exactly one message
//  (receiving none makes the loop call again at once, up to the batch).
typedef void (ah_lwsloop_fn) (ah_lwsloop_t *loop, zsock_t *sock, void *arg);

//  Create the lws context from a copy of info (info itself is not
//  changed and need not outlive the call; the protocols array and the
//  strings it points to must outlive the loop, as for lws). NULL on
//  failure, logged.
ah_lwsloop_t *ah_lwsloop_new (const struct lws_context_creation_info *info);
//  The same, beside another loop of this thread (see DESIGN): its own
//  context on beside's libev loop. ah_lwsloop_run on it fails (-1);
//  ah_lwsloop_stop only ends its zsock callbacks.
ah_lwsloop_t *ah_lwsloop_new_beside (ah_lwsloop_t *beside, const struct lws_context_creation_info *info);
//  Destroys the lws context (closing its connections: their CLOSED
//  callbacks run here), then the loop. Watched zsocks stay the caller's.
void ah_lwsloop_destroy (ah_lwsloop_t **self_p);

struct lws_context *ah_lwsloop_context (ah_lwsloop_t *self);
struct lws_vhost *ah_lwsloop_vhost (ah_lwsloop_t *self);
void *ah_lwsloop_user (ah_lwsloop_t *self);          //  info->user
//  The libev loop under lws: a watcher of the caller's own on it (an fd
//  it reads itself) runs in this loop's thread, between lws's events.
struct ev_loop *ah_lwsloop_ev (ah_lwsloop_t *self);
ah_lwsloop_t *ah_lwsloop_from_wsi (struct lws *wsi);
//  The listening port of the default vhost (useful with info->port = 0:
//  the OS picks). -1 if none.
int ah_lwsloop_port (ah_lwsloop_t *self);

//  A listening vhost on the unix socket path (a stale socket there is
//  replaced; the socket is made mode 0666: what guards it is the
//  directory it sits in and the protocol's own authentication). lws
//  serves HTTP and WebSocket on protocols. NULL with *err on failure.
struct lws_vhost *ah_lwsloop_listen_unix (ah_lwsloop_t *self, const char *name, const char *path,
                                          const struct lws_protocols *protocols, uint64_t options,
                                          char **err);

//  A listening vhost of its own: host exactly as given ("" = every
//  address, IPv4 and IPv6; an IPv4 literal binds IPv4 only, an IPv6
//  literal IPv6 only), port (0: the OS picks; lws_get_vhost_listen_port
//  says which). raw_protocol non-NULL: connections are raw sockets bound
//  to that protocol (the caller speaks HTTP itself); NULL: lws serves
//  HTTP and WebSocket on protocols. NULL with *err on failure.
//  tls_cert and tls_key (PEM files, both or neither): the listener
//  speaks TLS (the context must have been made with
//  LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT).
//  options: more vhost options (LWS_SERVER_OPTION_*), or 0.
struct lws_vhost *ah_lwsloop_listen (ah_lwsloop_t *self, const char *name, const char *host, int port,
                                     const struct lws_protocols *protocols, const char *raw_protocol,
                                     const char *tls_cert, const char *tls_key, uint64_t options,
                                     char **err);

//  Call fn (loop, sock, arg) whenever sock has a message. 0 / -1.
//  Watching a socket twice replaces the first watch.
int  ah_lwsloop_watch (ah_lwsloop_t *self, zsock_t *sock, ah_lwsloop_fn *fn, void *arg);
//  Say that this thread sent on (or otherwise used) a watched sock
//  outside its fn: it is asked for messages before the loop sleeps (a
//  send may take in the signal of a message that arrived).
void ah_lwsloop_touch (ah_lwsloop_t *self, zsock_t *sock);
//  Stop watching (safe from inside fn). Do this before destroying sock.
void ah_lwsloop_unwatch (ah_lwsloop_t *self, zsock_t *sock);

//  A one-shot timer on the loop's thread. Embed the struct in your own
//  (lws_container_of / arg); set again to re-arm or move it.
typedef struct ah_lwsloop_timer_t ah_lwsloop_timer_t;
//  fn may free the memory holding the timer, or set it again.
typedef void (ah_lwsloop_timer_fn) (ah_lwsloop_timer_t *timer, void *arg);
struct ah_lwsloop_timer_t {
    ev_timer ev;
    ah_lwsloop_t *loop;             //  NULL: never set
    ah_lwsloop_timer_fn *fn;
    void *arg;
};
void ah_lwsloop_timer_set (ah_lwsloop_t *self, ah_lwsloop_timer_t *timer, int64_t delay_ms,
                           ah_lwsloop_timer_fn *fn, void *arg);
//  Safe on a timer never set (zeroed) or already fired.
void ah_lwsloop_timer_cancel (ah_lwsloop_timer_t *timer);

//  A descriptor of the caller's own watched on the loop's thread (a
//  socket the actor reads and writes itself, such as an egress
//  connection's upstream, actors/tunnel_egress_relay.c): fn (io,
//  revents, arg) when it is ready for what events asks (EV_READ,
//  EV_WRITE, or both). Embed the struct in your own. set again to
//  change the events (0: watch nothing for now); the descriptor stays
//  the caller's.
typedef struct ah_lwsloop_io_t ah_lwsloop_io_t;
//  fn may free the memory holding the watcher (after cancelling it), or
//  set it again.
typedef void (ah_lwsloop_io_fn) (ah_lwsloop_io_t *io, int revents, void *arg);
struct ah_lwsloop_io_t {
    ev_io ev;
    ah_lwsloop_t *loop;             //  NULL: never set
    ah_lwsloop_io_fn *fn;
    void *arg;
};
void ah_lwsloop_io_set (ah_lwsloop_t *self, ah_lwsloop_io_t *io, int fd, int events,
                        ah_lwsloop_io_fn *fn, void *arg);
//  Safe on a watcher never set (zeroed) or already cancelled.
void ah_lwsloop_io_cancel (ah_lwsloop_io_t *io);

//  Serve until ah_lwsloop_stop. 0, or -1 if lws_service failed.
int  ah_lwsloop_run (ah_lwsloop_t *self);
//  Make ah_lwsloop_run return after the current round of callbacks
//  (from inside the loop); no zsock callback runs after this one.
void ah_lwsloop_stop (ah_lwsloop_t *self);
//  How many times the loop went round (tests: an idle loop must sleep).
uint64_t ah_lwsloop_rounds (ah_lwsloop_t *self);

#endif
