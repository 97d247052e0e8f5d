/*  drivers/docker.h: the Docker Engine backend (docs/docker.md).

    Talks to the Docker Engine API over its unix socket with libcurl (one
    easy handle per call, so any thread may call it); the docker CLI is
    never used. Per agent: container <prefix>-<id> (init process, CPU,
    memory and PID limits, optional OCI runtime, entrypoint
    /opt/agenthold/sandboxd), volume <prefix>-home-<id> at /home/agent,
    internal bridge network <prefix>-net-<id> with a subnet from
    sandbox.docker.network_pool recorded in the networks table.

    The driver opens its own SQLite connection on <data_dir>/agenthold.db
    (for subnet allocations), guarded by a mutex inside the driver.    */
#ifndef AH_DOCKER_H
#define AH_DOCKER_H

#include "drivers/driver.h"
#include "config/config.h"

//  config is borrowed and must outlive the driver. Does not need the
//  engine to be up (each call finds it, or says it cannot). NULL with
//  *err (caller frees) on a bad pool, prefix or database.
ah_driver_t *ah_docker_driver_new (const ah_config_t *config, char **err);

//  <data_dir>/homes/<agent_id>: the directory the home volume is bound
//  to (drivers/docker/volume.c), whatever sandbox.driver says (agenthold
//  hostd runs this driver under the remote one). Caller frees.
char *ah_docker_home_dir (const ah_config_t *config, const char *agent_id);

//  The container id (64 hex) a process runs in, from its mountinfo
//  (/proc/self/mountinfo): the "containers/<id>/" part of the source of
//  the /etc/hostname mount Docker makes. NULL on the host. Caller frees.
//  (Cgroup v2 shows only "0::/", so cgroups cannot tell.) The driver
//  confirms the id with an inspect.
char *ah_docker_container_id_from_mountinfo (const char *path);

//  The host firewall probe (docs/docker.md, "Isolation"): a throw-away
//  sandbox on the pool's last block (the helper image, the server's
//  sandboxd) dials the gateway on a port the server bound that is not the
//  tunnel's. 1 when the dial arrived (host services are open to sandboxes;
//  *report says how to filter them), 0 when it went unanswered while the
//  probe ran (the host filters the pool), -1 when it could not tell
//  (*report says why: server in a container, no image, ...). Blocks for
//  about 3 s. *report is the caller's to free.
int ah_docker_check_isolation (ah_driver_t *driver, int tunnel_port, char **report);

//  Runs the probe once in a thread of the driver (joined by its
//  destroy_driver) and logs the outcome: a warning when sandboxes reach
//  the host, an info line when they do not. `agenthold serve` calls it at
//  start. 0, or -1 when it could not start (or already did).
int ah_docker_isolation_check_start (ah_driver_t *driver);

//  The probe's outcome as ah_docker_check_isolation returned it (1, 0,
//  -1), or AH_FIREWALL_PENDING while it has not ended (or never started);
//  its sentence into report.
#define AH_FIREWALL_PENDING     (-2)
int ah_docker_isolation_report (ah_driver_t *driver, char *report, size_t size);

//  What `agenthold doctor` asks of the engine (drivers/docker/facts.c).
typedef struct {
    char    api_version [16];           //  "1.41"
    char    version [32];               //  the engine's release
    char    root_dir [256];             //  where it keeps images and volumes
    int64_t free_bytes;                 //  free / total there; -1 when it cannot be seen
    int64_t total_bytes;
    bool    seccomp;                    //  the default seccomp profile is on
    bool    apparmor;
    bool    userns;                     //  user namespaces remap container root
    bool    rootless;
    char    runtime [64];               //  sandbox.docker.runtime, "" for the default
    bool    runtime_ok;                 //  the engine has it (true for the default)
    int     firewall;                   //  the firewall probe's outcome (ah_docker_isolation_report)
    char    firewall_report [1024];     //  and its sentence
} ah_engine_facts_t;

//  The engine's facts. 0 / -1 with *err (the engine cannot be asked).
int ah_docker_engine_facts (ah_driver_t *driver, ah_engine_facts_t *facts, char **err);

#endif
