/*  actors/api/terms.c: terminals that last (issue 29, docs/api.md
    "Terminals"): a terminal is an object of its agent with an id, a
    size and a title, listed, created and ended by
    /api/v1/agents/{agent}/terminals, and watched by any number of
    WebSocket clients (the terminal route with ?terminal=ID).

    DESIGN. One thread, the api's, owns every term_t (api->terms). A
    term holds a kept pty in the sandbox (docs/tunnel.md "pty", a pty
    with an id): sandboxd keeps the shell when our stream goes. While
    the tunnel is up the term keeps one stream open to it, whether or
    not a client watches, and feeds every byte of output to its screen
    (vscreen.c, libvterm) and to the clients attached. The stream's
    output is acknowledged to the tunnel as soon as the screen took it:
    a client that does not read never holds the shell back; its queue
    beyond TERM_CLIENT_QUEUE closes it (1008) and it may reattach. When
    the stream breaks without the shell's end (a tunnel reconnect, a
    freeze), the term reattaches each TERM_RETRY_MS from the record
    bytes it received whole, so sandboxd replays what came meanwhile
    (up to its ring, 256 KiB); after TERM_RETRIES failed tries, or when
    sandboxd no longer knows the id (the sandbox slept or restarted),
    the term is ended and says why, its screen still readable.

    A client that attaches gets the screen drawn first (scrollback,
    screen, cursor), then live output. The client that attached last
    writes (keystrokes and resizes); the others watch, their input is
    dropped.

    libvterm runs here, on the api's thread (the network thread). It
    costs about 0.1 us a byte (9 MB/s on this machine, loaded): fine for
    what people type and read, not for a flood. So the screens of all
    terminals together take at most TERM_SCREEN_RATE bytes a second
    (a token bucket of TERM_SCREEN_BURST): output beyond it waits, not
    acknowledged, in the term's pending buffer (at most the channel's
    credit, API_CHAN_CREDIT), the tunnel's window closes, and sandboxd
    stops reading the pty: a flooding shell is slowed, as a slow
    terminal slows it, and the api thread spends at most about a fifth
    of its time on screens (docs/architecture.md, "A terminal's
    screen").                                                          */
#include "actors/api/api_int.h"
#include "actors/api/vscreen.h"
#include "proto/channel.h"
#include "proto/procchan.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#define TERM_MAX_PER_AGENT  AH_PTYCHAN_KEPT_MAX     //  32, as sandboxd
#define TERM_SB_LINE_BYTES  400                     //  scrollback bytes a line on average at most
#define TERM_CLIENT_QUEUE   (1u << 20)              //  output queued for one client at most
#define TERM_RETRY_MS       1000
#define TERM_RETRIES        30
#define TERM_ID_LEN         13                      //  't' and 12 hex digits
#define TERM_SCREEN_RATE    (2 << 20)               //  output bytes a second into all screens
#define TERM_SCREEN_BURST   (512 << 10)
#define TERM_EARLY_MAX      (64u << 10)             //  input kept while starting or reconnecting

typedef enum { T_OPENING, T_LIVE, T_DOWN, T_EXITED, T_ENDED } tstate_t;
static const char *s_state_name [] = { "starting", "running", "reconnecting", "exited", "ended" };

typedef struct tclient_t {
    struct tclient_t *next;
    struct term_t *t;               //  NULL once the term is gone
    conn_t *conn;
} tclient_t;

typedef struct term_t {
    struct term_t *next;
    api_t *api;
    char id [TERM_ID_LEN + 1];
    char agent_id [AH_AGENT_ID_LEN + 1];
    char name [AH_NAME_MAX + 1];
    char title [256];               //  given at creation; else the program's (OSC)
    int cols, rows;
    int64_t created_ms;             //  wall clock
    tstate_t state;
    bool deleting;                  //  DELETE asked: KILL once attached, then gone
    bool created;                   //  sandboxd has it
    int retries;
    int64_t retry_at;
    char note [300];                //  why it exited or ended
    ah_vscreen_t *vs;
    api_chan_t chan;
    ah_rec_reader_t reader;
    uint64_t received;              //  output record bytes received whole
    uint64_t rec_len;               //  of the record being received
    uint8_t exit_rec [256];
    size_t exit_len;
    bool exited;
    ah_buf_t pending;               //  output over the budget, not yet acknowledged
    ah_buf_t early;                 //  the writer's input while starting or reconnecting
    bool close_due;                 //  the stream ended with pending output: handled once drained
    char close_error [200];
    bool close_has_error;
    tclient_t *clients;             //  the first is the writer
    int64_t left_ms;                //  when its last client left (mono), 0 never had one
    bool had_clients;               //  at the last news
    bool counted;                   //  counted in TERMINALS (a client, or left not long ago)
} term_t;

static void s_open_chan (term_t *t);

//  --------------------------------------------------------------------
//  Lookup and the objects

static bool s_id_ok (const char *id)
{
    if (!id || strlen (id) != TERM_ID_LEN || id [0] != 't')
        return false;
    return strspn (id + 1, "0123456789abcdef") == TERM_ID_LEN - 1;
}

static term_t *s_find (api_t *api, const char *agent_id, const char *id)
{
    for (term_t *t = api->terms; t; t = t->next)
        if (!t->deleting && streq (t->agent_id, agent_id) && streq (t->id, id))
            return t;
    return NULL;
}

//  The agent's terminals, those being ended too: sandboxd holds their
//  place until their shell is gone.
static int s_count (api_t *api, const char *agent_id)
{
    int n = 0;
    for (term_t *t = api->terms; t; t = t->next)
        n += streq (t->agent_id, agent_id);
    return n;
}

//  Whether t counts as an open terminal: a client attached, or the last
//  one left less than terminal.detached_counts_for ago.
static bool s_counts (const term_t *t, int64_t now)
{
    if (t->deleting || t->state >= T_EXITED)
        return false;
    return t->clients || (t->left_ms
        && now - t->left_ms < (int64_t) (t->api->config->terminal_detached_s * 1000));
}

int api_terms_watched (api_t *api, const char *agent_id)
{
    int n = 0;
    int64_t now = zclock_mono ();
    for (term_t *t = api->terms; t; t = t->next)
        n += streq (t->agent_id, agent_id) && s_counts (t, now);
    return n;
}

static int s_clients (const term_t *t)
{
    int n = 0;
    for (tclient_t *c = t->clients; c; c = c->next)
        n++;
    return n;
}

static void s_news (term_t *t)
{
    if (!t->clients && t->had_clients)
        t->left_ms = zclock_mono ();
    t->had_clients = t->clients != NULL;
    t->counted = s_counts (t, zclock_mono ());
    api_terminals_news (t->api, t->agent_id);
}

static void s_close_clients (term_t *t, int code, const char *reason)
{
    bool had = t->clients != NULL;
    while (t->clients) {
        tclient_t *c = t->clients;
        t->clients = c->next;
        c->t = NULL;
        c->next = NULL;
        api_ws_close (c->conn, code, reason);
    }
    if (had)
        s_news (t);
}

static void s_free (term_t *t)
{
    s_close_clients (t, 1000, t->note [0] ? t->note : "the terminal was ended");
    api_chan_close (&t->chan);
    ah_api_events_wake_cancel (t->api->events, t);
    for (term_t **p = &t->api->terms; *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    if (t->counted)
        api_terminals_news (t->api, t->agent_id);
    ah_vscreen_destroy (&t->vs);
    ah_buf_free (&t->pending);
    ah_buf_free (&t->early);
    free (t);
}

static json_t *s_json (term_t *t)
{
    const char *title = t->title [0] ? t->title : ah_vscreen_title (t->vs);
    json_t *o = json_pack ("{s:s, s:i, s:i, s:o, s:o, s:s, s:i}",
                           "id", t->id, "cols", t->cols, "rows", t->rows,
                           "title", api_json_text (title), "created_at", api_json_time (t->created_ms),
                           "state", s_state_name [t->state], "clients", s_clients (t));
    if (t->note [0])
        json_object_set_new (o, "note", api_json_text (t->note));
    return o;
}

//  The shell or the term is over: clients told, the stream let go.
static void s_over (term_t *t, tstate_t state, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void s_over (term_t *t, tstate_t state, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (t->note, sizeof t->note, fmt, ap);
    va_end (ap);
    t->state = state;
    api_chan_close (&t->chan);
    if (t->deleting) {
        s_free (t);
        return;
    }
    s_close_clients (t, state == T_EXITED ? 1000 : 1011, t->note);
}

//  --------------------------------------------------------------------
//  The stream to sandboxd

static void s_record_out (term_t *t, const uint8_t *data, size_t size)
{
    ah_vscreen_write (t->vs, data, size);
    for (tclient_t *c = t->clients, *next; c; c = next) {
        next = c->next;
        if (api_ws_pending (c->conn) > TERM_CLIENT_QUEUE || api_ws_send (c->conn, data, size)) {
            //  A client that does not read: let it go (it may reattach).
            for (tclient_t **p = &t->clients; *p; p = &(*p)->next)
                if (*p == c) {
                    *p = c->next;
                    break;
                }
            c->t = NULL;
            api_ws_close (c->conn, 1008, "this client did not keep up with the terminal's output: "
                          "reattach to see the screen");
            s_news (t);
        }
    }
}

static int s_record (void *arg, uint8_t kind, const uint8_t *data, size_t size, bool last)
{
    term_t *t = arg;
    t->rec_len += size;
    if (kind == AH_REC_STDOUT && size)
        s_record_out (t, data, size);
    else if (kind == AH_REC_EXIT) {
        size_t room = sizeof t->exit_rec - t->exit_len, take = size < room ? size : room;
        memcpy (t->exit_rec + t->exit_len, data, take);
        t->exit_len += take;
        if (last)
            t->exited = true;
    }
    if (last) {
        if (kind == AH_REC_STDOUT)
            t->received += 5 + t->rec_len;
        t->rec_len = 0;
    }
    return 0;
}

static void s_on_opened (void *owner, ah_msg_t *reply)
{
    term_t *t = owner;
    (void) reply;
    t->state = T_LIVE;
    t->created = true;
    t->retries = 0;
    if (t->deleting)
        api_chan_record (&t->chan, AH_REC_KILL, NULL, 0);
    else if (ah_buf_size (&t->early))
        api_chan_record (&t->chan, AH_REC_STDIN, ah_buf_head (&t->early), ah_buf_size (&t->early));
    ah_buf_free (&t->early);
}

static void s_on_refused (void *owner, int status, const char *error, ah_msg_t *reply)
{
    term_t *t = owner;
    (void) reply;
    if (!t->created)
        s_over (t, T_ENDED, "the sandbox refused the terminal: %s", error);
    else if (status == 404)
        s_over (t, T_ENDED, "the sandbox no longer keeps this terminal (it slept, stopped or "
                "restarted): %s", error);
    else if (++t->retries >= TERM_RETRIES)
        s_over (t, T_ENDED, "the sandbox could not be reached for %d s: %s",
                TERM_RETRIES * TERM_RETRY_MS / 1000, error);
    else {
        t->state = T_DOWN;
        t->retry_at = zclock_mono () + TERM_RETRY_MS;
    }
}

//  The screen budget shared by every term (TERM_SCREEN_RATE a second).
static int64_t s_budget (api_t *api)
{
    int64_t now = zclock_mono ();
    if (!api->terms_budget_ms) {
        api->terms_budget_ms = now;
        api->terms_budget = TERM_SCREEN_BURST;
    }
    api->terms_budget += (now - api->terms_budget_ms) * TERM_SCREEN_RATE / 1000;
    api->terms_budget_ms = now;
    if (api->terms_budget > TERM_SCREEN_BURST)
        api->terms_budget = TERM_SCREEN_BURST;
    return api->terms_budget;
}

//  Output through the screen and to the clients, then acknowledged. -1:
//  the term is over (malformed).
static int s_feed (term_t *t, const uint8_t *data, size_t size)
{
    const char *why = NULL;
    t->api->terms_budget -= (int64_t) size;
    if (ah_rec_read (&t->reader, data, size, s_record, t, &why)) {
        s_over (t, T_ENDED, "sandboxd sent a malformed terminal record");
        return -1;
    }
    api_chan_ack (&t->chan, size);
    return 0;
}

static void s_on_data (void *owner, const uint8_t *data, size_t size)
{
    term_t *t = owner;
    if (!ah_buf_size (&t->pending) && s_budget (t->api) >= (int64_t) size) {
        s_feed (t, data, size);
        return;
    }
    //  Over the budget: kept, unacknowledged (at most the credit).
    if (ah_buf_append (&t->pending, data, size))
        s_over (t, T_ENDED, "out of memory keeping the terminal's output");
}

static void s_closed (term_t *t, const char *error);

//  From the tick: pending output as the budget allows; a close that
//  waited for it.
static void s_drain (term_t *t)
{
    size_t have = ah_buf_size (&t->pending);
    if (have) {
        int64_t budget = s_budget (t->api);
        size_t n = budget <= 0 ? 0 : (size_t) budget < have ? (size_t) budget : have;
        if (n) {
            //  Fed from a copy: s_feed may end the term (and its buffer).
            uint8_t *copy = malloc (n);
            if (!copy)
                return;
            memcpy (copy, ah_buf_head (&t->pending), n);
            ah_buf_consume (&t->pending, n);
            int rc = s_feed (t, copy, n);
            free (copy);
            if (rc)
                return;
        }
    }
    if (!ah_buf_size (&t->pending) && t->close_due) {
        t->close_due = false;
        s_closed (t, t->close_has_error ? t->close_error : NULL);
    }
}

static void s_on_eof (void *owner)
{
    term_t *t = owner;
    api_chan_eof (&t->chan);
}

static void s_on_closed (void *owner, const char *error)
{
    term_t *t = owner;
    if (ah_buf_size (&t->pending)) {
        //  Output still to go through the screen first (the EXIT may be in it).
        t->close_due = true;
        t->close_has_error = error != NULL;
        snprintf (t->close_error, sizeof t->close_error, "%s", error ? error : "");
        return;
    }
    s_closed (t, error);
}

static void s_closed (term_t *t, const char *error)
{
    if (t->exited) {
        ah_msg_t *exit = ah_msg_decode ("EXIT", t->exit_rec, t->exit_len, NULL);
        long long sig = exit ? ah_msg_int (exit, "signal", 0) : 0;
        long long st = exit ? ah_msg_int (exit, "status", -1) : -1;
        ah_msg_destroy (&exit);
        if (sig)
            s_over (t, T_EXITED, "the shell was killed by signal %lld", sig);
        else
            s_over (t, T_EXITED, "the shell exited with status %lld", st);
        return;
    }
    if (t->deleting) {
        s_free (t);
        return;
    }
    //  Detached under us (a tunnel reconnect, a freeze): sandboxd keeps
    //  the shell; attach again from what we received.
    ah_debug (AREA, "terminal %s of '%s': its stream went (%s); reattaching", t->id, t->name,
              error ? error : "closed");
    memset (&t->reader, 0, sizeof t->reader);
    t->rec_len = 0;
    t->state = T_DOWN;
    t->retry_at = zclock_mono () + (error ? TERM_RETRY_MS / 4 : TERM_RETRY_MS);
}

static void s_on_writable (void *owner)
{
    (void) owner;
}

static const chan_ops_t s_chan_ops = {
    .opened = s_on_opened, .refused = s_on_refused, .data = s_on_data,
    .eof = s_on_eof, .closed = s_on_closed, .writable = s_on_writable
};

static void s_open_chan (term_t *t)
{
    ah_msg_t *h = ah_ptychan_header (t->id, !t->created, t->cols, t->rows,
                                     t->created ? (int64_t) t->received : -1);
    t->state = t->created ? T_DOWN : T_OPENING;
    memset (&t->reader, 0, sizeof t->reader);
    t->rec_len = 0;
    if (!h || api_chan_open (t->api, &t->chan, t->agent_id, &h, &s_chan_ops, t)) {
        ah_msg_destroy (&h);
        t->retry_at = zclock_mono () + TERM_RETRY_MS;
        if (++t->retries >= TERM_RETRIES)
            s_over (t, T_ENDED, "cannot open a channel to the sandbox");
    }
}

static void s_resize (term_t *t, int cols, int rows)
{
    if (ah_vscreen_resize (t->vs, rows, cols))
        return;
    t->cols = cols;
    t->rows = rows;
    if (!api_chan_open_now (&t->chan))
        return;                     //  the next attach carries the size
    ah_msg_t *size = ah_msg_new ("RESIZE");
    ah_msg_set_int (size, "cols", cols);
    ah_msg_set_int (size, "rows", rows);
    uint8_t *data = NULL;
    size_t n = 0;
    if (ah_msg_encode (size, &data, &n) == 0)
        api_chan_record (&t->chan, AH_REC_RESIZE, data, n);
    free (data);
    ah_msg_destroy (&size);
}

//  A sandboxd may connect before the API has started (SANDBOX_CONNECTED
//  then finds no API to tell): at its first tick the API asks every
//  sandbox the store has connected what it keeps. One asked twice adopts
//  nothing twice.
static void s_scan_connected (api_t *api)
{
    api->terms_scanned = true;
    sqlite3_stmt *st = ah_store_prepare (api->store,
        "SELECT agent_id FROM sandboxes WHERE connected <> 0 AND state = 'running'");
    if (!st)
        return;
    while (ah_store_step (api->store, st) == SQLITE_ROW) {
        const char *id = (const char *) sqlite3_column_text (st, 0);
        if (id && strlen (id) == AH_AGENT_ID_LEN)
            api_terms_on_connected (api, id);
    }
    sqlite3_reset (st);
}

void api_terms_tick (api_t *api)
{
    if (!api->terms_scanned)
        s_scan_connected (api);
    int64_t now = zclock_mono ();
    for (term_t *t = api->terms, *next; t; t = next) {
        next = t->next;
        if (t->counted && !s_counts (t, now))
            s_news (t);                 //  left alone long enough: no longer open
        if (ah_buf_size (&t->pending) || t->close_due)
            s_drain (t);
        else if (t->state == T_DOWN && !t->chan.linked && now >= t->retry_at)
            s_open_chan (t);
    }
}

//  The agent's sandbox stops (a sleep, a stop, a rebuild, an error, a
//  destroy): its shells go with it. Each term ends, saying so, its screen
//  still readable; once the agent is gone (destroyed) the terms go too.
void api_terms_on_state (api_t *api, const char *agent_id, const char *state)
{
    static const char *const ends [] = { "stopping", "sleeping", "rebuilding", "destroying", "error" };
    bool destroyed = streq (state, "destroyed"), ended = false;
    for (size_t i = 0; i < sizeof ends / sizeof ends [0]; i++)
        ended |= streq (state, ends [i]);
    for (term_t *t = api->terms, *next; t && (ended || destroyed); t = next) {
        next = t->next;
        if (!streq (t->agent_id, agent_id))
            continue;
        if (destroyed)
            s_free (t);
        else if (t->state < T_EXITED)
            s_over (t, T_ENDED, "the agent's sandbox stopped (%s): the %s ended the terminal", state,
                    streq (state, "sleeping") || streq (state, "stopping") ? "sleep" : state);
    }
}

//  --------------------------------------------------------------------
//  A connection: the terminals its sandboxd keeps that we do not know
//  (this server restarted) are adopted, and attached from 0: sandboxd's
//  ring (256 KiB) rebuilds their screens.

typedef struct tlist_t {
    struct tlist_t *next;
    api_t *api;
    api_chan_t chan;
    char agent_id [AH_AGENT_ID_LEN + 1];
} tlist_t;

static void s_list_free (tlist_t *l)
{
    api_chan_close (&l->chan);
    for (tlist_t **p = &l->api->term_lists; *p; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            break;
        }
    free (l);
}

static void s_adopt (api_t *api, const char *agent_id, const char *id)
{
    for (term_t *t = api->terms; t; t = t->next)
        if (streq (t->agent_id, agent_id) && streq (t->id, id))
            return;
    int64_t lines = api->config->terminal_scrollback_lines;
    term_t *t = calloc (1, sizeof *t);
    if (!t || !(t->vs = ah_vscreen_new (24, 80, (size_t) lines, (size_t) lines * TERM_SB_LINE_BYTES))) {
        free (t);
        return;
    }
    t->api = api;
    snprintf (t->id, sizeof t->id, "%s", id);
    snprintf (t->agent_id, sizeof t->agent_id, "%s", agent_id);
    snprintf (t->name, sizeof t->name, "%s", agent_id);
    t->cols = 80;
    t->rows = 24;
    t->created_ms = zclock_time ();
    t->created = true;              //  sandboxd has it: attach, from 0
    t->state = T_DOWN;
    t->next = api->terms;
    api->terms = t;
    ah_info (AREA, "terminal %s of agent %s: kept by its sandbox, adopted (its screen rebuilt from "
             "what sandboxd still holds)", id, agent_id);
}

static void s_list_opened (void *owner, ah_msg_t *reply)
{
    tlist_t *l = owner;
    json_t *header = api_json_raw (reply, "reply");
    json_t *list = json_object_get (header, "terminals");
    size_t i;
    json_t *e;
    json_array_foreach (list, i, e) {
        const char *id = json_string_value (json_object_get (e, "id"));
        if (i < TERM_MAX_PER_AGENT && s_id_ok (id))
            s_adopt (l->api, l->agent_id, id);
    }
    json_decref (header);
    s_list_free (l);
}

static void s_list_refused (void *owner, int status, const char *error, ah_msg_t *reply)
{
    (void) status;
    (void) reply;
    tlist_t *l = owner;
    ah_debug (AREA, "agent %s: its kept terminals not listed: %s", l->agent_id, error);
    s_list_free (l);
}

static void s_list_data (void *owner, const uint8_t *data, size_t size)
{
    (void) data;
    tlist_t *l = owner;
    api_chan_ack (&l->chan, size);
}

static void s_list_closed (void *owner, const char *error)
{
    (void) error;
    s_list_free (owner);
}

static const chan_ops_t s_list_ops = {
    .opened = s_list_opened, .refused = s_list_refused, .data = s_list_data,
    .closed = s_list_closed
};

void api_terms_on_connected (api_t *api, const char *agent_id)
{
    tlist_t *l = calloc (1, sizeof *l);
    ah_msg_t *h = ah_msg_new ("HDR");
    if (!l) {
        ah_msg_destroy (&h);
        return;
    }
    ah_msg_set_str (h, "ch", "ptys");
    l->api = api;
    snprintf (l->agent_id, sizeof l->agent_id, "%s", agent_id);
    l->next = api->term_lists;
    api->term_lists = l;
    if (api_chan_open (api, &l->chan, agent_id, &h, &s_list_ops, l))
        s_list_free (l);
}

void api_terms_end (api_t *api)
{
    while (api->term_lists)
        s_list_free (api->term_lists);
    while (api->terms)
        s_free (api->terms);
}

static void s_woken (void *ctx, int status, const char *error)
{
    term_t *t = ctx;
    if (status)
        s_over (t, T_ENDED, "the agent could not start: %s", error);
    else
        s_open_chan (t);
}

//  --------------------------------------------------------------------
//  Clients (the terminal route with ?terminal=ID, terminal.c)

static void s_client_message (void *owner, bool binary, const uint8_t *data, size_t size)
{
    tclient_t *c = owner;
    term_t *t = c->t;
    if (!t || t->clients != c)
        return;                     //  a watcher: its input is dropped
    if (binary) {
        if (t->state == T_LIVE && api_chan_open_now (&t->chan))
            api_chan_record (&t->chan, AH_REC_STDIN, data, size);
        else if (t->state <= T_DOWN && ah_buf_size (&t->early) + size <= TERM_EARLY_MAX)
            ah_buf_append (&t->early, data, size);
        else
            return;
        api_metrics_bytes (t->api->metrics, "terminal", (int64_t) size);
        return;
    }
    json_t *ctl = json_loadb ((const char *) data, size, 0, NULL);
    json_t *cols = json_object_get (ctl, "cols"), *rows = json_object_get (ctl, "rows");
    if (json_is_integer (cols) && json_is_integer (rows)
    &&  json_integer_value (cols) >= 1 && json_integer_value (cols) <= 1000
    &&  json_integer_value (rows) >= 1 && json_integer_value (rows) <= 1000)
        s_resize (t, (int) json_integer_value (cols), (int) json_integer_value (rows));
    json_decref (ctl);
}

static void s_client_closed (void *owner)
{
    tclient_t *c = owner;
    term_t *t = c->t;
    if (!t)
        return;
    for (tclient_t **p = &t->clients; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    c->t = NULL;
    s_news (t);
}

static void s_client_free (void *owner)
{
    s_client_closed (owner);
    free (owner);
}

static void s_client_written (void *owner, size_t bytes)
{
    (void) owner;
    (void) bytes;
}

static const ws_ops_t s_client_ops = {
    .message = s_client_message, .closed = s_client_closed, .free = s_client_free,
    .written = s_client_written
};

void api_terms_attach (req_t *r, const char *id, int cols, int rows, bool sized)
{
    if (!s_id_ok (id)) {
        api_respond_error (r, 400, "a terminal id is 't' and 12 lowercase hex digits (GET "
                           "/api/v1/agents/%s/terminals lists them)", r->name);
        return;
    }
    if (sized && (cols * rows > AH_VSCREEN_AREA_MAX)) {
        api_respond_error (r, 400, "a terminal has at most %d cells (cols x rows)", AH_VSCREEN_AREA_MAX);
        return;
    }
    term_t *t = s_find (r->api, r->agent_id, id);
    if (!t) {
        api_respond_error (r, 404, "agent '%s' has no terminal '%s'", r->name, id);
        return;
    }
    tclient_t *c = calloc (1, sizeof *c);
    if (!c) {
        api_respond_error (r, 503, "out of memory");
        return;
    }
    c->conn = r->conn;
    if (api_ws_accept (r, &s_client_ops, c)) {
        free (c);
        return;
    }
    //  The newest client writes.
    c->t = t;
    c->next = t->clients;
    t->clients = c;
    s_news (t);
    if (sized && (cols != t->cols || rows != t->rows) && t->state <= T_DOWN)
        s_resize (t, cols, rows);
    ah_buf_t screen = { 0 };
    if (ah_vscreen_render (t->vs, &screen) == 0)
        api_ws_send (c->conn, ah_buf_head (&screen), ah_buf_size (&screen));
    ah_buf_free (&screen);
    if (t->state == T_EXITED || t->state == T_ENDED) {
        c->t = NULL;
        t->clients = c->next;
        api_ws_close (c->conn, t->state == T_EXITED ? 1000 : 1011, t->note);
        s_news (t);
    }
    else
        api_activity (t->api, t->agent_id, "terminal");
}

//  --------------------------------------------------------------------
//  The routes

static void s_list (req_t *r)
{
    json_t *agent = api_agent_resolve (r);
    if (!agent)
        return;
    json_decref (agent);
    json_t *list = json_array ();
    for (term_t *t = r->api->terms; t; t = t->next)
        if (!t->deleting && streq (t->agent_id, r->agent_id))
            json_array_append_new (list, s_json (t));
    api_respond (r, 200, json_pack ("{s:o, s:i}", "terminals", list, "max", TERM_MAX_PER_AGENT));
}

static const body_field_t s_create_fields [] = {
    { "cols", B_NUM, NULL }, { "rows", B_NUM, NULL }, { "title", B_STR, NULL }, { NULL, 0, NULL }
};

static void s_create (req_t *r)
{
    json_t *body = api_body_object (r, true);
    if (!body)
        return;
    json_t *jc = json_object_get (body, "cols"), *jr = json_object_get (body, "rows");
    int cols = jc ? (int) json_number_value (jc) : 80, rows = jr ? (int) json_number_value (jr) : 24;
    const char *title = json_string_value (json_object_get (body, "title"));
    if (title && strlen (title) > 255) {
        json_decref (body);
        api_respond_error (r, 400, "\"title\" is at most 255 bytes");
        return;
    }
    if (cols * rows > AH_VSCREEN_AREA_MAX) {
        json_decref (body);
        api_respond_error (r, 400, "a terminal has at most %d cells (cols x rows): %d x %d is more",
                           AH_VSCREEN_AREA_MAX, cols, rows);
        return;
    }
    json_t *agent = api_agent_resolve (r);
    if (!agent) {
        json_decref (body);
        return;
    }
    if (!api_terminal_agent_ok (r, agent)) {
        json_decref (body);
        return;
    }
    if (s_count (r->api, r->agent_id) >= TERM_MAX_PER_AGENT) {
        json_decref (body);
        api_respond_error (r, 429, "agent '%s' has %d terminals, its most: end one first (DELETE "
                           "/api/v1/agents/%s/terminals/{id})", r->name, TERM_MAX_PER_AGENT, r->name);
        return;
    }
    term_t *t = calloc (1, sizeof *t);
    uint8_t rnd [6];
    if (!t || getrandom (rnd, sizeof rnd, 0) != (ssize_t) sizeof rnd
    ||  !(t->vs = ah_vscreen_new (rows, cols, (size_t) r->api->config->terminal_scrollback_lines,
                                    (size_t) r->api->config->terminal_scrollback_lines * TERM_SB_LINE_BYTES))) {
        free (t);
        json_decref (body);
        api_respond_error (r, 503, "out of memory");
        return;
    }
    snprintf (t->id, sizeof t->id, "t%02x%02x%02x%02x%02x%02x",
              rnd [0], rnd [1], rnd [2], rnd [3], rnd [4], rnd [5]);
    t->api = r->api;
    t->cols = cols;
    t->rows = rows;
    t->created_ms = zclock_time ();
    snprintf (t->agent_id, sizeof t->agent_id, "%s", r->agent_id);
    snprintf (t->name, sizeof t->name, "%s", r->name);
    snprintf (t->title, sizeof t->title, "%s", title ? title : "");
    json_decref (body);
    t->next = r->api->terms;
    r->api->terms = t;
    r->kind = "terminal.create";
    snprintf (r->detail, sizeof r->detail, "terminal %s %dx%d", t->id, cols, rows);
    api_activity (t->api, t->agent_id, "terminal");
    char why [300];
    int rc = ah_api_events_wake (t->api->events, t->agent_id, t, s_woken, AH_API_WAKE_TIMEOUT_S,
                                 why, sizeof why);
    if (rc == 0)
        s_open_chan (t);
    else if (rc != 1) {
        api_record (r, false, why);
        api_respond_error (r, rc, "%s", why);
        s_free (t);
        return;
    }
    api_record (r, true, NULL);
    api_respond (r, 201, s_json (t));
}

static term_t *s_named (req_t *r)
{
    json_t *agent = api_agent_resolve (r);
    if (!agent)
        return NULL;
    json_decref (agent);
    const char *id = r->params [1];
    if (!s_id_ok (id)) {
        api_respond_error (r, 400, "a terminal id is 't' and 12 lowercase hex digits");
        return NULL;
    }
    term_t *t = s_find (r->api, r->agent_id, id);
    if (!t)
        api_respond_error (r, 404, "agent '%s' has no terminal '%s'", r->name, id);
    return t;
}

static void s_get (req_t *r)
{
    term_t *t = s_named (r);
    if (!t)
        return;
    json_t *o = s_json (t);
    char *text = ah_vscreen_text (t->vs);
    json_object_set_new (o, "screen", api_json_text (text ? text : ""));
    free (text);
    api_respond (r, 200, o);
}

static void s_delete (req_t *r)
{
    term_t *t = s_named (r);
    if (!t)
        return;
    r->kind = "terminal.end";
    snprintf (r->detail, sizeof r->detail, "terminal %s", t->id);
    api_record (r, true, NULL);
    api_respond (r, 200, json_pack ("{s:s, s:b}", "id", t->id, "ended", true));
    t->deleting = true;
    snprintf (t->note, sizeof t->note, "the terminal was ended (DELETE)");
    s_close_clients (t, 1000, t->note);
    if (t->state == T_LIVE && api_chan_open_now (&t->chan))
        api_chan_record (&t->chan, AH_REC_KILL, NULL, 0);       //  gone once the stream ends
    else if (!t->created || t->state >= T_EXITED)
        s_free (t);
    //  else: reconnecting; KILL once attached (s_on_opened)
}

const route_t api_terms_routes [] = {
    { M_GET, "/api/v1/agents/{agent}/terminals", s_list, 0, "", NULL },
    { M_POST, "/api/v1/agents/{agent}/terminals", s_create, R_BODY, "", s_create_fields },
    { M_GET, "/api/v1/agents/{agent}/terminals/{id}", s_get, 0, "", NULL },
    { M_DELETE, "/api/v1/agents/{agent}/terminals/{id}", s_delete, 0, "", NULL },
    { 0 }
};
