/*  tests/sandboxd/sbd_peer.h: the test's side of sandboxd's channel layer
    (sbd_peer.c): a server-side yamux session over a socketpair, streams
    recorded as they arrive, and helpers to open channels and wait for
    their replies; shared by test_sandboxd.c (hello, files, trees, hostile
    paths, argument types) and test_sandboxd_exec.c (exec, flow, pty,
    stats, malformed frames, instances), test_sandboxd_proc.c and
    test_sandboxd_port.c (their instance started and ended by
    instance_start and instance_end).                                  */
#ifndef AH_TEST_SBD_PEER_H
#define AH_TEST_SBD_PEER_H
#include "sandboxd/sandboxd.h"
#include "proto/channel.h"
#include "proto/msg.h"
#include "proto/yamux.h"
#include "tests/common/check.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <msgpack.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAXS 1024

typedef struct {
    uint32_t id;
    uint8_t *buf;           //  received, not yet taken by the test
    size_t   len, cap;
    size_t   total;         //  bytes received ever
    bool     eof, closed, reset;
} tstream_t;

typedef struct {
    int fd;
    ah_yamux_t *y;
    tstream_t s [MAXS];
    int n;
    bool hold;              //  do not consume received bytes (slow consumer)
    bool failed;
} peer_t;


//  The temporary tree of the run: the home sandboxd serves, a directory
//  beside it, and their parent (main sets them).
extern char home [PATH_MAX], outside [PATH_MAX], root [PATH_MAX];
//  Make them: /tmp/NAME-XXXXXX with home/ and outside/ in it.
void make_tree (const char *name);

//  The instance's redial (opts.raw_redial): it blocks reading the next
//  socket's number from redial_pipe (made by the test; -1 ends it).
extern int redial_pipe [2];
int redial (void *ud);

//  A connected peer: a yamux client on a fresh socketpair (p cleared);
//  the other end, for the instance (opts.raw_fd or the redial).
int peer_up (peer_t *p);
//  Its session, streams and socket let go.
void peer_down (peer_t *p);
//  A run with the redial: make_tree (name), redial_pipe, a peer (*p,
//  allocated) connected to a started instance that answered hello.
ah_sandboxd_t *instance_start (const char *name, peer_t **p);
//  The end of it: the peer down, the redial ended, the instance stopped,
//  the pipe closed and the tree removed.
void instance_end (ah_sandboxd_t **sbd, peer_t **p);
void hello (peer_t *p);

int64_t now_ms (void);
tstream_t *find (peer_t *p, uint32_t id);
void cb_output (void *ud, const uint8_t *d, size_t n);
void cb_data (void *ud, uint32_t id, const uint8_t *d, size_t n);
void cb_eof (void *ud, uint32_t id);
void cb_closed (void *ud, uint32_t id, bool reset);
void pump (peer_t *p, int ms);
uint32_t open_raw (peer_t *p, const uint8_t *hdr, size_t size);
uint32_t open_chan (peer_t *p, ah_msg_t **req);
void take (tstream_t *s, size_t n);
ah_msg_t *wait_header (peer_t *p, uint32_t id, int ms);
bool wait_until (peer_t *p, bool *flag, int ms);
ah_msg_t *req_new (const char *ch);
ah_msg_t *simple (peer_t *p, ah_msg_t *req);
bool reply_ok (ah_msg_t *r);
const char *reply_code (ah_msg_t *r);
bool file_exists (const char *dir, const char *name);
uint64_t fnv (const uint8_t *d, size_t n, uint64_t h);
//  A run over one socketpair with a redial pipe: the tree made, a peer
//  (on_open: streams sandboxd opens), an instance started in *sbd
//  (egress_port: its proxy, 0 none).
peer_t *peer_start (const char *name, int egress_port, void (*on_open) (void *, uint32_t),
                    ah_sandboxd_t **sbd);
//  The end of a run over one socketpair with a redial pipe: the peer
//  freed, the instance stopped (redial answered -1), the tree removed.
void peer_finish (peer_t *p, ah_sandboxd_t **sbd);

//  test_sandboxd.c
void mkfile (const char *rel, const char *text);
ah_msg_t *read_file (peer_t *p, const char *path, uint8_t **out, size_t *size);
const msgpack_object *tree (peer_t *p, const char *path, int depth, int entries, bool all, msgpack_unpacked *u, char code [16]);
const char *tree_type (const msgpack_object *t, const char *path, int64_t *depth);
ah_msg_t *write_file (peer_t *p, const char *path, const uint8_t *data, size_t size, bool *refused);

//  test_sandboxd_exec.c
void test_reader (void);
void test_exec (peer_t *p);
void test_flow (peer_t *p);
void test_flow_read (peer_t *p);
void test_pty (peer_t *p);
void test_pty_early (peer_t *p);
void test_stats (peer_t *p);
void test_malformed (peer_t *p);
void test_instances (void);
void test_stop_while_dialling (void);
uint32_t exec_open (peer_t *p, const char *cmd, double timeout, ah_msg_t **reply);

#endif
