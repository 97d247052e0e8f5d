/*  drivers/docker/volume.c: the agent's home volume, <prefix>-home-<id>.

    A local-driver volume bound to a directory the server can read,
    <data_dir>/homes/<id> (driver options type none, o bind, device DIR):
    the sandbox mounts the volume at /home/agent as before, and the server
    reads a sleeping agent's files in DIR without starting its container
    (common/homefs.h). The engine resolves DIR on its own side, so a server
    that runs in a container must have its data directory bind-mounted at
    the same path on both sides; the create says so when it is not.

    A home volume that exists already is kept as it is: one made by an
    earlier install (a plain named volume) has no DIR, and its files are
    read through the running sandbox only (docs/docker.md).            */
#include "drivers/docker/docker_int.h"
#include "common/homefs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

//  A server in a container: dir must be on a bind mount whose source is
//  the same path (the engine reads the device path on the host).
static int
s_same_path_on_host (docker_t *self, const char *dir, char **err)
{
    char *id = ah_dk_server_container (self);
    if (!id)
        return 0;
    char *path = ah_strf ("/containers/%s/json", id);
    json_t *c = NULL;
    long st = path ? ah_dk_get (self, "inspecting the server's own container", path, false, &c, err) : -1;
    free (path);
    free (id);
    if (st != 200)
        return -1;
    const char *best_dst = NULL, *best_src = NULL;
    size_t best = 0;
    size_t i;
    json_t *m;
    json_array_foreach (json_object_get (c, "Mounts"), i, m) {
        const char *dst = json_string_value (json_object_get (m, "Destination"));
        const char *src = json_string_value (json_object_get (m, "Source"));
        size_t n = dst ? strlen (dst) : 0;
        if (n && src && strncmp (dir, dst, n) == 0 && (dir [n] == '/' || dir [n] == 0
                                                      || strcmp (dst, "/") == 0) && n > best) {
            best = n;
            best_dst = dst;
            best_src = src;
        }
    }
    int rc = 0;
    if (!best_dst || strcmp (best_dst, best_src) != 0) {
        ah_dk_err (err, "the server runs in a container, and %s is not on a bind mount at the same "
                   "path on the host (%s%s%s): mount the data directory at one path on both sides "
                   "(e.g. -v /var/lib/agenthold:/var/lib/agenthold) so the engine finds the homes "
                   "bound there", dir, best_dst ? "it is under " : "it is in the container's own files",
                   best_dst ? best_dst : "", best_dst ? " from another host path" : "");
        rc = -1;
    }
    json_decref (c);
    return rc;
}

char *
ah_docker_home_dir (const ah_config_t *config, const char *agent_id)
{
    return ah_strf ("%s/homes/%s", config->data_dir, agent_id);
}

void
ah_dk_home_look (docker_t *self, const char *what, const char *agent_id, dk_home_t *home, char **err)
{
    memset (home, 0, sizeof *home);
    home->volume = -1;
    dk_names_t n;
    ah_dk_names (self, agent_id, &n);
    char *path = ah_strf ("/volumes/%s", n.volume);
    char *mine = ah_docker_home_dir (self->config, agent_id);
    json_t *v = NULL;
    if (path && mine)
        home->volume = ah_dk_get (self, what, path, true, &v, err);
    else
        ah_dk_err (err, "%s: out of memory", what);
    const char *device = json_string_value (json_object_get (json_object_get (v, "Options"), "device"));
    home->bound = home->volume == 200 && device && *device == '/';
    home->ours = home->bound && strcmp (device, mine) == 0;
    //  The files are where the volume is bound, or, with no volume, where
    //  ours would be bound: a volume removed behind our back leaves them.
    //  An earlier install's plain volume holds them itself.
    const char *dir = home->bound ? device : home->volume == 404 ? mine : NULL;
    struct stat sb;
    if (dir) {
        //  What cannot be looked at (EACCES, ...) is not known to be gone.
        home->dir = lstat (dir, &sb) == 0 || errno != ENOENT;
        home->lost = !home->dir;
    }
    json_decref (v);
    free (path);
    free (mine);
}

int
ah_dk_home_volume_ensure (docker_t *self, const char *agent_id, char **err)
{
    dk_names_t n;
    ah_dk_names (self, agent_id, &n);
    char *what = ah_strf ("creating home volume %s", n.volume);
    char *root = ah_strf ("%s/homes", self->config->data_dir);
    char *dir = ah_docker_home_dir (self->config, agent_id);
    int rc = -1;
    if (!what || !root || !dir) {
        ah_dk_err (err, "creating the home volume of %s: out of memory", agent_id);
        goto out;
    }
    dk_home_t home;
    ah_dk_home_look (self, what, agent_id, &home, err);
    long st = home.volume;
    if (home.ours && home.lost) {
        //  Its directory was removed behind the engine's back (the files
        //  are lost, lifecycle says so): the home is made again, empty,
        //  where the volume is bound.
        ah_warn ("docker", "%s: the directory of home volume %s was gone: made again, empty", agent_id, n.volume);
        if ((mkdir (root, 0700) && errno != EEXIST) || (mkdir (dir, 0755) && errno != EEXIST)) {
            ah_dk_err (err, "%s: cannot make %s again: %s", what, dir, strerror (errno));
            goto out;
        }
    }
    if (st == 200) {
        rc = 0;                     //  there already (ours, or an earlier install's)
        goto out;
    }
    if (st == 404 && home.dir)
        //  The volume was removed behind our back, its files kept: a new
        //  volume is bound to them.
        ah_info ("docker", "%s: home volume %s was gone, its directory %s kept: bound again", agent_id,
                 n.volume, dir);
    if (st != 404 || s_same_path_on_host (self, root, err))
        goto out;
    //  homes/ keeps other host users out (the files belong to the
    //  sandbox's uids); the home itself is what a fresh volume would be.
    if ((mkdir (root, 0700) && errno != EEXIST) || (mkdir (dir, 0755) && errno != EEXIST)) {
        ah_dk_err (err, "%s: cannot make %s: %s", what, dir, strerror (errno));
        goto out;
    }
    json_t *body = json_pack ("{s:s s:s s:{s:s s:s s:s} s:o}", "Name", n.volume, "Driver", "local",
                              "DriverOpts", "type", "none", "o", "bind", "device", dir,
                              "Labels", ah_dk_labels (self, agent_id));
    char *msg = NULL;
    st = ah_dk_call_json (self, what, "/volumes/create", body, &msg, err);
    if (st == 201 || st == 200)
        rc = 0;
    else
    if (st > 0)
        ah_dk_status_err (err, what, st, msg);
    free (msg);
out:
    free (what);
    free (root);
    free (dir);
    return rc;
}

int
ah_dk_home_volume_remove (docker_t *self, const char *agent_id, char **err)
{
    dk_names_t n;
    ah_dk_names (self, agent_id, &n);
    dk_simple_t how = { .method = "DELETE", .path_fmt = "/volumes/%s?force=true", .ok1 = 204,
                        .ok2 = 200, .absent_ok = true };
    if (ah_dk_simple (self, &how, "removing volume", n.volume, err))
        return -1;
    //  The engine leaves a bound volume's files: they go here.
    char *dir = ah_docker_home_dir (self->config, agent_id);
    int e = dir ? ah_homefs_remove (dir) : -ENOMEM;
    if (e)
        ah_dk_err (err, "removing the files of home volume %s in %s: %s", n.volume,
                   dir ? dir : "(out of memory)", strerror (-e));
    free (dir);
    return e ? -1 : 0;
}
