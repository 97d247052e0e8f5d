/*  actors/conversations.c: the conversations actor (see conversations.h,
    docs/conversations.md, docs/messages.md "conversations"): its state,
    start and stop, the log and the turn's watcher, the API's messages,
    the tick, the handler table (its files: conversations_int.h).

    DESIGN. One actor thread (common/actor.h; bus name "conversations")
    owns its own store connection (the one writer of conversations and
    conversation_log), the catalog (read at start: which runtime runs
    which harness), lua/permission.lua in a Lua state of its own, and
    two tables:
    - harnesses, by agent id: one proc channel each (CHAN_OPEN to the
      tunnel like any opener, key "harness"), its record reader, the ACP
      line reader, our pending requests and the harness's open ones, the
      bounded tail of its stderr, and its generation (a new process is a
      new generation: every ACP session of the older one is gone);
    - conversations, by id: those prompted since this actor started, with
      the ACP session they have in the current generation, the turn and
      who watches it (the sender of the CONV_PROMPT and its req: each log
      entry of the turn goes to it as CONV_EVENT, the last with end).
    Everything the harness writes is hostile: the ACP reader holds at
    most one 4 MiB line, stderr at most AH_CONV_STDERR_MAX, an EXIT
    payload 256 bytes; a turn logs at most AH_CONV_ERRORS_PER_TURN error
    entries. A harness that exits, or whose channel closes, ends each of
    its running turns with an error entry; initialize and session/new
    unanswered within AH_CONV_REQUEST_TIMEOUT_MS and a cancelled turn
    not ended within AH_CONV_CANCEL_GRACE_MS end theirs too: never a hang.
    The harness's fs and terminal requests are calls (call_t): each
    its own fs.read, fs.write or exec channel, answered when its bytes
    are in, never waited for; bounds in conversations.h.
    Store writes are small and run in the loop (as the sleeper's do).  */
#include "actors/conversations_int.h"
#include "common/str.h"
#include "store/conversations.h"

#include <string.h>

static void s_turns_said (self_t *self, const char *agent_id);

//  --------------------------------------------------------------------
//  The log and the watcher

//  Appends an entry (body taken) and tells the turn's watcher; end: the
//  turn is over (the conversation goes idle). The entry's seq, or -1.
int64_t ah_cv_log (self_t *self, conv_t *c, const char *kind, json_t *body, const char *who, bool end)
{
    char *text = body ? json_dumps (body, JSON_COMPACT) : NULL;
    json_decref (body);
    int64_t seq = -1;
    if (text)
        seq = ah_store_conversation_append (self->store, c->id, kind, text, strlen (text), who,
                                            ah_store_now_ms ());
    if (seq < 0)
        ah_warn (AREA, "conversation %s: a %s entry was not logged: %s", c->id, kind,
                 text ? ah_store_error (self->store) : "out of memory");
    if (end) {
        if (c->restoring)
            c->session_gen = 0;     //  not restored after all: the next turn tries again
        c->turn = c->cancelling = c->restoring = false;
        c->prompt_id = c->new_id = 0;
        free (c->text);
        c->text = NULL;
        if (ah_store_conversation_set_turn (self->store, c->id, "idle", ah_store_now_ms ()) != 1)
            ah_warn (AREA, "conversation %s: its turn state was not set to idle", c->id);
        if (c->agent_id [0])
            s_turns_said (self, c->agent_id);
    }
    if (c->peer [0]) {
        ah_msg_t *m = ah_msg_new ("CONV_EVENT");
        ah_msg_set_int (m, "turn", c->watch_req);
        ah_msg_set_str (m, "conv", c->id);
        ah_msg_set_int (m, "seq", seq);
        ah_msg_set_str (m, "kind", kind);
        ah_msg_set_str (m, "who", who);
        ah_msg_set_str (m, "body", text ? text : "{}");
        if (end)
            ah_msg_set_bool (m, "end", true);
        ah_actor_send (self->actor, c->peer, &m);
    }
    if (end)
        c->peer [0] = 0;
    free (text);
    return seq;
}

//  The agent's running turns, to the sleeper (idle.lua's
//  conversation_turns: a turn keeps its agent awake), and its use to
//  lifecycle (a turn's start and end move last_activity_at).
static void s_turns_said (self_t *self, const char *agent_id)
{
    int64_t n = 0;
    for (conv_t *c = zhashx_first (self->convs); c; c = zhashx_next (self->convs))
        n += c->turn && streq (c->agent_id, agent_id);
    ah_msg_t *m = ah_msg_new ("CONV_TURNS");
    ah_msg_set_str (m, "agent_id", agent_id);
    ah_msg_set_int (m, "running", n);
    ah_actor_send (self->actor, "sleeper", &m);
    m = ah_msg_new ("AGENT_ACTIVITY");
    ah_msg_set_str (m, "agent_id", agent_id);
    ah_msg_set_str (m, "what", "conversation");
    ah_actor_send (self->actor, "lifecycle", &m);
}

//  An error entry of the running turn: {"error": why}, and ends it when end.
void ah_cv_error (self_t *self, conv_t *c, const char *why, bool end)
{
    if (!end && c->errors >= AH_CONV_ERRORS_PER_TURN)
        return;
    c->errors++;
    json_t *body = json_pack ("{s:s}", "error", why);
    if (!end && c->errors == AH_CONV_ERRORS_PER_TURN)
        json_object_set_new (body, "notice", json_string ("further errors of this turn are not logged"));
    ah_cv_log (self, c, "error", body, "server", end);
}

static void s_conv_free (void **item)
{
    conv_t *c = *item;
    if (!c)
        return;
    free (c->text);
    free (c);
    *item = NULL;
}

//  --------------------------------------------------------------------
//  The API's messages

//  The conversation id of agent_id, known or read: NULL (answered) when
//  there is none.
static conv_t *s_conv (self_t *self, ah_msg_t *msg)
{
    const char *id = ah_msg_str (msg, "conv"), *agent_id = ah_msg_str (msg, "agent_id");
    if (!id || !agent_id) {
        ah_actor_reply_error (self->actor, msg, 400, "%s needs conv and agent_id (strings)", ah_msg_type (msg));
        return NULL;
    }
    ah_conversation_t row;
    int found = ah_store_conversation_get (self->store, id, NULL, &row);
    if (found != 1 || !streq (row.agent_id, agent_id)) {
        ah_actor_reply_error (self->actor, msg, found < 0 ? 500 : 404, found < 0
                              ? "cannot read the conversations" : "no conversation '%.32s'", id);
        return NULL;
    }
    conv_t *c = zhashx_lookup (self->convs, id);
    if (c)
        return c;
    c = calloc (1, sizeof *c);
    if (!c) {
        ah_actor_reply_error (self->actor, msg, 503, "out of memory");
        return NULL;
    }
    snprintf (c->id, sizeof c->id, "%s", row.id);
    snprintf (c->agent_id, sizeof c->agent_id, "%s", row.agent_id);
    //  The session of an earlier run: alive when the harness is the same
    //  process (attached), else restored (ah_cv_advance).
    snprintf (c->session, sizeof c->session, "%s", row.acp_session_id);
    zhashx_insert (self->convs, c->id, c);
    return c;
}

static void s_create (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *agent_id = ah_msg_str (msg, "agent_id");
    char id [AH_CONV_ID_LEN + 1];
    int rc = agent_id ? ah_store_conversation_create (self->store, agent_id, ah_store_now_ms (), id) : -2;
    if (rc != 1) {
        ah_actor_reply_error (self->actor, msg, rc == -2 ? 400 : rc == 0 ? 404 : 500, rc == -2
                              ? "CONV_CREATE needs agent_id (a string)" : rc == 0 ? "no such agent"
                              : "could not make the conversation (see the server log)");
        return;
    }
    ah_msg_t *r = ah_msg_reply_ok (msg);
    ah_msg_set_int (r, "status", 201);
    ah_msg_set_str (r, "conv", id);
    ah_actor_reply (self->actor, msg, r);
}

static void s_prompt (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    size_t size = 0;
    const char *text = ah_msg_bin (msg, "text", &size);
    const char *who = ah_msg_str (msg, "who");
    if (!text || !who || !*who || strlen (who) > AH_CONV_WHO_MAX) {
        ah_actor_reply_error (self->actor, msg, 400, "CONV_PROMPT needs text (bin) and who (a string of 1 to 128 bytes)");
        return;
    }
    if (size == 0 || size > AH_CONV_PROMPT_MAX || memchr (text, 0, size)) {
        ah_actor_reply_error (self->actor, msg, 400, "a prompt's text is 1 to %u bytes without NUL", AH_CONV_PROMPT_MAX);
        return;
    }
    ah_cv_reap (self);              //  before s_conv: it may drop idle conversations
    conv_t *c = s_conv (self, msg);
    if (!c)
        return;
    if (c->turn) {
        ah_actor_reply_error (self->actor, msg, 409, "a turn is running in conversation '%s'; cancel it or wait for its end", c->id);
        return;
    }
    char why [400];
    harness_t *h = ah_cv_harness (self, c->agent_id, why, sizeof why);
    if (!h) {
        ah_actor_reply_error (self->actor, msg, 409, "%s", why);
        return;
    }
    c->text = malloc (size + 1);
    if (!c->text) {
        ah_actor_reply_error (self->actor, msg, 503, "out of memory");
        return;
    }
    memcpy (c->text, text, size);
    c->text [size] = 0;
    c->text_size = size;
    c->turn = true;
    c->cancelling = false;
    c->errors = 0;
    c->prompt_id = c->new_id = 0;
    c->asked_at = zclock_mono ();
    ah_store_conversation_set_turn (self->store, c->id, "running", ah_store_now_ms ());
    s_turns_said (self, c->agent_id);
    json_t *body = ah_json_bytes (text, size);
    int64_t seq = ah_cv_log (self, c, "prompt", json_pack ("{s:o}", "text", body), who, false);
    snprintf (c->peer, sizeof c->peer, "%s", ah_msg_peer (msg) ? ah_msg_peer (msg) : "");
    c->watch_req = ah_msg_int (msg, "req", 0);
    ah_msg_t *r = ah_msg_reply_ok (msg);
    ah_msg_set_int (r, "status", 202);
    ah_msg_set_str (r, "conv", c->id);
    ah_msg_set_int (r, "seq", seq);
    ah_actor_reply (self->actor, msg, r);
    //  A prompt that woke its agent: the log says so right after it
    //  (docs/conversations.md, "After a boot"), and so does the stream.
    if (ah_msg_bool (msg, "woke", false))
        ah_cv_log (self, c, "notice", json_pack ("{s:s}", "notice", AH_CONV_WAKE_NOTICE), "server", false);
    ah_cv_advance (self, h, c);
}

static void s_cancel (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    conv_t *c = s_conv (self, msg);
    if (!c)
        return;
    if (!c->turn) {
        ah_actor_reply_error (self->actor, msg, 409, "no turn is running in conversation '%s'", c->id);
        return;
    }
    ah_actor_reply_ok (self->actor, msg, 202);
    if (c->cancelling)
        return;
    harness_t *h = zhashx_lookup (self->harnesses, c->agent_id);
    if (!c->prompt_id || !h || h->state == H_GONE) {
        //  The prompt never reached the harness: the turn ends here.
        ah_cv_log (self, c, "stop", json_pack ("{s:s, s:s}", "stopReason", "cancelled", "by", "server"), "server", true);
        return;
    }
    c->cancelling = true;
    c->cancel_at = zclock_mono ();
    ah_cv_perms_cancel (self, h, c);
    ah_store_conversation_set_turn (self->store, c->id, "cancelling", ah_store_now_ms ());
    ah_cv_send_line (h, ah_acp_session_cancel (c->session));
}

//  CONV_PERMISSION: a caller answers a waiting permission.
static void s_permission (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    int64_t request = ah_msg_int (msg, "request", 0);
    const char *option = ah_msg_str (msg, "option"), *who = ah_msg_str (msg, "who");
    if (request <= 0 || !option || !who || !*who || strlen (who) > AH_CONV_WHO_MAX) {
        ah_actor_reply_error (self->actor, msg, 400, "CONV_PERMISSION needs request (int > 0), option and who (strings)");
        return;
    }
    conv_t *c = s_conv (self, msg);
    if (!c)
        return;
    harness_t *h = zhashx_lookup (self->harnesses, c->agent_id);
    perm_t *p = h && h->state != H_GONE ? h->perms : NULL;
    while (p && !(p->seq == request && streq (p->conv, c->id)))
        p = p->next;
    if (!p) {
        ah_actor_reply_error (self->actor, msg, 404, "no permission request %lld waits in conversation '%s' "
                              "(answered already, decided, or never asked)", (long long) request, c->id);
        return;
    }
    const char *chosen = NULL;
    size_t i;
    json_t *o;
    char offered [300] = "";
    json_array_foreach (json_object_get (p->params, "options"), i, o) {
        const char *id = json_string_value (json_object_get (o, "optionId"));
        if (id && streq (id, option))
            chosen = id;
        if (id && strlen (offered) + strlen (id) + 3 < sizeof offered)
            snprintf (offered + strlen (offered), sizeof offered - strlen (offered), "%s%s", *offered ? ", " : "", id);
    }
    if (!chosen) {
        ah_actor_reply_error (self->actor, msg, 400, "option '%.64s' is not one the harness offered (%s)",
                              option, *offered ? offered : "none");
        return;
    }
    char kept [256];
    snprintf (kept, sizeof kept, "%s", chosen);      //  p (and its params) go with the answer
    ah_actor_reply_ok (self->actor, msg, 200);
    ah_cv_perm_answer (self, h, p, kept, json_pack ("{s:s}", "decided_by", "api"), who);
}

//  --------------------------------------------------------------------
//  Time: what was not answered in time ends its turn

static void s_tick (void *self_, void *arg)
{
    self_t *self = self_;
    int64_t now = zclock_mono ();
    for (harness_t *h = zhashx_first (self->harnesses); h; h = zhashx_next (self->harnesses))
        if ((h->state == H_OPENING || h->state == H_INIT) && now - h->since_ms > AH_CONV_REQUEST_TIMEOUT_MS) {
            char why [200];
            snprintf (why, sizeof why, "the harness did not %s within %d s",
                      h->state == H_OPENING ? "start" : "answer initialize", AH_CONV_REQUEST_TIMEOUT_MS / 1000);
            ah_cv_harness_gone (self, h, why);
        }
    for (harness_t *h = zhashx_first (self->harnesses); h; h = zhashx_next (self->harnesses)) {
        perm_t *p = h->perms;
        while (p && h->state != H_GONE) {
            perm_t *next = p->next;
            conv_t *c = zhashx_lookup (self->convs, p->conv);
            if (now >= p->deadline && c && c->turn && !c->cancelling) {
                const char *option = NULL;
                json_t *body = ah_cv_decide (self, h, c, p->params, &option);
                json_object_del (body, "outcome");
                json_object_del (body, "optionId");
                ah_cv_perm_answer (self, h, p, option, body, "policy");
            }
            else if (now >= p->deadline)
                ah_cv_perm_answer (self, h, p, NULL, json_pack ("{s:s}", "decided_by", "the turn's end"), "server");
            p = next;
        }
    }
    for (conv_t *c = zhashx_first (self->convs); c; c = zhashx_next (self->convs)) {
        if (c->turn && c->new_id && now - c->asked_at > AH_CONV_REQUEST_TIMEOUT_MS)
            ah_cv_error (self, c, c->restoring ? "the harness did not answer session/load or session/resume in time"
                                           : "the harness did not answer session/new in time", true);
        else if (c->turn && c->cancelling && now - c->cancel_at > AH_CONV_CANCEL_GRACE_MS)
            ah_cv_error (self, c, "the harness did not end the cancelled turn in time", true);
    }
    ah_cv_reap (self);
    ah_cv_calls_sweep (self);
}

//  --------------------------------------------------------------------
//  The actor

//  Turns an earlier run of the server left running (it stopped or died
//  mid-turn: its harness and its watchers are gone) end now, each with
//  an error entry saying so: the log stays consistent across a crash.
static void s_end_orphans (self_t *self)
{
    sqlite3_stmt *st = ah_store_prepare (self->store,
        "SELECT id FROM conversations WHERE turn_state <> 'idle' ORDER BY id");
    zlistx_t *ids = zlistx_new ();
    if (!st || !ids) {
        zlistx_destroy (&ids);
        return;
    }
    zlistx_set_destructor (ids, (zlistx_destructor_fn *) zstr_free);
    while (ah_store_step (self->store, st) == SQLITE_ROW) {
        const char *id = (const char *) sqlite3_column_text (st, 0);
        if (id)
            zlistx_add_end (ids, strdup (id));
    }
    sqlite3_reset (st);
    for (char *id = zlistx_first (ids); id; id = zlistx_next (ids)) {
        conv_t c = { 0 };
        snprintf (c.id, sizeof c.id, "%s", id);
        c.turn = true;
        ah_cv_log (self, &c, "error", json_pack ("{s:s}", "error",
               "the server stopped during this turn; the turn was ended when it started again"), "server", true);
    }
    if (zlistx_size (ids))
        ah_info (AREA, "%zu turn(s) left running by the server's last run ended", zlistx_size (ids));
    zlistx_destroy (&ids);
}

static void s_destroy (void *self_)
{
    self_t *self = self_;
    if (!self)
        return;
    ah_cv_calls_destroy (self);
    zhashx_destroy (&self->convs);
    zhashx_destroy (&self->harnesses);
    ah_catalog_destroy (&self->catalog);
    ah_policy_destroy (&self->permission);
    ah_store_close (&self->store);
    free (self);
}

static void *s_init (ah_actor_t *actor, void *args)
{
    const ah_conversations_args_t *a = args;
    self_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->actor = actor;
    char *err = NULL;
    self->harnesses = zhashx_new ();
    self->convs = zhashx_new ();
    if (!self->harnesses || !self->convs || !(self->store = ah_store_open (a->db_path, false, &err))) {
        ah_actor_fail (actor, "%s", err ? err : "out of memory");
        free (err);
        s_destroy (self);
        return NULL;
    }
    if (!(self->permission = ah_policy_new (a->config ? a->config->lua_dir : NULL, "permission.lua", AREA,
                                            self->store, &err))) {
        ah_actor_fail (actor, "%s", err ? err : "cannot load permission.lua");
        free (err);
        s_destroy (self);
        return NULL;
    }
    s_end_orphans (self);
    zhashx_set_destructor (self->harnesses, ah_cv_harness_free);
    zhashx_set_destructor (self->convs, s_conv_free);
    //  No catalog (or one that does not load) is no harness: prompts are
    //  refused with the reason, the server runs on.
    if (a->config && a->config->catalog_path && !(self->catalog = ah_catalog_load (a->config->catalog_path, &err))) {
        ah_warn (AREA, "no harnesses: %s", err ? err : "the catalog did not load");
        free (err);
    }
    self->permission_ms = a->config ? (int64_t) (a->config->permission_timeout_s * 1000 + 0.5) : 0;
    ah_actor_timer (actor, TICK_MS, TICK_MS, s_tick, NULL);
    return self;
}

static void s_policy_reload (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    if (ah_policy_reload (self->permission, true) < 0)
        ah_warn (AREA, "permission.lua not reloaded, the previous version stays: %s",
                 ah_policy_error (self->permission));
}

static const ah_actor_handler_t s_handlers [] = {
    { "CONV_CREATE", s_create },
    { "POLICY_RELOAD", s_policy_reload },
    { "CONV_PROMPT", s_prompt },
    { "CONV_CANCEL", s_cancel },
    { "CONV_PERMISSION", s_permission },
    { "REPLY", ah_cv_on_reply },
    { "CHAN_DATA", ah_cv_on_data },
    { "CHAN_ACK", ah_cv_on_ack },
    { "CHAN_EOF", ah_cv_on_eof },
    { "CHAN_CLOSE", ah_cv_on_close },
    { NULL, NULL }
};

const ah_actor_def_t ah_conversations_actor = {
    .name = AREA, .on_bus = true, .init = s_init, .destroy = s_destroy, .handlers = s_handlers,
};
