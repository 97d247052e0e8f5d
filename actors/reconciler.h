/*  actors/reconciler.h: the reconciler actor, bus name "reconciler".

    It compares what the database says with what the driver reports and
    tells lifecycle (which owns the sandboxes table and the repair rules):

      - at start-up, for every stored sandbox it inspects the driver's
        sandbox and sends SANDBOX_OBSERVED {agent_id, exists, running,
        exit_code, detail, source: "startup"} to "lifecycle";
      - it lists the driver's sandboxes and removes those with no stored
        agent (orphans: labelled containers, networks, volumes left by a
        crash or by hand), logging each and recording it with OP_RECORD
        {actor: "reconciler", kind: "reconcile.orphan"} to "recorder";
      - it follows the driver's event stream (driver->watch, when the
        backend has one) and sends SANDBOX_OBSERVED with source "event"
        for each change of a stored sandbox (docker stop / rm -f by hand,
        a crash); when the stream breaks (the engine restarted) it
        reconnects with backoff and, once back, inspects every stored
        sandbox again (source "resync") for what it missed;
      - when the stream says an image was untagged or deleted, and each
        time it (re)connects, it sends RUNTIME_CHECK {why} to "builder",
        which asks the driver again about the runtime images it believes
        present (docs/catalog.md).
    docs/messages.md, section reconciler.

    Pipe commands: "$TERM". "SCAN" runs the start-up pass again (tests,
    operators); the actor answers on the pipe with signal 0 once queued.

    DESIGN. Three threads. The actor thread (common/actor.h) owns the
    bus DEALER and only forwards messages; it never blocks on the driver. A scan worker
    (pthread, one at a time) and the event follower (pthread) call the
    driver, each with its own SQLite connection, and send their messages
    [dest][TYPE][map] over their own inproc PUSH to the actor's PULL,
    which forwards them to dest on the bus. The follower stops when the
    actor sets `stop` (an int the actor writes and the follower and the
    driver's watch read; nothing else is shared) and is joined on exit. */
#ifndef AH_RECONCILER_H
#define AH_RECONCILER_H

#include "common/actor.h"
#include "drivers/driver.h"

typedef struct {
    const char  *db_path;           //  borrowed until ah_actor_new returns
    ah_driver_t *driver;            //  borrowed; thread-safe; outlives the actor
    int          backoff_min_ms;    //  0: 500 (first reconnect delay)
    int          backoff_max_ms;    //  0: 30000
} ah_reconciler_args_t;

//  ah_actor_new (&ah_reconciler_actor, &args, &err): running once on the
//  bus with the scan and the follower launched; NULL with the reason
//  otherwise.
extern const ah_actor_def_t ah_reconciler_actor;

#endif
