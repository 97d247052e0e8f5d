/*  actors/reconciler.c: start-up inspection, orphan removal and the
    driver's event stream turned into SANDBOX_OBSERVED (see reconciler.h;
    the threads and what they share are described there).             */
#include "actors/reconciler.h"
#include "common/log.h"
#include "common/msg.h"
#include "store/store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define AREA        "reconciler"
#define SELF_NAME   "reconciler"
#define SCAN_DONE   "RECONCILE_SCAN_DONE"       //  internal: scan worker -> actor

//  What a worker thread is given: read-only once the thread runs, except
//  *stop, which only the actor thread writes.
typedef struct {
    const char   *db_path;
    ah_driver_t  *driver;
    const char   *endpoint;             //  the actor's PULL
    volatile int *stop;
    int           backoff_min_ms;
    int           backoff_max_ms;
} worker_args_t;

typedef struct {
    ah_actor_t   *actor;
    zsock_t      *pull;                 //  workers' messages, to forward
    char         *db_path;
    char          endpoint [64];
    worker_args_t wargs;
    volatile int  stop;                 //  written here; read by the workers
    bool          scanning;
    pthread_t     scan;
    bool          following;
    pthread_t     follower;
} self_t;

//  -------------------------------------------------------------------------
//  Worker side (scan thread and follower thread)

//  Ids of every stored sandbox (and agents without a sandbox row, which
//  are not orphans either). NULL on a database error (logged).
static zlistx_t *
s_stored_ids (ah_store_t *store)
{
    sqlite3_stmt *st = ah_store_prepare (store,
        "SELECT agent_id FROM sandboxes UNION SELECT id FROM agents");
    if (!st)
        return NULL;
    zlistx_t *ids = zlistx_new ();
    zlistx_set_destructor (ids, (zlistx_destructor_fn *) zstr_free);
    zlistx_set_duplicator (ids, (zlistx_duplicator_fn *) strdup);
    zlistx_set_comparator (ids, (zlistx_comparator_fn *) strcmp);
    int rc;
    while ((rc = ah_store_step (store, st)) == SQLITE_ROW) {
        const char *id = (const char *) sqlite3_column_text (st, 0);
        if (id)
            zlistx_add_end (ids, (void *) id);
    }
    sqlite3_reset (st);
    if (rc != SQLITE_DONE)
        zlistx_destroy (&ids);
    return ids;
}

static bool
s_is_stored (ah_store_t *store, const char *agent_id)
{
    sqlite3_stmt *st = ah_store_prepare (store,
        "SELECT 1 FROM sandboxes WHERE agent_id = :agent_id");
    if (!st || ah_store_bind_text (st, ":agent_id", agent_id))
        return false;
    bool found = ah_store_step (store, st) == SQLITE_ROW;
    sqlite3_reset (st);
    return found;
}

//  Inspects one sandbox and sends SANDBOX_OBSERVED to lifecycle. action is
//  the driver's event ("die", ...) or NULL.
static void
s_observe (ah_driver_t *driver, zsock_t *push, const char *agent_id,
           const char *source, const char *action)
{
    ah_sandbox_status_t status;
    char *err = NULL;
    int64_t looked_at = ah_store_now_ms ();
    if (driver->inspect (driver, agent_id, &status, &err)) {
        ah_warn (AREA, "%s: cannot inspect (%s): %s", agent_id, source, err ? err : "?");
        free (err);
        return;
    }
    ah_msg_t *m = ah_msg_new ("SANDBOX_OBSERVED");
    ah_msg_set_str (m, "agent_id", agent_id);
    ah_msg_set_bool (m, "exists", status.exists);
    ah_msg_set_bool (m, "running", status.running);
    ah_msg_set_bool (m, "paused", status.paused);
    ah_msg_set_int (m, "exit_code", status.exit_code);
    ah_msg_set_str (m, "detail", status.detail);
    if (status.home_gone)
        ah_msg_set_bool (m, "home_gone", true);
    if (status.reason [0])
        ah_msg_set_str (m, "reason", status.reason);
    ah_msg_set_str (m, "source", source);
    ah_msg_set_int (m, "at_ms", looked_at);
    if (action)
        ah_msg_set_str (m, "action", action);
    ah_debug (AREA, "%s: observed %s (%s%s%s)", agent_id, status.detail, source,
              action ? ", " : "", action ? action : "");
    if (ah_msg_send (&m, push, "lifecycle"))
        ah_warn (AREA, "%s: could not queue SANDBOX_OBSERVED (shutting down?)", agent_id);
}

static void
s_observe_all (ah_driver_t *driver, ah_store_t *store, zsock_t *push, const char *source,
               volatile int *stop)
{
    zlistx_t *ids = s_stored_ids (store);
    if (!ids) {
        ah_error (AREA, "cannot read the sandboxes table; nothing inspected (%s)", source);
        return;
    }
    for (const char *id = zlistx_first (ids); id && !*stop; id = zlistx_next (ids))
        if (s_is_stored (store, id))
            s_observe (driver, push, id, source, NULL);
    zlistx_destroy (&ids);
}

static zsock_t *
s_push (const char *endpoint)
{
    zsock_t *push = zsock_new_push (endpoint);
    if (push) {
        //  Never block a worker for ever on an actor that has stopped reading.
        zsock_set_sndtimeo (push, 2000);
        zsock_set_linger (push, 0);
    }
    return push;
}

//  Orphans: list, then read the table, so an agent created meanwhile is
//  in the table before its objects are listed. Each removal is logged and
//  recorded.
static void
s_remove_orphans (ah_driver_t *driver, ah_store_t *store, zsock_t *push, volatile int *stop)
{
    char **listed = NULL;
    char *err = NULL;
    if (driver->list (driver, &listed, &err)) {
        ah_warn (AREA, "cannot list the driver's sandboxes, orphans stay: %s", err ? err : "?");
        free (err);
        return;
    }
    zlistx_t *stored = s_stored_ids (store);
    for (char **id = listed; stored && id && *id && !*stop; id++) {
        if (zlistx_find (stored, *id))
            continue;
        int rc = driver->destroy (driver, *id, &err);
        if (rc == 0)
            ah_info (AREA, "removed orphan sandbox %s (no stored agent)", *id);
        else
            ah_warn (AREA, "cannot remove orphan sandbox %s: %s", *id, err ? err : "?");
        ah_msg_t *m = ah_msg_new ("OP_RECORD");
        ah_msg_set_str (m, "agent_id", *id);
        ah_msg_set_str (m, "actor", "reconciler");
        ah_msg_set_str (m, "kind", "reconcile.orphan");
        ah_msg_set_strf (m, "detail", "%s sandbox with no stored agent", driver->name);
        ah_msg_set_bool (m, "ok", rc == 0);
        if (rc)
            ah_msg_set_str (m, "error", err ? err : "the driver failed");
        ah_msg_send (&m, push, "recorder");
        free (err);
        err = NULL;
    }
    zlistx_destroy (&stored);
    ah_driver_free_ids (&listed);
}

//  A full pass: orphans, then one observation per stored sandbox. Run at
//  start-up and whenever the event stream comes back (the engine may have
//  been down at start-up, or objects changed while it was away).
static void
s_full_pass (ah_driver_t *driver, ah_store_t *store, zsock_t *push, const char *source,
             volatile int *stop)
{
    s_remove_orphans (driver, store, push, stop);
    s_observe_all (driver, store, push, source, stop);
}

static void *
s_scan_thread (void *arg)
{
    worker_args_t *w = arg;
    zsock_t *push = s_push (w->endpoint);
    pthread_setname_np (pthread_self (), "ah-rc-scan");
    char *err = NULL;
    ah_store_t *store = ah_store_open (w->db_path, false, &err);
    if (!push || !store) {
        ah_error (AREA, "start-up pass not run: %s", err ? err : "cannot connect to the actor");
        free (err);
    }
    else
        s_full_pass (w->driver, store, push, "startup", w->stop);
    if (push) {
        ah_msg_t *m = ah_msg_new (SCAN_DONE);
        ah_msg_send (&m, push, SELF_NAME);
    }
    ah_store_close (&store);
    zsock_destroy (&push);
    return NULL;
}

typedef struct {
    worker_args_t *w;
    zsock_t       *push;
    ah_store_t    *store;
    bool           lost_before;         //  the stream broke at least once
    int            backoff_ms;
} follow_t;

//  A host agent's state, as the driver last found it, to lifecycle
//  (HOST_STATE: it marks the host's sandboxes unreachable, or back).
static void
s_host_state (follow_t *f)
{
    ah_host_info_t info;
    ah_driver_t *d = f->w->driver;
    if (!d->host_info || d->host_info (d, &info) != 0)
        return;
    ah_msg_t *m = ah_msg_new ("HOST_STATE");
    ah_msg_set_str (m, "host", info.name);
    ah_msg_set_str (m, "endpoint", info.endpoint);
    ah_msg_set_str (m, "state", info.state);
    if (*info.version)
        ah_msg_set_str (m, "version", info.version);
    if (info.protocol)
        ah_msg_set_int (m, "protocol", info.protocol);
    if (*info.error)
        ah_msg_set_str (m, "error", info.error);
    if (ah_msg_send (&m, f->push, "lifecycle"))
        ah_warn (AREA, "could not queue HOST_STATE (shutting down?)");
}

//  RUNTIME_CHECK to the builder: an image may have gone behind its back
//  (why: "image", an image untagged or deleted; "connected", the stream
//  is open, and what went while it was not is not known).
static void
s_runtime_check (follow_t *f, const char *why)
{
    ah_msg_t *m = ah_msg_new ("RUNTIME_CHECK");
    ah_msg_set_str (m, "why", why);
    if (ah_msg_send (&m, f->push, "builder"))
        ah_warn (AREA, "could not queue RUNTIME_CHECK (shutting down?)");
}

//  Called by driver->watch in the follower thread.
static void
s_on_change (void *arg, const char *agent_id, const char *action)
{
    follow_t *f = arg;
    if (!agent_id) {
        if (action && (streq (action, "image") || streq (action, "connected")))
            s_runtime_check (f, action);
        if (action && streq (action, "unreachable")) {
            f->lost_before = true;
            s_host_state (f);
            return;
        }
        if (action && streq (action, "connected"))
            s_host_state (f);
        if (action && streq (action, "connected")) {
            f->backoff_ms = f->w->backoff_min_ms;
            if (f->lost_before) {
                ah_info (AREA, "following the driver's events again; inspecting every sandbox");
                s_full_pass (f->w->driver, f->store, f->push, "resync", f->w->stop);
            }
            else
                ah_info (AREA, "following the driver's events");
        }
        return;
    }
    if (!s_is_stored (f->store, agent_id)) {
        ah_debug (AREA, "%s: %s event for a sandbox not stored; ignored", agent_id, action);
        return;
    }
    s_observe (f->w->driver, f->push, agent_id, "event", action);
}

static void *
s_follow_thread (void *arg)
{
    worker_args_t *w = arg;
    follow_t f = { .w = w, .backoff_ms = w->backoff_min_ms };
    pthread_setname_np (pthread_self (), "ah-rc-follow");
    f.push = s_push (w->endpoint);
    char *err = NULL;
    f.store = ah_store_open (w->db_path, false, &err);
    if (!f.push || !f.store) {
        ah_error (AREA, "not following the driver's events: %s",
                  err ? err : "cannot connect to the actor");
        free (err);
        goto done;
    }
    while (!*w->stop) {
        if (w->driver->watch (w->driver, s_on_change, &f, w->stop, &err) == 0 || *w->stop)
            break;
        //  A host agent's silence was logged once by its driver.
        ah_host_info_t info;
        if (w->driver->host_info && w->driver->host_info (w->driver, &info) == 0
        &&  !streq (info.state, "up"))
            ah_debug (AREA, "%s; reconnecting in %d ms", err ? err : "event stream lost", f.backoff_ms);
        else
            ah_warn (AREA, "%s; reconnecting in %d ms", err ? err : "event stream lost", f.backoff_ms);
        free (err);
        err = NULL;
        f.lost_before = true;
        for (int waited = 0; waited < f.backoff_ms && !*w->stop; waited += 100)
            zclock_sleep (100);
        f.backoff_ms = f.backoff_ms * 2 > w->backoff_max_ms ? w->backoff_max_ms : f.backoff_ms * 2;
    }
done:
    ah_store_close (&f.store);
    zsock_destroy (&f.push);
    return NULL;
}

//  -------------------------------------------------------------------------
//  Actor side

static void
s_start_scan (self_t *self)
{
    if (self->scanning)
        return;
    if (pthread_create (&self->scan, NULL, s_scan_thread, &self->wargs) == 0)
        self->scanning = true;
    else
        ah_error (AREA, "cannot start the start-up pass thread");
}

//  A worker's message: forward to its destination on the bus.
static void
s_on_pull (void *self_, zsock_t *pull)
{
    self_t *self = self_;
    char *err = NULL;
    ah_msg_t *m = ah_msg_recv (pull, true, &err);
    if (!m) {
        ah_error (AREA, "bad message from a worker: %s", err ? err : "?");
        free (err);
        return;
    }
    char dest [64];
    snprintf (dest, sizeof dest, "%s", ah_msg_peer (m));
    if (streq (dest, SELF_NAME) && streq (ah_msg_type (m), SCAN_DONE)) {
        if (self->scanning) {
            pthread_join (self->scan, NULL);
            self->scanning = false;
        }
        ah_msg_destroy (&m);
        return;
    }
    ah_msg_set_peer (m, "");
    ah_actor_send (self->actor, dest, &m);
}

//  The bus answers 503 for an absent destination only when a req was
//  set; we set none. Anything else: log it.
static void
s_on_reply (void *self_, ah_msg_t *m)
{
    if (!ah_msg_bool (m, "ok", true))
        ah_warn (AREA, "%s answered: %s", ah_msg_peer (m),
                 ah_msg_str (m, "error") ? ah_msg_str (m, "error") : "?");
}

//  SCAN: the start-up pass again; answered once it is queued.
static void
s_cmd_scan (void *self_, zmsg_t *cmd)
{
    self_t *self = self_;
    s_start_scan (self);
    zsock_signal (ah_actor_pipe (self->actor), 0);
}

static void
s_destroy (void *self_)
{
    self_t *self = self_;
    self->stop = 1;
    if (self->following)
        pthread_join (self->follower, NULL);
    if (self->scanning)
        pthread_join (self->scan, NULL);
    zsock_destroy (&self->pull);
    free (self->db_path);
    free (self);
}

static void *
s_init (ah_actor_t *actor, void *args)
{
    const ah_reconciler_args_t *a = args;
    if (!a || !a->driver || !a->db_path) {
        ah_actor_fail (actor, "the reconciler was started without a driver or a database path");
        return NULL;
    }
    self_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->actor = actor;
    self->db_path = strdup (a->db_path);
    snprintf (self->endpoint, sizeof self->endpoint, "inproc://reconciler-%p", (void *) self);
    self->pull = zsock_new_pull (self->endpoint);
    if (!self->pull || !self->db_path || ah_actor_reader (actor, self->pull, s_on_pull)) {
        ah_actor_fail (actor, "cannot set up the reconciler's sockets");
        s_destroy (self);
        return NULL;
    }
    self->wargs = (worker_args_t) {
        .db_path = self->db_path, .driver = a->driver, .endpoint = self->endpoint,
        .stop = &self->stop,
        .backoff_min_ms = a->backoff_min_ms > 0 ? a->backoff_min_ms : 500,
        .backoff_max_ms = a->backoff_max_ms > 0 ? a->backoff_max_ms : 30000,
    };
    if (self->wargs.backoff_max_ms < self->wargs.backoff_min_ms)
        self->wargs.backoff_max_ms = self->wargs.backoff_min_ms;
    //  Follow first, then scan: an event during the scan is not lost.
    if (a->driver->watch) {
        if (pthread_create (&self->follower, NULL, s_follow_thread, &self->wargs) == 0)
            self->following = true;
        else
            ah_error (AREA, "cannot start the event follower thread");
    }
    else
        ah_info (AREA, "the %s driver has no event stream: start-up pass only", a->driver->name);
    s_start_scan (self);
    return self;
}

static const ah_actor_handler_t s_handlers [] = {
    { "REPLY", s_on_reply },
    { NULL, NULL }
};

static const ah_actor_command_t s_commands [] = {
    { "SCAN", s_cmd_scan },
    { NULL, NULL }
};

const ah_actor_def_t ah_reconciler_actor = {
    .name = SELF_NAME, .on_bus = true, .init = s_init, .destroy = s_destroy,
    .handlers = s_handlers, .commands = s_commands,
};
