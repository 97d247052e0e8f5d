/*  actors/tunnel.c: the tunnel actor (see tunnel.h, docs/tunnel.md and
    the tunnel section of docs/messages.md); its parts and their design
    are in tunnel_int.h.

    DESIGN. One thread, this actor's, owns everything: the lws context
    and every wsi, the bus DEALER, the SQLite connection, every yamux
    session and every channel. The actor runs on a common/lwsloop (lws
    mode of common/actor.h), so lws callbacks, timers and bus messages
    take turns on this thread and nothing is locked. This file is the
    bus side: what openers and lifecycle send.                          */
#include "actors/tunnel_int.h"
#include "common/log.h"
#include "common/token.h"

#include <errno.h>
#include <msgpack.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *ah_tun_sandbox_state (self_t *self, const char *agent_id, char **hash)
{
    if (hash)
        *hash = NULL;
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT state, boot_token_hash FROM sandboxes WHERE agent_id = :id");
    if (!st || ah_store_bind_text (st, ":id", agent_id))
        return NULL;
    char *state = NULL;
    if (ah_store_step (self->store, st) == SQLITE_ROW) {
        const char *s = (const char *) sqlite3_column_text (st, 0);
        const char *h = (const char *) sqlite3_column_text (st, 1);
        state = strdup (s ? s : "");
        if (hash && h)
            *hash = strdup (h);
    }
    sqlite3_reset (st);
    return state;
}

bool ah_tun_reader_channel (const char *ch)
{
    return ch && (streq (ch, "fs.list") || streq (ch, "fs.read") || streq (ch, "fs.tree")
                  || streq (ch, "ping"));
}

//  ---------------------------------------------------------------------
//  Bus messages

static void s_close_agent (self_t *self, const char *agent_id, const char *why)
{
    conn_t *conn = agent_id ? (conn_t *) zhashx_lookup (self->agents, agent_id) : NULL;
    if (conn) {
        ah_info (AREA, "agent '%s': closing the tunnel (%s)", agent_id, why);
        ah_tun_conn_close (conn, "sandbox connection closed (sandbox stopping)", false, false, true);
    }
}

static void s_on_kick (void *self, ah_msg_t *msg)
{
    s_close_agent (self, ah_msg_str (msg, "agent_id"), "kicked by lifecycle");
}

static void s_on_state (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *state = ah_msg_str (msg, "state");
    const char *agent_id = ah_msg_str (msg, "agent_id");
    //  The frozen tier: its sandboxd is paused with the sandbox and keeps
    //  its connection. No pings, stats nor liveness timeout while it is
    //  freezing or frozen; from the thaw on it has a whole ping timeout
    //  again, counted from then (docs/architecture.md).
    conn_t *conn = agent_id ? (conn_t *) zhashx_lookup (self->agents, agent_id) : NULL;
    if (conn && state) {
        bool frozen = streq (state, "freezing") || streq (state, "frozen");
        if (conn->frozen && !frozen)
            conn->last_heard_ms = zclock_mono ();
        conn->frozen = frozen;
    }
    //  unreachable: the host agent is away, the sandbox may run on and
    //  keeps its tunnel.
    if (state && !ah_tun_state_keeps (state) && !streq (state, "unreachable")) {
        s_close_agent (self, agent_id, state);
        //  Nothing to wait for any more: their answer now (the state).
        if (agent_id)
            ah_tun_waiters_run (self, agent_id);
    }
}

//  Our events need no answer; a 503 means the receiver is absent.
static void s_on_reply (void *self, ah_msg_t *msg)
{
    if (!ah_msg_bool (msg, "ok", true))
        ah_debug (AREA, "REPLY from '%s': %s", ah_msg_peer (msg),
                  ah_msg_str (msg, "error") ? ah_msg_str (msg, "error") : "?");
}

//  TUNNEL_SESSIONS: the sandboxd connections held now, those whose hello
//  succeeded (sessions) and all (connections), and the channels open on
//  them (every kind, the tunnel's own too), and each tenant's egress
//  counts since the start, for GET /metrics.
static void s_on_sessions (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    int64_t ready = 0, all = 0;
    for (conn_t *c = (conn_t *) zhashx_first (self->agents); c; c = (conn_t *) zhashx_next (self->agents)) {
        all++;
        ready += c->ready;
    }
    ah_msg_t *reply = ah_msg_reply_ok (msg);
    ah_msg_set_int (reply, "status", 200);
    ah_msg_set_int (reply, "sessions", ready);
    ah_msg_set_int (reply, "connections", all);
    ah_msg_set_int (reply, "channels", (int64_t) zhashx_size (self->chans));
    msgpack_sbuffer buf;
    msgpack_sbuffer_init (&buf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &buf, msgpack_sbuffer_write);
    size_t n = self->egress_counts ? zhashx_size (self->egress_counts) : 0;
    msgpack_pack_array (&pk, (uint32_t) n);
    for (ah_tun_egress_counts_t *c = n ? (ah_tun_egress_counts_t *) zhashx_first (self->egress_counts) : NULL;
         c; c = (ah_tun_egress_counts_t *) zhashx_next (self->egress_counts)) {
        const char *tenant = (const char *) zhashx_cursor (self->egress_counts);
        const char *keys [] = { "allowed", "denied", "failed", "bytes_out", "bytes_in" };
        uint64_t values [] = { c->allowed, c->denied, c->failed, c->bytes_out, c->bytes_in };
        msgpack_pack_map (&pk, 6);
        msgpack_pack_str_with_body (&pk, "tenant", 6);
        msgpack_pack_str_with_body (&pk, tenant, strlen (tenant));
        for (size_t k = 0; k < sizeof keys / sizeof keys [0]; k++) {
            msgpack_pack_str_with_body (&pk, keys [k], strlen (keys [k]));
            msgpack_pack_uint64 (&pk, values [k]);
        }
    }
    if (ah_msg_set_raw (reply, "egress", buf.data, buf.size) != 0) {
        ah_msg_destroy (&reply);
        reply = ah_msg_reply_error (msg, 500, "the egress counts could not be encoded");
    }
    msgpack_sbuffer_destroy (&buf);
    ah_actor_reply (self->actor, msg, reply);
}

//  ---------------------------------------------------------------------
//  Opens that wait for a connection. After a server restart (or a lost
//  connection) an agent stays running while its sandboxd redials, which
//  takes a moment: a CHAN_OPEN for it then waits, up to connect_wait_ms,
//  for the connection's hello instead of failing at once. At most
//  WAITERS_MAX wait at a time (beyond: the 409 at once).

#define WAITERS_MAX 4096

typedef struct {
    ah_msg_t *msg;                  //  the CHAN_OPEN (a copy, owned)
    char agent_id [AGENT_ID_MAX];
    int timer;
} waiter_t;

static void s_open (self_t *self, ah_msg_t *msg, bool waited);

static void s_waiter_free (self_t *self, waiter_t *w)
{
    ah_actor_timer_end (self->actor, w->timer);
    ah_msg_destroy (&w->msg);
    free (w);
}

//  Its time is up: open it now (its answer is the 409).
static void s_on_wait_over (void *self_, void *arg)
{
    self_t *self = self_;
    waiter_t *w = arg;
    w->timer = 0;
    void *handle = zlistx_find (self->waiters, w);
    if (handle)
        zlistx_detach (self->waiters, handle);
    s_open (self, w->msg, true);
    s_waiter_free (self, w);
}

//  msg waits for agent_id's connection. 0, or -1 when it cannot.
static int s_wait (self_t *self, ah_msg_t *msg, const char *agent_id)
{
    if (self->connect_wait_ms <= 0 || zlistx_size (self->waiters) >= WAITERS_MAX)
        return -1;
    waiter_t *w = calloc (1, sizeof *w);
    if (!w || !(w->msg = ah_msg_dup (msg))) {
        free (w);
        return -1;
    }
    snprintf (w->agent_id, sizeof w->agent_id, "%s", agent_id);
    w->timer = ah_actor_timer (self->actor, self->connect_wait_ms, 0, s_on_wait_over, w);
    if (w->timer <= 0 || !zlistx_add_end (self->waiters, w)) {
        s_waiter_free (self, w);
        return -1;
    }
    ah_debug (AREA, "agent '%s': a channel waits for its sandboxd to connect", agent_id);
    return 0;
}

void ah_tun_waiters_run (self_t *self, const char *agent_id)
{
    zlistx_t *due = zlistx_new ();
    if (!due)
        return;
    for (waiter_t *w = (waiter_t *) zlistx_first (self->waiters); w; w = (waiter_t *) zlistx_next (self->waiters))
        if (streq (w->agent_id, agent_id)) {
            zlistx_detach_cur (self->waiters);      //  the cursor steps back: next is right
            zlistx_add_end (due, w);
        }
    for (waiter_t *w = (waiter_t *) zlistx_first (due); w; w = (waiter_t *) zlistx_next (due)) {
        s_open (self, w->msg, true);
        s_waiter_free (self, w);
    }
    zlistx_destroy (&due);
}

static void s_on_open (void *self_, ah_msg_t *msg)
{
    s_open (self_, msg, false);
}

//  CHAN_OPEN; waited: it waited for a connection already (no more).
static void s_open (self_t *self, ah_msg_t *msg, bool waited)
{
    const char *agent_id = ah_msg_str (msg, "agent_id");
    size_t raw_size = 0;
    const void *raw = ah_msg_raw (msg, "header", &raw_size);
    if (!agent_id || !raw) {
        ah_actor_reply_error (self->actor, msg, 400, "CHAN_OPEN needs agent_id (str) and header (a map)");
        return;
    }
    char *err = NULL;
    ah_msg_t *header = ah_msg_decode ("", raw, raw_size, &err);
    if (!header || !ah_msg_str (header, "ch")) {
        ah_actor_reply_error (self->actor, msg, 400, "CHAN_OPEN header must be a map with \"ch\" (%s)",
                              err ? err : "no ch");
        free (err);
        ah_msg_destroy (&header);
        return;
    }
    //  "reader": the agent's reader (a sleeping agent's home, read only).
    //  Only reads go there, whoever asks and whatever the reader's Pod
    //  runs; a sandbox's channels never go to a reader.
    bool reader = ah_msg_bool (msg, "reader", false);
    if (reader) {
        conn_t *rc = (conn_t *) zhashx_lookup (self->readers, agent_id);
        const char *ch = ah_msg_str (header, "ch");
        if (!ah_tun_reader_channel (ch))
            ah_actor_reply_error (self->actor, msg, 403, "agent '%s': a reader carries reads only "
                                  "(fs.list, fs.read, fs.tree), not %.32s", agent_id, ch);
        else
        if (!rc || !rc->ready)
            ah_actor_reply_error (self->actor, msg, 409, "agent '%s' has no reader connection%s",
                                  agent_id, rc ? " yet (hello pending)" : "");
        else {
            const char *why = NULL;
            chan_t *chan = ah_tun_chan_open (rc, CH_EXTERNAL, header, false, &why);
            if (!chan)
                ah_actor_reply_error (self->actor, msg, 503, "agent '%s': %s", agent_id, why);
            else {
                snprintf (chan->opener, sizeof chan->opener, "%s", ah_msg_peer (msg));
                chan->req = ah_msg_int (msg, "req", 0);
            }
        }
        ah_msg_destroy (&header);
        return;
    }
    conn_t *conn = (conn_t *) zhashx_lookup (self->agents, agent_id);
    if (!conn || !conn->ready) {
        char *state = ah_tun_sandbox_state (self, agent_id, NULL);
        bool up = ah_tun_state_keeps (state);
        if (up && !waited && s_wait (self, msg, agent_id) == 0)
            ;                       //  answered when it connects, or in connect_wait_ms
        else
        if (up)
            ah_actor_reply_error (self->actor, msg, 409, "agent '%s' is %s but its sandboxd is not "
                                  "connected%s: waited %d ms for it to (re)dial the tunnel (it "
                                  "redials within a second of a server restart; GET the agent: "
                                  "\"connected\" says when it is back)", agent_id, state,
                                  conn ? " (connected, hello pending)" : "", self->connect_wait_ms);
        else
            ah_actor_reply_error (self->actor, msg, 409, "agent '%s' has no sandbox connection (state %s)",
                                  agent_id, state ? state : "unknown: no such agent");
        free (state);
        ah_msg_destroy (&header);
        return;
    }
    const char *why = NULL;
    chan_t *chan = ah_tun_chan_open (conn, CH_EXTERNAL, header, false, &why);
    ah_msg_destroy (&header);
    if (!chan) {
        ah_actor_reply_error (self->actor, msg, 503, "agent '%s': %s", agent_id, why);
        return;
    }
    snprintf (chan->opener, sizeof chan->opener, "%s", ah_msg_peer (msg));
    chan->req = ah_msg_int (msg, "req", 0);
}

//  The channel named by msg, if msg's sender opened it.
static chan_t *s_chan_of (self_t *self, ah_msg_t *msg)
{
    int64_t id = ah_msg_int (msg, "chan", -1);
    chan_t *chan = ah_tun_chan_find (self, id);
    if (chan && chan->kind == CH_EXTERNAL && streq (chan->opener, ah_msg_peer (msg))
        && chan->replied && chan->conn)
        return chan;
    //  Unknown (already closed, never opened, someone else's): a sender
    //  of data must learn the channel is gone.
    if (streq (ah_msg_type (msg), "CHAN_DATA") || streq (ah_msg_type (msg), "CHAN_EOF")) {
        ah_msg_t *m = ah_msg_new ("CHAN_CLOSE");
        ah_msg_set_int (m, "chan", id);
        ah_msg_set_str (m, "error", "no such channel");
        ah_actor_send (self->actor, ah_msg_peer (msg), &m);
    }
    return NULL;
}

//  CHAN_DATA {chan, pipe, pipe_fd}: pipe bytes that the opener spliced
//  into its pipe (the read end handed over once, as pipe_fd, ours from
//  then on), to be framed from there (ah_tun_conn_splice).
static void s_on_pipe (self_t *self, ah_msg_t *msg)
{
    int fd = ah_msg_has (msg, "pipe_fd") ? (int) ah_msg_int (msg, "pipe_fd", -1) : -1;
    chan_t *chan = s_chan_of (self, msg);
    if (chan && fd >= 0 && (chan->pipe_fd < 0 || chan->pipe_fd == fd)) {
        chan->pipe_fd = fd;
        fd = -1;
    }
    if (fd >= 0)
        close (fd);                 //  the channel is gone (or has its pipe)
    if (!chan)
        return;
    int64_t n = ah_msg_int (msg, "pipe", 0);
    if (n <= 0 || n > AH_TUNNEL_DATA_MAX || chan->pipe_fd < 0 || chan->eof_pending
    ||  ah_buf_size (&chan->pending) + chan->pipe_bytes + (size_t) n > PENDING_MAX) {
        ah_warn (AREA, "channel %lld: '%s' sent %lld pipe bytes beyond its credit, after EOF or "
                 "without a pipe; reset", (long long) chan->id, chan->opener, (long long) n);
        ah_tun_chan_abort (self, chan, 0, "channel reset: the opener sent beyond its credit");
        return;
    }
    if (!chan->conn->wsi || lws_is_ssl (chan->conn->wsi)) {
        //  A TLS tunnel comes with a TLS API (server.tls_cert), whose
        //  uploads are never spliced: an opener that pipes here is wrong.
        ah_warn (AREA, "channel %lld: '%s' sent pipe bytes for a connection that cannot splice "
                 "them (TLS); reset", (long long) chan->id, chan->opener);
        ah_tun_chan_abort (self, chan, 0, "channel reset: pipe bytes on a TLS tunnel connection");
        return;
    }
    chan->pipe_bytes += (size_t) n;
    ah_tun_chan_flush (self, chan);
}

static void s_on_data (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    if (ah_msg_has (msg, "pipe")) {
        s_on_pipe (self, msg);
        return;
    }
    chan_t *chan = s_chan_of (self, msg);
    if (!chan)
        return;
    size_t size = 0;
    const void *data = ah_msg_bin (msg, "data", &size);
    if (!data && !ah_msg_has (msg, "data"))
        return;
    if (size > AH_TUNNEL_DATA_MAX || ah_buf_size (&chan->pending) + size > PENDING_MAX
        || chan->eof_pending || chan->pipe_bytes) {
        ah_warn (AREA, "channel %lld: '%s' sent %zu bytes beyond its credit or after EOF; reset",
                 (long long) chan->id, chan->opener, size);
        ah_tun_chan_abort (self, chan, 0, "channel reset: the opener sent beyond its credit");
        return;
    }
    if (!size)
        return;
    //  Nothing waits: yamux takes what its window allows straight from
    //  the message, and only the rest is kept (one copy fewer). Bytes the
    //  message owns (handed over in this thread, with room in front) are
    //  framed where they are when yamux takes them whole: no copy at all.
    int64_t id = chan->id;
    uint8_t *owned = NULL;
    size_t taken = 0;
    if (ah_buf_size (&chan->pending) == 0) {
        size_t owned_size = 0;
        owned = ah_msg_bin_take (msg, "data", &owned_size);
        if (owned)
            data = owned;
        ssize_t n = owned ? ah_tun_conn_write_owned (chan->conn, chan->stream, &owned, size)
                          : ah_yamux_write (chan->conn->yamux, chan->stream, data, size);
        if (n > 0)
            taken = (size_t) n;
        if (!ah_tun_chan_find (self, id)) {
            ah_msg_bin_free (owned);
            return;                 //  the write's callbacks ended the channel
        }
        if (taken)
            ah_tun_chan_ack (self, chan, taken);
    }
    if (taken < size && ah_buf_append (&chan->pending, (const uint8_t *) data + taken, size - taken) == 0)
        ah_tun_chan_flush (self, chan);
    ah_msg_bin_free (owned);        //  NULL when the queue took it
}

static void s_on_ack (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    chan_t *chan = s_chan_of (self, msg);
    if (!chan)
        return;
    int64_t bytes = ah_msg_int (msg, "bytes", 0);
    if (bytes <= 0)
        return;
    if ((size_t) bytes > chan->unacked) {
        ah_warn (AREA, "channel %lld: '%s' acknowledged %lld bytes, only %zu outstanding",
                 (long long) chan->id, chan->opener, (long long) bytes, chan->unacked);
        bytes = (int64_t) chan->unacked;
    }
    chan->unacked -= (size_t) bytes;
    ah_yamux_consumed (chan->conn->yamux, chan->stream, (size_t) bytes);
}

static void s_on_eof (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    chan_t *chan = s_chan_of (self, msg);
    if (!chan)
        return;
    if (ah_buf_size (&chan->pending) || chan->pipe_bytes)
        chan->eof_pending = true;
    else
        ah_yamux_close (chan->conn->yamux, chan->stream);
}

//  The opener is gone: reset the stream, say nothing more.
static void s_on_close (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    chan_t *chan = ah_tun_chan_find (self, ah_msg_int (msg, "chan", -1));
    if (!chan || chan->kind != CH_EXTERNAL || !streq (chan->opener, ah_msg_peer (msg)))
        return;
    conn_t *conn = chan->conn;
    uint32_t stream = chan->stream;
    ah_tun_chan_free (self, chan);
    if (conn && conn->yamux && !conn->dead)
        ah_yamux_reset (conn->yamux, stream);
}

//  EGRESS_CHANGED {tenant}: the API wrote the tenant's egress lists or
//  secrets, or removed the tenant: what the tunnel held of them goes,
//  read again at the tenant's next request (tunnel_egress.c "The cache").
static void s_on_egress_changed (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *tenant = ah_msg_str (msg, "tenant");
    if (!tenant || !*tenant) {
        ah_warn (AREA, "EGRESS_CHANGED without a tenant; ignored");
        return;
    }
    ah_tun_egress_forget (self, tenant);
    ah_debug (AREA, "tenant '%s': egress lists and secrets changed; read again at its next request", tenant);
}

//  READER_ALLOW {agent_id, hash}: the SHA-256 (hex) of the agent's reader
//  token, which the upgrade then accepts as its reader's; READER_REVOKE
//  {agent_id}: no more, and its reader connection goes.
static void s_on_reader_allow (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *agent_id = ah_msg_str (msg, "agent_id");
    const char *hash = ah_msg_str (msg, "hash");
    if (!agent_id || !hash || strlen (hash) != AH_TOKEN_HEX - 1) {
        ah_warn (AREA, "READER_ALLOW without agent_id and a token hash; ignored");
        return;
    }
    zhashx_update (self->reader_hashes, agent_id, strdup (hash));
}

static void s_on_reader_revoke (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *agent_id = ah_msg_str (msg, "agent_id");
    if (!agent_id)
        return;
    zhashx_delete (self->reader_hashes, agent_id);
    conn_t *conn = (conn_t *) zhashx_lookup (self->readers, agent_id);
    if (conn) {
        ah_info (AREA, "agent '%s': closing its reader's connection (revoked)", agent_id);
        ah_tun_conn_close (conn, "the reader was removed", false, false, true);
    }
}

//  PORT: the TCP port we listen on (tunnel_listen "127.0.0.1:0" lets the
//  OS pick), 0 when there is no TCP listener.
static void s_cmd_port (void *self_, zmsg_t *cmd)
{
    self_t *self = self_;
    zstr_sendf (ah_actor_pipe (self->actor), "%d", self->vhost ? lws_get_vhost_listen_port (self->vhost) : 0);
}

//  ---------------------------------------------------------------------
//  The actor

static void s_destroy (void *self_)
{
    self_t *self = self_;
    self->terminating = true;
    //  Close every connection (channels fail), then lws frees them.
    zlistx_t *list = zlistx_new ();
    if (self->agents)
        for (conn_t *c = (conn_t *) zhashx_first (self->agents); c; c = (conn_t *) zhashx_next (self->agents))
            zlistx_add_end (list, c);
    if (self->readers)
        for (conn_t *c = (conn_t *) zhashx_first (self->readers); c; c = (conn_t *) zhashx_next (self->readers))
            zlistx_add_end (list, c);
    for (conn_t *c = (conn_t *) zlistx_first (list); c; c = (conn_t *) zlistx_next (list))
        ah_tun_conn_close (c, "the server is shutting down", false, false, false);
    zlistx_destroy (&list);
    //  Opens still waiting for a connection get no answer: their openers
    //  stop too (the api before us) or time out.
    if (self->waiters)
        for (waiter_t *w = (waiter_t *) zlistx_first (self->waiters); w; w = (waiter_t *) zlistx_next (self->waiters))
            s_waiter_free (self, w);
    zlistx_destroy (&self->waiters);
    //  Channels went with their connections; any left go too.
    if (self->chans)
        for (chan_t *c = (chan_t *) zhashx_first (self->chans); c; c = (chan_t *) zhashx_first (self->chans)) {
            c->conn = NULL;
            ah_tun_chan_free (self, c);
        }
    ah_tun_egress_drains_end (self);
    ah_lwsloop_destroy (&self->loop);       //  CLOSED callbacks free the conns
    ah_actor_use_lws (self->actor, NULL);   //  what ends below may still send
    zhashx_destroy (&self->chans);
    zhashx_destroy (&self->egress_jobs);
    zhashx_destroy (&self->agents);
    zhashx_destroy (&self->readers);
    zhashx_destroy (&self->reader_hashes);
    ah_tun_egress_destroy (self);
    ah_store_close (&self->store);
    free (self->db_path);
    if (self->socket_path && self->unix_vhost)
        unlink (self->socket_path);
    free (self->socket_path);
    free (self);
}

//  $TERM: the workers' connects give up (their jobs end before destroy).
static void s_on_term (void *self_)
{
    self_t *self = self_;
    atomic_store (&self->egress_stop, true);
}

static void *s_init (ah_actor_t *actor, void *args)
{
    const ah_tunnel_args_t *a = (const ah_tunnel_args_t *) args;
    self_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->actor = actor;
    self->next_chan = 1;
    atomic_init (&self->egress_stop, false);
    //  Egress connects wait on the network: more of them at once than
    //  the default, each bounded by sandbox.egress_connect_timeout.
    ah_actor_workers (actor, AH_TUN_EGRESS_WORKERS);
    self->egress_jobs = zhashx_new ();
    self->db_path = a->db_path ? strdup (a->db_path) : NULL;
    self->egress_fill_hook = a->egress_fill_hook;
    self->egress_fill_hook_arg = a->egress_fill_hook_arg;
    self->ping_interval_ms = a->ping_interval_ms > 0 ? a->ping_interval_ms : AH_TUNNEL_PING_INTERVAL_MS;
    self->ping_timeout_ms = a->ping_timeout_ms > 0 ? a->ping_timeout_ms : AH_TUNNEL_PING_TIMEOUT_MS;
    self->open_timeout_ms = a->open_timeout_ms > 0 ? a->open_timeout_ms : AH_TUNNEL_OPEN_TIMEOUT_MS;
    self->stats_interval_ms = a->stats_interval_ms == 0 ? AH_TUNNEL_STATS_INTERVAL_MS
                            : a->stats_interval_ms;
    self->agents = zhashx_new ();
    self->readers = zhashx_new ();
    self->reader_hashes = zhashx_new ();
    if (self->reader_hashes)
        zhashx_set_destructor (self->reader_hashes, (zhashx_destructor_fn *) zstr_free);
    self->chans = zhashx_new ();
    self->waiters = zlistx_new ();
    self->connect_wait_ms = a->connect_wait_ms > 0 ? a->connect_wait_ms
                          : a->connect_wait_ms < 0 ? 0 : AH_TUNNEL_CONNECT_WAIT_MS;

    char host [256] = "";
    int port = 0;
    char *err = NULL;
    //  TCP where a driver's sandboxes dial it (config/config.h
    //  ah_config_tunnel_tcp), else the unix socket alone.
    const char *why = "no configuration: the default port";
    const char *listen = a->config ? ah_config_tunnel_tcp (a->config, &why) : ":8090";
    if (listen && ah_config_split_listen (listen, host, sizeof host, &port))
        ah_actor_fail (actor, "sandbox.tunnel_listen '%s' is not host:port or :port", listen);
    else
    if (!(self->store = ah_store_open (a->db_path, false, &err)))
        ah_actor_fail (actor, "cannot open the database %s: %s", a->db_path ? a->db_path : "(none)",
                       err ? err : "?");
    else {
        ah_tun_egress_init (self, a->config);
        //  The context listens on nothing; each listener is a vhost of
        //  its own, on exactly the address configured.
        struct lws_context_creation_info info;
        memset (&info, 0, sizeof info);
        info.port = CONTEXT_PORT_NO_LISTEN;
        info.user = self;
        info.timeout_secs = 10;             //  a handshake that stalls
        info.pt_serv_buf_size = 256u << 10; //  one read per loop round takes this much
        //  sandbox.tunnel_tls: the TCP listener serves the API's certificate
        //  (a host agent's relay dials it across machines); the unix socket
        //  stays plain (it never leaves this machine).
        bool tls = a->config && a->config->tunnel_tls && a->config->tls_cert && a->config->tls_key;
        if (tls)
            info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        self->loop = ah_lwsloop_new (&info);
        free (err);
        err = NULL;
        bool ok = self->loop != NULL;
        if (!ok)
            ah_actor_fail (actor, "cannot start the tunnel's loop");
        if (ok && listen) {
            self->vhost = ah_lwsloop_listen (self->loop, "tunnel", host, port, ah_tun_protocols, NULL,
                                             tls ? a->config->tls_cert : NULL,
                                             tls ? a->config->tls_key : NULL,
                                             LWS_SERVER_OPTION_VALIDATE_UTF8, &err);
            if (!(ok = self->vhost != NULL))
                ah_actor_fail (actor, "sandbox.tunnel_listen = '%s': %s", listen,
                               err ? err : "cannot listen");
        }
        //  The same protocol on a unix socket: a sandbox without a
        //  network dials it through a bind mount of its directory.
        if (ok && a->config) {
            self->socket_path = ah_config_tunnel_socket (a->config);
            char *dir = self->socket_path ? strdup (self->socket_path) : NULL;
            char *slash = dir ? strrchr (dir, '/') : NULL;
            if (slash && slash != dir) {
                *slash = 0;
                if (mkdir (dir, 0755) != 0 && errno != EEXIST)
                    ah_warn (AREA, "making %s: %s", dir, strerror (errno));
            }
            free (dir);
            free (err);
            err = NULL;
            self->unix_vhost = self->socket_path
                ? ah_lwsloop_listen_unix (self->loop, "tunnel-unix", self->socket_path, ah_tun_protocols,
                                          LWS_SERVER_OPTION_VALIDATE_UTF8, &err)
                : NULL;
            if (!(ok = self->unix_vhost != NULL))
                ah_actor_fail (actor, "sandbox.tunnel_socket = '%s': %s",
                               self->socket_path ? self->socket_path : "?", err ? err : "out of memory");
        }
        if (!ok)
            self->vhost = self->unix_vhost = NULL;
    }
    free (err);
    if (!self->vhost && !self->unix_vhost) {
        s_destroy (self);
        return NULL;
    }
    ah_actor_use_lws (actor, self->loop);
    if (self->vhost)
        ah_info (AREA, "listening for sandboxd on %s and on TCP %s (port %d): %s",
                 self->socket_path ? self->socket_path : "no socket", listen,
                 lws_get_vhost_listen_port (self->vhost), why);
    else
        ah_info (AREA, "listening for sandboxd on %s; %s", self->socket_path, why);
    return self;
}

static const ah_actor_handler_t s_handlers [] = {
    { "CHAN_OPEN", s_on_open },
    { "CHAN_DATA", s_on_data },
    { "CHAN_ACK", s_on_ack },
    { "CHAN_EOF", s_on_eof },
    { "CHAN_CLOSE", s_on_close },
    { "TUNNEL_KICK", s_on_kick },
    { "READER_ALLOW", s_on_reader_allow },
    { "READER_REVOKE", s_on_reader_revoke },
    { "TUNNEL_SESSIONS", s_on_sessions },
    { "SANDBOX_STATE", s_on_state },
    { "EGRESS_CHANGED", s_on_egress_changed },
    { "REPLY", s_on_reply },
    { NULL, NULL }
};

static const ah_actor_command_t s_commands [] = {
    { "PORT", s_cmd_port },
    { NULL, NULL }
};

const ah_actor_def_t ah_tunnel_actor = {
    .name = AREA, .on_bus = true, .init = s_init, .destroy = s_destroy, .on_term = s_on_term,
    .handlers = s_handlers, .commands = s_commands, .flush = ah_tun_conns_flush,
};
