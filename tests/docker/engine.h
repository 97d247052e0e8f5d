/*  tests/docker/engine.h: a tiny Docker Engine API client for the Docker
    tests and benchmarks, so they can check what the driver did (and do
    what an operator would do by hand: stop, rm -f) without the docker
    CLI. Single-threaded use only (the negotiated version is a static of
    the test program's main thread).                                    */
#ifndef AH_TEST_ENGINE_H
#define AH_TEST_ENGINE_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "config/config.h"

//  AH_TEST_DOCKER_SOCKET overrides the socket (a path with no engine shows
//  the skip: exit 77).
#define ENG_SOCKET (getenv ("AH_TEST_DOCKER_SOCKET") ? getenv ("AH_TEST_DOCKER_SOCKET") \
                                                     : "/var/run/docker.sock")
#define ENG_SKIP   77
#define ENG_FN     static __attribute__ ((unused))

static char eng_version [16];

typedef struct { char *data; size_t size; } eng_buf_t;

ENG_FN size_t
eng_write (char *p, size_t s, size_t n, void *u)
{
    eng_buf_t *b = u;
    char *g = realloc (b->data, b->size + s * n + 1);
    if (!g)
        return 0;
    b->data = g;
    memcpy (b->data + b->size, p, s * n);
    b->size += s * n;
    b->data [b->size] = 0;
    return s * n;
}

ENG_FN size_t
eng_header (char *p, size_t s, size_t n, void *u)
{
    if (s * n > 12 && strncasecmp (p, "Api-Version:", 12) == 0)
        sscanf (p + 12, " %15[0-9.]", eng_version);
    return s * n;
}

//  method + path (printf-style, without the /vX.Y prefix) + optional JSON
//  body; returns the body (caller frees, "" when none) and *status.
ENG_FN char *
eng_call (const char *method, const char *body, long *status, const char *fmt, ...)
{
    char path [2048], url [2200];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (path, sizeof path, fmt, ap);
    va_end (ap);
    snprintf (url, sizeof url, "http://docker%s%s%s", *eng_version ? "/v" : "", eng_version, path);
    CURL *c = curl_easy_init ();
    eng_buf_t b = { calloc (1, 1), 0 };
    struct curl_slist *h = curl_slist_append (NULL, "Content-Type: application/json");
    h = curl_slist_append (h, "Expect:");
    curl_easy_setopt (c, CURLOPT_UNIX_SOCKET_PATH, ENG_SOCKET);
    curl_easy_setopt (c, CURLOPT_URL, url);
    curl_easy_setopt (c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt (c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt (c, CURLOPT_CONNECTTIMEOUT, 3L);
    curl_easy_setopt (c, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt (c, CURLOPT_NOSIGNAL, 1L);
    if (body || !strcmp (method, "POST")) {
        curl_easy_setopt (c, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt (c, CURLOPT_POSTFIELDSIZE, (long) (body ? strlen (body) : 0));
    }
    curl_easy_setopt (c, CURLOPT_WRITEFUNCTION, eng_write);
    curl_easy_setopt (c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt (c, CURLOPT_HEADERFUNCTION, eng_header);
    *status = 0;
    if (curl_easy_perform (c) == CURLE_OK)
        curl_easy_getinfo (c, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all (h);
    curl_easy_cleanup (c);
    return b.data;
}

//  The same, parsed (NULL when not JSON or not 2xx).
ENG_FN json_t *
eng_json (const char *method, const char *body, long *status, const char *fmt, const char *arg)
{
    char *text = eng_call (method, body, status, fmt, arg);
    json_t *j = (*status >= 200 && *status < 300) ? json_loads (text, 0, NULL) : NULL;
    free (text);
    return j;
}

//  true when an engine answers /_ping (and learns its version).
ENG_FN bool
eng_available (void)
{
    curl_global_init (CURL_GLOBAL_DEFAULT);
    long st;
    free (eng_call ("GET", NULL, &st, "/_ping"));
    return st == 200 && *eng_version;
}

ENG_FN int
eng_skip (const char *test)
{
    fprintf (stderr, "\n*** %s SKIPPED: no Docker Engine at %s ***\n\n", test, ENG_SOCKET);
    return ENG_SKIP;
}

//  Removes every container, network and volume labelled with this prefix.
ENG_FN void
eng_cleanup_prefix (const char *prefix)
{
    char f [256];
    snprintf (f, sizeof f, "%%7B%%22label%%22%%3A%%5B%%22agenthold.prefix%%3D%s%%22%%5D%%7D", prefix);
    long st;
    json_t *j = eng_json ("GET", NULL, &st, "/containers/json?all=1&filters=%s", f);
    size_t i; json_t *it;
    json_array_foreach (j, i, it)
        free (eng_call ("DELETE", NULL, &st, "/containers/%s?force=true&v=true",
                        json_string_value (json_object_get (it, "Id"))));
    json_decref (j);
    j = eng_json ("GET", NULL, &st, "/networks?filters=%s", f);
    json_array_foreach (j, i, it)
        free (eng_call ("DELETE", NULL, &st, "/networks/%s", json_string_value (json_object_get (it, "Id"))));
    json_decref (j);
    j = eng_json ("GET", NULL, &st, "/volumes?filters=%s", f);
    json_array_foreach (json_object_get (j, "Volumes"), i, it)
        free (eng_call ("DELETE", NULL, &st, "/volumes/%s?force=true",
                        json_string_value (json_object_get (it, "Name"))));
    json_decref (j);
}

//  Counts the objects left with this prefix (containers + networks + volumes).
ENG_FN int
eng_count_prefix (const char *prefix)
{
    char f [256];
    snprintf (f, sizeof f, "%%7B%%22label%%22%%3A%%5B%%22agenthold.prefix%%3D%s%%22%%5D%%7D", prefix);
    long st;
    int n = 0;
    json_t *j = eng_json ("GET", NULL, &st, "/containers/json?all=1&filters=%s", f);
    n += (int) json_array_size (j);
    json_decref (j);
    j = eng_json ("GET", NULL, &st, "/networks?filters=%s", f);
    n += (int) json_array_size (j);
    json_decref (j);
    j = eng_json ("GET", NULL, &st, "/volumes?filters=%s", f);
    n += (int) json_array_size (json_object_get (j, "Volumes"));
    json_decref (j);
    return n;
}

//  Runs argv (a JSON array text) in the container with a tty (raw output);
//  returns the output (caller frees) and *exit_code.
ENG_FN char *
eng_exec_as (const char *container, const char *user, const char *argv_json, int *exit_code)
{
    char body [4096];
    snprintf (body, sizeof body,
              "{\"AttachStdout\":true,\"AttachStderr\":true,\"Tty\":true,\"User\":\"%s\",\"Cmd\":%s}",
              user ? user : "", argv_json);
    long st;
    json_t *j = eng_json ("POST", body, &st, "/containers/%s/exec", container);
    *exit_code = -1;
    const char *id = json_string_value (json_object_get (j, "Id"));
    if (!id) {
        json_decref (j);
        return strdup ("");
    }
    char *eid = strdup (id);
    json_decref (j);
    char *out = eng_call ("POST", "{\"Detach\":false,\"Tty\":true}", &st, "/exec/%s/start", eid);
    j = eng_json ("GET", NULL, &st, "/exec/%s/json", eid);
    if (json_is_integer (json_object_get (j, "ExitCode")))
        *exit_code = (int) json_integer_value (json_object_get (j, "ExitCode"));
    json_decref (j);
    free (eid);
    return out;
}

//  The same as the container's own user.
ENG_FN char *
eng_exec (const char *container, const char *argv_json, int *exit_code)
{
    return eng_exec_as (container, NULL, argv_json, exit_code);
}

//  Builds the busybox test image with tests/images/build-test-image.sh.
ENG_FN int
eng_build_test_image (const char *tag)
{
    char cmd [1024];
    snprintf (cmd, sizeof cmd, "%s/tests/images/build-test-image.sh '%s' %s >/dev/null",
              AH_SOURCE_DIR, tag, ENG_SOCKET);
    return system (cmd) == 0 ? 0 : -1;
}

ENG_FN void
eng_remove_image (const char *tag)
{
    long st;
    free (eng_call ("DELETE", NULL, &st, "/images/%s?force=true", tag));
}

//  A directory holding a placeholder sandboxd (a shell script that sleeps
//  until killed), for tests that need no tunnel. Returns the path of the
//  script (caller frees).
ENG_FN char *
eng_placeholder_sandboxd (const char *dir)
{
    mkdir (dir, 0755);
    char *path = NULL;
    if (asprintf (&path, "%s/sandboxd", dir) < 0)
        return NULL;
    FILE *f = fopen (path, "w");
    if (!f)
        return path;
    fputs ("#!/bin/sh\n# placeholder sandboxd for the Docker tests\nexec sleep 100000\n", f);
    fclose (f);
    chmod (path, 0755);
    return path;
}

//  What every Docker test and bench sets up: a unique name prefix, a test
//  image, a data directory, a placeholder sandboxd and a configuration.
typedef struct {
    char  prefix [64];                  //  <stem><pid>
    char  tag [96];                     //  agenthold-test:<prefix>
    char  dir [128];                    //  /tmp/<prefix>: data_dir
    char  sbdir [160];                  //  <dir>/bin: holds sandboxd
    char  dbpath [192];
    char *sandboxd;
    ah_config_t config;
} eng_fixture_t;

//  0, or -1 when the image cannot be built (said on stderr).
ENG_FN int
eng_fixture_init (eng_fixture_t *f, const char *stem, const char *pool)
{
    memset (f, 0, sizeof *f);
    snprintf (f->prefix, sizeof f->prefix, "%s%d", stem, getpid ());
    snprintf (f->tag, sizeof f->tag, "agenthold-test:%s", f->prefix);
    snprintf (f->dir, sizeof f->dir, "/tmp/%s", f->prefix);
    snprintf (f->sbdir, sizeof f->sbdir, "%s/bin", f->dir);
    snprintf (f->dbpath, sizeof f->dbpath, "%s/agenthold.db", f->dir);
    mkdir (f->dir, 0755);
    f->sandboxd = eng_placeholder_sandboxd (f->sbdir);
    f->config = (ah_config_t) {
        .data_dir = f->dir, .driver = "docker", .default_image = f->tag,
        .default_cpus = 1, .default_memory_mb = 128, .max_cpus = 2, .max_memory_mb = 512,
        .pids_limit = 100, .sandboxd_path = f->sandboxd, .docker_socket = ENG_SOCKET,
        .name_prefix = f->prefix, .network_pool = (char *) pool, .subnet_bits = 28,
    };
    if (eng_build_test_image (f->tag)) {
        fprintf (stderr, "cannot build the test image %s\n", f->tag);
        return -1;
    }
    return 0;
}

//  Removes every object of the prefix, the image and the directory.
//  Returns how many objects were still there after the clean-up (0).
ENG_FN int
eng_fixture_cleanup (eng_fixture_t *f)
{
    eng_cleanup_prefix (f->prefix);
    int left = eng_count_prefix (f->prefix);
    eng_remove_image (f->tag);
    char cmd [256];
    snprintf (cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system (cmd)) { /* nothing more to do */ }
    free (f->sandboxd);
    f->sandboxd = NULL;
    return left;
}

ENG_FN int
eng_cmp_double (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

//  The median of n values (sorts v).
ENG_FN double
eng_median (double *v, int n)
{
    qsort (v, n, sizeof *v, eng_cmp_double);
    return n % 2 ? v [n / 2] : (v [n / 2 - 1] + v [n / 2]) / 2;
}

//  A bench goal's verdict (bench/README.md): "met" when ratio <= goal,
//  "within noise" up to noise (a fraction) above it, else "MISSED" and
//  *rc = 3.
ENG_FN const char *
eng_verdict (double ratio, double goal, double noise, int *rc)
{
    if (ratio <= goal)
        return "met";
    if (ratio <= goal * (1 + noise))
        return "within noise";
    *rc = 3;
    return "MISSED";
}

//  Does the engine say the container name runs?
ENG_FN bool
eng_running (const char *name)
{
    long st;
    json_t *j = eng_json ("GET", NULL, &st, "/containers/%s/json", name);
    bool running = json_is_true (json_object_get (json_object_get (j, "State"), "Running"));
    json_decref (j);
    return running;
}

ENG_FN double
eng_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

#endif
