/*  sandboxd/exec.c: the channels that run a process (docs/tunnel.md):
    pty (a login shell on a terminal) and exec (/bin/sh -c CMD on pipes);
    the proc channel (kept.c) runs on the same records and pumps.
    Spawning (proc.c does the fork), the records the opener sends (stdin,
    resize, end of input), output pumped into records as the window
    allows, timeouts, and the EXIT record once the process is gone and its
    output drained.                                                     */
#include "sandboxd/chan_int.h"
#include "sandboxd/path.h"
#include "proto/channel.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

//  ---------------------------------------------------------------------
//  Spawning

//  Decode the optional "env" raw map into "K=V" strings (caller frees).
int ah_sbd_env_arg (const ah_msg_t *req, char ***out, size_t *count, const char **err)
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

void ah_sbd_env_free (char **env, size_t count)
{
    for (size_t i = 0; env && i < count; i++)
        free (env [i]);
    free (env);
}

static void s_send_record (ah_sbd_session_t *self, chan_t *ch, uint8_t kind,
                           const uint8_t *data, size_t size)
{
    if (ah_rec_append (&ch->out, kind, data, size))
        ah_warn ("sandboxd", "stream %u: out of memory queueing a record", ch->id);
    ah_sbd_flush (self, ch);
}

static void s_spawned_reply (ah_sbd_session_t *self, chan_t *ch)
{
    ah_msg_t *map = ah_msg_new ("");
    ah_msg_set_bool (map, "ok", true);
    ah_msg_set_int (map, "pid", ch->proc.pid);
    ah_sbd_send_header (self, ch, map);
    ah_msg_destroy (&map);
}

void ah_sbd_pty (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req)
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
    if (ah_msg_has (req, "id") && !ah_msg_is_nil (req, "id")) {
        bool sized = ah_msg_has (req, "cols") && !ah_msg_is_nil (req, "cols")
                  && ah_msg_has (req, "rows") && !ah_msg_is_nil (req, "rows");
        ah_sbd_pty_kept (self, ch, req, term, (int) cols, (int) rows, sized);
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

void ah_sbd_exec (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req,
                  const uint8_t *raw, size_t raw_len)
{
    const char *cmd = ah_msg_str (req, "cmd");
    if (!cmd) {
        ah_sbd_refuse (self, ch, "EINVAL", "exec: \"cmd\" (a string) is required");
        return;
    }
    double timeout = ah_msg_double (req, "timeout", 300.0);     //  its type: s_args_ok (chan.c)
    if (!(timeout > 0) || timeout > S_TIMEOUT_MAX) {
        ah_sbd_refuse (self, ch, "EINVAL", "exec: \"timeout\" must be > 0 and at most 7 days");
        return;
    }
    int cwd = -1;
    if (ah_msg_has (req, "cwd") && !ah_msg_is_nil (req, "cwd")) {
        const char *p;
        size_t pl;
        if (ah_sbd_path_arg (req, "cwd", raw, raw_len, &p, &pl)) {
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
    if (ah_sbd_env_arg (req, &env, &nenv, &eerr)) {
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
    ah_sbd_env_free (env, nenv);
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
    if (ch->kept)
        ah_sbd_proc_detach (self, ch);      //  its end is told: the key is free again
    ah_sbd_flush (self, ch);
}

//  Signal the channel's process group, and the process itself: a pty
//  child may not have reached setsid yet, and then the group is not there.
void ah_sbd_signal (chan_t *ch, int sig)
{
    if (ch->proc.pid > 0 && !ch->proc.reaped) {
        kill (-ch->proc.pid, sig);
        kill (ch->proc.pid, sig);
    }
}

//  ---------------------------------------------------------------------
//  Records from the opener

typedef struct { ah_sbd_session_t *self; chan_t *ch; } rec_ctx_t;

//  A whole record: what it asks for.
static void s_record_end (chan_t *ch, uint8_t kind)
{
    if (kind == AH_REC_RESIZE && ch->kind == K_PTY && ch->proc.pty >= 0) {
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
    else if (kind == AH_REC_EOF && (ch->kind == K_EXEC || ch->kind == K_PROC))
        ch->stdin_eof = true;
    else if (kind == AH_REC_KILL && ch->kind != K_PTY)
        ah_sbd_signal (ch, SIGKILL);
    else if (kind == AH_REC_KILL && ch->kept && !ch->proc.exited && !ch->kill_at) {
        //  A kept terminal ended: hang up, SIGKILL if it lingers.
        ah_sbd_signal (ch, SIGHUP);
        ch->kill_at = ah_sbd_now () + S_HUP_KILL_MS;
    }
    ch->rsmall_len = 0;
}

//  A piece of a record: stdin is written as far as the pty or pipe takes
//  it (the rest stays unconsumed until it can take more).
static ssize_t s_record_piece (void *arg, uint8_t kind, const uint8_t *data, size_t size, bool last)
{
    rec_ctx_t *c = arg;
    chan_t *ch = c->ch;
    int in_fd = ch->kind == K_PTY ? ch->proc.pty : ch->proc.in;
    size_t took = size;
    if (kind != AH_REC_STDIN && kind != AH_REC_RESIZE && kind != AH_REC_EOF
    &&  kind != AH_REC_KILL) {
        ah_sbd_reset (c->self, ch, "malformed record");
        return -1;
    }
    if (kind == AH_REC_STDIN && in_fd >= 0 && !ch->stdin_eof && size) {
        ssize_t w = write (in_fd, data, size);
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        if (w < 0)                  //  the reader is gone: drop stdin from now on
            ch->stdin_eof = true;
        else
            took = (size_t) w;
    }
    else if (kind == AH_REC_RESIZE) {
        if (ch->rsmall_len + size > sizeof ch->rsmall) {
            ah_sbd_reset (c->self, ch, "malformed record");
            return -1;
        }
        memcpy (ch->rsmall + ch->rsmall_len, data, size);
        ch->rsmall_len += size;
    }
    //  Anything else (stdin closed, EOF or KILL with a payload) is dropped.
    if (last && took == size)
        s_record_end (ch, kind);
    return (ssize_t) took;
}

size_t ah_sbd_records_in (ah_sbd_session_t *self, chan_t *ch)
{
    rec_ctx_t c = { self, ch };
    const char *err = NULL;
    ssize_t used = ah_rec_take (&ch->rec, ah_buf_head (&ch->in), ah_buf_size (&ch->in),
                                s_record_piece, &c, &err);
    if (used < 0) {
        ah_sbd_reset (self, ch, err);
        return 0;
    }
    return (size_t) used;
}

//  ---------------------------------------------------------------------
//  Output and the process's end

//  Read a pty or pipe into a record while the window allows.
void ah_sbd_pump_fd (ah_sbd_session_t *self, chan_t *ch, int *fdp, uint8_t kind)
{
    uint32_t win = ah_yamux_send_window (self->yamux, ch->id);
    if (*fdp < 0 || win <= 5 || !ah_sbd_out_idle (ch))
        return;
    size_t want = win - 5;
    if (want > S_CHUNK)
        want = S_CHUNK;
    ssize_t r = read (*fdp, self->buf, want);
    if (r > 0) {
        if (ch->kept)
            ah_sbd_kept_record (ch->kept, kind, self->buf, (size_t) r);
        s_send_record (self, ch, kind, self->buf, (size_t) r);
        return;
    }
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    //  EOF on a pipe, or EIO from a pty whose last slave closed.
    close (*fdp);
    *fdp = -1;
}

void ah_sbd_check_exit (ah_sbd_session_t *self, chan_t *ch)
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

void ah_sbd_timers (ah_sbd_session_t *self, chan_t *ch, int64_t now)
{
    if (!ah_sbd_runs (ch))
        return;
    if (ch->proc.pidfd < 0)
        ah_sbd_check_exit (self, ch);
    if (!ch->proc.exited) {
        if (ch->deadline && now >= ch->deadline && !ch->timed_out) {
            ch->timed_out = true;
            ah_sbd_signal (ch, SIGKILL);
            ah_debug ("sandboxd", "stream %u: exec timed out, process group %d killed",
                      ch->id, (int) ch->proc.pid);
        }
        if (ch->kill_at && now >= ch->kill_at) {
            ah_sbd_signal (ch, SIGKILL);
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
            ah_sbd_pump_fd (self, ch, &ch->proc.pty, AH_REC_STDOUT);
        else {
            ah_sbd_pump_fd (self, ch, &ch->proc.out, AH_REC_STDOUT);
            if (ah_sbd_out_idle (ch))
                ah_sbd_pump_fd (self, ch, &ch->proc.err, AH_REC_STDERR);
        }
        if (ah_sbd_out_idle (ch))
            s_send_exit (self, ch);
    }
}
