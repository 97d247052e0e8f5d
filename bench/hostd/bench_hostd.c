/*  bench/hostd/bench_hostd.c: what the extra hop to the host agent costs.
    The same operations through the in-process Docker driver and through
    the remote driver talking to a real `agenthold hostd` (a child process
    on ipc://, running the same Docker driver), interleaved round by round
    in one run: create -> running (create, start, until the engine says
    the container runs) and sleeping -> running (start of the stopped
    container). Prints medians, their ratio and the median of each
    round's own ratio remote / in-process (the goal's figure: a round's
    two runs are back to back, so the machine's load hits both); the
    target is at most 1.05. Exits 77 without a Docker Engine.

    usage: bench_hostd [--report] AGENTHOLD_BINARY                               */
#include "drivers/docker.h"
#include "drivers/remote.h"
#include "../../tests/docker/engine.h"

#include <signal.h>
#include <sys/wait.h>

#define ROUNDS 11

static void
s_wait_running (const char *name, double t0)
{
    while (!eng_running (name) && eng_now () - t0 < 30)
        usleep (1000);
}

//  One round on one driver: *create = create -> running, *wake =
//  sleeping -> running. 0 / -1 (said on stderr).
static int
s_round (ah_driver_t *d, const char *prefix, unsigned n, double *create, double *wake)
{
    char id [16], name [160];
    snprintf (id, sizeof id, "%012x", n);
    snprintf (name, sizeof name, "%s-%s", prefix, id);
    ah_sandbox_spec_t spec = { .agent_id = id, .image = NULL };
    ah_boot_t boot = { .agent_id = id, .token = "bench", .tunnel_port = 18999 };
    char *err = NULL;
    const char *what = "create";
    double t0 = eng_now ();
    spec.image = getenv ("BENCH_IMAGE");
    if (d->create (d, &spec, &err) || (what = "start", d->start (d, &boot, &err)))
        goto fail;
    s_wait_running (name, t0);
    *create = eng_now () - t0;
    what = "stop";
    if (d->stop (d, id, &err))
        goto fail;
    t0 = eng_now ();
    what = "wake";
    if (d->start (d, &boot, &err))
        goto fail;
    s_wait_running (name, t0);
    *wake = eng_now () - t0;
    what = "destroy";
    if (d->destroy (d, id, &err))
        goto fail;
    return 0;
fail:
    fprintf (stderr, "%s driver: %s: %s\n", d->name, what, err ? err : "?");
    free (err);
    return -1;
}

int
main (int argc, char **argv)
{
    //  --report: print the goals' verdicts but exit 0 on a miss (ctest)
    bool report_only = argc > 2 && !strcmp (argv [1], "--report");
    if (report_only)
        argv++, argc--;
    if (argc < 2) {
        fprintf (stderr, "usage: bench_hostd [--report] AGENTHOLD_BINARY\n");
        return 2;
    }
    if (!eng_available ())
        return eng_skip ("bench.hostd");
    eng_fixture_t fx;
    if (eng_fixture_init (&fx, "ahbenchhd", "10.213.192.0/21")) {
        eng_fixture_cleanup (&fx);
        return 1;
    }
    setenv ("BENCH_IMAGE", fx.tag, 1);
    int rc = 1;
    char endpoint [256], hostd_dir [192], sock [240];
    snprintf (hostd_dir, sizeof hostd_dir, "%s/hostd", fx.dir);
    snprintf (sock, sizeof sock, "%s/run/hostd.sock", fx.dir);
    snprintf (endpoint, sizeof endpoint, "ipc://%s", sock);
    //  hostd: the same engine, prefix and sandboxd; a pool of its own.
    pid_t hostd = fork ();
    if (hostd == 0) {
        setenv ("AGENTHOLD_HOSTD_ENDPOINT", endpoint, 1);
        setenv ("AGENTHOLD_HOSTD_DATA_DIR", hostd_dir, 1);
        //  The server's data directory: the tunnel's socket is under it.
        setenv ("AGENTHOLD_SERVER_DATA_DIR", fx.dir, 1);
        setenv ("AGENTHOLD_HOSTD_NAME", "bench", 1);
        setenv ("AGENTHOLD_SANDBOX_DOCKER_SOCKET", ENG_SOCKET, 1);
        setenv ("AGENTHOLD_SANDBOX_DOCKER_NAME_PREFIX", fx.prefix, 1);
        setenv ("AGENTHOLD_SANDBOX_DOCKER_NETWORK_POOL", "10.213.200.0/21", 1);
        setenv ("AGENTHOLD_SANDBOX_SANDBOXD_PATH", fx.sandboxd, 1);
        setenv ("AGENTHOLD_LOG", "warn", 1);
        execl (argv [1], argv [1], "hostd", (char *) NULL);
        _exit (127);
    }
    ah_driver_t *local = NULL, *remote = NULL;
    ah_config_t rcfg = fx.config;
    rcfg.driver = "remote";
    rcfg.remote_endpoint = endpoint;
    rcfg.remote_timeout_s = 10;
    char *err = NULL;
    for (int i = 0; i < 200 && access (sock, F_OK) != 0; i++)
        usleep (50000);
    local = ah_docker_driver_new (&fx.config, &err);
    remote = local ? ah_remote_driver_new (&rcfg, &err) : NULL;
    if (!local || !remote || access (sock, F_OK) != 0) {
        fprintf (stderr, "cannot start: %s\n", err ? err : "hostd did not come up");
        goto out;
    }
    double lc [ROUNDS], lw [ROUNDS], rc_ [ROUNDS], rw [ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        //  Alternate which goes first, so neither always meets a warm engine.
        bool local_first = r % 2 == 0;
        ah_driver_t *first = local_first ? local : remote, *second = local_first ? remote : local;
        double *fc = local_first ? lc : rc_, *fw = local_first ? lw : rw;
        double *sc = local_first ? rc_ : lc, *sw = local_first ? rw : lw;
        if (s_round (first, fx.prefix, 0xb0 + 2 * r, &fc [r], &fw [r])
        ||  s_round (second, fx.prefix, 0xb1 + 2 * r, &sc [r], &sw [r]))
            goto out;
    }
    //  Each round's own ratios first: eng_median sorts what it is given.
    double pc [ROUNDS], pw [ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        pc [r] = rc_ [r] / lc [r];
        pw [r] = rw [r] / lw [r];
    }
    double l1 = eng_median (lc, ROUNDS), r1 = eng_median (rc_, ROUNDS);
    double l2 = eng_median (lw, ROUNDS), r2 = eng_median (rw, ROUNDS);
    //  Each round runs both drivers back to back, so a change of load on
    //  the (shared) machine hits both sides of a pair: the median of the
    //  rounds' own ratios is the goal's figure; the ratio of the medians
    //  is printed too.
    double c = eng_median (pc, ROUNDS), w = eng_median (pw, ROUNDS);
    printf ("create -> running, %d interleaved rounds\n", ROUNDS);
    printf ("  in-process docker driver     : %7.1f ms (median)\n", l1 * 1000);
    printf ("  through hostd (remote, ipc)  : %7.1f ms (median)\n", r1 * 1000);
    printf ("  ratio of the medians         : %7.3f\n", r1 / l1);
    printf ("  median of the rounds' ratios : %7.3f (target <= 1.05)\n", c);
    printf ("sleeping -> running, %d interleaved rounds\n", ROUNDS);
    printf ("  in-process docker driver     : %7.1f ms (median)\n", l2 * 1000);
    printf ("  through hostd (remote, ipc)  : %7.1f ms (median)\n", r2 * 1000);
    printf ("  ratio of the medians         : %7.3f\n", r2 / l2);
    printf ("  median of the rounds' ratios : %7.3f (target <= 1.05)\n", w);
    int goals = 0;
    printf ("goal: create -> running through hostd <= 1.05x in-process: %s (%.3f)\n",
            eng_verdict (c, 1.05, 0.10, &goals), c);
    printf ("goal: sleeping -> running through hostd <= 1.05x in-process: %s (%.3f)\n",
            eng_verdict (w, 1.05, 0.10, &goals), w);
    if (goals && !report_only)
        rc = goals;
    else
        rc = 0;
out:
    free (err);
    if (remote)
        remote->destroy_driver (&remote);
    if (local)
        local->destroy_driver (&local);
    if (hostd > 0) {
        kill (hostd, SIGTERM);
        waitpid (hostd, NULL, 0);
    }
    if (eng_fixture_cleanup (&fx) != 0) {
        fprintf (stderr, "objects left behind with prefix %s\n", fx.prefix);
        rc = 1;
    }
    return rc;
}
