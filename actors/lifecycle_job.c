/*  actors/lifecycle_job.c: the lifecycle actor's driver calls (see
    lifecycle_int.h). Each is a job of the actor's workers
    (ah_actor_job): the worker owns its job_t until it has put its
    outcome (JOB_DONE) in it; back in the actor's thread the job is
    freed and the row moved on. Also the hello deadlines:
    a started sandbox whose sandboxd does not say hello in time goes to
    error and is stopped.                                              */
#include "actors/lifecycle_int.h"
#include "common/log.h"
#include "common/str.h"

#include <string.h>

// --------------------------------------------------------------------------
//  The worker thread

static void s_work (void *arg)
{
    job_t *job = arg;
    char *err = NULL;
    int rc = -1;
    //  The runtime's env vars as "NAME=value" (the catalog outlives the job).
    const ah_runtime_t *rt = job->runtime;
    size_t n_env = rt ? rt->env_count : 0;
    char **env = calloc (n_env + 1, sizeof (char *));
    for (size_t i = 0; env && i < n_env; i++)
        env [i] = zsys_sprintf ("%s=%s", rt->env [i].name, rt->env [i].value);
    ah_sandbox_spec_t spec = { job->agent_id, job->image, job->cpus, job->memory_mb, job->pids_limit,
                               (const char *const *) env, env ? n_env : 0, rt ? rt->needs_network : true };
    ah_sandbox_status_t status = { .exit_code = -1 };
    ah_driver_t *d = job->driver;
    if (job->look_first) {
        //  The driver would make a missing home again, empty, without a
        //  word: a home found gone here is the outcome's to record.
        char *why = NULL;
        if (d->inspect (d, job->agent_id, &status, &why) || !status.home_gone)
            status = (ah_sandbox_status_t) { .exit_code = -1 };
        free (why);
    }
    char image_id [sizeof status.image_id] = "";
    if (streq (job->op, "create")) {
        rc = d->create (d, &spec, &err);
        ah_sandbox_status_t made = { .exit_code = -1 };
        char *why = NULL;
        if (rc == 0 && job->read_image_id && d->inspect (d, job->agent_id, &made, &why) == 0)
            snprintf (image_id, sizeof image_id, "%s", made.image_id);
        free (why);
    }
    else if (streq (job->op, "start")) {
        //  A container expired by sandbox.container_ttl is made again
        //  from the image first (its home is still there).
        ah_boot_t boot = { job->agent_id, job->token, job->tunnel_port, job->briefing };
        rc = job->recreate ? d->rebuild (d, &spec, &err) : 0;
        if (rc == 0)
            rc = d->start (d, &boot, &err);
    }
    else if (streq (job->op, "expire")) {
        rc = d->remove_container ? d->remove_container (d, job->agent_id, &err) : -1;
        if (!d->remove_container)
            err = strdup ("the driver cannot remove a container alone");
    }
    else if (streq (job->op, "expire-home"))
        rc = d->destroy (d, job->agent_id, &err);
    else if (streq (job->op, "stop"))
        rc = d->stop (d, job->agent_id, &err);
    else if (streq (job->op, "freeze") || streq (job->op, "thaw")) {
        int (*fn) (ah_driver_t *, const char *, char **) = streq (job->op, "freeze") ? d->freeze : d->thaw;
        rc = fn ? fn (d, job->agent_id, &err) : -1;
        if (!fn)
            err = ah_strf ("the %s driver cannot %s a sandbox", d->name, job->op);
    }
    else if (streq (job->op, "rebuild")) {
        //  From running: stop first. A sandbox that is gone or stopped
        //  already is no reason not to rebuild, so its error is only logged.
        if (d->stop (d, job->agent_id, &err)) {
            ah_info (AREA, "%s: stop before rebuild: %s", job->agent_id, err ? err : "failed");
            free (err);
            err = NULL;
        }
        rc = d->rebuild (d, &spec, &err);
    }
    else if (streq (job->op, "destroy"))
        rc = d->destroy (d, job->agent_id, &err);
    else if (streq (job->op, "reader")) {
        ah_boot_t boot = { job->agent_id, job->token, job->tunnel_port, NULL };
        rc = d->reader_start ? d->reader_start (d, &boot, &err) : -1;
        if (!d->reader_start)
            err = strdup ("the driver has no readers");
    }
    else if (streq (job->op, "reader-stop"))
        rc = d->reader_stop ? d->reader_stop (d, job->agent_id, &err) : 0;
    int64_t looked_at = ah_store_now_ms ();     //  an inspect says how things were then
    if (streq (job->op, "inspect"))
        rc = d->inspect (d, job->agent_id, &status, &err);
    //  A start that failed: is it because the home's files are gone? (A
    //  directory removed behind the driver's back makes no event.)
    if (rc && streq (job->op, "start")) {
        char *why = NULL;
        if (d->inspect (d, job->agent_id, &status, &why) || !status.home_gone)
            memset (&status, 0, sizeof status);
        free (why);
    }
    //  A call that makes a container from a runtime's image (create,
    //  rebuild, the start of an expired container) failed: is the image
    //  gone (removed behind the builder's back)? Then the builder makes
    //  it again and the call is tried once more (s_outcome). A start of
    //  an existing container needs no image: the engine keeps the one
    //  the container holds.
    bool makes = streq (job->op, "create") || streq (job->op, "rebuild")
              || (streq (job->op, "start") && job->recreate);
    //  Either the driver's own words say so (the docker driver's "image
    //  'X' not found", relayed as is by hostd: the image may be back
    //  already, made by the builder after an engine event, and the call
    //  is still worth a second try), or the driver, asked, says so.
    bool image_gone = false;
    if (rc && makes && rt && streq (job->image, rt->image)) {
        char *said = zsys_sprintf ("image '%s' not found", job->image);
        image_gone = said && err && strstr (err, said);
        zstr_free (&said);
        char *why = NULL;
        bool exists = true;
        if (!image_gone && d->image_exists)
            image_gone = d->image_exists (d, job->image, &exists, &why) == 0 && !exists;
        free (why);
    }

    for (size_t i = 0; env && i < n_env; i++)
        zstr_free (&env [i]);
    free (env);
    ah_msg_t *done = ah_msg_new ("JOB_DONE");
    ah_msg_set_str (done, "agent_id", job->agent_id);
    ah_msg_set_str (done, "op", job->op);
    ah_msg_set_bool (done, "ok", rc == 0);
    if (rc)
        ah_msg_set_str (done, "error", err ? err : "the driver failed without saying why");
    ah_msg_set_bool (done, "exists", status.exists);
    ah_msg_set_bool (done, "running", status.running);
    ah_msg_set_bool (done, "paused", status.paused);
    ah_msg_set_int (done, "exit_code", status.exit_code);
    status.detail [sizeof status.detail - 1] = 0;
    ah_msg_set_str (done, "detail", status.detail);
    ah_msg_set_bool (done, "home_gone", status.home_gone);
    if (image_gone)
        ah_msg_set_bool (done, "image_gone", true);
    if (*image_id)
        ah_msg_set_str (done, "image_id", image_id);
    ah_msg_set_int (done, "at_ms", looked_at);
    status.reason [sizeof status.reason - 1] = 0;
    if (status.reason [0])
        ah_msg_set_str (done, "reason", status.reason);
    free (err);
    job->done = done;
}

static void s_job_free (job_t **job_p)
{
    if (*job_p) {
        explicit_bzero ((*job_p)->token, sizeof (*job_p)->token);
        free ((*job_p)->briefing);
        ah_msg_destroy (&(*job_p)->done);
        free (*job_p);
        *job_p = NULL;
    }
}

// --------------------------------------------------------------------------
//  Tracks: what the actor holds per agent

static track_t *s_track (self_t *self, const char *agent_id)
{
    track_t *track = zhashx_lookup (self->tracks, agent_id);
    if (!track) {
        track = calloc (1, sizeof *track);
        if (!track)
            return NULL;
        snprintf (track->agent_id, sizeof track->agent_id, "%s", agent_id);
        zhashx_insert (self->tracks, agent_id, track);
    }
    return track;
}

bool ah_lc_busy (self_t *self, const char *agent_id)
{
    track_t *track = zhashx_lookup (self->tracks, agent_id);
    return track && track->job;
}

void ah_lc_forget (self_t *self, const char *agent_id)
{
    track_t *track = zhashx_lookup (self->tracks, agent_id);
    if (track && !track->job && !track->preparing [0]) {
        ah_actor_timer_end (self->actor, track->hello_timer);
        zhashx_delete (self->tracks, agent_id);        //  its destructor frees the track
    }
}

void ah_lc_hello_cancel (self_t *self, const char *agent_id)
{
    track_t *track = zhashx_lookup (self->tracks, agent_id);
    if (track) {
        ah_actor_timer_end (self->actor, track->hello_timer);
        track->hello_timer = 0;
    }
}

//  The hello deadline passed.
static void s_on_hello_late (void *self_, void *arg)
{
    self_t *self = self_;
    track_t *track = arg;
    track->hello_timer = 0;
    char id [ID_SIZE], why [96];
    snprintf (id, sizeof id, "%s", track->agent_id);
    snprintf (why, sizeof why, "sandboxd did not connect within %d s", (self->hello_timeout_ms + 999) / 1000);
    if (ah_lc_move (self, id, "state = 'starting'", "error", "start", why) == 1) {
        //  Leave nothing running that nobody can reach.
        row_t row;
        if (ah_lc_lookup (self, id, &row) == 1)
            ah_lc_launch (self, &row, "stop", true);
    }
}

void ah_lc_hello_wait (self_t *self, const char *agent_id)
{
    track_t *track = s_track (self, agent_id);
    if (!track)
        return;
    ah_actor_timer_end (self->actor, track->hello_timer);
    track->hello_timer = ah_actor_timer (self->actor, self->hello_timeout_ms, 0, s_on_hello_late, track);
}

// --------------------------------------------------------------------------
//  Launching

// --------------------------------------------------------------------------
//  Runtimes: the image made present before a create, rebuild or start

//  What the sandbox is waiting for, on the row and to every subscriber
//  (the event stream shows it; GET /agents/{agent} has it as "progress").
static void s_progress (self_t *self, const char *agent_id, const char *text)
{
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "UPDATE sandboxes SET progress = :text WHERE agent_id = :id");
    if (st && !ah_store_bind_text (st, ":text", text) && !ah_store_bind_text (st, ":id", agent_id))
        ah_store_step (self->store, st);
    if (st)
        sqlite3_reset (st);
    row_t row;
    if (!text || ah_lc_lookup (self, agent_id, &row) != 1)
        return;
    for (const char *to = zlist_first (self->subscribers); to; to = zlist_next (self->subscribers)) {
        ah_msg_t *event = ah_msg_new ("SANDBOX_STATE");
        ah_msg_set_str (event, "agent_id", agent_id);
        ah_msg_set_str (event, "state", row.state);
        ah_msg_set_str (event, "op", *row.op ? row.op : NULL);
        ah_msg_set_str (event, "progress", text);
        ah_actor_send (self->actor, to, &event);
    }
}

static bool s_preparable (const row_t *row)
{
    return streq (row->state, "creating") || streq (row->state, "rebuilding") || streq (row->state, "starting");
}

void ah_lc_on_runtime_ready (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *alias = ah_msg_str (msg, "runtime");
    if (!alias)
        return;
    bool ok = ah_msg_bool (msg, "ok", false);
    const char *briefing = ah_msg_str (msg, "briefing");
    if (ok && briefing)
        zhashx_update (self->briefings, alias, strdup (briefing));
    //  Every agent waiting for this runtime goes on (or to error).
    zlist_t *ids = zlist_new ();
    zlist_autofree (ids);
    for (track_t *t = zhashx_first (self->tracks); t; t = zhashx_next (self->tracks))
        if (streq (t->preparing, alias))
            zlist_append (ids, t->agent_id);
    for (char *id = zlist_first (ids); id; id = zlist_next (ids)) {
        track_t *track = zhashx_lookup (self->tracks, id);
        if (!track)
            continue;
        track->preparing [0] = 0;
        row_t row;
        if (ah_lc_lookup (self, id, &row) != 1 || !s_preparable (&row)) {
            ah_lc_forget (self, id);
            continue;
        }
        s_progress (self, id, NULL);
        if (ok) {
            snprintf (track->prepared, sizeof track->prepared, "%s", alias);
            ah_lc_launch_for_row (self, &row);
        }
        else {
            char why [ERROR_MAX_LEN];
            snprintf (why, sizeof why, "preparing the sandbox: runtime %s: %s", alias,
                      ah_msg_str (msg, "error") ? ah_msg_str (msg, "error") : "the image could not be made");
            const char *op = ah_lc_op_for_state (row.state);
            ah_lc_move (self, id, "state IN ('creating','rebuilding','starting')", "error", op, why);
            ah_lc_forget (self, id);
        }
    }
    zlist_destroy (&ids);
}

void ah_lc_on_runtime_progress (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *alias = ah_msg_str (msg, "runtime");
    const char *text = ah_msg_str (msg, "text");
    if (!alias || !text)
        return;
    char line [300];
    snprintf (line, sizeof line, "Preparing the sandbox\u2026 %s", text);
    zlist_t *ids = zlist_new ();
    zlist_autofree (ids);
    for (track_t *t = zhashx_first (self->tracks); t; t = zhashx_next (self->tracks))
        if (streq (t->preparing, alias))
            zlist_append (ids, t->agent_id);
    for (char *id = zlist_first (ids); id; id = zlist_next (ids))
        s_progress (self, id, line);
    zlist_destroy (&ids);
}

//  RUNTIME_ENSURE for the runtime; the agent waits for RUNTIME_READY.
//  gone: the driver met the image missing (the builder makes it again
//  whatever it believed).
static void s_ensure (self_t *self, track_t *track, const row_t *row, const ah_runtime_t *rt, bool gone)
{
    snprintf (track->preparing, sizeof track->preparing, "%s", rt->alias);
    ah_msg_t *msg = ah_msg_new ("RUNTIME_ENSURE");
    ah_msg_set_str (msg, "runtime", rt->alias);
    ah_msg_set_str (msg, "agent_id", row->id);
    if (gone)
        ah_msg_set_bool (msg, "gone", true);
    ah_actor_send (self->actor, "builder", &msg);
}

//  The image first (RUNTIME_ENSURE, answered by RUNTIME_READY), unless
//  the builder said it is there since the last launch. 1: waiting.
static int s_prepare (self_t *self, track_t *track, const row_t *row, const ah_runtime_t *rt)
{
    if (track->preparing [0])
        return 1;
    if (streq (track->prepared, rt->alias)) {
        track->prepared [0] = 0;
        return 0;
    }
    s_ensure (self, track, row, rt, false);
    return 1;
}

//  A create, start or rebuild failed because its runtime's image is gone
//  (JOB_DONE image_gone): the builder makes it again and the agent, still
//  creating, starting or rebuilding, waits for it (preparing, with the
//  build's progress) and then goes on; once per operation, so an image
//  that keeps going ends in error. true: waiting.
static bool s_image_gone (self_t *self, const row_t *row, const job_t *job)
{
    track_t *track = s_track (self, row->id);
    if (!track || !job->runtime || !self->ensure_images || track->image_retried || track->preparing [0])
        return false;
    track->image_retried = true;
    ah_warn (AREA, "%s: %s: the image %s of runtime %s is gone; asking the builder to make it again",
             row->id, job->op, job->image, job->runtime->alias);
    s_ensure (self, track, row, job->runtime, true);
    return true;
}

static void s_job_done (void *self_, void *arg, bool ran);

int ah_lc_launch (self_t *self, const row_t *row, const char *op, bool cleanup)
{
    track_t *track = s_track (self, row->id);
    if (!track)
        return -1;
    if (row->had_home)
        track->had_home = true;
    if (track->job)
        return 0;
    const ah_runtime_t *rt = *row->runtime ? ah_catalog_find (self->catalog, row->runtime) : NULL;
    bool makes = streq (op, "create") || streq (op, "rebuild");
    if (*row->runtime && !rt && makes) {
        char why [200];
        snprintf (why, sizeof why, "the runtime '%s' is no longer in the catalog: give the agent another "
                  "runtime or an image", row->runtime);
        ah_lc_move (self, row->id, "1", "error", op, why);
        return -1;
    }
    if (rt && self->ensure_images && !cleanup && (makes || streq (op, "start"))
    &&  s_prepare (self, track, row, rt))
        return 0;
    job_t *job = calloc (1, sizeof *job);
    if (!job)
        return -1;
    job->runtime = rt;
    if (rt && streq (op, "start") && zhashx_lookup (self->briefings, rt->alias))
        job->briefing = strdup (zhashx_lookup (self->briefings, rt->alias));
    job->driver = self->driver;
    snprintf (job->op, sizeof job->op, "%s", op);
    snprintf (job->agent_id, sizeof job->agent_id, "%s", row->id);
    snprintf (job->image, sizeof job->image, "%s", row->image);
    job->cpus = row->cpus;
    job->memory_mb = row->memory_mb;
    job->pids_limit = self->config->pids_limit;
    job->tunnel_port = self->tunnel_port;
    job->cleanup = cleanup;
    job->recreate = streq (op, "start") && row->container_removed;
    job->look_first = track->had_home && (streq (op, "create") || streq (op, "rebuild") || job->recreate);
    job->read_image_id = streq (op, "create") && !*row->tenant;
    track->had_home = false;
    const char *why = NULL;
    if (streq (op, "start")) {
        //  A fresh boot token per start; only its hash is kept.
        char hash [AH_TOKEN_HEX];
        if (ah_token_new (job->token))
            why = "no entropy for a boot token";
        else {
            ah_token_hash (job->token, hash);
            sqlite3_stmt *st = ah_store_prepare (self->store,
                "UPDATE sandboxes SET boot_token_hash = :hash WHERE agent_id = :id");
            if (!st || ah_store_bind_text (st, ":hash", hash) || ah_store_bind_text (st, ":id", row->id)
                    || ah_store_step (self->store, st) != SQLITE_DONE)
                why = "cannot store the boot token";
            if (st)
                sqlite3_reset (st);
        }
        ah_actor_timer_end (self->actor, track->hello_timer);
        track->hello_timer = 0;
    }
    if (streq (op, "reader")) {
        //  A reader token: its hash goes to the tunnel alone (never the
        //  row's boot_token_hash), before the reader can dial.
        char hash [AH_TOKEN_HEX];
        if (ah_token_new (job->token))
            why = "no entropy for a reader token";
        else {
            ah_token_hash (job->token, hash);
            ah_msg_t *allow = ah_msg_new ("READER_ALLOW");
            ah_msg_set_str (allow, "agent_id", row->id);
            ah_msg_set_str (allow, "hash", hash);
            if (ah_actor_send (self->actor, "tunnel", &allow))
                why = "cannot reach the tunnel";
        }
    }
    if (!why && ah_actor_job (self->actor, s_work, s_job_done, job))
        why = "cannot start a worker thread";
    if (why) {
        ah_error (AREA, "%s: %s: %s", row->id, op, why);
        s_job_free (&job);
        if (!cleanup)
            ah_lc_move (self, row->id, "1", "error", op, why);
        return -1;
    }
    track->job = job;
    ah_debug (AREA, "%s: %s in a worker", row->id, op);
    return 0;
}

void ah_lc_launch_for_row (self_t *self, const row_t *row)
{
    const char *op = ah_lc_op_for_state (row->state);
    if (op)
        ah_lc_launch (self, row, op, false);
}

void ah_lc_begin_start (self_t *self, const row_t *row, const char *from)
{
    char guard [64];
    snprintf (guard, sizeof guard, "state = '%s'", from);
    if (ah_lc_move (self, row->id, guard, "starting", "start", NULL) == 1) {
        row_t fresh;
        if (ah_lc_lookup (self, row->id, &fresh) == 1)
            ah_lc_launch (self, &fresh, "start", false);
    }
}

// --------------------------------------------------------------------------
//  Outcomes

//  The cause of the row's current step, into self->cause (for a publish
//  that follows the row's end). Leaves a cause already set alone.
static void s_keep_cause (self_t *self, const char *agent_id)
{
    if (self->cause [0])
        return;
    sqlite3_stmt *st = ah_store_prepare (self->store, "SELECT cause FROM sandboxes WHERE agent_id = :id");
    if (st && !ah_store_bind_text (st, ":id", agent_id) && ah_store_step (self->store, st) == SQLITE_ROW
    &&  sqlite3_column_text (st, 0))
        snprintf (self->cause, sizeof self->cause, "%s", (const char *) sqlite3_column_text (st, 0));
    if (st)
        sqlite3_reset (st);
}

static void s_destroyed (self_t *self, const char *agent_id)
{
    s_keep_cause (self, agent_id);
    bool ok = ah_store_begin (self->store) == 0;
    ok = ok && ah_lc_run (self, "DELETE FROM sandboxes WHERE agent_id = :id", agent_id) == 0;
    ok = ok && ah_lc_run (self, "DELETE FROM agents WHERE id = :id", agent_id) == 0;
    ok = ok && ah_lc_run (self, "DELETE FROM tombstones WHERE agent_id = :id", agent_id) == 0;
    if (ok && ah_store_commit (self->store) == 0) {
        ah_lc_publish (self, agent_id, "destroyed", NULL, NULL);
        ah_lc_forget_agent (self, agent_id);
        ah_info (AREA, "%s destroyed", agent_id);
    }
    else {
        ah_store_rollback (self->store);
        ah_lc_move (self, agent_id, "state = 'destroying'", "error", "destroy",
                    "the sandbox is gone but its rows could not be removed (see the log)");
    }
    self->cause [0] = 0;        //  outcomes run outside any request
}

//  The sandbox is now what the rebuild built; it still needs a rebuild
//  only if the agent was updated while it ran.
static void s_rebuilt (self_t *self, const char *id, const job_t *job)
{
    const char *image = job->image;
    double cpus = job->cpus;
    int64_t memory_mb = job->memory_mb;
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "UPDATE sandboxes SET image = :image, cpus = :cpus, memory_mb = :mem, runtime = :runtime,"
        " needs_rebuild = (SELECT a.image <> :image OR a.cpus <> :cpus OR a.memory_mb <> :mem"
        "                  OR a.runtime IS NOT :runtime FROM agents a WHERE a.id = :id)"
        " WHERE agent_id = :id AND state = 'rebuilding'");
    if (st && !ah_store_bind_text (st, ":runtime", job->runtime ? job->runtime->alias : NULL)
           && !ah_store_bind_text (st, ":image", image) && !ah_store_bind_double (st, ":cpus", cpus)
           && !ah_store_bind_int64 (st, ":mem", memory_mb) && !ah_store_bind_text (st, ":id", id))
        ah_store_step (self->store, st);
    if (st)
        sqlite3_reset (st);
}

//  What a finished driver call means for the row.
static void s_outcome (self_t *self, const ah_msg_t *done, const row_t *row, const job_t *job)
{
    const char *id = row->id, *op = job->op;
    bool ok = ah_msg_bool (done, "ok", false);
    const char *why = ah_msg_str (done, "error");
    if (!ok)
        ah_warn (AREA, "%s: %s failed: %s", id, op, why ? why : "?");
    track_t *track = ok ? zhashx_lookup (self->tracks, id) : NULL;
    if (track)
        track->image_retried = false;   //  the next operation may meet a gone image once more
    if (streq (op, "expire") || streq (op, "expire-home")) {
        ah_lc_expired (self, done, id, op);
        return;
    }
    if (ah_lc_reader_job_done (self, done, op)) {
        //  A wake or destroy asked for meanwhile waited for it.
        ah_lc_launch_for_row (self, row);
        return;
    }
    if (ok && (job->recreate || streq (op, "rebuild")))
        //  The container is there again.
        ah_lc_run (self, "UPDATE sandboxes SET container_removed_at = NULL WHERE agent_id = :id", id);
    if (!ok && streq (op, "destroy"))
        ah_lc_tombstone_failed (self, id, why ? why : "the driver failed");
    //  A start that failed because the home's files are gone: the loss is
    //  recorded, and the row waits in error as a removed sandbox does (op
    //  create): the next START makes the sandbox again, its home empty.
    //  Never behind the user's back: a session on it is lost, not handed
    //  an empty home (docs/sessions.md).
    //  And a sandbox made again over a home that was gone (look_first).
    bool gone = ah_msg_bool (done, "home_gone", false);
    bool lost = !ok && streq (op, "start") && gone;
    if (lost || (gone && job->look_first))
        ah_lc_home_lost (self, row, ah_msg_str (done, "detail"));
    if (streq (op, "inspect")) {
        //  A failed look is no evidence of anything: finish what the row
        //  was doing by running it again (the driver's own error, if it
        //  is still down, lands the row in error where a person can see).
        if (ok)
            ah_lc_repair (self, id, done, true);
        else
            ah_lc_launch_for_row (self, row);
    }
    else
    if (job->cleanup || !streq (row->state, ah_lc_state_for_op (op)) || !streq (row->op, op))
        //  The row moved on while the driver worked (destroy during a
        //  start, ...): do what it asks for now.
        ah_lc_launch_for_row (self, row);
    else
    if (!ok && ah_msg_bool (done, "image_gone", false) && s_image_gone (self, row, job))
        ;                               //  preparing again: RUNTIME_READY goes on
    else
    if (!ok && streq (op, "freeze") && ah_lc_pool_freeze_failed (self, id))
        ;                               //  a warm sandbox: it stays running
    else
    if (!ok && streq (op, "freeze")) {
        //  Not frozen (a hostd of an older release, an engine that
        //  cannot pause): it sleeps instead, as an idle agent did before
        //  the frozen tier.
        if (ah_lc_move (self, id, "state = 'freezing'", "stopping", "stop", NULL) == 1) {
            row_t fresh;
            if (ah_lc_lookup (self, id, &fresh) == 1)
                ah_lc_launch (self, &fresh, "stop", false);
        }
    }
    else
    if (!ok) {
        char guard [64];
        snprintf (guard, sizeof guard, "state = '%s'", row->state);
        ah_lc_move (self, id, guard, "error", lost ? "create" : op, why ? why : "the driver failed");
    }
    else
    if (streq (op, "create")) {
        if (ah_msg_str (done, "image_id"))
            ah_lc_pool_image_id (self, id, ah_msg_str (done, "image_id"));
        ah_lc_begin_start (self, row, "creating");
    }
    else
    if (streq (op, "start")) {
        if (self->driver->waits_for_hello) {
            ah_lc_hello_wait (self, id);
            ah_debug (AREA, "%s: started; waiting for sandboxd's hello", id);
        }
        else
            ah_lc_move (self, id, "state = 'starting'", "running", NULL, NULL);
    }
    else
    if (streq (op, "stop"))
        ah_lc_move (self, id, "state = 'stopping'", "sleeping", NULL, NULL);
    else
    if (streq (op, "freeze"))
        ah_lc_move (self, id, "state = 'freezing'", "frozen", NULL, NULL);
    else
    if (streq (op, "thaw"))
        ah_lc_move (self, id, "state = 'thawing'", "running", NULL, NULL);
    else
    if (streq (op, "rebuild")) {
        s_rebuilt (self, id, job);
        ah_lc_begin_start (self, row, "rebuilding");
    }
    else
    if (streq (op, "destroy"))
        s_destroyed (self, id);
}

//  A job back from its worker, in the actor's thread. One that did not
//  run, or that ends with the actor, only goes (as the calls a server
//  that stops leaves behind: the row says what comes next).
static void s_job_done (void *self_, void *arg, bool ran)
{
    self_t *self = self_;
    job_t *job = arg;
    track_t *track = self ? zhashx_lookup (self->tracks, job->agent_id) : NULL;
    if (!track || track->job != job) {
        ah_error (AREA, "a worker reported %s for %s, which nobody waits for", job->op, job->agent_id);
        s_job_free (&job);
        return;
    }
    track->job = NULL;
    char agent_id [ID_SIZE];
    snprintf (agent_id, sizeof agent_id, "%s", job->agent_id);
    row_t row;
    if (!ran || !job->done || self->ending)
        ;
    else
    if (ah_lc_lookup (self, agent_id, &row) == 1)
        s_outcome (self, job->done, &row, job);
    else
        ah_lc_forget (self, agent_id);
    s_job_free (&job);
    //  A create that took a frozen warm sandbox is answered now.
    if (!self->ending)
        ah_lc_pool_answer (self, agent_id);
    //  Keep tracks only while they hold something.
    track = zhashx_lookup (self->tracks, agent_id);
    if (track && !track->job && !track->hello_timer && !track->preparing [0])
        ah_lc_forget (self, agent_id);
}
