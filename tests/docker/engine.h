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

#define ENG_SOCKET "/var/run/docker.sock"
#define ENG_SKIP   77

static char eng_version [16];

typedef struct { char *data; size_t size; } eng_buf_t;

static size_t
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

static size_t
eng_header (char *p, size_t s, size_t n, void *u)
{
    if (s * n > 12 && strncasecmp (p, "Api-Version:", 12) == 0)
        sscanf (p + 12, " %15[0-9.]", eng_version);
    return s * n;
}

//  method + path (printf-style, without the /vX.Y prefix) + optional JSON
//  body; returns the body (caller frees, "" when none) and *status.
static char *
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
static json_t *
eng_json (const char *method, const char *body, long *status, const char *fmt, const char *arg)
{
    char *text = eng_call (method, body, status, fmt, arg);
    json_t *j = (*status >= 200 && *status < 300) ? json_loads (text, 0, NULL) : NULL;
    free (text);
    return j;
}

//  true when an engine answers /_ping (and learns its version).
static bool
eng_available (void)
{
    curl_global_init (CURL_GLOBAL_DEFAULT);
    long st;
    free (eng_call ("GET", NULL, &st, "/_ping"));
    return st == 200 && *eng_version;
}

static int
eng_skip (const char *test)
{
    fprintf (stderr, "\n*** %s SKIPPED: no Docker Engine at %s ***\n\n", test, ENG_SOCKET);
    return ENG_SKIP;
}

//  Removes every container, network and volume labelled with this prefix.
static void
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
static int
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
static char *
eng_exec (const char *container, const char *argv_json, int *exit_code)
{
    char body [4096];
    snprintf (body, sizeof body,
              "{\"AttachStdout\":true,\"AttachStderr\":true,\"Tty\":true,\"Cmd\":%s}", argv_json);
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

//  Builds the busybox test image with tests/images/build-test-image.sh.
static int
eng_build_test_image (const char *tag)
{
    char cmd [1024];
    snprintf (cmd, sizeof cmd, "%s/tests/images/build-test-image.sh '%s' %s >/dev/null",
              AH_SOURCE_DIR, tag, ENG_SOCKET);
    return system (cmd) == 0 ? 0 : -1;
}

static void
eng_remove_image (const char *tag)
{
    long st;
    free (eng_call ("DELETE", NULL, &st, "/images/%s?force=true", tag));
}

//  A directory holding a placeholder sandboxd (a shell script that sleeps
//  until killed), for tests that need no tunnel. Returns the path of the
//  script (caller frees).
static char *
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

static double
eng_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

#endif
