/*  drivers/remote.h: the remote backend: the sandboxes run on a host
    agent (`agenthold hostd`, hostd/hostd.h) that holds the Docker socket
    and runs the Docker driver; this process holds none (docs/hostd.md).

    Each call takes a DEALER to sandbox.remote.endpoint (one call at a
    time on a socket; kept connected for the next call after a REPLY) (ipc://, or
    tcp:// with CURVE: the server's own key pair is made at first start in
    <server.data_dir>/curve/server.cert), sends the call as an actor
    message and waits for hostd's REPLY; hostd's heartbeats tell a long
    call (a build, a stop) from a host that went away, which is an error
    after sandbox.remote.timeout of silence. Thread-safe: the only shared
    state, what the host last said of itself, is behind a mutex.        */
#ifndef AH_REMOTE_H
#define AH_REMOTE_H

#include "drivers/docker.h"
#include "drivers/driver.h"
#include "config/config.h"
#include "proto/msg.h"

//  config is borrowed and must outlive the driver. Does not need the host
//  to be up. NULL with *err (caller frees) when the server's key pair
//  cannot be made or read.
ah_driver_t *ah_remote_driver_new (const ah_config_t *config, char **err);

//  The engine facts of the host agent's Docker Engine (DRIVER_ENGINE).
//  0 / -1 with *err (the host does not answer, is refused, or its engine
//  cannot be asked).
int ah_remote_engine_facts (ah_driver_t *driver, ah_engine_facts_t *facts, char **err);

//  Whether the server's tunnel answers behind the unix socket the host's
//  sandboxes mount (HOSTD_TUNNEL: hostd connects to it as a sandbox
//  would). 0 with *reachable and *detail (caller frees), -1 with *err when
//  the host does not answer.
int ah_remote_tunnel_check (ah_driver_t *driver, bool *reachable, char **detail, char **err);

//  A HOSTD_HOME call (hostd/hostd_home.h: hostd reads a home for the
//  server): req (taken over) as that header describes it; silence for
//  timeout_ms (at most sandbox.remote.timeout) ends it. 0 with *reply_p
//  (the caller's; a refused path is a reply with "errno"), -1 with *err.
int ah_remote_home (ah_driver_t *driver, ah_msg_t **req_p, int timeout_ms, ah_msg_t **reply_p,
                    char **err);

//  Where the server's CURVE key pair lives under data_dir. Caller frees.
char *ah_remote_cert_path (const char *data_dir);

#endif
