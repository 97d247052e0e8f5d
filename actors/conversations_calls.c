/*  actors/conversations_calls.c: the harness's file (fs) and terminal
    requests, for the conversations actor (conversations_int.h).        */
#include "actors/conversations_int.h"
#include "common/homepath.h"
#include "common/str.h"
#include "proto/channel.h"

#include <signal.h>
#include <string.h>

//  --------------------------------------------------------------------
//  The harness's fs/* and terminal/* requests (docs/conversations.md
//  "What the harness may ask"): each one channel to sandboxd, opened
//  like the file and exec routes open theirs, answered when sandboxd's
//  bytes are in; nothing here waits. Paths are absolute in ACP: the
//  home's /home/agent/ is taken off and the rest is a common/homepath.h
//  path, judged again by sandboxd (symlinks that lead out are refused).


typedef enum { K_READ = 1, K_WRITE, K_TERM } call_kind_t;

typedef struct call_t {
    struct call_t *next;
    call_kind_t kind;
    char agent_id [32];
    int64_t gen;                    //  the harness generation that asked
    json_t *id;                     //  the pending request's id (held): read, write, create
    int64_t open_req;               //  CHAN_OPEN's, while opening
    int64_t chan;
    char detail [4200];             //  the audit's: a path, a command line
    ah_buf_t buf;                   //  read: the bytes; write: the content, then the trailer
    int64_t line, limit;            //  read: ACP's (0: absent)
    int64_t size;                   //  read: announced
    bool written;                   //  write: the bytes and EOF are sent
    //  terminals
    char term [32];                 //  its id ("term-N")
    ah_rec_reader_t rec;
    size_t out_limit;
    bool truncated;
    bool exited;
    int status, sig;
    uint8_t exit [EXIT_MAX];
    size_t exit_len;
    json_t *waiters;                //  ids of wait_for_exit requests (array, held)
    bool gone;                      //  released: freed at the next sweep
} call_t;


static void s_audit (self_t *self, const char *agent_id, const char *kind, const char *detail,
                     bool ok, const char *error, int64_t bytes)
{
    ah_msg_t *m = ah_msg_new ("OP_RECORD");
    ah_msg_set_str (m, "agent_id", agent_id);
    ah_msg_set_str (m, "actor", "harness");
    ah_msg_set_str (m, "kind", kind);
    if (detail && *detail)
        ah_msg_set_str (m, "detail", detail);
    ah_msg_set_bool (m, "ok", ok);
    if (!ok && error)
        ah_msg_set_str (m, "error", error);
    if (bytes >= 0)
        ah_msg_set_int (m, "bytes", bytes);
    ah_actor_send (self->actor, "recorder", &m);
}

//  The harness that asked, if it still runs (the same process).
static harness_t *s_call_harness (self_t *self, call_t *k)
{
    harness_t *h = zhashx_lookup (self->harnesses, k->agent_id);
    return h && h->state != H_GONE && h->gen == k->gen ? h : NULL;
}

//  Answers request id of h's harness: result (taken) or, when NULL, the
//  error code and message. The id leaves the open ones.
static void s_call_reply (harness_t *h, json_t *id, json_t *result, int code, const char *message)
{
    if (!h || !id) {
        json_decref (result);
        return;
    }
    ah_cv_send_line (h, result ? ah_acp_result (id, result) : ah_acp_error (id, code, message));
    ah_acp_open_close (&h->open, id);
}

static void s_call_close_chan (self_t *self, call_t *k)
{
    if (k->chan) {
        ah_msg_t *m = ah_msg_new ("CHAN_CLOSE");
        ah_msg_set_int (m, "chan", k->chan);
        ah_actor_send (self->actor, "tunnel", &m);
    }
    k->chan = 0;
}

//  A read or write, or a terminal's create, ends: answered (error when
//  message), audited, its channel closed; the call is freed at the sweep.
static void s_call_done (self_t *self, call_t *k, json_t *result, int code, const char *message, int64_t bytes)
{
    harness_t *h = s_call_harness (self, k);
    const char *kind = k->kind == K_READ ? "harness.fs.read" : k->kind == K_WRITE ? "harness.fs.write" : "harness.terminal";
    if (k->id) {
        s_audit (self, k->agent_id, kind, k->detail, result != NULL, message, result ? bytes : -1);
        s_call_reply (h, k->id, result, code, message);
        json_decref (k->id);
        k->id = NULL;
    }
    else
        json_decref (result);
    if (k->kind != K_TERM || !result) {
        s_call_close_chan (self, k);
        k->gone = true;
    }
}

static void s_call_free (call_t *k)
{
    json_decref (k->id);
    json_decref (k->waiters);
    ah_buf_free (&k->buf);
    free (k);
}

//  Frees the calls done, and those whose harness is gone (their
//  channels closed: an exec's RST kills its process group).
void ah_cv_calls_sweep (self_t *self)
{
    call_t **pp = &self->calls;
    while (*pp) {
        call_t *k = *pp;
        if (!k->gone && !s_call_harness (self, k)) {
            s_call_close_chan (self, k);
            k->gone = true;
        }
        if (k->gone && !k->open_req) {
            *pp = k->next;
            s_call_free (k);
        }
        else
            pp = &k->next;
    }
}

static call_t *s_call_by_chan (self_t *self, int64_t chan)
{
    for (call_t *k = self->calls; k; k = k->next)
        if (chan && k->chan == chan)
            return k;
    return NULL;
}

//  An absolute ACP path under /home/agent as a home path in clean: 0, or
//  -1 with why. dir: the home itself may be named (a terminal's cwd: "").
static int s_acp_path (const char *path, bool dir, char clean [AH_HOMEPATH_MAX + 1], char *why, size_t why_size)
{
    static const char home [] = "/home/agent";
    if (!path) {
        snprintf (why, why_size, "the path is missing (ACP paths are absolute, under /home/agent)");
        return -1;
    }
    size_t n = strlen (path), hn = sizeof home - 1;
    if (strncmp (path, home, hn) || (path [hn] && path [hn] != '/')) {
        snprintf (why, why_size, "path '%.200s' is not under /home/agent (the agent's home is all the harness may reach)", path);
        return -1;
    }
    if (dir && (n == hn || (n == hn + 1))) {
        clean [0] = '\0';
        return 0;
    }
    const char *rest = path + hn + (path [hn] ? 1 : 0);
    const char *bad = NULL;
    if (ah_homepath_check (rest, strlen (rest), 0, &bad)) {
        snprintf (why, why_size, "path '%.200s' %s", path, bad ? bad : "is not a path in the home");
        return -1;
    }
    snprintf (clean, AH_HOMEPATH_MAX + 1, "%s", rest);
    return 0;
}

static void s_call_open (self_t *self, call_t *k, ah_msg_t **header_p)
{
    ah_msg_t *m = ah_msg_new ("CHAN_OPEN");
    uint8_t *data = NULL;
    size_t size = 0;
    bool bad = ah_msg_encode (*header_p, &data, &size) || ah_msg_set_raw (m, "header", data, size);
    free (data);
    ah_msg_destroy (header_p);
    if (bad) {
        ah_msg_destroy (&m);
        s_call_done (self, k, NULL, AH_ACP_INTERNAL_ERROR, "the channel's header could not be encoded", -1);
        return;
    }
    k->open_req = ++self->next_req;
    ah_msg_set_int (m, "req", k->open_req);
    ah_msg_set_str (m, "agent_id", k->agent_id);
    ah_actor_send (self->actor, "tunnel", &m);
}

static call_t *s_term (self_t *self, harness_t *h, json_t *params, char *why, size_t why_size)
{
    const char *id = json_string_value (json_object_get (params, "terminalId"));
    for (call_t *k = self->calls; id && k; k = k->next)
        if (k->kind == K_TERM && !k->gone && !k->id && streq (k->term, id) && streq (k->agent_id, h->agent_id)
            && k->gen == h->gen)
            return k;
    snprintf (why, why_size, "no such terminal '%.64s' (unknown, still being created, or released)", id ? id : "");
    return NULL;
}

//  '...' for sh, each ' as '\''.
static void s_quote (ah_buf_t *b, const char *s)
{
    ah_buf_append (b, "'", 1);
    for (; *s; s++)
        if (*s == '\'')
            ah_buf_append (b, "'\\''", 4);
        else
            ah_buf_append (b, s, 1);
    ah_buf_append (b, "'", 1);
}

//  ACP's signal: its name ("SIGKILL"), or null when it exited.
static json_t *s_signal_name (int sig)
{
    const char *abbrev = sig > 0 ? sigabbrev_np (sig) : NULL;
    return !sig ? json_null () : abbrev ? json_sprintf ("SIG%s", abbrev) : json_sprintf ("%d", sig);
}

static json_t *s_term_output (call_t *k)
{
    json_t *out = json_pack ("{s:o, s:b}", "output",
                             ah_json_bytes ((const char *) ah_buf_head (&k->buf), ah_buf_size (&k->buf)),
                             "truncated", k->truncated);
    if (k->exited)
        json_object_set_new (out, "exitStatus", json_pack ("{s:o, s:o}",
            "exitCode", k->status >= 0 ? json_integer (k->status) : json_null (),
            "signal", s_signal_name (k->sig)));
    return out;
}

//  Keeps at most out_limit bytes of output, the last, from a character's start.
static void s_term_keep (call_t *k, const uint8_t *data, size_t size)
{
    ah_buf_append (&k->buf, data, size);
    size_t n = ah_buf_size (&k->buf);
    if (n <= k->out_limit)
        return;
    size_t cut = n - k->out_limit;
    const uint8_t *p = ah_buf_head (&k->buf);
    while (cut < n && (p [cut] & 0xc0) == 0x80)
        cut++;
    ah_buf_consume (&k->buf, cut);
    k->truncated = true;
}

static void s_term_exited (self_t *self, call_t *k)
{
    if (k->exited)
        return;
    k->exited = true;
    if (ah_procchan_exit (k->exit, k->exit_len, &k->status, &k->sig)) {
        k->status = -1;
        k->sig = 0;
    }
    harness_t *h = s_call_harness (self, k);
    size_t i;
    json_t *w;
    json_array_foreach (k->waiters, i, w)
        s_call_reply (h, w, json_pack ("{s:o, s:o}",
            "exitCode", k->status >= 0 ? json_integer (k->status) : json_null (),
            "signal", s_signal_name (k->sig)), 0, NULL);
    json_array_clear (k->waiters);
}

static int s_term_record (void *arg, uint8_t kind, const uint8_t *data, size_t size, bool last)
{
    call_t *k = arg;
    if (kind == AH_REC_STDOUT || kind == AH_REC_STDERR)
        s_term_keep (k, data, size);
    else if (kind == AH_REC_EXIT) {
        size_t n = size < EXIT_MAX - k->exit_len ? size : EXIT_MAX - k->exit_len;
        memcpy (k->exit + k->exit_len, data, n);
        k->exit_len += n;
        if (last)
            return 2;               //  (s_term_exited)
    }
    return 0;
}

//  A request of the harness for fs/* or terminal/*: served, or answered
//  with an error at once. true when method is one of them.
bool ah_cv_serve (self_t *self, harness_t *h, conv_t *c, ah_acp_msg_t *msg)
{
    const char *m = msg->method;
    bool fs = streq (m, "fs/read_text_file") || streq (m, "fs/write_text_file");
    bool term = !strncmp (m, "terminal/", 9);
    if (!fs && !term)
        return false;
    char why [400];
    char clean [AH_HOMEPATH_MAX + 1];
    json_t *params = msg->params;
    if (!c) {
        ah_cv_send_line (h, ah_acp_error (msg->id, AH_ACP_INVALID_PARAMS, "no such session (sessionId)"));
        ah_acp_open_close (&h->open, msg->id);
        return true;
    }
    ah_cv_log (self, c, "harness_call", json_pack ("{s:s, s:b}", "method", m, "served", 1), "harness", false);
    if (fs || streq (m, "terminal/create")) {
        size_t n = 0;
        for (call_t *k = self->calls; k; k = k->next)
            if (!k->gone && streq (k->agent_id, h->agent_id))
                n++;
        if (n >= AH_CONV_TERMINALS_MAX + AH_ACP_OPEN_MAX) {
            ah_cv_send_line (h, ah_acp_error (msg->id, AH_ACP_INVALID_REQUEST, "too many file and terminal requests at once"));
            ah_acp_open_close (&h->open, msg->id);
            return true;
        }
    }
    call_t *k = NULL;
    if (fs) {
        bool read = streq (m, "fs/read_text_file");
        json_t *content = json_object_get (params, "content");
        json_t *line = json_object_get (params, "line"), *limit = json_object_get (params, "limit");
        const char *bad = NULL;
        if (s_acp_path (json_string_value (json_object_get (params, "path")), false, clean, why, sizeof why))
            bad = why;
        else if (!read && !json_is_string (content))
            bad = "fs/write_text_file needs content, a string";
        else if (!read && json_string_length (content) > AH_CONV_FS_WRITE_MAX)
            snprintf (why, sizeof why, "content of %zu bytes is over the %u a harness may write at once",
                      json_string_length (content), AH_CONV_FS_WRITE_MAX), bad = why;
        else if (read && ((line && !json_is_null (line) && (!json_is_integer (line) || json_integer_value (line) < 1))
                       || (limit && !json_is_null (limit) && (!json_is_integer (limit) || json_integer_value (limit) < 0))))
            bad = "line must be an integer from 1 and limit one from 0";
        if (bad) {
            s_audit (self, h->agent_id, read ? "harness.fs.read" : "harness.fs.write",
                     json_string_value (json_object_get (params, "path")), false, bad, -1);
            ah_cv_send_line (h, ah_acp_error (msg->id, AH_ACP_INVALID_PARAMS, bad));
            ah_acp_open_close (&h->open, msg->id);
            return true;
        }
        k = calloc (1, sizeof *k);
        if (!k)
            goto oom;
        k->kind = read ? K_READ : K_WRITE;
        snprintf (k->detail, sizeof k->detail, "%s", clean);
        k->line = json_is_integer (line) ? json_integer_value (line) : 0;
        k->limit = json_is_integer (limit) ? json_integer_value (limit) : -1;
        if (!read)
            ah_buf_append (&k->buf, json_string_value (content), json_string_length (content));
    }
    else if (streq (m, "terminal/create")) {
        size_t n = 0;
        for (call_t *t = self->calls; t; t = t->next)
            if (t->kind == K_TERM && !t->gone && streq (t->agent_id, h->agent_id))
                n++;
        const char *command = json_string_value (json_object_get (params, "command"));
        json_t *args = json_object_get (params, "args"), *env = json_object_get (params, "env");
        json_t *cwd = json_object_get (params, "cwd"), *lim = json_object_get (params, "outputByteLimit");
        const char *bad = NULL;
        clean [0] = '\0';
        if (n >= AH_CONV_TERMINALS_MAX)
            snprintf (why, sizeof why, "too many terminals: %d at a time (release one)", AH_CONV_TERMINALS_MAX), bad = why;
        else if (!command || !*command)
            bad = "terminal/create needs command, a string";
        else if (args && !json_is_null (args) && !json_is_array (args))
            bad = "args must be an array of strings";
        else if (env && !json_is_null (env) && !json_is_array (env))
            bad = "env must be an array of {name, value}";
        else if (lim && !json_is_null (lim) && (!json_is_integer (lim) || json_integer_value (lim) < 0))
            bad = "outputByteLimit must be an integer from 0";
        else if (cwd && !json_is_null (cwd) && s_acp_path (json_string_value (cwd), true, clean, why, sizeof why))
            bad = why;
        ah_buf_t cmd = { 0 };
        size_t i;
        json_t *v;
        json_array_foreach (bad ? NULL : env, i, v) {
            const char *name = json_string_value (json_object_get (v, "name"));
            const char *value = json_string_value (json_object_get (v, "value"));
            bool ok = name && value && *name && !(*name >= '0' && *name <= '9');
            for (const char *p = name; ok && *p; p++)
                ok = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_';
            if (!ok) {
                bad = "env entries need a name (letters, digits, _) and a string value";
                break;
            }
            ah_buf_appendf (&cmd, "%s=", name);
            s_quote (&cmd, value);
            ah_buf_append (&cmd, " ", 1);
        }
        if (!bad) {
            s_quote (&cmd, command);
            json_array_foreach (args, i, v) {
                if (!json_is_string (v)) {
                    bad = "args must be an array of strings";
                    break;
                }
                ah_buf_append (&cmd, " ", 1);
                s_quote (&cmd, json_string_value (v));
            }
        }
        char *line = bad ? NULL : ah_buf_cstr (&cmd);
        if (!bad && (!line || strlen (line) > 65536))
            bad = "the command line is over 64 KiB";
        if (bad) {
            ah_buf_free (&cmd);
            s_audit (self, h->agent_id, "harness.terminal", command, false, bad, -1);
            ah_cv_send_line (h, ah_acp_error (msg->id, AH_ACP_INVALID_PARAMS, bad));
            ah_acp_open_close (&h->open, msg->id);
            return true;
        }
        k = calloc (1, sizeof *k);
        if (!k) {
            ah_buf_free (&cmd);
            goto oom;
        }
        k->kind = K_TERM;
        snprintf (k->detail, sizeof k->detail, "%s", line);
        k->out_limit = lim && json_is_integer (lim) && (uint64_t) json_integer_value (lim) < AH_CONV_TERM_OUTPUT_MAX
                     ? (size_t) json_integer_value (lim) : AH_CONV_TERM_OUTPUT_MAX;
        k->waiters = json_array ();
        snprintf (k->term, sizeof k->term, "term-%" PRId64, ++self->next_term);
        ah_msg_t *hd = ah_msg_new ("HDR");
        ah_msg_set_str (hd, "ch", "exec");
        ah_msg_set_str (hd, "cmd", line);
        ah_msg_set_int (hd, "timeout", AH_CONV_TERM_TIMEOUT_S);
        if (clean [0])
            ah_msg_set_str (hd, "cwd", clean);
        ah_buf_free (&cmd);
        snprintf (k->agent_id, sizeof k->agent_id, "%s", h->agent_id);
        k->gen = h->gen;
        k->id = json_incref (msg->id);
        k->next = self->calls;
        self->calls = k;
        s_call_open (self, k, &hd);
        return true;
    }
    else {
        call_t *t = s_term (self, h, params, why, sizeof why);
        if (!t)
            ah_cv_send_line (h, ah_acp_error (msg->id, AH_ACP_INVALID_PARAMS, why));
        else if (streq (m, "terminal/output"))
            ah_cv_send_line (h, ah_acp_result (msg->id, s_term_output (t)));
        else if (streq (m, "terminal/wait_for_exit") && !t->exited) {
            if (json_array_size (t->waiters) >= 4)
                ah_cv_send_line (h, ah_acp_error (msg->id, AH_ACP_INVALID_REQUEST, "4 wait_for_exit wait on this terminal already"));
            else {
                json_array_append (t->waiters, msg->id);
                return true;        //  open until it exits
            }
        }
        else if (streq (m, "terminal/wait_for_exit")) {
            json_t *o = s_term_output (t);
            json_t *st = json_incref (json_object_get (o, "exitStatus"));
            json_decref (o);
            ah_cv_send_line (h, ah_acp_result (msg->id, st));
        }
        else if (streq (m, "terminal/kill")) {
            if (t->chan && !t->exited) {
                ah_buf_t rec = { 0 };
                ah_rec_append (&rec, AH_REC_KILL, "", 0);
                ah_msg_t *d = ah_msg_new ("CHAN_DATA");
                ah_msg_set_int (d, "chan", t->chan);
                ah_msg_set_bin (d, "data", ah_buf_head (&rec), ah_buf_size (&rec));
                ah_actor_send (self->actor, "tunnel", &d);
                ah_buf_free (&rec);
            }
            s_audit (self, h->agent_id, "harness.terminal.kill", t->detail, true, NULL, -1);
            ah_cv_send_line (h, ah_acp_result (msg->id, json_object ()));
        }
        else if (streq (m, "terminal/release")) {
            s_audit (self, h->agent_id, "harness.terminal.release", t->detail, true, NULL,
                     (int64_t) ah_buf_size (&t->buf));
            s_call_close_chan (self, t);        //  an RST kills what still runs
            size_t i;
            json_t *w;
            json_array_foreach (t->waiters, i, w)
                s_call_reply (h, w, NULL, AH_ACP_INVALID_REQUEST, "the terminal was released");
            json_array_clear (t->waiters);
            t->gone = true;
            ah_cv_send_line (h, ah_acp_result (msg->id, json_object ()));
        }
        else
            ah_cv_send_line (h, ah_acp_error (msg->id, AH_ACP_METHOD_NOT_FOUND, "no such terminal method"));
        ah_acp_open_close (&h->open, msg->id);
        return true;
    }
    snprintf (k->agent_id, sizeof k->agent_id, "%s", h->agent_id);
    k->gen = h->gen;
    k->id = json_incref (msg->id);
    k->next = self->calls;
    self->calls = k;
    ah_msg_t *hd = ah_msg_new ("HDR");
    ah_msg_set_str (hd, "ch", k->kind == K_READ ? "fs.read" : "fs.write");
    ah_msg_set_str (hd, "path", clean);
    s_call_open (self, k, &hd);
    return true;
oom:
    ah_cv_send_line (h, ah_acp_error (msg->id, AH_ACP_INTERNAL_ERROR, "out of memory"));
    ah_acp_open_close (&h->open, msg->id);
    return true;
}

//  The lines of a read that ACP asked for (line from 1, limit lines).
static json_t *s_read_result (call_t *k)
{
    const char *p = (const char *) ah_buf_head (&k->buf);
    size_t n = ah_buf_size (&k->buf), from = 0, to = n;
    if (k->line > 1 || k->limit >= 0) {
        int64_t ln = 1;
        for (from = 0; from < n && ln < k->line; from++)
            if (p [from] == '\n')
                ln++;
        if (k->line > 1 && ln < k->line)
            from = n;
        to = from;
        for (int64_t got = 0; to < n && (k->limit < 0 || got < k->limit); to++)
            if (p [to] == '\n')
                got++;
    }
    return json_pack ("{s:o}", "content", ah_json_bytes (p + from, to - from));
}

//  The tunnel's answer to a call's CHAN_OPEN. true when req was one.
bool ah_cv_call_on_reply (self_t *self, ah_msg_t *msg)
{
    int64_t req = ah_msg_int (msg, "req", 0);
    call_t *k = self->calls;
    while (k && !(req && k->open_req == req))
        k = k->next;
    if (!k)
        return false;
    k->open_req = 0;
    k->chan = ah_msg_int (msg, "chan", 0);
    if (k->gone) {
        s_call_close_chan (self, k);
        return true;
    }
    if (!ah_msg_bool (msg, "ok", false) || !k->chan) {
        const char *error = ah_msg_str (msg, "error");
        const char *code = ah_msg_str (msg, "code");
        char why [400];
        snprintf (why, sizeof why, "%s%s%.300s", code ? code : "", code ? ": " : "",
                  error ? error : "the sandbox refused the channel");
        s_call_done (self, k, NULL, AH_ACP_INTERNAL_ERROR, why, -1);
        return true;
    }
    size_t size = 0;
    const void *raw = ah_msg_raw (msg, "reply", &size);
    ah_msg_t *reply = raw ? ah_msg_decode ("reply", raw, size, NULL) : NULL;
    if (k->kind == K_READ) {
        k->size = reply ? ah_msg_int (reply, "size", -1) : -1;
        ah_msg_t *e = ah_msg_new ("CHAN_EOF");
        ah_msg_set_int (e, "chan", k->chan);
        ah_actor_send (self->actor, "tunnel", &e);
        if (k->size < 0)
            s_call_done (self, k, NULL, AH_ACP_INTERNAL_ERROR, "sandboxd's fs.read reply carries no size", -1);
        else if (k->size > AH_CONV_FS_READ_MAX) {
            char why [200];
            snprintf (why, sizeof why, "the file is %" PRId64 " bytes, over the %u a harness may read",
                      k->size, AH_CONV_FS_READ_MAX);
            s_call_done (self, k, NULL, AH_ACP_INVALID_PARAMS, why, -1);
        }
        else if (k->size == 0)
            s_call_done (self, k, s_read_result (k), 0, NULL, 0);
    }
    else if (k->kind == K_WRITE) {
        //  At most AH_CONV_FS_WRITE_MAX (1 MiB): within the tunnel's credit.
        for (size_t off = 0; off < ah_buf_size (&k->buf); off += 256u << 10) {
            size_t n = ah_buf_size (&k->buf) - off;
            ah_msg_t *d = ah_msg_new ("CHAN_DATA");
            ah_msg_set_int (d, "chan", k->chan);
            ah_msg_set_bin (d, "data", ah_buf_head (&k->buf) + off, n > (256u << 10) ? 256u << 10 : n);
            ah_actor_send (self->actor, "tunnel", &d);
        }
        k->size = (int64_t) ah_buf_size (&k->buf);
        ah_buf_clear (&k->buf);
        ah_msg_t *e = ah_msg_new ("CHAN_EOF");
        ah_msg_set_int (e, "chan", k->chan);
        ah_actor_send (self->actor, "tunnel", &e);
        k->written = true;
    }
    else
        s_call_done (self, k, json_pack ("{s:s}", "terminalId", k->term), 0, NULL, -1);
    ah_msg_destroy (&reply);
    return true;
}

//  Bytes for a call's channel. true when chan was one.
bool ah_cv_call_on_data (self_t *self, ah_msg_t *msg)
{
    int64_t chan = ah_msg_int (msg, "chan", 0);
    call_t *k = s_call_by_chan (self, chan);
    if (!k)
        return false;
    size_t size = 0;
    const uint8_t *data = ah_msg_bin (msg, "data", &size);
    ah_msg_t *ack = ah_msg_new ("CHAN_ACK");
    ah_msg_set_int (ack, "chan", chan);
    ah_msg_set_int (ack, "bytes", (int64_t) size);
    ah_actor_send (self->actor, "tunnel", &ack);
    if (!data || k->gone)
        return true;
    if (k->kind == K_TERM) {
        const char *err = NULL;
        int rc = ah_rec_read (&k->rec, data, size, s_term_record, k, &err);
        if (rc == 2)
            s_term_exited (self, k);
        else if (rc < 0) {
            k->exit_len = 0;
            s_term_exited (self, k);
            s_call_close_chan (self, k);
        }
        return true;
    }
    if (ah_buf_size (&k->buf) + size > AH_CONV_FS_READ_MAX + TRAILER_MAX) {
        s_call_done (self, k, NULL, AH_ACP_INTERNAL_ERROR, "sandboxd sent more than it announced", -1);
        return true;
    }
    ah_buf_append (&k->buf, data, size);
    if (k->kind == K_READ && (int64_t) ah_buf_size (&k->buf) >= k->size) {
        if ((int64_t) ah_buf_size (&k->buf) > k->size)
            s_call_done (self, k, NULL, AH_ACP_INTERNAL_ERROR, "sandboxd sent more than it announced", -1);
        else
            s_call_done (self, k, s_read_result (k), 0, NULL, k->size);
    }
    else if (k->kind == K_WRITE) {
        ah_msg_t *trailer = NULL;
        const char *why = NULL;
        size_t used = 0;
        int rc = ah_chan_header_decode (ah_buf_head (&k->buf), ah_buf_size (&k->buf), &trailer, &used, &why);
        if (rc < 0)
            s_call_done (self, k, NULL, AH_ACP_INTERNAL_ERROR, why ? why : "sandboxd's trailer is malformed", -1);
        else if (rc == 1 && ah_msg_bool (trailer, "ok", false))
            s_call_done (self, k, json_object (), 0, NULL, k->size);
        else if (rc == 1) {
            const char *text = ah_msg_str (trailer, "error");
            s_call_done (self, k, NULL, AH_ACP_INTERNAL_ERROR, text ? text : "sandboxd refused the file", -1);
        }
        ah_msg_destroy (&trailer);
    }
    return true;
}

//  A call's channel ended (sandboxd's RST, a lost connection). true when
//  chan was one.
bool ah_cv_call_on_close (self_t *self, ah_msg_t *msg)
{
    call_t *k = s_call_by_chan (self, ah_msg_int (msg, "chan", 0));
    if (!k)
        return false;
    k->chan = 0;
    if (k->kind == K_TERM) {
        if (!k->exited) {
            k->exit_len = 0;
            s_term_exited (self, k);
        }
    }
    else if (!k->gone) {
        const char *error = ah_msg_str (msg, "error");
        char why [300];
        snprintf (why, sizeof why, "the channel ended early%s%.200s", error ? ": " : "", error ? error : "");
        s_call_done (self, k, NULL, AH_ACP_INTERNAL_ERROR, why, -1);
    }
    return true;
}

//  Frees every call (the actor ends).
void ah_cv_calls_destroy (self_t *self)
{
    while (self->calls) {
        call_t *k = self->calls;
        self->calls = k->next;
        s_call_free (k);
    }
}
