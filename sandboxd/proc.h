/*  sandboxd/proc.h: starting, watching and ending the processes of the pty
    and exec channels; the sandbox user; CPU accounting for stats.

    Children are started with fork (forkpty for terminals), and between
    fork and execve do only async-signal-safe things: the process may be
    the server itself (in-process mode), with other threads running. Every
    fd we open is O_CLOEXEC and the child also closes everything above 2
    (close_range), so no other instance's sockets leak into it. Exits are
    watched through a pidfd (pidfd_open, Linux 5.3+) so the loop sleeps in
    poll; without one the loop looks every 100 ms. A child's process group
    is its own (setsid for terminals, setpgid for exec): killing a channel
    kills the group.                                                    */
#ifndef AH_SANDBOXD_PROC_H
#define AH_SANDBOXD_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define AH_PROC_MAX_GROUPS  32
#define AH_PROC_DEFAULT_UID 10001   //  the agent's uid and gid when the image names none

typedef struct {
    char  name [64];            //  reported by hello
    bool  switch_to;            //  setuid/setgid to uid/gid in children
    uid_t uid;
    gid_t gid;
    gid_t groups [AH_PROC_MAX_GROUPS];  //  gid first, then the supplementary ones
    int   ngroups;
    char  shell [256];          //  login shell (exists), else /bin/sh
    bool  inherit_env;          //  children get sandboxd's environment (the
                                //  container's: the image's ENV and the
                                //  runtime's env vars) under the base
                                //  entries; false in-process (fake driver),
                                //  where it would be the server's
} ah_proc_user_t;

//  The account shells run as. When switch_user and we are root: the
//  `agent` account of /etc/passwd; else the user the image names
//  (AGENTHOLD_USER, "name", "uid", "name:group" or "uid:gid", written by
//  the driver from the image's USER) unless that is root; else uid and gid
//  AH_PROC_DEFAULT_UID. Otherwise the current user. The name comes from
//  /etc/passwd ("uid N" without an entry), the supplementary groups from
//  /etc/group.
void ah_proc_user_resolve (ah_proc_user_t *u, bool switch_user, const char *home);

//  Reads AGENTHOLD_USER for ah_proc_user_resolve and removes it from the
//  environment, so no shell or command of the agent inherits it. Called
//  once at start, before any thread.
void ah_proc_take_image_user (void);

//  At boot, as root: the home's top directory becomes u's (and gets
//  u+rwx); when it was not u's before (a new volume copies the image's
//  root-owned mount point), so does everything under it (symlinks not
//  followed, other file systems not entered). 0, or -1 with err.
int ah_proc_home_own (const ah_proc_user_t *u, const char *home, char *err, size_t err_size);

//  Switch this thread's file-system uid/gid to u's (on) or back to ours
//  (off), when u->switch_to. Returns whether it switched (call off only
//  then). Per thread (the raw syscalls, not glibc's broadcasting ones).
bool ah_proc_fs_as_user (const ah_proc_user_t *u, bool on);

typedef struct {
    pid_t pid;                  //  0 none
    int   pidfd;                //  -1 none
    int   pty;                  //  terminal master (pty channel)
    int   in, out, err;         //  pipes (exec channel)
    bool  exited;
    bool  reaped;
    int   wstatus;
} ah_proc_t;

void ah_proc_init (ah_proc_t *p);

//  Login shell on a new pty, in home, as u. 0, or -1 with err.
int ah_proc_spawn_pty (ah_proc_t *p, const ah_proc_user_t *u, const char *home,
                       const char *term, unsigned short cols, unsigned short rows,
                       char *err, size_t err_size);
//  /bin/sh -c cmd with pipes, in cwd_fd, as u, env entries added ("K=V").
int ah_proc_spawn_exec (ah_proc_t *p, const ah_proc_user_t *u, const char *home,
                        const char *cmd, int cwd_fd, const char * const *env, size_t nenv,
                        char *err, size_t err_size);

//  argv[0] (looked up in the environment's PATH unless it holds a slash)
//  with argv, on pipes, in cwd_fd, as u, env entries added ("K=V"), in a
//  process group of its own. 0, or -1 with err (errno ENOENT: no such
//  command).
int ah_proc_spawn_argv (ah_proc_t *p, const ah_proc_user_t *u, const char *home,
                        const char * const *argv, int cwd_fd, const char * const *env,
                        size_t nenv, char *err, size_t err_size);

//  Reap if it has exited: true when it just did (*cpu_ns: its CPU time).
bool ah_proc_poll_exit (ah_proc_t *p, int64_t *cpu_ns);
//  Kill the process group (if still running) and reap. Returns CPU ns.
int64_t ah_proc_kill_reap (ah_proc_t *p);
//  Close pty, pipes and pidfd.
void ah_proc_close_fds (ah_proc_t *p);

#endif
