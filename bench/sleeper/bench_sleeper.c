/*  bench/sleeper: the cost of sleeper passes over 1,000, 10,000 and
    100,000 stored running agents, against a baseline measured in the same
    run on the same database: the bare SELECT of every running row (what a
    pass that scans must at least read). Three passes each:
    - full: the first pass (and the one after an idle.lua reload): every
      running sandbox read and asked about; it fills the due index;
    - pass: a pass after 1 % of the agents changed (AGENT_CHANGED, as
      lifecycle's activity flush sends): those are read and asked again,
      the rest cost a look at their index entry. The goal is judged on it;
    - steady: a pass with nothing changed and nobody due.
    Prints each, the ratio of pass to the scan, and how each grows with
    the agent count.  Usage: bench_sleeper [max_agents]                 */
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

//  This thread's CPU time: a pass is one thread's work.
static double s_cpu (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_THREAD_CPUTIME_ID, &ts);
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
    printf ("sleeper passes vs the bare scan of the running rows (same run, same database)\n");
    printf ("%8s %10s %17s %10s %15s %8s %10s %12s   %s\n", "agents", "full ms", "pass ms wall/cpu",
            "steady ms", "scan wall/cpu", "pass/scan", "us/agent", "growth", "(pass: 1% changed; cpu)");
    int have = 0;
    double prev = 0, last_pass = 0, last_wall = 0, worst_growth = 0;
    int last_n = 0;
    int prev_n = 0;
    for (int n = 1000; n <= max; n *= 10) {
        s_fill (store, have, n, now);
        have = n;
        //  best of 3 for each, interleaved; a new index for each full pass
        double best_full = 1e9, best_pass = 1e9, best_steady = 1e9, best_scan = 1e9;
        double best_pass_cpu = 1e9, best_scan_cpu = 1e9;
        int idle = 0, checked = 0, asked = 0, asked_full = 0, asked_steady = 0;
        for (int r = 0; r < 3; r++) {
            char *err = NULL;
            ah_sleeper_index_t *index = ah_sleeper_index_new (db, lua, &err);
            if (!index) {
                fprintf (stderr, "bench_sleeper: %s\n", err);
                return 1;
            }
            double t0 = s_now ();
            idle = ah_sleeper_index_pass (index, now, &checked, &asked_full);
            double dt = s_now () - t0;
            if (dt < best_full) best_full = dt;
            if (checked != n || idle < 0 || asked_full != n) {
                fprintf (stderr, "bench_sleeper: full pass checked %d, asked %d of %d (idle %d)\n",
                         checked, asked_full, n, idle);
                return 1;
            }
            for (int i = r; i < n; i += 100) {          //  1 % changed, others each round
                char id [16];
                snprintf (id, sizeof id, "%012x", i);
                ah_sleeper_index_changed (index, id);
            }
            t0 = s_now ();
            double c0 = s_cpu ();
            int idle_pass = ah_sleeper_index_pass (index, now, &checked, &asked);
            dt = s_now () - t0;
            double dc = s_cpu () - c0;
            if (dt < best_pass) best_pass = dt;
            if (dc < best_pass_cpu) best_pass_cpu = dc;
            if (checked != n || idle_pass != idle || asked != (n - r + 99) / 100) {
                fprintf (stderr, "bench_sleeper: pass checked %d, asked %d of %d (idle %d, was %d)\n",
                         checked, asked, n, idle_pass, idle);
                return 1;
            }
            t0 = s_now ();
            int idle_steady = ah_sleeper_index_pass (index, now, &checked, &asked_steady);
            dt = s_now () - t0;
            if (dt < best_steady) best_steady = dt;
            if (checked != n || idle_steady != idle || asked_steady != 0) {
                fprintf (stderr, "bench_sleeper: steady pass checked %d, asked %d (idle %d, was %d)\n",
                         checked, asked_steady, idle_steady, idle);
                return 1;
            }
            ah_sleeper_index_destroy (&index);
            double c1 = s_cpu ();
            double sc = s_scan (store, now);
            if (sc < best_scan) best_scan = sc;
            if (s_cpu () - c1 < best_scan_cpu) best_scan_cpu = s_cpu () - c1;
        }
        char growth [32] = "-";
        if (prev > 0)
            snprintf (growth, sizeof growth, "x%.1f/x%d", best_pass_cpu / prev, n / prev_n);
        printf ("%8d %10.1f %8.2f/%-8.2f %10.2f %8.1f/%-6.1f %8.2f %10.3f %12s   (%d idle, %d asked)\n", n,
                best_full * 1e3, best_pass * 1e3, best_pass_cpu * 1e3, best_steady * 1e3,
                best_scan * 1e3, best_scan_cpu * 1e3, best_pass_cpu / best_scan_cpu,
                best_pass_cpu * 1e6 / n, growth, idle, asked);
        if (prev > 0 && best_pass_cpu / prev / ((double) n / prev_n) > worst_growth)
            worst_growth = best_pass_cpu / prev / ((double) n / prev_n);
        prev = best_pass_cpu;
        prev_n = n;
        last_pass = best_pass_cpu;
        last_wall = best_pass;
        last_n = n;
    }
    ah_store_close (&store);
    char cmd [160];
    snprintf (cmd, sizeof cmd, "rm -rf %s", dir);
    if (system (cmd) != 0)
        return 1;
    //  The goals, judged with the noise bound of bench/README.md: a pass
    //  (1 % changed) over 100,000 agents within 50 ms, and linear (each
    //  tenfold step at most tenfold the time). Both on the thread's CPU
    //  time: the pass is one thread that never waits on anything but the
    //  page cache, and on this shared machine the wall clock mostly
    //  measures the other tenants (both are printed).
    int rc = 0;
    if (last_n == 100000) {
        const char *verdict = last_pass * 1e3 <= GOAL_MS ? "met"
                            : last_pass * 1e3 <= GOAL_MS * (1 + NOISE) ? "within noise" : "MISSED";
        printf ("goal: pass over 100000 agents <= %.0f ms of its thread's CPU: %s (%.1f ms, %.1fx the goal;"
                " %.1f ms wall)\n", GOAL_MS, verdict, last_pass * 1e3, last_pass * 1e3 / GOAL_MS, last_wall * 1e3);
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
