/*  drivers/docker/sandboxd.c: sandboxd in a volume. When the server runs
    in a container it cannot bind-mount a path of its own, so once per
    driver it copies its own sandboxd (sandbox.sandboxd_path) into
    sandbox.docker.sandboxd_volume through a helper container that is
    created (mounting the volume read-write) but never started: an archive
    PUT on a stopped container writes through its mounts. The copy
    replaces the file (new inode), so running sandboxes keep theirs. Two
    threads may copy at once; both write the same bytes.                */
#include "drivers/docker/docker_int.h"
#include "proto/tar.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SANDBOXD    (256u << 20)

static bool
s_needed (docker_t *self)
{
    pthread_mutex_lock (&self->lock);
    bool needed = !self->sandboxd_file && !self->sandboxd_deployed;
    pthread_mutex_unlock (&self->lock);
    return needed;
}

//  sandboxd as a tar of one file, "sandboxd" (root, 0755); *size gets
//  the file's size. 0 / -1 with *err.
static int
s_sandboxd_tar (docker_t *self, const char *what, ah_tar_t *tar, size_t *size, char **err)
{
    const char *path = self->config->sandboxd_path;
    tar->max = MAX_SANDBOXD + 4096;
    if (ah_tar_add_file (tar, "sandboxd", path, 0755, size) == 0 && ah_tar_finish (tar) == 0) {
        if (*size > 0)
            return 0;
        ah_dk_err (err, "%s: it is empty", what);
        return -1;
    }
    if (errno == EFBIG)
        ah_dk_err (err, "%s: it is larger than %u MiB", what, MAX_SANDBOXD >> 20);
    else
    if (errno == EINVAL)
        ah_dk_err (err, "%s: it is not a regular file", what);
    else
        ah_dk_err (err, "%s: cannot read it: %s", what, strerror (errno));
    return -1;
}

int
ah_dk_deploy_sandboxd (docker_t *self, const char *image, char **err)
{
    const ah_config_t *c = self->config;
    if (!s_needed (self))
        return 0;
    char *what = ah_strf ("copying sandboxd (%s) into volume %s", c->sandboxd_path,
                          c->sandboxd_volume);
    int rc = -1;
    char *path = NULL, *msg = NULL;
    ah_tar_t tar = { .max = 0 };
    size_t size = 0;
    if (!what || s_sandboxd_tar (self, what, &tar, &size, err))
        goto out;
    char helper [DK_MAX_NAME];
    snprintf (helper, sizeof helper, "%s-sandboxd-copy-%08x", self->prefix, (unsigned) random ());
    json_t *labels = json_pack ("{s:s s:s}", "agenthold.managed", "true", "agenthold.prefix", self->prefix);
    json_t *req = json_pack ("{s:s s:[s] s:b s:O s:{s:[{s:s s:s s:s s:{s:o}}]}}",
        "Image", image, "Entrypoint", "/opt/agenthold/sandboxd", "NetworkDisabled", 1,
        "Labels", labels,
        "HostConfig", "Mounts", "Type", "volume", "Source", c->sandboxd_volume,
        "Target", "/opt/agenthold", "VolumeOptions", "Labels", labels);
    path = ah_strf ("/containers/create?name=%s", helper);
    long st = ah_dk_call_json (self, what, path, req, &msg, err);
    if (st == 404) {
        ah_dk_err (err, "%s: image '%s' (for the helper container) not found (Docker: %s)",
                   what, image, msg ? msg : "");
        goto out;
    }
    if (st != 201) {
        if (st > 0)
            ah_dk_status_err (err, what, st, msg);
        goto out;
    }
    free (path);
    free (msg);
    msg = NULL;
    path = ah_strf ("/containers/%s/archive?path=%%2Fopt%%2Fagenthold", helper);
    dk_call_t put = { .what = what, .method = "PUT", .body = ah_buf_head (&tar.buf),
                      .body_size = ah_buf_size (&tar.buf), .content_type = "application/x-tar" };
    st = ah_dk_call (self, &put, path, NULL, &msg, err);
    if (st == 200)
        rc = 0;
    else
    if (st > 0)
        ah_dk_status_err (err, what, st, msg);
    ah_dk_container_remove (self, helper, NULL);
    if (rc == 0) {
        pthread_mutex_lock (&self->lock);
        self->sandboxd_deployed = true;
        pthread_mutex_unlock (&self->lock);
        ah_info (LOG_AREA, "copied sandboxd (%zu bytes) into volume %s", size, c->sandboxd_volume);
    }
out:
    ah_tar_free (&tar);
    free (msg);
    free (path);
    free (what);
    return rc;
}

//  A server restarted with a new sandboxd must deploy it before the first
//  start too; the helper container uses the sandbox's own image.
int
ah_dk_deploy_for_start (docker_t *self, const char *name, char **err)
{
    if (!s_needed (self))
        return 0;
    char *what = ah_strf ("starting container %s", name);
    char *path = ah_strf ("/containers/%s/json", name);
    json_t *j = NULL;
    long st = ah_dk_get (self, what, path, false, &j, err);
    const char *image = json_string_value (json_object_get (j, "Image"));
    int rc = -1;
    if (image)
        rc = ah_dk_deploy_sandboxd (self, image, err);
    else
    if (st == 200)
        ah_dk_err (err, "%s: the engine names no image for it", what);
    json_decref (j);
    free (path);
    free (what);
    return rc;
}
