/*  actors/api/mcp.c: POST /mcp, the Model Context Protocol (docs/mcp.md):
    the streamable HTTP transport (one JSON-RPC 2.0 message a request,
    each answered with one application/json body), its tools and the
    agents' files as resources.

    Every tool and every resource read is a REST route served internally
    (sub.c): the same handler, the same token and tenant checks, the same
    body checks, the same audit row and the same answer. A tool's result
    is that answer as JSON text (isError, with the answer's error
    sentence, when the route refused). What is MCP's own is here: the
    JSON-RPC envelope, the argument tables (one per tool: its inputSchema
    and its checks are made from the same table), and how an argument
    becomes a part of the route's target, query or body.               */
#include "actors/api/api_int.h"
#include "common/version.h"
#include "proto/base64.h"

#include <stdarg.h>
#include <string.h>

//  Protocol versions, the latest first: an initialize naming another is
//  answered with the latest.
static const char *const s_versions [] = { "2025-06-18", "2025-03-26", "2024-11-05", NULL };

enum {
    RPC_PARSE = -32700, RPC_INVALID = -32600, RPC_METHOD = -32601, RPC_PARAMS = -32602,
    RPC_INTERNAL = -32603, RPC_NO_RESOURCE = -32002
};

#define SEARCH_MAX_DEFAULT  100
#define SEARCH_MAX          1000
#define URI_PREFIX          "agenthold://agents/"

typedef struct mcp_t mcp_t;

//  An argument: its JSON type, where it goes, whether it must be given.
enum { A_STR = 1, A_INT = 2, A_NUM = 4, A_BOOL = 8, A_OBJ = 16 };
enum {
    W_AGENT = 1,                    //  {agent} of the route (a name or an id)
    W_PATH,                         //  {path} (a path in the home, its '/' kept)
    W_PORT,                         //  {port}
    W_BODY,                         //  a field of the route's JSON body, as given
    W_QUERY,                        //  a query argument (a boolean as 1 or 0)
    W_SELF                          //  the tool's own build reads it
};
typedef struct {
    const char *name;
    unsigned type;
    unsigned where;
    bool required;
    const char *dflt;               //  W_QUERY: the value when not given (NULL: none)
    const char *description;
} arg_t;

typedef struct {
    int method;                     //  tools/call's
    ah_buf_t target;
    json_t *body;                   //  the JSON body's fields
    ah_buf_t raw;                   //  ... or a body of bytes (raw_type)
    const char *raw_type;
} call_t;

//  More of a call than its table says: 0, or -1 with why (a -32602).
typedef int (build_fn) (mcp_t *m, json_t *args, call_t *call, char *why, size_t why_size);
//  The route's answer as the tool's result (default: s_result_json).
typedef json_t *(answer_fn) (mcp_t *m, int status, const uint8_t *body, size_t size);

typedef struct {
    const char *name;
    const char *title;
    const char *description;
    const char *method;
    const char *pattern;            //  the route, with {agent}, {path}, {port}
    arg_t args [8];
    build_fn *build;
    answer_fn *answer;
    bool read_only;
} tool_t;

struct mcp_t {
    req_t *r;
    json_t *id;
    const tool_t *tool;
    json_t *args;
    api_sub_t *sub;
    char *uri;                      //  resources/read's
};

//  --------------------------------------------------------------------
//  JSON-RPC answers

static void s_reply (mcp_t *m, json_t *result)
{
    api_respond (m->r, 200, json_pack ("{s:s s:O s:o}", "jsonrpc", "2.0", "id", m->id, "result", result));
}

static void s_error_status (req_t *r, int http, json_t *id, int code, json_t *data, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void s_error_status (req_t *r, int http, json_t *id, int code, json_t *data, const char *fmt, ...)
{
    char message [1024];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (message, sizeof message, fmt, ap);
    va_end (ap);
    json_t *error = json_pack ("{s:i s:o}", "code", code, "message", api_json_text (message));
    if (data)
        json_object_set_new (error, "data", data);
    api_respond (r, http, json_pack ("{s:s s:O s:o}", "jsonrpc", "2.0", "id", id ? id : json_null (),
                                     "error", error));
}

#define s_error(m, code, ...) s_error_status ((m)->r, 200, (m)->id, code, NULL, __VA_ARGS__)

//  --------------------------------------------------------------------
//  Arguments

//  v is the string lit, whole (a JSON string may hold a NUL: "ping\u0000x"
//  is not "ping").
static bool s_is (json_t *v, const char *lit)
{
    return json_is_string (v) && json_string_length (v) == strlen (lit)
        && memcmp (json_string_value (v), lit, strlen (lit)) == 0;
}

static const char *s_type_name (unsigned type)
{
    return type == A_STR ? "string" : type == A_INT ? "integer" : type == A_NUM ? "number"
         : type == A_BOOL ? "boolean" : "object";
}

static bool s_type_ok (unsigned type, json_t *v)
{
    return type == A_STR ? json_is_string (v) : type == A_INT ? json_is_integer (v)
         : type == A_NUM ? json_is_number (v) : type == A_BOOL ? json_is_boolean (v) : json_is_object (v);
}

static const char *s_json_type (json_t *v)
{
    return json_is_string (v) ? "a string" : json_is_integer (v) ? "an integer" : json_is_real (v) ? "a number"
         : json_is_boolean (v) ? "a boolean" : json_is_object (v) ? "an object" : json_is_array (v) ? "an array"
         : "null";
}

//  The tool's inputSchema, from its table.
static json_t *s_schema (const tool_t *tool)
{
    json_t *props = json_object (), *required = json_array ();
    for (const arg_t *a = tool->args; a->name; a++) {
        json_t *p = json_pack ("{s:s s:s}", "type", s_type_name (a->type), "description", a->description);
        if (a->type == A_OBJ)
            json_object_set_new (p, "additionalProperties", json_pack ("{s:s}", "type", "string"));
        json_object_set_new (props, a->name, p);
        if (a->required)
            json_array_append_new (required, json_string (a->name));
    }
    return json_pack ("{s:s s:o s:o s:b}", "type", "object", "properties", props, "required", required,
                      "additionalProperties", 0);
}

//  args against the table: 0, or -1 with why.
static int s_args_check (const tool_t *tool, json_t *args, char *why, size_t why_size)
{
    const char *key;
    json_t *v;
    char shown [80];
    json_object_foreach (args, key, v) {
        const arg_t *a = tool->args;
        while (a->name && !streq (a->name, key))
            a++;
        if (!a->name) {
            size_t k = 0;
            char names [200] = "";
            for (const arg_t *b = tool->args; b->name && k < sizeof names; b++)
                k += snprintf (names + k, sizeof names - k, "%s%s", k ? ", " : "", b->name);
            snprintf (why, why_size, "unknown argument '%s' (%s takes %s)",
                      api_show (key, strlen (key), shown, sizeof shown), tool->name, names);
            return -1;
        }
        if (!s_type_ok (a->type, v)) {
            snprintf (why, why_size, "argument '%s' of %s must be %s %s, not %s", a->name, tool->name,
                      a->type == A_INT || a->type == A_OBJ ? "an" : "a", s_type_name (a->type), s_json_type (v));
            return -1;
        }
    }
    for (const arg_t *a = tool->args; a->name; a++)
        if (a->required && !json_object_get (args, a->name)) {
            snprintf (why, why_size, "%s needs the argument '%s'", tool->name, a->name);
            return -1;
        }
    return 0;
}

//  A string argument's bytes (a JSON string may hold a NUL: it goes on
//  encoded, and the route refuses it).
static void s_encode_arg (ah_buf_t *buf, json_t *v, bool slash)
{
    api_url_encode (buf, json_string_value (v), json_string_length (v), slash);
}

//  The call the table makes of args (checked).
static int s_build (mcp_t *m, const tool_t *tool, json_t *args, call_t *call, char *why, size_t why_size)
{
    ah_buf_t *t = &call->target;
    for (const char *p = tool->pattern; *p; ) {
        const char *brace = strchr (p, '{');
        size_t n = brace ? (size_t) (brace - p) : strlen (p);
        ah_buf_append (t, p, n);
        if (!brace)
            break;
        const char *close = strchr (brace, '}');
        unsigned where = strncmp (brace, "{agent}", 7) == 0 ? W_AGENT : strncmp (brace, "{path}", 6) == 0
                       ? W_PATH : W_PORT;
        for (const arg_t *a = tool->args; a->name; a++) {
            json_t *v = json_object_get (args, a->name);
            if (a->where != where || !v)
                continue;
            if (where == W_PORT)
                ah_buf_appendf (t, "%lld", (long long) json_integer_value (v));
            else
                s_encode_arg (t, v, where == W_PATH);
        }
        p = close + 1;
    }
    bool first = true;
    for (const arg_t *a = tool->args; a->name; a++) {
        json_t *v = json_object_get (args, a->name);
        if (a->where == W_BODY && v)
            json_object_set (call->body, a->name, v);
        if (a->where != W_QUERY || (!v && !a->dflt))
            continue;
        ah_buf_appendf (t, "%s%s=", first ? "?" : "&", a->name);
        first = false;
        if (!v)
            ah_buf_appendf (t, "%s", a->dflt);
        else if (json_is_boolean (v))
            ah_buf_appendf (t, "%d", json_is_true (v) ? 1 : 0);
        else
            s_encode_arg (t, v, false);
    }
    return tool->build ? tool->build (m, args, call, why, why_size) : 0;
}

//  --------------------------------------------------------------------
//  Results

static const uint8_t *s_nul_safe (const uint8_t *body)
{
    return body ? body : (const uint8_t *) "";
}

//  An error result: the route's sentence.
static json_t *s_result_error (int status, const uint8_t *body, size_t size)
{
    char *sentence = api_error_of (body, size);
    char text [1200];
    snprintf (text, sizeof text, "%d: %s", status, sentence ? sentence : "the route answered an error");
    free (sentence);
    return json_pack ("{s:[{s:s s:o}] s:b}", "content", "type", "text", "text", api_json_text (text),
                      "isError", 1);
}

//  The route's JSON answer as the result's text (and, an object, as its
//  structuredContent).
static json_t *s_result_json (mcp_t *m, int status, const uint8_t *body, size_t size)
{
    (void) m;
    if (status >= 400)
        return s_result_error (status, body, size);
    json_t *text = api_json_bytes ((const char *) s_nul_safe (body), size);
    json_t *result = json_pack ("{s:[{s:s s:o}] s:b}", "content", "type", "text", "text", text, "isError", 0);
    json_t *j = json_loadb ((const char *) s_nul_safe (body), size, 0, NULL);
    if (json_is_object (j))
        json_object_set (result, "structuredContent", j);
    json_decref (j);
    return result;
}

//  A file's bytes: text when they are UTF-8, else base64.
static json_t *s_file_content (const char *uri, const char *type, const uint8_t *body, size_t size)
{
    json_t *text = json_stringn ((const char *) s_nul_safe (body), size);
    json_t *c = json_pack ("{s:s s:s}", "uri", uri, "mimeType", *type ? type : "application/octet-stream");
    if (text) {
        json_object_set_new (c, "text", text);
        return c;
    }
    char *b64 = malloc (AH_BASE64_LEN (size) + 1);
    if (!b64) {
        json_decref (c);
        return NULL;
    }
    ah_base64_encode (body, size, b64);
    json_object_set_new (c, "blob", json_string (b64));
    free (b64);
    return c;
}

static char *s_file_uri (json_t *args)
{
    ah_buf_t b;
    ah_buf_init (&b, 0);
    ah_buf_append (&b, URI_PREFIX, strlen (URI_PREFIX));
    s_encode_arg (&b, json_object_get (args, "agent"), false);
    ah_buf_append (&b, "/files/", 7);
    s_encode_arg (&b, json_object_get (args, "path"), true);
    ah_buf_append (&b, "", 1);
    char *uri = strdup ((const char *) ah_buf_head (&b));
    ah_buf_free (&b);
    return uri;
}

static json_t *s_read_answer (mcp_t *m, int status, const uint8_t *body, size_t size)
{
    if (status >= 400)
        return s_result_error (status, body, size);
    char *uri = s_file_uri (m->args);
    json_t *c = uri ? s_file_content (uri, "", body, size) : NULL;
    free (uri);
    if (!c)
        return s_result_error (500, NULL, 0);
    const char *text = json_string_value (json_object_get (c, "text"));
    json_t *result = text ? json_pack ("{s:[{s:s s:O}] s:b}", "content", "type", "text", "text",
                                       json_object_get (c, "text"), "isError", 0)
                          : json_pack ("{s:[{s:s s:O}] s:b}", "content", "type", "resource", "resource", c,
                                       "isError", 0);
    json_decref (c);
    return result;
}

static int s_write_build (mcp_t *m, json_t *args, call_t *call, char *why, size_t why_size)
{
    (void) m;
    json_t *content = json_object_get (args, "content");
    json_t *encoding = json_object_get (args, "encoding");
    call->raw_type = "application/octet-stream";
    if (!encoding || s_is (encoding, "text"))
        return ah_buf_append (&call->raw, json_string_value (content), json_string_length (content));
    if (!s_is (encoding, "base64")) {
        snprintf (why, why_size, "argument 'encoding' of write_file is 'text' or 'base64', not '%.40s'",
                  json_string_value (encoding));
        return -1;
    }
    size_t n = 0;
    char *bytes = ah_base64_decode (json_string_value (content), json_string_length (content), &n);
    if (!bytes) {
        snprintf (why, why_size, "argument 'content' of write_file is not base64 (encoding 'base64')");
        return -1;
    }
    int rc = ah_buf_append (&call->raw, bytes, n);
    free (bytes);
    return rc;
}

//  search_files is grep run by the exec route: the pattern and the path
//  go as environment values, never into the command line.
static int s_search_build (mcp_t *m, json_t *args, call_t *call, char *why, size_t why_size)
{
    (void) m;
    json_t *path = json_object_get (args, "path");
    const char *p = path ? json_string_value (path) : ".";
    size_t n = path ? json_string_length (path) : 1;
    const char *bad = NULL;
    if (ah_homepath_check (p, ah_homepath_trim (p, n), AH_HOMEPATH_HOME, &bad)) {
        char shown [80];
        snprintf (why, why_size, "argument 'path' of search_files: '%s' %s", api_show (p, n, shown, sizeof shown), bad);
        return -1;
    }
    json_t *max = json_object_get (args, "max_results");
    if (max && (json_integer_value (max) < 1 || json_integer_value (max) > SEARCH_MAX)) {
        snprintf (why, why_size, "argument 'max_results' of search_files is 1 to %d", SEARCH_MAX);
        return -1;
    }
    json_object_set_new (call->body, "cmd", json_string ("grep -rnHIF -e \"$AH_MCP_PATTERN\" -- \"$AH_MCP_PATH\""));
    json_object_set_new (call->body, "env", json_pack ("{s:O s:s%}", "AH_MCP_PATTERN",
                         json_object_get (args, "pattern"), "AH_MCP_PATH", p, n));
    return 0;
}

//  grep's lines "path:line:text" as matches; grep's 1 (none) is no error.
static json_t *s_search_answer (mcp_t *m, int status, const uint8_t *body, size_t size)
{
    if (status >= 400)
        return s_result_error (status, body, size);
    json_t *j = json_loadb ((const char *) s_nul_safe (body), size, 0, NULL);
    json_int_t code = json_integer_value (json_object_get (j, "status"));
    const char *out = json_string_value (json_object_get (j, "stdout"));
    if (!out || (code != 0 && code != 1)) {
        const char *err = json_string_value (json_object_get (j, "stderr"));
        json_t *r = json_pack ("{s:[{s:s s:o}] s:b}", "content", "type", "text", "text",
                               api_json_text (err && *err ? err : "grep failed"), "isError", 1);
        json_decref (j);
        return r;
    }
    json_int_t most = json_integer_value (json_object_get (m->args, "max_results"));
    if (!most)
        most = SEARCH_MAX_DEFAULT;
    json_t *matches = json_array ();
    bool cut = json_is_true (json_object_get (j, "stdout_truncated"));
    for (const char *line = out; *line; ) {
        const char *eol = strchr (line, '\n');
        size_t len = eol ? (size_t) (eol - line) : strlen (line);
        //  The path ends at the first ":digits:".
        for (size_t i = 0; i < len; i++) {
            if (line [i] != ':')
                continue;
            size_t k = i + 1;
            while (k < len && line [k] >= '0' && line [k] <= '9')
                k++;
            if (k == i + 1 || k >= len || line [k] != ':')
                continue;
            if ((json_int_t) json_array_size (matches) == most) {
                cut = true;
                break;
            }
            size_t skip = i > 2 && strncmp (line, "./", 2) == 0 ? 2 : 0;
            json_array_append_new (matches, json_pack ("{s:s% s:I s:s%}", "path", line + skip, i - skip,
                                                       "line", (json_int_t) atoll (line + i + 1),
                                                       "text", line + k + 1, len - k - 1));
            break;
        }
        line = eol ? eol + 1 : line + len;
    }
    json_decref (j);
    json_t *answer = json_pack ("{s:o s:b}", "matches", matches, "truncated", cut);
    char *text = json_dumps (answer, JSON_COMPACT);
    json_t *r = json_pack ("{s:[{s:s s:s}] s:o s:b}", "content", "type", "text", "text", text ? text : "{}",
                           "structuredContent", answer, "isError", 0);
    free (text);
    return r;
}

//  open_port: the link's answer, and its URL on this server as the
//  client reached it.
static json_t *s_port_answer (mcp_t *m, int status, const uint8_t *body, size_t size)
{
    if (status >= 400)
        return s_result_error (status, body, size);
    json_t *j = json_loadb ((const char *) s_nul_safe (body), size, 0, NULL);
    const char *host = ah_http_header (&m->r->head, "host");
    const char *path = json_string_value (json_object_get (j, "path"));
    if (host && path) {
        char url [2048];
        snprintf (url, sizeof url, "%s://%s%s", m->r->api->config->tls_cert ? "https" : "http", host, path);
        json_object_set_new (j, "url", json_string (url));
    }
    char *text = json_dumps (j, JSON_COMPACT);
    json_t *r = s_result_json (m, status, (const uint8_t *) text, text ? strlen (text) : 0);
    free (text);
    json_decref (j);
    return r;
}

#define AGENT_ARG { "agent", A_STR, W_AGENT, true, NULL, "the agent's name or id" }
#define WAIT_ARG  { "wait", A_BOOL, W_QUERY, false, "1", "answer once the agent has reached its state (default true)" }

static const tool_t s_tools [] = {
    { "create_agent", "Create an agent", "Create an agent (a sandbox with a home of its own): the agent object.",
      "POST", "/api/v1/agents", {
        { "name", A_STR, W_BODY, true, NULL, "1 to 63 of a-z 0-9 . _ -, starting with a letter or a digit" },
        { "runtime", A_STR, W_BODY, false, NULL, "a runtime of the catalog (default: its first)" },
        { "image", A_STR, W_BODY, false, NULL, "an image reference instead of a runtime" },
        { "cpus", A_NUM, W_BODY, false, NULL, "CPUs" },
        { "memory_mb", A_INT, W_BODY, false, NULL, "memory in MiB" },
        { "idle_minutes", A_NUM, W_BODY, false, NULL, "idle minutes before it sleeps" },
        WAIT_ARG, { NULL } }, NULL, NULL, false },
    { "start_agent", "Start an agent", "Start (wake) an agent: the agent object.",
      "POST", "/api/v1/agents/{agent}/start", { AGENT_ARG, WAIT_ARG, { NULL } }, NULL, NULL, false },
    { "stop_agent", "Stop an agent", "Stop an agent (it sleeps; its home stays): the agent object.",
      "POST", "/api/v1/agents/{agent}/stop", { AGENT_ARG, WAIT_ARG, { NULL } }, NULL, NULL, false },
    { "exec", "Run a command", "Run a command with /bin/sh -c in the agent's sandbox, as its user, in its home: "
      "{status, signal, timed_out, stdout, stderr, stdout_truncated, stderr_truncated} (1 MiB per stream).",
      "POST", "/api/v1/agents/{agent}/exec", { AGENT_ARG,
        { "cmd", A_STR, W_BODY, true, NULL, "the command line" },
        { "cwd", A_STR, W_BODY, false, NULL, "a directory relative to the home" },
        { "env", A_OBJ, W_BODY, false, NULL, "environment variables" },
        { "stdin", A_STR, W_BODY, false, NULL, "the command's standard input" },
        { "timeout", A_NUM, W_BODY, false, NULL, "seconds (default and most: the server's ceiling)" },
        { NULL } }, NULL, NULL, false },
    { "read_file", "Read a file", "A file of the agent's home: text, or base64 when it is not UTF-8 (8 MiB at most).",
      "GET", "/api/v1/agents/{agent}/files/{path}", { AGENT_ARG,
        { "path", A_STR, W_PATH, true, NULL, "relative to the home" }, { NULL } }, NULL, s_read_answer, true },
    { "write_file", "Write a file", "Write a file of the agent's home whole (made or replaced).",
      "PUT", "/api/v1/agents/{agent}/files/{path}", { AGENT_ARG,
        { "path", A_STR, W_PATH, true, NULL, "relative to the home" },
        { "content", A_STR, W_SELF, true, NULL, "the file's content" },
        { "encoding", A_STR, W_SELF, false, NULL, "'text' (default) or 'base64'" },
        { "mode", A_STR, W_QUERY, false, NULL, "octal permissions, such as 644" },
        { NULL } }, s_write_build, NULL, false },
    { "list_files", "List a directory", "The entries of a directory of the agent's home.",
      "GET", "/api/v1/agents/{agent}/files", { AGENT_ARG,
        { "path", A_STR, W_QUERY, false, ".", "relative to the home (default: the home)" },
        { "all", A_BOOL, W_QUERY, false, NULL, "hidden entries too" }, { NULL } }, NULL, NULL, true },
    { "search_files", "Search files", "Lines of the agent's files holding a fixed string (grep -rnHIF): "
      "{matches: [{path, line, text}], truncated}.",
      "POST", "/api/v1/agents/{agent}/exec", { AGENT_ARG,
        { "pattern", A_STR, W_SELF, true, NULL, "the string to find" },
        { "path", A_STR, W_SELF, false, NULL, "a file or directory relative to the home (default: the home)" },
        { "max_results", A_INT, W_SELF, false, NULL, "most matches answered (1 to 1000, default 100)" },
        { NULL } }, s_search_build, s_search_answer, true },
    { "open_port", "Open a port", "A link through this server to a port the agent's sandbox listens on: "
      "{url, path, expires_at, ...}.",
      "POST", "/api/v1/agents/{agent}/ports/{port}/link", { AGENT_ARG,
        { "port", A_INT, W_PORT, true, NULL, "the port (1 to 65535)" },
        { "expires", A_INT, W_BODY, false, NULL, "the link's lifetime in seconds (60 to 30 days, default 1 h)" },
        { NULL } }, NULL, s_port_answer, false },
    { NULL }
};

static const tool_t *s_tool (const char *name)
{
    const tool_t *t = s_tools;
    while (t->name && !streq (t->name, name))
        t++;
    return t;
}

//  --------------------------------------------------------------------
//  The request's state

static void s_free (req_t *r)
{
    mcp_t *m = r->ext;
    if (!m)
        return;
    api_sub_destroy (&m->sub);
    json_decref (m->id);
    json_decref (m->args);
    free (m->uri);
    free (m);
}

static const ext_ops_t s_ops = { .free = s_free };

static void s_tool_done (void *owner, int status, const char *type, const uint8_t *body, size_t size)
{
    (void) type;
    mcp_t *m = owner;
    answer_fn *answer = m->tool->answer ? m->tool->answer : s_result_json;
    json_t *result = answer (m, status, body, size);
    api_sub_destroy (&m->sub);      //  body was its
    if (result)
        s_reply (m, result);
    else
        s_error (m, RPC_INTERNAL, "cannot make the result");
}

//  Sends the call (taken apart here) as an internal request.
static void s_call (mcp_t *m, const char *method, call_t *call, api_sub_fn *done)
{
    ah_buf_append (&call->target, "", 1);
    const char *target = (const char *) ah_buf_head (&call->target);
    char *text = NULL;
    const void *body = NULL;
    size_t size = 0;
    const char *type = NULL;
    if (ah_buf_size (&call->raw) || call->raw_type) {
        body = ah_buf_head (&call->raw);
        size = ah_buf_size (&call->raw);
        type = call->raw_type;
    }
    else if (call->body && json_object_size (call->body)) {
        text = json_dumps (call->body, JSON_COMPACT);
        body = text;
        size = text ? strlen (text) : 0;
        type = "application/json";
    }
    m->sub = api_sub_new (m->r, method, target, type, body, size, done, m);
    free (text);
    if (!m->sub)
        s_error (m, RPC_INTERNAL, "out of memory");
}

static void s_call_free (call_t *call)
{
    ah_buf_free (&call->target);
    ah_buf_free (&call->raw);
    json_decref (call->body);
}

//  Runs tool with args (checked against its table) as its route: done
//  gets the route's answer. tools/call and resources/read both come here.
static void s_run (mcp_t *m, const tool_t *tool, json_t *args, api_sub_fn *done)
{
    char why [400];
    call_t call = { .body = json_object () };
    ah_buf_init (&call.target, 0);
    ah_buf_init (&call.raw, 0);
    if (s_build (m, tool, args, &call, why, sizeof why))
        s_error (m, RPC_PARAMS, "%s", why);
    else
        s_call (m, tool->method, &call, done);
    s_call_free (&call);
}

//  --------------------------------------------------------------------
//  The methods

static void s_initialize (mcp_t *m, json_t *params)
{
    json_t *version = json_object_get (params, "protocolVersion");
    if (!json_is_string (version)) {
        s_error (m, RPC_PARAMS, "initialize needs params.protocolVersion, a string");
        return;
    }
    const char *chosen = s_versions [0];
    for (size_t i = 0; s_versions [i]; i++)
        if (s_is (version, s_versions [i]))
            chosen = s_versions [i];
    s_reply (m, json_pack ("{s:s s:{s:{s:b} s:{s:b s:b}} s:{s:s s:s s:s} s:s}",
        "protocolVersion", chosen,
        "capabilities", "tools", "listChanged", 0, "resources", "subscribe", 0, "listChanged", 0,
        "serverInfo", "name", "agenthold", "title", "agenthold", "version", AH_VERSION,
        "instructions", "Agents are sandboxes with a home directory of their own: create_agent makes one, "
        "exec runs commands in it, the file tools read and write its home (paths are relative to the home). "
        "Files are resources too: agenthold://agents/{agent}/files/{path}."));
}

static void s_tools_list (mcp_t *m, json_t *params)
{
    (void) params;
    json_t *list = json_array ();
    for (const tool_t *t = s_tools; t->name; t++)
        json_array_append_new (list, json_pack ("{s:s s:s s:s s:o s:{s:s s:b}}", "name", t->name, "title", t->title,
            "description", t->description, "inputSchema", s_schema (t), "annotations", "title", t->title,
            "readOnlyHint", t->read_only));
    s_reply (m, json_pack ("{s:o}", "tools", list));
}

static void s_tools_call (mcp_t *m, json_t *params)
{
    json_t *name = json_object_get (params, "name");
    json_t *args = json_object_get (params, "arguments");
    if (!json_is_string (name)) {
        s_error (m, RPC_PARAMS, "tools/call needs params.name, a string");
        return;
    }
    if (args && !json_is_object (args) && !json_is_null (args)) {
        s_error (m, RPC_PARAMS, "params.arguments must be an object, not %s", s_json_type (args));
        return;
    }
    const tool_t *tool = s_tools;
    while (tool->name && !s_is (name, tool->name))
        tool++;
    char shown [80];
    if (!tool->name) {
        s_error (m, RPC_PARAMS, "unknown tool '%s' (tools/list names them)",
                 api_show (json_string_value (name), json_string_length (name), shown, sizeof shown));
        return;
    }
    m->tool = tool;
    m->args = json_is_object (args) ? json_incref (args) : json_object ();
    char why [400];
    if (s_args_check (tool, m->args, why, sizeof why))
        s_error (m, RPC_PARAMS, "%s", why);
    else
        s_run (m, tool, m->args, s_tool_done);
}

static void s_templates_list (mcp_t *m, json_t *params)
{
    (void) params;
    s_reply (m, json_pack ("{s:[{s:s s:s s:s s:s}]}", "resourceTemplates",
        "uriTemplate", URI_PREFIX "{agent}/files/{path}", "name", "agent-file", "title", "A file of an agent's home",
        "description", "A file (text, or a base64 blob when it is not UTF-8) or, ending in '/', a directory's "
        "listing (JSON); path is relative to the home, its '/' as they are or as %2F"));
}

static void s_resources_done (void *owner, int status, const char *type, const uint8_t *body, size_t size)
{
    (void) type;
    mcp_t *m = owner;
    json_t *j = status == 200 ? json_loadb ((const char *) s_nul_safe (body), size, 0, NULL) : NULL;
    json_t *agents = json_object_get (j, "agents");
    char *sentence = json_is_array (agents) ? NULL : api_error_of (body, size);
    api_sub_destroy (&m->sub);      //  body was its
    if (!json_is_array (agents)) {
        s_error (m, RPC_INTERNAL, "cannot list the agents: %d %s", status, sentence ? sentence : "");
        free (sentence);
        json_decref (j);
        return;
    }
    json_t *list = json_array ();
    size_t i;
    json_t *a;
    json_array_foreach (agents, i, a) {
        const char *name = json_string_value (json_object_get (a, "name"));
        if (!name)
            continue;
        char uri [256], title [160];
        snprintf (uri, sizeof uri, URI_PREFIX "%s/files/", name);
        snprintf (title, sizeof title, "%s's home", name);
        json_array_append_new (list, json_pack ("{s:s s:s s:s s:s s:s}", "uri", uri, "name", name, "title", title,
            "description", "the listing of the agent's home", "mimeType", "application/json"));
    }
    json_decref (j);
    s_reply (m, json_pack ("{s:o}", "resources", list));
}

static void s_resources_list (mcp_t *m, json_t *params)
{
    (void) params;
    call_t call = { .body = NULL };
    ah_buf_init (&call.target, 0);
    ah_buf_init (&call.raw, 0);
    ah_buf_appendf (&call.target, "/api/v1/agents");
    s_call (m, "GET", &call, s_resources_done);
    s_call_free (&call);
}

static void s_read_done (void *owner, int status, const char *type, const uint8_t *body, size_t size)
{
    mcp_t *m = owner;
    json_t *c = status < 400 ? s_file_content (m->uri, type, body, size) : NULL;
    char *sentence = status >= 400 ? api_error_of (body, size) : NULL;
    api_sub_destroy (&m->sub);      //  body was its
    if (status >= 400) {
        s_error_status (m->r, 200, m->id, status == 404 ? RPC_NO_RESOURCE : status == 400 ? RPC_PARAMS : RPC_INTERNAL,
                        json_pack ("{s:s s:i}", "uri", m->uri, "status", status), "%s",
                        sentence ? sentence : "the route answered an error");
        free (sentence);
        return;
    }
    if (!c) {
        s_error (m, RPC_INTERNAL, "out of memory");
        return;
    }
    s_reply (m, json_pack ("{s:[o]}", "contents", c));
}

static int s_hex (int c)
{
    return c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : -1;
}

//  %XX decoded into out (NUL bytes kept): 0, or -1 malformed.
static int s_uri_decode (const char *s, size_t n, ah_buf_t *out)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) s [i];
        if (c == '%') {
            if (i + 2 >= n)
                return -1;
            int hi = s_hex (s [i + 1]), lo = s_hex (s [i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = (unsigned char) (hi * 16 + lo);
            i += 2;
        }
        ah_buf_append (out, &c, 1);
    }
    return 0;
}

static void s_resources_read (mcp_t *m, json_t *params)
{
    json_t *uri = json_object_get (params, "uri");
    if (!json_is_string (uri)) {
        s_error (m, RPC_PARAMS, "resources/read needs params.uri, a string");
        return;
    }
    const char *u = json_string_value (uri);
    size_t n = json_string_length (uri), plen = strlen (URI_PREFIX);
    const char *slash = n > plen && strncmp (u, URI_PREFIX, plen) == 0 ? memchr (u + plen, '/', n - plen) : NULL;
    char shown [80];
    if (!slash || (size_t) (u + n - slash) < 6 || strncmp (slash, "/files", 6) != 0
    ||  (slash [6] != '/' && slash + 6 != u + n)) {
        s_error (m, RPC_PARAMS, "unknown resource '%s' (resources are " URI_PREFIX "{agent}/files/{path})",
                 api_show (u, n, shown, sizeof shown));
        return;
    }
    ah_buf_t agent, path;
    ah_buf_init (&agent, 0);
    ah_buf_init (&path, 0);
    const char *rest = slash + 6 + (slash + 6 < u + n);
    if (s_uri_decode (u + plen, (size_t) (slash - u - (ptrdiff_t) plen), &agent)
    ||  s_uri_decode (rest, (size_t) (u + n - rest), &path)) {
        s_error (m, RPC_PARAMS, "resource '%s': a malformed %%-escape", api_show (u, n, shown, sizeof shown));
        ah_buf_free (&agent);
        ah_buf_free (&path);
        return;
    }
    //  The read_file tool run (a directory: list_files), from its table:
    //  the same route, the same encoding of the agent and the path, so
    //  the same path rules, tenant checks, 8 MiB cap and answers. The
    //  decoded bytes go as they are (a NUL, bytes that are not UTF-8): the
    //  route judges them.
    size_t pn = ah_buf_size (&path);
    const char *p = (const char *) ah_buf_head (&path);
    bool dir = pn == 0 || p [pn - 1] == '/';
    json_t *args = json_object ();
    const char *a = ah_buf_size (&agent) ? (const char *) ah_buf_head (&agent) : "";
    json_object_set_new (args, "agent", json_stringn_nocheck (a, ah_buf_size (&agent)));
    if (pn)
        json_object_set_new (args, "path", json_stringn_nocheck (p, pn));
    m->uri = strndup (u, n);
    if (!m->uri || !json_object_get (args, "agent") || (pn && !json_object_get (args, "path")))
        s_error (m, RPC_INTERNAL, "out of memory");
    else
        s_run (m, s_tool (dir ? "list_files" : "read_file"), args, s_read_done);
    json_decref (args);
    ah_buf_free (&agent);
    ah_buf_free (&path);
}

static void s_ping (mcp_t *m, json_t *params)
{
    (void) params;
    s_reply (m, json_object ());
}

typedef void (method_fn) (mcp_t *m, json_t *params);
static const struct { const char *name; method_fn *fn; } s_methods [] = {
    { "initialize", s_initialize }, { "ping", s_ping }, { "tools/list", s_tools_list },
    { "tools/call", s_tools_call }, { "resources/list", s_resources_list },
    { "resources/templates/list", s_templates_list }, { "resources/read", s_resources_read },
};

//  --------------------------------------------------------------------
//  The route

//  The transport's checks before the message is read: the Origin (a
//  browser's page of another site must not reach a local server: DNS
//  rebinding), the Accept header (a streamable HTTP client takes
//  application/json and text/event-stream; one admitting neither could not
//  read the answer; none at all admits both) and the protocol version a
//  client names.
static int s_transport (req_t *r)
{
    if (!api_same_origin (r)) {
        s_error_status (r, 403, NULL, RPC_INVALID, NULL, "Origin '%.100s' is not this server: refused",
                        ah_http_header (&r->head, "origin"));
        return -1;
    }
    if (!ah_http_accepts (&r->head, "application/json") && !ah_http_accepts (&r->head, "text/event-stream")) {
        s_error_status (r, 406, NULL, RPC_INVALID, NULL, "Accept '%.100s' admits neither application/json nor "
                        "text/event-stream: a streamable HTTP client accepts both",
                        ah_http_header (&r->head, "accept"));
        return -1;
    }
    const char *version = ah_http_header (&r->head, "mcp-protocol-version");
    if (version) {
        bool known = ah_http_header_count (&r->head, "mcp-protocol-version") == 1;
        size_t i = 0;
        while (known && s_versions [i] && !streq (s_versions [i], version))
            i++;
        if (!known || !s_versions [i]) {
            s_error_status (r, 400, NULL, RPC_INVALID, NULL, "unsupported MCP-Protocol-Version '%.40s' "
                            "(this server speaks %s, %s and %s)", version, s_versions [0], s_versions [1],
                            s_versions [2]);
            return -1;
        }
    }
    return 0;
}

static void s_mcp (req_t *r)
{
    if (s_transport (r))
        return;
    json_error_t err;
    const char *text = (const char *) ah_buf_head (&r->body);
    size_t size = ah_buf_size (&r->body);
    json_t *msg = size ? json_loadb (text, size, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL, &err) : NULL;
    if (!msg) {
        if (!size)
            snprintf (err.text, sizeof err.text, "an empty body");
        s_error_status (r, 400, NULL, RPC_PARSE, NULL, "parse error: %s", err.text);
        return;
    }
    json_t *id = json_object_get (msg, "id");
    json_t *method = json_object_get (msg, "method");
    json_t *params = json_object_get (msg, "params");
    if (json_is_array (msg))
        s_error_status (r, 400, NULL, RPC_INVALID, NULL, "batches (JSON arrays) are not taken: send one "
                        "JSON-RPC message a request");
    else if (!json_is_object (msg))
        s_error_status (r, 400, NULL, RPC_INVALID, NULL, "a JSON-RPC message is an object, not %s", s_json_type (msg));
    else if (!s_is (json_object_get (msg, "jsonrpc"), "2.0"))
        s_error_status (r, 400, NULL, RPC_INVALID, NULL, "a JSON-RPC 2.0 message has \"jsonrpc\": \"2.0\"");
    else if (id && !json_is_string (id) && !json_is_integer (id))
        s_error_status (r, 400, NULL, RPC_INVALID, NULL, "id must be a string or an integer, not %s", s_json_type (id));
    else if (!method && id && (json_object_get (msg, "result") || json_object_get (msg, "error")))
        api_respond_bytes (r, 202, NULL, "", 0);    //  a client's answer: nothing was asked
    else if (!json_is_string (method))
        s_error_status (r, 400, id, RPC_INVALID, NULL, "a request needs \"method\", a string");
    else if (!id)
        api_respond_bytes (r, 202, NULL, "", 0);    //  a notification (notifications/initialized, ...)
    else if (params && !json_is_object (params))
        s_error_status (r, 200, id, RPC_PARAMS, NULL, "params must be an object, not %s", s_json_type (params));
    else {
        size_t i = 0, n = sizeof s_methods / sizeof s_methods [0];
        while (i < n && !s_is (method, s_methods [i].name))
            i++;
        char shown [80];
        mcp_t *m = i < n ? calloc (1, sizeof *m) : NULL;
        if (i == n)
            s_error_status (r, 200, id, RPC_METHOD, NULL, "unknown method '%s'",
                            api_show (json_string_value (method), json_string_length (method), shown, sizeof shown));
        else if (!m)
            s_error_status (r, 200, id, RPC_INTERNAL, NULL, "out of memory");
        else {
            m->r = r;
            m->id = json_incref (id);
            r->ext = m;
            r->ext_ops = &s_ops;
            json_t *none = params ? NULL : json_object ();
            s_methods [i].fn (m, params ? params : none);
            json_decref (none);
        }
    }
    json_decref (msg);
}

const route_t api_mcp_routes [] = {
    { M_POST, "/mcp", s_mcp, R_BODY | R_RPC, "", NULL },
    { 0 }
};
