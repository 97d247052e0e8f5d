/*  store/conversations.c: conversations and their logs (see
    conversations.h). An entry's seq is the next after the conversation's
    highest, chosen inside the INSERT itself, so two writers never give
    the same number (SQLite runs one write at a time; the primary key
    would refuse a repeat anyway).                                      */
#include "store/conversations.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>

//  The log's kinds: docs/conversations.md "The log" says what each holds.
static const char *s_kinds [] = {
    "prompt",               //  what a caller asked (its text)
    "update",               //  a session/update of the harness's (message and thought chunks, plans)
    "tool_call",            //  a tool call and its updates (kind, paths; as the harness said them)
    "permission",           //  a session/request_permission: its options
    "permission_answer",    //  the option chosen, and who chose (a caller, the Lua rule, a cancel)
    "harness_call",         //  an fs/* or terminal/* request of the harness's, and our answer's outcome
    "stop",                 //  a turn's end: its stopReason
    "error",                //  what went wrong: the harness's, or ours about it (bad line, exit, timeout)
    "notice",               //  the server's own: "Starting the sandbox…", the context reset
};

static const char *s_turn_states [] = { "idle", "running", "cancelling" };

static bool s_in (const char *word, const char **list, size_t n)
{
    for (size_t i = 0; word && i < n; i++)
        if (strcmp (word, list [i]) == 0)
            return true;
    return false;
}

bool ah_conv_kind_valid (const char *kind)
{
    return s_in (kind, s_kinds, sizeof s_kinds / sizeof s_kinds [0]);
}

bool ah_conv_turn_state_valid (const char *state)
{
    return s_in (state, s_turn_states, sizeof s_turn_states / sizeof s_turn_states [0]);
}

static int s_random_id (char *id)
{
    uint8_t bytes [AH_CONV_ID_LEN / 2];
    size_t got = 0;
    while (got < sizeof bytes) {
        ssize_t r = getrandom (bytes + got, sizeof bytes - got, 0);
        if (r <= 0)
            return -1;
        got += (size_t) r;
    }
    for (size_t i = 0; i < sizeof bytes; i++)
        snprintf (id + 2 * i, 3, "%02x", bytes [i]);
    return 0;
}

int ah_store_conversation_create (ah_store_t *self, const char *agent_id, int64_t now, char *id)
{
    id [0] = 0;
    char made [AH_CONV_ID_LEN + 1];
    if (s_random_id (made) < 0) {
        ah_store_fail (self, "cannot make a conversation id: no entropy (getrandom failed)");
        return -1;
    }
    sqlite3_stmt *st = ah_store_prepare (self,
        "INSERT INTO conversations (id, agent_id, tenant, created_at, last_activity_at)"
        " SELECT :id, id, tenant, :now, :now FROM agents WHERE id = :agent");
    if (!st
    ||  ah_store_bind_text (st, ":id", made)
    ||  ah_store_bind_text (st, ":agent", agent_id)
    ||  ah_store_bind_int64 (st, ":now", now))
        return -1;
    int rc = ah_store_step (self, st);
    sqlite3_reset (st);
    if (rc != SQLITE_DONE)
        return -1;
    if (ah_store_changes (self) == 0)
        return 0;
    memcpy (id, made, sizeof made);
    return 1;
}

#define CONV_COLUMNS "id, agent_id, tenant, acp_session_id, turn_state, created_at, last_activity_at"

//  Column col as text into buf ("" for NULL), cut to fit.
static void s_text (sqlite3_stmt *st, int col, char *buf, size_t size)
{
    const char *text = (const char *) sqlite3_column_text (st, col);
    snprintf (buf, size, "%s", text ? text : "");
}

static void s_row (sqlite3_stmt *st, ah_conversation_t *c)
{
    memset (c, 0, sizeof *c);
    s_text (st, 0, c->id, sizeof c->id);
    s_text (st, 1, c->agent_id, sizeof c->agent_id);
    s_text (st, 2, c->tenant, sizeof c->tenant);
    s_text (st, 3, c->acp_session_id, sizeof c->acp_session_id);
    s_text (st, 4, c->turn_state, sizeof c->turn_state);
    c->created_at = sqlite3_column_int64 (st, 5);
    c->last_activity_at = sqlite3_column_int64 (st, 6);
}

int ah_store_conversation_get (ah_store_t *self, const char *id, const char *tenant,
                               ah_conversation_t *conversation)
{
    sqlite3_stmt *st = ah_store_prepare (self,
        "SELECT " CONV_COLUMNS " FROM conversations WHERE id = :id"
        " AND (:tenant IS NULL OR :tenant = '' OR tenant = :tenant)");
    if (!st || ah_store_bind_text (st, ":id", id) || ah_store_bind_text (st, ":tenant", tenant))
        return -1;
    int rc = ah_store_step (self, st);
    if (rc == SQLITE_ROW)
        s_row (st, conversation);
    sqlite3_reset (st);
    return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
}

int ah_store_conversations_list (ah_store_t *self, const char *agent_id, const char *tenant,
                                 ah_conv_fn *fn, void *ud)
{
    sqlite3_stmt *st = ah_store_prepare (self,
        "SELECT " CONV_COLUMNS " FROM conversations WHERE agent_id = :agent"
        " AND (:tenant IS NULL OR :tenant = '' OR tenant = :tenant)"
        " ORDER BY created_at, id");
    if (!st || ah_store_bind_text (st, ":agent", agent_id) || ah_store_bind_text (st, ":tenant", tenant))
        return -1;
    int count = 0, rc;
    while ((rc = ah_store_step (self, st)) == SQLITE_ROW) {
        ah_conversation_t c;
        s_row (st, &c);
        count++;
        if (fn (ud, &c))
            break;
    }
    sqlite3_reset (st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? count : -1;
}

//  One UPDATE of a conversation by id: 1 / 0 none / -1.
static int s_update (ah_store_t *self, sqlite3_stmt *st)
{
    int rc = ah_store_step (self, st);
    sqlite3_reset (st);
    if (rc != SQLITE_DONE)
        return -1;
    return ah_store_changes (self) > 0 ? 1 : 0;
}

int ah_store_conversation_set_session (ah_store_t *self, const char *id, const char *acp_session_id)
{
    if (acp_session_id && (strlen (acp_session_id) == 0 || strlen (acp_session_id) > AH_CONV_SESSION_MAX)) {
        ah_store_fail (self, "conversation %.16s: an ACP session id of %zu bytes (1 to %d)",
                       id, strlen (acp_session_id), AH_CONV_SESSION_MAX);
        return -1;
    }
    sqlite3_stmt *st = ah_store_prepare (self,
        "UPDATE conversations SET acp_session_id = :session WHERE id = :id");
    if (!st || ah_store_bind_text (st, ":id", id) || ah_store_bind_text (st, ":session", acp_session_id))
        return -1;
    return s_update (self, st);
}

int ah_store_conversation_set_turn (ah_store_t *self, const char *id, const char *state, int64_t now)
{
    if (!ah_conv_turn_state_valid (state)) {
        ah_store_fail (self, "conversation %.16s: '%.32s' is not a turn state", id, state ? state : "");
        return -1;
    }
    sqlite3_stmt *st = ah_store_prepare (self,
        "UPDATE conversations SET turn_state = :state,"
        " last_activity_at = max(last_activity_at, :now) WHERE id = :id");
    if (!st || ah_store_bind_text (st, ":id", id) || ah_store_bind_text (st, ":state", state)
    ||  ah_store_bind_int64 (st, ":now", now))
        return -1;
    return s_update (self, st);
}

int64_t ah_store_conversation_append (ah_store_t *self, const char *id, const char *kind,
                                      const char *body, size_t body_size, const char *who, int64_t now)
{
    if (!ah_conv_kind_valid (kind)) {
        ah_store_fail (self, "conversation %.16s: '%.32s' is not a log entry kind", id, kind ? kind : "");
        return -1;
    }
    if (!body || body_size == 0 || body_size > AH_CONV_BODY_MAX || memchr (body, 0, body_size)) {
        ah_store_fail (self, "conversation %.16s: an entry's body of %zu bytes (%s; a JSON object of 2 to %u, no NUL)",
                       id, body ? body_size : 0, kind, AH_CONV_BODY_MAX);
        return -1;
    }
    size_t who_len = who ? strlen (who) : 0;
    if (who_len == 0 || who_len > AH_CONV_WHO_MAX) {
        ah_store_fail (self, "conversation %.16s: an entry's author of %zu bytes (1 to %d)",
                       id, who_len, AH_CONV_WHO_MAX);
        return -1;
    }
    sqlite3_stmt *st = ah_store_prepare (self,
        "INSERT INTO conversation_log (conversation_id, seq, at, kind, body, who)"
        " SELECT id, coalesce ((SELECT max(seq) FROM conversation_log WHERE conversation_id = :id), 0) + 1,"
        " :at, :kind, :body, :who FROM conversations WHERE id = :id"
        " RETURNING seq");
    if (!st
    ||  ah_store_bind_text (st, ":id", id)
    ||  ah_store_bind_int64 (st, ":at", now)
    ||  ah_store_bind_text (st, ":kind", kind)
    ||  ah_store_bind_text (st, ":who", who))
        return -1;
    //  The body with its length: it need not end in a NUL.
    int index = sqlite3_bind_parameter_index (st, ":body");
    if (index == 0 || sqlite3_bind_text (st, index, body, (int) body_size, SQLITE_TRANSIENT) != SQLITE_OK) {
        ah_store_fail (self, "conversation %.16s: cannot bind the entry's body", id);
        sqlite3_reset (st);
        return -1;
    }
    int rc = ah_store_step (self, st);
    int64_t seq = rc == SQLITE_ROW ? sqlite3_column_int64 (st, 0) : rc == SQLITE_DONE ? 0 : -1;
    //  RETURNING's statement finishes its write at the step after the row.
    if (rc == SQLITE_ROW && ah_store_step (self, st) != SQLITE_DONE)
        seq = -1;
    sqlite3_reset (st);
    return seq;
}

int ah_store_conversation_log (ah_store_t *self, const char *id, int64_t after, int limit,
                               ah_conv_entry_fn *fn, void *ud)
{
    if (limit < 1 || limit > AH_CONV_LOG_PAGE_MAX)
        limit = AH_CONV_LOG_PAGE_MAX;
    sqlite3_stmt *st = ah_store_prepare (self,
        "SELECT seq, at, kind, body, who FROM conversation_log"
        " WHERE conversation_id = :id AND seq > :after ORDER BY seq LIMIT :limit");
    if (!st
    ||  ah_store_bind_text (st, ":id", id)
    ||  ah_store_bind_int64 (st, ":after", after < 0 ? 0 : after)
    ||  ah_store_bind_int64 (st, ":limit", limit))
        return -1;
    int count = 0, rc;
    while ((rc = ah_store_step (self, st)) == SQLITE_ROW) {
        ah_conv_entry_t e = {
            .seq = sqlite3_column_int64 (st, 0),
            .at = sqlite3_column_int64 (st, 1),
            .kind = (const char *) sqlite3_column_text (st, 2),
            .body = (const char *) sqlite3_column_text (st, 3),
            .body_size = (size_t) sqlite3_column_bytes (st, 3),
            .who = (const char *) sqlite3_column_text (st, 4),
        };
        count++;
        if (fn (ud, &e))
            break;
    }
    sqlite3_reset (st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? count : -1;
}
