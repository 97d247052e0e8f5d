/*  actors/api/writer.c: the API's writes to SQLite, off its thread.

    The API's thread serves every connection and every terminal; a write
    there can wait up to the store's busy timeout (5 s) behind another
    actor's write transaction. So every write the API makes (a token's
    last use, sessions, tenants and tokens, the policy values) is a write
    job: its function runs in one of the actor's workers on the writer's
    own connection, and its done runs back in the API's thread.

    DESIGN. Writes run one at a time, in the order they were asked for:
    a queue in the API's thread, and at most one job out. The writer's
    connection belongs to the job that is out (the worker uses it) and
    comes back with its done, so no two threads ever hold it. One at a
    time keeps the order a route relies on (a session marked lost before
    a fresh row takes its key) and each write sees the ones before it.

    A request that waits for its write is parked as on another actor's
    reply (api_ask): its deadline answers 504, and a done whose request
    went away (the client left, the deadline) runs with r NULL. At the
    actor's end the writes still queued run in its destroy, on its
    thread: nothing asked for is dropped.                              */
#include "actors/api/api_int.h"

#include <string.h>

struct api_write_t {
    struct api_write_t *next;
    api_t *api;
    int64_t req_id;                 //  the request waiting for it, 0 none
    api_write_fn *write;
    api_written_fn *done;
    void *arg;
    ah_store_t *store;              //  the writer's, while the job is out
    int status;                     //  write's: 0, or an HTTP status
    char why [256];
};

static void s_next (api_t *api);

//  In a worker
static void s_work (void *arg)
{
    api_write_t *w = arg;
    w->status = w->write (w->store, w->arg, w->why, sizeof w->why);
}

//  The request that waits for w, unparked; NULL when it went away.
static req_t *s_waiter (api_t *api, int64_t req_id)
{
    if (!req_id)
        return NULL;
    req_t *r = api->pending;
    while (r && !(r->asked && r->req_id == req_id))
        r = r->next;
    if (r)
        api_unpark (r);
    return r;
}

static void s_finish (api_t *api, api_write_t *w)
{
    req_t *r = s_waiter (api, w->req_id);
    if (w->status && !w->why [0])
        snprintf (w->why, sizeof w->why, "the database refused the write");
    if (w->status && !r)
        ah_warn (AREA, "a write of the API failed: %s", w->why);
    if (w->done)
        w->done (api, r, w->arg, w->status, w->why);
    free (w);
}

//  In the API's thread
static void s_done (void *self, void *arg, bool ran)
{
    api_write_t *w = arg;
    api_t *api = w->api;
    (void) self;
    api->writer_store = w->store;   //  back from the worker
    api->writer_busy = false;
    if (!ran)                       //  the actor ends before a worker took it
        s_work (w);                 //  run here: nothing asked for is dropped
    s_finish (api, w);
    s_next (api);
}

static void s_next (api_t *api)
{
    if (api->writer_busy || !api->writes)
        return;
    api_write_t *w = api->writes;
    if (!api->writer_store) {
        char *err = NULL;
        api->writer_store = ah_store_open (api->db_path, false, &err);
        if (!api->writer_store) {
            ah_warn (AREA, "the API's writer cannot open the database: %s", err ? err : "?");
            free (err);
        }
    }
    api->writes = w->next;
    if (!api->writes)
        api->writes_tail = NULL;
    if (!api->writer_store) {
        w->status = 503;
        snprintf (w->why, sizeof w->why, "the database cannot be opened for writing now");
        s_finish (api, w);
        s_next (api);
        return;
    }
    w->store = api->writer_store;
    api->writer_store = NULL;       //  the job's now
    api->writer_busy = true;
    if (ah_actor_job (api->actor, s_work, s_done, w)) {
        api->writer_store = w->store;
        api->writer_busy = false;
        s_work (w);                 //  no worker: the write still happens
        s_finish (api, w);
        s_next (api);
    }
}

int api_write (req_t *r, api_t *api, api_write_fn *write, api_written_fn *done, void *arg)
{
    api_write_t *w = calloc (1, sizeof *w);
    if (!w)
        return -1;
    *w = (api_write_t) { .api = api, .write = write, .done = done, .arg = arg };
    if (r) {
        r->asked = "the database";
        snprintf (r->asked_type, sizeof r->asked_type, "a write");
        r->req_id = w->req_id = ++api->next_req;
        r->on_reply = NULL;
        r->on_deadline = NULL;
        r->on_state = NULL;
        api_park (r, zclock_mono () + (int64_t) api->reply_timeout_s * 1000);
    }
    if (api->writes_tail)
        api->writes_tail->next = w;
    else
        api->writes = w;
    api->writes_tail = w;
    s_next (api);
    return 0;
}

void api_writer_end (api_t *api)
{
    while (api->writes) {
        api_write_t *w = api->writes;
        api->writes = w->next;
        w->store = api->writer_store;
        if (w->store)
            s_work (w);
        else {
            w->status = 503;
            snprintf (w->why, sizeof w->why, "the server is stopping");
        }
        w->req_id = 0;              //  nobody is answered any more
        s_finish (api, w);
    }
    api->writes_tail = NULL;
    ah_store_close (&api->writer_store);
}

//  --------------------------------------------------------------------
//  One statement with named text and integer values (the common write)

struct api_stmt_t {
    const char *sql;                //  static text
    int n;
    struct { const char *name; char *text; int64_t num; bool is_num, is_null; } v [API_STMT_MAX];
    api_written_fn *done;
    void *ctx;                      //  the caller's (api_stmt_ctx)
    int changes;
};

api_stmt_t *api_stmt (const char *sql)
{
    api_stmt_t *s = calloc (1, sizeof *s);
    if (s)
        s->sql = sql;
    return s;
}

static void *s_slot (api_stmt_t *s, const char *name)
{
    if (!s || s->n >= API_STMT_MAX)
        return NULL;
    s->v [s->n].name = name;
    return &s->v [s->n++];
}

api_stmt_t *api_stmt_text (api_stmt_t *s, const char *name, const char *text)
{
    if (s_slot (s, name)) {
        if (!text)
            s->v [s->n - 1].is_null = true;
        else
        if (!(s->v [s->n - 1].text = strdup (text))) {
            api_stmt_free (s);
            return NULL;
        }
    }
    return s;
}

api_stmt_t *api_stmt_int (api_stmt_t *s, const char *name, int64_t num)
{
    if (s_slot (s, name)) {
        s->v [s->n - 1].num = num;
        s->v [s->n - 1].is_num = true;
    }
    return s;
}

void api_stmt_free (api_stmt_t *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        free (s->v [i].text);
    free (s);
}

int api_stmt_changes (const api_stmt_t *s)
{
    return s ? s->changes : 0;
}

void *api_stmt_ctx (const api_stmt_t *s)
{
    return s ? s->ctx : NULL;
}

static int s_stmt_write (ah_store_t *store, void *arg, char *why, size_t size)
{
    api_stmt_t *s = arg;
    sqlite3_stmt *st = ah_store_prepare (store, s->sql);
    bool ok = st != NULL;
    for (int i = 0; ok && i < s->n; i++)
        ok = s->v [i].is_null ? !ah_store_bind_null (st, s->v [i].name)
           : s->v [i].is_num ? !ah_store_bind_int64 (st, s->v [i].name, s->v [i].num)
           : !ah_store_bind_text (st, s->v [i].name, s->v [i].text);
    int rc = ok ? ah_store_step (store, st) : SQLITE_ERROR;
    if (st)
        sqlite3_reset (st);
    if (rc == SQLITE_DONE) {
        s->changes = ah_store_changes (store);
        return 0;
    }
    bool taken = (rc & 0xff) == SQLITE_CONSTRAINT;   //  extended codes too
    snprintf (why, size, "%s", taken ? "the row exists already" : ah_store_error (store));
    return taken ? 409 : 500;
}

static void s_stmt_done (api_t *api, req_t *r, void *arg, int status, const char *why)
{
    api_stmt_t *s = arg;
    if (s->done)
        s->done (api, r, s, status, why);
    api_stmt_free (s);
}

int api_stmt_write (req_t *r, api_t *api, api_stmt_t *s, api_written_fn *done, void *ctx)
{
    if (!s)
        return -1;
    s->done = done;
    s->ctx = ctx;
    if (api_write (r, api, s_stmt_write, s_stmt_done, s)) {
        api_stmt_free (s);
        return -1;
    }
    return 0;
}
