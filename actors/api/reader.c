/*  actors/api/reader.c: a sleeping agent's files and tree through its
    reader (docs/kubernetes.md, "Reading a sleeping agent's files"): on
    a driver whose homes the server does not mount (kubernetes), a
    sleeping agent's home is read by a reader (sandboxd --read-only on
    its claim, made by lifecycle and the driver) and the API's channels
    go to that connection (CHAN_OPEN "reader", which the tunnel allows
    for reads alone). The request is parked (api_ask), never blocking
    the thread, until lifecycle says the reader is connected.          */
#include "actors/api/api_int.h"
#include "actors/lifecycle.h"

#include <string.h>

#define READER_MARGIN_MS    15000   //  beyond lifecycle's hello timeout, which answers first

bool api_reader_serves (req_t *r, const char *state)
{
    const ah_config_t *c = r->api->config;
    return state && streq (state, "sleeping") && c->driver && streq (c->driver, "kubernetes");
}

void api_reader_keep (api_t *api, const char *agent_id, int64_t *last_ms)
{
    int64_t now = zclock_mono ();
    if (now - *last_ms < API_READER_KEEP_MS)
        return;
    *last_ms = now;
    ah_msg_t *m = ah_msg_new ("READER_KEEP");
    ah_msg_set_str (m, "agent_id", agent_id);
    api_send (api, "lifecycle", &m);
}

void api_reader_ask (req_t *r, reply_fn *go)
{
    ah_msg_t *m = ah_msg_new ("READER_OPEN");
    ah_msg_set_str (m, "agent_id", r->agent_id);
    api_ask (r, "lifecycle", &m, go);
    //  A Pod is made and started first (seconds): lifecycle answers 504
    //  after its hello timeout; the API's own bound is beyond it.
    if (r->deadline_ms)
        r->deadline_ms = zclock_mono () + AH_LIFECYCLE_HELLO_TIMEOUT_MS + READER_MARGIN_MS;
}
