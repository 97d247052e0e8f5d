/*  cli/conv.c: `agenthold prompt` and `agenthold conversations` (see
    conv.h, docs/cli.md "Conversations"). prompt is one POST .../prompt
    whose answer is a server-sent event stream (docs/api.md
    "Conversations"), read as it comes (cli/http.h): the harness's text
    to stdout, the rest (tool calls, permissions, notices, errors) to
    stderr, each string cleaned for the terminal (ah_cmd_clean). The
    exit status says how the turn ended: 0 for the stop end_turn, 1 for
    any other stop, an error that ended it, or a stream that broke.
    SIGINT, SIGTERM or SIGHUP during the turn cancel it (POST .../cancel)
    and the stream is read on to its stop: exit 128+N. A second one
    leaves at once (the turn is cancelling on the server by then). The
    handler only records the signal; the loop acts on it.             */
#include "cli/conv.h"
#include "cli/client.h"
#include "cli/cmd.h"
#include "cli/http.h"
#include "proto/buf.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINE        (20u << 20)     //  an event's data line at most (the server's cut is 16 MiB behind)
#define MAX_ERR_BODY    65536
#define MAX_TEXT        (256u << 10)    //  the API's bound on a prompt's text
#define HEAD_MS         ((120 + 30) * 1000)     //  the answer's head: a sleeping agent is woken first (120 s at most)
#define PUMP_MS         500             //  how long a read waits before the signals are looked at

static volatile sig_atomic_t s_signal, s_signals;

static void s_on_signal (int sig)
{
    s_signal = sig;
    s_signals++;
}

typedef struct {
    long status;
    bool json;
    ah_buf_t in;                    //  a line being read
    ah_buf_t err;                   //  a refusal's body
    char kind [64];                 //  the event's
    json_t *last;                   //  the last event's data
    char last_kind [64];
    bool text_open;                 //  stdout has text without its newline yet
    char why [256];
} stream_t;

//  Text as it is, each line cleaned for a terminal (newlines kept).
static void s_print_text (FILE *out, const char *text)
{
    while (text && *text) {
        const char *nl = strchr (text, '\n');
        size_t n = nl ? (size_t) (nl - text) : strlen (text);
        char *piece = ah_cmd_clean (strndup (text, n));
        fputs (piece ? piece : "", out);
        free (piece);
        if (nl)
            fputc ('\n', out);
        text += n + (nl ? 1 : 0);
    }
}

static void s_say (stream_t *s, const char *fmt, const char *a, const char *b)
{
    if (s->text_open) {
        fputc ('\n', stdout);
        s->text_open = false;
    }
    fflush (stdout);
    char *line = ah_cmd_clean (ah_cmd_strf (fmt, a ? a : "", b ? b : ""));
    fprintf (stderr, "%s\n", line ? line : "");
    free (line);
}

static void s_event (stream_t *s, json_t *data)
{
    if (s->json) {
        char *text = json_dumps (data, JSON_COMPACT);
        text = text ? ah_cmd_clean_json_text (text) : NULL;
        printf ("%s\n", text ? text : "{}");
        free (text);
        fflush (stdout);
    }
    json_t *body = json_object_get (data, "body");
    const char *kind = s->kind;
    if (!s->json) {
        if (!strcmp (kind, "turn"))
            s_say (s, "conversation %s", ah_cmd_jstr (data, "conversation", "?"), NULL);
        else if (!strcmp (kind, "update")) {
            const char *what = ah_cmd_jstr (body, "sessionUpdate", "");
            json_t *content = json_object_get (body, "content");
            const char *text = ah_cmd_jstr (content, "text", NULL);
            if (!strcmp (what, "agent_message_chunk") && text) {
                s_print_text (stdout, text);
                s->text_open = text [strlen (text) - 1] != '\n';
                fflush (stdout);
            }
        }
        else if (!strcmp (kind, "tool_call") && !strcmp (ah_cmd_jstr (body, "sessionUpdate", ""), "tool_call"))
            s_say (s, "[tool] %s (%s)", ah_cmd_jstr (body, "title", "?"), ah_cmd_jstr (body, "kind", "other"));
        else if (!strcmp (kind, "permission")) {
            char seq [32];
            snprintf (seq, sizeof seq, "%lld", (long long) json_integer_value (json_object_get (data, "seq")));
            s_say (s, "[permission asked] %s (request %s: agenthold's API answers it, docs/api.md)",
                   ah_cmd_jstr (json_object_get (body, "toolCall"), "title", "a tool call"), seq);
        }
        else if (!strcmp (kind, "permission_answer"))
            s_say (s, "[permission] %s, decided by %s",
                   ah_cmd_jstr (body, "optionId", ah_cmd_jstr (body, "outcome", "?")),
                   ah_cmd_jstr (body, "decided_by", ah_cmd_jstr (data, "who", "?")));
        else if (!strcmp (kind, "notice"))
            s_say (s, "[notice] %s", ah_cmd_jstr (body, "notice", "?"), NULL);
        else if (!strcmp (kind, "error")) {
            s_say (s, "[error] %s", ah_cmd_jstr (body, "error", "?"), NULL);
            const char *tail = ah_cmd_jstr (body, "stderr", NULL);
            if (tail && *tail) {
                s_say (s, "[error] the harness's stderr, its last bytes:", NULL, NULL);
                s_print_text (stderr, tail);
                if (tail [strlen (tail) - 1] != '\n')
                    fputc ('\n', stderr);
            }
        }
    }
    json_decref (s->last);
    s->last = json_incref (data);
    snprintf (s->last_kind, sizeof s->last_kind, "%s", kind);
}

static void s_line (stream_t *s, const char *line, size_t len)
{
    if (len && line [len - 1] == '\r')
        len--;
    if (len >= 7 && !memcmp (line, "event: ", 7))
        snprintf (s->kind, sizeof s->kind, "%.*s", (int) (len - 7 < 63 ? len - 7 : 63), line + 7);
    else if (len >= 6 && !memcmp (line, "data: ", 6)) {
        json_t *data = json_loadb (line + 6, len - 6, 0, NULL);
        if (json_is_object (data))
            s_event (s, data);
        json_decref (data);
    }
}

static int s_on_body (void *ud, const uint8_t *data, size_t len)
{
    stream_t *s = ud;
    if (s->status != 200) {
        size_t room = MAX_ERR_BODY - ah_buf_size (&s->err);
        ah_buf_append (&s->err, data, len < room ? len : room);
        return 0;
    }
    if (ah_buf_size (&s->in) + len > MAX_LINE) {
        snprintf (s->why, sizeof s->why, "an event of the stream is longer than %u bytes", MAX_LINE);
        return 1;
    }
    if (ah_buf_append (&s->in, data, len))
        return 1;
    for (;;) {
        const char *head = (const char *) ah_buf_head (&s->in);
        const char *nl = head ? memchr (head, '\n', ah_buf_size (&s->in)) : NULL;
        if (!nl)
            break;
        s_line (s, head, (size_t) (nl - head));
        ah_buf_consume (&s->in, (size_t) (nl - head) + 1);
    }
    return 0;
}

static char *s_conv_path (const char *name, const char *suffix)
{
    return ah_cmd_path ("agents", name, suffix);
}

int ah_cli_prompt (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    const char *conv = NULL;
    const char **pos = calloc ((size_t) argc + 1, sizeof *pos);
    int npos = 0;
    ah_opt_t opts [] = {
        { "--conversation", &conv, NULL }, { "--json", NULL, &co->json },
        { "--config", &co->config, NULL }, { NULL, NULL, NULL }
    };
    int rc = pos ? ah_cmd_parse (c, argc, argv, opts, pos, argc, &npos) : -1;
    if (rc || npos < 2) {
        if (!rc)
            fprintf (stderr, "agenthold prompt: needs NAME and TEXT (agenthold help prompt)\n");
        free (pos);
        return rc > 0 ? (ah_cmd_usage (c, stdout), 0) : AH_EXIT_USAGE;
    }
    ah_buf_t text = { 0 };
    for (int i = 1; i < npos; i++) {
        if (i > 1)
            ah_buf_append (&text, " ", 1);
        ah_buf_append (&text, pos [i], strlen (pos [i]));
    }
    const char *name = pos [0];
    free (pos);
    if (ah_buf_size (&text) > MAX_TEXT) {
        fprintf (stderr, "agenthold prompt: the text is %zu bytes, over the %u a prompt may hold\n",
                 ah_buf_size (&text), MAX_TEXT);
        ah_buf_free (&text);
        return AH_EXIT_USAGE;
    }
    int exit_code = 0;
    char *id = conv ? strdup (conv) : NULL;
    if (!conv) {
        char *path = s_conv_path (name, "/conversations");
        json_t *made = path ? ah_cmd_call (co, "POST", path, NULL, 0, NULL, &exit_code) : NULL;
        free (path);
        id = made && json_is_string (json_object_get (made, "id")) ? strdup (ah_cmd_jstr (made, "id", "")) : NULL;
        json_decref (made);
        if (!id) {
            ah_buf_free (&text);
            return exit_code ? exit_code : 1;
        }
    }
    char *esc = ah_hc_escape (id, false);
    char *suffix = ah_cmd_strf ("/conversations/%s/prompt", esc ? esc : "");
    char *path = s_conv_path (name, suffix);
    free (suffix);
    suffix = ah_cmd_strf ("/conversations/%s/cancel", esc ? esc : "");
    char *cancel_path = s_conv_path (name, suffix);
    free (esc);
    free (suffix);
    char *err = NULL;
    ah_client_t *client = ah_client_new (co->config, true, &err);
    char *url = client && path ? ah_client_url_for (client, path) : NULL;
    char *headers = client ? ah_client_auth (client, "Accept: text/event-stream\r\nContent-Type: application/json\r\n") : NULL;
    json_t *body = json_object ();
    json_object_set_new (body, "text", json_stringn ((const char *) ah_buf_head (&text), ah_buf_size (&text)));
    char *payload = json_object_get (body, "text") ? json_dumps (body, JSON_COMPACT) : NULL;
    json_decref (body);
    ah_buf_free (&text);
    free (path);
    stream_t s = { .json = co->json };
    if (!client || !url || !headers || !payload) {
        fprintf (stderr, "agenthold prompt: %s\n", !client ? (err ? err : "cannot reach the server")
                 : !payload ? "the text is not UTF-8" : "out of memory");
        exit_code = !payload && client ? AH_EXIT_USAGE : 1;
        goto done;
    }
    ah_hc_req_t req = { .method = "POST", .url = url, .ca = ah_client_ca (client), .headers = headers,
                        .body = payload, .body_size = strlen (payload), .on_body = s_on_body, .ud = &s,
                        .timeout_ms = HEAD_MS };
    ah_hc_t *hc = ah_hc_start (&req, &err);
    if (!hc) {
        char *why = ah_cmd_clean (err);
        err = NULL;
        fprintf (stderr, "agenthold prompt: %s\n", why ? why : "cannot reach the server");
        free (why);
        exit_code = 1;
        goto done;
    }
    s.status = ah_hc_status (hc);
    ah_hc_set_timeout (hc, 0);      //  a turn takes what it takes (the server's keep-alives)
    struct sigaction sa = { .sa_handler = s_on_signal }, old [3];
    static const int sigs [3] = { SIGINT, SIGTERM, SIGHUP };
    for (int i = 0; i < 3; i++)
        sigaction (sigs [i], &sa, &old [i]);        //  no SA_RESTART: a read is interrupted
    s_signal = s_signals = 0;
    int pumped, cancelled = 0;
    while ((pumped = ah_hc_pump (hc, PUMP_MS, &err)) == 0) {
        if (s_signals && !cancelled && s.status == 200) {
            cancelled = s_signal;
            s_say (&s, "[cancel] cancelling the turn (%s again leaves at once)",
                   cancelled == SIGINT ? "Ctrl-C" : "the signal", NULL);
            json_t *none = json_object ();
            int code = 0;
            json_decref (cancel_path ? ah_cmd_call (co, "POST", cancel_path, none, 0, NULL, &code) : NULL);
            json_decref (none);
        }
        if (s_signals > 1)
            break;                  //  the second: leave now
    }
    for (int i = 0; i < 3; i++)
        sigaction (sigs [i], &old [i], NULL);
    ah_hc_destroy (&hc);
    if (s.text_open)
        fputc ('\n', stdout);
    fflush (stdout);
    if (s.status != 200) {
        json_t *j = json_loadb ((const char *) ah_buf_head (&s.err), ah_buf_size (&s.err), 0, NULL);
        char *why = ah_client_error (j, s.status);
        fprintf (stderr, "agenthold prompt: %s\n", why ? why : "refused");
        free (why);
        json_decref (j);
        exit_code = 1;
    }
    else if (!strcmp (s.last_kind, "stop")) {
        const char *reason = ah_cmd_jstr (json_object_get (s.last, "body"), "stopReason", "?");
        if (strcmp (reason, "end_turn")) {
            char *clean = ah_cmd_clean (strdup (reason));
            fprintf (stderr, "agenthold prompt: the turn ended without finishing: stop reason %s\n", clean ? clean : "?");
            free (clean);
            exit_code = 1;
        }
    }
    else if (!strcmp (s.last_kind, "error")) {
        char *clean = ah_cmd_clean (strdup (ah_cmd_jstr (json_object_get (s.last, "body"), "error", "?")));
        fprintf (stderr, "agenthold prompt: the turn failed: %s\n", clean ? clean : "?");
        free (clean);
        exit_code = 1;
    }
    else {
        char *clean = ah_cmd_clean (err ? strdup (err) : NULL);
        fprintf (stderr, "agenthold prompt: the stream ended before the turn did%s%s%s%s\n",
                 clean || s.why [0] ? ": " : "", s.why, s.why [0] && clean ? "; " : "", clean ? clean : "");
        free (clean);
        exit_code = 1;
    }
    if (cancelled)
        exit_code = 128 + cancelled;
done:
    free (err);
    free (payload);
    free (cancel_path);
    free (url);
    free (id);
    ah_client_auth_free (headers);
    ah_client_destroy (&client);
    ah_buf_free (&s.in);
    ah_buf_free (&s.err);
    json_decref (s.last);
    return exit_code;
}

static void s_print_convs (json_t *list)
{
    static const char *const header [] = { "ID", "TURN", "ACP SESSION", "CREATED", "LAST ACTIVITY" };
    static const char *const keys [] = { "id", "turn_state", "acp_session_id", "created_at", "last_activity_at" };
    ah_cmd_print_objects (list, header, keys, 5);
}

int ah_cli_conversations (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    return ah_cmd_agent_list (c, argc, argv, co, "/conversations", "conversations", s_print_convs);
}
