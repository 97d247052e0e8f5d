/*  sandboxd/chan.c: the channels (docs/tunnel.md section 3) on one yamux
    session. See chan.h for the flow-control rules.

    Each stream the server opens becomes a chan_t. Its life: gather the
    header (NEW), dispatch by "ch" to a handler which replies and either
    finishes at once (DONE: FIN after the reply) or keeps state (FS_READ,
    FS_WRITE, PTY, EXEC); the fs.* handlers live in fs.c. Yamux may report a stream closed from inside any
    call into it (a reset, a close meeting the peer's FIN): that callback
    only releases the channel's resources and marks it gone; the structs
    are freed at the end of ah_sbd_session_service, so no pointer held by
    a caller dangles.                                                 */
#include "sandboxd/chan_int.h"
#include "sandboxd/path.h"
#include "proto/channel.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

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
        default: return "EIO";
    }
}

//  ---------------------------------------------------------------------
//  Output

void ah_sbd_flush (ah_sbd_session_t *self, chan_t *ch)
{
    while (!ch->gone && ch->out_off < ch->out_len) {
        ssize_t n = ah_yamux_write (self->yamux, ch->id, ch->out + ch->out_off,
                                    ch->out_len - ch->out_off);
        if (n < 0) {
            ch->out_off = ch->out_len = 0;      //  the stream cannot carry more
            return;
        }
        if (n == 0)
            return;
        ch->out_off += (size_t) n;
    }
    if (ch->gone)
        return;
    ch->out_off = ch->out_len = 0;
    if (ch->want_fin && !ch->fin_sent) {
        ch->fin_sent = true;
        ah_yamux_close (self->yamux, ch->id);
    }
}

bool ah_sbd_out_idle (const chan_t *ch)
{
    return ch->out_off == ch->out_len;
}

int ah_sbd_queue (chan_t *ch, const uint8_t *data, size_t size)
{
    if (ch->out_off == ch->out_len)
        ch->out_off = ch->out_len = 0;
    if (ch->out_len + size > ch->out_cap) {
        size_t cap = ch->out_cap ? ch->out_cap : 4096;
        while (cap < ch->out_len + size)
            cap *= 2;
        uint8_t *p = realloc (ch->out, cap);
        if (!p)
            return -1;
        ch->out = p;
        ch->out_cap = cap;
    }
    memcpy (ch->out + ch->out_len, data, size);
    ch->out_len += size;
    return 0;
}

void ah_sbd_send_header (ah_sbd_session_t *self, chan_t *ch, ah_msg_t *map)
{
    uint8_t *hdr = NULL;
    size_t size = 0;
    if (ah_chan_header_encode (map, &hdr, &size) == 0) {
        ah_sbd_queue (ch, hdr, size);
        free (hdr);
    }
    else
        ah_warn ("sandboxd", "stream %u: reply header did not encode", ch->id);
    ah_sbd_flush (self, ch);
}

static void s_send_record (ah_sbd_session_t *self, chan_t *ch, uint8_t kind,
                           const uint8_t *data, size_t size)
{
    uint8_t pre [5];
    ah_rec_prefix (kind, (uint32_t) size, pre);
    ah_sbd_queue (ch, pre, 5);
    if (size)
        ah_sbd_queue (ch, data, size);
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
    free (ch->in);
    free (ch->out);
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

static int s_path_arg (const ah_msg_t *req, const char *key, const uint8_t *raw, size_t raw_len,
                       const char **path, size_t *len, bool required);

static void s_hello (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req)
{
    int64_t v = ah_msg_int (req, "version", -1);
    if (v != AH_PROTOCOL_VERSION) {
        ah_error ("sandboxd", "server speaks tunnel protocol %lld, this sandboxd speaks %d",
                  (long long) v, AH_PROTOCOL_VERSION);
        ah_sbd_refuse (self, ch, "EVERSION",
                  "sandboxd speaks tunnel protocol %d, the server speaks %lld: deploy the "
                  "sandboxd that ships with this server (restart the sandbox so it mounts "
                  "the server's sandboxd)", AH_PROTOCOL_VERSION, (long long) v);
        return;
    }
    self->hello_done = true;
    ah_msg_t *map = ah_msg_new ("");
    ah_msg_set_bool (map, "ok", true);
    ah_msg_set_int (map, "version", AH_PROTOCOL_VERSION);
    ah_msg_set_str (map, "agent_id", self->env.agent_id ? self->env.agent_id : "");
    ah_msg_set_str (map, "user", self->user.name);
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
//  pty, exec

//  Decode the optional "env" raw map into "K=V" strings (caller frees).
static int s_env_arg (const ah_msg_t *req, char ***out, size_t *count, const char **err)
{
    *out = NULL;
    *count = 0;
    if (!ah_msg_has (req, "env") || ah_msg_is_nil (req, "env"))
        return 0;
    size_t size = 0;
    const void *raw = ah_msg_raw (req, "env", &size);
    if (!raw) {
        *err = "env must be a map of strings";
        return -1;
    }
    msgpack_unpacked u;
    msgpack_unpacked_init (&u);
    int rc = -1;
    if (msgpack_unpack_next (&u, raw, size, NULL) != MSGPACK_UNPACK_SUCCESS
    ||  u.data.type != MSGPACK_OBJECT_MAP || u.data.via.map.size > S_ENV_MAX) {
        *err = "env must be a map of at most 256 strings";
        goto out;
    }
    char **v = calloc (u.data.via.map.size + 1, sizeof *v);
    if (!v) {
        *err = "out of memory";
        goto out;
    }
    size_t n = 0;
    for (uint32_t i = 0; i < u.data.via.map.size; i++) {
        msgpack_object *k = &u.data.via.map.ptr [i].key;
        msgpack_object *val = &u.data.via.map.ptr [i].val;
        if (k->type != MSGPACK_OBJECT_STR || val->type != MSGPACK_OBJECT_STR
        ||  k->via.str.size == 0 || k->via.str.size > 256 || val->via.str.size > 32768
        ||  memchr (k->via.str.ptr, '=', k->via.str.size)
        ||  memchr (k->via.str.ptr, 0, k->via.str.size)
        ||  memchr (val->via.str.ptr, 0, val->via.str.size)) {
            *err = "env: keys and values must be strings (no '=' in keys, no NUL, bounded length)";
            for (size_t j = 0; j < n; j++)
                free (v [j]);
            free (v);
            goto out;
        }
        v [n] = malloc (k->via.str.size + val->via.str.size + 2);
        if (!v [n])
            continue;
        memcpy (v [n], k->via.str.ptr, k->via.str.size);
        v [n][k->via.str.size] = '=';
        memcpy (v [n] + k->via.str.size + 1, val->via.str.ptr, val->via.str.size);
        v [n][k->via.str.size + 1 + val->via.str.size] = 0;
        n++;
    }
    *out = v;
    *count = n;
    rc = 0;
out:
    msgpack_unpacked_destroy (&u);
    return rc;
}

static void s_spawned_reply (ah_sbd_session_t *self, chan_t *ch)
{
    ah_msg_t *map = ah_msg_new ("");
    ah_msg_set_bool (map, "ok", true);
    ah_msg_set_int (map, "pid", ch->proc.pid);
    ah_sbd_send_header (self, ch, map);
    ah_msg_destroy (&map);
}

static void s_pty (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req)
{
    const char *term = ah_msg_str (req, "term");
    if (!term || !*term)
        term = "xterm-256color";
    int64_t cols = ah_msg_int (req, "cols", 80), rows = ah_msg_int (req, "rows", 24);
    if (cols < 1 || cols > 1000 || rows < 1 || rows > 1000 || strlen (term) > 64
    ||  strpbrk (term, "\r\n=")) {
        ah_sbd_refuse (self, ch, "EINVAL", "pty: cols and rows must be 1..1000 and term a short name");
        return;
    }
    char err [256];
    if (ah_proc_spawn_pty (&ch->proc, &self->user, self->env.home, term,
                           (unsigned short) cols, (unsigned short) rows, err, sizeof err)) {
        ah_sbd_refuse (self, ch, "EIO", "pty: %s", err);
        return;
    }
    ch->kind = K_PTY;
    s_spawned_reply (self, ch);
}

static void s_exec (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req,
                    const uint8_t *raw, size_t raw_len)
{
    const char *cmd = ah_msg_str (req, "cmd");
    if (!cmd) {
        ah_sbd_refuse (self, ch, "EINVAL", "exec: \"cmd\" (a string) is required");
        return;
    }
    double timeout = ah_msg_double (req, "timeout", 300.0);
    if (ah_msg_has (req, "timeout") && !ah_msg_is_nil (req, "timeout")
    &&  ah_msg_double (req, "timeout", -1) == -1 && ah_msg_int (req, "timeout", -1) == -1) {
        ah_sbd_refuse (self, ch, "EINVAL", "exec: \"timeout\" must be a number of seconds");
        return;
    }
    if (!(timeout > 0) || timeout > S_TIMEOUT_MAX) {
        ah_sbd_refuse (self, ch, "EINVAL", "exec: \"timeout\" must be > 0 and at most 7 days");
        return;
    }
    int cwd = -1;
    if (ah_msg_has (req, "cwd") && !ah_msg_is_nil (req, "cwd")) {
        const char *p;
        size_t pl;
        if (s_path_arg (req, "cwd", raw, raw_len, &p, &pl, true)) {
            ah_sbd_refuse (self, ch, "EINVAL", "exec: \"cwd\" must be a string without NUL bytes");
            return;
        }
        const char *err = NULL;
        cwd = ah_path_open (self->env.home_fd, p, pl, O_RDONLY | O_DIRECTORY, &err);
        if (cwd < 0) {
            ah_sbd_refuse (self, ch, ah_sbd_code (-cwd), "exec: cwd \"%.200s\": %s", p, err);
            return;
        }
    }
    char **env = NULL;
    size_t nenv = 0;
    const char *eerr = NULL;
    if (s_env_arg (req, &env, &nenv, &eerr)) {
        if (cwd >= 0)
            close (cwd);
        ah_sbd_refuse (self, ch, "EINVAL", "exec: %s", eerr);
        return;
    }
    char err [256];
    int rc = ah_proc_spawn_exec (&ch->proc, &self->user, self->env.home, cmd,
                                 cwd >= 0 ? cwd : self->env.home_fd,
                                 (const char * const *) env, nenv, err, sizeof err);
    if (cwd >= 0)
        close (cwd);
    for (size_t i = 0; i < nenv; i++)
        free (env [i]);
    free (env);
    if (rc) {
        ah_sbd_refuse (self, ch, "EIO", "exec: %s", err);
        return;
    }
    ch->kind = K_EXEC;
    ch->deadline = ah_sbd_now () + (int64_t) (timeout * 1000.0);
    s_spawned_reply (self, ch);
}

static void s_send_exit (ah_sbd_session_t *self, chan_t *ch)
{
    ah_proc_close_fds (&ch->proc);
    ah_msg_t *map = ah_msg_new ("");
    int st = ch->proc.wstatus;
    ah_msg_set_int (map, "status", WIFEXITED (st) ? WEXITSTATUS (st) : -1);
    ah_msg_set_int (map, "signal", WIFSIGNALED (st) ? WTERMSIG (st) : 0);
    ah_msg_set_bool (map, "timed_out", ch->timed_out);
    uint8_t *data = NULL;
    size_t size = 0;
    if (ah_msg_encode (map, &data, &size) == 0) {
        s_send_record (self, ch, AH_REC_EXIT, data, size);
        free (data);
    }
    ah_msg_destroy (&map);
    ch->exit_sent = true;
    ch->want_fin = true;
    ah_sbd_flush (self, ch);
}

//  Signal the channel's process group, and the process itself: a pty
//  child may not have reached setsid yet, and then the group is not there.
static void s_signal (chan_t *ch, int sig)
{
    if (ch->proc.pid > 0 && !ch->proc.reaped) {
        kill (-ch->proc.pid, sig);
        kill (ch->proc.pid, sig);
    }
}

//  ---------------------------------------------------------------------
//  Received bytes

//  Records from the opener on pty/exec. Returns bytes used.
static size_t s_records_in (ah_sbd_session_t *self, chan_t *ch, bool *blocked)
{
    size_t off = 0;
    int in_fd = ch->kind == K_PTY ? ch->proc.pty : ch->proc.in;
    while (off < ch->in_len && !ch->gone) {
        if (ch->rhlen < 5) {
            size_t take = 5 - ch->rhlen;
            if (take > ch->in_len - off)
                take = ch->in_len - off;
            memcpy (ch->rhdr + ch->rhlen, ch->in + off, take);
            ch->rhlen += take;
            off += take;
            if (ch->rhlen < 5)
                break;
            ch->rkind = ch->rhdr [0];
            ch->rleft = (uint32_t) ch->rhdr [1] << 24 | (uint32_t) ch->rhdr [2] << 16
                      | (uint32_t) ch->rhdr [3] << 8 | ch->rhdr [4];
            ch->rsmall_len = 0;
            if ((ch->rkind != AH_REC_STDIN && ch->rkind != AH_REC_RESIZE && ch->rkind != AH_REC_EOF)
            ||  ch->rleft > AH_REC_MAX
            ||  (ch->rkind == AH_REC_RESIZE && ch->rleft > sizeof ch->rsmall)) {
                ah_sbd_reset (self, ch, "malformed record");
                return off;
            }
        }
        if (ch->rleft > 0) {
            size_t avail = ch->in_len - off;
            if (avail > ch->rleft)
                avail = ch->rleft;
            if (ch->rkind == AH_REC_STDIN && in_fd >= 0 && !ch->stdin_eof) {
                ssize_t w = write (in_fd, ch->in + off, avail);
                if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
                    *blocked = true;
                    break;
                }
                if (w < 0)          //  the reader is gone: drop stdin from now on
                    w = (ssize_t) avail, ch->stdin_eof = true;
                off += (size_t) w;
                ch->rleft -= (uint32_t) w;
            }
            else if (ch->rkind == AH_REC_RESIZE) {
                memcpy (ch->rsmall + ch->rsmall_len, ch->in + off, avail);
                ch->rsmall_len += avail;
                off += avail;
                ch->rleft -= (uint32_t) avail;
            }
            else {                  //  stdin closed, or EOF with a payload
                off += avail;
                ch->rleft -= (uint32_t) avail;
            }
            if (ch->rleft > 0)
                continue;
        }
        //  A whole record.
        if (ch->rkind == AH_REC_RESIZE && ch->kind == K_PTY && ch->proc.pty >= 0) {
            char *err = NULL;
            ah_msg_t *m = ah_msg_decode ("", ch->rsmall, ch->rsmall_len, &err);
            int64_t cols = m ? ah_msg_int (m, "cols", 0) : 0, rows = m ? ah_msg_int (m, "rows", 0) : 0;
            if (cols >= 1 && cols <= 1000 && rows >= 1 && rows <= 1000) {
                struct winsize ws = { .ws_row = (unsigned short) rows, .ws_col = (unsigned short) cols };
                ioctl (ch->proc.pty, TIOCSWINSZ, &ws);
            }
            else
                ah_debug ("sandboxd", "stream %u: resize ignored (%s)", ch->id, err ? err : "out of range");
            free (err);
            ah_msg_destroy (&m);
        }
        else if (ch->rkind == AH_REC_EOF && ch->kind == K_EXEC)
            ch->stdin_eof = true;
        ch->rhlen = 0;
    }
    return off;
}

//  Use what sits in ch->in; give yamux back the bytes used.
static void s_process_in (ah_sbd_session_t *self, chan_t *ch)
{
    size_t used = 0;
    bool blocked = false;
    if (ch->kind == K_NEW) {
        //  handled in s_header_in
        return;
    }
    if (ch->kind == K_FS_WRITE) {
        while (used < ch->in_len) {
            if (ch->write_errno) {
                used = ch->in_len;          //  drain; the trailer reports it
                break;
            }
            ssize_t w = write (ch->file, ch->in + used, ch->in_len - used);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                ch->write_errno = errno;
                continue;
            }
            used += (size_t) w;
            ch->done += (uint64_t) w;
        }
    }
    else if (ch->kind == K_PTY || ch->kind == K_EXEC)
        used = s_records_in (self, ch, &blocked);
    else
        used = ch->in_len;                  //  nothing expected: discard
    if (ch->gone)
        return;
    if (used) {
        memmove (ch->in, ch->in + used, ch->in_len - used);
        ch->in_len -= used;
        ah_yamux_consumed (self->yamux, ch->id, used);
    }
    if (ch->kind == K_DONE && ch->in_len == 0) {
        free (ch->in);          //  a finished channel keeps no buffers
        ch->in = NULL;
        ch->in_cap = 0;
    }
    if (ch->kind == K_EXEC && ch->in_len == 0 && (ch->stdin_eof || ch->peer_eof)
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

static int s_path_arg (const ah_msg_t *req, const char *key, const uint8_t *raw, size_t raw_len,
                       const char **path, size_t *len, bool required)
{
    *path = ah_msg_str (req, key);
    if (!*path)
        return -1;
    if (s_str_has_nul (raw, raw_len, key))
        return -2;
    *len = strlen (*path);
    (void) required;
    return 0;
}

static void s_dispatch (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req,
                        const uint8_t *raw, size_t raw_len)
{
    const char *name = ah_msg_str (req, "ch");
    if (!name) {
        ah_sbd_refuse (self, ch, "EPROTO", "the header has no \"ch\" string");
        return;
    }
    if (strcmp (name, "hello") == 0) {
        s_hello (self, ch, req);
        return;
    }
    if (!self->hello_done) {
        ah_sbd_refuse (self, ch, "EPROTO", "channel \"%.64s\" before hello", name);
        return;
    }
    if (strcmp (name, "ping") == 0)
        ah_sbd_ok (self, ch);
    else if (strcmp (name, "stats") == 0)
        s_stats (self, ch);
    else if (strcmp (name, "pty") == 0)
        s_pty (self, ch, req);
    else if (strcmp (name, "exec") == 0)
        s_exec (self, ch, req, raw, raw_len);
    else if (strncmp (name, "fs.", 3) == 0) {
        const char *path;
        size_t plen = 0;
        int rc = s_path_arg (req, "path", raw, raw_len, &path, &plen, true);
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
    size_t used = 0;
    const char *err = NULL;
    int rc = ah_chan_header_decode (ch->in, ch->in_len, &req, &used, &err);
    if (rc == 0)
        return;
    if (rc < 0 && err && strstr (err, "NUL") && ch->in_len >= 4) {
        //  Whole and well-formed but for a NUL inside a string (the codec
        //  refuses those): a bad argument, most likely a path. Skip it.
        size_t n = 4 + ((size_t) ch->in [0] << 24 | (size_t) ch->in [1] << 16
                        | (size_t) ch->in [2] << 8 | ch->in [3]);
        if (n <= ch->in_len) {
            memmove (ch->in, ch->in + n, ch->in_len - n);
            ch->in_len -= n;
            ah_yamux_consumed (self->yamux, ch->id, n);
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
    //  Keep the raw map until dispatch has looked at it (NUL checks).
    uint8_t *raw = malloc (used);
    size_t raw_len = used > 4 ? used - 4 : 0;
    if (raw)
        memcpy (raw, ch->in, used);
    memmove (ch->in, ch->in + used, ch->in_len - used);
    ch->in_len -= used;
    ah_yamux_consumed (self->yamux, ch->id, used);
    s_dispatch (self, ch, req, raw ? raw + 4 : (const uint8_t *) "", raw ? raw_len : 0);
    free (raw);
    ah_msg_destroy (&req);
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
    if (ch->in_len + size > S_IN_MAX) {
        ah_sbd_reset (self, ch, "more unconsumed data than the window allows");
        return;
    }
    if (ch->in_len + size > ch->in_cap) {
        size_t cap = ch->in_cap ? ch->in_cap : 4096;
        while (cap < ch->in_len + size)
            cap *= 2;
        if (cap > S_IN_MAX)
            cap = S_IN_MAX;
        uint8_t *p = realloc (ch->in, cap);
        if (!p) {
            ah_sbd_reset (self, ch, "out of memory");
            return;
        }
        ch->in = p;
        ch->in_cap = cap;
    }
    memcpy (ch->in + ch->in_len, data, size);
    ch->in_len += size;
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
    else if (ch->kind == K_PTY && ch->proc.pid > 0 && !ch->proc.exited) {
        s_signal (ch, SIGHUP);
        ch->kill_at = ah_sbd_now () + S_HUP_KILL_MS;
    }
    else if (ch->kind == K_EXEC)
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
    };
    //  The server opens every stream: it is the yamux client (odd ids).
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
    if (rc < 0 && !self->dead) {
        snprintf (self->dead_buf, sizeof self->dead_buf, "yamux protocol error: %s", *err ? *err : "?");
        self->dead = self->dead_buf;
    }
    return rc;
}

static void s_add_fd (ah_sbd_session_t *self, int fd, short events, chan_t *ch, role_t role)
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
    self->slot [self->pn] = (slot_t) { ch, role };
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
        s_add_fd (self, -1, 0, NULL, R_PTY);
    int64_t now = ah_sbd_now ();
    bool room = self->env.backlog (self->env.ud) < AH_SBD_BACKLOG_MAX;
    s_lower (timeout_ms, self->next_ping, now);
    for (chan_t *ch = self->chans; ch; ch = ch->next) {
        if (ch->gone)
            continue;
        uint32_t win = ah_yamux_send_window (self->yamux, ch->id);
        bool can_send = room && ah_sbd_out_idle (ch) && win > 5 && !ch->exit_sent;
        if (ch->kind == K_PTY || ch->kind == K_EXEC) {
            int outfd = ch->kind == K_PTY ? ch->proc.pty : ch->proc.out;
            if (outfd >= 0 && can_send)
                s_add_fd (self, outfd, POLLIN, ch, ch->kind == K_PTY ? R_PTY : R_OUT);
            if (ch->kind == K_EXEC && ch->proc.err >= 0 && can_send)
                s_add_fd (self, ch->proc.err, POLLIN, ch, R_ERR);
            int infd = ch->kind == K_PTY ? ch->proc.pty : ch->proc.in;
            if (infd >= 0 && ch->in_len > 0)
                s_add_fd (self, infd, POLLOUT, ch, R_IN);
            if (ch->proc.pidfd >= 0 && !ch->proc.exited)
                s_add_fd (self, ch->proc.pidfd, POLLIN, ch, R_PIDFD);
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
    }
    *n = self->pn;
    return self->pfd;
}

//  Read a pty or pipe into a record while the window allows.
static void s_pump_fd (ah_sbd_session_t *self, chan_t *ch, int *fdp, uint8_t kind)
{
    uint32_t win = ah_yamux_send_window (self->yamux, ch->id);
    if (*fdp < 0 || win <= 5 || !ah_sbd_out_idle (ch))
        return;
    size_t want = win - 5;
    if (want > S_CHUNK)
        want = S_CHUNK;
    ssize_t r = read (*fdp, self->buf, want);
    if (r > 0) {
        s_send_record (self, ch, kind, self->buf, (size_t) r);
        return;
    }
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    //  EOF on a pipe, or EIO from a pty whose last slave closed.
    close (*fdp);
    *fdp = -1;
}

static void s_check_exit (ah_sbd_session_t *self, chan_t *ch)
{
    if (!ch->proc.exited) {
        int64_t ns = 0;
        if (ah_proc_poll_exit (&ch->proc, &ns)) {
            if (self->env.reaped_ns)
                *self->env.reaped_ns += ns;
            ch->exit_at = ah_sbd_now ();
        }
    }
}

static void s_timers (ah_sbd_session_t *self, chan_t *ch, int64_t now)
{
    if (ch->kind != K_PTY && ch->kind != K_EXEC)
        return;
    if (ch->proc.pidfd < 0)
        s_check_exit (self, ch);
    if (!ch->proc.exited) {
        if (ch->deadline && now >= ch->deadline && !ch->timed_out) {
            ch->timed_out = true;
            s_signal (ch, SIGKILL);
            ah_debug ("sandboxd", "stream %u: exec timed out, process group %d killed",
                      ch->id, (int) ch->proc.pid);
        }
        if (ch->kill_at && now >= ch->kill_at) {
            s_signal (ch, SIGKILL);
            ch->kill_at = 0;
        }
        return;
    }
    if (ch->exit_sent)
        return;
    bool out_open = ch->kind == K_PTY ? ch->proc.pty >= 0
                  : ch->proc.out >= 0 || ch->proc.err >= 0;
    if (!out_open) {
        if (ah_sbd_out_idle (ch))
            s_send_exit (self, ch);
        return;
    }
    //  Exited but something (a background job) still holds the output
    //  open: after the grace period, send what is readable now and end.
    if (now >= ch->exit_at + S_EXIT_GRACE_MS && ah_sbd_out_idle (ch)
    &&  ah_yamux_send_window (self->yamux, ch->id) > 5) {
        if (ch->kind == K_PTY)
            s_pump_fd (self, ch, &ch->proc.pty, AH_REC_STDOUT);
        else {
            s_pump_fd (self, ch, &ch->proc.out, AH_REC_STDOUT);
            if (ah_sbd_out_idle (ch))
                s_pump_fd (self, ch, &ch->proc.err, AH_REC_STDERR);
        }
        if (ah_sbd_out_idle (ch))
            s_send_exit (self, ch);
    }
}

void ah_sbd_session_service (ah_sbd_session_t *self)
{
    for (int i = self->reserve; i < self->pn; i++) {
        slot_t *s = &self->slot [i];
        if (!s->ch || s->ch->gone || !self->pfd [i].revents)
            continue;
        chan_t *ch = s->ch;
        switch (s->role) {
            case R_PTY: s_pump_fd (self, ch, &ch->proc.pty, AH_REC_STDOUT); break;
            case R_OUT: s_pump_fd (self, ch, &ch->proc.out, AH_REC_STDOUT); break;
            case R_ERR:
                if (ah_sbd_out_idle (ch))
                    s_pump_fd (self, ch, &ch->proc.err, AH_REC_STDERR);
                break;
            case R_IN: s_process_in (self, ch); break;
            case R_PIDFD: s_check_exit (self, ch); break;
        }
    }
    int64_t now = ah_sbd_now ();
    for (chan_t *ch = self->chans; ch; ch = ch->next) {
        if (ch->gone)
            continue;
        ah_sbd_flush (self, ch);
        if (ch->kind == K_FS_READ)
            ah_sbd_fs_read_pump (self, ch);
        s_timers (self, ch, now);
    }
    //  Sweep the channels yamux is done with.
    chan_t **pp = &self->chans;
    while (*pp) {
        chan_t *ch = *pp;
        if (ch->gone) {
            *pp = ch->next;
            ah_sbd_release (self, ch);
            s_free (ch);
        }
        else
            pp = &ch->next;
    }
    self->pn = 0;       //  slots point at freed channels now
    if (now >= self->next_ping) {
        ah_yamux_ping (self->yamux, ++self->ping_seq);
        self->next_ping = now + AH_SBD_PING_MS;
    }
    if (now - self->last_pong > AH_SBD_DEAD_MS && !self->dead)
        self->dead = "no answer to yamux pings for 45 s";
}

void ah_sbd_session_reaped (ah_sbd_session_t *self, pid_t pid, int wstatus)
{
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
