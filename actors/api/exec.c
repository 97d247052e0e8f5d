/*  actors/api/exec.c: a command in the sandbox (docs/api.md "Exec"): one
    exec channel, answered whole when the command ends, or streamed as
    records (?stream=1) as it writes.                                   */
#include "actors/api/api_int.h"
#include "config/config.h"
#include "policy/values.h"
#include "proto/channel.h"

#include <msgpack.h>
#include <string.h>

#define MAX_OUTPUT      (1u << 20)      //  stdout and stderr kept, each
#define MAX_STDIN       (192u << 10)    //  below the channel's credit
#define EXIT_MAX        256

typedef struct {
    req_t *r;
    api_chan_t chan;
    bool stream;
    ah_buf_t stdin_bytes;
    ah_rec_reader_t reader;
    ah_buf_t out [2];               //  stdout, stderr (whole answers)
    bool cut [2];
    uint8_t exit_rec [EXIT_MAX];
    size_t exit_len;
    bool exited;
    //  ?stream=1
    ah_buf_t records;               //  re-framed, waiting for the connection
    size_t kept;                    //  payload bytes of the last CHAN_DATA kept in records
    size_t ack_owed;                //  payload bytes in records, ACKed once written
    bool ended;                     //  the last record is in records
    bool broken;                    //  a malformed record: close, no last chunk
    int64_t limit_s;                //  the command's timeout and a margin
    bool opened;                    //  sandboxd took the command
    bool recorded;                  //  its audit row is sent
} exec_t;

//  The audit row, once: how the command ended (a non-zero exit, a
//  signal and a timeout are failures, said as "exit 2", "signal 9",
//  "timed out").
static void s_audit (exec_t *x, const char *error)
{
    if (x->recorded)
        return;
    x->recorded = true;
    ah_msg_t *exit = x->exited ? ah_msg_decode ("EXIT", x->exit_rec, x->exit_len, NULL) : NULL;
    char why [300];
    if (!exit)
        snprintf (why, sizeof why, "%.250s", error ? error : "the command's channel ended before it exited");
    else if (ah_msg_bool (exit, "timed_out", false))
        snprintf (why, sizeof why, "timed out (signal %lld)", (long long) ah_msg_int (exit, "signal", 0));
    else if (ah_msg_int (exit, "signal", 0))
        snprintf (why, sizeof why, "signal %lld", (long long) ah_msg_int (exit, "signal", 0));
    else if (ah_msg_int (exit, "status", -1) != 0)
        snprintf (why, sizeof why, "exit %lld", (long long) ah_msg_int (exit, "status", -1));
    else
        why [0] = 0;
    ah_msg_destroy (&exit);
    api_record (x->r, why [0] == 0, why [0] ? why : NULL);
}

static void s_free (req_t *r)
{
    exec_t *x = r->ext;
    if (!x)
        return;
    if (x->opened)
        s_audit (x, "the client left before the command ended");
    api_chan_close (&x->chan);
    ah_buf_free (&x->stdin_bytes);
    ah_buf_free (&x->out [0]);
    ah_buf_free (&x->out [1]);
    ah_buf_free (&x->records);
    free (x);
}

//  The exit record as a map {status, signal, timed_out}; NULL without one.
static ah_msg_t *s_exit (exec_t *x)
{
    return x->exited ? ah_msg_decode ("EXIT", x->exit_rec, x->exit_len, NULL) : NULL;
}

static int s_record (void *arg, uint8_t kind, const uint8_t *data, size_t size, bool last)
{
    exec_t *x = arg;
    if (kind == AH_REC_STDOUT || kind == AH_REC_STDERR) {
        if (x->stream) {
            if (size && ah_rec_append (&x->records, kind, data, size))
                return -1;
            x->kept += size;
            return 0;
        }
        ah_buf_t *out = &x->out [kind - 1];
        size_t room = MAX_OUTPUT - ah_buf_size (out);
        size_t take = size < room ? size : room;
        if (take < size)
            x->cut [kind - 1] = true;
        return take && ah_buf_append (out, data, take) ? -1 : 0;
    }
    if (kind == AH_REC_EXIT) {
        size_t take = size < EXIT_MAX - x->exit_len ? size : EXIT_MAX - x->exit_len;
        memcpy (x->exit_rec + x->exit_len, data, take);
        x->exit_len += take;
        if (last)
            x->exited = true;
    }
    return 0;
}

static void s_on_data (void *owner, const uint8_t *data, size_t size)
{
    exec_t *x = owner;
    req_t *r = x->r;
    x->kept = 0;
    const char *why = NULL;
    if (ah_rec_read (&x->reader, data, size, s_record, x, &why)) {
        api_chan_close (&x->chan);
        if (x->stream) {
            ah_warn (AREA, "%s: sandboxd sent a malformed exec record (%s); closing", r->path,
                     why ? why : "out of memory");
            x->broken = true;           //  the body cannot end well: the connection closes
            api_want_write (r);
        }
        else
            api_respond_error (r, 502, "sandboxd sent a malformed exec record: %s", why ? why : "out of memory");
        return;
    }
    //  Whole answers keep what they keep at once; a stream gives the
    //  credit of its output back as the client reads it.
    api_chan_ack (&x->chan, size - x->kept);
    x->ack_owed += x->kept;
    if (x->kept)
        api_want_write (r);
}

//  ?stream=1: the last record, the exit as JSON, or {error}.
static void s_stream_end (exec_t *x, const char *error)
{
    ah_msg_t *exit = s_exit (x);
    json_t *body = exit ? json_pack ("{s:I, s:I, s:b}",
                                     "status", (json_int_t) ah_msg_int (exit, "status", -1),
                                     "signal", (json_int_t) ah_msg_int (exit, "signal", 0),
                                     "timed_out", ah_msg_bool (exit, "timed_out", false))
                        : json_pack ("{s:s}", "error", error ? error : "the command's channel ended "
                                     "before it exited");
    ah_msg_destroy (&exit);
    char *text = body ? json_dumps (body, JSON_COMPACT) : NULL;
    json_decref (body);
    ah_rec_append (&x->records, x->exited ? AH_REC_EXIT : AH_REC_EOF, text, text ? strlen (text) : 0);
    free (text);
    x->ended = true;
    api_want_write (x->r);
}

static void s_answer (exec_t *x, const char *error)
{
    req_t *r = x->r;
    ah_msg_t *exit = s_exit (x);
    if (!exit) {
        api_respond_error (r, 502, "the command's channel ended before it exited: %s",
                           error ? error : "no exit status");
        return;
    }
    json_t *body = json_object ();
    json_object_set_new (body, "status", json_integer (ah_msg_int (exit, "status", -1)));
    json_object_set_new (body, "signal", json_integer (ah_msg_int (exit, "signal", 0)));
    json_object_set_new (body, "timed_out", json_boolean (ah_msg_bool (exit, "timed_out", false)));
    for (int k = 0; k < 2; k++) {
        json_object_set_new (body, k ? "stderr" : "stdout",
                             api_json_bytes ((const char *) ah_buf_head (&x->out [k]), ah_buf_size (&x->out [k])));
        json_object_set_new (body, k ? "stderr_truncated" : "stdout_truncated", json_boolean (x->cut [k]));
    }
    ah_msg_destroy (&exit);
    api_respond (r, 200, body);
}

static void s_on_closed (void *owner, const char *error)
{
    exec_t *x = owner;
    api_unpark (x->r);
    s_audit (x, error);
    if (x->stream)
        s_stream_end (x, error);
    else
        s_answer (x, error);
}

static void s_on_eof (void *owner)
{
    //  sandboxd's FIN after the exit; CHAN_CLOSE follows.
}

static void s_on_refused (void *owner, int status, const char *error, ah_msg_t *reply)
{
    exec_t *x = owner;
    api_record (x->r, false, error);
    api_respond_error (x->r, status, "%s", error);
}

static void s_on_deadline (req_t *r)
{
    exec_t *x = r->ext;
    s_audit (x, "the command did not end in time");
    api_chan_close (&x->chan);
    api_respond_error (r, 504, "the command did not end within %lld s", (long long) x->limit_s);
}

static void s_on_opened (void *owner, ah_msg_t *reply)
{
    exec_t *x = owner;
    req_t *r = x->r;
    x->opened = true;
    if (x->stream)
        //  200 and the headers now; records follow as the command writes.
        api_respond_stream (r, 200, "application/vnd.agenthold.exec-records", -1);
    //  stdin as STDIN records, then FIN: nothing more comes from us.
    if (ah_buf_size (&x->stdin_bytes))
        api_chan_record (&x->chan, AH_REC_STDIN, ah_buf_head (&x->stdin_bytes), ah_buf_size (&x->stdin_bytes));
    ah_buf_free (&x->stdin_bytes);
    api_chan_eof (&x->chan);
}

static int s_produce (req_t *r)
{
    exec_t *x = r->ext;
    size_t n = ah_buf_size (&x->records);
    if (n > API_CHUNK)
        n = API_CHUNK;
    if (n && api_out_chunk (r, ah_buf_head (&x->records), n, false))
        return -1;
    ah_buf_consume (&x->records, n);
    //  The payload written gives its credit back (record headers were
    //  ACKed as they came).
    size_t ack = n < x->ack_owed ? n : x->ack_owed;
    api_chan_ack (&x->chan, ack);
    x->ack_owed -= ack;
    if (ah_buf_size (&x->records) == 0 && x->broken)
        return -1;
    if (ah_buf_size (&x->records) == 0 && x->ended) {
        api_out_chunk (r, NULL, 0, true);
        return 0;
    }
    return 1;
}

static const chan_ops_t s_chan_ops = {
    .opened = s_on_opened, .refused = s_on_refused, .data = s_on_data,
    .eof = s_on_eof, .closed = s_on_closed
};
static const ext_ops_t s_ext_ops = { .free = s_free, .produce = s_produce };

//  env: a map of names to strings, as one nested msgpack map. -1 answered.
static int s_env (req_t *r, json_t *v, ah_msg_t *h)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init (&sb);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, json_object_size (v));
    const char *ek;
    json_t *ev;
    bool ok = true;
    json_object_foreach (v, ek, ev) {
        if (!json_is_string (ev) || strlen (json_string_value (ev)) != json_string_length (ev)
        ||  !*ek || strchr (ek, '=')) {
            ok = false;
            break;
        }
        msgpack_pack_str_with_body (&pk, ek, strlen (ek));
        msgpack_pack_str_with_body (&pk, json_string_value (ev), json_string_length (ev));
    }
    if (ok)
        ah_msg_set_raw (h, "env", sb.data, sb.size);
    msgpack_sbuffer_destroy (&sb);
    if (!ok)
        api_respond_error (r, 400, "field 'env' must map names (no '=', no NUL) to strings (no NUL)");
    return ok ? 0 : -1;
}

//  stdin is bytes (it may hold NUL); env's names and values are checked below.
static const body_field_t s_fields [] = {
    { "cmd", B_STR, NULL }, { "timeout", B_NUM, NULL }, { "cwd", B_STR, NULL },
    { "stdin", B_STR | B_NUL, NULL }, { "env", B_OBJ, NULL }, { NULL, 0, NULL }
};

static void s_exec (req_t *r)
{
    bool stream = false;
    if (api_query_bool (r, "stream", &stream))
        return;
    json_t *obj = api_body_object (r, false);
    if (!obj)
        return;
    exec_t *x = calloc (1, sizeof *x);
    ah_msg_t *h = ah_msg_new ("HDR");
    json_t *agent = NULL;
    if (!x || !h) {
        api_respond_error (r, 503, "out of memory");
        goto out;
    }
    x->r = r;
    x->stream = stream;
    ah_msg_set_str (h, "ch", "exec");
    //  sandbox.max_exec_timeout (as PUT /api/v1/policy set it) is a
    //  ceiling, and the timeout of a command that names none; sandboxd is
    //  always told which.
    const double ceiling = ah_policy_value (r->api->store, r->api->config, "max_exec_timeout");
    double timeout = ceiling;
    const char *key;
    json_t *v;
    json_object_foreach (obj, key, v) {
        bool good = true;
        if (streq (key, "cmd")) {
            good = json_is_string (v) && json_string_length (v) > 0 && json_string_length (v) <= 65536
                && strlen (json_string_value (v)) == json_string_length (v);
            if (good) {
                ah_msg_set_str (h, "cmd", json_string_value (v));
                snprintf (r->detail, sizeof r->detail, "%s", json_string_value (v));
            }
        }
        else if (streq (key, "timeout")) {
            timeout = json_number_value (v);        //  within its bound (common/bounds.h)
            if (timeout > ceiling) {
                api_respond_error (r, 400, "field 'timeout' = %.15g s is over the ceiling of %.15g s "
                                   "(sandbox.max_exec_timeout): ask for at most that", timeout, ceiling);
                goto out;
            }
        }
        else if (streq (key, "cwd")) {
            const char *why = "is not a string";
            if (!json_is_string (v)
            ||  ah_homepath_check (json_string_value (v), json_string_length (v), AH_HOMEPATH_HOME, &why)) {
                api_respond_error (r, 400, "field 'cwd' %s", why);
                goto out;
            }
            ah_msg_set_str (h, "cwd", json_string_value (v));
        }
        else if (streq (key, "stdin")) {
            good = json_is_string (v) && json_string_length (v) <= MAX_STDIN;
            if (good && ah_buf_append (&x->stdin_bytes, json_string_value (v), json_string_length (v))) {
                api_respond_error (r, 503, "out of memory");
                goto out;
            }
        }
        else if (streq (key, "env") && json_is_object (v) && json_object_size (v) <= 256) {
            if (s_env (r, v, h))
                goto out;
        }
        else if (streq (key, "env"))
            good = false;
        if (!good) {
            api_respond_error (r, 400, "field '%s' has the wrong type or size (cmd: a string; "
                               "timeout: seconds > 0; cwd: a path; stdin: a string of at most "
                               "%u bytes; env: names to strings)", key, MAX_STDIN);
            goto out;
        }
    }
    ah_msg_set_double (h, "timeout", timeout);
    if (!ah_msg_str (h, "cmd")) {
        api_respond_error (r, 400, "field 'cmd' is required (a shell command line)");
        goto out;
    }
    if (!(agent = api_agent_resolve (r)))
        goto out;
    const char *state = json_string_value (json_object_get (agent, "state"));
    if (!state || !(streq (state, "running") || api_thaw (r, state, "exec"))) {
        api_respond_error (r, 409, "agent '%s' is %s; exec needs it running (start it first)",
                           r->name, state ? state : "without a sandbox");
        goto out;
    }
    api_activity (r->api, r->agent_id, "exec");
    r->kind = "exec";
    r->ext = x;
    r->ext_ops = &s_ext_ops;
    if (stream)
        r->close_after = true;
    else {
        //  The command's timeout and a margin: then 504.
        x->limit_s = (int64_t) timeout + 30;
        r->on_deadline = s_on_deadline;
        api_park (r, zclock_mono () + x->limit_s * 1000);
    }
    if (api_chan_open (r->api, &x->chan, r->agent_id, &h, &s_chan_ops, x))
        api_respond_error (r, 500, "cannot open a channel to the sandbox");
out:
    if (x && r->ext != x) {
        ah_buf_free (&x->stdin_bytes);
        free (x);
    }
    json_decref (agent);
    ah_msg_destroy (&h);
    json_decref (obj);
}

const route_t api_exec_routes [] = {
    { M_POST, "/api/v1/agents/{agent}/exec", s_exec, R_BODY, "stream", s_fields },
    { 0 }
};
