/*  drivers/docker/container.c: the agent's container, <prefix>-<id>, and
    the driver's entry points on it: create, rebuild, start (boot.json,
    boot.c, then start), stop, destroy (with the network, the home volume and the
    subnet), inspect and list. Every entry point checks the agent id and
    the image reference (common/ident.h) before anything reaches the
    engine.                                                             */
#include "drivers/docker/docker_int.h"
#include "proto/tar.h"
#include "common/bounds.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

//  -------------------------------------------------------------------------
//  Containers

int
ah_dk_container_remove (docker_t *self, const char *name, char **err)
{
    //  409 "removal already in progress": someone else is removing it.
    //  Either way the name is only free once the container is gone, so
    //  wait for that (a create that follows would meet a 409 otherwise).
    //  A create still under way in the engine (sent by a server killed
    //  mid-request) holds the name while the container is not there yet:
    //  the DELETE answers 404 and the container appears after it. So
    //  while it is still there, the DELETE is sent again, once a second.
    dk_simple_t how = { .method = "DELETE", .path_fmt = "/containers/%s?force=true&v=false",
                        .ok1 = 204, .ok2 = 409, .absent_ok = true, .timeout_s = 60 };
    if (ah_dk_simple (self, &how, "removing container", name, err))
        return -1;
    char *path = ah_strf ("/containers/%s/json", name);
    long st = 200;
    for (int i = 1; i <= 300 && st == 200; i++) {
        st = ah_dk_get (self, "waiting for a removed container to go", path, true, NULL, err);
        if (st != 200)
            break;
        nanosleep (&(struct timespec) { .tv_nsec = 100 * 1000 * 1000 }, NULL);
        if (i % 10 == 0 && ah_dk_simple (self, &how, "removing container", name, err)) {
            free (path);
            return -1;
        }
    }
    free (path);
    if (st == 200)
        ah_dk_err (err, "removing container %s: still there after 30 s", name);
    return st == 404 ? 0 : -1;
}

int
ah_dk_container_start (docker_t *self, const char *name, char **err)
{
    dk_simple_t how = { .method = "POST", .path_fmt = "/containers/%s/start", .ok1 = 204, .ok2 = 304 };
    return ah_dk_simple (self, &how, "starting container", name, err);
}

json_t *
ah_dk_sandboxd_mount (const docker_t *self)
{
    if (self->sandboxd_file)
        return json_pack ("{s:s s:s s:s s:b}",
            "Type", "bind", "Source", self->sandboxd_file, "Target", "/opt/agenthold/sandboxd",
            "ReadOnly", 1);
    return json_pack ("{s:s s:s s:s s:b s:{s:b}}",
        "Type", "volume", "Source", self->config->sandboxd_volume, "Target", "/opt/agenthold",
        "ReadOnly", 1, "VolumeOptions", "NoCopy", 1);
}

//  The image's USER (Config.User), "" when it names none. Caller frees;
//  NULL with *err when the engine cannot say (404: no such image).
static char *
s_image_user (docker_t *self, const char *image, const char *container, char **err)
{
    char *esc = curl_easy_escape (NULL, image, 0);
    char *path = esc ? ah_strf ("/images/%s/json", esc) : NULL;
    curl_free (esc);
    char *what = ah_strf ("reading the user of image '%s'", image);
    json_t *j = NULL;
    long st = path ? ah_dk_get (self, what, path, true, &j, err) : -1;
    const char *user = json_string_value (json_object_get (json_object_get (j, "Config"), "User"));
    char *out = NULL;
    if (st == 200)
        out = strdup (user ? user : "");
    else
    if (st == 404)
        ah_dk_err (err, "creating container %s: image '%s' not found (Docker: No such image: %s)",
                   container, image, image);
    json_decref (j);
    free (what);
    free (path);
    return out;
}

//  The directory of the tunnel's socket, read-only at DK_TUNNEL_DIR: the
//  only way a sandbox without a network reaches the server. NULL with
//  *err.
static json_t *
s_tunnel_mount (docker_t *self, char **err)
{
    char *dir = self->tunnel_socket ? strdup (self->tunnel_socket) : NULL;
    char *slash = dir ? strrchr (dir, '/') : NULL;
    if (!slash || slash == dir) {
        ah_dk_err (err, "creating a sandbox: the tunnel's socket '%s' must sit in a directory of "
                   "its own (sandbox.tunnel_socket)", self->tunnel_socket ? self->tunnel_socket : "");
        free (dir);
        return NULL;
    }
    *slash = 0;
    //  On the host the directory may not be there yet (the tunnel makes it
    //  when it starts listening); in a container it is the mount's.
    char *server = ah_dk_server_container (self);
    if (!server && mkdir (dir, 0755) != 0 && errno != EEXIST)
        ah_warn (LOG_AREA, "making %s for the tunnel's socket: %s", dir, strerror (errno));
    free (server);
    char *host = ah_dk_host_path (self, dir, err);
    free (dir);
    if (!host)
        return NULL;
    json_t *m = json_pack ("{s:s s:s s:s s:b}", "Type", "bind", "Source", host,
                           "Target", DK_TUNNEL_DIR, "ReadOnly", 1);
    free (host);
    return m;
}

//  user: the image's USER (taken over). proxy: sandboxd runs the egress
//  proxy on 127.0.0.1:AH_EGRESS_PORT (docs/egress.md).
static int
s_container_create (docker_t *self, const ah_sandbox_spec_t *spec, const char *image, uint32_t base,
                    char *user, bool proxy, char **err)
{
    const ah_config_t *c = self->config;
    dk_names_t n;
    ah_dk_names (self, spec->agent_id, &n);
    double cpus = spec->cpus > 0 ? spec->cpus : c->default_cpus;
    if (c->max_cpus > 0 && cpus > c->max_cpus)
        cpus = c->max_cpus;
    int64_t memory_mb = spec->memory_mb > 0 ? spec->memory_mb : c->default_memory_mb;
    if (c->max_memory_mb > 0 && memory_mb > c->max_memory_mb)
        memory_mb = c->max_memory_mb;
    int64_t pids = spec->pids_limit > 0 ? spec->pids_limit : c->pids_limit;
    //  Held to the bounds every client is (common/bounds.h): under 0.01
    //  CPU NanoCpus would round to 0, and 0 is no limit at all.
    char why [300];
    if (ah_bound_check_named ("cpus", cpus, why, sizeof why)
    ||  ah_bound_check_named ("memory_mb", (double) memory_mb, why, sizeof why)
    ||  ah_bound_check_named ("pids_limit", (double) pids, why, sizeof why)) {
        ah_dk_err (err, "creating container %s: refused resources: %s", n.container, why);
        free (user);
        return -1;
    }

    json_t *tunnel = user ? s_tunnel_mount (self, err) : NULL;
    if (!tunnel) {
        free (user);
        return -1;
    }
    json_t *mounts = json_array ();
    json_array_append_new (mounts, json_pack ("{s:s s:s s:s s:{s:o}}",
        "Type", "volume", "Source", n.volume, "Target", "/home/agent",
        "VolumeOptions", "Labels", ah_dk_labels (self, spec->agent_id)));
    json_array_append_new (mounts, ah_dk_sandboxd_mount (self));
    json_array_append_new (mounts, tunnel);
    //  /etc/agenthold: the boot card, written by the start without an
    //  engine call (boot.c).
    json_t *card = NULL;
    if (ah_dk_boot_mount (self, spec->agent_id, &card, err)) {
        json_decref (mounts);
        free (user);
        return -1;
    }
    if (card)
        json_array_append_new (mounts, card);
    //  /tmp: a tmpfs of its own (the engine mounts it nosuid, nodev).
    json_array_append_new (mounts, json_pack ("{s:s s:s s:{s:I s:i}}",
        "Type", "tmpfs", "Target", "/tmp",
        "TmpfsOptions", "SizeBytes", (json_int_t) (c->tmp_mb > 0 ? c->tmp_mb : 64) * 1024 * 1024,
        "Mode", 01777));

    //  No network unless the runtime needs one: the tunnel's socket is the
    //  only way out. All capabilities dropped but what sandboxd needs to
    //  make the home the agent's and to become the agent; no new
    //  privileges (setuid programs in the image stay what they are); the
    //  engine's default seccomp profile (nothing here unsets it).
    json_t *host = json_pack ("{s:b s:I s:I s:I s:o s:s s:{s:s} s:[s] s:[" "s s s s s s" "] s:[s]}",
        "Init", 1,
        "NanoCpus", (json_int_t) llround (cpus * 1e9),
        "Memory", (json_int_t) memory_mb * 1024 * 1024,
        "PidsLimit", (json_int_t) pids,
        "Mounts", mounts,
        "NetworkMode", spec->needs_network ? n.network : "none",
        "RestartPolicy", "Name", "no",
        "CapDrop", "ALL",
        "CapAdd", DK_CAPS,
        "SecurityOpt", "no-new-privileges");
    if (c->runtime && *c->runtime)
        json_object_set_new (host, "Runtime", json_string (c->runtime));
    if (spec->needs_network) {
        //  sandboxd makes the host unreachable at boot (prohibit routes in
        //  the sandbox's own namespace), and no IPv6 reaches it either.
        json_array_append_new (json_object_get (host, "CapAdd"), json_string (DK_NET_CAP));
        json_object_set_new (host, "Sysctls", json_pack ("{s:s s:s}",
            "net.ipv6.conf.all.disable_ipv6", "1", "net.ipv6.conf.default.disable_ipv6", "1"));
    }

    //  sandboxd starts as root (it reads the root-only boot.json, makes the
    //  home the agent's, and drops to the agent account for what it runs),
    //  whatever USER the image names; that USER is handed to it, for
    //  images without an `agent` account.
    char *env = ah_strf ("AGENTHOLD_USER=%s", user);
    free (user);
    json_t *req = json_pack ("{s:s s:s s:[s] s:[] s:s s:[s] s:o s:o}",
        "Image", image,
        "Hostname", spec->agent_id,
        "Entrypoint", "/opt/agenthold/sandboxd",
        "Cmd",
        "User", "0:0",
        "Env", env ? env : "AGENTHOLD_USER=",
        "Labels", ah_dk_labels (self, spec->agent_id),
        "HostConfig", host);
    free (env);
    if (spec->needs_network) {
        char *addr = ah_dk_ip_string (base + (1u << (32 - self->subnet_bits)) / 2);
        json_object_set_new (req, "NetworkingConfig", json_pack ("{s:{s:{s:{s:s}}}}",
            "EndpointsConfig", n.network, "IPAMConfig", "IPv4Address", addr ? addr : ""));
        free (addr);
    }
    //  The runtime's env vars (sandboxd hands its environment on to what it runs).
    json_t *envs = json_object_get (req, "Env");
    if (proxy)
        json_array_append_new (envs, json_string ("AGENTHOLD_EGRESS_PORT=" AH_EGRESS_PORT));
    for (size_t i = 0; i < spec->n_env; i++)
        if (spec->env [i])
            json_array_append_new (envs, json_string (spec->env [i]));

    char *what = ah_strf ("creating container %s", n.container);
    char *path = ah_strf ("/containers/create?name=%s", n.container);
    int rc = -1;
    for (int attempt = 0; attempt < 5; attempt++) {
        char *msg = NULL;
        long st = ah_dk_call_json (self, what, path, json_incref (req), &msg, err);
        if (st == 201 || st == 200)
            rc = 0;
        else
        if (st == 404)
            ah_dk_err (err, "%s: image '%s' not found (Docker: %s)", what, image, msg ? msg : "");
        else
        if (st == 409 && attempt < 4) {
            //  A container of that name survives from an interrupted
            //  create or rebuild: the spec wins, the home is in the volume.
            //  The create of a server killed mid-request may still be
            //  under way in the engine and take the name again after our
            //  removal: then once more, after a pause.
            ah_info (LOG_AREA, "%s: one exists already; replacing it", what);
            free (msg);
            if (attempt > 0)
                nanosleep (&(struct timespec) { .tv_nsec = 250 * 1000 * 1000 * attempt }, NULL);
            if (ah_dk_container_remove (self, n.container, err))
                break;
            continue;
        }
        else
        if (st == 400 && msg && strstr (msg, "runtime"))
            ah_dk_err (err, "%s: the engine has no OCI runtime '%s' (sandbox.docker.runtime) (Docker: %s)",
                       what, c->runtime ? c->runtime : "", msg);
        else
        if (st > 0)
            ah_dk_status_err (err, what, st, msg);
        free (msg);
        break;
    }
    json_decref (req);
    free (path);
    free (what);
    return rc;
}

//  -------------------------------------------------------------------------
//  The entry points

//  What every entry point on one agent starts with: its id checked, the
//  names of its objects. The driver's state, or NULL with *err.
static docker_t *
s_enter (ah_driver_t *driver, const char *agent_id, const char *doing, dk_names_t *names, char **err)
{
    if (ah_dk_check_ident (AH_IDENT_AGENT_ID, agent_id, doing, err))
        return NULL;
    ah_dk_names (driver->impl, agent_id, names);
    return driver->impl;
}

//  The agent's network made (or, for a runtime without one, removed) on
//  a thread of its own.
typedef struct {
    docker_t   *self;
    const char *agent_id;               //  borrowed from the spec
    bool        needs;
    pthread_t   thread;
    uint32_t    base;                   //  out: the subnet (0: none)
    int         rc;                     //  out: 0 / -1 with err
    char       *err;
} dk_net_job_t;

static void *
s_net_job (void *arg)
{
    dk_net_job_t *job = arg;
    if (job->needs) {
        job->base = ah_dk_network_ensure (job->self, job->agent_id, &job->err);
        job->rc = job->base ? 0 : -1;
    }
    else
        job->rc = ah_dk_network_remove (job->self, job->agent_id, &job->err)
               || ah_dk_subnet_free (job->self, job->agent_id, &job->err) ? -1 : 0;
    return NULL;
}

//  create and rebuild: the network (kept across rebuilds) and a container
//  from the spec; rebuild first removes the old container, never the home.
static int
s_make (ah_driver_t *driver, const ah_sandbox_spec_t *spec, bool rebuild, char **err)
{
    const char *doing = rebuild ? "rebuilding a sandbox" : "creating a sandbox";
    dk_names_t n;
    docker_t *self = s_enter (driver, spec ? spec->agent_id : NULL, doing, &n, err);
    if (!self)
        return -1;
    //  No image in the spec: sandbox.default_image, under the same rule.
    bool given = spec->image && *spec->image;
    const char *image = given ? spec->image : self->config->default_image;
    char *doing_default = given ? NULL : ah_strf ("%s with sandbox.default_image", doing);
    int bad = ah_dk_check_ident (AH_IDENT_IMAGE, image, doing_default ? doing_default : doing, err);
    free (doing_default);
    if (bad)
        return -1;
    if (rebuild && ah_dk_container_remove (self, n.container, err))
        return -1;
    //  The network (the slowest part) in a thread of its own while this
    //  one sees to sandboxd, the home volume and the image's user: the
    //  container needs all of them. A server in a container makes them
    //  one after the other: the home volume's check that the data
    //  directory is where the engine looks refuses before anything is made.
    if (ah_dk_ensure_engine (self, err))
        return -1;
    char *server = ah_dk_server_container (self);
    //  sandbox.docker.egress tunnel: a networked runtime gets no network
    //  either; its way out is sandboxd's proxy over the tunnel (docs/egress.md).
    ah_sandbox_spec_t local = *spec;
    bool proxy = false;
    if (self->config->docker_egress && !strcmp (self->config->docker_egress, "tunnel")) {
        proxy = local.needs_network;
        local.needs_network = false;
    }
    spec = &local;
    dk_net_job_t net = { .self = self, .agent_id = spec->agent_id, .needs = spec->needs_network };
    bool threaded = !server && pthread_create (&net.thread, NULL, s_net_job, &net) == 0;
    free (server);
    char *user = NULL;
    int rc = ah_dk_deploy_sandboxd (self, image, err) || ah_dk_home_volume_ensure (self, spec->agent_id, err)
           ? -1 : 0;
    if (rc == 0) {
        user = s_image_user (self, image, n.container, err);
        rc = user ? 0 : -1;
    }
    if (threaded)
        pthread_join (net.thread, NULL);
    else
    if (rc == 0)
        s_net_job (&net);
    if (rc == 0 && net.rc) {
        ah_dk_err (err, "%s", net.err ? net.err : "making the sandbox's network failed");
        rc = -1;
    }
    free (net.err);
    if (rc) {
        free (user);
        return -1;
    }
    return s_container_create (self, spec, image, net.base, user, proxy, err);
}

int
ah_dk_create (ah_driver_t *driver, const ah_sandbox_spec_t *spec, char **err)
{
    return s_make (driver, spec, false, err);
}

int
ah_dk_rebuild (ah_driver_t *driver, const ah_sandbox_spec_t *spec, char **err)
{
    return s_make (driver, spec, true, err);
}

int
ah_dk_start (ah_driver_t *driver, const ah_boot_t *boot, char **err)
{
    dk_names_t n;
    docker_t *self = s_enter (driver, boot ? boot->agent_id : NULL, "starting a sandbox", &n, err);
    if (!self)
        return -1;
    if (!boot->token || !*boot->token || boot->tunnel_port <= 0 || boot->tunnel_port > 65535) {
        ah_dk_err (err, "starting container %s: no boot token or no valid tunnel port", n.container);
        return -1;
    }
    char *eerr = NULL;
    if (ah_dk_ensure_engine (self, &eerr)) {
        ah_dk_err (err, "starting container %s: %s", n.container, eerr);
        free (eerr);
        return -1;
    }
    if (ah_dk_deploy_for_start (self, n.container, err))
        return -1;
    //  Every sandbox dials the tunnel's unix socket, mounted at
    //  DK_TUNNEL_DIR, networked or not.
    const char *sock = self->tunnel_socket ? strrchr (self->tunnel_socket, '/') : NULL;
    char *url = sock ? ah_strf ("ws+unix://%s%s:/tunnel", DK_TUNNEL_DIR, sock) : NULL;
    //  A sandbox with a network (it has a subnet): what it may not reach.
    uint32_t base = ah_dk_subnet_lookup (self, boot->agent_id);
    char *blocked = base ? ah_dk_blocked (self, base) : NULL;
    int rc = -1;
    //  The card in the directory the container mounts (no engine call),
    //  or into the container itself when it was made without one. (A
    //  server that runs as another user now writes through the engine,
    //  which writes root's files into the mount as well.)
    bool direct = ah_dk_boot_dir_present (self, boot->agent_id) && geteuid () == 0;
    if (!url || (base && !blocked))
        ah_dk_err (err, "starting container %s: out of memory", n.container);
    else
    if (direct)
        rc = ah_dk_boot_put (self, boot->agent_id, boot->token, url, blocked, boot->briefing, err);
    else
        rc = ah_dk_boot_write (self, n.container, boot->agent_id, boot->token, url, blocked,
                               boot->briefing, err);
    free (blocked);
    free (url);
    if (rc == 0)
        rc = ah_dk_container_start (self, n.container, err);
    if (rc && err && *err && strstr (*err, "is ambiguous")) {
        //  Its network exists twice (an interrupted create): once more.
        ah_dk_network_dedupe (self, boot->agent_id);
        free (*err);
        *err = NULL;
        rc = ah_dk_container_start (self, n.container, err);
    }
    if (rc) {
        //  A home whose directory was removed behind the engine's back
        //  fails the start with the engine's words; ours say what
        //  happened. (Looked at only when the start failed: a wake asks
        //  the engine nothing else.) Lifecycle's worker inspects and
        //  records the loss; the next start makes the sandbox again.
        dk_home_t home;
        ah_dk_home_look (self, "starting a sandbox", boot->agent_id, &home, NULL);
        if (home.lost)
            ah_dk_err (err, "starting container %s: its home directory is gone (removed outside agenthold; "
                       "home volume %s %s): its files are lost; the next start makes it again, empty",
                       n.container, n.volume, home.volume == 200 ? "present" : "gone too");
    }
    return rc;
}

int
ah_dk_stop (ah_driver_t *driver, const char *agent_id, char **err)
{
    dk_names_t n;
    docker_t *self = s_enter (driver, agent_id, "stopping a sandbox", &n, err);
    if (!self)
        return -1;
    //  A frozen sandbox is thawed first, so that its processes see the
    //  SIGTERM and end as they would awake (409: it was not paused).
    dk_simple_t thaw = { .method = "POST", .path_fmt = "/containers/%s/unpause", .ok1 = 204,
                         .ok2 = 409, .absent_ok = true, .timeout_s = 30 };
    char *ignored = NULL;
    ah_dk_simple (self, &thaw, "unpausing container", n.container, &ignored);
    free (ignored);
    dk_simple_t how = { .method = "POST", .path_fmt = "/containers/%s/stop?t=5", .ok1 = 204,
                        .ok2 = 304, .timeout_s = 60 };
    return ah_dk_simple (self, &how, "stopping container", n.container, err);
}

//  Pause or unpause (freeze, thaw). The engine answers 409 when the
//  container is already so; then it is asked what it is, so that a 409
//  for another reason (not running) is an error that says so.
static int
s_pause (ah_driver_t *driver, const char *agent_id, bool pause, char **err)
{
    dk_names_t n;
    docker_t *self = s_enter (driver, agent_id, pause ? "freezing a sandbox" : "thawing a sandbox",
                              &n, err);
    if (!self)
        return -1;
    dk_simple_t how = { .method = "POST", .path_fmt = pause ? "/containers/%s/pause"
                                                            : "/containers/%s/unpause",
                        .ok1 = 204, .ok2 = 204, .timeout_s = 30 };
    char *why = NULL;
    if (ah_dk_simple (self, &how, pause ? "pausing container" : "unpausing container",
                      n.container, &why) == 0)
        return 0;
    ah_sandbox_status_t status;
    char *ierr = NULL;
    if (ah_dk_inspect (driver, agent_id, &status, &ierr) == 0 && status.running
    &&  status.paused == pause) {
        free (why);
        return 0;
    }
    free (ierr);
    if (err)
        *err = why;
    else
        free (why);
    return -1;
}

int
ah_dk_freeze (ah_driver_t *driver, const char *agent_id, char **err)
{
    return s_pause (driver, agent_id, true, err);
}

int
ah_dk_thaw (ah_driver_t *driver, const char *agent_id, char **err)
{
    return s_pause (driver, agent_id, false, err);
}

int
ah_dk_destroy (ah_driver_t *driver, const char *agent_id, char **err)
{
    dk_names_t n;
    docker_t *self = s_enter (driver, agent_id, "destroying a sandbox", &n, err);
    if (!self)
        return -1;
    if (ah_dk_container_remove (self, n.container, err))
        return -1;
    if (ah_dk_network_remove (self, agent_id, err))
        return -1;
    if (ah_dk_home_volume_remove (self, agent_id, err))
        return -1;
    if (ah_dk_boot_dir_remove (self, agent_id, err))
        return -1;
    return ah_dk_subnet_free (self, agent_id, err);
}

int
ah_dk_remove_container (ah_driver_t *driver, const char *agent_id, char **err)
{
    dk_names_t n;
    docker_t *self = s_enter (driver, agent_id, "removing a sandbox's container", &n, err);
    if (!self)
        return -1;
    return ah_dk_container_remove (self, n.container, err);
}

//  The state of an existing container into status.
static void
s_status_from (const json_t *container, ah_sandbox_status_t *status)
{
    json_t *state = json_object_get (container, "State");
    const char *s = json_string_value (json_object_get (state, "Status"));
    status->exists = true;
    status->running = json_is_true (json_object_get (state, "Running"));
    status->paused = status->running && json_is_true (json_object_get (state, "Paused"));
    const char *image_id = json_string_value (json_object_get (container, "Image"));
    snprintf (status->image_id, sizeof status->image_id, "%s", image_id ? image_id : "");
    json_t *code = json_object_get (state, "ExitCode");
    const char *started = json_string_value (json_object_get (state, "StartedAt"));
    bool ran = started && strncmp (started, "0001-", 5) != 0;
    if (!status->running && ran && json_is_integer (code))
        status->exit_code = (int) json_integer_value (code);
    if (status->running)
        snprintf (status->detail, sizeof status->detail, status->paused ? "paused" : "running");
    else
    if (status->exit_code >= 0)
        snprintf (status->detail, sizeof status->detail, "%s (%d)", s ? s : "exited",
                  status->exit_code);
    else
        snprintf (status->detail, sizeof status->detail, "%s", s ? s : "unknown");
}

int
ah_dk_inspect (ah_driver_t *driver, const char *agent_id, ah_sandbox_status_t *status, char **err)
{
    dk_names_t n;
    docker_t *self = s_enter (driver, agent_id, "inspecting a sandbox", &n, err);
    if (!self)
        return -1;
    memset (status, 0, sizeof *status);
    status->exit_code = -1;
    char *what = ah_strf ("inspecting container %s", n.container);
    char *path = ah_strf ("/containers/%s/json", n.container);
    json_t *j = NULL;
    long st = ah_dk_get (self, what, path, true, &j, err);
    //  The home is its files (ah_dk_home_look): a volume removed with
    //  them left in their directory is no loss, and the next create or
    //  rebuild binds a new volume to them.
    dk_home_t home = { .volume = -1 };
    if (st == 404 || st == 200)
        ah_dk_home_look (self, what, agent_id, &home, NULL);
    if (st == 404) {
        //  No container: lifecycle has it made again (a start re-creates
        //  it), with the home as it is.
        status->home_gone = home.lost;
        snprintf (status->detail, sizeof status->detail, "container missing; %s",
                  home.volume == 200 ? (home.lost ? "home volume present, its directory gone"
                                                  : "home volume present")
                  : home.volume == 404 ? (home.lost ? "no home volume, no home directory"
                                                    : "no home volume, its directory kept")
                  : "home volume not known (the engine did not say)");
    }
    else
    if (st == 200) {
        s_status_from (j, status);
        //  The container may outlive its home's files: a directory removed
        //  behind the engine's back leaves the volume (and the container)
        //  standing over nothing.
        if (home.lost) {
            status->home_gone = true;
            size_t len = strlen (status->detail);
            snprintf (status->detail + len, sizeof status->detail - len, "; its home directory is gone");
        }
    }
    json_decref (j);
    free (path);
    free (what);
    return st > 0 ? 0 : -1;
}

//  Adds id to the NULL-terminated *ids once; ids that are not agent ids
//  (another product's labels) are left out.
static void
s_add_id (char ***ids, size_t *count, size_t *cap, const char *id)
{
    if (!ah_ident_ok (AH_IDENT_AGENT_ID, id))
        return;
    for (size_t i = 0; i < *count; i++)
        if (strcmp ((*ids) [i], id) == 0)
            return;
    if (*count + 2 > *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        char **grown = realloc (*ids, ncap * sizeof (char *));
        if (!grown)
            return;
        *ids = grown;
        *cap = ncap;
    }
    (*ids) [(*count)++] = strdup (id);
    (*ids) [*count] = NULL;
}

int
ah_dk_list (ah_driver_t *driver, char ***ids_p, char **err)
{
    docker_t *self = driver->impl;
    *ids_p = NULL;
    char *filters = ah_dk_filters (ah_dk_label_filter (self));
    if (!filters) {
        ah_dk_err (err, "listing sandboxes: out of memory");
        return -1;
    }
    char **ids = calloc (16, sizeof (char *));
    size_t count = 0, cap = ids ? 16 : 0;
    const char *paths [] = { "/containers/json?all=1&filters=", "/networks?filters=",
                             "/volumes?filters=" };
    const char *kinds [] = { "containers", "networks", "volumes" };
    int rc = 0;
    for (int k = 0; k < 3 && rc == 0; k++) {
        char *what = ah_strf ("listing the sandboxes' %s", kinds [k]);
        char *path = ah_strf ("%s%s", paths [k], filters);
        json_t *j = NULL;
        if (ah_dk_get (self, what, path, false, &j, err) == 200) {
            json_t *arr = k == 2 ? json_object_get (j, "Volumes") : j;
            size_t i;
            json_t *item;
            json_array_foreach (arr, i, item) {
                json_t *labels = json_object_get (item, "Labels");
                const char *id = json_string_value (json_object_get (labels, "agenthold.agent"));
                const char *prefix = json_string_value (json_object_get (labels, "agenthold.prefix"));
                if (id && prefix && strcmp (prefix, self->prefix) == 0)
                    s_add_id (&ids, &count, &cap, id);
            }
        }
        else
            rc = -1;
        json_decref (j);
        free (path);
        free (what);
    }
    free (filters);
    if (rc) {
        ah_driver_free_ids (&ids);
        return -1;
    }
    *ids_p = ids;
    return 0;
}
