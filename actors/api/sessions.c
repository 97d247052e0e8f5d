/*  actors/api/sessions.c: sessions, "the sandbox for this conversation"
    by name (docs/sessions.md, docs/api.md "Sessions").

    A session's key folds the calling platform (backend), the scope (run,
    conversation, channel, user, agent), the tenant, the host and the
    subject. Opening a key the first time makes a sandbox whose name is
    also the session's reference: a readable prefix and a uuid4-derived
    part nobody can guess; every later open of the key attaches to it.
    The API is one thread, so the look-up and the insert of a key cannot
    interleave: concurrent opens of one key find the first one's row and
    wait for its sandbox, and one sandbox is made.

    A session whose files are gone (its sandbox destroyed, its home
    removed) is lost: opened by its reference it says so (410, with the
    reason); opened by its key again it starts a fresh one.             */
#include "actors/api/api_int.h"
#include "common/token.h"

#include <string.h>

#define SESSION_WAIT_S  600

static const char *s_scopes [] = { "run", "conversation", "channel", "user", "agent" };
static const char *s_prefix [] = { "run", "conv", "chan", "user", "agent" };

//  A field of the key (subject, host, backend): 1 to 256 bytes of free
//  text (common/ident.h: no C0, DEL or C1, valid UTF-8). NULL when good,
//  else why.
static const char *s_part_check (const char *v, bool empty_ok)
{
    size_t n = v ? strlen (v) : 0;
    if (n == 0)
        return empty_ok ? NULL : "must not be empty";
    if (n > 256)
        return "must be at most 256 bytes";
    return ah_text_check (v, n, false);
}

//  The session's name: prefix-slug-part, an agent name (common/ident.h).
static void s_make_name (int scope, const char *backend, const char *subject, char *out, size_t size)
{
    uint8_t rnd [16];
    char hex [AH_TOKEN_HEX];
    ah_token_new (hex);             //  32 random bytes as hex
    for (int i = 0; i < 16; i++)
        sscanf (hex + 2 * i, "%2hhx", &rnd [i]);
    rnd [6] = (uint8_t) ((rnd [6] & 0x0f) | 0x40);      //  uuid4: version and variant
    rnd [8] = (uint8_t) ((rnd [8] & 0x3f) | 0x80);
    char part [11];
    snprintf (part, sizeof part, "%02x%02x%02x%02x%02x", rnd [0], rnd [1], rnd [2], rnd [3], rnd [4]);
    char slug [40] = "";
    size_t k = 0;
    const char *sources [2] = { streq (backend, "api") ? "" : backend, subject };
    for (int s = 0; s < 2; s++)
        for (const char *p = sources [s]; *p && k < 30; p++) {
            char c = *p;
            if (c >= 'A' && c <= 'Z')
                c = (char) (c - 'A' + 'a');
            bool keep = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
            if (keep)
                slug [k++] = c;
            else if (k > 0 && slug [k - 1] != '-')
                slug [k++] = '-';
            if (s == 0 && !p [1] && k > 0 && slug [k - 1] != '-' && k < 30)
                slug [k++] = '-';
        }
    while (k > 0 && slug [k - 1] == '-')
        k--;
    slug [k] = 0;
    snprintf (out, size, "%s-%s%s%s", s_prefix [scope], slug, k ? "-" : "", part);
}

//  --------------------------------------------------------------------
//  Rows

#define SESSION_SELECT \
    "SELECT id, tenant, backend, scope, host, subject, agent_id, created_at, opened_at, lost_at," \
    " lost_reason, closed_at FROM sessions"

typedef struct {
    char id [AH_NAME_MAX + 1];
    char tenant [64];
    char backend [257], scope [16], host [257], subject [257];
    char agent_id [AH_AGENT_ID_LEN + 1];
    int64_t created_at, opened_at, lost_at, closed_at;
    char lost_reason [512];
} session_t;

static void s_copy (char *dst, size_t size, sqlite3_stmt *st, int col)
{
    const char *v = (const char *) sqlite3_column_text (st, col);
    snprintf (dst, size, "%s", v ? v : "");
}

static void s_read (sqlite3_stmt *st, session_t *s)
{
    memset (s, 0, sizeof *s);
    s_copy (s->id, sizeof s->id, st, 0);
    s_copy (s->tenant, sizeof s->tenant, st, 1);
    s_copy (s->backend, sizeof s->backend, st, 2);
    s_copy (s->scope, sizeof s->scope, st, 3);
    s_copy (s->host, sizeof s->host, st, 4);
    s_copy (s->subject, sizeof s->subject, st, 5);
    s_copy (s->agent_id, sizeof s->agent_id, st, 6);
    s->created_at = sqlite3_column_int64 (st, 7);
    s->opened_at = sqlite3_column_int64 (st, 8);
    s->lost_at = sqlite3_column_int64 (st, 9);
    s_copy (s->lost_reason, sizeof s->lost_reason, st, 10);
    s->closed_at = sqlite3_column_int64 (st, 11);
}

//  One session by reference (scope "" any tenant), or the live one of a
//  key. 1 found, 0 not, -1 error.
static int s_by_id (api_t *api, const char *id, const char *scope, session_t *s)
{
    sqlite3_stmt *st = ah_store_prepare (api->store, SESSION_SELECT
        " WHERE id = :id AND (:scope = '' OR tenant = :scope)");
    int rc = st && !ah_store_bind_text (st, ":id", id) && !ah_store_bind_text (st, ":scope", scope)
           ? ah_store_step (api->store, st) : SQLITE_ERROR;
    if (rc == SQLITE_ROW)
        s_read (st, s);
    if (st)
        sqlite3_reset (st);
    return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
}

static int s_by_key (api_t *api, const char *tenant, const char *backend, const char *scope,
                     const char *host, const char *subject, session_t *s)
{
    sqlite3_stmt *st = ah_store_prepare (api->store, SESSION_SELECT
        " WHERE tenant = :tenant AND backend = :backend AND scope = :scope AND host = :host"
        " AND subject = :subject AND lost_at IS NULL AND closed_at IS NULL");
    int rc = st && !ah_store_bind_text (st, ":tenant", tenant) && !ah_store_bind_text (st, ":backend", backend)
           && !ah_store_bind_text (st, ":scope", scope) && !ah_store_bind_text (st, ":host", host)
           && !ah_store_bind_text (st, ":subject", subject) ? ah_store_step (api->store, st) : SQLITE_ERROR;
    if (rc == SQLITE_ROW)
        s_read (st, s);
    if (st)
        sqlite3_reset (st);
    return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
}

//  A write of a session's row through the writer (writer.c): r waits for
//  it and done answers (r NULL: nobody waits, done NULL). 0 / -1 (out of
//  memory: nothing queued, r not answered).
static int s_write (req_t *r, api_t *api, const char *sql, const char *id, const char *text, int64_t at,
                    api_written_fn *done)
{
    api_stmt_t *st = api_stmt_text (api_stmt (sql), ":id", id);
    if (text)
        st = api_stmt_text (st, ":text", text);
    if (at)
        st = api_stmt_int (st, ":at", at);
    return api_stmt_write (r, api, st, done, NULL);
}

//  Is the session's sandbox still there with its files? Marks it lost
//  when not. true: live.
static bool s_still_live (api_t *api, session_t *s)
{
    if (s->lost_at || s->closed_at || !s->agent_id [0])
        return !s->lost_at && !s->closed_at;
    sqlite3_stmt *st = ah_store_prepare (api->store,
        "SELECT s.home_lost FROM agents a LEFT JOIN sandboxes s ON s.agent_id = a.id WHERE a.id = :id");
    int rc = st && !ah_store_bind_text (st, ":id", s->agent_id) ? ah_store_step (api->store, st) : SQLITE_ERROR;
    char reason [512] = "";
    if (rc == SQLITE_DONE)
        snprintf (reason, sizeof reason, "its sandbox was destroyed");
    else if (rc == SQLITE_ROW && sqlite3_column_type (st, 0) != SQLITE_NULL)
        snprintf (reason, sizeof reason, "its files are gone: %s", (const char *) sqlite3_column_text (st, 0));
    if (st)
        sqlite3_reset (st);
    if (!reason [0])
        return true;
    s->lost_at = ah_store_now_ms ();
    snprintf (s->lost_reason, sizeof s->lost_reason, "%s", reason);
    ah_info (AREA, "session '%s' is lost: %s", s->id, reason);
    s_write (NULL, api, "UPDATE sessions SET lost_at = :at, lost_reason = :text WHERE id = :id AND lost_at IS NULL",
             s->id, reason, s->lost_at, NULL);
    return false;
}

static json_t *s_json (api_t *api, const session_t *s, const char *scope)
{
    json_t *j = json_object ();
    json_object_set_new (j, "id", api_json_text (s->id));
    json_object_set_new (j, "tenant", api_json_text (s->tenant));
    json_object_set_new (j, "backend", api_json_text (s->backend));
    json_object_set_new (j, "scope", api_json_text (s->scope));
    json_object_set_new (j, "host", api_json_text (s->host));
    json_object_set_new (j, "subject", api_json_text (s->subject));
    json_object_set_new (j, "state", json_string (s->closed_at ? "closed" : s->lost_at ? "lost" : "live"));
    json_object_set_new (j, "lost_reason", s->lost_at ? api_json_text (s->lost_reason) : json_null ());
    json_object_set_new (j, "created_at", api_json_time (s->created_at));
    json_object_set_new (j, "opened_at", api_json_time (s->opened_at));
    int status;
    json_t *agent = s->agent_id [0] && !s->lost_at && !s->closed_at
                  ? api_agent_get (api, s->agent_id, scope, &status) : NULL;
    json_object_set_new (j, "agent", agent ? agent : json_null ());
    return j;
}

//  --------------------------------------------------------------------
//  Opening

//  The answer: the session and its agent, once the agent is made (and,
//  with ?wait=1, once it has left its transitional state).
static void s_answered (api_t *api, req_t *r, void *arg, int status, const char *why)
{
    (void) arg;
    if (!r)
        return;
    session_t s;
    if (status)
        api_respond_error (r, status, "cannot write the session: %s", why);
    else
    if (s_by_id (api, r->name, "", &s) != 1)
        api_respond_error (r, 500, "session '%s' vanished", r->name);
    else {
        json_t *j = s_json (api, &s, "");
        json_object_set_new (j, "created", json_boolean (r->status == 201));
        api_respond (r, r->status, j);
    }
}

//  id is r->name; status is r->status (what s_park kept).
static void s_answer (req_t *r)
{
    if (s_write (r, r->api, "UPDATE sessions SET opened_at = :at WHERE id = :id", r->name, NULL,
                 ah_store_now_ms (), s_answered))
        api_respond_error (r, 503, "out of memory");
}

//  A parked open: waits for the sandbox of the session in r->name (made
//  by another open) and, with ?wait=1, for its state to settle.
static void s_wait_check (req_t *r)
{
    session_t s;
    int rc = s_by_id (r->api, r->name, "", &s);
    if (rc < 0)
        return;                     //  the next tick
    if (rc == 0 || s.closed_at || s.lost_at) {
        api_unpark (r);
        api_respond_error (r, 409, "session '%s' could not be opened: %s", r->name,
                           rc == 0 ? "it was removed" : s.lost_at || s.lost_reason [0] ? s.lost_reason
                                                      : "it was closed");
        return;
    }
    if (!s.agent_id [0])
        return;                     //  its sandbox is still being made
    bool wait = false;
    api_query_bool (r, "wait", &wait);
    if (wait) {
        int status;
        json_t *agent = api_agent_get (r->api, s.agent_id, "", &status);
        bool busy = agent && api_transitional (json_string_value (json_object_get (agent, "state")));
        json_decref (agent);
        if (busy)
            return;
    }
    api_unpark (r);
    if (!r->status)
        r->status = 200;
    s_answer (r);
}

static void s_wait_late (req_t *r)
{
    api_respond_error (r, 504, "session '%s': its sandbox was not ready within %d s", r->name, SESSION_WAIT_S);
}

static void s_park (req_t *r, const char *id, int status)
{
    if (id != r->name)
        snprintf (r->name, sizeof r->name, "%s", id);
    r->status = status;             //  the status to answer with
    r->on_state = s_wait_check;
    r->on_deadline = s_wait_late;
    api_park (r, zclock_mono () + SESSION_WAIT_S * 1000);
    s_wait_check (r);
}

//  lifecycle made (or refused) the session's sandbox.
static void s_noted (api_t *api, req_t *r, void *arg, int status, const char *why)
{
    (void) api, (void) arg;
    if (!r)
        return;
    if (status) {
        api_respond_error (r, 500, "the session's sandbox was made but cannot be noted: %s", why);
        return;
    }
    api_record (r, true, NULL);
    s_park (r, r->name, 201);
}

static void s_created (req_t *r, ah_msg_t *reply)
{
    const char *agent_id = ah_msg_str (reply, "agent_id");
    if (!agent_id || ah_ident_check (AH_IDENT_AGENT_ID, agent_id)) {
        api_respond_error (r, 500, "the session's sandbox was made but lifecycle named no agent");
        return;
    }
    snprintf (r->agent_id, sizeof r->agent_id, "%s", agent_id);
    r->on_refused = NULL;           //  made: a late write does not close the row
    if (s_write (r, r->api, "UPDATE sessions SET agent_id = :text WHERE id = :id", r->name, agent_id, 0, s_noted))
        api_respond_error (r, 503, "out of memory");
}

//  A refused create (or one that was not answered): the row is closed,
//  and the opens waiting for it say why.
static void s_create_refused (req_t *r, const char *why)
{
    char text [600];
    snprintf (text, sizeof text, "its sandbox could not be made: %s", why ? why : "refused");
    s_write (NULL, r->api, "UPDATE sessions SET closed_at = :at, lost_reason = :text WHERE id = :id"
             " AND closed_at IS NULL", r->name,
             text, ah_store_now_ms (), NULL);
}

//  A live row without a sandbox: being made by an open of this server,
//  or left by one that did not finish (a restart). Adopts the sandbox if
//  it was made after all, else closes the row. true: wait for it.
static bool s_in_the_making (req_t *r, session_t *s)
{
    for (req_t *o = r->api->pending; o; o = o->next)
        if (o->asked && o->kind && streq (o->kind, "session.open") && streq (o->name, s->id))
            return true;
    sqlite3_stmt *st = ah_store_prepare (r->api->store,
        "SELECT id FROM agents WHERE name = :name AND tenant = :tenant");
    int rc = st && !ah_store_bind_text (st, ":name", s->id) && !ah_store_bind_text (st, ":tenant", s->tenant)
           ? ah_store_step (r->api->store, st) : SQLITE_ERROR;
    char id [AH_AGENT_ID_LEN + 1] = "";
    if (rc == SQLITE_ROW)
        s_copy (id, sizeof id, st, 0);
    if (st)
        sqlite3_reset (st);
    if (id [0]) {
        s_write (NULL, r->api, "UPDATE sessions SET agent_id = :text WHERE id = :id", s->id, id, 0, NULL);
        snprintf (s->agent_id, sizeof s->agent_id, "%s", id);
        return true;
    }
    snprintf (r->name, sizeof r->name, "%s", s->id);
    s_create_refused (r, "the open that made it did not finish");
    return false;
}

//  An open's key, kept while its row is written.
typedef struct {
    char tenant [64];
    char *backend, *scope, *host, *subject, *runtime;
} opening_t;

static void s_opening_free (opening_t *o)
{
    if (!o)
        return;
    free (o->backend);
    free (o->scope);
    free (o->host);
    free (o->subject);
    free (o->runtime);
    free (o);
}

//  The row of a first open is written: its sandbox is asked for. Another
//  open of the key wrote its row first (the key is taken, 409): this one
//  attaches to that (s_park: its sandbox, or the reason it was refused).
static void s_inserted (api_t *api, req_t *r, void *arg, int status, const char *why)
{
    opening_t *o = api_stmt_ctx (arg);
    session_t s;
    if (!r)
        ;
    else
    if (status == 409 && s_by_key (api, o->tenant, o->backend, o->scope, o->host, o->subject, &s) == 1) {
        //  Written by an open of this server since this one looked: it
        //  waits for that one's sandbox, or its refusal (once written).
        r->kind = NULL;
        s_park (r, s.id, 200);
    }
    else
    if (status) {
        r->kind = NULL;
        api_respond_error (r, 500, "cannot write the session: %s", why);
    }
    else {
        ah_msg_t *msg = ah_msg_new ("AGENT_CREATE");
        ah_msg_set_strf (msg, "by", "api:%s", r->who.token_name);
        ah_msg_set_str (msg, "name", r->name);
        ah_msg_set_str (msg, "tenant", o->tenant);
        if (o->runtime)
            ah_msg_set_str (msg, "runtime", o->runtime);
        r->on_refused = s_create_refused;
        api_ask (r, "lifecycle", &msg, s_created);
    }
    s_opening_free (o);
}

static const body_field_t s_open_fields [] = {
    { "scope", B_STR, NULL }, { "subject", B_STR, NULL }, { "backend", B_STR, NULL }, { "host", B_STR, NULL },
    { "runtime", B_STR, NULL }, { NULL, 0, NULL }
};

static void s_open (req_t *r)
{
    bool wait = false;
    if (api_query_bool (r, "wait", &wait))
        return;
    json_t *obj = api_body_object (r, false);
    if (!obj)
        return;
    const char *scope = json_string_value (json_object_get (obj, "scope"));
    const char *subject = json_string_value (json_object_get (obj, "subject"));
    const char *backend = json_string_value (json_object_get (obj, "backend"));
    const char *host = json_string_value (json_object_get (obj, "host"));
    const char *runtime = json_string_value (json_object_get (obj, "runtime"));
    int k = -1;
    for (int i = 0; scope && i < 5; i++)
        if (streq (scope, s_scopes [i]))
            k = i;
    const char *why;
    if (k < 0)
        api_respond_error (r, 400, "field 'scope' must be one of run, conversation, channel, user, agent");
    else if (k == 3 && !r->who.user [0])
        api_respond_error (r, 403, "a user session belongs to the person a token acts for, and token '%s' "
                           "acts for nobody (token create --user)", r->who.token_name);
    else if (k == 3 && subject && !streq (subject, r->who.user))
        api_respond_error (r, 403, "token '%s' acts for '%s': it cannot open the user session of '%.64s'",
                           r->who.token_name, r->who.user, subject);
    else if (k != 3 && !subject)
        api_respond_error (r, 400, "field 'subject' is required (the %s the session is for)", scope);
    else if ((why = s_part_check (k == 3 ? r->who.user : subject, false)))
        api_respond_error (r, 400, "field 'subject' %s", why);
    else if ((why = s_part_check (backend, true)))
        api_respond_error (r, 400, "field 'backend' %s", why);
    else if ((why = s_part_check (host, true)))
        api_respond_error (r, 400, "field 'host' %s", why);
    else if (runtime && ah_ident_check (AH_IDENT_RUNTIME, runtime))
        api_respond_error (r, 400, "field 'runtime': runtime name '%.64s' %s", runtime,
                           ah_ident_check (AH_IDENT_RUNTIME, runtime));
    else {
        if (k == 3)
            subject = r->who.user;
        if (!backend || !*backend)
            backend = "api";
        if (!host)
            host = "";
        const char *tenant = api_tenant (r);
        session_t s;
        int rc = s_by_key (r->api, tenant, backend, scope, host, subject, &s);
        if (rc < 0)
            api_respond_error (r, 500, "cannot read the sessions");
        else if (rc == 1 && s_still_live (r->api, &s) && (s.agent_id [0] || s_in_the_making (r, &s)))
            s_park (r, s.id, 200);          //  attach (or wait for the first open's sandbox)
        else {
            //  The first open of the key (or a fresh one after a lost one).
            char name [AH_NAME_MAX + 1];
            s_make_name (k, backend, subject, name, sizeof name);
            int64_t now = ah_store_now_ms ();
            api_stmt_t *st = api_stmt (
                "INSERT INTO sessions (id, tenant, backend, scope, host, subject, created_at, opened_at)"
                " VALUES (:id, :tenant, :backend, :scope, :host, :subject, :now, :now)");
            st = api_stmt_text (api_stmt_text (api_stmt_text (st, ":id", name), ":tenant", tenant), ":backend", backend);
            st = api_stmt_text (api_stmt_text (api_stmt_text (st, ":scope", scope), ":host", host), ":subject", subject);
            st = api_stmt_int (st, ":now", now);
            opening_t *o = calloc (1, sizeof *o);
            if (o) {
                snprintf (o->tenant, sizeof o->tenant, "%s", tenant);
                o->backend = strdup (backend);
                o->scope = strdup (scope);
                o->host = strdup (host);
                o->subject = strdup (subject);
                o->runtime = runtime ? strdup (runtime) : NULL;
            }
            snprintf (r->name, sizeof r->name, "%s", name);
            snprintf (r->detail, sizeof r->detail, "session %s %s: %s", scope, subject, name);
            r->kind = "session.open";       //  an open in the making (s_in_the_making)
            if (!o || !o->backend || !o->scope || !o->host || !o->subject || (runtime && !o->runtime)
            ||  api_stmt_write (r, r->api, st, s_inserted, o)) {
                s_opening_free (o);
                r->kind = NULL;
                api_respond_error (r, 503, "out of memory");
            }
        }
    }
    json_decref (obj);
}

//  --------------------------------------------------------------------
//  By reference

//  {session}: one of the caller's tenant. NULL answered.
static bool s_resolve (req_t *r, session_t *s)
{
    const char *id = r->params [0];
    if (!ah_ident_ok (AH_IDENT_AGENT_NAME, id)) {
        api_respond_error (r, 400, "session '%.64s' %s", id, ah_ident_check (AH_IDENT_AGENT_NAME, id));
        return false;
    }
    int rc = s_by_id (r->api, id, r->who.scope, s);
    if (rc != 1)
        api_respond_error (r, rc == 0 ? 404 : 500, rc == 0 ? "no session '%s'" : "cannot read session '%s'", id);
    return rc == 1;
}

static void s_show (req_t *r)
{
    session_t s;
    if (!s_resolve (r, &s))
        return;
    s_still_live (r->api, &s);
    api_respond (r, 200, s_json (r->api, &s, r->who.scope));
}

static void s_reopen (req_t *r)
{
    bool wait = false;
    if (api_query_bool (r, "wait", &wait))
        return;
    session_t s;
    if (!s_resolve (r, &s))
        return;
    //  A user session is its person's workspace: no other token opens it.
    if (streq (s.scope, "user") && !r->who.admin && !streq (s.subject, r->who.user)) {
        api_respond_error (r, 403, "session '%s' is the user session of '%.64s': token '%s' acts for %s%s%s",
                           s.id, s.subject, r->who.token_name, r->who.user [0] ? "'" : "nobody",
                           r->who.user, r->who.user [0] ? "'" : "");
        return;
    }
    if (!s_still_live (r->api, &s)) {
        api_respond_error (r, 410, "session '%s' is %s: %s", s.id, s.closed_at ? "closed" : "lost",
                           s.closed_at ? "it was closed" : s.lost_reason);
        return;
    }
    s_park (r, s.id, 200);
}

static void s_list (req_t *r)
{
    sqlite3_stmt *st = ah_store_prepare (r->api->store, SESSION_SELECT
        " WHERE (:scope = '' OR tenant = :scope) AND closed_at IS NULL ORDER BY tenant, opened_at DESC");
    if (st && ah_store_bind_text (st, ":scope", r->who.scope))
        st = NULL;
    json_t *list = st ? json_array () : NULL;
    int rc = SQLITE_ERROR;
    session_t rows [200];
    size_t n = 0;
    while (st && (rc = ah_store_step (r->api->store, st)) == SQLITE_ROW && n < 200)
        s_read (st, &rows [n++]);
    if (st)
        sqlite3_reset (st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        json_decref (list);
        api_respond_error (r, 500, "cannot read the sessions");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        s_still_live (r->api, &rows [i]);
        json_array_append_new (list, s_json (r->api, &rows [i], r->who.scope));
    }
    api_respond (r, 200, json_pack ("{s:o}", "sessions", list));
}

static api_written_fn s_closed;

static void s_close (req_t *r)
{
    session_t s;
    if (!s_resolve (r, &s))
        return;
    if (s.closed_at) {
        api_respond_error (r, 410, "session '%s' is closed already", s.id);
        return;
    }
    snprintf (r->name, sizeof r->name, "%s", s.id);
    snprintf (r->agent_id, sizeof r->agent_id, "%s", s.agent_id);
    if (s_write (r, r->api, "UPDATE sessions SET closed_at = :at WHERE id = :id AND closed_at IS NULL", s.id, NULL,
                 ah_store_now_ms (), s_closed))
        api_respond_error (r, 503, "out of memory");
}

static void s_closed (api_t *api, req_t *r, void *arg, int status, const char *why)
{
    if (!r)
        return;
    if (status) {
        api_respond_error (r, 500, "cannot write the session: %s", why);
        return;
    }
    if (!api_stmt_changes (arg)) {
        api_respond_error (r, 410, "session '%s' is closed already", r->name);
        return;
    }
    if (r->agent_id [0]) {
        //  Lost or not, what is left of its sandbox goes with it (a lost
        //  home's recreated sandbox included; a destroyed one is a no-op).
        ah_msg_t *m = ah_msg_new ("SANDBOX_DESTROY");
        ah_msg_set_str (m, "agent", r->agent_id);
        ah_msg_set_strf (m, "by", "api:%s", r->who.token_name);
        api_send (api, "lifecycle", &m);
    }
    snprintf (r->detail, sizeof r->detail, "session %s", r->name);
    r->kind = "session.close";
    api_record (r, true, NULL);
    api_respond (r, 200, json_pack ("{s:s, s:b}", "id", r->name, "closed", 1));
}

const route_t api_session_routes [] = {
    { M_POST, "/api/v1/sessions", s_open, R_BODY, "wait", s_open_fields },
    { M_GET, "/api/v1/sessions", s_list, 0, "", NULL },
    { M_GET, "/api/v1/sessions/{session}", s_show, 0, "", NULL },
    { M_POST, "/api/v1/sessions/{session}/open", s_reopen, R_BODY, "wait", api_no_body },
    { M_DELETE, "/api/v1/sessions/{session}", s_close, 0, "", NULL },
    { 0 }
};
