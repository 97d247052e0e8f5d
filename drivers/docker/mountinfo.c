/*  drivers/docker/mountinfo.c: when the server runs in a container, which
    one (it joins every agent network at .2 and the tunnel URL names that
    address). Found once, on the first call that reaches the engine: the
    configured sandbox.docker.server_container, or the id in our own
    mountinfo, confirmed with an inspect. The answer is kept in docker_t
    under its mutex.                                                    */
#include "drivers/docker/docker_int.h"

#include <ctype.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *
ah_docker_container_id_from_mountinfo (const char *path)
{
    FILE *f = fopen (path, "r");
    if (!f)
        return NULL;
    char line [4096];
    char *found = NULL;
    while (!found && fgets (line, sizeof line, f)) {
        //  Fields: id parent major:minor root mountpoint ...
        char root [2048], mount [1024];
        if (sscanf (line, "%*s %*s %*s %2047s %1023s", root, mount) != 2)
            continue;
        if (strcmp (mount, "/etc/hostname") != 0)
            continue;
        const char *p = strstr (root, "containers/");
        if (!p)
            continue;
        p += strlen ("containers/");
        size_t n = 0;
        while (isxdigit ((unsigned char) p [n]))
            n++;
        if (n == 64 && p [n] == '/')
            found = strndup (p, 64);
    }
    fclose (f);
    return found;
}

static void
s_set_checked (docker_t *self, bool checked)
{
    pthread_mutex_lock (&self->lock);
    self->server_checked = checked;
    pthread_mutex_unlock (&self->lock);
}

int
ah_dk_detect_server_container (docker_t *self, char **err)
{
    const char *configured = self->config->server_container;
    bool is_configured = configured && *configured;
    char *candidate = is_configured ? strdup (configured)
                    : ah_docker_container_id_from_mountinfo ("/proc/self/mountinfo");
    char *full_id = NULL;
    if (candidate) {
        char *esc = curl_easy_escape (NULL, candidate, 0);
        char *path = ah_strf ("/containers/%s/json", esc ? esc : "");
        curl_free (esc);
        json_t *j = NULL;
        char *msg = NULL, *cerr = NULL;
        dk_call_t call = { .what = "finding the server's own container", .method = "GET" };
        //  ah_dk_call would recurse into ah_dk_ensure_engine: mark checked first.
        s_set_checked (self, true);
        long st = path ? ah_dk_call (self, &call, path, &j, &msg, &cerr) : -1;
        free (path);
        const char *id = json_string_value (json_object_get (j, "Id"));
        int rc = 0;
        if (st == 200 && id)
            full_id = strdup (id);
        else
        if (is_configured) {
            //  A configured container that does not exist is a configuration error.
            if (st == -1)
                ah_dk_err (err, "%s", cerr ? cerr : "out of memory");
            else
                ah_dk_err (err, "sandbox.docker.server_container '%s' is not a container of "
                           "this Docker Engine (Docker: %s)", configured, msg ? msg : "no message");
            s_set_checked (self, false);
            rc = -1;
        }
        else
            ah_warn (LOG_AREA, "this process looks like container %.12s but the engine does not "
                     "know it; running as on the host", candidate);
        json_decref (j);
        free (msg);
        free (cerr);
        free (candidate);
        if (rc)
            return rc;
    }
    pthread_mutex_lock (&self->lock);
    self->server_checked = true;
    free (self->server_container);
    self->server_container = full_id;
    pthread_mutex_unlock (&self->lock);
    if (full_id)
        ah_info (LOG_AREA, "the server runs in container %.12s: it joins every agent network at .2",
                 full_id);
    return 0;
}

char *
ah_dk_server_container (docker_t *self)
{
    pthread_mutex_lock (&self->lock);
    char *id = self->server_container ? strdup (self->server_container) : NULL;
    pthread_mutex_unlock (&self->lock);
    return id;
}

char *
ah_dk_host_path (docker_t *self, const char *path, char **err)
{
    char *server = ah_dk_server_container (self);
    if (!server)
        return strdup (path);
    char *what = ah_strf ("finding where %s of the server's container is on the host", path);
    char *ipath = ah_strf ("/containers/%s/json", server);
    json_t *j = NULL;
    long st = ipath ? ah_dk_get (self, what, ipath, false, &j, err) : -1;
    char *out = NULL;
    size_t best = 0;
    size_t i;
    json_t *m;
    json_array_foreach (st == 200 ? json_object_get (j, "Mounts") : NULL, i, m) {
        const char *dst = json_string_value (json_object_get (m, "Destination"));
        const char *src = json_string_value (json_object_get (m, "Source"));
        size_t dl = dst ? strlen (dst) : 0;
        if (!src || !*src || dl == 0 || dl <= best || strncmp (path, dst, dl) != 0
        ||  (path [dl] != 0 && path [dl] != '/'))
            continue;
        best = dl;
        free (out);
        out = ah_strf ("%s%s", src, path + dl);
    }
    if (!out && st == 200)
        ah_dk_err (err, "%s: no volume or bind mount of the server's container holds it; mount one "
                   "there (e.g. the data directory) so sandboxes can be given the tunnel's socket",
                   what ? what : path);
    json_decref (j);
    free (ipath);
    free (what);
    free (server);
    return out;
}
