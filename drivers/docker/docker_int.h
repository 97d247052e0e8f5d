/*  drivers/docker/docker_int.h: what the files of the Docker driver share
    (the public face is drivers/docker.h; docs/docker.md describes it).

        engine.c      HTTP over the engine's unix socket, JSON answers,
                      streams of JSON lines, identifier checks
        mountinfo.c   the server's own container, when it runs in one
        subnet.c      subnet allocations (the networks table)
        network.c     the agent's internal bridge network
        volume.c      the home volume, bound to a directory under data_dir
        container.c   containers and the entry points on them (create,
                      start, stop, rebuild, destroy, inspect, list)
        boot.c        the boot card: a file in the directory the sandbox
                      mounts at /etc/agenthold, or an archive PUT
        sandboxd.c    sandboxd copied into a volume (server in a container)
        image.c       image_exists, image_build (build context, pull)
        base.c        Debian bases from the host's mirror (mmdebstrap, import)
        events.c      watch: the engine's event stream
        probe.c       the host firewall probe
        driver.c      the driver object: configuration checks, names, life

    DESIGN. The driver is called from lifecycle's, the builder's and the
    reconciler's worker threads, several at once, and from the probe's own
    thread. Each call builds its own curl easy handle, so no curl state is
    shared. The shared state is small and lives in docker_t behind one
    mutex: the negotiated API version and the server's own container id
    (both found lazily on first use, so the server may start before the
    engine), whether sandboxd was copied into its volume, and the driver's
    SQLite connection (subnet allocations). The configuration and the
    fields above the mutex are set once by ah_docker_driver_new and never
    written again.

    Errors are sentences: "<what was being done>: <why> (Docker: <the
    engine's message>)".                                                 */
#ifndef AH_DOCKER_INT_H
#define AH_DOCKER_INT_H

#include "drivers/docker.h"
#include "common/ident.h"
#include "common/log.h"
#include "common/str.h"
#include "store/store.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define LOG_AREA            "docker"
#define DK_MAX_NAME         128             //  a Docker object name we make
#define DK_HELPER_IMAGE     "agenthold-helper:2"    //  helper.c

typedef struct {
    const ah_config_t *config;          //  borrowed, immutable
    char    *socket_path;
    char    *prefix;
    uint32_t pool_base;                 //  host order
    int      pool_bits;
    int      subnet_bits;
    uint32_t subnet_count;
    char    *sandboxd_file;             //  bind-mounted alone at /opt/agenthold/sandboxd (NULL: volume)
    char    *tunnel_socket;             //  the tunnel's unix socket (server's path)

    pthread_mutex_t lock;               //  guards everything below
    char    api_version [16];           //  "1.41"; "" until negotiated
    bool    server_checked;             //  server container detection done
    bool    sandboxd_deployed;          //  copied into sandboxd_volume (volume mode)
    char   *server_container;           //  full id when we run in a container, else NULL
    ah_store_t *store;
    //  The host firewall probe's thread (ah_docker_isolation_check_start),
    //  joined by destroy_driver; only the thread that started it touches these.
    pthread_t probe_thread;
    bool    probe_started;
    //  Guarded by lock too: the helper image is there; the host's own
    //  addresses as a helper container saw them (server in a container),
    //  and when they were read (monotonic ms; 0: never).
    bool    helper_ready;
    char   *host_addresses;
    int64_t host_addresses_at;
    //  The probe's last outcome (AH_FIREWALL_*) and its sentence.
    int     probe_rc;
    char   *probe_report;
} docker_t;

//  -------------------------------------------------------------------------
//  driver.c: names and labels of an agent's objects

typedef struct {
    char container [DK_MAX_NAME];       //  <prefix>-<id>
    char volume [DK_MAX_NAME];          //  <prefix>-home-<id>
    char network [DK_MAX_NAME];         //  <prefix>-net-<id>
} dk_names_t;

void    ah_dk_names (const docker_t *self, const char *agent_id, dk_names_t *names);
//  {agenthold.managed, agenthold.agent, agenthold.prefix}: a new object.
json_t *ah_dk_labels (const docker_t *self, const char *agent_id);

//  -------------------------------------------------------------------------
//  engine.c: talking to the engine

//  *err = the sentence (replacing what it held); nothing when err is NULL.
void ah_dk_err (char **err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
//  0 when value is a valid kind; else -1 with *err "<doing>: <what> 'value'
//  <rule>" (common/ident.h), before anything reaches the engine.
int  ah_dk_check_ident (ah_ident_t kind, const char *value, const char *doing, char **err);

//  Negotiates the API version once (and finds out whether we run in a
//  container). 0 / -1 with *err.
int  ah_dk_ensure_engine (docker_t *self, char **err);

typedef struct {
    const char *what;                   //  "creating container x", for messages
    const char *method;                 //  "GET", "POST", ...
    const void *body;                   //  NULL: none
    size_t      body_size;
    const char *content_type;           //  default application/json
    long        timeout_s;              //  0: the default (120 s)
} dk_call_t;

//  One call. Returns the HTTP status, or -1 with *err when the engine
//  could not be reached. *answer (if wanted) gets the parsed JSON body or
//  NULL; *message (if wanted) the engine's error message on status >= 400.
long ah_dk_call (docker_t *self, const dk_call_t *call, const char *path, json_t **answer,
                 char **message, char **err);
//  GET path: 200 with *answer (if wanted), 404 when absent_ok (the caller
//  decides what absence means), or -1 with *err (any other status, or the
//  engine not reached).
long ah_dk_get (docker_t *self, const char *what, const char *path, bool absent_ok,
                json_t **answer, char **err);
//  A POST with a JSON body (taken over), e.g. a create.
long ah_dk_call_json (docker_t *self, const char *what, const char *path, json_t *body,
                      char **message, char **err);
//  The usual sentence for an unexpected status.
void ah_dk_status_err (char **err, const char *what, long status, const char *message);

//  A call on one object without an answer body: OK when the status is
//  ok1 or ok2, or 404 when absent_ok (removing what is gone already). 404
//  otherwise says the object does not exist. The path is path_fmt with
//  the object's name for its one %s; messages say "<doing> <name>: ...".
//  0 / -1 with *err.
typedef struct {
    const char *method;
    const char *path_fmt;               //  "/containers/%s/start"
    long        ok1, ok2;
    bool        absent_ok;
    long        timeout_s;
} dk_simple_t;

int  ah_dk_simple (docker_t *self, const dk_simple_t *how, const char *doing, const char *name,
                   char **err);

//  A JSON filter (taken over) escaped for ?filters=. Caller frees.
char *ah_dk_filters (json_t *filters);
//  The filter on this driver's labels (managed, prefix).
json_t *ah_dk_label_filter (const docker_t *self);

//  A streaming call (events, build and pull progress): the answer is a
//  stream of JSON lines, handed to on_line one at a time (curl's chunks
//  split on newlines, a line over 1 MiB ends the stream). No overall
//  timeout: *stop (may be NULL) is polled at least once a second.
typedef struct {
    dk_call_t   call;                   //  timeout_s is not used
    void      (*on_line) (void *arg, const char *line, size_t len);
    void      (*on_open) (void *arg);   //  optional: once the 200 is known
    void       *arg;
    volatile int *stop;
} dk_stream_t;

//  0 when the engine answered 200 and ended the stream (every line
//  handed over), 1 when stopped, -1 with *err (not reached, broke,
//  refused with the engine's message).
int  ah_dk_stream (docker_t *self, const dk_stream_t *how, const char *path, char **err);

//  -------------------------------------------------------------------------
//  mountinfo.c: the server's own container

//  Finds it once (ah_dk_ensure_engine calls it). 0 / -1 with *err (a
//  configured sandbox.docker.server_container the engine does not know).
int   ah_dk_detect_server_container (docker_t *self, char **err);
//  Its full id, NULL on the host. Caller frees.
char *ah_dk_server_container (docker_t *self);
//  Where path (a path of the server's file system) is on the engine's
//  host: path itself on the host; in a container, the source of the
//  deepest mount holding it plus the rest. Caller frees; NULL with *err.
char *ah_dk_host_path (docker_t *self, const char *path, char **err);

//  -------------------------------------------------------------------------
//  subnet.c: the networks table

//  "a.b.c.d" of a host-order address. Caller frees.
char    *ah_dk_ip_string (uint32_t host_order);
//  "10.213.0.16/28" -> base address (host order); -1 when malformed.
int      ah_dk_parse_cidr (const char *cidr, uint32_t *base, int *bits);
//  "a.b.c.d/bits" of a subnet base. Caller frees.
char    *ah_dk_subnet_string (const docker_t *self, uint32_t base);
//  The subnet already recorded for agent_id, or a new one, not one of
//  skip[]. Returns the subnet's base (host order) or 0 with *err.
uint32_t ah_dk_subnet_for (docker_t *self, const char *agent_id, const uint32_t *skip,
                           size_t nskip, char **err);
//  The recorded subnet, 0 if none.
uint32_t ah_dk_subnet_lookup (docker_t *self, const char *agent_id);
int      ah_dk_subnet_free (docker_t *self, const char *agent_id, char **err);
//  true when some agent holds the subnet at base (or the table cannot tell).
bool     ah_dk_subnet_taken (docker_t *self, uint32_t base);

//  -------------------------------------------------------------------------
//  network.c: the agent's network

//  POST /networks/create: a bridge named name on the subnet at base,
//  gateway .1, internal unless outward, with labels (taken over). The
//  status, or -1 with *err.
long     ah_dk_network_post (docker_t *self, const char *what, const char *name, uint32_t base,
                             bool outward, json_t *labels, char **message, char **err);
//  The agent's network, on a subnet that works, joined by the server when
//  it runs in a container. Returns the subnet base, 0 with *err.
uint32_t ah_dk_network_ensure (docker_t *self, const char *agent_id, char **err);
int      ah_dk_network_remove (docker_t *self, const char *agent_id, char **err);
//  What a sandbox on the network at base may not reach, for boot.json's
//  blocked (sandboxd makes each unreachable at boot): "CIDR CIDR ...",
//  shorter than DK_BLOCKED_MAX. Caller frees; NULL out of memory.
#define DK_BLOCKED_MAX      1000
char    *ah_dk_blocked (docker_t *self, uint32_t base);

//  -------------------------------------------------------------------------
//  container.c: containers

//  Removes the container name (force, volumes kept); absent is fine.
int      ah_dk_container_remove (docker_t *self, const char *name, char **err);
//  Where a sandbox finds the tunnel's socket (its directory is mounted there).
#define DK_TUNNEL_DIR       "/run/agenthold"
//  The capabilities a sandbox keeps (docs/docker.md says why each).
#define DK_CAPS             "CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"
//  And for a sandbox with a network: its blocked routes (sandboxd/net.h).
#define DK_NET_CAP          "NET_ADMIN"
//  Removes all but one network of the agent's name, the one on its stored
//  subnet (best effort): two can exist after an interrupted create, and
//  the engine then refuses the name.
void     ah_dk_network_dedupe (docker_t *self, const char *agent_id);
//  sandboxd's read-only mount at /opt/agenthold (a bind of the file alone or the volume).
json_t  *ah_dk_sandboxd_mount (const docker_t *self);
//  Writes /etc/agenthold/boot.json (root, 0600) into the container name:
//  {"agent_id", "token", "tunnel_url", "blocked" (when not NULL)}, and the
//  briefing (when not NULL) as /etc/agenthold/briefing.md (root, 0444:
//  read-only for the agent). 0 / -1 with *err.
int      ah_dk_boot_write (docker_t *self, const char *name, const char *agent_id,
                           const char *token, const char *tunnel_url, const char *blocked,
                           const char *briefing,
                           char **err);
int      ah_dk_container_start (docker_t *self, const char *name, char **err);

//  -------------------------------------------------------------------------
//  boot.c: the boot card through <data_dir>/boot/<id>, mounted at /etc/agenthold

//  <data_dir>/boot/<id>. Caller frees.
char    *ah_dk_boot_dir (const docker_t *self, const char *agent_id);
//  Whether the directory is there (the container was made mounting it).
bool     ah_dk_boot_dir_present (const docker_t *self, const char *agent_id);
//  Makes the directory; *mount = its read-only bind mount at
//  /etc/agenthold for a container's Mounts, or NULL when the server does
//  not run as root (the card then goes by archive PUT). 0 / -1 with *err.
int      ah_dk_boot_mount (docker_t *self, const char *agent_id, json_t **mount, char **err);
//  boot.json (0600) and the briefing (0444, when not NULL) into the
//  directory, each renamed into place. 0 / -1 with *err.
int      ah_dk_boot_put (docker_t *self, const char *agent_id, const char *token,
                         const char *tunnel_url, const char *blocked, const char *briefing,
                         char **err);
//  Removes the directory and what it holds; absent is fine. 0 / -1 with *err.
int      ah_dk_boot_dir_remove (docker_t *self, const char *agent_id, char **err);

int ah_dk_create (ah_driver_t *driver, const ah_sandbox_spec_t *spec, char **err);
int ah_dk_rebuild (ah_driver_t *driver, const ah_sandbox_spec_t *spec, char **err);
int ah_dk_start (ah_driver_t *driver, const ah_boot_t *boot, char **err);
int ah_dk_stop (ah_driver_t *driver, const char *agent_id, char **err);
int ah_dk_freeze (ah_driver_t *driver, const char *agent_id, char **err);
int ah_dk_thaw (ah_driver_t *driver, const char *agent_id, char **err);
int ah_dk_destroy (ah_driver_t *driver, const char *agent_id, char **err);
int ah_dk_remove_container (ah_driver_t *driver, const char *agent_id, char **err);
int ah_dk_inspect (ah_driver_t *driver, const char *agent_id, ah_sandbox_status_t *status,
                   char **err);
int ah_dk_list (ah_driver_t *driver, char ***ids, char **err);

//  -------------------------------------------------------------------------
//  volume.c: the home volume, bound to <data_dir>/homes/<id>

//  What the driver knows of an agent's home. The home is its files: the
//  directory a volume of ours is bound to (<data_dir>/homes/<id>), or,
//  for an earlier install's plain named volume, the volume itself. The
//  volume is only the engine's name for the directory: one removed
//  behind our back (docker volume rm) leaves the files, and the next
//  create, rebuild or re-created start binds a new volume to them.
//  So the home is lost only when the files are: a bound volume whose
//  directory is gone, or no volume and no directory.
typedef struct {
    long volume;                    //  GET /volumes/NAME: 200, 404, < 0 (the engine did not say)
    bool bound;                     //  the volume is bound to a directory (its device option)
    bool ours;                      //  ... to <data_dir>/homes/<id>
    bool dir;                       //  that directory, or without a volume homes/<id>, is there
    bool lost;                      //  the home's files are gone (never when the engine did not say)
} dk_home_t;

//  Looks (one GET /volumes/NAME and an lstat); what is the caller's label
//  for the request, err (may be NULL) gets why the engine did not say.
void ah_dk_home_look (docker_t *self, const char *what, const char *agent_id, dk_home_t *home,
                      char **err);

//  Creates it (and its directory) unless a volume of that name exists:
//  an earlier install's is kept as it is. 0 / -1 with *err.
int ah_dk_home_volume_ensure (docker_t *self, const char *agent_id, char **err);
//  Removes the volume and the files in its directory; absent is fine.
int ah_dk_home_volume_remove (docker_t *self, const char *agent_id, char **err);

//  -------------------------------------------------------------------------
//  sandboxd.c: sandboxd in a volume

//  Once per driver in volume mode, copies sandbox.sandboxd_path into
//  sandbox.docker.sandboxd_volume with a helper container from image.
//  0 (also when there is nothing to do) / -1 with *err.
int ah_dk_deploy_sandboxd (docker_t *self, const char *image, char **err);
//  The same before a start, from the image of the container name.
int ah_dk_deploy_for_start (docker_t *self, const char *name, char **err);

//  -------------------------------------------------------------------------
//  image.c, events.c: the optional hooks

int ah_dk_image_exists (ah_driver_t *driver, const char *image, bool *exists, char **err);
int ah_dk_image_id (ah_driver_t *driver, const char *image, char **id, char **err);
int ah_dk_image_build (ah_driver_t *driver, const ah_image_build_t *build, volatile int *stop,
                       char **err);
//  base.c: the Debian suite the driver can make image as (a Debian base of
//  the host's own release), into suite. 0 / -1 when it cannot.
int ah_dk_base_suite (const char *image, char *suite, size_t size);
//  Make build->base_image as suite with mmdebstrap and import it. 0 / -1.
//  helper.c: the helper image (made once, no registry), its name or NULL
//  with *err; the host's IPv4 addresses read from a container in the
//  host's network namespace, space-separated (caller frees), or NULL with
//  *err.
const char *ah_dk_helper_image (docker_t *self, char **err);
char       *ah_dk_host_addresses (docker_t *self, char **err);

//  tar (a root file system) imported as image ("repo:tag"). 0 / -1 with *err.
int ah_dk_import (docker_t *self, const char *image, const void *tar, size_t size,
                  volatile int *stop, char **err);
int ah_dk_base_make (docker_t *self, const ah_image_build_t *build, const char *suite,
                     volatile int *stop, char **err);
int ah_dk_watch (ah_driver_t *driver,
                 void (*on_change) (void *arg, const char *agent_id, const char *action),
                 void *arg, volatile int *stop, char **err);

#endif
