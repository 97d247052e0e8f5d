/*  store/store.c: the SQLite wrapper (see store.h).

    One ah_store_t per thread: the connection, its statement cache and its
    last error belong to the thread that opened it. Nothing here is shared
    between connections except the database file itself, and SQLite's own
    locking (WAL + busy_timeout + BEGIN IMMEDIATE) arbitrates that.

    The statement cache is a small chained hash keyed by the SQL text: an
    actor prepares the same few dozen statements over and over, so each is
    compiled once per connection and reused (reset + cleared) afterwards. */
#include "common/str.h"
#include "store/store.h"
#include "store/migrations.h"
#include "common/log.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CACHE_BUCKETS   64
#define BEGIN_RETRIES   20          //  on top of busy_timeout, each after a short sleep
#define BUSY_TIMEOUT_MS 5000
#define CACHE_WARN      512         //  more distinct statements than any actor should have

typedef struct s_cached_t {
    char *sql;
    sqlite3_stmt *stmt;
    struct s_cached_t *next;
} s_cached_t;

struct ah_store_t {
    sqlite3 *db;
    char *path;
    s_cached_t *cache [CACHE_BUCKETS];
    char *error;                    //  last error: what failed, the SQL, sqlite3_errmsg
    size_t cached;                  //  statements in the cache
};

static uint32_t s_hash (const char *text)
{
    //  FNV-1a: plenty for a few dozen keys
    uint32_t hash = 2166136261u;
    for (const unsigned char *p = (const unsigned char *) text; *p; p++)
        hash = (hash ^ *p) * 16777619u;
    return hash;
}


//  Record (and log) an error on this connection.
static void s_fail (ah_store_t *self, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    char *text = ah_vstrf (fmt, ap);
    va_end (ap);
    if (!text)
        return;
    ah_error ("store", "%s", text);
    free (self->error);
    self->error = text;
}

//  Set *err (if wanted) to a copy of the last error.
static void s_give_error (ah_store_t *self, char **err)
{
    if (err)
        *err = strdup (self->error ? self->error : "unknown store error");
}

static bool s_is_busy (int rc)
{
    return (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED;
}

//  sqlite3_exec with the error recorded; 0 / -1.
static int s_exec (ah_store_t *self, const char *sql)
{
    char *msg = NULL;
    int rc = sqlite3_exec (self->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        s_fail (self, "%s (SQL: %s)", msg ? msg : sqlite3_errmsg (self->db), sql);
        sqlite3_free (msg);
        return -1;
    }
    return 0;
}

static int s_user_version (ah_store_t *self)
{
    sqlite3_stmt *stmt = ah_store_prepare (self, "PRAGMA user_version");
    if (!stmt)
        return -1;
    int version = -1;
    if (ah_store_step (self, stmt) == SQLITE_ROW)
        version = sqlite3_column_int (stmt, 0);
    sqlite3_reset (stmt);
    return version;
}

static int s_migrate_all (ah_store_t *self);

//  A migration must leave every foreign key pointing somewhere.
static bool s_foreign_keys_broken (ah_store_t *self, const ah_migration_t *migration)
{
    sqlite3_stmt *st = ah_store_prepare (self, "PRAGMA foreign_key_check");
    int rc = st ? ah_store_step (self, st) : SQLITE_ERROR;
    if (st)
        sqlite3_reset (st);
    if (rc == SQLITE_DONE)
        return false;
    s_fail (self, "migration %d (%s) left broken foreign keys", migration->version, migration->name);
    return true;
}

//  Apply the migrations this database lacks, each in its own transaction.
//  The version is re-read inside the transaction, so two processes that
//  open a fresh file at once apply each migration exactly once.
static int s_migrate (ah_store_t *self)
{
    //  Foreign keys are off while migrations run (a table rebuilt would
    //  otherwise take its dependants with it when the old one is
    //  dropped); each migration checks them before it commits.
    if (s_exec (self, "PRAGMA foreign_keys = OFF"))
        return -1;
    int rc = s_migrate_all (self);
    if (s_exec (self, "PRAGMA foreign_keys = ON"))
        rc = -1;
    return rc;
}

static int s_migrate_all (ah_store_t *self)
{
    int latest = ah_store_latest_version ();
    for (int i = 0; i < latest; i++) {
        const ah_migration_t *migration = &ah_migrations [i];
        if (ah_store_begin (self))
            return -1;
        int current = s_user_version (self);
        if (current < 0) {
            ah_store_rollback (self);
            return -1;
        }
        if (current >= migration->version) {
            ah_store_rollback (self);
            continue;
        }
        if (s_exec (self, migration->sql)) {
            char *why = self->error ? strdup (self->error) : NULL;
            ah_store_rollback (self);
            s_fail (self, "migration %d (%s) failed: %s", migration->version,
                    migration->name, why ? why : "unknown error");
            free (why);
            return -1;
        }
        if (s_foreign_keys_broken (self, migration)) {
            ah_store_rollback (self);
            return -1;
        }
        char pragma [64];
        snprintf (pragma, sizeof pragma, "PRAGMA user_version = %d", migration->version);
        if (s_exec (self, pragma) || ah_store_commit (self)) {
            ah_store_rollback (self);
            return -1;
        }
        ah_info ("store", "%s: applied migration %d (%s)", self->path,
                 migration->version, migration->name);
    }
    return 0;
}

ah_store_t *ah_store_open (const char *path, bool migrate, char **err)
{
    if (err)
        *err = NULL;
    if (!path || !*path) {
        if (err)
            *err = strdup ("database path is empty");
        return NULL;
    }
    ah_store_t *self = calloc (1, sizeof *self);
    if (!self) {
        if (err)
            *err = strdup ("out of memory");
        return NULL;
    }
    self->path = strdup (path);
    int rc = sqlite3_open_v2 (path, &self->db,
        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        if (err)
            *err = ah_strf ("cannot open database %s: %s", path,
                             self->db ? sqlite3_errmsg (self->db) : sqlite3_errstr (rc));
        ah_store_close (&self);
        return NULL;
    }
    sqlite3_extended_result_codes (self->db, 1);
    sqlite3_busy_timeout (self->db, BUSY_TIMEOUT_MS);
    //  journal_mode=WAL needs a write lock the first time, and SQLite may
    //  answer SQLITE_BUSY at once (no busy handler) while another opener
    //  switches the mode: tried again for as long as busy_timeout.
    int wal_rc = SQLITE_BUSY;
    for (int waited = 0; waited <= BUSY_TIMEOUT_MS; waited += 10) {
        wal_rc = sqlite3_exec (self->db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL);
        if ((wal_rc & 0xff) != SQLITE_BUSY && (wal_rc & 0xff) != SQLITE_LOCKED)
            break;
        sqlite3_sleep (10);
    }
    if (wal_rc != SQLITE_OK)
        s_fail (self, "%s (SQL: PRAGMA journal_mode = WAL)", sqlite3_errmsg (self->db));
    if (wal_rc != SQLITE_OK
    ||  s_exec (self, "PRAGMA synchronous = NORMAL")
    ||  s_exec (self, "PRAGMA foreign_keys = ON"))
        goto fail;

    int version = s_user_version (self);
    if (version < 0)
        goto fail;
    if (version > ah_store_latest_version ()) {
        free (self->error);
        self->error = ah_strf ("database schema version %d is newer than this agenthold "
                                "(knows %d): upgrade agenthold or restore a backup",
                                version, ah_store_latest_version ());
        goto fail;
    }
    if (migrate && s_migrate (self))
        goto fail;
    return self;

fail:
    if (err) {
        char *why = ah_strf ("%s: %s", path, self->error ? self->error : "cannot open database");
        *err = why;
    }
    ah_store_close (&self);
    return NULL;
}

void ah_store_close (ah_store_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_store_t *self = *self_p;
    for (int i = 0; i < CACHE_BUCKETS; i++) {
        s_cached_t *entry = self->cache [i];
        while (entry) {
            s_cached_t *next = entry->next;
            sqlite3_finalize (entry->stmt);
            free (entry->sql);
            free (entry);
            entry = next;
        }
    }
    if (self->db)
        sqlite3_close_v2 (self->db);
    free (self->path);
    free (self->error);
    free (self);
    *self_p = NULL;
}

sqlite3 *ah_store_db (ah_store_t *self)
{
    return self ? self->db : NULL;
}

const char *ah_store_error (ah_store_t *self)
{
    return self && self->error ? self->error : "";
}

int ah_store_schema_version (ah_store_t *self)
{
    return s_user_version (self);
}

int ah_store_latest_version (void)
{
    return ah_migrations_count;
}

void ah_store_fail (ah_store_t *self, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    char *text = ah_vstrf (fmt, ap);
    va_end (ap);
    if (text)
        s_fail (self, "%s", text);
    free (text);
}

int ah_store_exec (ah_store_t *self, const char *sql, char **err)
{
    if (err)
        *err = NULL;
    if (s_exec (self, sql)) {
        s_give_error (self, err);
        return -1;
    }
    return 0;
}

sqlite3_stmt *ah_store_prepare (ah_store_t *self, const char *sql)
{
    uint32_t bucket = s_hash (sql) % CACHE_BUCKETS;
    for (s_cached_t *entry = self->cache [bucket]; entry; entry = entry->next)
        if (strcmp (entry->sql, sql) == 0) {
            sqlite3_reset (entry->stmt);
            sqlite3_clear_bindings (entry->stmt);
            return entry->stmt;
        }
    sqlite3_stmt *stmt = NULL;
    const char *tail = NULL;
    int rc = sqlite3_prepare_v3 (self->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, &tail);
    if (rc != SQLITE_OK || !stmt) {
        s_fail (self, "prepare failed: %s (SQL: %s)",
                rc == SQLITE_OK ? "empty statement" : sqlite3_errmsg (self->db), sql);
        sqlite3_finalize (stmt);
        return NULL;
    }
    //  A second statement after the first would be silently ignored
    while (tail && (*tail == ' ' || *tail == '\n' || *tail == '\t' || *tail == ';'))
        tail++;
    if (tail && *tail) {
        s_fail (self, "prepare: only one statement allowed, trailing '%s' (SQL: %s)", tail, sql);
        sqlite3_finalize (stmt);
        return NULL;
    }
    s_cached_t *entry = calloc (1, sizeof *entry);
    if (!entry || !(entry->sql = strdup (sql))) {
        free (entry);
        sqlite3_finalize (stmt);
        s_fail (self, "out of memory (SQL: %s)", sql);
        return NULL;
    }
    entry->stmt = stmt;
    entry->next = self->cache [bucket];
    self->cache [bucket] = entry;
    //  Entries are never evicted (a caller may be stepping any of them), so
    //  SQL built with values inside would grow the cache without end: say so once
    if (++self->cached == CACHE_WARN)
        ah_warn ("store", "%zu distinct statements cached on one connection; is SQL being"
                 " built with values in it instead of binds? (latest: %s)", self->cached, sql);
    return stmt;
}

//  The index of a named parameter; ":" is implied when the name has no
//  prefix. A name the statement does not have is a programming error that
//  would otherwise bind silently to nothing: fail loudly.
static int s_param (sqlite3_stmt *stmt, const char *name)
{
    if (!stmt || !name)
        return 0;
    int index;
    if (*name == ':' || *name == '@' || *name == '$')
        index = sqlite3_bind_parameter_index (stmt, name);
    else {
        char prefixed [128];
        snprintf (prefixed, sizeof prefixed, ":%s", name);
        index = sqlite3_bind_parameter_index (stmt, prefixed);
    }
    if (index == 0)
        ah_error ("store", "bind: statement has no parameter '%s' (SQL: %s)",
                  name, sqlite3_sql (stmt));
    return index;
}

static int s_bound (sqlite3_stmt *stmt, const char *name, int rc)
{
    if (rc == SQLITE_OK)
        return 0;
    ah_error ("store", "bind '%s' failed: %s (SQL: %s)", name,
              sqlite3_errstr (rc), sqlite3_sql (stmt));
    return -1;
}

int ah_store_bind_text (sqlite3_stmt *stmt, const char *name, const char *value)
{
    int index = s_param (stmt, name);
    if (index == 0)
        return -1;
    if (!value)
        return s_bound (stmt, name, sqlite3_bind_null (stmt, index));
    return s_bound (stmt, name, sqlite3_bind_text (stmt, index, value, -1, SQLITE_TRANSIENT));
}

int ah_store_bind_int64 (sqlite3_stmt *stmt, const char *name, int64_t value)
{
    int index = s_param (stmt, name);
    if (index == 0)
        return -1;
    return s_bound (stmt, name, sqlite3_bind_int64 (stmt, index, value));
}

int ah_store_bind_double (sqlite3_stmt *stmt, const char *name, double value)
{
    int index = s_param (stmt, name);
    if (index == 0)
        return -1;
    return s_bound (stmt, name, sqlite3_bind_double (stmt, index, value));
}

int ah_store_bind_blob (sqlite3_stmt *stmt, const char *name, const void *data, size_t size)
{
    int index = s_param (stmt, name);
    if (index == 0 || size > INT32_MAX)
        return -1;
    return s_bound (stmt, name, sqlite3_bind_blob (stmt, index, data, (int) size, SQLITE_TRANSIENT));
}

int ah_store_bind_null (sqlite3_stmt *stmt, const char *name)
{
    int index = s_param (stmt, name);
    if (index == 0)
        return -1;
    return s_bound (stmt, name, sqlite3_bind_null (stmt, index));
}

int ah_store_step (ah_store_t *self, sqlite3_stmt *stmt)
{
    int rc = sqlite3_step (stmt);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        s_fail (self, "%s (SQL: %s)", sqlite3_errmsg (self->db), sqlite3_sql (stmt));
    return rc;
}

int ah_store_changes (ah_store_t *self)
{
    return sqlite3_changes (self->db);
}

int ah_store_begin (ah_store_t *self)
{
    if (!sqlite3_get_autocommit (self->db)) {
        s_fail (self, "BEGIN IMMEDIATE: a transaction is already open on this connection");
        return -1;
    }
    //  busy_timeout already waits up to 5 s; a writer that holds the lock
    //  longer than that (a big batch) gets a few more chances before we give up.
    for (int attempt = 0; ; attempt++) {
        int rc = sqlite3_exec (self->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            return 0;
        if (!s_is_busy (rc) || attempt >= BEGIN_RETRIES) {
            s_fail (self, "%s (SQL: BEGIN IMMEDIATE)", sqlite3_errmsg (self->db));
            return -1;
        }
        usleep (10000 + (useconds_t) (rand () % 40000));
    }
}

int ah_store_commit (ah_store_t *self)
{
    //  COMMIT can be busy when readers hold an old snapshot in rollback-journal
    //  mode; in WAL it rarely is, but the retry costs nothing.
    for (int attempt = 0; ; attempt++) {
        int rc = sqlite3_exec (self->db, "COMMIT", NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            return 0;
        if (!s_is_busy (rc) || attempt >= BEGIN_RETRIES) {
            s_fail (self, "%s (SQL: COMMIT)", sqlite3_errmsg (self->db));
            return -1;
        }
        usleep (10000);
    }
}

int ah_store_rollback (ah_store_t *self)
{
    if (sqlite3_get_autocommit (self->db))
        return 0;               //  nothing open (an error may have rolled it back already)
    return s_exec (self, "ROLLBACK");
}

int64_t ah_store_now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_REALTIME, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *ah_store_format_time (int64_t ms, char *buf, size_t size)
{
    if (!buf || size == 0)
        return "";
    buf [0] = 0;
    if (ms <= 0 || size < 25)
        return buf;
    time_t seconds = (time_t) (ms / 1000);
    struct tm tm;
    if (!gmtime_r (&seconds, &tm))
        return buf;
    size_t n = strftime (buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    if (n == 0) {
        buf [0] = 0;
        return buf;
    }
    snprintf (buf + n, size - n, ".%03dZ", (int) (ms % 1000));
    return buf;
}

int ah_store_agent_find (ah_store_t *self, const char *key, const char *tenant, char *id, size_t size)
{
    if (size)
        id [0] = 0;
    if (!key || !*key)
        return 0;
    sqlite3_stmt *st = ah_store_prepare (self,
        "SELECT id, id = :key FROM agents WHERE (id = :key OR name = :key)"
        " AND (:tenant IS NULL OR :tenant = '' OR tenant = :tenant)"
        " ORDER BY id = :key DESC LIMIT 2");
    if (!st || ah_store_bind_text (st, ":key", key) || ah_store_bind_text (st, ":tenant", tenant))
        return -1;
    int rc = ah_store_step (self, st);
    int found = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
    if (found == 1) {
        snprintf (id, size, "%s", (const char *) sqlite3_column_text (st, 0));
        //  Found by name: a second row is the same name in another tenant.
        if (!sqlite3_column_int (st, 1) && ah_store_step (self, st) == SQLITE_ROW) {
            id [0] = 0;
            found = -2;
        }
    }
    sqlite3_reset (st);
    return found;
}

const char *ah_store_agent_ambiguous (const char *key, char *buf, size_t size)
{
    snprintf (buf, size, "agent name '%.64s' is held in more than one tenant: name the tenant "
              "(?tenant=) or use the agent's id", key);
    return buf;
}
