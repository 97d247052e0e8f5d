/*  actors/recorder.c: the audit trail (see recorder.h).

    DESIGN. One zactor thread owning one SQLite connection and one bus
    DEALER named "recorder". Incoming rows are validated, capped and
    queued in memory (self->pending); a flush writes them all in one
    transaction when flush_rows are pending, when the oldest has waited
    flush_ms, on FLUSH and on $TERM. Requests that asked for an answer
    (OP_RECORD with "req") are answered after the commit that made their
    row durable. If the database refuses a flush (busy, disk full) the rows
    stay queued and the next tick retries; past AH_RECORDER_MAX_PENDING
    new rows are dropped and counted, so memory stays bounded.          */
#include "actors/recorder.h"
#include "common/bus.h"
#include "common/log.h"
#include "common/msg.h"
#include "store/store.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#define AH_RECORDER_MAX_PENDING  10000
#define AH_RECORDER_MAX_LIST     1000
#define AH_RECORDER_SWEEP_MS     (3600 * 1000)
#define MAX_ACTOR   128
#define MAX_KIND    64
#define MAX_AGENT   64
#define MAX_DETAIL  4096
#define MAX_ERROR   1024

typedef struct {
    int64_t at;
    char   *agent_id;               //  NULL allowed
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
    zsock_t    *pipe;
    zsock_t    *bus;
    ah_store_t *store;
    s_row_t    *pending;
    size_t      pending_count;
    size_t      pending_alloc;
    int64_t     oldest_ms;          //  when the oldest pending row arrived (monotonic)
    int64_t     dropped;            //  rows dropped since the last warning
    int         flush_rows;
    int         flush_ms;
    int64_t     retention_ms;
    int64_t     next_sweep_ms;      //  monotonic
} self_t;

static void
s_row_free (s_row_t *row)
{
    free (row->agent_id);
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

static void
s_send_reply (self_t *self, ah_msg_t **reply_p, const char *to)
{
    if (ah_msg_send (reply_p, self->bus, to) != 0)
        ah_warn ("recorder", "could not send a REPLY to '%s'", to);
}

//  Write every pending row in one transaction. 0 / -1 (rows stay queued).
static int
s_flush (self_t *self)
{
    if (self->pending_count == 0)
        return 0;
    if (ah_store_begin (self->store) != 0) {
        ah_warn ("recorder", "cannot begin a transaction; %zu rows stay queued", self->pending_count);
        return -1;
    }
    sqlite3_stmt *stmt = ah_store_prepare (self->store,
        "INSERT INTO operations (at, agent_id, actor, kind, detail, ok, error)"
        " VALUES (:at, :agent_id, :actor, :kind, :detail, :ok, :error)");
    bool failed = stmt == NULL;
    for (size_t i = 0; !failed && i < self->pending_count; i++) {
        s_row_t *row = &self->pending [i];
        sqlite3_reset (stmt);
        sqlite3_clear_bindings (stmt);
        if (ah_store_bind_int64 (stmt, ":at", row->at)
        ||  ah_store_bind_text (stmt, ":agent_id", row->agent_id)
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
            s_send_reply (self, &reply, row->reply_to);
        }
        s_row_free (row);
    }
    self->pending_count = 0;
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
    if (self->pending_count == 0)
        self->oldest_ms = zclock_mono ();
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
    if (ah_msg_has (msg, "req")) {
        ah_msg_t *reply = ah_msg_reply_error (msg, 400, "%s: %s", ah_msg_type (msg), why);
        s_send_reply (self, &reply, ah_msg_peer (msg));
    }
}

static void
s_on_record (self_t *self, ah_msg_t *msg)
{
    const char *actor = ah_msg_str (msg, "actor");
    const char *kind = ah_msg_str (msg, "kind");
    const char *agent_id, *detail, *error;
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
    s_row_t row = {
        .at = at > 0 ? at : ah_store_now_ms (),
        .agent_id = agent_id ? strdup (agent_id) : NULL,
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
    if (s_queue (self, &row) != 0 && ah_msg_has (msg, "req")) {
        ah_msg_t *reply = ah_msg_reply_error (msg, 503, "the audit queue is full (the database refuses writes)");
        s_send_reply (self, &reply, ah_msg_peer (msg));
    }
}

//  Lifecycle's state events become rows of kind "state".
static void
s_on_state (self_t *self, ah_msg_t *msg)
{
    const char *agent_id = ah_msg_str (msg, "agent_id");
    const char *state = ah_msg_str (msg, "state");
    const char *op, *error;
    if (!agent_id || !*agent_id || strlen (agent_id) > MAX_AGENT || !state || !*state
    ||  strlen (state) > 32 || !s_opt_str (msg, "op", &op) || !s_opt_str (msg, "error", &error)) {
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
    s_row_t row = {
        .at = ah_store_now_ms (),
        .agent_id = strdup (agent_id),
        .actor = strdup (peer && *peer ? peer : "lifecycle"),
        .kind = strdup ("state"),
        .detail = strdup (detail),
        .ok = strcmp (state, "error") != 0,
        .error = s_capped (error, MAX_ERROR),
    };
    s_queue (self, &row);
}

//  OP_LIST: newest first; pending rows are flushed first so a caller sees
//  everything recorded before it asked.
static void
s_on_list (self_t *self, ah_msg_t *msg)
{
    const char *agent_id;
    if (!s_opt_str (msg, "agent_id", &agent_id)) {
        s_refuse (self, msg, "\"agent_id\" must be a string");
        return;
    }
    int64_t limit = ah_msg_int (msg, "limit", 100);
    int64_t before = ah_msg_int (msg, "before", INT64_MAX);
    if (limit < 1 || limit > AH_RECORDER_MAX_LIST) {
        s_refuse (self, msg, "\"limit\" must be between 1 and 1000");
        return;
    }
    s_flush (self);
    sqlite3_stmt *stmt = ah_store_prepare (self->store, agent_id
        ? "SELECT id, at, agent_id, actor, kind, detail, ok, error FROM operations"
          " WHERE agent_id = :agent_id AND at < :before ORDER BY at DESC, id DESC LIMIT :limit"
        : "SELECT id, at, agent_id, actor, kind, detail, ok, error FROM operations"
          " WHERE at < :before ORDER BY at DESC, id DESC LIMIT :limit");
    if (!stmt || (agent_id && ah_store_bind_text (stmt, ":agent_id", agent_id))
    ||  ah_store_bind_int64 (stmt, ":before", before) || ah_store_bind_int64 (stmt, ":limit", limit)) {
        ah_msg_t *reply = ah_msg_reply_error (msg, 500, "cannot read the operations table");
        s_send_reply (self, &reply, ah_msg_peer (msg));
        return;
    }
    //  Rows first into a buffer, then the array header in front of them.
    msgpack_sbuffer rows;
    msgpack_sbuffer_init (&rows);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &rows, msgpack_sbuffer_write);
    uint32_t count = 0;
    static const char *names [] = { "id", "at", "agent_id", "actor", "kind", "detail", "ok", "error" };
    int rc;
    while ((rc = ah_store_step (self->store, stmt)) == SQLITE_ROW) {
        msgpack_pack_map (&pk, 8);
        for (int c = 0; c < 8; c++) {
            msgpack_pack_str_with_body (&pk, names [c], strlen (names [c]));
            if (c == 6)
                sqlite3_column_int (stmt, c) ? msgpack_pack_true (&pk) : msgpack_pack_false (&pk);
            else if (sqlite3_column_type (stmt, c) == SQLITE_NULL)
                msgpack_pack_nil (&pk);
            else if (sqlite3_column_type (stmt, c) == SQLITE_INTEGER)
                msgpack_pack_int64 (&pk, sqlite3_column_int64 (stmt, c));
            else {
                const char *text = (const char *) sqlite3_column_text (stmt, c);
                msgpack_pack_str_with_body (&pk, text, strlen (text));
            }
        }
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
        if (ah_msg_set_raw (reply, "operations", all.data, all.size) != 0) {
            ah_msg_destroy (&reply);
            reply = ah_msg_reply_error (msg, 500, "operations list too large");
        }
        msgpack_sbuffer_destroy (&all);
    }
    msgpack_sbuffer_destroy (&rows);
    s_send_reply (self, &reply, ah_msg_peer (msg));
}

//  Retention: delete in batches, each its own short transaction, so the
//  other actors' writers never wait long for the database.
static void
s_sweep (self_t *self)
{
    self->next_sweep_ms = zclock_mono () + AH_RECORDER_SWEEP_MS;
    int64_t cutoff = ah_store_now_ms () - self->retention_ms;
    int64_t total = 0;
    while (true) {
        sqlite3_stmt *stmt = ah_store_prepare (self->store,
            "DELETE FROM operations WHERE id IN"
            " (SELECT id FROM operations WHERE at < :cutoff LIMIT 5000)");
        if (!stmt || ah_store_bind_int64 (stmt, ":cutoff", cutoff))
            break;
        int rc = ah_store_step (self->store, stmt);
        int n = rc == SQLITE_DONE ? ah_store_changes (self->store) : 0;
        sqlite3_reset (stmt);
        total += n;
        if (n < 5000)
            break;
    }
    if (total > 0)
        ah_info ("recorder", "retention: deleted %lld operations older than %.0f days",
                 (long long) total, self->retention_ms / 86400000.0);
}

static void
s_on_bus (self_t *self)
{
    char *err = NULL;
    ah_msg_t *msg = ah_msg_recv (self->bus, true, &err);
    if (!msg) {
        ah_warn ("recorder", "malformed message: %s", err ? err : "?");
        free (err);
        return;
    }
    const char *type = ah_msg_type (msg);
    if (streq (type, "OP_RECORD"))
        s_on_record (self, msg);
    else
    if (streq (type, "SANDBOX_STATE"))
        s_on_state (self, msg);
    else
    if (streq (type, "OP_LIST"))
        s_on_list (self, msg);
    else
    if (streq (type, "REPLY"))
        ;                           //  nothing we asked for: ignore
    else
        s_refuse (self, msg, "unknown message type for the recorder");
    ah_msg_destroy (&msg);
}

static void
s_destroy (self_t *self)
{
    for (size_t i = 0; i < self->pending_count; i++)
        s_row_free (&self->pending [i]);
    free (self->pending);
    zsock_destroy (&self->bus);
    ah_store_close (&self->store);
}

void
ah_recorder_actor (zsock_t *pipe, void *args)
{
    const ah_recorder_args_t *a = args;
    self_t self = {
        .pipe = pipe,
        .flush_rows = a && a->flush_rows > 0 ? a->flush_rows : 256,
        .flush_ms = a && a->flush_ms > 0 ? a->flush_ms : 200,
        .retention_ms = (int64_t) ((a && a->retention_days > 0 ? a->retention_days : 90) * 86400000.0),
    };
    char *err = NULL;
    self.store = a && a->db_path ? ah_store_open (a->db_path, false, &err) : NULL;
    if (!self.store) {
        ah_error ("recorder", "cannot open the database: %s", err ? err : "no path given");
        free (err);
        s_destroy (&self);
        zsock_signal (pipe, 1);
        return;
    }
    self.bus = ah_bus_connect ("recorder");
    if (!self.bus) {
        ah_error ("recorder", "cannot connect to the bus");
        s_destroy (&self);
        zsock_signal (pipe, 1);
        return;
    }
    s_sweep (&self);
    zsock_signal (pipe, 0);

    zpoller_t *poller = zpoller_new (pipe, self.bus, NULL);
    while (true) {
        int timeout = -1;
        int64_t now = zclock_mono ();
        if (self.pending_count) {
            int64_t left = self.oldest_ms + self.flush_ms - now;
            timeout = left > 0 ? (int) left : 0;
        }
        int64_t to_sweep = self.next_sweep_ms - now;
        if (timeout < 0 || to_sweep < timeout)
            timeout = to_sweep > 0 ? (int) to_sweep : 0;
        void *which = zpoller_wait (poller, timeout);
        if (which == pipe) {
            char *cmd = zstr_recv (pipe);
            if (!cmd || streq (cmd, "$TERM")) {
                zstr_free (&cmd);
                break;
            }
            if (streq (cmd, "FLUSH"))
                zsock_signal (pipe, s_flush (&self) == 0 ? 0 : 1);
            else
                ah_warn ("recorder", "unknown pipe command '%s'", cmd);
            zstr_free (&cmd);
        }
        else
        if (which == self.bus)
            s_on_bus (&self);
        else
        if (zpoller_terminated (poller))
            break;
        now = zclock_mono ();
        if (self.pending_count && now - self.oldest_ms >= self.flush_ms) {
            if (s_flush (&self) != 0)
                self.oldest_ms = now;           //  back off one period before retrying
        }
        if (now >= self.next_sweep_ms)
            s_sweep (&self);
    }
    zpoller_destroy (&poller);
    //  Drain, then flush: the server stops every sender before us, but
    //  their last rows may still be crossing the bus. Take what arrives
    //  until it has been quiet for 50 ms (at most a second in all).
    poller = zpoller_new (self.bus, NULL);
    int64_t give_up = zclock_mono () + 1000;
    while (zclock_mono () < give_up && zpoller_wait (poller, 50) == self.bus)
        s_on_bus (&self);
    zpoller_destroy (&poller);
    if (s_flush (&self) != 0)
        ah_error ("recorder", "%zu audit rows could not be written at shutdown", self.pending_count);
    s_destroy (&self);
}
