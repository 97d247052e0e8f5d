/*  tests/sleeper/test_sleeper.c: the sleeper actor alone on the bus with
    a real SQLite file and the real idle.lua (copied, so it can be edited).
    A DEALER named "lifecycle" receives the stops; passes are asked for
    with SLEEPER_CHECK and an explicit clock, so nothing here races time. */
#include "actors/sleeper.h"
#include "common/bus.h"
#include "common/msg.h"
#include "store/store.h"
#include "../common/check.h"
#include "tests/common/actor_probe.h"

#include <stdlib.h>
#include <unistd.h>

static char s_dir [64];
static zsock_t *s_api, *s_lifecycle;
static int64_t s_req;
static int64_t T;                   //  the test's epoch, ms

static void s_sql (ah_store_t *store, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    char *sql = zsys_vprintf (fmt, ap);
    va_end (ap);
    char *err = NULL;
    if (ah_store_exec (store, sql, &err)) {
        fprintf (stderr, "SQL failed: %s: %s\n", sql, err);
        CHECK (0);
    }
    free (err);
    free (sql);
}

static void s_agent (ah_store_t *store, const char *id, double idle_minutes, int64_t last)
{
    s_sql (store, "INSERT INTO agents (id, name, image, cpus, memory_mb, idle_minutes, created_at)"
           " VALUES ('%s', 'n-%s', 'img', 1, 512, %f, %lld)", id, id, idle_minutes, (long long) T);
    s_sql (store, "INSERT INTO sandboxes (agent_id, state, image, cpus, memory_mb, last_activity_at, updated_at)"
           " VALUES ('%s', 'running', 'img', 1, 512, %lld, %lld)", id, (long long) last, (long long) T);
}

static ah_msg_t *s_call (ah_msg_t *m)
{
    ah_msg_set_int (m, "req", ++s_req);
    ah_msg_send (&m, s_api, "sleeper");
    char *err = NULL;
    ah_msg_t *r = ah_msg_recv (s_api, true, &err);
    CHECK (r != NULL);
    free (err);
    return r;
}

//  A pass at T + offset_s; returns how many were idle.
static int s_check (double offset_s)
{
    ah_msg_t *m = ah_msg_new ("SLEEPER_CHECK");
    ah_msg_set_int (m, "now_ms", T + (int64_t) (offset_s * 1000));
    ah_msg_t *r = s_call (m);
    int idle = r ? (int) ah_msg_int (r, "idle", -1) : -1;
    ah_msg_destroy (&r);
    return idle;
}

//  Collects the agent ids of the SANDBOX_STOPs lifecycle got, "a,b,".
static void s_stops (char *out, size_t size)
{
    out [0] = 0;
    zsock_set_rcvtimeo (s_lifecycle, 200);
    ah_msg_t *m;
    while ((m = ah_msg_recv (s_lifecycle, true, NULL))) {
        CHECK_STR (ah_msg_type (m), "SANDBOX_STOP");
        CHECK_STR (ah_msg_str (m, "reason"), "idle");
        strncat (out, ah_msg_str (m, "agent"), size - strlen (out) - 2);
        strcat (out, ",");
        ah_msg_destroy (&m);
    }
}

static void s_forecast (ah_store_t *store, const char *id, char *why, size_t size, int64_t *sleeps_at)
{
    sqlite3_stmt *st = ah_store_prepare (store, "SELECT why, sleeps_at FROM sleep_forecast WHERE agent_id = :id");
    ah_store_bind_text (st, ":id", id);
    why [0] = 0;
    *sleeps_at = -1;
    if (ah_store_step (store, st) == SQLITE_ROW) {
        snprintf (why, size, "%s", sqlite3_column_text (st, 0) ? (const char *) sqlite3_column_text (st, 0) : "");
        *sleeps_at = sqlite3_column_int64 (st, 1);
    }
    sqlite3_reset (st);
}

static void s_send (ah_msg_t *m)
{
    ah_msg_send (&m, s_api, "sleeper");
}

int main (void)
{
    zsys_init ();
    snprintf (s_dir, sizeof s_dir, "/tmp/ah-test-sleeper-XXXXXX");
    CHECK (mkdtemp (s_dir) != NULL);
    char db [128], lua [128], cmd [512];
    snprintf (db, sizeof db, "%s/agenthold.db", s_dir);
    snprintf (lua, sizeof lua, "%s/lua", s_dir);
    snprintf (cmd, sizeof cmd, "mkdir -p %s && cp %s/lua/*.lua %s/", lua, AH_SOURCE_DIR, lua);
    CHECK (system (cmd) == 0);
    char *err = NULL;
    ah_store_t *store = ah_store_open (db, true, &err);
    CHECK (store != NULL);
    T = ah_store_now_ms () + 1000;          //  after the actor starts: its own clock doesn't interfere

    //  a: untouched. b: will hold a turn. c: a terminal open. d: busy CPU.
    //  e: an abandoned turn lease. f: light CPU (3%), for the rule edit.
    s_agent (store, "a", 1, T);
    s_agent (store, "b", 1, T);
    s_agent (store, "c", 1, T);
    s_agent (store, "d", 1, T);
    s_agent (store, "e", 1, T);
    s_agent (store, "f", 1, T);
    s_agent (store, "g", 1, T);             //  activity lifecycle reports (the due index)
    s_sql (store, "INSERT INTO agents (id, name, image, cpus, memory_mb, idle_minutes, created_at)"
           " VALUES ('z', 'n-z', 'img', 1, 512, 1, 0)");
    s_sql (store, "INSERT INTO sandboxes (agent_id, state, image, cpus, memory_mb, updated_at)"
           " VALUES ('z', 'sleeping', 'img', 1, 512, 0)");

    ah_config_t *config = ah_config_new_defaults ();
    free (config->lua_dir);
    config->lua_dir = strdup (lua);
    zactor_t *bus = ah_actor_new (&ah_bus_actor, &(ah_bus_args_t) { NULL }, NULL);
    s_api = ah_bus_connect ("api");
    s_lifecycle = ah_bus_connect ("lifecycle");
    zsock_set_rcvtimeo (s_api, 5000);
    ah_sleeper_args_t args = { .config = config, .db_path = db, .check_interval_ms = 3600000 };
    zactor_t *sleeper = ah_actor_new (&ah_sleeper_actor, &args, NULL);
    CHECK (sleeper != NULL);

    //  Turn for b (long lease), an abandoned one for e (1 s lease).
    ah_msg_t *m = ah_msg_new ("TURN_START");
    ah_msg_set_str (m, "agent", "n-b");
    ah_msg_set_int (m, "lease_ms", 3600000);
    ah_msg_t *r = s_call (m);
    CHECK (r && ah_msg_int (r, "status", 0) == 201 && ah_msg_str (r, "turn_id"));
    char turn_b [32] = "";
    if (r && ah_msg_str (r, "turn_id"))
        snprintf (turn_b, sizeof turn_b, "%s", ah_msg_str (r, "turn_id"));
    ah_msg_destroy (&r);
    m = ah_msg_new ("TURN_START");
    ah_msg_set_str (m, "agent", "e");
    ah_msg_set_int (m, "lease_ms", 1000);
    r = s_call (m);
    CHECK (r && ah_msg_int (r, "status", 0) == 201);
    ah_msg_destroy (&r);
    m = ah_msg_new ("TURN_START");
    ah_msg_set_str (m, "agent", "nobody");
    r = s_call (m);
    CHECK (r && ah_msg_int (r, "status", 0) == 404 && strstr (ah_msg_str (r, "error"), "nobody"));
    ah_msg_destroy (&r);

    m = ah_msg_new ("TERMINALS");
    ah_msg_set_str (m, "agent_id", "c");
    ah_msg_set_int (m, "open", 1);
    s_send (m);
    //  d: 50% of a core; f: 3% of a core (two samples each, 10 s apart).
    const char *ids [] = { "d", "f" };
    const int64_t used [] = { 5000000000LL, 300000000LL };
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++) {
            m = ah_msg_new ("AGENT_STATS");
            ah_msg_set_str (m, "agent_id", ids [i]);
            ah_msg_set_int (m, "cpu_ns", 1000000000LL + k * used [i]);
            ah_msg_set_int (m, "at_ns", 1000000000LL + k * 10000000000LL);
            s_send (m);
        }

    //  Halfway through the timeout: nobody is idle; a's forecast is T+60 s.
    char stops [256], why [32];
    int64_t at;
    CHECK (s_check (30) == 0);
    s_forecast (store, "a", why, sizeof why, &at);
    CHECK_STR (why, "recent use");
    CHECK (at == T + 60000);
    s_forecast (store, "b", why, sizeof why, &at);
    CHECK_STR (why, "turn");
    s_forecast (store, "c", why, sizeof why, &at);
    CHECK_STR (why, "terminal");
    s_forecast (store, "d", why, sizeof why, &at);
    CHECK_STR (why, "cpu");
    s_forecast (store, "z", why, sizeof why, &at);
    CHECK (at == -1);                       //  sleeping: no forecast
    s_stops (stops, sizeof stops);
    CHECK_STR (stops, "");

    //  The due index: g's use moves in the database (lifecycle's activity
    //  flush); until lifecycle says so its verdict is not asked again,
    //  and a CPU share under idle.lua's recheck_cpu_share changes nothing.
    s_sql (store, "UPDATE sandboxes SET last_activity_at = %lld WHERE agent_id = 'g'", (long long) (T + 40000));
    for (int k = 0; k < 2; k++) {
        m = ah_msg_new ("AGENT_STATS");
        ah_msg_set_str (m, "agent_id", "g");
        ah_msg_set_int (m, "cpu_ns", 1000000000LL + k * 50000000LL);       //  0.5% of a core
        ah_msg_set_int (m, "at_ns", 1000000000LL + k * 10000000000LL);
        s_send (m);
    }
    CHECK (s_check (45) == 0);
    s_forecast (store, "g", why, sizeof why, &at);
    CHECK (at == T + 60000);
    m = ah_msg_new ("AGENT_CHANGED");
    ah_msg_set_str (m, "agent_id", "g");
    s_send (m);
    CHECK (s_check (46) == 0);
    s_forecast (store, "g", why, sizeof why, &at);
    CHECK_STR (why, "recent use");
    CHECK (at == T + 100000);

    //  Past the timeout: a (untouched), e (lease expired), f (3% < 5%) sleep.
    CHECK (s_check (62) == 3);
    s_stops (stops, sizeof stops);
    CHECK (strstr (stops, "a,") && strstr (stops, "e,") && strstr (stops, "f,"));
    CHECK (!strstr (stops, "b,") && !strstr (stops, "c,") && !strstr (stops, "d,"));
    //  A second pass does not ask again.
    CHECK (s_check (63) == 3);
    s_stops (stops, sizeof stops);
    CHECK_STR (stops, "");

    //  Edit the rule to 1% CPU: f is busy now, without a restart.
    snprintf (cmd, sizeof cmd, "sed -i 's/CPU_THRESHOLD = 0.05/CPU_THRESHOLD = 0.01/' %s/idle.lua", lua);
    CHECK (system (cmd) == 0);
    m = ah_msg_new ("POLICY_RELOAD");
    s_send (m);
    CHECK (s_check (64) == 2);
    s_forecast (store, "f", why, sizeof why, &at);
    CHECK_STR (why, "cpu");
    //  A broken edit keeps the 1% rule in force.
    snprintf (cmd, sizeof cmd, "echo 'function idle(' >> %s/idle.lua", lua);
    CHECK (system (cmd) == 0);
    m = ah_msg_new ("POLICY_RELOAD");
    s_send (m);
    CHECK (s_check (65) == 2);
    s_forecast (store, "f", why, sizeof why, &at);
    CHECK_STR (why, "cpu");

    //  Ending b's turn: busy until now, then asleep a timeout later.
    m = ah_msg_new ("TURN_END");
    ah_msg_set_str (m, "turn_id", turn_b);
    r = s_call (m);
    CHECK (r && ah_msg_bool (r, "ok", false));
    ah_msg_destroy (&r);
    m = ah_msg_new ("TURN_END");
    ah_msg_set_str (m, "turn_id", turn_b);
    r = s_call (m);
    CHECK (r && ah_msg_int (r, "status", 0) == 404);
    ah_msg_destroy (&r);
    CHECK (s_check (66) == 2);              //  b: last busy at 65 s -> recent use
    s_forecast (store, "b", why, sizeof why, &at);
    CHECK_STR (why, "recent use");
    CHECK (s_check (126) == 4);             //  b: 60 s after its last busy check; g
    s_stops (stops, sizeof stops);
    CHECK (strstr (stops, "b,") && strstr (stops, "g,") && strlen (stops) == 4);

    //  Unknown and malformed messages are answered, not asserted on.
    m = ah_msg_new ("BOGUS");
    r = s_call (m);
    CHECK (r && ah_msg_int (r, "status", 0) == 400);
    ah_msg_destroy (&r);
    m = ah_msg_new ("TURN_END");
    r = s_call (m);
    CHECK (r && ah_msg_int (r, "status", 0) == 400);
    ah_msg_destroy (&r);
    actor_probe_refusals ("sleeper");
    CHECK (s_check (127) == 4);             //  and it goes on serving

    zactor_destroy (&sleeper);
    zsock_destroy (&s_api);
    zsock_destroy (&s_lifecycle);
    zactor_destroy (&bus);
    ah_store_close (&store);
    ah_config_destroy (&config);
    snprintf (cmd, sizeof cmd, "rm -rf %s", s_dir);
    CHECK (system (cmd) == 0);
    return CHECK_DONE ();
}
