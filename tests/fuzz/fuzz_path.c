/*  tests/fuzz/fuzz_path.c: libFuzzer target for sandboxd's path resolver
    (sandboxd/path.c).

    A fixture is built once: a home with directories, inner symlinks,
    symlinks that lead out (absolute, relative, chained, looping) and a
    sibling directory "outside" holding a file. The input is a request
    path (any bytes, NULs included). For each input:
      - the grammar (common/homepath.h, the one sandboxd checks with)
        never accepts an absolute path, a ".." or "." component but "."
        alone, an empty component, a NUL, or more than AH_HOMEPATH_MAX
        bytes;
      - ah_path_open and ah_path_open_parent either refuse with a
        negative errno and a message, or return an fd whose real path
        (/proc/self/fd) lies inside the home; they never return 0..2 or
        leak an fd (the count of open fds is the same afterwards).   */
#include "sandboxd/path.h"
#include "common/homepath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <ftw.h>
#include <unistd.h>

#define FAIL(...) do { fprintf (stderr, __VA_ARGS__); fputc ('\n', stderr); abort (); } while (0)

static int home_fd = -1;
static char home_real [PATH_MAX];
static char fixture [PATH_MAX];

static int s_rm (const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove (p) == 0 ? 0 : 0;
}

static void s_cleanup (void)
{
    if (fixture [0])
        nftw (fixture, s_rm, 16, FTW_DEPTH | FTW_PHYS);
}

static void s_link (const char *target, const char *name)
{
    char p [PATH_MAX * 2];
    snprintf (p, sizeof p, "%s/%s", home_real, name);
    if (symlink (target, p) != 0 && errno != EEXIST)
        FAIL ("symlink %s: %s", p, strerror (errno));
}

static void s_fixture (void)
{
    char tmpl [] = "/tmp/ah-fuzz-path-XXXXXX";
    if (!mkdtemp (tmpl))
        FAIL ("mkdtemp: %s", strerror (errno));
    snprintf (fixture, sizeof fixture, "%s", tmpl);
    atexit (s_cleanup);
    char p [PATH_MAX * 2];
    snprintf (p, sizeof p, "%s/home", tmpl);
    mkdir (p, 0755);
    if (!realpath (p, home_real))
        FAIL ("realpath");
    snprintf (p, sizeof p, "%s/outside", tmpl);
    mkdir (p, 0755);
    snprintf (p, sizeof p, "%s/outside/secret", tmpl);
    FILE *f = fopen (p, "w");
    if (f) {
        fputs ("secret\n", f);
        fclose (f);
    }
    const char *dirs [] = { "a", "a/b", "a/b/c", "d" };
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf (p, sizeof p, "%s/%s", home_real, dirs [i]);
        mkdir (p, 0755);
    }
    snprintf (p, sizeof p, "%s/a/file", home_real);
    f = fopen (p, "w");
    if (f)
        fclose (f);
    char outside [PATH_MAX * 2];
    snprintf (outside, sizeof outside, "%s/outside", tmpl);
    s_link (outside, "abs");
    s_link ("../outside", "rel");
    s_link ("a/b/../../../outside", "deep");
    s_link ("b/c", "a/in");
    s_link ("..", "a/up");              //  a/up -> home: allowed
    s_link ("../..", "a/up2");          //  escapes
    s_link ("chain2", "chain1");
    s_link ("a/up2", "chain2");
    s_link ("loop", "loop");
    s_link ("/", "root");
    home_fd = open (home_real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (home_fd < 0)
        FAIL ("open home: %s", strerror (errno));
}

static int s_count_fds (void)
{
    int n = 0;
    for (int fd = 0; fd < 256; fd++)
        if (fcntl (fd, F_GETFD) != -1)
            n++;
    return n;
}

static void s_inside (int fd, const char *what, const uint8_t *data, size_t size)
{
    if (fd >= 0 && fd <= 2)
        FAIL ("%s returned fd %d", what, fd);
    char link [64], real [PATH_MAX + 1];
    snprintf (link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink (link, real, PATH_MAX);
    if (n < 0)
        FAIL ("readlink %s: %s", link, strerror (errno));
    real [n] = 0;
    size_t hl = strlen (home_real);
    if (strncmp (real, home_real, hl) != 0 || (real [hl] != 0 && real [hl] != '/'))
        FAIL ("%s escaped the home: %s for input of %zu bytes \"%.*s\"", what, real,
              size, (int) size, (const char *) data);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (home_fd < 0)
        s_fixture ();
    const char *path = (const char *) data;
    const char *err = NULL;
    int rc = ah_homepath_check (path, size, AH_HOMEPATH_HOME, &err);
    if (rc == 0) {
        if (size == 0 || size > AH_HOMEPATH_MAX || path [0] == '/' || memchr (path, 0, size)
        ||  path [size - 1] == '/')
            FAIL ("ah_homepath_check accepted a bad path");
        for (size_t i = 0; i < size; i++) {
            bool start = i == 0 || path [i - 1] == '/';
            if (start && path [i] == '/')
                FAIL ("ah_homepath_check accepted an empty component");
            if (start && path [i] == '.' && size > 1 && (i + 1 == size || path [i + 1] == '/'))
                FAIL ("ah_homepath_check accepted \".\"");
            if (start && i + 1 < size && path [i] == '.' && path [i + 1] == '.'
            &&  (i + 2 == size || path [i + 2] == '/'))
                FAIL ("ah_homepath_check accepted \"..\"");
        }
    }
    else if (!err || (rc != -EINVAL && rc != -EACCES))
        FAIL ("ah_homepath_check: rc %d without a message", rc);

    int before = s_count_fds ();
    int fd = ah_path_open (home_fd, path, size, O_RDONLY | O_NONBLOCK, &err);
    if (fd >= 0) {
        s_inside (fd, "ah_path_open", data, size);
        close (fd);
    }
    else if (!err)
        FAIL ("ah_path_open: %d without a message", fd);
    char leaf [NAME_MAX + 1];
    fd = ah_path_open_parent (home_fd, path, size, leaf, &err);
    if (fd >= 0) {
        s_inside (fd, "ah_path_open_parent", data, size);
        if (!leaf [0] || strchr (leaf, '/') || !strcmp (leaf, ".") || !strcmp (leaf, ".."))
            FAIL ("ah_path_open_parent: bad leaf \"%s\"", leaf);
        close (fd);
    }
    else if (!err)
        FAIL ("ah_path_open_parent: %d without a message", fd);
    if (s_count_fds () != before)
        FAIL ("fd leak");
    return 0;
}
