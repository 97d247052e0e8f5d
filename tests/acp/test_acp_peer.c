/*  tests/acp/test_acp_peer.c: the ACP client's wire pieces (proto/acp.h)
    and the conversation log (store/conversations.h) against a real
    third-party harness: the ACP Go SDK's example agent, built by
    tests/acp/build-example-agent (skipped, exit 77, when it cannot be
    built here), run on local pipes. Every line it writes goes through
    the reader in the chunks read() gives, every message through the
    parser; our requests are the builders' and our ids the pending
    table's. Shown:
    - initialize: protocol 1, and neither loadSession nor resume (so the
      restore after a boot would be the context-reset notice);
    - a turn: session/new, session/prompt, the streamed updates (text
      and tool calls), the permission asked, answered "allow", and the
      stop reason end_turn answering our prompt's id;
    - a cancelled turn: session/cancel after its first update, the
      permission (if asked) answered "cancelled", stop reason cancelled;
    - the log of both written and read back in order;
    - the harness exits 0 at the end of its stdin.                      */
#include "proto/acp.h"
#include "store/conversations.h"
#include "tests/common/check.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    pid_t pid;
    int in, out;                    //  its stdin (we write), its stdout (we read)
    ah_acp_reader_t reader;
    ah_acp_pending_t pending;
    ah_acp_open_t open;
    ah_store_t *store;
    char conv [AH_CONV_ID_LEN + 1];
    //  What the current turn saw
    int chunks, tool_calls, tool_updates, permissions, errors, lines;
    char stop [32];                 //  the prompt's stopReason once answered
    int64_t prompt_id;
    bool cancel_at_first_update, cancelled;
    char session [AH_CONV_SESSION_MAX + 1];
    json_t *answer;                 //  the last result that answered one of ours
    ah_acp_method_t answered;
} peer_t;

static int64_t s_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void s_send (peer_t *p, char *line)
{
    CHECK (line != NULL);
    if (!line)
        return;
    size_t n = strlen (line), at = 0;
    while (at < n) {
        ssize_t w = write (p->in, line + at, n - at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        at += (size_t) w;
    }
    CHECK (at == n);
    free (line);
}

static void s_log (peer_t *p, const char *kind, json_t *body, const char *who)
{
    char *text = json_dumps (body, JSON_COMPACT);
    json_decref (body);
    CHECK (text && ah_store_conversation_append (p->store, p->conv, kind, text, strlen (text), who,
                                                 ah_store_now_ms ()) > 0);
    free (text);
}

static void s_request (peer_t *p, const ah_acp_msg_t *msg)
{
    CHECK (ah_acp_open_add (&p->open, msg->id) == 0);
    if (strcmp (msg->method, "session/request_permission") != 0) {
        s_send (p, ah_acp_error (msg->id, AH_ACP_METHOD_NOT_FOUND, "not served by this test"));
        ah_acp_open_close (&p->open, msg->id);
        return;
    }
    p->permissions++;
    s_log (p, "permission", json_deep_copy (msg->params), "harness");
    //  ACP: once a turn is cancelled, pending permissions are answered
    //  "cancelled"; else we pick the option whose id is "allow".
    json_t *outcome = p->cancelled
        ? json_pack ("{s:{s:s}}", "outcome", "outcome", "cancelled")
        : json_pack ("{s:{s:s, s:s}}", "outcome", "outcome", "selected", "optionId", "allow");
    s_log (p, "permission_answer", json_deep_copy (outcome), "api:test");
    s_send (p, ah_acp_result (msg->id, outcome));
    CHECK (ah_acp_open_close (&p->open, msg->id) == 0);
}

static void s_update (peer_t *p, const ah_acp_msg_t *msg)
{
    json_t *update = json_object_get (msg->params, "update");
    const char *what = json_string_value (json_object_get (update, "sessionUpdate"));
    CHECK_STR (json_string_value (json_object_get (msg->params, "sessionId")), p->session);
    if (!what)
        return;
    bool tool = strcmp (what, "tool_call") == 0 || strcmp (what, "tool_call_update") == 0;
    if (strcmp (what, "agent_message_chunk") == 0)
        p->chunks++;
    else
    if (strcmp (what, "tool_call") == 0)
        p->tool_calls++;
    else
    if (strcmp (what, "tool_call_update") == 0)
        p->tool_updates++;
    s_log (p, tool ? "tool_call" : "update", json_incref (update), "harness");
    if (p->cancel_at_first_update && !p->cancelled) {
        p->cancelled = true;
        s_send (p, ah_acp_session_cancel (p->session));
    }
}

static void s_answer (peer_t *p, const ah_acp_msg_t *msg)
{
    ah_acp_pending_entry_t e;
    ah_acp_match_t m = ah_acp_pending_take (&p->pending, msg->id, &e);
    CHECK (m == AH_ACP_ANSWERED);
    if (m != AH_ACP_ANSWERED)
        return;
    if (msg->kind == AH_ACP_ERROR) {
        p->errors++;
        fprintf (stderr, "%s answered an error: %s\n", ah_acp_method_name (e.method), msg->message);
        return;
    }
    json_decref (p->answer);
    p->answer = json_incref (msg->result);
    p->answered = e.method;
    if (e.method == AH_ACP_M_SESSION_PROMPT) {
        CHECK (e.id == p->prompt_id);
        CHECK_STR (e.tag, p->conv);
        const char *reason = json_string_value (json_object_get (msg->result, "stopReason"));
        snprintf (p->stop, sizeof p->stop, "%s", reason ? reason : "?");
        s_log (p, "stop", json_pack ("{s:s}", "stopReason", p->stop), "harness");
    }
}

static void s_line (void *ud, const char *line, size_t size, const char *error)
{
    peer_t *p = ud;
    p->lines++;
    if (error) {
        fprintf (stderr, "reader: %s\n", error);
        p->errors++;
        return;
    }
    ah_acp_msg_t msg;
    char why [AH_ACP_WHY_MAX];
    if (ah_acp_parse (line, size, &msg, why) != 0) {
        fprintf (stderr, "parse: %s: %.*s\n", why, (int) (size > 200 ? 200 : size), line);
        p->errors++;
    }
    else
    if (msg.kind == AH_ACP_REQUEST)
        s_request (p, &msg);
    else
    if (msg.kind == AH_ACP_NOTIFICATION && strcmp (msg.method, "session/update") == 0)
        s_update (p, &msg);
    else
    if (msg.kind == AH_ACP_RESULT || msg.kind == AH_ACP_ERROR)
        s_answer (p, &msg);
    ah_acp_msg_clear (&msg);
}

//  Reads the harness until done says so, or the deadline: true when done.
static bool s_until (peer_t *p, bool (*done) (peer_t *), int timeout_ms)
{
    int64_t end = s_now () + timeout_ms;
    while (!done (p)) {
        int64_t left = end - s_now ();
        if (left <= 0)
            return false;
        struct pollfd pfd = { .fd = p->out, .events = POLLIN };
        if (poll (&pfd, 1, (int) left) <= 0)
            continue;
        char buf [1024];            //  small reads: lines arrive in pieces
        ssize_t n = read (p->out, buf, sizeof buf);
        if (n <= 0) {
            ah_acp_reader_eof (&p->reader, s_line, p);
            return done (p);
        }
        ah_acp_reader_feed (&p->reader, buf, (size_t) n, s_line, p);
    }
    return true;
}

static bool s_answered (peer_t *p) { return p->answer != NULL; }
static bool s_stopped (peer_t *p) { return p->stop [0] != 0; }

//  Sends a request made by build with a new id, and waits for its result.
static json_t *s_call (peer_t *p, ah_acp_method_t method, char *(*build) (peer_t *, int64_t))
{
    json_decref (p->answer);
    p->answer = NULL;
    int64_t id = ah_acp_pending_add (&p->pending, method, p->conv, s_now ());
    CHECK (id > 0);
    s_send (p, build (p, id));
    CHECK (s_until (p, s_answered, 20000));
    CHECK (p->answered == method);
    return p->answer;
}

static char *s_build_initialize (peer_t *p, int64_t id)
{
    ah_acp_client_t client = { .fs_read = false, .fs_write = false, .terminal = false,
                               .name = "agenthold-test", .version = "0" };
    return ah_acp_initialize (id, &client);
}

static char *s_build_new (peer_t *p, int64_t id)
{
    return ah_acp_session_new (id, "/tmp");
}

static void s_turn (peer_t *p, const char *text, bool cancel)
{
    p->chunks = p->tool_calls = p->tool_updates = p->permissions = 0;
    p->stop [0] = 0;
    p->cancel_at_first_update = cancel;
    p->cancelled = false;
    json_t *prompt = json_pack ("{s:s}", "text", text);
    s_log (p, "prompt", prompt, "api:test");
    p->prompt_id = ah_acp_pending_add (&p->pending, AH_ACP_M_SESSION_PROMPT, p->conv, s_now ());
    s_send (p, ah_acp_session_prompt (p->prompt_id, p->session, text, strlen (text)));
    CHECK (s_until (p, s_stopped, 30000));
}

typedef struct {
    char kinds [256][24];
    int count;
} kinds_t;

static int s_kind (void *ud, const ah_conv_entry_t *e)
{
    kinds_t *k = ud;
    if (k->count < 256)
        snprintf (k->kinds [k->count], sizeof k->kinds [0], "%s", e->kind);
    k->count++;
    return 0;
}

//  The path of the example agent, built (or found in the cache) by the
//  script; NULL with *skip when it cannot be built here.
static char *s_build (const char *script, const char *outdir, bool *skip)
{
    char command [2048];
    snprintf (command, sizeof command, "'%s' '%s'", script, outdir);
    FILE *f = popen (command, "r");
    char path [1024] = "";
    if (f && !fgets (path, sizeof path, f))
        path [0] = 0;
    int status = f ? pclose (f) : -1;
    path [strcspn (path, "\n")] = 0;
    *skip = WIFEXITED (status) && WEXITSTATUS (status) == 2;
    return WIFEXITED (status) && WEXITSTATUS (status) == 0 && *path ? strdup (path) : NULL;
}

static int s_spawn (peer_t *p, const char *agent)
{
    int in [2], out [2];
    if (pipe2 (in, O_CLOEXEC) || pipe2 (out, O_CLOEXEC))
        return -1;
    p->pid = fork ();
    if (p->pid == 0) {
        dup2 (in [0], 0);
        dup2 (out [1], 1);
        int null = open ("/dev/null", O_WRONLY);
        dup2 (null, 2);             //  its own log
        execl (agent, agent, (char *) NULL);
        _exit (127);
    }
    close (in [0]);
    close (out [1]);
    p->in = in [1];
    p->out = out [0];
    return p->pid > 0 ? 0 : -1;
}

int main (int argc, char **argv)
{
    signal (SIGPIPE, SIG_IGN);
    if (argc != 3) {
        fprintf (stderr, "usage: %s BUILD-SCRIPT OUTDIR\n", argv [0]);
        return 2;
    }
    bool skip = false;
    char *agent = s_build (argv [1], argv [2], &skip);
    if (!agent) {
        fprintf (stderr, "SKIPPED: the ACP Go SDK's example agent cannot be built here (%s)\n",
                 skip ? "no Go >= 1.24 or no way to the module proxy" : "the build failed");
        return skip ? 77 : 1;
    }
    char dir [] = "/tmp/ah-test-acp-peer-XXXXXX";
    CHECK (mkdtemp (dir) != NULL);
    char db [256];
    snprintf (db, sizeof db, "%s/conv.db", dir);
    static peer_t peer;
    peer_t *p = &peer;
    ah_acp_reader_init (&p->reader, 0);
    ah_acp_pending_init (&p->pending);
    ah_acp_open_init (&p->open);
    p->store = ah_store_open (db, true, NULL);
    CHECK (p->store != NULL);
    CHECK (p->store && ah_store_exec (p->store, "INSERT INTO agents (id, name, tenant, image, cpus, memory_mb,"
                                      " idle_minutes, created_at) VALUES ('aaaaaaaaaaaa', 'coder', 'default',"
                                      " 'i', 1, 64, 15, 0)", NULL) == 0);
    CHECK (p->store && ah_store_conversation_create (p->store, "aaaaaaaaaaaa", ah_store_now_ms (), p->conv) == 1);
    CHECK (s_spawn (p, agent) == 0);

    //  initialize: ACP 1; neither load nor resume advertised.
    json_t *init = s_call (p, AH_ACP_M_INITIALIZE, s_build_initialize);
    CHECK (json_integer_value (json_object_get (init, "protocolVersion")) == AH_ACP_PROTOCOL_VERSION);
    json_t *caps = json_object_get (init, "agentCapabilities");
    CHECK (json_is_object (caps));
    CHECK (!json_is_true (json_object_get (caps, "loadSession")));
    CHECK (json_object_get (json_object_get (caps, "sessionCapabilities"), "resume") == NULL);

    json_t *made = s_call (p, AH_ACP_M_SESSION_NEW, s_build_new);
    const char *sid = json_string_value (json_object_get (made, "sessionId"));
    CHECK (sid && strlen (sid) <= AH_CONV_SESSION_MAX);
    snprintf (p->session, sizeof p->session, "%s", sid ? sid : "");
    CHECK (ah_store_conversation_set_session (p->store, p->conv, p->session) == 1);

    //  A whole turn.
    s_turn (p, "hello", false);
    CHECK_STR (p->stop, "end_turn");
    CHECK (p->chunks >= 1 && p->tool_calls >= 1 && p->tool_updates >= 1);
    CHECK (p->permissions == 1);
    fprintf (stderr, "turn: %d text chunks, %d tool calls, %d tool updates, %d permissions\n",
             p->chunks, p->tool_calls, p->tool_updates, p->permissions);

    //  A cancelled turn.
    s_turn (p, "again, but stop", true);
    CHECK_STR (p->stop, "cancelled");
    fprintf (stderr, "cancelled turn: %d updates before the stop, %d permissions\n",
             p->chunks + p->tool_calls + p->tool_updates, p->permissions);

    CHECK (p->errors == 0);
    CHECK (p->pending.count == 0 && p->open.count == 0);

    //  The log, in order: a prompt first, the permission before its
    //  answer, a stop last, twice.
    kinds_t k = { 0 };
    CHECK (ah_store_conversation_log (p->store, p->conv, 0, 1000, s_kind, &k) > 0);
    int prompts = 0, stops = 0, permission_at = -1, answer_at = -1;
    for (int i = 0; i < k.count && i < 256; i++) {
        prompts += strcmp (k.kinds [i], "prompt") == 0;
        stops += strcmp (k.kinds [i], "stop") == 0;
        if (strcmp (k.kinds [i], "permission") == 0 && permission_at < 0)
            permission_at = i;
        if (strcmp (k.kinds [i], "permission_answer") == 0 && answer_at < 0)
            answer_at = i;
    }
    CHECK_STR (k.kinds [0], "prompt");
    CHECK (k.count > 0 && k.count <= 256 && strcmp (k.kinds [k.count - 1], "stop") == 0);
    CHECK (prompts == 2 && stops == 2);
    CHECK (permission_at > 0 && answer_at == permission_at + 1);

    //  The end of its stdin ends it, cleanly.
    close (p->in);
    int status = -1;
    for (int i = 0; i < 100 && waitpid (p->pid, &status, WNOHANG) == 0; i++)
        usleep (50000);
    if (!WIFEXITED (status)) {
        kill (p->pid, SIGKILL);
        waitpid (p->pid, &status, 0);
    }
    CHECK (WIFEXITED (status) && WEXITSTATUS (status) == 0);

    json_decref (p->answer);
    ah_acp_reader_clear (&p->reader);
    ah_acp_open_clear (&p->open);
    close (p->out);
    ah_store_close (&p->store);
    free (agent);
    char command [128];
    snprintf (command, sizeof command, "rm -rf '%s'", dir);
    if (system (command) != 0)
        fprintf (stderr, "could not remove %s\n", dir);
    return CHECK_DONE ();
}
