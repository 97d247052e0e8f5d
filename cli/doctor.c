/*  cli/doctor.c: `agenthold doctor` (see doctor.h). Each check is one
    function that adds one or more results {name, status ok|fail, detail,
    advice}: what was found, and what to do when it is a problem. The
    checks read what the server reads (the configuration, the database
    without migrating it, the Lua scripts, the catalog) and ask the driver
    the configuration names (the host agent, or the engine in-process),
    so they run where the server runs, as root or as the server's user.
    Single-threaded; nothing is changed.                                */
#include "cli/doctor.h"
#include "cli/cmd.h"
#include "catalog/catalog.h"
#include "common/str.h"
#include "config/config.h"
#include "drivers/docker.h"
#include "drivers/driver.h"
#include "drivers/remote.h"
#include "policy/policy.h"
#include "server/privsep.h"
#include "hostd/relay.h"
#include "store/store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define GIB             (INT64_C (1) << 30)
#define DISK_MIN_FREE   (5 * GIB)       //  below this, volumes are about to fail

typedef struct {
    json_t *checks;
    int     problems;
    const ah_config_t *config;
    ah_driver_t *driver;
} doctor_t;

static void
s_add (doctor_t *self, const char *name, bool ok, char *detail, char *advice)
{
    json_t *c = json_pack ("{s:s s:s s:s*}", "name", name, "status", ok ? "ok" : "fail",
                           "detail", detail ? detail : "");
    if (!ok && advice)
        json_object_set_new (c, "advice", json_string (advice));
    json_array_append_new (self->checks, c);
    self->problems += !ok;
    free (detail);
    free (advice);
}

static bool
s_exists (const char *path)
{
    struct stat st;
    return stat (path, &st) == 0;
}

static void
s_database (doctor_t *self)
{
    char *path = ah_strf ("%s/agenthold.db", self->config->data_dir);
    if (!s_exists (path)) {
        s_add (self, "database", false, ah_strf ("no database at %s", path),
               strdup ("start the server once (agenthold serve): it makes and migrates the database"));
        free (path);
        return;
    }
    char *err = NULL;
    ah_store_t *store = ah_store_open (path, false, &err);
    if (!store) {
        bool newer = err && strstr (err, "is newer than this agenthold");
        s_add (self, "database", false, ah_strf ("%s cannot be opened: %s", path, err ? err : "?"),
               newer ? strdup ("install the agenthold release that made it; an older one must "
                               "not run on it")
                     : strdup ("check the file's owner and mode (the server's user reads and "
                               "writes it), or restore it from a backup"));
        free (err);
        free (path);
        return;
    }
    int have = ah_store_schema_version (store), want = ah_store_latest_version ();
    if (have == want)
        s_add (self, "database", true, ah_strf ("%s: schema %d, as this agenthold expects", path, have),
               NULL);
    else                                //  a newer one does not open (above)
        s_add (self, "database", false, ah_strf ("%s: schema %d, this agenthold knows %d", path, have, want),
               strdup ("start agenthold serve: it applies the missing migrations at start (copy "
                       "the file first if you may want to go back)"));
    sqlite3_stmt *st = ah_store_prepare (store, "SELECT count(*) FROM tombstones");
    if (st && ah_store_step (store, st) == SQLITE_ROW) {
        int64_t n = sqlite3_column_int64 (st, 0);
        if (n == 0)
            s_add (self, "tombstones", true, strdup ("no destroy is waiting"), NULL);
        else
            s_add (self, "tombstones", false,
                   ah_strf ("%lld destroy(s) still owed to the driver", (long long) n),
                   strdup ("the server finishes them while it runs and its driver answers: start "
                           "the server, and the host agent or Docker Engine it uses; `agenthold ls` "
                           "shows them as destroying or error"));
    }
    if (st)
        sqlite3_reset (st);
    ah_store_close (&store);
    free (path);
}

static void
s_lua (doctor_t *self)
{
    static const char *scripts [] = { "limits.lua", "idle.lua", "briefing.lua" };
    for (size_t i = 0; i < sizeof scripts / sizeof scripts [0]; i++) {
        char *err = NULL;
        ah_policy_t *p = ah_policy_new (self->config->lua_dir, scripts [i], "doctor", NULL, &err);
        char *name = ah_strf ("lua %s", scripts [i]);
        if (p)
            s_add (self, name, true, ah_strf ("%s/%s loads", self->config->lua_dir, scripts [i]), NULL);
        else
            s_add (self, name, false, ah_strf ("%s", err ? err : "does not load"),
                   ah_strf ("fix %s/%s (policy.lua_dir); a running server keeps the last version "
                            "that loaded until this one does (SIGHUP reloads)",
                            self->config->lua_dir, scripts [i]));
        ah_policy_destroy (&p);
        free (name);
        free (err);
    }
}

//  Whether a sandbox with a network reaches the host's own services: the
//  probe hostd ran at its start (remote), or one run now (docker).
static void
s_firewall (doctor_t *self, bool remote, const ah_engine_facts_t *f)
{
    int rc = f->firewall;
    char *report = strdup (f->firewall_report);
    if (!remote) {
        free (report);
        report = NULL;
        rc = ah_docker_check_isolation (self->driver, 0, &report);
    }
    const char *pool = self->config->network_pool;
    if (rc == AH_FIREWALL_PENDING)
        s_add (self, "firewall", true, strdup ("the host agent's firewall probe has not ended yet "
                                               "(it runs once at hostd's start)"), NULL);
    else
        s_add (self, "firewall", rc != 1, ah_strf ("%s%s", rc < 0 ? "cannot tell: " : "",
                                                  report ? report : ""),
               ah_strf ("filter what the pool %s sends to the host's own addresses, e.g. "
                        "`iptables -I INPUT -s %s -j DROP` (docs/docker.md)", pool, pool));
    free (report);
}

//  The host agent (remote) or the engine (docker): reachable, same
//  protocol; then the engine's facts and the catalog's images.
static void
s_host (doctor_t *self)
{
    const ah_config_t *c = self->config;
    char *err = NULL;
    if (!strcmp (c->driver, "fake")) {
        s_add (self, "host", false, strdup ("sandbox.driver is fake: no containers, no isolation"),
               strdup ("for anything but development set sandbox.driver to docker or remote"));
        return;
    }
    self->driver = ah_driver_new (c, &err);
    if (!self->driver) {
        s_add (self, "host", false, ah_strf ("the %s driver cannot be made: %s", c->driver, err ? err : "?"),
               strdup ("fix the sandbox.* keys it names"));
        free (err);
        return;
    }
    char **ids = NULL;
    int rc = self->driver->list (self->driver, &ids, &err);
    size_t n = 0;
    while (rc == 0 && ids && ids [n])
        n++;
    ah_driver_free_ids (&ids);
    bool remote = self->driver->host_info != NULL;
    if (!strcmp (self->driver->name, "kubernetes")) {
        //  A cluster: its API server answers (with the Role's list), or
        //  not; no engine of ours to ask facts of (docs/kubernetes.md).
        if (rc != 0)
            s_add (self, "host", false, strdup (err ? err : "the API server does not answer"),
                   strdup ("check sandbox.kubernetes.kubeconfig (or the Pod's service account), the "
                           "namespace and the Role of docs/kubernetes.md"));
        else
            s_add (self, "host", true, ah_strf ("the Kubernetes API server answers (namespace %s); "
                                                "%zu sandbox(es)", c->k8s_namespace, n), NULL);
        free (err);
        return;
    }
    if (rc != 0) {
        ah_host_info_t info = { 0 };
        if (remote)
            self->driver->host_info (self->driver, &info);
        s_add (self, "host", false, strdup (err ? err : "the driver does not answer"),
               remote && !strcmp (info.state, "refused")
               ? strdup ("deploy the same agenthold release on the server and the host (the "
                         "sentence names both), then restart hostd")
               : remote ? ah_strf ("start `agenthold hostd` where %s points (docs/hostd.md)",
                                   c->remote_endpoint)
               : ah_strf ("start the Docker Engine, or point sandbox.docker.socket (%s) at it, and "
                          "let this user use it", c->docker_socket));
        free (err);
        return;
    }
    if (remote) {
        ah_host_info_t info;
        self->driver->host_info (self->driver, &info);
        s_add (self, "host", true, ah_strf ("host %s (%s) answers: agenthold hostd %s, protocol %lld; "
                                            "%zu sandbox(es)", info.name, info.endpoint, info.version,
                                            (long long) info.protocol, n), NULL);
    }
    else
        s_add (self, "host", true, ah_strf ("the Docker Engine at %s answers (in this process: the "
                                            "server holds the socket); %zu sandbox(es)",
                                            c->docker_socket, n), NULL);
    ah_engine_facts_t f;
    rc = remote ? ah_remote_engine_facts (self->driver, &f, &err)
                : ah_docker_engine_facts (self->driver, &f, &err);
    if (rc != 0) {
        s_add (self, "engine", false, strdup (err ? err : "the engine cannot be asked"),
               strdup ("start the Docker Engine on the host"));
        free (err);
        return;
    }
    s_add (self, "engine", true, ah_strf ("Docker %s, API %s", f.version, f.api_version), NULL);
    bool isolated = f.seccomp && f.runtime_ok;
    s_add (self, "isolation", isolated,
           ah_strf ("seccomp %s, AppArmor %s, user namespaces %s%s, runtime %s%s",
                    f.seccomp ? "on" : "OFF", f.apparmor ? "on" : "off", f.userns ? "on" : "off",
                    f.rootless ? " (rootless engine)" : "", *f.runtime ? f.runtime : "the default",
                    f.runtime_ok ? "" : " (NOT INSTALLED)"),
           !f.runtime_ok ? ah_strf ("install the OCI runtime '%s' in the engine, or set "
                                    "sandbox.docker.runtime to none", f.runtime)
                         : strdup ("run the engine with its default seccomp profile (no "
                                   "--seccomp-profile=unconfined): sandboxes rely on it"));
    s_firewall (self, remote, &f);
    if (f.free_bytes < 0)
        s_add (self, "disk", false, ah_strf ("the free space under %s cannot be seen from here",
                                             *f.root_dir ? f.root_dir : "the engine's root"),
               strdup ("run agenthold doctor on the host where the engine keeps its volumes"));
    else
        s_add (self, "disk", f.free_bytes >= DISK_MIN_FREE,
               ah_strf ("%.1f GiB free of %.1f GiB under %s (homes and images live there)",
                        (double) f.free_bytes / GIB, (double) f.total_bytes / GIB, f.root_dir),
               ah_strf ("free space under %s (at least %lld GiB): remove unused images and "
                        "destroyed agents' leftovers", f.root_dir, (long long) (DISK_MIN_FREE / GIB)));
    //  The catalog's images and the default image, on the host.
    ah_catalog_t *catalog = ah_catalog_load (c->catalog_path, &err);
    if (!catalog) {
        s_add (self, "images", false, ah_strf ("the catalog %s: %s", c->catalog_path, err ? err : "?"),
               strdup ("fix the catalog file (catalog.path; docs/catalog.md)"));
        free (err);
        return;
    }
    char *missing = strdup ("");
    size_t images = 0;
    for (size_t i = 0; i <= ah_catalog_size (catalog); i++) {
        const char *image = i < ah_catalog_size (catalog) ? ah_catalog_at (catalog, i)->image
                                                          : c->default_image;
        bool exists = false;
        char *why = NULL;
        images++;
        if (self->driver->image_exists (self->driver, image, &exists, &why) != 0 || !exists) {
            char *more = ah_strf ("%s%s%s", missing, *missing ? ", " : "", image);
            free (missing);
            missing = more;
        }
        free (why);
    }
    if (!*missing)
        s_add (self, "images", true, ah_strf ("all %zu images of the catalog and sandbox.default_image "
                                              "are on the host", images), NULL);
    else
        s_add (self, "images", false, ah_strf ("missing on the host: %s", missing),
               strdup ("start the server: its builder makes the images the catalog builds; pull "
                       "the others on the host (an image from a registry is never pulled by a "
                       "create)"));
    free (missing);
    ah_catalog_destroy (&catalog);
}

//  The tunnel as a sandbox reaches it. Docker sandboxes dial the unix
//  socket they mount: hostd connects to the one it mounts (the server's,
//  or its relay's, which goes on to the server) and says whether the
//  tunnel answers behind it (remote); the server's own socket is tried
//  here (docker). The fake driver's sandboxes dial sandbox.tunnel_listen.
static void
s_tunnel (doctor_t *self)
{
    const ah_config_t *c = self->config;
    char *detail = NULL, *err = NULL;
    bool ok = false;
    if (self->driver && self->driver->host_info) {
        if (ah_remote_tunnel_check (self->driver, &ok, &detail, &err) != 0) {
            s_add (self, "tunnel", false, ah_strf ("cannot ask the host agent: %s", err ? err : "?"),
                   ah_strf ("start `agenthold hostd` where %s points (docs/hostd.md)",
                            c->remote_endpoint));
            free (err);
            return;
        }
        s_add (self, "tunnel", ok, ah_strf ("as the host agent's sandboxes see it: %s", detail),
               strdup ("start agenthold serve; hostd must mount the server's sandbox.tunnel_socket "
                       "(the same server.data_dir, or the same key, in its configuration), or relay "
                       "to the server's tunnel_listen with hostd.tunnel_relay (docs/hostd.md)"));
        free (detail);
        return;
    }
    if (self->driver) {
        char *sock = ah_config_tunnel_socket (c);
        ok = ah_relay_probe_socket (sock, &detail) == 0;
        s_add (self, "tunnel", ok, ah_strf ("as sandboxes see it: %s", detail ? detail : "?"),
               ah_strf ("start agenthold serve: its tunnel listens on %s, which every sandbox "
                        "mounts (sandbox.tunnel_socket)", sock ? sock : "?"));
        free (detail);
        free (sock);
        return;
    }
    char host [256];
    int port;
    const char *tcp = ah_config_tunnel_tcp (c, NULL);
    if (!tcp || ah_config_split_listen (tcp, host, sizeof host, &port))
        return;
    const char *addr = *host && strcmp (host, "0.0.0.0") && strcmp (host, "::") ? host : "127.0.0.1";
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port) };
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ok = fd >= 0 && inet_pton (AF_INET, addr, &sin.sin_addr) == 1
      && connect (fd, (struct sockaddr *) &sin, sizeof sin) == 0;
    int saved = errno;
    if (fd >= 0)
        close (fd);
    s_add (self, "tunnel", ok,
           ok ? ah_strf ("the tunnel listens on %s (sandbox.tunnel_listen %s: %s)", addr, c->tunnel_listen, tcp)
              : ah_strf ("nothing answers on %s:%d (sandbox.tunnel_listen %s: %s): %s", addr, port,
                         c->tunnel_listen, tcp, strerror (saved)),
           strdup ("start agenthold serve; the fake driver's sandboxes dial this port"));
}

static void
s_tls (doctor_t *self)
{
    const ah_config_t *c = self->config;
    char host [256];
    int port;
    bool loopback = ah_config_split_listen (c->listen, host, sizeof host, &port) == 0
                 && (!strcmp (host, "127.0.0.1") || !strcmp (host, "::1") || !strcmp (host, "localhost"));
    if (!c->tls_cert) {
        s_add (self, "tls", loopback, ah_strf ("plain HTTP on %s%s", c->listen,
                                               loopback ? " (loopback only)" : ""),
               strdup ("set server.tls_cert and server.tls_key, or keep server.listen on loopback "
                       "behind a proxy that speaks TLS"));
        return;
    }
    FILE *f = fopen (c->tls_cert, "r");
    X509 *cert = f ? PEM_read_X509 (f, NULL, NULL, NULL) : NULL;
    if (f)
        fclose (f);
    f = fopen (c->tls_key, "r");
    EVP_PKEY *key = f ? PEM_read_PrivateKey (f, NULL, NULL, NULL) : NULL;
    if (f)
        fclose (f);
    if (!cert || !key) {
        s_add (self, "tls", false, ah_strf ("%s cannot be read as a PEM %s", !cert ? c->tls_cert : c->tls_key,
                                            !cert ? "certificate" : "private key"),
               strdup ("point server.tls_cert and server.tls_key at PEM files this user can read"));
    }
    else
    if (X509_check_private_key (cert, key) != 1)
        s_add (self, "tls", false, ah_strf ("%s is not the key of %s", c->tls_key, c->tls_cert),
               strdup ("give the certificate's own private key"));
    else {
        int days = 0, secs = 0;
        ASN1_TIME_diff (&days, &secs, NULL, X509_get0_notAfter (cert));
        bool ok = days > 14;
        s_add (self, "tls", ok, ah_strf ("%s: expires in %d day(s)", c->tls_cert, days),
               strdup ("renew the certificate (the server reads it at start: restart it)"));
    }
    X509_free (cert);
    EVP_PKEY_free (key);
}

//  The uid of the running server (the pid in its lock file), or -1.
static long
s_running_server_uid (const ah_config_t *c, long *pid)
{
    char *path = ah_strf ("%s/agenthold.lock", c->data_dir);
    FILE *f = path ? fopen (path, "r") : NULL;
    free (path);
    *pid = 0;
    if (!f || fscanf (f, "%ld", pid) != 1 || *pid <= 0) {
        if (f)
            fclose (f);
        return -1;
    }
    fclose (f);
    char *status = ah_strf ("/proc/%ld/status", *pid);
    f = status ? fopen (status, "r") : NULL;
    free (status);
    long uid = -1;
    char line [256];
    while (f && fgets (line, sizeof line, f))
        if (sscanf (line, "Uid: %*d %ld", &uid) == 1)
            break;
    if (f)
        fclose (f);
    return uid;
}

//  Who the server runs as, and that it cannot open the Docker socket when
//  a local hostd holds it: a child becomes the server's user as serve
//  does (ah_privsep_drop) and tries to connect.
static void
s_server_user (doctor_t *self)
{
    const ah_config_t *c = self->config;
    if (!ah_privsep_applies (c)) {
        char *detail;
        if (geteuid () != 0)
            detail = ah_strf ("the server runs as whoever starts it (uid %u here)%s; server.user "
                              "applies when serve starts as root", (unsigned) geteuid (),
                              strcmp (c->driver, "docker") ? "" : ", holding the Docker socket itself");
        else
        if (!c->user)
            detail = ah_strf ("server.user none: %s", strcmp (c->driver, "docker")
                              ? "the server runs as root"
                              : "the server runs as root and holds the Docker socket itself "
                                "(one process; docs/hostd.md)");
        else
            detail = ah_strf ("sandbox.driver %s: the server runs as whoever starts it (root here); "
                              "server.user applies with the docker driver", c->driver);
        s_add (self, "server user", true, detail, NULL);
        return;
    }
    uid_t uid;
    gid_t gid;
    char *err = NULL;
    if (ah_privsep_user (c, &uid, &gid, &err)) {
        s_add (self, "server user", false, err,
               strdup ("make the user, or set server.user: none (docs/hostd.md)"));
        return;
    }
    pid_t pid = fork ();
    if (pid == 0) {
        char *why = NULL;
        if (ah_privsep_drop (uid, gid, &why))
            _exit (2);
        _exit (ah_privsep_socket_answers (c->docker_socket) ? 1 : 0);
    }
    int status = 0;
    if (pid < 0 || waitpid (pid, &status, 0) != pid || !WIFEXITED (status))
        status = 2 << 8;
    int outcome = WEXITSTATUS (status);
    long server_pid;
    long running = s_running_server_uid (c, &server_pid);
    char *also = running < 0 ? strdup ("")
               : ah_strf ("; the running server (pid %ld) runs as uid %ld", server_pid, running);
    if (outcome == 0 && running != 0)
        s_add (self, "server user", true,
               ah_strf ("the server runs as %s (uid %u, gid %u), which cannot open %s; agenthold "
                        "hostd (root) holds it, on %s%s", c->user, (unsigned) uid, (unsigned) gid,
                        c->docker_socket, c->hostd_endpoint, also), NULL);
    else
    if (outcome == 0)
        s_add (self, "server user", false,
               ah_strf ("the server should run as %s, but the running one (pid %ld) runs as root",
                        c->user, server_pid),
               strdup ("restart it with this configuration: agenthold serve started as root runs "
                       "the server as server.user"));
    else
    if (outcome == 1)
        s_add (self, "server user", false,
               ah_strf ("%s (uid %u, gid %u), the server's user, can open %s%s", c->user,
                        (unsigned) uid, (unsigned) gid, c->docker_socket, also),
               ah_strf ("the server must hold no way to the Docker Engine: take %s out of the "
                        "socket's group (docker) and keep the socket mode 0660 root:docker",
                        c->user));
    else
        s_add (self, "server user", false,
               ah_strf ("cannot become %s (uid %u, gid %u) to try the Docker socket", c->user,
                        (unsigned) uid, (unsigned) gid),
               strdup ("run agenthold doctor as root"));
    free (also);
    free (err);
}

static void
s_admin_token (doctor_t *self)
{
    char *path = ah_strf ("%s/admin.token", self->config->data_dir);
    struct stat st;
    if (stat (path, &st) != 0)
        s_add (self, "admin token", false, ah_strf ("%s: %s", path, strerror (errno)),
               strdup ("start the server once: it writes the admin token there (mode 0600); if "
                       "the token exists but the file is gone, make another admin token"));
    else
        s_add (self, "admin token", (st.st_mode & 077) == 0,
               ah_strf ("%s: mode %04o", path, (unsigned) (st.st_mode & 07777)),
               ah_strf ("chmod 600 %s: whoever reads it is the server's admin", path));
    free (path);
}

int
ah_cli_doctor (const char *config_path, bool json)
{
    doctor_t self = { .checks = json_array () };
    char *err = NULL;
    ah_config_t *config = ah_config_load (config_path, &err);
    if (!config)
        s_add (&self, "configuration", false, strdup (err ? err : "cannot be loaded"),
               strdup ("fix the key it names (docs/configuration.md); AGENTHOLD_* variables "
                       "override the file"));
    else {
        s_add (&self, "configuration", true,
               ah_strf ("%s, driver %s, data %s", config_path ? config_path : "the usual sources",
                        config->driver, config->data_dir), NULL);
        self.config = config;
        s_database (&self);
        s_lua (&self);
        s_server_user (&self);
        //  Where serve would run a local hostd, the checks ask that hostd.
        if (ah_privsep_applies (config) && ah_privsep_server_config (config, &err) != 0)
            s_add (&self, "host", false, strdup (err ? err : "?"), strdup ("set hostd.endpoint to an ipc:// path"));
        else
            s_host (&self);
        s_tunnel (&self);
        s_tls (&self);
        s_admin_token (&self);
    }
    free (err);
    if (json) {
        json_t *out = json_pack ("{s:b s:O}", "ok", self.problems == 0, "checks", self.checks);
        char *text = ah_cmd_clean_json_text (json_dumps (out, JSON_INDENT (2)));
        printf ("%s\n", text ? text : "{}");
        free (text);
        json_decref (out);
    }
    else {
        size_t i;
        json_t *c;
        ah_cmd_clean_json (self.checks);        //  details quote the engine, hostd, files
        json_array_foreach (self.checks, i, c) {
            printf ("%-4s %-16s %s\n", json_string_value (json_object_get (c, "status")),
                    json_string_value (json_object_get (c, "name")),
                    json_string_value (json_object_get (c, "detail")));
            const char *advice = json_string_value (json_object_get (c, "advice"));
            if (advice)
                printf ("     %-16s -> %s\n", "", advice);
        }
        printf (self.problems ? "%d problem(s)\n" : "all is well\n", self.problems);
    }
    json_decref (self.checks);
    if (self.driver)
        self.driver->destroy_driver (&self.driver);
    ah_config_destroy (&config);
    return self.problems ? 1 : 0;
}
