/*  actors/api/ports.c: GET /api/v1/agents/{agent}/ports, the TCP ports
    that listen in a running sandbox (issue 30): its sandboxd's ports
    channel (docs/tunnel.md), each entry checked (a sandbox says what it
    likes): a port from 1 to 65535 and one of the loopback or any-address
    forms sandboxd reports, at most PORTS_MAX. A sleeping agent has no
    port listening and is not woken to say so: 409 naming its state.  */
#include "actors/api/api_int.h"

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
    bool running = state && streq (state, "running");
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

const route_t api_port_routes [] = {
    { M_GET, "/api/v1/agents/{agent}/ports", s_list, 0, "", NULL },
    { 0 }
};
