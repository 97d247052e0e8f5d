/*  tests/api/test_api.c: the API actor alone on the bus, with fake
    actors around it (fake_actors.h: a "lifecycle" that answers like the
    real one and writes the rows the real one would), driven over real
    HTTP with libcurl: routes, status codes, auth, bad bodies, caps,
    ?wait, timeouts, malformed requests, a cookie and a ticket whose
    token's id went to another token.                                   */
#include "actors/api.h"
#include "tests/api/api_http.h"
#include "tests/api/fake_actors.h"
#include "common/bounds.h"
#include "common/bus.h"
#include "common/msg.h"
#include "common/token.h"
#include "store/store.h"

#include <ctype.h>
#include <curl/curl.h>
#include <msgpack.h>
#include <stdarg.h>
#include <strings.h>
#include <jansson.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

int main (void)
{
    zsys_handler_set (NULL);        //  SIGTERM (ctest's timeout) kills, not hangs
    zsys_init ();
    zsys_set_linger (0);
    curl_global_init (CURL_GLOBAL_DEFAULT);
    char dir [] = "/tmp/ah-test-api-XXXXXX";
    CHECK (mkdtemp (dir) != NULL);
    char db [256];
    snprintf (db, sizeof db, "%s/agenthold.db", dir);

    //  The schema and one API token, as the server would leave them.
    ah_store_t *store = ah_store_open (db, true, NULL);
    CHECK (store != NULL);
    ah_token_new (t_token);
    char hash [AH_TOKEN_HEX];
    ah_token_hash (t_token, hash);
    sqlite3_stmt *st = ah_store_prepare (store,
        "INSERT INTO api_tokens (name, hash, admin, created_at) VALUES ('admin', :h, 1, 0)");
    ah_store_bind_text (st, ":h", hash);
    CHECK (ah_store_step (store, st) == SQLITE_DONE);
    sqlite3_reset (st);
    CHECK (ah_store_exec (store, "INSERT INTO policy_status (holder, script, loaded_at, error, error_at)"
                                 " VALUES ('lifecycle', 'limits.lua', 1764406800000, NULL, NULL),"
                                 " ('sleeper', 'idle.lua', 1764406800000, 'idle.lua:3: syntax error', 1764406900000)",
                          NULL) == 0);

    ah_bus_args_t bus_args = { .tap_endpoint = NULL };
    zactor_t *bus = ah_actor_new (&ah_bus_actor, &bus_args, NULL);
    zactor_t *lifecycle = zactor_new (fake_actors, db);

    //  A listen address that is taken: the actor says so and fails to start.
    ah_config_t *config = ah_config_new_defaults ();
    free (config->listen);
    config->listen = strdup ("127.0.0.1:0");
    free (config->data_dir);
    config->data_dir = strdup (dir);            //  the secrets key is made there
    ah_api_args_t args = { .config = config, .db_path = db, .reply_timeout_s = 1, .body_stall_s = 1 };
    char *start_err = NULL;
    zactor_t *api = ah_actor_new (&ah_api_actor, &args, &start_err);
    CHECK (api != NULL && start_err == NULL);
    zsock_set_rcvtimeo (api, 5000);
    zstr_send (api, "PORT");
    char *port = zstr_recv (api);
    t_port = port ? atoi (port) : 0;
    zstr_free (&port);
    CHECK (t_port > 0);
    if (t_port <= 0)
        return CHECK_DONE ();       //  nothing else can work; the log says why
    {
        ah_config_t *taken = ah_config_new_defaults ();
        free (taken->listen);
        taken->listen = zsys_sprintf ("127.0.0.1:%d", t_port);
        ah_api_args_t args2 = { .config = taken, .db_path = db };
        //  The start fails, and says why.
        zactor_t *second = ah_actor_new (&ah_api_actor, &args2, &start_err);
        CHECK (second == NULL && start_err && strstr (start_err, "cannot listen"));
        free (start_err);
        ah_config_destroy (&taken);
    }

    long status;
    json_t *j;

    //  healthz without a token
    j = t_http ("GET", "/healthz", NULL, NULL, &status);
    CHECK (status == 200 && json_is_true (json_object_get (j, "ok")));
    json_decref (j);

    //  Auth: none, wrong, wrong scheme
    EXPECT ("GET", "/api/v1/agents", NULL, NULL, 401, "bearer token");
    EXPECT ("GET", "/api/v1/agents", NULL, "0000000000000000000000000000000000000000000000000000000000000000", 401, NULL);
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"x\"}", "nope", 401, NULL);

    //  Empty list
    j = t_http ("GET", "/api/v1/agents", NULL, t_token, &status);
    CHECK (status == 200 && json_array_size (json_object_get (j, "agents")) == 0);
    json_decref (j);

    //  Bad bodies: each names its problem.
    EXPECT ("POST", "/api/v1/agents", "{\"name\": ", t_token, 400, "bad JSON");
    EXPECT ("POST", "/api/v1/agents", "[1,2]", t_token, 400, "JSON object");
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"a\",\"colour\":\"red\"}", t_token, 400, "unknown field 'colour'");
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"a\",\"cpus\":\"two\"}", t_token, 400, "'cpus'");
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"a\",\"memory_mb\":1.5}", t_token, 400, "'memory_mb'");
    //  A key given twice is named, however long and however escaped.
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"a\",\"name\":\"b\"}", t_token, 400, "field 'name' is given twice");
    EXPECT ("POST", "/api/v1/agents", "{\"idle_minutes\":1,\n \"idle_minutes\" :2}", t_token, 400,
            "field 'idle_minutes' is given twice (line 2");
    EXPECT ("POST", "/api/v1/agents", "{\"a\\\"b\\\\\":1, \"a\\\"b\\\\\":2}", t_token, 400,
            "field 'a\"b\\' is given twice");
    EXPECT ("PATCH", "/api/v1/agents/alice", "{\"cpus\":1,\"image\":\"x:1\",\"cpus\":1e-12}", t_token, 400,
            "field 'cpus' is given twice");
    EXPECT ("POST", "/api/v1/agents", "{\"image\":\"x\"}", t_token, 400, "'name' is required");
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"Bad Name\"}", t_token, 400, "agent name 'Bad Name' must be");
    EXPECT ("POST", "/api/v1/agents", NULL, t_token, 400, "body is required");

    //  Create: 201 and the agent JSON, from the row lifecycle wrote.
    j = t_http ("POST", "/api/v1/agents",
                "{\"name\":\"alice\",\"cpus\":1,\"memory_mb\":1024,\"idle_minutes\":0.5}", t_token, &status);
    CHECK (status == 201);
    CHECK_STR (t_str (j, "name"), "alice");
    CHECK_STR (t_str (j, "state"), "sleeping");
    CHECK (t_str (j, "id") && strlen (t_str (j, "id")) == 12);
    CHECK (json_number_value (json_object_get (j, "cpus")) == 1);
    CHECK (json_integer_value (json_object_get (j, "memory_mb")) == 1024);
    CHECK (json_is_false (json_object_get (j, "needs_rebuild")));
    CHECK (t_str (j, "created_at") && strchr (t_str (j, "created_at"), 'T'));
    CHECK (json_is_null (json_object_get (j, "last_activity_at")));
    CHECK (json_is_null (json_object_get (j, "error")));
    char alice_id [32] = "";
    snprintf (alice_id, sizeof alice_id, "%s", t_str (j, "id") ? t_str (j, "id") : "");
    json_decref (j);
    //  The message lifecycle got: typed fields, a req.
    zstr_send (lifecycle, "LAST");
    char *last = zstr_recv (lifecycle);
    json_t *lj = json_loads (last, 0, NULL);
    json_t *fields = json_object_get (lj, "fields");
    CHECK_STR (t_str (fields, "name"), "alice");
    CHECK (json_is_real (json_object_get (fields, "cpus")));
    CHECK (json_is_integer (json_object_get (fields, "memory_mb")));
    CHECK (json_is_integer (json_object_get (fields, "req")));
    json_decref (lj);
    zstr_free (&last);

    //  Refused by policy: 422 with the policy's message.
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"bob\",\"cpus\":16}", t_token, 422, "over the limit of 8");
    //  Name taken: 409.
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"alice\"}", t_token, 409, "alice");

    //  List, show by name and by id, unknown.
    j = t_http ("GET", "/api/v1/agents", NULL, t_token, &status);
    CHECK (status == 200 && json_array_size (json_object_get (j, "agents")) == 1);
    json_decref (j);
    j = t_http ("GET", "/api/v1/agents/alice", NULL, t_token, &status);
    CHECK (status == 200);
    CHECK_STR (t_str (j, "id"), alice_id);
    json_decref (j);
    char path [256];
    snprintf (path, sizeof path, "/api/v1/agents/%s", alice_id);
    j = t_http ("GET", path, NULL, t_token, &status);
    CHECK (status == 200);
    CHECK_STR (t_str (j, "name"), "alice");
    json_decref (j);
    EXPECT ("GET", "/api/v1/agents/bob", NULL, t_token, 404, "no agent named 'bob'");
    EXPECT ("POST", "/api/v1/agents/bob/start", NULL, t_token, 404, "no agent named 'bob'");

    //  Update
    j = t_http ("PATCH", "/api/v1/agents/alice", "{\"cpus\":4}", t_token, &status);
    CHECK (status == 200);
    CHECK (json_number_value (json_object_get (j, "cpus")) == 4);
    CHECK (json_is_true (json_object_get (j, "needs_rebuild")));
    json_decref (j);
    EXPECT ("PATCH", "/api/v1/agents/alice", "{\"name\":\"carol\"}", t_token, 400, "'name'");
    EXPECT ("PATCH", "/api/v1/agents/alice", "{}", t_token, 400, "nothing to change");
    test_text_fields ();

    //  Routes and methods
    EXPECT ("POST", "/api/v1/agents/alice/explode", NULL, t_token, 404, "no route");
    EXPECT ("GET", "/api/v1/agents/alice/start", NULL, t_token, 405, NULL);
    EXPECT ("PUT", "/api/v1/agents", "{}", t_token, 405, NULL);
    EXPECT ("GET", "/nowhere", NULL, t_token, 404, NULL);
    EXPECT ("POST", "/api/v1/agents/alice/start?colour=red", NULL, t_token, 400, "colour");
    EXPECT ("POST", "/api/v1/agents/alice/start", "{\"force\":true}", t_token, 400, "unknown field 'force'");

    //  Start without waiting: 202 and the transitional state.
    j = t_http ("POST", "/api/v1/agents/alice/start", NULL, t_token, &status);
    if (status != 202)
        fprintf (stderr, "start: %ld %s\n", status, t_str (j, "error") ? t_str (j, "error") : "");
    CHECK (status == 202);
    CHECK_STR (t_str (j, "state"), "starting");
    json_decref (j);
    //  Stop with ?wait=1 right away: lifecycle refuses (still starting) 409 naming the state...
    EXPECT ("POST", "/api/v1/agents/alice/stop?wait=1", NULL, t_token, 409, "starting");
    zclock_sleep (300);
    //  ...then it is running, and stop?wait=1 returns once it sleeps.
    j = t_http ("POST", "/api/v1/agents/alice/stop?wait=1", NULL, t_token, &status);
    CHECK (status == 200);
    CHECK_STR (t_str (j, "state"), "sleeping");
    json_decref (j);
    j = t_http ("POST", "/api/v1/agents/alice/start?wait=1&timeout=10", "{}", t_token, &status);
    CHECK (status == 200);
    CHECK_STR (t_str (j, "state"), "running");
    json_decref (j);
    EXPECT ("POST", "/api/v1/agents/alice/start", NULL, t_token, 409, "running");

    //  Exec over a (fake) tunnel: records cut into 3-byte messages.
    j = t_http ("POST", "/api/v1/agents/alice/exec",
                "{\"cmd\":\"make\",\"timeout\":5,\"env\":{\"A\":\"b\"},\"stdin\":\"x\"}", t_token, &status);
    CHECK (status == 200);
    CHECK_STR (t_str (j, "stdout"), "hello");
    CHECK_STR (t_str (j, "stderr"), "oops");
    CHECK (json_integer_value (json_object_get (j, "status")) == 2);
    CHECK (json_is_false (json_object_get (j, "timed_out")));
    json_decref (j);
    zstr_send (lifecycle, "OTHER");
    last = zstr_recv (lifecycle);
    CHECK (last && strstr (last, "\"ch\":\"exec\"") && strstr (last, "\"cmd\":\"make\"")
           && strstr (last, "\"env\":{\"A\":\"b\"}") && strstr (last, "\"timeout\":5"));
    zstr_free (&last);
    EXPECT ("POST", "/api/v1/agents/alice/exec", "{\"cmd\":\"bad-record\"}", t_token, 502, "malformed");
    EXPECT ("POST", "/api/v1/agents/alice/exec", "{\"cmd\":7}", t_token, 400, "'cmd'");
    EXPECT ("POST", "/api/v1/agents/alice/exec", "{\"cmd\":\"x\",\"env\":{\"A\":1}}", t_token, 400, "'env'");
    EXPECT ("POST", "/api/v1/agents/alice/exec", "{\"cmd\":\"x\",\"user\":\"root\"}", t_token, 400, "unknown field 'user'");
    //  A download: 100000 bytes in two messages, ACKed as written.
    {
        buf_t b = { 0 };
        CURLcode rc = t_download ("/api/v1/agents/alice/fs/file?path=d%2Fdata.bin", &status, &b);
        CHECK (rc == CURLE_OK && status == 200 && b.size == 100000);
        bool same = b.size == 100000;
        for (size_t i = 0; same && i < b.size; i++)
            same = (uint8_t) b.data [i] == (uint8_t) (i % 251);
        CHECK (same);
        free (b.data);
        zstr_send (lifecycle, "OTHER");
        last = zstr_recv (lifecycle);
        CHECK (last && strstr (last, "\"path\":\"d/data.bin\""));         //  decoded
        zstr_free (&last);
        //  A stream that breaks half way: the client sees it fail.
        b = (buf_t) { 0 };
        rc = t_download ("/api/v1/agents/alice/fs/file?path=short", &status, &b);
        CHECK (rc != CURLE_OK || status >= 500);
        CHECK (b.size < 1000);
        free (b.data);
        zclock_sleep (100);
        zstr_send (lifecycle, "TUNNEL");
        char *counts = zstr_recv (lifecycle);
        long long acked = 0;
        int eofs = 0, closes = 0;
        char seen [64] = "";
        if (counts)
            sscanf (counts, "%lld %d %d %63s", &acked, &eofs, &closes, seen);
        //  stdin "x" went as one STDIN record: kind 0, length 1, 'x'.
        CHECK_STR (seen, "000000000178");
        zstr_free (&counts);
        //  exec: the record bytes ACKed as parsed; the download as written
        //  while its channel lived (here it closes right after the data;
        //  the e2e test moves 1 MiB, which stalls without ACKs).
        CHECK (acked > 0);
        CHECK (eofs >= 3);
        CHECK (closes >= 1);                        //  the bad record's channel was reset
    }
    EXPECT ("GET", "/api/v1/agents/alice/fs/list?path=nope", NULL, t_token, 404, "No such file");
    //  The tree of a running agent whose home the server does not open:
    //  sandboxd's fs.tree, decoded into the server's own tree's shape;
    //  whatever a sandbox sends that is not well formed is a 502.
    j = t_http ("GET", "/api/v1/agents/alice/tree?path=t-ok", NULL, t_token, &status);
    CHECK (status == 200);
    CHECK_STR (t_str (j, "path"), "t-ok");
    json_t *es = json_object_get (j, "entries");
    CHECK (json_array_size (es) == 2);
    CHECK_STR (json_string_value (json_object_get (json_array_get (es, 1), "path")), "uploads/n?");
    CHECK_STR (json_string_value (json_object_get (json_array_get (es, 1), "name")), "n?");
    CHECK (json_is_true (json_object_get (json_array_get (es, 1), "uploaded")));
    CHECK (json_integer_value (json_object_get (json_array_get (es, 1), "depth")) == 2);
    CHECK (json_integer_value (json_object_get (j, "count")) == 2);
    CHECK (json_integer_value (json_object_get (j, "max_depth")) == 6);
    CHECK (json_integer_value (json_object_get (j, "max_entries")) == 2000);
    CHECK (json_is_true (json_object_get (j, "depth_limit_reached")));
    CHECK (json_is_false (json_object_get (j, "incomplete")));
    json_decref (j);
    zstr_send (lifecycle, "OTHER");
    last = zstr_recv (lifecycle);
    CHECK (last && strstr (last, "\"ch\":\"fs.tree\"") && strstr (last, "\"max_depth\":6")
           && strstr (last, "\"max_entries\":2000") && strstr (last, "\"all\":false"));
    zstr_free (&last);
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=t-bad", NULL, t_token, 502, "malformed entry");
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=t-more", NULL, t_token, 502, "more of the tree");
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=t-short", NULL, t_token, 502, "ended early");
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=t-big", NULL, t_token, 502, "over 16 MiB");
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=nope", NULL, t_token, 404, "No such file");
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=t-old", NULL, t_token, 502, "restart it");
    EXPECT ("GET", "/api/v1/agents/alice/tree?path=..", NULL, t_token, 400, NULL);
    test_home_paths (lifecycle);
    EXPECT ("GET", "/api/v1/agents/alice/fs/file", NULL, t_token, 400, "'path' is required");
    EXPECT ("PUT", "/api/v1/agents/alice/fs/mkdir?path=x", "{}", t_token, 405, NULL);
    EXPECT ("GET", "/api/v1/agents/alice/fs/other", NULL, t_token, 404, "no route");
    j = t_http ("POST", "/api/v1/agents/alice/rebuild?wait=1", NULL, t_token, &status);
    CHECK (status == 200);
    CHECK_STR (t_str (j, "state"), "sleeping");
    json_decref (j);
    EXPECT ("POST", "/api/v1/agents/alice/start?wait=maybe", NULL, t_token, 400, "wait");

    //  A body over the cap: 413 before it is read.
    {
        size_t big = AH_API_MAX_BODY + 10;
        char *body = malloc (big + 1);
        memset (body, ' ', big);
        body [0] = '{';
        body [big - 1] = '}';
        body [big] = 0;
        j = t_http ("POST", "/api/v1/agents", body, t_token, &status);
        CHECK (status == 413 && t_error_has (j, "over the limit"));
        json_decref (j);
        free (body);
    }
    //  A client that leaves while its request waits for lifecycle: the
    //  request is forgotten (no answer written to a closed connection),
    //  the server goes on.
    {
        char req [600];
        const char *body = "{\"name\":\"mute\"}";
        snprintf (req, sizeof req, "POST /api/v1/agents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                  "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", t_token, strlen (body), body);
        int fd = socket (AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons (t_port) };
        inet_pton (AF_INET, "127.0.0.1", &sa.sin_addr);
        CHECK (connect (fd, (struct sockaddr *) &sa, sizeof sa) == 0);
        CHECK (write (fd, req, strlen (req)) == (ssize_t) strlen (req));
        zclock_sleep (200);
        close (fd);
        zclock_sleep (1500);                        //  past the reply timeout
        EXPECT ("GET", "/healthz", NULL, NULL, 200, NULL);
    }

    //  Lifecycle does not answer: 504 after the (shortened) timeout.
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"mute\"}", t_token, 504, "did not answer");

    //  Policy
    j = t_http ("GET", "/api/v1/policy", NULL, t_token, &status);
    CHECK (status == 200 && json_array_size (json_object_get (j, "policies")) == 2);
    {
        json_t *second = json_array_get (json_object_get (j, "policies"), 1);
        CHECK_STR (t_str (second, "holder"), "sleeper");
        CHECK (t_str (second, "error") && strstr (t_str (second, "error"), "syntax error"));
    }
    json_decref (j);
    EXPECT ("POST", "/api/v1/policy/reload", NULL, t_token, 202, NULL);
    zclock_sleep (100);
    zstr_send (lifecycle, "RELOADS");
    char *reloads = zstr_recv (lifecycle);
    CHECK_STR (reloads, "1");
    zstr_free (&reloads);

    //  A token's id is a rowid SQLite gives again: a row deleted behind
    //  the API's back (no sweep of its sessions) and a new token that
    //  takes its id. The old cookie and ticket must not act as the new one.
    {
        char tok_a [AH_TOKEN_HEX], tok_b [AH_TOKEN_HEX], h [AH_TOKEN_HEX];
        ah_token_new (tok_a);
        ah_token_new (tok_b);
        ah_token_hash (tok_a, h);
        st = ah_store_prepare (store, "INSERT INTO api_tokens (name, hash, created_at) VALUES ('reuse-a', :h, 0)");
        ah_store_bind_text (st, ":h", h);
        CHECK (ah_store_step (store, st) == SQLITE_DONE);
        sqlite3_reset (st);
        int64_t id_a = sqlite3_last_insert_rowid (ah_store_db (store));
        char body [200], cookie [128], ticket [AH_TOKEN_HEX] = "";
        snprintf (body, sizeof body, "{\"token\":\"%s\"}", tok_a);
        j = t_http_cookie ("POST", "/api/v1/login", body, NULL, NULL, cookie, &status);
        CHECK (status == 200 && strlen (cookie) == 17 + 1 + 64);
        json_decref (j);
        j = t_http_cookie ("GET", "/api/v1/me", NULL, NULL, cookie, NULL, &status);
        CHECK (status == 200 && streq (t_str (j, "token") ? t_str (j, "token") : "", "reuse-a"));
        json_decref (j);
        j = t_http ("POST", "/api/v1/agents/alice/terminal/ticket", NULL, tok_a, &status);
        CHECK (status == 201 && t_str (j, "ticket"));
        snprintf (ticket, sizeof ticket, "%s", t_str (j, "ticket") ? t_str (j, "ticket") : "");
        json_decref (j);
        //  Gone, and another token made: it takes the same id.
        CHECK (ah_store_exec (store, "DELETE FROM api_tokens WHERE name = 'reuse-a'", NULL) == 0);
        ah_token_hash (tok_b, h);
        st = ah_store_prepare (store, "INSERT INTO api_tokens (name, hash, created_at) VALUES ('reuse-b', :h, 0)");
        ah_store_bind_text (st, ":h", h);
        CHECK (ah_store_step (store, st) == SQLITE_DONE);
        sqlite3_reset (st);
        CHECK (sqlite3_last_insert_rowid (ah_store_db (store)) == id_a);
        j = t_http_cookie ("GET", "/api/v1/me", NULL, NULL, cookie, NULL, &status);
        CHECK (status == 401 && t_error_has (j, "token of this session is gone"));
        json_decref (j);
        j = t_http_cookie ("GET", "/api/v1/login", NULL, NULL, cookie, NULL, &status);
        CHECK (status == 200 && json_is_false (json_object_get (j, "signed_in")));
        json_decref (j);
        char req [600];
        snprintf (req, sizeof req, "GET /console/terminal/%s?ticket=%s HTTP/1.1\r\nHost: x\r\n"
                  "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", alice_id, ticket);
        char *raw = t_raw (req, strlen (req), false);
        CHECK (strstr (raw, " 401 ") && strstr (raw, "no longer stands"));
        free (raw);
        //  The new token signs in as itself.
        snprintf (body, sizeof body, "{\"token\":\"%s\"}", tok_b);
        j = t_http_cookie ("POST", "/api/v1/login", body, NULL, NULL, cookie, &status);
        CHECK (status == 200 && streq (t_str (j, "token") ? t_str (j, "token") : "", "reuse-b"));
        json_decref (j);
        j = t_http_cookie ("GET", "/api/v1/me", NULL, NULL, cookie, NULL, &status);
        CHECK (status == 200 && streq (t_str (j, "token") ? t_str (j, "token") : "", "reuse-b"));
        json_decref (j);
    }

    //  The audit trail: who created alice, and the refused create.
    {
        zstr_send (lifecycle, "RECORDS");
        char *rec = zstr_recv (lifecycle);
        CHECK (rec && atoi (rec) >= 4);
        CHECK (rec && strstr (rec, "\"actor\":\"api:admin\""));
        zstr_free (&rec);
    }
    zstr_send (lifecycle, "LAST");
    last = zstr_recv (lifecycle);
    CHECK (last && strstr (last, "\"tenant\":\"default\""));
    zstr_free (&last);

    //  Operations (recorder), runtimes and briefings (builder), turns (sleeper)
    j = t_http ("GET", "/api/v1/agents/alice/operations?limit=5", NULL, t_token, &status);
    CHECK (status == 200);
    {
        json_t *op = json_array_get (json_object_get (j, "operations"), 0);
        CHECK_STR (t_str (op, "kind"), "create");
        CHECK (t_str (op, "at") && strchr (t_str (op, "at"), 'T'));
        CHECK (json_integer_value (json_object_get (op, "at_ms")) == 1764406800000);
        CHECK_STR (t_str (op, "agent_id"), alice_id);
    }
    json_decref (j);
    zstr_send (lifecycle, "OTHER");
    last = zstr_recv (lifecycle);
    CHECK (last && strstr (last, "\"limit\":5") && strstr (last, alice_id));
    zstr_free (&last);
    EXPECT ("GET", "/api/v1/operations?limit=0", NULL, t_token, 400, "'limit'");
    EXPECT ("GET", "/api/v1/operations?before=1764406800000", NULL, t_token, 200, NULL);
    //  A name that is no agent (now) is asked of the recorder by the name
    //  its rows kept (a deleted agent's trail); the fake recorder answers
    //  its canned rows. An empty trail would be a 404 (e2e.tenants).
    EXPECT ("GET", "/api/v1/agents/bob/operations", NULL, t_token, 200, NULL);
    EXPECT ("GET", "/api/v1/agents/..bob/operations", NULL, t_token, 400, NULL);
    j = t_http ("GET", "/api/v1/runtimes", NULL, t_token, &status);
    CHECK (status == 200);
    CHECK_STR (t_str (json_array_get (json_object_get (j, "runtimes"), 0), "name"), "debian");
    json_decref (j);
    j = t_http ("GET", "/api/v1/runtimes/debian/briefing", NULL, t_token, &status);
    CHECK (status == 200);
    CHECK_STR (t_str (j, "text"), "You run on Debian.");
    json_decref (j);
    EXPECT ("GET", "/api/v1/runtimes/plan9/briefing", NULL, t_token, 404, "plan9");
    EXPECT ("GET", "/api/v1/runtimes/debian/other", NULL, t_token, 404, "no route");
    j = t_http ("POST", "/api/v1/agents/alice/turns", "{\"lease_ms\":5000}", t_token, &status);
    CHECK (status == 201);
    CHECK_STR (t_str (j, "turn_id"), "00112233aabbccdd");
    CHECK (t_str (j, "expires_at") && strchr (t_str (j, "expires_at"), 'T'));
    json_decref (j);
    zstr_send (lifecycle, "OTHER");
    last = zstr_recv (lifecycle);
    CHECK (last && strstr (last, "\"lease_ms\":5000") && strstr (last, alice_id));
    zstr_free (&last);
    EXPECT ("POST", "/api/v1/agents/alice/turns", "{\"lease\":5}", t_token, 400, "unknown field 'lease'");
    EXPECT ("POST", "/api/v1/agents/bob/turns", NULL, t_token, 404, "no agent named 'bob'");
    EXPECT ("POST", "/api/v1/turns/00112233aabbccdd/renew", "{\"lease_ms\":9000}", t_token, 200, NULL);
    EXPECT ("POST", "/api/v1/turns/feedface/renew", NULL, t_token, 404, "no turn 'feedface'");
    EXPECT ("DELETE", "/api/v1/turns/00112233aabbccdd", NULL, t_token, 200, NULL);
    EXPECT ("GET", "/api/v1/turns/00112233aabbccdd", NULL, t_token, 405, NULL);

    //  Malformed requests: answered or closed, never a crash.
    char *out = t_raw ("GARBAGE\r\n\r\n", 11, true);
    free (out);
    out = t_raw ("POST /api/v1/agents HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 61, false);
    CHECK (strstr (out, " 400 ") && strstr (out, "Content-Length"));
    free (out);
    {
        char req [512];
        snprintf (req, sizeof req, "POST /api/v1/agents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                  "Content-Length: 5\r\n\r\n{\"na", t_token);
        out = t_raw (req, strlen (req), true);             //  short body, then EOF
        free (out);
        //  A body that stops coming: the connection closes once it has
        //  stalled body_stall_s (1 s here), well before our 3 s read limit.
        int64_t t0 = zclock_mono ();
        out = t_raw (req, strlen (req), false);
        int64_t took = zclock_mono () - t0;
        CHECK (took >= 900 && took < 2800);
        CHECK (!strstr (out, "HTTP/1.1 2"));
        free (out);
    }
    {
        char longpath [3000];
        memset (longpath, 'a', sizeof longpath);
        memcpy (longpath, "GET /", 5);
        memcpy (longpath + sizeof longpath - 20, " HTTP/1.1\r\nHost: x\r\n\r\n", 19);
        out = t_raw (longpath, sizeof longpath - 1, true);
        free (out);
    }
    out = t_raw ("GET /api/v1/agents/%ff%fe HTTP/1.1\r\nHost: x\r\n\r\n", 47, true);
    free (out);
    EXPECT ("GET", "/healthz", NULL, NULL, 200, NULL);

    test_bodies (lifecycle, store);

    //  The tunnel holds each tenant's egress lists and secrets: the API
    //  tells it (EGRESS_CHANGED) when its writer changed them, before
    //  the admin's answer; not for a change of the limits alone.
    {
        char *seen = NULL;
        j = t_http ("PATCH", "/api/v1/tenants/default", "{\"max_sandboxes\": 50}", t_token, &status);
        CHECK (status == 200);
        json_decref (j);
        zstr_send (lifecycle, "EGRESS");
        seen = zstr_recv (lifecycle);
        CHECK_STR (seen, "");
        zstr_free (&seen);
        j = t_http ("PATCH", "/api/v1/tenants/default", "{\"egress_deny\": [\"evil.example\"]}", t_token, &status);
        CHECK (status == 200);
        json_decref (j);
        j = t_http ("PUT", "/api/v1/tenants/default/egress/secrets/api.example.com",
                    "{\"header\": \"Authorization\", \"value\": \"Bearer x\"}", t_token, &status);
        CHECK (status == 200);
        json_decref (j);
        j = t_http ("DELETE", "/api/v1/tenants/default/egress/secrets/api.example.com", NULL, t_token, &status);
        CHECK (status == 200);
        json_decref (j);
        zclock_sleep (50);
        zstr_send (lifecycle, "EGRESS");
        seen = zstr_recv (lifecycle);
        CHECK_STR (seen, "default;default;default;");
        zstr_free (&seen);
    }

    //  Destroy, waiting: the agent is gone afterwards.
    j = t_http ("DELETE", "/api/v1/agents/alice?wait=1", NULL, t_token, &status);
    CHECK (status == 200);
    CHECK_STR (t_str (j, "state"), "destroyed");
    json_decref (j);
    EXPECT ("GET", "/api/v1/agents/alice", NULL, t_token, 404, NULL);

    //  Lifecycle gone: the bus answers for it, 503 naming it.
    zactor_destroy (&lifecycle);
    zclock_sleep (50);
    EXPECT ("POST", "/api/v1/agents", "{\"name\":\"dave\"}", t_token, 503, "lifecycle");

    zactor_destroy (&api);
    zactor_destroy (&bus);
    ah_config_destroy (&config);
    ah_store_close (&store);
    char cmd [300];
    snprintf (cmd, sizeof cmd, "rm -rf %s", dir);
    if (system (cmd) != 0)
        fprintf (stderr, "cannot remove %s\n", dir);
    curl_global_cleanup ();
    return CHECK_DONE ();
}
