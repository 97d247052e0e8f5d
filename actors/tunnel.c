/*  actors/tunnel.c: the tunnel actor (see tunnel.h, docs/tunnel.md and
    the tunnel section of docs/messages.md).

    DESIGN. One thread, this actor's, owns everything here: the lws context
    and every wsi, the pipe, the bus DEALER ("tunnel"), the SQLite
    connection, every yamux session and every channel. common/lwsloop runs
    the lws service loop with the zsocks in it, so lws callbacks, timers
    and bus messages take turns on this thread and nothing is locked.

    conn_t: one authenticated WebSocket (lws per-session data points at
    it). It owns its yamux session, the bytes yamux gave us to send (outq,
    written one message per WRITEABLE) and a map stream id -> chan_t.
    self->agents maps agent id -> the agent's current conn. A conn that is
    being closed (kick, replaced, ping timeout, bad hello) is "dead" at
    once: out of self->agents, its channels failed and freed, its yamux
    callbacks ignored; lws frees it in CLOSED.

    chan_t: one yamux stream. External channels belong to the actor that
    sent CHAN_OPEN (opener, a bus name); internal ones (hello, stats) are
    handled here. self->chans maps the server-wide channel id -> chan_t.
    Flow control: bytes from sandboxd are passed on at once as CHAN_DATA
    and given back to yamux (ah_yamux_consumed) only when the opener ACKs
    them, so yamux's 256 KiB window stops sandboxd when the opener is slow.
    Bytes from the opener go to ah_yamux_write; what the window does not
    take waits in chan->pending (bounded by the opener's credit) and is
    ACKed to the opener when yamux takes it.                            */
#include "actors/tunnel.h"
#include "common/bus.h"
#include "common/log.h"
#include "common/lwsloop.h"
#include "common/msg.h"
#include "common/token.h"
#include "proto/channel.h"
#include "proto/yamux.h"
#include "store/store.h"

#include <libwebsockets.h>
#include <ctype.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>

#define AREA            "tunnel"
#define AGENT_ID_MAX    64
#define WRITE_CHUNK     (64u << 10)         //  largest WebSocket message we send
#define OUTQ_HIGH       (1u << 20)          //  stop reading sandboxd above this
#define OUTQ_LOW        (256u << 10)        //  ... and read again below this
#define PENDING_MAX     (2 * AH_TUNNEL_CREDIT)
#define REPLY_BUF_MAX   (4 + AH_CHAN_HEADER_MAX + AH_YAMUX_INITIAL_WINDOW)

//  A byte queue: data [off .. len) is queued.
typedef struct {
    uint8_t *data;
    size_t off, len, cap;
} buf_t;

typedef struct self_t self_t;
typedef struct conn_t conn_t;

typedef enum { CH_EXTERNAL, CH_HELLO, CH_STATS } chan_kind_t;

typedef struct {
    int64_t id;                     //  server-wide channel id
    uint32_t stream;
    conn_t *conn;
    chan_kind_t kind;
    char opener [64];               //  bus name (external)
    int64_t req;                    //  of CHAN_OPEN
    char ch [32];                   //  channel name, for logs
    bool replied;                   //  sandboxd's reply header arrived
    buf_t rbuf;                     //  reply header being gathered
    buf_t pending;                  //  opener bytes yamux has not taken yet
    bool eof_pending;               //  opener sent CHAN_EOF while pending
    size_t unacked;                 //  bytes passed to the opener, not yet ACKed
    ah_lwsloop_timer_t timer;       //  reply deadline
    bool timer_set;
} chan_t;

struct conn_t {
    self_t *self;
    struct lws *wsi;                //  NULL once lws closed it
    char agent_id [AGENT_ID_MAX];
    ah_yamux_t *yamux;
    buf_t outq;
    zhashx_t *streams;              //  "stream id" -> chan_t (not owned)
    bool ready;                     //  hello succeeded
    bool dead;                      //  being closed; ignore everything
    bool rx_paused;
    size_t msg_bytes;               //  of the WebSocket message being received
    int64_t last_pong_ms;
    uint32_t ping_seq;
    ah_lwsloop_timer_t ping_timer;
    ah_lwsloop_timer_t stats_timer;
    uint8_t *wbuf;                  //  LWS_PRE + WRITE_CHUNK
};

//  lws per-session data of a tunnel WebSocket.
typedef struct {
    conn_t *conn;
    char agent_id [AGENT_ID_MAX];   //  authenticated in FILTER
} pss_t;

struct self_t {
    zsock_t *pipe;
    zsock_t *bus;
    ah_store_t *store;
    ah_lwsloop_t *loop;
    int port;
    int ping_interval_ms, ping_timeout_ms, open_timeout_ms, stats_interval_ms;
    zhashx_t *agents;               //  agent id -> conn_t (not owned)
    zhashx_t *chans;                //  "chan id" -> chan_t (owned, freed by s_chan_free)
    int64_t next_chan;
    bool terminating;
};

//  ---------------------------------------------------------------------
//  Byte queues

static int s_buf_append (buf_t *b, const uint8_t *data, size_t size)
{
    if (b->off && b->off == b->len)
        b->off = b->len = 0;
    if (b->len + size > b->cap) {
        if (b->off) {                       //  compact first
            memmove (b->data, b->data + b->off, b->len - b->off);
            b->len -= b->off;
            b->off = 0;
        }
        if (b->len + size > b->cap) {
            size_t cap = b->cap ? b->cap : 4096;
            while (cap < b->len + size)
                cap *= 2;
            uint8_t *grown = (uint8_t *) realloc (b->data, cap);
            if (!grown)
                return -1;
            b->data = grown;
            b->cap = cap;
        }
    }
    memcpy (b->data + b->len, data, size);
    b->len += size;
    return 0;
}

static size_t s_buf_size (const buf_t *b) { return b->len - b->off; }
static const uint8_t *s_buf_head (const buf_t *b) { return b->data + b->off; }

static void s_buf_drop (buf_t *b, size_t n)
{
    b->off += n;
    if (b->off >= b->len)
        b->off = b->len = 0;
}

static void s_buf_free (buf_t *b)
{
    free (b->data);
    memset (b, 0, sizeof *b);
}

//  ---------------------------------------------------------------------
//  Messages

static void s_send (self_t *self, ah_msg_t **msg, const char *dest)
{
    if (*msg && ah_msg_send (msg, self->bus, dest))
        ah_warn (AREA, "could not send to '%s'", dest);
    ah_msg_destroy (msg);
}

static char *s_sandbox_state (self_t *self, const char *agent_id, char **hash)
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

//  ---------------------------------------------------------------------
//  Channels

static char *s_key (char *buf, size_t size, int64_t n)
{
    snprintf (buf, size, "%lld", (long long) n);
    return buf;
}

static chan_t *s_chan_find (self_t *self, int64_t id)
{
    char key [24];
    return (chan_t *) zhashx_lookup (self->chans, s_key (key, sizeof key, id));
}

static chan_t *s_chan_by_stream (conn_t *conn, uint32_t stream)
{
    char key [24];
    return (chan_t *) zhashx_lookup (conn->streams, s_key (key, sizeof key, stream));
}

//  Forget a channel (no message, no yamux call).
static void s_chan_free (self_t *self, chan_t *chan)
{
    char key [24];
    if (chan->timer_set)
        ah_lwsloop_timer_cancel (&chan->timer);
    if (chan->conn)
        zhashx_delete (chan->conn->streams, s_key (key, sizeof key, chan->stream));
    s_buf_free (&chan->rbuf);
    s_buf_free (&chan->pending);
    zhashx_delete (self->chans, s_key (key, sizeof key, chan->id));
    free (chan);
}

static void s_conn_close (conn_t *conn, const char *why, bool lost, bool fatal, bool graceful);

//  The channel failed: tell its opener (REPLY if CHAN_OPEN is still
//  unanswered, else CHAN_CLOSE), then forget it. status for the REPLY.
static void s_chan_fail (self_t *self, chan_t *chan, int status, const char *error)
{
    if (chan->kind == CH_EXTERNAL) {
        ah_msg_t *m;
        if (!chan->replied) {
            m = ah_msg_new ("REPLY");
            ah_msg_set_int (m, "req", chan->req);
            ah_msg_set_bool (m, "ok", false);
            ah_msg_set_int (m, "status", status);
            ah_msg_set_str (m, "error", error);
        }
        else {
            m = ah_msg_new ("CHAN_CLOSE");
            ah_msg_set_int (m, "chan", chan->id);
            if (error)
                ah_msg_set_str (m, "error", error);
        }
        s_send (self, &m, chan->opener);
    }
    else if (chan->kind == CH_HELLO && chan->conn && !chan->conn->dead && !chan->conn->ready) {
        conn_t *conn = chan->conn;
        char why [300];
        snprintf (why, sizeof why, "hello failed: %s", error ? error : "channel closed");
        s_chan_free (self, chan);
        s_conn_close (conn, why, true, false, false);
        return;
    }
    s_chan_free (self, chan);
}

//  Fail the channel, then reset its stream (forgotten first, so on_closed
//  finds nothing and says nothing more).
static void s_chan_abort (self_t *self, chan_t *chan, int status, const char *error)
{
    conn_t *conn = chan->conn;
    uint32_t stream = chan->stream;
    s_chan_fail (self, chan, status, error);
    if (conn && conn->yamux && !conn->dead)
        ah_yamux_reset (conn->yamux, stream);
}

static void s_on_open_timeout (ah_lwsloop_timer_t *timer, void *arg)
{
    chan_t *chan = (chan_t *) arg;
    self_t *self = chan->conn->self;
    chan->timer_set = false;
    char error [200];
    snprintf (error, sizeof error, "sandboxd did not answer the %s channel within %d ms",
              chan->ch, self->open_timeout_ms);
    ah_warn (AREA, "agent '%s': %s", chan->conn->agent_id, error);
    s_chan_abort (self, chan, 504, error);
}

//  Open a stream on conn, send the header, FIN if fin. NULL with *why.
static chan_t *s_chan_open (conn_t *conn, chan_kind_t kind, const ah_msg_t *header,
                            bool fin, const char **why)
{
    self_t *self = conn->self;
    uint8_t *hdr = NULL;
    size_t hdr_size = 0;
    if (ah_chan_header_encode (header, &hdr, &hdr_size)) {
        *why = "the channel header cannot be encoded (at most 64 KiB)";
        return NULL;
    }
    uint32_t stream = 0;
    if (ah_yamux_open (conn->yamux, &stream)) {
        free (hdr);
        *why = "no more channels can be opened on this connection";
        return NULL;
    }
    chan_t *chan = (chan_t *) calloc (1, sizeof *chan);
    if (!chan) {
        free (hdr);
        ah_yamux_reset (conn->yamux, stream);
        *why = "out of memory";
        return NULL;
    }
    chan->id = self->next_chan++;
    chan->stream = stream;
    chan->conn = conn;
    chan->kind = kind;
    const char *ch = ah_msg_str (header, "ch");
    snprintf (chan->ch, sizeof chan->ch, "%s", ch ? ch : "?");
    char key [24];
    zhashx_insert (self->chans, s_key (key, sizeof key, chan->id), chan);
    zhashx_insert (conn->streams, s_key (key, sizeof key, stream), chan);
    //  The header fits the fresh 256 KiB window: yamux takes it whole.
    ssize_t n = ah_yamux_write (conn->yamux, stream, hdr, hdr_size);
    free (hdr);
    if (n != (ssize_t) hdr_size) {
        s_chan_free (self, chan);
        ah_yamux_reset (conn->yamux, stream);
        *why = "the channel header could not be written";
        return NULL;
    }
    if (fin)
        ah_yamux_close (conn->yamux, stream);
    ah_lwsloop_timer_set (self->loop, &chan->timer, self->open_timeout_ms, s_on_open_timeout, chan);
    chan->timer_set = true;
    return chan;
}

//  Pass bytes from sandboxd to the opener as CHAN_DATA (<= 64 KiB each).
static void s_chan_forward (self_t *self, chan_t *chan, const uint8_t *data, size_t size)
{
    while (size) {
        size_t n = size > AH_TUNNEL_DATA_MAX ? AH_TUNNEL_DATA_MAX : size;
        ah_msg_t *m = ah_msg_new ("CHAN_DATA");
        ah_msg_set_int (m, "chan", chan->id);
        ah_msg_set_bin (m, "data", data, n);
        s_send (self, &m, chan->opener);
        chan->unacked += n;
        data += n;
        size -= n;
    }
}

static void s_hello_reply (self_t *self, chan_t *chan, ah_msg_t *reply);
static void s_stats_reply (self_t *self, chan_t *chan, ah_msg_t *reply);

//  sandboxd's reply header is complete.
static void s_chan_replied (self_t *self, chan_t *chan, ah_msg_t *reply, size_t used)
{
    conn_t *conn = chan->conn;
    chan->replied = true;
    if (chan->timer_set) {
        ah_lwsloop_timer_cancel (&chan->timer);
        chan->timer_set = false;
    }
    //  The header bytes are ours: give them back to the window now.
    ah_yamux_consumed (conn->yamux, chan->stream, used);
    if (chan->kind == CH_HELLO) {
        s_hello_reply (self, chan, reply);
        return;
    }
    if (chan->kind == CH_STATS) {
        s_stats_reply (self, chan, reply);
        return;
    }
    uint8_t *raw = NULL;
    size_t raw_size = 0;
    ah_msg_encode (reply, &raw, &raw_size);
    if (!ah_msg_bool (reply, "ok", false)) {
        //  Refused: the opener gets the reason, the stream is dropped.
        const char *code = ah_msg_str (reply, "code");
        const char *error = ah_msg_str (reply, "error");
        int status = 500;
        if (code) {
            if (streq (code, "ENOENT")) status = 404;
            else if (streq (code, "EACCES")) status = 403;
            else if (streq (code, "EINVAL")) status = 400;
            else if (streq (code, "EEXIST") || streq (code, "ENOTDIR") || streq (code, "EISDIR")
                     || streq (code, "ENOTEMPTY")) status = 409;
            else if (streq (code, "ENOSPC")) status = 507;
            else if (streq (code, "ETIMEDOUT")) status = 504;
            else if (streq (code, "EPROTO") || streq (code, "EVERSION")) status = 502;
        }
        ah_msg_t *m = ah_msg_new ("REPLY");
        ah_msg_set_int (m, "req", chan->req);
        ah_msg_set_bool (m, "ok", false);
        ah_msg_set_int (m, "status", status);
        ah_msg_set_str (m, "code", code ? code : "EIO");
        ah_msg_set_strf (m, "error", "%s", error ? error : "sandboxd refused the channel");
        if (raw)
            ah_msg_set_raw (m, "reply", raw, raw_size);
        s_send (self, &m, chan->opener);
        free (raw);
        uint32_t stream = chan->stream;
        s_chan_free (self, chan);
        ah_yamux_reset (conn->yamux, stream);
        return;
    }
    ah_msg_t *m = ah_msg_new ("REPLY");
    ah_msg_set_int (m, "req", chan->req);
    ah_msg_set_bool (m, "ok", true);
    ah_msg_set_int (m, "status", 200);
    ah_msg_set_int (m, "chan", chan->id);
    if (raw)
        ah_msg_set_raw (m, "reply", raw, raw_size);
    free (raw);
    s_send (self, &m, chan->opener);
    //  Bytes that came after the header go on as data.
    if (s_buf_size (&chan->rbuf) > used)
        s_chan_forward (self, chan, s_buf_head (&chan->rbuf) + used,
                        s_buf_size (&chan->rbuf) - used);
    s_buf_free (&chan->rbuf);
}

//  Push the opener's pending bytes into yamux; ACK what it took.
static void s_chan_flush (self_t *self, chan_t *chan)
{
    conn_t *conn = chan->conn;
    size_t taken = 0;
    while (s_buf_size (&chan->pending)) {
        ssize_t n = ah_yamux_write (conn->yamux, chan->stream, s_buf_head (&chan->pending),
                                    s_buf_size (&chan->pending));
        if (n <= 0)
            break;
        s_buf_drop (&chan->pending, (size_t) n);
        taken += (size_t) n;
    }
    if (taken && chan->kind == CH_EXTERNAL) {
        ah_msg_t *m = ah_msg_new ("CHAN_ACK");
        ah_msg_set_int (m, "chan", chan->id);
        ah_msg_set_int (m, "bytes", (int64_t) taken);
        s_send (self, &m, chan->opener);
    }
    if (chan->eof_pending && !s_buf_size (&chan->pending)) {
        chan->eof_pending = false;
        ah_yamux_close (conn->yamux, chan->stream);
    }
}

//  ---------------------------------------------------------------------
//  yamux callbacks (ud = conn)

static void s_ymx_output (void *ud, const uint8_t *data, size_t size)
{
    conn_t *conn = (conn_t *) ud;
    if (!conn->wsi)
        return;
    if (s_buf_append (&conn->outq, data, size)) {
        ah_error (AREA, "agent '%s': out of memory queueing tunnel output", conn->agent_id);
        s_conn_close (conn, "out of memory", true, false, false);
        return;
    }
    lws_callback_on_writable (conn->wsi);
}

static void s_ymx_on_open (void *ud, uint32_t id)
{
    //  sandboxd never opens streams (docs/tunnel.md): refuse.
    conn_t *conn = (conn_t *) ud;
    ah_warn (AREA, "agent '%s': sandboxd opened stream %u; reset", conn->agent_id, id);
    ah_yamux_reset (conn->yamux, id);
}

static void s_ymx_on_data (void *ud, uint32_t id, const uint8_t *data, size_t size)
{
    conn_t *conn = (conn_t *) ud;
    self_t *self = conn->self;
    if (conn->dead)
        return;
    chan_t *chan = s_chan_by_stream (conn, id);
    if (!chan) {
        ah_yamux_consumed (conn->yamux, id, size);  //  nobody wants it
        return;
    }
    if (chan->replied) {
        if (chan->kind == CH_EXTERNAL)
            s_chan_forward (self, chan, data, size);
        else
            ah_yamux_consumed (conn->yamux, id, size);
        return;
    }
    if (s_buf_size (&chan->rbuf) + size > REPLY_BUF_MAX || s_buf_append (&chan->rbuf, data, size)) {
        s_chan_abort (self, chan, 502, "sandboxd sent an oversized reply header");
        return;
    }
    ah_msg_t *reply = NULL;
    size_t used = 0;
    const char *err = NULL;
    int rc = ah_chan_header_decode (s_buf_head (&chan->rbuf), s_buf_size (&chan->rbuf),
                                    &reply, &used, &err);
    if (rc == 0)
        return;
    if (rc < 0) {
        char error [200];
        snprintf (error, sizeof error, "sandboxd sent a malformed reply header: %s", err);
        ah_warn (AREA, "agent '%s': %s channel: %s", conn->agent_id, chan->ch, error);
        s_chan_abort (self, chan, 502, error);
        return;
    }
    s_chan_replied (self, chan, reply, used);
    ah_msg_destroy (&reply);
}

static void s_ymx_on_eof (void *ud, uint32_t id)
{
    conn_t *conn = (conn_t *) ud;
    if (conn->dead)
        return;
    chan_t *chan = s_chan_by_stream (conn, id);
    if (!chan)
        return;
    if (!chan->replied) {
        s_chan_abort (conn->self, chan, 502, "sandboxd closed the channel without a reply");
        return;
    }
    if (chan->kind == CH_EXTERNAL) {
        ah_msg_t *m = ah_msg_new ("CHAN_EOF");
        ah_msg_set_int (m, "chan", chan->id);
        s_send (conn->self, &m, chan->opener);
    }
}

static void s_ymx_on_closed (void *ud, uint32_t id, bool reset)
{
    conn_t *conn = (conn_t *) ud;
    if (conn->dead)
        return;
    chan_t *chan = s_chan_by_stream (conn, id);
    if (!chan)
        return;                     //  we forgot it first (our own reset)
    if (!chan->replied)
        s_chan_fail (conn->self, chan, 502, reset ? "sandboxd reset the channel"
                                                  : "sandboxd closed the channel without a reply");
    else
        s_chan_fail (conn->self, chan, 0, reset ? "sandboxd reset the channel" : NULL);
}

static void s_ymx_on_writable (void *ud, uint32_t id)
{
    conn_t *conn = (conn_t *) ud;
    if (conn->dead)
        return;
    chan_t *chan = s_chan_by_stream (conn, id);
    if (chan)
        s_chan_flush (conn->self, chan);
}

static void s_ymx_on_pong (void *ud, uint32_t opaque)
{
    conn_t *conn = (conn_t *) ud;
    conn->last_pong_ms = zclock_mono ();
}

static void s_ymx_on_goaway (void *ud, uint32_t code)
{
    conn_t *conn = (conn_t *) ud;
    if (conn->dead)
        return;
    char why [80];
    snprintf (why, sizeof why, "sandboxd sent go away (code %u)", code);
    ah_info (AREA, "agent '%s': %s", conn->agent_id, why);
    //  sandboxd is exiting or refusing: the connection is of no more use.
    s_conn_close (conn, code ? why : "sandbox connection lost", true, false, true);
}

//  ---------------------------------------------------------------------
//  Connections

static void s_conn_destroy (conn_t **conn_p)
{
    conn_t *conn = *conn_p;
    if (!conn)
        return;
    ah_lwsloop_timer_cancel (&conn->ping_timer);
    ah_lwsloop_timer_cancel (&conn->stats_timer);
    ah_yamux_destroy (&conn->yamux);
    zhashx_destroy (&conn->streams);
    s_buf_free (&conn->outq);
    free (conn->wbuf);
    free (conn);
    *conn_p = NULL;
}

//  Close conn now: out of the agent map, channels failed with why; lws
//  closes the socket (after flushing a go away when graceful).
//  lost: tell lifecycle (TUNNEL_LOST) unless we are shutting down.
static void s_conn_close (conn_t *conn, const char *why, bool lost, bool fatal, bool graceful)
{
    self_t *self = conn->self;
    if (conn->dead)
        return;
    conn->dead = true;
    ah_lwsloop_timer_cancel (&conn->ping_timer);
    ah_lwsloop_timer_cancel (&conn->stats_timer);
    if (zhashx_lookup (self->agents, conn->agent_id) == conn)
        zhashx_delete (self->agents, conn->agent_id);
    //  Fail every channel; collect first (failing edits the map).
    zlistx_t *list = zlistx_new ();
    for (chan_t *c = (chan_t *) zhashx_first (conn->streams); c; c = (chan_t *) zhashx_next (conn->streams))
        zlistx_add_end (list, c);
    for (chan_t *c = (chan_t *) zlistx_first (list); c; c = (chan_t *) zlistx_next (list)) {
        c->conn = NULL;                     //  its stream entry goes with the map
        if (c->kind == CH_EXTERNAL)
            s_chan_fail (self, c, 502, why);
        else
            s_chan_free (self, c);
    }
    zlistx_destroy (&list);
    zhashx_purge (conn->streams);
    if (lost && !self->terminating) {
        ah_msg_t *m = ah_msg_new ("TUNNEL_LOST");
        ah_msg_set_str (m, "agent_id", conn->agent_id);
        ah_msg_set_str (m, "reason", why);
        ah_msg_set_bool (m, "fatal", fatal);
        s_send (self, &m, "lifecycle");
    }
    if (conn->wsi) {
        if (graceful && conn->yamux) {
            ah_yamux_goaway (conn->yamux, AH_YAMUX_GOAWAY_NORMAL);
            //  WRITEABLE flushes the go away and closes; 2 s at most.
            lws_set_timeout (conn->wsi, PENDING_TIMEOUT_USER_OK, 2);
            lws_callback_on_writable (conn->wsi);
        }
        else
            lws_set_timeout (conn->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
    }
}

static void s_on_ping_timer (ah_lwsloop_timer_t *timer, void *arg)
{
    conn_t *conn = (conn_t *) arg;
    self_t *self = conn->self;
    if (conn->dead)
        return;
    int64_t now = zclock_mono ();
    if (now - conn->last_pong_ms > self->ping_timeout_ms) {
        ah_warn (AREA, "agent '%s': no ping answer for %lld ms; closing the connection",
                 conn->agent_id, (long long) (now - conn->last_pong_ms));
        s_conn_close (conn, "sandbox connection lost", true, false, false);
        return;
    }
    ah_yamux_ping (conn->yamux, ++conn->ping_seq);
    ah_lwsloop_timer_set (self->loop, &conn->ping_timer, self->ping_interval_ms, s_on_ping_timer, conn);
}

static void s_on_stats_timer (ah_lwsloop_timer_t *timer, void *arg)
{
    conn_t *conn = (conn_t *) arg;
    self_t *self = conn->self;
    if (conn->dead || !conn->ready)
        return;
    ah_msg_t *h = ah_msg_new ("HEADER");
    ah_msg_set_str (h, "ch", "stats");
    const char *why = NULL;
    if (!s_chan_open (conn, CH_STATS, h, true, &why))
        ah_debug (AREA, "agent '%s': stats: %s", conn->agent_id, why);
    ah_msg_destroy (&h);
    ah_lwsloop_timer_set (self->loop, &conn->stats_timer, self->stats_interval_ms,
                          s_on_stats_timer, conn);
}

static void s_stats_reply (self_t *self, chan_t *chan, ah_msg_t *reply)
{
    conn_t *conn = chan->conn;
    if (ah_msg_bool (reply, "ok", false) && ah_msg_has (reply, "cpu_ns")) {
        ah_msg_t *m = ah_msg_new ("AGENT_STATS");
        ah_msg_set_str (m, "agent_id", conn->agent_id);
        ah_msg_set_int (m, "cpu_ns", ah_msg_int (reply, "cpu_ns", 0));
        ah_msg_set_int (m, "at_ns", ah_msg_int (reply, "at_ns", 0));
        s_send (self, &m, "sleeper");
    }
    //  Stays mapped until sandboxd's FIN completes the close (on_closed).
}

static void s_hello_reply (self_t *self, chan_t *chan, ah_msg_t *reply)
{
    conn_t *conn = chan->conn;
    char why [600];
    const char *their_id = ah_msg_str (reply, "agent_id");
    if (!ah_msg_bool (reply, "ok", false)) {
        const char *code = ah_msg_str (reply, "code");
        const char *error = ah_msg_str (reply, "error");
        if (code && streq (code, "EVERSION"))
            snprintf (why, sizeof why, "sandboxd refused hello: %s (this server speaks tunnel "
                      "protocol %d: deploy the sandboxd that ships with this server and "
                      "restart the sandbox)", error ? error : "version mismatch", AH_PROTOCOL_VERSION);
        else
            snprintf (why, sizeof why, "sandboxd refused hello: %s %s",
                      code ? code : "?", error ? error : "");
        ah_error (AREA, "agent '%s': %s", conn->agent_id, why);
        s_conn_close (conn, why, true, true, true);
        return;
    }
    int64_t version = ah_msg_int (reply, "version", -1);
    if (version != AH_PROTOCOL_VERSION) {
        snprintf (why, sizeof why, "sandboxd speaks tunnel protocol %lld, this server speaks %d: "
                  "deploy the sandboxd that ships with this server (restart the sandbox so it "
                  "mounts the server's sandboxd)", (long long) version, AH_PROTOCOL_VERSION);
        ah_error (AREA, "agent '%s': %s", conn->agent_id, why);
        s_conn_close (conn, why, true, true, true);
        return;
    }
    if (their_id && !streq (their_id, conn->agent_id)) {
        snprintf (why, sizeof why, "sandboxd says it serves agent '%.64s' but authenticated as '%s'",
                  their_id, conn->agent_id);
        ah_error (AREA, "agent '%s': %s", conn->agent_id, why);
        s_conn_close (conn, why, true, true, true);
        return;
    }
    conn->ready = true;
    ah_info (AREA, "agent '%s': sandboxd connected (tunnel protocol %d)", conn->agent_id,
             AH_PROTOCOL_VERSION);
    ah_msg_t *m = ah_msg_new ("SANDBOX_HELLO");
    ah_msg_set_str (m, "agent_id", conn->agent_id);
    s_send (self, &m, "lifecycle");
    if (self->stats_interval_ms > 0)
        ah_lwsloop_timer_set (self->loop, &conn->stats_timer, self->stats_interval_ms,
                              s_on_stats_timer, conn);
}

static conn_t *s_conn_new (self_t *self, struct lws *wsi, const char *agent_id)
{
    conn_t *conn = (conn_t *) calloc (1, sizeof *conn);
    if (!conn)
        return NULL;
    conn->self = self;
    conn->wsi = wsi;
    snprintf (conn->agent_id, sizeof conn->agent_id, "%s", agent_id);
    conn->streams = zhashx_new ();
    conn->wbuf = (uint8_t *) malloc (LWS_PRE + WRITE_CHUNK);
    ah_yamux_callbacks_t cb = {
        .output = s_ymx_output, .on_open = s_ymx_on_open, .on_data = s_ymx_on_data,
        .on_eof = s_ymx_on_eof, .on_closed = s_ymx_on_closed, .on_writable = s_ymx_on_writable,
        .on_pong = s_ymx_on_pong, .on_goaway = s_ymx_on_goaway,
    };
    //  The server opens every stream: the yamux client role (odd ids).
    conn->yamux = ah_yamux_new (true, &cb, conn);
    if (!conn->streams || !conn->wbuf || !conn->yamux) {
        s_conn_destroy (&conn);
        return NULL;
    }
    conn->last_pong_ms = zclock_mono ();
    return conn;
}

//  A new authenticated connection: replace the agent's old one, say hello.
static void s_conn_start (self_t *self, conn_t *conn)
{
    conn_t *old = (conn_t *) zhashx_lookup (self->agents, conn->agent_id);
    if (old) {
        ah_info (AREA, "agent '%s': new connection replaces the old one", conn->agent_id);
        s_conn_close (old, "tunnel reconnected", false, false, true);
    }
    zhashx_insert (self->agents, conn->agent_id, conn);
    ah_msg_t *h = ah_msg_new ("HEADER");
    ah_msg_set_str (h, "ch", "hello");
    ah_msg_set_int (h, "version", AH_PROTOCOL_VERSION);
    const char *why = NULL;
    if (!s_chan_open (conn, CH_HELLO, h, true, &why)) {
        ah_error (AREA, "agent '%s': cannot open hello: %s", conn->agent_id, why);
        s_conn_close (conn, why, true, false, false);
    }
    ah_msg_destroy (&h);
    if (!conn->dead)
        ah_lwsloop_timer_set (self->loop, &conn->ping_timer, self->ping_interval_ms,
                              s_on_ping_timer, conn);
}

//  ---------------------------------------------------------------------
//  Authentication

//  0 if the upgrade may go on (agent_id filled), else the HTTP status to
//  refuse with; why says what for the log (never the token).
static int s_authenticate (self_t *self, struct lws *wsi, char *agent_id, size_t id_size,
                           char *why, size_t why_size)
{
    char auth [512];
    agent_id [0] = 0;
    int an = lws_hdr_custom_copy (wsi, agent_id, (int) id_size, "x-agenthold-agent:", 18);
    if (an <= 0) {
        agent_id [0] = 0;
        snprintf (why, why_size, "no X-Agenthold-Agent header");
        return 401;
    }
    for (int i = 0; i < an; i++)
        if (!isalnum ((unsigned char) agent_id [i]) && agent_id [i] != '-' && agent_id [i] != '_') {
            snprintf (why, why_size, "malformed X-Agenthold-Agent header");
            agent_id [0] = 0;
            return 401;
        }
    int n = lws_hdr_copy (wsi, auth, sizeof auth, WSI_TOKEN_HTTP_AUTHORIZATION);
    if (n <= 7 || strncasecmp (auth, "Bearer ", 7)) {
        snprintf (why, why_size, "no Authorization: Bearer header");
        return 401;
    }
    const char *token = auth + 7;
    while (*token == ' ')
        token++;
    char *hash = NULL;
    char *state = s_sandbox_state (self, agent_id, &hash);
    if (!state) {
        snprintf (why, why_size, "unknown agent");
        return 401;
    }
    char got [AH_TOKEN_HEX];
    ah_token_hash (token, got);
    bool match = hash && ah_token_equal (got, hash);
    int status = 0;
    if (!match) {
        snprintf (why, why_size, "token does not match the sandbox's current boot token");
        status = 401;
    }
    else if (!streq (state, "starting") && !streq (state, "running")) {
        snprintf (why, why_size, "sandbox is %s (needs starting or running)", state);
        status = 403;
    }
    free (state);
    free (hash);
    return status;
}

//  ---------------------------------------------------------------------
//  lws

//  Refuse an upgrade with an HTTP status. Written by hand: at this point
//  of an upgrade lws would answer "HTTP/1.0", which strict clients (Python
//  websockets) reject as an invalid response; we answer HTTP/1.1.
static void s_refuse (struct lws *wsi, int status, const char *why)
{
    const char *text = status == 401 ? "Unauthorized" : status == 403 ? "Forbidden"
                     : status == 404 ? "Not Found" : "Bad Request";
    uint8_t buf [LWS_PRE + 1024];
    char *p = (char *) buf + LWS_PRE;
    int n = snprintf (p, 1024, "HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
                      "content-length: %zu\r\nconnection: close\r\n\r\n%s\n",
                      status, text, strlen (why) + 1, why);
    if (n > 0 && n < 1024)
        lws_write (wsi, (unsigned char *) p, (size_t) n, LWS_WRITE_HTTP_HEADERS);
}

static int s_ws_callback (struct lws *wsi, enum lws_callback_reasons reason,
                          void *user, void *in, size_t len)
{
    ah_lwsloop_t *loop = ah_lwsloop_from_wsi (wsi);
    self_t *self = loop ? (self_t *) ah_lwsloop_user (loop) : NULL;
    pss_t *pss = (pss_t *) user;
    switch (reason) {
        case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: {
            //  The place where a refusal can still be an HTTP status.
            char uri [256] = "", agent [AGENT_ID_MAX], why [160];
            lws_hdr_copy (wsi, uri, sizeof uri, WSI_TOKEN_GET_URI);
            if (!in || strcmp ((const char *) in, "websocket") || strcmp (uri, AH_TUNNEL_PATH)) {
                ah_warn (AREA, "refused an upgrade to '%s' on '%.100s' (want websocket on %s)",
                         in ? (const char *) in : "", uri, AH_TUNNEL_PATH);
                s_refuse (wsi, 404, "the tunnel is a WebSocket on " AH_TUNNEL_PATH);
                return 1;
            }
            int status = s_authenticate (self, wsi, agent, sizeof agent, why, sizeof why);
            if (status) {
                ah_warn (AREA, "refused tunnel for agent '%s': %s (HTTP %d)",
                         agent [0] ? agent : "?", why, status);
                s_refuse (wsi, status, why);
                return 1;
            }
            return 0;
        }
        case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: {
            //  Checked again (the headers are still here) to keep the id.
            char why [160];
            int status = s_authenticate (self, wsi, pss->agent_id, sizeof pss->agent_id,
                                         why, sizeof why);
            if (status) {
                ah_warn (AREA, "refused tunnel for agent '%s': %s", pss->agent_id [0] ? pss->agent_id : "?", why);
                return 1;
            }
            return 0;
        }
        case LWS_CALLBACK_ESTABLISHED: {
            conn_t *conn = s_conn_new (self, wsi, pss->agent_id);
            if (!conn) {
                ah_error (AREA, "agent '%s': out of memory for a connection", pss->agent_id);
                return -1;
            }
            pss->conn = conn;
            ah_info (AREA, "agent '%s': tunnel connected", conn->agent_id);
            s_conn_start (self, conn);
            return 0;
        }
        case LWS_CALLBACK_RECEIVE: {
            conn_t *conn = pss->conn;
            if (!conn)
                return -1;
            if (conn->dead)
                return 0;
            if (!lws_frame_is_binary (wsi)) {
                ah_warn (AREA, "agent '%s': text message on the tunnel; closing", conn->agent_id);
                lws_close_reason (wsi, LWS_CLOSE_STATUS_UNACCEPTABLE_OPCODE,
                                  (unsigned char *) "binary only", 11);
                s_conn_close (conn, "sandbox connection lost (protocol error)", true, false, false);
                return -1;
            }
            conn->msg_bytes += len;
            if (conn->msg_bytes > AH_TUNNEL_MESSAGE_MAX) {
                ah_warn (AREA, "agent '%s': WebSocket message over %u bytes; closing",
                         conn->agent_id, AH_TUNNEL_MESSAGE_MAX);
                lws_close_reason (wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE,
                                  (unsigned char *) "message too big", 15);
                s_conn_close (conn, "sandbox connection lost (message too big)", true, false, false);
                return -1;
            }
            if (lws_is_final_fragment (wsi))
                conn->msg_bytes = 0;
            const char *err = NULL;
            if (ah_yamux_input (conn->yamux, (const uint8_t *) in, len, &err)) {
                char why [200];
                snprintf (why, sizeof why, "sandbox connection lost (yamux protocol error: %s)",
                          err ? err : "?");
                ah_warn (AREA, "agent '%s': %s", conn->agent_id, why);
                //  yamux queued go away 1: flush it, then close.
                s_conn_close (conn, why, true, false, true);
            }
            return 0;
        }
        case LWS_CALLBACK_SERVER_WRITEABLE: {
            conn_t *conn = pss->conn;
            if (!conn)
                return -1;
            size_t n = s_buf_size (&conn->outq);
            if (n) {
                if (n > WRITE_CHUNK)
                    n = WRITE_CHUNK;
                memcpy (conn->wbuf + LWS_PRE, s_buf_head (&conn->outq), n);
                if (lws_write (wsi, conn->wbuf + LWS_PRE, n, LWS_WRITE_BINARY) < (int) n) {
                    ah_warn (AREA, "agent '%s': write to the tunnel failed", conn->agent_id);
                    s_conn_close (conn, "sandbox connection lost", true, false, false);
                    return -1;
                }
                s_buf_drop (&conn->outq, n);
            }
            if (s_buf_size (&conn->outq))
                lws_callback_on_writable (wsi);
            else if (conn->dead) {
                lws_close_reason (wsi, LWS_CLOSE_STATUS_NORMAL, NULL, 0);
                return -1;
            }
            //  Backpressure: stop reading sandboxd while we cannot write.
            if (!conn->rx_paused && s_buf_size (&conn->outq) > OUTQ_HIGH) {
                conn->rx_paused = true;
                lws_rx_flow_control (wsi, 0);
            }
            else if (conn->rx_paused && s_buf_size (&conn->outq) < OUTQ_LOW) {
                conn->rx_paused = false;
                lws_rx_flow_control (wsi, 1);
            }
            return 0;
        }
        case LWS_CALLBACK_CLOSED: {
            conn_t *conn = pss->conn;
            if (!conn)
                return 0;
            conn->wsi = NULL;
            if (!conn->dead) {
                ah_warn (AREA, "agent '%s': tunnel connection closed by the peer", conn->agent_id);
                s_conn_close (conn, "sandbox connection lost", true, false, false);
            }
            else
                ah_info (AREA, "agent '%s': tunnel connection closed", conn->agent_id);
            pss->conn = NULL;
            s_conn_destroy (&conn);
            return 0;
        }
        default:
            return lws_callback_http_dummy (wsi, reason, user, in, len);
    }
}

static struct lws_protocols s_protocols [] = {
    //  First: also gets plain HTTP and upgrades that name no subprotocol.
    { AH_TUNNEL_SUBPROTOCOL, s_ws_callback, sizeof (pss_t), 65536, 0, NULL, 0 },
    { NULL, NULL, 0, 0, 0, NULL, 0 }
};

//  ---------------------------------------------------------------------
//  Bus messages

static void s_close_agent (self_t *self, const char *agent_id, const char *why)
{
    conn_t *conn = agent_id ? (conn_t *) zhashx_lookup (self->agents, agent_id) : NULL;
    if (conn) {
        ah_info (AREA, "agent '%s': closing the tunnel (%s)", agent_id, why);
        s_conn_close (conn, "sandbox connection closed (sandbox stopping)", false, false, true);
    }
}

static void s_chan_open_msg (self_t *self, ah_msg_t *msg)
{
    const char *agent_id = ah_msg_str (msg, "agent_id");
    size_t raw_size = 0;
    const void *raw = ah_msg_raw (msg, "header", &raw_size);
    ah_msg_t *r = NULL;
    if (!agent_id || !raw) {
        r = ah_msg_reply_error (msg, 400, "CHAN_OPEN needs agent_id (str) and header (a map)");
        s_send (self, &r, ah_msg_peer (msg));
        return;
    }
    char *err = NULL;
    ah_msg_t *header = ah_msg_decode ("", raw, raw_size, &err);
    if (!header || !ah_msg_str (header, "ch")) {
        r = ah_msg_reply_error (msg, 400, "CHAN_OPEN header must be a map with \"ch\" (%s)",
                                err ? err : "no ch");
        free (err);
        ah_msg_destroy (&header);
        s_send (self, &r, ah_msg_peer (msg));
        return;
    }
    conn_t *conn = (conn_t *) zhashx_lookup (self->agents, agent_id);
    if (!conn || !conn->ready) {
        char *state = s_sandbox_state (self, agent_id, NULL);
        if (conn)
            r = ah_msg_reply_error (msg, 409, "agent '%s' has no sandbox connection yet "
                                    "(sandboxd connected, hello pending)", agent_id);
        else
            r = ah_msg_reply_error (msg, 409, "agent '%s' has no sandbox connection (state %s)",
                                    agent_id, state ? state : "unknown: no such agent");
        free (state);
        ah_msg_destroy (&header);
        s_send (self, &r, ah_msg_peer (msg));
        return;
    }
    const char *why = NULL;
    chan_t *chan = s_chan_open (conn, CH_EXTERNAL, header, false, &why);
    ah_msg_destroy (&header);
    if (!chan) {
        r = ah_msg_reply_error (msg, 503, "agent '%s': %s", agent_id, why);
        s_send (self, &r, ah_msg_peer (msg));
        return;
    }
    snprintf (chan->opener, sizeof chan->opener, "%s", ah_msg_peer (msg));
    chan->req = ah_msg_int (msg, "req", 0);
}

//  The channel named by msg, if msg's sender opened it.
static chan_t *s_chan_of (self_t *self, ah_msg_t *msg)
{
    int64_t id = ah_msg_int (msg, "chan", -1);
    chan_t *chan = s_chan_find (self, id);
    if (chan && chan->kind == CH_EXTERNAL && streq (chan->opener, ah_msg_peer (msg))
        && chan->replied && chan->conn)
        return chan;
    //  Unknown (already closed, never opened, someone else's): a sender
    //  of data must learn the channel is gone.
    if (streq (ah_msg_type (msg), "CHAN_DATA") || streq (ah_msg_type (msg), "CHAN_EOF")) {
        ah_msg_t *m = ah_msg_new ("CHAN_CLOSE");
        ah_msg_set_int (m, "chan", id);
        ah_msg_set_str (m, "error", "no such channel");
        s_send (self, &m, ah_msg_peer (msg));
    }
    return NULL;
}

static void s_chan_data_msg (self_t *self, ah_msg_t *msg)
{
    chan_t *chan = s_chan_of (self, msg);
    if (!chan)
        return;
    size_t size = 0;
    const void *data = ah_msg_bin (msg, "data", &size);
    if (!data && !ah_msg_has (msg, "data"))
        return;
    if (size > AH_TUNNEL_DATA_MAX || s_buf_size (&chan->pending) + size > PENDING_MAX
        || chan->eof_pending) {
        ah_warn (AREA, "channel %lld: '%s' sent %zu bytes beyond its credit or after EOF; reset",
                 (long long) chan->id, chan->opener, size);
        s_chan_abort (self, chan, 0, "channel reset: the opener sent beyond its credit");
        return;
    }
    if (size && s_buf_append (&chan->pending, (const uint8_t *) data, size) == 0)
        s_chan_flush (self, chan);
}

static void s_chan_ack_msg (self_t *self, ah_msg_t *msg)
{
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

static void s_chan_eof_msg (self_t *self, ah_msg_t *msg)
{
    chan_t *chan = s_chan_of (self, msg);
    if (!chan)
        return;
    if (s_buf_size (&chan->pending))
        chan->eof_pending = true;
    else
        ah_yamux_close (chan->conn->yamux, chan->stream);
}

static void s_chan_close_msg (self_t *self, ah_msg_t *msg)
{
    int64_t id = ah_msg_int (msg, "chan", -1);
    chan_t *chan = s_chan_find (self, id);
    if (!chan || chan->kind != CH_EXTERNAL || !streq (chan->opener, ah_msg_peer (msg)))
        return;
    //  The opener is gone: reset the stream, say nothing more.
    conn_t *conn = chan->conn;
    uint32_t stream = chan->stream;
    s_chan_free (self, chan);
    if (conn && conn->yamux && !conn->dead)
        ah_yamux_reset (conn->yamux, stream);
}

static void s_on_bus (ah_lwsloop_t *loop, zsock_t *sock, void *arg)
{
    self_t *self = (self_t *) arg;
    char *err = NULL;
    ah_msg_t *msg = ah_msg_recv (sock, true, &err);
    if (!msg) {
        ah_warn (AREA, "malformed message on the bus: %s", err ? err : "?");
        free (err);
        return;
    }
    const char *type = ah_msg_type (msg);
    if (streq (type, "CHAN_OPEN"))
        s_chan_open_msg (self, msg);
    else if (streq (type, "CHAN_DATA"))
        s_chan_data_msg (self, msg);
    else if (streq (type, "CHAN_ACK"))
        s_chan_ack_msg (self, msg);
    else if (streq (type, "CHAN_EOF"))
        s_chan_eof_msg (self, msg);
    else if (streq (type, "CHAN_CLOSE"))
        s_chan_close_msg (self, msg);
    else if (streq (type, "TUNNEL_KICK"))
        s_close_agent (self, ah_msg_str (msg, "agent_id"), "kicked by lifecycle");
    else if (streq (type, "SANDBOX_STATE")) {
        const char *state = ah_msg_str (msg, "state");
        if (state && !streq (state, "starting") && !streq (state, "running"))
            s_close_agent (self, ah_msg_str (msg, "agent_id"), state);
    }
    else if (streq (type, "REPLY")) {
        //  Our events need no answer; a 503 means the receiver is absent.
        if (!ah_msg_bool (msg, "ok", true))
            ah_debug (AREA, "REPLY from '%s': %s", ah_msg_peer (msg),
                      ah_msg_str (msg, "error") ? ah_msg_str (msg, "error") : "?");
    }
    else {
        ah_warn (AREA, "unknown message type '%s' from '%s'", type, ah_msg_peer (msg));
        if (ah_msg_has (msg, "req")) {
            ah_msg_t *r = ah_msg_reply_error (msg, 400, "tunnel does not handle '%s'", type);
            s_send (self, &r, ah_msg_peer (msg));
        }
    }
    ah_msg_destroy (&msg);
}

static void s_on_pipe (ah_lwsloop_t *loop, zsock_t *sock, void *arg)
{
    self_t *self = (self_t *) arg;
    zmsg_t *m = zmsg_recv (sock);
    if (!m) {
        ah_lwsloop_stop (loop);
        return;
    }
    char *cmd = zmsg_popstr (m);
    if (cmd && streq (cmd, "$TERM"))
        ah_lwsloop_stop (loop);
    else if (cmd && streq (cmd, "PORT"))
        zstr_sendf (sock, "%d", self->port);
    else
        ah_warn (AREA, "unknown pipe command '%s'", cmd ? cmd : "");
    free (cmd);
    zmsg_destroy (&m);
}

//  ---------------------------------------------------------------------
//  The actor

static void s_self_destroy (self_t *self)
{
    self->terminating = true;
    //  Close every connection (channels fail), then lws frees them.
    zlistx_t *list = zlistx_new ();
    if (self->agents)
        for (conn_t *c = (conn_t *) zhashx_first (self->agents); c; c = (conn_t *) zhashx_next (self->agents))
            zlistx_add_end (list, c);
    for (conn_t *c = (conn_t *) zlistx_first (list); c; c = (conn_t *) zlistx_next (list))
        s_conn_close (c, "the server is shutting down", false, false, false);
    zlistx_destroy (&list);
    if (self->loop) {
        ah_lwsloop_unwatch (self->loop, self->pipe);
        if (self->bus)
            ah_lwsloop_unwatch (self->loop, self->bus);
    }
    //  Channels went with their connections; any left go before the loop
    //  (their timers live in it).
    if (self->chans)
        for (chan_t *c = (chan_t *) zhashx_first (self->chans); c; c = (chan_t *) zhashx_first (self->chans)) {
            c->conn = NULL;
            s_chan_free (self, c);
        }
    ah_lwsloop_destroy (&self->loop);       //  CLOSED callbacks free the conns
    zhashx_destroy (&self->chans);
    zhashx_destroy (&self->agents);
    zsock_destroy (&self->bus);
    ah_store_close (&self->store);
}

void ah_tunnel_actor (zsock_t *pipe, void *args)
{
    const ah_tunnel_args_t *a = (const ah_tunnel_args_t *) args;
    self_t self_data;
    self_t *self = &self_data;
    memset (self, 0, sizeof *self);
    self->pipe = pipe;
    self->next_chan = 1;
    self->ping_interval_ms = a->ping_interval_ms > 0 ? a->ping_interval_ms : AH_TUNNEL_PING_INTERVAL_MS;
    self->ping_timeout_ms = a->ping_timeout_ms > 0 ? a->ping_timeout_ms : AH_TUNNEL_PING_TIMEOUT_MS;
    self->open_timeout_ms = a->open_timeout_ms > 0 ? a->open_timeout_ms : AH_TUNNEL_OPEN_TIMEOUT_MS;
    self->stats_interval_ms = a->stats_interval_ms == 0 ? AH_TUNNEL_STATS_INTERVAL_MS
                            : a->stats_interval_ms;
    self->agents = zhashx_new ();
    self->chans = zhashx_new ();

    char host [256] = "";
    int port = 0;
    char *err = NULL;
    const char *listen = a->config && a->config->tunnel_listen ? a->config->tunnel_listen : ":8090";
    if (ah_config_split_listen (listen, host, sizeof host, &port)) {
        ah_error (AREA, "sandbox.tunnel_listen '%s' is not host:port or :port", listen);
        goto fail;
    }
    self->store = ah_store_open (a->db_path, false, &err);
    if (!self->store) {
        ah_error (AREA, "cannot open the database %s: %s", a->db_path ? a->db_path : "(none)",
                  err ? err : "?");
        free (err);
        goto fail;
    }
    self->bus = ah_bus_connect ("tunnel");
    if (!self->bus) {
        ah_error (AREA, "cannot connect to the bus");
        goto fail;
    }
    struct lws_context_creation_info info;
    memset (&info, 0, sizeof info);
    info.port = port;
    info.iface = host [0] ? host : NULL;
    info.protocols = s_protocols;
    info.user = self;
    info.options = LWS_SERVER_OPTION_VALIDATE_UTF8;
    info.timeout_secs = 10;             //  a handshake that stalls
    self->loop = ah_lwsloop_new (&info);
    if (!self->loop) {
        ah_error (AREA, "cannot listen on %s (sandbox.tunnel_listen)", listen);
        goto fail;
    }
    self->port = ah_lwsloop_port (self->loop);
    if (self->port <= 0) {
        ah_error (AREA, "cannot listen on %s (sandbox.tunnel_listen)", listen);
        goto fail;
    }
    if (ah_lwsloop_watch (self->loop, pipe, s_on_pipe, self)
        || ah_lwsloop_watch (self->loop, self->bus, s_on_bus, self))
        goto fail;
    ah_info (AREA, "listening for sandboxd on %s (port %d)", listen, self->port);
    zsock_signal (pipe, 0);
    ah_lwsloop_run (self->loop);
    s_self_destroy (self);
    return;
fail:
    s_self_destroy (self);
    zsock_signal (pipe, 1);
}
