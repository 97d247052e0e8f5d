/*  actors/recorder.c: the audit trail (see recorder.h).

    DESIGN. An actor (common/actor.h) owning one SQLite connection; bus
    name "recorder". Incoming rows are validated, capped and queued in
    memory (self->pending); a flush writes them all in one transaction
    when flush_rows are pending, when the oldest has waited flush_ms (a
    timer armed by the first pending row), on FLUSH and on $TERM.
    Requests that asked for an answer (OP_RECORD with "req") are answered
    after the commit that made their row durable. If the database refuses
    a flush (busy, disk full) the rows stay queued and the timer retries
    flush_ms later; past AH_RECORDER_MAX_PENDING new rows are dropped and
    counted, so memory stays bounded.                                   */
#include "actors/recorder.h"
#include "common/log.h"
#include "common/msg.h"
#include "store/store.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AH_RECORDER_MAX_PENDING  10000
#define AH_RECORDER_MAX_LIST     1000
#define AH_RECORDER_SWEEP_MS     (86400 * 1000)     //  daily, and at start
#define MAX_ACTOR   128
#define MAX_KIND    64
#define MAX_AGENT   64
#define MAX_DETAIL  4096
#define MAX_ERROR   1024
#define MAX_RUN     128

typedef struct {
    int64_t at;
    char   *agent_id;               //  NULL allowed
    char   *tenant;                 //  NULL: the agent's, when there is one
    char   *agent_name;             //  NULL: the agent's, when there is one
    char   *run;                    //  NULL allowed
    int64_t bytes;                  //  -1: none
    char   *actor;
    char   *kind;
    char   *detail;                 //  NULL allowed
    bool    ok;
    char   *error;                  //  NULL allowed
    //  Who waits for the commit: peer name and req, or peer NULL.
    char   *reply_to;
    int64_t req;
} s_row_t;

typedef struct {
    ah_actor_t *actor;
    ah_store_t *store;
    s_row_t    *pending;
    size_t      pending_count;
    size_t      pending_alloc;
    int         flush_timer;        //  armed while rows are pending; 0 when not
    int64_t     dropped;            //  rows dropped since the last warning
    int         flush_rows;
    int         flush_ms;
    int64_t     retention_ms;
    zhashx_t   *agents;             //  agent id -> s_agent_t, as first seen
    int64_t     clock_offset_ms;    //  tests: what the sweep takes for now (SWEEP)
    int64_t     swept_total;        //  rows deleted by retention since start
    int64_t     sweeps;
} self_t;

#define MAX_AGENTS_KNOWN   100000

typedef struct {
    char *tenant;
    char *name;
} s_agent_t;

static void
s_agent_free (void **item)
{
    s_agent_t *a = *item;
    if (a) {
        free (a->tenant);
        free (a->name);
        free (a);
        *item = NULL;
    }
}

//  The tenant and name of an agent, looked up when its first row arrives
//  and kept: the rows that follow a destroy (its last states, the API's
//  own record) arrive once the agent is gone, and still belong to its
//  tenant and carry its name. NULL when the agent was never seen.
static const s_agent_t *
s_agent_of (self_t *self, const char *agent_id)
{
    const s_agent_t *known = zhashx_lookup (self->agents, agent_id);
    if (known)
        return known;
    sqlite3_stmt *st = ah_store_prepare (self->store, "SELECT tenant, name FROM agents WHERE id = :id");
    if (!st || ah_store_bind_text (st, ":id", agent_id))
        return NULL;
    s_agent_t *a = NULL;
    if (ah_store_step (self->store, st) == SQLITE_ROW && sqlite3_column_text (st, 0)
    &&  (a = calloc (1, sizeof *a))) {
        a->tenant = strdup ((const char *) sqlite3_column_text (st, 0));
        a->name = sqlite3_column_text (st, 1) ? strdup ((const char *) sqlite3_column_text (st, 1)) : NULL;
    }
    sqlite3_reset (st);
    if (!a)
        return NULL;
    if (zhashx_size (self->agents) >= MAX_AGENTS_KNOWN)
        zhashx_purge (self->agents);
    zhashx_update (self->agents, agent_id, a);
    return a;
}

static void
s_row_free (s_row_t *row)
{
    free (row->agent_id);
    free (row->tenant);
    free (row->agent_name);
    free (row->run);
    free (row->actor);
    free (row->kind);
    free (row->detail);
    free (row->error);
    free (row->reply_to);
    memset (row, 0, sizeof *row);
}

//  A copy of s capped at max bytes, cut back to a UTF-8 boundary and
//  marked, so an over-long command line is recorded rather than lost.
static char *
s_capped (const char *s, size_t max)
{
    if (!s)
        return NULL;
    size_t len = strlen (s);
    if (len <= max)
        return strdup (s);
    size_t cut = max - 3;
    while (cut > 0 && ((unsigned char) s [cut] & 0xC0) == 0x80)
        cut--;
    char *copy = malloc (cut + 4);
    if (copy) {
        memcpy (copy, s, cut);
        memcpy (copy + cut, "...", 4);
    }
    return copy;
}

static void s_on_flush_timer (void *self_, void *arg);

//  The pending rows wait at most flush_ms: the timer runs while any do.
static void
s_arm (self_t *self)
{
    if (!self->flush_timer)
        self->flush_timer = ah_actor_timer (self->actor, self->flush_ms, 0, s_on_flush_timer, NULL);
}

//  Write every pending row in one transaction. 0 / -1 (rows stay queued).
static int
s_flush (self_t *self)
{
    if (self->pending_count == 0)
        return 0;
    if (ah_store_begin (self->store) != 0) {
        ah_warn ("recorder", "cannot begin a transaction; %zu rows stay queued", self->pending_count);
        s_arm (self);
        return -1;
    }
    sqlite3_stmt *stmt = ah_store_prepare (self->store,
        "INSERT INTO operations (at, agent_id, tenant, agent_name, run, bytes, actor, kind, detail, ok, error)"
        " VALUES (:at, :agent_id, coalesce (:tenant, (SELECT tenant FROM agents WHERE id = :agent_id)),"
        " coalesce (:agent_name, (SELECT name FROM agents WHERE id = :agent_id)), :run, :bytes,"
        " :actor, :kind, :detail, :ok, :error)");
    bool failed = stmt == NULL;
    for (size_t i = 0; !failed && i < self->pending_count; i++) {
        s_row_t *row = &self->pending [i];
        sqlite3_reset (stmt);
        sqlite3_clear_bindings (stmt);
        if (ah_store_bind_int64 (stmt, ":at", row->at)
        ||  ah_store_bind_text (stmt, ":agent_id", row->agent_id)
        ||  ah_store_bind_text (stmt, ":tenant", row->tenant)
        ||  ah_store_bind_text (stmt, ":agent_name", row->agent_name)
        ||  ah_store_bind_text (stmt, ":run", row->run)
        ||  (row->bytes >= 0 ? ah_store_bind_int64 (stmt, ":bytes", row->bytes)
                             : ah_store_bind_null (stmt, ":bytes"))
        ||  ah_store_bind_text (stmt, ":actor", row->actor)
        ||  ah_store_bind_text (stmt, ":kind", row->kind)
        ||  ah_store_bind_text (stmt, ":detail", row->detail)
        ||  ah_store_bind_int64 (stmt, ":ok", row->ok ? 1 : 0)
        ||  ah_store_bind_text (stmt, ":error", row->error)
        ||  ah_store_step (self->store, stmt) != SQLITE_DONE)
            failed = true;
    }
    if (stmt)
        sqlite3_reset (stmt);
    if (failed || ah_store_commit (self->store) != 0) {
        ah_store_rollback (self->store);
        ah_warn ("recorder", "flush failed; %zu rows stay queued", self->pending_count);
        s_arm (self);
        return -1;
    }
    ah_debug ("recorder", "flushed %zu rows", self->pending_count);
    for (size_t i = 0; i < self->pending_count; i++) {
        s_row_t *row = &self->pending [i];
        if (row->reply_to) {
            ah_msg_t *reply = ah_msg_new ("REPLY");
            ah_msg_set_int (reply, "req", row->req);
            ah_msg_set_bool (reply, "ok", true);
            ah_msg_set_int (reply, "status", 201);
            ah_actor_send (self->actor, row->reply_to, &reply);
        }
        s_row_free (row);
    }
    self->pending_count = 0;
    ah_actor_timer_end (self->actor, self->flush_timer);
    self->flush_timer = 0;
    if (self->dropped) {
        ah_warn ("recorder", "%lld audit rows were dropped while the database refused writes",
                 (long long) self->dropped);
        self->dropped = 0;
    }
    return 0;
}

//  Queue a row (takes ownership of the strings in *row). 0 / -1 when full.
static int
s_queue (self_t *self, s_row_t *row)
{
    if (self->pending_count >= AH_RECORDER_MAX_PENDING) {
        self->dropped++;
        s_row_free (row);
        return -1;
    }
    if (self->pending_count == self->pending_alloc) {
        size_t alloc = self->pending_alloc ? self->pending_alloc * 2 : 64;
        s_row_t *grown = realloc (self->pending, alloc * sizeof (s_row_t));
        if (!grown) {
            self->dropped++;
            s_row_free (row);
            return -1;
        }
        self->pending = grown;
        self->pending_alloc = alloc;
    }
    s_arm (self);
    self->pending [self->pending_count++] = *row;
    if ((int) self->pending_count >= self->flush_rows)
        s_flush (self);
    return 0;
}

//  An optional string field: absent or nil is NULL; another type is an error.
static bool
s_opt_str (const ah_msg_t *msg, const char *key, const char **value)
{
    *value = NULL;
    if (!ah_msg_has (msg, key) || ah_msg_is_nil (msg, key))
        return true;
    *value = ah_msg_str (msg, key);
    return *value != NULL;
}

static void
s_refuse (self_t *self, ah_msg_t *msg, const char *why)
{
    ah_warn ("recorder", "%s from '%s' refused: %s", ah_msg_type (msg), ah_msg_peer (msg), why);
    ah_actor_reply_error (self->actor, msg, 400, "%s: %s", ah_msg_type (msg), why);
}

static void
s_on_record (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *actor = ah_msg_str (msg, "actor");
    const char *kind = ah_msg_str (msg, "kind");
    const char *agent_id, *detail, *error, *tenant, *agent_name, *run;
    if (!actor || !*actor || strlen (actor) > MAX_ACTOR) {
        s_refuse (self, msg, "\"actor\" must be a string of 1 to 128 characters");
        return;
    }
    if (!kind || !*kind || strlen (kind) > MAX_KIND) {
        s_refuse (self, msg, "\"kind\" must be a string of 1 to 64 characters");
        return;
    }
    if (!s_opt_str (msg, "agent_id", &agent_id) || (agent_id && strlen (agent_id) > MAX_AGENT)) {
        s_refuse (self, msg, "\"agent_id\" must be a string of at most 64 characters");
        return;
    }
    if (!s_opt_str (msg, "tenant", &tenant) || (tenant && strlen (tenant) > MAX_AGENT)) {
        s_refuse (self, msg, "\"tenant\" must be a string of at most 64 characters");
        return;
    }
    if (!s_opt_str (msg, "agent_name", &agent_name) || (agent_name && strlen (agent_name) > MAX_AGENT)) {
        s_refuse (self, msg, "\"agent_name\" must be a string of at most 64 characters");
        return;
    }
    if (!s_opt_str (msg, "run", &run) || (run && (!*run || strlen (run) > MAX_RUN))) {
        s_refuse (self, msg, "\"run\" must be a string of 1 to 128 characters");
        return;
    }
    if (!s_opt_str (msg, "detail", &detail) || !s_opt_str (msg, "error", &error)) {
        s_refuse (self, msg, "\"detail\" and \"error\" must be strings");
        return;
    }
    //  A value of another type gives back the default, so asking with both
    //  defaults tells a real boolean from anything else.
    if (!ah_msg_has (msg, "ok") || ah_msg_bool (msg, "ok", false) != ah_msg_bool (msg, "ok", true)) {
        s_refuse (self, msg, "\"ok\" must be a boolean");
        return;
    }
    int64_t at = ah_msg_int (msg, "at", 0);
    if (ah_msg_has (msg, "at") && at <= 0) {
        s_refuse (self, msg, "\"at\" must be a positive integer (ms since the epoch)");
        return;
    }
    int64_t bytes = ah_msg_int (msg, "bytes", -1);
    if (ah_msg_has (msg, "bytes") && !ah_msg_is_nil (msg, "bytes") && bytes < 0) {
        s_refuse (self, msg, "\"bytes\" must be an integer 0 or more");
        return;
    }
    const s_agent_t *known = agent_id ? s_agent_of (self, agent_id) : NULL;
    if (!tenant && known)
        tenant = known->tenant;
    if (!agent_name && known)
        agent_name = known->name;
    s_row_t row = {
        .at = at > 0 ? at : ah_store_now_ms (),
        .agent_id = agent_id ? strdup (agent_id) : NULL,
        .tenant = tenant ? strdup (tenant) : NULL,
        .agent_name = agent_name ? strdup (agent_name) : NULL,
        .run = run ? strdup (run) : NULL,
        .bytes = bytes,
        .actor = strdup (actor),
        .kind = strdup (kind),
        .detail = s_capped (detail, MAX_DETAIL),
        .ok = ah_msg_bool (msg, "ok", false),
        .error = s_capped (error, MAX_ERROR),
    };
    if (ah_msg_has (msg, "req")) {
        row.reply_to = strdup (ah_msg_peer (msg));
        row.req = ah_msg_int (msg, "req", 0);
    }
    if (s_queue (self, &row) != 0)
        ah_actor_reply_error (self->actor, msg, 503, "the audit queue is full (the database refuses writes)");
}

//  Lifecycle's state events become rows of kind "state"; the actor is
//  who caused the step ("by": a token, the sleeper, the reconciler, a
//  TTL), else the sender.
static void
s_on_state (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *agent_id = ah_msg_str (msg, "agent_id");
    const char *state = ah_msg_str (msg, "state");
    const char *op, *error, *by;
    if (!agent_id || !*agent_id || strlen (agent_id) > MAX_AGENT || !state || !*state
    ||  strlen (state) > 32 || !s_opt_str (msg, "op", &op) || !s_opt_str (msg, "error", &error)
    ||  !s_opt_str (msg, "by", &by)) {
        ah_warn ("recorder", "SANDBOX_STATE from '%s' without a valid agent_id and state: ignored",
                 ah_msg_peer (msg));
        return;
    }
    char detail [128];
    if (op && *op)
        snprintf (detail, sizeof detail, "%s (op %.64s)", state, op);
    else
        snprintf (detail, sizeof detail, "%s", state);
    const char *peer = ah_msg_peer (msg);
    if (!by || !*by || strlen (by) > MAX_ACTOR)
        by = peer && *peer ? peer : "lifecycle";
    const s_agent_t *known = s_agent_of (self, agent_id);
    s_row_t row = {
        .at = ah_store_now_ms (),
        .agent_id = strdup (agent_id),
        .tenant = known && known->tenant ? strdup (known->tenant) : NULL,
        .agent_name = known && known->name ? strdup (known->name) : NULL,
        .bytes = -1,
        .actor = strdup (by),
        .kind = strdup ("state"),
        .detail = strdup (detail),
        .ok = strcmp (state, "error") != 0,
        .error = s_capped (error, MAX_ERROR),
    };
    s_queue (self, &row);
}

//  OP_LIST: newest first, by id (the order rows were committed in), so a
//  page that starts below the last id seen stays correct however many
//  rows arrive meanwhile (keyset paging: "before" is an id). Pending
//  rows are flushed first so a caller sees everything recorded before
//  it asked.
static void
s_on_list (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *agent, *tenant, *kind, *run, *text;
    if (!s_opt_str (msg, "agent_id", &agent) || !s_opt_str (msg, "tenant", &tenant)
    ||  !s_opt_str (msg, "kind", &kind) || !s_opt_str (msg, "run", &run) || !s_opt_str (msg, "q", &text)) {
        s_refuse (self, msg, "\"agent_id\", \"tenant\", \"kind\", \"run\" and \"q\" must be strings");
        return;
    }
    if ((text && strlen (text) > 256) || (kind && strlen (kind) > MAX_KIND) || (run && strlen (run) > MAX_RUN)
    ||  (agent && strlen (agent) > MAX_AGENT)) {
        s_refuse (self, msg, "a filter is too long");
        return;
    }
    int64_t limit = ah_msg_int (msg, "limit", 100);
    int64_t before = ah_msg_int (msg, "before", INT64_MAX);
    bool failed = ah_msg_bool (msg, "failed", false);
    if (limit < 1 || limit > AH_RECORDER_MAX_LIST) {
        s_refuse (self, msg, "\"limit\" must be between 1 and 1000");
        return;
    }
    //  The text search is a substring of the path or command, or of the
    //  error: LIKE with its wildcards escaped.
    char like [600] = "";
    if (text) {
        size_t o = 0;
        like [o++] = '%';
        for (const char *c = text; *c && o < sizeof like - 3; c++) {
            if (*c == '%' || *c == '_' || *c == '\\')
                like [o++] = '\\';
            like [o++] = *c;
        }
        like [o++] = '%';
        like [o] = 0;
    }
    s_flush (self);
    sqlite3_stmt *stmt = ah_store_prepare (self->store,
        "SELECT id, at, agent_id, agent_name, tenant, run, actor, kind, detail, bytes, ok, error"
        " FROM operations"
        " WHERE (:agent IS NULL OR agent_id = :agent OR (agent_name = :agent AND agent_id IS NOT NULL))"
        //  A tenant's rows from its own creation on: what an earlier
        //  tenant of that name left and was not relabelled (a removal
        //  whose TENANT_REMOVED failed) stays out of sight.
        " AND (:tenant IS NULL OR (tenant = :tenant"
        "      AND at >= coalesce ((SELECT created_at FROM tenants WHERE name = :tenant), 0)))"
        " AND (:kind IS NULL OR kind = :kind)"
        " AND (:run IS NULL OR run = :run) AND (:failed = 0 OR ok = 0)"
        " AND (:like IS NULL OR detail LIKE :like ESCAPE '\\' OR error LIKE :like ESCAPE '\\')"
        " AND id < :before ORDER BY id DESC LIMIT :limit");
    if (!stmt || ah_store_bind_text (stmt, ":agent", agent) || ah_store_bind_text (stmt, ":tenant", tenant)
    ||  ah_store_bind_text (stmt, ":kind", kind) || ah_store_bind_text (stmt, ":run", run)
    ||  ah_store_bind_int64 (stmt, ":failed", failed ? 1 : 0)
    ||  ah_store_bind_text (stmt, ":like", text ? like : NULL)
    ||  ah_store_bind_int64 (stmt, ":before", before) || ah_store_bind_int64 (stmt, ":limit", limit)) {
        ah_actor_reply_error (self->actor, msg, 500, "cannot read the operations table");
        return;
    }
    //  Rows first into a buffer, then the array header in front of them.
    msgpack_sbuffer rows;
    msgpack_sbuffer_init (&rows);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &rows, msgpack_sbuffer_write);
    uint32_t count = 0;
    int64_t last_id = 0;
    static const char *names [] = { "id", "at", "agent_id", "agent_name", "tenant", "run", "actor",
                                    "kind", "detail", "bytes", "ok", "error" };
    enum { C_OK = 10, C_COUNT = 12 };
    int rc;
    while ((rc = ah_store_step (self->store, stmt)) == SQLITE_ROW) {
        msgpack_pack_map (&pk, C_COUNT);
        for (int c = 0; c < C_COUNT; c++) {
            msgpack_pack_str_with_body (&pk, names [c], strlen (names [c]));
            if (c == C_OK)
                sqlite3_column_int (stmt, c) ? msgpack_pack_true (&pk) : msgpack_pack_false (&pk);
            else if (sqlite3_column_type (stmt, c) == SQLITE_NULL)
                msgpack_pack_nil (&pk);
            else if (sqlite3_column_type (stmt, c) == SQLITE_INTEGER)
                msgpack_pack_int64 (&pk, sqlite3_column_int64 (stmt, c));
            else {
                const char *value = (const char *) sqlite3_column_text (stmt, c);
                msgpack_pack_str_with_body (&pk, value, strlen (value));
            }
        }
        last_id = sqlite3_column_int64 (stmt, 0);
        count++;
    }
    sqlite3_reset (stmt);
    ah_msg_t *reply;
    if (rc != SQLITE_DONE)
        reply = ah_msg_reply_error (msg, 500, "cannot read the operations table");
    else {
        msgpack_sbuffer all;
        msgpack_sbuffer_init (&all);
        msgpack_packer_init (&pk, &all, msgpack_sbuffer_write);
        msgpack_pack_array (&pk, count);
        msgpack_sbuffer_write (&all, rows.data, rows.size);
        reply = ah_msg_reply_ok (msg);
        ah_msg_set_int (reply, "status", 200);
        //  A full page may have more below it: the next page starts there.
        if (count == (uint32_t) limit)
            ah_msg_set_int (reply, "next", last_id);
        else
            ah_msg_set_nil (reply, "next");
        if (ah_msg_set_raw (reply, "operations", all.data, all.size) != 0) {
            ah_msg_destroy (&reply);
            reply = ah_msg_reply_error (msg, 500, "operations list too large");
        }
        msgpack_sbuffer_destroy (&all);
    }
    msgpack_sbuffer_destroy (&rows);
    ah_actor_reply (self->actor, msg, reply);
}

//  TENANT_REMOVED {req, tenant, at}: the tenant's rows, pending ones
//  first, and what is remembered of its agents, are relabelled
//  "<name> (removed <time>)", a label no tenant can take (a tenant's
//  name has no space), so a later tenant of the same name never reads
//  them (docs/api.md "Removing a tenant"). Messages reach us in the
//  order the bus took them: lifecycle's last rows of the tenant's
//  destroys came before the state that let the API remove it.
static void
s_on_tenant_removed (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *tenant = ah_msg_str (msg, "tenant");
    int64_t at = ah_msg_int (msg, "at", 0);
    if (!tenant || !*tenant || strlen (tenant) > MAX_AGENT || strchr (tenant, ' ') || at <= 0) {
        s_refuse (self, msg, "\"tenant\" must be a tenant's name and \"at\" a time (ms) > 0");
        return;
    }
    char label [MAX_AGENT + 48];
    time_t secs = (time_t) (at / 1000);
    struct tm tm;
    char when [32] = "";
    if (gmtime_r (&secs, &tm))
        strftime (when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf (label, sizeof label, "%s (removed %s.%03dZ)", tenant, when, (int) (at % 1000));
    if (s_flush (self) != 0) {
        ah_actor_reply_error (self->actor, msg, 503, "the audit trail cannot be written now: try again");
        return;
    }
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "UPDATE operations SET tenant = :label WHERE tenant = :tenant");
    int rc = st && !ah_store_bind_text (st, ":label", label) && !ah_store_bind_text (st, ":tenant", tenant)
           ? ah_store_step (self->store, st) : SQLITE_ERROR;
    int changed = rc == SQLITE_DONE ? ah_store_changes (self->store) : 0;
    if (st)
        sqlite3_reset (st);
    if (rc != SQLITE_DONE) {
        ah_actor_reply_error (self->actor, msg, 500, "cannot relabel the removed tenant's operations");
        return;
    }
    for (s_agent_t *a = zhashx_first (self->agents); a; a = zhashx_next (self->agents))
        if (a->tenant && streq (a->tenant, tenant)) {
            char *copy = strdup (label);
            if (copy) {
                free (a->tenant);
                a->tenant = copy;
            }
            else                    //  unknown beats the old name
                zstr_free (&a->tenant);
        }
    ah_info ("recorder", "tenant '%s' removed: %d audit rows kept as '%s'", tenant, changed, label);
    ah_msg_t *reply = ah_msg_reply_ok (msg);
    ah_msg_set_int (reply, "status", 200);
    ah_msg_set_str (reply, "label", label);
    ah_msg_set_int (reply, "relabelled", changed);
    ah_actor_reply (self->actor, msg, reply);
}

//  Retention: delete in batches, each its own short transaction, so the
//  other actors' writers never wait long for the database. The sweep is
//  recorded itself, with its count. Returns how many rows went.
static int64_t
s_sweep_now (self_t *self)
{
    int64_t now = ah_store_now_ms () + self->clock_offset_ms;
    int64_t cutoff = now - self->retention_ms;
    int64_t total = 0;
    bool failed = false;
    s_flush (self);
    while (true) {
        sqlite3_stmt *stmt = ah_store_prepare (self->store,
            "DELETE FROM operations WHERE id IN"
            " (SELECT id FROM operations WHERE at < :cutoff LIMIT 5000)");
        if (!stmt || ah_store_bind_int64 (stmt, ":cutoff", cutoff)) {
            failed = true;
            break;
        }
        int rc = ah_store_step (self->store, stmt);
        int n = rc == SQLITE_DONE ? ah_store_changes (self->store) : 0;
        sqlite3_reset (stmt);
        failed = rc != SQLITE_DONE;
        total += n;
        if (n < 5000)
            break;
    }
    double days = self->retention_ms / 86400000.0;
    if (total > 0)
        ah_info ("recorder", "retention: deleted %lld operations older than %g days", (long long) total, days);
    self->swept_total += total;
    self->sweeps++;
    if (total == 0 && !failed)
        return 0;                   //  a sweep that found nothing is not worth a row
    char detail [128];
    snprintf (detail, sizeof detail, "deleted %lld operations older than %g days", (long long) total, days);
    s_row_t row = {
        .at = now,
        .bytes = -1,
        .actor = strdup ("recorder"),
        .kind = strdup ("retention.sweep"),
        .detail = strdup (detail),
        .ok = !failed,
        .error = failed ? strdup ("the database refused the sweep (see the log)") : NULL,
    };
    s_queue (self, &row);
    return total;
}

static void
s_sweep (void *self_, void *arg)
{
    s_sweep_now (self_);
}

//  SWEEP [offset_ms]: sweep now, as if the clock said now + offset_ms
//  (tests move the clock forward; the offset stays for later sweeps);
//  answers the count deleted on the pipe as a string.
static void
s_cmd_sweep (void *self_, zmsg_t *cmd)
{
    self_t *self = self_;
    zframe_t *name = zmsg_first (cmd);
    zframe_t *offset = name ? zmsg_next (cmd) : NULL;
    if (offset) {
        char *text = zframe_strdup (offset);
        self->clock_offset_ms = text ? strtoll (text, NULL, 10) : 0;
        free (text);
    }
    int64_t total = s_sweep_now (self);
    zstr_sendf (ah_actor_pipe (self->actor), "%lld", (long long) total);
}

static void
s_on_flush_timer (void *self_, void *arg)
{
    self_t *self = self_;
    self->flush_timer = 0;          //  it fired; s_flush re-arms it on failure
    s_flush (self);
}

//  FLUSH: write what is pending now, answer signal 0 (1 if refused).
static void
s_cmd_flush (void *self_, zmsg_t *cmd)
{
    self_t *self = self_;
    zsock_signal (ah_actor_pipe (self->actor), s_flush (self) == 0 ? 0 : 1);
}

//  $TERM: the server stops every sender before us, but their last rows
//  may still be crossing the bus. Take what arrives until it has been
//  quiet for 50 ms (at most a second in all), then flush.
static void
s_on_term (void *self_)
{
    self_t *self = self_;
    ah_actor_drain (self->actor, 50, 1000);
    if (s_flush (self) != 0)
        ah_error ("recorder", "%zu audit rows could not be written at shutdown", self->pending_count);
}

static void
s_destroy (void *self_)
{
    self_t *self = self_;
    for (size_t i = 0; i < self->pending_count; i++)
        s_row_free (&self->pending [i]);
    free (self->pending);
    zhashx_destroy (&self->agents);
    ah_store_close (&self->store);
    free (self);
}

static void *
s_init (ah_actor_t *actor, void *args)
{
    const ah_recorder_args_t *a = args;
    self_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    *self = (self_t) {
        .actor = actor,
        .flush_rows = a && a->flush_rows > 0 ? a->flush_rows : 256,
        .flush_ms = a && a->flush_ms > 0 ? a->flush_ms : 200,
        .retention_ms = (int64_t) ((a && a->retention_days > 0 ? a->retention_days : 30) * 86400000.0),
    };
    self->agents = zhashx_new ();
    if (self->agents)
        zhashx_set_destructor (self->agents, s_agent_free);
    char *err = NULL;
    self->store = a && a->db_path ? ah_store_open (a->db_path, false, &err) : NULL;
    if (!self->store || !self->agents) {
        ah_actor_fail (actor, "cannot open the database: %s", err ? err : "no path given");
        free (err);
        s_destroy (self);
        return NULL;
    }
    s_sweep (self, NULL);
    ah_actor_timer (actor, AH_RECORDER_SWEEP_MS, AH_RECORDER_SWEEP_MS, s_sweep, NULL);
    return self;
}

static const ah_actor_handler_t s_handlers [] = {
    { "OP_RECORD", s_on_record },
    { "SANDBOX_STATE", s_on_state },
    { "OP_LIST", s_on_list },
    { "TENANT_REMOVED", s_on_tenant_removed },
    { NULL, NULL }
};

static const ah_actor_command_t s_commands [] = {
    { "FLUSH", s_cmd_flush },
    { "SWEEP", s_cmd_sweep },
    { NULL, NULL }
};

const ah_actor_def_t ah_recorder_actor = {
    .name = "recorder", .on_bus = true, .init = s_init, .destroy = s_destroy, .on_term = s_on_term,
    .handlers = s_handlers, .commands = s_commands,
};
