/*  proto/acp.c: the ACP client's reader, parser, builders and id tables
    (see acp.h). Lines are parsed with jansson, duplicate keys refused (a
    second "id" must not change what an answer answers).               */
#include "proto/acp.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  A buffer that held a long line is given back once the line is done,
//  so a harness that sent one 4 MiB line does not keep 4 MiB forever.
#define KEEP_CAP (64u << 10)


//  ---------------------------------------------------------------------
//  The reader

void ah_acp_reader_init (ah_acp_reader_t *self, size_t max)
{
    memset (self, 0, sizeof *self);
    ah_buf_init (&self->line, 0);
    self->max = max ? max : AH_ACP_LINE_MAX;
}

void ah_acp_reader_clear (ah_acp_reader_t *self)
{
    ah_buf_free (&self->line);
    self->discarding = false;
    self->dropped = 0;
}

static void s_line_done (ah_acp_reader_t *self)
{
    if (self->line.cap > KEEP_CAP)
        ah_buf_free (&self->line);
    else
        ah_buf_clear (&self->line);
}

static bool s_blank (const char *line, size_t size)
{
    for (size_t i = 0; i < size; i++)
        if (line [i] != ' ' && line [i] != '\t')
            return false;
    return true;
}

//  One whole line (its "\n" gone): the "\r" of a CRLF goes too.
static void s_deliver (ah_acp_reader_t *self, const char *line, size_t size,
                       ah_acp_line_fn *fn, void *ud)
{
    self->lines++;
    if (size > 0 && line [size - 1] == '\r')
        size--;
    if (!s_blank (line, size))
        fn (ud, line, size, NULL);
}

static void s_report (ah_acp_line_fn *fn, void *ud, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void s_report (ah_acp_line_fn *fn, void *ud, const char *fmt, ...)
{
    char why [AH_ACP_WHY_MAX];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (why, sizeof why, fmt, ap);
    va_end (ap);
    fn (ud, NULL, 0, why);
}

int ah_acp_reader_feed (ah_acp_reader_t *self, const void *data, size_t size,
                        ah_acp_line_fn *fn, void *ud)
{
    const char *p = data, *end = p + size;
    int rc = 0;
    while (p < end) {
        const char *nl = memchr (p, '\n', (size_t) (end - p));
        size_t n = nl ? (size_t) (nl - p) : (size_t) (end - p);
        const char *next = nl ? nl + 1 : end;
        if (self->discarding) {
            //  The rest of a line already reported: dropped unseen.
            self->dropped += n;
            if (nl) {
                self->discarding = false;
                self->dropped = 0;
                self->lines++;
            }
            p = next;
            continue;
        }
        size_t have = ah_buf_size (&self->line);
        if (n > self->max - have) {
            //  Past the bound: reported now (the line may never end), its
            //  bytes dropped as they come.
            s_report (fn, ud, "line %" PRIu64 " is longer than %zu bytes: dropped up to its newline",
                      self->lines + 1, self->max);
            s_line_done (self);
            if (nl)
                self->lines++;
            else {
                self->discarding = true;
                self->dropped = have + n;
            }
            p = next;
            continue;
        }
        if (!nl) {
            if (ah_buf_append (&self->line, p, n) < 0) {
                s_report (fn, ud, "line %" PRIu64 ": out of memory, dropped up to its newline",
                          self->lines + 1);
                s_line_done (self);
                self->discarding = true;
                rc = -1;
            }
            p = next;
            continue;
        }
        if (have == 0)
            s_deliver (self, p, n, fn, ud);     //  whole in this chunk: no copy
        else
        if (ah_buf_append (&self->line, p, n) < 0) {
            self->lines++;
            s_report (fn, ud, "line %" PRIu64 ": out of memory, dropped", self->lines);
            rc = -1;
        }
        else
            s_deliver (self, (const char *) ah_buf_head (&self->line), ah_buf_size (&self->line), fn, ud);
        if (have > 0)
            s_line_done (self);
        p = next;
    }
    return rc;
}

void ah_acp_reader_eof (ah_acp_reader_t *self, ah_acp_line_fn *fn, void *ud)
{
    size_t have = ah_buf_size (&self->line);
    if (!self->discarding && have > 0
    &&  !s_blank ((const char *) ah_buf_head (&self->line), have))
        s_report (fn, ud, "the stream ended inside line %" PRIu64 ": %zu bytes without a newline dropped",
                  self->lines + 1, have);
    s_line_done (self);
    self->discarding = false;
    self->dropped = 0;
}


//  ---------------------------------------------------------------------
//  The parser

static const char *s_type_name (const json_t *value)
{
    switch (json_typeof (value)) {
        case JSON_OBJECT:  return "an object";
        case JSON_ARRAY:   return "an array";
        case JSON_STRING:  return "a string";
        case JSON_INTEGER: return "an integer";
        case JSON_REAL:    return "a number with a fraction or exponent";
        case JSON_TRUE:    return "true";
        case JSON_FALSE:   return "false";
        case JSON_NULL:    return "null";
    }
    return "unknown";
}

//  Sets why (printable ASCII only: it may quote the harness's bytes and
//  goes to logs and the conversation's log) and the code to answer with.
static int s_fail (ah_acp_msg_t *msg, char *why, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int s_fail (ah_acp_msg_t *msg, char *why, int code, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (why, AH_ACP_WHY_MAX, fmt, ap);
    va_end (ap);
    for (char *c = why; *c; c++)
        if ((unsigned char) *c < 0x20 || (unsigned char) *c >= 0x7f)
            *c = '?';
    msg->reply_code = code;
    return -1;
}

//  The id's verdict: NULL when it may stand (integer, a short string, and
//  null where null_ok), else what is wrong with it.
static const char *s_bad_id (const json_t *id, bool null_ok, char *buf, size_t size)
{
    if (json_is_integer (id))
        return NULL;
    if (json_is_string (id)) {
        if (json_string_length (id) <= AH_ACP_ID_MAX)
            return NULL;
        snprintf (buf, size, "the id is a string of %zu bytes (at most %d)",
                  json_string_length (id), AH_ACP_ID_MAX);
        return buf;
    }
    if (json_is_null (id) && null_ok)
        return NULL;
    snprintf (buf, size, "the id is %s, not an integer or a string", s_type_name (id));
    return buf;
}

//  An upper bound of the JSON values in line: every value but the first
//  of a container follows a comma, and the first follows its bracket;
//  commas and brackets inside strings do not count.
static size_t s_values (const char *line, size_t size)
{
    size_t count = 1;
    bool in_string = false;
    for (size_t i = 0; i < size; i++) {
        char c = line [i];
        if (in_string) {
            if (c == '\\')
                i++;
            else
            if (c == '"')
                in_string = false;
        }
        else
        if (c == '"')
            in_string = true;
        else
        if (c == ',' || c == '[' || c == '{')
            count++;
    }
    return count;
}

int ah_acp_parse (const char *line, size_t size, ah_acp_msg_t *msg, char *why)
{
    memset (msg, 0, sizeof *msg);
    why [0] = 0;
    size_t values = s_values (line, size);
    if (values > AH_ACP_VALUES_MAX)
        return s_fail (msg, why, AH_ACP_INVALID_REQUEST, "more than %d JSON values in one message (%zu)",
                       AH_ACP_VALUES_MAX, values);
    json_error_t jerr;
    json_t *root = json_loadb (line, size, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!root) {
        if (json_error_code (&jerr) == json_error_duplicate_key)
            return s_fail (msg, why, AH_ACP_INVALID_REQUEST,
                           "a key is given twice (%s) at byte %d", jerr.text, jerr.position);
        return s_fail (msg, why, AH_ACP_PARSE_ERROR, "not JSON: %s (at byte %d)",
                       jerr.text, jerr.position);
    }
    msg->root = root;
    if (!json_is_object (root))
        return s_fail (msg, why, AH_ACP_INVALID_REQUEST,
                       "a message is a JSON object; this is %s", s_type_name (root));
    json_t *version = json_object_get (root, "jsonrpc");
    if (!version)
        return s_fail (msg, why, AH_ACP_INVALID_REQUEST, "\"jsonrpc\": \"2.0\" is missing");
    if (!json_is_string (version) || strcmp (json_string_value (version), "2.0") != 0
    ||  json_string_length (version) != 3)
        return s_fail (msg, why, AH_ACP_INVALID_REQUEST, "\"jsonrpc\" is %s, not \"2.0\"",
                       json_is_string (version) ? "another string" : s_type_name (version));

    json_t *id = json_object_get (root, "id");
    json_t *method = json_object_get (root, "method");
    json_t *result = json_object_get (root, "result");
    json_t *error = json_object_get (root, "error");
    char idwhy [AH_ACP_WHY_MAX];
    if (method) {
        const char *bad = id ? s_bad_id (id, false, idwhy, sizeof idwhy) : NULL;
        if (bad)
            return s_fail (msg, why, AH_ACP_INVALID_REQUEST, "%s", bad);
        //  From here a request's failure can be answered by its id.
        msg->id = id;
        msg->reply = id != NULL;
        if (!json_is_string (method))
            return s_fail (msg, why, AH_ACP_INVALID_REQUEST, "\"method\" is %s, not a string",
                           s_type_name (method));
        size_t len = json_string_length (method);
        if (len == 0 || len > AH_ACP_METHOD_MAX)
            return s_fail (msg, why, AH_ACP_INVALID_REQUEST,
                           "\"method\" is %zu bytes long (1 to %d)", len, AH_ACP_METHOD_MAX);
        if (result || error)
            return s_fail (msg, why, AH_ACP_INVALID_REQUEST,
                           "a message with a \"method\" has no \"%s\"", result ? "result" : "error");
        json_t *params = json_object_get (root, "params");
        if (params && !json_is_object (params))
            return s_fail (msg, why, AH_ACP_INVALID_PARAMS, "\"params\" is %s, not an object",
                           s_type_name (params));
        msg->kind = id ? AH_ACP_REQUEST : AH_ACP_NOTIFICATION;
        msg->method = json_string_value (method);
        msg->params = params;
        msg->reply = false;
        return 0;
    }
    //  An answer to one of ours: never answered back.
    if (!id)
        return s_fail (msg, why, AH_ACP_INVALID_REQUEST, "neither a \"method\" nor an \"id\"");
    if (result && error)
        return s_fail (msg, why, AH_ACP_INVALID_REQUEST, "both a \"result\" and an \"error\"");
    if (!result && !error)
        return s_fail (msg, why, AH_ACP_INVALID_REQUEST,
                       "an answer (no \"method\") with neither a \"result\" nor an \"error\"");
    //  JSON-RPC answers null when it could not read the request's id: only
    //  an error may.
    const char *bad = s_bad_id (id, error != NULL, idwhy, sizeof idwhy);
    if (bad)
        return s_fail (msg, why, AH_ACP_INVALID_REQUEST, "%s", bad);
    if (result) {
        msg->kind = AH_ACP_RESULT;
        msg->id = id;
        msg->result = result;
        return 0;
    }
    if (!json_is_object (error))
        return s_fail (msg, why, AH_ACP_INVALID_REQUEST, "\"error\" is %s, not an object",
                       s_type_name (error));
    json_t *code = json_object_get (error, "code");
    json_t *message = json_object_get (error, "message");
    if (!json_is_integer (code))
        return s_fail (msg, why, AH_ACP_INVALID_REQUEST, "the error's \"code\" is %s, not an integer",
                       code ? s_type_name (code) : "missing");
    if (!json_is_string (message))
        return s_fail (msg, why, AH_ACP_INVALID_REQUEST, "the error's \"message\" is %s, not a string",
                       message ? s_type_name (message) : "missing");
    msg->kind = AH_ACP_ERROR;
    msg->id = json_is_null (id) ? NULL : id;
    msg->code = json_integer_value (code);
    msg->message = json_string_value (message);
    msg->data = json_object_get (error, "data");
    return 0;
}

void ah_acp_msg_clear (ah_acp_msg_t *msg)
{
    json_decref (msg->root);
    memset (msg, 0, sizeof *msg);
}

const char *ah_acp_id_text (const json_t *id, char *buf, size_t size)
{
    if (size == 0)
        return buf;
    if (json_is_integer (id))
        snprintf (buf, size, "%" PRId64, (int64_t) json_integer_value (id));
    else
    if (json_is_string (id)) {
        //  Quoted, cut to fit, anything unprintable as '?'.
        const char *s = json_string_value (id);
        size_t len = json_string_length (id), at = 0;
        buf [at++] = '"';
        for (size_t i = 0; i < len && at + 2 < size; i++)
            buf [at++] = (unsigned char) s [i] < 0x20 || (unsigned char) s [i] >= 0x7f ? '?' : s [i];
        if (at + 1 < size)
            buf [at++] = '"';
        buf [at < size ? at : size - 1] = 0;
    }
    else
        snprintf (buf, size, "null");
    return buf;
}


//  ---------------------------------------------------------------------
//  The builders

//  root as one compact line with its "\n"; root is taken over.
static char *s_line (json_t *root)
{
    if (!root)
        return NULL;
    char *text = json_dumps (root, JSON_COMPACT);
    json_decref (root);
    if (!text)
        return NULL;
    size_t n = strlen (text);
    char *line = realloc (text, n + 2);
    if (!line) {
        free (text);
        return NULL;
    }
    line [n] = '\n';
    line [n + 1] = 0;
    return line;
}

//  {"jsonrpc": "2.0", "method": method, "params": params}, the id added
//  by the caller; params taken over (jansson's _new setters take their
//  value even when they fail).
static json_t *s_call (const char *method, json_t *params)
{
    json_t *root = method ? json_pack ("{s:s, s:s}", "jsonrpc", "2.0", "method", method) : NULL;
    if (!root) {
        json_decref (params);
        return NULL;
    }
    if (params && json_object_set_new (root, "params", params) < 0) {
        json_decref (root);
        return NULL;
    }
    return root;
}

char *ah_acp_request (int64_t id, const char *method, json_t *params)
{
    json_t *root = s_call (method, params);
    if (root && json_object_set_new (root, "id", json_integer (id)) < 0) {
        json_decref (root);
        return NULL;
    }
    return s_line (root);
}

char *ah_acp_notification (const char *method, json_t *params)
{
    return s_line (s_call (method, params));
}

char *ah_acp_initialize (int64_t id, const ah_acp_client_t *client)
{
    json_t *params = json_pack ("{s:i, s:{s:{s:b, s:b}, s:b}}",
        "protocolVersion", AH_ACP_PROTOCOL_VERSION,
        "clientCapabilities",
            "fs", "readTextFile", client->fs_read, "writeTextFile", client->fs_write,
            "terminal", client->terminal);
    if (params && client->name && client->version) {
        json_t *info = json_pack ("{s:s, s:s}", "name", client->name, "version", client->version);
        if (!info || json_object_set_new (params, "clientInfo", info) < 0) {
            json_decref (params);
            params = NULL;
        }
    }
    return params ? ah_acp_request (id, "initialize", params) : NULL;
}

//  {"sessionId": session (when given), "cwd": cwd, "mcpServers": []}
static json_t *s_session_params (const char *session, const char *cwd)
{
    json_t *params = json_pack ("{s:s, s:[]}", "cwd", cwd ? cwd : "", "mcpServers");
    if (params && session && json_object_set_new (params, "sessionId", json_string (session)) < 0) {
        json_decref (params);
        return NULL;
    }
    return params;
}

char *ah_acp_session_new (int64_t id, const char *cwd)
{
    json_t *params = s_session_params (NULL, cwd);
    return params ? ah_acp_request (id, "session/new", params) : NULL;
}

char *ah_acp_session_load (int64_t id, const char *session, const char *cwd)
{
    json_t *params = session ? s_session_params (session, cwd) : NULL;
    return params ? ah_acp_request (id, "session/load", params) : NULL;
}

char *ah_acp_session_resume (int64_t id, const char *session, const char *cwd)
{
    json_t *params = session ? s_session_params (session, cwd) : NULL;
    return params ? ah_acp_request (id, "session/resume", params) : NULL;
}

char *ah_acp_session_prompt (int64_t id, const char *session, const char *text, size_t size)
{
    //  No NUL: our reader refuses \u0000, so a harness should never see one.
    json_t *block = text && !memchr (text, 0, size) ? json_stringn (text, size) : NULL;
    if (!block || !session) {
        json_decref (block);
        return NULL;
    }
    json_t *params = json_pack ("{s:s, s:[{s:s, s:o}]}", "sessionId", session,
                                "prompt", "type", "text", "text", block);
    return params ? ah_acp_request (id, "session/prompt", params) : NULL;
}

char *ah_acp_session_cancel (const char *session)
{
    json_t *params = session ? json_pack ("{s:s}", "sessionId", session) : NULL;
    return params ? ah_acp_notification ("session/cancel", params) : NULL;
}

//  {"jsonrpc": "2.0", "id": id or null}
static json_t *s_answer (const json_t *id)
{
    json_t *root = json_pack ("{s:s}", "jsonrpc", "2.0");
    if (root && json_object_set_new (root, "id", id ? json_deep_copy (id) : json_null ()) < 0) {
        json_decref (root);
        return NULL;
    }
    return root;
}

char *ah_acp_result (const json_t *id, json_t *result)
{
    json_t *root = result ? s_answer (id) : NULL;
    if (!root || json_object_set_new (root, "result", result) < 0) {
        json_decref (root);
        if (!root)
            json_decref (result);
        return NULL;
    }
    return s_line (root);
}

char *ah_acp_error (const json_t *id, int code, const char *message)
{
    json_t *root = s_answer (id);
    json_t *error = json_pack ("{s:i, s:s}", "code", code, "message", message ? message : "");
    if (!root || !error || json_object_set_new (root, "error", error) < 0) {
        json_decref (root);
        if (!root)
            json_decref (error);
        return NULL;
    }
    return s_line (root);
}


//  ---------------------------------------------------------------------
//  The pending table

const char *ah_acp_method_name (ah_acp_method_t method)
{
    switch (method) {
        case AH_ACP_M_INITIALIZE:     return "initialize";
        case AH_ACP_M_SESSION_NEW:    return "session/new";
        case AH_ACP_M_SESSION_LOAD:   return "session/load";
        case AH_ACP_M_SESSION_RESUME: return "session/resume";
        case AH_ACP_M_SESSION_PROMPT: return "session/prompt";
        case AH_ACP_M_OTHER:          return "other";
    }
    return "?";
}

void ah_acp_pending_init (ah_acp_pending_t *self)
{
    memset (self, 0, sizeof *self);
    self->next_id = 1;
}

int64_t ah_acp_pending_add (ah_acp_pending_t *self, ah_acp_method_t method,
                            const char *tag, int64_t now)
{
    if (self->count >= AH_ACP_PENDING_MAX)
        return -1;
    ah_acp_pending_entry_t *e = &self->entries [self->count++];
    e->id = self->next_id++;
    e->method = method;
    snprintf (e->tag, sizeof e->tag, "%s", tag ? tag : "");
    e->sent_at = now;
    return e->id;
}

//  Entry i off the table, the order of the others kept (oldest first).
static void s_remove (ah_acp_pending_t *self, size_t i, ah_acp_pending_entry_t *entry)
{
    if (entry)
        *entry = self->entries [i];
    memmove (&self->entries [i], &self->entries [i + 1],
             (self->count - i - 1) * sizeof self->entries [0]);
    self->count--;
}

ah_acp_match_t ah_acp_pending_take (ah_acp_pending_t *self, const json_t *id,
                                    ah_acp_pending_entry_t *entry)
{
    //  Ours are integers from 1 up: a string, or one we have not reached,
    //  was never sent; one below that is not pending was answered already.
    if (!json_is_integer (id))
        return AH_ACP_UNKNOWN_ID;
    int64_t value = json_integer_value (id);
    if (value < 1 || value >= self->next_id)
        return AH_ACP_UNKNOWN_ID;
    for (size_t i = 0; i < self->count; i++)
        if (self->entries [i].id == value) {
            s_remove (self, i, entry);
            return AH_ACP_ANSWERED;
        }
    return AH_ACP_REPEATED_ID;
}

int ah_acp_pending_expire (ah_acp_pending_t *self, int64_t deadline,
                           ah_acp_pending_entry_t *entry)
{
    size_t oldest = self->count;
    for (size_t i = 0; i < self->count; i++)
        if (self->entries [i].sent_at < deadline
        &&  (oldest == self->count || self->entries [i].sent_at < self->entries [oldest].sent_at))
            oldest = i;
    if (oldest == self->count)
        return 0;
    s_remove (self, oldest, entry);
    return 1;
}


//  ---------------------------------------------------------------------
//  The open table

void ah_acp_open_init (ah_acp_open_t *self)
{
    memset (self, 0, sizeof *self);
}

void ah_acp_open_clear (ah_acp_open_t *self)
{
    for (size_t i = 0; i < self->count; i++)
        json_decref (self->ids [i]);
    self->count = 0;
}

static size_t s_open_find (ah_acp_open_t *self, const json_t *id)
{
    for (size_t i = 0; i < self->count; i++)
        if (json_equal (self->ids [i], id))
            return i;
    return self->count;
}

int ah_acp_open_add (ah_acp_open_t *self, const json_t *id)
{
    if (!id || s_open_find (self, id) < self->count)
        return -1;
    if (self->count >= AH_ACP_OPEN_MAX)
        return -2;
    json_t *copy = json_deep_copy (id);
    if (!copy)
        return -2;
    self->ids [self->count++] = copy;
    return 0;
}

int ah_acp_open_close (ah_acp_open_t *self, const json_t *id)
{
    size_t i = id ? s_open_find (self, id) : self->count;
    if (i == self->count)
        return -1;
    json_decref (self->ids [i]);
    self->ids [i] = self->ids [--self->count];
    return 0;
}
