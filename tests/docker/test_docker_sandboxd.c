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

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define PEER_PORT "18310"

extern char **environ;

//  Spawns the boot peer for agent on the unix socket sock; its hello reply
//  goes to out. The pid, -1 when it could not start.
static pid_t
s_peer (const char *script, const char *sock, const char *token, const char *agent, const char *out)
{
    char *argv [] = { "/usr/bin/python3", (char *) script, "--unix", (char *) sock, "--token",
                      (char *) token, "--agent", (char *) agent, "--out", (char *) out, NULL };
    pid_t pid = -1;
    if (posix_spawn (&pid, "/usr/bin/python3", NULL, NULL, argv, environ) != 0)
        return -1;
    usleep (700 * 1000);                    //  the peer binds
    return pid;
}

//  Waits up to 45 s for the peer to exit; true when it exited 0 (hello
//  and ping answered).
static bool
s_peer_ok (pid_t *peer)
{
    int status = -1;
    double t0 = eng_now ();
    while (*peer > 0 && eng_now () - t0 < 45) {
        if (waitpid (*peer, &status, WNOHANG) == *peer) {
            *peer = -1;
            break;
        }
        usleep (50 * 1000);
    }
    return *peer == -1 && WIFEXITED (status) && WEXITSTATUS (status) == 0;
}

//  A runtime that needs a network: the real sandboxd makes the host
//  unreachable (prohibit routes) before it dials, so a listener on all of
//  the host's addresses answers the agent on none of them; the tunnel is
//  still reached through its socket; IPv6 is off.
static void
s_networked (ah_driver_t *d, eng_fixture_t *fx, const char *script, const char *sock, pid_t *peer)
{
    char out [256], cname [160], buf [512];
    char *err = NULL;
    snprintf (out, sizeof out, "%s/hello-net.json", fx->dir);
    snprintf (cname, sizeof cname, "%s-0000000000c3", fx->prefix);
    //  The host service: a listener on all addresses (python, in the background).
    char *lsn_argv [] = { "/usr/bin/python3", "-c",
        "import socket,time\ns=socket.socket()\ns.setsockopt(1,2,1)\ns.bind(('0.0.0.0',18611))\n"
        "s.listen(8)\nwhile True:\n c,_=s.accept(); c.sendall(b'hello-from-host\\n'); c.close()\n", NULL };
    pid_t lsn = -1;
    CHECK (posix_spawn (&lsn, "/usr/bin/python3", NULL, NULL, lsn_argv, environ) == 0);
    *peer = s_peer (script, sock, "tok-net", "0000000000c3", out);
    ah_sandbox_spec_t spec = { .agent_id = "0000000000c3", .needs_network = true };
    CHECK (d->create (d, &spec, &err) == 0);
    ah_boot_t boot = { .agent_id = "0000000000c3", .token = "tok-net", .tunnel_port = atoi (PEER_PORT) };
    CHECK (d->start (d, &boot, &err) == 0);
    CHECK (s_peer_ok (peer));
    long st;
    json_t *c = eng_json ("GET", NULL, &st, "/containers/%s/json", cname);
    json_t *nets = json_object_get (json_object_get (c, "NetworkSettings"), "Networks");
    const char *gw = NULL;
    const char *key;
    json_t *v;
    json_object_foreach (nets, key, v)
        gw = json_string_value (json_object_get (v, "Gateway"));
    char gateway [64];
    snprintf (gateway, sizeof gateway, "%s", gw ? gw : "");
    json_decref (c);
    CHECK (*gateway);
    //  The listener is there: the host reaches it.
    int code;
    char *o = eng_exec_as (cname, "10001", "[\"cat\",\"/proc/sys/net/ipv6/conf/all/disable_ipv6\"]", &code);
    CHECK (o && o [0] == '1');
    free (o);
    o = eng_exec_as (cname, "10001", "[\"ip\",\"route\"]", &code);
    int prohibits = 0;
    for (const char *p = o; p && (p = strstr (p, "prohibit")); p++)
        prohibits++;
    CHECK (prohibits >= 5);
    if (prohibits < 5)
        fprintf (stderr, "routes in the networked sandbox:\n%s\n", o ? o : "");
    free (o);
    struct ifaddrs *ifs = NULL;
    getifaddrs (&ifs);
    int tried = 0;
    for (struct ifaddrs *ifa = ifs; ifa; ifa = ifa->ifa_next) {
        if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != AF_INET)
            continue;
        char host [INET_ADDRSTRLEN];
        inet_ntop (AF_INET, &((struct sockaddr_in *) ifa->ifa_addr)->sin_addr, host, sizeof host);
        const char *targets [2] = { host, gateway };
        for (int t = 0; t < 2; t++) {
            snprintf (buf, sizeof buf, "[\"nc\",\"-w\",\"2\",\"%s\",\"18611\"]",
                      strncmp (targets [t], "127.", 4) ? targets [t] : gateway);
            o = eng_exec_as (cname, "10001", buf, &code);
            CHECK (o && !strstr (o, "hello-from-host"));
            if (o && strstr (o, "hello-from-host"))
                fprintf (stderr, "the networked sandbox reached the host at %s\n", targets [t]);
            free (o);
            tried++;
        }
    }
    freeifaddrs (ifs);
    CHECK (tried >= 2);
    //  The positive control: the listener answers the host itself.
    o = NULL;
    FILE *f = popen ("/usr/bin/python3 -c \"import socket; print(socket.create_connection(('127.0.0.1', "
                     "18611), 3).recv(64).decode())\"", "r");
    char line [64] = "";
    if (f) {
        if (!fgets (line, sizeof line, f))
            line [0] = 0;
        pclose (f);
    }
    CHECK (strstr (line, "hello-from-host") != NULL);
    fprintf (stderr, "networked sandbox: %d prohibit routes, the host listener unreachable on %d "
             "addresses\n", prohibits, tried);
    CHECK (d->destroy (d, "0000000000c3", &err) == 0);
    if (lsn > 0) {
        kill (lsn, SIGKILL);
        waitpid (lsn, NULL, 0);
    }
    free (err);
}

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
    s_networked (d, &fx, argv [2], sock, &peer);
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
