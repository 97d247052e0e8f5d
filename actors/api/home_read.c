/*  actors/api/home_read.c: reading a home without waking its sandbox
    (docs/api.md "Reading without waking"): the files routes' list and
    read for an agent that is not running, and the tree listing a person
    reads (GET /api/v1/agents/{agent}/tree), in every state.

    The home is the directory ah_driver_home_dir names (the fake driver's,
    or the Docker driver's bind-backed home volume), read by common/homefs
    with the kernel confining every path beneath it. With the remote
    driver the host agent reads it (HOSTD_HOME, server/hostd_home.h): the
    server runs as its own user and may be on another machine, hostd is
    root beside the home; each call is synchronous, bounded by
    HOSTD_TIMEOUT_MS of silence (docs/architecture.md). A claim on a
    Kubernetes cluster is read while the agent sleeps by its reader
    (reader.c). A home without a directory (a volume made by an earlier
    install) is read through the running sandbox only: the files routes
    then answer 409 and say why, and the tree of a running agent is
    walked by its sandboxd (tree.c, the fs.tree channel).

    Runs on the API's thread, like the rest of the API: a listing is a few
    thousand stat calls, a file streams in API_CHUNK reads as the
    connection takes them.                                              */
#include "actors/api/api_int.h"
#include "common/homefs.h"
#include "common/str.h"
#include "drivers/driver.h"
#include "drivers/remote.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#define HOSTD_TIMEOUT_MS    3000        //  hostd's silence that ends a read (it beats each second)
#define HOSTD_READ          (256u << 10)    //  bytes asked of hostd at once

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

//  --------------------------------------------------------------------
//  Through the host agent (the remote driver): hostd reads the home

static bool s_by_hostd (req_t *r)
{
    const ah_config_t *c = r->api->config;
    return c->driver && streq (c->driver, "remote");
}

//  One HOSTD_HOME call (req taken over) for r's agent: the reply, or NULL
//  with *err (the caller frees).
static ah_msg_t *s_hostd_call (req_t *r, ah_msg_t *req, const char *op, const char *path, char **err)
{
    ah_msg_set_str (req, "agent_id", r->agent_id);
    ah_msg_set_str (req, "op", op);
    ah_msg_set_str (req, "path", path);
    ah_msg_t *reply = NULL;
    *err = NULL;
    if (!r->api->driver)
        *err = strdup ("this server has no link to its host agent");
    else
    if (ah_remote_home (r->api->driver, &req, HOSTD_TIMEOUT_MS, &reply, err) == 0)
        return reply;
    ah_msg_destroy (&req);
    return NULL;
}

//  The same, a failure answered (503).
static ah_msg_t *s_hostd (req_t *r, ah_msg_t *req, const char *op, const char *path)
{
    char *err;
    ah_msg_t *reply = s_hostd_call (r, req, op, path, &err);
    if (!reply)
        api_respond_error (r, 503, "the home of agent '%s' is read by its host agent, which cannot "
                           "read it now: %s", r->name, err ? err : "no answer");
    free (err);
    return reply;
}

//  A refused path in reply: answered (1); else 0.
static int s_hostd_refused (req_t *r, const ah_msg_t *reply, const char *what, const char *path)
{
    int64_t error = ah_msg_int (reply, "errno", 0);
    if (!error)
        return 0;
    const char *why = ah_msg_str (reply, "why");
    s_refuse (r, error > 0 && error < 4096 ? (int) -error : -EIO, what, path, why ? why : "refused");
    return 1;
}

//  A listing or a tree hostd answered: the JSON object, or NULL (answered).
static json_t *s_hostd_json (req_t *r, ah_msg_t *req, const char *op, const char *what,
                             const char *path)
{
    ah_msg_t *reply = s_hostd (r, req, op, path);
    if (!reply)
        return NULL;
    json_t *json = NULL;
    if (!s_hostd_refused (r, reply, what, path)) {
        const char *text = ah_msg_str (reply, "json");
        json = text ? json_loads (text, 0, NULL) : NULL;
        if (!json_is_object (json)) {
            json_decref (json);
            json = NULL;
            api_respond_error (r, 502, "the host agent answered %s of agent '%s' with no JSON object",
                               what, r->name);
        }
    }
    ah_msg_destroy (&reply);
    return json;
}

static void s_hostd_list (req_t *r, const char *path)
{
    bool all;
    if (s_all (r, &all))
        return;
    ah_msg_t *req = ah_msg_new ("HOSTD_HOME");
    ah_msg_set_bool (req, "all", all);
    json_t *list = s_hostd_json (r, req, "list", "fs.list", path);
    if (!list)
        return;
    api_record (r, true, NULL);
    json_object_set_new (list, "path", api_json_text (path));
    api_respond (r, 200, list);
}

typedef struct {
    char path [4096];
    uint64_t total, sent;           //  the file's size; bytes given to the connection
    size_t len, at;                 //  bytes in buf; of which given
    uint8_t buf [HOSTD_READ];
} hostd_file_t;

//  The next bytes from hostd into f->buf (first: from the start, and the
//  file's size into f->total). 0, or -1: answered when first, else logged
//  (the response has begun: the connection must close).
static int s_hostd_fetch (req_t *r, hostd_file_t *f, bool first)
{
    ah_msg_t *req = ah_msg_new ("HOSTD_HOME");
    ah_msg_set_int (req, "offset", (int64_t) f->sent);
    ah_msg_set_int (req, "length", HOSTD_READ);
    char *err = NULL;
    ah_msg_t *reply = first ? s_hostd (r, req, "read", f->path)
                            : s_hostd_call (r, req, "read", f->path, &err);
    if (!reply && !first) {
        ah_warn (AREA, "%s: the host agent stopped reading %s: %s", r->path, f->path, err ? err : "?");
        free (err);
        return -1;
    }
    if (!reply || (first && s_hostd_refused (r, reply, "fs.read", f->path))) {
        ah_msg_destroy (&reply);
        return -1;
    }
    size_t n = 0;
    const void *data = ah_msg_bin (reply, "data", &n);
    int64_t size = ah_msg_int (reply, "size", -1);
    bool ok = data && size >= 0 && (first || (uint64_t) size == f->total)
           && n <= HOSTD_READ && (uint64_t) n <= (uint64_t) size - f->sent && (n > 0 || size == 0);
    if (!ok) {
        if (first)
            api_respond_error (r, 502, "the host agent's answer to reading \"%.200s\" of agent '%s' "
                               "does not add up", f->path, r->name);
        else
            ah_warn (AREA, "%s: %s changed or hostd answered %zu bytes at %llu of %lld: closing",
                     r->path, f->path, n, (unsigned long long) f->sent, (long long) size);
        ah_msg_destroy (&reply);
        return -1;
    }
    if (first)
        f->total = (uint64_t) size;
    memcpy (f->buf, data, n);
    f->len = n;
    f->at = 0;
    ah_msg_destroy (&reply);
    return 0;
}

static void s_hostd_file_free (req_t *r)
{
    free (r->ext);
}

static int s_hostd_file_produce (req_t *r)
{
    hostd_file_t *f = r->ext;
    if (f->sent == f->total)
        return 0;
    if (f->at == f->len && s_hostd_fetch (r, f, false))
        return -1;                  //  the length cannot match: close
    size_t n = f->len - f->at < API_CHUNK ? f->len - f->at : API_CHUNK;
    if (api_out (r, f->buf + f->at, n))
        return -1;
    f->at += n;
    f->sent += n;
    return f->sent == f->total ? 0 : 1;
}

static const ext_ops_t s_hostd_file_ops = { .free = s_hostd_file_free, .produce = s_hostd_file_produce };

static void s_hostd_read (req_t *r, const char *path)
{
    hostd_file_t *f = calloc (1, sizeof *f);
    if (!f) {
        api_respond_error (r, 503, "out of memory");
        return;
    }
    snprintf (f->path, sizeof f->path, "%s", path);
    if (s_hostd_fetch (r, f, true)) {
        free (f);
        return;
    }
    r->ext = f;
    r->ext_ops = &s_hostd_file_ops;
    api_record (r, true, NULL);
    api_respond_stream (r, 200, "application/octet-stream", (int64_t) f->total);
    api_want_write (r);
}

static void s_hostd_tree (req_t *r, const char *path, bool all)
{
    const ah_config_t *c = r->api->config;
    ah_msg_t *req = ah_msg_new ("HOSTD_HOME");
    ah_msg_set_bool (req, "all", all);
    ah_msg_set_int (req, "max_depth", c->tree_max_depth);
    ah_msg_set_int (req, "max_entries", c->tree_max_entries);
    json_t *tree = s_hostd_json (r, req, "tree", "tree", path);
    if (!tree)
        return;
    api_record (r, true, NULL);
    api_respond (r, 200, tree);
}

int api_home_files (req_t *r, bool list, const char *path, const char *state)
{
    //  A home being made or removed is nobody's to read.
    if (!state || streq (state, "creating") || streq (state, "destroying"))
        return 0;
    if (s_by_hostd (r)) {
        r->kind = list ? "fs.list" : "fs.read";
        snprintf (r->detail, sizeof r->detail, "%.1000s", path);
        if (list)
            s_hostd_list (r, path);
        else
            s_hostd_read (r, path);
        return 1;
    }
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
    if (!given)
        given = ".";
    char clean [AH_HOMEPATH_MAX + 1];
    if (api_home_path (r, given, true, true, clean))
        return;
    bool all;
    if (s_all (r, &all))
        return;
    json_t *agent = api_agent_resolve (r);
    if (!agent)
        return;
    const char *state = json_string_value (json_object_get (agent, "state"));
    int home;
    bool readable = state && !streq (state, "creating") && !streq (state, "destroying");
    if (readable && s_by_hostd (r)) {
        //  Its sandboxd walks a running one's; hostd a sleeping one's.
        //  (state lives in agent: looked at before agent goes.)
        bool running = streq (state, "running");
        json_decref (agent);
        if (running)
            api_tree_sandbox (r, clean, all, false);
        else {
            r->kind = "fs.tree";
            snprintf (r->detail, sizeof r->detail, "%.1000s", clean);
            s_hostd_tree (r, clean, all);
        }
        return;
    }
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
    { M_GET, "/api/v1/agents/{agent}/tree", s_tree, 0, "path all", NULL },
    { 0 }
};
