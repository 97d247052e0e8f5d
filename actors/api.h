/*  actors/api.h: the REST API actor (bus name "api").

    An HTTP server on server.listen (libwebsockets) that authenticates
    requests with bearer tokens (api_tokens), answers reads from its own
    SQLite connection, and turns every change into a message to
    "lifecycle"; the HTTP response is completed when lifecycle's REPLY
    arrives (or after AH_API_REPLY_TIMEOUT_S with 504). docs/api.md lists
    the routes, bodies and status codes.

    The actor signals 0 once it listens, 1 (after logging why) if it
    cannot (port taken, bad server.listen, database unusable). Its pipe
    takes "$TERM", and "PORT", answered with the port it listens on (for
    server.listen "127.0.0.1:0": the OS picks).                       */
#ifndef AH_API_H
#define AH_API_H

#include <czmq.h>
#include "config/config.h"

#define AH_API_REPLY_TIMEOUT_S  30          //  lifecycle must answer within this
#define AH_API_MAX_BODY         (1u << 20)  //  largest JSON request body accepted
#define AH_API_MAX_UPLOAD       ((size_t) 4 << 30) //  largest file upload (PUT fs/file)
#define AH_API_WAIT_DEFAULT_S   600         //  ?wait=1 bound unless ?timeout=N says otherwise
#define AH_API_WAIT_MAX_S       3600

typedef struct {
    const ah_config_t *config;      //  borrowed; must outlive the actor
    const char *db_path;            //  the database file (opened, not migrated)
    int reply_timeout_s;            //  0: AH_API_REPLY_TIMEOUT_S (tests shorten it)
} ah_api_args_t;

//  zactor body: zactor_new (ah_api_actor, &args). $TERM on the pipe stops it.
void ah_api_actor (zsock_t *pipe, void *args);

#endif
