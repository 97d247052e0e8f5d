/*  actors/api/api_int.h: the API actor's parts and what they share.

    DESIGN. One thread, the actor's, owns everything here: the lws context
    (a raw listener: the API reads HTTP itself, proto/http.h), every
    connection, the bus DEALER (through the actor skeleton), the SQLite
    connection it reads with, the pending requests and the tunnel
    channels. Nothing is locked because nothing is shared: its writes go
    to a worker with the writer's own connection (writer.c).

    The files, by concern:
      api.c       the actor: start-up, the bus (REPLY, CHAN_*, SANDBOX_STATE),
                  the tick, requests parked on another actor's REPLY
      http.c      a connection and its requests: read, route, authenticate,
                  body, 100-continue, respond, write, keep-alive, upgrade
      upload.c    a streamed body spliced: its consumer reads the socket
      json.c      the JSON helpers: values, a body as one object, fields
      route.c     the route table and the request target: segments decoded
                  once, queries, paths inside the home, bodies checked
                  against their route's fields
      auth.c      bearer tokens (and the session cookie, through login.c)
      chan.c      tunnel channels: open, data both ways, credit, the end
      agents.c, runtimes.c, turns.c, audit.c, exec.c, files.c, events.c,
      terminal.c, conversations.c  one route family each: its routes and its handlers
      terms.c     terminals that last: objects of their agent, kept ptys in
                  the sandbox, clients attached by id (vscreen.c: the screen)
      console.c   the web console's files and its terminal tickets
      login.c     the console's sign-in: session cookies, CSRF, logout
      passes.c    what stands for a token in a browser (sessions,
                  tickets), bounded per token and per tenant
      home_read.c a home read without its sandbox (files of an agent
                  that is not running, the tree)
      writer.c    the API's SQLite writes, in a worker, one at a time
      ws.c        the server side of the terminal's WebSocket
      sub.c       internal requests: a route served for another part
      mcp.c       POST /mcp, the Model Context Protocol, its tools
                  served by the REST routes through sub.c

    A request (req_t) lives inside its connection (conn_t) from its head
    to its last response byte. A route family that needs more state hangs
    its own struct on the request (req->ext, with its ext_ops_t: freed
    with the request, given streamed body bytes, asked for response bytes)
    instead of growing req_t: exec, files and events do.                */
#ifndef AH_API_INT_H
#define AH_API_INT_H

#include "actors/api.h"
#include "actors/api/events.h"
#include "common/actor.h"
#include "common/homepath.h"
#include "common/ident.h"
#include "common/log.h"
#include "common/lwsloop.h"
#include "common/msg.h"
#include "proto/buf.h"
#include "proto/http.h"
#include "store/store.h"

#include <jansson.h>
#include <libwebsockets.h>

#define AREA                "api"
#define API_CHUNK           (256u << 10)    //  most bytes one lws_write takes
#define API_IN_HIGH         (256u << 10)    //  stop reading a connection past this
#define API_READ_MAX        (256u << 10)    //  most bytes one read of a connection takes
#define API_MAX_QUERY       16
#define API_MAX_PARAMS      4
#define API_MAX_DISCARD     (16u << 20)     //  a refused body read and dropped up to this
#define API_IDLE_S          30              //  keep-alive and head timeout
#define API_TICK_MS         250
#define API_RUN_MAX         128             //  a run or session id the caller names

typedef struct api_t api_t;
typedef struct conn_t conn_t;
typedef struct req_t req_t;
typedef struct route_t route_t;
typedef struct api_chan_t api_chan_t;
typedef struct api_metrics_t api_metrics_t;
typedef struct api_passes_t api_passes_t;

typedef enum {
    M_GET = 1, M_HEAD = 2, M_POST = 4, M_PUT = 8, M_PATCH = 16, M_DELETE = 32, M_OPTIONS = 64
} method_t;

//  --------------------------------------------------------------------
//  The actor (api.c)

struct api_t {
    ah_actor_t *actor;
    const ah_config_t *config;
    ah_driver_t *driver;            //  borrowed, may be NULL (ah_api_args_t)
    ah_store_t *store;
    ah_lwsloop_t *loop;
    struct lws_vhost *vhost;                //  the listener (server.listen)
    struct lws_protocols protocols [2];     //  its protocol, and the terminator
    req_t *pending;                 //  parked on a REPLY or a state
    api_chan_t *chans;              //  tunnel channels, open or opening
    conn_t *flush;                  //  WebSockets written at the turn's end (http.c)
    struct api_sub_t *subs_due;     //  internal requests whose round runs at the turn's end (sub.c)
    struct api_abandoned_t *abandoned;      //  opens whose owner left (chan.c)
    int64_t next_req;
    int reply_timeout_s;
    int body_stall_s;               //  a body that stops coming closes its connection
    ah_api_events_t *events;
    struct terminal_t *terminals;   //  open terminals (terminal.c)
    zhashx_t *port_sockets;         //  agent id -> WebSockets open through its ports (proxy.c)
    struct term_t *terms;           //  terminals that last, of every agent (terms.c)
    struct tlist_t *term_lists;     //  ptys channels asking what a sandbox keeps (terms.c)
    bool terms_scanned;             //  the sandboxes connected before the API started asked (terms.c)
    int64_t terms_budget;           //  output bytes their screens may take now (terms.c)
    int64_t terms_budget_ms;        //  when it was last filled
    struct prompt_t *prompts;       //  prompts' streams (conversations.c)
    api_metrics_t *metrics;         //  what GET /metrics counts (metrics.c)
    api_passes_t *sessions;         //  the console's sign-ins (login.c)
    api_passes_t *tickets;          //  terminal tickets (console.c)
    int64_t started_ms;             //  when this actor started (the sleeper counts idleness from then too)
    //  The writer (writer.c): writes queued, one out at a time
    char *db_path;
    struct api_write_t *writes, *writes_tail;
    ah_store_t *writer_store;       //  NULL while a job holds it
    bool writer_busy;
    //  The port links' key (proxy.c), <data_dir>/ports.key
    uint8_t port_key [32];
    bool port_key_ok;
    struct ah_policy_t *ports_rule; //  lua/ports.lua (public ports), NULL: refused (proxy.c)
};

//  The writer (writer.c): the API's writes to SQLite run in a worker,
//  one at a time in the order asked, on the writer's own connection.
//  write (worker thread): 0, or an HTTP status with why filled; it may
//  use only store and arg. done (the API's thread, may be NULL): r is
//  the request that waited (parked until then, as api_ask parks it;
//  NULL when none was given or it went away), with write's status and
//  why; it owns arg. done may run before api_write returns: the caller
//  does not touch r after. -1: out of memory (nothing queued, arg the
//  caller's).
typedef struct api_write_t api_write_t;
typedef int  (api_write_fn) (ah_store_t *store, void *arg, char *why, size_t why_size);
typedef void (api_written_fn) (api_t *api, req_t *r, void *arg, int status, const char *why);
int  api_write (req_t *r, api_t *api, api_write_fn *write, api_written_fn *done, void *arg);
//  The actor's end: the writes still queued run here.
void api_writer_end (api_t *api);
//  One statement as a write: api_stmt (static SQL), its named values,
//  then api_stmt_write (taken, also on failure; done gets the statement,
//  whose api_stmt_changes says the rows it changed and api_stmt_ctx
//  gives ctx back, the caller's to free; a constraint is a 409). The
//  builders pass NULL on (out of memory), and api_stmt_write of NULL
//  is -1 (ctx still the caller's).
#define API_STMT_MAX 8
typedef struct api_stmt_t api_stmt_t;
api_stmt_t *api_stmt (const char *sql);
api_stmt_t *api_stmt_text (api_stmt_t *s, const char *name, const char *text);   //  NULL text: SQL NULL
api_stmt_t *api_stmt_int (api_stmt_t *s, const char *name, int64_t num);
int  api_stmt_write (req_t *r, api_t *api, api_stmt_t *s, api_written_fn *done, void *ctx);
int  api_stmt_changes (const api_stmt_t *s);
void *api_stmt_ctx (const api_stmt_t *s);
void api_stmt_free (api_stmt_t *s);

//  --------------------------------------------------------------------
//  Internal requests (sub.c): a route served for another of the API's
//  own parts (MCP's tools, mcp.c) by the same code as over a socket.
//  The request is written as bytes into a connection of its own that has
//  no socket: its head and body are read, routed, authenticated (as the
//  parent: who it was, judged against this route by api_auth_as, with its
//  CSRF and Origin headers and ?tenant=), checked and handled by http.c
//  as any other, and
//  what would go to the socket is kept, whole, up to API_SUB_MAX bytes of
//  body. done runs once, from the API's loop (never inside api_sub_new):
//  the status, the Content-Type ("" none), the body (de-chunked), owner;
//  the answer is borrowed for the call. An answer over the cap is a 413
//  of this layer's own ({"error"}), a broken one a 502.
#define API_SUB_MAX         (8u << 20)
typedef struct api_sub_t api_sub_t;
typedef void (api_sub_fn) (void *owner, int status, const char *type, const uint8_t *body, size_t size);
//  method "GET", target path and query (percent-encoded as over the
//  wire), body (copied; NULL with 0). NULL: out of memory.
api_sub_t *api_sub_new (req_t *parent, const char *method, const char *target, const char *content_type,
                        const void *body, size_t size, api_sub_fn *done, void *owner);
//  Ends it (a request still being served ends as when its client leaves;
//  the answer done borrows goes with it);
//  no callback after this. Safe inside done.
void api_sub_destroy (api_sub_t **self_p);
//  From http.c: the connection has bytes to write, or its body goes on.
void api_sub_kick (api_sub_t *self);
//  From api_conns_flush: the rounds asked for during the turn.
void api_subs_run (api_t *api);
//  From http.c: n answer bytes leave the connection: 0, or -1 over the cap.
int  api_sub_take (api_sub_t *self, const void *data, size_t n);
//  From http.c: the answer is whole.
void api_sub_ended (api_sub_t *self);
//  From http.c: the request authenticated as its parent (api_auth_as).
int  api_sub_auth (api_sub_t *self, req_t *r);
//  n bytes of s percent-encoded into buf (unreserved bytes kept, and '/'
//  when slash): a target's segment or query value.
void api_url_encode (ah_buf_t *buf, const char *s, size_t n, bool slash);
//  The "error" sentence of a JSON answer body; NULL when it has none.
char *api_error_of (const uint8_t *body, size_t size);

//  A successful REPLY to a parked request.
typedef void (reply_fn) (req_t *r, ah_msg_t *reply);

//  Sends msg (taken) to dest with a fresh req and parks r until the
//  REPLY: on_reply gets a successful one; a refusal is answered with its
//  status and sentence (and recorded when r->kind is set); no answer
//  within the reply timeout is a 504.
void api_ask (req_t *r, const char *dest, ah_msg_t **msg_p, reply_fn *on_reply);
//  A bus message that expects no answer. 0 / -1.
int  api_send (api_t *api, const char *dest, ah_msg_t **msg_p);
//  The writer wrote tenant's egress lists or secrets, or removed the
//  tenant: EGRESS_CHANGED to the tunnel, which holds them in memory
//  (docs/messages.md). Sent before the admin is answered (secrets.c).
void api_egress_changed (api_t *api, const char *tenant);
//  Park r until its agent leaves a transitional state (?wait), or the
//  deadline; check_fn decides. Unparks what is parked.
void api_park (req_t *r, int64_t deadline_ms);
void api_unpark (req_t *r);
//  The audit row for r (r->kind set): who, what, how it went, with the
//  run (r->run) and byte count (r->has_bytes) when there are.
void api_record (req_t *r, bool ok, const char *error);
//  The run r's operation is recorded with: the one it names, else the
//  run of the turn its token holds open on the agent, else "".
const char *api_run_of (const req_t *r);
//  Looks up the turn the token of r holds open on r->agent_id (the
//  latest begun) and keeps its run in r->turn_run.
void api_turn_run (req_t *r);
//  A run or session id as a caller names it (1..128 printable ASCII
//  bytes, no spaces): NULL when good, else why.
const char *api_run_check (const char *run);
//  Open terminals' bytes into the audit trail, each
//  audit.terminal_bytes_interval (terminal.c); from the tick.
void api_terminals_tick (api_t *api);
//  Terminals that last (terms.c): the WebSocket of the terminal route
//  with ?terminal=ID attached to one (r's agent resolved; answers
//  itself), reconnects from the tick, all freed at the actor's end, and
//  how many of agent_id's have a client (they count as open terminals).
void api_terms_attach (req_t *r, const char *id, int cols, int rows, bool sized);
void api_terms_tick (api_t *api);
void api_terms_end (api_t *api);
void api_terms_on_state (api_t *api, const char *agent_id, const char *state);
//  The agent's sandboxd said hello: the terminals it keeps that this
//  server does not know (it restarted) are adopted.
void api_terms_on_connected (api_t *api, const char *agent_id);
int  api_terms_watched (api_t *api, const char *agent_id);
//  Whether agent (taken) may have a terminal (not being destroyed):
//  false answered 409 (terminal.c).
bool api_terminal_agent_ok (req_t *r, json_t *agent);
//  TERMINALS to the sleeper: agent_id's open terminals (terminal.c).
void api_terminals_news (api_t *api, const char *agent_id);
//  AGENT_ACTIVITY to lifecycle (moves last_activity_at).
void api_activity (api_t *api, const char *agent_id, const char *what);

//  --------------------------------------------------------------------
//  Connections and requests (http.c)

//  What a route family adds to a request.
typedef struct {
    //  The request ends (answered, or its client left). Free ext here.
    void (*free) (req_t *r);
    //  Streamed body bytes (routes with R_STREAM): how many it took; the
    //  rest waits (reading pauses) until api_body_resume.
    size_t (*body) (req_t *r, const uint8_t *data, size_t size);
    //  All of the body arrived.
    void (*body_end) (req_t *r);
    //  A streamed response wants bytes: append to conn->out (api_out_*).
    //  1: more will come (call api_want_write when it has), 0: the body
    //  is complete, -1: close the connection now (a broken stream).
    int (*produce) (req_t *r);
    //  Optional: n bytes of conn->out went to the socket (a streamed
    //  response that queues its bytes as they come acknowledges them here).
    void (*written) (req_t *r, size_t n);
    //  Optional, with body: take up to size body bytes straight from the
    //  connection's socket fd (api_chan_splice's answers). upload.c then
    //  leaves the socket to it while the body lasts (not over TLS).
    ssize_t (*splice) (req_t *r, int fd, size_t size);
} ext_ops_t;

typedef struct {
    bool ok;
    int64_t token_id;
    char token_hash [65];           //  its row's hash: the id alone is reused (passes.c)
    char token_name [65];           //  who, for the audit trail
    char tenant [64];               //  the token's tenant
    char user [129];                //  the person the token acts for, "" none
    bool admin;
    bool metrics_only;              //  reads GET /metrics only
    //  The tenant this request acts within: the token's, or for an admin
    //  the one ?tenant= names; "" (an admin naming none) is every tenant.
    char scope [64];
    //  Signed in by the console's session cookie (login.c): the hash of
    //  its session and the CSRF value its state-changing requests carry.
    bool cookie;
    char session [65];
    char csrf [65];
} who_t;

struct req_t {
    conn_t *conn;
    api_t *api;
    //  The request as sent
    ah_http_head_t head;
    method_t method;
    char path [AH_HTTP_MAX_TARGET + 1];     //  the path as sent (no query)
    const route_t *route;
    char *params [API_MAX_PARAMS];          //  decoded captures, in pattern order
    char *qkey [API_MAX_QUERY], *qval [API_MAX_QUERY];
    size_t nquery;
    who_t who;
    //  The body
    uint64_t content_length;
    uint64_t body_seen;
    ah_buf_t body;                  //  whole JSON bodies (not streamed)
    bool expect_continue;
    bool continue_sent;
    bool discard;                   //  refused: body bytes are read and dropped
    bool abandon;                   //  ...or not even that: answer now, then close
    bool body_done;
    bool handled;                   //  the route's handler ran
    bool no_splice;                 //  its consumer could not splice: read as usual (upload.c)
    //  Parked on a REPLY or a state (api.c)
    req_t *prev, *next;
    bool linked;
    int64_t req_id;
    int64_t deadline_ms;
    reply_fn *on_reply;
    const char *asked;
    char asked_type [32];
    void (*on_deadline) (req_t *r);
    //  The asked actor refused (why: its message), or did not answer in time.
    void (*on_refused) (req_t *r, const char *why);
    void (*on_state) (req_t *r);    //  a SANDBOX_STATE for r->agent_id, or the tick
    //  The response
    int status;
    bool responded;                 //  headers (and a whole body) are queued
    bool streaming;                 //  the body comes from ext_ops->produce
    bool chunked;
    bool close_after;
    bool upgraded;                  //  now a WebSocket (ws.c)
    bool piped;                     //  a byte pipe both ways until either side ends (api_conn_pipe)
    //  The audit trail and the agent it is about
    const char *kind;               //  "create", "fs.read", ...; NULL: not recorded
    char detail [1100];
    char run [API_RUN_MAX + 1];     //  X-Agenthold-Run (or a body's "run"); "" none
    //  The run of a turn the same token holds open on the agent, found
    //  when the agent is resolved (api_turn_run); recorded when r->run is "".
    char turn_run [API_RUN_MAX + 1];
    int64_t bytes;                  //  a read's or a write's byte count, when has_bytes
    bool has_bytes;
    char agent_id [AH_AGENT_ID_LEN + 1];
    char name [AH_NAME_MAX + 1];
    char set_cookie [256];          //  a Set-Cookie header's value for the answer; "" none
    const char *location;           //  a Location header's value while a redirect is answered
    //  The route family's own state
    void *ext;
    const ext_ops_t *ext_ops;
};

typedef enum { CONN_HEAD, CONN_BODY, CONN_HANDLING, CONN_WS, CONN_CLOSED } conn_state_t;

typedef struct ws_t ws_t;

struct conn_t {
    struct lws *wsi;
    api_t *api;
    conn_state_t state;
    ah_buf_t in;                    //  read, not yet taken
    ah_buf_t out;                   //  to write (LWS_PRE headroom)
    bool rx_paused;
    bool processing;                //  s_process is running (no re-entry)
    bool closing;                   //  close once out has drained
    req_t req;                      //  the request being served
    ws_t *ws;                       //  after an upgrade (ws.c)
    bool flush_queued;              //  on api->flush: written at the turn's end
    conn_t *flush_next;
    bool splicing;                  //  the body's consumer reads the socket (ext_ops->splice)
    bool splice_watching;           //  ... and splice_io is started
    ev_io splice_io;                //  the socket readable, on the api's loop
    struct api_sub_t *sub;          //  an internal request's (sub.c): no socket, wsi NULL
};

//  The actor's flush (ah_actor_def_t): write the WebSockets the turn
//  queued output on, straight when lws holds nothing of theirs.
void api_conns_flush (void *api);

//  Answers. json: the body, taken (NULL: an empty object).
void api_respond (req_t *r, int status, json_t *json);
void api_respond_error (req_t *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
//  A whole body of another type (text/plain for /metrics); body is borrowed.
void api_respond_text (req_t *r, int status, const char *content_type, ah_buf_t *body);
//  The same with bytes held elsewhere (an embedded document).
void api_respond_bytes (req_t *r, int status, const char *content_type, const void *data, size_t n);
//  405 naming what the route takes.
void api_respond_method (req_t *r, unsigned allowed);
//  A streamed answer: the status line and headers now; the body from
//  ext_ops->produce. length: the body's length, or -1 for chunked.
void api_respond_stream (req_t *r, int status, const char *content_type, int64_t length);
//  A redirect (301, 302, 303, 307, 308) to location, with no body.
void api_respond_redirect (req_t *r, int status, const char *location);
//  Bytes for the connection (streamed bodies: api_out_chunk frames one
//  chunk when the response is chunked).
int  api_out (req_t *r, const void *data, size_t size);
int  api_out_chunk (req_t *r, const void *data, size_t size, bool last);
size_t api_out_pending (req_t *r);
void api_want_write (req_t *r);
//  The body's consumer can take more (R_STREAM routes).
void api_body_resume (req_t *r);
//  The request is going away: the client left, or its answer is out.
bool api_req_alive (const req_t *r);
//  Ask the client for the body now (Expect: 100-continue).
void api_continue (req_t *r);

//  JSON helpers (json.c).
//  The body as one JSON object; answers 400 itself and returns NULL.
json_t *api_body_object (req_t *r, bool empty_ok);
//  Invalid UTF-8 bytes and control characters become '?'.
json_t *api_json_text (const char *text);
json_t *api_json_bytes (const char *data, size_t size);
json_t *api_json_time (int64_t ms);
json_t *api_json_column (sqlite3_stmt *stmt, int col);
//  A raw (nested msgpack) field of a message as JSON; NULL if absent.
json_t *api_json_raw (const ah_msg_t *msg, const char *key);

//  The fields of obj (checked already: api_body_check) into msg as they
//  are: strings, integers, reals (a number whose bound is not whole is
//  a real, however written); null, booleans and objects left out.
void api_copy_fields (json_t *obj, ah_msg_t *msg);

//  --------------------------------------------------------------------
//  Metrics (metrics.c): what this process counts for GET /metrics.
api_metrics_t *api_metrics_new (void);
void api_metrics_destroy (api_metrics_t **m_p);
//  Each answer: its route's pattern (NULL: none matched) and status.
void api_metrics_request (api_metrics_t *m, const char *pattern, int status);
//  Bytes of a recorded operation (fs.read, fs.write, terminal.close).
void api_metrics_bytes (api_metrics_t *m, const char *kind, int64_t bytes);
//  Upload bytes a splice moved (upload.c).
void api_metrics_spliced (api_metrics_t *m, int64_t bytes);
//  Wakes, sleeps and durations from a SANDBOX_STATE.
void api_metrics_state (api_metrics_t *m, const ah_msg_t *msg);

//  --------------------------------------------------------------------
//  Routes (route.c)

typedef void (route_fn) (req_t *r);

enum {
    R_PUBLIC  = 1,                  //  no token needed
    R_STREAM  = 2,                  //  the body streams to ext_ops->body
    R_UPGRADE = 4,                  //  a WebSocket (token may come as ?token=)
    R_BODY    = 8,                  //  takes a JSON body
    R_ADMIN   = 16,                 //  admin tokens only
    R_METRICS = 32,                 //  admin or metrics tokens only (and all a metrics token may reach)
    R_RAW     = 64,                 //  the target passes as sent: any query, a trailing '/' (proxy.c)
    R_PIPE    = 128,                //  may take an Upgrade: its handler may make the connection a byte pipe (api_conn_pipe)
    R_RPC     = 256,                //  with R_BODY: a body its handler parses and refuses in its own protocol (mcp.c), up to AH_API_MAX_RPC
};

//  A JSON body's keys (route_t.body), checked before the route's handler
//  runs (api_body_check): any key not named, an empty key, a key given
//  twice or a value of another type is a 400 naming the key, and so is a
//  number off its bound (common/bounds.h: a field of type B_NUM has one,
//  of its own name) and a string holding a NUL (unless B_NUL: bytes).
//  "run" is every body's (api_body_object).
enum { B_STR = 1, B_NUM = 2, B_BOOL = 4, B_OBJ = 8, B_NULL = 16, B_NUL = 32, B_ARR = 64 };
typedef struct {
    const char *name;
    unsigned types;                 //  the JSON types it takes; 0: refused with why
    const char *why;                //  types 0: the sentence of the 400
} body_field_t;

struct route_t {
    unsigned methods;
    const char *pattern;            //  "/api/v1/agents/{agent}/start"; "{path*}" takes the rest
    route_fn *fn;
    unsigned flags;
    const char *query;              //  the query arguments it takes, space-separated
    const body_field_t *body;       //  R_BODY: its keys, ending with { NULL } (api_no_body: none)
};

//  A body that may be absent or {} and nothing else.
extern const body_field_t api_no_body [];
//  Checks obj (a parsed body of r) against r->route->body: 0, or -1
//  answered 400 naming the key.
int  api_body_check (req_t *r, json_t *obj);

//  Each family's table, ending with { 0 }.
extern const route_t api_agent_routes [], api_runtime_routes [], api_turn_routes [],
                     api_audit_routes [], api_exec_routes [], api_file_routes [],
                     api_event_routes [], api_terminal_routes [], api_tenant_routes [],
                     api_session_routes [], api_console_routes [], api_login_routes [],
                     api_host_routes [], api_tree_routes [], api_allfiles_routes [], api_port_routes [],
                     api_tombstone_routes [], api_metrics_routes [], api_conversation_routes [],
                     api_proxy_routes [], api_terms_routes [], api_pool_routes [], api_mcp_routes [],
                     api_secret_routes [];

//  The port links (proxy.c): the key read from (or made in) data_dir at
//  start (0, or -1 with *why); a link's path for the tenant's agent's
//  port, valid until expiry (seconds since the epoch) while its row id
//  stands, heap.
int  api_proxy_key_load (api_t *api, const char *data_dir, char **why);
//  A link's id (its port_links row) is API_LINK_ID_LEN lowercase hex
//  characters, signed into the link with the rest.
#define API_LINK_ID_LEN 12
char *api_port_link (api_t *api, const char *tenant, const char *agent_id, int port, int64_t expiry,
                     const char *id);
bool  api_link_id_ok (const char *id);

//  A CONV_EVENT of the conversations actor: to the prompt's stream it
//  belongs to (conversations.c).
void api_conversations_event (api_t *api, ah_msg_t *msg);

//  A printable copy of at most 64 bytes of s (controls as '?') for a message.
const char *api_show (const char *s, size_t n, char *out, size_t size);
//  Finds r's route from its path as sent: 0, or an HTTP status (400 a
//  malformed target or query, 404, 405 with *allowed) and why; nothing is
//  answered here. Fills r->route, r->params and the query.
int  api_route (req_t *r, char *why, size_t why_size, unsigned *allowed);
//  A path in the home as the client gave it (common/homepath.h), copied
//  into clean: a directory's (dir) without one trailing '/', "." taken
//  for the home when home. 0, or -1 answered 400 naming it.
int  api_home_path (req_t *r, const char *path, bool dir, bool home, char clean [AH_HOMEPATH_MAX + 1]);
//  Query values (decoded once); NULL when absent.
const char *api_query (req_t *r, const char *key);
//  Typed query values: 0 (absent: *out untouched), or -1 answered 400.
int  api_query_bool (req_t *r, const char *key, bool *out);
int  api_query_int (req_t *r, const char *key, int64_t min, int64_t max, int64_t *out);

//  --------------------------------------------------------------------
//  A home read without its sandbox (home_read.c)

//  List, read (streamed) or read in JSON (cut at files.max_read_bytes)
//  path (checked) in the home of r's agent, resolved and not running, in
//  state: 1 when answered, 0 when its home is not a directory the server
//  reads (or state is creating or destroying): the caller answers.
typedef enum { API_HOME_LIST, API_HOME_READ, API_HOME_TEXT } api_home_op_t;
int  api_home_files (req_t *r, api_home_op_t op, const char *path, const char *state);
//  The answer of a read in JSON (fs/text): data, len bytes of path, whose
//  size is size, cut at cap (files.max_read_bytes): "truncated" and a
//  notice when len < size.
json_t *api_text_body (const char *path, const uint8_t *data, size_t len, uint64_t size, int64_t cap);
//  A listing's entries from sandboxd (borrowed) as a person reads them:
//  the hidden names left out unless ?all, entries under uploads/ marked.
json_t *api_home_entries (req_t *r, const char *dir, json_t *entries);
//  The tree of r's running agent walked by its sandboxd (tree.c): path
//  checked, ?all given. Answers itself. reader: by the reader of the
//  sleeping agent instead (reader.c).
void api_tree_sandbox (req_t *r, const char *path, bool all, bool reader);

//  --------------------------------------------------------------------
//  A sleeping agent's home through its reader (reader.c)

//  Whether r's agent, in state, is read through a reader (the driver
//  makes readers: kubernetes; the agent sleeps).
bool api_reader_serves (req_t *r, const char *state);
//  READER_OPEN to lifecycle: go (r, reply) once the agent's reader is
//  connected; a refusal or no reader in time is answered (409, 503, 504).
void api_reader_ask (req_t *r, reply_fn *go);
//  While a read through the reader streams: READER_KEEP to lifecycle at
//  most every API_READER_KEEP_MS (*last_ms: when it was last sent), so a
//  download longer than reader_idle is not cut.
#define API_READER_KEEP_MS  5000
void api_reader_keep (api_t *api, const char *agent_id, int64_t *last_ms);

//  --------------------------------------------------------------------
//  Authentication (auth.c)

//  The bearer token (else the session cookie and its CSRF rules, else
//  ?token= on R_UPGRADE routes), then ?tenant=: 0
//  with r->who set, or an HTTP status with the answer already given (401
//  a missing, wrong, revoked or expired token; 403 a tenant token naming
//  another tenant; 404 no such tenant; 500).
int  api_auth (req_t *r);
//  The same for a request made for another (an internal one, sub.c) by
//  who that one was: who copied, then the route's checks (metrics,
//  CSRF, ?tenant=, admin) as api_auth makes them.
int  api_auth_as (req_t *r, const who_t *who);
//  A token (or, for a session or a ticket, a token's id and the hash its
//  row had: another row with that id is not it) into r->who: 0, 401 with
//  why (wrong, gone, revoked, expired), or 500.
int  api_token_who (req_t *r, const char *token, char *why, size_t why_size);
int  api_token_who_by_id (req_t *r, int64_t token_id, const char *token_hash, char *why, size_t why_size);
//  The token of that id and hash stands (neither revoked, expired nor
//  gone). A database error says no.
bool api_token_stands (ah_store_t *store, int64_t token_id, const char *token_hash);

//  --------------------------------------------------------------------
//  Passes (passes.c): a secret handed to a browser in a token's stead,
//  bound to that token (id and hash), bounded per token and per tenant.

typedef struct {
    const char *what;               //  "console sessions", for the 429
    const char *one;                //  "session"
    const char *end_one;            //  how a user ends one, for the 429
    size_t per_token;               //  at it, the token's own oldest goes
    size_t per_tenant;              //  at it, a new one is refused (429)
    size_t most;                    //  the table's backstop (429)
    int64_t ttl_ms;
} api_passes_rules_t;

typedef struct {
    char key [65];                  //  SHA-256 of the secret (the secret is never kept)
    int64_t token_id;
    char token_hash [65];
    bool admin;                     //  admin tokens count apart from their tenant's
    char tenant [64];               //  the token's tenant
    char scope [64];                //  the tenant the token acted within
    char tag [65];                  //  the kind's own: the CSRF value, the agent id
    int64_t issued;                 //  the order of issue (many fall in one millisecond)
    int64_t expires_ms;
} api_pass_t;

extern const api_passes_rules_t api_session_rules, api_ticket_rules;
api_passes_t *api_passes_new (const api_passes_rules_t *rules);
void api_passes_destroy (api_passes_t **self_p);
//  A new pass for r's token (who), tagged: its secret into secret, 0;
//  or an HTTP status already answered (429 at a bound, 503).
int  api_passes_issue (api_passes_t *self, req_t *r, const char *tag, char secret [65]);
//  The live pass a secret names, copied into *pass: 0, or -1 (none,
//  expired: an expired one is dropped). take: it is used up.
int  api_passes_find (api_passes_t *self, const char *secret, bool take, api_pass_t *pass);
//  The pass of that key (hash) ends: whether there was one.
bool api_passes_drop (api_passes_t *self, const char *key);
//  Every pass of that token (id and hash) ends.
void api_passes_drop_token (api_passes_t *self, int64_t token_id, const char *token_hash);
//  Every session and ticket of api whose token no longer stands (revoked,
//  expired, removed), or that expired, ends.
void api_passes_sweep (api_t *api);

//  --------------------------------------------------------------------
//  The console's sign-in by cookie (login.c)

//  The session cookie of r's Cookie header into value: 1, 0 when none
//  is sent, -1 a malformed or doubled one (why set).
int  api_session_cookie (req_t *r, char value [65], char *why, size_t why_size);
//  The session named by that cookie into r->who (its token read afresh):
//  0, 401 with why (unknown, ended, expired, its token revoked), 500.
int  api_session_who (req_t *r, const char *value, char *why, size_t why_size);
//  A request signed in by cookie: its Origin, when sent, is this server,
//  and a state-changing one carries X-Agenthold-CSRF. 0, or 403 answered.
int  api_session_csrf (req_t *r);
//  The Origin header, when a browser sends one, names this server.
bool api_same_origin (req_t *r);
//  Who r is (GET /api/v1/me, the login's answer); with the CSRF value
//  when signed in by cookie.
json_t *api_me_json (req_t *r);

//  The tenant a new thing of this request belongs to: the scope, or the
//  token's own tenant for an admin acting within none.
const char *api_tenant (const req_t *r);

//  --------------------------------------------------------------------
//  Agents (agents.c), shared with the other families

//  An agent by id or name, within scope ("" every tenant), as JSON (the
//  agent object of docs/api.md). NULL with *status: 404 none (an agent
//  of another tenant is none), 409 a name several tenants hold (scope
//  ""), 500 a database error.
json_t *api_agent_get (api_t *api, const char *key, const char *scope, int *status);
//  params [0] names an agent: resolve it into r->agent_id and r->name.
//  Answers 400 (neither a name nor an id), 404 or 500 itself and returns
//  NULL; else the agent as JSON (the caller's).
json_t *api_agent_resolve (req_t *r);
bool api_transitional (const char *state);
//  Any use thaws (issue 29): when state is frozen, freezing or thawing,
//  asks lifecycle to thaw the request's agent (SANDBOX_THAW, by the
//  request's token, the reason why) and says true: the use goes on as
//  on a running agent, its channel's frames waiting in the tunnel's
//  socket until sandboxd runs again (docs/architecture.md). false
//  otherwise (nothing sent).
bool api_thaw (req_t *r, const char *state, const char *why);

//  --------------------------------------------------------------------
//  Tunnel channels (chan.c)

typedef struct {
    //  sandboxd accepted: reply is CHAN_OPEN's REPLY (its "reply" field
    //  holds sandboxd's header).
    void (*opened) (void *owner, ah_msg_t *reply);
    //  The channel could not open: an HTTP status and a sentence.
    void (*refused) (void *owner, int status, const char *error, ah_msg_t *reply);
    //  Bytes from sandboxd; pass them on and api_chan_ack what left.
    void (*data) (void *owner, const uint8_t *data, size_t size);
    //  sandboxd sent FIN.
    void (*eof) (void *owner);
    //  The channel is gone (error NULL: both sides ended it cleanly).
    void (*closed) (void *owner, const char *error);
    //  The tunnel took bytes we sent: api_chan_room grew.
    void (*writable) (void *owner);
} chan_ops_t;

struct api_chan_t {
    api_t *api;
    const chan_ops_t *ops;
    void *owner;
    int64_t id;                     //  the tunnel's; 0 while opening
    int64_t open_req;               //  CHAN_OPEN's req while opening
    int64_t open_deadline_ms;
    int64_t unacked;                //  sent, not yet taken by the tunnel
    bool linked;
    api_chan_t *prev, *next;
    //  Its pipe (api_chan_splice): every byte after the first spliced one
    //  goes through it. The read end is the tunnel's once handed over.
    bool piped, pipe_handed;
    int pipe_w, pipe_r;
};

#define API_CHAN_CREDIT     (1792u << 10)   //  most bytes in flight to the tunnel (its credit less one CHAN_DATA)

//  Opens a channel on agent_id's connection with header (taken). 0, or
//  -1 (refused is called first... not: -1 means nothing was sent).
int  api_chan_open (api_t *api, api_chan_t *chan, const char *agent_id, ah_msg_t **header_p,
                    const chan_ops_t *ops, void *owner);
//  The same on the agent's reader's connection (reads only, docs/tunnel.md).
int  api_chan_open_reader (api_t *api, api_chan_t *chan, const char *agent_id, ah_msg_t **header_p,
                           const chan_ops_t *ops, void *owner);
//  Bytes to sandboxd (as CHAN_DATA pieces). 0 / -1.
int  api_chan_send (api_chan_t *chan, const void *data, size_t size);
//  Bytes to sandboxd as far as the channel takes them now (its credit;
//  a piped channel's pipe): how many, or -1 when it is closed or broken.
ssize_t api_chan_write (api_chan_t *chan, const void *data, size_t size);
//  Up to size bytes moved from fd (a socket) to sandboxd without passing
//  through our memory: spliced into the channel's pipe (made on first
//  use), the tunnel splices them on. Bytes moved, 0 when fd has none now,
//  or one of these:
enum {
    API_SPLICE_BROKEN = -1,         //  fd ended or failed, or the bus did: close the connection
    API_SPLICE_FULL   = -2,         //  no room: wait for writable
    API_SPLICE_CANNOT = -3,         //  not now or not here (closed, no pipe): read as usual
};
ssize_t api_chan_splice (api_chan_t *chan, int fd, size_t size);
//  One record (u8 kind, u32 length, payload) to sandboxd.
int  api_chan_record (api_chan_t *chan, uint8_t kind, const void *data, size_t size);
//  How many bytes may be sent before the tunnel takes some.
size_t api_chan_room (const api_chan_t *chan);
void api_chan_ack (api_chan_t *chan, size_t bytes);
void api_chan_eof (api_chan_t *chan);
//  The owner is gone: reset the stream; no callback after this.
void api_chan_close (api_chan_t *chan);
bool api_chan_open_now (const api_chan_t *chan);

//  From api.c: true when msg was the channel layer's.
bool api_chan_on_reply (api_t *api, ah_msg_t *msg);
void api_chan_on_msg (api_t *api, ah_msg_t *msg);
void api_chan_tick (api_t *api);
void api_chan_shutdown (api_t *api);

//  HTTP status for a sandboxd refusal code (ENOENT 404, ...).
int  api_code_status (const char *code);

//  --------------------------------------------------------------------
//  The terminal's WebSocket (ws.c, terminal.c)

//  A WebSocket message to the terminal (binary or text), or its close.
typedef struct {
    void (*message) (void *owner, bool binary, const uint8_t *data, size_t size);
    void (*closed) (void *owner);   //  the peer closed or the connection dropped
    void (*free) (void *owner);     //  the connection is gone: free owner
    //  bytes of queued output the connection has written since last told
    void (*written) (void *owner, size_t bytes);
} ws_ops_t;

//  Answers r's upgrade (101) and turns its connection into a WebSocket
//  served by ops. 0, or -1 (answered with an HTTP error already).
int  api_ws_accept (req_t *r, const ws_ops_t *ops, void *owner);
//  One binary message; 0 / -1.
int  api_ws_send (conn_t *conn, const void *data, size_t size);
//  Bytes queued, not yet written (back-pressure).
size_t api_ws_pending (conn_t *conn);
//  Close with a code and reason once what is queued is written.
void api_ws_close (conn_t *conn, int code, const char *reason);
//  Pause / resume reading the client (input back-pressure).
void api_ws_read (conn_t *conn, bool on);
//  From http.c.
void api_ws_rx (conn_t *conn);
void api_ws_written (conn_t *conn);
void api_ws_gone (conn_t *conn);

//  From http.c, for ws.c: write what conn->out holds; the request that
//  asked for the upgrade is over and the connection speaks WebSocket.
void api_conn_want_write (conn_t *conn);
void api_conn_upgraded (conn_t *conn);
//  One write of conn->out (a WRITEABLE, or an internal request's round,
//  sub.c): 0, or -1 when the connection must close.
int  api_conn_writeable (conn_t *conn);
//  The connection is gone: its request and buffers freed.
void api_conn_closed (conn_t *conn);
//  r's answer head (101) is queued: from now on every byte the client
//  sends goes to ext_ops->body, with its backpressure, until either side
//  closes; no body stall timeout (a quiet socket is not a stalled upload).
//  The answer streams from ext_ops->produce as before; the connection
//  closes after it. R_PIPE routes only.
void api_conn_pipe (req_t *r);
//  From http.c, for upload.c: take what conn->in holds as far as the
//  state allows; set the stall timeout for a body that stops coming.
void api_conn_process (conn_t *conn);
void api_conn_stall_watch (conn_t *conn);

//  A streamed body spliced (upload.c): start when the request allows it
//  (or watch the socket again once there is room), stop (lws reads
//  again), watch the socket or not (off when the connection closes).
void api_splice_start (conn_t *conn);
void api_splice_stop (conn_t *conn);
void api_splice_watch (conn_t *conn, bool on);

#endif
