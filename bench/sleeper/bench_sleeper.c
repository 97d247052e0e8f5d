/*  bench/sleeper: the cost of one sleeper pass over 1,000, 10,000 and
    100,000 stored running agents, against a baseline measured in the same
    run on the same database: the bare SELECT of the same rows (what any
    pass must at least read). Prints both, their ratio, and how each grows
    with the agent count.  Usage: bench_sleeper [max_agents]            */
#include "actors/sleeper.h"
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double s_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void s_fill (ah_store_t *store, int from, int to, int64_t now)
{
    ah_store_begin (store);
    sqlite3_stmt *a = ah_store_prepare (store,
        "INSERT INTO agents (id, name, image, cpus, memory_mb, idle_minutes, created_at)"
        " VALUES (:id, :id, 'img', 1, 512, 15, :now)");
    sqlite3_stmt *s = ah_store_prepare (store,
        "INSERT INTO sandboxes (agent_id, state, image, cpus, memory_mb, last_activity_at, updated_at)"
        " VALUES (:id, 'running', 'img', 1, 512, :last, :now)");
    sqlite3_stmt *t = ah_store_prepare (store,
        "INSERT INTO turns (id, agent_id, started_at, expires_at) VALUES (:tid, :id, :now, :exp)");
    for (int i = from; i < to; i++) {
        char id [16], tid [20];
        snprintf (id, sizeof id, "%012x", i);
        snprintf (tid, sizeof tid, "t%015x", i);
        ah_store_bind_text (a, ":id", id);
        ah_store_bind_int64 (a, ":now", now);
        ah_store_step (store, a);
        sqlite3_reset (a);
        ah_store_bind_text (s, ":id", id);
        //  a third idle long ago, the rest recently used
        ah_store_bind_int64 (s, ":last", i % 3 ? now - 60000 : now - 3600000);
        ah_store_bind_int64 (s, ":now", now);
        ah_store_step (store, s);
        sqlite3_reset (s);
        if (i % 10 == 0) {                  //  one in ten holds a turn
            ah_store_bind_text (t, ":tid", tid);
            ah_store_bind_text (t, ":id", id);
            ah_store_bind_int64 (t, ":now", now);
            ah_store_bind_int64 (t, ":exp", now + 600000);
            ah_store_step (store, t);
            sqlite3_reset (t);
        }
    }
    ah_store_commit (store);
}

//  The baseline: the same SELECT the pass makes, rows read and dropped.
static double s_scan (ah_store_t *store, int64_t now)
{
    double t0 = s_now ();
    sqlite3_stmt *st = ah_store_prepare (store,
        "SELECT s.agent_id, a.name, a.idle_minutes, coalesce(s.last_activity_at, 0),"
        " (SELECT count(*) FROM turns t WHERE t.agent_id = s.agent_id"
        "   AND t.ended_at IS NULL AND t.expires_at > :now),"
        " (SELECT coalesce(max(min(coalesce(t.ended_at, t.expires_at), :now)), 0)"
        "   FROM turns t WHERE t.agent_id = s.agent_id)"
        " FROM sandboxes s JOIN agents a ON a.id = s.agent_id WHERE s.state = 'running'");
    ah_store_bind_int64 (st, ":now", now);
    long rows = 0;
    while (ah_store_step (store, st) == SQLITE_ROW)
        rows++;
    sqlite3_reset (st);
    return s_now () - t0;
}

#define GOAL_MS 50.0            //  one pass over 100,000 running agents
#define NOISE   0.10            //  bench/README.md: misses beyond this exit 3

int main (int argc, char **argv)
{
    int max = argc > 1 ? atoi (argv [1]) : 100000;
    setenv ("AGENTHOLD_LOG", "warn", 1);
    char dir [] = "/tmp/ah-bench-sleeper-XXXXXX";
    if (!mkdtemp (dir))
        return 1;
    char db [128];
    snprintf (db, sizeof db, "%s/agenthold.db", dir);
    char *err = NULL;
    ah_store_t *store = ah_store_open (db, true, &err);
    if (!store) {
        fprintf (stderr, "bench_sleeper: %s\n", err);
        return 1;
    }
    const char *lua = AH_SOURCE_DIR "/lua";
    int64_t now = ah_store_now_ms ();
    printf ("sleeper pass vs bare scan of the same rows (same run, same database)\n");
    printf ("%8s %12s %12s %8s %12s %10s\n", "agents", "pass ms", "scan ms", "ratio", "us/agent", "growth");
    int have = 0;
    double prev = 0, last_pass = 0, worst_growth = 0;
    int last_n = 0;
    int prev_n = 0;
    for (int n = 1000; n <= max; n *= 10) {
        s_fill (store, have, n, now);
        have = n;
        //  best of 3 for both, interleaved
        double best_pass = 1e9, best_scan = 1e9;
        int idle = 0, checked = 0;
        for (int r = 0; r < 3; r++) {
            double t0 = s_now ();
            idle = ah_sleeper_pass_once (db, lua, now, &checked);
            double dt = s_now () - t0;
            if (dt < best_pass) best_pass = dt;
            double sc = s_scan (store, now);
            if (sc < best_scan) best_scan = sc;
        }
        if (checked != n || idle < 0) {
            fprintf (stderr, "bench_sleeper: pass checked %d of %d (idle %d)\n", checked, n, idle);
            return 1;
        }
        char growth [32] = "-";
        if (prev > 0)
            snprintf (growth, sizeof growth, "x%.1f/x%d", best_pass / prev, n / prev_n);
        printf ("%8d %12.1f %12.1f %8.1f %12.2f %10s   (%d idle)\n", n, best_pass * 1e3, best_scan * 1e3,
                best_pass / best_scan, best_pass * 1e6 / n, growth, idle);
        if (prev > 0 && best_pass / prev / ((double) n / prev_n) > worst_growth)
            worst_growth = best_pass / prev / ((double) n / prev_n);
        prev = best_pass;
        prev_n = n;
        last_pass = best_pass;
        last_n = n;
    }
    ah_store_close (&store);
    char cmd [160];
    snprintf (cmd, sizeof cmd, "rm -rf %s", dir);
    if (system (cmd) != 0)
        return 1;
    //  The goals, judged with the noise bound of bench/README.md: a pass
    //  over 100,000 agents within 50 ms, and linear (each tenfold step at
    //  most tenfold the time).
    int rc = 0;
    if (last_n == 100000) {
        const char *verdict = last_pass * 1e3 <= GOAL_MS ? "met"
                            : last_pass * 1e3 <= GOAL_MS * (1 + NOISE) ? "within noise" : "MISSED";
        printf ("goal: pass over 100000 agents <= %.0f ms: %s (%.1f ms, %.1fx the goal)\n",
                GOAL_MS, verdict, last_pass * 1e3, last_pass * 1e3 / GOAL_MS);
        if (last_pass * 1e3 > GOAL_MS * (1 + NOISE))
            rc = 3;
    }
    if (worst_growth > 0) {
        bool linear = worst_growth <= 1 + NOISE;
        printf ("goal: linear (time per agent grows at most %.0f%% per tenfold step): %s (worst %+.0f%%)\n",
                NOISE * 100, linear ? "met" : "MISSED", (worst_growth - 1) * 100);
        if (!linear)
            rc = 3;
    }
    return rc;
}
