/*  actors/api/terminal.c: a shell in the sandbox on a WebSocket
    (docs/api.md "Terminal"): the upgrade at
    /api/v1/agents/{agent}/terminal, bridged to a pty channel.

    Browser -> server: binary messages are keystrokes, text messages are
    JSON {"cols": N, "rows": N} (resize). Server -> browser: binary
    messages of terminal output. When the shell exits the server closes
    with 1000 and the exit status as the reason; a channel that breaks
    closes with 1011. Refusals known before the upgrade (a bad token, no
    such agent, one being destroyed, bad sizes) are HTTP answers with a
    JSON body. A sleeping agent is woken after the upgrade, and what is
    typed meanwhile is kept (64 KiB).

    Flow control: terminal output is ACKed to the tunnel as the
    connection writes it; input waits (reading the browser pauses) while
    the channel's credit is spent.                                      */
#include "actors/api/api_int.h"
#include "proto/channel.h"

#include <string.h>

#define INPUT_EARLY_MAX (64u << 10)     //  typed before the shell is up
#define ACTIVITY_MS     30000

typedef struct terminal_t {
    struct terminal_t *next;
    api_t *api;
    conn_t *conn;
    api_chan_t chan;
    char agent_id [AH_AGENT_ID_LEN + 1];
    char name [AH_NAME_MAX + 1];
    who_t who;
    int cols, rows;
    ah_buf_t early;                 //  input before the channel opened
    ah_rec_reader_t reader;
    size_t kept;                    //  output bytes of the last CHAN_DATA sent to the browser
    size_t owed;                    //  output bytes the tunnel waits to be ACKed
    uint8_t exit_rec [256];
    size_t exit_len;
    bool exited;
    bool counted;                   //  counted in TERMINALS
    bool gone;                      //  the browser side is closed
    int64_t activity_ms;
    char run [API_RUN_MAX + 1];     //  the run it was opened for, "" none
    int64_t bytes;                  //  both ways, for the audit trail
    int64_t bytes_recorded;         //  of which terminal.bytes rows hold
    int64_t recorded_ms;            //  the last terminal.bytes row (mono)
    bool opened;                    //  terminal.open is recorded; terminal.close is owed
} terminal_t;

//  The audit trail: a terminal's opening (at what size), the bytes it
//  moves while open (terminal.bytes, each audit.terminal_bytes_interval:
//  since the last such row) and its closing (with the bytes that went
//  through it both ways, in all).
static void s_audit (terminal_t *t, const char *kind, const char *detail, int64_t bytes)
{
    ah_msg_t *rec = ah_msg_new ("OP_RECORD");
    ah_msg_set_str (rec, "agent_id", t->agent_id);
    ah_msg_set_str (rec, "agent_name", t->name);
    ah_msg_set_strf (rec, "actor", "api:%s", t->who.token_name);
    ah_msg_set_str (rec, "kind", kind);
    ah_msg_set_str (rec, "detail", detail);
    if (t->run [0])
        ah_msg_set_str (rec, "run", t->run);
    if (bytes >= 0)
        ah_msg_set_int (rec, "bytes", bytes);
    ah_msg_set_bool (rec, "ok", true);
    api_send (t->api, "recorder", &rec);
}

//  --------------------------------------------------------------------
//  What the sleeper and lifecycle hear

static int s_open_count (api_t *api, const char *agent_id)
{
    int n = 0;
    for (terminal_t *t = api->terminals; t; t = t->next)
        n += t->counted && streq (t->agent_id, agent_id);
    return n;
}

void api_terminals_news (api_t *api, const char *agent_id)
{
    ah_msg_t *m = ah_msg_new ("TERMINALS");
    ah_msg_set_str (m, "agent_id", agent_id);
    ah_msg_set_int (m, "open", s_open_count (api, agent_id) + api_terms_watched (api, agent_id));
    api_send (api, "sleeper", &m);
}

static void s_news (terminal_t *t)
{
    api_terminals_news (t->api, t->agent_id);
}

static void s_used (terminal_t *t)
{
    int64_t now = zclock_mono ();
    if (now - t->activity_ms >= ACTIVITY_MS) {
        t->activity_ms = now;
        api_activity (t->api, t->agent_id, "terminal");
    }
}

static void s_uncount (terminal_t *t)
{
    if (t->counted) {
        t->counted = false;
        s_news (t);
    }
}

//  The channel is gone or could not open: say why in the close.
static void s_end (terminal_t *t, int code, const char *reason)
{
    s_uncount (t);
    api_chan_close (&t->chan);
    if (!t->gone)
        api_ws_close (t->conn, code, reason);
}

//  --------------------------------------------------------------------
//  The pty channel

static void s_resize (terminal_t *t)
{
    ah_msg_t *size = ah_msg_new ("RESIZE");
    ah_msg_set_int (size, "cols", t->cols);
    ah_msg_set_int (size, "rows", t->rows);
    uint8_t *data = NULL;
    size_t n = 0;
    if (ah_msg_encode (size, &data, &n) == 0)
        api_chan_record (&t->chan, AH_REC_RESIZE, data, n);
    free (data);
    ah_msg_destroy (&size);
}

static void s_input (terminal_t *t, const uint8_t *data, size_t size)
{
    api_chan_record (&t->chan, AH_REC_STDIN, data, size);
    t->bytes += (int64_t) size;
    api_metrics_bytes (t->api->metrics, "terminal", (int64_t) size);
    //  Beyond the channel's credit: hold the browser until the tunnel ACKs.
    if (api_chan_room (&t->chan) < (64u << 10))
        api_ws_read (t->conn, false);
}

static void s_on_opened (void *owner, ah_msg_t *reply)
{
    terminal_t *t = owner;
    if (ah_buf_size (&t->early))
        s_input (t, ah_buf_head (&t->early), ah_buf_size (&t->early));
    ah_buf_free (&t->early);
    t->counted = true;
    s_news (t);
}

static void s_on_refused (void *owner, int status, const char *error, ah_msg_t *reply)
{
    terminal_t *t = owner;
    s_end (t, status >= 500 ? 1011 : 1008, error);
}

static int s_record (void *arg, uint8_t kind, const uint8_t *data, size_t size, bool last)
{
    terminal_t *t = arg;
    if (kind == AH_REC_STDOUT && size) {
        if (!t->gone && api_ws_send (t->conn, data, size))
            return -1;
        t->kept += size;
        t->bytes += (int64_t) size;
        api_metrics_bytes (t->api->metrics, "terminal", (int64_t) size);
    }
    else if (kind == AH_REC_EXIT) {
        size_t take = size < sizeof t->exit_rec - t->exit_len ? size : sizeof t->exit_rec - t->exit_len;
        memcpy (t->exit_rec + t->exit_len, data, take);
        t->exit_len += take;
        if (last)
            t->exited = true;
    }
    return 0;
}

static void s_on_data (void *owner, const uint8_t *data, size_t size)
{
    terminal_t *t = owner;
    t->kept = 0;
    const char *why = NULL;
    if (ah_rec_read (&t->reader, data, size, s_record, t, &why)) {
        s_end (t, 1011, "sandboxd sent a malformed terminal record");
        return;
    }
    //  Output is given back as the browser takes it (s_on_written).
    api_chan_ack (&t->chan, size - t->kept);
    t->owed += t->kept;
}

static void s_on_eof (void *owner)
{
    terminal_t *t = owner;
    //  The shell is gone (its exit came first): FIN in turn, so the
    //  stream ends and the close follows.
    api_chan_eof (&t->chan);
}

static void s_on_closed (void *owner, const char *error)
{
    terminal_t *t = owner;
    char reason [120];
    ah_msg_t *exit = t->exited ? ah_msg_decode ("EXIT", t->exit_rec, t->exit_len, NULL) : NULL;
    int code = 1000;
    if (exit && ah_msg_int (exit, "signal", 0))
        snprintf (reason, sizeof reason, "the shell was killed by signal %lld",
                  (long long) ah_msg_int (exit, "signal", 0));
    else if (exit)
        snprintf (reason, sizeof reason, "the shell exited with status %lld",
                  (long long) ah_msg_int (exit, "status", -1));
    else {
        code = 1011;
        snprintf (reason, sizeof reason, "the terminal's channel closed: %s", error ? error : "no exit status");
    }
    ah_msg_destroy (&exit);
    s_end (t, code, reason);
}

static void s_on_writable (void *owner)
{
    terminal_t *t = owner;
    if (api_chan_room (&t->chan) >= (64u << 10))
        api_ws_read (t->conn, true);
}

static const chan_ops_t s_chan_ops = {
    .opened = s_on_opened, .refused = s_on_refused, .data = s_on_data,
    .eof = s_on_eof, .closed = s_on_closed, .writable = s_on_writable
};

static void s_open_pty (terminal_t *t)
{
    ah_msg_t *h = ah_msg_new ("HDR");
    ah_msg_set_str (h, "ch", "pty");
    ah_msg_set_str (h, "term", "xterm-256color");
    ah_msg_set_int (h, "cols", t->cols);
    ah_msg_set_int (h, "rows", t->rows);
    api_activity (t->api, t->agent_id, "terminal");
    t->activity_ms = zclock_mono ();
    char detail [64];
    snprintf (detail, sizeof detail, "terminal %dx%d", t->cols, t->rows);
    s_audit (t, "terminal.open", detail, -1);
    t->recorded_ms = zclock_mono ();
    t->opened = true;
    if (api_chan_open (t->api, &t->chan, t->agent_id, &h, &s_chan_ops, t))
        s_end (t, 1011, "cannot open a channel to the sandbox");
}

static void s_woken (void *ctx, int status, const char *error)
{
    terminal_t *t = ctx;
    if (status)
        s_end (t, status == 409 ? 1008 : 1011, error);
    else
        s_open_pty (t);
}

//  --------------------------------------------------------------------
//  The browser side

static void s_on_message (void *owner, bool binary, const uint8_t *data, size_t size)
{
    terminal_t *t = owner;
    if (binary) {
        if (api_chan_open_now (&t->chan)) {
            s_input (t, data, size);
            s_used (t);
        }
        else if (ah_buf_size (&t->early) + size <= INPUT_EARLY_MAX)
            ah_buf_append (&t->early, data, size);
        return;
    }
    json_t *ctl = json_loadb ((const char *) data, size, 0, NULL);
    json_t *cols = json_object_get (ctl, "cols"), *rows = json_object_get (ctl, "rows");
    if (json_is_integer (cols) && json_is_integer (rows)
    &&  json_integer_value (cols) >= 1 && json_integer_value (cols) <= 1000
    &&  json_integer_value (rows) >= 1 && json_integer_value (rows) <= 1000) {
        t->cols = (int) json_integer_value (cols);
        t->rows = (int) json_integer_value (rows);
        if (api_chan_open_now (&t->chan))
            s_resize (t);
    }
    else
        ah_debug (AREA, "terminal of '%s': ignored a control message that is not {cols, rows}", t->name);
    json_decref (ctl);
}

static void s_on_written (void *owner, size_t bytes)
{
    terminal_t *t = owner;
    size_t ack = bytes < t->owed ? bytes : t->owed;
    api_chan_ack (&t->chan, ack);
    t->owed -= ack;
}

static void s_on_ws_closed (void *owner)
{
    terminal_t *t = owner;
    t->gone = true;
    s_uncount (t);
    api_chan_close (&t->chan);
    ah_api_events_wake_cancel (t->api->events, t);
}

static void s_free (void *owner)
{
    terminal_t *t = owner;
    s_on_ws_closed (t);
    if (t->opened)
        s_audit (t, "terminal.close", "terminal", t->bytes);
    for (terminal_t **p = &t->api->terminals; *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    ah_buf_free (&t->early);
    free (t);
}

static const ws_ops_t s_ws_ops = {
    .message = s_on_message, .closed = s_on_ws_closed, .free = s_free, .written = s_on_written
};

void api_terminals_tick (api_t *api)
{
    int64_t every = (int64_t) (api->config->audit_terminal_bytes_s * 1000), now = zclock_mono ();
    for (terminal_t *t = api->terminals; t && every > 0; t = t->next)
        if (t->opened && !t->gone && now - t->recorded_ms >= every) {
            t->recorded_ms = now;
            if (t->bytes > t->bytes_recorded) {
                s_audit (t, "terminal.bytes", "terminal", t->bytes - t->bytes_recorded);
                t->bytes_recorded = t->bytes;
            }
        }
}

bool api_terminal_agent_ok (req_t *r, json_t *agent)
{
    const char *state = json_string_value (json_object_get (agent, "state"));
    bool ok = state && !streq (state, "destroying");
    if (!ok)
        api_respond_error (r, 409, "agent '%s' is %s; a terminal needs it running or asleep",
                           r->name, state ? state : "without a sandbox");
    json_decref (agent);
    return ok;
}

//  GET /api/v1/agents/{agent}/terminal (Upgrade: websocket); with
//  ?terminal=ID it attaches to a terminal that lasts (terms.c).
static void s_terminal (req_t *r)
{
    int64_t cols = 80, rows = 24;
    if (api_query_int (r, "cols", 1, 1000, &cols) || api_query_int (r, "rows", 1, 1000, &rows))
        return;
    json_t *agent = api_agent_resolve (r);
    if (!agent)
        return;
    const char *id = api_query (r, "terminal");
    if (id) {
        //  Any use thaws (issue 29): a frozen agent's terminal is attached
        //  at once, its frames waiting in the tunnel until sandboxd runs.
        api_thaw (r, json_string_value (json_object_get (agent, "state")), "terminal");
        json_decref (agent);
        api_terms_attach (r, id, (int) cols, (int) rows, api_query (r, "cols") && api_query (r, "rows"));
        return;
    }
    if (!api_terminal_agent_ok (r, agent))
        return;
    terminal_t *t = calloc (1, sizeof *t);
    if (!t) {
        api_respond_error (r, 503, "out of memory");
        return;
    }
    t->api = r->api;
    t->conn = r->conn;
    t->cols = (int) cols;
    t->rows = (int) rows;
    t->who = r->who;
    snprintf (t->agent_id, sizeof t->agent_id, "%s", r->agent_id);
    snprintf (t->name, sizeof t->name, "%s", r->name);
    snprintf (t->run, sizeof t->run, "%s", api_run_of (r));
    if (api_ws_accept (r, &s_ws_ops, t)) {          //  r is over after this either way
        free (t);
        return;
    }
    t->next = t->api->terminals;
    t->api->terminals = t;
    char why [300];
    int rc = ah_api_events_wake (t->api->events, t->agent_id, t, s_woken, AH_API_WAKE_TIMEOUT_S,
                                 why, sizeof why);
    if (rc == 0)
        s_open_pty (t);
    else if (rc != 1)
        s_end (t, rc == 409 ? 1008 : 1011, why);
}

const route_t api_terminal_routes [] = {
    { M_GET, "/api/v1/agents/{agent}/terminal", s_terminal, R_UPGRADE, "token cols rows terminal", NULL },
    { 0 }
};
