/*  store/store.h: the SQLite wrapper every actor uses through its own
    connection (one ah_store_t per thread; never shared).

    Opening sets WAL, foreign_keys=ON, busy_timeout, and (migrate=true)
    applies the numbered migrations in store/migrations.c once each, in
    one transaction each, recording the version in PRAGMA user_version.
    A database whose version is newer than the binary knows is refused
    with a message naming both versions.

    Statements are prepared once per connection and cached by their SQL
    text; binds are by name (":name") and a name the statement does not
    have fails loudly (-1 and a log line naming the SQL). Errors carry the
    SQL and sqlite3_errmsg. Writes go inside ah_store_begin (BEGIN
    IMMEDIATE) / ah_store_commit.

    Times are integers: milliseconds since the Unix epoch (ah_store_now_ms). */
#ifndef AH_STORE_H
#define AH_STORE_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ah_store_t ah_store_t;

ah_store_t *ah_store_open (const char *path, bool migrate, char **err);
void        ah_store_close (ah_store_t **self_p);
sqlite3    *ah_store_db (ah_store_t *self);
int         ah_store_schema_version (ah_store_t *self);
int         ah_store_latest_version (void);      //  what this binary knows
//  The last error on this connection ("what: sqlite3_errmsg (SQL: ...)"),
//  "" if none. Borrowed; valid until the next error.
const char *ah_store_error (ah_store_t *self);

//  Records an error of the caller's on this connection (logged, and
//  what ah_store_error gives next): a refusal before any SQL ran.
void ah_store_fail (ah_store_t *self, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

//  One or more statements without results. 0 / -1 (*err, caller frees).
int ah_store_exec (ah_store_t *self, const char *sql, char **err);

//  Cached prepared statement, reset and with bindings cleared. NULL on a
//  prepare error (logged with the SQL).
sqlite3_stmt *ah_store_prepare (ah_store_t *self, const char *sql);
int ah_store_bind_text (sqlite3_stmt *stmt, const char *name, const char *value);  //  NULL -> NULL
int ah_store_bind_int64 (sqlite3_stmt *stmt, const char *name, int64_t value);
int ah_store_bind_double (sqlite3_stmt *stmt, const char *name, double value);
int ah_store_bind_null (sqlite3_stmt *stmt, const char *name);
int ah_store_bind_blob (sqlite3_stmt *stmt, const char *name, const void *data, size_t size);  //  copied
//  sqlite3_step with the error logged (SQL + errmsg). Returns the step code.
int ah_store_step (ah_store_t *self, sqlite3_stmt *stmt);
//  Rows changed by the last statement on this connection.
int ah_store_changes (ah_store_t *self);

int ah_store_begin (ah_store_t *self);           //  BEGIN IMMEDIATE; 0 / -1
int ah_store_commit (ah_store_t *self);
int ah_store_rollback (ah_store_t *self);

//  The agent a caller names by key (docs/api.md "Names and paths"), the
//  one lookup every actor uses: an id wins; else a name. Both only within
//  tenant when it is given (not NULL nor ""). Without one (an admin acting
//  within every tenant, an actor's own use) a name held in more than one
//  tenant names nobody in particular. 1: found, its id into id (at least
//  13 bytes); 0: none; -2: ambiguous (a 409 to whoever asked); -1: the
//  database failed.
int ah_store_agent_find (ah_store_t *self, const char *key, const char *tenant, char *id, size_t size);
//  The one sentence for -2, into buf.
const char *ah_store_agent_ambiguous (const char *key, char *buf, size_t size);

int64_t ah_store_now_ms (void);
//  "2026-11-29T09:00:00.123Z" into buf (>= 32 bytes); "" for ms <= 0.
const char *ah_store_format_time (int64_t ms, char *buf, size_t size);

#endif
