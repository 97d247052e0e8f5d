/*  sandboxd/path.c: see path.h for why the walk is done this way.  */
#include "sandboxd/path.h"
#include "common/homepath.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

//  Room for the path plus spliced symlink targets. A walk whose pending
//  components outgrow it is refused rather than reallocated.
#define S_WORK_MAX (4 * AH_PATH_MAX)

typedef struct {
    int fds [AH_PATH_MAX_DEPTH];
    int n;                  //  fds[0..n-1] are ours; below them is the home
    int home;
} s_stack_t;

static int s_top (s_stack_t *st)
{
    return st->n ? st->fds [st->n - 1] : st->home;
}

static void s_clear (s_stack_t *st)
{
    while (st->n)
        close (st->fds [--st->n]);
}

//  Replace the pending work with target + "/" + rest. 0 or -errno.
static int s_splice (char *work, size_t *len, size_t rest_at,
                     const char *target, size_t tlen, const char **err)
{
    size_t rest = *len - rest_at;
    if (tlen + 1 + rest + 1 > S_WORK_MAX) {
        *err = "path too long after following symlinks";
        return -EINVAL;
    }
    memmove (work + tlen + 1, work + rest_at, rest);
    memcpy (work, target, tlen);
    work [tlen] = '/';
    *len = tlen + 1 + rest;
    work [*len] = 0;
    return 0;
}

//  Shared walk. parent: stop before the last component and return the
//  directory fd (copying the leaf); else open the last with flags.
static int s_walk (int home_fd, const char *path, size_t plen, bool parent,
                   int flags, char *leaf, const char **err)
{
    int rc = ah_homepath_check (path, plen, AH_HOMEPATH_HOME, err);
    if (rc)
        return rc;
    if (home_fd < 0) {
        *err = "home directory is not open";
        return -EBADF;
    }
    char work [S_WORK_MAX];
    if (plen)
        memcpy (work, path, plen);
    work [plen] = 0;
    size_t len = plen;
    size_t pos = 0;
    int links = 0;
    s_stack_t st = { .n = 0, .home = home_fd };

    while (true) {
        while (pos < len && work [pos] == '/')
            pos++;
        if (pos >= len) {
            //  Nothing left: the path names the current directory.
            if (parent) {
                *err = "path names the home or a directory itself, not an entry in it";
                rc = -EINVAL;
                goto out;
            }
            rc = openat (s_top (&st), ".", flags | O_NOFOLLOW | O_CLOEXEC, 0600);
            if (rc < 0) {
                rc = -errno;
                *err = strerror (-rc);
            }
            goto out;
        }
        size_t start = pos;
        while (pos < len && work [pos] != '/')
            pos++;
        size_t n = pos - start;
        size_t after = pos;
        while (after < len && work [after] == '/')
            after++;
        bool last = after >= len;
        char comp [NAME_MAX + 1];
        if (n > NAME_MAX) {
            *err = "a symlink target component is longer than NAME_MAX";
            rc = -EINVAL;
            goto out;
        }
        memcpy (comp, work + start, n);
        comp [n] = 0;

        if (strcmp (comp, ".") == 0 || strcmp (comp, "..") == 0) {
            //  A request path holds neither (common/homepath.h) but "." alone;
            //  a symlink target may.
            if (comp [1] == '.') {
                if (st.n == 0) {
                    *err = "the path escapes the home directory (symlink climbs out)";
                    rc = -EACCES;
                    goto out;
                }
                close (st.fds [--st.n]);
            }
            if (last && parent) {
                *err = "path names a directory itself, not an entry in it";
                rc = -EINVAL;
                goto out;
            }
            continue;
        }
        if (last && parent) {
            memcpy (leaf, comp, n + 1);
            if (st.n) {
                rc = st.fds [--st.n];       //  hand our fd over
            }
            else {
                rc = fcntl (home_fd, F_DUPFD_CLOEXEC, 0);
                if (rc < 0) {
                    rc = -errno;
                    *err = strerror (-rc);
                }
            }
            goto out;
        }
        int fd;
        if (last)
            fd = openat (s_top (&st), comp, flags | O_NOFOLLOW | O_CLOEXEC, 0600);
        else
            fd = openat (s_top (&st), comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            if (last) {
                rc = fd;
                goto out;
            }
            if (st.n == AH_PATH_MAX_DEPTH) {
                close (fd);
                *err = "path nests too deep";
                rc = -EINVAL;
                goto out;
            }
            st.fds [st.n++] = fd;
            continue;
        }
        int e = errno;
        if (e != ELOOP && e != ENOTDIR && e != EMLINK) {
            *err = strerror (e);
            rc = -e;
            goto out;
        }
        //  Maybe a symlink (O_NOFOLLOW refused it): read and splice it.
        char target [AH_PATH_MAX + 1];
        ssize_t t = readlinkat (s_top (&st), comp, target, sizeof target);
        if (t < 0) {
            //  Not a symlink after all: report the open's error.
            *err = strerror (e);
            rc = -e;
            goto out;
        }
        if ((size_t) t > AH_PATH_MAX) {
            *err = "symlink target too long";
            rc = -EINVAL;
            goto out;
        }
        if (t == 0) {
            *err = "empty symlink";
            rc = -ENOENT;
            goto out;
        }
        if (target [0] == '/') {
            *err = "the path escapes the home directory (symlink to an absolute path)";
            rc = -EACCES;
            goto out;
        }
        if (++links > AH_PATH_MAX_LINKS) {
            *err = "too many levels of symbolic links";
            rc = -ELOOP;
            goto out;
        }
        rc = s_splice (work, &len, pos, target, (size_t) t, err);
        if (rc)
            goto out;
        pos = 0;
    }
out:
    s_clear (&st);
    return rc;
}

int ah_path_open (int home_fd, const char *path, size_t len, int flags, const char **err)
{
    return s_walk (home_fd, path, len, false, flags, NULL, err);
}

int ah_path_open_parent (int home_fd, const char *path, size_t len,
                         char leaf [NAME_MAX + 1], const char **err)
{
    return s_walk (home_fd, path, len, true, 0, leaf, err);
}
