/*  hostd/hostd.c: `agenthold hostd` (see hostd.h and docs/hostd.md).

    DESIGN. The main thread owns the ROUTER socket that servers dial, an
    inproc PULL that workers answer on, and a signalfd. Each call (one
    message from a server) runs in a worker thread of its own, because
    every driver call blocks (a stop waits for the container, a build
    takes minutes, a watch lasts as long as its caller). A worker owns its
    call_t's message and its own PUSH; it ends with exactly one REPLY,
    routed to the caller, which tells the main thread to join it. Events
    of a watch go the same way as DRIVER_EVENT. Once a second the main
    thread sends HOSTD_WORKING to the caller of each call in flight; a
    caller that has gone (ROUTER_MANDATORY: no route) has its call's stop
    flag set, which the driver polls (a watch ends, a build gives up).
    Only the main thread writes a call's stop flag; the worker reads it.

    Input from the socket is input from outside: every message is checked
    (frames, type, protocol, fields) and answered with an error, never
    asserted on. The driver refuses what is not an agent id or an image
    reference; image builds are named by image only and made from this
    host's own catalog, so a caller cannot make hostd read a file of its
    choosing.                                                         */
#include "hostd/hostd.h"
#include "actors/builder.h"
#include "catalog/catalog.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/str.h"
#include "drivers/docker.h"
#include "drivers/remote/wire.h"
#include "hostd/hostd_home.h"
#include "server/privsep.h"
#include "hostd/relay.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#define AREA            "hostd"
#define MAX_CALLS       64              //  calls in flight at once (watches included)
#define MAX_WATCHES     8

typedef struct hostd_s hostd_t;

//  TEST ONLY: AH_TEST_HOSTD_HOME_DELAY_MS=N makes each HOSTD_HOME
//  answer wait N ms (0..10000) before the home is read, as a slow host
//  would (tests/remote/netthread_e2e.py: the server's network thread
//  must not wait with it). Not a setting: nothing else reads it.
static void s_test_delay (void)
{
    const char *v = getenv ("AH_TEST_HOSTD_HOME_DELAY_MS");
    char *end = NULL;
    long ms = v && *v ? strtol (v, &end, 10) : 0;
    if (end && !*end && ms > 0 && ms <= 10000)
        zclock_sleep ((int) ms);
}

typedef struct {
    hostd_t      *hostd;
    char          peer [AH_MSG_MAX_TYPE + 1];
    int64_t       req;
    ah_msg_t     *msg;                  //  the worker's
    volatile int  stop;                 //  written by the main thread only
    bool          watch;
    pthread_t     thread;
    zsock_t      *push;                 //  the worker's
} call_t;

struct hostd_s {
    ah_config_t  *config;
    char          name [64];
    ah_driver_t  *driver;
    ah_catalog_t *catalog;
    zsock_t      *router;
    zsock_t      *pull;
    char          pull_endpoint [64];
    zactor_t     *auth;
    zcert_t      *cert;
    zlistx_t     *calls;                //  call_t *, main thread only
    char         *logged;               //  last refusal logged (logged once)
    int           lock_fd;
    ah_relay_t   *relay;                //  hostd.tunnel_relay: the tunnel's socket is ours
};

//  -------------------------------------------------------------------------
//  Workers

static void
s_stamp (hostd_t *self, ah_msg_t *reply)
{
    ah_msg_set_int (reply, "protocol", AH_HOSTD_PROTOCOL);
    ah_msg_set_str (reply, "version", AH_VERSION);
    ah_msg_set_str (reply, "host", self->name);
}

static ah_msg_t *
s_reply (hostd_t *self, int64_t req, bool ok, int status, const char *error)
{
    ah_msg_t *reply = ah_msg_new ("REPLY");
    ah_msg_set_int (reply, "req", req);
    ah_msg_set_bool (reply, "ok", ok);
    ah_msg_set_int (reply, "status", status);
    if (error)
        ah_msg_set_str (reply, "error", error);
    s_stamp (self, reply);
    return reply;
}

//  Called by the driver's watch in the worker's thread.
static void
s_on_change (void *arg, const char *agent_id, const char *action)
{
    call_t *c = arg;
    ah_msg_t *event = ah_msg_new ("DRIVER_EVENT");
    ah_msg_set_int (event, "req", c->req);
    if (agent_id)
        ah_msg_set_str (event, "agent_id", agent_id);
    ah_msg_set_str (event, "action", action);
    s_stamp (c->hostd, event);
    ah_msg_send (&event, c->push, c->peer);
}

//  Build progress, to the caller (HOSTD_PROGRESS), in the worker's thread.
static void
s_on_progress (void *arg, const char *text)
{
    call_t *c = arg;
    ah_msg_t *m = ah_msg_new ("HOSTD_PROGRESS");
    ah_msg_set_int (m, "req", c->req);
    ah_msg_set_str (m, "text", text);
    ah_msg_send (&m, c->push, c->peer);
}

//  The image, built from this host's catalog entry for it, the way the
//  server's builder would.
static int
s_build (hostd_t *self, call_t *c, char **err)
{
    const char *image = ah_msg_str (c->msg, "image");
    const ah_runtime_t *rt = NULL;
    for (size_t i = 0; self->catalog && image && i < ah_catalog_size (self->catalog); i++)
        if (streq (ah_catalog_at (self->catalog, i)->image, image))
            rt = ah_catalog_at (self->catalog, i);
    if (!rt) {
        *err = ah_strf ("image '%s' is not in the catalog of host %s (%s): hostd builds only "
                        "what its own catalog names", image ? image : "", self->name,
                        self->config->catalog_path);
        return -1;
    }
    return ah_builder_build (self->driver, rt, self->config->pip_index_url, s_on_progress, c,
                             &c->stop, err);
}

static void *
s_worker (void *arg)
{
    call_t *c = arg;
    hostd_t *self = c->hostd;
    ah_driver_t *d = self->driver;
    const ah_msg_t *m = c->msg;
    const char *type = ah_msg_type (m);
    const char *agent_id = ah_msg_str (m, "agent_id");
    char *err = NULL;
    int rc = -1;
    ah_msg_t *reply = s_reply (self, c->req, true, 200, NULL);
    if (streq (type, "DRIVER_CREATE") || streq (type, "DRIVER_REBUILD")) {
        ah_sandbox_spec_t spec;
        char **env = ah_hostd_get_spec (m, &spec);
        rc = streq (type, "DRIVER_CREATE") ? d->create (d, &spec, &err) : d->rebuild (d, &spec, &err);
        for (char **e = env; e && *e; e++)
            free (*e);
        free (env);
    }
    else
    if (streq (type, "DRIVER_START")) {
        ah_boot_t boot = { .agent_id = agent_id, .token = ah_msg_str (m, "token"),
                           .tunnel_port = (int) ah_msg_int (m, "tunnel_port", 0),
                           .briefing = ah_msg_str (m, "briefing") };
        rc = d->start (d, &boot, &err);
    }
    else
    if (streq (type, "DRIVER_STOP"))
        rc = d->stop (d, agent_id, &err);
    else
    if (streq (type, "DRIVER_FREEZE") || streq (type, "DRIVER_THAW")) {
        bool freeze = streq (type, "DRIVER_FREEZE");
        int (*fn) (ah_driver_t *, const char *, char **) = freeze ? d->freeze : d->thaw;
        rc = fn ? fn (d, agent_id, &err) : -1;
        if (!fn)
            err = ah_strf ("the %s driver cannot %s a sandbox", d->name, freeze ? "freeze" : "thaw");
    }
    else
    if (streq (type, "DRIVER_DESTROY"))
        rc = d->destroy (d, agent_id, &err);
    else
    if (streq (type, "DRIVER_REMOVE_CONTAINER")) {
        rc = d->remove_container ? d->remove_container (d, agent_id, &err) : -1;
        if (!d->remove_container)
            err = ah_strf ("the %s driver cannot remove a container alone", d->name);
    }
    else
    if (streq (type, "DRIVER_INSPECT")) {
        ah_sandbox_status_t st;
        rc = d->inspect (d, agent_id, &st, &err);
        if (rc == 0) {
            ah_msg_set_bool (reply, "exists", st.exists);
            ah_msg_set_bool (reply, "running", st.running);
            ah_msg_set_bool (reply, "paused", st.paused);
            ah_msg_set_int (reply, "exit_code", st.exit_code);
            ah_msg_set_str (reply, "detail", st.detail);
            ah_msg_set_bool (reply, "home_gone", st.home_gone);
        }
    }
    else
    if (streq (type, "DRIVER_LIST")) {
        char **ids = NULL;
        rc = d->list (d, &ids, &err);
        if (rc == 0) {
            size_t n = 0;
            for (char **id = ids; id && *id; id++)
                n += strlen (*id) + 1;
            char *joined = calloc (1, n + 1);
            for (char **id = ids; joined && id && *id; id++) {
                if (*joined)
                    strcat (joined, ",");
                strcat (joined, *id);
            }
            ah_msg_set_str (reply, "ids", joined ? joined : "");
            free (joined);
            ah_driver_free_ids (&ids);
        }
    }
    else
    if (streq (type, "DRIVER_IMAGE_EXISTS")) {
        bool exists = false;
        rc = d->image_exists (d, ah_msg_str (m, "image"), &exists, &err);
        ah_msg_set_bool (reply, "exists", exists);
    }
    else
    if (streq (type, "DRIVER_IMAGE_BUILD"))
        rc = s_build (self, c, &err);
    else
    if (streq (type, "DRIVER_ENGINE")) {
        ah_engine_facts_t facts;
        rc = ah_docker_engine_facts (d, &facts, &err);
        if (rc == 0)
            ah_hostd_put_facts (reply, &facts);
    }
    else
    if (streq (type, "HOSTD_TUNNEL")) {
        //  The socket every sandbox of this host mounts: does the server's
        //  tunnel answer behind it (directly, or through our relay)?
        char *detail = NULL;
        bool reachable = ah_relay_probe_socket (self->config->tunnel_socket, &detail) == 0;
        ah_msg_set_bool (reply, "reachable", reachable);
        ah_msg_set_str (reply, "detail", detail ? detail : "");
        ah_msg_set_str (reply, "relay", self->config->hostd_tunnel_relay
                                        ? self->config->hostd_tunnel_relay : "");
        free (detail);
        rc = 0;
    }
    else
    if (streq (type, "HOSTD_HOME")) {
        s_test_delay ();
        rc = ah_hostd_home (self->config, m, reply, &err);
    }
    else
    if (streq (type, "DRIVER_WATCH")) {
        rc = d->watch (d, s_on_change, c, &c->stop, &err);
        if (rc == 0 && !err)
            err = strdup ("the event stream was stopped");
        rc = -1;                        //  a watch always ends in an error reply
    }
    if (rc != 0) {
        ah_msg_set_bool (reply, "ok", false);
        ah_msg_set_int (reply, "status", 500);
        ah_msg_set_str (reply, "error", err ? err : "the driver failed without saying why");
    }
    free (err);
    ah_msg_send (&reply, c->push, c->peer);
    return NULL;
}

//  -------------------------------------------------------------------------
//  Main thread

static const char *s_types [] = {
    "DRIVER_CREATE", "DRIVER_START", "DRIVER_STOP", "DRIVER_FREEZE", "DRIVER_THAW", "DRIVER_REBUILD",
    "DRIVER_DESTROY",
    "DRIVER_REMOVE_CONTAINER", "DRIVER_INSPECT", "DRIVER_LIST", "DRIVER_IMAGE_EXISTS", "DRIVER_IMAGE_BUILD",
    "DRIVER_WATCH", "DRIVER_ENGINE", "HOSTD_TUNNEL", "HOSTD_HOME", NULL
};

static void
s_answer (hostd_t *self, const char *peer, ah_msg_t **reply)
{
    if (ah_msg_send (reply, self->router, peer) != 0)
        ah_debug (AREA, "%s has gone; its answer is dropped", peer);
}

static void
s_call_free (call_t **c_p)
{
    call_t *c = *c_p;
    ah_msg_destroy (&c->msg);
    zsock_destroy (&c->push);
    free (c);
    *c_p = NULL;
}

static void
s_on_request (hostd_t *self)
{
    ah_msg_fault_t fault;
    ah_msg_t *m = ah_msg_recv_fault (self->router, true, &fault);
    if (!m) {
        ah_warn (AREA, "a malformed message from %s: %s", *fault.route ? fault.route : "a peer",
                 fault.error ? fault.error : "?");
        if (*fault.route) {
            ah_msg_t *r = s_reply (self, fault.req, false, 400, fault.error);
            s_answer (self, fault.route, &r);
        }
        ah_msg_fault_clear (&fault);
        return;
    }
    ah_msg_fault_clear (&fault);
    char peer [AH_MSG_MAX_TYPE + 1];
    snprintf (peer, sizeof peer, "%s", ah_msg_peer (m));
    int64_t req = ah_msg_int (m, "req", 0);
    int64_t protocol = ah_msg_int (m, "protocol", 0);
    const char *type = ah_msg_type (m);
    if (protocol != AH_HOSTD_PROTOCOL) {
        const char *version = ah_msg_str (m, "version");
        char *why = ah_strf ("a server of agenthold %s (protocol %lld) called this hostd, which "
                             "runs agenthold %s (protocol %d): install agenthold %s on host %s, or "
                             "agenthold %s on the server, so that both speak the same protocol",
                             version && strlen (version) < 32 ? version : "of an unknown version",
                             (long long) protocol, AH_VERSION, AH_HOSTD_PROTOCOL,
                             version && strlen (version) < 32 ? version : "of the server's version",
                             self->name, AH_VERSION);
        if (!self->logged || strcmp (self->logged, why)) {
            ah_warn (AREA, "%s", why);
            free (self->logged);
            self->logged = strdup (why);
        }
        ah_msg_t *r = s_reply (self, req, false, AH_HOSTD_STATUS_VERSION, why);
        free (why);
        s_answer (self, peer, &r);
        ah_msg_destroy (&m);
        return;
    }
    if (streq (type, "HOSTD_HELLO")) {
        ah_msg_t *r = s_reply (self, req, true, 200, NULL);
        ah_msg_set_str (r, "driver", self->driver->name);
        s_answer (self, peer, &r);
        ah_msg_destroy (&m);
        return;
    }
    bool known = false;
    for (const char **t = s_types; *t && !known; t++)
        known = streq (*t, type);
    if (!known) {
        char *why = ah_strf ("unknown message type '%s'", type);
        ah_warn (AREA, "%s from %s", why, peer);
        ah_msg_t *r = s_reply (self, req, false, 400, why);
        free (why);
        s_answer (self, peer, &r);
        ah_msg_destroy (&m);
        return;
    }
    bool watch = streq (type, "DRIVER_WATCH");
    size_t watches = 0;
    for (call_t *c = zlistx_first (self->calls); c; c = zlistx_next (self->calls))
        watches += c->watch;
    if (zlistx_size (self->calls) >= MAX_CALLS || (watch && watches >= MAX_WATCHES)) {
        ah_msg_t *r = s_reply (self, req, false, 503, "the host agent is busy: too many calls "
                               "in flight; try again");
        s_answer (self, peer, &r);
        ah_msg_destroy (&m);
        return;
    }
    call_t *c = calloc (1, sizeof *c);
    if (!c) {
        ah_msg_destroy (&m);
        return;
    }
    *c = (call_t) { .hostd = self, .req = req, .msg = m, .watch = watch };
    snprintf (c->peer, sizeof c->peer, "%s", peer);
    c->push = zsock_new_push (self->pull_endpoint);
    if (!c->push || pthread_create (&c->thread, NULL, s_worker, c) != 0) {
        ah_msg_t *r = s_reply (self, req, false, 500, "the host agent cannot start a worker");
        s_answer (self, peer, &r);
        s_call_free (&c);
        return;
    }
    zlistx_add_end (self->calls, c);
}

//  A worker's REPLY or event: routed to its caller; a REPLY ends its call.
static void
s_on_worker (hostd_t *self)
{
    ah_msg_t *m = ah_msg_recv (self->pull, true, NULL);
    if (!m)
        return;
    char peer [AH_MSG_MAX_TYPE + 1];
    snprintf (peer, sizeof peer, "%s", ah_msg_peer (m));
    ah_msg_set_peer (m, "");
    bool done = streq (ah_msg_type (m), "REPLY");
    int64_t req = ah_msg_int (m, "req", 0);
    s_answer (self, peer, &m);
    if (!done)
        return;
    for (call_t *c = zlistx_first (self->calls); c; c = zlistx_next (self->calls))
        if (c->req == req && streq (c->peer, peer)) {
            pthread_join (c->thread, NULL);
            zlistx_delete (self->calls, zlistx_cursor (self->calls));
            s_call_free (&c);
            break;
        }
}

//  Each call's caller hears from us once a second; one that has gone
//  has its call stopped.
static void
s_heartbeat (hostd_t *self)
{
    for (call_t *c = zlistx_first (self->calls); c; c = zlistx_next (self->calls)) {
        ah_msg_t *beat = ah_msg_new ("HOSTD_WORKING");
        ah_msg_set_int (beat, "req", c->req);
        if (ah_msg_send (&beat, self->router, c->peer) != 0 && errno == EHOSTUNREACH && !c->stop) {
            ah_debug (AREA, "%s went away: its %s call is stopped", c->peer, ah_msg_type (c->msg));
            c->stop = 1;
        }
    }
}

//  -------------------------------------------------------------------------
//  Start-up

static int
s_mkdir_private (const char *path, char **err)
{
    if (mkdir (path, 0700) != 0 && errno != EEXIST) {
        *err = ah_strf ("cannot make %s: %s", path, strerror (errno));
        return -1;
    }
    struct stat st;
    if (lstat (path, &st) != 0 || !S_ISDIR (st.st_mode)) {
        *err = ah_strf ("%s is not a directory", path);
        return -1;
    }
    if ((st.st_mode & 077) && chmod (path, 0700) != 0) {
        *err = ah_strf ("cannot make %s private (mode 0700): %s", path, strerror (errno));
        return -1;
    }
    return 0;
}

static int
s_server_user (const char *user, uid_t *uid, gid_t *gid, char **err)
{
    *uid = geteuid ();
    *gid = getegid ();
    if (!user)
        return 0;
    struct passwd *pw = getpwnam (user);
    char *end = NULL;
    long n = strtol (user, &end, 10);
    if (!pw && end && !*end && n >= 0)
        pw = getpwuid ((uid_t) n);
    if (!pw) {
        *err = ah_strf ("hostd.server_user '%s': no such user", user);
        return -1;
    }
    *uid = pw->pw_uid;
    *gid = pw->pw_gid;
    return 0;
}

//  ipc://: the socket's directory 0700 and the socket 0600 (umask 077),
//  both the server user's, so only that user (and root) can open it.
static int
s_bind_ipc (hostd_t *self, const char *path, char **err)
{
    uid_t uid;
    gid_t gid;
    if (s_server_user (self->config->hostd_server_user, &uid, &gid, err))
        return -1;
    char *copy = strdup (path);
    char *dir = copy ? dirname (copy) : NULL;
    int rc = -1;
    if (!dir || s_mkdir_private (dir, err))
        goto out;
    if (chown (dir, uid, gid) != 0) {
        *err = ah_strf ("cannot give %s to hostd.server_user: %s", dir, strerror (errno));
        goto out;
    }
    struct stat st;
    if (lstat (path, &st) == 0 && S_ISSOCK (st.st_mode)) {
        //  A hostd of another data directory may listen there.
        if (ah_privsep_socket_answers (path)) {
            *err = ah_strf ("another agenthold hostd listens on ipc://%s: stop it, or set another "
                            "hostd.endpoint", path);
            goto out;
        }
        unlink (path);                  //  a previous hostd's, gone
    }
    if (zsock_bind (self->router, "ipc://%s", path) != 0) {
        *err = ah_strf ("cannot listen on ipc://%s: %s", path, zmq_strerror (errno));
        goto out;
    }
    if (chmod (path, 0600) != 0 || chown (path, uid, gid) != 0) {
        *err = ah_strf ("cannot make %s the server user's alone: %s", path, strerror (errno));
        goto out;
    }
    rc = 0;
out:
    free (copy);
    return rc;
}

//  tcp://: CURVE with this host's key pair (made at first start) and ZAP
//  letting in only the public keys in <data_dir>/curve/clients/.
static int
s_bind_tcp (hostd_t *self, const char *endpoint, char **err)
{
    char *dir = ah_strf ("%s/curve", self->config->data_dir);
    char *clients = ah_strf ("%s/curve/clients", self->config->data_dir);
    char *path = ah_strf ("%s/curve/hostd.cert", self->config->data_dir);
    int rc = -1;
    if (!dir || !clients || !path || s_mkdir_private (dir, err) || s_mkdir_private (clients, err))
        goto out;
    self->cert = zcert_load (path);
    if (!self->cert) {
        self->cert = zcert_new ();
        if (!self->cert || zcert_save (self->cert, path) != 0) {
            *err = ah_strf ("cannot write this host's CURVE key pair to %s", path);
            goto out;
        }
        ah_info (AREA, "made this host's CURVE key pair: %s", path);
    }
    self->auth = zactor_new (zauth, NULL);
    if (!self->auth || zstr_sendx (self->auth, "CURVE", clients, NULL) != 0
    ||  zsock_wait (self->auth) != 0) {
        *err = strdup ("cannot start the CURVE authenticator");
        goto out;
    }
    zcert_apply (self->cert, self->router);
    zsock_set_curve_server (self->router, 1);
    zsock_set_zap_domain (self->router, "agenthold");
    if (zsock_bind (self->router, "%s", endpoint) < 0) {
        *err = ah_strf ("cannot listen on %s: %s", endpoint, zmq_strerror (errno));
        goto out;
    }
    ah_info (AREA, "CURVE public key of this host (sandbox.remote.server_key): %s",
             zcert_public_txt (self->cert));
    ah_info (AREA, "servers allowed in: the public keys in %s", clients);
    rc = 0;
out:
    free (dir);
    free (clients);
    free (path);
    return rc;
}

//  A hostd that is going (its serve was killed: PDEATHSIG) has closed its
//  socket but may hold the lock a while longer, joining its workers: one
//  started meanwhile waits for it rather than failing at once.
#define LOCK_WAIT_MS 15000

static int
s_flock_wait (int fd, const char *dir)
{
    int64_t until = zclock_mono () + LOCK_WAIT_MS;
    bool said = false;
    while (flock (fd, LOCK_EX | LOCK_NB) != 0) {
        if ((errno != EWOULDBLOCK && errno != EINTR) || zclock_mono () >= until)
            return -1;
        if (!said)
            ah_info (AREA, "another agenthold hostd holds %s/hostd.lock: waiting up to %d s for it "
                     "to finish", dir, LOCK_WAIT_MS / 1000);
        said = true;
        zclock_sleep (100);
    }
    return 0;
}

static int
s_lock (hostd_t *self, char **err)
{
    char *path = ah_strf ("%s/hostd.lock", self->config->data_dir);
    self->lock_fd = path ? open (path, O_RDWR | O_CREAT | O_CLOEXEC, 0600) : -1;
    int rc = -1;
    if (self->lock_fd < 0)
        *err = ah_strf ("cannot open %s: %s", path ? path : "the lock", strerror (errno));
    else
    if (s_flock_wait (self->lock_fd, self->config->data_dir) != 0)
        *err = ah_strf ("another agenthold hostd is running on %s (it held the lock for %d s)",
                        self->config->data_dir, LOCK_WAIT_MS / 1000);
    else {
        char pid [32];
        int len = snprintf (pid, sizeof pid, "%d\n", (int) getpid ());
        if (ftruncate (self->lock_fd, 0) != 0 || pwrite (self->lock_fd, pid, len, 0) != len)
            ah_warn (AREA, "cannot write our pid into %s", path);
        rc = 0;
    }
    free (path);
    return rc;
}

static int
s_prepare (hostd_t *self, char **err)
{
    ah_config_t *config = self->config;
    //  The tunnel's socket is the server's (its default is under the
    //  server's data directory, which the same configuration names);
    //  the driver's database and the keys are hostd's own.
    if (!config->tunnel_socket && !(config->tunnel_socket = ah_config_tunnel_socket (config))) {
        *err = strdup ("out of memory");
        return -1;
    }
    free (config->data_dir);
    config->data_dir = strdup (config->hostd_data_dir);
    if (!config->data_dir || s_mkdir_private (config->data_dir, err) || s_lock (self, err))
        return -1;
    //  The server is elsewhere: sandboxes mount our socket, and we carry
    //  each of their connections to the server's tunnel.
    if (config->hostd_tunnel_relay) {
        free (config->tunnel_socket);
        config->tunnel_socket = ah_strf ("%s/run/tunnel.sock", config->data_dir);
        if (!config->tunnel_socket
        ||  !(self->relay = ah_relay_start (config->tunnel_socket, config->hostd_tunnel_relay,
                                            config->hostd_tunnel_ca, err)))
            return -1;
    }
    if (config->hostd_name)
        snprintf (self->name, sizeof self->name, "%s", config->hostd_name);
    else {
        if (gethostname (self->name, sizeof self->name - 1) != 0 || !ah_hostd_name_ok (self->name))
            snprintf (self->name, sizeof self->name, "localhost");
    }
    self->driver = ah_docker_driver_new (config, err);
    if (!self->driver)
        return -1;
    char **ids = NULL;
    char *why = NULL;
    if (self->driver->list (self->driver, &ids, &why) == 0) {
        size_t n = 0;
        while (ids && ids [n])
            n++;
        ah_info (AREA, "the Docker Engine answers: %zu sandbox(es) found", n);
    }
    else
        ah_warn (AREA, "the Docker Engine does not answer yet (%s); each call will tell",
                 why ? why : "?");
    ah_driver_free_ids (&ids);
    free (why);
    why = NULL;
    //  Whether sandboxes with a network reach this host's own services:
    //  the probe runs here, on the Docker host, in the background; its
    //  outcome is logged and travels with DRIVER_ENGINE (doctor).
    ah_docker_isolation_check_start (self->driver);
    self->catalog = ah_catalog_load (config->catalog_path, &why);
    if (!self->catalog)
        ah_warn (AREA, "no catalog (%s): image builds are refused", why ? why : "?");
    free (why);

    self->calls = zlistx_new ();
    snprintf (self->pull_endpoint, sizeof self->pull_endpoint, "inproc://hostd-%p", (void *) self);
    self->pull = zsock_new_pull (self->pull_endpoint);
    self->router = zsock_new (ZMQ_ROUTER);
    if (!self->calls || !self->pull || !self->router) {
        *err = strdup ("cannot make hostd's sockets");
        return -1;
    }
    zsock_set_router_mandatory (self->router, 1);
    zsock_set_linger (self->router, 0);
    const char *endpoint = config->hostd_endpoint;
    if (!strncmp (endpoint, "ipc://", 6))
        return s_bind_ipc (self, endpoint + 6, err);
    return s_bind_tcp (self, endpoint, err);
}

static void
s_destroy (hostd_t *self)
{
    call_t *c;
    for (c = self->calls ? zlistx_first (self->calls) : NULL; c; c = zlistx_next (self->calls))
        c->stop = 1;
    while (self->calls && (c = zlistx_first (self->calls))) {
        pthread_join (c->thread, NULL);
        zlistx_delete (self->calls, zlistx_cursor (self->calls));
        s_call_free (&c);
    }
    zlistx_destroy (&self->calls);
    zsock_destroy (&self->router);
    zsock_destroy (&self->pull);
    zactor_destroy (&self->auth);
    zcert_destroy (&self->cert);
    if (self->driver)
        self->driver->destroy_driver (&self->driver);
    ah_catalog_destroy (&self->catalog);
    ah_relay_stop (&self->relay);
    free (self->logged);
    if (self->lock_fd >= 0)
        close (self->lock_fd);
}

int
ah_hostd_run (ah_config_t *config)
{
    ah_log_set_process ("hostd");
    sigset_t mask;
    sigemptyset (&mask);
    sigaddset (&mask, SIGINT);
    sigaddset (&mask, SIGTERM);
    pthread_sigmask (SIG_BLOCK, &mask, NULL);
    zsys_handler_set (NULL);
    signal (SIGPIPE, SIG_IGN);
    umask (077);
    zsys_init ();

    hostd_t self = { .config = config, .lock_fd = -1 };
    int status = 1;
    char *err = NULL;
    int signal_fd = signalfd (-1, &mask, SFD_CLOEXEC);
    if (signal_fd < 0 || s_prepare (&self, &err)) {
        ah_error (AREA, "%s", err ? err : "cannot start");
        goto out;
    }
    char line [512];
    snprintf (line, sizeof line, "agenthold hostd %s (protocol %d) serving: host %s, endpoint %s, "
              "docker %s, data %s", AH_VERSION, AH_HOSTD_PROTOCOL, self.name,
              config->hostd_endpoint, config->docker_socket, config->data_dir);
    ah_info (AREA, "%s", line);
    printf ("%s\n", line);
    fflush (stdout);

    int64_t next_beat = zclock_mono () + AH_HOSTD_HEARTBEAT_MS;
    while (true) {
        zmq_pollitem_t items [] = {
            { .fd = signal_fd, .events = ZMQ_POLLIN },
            { .socket = zsock_resolve (self.router), .events = ZMQ_POLLIN },
            { .socket = zsock_resolve (self.pull), .events = ZMQ_POLLIN },
        };
        int64_t wait = next_beat - zclock_mono ();
        if (zmq_poll (items, 3, wait > 0 ? wait : 0) < 0 && errno != EINTR) {
            ah_error (AREA, "poll failed: %s", zmq_strerror (errno));
            break;
        }
        if (items [0].revents & ZMQ_POLLIN) {
            struct signalfd_siginfo info;
            if (read (signal_fd, &info, sizeof info) == sizeof info) {
                ah_info (AREA, "%s: shutting down", strsignal ((int) info.ssi_signo));
                status = 0;
                break;
            }
        }
        if (items [1].revents & ZMQ_POLLIN)
            s_on_request (&self);
        if (items [2].revents & ZMQ_POLLIN)
            s_on_worker (&self);
        if (zclock_mono () >= next_beat) {
            s_heartbeat (&self);
            next_beat = zclock_mono () + AH_HOSTD_HEARTBEAT_MS;
        }
    }
out:
    free (err);
    s_destroy (&self);
    if (signal_fd >= 0)
        close (signal_fd);
    return status;
}
