/*  server/privsep.h: `agenthold serve` started as root, in two parts.

    Started as root with the docker driver and `server.user` (default
    `agenthold`), `agenthold serve` does not run the server as root: a
    small root process (the monitor: one thread, no network, no database)
    prepares the data directory for that user, starts a local
    `agenthold hostd` (root, the only holder of the Docker socket) on an
    ipc:// endpoint only that user may open, and forks the server, which
    drops to that user before any thread starts and reaches its sandboxes
    through hostd (sandbox.driver remote). The monitor restarts hostd when
    it dies, passes SIGINT, SIGTERM and SIGHUP on to the server, and once
    the server has exited stops hostd and exits with the server's status.
    docs/hostd.md, "One command, two processes".                     */
#ifndef AH_PRIVSEP_H
#define AH_PRIVSEP_H

#include "config/config.h"

#include <stdbool.h>
#include <sys/types.h>

//  What `agenthold serve` runs: the server in this process (not root,
//  server.user none, a driver other than docker), or the monitor above.
//  Returns the exit status.
int ah_serve_main (ah_config_t *config);

//  Whether serve, started by this user with this configuration, runs the
//  server as server.user with a local hostd: root, server.user set, the
//  docker driver.
bool ah_privsep_applies (const ah_config_t *config);

//  server.user's uid and primary gid. 0 / -1 with *err saying how to make
//  the user or turn the mode off.
int ah_privsep_user (const ah_config_t *config, uid_t *uid, gid_t *gid, char **err);

//  The configuration the server runs with in this mode: sandbox.driver
//  remote to the local hostd's endpoint (hostd.endpoint, which must be
//  ipc://). 0 / -1 with *err.
int ah_privsep_server_config (ah_config_t *config, char **err);

//  Becomes uid:gid for good: no supplementary group but gid, real,
//  effective and saved ids all set, no new privileges (setuid binaries),
//  then checks that root cannot be had back. 0 / -1 with *err.
int ah_privsep_drop (uid_t uid, gid_t gid, char **err);

//  Whether something accepts a connection on the unix socket at path.
bool ah_privsep_socket_answers (const char *path);

#endif
