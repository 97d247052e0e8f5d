/*  tests/proto/test_acp.c: the ACP client's wire pieces (proto/acp.h):
    the line reader fed a stream split at every byte, CRLF and blank
    lines, the oversize line (dropped, reported, never held), a stream
    ending mid-line; the parser on each kind of message and on malformed
    JSON, wrong types and duplicate keys; every builder's line parsed
    back; the pending table's unknown and repeated ids; the open table's
    colliding ids.                                                      */
#include "proto/acp.h"
#include "tests/common/check.h"

#include <stdlib.h>
#include <string.h>

#define SEEN_MAX 32

typedef struct {
    char *lines [SEEN_MAX];         //  a line, or "!" + the error
    int count;
    size_t max_held;                //  the most the reader held between feeds
} seen_t;

static void s_collect (void *ud, const char *line, size_t size, const char *error)
{
    seen_t *seen = ud;
    if (seen->count >= SEEN_MAX)
        return;
    char *copy = NULL;
    if (line) {
        copy = malloc (size + 1);
        memcpy (copy, line, size);
        copy [size] = 0;
    }
    else
    if (asprintf (&copy, "!%s", error) < 0)
        copy = NULL;
    seen->lines [seen->count++] = copy;
}

static void s_seen_clear (seen_t *seen)
{
    for (int i = 0; i < seen->count; i++)
        free (seen->lines [i]);
    memset (seen, 0, sizeof *seen);
}

//  data fed in pieces of the given sizes (the rest whole at the end).
static void s_feed_split (const char *data, size_t size, size_t max, size_t first, size_t step,
                          bool eof, seen_t *seen)
{
    ah_acp_reader_t r;
    ah_acp_reader_init (&r, max);
    size_t at = 0;
    while (at < size) {
        size_t n = at == 0 && first ? first : step ? step : size - at;
        if (n > size - at)
            n = size - at;
        CHECK (ah_acp_reader_feed (&r, data + at, n, s_collect, seen) == 0);
        if (ah_buf_size (&r.line) > seen->max_held)
            seen->max_held = ah_buf_size (&r.line);
        at += n;
    }
    if (eof)
        ah_acp_reader_eof (&r, s_collect, seen);
    ah_acp_reader_clear (&r);
}

static const char s_stream [] =
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n"
    "\n"
    "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"a\":1}}\r\n"
    "   \t\r\n"
    "\r\n"
    "x\n"
    "{\"jsonrpc\":\"2.0\",\"id\":\"s\",\"method\":\"fs/read_text_file\",\"params\":{}}\n";

static const char *s_expected [] = {
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}",
    "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"a\":1}}",
    "x",
    "{\"jsonrpc\":\"2.0\",\"id\":\"s\",\"method\":\"fs/read_text_file\",\"params\":{}}",
};

//  The same lines whatever the chunks: split once at every byte, and a
//  byte at a time; CRLF loses its CR, blank lines are no lines.
static void s_test_reader_split (void)
{
    size_t size = sizeof s_stream - 1;
    int nexp = (int) (sizeof s_expected / sizeof s_expected [0]);
    int bad = 0;
    for (size_t cut = 0; cut <= size; cut++) {
        for (int mode = 0; mode < 2; mode++) {
            seen_t seen = { 0 };
            if (mode == 0)
                s_feed_split (s_stream, size, 0, cut ? cut : size, 0, true, &seen);
            else
            if (cut == 0)
                s_feed_split (s_stream, size, 0, 0, 1, true, &seen);
            bool ok = mode == 1 && cut > 0;
            if (!ok) {
                ok = seen.count == nexp;
                for (int i = 0; ok && i < nexp; i++)
                    ok = seen.lines [i] && strcmp (seen.lines [i], s_expected [i]) == 0;
            }
            if (!ok) {
                bad++;
                fprintf (stderr, "split at %zu (mode %d): %d lines\n", cut, mode, seen.count);
            }
            s_seen_clear (&seen);
        }
    }
    CHECK (bad == 0);
}

//  A line past the bound is reported once, as soon as it passes, never
//  held beyond the bound, and the next line comes through whole: fed
//  whole, in two at every byte, and a byte at a time.
static void s_test_reader_oversize (void)
{
    char data [200];
    memset (data, 'a', 100);
    memcpy (data + 100, "\n{\"ok\":1}\n", 10);
    size_t size = 110;
    int bad = 0;
    for (size_t cut = 0; cut <= size; cut++) {
        seen_t seen = { 0 };
        if (cut == 0)
            s_feed_split (data, size, 16, 0, 1, true, &seen);
        else
            s_feed_split (data, size, 16, cut, 0, true, &seen);
        bool ok = seen.count == 2 && seen.max_held <= 16
               && strstr (seen.lines [0], "!line 1 is longer than 16 bytes") == seen.lines [0]
               && strcmp (seen.lines [1], "{\"ok\":1}") == 0;
        if (!ok) {
            bad++;
            fprintf (stderr, "oversize, cut %zu: %d calls, held %zu, first '%s'\n", cut, seen.count,
                     seen.max_held, seen.count ? seen.lines [0] : "");
        }
        s_seen_clear (&seen);
    }
    CHECK (bad == 0);

    //  Exactly the bound passes; one more does not (CR counted, LF not).
    seen_t seen = { 0 };
    s_feed_split ("0123456789abcdef\n0123456789abcdefg\nok\n", 38, 16, 0, 0, true, &seen);
    CHECK (seen.count == 3);
    CHECK_STR (seen.lines [0], "0123456789abcdef");
    CHECK (seen.lines [1] && strstr (seen.lines [1], "!line 2 is longer") == seen.lines [1]);
    CHECK_STR (seen.lines [2], "ok");
    s_seen_clear (&seen);

    //  A line that never ends: one report, nothing held, however much comes.
    ah_acp_reader_t r;
    ah_acp_reader_init (&r, 1024);
    char chunk [4096];
    memset (chunk, 'z', sizeof chunk);
    for (int i = 0; i < 1000; i++)
        ah_acp_reader_feed (&r, chunk, sizeof chunk, s_collect, &seen);
    CHECK (seen.count == 1);
    CHECK (ah_buf_size (&r.line) == 0 && r.line.cap <= 64 * 1024);
    CHECK (r.dropped == 1000u * sizeof chunk);
    ah_acp_reader_feed (&r, "\n{}\n", 4, s_collect, &seen);
    CHECK (seen.count == 2);
    CHECK_STR (seen.lines [1], "{}");
    //  The end of the stream inside a dropped line says nothing more.
    ah_acp_reader_feed (&r, chunk, sizeof chunk, s_collect, &seen);
    CHECK (seen.count == 3 && seen.lines [2] && strstr (seen.lines [2], "!line 3 is longer"));
    ah_acp_reader_eof (&r, s_collect, &seen);
    CHECK (seen.count == 3);
    ah_acp_reader_clear (&r);
    s_seen_clear (&seen);
}

//  The stream ends inside a line: reported, not delivered as a message.
static void s_test_reader_eof (void)
{
    seen_t seen = { 0 };
    s_feed_split ("{}\n{\"jsonrpc\":", 14, 0, 0, 0, true, &seen);
    CHECK (seen.count == 2);
    CHECK_STR (seen.lines [0], "{}");
    CHECK (seen.lines [1] && strstr (seen.lines [1], "!the stream ended inside line 2: 11 bytes") == seen.lines [1]);
    s_seen_clear (&seen);
    //  Nothing after the last newline (or only blanks): nothing said.
    s_feed_split ("{}\n  ", 5, 0, 0, 0, true, &seen);
    CHECK (seen.count == 1);
    s_seen_clear (&seen);
    //  The reader reads on after eof (a restarted harness's stream).
    ah_acp_reader_t r;
    ah_acp_reader_init (&r, 0);
    CHECK (r.max == AH_ACP_LINE_MAX);
    ah_acp_reader_feed (&r, "half", 4, s_collect, &seen);
    ah_acp_reader_eof (&r, s_collect, &seen);
    ah_acp_reader_feed (&r, "whole\n", 6, s_collect, &seen);
    CHECK (seen.count == 2);
    CHECK_STR (seen.lines [1], "whole");
    ah_acp_reader_clear (&r);
    s_seen_clear (&seen);
}

//  One line's verdict: 0 and the kind, or -1 with why containing want.
static int s_parse (const char *line, ah_acp_msg_t *msg, char *why)
{
    return ah_acp_parse (line, strlen (line), msg, why);
}

static void s_check_refused (const char *line, const char *want, int code, bool reply)
{
    ah_acp_msg_t msg;
    char why [AH_ACP_WHY_MAX];
    int rc = s_parse (line, &msg, why);
    bool ok = rc == -1 && strstr (why, want) && msg.reply_code == code && msg.reply == reply;
    if (!ok)
        fprintf (stderr, "refusal of %s: rc %d, why '%s', code %d, reply %d\n",
                 line, rc, why, msg.reply_code, msg.reply);
    CHECK (ok);
    if (reply)
        CHECK (msg.id != NULL);
    ah_acp_msg_clear (&msg);
    CHECK (msg.root == NULL);
}

static void s_test_parse (void)
{
    ah_acp_msg_t msg;
    char why [AH_ACP_WHY_MAX];

    CHECK (s_parse ("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"session/request_permission\","
                    "\"params\":{\"sessionId\":\"s1\"}}", &msg, why) == 0);
    CHECK (msg.kind == AH_ACP_REQUEST);
    CHECK (json_integer_value (msg.id) == 7);
    CHECK_STR (msg.method, "session/request_permission");
    CHECK_STR (json_string_value (json_object_get (msg.params, "sessionId")), "s1");
    ah_acp_msg_clear (&msg);

    CHECK (s_parse ("{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":\"fs/read_text_file\"}", &msg, why) == 0);
    CHECK (msg.kind == AH_ACP_REQUEST && msg.params == NULL);
    CHECK_STR (json_string_value (msg.id), "abc");
    char idtext [32];
    CHECK_STR (ah_acp_id_text (msg.id, idtext, sizeof idtext), "\"abc\"");
    ah_acp_msg_clear (&msg);

    CHECK (s_parse ("{\"method\":\"session/update\",\"params\":{},\"jsonrpc\":\"2.0\"}", &msg, why) == 0);
    CHECK (msg.kind == AH_ACP_NOTIFICATION && msg.id == NULL && json_is_object (msg.params));
    ah_acp_msg_clear (&msg);

    CHECK (s_parse ("{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"stopReason\":\"end_turn\"}}", &msg, why) == 0);
    CHECK (msg.kind == AH_ACP_RESULT && json_integer_value (msg.id) == 3);
    CHECK_STR (json_string_value (json_object_get (msg.result, "stopReason")), "end_turn");
    ah_acp_msg_clear (&msg);

    //  A result may be any value, null included.
    CHECK (s_parse ("{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":null}", &msg, why) == 0);
    CHECK (msg.kind == AH_ACP_RESULT && json_is_null (msg.result));
    ah_acp_msg_clear (&msg);

    CHECK (s_parse ("{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{\"code\":-32601,\"message\":\"no such method\","
                    "\"data\":[1]}}", &msg, why) == 0);
    CHECK (msg.kind == AH_ACP_ERROR && msg.code == -32601 && json_is_array (msg.data));
    CHECK_STR (msg.message, "no such method");
    ah_acp_msg_clear (&msg);

    //  An error about a request it could not read names no id.
    CHECK (s_parse ("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"x\"}}",
                    &msg, why) == 0);
    CHECK (msg.kind == AH_ACP_ERROR && msg.id == NULL);
    ah_acp_msg_clear (&msg);

    //  Malformed JSON, and what is not a message.
    s_check_refused ("{\"jsonrpc\":\"2.0\",", "not JSON: ", AH_ACP_PARSE_ERROR, false);
    s_check_refused ("not json at all", "not JSON: ", AH_ACP_PARSE_ERROR, false);
    s_check_refused ("{\"a\":\"\x01\xff\"}", "not JSON: ", AH_ACP_PARSE_ERROR, false);
    //  \u0000 would cut a method or a path short where it is read as C text.
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"method\":\"session/update\\u0000x\"}", "not JSON: ",
                     AH_ACP_PARSE_ERROR, false);
    s_check_refused ("[{\"jsonrpc\":\"2.0\"}]", "a message is a JSON object; this is an array",
                     AH_ACP_INVALID_REQUEST, false);
    s_check_refused ("42", "this is an integer", AH_ACP_INVALID_REQUEST, false);
    s_check_refused ("{\"id\":1,\"result\":{}}", "\"jsonrpc\": \"2.0\" is missing", AH_ACP_INVALID_REQUEST, false);
    s_check_refused ("{\"jsonrpc\":\"1.0\",\"id\":1,\"result\":{}}", "\"jsonrpc\" is another string",
                     AH_ACP_INVALID_REQUEST, false);
    s_check_refused ("{\"jsonrpc\":2.0,\"id\":1,\"result\":{}}", "\"jsonrpc\" is a number",
                     AH_ACP_INVALID_REQUEST, false);
    //  Ids: integers and strings only.
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"m\"}", "the id is true",
                     AH_ACP_INVALID_REQUEST, false);
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"m\"}", "the id is a number with a fraction",
                     AH_ACP_INVALID_REQUEST, false);
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":1}", "the id is an object",
                     AH_ACP_INVALID_REQUEST, false);
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":[1],\"result\":1}", "the id is an array",
                     AH_ACP_INVALID_REQUEST, false);
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"m\"}", "the id is null",
                     AH_ACP_INVALID_REQUEST, false);
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":null,\"result\":1}", "the id is null",
                     AH_ACP_INVALID_REQUEST, false);
    char longid [400];
    snprintf (longid, sizeof longid, "{\"jsonrpc\":\"2.0\",\"id\":\"%0200d\",\"method\":\"m\"}", 0);
    s_check_refused (longid, "the id is a string of 200 bytes", AH_ACP_INVALID_REQUEST, false);
    //  Methods and params; a request's failures can be answered by its id.
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":3}", "\"method\" is an integer",
                     AH_ACP_INVALID_REQUEST, true);
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}", "\"method\" is 0 bytes",
                     AH_ACP_INVALID_REQUEST, true);
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":[1,2]}",
                     "\"params\" is an array, not an object", AH_ACP_INVALID_PARAMS, true);
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":\"x\"}",
                     "\"params\" is a string, not an object", AH_ACP_INVALID_PARAMS, false);
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"result\":{}}",
                     "a message with a \"method\" has no \"result\"", AH_ACP_INVALID_REQUEST, true);
    //  Answers.
    s_check_refused ("{\"jsonrpc\":\"2.0\"}", "neither a \"method\" nor an \"id\"", AH_ACP_INVALID_REQUEST, false);
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":1}", "neither a \"result\" nor an \"error\"",
                     AH_ACP_INVALID_REQUEST, false);
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1,\"error\":{}}", "both a \"result\" and an \"error\"",
                     AH_ACP_INVALID_REQUEST, false);
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":\"bad\"}", "\"error\" is a string",
                     AH_ACP_INVALID_REQUEST, false);
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"message\":\"m\"}}",
                     "the error's \"code\" is missing", AH_ACP_INVALID_REQUEST, false);
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":\"1\",\"message\":\"m\"}}",
                     "the error's \"code\" is a string", AH_ACP_INVALID_REQUEST, false);
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1}}",
                     "the error's \"message\" is missing", AH_ACP_INVALID_REQUEST, false);
    //  A key twice: a second id must not change what an answer answers.
    s_check_refused ("{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"result\":{}}", "a key is given twice",
                     AH_ACP_INVALID_REQUEST, false);

    //  Many values are refused before jansson builds them; the same
    //  bytes inside a string are one value.
    size_t n = 8 + 2 * (AH_ACP_VALUES_MAX + 1);
    char *many = malloc (n + 8);
    size_t at = (size_t) sprintf (many, "{\"a\":[");
    for (int i = 0; i <= AH_ACP_VALUES_MAX; i++)
        at += (size_t) sprintf (many + at, "0,");
    many [at - 1] = ']';
    many [at++] = '}';
    CHECK (ah_acp_parse (many, at, &msg, why) == -1);
    CHECK (strstr (why, "more than 65536 JSON values in one message") != NULL);
    ah_acp_msg_clear (&msg);
    at = (size_t) sprintf (many, "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":{\"t\":\"\\\"");
    for (int i = 0; i <= AH_ACP_VALUES_MAX; i++)
        many [at++] = i % 2 ? ',' : '[';
    at += (size_t) sprintf (many + at, "\"}}");
    CHECK (ah_acp_parse (many, at, &msg, why) == 0 && msg.kind == AH_ACP_NOTIFICATION);
    free (many);
    ah_acp_msg_clear (&msg);

    //  The sentence is printable even when it quotes the harness's bytes.
    CHECK (s_parse ("\x01\x02\xfe garbage", &msg, why) == -1);
    for (const char *c = why; *c; c++)
        CHECK ((unsigned char) *c >= 0x20 && (unsigned char) *c < 0x7f);
    ah_acp_msg_clear (&msg);
    //  Not NUL-terminated: the parser reads size bytes only.
    const char buf [] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}GARBAGE";
    CHECK (ah_acp_parse (buf, sizeof buf - 1 - 7, &msg, why) == 0);
    ah_acp_msg_clear (&msg);
}

//  line: one line, "\n" last and nowhere else, that parses to kind.
static bool s_line_ok (char *line, ah_acp_kind_t kind, ah_acp_msg_t *msg)
{
    char why [AH_ACP_WHY_MAX];
    size_t n = line ? strlen (line) : 0;
    bool ok = n > 1 && line [n - 1] == '\n' && memchr (line, '\n', n - 1) == NULL
           && ah_acp_parse (line, n - 1, msg, why) == 0 && msg->kind == kind;
    if (!ok)
        fprintf (stderr, "built line: %s", line ? line : "(null)\n");
    free (line);
    return ok;
}

static void s_test_builders (void)
{
    ah_acp_msg_t msg;
    ah_acp_client_t client = { .fs_read = true, .fs_write = false, .terminal = true,
                               .name = "agenthold", .version = "1.2.3" };
    CHECK (s_line_ok (ah_acp_initialize (1, &client), AH_ACP_REQUEST, &msg));
    CHECK_STR (msg.method, "initialize");
    CHECK (json_integer_value (msg.id) == 1);
    CHECK (json_integer_value (json_object_get (msg.params, "protocolVersion")) == AH_ACP_PROTOCOL_VERSION);
    json_t *caps = json_object_get (msg.params, "clientCapabilities");
    CHECK (json_is_true (json_object_get (json_object_get (caps, "fs"), "readTextFile")));
    CHECK (json_is_false (json_object_get (json_object_get (caps, "fs"), "writeTextFile")));
    CHECK (json_is_true (json_object_get (caps, "terminal")));
    CHECK_STR (json_string_value (json_object_get (json_object_get (msg.params, "clientInfo"), "version")), "1.2.3");
    ah_acp_msg_clear (&msg);

    CHECK (s_line_ok (ah_acp_session_new (2, "/home/agent"), AH_ACP_REQUEST, &msg));
    CHECK_STR (msg.method, "session/new");
    CHECK_STR (json_string_value (json_object_get (msg.params, "cwd")), "/home/agent");
    CHECK (json_array_size (json_object_get (msg.params, "mcpServers")) == 0
           && json_is_array (json_object_get (msg.params, "mcpServers")));
    CHECK (json_object_get (msg.params, "sessionId") == NULL);
    ah_acp_msg_clear (&msg);

    const char *methods [] = { "session/load", "session/resume" };
    for (int i = 0; i < 2; i++) {
        char *line = i == 0 ? ah_acp_session_load (3, "sess-1", "/home/agent")
                            : ah_acp_session_resume (3, "sess-1", "/home/agent");
        CHECK (s_line_ok (line, AH_ACP_REQUEST, &msg));
        CHECK_STR (msg.method, methods [i]);
        CHECK_STR (json_string_value (json_object_get (msg.params, "sessionId")), "sess-1");
        CHECK_STR (json_string_value (json_object_get (msg.params, "cwd")), "/home/agent");
        ah_acp_msg_clear (&msg);
    }
    CHECK (ah_acp_session_load (3, NULL, "/home/agent") == NULL);

    //  Text with a newline, a quote and a tab stays one line and comes back whole.
    const char text [] = "line one\nsaid \"hi\"\tafter \xc3\xa9";
    CHECK (s_line_ok (ah_acp_session_prompt (4, "sess-1", text, sizeof text - 1), AH_ACP_REQUEST, &msg));
    CHECK_STR (msg.method, "session/prompt");
    json_t *block = json_array_get (json_object_get (msg.params, "prompt"), 0);
    CHECK_STR (json_string_value (json_object_get (block, "type")), "text");
    json_t *back = json_object_get (block, "text");
    CHECK (json_string_length (back) == sizeof text - 1
           && memcmp (json_string_value (back), text, sizeof text - 1) == 0);
    ah_acp_msg_clear (&msg);
    CHECK (ah_acp_session_prompt (4, "sess-1", "\xff\xfe", 2) == NULL);    //  not UTF-8
    CHECK (ah_acp_session_prompt (4, "sess-1", "a\0b", 3) == NULL);        //  a NUL: refused by our reader too

    CHECK (s_line_ok (ah_acp_session_cancel ("sess-1"), AH_ACP_NOTIFICATION, &msg));
    CHECK_STR (msg.method, "session/cancel");
    CHECK_STR (json_string_value (json_object_get (msg.params, "sessionId")), "sess-1");
    ah_acp_msg_clear (&msg);

    //  Answers echo the harness's id as it was: integer, string, or null.
    json_t *sid = json_string ("req-9");
    CHECK (s_line_ok (ah_acp_result (sid, json_pack ("{s:{s:s, s:s}}", "outcome", "outcome", "selected",
                                                      "optionId", "allow")), AH_ACP_RESULT, &msg));
    CHECK_STR (json_string_value (msg.id), "req-9");
    CHECK_STR (json_string_value (json_object_get (json_object_get (msg.result, "outcome"), "optionId")), "allow");
    ah_acp_msg_clear (&msg);
    json_t *nid = json_integer (12);
    CHECK (s_line_ok (ah_acp_error (nid, AH_ACP_METHOD_NOT_FOUND, "no such method: x"), AH_ACP_ERROR, &msg));
    CHECK (json_integer_value (msg.id) == 12 && msg.code == AH_ACP_METHOD_NOT_FOUND);
    CHECK_STR (msg.message, "no such method: x");
    ah_acp_msg_clear (&msg);
    CHECK (s_line_ok (ah_acp_error (NULL, AH_ACP_PARSE_ERROR, "not JSON"), AH_ACP_ERROR, &msg));
    CHECK (msg.id == NULL);
    ah_acp_msg_clear (&msg);
    CHECK (ah_acp_result (sid, NULL) == NULL);
    json_decref (sid);
    json_decref (nid);

    //  A generic request and notification; params taken over either way.
    CHECK (s_line_ok (ah_acp_request (9, "session/set_mode", json_pack ("{s:s}", "modeId", "ask")),
                      AH_ACP_REQUEST, &msg));
    CHECK_STR (msg.method, "session/set_mode");
    ah_acp_msg_clear (&msg);
    CHECK (ah_acp_request (9, NULL, json_object ()) == NULL);
    CHECK (s_line_ok (ah_acp_notification ("x/y", NULL), AH_ACP_NOTIFICATION, &msg));
    CHECK (msg.params == NULL);
    ah_acp_msg_clear (&msg);
}

static void s_test_pending (void)
{
    ah_acp_pending_t pending;
    ah_acp_pending_init (&pending);
    int64_t a = ah_acp_pending_add (&pending, AH_ACP_M_INITIALIZE, NULL, 100);
    int64_t b = ah_acp_pending_add (&pending, AH_ACP_M_SESSION_PROMPT, "conv-b", 200);
    int64_t c = ah_acp_pending_add (&pending, AH_ACP_M_SESSION_LOAD, "conv-c", 300);
    CHECK (a == 1 && b == 2 && c == 3 && pending.count == 3);

    ah_acp_pending_entry_t e;
    json_t *id = json_integer (b);
    CHECK (ah_acp_pending_take (&pending, id, &e) == AH_ACP_ANSWERED);
    CHECK (e.id == b && e.method == AH_ACP_M_SESSION_PROMPT && e.sent_at == 200);
    CHECK_STR (e.tag, "conv-b");
    CHECK_STR (ah_acp_method_name (e.method), "session/prompt");
    //  The same answer again: repeated, and the table is as it was.
    CHECK (ah_acp_pending_take (&pending, id, &e) == AH_ACP_REPEATED_ID);
    CHECK (pending.count == 2);
    json_decref (id);
    //  Ids we never sent: too high, zero, negative, a string of ours.
    const char *unknown [] = { "4", "0", "-1", "\"1\"", "99999999999" };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown [0]; i++) {
        id = json_loads (unknown [i], JSON_DECODE_ANY, NULL);
        CHECK (ah_acp_pending_take (&pending, id, &e) == AH_ACP_UNKNOWN_ID);
        json_decref (id);
    }
    CHECK (ah_acp_pending_take (&pending, NULL, &e) == AH_ACP_UNKNOWN_ID);
    CHECK (pending.count == 2);

    //  Expiry: the oldest first, only those sent before the deadline; then
    //  an answer to it is a repeat.
    CHECK (ah_acp_pending_expire (&pending, 100, &e) == 0);
    CHECK (ah_acp_pending_expire (&pending, 301, &e) == 1 && e.id == a && e.method == AH_ACP_M_INITIALIZE);
    CHECK_STR (e.tag, "");
    id = json_integer (a);
    CHECK (ah_acp_pending_take (&pending, id, &e) == AH_ACP_REPEATED_ID);
    json_decref (id);
    CHECK (ah_acp_pending_expire (&pending, 301, &e) == 1 && e.id == c);
    CHECK (ah_acp_pending_expire (&pending, 301, &e) == 0 && pending.count == 0);

    //  Bounded: full at AH_ACP_PENDING_MAX; ids never come back.
    for (int i = 0; i < AH_ACP_PENDING_MAX; i++)
        CHECK (ah_acp_pending_add (&pending, AH_ACP_M_OTHER, "x", i) > c);
    CHECK (ah_acp_pending_add (&pending, AH_ACP_M_OTHER, "x", 0) == -1);
    id = json_integer (c + 1);
    CHECK (ah_acp_pending_take (&pending, id, &e) == AH_ACP_ANSWERED);
    json_decref (id);
    CHECK (ah_acp_pending_add (&pending, AH_ACP_M_OTHER, "x", 0) == c + AH_ACP_PENDING_MAX + 1);
    //  A long tag is cut, not overrun.
    char tag [200];
    memset (tag, 't', sizeof tag - 1);
    tag [sizeof tag - 1] = 0;
    ah_acp_pending_init (&pending);
    CHECK (ah_acp_pending_add (&pending, AH_ACP_M_OTHER, tag, 0) == 1);
    CHECK (strlen (pending.entries [0].tag) == AH_ACP_TAG_MAX - 1);
}

static void s_test_open (void)
{
    ah_acp_open_t open;
    ah_acp_open_init (&open);
    json_t *five = json_integer (5), *five_s = json_string ("5");
    CHECK (ah_acp_open_add (&open, five) == 0);
    CHECK (ah_acp_open_add (&open, five) == -1);        //  a collision
    CHECK (ah_acp_open_add (&open, five_s) == 0);       //  another id
    CHECK (ah_acp_open_close (&open, five) == 0);
    CHECK (ah_acp_open_close (&open, five) == -1);      //  answered already
    CHECK (ah_acp_open_add (&open, five) == 0);         //  open again after its answer
    CHECK (ah_acp_open_add (&open, NULL) == -1);
    for (int i = 100; open.count < AH_ACP_OPEN_MAX; i++) {
        json_t *id = json_integer (i);
        CHECK (ah_acp_open_add (&open, id) == 0);
        json_decref (id);
    }
    json_t *more = json_integer (99);
    CHECK (ah_acp_open_add (&open, more) == -2);
    json_decref (more);
    ah_acp_open_clear (&open);
    CHECK (open.count == 0);
    json_decref (five);
    json_decref (five_s);
}

int main (void)
{
    s_test_reader_split ();
    s_test_reader_oversize ();
    s_test_reader_eof ();
    s_test_parse ();
    s_test_builders ();
    s_test_pending ();
    s_test_open ();
    return CHECK_DONE ();
}
