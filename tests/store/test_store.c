/*  tests/store/test_store.c: the SQLite wrapper against a real file:
    migrations, refusal of a newer schema, named binds, guarded updates
    from two connections, and a writer killed mid-transaction.        */
#include "store/store.h"
#include "store/migrations.h"
#include "tests/common/check.h"
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char s_dir [] = "/tmp/ah-test-store-XXXXXX";

static char *s_path (const char *name)
{
    char *path = NULL;
    if (asprintf (&path, "%s/%s", s_dir, name) < 0)
        return NULL;
    return path;
}

static int64_t s_count (ah_store_t *store, const char *sql)
{
    sqlite3_stmt *stmt = ah_store_prepare (store, sql);
    if (!stmt)
        return -1;
    int64_t n = -1;
    if (ah_store_step (store, stmt) == SQLITE_ROW)
        n = sqlite3_column_int64 (stmt, 0);
    sqlite3_reset (stmt);
    return n;
}

static int s_insert_agent (ah_store_t *store, const char *id, const char *state)
{
    sqlite3_stmt *stmt = ah_store_prepare (store,
        "INSERT INTO agents (id, name, image, cpus, memory_mb, idle_minutes, created_at)"
        " VALUES (:id, :name, 'img', 2, 4096, 15, :now)");
    if (!stmt
    ||  ah_store_bind_text (stmt, ":id", id)
    ||  ah_store_bind_text (stmt, "name", id)
    ||  ah_store_bind_int64 (stmt, "now", ah_store_now_ms ())
    ||  ah_store_step (store, stmt) != SQLITE_DONE)
        return -1;
    stmt = ah_store_prepare (store,
        "INSERT INTO sandboxes (agent_id, state, image, cpus, memory_mb, updated_at)"
        " VALUES (:id, :state, 'img', 2, 4096, :now)");
    if (!stmt
    ||  ah_store_bind_text (stmt, "id", id)
    ||  ah_store_bind_text (stmt, "state", state)
    ||  ah_store_bind_int64 (stmt, "now", ah_store_now_ms ())
    ||  ah_store_step (store, stmt) != SQLITE_DONE)
        return -1;
    return 0;
}

static void s_test_migrations (void)
{
    char *path = s_path ("migrate.db");
    char *err = NULL;
    ah_store_t *store = ah_store_open (path, true, &err);
    CHECK (store != NULL);
    CHECK (err == NULL);
    if (!store) {
        fprintf (stderr, "  open: %s\n", err);
        free (err);
        free (path);
        return;
    }
    CHECK (ah_store_latest_version () >= 1);
    CHECK (ah_store_schema_version (store) == ah_store_latest_version ());
    //  The pragmas are in force
    sqlite3_stmt *stmt = ah_store_prepare (store, "PRAGMA journal_mode");
    CHECK (stmt && ah_store_step (store, stmt) == SQLITE_ROW);
    CHECK_STR ((const char *) sqlite3_column_text (stmt, 0), "wal");
    CHECK (s_count (store, "PRAGMA foreign_keys") == 1);
    CHECK (s_count (store, "PRAGMA busy_timeout") == 5000);
    CHECK (s_count (store, "PRAGMA synchronous") == 1);     //  NORMAL
    //  Every table of migration 1 exists
    const char *tables [] = { "agents", "sandboxes", "networks", "operations", "tombstones",
                              "tenants", "api_tokens", "policy_status" };
    for (size_t i = 0; i < sizeof tables / sizeof tables [0]; i++) {
        stmt = ah_store_prepare (store,
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = :name");
        CHECK (ah_store_bind_text (stmt, "name", tables [i]) == 0);
        CHECK (ah_store_step (store, stmt) == SQLITE_ROW);
        if (sqlite3_column_int (stmt, 0) != 1)
            fprintf (stderr, "  table %s missing\n", tables [i]);
        CHECK (sqlite3_column_int (stmt, 0) == 1);
    }
    CHECK (s_count (store, "SELECT count(*) FROM tenants") == 1);
    CHECK (s_insert_agent (store, "aaaaaaaaaaaa", "running") == 0);
    //  Foreign keys are enforced
    CHECK (ah_store_exec (store,
        "INSERT INTO sandboxes (agent_id, state, image, cpus, memory_mb, updated_at)"
        " VALUES ('nobody', 'running', 'x', 1, 1, 1)", &err) == -1);
    CHECK (err && strstr (err, "FOREIGN KEY"));
    CHECK (err && strstr (err, "INSERT INTO sandboxes"));   //  the SQL is named
    free (err);
    err = NULL;
    ah_store_close (&store);
    CHECK (store == NULL);
    ah_store_close (&store);                                //  idempotent

    //  Re-open: nothing applied twice, the data is still there
    store = ah_store_open (path, true, &err);
    CHECK (store != NULL);
    if (store) {
        CHECK (ah_store_schema_version (store) == ah_store_latest_version ());
        CHECK (s_count (store, "SELECT count(*) FROM tenants") == 1);
        CHECK (s_count (store, "SELECT count(*) FROM agents") == 1);
        ah_store_close (&store);
    }
    free (err);
    free (path);
}

static void s_test_newer_refused (void)
{
    char *path = s_path ("newer.db");
    sqlite3 *db = NULL;
    CHECK (sqlite3_open (path, &db) == SQLITE_OK);
    char pragma [64];
    snprintf (pragma, sizeof pragma, "PRAGMA user_version = %d", ah_store_latest_version () + 1);
    CHECK (sqlite3_exec (db, pragma, NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close (db);

    char *err = NULL;
    ah_store_t *store = ah_store_open (path, true, &err);
    CHECK (store == NULL);
    char want [160];
    snprintf (want, sizeof want, "database schema version %d is newer than this agenthold (knows %d):"
              " upgrade agenthold or restore a backup", ah_store_latest_version () + 1,
              ah_store_latest_version ());
    CHECK (err && strstr (err, want));
    if (err)
        fprintf (stderr, "  (expected) %s\n", err);
    free (err);
    err = NULL;
    //  Also without migrating: the binary cannot read what it does not know
    store = ah_store_open (path, false, &err);
    CHECK (store == NULL);
    CHECK (err && strstr (err, "newer than this agenthold"));
    free (err);
    free (path);
}

static void s_test_binds_and_cache (void)
{
    char *path = s_path ("binds.db");
    ah_store_t *store = ah_store_open (path, true, NULL);
    CHECK (store != NULL);
    if (!store) {
        free (path);
        return;
    }
    const char *sql = "SELECT :a || :b";
    sqlite3_stmt *stmt = ah_store_prepare (store, sql);
    CHECK (stmt != NULL);
    CHECK (ah_store_bind_text (stmt, "a", "x") == 0);
    CHECK (ah_store_bind_text (stmt, ":b", "y") == 0);
    CHECK (ah_store_bind_text (stmt, "wrong", "z") == -1);  //  fails loudly
    CHECK (ah_store_bind_int64 (stmt, ":nope", 1) == -1);
    CHECK (ah_store_bind_double (stmt, "nope", 1) == -1);
    CHECK (ah_store_bind_null (stmt, "nope") == -1);
    CHECK (ah_store_step (store, stmt) == SQLITE_ROW);
    CHECK_STR ((const char *) sqlite3_column_text (stmt, 0), "xy");
    //  Cached: the same statement, reset and with bindings cleared
    sqlite3_stmt *again = ah_store_prepare (store, sql);
    CHECK (again == stmt);
    CHECK (ah_store_step (store, again) == SQLITE_ROW);
    CHECK (sqlite3_column_type (again, 0) == SQLITE_NULL);
    //  A bad statement: NULL, and the error names the SQL
    CHECK (ah_store_prepare (store, "SELEKT 1") == NULL);
    CHECK (strstr (ah_store_error (store), "SELEKT 1") != NULL);
    CHECK (strstr (ah_store_error (store), "syntax error") != NULL);
    CHECK (ah_store_prepare (store, "SELECT 1; SELECT 2") == NULL);
    //  Transactions: no nesting, rollback with nothing open is harmless
    CHECK (ah_store_begin (store) == 0);
    CHECK (ah_store_begin (store) == -1);
    CHECK (ah_store_rollback (store) == 0);
    CHECK (ah_store_rollback (store) == 0);
    ah_store_close (&store);
    free (path);
}

//  Several connections open (and migrate) a fresh file at once, as actors
//  starting together would: each migration runs once, every open succeeds.
typedef struct {
    const char *path;
    pthread_barrier_t *barrier;
    int ok;
} s_opener_t;

static void *s_opener (void *args)
{
    s_opener_t *opener = args;
    pthread_barrier_wait (opener->barrier);
    char *err = NULL;
    ah_store_t *store = ah_store_open (opener->path, true, &err);
    opener->ok = store && ah_store_schema_version (store) == ah_store_latest_version ();
    if (!store)
        fprintf (stderr, "  concurrent open: %s\n", err);
    free (err);
    ah_store_close (&store);
    return NULL;
}

static void s_test_concurrent_open (void)
{
    char *path = s_path ("concurrent.db");
    enum { OPENERS = 4 };
    pthread_barrier_t barrier;
    pthread_barrier_init (&barrier, NULL, OPENERS);
    s_opener_t openers [OPENERS];
    pthread_t threads [OPENERS];
    for (int i = 0; i < OPENERS; i++) {
        openers [i] = (s_opener_t) { path, &barrier, 0 };
        pthread_create (&threads [i], NULL, s_opener, &openers [i]);
    }
    for (int i = 0; i < OPENERS; i++) {
        pthread_join (threads [i], NULL);
        CHECK (openers [i].ok);
    }
    pthread_barrier_destroy (&barrier);
    ah_store_t *store = ah_store_open (path, false, NULL);
    CHECK (store && s_count (store, "SELECT count(*) FROM tenants") == 1);
    ah_store_close (&store);
    free (path);
}

//  Two connections race to move the same sandbox out of 'sleeping'.
typedef struct {
    const char *path;
    pthread_barrier_t *barrier;
    int changed;
    int failed;
} s_racer_t;

static void *s_racer (void *args)
{
    s_racer_t *racer = args;
    ah_store_t *store = ah_store_open (racer->path, false, NULL);
    pthread_barrier_wait (racer->barrier);
    if (!store) {
        racer->failed = 1;
        return NULL;
    }
    if (ah_store_begin (store) == 0) {
        sqlite3_stmt *stmt = ah_store_prepare (store,
            "UPDATE sandboxes SET state = 'starting', op = 'start'"
            " WHERE agent_id = :id AND state IN ('sleeping', 'error')");
        if (stmt && ah_store_bind_text (stmt, "id", "bbbbbbbbbbbb") == 0
        &&  ah_store_step (store, stmt) == SQLITE_DONE)
            racer->changed = ah_store_changes (store);
        else
            racer->failed = 1;
        if (ah_store_commit (store))
            racer->failed = 1;
    }
    else
        racer->failed = 1;
    ah_store_close (&store);
    return NULL;
}

static void s_test_guarded_update (void)
{
    char *path = s_path ("guard.db");
    ah_store_t *store = ah_store_open (path, true, NULL);
    CHECK (store != NULL);
    if (!store) {
        free (path);
        return;
    }
    CHECK (s_insert_agent (store, "bbbbbbbbbbbb", "sleeping") == 0);
    for (int round = 0; round < 5; round++) {
        CHECK (ah_store_exec (store,
            "UPDATE sandboxes SET state = 'sleeping' WHERE agent_id = 'bbbbbbbbbbbb'", NULL) == 0);
        pthread_barrier_t barrier;
        pthread_barrier_init (&barrier, NULL, 2);
        s_racer_t racers [2] = { { path, &barrier, 0, 0 }, { path, &barrier, 0, 0 } };
        pthread_t threads [2];
        for (int i = 0; i < 2; i++)
            pthread_create (&threads [i], NULL, s_racer, &racers [i]);
        for (int i = 0; i < 2; i++)
            pthread_join (threads [i], NULL);
        pthread_barrier_destroy (&barrier);
        CHECK (racers [0].failed == 0 && racers [1].failed == 0);
        CHECK (racers [0].changed + racers [1].changed == 1);   //  exactly one winner
        sqlite3_stmt *stmt = ah_store_prepare (store,
            "SELECT state FROM sandboxes WHERE agent_id = 'bbbbbbbbbbbb'");
        CHECK (ah_store_step (store, stmt) == SQLITE_ROW);
        CHECK_STR ((const char *) sqlite3_column_text (stmt, 0), "starting");
        sqlite3_reset (stmt);
    }
    ah_store_close (&store);
    free (path);
}

//  A child commits 100 rows, starts another transaction, writes 5000 more,
//  and is killed with SIGKILL before it commits. The file must be intact
//  and hold exactly the committed rows.
static void s_test_crash (void)
{
    char *path = s_path ("crash.db");
    int ready [2];
    CHECK (pipe (ready) == 0);
    pid_t pid = fork ();
    if (pid == 0) {
        close (ready [0]);
        ah_store_t *store = ah_store_open (path, true, NULL);
        if (!store)
            _exit (2);
        if (ah_store_begin (store))
            _exit (3);
        for (int i = 0; i < 100; i++) {
            sqlite3_stmt *stmt = ah_store_prepare (store,
                "INSERT INTO operations (at, actor, kind, ok) VALUES (:at, 'test', 'committed', 1)");
            ah_store_bind_int64 (stmt, "at", i);
            if (ah_store_step (store, stmt) != SQLITE_DONE)
                _exit (4);
        }
        if (ah_store_commit (store) || ah_store_begin (store))
            _exit (5);
        for (int i = 0; i < 5000; i++) {
            sqlite3_stmt *stmt = ah_store_prepare (store,
                "INSERT INTO operations (at, actor, kind, detail, ok)"
                " VALUES (:at, 'test', 'lost', hex(randomblob(200)), 1)");
            ah_store_bind_int64 (stmt, "at", i);
            if (ah_store_step (store, stmt) != SQLITE_DONE)
                _exit (6);
        }
        //  Force dirty pages out to the WAL before we die
        sqlite3_db_cacheflush (ah_store_db (store));
        if (write (ready [1], "x", 1) != 1)
            _exit (7);
        pause ();
        _exit (0);
    }
    close (ready [1]);
    char byte;
    CHECK (read (ready [0], &byte, 1) == 1);
    close (ready [0]);
    kill (pid, SIGKILL);
    int status = 0;
    waitpid (pid, &status, 0);
    CHECK (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL);

    char *err = NULL;
    ah_store_t *store = ah_store_open (path, true, &err);
    CHECK (store != NULL);
    if (store) {
        sqlite3_stmt *stmt = ah_store_prepare (store, "PRAGMA integrity_check");
        CHECK (stmt && ah_store_step (store, stmt) == SQLITE_ROW);
        CHECK_STR ((const char *) sqlite3_column_text (stmt, 0), "ok");
        sqlite3_reset (stmt);
        CHECK (s_count (store, "SELECT count(*) FROM operations WHERE kind = 'committed'") == 100);
        CHECK (s_count (store, "SELECT count(*) FROM operations WHERE kind = 'lost'") == 0);
        //  and it is writable again
        CHECK (ah_store_begin (store) == 0);
        CHECK (ah_store_exec (store, "DELETE FROM operations", NULL) == 0);
        CHECK (ah_store_commit (store) == 0);
        ah_store_close (&store);
    }
    free (err);
    free (path);
}

static void s_test_time (void)
{
    char buf [32];
    CHECK_STR (ah_store_format_time (1795942800123LL, buf, sizeof buf), "2026-11-29T09:00:00.123Z");
    CHECK_STR (ah_store_format_time (1000, buf, sizeof buf), "1970-01-01T00:00:01.000Z");
    CHECK_STR (ah_store_format_time (0, buf, sizeof buf), "");
    CHECK_STR (ah_store_format_time (-5, buf, sizeof buf), "");
    int64_t now = ah_store_now_ms ();
    CHECK (now > 1700000000000LL && now < 4102444800000LL);
}

//  A database of the last release before tenants (version 2), with
//  agents, sandboxes and turns in it, migrates: every row is kept, names
//  become unique within a tenant, foreign keys still hold and cascade.
static void s_test_upgrade_from_2 (void)
{
    char *path = s_path ("v2.db");
    sqlite3 *db = NULL;
    CHECK (sqlite3_open (path, &db) == SQLITE_OK);
    CHECK (sqlite3_exec (db, ah_migrations [0].sql, NULL, NULL, NULL) == SQLITE_OK);
    CHECK (sqlite3_exec (db, ah_migrations [1].sql, NULL, NULL, NULL) == SQLITE_OK);
    CHECK (sqlite3_exec (db, "PRAGMA user_version = 2;"
        "INSERT INTO agents (id, name, tenant, image, cpus, memory_mb, idle_minutes, created_at)"
        " VALUES ('aaaaaaaaaaaa', 'alice', 'acme', 'img', 2, 4096, 15, 1),"
        "        ('bbbbbbbbbbbb', 'bob', 'default', 'img', 1, 1024, 15, 2);"
        "INSERT INTO sandboxes (agent_id, state, image, cpus, memory_mb, updated_at)"
        " VALUES ('aaaaaaaaaaaa', 'running', 'img', 2, 4096, 1), ('bbbbbbbbbbbb', 'sleeping', 'img', 1, 1024, 1);"
        "INSERT INTO turns (id, agent_id, started_at, expires_at) VALUES ('t1', 'aaaaaaaaaaaa', 1, 2);",
        NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close (db);
    char *err = NULL;
    ah_store_t *store = ah_store_open (path, true, &err);
    CHECK (store != NULL && err == NULL);
    free (err);
    if (store) {
        CHECK (s_count (store, "PRAGMA user_version") == ah_store_latest_version ());
        CHECK (s_count (store, "SELECT count(*) FROM agents") == 2);
        CHECK (s_count (store, "SELECT count(*) FROM sandboxes") == 2);
        CHECK (s_count (store, "SELECT count(*) FROM turns") == 1);
        CHECK (s_count (store, "SELECT count(*) FROM tenants WHERE name = 'acme'") == 1);
        //  The same name in another tenant is fine now; twice in one is not.
        CHECK (ah_store_exec (store, "INSERT INTO agents (id, name, tenant, image, cpus, memory_mb,"
                              " idle_minutes, created_at) VALUES ('cccccccccccc', 'alice', 'default',"
                              " 'img', 1, 64, 15, 3)", NULL) == 0);
        CHECK (ah_store_exec (store, "INSERT INTO agents (id, name, tenant, image, cpus, memory_mb,"
                              " idle_minutes, created_at) VALUES ('dddddddddddd', 'alice', 'acme',"
                              " 'img', 1, 64, 15, 4)", NULL) != 0);
        //  Foreign keys are on again and still cascade to the new table.
        CHECK (s_count (store, "PRAGMA foreign_keys") == 1);
        CHECK (ah_store_exec (store, "DELETE FROM agents WHERE id = 'aaaaaaaaaaaa'", NULL) == 0);
        CHECK (s_count (store, "SELECT count(*) FROM sandboxes") == 1);
        CHECK (s_count (store, "SELECT count(*) FROM turns") == 0);
        ah_store_close (&store);
    }
    free (path);
}

//  docs/schema.md shows every migration's SQL as it is.
static void s_test_schema_doc (void)
{
    FILE *f = fopen (AH_SOURCE_DIR "/docs/schema.md", "r");
    CHECK (f != NULL);
    if (!f)
        return;
    char *doc = calloc (1, 1 << 20);
    size_t n = fread (doc, 1, (1 << 20) - 1, f);
    fclose (f);
    doc [n] = 0;
    for (int i = 0; i < ah_migrations_count; i++) {
        bool found = strstr (doc, ah_migrations [i].sql) != NULL;
        if (!found)
            fprintf (stderr, "docs/schema.md does not show migration %d (%s) as it is\n",
                     ah_migrations [i].version, ah_migrations [i].name);
        CHECK (found);
    }
    free (doc);
}

//  ah_store_agent_find: an id wins, a name within its tenant, a name of
//  two tenants without one is ambiguous (-2), another tenant's id or name
//  is none.
static void s_test_agent_find (void)
{
    char *path = s_path ("find.db");
    char *err = NULL;
    ah_store_t *store = ah_store_open (path, true, &err);
    CHECK (store);
    if (!store) {
        free (err);
        free (path);
        return;
    }
    CHECK (ah_store_exec (store,
        "INSERT INTO tenants (name) VALUES ('acme'), ('globex');"
        "INSERT INTO agents (id, name, tenant, image, cpus, memory_mb, idle_minutes, created_at) VALUES"
        " ('aaaaaaaaaaaa', 'shared', 'acme', 'i', 1, 64, 15, 0),"
        " ('bbbbbbbbbbbb', 'shared', 'globex', 'i', 1, 64, 15, 0),"
        " ('cccccccccccc', 'solo', 'acme', 'i', 1, 64, 15, 0),"
        " ('dddddddddddd', 'aaaaaaaaaaaa', 'globex', 'i', 1, 64, 15, 0);", NULL) == 0);
    char id [16];
    CHECK (ah_store_agent_find (store, "shared", "acme", id, sizeof id) == 1);
    CHECK_STR (id, "aaaaaaaaaaaa");
    CHECK (ah_store_agent_find (store, "shared", "globex", id, sizeof id) == 1);
    CHECK_STR (id, "bbbbbbbbbbbb");
    CHECK (ah_store_agent_find (store, "shared", NULL, id, sizeof id) == -2);
    CHECK_STR (id, "");
    CHECK (ah_store_agent_find (store, "shared", "", id, sizeof id) == -2);
    CHECK (ah_store_agent_find (store, "solo", NULL, id, sizeof id) == 1);
    CHECK_STR (id, "cccccccccccc");
    CHECK (ah_store_agent_find (store, "solo", "globex", id, sizeof id) == 0);
    CHECK (ah_store_agent_find (store, "cccccccccccc", "globex", id, sizeof id) == 0);
    CHECK (ah_store_agent_find (store, "nobody", NULL, id, sizeof id) == 0);
    CHECK (ah_store_agent_find (store, "", NULL, id, sizeof id) == 0);
    //  An id wins over a name that spells it (another agent's name).
    CHECK (ah_store_agent_find (store, "aaaaaaaaaaaa", NULL, id, sizeof id) == 1);
    CHECK_STR (id, "aaaaaaaaaaaa");
    CHECK (ah_store_agent_find (store, "aaaaaaaaaaaa", "globex", id, sizeof id) == 1);
    CHECK_STR (id, "dddddddddddd");
    char why [160];
    CHECK (strstr (ah_store_agent_ambiguous ("shared", why, sizeof why), "more than one tenant") != NULL);
    ah_store_close (&store);
    free (path);
}

int main (void)
{
    if (!mkdtemp (s_dir)) {
        perror ("mkdtemp");
        return 1;
    }
    s_test_migrations ();
    s_test_upgrade_from_2 ();
    s_test_schema_doc ();
    s_test_newer_refused ();
    s_test_binds_and_cache ();
    s_test_concurrent_open ();
    s_test_guarded_update ();
    s_test_crash ();
    s_test_time ();
    s_test_agent_find ();
    char command [128];
    snprintf (command, sizeof command, "rm -rf '%s'", s_dir);
    if (system (command) != 0)
        fprintf (stderr, "could not remove %s\n", s_dir);
    return CHECK_DONE ();
}
