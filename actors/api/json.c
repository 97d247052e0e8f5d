/*  actors/api/json.c: the JSON helpers the route families share (see
    api_int.h): values from text, times, columns and messages; a request
    body as one JSON object (duplicate keys named, "run" taken out); a
    checked body's fields into a message.                               */
#include "actors/api/api_int.h"
#include "common/bounds.h"

#include <string.h>

json_t *api_json_text (const char *text)
{
    return api_json_bytes (text, text ? strlen (text) : 0);
}

json_t *api_json_bytes (const char *data, size_t size)
{
    json_t *j = ah_json_bytes (data, size);
    return j ? j : json_string ("");
}

json_t *api_json_time (int64_t ms)
{
    if (ms <= 0)
        return json_null ();
    char buf [40];
    ah_store_format_time (ms, buf, sizeof buf);
    return json_string (buf);
}

json_t *api_json_column (sqlite3_stmt *stmt, int col)
{
    if (sqlite3_column_type (stmt, col) == SQLITE_NULL)
        return json_null ();
    return api_json_text ((const char *) sqlite3_column_text (stmt, col));
}

json_t *api_json_raw (const ah_msg_t *msg, const char *key)
{
    char *line = ah_msg_to_json (msg, NULL);
    json_t *root = line ? json_loads (line, 0, NULL) : NULL;
    free (line);
    json_t *value = json_incref (json_object_get (json_object_get (root, "fields"), key));
    json_decref (root);
    return value;
}

json_t *api_body_object (req_t *r, bool empty_ok)
{
    size_t n = ah_buf_size (&r->body);
    if (n == 0) {
        if (empty_ok)
            return json_object ();
        api_respond_error (r, 400, "a JSON object body is required");
        return NULL;
    }
    //  A NUL in a string is taken only on a route with a field that is
    //  bytes (exec's stdin); the router refuses it in every other field
    //  and the route checks what its objects hold (exec's env).
    size_t flags = JSON_REJECT_DUPLICATES;
    for (const body_field_t *f = r->route ? r->route->body : NULL; f && f->name; f++)
        if (f->types & B_NUL)
            flags |= JSON_ALLOW_NUL;
    json_error_t jerr;
    json_t *root = json_loadb ((const char *) ah_buf_head (&r->body), n, flags, &jerr);
    if (!root && json_error_code (&jerr) == json_error_duplicate_key) {
        //  jansson stops just past the key (and names it only when it
        //  is short): the key is the last string before its position.
        const char *text = (const char *) ah_buf_head (&r->body);
        size_t end = (size_t) jerr.position < n ? (size_t) jerr.position : n, start;
        while (end > 0 && text [end - 1] != '"')
            end--;
        bool found = false;
        for (start = end > 1 ? end - 2 : 0; end > 1 && !found; start--) {
            size_t slashes = 0;
            while (start > slashes && text [start - 1 - slashes] == '\\')
                slashes++;
            found = text [start] == '"' && slashes % 2 == 0;
            if (found || start == 0)
                break;
        }
        json_t *key = found ? json_loadb (text + start, end - start, JSON_DECODE_ANY, NULL) : NULL;
        const char *name = json_string_value (key);
        char shown [80];
        if (name)
            api_respond_error (r, 400, "field '%s' is given twice (line %d column %d)",
                               api_show (name, json_string_length (key), shown, sizeof shown),
                               jerr.line, jerr.column);
        else
            api_respond_error (r, 400, "a field is given twice at line %d column %d", jerr.line, jerr.column);
        json_decref (key);
        return NULL;
    }
    if (!root) {
        api_respond_error (r, 400, "bad JSON at line %d column %d: %s", jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object (root)) {
        json_decref (root);
        api_respond_error (r, 400, "the body must be a JSON object");
        return NULL;
    }
    //  Any body may name the run or session it belongs to, as the header
    //  X-Agenthold-Run does (the audit trail's run); taken out here.
    json_t *run = json_object_get (root, "run");
    if (run) {
        const char *text = json_string_value (run);
        const char *bad = text ? api_run_check (text) : "must be a string";
        if (!bad && r->run [0] && !streq (r->run, text))
            bad = "differs from the header X-Agenthold-Run";
        if (bad) {
            json_decref (root);
            api_respond_error (r, 400, "field 'run' %s", bad);
            return NULL;
        }
        snprintf (r->run, sizeof r->run, "%s", text);
        json_object_del (root, "run");
    }
    return root;
}

void api_copy_fields (json_t *obj, ah_msg_t *msg)
{
    const char *key;
    json_t *value;
    json_object_foreach (obj, key, value) {
        if (json_is_string (value))
            ah_msg_set_str (msg, key, json_string_value (value));
        else if (json_is_integer (value) && !(ah_bound (key) && !ah_bound (key)->whole))
            ah_msg_set_int (msg, key, json_integer_value (value));
        else if (json_is_number (value))        //  cpus 1 is a real one
            ah_msg_set_double (msg, key, json_number_value (value));
        else if (json_is_null (value))          //  where the route takes null (body_field_t)
            ah_msg_set_nil (msg, key);
    }
}
