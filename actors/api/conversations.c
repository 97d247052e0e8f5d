/*  actors/api/conversations.c: an agent's conversations (docs/api.md
    "Conversations", docs/conversations.md): make one, list them, read a
    log in pages, prompt (a turn streamed as server-sent events until its
    stop reason) and cancel.

    DESIGN. The conversations actor is the log's one writer and the ACP
    client; this file reads the store (the API's connection) and asks
    the actor by message: CONV_CREATE, CONV_PROMPT, CONV_CANCEL. A
    prompt's request, once the actor took it, becomes a stream (prompt_t
    on api->prompts) that the actor's CONV_EVENTs for that turn (its
    "turn" is our CONV_PROMPT's req) feed, the last with end. A client
    that stops reading is cut at API_PROMPT_BACKLOG bytes behind; one that
    leaves leaves the turn running (its log has everything). Another
    tenant's conversation is none: 404, as its agent is.            */
#include "actors/api/api_int.h"
#include "actors/conversations.h"
#include "store/conversations.h"

#include <string.h>

#define API_PROMPT_BACKLOG  (16u << 20)     //  bytes of events a client may lag behind
#define API_LOG_PAGE        100             //  entries of a log page unless ?limit

typedef struct prompt_t {
    struct prompt_t *next;
    req_t *r;
    int64_t turn;                   //  our CONV_PROMPT's req: the events' "turn"
    char *text;                     //  until sent
    size_t text_size;
    ah_buf_t buf;                   //  events not yet handed to the connection
    bool streaming;                 //  the actor took it: the stream is open
    bool ended;                     //  the end came: close once buf is out
    bool dead;                      //  too far behind: close now
    bool woke;                      //  its agent was not running: the wake came first
} prompt_t;

static const body_field_t s_prompt_fields [] = { { "text", B_STR, NULL }, { NULL, 0, NULL } };
static const body_field_t s_answer_fields [] = { { "option", B_STR, NULL }, { NULL, 0, NULL } };

//  r's agent (params [0]) resolved into r: 0, or -1 answered.
static int s_agent (req_t *r)
{
    json_t *agent = api_agent_resolve (r);
    json_decref (agent);
    return agent ? 0 : -1;
}

//  The conversation params [1] of r's agent (resolved here) in r's
//  scope: 0, or -1 answered (404 also for another tenant's).
static int s_find (req_t *r, ah_conversation_t *c)
{
    if (s_agent (r))
        return -1;
    int found = ah_store_conversation_get (r->api->store, r->params [1], r->who.scope, c);
    if (found == 1 && streq (c->agent_id, r->agent_id))
        return 0;
    if (found < 0)
        api_respond_error (r, 500, "cannot read the conversations");
    else
        api_respond_error (r, 404, "no conversation '%.32s' of agent '%s'", r->params [1], r->name);
    return -1;
}

static json_t *s_conv_json (const ah_conversation_t *c)
{
    return json_pack ("{s:s s:s s:o s:o s:o s:o}", "id", c->id, "agent_id", c->agent_id,
                      "turn_state", api_json_text (c->turn_state),
                      "acp_session_id", c->acp_session_id [0] ? api_json_text (c->acp_session_id) : json_null (),
                      "created_at", api_json_time (c->created_at),
                      "last_activity_at", api_json_time (c->last_activity_at));
}

//  --------------------------------------------------------------------
//  Make, list, read

static void s_created (req_t *r, ah_msg_t *reply)
{
    const char *id = ah_msg_str (reply, "conv");
    snprintf (r->detail, sizeof r->detail, "conversation %.32s", id ? id : "?");
    api_record (r, true, NULL);
    api_respond (r, 201, json_pack ("{s:o s:s}", "id", api_json_text (id ? id : ""), "agent_id", r->agent_id));
}

static void s_create (req_t *r)
{
    if (s_agent (r))
        return;
    json_t *obj = api_body_object (r, true);
    if (!obj)
        return;
    json_decref (obj);
    ah_msg_t *msg = ah_msg_new ("CONV_CREATE");
    ah_msg_set_str (msg, "agent_id", r->agent_id);
    r->kind = "conversation.create";
    api_ask (r, "conversations", &msg, s_created);
}

static int s_listed (void *ud, const ah_conversation_t *c)
{
    json_array_append_new (ud, s_conv_json (c));
    return 0;
}

static void s_list (req_t *r)
{
    if (s_agent (r))
        return;
    json_t *list = json_array ();
    if (ah_store_conversations_list (r->api->store, r->agent_id, r->who.scope, s_listed, list) < 0) {
        json_decref (list);
        api_respond_error (r, 500, "cannot read the conversations");
        return;
    }
    api_respond (r, 200, json_pack ("{s:o}", "conversations", list));
}

static int s_entry (void *ud, const ah_conv_entry_t *e)
{
    json_t *body = json_loadb (e->body, e->body_size, 0, NULL);
    json_array_append_new (ud, json_pack ("{s:I s:o s:I s:s s:s s:o}", "seq", (json_int_t) e->seq,
                                          "at", api_json_time (e->at), "at_ms", (json_int_t) e->at,
                                          "kind", e->kind, "who", e->who, "body", body ? body : json_object ()));
    return 0;
}

//  GET .../conversations/{conv}?after=SEQ&limit=N
static void s_get (req_t *r)
{
    ah_conversation_t c;
    int64_t after = 0, limit = API_LOG_PAGE;
    if (api_query_int (r, "after", 0, INT64_MAX, &after)
    ||  api_query_int (r, "limit", 1, AH_CONV_LOG_PAGE_MAX, &limit) || s_find (r, &c))
        return;
    json_t *entries = json_array ();
    int n = ah_store_conversation_log (r->api->store, c.id, after, (int) limit, s_entry, entries);
    if (n < 0) {
        json_decref (entries);
        api_respond_error (r, 500, "cannot read the conversation's log");
        return;
    }
    json_t *body = s_conv_json (&c);
    json_t *last = n > 0 ? json_object_get (json_array_get (entries, (size_t) n - 1), "seq") : NULL;
    //  The next page starts after the last entry given; null: this was the last.
    json_object_set_new (body, "next_after", n == limit && last ? json_incref (last) : json_null ());
    json_object_set_new (body, "entries", entries);
    api_respond (r, 200, body);
}

//  --------------------------------------------------------------------
//  A prompt and its stream

static void s_prompt_free (req_t *r)
{
    prompt_t *p = r->ext;
    if (!p)
        return;
    for (prompt_t **pp = &r->api->prompts; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    ah_api_events_wake_cancel (r->api->events, r);
    ah_buf_free (&p->buf);
    free (p->text);
    free (p);
    r->ext = NULL;
}

static int s_prompt_produce (req_t *r)
{
    prompt_t *p = r->ext;
    if (p->dead)
        return -1;
    size_t n = ah_buf_size (&p->buf);
    if (n > API_CHUNK)
        n = API_CHUNK;
    if (n && api_out (r, ah_buf_head (&p->buf), n))
        return -1;
    ah_buf_consume (&p->buf, n);
    return p->ended && ah_buf_size (&p->buf) == 0 ? 0 : 1;
}

static const ext_ops_t s_prompt_ops = { .free = s_prompt_free, .produce = s_prompt_produce };

//  One server-sent event: "id: SEQ", "event: KIND", "data: JSON".
static void s_event (prompt_t *p, int64_t seq, const char *kind, json_t *data)
{
    char *text = json_dumps (data, JSON_COMPACT);
    json_decref (data);
    if (!text || ah_buf_size (&p->buf) > API_PROMPT_BACKLOG) {
        p->dead = true;
        ah_warn (AREA, "a prompt's stream fell %u bytes behind: closed (the log keeps the turn)", API_PROMPT_BACKLOG);
    }
    else {
        if (seq > 0)
            ah_buf_appendf (&p->buf, "id: %lld\n", (long long) seq);
        ah_buf_appendf (&p->buf, "event: %s\ndata: ", kind);
        ah_buf_append (&p->buf, text, strlen (text));
        ah_buf_append (&p->buf, "\n\n", 2);
    }
    free (text);
    api_want_write (p->r);
}

void api_conversations_event (api_t *api, ah_msg_t *msg)
{
    int64_t turn = ah_msg_int (msg, "turn", 0);
    prompt_t *p = api->prompts;
    while (p && !(p->streaming && p->turn == turn))
        p = p->next;
    if (!p)
        return;                     //  its client left: the log has it
    const char *kind = ah_msg_str (msg, "kind"), *who = ah_msg_str (msg, "who"), *body = ah_msg_str (msg, "body");
    int64_t seq = ah_msg_int (msg, "seq", 0);
    json_t *b = body ? json_loads (body, 0, NULL) : NULL;
    if (!kind || !ah_conv_kind_valid (kind))
        kind = "error";
    s_event (p, seq, kind, json_pack ("{s:I s:s s:s s:o}", "seq", (json_int_t) seq, "kind", kind,
                                       "who", who ? who : "?", "body", b ? b : json_object ()));
    if (ah_msg_bool (msg, "end", false)) {
        p->ended = true;
        api_want_write (p->r);
    }
}

static void s_accepted (req_t *r, ah_msg_t *reply)
{
    prompt_t *p = r->ext;
    api_record (r, true, NULL);
    api_activity (r->api, r->agent_id, "prompt");
    p->streaming = true;
    api_respond_stream (r, 200, "text/event-stream", -2);
    s_event (p, 0, "turn", json_pack ("{s:s s:I}", "conversation", r->params [1],
                                     "prompt_seq", (json_int_t) ah_msg_int (reply, "seq", 0)));
}

static void s_send (req_t *r)
{
    prompt_t *p = r->ext;
    ah_msg_t *msg = ah_msg_new ("CONV_PROMPT");
    ah_msg_set_str (msg, "agent_id", r->agent_id);
    ah_msg_set_str (msg, "conv", r->params [1]);
    ah_msg_set_bin (msg, "text", p->text, p->text_size);
    ah_msg_set_strf (msg, "who", "api:%s", r->who.token_name);
    if (p->woke)
        ah_msg_set_bool (msg, "woke", true);
    free (p->text);
    p->text = NULL;
    api_ask (r, "conversations", &msg, s_accepted);
    p->turn = r->req_id;
}

static void s_woken (void *ctx, int status, const char *error)
{
    req_t *r = ctx;
    if (status) {
        api_record (r, false, error);
        api_respond_error (r, status, "%s", error);
    }
    else
        s_send (r);
}

//  POST .../conversations/{conv}/prompt {"text": "..."}
static void s_prompt (req_t *r)
{
    ah_conversation_t c;
    json_t *obj = s_find (r, &c) ? NULL : api_body_object (r, false);
    if (!obj)
        return;
    json_t *t = json_object_get (obj, "text");
    size_t size = json_string_length (t);
    r->kind = "conversation.prompt";
    //  The audit keeps a prompt's size, never its text.
    r->bytes = (int64_t) size;
    r->has_bytes = true;
    snprintf (r->detail, sizeof r->detail, "conversation %s, %zu bytes", c.id, size);
    const char *why = !t ? "the body needs \"text\" (a string)"
                    : size == 0 ? "\"text\" is empty" : NULL;
    if (why || size > AH_CONV_PROMPT_MAX) {
        json_decref (obj);
        char text [160];
        if (!why)
            snprintf (text, sizeof text, "\"text\" is %zu bytes; a prompt is at most %u bytes", size, AH_CONV_PROMPT_MAX);
        api_record (r, false, why ? why : text);
        api_respond_error (r, why ? 400 : 413, "%s", why ? why : text);
        return;
    }
    prompt_t *p = calloc (1, sizeof *p);
    if (p)
        p->text = malloc (size);
    if (!p || !p->text) {
        json_decref (obj);
        free (p);
        api_respond_error (r, 503, "out of memory");
        return;
    }
    memcpy (p->text, json_string_value (t), size);
    p->text_size = size;
    json_decref (obj);
    p->r = r;
    p->next = r->api->prompts;
    r->api->prompts = p;
    r->ext = p;
    r->ext_ops = &s_prompt_ops;
    char text [300];
    int rc = ah_api_events_wake (r->api->events, r->agent_id, r, s_woken, AH_API_WAKE_TIMEOUT_S, text, sizeof text);
    p->woke = rc == 1;              //  s_woken comes back once it runs
    if (rc == 0)
        s_send (r);
    else if (rc != 1) {
        api_record (r, false, text);
        api_respond_error (r, rc, "%s", text);
    }
}

static void s_cancelled (req_t *r, ah_msg_t *reply)
{
    api_record (r, true, NULL);
    api_respond (r, 202, json_pack ("{s:s s:b}", "id", r->params [1], "cancelling", 1));
}

static void s_cancel (req_t *r)
{
    ah_conversation_t c;
    json_t *obj = s_find (r, &c) ? NULL : api_body_object (r, true);
    if (!obj)
        return;
    json_decref (obj);
    ah_msg_t *msg = ah_msg_new ("CONV_CANCEL");
    ah_msg_set_str (msg, "agent_id", r->agent_id);
    ah_msg_set_str (msg, "conv", c.id);
    r->kind = "conversation.cancel";
    snprintf (r->detail, sizeof r->detail, "conversation %s", c.id);
    api_ask (r, "conversations", &msg, s_cancelled);
}

static void s_answered (req_t *r, ah_msg_t *reply)
{
    api_record (r, true, NULL);
    api_respond (r, 200, json_pack ("{s:s s:s s:b}", "id", r->params [1], "request", r->params [2], "answered", 1));
}

//  POST .../conversations/{conv}/permissions/{request} {"option": "..."}
static void s_answer (req_t *r)
{
    ah_conversation_t c;
    json_t *obj = s_find (r, &c) ? NULL : api_body_object (r, false);
    if (!obj)
        return;
    const char *option = json_string_value (json_object_get (obj, "option"));
    char *end = NULL;
    long long request = strtoll (r->params [2], &end, 10);
    if (!option || !*option || !end || *end || request <= 0 || end == r->params [2]) {
        bool no_option = !option || !*option;  //  (option is obj's: read before it goes)
        json_decref (obj);
        api_respond_error (r, 400, no_option ? "the body needs \"option\" (an optionId the harness offered)"
                           : "a permission request is the seq of its permission entry (an integer > 0)");
        return;
    }
    ah_msg_t *msg = ah_msg_new ("CONV_PERMISSION");
    ah_msg_set_str (msg, "agent_id", r->agent_id);
    ah_msg_set_str (msg, "conv", c.id);
    ah_msg_set_int (msg, "request", request);
    ah_msg_set_str (msg, "option", option);
    ah_msg_set_strf (msg, "who", "api:%s", r->who.token_name);
    r->kind = "conversation.permission";
    snprintf (r->detail, sizeof r->detail, "conversation %s, permission %lld: %.64s", c.id, request, option);
    json_decref (obj);
    api_ask (r, "conversations", &msg, s_answered);
}

const route_t api_conversation_routes [] = {
    { M_POST, "/api/v1/agents/{agent}/conversations", s_create, R_BODY, "", api_no_body },
    { M_GET, "/api/v1/agents/{agent}/conversations", s_list, 0, "", NULL },
    { M_GET, "/api/v1/agents/{agent}/conversations/{conv}", s_get, 0, "after limit", NULL },
    { M_POST, "/api/v1/agents/{agent}/conversations/{conv}/prompt", s_prompt, R_BODY, "", s_prompt_fields },
    { M_POST, "/api/v1/agents/{agent}/conversations/{conv}/cancel", s_cancel, R_BODY, "", api_no_body },
    { M_POST, "/api/v1/agents/{agent}/conversations/{conv}/permissions/{request}", s_answer, R_BODY, "",
      s_answer_fields },
    { 0 }
};
