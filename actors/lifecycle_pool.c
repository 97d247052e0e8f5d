/*  actors/lifecycle_pool.c: warm pools (issue 31, docs/lifecycle.md
    "Warm pools"). Part of the lifecycle actor (lifecycle_int.h): all of
    it runs on the actor's one thread.

    A warm sandbox is an agent row of no tenant (tenant '', name
    "warm-<id>") whose agents.pool names its runtime. It is made by the
    same create and start every sandbox goes through (its own id, home,
    boot card and boot token, none of them ever another agent's), so a
    restart, the start-up scan and the reconciler know it like any other.
    lua/pool.lua says how many each runtime keeps (size), within
    sandbox.warm_pool_max in all.

    The fill pass (a timer, every second): warm rows that no longer fit
    their runtime (gone from the catalog, another image or shape) or that
    failed are destroyed, a pool over its size loses its newest, a warm
    row found asleep (after a restart) is started again, and each pool
    short of its size gets new rows, created and started at once. New rows
    wait while creates are taking warm ones (until none for POOL_QUIET_MS,
    at most POOL_DEFER_MS): a burst's first commands do not share the
    machine with the container creates of its refill.

    A take (ah_lc_pool_take, from AGENT_CREATE after the tenant's admission
    said yes): one warm row of the create's runtime and exact shape that
    is running, connected, and idle becomes the agent, its name, tenant,
    idle timeout and harness set and its pool cleared in one guarded
    UPDATE (WHERE pool IS NOT NULL). Its home was made empty for it and
    nobody else ever had its boot token.

    A runtime's image made again (RUNTIME_IMAGE from the builder: the
    engine's image id under the runtime's reference changed): the warm
    rows whose container was made from another image (agents.image_id,
    read once each is made) are drained by the next fill pass.

    Frozen pools (pool.lua's size() says frozen = true, the driver can
    freeze): a warm sandbox that is running and connected is frozen
    (the driver's freeze, as the idle ladder's), so a pool costs no CPU;
    a take thaws it (the create's cause), the create answered once the
    thaw is done (its reply held, ah_lc_pool_hold). A frozen warm row
    that lost its connection (a server restart) is thawed so that its
    sandboxd redials, then frozen again.                              */
#include "actors/lifecycle_int.h"
#include "common/log.h"

#include <msgpack.h>

#include <string.h>
#include <time.h>

#define POOL_FILL_MS        1000        //  how often the pools are looked at
#define POOL_NAME_PREFIX    "warm-"
#define POOL_BACKOFF_MS     30000       //  after a warm sandbox failed, no new one for this long
#define POOL_QUIET_MS       500         //  new warm rows once no take for this long...
#define POOL_DEFER_MS       5000        //  ...or this long after the first take they waited for
//  Warm sandboxes being made at once, at most: a refill stays in the
//  background (a burst that emptied the pool is not followed by as many
//  container creates competing with its first commands).
#define POOL_MAKING_MAX     4

//  The shape a runtime's warm sandboxes are made in: what a create that
//  names the runtime (or nothing) gets from the shipped limits.lua.
static void s_shape (self_t *self, const ah_runtime_t *rt, desired_t *d)
{
    memset (d, 0, sizeof *d);
    ah_lc_runtime_apply (d, rt);
    d->cpus = self->config->default_cpus;
    if (!d->has_memory)
        d->memory_mb = self->config->default_memory_mb;
    d->idle_minutes = ah_policy_value (self->store, self->config, "idle_minutes");
}

//  lua/pool.lua's size (runtime, clock) for the index-th runtime, within
//  0..sandbox.warm_pool_max, and whether its warm sandboxes are kept
//  frozen (*frozen). A script that fails keeps no pool.
static int64_t s_wanted (self_t *self, const ah_runtime_t *rt, bool is_default, bool *frozen)
{
    ah_msg_t *runtime = ah_msg_new ("RUNTIME");
    ah_msg_set_str (runtime, "alias", rt->alias);
    ah_msg_set_str (runtime, "image", rt->image);
    ah_msg_set_bool (runtime, "default", is_default);
    ah_msg_t *clock = ah_msg_new ("CLOCK");
    time_t now = time (NULL);
    struct tm tm;
    gmtime_r (&now, &tm);
    ah_msg_set_int (clock, "hour", tm.tm_hour);
    ah_msg_set_int (clock, "minute", tm.tm_min);
    ah_msg_set_int (clock, "weekday", tm.tm_wday);     //  0 Sunday, UTC
    ah_msg_t *result = NULL;
    char *err = NULL;
    int64_t size = 0;
    *frozen = false;
    if (ah_policy_call (self->pool_policy, "size", runtime, clock, &result, &err) == 0) {
        size = ah_msg_int (result, "size", 0);
        *frozen = ah_msg_bool (result, "frozen", false);
    }
    else
    if (!self->pool_warned) {
        ah_warn (AREA, "pool.lua: size() failed, no warm pool for runtime %s: %s", rt->alias,
                 err ? err : "?");
        self->pool_warned = true;
    }
    free (err);
    ah_msg_destroy (&result);
    ah_msg_destroy (&runtime);
    ah_msg_destroy (&clock);
    if (size < 0)
        size = 0;
    if (size > self->config->warm_pool_max)
        size = self->config->warm_pool_max;
    return size;
}

//  Each runtime's size (want [i], n_rt of them), in catalog order within
//  sandbox.warm_pool_max, and whether it is kept frozen (frozen [i]:
//  only where the driver can freeze); all 0 without warm pools.
static void s_sizes (self_t *self, int64_t *want, bool *frozen, size_t n_rt)
{
    int64_t budget = self->pool_policy ? self->config->warm_pool_max : 0;
    self->pool_wanted = 0;
    for (size_t i = 0; i < n_rt; i++) {
        frozen [i] = false;
        want [i] = budget > 0 ? s_wanted (self, ah_catalog_at (self->catalog, i), i == 0, &frozen [i]) : 0;
        if (frozen [i] && !self->driver->freeze) {
            //  A driver without a pause (kubernetes): they run.
            if (!self->pool_frozen_warned)
                ah_info (AREA, "pool.lua asks for frozen warm sandboxes; the %s driver cannot freeze: "
                         "they run", self->driver->name);
            self->pool_frozen_warned = true;
            frozen [i] = false;
        }
        if (want [i] > budget)
            want [i] = budget;
        budget -= want [i];
        self->pool_wanted += want [i];
    }
}

//  The warm rows, oldest first: id, pool, image, cpus, memory, state,
//  op, image id ("" not known), connected.
typedef struct {
    char id [ID_SIZE];
    char pool [AH_NAME_MAX + 2];
    char image [AH_IMAGE_MAX + 1];
    double cpus;
    int64_t memory_mb;
    char state [16];
    char op [16];
    char image_id [80];
    bool connected;
} warm_t;

static zlist_t *s_warm_rows (self_t *self)
{
    zlist_t *rows = zlist_new ();
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT a.id, a.pool, a.image, a.cpus, a.memory_mb, s.state, coalesce (s.op, ''),"
        " coalesce (a.image_id, ''), coalesce (s.connected, 0)"
        " FROM agents a JOIN sandboxes s ON s.agent_id = a.id WHERE a.pool IS NOT NULL"
        " ORDER BY a.created_at, a.id");
    while (st && ah_store_step (self->store, st) == SQLITE_ROW) {
        warm_t *w = calloc (1, sizeof *w);
        if (!w)
            break;
        snprintf (w->id, sizeof w->id, "%s", (const char *) sqlite3_column_text (st, 0));
        snprintf (w->pool, sizeof w->pool, "%s", (const char *) sqlite3_column_text (st, 1));
        snprintf (w->image, sizeof w->image, "%s", (const char *) sqlite3_column_text (st, 2));
        w->cpus = sqlite3_column_double (st, 3);
        w->memory_mb = sqlite3_column_int64 (st, 4);
        snprintf (w->state, sizeof w->state, "%s", (const char *) sqlite3_column_text (st, 5));
        snprintf (w->op, sizeof w->op, "%s", (const char *) sqlite3_column_text (st, 6));
        snprintf (w->image_id, sizeof w->image_id, "%s", (const char *) sqlite3_column_text (st, 7));
        w->connected = sqlite3_column_int (st, 8) != 0;
        zlist_append (rows, w);
    }
    if (st)
        sqlite3_reset (st);
    return rows;
}

static void s_warm_rows_destroy (zlist_t **rows_p)
{
    if (*rows_p) {
        for (warm_t *w = zlist_first (*rows_p); w; w = zlist_next (*rows_p))
            free (w);
        zlist_destroy (rows_p);
    }
}

//  A warm row goes (destroyed like any sandbox), saying why in the log
//  and the audit trail (pool.drain, actor "pool").
static void s_drain (self_t *self, const warm_t *w, const char *why)
{
    row_t row;
    if (ah_lc_lookup (self, w->id, &row) != 1)
        return;
    ah_info (AREA, "warm pool %s: %s (%s) goes: %s", w->pool, row.name, row.id, why);
    if (ah_lc_destroy (self, &row) == 1) {
        self->pool_drained++;
        ah_lc_record (self, w->id, "pool.drain", why, true, NULL);
    }
}

//  A warm row moves (guard) to `to` with op, and its driver call runs.
static void s_step (self_t *self, const warm_t *w, const char *guard, const char *to, const char *op)
{
    if (ah_lc_move (self, w->id, guard, to, op, NULL) == 1) {
        row_t row;
        if (ah_lc_lookup (self, w->id, &row) == 1)
            ah_lc_launch (self, &row, op, false);
    }
}

//  One new warm row of the runtime, created and started at once.
static int s_make (self_t *self, const ah_runtime_t *rt)
{
    char id [AH_AGENT_ID_LEN + 1], name [AH_NAME_MAX + 2];
    if (ah_token_id (id, sizeof id, AH_AGENT_ID_LEN))
        return -1;
    snprintf (name, sizeof name, POOL_NAME_PREFIX "%s", id);
    desired_t d;
    s_shape (self, rt, &d);
    if (ah_lc_insert (self, id, name, "", &d, NULL, rt->alias))
        return -1;
    ah_info (AREA, "warm pool %s: making %s", rt->alias, id);
    ah_lc_publish (self, id, "creating", "create", NULL);
    row_t row;
    if (ah_lc_lookup (self, id, &row) == 1)
        ah_lc_launch (self, &row, "create", false);
    return 0;
}

void ah_lc_pool_fill (void *self_, void *arg)
{
    (void) arg;
    self_t *self = self_;
    if (self->ending)
        return;
    if (self->pool_policy)
        ah_policy_reload (self->pool_policy, false);
    size_t n_rt = self->catalog ? ah_catalog_size (self->catalog) : 0;
    int64_t *want = calloc (n_rt + 1, sizeof *want);
    int64_t *have = calloc (n_rt + 1, sizeof *have);
    bool *frozen = calloc (n_rt + 1, sizeof *frozen);
    if (!want || !have || !frozen) {
        free (want);
        free (have);
        free (frozen);
        return;
    }
    s_sizes (self, want, frozen, n_rt);
    int64_t now = ah_store_now_ms ();
    char cause [sizeof self->cause];
    memcpy (cause, self->cause, sizeof cause);
    snprintf (self->cause, sizeof self->cause, "pool");
    zlist_t *rows = s_warm_rows (self);
    int making = 0;
    for (warm_t *w = zlist_first (rows); w; w = zlist_next (rows)) {
        //  Going already; a failed destroy is retried by its tombstone's
        //  schedule (docs/lifecycle.md "Tombstones"), not every second.
        if (streq (w->state, "destroying") || (streq (w->state, "error") && streq (w->op, "destroy")))
            continue;
        const ah_runtime_t *rt = self->catalog ? ah_catalog_find (self->catalog, w->pool) : NULL;
        size_t i = 0;
        while (rt && i < n_rt && ah_catalog_at (self->catalog, i) != rt)
            i++;
        desired_t shape;
        if (rt)
            s_shape (self, rt, &shape);
        //  The engine's id of the runtime's image now, as the builder said.
        const char *image_id = rt ? zhashx_lookup (self->image_ids, rt->alias) : NULL;
        if (!rt)
            s_drain (self, w, "its runtime is no longer in the catalog");
        else
        if (!streq (w->image, shape.image) || w->cpus != shape.cpus || w->memory_mb != shape.memory_mb)
            s_drain (self, w, "its runtime changed (image, cpus or memory)");
        else
        if (*w->image_id && image_id && !streq (w->image_id, image_id)) {
            char why [AH_IMAGE_MAX + 256];
            snprintf (why, sizeof why, "its runtime's image was made again: %s is %.80s now, it was made "
                      "from %.80s", w->image, image_id, w->image_id);
            s_drain (self, w, why);
        }
        else
        if (streq (w->state, "error")) {
            //  What failed it (an engine away, an image that cannot be
            //  made) would fail the next one too: a pause before the
            //  pool is made again, rather than a create every second.
            s_drain (self, w, "it failed");
            self->pool_paused_until = ah_store_now_ms () + POOL_BACKOFF_MS;
            ah_warn (AREA, "warm pool %s: a warm sandbox failed; no new one for %d s",
                     w->pool, POOL_BACKOFF_MS / 1000);
        }
        else
        if (have [i] >= want [i])
            s_drain (self, w, "the pool is over its size (lua/pool.lua, sandbox.warm_pool_max)");
        else {
            have [i]++;
            if (streq (w->state, "creating") || streq (w->state, "starting"))
                making++;
            if (streq (w->state, "sleeping") && !*w->op
            &&  ah_lc_move (self, w->id, "state = 'sleeping' AND op IS NULL", "starting", "start", NULL) == 1) {
                row_t row;
                if (ah_lc_lookup (self, w->id, &row) == 1)
                    ah_lc_launch_for_row (self, &row);
            }
            //  Frozen pools: a warm sandbox whose sandboxd said hello is
            //  frozen; one frozen without a connection (the server
            //  restarted) is thawed so that its sandboxd dials again;
            //  a pool no longer frozen has them thawed.
            bool hello = w->connected || !self->driver->waits_for_hello;
            if (streq (w->state, "running") && !*w->op && frozen [i] && hello && now >= self->pool_freeze_paused_until
            &&  !ah_lc_busy (self, w->id))
                s_step (self, w, "state = 'running' AND op IS NULL", "freezing", "freeze");
            else
            if (streq (w->state, "frozen") && !*w->op && (!frozen [i] || !hello) && !ah_lc_busy (self, w->id))
                s_step (self, w, "state = 'frozen' AND op IS NULL", "thawing", "thaw");
        }
    }
    s_warm_rows_destroy (&rows);
    bool taking = self->pool_taken_first && now - self->pool_taken_last < POOL_QUIET_MS
               && now - self->pool_taken_first < POOL_DEFER_MS;
    if (!taking)
        self->pool_taken_first = 0;
    for (size_t i = 0; i < n_rt && !taking && now >= self->pool_paused_until; i++)
        for (; have [i] < want [i] && making < POOL_MAKING_MAX; have [i]++, making++)
            if (s_make (self, ah_catalog_at (self->catalog, i))) {
                ah_warn (AREA, "warm pool %s: cannot make a warm sandbox (see above)",
                         ah_catalog_at (self->catalog, i)->alias);
                break;
            }
    memcpy (self->cause, cause, sizeof cause);
    free (want);
    free (have);
    free (frozen);
}

int ah_lc_pool_take (self_t *self, const char *name, const char *tenant, const desired_t *d,
                     const char *harness, row_t *row)
{
    if (!self->pool_policy || !*d->runtime) {
        self->pool_misses++;
        return 0;
    }
    //  A running one first (nothing to thaw), then a frozen one.
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT a.id, s.state FROM agents a JOIN sandboxes s ON s.agent_id = a.id"
        " WHERE a.pool = :runtime AND a.image = :image AND a.cpus = :cpus AND a.memory_mb = :mem"
        " AND s.state IN ('running','frozen') AND s.op IS NULL AND (s.connected = 1 OR :no_hello)"
        " AND s.unreachable IS NULL"
        " AND s.needs_rebuild = 0 AND s.home_lost IS NULL"
        " ORDER BY s.state = 'frozen', a.created_at, a.id LIMIT 1");
    char id [ID_SIZE] = "", state [16] = "";
    if (!st || ah_store_bind_text (st, ":runtime", d->runtime) || ah_store_bind_text (st, ":image", d->image)
            || ah_store_bind_double (st, ":cpus", d->cpus) || ah_store_bind_int64 (st, ":mem", d->memory_mb)
            //  A driver that says no hello has no connected flag: running is ready.
            || ah_store_bind_int64 (st, ":no_hello", !self->driver->waits_for_hello))
        return -1;
    int rc = ah_store_step (self->store, st);
    if (rc == SQLITE_ROW) {
        snprintf (id, sizeof id, "%s", (const char *) sqlite3_column_text (st, 0));
        snprintf (state, sizeof state, "%s", (const char *) sqlite3_column_text (st, 1));
    }
    sqlite3_reset (st);
    if (rc != SQLITE_ROW) {
        self->pool_misses++;
        return rc == SQLITE_DONE ? 0 : -1;
    }
    int64_t now = ah_store_now_ms ();
    bool follows = !d->has_idle
                && d->idle_minutes == ah_policy_value (self->store, self->config, "idle_minutes");
    //  The guard: still warm. The agent's own values, as a create sets them.
    bool ok = ah_store_begin (self->store) == 0;
    st = ok ? ah_store_prepare (self->store,
        "UPDATE agents SET name = :name, tenant = :tenant, idle_minutes = :idle, idle_default = :follows,"
        " harness = :harness, created_at = :now, pool = NULL WHERE id = :id AND pool IS NOT NULL") : NULL;
    ok = st && !ah_store_bind_text (st, ":name", name) && !ah_store_bind_text (st, ":tenant", tenant)
        && !ah_store_bind_double (st, ":idle", d->idle_minutes) && !ah_store_bind_int64 (st, ":follows", follows)
        && !ah_store_bind_text (st, ":harness", harness) && !ah_store_bind_int64 (st, ":now", now)
        && !ah_store_bind_text (st, ":id", id) && ah_store_step (self->store, st) == SQLITE_DONE
        && ah_store_changes (self->store) == 1;
    if (st)
        sqlite3_reset (st);
    //  Its idle clock starts now; the cause is the create's.
    st = ok ? ah_store_prepare (self->store,
        "UPDATE sandboxes SET last_activity_at = :now, cause = coalesce (:cause, cause), updated_at = :now"
        " WHERE agent_id = :id AND state = :state AND op IS NULL") : NULL;
    ok = st && !ah_store_bind_int64 (st, ":now", now) && !ah_store_bind_text (st, ":id", id)
        && !ah_store_bind_text (st, ":state", state)
        && !ah_store_bind_text (st, ":cause", self->cause [0] ? self->cause : NULL)
        && ah_store_step (self->store, st) == SQLITE_DONE && ah_store_changes (self->store) == 1;
    if (st)
        sqlite3_reset (st);
    if (!ok || ah_store_commit (self->store)) {
        ah_store_rollback (self->store);
        return -1;
    }
    self->pool_hits++;
    self->pool_taken_last = now;
    if (!self->pool_taken_first)
        self->pool_taken_first = now;
    ah_info (AREA, "warm pool %s: agent '%s' of tenant '%s' takes %s%s", d->runtime, name, tenant, id,
             streq (state, "frozen") ? " (frozen: thawing it)" : "");
    //  Frozen: thawed by the create's cause; the tunnel's connection is
    //  kept through it (docs/architecture.md "The tunnel across a
    //  freeze"), so the first command needs no redial.
    if (streq (state, "frozen")
    &&  ah_lc_move (self, id, "state = 'frozen' AND op IS NULL", "thawing", "thaw", NULL) == 1
    &&  ah_lc_lookup (self, id, row) == 1)
        ah_lc_launch (self, row, "thaw", false);
    return ah_lc_lookup (self, id, row) == 1 ? 1 : -1;
}

//  A create's answer, held until its warm sandbox's thaw is done.
typedef struct {
    char *peer;                     //  who asked
    ah_msg_t *reply;                //  the answer (REPLY with its req)
} held_t;

void ah_lc_held_free (void **item)
{
    held_t *held = *item;
    if (held) {
        free (held->peer);
        ah_msg_destroy (&held->reply);
        free (held);
    }
    *item = NULL;
}

int ah_lc_pool_hold (self_t *self, const char *agent_id, const ah_msg_t *request, ah_msg_t **reply_p)
{
    if (!ah_msg_has (request, "req") || !*ah_msg_peer (request) || zhashx_lookup (self->held, agent_id))
        return 0;
    held_t *held = calloc (1, sizeof *held);
    if (!held || !(held->peer = strdup (ah_msg_peer (request)))) {
        free (held);
        return 0;
    }
    held->reply = *reply_p;
    *reply_p = NULL;
    zhashx_insert (self->held, agent_id, held);
    return 1;
}

void ah_lc_pool_answer (self_t *self, const char *agent_id)
{
    held_t *held = zhashx_lookup (self->held, agent_id);
    if (held) {
        ah_actor_send (self->actor, held->peer, &held->reply);
        zhashx_delete (self->held, agent_id);
    }
}

void ah_lc_on_runtime_image (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *runtime = ah_msg_str (msg, "runtime");
    const char *image_id = ah_msg_str (msg, "image_id");
    if (!runtime || !image_id || !*image_id || strlen (image_id) >= sizeof ((warm_t *) 0)->image_id
    ||  !self->catalog || !ah_catalog_find (self->catalog, runtime)) {
        ah_warn (AREA, "RUNTIME_IMAGE: no runtime of the catalog or no image id; ignored");
        return;
    }
    const char *was = zhashx_lookup (self->image_ids, runtime);
    if (was && streq (was, image_id))
        return;
    ah_info (AREA, "runtime %s: its image is %s%s%s%s", runtime, image_id, was ? " (was " : "",
             was ? was : "", was ? ")" : "");
    if (was)
        ah_info (AREA, "warm pool %s: warm sandboxes made from another image go at the next fill", runtime);
    char *copy = strdup (image_id);
    if (copy)
        zhashx_update (self->image_ids, runtime, copy);
}

void ah_lc_pool_image_id (self_t *self, const char *agent_id, const char *image_id)
{
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "UPDATE agents SET image_id = :iid WHERE id = :id AND pool IS NOT NULL");
    if (!st || ah_store_bind_text (st, ":iid", image_id) || ah_store_bind_text (st, ":id", agent_id)
    ||  ah_store_step (self->store, st) != SQLITE_DONE)
        ah_warn (AREA, "warm sandbox %s: its image id could not be written", agent_id);
    if (st)
        sqlite3_reset (st);
}

int ah_lc_pool_freeze_failed (self_t *self, const char *agent_id)
{
    sqlite3_stmt *st = ah_store_prepare (self->store, "SELECT pool IS NOT NULL FROM agents WHERE id = :id");
    bool warm = st && !ah_store_bind_text (st, ":id", agent_id) && ah_store_step (self->store, st) == SQLITE_ROW
             && sqlite3_column_int (st, 0);
    if (st)
        sqlite3_reset (st);
    if (!warm)
        return 0;
    //  It runs as a warm sandbox did before frozen pools; none is frozen
    //  for a while (what failed this one would fail the next).
    self->pool_freeze_paused_until = ah_store_now_ms () + POOL_BACKOFF_MS;
    ah_warn (AREA, "warm sandbox %s could not be frozen: it runs; no warm freeze for %d s", agent_id,
             POOL_BACKOFF_MS / 1000);
    ah_lc_move (self, agent_id, "state = 'freezing'", "running", NULL, NULL);
    return 1;
}

static void s_pack_str (msgpack_packer *pk, const char *s)
{
    msgpack_pack_str_with_body (pk, s, strlen (s));
}

//  POOL_LIST {req}: each runtime's pool (runtime, size, ready, making,
//  oldest_ready_at), and the counts since the server started (hits,
//  misses, drained) with sandbox.warm_pool_max. GET /api/v1/pool, the
//  metrics, `agenthold pool`.
void ah_lc_on_pool_list (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    size_t n_rt = self->catalog ? ah_catalog_size (self->catalog) : 0;
    int64_t *want = calloc (n_rt + 1, sizeof *want);
    bool *frozen = calloc (n_rt + 1, sizeof *frozen);
    if (!want || !frozen) {
        free (want);
        free (frozen);
        ah_actor_reply_error (self->actor, msg, 500, "out of memory");
        return;
    }
    s_sizes (self, want, frozen, n_rt);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init (&buf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &buf, msgpack_sbuffer_write);
    msgpack_pack_array (&pk, (uint32_t) n_rt);
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT coalesce (sum (s.state IN ('running','frozen') AND s.op IS NULL), 0),"
        " coalesce (sum (s.state IN ('creating','starting')), 0),"
        " min (CASE WHEN s.state IN ('running','frozen') AND s.op IS NULL THEN a.created_at END),"
        " coalesce (sum (s.state = 'frozen' AND s.op IS NULL), 0)"
        " FROM agents a JOIN sandboxes s ON s.agent_id = a.id WHERE a.pool = :runtime");
    for (size_t i = 0; i < n_rt; i++) {
        const ah_runtime_t *rt = ah_catalog_at (self->catalog, i);
        int64_t ready = 0, making = 0, oldest = 0, nfrozen = 0;
        if (st && !ah_store_bind_text (st, ":runtime", rt->alias) && ah_store_step (self->store, st) == SQLITE_ROW) {
            ready = sqlite3_column_int64 (st, 0);
            making = sqlite3_column_int64 (st, 1);
            oldest = sqlite3_column_int64 (st, 2);
            nfrozen = sqlite3_column_int64 (st, 3);
        }
        if (st)
            sqlite3_reset (st);
        msgpack_pack_map (&pk, 7);
        s_pack_str (&pk, "runtime");            s_pack_str (&pk, rt->alias);
        s_pack_str (&pk, "size");               msgpack_pack_int64 (&pk, want [i]);
        s_pack_str (&pk, "ready");              msgpack_pack_int64 (&pk, ready);
        s_pack_str (&pk, "making");             msgpack_pack_int64 (&pk, making);
        s_pack_str (&pk, "oldest_ready_at");
        oldest > 0 ? msgpack_pack_int64 (&pk, oldest) : msgpack_pack_nil (&pk);
        s_pack_str (&pk, "frozen");             msgpack_pack_int64 (&pk, nfrozen);
        s_pack_str (&pk, "keeps_frozen");       frozen [i] ? msgpack_pack_true (&pk) : msgpack_pack_false (&pk);
    }
    free (want);
    free (frozen);
    ah_msg_t *reply = ah_msg_reply_ok (msg);
    ah_msg_set_int (reply, "status", 200);
    ah_msg_set_int (reply, "max", self->config->warm_pool_max);
    ah_msg_set_int (reply, "hits", self->pool_hits);
    ah_msg_set_int (reply, "misses", self->pool_misses);
    ah_msg_set_int (reply, "drained", self->pool_drained);
    if (ah_msg_set_raw (reply, "pools", buf.data, buf.size) != 0) {
        ah_msg_destroy (&reply);
        reply = ah_msg_reply_error (msg, 500, "the pools could not be encoded");
    }
    msgpack_sbuffer_destroy (&buf);
    ah_actor_reply (self->actor, msg, reply);
}

int ah_lc_pool_init (self_t *self)
{
    if (!self->catalog)
        return 0;
    char *err = NULL;
    //  Warm pools are not built for Kubernetes yet (issue 31): its warm
    //  Pods and claims would be made and never tested.
    if (self->config->warm_pool_max > 0 && streq (self->driver->name, "kubernetes"))
        ah_info (AREA, "no warm pools: not on the kubernetes driver yet (sandbox.warm_pool_max ignored)");
    else if (self->config->warm_pool_max > 0
    && !(self->pool_policy = ah_policy_new (self->config->lua_dir, "pool.lua", AREA, self->store, &err))) {
        //  No pool.lua (an installation that removed it): no warm pools.
        ah_warn (AREA, "no warm pools: %s", err ? err : "pool.lua cannot be loaded");
        free (err);
    }
    //  Without warm pools too: what an earlier run left warm is drained.
    self->pool_timer = ah_actor_timer (self->actor, POOL_FILL_MS, POOL_FILL_MS, ah_lc_pool_fill, NULL);
    return 0;
}
