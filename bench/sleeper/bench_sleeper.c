/*  bench/sleeper: the cost of sleeper passes over 1,000, 10,000 and
    100,000 stored running agents, against baselines measured in the same
    run on the same database: the bare SELECT of every running row (what a
    pass that scans must at least read), and, to explain how a pass grows,
    the bare forecast upserts of as many agents as a pass asks about
    (writes: the most a pass writes, when the API could work out none
    of its verdicts itself). Three passes each:
    - full: the first pass (and the one after an idle.lua reload): every
      running sandbox read and asked about; it fills the due index;
    - pass: a pass after 1 % of the agents changed (AGENT_CHANGED with
      the use written, as lifecycle's activity flush sends): those are
      asked again with the use they were told (no row read: "read" says
      how many were; "written" how many forecast rows, those the API
      does not work out itself), the rest cost nothing (they are not at
      the top of the due heap). The goals are judged on it;
    - steady: a pass with nothing changed and nobody due.
    Each size has a database of its own, and the rounds go round the
    sizes (1,000, 10,000, 100,000, then again), so a machine that speeds
    up or slows down meanwhile weighs on every size alike; each figure is
    the best of ROUNDS. A round opens a new index (a full pass), makes one
    untimed pass over another 1 % (the statements a server's passes keep
    are prepared then, as after its first interval), then times the pass.
    Prints each, the ratios, and how the pass grows with the agent count.
    Usage: bench_sleeper [max_agents]                                   */
#include "actors/sleeper.h"
#include "store/store.h"

#include <math.h>
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

//  An agent's last use: a third idle long ago, the rest recently used.
static int64_t s_last (int i, int64_t now)
{
    return i % 3 ? now - 60000 : now - 3600000;
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
        ah_store_bind_int64 (s, ":last", s_last (i, now));
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

//  The baseline: the SELECT a full pass makes, rows read and dropped.
static double s_scan (ah_store_t *store, int64_t now)
{
    double t0 = s_now ();
    sqlite3_stmt *st = ah_store_prepare (store, AH_SLEEPER_ROWS_SQL);
    ah_store_bind_int64 (st, ":now", now);
    long rows = 0;
    while (ah_store_step (store, st) == SQLITE_ROW)
        rows++;
    sqlite3_reset (st);
    return s_now () - t0;
}

//  The other baseline: the most a pass over 1 % changed writes once its
//  verdicts are made, on another 1 % (from, from + 100, ...): each one's
//  forecast, one transaction. Returns its CPU time.
static double s_writes (ah_store_t *store, int from, int n, int64_t now)
{
    double c0 = s_cpu ();
    sqlite3_stmt *up = ah_store_prepare (store, AH_SLEEPER_FORECAST_SQL);
    ah_store_begin (store);
    for (int i = from; i < n; i += 100) {
        char id [16];
        snprintf (id, sizeof id, "%012x", i);
        ah_store_bind_text (up, ":id", id);
        ah_store_bind_text (up, ":why", "recent use");
        ah_store_bind_int64 (up, ":sleeps_at", s_last (i, now) + 900000);
        ah_store_bind_int64 (up, ":now", now);
        ah_store_step (store, up);
        sqlite3_reset (up);
    }
    ah_store_commit (store);
    return s_cpu () - c0;
}

#define GOAL_MS 50.0            //  one pass over 100,000 running agents
#define NOISE   0.10            //  bench/README.md: misses beyond this exit 3
#define ROUNDS  5
#define SIZES   3               //  1,000, 10,000, 100,000

typedef struct {
    int    n;
    char   dir [40];
    char   db [96];
    ah_store_t *store;
    double full, pass, pass_cpu, steady, scan, scan_cpu, writes;  //  bests
    int    idle, asked, read, written;
} tier_t;

//  Lifecycle's activity flush of every 100th agent from from: the use
//  it wrote (the same as stored: the verdicts stay as they were).
static void s_mark (ah_sleeper_index_t *index, int from, int n, int64_t now)
{
    for (int i = from; i < n; i += 100) {
        char id [16];
        snprintf (id, sizeof id, "%012x", i);
        ah_sleeper_index_changed (index, id, s_last (i, now), NAN);
    }
}

//  One round at one size: 0, or -1 when a count is wrong.
static int s_round (tier_t *z, const char *lua, int64_t now, int r)
{
    int n = z->n, checked = 0, asked = 0, read = 0, written = 0, idle;
    char *err = NULL;
    ah_sleeper_index_t *index = ah_sleeper_index_new (z->db, lua, &err);
    if (!index) {
        fprintf (stderr, "bench_sleeper: %s\n", err);
        return -1;
    }
    double t0 = s_now ();
    idle = ah_sleeper_index_pass (index, now, &checked, &asked, &read, &written);
    double dt = s_now () - t0;
    if (dt < z->full) z->full = dt;
    if (checked != n || idle < 0 || asked != n) {
        fprintf (stderr, "bench_sleeper: full pass checked %d, asked %d of %d (idle %d)\n", checked, asked, n, idle);
        return -1;
    }
    z->idle = idle;
    s_mark (index, 50 + r, n, now);                          //  the untimed pass
    if (ah_sleeper_index_pass (index, now, &checked, &asked, &read, &written) != idle || asked != (n - 50 - r + 99) / 100) {
        fprintf (stderr, "bench_sleeper: warm pass asked %d of %d\n", asked, n);
        return -1;
    }
    s_mark (index, r, n, now);                               //  1 % changed, others each round
    t0 = s_now ();
    double c0 = s_cpu ();
    int idle_pass = ah_sleeper_index_pass (index, now, &checked, &asked, &read, &written);
    dt = s_now () - t0;
    double dc = s_cpu () - c0;
    if (dt < z->pass) z->pass = dt;
    if (dc < z->pass_cpu) z->pass_cpu = dc;
    if (checked != n || idle_pass != idle || asked != (n - r + 99) / 100) {
        fprintf (stderr, "bench_sleeper: pass checked %d, asked %d of %d (idle %d, was %d)\n",
                 checked, asked, n, idle_pass, idle);
        return -1;
    }
    z->asked = asked;
    z->read = read;
    z->written = written;
    t0 = s_now ();
    int idle_steady = ah_sleeper_index_pass (index, now, &checked, &asked, &read, &written);
    dt = s_now () - t0;
    if (dt < z->steady) z->steady = dt;
    if (checked != n || idle_steady != idle || asked != 0) {
        fprintf (stderr, "bench_sleeper: steady pass checked %d, asked %d (idle %d, was %d)\n",
                 checked, asked, idle_steady, idle);
        return -1;
    }
    ah_sleeper_index_destroy (&index);
    double c1 = s_cpu ();
    double sc = s_scan (z->store, now);
    if (sc < z->scan) z->scan = sc;
    if (s_cpu () - c1 < z->scan_cpu) z->scan_cpu = s_cpu () - c1;
    double wr = s_writes (z->store, 25 + r, n, now);
    if (wr < z->writes) z->writes = wr;
    return 0;
}

int main (int argc, char **argv)
{
    int max = argc > 1 ? atoi (argv [1]) : 100000;
    setenv ("AGENTHOLD_LOG", "warn", 1);
    const char *lua = AH_SOURCE_DIR "/lua";
    int64_t now = ah_store_now_ms ();
    tier_t sizes [SIZES];
    int n_sizes = 0, rc = 0;
    for (int n = 1000; n <= max && n_sizes < SIZES; n *= 10) {
        tier_t *z = &sizes [n_sizes];
        *z = (tier_t) { .n = n, .full = 1e9, .pass = 1e9, .pass_cpu = 1e9,
                         .steady = 1e9, .scan = 1e9, .scan_cpu = 1e9, .writes = 1e9 };
        snprintf (z->dir, sizeof z->dir, "/tmp/ah-bench-sleeper-XXXXXX");
        if (!mkdtemp (z->dir))
            return 1;
        n_sizes++;
        char dir [sizeof z->dir];           //  not z->dir itself: GCC's -Wrestrict cannot tell the fields apart
        memcpy (dir, z->dir, sizeof dir);
        snprintf (z->db, sizeof z->db, "%s/agenthold.db", dir);
        char *err = NULL;
        if (!(z->store = ah_store_open (z->db, true, &err))) {
            fprintf (stderr, "bench_sleeper: %s\n", err);
            rc = 1;
            break;
        }
        s_fill (z->store, 0, n, now);
        //  as the sleeper's own connection (actors/sleeper.c)
        ah_store_exec (z->store, "PRAGMA mmap_size = 268435456", NULL);
    }
    for (int r = 0; r < ROUNDS && rc == 0; r++)
        for (int k = 0; k < n_sizes && rc == 0; k++)
            if (s_round (&sizes [k], lua, now, r))
                rc = 1;
    if (rc == 0) {
        printf ("sleeper passes vs the bare scan of the running rows (same run, same database; best of %d,"
                " sizes interleaved)\n", ROUNDS);
        printf ("%8s %10s %17s %10s %15s %8s %10s %12s %9s %11s   %s\n", "agents", "full ms", "pass ms wall/cpu",
                "steady ms", "scan wall/cpu", "pass/scan", "us/agent", "growth", "writes ms", "pass/writes",
                "(pass: 1% changed; cpu)");
    }
    double worst_growth = 0;
    for (int k = 0; k < n_sizes && rc == 0; k++) {
        tier_t *z = &sizes [k];
        char growth [32] = "-";
        if (k > 0) {
            double g = z->pass_cpu / sizes [k - 1].pass_cpu / ((double) z->n / sizes [k - 1].n);
            snprintf (growth, sizeof growth, "x%.1f/x%d", z->pass_cpu / sizes [k - 1].pass_cpu,
                      z->n / sizes [k - 1].n);
            if (g > worst_growth)
                worst_growth = g;
        }
        printf ("%8d %10.1f %8.2f/%-8.2f %10.2f %8.1f/%-6.1f %8.2f %10.3f %12s %9.2f %11.2f   (%d idle, %d asked, %d read, %d written)\n", z->n,
                z->full * 1e3, z->pass * 1e3, z->pass_cpu * 1e3, z->steady * 1e3,
                z->scan * 1e3, z->scan_cpu * 1e3, z->pass_cpu / z->scan_cpu,
                z->pass_cpu * 1e6 / z->n, growth, z->writes * 1e3, z->pass_cpu / z->writes, z->idle, z->asked, z->read, z->written);
    }
    for (int k = 0; k < n_sizes; k++) {
        ah_store_close (&sizes [k].store);
        char cmd [80];
        snprintf (cmd, sizeof cmd, "rm -rf %s", sizes [k].dir);
        if (system (cmd) != 0)
            rc = 1;
    }
    if (rc)
        return rc;
    //  The goals, judged with the noise bound of bench/README.md: a pass
    //  (1 % changed) over 100,000 agents within 50 ms, and linear (each
    //  tenfold step at most tenfold the time). Both on the thread's CPU
    //  time: the pass is one thread that never waits on anything but the
    //  page cache, and on this shared machine the wall clock mostly
    //  measures the other tenants (both are printed).
    tier_t *last = &sizes [n_sizes - 1];
    if (last->n == 100000) {
        const char *verdict = last->pass_cpu * 1e3 <= GOAL_MS ? "met"
                            : last->pass_cpu * 1e3 <= GOAL_MS * (1 + NOISE) ? "within noise" : "MISSED";
        printf ("goal: pass over 100000 agents <= %.0f ms of its thread's CPU: %s (%.1f ms, %.1fx the goal;"
                " %.1f ms wall)\n", GOAL_MS, verdict, last->pass_cpu * 1e3, last->pass_cpu * 1e3 / GOAL_MS,
                last->pass * 1e3);
        if (last->pass_cpu * 1e3 > GOAL_MS * (1 + NOISE))
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
