/*  actors/api/home_read.c: reading a home without waking its sandbox
    (docs/api.md "Reading without waking"): the files routes' list and
    read for an agent that is not running, and the tree listing a person
    reads (GET /api/v1/agents/{agent}/tree), in every state.

    The home is the directory ah_driver_home_dir names (the fake driver's,
    the Docker driver's bind-backed home volume, or the one hostd's docker
    driver binds on this machine), read by common/homefs
    with the kernel confining every path beneath it. A home without such
    a directory (a volume made by an earlier install, a home on another
    host) is read through the running sandbox only: the files routes then
    answer 409 and say why, and the tree of a running agent is walked by
    its sandboxd (tree.c, the fs.tree channel). A claim on a Kubernetes
    cluster is read while the agent sleeps by its reader (reader.c).

    Runs on the API's thread, like the rest of the API: a listing is a few
    thousand stat calls, a file streams in API_CHUNK reads as the
    connection takes them.                                              */
#include "actors/api/api_int.h"
#include "common/homefs.h"
#include "common/str.h"
#include "drivers/driver.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int fd;
    uint64_t total, sent;
    uint8_t buf [API_CHUNK];
} home_file_t;

//  The home of r's agent opened, or -errno (-ENOENT: no directory the
//  server reads it from); nothing answered. *dir_p (when asked) gets the
//  directory or NULL, the caller's to free.
static int s_home_open (req_t *r, char **dir_p)
{
    char *dir = ah_driver_home_dir (r->api->config, r->agent_id);
    int fd = dir ? ah_homefs_open_home (dir) : -ENOENT;
    if (dir_p)
        *dir_p = dir;
    else
        free (dir);
    return fd;
}

//  The home of r's agent opened, or -1 (nothing answered) when there is
//  no directory the server reads it from, or -2 (answered) when there is
//  one that cannot be opened.
static int s_home (req_t *r)
{
    const ah_config_t *c = r->api->config;
    char *dir;
    int fd = s_home_open (r, &dir);
    if (fd < 0 && c->driver && streq (c->driver, "remote")) {
        //  The host agent's homes: say why they are out of reach.
        if (!dir)
            api_respond_error (r, 409, "the home of agent '%s' is on its host (%s), not on this machine: "
                               "it is read through its running sandbox only (start it first)", r->name,
                               c->remote_endpoint ? c->remote_endpoint : "sandbox.remote.endpoint");
        else
            api_respond_error (r, 409, "the home of agent '%s' is kept by the host agent in %s, which this "
                               "server cannot open (%s): hostd.data_dir must name hostd's data directory "
                               "in the server's configuration too, and hostd.server_user the user the "
                               "server runs as (docs/hostd.md); or start it to read its files through its "
                               "sandbox", r->name, dir, strerror (-fd));
        free (dir);
        return -2;
    }
    if (!dir && c->driver && streq (c->driver, "kubernetes")) {
        //  A claim on the cluster: no directory here (docs/kubernetes.md,
        //  "Reading a sleeping agent's files", says why and what would).
        api_respond_error (r, 409, "the home of agent '%s' is the PersistentVolumeClaim %s-home-%s on the "
                           "cluster, which this server does not mount (sandbox.driver: kubernetes): its files "
                           "and tree are read through its sandbox while it runs, or through a reader Pod "
                           "while it sleeps, and it does neither now. Start it first "
                           "(agenthold start %s)", r->name,
                           c->name_prefix ? c->name_prefix : "agenthold", r->agent_id, r->name);
        return -2;
    }
    if (fd == -ENOENT) {
        free (dir);
        return -1;
    }
    if (fd < 0) {
        ah_warn (AREA, "%s: the home directory %s cannot be opened: %s", r->path, dir, strerror (-fd));
        api_respond_error (r, 500, "the home of agent '%s' cannot be opened on the server: %s",
                           r->name, strerror (-fd));
        fd = -2;
    }
    free (dir);
    return fd;
}

static int s_status (int error)
{
    switch (-error) {
        case ENOENT:    return 404;
        case EXDEV:
        case ELOOP:
        case EACCES:
        case EPERM:     return 403;
        case ENOTDIR:
        case EISDIR:    return 409;
        case EINVAL:
        case ENAMETOOLONG: return 400;
        default:        return 500;
    }
}

//  A refusal, recorded.
static void s_refuse (req_t *r, int error, const char *what, const char *path, const char *why)
{
    char text [512];
    snprintf (text, sizeof text, "%s \"%.200s\": %s", what, path, why);
    api_record (r, false, text);
    api_respond_error (r, s_status (error), "%s", text);
}

//  ?all=true keeps the toolchain folders and the product's own names.
static int s_all (req_t *r, bool *all)
{
    *all = false;
    return api_query_bool (r, "all", all);
}

//  --------------------------------------------------------------------
//  A file, streamed from the home

static void s_file_free (req_t *r)
{
    home_file_t *f = r->ext;
    if (f && f->fd >= 0)
        close (f->fd);
    free (f);
}

static int s_file_produce (req_t *r)
{
    home_file_t *f = r->ext;
    if (f->sent == f->total)
        return 0;
    size_t want = f->total - f->sent < API_CHUNK ? (size_t) (f->total - f->sent) : API_CHUNK;
    ssize_t n = read (f->fd, f->buf, want);
    if (n <= 0) {
        ah_warn (AREA, "%s: the file %s while being read", r->path,
                 n == 0 ? "shrank" : strerror (errno));
        return -1;                  //  the length cannot match: close
    }
    if (api_out (r, f->buf, (size_t) n))
        return -1;
    f->sent += (uint64_t) n;
    return f->sent == f->total ? 0 : 1;
}

static const ext_ops_t s_file_ops = { .free = s_file_free, .produce = s_file_produce };

static void s_read (req_t *r, int home, const char *path)
{
    struct stat st;
    const char *why = NULL;
    int fd = ah_homefs_open_file (home, path, &st, &why);
    if (fd < 0) {
        s_refuse (r, fd, "fs.read", path, why);
        return;
    }
    home_file_t *f = malloc (sizeof *f);
    if (!f) {
        close (fd);
        api_respond_error (r, 503, "out of memory");
        return;
    }
    f->fd = fd;
    f->total = (uint64_t) st.st_size;
    f->sent = 0;
    r->ext = f;
    r->ext_ops = &s_file_ops;
    api_record (r, true, NULL);
    api_respond_stream (r, 200, "application/octet-stream", (int64_t) f->total);
    api_want_write (r);
}

static void s_list (req_t *r, int home, const char *path)
{
    bool all;
    if (s_all (r, &all))
        return;
    int error = 0;
    const char *why = NULL;
    json_t *list = ah_homefs_list (home, path, all, &error, &why);
    if (!list) {
        s_refuse (r, error, "fs.list", path, why);
        return;
    }
    api_record (r, true, NULL);
    json_object_set_new (list, "path", api_json_text (path));
    api_respond (r, 200, list);
}

int api_home_files (req_t *r, bool list, const char *path, const char *state)
{
    //  A home being made or removed is nobody's to read.
    if (!state || streq (state, "creating") || streq (state, "destroying"))
        return 0;
    int home = s_home (r);
    if (home == -1)
        return 0;
    if (home == -2)
        return 1;
    r->kind = list ? "fs.list" : "fs.read";
    snprintf (r->detail, sizeof r->detail, "%.1000s", path);
    if (list)
        s_list (r, home, path);
    else
        s_read (r, home, path);
    close (home);
    return 1;
}

json_t *api_home_entries (req_t *r, const char *dir, json_t *entries)
{
    bool all = false;
    const char *v = api_query (r, "all");
    if (v && (streq (v, "1") || streq (v, "true") || streq (v, "yes")))
        all = true;
    json_t *out = json_array ();
    size_t i;
    json_t *e;
    json_array_foreach (entries, i, e) {
        const char *name = json_string_value (json_object_get (e, "name"));
        if (!name || (!all && ah_homefs_hidden (name)))
            continue;
        char *full = streq (dir, ".") ? strdup (name) : ah_strf ("%s/%s", dir, name);
        json_t *copy = json_copy (e);
        if (copy && full && ah_homefs_uploaded (full))
            json_object_set_new (copy, "uploaded", json_true ());
        if (copy)
            json_array_append_new (out, copy);
        free (full);
    }
    return out;
}

//  --------------------------------------------------------------------
//  GET /api/v1/agents/{agent}/tree?path=DIR&all=true

static void s_tree (req_t *r)
{
    const char *given = api_query (r, "path");
    char clean [4096];
    size_t n = given ? strlen (given) : 1;
    if (n >= sizeof clean) {
        api_respond_error (r, 400, "path is longer than 4095 bytes");
        return;
    }
    snprintf (clean, sizeof clean, "%s", given ? given : ".");
    if (n > 1 && clean [n - 1] == '/')
        clean [n - 1] = 0;
    const char *bad = api_path_check (clean, true);
    if (bad) {
        api_respond_error (r, 400, "path '%s' %s", clean, bad);
        return;
    }
    bool all;
    if (s_all (r, &all))
        return;
    json_t *agent = api_agent_resolve (r);
    if (!agent)
        return;
    const char *state = json_string_value (json_object_get (agent, "state"));
    int home;
    if (state && streq (state, "running")) {
        home = s_home_open (r, NULL);
        if (home < 0) {
            //  A home only its sandbox reaches: sandboxd walks it (tree.c).
            json_decref (agent);
            api_tree_sandbox (r, clean, all, false);
            return;
        }
    }
    else
    if (api_reader_serves (r, state)) {
        //  A sleeping agent on a cluster: its reader walks the home.
        json_decref (agent);
        api_tree_sandbox (r, clean, all, true);
        return;
    }
    else {
        bool readable = state && !streq (state, "creating") && !streq (state, "destroying");
        home = readable ? s_home (r) : -1;
        if (home == -1)
            api_respond_error (r, 409, "agent '%s' is %s and its home is not a directory the server "
                               "reads (a home volume made before homes were bound under the data "
                               "directory): no tree; list its directories with the files routes "
                               "while it runs", r->name, state ? state : "without a sandbox");
    }
    json_decref (agent);
    if (home < 0)
        return;
    r->kind = "fs.tree";
    snprintf (r->detail, sizeof r->detail, "%.1000s", clean);
    const ah_config_t *c = r->api->config;
    ah_homefs_tree_opts_t opts = { .max_depth = (int) c->tree_max_depth,
                                   .max_entries = (int) c->tree_max_entries, .all = all };
    int error = 0;
    const char *why = NULL;
    json_t *tree = ah_homefs_tree (home, clean, &opts, &error, &why);
    close (home);
    if (!tree) {
        s_refuse (r, error, "tree", clean, why);
        return;
    }
    api_record (r, true, NULL);
    api_respond (r, 200, tree);
}

const route_t api_tree_routes [] = {
    { M_GET, "/api/v1/agents/{agent}/tree", s_tree, 0, "path all" },
    { 0 }
};
