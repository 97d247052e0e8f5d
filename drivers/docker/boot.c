/*  drivers/docker/boot.c: the boot card, /etc/agenthold/boot.json, and the
    briefing beside it: how a sandbox learns its agent id, its per-boot
    token and where the tunnel is.

    A sandbox made by this driver gets its card through a directory of
    the server's, <data_dir>/boot/<id> (root 0755, under boot/ root 0700),
    bind-mounted read-only at /etc/agenthold: the start writes boot.json
    there (root 0600: sandboxd reads it as root, the agent's user cannot;
    a temporary name, then a rename, so sandboxd never reads half a card)
    and then starts the container: no engine call for the card, so a wake
    is one POST /start. The card stays when the sandbox stops, as it did
    inside the container: sandboxd reads its blocked routes at boot, so a
    container started behind the server's back still closes them; its
    token opens nothing by then (lifecycle keeps the hash of the current
    boot's token only while the sandbox is starting or running).

    A container made before that directory existed (an earlier install),
    and the host firewall probe's container, get their card the old way:
    an archive PUT into the stopped container. The directory's presence is
    the mark: it is made before the container that mounts it and removed
    with the sandbox. So does every container of a server that does not
    run as root: the files it wrote would be its user's, and an agent
    whose uid is the same inside could read the token; the engine writes
    root's.                                                              */
#include "drivers/docker/docker_int.h"
#include "common/file.h"
#include "common/homefs.h"
#include "proto/tar.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

//  The card's JSON text. Caller frees; NULL out of memory.
static char *
s_card_text (const char *agent_id, const char *token, const char *tunnel_url, const char *blocked)
{
    json_t *j = json_pack ("{s:s s:s s:s}", "agent_id", agent_id, "token", token,
                           "tunnel_url", tunnel_url);
    if (j && blocked)
        json_object_set_new (j, "blocked", json_string (blocked));
    char *text = j ? json_dumps (j, JSON_COMPACT) : NULL;
    json_decref (j);
    return text;
}

int
ah_dk_boot_write (docker_t *self, const char *name, const char *agent_id, const char *token,
                  const char *tunnel_url, const char *blocked, const char *briefing, char **err)
{
    char *what = ah_strf ("writing /etc/agenthold/boot.json into container %s", name);
    char *text = s_card_text (agent_id, token, tunnel_url, blocked);
    //  etc/, etc/agenthold/, etc/agenthold/boot.json (root, 0600).
    ah_tar_t tar = { .max = 0 };
    if (!what || !text
    ||  ah_tar_add (&tar, "etc/", AH_TAR_DIR, 0755, NULL, 0, NULL)
    ||  ah_tar_add (&tar, "etc/agenthold/", AH_TAR_DIR, 0755, NULL, 0, NULL)
    ||  ah_tar_add (&tar, "etc/agenthold/boot.json", AH_TAR_FILE, 0600, text, strlen (text), NULL)
    ||  (briefing && ah_tar_add (&tar, "etc/agenthold/briefing.md", AH_TAR_FILE, 0444,
                                 briefing, strlen (briefing), NULL))
    ||  ah_tar_finish (&tar)) {
        ah_dk_err (err, "%s: out of memory composing it", what ? what : "writing boot.json");
        ah_tar_free (&tar);
        free (text);
        free (what);
        return -1;
    }
    free (text);
    char *path = ah_strf ("/containers/%s/archive?path=%%2F", name);
    dk_call_t put = { .what = what, .method = "PUT", .body = ah_buf_head (&tar.buf),
                      .body_size = ah_buf_size (&tar.buf), .content_type = "application/x-tar" };
    char *msg = NULL;
    long st = path ? ah_dk_call (self, &put, path, NULL, &msg, err) : -1;
    if (st == 404)
        ah_dk_err (err, "%s: the container does not exist (Docker: %s); rebuild the sandbox",
                   what, msg ? msg : "");
    else
    if (st > 0 && st != 200)
        ah_dk_status_err (err, what, st, msg);
    ah_tar_free (&tar);
    free (msg);
    free (path);
    free (what);
    return st == 200 ? 0 : -1;
}

//  -------------------------------------------------------------------------
//  The card directory

char *
ah_dk_boot_dir (const docker_t *self, const char *agent_id)
{
    return ah_strf ("%s/boot/%s", self->config->data_dir, agent_id);
}

bool
ah_dk_boot_dir_present (const docker_t *self, const char *agent_id)
{
    char *dir = ah_dk_boot_dir (self, agent_id);
    struct stat sb;
    bool there = dir && lstat (dir, &sb) == 0 && S_ISDIR (sb.st_mode);
    free (dir);
    return there;
}

int
ah_dk_boot_mount (docker_t *self, const char *agent_id, json_t **mount, char **err)
{
    *mount = NULL;
    //  Only a server running as root writes root's files: one running as
    //  another user would write cards that user owns, which an agent of
    //  the same uid inside could read. It gives the card the old way.
    if (geteuid () != 0)
        return 0;
    char *root = ah_strf ("%s/boot", self->config->data_dir);
    char *dir = ah_dk_boot_dir (self, agent_id);
    json_t *m = NULL;
    if (!root || !dir)
        ah_dk_err (err, "creating the sandbox of %s: out of memory", agent_id);
    else
    //  boot/ keeps other host users out; the agent's own directory is
    //  what the sandbox sees at /etc/agenthold.
    if ((mkdir (root, 0700) && errno != EEXIST) || (mkdir (dir, 0755) && errno != EEXIST))
        ah_dk_err (err, "creating the sandbox of %s: cannot make %s for its boot card: %s",
                   agent_id, dir, strerror (errno));
    else {
        char *host = ah_dk_host_path (self, dir, err);
        if (host)
            m = json_pack ("{s:s s:s s:s s:b}", "Type", "bind", "Source", host,
                           "Target", "/etc/agenthold", "ReadOnly", 1);
        free (host);
    }
    free (root);
    free (dir);
    *mount = m;
    return m ? 0 : -1;
}

//  dir/name holding text, mode mode, root's, whole or not at all (so
//  sandboxd never reads half a card). 0 / -1 with *err.
static int
s_file_put (const char *dir, const char *name, const char *text, mode_t mode, char **err)
{
    char *path = ah_strf ("%s/%s", dir, name);
    int rc = path ? ah_file_put (path, text, strlen (text), mode, false) : -1;
    if (rc)
        ah_dk_err (err, "writing %s/%s: %s", dir, name, path ? strerror (errno) : "out of memory");
    free (path);
    return rc;
}

int
ah_dk_boot_put (docker_t *self, const char *agent_id, const char *token, const char *tunnel_url,
                const char *blocked, const char *briefing, char **err)
{
    char *dir = ah_dk_boot_dir (self, agent_id);
    char *text = s_card_text (agent_id, token, tunnel_url, blocked);
    int rc = -1;
    if (!dir || !text)
        ah_dk_err (err, "writing the boot card of %s: out of memory", agent_id);
    else
        rc = s_file_put (dir, "boot.json", text, 0600, err)
          || (briefing && s_file_put (dir, "briefing.md", briefing, 0444, err)) ? -1 : 0;
    if (text)
        explicit_bzero (text, strlen (text));
    free (text);
    free (dir);
    return rc;
}

int
ah_dk_boot_dir_remove (docker_t *self, const char *agent_id, char **err)
{
    char *dir = ah_dk_boot_dir (self, agent_id);
    int e = dir ? ah_homefs_remove (dir) : -ENOMEM;
    if (e)
        ah_dk_err (err, "removing the boot card directory of %s (%s): %s", agent_id,
                   dir ? dir : "out of memory", strerror (-e));
    free (dir);
    return e ? -1 : 0;
}
