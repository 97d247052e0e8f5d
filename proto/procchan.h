/*  proto/procchan.h: the opener's side of the proc channel
    (docs/tunnel.md, "proc"): a process inside the sandbox, started by
    argv on plain pipes and kept under a key across connections, so that
    a server that lost the tunnel for a moment attaches to it again.

    The server builds the header with ah_procchan_header and opens it
    like any channel (CHAN_OPEN, docs/messages.md); the stream then
    carries records (proto/channel.h): STDIN, EOF and KILL from the
    opener, STDOUT, STDERR and EXIT from sandboxd. Closing the stream
    with RST (or losing the connection) detaches: the process runs on
    and its output waits in sandboxd (its last 1 MiB is kept) for the
    next header with the same key, which says from where to replay.                                          */
#ifndef AH_PROCCHAN_H
#define AH_PROCCHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "proto/msg.h"

#define AH_PROCCHAN_KEY_MAX     64      //  [A-Za-z0-9._-]
#define AH_PROCCHAN_ARGV_MAX    256     //  entries
#define AH_PROCCHAN_ARG_MAX     4096    //  bytes of one entry
#define AH_PROCCHAN_ENV_MAX     256     //  entries
#define AH_PROCCHAN_KEPT_MAX    16      //  processes kept per sandbox
#define AH_PROCCHAN_BUFFER      (1u << 20)  //  output history kept per process
//  Kept terminals (the pty channel with an "id", docs/tunnel.md "pty"):
//  at most this many per sandbox, each with a ring of its last output.
#define AH_PTYCHAN_KEPT_MAX     32
#define AH_PTYCHAN_RING         (256u << 10)    //  record bytes kept per terminal

//  The header: {"ch": "proc", "key": key, "argv": [...], "env": {...},
//  "from": int}. argv NULL: attach only (ENOENT when nothing runs under
//  key); else start argv unless a process is kept under key already, and
//  attach. env: nenv "K=V" strings (may be NULL). from: the record bytes
//  of output the opener has received whole from this process, over all
//  its streams (the replay starts there; a reply's "offset" plus what
//  came after it), or < 0 for sandboxd's default (what came since the
//  last stream went). NULL when an argument is out of the bounds above
//  (the caller checked them; sandboxd checks again).
ah_msg_t *ah_procchan_header (const char *key, const char * const *argv, size_t argc,
                              const char * const *env, size_t nenv, int64_t from);

//  A kept terminal's header: {"ch": "pty", "id": id, "create": create,
//  "cols": cols, "rows": rows, "term": "xterm-256color", "from": from}.
//  create: start a shell under id (EEXIST when one is kept), else attach
//  (ENOENT when none). cols/rows 0: not given (an attach keeps the size).
//  from < 0: sandboxd's default. NULL when id breaks the key grammar.
ah_msg_t *ah_ptychan_header (const char *id, bool create, int cols, int rows, int64_t from);

typedef struct {
    bool    ok;
    int64_t pid;
    bool    attached;           //  the process ran already (a reattach)
    int64_t offset;             //  where the replay starts (record bytes since the start)
    int64_t buffered;           //  record bytes replayed before the live output
    int64_t lost;               //  record bytes asked for (from) no longer held
    bool    exited;             //  it has exited; EXIT follows its output
    char    code [16];          //  refusal: tunnel.md's code
    char    error [256];        //  refusal: sandboxd's sentence
} ah_procchan_reply_t;

//  The reply header into r. 0, or -1 when it is not a reply at all.
int ah_procchan_reply (const ah_msg_t *reply, ah_procchan_reply_t *r);

//  An EXIT record's payload: 0 with *status (0..255, -1 when signalled)
//  and *signal (0 when it exited), or -1 when malformed.
int ah_procchan_exit (const uint8_t *payload, size_t size, int *status, int *signal);

#endif
