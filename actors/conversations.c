/*  actors/conversations.c: the conversations actor (see conversations.h,
    docs/conversations.md, docs/messages.md "conversations").

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
    Store writes are small and run in the loop (as the sleeper's do).  */
#include "actors/conversations.h"
#include "catalog/catalog.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/str.h"
#include "policy/policy.h"
#include "proto/acp.h"
#include "proto/channel.h"
#include "proto/procchan.h"
#include "store/conversations.h"
#include "store/store.h"

#include <string.h>

#define AREA            "conversations"
#define PIECE           ((256u << 10) - 8)      //  STDIN payload per CHAN_DATA (a record's prefix fits)
#define CREDIT          (1536u << 10)           //  bytes we keep unacknowledged (the tunnel's is 2 MiB)
#define OUT_MAX         (8u << 20)              //  bytes waiting for credit before the harness is dropped
#define EXIT_MAX        256
#define TICK_MS         500

typedef struct self_t self_t;

typedef enum { H_OPENING = 1, H_INIT, H_READY, H_GONE } hstate_t;

//  A permission the harness asked that waits for an answer by the API
//  (conversations.permission_timeout, then lua/permission.lua decides).
typedef struct perm_t {
    struct perm_t *next;
    char conv [AH_CONV_ID_LEN + 1];
    int64_t seq;                    //  its permission entry's: the request the API names
    json_t *id;                     //  the harness's request id (held)
    json_t *params;                 //  its params (held)
    int64_t deadline;               //  zclock_mono
} perm_t;

typedef struct {
    self_t *self;
    char agent_id [32];
    char name [72];
    hstate_t state;
    int64_t gen;                    //  the process generation (a new process: +1)
    int64_t open_req;               //  CHAN_OPEN's, while opening
    int64_t chan;                   //  the tunnel's id once open
    int64_t unacked;                //  STDIN bytes the tunnel has not taken yet
    ah_buf_t out;                   //  STDIN records waiting for credit
    ah_rec_reader_t rec;
    ah_acp_reader_t reader;
    ah_acp_pending_t pending;
    ah_acp_open_t open;
    ah_buf_t err;                   //  stderr's last AH_CONV_STDERR_MAX bytes
    uint8_t exit [EXIT_MAX];
    size_t exit_len;
    int64_t init_id;
    int64_t since_ms;               //  when the open or initialize was sent
    bool attached;                  //  sandboxd kept it from an earlier stream: its sessions live
    bool can_load;                  //  initialize said agentCapabilities.loadSession
    bool can_resume;                //  ... agentCapabilities.sessionCapabilities.resume
    perm_t *perms;                  //  permissions waiting for an answer (at most AH_ACP_OPEN_MAX: open ids)
} harness_t;

typedef struct {
    char id [AH_CONV_ID_LEN + 1];
    char agent_id [32];
    char session [AH_CONV_SESSION_MAX + 1];
    int64_t session_gen;            //  the harness generation session belongs to
    bool turn;                      //  a turn runs
    bool cancelling;
    int64_t cancel_at;
    int64_t prompt_id;              //  our session/prompt's id, once sent
    int64_t new_id;                 //  our session/new, load or resume's id, while asked
    bool restoring;                 //  that is a load or a resume of session
    bool reset;                     //  a session was lost: the notice goes with the new one
    int64_t asked_at;
    char *text;                     //  the prompt waiting for a session
    size_t text_size;
    int errors;                     //  error entries of this turn
    char peer [64];                 //  who watches the turn, and its req
    int64_t watch_req;
} conv_t;

struct self_t {
    ah_actor_t *actor;
    ah_store_t *store;
    ah_catalog_t *catalog;
    ah_policy_t *permission;        //  lua/permission.lua
    zhashx_t *harnesses;            //  agent id -> harness_t
    zhashx_t *convs;                //  conversation id -> conv_t
    int64_t next_req;
    int64_t next_gen;               //  harness generations
    int64_t permission_ms;          //  conversations.permission_timeout
};

static void s_harness_send (harness_t *h, const char *line);
static void s_turns_said (self_t *self, const char *agent_id);

//  --------------------------------------------------------------------
//  The log and the watcher

//  Appends an entry (body taken) and tells the turn's watcher; end: the
//  turn is over (the conversation goes idle). The entry's seq, or -1.
static int64_t s_log (self_t *self, conv_t *c, const char *kind, json_t *body, const char *who, bool end)
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
static void s_error (self_t *self, conv_t *c, const char *why, bool end)
{
    if (!end && c->errors >= AH_CONV_ERRORS_PER_TURN)
        return;
    c->errors++;
    json_t *body = json_pack ("{s:s}", "error", why);
    if (!end && c->errors == AH_CONV_ERRORS_PER_TURN)
        json_object_set_new (body, "notice", json_string ("further errors of this turn are not logged"));
    s_log (self, c, "error", body, "server", end);
}

//  --------------------------------------------------------------------
//  Harnesses

static void s_harness_free (void **item)
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

static void s_conv_free (void **item)
{
    conv_t *c = *item;
    if (!c)
        return;
    free (c->text);
    free (c);
    *item = NULL;
}

//  The conversation whose ACP session (in h's generation) is session.
static conv_t *s_conv_by_session (self_t *self, harness_t *h, const char *session)
{
    if (!session)
        return NULL;
    for (conv_t *c = zhashx_first (self->convs); c; c = zhashx_next (self->convs))
        if (streq (c->agent_id, h->agent_id) && c->session_gen == h->gen && streq (c->session, session))
            return c;
    return NULL;
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
//  an error entry; the harness leaves the table at the next s_reap (it
//  may be in use up the stack: a line's callback, a record's), and the
//  next prompt starts or attaches again.
static void s_harness_gone (self_t *self, harness_t *h, const char *why)
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
        s_log (self, c, "error", body, "server", true);
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
static void s_reap (self_t *self)
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

static void s_send_line (harness_t *h, char *line)
{
    s_harness_send (h, line);
    free (line);
}

//  Moves a conversation's turn on: a session first (session/new), then
//  the prompt.
static void s_advance (self_t *self, harness_t *h, conv_t *c)
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
            s_error (self, c, "too many requests to the harness are waiting for an answer", true);
            return;
        }
        c->restoring = how != AH_ACP_M_SESSION_NEW;
        if (c->restoring) {
            c->session_gen = h->gen;        //  its replayed updates are recognised (and not logged)
            s_send_line (h, how == AH_ACP_M_SESSION_LOAD ? ah_acp_session_load (c->new_id, c->session, "/home/agent")
                                                          : ah_acp_session_resume (c->new_id, c->session, "/home/agent"));
        }
        else
            s_send_line (h, ah_acp_session_new (c->new_id, "/home/agent"));
        return;
    }
    c->prompt_id = ah_acp_pending_add (&h->pending, AH_ACP_M_SESSION_PROMPT, c->id, zclock_mono ());
    if (c->prompt_id < 0) {
        c->prompt_id = 0;
        s_error (self, c, "too many requests to the harness are waiting for an answer", true);
        return;
    }
    char *line = ah_acp_session_prompt (c->prompt_id, c->session, c->text, c->text_size);
    free (c->text);
    c->text = NULL;
    if (!line) {
        s_error (self, c, "the prompt could not be written as ACP (not UTF-8?)", true);
        return;
    }
    s_send_line (h, line);
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

//  The proc channel's header for the agent's harness, or NULL with why.
static ah_msg_t *s_header (self_t *self, const char *agent_id, char *why, size_t why_size)
{
    sqlite3_stmt *st = ah_store_prepare (self->store, "SELECT coalesce (runtime, '') FROM agents WHERE id = :id");
    char runtime [128] = "";
    int rc = st && !ah_store_bind_text (st, ":id", agent_id) ? ah_store_step (self->store, st) : SQLITE_ERROR;
    if (rc == SQLITE_ROW)
        snprintf (runtime, sizeof runtime, "%s", (const char *) sqlite3_column_text (st, 0));
    if (st)
        sqlite3_reset (st);
    if (rc != SQLITE_ROW) {
        snprintf (why, why_size, rc == SQLITE_DONE ? "no such agent" : "cannot read the agent");
        return NULL;
    }
    const ah_runtime_t *rt = *runtime && self->catalog ? ah_catalog_find (self->catalog, runtime) : NULL;
    if (!rt || !rt->harness.command || rt->harness.command_count == 0) {
        snprintf (why, why_size, *runtime ? "the agent's runtime '%.64s' names no harness (docs/catalog.md, \"harness\")"
                                          : "the agent runs an image outside the catalog: no harness to run", runtime);
        return NULL;
    }
    const char *env [AH_PROCCHAN_ENV_MAX];
    char *owned [AH_PROCCHAN_ENV_MAX];
    size_t nenv = 0;
    for (size_t i = 0; i < rt->harness.env_count && nenv < AH_PROCCHAN_ENV_MAX; i++) {
        if (asprintf (&owned [nenv], "%s=%s", rt->harness.env [i].name, rt->harness.env [i].value) < 0)
            break;
        env [nenv] = owned [nenv];
        nenv++;
    }
    ah_msg_t *header = ah_procchan_header ("harness", (const char * const *) rt->harness.command,
                                           rt->harness.command_count, env, nenv, -1);
    for (size_t i = 0; i < nenv; i++)
        free (owned [i]);
    if (!header)
        snprintf (why, why_size, "the harness's command or environment is out of the proc channel's bounds");
    return header;
}

//  The agent's harness: the one running, or a new one being started.
static harness_t *s_harness (self_t *self, const char *agent_id, char *why, size_t why_size)
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
//  What the harness says

//  The option of the kinds wanted (the first of the first kind found,
//  "once" before "always"), or NULL.
static const char *s_option (json_t *options, bool allow)
{
    const char *wanted [2] = { allow ? "allow_once" : "reject_once", allow ? "allow_always" : "reject_always" };
    for (int w = 0; w < 2; w++) {
        size_t i;
        json_t *o;
        json_array_foreach (options, i, o) {
            const char *k = json_string_value (json_object_get (o, "kind"));
            const char *id = json_string_value (json_object_get (o, "optionId"));
            if (k && id && streq (k, wanted [w]))
                return id;
        }
    }
    return NULL;
}

//  Who decides when nobody answers: lua/permission.lua's permission
//  (request), else, when the script fails, the compiled rule (the
//  shipped script's: allow reads, reject the rest). The log entry's body
//  (outcome, optionId, decided_by, rule, why); *option the option chosen.
static json_t *s_decide (self_t *self, harness_t *h, conv_t *c, json_t *params, const char **option)
{
    json_t *call = json_object_get (params, "toolCall");
    const char *kind = json_string_value (json_object_get (call, "kind"));
    const char *title = json_string_value (json_object_get (call, "title"));
    const char *path = json_string_value (json_object_get (json_array_get (json_object_get (call, "locations"), 0), "path"));
    ah_msg_t *req = ah_msg_new ("PERMISSION");
    ah_msg_set_str (req, "agent_id", h->agent_id);
    ah_msg_set_str (req, "agent_name", h->name);
    ah_msg_set_str (req, "conversation", c->id);
    ah_msg_set_str (req, "tool_kind", kind ? kind : "");
    ah_msg_set_str (req, "title", title ? title : "");
    ah_msg_set_str (req, "path", path ? path : "");
    ah_msg_t *result = NULL;
    char *err = NULL;
    bool allow = kind && streq (kind, "read");
    json_t *body = json_pack ("{s:s}", "decided_by", "rule");
    if (self->permission && ah_policy_call (self->permission, "permission", req, NULL, &result, &err) == 0
    &&  ah_msg_has (result, "allow")) {
        allow = ah_msg_bool (result, "allow", false);
        const char *why = ah_msg_str (result, "why");
        json_object_set_new (body, "rule", json_string ("lua/permission.lua"));
        if (why)
            json_object_set_new (body, "why", ah_json_bytes (why, strnlen (why, 1024)));
    }
    else {
        const char *why = err ? err : "permission() returned no 'allow'";
        json_object_set_new (body, "rule", json_string (AH_CONV_PERMISSION_RULE));
        json_object_set_new (body, "rule_error", ah_json_bytes (why, strnlen (why, 1024)));
        ah_warn (AREA, "permission.lua did not decide (%s): the compiled rule did", why);
    }
    free (err);
    ah_msg_destroy (&result);
    ah_msg_destroy (&req);
    *option = s_option (json_object_get (params, "options"), allow);
    json_object_set_new (body, "outcome", json_string (*option ? "selected" : "cancelled"));
    if (*option)
        json_object_set_new (body, "optionId", json_string (*option));
    return body;
}

//  Answers a waiting permission p of h (taken off its list and freed):
//  option NULL is "cancelled". body (taken) is the log entry's.
static void s_perm_answer (self_t *self, harness_t *h, perm_t *p, const char *option, json_t *body, const char *who)
{
    for (perm_t **pp = &h->perms; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    json_object_set_new (body, "outcome", json_string (option ? "selected" : "cancelled"));
    json_object_set_new (body, "request", json_integer (p->seq));
    if (option)
        json_object_set_new (body, "optionId", json_string (option));
    conv_t *c = zhashx_lookup (self->convs, p->conv);
    if (c)
        s_log (self, c, "permission_answer", body, who, false);
    else
        json_decref (body);
    s_send_line (h, ah_acp_result (p->id, option ? json_pack ("{s:{s:s, s:s}}", "outcome", "outcome", "selected", "optionId", option)
                                                 : json_pack ("{s:{s:s}}", "outcome", "outcome", "cancelled")));
    ah_acp_open_close (&h->open, p->id);
    json_decref (p->id);
    json_decref (p->params);
    free (p);
}

//  Each waiting permission of conversation c (NULL: every one of h) is
//  answered "cancelled", by the cancel.
static void s_perms_cancel (self_t *self, harness_t *h, conv_t *c)
{
    perm_t *p = h->perms;
    while (p) {
        perm_t *next = p->next;
        if (!c || streq (p->conv, c->id))
            s_perm_answer (self, h, p, NULL, json_pack ("{s:s}", "decided_by", "the cancel"), "server");
        p = next;
    }
}

static void s_on_request (self_t *self, harness_t *h, ah_acp_msg_t *msg)
{
    conv_t *c = s_conv_by_session (self, h, json_string_value (json_object_get (msg->params, "sessionId")));
    int added = ah_acp_open_add (&h->open, msg->id);
    if (added) {
        s_send_line (h, ah_acp_error (msg->id, AH_ACP_INVALID_REQUEST, added == -1
                     ? "this request id is open already" : "too many requests open"));
        if (c)
            s_error (self, c, added == -1 ? "the harness reused the id of a request still open"
                                          : "the harness has too many requests open", false);
        return;
    }
    if (streq (msg->method, "session/request_permission") && c) {
        int64_t seq = s_log (self, c, "permission", json_incref (msg->params), "harness", false);
        perm_t *p = self->permission_ms > 0 && c->turn && !c->cancelling && seq > 0 ? calloc (1, sizeof *p) : NULL;
        if (p) {
            //  It waits for an answer by the API, or the timeout.
            snprintf (p->conv, sizeof p->conv, "%s", c->id);
            p->seq = seq;
            p->id = json_incref (msg->id);
            p->params = json_incref (msg->params);
            p->deadline = zclock_mono () + self->permission_ms;
            p->next = h->perms;
            h->perms = p;
            return;                 //  open until answered
        }
        const char *option = NULL;
        json_t *outcome;
        const char *who;
        json_t *answer;
        if (c->cancelling || !c->turn) {
            outcome = json_pack ("{s:{s:s}}", "outcome", "outcome", "cancelled");
            who = "server";
            answer = json_pack ("{s:s, s:s}", "outcome", "cancelled", "decided_by", "the cancel");
        }
        else {
            answer = s_decide (self, h, c, msg->params, &option);
            who = "policy";
            outcome = option ? json_pack ("{s:{s:s, s:s}}", "outcome", "outcome", "selected", "optionId", option)
                             : json_pack ("{s:{s:s}}", "outcome", "outcome", "cancelled");
        }
        s_log (self, c, "permission_answer", answer, who, false);
        s_send_line (h, ah_acp_result (msg->id, outcome));
    }
    else {
        //  fs/* and terminal/* are not served yet (we advertise neither).
        if (c)
            s_log (self, c, "harness_call", json_pack ("{s:s, s:b}", "method", msg->method, "served", 0),
                   "harness", false);
        s_send_line (h, ah_acp_error (msg->id, AH_ACP_METHOD_NOT_FOUND, "not served by this client"));
    }
    ah_acp_open_close (&h->open, msg->id);
}

static void s_on_update (self_t *self, harness_t *h, ah_acp_msg_t *msg)
{
    conv_t *c = s_conv_by_session (self, h, json_string_value (json_object_get (msg->params, "sessionId")));
    json_t *update = json_object_get (msg->params, "update");
    if (!c || !json_is_object (update) || c->restoring)
        return;                     //  (a load's replay of the history is not logged again)
    const char *what = json_string_value (json_object_get (update, "sessionUpdate"));
    bool tool = what && (streq (what, "tool_call") || streq (what, "tool_call_update"));
    s_log (self, c, tool ? "tool_call" : "update", json_incref (update), "harness", false);
}

//  Each conversation with a turn running on h: an error entry (not the end).
static void s_error_all (self_t *self, harness_t *h, const char *why)
{
    for (conv_t *c = zhashx_first (self->convs); c; c = zhashx_next (self->convs))
        if (streq (c->agent_id, h->agent_id) && c->turn)
            s_error (self, c, why, false);
}

static void s_on_answer (self_t *self, harness_t *h, ah_acp_msg_t *msg)
{
    ah_acp_pending_entry_t e;
    ah_acp_match_t m = ah_acp_pending_take (&h->pending, msg->id, &e);
    if (m != AH_ACP_ANSWERED) {
        char id [160];
        char why [300];
        snprintf (why, sizeof why, "the harness answered %s id %s", m == AH_ACP_UNKNOWN_ID
                  ? "an unknown" : "an already answered", ah_acp_id_text (msg->id, id, sizeof id));
        s_error_all (self, h, why);
        return;
    }
    if (e.method == AH_ACP_M_INITIALIZE) {
        if (msg->kind == AH_ACP_ERROR) {
            char why [400];
            snprintf (why, sizeof why, "the harness refused initialize: %.300s", msg->message);
            s_harness_gone (self, h, why);
            return;
        }
        h->state = H_READY;
        json_t *caps = json_object_get (msg->result, "agentCapabilities");
        h->can_load = json_is_true (json_object_get (caps, "loadSession"));
        h->can_resume = json_object_get (json_object_get (caps, "sessionCapabilities"), "resume") != NULL;
        ah_info (AREA, "harness of agent '%s' initialized (%s)", h->name,
                 h->can_load ? "loads sessions" : h->can_resume ? "resumes sessions" : "restores no session");
        for (conv_t *c = zhashx_first (self->convs); c; c = zhashx_next (self->convs))
            if (streq (c->agent_id, h->agent_id))
                s_advance (self, h, c);
        return;
    }
    conv_t *c = zhashx_lookup (self->convs, e.tag);
    if (!c || !c->turn)
        return;
    if (msg->kind == AH_ACP_ERROR && (e.method == AH_ACP_M_SESSION_LOAD || e.method == AH_ACP_M_SESSION_RESUME)
    &&  e.id == c->new_id) {
        //  It could not restore it: a new session, and the notice.
        c->new_id = 0;
        c->restoring = false;
        c->reset = true;
        c->session_gen = 0;
        s_advance (self, h, c);
        return;
    }
    if (msg->kind == AH_ACP_ERROR) {
        char why [400];
        snprintf (why, sizeof why, "the harness answered %s with an error (%lld): %.300s",
                  ah_acp_method_name (e.method), (long long) msg->code, msg->message);
        s_error (self, c, why, true);
        return;
    }
    if (e.method == AH_ACP_M_SESSION_NEW) {
        c->new_id = 0;
        const char *sid = json_string_value (json_object_get (msg->result, "sessionId"));
        if (!sid || !*sid || strlen (sid) > AH_CONV_SESSION_MAX) {
            s_error (self, c, "the harness's session/new answer has no usable sessionId (a string of 1 to 256 bytes)", true);
            return;
        }
        snprintf (c->session, sizeof c->session, "%s", sid);
        c->session_gen = h->gen;
        ah_store_conversation_set_session (self->store, c->id, sid);
        if (c->reset)
            s_log (self, c, "notice", json_pack ("{s:s}", "notice", AH_CONV_RESET_NOTICE), "server", false);
        c->reset = false;
        s_advance (self, h, c);
    }
    else if ((e.method == AH_ACP_M_SESSION_LOAD || e.method == AH_ACP_M_SESSION_RESUME) && e.id == c->new_id) {
        c->new_id = 0;
        c->restoring = false;
        ah_info (AREA, "conversation %s: its session %s", c->id,
                 e.method == AH_ACP_M_SESSION_LOAD ? "loaded" : "resumed");
        s_advance (self, h, c);
    }
    else if (e.method == AH_ACP_M_SESSION_PROMPT && e.id == c->prompt_id) {
        const char *reason = json_string_value (json_object_get (msg->result, "stopReason"));
        s_log (self, c, "stop", json_pack ("{s:s}", "stopReason", reason ? reason : "unknown"), "harness", true);
    }
}

static void s_line (void *ud, const char *line, size_t size, const char *error)
{
    harness_t *h = ud;
    self_t *self = h->self;
    if (h->state == H_GONE)
        return;
    if (error) {
        s_error_all (self, h, error);
        return;
    }
    ah_acp_msg_t msg;
    char why [AH_ACP_WHY_MAX];
    if (ah_acp_parse (line, size, &msg, why)) {
        if (msg.reply)
            s_send_line (h, ah_acp_error (msg.id, msg.reply_code, why));
        char text [AH_ACP_WHY_MAX + 64];
        snprintf (text, sizeof text, "the harness wrote a line that is not ACP: %s", why);
        s_error_all (self, h, text);
    }
    else if (msg.kind == AH_ACP_REQUEST)
        s_on_request (self, h, &msg);
    else if (msg.kind == AH_ACP_NOTIFICATION) {
        if (streq (msg.method, "session/update"))
            s_on_update (self, h, &msg);
    }
    else
        s_on_answer (self, h, &msg);
    ah_acp_msg_clear (&msg);
}

typedef struct {
    harness_t *h;
    bool exited;
} recs_t;

static int s_record (void *arg, uint8_t kind, const uint8_t *data, size_t size, bool last)
{
    recs_t *rs = arg;
    harness_t *h = rs->h;
    if (kind == AH_REC_STDOUT)
        ah_acp_reader_feed (&h->reader, data, size, s_line, h);
    else if (kind == AH_REC_STDERR) {
        ah_buf_append (&h->err, data, size);
        if (ah_buf_size (&h->err) > AH_CONV_STDERR_MAX)
            ah_buf_consume (&h->err, ah_buf_size (&h->err) - AH_CONV_STDERR_MAX);
    }
    else if (kind == AH_REC_EXIT) {
        size_t n = size < EXIT_MAX - h->exit_len ? size : EXIT_MAX - h->exit_len;
        memcpy (h->exit + h->exit_len, data, n);
        h->exit_len += n;
        if (last)
            rs->exited = true;
    }
    return h->state == H_GONE;
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
    ah_acp_reader_eof (&h->reader, s_line, h);
    s_harness_gone (self, h, why);
}

static void s_on_chan_reply (self_t *self, harness_t *h, ah_msg_t *msg)
{
    h->open_req = 0;
    if (!ah_msg_bool (msg, "ok", false)) {
        const char *error = ah_msg_str (msg, "error");
        char why [400];
        snprintf (why, sizeof why, "the harness could not be started: %.300s",
                  error && *error ? error : "the channel was refused");
        s_harness_gone (self, h, why);
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
        s_harness_gone (self, h, "the tunnel opened no channel for the harness");
        return;
    }
    //  A harness kept by sandboxd (this server attached again) was
    //  initialized by an earlier connection; ACP lets a client ask again.
    h->state = H_INIT;
    h->since_ms = zclock_mono ();
    h->init_id = ah_acp_pending_add (&h->pending, AH_ACP_M_INITIALIZE, "", zclock_mono ());
    ah_acp_client_t client = { .name = "agenthold", .version = "1" };
    s_send_line (h, ah_acp_initialize (h->init_id, &client));
    ah_info (AREA, "harness of agent '%s' %s", h->name, attached ? "attached again" : "started");
}

static void s_on_reply (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
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

static void s_on_data (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    int64_t chan = ah_msg_int (msg, "chan", 0);
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
    int rc = ah_rec_read (&h->rec, data, size, s_record, &rs, &err);
    if (h->state == H_GONE)
        return;
    ah_msg_t *ack = ah_msg_new ("CHAN_ACK");
    ah_msg_set_int (ack, "chan", chan);
    ah_msg_set_int (ack, "bytes", (int64_t) size);
    ah_actor_send (self->actor, "tunnel", &ack);
    if (rc < 0) {
        char why [200];
        snprintf (why, sizeof why, "sandboxd's records for the harness are malformed: %s", err ? err : "?");
        s_harness_gone (self, h, why);
    }
    else if (rs.exited)
        s_exited (self, h);
}

static void s_on_ack (void *self_, ah_msg_t *msg)
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
static void s_on_eof (void *self_, ah_msg_t *msg)
{
}

static void s_on_close (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    harness_t *h = s_harness_by_chan (self, ah_msg_int (msg, "chan", 0));
    if (!h)
        return;
    h->chan = 0;                    //  gone already: no RST to send
    const char *error = ah_msg_str (msg, "error");
    char why [300];
    snprintf (why, sizeof why, "the harness's channel closed%s%.200s", error ? ": " : "", error ? error : "");
    s_harness_gone (self, h, why);
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
    //  process (attached), else restored (s_advance).
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
    s_reap (self);              //  before s_conv: it may drop idle conversations
    conv_t *c = s_conv (self, msg);
    if (!c)
        return;
    if (c->turn) {
        ah_actor_reply_error (self->actor, msg, 409, "a turn is running in conversation '%s'; cancel it or wait for its end", c->id);
        return;
    }
    char why [400];
    harness_t *h = s_harness (self, c->agent_id, why, sizeof why);
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
    int64_t seq = s_log (self, c, "prompt", json_pack ("{s:o}", "text", body), who, false);
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
        s_log (self, c, "notice", json_pack ("{s:s}", "notice", AH_CONV_WAKE_NOTICE), "server", false);
    s_advance (self, h, c);
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
        s_log (self, c, "stop", json_pack ("{s:s, s:s}", "stopReason", "cancelled", "by", "server"), "server", true);
        return;
    }
    c->cancelling = true;
    c->cancel_at = zclock_mono ();
    s_perms_cancel (self, h, c);
    ah_store_conversation_set_turn (self->store, c->id, "cancelling", ah_store_now_ms ());
    s_send_line (h, ah_acp_session_cancel (c->session));
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
    s_perm_answer (self, h, p, kept, json_pack ("{s:s}", "decided_by", "api"), who);
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
            s_harness_gone (self, h, why);
        }
    for (harness_t *h = zhashx_first (self->harnesses); h; h = zhashx_next (self->harnesses)) {
        perm_t *p = h->perms;
        while (p && h->state != H_GONE) {
            perm_t *next = p->next;
            conv_t *c = zhashx_lookup (self->convs, p->conv);
            if (now >= p->deadline && c && c->turn && !c->cancelling) {
                const char *option = NULL;
                json_t *body = s_decide (self, h, c, p->params, &option);
                json_object_del (body, "outcome");
                json_object_del (body, "optionId");
                s_perm_answer (self, h, p, option, body, "policy");
            }
            else if (now >= p->deadline)
                s_perm_answer (self, h, p, NULL, json_pack ("{s:s}", "decided_by", "the turn's end"), "server");
            p = next;
        }
    }
    for (conv_t *c = zhashx_first (self->convs); c; c = zhashx_next (self->convs)) {
        if (c->turn && c->new_id && now - c->asked_at > AH_CONV_REQUEST_TIMEOUT_MS)
            s_error (self, c, c->restoring ? "the harness did not answer session/load or session/resume in time"
                                           : "the harness did not answer session/new in time", true);
        else if (c->turn && c->cancelling && now - c->cancel_at > AH_CONV_CANCEL_GRACE_MS)
            s_error (self, c, "the harness did not end the cancelled turn in time", true);
    }
    s_reap (self);
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
        s_log (self, &c, "error", json_pack ("{s:s}", "error",
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
    zhashx_set_destructor (self->harnesses, s_harness_free);
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
    { "REPLY", s_on_reply },
    { "CHAN_DATA", s_on_data },
    { "CHAN_ACK", s_on_ack },
    { "CHAN_EOF", s_on_eof },
    { "CHAN_CLOSE", s_on_close },
    { NULL, NULL }
};

const ah_actor_def_t ah_conversations_actor = {
    .name = AREA, .on_bus = true, .init = s_init, .destroy = s_destroy, .handlers = s_handlers,
};
