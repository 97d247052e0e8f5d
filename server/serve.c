/*  server/serve.c: start-up, wiring and shutdown of `agenthold serve`.

    DESIGN. The main thread (the one that calls ah_server_run) owns the
    process: it blocks SIGINT, SIGTERM and SIGHUP before any thread
    exists, so every thread inherits the mask and no signal ever
    interrupts an actor's poll; the main thread reads them from a
    signalfd. It then prepares what every actor relies on (data
    directory, its lock, the migrated database, the admin token, the
    driver), starts the bus and the actors in dependency order, each with
    ah_actor_new (common/actor.h), and waits on the signalfd and the
    actors' pipes. An actor
    whose pipe speaks unasked has died: the server stops, exit status 1.

    Shutdown is the start order reversed (api first, bus last), so no
    actor is stopped while another still sends to it; the recorder stops
    after every actor that feeds it, and flushes on $TERM.

    Owned here, for the life of the process: the config (borrowed from the
    caller), the driver (shared read-only with the actors that call it; it
    is thread-safe by contract), the lock file descriptor.             */
#include "server/serve.h"
#include "actors/api.h"
#include "actors/builder.h"
#include "actors/lifecycle.h"
#include "actors/reconciler.h"
#include "actors/recorder.h"
#include "actors/sleeper.h"
#include "actors/conversations.h"
#include "actors/tunnel.h"
#include "common/bus.h"
#include "common/egress_ca.h"
#include "common/file.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/secretbox.h"
#include "common/str.h"
#include "common/token.h"
#include "drivers/driver.h"
#include "drivers/docker.h"
#include "store/store.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#define AH_SERVE_MAX_ACTORS 10
//  An orderly shutdown waits for driver calls in flight (a docker stop, an
//  image build giving up); past this, or on a second SIGINT/SIGTERM, the
//  process exits at once (status 1) instead of hanging.
#define AH_SERVE_SHUTDOWN_LIMIT_MS 60000

typedef struct {
    const char *name;
    zactor_t   *actor;
} s_running_t;

typedef struct {
    const ah_config_t *config;
    char        *db_path;
    char        *lock_path;
    char        *token_path;
    int          lock_fd;
    int          signal_fd;
    ah_driver_t *driver;
    zactor_t    *bus;
    zsock_t     *control;           //  our own DEALER on the bus ("server")
    s_running_t  actors [AH_SERVE_MAX_ACTORS];
    size_t       actor_count;
    //  Arguments must outlive the actors that borrow them.
    ah_bus_args_t        bus_args;
    ah_recorder_args_t   recorder_args;
    ah_lifecycle_args_t  lifecycle_args;
    ah_reconciler_args_t reconciler_args;
    ah_tunnel_args_t     tunnel_args;
    ah_sleeper_args_t    sleeper_args;
    ah_conversations_args_t conversations_args;
    ah_builder_args_t    builder_args;
    ah_api_args_t        api_args;
} self_t;

//  Who gets lifecycle's SANDBOX_STATE events: every actor that follows
//  sandbox states and is started by this server.
static const char *s_state_subscribers [] = { "api", "sleeper", "tunnel", "recorder", NULL };

int
ah_server_make_data_dir (const char *path, char **err)
{
    const mode_t mode = 0700;
    char *copy = strdup (path);
    if (!copy)
        return -1;
    for (char *p = copy + 1; ; p++) {
        if (*p == '/' || *p == 0) {
            char saved = *p;
            *p = 0;
            if (mkdir (copy, mode) != 0 && errno != EEXIST) {
                if (asprintf (err, "cannot create the data directory %s (server.data_dir): %s",
                              copy, strerror (errno)) < 0)
                    *err = NULL;
                free (copy);
                return -1;
            }
            *p = saved;
            if (saved == 0)
                break;
        }
    }
    free (copy);
    struct stat st;
    if (stat (path, &st) != 0 || !S_ISDIR (st.st_mode)) {
        if (asprintf (err, "server.data_dir %s is not a directory", path) < 0)
            *err = NULL;
        return -1;
    }
    if (st.st_mode & 077)
        ah_warn ("server", "data directory %s is readable by others (mode %03o); 0700 is advised",
                 path, (unsigned) (st.st_mode & 0777));
    return 0;
}

//  An exclusive flock on <data_dir>/agenthold.lock, held until exit (the
//  kernel drops it if we die). The file holds our pid for the message the
//  next server prints.
static int
s_lock (self_t *self, char **err)
{
    self->lock_fd = open (self->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (self->lock_fd < 0) {
        if (asprintf (err, "cannot open the lock file %s: %s", self->lock_path, strerror (errno)) < 0)
            *err = NULL;
        return -1;
    }
    if (flock (self->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        int saved = errno;
        char pid [32] = "";
        ssize_t n = pread (self->lock_fd, pid, sizeof pid - 1, 0);
        pid [n > 0 ? n : 0] = 0;
        pid [strcspn (pid, "\n")] = 0;
        if (saved == EWOULDBLOCK) {
            if (asprintf (err, "another agenthold serve is running on %s (pid %s)",
                          self->config->data_dir, *pid ? pid : "unknown") < 0)
                *err = NULL;
        }
        else
        if (asprintf (err, "cannot lock %s: %s", self->lock_path, strerror (saved)) < 0)
            *err = NULL;
        close (self->lock_fd);
        self->lock_fd = -1;
        return -1;
    }
    char pid [32];
    int len = snprintf (pid, sizeof pid, "%d\n", (int) getpid ());
    if (ftruncate (self->lock_fd, 0) != 0 || pwrite (self->lock_fd, pid, len, 0) != len)
        ah_warn ("server", "cannot write our pid into %s: %s", self->lock_path, strerror (errno));
    return 0;
}

//  token + "\n" into path, mode 0600, atomically and fsync'd: nobody
//  ever sees a partial or looser file.
static int
s_write_secret (const char *path, const char *token, char **err)
{
    char *line = ah_strf ("%s\n", token);
    int rc = line ? ah_file_put (path, line, strlen (line), 0600, true) : -1;
    if (rc && asprintf (err, "cannot write the admin token to %s: %s", path,
                        line ? strerror (errno) : "out of memory") < 0)
        *err = NULL;
    if (line)
        explicit_bzero (line, strlen (line));
    free (line);
    return rc;
}

//  On first start (no token named "admin"): a fresh token, its hash in
//  api_tokens, the token itself only in <data_dir>/admin.token. The row
//  and the file are made together: if the file cannot be written the
//  insert is rolled back, so the next start tries again.
static int
s_admin_token (self_t *self, ah_store_t *store, char **err)
{
    sqlite3_stmt *stmt = ah_store_prepare (store, "SELECT id FROM api_tokens WHERE name = 'admin'");
    if (!stmt) {
        *err = strdup ("cannot read api_tokens");
        return -1;
    }
    int rc = ah_store_step (store, stmt);
    sqlite3_reset (stmt);
    if (rc == SQLITE_ROW) {
        if (access (self->token_path, F_OK) != 0)
            ah_warn ("server", "the admin token exists but %s is gone; only its hash is stored, "
                     "so it cannot be shown again", self->token_path);
        return 0;
    }
    if (rc != SQLITE_DONE) {
        *err = strdup ("cannot read api_tokens");
        return -1;
    }
    char token [AH_TOKEN_HEX], hash [AH_TOKEN_HEX];
    if (ah_token_new (token) != 0) {
        *err = strdup ("cannot make the admin token: no entropy (getrandom failed)");
        return -1;
    }
    ah_token_hash (token, hash);
    int result = -1;
    if (ah_store_begin (store) != 0) {
        *err = strdup ("cannot write api_tokens (BEGIN failed)");
        goto out;
    }
    stmt = ah_store_prepare (store, "INSERT INTO api_tokens (name, hash, tenant, admin, created_at)"
                                    " VALUES ('admin', :hash, 'default', 1, :now)");
    if (!stmt || ah_store_bind_text (stmt, ":hash", hash)
    ||  ah_store_bind_int64 (stmt, ":now", ah_store_now_ms ())
    ||  ah_store_step (store, stmt) != SQLITE_DONE) {
        ah_store_rollback (store);
        *err = strdup ("cannot insert the admin token into api_tokens");
        goto out;
    }
    if (s_write_secret (self->token_path, token, err) != 0) {
        ah_store_rollback (store);
        goto out;
    }
    if (ah_store_commit (store) != 0) {
        unlink (self->token_path);
        *err = strdup ("cannot commit the admin token");
        goto out;
    }
    ah_info ("server", "created the admin API token; it is in %s (mode 0600)", self->token_path);
    result = 0;
out:
    explicit_bzero (token, sizeof token);
    return result;
}

static bool
s_has_ca (const char *data_dir)
{
    char *p = ah_strf ("%s/%s", data_dir, AH_EGRESS_CA_CERT_FILE);
    bool has = p && access (p, F_OK) == 0;
    free (p);
    return has;
}

//  The egress secrets' key (docs/egress.md "Secrets"), when it exists
//  already, must be readable by its owner only: a key others may have
//  read stops the server, saying so, rather than guarding secrets with
//  it. (It is made at its first need, by the API.) The egress CA is
//  made at the first start; one that cannot be used (its key readable
//  by others included) stops the server too.
static int
s_prepare_egress (self_t *self, char **err)
{
    char *path = ah_strf ("%s/%s", self->config->data_dir, AH_SECRETBOX_FILE);
    uint8_t key [AH_SECRETBOX_KEY];
    int rc = path ? ah_keyfile_load (path, key, sizeof key, false, err) : -1;
    explicit_bzero (key, sizeof key);
    free (path);
    if (rc < 0)
        return -1;
    bool fresh = access (self->config->data_dir, F_OK) == 0 && !s_has_ca (self->config->data_dir);
    ah_egress_ca_t *ca = ah_egress_ca_load (self->config->data_dir, true, err);
    if (!ca)
        return -1;
    if (fresh)
        ah_info ("server", "made the egress CA (%s/%s, its key beside it, mode 0600): sandboxes trust it "
                 "for the hosts a tenant attached a secret to (docs/egress.md)", self->config->data_dir,
                 AH_EGRESS_CA_CERT_FILE);
    ah_egress_ca_destroy (&ca);
    return 0;
}

//  Open (and migrate) the database once, here, before any actor opens its
//  own connection: a newer schema stops the server with the store's message.
static int
s_prepare_store (self_t *self, char **err)
{
    char *store_err = NULL;
    ah_store_t *store = ah_store_open (self->db_path, true, &store_err);
    if (!store) {
        if (asprintf (err, "%s: %s", self->db_path, store_err ? store_err : "cannot open") < 0)
            *err = NULL;
        free (store_err);
        return -1;
    }
    int rc = s_admin_token (self, store, err);
    ah_store_close (&store);
    return rc;
}

static void
s_add (self_t *self, const char *name, zactor_t *actor)
{
    self->actors [self->actor_count].name = name;
    self->actors [self->actor_count].actor = actor;
    self->actor_count++;
    ah_debug ("server", "%s started", name);
}

//  Start one actor: ah_actor_new returns once its start-up ran, or NULL
//  with the reason it failed.
static int
s_start_in (self_t *self, const ah_actor_def_t *def, void *args, zactor_t *host)
{
    char *err = NULL;
    zactor_t *actor = host ? ah_actor_new_guest (def, args, host, &err) : ah_actor_new (def, args, &err);
    if (!actor) {
        ah_error ("server", "the %s actor failed to start: %s", def->name, err ? err : "no reason given");
        free (err);
        return -1;
    }
    s_add (self, def->name, actor);
    return 0;
}

static int
s_start (self_t *self, const ah_actor_def_t *def, void *args)
{
    return s_start_in (self, def, args, NULL);
}

static bool
s_running (self_t *self, const char *name)
{
    for (size_t i = 0; i < self->actor_count; i++)
        if (streq (self->actors [i].name, name))
            return true;
    return false;
}

//  SIGHUP: every actor that holds a policy reloads it.
static void
s_policy_reload (self_t *self)
{
    static const char *holders [] = { "lifecycle", "sleeper", "builder", "conversations" };
    ah_info ("server", "SIGHUP: reloading policies");
    for (size_t i = 0; i < sizeof holders / sizeof holders [0]; i++) {
        if (!s_running (self, holders [i]))
            continue;
        ah_msg_t *msg = ah_msg_new ("POLICY_RELOAD");
        if (ah_msg_send (&msg, self->control, holders [i]) != 0)
            ah_warn ("server", "could not send POLICY_RELOAD to %s", holders [i]);
    }
}

char *
ah_server_docker_advice (const ah_config_t *config, const char *why)
{
    char *text = NULL;
    if (asprintf (&text,
            "the docker driver cannot work: %s. To fix it: start the Docker Engine, or set "
            "sandbox.docker.socket (AGENTHOLD_SANDBOX_DOCKER_SOCKET) to its socket (now %s), "
            "and make sure this user may use it (e.g. the docker group). To try agenthold "
            "without Docker, set `sandbox.driver: fake` in the config file or run with "
            "AGENTHOLD_SANDBOX_DRIVER=fake.",
            why ? why : "unknown error",
            config->docker_socket ? config->docker_socket : "unset") < 0)
        text = NULL;
    return text;
}

//  The backend, and one call that needs it to work (list), so a server
//  whose driver cannot work stops at start instead of failing every
//  request later. Docker's message says how to fix it, and how to try
//  agenthold without Docker.
static int
s_prepare_driver (self_t *self, char **err)
{
    const ah_config_t *config = self->config;
    char *driver_err = NULL;
    self->driver = ah_driver_new (config, &driver_err);
    char **ids = NULL;
    if (self->driver && self->driver->list (self->driver, &ids, &driver_err) == 0) {
        size_t n = 0;
        while (ids && ids [n])
            n++;
        ah_driver_free_ids (&ids);
        ah_info ("server", "driver %s: %zu sandbox(es) found", self->driver->name, n);
        free (driver_err);
        //  Whether sandboxes reach this host's own services (the host
        //  firewall is the operator's; docs/docker.md): probed in the
        //  background, the outcome logged, a warning if they do.
        if (streq (self->driver->name, "docker"))
            ah_docker_isolation_check_start (self->driver);
        return 0;
    }
    //  A host agent may be down or refuse us: the server runs all the
    //  same, its sandboxes unreachable until the host answers.
    if (self->driver && self->driver->host_info) {
        ah_warn ("server", "driver %s: %s; going on, its sandboxes unreachable until it answers",
                 self->driver->name, driver_err ? driver_err : "the host agent does not answer");
        free (driver_err);
        return 0;
    }
    if (config->driver && streq (config->driver, "docker"))
        *err = ah_server_docker_advice (config, driver_err);
    else
    if (asprintf (err, "the %s driver cannot work: %s", config->driver ? config->driver : "(none)",
                  driver_err ? driver_err : "unknown error") < 0)
        *err = NULL;
    free (driver_err);
    if (self->driver)
        self->driver->destroy_driver (&self->driver);
    return -1;
}

//  Dependency order: the recorder first (everyone records), lifecycle
//  (owns the sandboxes), the reconciler (reports to lifecycle), then the
//  actors that ask lifecycle for things, the api last (it lets the world in).
static int
s_start_actors (self_t *self)
{
    const ah_config_t *config = self->config;
    self->recorder_args = (ah_recorder_args_t) { .db_path = self->db_path,
                                                 .retention_days = self->config->audit_retention_days };
    if (s_start (self, &ah_recorder_actor, &self->recorder_args))
        return -1;
    //  The builder before lifecycle: lifecycle's first RUNTIME_ENSURE
    //  (its start-up scan) must find it on the bus.
    self->builder_args = (ah_builder_args_t) {
        .config = config, .db_path = self->db_path, .driver = self->driver, .prewarm = true };
    if (s_start (self, &ah_builder_actor, &self->builder_args))
        return -1;
    self->lifecycle_args = (ah_lifecycle_args_t) {
        .config = config, .driver = self->driver, .db_path = self->db_path,
        .subscribers = s_state_subscribers, .ensure_images = true };
    if (s_start (self, &ah_lifecycle_actor, &self->lifecycle_args))
        return -1;
    self->reconciler_args = (ah_reconciler_args_t) { .db_path = self->db_path, .driver = self->driver };
    if (s_start (self, &ah_reconciler_actor, &self->reconciler_args))
        return -1;
    //  The ACP client of the agents' harnesses: opens the tunnel's proc
    //  channels and writes the conversations' logs. Before the tunnel, so
    //  that it stops after it and hears its channels close.
    self->conversations_args = (ah_conversations_args_t) { .config = config, .db_path = self->db_path };
    if (s_start (self, &ah_conversations_actor, &self->conversations_args))
        return -1;
    self->tunnel_args = (ah_tunnel_args_t) { .config = config, .db_path = self->db_path };
    //  CPU samples at least as often as the sleeper judges (short check intervals).
    if (config->idle_check_interval_s * 1000 < AH_TUNNEL_STATS_INTERVAL_MS)
        self->tunnel_args.stats_interval_ms = (int) (config->idle_check_interval_s * 1000);
    if (s_start (self, &ah_tunnel_actor, &self->tunnel_args))
        return -1;
    self->sleeper_args = (ah_sleeper_args_t) { .config = config, .db_path = self->db_path };
    if (s_start (self, &ah_sleeper_actor, &self->sleeper_args))
        return -1;
    //  The api runs in the tunnel's thread (a guest, common/actor.h): a
    //  channel's bytes go from one's connection to the other's yamux
    //  stream without leaving the thread, and their messages to each
    //  other never take the bus. Unless the tap is on: then the api has
    //  a thread of its own and their messages take the bus, so the tap
    //  sees every CHAN_* (their metadata), at the bus's pace.
    self->api_args = (ah_api_args_t) { .config = config, .db_path = self->db_path,
                                       .driver = self->driver };
    zactor_t *host = NULL;
    for (size_t i = 0; i < self->actor_count && !config->tap_endpoint; i++)
        if (streq (self->actors [i].name, ah_tunnel_actor.name))
            host = self->actors [i].actor;
    return s_start_in (self, &ah_api_actor, &self->api_args, host);
}

static void
s_stop_actors (self_t *self)
{
    while (self->actor_count > 0) {
        s_running_t *r = &self->actors [--self->actor_count];
        ah_debug ("server", "stopping %s", r->name);
        zactor_destroy (&r->actor);
    }
}

//  The main loop: signals and actor deaths. Returns the exit status.
static int
s_wait (self_t *self)
{
    while (true) {
        zmq_pollitem_t items [AH_SERVE_MAX_ACTORS + 3];
        size_t n = 0;
        items [n++] = (zmq_pollitem_t) { .fd = self->signal_fd, .events = ZMQ_POLLIN };
        items [n++] = (zmq_pollitem_t) { .socket = zsock_resolve (self->control), .events = ZMQ_POLLIN };
        items [n++] = (zmq_pollitem_t) { .socket = zsock_resolve (self->bus), .events = ZMQ_POLLIN };
        for (size_t i = 0; i < self->actor_count; i++)
            items [n++] = (zmq_pollitem_t) { .socket = zsock_resolve (self->actors [i].actor),
                                             .events = ZMQ_POLLIN };
        if (zmq_poll (items, (int) n, -1) < 0) {
            if (errno == EINTR)
                continue;
            ah_error ("server", "poll failed: %s", zmq_strerror (errno));
            return 1;
        }
        if (items [0].revents & ZMQ_POLLIN) {
            struct signalfd_siginfo info;
            if (read (self->signal_fd, &info, sizeof info) == sizeof info) {
                if (info.ssi_signo == SIGHUP)
                    s_policy_reload (self);
                else {
                    ah_info ("server", "%s: shutting down", strsignal ((int) info.ssi_signo));
                    return 0;
                }
            }
        }
        if (items [1].revents & ZMQ_POLLIN) {
            //  Nothing is meant for us but the bus's answers; read and drop them.
            ah_msg_t *msg = ah_msg_recv (self->control, true, NULL);
            if (msg && streq (ah_msg_type (msg), "REPLY") && !ah_msg_bool (msg, "ok", true))
                ah_warn ("server", "%s answered: %s", ah_msg_peer (msg), ah_msg_str (msg, "error"));
            ah_msg_destroy (&msg);
        }
        if (items [2].revents & ZMQ_POLLIN) {
            //  The bus's pipe speaks only when its thread has ended.
            ah_error ("server", "the bus stopped unexpectedly: shutting down");
            return 1;
        }
        for (size_t i = 0; i < self->actor_count; i++)
            if (items [i + 3].revents & ZMQ_POLLIN) {
                zmsg_t *msg = zmsg_recv (self->actors [i].actor);
                bool died = !msg || zmsg_signal (msg) >= 0;
                zmsg_destroy (&msg);
                if (died) {
                    ah_error ("server", "the %s actor stopped unexpectedly: shutting down", self->actors [i].name);
                    //  We consumed its last signal: destroying it must not
                    //  wait for another (zactor_destroy waits on the pipe).
                    zsock_set_rcvtimeo (zactor_sock (self->actors [i].actor), 500);
                    zactor_destroy (&self->actors [i].actor);
                    memmove (&self->actors [i], &self->actors [i + 1],
                             (self->actor_count - i - 1) * sizeof (s_running_t));
                    self->actor_count--;
                    return 1;
                }
                ah_warn ("server", "unexpected message on the %s actor's pipe: ignored", self->actors [i].name);
            }
    }
}

//  The shutdown watchdog: a thread that, while the main thread stops the
//  actors, reads the signalfd (the main thread no longer does) and exits
//  the process on a second SIGINT/SIGTERM or when the limit passes.
//  Everything committed is in the database (WAL); only what was in flight
//  is lost. done_fd (an eventfd) tells it the shutdown finished.
typedef struct {
    int signal_fd;
    int done_fd;
} s_watchdog_t;

static void *
s_watchdog (void *arg)
{
    s_watchdog_t *w = arg;
    pthread_setname_np (pthread_self (), "ah-watchdog");
    int64_t deadline = zclock_mono () + AH_SERVE_SHUTDOWN_LIMIT_MS;
    while (true) {
        int64_t left = deadline - zclock_mono ();
        if (left <= 0) {
            ah_error ("server", "shutdown took longer than %d s: exiting now", AH_SERVE_SHUTDOWN_LIMIT_MS / 1000);
            _exit (1);
        }
        struct pollfd fds [2] = { { .fd = w->signal_fd, .events = POLLIN }, { .fd = w->done_fd, .events = POLLIN } };
        if (poll (fds, 2, (int) left) < 0 && errno != EINTR)
            return NULL;
        if (fds [1].revents & POLLIN)
            return NULL;
        struct signalfd_siginfo info;
        if ((fds [0].revents & POLLIN) && read (w->signal_fd, &info, sizeof info) == sizeof info
        &&  info.ssi_signo != SIGHUP) {
            ah_error ("server", "second %s during shutdown: exiting now", strsignal ((int) info.ssi_signo));
            _exit (1);
        }
    }
}

static void
s_destroy (self_t *self)
{
    s_watchdog_t watchdog = { .signal_fd = self->signal_fd, .done_fd = -1 };
    pthread_t watchdog_thread;
    bool watching = false;
    if (self->signal_fd >= 0 && self->actor_count > 0) {
        watchdog.done_fd = eventfd (0, EFD_CLOEXEC);
        watching = watchdog.done_fd >= 0
                && pthread_create (&watchdog_thread, NULL, s_watchdog, &watchdog) == 0;
    }
    s_stop_actors (self);
    zsock_destroy (&self->control);
    zactor_destroy (&self->bus);
    //  After every actor: they borrow it.
    if (self->driver)
        self->driver->destroy_driver (&self->driver);
    if (watching) {
        uint64_t one = 1;
        if (write (watchdog.done_fd, &one, sizeof one) != sizeof one)
            pthread_cancel (watchdog_thread);       //  poll() is a cancellation point
        pthread_join (watchdog_thread, NULL);
    }
    if (watchdog.done_fd >= 0)
        close (watchdog.done_fd);
    if (self->signal_fd >= 0)
        close (self->signal_fd);
    if (self->lock_fd >= 0)
        close (self->lock_fd);      //  releases the flock; the file stays (removing it would race)
    free (self->db_path);
    free (self->lock_path);
    free (self->token_path);
}

int
ah_server_run (const ah_config_t *config)
{
    //  Before any thread exists: every thread inherits this mask, so the
    //  signals reach only our signalfd and never interrupt an actor.
    sigset_t mask;
    sigemptyset (&mask);
    sigaddset (&mask, SIGINT);
    sigaddset (&mask, SIGTERM);
    sigaddset (&mask, SIGHUP);
    pthread_sigmask (SIG_BLOCK, &mask, NULL);
    zsys_handler_set (NULL);
    //  A peer that goes away must not kill us.
    signal (SIGPIPE, SIG_IGN);

    self_t self = { .config = config, .lock_fd = -1, .signal_fd = -1 };
    int status = 1;
    char *err = NULL;
    if (!config || !config->data_dir || !*config->data_dir) {
        ah_error ("server", "server.data_dir is not set");
        goto out;
    }
    if (asprintf (&self.db_path, "%s/%s", config->data_dir, AH_SERVE_DB_FILE) < 0
    ||  asprintf (&self.lock_path, "%s/%s", config->data_dir, AH_SERVE_LOCK_FILE) < 0
    ||  asprintf (&self.token_path, "%s/%s", config->data_dir, AH_SERVE_TOKEN_FILE) < 0)
        goto out;
    self.signal_fd = signalfd (-1, &mask, SFD_CLOEXEC);
    if (self.signal_fd < 0) {
        ah_error ("server", "signalfd: %s", strerror (errno));
        goto out;
    }
    if (ah_server_make_data_dir (config->data_dir, &err)
    ||  s_lock (&self, &err)
    ||  s_prepare_egress (&self, &err)
    ||  s_prepare_store (&self, &err)
    ||  s_prepare_driver (&self, &err)) {
        ah_error ("server", "%s", err ? err : "start-up failed");
        goto out;
    }

    zsys_init ();
    self.bus_args.tap_endpoint = config->tap_endpoint;
    self.bus = ah_actor_new (&ah_bus_actor, &self.bus_args, &err);
    if (!self.bus) {
        ah_error ("server", "the bus did not start: %s", err ? err : "no reason given");
        goto out;
    }
    self.control = ah_bus_connect ("server");
    if (!self.control) {
        ah_error ("server", "cannot connect to the bus");
        goto out;
    }
    if (s_start_actors (&self) != 0)
        goto out;

    char line [1024];
    //  The tunnel: its socket, and TCP only where the driver needs it.
    char *sock = ah_config_tunnel_socket (config);
    const char *tcp = ah_config_tunnel_tcp (config, NULL);
    char tunnel [600];
    snprintf (tunnel, sizeof tunnel, "%s%s%s", sock ? sock : "?", tcp ? " and TCP " : " (no TCP)",
              tcp ? tcp : "");
    free (sock);
    snprintf (line, sizeof line,
              "agenthold serving: api %s://%s, tunnel %s, driver %s, data %s, admin token in %s%s%s",
              config->tls_cert ? "https" : "http", config->listen ? config->listen : "?", tunnel,
              config->driver ? config->driver : "?", config->data_dir, self.token_path,
              config->tap_endpoint ? ", tap " : "", config->tap_endpoint ? config->tap_endpoint : "");
    ah_info ("server", "%s", line);
    printf ("%s\n", line);
    fflush (stdout);

    status = s_wait (&self);
out:
    free (err);
    s_destroy (&self);
    if (status == 0)
        ah_info ("server", "stopped");
    //  The mask stays: a signal after the watchdog has gone must not kill
    //  us with a signal status after an orderly shutdown.
    return status;
}
