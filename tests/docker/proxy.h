/*  tests/docker/proxy.h: a unix-socket proxy in front of the Docker Engine
    that a test can kill and start again, to play an engine restart without
    touching the real one. It runs as a child process (the test binary
    re-executed with --proxy LISTEN TARGET), so killing it closes every
    connection at once, as an engine going away does.                  */
#ifndef AH_TEST_PROXY_H
#define AH_TEST_PROXY_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROXY_MAX_PAIRS 64

static int
s_proxy_unix (const char *path, bool listening)
{
    int fd = socket (AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf (a.sun_path, sizeof a.sun_path, "%s", path);
    if (listening) {
        unlink (path);
        if (bind (fd, (struct sockaddr *) &a, sizeof a) || listen (fd, 64)) {
            close (fd);
            return -1;
        }
    }
    else
    if (connect (fd, (struct sockaddr *) &a, sizeof a)) {
        close (fd);
        return -1;
    }
    return fd;
}

//  The child's whole life: accept, connect to target, pump both ways.
static int __attribute__ ((unused))
proxy_main (const char *listen_path, const char *target)
{
    int lfd = s_proxy_unix (listen_path, true);
    if (lfd < 0)
        return 1;
    int a [PROXY_MAX_PAIRS], b [PROXY_MAX_PAIRS];
    int n = 0;
    static char buf [65536];
    while (true) {
        struct pollfd p [1 + 2 * PROXY_MAX_PAIRS];
        p [0] = (struct pollfd) { .fd = lfd, .events = POLLIN };
        for (int i = 0; i < n; i++) {
            p [1 + 2 * i] = (struct pollfd) { .fd = a [i], .events = POLLIN };
            p [2 + 2 * i] = (struct pollfd) { .fd = b [i], .events = POLLIN };
        }
        if (poll (p, 1 + 2 * n, -1) < 0)
            continue;
        for (int i = n - 1; i >= 0; i--) {
            bool dead = false;
            for (int k = 0; k < 2 && !dead; k++) {
                struct pollfd *q = &p [1 + 2 * i + k];
                if (!(q->revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                ssize_t got = read (q->fd, buf, sizeof buf);
                int to = k == 0 ? b [i] : a [i];
                if (got <= 0)
                    dead = true;
                else
                for (ssize_t off = 0; off < got; ) {
                    ssize_t w = write (to, buf + off, got - off);
                    if (w <= 0) {
                        dead = true;
                        break;
                    }
                    off += w;
                }
            }
            if (dead) {
                close (a [i]);
                close (b [i]);
                a [i] = a [n - 1];
                b [i] = b [n - 1];
                n--;
            }
        }
        if (p [0].revents & POLLIN) {
            int c = accept (lfd, NULL, NULL);
            int t = c >= 0 ? s_proxy_unix (target, false) : -1;
            if (c >= 0 && t >= 0 && n < PROXY_MAX_PAIRS) {
                a [n] = c;
                b [n] = t;
                n++;
            }
            else {
                if (c >= 0) close (c);
                if (t >= 0) close (t);
            }
        }
    }
}

//  Starts the proxy (this binary with --proxy); waits until it listens.
static pid_t __attribute__ ((unused))
proxy_start (const char *self_exe, const char *listen_path, const char *target)
{
    unlink (listen_path);
    char *argv [] = { (char *) self_exe, "--proxy", (char *) listen_path, (char *) target, NULL };
    pid_t pid;
    extern char **environ;
    if (posix_spawn (&pid, "/proc/self/exe", NULL, NULL, argv, environ))
        return -1;
    for (int i = 0; i < 100; i++) {
        int fd = s_proxy_unix (listen_path, false);
        if (fd >= 0) {
            close (fd);
            return pid;
        }
        usleep (20 * 1000);
    }
    kill (pid, SIGKILL);
    waitpid (pid, NULL, 0);
    return -1;
}

static void __attribute__ ((unused))
proxy_kill (pid_t *pid)
{
    if (*pid > 0) {
        kill (*pid, SIGKILL);
        waitpid (*pid, NULL, 0);
    }
    *pid = -1;
}

#endif
