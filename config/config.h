/*  config/config.h: the server's configuration, read once at start.

    Sources, later wins: built-in defaults, the YAML file (etc/agenthold.yaml
    or --config), AGENTHOLD_* environment variables (key path upper-cased,
    dots to underscores: sandbox.default_cpus -> AGENTHOLD_SANDBOX_DEFAULT_CPUS).
    Unknown keys and bad values are refused with a message naming the key
    and the value. After loading, the struct is immutable and may be read
    from any thread (it is never written again).
    docs/configuration.md lists every key.                              */
#ifndef AH_CONFIG_H
#define AH_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

//  Where hostd listens and the server looks for it, by default: the
//  installation's, ah_config_hostd_endpoint (name_prefix); this is the
//  default name_prefix's.
#define AH_CONFIG_HOSTD_ENDPOINT "ipc:///run/agenthold-hostd/hostd.sock"
//  files.max_read_bytes: shipped 8 MiB; at most 256 MiB (a JSON answer is
//  built whole in memory, its escapes up to six times the bytes)
#define AH_CONFIG_MAX_READ_BYTES    (INT64_C (8) << 20)
#define AH_CONFIG_MAX_READ_CEILING  (INT64_C (256) << 20)

typedef struct {
    //  server.*
    char   *listen;                 //  "127.0.0.1:8080"
    char   *tls_cert;               //  PEM certificate (chain) for the API; NULL = plain HTTP
    char   *tls_key;                //  its private key
    char   *data_dir;               //  "/var/lib/agenthold" as root, else ~/.local/share/agenthold
    char   *user;                   //  "agenthold": who `serve` started as root runs as; NULL = none (docs/hostd.md)
    //  tap.*
    char   *tap_endpoint;           //  NULL = off
    //  sandbox.*
    char   *driver;                 //  "docker" | "kubernetes" | "remote" | "fake"
    char   *fake_sandboxd;          //  "in-process" | "external" (the fake driver's sandboxd)
    char   *default_image;          //  "debian:bookworm-slim"
    double  default_cpus;           //  2
    int64_t default_memory_mb;      //  4096
    double  max_cpus;               //  8
    int64_t max_memory_mb;          //  16384
    int64_t pids_limit;             //  4096
    double  idle_minutes;           //  15 (decimals allowed)
    double  freeze_minutes;         //  10: frozen that long before it is stopped (0: never frozen)
    int64_t frozen_memory_mb;       //  half the machine's memory: what frozen sandboxes may hold (0: no ceiling)
    int64_t warm_pool_max;          //  8: warm sandboxes in every warm pool together (0: no warm pools)
    double  idle_check_interval_s;  //  30 ("30s", "1s", "2m", "500ms")
    char   *tunnel_listen;          //  "auto" (ah_config_tunnel_tcp), "none", or host:port
    char   *tunnel_socket;          //  NULL = <data_dir>/run/tunnel.sock (ah_config_tunnel_socket)
    char   *tunnel_tls;             //  "on": tunnel_listen serves TLS with server.tls_cert/tls_key; NULL = off
    char   *sandboxd_path;          //  path of the static sandboxd to deploy; default: next to the agenthold binary
    double  container_ttl_s;        //  86400: a container stopped this long is removed (home kept); 0 never
    double  workspace_ttl_s;        //  0 (unset): a home unused this long is removed
    double  ttl_check_interval_s;   //  60: how often lifecycle looks for expired lifetimes
    double  destroy_retry_min_s;    //  120: the first pause before a failed destroy is retried
    double  destroy_retry_max_s;    //  21600: the pause doubles up to this
    //  sandbox.max_exec_timeout: the longest a command may run, and the
    //  timeout of one that names none (the seed's SANDBOXD_EXECUTE_TIMEOUT);
    //  a longer timeout asked is refused. Terminals have none.
    double  max_exec_timeout_s;     //  300
    //  sandbox.egress_*: the server's side of the egress proxy (docs/egress.md)
    int64_t egress_max_connections; //  256: connections out one sandbox may hold at once
    double  egress_connect_timeout_s;   //  10: an upstream must accept within this
    char   *egress_upstream_ca_file;    //  PEM CAs trusted for upstreams of secrets besides the system's; NULL: none
    //  audit.*
    double  audit_retention_days;   //  30
    double  audit_terminal_bytes_s; //  60: an open terminal's bytes recorded this often (0: at close only)
    double  permission_timeout_s;   //  60: a harness's permission unanswered this long is decided by permission.lua (0: at once)
    //  sandbox.docker.*
    char   *docker_socket;          //  "/var/run/docker.sock"
    char   *name_prefix;            //  "agenthold"
    char   *network_pool;           //  "10.213.0.0/16"
    int     subnet_bits;            //  28
    char   *runtime;                //  NULL = engine default
    char   *server_container;       //  NULL = detect
    char   *sandboxd_volume;        //  NULL = bind-mount sandboxd_path alone
    int64_t tmp_mb;                 //  64: the size of the tmpfs at /tmp in a sandbox
    char   *docker_egress;          //  "bridge": a networked runtime's way out; "tunnel": none but the tunnel (docs/egress.md)
    //  sandbox.kubernetes.* (the kubernetes driver, docs/kubernetes.md)
    char   *k8s_kubeconfig;         //  NULL = in-cluster service-account credentials
    char   *k8s_namespace;          //  "agenthold"
    char   *k8s_storage_class;      //  NULL = the cluster's default class
    char   *k8s_home_size;          //  "10Gi": each home claim's request
    char   *k8s_sandboxd_image;     //  "agenthold/sandboxd:latest": delivers sandboxd
    char   *k8s_tunnel_url;         //  ws://IP:PORT/tunnel as pods reach the tunnel; NULL unset
    char   *k8s_node_selector;      //  NULL = none; "key=value,key=value"
    char   *k8s_tunnel_pods;        //  NULL = none; "key=value,...": the server's Pods (egress allowed)
    char   *k8s_image_pull_policy;  //  "IfNotPresent" | "Always" | "Never"
    double  k8s_reader_idle_s;      //  60: a sleeping agent's reader Pod kept this long after its last read
    //  sandbox.remote.* (the remote driver: a host agent, docs/hostd.md)
    char   *remote_endpoint;        //  "ipc:///run/agenthold-hostd/hostd.sock" or tcp://host:port
    char   *remote_server_key;      //  hostd's CURVE public key (Z85, 40 characters); NULL = none
    double  remote_timeout_s;       //  5: silence after which the host is unreachable
    //  hostd.* (`agenthold hostd`, the process holding the Docker socket)
    char   *hostd_endpoint;         //  where hostd listens; same default as remote_endpoint
    char   *hostd_name;             //  NULL = this machine's hostname
    char   *hostd_data_dir;         //  hostd's own state (subnets, CURVE keys); default <data_dir>-hostd
    bool    hostd_data_dir_set;     //  named by the file or the environment (else computed after loading)
    bool    remote_endpoint_set;    //  the same for sandbox.remote.endpoint
    bool    hostd_endpoint_set;     //  and hostd.endpoint (else from name_prefix)
    char   *hostd_server_user;      //  the only user that may open the ipc socket; NULL = hostd's own
    char   *hostd_tunnel_relay;     //  tcp:// or tls:// of the server's tunnel; NULL = sandboxes mount the server's socket
    char   *hostd_tunnel_ca;        //  the CA of the server's tunnel certificate (tls://); NULL = the system's
    //  limits.* (what lua/limits.lua reads; PUT /api/v1/policy changes them at run time)
    //  (0 = no limit): kept counts every sandbox, asleep too; running
    //  those that hold CPU and memory (the seed's 10 within 20)
    int64_t tenant_max_sandboxes;   //  200
    int64_t pool_max_sandboxes;     //  2000
    int64_t tenant_max_running;     //  10
    int64_t pool_max_running;       //  20
    //  files.* (the tree listing a person reads: GET /api/v1/agents/{agent}/tree)
    int64_t tree_max_depth;         //  6 levels below the directory asked for
    int64_t tree_max_entries;       //  2000
    //  files.max_read_bytes: the most of a file a JSON answer carries (the
    //  seed's SANDBOXD_MAX_READ_BYTES); streamed downloads are not cut
    int64_t max_read_bytes;         //  8 MiB, 1 to AH_CONFIG_MAX_READ_CEILING
    //  terminal.scrollback_lines: the lines of scrollback the server keeps
    //  for each terminal that lasts (actors/api/terms.c)
    int64_t terminal_scrollback_lines;  //  10000, 0 to 1000000
    //  terminal.detached_counts_for: a terminal that lasts, left with no
    //  client, still counts as open for the idle rule this long
    double  terminal_detached_s;    //  300, 0 to 7 days
    //  ports.answer_timeout: a sandbox's web server answers a proxied
    //  request's head within this (docs/ports.md)
    double  ports_answer_timeout_s; //  60, 0.1 to 3600
    //  policy.*
    char   *lua_dir;                //  directory of idle.lua, limits.lua, briefing.lua
    //  catalog.*
    char   *catalog_path;           //  catalog/runtimes.json
    char   *pip_index_url;          //  the index pip installs a runtime's packages from; NULL: pip's default
    //  Not a key: the file that was read (NULL: none), for a process
    //  started with the same configuration (serve's local hostd).
    char   *file;
} ah_config_t;

//  Defaults only.
ah_config_t *ah_config_new_defaults (void);
//  Defaults, then file (NULL: etc/agenthold.yaml if it exists, else none),
//  then environment. NULL on error with *err (caller frees) naming the key.
ah_config_t *ah_config_load (const char *path, char **err);
//  Defaults, then YAML text (size bytes; source names it in messages),
//  no environment: what a file holds, checked as ah_config_load checks
//  it (the fuzz target's entry; the file loader parses the same way).
ah_config_t *ah_config_parse (const char *text, size_t size, const char *source, char **err);
void ah_config_destroy (ah_config_t **self_p);

//  The index-th configuration key ("sandbox.docker.socket"), NULL past the
//  last: for tests and docs that must name every key.
const char *ah_config_key (size_t index);

//  "host:port" / ":port" -> host ("" means all) and port. 0 / -1.
int ah_config_split_listen (const char *listen, char *host, size_t host_size, int *port);

//  Where the tunnel listens on TCP, or NULL for nowhere (its unix socket
//  alone), with a sentence saying why for the start's log (*why, static
//  or the config's; may be NULL). sandbox.tunnel_listen as given, but
//  "none" is nowhere and "auto" (the default) is where the configured
//  driver's sandboxes dial TCP: the fake driver's (in-process, loopback:
//  127.0.0.1:8090), kubernetes Pods (:8090), a host agent on another
//  machine (remote over tcp://: its relay, :8090); nowhere for docker and
//  a host agent on this machine (remote over ipc://): their sandboxes
//  dial the unix socket. Static storage: copy before the next call.
//  The host agent's endpoint of the installation named by name_prefix
//  (sandbox.docker.name_prefix): ipc:///run/<prefix>-hostd/hostd.sock.
char *ah_config_hostd_endpoint (const char *name_prefix);

const char *ah_config_tunnel_tcp (const ah_config_t *self, const char **why);

//  Why an idle sandbox is never frozen with this configuration (the idle
//  ladder skips frozen: it is stopped at once), or NULL when it may be
//  (the docker driver, and remote: its hostd runs docker). A static
//  sentence; the sleeper and the agent object's no_freeze both use it.
const char *ah_config_no_freeze (const ah_config_t *self);
//  The driver can pause a sandbox (docker; remote, whose hostd runs docker).
bool ah_config_driver_freezes (const ah_config_t *self);

//  The unix socket the tunnel also listens on (sandboxes dial it through
//  a bind mount of its directory): sandbox.tunnel_socket, or
//  <data_dir>/run/tunnel.sock. Caller frees.
char *ah_config_tunnel_socket (const ah_config_t *self);

//  hostd.tunnel_relay's form, "tcp://HOST:PORT" or "tls://HOST:PORT" (HOST
//  may be [v6]), into its parts (the caller's). 0 / -1 when it is not so.
int ah_config_relay_target (const char *target, bool *tls, char **host, char **port);

#endif
