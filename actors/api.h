/*  actors/api.h: the REST API actor (bus name "api").

    An HTTP/1.1 server on server.listen that authenticates requests with
    bearer tokens (api_tokens), answers reads from its own SQLite
    connection, and turns every change into a message to the actor that
    owns it; the response is completed when that actor's REPLY arrives
    (or after AH_API_REPLY_TIMEOUT_S with 504). docs/api.md lists the
    routes, bodies and status codes; actors/api/ holds its parts.

    Start it with ah_actor_new (&ah_api_actor, &args, &err): it fails
    with the reason when it cannot listen (port taken, bad server.listen)
    or open the database. Its pipe takes "$TERM", and "PORT", answered
    with the port it listens on (for server.listen "127.0.0.1:0").      */
#ifndef AH_API_H
#define AH_API_H

#include "common/actor.h"
#include "config/config.h"
#include "drivers/driver.h"

#define AH_API_REPLY_TIMEOUT_S  30          //  an owner must answer within this
#define AH_API_BODY_STALL_S     60          //  seconds a request body may stop coming
#define AH_API_MAX_BODY         (1u << 20)  //  largest JSON request body accepted
#define AH_API_MAX_RPC          (12u << 20) //  largest JSON-RPC body (POST /mcp: a file written whole)
#define AH_API_MAX_UPLOAD       ((uint64_t) 4 << 30) //  largest file upload
#define AH_API_WAIT_DEFAULT_S   600         //  ?wait=1 bound unless ?timeout=N says otherwise
#define AH_API_WAIT_MAX_S       3600

typedef struct {
    const ah_config_t *config;      //  borrowed; must outlive the actor
    const char *db_path;            //  the database file (opened, not migrated)
    int reply_timeout_s;            //  0: AH_API_REPLY_TIMEOUT_S (tests shorten it)
    int body_stall_s;               //  0: AH_API_BODY_STALL_S, a body that stops coming (tests shorten it)
    ah_driver_t *driver;            //  borrowed, may be NULL: the server's (the remote driver's
                                    //  hostd reads the homes of sandboxes not running, home_read.c)
} ah_api_args_t;

extern const ah_actor_def_t ah_api_actor;

//  Every route, from the router's own table, as JSON text (the
//  caller's): [{"method", "pattern", "admin", "public", "body" (it takes
//  a JSON body), "fields": [{"name", "types": ["string", "number", ...],
//  "why"}] or null when the route states none}]. For tests that walk
//  every route (tests/api: bodies, hostile URLs) and `agenthold routes`.
char *ah_api_routes (void);

#endif
