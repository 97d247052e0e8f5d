/*  actors/api/events.h: the API's lifecycle event streams and wakes
    (docs/api.md "Events" and "Wake").

    Part of the API actor, not an actor of its own: every function runs on
    the API actor's thread (the lws service thread), which owns the object,
    the requests it is handed and the actor it sends through.

    - GET /api/v1/events: a server-sent event stream of SANDBOX_STATE
      (one JSON object per event), filterable with ?agent=, keep-alive
      comments every AH_API_EVENTS_KEEPALIVE_MS, at most
      AH_API_EVENTS_MAX_STREAMS at once.
    - Wake: a turn or a terminal on an agent that is not running asks
      lifecycle to start it (SANDBOX_START), tells the streams "Starting
      the sandbox…", and calls the waiter back once the sandbox runs, or
      with the reason it could not start, or after the bound.          */
#ifndef AH_API_EVENTS_H
#define AH_API_EVENTS_H

#include "common/actor.h"
#include "common/msg.h"
#include "store/store.h"

#define AH_API_EVENTS_MAX_STREAMS   64
#define AH_API_EVENTS_KEEPALIVE_MS  15000
#define AH_API_EVENTS_MAX_BACKLOG   (256u << 10)  //  a stream further behind is dropped
#define AH_API_WAKE_TIMEOUT_S       120
#define AH_API_WAKE_MAX             1024          //  waiters at once
#define AH_API_WAKE_MESSAGE         "Starting the sandbox\xe2\x80\xa6"

typedef struct _ah_api_events_t ah_api_events_t;

//  Called once per wake: status 0 when the sandbox runs, else an HTTP
//  status (409 destroyed or refused, 503 it ended in error, 504 the bound
//  passed) and a sentence saying why.
typedef void (ah_api_wake_fn) (void *ctx, int status, const char *error);

//  store and actor are borrowed (the API actor's). The streams themselves
//  are requests of GET /api/v1/events (api_event_routes).
ah_api_events_t *ah_api_events_new (ah_store_t *store, ah_actor_t *actor);
void ah_api_events_destroy (ah_api_events_t **self_p);

//  A SANDBOX_STATE from lifecycle: to the streams, and to the waiters.
void ah_api_events_on_state (ah_api_events_t *self, const ah_msg_t *msg);
//  A SANDBOX_CONNECTED: an event of the agent's state as it is, with
//  "connected" (true: its sandboxd said hello; false: its tunnel went).
void ah_api_events_on_connected (ah_api_events_t *self, const ah_msg_t *msg);
//  A REPLY: true when it answers one of our SANDBOX_STARTs (negative req).
bool ah_api_events_reply (ah_api_events_t *self, const ah_msg_t *msg);
//  Ends the streams a token or a tenant may no longer read: those opened
//  with the token named token_name (revoked), or by a token of tenant or
//  within its scope (removed). Either may be NULL. They close at once.
void ah_api_events_end (ah_api_events_t *self, const char *token_name, const char *tenant);
//  Keep-alives, wake deadlines, wake states re-read (every API tick).
void ah_api_events_tick (ah_api_events_t *self);

//  Wakes agent_id unless it runs: 0 when it runs already (fn is not
//  called), 1 when fn will be called later, or an HTTP status with why
//  (404 no such agent, 409 being destroyed, 503 too many waiters).
int  ah_api_events_wake (ah_api_events_t *self, const char *agent_id, void *ctx,
                         ah_api_wake_fn *fn, int timeout_s, char *why, size_t why_size);
//  The waiter ctx went away (idempotent).
void ah_api_events_wake_cancel (ah_api_events_t *self, void *ctx);

//  AGENT_ACTIVITY {agent_id, what} to lifecycle: moves last_activity_at.
void ah_api_events_activity (ah_api_events_t *self, const char *agent_id, const char *what);

#endif
