/*  actors/tunnel.h: the tunnel actor (bus name "tunnel"), the server end
    of the connection every sandboxd dials (docs/tunnel.md).

    A WebSocket server on its unix socket (sandbox.tunnel_socket) and, where
    the driver's sandboxes dial TCP, on sandbox.tunnel_listen
    (ah_config_tunnel_tcp), path /tunnel, subprotocol agenthold-tunnel. The upgrade is accepted only
    with `Authorization: Bearer <token>` and `X-Agenthold-Agent: <id>` where
    the agent's sandbox is starting or running and the SHA-256 of the token
    equals sandboxes.boot_token_hash; otherwise 401 (missing header, unknown
    agent, wrong token) or 403 (sandbox in another state), logged with the
    agent id, never the token. One connection per agent: a newer one
    replaces the older (its channels fail with "tunnel reconnected").

    The binary messages carry one yamux byte stream; the server is the
    yamux client (odd stream ids, it opens every stream). After the upgrade
    the tunnel opens "hello"; a good reply sends SANDBOX_HELLO to
    lifecycle, a version mismatch is logged with both versions and what to
    deploy, and the connection is closed (TUNNEL_LOST fatal=true).
    Liveness: a yamux ping every ping_interval_ms; no answer within
    ping_timeout_ms closes the connection (channels fail with "sandbox
    connection lost", TUNNEL_LOST to lifecycle). TUNNEL_KICK and a
    SANDBOX_STATE leaving starting/running close it too.

    Channels for other actors (CHAN_OPEN / CHAN_DATA / CHAN_ACK / CHAN_EOF
    / CHAN_CLOSE, docs/messages.md): one yamux stream each, relayed with
    credit-based flow control so the yamux window carries backpressure end
    to end.

    An actor (common/actor.h, on an lwsloop): ah_actor_new returns once
    it listens, or NULL with the reason. Its pipe takes "$TERM", and
    "PORT" (answered with the port it listens on: tunnel_listen
    "127.0.0.1:0" lets the OS pick).                                    */
#ifndef AH_TUNNEL_H
#define AH_TUNNEL_H

#include "common/actor.h"
#include "config/config.h"

#define AH_TUNNEL_PATH              "/tunnel"
#define AH_TUNNEL_SUBPROTOCOL       "agenthold-tunnel"
#define AH_TUNNEL_PING_INTERVAL_MS  15000   //  docs/tunnel.md: ping every 15 s
#define AH_TUNNEL_PING_TIMEOUT_MS   45000   //  ... dead after 45 s without an answer
#define AH_TUNNEL_OPEN_TIMEOUT_MS   10000   //  sandboxd must answer a channel header within this
#define AH_TUNNEL_STATS_INTERVAL_MS 30000   //  AGENT_STATS samples to the sleeper
#define AH_TUNNEL_CONNECT_WAIT_MS   5000    //  a CHAN_OPEN waits this long for a running
                                            //  agent's sandboxd to (re)connect
#define AH_TUNNEL_MESSAGE_MAX       (1u << 20)  //  largest WebSocket message accepted
#define AH_TUNNEL_DATA_MAX          (256u << 10) //  largest CHAN_DATA payload
#define AH_TUNNEL_CREDIT            (2u << 20)  //  unacknowledged bytes an opener may send

//  Tests only: called in the tunnel's worker that read a tenant's egress
//  lists and secrets for its cache, after the read and before they are
//  handed back (a test holds a read there to show what comes meanwhile).
typedef void (ah_tunnel_fill_hook_fn) (const char *tenant, void *arg);

typedef struct {
    const ah_config_t *config;      //  borrowed; must outlive the actor
    const char *db_path;            //  the database file (opened, not migrated)
    int ping_interval_ms;           //  0: AH_TUNNEL_PING_INTERVAL_MS (tests shorten)
    int ping_timeout_ms;            //  0: AH_TUNNEL_PING_TIMEOUT_MS
    int open_timeout_ms;            //  0: AH_TUNNEL_OPEN_TIMEOUT_MS
    int stats_interval_ms;          //  0: AH_TUNNEL_STATS_INTERVAL_MS; < 0: no stats
    int connect_wait_ms;            //  0: AH_TUNNEL_CONNECT_WAIT_MS; < 0: no wait
    ah_tunnel_fill_hook_fn *egress_fill_hook;   //  tests only; NULL in the server
    void *egress_fill_hook_arg;
} ah_tunnel_args_t;

//  ah_actor_new (&ah_tunnel_actor, &args, &err).
extern const ah_actor_def_t ah_tunnel_actor;

#endif
