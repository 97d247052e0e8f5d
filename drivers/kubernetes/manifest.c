/*  drivers/kubernetes/manifest.c: an agent's objects as JSON, and the
    sandbox's spec kept on its home claim (the annotation agenthold.io/spec)
    while it has no Pod. Nothing here talks to the cluster, so the unit
    tests check every field (tests/kubernetes/test_k8s_manifest.c).    */
#include "drivers/kubernetes/k8s_int.h"
#include "common/bounds.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENV_MAX         256             //  variables of a runtime
#define ENV_ENTRY_MAX   (64 * 1024)

//  The capabilities sandboxd keeps (docs/docker.md, "Isolation", says why
//  each): making the home the agent's and becoming the agent.
static const char *s_caps [] = { "CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID" };

void ah_k8s_names (const char *prefix, const char *agent_id, k8s_names_t *n)
{
    snprintf (n->pod, sizeof n->pod, "%s-%s", prefix, agent_id);
    snprintf (n->claim, sizeof n->claim, "%s-home-%s", prefix, agent_id);
    snprintf (n->secret, sizeof n->secret, "%s-boot-%s", prefix, agent_id);
    snprintf (n->policy, sizeof n->policy, "%s-%s", prefix, agent_id);
    snprintf (n->reader, sizeof n->reader, "%s-read-%s", prefix, agent_id);
}

//  -------------------------------------------------------------------------
//  The spec

void ah_k8s_spec_free (k8s_spec_t *spec)
{
    for (size_t i = 0; spec->env && i < spec->n_env; i++)
        free (spec->env [i]);
    free (spec->env);
    memset (spec, 0, sizeof *spec);
}

//  NAME=value with a portable NAME.
static bool s_env_ok (const char *e)
{
    if (!e || strlen (e) > ENV_ENTRY_MAX)
        return false;
    const char *eq = strchr (e, '=');
    if (!eq || eq == e || isdigit ((unsigned char) e [0]))
        return false;
    for (const char *p = e; p < eq; p++)
        if (!(isalnum ((unsigned char) *p) || *p == '_'))
            return false;
    return true;
}

static int s_env_add (k8s_spec_t *spec, const char *e, char **err)
{
    if (!s_env_ok (e)) {
        ah_k8s_err (err, "the sandbox's environment: '%.60s' is not NAME=value", e ? e : "");
        return -1;
    }
    if (spec->n_env >= ENV_MAX) {
        ah_k8s_err (err, "the sandbox's environment: more than %d variables", ENV_MAX);
        return -1;
    }
    char **grown = realloc (spec->env, (spec->n_env + 1) * sizeof (char *));
    char *copy = grown ? strdup (e) : NULL;
    if (grown)
        spec->env = grown;
    if (!copy) {
        ah_k8s_err (err, "the sandbox's environment: out of memory");
        return -1;
    }
    spec->env [spec->n_env++] = copy;
    return 0;
}

static int s_spec_check (k8s_spec_t *spec, char **err)
{
    const char *why = ah_ident_check (AH_IDENT_IMAGE, spec->image);
    if (why) {
        ah_k8s_err (err, "the sandbox's image '%.100s' %s", spec->image, why);
        return -1;
    }
    //  The bounds every client is held to (common/bounds.h): no CPU
    //  limit rounds to 0 millicores.
    char bad [300];
    if (ah_bound_check_named ("cpus", spec->cpus, bad, sizeof bad)
    ||  ah_bound_check_named ("memory_mb", (double) spec->memory_mb, bad, sizeof bad)) {
        ah_k8s_err (err, "the sandbox's resources (%g CPUs, %lld MiB) are out of range: %s",
                    spec->cpus, (long long) spec->memory_mb, bad);
        return -1;
    }
    return 0;
}

int ah_k8s_spec_from (const ah_config_t *c, const ah_sandbox_spec_t *in, k8s_spec_t *out, char **err)
{
    memset (out, 0, sizeof *out);
    const char *image = in->image && *in->image ? in->image : c->default_image;
    if (!image || strlen (image) >= sizeof out->image) {
        ah_k8s_err (err, "the sandbox's image is missing or too long");
        return -1;
    }
    snprintf (out->image, sizeof out->image, "%s", image);
    out->cpus = in->cpus > 0 ? in->cpus : c->default_cpus;
    if (c->max_cpus > 0 && out->cpus > c->max_cpus)
        out->cpus = c->max_cpus;
    out->memory_mb = in->memory_mb > 0 ? in->memory_mb : c->default_memory_mb;
    if (c->max_memory_mb > 0 && out->memory_mb > c->max_memory_mb)
        out->memory_mb = c->max_memory_mb;
    out->needs_network = in->needs_network;
    for (size_t i = 0; i < in->n_env; i++)
        if (in->env [i] && s_env_add (out, in->env [i], err)) {
            ah_k8s_spec_free (out);
            return -1;
        }
    if (s_spec_check (out, err)) {
        ah_k8s_spec_free (out);
        return -1;
    }
    return 0;
}

char *ah_k8s_spec_to_json (const k8s_spec_t *spec)
{
    json_t *env = json_array ();
    for (size_t i = 0; i < spec->n_env; i++)
        json_array_append_new (env, json_string (spec->env [i]));
    json_t *j = json_pack ("{s:s s:f s:I s:b s:o}", "image", spec->image, "cpus", spec->cpus,
                           "memory_mb", (json_int_t) spec->memory_mb, "needs_network",
                           spec->needs_network, "env", env);
    char *text = j ? json_dumps (j, JSON_COMPACT) : NULL;
    json_decref (j);
    return text;
}

int ah_k8s_spec_from_json (const char *text, k8s_spec_t *spec, char **err)
{
    memset (spec, 0, sizeof *spec);
    json_t *j = text && strlen (text) < (1 << 20) ? json_loads (text, 0, NULL) : NULL;
    json_t *image = json_object_get (j, "image"), *cpus = json_object_get (j, "cpus");
    json_t *mem = json_object_get (j, "memory_mb"), *net = json_object_get (j, "needs_network");
    json_t *env = json_object_get (j, "env");
    int rc = -1;
    if (!json_is_object (j) || !json_is_string (image) || !json_is_number (cpus)
    ||  !json_is_integer (mem) || !json_is_boolean (net) || !json_is_array (env)
    ||  json_string_length (image) >= sizeof spec->image)
        ah_k8s_err (err, "its home claim's annotation %s is not a sandbox spec "
                    "(image, cpus, memory_mb, needs_network, env)", K8S_SPEC_ANNOTATION);
    else {
        snprintf (spec->image, sizeof spec->image, "%s", json_string_value (image));
        spec->cpus = json_number_value (cpus);
        spec->memory_mb = json_integer_value (mem);
        spec->needs_network = json_is_true (net);
        rc = 0;
        size_t i;
        json_t *e;
        json_array_foreach (env, i, e)
            if (rc == 0 && (!json_is_string (e) || s_env_add (spec, json_string_value (e), err))) {
                if (!json_is_string (e))
                    ah_k8s_err (err, "its home claim's spec: an env entry that is not a string");
                rc = -1;
            }
        if (rc == 0)
            rc = s_spec_check (spec, err);
    }
    json_decref (j);
    if (rc)
        ah_k8s_spec_free (spec);
    return rc;
}

//  -------------------------------------------------------------------------
//  The objects

json_t *ah_k8s_label_map (const k8s_site_t *site, const char *agent_id)
{
    return json_pack ("{s:s s:s s:s}", "app.kubernetes.io/managed-by", "agenthold",
                      K8S_LABEL_AGENT, agent_id, K8S_LABEL_INSTALL, site->prefix);
}

static json_t *s_meta (const k8s_site_t *site, const char *name, const char *agent_id)
{
    return json_pack ("{s:s s:s s:o}", "name", name, "namespace", site->ns,
                      "labels", ah_k8s_label_map (site, agent_id));
}

json_t *ah_k8s_claim_manifest (const k8s_site_t *site, const char *agent_id, const k8s_spec_t *spec)
{
    k8s_names_t n;
    ah_k8s_names (site->prefix, agent_id, &n);
    char *text = ah_k8s_spec_to_json (spec);
    json_t *meta = s_meta (site, n.claim, agent_id);
    json_object_set_new (meta, "annotations", json_pack ("{s:s}", K8S_SPEC_ANNOTATION, text ? text : ""));
    free (text);
    json_t *j = json_pack ("{s:s s:s s:o s:{s:[s] s:{s:{s:s}}}}",
        "apiVersion", "v1", "kind", "PersistentVolumeClaim", "metadata", meta,
        "spec", "accessModes", "ReadWriteOnce", "resources", "requests", "storage", site->home_size);
    if (j && site->storage_class)
        json_object_set_new (json_object_get (j, "spec"), "storageClassName",
                             json_string (site->storage_class));
    return j;
}

//  "k=v,k=v" into a JSON object (validated by the configuration).
static json_t *s_label_map (const char *text)
{
    json_t *sel = json_object ();
    char *copy = text ? strdup (text) : NULL;
    char *save = NULL;
    for (char *kv = copy ? strtok_r (copy, ",", &save) : NULL; kv; kv = strtok_r (NULL, ",", &save)) {
        char *eq = strchr (kv, '=');
        if (!eq)
            continue;
        *eq = 0;
        json_object_set_new (sel, kv, json_string (eq + 1));
    }
    free (copy);
    return sel;
}

json_t *ah_k8s_pod_manifest (const k8s_site_t *site, const char *agent_id, const k8s_spec_t *spec,
                             const char *secret, bool briefing)
{
    k8s_names_t n;
    ah_k8s_names (site->prefix, agent_id, &n);
    //  CPU: the limit is the spec's, the request a tenth of it (a sandbox
    //  idles most of the time; the scheduler packs by requests). Memory:
    //  request = limit (memory is not given back under pressure).
    char cpu [32], cpu_req [32], mem [32], tmp [32];
    long long milli = llround (spec->cpus * 1000);
    snprintf (cpu, sizeof cpu, "%lldm", milli > 0 ? milli : 1);
    snprintf (cpu_req, sizeof cpu_req, "%lldm", milli / 10 > 0 ? milli / 10 : 1);
    snprintf (mem, sizeof mem, "%lldMi", (long long) spec->memory_mb);
    snprintf (tmp, sizeof tmp, "%lldMi", (long long) (site->tmp_mb > 0 ? site->tmp_mb : 64));

    json_t *caps = json_array ();
    for (size_t i = 0; i < sizeof s_caps / sizeof s_caps [0]; i++)
        json_array_append_new (caps, json_string (s_caps [i]));
    //  sandboxd starts as root (it reads the root-only boot.json, makes the
    //  home the agent's and becomes the agent for what it runs); no
    //  privilege escalation (setuid programs stay what they are), the
    //  runtime's default seccomp profile, every capability but those.
    json_t *sandbox_sc = json_pack ("{s:i s:i s:b s:{s:[s] s:o} s:{s:s}}",
        "runAsUser", 0, "runAsGroup", 0, "allowPrivilegeEscalation", 0,
        "capabilities", "drop", "ALL", "add", caps, "seccompProfile", "type", "RuntimeDefault");
    json_t *env = json_array ();
    json_array_append_new (env, json_pack ("{s:s s:s}", "name", "AGENTHOLD_USER", "value", ""));
    if (spec->needs_network)
        json_array_append_new (env, json_pack ("{s:s s:s}", "name", "AGENTHOLD_EGRESS_PORT",
                                               "value", AH_EGRESS_PORT));
    for (size_t i = 0; i < spec->n_env; i++) {
        const char *eq = strchr (spec->env [i], '=');
        if (!eq)
            continue;
        char *name = strndup (spec->env [i], (size_t) (eq - spec->env [i]));
        if (name)
            json_array_append_new (env, json_pack ("{s:s s:s}", "name", name, "value", eq + 1));
        free (name);
    }
    json_t *mounts = json_pack ("[{s:s s:s} {s:s s:s s:b} {s:s s:s s:b} {s:s s:s}]",
        "name", "home", "mountPath", "/home/agent",
        "name", "sandboxd", "mountPath", "/opt/agenthold", "readOnly", 1,
        "name", "boot", "mountPath", "/etc/agenthold", "readOnly", 1,
        "name", "tmp", "mountPath", "/tmp");
    json_t *sandbox = json_pack ("{s:s s:s s:s s:[s] s:[] s:o s:{s:{s:s s:s} s:{s:s s:s}} s:o s:o}",
        "name", "sandbox", "image", spec->image, "imagePullPolicy", site->pull_policy,
        "command", "/opt/agenthold/sandboxd", "args", "env", env,
        "resources", "requests", "cpu", cpu_req, "memory", mem, "limits", "cpu", cpu, "memory", mem,
        "securityContext", sandbox_sc, "volumeMounts", mounts);
    //  The init container only copies sandboxd out of its image, as nobody.
    json_t *init = json_pack ("{s:s s:s s:s s:[s s s] s:[{s:s s:s}] s:{s:{s:s s:s} s:{s:s s:s}}"
                              " s:{s:i s:i s:b s:b s:b s:{s:[s]} s:{s:s}}}",
        "name", "sandboxd", "image", site->sandboxd_image, "imagePullPolicy", site->pull_policy,
        "command", "/sandboxd", "--install", "/opt/agenthold",
        "volumeMounts", "name", "sandboxd", "mountPath", "/opt/agenthold",
        "resources", "requests", "cpu", "10m", "memory", "16Mi", "limits", "cpu", "500m",
        "memory", "64Mi",
        "securityContext", "runAsUser", 65534, "runAsGroup", 65534, "runAsNonRoot", 1,
        "allowPrivilegeEscalation", 0, "readOnlyRootFilesystem", 1, "capabilities", "drop", "ALL",
        "seccompProfile", "type", "RuntimeDefault");
    //  boot.json is root's alone (it holds the boot token); the briefing
    //  is the agent's to read.
    json_t *items = json_pack ("[{s:s s:s s:i}]", "key", "boot.json", "path", "boot.json", "mode", 0400);
    if (briefing)
        json_array_append_new (items, json_pack ("{s:s s:s s:i}", "key", "briefing.md",
                                                 "path", "briefing.md", "mode", 0444));
    json_t *volumes = json_pack ("[{s:s s:{s:s}} {s:s s:{s:s}} {s:s s:{s:s s:i s:o}} {s:s s:{s:s s:s}}]",
        "name", "home", "persistentVolumeClaim", "claimName", n.claim,
        "name", "sandboxd", "emptyDir", "sizeLimit", "64Mi",
        "name", "boot", "secret", "secretName", secret, "defaultMode", 0400, "items", items,
        "name", "tmp", "emptyDir", "medium", "Memory", "sizeLimit", tmp);
    json_t *pod_spec = json_pack ("{s:s s:s s:b s:b s:i s:{s:{s:s}} s:[o] s:[o] s:o}",
        "hostname", agent_id, "restartPolicy", "Never",
        "automountServiceAccountToken", 0, "enableServiceLinks", 0,
        "terminationGracePeriodSeconds", 5,
        "securityContext", "seccompProfile", "type", "RuntimeDefault",
        "initContainers", init, "containers", sandbox, "volumes", volumes);
    if (pod_spec && site->node_selector)
        json_object_set_new (pod_spec, "nodeSelector", s_label_map (site->node_selector));
    return json_pack ("{s:s s:s s:o s:o}", "apiVersion", "v1", "kind", "Pod",
                      "metadata", s_meta (site, n.pod, agent_id), "spec", pod_spec);
}

//  The reader's labels: the agent's (its NetworkPolicy selects it: the
//  tunnel alone) and the role, which the watch and a sandbox's own
//  lookups by name never take for the agent's Pod.
static json_t *s_reader_meta (const k8s_site_t *site, const char *name, const char *agent_id)
{
    json_t *meta = s_meta (site, name, agent_id);
    json_object_set_new (json_object_get (meta, "labels"), K8S_LABEL_ROLE, json_string ("reader"));
    return meta;
}

json_t *ah_k8s_reader_pod_manifest (const k8s_site_t *site, const char *agent_id, const char *secret)
{
    k8s_names_t n;
    ah_k8s_names (site->prefix, agent_id, &n);
    //  It only reads: the agent's account (its files, 0600 ones too, as
    //  their owner), no capability at all, nothing to escalate to, a
    //  read-only root and a read-only claim.
    json_t *sc = json_pack ("{s:i s:i s:b s:b s:b s:{s:[s]} s:{s:s}}",
        "runAsUser", K8S_READER_UID, "runAsGroup", K8S_READER_UID, "runAsNonRoot", 1,
        "allowPrivilegeEscalation", 0, "readOnlyRootFilesystem", 1, "capabilities", "drop", "ALL",
        "seccompProfile", "type", "RuntimeDefault");
    json_t *mounts = json_pack ("[{s:s s:s s:b} {s:s s:s s:b} {s:s s:s}]",
        "name", "home", "mountPath", "/home/agent", "readOnly", 1,
        "name", "boot", "mountPath", "/etc/agenthold", "readOnly", 1,
        "name", "tmp", "mountPath", "/tmp");
    json_t *reader = json_pack ("{s:s s:s s:s s:[s s] s:{s:{s:s s:s} s:{s:s s:s}} s:o s:o}",
        "name", "reader", "image", site->sandboxd_image, "imagePullPolicy", site->pull_policy,
        "command", "/sandboxd", "--read-only",
        "resources", "requests", "cpu", "10m", "memory", "32Mi", "limits", "cpu", "500m",
        "memory", "128Mi", "securityContext", sc, "volumeMounts", mounts);
    //  boot.json is for the reader's account to read (no root in this
    //  Pod): the reader token, good for this agent's reads alone.
    json_t *volumes = json_pack ("[{s:s s:{s:s s:b}} {s:s s:{s:s s:i s:[{s:s s:s s:i}]}}"
                                 " {s:s s:{s:s s:s}}]",
        "name", "home", "persistentVolumeClaim", "claimName", n.claim, "readOnly", 1,
        "name", "boot", "secret", "secretName", secret, "defaultMode", 0444,
        "items", "key", "boot.json", "path", "boot.json", "mode", 0444,
        "name", "tmp", "emptyDir", "medium", "Memory", "sizeLimit", "1Mi");
    json_t *pod_spec = json_pack ("{s:s s:b s:b s:i s:{s:{s:s}} s:[o] s:o}",
        "restartPolicy", "Never", "automountServiceAccountToken", 0, "enableServiceLinks", 0,
        "terminationGracePeriodSeconds", 1,
        "securityContext", "seccompProfile", "type", "RuntimeDefault",
        "containers", reader, "volumes", volumes);
    if (pod_spec && site->node_selector)
        json_object_set_new (pod_spec, "nodeSelector", s_label_map (site->node_selector));
    return json_pack ("{s:s s:s s:o s:o}", "apiVersion", "v1", "kind", "Pod",
                      "metadata", s_reader_meta (site, n.reader, agent_id), "spec", pod_spec);
}

json_t *ah_k8s_reader_secret_manifest (const k8s_site_t *site, const char *agent_id, const char *secret,
                                       const char *boot_json)
{
    return json_pack ("{s:s s:s s:o s:s s:b s:{s:s}}", "apiVersion", "v1", "kind", "Secret",
                      "metadata", s_reader_meta (site, secret, agent_id), "type", "Opaque",
                      "immutable", 1, "stringData", "boot.json", boot_json);
}

json_t *ah_k8s_policy_manifest (const k8s_site_t *site, const char *agent_id, const k8s_spec_t *spec)
{
    k8s_names_t n;
    ah_k8s_names (site->prefix, agent_id, &n);
    char tunnel [40];
    snprintf (tunnel, sizeof tunnel, "%s/32", site->tunnel_host);
    //  The tunnel, always; no ingress at all.
    json_t *egress = json_pack ("[{s:[{s:{s:s}}] s:[{s:s s:i}]}]",
        "to", "ipBlock", "cidr", tunnel, "ports", "protocol", "TCP", "port", site->tunnel_port);
    //  The server in the cluster: the tunnel_url is its Service's address,
    //  which the plugin translates to the server Pod's before the policy
    //  is matched; so its Pods, by label, on the port they listen on.
    if (site->tunnel_pods && site->tunnel_pod_port > 0)
        json_array_append_new (egress, json_pack ("{s:[{s:{s:o}}] s:[{s:s s:i}]}",
            "to", "podSelector", "matchLabels", s_label_map (site->tunnel_pods),
            "ports", "protocol", "TCP", "port", site->tunnel_pod_port));
    //  A runtime that needs a network gets no more: its way out is
    //  sandboxd's egress proxy over the tunnel (docs/egress.md).
    json_t *sel = json_pack ("{s:s s:s}", K8S_LABEL_AGENT, agent_id, K8S_LABEL_INSTALL, site->prefix);
    return json_pack ("{s:s s:s s:o s:{s:{s:o} s:[s s] s:[] s:o}}",
        "apiVersion", "networking.k8s.io/v1", "kind", "NetworkPolicy",
        "metadata", s_meta (site, n.policy, agent_id),
        "spec", "podSelector", "matchLabels", sel, "policyTypes", "Ingress", "Egress",
        "ingress", "egress", egress);
}

char *ah_k8s_boot_json (const char *agent_id, const char *token, const char *tunnel_url)
{
    json_t *j = json_pack ("{s:s s:s s:s}", "agent_id", agent_id, "token", token,
                           "tunnel_url", tunnel_url);
    char *text = j ? json_dumps (j, JSON_COMPACT) : NULL;
    json_decref (j);
    return text;
}

json_t *ah_k8s_secret_manifest (const k8s_site_t *site, const char *agent_id, const char *secret,
                                const char *boot_json, const char *briefing)
{
    json_t *data = json_pack ("{s:s}", "boot.json", boot_json);
    if (data && briefing)
        json_object_set_new (data, "briefing.md", json_string (briefing));
    return json_pack ("{s:s s:s s:o s:s s:b s:o}", "apiVersion", "v1", "kind", "Secret",
                      "metadata", s_meta (site, secret, agent_id), "type", "Opaque",
                      "immutable", 1, "stringData", data);
}

//  -------------------------------------------------------------------------
//  What the cluster says back

bool ah_k8s_deleting (const json_t *obj)
{
    return json_object_get (json_object_get (obj, "metadata"), "deletionTimestamp") != NULL;
}

void ah_k8s_pod_status (const json_t *pod, ah_sandbox_status_t *s)
{
    json_t *status = json_object_get (pod, "status");
    const char *phase = json_string_value (json_object_get (status, "phase"));
    const char *reason = json_string_value (json_object_get (status, "reason"));
    const char *node = json_string_value (json_object_get (json_object_get (pod, "spec"), "nodeName"));
    //  The sandbox container's exit, when it ended.
    int code = -1;
    const char *why = NULL;
    size_t i;
    json_t *cs;
    json_array_foreach (json_object_get (status, "containerStatuses"), i, cs) {
        json_t *term = json_object_get (json_object_get (cs, "state"), "terminated");
        if (term && json_is_integer (json_object_get (term, "exitCode"))) {
            code = (int) json_integer_value (json_object_get (term, "exitCode"));
            why = json_string_value (json_object_get (term, "reason"));
        }
    }
    if (ah_k8s_deleting (pod)) {
        s->running = false;
        s->exit_code = 0;               //  deleted: stopped by hand
        snprintf (s->detail, sizeof s->detail, "Pod terminating%s%.60s", node ? " on " : "",
                  node ? node : "");
        return;
    }
    if (phase && (strcmp (phase, "Running") == 0 || strcmp (phase, "Pending") == 0)) {
        s->running = true;
        snprintf (s->detail, sizeof s->detail, "%s%s%.80s", strcmp (phase, "Running") == 0
                  ? "running" : "pending", node ? " on " : "", node ? node : "");
        return;
    }
    s->running = false;
    s->exit_code = code >= 0 ? code : (phase && strcmp (phase, "Succeeded") == 0 ? 0 : -1);
    //  Failed for a reason of the cluster's (Evicted, a node lost): the
    //  agent's error says it, whatever the exit code.
    const char *msg = json_string_value (json_object_get (status, "message"));
    if (phase && strcmp (phase, "Failed") == 0 && reason)
        snprintf (s->reason, sizeof s->reason, "%.40s%s%.110s", reason, msg ? ": " : "", msg ? msg : "");
    snprintf (s->detail, sizeof s->detail, "%.20s (%d)%s%.60s%s%.40s", phase ? phase : "unknown",
              s->exit_code, reason || why ? ": " : "", reason ? reason : why ? why : "",
              node ? " on " : "", node ? node : "");
}

static const char *s_uid (const json_t *pod)
{
    const char *uid = json_string_value (json_object_get (json_object_get (pod, "metadata"), "uid"));
    return uid && *uid && strlen (uid) < K8S_MAX_NAME ? uid : NULL;
}

void ah_k8s_ended_note (json_t *ended, const json_t *pod)
{
    const char *uid = s_uid (pod);
    json_t *status = json_object_get (pod, "status");
    const char *phase = json_string_value (json_object_get (status, "phase"));
    if (!json_is_object (ended) || !uid || !phase || ah_k8s_deleting (pod)
    ||  (strcmp (phase, "Failed") != 0 && strcmp (phase, "Succeeded") != 0)
    ||  json_object_get (ended, uid))
        return;
    if (json_object_size (ended) >= K8S_ENDED_MAX)
        json_object_clear (ended);
    json_t *keep = json_object ();
    json_object_set_new (keep, "status", json_deep_copy (status));
    const char *node = json_string_value (json_object_get (json_object_get (pod, "spec"), "nodeName"));
    if (node)
        json_object_set_new (keep, "spec", json_pack ("{s:s}", "nodeName", node));
    json_object_set_new (ended, uid, keep);
}

void ah_k8s_ended_forget (json_t *ended, const json_t *pod)
{
    const char *uid = s_uid (pod);
    if (uid && json_is_object (ended))
        json_object_del (ended, uid);
}

const json_t *ah_k8s_ended_seen (const json_t *ended, const json_t *pod)
{
    const char *uid = s_uid (pod);
    return uid ? json_object_get (ended, uid) : NULL;
}

