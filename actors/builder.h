/*  actors/builder.h: the builder actor, bus name "builder".

    Owns the runtime catalog (catalog/runtimes.json, loaded and validated
    at start: an invalid catalog stops the server with the catalog's
    message) and the images behind it: at start it asks the driver which
    runtime images exist and, with prewarm, builds the locally built ones
    (and pulls the others) in a worker thread. It composes runtime
    briefings with lua/briefing.lua.

    Messages (docs/messages.md, section builder):
      CATALOG_LIST {req}            REPLY {runtimes (raw: array of maps)}
      BRIEFING {req, runtime}       REPLY {runtime, text} / 404 / 500
      RUNTIME_ENSURE {runtime}      the runtime's image made present (built
                                    or pulled on demand, 2 attempts), then
                                    RUNTIME_READY {runtime, ok, error?,
                                    briefing?} to lifecycle; meanwhile
                                    RUNTIME_PROGRESS {runtime, text};
                                    gone: a driver call met the image
                                    missing, so it is made again whatever
                                    the builder believed
      RUNTIME_CHECK {why}           the images believed present asked
                                    about again (an image was untagged or
                                    deleted, or the event stream
                                    reconnected); one gone is missing at
                                    once and, with prewarm, made again
      POLICY_RELOAD {}              reloads briefing.lua (a broken script
                                    keeps the previous one)

    DESIGN. The actor's thread (common/actor.h) owns the catalog, the
    policy state, its SQLite connection (policy_status rows) and the
    image table. Image work blocks for minutes, so it runs in a worker
    thread (a pthread started by the builder, not on the bus), one job
    (one runtime's image) at a time from the builder's queue: it calls
    the driver's optional image hooks (drivers/driver.h: image_exists,
    image_build), with attempts and a doubling pause between them, and
    reports over its PUSH to the builder's PULL as
    [IMAGE][runtime][state][error], [PROGRESS][runtime][text] and
    finally [DONE][runtime]; the builder then joins it and starts the
    next job. RUNTIME_CHECK's look runs in a second thread (the check
    thread, at most one), so that it never waits behind a build: it
    calls image_exists for the runtimes the builder listed (the array is
    the builder's, read-only while the thread runs) and reports
    [GONE][runtime] and [CHECKED][] over its own PUSH to the same PULL.
    On $TERM the builder raises the job's stop flag, which the
    driver polls, and joins both. Without the hooks (fake driver) every
    image is "unknown", RUNTIME_ENSURE is answered at once and nothing
    blocks.                                                            */
#ifndef AH_BUILDER_H
#define AH_BUILDER_H

#include <stdbool.h>
#include "common/actor.h"
#include "drivers/driver.h"
#include "config/config.h"

typedef struct {
    const ah_config_t *config;      //  borrowed; catalog_path, lua_dir; outlives the actor
    const char  *db_path;           //  the database (opened, not migrated); policy_status
    ah_driver_t *driver;            //  borrowed, thread-safe; NULL: no image work
    bool         prewarm;           //  build / pull missing images at start (3 attempts)
    int          backoff_ms;        //  first pause between attempts; 0: 5000 (doubles)
} ah_builder_args_t;

#include "catalog/catalog.h"
//  The Dockerfile the builder makes a base_image runtime with (NULL for
//  an image entry). Caller frees.
char *ah_builder_dockerfile (const ah_runtime_t *rt);

//  One attempt at making rt's image present through driver, the way the
//  builder does (a base_image runtime from its Dockerfile, a context
//  runtime from its directory and host files, else a pull); the host
//  agent builds from its own catalog with it. Blocks; polls *stop.
//  0 / -1 with *err.
int ah_builder_build (ah_driver_t *driver, const ah_runtime_t *rt, const char *pip_index_url,
                      void (*on_progress) (void *arg, const char *text), void *arg,
                      volatile int *stop, char **err);

//  ah_actor_new (&ah_builder_actor, &args, &err): running once the catalog
//  and briefing.lua are loaded and it is on the bus; NULL with the reason
//  (e.g. the catalog's own message) otherwise.
extern const ah_actor_def_t ah_builder_actor;

#endif
