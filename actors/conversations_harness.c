/*  actors/conversations_harness.c: the conversations actor's harnesses
    (conversations_int.h): one per agent, started through sandboxd's proc
    channel, its stdin written as records within the tunnel's credit, a
    conversation's turn moved on (session, then prompt), and the tunnel's
    messages for the harness's channel.                                */
#include "actors/conversations_int.h"
#include "common/str.h"
#include "proto/channel.h"
#include "store/conversations.h"

#include <string.h>

//  --------------------------------------------------------------------
//  Harnesses

void ah_cv_harness_free (void **item)
{
    harness_t *h = *item;
    if (!h)
        return;
    while (h->perms) {
        perm_t *p = h->perms;
        h->perms = p->next;
        json_decref (p->id);
        json_decref (p->params);
        free (p);
    }
    ah_buf_free (&h->out);
    ah_buf_free (&h->err);
    ah_acp_reader_clear (&h->reader);
    ah_acp_open_clear (&h->open);
    free (h);
    *item = NULL;
}

//  The harness tail of stderr as text for an error entry (its last 2 KiB).
static char *s_stderr_tail (harness_t *h)
{
    size_t n = ah_buf_size (&h->err), keep = n > 2048 ? 2048 : n;
    json_t *s = ah_json_bytes ((const char *) ah_buf_head (&h->err) + (n - keep), keep);
    char *text = s && json_string_value (s) ? strdup (json_string_value (s)) : NULL;
    json_decref (s);
    return text;
}

//  The harness is gone (why): each running turn of its agent ends with
//  an error entry; the harness leaves the table at the next ah_cv_reap (it
//  may be in use up the stack: a line's callback, a record's), and the
//  next prompt starts or attaches again.
void ah_cv_harness_gone (self_t *self, harness_t *h, const char *why)
{
    if (h->state == H_GONE)
        return;
    h->state = H_GONE;
    char *tail = s_stderr_tail (h);
    for (conv_t *c = zhashx_first (self->convs); c; c = zhashx_next (self->convs)) {
        if (!streq (c->agent_id, h->agent_id) || !c->turn)
            continue;
        json_t *body = json_pack ("{s:s}", "error", why);
        if (tail && *tail)
            json_object_set_new (body, "stderr", json_string (tail));
        ah_cv_log (self, c, "error", body, "server", true);
    }
    free (tail);
    if (h->chan) {
        ah_msg_t *m = ah_msg_new ("CHAN_CLOSE");
        ah_msg_set_int (m, "chan", h->chan);
        ah_actor_send (self->actor, "tunnel", &m);
    }
    h->chan = 0;
    ah_info (AREA, "harness of agent '%s': %s", h->name, why);
}

//  The harnesses gone leave the table, and with them their agents' idle
//  conversations (their ACP sessions died with the process): what this
//  actor holds is bounded by the harnesses alive and the turns running.
void ah_cv_reap (self_t *self)
{
    char gone [16][32];
    size_t n = 0;
    for (harness_t *h = zhashx_first (self->harnesses); h && n < 16; h = zhashx_next (self->harnesses))
        if (h->state == H_GONE)
            snprintf (gone [n++], sizeof gone [0], "%s", h->agent_id);
    for (size_t i = 0; i < n; i++) {
        zhashx_delete (self->harnesses, gone [i]);
        zlistx_t *idle = zlistx_new ();
        for (conv_t *c = zhashx_first (self->convs); c && idle; c = zhashx_next (self->convs))
            if (!c->turn && streq (c->agent_id, gone [i]))
                zlistx_add_end (idle, c->id);
        for (char *id = idle ? zlistx_first (idle) : NULL; id; id = zlistx_next (idle))
            zhashx_delete (self->convs, id);
        zlistx_destroy (&idle);
    }
}

static void s_flush (harness_t *h)
{
    while (h->chan && ah_buf_size (&h->out) && h->unacked < (int64_t) CREDIT) {
        size_t n = ah_buf_size (&h->out);
        if (n > (256u << 10))
            n = 256u << 10;
        ah_msg_t *m = ah_msg_new ("CHAN_DATA");
        ah_msg_set_int (m, "chan", h->chan);
        ah_msg_set_bin (m, "data", ah_buf_head (&h->out), n);
        ah_actor_send (h->self->actor, "tunnel", &m);
        h->unacked += (int64_t) n;
        ah_buf_consume (&h->out, n);
    }
}

//  One line (ending "\n") to the harness's stdin as STDIN records.
static void s_harness_send (harness_t *h, const char *line)
{
    if (!line || h->state == H_GONE)
        return;
    size_t size = strlen (line);
    for (size_t off = 0; off < size; off += PIECE) {
        size_t n = size - off > PIECE ? PIECE : size - off;
        if (ah_rec_append (&h->out, AH_REC_STDIN, line + off, n))
            break;
    }
    s_flush (h);
}

void ah_cv_send_line (harness_t *h, char *line)
{
    s_harness_send (h, line);
    free (line);
}

//  Moves a conversation's turn on: a session first (session/new), then
//  the prompt.
void ah_cv_advance (self_t *self, harness_t *h, conv_t *c)
{
    if (!c->turn || h->state != H_READY || c->prompt_id || c->new_id)
        return;
    if (c->session_gen != h->gen && c->session [0] && h->attached)
        c->session_gen = h->gen;    //  the same process as before: the session lives
    if (c->session_gen != h->gen || !c->session [0]) {
        //  A session of an earlier process is restored as the harness
        //  can (docs/conversations.md "After a boot"): load, else resume,
        //  else (or when that fails) a new one and the notice.
        ah_acp_method_t how = AH_ACP_M_SESSION_NEW;
        if (c->session [0] && !c->reset)
            how = h->can_load ? AH_ACP_M_SESSION_LOAD : h->can_resume ? AH_ACP_M_SESSION_RESUME : how;
        if (c->session [0] && how == AH_ACP_M_SESSION_NEW)
            c->reset = true;
        c->new_id = ah_acp_pending_add (&h->pending, how, c->id, zclock_mono ());
        c->asked_at = zclock_mono ();
        if (c->new_id < 0) {
            c->new_id = 0;
            ah_cv_error (self, c, "too many requests to the harness are waiting for an answer", true);
            return;
        }
        c->restoring = how != AH_ACP_M_SESSION_NEW;
        if (c->restoring) {
            c->session_gen = h->gen;        //  its replayed updates are recognised (and not logged)
            ah_cv_send_line (h, how == AH_ACP_M_SESSION_LOAD ? ah_acp_session_load (c->new_id, c->session, "/home/agent")
                                                          : ah_acp_session_resume (c->new_id, c->session, "/home/agent"));
        }
        else
            ah_cv_send_line (h, ah_acp_session_new (c->new_id, "/home/agent"));
        return;
    }
    c->prompt_id = ah_acp_pending_add (&h->pending, AH_ACP_M_SESSION_PROMPT, c->id, zclock_mono ());
    if (c->prompt_id < 0) {
        c->prompt_id = 0;
        ah_cv_error (self, c, "too many requests to the harness are waiting for an answer", true);
        return;
    }
    char *line = ah_acp_session_prompt (c->prompt_id, c->session, c->text, c->text_size);
    free (c->text);
    c->text = NULL;
    if (!line) {
        ah_cv_error (self, c, "the prompt could not be written as ACP (not UTF-8?)", true);
        return;
    }
    ah_cv_send_line (h, line);
}

static void s_agent_name (self_t *self, const char *agent_id, char *name, size_t size)
{
    sqlite3_stmt *st = ah_store_prepare (self->store, "SELECT name FROM agents WHERE id = :id");
    snprintf (name, size, "%s", agent_id);
    if (st && !ah_store_bind_text (st, ":id", agent_id) && ah_store_step (self->store, st) == SQLITE_ROW)
        snprintf (name, size, "%s", (const char *) sqlite3_column_text (st, 0));
    if (st)
        sqlite3_reset (st);
}

//  The proc channel's header that runs harness h, or NULL with why.
static ah_msg_t *s_header_for (const ah_catalog_harness_t *h, char *why, size_t why_size)
{
    const char *env [AH_PROCCHAN_ENV_MAX] = { 0 };
    char *owned [AH_PROCCHAN_ENV_MAX];
    size_t nenv = 0;
    for (size_t i = 0; i < h->env_count && nenv < AH_PROCCHAN_ENV_MAX; i++) {
        if (asprintf (&owned [nenv], "%s=%s", h->env [i].name, h->env [i].value) < 0)
            break;
        env [nenv] = owned [nenv];
        nenv++;
    }
    ah_msg_t *header = ah_procchan_header ("harness", (const char * const *) h->command,
                                           h->command_count, env, nenv, -1);
    for (size_t i = 0; i < nenv; i++)
        free (owned [i]);
    if (!header)
        snprintf (why, why_size, "the harness's command or environment is out of the proc channel's bounds");
    return header;
}

//  The proc channel's header for the agent's harness, or NULL with why:
//  an admin's override of the agent (agents.harness, docs/conversations.md
//  "Choosing the harness") when it has one, else its runtime's.
static ah_msg_t *s_header (self_t *self, const char *agent_id, char *why, size_t why_size)
{
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT coalesce (runtime, ''), harness FROM agents WHERE id = :id");
    char runtime [128] = "";
    char *override = NULL;
    int rc = st && !ah_store_bind_text (st, ":id", agent_id) ? ah_store_step (self->store, st) : SQLITE_ERROR;
    if (rc == SQLITE_ROW) {
        snprintf (runtime, sizeof runtime, "%s", (const char *) sqlite3_column_text (st, 0));
        if (sqlite3_column_type (st, 1) != SQLITE_NULL)
            override = strdup ((const char *) sqlite3_column_text (st, 1));
    }
    if (st)
        sqlite3_reset (st);
    if (rc != SQLITE_ROW) {
        snprintf (why, why_size, rc == SQLITE_DONE ? "no such agent" : "cannot read the agent");
        return NULL;
    }
    if (override) {
        //  Checked when it was written; checked again, as it is run.
        json_t *j = json_loads (override, JSON_REJECT_DUPLICATES, NULL);
        free (override);
        ah_catalog_harness_t h;
        char *err = NULL;
        ah_msg_t *header = NULL;
        if (!j)
            snprintf (why, why_size, "the agent's harness override is not JSON (an admin sets it again)");
        else if (ah_catalog_harness_parse (j, &h, &err))
            snprintf (why, why_size, "the agent's harness override is refused: %.300s", err ? err : "?");
        else {
            header = s_header_for (&h, why, why_size);
            ah_catalog_harness_clear (&h);
        }
        json_decref (j);
        free (err);
        return header;
    }
    const ah_runtime_t *rt = *runtime && self->catalog ? ah_catalog_find (self->catalog, runtime) : NULL;
    if (!rt || !rt->harness.command || rt->harness.command_count == 0) {
        snprintf (why, why_size, *runtime ? "the agent's runtime '%.64s' names no harness (docs/catalog.md, \"harness\")"
                                          : "the agent runs an image outside the catalog: no harness to run", runtime);
        return NULL;
    }
    return s_header_for (&rt->harness, why, why_size);
}

//  The agent's harness: the one running, or a new one being started.
harness_t *ah_cv_harness (self_t *self, const char *agent_id, char *why, size_t why_size)
{
    harness_t *h = zhashx_lookup (self->harnesses, agent_id);
    if (h)
        return h;               //  (s_prompt reaped the gone ones)
    ah_msg_t *header = s_header (self, agent_id, why, why_size);
    if (!header)
        return NULL;
    uint8_t *data = NULL;
    size_t size = 0;
    int rc = ah_msg_encode (header, &data, &size);
    ah_msg_destroy (&header);
    h = rc ? NULL : calloc (1, sizeof *h);
    if (!h) {
        free (data);
        snprintf (why, why_size, "out of memory");
        return NULL;
    }
    h->self = self;
    snprintf (h->agent_id, sizeof h->agent_id, "%s", agent_id);
    s_agent_name (self, agent_id, h->name, sizeof h->name);
    h->gen = ++self->next_gen;
    h->state = H_OPENING;
    h->open_req = ++self->next_req;
    h->since_ms = zclock_mono ();
    ah_acp_reader_init (&h->reader, 0);
    ah_acp_pending_init (&h->pending);
    ah_acp_open_init (&h->open);
    ah_msg_t *m = ah_msg_new ("CHAN_OPEN");
    ah_msg_set_int (m, "req", h->open_req);
    ah_msg_set_str (m, "agent_id", agent_id);
    ah_msg_set_raw (m, "header", data, size);
    free (data);
    zhashx_insert (self->harnesses, agent_id, h);
    ah_actor_send (self->actor, "tunnel", &m);
    ah_info (AREA, "starting the harness of agent '%s'", h->name);
    return h;
}

static harness_t *s_harness_by_chan (self_t *self, int64_t chan)
{
    for (harness_t *h = zhashx_first (self->harnesses); h; h = zhashx_next (self->harnesses))
        if (chan && h->chan == chan)
            return h;
    return NULL;
}

//  --------------------------------------------------------------------
//  The tunnel's messages

static void s_exited (self_t *self, harness_t *h)
{
    int status = -1, sig = 0;
    char why [200];
    if (ah_procchan_exit (h->exit, h->exit_len, &status, &sig) == 0 && sig)
        snprintf (why, sizeof why, "the harness was killed by signal %d", sig);
    else if (status >= 0)
        snprintf (why, sizeof why, "the harness exited with status %d", status);
    else
        snprintf (why, sizeof why, "the harness exited");
    ah_acp_reader_eof (&h->reader, ah_cv_line, h);
    ah_cv_harness_gone (self, h, why);
}

static void s_on_chan_reply (self_t *self, harness_t *h, ah_msg_t *msg)
{
    h->open_req = 0;
    if (!ah_msg_bool (msg, "ok", false)) {
        const char *error = ah_msg_str (msg, "error");
        char why [400];
        snprintf (why, sizeof why, "the harness could not be started: %.300s",
                  error && *error ? error : "the channel was refused");
        ah_cv_harness_gone (self, h, why);
        return;
    }
    h->chan = ah_msg_int (msg, "chan", 0);
    size_t size = 0;
    const void *raw = ah_msg_raw (msg, "reply", &size);
    ah_msg_t *reply = raw ? ah_msg_decode ("reply", raw, size, NULL) : NULL;
    ah_procchan_reply_t r;
    bool attached = reply && ah_procchan_reply (reply, &r) == 0 && r.attached;
    ah_msg_destroy (&reply);
    h->attached = attached;
    if (!h->chan) {
        ah_cv_harness_gone (self, h, "the tunnel opened no channel for the harness");
        return;
    }
    //  A harness kept by sandboxd (this server attached again) was
    //  initialized by an earlier connection; ACP lets a client ask again.
    h->state = H_INIT;
    h->since_ms = zclock_mono ();
    h->init_id = ah_acp_pending_add (&h->pending, AH_ACP_M_INITIALIZE, "", zclock_mono ());
    ah_acp_client_t client = { .fs_read = true, .fs_write = true, .terminal = true,
                               .name = "agenthold", .version = "1" };
    ah_cv_send_line (h, ah_acp_initialize (h->init_id, &client));
    ah_info (AREA, "harness of agent '%s' %s", h->name, attached ? "attached again" : "started");
}

void ah_cv_on_reply (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    if (ah_cv_call_on_reply (self, msg))
        return;
    int64_t req = ah_msg_int (msg, "req", 0);
    for (harness_t *h = zhashx_first (self->harnesses); h; h = zhashx_next (self->harnesses))
        if (req && h->open_req == req && h->state != H_GONE) {
            s_on_chan_reply (self, h, msg);
            return;
        }
    //  An open answered after its harness was given up: reset it.
    int64_t chan = ah_msg_int (msg, "chan", 0);
    if (chan && ah_msg_bool (msg, "ok", false)) {
        ah_msg_t *m = ah_msg_new ("CHAN_CLOSE");
        ah_msg_set_int (m, "chan", chan);
        ah_actor_send (self->actor, "tunnel", &m);
    }
}

void ah_cv_on_data (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    int64_t chan = ah_msg_int (msg, "chan", 0);
    if (ah_cv_call_on_data (self, msg))
        return;
    harness_t *h = s_harness_by_chan (self, chan);
    if (!h) {
        ah_msg_t *m = ah_msg_new ("CHAN_CLOSE");
        ah_msg_set_int (m, "chan", chan);
        ah_actor_send (self->actor, "tunnel", &m);
        return;
    }
    size_t size = 0;
    const uint8_t *data = ah_msg_bin (msg, "data", &size);
    if (!data)
        return;
    recs_t rs = { h, false };
    const char *err = NULL;
    int rc = ah_rec_read (&h->rec, data, size, ah_cv_record, &rs, &err);
    if (h->state == H_GONE)
        return;
    ah_msg_t *ack = ah_msg_new ("CHAN_ACK");
    ah_msg_set_int (ack, "chan", chan);
    ah_msg_set_int (ack, "bytes", (int64_t) size);
    ah_actor_send (self->actor, "tunnel", &ack);
    if (rc < 0) {
        char why [200];
        snprintf (why, sizeof why, "sandboxd's records for the harness are malformed: %s", err ? err : "?");
        ah_cv_harness_gone (self, h, why);
    }
    else if (rs.exited)
        s_exited (self, h);
}

void ah_cv_on_ack (void *self_, ah_msg_t *msg)
{
    harness_t *h = s_harness_by_chan (self_, ah_msg_int (msg, "chan", 0));
    if (!h)
        return;
    h->unacked -= ah_msg_int (msg, "bytes", 0);
    if (h->unacked < 0)
        h->unacked = 0;
    s_flush (h);
}

//  sandboxd's FIN: EXIT came before it (or CHAN_CLOSE follows).
void ah_cv_on_eof (void *self_, ah_msg_t *msg)
{
}

void ah_cv_on_close (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    if (ah_cv_call_on_close (self, msg))
        return;
    harness_t *h = s_harness_by_chan (self, ah_msg_int (msg, "chan", 0));
    if (!h)
        return;
    h->chan = 0;                    //  gone already: no RST to send
    const char *error = ah_msg_str (msg, "error");
    char why [300];
    snprintf (why, sizeof why, "the harness's channel closed%s%.200s", error ? ": " : "", error ? error : "");
    ah_cv_harness_gone (self, h, why);
}
