/*  drivers/docker/base.c: base images made without a registry. Where a
    runtime's base_image can be neither found nor pulled, the driver makes
    the bases it knows how to make: a Debian base of the host's own
    release ("debian:bookworm-slim", "debian:bookworm", "debian:12",
    "debian:12-slim" on a bookworm host), with mmdebstrap --variant=minbase
    from the host's own apt sources, imported through the Engine API
    (POST /images/create?fromSrc=-). Runs in the builder's worker thread;
    its stop flag ends mmdebstrap.                                       */
#include "drivers/docker/docker_int.h"
#include "proto/buf.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ROOTFS      (2048u << 20)   //  largest base tar we import

//  The host's release: VERSION_CODENAME and VERSION_ID of /etc/os-release
//  when it is Debian. 0 / -1.
static int
s_host_release (char *codename, size_t csize, char *version, size_t vsize)
{
    FILE *f = fopen ("/etc/os-release", "r");
    if (!f)
        return -1;
    char line [256];
    bool debian = false;
    *codename = *version = 0;
    while (fgets (line, sizeof line, f)) {
        line [strcspn (line, "\r\n")] = 0;
        char *eq = strchr (line, '=');
        if (!eq)
            continue;
        *eq = 0;
        char *value = eq + 1;
        if (*value == '"') {
            value++;
            value [strcspn (value, "\"")] = 0;
        }
        if (!strcmp (line, "ID"))
            debian = !strcmp (value, "debian");
        else if (!strcmp (line, "VERSION_CODENAME"))
            snprintf (codename, csize, "%s", value);
        else if (!strcmp (line, "VERSION_ID"))
            snprintf (version, vsize, "%s", value);
    }
    fclose (f);
    return debian && *codename ? 0 : -1;
}

int
ah_dk_base_suite (const char *image, char *suite, size_t size)
{
    char codename [64], version [32];
    if (s_host_release (codename, sizeof codename, version, sizeof version))
        return -1;
    const char *tag = NULL;
    if (!strncmp (image, "debian:", 7))
        tag = image + 7;
    else if (!strncmp (image, "docker.io/library/debian:", 25))
        tag = image + 25;
    else if (!strncmp (image, "library/debian:", 15))
        tag = image + 15;
    if (!tag)
        return -1;
    char want [4][80];
    snprintf (want [0], sizeof want [0], "%s", codename);
    snprintf (want [1], sizeof want [1], "%s-slim", codename);
    snprintf (want [2], sizeof want [2], "%s", version);
    snprintf (want [3], sizeof want [3], "%s-slim", version);
    for (int i = 0; i < 4; i++)
        if (*want [i] && !strcmp (tag, want [i])) {
            snprintf (suite, size, "%s", codename);
            return 0;
        }
    return -1;
}

//  The host's apt sources, as mmdebstrap reads them on stdin.
static const char *
s_sources (void)
{
    static const char *paths [] = { "/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list" };
    for (size_t i = 0; i < 2; i++) {
        struct stat st;
        if (stat (paths [i], &st) == 0 && st.st_size > 0)
            return paths [i];
    }
    return NULL;
}

//  The last lines of the log, for an error.
static char *
s_log_tail (const char *path)
{
    FILE *f = fopen (path, "r");
    if (!f)
        return strdup ("");
    char buf [600] = "";
    fseek (f, 0, SEEK_END);
    long size = ftell (f);
    fseek (f, size > 500 ? size - 500 : 0, SEEK_SET);
    size_t n = fread (buf, 1, sizeof buf - 1, f);
    buf [n] = 0;
    fclose (f);
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return strdup (buf);
}

static void
s_say (const ah_image_build_t *build, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
s_say (const ah_image_build_t *build, const char *fmt, ...)
{
    char text [256];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (text, sizeof text, fmt, ap);
    va_end (ap);
    ah_info (LOG_AREA, "%s", text);
    if (build->on_progress)
        build->on_progress (build->progress_arg, text);
}

//  mmdebstrap's path on PATH (found before the fork: the child of a
//  threaded process calls only async-signal-safe functions). Caller frees.
static char *
s_which (const char *name)
{
    const char *path = getenv ("PATH");
    char *copy = strdup (path && *path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    char *found = NULL, *save = NULL;
    for (char *dir = copy ? strtok_r (copy, ":", &save) : NULL; dir && !found; dir = strtok_r (NULL, ":", &save)) {
        char *candidate = ah_strf ("%s/%s", dir, name);
        if (candidate && access (candidate, X_OK) == 0)
            found = candidate;
        else
            free (candidate);
    }
    free (copy);
    return found;
}

//  mmdebstrap SUITE into tar_path. 0 / -1 with *err.
static int
s_mmdebstrap (docker_t *self, const ah_image_build_t *build, const char *suite, const char *tar_path,
              volatile int *stop, char **err)
{
    const char *sources = s_sources ();
    if (!sources) {
        ah_dk_err (err, "the host has no apt sources (/etc/apt/sources.list.d/debian.sources) to make a Debian base from");
        return -1;
    }
    char *program = s_which ("mmdebstrap");
    if (!program) {
        ah_dk_err (err, "making %s needs mmdebstrap, which is not installed here "
                   "(apt-get install mmdebstrap; ./scripts/install-deps installs it)", build->base_image);
        return -1;
    }
    char *log_path = ah_strf ("%s.log", tar_path);
    int in = open (sources, O_RDONLY | O_CLOEXEC);
    int out = log_path ? open (log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
    if (in < 0 || out < 0) {
        ah_dk_err (err, "cannot open %s or %s: %s", sources, log_path ? log_path : "the log", strerror (errno));
        if (in >= 0) close (in);
        if (out >= 0) close (out);
        free (log_path);
        free (program);
        return -1;
    }
    char *const argv [] = { "mmdebstrap", "--variant=minbase", "--mode=auto", "--format=tar",
                            "--aptopt=Acquire::Retries \"3\"", (char *) suite, (char *) tar_path, "-", NULL };
    pid_t pid = fork ();
    if (pid == 0) {
        //  Async-signal-safe calls only until execv.
        dup2 (in, 0);
        dup2 (out, 1);
        dup2 (out, 2);
        setpgid (0, 0);
        execv (program, argv);
        static const char msg [] = "exec mmdebstrap failed\n";
        if (write (2, msg, sizeof msg - 1) < 0)
            _exit (126);
        _exit (127);
    }
    free (program);
    close (in);
    close (out);
    if (pid < 0) {
        ah_dk_err (err, "cannot start mmdebstrap: %s", strerror (errno));
        free (log_path);
        return -1;
    }
    time_t started = time (NULL), said = started;
    int status = 0;
    bool stopped = false;
    for (;;) {
        pid_t r = waitpid (pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR))
            break;
        if (stop && *stop && !stopped) {
            kill (-pid, SIGTERM);
            stopped = true;
        }
        if (time (NULL) - said >= 5) {
            said = time (NULL);
            s_say (build, "making %s from the host's Debian mirror (mmdebstrap %s, %lld s)",
                   build->base_image, suite, (long long) (said - started));
        }
        usleep (200 * 1000);
    }
    int rc = 0;
    if (stopped) {
        ah_dk_err (err, "making %s: stopped (the server is shutting down)", build->base_image);
        rc = -1;
    }
    else
    if (!WIFEXITED (status) || WEXITSTATUS (status) != 0) {
        char *tail = s_log_tail (log_path);
        ah_dk_err (err, "making %s with mmdebstrap from the host's mirror failed (exit %d): %s",
                       build->base_image, WIFEXITED (status) ? WEXITSTATUS (status) : -1, tail ? tail : "");
        free (tail);
        rc = -1;
    }
    unlink (log_path);
    free (log_path);
    return rc;
}

//  Read the whole file into a buffer. 0 / -1 with *err.
static int
s_read_file (const char *path, ah_buf_t *buf, char **err)
{
    FILE *f = fopen (path, "rb");
    struct stat st;
    if (!f || fstat (fileno (f), &st) || st.st_size <= 0 || (uint64_t) st.st_size > MAX_ROOTFS) {
        ah_dk_err (err, "cannot read the base image's tar %s: %s", path,
                   !f ? strerror (errno) : "empty or larger than 2 GiB");
        if (f)
            fclose (f);
        return -1;
    }
    char chunk [1 << 16];
    size_t n;
    int rc = 0;
    while (rc == 0 && (n = fread (chunk, 1, sizeof chunk, f)) > 0)
        if (ah_buf_append (buf, chunk, n)) {
            ah_dk_err (err, "out of memory reading %s", path);
            rc = -1;
        }
    fclose (f);
    return rc;
}

static void
s_import_line (void *arg, const char *line, size_t len)
{
    char **error = arg;
    json_t *j = json_loadb (line, len, 0, NULL);
    const char *e = j ? json_string_value (json_object_get (j, "error")) : NULL;
    if (e && !*error)
        *error = strdup (e);
    json_decref (j);
}

int
ah_dk_import (docker_t *self, const char *image, const void *tar, size_t size,
              volatile int *stop, char **err)
{
    const char *colon = strrchr (image, ':');
    char *repo = colon ? strndup (image, (size_t) (colon - image)) : NULL;
    char *erepo = repo ? curl_easy_escape (NULL, repo, 0) : NULL;
    char *etag = colon ? curl_easy_escape (NULL, colon + 1, 0) : NULL;
    char *path = ah_strf ("/images/create?fromSrc=-&repo=%s&tag=%s", erepo ? erepo : "", etag ? etag : "");
    char *what = ah_strf ("importing %s", image);
    char *error = NULL;
    dk_stream_t how = {
        .call = { .what = what, .method = "POST", .body = tar, .body_size = size,
                  .content_type = "application/x-tar" },
        .on_line = s_import_line, .arg = &error, .stop = stop };
    int st = ah_dk_stream (self, &how, path, err);
    if (st == 1)
        ah_dk_err (err, "%s: stopped (the server is shutting down)", what);
    else if (st == 0 && error)
        ah_dk_err (err, "%s: %s", what, error);
    int rc = st == 0 && !error ? 0 : -1;
    free (error);
    free (what);
    free (path);
    curl_free (erepo);
    curl_free (etag);
    free (repo);
    return rc;
}

int
ah_dk_base_make (docker_t *self, const ah_image_build_t *build, const char *suite,
                 volatile int *stop, char **err)
{
    const char *image = build->base_image;
    char *tar_path = ah_strf ("%s/base-%s-XXXXXX", self->config->data_dir, suite);
    int fd = tar_path ? mkstemp (tar_path) : -1;
    if (fd < 0) {
        ah_dk_err (err, "making %s: cannot make a file under %s: %s", image, self->config->data_dir,
                   strerror (errno));
        free (tar_path);
        return -1;
    }
    close (fd);
    s_say (build, "making %s from the host's Debian mirror (mmdebstrap %s, about a minute)", image, suite);
    int rc = s_mmdebstrap (self, build, suite, tar_path, stop, err);
    ah_buf_t body;
    ah_buf_init (&body, 0);
    if (rc == 0)
        rc = s_read_file (tar_path, &body, err);
    unlink (tar_path);
    free (tar_path);
    if (rc == 0) {
        s_say (build, "importing %s (%zu MB)", image, ah_buf_size (&body) >> 20);
        rc = ah_dk_import (self, image, ah_buf_head (&body), ah_buf_size (&body), stop, err);
    }
    ah_buf_free (&body);
    if (rc == 0)
        s_say (build, "made %s from the host's Debian mirror", image);
    return rc;
}
