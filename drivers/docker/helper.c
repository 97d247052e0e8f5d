/*  drivers/docker/helper.c: the helper image and what runs in it.

    Some checks need a container but nothing of any runtime's image: the
    host firewall probe (probe.c) and, when the server runs in a
    container, the host's own addresses. Both run the server's static
    sandboxd, mounted as in every sandbox, so the image only has to exist:
    DK_HELPER_IMAGE, imported once from a tar made here (an /etc/passwd
    and /etc/group with root and nobody, an empty /tmp, and /home/agent,
    which the probe's sandboxd needs as a home). It needs no
    registry and no build, so it is there on a fresh machine before the
    builder has made any runtime.

    The host's addresses: a throw-away container in the host's network
    namespace (NetworkMode host) runs `sandboxd --host-addresses` as
    nobody, with no capability, no new privileges and a read-only root;
    its output (a TTY, so the log is plain text) is the list. Its only
    label is agenthold.probe=<prefix>, as the firewall probe's objects,
    so it is never taken for an agent's and leftovers go with the
    probe's.                                                          */
#include "drivers/docker/docker_int.h"
#include "proto/tar.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *
ah_dk_helper_image (docker_t *self, char **err)
{
    pthread_mutex_lock (&self->lock);
    bool ready = self->helper_ready;
    pthread_mutex_unlock (&self->lock);
    if (ready)
        return DK_HELPER_IMAGE;
    ah_driver_t driver = { .impl = self };
    bool exists = false;
    if (ah_dk_image_exists (&driver, DK_HELPER_IMAGE, &exists, err))
        return NULL;
    if (!exists) {
        static const char passwd [] = "root:x:0:0:root:/root:/bin/false\n"
                                      "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
        static const char group [] = "root:x:0:\nnogroup:x:65534:\n";
        ah_tar_t tar = { .max = 0 };
        int rc = ah_tar_add (&tar, "etc/", AH_TAR_DIR, 0755, NULL, 0, NULL)
              || ah_tar_add (&tar, "etc/passwd", AH_TAR_FILE, 0644, passwd, sizeof passwd - 1, NULL)
              || ah_tar_add (&tar, "etc/group", AH_TAR_FILE, 0644, group, sizeof group - 1, NULL)
              || ah_tar_add (&tar, "tmp/", AH_TAR_DIR, 01777, NULL, 0, NULL)
              || ah_tar_add (&tar, "home/", AH_TAR_DIR, 0755, NULL, 0, NULL)
              || ah_tar_add (&tar, "home/agent/", AH_TAR_DIR, 0755, NULL, 0, NULL)
              || ah_tar_finish (&tar);
        if (rc)
            ah_dk_err (err, "making the helper image %s: out of memory", DK_HELPER_IMAGE);
        else
            rc = ah_dk_import (self, DK_HELPER_IMAGE, ah_buf_head (&tar.buf), ah_buf_size (&tar.buf),
                               NULL, err);
        ah_tar_free (&tar);
        if (rc)
            return NULL;
        ah_info (LOG_AREA, "made the helper image %s (no registry needed)", DK_HELPER_IMAGE);
    }
    pthread_mutex_lock (&self->lock);
    self->helper_ready = true;
    pthread_mutex_unlock (&self->lock);
    return DK_HELPER_IMAGE;
}

typedef struct {
    char  *out;                         //  addresses so far, space-separated
    size_t lines;
} s_lines_t;

static void
s_on_line (void *arg, const char *line, size_t len)
{
    s_lines_t *l = arg;
    while (len && (line [len - 1] == '\r' || line [len - 1] == '\n'))
        len--;
    char addr [INET_ADDRSTRLEN];
    struct in_addr a;
    if (len == 0 || len >= sizeof addr || l->lines >= 256)
        return;
    memcpy (addr, line, len);
    addr [len] = 0;
    if (inet_pton (AF_INET, addr, &a) != 1)
        return;                         //  only addresses are taken
    char *more = ah_strf ("%s%s%s", l->out ? l->out : "", l->out ? " " : "", addr);
    if (more) {
        free (l->out);
        l->out = more;
        l->lines++;
    }
}

char *
ah_dk_host_addresses (docker_t *self, char **err)
{
    const char *image = ah_dk_helper_image (self, err);
    if (!image || ah_dk_deploy_sandboxd (self, image, err))
        return NULL;
    char name [DK_MAX_NAME];
    snprintf (name, sizeof name, "%s-hostaddr-%08x", self->prefix, (unsigned) random ());
    json_t *mounts = json_array ();
    json_array_append_new (mounts, ah_dk_sandboxd_mount (self));
    json_t *req = json_pack ("{s:s s:[s] s:[s] s:s s:b s:{s:s} s:{s:o s:s s:[s] s:[s] s:b s:I}}",
        "Image", image, "Entrypoint", "/opt/agenthold/sandboxd", "Cmd", "--host-addresses",
        "User", "65534:65534", "Tty", 1,
        "Labels", "agenthold.probe", self->prefix,
        "HostConfig", "Mounts", mounts, "NetworkMode", "host", "CapDrop", "ALL",
        "SecurityOpt", "no-new-privileges", "ReadonlyRootfs", 1, "Memory", (json_int_t) 32 << 20);
    char *path = ah_strf ("/containers/create?name=%s", name);
    char *msg = NULL, *what = ah_strf ("reading the host's addresses (container %s)", name);
    s_lines_t lines = { 0 };
    long st = ah_dk_call_json (self, what, path, req, &msg, err);
    if (st != 201) {
        if (st > 0)
            ah_dk_status_err (err, what, st, msg);
        goto out;
    }
    if (ah_dk_container_start (self, name, err))
        goto out;
    free (path);
    path = ah_strf ("/containers/%s/wait", name);
    json_t *waited = NULL;
    dk_call_t wait = { .what = what, .method = "POST", .timeout_s = 30 };
    st = ah_dk_call (self, &wait, path, &waited, NULL, err);
    json_int_t code = json_integer_value (json_object_get (waited, "StatusCode"));
    json_decref (waited);
    if (st != 200 || code != 0) {
        if (st > 0)
            ah_dk_err (err, "%s: it ended with status %lld", what, (long long) code);
        goto out;
    }
    free (path);
    path = ah_strf ("/containers/%s/logs?stdout=1", name);
    dk_stream_t how = { .call = { .what = what, .method = "GET" }, .on_line = s_on_line,
                        .arg = &lines };
    if (ah_dk_stream (self, &how, path, err) == 0 && !lines.out)
        ah_dk_err (err, "%s: it printed no address", what);
out:
    ah_dk_container_remove (self, name, NULL);
    free (path);
    free (msg);
    free (what);
    if (lines.out && err && *err) {
        free (*err);
        *err = NULL;
    }
    return lines.out;
}
