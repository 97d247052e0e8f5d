/*  actors/api.c: the REST API actor (see api.h, docs/api.md).

    DESIGN. One thread, this actor's, owns everything here: the lws context
    and every wsi in it, the pipe, its bus DEALER ("api") and its SQLite
    connection. The lws service loop is the actor's one loop: the zmq
    sockets ride in it (s_loop_*: their ZMQ_FDs are adopted into lws), so
    lws callbacks and bus messages take turns on the same thread and no
    lock is needed anywhere.

    A request lives in its connection's lws per-session data (req_t). Reads
    are answered at once from SQLite. A change goes to lifecycle with a
    fresh req id and the req_t is linked into self->pending until the REPLY
    (or AH_API_REPLY_TIMEOUT_S) completes it. With ?wait=1 it stays linked
    after the REPLY until the agent leaves its transitional state: checked
    on every SANDBOX_STATE lifecycle sends us and on each tick. When lws
    closes a connection its req_t is unlinked first, so a late REPLY finds
    nothing and is dropped.

    The response is built whole (JSON, small), then written in HTTP
    WRITEABLE callbacks: headers once, then the body in chunks, one
    lws_write per callback. Streaming routes (terminal, files: CHAN_*
    messages) will add req kinds that write as data arrives.            */
#include "actors/api.h"
#include "actors/api_events.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/bus.h"
#include "common/token.h"
#include "common/lwsloop.h"
#include "store/store.h"

#include <libwebsockets.h>
#include <jansson.h>
#include <msgpack.h>
#include <fnmatch.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#define TICK_US             (250 * LWS_US_PER_MS)
#define MAX_PATH            512
#define MAX_KEY             128
#define MAX_AUTH            512
#define CHUNK               16384
//  A refused body up to this size is read and dropped before the answer,
//  so that clients which send it all before reading see the answer; a
//  larger one is answered at once and the connection closed.
#define MAX_DISCARD         (16u << 20)

typedef enum { M_OTHER, M_GET, M_POST, M_PUT, M_PATCH, M_DELETE, M_OPTIONS, M_HEAD } method_t;

//  What a pending request waits for and does with the answer.
typedef enum {
    OP_NONE, OP_CREATE, OP_UPDATE, OP_START, OP_STOP, OP_REBUILD, OP_DESTROY,
    OP_EXEC, OP_FS_LIST, OP_FS_READ, OP_FS_MKDIR, OP_FS_REMOVE, OP_TERMINAL, OP_FS_WRITE
} op_t;

typedef enum {
    PHASE_IDLE, PHASE_BODY,
    PHASE_REPLY,                    //  parked until the owner's REPLY
    PHASE_STATE,                    //  parked until the agent's transition ends (?wait)
    PHASE_CHAN,                     //  parked on a tunnel channel (exec, fs.read)
    PHASE_RESPOND                   //  writing the response
} phase_t;

#define MAX_OUTPUT          (1u << 20)  //  exec: stdout and stderr kept, each
#define MAX_STDIN           (192u << 10) //  exec: below the channel's credit
#define MAX_STREAM_BUF      (512u << 10) //  fs.read: bytes received, not yet written
#define TUNNEL_PIECE        (64u << 10)  //  CHAN_DATA carries at most this

typedef struct self_t self_t;
typedef struct req_t req_t;

//  What a parked request does with its owner's successful REPLY.
typedef void (reply_fn) (self_t *self, req_t *r, ah_msg_t *reply);

//  Per connection (lws per-session data, zeroed by lws at bind); reset
//  at the start of every request on a kept-alive connection. Touched only
//  by the actor thread.
struct req_t {
    struct lws *wsi;
    struct req_t *prev, *next;      //  in self->pending while linked
    bool linked;
    phase_t phase;
    method_t method;
    char path [MAX_PATH];
    char key [MAX_KEY];             //  agent id or name from the path
    char action [16];               //  start | stop | rebuild
    char agent_id [32];             //  resolved
    char token_name [64];           //  who: "api:<name>" in the audit trail
    char tenant [64];               //  the token's tenant
    //  body
    char *body;
    size_t body_len, body_cap;
    size_t content_length;
    bool discard_body;              //  already answered (413, 401): drop what comes
    bool hold;                      //  ...and write the answer once it has come
    //  pending
    op_t op;                        //  lifecycle operations; OP_NONE for the rest
    reply_fn *on_reply;             //  for a successful REPLY
    const char *asked;              //  the owner asked ("lifecycle"), static
    char asked_type [32];           //  what it was asked ("AGENT_CREATE")
    char detail [1100];             //  for the audit trail: a name, a path, a command
    int64_t req_id;
    int64_t deadline_ms;
    int64_t wait_s;                 //  0: no wait
    bool wait;
    int64_t limit, before;          //  ?limit, ?before (operations); 0 = unset
    char qpath [1024];              //  ?path (files)
    bool has_qpath, recursive, parents;
    int mode;                       //  ?mode (octal), -1 unset
    //  an upload (PUT fs/file): the body streams into an fs.write channel
    bool upload, upload_done;
    //  a tunnel channel (exec, files)
    int64_t chan;                   //  0: none open
    //  exec: the record stream from sandboxd (docs/tunnel.md, Records)
    uint8_t rec_head [5];
    size_t rec_have;                //  bytes of rec_head seen
    uint32_t rec_left;              //  payload bytes still to come
    char *out [2];                  //  stdout, stderr (capped at MAX_OUTPUT)
    size_t out_len [2];
    bool out_cut [2];
    char exit_rec [256];            //  the EXIT record's payload
    size_t exit_len;
    bool exited;
    //  fs.read: the body streams from the channel
    bool streaming;
    uint64_t stream_total, stream_sent;
    char *sbuf;
    size_t sbuf_len;
    bool broken;                    //  the channel ended early: close the connection
    //  exec ?stream=1: records re-framed into sbuf, sent chunked (docs/api.md)
    bool exec_stream, stream_end;
    size_t ack_owed;                //  payload bytes received, not yet ACKed
    //  a terminal WebSocket (pty channel); output goes through sbuf
    bool is_ws;
    int cols, rows;
    char *inq;                      //  input typed before the channel opened
    size_t inq_len;
    char ctl [1024];                //  a text (control) message being reassembled
    size_t ctl_len;
    int64_t unacked_in;             //  input bytes the tunnel has not ACKed yet
    bool rx_paused;
    int64_t activity_ms;            //  when lifecycle last heard of this terminal
    bool ws_closing;
    int close_code;
    char close_reason [120];
    //  response
    int status;
    char *resp;                     //  LWS_PRE headroom, then the body
    size_t resp_len, resp_sent;
    bool headers_sent;
    bool close_after;
    const char *allow;              //  for 405
};

struct self_t {
    zsock_t *pipe;
    zsock_t *bus;
    ah_store_t *store;
    const ah_config_t *config;
    ah_lwsloop_t *loop;             //  the lws context and the zsocks' loop
    struct lws_context *context;    //  the loop's
    lws_sorted_usec_list_t tick;
    req_t *pending;
    int64_t next_req;
    int reply_timeout_s;
    bool terminated;
    ah_api_events_t *events;        //  issue 5: event streams and wakes (api_events.c)
};

static void s_check_waits (self_t *self, const char *agent_id);

//  --------------------------------------------------------------------
//  Small helpers

static self_t *s_self (struct lws *wsi)
{
    return (self_t *) ah_lwsloop_user (ah_lwsloop_from_wsi (wsi));
}

//  The one way a pending req_t leaves the list (idempotent).
static void s_unlink (self_t *self, req_t *r)
{
    if (!r->linked)
        return;
    if (r->prev)
        r->prev->next = r->next;
    else
        self->pending = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
    r->linked = false;
}

static void s_link (self_t *self, req_t *r)
{
    if (r->linked)
        return;
    r->prev = NULL;
    r->next = self->pending;
    if (self->pending)
        self->pending->prev = r;
    self->pending = r;
    r->linked = true;
}

static void s_chan_close (self_t *self, int64_t chan);
static void s_terminal_ended (self_t *self, req_t *r, const char *error);
static void s_records_send (self_t *self, req_t *r, uint8_t kind, const void *data, size_t size);
static void s_upload_trailer (self_t *self, req_t *r, const void *data, size_t size);
static void s_upload_ended (self_t *self, req_t *r, const char *error);
static void s_fs (self_t *self, req_t *r, const char *what);

static void s_req_reset (self_t *self, req_t *r)
{
    s_unlink (self, r);
    ah_api_events_wake_cancel (self->events, r);
    //  The client left (or the request ended) with its channel open: the
    //  tunnel resets the stream.
    if (r->chan)
        s_chan_close (self, r->chan);
    free (r->body);
    free (r->resp);
    free (r->out [0]);
    free (r->out [1]);
    free (r->sbuf);
    free (r->inq);
    struct lws *wsi = r->wsi;
    memset (r, 0, sizeof *r);
    r->wsi = wsi;
}

//  Make a string safe for JSON: invalid UTF-8 bytes become '?'.
static json_t *s_json_text (const char *text)
{
    json_t *j = json_string (text);
    if (j)
        return j;
    char *copy = strdup (text);
    if (!copy)
        return json_string ("?");
    for (char *p = copy; *p; p++)
        if ((unsigned char) *p >= 0x80 || (unsigned char) *p < 0x20)
            *p = '?';
    j = json_string (copy);
    free (copy);
    return j ? j : json_string ("?");
}

//  Queue the response; takes ownership of body.
static void s_respond (req_t *r, int status, json_t *body)
{
    char *text = body ? json_dumps (body, JSON_COMPACT) : NULL;
    json_decref (body);
    if (!text) {
        status = 500;
        text = strdup ("{\"error\":\"cannot encode the response\"}");
    }
    size_t len = text ? strlen (text) : 0;
    free (r->resp);
    r->resp = malloc (LWS_PRE + len + 1);
    if (r->resp && text)
        memcpy (r->resp + LWS_PRE, text, len + 1);
    else
        len = 0;
    free (text);
    r->resp_len = len;
    r->resp_sent = 0;
    r->headers_sent = false;
    r->status = status;
    r->phase = PHASE_RESPOND;
    //  A connection whose reading is paused (an upload) gets no WRITEABLE.
    if (r->rx_paused) {
        r->rx_paused = false;
        lws_rx_flow_control (r->wsi, 1);
    }
    lws_callback_on_writable (r->wsi);
}

static void s_respond_error (req_t *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void s_respond_error (req_t *r, int status, const char *fmt, ...)
{
    char message [1024];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (message, sizeof message, fmt, ap);
    va_end (ap);
    if (r->upload && !r->upload_done && !r->discard_body) {
        //  The rest of the upload is read and dropped before the answer
        //  (as for any refused body), or, when large, the connection closes.
        r->discard_body = true;
        if (r->rx_paused) {
            r->rx_paused = false;
            lws_rx_flow_control (r->wsi, 1);
        }
        if (r->content_length <= MAX_DISCARD)
            r->hold = true;
        else
            r->close_after = true;
    }
    if (r->is_ws) {
        //  A terminal has no HTTP answer left to give: the close says why.
        ah_debug ("api", "%s: terminal closed: %s", r->path, message);
        r->ws_closing = true;
        r->close_code = status >= 500 ? 1011 : 1008;
        //  A close reason fits in 123 bytes: cut longer ones.
        size_t n = strlen (message) < sizeof r->close_reason ? strlen (message) : sizeof r->close_reason - 1;
        memcpy (r->close_reason, message, n);
        r->close_reason [n] = 0;
        lws_callback_on_writable (r->wsi);
        return;
    }
    json_t *body = json_object ();
    json_object_set_new (body, "error", s_json_text (message));
    if (status >= 500)
        ah_warn ("api", "%s -> %d %s", r->path, status, message);
    else
        ah_debug ("api", "%s -> %d %s", r->path, status, message);
    s_respond (r, status, body);
}

static json_t *s_time_json (int64_t ms)
{
    if (ms <= 0)
        return json_null ();
    char buf [40];
    ah_store_format_time (ms, buf, sizeof buf);
    return json_string (buf);
}

static json_t *s_column_text (sqlite3_stmt *stmt, int col)
{
    if (sqlite3_column_type (stmt, col) == SQLITE_NULL)
        return json_null ();
    return s_json_text ((const char *) sqlite3_column_text (stmt, col));
}

static bool s_transitional (const char *state)
{
    return state && (streq (state, "creating") || streq (state, "starting")
                     || streq (state, "stopping") || streq (state, "rebuilding")
                     || streq (state, "destroying"));
}

//  --------------------------------------------------------------------
//  Reads

#define AGENT_SELECT \
    "SELECT a.id, a.name, s.state, s.error, a.image, a.cpus, a.memory_mb, a.idle_minutes," \
    " s.needs_rebuild, a.created_at, s.last_activity_at, f.sleeps_at, f.why" \
    " FROM agents a LEFT JOIN sandboxes s ON s.agent_id = a.id" \
    " LEFT JOIN sleep_forecast f ON f.agent_id = a.id"

static json_t *s_agent_row (sqlite3_stmt *stmt)
{
    json_t *a = json_object ();
    json_object_set_new (a, "id", s_column_text (stmt, 0));
    json_object_set_new (a, "name", s_column_text (stmt, 1));
    json_object_set_new (a, "state", s_column_text (stmt, 2));
    json_object_set_new (a, "error", s_column_text (stmt, 3));
    json_object_set_new (a, "image", s_column_text (stmt, 4));
    json_object_set_new (a, "cpus", json_real (sqlite3_column_double (stmt, 5)));
    json_object_set_new (a, "memory_mb", json_integer (sqlite3_column_int64 (stmt, 6)));
    json_object_set_new (a, "idle_minutes", json_real (sqlite3_column_double (stmt, 7)));
    json_object_set_new (a, "needs_rebuild", json_boolean (sqlite3_column_int (stmt, 8) != 0));
    json_object_set_new (a, "created_at", s_time_json (sqlite3_column_int64 (stmt, 9)));
    json_object_set_new (a, "last_activity_at",
                         sqlite3_column_type (stmt, 10) == SQLITE_NULL
                         ? json_null () : s_time_json (sqlite3_column_int64 (stmt, 10)));
    //  The sleeper's forecast means something only while it runs.
    bool running = sqlite3_column_type (stmt, 2) != SQLITE_NULL
                && streq ((const char *) sqlite3_column_text (stmt, 2), "running");
    json_object_set_new (a, "sleeps_at", running && sqlite3_column_type (stmt, 11) != SQLITE_NULL
                         ? s_time_json (sqlite3_column_int64 (stmt, 11)) : json_null ());
    json_object_set_new (a, "awake_because", running ? s_column_text (stmt, 12) : json_null ());
    return a;
}

//  One agent by id or name. NULL with *failed=false when there is none,
//  *failed=true on a database error.
static json_t *s_agent_get (self_t *self, const char *key, bool *failed)
{
    *failed = false;
    sqlite3_stmt *stmt = ah_store_prepare (self->store,
        AGENT_SELECT " WHERE a.id = :key OR a.name = :key ORDER BY (a.id = :key) DESC LIMIT 1");
    if (!stmt || ah_store_bind_text (stmt, ":key", key)) {
        *failed = true;
        return NULL;
    }
    json_t *agent = NULL;
    int rc = ah_store_step (self->store, stmt);
    if (rc == SQLITE_ROW)
        agent = s_agent_row (stmt);
    else if (rc != SQLITE_DONE)
        *failed = true;
    sqlite3_reset (stmt);
    return agent;
}

static json_t *s_agent_list (self_t *self)
{
    sqlite3_stmt *stmt = ah_store_prepare (self->store, AGENT_SELECT " ORDER BY a.name");
    if (!stmt)
        return NULL;
    json_t *list = json_array ();
    int rc;
    while ((rc = ah_store_step (self->store, stmt)) == SQLITE_ROW)
        json_array_append_new (list, s_agent_row (stmt));
    sqlite3_reset (stmt);
    if (rc != SQLITE_DONE) {
        json_decref (list);
        return NULL;
    }
    return list;
}

static json_t *s_policy_list (self_t *self)
{
    sqlite3_stmt *stmt = ah_store_prepare (self->store,
        "SELECT holder, script, loaded_at, error, error_at FROM policy_status"
        " ORDER BY holder, script");
    if (!stmt)
        return NULL;
    json_t *list = json_array ();
    int rc;
    while ((rc = ah_store_step (self->store, stmt)) == SQLITE_ROW) {
        json_t *p = json_object ();
        json_object_set_new (p, "holder", s_column_text (stmt, 0));
        json_object_set_new (p, "script", s_column_text (stmt, 1));
        json_object_set_new (p, "loaded_at", s_time_json (sqlite3_column_int64 (stmt, 2)));
        json_object_set_new (p, "error", s_column_text (stmt, 3));
        json_object_set_new (p, "error_at", s_time_json (sqlite3_column_int64 (stmt, 4)));
        json_array_append_new (list, p);
    }
    sqlite3_reset (stmt);
    if (rc != SQLITE_DONE) {
        json_decref (list);
        return NULL;
    }
    return list;
}

//  Bearer token -> true when its hash is in api_tokens. Every stored hash
//  is compared in constant time; the token itself is never kept.
static bool s_authorized (self_t *self, req_t *r, const char *query_token, bool *failed)
{
    *failed = false;
    char header [MAX_AUTH];
    const char *token = header;
    int n = lws_hdr_total_length (r->wsi, WSI_TOKEN_HTTP_AUTHORIZATION);
    if (n > 0) {
        if (n >= (int) sizeof header
        ||  lws_hdr_copy (r->wsi, header, sizeof header, WSI_TOKEN_HTTP_AUTHORIZATION) < 0
        ||  strncasecmp (token, "Bearer ", 7) != 0)
            return false;
        token += 7;
    }
    else
    if (query_token)
        token = query_token;
    else
        return false;
    while (*token == ' ')
        token++;
    if (!*token)
        return false;
    char hash [AH_TOKEN_HEX];
    ah_token_hash (token, hash);
    memset (header, 0, sizeof header);

    sqlite3_stmt *stmt = ah_store_prepare (self->store, "SELECT name, hash, tenant FROM api_tokens");
    if (!stmt) {
        *failed = true;
        return false;
    }
    bool found = false;
    int rc;
    while ((rc = ah_store_step (self->store, stmt)) == SQLITE_ROW) {
        const char *stored = (const char *) sqlite3_column_text (stmt, 1);
        if (stored && ah_token_equal (hash, stored) && !found) {
            found = true;
            snprintf (r->token_name, sizeof r->token_name, "%s",
                      (const char *) sqlite3_column_text (stmt, 0));
            const char *tenant = (const char *) sqlite3_column_text (stmt, 2);
            snprintf (r->tenant, sizeof r->tenant, "%s", tenant ? tenant : "default");
        }
    }
    if (rc != SQLITE_DONE)
        *failed = true;
    sqlite3_reset (stmt);
    return found && !*failed;
}

//  --------------------------------------------------------------------
//  Requests to other actors

//  Sends msg (taken) to dest with a fresh req id and parks r until the
//  REPLY: on_reply handles a successful one, s_on_reply the rest.
static void s_ask (self_t *self, req_t *r, const char *dest, ah_msg_t **msg_p, reply_fn *on_reply)
{
    r->on_reply = on_reply;
    r->asked = dest;
    snprintf (r->asked_type, sizeof r->asked_type, "%s", ah_msg_type (*msg_p));
    r->req_id = ++self->next_req;
    ah_msg_set_int (*msg_p, "req", r->req_id);
    if (ah_msg_send (msg_p, self->bus, dest)) {
        s_respond_error (r, 503, "cannot reach %s: %s", dest, zmq_strerror (zmq_errno ()));
        return;
    }
    r->phase = PHASE_REPLY;
    r->deadline_ms = zclock_mono () + (int64_t) self->reply_timeout_s * 1000;
    s_link (self, r);
    //  A waiting HTTP client must not be timed out by lws meanwhile.
    lws_set_timeout (r->wsi, NO_PENDING_TIMEOUT, 0);
}

//  The agent as it is now, for a response; a stand-in when it is gone.
static json_t *s_agent_now (self_t *self, req_t *r, const char *state_if_gone)
{
    bool failed;
    json_t *agent = s_agent_get (self, r->agent_id [0] ? r->agent_id : r->key, &failed);
    if (!agent) {
        agent = json_object ();
        json_object_set_new (agent, "id", s_json_text (r->agent_id));
        json_object_set_new (agent, "name", s_json_text (r->key));
        json_object_set_new (agent, "state", json_string (state_if_gone));
    }
    return agent;
}

//  A pending ?wait request: answer it if the agent's transition has ended.
static void s_wait_check (self_t *self, req_t *r)
{
    bool failed;
    json_t *agent = s_agent_get (self, r->agent_id, &failed);
    if (failed) {
        json_decref (agent);
        return;                     //  try again at the next tick
    }
    if (!agent) {
        s_unlink (self, r);
        if (r->op == OP_DESTROY) {
            agent = json_object ();
            json_object_set_new (agent, "id", s_json_text (r->agent_id));
            json_object_set_new (agent, "name", s_json_text (r->key));
            json_object_set_new (agent, "state", json_string ("destroyed"));
            s_respond (r, 200, agent);
        }
        else
            s_respond_error (r, 404, "agent '%s' was destroyed", r->key);
        return;
    }
    const char *state = json_string_value (json_object_get (agent, "state"));
    if (s_transitional (state)) {
        json_decref (agent);
        return;
    }
    s_unlink (self, r);
    s_respond (r, r->op == OP_CREATE ? 201 : 200, agent);
}

static const char *s_op_kind (op_t op)
{
    switch (op) {
        case OP_CREATE:  return "create";
        case OP_UPDATE:  return "update";
        case OP_START:   return "start";
        case OP_STOP:    return "stop";
        case OP_REBUILD: return "rebuild";
        case OP_DESTROY: return "destroy";
        case OP_EXEC:    return "exec";
        case OP_FS_LIST: return "fs.list";
        case OP_FS_READ: return "fs.read";
        case OP_FS_MKDIR: return "fs.mkdir";
        case OP_FS_REMOVE: return "fs.remove";
        case OP_TERMINAL: return "terminal";
        case OP_FS_WRITE: return "fs.write";
        default:         return "?";
    }
}

//  The audit trail says who asked for a change and how it went (the
//  recorder also records each state change lifecycle publishes).
static void s_record (self_t *self, req_t *r, bool ok, const char *error)
{
    if (r->op == OP_NONE)
        return;
    ah_msg_t *rec = ah_msg_new ("OP_RECORD");
    if (r->agent_id [0])
        ah_msg_set_str (rec, "agent_id", r->agent_id);
    else
        ah_msg_set_nil (rec, "agent_id");
    ah_msg_set_strf (rec, "actor", "api:%s", r->token_name [0] ? r->token_name : "?");
    ah_msg_set_str (rec, "kind", s_op_kind (r->op));
    if (r->detail [0])
        ah_msg_set_str (rec, "detail", r->detail);
    ah_msg_set_bool (rec, "ok", ok);
    if (!ok && error)
        ah_msg_set_str (rec, "error", error);
    ah_msg_send (&rec, self->bus, "recorder");
}

//  A successful lifecycle REPLY: the agent as it is now, or a wait.
static void s_lifecycle_reply (self_t *self, req_t *r, ah_msg_t *msg)
{
    const char *agent_id = ah_msg_str (msg, "agent_id");
    if (agent_id && !r->agent_id [0])
        snprintf (r->agent_id, sizeof r->agent_id, "%s", agent_id);
    s_record (self, r, true, NULL);
    switch (r->op) {
        case OP_CREATE:
            if (!r->agent_id [0]) {
                s_respond_error (r, 500, "lifecycle created the agent but did not say its id");
                return;
            }
            if (!r->wait) {
                s_respond (r, 201, s_agent_now (self, r, "creating"));
                return;
            }
            break;                  //  wait for the sandbox to be made
        case OP_UPDATE:
            s_respond (r, 200, s_agent_now (self, r, "destroyed"));
            return;
        default:
            break;
    }
    if (r->wait) {
        r->phase = PHASE_STATE;
        r->deadline_ms = zclock_mono () + r->wait_s * 1000;
        s_link (self, r);
        s_wait_check (self, r);
        return;
    }
    //  202: the transition won; 200: already there or on its way.
    json_t *agent = s_agent_now (self, r, "destroying");
    const char *state = ah_msg_str (msg, "state");
    if (state && *state)
        json_object_set_new (agent, "state", s_json_text (state));
    int status = (int) ah_msg_int (msg, "status", 202);
    s_respond (r, status >= 200 && status < 300 ? status : 202, agent);
}

static void s_on_reply (self_t *self, ah_msg_t *msg)
{
    if (ah_api_events_reply (self->events, msg))
        return;                     //  a wake's SANDBOX_START (api_events.c)
    int64_t id = ah_msg_int (msg, "req", 0);
    req_t *r = self->pending;
    while (r && !(r->phase == PHASE_REPLY && r->req_id == id))
        r = r->next;
    if (!r) {
        ah_debug ("api", "REPLY for req %lld that nobody waits for (client gone?)", (long long) id);
        return;
    }
    s_unlink (self, r);
    if (!ah_msg_bool (msg, "ok", false)) {
        int status = (int) ah_msg_int (msg, "status", 500);
        if (status < 400 || status > 599)
            status = 500;
        const char *error = ah_msg_str (msg, "error");
        if (!error || !*error)
            error = "the request was refused";
        s_record (self, r, false, error);
        s_respond_error (r, status, "%s", error);
        return;
    }
    if (r->on_reply)
        r->on_reply (self, r, msg);
    else
        s_respond (r, 200, json_pack ("{s:b}", "ok", 1));
}

static void s_check_waits (self_t *self, const char *agent_id)
{
    req_t *r = self->pending;
    while (r) {
        req_t *next = r->next;      //  s_wait_check may unlink r
        if (r->phase == PHASE_STATE && (!agent_id || streq (r->agent_id, agent_id)))
            s_wait_check (self, r);
        r = next;
    }
}

static void s_sweep (self_t *self)
{
    int64_t now = zclock_mono ();
    req_t *r = self->pending;
    while (r) {
        req_t *next = r->next;
        if (r->deadline_ms && now >= r->deadline_ms) {
            s_unlink (self, r);
            if (r->phase == PHASE_REPLY) {
                s_record (self, r, false, "no answer in time");
                s_respond_error (r, 504, "%s did not answer %s within %d s",
                                 r->asked ? r->asked : "?", r->asked_type, self->reply_timeout_s);
            }
            else
            if (r->phase == PHASE_CHAN) {
                s_chan_close (self, r->chan);
                r->chan = 0;
                s_respond_error (r, 504, "the command did not end within %lld s",
                                 (long long) r->wait_s);
            }
            else {
                bool failed;
                json_t *agent = s_agent_get (self, r->agent_id, &failed);
                const char *state = agent ? json_string_value (json_object_get (agent, "state")) : NULL;
                s_respond_error (r, 504, "agent '%s' is still %s after %lld s", r->key,
                                 state ? state : "changing", (long long) r->wait_s);
                json_decref (agent);
            }
        }
        r = next;
    }
}

//  --------------------------------------------------------------------
//  Request bodies

//  Parse the body as one JSON object; answers 400 itself and returns NULL.
static json_t *s_body_object (req_t *r, bool empty_ok)
{
    if (r->body_len == 0) {
        if (empty_ok)
            return json_object ();
        s_respond_error (r, 400, "a JSON object body is required");
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loadb (r->body, r->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        s_respond_error (r, 400, "bad JSON at line %d column %d: %s", jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object (root)) {
        json_decref (root);
        s_respond_error (r, 400, "the body must be a JSON object");
        return NULL;
    }
    return root;
}

typedef enum { F_STR, F_NUM, F_INT } field_type_t;
typedef struct {
    const char *name;
    field_type_t type;
} field_t;

//  Check every key of obj against the allowed fields and copy them into
//  msg. Answers 400 naming the field and returns -1 on the first problem.
static int s_copy_fields (req_t *r, json_t *obj, const field_t *fields, size_t nfields, ah_msg_t *msg)
{
    const char *key;
    json_t *value;
    json_object_foreach (obj, key, value) {
        const field_t *f = NULL;
        for (size_t i = 0; i < nfields; i++)
            if (streq (fields [i].name, key))
                f = &fields [i];
        if (!f) {
            s_respond_error (r, 400, "unknown field '%s'", key);
            return -1;
        }
        switch (f->type) {
            case F_STR:
                if (!json_is_string (value) || json_string_length (value) == 0
                ||  json_string_length (value) > 255) {
                    s_respond_error (r, 400, "field '%s' must be a non-empty string of at most 255 bytes", key);
                    return -1;
                }
                ah_msg_set_str (msg, key, json_string_value (value));
                break;
            case F_NUM:
                if (!json_is_number (value) || json_number_value (value) <= 0) {
                    s_respond_error (r, 400, "field '%s' must be a number greater than 0", key);
                    return -1;
                }
                ah_msg_set_double (msg, key, json_number_value (value));
                break;
            case F_INT:
                if (!json_is_integer (value) || json_integer_value (value) <= 0) {
                    s_respond_error (r, 400, "field '%s' must be an integer greater than 0", key);
                    return -1;
                }
                ah_msg_set_int (msg, key, json_integer_value (value));
                break;
        }
    }
    return 0;
}

static bool s_valid_name (const char *name)
{
    size_t n = strlen (name);
    if (n < 1 || n > 63)
        return false;
    if (!(islower ((unsigned char) name [0]) || isdigit ((unsigned char) name [0])))
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) name [i];
        if (!(islower (c) || isdigit (c) || c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

//  --------------------------------------------------------------------
//  Routes

static const field_t s_create_fields [] = {
    { "name", F_STR }, { "image", F_STR }, { "cpus", F_NUM },
    { "memory_mb", F_INT }, { "idle_minutes", F_NUM }
};
static const field_t s_update_fields [] = {
    { "image", F_STR }, { "cpus", F_NUM }, { "memory_mb", F_INT }, { "idle_minutes", F_NUM }
};

static void s_agent_create (self_t *self, req_t *r)
{
    json_t *obj = s_body_object (r, false);
    if (!obj)
        return;
    ah_msg_t *msg = ah_msg_new ("AGENT_CREATE");
    if (s_copy_fields (r, obj, s_create_fields, sizeof s_create_fields / sizeof s_create_fields [0], msg)) {
        ah_msg_destroy (&msg);
        json_decref (obj);
        return;
    }
    const char *name = ah_msg_str (msg, "name");
    if (!name) {
        s_respond_error (r, 400, "field 'name' is required");
        goto out;
    }
    if (!s_valid_name (name)) {
        s_respond_error (r, 400, "field 'name': '%s' is not a valid agent name "
                         "(1 to 63 of a-z 0-9 . _ -, starting with a letter or digit)", name);
        goto out;
    }
    snprintf (r->key, sizeof r->key, "%s", name);
    snprintf (r->detail, sizeof r->detail, "%s", name);
    ah_msg_set_str (msg, "tenant", r->tenant [0] ? r->tenant : "default");
    r->op = OP_CREATE;
    s_ask (self, r, "lifecycle", &msg, s_lifecycle_reply);
out:
    ah_msg_destroy (&msg);
    json_decref (obj);
}

//  Resolve r->key to r->agent_id; answers 404/500 and returns NULL itself.
static json_t *s_resolve (self_t *self, req_t *r)
{
    bool failed;
    json_t *agent = s_agent_get (self, r->key, &failed);
    if (failed) {
        json_decref (agent);
        s_respond_error (r, 500, "cannot read the database");
        return NULL;
    }
    if (!agent) {
        s_respond_error (r, 404, "no agent named '%s'", r->key);
        return NULL;
    }
    snprintf (r->agent_id, sizeof r->agent_id, "%s",
              json_string_value (json_object_get (agent, "id")));
    //  From here on name the agent by its name, whichever the client used.
    const char *name = json_string_value (json_object_get (agent, "name"));
    if (name)
        snprintf (r->key, sizeof r->key, "%s", name);
    return agent;
}

static void s_agent_update (self_t *self, req_t *r)
{
    json_t *obj = s_body_object (r, false);
    if (!obj)
        return;
    ah_msg_t *msg = ah_msg_new ("AGENT_UPDATE");
    json_t *agent = NULL;
    if (json_object_get (obj, "name")) {
        s_respond_error (r, 400, "field 'name' cannot be changed");
        goto out;
    }
    if (s_copy_fields (r, obj, s_update_fields, sizeof s_update_fields / sizeof s_update_fields [0], msg))
        goto out;
    if (json_object_size (obj) == 0) {
        s_respond_error (r, 400, "nothing to change: give image, cpus, memory_mb or idle_minutes");
        goto out;
    }
    if (!(agent = s_resolve (self, r)))
        goto out;
    ah_msg_set_str (msg, "agent", r->agent_id);
    //  The audit detail: the fields asked for, as compact JSON.
    char *fields = json_dumps (obj, JSON_COMPACT | JSON_SORT_KEYS);
    snprintf (r->detail, sizeof r->detail, "%s", fields ? fields : "");
    free (fields);
    r->op = OP_UPDATE;
    s_ask (self, r, "lifecycle", &msg, s_lifecycle_reply);
out:
    json_decref (agent);
    ah_msg_destroy (&msg);
    json_decref (obj);
}

static void s_agent_transition (self_t *self, req_t *r, op_t op)
{
    //  An optional body, and then only an empty object.
    json_t *obj = s_body_object (r, true);
    if (!obj)
        return;
    if (json_object_size (obj) > 0) {
        const char *key = json_object_iter_key (json_object_iter (obj));
        s_respond_error (r, 400, "unknown field '%s'", key);
        json_decref (obj);
        return;
    }
    json_decref (obj);
    json_t *agent = s_resolve (self, r);
    if (!agent)
        return;
    json_decref (agent);
    static const char *types [] = {
        [OP_START] = "SANDBOX_START", [OP_STOP] = "SANDBOX_STOP",
        [OP_REBUILD] = "SANDBOX_REBUILD", [OP_DESTROY] = "SANDBOX_DESTROY"
    };
    ah_msg_t *msg = ah_msg_new (types [op]);
    ah_msg_set_str (msg, "agent", r->agent_id);
    if (op == OP_STOP)
        ah_msg_set_strf (msg, "reason", "api:%s", r->token_name);
    if (op == OP_START)
        ah_api_events_activity (self->events, r->agent_id, "start");
    snprintf (r->detail, sizeof r->detail, "%s", r->key);
    r->op = op;
    s_ask (self, r, "lifecycle", &msg, s_lifecycle_reply);
}

static void s_policy_reload (self_t *self, req_t *r)
{
    static const char *holders [] = { "lifecycle", "sleeper", "builder" };
    json_t *sent = json_array ();
    for (size_t i = 0; i < sizeof holders / sizeof holders [0]; i++) {
        ah_msg_t *msg = ah_msg_new ("POLICY_RELOAD");
        if (ah_msg_send (&msg, self->bus, holders [i]) == 0)
            json_array_append_new (sent, json_string (holders [i]));
    }
    s_respond (r, 202, json_pack ("{s:b, s:o}", "ok", 1, "sent_to", sent));
}

static int s_query_int (req_t *r, const char *name, const char *value, int64_t min, int64_t max,
                        int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll (value, &end, 10);
    if (errno || end == value || *end || v < min || v > max) {
        s_respond_error (r, 400, "query '%s' must be a whole number from %lld to %lld, got '%s'",
                         name, (long long) min, (long long) max, value);
        return -1;
    }
    *out = v;
    return 0;
}

//  Query arguments we know: wait, timeout, limit, before. Unknown ones
//  are refused.
static int s_parse_query (req_t *r)
{
    char arg [1100];
    for (int i = 0; i < 16; i++) {
        int n = lws_hdr_copy_fragment (r->wsi, arg, sizeof arg, WSI_TOKEN_HTTP_URI_ARGS, i);
        if (n < 0) {
            if (i < 15 && lws_hdr_total_length (r->wsi, WSI_TOKEN_HTTP_URI_ARGS) >= (int) sizeof arg) {
                s_respond_error (r, 400, "query string too long");
                return -1;
            }
            break;
        }
        if (n == 0)
            continue;
        char *value = strchr (arg, '=');
        if (value)
            *value++ = 0;
        else
            value = "1";
        if (streq (arg, "wait")) {
            if (streq (value, "1") || streq (value, "true") || streq (value, ""))
                r->wait = true;
            else if (streq (value, "0") || streq (value, "false"))
                r->wait = false;
            else {
                s_respond_error (r, 400, "query 'wait' must be 0 or 1, got '%s'", value);
                return -1;
            }
        }
        else if (streq (arg, "timeout")) {
            if (s_query_int (r, arg, value, 1, AH_API_WAIT_MAX_S, &r->wait_s))
                return -1;
        }
        else if (streq (arg, "limit")) {
            if (s_query_int (r, arg, value, 1, 1000, &r->limit))
                return -1;
        }
        else if (streq (arg, "before")) {
            if (s_query_int (r, arg, value, 1, INT64_MAX, &r->before))
                return -1;
        }
        else if (streq (arg, "path")) {
            //  lws has already percent-decoded the argument.
            snprintf (r->qpath, sizeof r->qpath, "%s", value);
            r->has_qpath = true;
        }
        else if (streq (arg, "op")) {
            //  POST .../files/{path}?op=mkdir (the one op so far)
            if (!streq (value, "mkdir")) {
                s_respond_error (r, 400, "query 'op' must be mkdir, got '%s'", value);
                return -1;
            }
            snprintf (r->action, sizeof r->action, "%s", value);
        }
        else if (streq (arg, "mode")) {
            char *end = NULL;
            long v = strtol (value, &end, 8);
            if (end == value || *end || v < 0 || v > 07777) {
                s_respond_error (r, 400, "query 'mode' must be octal permission bits (644, 0755), got '%s'", value);
                return -1;
            }
            r->mode = (int) v;
        }
        else if (streq (arg, "stream")) {
            //  POST .../exec?stream=1: output as it comes (s_exec_stream_*)
            if (!streq (value, "1") && !streq (value, "0") && !streq (value, "true") && !streq (value, "false")) {
                s_respond_error (r, 400, "query 'stream' must be 0 or 1, got '%s'", value);
                return -1;
            }
            r->exec_stream = streq (value, "1") || streq (value, "true");
        }
        else if (streq (arg, "recursive") || streq (arg, "parents")) {
            bool yes = streq (value, "1") || streq (value, "true");
            if (!yes && !streq (value, "0") && !streq (value, "false")) {
                s_respond_error (r, 400, "query '%s' must be 0 or 1, got '%s'", arg, value);
                return -1;
            }
            if (streq (arg, "recursive"))
                r->recursive = yes;
            else
                r->parents = yes;
        }
        else {
            s_respond_error (r, 400, "unknown query argument '%s'", arg);
            return -1;
        }
    }
    if (!r->wait_s)
        r->wait_s = AH_API_WAIT_DEFAULT_S;
    return 0;
}

//  --------------------------------------------------------------------
//  Routes answered by other actors: the audit trail (recorder), the
//  runtime catalog and briefings (builder), turns (sleeper).

//  A raw (nested msgpack) field of a message as JSON; NULL if absent.
static json_t *s_raw_json (ah_msg_t *msg, const char *key)
{
    char *line = ah_msg_to_json (msg, NULL);
    json_t *root = line ? json_loads (line, 0, NULL) : NULL;
    free (line);
    json_t *value = json_incref (json_object_get (json_object_get (root, "fields"), key));
    json_decref (root);
    return value;
}

static void s_operations_reply (self_t *self, req_t *r, ah_msg_t *msg)
{
    json_t *ops = s_raw_json (msg, "operations");
    if (!json_is_array (ops)) {
        json_decref (ops);
        s_respond_error (r, 502, "the recorder answered without operations");
        return;
    }
    size_t i;
    json_t *op;
    json_array_foreach (ops, i, op) {
        json_t *at = json_object_get (op, "at");
        if (json_is_integer (at)) {
            json_int_t ms = json_integer_value (at);
            json_object_set_new (op, "at_ms", json_integer (ms));
            json_object_set_new (op, "at", s_time_json (ms));
        }
    }
    s_respond (r, 200, json_pack ("{s:o}", "operations", ops));
}

static bool s_is_agent_id (const char *key)
{
    if (strlen (key) != 12)
        return false;
    for (const char *p = key; *p; p++)
        if (!isdigit ((unsigned char) *p) && !(*p >= 'a' && *p <= 'f'))
            return false;
    return true;
}

//  GET /api/v1/operations, /api/v1/agents/{agent}/operations. A destroyed
//  agent's trail stays readable by its id.
static void s_operations (self_t *self, req_t *r, bool one_agent)
{
    ah_msg_t *msg = ah_msg_new ("OP_LIST");
    if (one_agent) {
        bool failed;
        json_t *agent = s_agent_get (self, r->key, &failed);
        if (agent)
            snprintf (r->agent_id, sizeof r->agent_id, "%s",
                      json_string_value (json_object_get (agent, "id")));
        else if (!failed && s_is_agent_id (r->key))
            memcpy (r->agent_id, r->key, 13);       //  12 hex and the NUL
        else {
            if (failed)
                s_respond_error (r, 500, "cannot read the database");
            else
                s_respond_error (r, 404, "no agent named '%s'", r->key);
            ah_msg_destroy (&msg);
            return;
        }
        json_decref (agent);
        ah_msg_set_str (msg, "agent_id", r->agent_id);
    }
    if (r->limit)
        ah_msg_set_int (msg, "limit", r->limit);
    if (r->before)
        ah_msg_set_int (msg, "before", r->before);
    s_ask (self, r, "recorder", &msg, s_operations_reply);
}

static void s_runtimes_reply (self_t *self, req_t *r, ah_msg_t *msg)
{
    json_t *list = s_raw_json (msg, "runtimes");
    if (!json_is_array (list)) {
        json_decref (list);
        s_respond_error (r, 502, "the builder answered without runtimes");
        return;
    }
    s_respond (r, 200, json_pack ("{s:o}", "runtimes", list));
}

static void s_briefing_reply (self_t *self, req_t *r, ah_msg_t *msg)
{
    const char *runtime = ah_msg_str (msg, "runtime");
    const char *text = ah_msg_str (msg, "text");
    json_t *body = json_object ();
    json_object_set_new (body, "runtime", s_json_text (runtime ? runtime : r->key));
    json_object_set_new (body, "text", text ? s_json_text (text) : json_null ());
    s_respond (r, 200, body);
}

//  TURN_START, TURN_RENEW: {turn_id, agent_id, expires_at}; TURN_END: ok.
static void s_turn_reply (self_t *self, req_t *r, ah_msg_t *msg)
{
    json_t *body = json_object ();
    const char *turn_id = ah_msg_str (msg, "turn_id");
    json_object_set_new (body, "turn_id", s_json_text (turn_id ? turn_id : r->key));
    if (streq (r->asked_type, "TURN_END")) {
        json_object_set_new (body, "ended", json_true ());
        s_respond (r, 200, body);
        return;
    }
    const char *agent_id = ah_msg_str (msg, "agent_id");
    json_object_set_new (body, "agent_id", agent_id ? s_json_text (agent_id) : json_null ());
    int64_t expires = ah_msg_int (msg, "expires_at", 0);
    json_object_set_new (body, "expires_at", s_time_json (expires));
    json_object_set_new (body, "expires_at_ms", json_integer (expires));
    s_respond (r, streq (r->asked_type, "TURN_START") ? 201 : 200, body);
}

static const field_t s_turn_fields [] = { { "lease_ms", F_INT } };

//  Issue 5 (api_events.c): a turn or a terminal on an agent that is not
//  running wakes it; the request waits (AH_API_WAKE_TIMEOUT_S) and comes
//  back through s_woken. true: parked or answered.
static void s_turn (self_t *self, req_t *r, const char *type);
static void s_ws_established (self_t *self, req_t *r);
static void s_woken (void *ctx, int status, const char *error)
{
    req_t *r = ctx;
    self_t *self = s_self (r->wsi);
    if (status)
        s_respond_error (r, status, "%s", error);
    else if (r->is_ws)
        s_ws_established (self, r);
    else
        s_turn (self, r, "TURN_START");
}

static bool s_wake (self_t *self, req_t *r)
{
    char why [300];
    int rc = ah_api_events_wake (self->events, r->agent_id, r, s_woken, AH_API_WAKE_TIMEOUT_S,
                                 why, sizeof why);
    if (rc == 0)
        return false;
    if (rc == 1)
        lws_set_timeout (r->wsi, NO_PENDING_TIMEOUT, 0);
    else
        s_respond_error (r, rc, "%s", why);
    return true;
}

//  POST /api/v1/agents/{agent}/turns, /api/v1/turns/{id}/renew,
//  DELETE /api/v1/turns/{id}. r->key is the agent or the turn.
static void s_turn (self_t *self, req_t *r, const char *type)
{
    json_t *obj = s_body_object (r, true);
    if (!obj)
        return;
    ah_msg_t *msg = ah_msg_new (type);
    bool end = streq (type, "TURN_END");
    if (end && json_object_size (obj) > 0)
        s_respond_error (r, 400, "ending a turn takes no body");
    else
    if (!end && s_copy_fields (r, obj, s_turn_fields, 1, msg) == 0) {
        json_t *agent = NULL;
        if (streq (type, "TURN_START")) {
            if ((agent = s_resolve (self, r)))
                ah_msg_set_str (msg, "agent", r->agent_id);
            if (agent && s_wake (self, r)) {    //  issue 5: s_woken comes back here
                json_decref (agent);
                agent = NULL;
            }
            else if (agent)
                ah_api_events_activity (self->events, r->agent_id, "turn");
        }
        else
            ah_msg_set_str (msg, "turn_id", r->key);
        if (agent || !streq (type, "TURN_START"))
            s_ask (self, r, "sleeper", &msg, s_turn_reply);
        json_decref (agent);
    }
    else
    if (end) {
        ah_msg_set_str (msg, "turn_id", r->key);
        s_ask (self, r, "sleeper", &msg, s_turn_reply);
    }
    ah_msg_destroy (&msg);
    json_decref (obj);
}

//  --------------------------------------------------------------------
//  Tunnel channels: exec and files (docs/tunnel.md; CHAN_* in
//  docs/messages.md). The API is the channel's opener: it sends the
//  header in CHAN_OPEN, then data, FIN (CHAN_EOF) or RST (CHAN_CLOSE),
//  and ACKs what it has passed on, so at most the tunnel's credit is ever
//  buffered here.

static void s_chan_send (self_t *self, const char *type, int64_t chan)
{
    ah_msg_t *m = ah_msg_new (type);
    ah_msg_set_int (m, "chan", chan);
    ah_msg_send (&m, self->bus, "tunnel");
}

static void s_chan_close (self_t *self, int64_t chan)
{
    s_chan_send (self, "CHAN_CLOSE", chan);
}

static void s_chan_ack (self_t *self, int64_t chan, size_t bytes)
{
    ah_msg_t *m = ah_msg_new ("CHAN_ACK");
    ah_msg_set_int (m, "chan", chan);
    ah_msg_set_int (m, "bytes", (int64_t) bytes);
    ah_msg_send (&m, self->bus, "tunnel");
}

//  The agent must exist and run; lifecycle learns of the use (idle clock).
static bool s_chan_agent (self_t *self, req_t *r, const char *what)
{
    json_t *agent = s_resolve (self, r);
    if (!agent)
        return false;
    const char *state = json_string_value (json_object_get (agent, "state"));
    bool running = state && streq (state, "running");
    if (!running)
        s_respond_error (r, 409, "agent '%s' is %s; %s needs it running (start it first)",
                         r->key, state ? state : "without a sandbox", what);
    json_decref (agent);
    if (running) {
        ah_msg_t *m = ah_msg_new ("AGENT_ACTIVITY");
        ah_msg_set_str (m, "agent_id", r->agent_id);
        ah_msg_set_str (m, "what", streq (what, "exec") ? "exec" : "files");
        ah_msg_send (&m, self->bus, "lifecycle");
    }
    return running;
}

//  CHAN_OPEN to the tunnel with header's map (taken) as the channel header.
static void s_chan_open (self_t *self, req_t *r, op_t op, ah_msg_t **header_p, reply_fn *on_reply)
{
    uint8_t *data = NULL;
    size_t size = 0;
    int rc = ah_msg_encode (*header_p, &data, &size);
    ah_msg_destroy (header_p);
    if (rc) {
        free (data);
        s_respond_error (r, 500, "cannot encode the channel header");
        return;
    }
    ah_msg_t *msg = ah_msg_new ("CHAN_OPEN");
    ah_msg_set_str (msg, "agent_id", r->agent_id);
    ah_msg_set_raw (msg, "header", data, size);
    free (data);
    r->op = op;
    s_ask (self, r, "tunnel", &msg, on_reply);
}

//  A channel opened (CHAN_OPEN's REPLY): park r on it until CHAN_CLOSE,
//  or the deadline (0: none). false (answered 502) without a chan.
static bool s_chan_opened (self_t *self, req_t *r, ah_msg_t *msg, int64_t deadline_ms)
{
    r->chan = ah_msg_int (msg, "chan", 0);
    s_record (self, r, true, NULL);
    if (!r->chan) {
        s_respond_error (r, 502, "the tunnel opened no channel");
        return false;
    }
    r->phase = PHASE_CHAN;
    r->deadline_ms = deadline_ms;
    s_link (self, r);
    return true;
}

//  fs.list, fs.mkdir, fs.remove: all is in sandboxd's reply header.
static void s_fs_meta_reply (self_t *self, req_t *r, ah_msg_t *msg)
{
    int64_t chan = ah_msg_int (msg, "chan", 0);
    if (chan)
        s_chan_send (self, "CHAN_EOF", chan);       //  nothing more to send
    s_record (self, r, true, NULL);
    json_t *body = json_object ();
    json_object_set_new (body, "path", s_json_text (r->qpath));
    if (r->op == OP_FS_LIST) {
        json_t *reply = s_raw_json (msg, "reply");
        json_t *entries = json_object_get (reply, "entries");
        json_object_set (body, "entries", json_is_array (entries) ? entries : json_array ());
        json_object_set_new (body, "truncated", json_boolean (json_is_true (json_object_get (reply, "truncated"))));
        json_decref (reply);
        s_respond (r, 200, body);
    }
    else
    if (r->op == OP_FS_MKDIR) {
        json_object_set_new (body, "created", json_true ());
        s_respond (r, 201, body);
    }
    else {
        json_object_set_new (body, "removed", json_true ());
        s_respond (r, 200, body);
    }
}

//  fs.read: the response streams as the channel's bytes arrive.
static void s_fs_read_reply (self_t *self, req_t *r, ah_msg_t *msg)
{
    r->chan = ah_msg_int (msg, "chan", 0);
    s_record (self, r, true, NULL);
    json_t *reply = s_raw_json (msg, "reply");
    json_t *size = json_object_get (reply, "size");
    if (!r->chan || !json_is_integer (size) || json_integer_value (size) < 0) {
        json_decref (reply);
        s_respond_error (r, 502, "sandboxd's fs.read reply carries no size");
        return;
    }
    r->stream_total = (uint64_t) json_integer_value (size);
    json_decref (reply);
    s_chan_send (self, "CHAN_EOF", r->chan);        //  the opener sends nothing more
    r->streaming = true;
    r->status = 200;
    r->phase = PHASE_CHAN;
    r->deadline_ms = 0;             //  as long as bytes come; a lost connection closes it
    s_link (self, r);
    lws_callback_on_writable (r->wsi);
}

static void s_fs_read_data (self_t *self, req_t *r, const void *data, size_t size)
{
    if (r->sbuf_len + size > MAX_STREAM_BUF
    ||  r->stream_sent + r->sbuf_len + size > r->stream_total) {
        ah_warn ("api", "%s: the tunnel sent more than announced or acknowledged; closing", r->path);
        s_chan_close (self, r->chan);
        r->chan = 0;
        r->broken = true;
    }
    else {
        char *grown = realloc (r->sbuf, r->sbuf_len + size);
        if (!grown) {
            s_chan_close (self, r->chan);
            r->chan = 0;
            r->broken = true;
        }
        else {
            r->sbuf = grown;
            memcpy (r->sbuf + r->sbuf_len, data, size);
            r->sbuf_len += size;
        }
    }
    lws_callback_on_writable (r->wsi);
}

//  A JSON string of bytes that may not be UTF-8: bad bytes become '?'.
static json_t *s_json_bytes (const char *data, size_t size)
{
    json_t *j = json_stringn (data ? data : "", size);
    if (j)
        return j;
    char *copy = malloc (size + 1);
    if (!copy)
        return json_string ("");
    for (size_t i = 0; i < size; i++)
        copy [i] = (unsigned char) data [i] >= 0x80 || data [i] == 0 ? '?' : data [i];
    copy [size] = 0;
    j = json_stringn (copy, size);
    free (copy);
    return j ? j : json_string ("");
}

static void s_exec_reply (self_t *self, req_t *r, ah_msg_t *msg)
{
    //  The deadline: the command's timeout and a margin.
    if (!s_chan_opened (self, r, msg, zclock_mono () + r->wait_s * 1000))
        return;
    if (r->exec_stream) {
        //  200 and the headers now; records follow as the command writes.
        r->status = 200;
        r->deadline_ms = 0;         //  sandboxd's timeout ends it; a lost tunnel closes it
        lws_callback_on_writable (r->wsi);
    }
    //  stdin as STDIN records (below the channel's credit: MAX_STDIN), then FIN.
    if (r->sbuf_len)
        s_records_send (self, r, 0, r->sbuf, r->sbuf_len);
    free (r->sbuf);
    r->sbuf = NULL;
    r->sbuf_len = 0;
    s_chan_send (self, "CHAN_EOF", r->chan);
}

//  Records from sandboxd: STDOUT, STDERR kept (capped), EXIT remembered.
//  A terminal's STDOUT goes to sbuf instead, *kept says how many bytes
//  (those are ACKed once written to the WebSocket).
static int s_exec_data (req_t *r, const uint8_t *p, size_t n, size_t *kept)
{
    *kept = 0;
    while (n > 0) {
        if (r->rec_have < 5) {
            size_t m = 5 - r->rec_have < n ? 5 - r->rec_have : n;
            memcpy (r->rec_head + r->rec_have, p, m);
            r->rec_have += m;
            p += m;
            n -= m;
            if (r->rec_have < 5)
                break;
            r->rec_left = (uint32_t) r->rec_head [1] << 24 | (uint32_t) r->rec_head [2] << 16
                        | (uint32_t) r->rec_head [3] << 8 | r->rec_head [4];
            if (r->rec_left > (1u << 20) || r->rec_head [0] > 5)
                return -1;
        }
        uint8_t kind = r->rec_head [0];
        size_t m = r->rec_left < n ? r->rec_left : n;
        if (r->exec_stream && (kind == 1 || kind == 2) && m > 0) {
            //  Re-framed as a record of its own (kind, u32 length, bytes).
            if (r->sbuf_len + m + 5 > MAX_STREAM_BUF + (64u << 10))
                return -1;          //  more than the credit allows
            char *grown = realloc (r->sbuf, r->sbuf_len + m + 5);
            if (!grown)
                return -1;
            r->sbuf = grown;
            uint8_t *h = (uint8_t *) r->sbuf + r->sbuf_len;
            h [0] = kind;
            h [1] = (uint8_t) (m >> 24), h [2] = (uint8_t) (m >> 16), h [3] = (uint8_t) (m >> 8), h [4] = (uint8_t) m;
            memcpy (r->sbuf + r->sbuf_len + 5, p, m);
            r->sbuf_len += m + 5;
            *kept += m;
        }
        else
        if (r->is_ws && kind == 1) {
            if (r->sbuf_len + m > MAX_STREAM_BUF)
                return -1;          //  more than the credit allows
            char *grown = realloc (r->sbuf, r->sbuf_len + m);
            if (!grown)
                return -1;
            r->sbuf = grown;
            memcpy (r->sbuf + r->sbuf_len, p, m);
            r->sbuf_len += m;
            *kept += m;
        }
        else
        if (kind == 1 || kind == 2) {
            int k = kind - 1;
            size_t room = MAX_OUTPUT - r->out_len [k];
            size_t take = m < room ? m : room;
            if (take < m)
                r->out_cut [k] = true;
            if (take) {
                char *grown = realloc (r->out [k], r->out_len [k] + take);
                if (!grown)
                    return -1;
                r->out [k] = grown;
                memcpy (r->out [k] + r->out_len [k], p, take);
                r->out_len [k] += take;
            }
        }
        else if (kind == 4) {
            size_t take = m < sizeof r->exit_rec - r->exit_len ? m : sizeof r->exit_rec - r->exit_len;
            memcpy (r->exit_rec + r->exit_len, p, take);
            r->exit_len += take;
        }
        r->rec_left -= (uint32_t) m;
        p += m;
        n -= m;
        if (r->rec_left == 0) {
            if (kind == 4)
                r->exited = true;
            r->rec_have = 0;
        }
    }
    return 0;
}

//  exec ?stream=1: the last record, kind 4 with the exit as JSON, or
//  kind 5 with {"error"} when the channel ended without an exit status.
static void s_exec_stream_end (req_t *r, const char *error)
{
    ah_msg_t *exit = r->exited ? ah_msg_decode ("EXIT", r->exit_rec, r->exit_len, NULL) : NULL;
    json_t *body = exit ? json_pack ("{s:I, s:I, s:b}",
                                     "status", (json_int_t) ah_msg_int (exit, "status", -1),
                                     "signal", (json_int_t) ah_msg_int (exit, "signal", 0),
                                     "timed_out", ah_msg_bool (exit, "timed_out", false))
                        : json_pack ("{s:s}", "error", error ? error : "the command's channel ended "
                                     "before it exited");
    ah_msg_destroy (&exit);
    char *text = body ? json_dumps (body, JSON_COMPACT) : NULL;
    json_decref (body);
    size_t n = text ? strlen (text) : 0;
    char *grown = realloc (r->sbuf, r->sbuf_len + n + 5);
    if (grown) {
        r->sbuf = grown;
        uint8_t *h = (uint8_t *) r->sbuf + r->sbuf_len;
        h [0] = r->exited ? 4 : 5;
        h [1] = (uint8_t) (n >> 24), h [2] = (uint8_t) (n >> 16), h [3] = (uint8_t) (n >> 8), h [4] = (uint8_t) n;
        memcpy (r->sbuf + r->sbuf_len + 5, text, n);
        r->sbuf_len += n + 5;
    }
    free (text);
    r->stream_end = true;
    lws_callback_on_writable (r->wsi);
}

static void s_exec_done (self_t *self, req_t *r, const char *error)
{
    if (!r->exited) {
        s_respond_error (r, 502, "the command's channel ended before it exited: %s",
                         error ? error : "no exit status");
        return;
    }
    ah_msg_t *exit = ah_msg_decode ("EXIT", r->exit_rec, r->exit_len, NULL);
    json_t *body = json_object ();
    json_object_set_new (body, "status", json_integer (exit ? ah_msg_int (exit, "status", -1) : -1));
    json_object_set_new (body, "signal", json_integer (exit ? ah_msg_int (exit, "signal", 0) : 0));
    json_object_set_new (body, "timed_out", json_boolean (exit && ah_msg_bool (exit, "timed_out", false)));
    json_object_set_new (body, "stdout", s_json_bytes (r->out [0], r->out_len [0]));
    json_object_set_new (body, "stderr", s_json_bytes (r->out [1], r->out_len [1]));
    json_object_set_new (body, "stdout_truncated", json_boolean (r->out_cut [0]));
    json_object_set_new (body, "stderr_truncated", json_boolean (r->out_cut [1]));
    ah_msg_destroy (&exit);
    s_respond (r, 200, body);
}

static req_t *s_chan_req (self_t *self, int64_t chan)
{
    for (req_t *r = self->pending; r; r = r->next)
        if (r->phase == PHASE_CHAN && r->chan == chan)
            return r;
    return NULL;
}

//  CHAN_DATA, CHAN_EOF, CHAN_CLOSE, CHAN_ACK from the tunnel.
static void s_on_chan (self_t *self, ah_msg_t *msg)
{
    const char *type = ah_msg_type (msg);
    int64_t chan = ah_msg_int (msg, "chan", 0);
    req_t *r = s_chan_req (self, chan);
    if (!r) {
        //  Its client left: make the tunnel drop the stream too.
        if (streq (type, "CHAN_DATA"))
            s_chan_close (self, chan);
        return;
    }
    if (streq (type, "CHAN_DATA")) {
        size_t size = 0;
        const void *data = ah_msg_bin (msg, "data", &size);
        if (!data)
            return;
        size_t kept = 0;
        if (r->upload)
            s_upload_trailer (self, r, data, size);
        else
        if (r->streaming)
            s_fs_read_data (self, r, data, size);
        else
        if (s_exec_data (r, data, size, &kept) == 0) {
            if (size > kept)
                s_chan_ack (self, chan, size - kept);
            if (r->exec_stream)
                r->ack_owed += kept;
            if (kept)
                lws_callback_on_writable (r->wsi);
        }
        else {
            s_chan_close (self, chan);
            r->chan = 0;
            s_unlink (self, r);
            s_respond_error (r, 502, "sandboxd sent a malformed exec record");
        }
    }
    else
    if (streq (type, "CHAN_ACK")) {
        r->unacked_in -= ah_msg_int (msg, "bytes", 0);
        if (r->rx_paused && r->unacked_in < (64 << 10)) {
            r->rx_paused = false;
            lws_rx_flow_control (r->wsi, 1);
        }
    }
    else
    if (streq (type, "CHAN_CLOSE")) {
        const char *error = ah_msg_str (msg, "error");
        r->chan = 0;
        if (r->is_ws) {
            s_terminal_ended (self, r, error);
            return;
        }
        if (r->upload) {
            s_upload_ended (self, r, error);
            return;
        }
        if (r->streaming) {
            if (r->stream_sent + r->sbuf_len < r->stream_total) {
                ah_warn ("api", "%s: the file stream ended early: %s", r->path, error ? error : "closed");
                r->broken = true;
                lws_callback_on_writable (r->wsi);
            }
            return;                 //  stays linked until written
        }
        if (r->exec_stream && r->status == 200) {
            s_exec_stream_end (r, error);
            return;                 //  stays linked until written
        }
        s_unlink (self, r);
        s_exec_done (self, r, error);
    }
    else
    if (streq (type, "CHAN_EOF") && r->is_ws)
        //  The shell is gone (EXIT came first): FIN in turn, so the
        //  stream ends and CHAN_CLOSE follows.
        s_chan_send (self, "CHAN_EOF", chan);
    //  Other CHAN_EOF: sandboxd's FIN after we sent ours; CHAN_CLOSE follows.
}

//  POST /api/v1/agents/{agent}/exec
static void s_exec (self_t *self, req_t *r)
{
    json_t *obj = s_body_object (r, false);
    if (!obj)
        return;
    ah_msg_t *h = ah_msg_new ("HDR");
    ah_msg_set_str (h, "ch", "exec");
    const char *key;
    json_t *v;
    double timeout = 300;
    json_object_foreach (obj, key, v) {
        if (streq (key, "cmd") && json_is_string (v) && json_string_length (v) > 0
        &&  json_string_length (v) <= 65536) {
            ah_msg_set_str (h, "cmd", json_string_value (v));
            snprintf (r->detail, sizeof r->detail, "%s", json_string_value (v));
        }
        else if (streq (key, "timeout") && json_is_number (v) && json_number_value (v) > 0
             &&  json_number_value (v) <= 7 * 86400) {
            timeout = json_number_value (v);
            ah_msg_set_double (h, "timeout", timeout);
        }
        else if (streq (key, "cwd") && json_is_string (v))
            ah_msg_set_str (h, "cwd", json_string_value (v));
        else if (streq (key, "stdin") && json_is_string (v) && json_string_length (v) <= MAX_STDIN) {
            r->sbuf_len = json_string_length (v);
            r->sbuf = malloc (r->sbuf_len + 1);
            if (r->sbuf)
                memcpy (r->sbuf, json_string_value (v), r->sbuf_len);
            else
                r->sbuf_len = 0;
        }
        else if (streq (key, "env") && json_is_object (v) && json_object_size (v) <= 256) {
            //  A map of str to str, carried as one nested msgpack map.
            msgpack_sbuffer sb;
            msgpack_sbuffer_init (&sb);
            msgpack_packer pk;
            msgpack_packer_init (&pk, &sb, msgpack_sbuffer_write);
            msgpack_pack_map (&pk, json_object_size (v));
            const char *ek;
            json_t *ev;
            bool ok = true;
            json_object_foreach (v, ek, ev) {
                if (!json_is_string (ev)) {
                    ok = false;
                    break;
                }
                msgpack_pack_str_with_body (&pk, ek, strlen (ek));
                msgpack_pack_str_with_body (&pk, json_string_value (ev), json_string_length (ev));
            }
            if (ok)
                ah_msg_set_raw (h, "env", sb.data, sb.size);
            msgpack_sbuffer_destroy (&sb);
            if (!ok) {
                s_respond_error (r, 400, "field 'env' must map names to strings");
                goto out;
            }
        }
        else {
            static const char *known [] = { "cmd", "timeout", "cwd", "stdin", "env" };
            bool is_known = false;
            for (size_t i = 0; i < sizeof known / sizeof known [0]; i++)
                is_known |= streq (known [i], key);
            if (is_known)
                s_respond_error (r, 400, "field '%s' has the wrong type or size (cmd: a string; "
                                 "timeout: seconds > 0; cwd: a path; stdin: a string of at most "
                                 "%u bytes; env: names to strings)", key, MAX_STDIN);
            else
                s_respond_error (r, 400, "unknown field '%s'", key);
            goto out;
        }
    }
    if (!ah_msg_str (h, "cmd")) {
        s_respond_error (r, 400, "field 'cmd' is required (a shell command line)");
        goto out;
    }
    if (!s_chan_agent (self, r, "exec"))
        goto out;
    r->wait_s = (int64_t) timeout + 30;
    s_chan_open (self, r, OP_EXEC, &h, s_exec_reply);
out:
    ah_msg_destroy (&h);
    json_decref (obj);
}

//  Raw bytes to a channel in CHAN_DATA pieces; the browser's or client's
//  reading pauses while the tunnel holds more than 192 KiB unACKed.
static void s_data_send (self_t *self, req_t *r, const void *data, size_t size)
{
    size_t off = 0;
    while (off < size) {
        size_t n = size - off > TUNNEL_PIECE ? TUNNEL_PIECE : size - off;
        ah_msg_t *m = ah_msg_new ("CHAN_DATA");
        ah_msg_set_int (m, "chan", r->chan);
        ah_msg_set_bin (m, "data", (const uint8_t *) data + off, n);
        ah_msg_send (&m, self->bus, "tunnel");
        r->unacked_in += (int64_t) n;
        off += n;
    }
    if (r->unacked_in > (192 << 10) && !r->rx_paused) {
        r->rx_paused = true;
        lws_rx_flow_control (r->wsi, 0);
    }
}

static void s_fs_write_reply (self_t *self, req_t *r, ah_msg_t *msg)
{
    if (!s_chan_opened (self, r, msg, 0))
        return;
    //  What came before the channel was open, then the rest as it comes.
    if (r->sbuf_len)
        s_data_send (self, r, r->sbuf, r->sbuf_len);
    free (r->sbuf);
    r->sbuf = NULL;
    r->sbuf_len = 0;
    if (r->upload_done)
        s_chan_send (self, "CHAN_EOF", r->chan);
    if (r->rx_paused && r->unacked_in <= (192 << 10)) {
        r->rx_paused = false;
        lws_rx_flow_control (r->wsi, 1);
    }
}

static int s_upload_body (self_t *self, req_t *r, const void *in, size_t len)
{
    if (r->discard_body)
        return 0;
    if (r->chan) {
        s_data_send (self, r, in, len);
        return 0;
    }
    //  Before the channel is open (lws may hand over what it had read).
    if (r->sbuf_len + len > MAX_STREAM_BUF) {
        s_respond_error (r, 503, "the sandbox did not take the upload in time");
        return 0;
    }
    char *grown = realloc (r->sbuf, r->sbuf_len + len);
    if (!grown)
        return -1;
    r->sbuf = grown;
    memcpy (r->sbuf + r->sbuf_len, in, len);
    r->sbuf_len += len;
    return 0;
}

static void s_upload_done (self_t *self, req_t *r)
{
    r->upload_done = true;
    if (r->chan && !r->discard_body)
        s_chan_send (self, "CHAN_EOF", r->chan);
}

//  sandboxd's trailer (u32 length, msgpack map) arrives as CHAN_DATA.
static void s_upload_trailer (self_t *self, req_t *r, const void *data, size_t size)
{
    if (r->sbuf_len + size > 65536 + 4)
        return;
    char *grown = realloc (r->sbuf, r->sbuf_len + size);
    if (!grown)
        return;
    r->sbuf = grown;
    memcpy (r->sbuf + r->sbuf_len, data, size);
    r->sbuf_len += size;
}

static void s_upload_ended (self_t *self, req_t *r, const char *error)
{
    s_unlink (self, r);
    const uint8_t *p = (const uint8_t *) r->sbuf;
    size_t n = r->sbuf_len >= 4 ? ((size_t) p [0] << 24 | (size_t) p [1] << 16 | (size_t) p [2] << 8 | p [3]) : 0;
    ah_msg_t *trailer = n && r->sbuf_len >= 4 + n ? ah_msg_decode ("TRAILER", p + 4, n, NULL) : NULL;
    if (!trailer)
        s_respond_error (r, 502, "the upload's channel ended without sandboxd's word: %s",
                         error ? error : "no trailer");
    else
    if (ah_msg_bool (trailer, "ok", false)) {
        json_t *body = json_object ();
        json_object_set_new (body, "path", s_json_text (r->qpath));
        json_object_set_new (body, "size", json_integer (ah_msg_int (trailer, "size", 0)));
        s_respond (r, 200, body);
    }
    else {
        const char *code = ah_msg_str (trailer, "code");
        int status = !code ? 500 : streq (code, "ENOENT") ? 404 : streq (code, "EACCES") ? 403
                   : streq (code, "ENOSPC") ? 507 : streq (code, "EISDIR") ? 409
                   : streq (code, "EINVAL") ? 400 : 500;
        const char *why = ah_msg_str (trailer, "error");
        s_respond_error (r, status, "%s", why ? why : "sandboxd refused the file");
    }
    ah_msg_destroy (&trailer);
}

//  /api/v1/agents/{agent}/fs/{list,file,mkdir}?path=...
static void s_fs (self_t *self, req_t *r, const char *what)
{
    method_t m = r->method;
    op_t op = streq (what, "list") && m == M_GET ? OP_FS_LIST
            : streq (what, "file") && m == M_GET ? OP_FS_READ
            : streq (what, "file") && m == M_DELETE ? OP_FS_REMOVE
            : streq (what, "file") && m == M_PUT && r->upload ? OP_FS_WRITE
            : streq (what, "mkdir") && m == M_POST ? OP_FS_MKDIR : OP_NONE;
    if (op == OP_NONE) {
        if (streq (what, "list") || streq (what, "file") || streq (what, "mkdir")) {
            r->allow = streq (what, "list") ? "GET" : streq (what, "file") ? "GET, PUT, DELETE" : "POST";
            s_respond_error (r, 405, "%s takes %s", r->path, r->allow);
        }
        else
            s_respond_error (r, 404, "no route %s (files: fs/list, fs/file, fs/mkdir)", r->path);
        return;
    }
    if (!r->has_qpath && op != OP_FS_LIST) {
        s_respond_error (r, 400, "query 'path' is required (relative to /home/agent)");
        return;
    }
    if (r->body_len > 0) {
        s_respond_error (r, 400, "%s takes no body", r->path);
        return;
    }
    if (!s_chan_agent (self, r, "files"))
        return;
    ah_msg_t *h = ah_msg_new ("HDR");
    static const char *channels [] = {
        [OP_FS_LIST] = "fs.list", [OP_FS_READ] = "fs.read", [OP_FS_REMOVE] = "fs.remove",
        [OP_FS_MKDIR] = "fs.mkdir", [OP_FS_WRITE] = "fs.write"
    };
    ah_msg_set_str (h, "ch", channels [op]);
    ah_msg_set_str (h, "path", r->qpath);
    if (op == OP_FS_REMOVE)
        ah_msg_set_bool (h, "recursive", r->recursive);
    if (op == OP_FS_MKDIR)
        ah_msg_set_bool (h, "parents", r->parents);
    if ((op == OP_FS_MKDIR || op == OP_FS_WRITE) && r->mode >= 0)
        ah_msg_set_int (h, "mode", r->mode);
    snprintf (r->detail, sizeof r->detail, "%s", r->qpath);
    if (op == OP_FS_WRITE && !r->upload_done && !r->rx_paused) {
        //  No body bytes until sandboxd said ok (docs/tunnel.md, fs.write).
        r->rx_paused = true;
        lws_rx_flow_control (r->wsi, 0);
    }
    s_chan_open (self, r, op, &h, op == OP_FS_READ ? s_fs_read_reply
                                : op == OP_FS_WRITE ? s_fs_write_reply : s_fs_meta_reply);
}

//  /api/v1/agents/{agent}/files[/{path}] (the documented routes; fs/* are
//  their older aliases): GET files?path=DIR lists, GET and PUT files/{path}
//  stream a file, POST files/{path}?op=mkdir, DELETE files/{path}. {path}
//  is the rest of the URL, percent-decoded by lws; sandboxd judges it.
static void s_files (self_t *self, req_t *r, const char *path)
{
    method_t m = r->method;
    if (!path || !*path) {
        if (m != M_GET) {
            r->allow = "GET";
            s_respond_error (r, 405, "%s takes GET (?path=DIR lists); name a file as files/{path}", r->path);
            return;
        }
        if (!r->has_qpath || !r->qpath [0]) {
            s_respond_error (r, 400, "%s needs ?path=DIR, relative to /home/agent ('.' is the home)",
                             r->path);
            return;
        }
        s_fs (self, r, "list");
        return;
    }
    if (r->has_qpath) {
        s_respond_error (r, 400, "%s names its path in the URL: no ?path", r->path);
        return;
    }
    snprintf (r->qpath, sizeof r->qpath, "%s", path);
    r->has_qpath = true;
    if (m == M_POST && !streq (r->action, "mkdir")) {
        s_respond_error (r, 400, "POST %s needs ?op=mkdir", r->path);
        return;
    }
    if (m != M_POST && r->action [0]) {
        s_respond_error (r, 400, "query 'op' goes with POST only");
        return;
    }
    r->action [0] = 0;
    if (m == M_GET && streq (path, ".")) {
        s_fs (self, r, "list");
        return;
    }
    if (m != M_POST && m != M_GET && m != M_PUT && m != M_DELETE) {
        r->allow = "GET, PUT, POST, DELETE";
        s_respond_error (r, 405, "%s takes GET, PUT, POST (?op=mkdir) or DELETE", r->path);
        return;
    }
    s_fs (self, r, m == M_POST ? "mkdir" : "file");
}

//  --------------------------------------------------------------------
//  The terminal: a WebSocket at /api/v1/agents/{agent}/terminal bridged to
//  a pty channel. Browser -> server: binary messages are keystrokes, text
//  messages are JSON {"cols": N, "rows": N} (resize). Server -> browser:
//  binary messages of terminal output. When the shell exits the server
//  closes with 1000 and the exit status as the reason; a refusal closes
//  with 1008 (policy) or 1011 (server) and the reason. Browsers cannot
//  set headers on a WebSocket: the token may come as ?token=.

static int s_open_terminals (self_t *self, const char *agent_id, req_t *except)
{
    int n = 0;
    for (req_t *o = self->pending; o; o = o->next)
        if (o != except && o->is_ws && o->phase == PHASE_CHAN && streq (o->agent_id, agent_id))
            n++;
    return n;
}

//  The sleeper keeps a sandbox with an open terminal awake; lifecycle
//  moves last_activity_at (at most every 30 s per terminal).
static void s_terminal_news (self_t *self, req_t *r, int open)
{
    if (open >= 0) {
        ah_msg_t *m = ah_msg_new ("TERMINALS");
        ah_msg_set_str (m, "agent_id", r->agent_id);
        ah_msg_set_int (m, "open", open);
        ah_msg_send (&m, self->bus, "sleeper");
    }
    int64_t now = zclock_mono ();
    if (open != 0 && now - r->activity_ms >= 30000) {
        r->activity_ms = now;
        ah_msg_t *m = ah_msg_new ("AGENT_ACTIVITY");
        ah_msg_set_str (m, "agent_id", r->agent_id);
        ah_msg_set_str (m, "what", "terminal");
        ah_msg_send (&m, self->bus, "lifecycle");
    }
}

//  STDIN (kind 0) or RESIZE (kind 3) records to a pty or exec channel, in
//  CHAN_DATA pieces: u8 kind, u32 big-endian length, bytes.
static void s_records_send (self_t *self, req_t *r, uint8_t kind, const void *data, size_t size)
{
    uint8_t piece [TUNNEL_PIECE];
    size_t off = 0;
    do {
        size_t n = size - off > TUNNEL_PIECE - 5 ? TUNNEL_PIECE - 5 : size - off;
        piece [0] = kind;
        piece [1] = (uint8_t) (n >> 24);
        piece [2] = (uint8_t) (n >> 16);
        piece [3] = (uint8_t) (n >> 8);
        piece [4] = (uint8_t) n;
        memcpy (piece + 5, (const uint8_t *) data + off, n);
        ah_msg_t *m = ah_msg_new ("CHAN_DATA");
        ah_msg_set_int (m, "chan", r->chan);
        ah_msg_set_bin (m, "data", piece, n + 5);
        ah_msg_send (&m, self->bus, "tunnel");
        r->unacked_in += (int64_t) n + 5;
        off += n;
    } while (off < size);
    //  Beyond the channel's credit the tunnel would reset it: hold the
    //  browser's input until the tunnel ACKs.
    if (r->unacked_in > (192 << 10) && !r->rx_paused) {
        r->rx_paused = true;
        lws_rx_flow_control (r->wsi, 0);
    }
}

static void s_terminal_resize (self_t *self, req_t *r)
{
    ah_msg_t *size = ah_msg_new ("RESIZE");
    ah_msg_set_int (size, "cols", r->cols);
    ah_msg_set_int (size, "rows", r->rows);
    uint8_t *data = NULL;
    size_t n = 0;
    if (ah_msg_encode (size, &data, &n) == 0)
        s_records_send (self, r, 3, data, n);
    free (data);
    ah_msg_destroy (&size);
}

static void s_pty_reply (self_t *self, req_t *r, ah_msg_t *msg)
{
    if (!s_chan_opened (self, r, msg, 0))
        return;
    if (r->inq_len)
        s_records_send (self, r, 0, r->inq, r->inq_len);
    free (r->inq);
    r->inq = NULL;
    r->inq_len = 0;
    s_terminal_news (self, r, s_open_terminals (self, r->agent_id, NULL));
}

//  The pty channel is gone: flush what output is left, then close.
static void s_terminal_ended (self_t *self, req_t *r, const char *error)
{
    s_unlink (self, r);
    s_terminal_news (self, r, s_open_terminals (self, r->agent_id, r));
    ah_msg_t *exit = r->exited ? ah_msg_decode ("EXIT", r->exit_rec, r->exit_len, NULL) : NULL;
    r->ws_closing = true;
    if (exit) {
        r->close_code = 1000;
        int64_t sig = ah_msg_int (exit, "signal", 0);
        if (sig)
            snprintf (r->close_reason, sizeof r->close_reason, "the shell was killed by signal %lld", (long long) sig);
        else
            snprintf (r->close_reason, sizeof r->close_reason, "the shell exited with status %lld",
                      (long long) ah_msg_int (exit, "status", -1));
    }
    else {
        r->close_code = 1011;
        snprintf (r->close_reason, sizeof r->close_reason, "the terminal's channel closed: %s",
                  error ? error : "no exit status");
    }
    ah_msg_destroy (&exit);
    lws_callback_on_writable (r->wsi);
}

//  The upgrade request: the path names an agent's terminal, the token is
//  good, the agent exists. Anything else is refused before the handshake.
static int s_ws_filter (self_t *self, req_t *r, struct lws *wsi)
{
    if (!r)
        return -1;
    s_req_reset (self, r);
    r->wsi = wsi;
    char uri [MAX_PATH];
    int n = lws_hdr_copy (wsi, uri, sizeof uri, WSI_TOKEN_GET_URI);
    const char *prefix = "/api/v1/agents/", *suffix = "/terminal";
    size_t ulen = n > 0 ? (size_t) n : 0, plen = strlen (prefix), slen = strlen (suffix);
    if (ulen <= plen + slen || strncmp (uri, prefix, plen) || strcmp (uri + ulen - slen, suffix)
    ||  ulen - plen - slen >= sizeof r->key) {
        ah_debug ("api", "refused a WebSocket for %s", n > 0 ? uri : "?");
        return -1;
    }
    snprintf (r->path, sizeof r->path, "%s", uri);
    memcpy (r->key, uri + plen, ulen - plen - slen);
    r->key [ulen - plen - slen] = 0;
    if (strchr (r->key, '/'))
        return -1;
    r->cols = 80;
    r->rows = 24;
    char token [MAX_AUTH] = "";
    char arg [MAX_AUTH + 8];
    for (int i = 0; i < 8; i++) {
        if (lws_hdr_copy_fragment (wsi, arg, sizeof arg, WSI_TOKEN_HTTP_URI_ARGS, i) < 0)
            break;
        char *value = strchr (arg, '=');
        if (!value)
            continue;
        *value++ = 0;
        if (streq (arg, "token"))
            snprintf (token, sizeof token, "%s", value);
        else if (streq (arg, "cols") || streq (arg, "rows")) {
            int v = atoi (value);
            if (v >= 1 && v <= 1000)
                *(streq (arg, "cols") ? &r->cols : &r->rows) = v;
        }
    }
    bool failed;
    bool ok = s_authorized (self, r, token [0] ? token : NULL, &failed);
    memset (token, 0, sizeof token);
    memset (arg, 0, sizeof arg);
    if (!ok) {
        ah_info ("api", "refused a terminal for '%s': %s", r->key,
                 failed ? "the token table cannot be read" : "missing or wrong token");
        return -1;
    }
    json_t *agent = s_agent_get (self, r->key, &failed);
    if (!agent) {
        ah_info ("api", "refused a terminal: no agent named '%s'", r->key);
        return -1;
    }
    snprintf (r->agent_id, sizeof r->agent_id, "%s", json_string_value (json_object_get (agent, "id")));
    json_decref (agent);
    r->is_ws = true;
    return 0;
}

static void s_ws_established (self_t *self, req_t *r)
{
    if (!r->is_ws)
        return;
    if (s_wake (self, r))
        return;                     //  issue 5: s_woken comes back here
    if (!s_chan_agent (self, r, "a terminal"))
        return;                     //  closes with the reason
    ah_msg_t *h = ah_msg_new ("HDR");
    ah_msg_set_str (h, "ch", "pty");
    ah_msg_set_str (h, "term", "xterm-256color");
    ah_msg_set_int (h, "cols", r->cols);
    ah_msg_set_int (h, "rows", r->rows);
    snprintf (r->detail, sizeof r->detail, "terminal %dx%d", r->cols, r->rows);
    r->op = OP_TERMINAL;
    s_chan_open (self, r, OP_TERMINAL, &h, s_pty_reply);
}

static int s_ws_receive (self_t *self, req_t *r, const void *in, size_t len)
{
    if (!r->is_ws || r->ws_closing)
        return 0;
    if (lws_frame_is_binary (r->wsi)) {
        if (r->chan) {
            if (len)
                s_records_send (self, r, 0, in, len);
            s_terminal_news (self, r, -1);
        }
        else if (r->inq_len + len <= (64u << 10)) {
            char *grown = realloc (r->inq, r->inq_len + len + 1);
            if (grown) {
                r->inq = grown;
                memcpy (r->inq + r->inq_len, in, len);
                r->inq_len += len;
            }
        }
        return 0;
    }
    //  Text: a control message, reassembled, small.
    if (r->ctl_len + len >= sizeof r->ctl) {
        r->ctl_len = 0;
        s_respond_error (r, 400, "a control message longer than %zu bytes", sizeof r->ctl - 1);
        return 0;
    }
    memcpy (r->ctl + r->ctl_len, in, len);
    r->ctl_len += len;
    if (!lws_is_final_fragment (r->wsi))
        return 0;
    json_t *ctl = json_loadb (r->ctl, r->ctl_len, 0, NULL);
    r->ctl_len = 0;
    json_t *cols = json_object_get (ctl, "cols"), *rows = json_object_get (ctl, "rows");
    if (json_is_integer (cols) && json_is_integer (rows)
    &&  json_integer_value (cols) >= 1 && json_integer_value (cols) <= 1000
    &&  json_integer_value (rows) >= 1 && json_integer_value (rows) <= 1000) {
        r->cols = (int) json_integer_value (cols);
        r->rows = (int) json_integer_value (rows);
        if (r->chan)
            s_terminal_resize (self, r);
    }
    else
        ah_debug ("api", "%s: ignored a control message that is not {cols, rows}", r->path);
    json_decref (ctl);
    return 0;
}

static int s_ws_writeable (self_t *self, req_t *r)
{
    if (!r->is_ws)
        return 0;
    if (r->sbuf_len) {
        size_t n = r->sbuf_len > CHUNK ? CHUNK : r->sbuf_len;
        uint8_t out [LWS_PRE + CHUNK];
        memcpy (out + LWS_PRE, r->sbuf, n);
        if (lws_write (r->wsi, out + LWS_PRE, n, LWS_WRITE_BINARY) < (int) n)
            return -1;
        memmove (r->sbuf, r->sbuf + n, r->sbuf_len - n);
        r->sbuf_len -= n;
        if (r->chan)
            s_chan_ack (self, r->chan, n);
        if (r->sbuf_len || r->ws_closing)
            lws_callback_on_writable (r->wsi);
        return 0;
    }
    if (r->ws_closing) {
        lws_close_reason (r->wsi, (enum lws_close_status) (r->close_code ? r->close_code : 1000),
                          (unsigned char *) r->close_reason, strlen (r->close_reason));
        return -1;
    }
    return 0;
}

//  Answers 405 (with Allow) unless the method is the one wanted.
static bool s_method_ok (req_t *r, method_t want, const char *allow)
{
    if (r->method == want)
        return true;
    r->allow = allow;
    s_respond_error (r, 405, "%s takes %s", r->path, allow);
    return false;
}

//  Splits "{key}" or "{key}/{action}" after a prefix into r->key and
//  *action (NULL when absent). -1 (answered 404) on more segments.
static int s_split_key (req_t *r, const char *rest, const char **action)
{
    const char *slash = strchr (rest, '/');
    size_t klen = slash ? (size_t) (slash - rest) : strlen (rest);
    *action = slash ? slash + 1 : NULL;
    bool fs = *action && strncmp (*action, "fs/", 3) == 0;
    bool files = *action && strncmp (*action, "files/", 6) == 0;   //  the rest is a path
    if (klen == 0 || klen >= sizeof r->key
    || (*action && !files && ((strchr (*action, '/') && !fs) || !**action || (fs && strchr (*action + 3, '/'))))) {
        s_respond_error (r, 404, "no route %s", r->path);
        return -1;
    }
    memcpy (r->key, rest, klen);
    r->key [klen] = 0;
    return 0;
}

//  /api/v1/agents/{agent}[/{action}]
static void s_agent_route (self_t *self, req_t *r, const char *action)
{
    method_t m = r->method;
    if (r->exec_stream && !(action && streq (action, "exec"))) {
        s_respond_error (r, 400, "query 'stream' goes with POST /api/v1/agents/{agent}/exec only");
        return;
    }
    if (!action) {
        if (m == M_GET) {
            json_t *agent = s_resolve (self, r);
            if (agent)
                s_respond (r, 200, agent);
        }
        else if (m == M_PATCH)
            s_agent_update (self, r);
        else if (m == M_DELETE)
            s_agent_transition (self, r, OP_DESTROY);
        else {
            r->allow = "GET, PATCH, DELETE";
            s_respond_error (r, 405, "/api/v1/agents/{agent} takes GET, PATCH or DELETE");
        }
        return;
    }
    if (streq (action, "operations")) {
        if (s_method_ok (r, M_GET, "GET"))
            s_operations (self, r, true);
        return;
    }
    if (streq (action, "turns")) {
        if (s_method_ok (r, M_POST, "POST"))
            s_turn (self, r, "TURN_START");
        return;
    }
    if (streq (action, "exec")) {
        if (s_method_ok (r, M_POST, "POST"))
            s_exec (self, r);
        return;
    }
    if (strncmp (action, "fs/", 3) == 0) {
        s_fs (self, r, action + 3);
        return;
    }
    if (streq (action, "files") || strncmp (action, "files/", 6) == 0) {
        s_files (self, r, action [5] ? action + 6 : NULL);
        return;
    }
    if (r->action [0]) {
        //  ?op belongs to the files route; elsewhere it is a files URL
        //  whose dot segments lws resolved out of it (files/../stop).
        s_respond_error (r, 400, "query 'op' goes with /api/v1/agents/{agent}/files/{path} only");
        return;
    }
    op_t op = streq (action, "start") ? OP_START
            : streq (action, "stop") ? OP_STOP
            : streq (action, "rebuild") ? OP_REBUILD : OP_NONE;
    if (op == OP_NONE) {
        s_respond_error (r, 404, "no route %s (actions: start, stop, rebuild, turns, operations, exec, fs/...)", r->path);
        return;
    }
    if (s_method_ok (r, M_POST, "POST")) {
        snprintf (r->action, sizeof r->action, "%s", action);
        s_agent_transition (self, r, op);
    }
}

//  Route table (docs/api.md). Called once the body (if any) is complete.
static void s_dispatch (self_t *self, req_t *r)
{
    const char *p = r->path;
    const char *action;
    if (streq (p, "/api/v1/events")) {  //  issue 5: its own query (api_events.c)
        char why [300];
        int status;
        if (s_method_ok (r, M_GET, "GET") && (status = ah_api_events_open (self->events, r->wsi, why, sizeof why)))
            s_respond_error (r, status, "%s", why);
        return;
    }
    if (s_parse_query (r))
        return;
    if (streq (p, "/api/v1/agents")) {
        if (r->method == M_GET) {
            json_t *list = s_agent_list (self);
            if (!list)
                s_respond_error (r, 500, "cannot read the database");
            else
                s_respond (r, 200, json_pack ("{s:o}", "agents", list));
        }
        else if (r->method == M_POST)
            s_agent_create (self, r);
        else {
            r->allow = "GET, POST";
            s_respond_error (r, 405, "%s takes GET or POST", p);
        }
    }
    else if (strncmp (p, "/api/v1/agents/", 15) == 0) {
        if (s_split_key (r, p + 15, &action) == 0)
            s_agent_route (self, r, action);
    }
    else if (streq (p, "/api/v1/policy")) {
        if (s_method_ok (r, M_GET, "GET")) {
            json_t *list = s_policy_list (self);
            if (!list)
                s_respond_error (r, 500, "cannot read the database");
            else
                s_respond (r, 200, json_pack ("{s:o}", "policies", list));
        }
    }
    else if (streq (p, "/api/v1/policy/reload")) {
        if (s_method_ok (r, M_POST, "POST"))
            s_policy_reload (self, r);
    }
    else if (streq (p, "/api/v1/operations")) {
        if (s_method_ok (r, M_GET, "GET"))
            s_operations (self, r, false);
    }
    else if (streq (p, "/api/v1/runtimes")) {
        if (s_method_ok (r, M_GET, "GET")) {
            ah_msg_t *msg = ah_msg_new ("CATALOG_LIST");
            s_ask (self, r, "builder", &msg, s_runtimes_reply);
        }
    }
    else if (strncmp (p, "/api/v1/runtimes/", 17) == 0) {
        if (s_split_key (r, p + 17, &action))
            return;
        if (!action || !streq (action, "briefing"))
            s_respond_error (r, 404, "no route %s (try /api/v1/runtimes/{name}/briefing)", p);
        else if (s_method_ok (r, M_GET, "GET")) {
            ah_msg_t *msg = ah_msg_new ("BRIEFING");
            ah_msg_set_str (msg, "runtime", r->key);
            s_ask (self, r, "builder", &msg, s_briefing_reply);
        }
    }
    else if (strncmp (p, "/api/v1/turns/", 14) == 0) {
        if (s_split_key (r, p + 14, &action))
            return;
        if (!action) {
            if (s_method_ok (r, M_DELETE, "DELETE"))
                s_turn (self, r, "TURN_END");
        }
        else if (!streq (action, "renew"))
            s_respond_error (r, 404, "no route %s (try /api/v1/turns/{id}/renew)", p);
        else if (s_method_ok (r, M_POST, "POST"))
            s_turn (self, r, "TURN_RENEW");
    }
    else
        s_respond_error (r, 404, "no route %s", p);
}

//  --------------------------------------------------------------------
//  lws HTTP callbacks

static method_t s_method (struct lws *wsi)
{
    static const struct { enum lws_token_indexes token; method_t method; } methods [] = {
        { WSI_TOKEN_GET_URI, M_GET }, { WSI_TOKEN_POST_URI, M_POST },
        { WSI_TOKEN_PUT_URI, M_PUT }, { WSI_TOKEN_PATCH_URI, M_PATCH },
        { WSI_TOKEN_DELETE_URI, M_DELETE }, { WSI_TOKEN_OPTIONS_URI, M_OPTIONS },
        { WSI_TOKEN_HEAD_URI, M_HEAD },
    };
    for (size_t i = 0; i < sizeof methods / sizeof methods [0]; i++)
        if (lws_hdr_total_length (wsi, methods [i].token) > 0)
            return methods [i].method;
    return M_OTHER;
}

//  Refuse the request; its body (if any) is read and dropped first when
//  it is not too large, else the connection closes after the answer.
static void s_refuse_body (req_t *r)
{
    r->discard_body = true;
    if (r->content_length > 0 && r->content_length <= MAX_DISCARD)
        r->hold = true;
    else if (r->content_length > 0)
        r->close_after = true;
}

//  A new request: headers are in. Answers at once or waits for the body.
static int s_on_http (self_t *self, req_t *r, const char *uri, size_t len)
{
    s_req_reset (self, r);
    if (len >= sizeof r->path || len == 0) {
        snprintf (r->path, sizeof r->path, "(long path)");
        r->close_after = true;
        s_respond_error (r, 414, "request path longer than %d bytes", MAX_PATH - 1);
        return 0;
    }
    memcpy (r->path, uri, len);
    r->path [len] = 0;
    //  One trailing slash is forgiven.
    if (len > 1 && r->path [len - 1] == '/')
        r->path [len - 1] = 0;
    r->method = s_method (r->wsi);
    r->mode = -1;
    //  PUT .../fs/file streams its body to the sandbox: another cap, no copy.
    size_t plen = strlen (r->path);
    r->upload = r->method == M_PUT && strncmp (r->path, "/api/v1/agents/", 15) == 0
             && ((plen > 23 && streq (r->path + plen - 8, "/fs/file"))
                 || (strchr (r->path + 15, '/') && strncmp (strchr (r->path + 15, '/'), "/files/", 7) == 0));
    size_t cap = r->upload ? AH_API_MAX_UPLOAD : AH_API_MAX_BODY;

    //  Body framing first: what we do not read we must not keep alive.
    char cl [32] = "";
    bool has_length = lws_hdr_total_length (r->wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0;
    if (has_length) {
        if (lws_hdr_copy (r->wsi, cl, sizeof cl, WSI_TOKEN_HTTP_CONTENT_LENGTH) < 0) {
            r->close_after = r->discard_body = true;
            s_respond_error (r, 400, "bad Content-Length");
            return 0;
        }
        char *end = NULL;
        errno = 0;
        unsigned long long n = strtoull (cl, &end, 10);
        if (errno || end == cl || *end || cl [0] == '-') {
            r->close_after = r->discard_body = true;
            s_respond_error (r, 400, "bad Content-Length '%s'", cl);
            return 0;
        }
        r->content_length = n > SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t) n;
        if (n > cap) {
            s_refuse_body (r);
            s_respond_error (r, 413, "request body of %llu bytes is over the limit of %zu bytes",
                             n, cap);
            return 0;
        }
    }
    else if (lws_hdr_total_length (r->wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0) {
        r->close_after = r->discard_body = true;
        s_respond_error (r, 411, "send the body with a Content-Length");
        return 0;
    }

    if (r->method == M_GET && streq (r->path, "/healthz")) {
        s_refuse_body (r);
        s_respond (r, 200, json_pack ("{s:b}", "ok", 1));
        return 0;
    }
    bool failed;
    if (!s_authorized (self, r, NULL, &failed)) {
        s_refuse_body (r);
        if (failed)
            s_respond_error (r, 500, "cannot read the token table");
        else
            s_respond_error (r, 401, "missing or wrong bearer token (Authorization: Bearer <token>)");
        return 0;
    }
    if (r->upload) {
        if (!has_length) {
            r->close_after = r->discard_body = true;
            s_respond_error (r, 411, "an upload needs a Content-Length");
            return 0;
        }
        if (r->content_length == 0)
            r->upload_done = true;
        s_dispatch (self, r);       //  opens the channel; the body follows
        return 0;
    }
    if (r->content_length > 0) {
        r->body = malloc (r->content_length + 1);
        if (!r->body) {
            r->close_after = r->discard_body = true;
            s_respond_error (r, 503, "out of memory for the request body");
            return 0;
        }
        r->body_cap = r->content_length;
        r->phase = PHASE_BODY;
        return 0;
    }
    s_dispatch (self, r);
    return 0;
}

static int s_on_body (self_t *self, req_t *r, const void *in, size_t len)
{
    if (r->upload)
        return s_upload_body (self, r, in, len);
    if (r->discard_body || r->phase != PHASE_BODY)
        return 0;
    if (len > r->body_cap - r->body_len) {
        r->close_after = r->discard_body = true;
        s_respond_error (r, 400, "more body than Content-Length announced");
        return 0;
    }
    memcpy (r->body + r->body_len, in, len);
    r->body_len += len;
    return 0;
}

static int s_on_body_done (self_t *self, req_t *r)
{
    if (r->hold) {
        r->hold = false;            //  all read: the answer may go now
        lws_callback_on_writable (r->wsi);
        return 0;
    }
    if (r->upload) {
        s_upload_done (self, r);
        return 0;
    }
    if (r->discard_body || r->phase != PHASE_BODY)
        return 0;
    r->body [r->body_len] = 0;
    r->phase = PHASE_IDLE;
    s_dispatch (self, r);
    return 0;
}

//  One lws_write per call: the headers, then body chunks.
//  fs.read's body: bytes from the channel as they come, ACKed once
//  written. 1: more to come, 0: all written, -1: close the connection.
static int s_stream_writeable (self_t *self, req_t *r)
{
    if (r->broken)
        return -1;
    if (r->sbuf_len == 0)
        return r->stream_sent < r->stream_total ? 1 : 0;
    size_t n = r->sbuf_len > CHUNK ? CHUNK : r->sbuf_len;
    bool last = r->stream_sent + n == r->stream_total;
    uint8_t out [LWS_PRE + CHUNK];
    memcpy (out + LWS_PRE, r->sbuf, n);
    if (lws_write (r->wsi, out + LWS_PRE, n, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < (int) n)
        return -1;
    memmove (r->sbuf, r->sbuf + n, r->sbuf_len - n);
    r->sbuf_len -= n;
    r->stream_sent += n;
    if (r->chan)
        s_chan_ack (self, r->chan, n);
    if (last)
        return 0;
    if (r->sbuf_len)
        lws_callback_on_writable (r->wsi);
    return 1;
}

//  exec ?stream=1: the headers, then sbuf's records in HTTP/1.1 chunks
//  (framed here: the length is not known up front), the last one with
//  the zero chunk. Payload bytes are ACKed as they are written.
static int s_exec_stream_writeable (self_t *self, req_t *r)
{
    if (!r->headers_sent) {
        uint8_t buf [LWS_PRE + 1024];
        uint8_t *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf - 1;
        if (lws_add_http_common_headers (r->wsi, 200, "application/vnd.agenthold.exec-records",
                                         LWS_ILLEGAL_HTTP_CONTENT_LEN, &p, end)
        ||  lws_add_http_header_by_name (r->wsi, (const uint8_t *) "transfer-encoding:",
                                         (const uint8_t *) "chunked", 7, &p, end)
        ||  lws_finalize_write_http_header (r->wsi, start, &p, end))
            return -1;
        r->headers_sent = true;
        if (r->sbuf_len || r->stream_end)
            lws_callback_on_writable (r->wsi);
        return 0;
    }
    if (r->sbuf_len == 0 && !r->stream_end)
        return 0;
    size_t n = r->sbuf_len > CHUNK ? CHUNK : r->sbuf_len;
    bool last = r->stream_end && n == r->sbuf_len;
    uint8_t out [LWS_PRE + CHUNK + 32];
    size_t pos = 0;
    if (n) {
        pos = (size_t) snprintf ((char *) out + LWS_PRE, 16, "%zx\r\n", n);
        memcpy (out + LWS_PRE + pos, r->sbuf, n);
        pos += n;
        memcpy (out + LWS_PRE + pos, "\r\n", 2);
        pos += 2;
    }
    if (last) {
        memcpy (out + LWS_PRE + pos, "0\r\n\r\n", 5);
        pos += 5;
    }
    if (lws_write (r->wsi, out + LWS_PRE, pos, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < (int) pos)
        return -1;
    memmove (r->sbuf, r->sbuf + n, r->sbuf_len - n);
    r->sbuf_len -= n;
    size_t ack = n < r->ack_owed ? n : r->ack_owed;
    if (ack && r->chan) {
        s_chan_ack (self, r->chan, ack);
        r->ack_owed -= ack;
    }
    if (last) {
        s_req_reset (self, r);
        return lws_http_transaction_completed (r->wsi) ? -1 : 0;
    }
    if (r->sbuf_len || r->stream_end)
        lws_callback_on_writable (r->wsi);
    return 0;
}

static int s_on_writeable (self_t *self, req_t *r)
{
    if (r->exec_stream && r->phase == PHASE_CHAN && r->status == 200)
        return s_exec_stream_writeable (self, r);
    bool streaming = r->streaming && r->phase == PHASE_CHAN;
    if (!streaming && (r->phase != PHASE_RESPOND || !r->resp || r->hold))
        return 0;
    if (streaming && !r->headers_sent && r->broken) {
        //  Nothing written yet: the failure can still be said.
        r->streaming = false;
        s_unlink (self, r);
        s_respond_error (r, 502, "the file's stream from the sandbox ended early");
        return 0;
    }
    if (streaming && r->headers_sent) {
        int rc = s_stream_writeable (self, r);
        if (rc < 0)
            return -1;
        if (rc > 0)
            return 0;
        //  All written; sandboxd's FIN follows, nothing to reset.
        r->chan = 0;
        s_req_reset (self, r);
        return lws_http_transaction_completed (r->wsi) ? -1 : 0;
    }
    if (!r->headers_sent) {
        uint8_t buf [LWS_PRE + 1024];
        uint8_t *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf - 1;
        if (lws_add_http_common_headers (r->wsi, (unsigned) r->status,
                                         streaming ? "application/octet-stream" : "application/json",
                                         streaming ? r->stream_total : r->resp_len, &p, end))
            return -1;
        if (r->allow && lws_add_http_header_by_name (r->wsi, (const uint8_t *) "allow:",
                            (const uint8_t *) r->allow, (int) strlen (r->allow), &p, end))
            return -1;
        if (r->status == 401 && lws_add_http_header_by_name (r->wsi,
                            (const uint8_t *) "www-authenticate:", (const uint8_t *) "Bearer", 6, &p, end))
            return -1;
        if (r->close_after && lws_add_http_header_by_name (r->wsi,
                            (const uint8_t *) "connection:", (const uint8_t *) "close", 5, &p, end))
            return -1;
        if (lws_finalize_write_http_header (r->wsi, start, &p, end))
            return -1;
        r->headers_sent = true;
        if (streaming && r->stream_total > 0) {
            if (r->sbuf_len || r->broken)
                lws_callback_on_writable (r->wsi);
            return 0;
        }
        if (streaming)
            r->chan = 0;            //  an empty file: done
        else if (r->resp_len > 0) {
            lws_callback_on_writable (r->wsi);
            return 0;
        }
    }
    else {
        size_t left = r->resp_len - r->resp_sent;
        size_t n = left > CHUNK ? CHUNK : left;
        bool last = n == left;
        if (lws_write (r->wsi, (uint8_t *) r->resp + LWS_PRE + r->resp_sent, n,
                       last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < (int) n)
            return -1;
        r->resp_sent += n;
        if (!last) {
            lws_callback_on_writable (r->wsi);
            return 0;
        }
    }
    //  Done with this request.
    bool close = r->close_after;
    s_req_reset (self, r);
    if (close)
        return -1;
    if (lws_http_transaction_completed (r->wsi))
        return -1;
    return 0;
}

static int s_http_callback (struct lws *wsi, enum lws_callback_reasons reason, void *user,
                            void *in, size_t len)
{
    req_t *r = user;
    self_t *self = s_self (wsi);
    switch (reason) {
        case LWS_CALLBACK_HTTP:
            if (!r)
                return -1;
            r->wsi = wsi;
            return s_on_http (self, r, in ? (const char *) in : "", in ? strlen (in) : 0);
        case LWS_CALLBACK_HTTP_BODY:
            return r ? s_on_body (self, r, in, len) : -1;
        case LWS_CALLBACK_HTTP_BODY_COMPLETION:
            return r ? s_on_body_done (self, r) : -1;
        case LWS_CALLBACK_HTTP_WRITEABLE:
            if (ah_api_events_owns (self->events, wsi))
                return ah_api_events_writeable (self->events, wsi);
            return r ? s_on_writeable (self, r) : -1;
        case LWS_CALLBACK_CLOSED_HTTP:
        case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
            ah_api_events_closed (self->events, wsi);
            if (r)
                s_req_reset (self, r);
            return 0;
        //  The terminal WebSocket (it lands here: browsers name no subprotocol).
        case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
            return s_ws_filter (self, r, wsi);
        case LWS_CALLBACK_ESTABLISHED:
            if (r)
                s_ws_established (self, r);
            return 0;
        case LWS_CALLBACK_RECEIVE:
            return r ? s_ws_receive (self, r, in, len) : -1;
        case LWS_CALLBACK_SERVER_WRITEABLE:
            return r ? s_ws_writeable (self, r) : -1;
        case LWS_CALLBACK_CLOSED:
            if (r) {
                if (r->is_ws && r->phase == PHASE_CHAN)
                    s_terminal_news (self, r, s_open_terminals (self, r->agent_id, r));
                s_req_reset (self, r);
            }
            return 0;
        default:
            break;
    }
    return lws_callback_http_dummy (wsi, reason, user, in, len);
}

//  --------------------------------------------------------------------
//  The bus, the pipe, the tick

static void s_on_bus (ah_lwsloop_t *loop, zsock_t *sock, void *arg)
{
    self_t *self = arg;
    char *err = NULL;
    ah_msg_t *msg = ah_msg_recv (sock, true, &err);
    if (!msg) {
        ah_warn ("api", "dropped a malformed message: %s", err ? err : "?");
        free (err);
        return;
    }
    const char *type = ah_msg_type (msg);
    if (streq (type, "REPLY"))
        s_on_reply (self, msg);
    else if (strncmp (type, "CHAN_", 5) == 0)
        s_on_chan (self, msg);
    else if (streq (type, "SANDBOX_STATE")) {
        const char *agent_id = ah_msg_str (msg, "agent_id");
        if (agent_id)
            s_check_waits (self, agent_id);
        ah_api_events_on_state (self->events, msg);
    }
    else if (ah_msg_has (msg, "req")) {
        ah_warn ("api", "%s from '%s' is not for the api", type, ah_msg_peer (msg));
        ah_msg_t *reply = ah_msg_reply_error (msg, 400, "api does not handle %s", type);
        ah_msg_send (&reply, self->bus, ah_msg_peer (msg));
    }
    else
        ah_debug ("api", "ignored %s from '%s'", type, ah_msg_peer (msg));
    ah_msg_destroy (&msg);
}

//  $TERM stops the actor; PORT answers the port we listen on (tests
//  that let the OS pick one with server.listen "127.0.0.1:0").
static void s_on_pipe (ah_lwsloop_t *loop, zsock_t *sock, void *arg)
{
    self_t *self = arg;
    char *cmd = zstr_recv (sock);
    if (!cmd || streq (cmd, "$TERM"))
        ah_lwsloop_stop (self->loop);
    else if (streq (cmd, "PORT"))
        zstr_sendf (sock, "%d", ah_lwsloop_port (self->loop));
    else
        ah_warn ("api", "unknown pipe command '%s'", cmd);
    zstr_free (&cmd);
}

static void s_tick_cb (lws_sorted_usec_list_t *sul)
{
    self_t *self = lws_container_of (sul, self_t, tick);
    s_check_waits (self, NULL);
    s_sweep (self);
    ah_api_events_tick (self->events);
    lws_sul_schedule (self->context, 0, &self->tick, s_tick_cb, TICK_US);
}

static const struct lws_protocols s_protocols [] = {
    { "http", s_http_callback, sizeof (req_t), 0, 0, NULL, 0 },
    { NULL, NULL, 0, 0, 0, NULL, 0 }
};

static void s_destroy (self_t *self)
{
    //  Connections close inside the context's destruction; their req_t
    //  unlink themselves (CLOSED_HTTP), so the pending list empties.
    if (self->loop) {
        lws_sul_cancel (&self->tick);
        ah_lwsloop_destroy (&self->loop);
    }
    ah_api_events_destroy (&self->events);
    self->context = NULL;
    zsock_destroy (&self->bus);
    ah_store_close (&self->store);
}

void ah_api_actor (zsock_t *pipe, void *args)
{
    const ah_api_args_t *a = args;
    self_t *self = calloc (1, sizeof *self);
    if (!self || !a || !a->config || !a->db_path) {
        ah_error ("api", "started without configuration");
        free (self);
        zsock_signal (pipe, 1);
        return;
    }
    self->pipe = pipe;
    self->config = a->config;
    self->reply_timeout_s = a->reply_timeout_s > 0 ? a->reply_timeout_s : AH_API_REPLY_TIMEOUT_S;
    char *err = NULL;
    self->store = ah_store_open (a->db_path, false, &err);
    if (!self->store) {
        ah_error ("api", "cannot open the database %s: %s", a->db_path, err ? err : "?");
        free (err);
        goto fail;
    }
    self->bus = ah_bus_connect ("api");
    if (!self->bus) {
        ah_error ("api", "cannot connect to the bus");
        goto fail;
    }
    const char *listen = a->config->listen ? a->config->listen : "127.0.0.1:8080";
    char host [256];
    int port = 0;
    if (ah_config_split_listen (listen, host, sizeof host, &port) || port < 0 || port > 65535) {
        ah_error ("api", "server.listen: cannot use '%s' (want host:port)", listen);
        goto fail;
    }
    struct lws_context_creation_info info;
    memset (&info, 0, sizeof info);
    info.port = port;
    info.iface = host [0] ? host : NULL;
    info.protocols = s_protocols;
    info.user = self;
    info.vhost_name = "api";
    info.timeout_secs = 30;
    info.keepalive_timeout = 30;
    info.max_http_header_data = 8192;
    self->loop = ah_lwsloop_new (&info);
    if (!self->loop || ah_lwsloop_port (self->loop) <= 0) {
        ah_error ("api", "cannot listen on %s (server.listen): address in use or not available", listen);
        goto fail;
    }
    self->context = ah_lwsloop_context (self->loop);
    self->events = ah_api_events_new (self->store, self->bus);
    if (ah_lwsloop_watch (self->loop, pipe, s_on_pipe, self)
    ||  ah_lwsloop_watch (self->loop, self->bus, s_on_bus, self)) {
        ah_error ("api", "cannot watch the zmq sockets in the lws loop");
        goto fail;
    }
    lws_sul_schedule (self->context, 0, &self->tick, s_tick_cb, TICK_US);
    ah_info ("api", "listening on http://%s:%d", host [0] ? host : "*", ah_lwsloop_port (self->loop));
    zsock_signal (pipe, 0);

    if (ah_lwsloop_run (self->loop))
        ah_error ("api", "the HTTP loop failed; stopping");
    //  Requests still waiting get no answer: their connections close now.
    s_destroy (self);
    free (self);
    return;
fail:
    s_destroy (self);
    free (self);
    zsock_signal (pipe, 1);
}
