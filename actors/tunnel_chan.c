/*  actors/tunnel_chan.c: the tunnel actor's channels, one yamux stream
    each (see tunnel_int.h for the flow control, docs/tunnel.md for the
    channel headers).                                                  */
#include "actors/tunnel_int.h"
#include "common/log.h"
#include "proto/channel.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#define REPLY_BUF_MAX   (4 + AH_CHAN_HEADER_MAX + AH_YAMUX_INITIAL_WINDOW)

static char *s_key (char *buf, size_t size, int64_t n)
{
    snprintf (buf, size, "%lld", (long long) n);
    return buf;
}

chan_t *ah_tun_chan_find (self_t *self, int64_t id)
{
    char key [24];
    return (chan_t *) zhashx_lookup (self->chans, s_key (key, sizeof key, id));
}

static chan_t *s_by_stream (conn_t *conn, uint32_t stream)
{
    char key [24];
    return (chan_t *) zhashx_lookup (conn->streams, s_key (key, sizeof key, stream));
}

void ah_tun_chan_free (self_t *self, chan_t *chan)
{
    char key [24];
    if (chan->egress)
        ah_tun_egress_end (self, chan, NULL);
    if (chan->parked)
        ah_tun_egress_unpark (self, chan, NULL);
    ah_actor_timer_end (self->actor, chan->open_timer);
    if (chan->conn)
        zhashx_delete (chan->conn->streams, s_key (key, sizeof key, chan->stream));
    ah_buf_free (&chan->rbuf);
    ah_buf_free (&chan->pending);
    if (chan->pipe_fd >= 0)
        close (chan->pipe_fd);      //  a frame in progress holds its own
    zhashx_delete (self->chans, s_key (key, sizeof key, chan->id));
    free (chan);
}

void ah_tun_chan_fail (self_t *self, chan_t *chan, int status, const char *error)
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
        ah_actor_send (self->actor, chan->opener, &m);
    }
    else if (chan->egress)
        ah_tun_egress_end (self, chan, error);      //  recorded with why it ended
    else if (chan->parked)
        ah_tun_egress_unpark (self, chan, error);   //  so is a request still parked
    else if (chan->kind == CH_HELLO && chan->conn && !chan->conn->dead && !chan->conn->ready) {
        conn_t *conn = chan->conn;
        char why [300];
        snprintf (why, sizeof why, "hello failed: %s", error ? error : "channel closed");
        ah_tun_chan_free (self, chan);
        ah_tun_conn_close (conn, why, true, false, false);
        return;
    }
    ah_tun_chan_free (self, chan);
}

//  Forgotten first, so on_closed finds nothing and says nothing more.
void ah_tun_chan_abort (self_t *self, chan_t *chan, int status, const char *error)
{
    conn_t *conn = chan->conn;
    uint32_t stream = chan->stream;
    ah_tun_chan_fail (self, chan, status, error);
    if (conn && conn->yamux && !conn->dead)
        ah_yamux_reset (conn->yamux, stream);
}

static void s_on_open_timeout (void *self_, void *arg)
{
    self_t *self = self_;
    chan_t *chan = (chan_t *) arg;
    chan->open_timer = 0;
    char error [200];
    snprintf (error, sizeof error, "sandboxd did not answer the %s channel within %d ms",
              chan->ch, self->open_timeout_ms);
    ah_warn (AREA, "agent '%s': %s", chan->conn->agent_id, error);
    ah_tun_chan_abort (self, chan, 504, error);
}

//  A channel on stream, known by its id and its stream; NULL out of memory.
static chan_t *s_chan_new (conn_t *conn, uint32_t stream, chan_kind_t kind, const char *ch)
{
    self_t *self = conn->self;
    chan_t *chan = (chan_t *) calloc (1, sizeof *chan);
    if (!chan)
        return NULL;
    chan->id = self->next_chan++;
    chan->stream = stream;
    chan->conn = conn;
    chan->kind = kind;
    chan->pipe_fd = -1;
    snprintf (chan->ch, sizeof chan->ch, "%s", ch);
    char key [24];
    zhashx_insert (self->chans, s_key (key, sizeof key, chan->id), chan);
    zhashx_insert (conn->streams, s_key (key, sizeof key, stream), chan);
    return chan;
}

chan_t *ah_tun_chan_open (conn_t *conn, chan_kind_t kind, const ah_msg_t *header,
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
    const char *ch = ah_msg_str (header, "ch");
    chan_t *chan = s_chan_new (conn, stream, kind, ch ? ch : "?");
    if (!chan) {
        free (hdr);
        ah_yamux_reset (conn->yamux, stream);
        *why = "out of memory";
        return NULL;
    }
    //  The header fits the fresh 256 KiB window: yamux takes it whole.
    ssize_t n = ah_yamux_write (conn->yamux, stream, hdr, hdr_size);
    free (hdr);
    if (n != (ssize_t) hdr_size) {
        ah_tun_chan_free (self, chan);
        ah_yamux_reset (conn->yamux, stream);
        *why = "the channel header could not be written";
        return NULL;
    }
    if (fin)
        ah_yamux_close (conn->yamux, stream);
    chan->open_timer = ah_actor_timer (self->actor, self->open_timeout_ms, 0, s_on_open_timeout, chan);
    return chan;
}

chan_t *ah_tun_chan_accept (conn_t *conn, uint32_t stream, chan_kind_t kind)
{
    self_t *self = conn->self;
    chan_t *chan = s_chan_new (conn, stream, kind, "egress");
    if (!chan)
        return NULL;
    chan->open_timer = ah_actor_timer (self->actor, self->open_timeout_ms, 0, s_on_open_timeout, chan);
    return chan;
}

//  Pass bytes from sandboxd to the opener as CHAN_DATA (<= 64 KiB each).
static void s_forward (self_t *self, chan_t *chan, const uint8_t *data, size_t size)
{
    while (size) {
        size_t n = size > AH_TUNNEL_DATA_MAX ? AH_TUNNEL_DATA_MAX : size;
        ah_msg_t *m = ah_msg_new ("CHAN_DATA");
        ah_msg_set_int (m, "chan", chan->id);
        ah_msg_set_bin_borrowed (m, "data", data, n);
        ah_actor_send (self->actor, chan->opener, &m);
        chan->unacked += n;
        data += n;
        size -= n;
    }
}

//  The HTTP-like status for sandboxd's error code (docs/messages.md).
static int s_status (const char *code)
{
    if (!code)
        return 500;
    if (streq (code, "ENOENT"))
        return 404;
    if (streq (code, "EACCES"))
        return 403;
    if (streq (code, "EINVAL"))
        return 400;
    if (streq (code, "EEXIST") || streq (code, "ENOTDIR") || streq (code, "EISDIR") || streq (code, "ENOTEMPTY"))
        return 409;
    if (streq (code, "ENOSPC"))
        return 507;
    if (streq (code, "ETIMEDOUT"))
        return 504;
    if (streq (code, "EPROTO") || streq (code, "EVERSION"))
        return 502;
    return 500;
}

//  sandboxd's reply header is complete.
static void s_replied (self_t *self, chan_t *chan, ah_msg_t *reply, size_t used)
{
    conn_t *conn = chan->conn;
    chan->replied = true;
    ah_actor_timer_end (self->actor, chan->open_timer);
    chan->open_timer = 0;
    //  The header bytes are ours: give them back to the window now.
    ah_yamux_consumed (conn->yamux, chan->stream, used);
    if (chan->kind == CH_HELLO) {
        ah_tun_hello_reply (self, chan, reply);
        return;
    }
    if (chan->kind == CH_STATS) {
        ah_tun_stats_reply (self, chan, reply);
        return;
    }
    uint8_t *raw = NULL;
    size_t raw_size = 0;
    ah_msg_encode (reply, &raw, &raw_size);
    bool ok = ah_msg_bool (reply, "ok", false);
    ah_msg_t *m = ah_msg_new ("REPLY");
    ah_msg_set_int (m, "req", chan->req);
    ah_msg_set_bool (m, "ok", ok);
    if (ok) {
        ah_msg_set_int (m, "status", 200);
        ah_msg_set_int (m, "chan", chan->id);
    }
    else {
        //  Refused: the opener gets the reason, the stream is dropped.
        const char *code = ah_msg_str (reply, "code");
        const char *error = ah_msg_str (reply, "error");
        ah_msg_set_int (m, "status", s_status (code));
        ah_msg_set_str (m, "code", code ? code : "EIO");
        ah_msg_set_str (m, "error", error ? error : "sandboxd refused the channel");
    }
    if (raw)
        ah_msg_set_raw (m, "reply", raw, raw_size);
    free (raw);
    ah_actor_send (self->actor, chan->opener, &m);
    if (!ok) {
        uint32_t stream = chan->stream;
        ah_tun_chan_free (self, chan);
        ah_yamux_reset (conn->yamux, stream);
        return;
    }
    //  Bytes that came after the header go on as data.
    if (ah_buf_size (&chan->rbuf) > used)
        s_forward (self, chan, ah_buf_head (&chan->rbuf) + used, ah_buf_size (&chan->rbuf) - used);
    ah_buf_free (&chan->rbuf);
}

//  Tell the opener yamux took bytes of its credit.
void ah_tun_chan_ack (self_t *self, chan_t *chan, size_t bytes)
{
    if (chan->kind != CH_EXTERNAL)
        return;
    ah_msg_t *m = ah_msg_new ("CHAN_ACK");
    ah_msg_set_int (m, "chan", chan->id);
    ah_msg_set_int (m, "bytes", (int64_t) bytes);
    ah_actor_send (self->actor, chan->opener, &m);
}

void ah_tun_chan_flush (self_t *self, chan_t *chan)
{
    conn_t *conn = chan->conn;
    if (chan->kind == CH_EGRESS) {
        ah_tun_egress_writable (self, chan);
        return;
    }
    size_t taken = 0;
    while (ah_buf_size (&chan->pending)) {
        ssize_t n = ah_yamux_write (conn->yamux, chan->stream, ah_buf_head (&chan->pending),
                                    ah_buf_size (&chan->pending));
        if (n <= 0)
            break;
        ah_buf_consume (&chan->pending, (size_t) n);
        taken += (size_t) n;
    }
    if (taken)
        ah_tun_chan_ack (self, chan, taken);
    //  Then what the pipe holds (after pending: the opener's order), each
    //  frame ACKed when it is out.
    while (!ah_buf_size (&chan->pending) && chan->pipe_bytes) {
        if (ah_tun_conn_splice (conn, chan) <= 0)
            return;                 //  flushed again when the window or the socket opens
    }
    if (chan->eof_pending && !ah_buf_size (&chan->pending) && !chan->pipe_bytes) {
        chan->eof_pending = false;
        ah_yamux_close (conn->yamux, chan->stream);
    }
}

//  ---------------------------------------------------------------------
//  yamux callbacks (ud = conn)

void ah_tun_ymx_on_data (void *ud, uint32_t id, const uint8_t *data, size_t size)
{
    conn_t *conn = (conn_t *) ud;
    self_t *self = conn->self;
    if (conn->dead)
        return;
    chan_t *chan = s_by_stream (conn, id);
    if (!chan) {
        ah_yamux_consumed (conn->yamux, id, size);  //  nobody wants it
        return;
    }
    if (chan->replied) {
        if (chan->kind == CH_EXTERNAL)
            s_forward (self, chan, data, size);
        else
        if (chan->kind == CH_EGRESS)
            ah_tun_egress_data (self, chan, data, size);
        else
            ah_yamux_consumed (conn->yamux, id, size);
        return;
    }
    if (ah_buf_size (&chan->rbuf) + size > REPLY_BUF_MAX || ah_buf_append (&chan->rbuf, data, size)) {
        ah_tun_chan_abort (self, chan, 502, "sandboxd sent an oversized reply header");
        return;
    }
    ah_msg_t *reply = NULL;
    size_t used = 0;
    const char *err = NULL;
    int rc = ah_chan_header_decode (ah_buf_head (&chan->rbuf), ah_buf_size (&chan->rbuf),
                                    &reply, &used, &err);
    if (rc == 0)
        return;
    if (rc > 0 && chan->kind == CH_EGRESS) {
        //  Not a reply: the request of a stream sandboxd opened.
        chan->replied = true;
        ah_actor_timer_end (self->actor, chan->open_timer);
        chan->open_timer = 0;
        //  The request is ours; what came after it is the connection's,
        //  given back to the window once the upstream took it.
        ah_yamux_consumed (conn->yamux, id, used);
        ah_buf_t rest = chan->rbuf;
        memset (&chan->rbuf, 0, sizeof chan->rbuf);
        ah_tun_egress (self, chan, reply, ah_buf_head (&rest) + used, ah_buf_size (&rest) - used);
        ah_buf_free (&rest);
        ah_msg_destroy (&reply);
        return;
    }
    if (rc < 0) {
        char error [200];
        snprintf (error, sizeof error, "sandboxd sent a malformed reply header: %s", err);
        ah_warn (AREA, "agent '%s': %s channel: %s", conn->agent_id, chan->ch, error);
        ah_tun_chan_abort (self, chan, 502, error);
        return;
    }
    s_replied (self, chan, reply, used);
    ah_msg_destroy (&reply);
}

void ah_tun_ymx_on_eof (void *ud, uint32_t id)
{
    conn_t *conn = (conn_t *) ud;
    if (conn->dead)
        return;
    chan_t *chan = s_by_stream (conn, id);
    if (!chan)
        return;
    if (!chan->replied) {
        ah_tun_chan_abort (conn->self, chan, 502, "sandboxd closed the channel without a reply");
        return;
    }
    if (chan->kind == CH_EGRESS) {
        ah_tun_egress_eof (conn->self, chan);
        return;
    }
    if (chan->kind == CH_EXTERNAL) {
        ah_msg_t *m = ah_msg_new ("CHAN_EOF");
        ah_msg_set_int (m, "chan", chan->id);
        ah_actor_send (conn->self->actor, chan->opener, &m);
    }
}

void ah_tun_ymx_on_closed (void *ud, uint32_t id, bool reset)
{
    conn_t *conn = (conn_t *) ud;
    if (conn->dead)
        return;
    chan_t *chan = s_by_stream (conn, id);
    if (!chan)
        return;                     //  we forgot it first (our own reset)
    if (!chan->replied)
        ah_tun_chan_fail (conn->self, chan, 502, reset ? "sandboxd reset the channel"
                                                       : "sandboxd closed the channel without a reply");
    else
        ah_tun_chan_fail (conn->self, chan, 0, reset ? "sandboxd reset the channel" : NULL);
}

void ah_tun_ymx_on_writable (void *ud, uint32_t id)
{
    conn_t *conn = (conn_t *) ud;
    if (conn->dead)
        return;
    chan_t *chan = s_by_stream (conn, id);
    if (chan)
        ah_tun_chan_flush (conn->self, chan);
}
