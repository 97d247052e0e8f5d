/*  actors/api/home_read.c: reading a home without waking its sandbox
    (docs/api.md "Reading without waking"): the files routes' list and
    read for an agent that is not running, and the tree listing a person
    reads (GET /api/v1/agents/{agent}/tree), in every state.

    The home is the directory ah_driver_home_dir names (the fake driver's,
    or the Docker driver's bind-backed home volume), read by common/homefs
    with the kernel confining every path beneath it. With the remote
    driver the host agent reads it (HOSTD_HOME, hostd/hostd_home.h): the
    server runs as its own user and may be on another machine, hostd is
    root beside the home; each call is bounded by HOSTD_TIMEOUT_MS of
    silence (docs/architecture.md). A claim on a
    Kubernetes cluster is read while the agent sleeps by its reader
    (reader.c). A home without a directory (a volume made by an earlier
    install) is read through the running sandbox only: the files routes
    then answer 409 and say why, and the tree of a running agent is
    walked by its sandboxd (tree.c, the fs.tree channel).

    DESIGN. The API's thread serves every connection and the tunnel: it
    never waits on the disk or on hostd for a home. It resolves the
    agent, opens the home directory (one open(2), O_PATH) and hands the
    rest to a worker of the API actor (ah_actor_job, common/actor.h) as a
    job_t hung on the request (r->ext): a listing or a tree whole, a file
    a piece (HOSTD_READ bytes) at a time, the next piece read while the
    last goes out. The job's done answers in the API's thread (the
    listing, the response head, or api_want_write for the piece). The
    job is the worker's from the hand-off to done; a request that goes
    away meanwhile leaves it to done to free (job_t.r NULL).           */
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

//  Through the host agent (the remote driver): hostd reads the home.
static bool s_by_hostd (req_t *r)
{
    const ah_config_t *c = r->api->config;
    return c->driver && streq (c->driver, "remote");
}

//  --------------------------------------------------------------------
//  The work, in a worker (ah_actor_job): the API's thread never waits on
//  the disk or on hostd for a home (see DESIGN above)

//  OP_TEXT: a read answered in JSON (fs/text), its first files.max_read_bytes
//  read whole by the worker (through hostd, a piece per call)
typedef enum { OP_LIST, OP_TREE, OP_READ, OP_TEXT } op_t;

typedef struct {
    //  The API thread's only
    req_t *r;                       //  the request it answers; NULL once that went away
    bool busy;                      //  a worker has it: the worker's until done
    bool broken;                    //  a later piece failed: close the connection
    size_t at;                      //  bytes of the piece given to the connection
    uint64_t sent;
    //  Set before each hand-off, read by the worker
    const ah_config_t *config;      //  borrowed (the server's, read-only)
    ah_driver_t *driver;            //  borrowed, thread-safe (drivers/remote.h)
    bool by_hostd;
    op_t op;
    bool all;
    int max_depth, max_entries;
    char agent_id [AH_AGENT_ID_LEN + 1];
    char path [4096];
    int home, fd;                   //  local: the home, the file (-1: not open)
    bool first;                     //  a read's first piece: the file is opened (or asked of hostd)
    //  What the worker found (a read's piece: data, len; hostd's reply
    //  holds its bytes)
    uint64_t total;                 //  the file's size
    json_t *json;
    int error;                      //  -errno of a refused path
    const char *why;                //  static (homefs) or hostd's, in reply
    char *err;                      //  a failure of the read itself, not of the path
    ah_msg_t *reply;                //  hostd's
    const uint8_t *data;
    size_t len;
    uint8_t *buf;                   //  local reads' piece
    ah_buf_t text;                  //  OP_TEXT: the bytes kept (at most the cap)
    int status;                     //  OP_TEXT: the answer's status of err (0: 500)
} job_t;

static void s_job_clear (job_t *j)
{
    json_decref (j->json);
    j->json = NULL;
    ah_msg_destroy (&j->reply);
    free (j->err);
    j->err = NULL;
    j->error = 0;
    j->why = NULL;
    j->data = NULL;
    j->len = 0;
}

static void s_job_free (job_t *j)
{
    s_job_clear (j);
    if (j->fd >= 0)
        close (j->fd);
    if (j->home >= 0)
        close (j->home);
    free (j->buf);
    ah_buf_free (&j->text);
    free (j);
}

//  One HOSTD_HOME call for j.
static void s_work_hostd (job_t *j)
{
    ah_msg_t *req = ah_msg_new ("HOSTD_HOME");
    if (!req) {
        j->err = strdup ("out of memory");
        return;
    }
    ah_msg_set_str (req, "agent_id", j->agent_id);
    bool read = j->op == OP_READ || j->op == OP_TEXT;
    ah_msg_set_str (req, "op", j->op == OP_LIST ? "list" : j->op == OP_TREE ? "tree" : "read");
    ah_msg_set_str (req, "path", j->path);
    if (!read)
        ah_msg_set_bool (req, "all", j->all);
    if (j->op == OP_TREE) {
        ah_msg_set_int (req, "max_depth", j->max_depth);
        ah_msg_set_int (req, "max_entries", j->max_entries);
    }
    if (read) {
        ah_msg_set_int (req, "offset", (int64_t) j->sent);
        ah_msg_set_int (req, "length", HOSTD_READ);
    }
    if (!j->driver) {
        ah_msg_destroy (&req);
        j->err = strdup ("this server has no link to its host agent");
    }
    else
    if (ah_remote_home (j->driver, &req, HOSTD_TIMEOUT_MS, &j->reply, &j->err))
        j->reply = NULL;
}

//  The local file opened, its size taken: 0, or -1 (refused: error, why).
static int s_open_file (job_t *j)
{
    struct stat st;
    j->fd = ah_homefs_open_file (j->home, j->path, &st, &j->why);
    if (j->fd < 0) {
        j->error = j->fd;
        j->fd = -1;
        return -1;
    }
    j->total = (uint64_t) st.st_size;
    return 0;
}

//  want bytes of the local file into into: 0, or -1 (err says why).
static int s_read_full (job_t *j, uint8_t *into, size_t want)
{
    size_t got = 0;
    while (got < want) {
        ssize_t n = read (j->fd, into + got, want - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            j->err = ah_strf ("the file %s while being read", n == 0 ? "shrank" : strerror (errno));
            return -1;
        }
        got += (size_t) n;
    }
    return 0;
}

//  The next piece of a local file (the first: opened, its size taken).
static void s_work_read (job_t *j)
{
    if (j->first && s_open_file (j))
        return;
    if (!j->buf && !(j->buf = malloc (HOSTD_READ))) {
        j->err = strdup ("out of memory");
        return;
    }
    uint64_t left = j->total - j->sent;
    size_t want = left < HOSTD_READ ? (size_t) left : HOSTD_READ;
    if (s_read_full (j, j->buf, want))
        return;
    j->data = j->buf;
    j->len = want;
}

//  OP_TEXT: the file's first min(size, cap) bytes into j->text, locally
//  at once, or a HOSTD_READ piece per call to hostd. A refused path: its
//  error and why; else a failure in err (status) or all read.
static void s_work_text (job_t *j)
{
    uint64_t cap = (uint64_t) j->config->max_read_bytes;
    if (!j->by_hostd) {
        if (s_open_file (j))
            return;
        uint64_t want = j->total < cap ? j->total : cap;
        uint8_t *into = want ? ah_buf_reserve (&j->text, (size_t) want) : NULL;
        if (want && !into) {
            j->err = strdup ("out of memory");
            j->status = 503;
            return;
        }
        if (want && s_read_full (j, into, (size_t) want) == 0)
            ah_buf_commit (&j->text, (size_t) want);
        return;
    }
    for (j->sent = 0;;) {
        ah_msg_destroy (&j->reply);
        s_work_hostd (j);
        if (!j->reply) {
            j->status = 503;        //  err says why
            return;
        }
        int64_t error = ah_msg_int (j->reply, "errno", 0);
        if (error) {
            j->error = error > 0 && error < 4096 ? (int) -error : -EIO;
            const char *why = ah_msg_str (j->reply, "why");
            j->why = why ? why : "refused";     //  in reply, kept
            return;
        }
        size_t n = 0;
        const void *data = ah_msg_bin (j->reply, "data", &n);
        int64_t size = ah_msg_int (j->reply, "size", -1);
        bool ok = data && size >= 0 && (j->sent == 0 || (uint64_t) size == j->total)
               && n <= HOSTD_READ && (uint64_t) n <= (uint64_t) size - j->sent && (n > 0 || size == 0);
        if (!ok) {
            j->err = ah_strf ("the host agent's answer to reading \"%.200s\" does not add up", j->path);
            j->status = 502;
            return;
        }
        j->total = (uint64_t) size;
        uint64_t want = j->total < cap ? j->total : cap;
        size_t take = want - ah_buf_size (&j->text) < n ? (size_t) (want - ah_buf_size (&j->text)) : n;
        if (ah_buf_append (&j->text, data, take)) {
            j->err = strdup ("out of memory");
            j->status = 503;
            return;
        }
        j->sent += n;
        if (ah_buf_size (&j->text) >= want)
            return;
    }
}

static void s_work (void *arg)
{
    job_t *j = arg;
    if (j->op == OP_TEXT)
        s_work_text (j);
    else
    if (j->by_hostd)
        s_work_hostd (j);
    else
    if (j->op == OP_READ)
        s_work_read (j);
    else
    if (j->op == OP_LIST)
        j->json = ah_homefs_list (j->home, j->path, j->all, &j->error, &j->why);
    else {
        ah_homefs_tree_opts_t opts = { .max_depth = j->max_depth, .max_entries = j->max_entries,
                                       .all = j->all };
        j->json = ah_homefs_tree (j->home, j->path, &opts, &j->error, &j->why);
    }
}

//  --------------------------------------------------------------------
//  The answers, back in the API's thread

static void s_done (void *self, void *arg, bool ran);

//  Hand j to a worker. 0, or -1 (nothing runs).
static int s_job_start (job_t *j)
{
    s_job_clear (j);
    j->at = 0;
    if (ah_actor_job (j->r->api->actor, s_work, s_done, j))
        return -1;
    j->busy = true;
    return 0;
}

static void s_ext_free (req_t *r)
{
    job_t *j = r->ext;
    if (!j)
        return;
    if (j->busy)
        j->r = NULL;                //  done frees it
    else
        s_job_free (j);
}

static int s_ext_produce (req_t *r)
{
    job_t *j = r->ext;
    if (j->broken)
        return -1;                  //  the length cannot match: close
    if (j->sent == j->total)
        return 0;
    if (j->busy)
        return 1;                   //  done asks for the write
    if (j->at == j->len)
        return s_job_start (j) ? -1 : 1;
    size_t n = j->len - j->at < API_CHUNK ? j->len - j->at : API_CHUNK;
    if (api_out (r, j->data + j->at, n))
        return -1;
    j->at += n;
    j->sent += n;
    //  The piece is in the connection's buffer: the next one is read
    //  while it goes out.
    if (j->at == j->len && j->sent < j->total && s_job_start (j))
        return -1;
    return j->sent == j->total ? 0 : 1;
}

static const ext_ops_t s_ext_ops = { .free = s_ext_free, .produce = s_ext_produce };

//  A job for r, hung on it (ext) and handed to a worker; home (local,
//  taken) or -1. Answers a failure itself.
static void s_job (req_t *r, op_t op, const char *path, bool all, int home)
{
    const ah_config_t *c = r->api->config;
    job_t *j = r->ext ? NULL : calloc (1, sizeof *j);
    if (!j) {
        if (home >= 0)
            close (home);
        api_respond_error (r, r->ext ? 500 : 503, "%s", r->ext ? "the request is busy" : "out of memory");
        return;
    }
    *j = (job_t) { .r = r, .config = c, .driver = r->api->driver, .by_hostd = home < 0, .op = op,
                   .all = all, .max_depth = (int) c->tree_max_depth,
                   .max_entries = (int) c->tree_max_entries, .home = home, .fd = -1,
                   .first = true };
    snprintf (j->agent_id, sizeof j->agent_id, "%s", r->agent_id);
    snprintf (j->path, sizeof j->path, "%s", path);
    r->ext = j;
    r->ext_ops = &s_ext_ops;
    if (s_job_start (j))
        api_respond_error (r, 503, "the server cannot read the home of agent '%s' now: no worker",
                           r->name);
}

//  hostd's answer in j: 0, or -1 answered (first) or logged.
static int s_hostd_answer (req_t *r, job_t *j, const char *what)
{
    if (!j->reply) {
        if (j->first)
            api_respond_error (r, 503, "the home of agent '%s' is read by its host agent, which cannot "
                               "read it now: %s", r->name, j->err ? j->err : "no answer");
        else
            ah_warn (AREA, "%s: the host agent stopped reading %s: %s", r->path, j->path,
                     j->err ? j->err : "?");
        return -1;
    }
    int64_t error = ah_msg_int (j->reply, "errno", 0);
    if (error) {
        j->error = error > 0 && error < 4096 ? (int) -error : -EIO;
        const char *why = ah_msg_str (j->reply, "why");
        j->why = why ? why : "refused";
        if (!j->first)
            ah_warn (AREA, "%s: the host agent refused %s at %llu: %s", r->path, j->path,
                     (unsigned long long) j->sent, j->why);
        else
            s_refuse (r, j->error, what, j->path, j->why);
        return -1;
    }
    if (j->op != OP_READ) {
        const char *text = ah_msg_str (j->reply, "json");
        j->json = text ? json_loads (text, 0, NULL) : NULL;
        if (!json_is_object (j->json)) {
            api_respond_error (r, 502, "the host agent answered %s of agent '%s' with no JSON object",
                               what, r->name);
            return -1;
        }
        return 0;
    }
    size_t n = 0;
    const void *data = ah_msg_bin (j->reply, "data", &n);
    int64_t size = ah_msg_int (j->reply, "size", -1);
    bool ok = data && size >= 0 && (j->first || (uint64_t) size == j->total)
           && n <= HOSTD_READ && (uint64_t) n <= (uint64_t) size - j->sent && (n > 0 || size == 0);
    if (!ok) {
        if (j->first)
            api_respond_error (r, 502, "the host agent's answer to reading \"%.200s\" of agent '%s' "
                               "does not add up", j->path, r->name);
        else
            ah_warn (AREA, "%s: %s changed or hostd answered %zu bytes at %llu of %lld: closing",
                     r->path, j->path, n, (unsigned long long) j->sent, (long long) size);
        return -1;
    }
    j->total = (uint64_t) size;
    j->data = data;
    j->len = n;
    return 0;
}

//  The local work's answer in j: 0, or -1 answered (first) or logged.
static int s_local_answer (req_t *r, job_t *j, const char *what)
{
    if (j->error) {
        s_refuse (r, j->error, what, j->path, j->why);
        return -1;
    }
    if (j->err) {
        if (j->first)
            api_respond_error (r, 500, "the home of agent '%s' cannot be read on the server: %s",
                               r->name, j->err);
        else
            ah_warn (AREA, "%s: %s: %s", r->path, j->path, j->err);
        return -1;
    }
    return 0;
}

//  OP_TEXT's answer: the JSON, or why not.
static void s_text_done (req_t *r, job_t *j, bool ran)
{
    if (!ran)
        api_respond_error (r, 503, "the server is stopping");
    else if (j->error)
        s_refuse (r, j->error, "fs.read", j->path, j->why);
    else if (j->err && j->status == 503 && j->by_hostd && !j->reply)
        api_respond_error (r, 503, "the home of agent '%s' is read by its host agent, which cannot "
                           "read it now: %s", r->name, j->err);
    else if (j->err)
        api_respond_error (r, j->status ? j->status : 500, "the home of agent '%s' cannot be read "
                           "on the server: %s", r->name, j->err);
    else {
        r->bytes = (int64_t) ah_buf_size (&j->text);
        r->has_bytes = true;
        api_record (r, true, NULL);
        api_respond (r, 200, api_text_body (j->path, ah_buf_head (&j->text), ah_buf_size (&j->text),
                                            j->total, j->config->max_read_bytes));
    }
}

static void s_done (void *self, void *arg, bool ran)
{
    job_t *j = arg;
    j->busy = false;
    req_t *r = j->r;
    if (!r) {
        s_job_free (j);             //  its request went away meanwhile
        return;
    }
    if (j->op == OP_TEXT) {
        s_text_done (r, j, ran);
        return;
    }
    const char *what = j->op == OP_LIST ? "fs.list" : j->op == OP_TREE ? "tree" : "fs.read";
    int rc;
    if (!ran) {
        j->err = strdup ("the server is stopping");
        rc = -1;
        if (j->first)
            api_respond_error (r, 503, "the server is stopping");
    }
    else
        rc = j->by_hostd ? s_hostd_answer (r, j, what) : s_local_answer (r, j, what);
    if (j->home >= 0 && j->op == OP_READ) {
        close (j->home);            //  the file is open (or refused): the home is done with
        j->home = -1;
    }
    bool first = j->first;
    j->first = false;
    if (rc) {
        j->broken = !first;
        if (!first)
            api_want_write (r);     //  produce closes the connection
        return;
    }
    if (first)
        api_record (r, true, NULL);
    if (j->op == OP_READ) {
        if (first)
            api_respond_stream (r, 200, "application/octet-stream", (int64_t) j->total);
        api_want_write (r);
        return;
    }
    json_t *json = j->json;
    j->json = NULL;
    if (j->op == OP_LIST)
        json_object_set_new (json, "path", api_json_text (j->path));
    api_respond (r, 200, json);
}

int api_home_files (req_t *r, api_home_op_t op, const char *path, const char *state)
{
    bool list = op == API_HOME_LIST;
    //  A home being made or removed is nobody's to read.
    if (!state || streq (state, "creating") || streq (state, "destroying"))
        return 0;
    bool all = false;
    if (list && s_all (r, &all))
        return 1;
    int home = -1;
    if (!s_by_hostd (r)) {
        home = s_home (r);
        if (home == -1)
            return 0;
        if (home == -2)
            return 1;
    }
    r->kind = list ? "fs.list" : "fs.read";
    snprintf (r->detail, sizeof r->detail, "%.1000s", path);
    s_job (r, list ? OP_LIST : op == API_HOME_TEXT ? OP_TEXT : OP_READ, path, all, home);
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
            s_job (r, OP_TREE, clean, all, -1);
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
    s_job (r, OP_TREE, clean, all, home);
}

const route_t api_tree_routes [] = {
    { M_GET, "/api/v1/agents/{agent}/tree", s_tree, 0, "path all", NULL },
    { 0 }
};
