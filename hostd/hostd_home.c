/*  hostd/hostd_home.c: HOSTD_HOME (hostd_home.h). Runs in a hostd
    worker thread; every field of the request is checked, never asserted
    on: the server that asks is hostd's caller, not hostd's trust.      */
#include "hostd/hostd_home.h"
#include "common/homefs.h"
#include "common/homepath.h"
#include "common/str.h"
#include "common/ident.h"
#include "drivers/docker.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void s_refused (ah_msg_t *reply, int error, const char *why)
{
    ah_msg_set_int (reply, "errno", -error);
    ah_msg_set_str (reply, "why", why ? why : strerror (-error));
}

static int s_json (ah_msg_t *reply, json_t *json, char **err)
{
    char *text = json_dumps (json, JSON_COMPACT);
    json_decref (json);
    if (!text) {
        *err = strdup ("out of memory");
        return -1;
    }
    ah_msg_set_str (reply, "json", text);
    free (text);
    return 0;
}

static int s_read (int home, const char *path, const ah_msg_t *req, ah_msg_t *reply, char **err)
{
    int64_t offset = ah_msg_int (req, "offset", -1);
    int64_t length = ah_msg_int (req, "length", -1);
    if (offset < 0 || length < 0) {
        *err = strdup ("HOSTD_HOME read: offset and length must be integers >= 0");
        return -1;
    }
    if (length > AH_HOSTD_HOME_CHUNK)
        length = AH_HOSTD_HOME_CHUNK;
    struct stat st;
    const char *why = NULL;
    int fd = ah_homefs_open_file (home, path, &st, &why);
    if (fd < 0) {
        s_refused (reply, fd, why);
        return 0;
    }
    int64_t size = (int64_t) st.st_size;
    int64_t n = offset >= size ? 0 : (size - offset < length ? size - offset : length);
    char *buf = malloc (n ? (size_t) n : 1);
    ssize_t got = 0;
    while (buf && got < n) {
        ssize_t r = pread (fd, buf + got, (size_t) (n - got), (off_t) (offset + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += r;
    }
    int saved = errno;
    close (fd);
    if (!buf || got < n) {
        *err = !buf ? strdup ("out of memory")
                    : ah_strf ("%s: %s", path, got < 0 ? strerror (saved) : "the file shrank while read");
        free (buf);
        return -1;
    }
    ah_msg_set_int (reply, "size", size);
    ah_msg_set_bin (reply, "data", buf, (size_t) n);
    free (buf);
    return 0;
}

int ah_hostd_home (const ah_config_t *config, const ah_msg_t *req, ah_msg_t *reply, char **err)
{
    const char *agent_id = ah_msg_str (req, "agent_id");
    const char *op = ah_msg_str (req, "op");
    const char *path = ah_msg_str (req, "path");
    if (!op || (strcmp (op, "list") && strcmp (op, "tree") && strcmp (op, "read"))) {
        *err = strdup ("HOSTD_HOME: op must be list, tree or read");
        return -1;
    }
    //  The API checked it (common/homepath.h): one that breaks the
    //  grammar is a malformed request, not a path to refuse.
    const char *bad;
    if (!path || ah_homepath_check (path, strlen (path), AH_HOMEPATH_HOME, &bad)) {
        *err = ah_strf ("HOSTD_HOME: path %s", path ? bad : "is required");
        return -1;
    }
    //  hostd's driver is always the Docker driver, whatever sandbox.driver
    //  the shared configuration names (the server's: remote).
    bool ok = agent_id && ah_ident_ok (AH_IDENT_AGENT_ID, agent_id);
    char *dir = ok ? ah_docker_home_dir (config, agent_id) : NULL;
    if (!dir) {
        *err = ah_strf ("HOSTD_HOME: '%.64s' is not an agent id whose home this host keeps",
                        agent_id ? agent_id : "");
        return -1;
    }
    int home = ah_homefs_open_home (dir);
    if (home < 0) {
        *err = ah_strf ("HOSTD_HOME: the home %s cannot be opened: %s", dir, strerror (-home));
        free (dir);
        return -1;
    }
    free (dir);
    bool all = ah_msg_bool (req, "all", false);
    int error = 0, rc = 0;
    const char *why = NULL;
    if (!strcmp (op, "read"))
        rc = s_read (home, path, req, reply, err);
    else {
        json_t *json;
        if (!strcmp (op, "list"))
            json = ah_homefs_list (home, path, all, &error, &why);
        else {
            int64_t depth = ah_msg_int (req, "max_depth", 0);
            int64_t entries = ah_msg_int (req, "max_entries", 0);
            if (depth < 1 || depth > 64 || entries < 1 || entries > 1000000) {
                close (home);
                *err = strdup ("HOSTD_HOME tree: max_depth must be 1..64 and max_entries 1..1000000");
                return -1;
            }
            ah_homefs_tree_opts_t opts = { .max_depth = (int) depth, .max_entries = (int) entries,
                                           .all = all };
            json = ah_homefs_tree (home, path, &opts, &error, &why);
        }
        if (json)
            rc = s_json (reply, json, err);
        else
            s_refused (reply, error ? error : -EIO, why);
    }
    close (home);
    return rc;
}
