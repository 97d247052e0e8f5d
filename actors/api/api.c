/*  actors/api/api.c: the API actor itself (see api.h, api_int.h and
    docs/api.md): start-up, the bus, the tick, and requests parked on
    another actor's answer.

    DESIGN. The actor runs on an lwsloop (common/actor.h): lws serves the
    listener and every connection, and the bus rides in the same loop, so
    a REPLY, a CHAN_DATA and an HTTP callback take turns on one thread.
    A request that asks another actor is linked into api->pending with
    the req it sent; the REPLY finds it there. A request whose client
    leaves is unlinked first (http.c frees it), so a late REPLY finds
    nothing and is dropped.                                             */
#include "actors/api/api_int.h"
#include "policy/policy.h"

#include <string.h>

extern const struct lws_protocols api_http_protocol;

//  --------------------------------------------------------------------
//  Parked requests

static void s_link (req_t *r)
{
    api_t *api = r->api;
    if (r->linked)
        return;
    r->prev = NULL;
    r->next = api->pending;
    if (api->pending)
        api->pending->prev = r;
    api->pending = r;
    r->linked = true;
}

void api_unpark (req_t *r)
{
    if (!r->linked)
        return;
    if (r->prev)
        r->prev->next = r->next;
    else
        r->api->pending = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
    r->linked = false;
    r->req_id = 0;
    r->asked = NULL;
}

void api_park (req_t *r, int64_t deadline_ms)
{
    r->deadline_ms = deadline_ms;
    s_link (r);
}

int api_send (api_t *api, const char *dest, ah_msg_t **msg_p)
{
    return ah_actor_send (api->actor, dest, msg_p);
}

void api_ask (req_t *r, const char *dest, ah_msg_t **msg_p, reply_fn *on_reply)
{
    api_t *api = r->api;
    r->on_reply = on_reply;
    r->asked = dest;
    snprintf (r->asked_type, sizeof r->asked_type, "%s", ah_msg_type (*msg_p));
    r->req_id = ++api->next_req;
    ah_msg_set_int (*msg_p, "req", r->req_id);
    if (api_send (api, dest, msg_p)) {
        r->asked = NULL;
        api_respond_error (r, 503, "cannot reach %s", dest);
        return;
    }
    r->on_deadline = NULL;
    r->on_state = NULL;
    api_park (r, zclock_mono () + (int64_t) api->reply_timeout_s * 1000);
}

void api_record (req_t *r, bool ok, const char *error)
{
    if (!r->kind)
        return;
    ah_msg_t *rec = ah_msg_new ("OP_RECORD");
    if (r->agent_id [0])
        ah_msg_set_str (rec, "agent_id", r->agent_id);
    else
        ah_msg_set_nil (rec, "agent_id");
    ah_msg_set_strf (rec, "actor", "api:%s", r->who.token_name [0] ? r->who.token_name : "?");
    if (!r->agent_id [0])
        ah_msg_set_str (rec, "tenant", api_tenant (r));     //  else the agent's, found by the recorder
    ah_msg_set_str (rec, "kind", r->kind);
    if (r->name [0])
        ah_msg_set_str (rec, "agent_name", r->name);
    if (*api_run_of (r))
        ah_msg_set_str (rec, "run", api_run_of (r));
    if (r->has_bytes) {
        ah_msg_set_int (rec, "bytes", r->bytes);
        api_metrics_bytes (r->api->metrics, r->kind, r->bytes);
    }
    if (r->detail [0])
        ah_msg_set_str (rec, "detail", r->detail);
    ah_msg_set_bool (rec, "ok", ok);
    if (!ok && error)
        ah_msg_set_str (rec, "error", error);
    api_send (r->api, "recorder", &rec);
}

const char *api_run_of (const req_t *r)
{
    return r->run [0] ? r->run : r->turn_run;
}

void api_turn_run (req_t *r)
{
    r->turn_run [0] = 0;
    if (!r->agent_id [0] || !r->who.token_name [0])
        return;
    char actor [80];
    snprintf (actor, sizeof actor, "api:%s", r->who.token_name);
    sqlite3_stmt *st = ah_store_prepare (r->api->store,
        "SELECT coalesce (run, id) FROM turns WHERE agent_id = :agent AND actor = :actor"
        " AND ended_at IS NULL AND expires_at > :now ORDER BY started_at DESC LIMIT 1");
    if (st && !ah_store_bind_text (st, ":agent", r->agent_id) && !ah_store_bind_text (st, ":actor", actor)
    &&  !ah_store_bind_int64 (st, ":now", ah_store_now_ms ())
    &&  ah_store_step (r->api->store, st) == SQLITE_ROW && sqlite3_column_text (st, 0))
        snprintf (r->turn_run, sizeof r->turn_run, "%s", (const char *) sqlite3_column_text (st, 0));
    if (st)
        sqlite3_reset (st);
}

const char *api_run_check (const char *run)
{
    size_t n = strlen (run);
    if (n == 0 || n > API_RUN_MAX)
        return "must be 1 to 128 characters";
    for (const char *c = run; *c; c++)
        if ((unsigned char) *c <= 0x20 || (unsigned char) *c >= 0x7f)
            return "may hold printable ASCII only (no spaces)";
    return NULL;
}

void api_activity (api_t *api, const char *agent_id, const char *what)
{
    ah_api_events_activity (api->events, agent_id, what);
}

//  --------------------------------------------------------------------
//  The bus

static void s_on_reply (void *arg, ah_msg_t *msg)
{
    api_t *api = arg;
    if (ah_api_events_reply (api->events, msg))
        return;                     //  a wake's SANDBOX_START (events.c)
    if (api_chan_on_reply (api, msg))
        return;                     //  a CHAN_OPEN (chan.c)
    int64_t id = ah_msg_int (msg, "req", 0);
    req_t *r = api->pending;
    while (r && !(r->asked && r->req_id == id))
        r = r->next;
    if (!r) {
        ah_debug (AREA, "REPLY for req %lld that nobody waits for (client gone?)", (long long) id);
        return;
    }
    api_unpark (r);
    if (!ah_msg_bool (msg, "ok", false)) {
        int status = (int) ah_msg_int (msg, "status", 500);
        if (status < 400 || status > 599)
            status = 500;
        const char *error = ah_msg_str (msg, "error");
        if (!error || !*error)
            error = "the request was refused";
        if (r->on_refused)
            r->on_refused (r, error);
        api_record (r, false, error);
        api_respond_error (r, status, "%s", error);
        return;
    }
    if (r->on_reply)
        r->on_reply (r, msg);
    else
        api_respond (r, 200, json_pack ("{s:b}", "ok", 1));
}

static void s_on_chan (void *arg, ah_msg_t *msg)
{
    api_chan_on_msg ((api_t *) arg, msg);
}

//  Requests waiting for an agent's state (?wait): look again.
static void s_check_states (api_t *api, const char *agent_id)
{
    req_t *r = api->pending;
    while (r) {
        req_t *next = r->next;      //  on_state may unlink r
        if (r->on_state && !r->asked && (!agent_id || streq (r->agent_id, agent_id)))
            r->on_state (r);
        r = next;
    }
}

//  sandboxd said hello, or its tunnel went: the event streams say so.
static void s_on_connected (void *arg, ah_msg_t *msg)
{
    api_t *api = arg;
    const char *agent_id = ah_msg_str (msg, "agent_id");
    if (agent_id && ah_msg_bool (msg, "connected", false))
        api_terms_on_connected (api, agent_id);
    ah_api_events_on_connected (api->events, msg);
}

static void s_on_state (void *arg, ah_msg_t *msg)
{
    api_t *api = arg;
    const char *agent_id = ah_msg_str (msg, "agent_id");
    const char *state = ah_msg_str (msg, "state");
    if (agent_id)
        s_check_states (api, agent_id);
    if (agent_id && state)
        api_terms_on_state (api, agent_id, state);
    api_metrics_state (api->metrics, msg);
    ah_api_events_on_state (api->events, msg);
}

static void s_tick (void *arg, void *unused)
{
    api_t *api = arg;
    s_check_states (api, NULL);
    int64_t now = zclock_mono ();
    req_t *r = api->pending;
    while (r) {
        req_t *next = r->next;
        if (r->deadline_ms && now >= r->deadline_ms) {
            const char *asked = r->asked;
            api_unpark (r);
            if (r->on_deadline)
                r->on_deadline (r);
            else if (asked) {
                if (r->on_refused)
                    r->on_refused (r, "no answer in time");
                api_record (r, false, "no answer in time");
                api_respond_error (r, 504, "%s did not answer %s within %d s",
                                   asked, r->asked_type, api->reply_timeout_s);
            }
            else
                api_respond_error (r, 504, "no answer in time");
        }
        r = next;
    }
    api_chan_tick (api);
    ah_api_events_tick (api->events);
    api_terminals_tick (api);
    api_terms_tick (api);
}

//  PORT answers the port we listen on (server.listen "127.0.0.1:0").
static void s_cmd_port (void *arg, zmsg_t *cmd)
{
    api_t *api = arg;
    zstr_sendf (ah_actor_pipe (api->actor), "%d", lws_get_vhost_listen_port (api->vhost));
}

//  --------------------------------------------------------------------
//  Start and stop

static void s_destroy (void *arg)
{
    api_t *api = arg;
    if (!api)
        return;
    //  Connections close inside the context's destruction: their requests
    //  unlink themselves and close their channels.
    ah_lwsloop_destroy (&api->loop);
    ah_actor_use_lws (api->actor, NULL);    //  what is freed below may still send
    ah_policy_destroy (&api->ports_rule);
    //  The writes still queued land now; their dones may use the state below.
    api_writer_end (api);
    api_terms_end (api);
    api_chan_shutdown (api);
    ah_api_events_destroy (&api->events);
    zhashx_destroy (&api->port_sockets);
    api_metrics_destroy (&api->metrics);
    api_passes_destroy (&api->sessions);
    api_passes_destroy (&api->tickets);
    free (api->db_path);
    ah_store_close (&api->store);
    free (api);
}

static void *s_init (ah_actor_t *actor, void *arg)
{
    const ah_api_args_t *a = arg;
    if (!a || !a->config || !a->db_path) {
        ah_actor_fail (actor, "the api actor was started without its configuration");
        return NULL;
    }
    api_t *api = calloc (1, sizeof *api);
    if (!api)
        return NULL;
    api->actor = actor;
    api->config = a->config;
    api->driver = a->driver;
    api->started_ms = ah_store_now_ms ();
    api->reply_timeout_s = a->reply_timeout_s > 0 ? a->reply_timeout_s : AH_API_REPLY_TIMEOUT_S;
    api->body_stall_s = a->body_stall_s > 0 ? a->body_stall_s : AH_API_BODY_STALL_S;
    char *err = NULL;
    api->db_path = strdup (a->db_path);
    api->store = api->db_path ? ah_store_open (a->db_path, false, &err) : NULL;
    //  The API's thread reads; its writes go through the writer (writer.c).
    if (api->store && ah_store_exec (api->store, "PRAGMA query_only = 1", &err))
        ah_store_close (&api->store);
    if (!api->store) {
        ah_actor_fail (actor, "cannot open the database %s: %s", a->db_path, err ? err : "?");
        free (err);
        s_destroy (api);
        return NULL;
    }
    //  The port links' key: without it no link is made or taken (said once).
    if (a->config->data_dir && api_proxy_key_load (api, a->config->data_dir, &err)) {
        ah_warn (AREA, "port links are off: %s", err ? err : "?");
        free (err);
        err = NULL;
    }
    //  lua/ports.lua, asked for each request to a port marked public. Its
    //  status is not written to policy_status: the API's connection only
    //  reads (the log says when it does not load; public ports are then
    //  refused, links and tokens still work).
    if (!(api->ports_rule = ah_policy_new (a->config->lua_dir, "ports.lua", "api", NULL, &err))) {
        ah_warn (AREA, "public ports are refused: lua/ports.lua could not be loaded: %s", err ? err : "?");
        free (err);
        err = NULL;
    }
    const char *listen = a->config->listen ? a->config->listen : "127.0.0.1:8080";
    char host [256];
    int port = 0;
    if (ah_config_split_listen (listen, host, sizeof host, &port) || port < 0 || port > 65535) {
        ah_actor_fail (actor, "server.listen: cannot use '%s' (want host:port)", listen);
        s_destroy (api);
        return NULL;
    }
    //  The context's default vhost listens on nothing (the loop's own
    //  adoptions live there); the API's listener is a vhost of its own
    //  whose connections are raw: http.c speaks HTTP on them.
    struct lws_context_creation_info info;
    memset (&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.user = api;
    //  lws reads a connection into this per-thread buffer: its 4 KiB
    //  default costs a loop round (poll, the zsocks' events) per 4 KiB of
    //  an upload.
    info.pt_serv_buf_size = API_READ_MAX;
    if (a->config->tls_cert)
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    //  A guest of the tunnel (server/serve.c): its context beside the
    //  tunnel's, on the same loop and thread.
    ah_lwsloop_t *host_loop = ah_actor_host_lws (actor);
    api->loop = host_loop ? ah_lwsloop_new_beside (host_loop, &info) : ah_lwsloop_new (&info);
    api->protocols [0] = api_http_protocol;     //  [1] stays the zeroed terminator
    char *why = NULL;
    api->vhost = api->loop ? ah_lwsloop_listen (api->loop, "api", host, port, api->protocols, "ah-api",
                                                  a->config->tls_cert, a->config->tls_key, 0, &why)
                           : NULL;
    if (!api->vhost) {
        ah_actor_fail (actor, "server.listen = '%s': %s", listen, why ? why : "cannot start the loop");
        free (why);
        s_destroy (api);
        return NULL;
    }
    ah_actor_use_lws (actor, api->loop);
    api->events = ah_api_events_new (api->store, actor);
    api->metrics = api_metrics_new ();
    api->port_sockets = zhashx_new ();
    api->sessions = api_passes_new (&api_session_rules);
    api->tickets = api_passes_new (&api_ticket_rules);
    if (!api->events || !api->metrics || !api->sessions || !api->tickets || ah_actor_timer (actor, API_TICK_MS, API_TICK_MS, s_tick, NULL) < 0) {
        ah_actor_fail (actor, "out of memory");
        s_destroy (api);
        return NULL;
    }
    bool loopback = streq (host, "127.0.0.1") || streq (host, "::1") || !strncmp (host, "127.", 4);
    if (!a->config->tls_cert && !loopback)
        ah_warn (AREA, "server.listen = '%s' is not loopback and the API speaks plain HTTP: tokens "
                 "and terminals cross the network in clear; give server.tls_cert and server.tls_key", listen);
    ah_info (AREA, "listening on %s://%s%s%s:%d", a->config->tls_cert ? "https" : "http", strchr (host, ':') ? "[" : "", host [0] ? host : "*",
             strchr (host, ':') ? "]" : "", lws_get_vhost_listen_port (api->vhost));
    return api;
}

static void s_on_conv_event (void *arg, ah_msg_t *msg)
{
    api_conversations_event (arg, msg);
}

static const ah_actor_handler_t s_handlers [] = {
    { "REPLY", s_on_reply },
    { "CHAN_DATA", s_on_chan },
    { "CHAN_ACK", s_on_chan },
    { "CHAN_EOF", s_on_chan },
    { "CHAN_CLOSE", s_on_chan },
    { "SANDBOX_STATE", s_on_state },
    { "SANDBOX_CONNECTED", s_on_connected },
    { "CONV_EVENT", s_on_conv_event },
    { NULL, NULL }
};

static const ah_actor_command_t s_commands [] = {
    { "PORT", s_cmd_port },
    { NULL, NULL }
};

const ah_actor_def_t ah_api_actor = {
    .name = "api", .on_bus = true, .init = s_init, .destroy = s_destroy,
    .handlers = s_handlers, .commands = s_commands, .flush = api_conns_flush
};
