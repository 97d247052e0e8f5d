/*  drivers/driver.h: the small interface every sandbox backend implements.

    DESIGN. A driver is called from lifecycle's worker threads, never from
    an actor's loop: every call may block (an image build takes minutes).
    A driver object is created once by the server and is thread-safe: its
    own state (if any) is guarded inside it, and its configuration is
    immutable. Every call returns 0 on success or -1 with *err set to a
    sentence for a person (caller frees), e.g. "image 'x' not found: ...".

    Identity: every sandbox is named by its agent id (common/ident.h:
    12 hexadecimal digits, made by the server). Drivers derive their own
    object names from it (docker: <prefix>-<id>, <prefix>-home-<id>, ...);
    the docker driver refuses what is not an agent id.                  */
#ifndef AH_DRIVER_H
#define AH_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "config/config.h"

//  The port of sandboxd's egress proxy on 127.0.0.1 inside a sandbox of
//  a runtime that needs a network: the driver hands it to sandboxd as
//  AGENTHOLD_EGRESS_PORT (docs/egress.md).
#define AH_EGRESS_PORT "3128"

typedef struct {
    const char *agent_id;
    const char *image;
    double      cpus;
    int64_t     memory_mb;
    int64_t     pids_limit;
    //  From the agent's runtime (catalog/runtimes.json): "NAME=value"
    //  entries set in the container (n_env of them), and whether the
    //  runtime needs a way out: through sandboxd's egress proxy over the
    //  tunnel (Kubernetes; Docker under sandbox.docker.egress tunnel), or a
    //  network of its own (Docker under bridge). Without it the sandbox has
    //  no way out at all.
    const char *const *env;
    size_t      n_env;
    bool        needs_network;
} ah_sandbox_spec_t;

//  What the sandbox needs to dial home; the driver composes the tunnel URL
//  (it knows how the sandbox reaches the server) and writes boot.json:
//  {"agent_id": .., "token": .., "tunnel_url": "ws://host:port/tunnel"}.
typedef struct {
    const char *agent_id;
    const char *token;              //  fresh per start; only its hash is stored
    int         tunnel_port;
    //  The agent's briefing (lua/briefing.lua), written read-only next
    //  to boot.json as /etc/agenthold/briefing.md; NULL: none.
    const char *briefing;
} ah_boot_t;

typedef struct {
    bool    exists;                 //  the sandbox (container / home) exists
    bool    running;
    bool    paused;                 //  running, its processes frozen (docker: paused)
    int     exit_code;              //  when !running and it ran before; -1 unknown
    char    detail [128];           //  driver's own words ("exited (137)", "running")
    bool    home_gone;              //  known: the home's files are gone (docker: its
                                    //  bound directory, whatever the volume); false
                                    //  when there or unknown
    //  When !running: why it ended, when the backend says it was ended
    //  for it rather than by it ("Evicted: the node was low on memory"):
    //  lifecycle then puts the agent in error with this, whatever the exit
    //  code. "" otherwise (an exit of its own, a stop by hand).
    char    reason [160];
    //  The engine's id of the image the sandbox was made from (docker:
    //  the container's "Image", "sha256:..."), "" when the driver does
    //  not say or there is no container. Warm pools compare it with the
    //  runtime's image id (docs/lifecycle.md "Warm pools").
    char    image_id [80];
} ah_sandbox_status_t;

//  What image_build is asked to produce (see below).
typedef struct {
    const char *image;              //  the reference to produce ("agenthold/busybox:1")
    const char *context_dir;        //  build context with a Dockerfile; NULL: pull image
    const char *const *file_names;  //  n_files names inside the context ("busybox") ...
    const char *const *file_paths;  //  ... copied from these host paths ("/bin/busybox")
    size_t      n_files;
    //  A runtime built from a base image (catalog base_image): the
    //  Dockerfile as text, the whole context (context_dir NULL). The
    //  driver makes base_image present first: present, pulled, or, where
    //  no registry serves it, made by the driver where it can (docker: a
    //  Debian base of the host's release from the host's own mirror).
    const char *dockerfile;
    const char *base_image;
    const char *const *build_args;  //  "NAME=value" (Docker build args), n_build_args
    size_t      n_build_args;
    //  Progress for people ("Step 3/7 : RUN apt-get update", "pulling
    //  debian:bookworm-slim: 12 MB"), from the calling thread; may be NULL.
    void      (*on_progress) (void *arg, const char *text);
    void       *progress_arg;
} ah_image_build_t;

//  How the host that runs the sandboxes is doing (drivers with a host
//  agent: remote). Filled by host_info below.
typedef struct {
    char    name [64];              //  the host's name ("b1"); the endpoint until it answered
    char    endpoint [128];         //  where it is reached
    char    version [32];           //  its agenthold version, "" until it answered
    int64_t protocol;               //  its protocol, 0 until it answered
    char    state [16];             //  "up" | "unreachable" | "refused"
    char    error [512];            //  why, when not up ("" when up)
} ah_host_info_t;

typedef struct ah_driver_t ah_driver_t;

struct ah_driver_t {
    const char *name;               //  "docker" | "fake"
    //  true when "running" means sandboxd said hello over the tunnel
    //  (lifecycle waits for SANDBOX_HELLO after start succeeds).
    bool        waits_for_hello;
    int  (*create)  (ah_driver_t *self, const ah_sandbox_spec_t *spec, char **err);
    int  (*start)   (ah_driver_t *self, const ah_boot_t *boot, char **err);
    int  (*stop)    (ah_driver_t *self, const char *agent_id, char **err);
    //  Recreate from the spec, keeping the home. Leaves it stopped.
    int  (*rebuild) (ah_driver_t *self, const ah_sandbox_spec_t *spec, char **err);
    //  Remove everything of the sandbox, home included. Absent is success.
    int  (*destroy) (ah_driver_t *self, const char *agent_id, char **err);
    int  (*inspect) (ah_driver_t *self, const char *agent_id, ah_sandbox_status_t *status, char **err);
    //  Ids of every sandbox this driver knows of (for the reconciler).
    //  *ids is a NULL-terminated array the caller frees (each id and the array).
    int  (*list)    (ah_driver_t *self, char ***ids, char **err);
    void (*destroy_driver) (ah_driver_t **self_p);
    void *impl;                     //  the driver's own state
    //  Optional (NULL when the backend has no event stream; added last so
    //  existing initialisers keep compiling). Blocks in the calling worker
    //  thread following the backend's events: calls on_change (arg,
    //  agent_id, action) for each change of a sandbox (action "start",
    //  "stop", "die", "destroy", "pause", "unpause", or "home-destroy"
    //  when its home went),
    //  once with agent_id NULL and action
    //  "connected" when the stream is established (so the caller can
    //  re-inspect what it may have missed while disconnected), and with
    //  agent_id NULL and action "image" when an image was untagged or
    //  deleted (the backend names no reference: the caller asks again
    //  about the images it relies on). Polls *stop
    //  at least once a second and returns 0 once it is non-zero; returns
    //  -1 with *err when the stream cannot be opened or ends (the engine
    //  went away): the caller reconnects with backoff. on_change runs in
    //  the calling thread.
    int  (*watch)   (ah_driver_t *self,
                     void (*on_change) (void *arg, const char *agent_id, const char *action),
                     void *arg, volatile int *stop, char **err);
    //  Optional image hooks for the builder (NULL when the backend has no
    //  images, e.g. fake; added last so existing initialisers keep
    //  compiling). image_exists: is the image present locally? 0 with
    //  *exists set, or -1 with *err (the engine cannot be asked).
    int  (*image_exists) (ah_driver_t *self, const char *image, bool *exists, char **err);
    //  image_build: make the image present locally, blocking (minutes):
    //  build it from build->context_dir (a directory with a Dockerfile)
    //  plus the host files listed, or pull it when context_dir is NULL.
    //  Polls *stop (may be NULL) and gives up with -1 once it is non-zero.
    int  (*image_build)  (ah_driver_t *self, const ah_image_build_t *build,
                          volatile int *stop, char **err);
    //  Optional (NULL when the driver runs the sandboxes itself): the
    //  state of the host agent as the last call found it. 0 / -1.
    //  watch then also calls on_change (arg, NULL, "unreachable") before
    //  it returns -1 because the host agent stopped answering or was
    //  refused (its err says why), and "connected" once it answers again.
    int  (*host_info)    (ah_driver_t *self, ah_host_info_t *info);
    //  Optional (NULL: the backend cannot; added last). Remove the
    //  sandbox's container and what was installed in it, keeping its home
    //  (and, for docker, its network): sandbox.container_ttl. The next
    //  start re-creates it with rebuild. Absent is success.
    int  (*remove_container) (ah_driver_t *self, const char *agent_id, char **err);
    //  Optional (NULL: a sleeping agent's home is read on the server's
    //  side, or not at all; added last). A reader of a sleeping agent's
    //  home (kubernetes: a Pod on its claim mounted read-only running
    //  sandboxd --read-only, docs/kubernetes.md): reader_start makes it
    //  dial the tunnel with boot->token (the reader token, never the
    //  boot token), returning once it is made (its hello comes through
    //  the tunnel); reader_stop removes it and waits until it is gone.
    //  start and destroy remove a reader first. Absent is success.
    int  (*reader_start) (ah_driver_t *self, const ah_boot_t *boot, char **err);
    int  (*reader_stop)  (ah_driver_t *self, const char *agent_id, char **err);
    //  Optional (NULL: the backend cannot pause, e.g. kubernetes; added
    //  last). freeze stops every process of a running sandbox where it is
    //  (docker: POST /containers/{id}/pause, the cgroup freezer) and keeps
    //  its memory; thaw lets them go on (unpause). Freezing a frozen or
    //  thawing a running sandbox is success. stop works on a frozen one.
    int  (*freeze)       (ah_driver_t *self, const char *agent_id, char **err);
    int  (*thaw)         (ah_driver_t *self, const char *agent_id, char **err);
    //  Optional (NULL: the backend names no image ids; added last). The
    //  engine's id of the image the reference names now ("sha256:...";
    //  docker: GET /images/{ref}/json, its Id): 0 with *id (caller frees)
    //  or NULL when the image is absent; -1 with *err when the engine
    //  cannot be asked. The builder follows it, so that an image made
    //  again under the same reference is told from the one before.
    int  (*image_id)     (ah_driver_t *self, const char *image, char **id, char **err);
};

//  The directory that holds agent_id's home on the server's side, for
//  reading it without its sandbox (common/homefs.h): fake
//  <data_dir>/fake/<id>/home; docker <data_dir>/homes/<id>, where the
//  home volume is bound (drivers/docker/volume.c; also in hostd, whose
//  data_dir is hostd.data_dir). NULL for another backend (remote: hostd
//  reads its homes, hostd/hostd_home.h) or a malformed id. Whether it exists is the caller's to ask:
//  a home volume made before this layout has none. Caller frees.
char *ah_driver_home_dir (const ah_config_t *config, const char *agent_id);

//  Frees a NULL-terminated id list from list().
void ah_driver_free_ids (char ***ids_p);

//  The backend named by config->driver ("docker" | "remote" | "fake"); config is
//  borrowed and must outlive the driver. NULL with *err (caller frees)
//  naming the problem. Free with self->destroy_driver (&self).
ah_driver_t *ah_driver_new (const ah_config_t *config, char **err);

#endif
