/*  actors/lifecycle.c: the lifecycle actor (see lifecycle.h and
    docs/lifecycle.md); its parts are listed in lifecycle_int.h.

    DESIGN. One actor thread (common/actor.h; bus name "lifecycle") owns
    the agents and sandboxes rows through its own store connection.
    Every request is decided by one guarded UPDATE on the sandboxes row;
    the driver call it implies is a job of the actor's workers
    (ah_actor_job, up to LC_WORKERS at once: a slow call never holds
    another agent's) that owns its job_t until it has its outcome; back
    in the actor's thread the row moves on and the job is freed. At the
    end the skeleton waits for the calls in flight; their outcomes only
    go (the row says what a restart finishes).

    At most one driver call per agent is in flight (tracks: agent id ->
    track_t, owned by the actor). A request that wins its UPDATE while a
    call is in flight (destroy during a start) only moves the row; when
    the call comes back and finds the row in another state than the one
    it served, the actor launches what the row now asks for. So the
    database always says what happens next, which is also how an
    interrupted operation is finished after a restart.

    Timers: one per agent waiting for sandboxd's hello, and one for the
    batched AGENT_ACTIVITY writes while any are pending.              */
#include "actors/lifecycle_int.h"
#include "common/log.h"

#include <math.h>
#include <string.h>

#define ACTIVITY_MAX    10000           //  agents with activity waiting for a flush
#define LC_WORKERS      AH_ACTOR_WORKERS_MAX    //  driver calls at once

const char *ah_lc_state_for_op (const char *op)
{
    if (streq (op, "create"))  return "creating";
    if (streq (op, "start"))   return "starting";
    if (streq (op, "stop"))    return "stopping";
    if (streq (op, "freeze"))  return "freezing";
    if (streq (op, "thaw"))    return "thawing";
    if (streq (op, "rebuild")) return "rebuilding";
    if (streq (op, "destroy")) return "destroying";
    //  A lifetime's end keeps the row asleep while the driver works.
    if (streq (op, "expire") || streq (op, "expire-home")) return "sleeping";
    return "";
}

const char *ah_lc_op_for_state (const char *state)
{
    if (streq (state, "creating"))   return "create";
    if (streq (state, "starting"))   return "start";
    if (streq (state, "stopping"))   return "stop";
    if (streq (state, "freezing"))   return "freeze";
    if (streq (state, "thawing"))    return "thaw";
    if (streq (state, "rebuilding")) return "rebuild";
    if (streq (state, "destroying")) return "destroy";
    return NULL;
}

static void s_copy (char *dst, size_t size, const unsigned char *src)
{
    snprintf (dst, size, "%s", src ? (const char *) src : "");
}

//  The port of the tunnel's TCP listener ("host:port" or ":port"), for
//  the boot of drivers whose sandboxes dial it (fake); 8090 when it has
//  none (the docker driver's sandboxes dial its unix socket).
static int s_listen_port (const ah_config_t *config)
{
    const char *listen = ah_config_tunnel_tcp (config, NULL);
    const char *colon = listen ? strrchr (listen, ':') : NULL;
    int port = colon ? atoi (colon + 1) : 0;
    return port > 0 && port < 65536 ? port : 8090;
}

// --------------------------------------------------------------------------
//  Rows and state moves

void ah_lc_publish (self_t *self, const char *agent_id, const char *state,
                    const char *op, const char *error)
{
    ah_debug (AREA, "%s -> %s%s%s", agent_id, state, error ? ": " : "", error ? error : "");
    ah_lc_reader_state (self, agent_id, state);
    //  Who caused it: the request being handled, else the one that set
    //  the row on its way (an outcome continues its request's cause).
    char by [sizeof self->cause] = "";
    if (self->cause [0])
        snprintf (by, sizeof by, "%s", self->cause);
    else {
        sqlite3_stmt *st = ah_store_prepare (self->store, "SELECT cause FROM sandboxes WHERE agent_id = :id");
        if (st && !ah_store_bind_text (st, ":id", agent_id) && ah_store_step (self->store, st) == SQLITE_ROW
        &&  sqlite3_column_text (st, 0))
            snprintf (by, sizeof by, "%s", (const char *) sqlite3_column_text (st, 0));
        if (st)
            sqlite3_reset (st);
    }
    for (const char *to = zlist_first (self->subscribers); to; to = zlist_next (self->subscribers)) {
        ah_msg_t *event = ah_msg_new ("SANDBOX_STATE");
        ah_msg_set_str (event, "agent_id", agent_id);
        ah_msg_set_str (event, "state", state);
        ah_msg_set_str (event, "op", op && *op ? op : NULL);
        ah_msg_set_str (event, "error", error && *error ? error : NULL);
        if (by [0])
            ah_msg_set_str (event, "by", by);
        ah_actor_send (self->actor, to, &event);
    }
    bool kick = streq (state, "stopping") || streq (state, "rebuilding")
             || streq (state, "destroying") || streq (state, "error");
    if (kick && self->tunnel_subscribed) {
        ah_msg_t *msg = ah_msg_new ("TUNNEL_KICK");
        ah_msg_set_str (msg, "agent_id", agent_id);
        ah_actor_send (self->actor, "tunnel", &msg);
    }
}

void ah_lc_connected (self_t *self, const char *agent_id, bool connected)
{
    for (const char *to = zlist_first (self->subscribers); to; to = zlist_next (self->subscribers))
        if (streq (to, "api")) {
            ah_msg_t *event = ah_msg_new ("SANDBOX_CONNECTED");
            ah_msg_set_str (event, "agent_id", agent_id);
            ah_msg_set_bool (event, "connected", connected);
            ah_actor_send (self->actor, to, &event);
        }
}

void ah_lc_changed (self_t *self, const char *agent_id, int64_t last_activity_at, double idle_minutes)
{
    if (!self->sleeper_subscribed)
        return;
    ah_msg_t *msg = ah_msg_new ("AGENT_CHANGED");
    ah_msg_set_str (msg, "agent_id", agent_id);
    if (last_activity_at >= 0)
        ah_msg_set_int (msg, "last_activity_at", last_activity_at);
    if (isfinite (idle_minutes))
        ah_msg_set_double (msg, "idle_minutes", idle_minutes);
    ah_actor_send (self->actor, "sleeper", &msg);
}

int ah_lc_lookup (self_t *self, const char *key, row_t *row)
{
    return ah_lc_lookup_in (self, key, NULL, row);
}

int ah_lc_lookup_in (self_t *self, const char *key_in, const char *tenant, row_t *row)
{
    char id [AH_AGENT_ID_LEN + 1];          //  key_in may point into *row
    int found = ah_store_agent_find (self->store, key_in, tenant, id, sizeof id);
    memset (row, 0, sizeof *row);
    if (found != 1)
        return found;
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT a.id, a.name, a.tenant, a.image, a.cpus, a.memory_mb, a.idle_minutes,"
        " s.state, s.op, s.error, s.needs_rebuild, a.runtime, s.container_removed_at IS NOT NULL,"
        " s.updated_at"
        " FROM agents a JOIN sandboxes s ON s.agent_id = a.id WHERE a.id = :id");
    if (!st || ah_store_bind_text (st, ":id", id))
        return -1;
    int rc = ah_store_step (self->store, st);
    if (rc == SQLITE_ROW) {
        s_copy (row->id, sizeof row->id, sqlite3_column_text (st, 0));
        s_copy (row->name, sizeof row->name, sqlite3_column_text (st, 1));
        s_copy (row->tenant, sizeof row->tenant, sqlite3_column_text (st, 2));
        s_copy (row->image, sizeof row->image, sqlite3_column_text (st, 3));
        row->cpus = sqlite3_column_double (st, 4);
        row->memory_mb = sqlite3_column_int64 (st, 5);
        row->idle_minutes = sqlite3_column_double (st, 6);
        s_copy (row->state, sizeof row->state, sqlite3_column_text (st, 7));
        s_copy (row->op, sizeof row->op, sqlite3_column_text (st, 8));
        s_copy (row->error, sizeof row->error, sqlite3_column_text (st, 9));
        row->needs_rebuild = sqlite3_column_int (st, 10) != 0;
        s_copy (row->runtime, sizeof row->runtime, sqlite3_column_text (st, 11));
        row->container_removed = sqlite3_column_int (st, 12) != 0;
        row->updated_at = sqlite3_column_int64 (st, 13);
    }
    sqlite3_reset (st);
    return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
}

//  Leaving starting/running forgets the boot token, so an old sandboxd
//  cannot come back; reaching running starts the idle clock.
int ah_lc_update (self_t *self, const char *agent_id, const char *guard,
                  const char *to, const char *op, const char *error)
{
    char sql [1024];
    snprintf (sql, sizeof sql,
        "UPDATE sandboxes SET state = :to, op = :op, error = :error,"
        " op_started_at = CASE WHEN :op IS NULL THEN NULL ELSE :now END,"
        " boot_token_hash = CASE WHEN :to IN ('starting','running','freezing','frozen','thawing')"
        "                   THEN boot_token_hash END,"
        " last_activity_at = CASE WHEN :to = 'running' THEN :now ELSE last_activity_at END,"
        " connected = CASE WHEN :to IN ('running','freezing','frozen','thawing') THEN connected ELSE 0 END,"
        " frozen_at = CASE WHEN :to = 'frozen' AND state <> 'frozen' THEN :now"
        "             WHEN :to IN ('frozen','thawing') THEN frozen_at END,"
        " stopped_at = CASE WHEN :to NOT IN ('sleeping','error') THEN NULL WHEN state <> :to THEN :now"
        "              ELSE stopped_at END,"
        " cause = coalesce (:cause, cause), updated_at = :now"
        " WHERE agent_id = :id AND (%s)", guard);
    sqlite3_stmt *st = ah_store_prepare (self->store, sql);
    if (!st || ah_store_bind_text (st, ":to", to)
            || ah_store_bind_text (st, ":op", op && *op ? op : NULL)
            || ah_store_bind_text (st, ":error", error)
            || ah_store_bind_int64 (st, ":now", ah_store_now_ms ())
            || ah_store_bind_text (st, ":cause", self->cause [0] ? self->cause : NULL)
            || ah_store_bind_text (st, ":id", agent_id))
        return -1;
    int rc = ah_store_step (self->store, st);
    sqlite3_reset (st);
    if (rc != SQLITE_DONE)
        return -1;
    return ah_store_changes (self->store) == 1 ? 1 : 0;
}

int ah_lc_move (self_t *self, const char *agent_id, const char *guard,
                const char *to, const char *op, const char *error)
{
    char cut [ERROR_MAX_LEN + 1];          //  a driver's message may be long
    if (error)
        snprintf (cut, sizeof cut, "%s", error);
    int rc = ah_lc_update (self, agent_id, guard, to, op, error ? cut : NULL);
    if (rc == 1)
        ah_lc_publish (self, agent_id, to, op, error ? cut : NULL);
    return rc;
}

void ah_lc_caused (self_t *self, const ah_msg_t *msg, void (*fn) (void *, ah_msg_t *))
{
    const char *by = ah_msg_str (msg, "by");
    const char *peer = ah_msg_peer (msg);
    snprintf (self->cause, sizeof self->cause, "%s", by && *by ? by : peer && *peer ? peer : "");
    fn (self, (ah_msg_t *) msg);
    self->cause [0] = 0;
}

int ah_lc_run (self_t *self, const char *sql, const char *agent_id)
{
    sqlite3_stmt *st = ah_store_prepare (self->store, sql);
    if (!st || ah_store_bind_text (st, ":id", agent_id))
        return -1;
    int rc = ah_store_step (self->store, st);
    sqlite3_reset (st);
    return rc == SQLITE_DONE ? 0 : -1;
}

void ah_lc_forget_agent (self_t *self, const char *agent_id)
{
    ah_lc_forget (self, agent_id);
    zhashx_delete (self->activity, agent_id);
}

// --------------------------------------------------------------------------
//  Activity: frequent (every turn, every keystroke batch), so written in
//  one transaction per flush interval, not one per message.

static void s_flush_activity (self_t *self)
{
    ah_actor_timer_end (self->actor, self->activity_timer);
    self->activity_timer = 0;
    if (zhashx_size (self->activity) == 0)
        return;
    if (ah_store_begin (self->store) == 0) {
        for (int64_t *at = zhashx_first (self->activity); at; at = zhashx_next (self->activity)) {
            sqlite3_stmt *st = ah_store_prepare (self->store,
                "UPDATE sandboxes SET last_activity_at = max(coalesce(last_activity_at, 0), :at)"
                " WHERE agent_id = :id");
            if (st && !ah_store_bind_int64 (st, ":at", *at)
                   && !ah_store_bind_text (st, ":id", zhashx_cursor (self->activity)))
                ah_store_step (self->store, st);
            if (st)
                sqlite3_reset (st);
        }
        if (ah_store_commit (self->store))
            ah_store_rollback (self->store);
        else
            for (int64_t *at = zhashx_first (self->activity); at; at = zhashx_next (self->activity))
                ah_lc_changed (self, zhashx_cursor (self->activity), *at, NAN);
    }
    zhashx_purge (self->activity);
}

static void s_on_activity_timer (void *self_, void *arg)
{
    self_t *self = self_;
    self->activity_timer = 0;
    s_flush_activity (self);
}

static void s_on_activity (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *id = ah_msg_str (msg, "agent_id");
    if (!ah_ident_ok (AH_IDENT_AGENT_ID, id)) {
        ah_warn (AREA, "AGENT_ACTIVITY from '%s' without a valid agent_id", ah_msg_peer (msg));
        return;
    }
    int64_t *at = zhashx_lookup (self->activity, id);
    if (!at) {
        at = malloc (sizeof *at);
        if (!at)
            return;
        zhashx_insert (self->activity, id, at);
    }
    *at = ah_store_now_ms ();
    if (!self->activity_timer)
        self->activity_timer = ah_actor_timer (self->actor, AH_LIFECYCLE_ACTIVITY_FLUSH_MS, 0,
                                               s_on_activity_timer, NULL);
    if (zhashx_size (self->activity) >= ACTIVITY_MAX)
        s_flush_activity (self);            //  bounded memory whatever the senders do
}

static void s_on_policy_reload (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    if (ah_policy_reload (self->policy, true) < 0)
        ah_warn (AREA, "limits.lua not reloaded, the previous version stays: %s",
                 ah_policy_error (self->policy));
    if (self->pool_policy && ah_policy_reload (self->pool_policy, true) < 0)
        ah_warn (AREA, "pool.lua not reloaded, the previous version stays: %s",
                 ah_policy_error (self->pool_policy));
}

//  PUT /api/v1/policy changed a value: the default idle timeout moves the
//  agents that follow it (every other value is read at its next use).
static void s_on_policy_values (void *self_, ah_msg_t *msg)
{
    (void) msg;
    ah_lc_idle_defaults (self_);
}

static void s_idle_defaults_timer (void *self_, void *arg)
{
    (void) arg;
    ah_lc_idle_defaults (self_);
}

// --------------------------------------------------------------------------
//  The actor

static void s_on_create (void *self, ah_msg_t *msg)     { ah_lc_caused (self, msg, ah_lc_on_create); }
static void s_on_update (void *self, ah_msg_t *msg)     { ah_lc_caused (self, msg, ah_lc_on_update); }
static void s_on_transition (void *self, ah_msg_t *msg) { ah_lc_caused (self, msg, ah_lc_on_transition); }
static void s_on_observed (void *self, ah_msg_t *msg)   { ah_lc_caused (self, msg, ah_lc_on_observed); }
static void s_on_tombstone_forget (void *self, ah_msg_t *msg)
{
    ah_lc_caused (self, msg, ah_lc_on_tombstone_forget);
}

static void s_free (void **item)
{
    free (*item);
    *item = NULL;
}

static void s_on_term (void *self_)
{
    self_t *self = self_;
    self->ending = true;
    s_flush_activity (self_);
}

static void s_destroy (void *self_)
{
    self_t *self = self_;
    zhashx_destroy (&self->tracks);
    zhashx_destroy (&self->activity);
    zhashx_destroy (&self->briefings);
    zhashx_destroy (&self->image_ids);
    zhashx_destroy (&self->held);
    ah_lc_readers_destroy (self);
    ah_catalog_destroy (&self->catalog);
    ah_store_close (&self->store);
    zlist_destroy (&self->subscribers);
    ah_policy_destroy (&self->policy);
    ah_policy_destroy (&self->pool_policy);
    free (self);
}

static void *s_init (ah_actor_t *actor, void *args)
{
    const ah_lifecycle_args_t *a = args;
    if (!a || !a->config || !a->driver || !a->db_path) {
        ah_actor_fail (actor, "lifecycle was started without config, driver or database path");
        return NULL;
    }
    self_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->actor = actor;
    self->config = a->config;
    self->driver = a->driver;
    self->hello_timeout_ms = a->hello_timeout_ms > 0 ? a->hello_timeout_ms : AH_LIFECYCLE_HELLO_TIMEOUT_MS;
    self->tunnel_port = s_listen_port (a->config);
    self->subscribers = zlist_new ();
    zlist_autofree (self->subscribers);
    for (const char **s = a->subscribers; s && *s; s++) {
        zlist_append (self->subscribers, (void *) *s);
        if (streq (*s, "tunnel"))
            self->tunnel_subscribed = true;
        if (streq (*s, "sleeper"))
            self->sleeper_subscribed = true;
    }
    self->tracks = zhashx_new ();
    zhashx_set_destructor (self->tracks, s_free);
    self->activity = zhashx_new ();
    zhashx_set_destructor (self->activity, s_free);
    self->briefings = zhashx_new ();
    zhashx_set_destructor (self->briefings, s_free);
    self->image_ids = zhashx_new ();
    zhashx_set_destructor (self->image_ids, s_free);
    self->held = zhashx_new ();
    zhashx_set_destructor (self->held, ah_lc_held_free);
    self->ensure_images = a->ensure_images;

    char *err = NULL;
    ah_actor_workers (actor, LC_WORKERS);
    //  Our own copy of the catalog (immutable; the builder validated the
    //  same file): which image, env, memory and network a runtime means.
    if (a->config->catalog_path && !(self->catalog = ah_catalog_load (a->config->catalog_path, &err)))
        ah_actor_fail (actor, "the runtime catalog is invalid: %s", err ? err : "?");
    else
    if (!(self->store = ah_store_open (a->db_path, false, &err)))
        ah_actor_fail (actor, "cannot open the database %s: %s", a->db_path, err ? err : "?");
    else
    //  Our own policy host (it belongs to this thread): limits.lua.
    if (!(self->policy = ah_policy_new (a->config->lua_dir, "limits.lua", AREA, self->store, &err)))
        ah_actor_fail (actor, "cannot load the admit policy: %s", err ? err : "?");
    free (err);
    if (!self->policy) {
        s_destroy (self);
        return NULL;
    }
    //  No sandboxd is connected to a tunnel that just started: each says
    //  so again with its hello (SANDBOX_HELLO comes after this init).
    char *why = NULL;
    if (ah_store_exec (self->store, "UPDATE sandboxes SET connected = 0 WHERE connected <> 0", &why))
        ah_warn (AREA, "cannot clear the sandboxes' connected flags: %s", why ? why : "?");
    free (why);
    //  Once running: finish what a previous run left half done.
    ah_actor_timer (actor, 0, 0, ah_lc_startup_scan, NULL);
    //  Warm pools (lua/pool.lua, sandbox.warm_pool_max): filled after
    //  the start-up scan, then every second.
    ah_lc_pool_init (self);
    //  The default idle timeout may have changed while it was down.
    ah_actor_timer (actor, 0, 0, s_idle_defaults_timer, NULL);
    //  Lifetimes and destroy retries: soon after start, then every interval.
    int64_t every = (int64_t) (a->config->ttl_check_interval_s * 1000);
    self->ttl_timer = ah_actor_timer (actor, every < 1000 ? every : 1000, every, ah_lc_ttl_sweep, NULL);
    ah_info (AREA, "ready: driver %s%s, hello timeout %d ms", self->driver->name,
             self->driver->waits_for_hello ? " (waits for sandboxd's hello)" : "", self->hello_timeout_ms);
    return self;
}

static const ah_actor_handler_t s_handlers [] = {
    { "AGENT_CREATE", s_on_create },
    { "AGENT_UPDATE", s_on_update },
    { "SANDBOX_START", s_on_transition },
    { "SANDBOX_STOP", s_on_transition },
    { "SANDBOX_FREEZE", s_on_transition },
    { "SANDBOX_THAW", s_on_transition },
    { "SANDBOX_REBUILD", s_on_transition },
    { "SANDBOX_DESTROY", s_on_transition },
    { "SANDBOX_HELLO", ah_lc_on_hello },
    { "TUNNEL_LOST", ah_lc_on_tunnel_lost },
    { "READER_OPEN", ah_lc_on_reader_open },
    { "READER_HELLO", ah_lc_on_reader_hello },
    { "READER_KEEP", ah_lc_on_reader_keep },
    { "READER_LOST", ah_lc_on_reader_lost },
    { "SANDBOX_OBSERVED", s_on_observed },
    { "HOST_STATE", ah_lc_on_host_state },
    { "AGENT_ACTIVITY", s_on_activity },
    { "POLICY_RELOAD", s_on_policy_reload },
    { "POLICY_VALUES", s_on_policy_values },
    { "RUNTIME_READY", ah_lc_on_runtime_ready },
    { "RUNTIME_PROGRESS", ah_lc_on_runtime_progress },
    { "TOMBSTONE_FORGET", s_on_tombstone_forget },
    { "POOL_LIST", ah_lc_on_pool_list },
    { "RUNTIME_IMAGE", ah_lc_on_runtime_image },
    { NULL, NULL }
};

const ah_actor_def_t ah_lifecycle_actor = {
    .name = AREA, .on_bus = true, .init = s_init, .destroy = s_destroy, .on_term = s_on_term,
    .handlers = s_handlers,
};
