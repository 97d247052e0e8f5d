/*  server/serve.h: the agenthold server process (`agenthold serve`).

    ah_server_run does the whole life of the process: data directory and
    its lock, database and migrations, the admin API token on first start,
    the sandbox driver, the bus, then the actors in dependency order; it
    then waits for signals (SIGINT/SIGTERM: orderly shutdown, SIGHUP:
    POLICY_RELOAD) and stops everything in reverse order.
    docs/architecture.md describes the threads and the order.          */
#ifndef AH_SERVE_H
#define AH_SERVE_H

#include "config/config.h"

//  Name of the files inside server.data_dir.
#define AH_SERVE_DB_FILE     "agenthold.db"
#define AH_SERVE_LOCK_FILE   "agenthold.lock"
#define AH_SERVE_TOKEN_FILE  "admin.token"

//  mkdir -p server.data_dir (each missing level 0700); an existing
//  directory is fine (a warning when others may read it). 0 / -1 with *err.
int ah_server_make_data_dir (const char *path, char **err);

//  The sentence a server says when the Docker Engine cannot be used:
//  why, and what to do (start it, the socket key, the fake driver).
//  Caller frees.
char *ah_server_docker_advice (const ah_config_t *config, const char *why);

//  Run the server until SIGINT/SIGTERM. Blocks SIGINT, SIGTERM and SIGHUP
//  in every thread it creates (they are read with signalfd), so call it
//  before creating any thread of your own. Returns the process exit
//  status: 0 after an orderly shutdown, 1 when start-up failed (the
//  reason is logged) or an actor died.
int ah_server_run (const ah_config_t *config);

#endif
