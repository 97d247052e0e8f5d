/*  actors/api/allfiles.c: GET /api/v1/files, all files of a tenant
    (seed 004, "All files"): the files in the homes of the tenant's
    agents, newest first, grouped by agent and the session it serves,
    each group with the session's access_label (its scope in words) and
    owner_name (the person of a user session, null for every other
    scope). ?uploads=true keeps what people uploaded (uploads/), ?q=
    keeps names holding the text (any case), ?all=true shows the hidden
    names, ?limit= (1..2000, 500) the files at most.

    Reading never starts or wakes anything: each home is walked as the
    tree route walks it (common/homefs.c, the same depth, entry and
    hidden-name rules), from the directory the server reads it from (the
    fake driver's, a Docker home bound under the data directory) or by
    the host agent (HOSTD_HOME, the remote driver). A home this server
    does not reach (a claim on a Kubernetes cluster, an old Docker
    volume) is not walked: the answer names it in "not_listed" with why.
    A user session is its person's: another token of the tenant does not
    see its files (as it may not open the session), an admin does.

    DESIGN. The API's thread reads the rows (agents, their sessions);
    one worker job opens and walks every home, filters, sorts and groups
    (nothing here waits on a disk or on hostd in the thread that serves
    the connections), and its done answers.                                                            */
#include "actors/api/api_int.h"
#include "common/homefs.h"
#include "common/ident.h"
#include "common/str.h"
#include "drivers/driver.h"
#include "drivers/remote.h"

#include <string.h>
#include <strings.h>
#include <unistd.h>

#define AGENTS_MAX      1000        //  homes walked by one request
#define LIMIT_DEFAULT   500
#define LIMIT_MAX       2000
#define HOSTD_TIMEOUT_MS 3000       //  hostd's silence that ends a walk

typedef struct {
    char id [AH_AGENT_ID_LEN + 1];
    char *name, *state, *session, *scope, *subject;
    int home;                       //  opened by the worker, or -1
    bool by_hostd;
    char *skipped;                  //  why its home is not walked (NULL: it is)
    json_t *tree;                   //  the worker's walk
} home_t;

typedef struct {
    req_t *r;                       //  NULL once the request went away
    ah_driver_t *driver;            //  borrowed, thread-safe
    const ah_config_t *config;      //  borrowed, read only
    home_t *homes;
    size_t n;
    bool uploads, all;
    char *q;
    int64_t limit;
    int max_depth, max_entries;
    json_t *answer;                 //  the worker's
} files_t;

static void s_free (files_t *f)
{
    for (size_t i = 0; i < f->n; i++) {
        home_t *h = &f->homes [i];
        free (h->name);
        free (h->state);
        free (h->session);
        free (h->scope);
        free (h->subject);
        free (h->skipped);
        json_decref (h->tree);
        if (h->home >= 0)
            close (h->home);
    }
    free (f->homes);
    free (f->q);
    json_decref (f->answer);
    free (f);
}

//  The scope of the session an agent serves, in words (seed 004).
static const char *s_access_label (const char *scope)
{
    if (!scope)                 return "direct: made through the API, no session";
    if (streq (scope, "run"))           return "one run";
    if (streq (scope, "conversation"))  return "one conversation";
    if (streq (scope, "channel"))       return "everyone in one channel";
    if (streq (scope, "user"))          return "one person";
    if (streq (scope, "agent"))         return "one agent's workspace";
    return "unknown";
}

//  --------------------------------------------------------------------
//  In the worker

static json_t *s_walk_hostd (files_t *f, home_t *h)
{
    ah_msg_t *req = ah_msg_new ("HOSTD_HOME");
    if (!req)
        return NULL;
    ah_msg_set_str (req, "agent_id", h->id);
    ah_msg_set_str (req, "op", "tree");
    ah_msg_set_str (req, "path", ".");
    ah_msg_set_bool (req, "all", f->all);
    ah_msg_set_int (req, "max_depth", f->max_depth);
    ah_msg_set_int (req, "max_entries", f->max_entries);
    ah_msg_t *reply = NULL;
    char *err = NULL;
    if (!f->driver || ah_remote_home (f->driver, &req, HOSTD_TIMEOUT_MS, &reply, &err)) {
        h->skipped = err ? err : strdup ("this server has no link to its host agent");
        return NULL;
    }
    json_t *tree = NULL;
    if (ah_msg_int (reply, "errno", 0)) {
        const char *why = ah_msg_str (reply, "why");
        h->skipped = ah_strf ("its home cannot be read: %.200s", why ? why : "refused");
    }
    else {
        const char *text = ah_msg_str (reply, "json");
        tree = text ? json_loads (text, 0, NULL) : NULL;
        if (!json_is_object (tree)) {
            json_decref (tree);
            tree = NULL;
            h->skipped = strdup ("the host agent answered with no JSON object");
        }
    }
    ah_msg_destroy (&reply);
    return tree;
}

typedef struct {
    json_t *file;                   //  borrowed from its home's tree
    size_t home;
    int64_t mtime;
} pick_t;

static int s_newest_first (const void *a_, const void *b_)
{
    const pick_t *a = a_, *b = b_;
    if (a->mtime != b->mtime)
        return a->mtime < b->mtime ? 1 : -1;
    if (a->home != b->home)
        return a->home < b->home ? -1 : 1;
    return strcmp (json_string_value (json_object_get (a->file, "path")),
                   json_string_value (json_object_get (b->file, "path")));
}

//  Where the home of h is read from: opened here (one open(2), O_PATH),
//  by hostd, or why not.
static void s_locate (const ah_config_t *c, home_t *h)
{
    h->home = -1;
    if (!h->state || streq (h->state, "creating") || streq (h->state, "destroying")) {
        h->skipped = ah_strf ("it is %s", h->state ? h->state : "without a sandbox");
        return;
    }
    if (c->driver && streq (c->driver, "remote")) {
        h->by_hostd = true;
        return;
    }
    char *dir = ah_driver_home_dir (c, h->id);
    int fd = dir ? ah_homefs_open_home (dir) : -ENOENT;
    free (dir);
    if (fd >= 0)
        h->home = fd;
    else
    if (c->driver && streq (c->driver, "kubernetes"))
        h->skipped = strdup ("its home is a claim on the cluster, which this server does not mount: "
                             "read it with the agent's own files routes");
    else
    if (fd == -ENOENT)
        h->skipped = strdup ("its home is a volume only its running sandbox reads: read it with the "
                             "agent's own files routes");
    else
        h->skipped = ah_strf ("its home cannot be opened: %s", strerror (-fd));
}

static void s_work (void *arg)
{
    files_t *f = arg;
    bool incomplete = false;
    size_t npicks = 0, cap = 0;
    pick_t *picks = NULL;
    for (size_t i = 0; i < f->n; i++) {
        home_t *h = &f->homes [i];
        s_locate (f->config, h);
        if (h->skipped)
            continue;
        if (h->by_hostd)
            h->tree = s_walk_hostd (f, h);
        else {
            ah_homefs_tree_opts_t opts = { .max_depth = f->max_depth, .max_entries = f->max_entries,
                                           .all = f->all };
            int error = 0;
            const char *why = NULL;
            h->tree = ah_homefs_tree (h->home, ".", &opts, &error, &why);
            if (!h->tree)
                h->skipped = ah_strf ("its home cannot be read: %s", why ? why : strerror (-error));
        }
        if (!h->tree)
            continue;
        if (json_is_true (json_object_get (h->tree, "incomplete"))
        ||  json_is_true (json_object_get (h->tree, "entries_limit_reached"))
        ||  json_is_true (json_object_get (h->tree, "depth_limit_reached")))
            incomplete = true;
        size_t k;
        json_t *e;
        json_array_foreach (json_object_get (h->tree, "entries"), k, e) {
            const char *type = json_string_value (json_object_get (e, "type"));
            const char *path = json_string_value (json_object_get (e, "path"));
            const char *name = json_string_value (json_object_get (e, "name"));
            if (!type || !streq (type, "file") || !path || !name)
                continue;
            if (f->uploads && !ah_homefs_uploaded (path))
                continue;
            if (f->q && !strcasestr (name, f->q))
                continue;
            if (npicks == cap) {
                size_t more = cap ? cap * 2 : 256;
                pick_t *p = realloc (picks, more * sizeof *p);
                if (!p)
                    break;
                picks = p;
                cap = more;
            }
            json_t *m = json_object_get (e, "mtime");
            picks [npicks++] = (pick_t) { .file = e, .home = i,
                                          .mtime = json_is_integer (m) ? json_integer_value (m) : 0 };
        }
    }
    if (npicks > 1)
        qsort (picks, npicks, sizeof *picks, s_newest_first);
    size_t shown = npicks < (size_t) f->limit ? npicks : (size_t) f->limit;

    //  Groups in the order of their newest file; within each, newest first.
    json_t *groups = json_array ();
    json_t **of = calloc (f->n ? f->n : 1, sizeof *of);
    for (size_t p = 0; groups && of && p < shown; p++) {
        home_t *h = &f->homes [picks [p].home];
        json_t *g = of [picks [p].home];
        if (!g) {
            g = json_object ();
            json_object_set_new (g, "agent_id", json_string (h->id));
            json_object_set_new (g, "agent", api_json_text (h->name));
            json_object_set_new (g, "state", api_json_text (h->state));
            json_object_set_new (g, "session_id", h->session ? api_json_text (h->session) : json_null ());
            json_object_set_new (g, "scope", h->scope ? json_string (h->scope) : json_null ());
            json_object_set_new (g, "access_label", json_string (s_access_label (h->scope)));
            json_object_set_new (g, "owner_name", h->scope && streq (h->scope, "user") && h->subject
                                                  ? api_json_text (h->subject) : json_null ());
            json_object_set_new (g, "files", json_array ());
            json_array_append_new (groups, g);
            of [picks [p].home] = g;
        }
        json_t *e = picks [p].file, *file = json_object ();
        const char *keys [] = { "path", "name", "size", "mtime", "uploaded" };
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
            json_t *v = json_object_get (e, keys [k]);
            if (v)
                json_object_set (file, keys [k], v);
        }
        json_array_append_new (json_object_get (g, "files"), file);
    }
    free (of);
    json_t *not_listed = json_array ();
    for (size_t i = 0; i < f->n; i++)
        if (f->homes [i].skipped)
            json_array_append_new (not_listed, json_pack ("{s:o, s:s}", "agent",
                                   api_json_text (f->homes [i].name), "why", f->homes [i].skipped));
    f->answer = json_pack ("{s:o, s:I, s:I, s:b, s:b, s:o}",
                           "groups", groups ? groups : json_array (), "count", (json_int_t) shown,
                           "limit", (json_int_t) f->limit, "limit_reached", npicks > shown,
                           "incomplete", incomplete || json_array_size (not_listed) > 0,
                           "not_listed", not_listed);
    free (picks);
}

static void s_done (void *self, void *arg, bool ran)
{
    (void) self;
    files_t *f = arg;
    req_t *r = f->r;
    if (!r) {
        s_free (f);
        return;
    }
    r->ext = NULL;
    if (!ran || !f->answer) {
        api_record (r, false, "the server is stopping");
        api_respond_error (r, 503, "%s", ran ? "out of memory" : "the server is stopping");
        s_free (f);
        return;
    }
    api_record (r, true, NULL);
    json_t *answer = f->answer;
    f->answer = NULL;
    s_free (f);
    api_respond (r, 200, answer);
}

//  --------------------------------------------------------------------
//  In the API's thread

static void s_ext_free (req_t *r)
{
    files_t *f = r->ext;
    if (f)
        f->r = NULL;                //  the job is out: done frees it
}

static const ext_ops_t s_ext_ops = { .free = s_ext_free };

static char *s_dup_col (sqlite3_stmt *st, int col)
{
    const char *t = (const char *) sqlite3_column_text (st, col);
    return t ? strdup (t) : NULL;
}

static void s_list (req_t *r)
{
    bool uploads = false, all = false;
    int64_t limit = LIMIT_DEFAULT;
    if (api_query_bool (r, "uploads", &uploads) || api_query_bool (r, "all", &all)
    ||  api_query_int (r, "limit", 1, LIMIT_MAX, &limit))
        return;
    const char *q = api_query (r, "q");
    if (q) {
        const char *bad = ah_text_check (q, strlen (q), false);
        if (!*q || strlen (q) > 256 || bad) {
            api_respond_error (r, 400, "query 'q' %s", bad ? bad : "must be 1 to 256 bytes");
            return;
        }
    }
    files_t *f = calloc (1, sizeof *f);
    home_t *homes = f ? calloc (AGENTS_MAX, sizeof *homes) : NULL;
    if (!homes) {
        free (f);
        api_respond_error (r, 503, "out of memory");
        return;
    }
    *f = (files_t) { .r = r, .driver = r->api->driver, .config = r->api->config, .homes = homes, .uploads = uploads, .all = all,
                     .q = q ? strdup (q) : NULL, .limit = limit,
                     .max_depth = (int) r->api->config->tree_max_depth,
                     .max_entries = (int) r->api->config->tree_max_entries };
    //  Each agent of the scope with the live session it serves (if any).
    //  A user session's files are its person's (and an admin's) only.
    sqlite3_stmt *st = ah_store_prepare (r->api->store,
        "SELECT a.id, a.name, s.state, se.id, se.scope, se.subject FROM agents a"
        " LEFT JOIN sandboxes s ON s.agent_id = a.id"
        " LEFT JOIN sessions se ON se.id = (SELECT id FROM sessions WHERE agent_id = a.id"
        "   AND lost_at IS NULL AND closed_at IS NULL ORDER BY opened_at DESC LIMIT 1)"
        " WHERE (:scope = '' OR a.tenant = :scope)"
        "   AND (se.scope IS NOT 'user' OR :admin OR se.subject = :user)"
        " ORDER BY a.name LIMIT :max");
    int rc = SQLITE_ERROR;
    if (st && !ah_store_bind_text (st, ":scope", r->who.scope)
    &&  sqlite3_bind_int (st, sqlite3_bind_parameter_index (st, ":admin"), r->who.admin) == SQLITE_OK
    &&  !ah_store_bind_text (st, ":user", r->who.user)
    &&  sqlite3_bind_int (st, sqlite3_bind_parameter_index (st, ":max"), AGENTS_MAX) == SQLITE_OK) {
        while ((rc = ah_store_step (r->api->store, st)) == SQLITE_ROW && f->n < AGENTS_MAX) {
            home_t *h = &f->homes [f->n++];
            h->home = -1;           //  the worker opens it
            snprintf (h->id, sizeof h->id, "%s", (const char *) sqlite3_column_text (st, 0));
            h->name = s_dup_col (st, 1);
            h->state = s_dup_col (st, 2);
            h->session = s_dup_col (st, 3);
            h->scope = s_dup_col (st, 4);
            h->subject = s_dup_col (st, 5);
        }
    }
    if (st)
        sqlite3_reset (st);
    if (rc != SQLITE_DONE) {
        s_free (f);
        api_respond_error (r, 500, "the database cannot list the agents now");
        return;
    }
    r->kind = "fs.all";
    snprintf (r->detail, sizeof r->detail, "%s%s%.900s", uploads ? "uploads " : "", q ? "q=" : "",
              q ? q : "");
    r->ext = f;
    r->ext_ops = &s_ext_ops;
    if (ah_actor_job (r->api->actor, s_work, s_done, f)) {
        r->ext = NULL;
        s_free (f);
        api_respond_error (r, 503, "the server cannot read the homes now: no worker");
    }
}

const route_t api_allfiles_routes [] = {
    { M_GET, "/api/v1/files", s_list, 0, "uploads q all limit", NULL },
    { 0 }
};
