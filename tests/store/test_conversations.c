/*  tests/store/test_conversations.c: conversations and their logs
    (store/conversations.h) on a real file: made under an agent in its
    tenant, found and listed only within that tenant, the ACP session and
    turn state kept; entries numbered 1, 2, 3 per conversation (two
    writers at once included), refused when not a known kind, not a JSON
    object, too large or without an author; the log read in pages; all of
    it gone with the agent.                                            */
#include "store/conversations.h"
#include "tests/common/check.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static char s_dir [] = "/tmp/ah-test-conv-XXXXXX";
static char s_db [128];

static ah_store_t *s_open (void)
{
    char *err = NULL;
    ah_store_t *store = ah_store_open (s_db, true, &err);
    if (!store)
        fprintf (stderr, "open: %s\n", err ? err : "?");
    free (err);
    return store;
}

static int64_t s_count (ah_store_t *store, const char *sql)
{
    sqlite3_stmt *stmt = ah_store_prepare (store, sql);
    int64_t n = -1;
    if (stmt && ah_store_step (store, stmt) == SQLITE_ROW)
        n = sqlite3_column_int64 (stmt, 0);
    if (stmt)
        sqlite3_reset (stmt);
    return n;
}

typedef struct {
    char ids [8][AH_CONV_ID_LEN + 1];
    int count;
    int stop_after;                 //  0: never
} listed_t;

static int s_listed (void *ud, const ah_conversation_t *c)
{
    listed_t *l = ud;
    if (l->count < 8)
        memcpy (l->ids [l->count], c->id, sizeof c->id);
    l->count++;
    return l->stop_after && l->count >= l->stop_after;
}

static bool s_hex16 (const char *id)
{
    if (strlen (id) != AH_CONV_ID_LEN)
        return false;
    for (const char *c = id; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return false;
    return true;
}

static void s_test_conversations (ah_store_t *store)
{
    char a [AH_CONV_ID_LEN + 1], b [AH_CONV_ID_LEN + 1], c [AH_CONV_ID_LEN + 1], d [AH_CONV_ID_LEN + 1];
    CHECK (ah_store_conversation_create (store, "aaaaaaaaaaaa", 1000, a) == 1);
    CHECK (ah_store_conversation_create (store, "aaaaaaaaaaaa", 2000, b) == 1);
    CHECK (ah_store_conversation_create (store, "aaaaaaaaaaaa", 1500, c) == 1);
    CHECK (ah_store_conversation_create (store, "bbbbbbbbbbbb", 1000, d) == 1);
    CHECK (s_hex16 (a) && s_hex16 (b) && strcmp (a, b) != 0);
    char none [AH_CONV_ID_LEN + 1] = "x";
    CHECK (ah_store_conversation_create (store, "nobodynobody", 1000, none) == 0);
    CHECK_STR (none, "");

    //  Found within its agent's tenant, or with no tenant; not in another.
    ah_conversation_t conv;
    CHECK (ah_store_conversation_get (store, a, "acme", &conv) == 1);
    CHECK_STR (conv.id, a);
    CHECK_STR (conv.agent_id, "aaaaaaaaaaaa");
    CHECK_STR (conv.tenant, "acme");
    CHECK_STR (conv.acp_session_id, "");
    CHECK_STR (conv.turn_state, "idle");
    CHECK (conv.created_at == 1000 && conv.last_activity_at == 1000);
    CHECK (ah_store_conversation_get (store, a, NULL, &conv) == 1);
    CHECK (ah_store_conversation_get (store, a, "", &conv) == 1);
    CHECK (ah_store_conversation_get (store, a, "globex", &conv) == 0);
    CHECK (ah_store_conversation_get (store, d, "globex", &conv) == 1);
    CHECK_STR (conv.tenant, "globex");
    CHECK (ah_store_conversation_get (store, "0000000000000000", NULL, &conv) == 0);

    //  An agent's, oldest first; another tenant's token sees none.
    listed_t l = { 0 };
    CHECK (ah_store_conversations_list (store, "aaaaaaaaaaaa", "acme", s_listed, &l) == 3);
    CHECK (l.count == 3);
    CHECK_STR (l.ids [0], a);
    CHECK_STR (l.ids [1], c);
    CHECK_STR (l.ids [2], b);
    memset (&l, 0, sizeof l);
    CHECK (ah_store_conversations_list (store, "aaaaaaaaaaaa", "globex", s_listed, &l) == 0 && l.count == 0);
    memset (&l, 0, sizeof l);
    l.stop_after = 2;
    CHECK (ah_store_conversations_list (store, "aaaaaaaaaaaa", NULL, s_listed, &l) == 2);
    memset (&l, 0, sizeof l);
    CHECK (ah_store_conversations_list (store, "bbbbbbbbbbbb", NULL, s_listed, &l) == 1);
    CHECK_STR (l.ids [0], d);

    //  The ACP session behind it, bounded; cleared with NULL.
    CHECK (ah_store_conversation_set_session (store, a, "sess_2235401b1fe2645d2f230409") == 1);
    CHECK (ah_store_conversation_get (store, a, NULL, &conv) == 1);
    CHECK_STR (conv.acp_session_id, "sess_2235401b1fe2645d2f230409");
    char longsession [AH_CONV_SESSION_MAX + 2];
    memset (longsession, 's', sizeof longsession - 1);
    longsession [sizeof longsession - 1] = 0;
    CHECK (ah_store_conversation_set_session (store, a, longsession) == -1);
    CHECK (strstr (ah_store_error (store), "ACP session id of 257 bytes") != NULL);
    longsession [AH_CONV_SESSION_MAX] = 0;
    CHECK (ah_store_conversation_set_session (store, a, longsession) == 1);
    CHECK (ah_store_conversation_get (store, a, NULL, &conv) == 1);
    CHECK (strlen (conv.acp_session_id) == AH_CONV_SESSION_MAX);
    CHECK (ah_store_conversation_set_session (store, a, NULL) == 1);
    CHECK (ah_store_conversation_get (store, a, NULL, &conv) == 1);
    CHECK_STR (conv.acp_session_id, "");
    CHECK (ah_store_conversation_set_session (store, "0000000000000000", "s") == 0);

    //  Turn state; last activity only moves forward.
    CHECK (ah_store_conversation_set_turn (store, a, "running", 5000) == 1);
    CHECK (ah_store_conversation_get (store, a, NULL, &conv) == 1);
    CHECK_STR (conv.turn_state, "running");
    CHECK (conv.last_activity_at == 5000);
    CHECK (s_count (store, "SELECT count(*) FROM conversations"
                           " WHERE agent_id = 'aaaaaaaaaaaa' AND turn_state <> 'idle'") == 1);
    CHECK (ah_store_conversation_set_turn (store, a, "idle", 4000) == 1);
    CHECK (ah_store_conversation_get (store, a, NULL, &conv) == 1);
    CHECK (conv.last_activity_at == 5000 && strcmp (conv.turn_state, "idle") == 0);
    CHECK (ah_store_conversation_set_turn (store, a, "sleeping", 6000) == -1);
    CHECK (strstr (ah_store_error (store), "'sleeping' is not a turn state") != NULL);
    CHECK (ah_store_conversation_set_turn (store, "0000000000000000", "idle", 6000) == 0);
    //  The table refuses what the function would.
    CHECK (ah_store_exec (store, "UPDATE conversations SET turn_state = 'bogus'", NULL) != 0);
}

typedef struct {
    int64_t seqs [64];
    char kinds [64][24];
    char bodies [64][64];
    int count;
} page_t;

static int s_paged (void *ud, const ah_conv_entry_t *e)
{
    page_t *p = ud;
    if (p->count < 64) {
        p->seqs [p->count] = e->seq;
        snprintf (p->kinds [p->count], sizeof p->kinds [0], "%s", e->kind);
        snprintf (p->bodies [p->count], sizeof p->bodies [0], "%.*s", (int) e->body_size, e->body);
    }
    p->count++;
    return 0;
}

static void s_test_log (ah_store_t *store)
{
    char a [AH_CONV_ID_LEN + 1], b [AH_CONV_ID_LEN + 1];
    CHECK (ah_store_conversation_create (store, "aaaaaaaaaaaa", 1000, a) == 1);
    CHECK (ah_store_conversation_create (store, "aaaaaaaaaaaa", 1000, b) == 1);
    const char *prompt = "{\"text\":\"hello\"}";
    CHECK (ah_store_conversation_append (store, a, "prompt", prompt, strlen (prompt), "api:alice", 10) == 1);
    const char *notice = "{\"text\":\"Starting the sandbox\\u2026\"}";
    CHECK (ah_store_conversation_append (store, a, "notice", notice, strlen (notice), "server", 11) == 2);
    //  Each conversation counts from 1.
    CHECK (ah_store_conversation_append (store, b, "prompt", prompt, strlen (prompt), "api:bob", 12) == 1);
    //  The body's size is what counts: no NUL needed after it.
    const char padded [] = "{\"stopReason\":\"end_turn\"}GARBAGE";
    CHECK (ah_store_conversation_append (store, a, "stop", padded, sizeof padded - 1 - 7, "harness", 13) == 3);
    CHECK (ah_store_conversation_append (store, "0000000000000000", "prompt", prompt, strlen (prompt),
                                         "api:alice", 14) == 0);

    //  Refusals, each named, none of them numbered.
    CHECK (ah_store_conversation_append (store, a, "chat", prompt, strlen (prompt), "x", 15) == -1);
    CHECK (strstr (ah_store_error (store), "'chat' is not a log entry kind") != NULL);
    CHECK (ah_store_conversation_append (store, a, NULL, prompt, strlen (prompt), "x", 15) == -1);
    CHECK (ah_store_conversation_append (store, a, "update", "{\"a\":", 5, "harness", 15) == -1);
    CHECK (ah_store_conversation_append (store, a, "update", "[1,2]", 5, "harness", 15) == -1);
    CHECK (ah_store_conversation_append (store, a, "update", "\"text\"", 6, "harness", 15) == -1);
    CHECK (ah_store_conversation_append (store, a, "update", "", 0, "harness", 15) == -1);
    CHECK (ah_store_conversation_append (store, a, "update", "{\"a\":\"\0\"}", 9, "harness", 15) == -1);
    CHECK (ah_store_conversation_append (store, a, "update", prompt, strlen (prompt), "", 15) == -1);
    CHECK (strstr (ah_store_error (store), "author of 0 bytes") != NULL);
    CHECK (ah_store_conversation_append (store, a, "update", prompt, strlen (prompt), NULL, 15) == -1);
    size_t big = AH_CONV_BODY_MAX + 1;
    char *huge = malloc (big);
    memset (huge, ' ', big);
    huge [0] = '{';
    huge [big - 1] = '}';
    CHECK (ah_store_conversation_append (store, a, "update", huge, big, "harness", 15) == -1);
    CHECK (strstr (ah_store_error (store), "body of 4259841 bytes") != NULL);
    //  At the bound it goes in (once it is an object).
    CHECK (ah_store_conversation_append (store, a, "update", huge, big - 1, "harness", 15) == -1);
    huge [big - 2] = '}';
    CHECK (ah_store_conversation_append (store, a, "update", huge, big - 1, "harness", 15) == 4);
    free (huge);
    CHECK (s_count (store, "SELECT count(*) FROM conversation_log") == 5);

    //  Pages: after a seq, at most limit, in order.
    for (int i = 0; i < 21; i++) {
        char body [64];
        int n = snprintf (body, sizeof body, "{\"i\":%d}", i);
        CHECK (ah_store_conversation_append (store, a, "update", body, (size_t) n, "harness", 100 + i) == 5 + i);
    }
    page_t p = { 0 };
    CHECK (ah_store_conversation_log (store, a, 0, 3, s_paged, &p) == 3);
    CHECK (p.seqs [0] == 1 && p.seqs [1] == 2 && p.seqs [2] == 3);
    CHECK_STR (p.kinds [0], "prompt");
    CHECK_STR (p.bodies [0], prompt);
    CHECK_STR (p.kinds [2], "stop");
    CHECK_STR (p.bodies [2], "{\"stopReason\":\"end_turn\"}");
    memset (&p, 0, sizeof p);
    CHECK (ah_store_conversation_log (store, a, 4, 10, s_paged, &p) == 10);
    CHECK (p.seqs [0] == 5 && p.seqs [9] == 14);
    CHECK_STR (p.bodies [0], "{\"i\":0}");
    memset (&p, 0, sizeof p);
    CHECK (ah_store_conversation_log (store, a, 14, 10, s_paged, &p) == 10);
    CHECK (p.seqs [9] == 24);
    memset (&p, 0, sizeof p);
    CHECK (ah_store_conversation_log (store, a, 24, 10, s_paged, &p) == 1 && p.seqs [0] == 25);
    memset (&p, 0, sizeof p);
    CHECK (ah_store_conversation_log (store, a, 25, 10, s_paged, &p) == 0);
    //  A limit out of range is the largest page; a negative after is 0.
    memset (&p, 0, sizeof p);
    CHECK (ah_store_conversation_log (store, a, -5, 0, s_paged, &p) == 25);
    memset (&p, 0, sizeof p);
    CHECK (ah_store_conversation_log (store, b, 0, 100, s_paged, &p) == 1 && p.seqs [0] == 1);
    CHECK (ah_store_conversation_log (store, "0000000000000000", 0, 100, s_paged, &p) == 0);
}

//  Two connections appending at once: every seq once, none skipped.
typedef struct {
    const char *id;
    int ok;
} writer_t;

#define WRITES 150

static void *s_writer (void *arg)
{
    writer_t *w = arg;
    ah_store_t *store = s_open ();
    for (int i = 0; store && i < WRITES; i++)
        if (ah_store_conversation_append (store, w->id, "update", "{}", 2, "harness", i) > 0)
            w->ok++;
    ah_store_close (&store);
    return NULL;
}

static void s_test_two_writers (ah_store_t *store)
{
    char id [AH_CONV_ID_LEN + 1];
    CHECK (ah_store_conversation_create (store, "bbbbbbbbbbbb", 1000, id) == 1);
    writer_t w [2] = { { id, 0 }, { id, 0 } };
    pthread_t t [2];
    for (int i = 0; i < 2; i++)
        pthread_create (&t [i], NULL, s_writer, &w [i]);
    for (int i = 0; i < 2; i++)
        pthread_join (t [i], NULL);
    CHECK (w [0].ok == WRITES && w [1].ok == WRITES);
    char sql [256];
    snprintf (sql, sizeof sql, "SELECT count(DISTINCT seq) * 1000000 + max(seq) FROM conversation_log"
              " WHERE conversation_id = '%s'", id);
    CHECK (s_count (store, sql) == 2 * WRITES * 1000000 + 2 * WRITES);
}

//  The agent goes: its conversations and their logs with it.
static void s_test_cascade (ah_store_t *store)
{
    CHECK (s_count (store, "SELECT count(*) FROM conversations WHERE agent_id = 'aaaaaaaaaaaa'") > 0);
    CHECK (ah_store_exec (store, "DELETE FROM agents WHERE id = 'aaaaaaaaaaaa'", NULL) == 0);
    CHECK (s_count (store, "SELECT count(*) FROM conversations WHERE agent_id = 'aaaaaaaaaaaa'") == 0);
    CHECK (s_count (store, "SELECT count(*) FROM conversation_log"
                           " WHERE conversation_id NOT IN (SELECT id FROM conversations)") == 0);
    CHECK (s_count (store, "SELECT count(*) FROM conversation_log") == 2 * WRITES);
}

int main (void)
{
    if (!mkdtemp (s_dir)) {
        perror ("mkdtemp");
        return 1;
    }
    snprintf (s_db, sizeof s_db, "%s/conv.db", s_dir);
    ah_store_t *store = s_open ();
    CHECK (store != NULL);
    if (store) {
        CHECK (ah_store_exec (store,
            "INSERT INTO tenants (name) VALUES ('acme'), ('globex');"
            "INSERT INTO agents (id, name, tenant, image, cpus, memory_mb, idle_minutes, created_at) VALUES"
            " ('aaaaaaaaaaaa', 'coder', 'acme', 'i', 1, 64, 15, 0),"
            " ('bbbbbbbbbbbb', 'coder', 'globex', 'i', 1, 64, 15, 0);", NULL) == 0);
        s_test_conversations (store);
        s_test_log (store);
        s_test_two_writers (store);
        s_test_cascade (store);
        ah_store_close (&store);
    }
    char command [128];
    snprintf (command, sizeof command, "rm -rf '%s'", s_dir);
    if (system (command) != 0)
        fprintf (stderr, "could not remove %s\n", s_dir);
    return CHECK_DONE ();
}
