/*  sandboxd/proc.c: see proc.h.  */
#include "sandboxd/proc.h"
#include "sandboxd/chan.h"
#include "sandboxd/passwd.h"

#include "common/log.h"

#include <dirent.h>
#include <ftw.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#define S_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

//  The image's USER ("name", "uid", "name:group", "uid:gid") into u; false
//  when it names root or nothing this image knows.
static bool s_image_user (const char *spec, ah_proc_user_t *u, ah_passwd_t *pw, bool *found)
{
    if (!spec || !*spec || strlen (spec) >= 128)
        return false;
    char buf [128];
    snprintf (buf, sizeof buf, "%s", spec);
    char *group = strchr (buf, ':');
    if (group)
        *group++ = 0;
    char *end = NULL;
    unsigned long n = strtoul (buf, &end, 10);
    bool numeric = *buf && end && *end == 0;
    if (numeric) {
        u->uid = (uid_t) n;
        *found = ah_passwd_find (NULL, NULL, u->uid, pw) == 0;
        u->gid = *found ? pw->gid : (gid_t) n;
    }
    else {
        if (ah_passwd_find (NULL, buf, 0, pw) != 0)
            return false;
        *found = true;
        u->uid = pw->uid;
        u->gid = pw->gid;
    }
    if (group && *group) {
        unsigned long g = strtoul (group, &end, 10);
        gid_t named;
        if (end && *end == 0)
            u->gid = (gid_t) g;
        else
        if (ah_group_find (NULL, group, &named) == 0)
            u->gid = named;
        else
            return false;
    }
    return u->uid != 0;
}

//  The image's USER as the driver handed it (AGENTHOLD_USER), taken out
//  of the environment before anything runs: it is the server's business,
//  not the agent's. NULL until taken (then getenv, for the unit tests).
static char s_image_user_spec [128];
static bool s_image_user_taken;

void ah_proc_take_image_user (void)
{
    const char *spec = getenv ("AGENTHOLD_USER");
    snprintf (s_image_user_spec, sizeof s_image_user_spec, "%s",
              spec && strlen (spec) < sizeof s_image_user_spec ? spec : "");
    s_image_user_taken = true;
    unsetenv ("AGENTHOLD_USER");
}

void ah_proc_user_resolve (ah_proc_user_t *u, bool switch_user, const char *home)
{
    memset (u, 0, sizeof *u);
    u->inherit_env = switch_user;
    ah_passwd_t pw;
    bool found = false;
    if (switch_user && geteuid () == 0) {
        u->switch_to = true;
        if (ah_passwd_find (NULL, "agent", 0, &pw) == 0 && pw.uid != 0) {
            found = true;
            u->uid = pw.uid;
            u->gid = pw.gid;
        }
        else
        if (!s_image_user (s_image_user_taken ? s_image_user_spec : getenv ("AGENTHOLD_USER"),
                           u, &pw, &found)) {
            u->uid = u->gid = AH_PROC_DEFAULT_UID;
            found = ah_passwd_find (NULL, NULL, u->uid, &pw) == 0;
            if (found)
                u->gid = pw.gid;
        }
    }
    else {
        u->uid = getuid ();
        u->gid = getgid ();
        found = ah_passwd_find (NULL, NULL, u->uid, &pw) == 0;
    }
    if (found)
        snprintf (u->name, sizeof u->name, "%s", pw.name);
    else
        snprintf (u->name, sizeof u->name, "uid %u", (unsigned) u->uid);
    u->ngroups = ah_group_list (NULL, found ? pw.name : NULL, u->gid, u->groups, AH_PROC_MAX_GROUPS);
    struct stat st;
    if (found && pw.shell [0] == '/' && stat (pw.shell, &st) == 0 && S_ISREG (st.st_mode)
    &&  (st.st_mode & 0111))
        snprintf (u->shell, sizeof u->shell, "%s", pw.shell);
    else
        snprintf (u->shell, sizeof u->shell, "/bin/sh");
    (void) home;
}

static uid_t s_own_uid;
static gid_t s_own_gid;

static int s_own_one (const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void) flag;
    (void) ftw;
    if ((st->st_uid != s_own_uid || st->st_gid != s_own_gid)
    &&  lchown (path, s_own_uid, s_own_gid) != 0)
        ah_warn ("sandboxd", "home: chown %s: %s", path, strerror (errno));
    return 0;
}

int ah_proc_home_own (const ah_proc_user_t *u, const char *home, char *err, size_t err_size)
{
    struct stat st;
    if (lstat (home, &st) != 0 || !S_ISDIR (st.st_mode)) {
        snprintf (err, err_size, "home %s: %s", home, errno ? strerror (errno) : "not a directory");
        return -1;
    }
    bool fresh = st.st_uid != u->uid;
    if (lchown (home, u->uid, u->gid) != 0 || chmod (home, (st.st_mode & 07777) | 0700) != 0) {
        snprintf (err, err_size, "home %s: making it uid %u's: %s", home, (unsigned) u->uid,
                  strerror (errno));
        return -1;
    }
    if (fresh) {
        //  Boot runs before any shell or command: nothing else walks the
        //  tree meanwhile, so nftw's own bookkeeping is enough.
        s_own_uid = u->uid;
        s_own_gid = u->gid;
        if (nftw (home, s_own_one, 32, FTW_PHYS | FTW_MOUNT) != 0)
            ah_warn ("sandboxd", "home: walking %s: %s", home, strerror (errno));
        ah_info ("sandboxd", "home %s was not %s's: the whole tree is now", home, u->name);
    }
    return 0;
}

bool ah_proc_fs_as_user (const ah_proc_user_t *u, bool on)
{
    if (!u->switch_to)
        return false;
    if (on) {
        //  The raw setgroups changes this thread only (glibc's would
        //  broadcast to every thread).
        syscall (SYS_setgroups, (size_t) u->ngroups, u->groups);
        syscall (SYS_setfsgid, u->gid);
        syscall (SYS_setfsuid, u->uid);
        //  setfsuid reports the previous value, never an error: ask again.
        if ((uid_t) syscall (SYS_setfsuid, (uid_t) -1) != u->uid)
            return false;
    }
    else {
        syscall (SYS_setfsuid, geteuid ());
        syscall (SYS_setfsgid, getegid ());
        syscall (SYS_setgroups, (size_t) 0, NULL);
    }
    return true;
}

void ah_proc_init (ah_proc_t *p)
{
    memset (p, 0, sizeof *p);
    p->pidfd = p->pty = p->in = p->out = p->err = -1;
}

extern char **environ;

//  Whether env (a NULL-terminated or n-long list) names the variable of entry.
static bool s_names (char *const *env, size_t n, const char *entry)
{
    size_t kl = strcspn (entry, "=") + 1;
    for (size_t j = 0; j < n && env [j]; j++)
        if (strncmp (env [j], entry, kl) == 0)
            return true;
    return false;
}

//  Build the environment: extras first (they win over the base for
//  getenv, which takes the first match), then the base entries they do
//  not name, then (inherit_env) the container's own environment, PATH
//  included, under both; the default PATH only when nothing named one.
//  Caller frees the array and each entry.
static char **s_envp (const ah_proc_user_t *u, const char *home, const char *term,
                      const char * const *extra, size_t nextra)
{
    char *base [6];
    size_t nb = 0, ninherit = 0;
    for (char **e = environ; u->inherit_env && e && *e; e++)
        ninherit++;
    if (asprintf (&base [nb], "HOME=%s", home) > 0) nb++;
    if (asprintf (&base [nb], "USER=%s", u->name) > 0) nb++;
    if (asprintf (&base [nb], "LOGNAME=%s", u->name) > 0) nb++;
    if (asprintf (&base [nb], "SHELL=%s", u->shell) > 0) nb++;
    if (term && asprintf (&base [nb], "TERM=%s", term) > 0) nb++;
    char **env = calloc (nextra + nb + ninherit + 2, sizeof *env);
    if (!env) {
        for (size_t i = 0; i < nb; i++)
            free (base [i]);
        return NULL;
    }
    size_t n = 0;
    for (size_t i = 0; i < nextra; i++)
        env [n++] = strdup (extra [i]);
    for (size_t i = 0; i < nb; i++) {
        if (!base [i])
            continue;
        size_t kl = strcspn (base [i], "=") + 1;
        bool named = false;
        for (size_t j = 0; j < nextra; j++)
            if (strncmp (extra [j], base [i], kl) == 0)
                named = true;
        if (named)
            free (base [i]);
        else
            env [n++] = base [i];
    }
    for (size_t i = 0; i < ninherit; i++)
        if (environ [i] && strchr (environ [i], '=') && !s_names (env, n, environ [i]))
            env [n++] = strdup (environ [i]);
    if (!s_names (env, n, S_PATH))
        env [n++] = strdup (S_PATH);
    return env;
}

static void s_free_env (char **env)
{
    for (size_t i = 0; env && env [i]; i++)
        free (env [i]);
    free (env);
}

//  In the child, between fork and execve: async-signal-safe calls only.
static void s_child_setup (const ah_proc_user_t *u, int cwd_fd, const char *home)
{
    struct sigaction sa;
    memset (&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++)
        sigaction (s, &sa, NULL);
    sigset_t none;
    sigemptyset (&none);
    sigprocmask (SIG_SETMASK, &none, NULL);
    if (cwd_fd >= 0 ? fchdir (cwd_fd) != 0 : chdir (home) != 0)
        _exit (126);
#ifdef SYS_close_range
    if (syscall (SYS_close_range, 3, ~0u, 0) != 0)
#endif
        for (int fd = 3; fd < 4096; fd++)
            close (fd);
    if (u->switch_to) {
        if (setgroups ((size_t) u->ngroups, u->groups) != 0 || setgid (u->gid) != 0
        ||  setuid (u->uid) != 0)
            _exit (126);
    }
}

static void s_nonblock (int fd)
{
    fcntl (fd, F_SETFL, fcntl (fd, F_GETFL) | O_NONBLOCK);
    fcntl (fd, F_SETFD, FD_CLOEXEC);
}

static void s_watch (ah_proc_t *p)
{
#ifdef SYS_pidfd_open
    p->pidfd = (int) syscall (SYS_pidfd_open, p->pid, 0);
#else
    p->pidfd = -1;
#endif
}

int ah_proc_spawn_pty (ah_proc_t *p, const ah_proc_user_t *u, const char *home,
                       const char *term, unsigned short cols, unsigned short rows,
                       char *err, size_t err_size)
{
    char **env = s_envp (u, home, term, NULL, 0);
    const char *slash = strrchr (u->shell, '/');
    char argv0 [300];
    snprintf (argv0, sizeof argv0, "-%s", slash ? slash + 1 : u->shell);
    char *argv [] = { argv0, NULL };
    if (!env) {
        snprintf (err, err_size, "out of memory");
        return -1;
    }
    struct winsize ws = { .ws_row = rows, .ws_col = cols };
    int master = -1;
    //  forkpty: openpty, fork, then login_tty in the child (setsid,
    //  TIOCSCTTY, the slave on 0/1/2).
    pid_t pid = forkpty (&master, NULL, NULL, &ws);
    if (pid < 0) {
        snprintf (err, err_size, "forkpty: %s", strerror (errno));
        s_free_env (env);
        return -1;
    }
    if (pid == 0) {
        s_child_setup (u, -1, home);
        execve (u->shell, argv, env);
        static const char msg [] = "sandboxd: cannot execute the login shell\r\n";
        if (write (2, msg, sizeof msg - 1) < 0) { }
        _exit (127);
    }
    s_free_env (env);
    s_nonblock (master);
    p->pid = pid;
    p->pty = master;
    s_watch (p);
    return 0;
}

//  The file argv0 names: itself when it holds a slash, else the first
//  regular, executable file of that name in env's PATH (as the shell
//  would look it up). 0 with path set, or -1 with err.
static int s_lookup (const char *argv0, char * const *env, char *path, size_t path_size,
                     char *err, size_t err_size)
{
    if (strchr (argv0, '/')) {
        if (snprintf (path, path_size, "%s", argv0) >= (int) path_size) {
            snprintf (err, err_size, "%.100s: path too long", argv0);
            return -1;
        }
        return 0;
    }
    const char *search = &S_PATH [5];     //  past "PATH="
    for (size_t i = 0; env && env [i]; i++)
        if (strncmp (env [i], "PATH=", 5) == 0) {
            search = env [i] + 5;
            break;
        }
    for (const char *d = search; *d; ) {
        size_t dl = strcspn (d, ":");
        struct stat st;
        if (dl && snprintf (path, path_size, "%.*s/%s", (int) dl, d, argv0) < (int) path_size
        &&  stat (path, &st) == 0 && S_ISREG (st.st_mode) && (st.st_mode & 0111))
            return 0;
        d += dl;
        if (*d == ':')
            d++;
    }
    snprintf (err, err_size, "%.100s: command not found in PATH", argv0);
    errno = ENOENT;
    return -1;
}

int ah_proc_spawn_argv (ah_proc_t *p, const ah_proc_user_t *u, const char *home,
                        const char * const *argv, int cwd_fd, const char * const *extra,
                        size_t nextra, char *err, size_t err_size)
{
    int in [2] = { -1, -1 }, out [2] = { -1, -1 }, er [2] = { -1, -1 };
    char **env = s_envp (u, home, NULL, extra, nextra);
    char path [PATH_MAX];
    if (!env) {
        snprintf (err, err_size, "out of memory");
        errno = ENOMEM;
        goto fail;
    }
    if (s_lookup (argv [0], env, path, sizeof path, err, err_size))
        goto fail;
    if (pipe2 (in, O_CLOEXEC) || pipe2 (out, O_CLOEXEC) || pipe2 (er, O_CLOEXEC)) {
        snprintf (err, err_size, "pipe: %s", strerror (errno));
        goto fail;
    }
    pid_t pid = fork ();
    if (pid < 0) {
        snprintf (err, err_size, "fork: %s", strerror (errno));
        goto fail;
    }
    if (pid == 0) {
        setpgid (0, 0);
        //  dup2 clears close-on-exec on 0, 1, 2.
        if (dup2 (in [0], 0) < 0 || dup2 (out [1], 1) < 0 || dup2 (er [1], 2) < 0)
            _exit (126);
        s_child_setup (u, cwd_fd, home);
        execve (path, (char * const *) argv, env);
        static const char msg [] = "sandboxd: cannot execute the command\n";
        if (write (2, msg, sizeof msg - 1) < 0) { }
        _exit (127);
    }
    setpgid (pid, pid);         //  both sides: no window where kill(-pid) misses
    close (in [0]);
    close (out [1]);
    close (er [1]);
    s_free_env (env);
    s_nonblock (in [1]);
    s_nonblock (out [0]);
    s_nonblock (er [0]);
    p->pid = pid;
    p->in = in [1];
    p->out = out [0];
    p->err = er [0];
    s_watch (p);
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        if (in [i] >= 0) close (in [i]);
        if (out [i] >= 0) close (out [i]);
        if (er [i] >= 0) close (er [i]);
    }
    s_free_env (env);
    return -1;
}

int ah_proc_spawn_exec (ah_proc_t *p, const ah_proc_user_t *u, const char *home,
                        const char *cmd, int cwd_fd, const char * const *extra, size_t nextra,
                        char *err, size_t err_size)
{
    const char *argv [] = { "/bin/sh", "-c", cmd, NULL };
    return ah_proc_spawn_argv (p, u, home, argv, cwd_fd, extra, nextra, err, err_size);
}

static int64_t s_ru_ns (const struct rusage *ru)
{
    return ((int64_t) ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1000000000
         + ((int64_t) ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) * 1000;
}

bool ah_proc_poll_exit (ah_proc_t *p, int64_t *cpu_ns)
{
    *cpu_ns = 0;
    if (p->pid <= 0 || p->exited)
        return false;
    struct rusage ru;
    int st = 0;
    pid_t r = wait4 (p->pid, &st, WNOHANG, &ru);
    if (r == 0 || (r < 0 && errno == EINTR))
        return false;
    p->exited = p->reaped = true;
    if (r == p->pid) {
        p->wstatus = st;
        *cpu_ns = s_ru_ns (&ru);
    }
    else
        p->wstatus = 255 << 8;      //  reaped by someone else (SIGCHLD ignored?): unknown
    if (p->pidfd >= 0) {
        close (p->pidfd);
        p->pidfd = -1;
    }
    return true;
}

int64_t ah_proc_kill_reap (ah_proc_t *p)
{
    int64_t ns = 0;
    if (p->pid > 0 && !p->reaped) {
        kill (-p->pid, SIGKILL);
        kill (p->pid, SIGKILL);
        struct rusage ru;
        int st;
        pid_t r;
        do
            r = wait4 (p->pid, &st, 0, &ru);
        while (r < 0 && errno == EINTR);
        if (r == p->pid) {
            ns = s_ru_ns (&ru);
            if (!p->exited)
                p->wstatus = st;
        }
        p->exited = p->reaped = true;
    }
    if (p->pidfd >= 0) {
        close (p->pidfd);
        p->pidfd = -1;
    }
    return ns;
}

void ah_proc_close_fds (ah_proc_t *p)
{
    int *fds [] = { &p->pty, &p->in, &p->out, &p->err };
    for (size_t i = 0; i < 4; i++)
        if (*fds [i] >= 0) {
            close (*fds [i]);
            *fds [i] = -1;
        }
}

//  ---------------------------------------------------------------------
//  CPU accounting

typedef struct { pid_t pid, ppid; uint64_t ticks; } s_ps_t;

//  /proc/PID/stat: "pid (comm) state ppid ... utime stime cutime cstime"
//  (fields 14-17). comm may hold spaces and parentheses: parse after the
//  last ')'.
static int s_read_stat (int procfd, const char *name, s_ps_t *out)
{
    char path [64];
    snprintf (path, sizeof path, "%s/stat", name);
    int fd = openat (procfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char buf [1024];
    ssize_t n = read (fd, buf, sizeof buf - 1);
    close (fd);
    if (n <= 0)
        return -1;
    buf [n] = 0;
    char *rp = strrchr (buf, ')');
    if (!rp)
        return -1;
    char state;
    long long ppid;
    unsigned long long f [17];
    //  after ")": state(3) ppid(4) pgrp session tty_nr tpgid flags minflt
    //  cminflt majflt cmajflt utime(14) stime cutime cstime
    if (sscanf (rp + 1, " %c %lld %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu",
                &state, &ppid, &f [0], &f [1], &f [2], &f [3], &f [4], &f [5], &f [6], &f [7],
                &f [8], &f [9], &f [10], &f [11], &f [12]) != 15)
        return -1;
    out->pid = (pid_t) atoi (name);
    out->ppid = (pid_t) ppid;
    //  f[9..12] = utime stime cutime cstime (cutime/cstime are signed in
    //  the kernel but never negative in practice; clamp via unsigned read)
    out->ticks = f [9] + f [10] + f [11] + f [12];
    return 0;
}

static int s_cmp_pid (const void *a, const void *b)
{
    pid_t x = ((const s_ps_t *) a)->pid, y = ((const s_ps_t *) b)->pid;
    return x < y ? -1 : x > y;
}

static bool s_cgroup_ns (int64_t *ns)
{
    //  cgroup v1: cpuacct.usage is already in ns (either mount layout).
    static const char *v1 [] = { "/sys/fs/cgroup/cpuacct/cpuacct.usage",
                                 "/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage" };
    for (size_t i = 0; i < 2; i++) {
        FILE *f = fopen (v1 [i], "re");
        unsigned long long v;
        if (f && fscanf (f, "%llu", &v) == 1) {
            fclose (f);
            *ns = (int64_t) v;
            return true;
        }
        if (f)
            fclose (f);
    }
    FILE *f = fopen ("/sys/fs/cgroup/cpu.stat", "re");
    if (!f)
        return false;
    char line [256];
    bool ok = false;
    unsigned long long usec;
    while (fgets (line, sizeof line, f))
        if (sscanf (line, "usage_usec %llu", &usec) == 1) {
            *ns = (int64_t) usec * 1000;
            ok = true;
            break;
        }
    fclose (f);
    return ok;
}

int64_t ah_sbd_cpu_ns (ah_sandboxd_stats_t scope, const pid_t *roots, size_t nroots,
                       int64_t reaped_ns, const char **source)
{
    int64_t ns = 0;
    if (scope != AH_SANDBOXD_STATS_TREE && s_cgroup_ns (&ns)) {
        *source = "cgroup";
        return ns;
    }
    long hz = sysconf (_SC_CLK_TCK);
    if (hz <= 0)
        hz = 100;
    int procfd = open ("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = procfd >= 0 ? fdopendir (procfd) : NULL;
    if (!d) {
        if (procfd >= 0)
            close (procfd);
        *source = scope == AH_SANDBOXD_STATS_TREE ? "tree" : "proc";
        return reaped_ns;
    }
    s_ps_t *ps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir (d)) && n < 1000000) {
        if (de->d_name [0] < '1' || de->d_name [0] > '9')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            s_ps_t *p = realloc (ps, cap * sizeof *ps);
            if (!p)
                break;
            ps = p;
        }
        if (s_read_stat (dirfd (d), de->d_name, &ps [n]) == 0)
            n++;
    }
    closedir (d);
    uint64_t ticks = 0;
    if (scope != AH_SANDBOXD_STATS_TREE) {
        for (size_t i = 0; i < n; i++)
            ticks += ps [i].ticks;
        *source = "proc";
        reaped_ns = 0;      //  already inside the parents' cutime/cstime
    }
    else {
        qsort (ps, n, sizeof *ps, s_cmp_pid);
        for (size_t i = 0; i < n; i++) {
            //  Walk up at most 64 ancestors looking for one of the roots.
            pid_t cur = ps [i].pid;
            bool in_tree = false;
            for (int depth = 0; depth < 64 && cur > 1 && !in_tree; depth++) {
                for (size_t r = 0; r < nroots; r++)
                    if (roots [r] == cur)
                        in_tree = true;
                s_ps_t key = { .pid = cur };
                s_ps_t *hit = bsearch (&key, ps, n, sizeof *ps, s_cmp_pid);
                if (!hit)
                    break;
                cur = hit->ppid;
            }
            if (in_tree)
                ticks += ps [i].ticks;
        }
        *source = "tree";
    }
    free (ps);
    return (int64_t) (ticks * (1000000000ull / (uint64_t) hz)) + reaped_ns;
}
