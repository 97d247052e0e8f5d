/*  actors/tunnel_conn.c: the tunnel actor's connections (see
    tunnel_int.h and docs/tunnel.md): the WebSocket protocol sandboxd
    dials, its authentication, one yamux session per connection, ping,
    the hello that tells lifecycle sandboxd is there, and CPU samples
    for the sleeper.                                                   */
#include "actors/tunnel_int.h"
#include "common/egress_ca.h"
#include "common/version.h"
#include "common/ident.h"
#include "common/log.h"
#include "common/token.h"
#include "proto/channel.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define WRITE_CHUNK     (256u << 10)        //  largest WebSocket message we send from outq
#define TX_PACKET       (WRITE_CHUNK + 4096)    //  ... or an owned frame (256 KiB + its header)
#define OUTQ_HIGH       (1u << 20)          //  stop reading sandboxd above this
#define OUTQ_LOW        (256u << 10)        //  ... and read again below this

//  lws per-session data of a tunnel WebSocket.
typedef struct {
    conn_t *conn;
    char agent_id [AGENT_ID_MAX];   //  authenticated in FILTER
    bool reader;                    //  ... with the agent's reader token
} pss_t;

//  ---------------------------------------------------------------------
//  yamux callbacks of the session (ud = conn); the streams' are in
//  tunnel_chan.c

//  In a turn: written when it ends, with whatever else it queues
//  (ah_tun_conns_flush); else on WRITEABLE.
static void s_want_write (conn_t *conn)
{
    if (conn->flush_queued)
        return;
    if (!conn->dead && ah_actor_flush_later (conn->self->actor)) {
        conn->flush_queued = true;
        conn->flush_next = conn->self->flush;
        conn->self->flush = conn;
    }
    else
        lws_callback_on_writable (conn->wsi);
}

//  yamux's bytes (a frame: head and payload, either may be empty) queued
//  for the WebSocket in one copy.
static void s_ymx_output_data (void *ud, const uint8_t *head, size_t head_size,
                               const uint8_t *data, size_t size)
{
    conn_t *conn = (conn_t *) ud;
    if (!conn->wsi)
        return;
    if (conn->offer && data == conn->offer && size == conn->offer_size
    &&  head_size + LWS_PRE <= AH_MSG_BIN_HEADROOM) {
        out_frame_t *frame = (out_frame_t *) calloc (1, sizeof *frame);
        if (frame) {
            //  The header goes in the room in front of the payload.
            frame->block = conn->offer;
            frame->data = conn->offer - head_size;
            memcpy (frame->data, head, head_size);
            frame->size = head_size + size;
            frame->before = conn->frames ? conn->outq_since : ah_buf_size (&conn->outq);
            if (conn->frames_tail)
                conn->frames_tail->next = frame;
            else
                conn->frames = frame;
            conn->frames_tail = frame;
            conn->frames_bytes += frame->size;
            conn->outq_since = 0;
            conn->offer = NULL;     //  taken
            s_want_write (conn);
            return;
        }
    }
    conn->outq_since += head_size + size;
    if (ah_buf_append (&conn->outq, head, head_size) || ah_buf_append (&conn->outq, data, size)) {
        ah_error (AREA, "agent '%s': out of memory queueing tunnel output", conn->agent_id);
        ah_tun_conn_close (conn, "out of memory", true, false, false);
        return;
    }
    s_want_write (conn);
}

static void s_ymx_output (void *ud, const uint8_t *data, size_t size)
{
    s_ymx_output_data (ud, data, size, NULL, 0);
}

ssize_t ah_tun_conn_write_owned (conn_t *conn, uint32_t stream, uint8_t **block_p, size_t size)
{
    conn->offer = *block_p;
    conn->offer_size = size;
    ssize_t n = ah_yamux_write (conn->yamux, stream, *block_p, size);
    if (!conn->offer)
        *block_p = NULL;            //  taken: the queue frees it once written
    conn->offer = NULL;
    return n;
}

static void s_frames_free (conn_t *conn)
{
    while (conn->frames) {
        out_frame_t *frame = conn->frames;
        conn->frames = frame->next;
        ah_msg_bin_free (frame->block);
        free (frame);
    }
    conn->frames_tail = NULL;
    conn->frames_bytes = 0;
}

static void s_ymx_on_open (void *ud, uint32_t id)
{
    //  sandboxd opens only egress streams (docs/tunnel.md), and only a
    //  sandbox's: a reader's or a dead connection's are reset.
    conn_t *conn = (conn_t *) ud;
    if (conn->dead || conn->reader || !conn->ready || !ah_tun_chan_accept (conn, id, CH_EGRESS)) {
        ah_warn (AREA, "agent '%s': sandboxd opened stream %u %s; reset", conn->agent_id, id,
                 conn->reader ? "on a reader's connection" : "before its hello");
        ah_yamux_reset (conn->yamux, id);
    }
}

static void s_ymx_on_pong (void *ud, uint32_t opaque)
{
    conn_t *conn = (conn_t *) ud;
    conn->last_heard_ms = zclock_mono ();
}

//  sandboxd's own ping (every 15 s): its session is alive as surely as
//  when it answers ours.
static void s_ymx_on_ping (void *ud, uint32_t opaque)
{
    conn_t *conn = (conn_t *) ud;
    conn->last_heard_ms = zclock_mono ();
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
    ah_tun_conn_close (conn, code ? why : "sandbox connection lost", true, false, true);
}

//  ---------------------------------------------------------------------
//  Connections

static void s_flush_forget (conn_t *conn)
{
    if (!conn->flush_queued)
        return;
    for (conn_t **p = &conn->self->flush; *p; p = &(*p)->flush_next)
        if (*p == conn) {
            *p = conn->flush_next;
            break;
        }
    conn->flush_queued = false;
}

static void s_conn_destroy (conn_t **conn_p)
{
    conn_t *conn = *conn_p;
    if (!conn)
        return;
    s_flush_forget (conn);
    if (conn->splice_fd >= 0)
        close (conn->splice_fd);
    ah_yamux_destroy (&conn->yamux);
    zhashx_destroy (&conn->streams);
    ah_buf_free (&conn->outq);
    s_frames_free (conn);
    free (conn);
    *conn_p = NULL;
}

void ah_tun_conn_close (conn_t *conn, const char *why, bool lost, bool fatal, bool graceful)
{
    self_t *self = conn->self;
    if (conn->dead)
        return;
    conn->dead = true;
    zhashx_t *map = conn->reader ? self->readers : self->agents;
    if (zhashx_lookup (map, conn->agent_id) == conn)
        zhashx_delete (map, conn->agent_id);
    //  Its egress requests waiting for a worker go with their channels.
    conn->egress_wait = conn->egress_wait_tail = NULL;
    //  Fail every channel; collect first (failing edits the map).
    zlistx_t *list = zlistx_new ();
    for (chan_t *c = (chan_t *) zhashx_first (conn->streams); c; c = (chan_t *) zhashx_next (conn->streams))
        zlistx_add_end (list, c);
    for (chan_t *c = (chan_t *) zlistx_first (list); c; c = (chan_t *) zlistx_next (list)) {
        c->conn = NULL;                     //  its stream entry goes with the map
        if (c->kind == CH_EXTERNAL || c->egress || c->parked)
            ah_tun_chan_fail (self, c, 502, why);   //  an egress connection: recorded with why
        else
            ah_tun_chan_free (self, c);
    }
    zlistx_destroy (&list);
    zhashx_purge (conn->streams);
    if (lost && !self->terminating && conn->reader) {
        //  A reader is never the agent's sandbox: lifecycle hears of it
        //  as a reader alone (its hello, its end).
        ah_msg_t *m = ah_msg_new ("READER_LOST");
        ah_msg_set_str (m, "agent_id", conn->agent_id);
        ah_msg_set_str (m, "reason", why);
        ah_actor_send (self->actor, "lifecycle", &m);
    }
    else
    if (lost && !self->terminating) {
        ah_msg_t *m = ah_msg_new ("TUNNEL_LOST");
        ah_msg_set_str (m, "agent_id", conn->agent_id);
        ah_msg_set_str (m, "reason", why);
        ah_msg_set_bool (m, "fatal", fatal);
        ah_actor_send (self->actor, "lifecycle", &m);
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

//  Pings and stats go to every connection on one tunnel-wide timer each,
//  not one timer per connection: with a thousand connections the loop
//  wakes twice per interval instead of thousands of times, and each
//  wakeup polls every socket (bench/scale, idle CPU).
static void s_ping_map (self_t *self, zhashx_t *map, int64_t now, zlistx_t *lost)
{
    for (conn_t *conn = (conn_t *) zhashx_first (map); conn; conn = (conn_t *) zhashx_next (map)) {
        if (conn->dead || conn->frozen)
            continue;                   //  a frozen sandboxd cannot answer: not timed out
        if (now - conn->last_heard_ms > self->ping_timeout_ms)
            zlistx_add_end (lost, conn);
        else
        if (now - conn->last_heard_ms >= self->ping_interval_ms)
            ah_yamux_ping (conn->yamux, ++conn->ping_seq);
        //  else it pinged us or answered within the interval (sandboxd
        //  pings every 15 s itself): alive, and a ping of ours would only
        //  wake both loops again
    }
}

static void s_on_ping_tick (void *self_, void *arg)
{
    self_t *self = self_;
    int64_t now = zclock_mono ();
    zlistx_t *lost = zlistx_new ();         //  closing edits the maps
    s_ping_map (self, self->agents, now, lost);
    s_ping_map (self, self->readers, now, lost);
    for (conn_t *conn = (conn_t *) zlistx_first (lost); conn; conn = (conn_t *) zlistx_next (lost)) {
        ah_warn (AREA, "agent '%s': no ping answer for %lld ms; closing the connection",
                 conn->agent_id, (long long) (now - conn->last_heard_ms));
        ah_tun_conn_close (conn, "sandbox connection lost", true, false, false);
    }
    zlistx_destroy (&lost);
}

static void s_on_stats_tick (void *self_, void *arg)
{
    self_t *self = self_;
    ah_msg_t *h = ah_msg_new ("HEADER");
    ah_msg_set_str (h, "ch", "stats");
    for (conn_t *conn = (conn_t *) zhashx_first (self->agents); conn;
         conn = (conn_t *) zhashx_next (self->agents)) {
        const char *why = NULL;
        if (conn->ready && !conn->dead && !conn->frozen && !ah_tun_chan_open (conn, CH_STATS, h, true, &why))
            ah_debug (AREA, "agent '%s': stats: %s", conn->agent_id, why);
    }
    ah_msg_destroy (&h);
}

void ah_tun_stats_reply (self_t *self, chan_t *chan, ah_msg_t *reply)
{
    conn_t *conn = chan->conn;
    if (ah_msg_bool (reply, "ok", false) && ah_msg_has (reply, "cpu_ns")) {
        ah_msg_t *m = ah_msg_new ("AGENT_STATS");
        ah_msg_set_str (m, "agent_id", conn->agent_id);
        ah_msg_set_int (m, "cpu_ns", ah_msg_int (reply, "cpu_ns", 0));
        ah_msg_set_int (m, "at_ns", ah_msg_int (reply, "at_ns", 0));
        ah_actor_send (self->actor, "sleeper", &m);
    }
    //  Stays mapped until sandboxd's FIN completes the close (on_closed).
}

int ah_tun_hello_verdict (const ah_msg_t *reply, const char *agent_id, bool reader,
                          char *why, size_t why_size)
{
    const char *their_id = ah_msg_str (reply, "agent_id");
    if (!ah_msg_bool (reply, "ok", false)) {
        const char *code = ah_msg_str (reply, "code");
        const char *error = ah_msg_str (reply, "error");
        if (code && streq (code, "EVERSION"))
            snprintf (why, why_size, "sandboxd refused hello: %s (this server speaks tunnel "
                      "protocol %d: deploy the sandboxd that ships with this server and "
                      "restart the sandbox)", error ? error : "version mismatch", AH_PROTOCOL_VERSION);
        else
            snprintf (why, why_size, "sandboxd refused hello: %s %s",
                      code ? code : "?", error ? error : "");
        return -1;
    }
    int64_t version = ah_msg_int (reply, "version", -1);
    if (version != AH_PROTOCOL_VERSION) {
        //  What runs and what to deploy, as for a host agent (docs/hostd.md).
        const char *release = ah_msg_str (reply, "release");
        bool shown = release && *release && strlen (release) < 32
                  && strspn (release, "0123456789abcdefghijklmnopqrstuvwxyz.-+~") == strlen (release);
        snprintf (why, why_size, "agent '%s' runs agenthold sandboxd %s (tunnel protocol %lld); "
                  "this server speaks tunnel protocol %d: deploy the sandboxd of agenthold %s (it "
                  "ships next to agenthold on the host that runs the sandbox) and restart the agent",
                  agent_id, shown ? release : "of an unknown release", (long long) version,
                  AH_PROTOCOL_VERSION, AH_VERSION);
        return -1;
    }
    if (their_id && !streq (their_id, agent_id)) {
        snprintf (why, why_size, "sandboxd says it serves agent '%.64s' but authenticated as '%s'",
                  their_id, agent_id);
        return -1;
    }
    //  A reader token must come with a reader (sandboxd --read-only),
    //  and a reader only ever with a reader token: whatever the Pod runs,
    //  the tunnel carries reads alone on it (ah_tun_reader_channel).
    const char *mode = ah_msg_str (reply, "mode");
    bool says_reader = mode && streq (mode, "read");
    if (says_reader != reader) {
        snprintf (why, why_size, reader
                  ? "a reader token, but sandboxd's hello says mode '%.16s' (a reader says 'read')"
                  : "sandboxd says it is a reader (mode 'read') but came with the sandbox's boot token%.0s",
                  mode ? mode : "sandbox");
        return -1;
    }
    return 0;
}

void ah_tun_hello_reply (self_t *self, chan_t *chan, ah_msg_t *reply)
{
    conn_t *conn = chan->conn;
    char why [600];
    if (ah_tun_hello_verdict (reply, conn->agent_id, conn->reader, why, sizeof why)) {
        ah_error (AREA, "agent '%s': %s", conn->agent_id, why);
        ah_tun_conn_close (conn, why, true, true, true);
        return;
    }
    conn->ready = true;
    if (conn->reader) {
        ah_info (AREA, "agent '%s': its reader connected (reads of the sleeping agent's home)",
                 conn->agent_id);
        ah_msg_t *m = ah_msg_new ("READER_HELLO");
        ah_msg_set_str (m, "agent_id", conn->agent_id);
        ah_actor_send (self->actor, "lifecycle", &m);
        return;
    }
    ah_info (AREA, "agent '%s': sandboxd connected (tunnel protocol %d)", conn->agent_id,
             AH_PROTOCOL_VERSION);
    ah_msg_t *m = ah_msg_new ("SANDBOX_HELLO");
    ah_msg_set_str (m, "agent_id", conn->agent_id);
    ah_actor_send (self->actor, "lifecycle", &m);
    ah_tun_waiters_run (self, conn->agent_id);
    if (self->stats_interval_ms > 0 && !self->stats_tick)
        self->stats_tick = ah_actor_timer (self->actor, self->stats_interval_ms, self->stats_interval_ms,
                                           s_on_stats_tick, NULL);
}

static conn_t *s_conn_new (self_t *self, struct lws *wsi, const char *agent_id, bool reader)
{
    conn_t *conn = (conn_t *) calloc (1, sizeof *conn);
    if (!conn)
        return NULL;
    conn->self = self;
    conn->reader = reader;
    conn->wsi = wsi;
    conn->splice_fd = -1;
    snprintf (conn->agent_id, sizeof conn->agent_id, "%s", agent_id);
    conn->streams = zhashx_new ();
    //  lws writes each message's frame header in the LWS_PRE bytes in
    //  front of it: the queue keeps that room.
    ah_buf_init (&conn->outq, LWS_PRE);
    ah_yamux_callbacks_t cb = {
        .output = s_ymx_output, .output_data = s_ymx_output_data, .on_open = s_ymx_on_open, .on_data = ah_tun_ymx_on_data,
        .on_eof = ah_tun_ymx_on_eof, .on_closed = ah_tun_ymx_on_closed,
        .on_writable = ah_tun_ymx_on_writable, .on_pong = s_ymx_on_pong, .on_ping = s_ymx_on_ping, .on_goaway = s_ymx_on_goaway,
    };
    //  The server opens every stream: the yamux client role (odd ids).
    conn->yamux = ah_yamux_new (true, &cb, conn);
    if (!conn->streams || !conn->yamux) {
        s_conn_destroy (&conn);
        return NULL;
    }
    conn->last_heard_ms = zclock_mono ();
    return conn;
}

//  A new authenticated connection: replace the agent's old one, say hello.
static void s_conn_start (self_t *self, conn_t *conn)
{
    zhashx_t *map = conn->reader ? self->readers : self->agents;
    conn_t *old = (conn_t *) zhashx_lookup (map, conn->agent_id);
    if (old) {
        ah_info (AREA, "agent '%s': new %s connection replaces the old one", conn->agent_id,
                 conn->reader ? "reader" : "sandbox");
        ah_tun_conn_close (old, "tunnel reconnected", false, false, true);
    }
    zhashx_insert (map, conn->agent_id, conn);
    ah_msg_t *h = ah_msg_new ("HEADER");
    ah_msg_set_str (h, "ch", "hello");
    ah_msg_set_int (h, "version", AH_PROTOCOL_VERSION);
    ah_msg_set_str (h, "release", AH_VERSION);
    //  The egress CA, for the sandbox to trust (docs/egress.md "Secrets").
    if (!conn->reader && ah_egress_ca_pem (self->egress_ca))
        ah_msg_set_str (h, "egress_ca", ah_egress_ca_pem (self->egress_ca));
    const char *why = NULL;
    if (!ah_tun_chan_open (conn, CH_HELLO, h, true, &why)) {
        ah_error (AREA, "agent '%s': cannot open hello: %s", conn->agent_id, why);
        ah_tun_conn_close (conn, why, true, false, false);
    }
    ah_msg_destroy (&h);
    if (!conn->dead && !self->ping_tick)
        self->ping_tick = ah_actor_timer (self->actor, self->ping_interval_ms, self->ping_interval_ms,
                                          s_on_ping_tick, NULL);
}

//  ---------------------------------------------------------------------
//  Authentication

//  0 if the upgrade may go on (agent_id filled; *reader when the token
//  is the agent's reader token, READER_ALLOW), else the HTTP status to
//  refuse with; why says what for the log (never the token).
static int s_authenticate (self_t *self, struct lws *wsi, char *agent_id, size_t id_size,
                           bool *reader, char *why, size_t why_size)
{
    *reader = false;
    char auth [512];
    agent_id [0] = 0;
    if (lws_hdr_custom_copy (wsi, agent_id, (int) id_size, "x-agenthold-agent:", 18) <= 0) {
        agent_id [0] = 0;
        snprintf (why, why_size, "no X-Agenthold-Agent header");
        return 401;
    }
    const char *bad = ah_ident_check (AH_IDENT_AGENT_ID, agent_id);
    if (bad) {
        snprintf (why, why_size, "malformed X-Agenthold-Agent header: the agent id %s", bad);
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
    char *state = ah_tun_sandbox_state (self, agent_id, &hash);
    if (!state) {
        snprintf (why, why_size, "unknown agent");
        return 401;
    }
    char got [AH_TOKEN_HEX];
    ah_token_hash (token, got);
    bool match = hash && ah_token_equal (got, hash);
    const char *reader_hash = (const char *) zhashx_lookup (self->reader_hashes, agent_id);
    int status = 0;
    if (!match && reader_hash && ah_token_equal (got, reader_hash))
        //  The reader of a sleeping agent: whatever the sandbox's state
        //  (lifecycle revokes the token before the agent wakes).
        *reader = true;
    else
    if (!match) {
        snprintf (why, why_size, "token does not match the sandbox's current boot token");
        status = 401;
    }
    else if (!ah_tun_state_keeps (state)) {
        snprintf (why, why_size, "sandbox is %s (needs starting, running or frozen)", state);
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

static int s_on_receive (struct lws *wsi, conn_t *conn, const void *in, size_t len)
{
    if (!lws_frame_is_binary (wsi)) {
        ah_warn (AREA, "agent '%s': text message on the tunnel; closing", conn->agent_id);
        lws_close_reason (wsi, LWS_CLOSE_STATUS_UNACCEPTABLE_OPCODE, (unsigned char *) "binary only", 11);
        ah_tun_conn_close (conn, "sandbox connection lost (protocol error)", true, false, false);
        return -1;
    }
    conn->msg_bytes += len;
    if (conn->msg_bytes > AH_TUNNEL_MESSAGE_MAX) {
        ah_warn (AREA, "agent '%s': WebSocket message over %u bytes; closing",
                 conn->agent_id, AH_TUNNEL_MESSAGE_MAX);
        lws_close_reason (wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, (unsigned char *) "message too big", 15);
        ah_tun_conn_close (conn, "sandbox connection lost (message too big)", true, false, false);
        return -1;
    }
    if (lws_is_final_fragment (wsi))
        conn->msg_bytes = 0;
    const char *err = NULL;
    conn->last_heard_ms = zclock_mono ();   //  whatever it sends shows it alive
    if (ah_yamux_input (conn->yamux, (const uint8_t *) in, len, &err)) {
        char why [200];
        snprintf (why, sizeof why, "sandbox connection lost (yamux protocol error: %s)", err ? err : "?");
        ah_warn (AREA, "agent '%s': %s", conn->agent_id, why);
        //  yamux queued go away 1: flush it, then close.
        ah_tun_conn_close (conn, why, true, false, true);
    }
    return 0;
}

//  ---------------------------------------------------------------------
//  Spliced frames: an opener's bytes (an upload's body) go from the
//  client's socket to a pipe (the api's splice) and from the pipe to this
//  socket (ours), never through our memory. We write the WebSocket frame
//  ourselves (server to client: unmasked, no extension on the tunnel),
//  only when lws and the queue hold nothing of the connection's, and
//  finish it before anything else is written.

//  The frame in progress, as far as the socket takes it now: 0 (done, or
//  waiting for WRITEABLE), -1 when the socket broke (closed soon).
static int s_splice_more (conn_t *conn)
{
    int fd = lws_get_socket_fd (conn->wsi);
    while (conn->splice_head_sent < conn->splice_head_size || conn->splice_left) {
        bool head = conn->splice_head_sent < conn->splice_head_size;
        ssize_t w = head ? send (fd, conn->splice_head + conn->splice_head_sent,
                                 conn->splice_head_size - conn->splice_head_sent,
                                 MSG_NOSIGNAL | MSG_DONTWAIT | MSG_MORE)
                         : splice (conn->splice_fd, NULL, fd, NULL, conn->splice_left,
                                   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            lws_callback_on_writable (conn->wsi);
            return 0;
        }
        if (w == 0)
            errno = 0;              //  a splice of 0: the pipe lost bytes it held (cannot happen)
        if (w <= 0)
            goto broken;
        if (head)
            conn->splice_head_sent += (size_t) w;
        else
            conn->splice_left -= (size_t) w;
    }
    close (conn->splice_fd);
    conn->splice_fd = -1;
    chan_t *chan = ah_tun_chan_find (conn->self, conn->splice_chan);
    if (chan && chan->conn == conn)
        ah_tun_chan_ack (conn->self, chan, conn->splice_frame);
    return 0;
broken:
    ah_warn (AREA, "agent '%s': write to the tunnel failed: %s", conn->agent_id,
             errno ? strerror (errno) : "the pipe ran dry");
    close (conn->splice_fd);
    conn->splice_fd = -1;
    conn->splice_left = 0;
    conn->splice_broken = true;
    //  Closed from lws's side (CLOSED tells lifecycle): the caller may be
    //  inside a channel's flush.
    lws_set_timeout (conn->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
    return -1;
}

ssize_t ah_tun_conn_splice (conn_t *conn, chan_t *chan)
{
    if (!conn->wsi || conn->dead || conn->splice_broken || lws_is_ssl (conn->wsi))
        return -1;
    if (conn->splice_fd >= 0 || ah_buf_size (&conn->outq) || conn->frames
    ||  lws_partial_buffered (conn->wsi)) {
        conn->splice_wait = true;   //  the channel is flushed again once all that is out
        lws_callback_on_writable (conn->wsi);
        return 0;
    }
    uint8_t yhead [AH_YAMUX_HEADER_SIZE];
    ssize_t n = ah_yamux_write_header (conn->yamux, chan->stream, chan->pipe_bytes, yhead);
    if (n <= 0)
        return n;
    int fd = fcntl (chan->pipe_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        //  The window is taken and no byte can follow the header: this
        //  connection's stream of frames cannot go on.
        ah_error (AREA, "agent '%s': cannot hold a channel's pipe: %s", conn->agent_id, strerror (errno));
        lws_set_timeout (conn->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
        return -1;
    }
    //  FIN and binary; the length in 7, 7+16 or 7+64 bits; no mask.
    size_t len = AH_YAMUX_HEADER_SIZE + (size_t) n, h = 0;
    uint8_t *head = conn->splice_head;
    head [h++] = 0x82;
    if (len < 126)
        head [h++] = (uint8_t) len;
    else if (len <= 0xffff) {
        head [h++] = 126;
        head [h++] = (uint8_t) (len >> 8);
        head [h++] = (uint8_t) len;
    }
    else {
        head [h++] = 127;
        for (int shift = 56; shift >= 0; shift -= 8)
            head [h++] = (uint8_t) ((uint64_t) len >> shift);
    }
    memcpy (head + h, yhead, sizeof yhead);
    conn->splice_head_size = h + sizeof yhead;
    conn->splice_head_sent = 0;
    conn->splice_fd = fd;
    conn->splice_left = (size_t) n;
    conn->splice_chan = chan->id;
    conn->splice_frame = (size_t) n;
    chan->pipe_bytes -= (size_t) n;
    return s_splice_more (conn) < 0 ? -1 : n;
}

//  The queue drained: channels whose pipes waited for it go on. Found by
//  id again each (a flush may end a channel).
static void s_splice_waiters (conn_t *conn)
{
    conn->splice_wait = false;
    int64_t ids [64];
    size_t n = 0;
    for (chan_t *c = (chan_t *) zhashx_first (conn->streams); c; c = (chan_t *) zhashx_next (conn->streams))
        if (c->pipe_bytes && n < sizeof ids / sizeof ids [0])
            ids [n++] = c->id;
    for (size_t i = 0; i < n && !conn->dead && conn->splice_fd < 0; i++) {
        chan_t *c = ah_tun_chan_find (conn->self, ids [i]);
        if (c && c->conn == conn)
            ah_tun_chan_flush (conn->self, c);
    }
    if (n == sizeof ids / sizeof ids [0])
        conn->splice_wait = true;   //  more than that: the next drain takes the rest
}

//  One message of the queue, written in place (LWS_PRE headroom): the
//  next owned frame when its turn has come, else outq's bytes up to it.
//  A spliced frame in progress goes first.
static int s_on_writeable (struct lws *wsi, conn_t *conn)
{
    if (conn->splice_fd >= 0) {
        if (s_splice_more (conn) < 0)
            return 0;               //  closing (its timeout)
        if (conn->splice_fd >= 0)
            return 0;               //  WRITEABLE again when the socket has room
    }
    out_frame_t *frame = conn->frames;
    uint8_t *p = ah_buf_head (&conn->outq);
    size_t n = ah_buf_size (&conn->outq);
    if (frame && frame->before == 0) {
        p = frame->data;
        n = frame->size;
    }
    else {
        if (frame && n > frame->before)
            n = frame->before;
        if (n > WRITE_CHUNK)
            n = WRITE_CHUNK;
        frame = NULL;
    }
    if (n) {
        if (lws_write (wsi, p, n, LWS_WRITE_BINARY) < (int) n) {
            ah_warn (AREA, "agent '%s': write to the tunnel failed", conn->agent_id);
            ah_tun_conn_close (conn, "sandbox connection lost", true, false, false);
            return -1;
        }
        if (frame) {
            conn->frames = frame->next;
            if (!conn->frames)
                conn->frames_tail = NULL;
            conn->frames_bytes -= frame->size;
            ah_msg_bin_free (frame->block);
            free (frame);
        }
        else {
            ah_buf_consume (&conn->outq, n);
            if (conn->frames)
                conn->frames->before -= n;
        }
    }
    size_t queued = ah_buf_size (&conn->outq) + conn->frames_bytes;
    if (queued)
        lws_callback_on_writable (wsi);
    else if (conn->dead) {
        lws_close_reason (wsi, LWS_CLOSE_STATUS_NORMAL, NULL, 0);
        return -1;
    }
    else if (conn->splice_wait)
        s_splice_waiters (conn);
    //  Backpressure: stop reading sandboxd while we cannot write.
    if (!conn->rx_paused && queued > OUTQ_HIGH) {
        conn->rx_paused = true;
        lws_rx_flow_control (wsi, 0);
    }
    else if (conn->rx_paused && queued < OUTQ_LOW) {
        conn->rx_paused = false;
        lws_rx_flow_control (wsi, 1);
    }
    return 0;
}

//  The turn's output, written now: straight to the socket when neither
//  lws nor the queue holds anything ahead of it (no WRITEABLE round: one
//  send), else on the next WRITEABLE as before.
void ah_tun_conns_flush (void *self_)
{
    self_t *self = self_;
    while (self->flush) {
        conn_t *conn = self->flush;
        self->flush = conn->flush_next;
        conn->flush_queued = false;
        conn->flush_next = NULL;
        if (!conn->wsi)
            continue;
        if (conn->dead || lws_partial_buffered (conn->wsi))
            lws_callback_on_writable (conn->wsi);
        else
            s_on_writeable (conn->wsi, conn);   //  a failure closes it (asynchronously)
    }
}

static int s_ws_serve (struct lws *wsi, enum lws_callback_reasons reason,
                       void *user, void *in, size_t len);

//  The callbacks that carry a connection's work are turns of the actor
//  (common/actor.h): what they hand the api, and what the api's handlers
//  send back, is delivered before the callback returns.
static int s_ws_callback (struct lws *wsi, enum lws_callback_reasons reason,
                          void *user, void *in, size_t len)
{
    switch (reason) {
        case LWS_CALLBACK_ESTABLISHED:
        case LWS_CALLBACK_RECEIVE:
        case LWS_CALLBACK_SERVER_WRITEABLE:
        case LWS_CALLBACK_CLOSED: {
            ah_lwsloop_t *loop = ah_lwsloop_from_wsi (wsi);
            self_t *self = loop ? (self_t *) ah_lwsloop_user (loop) : NULL;
            ah_actor_t *actor = self ? self->actor : NULL;
            ah_actor_turn_begin (actor);
            int rc = s_ws_serve (wsi, reason, user, in, len);
            ah_actor_turn_end (actor);
            return rc;
        }
        default:
            return s_ws_serve (wsi, reason, user, in, len);
    }
}

static int s_ws_serve (struct lws *wsi, enum lws_callback_reasons reason,
                       void *user, void *in, size_t len)
{
    ah_lwsloop_t *loop = ah_lwsloop_from_wsi (wsi);
    self_t *self = loop ? (self_t *) ah_lwsloop_user (loop) : NULL;
    pss_t *pss = (pss_t *) user;
    char why [200];
    switch (reason) {
        case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: {
            //  The place where a refusal can still be an HTTP status.
            char uri [256] = "", agent [AGENT_ID_MAX];
            lws_hdr_copy (wsi, uri, sizeof uri, WSI_TOKEN_GET_URI);
            if (!in || strcmp ((const char *) in, "websocket") || strcmp (uri, AH_TUNNEL_PATH)) {
                ah_warn (AREA, "refused an upgrade to '%s' on '%.100s' (want websocket on %s)",
                         in ? (const char *) in : "", uri, AH_TUNNEL_PATH);
                s_refuse (wsi, 404, "the tunnel is a WebSocket on " AH_TUNNEL_PATH);
                return 1;
            }
            bool reader;
            int status = s_authenticate (self, wsi, agent, sizeof agent, &reader, why, sizeof why);
            if (status) {
                ah_warn (AREA, "refused tunnel for agent '%s': %s (HTTP %d)",
                         agent [0] ? agent : "?", why, status);
                s_refuse (wsi, status, why);
                return 1;
            }
            return 0;
        }
        case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
            //  Checked again (the headers are still here) to keep the id.
            if (s_authenticate (self, wsi, pss->agent_id, sizeof pss->agent_id, &pss->reader, why,
                                sizeof why)) {
                ah_warn (AREA, "refused tunnel for agent '%s': %s", pss->agent_id [0] ? pss->agent_id : "?", why);
                return 1;
            }
            return 0;
        case LWS_CALLBACK_ESTABLISHED:
            if (!(pss->conn = s_conn_new (self, wsi, pss->agent_id, pss->reader))) {
                ah_error (AREA, "agent '%s': out of memory for a connection", pss->agent_id);
                return -1;
            }
            ah_info (AREA, "agent '%s': tunnel connected%s", pss->agent_id,
                     pss->reader ? " (its reader)" : "");
            s_conn_start (self, pss->conn);
            return 0;
        case LWS_CALLBACK_RECEIVE:
            if (!pss->conn)
                return -1;
            return pss->conn->dead ? 0 : s_on_receive (wsi, pss->conn, in, len);
        case LWS_CALLBACK_SERVER_WRITEABLE:
            return pss->conn ? s_on_writeable (wsi, pss->conn) : -1;
        case LWS_CALLBACK_CLOSED: {
            conn_t *conn = pss->conn;
            if (!conn)
                return 0;
            conn->wsi = NULL;
            if (!conn->dead) {
                ah_warn (AREA, "agent '%s': tunnel connection closed by the peer", conn->agent_id);
                ah_tun_conn_close (conn, "sandbox connection lost", true, false, false);
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

//  Reads of 64 KiB (each connection's rx buffer: 1,000 idle sandboxd
//  keep theirs, bench/scale); a message of up to TX_PACKET in one send(). With
//  tx_packet_size 0 lws would cap every send() at the rx buffer's size,
//  copy the rest of each 256 KiB message aside and send it in three more
//  WRITEABLE rounds.
const struct lws_protocols ah_tun_protocols [] = {
    //  First: also gets plain HTTP and upgrades that name no subprotocol.
    { AH_TUNNEL_SUBPROTOCOL, s_ws_callback, sizeof (pss_t), 65536, 0, NULL, TX_PACKET },
    { NULL, NULL, 0, 0, 0, NULL, 0 }
};
