/*  actors/api/files.c: files in the sandbox's home (docs/api.md "Files"):
    list, read (streamed down), write (streamed up), mkdir, remove, each
    one channel to sandboxd. Paths are checked here first (common/homepath.h,
    the grammar sandboxd applies too) and judged again by sandboxd, which resolves them inside the home.
    An agent that is not running is read without waking it, when the
    server reaches its home (home_read.c); writes need it running.

    Flow control: a download's bytes are queued in the connection's
    output as they come (at most the stream's window) and ACKed as lws
    writes them to the client's socket; an upload sends at most API_CHAN_CREDIT
    unacknowledged and lets the client's bytes wait (reading pauses)
    until the tunnel takes more.                                        */
#include "actors/api/api_int.h"
#include "common/str.h"
#include "config/config.h"
#include "proto/channel.h"
#include "proto/yamux.h"

#include <string.h>

#define MAX_DOWN_BUF    (AH_YAMUX_MAX_WINDOW + (512u << 10))   //  the stream's window at most
#define TRAILER_MAX     (4 + AH_CHAN_HEADER_MAX)

//  F_TEXT: a read answered in JSON (fs/text), cut at files.max_read_bytes
typedef enum { F_LIST, F_READ, F_WRITE, F_MKDIR, F_REMOVE, F_TEXT } op_t;

static const char *s_channel [] = {
    [F_LIST] = "fs.list", [F_READ] = "fs.read", [F_WRITE] = "fs.write",
    [F_MKDIR] = "fs.mkdir", [F_REMOVE] = "fs.remove", [F_TEXT] = "fs.read"
};

typedef struct {
    req_t *r;
    op_t op;
    api_chan_t chan;
    char path [4096];
    ah_buf_t buf;                   //  the upload's trailer; fs/text: the bytes kept
    uint64_t total, received;       //  a download: announced, queued in conn->out so far
    uint64_t want;                  //  fs/text: the bytes it answers with (at most the cap)
    size_t queued;                  //  ... of which not yet written (nor acknowledged)
    bool closed;                    //  the channel ended
    bool broken;
    ah_msg_t *header;               //  waiting for the agent's reader (reader.c)
    bool via_reader;                //  ... and then reading through it
    int64_t keep_ms;                //  the last READER_KEEP
} files_t;

static void s_free (req_t *r)
{
    files_t *f = r->ext;
    if (!f)
        return;
    api_chan_close (&f->chan);
    ah_buf_free (&f->buf);
    ah_msg_destroy (&f->header);
    free (f);
}

static void s_on_refused (void *owner, int status, const char *error, ah_msg_t *reply)
{
    files_t *f = owner;
    f->closed = true;
    api_record (f->r, false, error);
    api_respond_error (f->r, status, "%s", error);
}

//  --------------------------------------------------------------------
//  list, mkdir, remove: all is in sandboxd's reply header

static void s_meta_opened (void *owner, ah_msg_t *reply)
{
    files_t *f = owner;
    req_t *r = f->r;
    api_chan_eof (&f->chan);        //  nothing more to send
    api_record (r, true, NULL);
    json_t *body = json_object ();
    json_object_set_new (body, "path", api_json_text (f->path));
    if (f->op == F_LIST) {
        json_t *header = api_json_raw (reply, "reply");
        json_t *entries = json_object_get (header, "entries");
        json_object_set_new (body, "entries", api_home_entries (r, f->path, entries));
        json_object_set_new (body, "truncated", json_boolean (json_is_true (json_object_get (header, "truncated"))));
        json_decref (header);
        api_respond (r, 200, body);
    }
    else if (f->op == F_MKDIR) {
        json_object_set_new (body, "created", json_true ());
        api_respond (r, 201, body);
    }
    else {
        json_object_set_new (body, "removed", json_true ());
        api_respond (r, 200, body);
    }
}

static void s_meta_data (void *owner, const uint8_t *data, size_t size)
{
    files_t *f = owner;
    api_chan_ack (&f->chan, size);
}

static void s_meta_closed (void *owner, const char *error)
{
    ((files_t *) owner)->closed = true;
}

static const chan_ops_t s_meta_ops = {
    .opened = s_meta_opened, .refused = s_on_refused, .data = s_meta_data, .closed = s_meta_closed
};

//  --------------------------------------------------------------------
//  read: the file streams down as the channel's bytes arrive

static void s_read_opened (void *owner, ah_msg_t *reply)
{
    files_t *f = owner;
    req_t *r = f->r;
    json_t *header = api_json_raw (reply, "reply");
    json_t *size = json_object_get (header, "size");
    if (!json_is_integer (size) || json_integer_value (size) < 0) {
        json_decref (header);
        api_chan_close (&f->chan);
        api_record (r, false, "sandboxd's fs.read reply carries no size");
        api_respond_error (r, 502, "sandboxd's fs.read reply carries no size");
        return;
    }
    f->total = (uint64_t) json_integer_value (size);
    r->bytes = (int64_t) f->total;
    r->has_bytes = true;
    api_record (r, true, NULL);
    json_decref (header);
    api_chan_eof (&f->chan);        //  the opener sends nothing more
    //  Headers go once there are bytes (or none are due), so a stream
    //  that breaks before its first byte can still be answered.
    if (f->total == 0)
        api_respond_stream (r, 200, "application/octet-stream", 0);
}

//  A download's bytes go straight into the connection's output (one
//  copy); they are acknowledged to the tunnel as lws writes them, so at
//  most the stream's window waits here.
static void s_read_data (void *owner, const uint8_t *data, size_t size)
{
    files_t *f = owner;
    req_t *r = f->r;
    if (f->broken)
        return;
    if (f->queued + size > MAX_DOWN_BUF || f->received + size > f->total) {
        ah_warn (AREA, "%s: the tunnel sent more than announced or acknowledged; closing", r->path);
        api_chan_close (&f->chan);
        f->broken = true;
        api_want_write (r);
        return;
    }
    if (!r->responded)
        api_respond_stream (r, 200, "application/octet-stream", (int64_t) f->total);
    if (api_out (r, data, size)) {
        ah_warn (AREA, "%s: out of memory queueing the download; closing", r->path);
        api_chan_close (&f->chan);
        f->broken = true;
        return;
    }
    f->received += size;
    f->queued += size;
    if (f->via_reader)
        api_reader_keep (r->api, r->agent_id, &f->keep_ms);
}

static void s_read_closed (void *owner, const char *error)
{
    files_t *f = owner;
    req_t *r = f->r;
    f->closed = true;
    if (f->received >= f->total)
        return;                     //  all here: written as lws takes it
    ah_warn (AREA, "%s: the file stream ended early: %s", r->path, error ? error : "closed");
    if (!r->responded)
        api_respond_error (r, 502, "the file's stream from the sandbox ended early: %s",
                           error ? error : "closed");
    else {
        f->broken = true;
        api_want_write (r);
    }
}

//  Called once conn->out is empty: every byte received was written.
static int s_read_produce (req_t *r)
{
    files_t *f = r->ext;
    if (f->received == f->total)
        return 0;
    if (f->broken)
        return -1;                  //  the length cannot match: close
    return 1;
}

static void s_read_written (req_t *r, size_t n)
{
    files_t *f = r->ext;
    if (!f || f->op != F_READ)
        return;
    //  The first write also carried the response's head: never more
    //  than was queued.
    size_t acked = n < f->queued ? n : f->queued;
    f->queued -= acked;
    api_chan_ack (&f->chan, acked);
}

static const chan_ops_t s_read_ops = {
    .opened = s_read_opened, .refused = s_on_refused, .data = s_read_data, .closed = s_read_closed
};

//  --------------------------------------------------------------------
//  fs/text: the file's first files.max_read_bytes, answered in JSON

json_t *api_text_body (const char *path, const uint8_t *data, size_t len, uint64_t size, int64_t cap)
{
    bool cut = (uint64_t) len < size;
    if (cut) {
        //  No half character at the cut: a UTF-8 sequence the cut split
        //  is left out whole (else the JSON would carry it as '?').
        size_t i = len, back = 0;
        while (i > 0 && back < 3 && (data [i - 1] & 0xC0) == 0x80)
            i--, back++;
        if (i > 0) {
            uint8_t lead = data [i - 1];
            size_t need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
            if (need > back)
                len = i - 1;
        }
    }
    json_t *body = json_object ();
    json_object_set_new (body, "path", api_json_text (path));
    json_object_set_new (body, "size", json_integer ((json_int_t) size));
    json_object_set_new (body, "content", api_json_bytes ((const char *) data, len));
    json_object_set_new (body, "content_bytes", json_integer ((json_int_t) len));
    json_object_set_new (body, "truncated", json_boolean (cut));
    json_object_set_new (body, "max_read_bytes", json_integer ((json_int_t) cap));
    if (cut) {
        char *notice = ah_strf ("the file holds %llu bytes; this answer carries its first %zu "
                                "(files.max_read_bytes = %lld): download it whole from the files "
                                "route, or read a part with a command", (unsigned long long) size,
                                len, (long long) cap);
        json_object_set_new (body, "notice", api_json_text (notice ? notice : "cut"));
        free (notice);
    }
    return body;
}

static void s_text_answer (files_t *f)
{
    req_t *r = f->r;
    api_chan_close (&f->chan);      //  the rest (past the cap) is not wanted
    api_respond (r, 200, api_text_body (f->path, ah_buf_head (&f->buf), ah_buf_size (&f->buf),
                                        f->total, r->api->config->max_read_bytes));
}

static void s_text_opened (void *owner, ah_msg_t *reply)
{
    files_t *f = owner;
    req_t *r = f->r;
    json_t *header = api_json_raw (reply, "reply");
    json_t *size = json_object_get (header, "size");
    bool good = json_is_integer (size) && json_integer_value (size) >= 0;
    f->total = good ? (uint64_t) json_integer_value (size) : 0;
    json_decref (header);
    if (!good) {
        api_chan_close (&f->chan);
        api_record (r, false, "sandboxd's fs.read reply carries no size");
        api_respond_error (r, 502, "sandboxd's fs.read reply carries no size");
        return;
    }
    uint64_t cap = (uint64_t) r->api->config->max_read_bytes;
    f->want = f->total < cap ? f->total : cap;
    r->bytes = (int64_t) f->want;
    r->has_bytes = true;
    api_record (r, true, NULL);
    api_chan_eof (&f->chan);
    if (f->want == 0)
        s_text_answer (f);
}

//  Kept in memory (at most the cap) and acknowledged at once.
static void s_text_data (void *owner, const uint8_t *data, size_t size)
{
    files_t *f = owner;
    req_t *r = f->r;
    api_chan_ack (&f->chan, size);
    if (r->responded)
        return;
    if (f->received + size > f->total) {
        api_chan_close (&f->chan);
        api_respond_error (r, 502, "the file's stream from the sandbox sent more than its size");
        return;
    }
    size_t take = f->want - f->received < size ? (size_t) (f->want - f->received) : size;
    if (take && ah_buf_append (&f->buf, data, take)) {
        api_chan_close (&f->chan);
        api_respond_error (r, 503, "out of memory");
        return;
    }
    f->received += size;
    if (f->via_reader)
        api_reader_keep (r->api, r->agent_id, &f->keep_ms);
    if (ah_buf_size (&f->buf) >= f->want)
        s_text_answer (f);
}

static void s_text_closed (void *owner, const char *error)
{
    files_t *f = owner;
    f->closed = true;
    if (!f->r->responded)
        api_respond_error (f->r, 502, "the file's stream from the sandbox ended early: %s",
                           error ? error : "closed");
}

static const chan_ops_t s_text_ops = {
    .opened = s_text_opened, .refused = s_on_refused, .data = s_text_data, .closed = s_text_closed
};

//  --------------------------------------------------------------------
//  write: the request body streams up; sandboxd's trailer says how it went

static void s_write_opened (void *owner, ah_msg_t *reply)
{
    files_t *f = owner;
    req_t *r = f->r;
    if (r->body_done)
        api_chan_eof (&f->chan);    //  an empty file
    api_continue (r);               //  now the body may come
}

static size_t s_write_body (req_t *r, const uint8_t *data, size_t size)
{
    files_t *f = r->ext;
    if (!api_chan_open_now (&f->chan))
        return 0;
    ssize_t took = api_chan_write (&f->chan, data, size);
    return took > 0 ? (size_t) took : 0;
}

//  The body straight from the client's socket (not over TLS): through the
//  channel's pipe, never through our memory (docs/architecture.md).
static ssize_t s_write_splice (req_t *r, int fd, size_t size)
{
    files_t *f = r->ext;
    return api_chan_splice (&f->chan, fd, size);
}

static void s_write_body_end (req_t *r)
{
    files_t *f = r->ext;
    api_chan_eof (&f->chan);
}

static void s_write_writable (void *owner)
{
    files_t *f = owner;
    api_body_resume (f->r);
}

//  sandboxd's trailer (u32 length, msgpack map) arrives as data.
static void s_write_data (void *owner, const uint8_t *data, size_t size)
{
    files_t *f = owner;
    if (ah_buf_size (&f->buf) + size <= TRAILER_MAX)
        ah_buf_append (&f->buf, data, size);
    api_chan_ack (&f->chan, size);
}

static void s_write_closed (void *owner, const char *error)
{
    files_t *f = owner;
    req_t *r = f->r;
    f->closed = true;
    ah_msg_t *trailer = NULL;
    const char *why = NULL;
    size_t used;
    if (ah_buf_size (&f->buf))
        ah_chan_header_decode (ah_buf_head (&f->buf), ah_buf_size (&f->buf), &trailer, &used, &why);
    if (!trailer) {
        api_record (r, false, "the upload's channel ended without sandboxd's word");
        api_respond_error (r, 502, "the upload's channel ended without sandboxd's word: %s",
                           error ? error : why ? why : "no trailer");
    }
    else if (ah_msg_bool (trailer, "ok", false)) {
        r->bytes = ah_msg_int (trailer, "size", 0);
        r->has_bytes = true;
        api_record (r, true, NULL);
        json_t *body = json_object ();
        json_object_set_new (body, "path", api_json_text (f->path));
        json_object_set_new (body, "size", json_integer (ah_msg_int (trailer, "size", 0)));
        api_respond (r, 200, body);
    }
    else {
        const char *text = ah_msg_str (trailer, "error");
        api_record (r, false, text ? text : "sandboxd refused the file");
        api_respond_error (r, api_code_status (ah_msg_str (trailer, "code")), "%s",
                           text ? text : "sandboxd refused the file");
    }
    ah_msg_destroy (&trailer);
}

static const chan_ops_t s_write_ops = {
    .opened = s_write_opened, .refused = s_on_refused, .data = s_write_data,
    .closed = s_write_closed, .writable = s_write_writable
};

static const ext_ops_t s_ext_ops = {
    .free = s_free, .body = s_write_body, .body_end = s_write_body_end, .splice = s_write_splice, .produce = s_read_produce,
    .written = s_read_written,
};

//  --------------------------------------------------------------------
//  Routes

//  The sleeping agent's reader is connected: the channel goes to it.
static void s_reader_ready (req_t *r, ah_msg_t *reply)
{
    files_t *f = r->ext;
    f->via_reader = true;
    f->keep_ms = zclock_mono ();
    const chan_ops_t *ops = f->op == F_READ ? &s_read_ops : f->op == F_TEXT ? &s_text_ops : &s_meta_ops;
    if (api_chan_open_reader (r->api, &f->chan, r->agent_id, &f->header, ops, f))
        api_respond_error (r, 500, "cannot open a channel to the agent's reader");
}

//  One file operation on path (as the client gave it). Answers itself.
static void s_op (req_t *r, op_t op, const char *path)
{
    if (!path) {
        api_respond_error (r, 400, "query 'path' is required (relative to /home/agent)");
        return;
    }
    //  A directory may be named with one trailing '/'; a file may not.
    char clean [AH_HOMEPATH_MAX + 1];
    if (api_home_path (r, path, op == F_LIST || op == F_MKDIR, op == F_LIST, clean))
        return;
    bool recursive = false, parents = false;
    int64_t mode = -1;
    const char *mode_text = api_query (r, "mode");
    if (mode_text) {
        char *end = NULL;
        long v = strtol (mode_text, &end, 8);
        if (!*mode_text || end == mode_text || *end || v < 0 || v > 07777) {
            api_respond_error (r, 400, "query 'mode' must be octal permission bits (644, 0755), got '%.20s'",
                               mode_text);
            return;
        }
        mode = v;
    }
    if (api_query_bool (r, "recursive", &recursive) || api_query_bool (r, "parents", &parents))
        return;
    json_t *agent = api_agent_resolve (r);
    if (!agent)
        return;
    const char *state = json_string_value (json_object_get (agent, "state"));
    bool running = state && streq (state, "running");
    //  Reading does not wake (nor thaw): a home the server reaches is
    //  read directly, one on a cluster through the agent's reader
    //  (reader.c). Any other use of a frozen agent thaws it.
    bool reads = !running && (op == F_LIST || op == F_READ || op == F_TEXT);
    if (!running && !reads)
        running = api_thaw (r, state, "files");
    bool reader = reads && api_reader_serves (r, state);
    bool served = reads && !reader
               && api_home_files (r, op == F_LIST ? API_HOME_LIST : op == F_TEXT ? API_HOME_TEXT
                                                                                  : API_HOME_READ, clean, state);
    if (!running && !served && !reader)
        api_respond_error (r, 409, "agent '%s' is %s; files needs it running (start it first)",
                           r->name, state ? state : "without a sandbox");
    json_decref (agent);
    if (!running && !reader)
        return;
    if (running)
        api_activity (r->api, r->agent_id, "files");
    files_t *f = calloc (1, sizeof *f);
    ah_msg_t *h = ah_msg_new ("HDR");
    if (!f || !h) {
        free (f);
        ah_msg_destroy (&h);
        api_respond_error (r, 503, "out of memory");
        return;
    }
    f->r = r;
    f->op = op;
    snprintf (f->path, sizeof f->path, "%s", clean);
    r->ext = f;
    r->ext_ops = &s_ext_ops;
    r->kind = s_channel [op];
    //  The audit's detail keeps what fits of a long path.
    snprintf (r->detail, sizeof r->detail, "%.*s", (int) sizeof r->detail - 1, clean);
    ah_msg_set_str (h, "ch", s_channel [op]);
    ah_msg_set_str (h, "path", clean);
    if (op == F_REMOVE)
        ah_msg_set_bool (h, "recursive", recursive);
    if (op == F_MKDIR)
        ah_msg_set_bool (h, "parents", parents);
    if ((op == F_MKDIR || op == F_WRITE) && mode >= 0)
        ah_msg_set_int (h, "mode", mode);
    if (reader) {
        f->header = h;
        api_reader_ask (r, s_reader_ready);
        return;
    }
    const chan_ops_t *ops = op == F_READ ? &s_read_ops : op == F_WRITE ? &s_write_ops
                          : op == F_TEXT ? &s_text_ops : &s_meta_ops;
    if (api_chan_open (r->api, &f->chan, r->agent_id, &h, ops, f))
        api_respond_error (r, 500, "cannot open a channel to the sandbox");
}

static void s_list (req_t *r)
{
    const char *path = api_query (r, "path");
    if (!path) {
        api_respond_error (r, 400, "%s needs ?path=DIR, relative to /home/agent ('.' is the home)", r->path);
        return;
    }
    s_op (r, F_LIST, path);
}

static void s_read (req_t *r)   { s_op (r, F_READ, r->params [1]); }
static void s_write (req_t *r)  { s_op (r, F_WRITE, r->params [1]); }
static void s_remove (req_t *r) { s_op (r, F_REMOVE, r->params [1]); }

static void s_mkdir (req_t *r)
{
    const char *op = api_query (r, "op");
    if (!op || !streq (op, "mkdir")) {
        api_respond_error (r, 400, "POST %s needs ?op=mkdir (the one operation there is)", r->path);
        return;
    }
    s_op (r, F_MKDIR, r->params [1]);
}

//  The query forms (fs/list, fs/file, fs/mkdir): ?path= names the path.
static void s_q_list (req_t *r)
{
    const char *path = api_query (r, "path");
    s_op (r, F_LIST, path ? path : ".");
}
static void s_q_read (req_t *r)   { s_op (r, F_READ, api_query (r, "path")); }
static void s_q_text (req_t *r)   { s_op (r, F_TEXT, api_query (r, "path")); }
static void s_q_write (req_t *r)  { s_op (r, F_WRITE, api_query (r, "path")); }
static void s_q_remove (req_t *r) { s_op (r, F_REMOVE, api_query (r, "path")); }
static void s_q_mkdir (req_t *r)  { s_op (r, F_MKDIR, api_query (r, "path")); }

const route_t api_file_routes [] = {
    { M_GET, "/api/v1/agents/{agent}/files", s_list, 0, "path all", NULL },
    { M_GET, "/api/v1/agents/{agent}/files/{path*}", s_read, 0, "", NULL },
    { M_PUT, "/api/v1/agents/{agent}/files/{path*}", s_write, R_STREAM, "mode", NULL },
    { M_POST, "/api/v1/agents/{agent}/files/{path*}", s_mkdir, 0, "op parents mode", NULL },
    { M_DELETE, "/api/v1/agents/{agent}/files/{path*}", s_remove, 0, "recursive", NULL },
    { M_GET, "/api/v1/agents/{agent}/fs/list", s_q_list, 0, "path all", NULL },
    { M_GET, "/api/v1/agents/{agent}/fs/file", s_q_read, 0, "path", NULL },
    { M_GET, "/api/v1/agents/{agent}/fs/text", s_q_text, 0, "path", NULL },
    { M_PUT, "/api/v1/agents/{agent}/fs/file", s_q_write, R_STREAM, "path mode", NULL },
    { M_DELETE, "/api/v1/agents/{agent}/fs/file", s_q_remove, 0, "path recursive", NULL },
    { M_POST, "/api/v1/agents/{agent}/fs/mkdir", s_q_mkdir, 0, "path parents mode", NULL },
    { 0 }
};
