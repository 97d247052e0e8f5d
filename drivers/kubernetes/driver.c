/*  drivers/kubernetes/driver.c: the Kubernetes driver object and its entry
    points. create makes the home claim (with the spec as its annotation)
    and the NetworkPolicy; start makes a fresh boot Secret and the Pod;
    stop deletes the Pod and its Secret (the claim stays: sleeping);
    rebuild deletes the Pod and rewrites the spec; destroy deletes all four
    and waits until they are gone. inspect says a sandbox exists while its
    claim does (a sleeping sandbox has no Pod) and runs while its Pod does. */
#include "drivers/kubernetes/k8s_int.h"

#include <ctype.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define PREFIX_MAX      30              //  names stay under 63 with "-home-" and an id

typedef enum { K_POD, K_CLAIM, K_SECRET, K_POLICY } s_kind_t;

static const char *s_kind_word [] = { "Pod", "claim", "Secret", "NetworkPolicy" };

static char *s_path (const k8s_t *self, s_kind_t kind, const char *name)
{
    static const char *plural [] = { "pods", "persistentvolumeclaims", "secrets", "networkpolicies" };
    const char *group = kind == K_POLICY ? "/apis/networking.k8s.io/v1" : "/api/v1";
    return name ? ah_strf ("%s/namespaces/%s/%s/%s", group, self->ns, plural [kind], name)
                : ah_strf ("%s/namespaces/%s/%s", group, self->ns, plural [kind]);
}

void ah_k8s_site (const k8s_t *self, k8s_site_t *site)
{
    const ah_config_t *c = self->config;
    *site = (k8s_site_t) {
        .prefix = self->prefix, .ns = self->ns, .sandboxd_image = c->k8s_sandboxd_image,
        .pull_policy = c->k8s_image_pull_policy, .node_selector = c->k8s_node_selector,
        .storage_class = c->k8s_storage_class, .home_size = c->k8s_home_size, .tmp_mb = c->tmp_mb,
        .tunnel_host = self->tunnel_host, .tunnel_port = self->tunnel_port,
        .tunnel_pods = c->k8s_tunnel_pods, .tunnel_pod_port = self->tunnel_pod_port };
}

char *ah_k8s_selector (const k8s_t *self)
{
    char *sel = ah_strf ("%s=%s", K8S_LABEL_INSTALL, self->prefix);
    char *esc = sel ? curl_easy_escape (NULL, sel, 0) : NULL;
    char *out = esc ? ah_strf ("labelSelector=%s", esc) : NULL;
    curl_free (esc);
    free (sel);
    return out;
}

//  GET one object: 200 (with *obj if wanted), 404, or -1 with *err.
static long s_get (k8s_t *self, s_kind_t kind, const char *name, json_t **obj, char **err)
{
    char *path = s_path (self, kind, name);
    k8s_call_t call = { .method = "GET" };
    char *msg = NULL;
    long st = path ? ah_k8s_call (self, &call, path, NULL, obj, &msg, err) : -1;
    if (st > 0 && st != 200 && st != 404) {
        char *what = ah_strf ("reading %s %s", s_kind_word [kind], name);
        ah_k8s_status_err (err, what ? what : "reading", st, msg);
        free (what);
        st = -1;
    }
    free (msg);
    free (path);
    return st;
}

//  DELETE one object (absent is fine). grace < 0: the object's own.
static int s_delete (k8s_t *self, s_kind_t kind, const char *name, int grace, char **err)
{
    char *path = s_path (self, kind, name);
    json_t *body = grace >= 0 ? json_pack ("{s:s s:s s:i s:s}", "apiVersion", "v1", "kind",
                                           "DeleteOptions", "gracePeriodSeconds", grace,
                                           "propagationPolicy", "Background") : NULL;
    k8s_call_t call = { .method = "DELETE" };
    char *msg = NULL;
    long st = path ? ah_k8s_call (self, &call, path, body, NULL, &msg, err) : -1;
    if (!path)
        json_decref (body);
    int rc = 0;
    if (st < 0)
        rc = -1;
    else
    if (st != 200 && st != 202 && st != 404) {
        char *what = ah_strf ("deleting %s %s", s_kind_word [kind], name);
        ah_k8s_status_err (err, what ? what : "deleting", st, msg);
        free (what);
        rc = -1;
    }
    free (msg);
    free (path);
    return rc;
}

//  Boot Secrets by a label selector (deletecollection: the server never
//  lists or reads a Secret). 0 / -1 with *err.
static int s_delete_secrets_by (k8s_t *self, const char *sel, char **err);

//  Every boot Secret of the agent, its reader's too.
static int s_delete_secrets (k8s_t *self, const char *agent_id, char **err)
{
    char *sel = ah_strf ("%s=%s,%s=%s", K8S_LABEL_AGENT, agent_id, K8S_LABEL_INSTALL, self->prefix);
    int rc = sel ? s_delete_secrets_by (self, sel, err) : -1;
    if (!sel)
        ah_k8s_err (err, "deleting the boot Secrets: out of memory");
    free (sel);
    return rc;
}

static int s_delete_secrets_by (k8s_t *self, const char *sel, char **err)
{
    char *esc = sel ? curl_easy_escape (NULL, sel, 0) : NULL;
    char *base = s_path (self, K_SECRET, NULL);
    char *path = esc && base ? ah_strf ("%s?labelSelector=%s", base, esc) : NULL;
    curl_free (esc);
    free (base);
    k8s_call_t call = { .method = "DELETE" };
    char *msg = NULL;
    long st = path ? ah_k8s_call (self, &call, path, NULL, NULL, &msg, err) : -1;
    if (!path)
        ah_k8s_err (err, "deleting the boot Secrets: out of memory");
    else
    if (st > 0 && st != 200) {
        ah_k8s_status_err (err, "deleting the boot Secrets", st, msg);
        st = -1;
    }
    free (msg);
    free (path);
    return st == 200 ? 0 : -1;
}

//  Until the object is gone (a Pod terminates, a claim waits for its
//  Pod): 0, or -1 with *err after seconds.
static int s_wait_gone (k8s_t *self, s_kind_t kind, const char *name, int seconds, char **err)
{
    for (int i = 0; i < seconds * 5; i++) {
        long st = s_get (self, kind, name, NULL, err);
        if (st == 404)
            return 0;
        if (st < 0)
            return -1;
        nanosleep (&(struct timespec) { .tv_nsec = 200 * 1000 * 1000 }, NULL);
    }
    ah_k8s_err (err, "deleting %s %s: still there after %d s", s_kind_word [kind], name, seconds);
    return -1;
}

static int s_delete_wait (k8s_t *self, s_kind_t kind, const char *name, int grace, int seconds,
                          char **err)
{
    if (s_delete (self, kind, name, grace, err))
        return -1;
    return s_wait_gone (self, kind, name, seconds, err);
}

//  POST obj (taken over). 409: replace (PUT) when replace, else the
//  status is returned for the caller. 201/200: 0.
static long s_post (k8s_t *self, s_kind_t kind, const char *name, json_t *obj, bool replace,
                    char **err)
{
    if (!obj) {
        ah_k8s_err (err, "making %s %s: out of memory (or text that is not UTF-8)",
                    s_kind_word [kind], name);
        return -1;
    }
    char *path = s_path (self, kind, NULL);
    k8s_call_t call = { .method = "POST" };
    char *msg = NULL;
    long st = path ? ah_k8s_call (self, &call, path, json_incref (obj), NULL, &msg, err) : -1;
    if (st == 409 && replace) {
        free (msg);
        msg = NULL;
        free (path);
        path = s_path (self, kind, name);
        call.method = "PUT";
        st = path ? ah_k8s_call (self, &call, path, json_incref (obj), NULL, &msg, err) : -1;
    }
    json_decref (obj);
    if (st > 0 && st != 200 && st != 201 && !(st == 409 && !replace)) {
        char *what = ah_strf ("making %s %s", s_kind_word [kind], name);
        ah_k8s_status_err (err, what ? what : "making", st, msg);
        free (what);
        st = -1;
    }
    free (msg);
    free (path);
    return st;
}

static bool s_deleting (const json_t *obj)
{
    return ah_k8s_deleting (obj);
}

//  -------------------------------------------------------------------------
//  Entry points

static k8s_t *s_enter (ah_driver_t *driver, const char *agent_id, const char *doing,
                       k8s_names_t *n, char **err)
{
    const char *why = ah_ident_check (AH_IDENT_AGENT_ID, agent_id);
    if (why) {
        ah_k8s_err (err, "%s: agent id '%.48s' %s", doing, agent_id ? agent_id : "", why);
        return NULL;
    }
    k8s_t *self = driver->impl;
    ah_k8s_names (self->prefix, agent_id, n);
    return self;
}

//  The claim with the spec (made, or its annotation rewritten) and the policy.
static int s_make (ah_driver_t *driver, const ah_sandbox_spec_t *in, bool rebuild, char **err)
{
    k8s_names_t n;
    const char *doing = rebuild ? "rebuilding a sandbox" : "creating a sandbox";
    k8s_t *self = s_enter (driver, in ? in->agent_id : NULL, doing, &n, err);
    if (!self)
        return -1;
    k8s_spec_t spec;
    if (ah_k8s_spec_from (self->config, in, &spec, err))
        return -1;
    k8s_site_t site;
    ah_k8s_site (self, &site);
    int rc = -1;
    if (rebuild && (s_delete_wait (self, K_POD, n.pod, 5, 90, err)
                ||  s_delete_secrets (self, in->agent_id, err)))
        goto out;
    long st = s_post (self, K_CLAIM, n.claim, ah_k8s_claim_manifest (&site, in->agent_id, &spec),
                      false, err);
    if (st == 409) {
        //  There already (an interrupted create, or a rebuild): the home
        //  is kept, its spec is the new one. One being deleted is not a home.
        json_t *claim = NULL;
        long gst = s_get (self, K_CLAIM, n.claim, &claim, err);
        bool deleting = gst == 200 && s_deleting (claim);
        json_decref (claim);
        if (gst == 200 && deleting)
            ah_k8s_err (err, "%s: its home claim %s is being deleted; try again once it is gone",
                        doing, n.claim);
        if (gst != 200 || deleting)
            goto out;
        char *text = ah_k8s_spec_to_json (&spec);
        json_t *patch = text ? json_pack ("{s:{s:{s:s}}}", "metadata", "annotations",
                                          K8S_SPEC_ANNOTATION, text) : NULL;
        free (text);
        char *path = s_path (self, K_CLAIM, n.claim);
        k8s_call_t call = { .method = "PATCH", .content_type = "application/merge-patch+json" };
        char *msg = NULL;
        st = path && patch ? ah_k8s_call (self, &call, path, patch, NULL, &msg, err) : -1;
        if (!path)
            json_decref (patch);
        if (st > 0 && st != 200) {
            ah_k8s_status_err (err, "writing the spec on the home claim", st, msg);
            st = -1;
        }
        free (msg);
        free (path);
    }
    if (st < 0)
        goto out;
    if (s_post (self, K_POLICY, n.policy, ah_k8s_policy_manifest (&site, in->agent_id, &spec),
                true, err) < 0)
        goto out;
    rc = 0;
out:
    ah_k8s_spec_free (&spec);
    return rc;
}

static int s_create (ah_driver_t *driver, const ah_sandbox_spec_t *spec, char **err)
{
    return s_make (driver, spec, false, err);
}

static int s_rebuild (ah_driver_t *driver, const ah_sandbox_spec_t *spec, char **err)
{
    return s_make (driver, spec, true, err);
}

//  -------------------------------------------------------------------------
//  Readers of a sleeping agent's home

//  The agent's reader gone: its Pod (waited for: the claim is
//  ReadWriteOnce) and its Secrets. Absent is success.
static int s_reader_gone (k8s_t *self, const char *agent_id, const k8s_names_t *n, char **err)
{
    if (s_delete_wait (self, K_POD, n->reader, 1, 60, err))
        return -1;
    char *sel = ah_strf ("%s=%s,%s=%s,%s=reader", K8S_LABEL_AGENT, agent_id, K8S_LABEL_INSTALL,
                         self->prefix, K8S_LABEL_ROLE);
    int rc = sel ? s_delete_secrets_by (self, sel, err) : -1;
    free (sel);
    return rc;
}

//  A boot Secret under a name of its own, base-<8 hex> (the kubelet caches
//  Secrets by name: one of an earlier boot under the same name could be
//  mounted again), holding boot.json for boot's token, and its briefing
//  unless a reader's; posted. 0 with the name in name, -1 with *err.
static int s_post_boot_secret (k8s_t *self, const k8s_site_t *site, const ah_boot_t *boot,
                               const char *base, bool reader, char *name, size_t size, char **err)
{
    uint32_t nonce = 0;
    if (getrandom (&nonce, sizeof nonce, 0) != (ssize_t) sizeof nonce)
        nonce = (uint32_t) time (NULL) ^ (uint32_t) clock ();
    snprintf (name, size, "%s-%08x", base, nonce);
    char *boot_json = ah_k8s_boot_json (boot->agent_id, boot->token, self->config->k8s_tunnel_url);
    json_t *secret = !boot_json ? NULL
                   : reader ? ah_k8s_reader_secret_manifest (site, boot->agent_id, name, boot_json)
                   : ah_k8s_secret_manifest (site, boot->agent_id, name, boot_json, boot->briefing);
    if (boot_json)
        memset (boot_json, 0, strlen (boot_json));
    free (boot_json);
    long st = s_post (self, K_SECRET, name, secret, false, err);
    if (st == 409)
        ah_k8s_err (err, "making Secret %s: one was made meanwhile", name);
    return st == 201 || st == 200 ? 0 : -1;
}

static int s_reader_stop (ah_driver_t *driver, const char *agent_id, char **err)
{
    k8s_names_t n;
    k8s_t *self = s_enter (driver, agent_id, "removing a reader", &n, err);
    return self ? s_reader_gone (self, agent_id, &n, err) : -1;
}

static int s_reader_start (ah_driver_t *driver, const ah_boot_t *boot, char **err)
{
    k8s_names_t n;
    k8s_t *self = s_enter (driver, boot ? boot->agent_id : NULL, "starting a reader", &n, err);
    if (!self)
        return -1;
    if (!boot->token || !*boot->token) {
        ah_k8s_err (err, "starting reader Pod %s: no reader token", n.reader);
        return -1;
    }
    json_t *claim = NULL;
    long st = s_get (self, K_CLAIM, n.claim, &claim, err);
    bool deleting = st == 200 && s_deleting (claim);
    json_decref (claim);
    if (st == 404 || deleting) {
        ah_k8s_err (err, "starting reader Pod %s: its home claim %s is %s", n.reader, n.claim,
                    st == 404 ? "gone" : "being deleted");
        return -1;
    }
    if (st != 200)
        return -1;
    //  One of an earlier session goes first (its token is revoked).
    if (s_reader_gone (self, boot->agent_id, &n, err))
        return -1;
    k8s_site_t site;
    ah_k8s_site (self, &site);
    char secret_name [K8S_MAX_NAME + 16];
    if (s_post_boot_secret (self, &site, boot, n.reader, true, secret_name, sizeof secret_name, err))
        return -1;
    st = s_post (self, K_POD, n.reader, ah_k8s_reader_pod_manifest (&site, boot->agent_id, secret_name),
                 false, err);
    if (st == 409)
        ah_k8s_err (err, "making reader Pod %s: one was made meanwhile", n.reader);
    return st == 201 || st == 200 ? 0 : -1;
}

//  Stray readers (a server that ended with one alive): every reader Pod
//  and Secret of the installation, once, from the watch's first list.
void ah_k8s_readers_sweep (k8s_t *self)
{
    if (self->readers_swept)
        return;
    char *err = NULL;
    char *sel = ah_strf ("%s=%s,%s=reader", K8S_LABEL_INSTALL, self->prefix, K8S_LABEL_ROLE);
    char *esc = sel ? curl_easy_escape (NULL, sel, 0) : NULL;
    char *base = s_path (self, K_POD, NULL);
    char *path = esc && base ? ah_strf ("%s?labelSelector=%s", base, esc) : NULL;
    json_t *list = NULL;
    k8s_call_t call = { .method = "GET" };
    long st = path ? ah_k8s_call (self, &call, path, NULL, &list, NULL, &err) : -1;
    int failed = st != 200;
    size_t i;
    json_t *item;
    json_array_foreach (json_object_get (list, "items"), i, item) {
        const char *name = json_string_value (json_object_get (json_object_get (item, "metadata"), "name"));
        if (name && strlen (name) < K8S_MAX_NAME) {
            ah_info (LOG_AREA, "removing the stray reader Pod %s (left by an earlier run)", name);
            failed |= s_delete (self, K_POD, name, 1, &err);
        }
    }
    if (sel)
        failed |= s_delete_secrets_by (self, sel, &err);
    if (failed)
        ah_warn (LOG_AREA, "removing stray readers: %s (tried again at the next watch)",
                 err ? err : "out of memory");
    else
        self->readers_swept = true;
    json_decref (list);
    curl_free (esc);
    free (base);
    free (path);
    free (sel);
    free (err);
}

static int s_start (ah_driver_t *driver, const ah_boot_t *boot, char **err)
{
    k8s_names_t n;
    k8s_t *self = s_enter (driver, boot ? boot->agent_id : NULL, "starting a sandbox", &n, err);
    if (!self)
        return -1;
    if (!boot->token || !*boot->token) {
        ah_k8s_err (err, "starting Pod %s: no boot token", n.pod);
        return -1;
    }
    json_t *claim = NULL;
    long st = s_get (self, K_CLAIM, n.claim, &claim, err);
    if (st == 404 || (st == 200 && s_deleting (claim))) {
        ah_k8s_err (err, "starting Pod %s: its home claim %s is %s; rebuild the sandbox (its "
                    "files are lost)", n.pod, n.claim, st == 404 ? "gone" : "being deleted");
        json_decref (claim);
        return -1;
    }
    if (st != 200)
        return -1;
    const char *text = json_string_value (json_object_get (json_object_get (json_object_get (
        claim, "metadata"), "annotations"), K8S_SPEC_ANNOTATION));
    k8s_spec_t spec;
    int bad = ah_k8s_spec_from_json (text, &spec, err);
    json_decref (claim);
    if (bad) {
        char *e = ah_strf ("starting Pod %s: %s; rebuild the sandbox", n.pod, err && *err ? *err : "");
        ah_k8s_err (err, "%s", e ? e : "starting: a bad spec");
        free (e);
        return -1;
    }
    k8s_site_t site;
    ah_k8s_site (self, &site);
    int rc = -1;
    //  A Pod of an earlier boot goes first (never forced: its container is
    //  gone when its object is), and a reader before it: the claim is
    //  ReadWriteOnce (docs/kubernetes.md).
    char secret_name [K8S_MAX_NAME + 16];
    if (s_reader_gone (self, boot->agent_id, &n, err)
    ||  s_delete_wait (self, K_POD, n.pod, 1, 90, err)
    ||  s_delete_secrets (self, boot->agent_id, err)
    ||  s_post_boot_secret (self, &site, boot, n.secret, false, secret_name, sizeof secret_name, err))
        goto out;
    st = s_post (self, K_POD, n.pod, ah_k8s_pod_manifest (&site, boot->agent_id, &spec, secret_name,
                                                         boot->briefing != NULL), false, err);
    if (st == 409)
        ah_k8s_err (err, "making Pod %s: one was made meanwhile", n.pod);
    rc = st == 201 || st == 200 ? 0 : -1;
out:
    ah_k8s_spec_free (&spec);
    return rc;
}

static int s_stop (ah_driver_t *driver, const char *agent_id, char **err)
{
    k8s_names_t n;
    k8s_t *self = s_enter (driver, agent_id, "stopping a sandbox", &n, err);
    if (!self)
        return -1;
    if (s_delete_wait (self, K_POD, n.pod, 5, 90, err))
        return -1;
    return s_delete_secrets (self, agent_id, err);
}

static int s_destroy (ah_driver_t *driver, const char *agent_id, char **err)
{
    k8s_names_t n;
    k8s_t *self = s_enter (driver, agent_id, "destroying a sandbox", &n, err);
    if (!self)
        return -1;
    if (s_reader_gone (self, agent_id, &n, err)
    ||  s_delete_wait (self, K_POD, n.pod, 1, 90, err)
    ||  s_delete_secrets (self, agent_id, err)
    ||  s_delete (self, K_POLICY, n.policy, -1, err))
        return -1;
    //  The claim goes once no Pod uses it (its protection finalizer).
    return s_delete_wait (self, K_CLAIM, n.claim, -1, 90, err);
}

static int s_inspect (ah_driver_t *driver, const char *agent_id, ah_sandbox_status_t *status, char **err)
{
    k8s_names_t n;
    k8s_t *self = s_enter (driver, agent_id, "inspecting a sandbox", &n, err);
    if (!self)
        return -1;
    memset (status, 0, sizeof *status);
    status->exit_code = -1;
    json_t *claim = NULL, *pod = NULL;
    long cst = s_get (self, K_CLAIM, n.claim, &claim, err);
    long pst = cst > 0 ? s_get (self, K_POD, n.pod, &pod, err) : -1;
    int rc = cst > 0 && pst > 0 ? 0 : -1;
    if (rc == 0) {
        bool home = cst == 200 && !s_deleting (claim);
        if (!home) {
            //  No home: its files are gone, whatever the Pod still does.
            status->exists = false;
            status->home_gone = true;
            snprintf (status->detail, sizeof status->detail, "home claim %s %s", n.claim,
                      cst == 404 ? "missing" : "being deleted");
        }
        else
        if (pst == 404) {
            status->exists = true;
            status->exit_code = 0;
            snprintf (status->detail, sizeof status->detail, "no Pod; home claim present");
        }
        else {
            status->exists = true;
            //  An end the watch saw stands, whatever the Pod says now
            //  (ah_k8s_ended_note); a deletion under way says more.
            pthread_mutex_lock (&self->ended_lock);
            const json_t *seen = s_deleting (pod) ? NULL : ah_k8s_ended_seen (self->ended, pod);
            ah_k8s_pod_status (seen ? seen : pod, status);
            pthread_mutex_unlock (&self->ended_lock);
        }
    }
    json_decref (claim);
    json_decref (pod);
    return rc;
}

static void s_add_id (char ***ids, size_t *count, const char *id)
{
    if (!ah_ident_ok (AH_IDENT_AGENT_ID, id))
        return;
    for (size_t i = 0; i < *count; i++)
        if (strcmp ((*ids) [i], id) == 0)
            return;
    char **grown = realloc (*ids, (*count + 2) * sizeof (char *));
    if (!grown)
        return;
    *ids = grown;
    char *copy = strdup (id);
    if (!copy)
        return;
    (*ids) [(*count)++] = copy;
    (*ids) [*count] = NULL;
}

static int s_list (ah_driver_t *driver, char ***ids_p, char **err)
{
    k8s_t *self = driver->impl;
    *ids_p = NULL;
    char **ids = calloc (1, sizeof (char *));
    size_t count = 0;
    char *sel = ah_k8s_selector (self);
    int rc = ids && sel ? 0 : -1;
    if (rc)
        ah_k8s_err (err, "listing sandboxes: out of memory");
    //  Not Secrets: the server may not read them (docs/kubernetes.md, RBAC),
    //  and one never outlives its claim but by a destroy that is retried.
    for (s_kind_t k = K_POD; k <= K_POLICY && rc == 0; k++) {
        if (k == K_SECRET)
            continue;
        char *base = s_path (self, k, NULL);
        char *path = base ? ah_strf ("%s?%s", base, sel) : NULL;
        free (base);
        json_t *list = NULL;
        k8s_call_t call = { .method = "GET", .timeout_s = 60 };
        char *msg = NULL;
        long st = path ? ah_k8s_call (self, &call, path, NULL, &list, &msg, err) : -1;
        if (st == 200) {
            size_t i;
            json_t *item;
            json_array_foreach (json_object_get (list, "items"), i, item) {
                json_t *labels = json_object_get (json_object_get (item, "metadata"), "labels");
                const char *inst = json_string_value (json_object_get (labels, K8S_LABEL_INSTALL));
                if (inst && strcmp (inst, self->prefix) == 0)
                    s_add_id (&ids, &count, json_string_value (json_object_get (labels, K8S_LABEL_AGENT)));
            }
        }
        else {
            if (st > 0)
                ah_k8s_status_err (err, "listing the sandboxes' objects", st, msg);
            rc = -1;
        }
        json_decref (list);
        free (msg);
        free (path);
    }
    free (sel);
    if (rc) {
        ah_driver_free_ids (&ids);
        return -1;
    }
    *ids_p = ids;
    return 0;
}

//  -------------------------------------------------------------------------
//  The driver object

static void s_destroy_driver (ah_driver_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_driver_t *driver = *self_p;
    k8s_t *self = driver->impl;
    if (self) {
        ah_k8s_creds_free (&self->creds);
        free (self->ns);
        free (self->prefix);
        json_decref (self->ended);
        pthread_mutex_destroy (&self->ended_lock);
        free (self);
    }
    free (driver);
    *self_p = NULL;
}

ah_driver_t *ah_kubernetes_driver_new (const ah_config_t *config, char **err)
{
    if (!config) {
        ah_k8s_err (err, "kubernetes driver: no configuration");
        return NULL;
    }
    const char *prefix = config->name_prefix ? config->name_prefix : "";
    bool prefix_ok = *prefix && strlen (prefix) <= PREFIX_MAX && prefix [0] != '-';
    for (const char *p = prefix; *p && prefix_ok; p++)
        prefix_ok = islower ((unsigned char) *p) || isdigit ((unsigned char) *p) || *p == '-';
    if (!prefix_ok) {
        ah_k8s_err (err, "kubernetes driver: sandbox.docker.name_prefix '%s' cannot start "
                    "Kubernetes names (lower-case letters, digits and '-', at most %d)",
                    prefix, PREFIX_MAX);
        return NULL;
    }
    const char *url = config->k8s_tunnel_url;
    char host [64] = "";
    unsigned port = 0;
    if (!url || sscanf (url, "ws://%63[0-9.]:%5u", host, &port) != 2 || port == 0 || port > 65535) {
        ah_k8s_err (err, "kubernetes driver: sandbox.kubernetes.tunnel_url '%s' is not "
                    "ws://IPv4:PORT/tunnel", url ? url : "");
        return NULL;
    }
    curl_global_init (CURL_GLOBAL_DEFAULT);
    ah_driver_t *driver = calloc (1, sizeof *driver);
    k8s_t *self = calloc (1, sizeof *self);
    if (!driver || !self) {
        free (driver);
        free (self);
        ah_k8s_err (err, "kubernetes driver: out of memory");
        return NULL;
    }
    pthread_mutex_init (&self->ended_lock, NULL);
    self->ended = json_object ();
    driver->name = "kubernetes";
    driver->waits_for_hello = true;
    driver->create = s_create;
    driver->start = s_start;
    driver->stop = s_stop;
    driver->rebuild = s_rebuild;
    driver->destroy = s_destroy;
    driver->inspect = s_inspect;
    driver->list = s_list;
    driver->watch = ah_k8s_watch;
    driver->remove_container = s_stop;
    driver->reader_start = s_reader_start;
    driver->reader_stop = s_reader_stop;
    driver->destroy_driver = s_destroy_driver;
    driver->impl = self;
    self->config = config;
    self->ns = strdup (config->k8s_namespace);
    self->prefix = strdup (prefix);
    snprintf (self->tunnel_host, sizeof self->tunnel_host, "%s", host);
    self->tunnel_port = (int) port;
    //  The port the server's own Pods listen on: the tunnel's TCP
    //  listener's, after its last ':' (validated as host:port at start;
    //  the kubernetes driver always has one, config.c).
    const char *tcp = ah_config_tunnel_tcp (config, NULL);
    const char *colon = tcp ? strrchr (tcp, ':') : NULL;
    self->tunnel_pod_port = colon ? atoi (colon + 1) : 0;
    char *cerr = NULL;
    int crc = config->k8s_kubeconfig ? ah_k8s_kubeconfig_load (config->k8s_kubeconfig, &self->creds, &cerr)
                                     : ah_k8s_incluster_load (K8S_INCLUSTER_DIR, &self->creds, &cerr);
    if (crc == 0 && self->creds.insecure) {
        cerr = strdup ("the kubeconfig's cluster says insecure-skip-tls-verify: agenthold "
                       "verifies the API server (give its certificate-authority)");
        crc = -1;
    }
    if (crc || !self->ns || !self->prefix) {
        ah_k8s_err (err, "kubernetes driver: %s", cerr ? cerr : "out of memory");
        free (cerr);
        s_destroy_driver (&driver);
        return NULL;
    }
    return driver;
}
