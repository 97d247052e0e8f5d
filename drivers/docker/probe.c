/*  drivers/docker/probe.c: the host firewall probe (docs/docker.md,
    "What a sandbox can reach").

    A sandbox whose runtime needs no network has none: it reaches nothing
    but the tunnel's unix socket; nor has one of a runtime that needs a
    network under sandbox.docker.egress tunnel, the default (its way out
    is sandboxd's egress proxy), and then the probe reports that and makes
    nothing. Under sandbox.docker.egress bridge, a sandbox with a network (a runtime with
    needs_network) still reaches the host's own addresses through the
    host's INPUT chain, which Docker leaves open; only a host rule closes
    it, and the product does not install one (why: see docs/docker.md).
    This probe tells the operator at start whether the rule is there: a
    throw-away sandbox on a network like theirs, on the pool's last block,
    runs the server's sandboxd (in the helper image, helper.c: no runtime
    need be built) with a boot.json whose tunnel URL names the
    gateway and a port the server just bound on all addresses. If the dial
    arrives, host services are open to networked sandboxes. Its objects carry
    only the label agenthold.probe=<prefix> (never agenthold.managed), so
    list(), events and the reconciler do not see them; leftovers of a probe
    cut short by a kill are removed by the next one.

    DESIGN. `agenthold serve` runs the probe once in a thread of the driver
    (ah_docker_isolation_check_start) so it never delays the start; that
    thread only calls the driver's thread-safe functions and logs, and the
    driver's destroy joins it. probe_thread and probe_started are touched
    only by the thread that starts and destroys the driver.             */
#include "drivers/docker/docker_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PROBE_WAIT_MS   2500

static void
s_probe_remove_all (docker_t *self)
{
    char *esc = ah_dk_filters (json_pack ("{s:[s+]}", "label", "agenthold.probe=", self->prefix));
    if (!esc)
        return;
    const char *paths [] = { "/containers/%s?force=true&v=true", "/networks/%s" };
    for (int k = 0; k < 2; k++) {
        char *path = ah_strf (k == 0 ? "/containers/json?all=1&filters=%s" : "/networks?filters=%s", esc);
        json_t *j = NULL;
        if (path)
            ah_dk_get (self, "listing leftovers of the firewall probe", path, false, &j, NULL);
        free (path);
        size_t i;
        json_t *o;
        json_array_foreach (j, i, o) {
            const char *id = json_string_value (json_object_get (o, "Id"));
            if (!id)
                continue;
            dk_simple_t how = { .method = "DELETE", .path_fmt = paths [k], .ok1 = 204, .ok2 = 200,
                                .absent_ok = true, .timeout_s = 60 };
            char *derr = NULL;
            if (ah_dk_simple (self, &how, "removing the firewall probe's object", id, &derr))
                ah_warn (LOG_AREA, "%s", derr);
            free (derr);
        }
        json_decref (j);
    }
    free (esc);
}

//  A listener on all addresses, port chosen by the kernel. -1 on failure.
static int
s_probe_listen (int *port)
{
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_ANY) };
    socklen_t len = sizeof sa;
    if (bind (fd, (struct sockaddr *) &sa, sizeof sa) || listen (fd, 4)
    ||  getsockname (fd, (struct sockaddr *) &sa, &len)) {
        close (fd);
        return -1;
    }
    *port = ntohs (sa.sin_port);
    return fd;
}

//  What the probe needs before it makes anything: the engine, the server
//  on the host, the helper image, sandboxd. The image, or NULL with *report.
static const char *
s_probe_ready (ah_driver_t *driver, char **report)
{
    docker_t *self = driver->impl;
    const ah_config_t *c = self->config;
    char *eerr = NULL;
    if (ah_dk_ensure_engine (self, &eerr)) {
        ah_dk_err (report, "cannot check the host firewall: %s", eerr);
        free (eerr);
        return NULL;
    }
    char *server = ah_dk_server_container (self);
    if (server) {
        free (server);
        ah_dk_err (report, "cannot check the host firewall from inside a container: make sure "
                   "the host drops what %s sends to its own addresses (docs/docker.md)",
                   c->network_pool);
        return NULL;
    }
    //  Nothing of the image runs (sandboxd is mounted): the helper image,
    //  made here with no registry, so the probe needs no runtime built.
    char *ierr = NULL;
    const char *image = ah_dk_helper_image (self, &ierr);
    if (!image) {
        ah_dk_err (report, "cannot check the host firewall: %s", ierr ? ierr : "no helper image");
        free (ierr);
        return NULL;
    }
    if (ah_dk_deploy_sandboxd (self, image, &ierr)) {
        ah_dk_err (report, "cannot check the host firewall: %s", ierr);
        free (ierr);
        return NULL;
    }
    return image;
}

//  The probe's network and container, on the block at base, with a
//  boot.json that dials gw:port, started. 0 / -1 with *report.
static int
s_probe_make (docker_t *self, const char *name, const char *image, uint32_t base, const char *gw,
              int port, char **report)
{
    uint32_t size = 1u << (32 - self->subnet_bits);
    char *msg = NULL, *cerr = NULL, *path = NULL, *url = NULL;
    char *addr = ah_dk_ip_string (base + size / 2);
    int rc = -1;
    long st = ah_dk_network_post (self, "creating the firewall probe's network", name, base, true,
                                  json_pack ("{s:s}", "agenthold.probe", self->prefix), &msg, &cerr);
    if (st != 201 && st != 200) {
        char *subnet = ah_dk_subnet_string (self, base);
        ah_dk_err (report, "cannot check the host firewall: creating network %s on %s: %s", name,
                   subnet ? subnet : "", st > 0 ? (msg ? msg : "refused") : cerr);
        free (subnet);
        goto out;
    }
    json_t *mounts = json_array ();
    json_array_append_new (mounts, ah_dk_sandboxd_mount (self));
    //  Only what the probe's sandboxd uses: NET_ADMIN for its prohibit
    //  routes (it reads its root-owned boot.json as root without any other
    //  capability; making a home the agent's fails and is only logged),
    //  no new privileges, IPv6 off as in a networked sandbox.
    json_t *req = json_pack ("{s:s s:[s] s:[] s:s s:{s:s} s:{s:b s:o s:s s:I s:[s] s:[s] s:[s] "
                             "s:{s:s s:s}} s:{s:{s:{s:{s:s}}}}}",
        "Image", image, "Entrypoint", "/opt/agenthold/sandboxd", "Cmd", "User", "0:0",
        "Labels", "agenthold.probe", self->prefix,
        "HostConfig", "Init", 1, "Mounts", mounts, "NetworkMode", name, "Memory",
        (json_int_t) 64 << 20, "CapDrop", "ALL", "CapAdd", DK_NET_CAP,
        "SecurityOpt", "no-new-privileges",
        "Sysctls", "net.ipv6.conf.all.disable_ipv6", "1", "net.ipv6.conf.default.disable_ipv6", "1",
        "NetworkingConfig", "EndpointsConfig", name, "IPAMConfig", "IPv4Address", addr ? addr : "");
    path = ah_strf ("/containers/create?name=%s", name);
    free (msg);
    msg = NULL;
    st = ah_dk_call_json (self, "creating the firewall probe's container", path, req, &msg, &cerr);
    if (st != 201) {
        ah_dk_err (report, "cannot check the host firewall: creating container %s from %s: %s", name,
                   image, st > 0 ? (msg ? msg : "refused") : cerr);
        goto out;
    }
    //  The boot file: the gateway and our probe port, a token nobody holds.
    url = ah_strf ("ws://%s:%d/tunnel", gw, port);
    char *serr = NULL;
    //  What a networked sandbox's sandboxd is told not to reach: the probe
    //  asks whether, with those routes in place, the host still answers.
    char *blocked = ah_dk_blocked (self, base);
    int wrote = blocked ? ah_dk_boot_write (self, name, "probe", "probe", url ? url : "", blocked,
                                            NULL, &serr) : -1;
    free (blocked);
    if (wrote
    ||  ah_dk_container_start (self, name, &serr)) {
        ah_dk_err (report, "cannot check the host firewall: %s", serr ? serr : "out of memory");
        free (serr);
        goto out;
    }
    rc = 0;
out:
    free (url);
    free (path);
    free (msg);
    free (cerr);
    free (addr);
    return rc;
}

int
ah_docker_check_isolation (ah_driver_t *driver, int tunnel_port, char **report)
{
    if (!driver || !driver->impl || !driver->name || strcmp (driver->name, "docker")) {
        ah_dk_err (report, "the host firewall probe needs the docker driver");
        return -1;
    }
    docker_t *self = driver->impl;
    const ah_config_t *c = self->config;
    //  sandbox.docker.egress tunnel (the default): no sandbox has a
    //  network, so there is nothing on the host a sandbox could reach.
    if (!c->docker_egress || strcmp (c->docker_egress, "bridge")) {
        ah_dk_err (report, "no sandbox has a network: every sandbox reaches only the tunnel's socket "
                   "(sandbox.docker.egress tunnel: a runtime with needs_network goes out through "
                   "sandboxd's egress proxy, each connection decided and audited, docs/egress.md); "
                   "no host firewall rule is needed");
        return 0;
    }
    const char *image = s_probe_ready (driver, report);
    if (!image)
        return -1;
    s_probe_remove_all (self);

    //  The pool's last block: agents take blocks from the first up, so it is
    //  free unless the pool is full; the networks table says for sure.
    uint32_t size = 1u << (32 - self->subnet_bits);
    uint32_t base = self->pool_base + (self->subnet_count - 1) * size;
    char *gw = ah_dk_ip_string (base + 1);
    int rc = -1, port = 0, fd = -1;
    char name [DK_MAX_NAME];
    snprintf (name, sizeof name, "%s-probe-%08x", self->prefix, (unsigned) random ());
    if (ah_dk_subnet_taken (self, base)) {
        char *subnet = ah_dk_subnet_string (self, base);
        ah_dk_err (report, "cannot check the host firewall: the last subnet of %s (%s) is in use",
                   c->network_pool, subnet ? subnet : "");
        free (subnet);
        goto out;
    }
    if ((fd = s_probe_listen (&port)) < 0) {
        ah_dk_err (report, "cannot check the host firewall: cannot listen on a port: %s", strerror (errno));
        goto out;
    }
    //  Not the tunnel's TCP port either: nothing of the host is for a
    //  sandbox's network (the tunnel is reached through its socket).
    (void) tunnel_port;
    if (!gw || s_probe_make (self, name, image, base, gw, port, report))
        goto out;
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    if (poll (&pfd, 1, PROBE_WAIT_MS) > 0) {
        ah_dk_err (report, "sandboxes of runtimes that need no network have none and reach only "
                   "the tunnel's socket; but a sandbox with a network (a runtime with "
                   "needs_network) on %s reached this host at %s:%d: every service listening on "
                   "this host's addresses is open to those. Filter the pool on the host "
                   "(docs/docker.md), e.g. `iptables -I INPUT -s %s -j DROP`",
                   c->network_pool, gw, port, c->network_pool);
        rc = 1;
        goto out;
    }
    //  Silence only counts if the probe was alive to dial.
    char *path = ah_strf ("/containers/%s/json", name);
    json_t *j = NULL;
    long st = path ? ah_dk_get (self, "inspecting the firewall probe", path, false, &j, NULL) : -1;
    json_t *state = json_object_get (j, "State");
    bool running = json_is_true (json_object_get (state, "Running"));
    json_int_t code = json_integer_value (json_object_get (state, "ExitCode"));
    json_decref (j);
    free (path);
    if (st == 200 && running) {
        ah_dk_err (report, "sandboxes of runtimes that need no network have none and reach only "
                   "the tunnel's socket; a sandbox with a network on %s reaches no host port (a "
                   "probe on port %d went unanswered for %d ms)", c->network_pool, port,
                   PROBE_WAIT_MS);
        rc = 0;
    }
    else
        ah_dk_err (report, "cannot check the host firewall: the probe sandbox stopped (exit %lld) "
                   "before it could dial", (long long) code);
out:
    if (fd >= 0)
        close (fd);
    s_probe_remove_all (self);
    free (gw);
    return rc;
}

typedef struct {
    ah_driver_t *driver;
    int tunnel_port;
} probe_args_t;

static void *
s_probe_thread (void *arg)
{
    probe_args_t *a = arg;
    pthread_setname_np (pthread_self (), "ah-fw-probe");
    char *report = NULL;
    int rc = ah_docker_check_isolation (a->driver, a->tunnel_port, &report);
    docker_t *self = a->driver->impl;
    pthread_mutex_lock (&self->lock);
    self->probe_rc = rc;
    free (self->probe_report);
    self->probe_report = report ? strdup (report) : NULL;
    pthread_mutex_unlock (&self->lock);
    if (rc == 0)
        ah_info (LOG_AREA, "host firewall: %s", report ? report : "");
    else
        ah_warn (LOG_AREA, "host firewall: %s", report ? report : "");
    free (report);
    free (a);
    return NULL;
}

int
ah_docker_isolation_check_start (ah_driver_t *driver)
{
    if (!driver || !driver->impl || !driver->name || strcmp (driver->name, "docker"))
        return -1;
    docker_t *self = driver->impl;
    //  The tunnel's TCP port when it has one (sandboxes reach it through
    //  its socket: the probe looks at no port of the tunnel's).
    const char *tcp = ah_config_tunnel_tcp (self->config, NULL);
    const char *colon = tcp ? strrchr (tcp, ':') : NULL;
    int port = colon ? atoi (colon + 1) : 0;
    if (self->probe_started)
        return -1;
    probe_args_t *a = calloc (1, sizeof *a);
    if (!a)
        return -1;
    *a = (probe_args_t) { .driver = driver, .tunnel_port = port };
    if (pthread_create (&self->probe_thread, NULL, s_probe_thread, a)) {
        free (a);
        return -1;
    }
    self->probe_started = true;
    return 0;
}

int
ah_docker_isolation_report (ah_driver_t *driver, char *report, size_t size)
{
    docker_t *self = driver->impl;
    pthread_mutex_lock (&self->lock);
    int rc = self->probe_started && self->probe_report ? self->probe_rc : AH_FIREWALL_PENDING;
    snprintf (report, size, "%s", rc == AH_FIREWALL_PENDING ? "" : self->probe_report);
    pthread_mutex_unlock (&self->lock);
    return rc;
}
