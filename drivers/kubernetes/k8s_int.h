/*  drivers/kubernetes/k8s_int.h: what the files of the Kubernetes driver
    share (the public face is drivers/kubernetes.h; docs/kubernetes.md
    describes what it makes).

        creds.c       credentials: a kubeconfig (YAML) or the Pod's
                      service account
        api.c         HTTPS calls on the API server with libcurl
        manifest.c    the objects of an agent as JSON (pure: unit-tested)
        driver.c      the driver object and its entry points
        watch.c       watch: Pods and claims followed for the reconciler

    DESIGN. The driver is called from lifecycle's, the builder's and the
    reconciler's worker threads, several at once. Each call builds its own
    curl easy handle; the credentials and the configuration are read once
    by ah_kubernetes_driver_new and never written again. One thing is
    shared that needs a lock: the Pods the watch saw end (ended, under
    ended_lock), which the watch's thread writes and inspect reads.

    Per agent (names from sandbox.docker.name_prefix, "agenthold"):
    PersistentVolumeClaim <prefix>-home-<id> (the home; its annotation
    agenthold.io/spec keeps the sandbox's spec while no Pod exists),
    Pod <prefix>-<id>, Secret <prefix>-boot-<id>-<8 hex> (boot.json, a new
    name each boot: the kubelet caches a Secret by name), NetworkPolicy
    <prefix>-<id>.                                 */
#ifndef AH_K8S_INT_H
#define AH_K8S_INT_H

#include "drivers/kubernetes.h"
#include "common/ident.h"
#include "common/log.h"
#include "common/str.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LOG_AREA            "kubernetes"
#define K8S_MAX_NAME        64
#define K8S_SPEC_ANNOTATION "agenthold.io/spec"
#define K8S_LABEL_AGENT     "agenthold.io/agent"
#define K8S_LABEL_INSTALL   "agenthold.io/installation"
#define K8S_LABEL_ROLE      "agenthold.io/role"     //  "reader" on a reader's Pod and Secret
#define K8S_READER_UID      10001                   //  the agent account of agenthold's runtimes
#define K8S_INCLUSTER_DIR   "/var/run/secrets/kubernetes.io/serviceaccount"

//  -------------------------------------------------------------------------
//  creds.c

typedef struct {
    char   *server;                     //  "https://10.0.0.1:6443", no trailing '/'
    char   *ca;                         //  PEM; NULL: the system's CAs
    size_t  ca_len;
    char   *cert;                       //  client certificate, PEM; NULL: none
    size_t  cert_len;
    char   *key;                        //  its key, PEM
    size_t  key_len;
    char   *token;                      //  bearer token; NULL: none
    bool    insecure;                   //  insecure-skip-tls-verify (refused unless a test allows it)
    char   *ns;                         //  the context's namespace, NULL: none said
} k8s_creds_t;

//  The current context of a kubeconfig (text, len bytes; base_dir: where
//  relative file names in it are; NULL: refuse file names). 0 / -1 with
//  *err. Every byte is hostile: a bad document is a sentence, never a crash.
int  ah_k8s_kubeconfig_parse (const char *text, size_t len, const char *base_dir,
                              k8s_creds_t *creds, char **err);
int  ah_k8s_kubeconfig_load (const char *path, k8s_creds_t *creds, char **err);
//  The Pod's service account: dir/token, dir/ca.crt, dir/namespace and
//  KUBERNETES_SERVICE_HOST / _PORT. 0 / -1 with *err.
int  ah_k8s_incluster_load (const char *dir, k8s_creds_t *creds, char **err);
void ah_k8s_creds_free (k8s_creds_t *creds);
//  Standard base64 (padding optional, whitespace skipped) into a new
//  buffer (NUL-terminated; *out_len without it). NULL when malformed.
char *ah_k8s_base64_decode (const char *text, size_t len, size_t *out_len);

//  -------------------------------------------------------------------------
//  The driver's state

typedef struct {
    const ah_config_t *config;          //  borrowed, immutable
    k8s_creds_t creds;
    char   *ns;                         //  sandbox.kubernetes.namespace
    char   *prefix;                     //  names and the installation label
    char    tunnel_host [64];           //  from sandbox.kubernetes.tunnel_url
    int     tunnel_port;
    int     tunnel_pod_port;            //  sandbox.tunnel_listen's port
    bool    readers_swept;              //  the watch's thread only: stray readers removed once
    //  Pods the watch saw end (ah_k8s_ended_note): written by the watch's
    //  thread, read by inspect's callers, under ended_lock.
    pthread_mutex_t ended_lock;
    json_t *ended;
} k8s_t;

typedef struct {
    char pod [K8S_MAX_NAME];            //  <prefix>-<id>
    char claim [K8S_MAX_NAME];          //  <prefix>-home-<id>
    char secret [K8S_MAX_NAME];         //  <prefix>-boot-<id>: each boot's is <this>-<8 hex>
    char policy [K8S_MAX_NAME];         //  <prefix>-<id>
    char reader [K8S_MAX_NAME];         //  <prefix>-read-<id>: the reader's Pod; its Secret <this>-<8 hex>
} k8s_names_t;

void ah_k8s_names (const char *prefix, const char *agent_id, k8s_names_t *names);

//  -------------------------------------------------------------------------
//  api.c

//  *err = the sentence (replacing what it held); nothing when err is NULL.
void ah_k8s_err (char **err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef struct {
    const char *method;                 //  "GET", "POST", "PATCH", "DELETE", "PUT"
    const char *content_type;           //  default application/json
    long        timeout_s;              //  0: 30 s
} k8s_call_t;

//  One call on path ("/api/v1/namespaces/x/pods"); body (taken over, may
//  be NULL). The HTTP status, or -1 with *err when the API server was not
//  reached (or answered with something that is not JSON). *answer (if
//  wanted) gets the JSON body; *message (if wanted) the Status message
//  of an error.
long ah_k8s_call (k8s_t *self, const k8s_call_t *call, const char *path, json_t *body,
                  json_t **answer, char **message, char **err);
//  The usual sentence: "<what>: HTTP <status>: <message>".
void ah_k8s_status_err (char **err, const char *what, long status, const char *message);

//  Watch streams, n of them at once (curl multi): each line (one JSON
//  event) handed to on_line with its stream's index. Returns once any of
//  them ends: 0 when the server ended it, 1 when stopped (by *stop,
//  polled every second, or by on_line returning non-zero), -1 with *err.
typedef int (*k8s_line_fn) (void *arg, size_t index, const char *line, size_t len);
int  ah_k8s_streams (k8s_t *self, const char *const *paths, size_t n, k8s_line_fn on_line,
                     void *arg, volatile int *stop, char **err);

//  -------------------------------------------------------------------------
//  manifest.c: an agent's objects (nothing here talks to the cluster)

//  What a Pod is made from, kept on the claim between boots.
typedef struct {
    char    image [256];
    double  cpus;
    int64_t memory_mb;
    bool    needs_network;
    char  **env;                        //  "NAME=value", n_env of them (owned)
    size_t  n_env;
} k8s_spec_t;

//  The spec from the driver's spec (limits applied from config), and back
//  and forth as the claim's annotation. from_json validates every field
//  (the annotation is the cluster's, so hostile). 0 / -1 with *err.
int     ah_k8s_spec_from (const ah_config_t *config, const ah_sandbox_spec_t *in, k8s_spec_t *out,
                          char **err);
char   *ah_k8s_spec_to_json (const k8s_spec_t *spec);
int     ah_k8s_spec_from_json (const char *text, k8s_spec_t *spec, char **err);
void    ah_k8s_spec_free (k8s_spec_t *spec);

typedef struct {
    const char *prefix;                 //  the installation
    const char *ns;
    const char *sandboxd_image;
    const char *pull_policy;
    const char *node_selector;          //  "k=v,k=v" or NULL
    const char *storage_class;          //  NULL: the cluster's default
    const char *home_size;
    int64_t     tmp_mb;
    const char *tunnel_host;            //  IPv4 literal
    int         tunnel_port;
    const char *tunnel_pods;            //  "k=v,k=v": the server's own Pods, or NULL
    int         tunnel_pod_port;        //  the port they listen on (sandbox.tunnel_listen's)
} k8s_site_t;

json_t *ah_k8s_labels (const k8s_site_t *site, const char *agent_id);
json_t *ah_k8s_claim_manifest (const k8s_site_t *site, const char *agent_id, const k8s_spec_t *spec);
//  briefing: the Secret holds briefing.md too.
//  secret: the name of this boot's Secret.
json_t *ah_k8s_pod_manifest (const k8s_site_t *site, const char *agent_id, const k8s_spec_t *spec,
                             const char *secret, bool briefing);
//  The reader of a sleeping agent's home (docs/kubernetes.md): sandboxd
//  --read-only from the sandboxd image, the claim mounted read-only,
//  secret: its boot Secret (from ah_k8s_reader_secret_manifest).
json_t *ah_k8s_reader_pod_manifest (const k8s_site_t *site, const char *agent_id, const char *secret);
json_t *ah_k8s_reader_secret_manifest (const k8s_site_t *site, const char *agent_id, const char *secret,
                                       const char *boot_json);
json_t *ah_k8s_policy_manifest (const k8s_site_t *site, const char *agent_id, const k8s_spec_t *spec);
json_t *ah_k8s_secret_manifest (const k8s_site_t *site, const char *agent_id, const char *secret,
                                const char *boot_json, const char *briefing);
//  An object being deleted (metadata.deletionTimestamp).
bool    ah_k8s_deleting (const json_t *obj);
//  A Pod (as the API server returns it: hostile) into status->running,
//  exit_code, detail (phase, reason, node) and reason (a Pod Failed for a
//  reason of the cluster's). exists is the caller's (the claim).
void    ah_k8s_pod_status (const json_t *pod, ah_sandbox_status_t *status);
//  Pods seen ended. Failed and Succeeded are phases a Pod never leaves:
//  the watch notes each Pod its events show ended (ended: {uid: what
//  ah_k8s_pod_status reads, as the event carried it}; the first end
//  seen is kept; at most K8S_ENDED_MAX, all forgotten past that), and
//  inspect reports that end for the same Pod (ah_k8s_ended_seen), even
//  when a later read says Running: a status someone else set (kubectl
//  patch, as k8s.faults does to evict) is rewritten by the kubelet,
//  which may do so before inspect reads it. A Pod deleted is forgotten.
//  Every Pod is hostile: one without a uid, a status or an end is not
//  noted.
#define K8S_ENDED_MAX 1024
void    ah_k8s_ended_note (json_t *ended, const json_t *pod);
void    ah_k8s_ended_forget (json_t *ended, const json_t *pod);
//  The end noted for pod's uid (borrowed from ended), or NULL.
const json_t *ah_k8s_ended_seen (const json_t *ended, const json_t *pod);
//  boot.json's text: {"agent_id", "token", "tunnel_url"}. Caller frees.
char   *ah_k8s_boot_json (const char *agent_id, const char *token, const char *tunnel_url);

//  -------------------------------------------------------------------------
//  driver.c, watch.c

void ah_k8s_site (const k8s_t *self, k8s_site_t *site);
//  Every reader Pod and Secret of the installation removed, once per
//  driver (the watch calls it when it connects; its thread only).
void ah_k8s_readers_sweep (k8s_t *self);
//  "labelSelector=agenthold.io%2Finstallation%3D<prefix>". Caller frees.
char *ah_k8s_selector (const k8s_t *self);
int  ah_k8s_watch (ah_driver_t *driver,
                   void (*on_change) (void *arg, const char *agent_id, const char *action),
                   void *arg, volatile int *stop, char **err);

#endif
