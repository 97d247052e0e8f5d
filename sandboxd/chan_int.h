/*  sandboxd/chan_int.h: what the channel files share: chan.c (the
    session, the channel table, headers in and dispatch, output), exec.c
    (pty and exec: processes and their records), kept.c (the proc
    channel and the processes kept across connections) and fs.c (the fs.*
    channels). Internal to sandboxd: one thread, the instance's loop,
    touches all of it.                                                */
#ifndef AH_SANDBOXD_CHAN_INT_H
#define AH_SANDBOXD_CHAN_INT_H

#include "sandboxd/chan.h"
#include "sandboxd/proc.h"
#include "proto/buf.h"
#include "proto/channel.h"
#include "proto/msg.h"
#include "proto/procchan.h"
#include "proto/yamux.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#define S_CHUNK          (64u * 1024u)      //  largest read from a file or fd at once
#define S_FILE_CHUNK     (256u * 1024u)     //  largest read of fs.read at once (fewer, bigger frames)
#define S_IN_MAX         (AH_YAMUX_MAX_WINDOW + 16)
#define S_LIST_BYTES     60000              //  fs.list entries kept under the header cap
#define S_LIST_NAMES     200000             //  names read from one directory at most
#define S_EXIT_GRACE_MS  1000               //  output still drained after the process exited
#define S_HUP_KILL_MS    5000               //  pty: SIGHUP, then SIGKILL after this
#define S_TIMEOUT_MAX    (7 * 24 * 3600.0)  //  longest exec timeout accepted
#define S_ENV_MAX        256                //  exec env entries
#define S_KEPT_MAX       AH_PROCCHAN_KEPT_MAX   //  proc: kept processes per instance
#define S_KEPT_BUF       AH_PROCCHAN_BUFFER     //  proc: output held while detached (record bytes)
#define S_KEY_MAX        AH_PROCCHAN_KEY_MAX    //  proc: key length
#define S_ARGV_MAX       AH_PROCCHAN_ARGV_MAX   //  proc: argv entries
#define S_ARG_LEN_MAX    AH_PROCCHAN_ARG_MAX    //  proc: bytes of one argv entry
#define S_TERM_MAX       AH_PTYCHAN_KEPT_MAX    //  pty: kept terminals per instance
#define S_TERM_RING      AH_PTYCHAN_RING        //  pty: a kept terminal's output ring (record bytes)

typedef enum { K_NEW, K_DONE, K_FS_READ, K_FS_WRITE, K_PTY, K_EXEC, K_PROC, K_PORT, K_EGRESS } kind_t;
typedef enum { R_PTY, R_OUT, R_ERR, R_IN, R_PIDFD, R_KEPT_OUT, R_KEPT_ERR, R_KEPT_PIDFD, R_SOCK, R_PROXY } role_t;

typedef struct kept_s kept_t;

typedef struct chan_s {
    struct chan_s *next;
    uint32_t id;
    kind_t   kind;
    bool     gone;              //  yamux forgot the stream: free at the sweep
    bool     peer_eof;          //  the opener sent FIN
    bool     want_fin;          //  FIN once out drains
    bool     fin_sent;

    ah_buf_t in;                //  received, not yet used (nor consumed): at most S_IN_MAX
    ah_buf_t out;               //  to send, not yet taken by yamux

    //  pty/exec: records being received
    ah_rec_reader_t rec;
    uint8_t  rsmall [256];      //  a RESIZE payload
    size_t   rsmall_len;

    //  pty/exec/proc: the process (proc: moved here from its kept_t
    //  while attached, moved back when the stream ends)
    ah_proc_t proc;
    kept_t  *kept;              //  proc: the kept process this stream is attached to
    bool     stdin_eof;         //  close stdin once in drains
    bool     timed_out;
    int64_t  deadline;          //  exec timeout (ms, monotonic), 0 none
    int64_t  kill_at;           //  SIGKILL after SIGHUP (pty), 0 none
    int64_t  exit_at;           //  when the process exited
    bool     exit_sent;

    //  files
    int      file;
    int      dir;
    uint64_t size, done;
    uint64_t flushed;           //  fs.write: bytes whose writeback was started
    char     leaf [NAME_MAX + 1];
    char     tmp [NAME_MAX + 1];
    int      write_errno;       //  fs.write: first error while writing

    //  port (port.c): the socket is file
    int      port;
    int      port_family;       //  AF_INET or AF_INET6: the loopback it reached
    bool     port_connecting;   //  the connect is in progress (deadline: its end)
    bool     port_eof;          //  the socket's end was read
    bool     port_shut;         //  its writing side was shut (the opener's FIN)

    //  egress (egress.c): a connection to the proxy; file is its socket,
    //  out gathers its request head (then it is a K_PORT)
    bool     egress;            //  counted in egress_count (a proxy connection)
    bool     egress_reply;      //  the stream is open, the server's answer awaited
    bool     egress_connect;    //  CONNECT (200 to the client first), else a plain request
} chan_t;

//  A process of the proc channel, owned by the instance (ah_sbd_kept_t),
//  so that it outlives the connection: detached, its output is read
//  into buf until an opener attaches again by key.
struct kept_s {
    kept_t  *next;
    char     key [S_KEY_MAX + 1];
    bool     pty;               //  a kept terminal (pty with an id), else a proc process
    size_t   cap;               //  hist's bound: S_KEPT_BUF, or S_TERM_RING for a terminal
    ah_proc_t proc;             //  while detached; moved into ch->proc while attached
    chan_t  *ch;                //  the attached stream, NULL when detached
    ah_buf_t hist;              //  the last records produced (whole): at most S_KEPT_BUF bytes
    uint64_t produced;          //  record bytes produced ever (the offset after hist)
    uint64_t detached_at;       //  produced when the last stream went
    int64_t  exit_at;           //  when it exited (ms, monotonic), 0 running
};

struct ah_sbd_kept_t {
    kept_t  *list;
    size_t   count;             //  proc processes
    size_t   terms;             //  kept terminals
};

typedef struct { chan_t *ch; kept_t *kept; role_t role; } slot_t;

//  The channel kinds that run a process.
static inline bool ah_sbd_runs (const chan_t *ch)
{
    return ch->kind == K_PTY || ch->kind == K_EXEC || ch->kind == K_PROC;
}

struct ah_sbd_session_t {
    ah_sbd_env_t env;
    ah_yamux_t *yamux;
    chan_t *chans;
    bool    hello_done;
    bool    goaway;
    const char *dead;
    char    dead_buf [160];
    struct pollfd *pfd;
    slot_t *slot;
    size_t  pcap;
    int     reserve;
    int     pn;
    uint8_t *buf;               //  S_CHUNK scratch
    int64_t next_ping, last_pong;
    int64_t last_service;       //  the loop's last turn (a frozen sandbox's gap, chan.c)
    uint32_t ping_seq;
    ah_proc_user_t user;        //  who terminals and commands run as
    size_t  egress_count;       //  connections of the proxy (K_EGRESS and theirs as K_PORT)
};

//  Helpers (chan.c)
int64_t     ah_sbd_now (void);
//  The tunnel.md error code for an errno.
const char *ah_sbd_code (int e);
//  Hand pending output to yamux as the window allows; FIN when drained
//  and asked for.
void        ah_sbd_flush (ah_sbd_session_t *self, chan_t *ch);
bool        ah_sbd_out_idle (const chan_t *ch);
//  Encode and send a reply or trailer header.
void        ah_sbd_send_header (ah_sbd_session_t *self, chan_t *ch, ah_msg_t *map);
//  The channel's last header (destroyed), FIN, discard what else comes.
void        ah_sbd_finish (ah_sbd_session_t *self, chan_t *ch, ah_msg_t **map_p);
//  Refuse: error header, FIN, discard whatever else comes.
void        ah_sbd_refuse (ah_sbd_session_t *self, chan_t *ch, const char *code,
                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));
//  {"ok": true} and FIN.
void        ah_sbd_ok (ah_sbd_session_t *self, chan_t *ch);
//  Release processes, fds and temporary files (idempotent).
void        ah_sbd_release (ah_sbd_session_t *self, chan_t *ch);
//  Abort the stream with RST.
void        ah_sbd_reset (ah_sbd_session_t *self, chan_t *ch, const char *why);

//  A path argument of the request header (raw: the header's msgpack
//  map): 0, -1 missing or not a string, -2 holds a NUL byte.
int         ah_sbd_path_arg (const ah_msg_t *req, const char *key, const uint8_t *raw,
                             size_t raw_len, const char **path, size_t *len);

//  pty and exec (exec.c): spawn and reply.
void   ah_sbd_pty (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req);
void   ah_sbd_exec (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req,
                    const uint8_t *raw, size_t raw_len);
//  The opener's records at the front of ch->in: stdin written as far as
//  the pty or pipe takes it. Returns the bytes used (a malformed record
//  resets the stream).
size_t ah_sbd_records_in (ah_sbd_session_t *self, chan_t *ch);
//  Read a pty or pipe into a record while the window allows.
void   ah_sbd_pump_fd (ah_sbd_session_t *self, chan_t *ch, int *fdp, uint8_t kind);
//  Whether the process exited (its pidfd was readable, or no pidfd).
void   ah_sbd_check_exit (ah_sbd_session_t *self, chan_t *ch);
//  Timeouts, the kill after a hangup, and EXIT once the output is drained.
void   ah_sbd_timers (ah_sbd_session_t *self, chan_t *ch, int64_t now);
//  Signal the channel's process group and the process itself.
void   ah_sbd_signal (chan_t *ch, int sig);

//  exec's "env" argument (a map of strings) as "K=V" strings (caller
//  frees each and the array). 0, or -1 with *err.
int    ah_sbd_env_arg (const ah_msg_t *req, char ***out, size_t *count, const char **err);
void   ah_sbd_env_free (char **env, size_t count);

//  The proc channel (kept.c).
void ah_sbd_proc (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req);
//  A pty with an "id": a kept terminal, created or attached (kept.c).
void ah_sbd_pty_kept (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req,
                      const char *term, int cols, int rows, bool sized);
//  The ptys channel: the kept terminals, listed (kept.c).
void ah_sbd_ptys (ah_sbd_session_t *self, chan_t *ch);
//  A proc stream ends (closed, reset, connection lost): its process goes
//  back to the kept table, or leaves it once EXIT was sent.
void ah_sbd_proc_detach (ah_sbd_session_t *self, chan_t *ch);
//  Detached processes: their fds into the poll set; read, exits.
void ah_sbd_kept_poll (ah_sbd_session_t *self, int *timeout_ms,
                       void (*add) (ah_sbd_session_t *, int, short, chan_t *, kept_t *, role_t));
void ah_sbd_kept_event (ah_sbd_session_t *self, kept_t *k, role_t role);
void ah_sbd_kept_timers (ah_sbd_session_t *self);
//  A record the process produced while attached, into its history.
void ah_sbd_kept_record (kept_t *k, uint8_t kind, const uint8_t *data, size_t size);

//  The egress proxy (egress.c): its listener into the poll set (when
//  there is room for one more connection), a connection accepted, a
//  connection's socket readable (its head), the stream's bytes while the
//  server's answer is awaited (the bytes used), the deadlines, and a
//  channel that goes (the count).
void   ah_sbd_egress_poll (ah_sbd_session_t *self, chan_t *ch, int *timeout_ms,
                           void (*add) (ah_sbd_session_t *, int, short, chan_t *, kept_t *, role_t));
void   ah_sbd_egress_accept (ah_sbd_session_t *self);
void   ah_sbd_egress_event (ah_sbd_session_t *self, chan_t *ch);
size_t ah_sbd_egress_in (ah_sbd_session_t *self, chan_t *ch);
void   ah_sbd_egress_timers (ah_sbd_session_t *self, chan_t *ch, int64_t now);
void   ah_sbd_egress_gone (ah_sbd_session_t *self, chan_t *ch);
//  The server reset the stream while its answer was awaited: 502.
void   ah_sbd_egress_reset (chan_t *ch);

//  The port and ports channels (port.c).
void   ah_sbd_port (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req);
void   ah_sbd_ports (ah_sbd_session_t *self, chan_t *ch);
//  The opener's bytes at the front of ch->in written to the socket as far
//  as it takes them: the bytes used.
size_t ah_sbd_port_in (ah_sbd_session_t *self, chan_t *ch);
//  After the opener's bytes were used (left: what is still in ch->in):
//  the opener's FIN shuts the socket's writing side once all went.
void   ah_sbd_port_eof_check (chan_t *ch, size_t left);
void   ah_sbd_port_poll (ah_sbd_session_t *self, chan_t *ch, bool can_send, int *timeout_ms,
                         void (*add) (ah_sbd_session_t *, int, short, chan_t *, kept_t *, role_t));
//  The socket's events; true when the opener's bytes may go on (the
//  socket took some).
bool   ah_sbd_port_event (ah_sbd_session_t *self, chan_t *ch, short revents);
void   ah_sbd_port_timers (ah_sbd_session_t *self, chan_t *ch, int64_t now);

//  The fs channels (fs.c). path is plen bytes, checked for NUL already.
void ah_sbd_fs_list (ah_sbd_session_t *self, chan_t *ch, const char *path, size_t plen);
void ah_sbd_fs_read (ah_sbd_session_t *self, chan_t *ch, const char *path, size_t plen);
//  fs.tree (fs_tree.c): the whole reply queued, FIN once sent.
void ah_sbd_fs_tree (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req,
                     const char *path, size_t plen);
//  Send file bytes while the window and the transport allow.
void ah_sbd_fs_read_pump (ah_sbd_session_t *self, chan_t *ch);
void ah_sbd_fs_write (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req,
                      const char *path, size_t plen);
//  The opener's FIN: land the file (fsync, rename) or report why not.
void ah_sbd_fs_write_finish (ah_sbd_session_t *self, chan_t *ch);
void ah_sbd_fs_mkdir (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req,
                      const char *path, size_t plen);
void ah_sbd_fs_remove (ah_sbd_session_t *self, chan_t *ch, const ah_msg_t *req,
                       const char *path, size_t plen);

#endif
