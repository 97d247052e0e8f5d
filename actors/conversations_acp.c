/*  actors/conversations_acp.c: what the harness says, for the
    conversations actor (conversations_int.h): its lines read as ACP,
    its requests (permissions decided by the API, lua/permission.lua or
    the compiled rule; file and terminal requests go to conversations_calls.c),
    its session updates logged, the answers to our requests.          */
#include "actors/conversations_int.h"
#include "common/str.h"
#include "store/conversations.h"

#include <string.h>

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
json_t *ah_cv_decide (self_t *self, harness_t *h, conv_t *c, json_t *params, const char **option)
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
void ah_cv_perm_answer (self_t *self, harness_t *h, perm_t *p, const char *option, json_t *body, const char *who)
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
        ah_cv_log (self, c, "permission_answer", body, who, false);
    else
        json_decref (body);
    ah_cv_send_line (h, ah_acp_result (p->id, option ? json_pack ("{s:{s:s, s:s}}", "outcome", "outcome", "selected", "optionId", option)
                                                 : json_pack ("{s:{s:s}}", "outcome", "outcome", "cancelled")));
    ah_acp_open_close (&h->open, p->id);
    json_decref (p->id);
    json_decref (p->params);
    free (p);
}

//  Each waiting permission of conversation c (NULL: every one of h) is
//  answered "cancelled", by the cancel.
void ah_cv_perms_cancel (self_t *self, harness_t *h, conv_t *c)
{
    perm_t *p = h->perms;
    while (p) {
        perm_t *next = p->next;
        if (!c || streq (p->conv, c->id))
            ah_cv_perm_answer (self, h, p, NULL, json_pack ("{s:s}", "decided_by", "the cancel"), "server");
        p = next;
    }
}

static void s_on_request (self_t *self, harness_t *h, ah_acp_msg_t *msg)
{
    conv_t *c = s_conv_by_session (self, h, json_string_value (json_object_get (msg->params, "sessionId")));
    int added = ah_acp_open_add (&h->open, msg->id);
    if (added) {
        ah_cv_send_line (h, ah_acp_error (msg->id, AH_ACP_INVALID_REQUEST, added == -1
                     ? "this request id is open already" : "too many requests open"));
        if (c)
            ah_cv_error (self, c, added == -1 ? "the harness reused the id of a request still open"
                                          : "the harness has too many requests open", false);
        return;
    }
    if (streq (msg->method, "session/request_permission") && c) {
        int64_t seq = ah_cv_log (self, c, "permission", json_incref (msg->params), "harness", false);
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
            answer = ah_cv_decide (self, h, c, msg->params, &option);
            who = "policy";
            outcome = option ? json_pack ("{s:{s:s, s:s}}", "outcome", "outcome", "selected", "optionId", option)
                             : json_pack ("{s:{s:s}}", "outcome", "outcome", "cancelled");
        }
        ah_cv_log (self, c, "permission_answer", answer, who, false);
        ah_cv_send_line (h, ah_acp_result (msg->id, outcome));
    }
    else if (ah_cv_serve (self, h, c, msg))
        return;                     //  (answered, or open until its channel answers)
    else {
        if (c)
            ah_cv_log (self, c, "harness_call", json_pack ("{s:s, s:b}", "method", msg->method, "served", 0),
                   "harness", false);
        ah_cv_send_line (h, ah_acp_error (msg->id, AH_ACP_METHOD_NOT_FOUND, "no such method on this client"));
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
    ah_cv_log (self, c, tool ? "tool_call" : "update", json_incref (update), "harness", false);
}

//  Each conversation with a turn running on h: an error entry (not the end).
static void s_error_all (self_t *self, harness_t *h, const char *why)
{
    for (conv_t *c = zhashx_first (self->convs); c; c = zhashx_next (self->convs))
        if (streq (c->agent_id, h->agent_id) && c->turn)
            ah_cv_error (self, c, why, false);
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
            ah_cv_harness_gone (self, h, why);
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
                ah_cv_advance (self, h, c);
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
        ah_cv_advance (self, h, c);
        return;
    }
    if (msg->kind == AH_ACP_ERROR) {
        char why [400];
        snprintf (why, sizeof why, "the harness answered %s with an error (%lld): %.300s",
                  ah_acp_method_name (e.method), (long long) msg->code, msg->message);
        ah_cv_error (self, c, why, true);
        return;
    }
    if (e.method == AH_ACP_M_SESSION_NEW) {
        c->new_id = 0;
        const char *sid = json_string_value (json_object_get (msg->result, "sessionId"));
        if (!sid || !*sid || strlen (sid) > AH_CONV_SESSION_MAX) {
            ah_cv_error (self, c, "the harness's session/new answer has no usable sessionId (a string of 1 to 256 bytes)", true);
            return;
        }
        snprintf (c->session, sizeof c->session, "%s", sid);
        c->session_gen = h->gen;
        ah_store_conversation_set_session (self->store, c->id, sid);
        if (c->reset)
            ah_cv_log (self, c, "notice", json_pack ("{s:s}", "notice", AH_CONV_RESET_NOTICE), "server", false);
        c->reset = false;
        ah_cv_advance (self, h, c);
    }
    else if ((e.method == AH_ACP_M_SESSION_LOAD || e.method == AH_ACP_M_SESSION_RESUME) && e.id == c->new_id) {
        c->new_id = 0;
        c->restoring = false;
        ah_info (AREA, "conversation %s: its session %s", c->id,
                 e.method == AH_ACP_M_SESSION_LOAD ? "loaded" : "resumed");
        ah_cv_advance (self, h, c);
    }
    else if (e.method == AH_ACP_M_SESSION_PROMPT && e.id == c->prompt_id) {
        const char *reason = json_string_value (json_object_get (msg->result, "stopReason"));
        ah_cv_log (self, c, "stop", json_pack ("{s:s}", "stopReason", reason ? reason : "unknown"), "harness", true);
    }
}

void ah_cv_line (void *ud, const char *line, size_t size, const char *error)
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
            ah_cv_send_line (h, ah_acp_error (msg.id, msg.reply_code, why));
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

int ah_cv_record (void *arg, uint8_t kind, const uint8_t *data, size_t size, bool last)
{
    recs_t *rs = arg;
    harness_t *h = rs->h;
    if (kind == AH_REC_STDOUT)
        ah_acp_reader_feed (&h->reader, data, size, ah_cv_line, h);
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
