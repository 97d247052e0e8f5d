/*  actors/api/ports.c: GET /api/v1/agents/{agent}/ports, the TCP ports
    that listen in a running sandbox (issue 30): its sandboxd's ports
    channel (docs/tunnel.md), each entry checked (a sandbox says what it
    likes): a port from 1 to 65535 and one of the loopback or any-address
    forms sandboxd reports, at most PORTS_MAX. A sleeping agent has no
    port listening and is not woken to say so: 409 naming its state.  */
#include "actors/api/api_int.h"
#include "common/token.h"

#include <string.h>

#define PORTS_MAX   1024

typedef struct {
    req_t *r;
    api_chan_t chan;
} ports_t;

static void s_free (req_t *r)
{
    ports_t *p = r->ext;
    if (!p)
        return;
    api_chan_close (&p->chan);
    free (p);
    r->ext = NULL;
}

static const ext_ops_t s_ext_ops = { .free = s_free };

//  What sandboxd may say an address is: the loopback or every address.
static bool s_address_ok (const char *a)
{
    if (!a)
        return false;
    if (streq (a, "0.0.0.0") || streq (a, "::") || streq (a, "::1") || streq (a, "::ffff:127.0.0.1"))
        return true;
    unsigned b1, b2, b3;
    char tail;
    return sscanf (a, "127.%u.%u.%u%c", &b1, &b2, &b3, &tail) == 3 && b1 < 256 && b2 < 256 && b3 < 256
        && strlen (a) <= 15;
}

static void s_refused (void *owner, int status, const char *error, ah_msg_t *reply)
{
    (void) reply;
    ports_t *p = owner;
    req_t *r = p->r;
    if (error && strstr (error, "unknown channel"))
        api_respond_error (r, 502, "agent '%s' runs a sandboxd without the ports channel (%s): "
                           "restart it so it mounts this server's sandboxd", r->name, error);
    else
        api_respond_error (r, status, "%s", error ? error : "sandboxd refused to list the ports");
}

static void s_opened (void *owner, ah_msg_t *reply)
{
    ports_t *p = owner;
    req_t *r = p->r;
    json_t *header = api_json_raw (reply, "reply");
    json_t *list = json_object_get (header, "ports");
    json_t *out = json_array ();
    bool bad = !json_is_array (list) || json_array_size (list) > PORTS_MAX;
    size_t i;
    json_t *e;
    json_array_foreach (bad ? NULL : list, i, e) {
        json_t *port = json_object_get (e, "port");
        const char *addr = json_string_value (json_object_get (e, "address"));
        json_int_t n = json_is_integer (port) ? json_integer_value (port) : 0;
        if (n < 1 || n > 65535 || !s_address_ok (addr)) {
            bad = true;
            break;
        }
        json_array_append_new (out, json_pack ("{s:I, s:s}", "port", n, "address", addr));
    }
    json_decref (header);
    api_chan_close (&p->chan);
    if (bad) {
        json_decref (out);
        api_respond_error (r, 502, "agent '%s''s sandboxd answered the ports channel with a malformed "
                           "list", r->name);
        return;
    }
    json_t *answer = json_object ();
    json_object_set_new (answer, "agent", api_json_text (r->name));
    json_object_set_new (answer, "ports", out);
    api_respond (r, 200, answer);
}

static void s_data (void *owner, const uint8_t *data, size_t size)
{
    ports_t *p = owner;
    (void) data;
    api_chan_ack (&p->chan, size);      //  nothing follows the reply: dropped
}

static void s_closed (void *owner, const char *error)
{
    ports_t *p = owner;
    if (!p->r->responded)
        api_respond_error (p->r, 502, "the ports channel of agent '%s' ended before its answer: %s",
                           p->r->name, error ? error : "closed");
}

static const chan_ops_t s_chan_ops = {
    .opened = s_opened, .refused = s_refused, .data = s_data, .closed = s_closed,
};

static void s_list (req_t *r)
{
    json_t *agent = api_agent_resolve (r);
    if (!agent)
        return;
    const char *state = json_string_value (json_object_get (agent, "state"));
    bool running = state && (streq (state, "running") || api_thaw (r, state, "ports"));
    if (!running) {
        api_respond_error (r, 409, "agent '%s' is %s: nothing of it listens (start it first)", r->name,
                           state ? state : "without a sandbox");
        json_decref (agent);
        return;
    }
    json_decref (agent);
    ports_t *p = calloc (1, sizeof *p);
    if (!p) {
        api_respond_error (r, 503, "out of memory");
        return;
    }
    p->r = r;
    r->ext = p;
    r->ext_ops = &s_ext_ops;
    ah_msg_t *header = ah_msg_new ("CHAN");
    ah_msg_set_str (header, "ch", "ports");
    if (api_chan_open (r->api, &p->chan, r->agent_id, &header, &s_chan_ops, p))
        api_respond_error (r, 503, "the tunnel cannot open a channel to agent '%s' now", r->name);
}

//  POST .../ports/{port}/link {"expires": seconds}: a link to the port
//  through the server (proxy.c), for the agent's tenant, valid for
//  expires seconds (default LINK_DEFAULT_S, at most LINK_MAX_S). Made
//  whatever the agent's state: a request on it wakes the agent. Its id
//  is a port_links row (written through the writer before the answer):
//  the proxy lets the link through while the row stands.
#define LINK_DEFAULT_S  3600
#define LINK_MAX_S      (30 * 86400)
#define LINKS_MAX       1000        //  listed at most, soonest to expire first

//  The {port} of r's path: 1..65535, or 0 answered 400.
static long s_port_param (req_t *r)
{
    char *end = NULL;
    long port = strtol (r->params [1], &end, 10);
    if (*end || port < 1 || port > 65535 || r->params [1][0] == '0') {
        api_respond_error (r, 400, "port '%.16s' must be a number from 1 to 65535", r->params [1]);
        return 0;
    }
    return port;
}

static const body_field_t s_link_fields [] = { { "expires", B_NUM, NULL }, { NULL, 0, NULL } };

static void s_link_written (api_t *api, req_t *r, void *arg, int status, const char *why)
{
    (void) api;
    json_t *answer = api_stmt_ctx (arg);
    if (r && status)
        api_respond_error (r, status == 409 ? 503 : status, "cannot record the link: %s", why);
    else if (r) {
        api_record (r, true, NULL);
        api_respond (r, 201, json_incref (answer));
    }
    json_decref (answer);
}

static void s_link (req_t *r)
{
    json_t *obj = api_body_object (r, true);
    if (!obj)
        return;
    json_t *e = json_object_get (obj, "expires");
    double expires = e ? json_number_value (e) : LINK_DEFAULT_S;
    json_decref (obj);
    long port = s_port_param (r);
    if (!port)
        return;
    if (expires < 60 || expires > LINK_MAX_S || expires != (double) (int64_t) expires) {
        api_respond_error (r, 400, "field 'expires' must be whole seconds from 60 to %d (30 days)", LINK_MAX_S);
        return;
    }
    if (!r->api->port_key_ok) {
        api_respond_error (r, 503, "port links are off on this server: its ports key could not be read or "
                           "made (the server's log says why)");
        return;
    }
    json_t *agent = api_agent_resolve (r);
    if (!agent)
        return;
    const char *tenant = json_string_value (json_object_get (agent, "tenant"));
    int64_t now = ah_store_now_ms ();
    int64_t expiry = now / 1000 + (int64_t) expires;
    char id [API_LINK_ID_LEN + 1];
    char *path = tenant && !ah_token_id (id, sizeof id, API_LINK_ID_LEN)
               ? api_port_link (r->api, tenant, r->agent_id, (int) port, expiry, id) : NULL;
    json_decref (agent);
    if (!path) {
        api_respond_error (r, 500, "cannot make the link");
        return;
    }
    const char *made_by = r->who.user [0] ? r->who.user : r->who.token_name;
    r->kind = "port.link";
    snprintf (r->detail, sizeof r->detail, "link %s: port %ld for %lld s", id, port, (long long) expires);
    //  The expired rows go first (nothing reads them any more).
    api_stmt_write (NULL, r->api, api_stmt_int (api_stmt ("DELETE FROM port_links WHERE expires_at < :now"),
                                                ":now", now), NULL, NULL);
    api_stmt_t *st = api_stmt ("INSERT INTO port_links (id, agent_id, port, expires_at, made_by, created_at)"
                               " VALUES (:id, :agent, :port, :expires, :by, :now)");
    st = api_stmt_text (api_stmt_text (api_stmt_text (st, ":id", id), ":agent", r->agent_id), ":by", made_by);
    st = api_stmt_int (api_stmt_int (api_stmt_int (st, ":port", port), ":expires", expiry * 1000), ":now", now);
    json_t *answer = json_pack ("{s:s, s:s, s:s, s:i, s:s, s:o, s:s}", "id", id, "agent", r->name,
                                "agent_id", r->agent_id, "port", (int) port, "path", path, "expires_at",
                                api_json_time (expiry * 1000), "made_by", made_by);
    free (path);
    if (!answer || api_stmt_write (r, r->api, st, s_link_written, answer)) {
        json_decref (answer);
        api_respond_error (r, 503, "out of memory");
    }
}

//  GET .../ports/links: the agent's links that stand (not expired, not
//  revoked), soonest to expire first; never the link itself (it is a
//  capability: shown once, when made).
static void s_links (req_t *r)
{
    json_t *agent = api_agent_resolve (r);
    if (!agent)
        return;
    json_decref (agent);
    sqlite3_stmt *st = ah_store_prepare (r->api->store,
        "SELECT id, port, expires_at, made_by, created_at FROM port_links"
        " WHERE agent_id = :agent AND expires_at >= :now ORDER BY expires_at, id LIMIT :max");
    if (!st || ah_store_bind_text (st, ":agent", r->agent_id) || ah_store_bind_int64 (st, ":now", ah_store_now_ms ())
    ||  ah_store_bind_int64 (st, ":max", LINKS_MAX)) {
        if (st)
            sqlite3_reset (st);
        api_respond_error (r, 500, "cannot read the links");
        return;
    }
    json_t *list = json_array ();
    while (ah_store_step (r->api->store, st) == SQLITE_ROW)
        json_array_append_new (list, json_pack ("{s:s, s:i, s:o, s:s, s:o}",
            "id", (const char *) sqlite3_column_text (st, 0), "port", sqlite3_column_int (st, 1),
            "expires_at", api_json_time (sqlite3_column_int64 (st, 2)),
            "made_by", (const char *) sqlite3_column_text (st, 3),
            "created_at", api_json_time (sqlite3_column_int64 (st, 4))));
    sqlite3_reset (st);
    json_t *answer = json_object ();
    json_object_set_new (answer, "agent", api_json_text (r->name));
    json_object_set_new (answer, "links", list);
    api_respond (r, 200, answer);
}

//  DELETE .../ports/links/{id}: the link revoked (its row deleted): 200,
//  or 404 for an id the agent has no link under (another agent's, another
//  tenant's, made up, expired and purged, revoked already).
static void s_unlinked (api_t *api, req_t *r, void *arg, int status, const char *why)
{
    (void) api;
    if (!r)
        return;
    if (status)
        api_respond_error (r, status, "cannot revoke the link: %s", why);
    else if (!api_stmt_changes (arg))
        api_respond_error (r, 404, "agent '%s' has no port link '%s'", r->name, r->params [1]);
    else {
        api_record (r, true, NULL);
        api_respond (r, 200, json_pack ("{s:s, s:s, s:b}", "agent", r->name, "id", r->params [1], "revoked", 1));
    }
}

static void s_unlink (req_t *r)
{
    json_t *agent = api_agent_resolve (r);
    if (!agent)
        return;
    json_decref (agent);
    const char *id = r->params [1];
    if (!api_link_id_ok (id)) {
        api_respond_error (r, 404, "agent '%s' has no port link '%.16s'", r->name, id);
        return;
    }
    r->kind = "port.unlink";
    snprintf (r->detail, sizeof r->detail, "link %s", id);
    api_stmt_t *st = api_stmt ("DELETE FROM port_links WHERE id = :id AND agent_id = :agent");
    st = api_stmt_text (api_stmt_text (st, ":id", id), ":agent", r->agent_id);
    if (api_stmt_write (r, r->api, st, s_unlinked, NULL))
        api_respond_error (r, 503, "out of memory");
}

//  PUT .../ports/{port} {"public": bool}: the port marked public (a
//  public_ports row) or not (the row deleted). Whether a public port is
//  then open to anyone is lua/ports.lua's decision, at each request.
static const body_field_t s_port_fields [] = { { "public", B_BOOL, NULL }, { NULL, 0, NULL } };

static void s_port_written (api_t *api, req_t *r, void *arg, int status, const char *why)
{
    (void) api;
    bool public = api_stmt_ctx (arg) != NULL;
    if (!r)
        return;
    if (status)
        api_respond_error (r, status == 409 ? 503 : status, "cannot mark the port: %s", why);
    else {
        api_record (r, true, NULL);
        api_respond (r, 200, json_pack ("{s:s, s:i, s:b}", "agent", r->name, "port", atoi (r->params [1]),
                                        "public", public));
    }
}

static void s_port_put (req_t *r)
{
    json_t *obj = api_body_object (r, true);
    if (!obj)
        return;
    json_t *pub = json_object_get (obj, "public");
    bool public = json_is_true (pub);
    bool given = json_is_boolean (pub);
    json_decref (obj);
    long port = s_port_param (r);
    if (!port)
        return;
    if (!given) {
        api_respond_error (r, 400, "field 'public' (true or false) is required");
        return;
    }
    json_t *agent = api_agent_resolve (r);
    if (!agent)
        return;
    json_decref (agent);
    const char *made_by = r->who.user [0] ? r->who.user : r->who.token_name;
    r->kind = "port.public";
    snprintf (r->detail, sizeof r->detail, "port %ld %s", port, public ? "public" : "private");
    api_stmt_t *st = api_stmt (public ? "INSERT OR REPLACE INTO public_ports (agent_id, port, made_by, made_at)"
                                        " VALUES (:agent, :port, :by, :now)"
                                      : "DELETE FROM public_ports WHERE agent_id = :agent AND port = :port");
    st = api_stmt_int (api_stmt_text (st, ":agent", r->agent_id), ":port", port);
    if (public)
        st = api_stmt_int (api_stmt_text (st, ":by", made_by), ":now", ah_store_now_ms ());
    if (api_stmt_write (r, r->api, st, s_port_written, public ? (void *) r->api : NULL))
        api_respond_error (r, 503, "out of memory");
}

const route_t api_port_routes [] = {
    { M_GET, "/api/v1/agents/{agent}/ports", s_list, 0, "", NULL },
    { M_GET, "/api/v1/agents/{agent}/ports/links", s_links, 0, "", NULL },
    { M_DELETE, "/api/v1/agents/{agent}/ports/links/{id}", s_unlink, 0, "", NULL },
    { M_POST, "/api/v1/agents/{agent}/ports/{port}/link", s_link, R_BODY, "", s_link_fields },
    { M_PUT, "/api/v1/agents/{agent}/ports/{port}", s_port_put, R_BODY, "", s_port_fields },
    { 0 }
};
