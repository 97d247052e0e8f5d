/*  actors/lifecycle.h: the lifecycle actor (bus name "lifecycle").

    Owns the agents and sandboxes tables: every state change of a sandbox
    is made here, as one guarded UPDATE (`... WHERE state IN (...)`; one
    row changed means this request won), then the driver call in a worker
    thread, whose outcome comes back as a message and moves the state
    again. docs/lifecycle.md draws the states and transitions;
    docs/messages.md lists the messages (AGENT_CREATE, AGENT_UPDATE,
    SANDBOX_START/STOP/REBUILD/DESTROY, SANDBOX_HELLO, SANDBOX_OBSERVED,
    AGENT_ACTIVITY in; REPLY and SANDBOX_STATE out).

    An actor (common/actor.h): ah_actor_new returns once it is on the bus
    with its database open, or NULL with the reason. $TERM on the pipe
    stops it; it waits for driver calls in flight before it returns.  */
#ifndef AH_LIFECYCLE_H
#define AH_LIFECYCLE_H

#include "common/actor.h"
#include "drivers/driver.h"
#include "config/config.h"

#define AH_LIFECYCLE_HELLO_TIMEOUT_MS   60000   //  sandboxd must say hello within this
//  The sandbox states that hold CPU and memory on the host, or are on
//  their way to (a create, a start, a rebuild each end running), as SQL:
//  what the running caps count (lua/limits.lua) and a tenant's "running".
//  Sleeping and error hold a home only; stopping is on its way out. A
//  frozen state, should one come, holds memory: it belongs here.
#define AH_LIFECYCLE_HOLDING_SQL "('creating','starting','running','rebuilding')"
#define AH_LIFECYCLE_ACTIVITY_FLUSH_MS  1000    //  AGENT_ACTIVITY is written in batches

typedef struct {
    const ah_config_t *config;      //  borrowed; must outlive the actor
    ah_driver_t *driver;            //  borrowed, thread-safe; must outlive the actor
    const char *db_path;            //  the database (opened, not migrated)
    //  NULL-terminated bus names that get every SANDBOX_STATE ("api",
    //  "sleeper", "tunnel", "recorder"); NULL for none. Copied at start.
    const char **subscribers;
    int hello_timeout_ms;           //  0: AH_LIFECYCLE_HELLO_TIMEOUT_MS (tests set less)
    //  The builder runs: before a create, rebuild or start on a runtime,
    //  lifecycle asks it for the image (RUNTIME_ENSURE) and waits for
    //  RUNTIME_READY; the sandbox is "preparing" meanwhile. false: the
    //  image is taken as there (tests of lifecycle alone).
    bool ensure_images;
} ah_lifecycle_args_t;

//  ah_actor_new (&ah_lifecycle_actor, &args, &err).
extern const ah_actor_def_t ah_lifecycle_actor;

#endif
