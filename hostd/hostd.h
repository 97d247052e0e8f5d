/*  hostd/hostd.h: `agenthold hostd`, the host agent (docs/hostd.md).

    The one process that holds the Docker socket: it runs the Docker
    driver (drivers/docker.h) for servers that reach it over ZeroMQ
    (hostd.endpoint: ipc:// for this machine, tcp:// with CURVE for
    another) and does nothing else: no HTTP, no WebSocket, no Lua. Its
    own state (the subnet allocations, its CURVE keys) lives in
    hostd.data_dir.                                                    */
#ifndef AH_HOSTD_H
#define AH_HOSTD_H

#include "config/config.h"

//  Runs until SIGINT or SIGTERM. config is the caller's; hostd points its
//  data_dir at hostd.data_dir. Returns the exit status (0 after an
//  orderly stop, 1 when it could not start).
int ah_hostd_run (ah_config_t *config);

#endif
