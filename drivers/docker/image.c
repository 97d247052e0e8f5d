/*  drivers/docker/image.c: the builder's image hooks. image_exists asks
    the engine; image_build sends a build context (a directory plus host
    files, as a tar) to POST /build, or pulls when there is no context.
    Build and pull answer with a stream of JSON lines (engine.c); an
    "error" in any of them is the failure. Both run for minutes in the
    builder's worker thread; its stop flag ends them.                   */
#include "drivers/docker/docker_int.h"
#include "proto/tar.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_CONTEXT     (512u << 20)    //  largest build context we send
#define MAX_DEPTH       16              //  directories nested in a context

int
ah_dk_image_exists (ah_driver_t *driver, const char *image, bool *exists, char **err)
{
    docker_t *self = driver->impl;
    *exists = false;
    if (ah_dk_check_ident (AH_IDENT_IMAGE, image, "looking up an image", err))
        return -1;
    char *what = ah_strf ("looking up image '%s'", image);
    char *path = ah_strf ("/images/%s/json", image);
    long st = ah_dk_get (self, what, path, true, NULL, err);
    *exists = st == 200;
    free (path);
    free (what);
    return st > 0 ? 0 : -1;
}

int
ah_dk_image_id (ah_driver_t *driver, const char *image, char **id, char **err)
{
    docker_t *self = driver->impl;
    *id = NULL;
    if (ah_dk_check_ident (AH_IDENT_IMAGE, image, "looking up an image", err))
        return -1;
    char *esc = curl_easy_escape (NULL, image, 0);
    char *what = ah_strf ("looking up image '%s'", image);
    char *path = esc ? ah_strf ("/images/%s/json", esc) : NULL;
    curl_free (esc);
    json_t *j = NULL;
    long st = path ? ah_dk_get (self, what, path, true, &j, err) : -1;
    const char *got = json_string_value (json_object_get (j, "Id"));
    int rc = st == 404 || (st == 200 && got) ? 0 : -1;
    if (st == 200 && got && !(*id = strdup (got)))
        rc = -1;
    if (rc && !*err)
        *err = ah_strf ("looking up image '%s': the engine named no id", image);
    json_decref (j);
    free (path);
    free (what);
    return rc;
}

//  -------------------------------------------------------------------------
//  The build context: every regular file, directory and symlink under dir
//  (relative names), then the host files under their names. Sockets,
//  fifos and devices are not build context material: skipped.

typedef struct {
    ah_tar_t tar;
    char    *err;                       //  why it failed
} context_t;

//  The reason of a failed tar add, for name (from path, when a file).
static int
s_add_failed (context_t *cx, const char *name, const char *path)
{
    if (errno == ENAMETOOLONG)
        cx->err = ah_strf ("the name '%s' is longer than %d characters", name, AH_TAR_NAME_MAX);
    else
    if (errno == EFBIG)
        cx->err = ah_strf ("the build context is larger than %u MiB", MAX_CONTEXT >> 20);
    else
    if (errno == ENOMEM)
        cx->err = strdup ("out of memory");
    else
        cx->err = ah_strf ("cannot read %s: %s", path ? path : name,
                           errno == EINVAL ? "not a regular file" : strerror (errno));
    return -1;
}

static int
s_context_file (context_t *cx, const char *name, const char *path)
{
    return ah_tar_add_file (&cx->tar, name, path, 0, NULL) ? s_add_failed (cx, name, path) : 0;
}

static int s_context_dir (context_t *cx, const char *dir, const char *rel, int depth);

//  One directory entry: name in the context, path on the host.
static int
s_context_entry (context_t *cx, const char *dir, const char *name, const char *path, int depth)
{
    struct stat sb;
    if (lstat (path, &sb)) {
        cx->err = ah_strf ("cannot read %s: %s", path, strerror (errno));
        return -1;
    }
    if (S_ISDIR (sb.st_mode)) {
        char *dname = ah_strf ("%s/", name);
        int rc = dname && ah_tar_add (&cx->tar, dname, AH_TAR_DIR, sb.st_mode & 0777, NULL, 0, NULL)
               ? s_add_failed (cx, name, NULL) : 0;
        free (dname);
        return rc ? rc : s_context_dir (cx, dir, name, depth + 1);
    }
    if (S_ISLNK (sb.st_mode)) {
        char target [PATH_MAX];
        ssize_t n = readlink (path, target, sizeof target - 1);
        if (n < 0) {
            cx->err = ah_strf ("cannot read the link %s: %s", path, strerror (errno));
            return -1;
        }
        target [n] = 0;
        return ah_tar_add (&cx->tar, name, AH_TAR_SYMLINK, 0777, NULL, 0, target)
             ? s_add_failed (cx, name, NULL) : 0;
    }
    if (S_ISREG (sb.st_mode))
        return s_context_file (cx, name, path);
    return 0;
}

static int
s_context_dir (context_t *cx, const char *dir, const char *rel, int depth)
{
    if (depth > MAX_DEPTH) {
        cx->err = ah_strf ("the build context under %s is nested too deep", dir);
        return -1;
    }
    char *full = *rel ? ah_strf ("%s/%s", dir, rel) : strdup (dir);
    DIR *d = full ? opendir (full) : NULL;
    if (!d) {
        cx->err = ah_strf ("cannot read the build context %s: %s", full ? full : dir, strerror (errno));
        free (full);
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir (d))) {
        if (!strcmp (e->d_name, ".") || !strcmp (e->d_name, ".."))
            continue;
        char *name = *rel ? ah_strf ("%s/%s", rel, e->d_name) : strdup (e->d_name);
        char *path = ah_strf ("%s/%s", full, e->d_name);
        if (name && path)
            rc = s_context_entry (cx, dir, name, path, depth);
        else {
            cx->err = strdup ("out of memory");
            rc = -1;
        }
        free (name);
        free (path);
    }
    closedir (d);
    free (full);
    return rc;
}

//  -------------------------------------------------------------------------
//  Build and pull

//  What the stream of JSON lines said.
typedef struct {
    char   *error;                      //  the first error, if any
    char    last [256];                 //  the last progress line (context)
    const ah_image_build_t *build;      //  its on_progress, if any
} progress_t;

static void
s_progress_line (void *arg, const char *line, size_t len)
{
    progress_t *p = arg;
    json_t *j = json_loadb (line, len, 0, NULL);
    if (!j)
        return;
    const char *error = json_string_value (json_object_get (j, "error"));
    if (!error)
        error = json_string_value (json_object_get (json_object_get (j, "errorDetail"), "message"));
    if (error && !p->error)
        p->error = strdup (error);
    const char *text = json_string_value (json_object_get (j, "stream"));
    if (!text)
        text = json_string_value (json_object_get (j, "status"));
    if (text) {
        size_t n = strcspn (text, "\r\n");
        if (n) {
            //  A pull's layers say how far they are ("Downloading", 12 MB of 30).
            json_t *detail = json_object_get (j, "progressDetail");
            json_int_t cur = json_integer_value (json_object_get (detail, "current"));
            json_int_t total = json_integer_value (json_object_get (detail, "total"));
            const char *layer = json_string_value (json_object_get (j, "id"));
            if (total > 0)
                snprintf (p->last, sizeof p->last, "%.*s %.16s: %lld of %lld MB", (int) (n < 120 ? n : 120), text,
                          layer ? layer : "", (long long) (cur >> 20), (long long) (total >> 20));
            else
                snprintf (p->last, sizeof p->last, "%.*s", (int) (n < 255 ? n : 255), text);
            ah_debug (LOG_AREA, "image: %s", p->last);
            //  Steps and statuses, not every line a RUN prints.
            bool step = !strncmp (text, "Step ", 5) || json_object_get (j, "status");
            if (step && p->build && p->build->on_progress)
                p->build->on_progress (p->build->progress_arg, p->last);
        }
    }
    json_decref (j);
}

//  One streaming call (POST /build or /images/create). 0 / -1 with *err.
static int
s_image_stream (docker_t *self, const char *what, const char *path, const ah_buf_t *body,
                const ah_image_build_t *build, volatile int *stop, char **err)
{
    progress_t p = { .error = NULL, .build = build };
    dk_stream_t how = {
        .call = { .what = what, .method = "POST",
                  .body = body ? ah_buf_head (body) : NULL, .body_size = body ? ah_buf_size (body) : 0,
                  .content_type = "application/x-tar" },
        .on_line = s_progress_line, .arg = &p, .stop = stop };
    int rc = ah_dk_stream (self, &how, path, err);
    if (rc == 1)
        ah_dk_err (err, "%s: stopped (the server is shutting down)", what);
    else
    if (rc == 0 && p.error) {
        ah_dk_err (err, "%s: %s", what, p.error);
        rc = -1;
    }
    free (p.error);
    return rc == 0 ? 0 : -1;
}

//  build->base_image present: there, pulled, or made (base.c). 0 / -1.
static int
s_base_present (docker_t *self, ah_driver_t *driver, const ah_image_build_t *build,
                volatile int *stop, char **err)
{
    const char *base = build->base_image;
    bool exists = false;
    if (ah_dk_image_exists (driver, base, &exists, err))
        return -1;
    if (exists)
        return 0;
    if (build->on_progress) {
        char *text = ah_strf ("pulling %s", base);
        build->on_progress (build->progress_arg, text ? text : "pulling the base image");
        free (text);
    }
    char *esc = curl_easy_escape (NULL, base, 0);
    char *what = ah_strf ("pulling base image '%s'", base);
    char *path = ah_strf ("/images/create?fromImage=%s", esc ? esc : "");
    char *pull_err = NULL;
    int rc = s_image_stream (self, what, path, NULL, build, stop, &pull_err);
    curl_free (esc);
    free (path);
    free (what);
    char suite [64];
    if (rc && !(stop && *stop) && ah_dk_base_suite (base, suite, sizeof suite) == 0) {
        //  No registry answers (or it has no such image): make it here.
        ah_info (LOG_AREA, "%s; making it from the host's Debian mirror instead", pull_err ? pull_err : "no pull");
        rc = ah_dk_base_make (self, build, suite, stop, err);
    }
    else
    if (rc)
        ah_dk_err (err, "%s (this server makes only Debian bases of the host's own release without a registry)",
                   pull_err ? pull_err : "the base image cannot be pulled");
    free (pull_err);
    return rc;
}

int
ah_dk_image_build (ah_driver_t *driver, const ah_image_build_t *build, volatile int *stop, char **err)
{
    docker_t *self = driver->impl;
    if (!build) {
        ah_dk_err (err, "building an image: nothing to build");
        return -1;
    }
    if (ah_dk_check_ident (AH_IDENT_IMAGE, build->image, "building an image", err))
        return -1;
    char *esc = curl_easy_escape (NULL, build->image, 0);
    if (!build->context_dir && !build->dockerfile) {
        //  A pull: fromImage takes "name:tag" (a missing tag means latest).
        char *what = ah_strf ("pulling image '%s'", build->image);
        char *path = ah_strf ("/images/create?fromImage=%s", esc ? esc : "");
        int rc = s_image_stream (self, what, path, NULL, build, stop, err);
        curl_free (esc);
        free (path);
        free (what);
        return rc;
    }
    if (build->base_image && s_base_present (self, driver, build, stop, err)) {
        curl_free (esc);
        return -1;
    }
    char *what = ah_strf ("building image '%s' from %s", build->image,
                          build->context_dir ? build->context_dir : build->base_image ? build->base_image : "a Dockerfile");
    context_t cx = { .tar = { .max = MAX_CONTEXT } };
    int rc = 0;
    if (build->context_dir)
        rc = s_context_dir (&cx, build->context_dir, "", 0);
    if (rc == 0 && build->dockerfile
    &&  ah_tar_add (&cx.tar, "Dockerfile", AH_TAR_FILE, 0644, build->dockerfile, strlen (build->dockerfile), NULL))
        rc = s_add_failed (&cx, "Dockerfile", NULL);
    for (size_t i = 0; rc == 0 && i < build->n_files; i++)
        rc = s_context_file (&cx, build->file_names [i], build->file_paths [i]);
    if (rc == 0 && ah_tar_finish (&cx.tar))
        rc = s_add_failed (&cx, "", NULL);
    if (rc == 0) {
        char *labels = curl_easy_escape (NULL, "{\"agenthold.managed\":\"true\"}", 0);
        json_t *args = json_object ();
        for (size_t i = 0; i < build->n_build_args; i++) {
            const char *eq = strchr (build->build_args [i], '=');
            char *name = eq ? strndup (build->build_args [i], (size_t) (eq - build->build_args [i])) : NULL;
            if (name)
                json_object_set_new (args, name, json_string (eq + 1));
            free (name);
        }
        char *args_text = json_dumps (args, JSON_COMPACT);
        json_decref (args);
        char *eargs = args_text ? curl_easy_escape (NULL, args_text, 0) : NULL;
        free (args_text);
        char *path = ah_strf ("/build?t=%s&rm=1&forcerm=1&labels=%s&buildargs=%s", esc ? esc : "",
                              labels ? labels : "", eargs ? eargs : "");
        curl_free (eargs);
        curl_free (labels);
        rc = s_image_stream (self, what, path, &cx.tar.buf, build, stop, err);
        free (path);
    }
    else
        ah_dk_err (err, "%s: %s", what, cx.err ? cx.err : "cannot make the build context");
    if (rc == 0)
        ah_info (LOG_AREA, "built image %s", build->image);
    curl_free (esc);
    ah_tar_free (&cx.tar);
    free (cx.err);
    free (what);
    return rc;
}
