/*  sandboxd/chan.c: the channels (docs/tunnel.md section 3) on one yamux
    session: the channel table, headers in and dispatch, output, and the
    session's poll set and timers. See chan.h for the flow-control rules.

    Each stream the server opens becomes a chan_t. Its life: gather the
    header (NEW), dispatch by "ch" to a handler which replies and either
    finishes at once (DONE: FIN after the reply) or keeps state (FS_READ,
    FS_WRITE, PTY, EXEC, PROC); pty and exec live in exec.c, proc in
    kept.c, the fs.* handlers in fs.c. Yamux may report a stream closed from inside any call into
    it (a reset, a close meeting the peer's FIN): that callback only
    releases the channel's resources and marks it gone; the structs are
    freed at the end of ah_sbd_session_service, so no pointer held by a
    caller dangles.                                                    */
#include "common/version.h"
#include "sandboxd/chan_int.h"
#include "sandboxd/trust.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define S_WRITEBACK    (4u << 20)   //  an upload's writeback is started every this many bytes

int64_t ah_sbd_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static chan_t *s_find (ah_sbd_session_t *self, uint32_t id)
{
    for (chan_t *ch = self->chans; ch; ch = ch->next)
        if (ch->id == id && !ch->gone)
            return ch;
    return NULL;
}

const char *ah_sbd_code (int e)
{
    switch (e) {
        case ENOENT: return "ENOENT";
        case EACCES: case EPERM: case EROFS: return "EACCES";
        case EINVAL: case ELOOP: case ENAMETOOLONG: return "EINVAL";
        case EEXIST: return "EEXIST";
        case ENOTDIR: return "ENOTDIR";
        case EISDIR: return "EISDIR";
        case ENOTEMPTY: return "ENOTEMPTY";
        case ENOSPC: case EDQUOT: return "ENOSPC";
        case ETIMEDOUT: return "ETIMEDOUT";
        case ECONNREFUSED: return "ECONNREFUSED";
        default: return "EIO";
    }
}

//  ---------------------------------------------------------------------
//  Output

void ah_sbd_flush (ah_sbd_session_t *self, chan_t *ch)
{
    if (ch->kind == K_EGRESS)
        return;                             //  out holds the proxy's head: no stream yet
    while (!ch->gone && ah_buf_size (&ch->out)) {
        ssize_t n = ah_yamux_write (self->yamux, ch->id, ah_buf_head (&ch->out),
                                    ah_buf_size (&ch->out));
        if (n < 0) {
            ah_buf_clear (&ch->out);            //  the stream cannot carry more
            return;
        }
        if (n == 0)
            return;
        ah_buf_consume (&ch->out, (size_t) n);
    }
    if (ch->gone)
        return;
    if (ch->want_fin && !ch->fin_sent) {
        ch->fin_sent = true;
        ah_yamux_close (self->yamux, ch->id);
    }
}

bool ah_sbd_out_idle (const chan_t *ch)
{
    return ah_buf_size (&ch->out) == 0;
}

void ah_sbd_send_header (ah_sbd_session_t *self, chan_t *ch, ah_msg_t *map)
{
    uint8_t *hdr = NULL;
    size_t size = 0;
    if (ah_chan_header_encode (map, &hdr, &size) || ah_buf_append (&ch->out, hdr, size))
        ah_warn ("sandboxd", "stream %u: reply header did not encode", ch->id);
    free (hdr);
    ah_sbd_flush (self, ch);
}

//  The last header of a channel: send it, FIN, and discard any more input.
void ah_sbd_finish (ah_sbd_session_t *self, chan_t *ch, ah_msg_t **map_p)
{
    ch->kind = K_DONE;
    ch->want_fin = true;
    ah_sbd_send_header (self, ch, *map_p);
    ah_msg_destroy (map_p);
}

//  Refuse: error reply, FIN, then discard whatever else comes.
void ah_sbd_refuse (ah_sbd_session_t *self, chan_t *ch, const char *code, const char *fmt, ...)
{
    char text [512];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (text, sizeof text, fmt, ap);
    va_end (ap);
    ah_msg_t *map = ah_msg_new ("");
    ah_msg_set_bool (map, "ok", false);
    ah_msg_set_str (map, "code", code);
    ah_msg_set_str (map, "error", text);
    ah_sbd_finish (self, ch, &map);
    ah_debug ("sandboxd", "stream %u refused: %s %s", ch->id, code, text);
}

//  ---------------------------------------------------------------------
//  Channel teardown

//  Release everything the channel holds in the world outside (processes,
//  fds, temporary files). Safe to call twice.
void ah_sbd_release (ah_sbd_session_t *self, chan_t *ch)
{
    if (ch->kept)
        ah_sbd_proc_detach (self, ch);      //  the process lives on, detached
    if (ch->proc.pid > 0) {
        int64_t ns = ah_proc_kill_reap (&ch->proc);
        if (self->env.reaped_ns)
            *self->env.reaped_ns += ns;
    }
    ah_proc_close_fds (&ch->proc);
    if (ch->file >= 0) {
        close (ch->file);
        ch->file = -1;
    }
    if (ch->tmp [0] && ch->dir >= 0) {
        unlinkat (ch->dir, ch->tmp, 0);
        ch->tmp [0] = 0;
    }
    if (ch->dir >= 0) {
        close (ch->dir);
        ch->dir = -1;
    }
}

static void s_free (chan_t *ch)
{
    ah_buf_free (&ch->in);
    ah_buf_free (&ch->out);
    free (ch);
}

//  Abort a stream from our side (RST): I/O error mid-way, malformed input.
void ah_sbd_reset (ah_sbd_session_t *self, chan_t *ch, const char *why)
{
    ah_debug ("sandboxd", "stream %u reset: %s", ch->id, why);
    ah_sbd_release (self, ch);
    ah_yamux_reset (self->yamux, ch->id);   //  on_closed marks it gone
    ch->gone = true;
}

//  ---------------------------------------------------------------------
//  Simple channels

static void s_hello (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req)
{
    if (self->hello_done) {
        ah_sbd_refuse (self, ch, "EPROTO", "a second hello on this connection (hello is said once)");
        return;
    }
    if (!ah_msg_has (req, "version")) {
        ah_sbd_refuse (self, ch, "EPROTO", "hello without a version (the tunnel protocol the server "
                       "speaks; this sandboxd speaks %d)", AH_PROTOCOL_VERSION);
        return;
    }
    int64_t v = ah_msg_int (req, "version", -1);
    if (v != AH_PROTOCOL_VERSION) {
        ah_error ("sandboxd", "server speaks tunnel protocol %lld, this sandboxd speaks %d",
                  (long long) v, AH_PROTOCOL_VERSION);
        ah_sbd_refuse (self, ch, "EVERSION",
                  "agenthold sandboxd %s speaks tunnel protocol %d, the server speaks %lld: "
                  "deploy the sandboxd that ships with this server (restart the sandbox so it "
                  "mounts the server's sandboxd)", AH_VERSION, AH_PROTOCOL_VERSION, (long long) v);
        return;
    }
    self->hello_done = true;
    //  The egress CA: written (and pointed at) before anything can run.
    const char *ca = ah_msg_str (req, "egress_ca");
    const char *why = NULL;
    if (ca && self->env.trust_dir && self->env.proxy_fd >= 0 && !self->env.read_only
    &&  ah_sbd_trust_write (self->env.trust_dir, ca, strlen (ca), self->env.trust_env, &why))
        ah_warn ("sandboxd", "the egress CA is not trusted in this sandbox: %s", why);
    ah_msg_t *map = ah_msg_new ("");
    ah_msg_set_bool (map, "ok", true);
    ah_msg_set_int (map, "version", AH_PROTOCOL_VERSION);
    ah_msg_set_str (map, "release", AH_VERSION);
    ah_msg_set_str (map, "agent_id", self->env.agent_id ? self->env.agent_id : "");
    ah_msg_set_str (map, "user", self->user.name);
    ah_msg_set_str (map, "mode", self->env.read_only ? "read" : "sandbox");
    ah_sbd_finish (self, ch, &map);
}

void ah_sbd_ok (ah_sbd_session_t *self, chan_t *ch)
{
    ah_msg_t *map = ah_msg_new ("");
    ah_msg_set_bool (map, "ok", true);
    ah_sbd_finish (self, ch, &map);
}

static void s_stats (ah_sbd_session_t *self, chan_t *ch)
{
    pid_t roots [1024];
    size_t n = 0;
    for (chan_t *c = self->chans; c && n < 1024; c = c->next)
        if (c->proc.pid > 0 && !c->proc.reaped)
            roots [n++] = c->proc.pid;
    for (kept_t *k = self->env.kept ? self->env.kept->list : NULL; k && n < 1024; k = k->next)
        if (k->proc.pid > 0 && !k->proc.reaped)
            roots [n++] = k->proc.pid;
    const char *source = "proc";
    int64_t cpu = ah_sbd_cpu_ns (self->env.stats, roots, n,
                                 self->env.reaped_ns ? *self->env.reaped_ns : 0, &source);
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    ah_msg_t *map = ah_msg_new ("");
    ah_msg_set_bool (map, "ok", true);
    ah_msg_set_int (map, "cpu_ns", cpu);
    ah_msg_set_int (map, "at_ns", (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec);
    ah_msg_set_str (map, "source", source);
    ah_sbd_finish (self, ch, &map);
}

//  ---------------------------------------------------------------------
//  Received bytes

//  Drop n bytes from the front of ch->in and give yamux the credit back.
static void s_consume (ah_sbd_session_t *self, chan_t *ch, size_t n)
{
    if (n) {
        ah_buf_consume (&ch->in, n);
        ah_yamux_consumed (self->yamux, ch->id, n);
    }
}

//  An upload's bytes into its temporary file, all of them; after an error
//  the rest is dropped (the trailer reports the error). Every
//  S_WRITEBACK bytes the disk is asked to start writing what came
//  (sync_file_range, no wait): the writeback then runs beside the
//  transfer, and the fsync at the end waits for the last piece only, not
//  for the whole file. Its errors are the fsync's to report.
static void s_write_file (chan_t *ch, const uint8_t *data, size_t size)
{
    size_t used = 0;
    while (used < size && !ch->write_errno) {
        ssize_t w = write (ch->file, data + used, size - used);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            ch->write_errno = errno;
            break;
        }
        used += (size_t) w;
        ch->done += (uint64_t) w;
    }
    if (!ch->write_errno && ch->done - ch->flushed >= S_WRITEBACK) {
        sync_file_range (ch->file, (off_t) ch->flushed, (off_t) (ch->done - ch->flushed),
                         SYNC_FILE_RANGE_WRITE);
        ch->flushed = ch->done;
    }
}

//  Use what sits in ch->in; give yamux back the bytes used.
static void s_process_in (ah_sbd_session_t *self, chan_t *ch)
{
    size_t used = 0, have = ah_buf_size (&ch->in);
    if (ch->kind == K_NEW)
        return;                             //  s_header_in's
    if (ch->kind == K_FS_WRITE) {
        s_write_file (ch, ah_buf_head (&ch->in), have);
        used = have;
    }
    else if (ah_sbd_runs (ch))
        used = ah_sbd_records_in (self, ch);
    else if (ch->kind == K_PORT)
        used = ah_sbd_port_in (self, ch);
    else if (ch->kind == K_EGRESS) {
        used = ah_sbd_egress_in (self, ch);
        if (!ch->gone && ch->kind == K_PORT) {
            s_consume (self, ch, used);
            used = ah_sbd_port_in (self, ch);
        }
    }
    else
        used = have;                        //  nothing expected: discard
    if (ch->gone)
        return;
    s_consume (self, ch, used);
    ah_sbd_port_eof_check (ch, ah_buf_size (&ch->in));
    if (ch->kind == K_DONE && !ah_buf_size (&ch->in))
        ah_buf_free (&ch->in);              //  a finished channel keeps no buffers
    if ((ch->kind == K_EXEC || ch->kind == K_PROC) && !ah_buf_size (&ch->in)
    &&  (ch->stdin_eof || ch->peer_eof)
    &&  ch->proc.in >= 0) {
        close (ch->proc.in);
        ch->proc.in = -1;
    }
}

//  Whether key holds a str with a NUL inside (ah_msg_str would cut it):
//  look at the raw header, which is at most AH_CHAN_HEADER_MAX bytes.
static bool s_str_has_nul (const uint8_t *raw, size_t len, const char *key)
{
    msgpack_unpacked u;
    msgpack_unpacked_init (&u);
    bool nul = false;
    if (msgpack_unpack_next (&u, (const char *) raw, len, NULL) == MSGPACK_UNPACK_SUCCESS
    &&  u.data.type == MSGPACK_OBJECT_MAP) {
        size_t kl = strlen (key);
        for (uint32_t i = 0; i < u.data.via.map.size; i++) {
            msgpack_object *k = &u.data.via.map.ptr [i].key;
            msgpack_object *v = &u.data.via.map.ptr [i].val;
            if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == kl
            &&  memcmp (k->via.str.ptr, key, kl) == 0 && v->type == MSGPACK_OBJECT_STR
            &&  memchr (v->via.str.ptr, 0, v->via.str.size))
                nul = true;
        }
    }
    msgpack_unpacked_destroy (&u);
    return nul;
}

int ah_sbd_path_arg (const ah_msg_t *req, const char *key, const uint8_t *raw, size_t raw_len,
                     const char **path, size_t *len)
{
    *path = ah_msg_str (req, key);
    if (!*path)
        return -1;
    if (s_str_has_nul (raw, raw_len, key))
        return -2;
    *len = strlen (*path);
    return 0;
}

//  Each channel's optional header arguments and their types
//  (docs/tunnel.md). Absent or nil takes the channel's default; any
//  other type is EINVAL here, before the channel runs, so no handler
//  quietly reads a wrongly typed argument as its default.
typedef enum { A_INT, A_NUM, A_BOOL, A_STR, A_LIST, A_MAP } arg_type_t;
static const struct {
    const char *ch, *key;
    arg_type_t type;
} s_args [] = {
    { "hello",     "release",     A_STR },
    { "hello",     "egress_ca",   A_STR },
    { "pty",       "term",        A_STR },
    { "pty",       "cols",        A_INT },
    { "pty",       "rows",        A_INT },
    { "pty",       "id",          A_STR },
    { "pty",       "create",      A_BOOL },
    { "pty",       "from",        A_INT },
    { "exec",      "timeout",     A_NUM },
    { "exec",      "cwd",         A_STR },
    { "exec",      "env",         A_MAP },
    { "proc",      "key",         A_STR },
    { "proc",      "argv",        A_LIST },
    { "proc",      "env",         A_MAP },
    { "proc",      "from",        A_INT },
    { "port",      "port",        A_INT },
    { "fs.tree",   "max_depth",   A_INT },
    { "fs.tree",   "max_entries", A_INT },
    { "fs.tree",   "all",         A_BOOL },
    { "fs.write",  "mode",        A_INT },
    { "fs.mkdir",  "parents",     A_BOOL },
    { "fs.mkdir",  "mode",        A_INT },
    { "fs.remove", "recursive",   A_BOOL },
};

//  Whether key, present and not nil, holds a value of type t. The
//  getters give their default for another type: two defaults that
//  differ tell "another type" from any real value.
static bool s_arg_typed (const ah_msg_t *req, const char *key, arg_type_t t)
{
    if (!ah_msg_has (req, key) || ah_msg_is_nil (req, key))
        return true;
    switch (t) {
        case A_INT:  return ah_msg_int (req, key, 0) != 0 || ah_msg_int (req, key, 1) != 1;
        case A_NUM:  return ah_msg_double (req, key, 0) != 0 || ah_msg_double (req, key, 1) != 1;
        case A_BOOL: return ah_msg_bool (req, key, false) || !ah_msg_bool (req, key, true);
        case A_STR:  return ah_msg_str (req, key) != NULL;
        case A_LIST:
        case A_MAP: {
            //  The raw msgpack's first byte says which container it is.
            size_t size = 0;
            const uint8_t *raw = ah_msg_raw (req, key, &size);
            if (!raw || !size)
                return false;
            if (t == A_LIST)
                return (raw [0] & 0xf0) == 0x90 || raw [0] == 0xdc || raw [0] == 0xdd;
            return (raw [0] & 0xf0) == 0x80 || raw [0] == 0xde || raw [0] == 0xdf;
        }
    }
    return false;
}

//  Refuses (EINVAL) the first argument of channel name with a wrong type.
static bool s_args_ok (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req, const char *name)
{
    static const char *what [] = { "an integer", "a number", "a boolean", "a string",
                                   "a list of strings", "a map of strings" };
    for (size_t i = 0; i < sizeof s_args / sizeof s_args [0]; i++)
        if (strcmp (s_args [i].ch, name) == 0 && !s_arg_typed (req, s_args [i].key, s_args [i].type)) {
            ah_sbd_refuse (self, ch, "EINVAL", "%s: \"%s\" must be %s", name, s_args [i].key,
                           what [s_args [i].type]);
            return false;
        }
    return true;
}

static void s_dispatch (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req,
                        const uint8_t *raw, size_t raw_len)
{
    const char *name = ah_msg_str (req, "ch");
    if (!name) {
        ah_sbd_refuse (self, ch, "EPROTO", "the header has no \"ch\" string");
        return;
    }
    if (!s_args_ok (self, ch, req, name))
        return;
    if (strcmp (name, "hello") == 0) {
        s_hello (self, ch, req);
        return;
    }
    if (!self->hello_done) {
        ah_sbd_refuse (self, ch, "EPROTO", "channel \"%.64s\" before hello", name);
        return;
    }
    if (self->env.read_only && strcmp (name, "ping") && strcmp (name, "stats")
    &&  strcmp (name, "fs.list") && strcmp (name, "fs.read") && strcmp (name, "fs.tree")) {
        ah_sbd_refuse (self, ch, "EACCES", "%.64s refused: this sandboxd only reads (a reader of a "
                       "sleeping agent's home)", name);
        return;
    }
    if (strcmp (name, "ping") == 0)
        ah_sbd_ok (self, ch);
    else if (strcmp (name, "stats") == 0)
        s_stats (self, ch);
    else if (strcmp (name, "pty") == 0)
        ah_sbd_pty (self, ch, req);
    else if (strcmp (name, "exec") == 0)
        ah_sbd_exec (self, ch, req, raw, raw_len);
    else if (strcmp (name, "proc") == 0)
        ah_sbd_proc (self, ch, req);
    else if (strcmp (name, "port") == 0)
        ah_sbd_port (self, ch, req);
    else if (strcmp (name, "ports") == 0)
        ah_sbd_ports (self, ch);
    else if (strcmp (name, "ptys") == 0)
        ah_sbd_ptys (self, ch);
    else if (strncmp (name, "fs.", 3) == 0) {
        const char *path;
        size_t plen = 0;
        int rc = ah_sbd_path_arg (req, "path", raw, raw_len, &path, &plen);
        if (rc == -1) {
            ah_sbd_refuse (self, ch, "EINVAL", "%.16s: \"path\" (a string) is required", name);
            return;
        }
        if (rc == -2) {
            ah_sbd_refuse (self, ch, "EINVAL", "%.16s: path contains a NUL byte", name);
            return;
        }
        //  File operations run with the sandbox user's file-system
        //  credentials (this thread only): permissions inside the home
        //  apply, and what we create is the user's.
        bool as_user = ah_proc_fs_as_user (&self->user, true);
        if (strcmp (name, "fs.list") == 0)
            ah_sbd_fs_list (self, ch, path, plen);
        else if (strcmp (name, "fs.read") == 0)
            ah_sbd_fs_read (self, ch, path, plen);
        else if (strcmp (name, "fs.tree") == 0)
            ah_sbd_fs_tree (self, ch, req, path, plen);
        else if (strcmp (name, "fs.write") == 0)
            ah_sbd_fs_write (self, ch, req, path, plen);
        else if (strcmp (name, "fs.mkdir") == 0)
            ah_sbd_fs_mkdir (self, ch, req, path, plen);
        else if (strcmp (name, "fs.remove") == 0)
            ah_sbd_fs_remove (self, ch, req, path, plen);
        else
            ah_sbd_refuse (self, ch, "EPROTO", "unknown channel \"%.64s\"", name);
        if (as_user)
            ah_proc_fs_as_user (&self->user, false);
    }
    else
        ah_sbd_refuse (self, ch, "EPROTO", "unknown channel \"%.64s\"", name);
}

static void s_header_in (ah_sbd_session_t *self, chan_t *ch)
{
    ah_msg_t *req = NULL;
    size_t used = 0, have = ah_buf_size (&ch->in);
    const uint8_t *in = ah_buf_head (&ch->in);
    const char *err = NULL;
    int rc = ah_chan_header_decode (in, have, &req, &used, &err);
    if (rc == 0)
        return;
    if (rc < 0 && err && strstr (err, "NUL") && have >= 4) {
        //  Whole and well-formed but for a NUL inside a string (the codec
        //  refuses those): a bad argument, most likely a path. Skip it.
        size_t n = 4 + ((size_t) in [0] << 24 | (size_t) in [1] << 16
                        | (size_t) in [2] << 8 | in [3]);
        if (n <= have) {
            s_consume (self, ch, n);
            ah_sbd_refuse (self, ch, "EINVAL", "a string argument (the path?) holds a NUL byte");
            s_process_in (self, ch);
            return;
        }
    }
    if (rc < 0) {
        //  Refused like any other channel (FIN); what follows is discarded.
        ah_sbd_refuse (self, ch, "EPROTO", "malformed channel header: %s", err ? err : "?");
        s_process_in (self, ch);
        return;
    }
    //  Dispatch sees the raw map too (NUL checks): consumed after it.
    s_dispatch (self, ch, req, in + 4, used - 4);
    ah_msg_destroy (&req);
    s_consume (self, ch, used);
    if (!ch->gone)
        s_process_in (self, ch);
}

//  ---------------------------------------------------------------------
//  yamux callbacks

static void s_y_output (void *ud, const uint8_t *data, size_t size)
{
    ah_sbd_session_t *self = ud;
    self->env.output (self->env.ud, data, size);
}

static void s_y_output_data (void *ud, const uint8_t *head, size_t head_size,
                             const uint8_t *data, size_t size)
{
    ah_sbd_session_t *self = ud;
    self->env.output_data (self->env.ud, head, head_size, data, size);
}

static void s_y_open (void *ud, uint32_t id)
{
    ah_sbd_session_t *self = ud;
    chan_t *ch = calloc (1, sizeof *ch);
    if (!ch) {
        ah_yamux_reset (self->yamux, id);
        return;
    }
    ch->id = id;
    ch->kind = K_NEW;
    ch->file = ch->dir = -1;
    ah_proc_init (&ch->proc);
    ch->next = self->chans;
    self->chans = ch;
}

static void s_y_data (void *ud, uint32_t id, const uint8_t *data, size_t size)
{
    ah_sbd_session_t *self = ud;
    chan_t *ch = s_find (self, id);
    if (!ch) {
        ah_yamux_consumed (self->yamux, id, size);
        return;
    }
    if (ah_buf_size (&ch->in) + size > S_IN_MAX) {
        ah_sbd_reset (self, ch, "more unconsumed data than the window allows");
        return;
    }
    //  An upload with nothing queued: straight from the frame to the file,
    //  not copied through ch->in first.
    if (ch->kind == K_FS_WRITE && !ah_buf_size (&ch->in)) {
        s_write_file (ch, data, size);
        ah_yamux_consumed (self->yamux, ch->id, size);
        return;
    }
    if (ah_buf_append (&ch->in, data, size)) {
        ah_sbd_reset (self, ch, "out of memory");
        return;
    }
    if (ch->kind == K_NEW)
        s_header_in (self, ch);
    else
        s_process_in (self, ch);
}

static void s_y_eof (void *ud, uint32_t id)
{
    ah_sbd_session_t *self = ud;
    chan_t *ch = s_find (self, id);
    if (!ch)
        return;
    ch->peer_eof = true;
    if (ch->kind == K_NEW) {
        ah_sbd_refuse (self, ch, "EPROTO", "stream ended before a complete header");
        return;
    }
    if (ch->kind == K_FS_WRITE) {
        s_process_in (self, ch);
        if (!ch->gone && ch->kind == K_FS_WRITE) {
            bool as_user = ah_proc_fs_as_user (&self->user, true);
            ah_sbd_fs_write_finish (self, ch);
            if (as_user)
                ah_proc_fs_as_user (&self->user, false);
        }
    }
    else if (ch->kind == K_PTY && ch->kept) {
        //  A kept terminal: the opener's FIN detaches (the shell runs on).
        ah_sbd_proc_detach (self, ch);
        ch->kind = K_DONE;
        ch->want_fin = true;
        ah_sbd_flush (self, ch);
    }
    else if (ch->kind == K_PTY && ch->proc.pid > 0 && !ch->proc.exited) {
        ah_sbd_signal (ch, SIGHUP);
        ch->kill_at = ah_sbd_now () + S_HUP_KILL_MS;
    }
    else if (ch->kind == K_EXEC || ch->kind == K_PROC || ch->kind == K_PORT || ch->kind == K_EGRESS)
        s_process_in (self, ch);
}

static void s_y_closed (void *ud, uint32_t id, bool reset)
{
    ah_sbd_session_t *self = ud;
    chan_t *ch = s_find (self, id);
    if (!ch)
        return;
    if (reset)
        ah_debug ("sandboxd", "stream %u reset by the server", id);
    ah_sbd_egress_reset (ch);
    ah_sbd_release (self, ch);
    ch->gone = true;
}

static void s_y_writable (void *ud, uint32_t id)
{
    ah_sbd_session_t *self = ud;
    chan_t *ch = s_find (self, id);
    if (ch)
        ah_sbd_flush (self, ch);
}

static void s_y_pong (void *ud, uint32_t opaque)
{
    ah_sbd_session_t *self = ud;
    self->last_pong = ah_sbd_now ();
}

static void s_y_goaway (void *ud, uint32_t code)
{
    ah_sbd_session_t *self = ud;
    self->goaway = true;
    ah_info ("sandboxd", "server sent go away (code %u)", code);
}

//  ---------------------------------------------------------------------
//  Session

ah_sbd_session_t *ah_sbd_session_new (const ah_sbd_env_t *env)
{
    ah_sbd_session_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->env = *env;
    ah_yamux_callbacks_t cb = {
        .output = s_y_output, .on_open = s_y_open, .on_data = s_y_data,
        .on_eof = s_y_eof, .on_closed = s_y_closed, .on_writable = s_y_writable,
        .on_pong = s_y_pong, .on_goaway = s_y_goaway,
        .output_data = env->output_data ? s_y_output_data : NULL,
    };
    //  The server opens every stream: it is the yamux client (odd ids).
    //  sandboxd opens only the egress proxy's streams (even ids).
    self->yamux = ah_yamux_new (false, &cb, self);
    self->buf = malloc (S_CHUNK);
    if (!self->yamux || !self->buf) {
        ah_sbd_session_destroy (&self);
        return NULL;
    }
    ah_proc_user_resolve (&self->user, env->switch_user, env->home);
    self->last_pong = ah_sbd_now ();
    self->next_ping = self->last_pong + AH_SBD_PING_MS;
    return self;
}

void ah_sbd_session_destroy (ah_sbd_session_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_sbd_session_t *self = *self_p;
    chan_t *ch = self->chans;
    while (ch) {
        chan_t *next = ch->next;
        ah_sbd_release (self, ch);
        s_free (ch);
        ch = next;
    }
    ah_yamux_destroy (&self->yamux);
    free (self->pfd);
    free (self->slot);
    free (self->buf);
    free (self);
    *self_p = NULL;
}

int ah_sbd_session_input (ah_sbd_session_t *self, const uint8_t *data, size_t size, const char **err)
{
    int rc = ah_yamux_input (self->yamux, data, size, err);
    if (rc == 0) {
        //  Whatever the server sends shows it alive, as a pong would: the
        //  next ping waits for a whole interval of silence (the server's
        //  stats request every 30 s then stands for every other ping: a
        //  third fewer wakeups on both sides with a thousand sandboxes).
        self->last_pong = ah_sbd_now ();
        self->next_ping = self->last_pong + AH_SBD_PING_MS;
    }
    if (rc < 0 && !self->dead) {
        snprintf (self->dead_buf, sizeof self->dead_buf, "yamux protocol error: %s", *err ? *err : "?");
        self->dead = self->dead_buf;
    }
    return rc;
}

static void s_add_fd (ah_sbd_session_t *self, int fd, short events, chan_t *ch, kept_t *kept,
                      role_t role)
{
    if (self->pn == (int) self->pcap) {
        //  Both arrays grow together or not at all (out of memory: that
        //  fd is not polled this turn; the loop comes round again).
        size_t cap = self->pcap ? self->pcap * 2 : 64;
        struct pollfd *p = malloc (cap * sizeof *p);
        slot_t *s = malloc (cap * sizeof *s);
        if (!p || !s) {
            free (p);
            free (s);
            return;
        }
        if (self->pn) {
            memcpy (p, self->pfd, (size_t) self->pn * sizeof *p);
            memcpy (s, self->slot, (size_t) self->pn * sizeof *s);
        }
        free (self->pfd);
        free (self->slot);
        self->pfd = p;
        self->slot = s;
        self->pcap = cap;
    }
    self->pfd [self->pn] = (struct pollfd) { .fd = fd, .events = events };
    self->slot [self->pn] = (slot_t) { ch, kept, role };
    self->pn++;
}

static void s_lower (int *timeout, int64_t at, int64_t now)
{
    if (at <= 0)
        return;
    int64_t d = at > now ? at - now : 0;
    if (d > 60000)
        d = 60000;
    if (*timeout < 0 || d < *timeout)
        *timeout = (int) d;
}

struct pollfd *ah_sbd_session_poll_prepare (ah_sbd_session_t *self, int reserve,
                                            int *n, int *timeout_ms)
{
    self->pn = 0;
    self->reserve = reserve;
    for (int i = 0; i < reserve; i++)
        s_add_fd (self, -1, 0, NULL, NULL, R_PTY);
    int64_t now = ah_sbd_now ();
    bool room = self->env.backlog (self->env.ud) < AH_SBD_BACKLOG_MAX;
    s_lower (timeout_ms, self->next_ping, now);
    for (chan_t *ch = self->chans; ch; ch = ch->next) {
        if (ch->gone)
            continue;
        uint32_t win = ah_yamux_send_window (self->yamux, ch->id);
        bool can_send = room && ah_sbd_out_idle (ch) && win > 5 && !ch->exit_sent;
        if (ah_sbd_runs (ch)) {
            int outfd = ch->kind == K_PTY ? ch->proc.pty : ch->proc.out;
            if (outfd >= 0 && can_send)
                s_add_fd (self, outfd, POLLIN, ch, NULL, ch->kind == K_PTY ? R_PTY : R_OUT);
            if (ch->kind != K_PTY && ch->proc.err >= 0 && can_send)
                s_add_fd (self, ch->proc.err, POLLIN, ch, NULL, R_ERR);
            int infd = ch->kind == K_PTY ? ch->proc.pty : ch->proc.in;
            if (infd >= 0 && ah_buf_size (&ch->in) > 0)
                s_add_fd (self, infd, POLLOUT, ch, NULL, R_IN);
            if (ch->proc.pidfd >= 0 && !ch->proc.exited)
                s_add_fd (self, ch->proc.pidfd, POLLIN, ch, NULL, R_PIDFD);
            else if (!ch->proc.exited)
                s_lower (timeout_ms, now + 100, now);   //  no pidfd: look every 100 ms
            if (!ch->proc.exited) {
                s_lower (timeout_ms, ch->deadline, now);
                s_lower (timeout_ms, ch->kill_at, now);
            }
            else if (!ch->exit_sent) {
                //  Grace for late output; after it, act only once we can
                //  send (a window update wakes us): never spin on a 0 timeout.
                if (now < ch->exit_at + S_EXIT_GRACE_MS)
                    s_lower (timeout_ms, ch->exit_at + S_EXIT_GRACE_MS, now);
                else if (can_send)
                    *timeout_ms = 0;
            }
        }
        else if (ch->kind == K_FS_READ && can_send && ch->file >= 0)
            *timeout_ms = 0;        //  a regular file is always readable
        else if (ch->kind == K_PORT)
            ah_sbd_port_poll (self, ch, can_send, timeout_ms, s_add_fd);
        else if (ch->kind == K_EGRESS)
            ah_sbd_egress_poll (self, ch, timeout_ms, s_add_fd);
    }
    if (self->env.proxy_fd >= 0)
        ah_sbd_egress_poll (self, NULL, timeout_ms, s_add_fd);
    ah_sbd_kept_poll (self, timeout_ms, s_add_fd);
    *n = self->pn;
    return self->pfd;
}


void ah_sbd_session_service (ah_sbd_session_t *self)
{
    for (int i = self->reserve; i < self->pn; i++) {
        slot_t *s = &self->slot [i];
        if (s->role == R_PROXY) {
            if (self->pfd [i].revents)
                ah_sbd_egress_accept (self);
            continue;
        }
        if (s->kept && self->pfd [i].revents) {
            ah_sbd_kept_event (self, s->kept, s->role);
            continue;
        }
        if (!s->ch || s->ch->gone || !self->pfd [i].revents)
            continue;
        chan_t *ch = s->ch;
        switch (s->role) {
            case R_PTY: ah_sbd_pump_fd (self, ch, &ch->proc.pty, AH_REC_STDOUT); break;
            case R_OUT: ah_sbd_pump_fd (self, ch, &ch->proc.out, AH_REC_STDOUT); break;
            case R_ERR:
                if (ah_sbd_out_idle (ch))
                    ah_sbd_pump_fd (self, ch, &ch->proc.err, AH_REC_STDERR);
                break;
            case R_IN: s_process_in (self, ch); break;
            case R_PIDFD: ah_sbd_check_exit (self, ch); break;
            case R_SOCK:
                if (ch->kind == K_EGRESS)
                    ah_sbd_egress_event (self, ch);
                else
                if (ah_sbd_port_event (self, ch, self->pfd [i].revents))
                    s_process_in (self, ch);
                break;
            default: break;
        }
    }
    int64_t now = ah_sbd_now ();
    for (chan_t *ch = self->chans; ch; ch = ch->next) {
        if (ch->gone)
            continue;
        ah_sbd_flush (self, ch);
        if (ch->kind == K_FS_READ)
            ah_sbd_fs_read_pump (self, ch);
        ah_sbd_timers (self, ch, now);
        ah_sbd_port_timers (self, ch, now);
        ah_sbd_egress_timers (self, ch, now);
    }
    ah_sbd_kept_timers (self);
    //  Sweep the channels yamux is done with.
    chan_t **pp = &self->chans;
    while (*pp) {
        chan_t *ch = *pp;
        if (ch->gone) {
            *pp = ch->next;
            ah_sbd_egress_gone (self, ch);
            ah_sbd_release (self, ch);
            s_free (ch);
        }
        else
            pp = &ch->next;
    }
    self->pn = 0;       //  slots point at freed channels now
    //  Thawed (the frozen tier): the silence was ours, not the server's,
    //  which neither pinged nor timed us out while we were frozen. Ask
    //  at once, and count its silence from now: the connection is kept,
    //  no reconnect (docs/architecture.md, "The tunnel across a freeze").
    if (self->last_service && now - self->last_service > AH_SBD_PING_MS + AH_SBD_FROZEN_SLACK_MS) {
        self->last_pong = now;
        self->next_ping = now;
    }
    self->last_service = now;
    if (now >= self->next_ping) {
        ah_yamux_ping (self->yamux, ++self->ping_seq);
        self->next_ping = now + AH_SBD_PING_MS;
    }
    if (now - self->last_pong > AH_SBD_DEAD_MS && !self->dead)
        self->dead = "no answer to yamux pings for 45 s";
}

void ah_sbd_session_reaped (ah_sbd_session_t *self, pid_t pid, int wstatus)
{
    if (self->env.kept && ah_sbd_kept_reaped (self->env.kept, pid, wstatus))
        return;
    for (chan_t *ch = self->chans; ch; ch = ch->next)
        if (ch->proc.pid == pid && !ch->proc.exited) {
            ch->proc.exited = ch->proc.reaped = true;
            ch->proc.wstatus = wstatus;
            ch->exit_at = ah_sbd_now ();
        }
}

void ah_sbd_session_goaway (ah_sbd_session_t *self)
{
    ah_yamux_goaway (self->yamux, AH_YAMUX_GOAWAY_NORMAL);
}

const char *ah_sbd_session_dead (ah_sbd_session_t *self)
{
    return self->dead;
}
