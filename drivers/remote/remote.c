/*  drivers/remote/remote.c: the remote driver (drivers/remote.h): every
    entry point of drivers/driver.h as one call to the host agent.

    DESIGN. Called from lifecycle's, the builder's and the reconciler's
    worker threads, several at once. A call owns its DEALER socket for
    its whole length, so no socket is used by two threads at once; a call
    that ends with its REPLY puts its socket back in a small idle pool for
    the next call (of any thread: the mutex hand-over is the memory
    barrier ZeroMQ asks for when a socket changes threads), so the link
    to hostd is connected once, not once per call. A call that ends any
    other way (silence, a stop, an error of the socket) closes its
    socket: hostd then sees its caller gone and stops the work. A watch
    always has a socket of its own (it ends by a stop). The shared state
    (the host's name, version, protocol and state as the last answer or
    silence left them, the sentence last logged, the idle sockets) lives
    in remote_t behind one mutex. The configuration and the key pair are set once by
    ah_remote_driver_new and never written again.                     */
#include "drivers/remote.h"
#include "drivers/remote/wire.h"
#include "common/ident.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/str.h"

#include <czmq.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define AREA        "remote"
#define IDLE_MAX    8                   //  idle sockets kept for the next calls

typedef struct {
    const ah_config_t *config;          //  borrowed, immutable
    char    *endpoint;
    bool     curve;
    zcert_t *cert;                      //  our key pair (tcp:// only)
    int      timeout_ms;

    pthread_mutex_t lock;               //  guards everything below
    int64_t  next_req;
    ah_host_info_t info;
    char    *logged;                    //  the last trouble logged (logged once)
    int64_t  up_at;                     //  when an answer last came (zclock_mono)
    zsock_t *idle [IDLE_MAX];           //  connected DEALERs no call owns
    size_t   n_idle;
} remote_t;

char *
ah_remote_cert_path (const char *data_dir)
{
    return ah_strf ("%s/curve/server.cert", data_dir);
}

//  The server's key pair: read, or made at first start (the secret file
//  0600 in a 0700 directory).
static zcert_t *
s_load_cert (const char *data_dir, char **err)
{
    char *path = ah_remote_cert_path (data_dir);
    char *dir = ah_strf ("%s/curve", data_dir);
    zcert_t *cert = NULL;
    if (!path || !dir)
        goto out;
    cert = zcert_load (path);
    if (cert)
        goto out;
    if (mkdir (data_dir, 0700) != 0 && errno != EEXIST) {
        *err = ah_strf ("cannot make %s: %s", data_dir, strerror (errno));
        goto out;
    }
    if (mkdir (dir, 0700) != 0 && errno != EEXIST) {
        *err = ah_strf ("cannot make %s: %s", dir, strerror (errno));
        goto out;
    }
    cert = zcert_new ();
    mode_t old = umask (077);
    int rc = cert ? zcert_save (cert, path) : -1;
    umask (old);
    if (rc != 0) {
        *err = ah_strf ("cannot write the server's CURVE key pair to %s", path);
        zcert_destroy (&cert);
        goto out;
    }
    ah_info (AREA, "made this server's CURVE key pair: %s (public: %s); give the public file "
             "to each host agent (docs/hostd.md)", path, zcert_public_txt (cert));
out:
    free (path);
    free (dir);
    return cert;
}

//  What the host said of itself, or that it said nothing. Logged when
//  the sentence changes (a host that stays away is logged once).
static void
s_note (remote_t *self, const char *state, const char *error, const ah_msg_t *reply)
{
    pthread_mutex_lock (&self->lock);
    ah_host_info_t *info = &self->info;
    if (reply) {
        const char *host = ah_msg_str (reply, "host");
        if (ah_hostd_name_ok (host))
            snprintf (info->name, sizeof info->name, "%s", host);
        const char *version = ah_msg_str (reply, "version");
        snprintf (info->version, sizeof info->version, "%s", version ? version : "");
        info->protocol = ah_msg_int (reply, "protocol", 0);
    }
    if (!error)
        self->up_at = zclock_mono ();
    bool changed = strcmp (info->state, state) != 0;
    snprintf (info->state, sizeof info->state, "%s", state);
    snprintf (info->error, sizeof info->error, "%s", error ? error : "");
    if (error && (!self->logged || strcmp (self->logged, error))) {
        ah_warn (AREA, "%s", error);
        free (self->logged);
        self->logged = strdup (error);
    }
    if (!error && changed) {
        ah_info (AREA, "host %s (%s) answers: agenthold hostd %s, protocol %lld", info->name,
                 self->endpoint, info->version, (long long) info->protocol);
        free (self->logged);
        self->logged = NULL;
    }
    pthread_mutex_unlock (&self->lock);
}

static char *
s_host_name (remote_t *self)
{
    pthread_mutex_lock (&self->lock);
    char *name = strdup (self->info.name);
    pthread_mutex_unlock (&self->lock);
    return name;
}

//  A connected DEALER for one call: an idle one, or a new one.
static zsock_t *
s_connect (remote_t *self, bool fresh)
{
    if (!fresh) {
        zsock_t *idle = NULL;
        pthread_mutex_lock (&self->lock);
        if (self->n_idle > 0)
            idle = self->idle [--self->n_idle];
        pthread_mutex_unlock (&self->lock);
        if (idle)
            return idle;
    }
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    if (!sock)
        return NULL;
    zsock_set_linger (sock, 0);
    char id [24];
    uint64_t r = ((uint64_t) zclock_usecs () << 20) ^ (uint64_t) random () ^ (uint64_t) pthread_self ();
    snprintf (id, sizeof id, "s%016llx", (unsigned long long) r);
    zsock_set_identity (sock, id);
    if (self->curve) {
        zcert_apply (self->cert, sock);
        zsock_set_curve_serverkey (sock, self->config->remote_server_key);
    }
    if (zsock_connect (sock, "%s", self->endpoint) != 0) {
        zsock_destroy (&sock);
        return NULL;
    }
    return sock;
}

//  The host by its name, as a tenant may read it (seed 004: an agent's
//  error leaves out the service's address): "host NAME" once it answered
//  with a name, else "the host agent". The endpoint is for the logs, the
//  hosts view and `agenthold hosts` only.
static char *
s_host_said (remote_t *self)
{
    char *host = s_host_name (self);
    char *said = host && strcmp (host, self->endpoint) ? ah_strf ("host %s", host)
                                                       : strdup ("the host agent");
    free (host);
    return said;
}

//  The host went silent: the sentence says what to check. *note: the
//  same with the endpoint, for the log and the hosts view.
static char *
s_silent (remote_t *self, char **note)
{
    char *who = s_host_said (self);
    const char *hint = self->curve
        ? ", or the CURVE keys do not match (sandbox.remote.server_key must be hostd's "
          "public key, and hostd must hold this server's public key in its curve/clients/)"
        : "";
    char *why = ah_strf ("%s does not answer (nothing for %d ms): hostd is not running "
                         "there%s; start it with `agenthold hostd` (docs/hostd.md)",
                         who ? who : "?", self->timeout_ms, hint);
    *note = ah_strf ("%s (%s) does not answer (nothing for %d ms): hostd is not running "
                     "there%s; start it with `agenthold hostd` (docs/hostd.md)",
                     who ? who : "?", self->endpoint, self->timeout_ms, hint);
    free (who);
    return why;
}

//  The call ended with its REPLY: the socket serves the next one.
static void
s_release (remote_t *self, zsock_t **sock_p)
{
    pthread_mutex_lock (&self->lock);
    if (*sock_p && self->n_idle < IDLE_MAX) {
        self->idle [self->n_idle++] = *sock_p;
        *sock_p = NULL;
    }
    pthread_mutex_unlock (&self->lock);
    zsock_destroy (sock_p);
}

typedef void (s_on_event_fn) (void *arg, const ah_msg_t *event);

//  One call: send req (taken over), wait for its REPLY. DRIVER_EVENTs go
//  to on_event; heartbeats keep the call alive; silence for timeout_ms
//  (0: sandbox.remote.timeout) ends it; *stop (may be NULL) ends it (1).
//  0 with *reply_p (the caller's), or -1 with *err.
static int
s_call (remote_t *self, ah_msg_t **req_p, ah_msg_t **reply_p, s_on_event_fn *on_event,
        void *arg, volatile int *stop, int timeout_ms, char **err)
{
    if (timeout_ms <= 0 || timeout_ms > self->timeout_ms)
        timeout_ms = self->timeout_ms;
    ah_msg_t *req = *req_p;
    *req_p = NULL;
    if (reply_p)
        *reply_p = NULL;
    pthread_mutex_lock (&self->lock);
    int64_t id = ++self->next_req;
    pthread_mutex_unlock (&self->lock);
    ah_msg_set_int (req, "req", id);
    ah_msg_set_int (req, "protocol", AH_HOSTD_PROTOCOL);
    ah_msg_set_str (req, "version", AH_VERSION);
    char type [AH_MSG_MAX_TYPE + 1];
    snprintf (type, sizeof type, "%s", ah_msg_type (req));

    //  A watch ends by a stop: its own socket, closed at the end.
    zsock_t *sock = s_connect (self, streq (type, "DRIVER_WATCH"));
    if (!sock || ah_msg_send (&req, sock, NULL) != 0) {
        ah_msg_destroy (&req);
        zsock_destroy (&sock);
        int e = errno;
        ah_warn (AREA, "cannot open a socket to the host agent at %s: %s", self->endpoint,
                 zmq_strerror (e));
        *err = ah_strf ("cannot open a socket to the host agent: %s", zmq_strerror (e));
        return -1;
    }
    int rc = -1;
    bool answered = false;              //  the REPLY came: the socket is clean
    int64_t heard = zclock_mono ();
    int64_t started = heard;
    while (true) {
        if (stop && *stop) {
            rc = 1;
            break;
        }
        zmq_pollitem_t item = { .socket = zsock_resolve (sock), .events = ZMQ_POLLIN };
        int n = zmq_poll (&item, 1, 250);
        if (n < 0 && errno != EINTR) {
            *err = ah_strf ("%s to the host agent: poll failed: %s", type, zmq_strerror (errno));
            break;
        }
        if (n <= 0) {
            if (zclock_mono () - heard >= timeout_ms) {
                char *note = NULL;
                *err = s_silent (self, &note);
                //  A call sent while the host was away, timing out after
                //  another call heard it again, says nothing of the host
                //  now: no "unreachable" flap, no second warning.
                pthread_mutex_lock (&self->lock);
                bool stale = self->up_at > started;
                pthread_mutex_unlock (&self->lock);
                if (!stale)
                    s_note (self, "unreachable", note ? note : *err, NULL);
                free (note);
                break;
            }
            continue;
        }
        char *why = NULL;
        ah_msg_t *m = ah_msg_recv (sock, false, &why);
        heard = zclock_mono ();
        if (!m) {
            ah_warn (AREA, "a malformed message from the host agent: %s", why ? why : "?");
            free (why);
            continue;
        }
        const char *t = ah_msg_type (m);
        if (ah_msg_int (m, "req", -1) != id)
            ;                                   //  not ours (cannot happen on our own socket)
        else
        if ((streq (t, "DRIVER_EVENT") || streq (t, "HOSTD_PROGRESS")) && on_event)
            on_event (arg, m);
        else
        if (streq (t, "REPLY")) {
            answered = true;
            int64_t protocol = ah_msg_int (m, "protocol", 0);
            if (protocol != AH_HOSTD_PROTOCOL
            ||  ah_msg_int (m, "status", 0) == AH_HOSTD_STATUS_VERSION) {
                const char *host = ah_msg_str (m, "host");
                char *known = s_host_name (self);
                bool named = known && strcmp (known, self->endpoint);
                *err = ah_hostd_mismatch (ah_hostd_name_ok (host) ? host : named ? known : NULL,
                                          ah_msg_str (m, "version"), protocol);
                free (known);
                s_note (self, "refused", *err, m);
                ah_msg_destroy (&m);
                break;
            }
            s_note (self, "up", NULL, m);
            if (!ah_msg_bool (m, "ok", false)) {
                const char *e = ah_msg_str (m, "error");
                *err = strdup (e ? e : "the host agent failed without saying why");
                ah_msg_destroy (&m);
                break;
            }
            if (reply_p)
                *reply_p = m;
            else
                ah_msg_destroy (&m);
            rc = 0;
            break;
        }
        ah_msg_destroy (&m);
    }
    if (answered && !streq (type, "DRIVER_WATCH"))
        s_release (self, &sock);
    zsock_destroy (&sock);
    return rc;
}

static int
s_simple (ah_driver_t *driver, ah_msg_t *req, ah_msg_t **reply, char **err)
{
    return s_call (driver->impl, &req, reply, NULL, NULL, NULL, 0, err) == 0 ? 0 : -1;
}

static int
s_create (ah_driver_t *driver, const ah_sandbox_spec_t *spec, char **err)
{
    ah_msg_t *req = ah_msg_new ("DRIVER_CREATE");
    if (ah_hostd_put_spec (req, spec)) {
        ah_msg_destroy (&req);
        *err = strdup ("a runtime's environment entry holds a newline: refused");
        return -1;
    }
    return s_simple (driver, req, NULL, err);
}

static int
s_rebuild (ah_driver_t *driver, const ah_sandbox_spec_t *spec, char **err)
{
    ah_msg_t *req = ah_msg_new ("DRIVER_REBUILD");
    if (ah_hostd_put_spec (req, spec)) {
        ah_msg_destroy (&req);
        *err = strdup ("a runtime's environment entry holds a newline: refused");
        return -1;
    }
    return s_simple (driver, req, NULL, err);
}

static int
s_start (ah_driver_t *driver, const ah_boot_t *boot, char **err)
{
    ah_msg_t *req = ah_msg_new ("DRIVER_START");
    ah_msg_set_str (req, "agent_id", boot->agent_id);
    ah_msg_set_str (req, "token", boot->token);
    ah_msg_set_int (req, "tunnel_port", boot->tunnel_port);
    if (boot->briefing)
        ah_msg_set_str (req, "briefing", boot->briefing);
    return s_simple (driver, req, NULL, err);
}

static int
s_by_id (ah_driver_t *driver, const char *type, const char *agent_id, char **err)
{
    ah_msg_t *req = ah_msg_new (type);
    ah_msg_set_str (req, "agent_id", agent_id);
    return s_simple (driver, req, NULL, err);
}

static int
s_stop (ah_driver_t *driver, const char *agent_id, char **err)
{
    return s_by_id (driver, "DRIVER_STOP", agent_id, err);
}

static int
s_freeze (ah_driver_t *driver, const char *agent_id, char **err)
{
    return s_by_id (driver, "DRIVER_FREEZE", agent_id, err);
}

static int
s_thaw (ah_driver_t *driver, const char *agent_id, char **err)
{
    return s_by_id (driver, "DRIVER_THAW", agent_id, err);
}

static int
s_destroy (ah_driver_t *driver, const char *agent_id, char **err)
{
    return s_by_id (driver, "DRIVER_DESTROY", agent_id, err);
}

//  sandbox.container_ttl: the container only, its home kept.
static int
s_remove_container (ah_driver_t *driver, const char *agent_id, char **err)
{
    return s_by_id (driver, "DRIVER_REMOVE_CONTAINER", agent_id, err);
}

static int
s_inspect (ah_driver_t *driver, const char *agent_id, ah_sandbox_status_t *status, char **err)
{
    ah_msg_t *req = ah_msg_new ("DRIVER_INSPECT");
    ah_msg_set_str (req, "agent_id", agent_id);
    ah_msg_t *reply = NULL;
    if (s_simple (driver, req, &reply, err))
        return -1;
    memset (status, 0, sizeof *status);
    status->exists = ah_msg_bool (reply, "exists", false);
    status->running = ah_msg_bool (reply, "running", false);
    status->paused = status->running && ah_msg_bool (reply, "paused", false);
    status->exit_code = (int) ah_msg_int (reply, "exit_code", -1);
    status->home_gone = ah_msg_bool (reply, "home_gone", false);
    const char *detail = ah_msg_str (reply, "detail");
    snprintf (status->detail, sizeof status->detail, "%s", detail ? detail : "");
    ah_msg_destroy (&reply);
    return 0;
}

//  ids: agent ids separated by commas; each one checked.
static int
s_list (ah_driver_t *driver, char ***ids_p, char **err)
{
    ah_msg_t *reply = NULL;
    if (s_simple (driver, ah_msg_new ("DRIVER_LIST"), &reply, err))
        return -1;
    const char *text = ah_msg_str (reply, "ids");
    size_t count = 0;
    for (const char *p = text; p && *p; p++)
        count += *p == ',';
    char **ids = calloc (count + 2, sizeof (char *));
    size_t n = 0;
    char *copy = text ? strdup (text) : NULL;
    char *save = NULL;
    for (char *tok = copy ? strtok_r (copy, ",", &save) : NULL; ids && tok;
         tok = strtok_r (NULL, ",", &save))
        if (ah_ident_check (AH_IDENT_AGENT_ID, tok) == NULL && n <= count)
            ids [n++] = strdup (tok);
    free (copy);
    ah_msg_destroy (&reply);
    if (!ids) {
        *err = strdup ("out of memory");
        return -1;
    }
    *ids_p = ids;
    return 0;
}

static int
s_image_exists (ah_driver_t *driver, const char *image, bool *exists, char **err)
{
    ah_msg_t *req = ah_msg_new ("DRIVER_IMAGE_EXISTS");
    ah_msg_set_str (req, "image", image);
    ah_msg_t *reply = NULL;
    if (s_simple (driver, req, &reply, err))
        return -1;
    *exists = ah_msg_bool (reply, "exists", false);
    ah_msg_destroy (&reply);
    return 0;
}

//  hostd's HOSTD_PROGRESS, to the builder's callback.
static void
s_on_progress (void *arg, const ah_msg_t *msg)
{
    const ah_image_build_t *build = arg;
    const char *text = ah_msg_str (msg, "text");
    if (build->on_progress && text)
        build->on_progress (build->progress_arg, text);
}

//  hostd builds from its own catalog (its build contexts and host files
//  are its machine's): only the image is named.
static int
s_image_build (ah_driver_t *driver, const ah_image_build_t *build, volatile int *stop, char **err)
{
    ah_msg_t *req = ah_msg_new ("DRIVER_IMAGE_BUILD");
    ah_msg_set_str (req, "image", build->image);
    int rc = s_call (driver->impl, &req, NULL, s_on_progress, (void *) build, stop, 0, err);
    if (rc == 1 && !*err)
        *err = strdup ("the image build was given up (shutting down)");
    return rc == 0 ? 0 : -1;
}

typedef struct {
    remote_t *self;
    void (*on_change) (void *arg, const char *agent_id, const char *action);
    void *arg;
    bool  connected;
} s_watch_t;

static void
s_on_event (void *arg, const ah_msg_t *event)
{
    s_watch_t *w = arg;
    const char *id = ah_msg_str (event, "agent_id");
    const char *action = ah_msg_str (event, "action");
    if (!action)
        return;
    if (!id) {
        if (streq (action, "connected")
        &&  ah_msg_int (event, "protocol", 0) == AH_HOSTD_PROTOCOL) {
            //  The host answers (its stream is open): up before the caller looks.
            s_note (w->self, "up", NULL, event);
            w->connected = true;
            w->on_change (w->arg, NULL, action);
        }
        else
        if (streq (action, "image") && w->connected)
            //  An image untagged or deleted on the host: the builder asks again.
            w->on_change (w->arg, NULL, action);
        return;
    }
    if (ah_ident_check (AH_IDENT_AGENT_ID, id) == NULL)
        w->on_change (w->arg, id, action);
}

static int
s_watch (ah_driver_t *driver, void (*on_change) (void *, const char *, const char *),
         void *arg, volatile int *stop, char **err)
{
    s_watch_t w = { .self = driver->impl, .on_change = on_change, .arg = arg };
    ah_msg_t *req = ah_msg_new ("DRIVER_WATCH");
    int rc = s_call (driver->impl, &req, NULL, s_on_event, &w, stop, 0, err);
    if (rc == 1)
        return 0;
    if (rc == 0 && !*err)
        *err = strdup ("the host agent ended the event stream");
    ah_host_info_t info;
    remote_t *self = driver->impl;
    pthread_mutex_lock (&self->lock);
    info = self->info;
    pthread_mutex_unlock (&self->lock);
    if (!streq (info.state, "up"))
        on_change (arg, NULL, "unreachable");
    return -1;
}

int
ah_remote_engine_facts (ah_driver_t *driver, ah_engine_facts_t *facts, char **err)
{
    ah_msg_t *reply = NULL;
    if (s_simple (driver, ah_msg_new ("DRIVER_ENGINE"), &reply, err))
        return -1;
    ah_hostd_get_facts (reply, facts);
    ah_msg_destroy (&reply);
    return 0;
}

int
ah_remote_tunnel_check (ah_driver_t *driver, bool *reachable, char **detail, char **err)
{
    ah_msg_t *reply = NULL;
    if (s_simple (driver, ah_msg_new ("HOSTD_TUNNEL"), &reply, err))
        return -1;
    *reachable = ah_msg_bool (reply, "reachable", false);
    const char *d = ah_msg_str (reply, "detail");
    const char *relay = ah_msg_str (reply, "relay");
    *detail = relay && *relay ? ah_strf ("%s (hostd relays it to %s)", d ? d : "", relay)
                              : strdup (d ? d : "");
    ah_msg_destroy (&reply);
    return 0;
}

int
ah_remote_home (ah_driver_t *driver, ah_msg_t **req_p, int timeout_ms, ah_msg_t **reply_p, char **err)
{
    return s_call (driver->impl, req_p, reply_p, NULL, NULL, NULL, timeout_ms, err) == 0 ? 0 : -1;
}

static int
s_host_info (ah_driver_t *driver, ah_host_info_t *info)
{
    remote_t *self = driver->impl;
    pthread_mutex_lock (&self->lock);
    *info = self->info;
    pthread_mutex_unlock (&self->lock);
    return 0;
}

static void
s_destroy_driver (ah_driver_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_driver_t *driver = *self_p;
    remote_t *self = driver->impl;
    if (self) {
        while (self->n_idle > 0)
            zsock_destroy (&self->idle [--self->n_idle]);
        zcert_destroy (&self->cert);
        pthread_mutex_destroy (&self->lock);
        free (self->endpoint);
        free (self->logged);
        free (self);
    }
    free (driver);
    *self_p = NULL;
}

ah_driver_t *
ah_remote_driver_new (const ah_config_t *config, char **err)
{
    if (!config || !config->remote_endpoint) {
        *err = strdup ("remote driver: no sandbox.remote.endpoint");
        return NULL;
    }
    ah_driver_t *driver = calloc (1, sizeof *driver);
    remote_t *self = calloc (1, sizeof *self);
    if (!driver || !self) {
        free (driver);
        free (self);
        *err = strdup ("remote driver: out of memory");
        return NULL;
    }
    driver->name = "remote";
    driver->waits_for_hello = true;
    driver->create = s_create;
    driver->start = s_start;
    driver->stop = s_stop;
    driver->freeze = s_freeze;
    driver->thaw = s_thaw;
    driver->rebuild = s_rebuild;
    driver->destroy = s_destroy;
    driver->remove_container = s_remove_container;
    driver->inspect = s_inspect;
    driver->list = s_list;
    driver->watch = s_watch;
    driver->image_exists = s_image_exists;
    driver->image_build = s_image_build;
    driver->host_info = s_host_info;
    driver->destroy_driver = s_destroy_driver;
    driver->impl = self;

    pthread_mutex_init (&self->lock, NULL);
    self->config = config;
    self->endpoint = strdup (config->remote_endpoint);
    self->timeout_ms = (int) (config->remote_timeout_s * 1000);
    self->curve = strncmp (config->remote_endpoint, "tcp://", 6) == 0;
    snprintf (self->info.name, sizeof self->info.name, "%s", config->remote_endpoint);
    snprintf (self->info.endpoint, sizeof self->info.endpoint, "%s", config->remote_endpoint);
    snprintf (self->info.state, sizeof self->info.state, "unknown");
    if (self->curve) {
        if (!config->remote_server_key) {
            *err = strdup ("sandbox.remote.server_key is needed with a tcp:// endpoint");
            s_destroy_driver (&driver);
            return NULL;
        }
        self->cert = s_load_cert (config->data_dir, err);
        if (!self->cert) {
            if (!*err)
                *err = strdup ("cannot read or make the server's CURVE key pair");
            s_destroy_driver (&driver);
            return NULL;
        }
    }
    if (!self->endpoint) {
        s_destroy_driver (&driver);
        *err = strdup ("remote driver: out of memory");
        return NULL;
    }
    return driver;
}
