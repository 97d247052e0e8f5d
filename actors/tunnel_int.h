/*  actors/tunnel_int.h: what the files of the tunnel actor share.
    Internal to the actor: everything here runs on its one thread, the
    lws service thread (common/actor.h in lws mode).

      tunnel.c        the actor: state, start and stop, the bus side
                      (CHAN_* from openers, TUNNEL_KICK, SANDBOX_STATE)
      tunnel_conn.c   connections: the WebSocket protocol, authentication,
                      yamux sessions, ping, hello and stats
      tunnel_chan.c   channels: one yamux stream each, reply headers, flow
                      control between the opener and the stream
      tunnel_egress.c the egress streams sandboxd opens: the request
                      checked, decided (lua/egress.lua), answered, recorded
      tunnel_egress_relay.c  an allowed egress connection: resolved,
                      checked and connected in a worker, then its bytes
                      both ways between the stream and the socket
      tunnel_egress_tls.c    a connection to a host with a tenant's
                      secret: TLS terminated both ways on memory BIOs,
                      the header added to each request (docs/egress.md
                      "Secrets")

    DESIGN. conn_t: one authenticated WebSocket (lws per-session data
    points at it). It owns its yamux session, the bytes yamux gave us to
    send (outq, written one message per WRITEABLE; and frames built in
    place in an opener's own block, queued in order among outq's bytes,
    written whole) and a map stream id ->
    chan_t. self->agents maps agent id -> the agent's current conn. A conn
    that is being closed (kick, replaced, ping timeout, bad hello) is
    "dead" at once: out of self->agents, its channels failed and freed,
    its yamux callbacks ignored; lws frees it in CLOSED.

    chan_t: one yamux stream. External channels belong to the actor that
    sent CHAN_OPEN (opener, a bus name); internal ones (hello, stats) are
    handled here. self->chans maps the server-wide channel id -> chan_t.
    Flow control: bytes from sandboxd are passed on at once as CHAN_DATA
    and given back to yamux (ah_yamux_consumed) only when the opener ACKs
    them, so yamux's 256 KiB window stops sandboxd when the opener is slow.
    Bytes from the opener go to ah_yamux_write; what the window does not
    take waits in chan->pending (bounded by the opener's credit) and is
    ACKed to the opener when yamux takes it.

    Egress (tunnel_egress_relay.c): an allowed connection's resolution
    (an address literal: parsed), address check and connect run in the
    actor's workers (ah_actor_job): the job owns
    copies of what it needs and reads nothing else of the actor's but
    egress_stop (atomic); its done, back on this thread, finds its
    channel again by id (gone: the socket is closed). So does the read
    of a tenant's lists and secrets that the cache misses (tunnel_egress.c
    "The cache"): its job owns a copy of the tenant's name and a SQLite
    connection handed over with it; the requests wait on this thread,
    parked, until its done. The connected
    socket is then watched on this loop (ah_lwsloop_io_t) and relayed
    like a channel whose opener is the socket: the sandbox's bytes are
    given back to yamux's window only once the socket took them, and
    the socket is read only while yamux's window takes what was read.  */
#ifndef AH_TUNNEL_INT_H
#define AH_TUNNEL_INT_H

#include "actors/tunnel.h"
#include "common/lwsloop.h"
#include "common/msg.h"
#include "proto/buf.h"
#include "proto/yamux.h"
#include "store/store.h"

#include <libwebsockets.h>
#include <stdatomic.h>
#include <string.h>

#define AREA            "tunnel"
#define AGENT_ID_MAX    64
#define PENDING_MAX     (2 * AH_TUNNEL_CREDIT)
#define AH_TUN_EGRESS_WORKERS     16    //  the actor's workers (egress connects)
#define AH_TUN_EGRESS_CONNECTING  4     //  one sandbox's connects in them at once
#define AH_TUN_EGRESS_PARKED_TENANT 256 //  requests waiting for one tenant's lists to be read
#define AH_TUN_EGRESS_PARKED      1024  //  ... for any tenant's, in all

typedef struct self_t self_t;
typedef struct conn_t conn_t;
typedef struct egress_t egress_t;      //  an egress connection out (tunnel_egress_relay.c)
typedef struct ah_tun_parked_t ah_tun_parked_t;    //  a request waiting for its tenant's lists (tunnel_egress.c)

//  One tenant's egress since the actor started, for GET /metrics
//  (TUNNEL_SESSIONS' "egress", docs/egress.md "Metrics"). Kept until
//  the actor ends (self->egress_counts), so an egress_t may point at it.
typedef struct {
    uint64_t allowed;               //  connected
    uint64_t denied;                //  refused: the rule, the cap, a malformed request, the address check
    uint64_t failed;                //  let through, then not connected (no name, refused, timeout, gone)
    uint64_t bytes_out, bytes_in;   //  to the upstream, from it, as they pass
} ah_tun_egress_counts_t;

//  A tenant's egress as the tunnel holds it (tunnel_egress.c, "The
//  cache"): its allow and deny lists and its secrets' rows, the values
//  sealed as SQLite holds them (opened only in a worker). Read (by a
//  worker) at the first request of the tenant's agents, dropped when the API says they
//  changed (EGRESS_CHANGED, docs/messages.md); owned by self->egress_tenants.
typedef struct {
    char *host;                     //  as the API wrote it (proto/egress.h's secret target)
    int port;
    char *header;
    uint8_t *sealed;
    size_t sealed_n;
} ah_tun_secret_t;

typedef struct {
    char **allow, **deny;
    size_t n_allow, n_deny;
    ah_tun_secret_t *secrets;
    size_t n_secrets;
} ah_tun_tenant_t;

//  The states in which a sandbox keeps its tunnel connection: starting,
//  running, and the frozen tier's (its sandboxd paused with it keeps
//  its TCP connection; docs/architecture.md "The tunnel across a freeze").
static inline bool ah_tun_state_keeps (const char *state)
{
    return state && (!strcmp (state, "starting") || !strcmp (state, "running")
                     || !strcmp (state, "freezing") || !strcmp (state, "frozen")
                     || !strcmp (state, "thawing"));
}

typedef enum { CH_EXTERNAL, CH_HELLO, CH_STATS, CH_EGRESS } chan_kind_t;

typedef struct {
    int64_t id;                     //  server-wide channel id
    uint32_t stream;
    conn_t *conn;
    chan_kind_t kind;
    char opener [64];               //  bus name (external)
    int64_t req;                    //  of CHAN_OPEN
    char ch [32];                   //  channel name, for logs
    bool replied;                   //  sandboxd's reply header arrived
    ah_buf_t rbuf;                  //  reply header being gathered
    ah_buf_t pending;               //  opener bytes yamux has not taken yet
    bool eof_pending;               //  opener sent CHAN_EOF while pending
    size_t unacked;                 //  bytes passed to the opener, not yet ACKed
    int open_timer;                 //  reply deadline; 0 once replied
    int pipe_fd;                    //  the opener's pipe (CHAN_DATA "pipe_fd"), owned; -1 none
    size_t pipe_bytes;              //  in it, not yet framed (they go after pending)
    egress_t *egress;               //  CH_EGRESS once allowed: its connection out (owned)
    ah_tun_parked_t *parked;        //  CH_EGRESS waiting for its tenant's lists (its fill's)
} chan_t;

//  A data frame whose payload an opener's CHAN_DATA owned (its bin, with
//  AH_MSG_BIN_HEADROOM in front): yamux's header is put in front of the
//  payload and lws's in front of that, and it is written in place.
typedef struct out_frame_t {
    struct out_frame_t *next;
    uint8_t *block;                 //  the payload (ah_msg_bin_free)
    uint8_t *data;                  //  the frame: yamux's header, then the payload
    size_t size;
    size_t before;                  //  outq bytes that go out before it
} out_frame_t;

struct conn_t {
    self_t *self;
    struct lws *wsi;                //  NULL once lws closed it
    char agent_id [AGENT_ID_MAX];
    ah_yamux_t *yamux;
    ah_buf_t outq;                  //  with LWS_PRE headroom: written in place
    out_frame_t *frames, *frames_tail;  //  owned frames, in order among outq's bytes
    size_t frames_bytes;
    size_t outq_since;              //  outq bytes queued after the last frame
    uint8_t *offer;                 //  a payload yamux may frame in place (ah_tun_conn_offer)
    size_t offer_size;
    zhashx_t *streams;              //  "stream id" -> chan_t (not owned)
    bool ready;                     //  hello succeeded
    bool reader;                    //  a reader of a sleeping agent's home (reader token):
                                    //  in self->readers, never self->agents; reads only
    bool dead;                      //  being closed; ignore everything
    bool rx_paused;
    size_t msg_bytes;               //  of the WebSocket message being received
    int64_t last_heard_ms;          //  sandboxd's last pong or ping (liveness)
    bool frozen;                    //  its sandbox is freezing or frozen (lifecycle's SANDBOX_STATE):
                                    //  no pings, no stats, no liveness timeout (docs/architecture.md)
    uint32_t ping_seq;
    bool flush_queued;              //  on self->flush: written at the turn's end
    conn_t *flush_next;
    //  A data frame spliced from a channel's pipe (ah_tun_conn_splice):
    //  its header, then splice_left bytes of splice_fd (a dup of the
    //  pipe), written ahead of everything queued after it.
    int splice_fd;                  //  -1: none in progress
    size_t splice_left;
    uint8_t splice_head [14 + AH_YAMUX_HEADER_SIZE];
    size_t splice_head_size, splice_head_sent;
    int64_t splice_chan;            //  ACKed its splice_frame bytes once it is out
    size_t splice_frame;
    bool splice_wait;               //  a channel's pipe waits for the queue to drain
    bool splice_broken;             //  a spliced write failed: closing, nothing more goes
    int egress_open;                //  egress connections allowed and not ended (the cap)
    egress_t *egress_wait, *egress_wait_tail;   //  allowed, waiting for a worker (their turn)
};

struct self_t {
    ah_actor_t *actor;
    ah_store_t *store;
    ah_lwsloop_t *loop;
    struct lws_vhost *vhost;               //  the listener (sandbox.tunnel_listen)
    struct lws_vhost *unix_vhost;          //  the listener on the unix socket (sandbox.tunnel_socket)
    char *socket_path;                     //  its path, removed at the end
    int ping_interval_ms, ping_timeout_ms, open_timeout_ms, stats_interval_ms;
    int ping_tick, stats_tick;             //  one timer each for every connection (0: not yet)
    zhashx_t *agents;               //  agent id -> conn_t (not owned)
    zhashx_t *readers;              //  agent id -> its reader's conn_t (not owned)
    zhashx_t *reader_hashes;        //  agent id -> the reader token's hash (READER_ALLOW; owned)
    zhashx_t *chans;                //  "chan id" -> chan_t (owned, freed by ah_tun_chan_free)
    int64_t next_chan;
    bool terminating;
    zlistx_t *waiters;              //  CHAN_OPENs waiting for their agent's connection (tunnel.c)
    int connect_wait_ms;            //  how long one waits at most
    conn_t *flush;                  //  connections whose outq is written at the turn's end
    //  Egress (tunnel_egress.c): the rule and the catalog's lists; NULL
    //  when they could not be loaded (every request refused, saying so).
    struct ah_policy_t *egress_rule;       //  lua/egress.lua
    struct ah_catalog_t *catalog;          //  catalog.path, read at start
    char *egress_broken;                   //  why one of them is missing
    int egress_max;                        //  sandbox.egress_max_connections
    int egress_connect_ms;                 //  sandbox.egress_connect_timeout
    atomic_bool egress_stop;               //  the actor ends: workers give up their connects
    zhashx_t *egress_jobs;                 //  agent id -> its connects in the workers now (intptr_t)
    egress_t *egress_draining;             //  ended cleanly, the upstream still taking the last bytes
    zhashx_t *egress_counts;               //  tenant -> ah_tun_egress_counts_t (owned)
    zhashx_t *egress_tenants;              //  tenant -> ah_tun_tenant_t (owned): the cache
    zhashx_t *egress_fills;                //  tenant -> its fill in a worker (owned, tunnel_egress.c)
    size_t egress_parked;                  //  requests parked on them, in all
    ah_store_t *egress_fill_store;         //  the read-only connection kept between fills
    bool egress_fill_store_out;            //  ... out in a job now
    char *db_path;                         //  the database file (a fill's own connection)
    ah_tunnel_fill_hook_fn *egress_fill_hook;  //  tests only (ah_tunnel_args_t)
    void *egress_fill_hook_arg;
    //  Secrets (tunnel_egress_tls.c, docs/egress.md "Secrets"): the
    //  installation's CA (its PEM goes to every sandboxd in hello), the
    //  leaves minted for hosts, the secrets key's path. NULL CA: no
    //  secret is injected (a connection to such a host is refused, saying so).
    struct ah_egress_ca_t *egress_ca;
    char *egress_ca_why;                   //  why there is none
    char *secrets_key_path;                //  <data_dir>/secrets.key
    struct ssl_ctx_st *egress_upstream_ctx;    //  TLS to the real hosts (verifying)
    struct ssl_ctx_st *egress_server_ctx;      //  TLS toward the sandboxes (a leaf per host)
    zhashx_t *egress_leaves;               //  "host" -> leaf_t (owned)
};

//  The actor (tunnel.c)
//  The sandbox's state ("" when the row has no state), and the boot
//  token's hash when hash != NULL; NULL when there is no such sandbox.
char *ah_tun_sandbox_state (self_t *self, const char *agent_id, char **hash);

//  agent_id's sandboxd said hello, or its sandbox left starting and
//  running: the CHAN_OPENs waiting for it are opened (or answered) now.
void ah_tun_waiters_run (self_t *self, const char *agent_id);

//  The channels a reader connection may carry (docs/tunnel.md, "Readers").
bool ah_tun_reader_channel (const char *ch);

//  Connections (tunnel_conn.c)
extern const struct lws_protocols ah_tun_protocols [];

//  ah_yamux_write of a payload the caller owns (ah_msg_bin_take): when
//  yamux frames it whole, the frame is queued in place, the block becomes
//  the queue's and *block_p NULL; else yamux copied what it took and the
//  block stays the caller's.
ssize_t ah_tun_conn_write_owned (conn_t *conn, uint32_t stream, uint8_t **block_p, size_t size);
//  Frames what chan's pipe holds (within its stream's window, one frame
//  at most): the header and the payload go straight to the socket, the
//  payload spliced from the pipe, never through our memory, ahead of
//  anything queued after it; chan is ACKed when it is out. The bytes
//  framed, 0 when not now (the window is shut, or output is queued ahead
//  of it: the channel is flushed again when that changes), -1 if the
//  stream or the connection cannot take it (over TLS: never, the api
//  splices no upload when the server has TLS, tunnel.c refuses pipes there).
ssize_t ah_tun_conn_splice (conn_t *conn, chan_t *chan);
//  Close conn now: out of the agent map, channels failed with why; lws
//  closes the socket (after flushing a go away when graceful).
//  lost: tell lifecycle (TUNNEL_LOST) unless we are shutting down.
void ah_tun_conn_close (conn_t *conn, const char *why, bool lost, bool fatal, bool graceful);
//  The actor's flush (ah_actor_def_t): write what the turn queued on
//  each connection, straight from the turn when lws holds nothing of it.
void ah_tun_conns_flush (void *self);

//  Channels (tunnel_chan.c)
chan_t *ah_tun_chan_find (self_t *self, int64_t id);
//  Open a stream on conn, send the header, FIN if fin. NULL with *why.
chan_t *ah_tun_chan_open (conn_t *conn, chan_kind_t kind, const ah_msg_t *header,
                          bool fin, const char **why);
//  A stream sandboxd opened (an egress connection, docs/egress.md): its
//  header is awaited like a reply, within the open timeout. NULL: reset.
chan_t *ah_tun_chan_accept (conn_t *conn, uint32_t stream, chan_kind_t kind);
//  An egress stream's header is whole (tunnel_egress.c): decided (once
//  its tenant's lists are in memory: until then parked, chan->parked); a
//  refusal answered, recorded and the channel forgotten, an allowed
//  one handed to ah_tun_egress_start (answered when it connected).
//  early: bytes that came after the header (not yet consumed).
void ah_tun_egress (self_t *self, chan_t *chan, const ah_msg_t *req, const uint8_t *early,
                    size_t early_size);
//  At the actor's start and end: the rule and the catalog (tunnel_egress.c).
void ah_tun_egress_init (self_t *self, const ah_config_t *config);
void ah_tun_egress_destroy (self_t *self);
//  EGRESS_CHANGED: tenant's cached lists and secrets are dropped (read
//  again at its next request; a fill of them in flight is read again).
void ah_tun_egress_forget (self_t *self, const char *tenant);
//  A parked request's channel (chan->parked): its bytes and FIN kept
//  until it is decided; its end (from ah_tun_chan_free and _fail: freed,
//  recorded with error, NULL: the sandbox closed the stream).
void ah_tun_egress_parked_data (self_t *self, chan_t *chan, const uint8_t *data, size_t size);
void ah_tun_egress_parked_eof (self_t *self, chan_t *chan);
void ah_tun_egress_unpark (self_t *self, chan_t *chan, const char *error);
//  tenant's secret for host:port, NULL: none.
const ah_tun_secret_t *ah_tun_tenant_secret (const ah_tun_tenant_t *t, const char *host, int port);
//  tenant's counts (created at its first use); NULL out of memory or
//  for no tenant.
ah_tun_egress_counts_t *ah_tun_egress_counts (self_t *self, const char *tenant);
//  An egress attempt on the record (OP_RECORD, docs/messages.md): kind
//  "egress" or "egress.end"; bytes < 0: none.
void ah_tun_egress_record (self_t *self, const char *agent_id, const char *kind, const char *detail,
                           bool ok, const char *error, int64_t bytes);
//  The answer on an egress stream: {"ok": true, "address"} (error NULL),
//  or {"ok": false, "code", "error"} then FIN. 0, or -1 (the stream
//  could not take it: reset).
int  ah_tun_egress_answer (conn_t *conn, chan_t *chan, const char *code, const char *error,
                           const char *address);

//  Connections out (tunnel_egress_relay.c). An allowed request: the
//  channel's connection is made in a worker (host, port; open: the
//  entries that name addresses the check would refuse, deny: those
//  that refuse what the name resolves to; copied), early: bytes that
//  came after the request (copied). 0, or -1 with why (nothing started).
typedef struct {
    const char *host;
    int port;
    bool literal;
    const char *detail;             //  "host:port (kind)", for the audit
    const char *why;                //  the rule's sentence
    const char *const *open;
    size_t n_open;
    const char *const *deny;
    size_t n_deny;
    ah_tun_egress_counts_t *counts; //  the agent's tenant's (NULL: not counted)
    const char *tenant;             //  the agent's tenant
    const ah_tun_secret_t *secret;  //  its secret for host:port on a CONNECT (NULL: carried untouched)
} ah_tun_egress_req_t;
int  ah_tun_egress_start (self_t *self, chan_t *chan, const ah_tun_egress_req_t *req,
                          const uint8_t *early, size_t early_size, char *why, size_t why_size);
//  The channel ends (from ah_tun_chan_free): the socket closed, the end
//  recorded with error (NULL: a clean end).
void ah_tun_egress_end (self_t *self, chan_t *chan, const char *error);
//  The actor ends (before its loop): connections still draining are closed.
void ah_tun_egress_drains_end (self_t *self);
//  yamux's events on an egress channel past its request.
void ah_tun_egress_data (self_t *self, chan_t *chan, const uint8_t *data, size_t size);
void ah_tun_egress_eof (self_t *self, chan_t *chan);
void ah_tun_egress_writable (self_t *self, chan_t *chan);
//  Secrets (tunnel_egress_tls.c, docs/egress.md "Secrets").
typedef struct ah_tun_tls_job_t ah_tun_tls_job_t;  //  what a worker does for a terminated connection
typedef struct ah_tun_tls_t ah_tun_tls_t;          //  a terminated connection's two TLS sides and injector
//  At the actor's start and end: the CA, the TLS contexts, the leaves.
void ah_tun_egress_tls_init (self_t *self, const ah_config_t *config);
void ah_tun_egress_tls_destroy (self_t *self);
//  The actor's thread: what a worker needs to use tenant's secret for
//  host:port (the cache's row, copied) into *job. -1 with why: it cannot
//  be used.
int  ah_tun_tls_prepare (self_t *self, const char *tenant, const ah_tun_secret_t *secret, const char *host,
                         int port, bool literal, ah_tun_tls_job_t **job, char *why, size_t why_size);
//  The bytes the worker's handshake with the upstream sent and received.
void ah_tun_tls_job_bytes (const ah_tun_tls_job_t *job, uint64_t *sent, uint64_t *received);
void ah_tun_tls_job_free (ah_tun_tls_job_t **job_p);
//  A worker, once connected on fd: the value opened, the upstream's TLS
//  made and verified within deadline. 0, or -1 with error.
int  ah_tun_tls_work (ah_tun_tls_job_t *job, int fd, int64_t deadline, atomic_bool *stop,
                      char *error, size_t error_size);
//  The actor's thread, the job back: the terminated connection. NULL with why.
ah_tun_tls_t *ah_tun_tls_take (self_t *self, ah_tun_tls_job_t *job, const char **why);
void ah_tun_tls_free (ah_tun_tls_t **t_p);
//  Ciphertext from one side: what goes to each side appended. 0, or -1
//  with why (the connection ends).
int  ah_tun_tls_from_sandbox (ah_tun_tls_t *t, const uint8_t *in, size_t n, ah_buf_t *to_sandbox,
                              ah_buf_t *to_upstream, char *why, size_t why_size);
int  ah_tun_tls_from_upstream (ah_tun_tls_t *t, const uint8_t *in, size_t n, ah_buf_t *to_sandbox,
                               ah_buf_t *to_upstream, char *why, size_t why_size);
//  close_notify toward one side, appended to out (once).
void ah_tun_tls_close (ah_tun_tls_t *t, bool toward_sandbox, ah_buf_t *out);
//  The sandbox's handshake is done (the upstream may be read).
bool ah_tun_tls_ready (const ah_tun_tls_t *t);
const char *ah_tun_tls_header (const ah_tun_tls_t *t);
uint64_t ah_tun_tls_requests (const ah_tun_tls_t *t);
//  Forget a channel (no message, no yamux call).
void ah_tun_chan_free (self_t *self, chan_t *chan);
//  The channel failed: tell its opener (REPLY if CHAN_OPEN is still
//  unanswered, else CHAN_CLOSE), then forget it. status for the REPLY.
void ah_tun_chan_fail (self_t *self, chan_t *chan, int status, const char *error);
//  ah_tun_chan_fail, then reset its stream.
void ah_tun_chan_abort (self_t *self, chan_t *chan, int status, const char *error);
//  Push the opener's pending bytes into yamux; ACK what it took.
//  CHAN_ACK of bytes yamux took from the opener (external channels).
void ah_tun_chan_ack (self_t *self, chan_t *chan, size_t bytes);
void ah_tun_chan_flush (self_t *self, chan_t *chan);
//  sandboxd's reply header on an internal channel (tunnel_conn.c).
void ah_tun_hello_reply (self_t *self, chan_t *chan, ah_msg_t *reply);
//  sandboxd's hello reply judged for an agent_id authenticated with a
//  reader token or not: 0, or -1 with why (what the log and close say).
//  Pure, for the fuzz target (tests/fuzz/fuzz_hello.c).
int ah_tun_hello_verdict (const ah_msg_t *reply, const char *agent_id, bool reader,
                          char *why, size_t why_size);
void ah_tun_stats_reply (self_t *self, chan_t *chan, ah_msg_t *reply);
//  yamux callbacks for a conn's streams (ud = conn).
void ah_tun_ymx_on_data (void *ud, uint32_t id, const uint8_t *data, size_t size);
void ah_tun_ymx_on_eof (void *ud, uint32_t id);
void ah_tun_ymx_on_closed (void *ud, uint32_t id, bool reset);
void ah_tun_ymx_on_writable (void *ud, uint32_t id);

#endif
