/*  tests/docker/test_docker_sandboxd.c: the real static sandboxd in a
    sandbox made by the Docker driver: it starts as the entrypoint (under
    docker-init), reads the boot.json the driver wrote, dials the tunnel's
    unix socket (the sandbox has no network) with the per-boot token, and answers
    hello as the agent named in boot.json. The server's side is
    tests/docker/boot_peer.py (the tunnel actor is not needed).

    Usage: test_docker_sandboxd SANDBOXD PEER_SCRIPT                   */
#include "drivers/docker.h"
#include "../common/check.h"
#include "engine.h"

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define PEER_PORT "18310"

extern char **environ;

int
main (int argc, char **argv)
{
    if (argc != 3) {
        fprintf (stderr, "usage: test_docker_sandboxd SANDBOXD PEER_SCRIPT\n");
        return 2;
    }
    if (!eng_available ())
        return eng_skip ("docker.sandboxd");
    eng_fixture_t fx;
    ah_driver_t *d = NULL;
    pid_t peer = -1;
    char out [256], cname [160];
    char *err = NULL;
    if (eng_fixture_init (&fx, "ahsbd", "10.213.64.0/20")) {
        CHECK (0);
        goto cleanup;
    }
    snprintf (out, sizeof out, "%s/hello.json", fx.dir);
    snprintf (cname, sizeof cname, "%s-0000000000b1", fx.prefix);
    ah_config_t config = fx.config;
    config.sandboxd_path = argv [1];
    d = ah_docker_driver_new (&config, &err);
    CHECK (d != NULL);
    if (!d) {
        fprintf (stderr, "driver: %s\n", err);
        goto cleanup;
    }

    //  The peer listens where the tunnel does for a sandbox without a
    //  network: the unix socket the driver mounts into it.
    char sock [256], run [200];
    snprintf (run, sizeof run, "%s/run", fx.dir);
    snprintf (sock, sizeof sock, "%s/tunnel.sock", run);
    mkdir (run, 0755);
    char *peer_argv [] = { "/usr/bin/python3", argv [2], "--unix", sock, "--token", "tok-sb1",
                           "--agent", "0000000000b1", "--out", out, NULL };
    CHECK (posix_spawn (&peer, "/usr/bin/python3", NULL, NULL, peer_argv, environ) == 0);
    usleep (700 * 1000);                    //  the peer binds

    ah_sandbox_spec_t spec = { .agent_id = "0000000000b1" };
    int rc = d->create (d, &spec, &err);
    CHECK (rc == 0);
    if (rc)
        fprintf (stderr, "create: %s\n", err);
    ah_boot_t boot = { .agent_id = "0000000000b1", .token = "tok-sb1", .tunnel_port = atoi (PEER_PORT) };
    double t0 = eng_now ();
    rc = d->start (d, &boot, &err);
    CHECK (rc == 0);
    if (rc)
        fprintf (stderr, "start: %s\n", err);

    //  The peer exits once hello succeeded (or failed).
    int status = -1;
    while (eng_now () - t0 < 45) {
        pid_t w = waitpid (peer, &status, WNOHANG);
        if (w == peer) {
            peer = -1;
            break;
        }
        usleep (50 * 1000);
    }
    CHECK (peer == -1 && WIFEXITED (status) && WEXITSTATUS (status) == 0);
    fprintf (stderr, "start -> sandboxd's hello in %.2f s\n", eng_now () - t0);
    json_t *reply = json_load_file (out, 0, NULL);
    CHECK (reply != NULL);
    CHECK (json_is_true (json_object_get (reply, "ok")));
    CHECK_STR (json_string_value (json_object_get (reply, "agent_id")), "0000000000b1");
    CHECK_STR (json_string_value (json_object_get (reply, "user")), "agent");
    json_decref (reply);
    if (peer != -1 || !WIFEXITED (status) || WEXITSTATUS (status) != 0) {
        //  Say why: sandboxd's own log.
        long st;
        char *logs = eng_call ("GET", NULL, &st, "/containers/%s/logs?stdout=1&stderr=1&tail=40", cname);
        fprintf (stderr, "sandboxd's log:\n%s\n", logs ? logs : "");
        free (logs);
    }
    ah_sandbox_status_t s;
    CHECK (d->inspect (d, "0000000000b1", &s, &err) == 0 && s.running);

    CHECK (d->destroy (d, "0000000000b1", &err) == 0);
cleanup:
    if (peer > 0) {
        kill (peer, SIGKILL);
        waitpid (peer, NULL, 0);
    }
    if (d)
        d->destroy_driver (&d);
    free (err);
    CHECK (eng_fixture_cleanup (&fx) == 0);
    return CHECK_DONE ();
}
