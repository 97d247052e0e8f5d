/*  actors/lifecycle.c: the lifecycle actor (see lifecycle.h and
    docs/lifecycle.md).

    DESIGN. One thread (this zactor) owns the agents and sandboxes rows
    through its own store connection, a DEALER on the bus ("lifecycle")
    and a PULL socket at inproc://agenthold-lifecycle-<address> where worker
    threads report. Every request is decided by one guarded UPDATE on
    the sandboxes row; the driver call it implies runs in a worker thread
    (pthread, joinable) that owns its job_t until it pushes JOB_DONE and
    returns; the actor then joins it and frees the job.

    At most one driver call per agent is in flight (tracks: agent id ->
    track_t, owned by the actor). A request that wins its UPDATE while a
    call is in flight (destroy during a start) only moves the row; when
    the call comes back and finds the row in another state than the one
    it served, the actor launches what the row now asks for. So the
    database always says what happens next, which is also how an
    interrupted operation is finished after a restart.                */
#include "actors/lifecycle.h"
#include "common/bus.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/token.h"
#include "store/store.h"
#include "policy/policy.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#define AREA            "lifecycle"
#define ID_LEN          12
#define NAME_MAX_LEN    63
#define IMAGE_MAX_LEN   255
#define ERROR_MAX_LEN   1024
#define ACTIVITY_MAX    10000           //  agents with activity waiting for a flush

//  A driver call in a worker thread. Owned by the worker until it has
//  sent JOB_DONE, then by the actor (which joins and frees it).
typedef struct {
    ah_driver_t *driver;
    char endpoint [64];
    char op [16];                   //  create start stop rebuild destroy inspect
    char agent_id [ID_LEN + 8];
    char token [AH_TOKEN_HEX];      //  start only; wiped when freed
    int  tunnel_port;
    char image [IMAGE_MAX_LEN + 1];
    double  cpus;
    int64_t memory_mb;
    int64_t pids_limit;
    bool cleanup;                   //  a stop that changes no state (after a hello timeout)
    pthread_t thread;
} job_t;

//  What the actor keeps per agent between messages.
typedef struct {
    job_t  *job;                    //  the driver call in flight, or NULL
    int64_t hello_deadline;         //  ms; 0 = not waiting for hello
} track_t;

//  One agent and its sandbox, copied out of the database.
typedef struct {
    char id [ID_LEN + 8];
    char name [NAME_MAX_LEN + 2];
    char tenant [NAME_MAX_LEN + 2];
    char image [IMAGE_MAX_LEN + 1];
    double  cpus;
    int64_t memory_mb;
    double  idle_minutes;
    char state [16];
    char op [16];                   //  "" for NULL
    char error [ERROR_MAX_LEN + 1];
    bool needs_rebuild;
} row_t;

typedef struct {
    zsock_t *pipe;
    zsock_t *bus;
    zsock_t *results;
    char endpoint [64];
    zpoller_t *poller;
    ah_store_t *store;
    const ah_config_t *config;
    ah_driver_t *driver;
    zlist_t *subscribers;           //  of char *, copied
    bool tunnel_subscribed;
    int hello_timeout_ms;
    int tunnel_port;
    zhashx_t *tracks;               //  agent id -> track_t *
    zhashx_t *activity;             //  agent id -> int64_t * (ms), waiting for a flush
    int64_t activity_flush_at;      //  0 = nothing pending
    ah_policy_t *policy;
} self_t;

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
      "sleeping or error", "starting", "|creating|starting|running|" },
    { "SANDBOX_STOP", "stop",
      "state IN ('running','starting','error') AND (op IS NULL OR op NOT IN ('destroy','create'))",
      "running, starting or error", "stopping", "|sleeping|stopping|" },
    { "SANDBOX_REBUILD", "rebuild",
      "state IN ('sleeping','error','running') AND (op IS NULL OR op <> 'destroy')",
      "sleeping, error or running", "rebuilding", "" },
    { "SANDBOX_DESTROY", "destroy",
      "state <> 'destroying'",
      "any state but destroying", "destroying", "|destroying|" },
};


// --------------------------------------------------------------------------
//  Small helpers

static const char *s_state_for_op (const char *op)
{
    if (streq (op, "create"))  return "creating";
    if (streq (op, "start"))   return "starting";
    if (streq (op, "stop"))    return "stopping";
    if (streq (op, "rebuild")) return "rebuilding";
    if (streq (op, "destroy")) return "destroying";
    return "";
}

static const char *s_op_for_state (const char *state)
{
    if (streq (state, "creating"))   return "create";
    if (streq (state, "starting"))   return "start";
    if (streq (state, "stopping"))   return "stop";
    if (streq (state, "rebuilding")) return "rebuild";
    if (streq (state, "destroying")) return "destroy";
    return NULL;
}

//  [a-z0-9][a-z0-9._-]{0,62}
static bool s_name_ok (const char *name)
{
    size_t n = name ? strlen (name) : 0;
    if (n == 0 || n > NAME_MAX_LEN)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name [i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
            return false;
    }
    return true;
}

//  An image reference: printable, no blanks, bounded.
static bool s_image_ok (const char *image)
{
    size_t n = image ? strlen (image) : 0;
    if (n == 0 || n > IMAGE_MAX_LEN)
        return false;
    for (size_t i = 0; i < n; i++)
        if (image [i] <= 0x20 || image [i] >= 0x7f)
            return false;
    return true;
}

static void s_copy (char *dst, size_t size, const unsigned char *src)
{
    snprintf (dst, size, "%s", src ? (const char *) src : "");
}

//  The port of sandbox.tunnel_listen ("host:port" or ":port").
static int s_listen_port (const char *listen)
{
    const char *colon = listen ? strrchr (listen, ':') : NULL;
    int port = colon ? atoi (colon + 1) : 0;
    return port > 0 && port < 65536 ? port : 8090;
}

// --------------------------------------------------------------------------
//  Optional fields of a request: absent is fine, a wrong type is not.

static int s_opt_double (const ah_msg_t *msg, const char *key, double *out)
{
    if (!ah_msg_has (msg, key) || ah_msg_is_nil (msg, key))
        return 0;
    double v = ah_msg_double (msg, key, NAN);
    if (isnan (v) || isinf (v))
        return -1;
    *out = v;
    return 1;
}

static int s_opt_int (const ah_msg_t *msg, const char *key, int64_t *out)
{
    double v;
    int rc = s_opt_double (msg, key, &v);
    if (rc <= 0)
        return rc;
    if (v != floor (v) || v < -9e15 || v > 9e15)
        return -1;
    *out = ah_msg_int (msg, key, (int64_t) v);
    return 1;
}

static int s_opt_str (const ah_msg_t *msg, const char *key, const char **out)
{
    if (!ah_msg_has (msg, key) || ah_msg_is_nil (msg, key))
        return 0;
    const char *v = ah_msg_str (msg, key);
    if (!v)
        return -1;
    *out = v;
    return 1;
}

// --------------------------------------------------------------------------
//  Bus output

static void s_send (self_t *self, ah_msg_t **msg_p, const char *to)
{
    if (!to || !*to) {
        ah_msg_destroy (msg_p);
        return;
    }
    if (ah_msg_send (msg_p, self->bus, to))
        ah_warn (AREA, "could not send to '%s'", to);
}

static void s_reply (self_t *self, const ah_msg_t *request, ah_msg_t *reply)
{
    s_send (self, &reply, ah_msg_peer (request));
}

static void s_reply_error (self_t *self, const ah_msg_t *request, int status, const char *text)
{
    ah_msg_t *reply = ah_msg_reply_error (request, status, "%s", text);
    s_reply (self, request, reply);
}

//  SANDBOX_STATE to every subscriber; an absent one is the bus's to drop.
static void s_publish (self_t *self, const char *agent_id, const char *state,
                       const char *op, const char *error)
{
    ah_debug (AREA, "%s -> %s%s%s", agent_id, state, error ? ": " : "", error ? error : "");
    for (const char *to = zlist_first (self->subscribers); to; to = zlist_next (self->subscribers)) {
        ah_msg_t *event = ah_msg_new ("SANDBOX_STATE");
        ah_msg_set_str (event, "agent_id", agent_id);
        ah_msg_set_str (event, "state", state);
        ah_msg_set_str (event, "op", op && *op ? op : NULL);
        ah_msg_set_str (event, "error", error && *error ? error : NULL);
        s_send (self, &event, to);
    }
    bool kick = streq (state, "stopping") || streq (state, "rebuilding")
             || streq (state, "destroying") || streq (state, "error");
    if (kick && self->tunnel_subscribed) {
        ah_msg_t *msg = ah_msg_new ("TUNNEL_KICK");
        ah_msg_set_str (msg, "agent_id", agent_id);
        s_send (self, &msg, "tunnel");
    }
}

// --------------------------------------------------------------------------
//  Database

//  By id first, then by name. 1 found, 0 not, -1 error.
static int s_lookup (self_t *self, const char *key_in, row_t *row)
{
    char key [NAME_MAX_LEN + 2];            //  key_in may point into *row
    snprintf (key, sizeof key, "%s", key_in);
    memset (row, 0, sizeof *row);
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT a.id, a.name, a.tenant, a.image, a.cpus, a.memory_mb, a.idle_minutes,"
        " s.state, s.op, s.error, s.needs_rebuild"
        " FROM agents a JOIN sandboxes s ON s.agent_id = a.id"
        " WHERE a.id = :key OR a.name = :key ORDER BY a.id = :key DESC LIMIT 1");
    if (!st || ah_store_bind_text (st, ":key", key))
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
    }
    sqlite3_reset (st);
    return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
}

//  The guarded UPDATE: moves the row to `to` if `guard` holds. Returns 1
//  (we won), 0 (the row is elsewhere) or -1. Does not publish. Leaving
//  starting/running forgets the boot token, so an old sandboxd cannot
//  come back; reaching running starts the idle clock.
static int s_update (self_t *self, const char *agent_id, const char *guard,
                     const char *to, const char *op, const char *error)
{
    char sql [512];
    snprintf (sql, sizeof sql,
        "UPDATE sandboxes SET state = :to, op = :op, error = :error,"
        " op_started_at = CASE WHEN :op IS NULL THEN NULL ELSE :now END,"
        " boot_token_hash = CASE WHEN :to IN ('starting','running') THEN boot_token_hash END,"
        " last_activity_at = CASE WHEN :to = 'running' THEN :now ELSE last_activity_at END,"
        " updated_at = :now"
        " WHERE agent_id = :id AND (%s)", guard);
    sqlite3_stmt *st = ah_store_prepare (self->store, sql);
    if (!st || ah_store_bind_text (st, ":to", to)
            || ah_store_bind_text (st, ":op", op && *op ? op : NULL)
            || ah_store_bind_text (st, ":error", error)
            || ah_store_bind_int64 (st, ":now", ah_store_now_ms ())
            || ah_store_bind_text (st, ":id", agent_id))
        return -1;
    int rc = ah_store_step (self->store, st);
    sqlite3_reset (st);
    if (rc != SQLITE_DONE)
        return -1;
    return ah_store_changes (self->store) == 1 ? 1 : 0;
}

//  s_update, and SANDBOX_STATE when it won.
static int s_move (self_t *self, const char *agent_id, const char *guard,
                   const char *to, const char *op, const char *error)
{
    char cut [ERROR_MAX_LEN + 1];          //  a driver's message may be long
    if (error)
        snprintf (cut, sizeof cut, "%s", error);
    int rc = s_update (self, agent_id, guard, to, op, error ? cut : NULL);
    if (rc == 1)
        s_publish (self, agent_id, to, op, error ? cut : NULL);
    return rc;
}

static int s_run (self_t *self, const char *sql, const char *agent_id)
{
    sqlite3_stmt *st = ah_store_prepare (self->store, sql);
    if (!st || ah_store_bind_text (st, ":id", agent_id))
        return -1;
    int rc = ah_store_step (self->store, st);
    sqlite3_reset (st);
    return rc == SQLITE_DONE ? 0 : -1;
}

// --------------------------------------------------------------------------
//  Admission (lua/limits.lua through policy/)

//  What a create or update asks for. Absent fields keep has_* false.
typedef struct {
    char image [IMAGE_MAX_LEN + 1];
    double cpus;
    int64_t memory_mb;
    double idle_minutes;
    bool has_image, has_cpus, has_memory, has_idle;
} desired_t;

//  The optional fields of a request, type-checked (ranges are the
//  policy's). 0, or -1 after a 400 reply.
static int s_desired (self_t *self, const ah_msg_t *msg, desired_t *d)
{
    memset (d, 0, sizeof *d);
    const char *bad = NULL, *image = NULL;
    int rc;
    if ((rc = s_opt_str (msg, "image", &image)) < 0 || (rc && !s_image_ok (image)))
        bad = "image: want a string of 1..255 printable characters without blanks";
    if ((d->has_image = rc > 0))
        snprintf (d->image, sizeof d->image, "%s", image);
    if (!bad && (rc = s_opt_double (msg, "cpus", &d->cpus)) < 0)
        bad = "cpus: want a number";
    d->has_cpus = rc > 0;
    if (!bad && (rc = s_opt_int (msg, "memory_mb", &d->memory_mb)) < 0)
        bad = "memory_mb: want a whole number of MiB";
    d->has_memory = rc > 0;
    if (!bad && (rc = s_opt_double (msg, "idle_minutes", &d->idle_minutes)) < 0)
        bad = "idle_minutes: want a number";
    d->has_idle = rc > 0;
    if (bad) {
        s_reply_error (self, msg, 400, bad);
        return -1;
    }
    return 0;
}

//  The tenant's own limits (tenants table; NULL or no row = none) against what its
//  agents would hold with this one at `want`. `except`: the agent being
//  updated, counted at its new values only. 0 / 1 refused (*why) / -1.
static int s_tenant_fits (self_t *self, const char *tenant, const char *except,
                          const desired_t *want, char **why)
{
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT count(a.id), coalesce(sum(a.cpus), 0), coalesce(sum(a.memory_mb), 0),"
        " t.max_agents, t.max_cpus, t.max_memory_mb"
        " FROM tenants t LEFT JOIN agents a ON a.tenant = t.name AND a.id <> :except"
        " WHERE t.name = :tenant GROUP BY t.name");
    if (!st || ah_store_bind_text (st, ":tenant", tenant)
            || ah_store_bind_text (st, ":except", except ? except : "")) {
        *why = strdup ("cannot read the tenant's usage");
        return -1;
    }
    int rc = ah_store_step (self->store, st);
    if (rc != SQLITE_ROW) {
        //  No row for the tenant: it has no limits of its own.
        sqlite3_reset (st);
        if (rc != SQLITE_DONE)
            *why = strdup ("cannot read the tenant's usage");
        return rc == SQLITE_DONE ? 0 : -1;
    }
    int64_t agents = sqlite3_column_int64 (st, 0) + 1;
    double cpus = sqlite3_column_double (st, 1) + want->cpus;
    int64_t memory = sqlite3_column_int64 (st, 2) + want->memory_mb;
    if (sqlite3_column_type (st, 3) != SQLITE_NULL && agents > sqlite3_column_int64 (st, 3))
        *why = zsys_sprintf ("tenant '%s' may have at most %lld agents", tenant,
                             (long long) sqlite3_column_int64 (st, 3));
    else
    if (sqlite3_column_type (st, 4) != SQLITE_NULL && cpus > sqlite3_column_double (st, 4))
        *why = zsys_sprintf ("tenant '%s' would hold %g cpus, over its limit of %g", tenant,
                             cpus, sqlite3_column_double (st, 4));
    else
    if (sqlite3_column_type (st, 5) != SQLITE_NULL && memory > sqlite3_column_int64 (st, 5))
        *why = zsys_sprintf ("tenant '%s' would hold %lld MiB, over its limit of %lld MiB", tenant,
                             (long long) memory, (long long) sqlite3_column_int64 (st, 5));
    sqlite3_reset (st);
    return *why ? 1 : 0;
}

//  Admission: lua/limits.lua admit(request, limits) says yes or no and
//  fills in defaults; then the tenant's quota. `asked` are the fields the
//  request named; *out starts as the agent's current values (update) and
//  ends as what it will hold. 0 admitted, 1 refused (*why, for a 422),
//  -1 could not decide (*why, for a 500).
static int s_admit (self_t *self, const char *op, const char *name, const char *tenant,
                    const char *except, const desired_t *asked, desired_t *out, char **why)
{
    *why = NULL;
    const ah_config_t *c = self->config;
    ah_msg_t *request = ah_msg_new ("ADMIT");
    ah_msg_set_str (request, "op", op);
    ah_msg_set_str (request, "name", name);
    if (asked->has_image)  ah_msg_set_str (request, "image", asked->image);
    if (asked->has_cpus)   ah_msg_set_double (request, "cpus", asked->cpus);
    if (asked->has_memory) ah_msg_set_int (request, "memory_mb", asked->memory_mb);
    if (asked->has_idle)   ah_msg_set_double (request, "idle_minutes", asked->idle_minutes);
    ah_msg_t *limits = ah_msg_new ("LIMITS");
    ah_msg_set_str (limits, "default_image", c->default_image);
    ah_msg_set_double (limits, "default_cpus", c->default_cpus);
    ah_msg_set_int (limits, "default_memory_mb", c->default_memory_mb);
    ah_msg_set_double (limits, "max_cpus", c->max_cpus);
    ah_msg_set_int (limits, "max_memory_mb", c->max_memory_mb);
    ah_msg_set_double (limits, "default_idle_minutes", c->idle_minutes);
    ah_msg_t *result = NULL;
    char *err = NULL;
    int rc = ah_policy_call (self->policy, "admit", request, limits, &result, &err);
    ah_msg_destroy (&request);
    ah_msg_destroy (&limits);
    if (rc) {
        ah_error (AREA, "admit policy: %s", err ? err : "failed");
        *why = zsys_sprintf ("the admit policy failed: %s", err ? err : "?");
        free (err);
        return -1;
    }
    if (!ah_msg_bool (result, "allow", false)) {
        const char *message = ah_msg_str (result, "message");
        *why = strdup (message ? message : "refused by the admit policy");
        ah_msg_destroy (&result);
        return 1;
    }
    //  The policy's values win (it fills defaults and may round).
    const char *image = ah_msg_str (result, "image");
    if (image && s_image_ok (image))
        snprintf (out->image, sizeof out->image, "%s", image);
    out->cpus = ah_msg_double (result, "cpus", out->cpus);
    out->memory_mb = ah_msg_int (result, "memory_mb", out->memory_mb);
    out->idle_minutes = ah_msg_double (result, "idle_minutes", out->idle_minutes);
    ah_msg_destroy (&result);
    if (!s_image_ok (out->image) || out->cpus <= 0 || out->memory_mb <= 0) {
        *why = strdup ("the admit policy returned an unusable image or resources");
        return -1;
    }
    return s_tenant_fits (self, tenant, except, out, why);
}

// --------------------------------------------------------------------------
//  Worker threads

static void *s_worker (void *arg)
{
    job_t *job = arg;
    char *err = NULL;
    int rc = -1;
    ah_sandbox_spec_t spec = { job->agent_id, job->image, job->cpus, job->memory_mb, job->pids_limit };
    ah_sandbox_status_t status = { .exit_code = -1 };
    ah_driver_t *d = job->driver;
    if (streq (job->op, "create"))
        rc = d->create (d, &spec, &err);
    else if (streq (job->op, "start")) {
        ah_boot_t boot = { job->agent_id, job->token, job->tunnel_port };
        rc = d->start (d, &boot, &err);
    }
    else if (streq (job->op, "stop"))
        rc = d->stop (d, job->agent_id, &err);
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
    else if (streq (job->op, "inspect"))
        rc = d->inspect (d, job->agent_id, &status, &err);

    ah_msg_t *done = ah_msg_new ("JOB_DONE");
    ah_msg_set_str (done, "agent_id", job->agent_id);
    ah_msg_set_str (done, "op", job->op);
    ah_msg_set_bool (done, "ok", rc == 0);
    if (rc)
        ah_msg_set_str (done, "error", err ? err : "the driver failed without saying why");
    ah_msg_set_bool (done, "exists", status.exists);
    ah_msg_set_bool (done, "running", status.running);
    ah_msg_set_int (done, "exit_code", status.exit_code);
    status.detail [sizeof status.detail - 1] = 0;
    ah_msg_set_str (done, "detail", status.detail);
    free (err);
    //  A PUSH of our own: linger so the message is delivered even though
    //  we close at once (the actor binds before any worker starts).
    zsock_t *push = zsock_new (ZMQ_PUSH);
    if (push) {
        zsock_set_linger (push, 10000);
        if (zsock_connect (push, "%s", job->endpoint) == 0)
            ah_msg_send (&done, push, NULL);
        zsock_destroy (&push);
    }
    if (done) {
        ah_error (AREA, "%s: could not report the end of %s", job->agent_id, job->op);
        ah_msg_destroy (&done);
    }
    return NULL;
}

static void s_job_free (job_t **job_p)
{
    if (*job_p) {
        explicit_bzero ((*job_p)->token, sizeof (*job_p)->token);
        free (*job_p);
        *job_p = NULL;
    }
}

static track_t *s_track (self_t *self, const char *agent_id)
{
    track_t *track = zhashx_lookup (self->tracks, agent_id);
    if (!track) {
        track = calloc (1, sizeof *track);
        if (track)
            zhashx_insert (self->tracks, agent_id, track);
    }
    return track;
}

static bool s_busy (self_t *self, const char *agent_id)
{
    track_t *track = zhashx_lookup (self->tracks, agent_id);
    return track && track->job;
}

//  A worker for op on the agent, unless one is in flight already (then
//  the row says what to do when it comes back). -1 when it could not be
//  started: the row is moved to error so nobody waits forever.
static int s_launch (self_t *self, const row_t *row, const char *op, bool cleanup)
{
    track_t *track = s_track (self, row->id);
    if (!track)
        return -1;
    if (track->job)
        return 0;
    job_t *job = calloc (1, sizeof *job);
    if (!job)
        return -1;
    job->driver = self->driver;
    snprintf (job->endpoint, sizeof job->endpoint, "%s", self->endpoint);
    snprintf (job->op, sizeof job->op, "%s", op);
    snprintf (job->agent_id, sizeof job->agent_id, "%s", row->id);
    snprintf (job->image, sizeof job->image, "%s", row->image);
    job->cpus = row->cpus;
    job->memory_mb = row->memory_mb;
    job->pids_limit = self->config->pids_limit;
    job->tunnel_port = self->tunnel_port;
    job->cleanup = cleanup;
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
        track->hello_deadline = 0;
    }
    if (!why && pthread_create (&job->thread, NULL, s_worker, job))
        why = "cannot start a worker thread";
    if (why) {
        ah_error (AREA, "%s: %s: %s", row->id, op, why);
        s_job_free (&job);
        if (!cleanup)
            s_move (self, row->id, "1", "error", op, why);
        return -1;
    }
    track->job = job;
    ah_debug (AREA, "%s: %s in a worker", row->id, op);
    return 0;
}

//  Launch what the row's (transitional) state asks for.
static void s_launch_for_row (self_t *self, const row_t *row)
{
    const char *op = s_op_for_state (row->state);
    if (op)
        s_launch (self, row, op, false);
}

// --------------------------------------------------------------------------
//  Outcomes of driver calls

static void s_forget (self_t *self, const char *agent_id)
{
    track_t *track = zhashx_lookup (self->tracks, agent_id);
    if (track && !track->job)
        zhashx_delete (self->tracks, agent_id);        //  its destructor frees the track
}

//  create or rebuild done: on to starting, with a fresh token.
static void s_begin_start (self_t *self, const row_t *row, const char *from)
{
    char guard [64];
    snprintf (guard, sizeof guard, "state = '%s'", from);
    if (s_move (self, row->id, guard, "starting", "start", NULL) == 1) {
        row_t fresh;
        if (s_lookup (self, row->id, &fresh) == 1)
            s_launch (self, &fresh, "start", false);
    }
}

static void s_destroyed (self_t *self, const char *agent_id)
{
    bool ok = ah_store_begin (self->store) == 0;
    ok = ok && s_run (self, "DELETE FROM sandboxes WHERE agent_id = :id", agent_id) == 0;
    ok = ok && s_run (self, "DELETE FROM agents WHERE id = :id", agent_id) == 0;
    ok = ok && s_run (self, "DELETE FROM tombstones WHERE agent_id = :id", agent_id) == 0;
    if (ok && ah_store_commit (self->store) == 0) {
        s_publish (self, agent_id, "destroyed", NULL, NULL);
        s_forget (self, agent_id);
        zhashx_delete (self->activity, agent_id);
        ah_info (AREA, "%s destroyed", agent_id);
    }
    else {
        ah_store_rollback (self->store);
        s_move (self, agent_id, "state = 'destroying'", "error", "destroy",
                "the sandbox is gone but its rows could not be removed (see the log)");
    }
}

static void s_repair (self_t *self, const char *agent_id, bool exists, bool running,
                      int exit_code, const char *detail, bool startup);

static void s_job_done (self_t *self)
{
    char *err = NULL;
    ah_msg_t *done = ah_msg_recv (self->results, false, &err);
    if (!done) {
        ah_error (AREA, "bad message from a worker: %s", err ? err : "?");
        free (err);
        return;
    }
    const char *id = ah_msg_str (done, "agent_id");
    const char *op = ah_msg_str (done, "op");
    track_t *track = id ? zhashx_lookup (self->tracks, id) : NULL;
    if (!track || !track->job || !op || !streq (track->job->op, op)) {
        ah_error (AREA, "a worker reported %s for %s, which nobody asked for",
                  op ? op : "?", id ? id : "?");
        ah_msg_destroy (&done);
        return;
    }
    pthread_join (track->job->thread, NULL);
    bool cleanup = track->job->cleanup;
    char image [IMAGE_MAX_LEN + 1];
    snprintf (image, sizeof image, "%s", track->job->image);
    double cpus = track->job->cpus;
    int64_t memory_mb = track->job->memory_mb;
    s_job_free (&track->job);

    bool ok = ah_msg_bool (done, "ok", false);
    const char *why = ah_msg_str (done, "error");
    if (!ok)
        ah_warn (AREA, "%s: %s failed: %s", id, op, why ? why : "?");
    row_t row;
    if (s_lookup (self, id, &row) != 1) {
        s_forget (self, id);
        ah_msg_destroy (&done);
        return;
    }
    if (streq (op, "inspect")) {
        //  A failed look is no evidence of anything: finish what the row
        //  was doing by running it again (the driver's own error, if it
        //  is still down, lands the row in error where a person can see).
        if (ok)
            s_repair (self, id, ah_msg_bool (done, "exists", false), ah_msg_bool (done, "running", false),
                      (int) ah_msg_int (done, "exit_code", -1), ah_msg_str (done, "detail"), true);
        else
            s_launch_for_row (self, &row);
    }
    else
    if (cleanup || !streq (row.state, s_state_for_op (op)) || !streq (row.op, op))
        //  The row moved on while the driver worked (destroy during a
        //  start, ...): do what it asks for now.
        s_launch_for_row (self, &row);
    else
    if (!ok) {
        char guard [64];
        snprintf (guard, sizeof guard, "state = '%s'", row.state);
        s_move (self, id, guard, "error", op, why ? why : "the driver failed");
    }
    else
    if (streq (op, "create"))
        s_begin_start (self, &row, "creating");
    else
    if (streq (op, "start")) {
        if (self->driver->waits_for_hello) {
            track->hello_deadline = ah_store_now_ms () + self->hello_timeout_ms;
            ah_debug (AREA, "%s: started; waiting for sandboxd's hello", id);
        }
        else
            s_move (self, id, "state = 'starting'", "running", NULL, NULL);
    }
    else
    if (streq (op, "stop"))
        s_move (self, id, "state = 'stopping'", "sleeping", NULL, NULL);
    else
    if (streq (op, "rebuild")) {
        //  The sandbox is now what the job built; it still needs a
        //  rebuild only if the agent was updated while it ran.
        sqlite3_stmt *st = ah_store_prepare (self->store,
            "UPDATE sandboxes SET image = :image, cpus = :cpus, memory_mb = :mem,"
            " needs_rebuild = (SELECT a.image <> :image OR a.cpus <> :cpus OR a.memory_mb <> :mem"
            "                  FROM agents a WHERE a.id = :id)"
            " WHERE agent_id = :id AND state = 'rebuilding'");
        if (st && !ah_store_bind_text (st, ":image", image) && !ah_store_bind_double (st, ":cpus", cpus)
               && !ah_store_bind_int64 (st, ":mem", memory_mb) && !ah_store_bind_text (st, ":id", id))
            ah_store_step (self->store, st);
        if (st)
            sqlite3_reset (st);
        s_begin_start (self, &row, "rebuilding");
    }
    else
    if (streq (op, "destroy"))
        s_destroyed (self, id);
    //  Keep tracks only while they hold something (the loop scans them).
    track = zhashx_lookup (self->tracks, id);
    if (track && !track->job && !track->hello_deadline)
        s_forget (self, id);
    ah_msg_destroy (&done);
}

//  The repair rules: what the driver says about a sandbox against what
//  the row says (docs/lifecycle.md, "Repairs"). startup: the first look
//  after a (re)start of the server, where transitional rows are
//  operations that were interrupted.
static void s_repair (self_t *self, const char *agent_id, bool exists, bool running,
                      int exit_code, const char *detail, bool startup)
{
    row_t row;
    if (s_lookup (self, agent_id, &row) != 1) {
        ah_debug (AREA, "observed %s, which has no row (the reconciler's to judge)", agent_id);
        return;
    }
    if (s_busy (self, row.id)) {
        ah_debug (AREA, "observed %s while %s is in flight: the operation decides", row.id, row.op);
        return;
    }
    //  Driver events follow our own operations too (a rebuild removes the
    //  container), and may arrive late: a transitional row is left to its
    //  operation (a sandbox that dies while starting meets the hello
    //  timeout). Only the start-up pass finishes interrupted operations.
    if (!startup && s_op_for_state (row.state)) {
        ah_debug (AREA, "observed %s while %s: ignored", row.id, row.state);
        return;
    }
    const char *id = row.id;
    const char *removed = "sandbox container was removed outside agenthold";
    const char *s = row.state;
    char why [160];
    if (streq (s, "running")) {
        if (!exists)
            s_move (self, id, "state = 'running'", "error", "create", removed);
        else
        if (!running) {
            //  0, SIGKILL, SIGTERM: stopped by hand (docker stop); else it died.
            if (exit_code == 0 || exit_code == 137 || exit_code == 143)
                s_move (self, id, "state = 'running'", "sleeping", NULL, NULL);
            else {
                snprintf (why, sizeof why, "sandbox exited with code %d", exit_code);
                s_move (self, id, "state = 'running'", "error", "start", why);
            }
        }
    }
    else
    if (streq (s, "starting")) {
        if (!exists)
            s_move (self, id, "state = 'starting'", "error", "create", removed);
        else
        if (running && self->driver->waits_for_hello) {
            //  It kept running while we were away: its sandboxd reconnects
            //  with the token it has (whose hash we kept).
            track_t *track = s_track (self, id);
            if (track)
                track->hello_deadline = ah_store_now_ms () + self->hello_timeout_ms;
        }
        else
        if (running)
            s_move (self, id, "state = 'starting'", "running", NULL, NULL);
        else
            s_launch (self, &row, "start", false);      //  fresh token
    }
    else
    if (streq (s, "creating")) {
        if (exists)
            s_begin_start (self, &row, "creating");
        else
            s_launch (self, &row, "create", false);
    }
    else
    if (streq (s, "stopping")) {
        if (!exists)
            s_move (self, id, "state = 'stopping'", "error", "create", removed);
        else
        if (running)
            s_launch (self, &row, "stop", false);
        else
            s_move (self, id, "state = 'stopping'", "sleeping", NULL, NULL);
    }
    else
    if (streq (s, "rebuilding") || streq (s, "destroying"))
        s_launch_for_row (self, &row);
    else
    if (streq (s, "sleeping")) {
        if (!exists)
            s_move (self, id, "state = 'sleeping'", "error", "create", removed);
        else
        if (running) {
            //  Started by hand: without a boot token of ours it cannot
            //  reach us, so stored state wins and it is stopped again.
            ah_warn (AREA, "%s is sleeping but its sandbox runs (%s): stopping it", id,
                     detail ? detail : "");
            s_launch (self, &row, "stop", true);
        }
    }
}

//  Hello deadlines that passed.
static void s_check_deadlines (self_t *self)
{
    int64_t now = ah_store_now_ms ();
    zlist_t *late = zlist_new ();
    for (track_t *t = zhashx_first (self->tracks); t; t = zhashx_next (self->tracks))
        if (t->hello_deadline && t->hello_deadline <= now)
            zlist_append (late, (void *) zhashx_cursor (self->tracks));
    for (const char *id = zlist_first (late); id; id = zlist_next (late)) {
        track_t *track = zhashx_lookup (self->tracks, id);
        track->hello_deadline = 0;
        char why [96];
        snprintf (why, sizeof why, "sandboxd did not connect within %d s",
                  (self->hello_timeout_ms + 999) / 1000);
        if (s_move (self, id, "state = 'starting'", "error", "start", why) == 1) {
            //  Leave nothing running that nobody can reach.
            row_t row;
            if (s_lookup (self, id, &row) == 1)
                s_launch (self, &row, "stop", true);
        }
    }
    zlist_destroy (&late);
}

// --------------------------------------------------------------------------
//  Requests

//  The agent named by "agent" (id or name), or a 400/404/500 reply. 1 found.
static int s_find (self_t *self, const ah_msg_t *msg, const char *field, row_t *row)
{
    const char *key = ah_msg_str (msg, field);
    if (!key || !*key || strlen (key) > NAME_MAX_LEN) {
        char text [96];
        snprintf (text, sizeof text, "%s: missing or not a string (want an agent id or name)", field);
        s_reply_error (self, msg, 400, text);
        return 0;
    }
    int rc = s_lookup (self, key, row);
    if (rc == 1)
        return 1;
    char text [160];
    snprintf (text, sizeof text, rc == 0 ? "no agent '%s'" : "cannot read agent '%s'", key);
    s_reply_error (self, msg, rc == 0 ? 404 : 500, text);
    return 0;
}

static void s_reply_state (self_t *self, const ah_msg_t *msg, int status, const row_t *row, const char *state)
{
    ah_msg_t *reply = ah_msg_reply_ok (msg);
    ah_msg_set_int (reply, "status", status);
    ah_msg_set_str (reply, "agent_id", row->id);
    ah_msg_set_str (reply, "name", row->name);
    ah_msg_set_str (reply, "state", state);
    s_reply (self, msg, reply);
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
    s_reply (self, msg, reply);
}

static void s_transition (self_t *self, const ah_msg_t *msg, const transition_t *tr)
{
    row_t row;
    if (s_find (self, msg, "agent", &row) != 1)
        return;
    char mark [24];
    snprintf (mark, sizeof mark, "|%s|", row.state);
    if (*tr->already && strstr (tr->already, mark)) {
        //  Already there or on the way: waiters can just wait.
        s_reply_state (self, msg, 200, &row, row.state);
        return;
    }
    const char *to = tr->to;
    const char *op = tr->verb;
    int won;
    if (streq (tr->verb, "start") && streq (row.state, "error") && streq (row.op, "create")) {
        //  There is no sandbox to start: a retry creates it first.
        to = "creating";
        op = "create";
        won = s_move (self, row.id, "state = 'error' AND op = 'create'", to, op, NULL);
    }
    else
    if (streq (tr->verb, "destroy")) {
        //  The tombstone says a destroy is owed, whatever happens next.
        won = ah_store_begin (self->store) == 0 ? s_update (self, row.id, tr->guard, to, op, NULL) : -1;
        if (won == 1 && s_run (self, "INSERT OR REPLACE INTO tombstones (agent_id, at)"
                                     " VALUES (:id, strftime('%s','now') * 1000)", row.id))
            won = -1;
        if (won >= 0 && ah_store_commit (self->store) == 0) {
            if (won == 1)
                s_publish (self, row.id, to, op, NULL);
        }
        else {
            ah_store_rollback (self->store);
            won = -1;
        }
    }
    else
        won = s_move (self, row.id, tr->guard, to, op, NULL);

    if (won < 0) {
        s_reply_error (self, msg, 500, "the database refused the change (see the server log)");
        return;
    }
    if (won == 0) {
        //  Someone else's change came first: name where the row is now.
        if (s_lookup (self, row.id, &row) == 1)
            s_reply_conflict (self, msg, &row, tr->verb, tr->needs);
        else
            s_reply_error (self, msg, 404, "the agent is gone");
        return;
    }
    const char *reason = ah_msg_str (msg, "reason");
    ah_info (AREA, "%s (%s): %s -> %s%s%s", row.name, row.id, row.state, to,
             reason ? ", reason: " : "", reason ? reason : "");
    s_reply_state (self, msg, 202, &row, to);
    track_t *track = s_track (self, row.id);
    if (track)
        track->hello_deadline = 0;
    if (s_lookup (self, row.id, &row) == 1)
        s_launch_for_row (self, &row);
}

static void s_agent_create (self_t *self, const ah_msg_t *msg)
{
    const char *name = ah_msg_str (msg, "name");
    if (!s_name_ok (name)) {
        s_reply_error (self, msg, 400, "name: want 1..63 of [a-z0-9._-], starting with a letter or digit");
        return;
    }
    const char *tenant = "default";
    if (s_opt_str (msg, "tenant", &tenant) < 0 || !s_name_ok (tenant)) {
        s_reply_error (self, msg, 400, "tenant: want a name like [a-z0-9][a-z0-9._-]{0,62}");
        return;
    }
    desired_t asked, d;
    if (s_desired (self, msg, &asked))
        return;
    memset (&d, 0, sizeof d);
    row_t row;
    sqlite3_stmt *st = ah_store_prepare (self->store, "SELECT count(*) FROM agents WHERE name = :name");
    int taken = -1;
    if (st && !ah_store_bind_text (st, ":name", name) && ah_store_step (self->store, st) == SQLITE_ROW)
        taken = sqlite3_column_int (st, 0) > 0;
    if (st)
        sqlite3_reset (st);
    if (taken) {
        char text [128];
        snprintf (text, sizeof text, "an agent named '%s' exists already", name);
        s_reply_error (self, msg, taken > 0 ? 409 : 500,
                       taken > 0 ? text : "cannot read the agents table (see the server log)");
        return;
    }
    char *why = NULL;
    int admit = s_admit (self, "create", name, tenant, NULL, &asked, &d, &why);
    if (admit) {
        s_reply_error (self, msg, admit > 0 ? 422 : 500, why ? why : "refused");
        free (why);
        return;
    }
    char id [ID_LEN + 1];
    if (ah_token_id (id, sizeof id, ID_LEN)) {
        s_reply_error (self, msg, 500, "no entropy for an agent id");
        return;
    }
    int64_t now = ah_store_now_ms ();
    bool ok = ah_store_begin (self->store) == 0;
    st = ok ? ah_store_prepare (self->store,
        "INSERT INTO agents (id, name, tenant, image, cpus, memory_mb, idle_minutes, created_at)"
        " VALUES (:id, :name, :tenant, :image, :cpus, :mem, :idle, :now)") : NULL;
    ok = st && !ah_store_bind_text (st, ":id", id) && !ah_store_bind_text (st, ":name", name)
        && !ah_store_bind_text (st, ":tenant", tenant) && !ah_store_bind_text (st, ":image", d.image)
        && !ah_store_bind_double (st, ":cpus", d.cpus) && !ah_store_bind_int64 (st, ":mem", d.memory_mb)
        && !ah_store_bind_double (st, ":idle", d.idle_minutes) && !ah_store_bind_int64 (st, ":now", now)
        && ah_store_step (self->store, st) == SQLITE_DONE;
    if (st)
        sqlite3_reset (st);
    st = ok ? ah_store_prepare (self->store,
        "INSERT INTO sandboxes (agent_id, state, op, op_started_at, image, cpus, memory_mb, updated_at)"
        " VALUES (:id, 'creating', 'create', :now, :image, :cpus, :mem, :now)") : NULL;
    ok = st && !ah_store_bind_text (st, ":id", id) && !ah_store_bind_int64 (st, ":now", now)
        && !ah_store_bind_text (st, ":image", d.image) && !ah_store_bind_double (st, ":cpus", d.cpus)
        && !ah_store_bind_int64 (st, ":mem", d.memory_mb)
        && ah_store_step (self->store, st) == SQLITE_DONE;
    if (st)
        sqlite3_reset (st);
    if (!ok || ah_store_commit (self->store)) {
        ah_store_rollback (self->store);
        s_reply_error (self, msg, 500, "cannot insert the agent (see the server log)");
        return;
    }
    ah_info (AREA, "created agent '%s' (%s), image %s, %g cpus, %lld MB", name, id, d.image,
             d.cpus, (long long) d.memory_mb);
    ah_msg_t *reply = ah_msg_reply_ok (msg);
    ah_msg_set_int (reply, "status", 201);
    ah_msg_set_str (reply, "agent_id", id);
    ah_msg_set_str (reply, "name", name);
    ah_msg_set_str (reply, "state", "creating");
    s_reply (self, msg, reply);
    s_publish (self, id, "creating", "create", NULL);
    if (s_lookup (self, id, &row) == 1)
        s_launch (self, &row, "create", false);
}

static void s_agent_update (self_t *self, const ah_msg_t *msg)
{
    row_t row;
    if (s_find (self, msg, "agent", &row) != 1)
        return;
    desired_t asked, d = { .cpus = row.cpus, .memory_mb = row.memory_mb, .idle_minutes = row.idle_minutes };
    snprintf (d.image, sizeof d.image, "%s", row.image);
    if (s_desired (self, msg, &asked))
        return;
    if (ah_msg_has (msg, "tenant")) {
        s_reply_error (self, msg, 400, "tenant: an agent cannot change tenant");
        return;
    }
    if (streq (row.state, "destroying")) {
        s_reply_conflict (self, msg, &row, "update", "any state but destroying");
        return;
    }
    char *why = NULL;
    int admit = s_admit (self, "update", row.name, row.tenant, row.id, &asked, &d, &why);
    if (admit) {
        s_reply_error (self, msg, admit > 0 ? 422 : 500, why ? why : "refused");
        free (why);
        return;
    }
    //  Desired values change at once (idle_minutes takes effect at once);
    //  the sandbox keeps what it was built from until the next rebuild.
    bool ok = ah_store_begin (self->store) == 0;
    sqlite3_stmt *st = ok ? ah_store_prepare (self->store,
        "UPDATE agents SET image = :image, cpus = :cpus, memory_mb = :mem, idle_minutes = :idle"
        " WHERE id = :id") : NULL;
    ok = st && !ah_store_bind_text (st, ":image", d.image) && !ah_store_bind_double (st, ":cpus", d.cpus)
        && !ah_store_bind_int64 (st, ":mem", d.memory_mb) && !ah_store_bind_double (st, ":idle", d.idle_minutes)
        && !ah_store_bind_text (st, ":id", row.id) && ah_store_step (self->store, st) == SQLITE_DONE;
    if (st)
        sqlite3_reset (st);
    ok = ok && s_run (self,
        "UPDATE sandboxes SET needs_rebuild = (SELECT a.image <> sandboxes.image OR a.cpus <> sandboxes.cpus"
        "  OR a.memory_mb <> sandboxes.memory_mb FROM agents a WHERE a.id = sandboxes.agent_id)"
        " WHERE agent_id = :id", row.id) == 0;
    if (!ok || ah_store_commit (self->store)) {
        ah_store_rollback (self->store);
        s_reply_error (self, msg, 500, "cannot update the agent (see the server log)");
        return;
    }
    s_lookup (self, row.id, &row);
    ah_msg_t *reply = ah_msg_reply_ok (msg);
    ah_msg_set_int (reply, "status", 200);
    ah_msg_set_str (reply, "agent_id", row.id);
    ah_msg_set_str (reply, "name", row.name);
    ah_msg_set_str (reply, "state", row.state);
    ah_msg_set_str (reply, "image", row.image);
    ah_msg_set_double (reply, "cpus", row.cpus);
    ah_msg_set_int (reply, "memory_mb", row.memory_mb);
    ah_msg_set_double (reply, "idle_minutes", row.idle_minutes);
    ah_msg_set_bool (reply, "needs_rebuild", row.needs_rebuild);
    s_reply (self, msg, reply);
}

//  TUNNEL_LOST {agent_id, reason, fatal}: a connection that redialling
//  cannot mend (a protocol version mismatch) puts the sandbox in error
//  with the reason, and stops it; a passing loss is left to sandboxd's
//  reconnect and the reconciler.
static void s_tunnel_lost (self_t *self, const ah_msg_t *msg)
{
    const char *id = ah_msg_str (msg, "agent_id");
    const char *reason = ah_msg_str (msg, "reason");
    if (!id) {
        ah_warn (AREA, "TUNNEL_LOST from '%s' without agent_id", ah_msg_peer (msg));
        return;
    }
    if (!ah_msg_bool (msg, "fatal", false)) {
        ah_info (AREA, "%s: tunnel connection lost (%s); sandboxd will redial", id, reason ? reason : "?");
        return;
    }
    if (s_move (self, id, "state IN ('starting','running')", "error", "start",
                reason ? reason : "the sandbox's tunnel failed") == 1) {
        track_t *track = zhashx_lookup (self->tracks, id);
        if (track)
            track->hello_deadline = 0;
        row_t row;
        if (s_lookup (self, id, &row) == 1)
            s_launch (self, &row, "stop", true);
    }
}

static void s_hello (self_t *self, const ah_msg_t *msg)
{
    const char *id = ah_msg_str (msg, "agent_id");
    if (!id) {
        ah_warn (AREA, "SANDBOX_HELLO from '%s' without agent_id", ah_msg_peer (msg));
        return;
    }
    if (s_move (self, id, "state = 'starting'", "running", NULL, NULL) == 1) {
        track_t *track = zhashx_lookup (self->tracks, id);
        if (track)
            track->hello_deadline = 0;
        ah_info (AREA, "%s: sandboxd said hello; running", id);
    }
    else
        ah_debug (AREA, "%s: hello while not starting (ignored)", id);
}

static void s_observed (self_t *self, const ah_msg_t *msg)
{
    const char *id = ah_msg_str (msg, "agent_id");
    const char *source = ah_msg_str (msg, "source");
    if (!id || !ah_msg_has (msg, "exists") || !ah_msg_has (msg, "running")) {
        ah_warn (AREA, "SANDBOX_OBSERVED from '%s' without agent_id, exists and running",
                 ah_msg_peer (msg));
        return;
    }
    s_repair (self, id, ah_msg_bool (msg, "exists", true), ah_msg_bool (msg, "running", false),
              (int) ah_msg_int (msg, "exit_code", -1), ah_msg_str (msg, "detail"),
              source && streq (source, "startup"));
}

static void s_flush_activity (self_t *self);

static void s_activity (self_t *self, const ah_msg_t *msg)
{
    const char *id = ah_msg_str (msg, "agent_id");
    if (!id || strlen (id) > ID_LEN) {
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
    if (!self->activity_flush_at)
        self->activity_flush_at = *at + AH_LIFECYCLE_ACTIVITY_FLUSH_MS;
    if (zhashx_size (self->activity) >= ACTIVITY_MAX)
        s_flush_activity (self);            //  bounded memory whatever the senders do
}

//  Activity is frequent (every turn, every keystroke batch): one
//  transaction per flush interval, not one per message.
static void s_flush_activity (self_t *self)
{
    self->activity_flush_at = 0;
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
    }
    zhashx_purge (self->activity);
}

//  A map the decoder refused may still say which request it was: find a
//  "req" key followed by an integer, so the sender gets its 400 instead
//  of a timeout. A byte scan (no unpacker: the map is untrusted and may
//  announce billions of elements); the first match wins.
static bool s_salvage_req (const uint8_t *p, size_t n, int64_t *req)
{
    for (size_t i = 0; i + 5 <= n; i++) {
        if (memcmp (p + i, "\xa3req", 4))
            continue;
        const uint8_t *v = p + i + 4;
        size_t left = n - i - 4;
        if (*v <= 0x7f) { *req = *v; return true; }
        int width = *v == 0xcc ? 1 : *v == 0xcd ? 2 : *v == 0xce ? 4 : *v == 0xcf ? 8 : 0;
        if (width && left > (size_t) width) {
            uint64_t x = 0;
            for (int k = 1; k <= width; k++)
                x = x << 8 | v [k];
            *req = (int64_t) x;
            return true;
        }
    }
    return false;
}

static void s_dispatch (self_t *self)
{
    //  Frames by hand (not ah_msg_recv) so a bad map can still be answered.
    zmsg_t *frames = zmsg_recv (self->bus);
    if (!frames)
        return;
    char *peer = zmsg_size (frames) == 3 ? zframe_strdup (zmsg_first (frames)) : NULL;
    char *type = peer ? zframe_strdup (zmsg_next (frames)) : NULL;
    zframe_t *body = type ? zmsg_next (frames) : NULL;
    char *err = NULL;
    ah_msg_t *msg = NULL;
    if (!body)
        ah_warn (AREA, "dropped a message of %zu frames (want [sender][type][map])", zmsg_size (frames));
    else
    if (strlen (type) == 0 || strlen (type) > AH_MSG_MAX_TYPE)
        ah_warn (AREA, "dropped a message from '%s' with a bad type frame", peer);
    else
    if (!(msg = ah_msg_decode (type, zframe_data (body), zframe_size (body), &err))) {
        ah_warn (AREA, "malformed %s from '%s': %s", type, peer, err ? err : "?");
        int64_t req;
        if (strcmp (type, "REPLY") && s_salvage_req (zframe_data (body), zframe_size (body), &req)) {
            ah_msg_t *stub = ah_msg_new (type);
            ah_msg_set_int (stub, "req", req);
            ah_msg_set_peer (stub, peer);
            ah_msg_t *reply = ah_msg_reply_error (stub, 400, "malformed %s: %s", type, err ? err : "?");
            s_reply (self, stub, reply);
            ah_msg_destroy (&stub);
        }
    }
    else
        ah_msg_set_peer (msg, peer);
    free (err);
    zstr_free (&peer);
    zstr_free (&type);
    zmsg_destroy (&frames);
    if (!msg)
        return;
    const char *mtype = ah_msg_type (msg);
    if (streq (mtype, "AGENT_CREATE"))
        s_agent_create (self, msg);
    else
    if (streq (mtype, "AGENT_UPDATE"))
        s_agent_update (self, msg);
    else
    if (streq (mtype, "SANDBOX_HELLO"))
        s_hello (self, msg);
    else
    if (streq (mtype, "TUNNEL_LOST"))
        s_tunnel_lost (self, msg);
    else
    if (streq (mtype, "SANDBOX_OBSERVED"))
        s_observed (self, msg);
    else
    if (streq (mtype, "AGENT_ACTIVITY"))
        s_activity (self, msg);
    else
    if (streq (mtype, "REPLY"))
        ;                               //  nothing we send asks for one
    else
    if (streq (mtype, "POLICY_RELOAD")) {
        if (ah_policy_reload (self->policy, true) < 0)
            ah_warn (AREA, "limits.lua not reloaded, the previous version stays: %s",
                     ah_policy_error (self->policy));
    }
    else {
        const transition_t *tr = NULL;
        for (size_t i = 0; i < sizeof s_transitions / sizeof s_transitions [0]; i++)
            if (streq (mtype, s_transitions [i].type))
                tr = &s_transitions [i];
        if (tr)
            s_transition (self, msg, tr);
        else {
            ah_warn (AREA, "unknown message type %s from '%s'", mtype, ah_msg_peer (msg));
            char text [128];
            snprintf (text, sizeof text, "lifecycle does not handle %s", mtype);
            s_reply_error (self, msg, 400, text);
        }
    }
    ah_msg_destroy (&msg);
}

//  Transitional rows left by a previous run, and running ones (which may
//  have stopped while we were away): look at each through the driver,
//  then repair (s_repair, startup = true). The reconciler's start-up pass
//  says the same; whichever comes second finds the row settled.
static void s_startup_scan (self_t *self)
{
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT agent_id FROM sandboxes"
        " WHERE state IN ('creating','starting','running','stopping','rebuilding','destroying')");
    if (!st)
        return;
    zlist_t *ids = zlist_new ();
    zlist_autofree (ids);
    while (ah_store_step (self->store, st) == SQLITE_ROW)
        zlist_append (ids, (void *) sqlite3_column_text (st, 0));
    sqlite3_reset (st);
    for (const char *id = zlist_first (ids); id; id = zlist_next (ids)) {
        row_t row;
        if (s_lookup (self, id, &row) == 1) {
            ah_info (AREA, "%s was left %s: looking at it to finish the %s", id, row.state, row.op);
            s_launch (self, &row, "inspect", false);
        }
    }
    zlist_destroy (&ids);
}

// --------------------------------------------------------------------------
//  The actor

static void s_track_free (void **item)
{
    free (*item);
    *item = NULL;
}

static void s_self_destroy (self_t *self)
{
    //  Driver calls in flight own their jobs until they end: wait for them.
    if (self->tracks)
        for (track_t *t = zhashx_first (self->tracks); t; t = zhashx_next (self->tracks))
            if (t->job) {
                ah_info (AREA, "waiting for %s of %s to end", t->job->op, t->job->agent_id);
                pthread_join (t->job->thread, NULL);
                s_job_free (&t->job);
            }
    zhashx_destroy (&self->tracks);
    zhashx_destroy (&self->activity);
    zpoller_destroy (&self->poller);
    zsock_destroy (&self->results);
    zsock_destroy (&self->bus);
    ah_store_close (&self->store);
    zlist_destroy (&self->subscribers);
    ah_policy_destroy (&self->policy);
}

static int s_self_init (self_t *self, zsock_t *pipe, const ah_lifecycle_args_t *a)
{
    self->pipe = pipe;
    if (!a || !a->config || !a->driver || !a->db_path) {
        ah_error (AREA, "started without config, driver or database path");
        return -1;
    }
    self->config = a->config;
    self->driver = a->driver;
    self->hello_timeout_ms = a->hello_timeout_ms > 0 ? a->hello_timeout_ms : AH_LIFECYCLE_HELLO_TIMEOUT_MS;
    self->tunnel_port = s_listen_port (a->config->tunnel_listen);
    self->subscribers = zlist_new ();
    zlist_autofree (self->subscribers);
    for (const char **s = a->subscribers; s && *s; s++) {
        zlist_append (self->subscribers, (void *) *s);
        if (streq (*s, "tunnel"))
            self->tunnel_subscribed = true;
    }
    self->tracks = zhashx_new ();
    zhashx_set_destructor (self->tracks, s_track_free);
    self->activity = zhashx_new ();
    zhashx_set_destructor (self->activity, s_track_free);

    char *err = NULL;
    self->store = ah_store_open (a->db_path, false, &err);
    if (!self->store) {
        ah_error (AREA, "cannot open the database %s: %s", a->db_path, err ? err : "?");
        free (err);
        return -1;
    }
    //  Unique per live actor: its own address (no counter shared between threads).
    snprintf (self->endpoint, sizeof self->endpoint, "inproc://agenthold-lifecycle-%p", (void *) self);
    self->results = zsock_new (ZMQ_PULL);
    if (!self->results || zsock_bind (self->results, "%s", self->endpoint) != 0) {
        ah_error (AREA, "cannot bind %s", self->endpoint);
        return -1;
    }
    //  Our own policy host (it belongs to this thread): limits.lua.
    self->policy = ah_policy_new (a->config->lua_dir, "limits.lua", "lifecycle", self->store, &err);
    if (!self->policy) {
        ah_error (AREA, "cannot load the admit policy: %s", err ? err : "?");
        free (err);
        return -1;
    }
    self->bus = ah_bus_connect ("lifecycle");
    if (!self->bus) {
        ah_error (AREA, "cannot connect to the bus at %s", AH_BUS_ENDPOINT);
        return -1;
    }
    self->poller = zpoller_new (pipe, self->bus, self->results, NULL);
    return self->poller ? 0 : -1;
}

//  How long the poller may sleep: until the next hello deadline or flush.
static int s_timeout (self_t *self)
{
    int64_t next = self->activity_flush_at;
    for (track_t *t = zhashx_first (self->tracks); t; t = zhashx_next (self->tracks))
        if (t->hello_deadline && (!next || t->hello_deadline < next))
            next = t->hello_deadline;
    if (!next)
        return -1;
    int64_t wait = next - ah_store_now_ms ();
    return wait < 0 ? 0 : wait > 60000 ? 60000 : (int) wait;
}

void ah_lifecycle_actor (zsock_t *pipe, void *args)
{
    self_t self;
    memset (&self, 0, sizeof self);
    if (s_self_init (&self, pipe, args)) {
        s_self_destroy (&self);
        zsock_signal (pipe, 1);
        return;
    }
    ah_info (AREA, "ready: driver %s%s, hello timeout %d ms", self.driver->name,
             self.driver->waits_for_hello ? " (waits for sandboxd's hello)" : "", self.hello_timeout_ms);
    zsock_signal (pipe, 0);
    s_startup_scan (&self);

    while (true) {
        void *which = zpoller_wait (self.poller, s_timeout (&self));
        if (which == pipe) {
            char *cmd = zstr_recv (pipe);
            bool term = !cmd || streq (cmd, "$TERM");
            zstr_free (&cmd);
            if (term)
                break;
        }
        else
        if (which == self.bus)
            s_dispatch (&self);
        else
        if (which == self.results)
            s_job_done (&self);
        else
        if (zpoller_terminated (self.poller))
            break;
        int64_t now = ah_store_now_ms ();
        if (self.activity_flush_at && self.activity_flush_at <= now)
            s_flush_activity (&self);
        s_check_deadlines (&self);
    }
    s_flush_activity (&self);
    s_self_destroy (&self);
}
