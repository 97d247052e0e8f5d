/*  actors/api/events.c: the API's event streams and wakes (see
    events.h, docs/api.md "Events" and "Wake").

    DESIGN. Everything here runs on the API actor's thread, the one lws
    service thread: the streams' requests, the actor (for the bus) and
    the SQLite connection are borrowed. Two lists, both owned here:
    - streams: one per GET /api/v1/events request. An event is queued as
      text in the stream's buffer and handed to the connection when it
      can write (http.c asks the request's produce); a stream more than
      AH_API_EVENTS_MAX_BACKLOG behind (a client that stopped reading) is
      closed, so memory stays bounded whatever the clients do.
    - waiters: requests (a turn, a terminal) held until their agent runs.
      Their state is re-read from the database on every SANDBOX_STATE for
      the agent and on every tick, so a missed event costs at most a tick.
      A waiter leaves the list before its callback runs: the callback may
      start another wake or close the request.                       */
#include "actors/api/api_int.h"

#include <string.h>

typedef struct stream_t {
    struct stream_t *next;
    req_t *r;
    char agent_id [48];             //  "" = every agent (of the scope)
    char scope [64];                //  the tenant whose agents it shows, "" = every tenant
    ah_buf_t buf;                   //  text not yet handed to the connection
    bool dead;                      //  too far behind: close
    int64_t queued_ms;              //  when something was last queued (keep-alive)
} stream_t;

typedef struct waiter_t {
    struct waiter_t *next;
    void *ctx;
    ah_api_wake_fn *fn;
    char agent_id [48];
    char name [72];
    char tenant [64];
    int64_t deadline_ms;
    int timeout_s;
    int64_t req;                    //  our SANDBOX_START's (negative), 0 none sent
    bool accepted;                  //  lifecycle took it: an error now is the start's
    int tries;
} waiter_t;

struct _ah_api_events_t {
    ah_store_t *store;              //  borrowed
    ah_actor_t *actor;              //  borrowed: the bus
    stream_t *streams;
    size_t nstreams;
    waiter_t *waiters;
    size_t nwaiters;
    int64_t next_req;               //  counts down from -1
    zhashx_t *names;                //  agent id -> name, for "destroyed" events
};

ah_api_events_t *ah_api_events_new (ah_store_t *store, ah_actor_t *actor)
{
    ah_api_events_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->store = store;
    self->actor = actor;
    self->names = zhashx_new ();
    if (!self->names) {
        free (self);
        return NULL;
    }
    zhashx_set_destructor (self->names, (zhashx_destructor_fn *) zstr_free);
    zhashx_set_duplicator (self->names, (zhashx_duplicator_fn *) strdup);
    return self;
}

void ah_api_events_destroy (ah_api_events_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_api_events_t *self = *self_p;
    while (self->streams) {
        stream_t *s = self->streams;
        self->streams = s->next;
        ah_buf_free (&s->buf);
        free (s);
    }
    //  Waiters' requests are gone with the lws context: no callbacks.
    while (self->waiters) {
        waiter_t *w = self->waiters;
        self->waiters = w->next;
        free (w);
    }
    zhashx_destroy (&self->names);
    free (self);
    *self_p = NULL;
}

//  --------------------------------------------------------------------
//  The database

//  An agent as the streams and the waiters see it.
typedef struct {
    char id [AH_AGENT_ID_LEN + 1];
    char name [AH_NAME_MAX + 1];
    char tenant [64];
    char state [32];
    char error [512];
} agent_t;

//  By id or name (ah_store_agent_find: an id wins; within tenant unless
//  it is NULL or ""). 1 found, 0 not, -2 a name of several tenants, -1
//  error. Remembers id -> tenant and name for the "destroyed" event, when
//  the row is gone.
static int s_agent (ah_api_events_t *self, const char *key, const char *tenant, agent_t *out)
{
    memset (out, 0, sizeof *out);
    char id [AH_AGENT_ID_LEN + 1];
    int found = ah_store_agent_find (self->store, key, tenant, id, sizeof id);
    if (found != 1)
        return found;
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT a.id, a.name, a.tenant,"
        " CASE WHEN s.unreachable IS NULL THEN s.state ELSE 'unreachable' END,"
        " coalesce (s.unreachable, s.error) FROM agents a"
        " LEFT JOIN sandboxes s ON s.agent_id = a.id WHERE a.id = :id");
    if (!st || ah_store_bind_text (st, ":id", id))
        return -1;
    int rc = ah_store_step (self->store, st);
    if (rc == SQLITE_ROW) {
        const char *cols [5];
        for (int i = 0; i < 5; i++)
            cols [i] = (const char *) sqlite3_column_text (st, i);
        snprintf (out->id, sizeof out->id, "%s", cols [0] ? cols [0] : "");
        snprintf (out->name, sizeof out->name, "%s", cols [1] ? cols [1] : "");
        snprintf (out->tenant, sizeof out->tenant, "%s", cols [2] ? cols [2] : "");
        snprintf (out->state, sizeof out->state, "%s", cols [3] ? cols [3] : "");
        snprintf (out->error, sizeof out->error, "%s", cols [4] ? cols [4] : "");
        if (zhashx_size (self->names) >= 10000)
            zhashx_purge (self->names);     //  a cache: bounded
        char both [200];
        snprintf (both, sizeof both, "%s\t%s", out->tenant, out->name);
        zhashx_update (self->names, out->id, both);
    }
    sqlite3_reset (st);
    return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
}

//  --------------------------------------------------------------------
//  Streams

static void s_queue (stream_t *s, const char *text, size_t n)
{
    if (s->dead)
        return;
    s->queued_ms = zclock_mono ();
    if (ah_buf_size (&s->buf) + n > AH_API_EVENTS_MAX_BACKLOG) {
        ah_info (AREA, "an event stream fell %zu bytes behind: closing it", ah_buf_size (&s->buf) + n);
        s->dead = true;
    }
    else if (ah_buf_append (&s->buf, text, n))
        s->dead = true;
    api_want_write (s->r);
}

//  One event to every stream that wants the agent's.
//  connected: -1 not said, else 0 / 1 (SANDBOX_CONNECTED).
static void s_publish (ah_api_events_t *self, const char *agent_id, const char *tenant, const char *name,
                       const char *state, const char *op, const char *error, const char *message,
                       int connected)
{
    if (!self->streams)
        return;
    char at [40];
    ah_store_format_time (ah_store_now_ms (), at, sizeof at);
    json_t *event = json_object ();
    json_object_set_new (event, "agent_id", json_string (agent_id));
    json_object_set_new (event, "name", name && *name ? json_string (name) : json_null ());
    json_object_set_new (event, "state", state ? json_string (state) : json_null ());
    json_object_set_new (event, "op", op ? json_string (op) : json_null ());
    json_object_set_new (event, "error", error ? json_string (error) : json_null ());
    json_object_set_new (event, "at", json_string (at));
    if (message)
        json_object_set_new (event, "message", json_string (message));
    if (connected >= 0)
        json_object_set_new (event, "connected", json_boolean (connected));
    //  Invalid UTF-8 makes json_string NULL and the key is dropped: the
    //  event still goes out, with what could be said.
    char *text = json_dumps (event, JSON_COMPACT);
    json_decref (event);
    if (!text)
        return;
    size_t tlen = strlen (text);
    char *line = malloc (tlen + 16);
    if (line) {
        int n = snprintf (line, tlen + 16, "data: %s\n\n", text);
        for (stream_t *s = self->streams; s; s = s->next)
            if ((!s->agent_id [0] || streq (s->agent_id, agent_id))
            &&  (!s->scope [0] || streq (s->scope, tenant)))
                s_queue (s, line, (size_t) n);
    }
    free (line);
    free (text);
}

static void s_stream_free (req_t *r)
{
    ah_api_events_t *self = r->api->events;
    for (stream_t **pp = &self->streams; *pp; pp = &(*pp)->next)
        if (*pp == r->ext) {
            stream_t *s = *pp;
            *pp = s->next;
            self->nstreams--;
            ah_buf_free (&s->buf);
            free (s);
            return;
        }
}

static int s_stream_produce (req_t *r)
{
    stream_t *s = r->ext;
    if (s->dead)
        return -1;
    size_t n = ah_buf_size (&s->buf);
    if (n > API_CHUNK)
        n = API_CHUNK;
    if (n && api_out (r, ah_buf_head (&s->buf), n))
        return -1;
    ah_buf_consume (&s->buf, n);
    return 1;                       //  a stream ends when its client leaves
}

void ah_api_events_end (ah_api_events_t *self, const char *token_name, const char *tenant)
{
    for (stream_t *s = self ? self->streams : NULL; s; s = s->next) {
        const who_t *who = &s->r->who;
        if ((token_name && streq (who->token_name, token_name))
        ||  (tenant && (streq (s->scope, tenant) || (!who->admin && streq (who->tenant, tenant))))) {
            s->dead = true;
            api_want_write (s->r);      //  produce answers -1: the connection closes
        }
    }
}

static const ext_ops_t s_stream_ops = { .free = s_stream_free, .produce = s_stream_produce };

//  GET /api/v1/events[?agent=ID-or-NAME]
static void s_open (req_t *r)
{
    ah_api_events_t *self = r->api->events;
    const char *agent = api_query (r, "agent");
    if (agent && !*agent) {
        api_respond_error (r, 400, "query 'agent' must name an agent (its id or name)");
        return;
    }
    if (self->nstreams >= AH_API_EVENTS_MAX_STREAMS) {
        api_respond_error (r, 503, "too many event streams open (at most %d)", AH_API_EVENTS_MAX_STREAMS);
        return;
    }
    stream_t *s = calloc (1, sizeof *s);
    if (!s) {
        api_respond_error (r, 503, "out of memory for an event stream");
        return;
    }
    snprintf (s->scope, sizeof s->scope, "%s", r->who.scope);
    if (agent) {
        agent_t a;
        int rc = ah_ident_ok (AH_IDENT_AGENT_NAME, agent) || ah_ident_ok (AH_IDENT_AGENT_ID, agent)
               ? s_agent (self, agent, r->who.scope, &a) : 0;
        snprintf (s->agent_id, sizeof s->agent_id, "%s", a.id);
        if (rc != 1) {
            free (s);
            char why [160];
            if (rc == -2)
                api_respond_error (r, 409, "%s", ah_store_agent_ambiguous (agent, why, sizeof why));
            else if (rc < 0)
                api_respond_error (r, 500, "cannot read the database");
            else
                api_respond_error (r, 404, "no agent named '%s'", agent);
            return;
        }
    }
    s->r = r;
    s->next = self->streams;
    self->streams = s;
    self->nstreams++;
    r->ext = s;
    r->ext_ops = &s_stream_ops;
    api_respond_stream (r, 200, "text/event-stream", -2);
    //  A first comment: the client knows the stream is open.
    s_queue (s, ": agenthold events\n\n", 20);
}

const route_t api_event_routes [] = {
    { M_GET, "/api/v1/events", s_open, 0, "agent", NULL },
    { 0 }
};

//  --------------------------------------------------------------------
//  Wakes

void ah_api_events_activity (ah_api_events_t *self, const char *agent_id, const char *what)
{
    if (!self || !agent_id || !*agent_id)
        return;
    ah_msg_t *m = ah_msg_new ("AGENT_ACTIVITY");
    ah_msg_set_str (m, "agent_id", agent_id);
    ah_msg_set_str (m, "what", what);
    ah_actor_send (self->actor, "lifecycle", &m);
}

//  Takes w out of the list (it must be in it) and calls it back.
static void s_done (ah_api_events_t *self, waiter_t *w, int status, const char *error)
{
    for (waiter_t **pp = &self->waiters; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            self->nwaiters--;
            break;
        }
    void *ctx = w->ctx;
    ah_api_wake_fn *fn = w->fn;
    free (w);
    fn (ctx, status, error);
}

static void s_send_start (ah_api_events_t *self, waiter_t *w, const char *state)
{
    ah_msg_t *m = ah_msg_new ("SANDBOX_START");
    w->req = --self->next_req;
    w->accepted = false;
    w->tries++;
    ah_msg_set_int (m, "req", w->req);
    ah_msg_set_str (m, "agent", w->agent_id);
    ah_actor_send (self->actor, "lifecycle", &m);
    ah_info (AREA, "waking agent '%s' (%s)", w->name, state);
    s_publish (self, w->agent_id, w->tenant, w->name, state, "start", NULL, AH_API_WAKE_MESSAGE, -1);
}

//  Where w's agent stands now; calls back when the wait is over.
//  true when w was called back (and is gone).
static bool s_check (ah_api_events_t *self, waiter_t *w)
{
    char text [700];
    agent_t a;
    int rc = s_agent (self, w->agent_id, NULL, &a);
    const char *state = a.state, *error = a.error;
    if (rc < 0)
        return false;                               //  the next tick tries again
    if (rc == 0 || !state [0]) {
        snprintf (text, sizeof text, "agent '%s' was destroyed while it was being woken", w->name);
        s_done (self, w, 409, text);
        return true;
    }
    if (streq (state, "running")) {
        s_done (self, w, 0, NULL);
        return true;
    }
    if (streq (state, "destroying")) {
        snprintf (text, sizeof text, "agent '%s' is being destroyed", w->name);
        s_done (self, w, 409, text);
        return true;
    }
    if (streq (state, "error") && w->accepted) {
        snprintf (text, sizeof text, "agent '%s' could not start: %s", w->name,
                  error [0] ? error : "(no reason given)");
        s_done (self, w, 503, text);
        return true;
    }
    if ((streq (state, "sleeping") || streq (state, "error")) && !w->req) {
        if (w->tries >= 3) {
            snprintf (text, sizeof text, "agent '%s' did not start after %d attempts (it is %s)",
                      w->name, w->tries, state);
            s_done (self, w, 503, text);
            return true;
        }
        s_send_start (self, w, state);
    }
    //  creating, starting, stopping, rebuilding, or our start on its way.
    if (zclock_mono () >= w->deadline_ms) {
        snprintf (text, sizeof text, "agent '%s' did not start within %d s (it is %s)",
                  w->name, w->timeout_s, state);
        s_done (self, w, 504, text);
        return true;
    }
    return false;
}

int ah_api_events_wake (ah_api_events_t *self, const char *agent_id, void *ctx,
                        ah_api_wake_fn *fn, int timeout_s, char *why, size_t why_size)
{
    if (!self || !fn) {
        snprintf (why, why_size, "waking agents is not available");
        return 503;
    }
    agent_t a;
    int rc = s_agent (self, agent_id, NULL, &a);
    const char *name = a.name, *state = a.state;
    if (rc != 1) {
        snprintf (why, why_size, rc < 0 ? "cannot read the database" : "no agent '%s'", agent_id);
        return rc < 0 ? 500 : 404;
    }
    if (streq (state, "running"))
        return 0;
    //  Any use thaws: a frozen agent's use goes on at once, its frames
    //  waiting in the tunnel's socket until sandboxd runs again.
    if (streq (state, "frozen") || streq (state, "freezing") || streq (state, "thawing")) {
        if (!streq (state, "thawing")) {
            ah_msg_t *m = ah_msg_new ("SANDBOX_THAW");
            ah_msg_set_str (m, "agent", agent_id);
            ah_msg_set_str (m, "reason", "a use");
            ah_actor_send (self->actor, "lifecycle", &m);
            ah_info (AREA, "thawing agent '%s' (%s)", name, state);
        }
        return 0;
    }
    if (!state [0] || streq (state, "destroying")) {
        snprintf (why, why_size, "agent '%s' is %s", name, state [0] ? state : "without a sandbox");
        return 409;
    }
    if (self->nwaiters >= AH_API_WAKE_MAX) {
        snprintf (why, why_size, "too many requests waiting for agents to wake (at most %d)", AH_API_WAKE_MAX);
        return 503;
    }
    ah_api_events_wake_cancel (self, ctx);
    waiter_t *w = calloc (1, sizeof *w);
    if (!w) {
        snprintf (why, why_size, "out of memory");
        return 503;
    }
    w->ctx = ctx;
    w->fn = fn;
    snprintf (w->agent_id, sizeof w->agent_id, "%s", agent_id);
    snprintf (w->name, sizeof w->name, "%s", name);
    snprintf (w->tenant, sizeof w->tenant, "%s", a.tenant);
    w->timeout_s = timeout_s > 0 ? timeout_s : AH_API_WAKE_TIMEOUT_S;
    w->deadline_ms = zclock_mono () + (int64_t) w->timeout_s * 1000;
    w->next = self->waiters;
    self->waiters = w;
    self->nwaiters++;
    if (streq (state, "sleeping") || streq (state, "error"))
        s_send_start (self, w, state);
    return 1;
}

void ah_api_events_wake_cancel (ah_api_events_t *self, void *ctx)
{
    if (!self)
        return;
    for (waiter_t **pp = &self->waiters; *pp; )
        if ((*pp)->ctx == ctx) {
            waiter_t *w = *pp;
            *pp = w->next;
            self->nwaiters--;
            free (w);
        }
        else
            pp = &(*pp)->next;
}

bool ah_api_events_reply (ah_api_events_t *self, const ah_msg_t *msg)
{
    int64_t req = ah_msg_int (msg, "req", 0);
    if (!self || req >= 0)
        return false;
    waiter_t *w = self->waiters;
    while (w && w->req != req)
        w = w->next;
    if (!w)
        return true;                                //  ours, its waiter gone
    if (ah_msg_bool (msg, "ok", false)) {
        w->accepted = true;
        s_check (self, w);
        return true;
    }
    int status = (int) ah_msg_int (msg, "status", 500);
    const char *error = ah_msg_str (msg, "error");
    if (status == 409) {
        //  It moved between our read and lifecycle's (into stopping, say):
        //  the next check sends again once it is sleeping.
        w->req = 0;
        return true;
    }
    char text [700];
    snprintf (text, sizeof text, "agent '%s' could not be started: %s", w->name,
              error && *error ? error : "lifecycle refused");
    s_done (self, w, status >= 400 && status <= 599 ? status : 500, text);
    return true;
}

//  Checks every waiter of agent_id (NULL: all). A callback may change the
//  list, so after each one the walk starts again; each waiter is checked
//  at most once per call (the pass mark).
static void s_check_all (ah_api_events_t *self, const char *agent_id)
{
    size_t n = self->nwaiters;
    waiter_t **todo = n ? calloc (n, sizeof *todo) : NULL;
    if (!todo)
        return;
    size_t k = 0;
    for (waiter_t *w = self->waiters; w && k < n; w = w->next)
        if (!agent_id || streq (w->agent_id, agent_id))
            todo [k++] = w;
    for (size_t i = 0; i < k; i++) {
        //  Still there? (an earlier callback may have cancelled it)
        waiter_t *w = self->waiters;
        while (w && w != todo [i])
            w = w->next;
        if (w)
            s_check (self, w);
    }
    free (todo);
}

void ah_api_events_on_state (ah_api_events_t *self, const ah_msg_t *msg)
{
    const char *agent_id = ah_msg_str (msg, "agent_id");
    if (!self || !agent_id)
        return;
    const char *state = ah_msg_str (msg, "state");
    if (self->streams) {
        agent_t a;
        if (s_agent (self, agent_id, NULL, &a) != 1) {
            //  Gone (destroyed): what the cache remembers, "tenant\tname".
            const char *known = zhashx_lookup (self->names, agent_id);
            const char *tab = known ? strchr (known, '\t') : NULL;
            snprintf (a.tenant, sizeof a.tenant, "%.*s", tab ? (int) (tab - known) : 0, known ? known : "");
            snprintf (a.name, sizeof a.name, "%s", tab ? tab + 1 : "");
        }
        //  A stream of a tenant shows nothing of an agent it cannot tell
        //  is its own.
        if (a.tenant [0] || !state || !streq (state, "destroyed"))
            //  A preparing sandbox's progress is the event's message.
            s_publish (self, agent_id, a.tenant, a.name, state, ah_msg_str (msg, "op"),
                       ah_msg_str (msg, "error"), ah_msg_str (msg, "progress"), -1);
    }
    if (state && streq (state, "destroyed"))
        zhashx_delete (self->names, agent_id);
    s_check_all (self, agent_id);
}

void ah_api_events_on_connected (ah_api_events_t *self, const ah_msg_t *msg)
{
    const char *agent_id = ah_msg_str (msg, "agent_id");
    agent_t a;
    if (!self || !self->streams || !agent_id || s_agent (self, agent_id, NULL, &a) != 1)
        return;
    s_publish (self, agent_id, a.tenant, a.name, a.state, NULL, NULL, NULL,
               ah_msg_bool (msg, "connected", false));
}

void ah_api_events_tick (ah_api_events_t *self)
{
    if (!self)
        return;
    int64_t now = zclock_mono ();
    for (stream_t *s = self->streams; s; s = s->next)
        if (now - s->queued_ms >= AH_API_EVENTS_KEEPALIVE_MS)
            s_queue (s, ": keep-alive\n\n", 14);
    s_check_all (self, NULL);
}
