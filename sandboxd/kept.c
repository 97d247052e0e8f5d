/*  sandboxd/kept.c: the proc channel (docs/tunnel.md, "proc"): a process
    started by argv, on plain pipes, kept by a key across connections.

    A kept process belongs to the instance (ah_sbd_kept_t), not to the
    yamux session: a tunnel that drops and redials is not its end. While
    a stream is attached the process (its ah_proc_t) is moved into the
    stream's chan_t, and exec.c's record and pump code serves it as it
    serves exec. Every output record is also kept in kept_t.hist, the
    last S_KEPT_BUF bytes of them (whole records), counted from the
    process's start (produced). When the stream ends without EXIT having
    been sent (RST, the connection lost, another stream taking it over)
    the process moves back here, detached: the session (whichever is
    current) reads its stdout and stderr into the history until what
    came since the detach fills it, then stops reading (the process
    blocks once its pipe is full: nothing is dropped). Between
    connections nobody reads: the pipes hold what the kernel buffers.
    The next proc stream with the same key gets the history from its
    "from" offset (default: the detach), then the live output, then
    EXIT; once EXIT is sent the key is free again.

    Kept terminals (a pty channel with an "id") live in the same table
    with pty set: a login shell on a pty instead of argv on pipes, at
    most S_TERM_MAX of them, and while detached their output is read on
    into a ring (hist bounded by S_TERM_RING, oldest whole records
    dropped) rather than held back: a shell is never blocked by a
    terminal nobody watches, and a reattach replays the last
    S_TERM_RING bytes of what it missed.

    One thread (the instance's loop) touches all of it.                 */
#include "sandboxd/chan_int.h"
#include "common/log.h"

#include <errno.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

ah_sbd_kept_t *ah_sbd_kept_new (void)
{
    return calloc (1, sizeof (ah_sbd_kept_t));
}

static void s_kept_free (kept_t *k, int64_t *reaped_ns)
{
    int64_t ns = ah_proc_kill_reap (&k->proc);
    if (reaped_ns)
        *reaped_ns += ns;
    ah_proc_close_fds (&k->proc);
    ah_buf_free (&k->hist);
    free (k);
}

void ah_sbd_kept_destroy (ah_sbd_kept_t **self_p, int64_t *reaped_ns)
{
    if (!self_p || !*self_p)
        return;
    ah_sbd_kept_t *self = *self_p;
    while (self->list) {
        kept_t *k = self->list;
        self->list = k->next;
        s_kept_free (k, reaped_ns);
    }
    free (self);
    *self_p = NULL;
}

bool ah_sbd_kept_reaped (ah_sbd_kept_t *self, pid_t pid, int wstatus)
{
    for (kept_t *k = self->list; k; k = k->next)
        if (k->proc.pid == pid && !k->proc.exited) {
            k->proc.exited = k->proc.reaped = true;
            k->proc.wstatus = wstatus;
            k->exit_at = ah_sbd_now ();
            return true;
        }
    return false;
}

static void s_unlink (ah_sbd_kept_t *self, kept_t *k)
{
    for (kept_t **pp = &self->list; *pp; pp = &(*pp)->next)
        if (*pp == k) {
            *pp = k->next;
            if (k->pty)
                self->terms--;
            else
                self->count--;
            return;
        }
}

//  Keep the record in the history; drop whole records from its front
//  while it holds more than its bound (k->cap).
void ah_sbd_kept_record (kept_t *k, uint8_t kind, const uint8_t *data, size_t size)
{
    if (ah_rec_append (&k->hist, kind, data, size)) {
        ah_warn ("sandboxd", "proc \"%s\": out of memory keeping its output", k->key);
        return;
    }
    k->produced += 5 + size;
    while (ah_buf_size (&k->hist) > k->cap) {
        const uint8_t *h = ah_buf_head (&k->hist);
        size_t n = 5 + ((size_t) h [1] << 24 | (size_t) h [2] << 16 | (size_t) h [3] << 8 | h [4]);
        ah_buf_consume (&k->hist, n);
    }
}

//  ---------------------------------------------------------------------
//  Arguments

static bool s_key_ok (const char *key)
{
    size_t n = strlen (key);
    if (n == 0 || n > S_KEY_MAX)
        return false;
    for (const char *c = key; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')
        ||    *c == '.' || *c == '_' || *c == '-'))
            return false;
    return true;
}

//  "argv": a list of 1..S_ARGV_MAX strings of 1..S_ARG_LEN_MAX bytes
//  (the first non-empty), no NUL. A NULL-terminated copy, or NULL with *err.
static char **s_argv_arg (const ah_msg_t *req, const char **err)
{
    size_t size = 0;
    const void *raw = ah_msg_raw (req, "argv", &size);
    msgpack_unpacked u;
    msgpack_unpacked_init (&u);
    char **argv = NULL;
    *err = "proc: \"argv\" must be a list of 1 to 256 strings";
    if (!raw || msgpack_unpack_next (&u, raw, size, NULL) != MSGPACK_UNPACK_SUCCESS
    ||  u.data.type != MSGPACK_OBJECT_ARRAY || u.data.via.array.size == 0
    ||  u.data.via.array.size > S_ARGV_MAX)
        goto out;
    uint32_t n = u.data.via.array.size;
    argv = calloc (n + 1, sizeof *argv);
    if (!argv) {
        *err = "out of memory";
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        msgpack_object *o = &u.data.via.array.ptr [i];
        if (o->type != MSGPACK_OBJECT_STR || o->via.str.size > S_ARG_LEN_MAX
        ||  (i == 0 && o->via.str.size == 0) || memchr (o->via.str.ptr, 0, o->via.str.size)) {
            *err = "proc: each \"argv\" entry must be a string of at most 4096 bytes "
                   "without NUL (the first not empty)";
            goto fail;
        }
        argv [i] = strndup (o->via.str.ptr, o->via.str.size);
        if (!argv [i]) {
            *err = "out of memory";
            goto fail;
        }
    }
    *err = NULL;
    goto out;
fail:
    for (uint32_t i = 0; argv && argv [i]; i++)
        free (argv [i]);
    free (argv);
    argv = NULL;
out:
    msgpack_unpacked_destroy (&u);
    return argv;
}

static void s_argv_free (char **argv)
{
    for (size_t i = 0; argv && argv [i]; i++)
        free (argv [i]);
    free (argv);
}

//  ---------------------------------------------------------------------
//  Attach and detach

static kept_t *s_find (ah_sbd_kept_t *self, const char *key, bool pty)
{
    for (kept_t *k = self->list; k; k = k->next)
        if (k->pty == pty && strcmp (k->key, key) == 0)
            return k;
    return NULL;
}

//  Start argv under key. The new entry, or NULL with a refusal sent.
static kept_t *s_start (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req, const char *key)
{
    ah_sbd_kept_t *kt = self->env.kept;
    if (kt->count >= S_KEPT_MAX) {
        ah_sbd_refuse (self, ch, "EAGAIN", "proc: %d processes are kept already (the limit)",
                       S_KEPT_MAX);
        return NULL;
    }
    const char *err = NULL;
    char **argv = s_argv_arg (req, &err);
    if (!argv) {
        ah_sbd_refuse (self, ch, "EINVAL", "%s", err);
        return NULL;
    }
    char **env = NULL;
    size_t nenv = 0;
    if (ah_sbd_env_arg (req, &env, &nenv, &err)) {
        s_argv_free (argv);
        ah_sbd_refuse (self, ch, "EINVAL", "proc: %s", err);
        return NULL;
    }
    kept_t *k = calloc (1, sizeof *k);
    char text [256];
    int rc = -1;
    if (k) {
        ah_proc_init (&k->proc);
        k->cap = S_KEPT_BUF;
        snprintf (k->key, sizeof k->key, "%s", key);
        rc = ah_proc_spawn_argv (&k->proc, &self->user, self->env.home,
                                 (const char * const *) argv, self->env.home_fd,
                                 (const char * const *) env, nenv, text, sizeof text);
    }
    else
        snprintf (text, sizeof text, "out of memory");
    int e = errno;
    ah_sbd_env_free (env, nenv);
    s_argv_free (argv);
    if (rc) {
        free (k);
        ah_sbd_refuse (self, ch, e == ENOENT ? "ENOENT" : "EIO", "proc: %s", text);
        return NULL;
    }
    k->next = kt->list;
    kt->list = k;
    kt->count++;
    ah_debug ("sandboxd", "proc \"%s\" started: pid %d", key, (int) k->proc.pid);
    return k;
}

//  "from" (has_from: given) against what k produced (k NULL: nothing
//  yet). false with a refusal sent.
static bool s_from_ok (ah_sbd_session_t *self, chan_t *ch, const char *name, kept_t *k,
                       int64_t from)
{
    if (from < 0 || (uint64_t) from > (k ? k->produced : 0)) {
        ah_sbd_refuse (self, ch, "EINVAL", "%s: \"from\" must be 0 to %llu (the output "
                       "produced so far)", name, (unsigned long long) (k ? k->produced : 0));
        return false;
    }
    return true;
}

//  The stream attaches to k: an older stream is reset, the process moves
//  into ch, the reply, then the replay (whole records) before live output.
static void s_attach (ah_sbd_session_t *self, chan_t *ch, kept_t *k, bool attached,
                      bool has_from, int64_t f, kind_t kind)
{
    if (k->ch) {
        //  Taken over: the old stream ends (RST), its process stays.
        chan_t *old = k->ch;
        ah_sbd_reset (self, old, "taken over by another stream");
    }
    //  Where the replay starts: "from" (the record bytes the opener got
    //  whole), else what came since the last stream went (a take-over:
    //  nothing; a new process: all of it).
    uint64_t from = has_from ? (uint64_t) f : attached ? k->detached_at : 0;
    uint64_t start = k->produced - ah_buf_size (&k->hist);
    uint64_t lost = from < start ? start - from : 0;
    if (from > start)
        start = from;
    size_t skip = (size_t) (start - (k->produced - ah_buf_size (&k->hist)));
    size_t replay = ah_buf_size (&k->hist) - skip;
    ch->proc = k->proc;
    ah_proc_init (&k->proc);
    ch->kept = k;
    ch->kind = kind;
    ch->exit_at = k->exit_at;
    k->ch = ch;
    ah_msg_t *map = ah_msg_new ("");
    ah_msg_set_bool (map, "ok", true);
    if (k->pty)
        ah_msg_set_str (map, "id", k->key);
    ah_msg_set_int (map, "pid", ch->proc.pid);
    ah_msg_set_bool (map, "attached", attached);
    ah_msg_set_int (map, "offset", (int64_t) start);
    ah_msg_set_int (map, "buffered", (int64_t) replay);
    ah_msg_set_int (map, "lost", (int64_t) lost);
    ah_msg_set_bool (map, "exited", ch->proc.exited);
    ah_sbd_send_header (self, ch, map);
    ah_msg_destroy (&map);
    if (replay && ah_buf_append (&ch->out, ah_buf_head (&k->hist) + skip, replay))
        ah_warn ("sandboxd", "\"%s\": out of memory replaying its output", k->key);
    ah_sbd_flush (self, ch);
}

void ah_sbd_proc (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req)
{
    if (!self->env.kept) {
        ah_sbd_refuse (self, ch, "EPROTO", "unknown channel \"proc\"");
        return;
    }
    const char *key = ah_msg_str (req, "key");
    if (!key || !s_key_ok (key)) {
        ah_sbd_refuse (self, ch, "EINVAL", "proc: \"key\" must be 1 to 64 of A-Z a-z 0-9 . _ -");
        return;
    }
    bool spawn = ah_msg_has (req, "argv") && !ah_msg_is_nil (req, "argv");
    bool has_from = ah_msg_has (req, "from") && !ah_msg_is_nil (req, "from");
    int64_t f = has_from ? ah_msg_int (req, "from", -1) : 0;
    kept_t *k = s_find (self->env.kept, key, false);
    bool attached = k != NULL;
    if (!k && !spawn) {
        ah_sbd_refuse (self, ch, "ENOENT", "proc: no process is kept under \"%s\"", key);
        return;
    }
    if (!s_from_ok (self, ch, "proc", k, f))
        return;
    if (!k && !(k = s_start (self, ch, req, key)))
        return;
    s_attach (self, ch, k, attached, has_from, f, K_PROC);
}

void ah_sbd_pty_kept (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req,
                      const char *term, int cols, int rows, bool sized)
{
    ah_sbd_kept_t *kt = self->env.kept;
    if (!kt) {
        ah_sbd_refuse (self, ch, "EACCES", "pty: this sandboxd keeps no terminals (a reader)");
        return;
    }
    const char *id = ah_msg_str (req, "id");
    if (!id || !s_key_ok (id)) {
        ah_sbd_refuse (self, ch, "EINVAL", "pty: \"id\" must be 1 to 64 of A-Z a-z 0-9 . _ -");
        return;
    }
    bool create = ah_msg_bool (req, "create", false);
    bool has_from = ah_msg_has (req, "from") && !ah_msg_is_nil (req, "from");
    int64_t f = has_from ? ah_msg_int (req, "from", -1) : 0;
    kept_t *k = s_find (kt, id, true);
    if (create && k) {
        ah_sbd_refuse (self, ch, "EEXIST", "pty: a terminal is kept under \"%s\" already", id);
        return;
    }
    if (!create && !k) {
        ah_sbd_refuse (self, ch, "ENOENT", "pty: no terminal is kept under \"%s\"", id);
        return;
    }
    if (!s_from_ok (self, ch, "pty", k, f))
        return;
    if (create) {
        if (kt->terms >= S_TERM_MAX) {
            ah_sbd_refuse (self, ch, "EAGAIN", "pty: %d terminals are kept already (the limit)",
                           S_TERM_MAX);
            return;
        }
        char err [256];
        k = calloc (1, sizeof *k);
        if (!k) {
            ah_sbd_refuse (self, ch, "EIO", "pty: out of memory");
            return;
        }
        ah_proc_init (&k->proc);
        k->pty = true;
        k->cap = S_TERM_RING;
        snprintf (k->key, sizeof k->key, "%s", id);
        if (ah_proc_spawn_pty (&k->proc, &self->user, self->env.home, term, (unsigned short) cols,
                               (unsigned short) rows, err, sizeof err)) {
            free (k);
            ah_sbd_refuse (self, ch, "EIO", "pty: %s", err);
            return;
        }
        k->next = kt->list;
        kt->list = k;
        kt->terms++;
        ah_debug ("sandboxd", "terminal \"%s\" started: pid %d", id, (int) k->proc.pid);
    }
    else if (sized) {
        int fd = k->ch ? k->ch->proc.pty : k->proc.pty;
        struct winsize ws = { .ws_row = (unsigned short) rows, .ws_col = (unsigned short) cols };
        if (fd >= 0)
            ioctl (fd, TIOCSWINSZ, &ws);
    }
    s_attach (self, ch, k, !create, has_from, f, K_PTY);
}

void ah_sbd_ptys (ah_sbd_session_t *self, chan_t *ch)
{
    ah_sbd_kept_t *kt = self->env.kept;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init (&sb);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array (&pk, kt ? kt->terms : 0);
    for (kept_t *k = kt ? kt->list : NULL; k; k = k->next) {
        if (!k->pty)
            continue;
        const ah_proc_t *p = k->ch ? &k->ch->proc : &k->proc;
        msgpack_pack_map (&pk, 5);
        msgpack_pack_str_with_body (&pk, "id", 2);
        msgpack_pack_str_with_body (&pk, k->key, strlen (k->key));
        msgpack_pack_str_with_body (&pk, "pid", 3);
        msgpack_pack_int64 (&pk, p->pid);
        msgpack_pack_str_with_body (&pk, "exited", 6);
        if (p->exited) msgpack_pack_true (&pk); else msgpack_pack_false (&pk);
        msgpack_pack_str_with_body (&pk, "attached", 8);
        if (k->ch) msgpack_pack_true (&pk); else msgpack_pack_false (&pk);
        msgpack_pack_str_with_body (&pk, "produced", 8);
        msgpack_pack_uint64 (&pk, k->produced);
    }
    ah_msg_t *map = ah_msg_new ("");
    ah_msg_set_bool (map, "ok", true);
    ah_msg_set_raw (map, "terminals", sb.data, sb.size);
    msgpack_sbuffer_destroy (&sb);
    ah_sbd_finish (self, ch, &map);
}

void ah_sbd_proc_detach (ah_sbd_session_t *self, chan_t *ch)
{
    kept_t *k = ch->kept;
    ch->kept = NULL;
    if (!k)
        return;
    k->ch = NULL;
    if (ch->exit_sent) {
        //  Its end was told: the key is free again.
        s_unlink (self->env.kept, k);
        s_kept_free (k, self->env.reaped_ns);
        return;
    }
    k->proc = ch->proc;
    k->exit_at = ch->exit_at;
    k->detached_at = k->produced;
    ah_proc_init (&ch->proc);
    ah_debug ("sandboxd", "%s \"%s\" detached (pid %d)", k->pty ? "terminal" : "proc", k->key,
              (int) k->proc.pid);
}

//  ---------------------------------------------------------------------
//  Detached: output into the buffer, exits

void ah_sbd_kept_poll (ah_sbd_session_t *self, int *timeout_ms,
                       void (*add) (ah_sbd_session_t *, int, short, chan_t *, kept_t *, role_t))
{
    if (!self->env.kept)
        return;
    for (kept_t *k = self->env.kept->list; k; k = k->next) {
        if (k->ch)
            continue;
        if (k->pty && k->proc.pty >= 0)         //  a ring: always read on
            add (self, k->proc.pty, POLLIN, NULL, k, R_KEPT_OUT);
        //  Room for one more record of at least one byte: all that came
        //  since the stream went stays in the history.
        bool room = k->produced - k->detached_at + 6 <= S_KEPT_BUF;
        if (room && k->proc.out >= 0)
            add (self, k->proc.out, POLLIN, NULL, k, R_KEPT_OUT);
        if (room && k->proc.err >= 0)
            add (self, k->proc.err, POLLIN, NULL, k, R_KEPT_ERR);
        if (!k->proc.exited && k->proc.pidfd >= 0)
            add (self, k->proc.pidfd, POLLIN, NULL, k, R_KEPT_PIDFD);
        else if (!k->proc.exited && (*timeout_ms < 0 || *timeout_ms > 100))
            *timeout_ms = 100;                  //  no pidfd: look every 100 ms
    }
}

static void s_kept_exit (ah_sbd_session_t *self, kept_t *k)
{
    int64_t ns = 0;
    if (!k->proc.exited && ah_proc_poll_exit (&k->proc, &ns)) {
        if (self->env.reaped_ns)
            *self->env.reaped_ns += ns;
        k->exit_at = ah_sbd_now ();
    }
}

static void s_kept_read (ah_sbd_session_t *self, kept_t *k, int *fdp, uint8_t kind)
{
    uint64_t since = k->produced - k->detached_at;
    if (*fdp < 0 || (!k->pty && since + 6 > S_KEPT_BUF))
        return;
    size_t want = k->pty ? S_CHUNK : S_KEPT_BUF - (size_t) since - 5;
    if (want > S_CHUNK)
        want = S_CHUNK;
    ssize_t r = read (*fdp, self->buf, want);
    if (r > 0) {
        ah_sbd_kept_record (k, kind, self->buf, (size_t) r);
        return;
    }
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    close (*fdp);
    *fdp = -1;
}

void ah_sbd_kept_event (ah_sbd_session_t *self, kept_t *k, role_t role)
{
    //  The slot may be stale: a stream attached it during this service.
    if (k->ch)
        return;
    if (role == R_KEPT_OUT)
        s_kept_read (self, k, k->pty ? &k->proc.pty : &k->proc.out, AH_REC_STDOUT);
    else if (role == R_KEPT_ERR)
        s_kept_read (self, k, &k->proc.err, AH_REC_STDERR);
    else if (role == R_KEPT_PIDFD)
        s_kept_exit (self, k);
}

void ah_sbd_kept_timers (ah_sbd_session_t *self)
{
    if (!self->env.kept)
        return;
    for (kept_t *k = self->env.kept->list; k; k = k->next)
        if (!k->ch && k->proc.pidfd < 0)
            s_kept_exit (self, k);
}
