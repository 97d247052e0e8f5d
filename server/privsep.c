/*  server/privsep.c: `agenthold serve` started as root (see privsep.h).

    DESIGN. Three processes. The monitor is the process `serve` started
    as: root, one thread (it creates none and runs before anything that
    would: no ZeroMQ, no libwebsockets, no SQLite), no socket but the
    checks below. It
      1. resolves server.user (refusing root, and a missing user with how
         to make it or turn the mode off);
      2. checks the Docker socket answers (else the in-process driver's
         advice, so the first start says the same as before);
      3. makes server.data_dir and gives the server's user what an
         earlier root run left there (not homes/: the sandboxes' files);
      4. starts hostd: fork, then exec of this binary as `agenthold hostd`
         with the same configuration and hostd.server_user set, in a
         process group of its own, with PDEATHSIG; waits until its ipc
         socket answers;
      5. forks the server, which drops to the user (setgroups, setresgid,
         setresuid, no_new_privs, checked), sets PDEATHSIG (a change of
         credentials clears it), checks it can use its data directory and
         TLS files, and runs ah_server_run with sandbox.driver remote;
      6. waits on a signalfd (SIGINT, SIGTERM, SIGHUP: passed on to the
         server; SIGCHLD: a dead hostd is restarted after a backoff, the
         server's exit ends the monitor: it stops hostd and exits with
         the server's status).
    Both children are in process groups of their own, so a terminal's
    Ctrl-C reaches the monitor alone and the server gets it once.    */
#include "server/privsep.h"
#include "common/log.h"
#include "common/str.h"
#include "server/serve.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <libgen.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define AREA                "serve"
#define HOSTD_START_MS      30000       //  hostd's socket answers within this at start
#define HOSTD_STOP_MS       30000       //  then SIGKILL
#define HOSTD_GONE_MS       15000       //  an earlier serve's hostd has this long to go at start
#define RESTART_MIN_MS      1000
#define RESTART_MAX_MS      30000
#define RESTART_STABLE_MS   60000       //  a hostd that ran this long restarts after the minimum

typedef struct {
    ah_config_t *config;
    uid_t    uid;
    gid_t    gid;
    char    *ipc_path;          //  hostd's socket
    pid_t    monitor;
    pid_t    server;
    pid_t    hostd;
    int64_t  hostd_started;
    int64_t  restart_at;        //  0: no restart due
    int      backoff_ms;
    int      signal_fd;
    sigset_t old_mask;
} monitor_t;

static int64_t
s_now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

//  0, or the errno of a connect to the unix socket at path.
static int
s_connect_unix (const char *path)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (strlen (path) >= sizeof addr.sun_path)
        return ENAMETOOLONG;
    strcpy (addr.sun_path, path);
    int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    int rc = connect (fd, (struct sockaddr *) &addr, sizeof addr) == 0 ? 0 : errno;
    close (fd);
    return rc;
}

bool
ah_privsep_socket_answers (const char *path)
{
    return s_connect_unix (path) == 0;
}

bool
ah_privsep_applies (const ah_config_t *config)
{
    return geteuid () == 0 && config->user && config->driver && strcmp (config->driver, "docker") == 0;
}

int
ah_privsep_user (const ah_config_t *config, uid_t *uid, gid_t *gid, char **err)
{
    const char *user = config->user ? config->user : "?";
    struct passwd *pw = getpwnam (user);
    char *end = NULL;
    long n = strtol (user, &end, 10);
    if (!pw && end && end != user && !*end && n > 0)
        pw = getpwuid ((uid_t) n);
    if (!pw) {
        *err = ah_strf ("server.user '%s': no such user. Started as root, agenthold serve runs the "
                        "server as that user, without the Docker socket (a local agenthold hostd "
                        "holds it). Make the user: `useradd --system --user-group --home-dir "
                        "/var/lib/agenthold --no-create-home --shell /usr/sbin/nologin %s` "
                        "(scripts/install-deps does it), or set `server.user: none` "
                        "(AGENTHOLD_SERVER_USER=none) to run one root process that holds the "
                        "socket itself", user, user);
        return -1;
    }
    if (pw->pw_uid == 0 || pw->pw_gid == 0) {
        *err = ah_strf ("server.user '%s' is root (uid %u, gid %u): name an unprivileged user, "
                        "or `none` for one root process", user, (unsigned) pw->pw_uid,
                        (unsigned) pw->pw_gid);
        return -1;
    }
    *uid = pw->pw_uid;
    *gid = pw->pw_gid;
    return 0;
}

int
ah_privsep_server_config (ah_config_t *config, char **err)
{
    if (strncmp (config->hostd_endpoint, "ipc://", 6) != 0) {
        *err = ah_strf ("hostd.endpoint = '%s': the host agent agenthold serve starts for "
                        "server.user listens on this machine, on ipc:// only", config->hostd_endpoint);
        return -1;
    }
    char *driver = strdup ("remote");
    char *endpoint = strdup (config->hostd_endpoint);
    if (!driver || !endpoint) {
        free (driver);
        free (endpoint);
        *err = strdup ("out of memory");
        return -1;
    }
    free (config->driver);
    config->driver = driver;
    free (config->remote_endpoint);
    config->remote_endpoint = endpoint;
    free (config->remote_server_key);
    config->remote_server_key = NULL;
    return 0;
}

int
ah_privsep_drop (uid_t uid, gid_t gid, char **err)
{
    if (uid == 0 || gid == 0) {
        *err = strdup ("refusing to become root");
        return -1;
    }
    if (setgroups (1, &gid) != 0 || setresgid (gid, gid, gid) != 0 || setresuid (uid, uid, uid) != 0) {
        *err = ah_strf ("cannot become uid %u gid %u: %s", (unsigned) uid, (unsigned) gid,
                        strerror (errno));
        return -1;
    }
    if (prctl (PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        *err = ah_strf ("cannot set no_new_privs: %s", strerror (errno));
        return -1;
    }
    uid_t ru, eu, su;
    gid_t rg, eg, sg, groups [2];
    int ngroups = getgroups (2, groups);
    if (getresuid (&ru, &eu, &su) != 0 || getresgid (&rg, &eg, &sg) != 0
    ||  ru != uid || eu != uid || su != uid || rg != gid || eg != gid || sg != gid
    ||  ngroups != 1 || groups [0] != gid) {
        *err = ah_strf ("after dropping to uid %u gid %u the process's ids are not those",
                        (unsigned) uid, (unsigned) gid);
        return -1;
    }
    if (setuid (0) == 0 || seteuid (0) == 0 || setgid (0) == 0 || setgroups (0, NULL) == 0) {
        *err = strdup ("after dropping privileges the process could become root again");
        return -1;
    }
    return 0;
}

//  -------------------------------------------------------------------------
//  The data directory: what an earlier root run left there becomes the
//  server user's. nftw's callback takes no argument: these are set just
//  before the walk, in the monitor's one thread.

static struct {
    uid_t       uid;
    gid_t       gid;
    const char *homes;          //  <data_dir>/homes: the sandboxes' files, never touched
    size_t      count;
    int         error;
} s_walk;

static int
s_give (const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void) ftw;
    if (type == FTW_D && strcmp (path, s_walk.homes) == 0)
        return FTW_SKIP_SUBTREE;
    //  Only root's files, and no hard link (a link to a file elsewhere
    //  would hand that file over).
    if (st->st_uid != 0 || type == FTW_SL || (!S_ISDIR (st->st_mode) && st->st_nlink != 1))
        return FTW_CONTINUE;
    if (lchown (path, s_walk.uid, s_walk.gid) != 0) {
        s_walk.error = errno;
        return FTW_STOP;
    }
    s_walk.count++;
    return FTW_CONTINUE;
}

static int
s_prepare_data_dir (monitor_t *m, char **err)
{
    const ah_config_t *c = m->config;
    if (ah_server_make_data_dir (c->data_dir, err))
        return -1;
    if (chown (c->data_dir, m->uid, m->gid) != 0) {
        *err = ah_strf ("cannot give the data directory %s to server.user %s: %s", c->data_dir,
                        c->user, strerror (errno));
        return -1;
    }
    char *homes = ah_strf ("%s/homes", c->data_dir);
    s_walk.uid = m->uid;
    s_walk.gid = m->gid;
    s_walk.homes = homes;
    s_walk.count = 0;
    s_walk.error = 0;
    int rc = homes ? nftw (c->data_dir, s_give, 16, FTW_PHYS | FTW_ACTIONRETVAL) : -1;
    free (homes);
    if (rc != 0 || s_walk.error) {
        *err = ah_strf ("cannot give the files in %s to server.user %s: %s", c->data_dir, c->user,
                        strerror (s_walk.error ? s_walk.error : errno));
        return -1;
    }
    if (s_walk.count > 0)
        ah_info (AREA, "gave %zu file(s) an earlier run as root left in %s to %s",
                 s_walk.count, c->data_dir, c->user);
    //  The tunnel's socket elsewhere: its directory, when we make it.
    char *sock = ah_config_tunnel_socket (c);
    char *dir = sock ? dirname (sock) : NULL;
    struct stat st;
    if (dir && stat (dir, &st) != 0 && errno == ENOENT) {
        if (mkdir (dir, 0755) != 0 || chown (dir, m->uid, m->gid) != 0)
            ah_warn (AREA, "cannot make %s for the tunnel's socket: %s", dir, strerror (errno));
    }
    free (sock);
    return 0;
}

//  In the server, once it is the user: what it must reach, or why not.
static int
s_check_reach (const ah_config_t *c, char **err)
{
    if (access (c->data_dir, R_OK | W_OK | X_OK) != 0) {
        *err = ah_strf ("the server's user %s cannot use its data directory %s (%s): every "
                        "directory above it must let that user through (e.g. chmod o+x), or set "
                        "server.data_dir elsewhere", c->user, c->data_dir, strerror (errno));
        return -1;
    }
    if (c->lua_dir && access (c->lua_dir, R_OK | X_OK) != 0) {
        *err = ah_strf ("the server's user %s cannot read policy.lua_dir %s (%s): chmod it (and "
                        "its scripts) readable by that user", c->user, c->lua_dir, strerror (errno));
        return -1;
    }
    if (c->catalog_path && access (c->catalog_path, R_OK) != 0) {
        *err = ah_strf ("the server's user %s cannot read the catalog %s (%s): chmod it readable "
                        "by that user", c->user, c->catalog_path, strerror (errno));
        return -1;
    }
    const char *keys [] = { "server.tls_cert", "server.tls_key" };
    const char *paths [] = { c->tls_cert, c->tls_key };
    for (int i = 0; i < 2; i++)
        if (paths [i] && access (paths [i], R_OK) != 0) {
            *err = ah_strf ("%s %s: the server's user %s cannot read it (%s): chown %s %s, or "
                            "chgrp it to that user's group and chmod 640", keys [i], paths [i],
                            c->user, strerror (errno), c->user, paths [i]);
            return -1;
        }
    return 0;
}

//  -------------------------------------------------------------------------
//  The children

//  In a child, first: its own process group (a terminal's Ctrl-C is the
//  monitor's to pass on), and the monitor's signal mask undone.
static void
s_child_begin (monitor_t *m)
{
    setpgid (0, 0);
    close (m->signal_fd);
    sigprocmask (SIG_SETMASK, &m->old_mask, NULL);
}

//  Dies with the monitor. After any change of credentials (which clears it).
static void
s_die_with_monitor (monitor_t *m)
{
    if (prctl (PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid () != m->monitor)
        _exit (1);
}

static int
s_start_hostd (monitor_t *m)
{
    pid_t pid = fork ();
    if (pid < 0) {
        ah_error (AREA, "cannot start agenthold hostd: fork: %s", strerror (errno));
        return -1;
    }
    if (pid == 0) {
        s_child_begin (m);
        s_die_with_monitor (m);
        const ah_config_t *c = m->config;
        if (setenv ("AGENTHOLD_HOSTD_SERVER_USER", c->user, 1) != 0
        ||  setenv ("AGENTHOLD_HOSTD_ENDPOINT", c->hostd_endpoint, 1) != 0
        ||  setenv ("AGENTHOLD_HOSTD_DATA_DIR", c->hostd_data_dir, 1) != 0)
            _exit (127);
        char *argv [] = { "agenthold", "hostd", c->file ? "--config" : NULL, c->file, NULL };
        execv ("/proc/self/exe", argv);
        ah_error (AREA, "cannot run agenthold hostd: exec /proc/self/exe: %s", strerror (errno));
        _exit (127);
    }
    m->hostd = pid;
    m->hostd_started = s_now_ms ();
    ah_info (AREA, "started agenthold hostd (pid %d, root) on %s", (int) pid, m->config->hostd_endpoint);
    return 0;
}

static int
s_wait_hostd (monitor_t *m, char **err)
{
    int64_t deadline = s_now_ms () + HOSTD_START_MS;
    while (s_now_ms () < deadline) {
        if (ah_privsep_socket_answers (m->ipc_path))
            return 0;
        int status;
        if (waitpid (m->hostd, &status, WNOHANG) == m->hostd) {
            m->hostd = 0;
            *err = strdup ("agenthold hostd exited at start (the lines above say why)");
            return -1;
        }
        usleep (50 * 1000);
    }
    *err = ah_strf ("agenthold hostd did not listen on %s within %d s", m->ipc_path,
                    HOSTD_START_MS / 1000);
    return -1;
}

//  The shipped files the server reads while it runs (lua/ for policy
//  reloads, the catalog's runtimes.json) sit in the tree the binary was
//  built from, which may be below a directory the server's user cannot
//  pass (a clone in /root, mode 0700). Opened as root before the drop and
//  reached afterwards through /proc/self/fd/N, the files are still the
//  same ones (an edited idle.lua is what a reload reads), and nothing
//  above them has to change mode. -1 when path is NULL or cannot be opened.
static int
s_keep_dir (const char *path, bool parent)
{
    if (!path)
        return -1;
    char *copy = strdup (path);
    int fd = copy ? open (parent ? dirname (copy) : copy, O_PATH | O_DIRECTORY) : -1;
    free (copy);
    return fd;
}

//  After the drop: *path through fd when the user cannot reach it by its
//  name (mode is what it needs: R_OK | X_OK for a directory, R_OK for a
//  file), said once in the log. fd is closed when it is not needed.
static void
s_reach_through (char **path, int fd, bool parent, int mode)
{
    if (fd < 0 || !*path)
        return;
    if (access (*path, mode) == 0 || errno != EACCES) {
        close (fd);
        return;
    }
    char *copy = strdup (*path);
    char *via = copy ? (parent ? ah_strf ("/proc/self/fd/%d/%s", fd, basename (copy))
                               : ah_strf ("/proc/self/fd/%d", fd)) : NULL;
    free (copy);
    if (via && access (via, mode) == 0) {
        ah_info (AREA, "the server's user cannot pass a directory above %s: it reads it through "
                 "a descriptor opened before the drop (%s)", *path, via);
        free (*path);
        *path = via;
    }
    else {
        free (via);
        close (fd);
    }
}

static int
s_start_server (monitor_t *m)
{
    pid_t pid = fork ();
    if (pid < 0) {
        ah_error (AREA, "cannot start the server: fork: %s", strerror (errno));
        return -1;
    }
    if (pid == 0) {
        s_child_begin (m);
        char *err = NULL;
        int lua_fd = s_keep_dir (m->config->lua_dir, false);
        int catalog_fd = s_keep_dir (m->config->catalog_path, true);
        if (ah_privsep_drop (m->uid, m->gid, &err)) {
            ah_error (AREA, "%s", err ? err : "cannot drop privileges");
            _exit (1);
        }
        s_reach_through (&m->config->lua_dir, lua_fd, false, R_OK | X_OK);
        s_reach_through (&m->config->catalog_path, catalog_fd, true, R_OK);
        if (s_check_reach (m->config, &err)) {
            ah_error (AREA, "%s", err ? err : "cannot drop privileges");
            _exit (1);
        }
        s_die_with_monitor (m);
        exit (ah_server_run (m->config));
    }
    m->server = pid;
    ah_info (AREA, "started the server (pid %d) as %s (uid %u, gid %u)", (int) pid, m->config->user,
             (unsigned) m->uid, (unsigned) m->gid);
    return 0;
}

static char *
s_how (int status)
{
    if (WIFSIGNALED (status))
        return ah_strf ("was ended by signal %d (%s)", WTERMSIG (status), strsignal (WTERMSIG (status)));
    return ah_strf ("exited with status %d", WEXITSTATUS (status));
}

static void
s_stop_hostd (monitor_t *m)
{
    if (m->hostd <= 0)
        return;
    kill (m->hostd, SIGTERM);
    int64_t deadline = s_now_ms () + HOSTD_STOP_MS;
    int status;
    while (waitpid (m->hostd, &status, WNOHANG) == 0) {
        if (s_now_ms () >= deadline) {
            ah_warn (AREA, "agenthold hostd (pid %d) did not stop within %d s: killing it",
                     (int) m->hostd, HOSTD_STOP_MS / 1000);
            kill (m->hostd, SIGKILL);
            waitpid (m->hostd, &status, 0);
            break;
        }
        usleep (50 * 1000);
    }
    m->hostd = 0;
}

//  Until the server exits; returns its exit status.
static int
s_monitor (monitor_t *m)
{
    int server_status = 1;
    while (m->server > 0) {
        int timeout = -1;
        if (m->restart_at) {
            int64_t left = m->restart_at - s_now_ms ();
            timeout = left > 0 ? (int) left : 0;
        }
        struct pollfd pfd = { .fd = m->signal_fd, .events = POLLIN };
        if (poll (&pfd, 1, timeout) < 0 && errno != EINTR) {
            ah_error (AREA, "poll: %s", strerror (errno));
            kill (m->server, SIGKILL);
        }
        struct signalfd_siginfo info;
        if ((pfd.revents & POLLIN) && read (m->signal_fd, &info, sizeof info) == sizeof info) {
            int signo = (int) info.ssi_signo;
            if (signo != SIGCHLD && m->server > 0)
                kill (m->server, signo);
        }
        int status;
        pid_t pid;
        while ((pid = waitpid (-1, &status, WNOHANG)) > 0) {
            char *how = s_how (status);
            if (pid == m->server) {
                m->server = 0;
                server_status = WIFEXITED (status) ? WEXITSTATUS (status) : 1;
                if (server_status != 0)
                    ah_warn (AREA, "the server (pid %d) %s", (int) pid, how);
            }
            else
            if (pid == m->hostd) {
                int64_t ran = s_now_ms () - m->hostd_started;
                int delay = ran >= RESTART_STABLE_MS ? RESTART_MIN_MS : m->backoff_ms;
                m->backoff_ms = delay * 2 < RESTART_MAX_MS ? delay * 2 : RESTART_MAX_MS;
                m->hostd = 0;
                m->restart_at = s_now_ms () + delay;
                ah_warn (AREA, "agenthold hostd (pid %d) %s; restarting it in %d s (its sandboxes "
                         "are unreachable meanwhile)", (int) pid, how, delay / 1000);
            }
            free (how);
        }
        if (m->server > 0 && m->restart_at && s_now_ms () >= m->restart_at) {
            m->restart_at = 0;
            if (s_start_hostd (m) != 0)
                m->restart_at = s_now_ms () + m->backoff_ms;
        }
    }
    return server_status;
}

int
ah_serve_main (ah_config_t *config)
{
    if (!ah_privsep_applies (config))
        return ah_server_run (config);

    monitor_t m = { .config = config, .monitor = getpid (), .signal_fd = -1,
                    .backoff_ms = RESTART_MIN_MS };
    sigset_t mask;
    sigemptyset (&mask);
    sigaddset (&mask, SIGINT);
    sigaddset (&mask, SIGTERM);
    sigaddset (&mask, SIGHUP);
    sigaddset (&mask, SIGCHLD);
    sigprocmask (SIG_BLOCK, &mask, &m.old_mask);
    signal (SIGPIPE, SIG_IGN);
    int status = 1;
    char *err = NULL;
    int why;
    if (ah_privsep_user (config, &m.uid, &m.gid, &err))
        goto out;
    if ((why = s_connect_unix (config->docker_socket)) != 0) {
        char *reason = ah_strf ("cannot connect to %s: %s", config->docker_socket, strerror (why));
        err = ah_server_docker_advice (config, reason);
        free (reason);
        goto out;
    }
    if (!config->hostd_data_dir || ah_privsep_server_config (config, &err)
    ||  !(m.ipc_path = strdup (config->hostd_endpoint + 6)))
        goto out;
    //  The hostd of a serve that was killed (kill -9, a crash) ends by
    //  itself (PDEATHSIG) but can still be shutting down, and answering,
    //  when serve is started again at once: it gets a while to go.
    for (int64_t until = s_now_ms () + HOSTD_GONE_MS; ah_privsep_socket_answers (m.ipc_path); ) {
        if (s_now_ms () >= until) {
            err = ah_strf ("something answers on %s already, and went on answering for %d s "
                           "(another agenthold serve, or a hostd of its own?): stop it, or give "
                           "this server another hostd.endpoint", m.ipc_path, HOSTD_GONE_MS / 1000);
            goto out;
        }
        usleep (100 * 1000);
    }
    if (s_prepare_data_dir (&m, &err))
        goto out;
    m.signal_fd = signalfd (-1, &mask, SFD_CLOEXEC);
    if (m.signal_fd < 0) {
        err = ah_strf ("signalfd: %s", strerror (errno));
        goto out;
    }
    ah_info (AREA, "started as root: the server runs as %s without the Docker socket; "
             "agenthold hostd (root) holds it (server.user; `none` for one root process)", config->user);
    if (s_start_hostd (&m) || s_wait_hostd (&m, &err) || s_start_server (&m))
        goto out;
    status = s_monitor (&m);
out:
    if (err)
        ah_error (AREA, "%s", err);
    free (err);
    if (m.server > 0) {
        kill (m.server, SIGTERM);
        waitpid (m.server, NULL, 0);
    }
    s_stop_hostd (&m);
    if (m.signal_fd >= 0)
        close (m.signal_fd);
    free (m.ipc_path);
    return status;
}
