/*  sandboxd/chan.h: one yamux session and the channels on it (internal).

    The transport (WebSocket or a raw socket) feeds received bytes in with
    ah_sbd_session_input and takes bytes to send from env.output. The loop
    asks for the fds to poll (ah_sbd_session_poll_prepare), polls, then
    calls ah_sbd_session_service. Nothing here blocks for long: files are
    read and written in chunks the yamux windows allow, processes are
    watched through pidfds (or a short timer where the kernel lacks them).

    Flow control, both ways: output fds (pty, pipes, files) are read only
    while the stream's send window is open, nothing is pending on the
    stream and the transport's backlog is under AH_SBD_BACKLOG_MAX;
    received bytes are given back to yamux (ah_yamux_consumed) only once
    they have been written to the pty, pipe or file.                    */
#ifndef AH_SANDBOXD_CHAN_H
#define AH_SANDBOXD_CHAN_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "proto/egress.h"
#include "sandboxd/sandboxd.h"

#define AH_SBD_BACKLOG_MAX   (1u << 20)     //  transport bytes queued before producers pause
#define AH_SBD_PING_MS       15000          //  yamux ping after this much silence (docs/tunnel.md)
#define AH_SBD_DEAD_MS       45000          //  nothing heard for this long: the connection is dead
#define AH_SBD_EGRESS_MAX    AH_EGRESS_CONN_MAX  //  egress proxy connections at once (proto/egress.h)
//  The loop turns at least every AH_SBD_PING_MS while connected: a turn
//  this much later than that was not ours to take (the sandbox was frozen,
//  docker pause, or its host slept): docs/architecture.md.
#define AH_SBD_FROZEN_SLACK_MS 5000

//  The processes of the proc channel, kept across connections: owned by
//  the instance, lent to each session (docs/tunnel.md, "proc").
typedef struct ah_sbd_kept_t ah_sbd_kept_t;
ah_sbd_kept_t *ah_sbd_kept_new (void);
//  Kills and reaps every kept process; their CPU time to *reaped_ns.
void ah_sbd_kept_destroy (ah_sbd_kept_t **self_p, int64_t *reaped_ns);
//  A child reaped by someone else (PID 1's sweep): true when it was kept.
bool ah_sbd_kept_reaped (ah_sbd_kept_t *self, pid_t pid, int wstatus);

typedef struct {
    int  home_fd;                   //  borrowed, open on the home directory
    const char *home;               //  borrowed: HOME for children
    const char *agent_id;           //  borrowed: hello reply
    bool switch_user;
    bool read_only;                 //  a reader: pty, exec and writes refused
    ah_sandboxd_stats_t stats;      //  resolved: ALL or TREE
    int64_t *reaped_ns;             //  CPU of reaped children (TREE stats), owned by the instance
    ah_sbd_kept_t *kept;            //  borrowed: the instance's kept processes (NULL: proc refused)
    int  proxy_fd;                  //  borrowed: the egress proxy's listener (docs/egress.md), -1 none
    const char *trust_dir;          //  borrowed: where hello's egress CA goes (sandboxd/trust.h), NULL: nowhere
    bool trust_env;                 //  and the variables pointing at it set (the binary)
    //  Transport: bytes to send (must take them all), bytes still queued.
    void   (*output) (void *ud, const uint8_t *data, size_t size);
    //  Optional: a yamux data frame as header + payload (ah_yamux_callbacks_t)
    void   (*output_data) (void *ud, const uint8_t *head, size_t head_size,
                           const uint8_t *data, size_t size);
    size_t (*backlog) (void *ud);
    void *ud;
} ah_sbd_env_t;

typedef struct ah_sbd_session_t ah_sbd_session_t;

ah_sbd_session_t *ah_sbd_session_new (const ah_sbd_env_t *env);
//  Aborts every channel: processes killed and reaped, temporary files removed.
void ah_sbd_session_destroy (ah_sbd_session_t **self_p);

//  Transport bytes in. 0, or -1 on a yamux protocol error (*err).
int ah_sbd_session_input (ah_sbd_session_t *self, const uint8_t *data, size_t size, const char **err);

//  The poll set: entries [0, reserve) are the caller's to fill, the rest
//  the session's. *n gets the total; *timeout_ms is lowered to the next
//  timer (left alone if later). The array stays valid until the next call.
struct pollfd *ah_sbd_session_poll_prepare (ah_sbd_session_t *self, int reserve,
                                            int *n, int *timeout_ms);
//  After poll: handle the session's revents, timers, and pump output.
void ah_sbd_session_service (ah_sbd_session_t *self);

//  A child was reaped by someone else (PID 1 sweeping orphans).
void ah_sbd_session_reaped (ah_sbd_session_t *self, pid_t pid, int wstatus);

//  Send go away (normal) before leaving.
void ah_sbd_session_goaway (ah_sbd_session_t *self);
//  Non-NULL once the session should end (dead peer, protocol error): why.
const char *ah_sbd_session_dead (ah_sbd_session_t *self);

//  Sum of CPU time (ns) per the stats scope; *source names the method.
int64_t ah_sbd_cpu_ns (ah_sandboxd_stats_t scope, const pid_t *roots, size_t nroots,
                       int64_t reaped_ns, const char **source);

#endif
