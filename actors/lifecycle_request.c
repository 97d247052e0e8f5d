/*  actors/lifecycle_request.c: the lifecycle actor's requests (see
    lifecycle_int.h and docs/messages.md): AGENT_CREATE, AGENT_UPDATE and
    the transitions, each decided by one guarded UPDATE; the driver call
    it implies is launched once the row moved.                         */
#include "actors/lifecycle_int.h"
#include "common/log.h"

#include <string.h>

//  Transition requests: where from (the guard), where to, what is "already".
typedef struct {
    const char *type;
    const char *verb;
    const char *guard;              //  SQL condition on the row (constant text)
    const char *needs;              //  the guard for a person
    const char *to;
    const char *already;            //  states answered 200 instead of 409, "|a|b|"
} transition_t;

static const transition_t s_transitions [] = {
    { "SANDBOX_START", "start",
      "state IN ('sleeping','error') AND (op IS NULL OR op <> 'destroy')",
      "sleeping or error", "starting", "|creating|starting|running|thawing|" },
    { "SANDBOX_STOP", "stop",
      "state IN ('running','starting','error','freezing','frozen','thawing')"
      " AND (op IS NULL OR op NOT IN ('destroy','create'))",
      "running, starting, frozen or error", "stopping", "|sleeping|stopping|" },
    { "SANDBOX_REBUILD", "rebuild",
      "state IN ('sleeping','error','running','frozen') AND (op IS NULL OR op <> 'destroy')",
      "sleeping, error, running or frozen", "rebuilding", "" },
    //  The frozen tier (issue 29): a running sandbox's processes paused
    //  where they stand, and let go again. A START of a frozen one is a
    //  thaw (s_thaw_instead).
    { "SANDBOX_FREEZE", "freeze",
      "state = 'running' AND op IS NULL",
      "running", "freezing", "|freezing|frozen|" },
    { "SANDBOX_THAW", "thaw",
      "state IN ('frozen','freezing')",
      "frozen", "thawing", "|thawing|running|starting|creating|" },
    { "SANDBOX_DESTROY", "destroy",
      "state <> 'destroying'",
      "any state but destroying", "destroying", "|destroying|" },
};

//  The agent named by "agent" (id or name), or a 400/404/500 reply. 1 found.
static int s_find (self_t *self, const ah_msg_t *msg, const char *field, row_t *row)
{
    const char *key = ah_msg_str (msg, field);
    if (!key || !*key || strlen (key) > AH_NAME_MAX) {
        ah_actor_reply_error (self->actor, msg, 400,
                              "%s: missing or not a string (want an agent id or name)", field);
        return 0;
    }
    const char *tenant = ah_msg_str (msg, "tenant");
    int rc = ah_lc_lookup_in (self, key, tenant, row);
    if (rc == 1)
        return 1;
    char why [160];
    if (rc == -2)
        ah_actor_reply_error (self->actor, msg, 409, "%s", ah_store_agent_ambiguous (key, why, sizeof why));
    else
        ah_actor_reply_error (self->actor, msg, rc == 0 ? 404 : 500,
                              rc == 0 ? "no agent '%s'" : "cannot read agent '%s'", key);
    return 0;
}

static void s_reply_state (self_t *self, const ah_msg_t *msg, int status, const row_t *row, const char *state)
{
    ah_msg_t *reply = ah_msg_reply_ok (msg);
    ah_msg_set_int (reply, "status", status);
    ah_msg_set_str (reply, "agent_id", row->id);
    ah_msg_set_str (reply, "name", row->name);
    ah_msg_set_str (reply, "state", state);
    ah_actor_reply (self->actor, msg, reply);
}

static void s_reply_conflict (self_t *self, const ah_msg_t *msg, const row_t *row,
                              const char *verb, const char *needs)
{
    char text [ERROR_MAX_LEN + 256];
    if (streq (row->state, "error") && streq (row->op, "destroy"))
        snprintf (text, sizeof text, "agent '%s' failed to be destroyed; only destroy can continue",
                  row->name);
    else
    if (streq (row->state, "error") && streq (row->op, "create") && streq (verb, "stop"))
        snprintf (text, sizeof text, "agent '%s' has no sandbox to stop (%s)", row->name, row->error);
    else
        snprintf (text, sizeof text, "agent '%s' is %s; %s needs %s", row->name, row->state, verb, needs);
    ah_msg_t *reply = ah_msg_reply_error (msg, 409, "%s", text);
    ah_msg_set_str (reply, "agent_id", row->id);
    ah_msg_set_str (reply, "state", row->state);
    ah_actor_reply (self->actor, msg, reply);
}

//  The tombstone says a destroy is owed, whatever happens next. 1 won,
//  0 lost, -1 error.
static int s_destroy_row (self_t *self, const row_t *row, const transition_t *tr)
{
    int won = ah_store_begin (self->store) == 0
            ? ah_lc_update (self, row->id, tr->guard, tr->to, tr->verb, NULL) : -1;
    if (won == 1 && ah_lc_run (self, "INSERT OR REPLACE INTO tombstones (agent_id, at)"
                                     " VALUES (:id, strftime('%s','now') * 1000)", row->id))
        won = -1;
    if (won >= 0 && ah_store_commit (self->store) == 0) {
        if (won == 1)
            ah_lc_publish (self, row->id, tr->to, tr->verb, NULL);
        return won;
    }
    ah_store_rollback (self->store);
    return -1;
}

static const transition_t *s_transition (const char *type)
{
    for (size_t i = 0; i < sizeof s_transitions / sizeof s_transitions [0]; i++)
        if (streq (type, s_transitions [i].type))
            return &s_transitions [i];
    return NULL;
}

void ah_lc_on_transition (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const transition_t *tr = s_transition (ah_msg_type (msg));
    row_t row;
    if (!tr || s_find (self, msg, "agent", &row) != 1)
        return;
    //  Any use thaws: a START (a wake, from every path that wakes a
    //  sleeping agent) of a frozen sandbox lets its processes go on
    //  instead of starting anything.
    if (streq (tr->verb, "start") && (streq (row.state, "frozen") || streq (row.state, "freezing")))
        tr = s_transition ("SANDBOX_THAW");
    if (streq (tr->verb, "freeze") && streq (row.state, "running") && zhashx_lookup (self->activity, row.id)) {
        //  Used since the sleeper judged it (its use not yet written):
        //  a freeze now would pause a use in flight.
        ah_actor_reply_error (self->actor, msg, 409, "agent '%s' was used just now; not frozen", row.name);
        return;
    }
    if (streq (tr->verb, "freeze") && !self->driver->freeze) {
        ah_msg_t *reply = ah_msg_reply_error (msg, 409, "the %s driver cannot freeze a sandbox (it has "
                                              "no pause): agent '%s' sleeps instead", self->driver->name,
                                              row.name);
        ah_msg_set_str (reply, "agent_id", row.id);
        ah_msg_set_str (reply, "state", row.state);
        ah_actor_reply (self->actor, msg, reply);
        return;
    }
    char unreachable [ERROR_MAX_LEN + 1];
    if (!streq (tr->verb, "destroy")
    &&  ah_lc_unreachable (self, row.id, unreachable, sizeof unreachable)) {
        ah_actor_reply_error (self->actor, msg, 409, "agent '%s' is unreachable (%s); %s waits "
                              "until its host answers again", row.name, unreachable, tr->verb);
        return;
    }
    char mark [24];
    snprintf (mark, sizeof mark, "|%s|", row.state);
    if (*tr->already && strstr (tr->already, mark)) {
        //  Already there or on the way: waiters can just wait.
        s_reply_state (self, msg, 200, &row, row.state);
        return;
    }
    //  Starting takes a running place: limits.lua decides (running caps).
    //  So does a rebuild of a sandbox that is not running: it ends running.
    if (streq (tr->verb, "start") || (streq (tr->verb, "rebuild") && !streq (row.state, "running"))) {
        desired_t asked = { 0 }, d = { .cpus = row.cpus, .memory_mb = row.memory_mb,
                                       .idle_minutes = row.idle_minutes };
        snprintf (d.image, sizeof d.image, "%s", row.image);
        char *why = NULL;
        int admit = ah_lc_admit (self, "start", row.name, row.tenant, row.id, &asked, &d, &why);
        if (admit) {
            ah_actor_reply_error (self->actor, msg, admit > 0 ? 422 : 500, "%s", why ? why : "refused");
            free (why);
            return;
        }
    }
    const char *to = tr->to;
    bool had_home = ah_lc_had_home (&row);
    int won;
    if (streq (tr->verb, "start") && streq (row.state, "error") && streq (row.op, "create")) {
        //  There is no sandbox to start: a retry creates it first.
        to = "creating";
        won = ah_lc_move (self, row.id, "state = 'error' AND op = 'create'", to, "create", NULL);
    }
    else
    if (streq (tr->verb, "destroy"))
        won = s_destroy_row (self, &row, tr);
    else
        won = ah_lc_move (self, row.id, tr->guard, to, tr->verb, NULL);

    if (won < 0) {
        ah_actor_reply_error (self->actor, msg, 500, "the database refused the change (see the server log)");
        return;
    }
    if (won == 0) {
        //  Someone else's change came first: name where the row is now.
        if (ah_lc_lookup (self, row.id, &row) == 1)
            s_reply_conflict (self, msg, &row, tr->verb, tr->needs);
        else
            ah_actor_reply_error (self->actor, msg, 404, "the agent is gone");
        return;
    }
    const char *reason = ah_msg_str (msg, "reason");
    ah_info (AREA, "%s (%s): %s -> %s%s%s", row.name, row.id, row.state, to,
             reason ? ", reason: " : "", reason ? reason : "");
    s_reply_state (self, msg, 202, &row, to);
    ah_lc_hello_cancel (self, row.id);
    if (ah_lc_lookup (self, row.id, &row) == 1) {
        row.had_home = had_home;
        ah_lc_launch_for_row (self, &row);
    }
}

int ah_lc_insert (self_t *self, const char *id, const char *name, const char *tenant, const desired_t *d,
                  const char *harness, const char *pool)
{
    int64_t now = ah_store_now_ms ();
    bool ok = ah_store_begin (self->store) == 0;
    sqlite3_stmt *st = ok ? ah_store_prepare (self->store,
        "INSERT INTO agents (id, name, tenant, image, cpus, memory_mb, idle_minutes, created_at, runtime,"
        " idle_default, harness, pool) VALUES (:id, :name, :tenant, :image, :cpus, :mem, :idle, :now, :runtime,"
        " :follows, :harness, :pool)") : NULL;
    //  An agent whose create named no idle_minutes and that got the
    //  default follows it (PUT /api/v1/policy moves it, ah_lc_idle_defaults).
    bool follows = !d->has_idle
                && d->idle_minutes == ah_policy_value (self->store, self->config, "idle_minutes");
    ok = st && !ah_store_bind_text (st, ":id", id) && !ah_store_bind_text (st, ":name", name)
        && !ah_store_bind_int64 (st, ":follows", follows)
        && !ah_store_bind_text (st, ":harness", harness) && !ah_store_bind_text (st, ":pool", pool)
        && !ah_store_bind_text (st, ":runtime", *d->runtime ? d->runtime : NULL)
        && !ah_store_bind_text (st, ":tenant", tenant) && !ah_store_bind_text (st, ":image", d->image)
        && !ah_store_bind_double (st, ":cpus", d->cpus) && !ah_store_bind_int64 (st, ":mem", d->memory_mb)
        && !ah_store_bind_double (st, ":idle", d->idle_minutes) && !ah_store_bind_int64 (st, ":now", now)
        && ah_store_step (self->store, st) == SQLITE_DONE;
    if (st)
        sqlite3_reset (st);
    st = ok ? ah_store_prepare (self->store,
        "INSERT INTO sandboxes (agent_id, state, op, op_started_at, image, cpus, memory_mb, updated_at, runtime,"
        " cause) VALUES (:id, 'creating', 'create', :now, :image, :cpus, :mem, :now, :runtime, :cause)") : NULL;
    ok = st && !ah_store_bind_text (st, ":id", id) && !ah_store_bind_int64 (st, ":now", now)
        && !ah_store_bind_text (st, ":runtime", *d->runtime ? d->runtime : NULL)
        && !ah_store_bind_text (st, ":image", d->image) && !ah_store_bind_double (st, ":cpus", d->cpus)
        && !ah_store_bind_int64 (st, ":mem", d->memory_mb)
        && !ah_store_bind_text (st, ":cause", self->cause [0] ? self->cause : NULL)
        && ah_store_step (self->store, st) == SQLITE_DONE;
    if (st)
        sqlite3_reset (st);
    if (!ok || ah_store_commit (self->store)) {
        ah_store_rollback (self->store);
        return -1;
    }
    return 0;
}

void ah_lc_on_create (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *name = ah_msg_str (msg, "name");
    const char *tenant = "default";
    if (ah_lc_ident (self, msg, AH_IDENT_AGENT_NAME, name))
        return;
    if (ah_lc_opt_str (msg, "tenant", &tenant) < 0) {
        ah_actor_reply_error (self->actor, msg, 400, "tenant: want a string");
        return;
    }
    desired_t asked, d;
    if (ah_lc_ident (self, msg, AH_IDENT_TENANT, tenant) || ah_lc_desired (self, msg, &asked))
        return;
    //  No runtime and no image named: the catalog's first entry.
    if (!asked.has_runtime && !asked.has_image && ah_catalog_default (self->catalog))
        ah_lc_runtime_apply (&asked, ah_catalog_default (self->catalog));
    memset (&d, 0, sizeof d);
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT count(*) FROM agents WHERE name = :name AND tenant = :tenant");
    int taken = -1;
    if (st && !ah_store_bind_text (st, ":name", name) && !ah_store_bind_text (st, ":tenant", tenant)
    &&  ah_store_step (self->store, st) == SQLITE_ROW)
        taken = sqlite3_column_int (st, 0) > 0;
    if (st)
        sqlite3_reset (st);
    if (taken > 0) {
        ah_actor_reply_error (self->actor, msg, 409, "an agent named '%s' exists already in tenant '%s'",
                              name, tenant);
        return;
    }
    if (taken < 0) {
        ah_actor_reply_error (self->actor, msg, 500, "cannot read the agents table (see the server log)");
        return;
    }
    char *why = NULL;
    int admit = ah_lc_admit (self, "create", name, tenant, NULL, &asked, &d, &why);
    if (admit) {
        ah_actor_reply_error (self->actor, msg, admit > 0 ? 422 : 500, "%s", why ? why : "refused");
        free (why);
        return;
    }
    snprintf (d.runtime, sizeof d.runtime, "%s", asked.runtime);
    d.has_idle = asked.has_idle;
    //  A warm sandbox of this runtime and shape, ready: the agent is
    //  running at once, or once thawed (docs/lifecycle.md "Warm pools").
    row_t row;
    int took = ah_lc_pool_take (self, name, tenant, &d, ah_msg_str (msg, "harness"), &row);
    if (took < 0)
        ah_warn (AREA, "the warm pool could not be read or taken from; a cold create instead");
    if (took == 1) {
        ah_msg_t *reply = ah_msg_reply_ok (msg);
        ah_msg_set_int (reply, "status", 201);
        ah_msg_set_str (reply, "agent_id", row.id);
        ah_msg_set_str (reply, "name", name);
        ah_msg_set_str (reply, "state", "running");
        ah_msg_set_str (reply, "runtime", d.runtime);
        ah_msg_set_bool (reply, "warm", true);
        //  Taken frozen: answered once the thaw is done (an unpause), so
        //  that the agent is running when the caller reads it.
        if (streq (row.state, "running"))
            ah_lc_publish (self, row.id, "running", NULL, NULL);
        if (!streq (row.state, "thawing") || !ah_lc_pool_hold (self, row.id, msg, &reply))
            ah_actor_reply (self->actor, msg, reply);
        ah_lc_changed (self, row.id, ah_store_now_ms (), d.idle_minutes);
        ah_lc_record (self, row.id, "pool.take", d.runtime, true, NULL);
        //  The pool refills in the background: the fill timer, once the
        //  takes pause (lifecycle_pool.c).
        return;
    }
    char id [AH_AGENT_ID_LEN + 1];
    if (ah_token_id (id, sizeof id, AH_AGENT_ID_LEN)) {
        ah_actor_reply_error (self->actor, msg, 500, "no entropy for an agent id");
        return;
    }
    if (ah_lc_insert (self, id, name, tenant, &d, ah_msg_str (msg, "harness"), NULL)) {
        ah_actor_reply_error (self->actor, msg, 500, "cannot insert the agent (see the server log)");
        return;
    }
    ah_info (AREA, "created agent '%s' (%s), runtime %s, image %s, %g cpus, %lld MB", name, id,
             *d.runtime ? d.runtime : "(none)", d.image, d.cpus, (long long) d.memory_mb);
    ah_msg_t *reply = ah_msg_reply_ok (msg);
    ah_msg_set_int (reply, "status", 201);
    ah_msg_set_str (reply, "agent_id", id);
    ah_msg_set_str (reply, "name", name);
    ah_msg_set_str (reply, "state", "creating");
    if (*d.runtime)
        ah_msg_set_str (reply, "runtime", d.runtime);
    ah_actor_reply (self->actor, msg, reply);
    ah_lc_publish (self, id, "creating", "create", NULL);
    if (ah_lc_lookup (self, id, &row) == 1)
        ah_lc_launch (self, &row, "create", false);
}

int ah_lc_destroy (self_t *self, const row_t *row_in)
{
    row_t row = *row_in;
    int won = s_destroy_row (self, &row, s_transition ("SANDBOX_DESTROY"));
    if (won == 1 && ah_lc_lookup (self, row.id, &row) == 1)
        ah_lc_launch_for_row (self, &row);
    return won;
}

void ah_lc_on_update (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    row_t row;
    if (s_find (self, msg, "agent", &row) != 1)
        return;
    desired_t asked, d = { .cpus = row.cpus, .memory_mb = row.memory_mb, .idle_minutes = row.idle_minutes };
    snprintf (d.image, sizeof d.image, "%s", row.image);
    if (ah_lc_desired (self, msg, &asked))
        return;
    if (ah_msg_has (msg, "tenant")) {
        ah_actor_reply_error (self->actor, msg, 400, "tenant: an agent cannot change tenant");
        return;
    }
    if (streq (row.state, "destroying")) {
        s_reply_conflict (self, msg, &row, "update", "any state but destroying");
        return;
    }
    char *why = NULL;
    int admit = ah_lc_admit (self, "update", row.name, row.tenant, row.id, &asked, &d, &why);
    if (admit) {
        ah_actor_reply_error (self->actor, msg, admit > 0 ? 422 : 500, "%s", why ? why : "refused");
        free (why);
        return;
    }
    //  idle_minutes null: the default idle timeout in force, followed
    //  from now on (ah_lc_idle_defaults).
    bool idle_follow = ah_msg_has (msg, "idle_minutes") && ah_msg_is_nil (msg, "idle_minutes");
    if (idle_follow)
        d.idle_minutes = ah_policy_value (self->store, self->config, "idle_minutes");
    //  Desired values change at once (idle_minutes takes effect at once);
    //  the sandbox keeps what it was built from until the next rebuild.
    bool ok = ah_store_begin (self->store) == 0;
    sqlite3_stmt *st = ok ? ah_store_prepare (self->store,
        "UPDATE agents SET image = :image, cpus = :cpus, memory_mb = :mem, idle_minutes = :idle,"
        " runtime = CASE WHEN :named THEN :runtime ELSE runtime END,"
        " harness = CASE WHEN :harness_named THEN :harness ELSE harness END,"
        " idle_default = CASE WHEN :idle_named THEN 0 WHEN :idle_follow THEN 1 ELSE idle_default END"
        " WHERE id = :id") : NULL;
    //  A runtime named sets it; an image named leaves the catalog; an
    //  idle_minutes named is the agent's own from then on.
    //  A harness named (an object, or nil: the runtime's again) is the
    //  override from then on; the process running keeps its own.
    ok = st && !ah_store_bind_int64 (st, ":named", asked.has_runtime || asked.has_image)
        && !ah_store_bind_int64 (st, ":harness_named", ah_msg_has (msg, "harness"))
        && !ah_store_bind_text (st, ":harness", ah_msg_str (msg, "harness"))
        && !ah_store_bind_int64 (st, ":idle_named", asked.has_idle)
        && !ah_store_bind_int64 (st, ":idle_follow", idle_follow)
        && !ah_store_bind_text (st, ":runtime", asked.has_runtime ? asked.runtime : NULL)
        && !ah_store_bind_text (st, ":image", d.image) && !ah_store_bind_double (st, ":cpus", d.cpus)
        && !ah_store_bind_int64 (st, ":mem", d.memory_mb) && !ah_store_bind_double (st, ":idle", d.idle_minutes)
        && !ah_store_bind_text (st, ":id", row.id) && ah_store_step (self->store, st) == SQLITE_DONE;
    if (st)
        sqlite3_reset (st);
    ok = ok && ah_lc_run (self,
        "UPDATE sandboxes SET needs_rebuild = (SELECT a.image <> sandboxes.image OR a.cpus <> sandboxes.cpus"
        "  OR a.memory_mb <> sandboxes.memory_mb OR a.runtime IS NOT sandboxes.runtime"
        "  FROM agents a WHERE a.id = sandboxes.agent_id)"
        " WHERE agent_id = :id", row.id) == 0;
    if (!ok || ah_store_commit (self->store)) {
        ah_store_rollback (self->store);
        ah_actor_reply_error (self->actor, msg, 500, "cannot update the agent (see the server log)");
        return;
    }
    ah_lc_changed (self, row.id, -1, d.idle_minutes);  //  idle_minutes may have moved its sleep
    ah_lc_lookup (self, row.id, &row);
    ah_msg_t *reply = ah_msg_reply_ok (msg);
    ah_msg_set_int (reply, "status", 200);
    ah_msg_set_str (reply, "agent_id", row.id);
    ah_msg_set_str (reply, "name", row.name);
    ah_msg_set_str (reply, "state", row.state);
    ah_msg_set_str (reply, "image", row.image);
    ah_msg_set_str (reply, "runtime", *row.runtime ? row.runtime : NULL);
    ah_msg_set_double (reply, "cpus", row.cpus);
    ah_msg_set_int (reply, "memory_mb", row.memory_mb);
    ah_msg_set_double (reply, "idle_minutes", row.idle_minutes);
    ah_msg_set_bool (reply, "needs_rebuild", row.needs_rebuild);
    ah_actor_reply (self->actor, msg, reply);
}
