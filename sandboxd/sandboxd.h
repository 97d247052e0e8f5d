/*  sandboxd/sandboxd.h: the daemon inside every sandbox, as a library.

    The static binary `sandboxd` is ah_sandboxd_main(). The fake driver
    runs the same daemon in-process with ah_sandboxd_start(): one thread
    per sandbox, several instances per process, no global mutable state.

    DESIGN: one thread per instance runs one poll(2) loop over the wake
    pipe (stop requests), the transport socket (WebSocket, or a raw yamux
    byte stream in tests), and every pty, pipe and pidfd of the running
    channels; timers (exec timeouts, yamux pings, reconnect backoff) are
    poll timeouts. Layers: transport (proto/ws.c) -> yamux session
    (proto/yamux.c) -> channels (sandboxd/chan.c, exec.c, fs.c; paths:
    path.c; processes: proc.c). Everything an instance owns is touched
    only by its thread; ah_sandboxd_stop() talks to it through the wake
    pipe and joins it. Idle, the loop sleeps in poll
    until the next yamux ping (15 s).

    Behaviour (docs/sandboxd.md, docs/tunnel.md): read the boot card,
    dial tunnel_url with the token, serve the channels the server opens,
    reconnect with exponential backoff and jitter (1 s doubling to 30 s)
    for as long as the instance lives. The boot card is re-read before
    every dial (the server writes a fresh token before every start).   */
#ifndef AH_SANDBOXD_H
#define AH_SANDBOXD_H

#include <stdbool.h>

typedef enum {
    AH_SANDBOXD_STATS_AUTO = 0,     //  binary: cgroup, else all of /proc; in-process: tree
    AH_SANDBOXD_STATS_ALL,          //  cgroup cpu.stat if readable, else every process in /proc
    AH_SANDBOXD_STATS_TREE,         //  only the processes this instance started (and theirs)
} ah_sandboxd_stats_t;

typedef struct {
    //  Where the boot card comes from: a file (boot_path), or the three
    //  values directly (when agent_id is set, boot_path is ignored).
    const char *boot_path;          //  default /etc/agenthold/boot.json
    const char *agent_id;
    const char *token;
    const char *tunnel_url;         //  ws://IP:PORT/tunnel
    const char *home;               //  default /home/agent; must exist
    //  Run terminals and commands as the `agent` account of /etc/passwd
    //  when we are root and it exists. In-process: false (terminals run
    //  as the server's user).
    bool switch_user;
    //  A reader of a sleeping agent's home (docs/kubernetes.md, "Reading
    //  a sleeping agent's files"): list, tree and read only; pty, exec
    //  and every write refused (EACCES), the home never chowned, and the
    //  hello says "mode": "read" so the server never takes it for the
    //  agent's sandbox.
    bool read_only;
    ah_sandboxd_stats_t stats;
    //  The egress proxy (docs/egress.md): listen on 127.0.0.1:egress_port
    //  and carry each connection over the tunnel; 0: no proxy.
    int egress_port;
    //  The egress CA (sandboxd/trust.h): where hello's CA is written
    //  (NULL: not written), and whether the variables that point at it
    //  are set in the process's environment (the binary alone: its
    //  environment is what its children get).
    const char *trust_dir;
    bool trust_env;
    //  Tests: serve one yamux session directly over this connected
    //  socket (no WebSocket, no reconnect) when raw_transport is true.
    //  The instance takes the fd over and closes it.
    bool raw_transport;
    int  raw_fd;
    //  Tests: when the raw session ends, ask for the next connection
    //  (a redial): a connected socket, or -1 to end. Called on the
    //  instance's thread; may block (the test answers it). Kept
    //  processes (the proc channel) live on across these.
    int (*raw_redial) (void *ud);
    void *raw_ud;
    //  Backoff bounds in ms (0: 1000 and 30000, as docs/tunnel.md says).
    int backoff_min_ms;
    int backoff_max_ms;
} ah_sandboxd_opts_t;

typedef struct ah_sandboxd_t ah_sandboxd_t;

//  Start an instance in its own thread. The options are copied. NULL if
//  the home cannot be opened or the thread cannot start (logged).
ah_sandboxd_t *ah_sandboxd_start (const ah_sandboxd_opts_t *opts);

//  Stop: the running channels are aborted (processes killed, temporary
//  files removed), go away is sent, the thread is joined. Idempotent.
void ah_sandboxd_stop (ah_sandboxd_t **self_p);

//  How many times the instance has connected (tests watch reconnects).
int ah_sandboxd_connections (ah_sandboxd_t *self);

//  The binary's main: --boot FILE, --home DIR, --help. Runs until
//  SIGTERM/SIGINT; exit status 0 then, 2 on bad usage.
int ah_sandboxd_main (int argc, char **argv);

#endif
