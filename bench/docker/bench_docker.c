/*  bench/docker/bench_docker.c: how long the Docker driver takes from
    create to a running container, against a bare create + start of the
    same image through the Engine API, in the same run; and from sleeping
    (the container stopped) to running, against a bare start of the same
    stopped container through the Engine API.

    The driver does more than the baseline: an internal network with its
    own subnet (recorded in SQLite), a home volume, boot.json written by
    an archive PUT before start. The ratio says what that costs.
    Prints medians of ROUNDS rounds; exits 77 without a Docker Engine. */
#include "drivers/docker.h"
#include "../../tests/docker/engine.h"

#define ROUNDS 5

int
main (void)
{
    if (!eng_available ())
        return eng_skip ("bench.docker");
    eng_fixture_t fx;
    int rc = 0;
    if (eng_fixture_init (&fx, "ahbench", "10.213.48.0/20")) {
        eng_fixture_cleanup (&fx);
        return 1;
    }
    char *err = NULL;
    ah_driver_t *d = ah_docker_driver_new (&fx.config, &err);
    if (!d) {
        fprintf (stderr, "driver: %s\n", err);
        eng_fixture_cleanup (&fx);
        return 1;
    }
    double drv [ROUNDS], drv_create [ROUNDS], bare [ROUNDS];
    double drv_wake [ROUNDS], bare_wake [ROUNDS];
    char name [160], body [512];
    for (int r = 0; r < ROUNDS && rc == 0; r++) {
        //  Baseline: bare create + start of the same image (labelled so the
        //  clean-up finds it).
        snprintf (name, sizeof name, "%s-bare%d", fx.prefix, r);
        snprintf (body, sizeof body, "{\"Image\":\"%s\",\"Entrypoint\":[\"sleep\",\"100000\"],"
                  "\"Labels\":{\"agenthold.prefix\":\"%s\"}}", fx.tag, fx.prefix);
        long st;
        double t0 = eng_now ();
        free (eng_call ("POST", body, &st, "/containers/create?name=%s", name));
        free (eng_call ("POST", NULL, &st, "/containers/%s/start", name));
        while (!eng_running (name) && eng_now () - t0 < 30)
            usleep (1000);
        bare [r] = eng_now () - t0;
        free (eng_call ("DELETE", NULL, &st, "/containers/%s?force=true", name));

        //  The driver: create (network, volume, container), then start
        //  (boot.json, start).
        char id [16];
        snprintf (id, sizeof id, "%012x", 0xb0 + r);     //  an agent id: 12 hex digits
        ah_sandbox_spec_t spec = { .agent_id = id, .image = fx.tag };
        ah_boot_t boot = { .agent_id = id, .token = "bench", .tunnel_port = 18399 };
        snprintf (name, sizeof name, "%s-%s", fx.prefix, id);
        t0 = eng_now ();
        if (d->create (d, &spec, &err)) {
            fprintf (stderr, "create: %s\n", err);
            rc = 1;
            break;
        }
        drv_create [r] = eng_now () - t0;
        if (d->start (d, &boot, &err)) {
            fprintf (stderr, "start: %s\n", err);
            rc = 1;
            break;
        }
        while (!eng_running (name) && eng_now () - t0 < 30)
            usleep (1000);
        drv [r] = eng_now () - t0;

        //  Sleeping -> running: the driver's start of the stopped container
        //  (a fresh boot.json through the archive endpoint, then start)
        //  against a bare start of the same stopped container.
        if (d->stop (d, id, &err)) {
            fprintf (stderr, "stop: %s\n", err);
            rc = 1;
            break;
        }
        t0 = eng_now ();
        if (d->start (d, &boot, &err)) {
            fprintf (stderr, "start after stop: %s\n", err);
            rc = 1;
            break;
        }
        while (!eng_running (name) && eng_now () - t0 < 30)
            usleep (1000);
        drv_wake [r] = eng_now () - t0;
        free (eng_call ("POST", NULL, &st, "/containers/%s/stop?t=5", name));
        if (st != 204 && st != 304) {
            fprintf (stderr, "bare stop: HTTP %ld\n", st);
            rc = 1;
            break;
        }
        t0 = eng_now ();
        free (eng_call ("POST", NULL, &st, "/containers/%s/start", name));
        while (!eng_running (name) && eng_now () - t0 < 30)
            usleep (1000);
        bare_wake [r] = eng_now () - t0;
        if (d->destroy (d, id, &err)) {
            fprintf (stderr, "destroy: %s\n", err);
            rc = 1;
        }
    }
    if (rc == 0) {
        double b = eng_median (bare, ROUNDS), c = eng_median (drv_create, ROUNDS), t = eng_median (drv, ROUNDS);
        printf ("docker create -> running, median of %d rounds\n", ROUNDS);
        printf ("  bare Engine API create+start : %7.1f ms\n", b * 1000);
        printf ("  driver create (net+vol+ctr)  : %7.1f ms\n", c * 1000);
        printf ("  driver create+start (total)  : %7.1f ms\n", t * 1000);
        printf ("  ratio driver/bare            : %7.2f\n", t / b);
        double bw = eng_median (bare_wake, ROUNDS), dw = eng_median (drv_wake, ROUNDS);
        printf ("docker sleeping -> running (stopped container started), median of %d rounds\n", ROUNDS);
        printf ("  bare Engine API start        : %7.1f ms\n", bw * 1000);
        printf ("  driver boot.json + start     : %7.1f ms\n", dw * 1000);
        printf ("  ratio driver/bare            : %7.2f\n", dw / bw);
    }
    free (err);
    d->destroy_driver (&d);
    if (eng_fixture_cleanup (&fx) != 0) {
        fprintf (stderr, "objects left behind with prefix %s\n", fx.prefix);
        rc = 1;
    }
    return rc;
}
