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
#include "proto/tar.h"
#include "../../tests/docker/engine.h"

#define ROUNDS 5
#define GOAL   1.05             //  driver / bare, create and wake
#define NOISE  0.10             //  bench/README.md: misses beyond this exit 3

//  A bare archive PUT of a boot.json like the driver's (what a wake does
//  besides the start): seconds, or -1.
static double
s_put_boot (const char *name)
{
    const char *text = "{\"agent_id\":\"000000000000\",\"token\":\"bench\","
                       "\"tunnel_url\":\"ws://10.0.0.1:18399/tunnel\"}";
    ah_tar_t tar = { .max = 0 };
    if (ah_tar_add (&tar, "etc/", AH_TAR_DIR, 0755, NULL, 0, NULL)
    ||  ah_tar_add (&tar, "etc/agenthold/", AH_TAR_DIR, 0755, NULL, 0, NULL)
    ||  ah_tar_add (&tar, "etc/agenthold/boot.json", AH_TAR_FILE, 0600, text, strlen (text), NULL)
    ||  ah_tar_finish (&tar)) {
        ah_tar_free (&tar);
        return -1;
    }
    char url [512];
    snprintf (url, sizeof url, "http://docker%s%s/containers/%s/archive?path=%%2F",
              *eng_version ? "/v" : "", eng_version, name);
    CURL *c = curl_easy_init ();
    struct curl_slist *h = curl_slist_append (NULL, "Content-Type: application/x-tar");
    h = curl_slist_append (h, "Expect:");
    curl_easy_setopt (c, CURLOPT_UNIX_SOCKET_PATH, ENG_SOCKET);
    curl_easy_setopt (c, CURLOPT_URL, url);
    curl_easy_setopt (c, CURLOPT_CUSTOMREQUEST, "PUT");
    curl_easy_setopt (c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt (c, CURLOPT_POSTFIELDS, (const char *) ah_buf_head (&tar.buf));
    curl_easy_setopt (c, CURLOPT_POSTFIELDSIZE, (long) ah_buf_size (&tar.buf));
    curl_easy_setopt (c, CURLOPT_NOSIGNAL, 1L);
    eng_buf_t b = { calloc (1, 1), 0 };
    curl_easy_setopt (c, CURLOPT_WRITEFUNCTION, eng_write);
    curl_easy_setopt (c, CURLOPT_WRITEDATA, &b);
    double t0 = eng_now ();
    long st = 0;
    if (curl_easy_perform (c) == CURLE_OK)
        curl_easy_getinfo (c, CURLINFO_RESPONSE_CODE, &st);
    double dt = eng_now () - t0;
    free (b.data);
    curl_slist_free_all (h);
    curl_easy_cleanup (c);
    ah_tar_free (&tar);
    return st == 200 ? dt : -1;
}


int
main (int argc, char **argv)
{
    //  --report: print the goals' verdicts but exit 0 on a miss (ctest)
    bool report_only = argc > 1 && !strcmp (argv [1], "--report");
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
    double drv_wake [ROUNDS], bare_wake [ROUNDS], bare_put [ROUNDS];
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
        //  What the driver adds to a wake: the boot.json PUT, timed bare
        //  on the same stopped container.
        bare_put [r] = s_put_boot (name);
        if (bare_put [r] < 0) {
            fprintf (stderr, "bare archive PUT failed\n");
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
        double bp = eng_median (bare_put, ROUNDS);
        printf ("    of which boot.json PUT     : %7.1f ms (%.0f%%, timed bare), start and the rest %.1f ms (%.0f%%)\n",
                bp * 1000, 100 * bp / dw, (dw - bp) * 1000, 100 * (dw - bp) / dw);
        printf ("  ratio driver/bare            : %7.2f\n", dw / bw);
        int goals = 0;
        printf ("goal: create -> running <= %.2fx bare: %s (%.2f)\n", GOAL, eng_verdict (t / b, GOAL, NOISE, &goals), t / b);
        printf ("goal: sleeping -> running <= %.2fx bare: %s (%.2f)\n", GOAL, eng_verdict (dw / bw, GOAL, NOISE, &goals), dw / bw);
        if (goals && !report_only)
            rc = goals;
    }
    free (err);
    d->destroy_driver (&d);
    if (eng_fixture_cleanup (&fx) != 0) {
        fprintf (stderr, "objects left behind with prefix %s\n", fx.prefix);
        rc = 1;
    }
    return rc;
}
