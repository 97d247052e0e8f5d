/*  tests/recorder/test_recorder.c: the recorder actor alone on a real bus
    with a real SQLite file: batches land, the timer flushes, requests are
    answered after the commit, bad messages are refused, state events are
    recorded, the retention sweep deletes old rows, $TERM flushes, and a
    crash (SIGKILL of a process running it) loses nothing already flushed. */
#include "actors/recorder.h"
#include "common/bus.h"
#include "common/msg.h"
#include "store/store.h"
#include "check.h"
#include "actor_probe.h"

#include <msgpack.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static char s_dir [64];
static char s_db [128];

//  Rows in operations, read through a connection of our own (what a
//  separate process would see).
static int
s_count (const char *where)
{
    sqlite3 *db;
    if (sqlite3_open (s_db, &db) != SQLITE_OK)
        return -1;
    char sql [256];
    snprintf (sql, sizeof sql, "SELECT count(*) FROM operations%s%s", where ? " WHERE " : "", where ? where : "");
    sqlite3_stmt *stmt;
    int n = -1;
    if (sqlite3_prepare_v2 (db, sql, -1, &stmt, NULL) == SQLITE_OK && sqlite3_step (stmt) == SQLITE_ROW)
        n = sqlite3_column_int (stmt, 0);
    sqlite3_finalize (stmt);
    sqlite3_close (db);
    return n;
}

static void
s_sql (const char *sql)
{
    sqlite3 *db;
    CHECK (sqlite3_open (s_db, &db) == SQLITE_OK);
    CHECK (sqlite3_exec (db, sql, NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close (db);
}

//  Wait up to ms for the row count to reach want.
static int
s_wait_count (int want, int ms)
{
    int n = -1;
    for (int waited = 0; waited <= ms; waited += 20) {
        n = s_count (NULL);
        if (n == want)
            break;
        zclock_sleep (20);
    }
    return n;
}

static void
s_record (zsock_t *sock, const char *kind, const char *detail, int64_t req)
{
    ah_msg_t *m = ah_msg_new ("OP_RECORD");
    ah_msg_set_str (m, "agent_id", "a1b2c3d4e5f6");
    ah_msg_set_str (m, "actor", "api:admin");
    ah_msg_set_str (m, "kind", kind);
    ah_msg_set_str (m, "detail", detail);
    ah_msg_set_bool (m, "ok", true);
    if (req)
        ah_msg_set_int (m, "req", req);
    CHECK (ah_msg_send (&m, sock, "recorder") == 0);
}

static ah_msg_t *
s_recv (zsock_t *sock)
{
    zsock_set_rcvtimeo (sock, 3000);
    char *err = NULL;
    ah_msg_t *m = ah_msg_recv (sock, true, &err);
    free (err);
    return m;
}

static void
s_fresh_db (void)
{
    unlink (s_db);
    char wal [160];
    snprintf (wal, sizeof wal, "%s-wal", s_db);
    unlink (wal);
    snprintf (wal, sizeof wal, "%s-shm", s_db);
    unlink (wal);
    char *err = NULL;
    ah_store_t *store = ah_store_open (s_db, true, &err);
    CHECK (store != NULL);
    free (err);
    ah_store_close (&store);
}

static void
s_test_batches (zsock_t *client)
{
    s_fresh_db ();
    ah_recorder_args_t args = { .db_path = s_db, .flush_rows = 5, .flush_ms = 60000 };
    zactor_t *rec = ah_actor_new (&ah_recorder_actor, &args, NULL);
    CHECK (rec != NULL);
    for (int i = 0; i < 12; i++)
        s_record (client, "fs.write", "notes/todo.txt", 0);
    //  Two full batches of 5 commit on their own; 2 rows wait for the timer.
    CHECK (s_wait_count (10, 2000) == 10);
    zclock_sleep (100);
    CHECK (s_count (NULL) == 10);
    zstr_send (rec, "FLUSH");
    CHECK (zsock_wait (rec) == 0);
    CHECK (s_count (NULL) == 12);
    CHECK (s_count ("kind = 'fs.write' AND detail = 'notes/todo.txt' AND actor = 'api:admin'"
                    " AND ok = 1 AND agent_id = 'a1b2c3d4e5f6' AND at > 0") == 12);

    //  $TERM flushes what is pending.
    s_record (client, "exec", "make test", 0);
    s_record (client, "exec", "make install", 0);
    zactor_destroy (&rec);
    CHECK (s_count ("kind = 'exec'") == 2);
}

static void
s_test_timer_and_replies (zsock_t *client)
{
    s_fresh_db ();
    ah_recorder_args_t args = { .db_path = s_db, .flush_rows = 1000, .flush_ms = 100 };
    zactor_t *rec = ah_actor_new (&ah_recorder_actor, &args, NULL);
    for (int i = 0; i < 3; i++)
        s_record (client, "fs.mkdir", "src", 0);
    //  The 200 ms-style timer (100 here) flushes without anyone asking.
    CHECK (s_wait_count (3, 2000) == 3);

    //  With req: the REPLY comes once the row is committed.
    s_record (client, "fs.remove", "old.txt", 42);
    ah_msg_t *reply = s_recv (client);
    CHECK (reply && streq (ah_msg_type (reply), "REPLY") && ah_msg_int (reply, "req", 0) == 42
           && ah_msg_bool (reply, "ok", false));
    CHECK (s_count ("kind = 'fs.remove'") == 1);
    ah_msg_destroy (&reply);

    //  An explicit time and a failure.
    ah_msg_t *m = ah_msg_new ("OP_RECORD");
    ah_msg_set_int (m, "req", 43);
    ah_msg_set_int (m, "at", 1700000000000);
    ah_msg_set_str (m, "actor", "sleeper");
    ah_msg_set_str (m, "kind", "stop");
    ah_msg_set_bool (m, "ok", false);
    ah_msg_set_str (m, "error", "container did not stop");
    ah_msg_send (&m, client, "recorder");
    reply = s_recv (client);
    CHECK (reply && ah_msg_bool (reply, "ok", false));
    ah_msg_destroy (&reply);
    CHECK (s_count ("at = 1700000000000 AND ok = 0 AND error = 'container did not stop'"
                    " AND agent_id IS NULL AND detail IS NULL") == 1);

    //  Bad messages: each refused with 400 and a reason naming the field.
    struct { const char *field; int kind; } bad [] = {
        { "actor", 0 }, { "kind", 1 }, { "ok", 2 }, { "agent_id", 3 }, { "at", 4 }, { "detail", 5 } };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        m = ah_msg_new ("OP_RECORD");
        ah_msg_set_int (m, "req", 100 + (int64_t) i);
        if (bad [i].kind != 0) ah_msg_set_str (m, "actor", "api:admin");
        if (bad [i].kind != 1) ah_msg_set_str (m, "kind", "exec");
        if (bad [i].kind != 2) ah_msg_set_bool (m, "ok", true);
        else ah_msg_set_str (m, "ok", "yes");
        if (bad [i].kind == 3) ah_msg_set_int (m, "agent_id", 5);
        if (bad [i].kind == 4) ah_msg_set_int (m, "at", -5);
        if (bad [i].kind == 5) ah_msg_set_bin (m, "detail", "xx", 2);
        ah_msg_send (&m, client, "recorder");
        reply = s_recv (client);
        CHECK (reply && ah_msg_int (reply, "req", 0) == 100 + (int64_t) i
               && !ah_msg_bool (reply, "ok", true) && ah_msg_int (reply, "status", 0) == 400);
        CHECK (reply && ah_msg_str (reply, "error") && strstr (ah_msg_str (reply, "error"), bad [i].field));
        ah_msg_destroy (&reply);
    }
    m = ah_msg_new ("WHAT_IS_THIS");
    ah_msg_set_int (m, "req", 7);
    ah_msg_send (&m, client, "recorder");
    reply = s_recv (client);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 400 && strstr (ah_msg_str (reply, "error"), "WHAT_IS_THIS"));
    ah_msg_destroy (&reply);
    //  What it cannot serve is refused at once, and it goes on serving.
    actor_probe_refusals ("recorder");
    s_record (client, "fs.mkdir", "after-probe", 45);
    reply = s_recv (client);
    CHECK (reply && ah_msg_int (reply, "req", 0) == 45 && ah_msg_bool (reply, "ok", false));
    ah_msg_destroy (&reply);

    //  Over-long details are capped, not lost.
    char *longcmd = malloc (10000);
    memset (longcmd, 'x', 9999);
    longcmd [9999] = 0;
    s_record (client, "exec", longcmd, 44);
    free (longcmd);
    reply = s_recv (client);
    CHECK (reply && ah_msg_bool (reply, "ok", false));
    ah_msg_destroy (&reply);
    CHECK (s_count ("kind = 'exec' AND length(detail) = 4096 AND detail LIKE '%...'") == 1);

    //  State events from lifecycle: kind "state", actor = the sender.
    zsock_t *lifecycle = ah_bus_connect ("lifecycle");
    zclock_sleep (50);
    m = ah_msg_new ("SANDBOX_STATE");
    ah_msg_set_str (m, "agent_id", "a1b2c3d4e5f6");
    ah_msg_set_str (m, "state", "error");
    ah_msg_set_str (m, "op", "start");
    ah_msg_set_str (m, "error", "image 'nope' not found");
    ah_msg_send (&m, lifecycle, "recorder");
    m = ah_msg_new ("SANDBOX_STATE");
    ah_msg_set_str (m, "agent_id", "a1b2c3d4e5f6");
    ah_msg_set_str (m, "state", "running");
    ah_msg_send (&m, lifecycle, "recorder");
    zclock_sleep (50);
    zstr_send (rec, "FLUSH");
    CHECK (zsock_wait (rec) == 0);
    CHECK (s_count ("kind = 'state' AND actor = 'lifecycle' AND detail = 'error (op start)'"
                    " AND ok = 0 AND error = 'image ''nope'' not found'") == 1);
    CHECK (s_count ("kind = 'state' AND detail = 'running' AND ok = 1") == 1);
    zsock_destroy (&lifecycle);

    //  OP_LIST: newest first, filtered, limited.
    m = ah_msg_new ("OP_LIST");
    ah_msg_set_int (m, "req", 50);
    ah_msg_set_str (m, "agent_id", "a1b2c3d4e5f6");
    ah_msg_set_int (m, "limit", 2);
    ah_msg_send (&m, client, "recorder");
    reply = s_recv (client);
    CHECK (reply && ah_msg_bool (reply, "ok", false));
    size_t size = 0;
    const void *raw = reply ? ah_msg_raw (reply, "operations", &size) : NULL;
    CHECK (raw != NULL);
    if (raw) {
        msgpack_unpacked up;
        msgpack_unpacked_init (&up);
        CHECK (msgpack_unpack_next (&up, raw, size, NULL) == MSGPACK_UNPACK_SUCCESS);
        CHECK (up.data.type == MSGPACK_OBJECT_ARRAY && up.data.via.array.size == 2);
        if (up.data.type == MSGPACK_OBJECT_ARRAY && up.data.via.array.size == 2) {
            msgpack_object_map *first = &up.data.via.array.ptr [0].via.map;
            bool found = false;
            for (uint32_t i = 0; i < first->size; i++)
                if (first->ptr [i].key.via.str.size == 6 && !memcmp (first->ptr [i].key.via.str.ptr, "detail", 6))
                    found = first->ptr [i].val.type == MSGPACK_OBJECT_STR
                         && first->ptr [i].val.via.str.size == 7
                         && !memcmp (first->ptr [i].val.via.str.ptr, "running", 7);
            CHECK (found);
        }
        msgpack_unpacked_destroy (&up);
    }
    ah_msg_destroy (&reply);
    zactor_destroy (&rec);
}

static void
s_test_retention (void)
{
    s_fresh_db ();
    char sql [512];
    int64_t now = ah_store_now_ms ();
    snprintf (sql, sizeof sql,
              "INSERT INTO operations (at, actor, kind, ok) VALUES (%lld, 'old', 'exec', 1);"
              "INSERT INTO operations (at, actor, kind, ok) VALUES (%lld, 'recent', 'exec', 1);",
              (long long) (now - 40LL * 86400000), (long long) (now - 20LL * 86400000));
    s_sql (sql);
    //  More old rows than one deletion batch (5000).
    snprintf (sql, sizeof sql,
              "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 12000)"
              " INSERT INTO operations (at, actor, kind, ok) SELECT %lld, 'old', 'exec', 1 FROM n;",
              (long long) (now - 31LL * 86400000));
    s_sql (sql);
    CHECK (s_count ("actor = 'old'") == 12001);
    ah_recorder_args_t args = { .db_path = s_db, .retention_days = 30 };
    zactor_t *rec = ah_actor_new (&ah_recorder_actor, &args, NULL);
    zactor_destroy (&rec);
    CHECK (s_count ("actor = 'old'") == 0);
    CHECK (s_count ("actor = 'recent'") == 1);
    //  The sweep recorded itself, with its count.
    CHECK (s_count ("kind = 'retention.sweep' AND actor = 'recorder' AND ok = 1"
                    " AND detail = 'deleted 12001 operations older than 30 days'") == 1);

    //  The default is 30 days; a clock the test moves: 11 days on, the
    //  20-day-old row is past retention, the sweep's own row is not.
    ah_recorder_args_t defaults = { .db_path = s_db };
    rec = ah_actor_new (&ah_recorder_actor, &defaults, NULL);
    zstr_sendx (rec, "SWEEP", "0", NULL);
    char *count = zstr_recv (rec);
    CHECK (count && streq (count, "0"));
    zstr_free (&count);
    CHECK (s_count ("actor = 'recent'") == 1);
    zstr_sendx (rec, "SWEEP", "950400000", NULL);
    count = zstr_recv (rec);
    CHECK (count && streq (count, "1"));
    zstr_free (&count);
    zactor_destroy (&rec);
    CHECK (s_count ("actor = 'recent'") == 0);
    CHECK (s_count ("kind = 'retention.sweep'") == 2);
    CHECK (s_count ("kind = 'retention.sweep' AND detail = 'deleted 1 operations older than 30 days'") == 1);
}

//  OP_LIST's answer: the ids and one string field of each row.
static int
s_list (zsock_t *client, ah_msg_t *m, int64_t *ids, int max, int64_t *next, const char *field, char out [][64])
{
    static int64_t req = 1000;
    ah_msg_set_int (m, "req", ++req);
    ah_msg_send (&m, client, "recorder");
    ah_msg_t *reply = s_recv (client);
    if (!reply || !ah_msg_bool (reply, "ok", false)) {
        ah_msg_destroy (&reply);
        return -1;
    }
    *next = ah_msg_is_nil (reply, "next") ? 0 : ah_msg_int (reply, "next", 0);
    size_t size = 0;
    const void *raw = ah_msg_raw (reply, "operations", &size);
    int n = 0;
    msgpack_unpacked up;
    msgpack_unpacked_init (&up);
    if (raw && msgpack_unpack_next (&up, raw, size, NULL) == MSGPACK_UNPACK_SUCCESS
    &&  up.data.type == MSGPACK_OBJECT_ARRAY) {
        for (uint32_t r = 0; r < up.data.via.array.size && n < max; r++, n++) {
            msgpack_object_map *row = &up.data.via.array.ptr [r].via.map;
            out [n][0] = 0;
            for (uint32_t i = 0; i < row->size; i++) {
                msgpack_object_str *key = &row->ptr [i].key.via.str;
                msgpack_object *val = &row->ptr [i].val;
                if (key->size == 2 && !memcmp (key->ptr, "id", 2))
                    ids [n] = val->via.i64;
                if (key->size == strlen (field) && !memcmp (key->ptr, field, key->size)) {
                    if (val->type == MSGPACK_OBJECT_STR)
                        snprintf (out [n], 64, "%.*s", (int) val->via.str.size, val->via.str.ptr);
                    else if (val->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                        snprintf (out [n], 64, "%llu", (unsigned long long) val->via.u64);
                    else if (val->type == MSGPACK_OBJECT_BOOLEAN)
                        snprintf (out [n], 64, "%s", val->via.boolean ? "true" : "false");
                    else
                        snprintf (out [n], 64, "nil");
                }
            }
        }
    }
    msgpack_unpacked_destroy (&up);
    ah_msg_destroy (&reply);
    return n;
}

//  The fields of a row (agent name kept after the agent is gone, run,
//  bytes, the cause of a state), the filters and keyset paging while
//  rows arrive.
static void
s_test_fields_and_filters (zsock_t *client)
{
    s_fresh_db ();
    s_sql ("INSERT INTO agents (id, name, tenant, image, cpus, memory_mb, idle_minutes, created_at)"
           " VALUES ('a1b2c3d4e5f6', 'alpha', 'acme', 'img', 1, 512, 15, 1)");
    ah_recorder_args_t args = { .db_path = s_db, .flush_ms = 50 };
    zactor_t *rec = ah_actor_new (&ah_recorder_actor, &args, NULL);
    ah_msg_t *m = ah_msg_new ("OP_RECORD");
    ah_msg_set_str (m, "agent_id", "a1b2c3d4e5f6");
    ah_msg_set_str (m, "actor", "api:ci");
    ah_msg_set_str (m, "kind", "fs.read");
    ah_msg_set_str (m, "detail", "src/main.c");
    ah_msg_set_str (m, "run", "run-42");
    ah_msg_set_int (m, "bytes", 1234);
    ah_msg_set_bool (m, "ok", true);
    ah_msg_send (&m, client, "recorder");
    m = ah_msg_new ("OP_RECORD");
    ah_msg_set_str (m, "agent_id", "a1b2c3d4e5f6");
    ah_msg_set_str (m, "actor", "api:ci");
    ah_msg_set_str (m, "kind", "exec");
    ah_msg_set_str (m, "detail", "make test_100%");
    ah_msg_set_str (m, "run", "run-43");
    ah_msg_set_bool (m, "ok", false);
    ah_msg_set_str (m, "error", "exit 2");
    ah_msg_send (&m, client, "recorder");
    //  The agent is deleted: rows that follow keep its tenant and name.
    zclock_sleep (30);
    s_sql ("DELETE FROM agents");
    zsock_t *lifecycle = ah_bus_connect ("lifecycle");
    zclock_sleep (50);
    m = ah_msg_new ("SANDBOX_STATE");
    ah_msg_set_str (m, "agent_id", "a1b2c3d4e5f6");
    ah_msg_set_str (m, "state", "destroyed");
    ah_msg_set_str (m, "by", "api:ci");
    ah_msg_send (&m, lifecycle, "recorder");
    zclock_sleep (50);
    zstr_send (rec, "FLUSH");
    CHECK (zsock_wait (rec) == 0);
    CHECK (s_count ("kind = 'fs.read' AND bytes = 1234 AND run = 'run-42' AND agent_name = 'alpha'"
                    " AND tenant = 'acme' AND ok = 1") == 1);
    CHECK (s_count ("kind = 'exec' AND ok = 0 AND error = 'exit 2' AND bytes IS NULL AND run = 'run-43'") == 1);
    CHECK (s_count ("kind = 'state' AND detail = 'destroyed' AND actor = 'api:ci' AND agent_name = 'alpha'"
                    " AND tenant = 'acme'") == 1);
    zsock_destroy (&lifecycle);

    //  Hostile values are refused with the field named.
    m = ah_msg_new ("OP_RECORD");
    ah_msg_set_int (m, "req", 9);
    ah_msg_set_str (m, "actor", "x");
    ah_msg_set_str (m, "kind", "exec");
    ah_msg_set_bool (m, "ok", true);
    ah_msg_set_int (m, "bytes", -3);
    ah_msg_send (&m, client, "recorder");
    ah_msg_t *reply = s_recv (client);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 400 && strstr (ah_msg_str (reply, "error"), "bytes"));
    ah_msg_destroy (&reply);
    m = ah_msg_new ("OP_RECORD");
    ah_msg_set_int (m, "req", 10);
    ah_msg_set_str (m, "actor", "x");
    ah_msg_set_str (m, "kind", "exec");
    ah_msg_set_bool (m, "ok", true);
    ah_msg_set_str (m, "run", "");
    ah_msg_send (&m, client, "recorder");
    reply = s_recv (client);
    CHECK (reply && ah_msg_int (reply, "status", 0) == 400 && strstr (ah_msg_str (reply, "error"), "run"));
    ah_msg_destroy (&reply);

    //  Filters: by name after the agent is gone, operation, run, failed,
    //  text (LIKE wildcards are literal), tenant.
    int64_t ids [64], next = 0;
    char vals [64][64];
    m = ah_msg_new ("OP_LIST");
    ah_msg_set_str (m, "agent_id", "alpha");
    CHECK (s_list (client, m, ids, 64, &next, "kind", vals) == 3);
    m = ah_msg_new ("OP_LIST");
    ah_msg_set_str (m, "kind", "fs.read");
    CHECK (s_list (client, m, ids, 64, &next, "bytes", vals) == 1 && streq (vals [0], "1234"));
    m = ah_msg_new ("OP_LIST");
    ah_msg_set_str (m, "run", "run-43");
    CHECK (s_list (client, m, ids, 64, &next, "error", vals) == 1 && streq (vals [0], "exit 2"));
    m = ah_msg_new ("OP_LIST");
    ah_msg_set_bool (m, "failed", true);
    CHECK (s_list (client, m, ids, 64, &next, "kind", vals) == 1 && streq (vals [0], "exec"));
    m = ah_msg_new ("OP_LIST");
    ah_msg_set_str (m, "q", "test_100%");
    CHECK (s_list (client, m, ids, 64, &next, "kind", vals) == 1);
    m = ah_msg_new ("OP_LIST");
    ah_msg_set_str (m, "q", "test_1000");
    CHECK (s_list (client, m, ids, 64, &next, "kind", vals) == 0);
    m = ah_msg_new ("OP_LIST");
    ah_msg_set_str (m, "q", "%");
    CHECK (s_list (client, m, ids, 64, &next, "kind", vals) == 1);
    m = ah_msg_new ("OP_LIST");
    ah_msg_set_str (m, "tenant", "other");
    CHECK (s_list (client, m, ids, 64, &next, "kind", vals) == 0);
    m = ah_msg_new ("OP_LIST");
    ah_msg_set_str (m, "tenant", "acme");
    ah_msg_set_str (m, "kind", "state");
    CHECK (s_list (client, m, ids, 64, &next, "actor", vals) == 1 && streq (vals [0], "api:ci"));

    //  Keyset paging: 25 rows in pages of 10 while 7 more arrive between
    //  pages: every original row seen once, none twice, none skipped.
    s_sql ("DELETE FROM operations");
    for (int i = 0; i < 25; i++)
        s_record (client, "fs.list", "page", 0);
    zstr_send (rec, "FLUSH");
    CHECK (zsock_wait (rec) == 0);
    int seen = 0;
    int64_t before = 0, last = INT64_MAX;
    bool ordered = true;
    for (int page = 0; page < 10; page++) {
        m = ah_msg_new ("OP_LIST");
        ah_msg_set_str (m, "kind", "fs.list");
        ah_msg_set_int (m, "limit", 10);
        if (before)
            ah_msg_set_int (m, "before", before);
        int n = s_list (client, m, ids, 64, &next, "kind", vals);
        for (int i = 0; i < n; i++) {
            ordered = ordered && ids [i] < last;
            last = ids [i];
        }
        seen += n;
        for (int i = 0; i < 3; i++)
            s_record (client, "fs.list", "page", 0);
        if (!next)
            break;
        before = next;
    }
    CHECK (ordered);
    CHECK (seen == 25);
    zactor_destroy (&rec);
}

//  A process runs the bus and the recorder, sees 20 rows flushed in two
//  batches, queues 5 more, and is killed. The 20 must all be there.
static void
s_test_crash (void)
{
    s_fresh_db ();
    pid_t pid = fork ();
    if (pid == 0) {
        ah_bus_args_t bus_args = { 0 };
        zactor_t *bus = ah_actor_new (&ah_bus_actor, &bus_args, NULL);
        ah_recorder_args_t args = { .db_path = s_db, .flush_rows = 10, .flush_ms = 60000 };
        zactor_t *rec = ah_actor_new (&ah_recorder_actor, &args, NULL);
        zsock_t *client = ah_bus_connect ("api");
        for (int i = 0; i < 20; i++)
            s_record (client, "fs.write", "a.txt", 0);
        for (int i = 0; i < 200 && s_count (NULL) < 20; i++)
            zclock_sleep (10);
        for (int i = 0; i < 5; i++)
            s_record (client, "fs.write", "lost.txt", 0);
        zclock_sleep (100);
        raise (SIGKILL);
        (void) bus;
        (void) rec;
        _exit (3);
    }
    int status = 0;
    CHECK (waitpid (pid, &status, 0) == pid);
    CHECK (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL);
    CHECK (s_count ("detail = 'a.txt'") == 20);
    CHECK (s_count ("detail = 'lost.txt'") == 0);     //  unflushed: the price of batching
    //  And the database is whole.
    sqlite3 *db;
    CHECK (sqlite3_open (s_db, &db) == SQLITE_OK);
    sqlite3_stmt *stmt;
    CHECK (sqlite3_prepare_v2 (db, "PRAGMA integrity_check", -1, &stmt, NULL) == SQLITE_OK);
    CHECK (sqlite3_step (stmt) == SQLITE_ROW && streq ((const char *) sqlite3_column_text (stmt, 0), "ok"));
    sqlite3_finalize (stmt);
    sqlite3_close (db);
}

static void
s_test_bad_db (void)
{
    //  No database: the start fails with the reason instead of running blind.
    ah_recorder_args_t args = { .db_path = "/nonexistent/dir/agenthold.db" };
    char *err = NULL;
    zactor_t *rec = ah_actor_new (&ah_recorder_actor, &args, &err);
    CHECK (rec == NULL);
    CHECK (err && strstr (err, "cannot open the database"));
    free (err);
}

int
main (void)
{
    snprintf (s_dir, sizeof s_dir, "/tmp/ah-test-recorder-XXXXXX");
    if (!mkdtemp (s_dir))
        return 1;
    snprintf (s_db, sizeof s_db, "%s/agenthold.db", s_dir);

    //  The crash test forks: do it before this process has any zmq thread.
    s_test_crash ();

    zsys_init ();
    ah_bus_args_t bus_args = { 0 };
    zactor_t *bus = ah_actor_new (&ah_bus_actor, &bus_args, NULL);
    zsock_t *client = ah_bus_connect ("api");
    s_test_batches (client);
    s_test_timer_and_replies (client);
    s_test_retention ();
    s_test_fields_and_filters (client);
    s_test_bad_db ();
    zsock_destroy (&client);
    zactor_destroy (&bus);

    char cmd [128];
    snprintf (cmd, sizeof cmd, "rm -rf %s", s_dir);
    if (system (cmd) != 0)
        fprintf (stderr, "could not remove %s\n", s_dir);
    return CHECK_DONE ();
}
