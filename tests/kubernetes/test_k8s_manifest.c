/*  tests/kubernetes/test_k8s_manifest.c: what the kubernetes driver asks
    the cluster for, field by field (the Pod's security context, mounts,
    resources; the claim; the NetworkPolicy; the boot Secret), and the
    spec kept on the claim read back from hostile annotations.          */
#include "drivers/kubernetes/k8s_int.h"
#include "tests/common/check.h"

#include <stdlib.h>

static k8s_site_t s_site = {
    .prefix = "agenthold", .ns = "agents", .sandboxd_image = "agenthold/sandboxd:latest",
    .pull_policy = "Never", .node_selector = "disk=ssd,zone=a", .storage_class = "host-path",
    .home_size = "1Gi", .tmp_mb = 64, .tunnel_host = "10.0.0.5", .tunnel_port = 8090 };

#define ID "0123456789ab"

//  The string at a JSON path like "spec.containers.0.image".
static json_t *s_at (json_t *j, const char *path)
{
    char buf [256];
    snprintf (buf, sizeof buf, "%s", path);
    char *save = NULL;
    for (char *part = strtok_r (buf, ".", &save); part && j; part = strtok_r (NULL, ".", &save)) {
        if (json_is_array (j))
            j = json_array_get (j, (size_t) atoi (part));
        else
            j = json_object_get (j, part);
    }
    return j;
}
#define AT_STR(j, p) json_string_value (s_at (j, p))
#define AT_INT(j, p) json_integer_value (s_at (j, p))

static bool s_has (json_t *arr, const char *value)
{
    size_t i;
    json_t *v;
    json_array_foreach (arr, i, v)
        if (json_is_string (v) && strcmp (json_string_value (v), value) == 0)
            return true;
    return false;
}

static void s_spec (k8s_spec_t *spec, bool network)
{
    ah_config_t *c = ah_config_new_defaults ();
    const char *env [] = { "LANG=C.UTF-8", "PIP_USER=1" };
    ah_sandbox_spec_t in = { .agent_id = ID, .image = "agenthold/busybox:2", .cpus = 1.5,
                             .memory_mb = 256, .env = env, .n_env = 2, .needs_network = network };
    char *err = NULL;
    CHECK (ah_k8s_spec_from (c, &in, spec, &err) == 0);
    free (err);
    ah_config_destroy (&c);
}

static void s_test_pod (void)
{
    k8s_spec_t spec;
    s_spec (&spec, false);
    json_t *pod = ah_k8s_pod_manifest (&s_site, ID, &spec, "agenthold-boot-" ID "-0badcafe", true);
    CHECK (pod != NULL);
    CHECK_STR (AT_STR (pod, "kind"), "Pod");
    CHECK_STR (AT_STR (pod, "metadata.name"), "agenthold-" ID);
    CHECK_STR (AT_STR (pod, "metadata.namespace"), "agents");
    json_t *labels = s_at (pod, "metadata.labels");
    CHECK_STR (json_string_value (json_object_get (labels, "agenthold.io/agent")), ID);
    CHECK_STR (json_string_value (json_object_get (labels, "agenthold.io/installation")), "agenthold");
    CHECK_STR (json_string_value (json_object_get (labels, "app.kubernetes.io/managed-by")), "agenthold");
    CHECK_STR (AT_STR (pod, "spec.restartPolicy"), "Never");
    CHECK (json_is_false (s_at (pod, "spec.automountServiceAccountToken")));
    CHECK (json_is_false (s_at (pod, "spec.enableServiceLinks")));
    CHECK_STR (AT_STR (pod, "spec.hostname"), ID);
    CHECK_STR (AT_STR (pod, "spec.nodeSelector.disk"), "ssd");
    CHECK_STR (AT_STR (pod, "spec.nodeSelector.zone"), "a");
    //  The sandbox container: sandboxd is the entrypoint, from the volume.
    json_t *c = s_at (pod, "spec.containers.0");
    CHECK (json_array_size (s_at (pod, "spec.containers")) == 1);
    CHECK_STR (AT_STR (c, "image"), "agenthold/busybox:2");
    CHECK_STR (AT_STR (c, "imagePullPolicy"), "Never");
    CHECK_STR (AT_STR (c, "command.0"), "/opt/agenthold/sandboxd");
    CHECK_STR (AT_STR (c, "resources.limits.cpu"), "1500m");
    CHECK_STR (AT_STR (c, "resources.limits.memory"), "256Mi");
    CHECK_STR (AT_STR (c, "resources.requests.memory"), "256Mi");
    CHECK_STR (AT_STR (c, "resources.requests.cpu"), "150m");
    CHECK (AT_INT (c, "securityContext.runAsUser") == 0);
    CHECK (json_is_false (s_at (c, "securityContext.allowPrivilegeEscalation")));
    CHECK_STR (AT_STR (c, "securityContext.seccompProfile.type"), "RuntimeDefault");
    CHECK_STR (AT_STR (c, "securityContext.capabilities.drop.0"), "ALL");
    json_t *add = s_at (c, "securityContext.capabilities.add");
    CHECK (json_array_size (add) == 6);
    CHECK (s_has (add, "CHOWN") && s_has (add, "SETUID") && s_has (add, "SETGID"));
    CHECK (!s_has (add, "NET_ADMIN") && !s_has (add, "SYS_ADMIN"));
    CHECK (s_at (c, "securityContext.privileged") == NULL);
    //  Env: AGENTHOLD_USER first, then the runtime's.
    CHECK_STR (AT_STR (c, "env.0.name"), "AGENTHOLD_USER");
    CHECK_STR (AT_STR (c, "env.1.name"), "LANG");
    CHECK_STR (AT_STR (c, "env.1.value"), "C.UTF-8");
    CHECK_STR (AT_STR (c, "env.2.name"), "PIP_USER");
    //  Mounts: home, sandboxd read-only, boot read-only, /tmp.
    json_t *m = s_at (c, "volumeMounts");
    CHECK (json_array_size (m) == 4);
    CHECK_STR (AT_STR (m, "0.mountPath"), "/home/agent");
    CHECK_STR (AT_STR (m, "1.mountPath"), "/opt/agenthold");
    CHECK (json_is_true (s_at (m, "1.readOnly")));
    CHECK_STR (AT_STR (m, "2.mountPath"), "/etc/agenthold");
    CHECK (json_is_true (s_at (m, "2.readOnly")));
    CHECK_STR (AT_STR (m, "3.mountPath"), "/tmp");
    //  Volumes.
    json_t *v = s_at (pod, "spec.volumes");
    CHECK_STR (AT_STR (v, "0.persistentVolumeClaim.claimName"), "agenthold-home-" ID);
    CHECK (s_at (v, "1.emptyDir") != NULL);
    CHECK_STR (AT_STR (v, "2.secret.secretName"), "agenthold-boot-" ID "-0badcafe");
    CHECK (AT_INT (v, "2.secret.defaultMode") == 0400);
    CHECK_STR (AT_STR (v, "2.secret.items.0.key"), "boot.json");
    CHECK (AT_INT (v, "2.secret.items.0.mode") == 0400);
    CHECK_STR (AT_STR (v, "2.secret.items.1.key"), "briefing.md");
    CHECK (AT_INT (v, "2.secret.items.1.mode") == 0444);
    CHECK_STR (AT_STR (v, "3.emptyDir.medium"), "Memory");
    CHECK_STR (AT_STR (v, "3.emptyDir.sizeLimit"), "64Mi");
    //  The init container: the sandboxd image, as nobody, copying itself.
    json_t *init = s_at (pod, "spec.initContainers.0");
    CHECK_STR (AT_STR (init, "image"), "agenthold/sandboxd:latest");
    CHECK_STR (AT_STR (init, "command.0"), "/sandboxd");
    CHECK_STR (AT_STR (init, "command.1"), "--install");
    CHECK_STR (AT_STR (init, "command.2"), "/opt/agenthold");
    CHECK (AT_INT (init, "securityContext.runAsUser") == 65534);
    CHECK (json_is_true (s_at (init, "securityContext.runAsNonRoot")));
    CHECK_STR (AT_STR (init, "securityContext.capabilities.drop.0"), "ALL");
    CHECK (s_at (init, "securityContext.capabilities.add") == NULL);
    json_decref (pod);
    //  Without a briefing the Secret's item list has boot.json alone.
    pod = ah_k8s_pod_manifest (&s_site, ID, &spec, "s", false);
    CHECK (json_array_size (s_at (pod, "spec.volumes.2.secret.items")) == 1);
    json_decref (pod);
    //  No node selector configured: none in the Pod.
    k8s_site_t bare = s_site;
    bare.node_selector = NULL;
    pod = ah_k8s_pod_manifest (&bare, ID, &spec, "s", false);
    CHECK (s_at (pod, "spec.nodeSelector") == NULL);
    json_decref (pod);
    ah_k8s_spec_free (&spec);
}

static void s_test_claim_policy_secret (void)
{
    k8s_spec_t spec;
    s_spec (&spec, false);
    json_t *claim = ah_k8s_claim_manifest (&s_site, ID, &spec);
    CHECK_STR (AT_STR (claim, "kind"), "PersistentVolumeClaim");
    CHECK_STR (AT_STR (claim, "metadata.name"), "agenthold-home-" ID);
    CHECK_STR (AT_STR (claim, "spec.storageClassName"), "host-path");
    CHECK_STR (AT_STR (claim, "spec.resources.requests.storage"), "1Gi");
    CHECK_STR (AT_STR (claim, "spec.accessModes.0"), "ReadWriteOnce");
    const char *ann = json_string_value (json_object_get (s_at (claim, "metadata.annotations"),
                                                          K8S_SPEC_ANNOTATION));
    k8s_spec_t back;
    char *err = NULL;
    CHECK (ah_k8s_spec_from_json (ann, &back, &err) == 0);
    CHECK_STR (back.image, "agenthold/busybox:2");
    CHECK (back.cpus == 1.5 && back.memory_mb == 256 && !back.needs_network && back.n_env == 2);
    CHECK_STR (back.n_env == 2 ? back.env [1] : NULL, "PIP_USER=1");
    ah_k8s_spec_free (&back);
    free (err);
    json_decref (claim);
    k8s_site_t dflt = s_site;
    dflt.storage_class = NULL;
    claim = ah_k8s_claim_manifest (&dflt, ID, &spec);
    CHECK (s_at (claim, "spec.storageClassName") == NULL);
    json_decref (claim);

    //  Policy without a network: no ingress, egress to the tunnel alone.
    json_t *pol = ah_k8s_policy_manifest (&s_site, ID, &spec);
    CHECK_STR (AT_STR (pol, "kind"), "NetworkPolicy");
    CHECK_STR (json_string_value (json_object_get (s_at (pol, "spec.podSelector.matchLabels"),
                                                   "agenthold.io/agent")), ID);
    CHECK (s_has (s_at (pol, "spec.policyTypes"), "Ingress") && s_has (s_at (pol, "spec.policyTypes"), "Egress"));
    CHECK (json_array_size (s_at (pol, "spec.ingress")) == 0);
    CHECK (json_array_size (s_at (pol, "spec.egress")) == 1);
    CHECK_STR (AT_STR (pol, "spec.egress.0.to.0.ipBlock.cidr"), "10.0.0.5/32");
    CHECK (AT_INT (pol, "spec.egress.0.ports.0.port") == 8090);
    CHECK_STR (AT_STR (pol, "spec.egress.0.ports.0.protocol"), "TCP");
    json_decref (pol);
    ah_k8s_spec_free (&spec);
    //  With a network: still the tunnel alone (the way out is sandboxd's
    //  egress proxy over it), which the Pod's sandboxd is told to run.
    s_spec (&spec, true);
    pol = ah_k8s_policy_manifest (&s_site, ID, &spec);
    CHECK (json_array_size (s_at (pol, "spec.egress")) == 1);
    CHECK_STR (AT_STR (pol, "spec.egress.0.to.0.ipBlock.cidr"), "10.0.0.5/32");
    CHECK (AT_INT (pol, "spec.egress.0.ports.0.port") == 8090);
    json_decref (pol);
    json_t *pod = ah_k8s_pod_manifest (&s_site, ID, &spec, "s", false);
    json_t *net_c = s_at (pod, "spec.containers.0");
    CHECK_STR (AT_STR (net_c, "env.1.name"), "AGENTHOLD_EGRESS_PORT");
    CHECK_STR (AT_STR (net_c, "env.1.value"), "3128");
    CHECK_STR (AT_STR (net_c, "env.2.name"), "LANG");
    json_decref (pod);
    ah_k8s_spec_free (&spec);
    //  The server in the cluster (tunnel_pods): its Pods by label, on the
    //  port they listen on, besides the tunnel's address.
    s_spec (&spec, false);
    k8s_site_t inside = s_site;
    inside.tunnel_pods = "app.kubernetes.io/name=agenthold,app.kubernetes.io/component=server";
    inside.tunnel_pod_port = 8091;
    pol = ah_k8s_policy_manifest (&inside, ID, &spec);
    CHECK (json_array_size (s_at (pol, "spec.egress")) == 2);
    CHECK_STR (AT_STR (pol, "spec.egress.0.to.0.ipBlock.cidr"), "10.0.0.5/32");
    CHECK_STR (json_string_value (json_object_get (s_at (pol, "spec.egress.1.to.0.podSelector.matchLabels"),
                                                   "app.kubernetes.io/component")), "server");
    CHECK (json_object_size (s_at (pol, "spec.egress.1.to.0.podSelector.matchLabels")) == 2);
    CHECK (s_at (pol, "spec.egress.1.to.0.namespaceSelector") == NULL);
    CHECK (AT_INT (pol, "spec.egress.1.ports.0.port") == 8091);
    json_decref (pol);
    ah_k8s_spec_free (&spec);

    //  The boot Secret: immutable, boot.json as the sandbox reads it.
    char *boot = ah_k8s_boot_json (ID, "tok\"en", "ws://10.0.0.5:8090/tunnel");
    json_t *b = boot ? json_loads (boot, 0, NULL) : NULL;
    CHECK_STR (AT_STR (b, "token"), "tok\"en");
    CHECK_STR (AT_STR (b, "tunnel_url"), "ws://10.0.0.5:8090/tunnel");
    json_t *sec = ah_k8s_secret_manifest (&s_site, ID, "agenthold-boot-" ID "-0badcafe", boot, "# brief");
    CHECK_STR (AT_STR (sec, "metadata.name"), "agenthold-boot-" ID "-0badcafe");
    CHECK_STR (json_string_value (json_object_get (s_at (sec, "metadata.labels"), "agenthold.io/agent")), ID);
    CHECK (json_is_true (s_at (sec, "immutable")));
    CHECK_STR (json_string_value (json_object_get (s_at (sec, "stringData"), "boot.json")), boot);
    CHECK_STR (json_string_value (json_object_get (s_at (sec, "stringData"), "briefing.md")), "# brief");
    json_decref (sec);
    //  A briefing that is not UTF-8 makes no Secret (the caller says so).
    sec = ah_k8s_secret_manifest (&s_site, ID, "x", boot, "\xff\xfe");
    CHECK (sec == NULL || json_object_get (s_at (sec, "stringData"), "briefing.md") == NULL);
    json_decref (sec);
    json_decref (b);
    free (boot);
}

//  Annotations are the cluster's: anyone who can edit the claim wrote them.
static void s_test_hostile_spec (void)
{
    const char *bad [] = {
        NULL, "", "not json", "[]", "{}", "{\"image\": 5}",
        "{\"image\":\"x\",\"cpus\":1,\"memory_mb\":64,\"needs_network\":false}",
        "{\"image\":\"../../etc\",\"cpus\":1,\"memory_mb\":64,\"needs_network\":false,\"env\":[]}",
        "{\"image\":\"a b\",\"cpus\":1,\"memory_mb\":64,\"needs_network\":false,\"env\":[]}",
        "{\"image\":\"busybox\",\"cpus\":-1,\"memory_mb\":64,\"needs_network\":false,\"env\":[]}",
        "{\"image\":\"busybox\",\"cpus\":1e300,\"memory_mb\":64,\"needs_network\":false,\"env\":[]}",
        "{\"image\":\"busybox\",\"cpus\":1,\"memory_mb\":1,\"needs_network\":false,\"env\":[]}",
        "{\"image\":\"busybox\",\"cpus\":1,\"memory_mb\":64,\"needs_network\":\"yes\",\"env\":[]}",
        "{\"image\":\"busybox\",\"cpus\":1,\"memory_mb\":64,\"needs_network\":false,\"env\":[1]}",
        "{\"image\":\"busybox\",\"cpus\":1,\"memory_mb\":64,\"needs_network\":false,\"env\":[\"NOEQUALS\"]}",
        "{\"image\":\"busybox\",\"cpus\":1,\"memory_mb\":64,\"needs_network\":false,\"env\":[\"A B=1\"]}",
        "{\"image\":\"busybox\",\"cpus\":1,\"memory_mb\":64,\"needs_network\":false,\"env\":[\"=x\"]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        k8s_spec_t spec;
        char *err = NULL;
        int rc = ah_k8s_spec_from_json (bad [i], &spec, &err);
        if (rc == 0)
            fprintf (stderr, "  accepted hostile spec %zu: %s\n", i, bad [i] ? bad [i] : "(null)");
        CHECK (rc == -1);
        CHECK (err != NULL && *err);
        free (err);
    }
    //  Too many variables.
    json_t *env = json_array ();
    for (int i = 0; i < 300; i++) {
        char e [32];
        snprintf (e, sizeof e, "V%d=1", i);
        json_array_append_new (env, json_string (e));
    }
    json_t *j = json_pack ("{s:s s:i s:i s:b s:o}", "image", "busybox", "cpus", 1, "memory_mb", 64,
                           "needs_network", 0, "env", env);
    char *text = json_dumps (j, 0);
    k8s_spec_t spec;
    char *err = NULL;
    CHECK (ah_k8s_spec_from_json (text, &spec, &err) == -1);
    CHECK (err && strstr (err, "more than"));
    free (err);
    free (text);
    json_decref (j);
    //  The limits of the configuration apply to what the driver is given.
    ah_config_t *c = ah_config_new_defaults ();
    ah_sandbox_spec_t in = { .agent_id = ID, .image = "busybox", .cpus = 500, .memory_mb = 1 << 30 };
    err = NULL;
    CHECK (ah_k8s_spec_from (c, &in, &spec, &err) == 0);
    CHECK (spec.cpus == c->max_cpus && spec.memory_mb == c->max_memory_mb);
    ah_k8s_spec_free (&spec);
    free (err);
    //  ... and the bounds every client is held to (common/bounds.h): no
    //  CPU limit that rounds to 0 millicores, no memory Docker refuses.
    static const struct { double cpus; int64_t memory_mb; } tiny [] = {
        { 1e-12, 256 }, { 5e-324, 256 }, { 0.0004, 256 }, { 0.015, 256 }, { 1, 5 },
    };
    for (size_t i = 0; i < sizeof tiny / sizeof tiny [0]; i++) {
        ah_sandbox_spec_t t = { .agent_id = ID, .image = "busybox", .cpus = tiny [i].cpus,
                                .memory_mb = tiny [i].memory_mb };
        err = NULL;
        CHECK (ah_k8s_spec_from (c, &t, &spec, &err) == -1);
        CHECK (err && strstr (err, "out of range") && strstr (err, "must be"));
        free (err);
    }
    ah_config_destroy (&c);
}

//  What inspect makes of a Pod the API server returns (hostile JSON).
static void s_status (const char *pod_json, ah_sandbox_status_t *st)
{
    memset (st, 0, sizeof *st);
    st->exit_code = -1;
    json_t *pod = json_loads (pod_json, 0, NULL);
    ah_k8s_pod_status (pod, st);
    json_decref (pod);
}

static void s_test_pod_status (void)
{
    ah_sandbox_status_t st;
    s_status ("{\"spec\":{\"nodeName\":\"n1\"},\"status\":{\"phase\":\"Running\"}}", &st);
    CHECK (st.running && !st.reason [0]);
    CHECK_STR (st.detail, "running on n1");
    s_status ("{\"status\":{\"phase\":\"Pending\"}}", &st);
    CHECK (st.running);
    //  Being deleted (kubectl delete): a stop by hand.
    s_status ("{\"metadata\":{\"deletionTimestamp\":\"x\"},\"status\":{\"phase\":\"Running\"}}", &st);
    CHECK (!st.running && st.exit_code == 0 && !st.reason [0]);
    //  Ended by itself: its exit code, no reason.
    s_status ("{\"status\":{\"phase\":\"Failed\",\"containerStatuses\":[{\"state\":{\"terminated\":"
              "{\"exitCode\":3,\"reason\":\"Error\"}}}]}}", &st);
    CHECK (!st.running && st.exit_code == 3 && !st.reason [0]);
    s_status ("{\"status\":{\"phase\":\"Succeeded\"}}", &st);
    CHECK (!st.running && st.exit_code == 0);
    //  Evicted: the cluster's reason, whatever the exit code.
    s_status ("{\"spec\":{\"nodeName\":\"n1\"},\"status\":{\"phase\":\"Failed\",\"reason\":\"Evicted\","
              "\"message\":\"The node was low on resource: memory.\",\"containerStatuses\":[{\"state\":"
              "{\"terminated\":{\"exitCode\":137}}}]}}", &st);
    CHECK (!st.running && st.exit_code == 137);
    CHECK_STR (st.reason, "Evicted: The node was low on resource: memory.");
    CHECK (strstr (st.detail, "Evicted") && strstr (st.detail, "n1"));
    //  Hostile: wrong types, huge strings, nothing at all.
    const char *bad [] = { "null", "[]", "{}", "{\"status\":5}", "{\"status\":{\"phase\":7}}",
                           "{\"status\":{\"containerStatuses\":{\"a\":1}}}",
                           "{\"status\":{\"containerStatuses\":[5,{\"state\":[]}]}}" };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        s_status (bad [i], &st);
        CHECK (!st.running && !st.reason [0]);
    }
    char *big = malloc (20000);
    if (big) {
        memset (big, 'x', 19999);
        big [19999] = 0;
        char *j = ah_strf ("{\"spec\":{\"nodeName\":\"%s\"},\"status\":{\"phase\":\"Failed\","
                           "\"reason\":\"%s\",\"message\":\"%s\"}}", big, big, big);
        s_status (j, &st);
        CHECK (strlen (st.reason) < sizeof st.reason && strlen (st.detail) < sizeof st.detail);
        free (j);
        free (big);
    }
}

//  The reader of a sleeping agent's home: the sandboxd image in
//  --read-only mode, unprivileged, every capability dropped, a read-only
//  root and claim, no token to the cluster, the agent's policy labels
//  and a role the watch leaves alone; its Secret holds boot.json alone.
static void s_test_reader (void)
{
    json_t *pod = ah_k8s_reader_pod_manifest (&s_site, ID, "agenthold-read-" ID "-0badcafe");
    CHECK (pod != NULL);
    CHECK_STR (AT_STR (pod, "kind"), "Pod");
    CHECK_STR (AT_STR (pod, "metadata.name"), "agenthold-read-" ID);
    CHECK_STR (AT_STR (pod, "metadata.namespace"), "agents");
    json_t *labels = s_at (pod, "metadata.labels");
    //  The agent's NetworkPolicy selects it (these two labels): the tunnel alone.
    json_t *policy = ah_k8s_policy_manifest (&s_site, ID, &(k8s_spec_t) { .needs_network = false });
    json_t *policy_sel = s_at (policy, "spec.podSelector.matchLabels");
    const char *key;
    json_t *value;
    json_object_foreach (policy_sel, key, value)
        CHECK_STR (json_string_value (json_object_get (labels, key)), json_string_value (value));
    CHECK (json_object_size (policy_sel) == 2);
    json_decref (policy);
    CHECK_STR (json_string_value (json_object_get (labels, "agenthold.io/role")), "reader");
    CHECK_STR (AT_STR (pod, "spec.restartPolicy"), "Never");
    CHECK (json_is_false (s_at (pod, "spec.automountServiceAccountToken")));
    CHECK (json_is_false (s_at (pod, "spec.enableServiceLinks")));
    CHECK (s_at (pod, "spec.hostname") == NULL);
    CHECK (s_at (pod, "spec.initContainers") == NULL);
    CHECK_STR (AT_STR (pod, "spec.nodeSelector.disk"), "ssd");
    CHECK (json_array_size (s_at (pod, "spec.containers")) == 1);
    json_t *c = s_at (pod, "spec.containers.0");
    CHECK_STR (AT_STR (c, "image"), "agenthold/sandboxd:latest");
    CHECK_STR (AT_STR (c, "imagePullPolicy"), "Never");
    CHECK_STR (AT_STR (c, "command.0"), "/sandboxd");
    CHECK_STR (AT_STR (c, "command.1"), "--read-only");
    CHECK (json_array_size (s_at (c, "command")) == 2);
    CHECK (s_at (c, "env") == NULL);
    CHECK_STR (AT_STR (c, "resources.limits.memory"), "128Mi");
    json_t *sc = s_at (c, "securityContext");
    CHECK (AT_INT (sc, "runAsUser") == 10001 && AT_INT (sc, "runAsGroup") == 10001);
    CHECK (json_is_true (s_at (sc, "runAsNonRoot")));
    CHECK (json_is_false (s_at (sc, "allowPrivilegeEscalation")));
    CHECK (json_is_true (s_at (sc, "readOnlyRootFilesystem")));
    CHECK_STR (AT_STR (sc, "capabilities.drop.0"), "ALL");
    CHECK (json_array_size (s_at (sc, "capabilities.drop")) == 1);
    CHECK (s_at (sc, "capabilities.add") == NULL);
    CHECK (s_at (sc, "privileged") == NULL);
    CHECK_STR (AT_STR (sc, "seccompProfile.type"), "RuntimeDefault");
    json_t *m = s_at (c, "volumeMounts");
    CHECK (json_array_size (m) == 3);
    CHECK_STR (AT_STR (m, "0.mountPath"), "/home/agent");
    CHECK (json_is_true (s_at (m, "0.readOnly")));
    CHECK_STR (AT_STR (m, "1.mountPath"), "/etc/agenthold");
    CHECK (json_is_true (s_at (m, "1.readOnly")));
    CHECK_STR (AT_STR (m, "2.mountPath"), "/tmp");
    json_t *v = s_at (pod, "spec.volumes");
    CHECK_STR (AT_STR (v, "0.persistentVolumeClaim.claimName"), "agenthold-home-" ID);
    CHECK (json_is_true (s_at (v, "0.persistentVolumeClaim.readOnly")));
    CHECK_STR (AT_STR (v, "1.secret.secretName"), "agenthold-read-" ID "-0badcafe");
    CHECK_STR (AT_STR (v, "1.secret.items.0.key"), "boot.json");
    CHECK (json_array_size (s_at (v, "1.secret.items")) == 1);
    CHECK (AT_INT (v, "1.secret.items.0.mode") == 0444);
    CHECK_STR (AT_STR (v, "2.emptyDir.medium"), "Memory");
    json_decref (pod);

    char *boot = ah_k8s_boot_json (ID, "rtok", "ws://10.0.0.5:8090/tunnel");
    json_t *secret = ah_k8s_reader_secret_manifest (&s_site, ID, "agenthold-read-" ID "-0badcafe", boot);
    free (boot);
    CHECK_STR (AT_STR (secret, "kind"), "Secret");
    CHECK (json_is_true (s_at (secret, "immutable")));
    CHECK_STR (json_string_value (json_object_get (s_at (secret, "metadata.labels"), "agenthold.io/role")),
               "reader");
    CHECK_STR (json_string_value (json_object_get (s_at (secret, "metadata.labels"), "agenthold.io/agent")), ID);
    CHECK (json_object_size (s_at (secret, "stringData")) == 1);
    json_t *card = json_loads (json_string_value (json_object_get (s_at (secret, "stringData"), "boot.json")), 0, NULL);
    CHECK_STR (json_string_value (json_object_get (card, "token")), "rtok");
    CHECK_STR (json_string_value (json_object_get (card, "agent_id")), ID);
    json_decref (card);
    json_decref (secret);

    k8s_names_t n;
    ah_k8s_names ("agenthold", ID, &n);
    CHECK_STR (n.reader, "agenthold-read-" ID);
}

//  A Pod's end as the watch's event carried it stands: the kubelet
//  rewriting the status (Running again) does not undo it for that Pod.
static void s_test_ended (void)
{
    json_t *ended = json_object ();
    json_t *evicted = json_loads ("{\"metadata\":{\"uid\":\"u1\"},\"spec\":{\"nodeName\":\"n1\"},"
                                  "\"status\":{\"phase\":\"Failed\",\"reason\":\"Evicted\","
                                  "\"message\":\"The node was low on resource: memory.\"}}", 0, NULL);
    json_t *again = json_loads ("{\"metadata\":{\"uid\":\"u1\"},\"status\":{\"phase\":\"Running\"}}",
                                0, NULL);
    json_t *other = json_loads ("{\"metadata\":{\"uid\":\"u2\"},\"status\":{\"phase\":\"Running\"}}",
                                0, NULL);
    CHECK (ah_k8s_ended_seen (ended, again) == NULL);
    ah_k8s_ended_note (ended, again);               //  running: nothing to note
    CHECK (json_object_size (ended) == 0);
    ah_k8s_ended_note (ended, evicted);
    const json_t *seen = ah_k8s_ended_seen (ended, again);
    CHECK (seen != NULL);
    ah_sandbox_status_t st;
    memset (&st, 0, sizeof st);
    st.exit_code = -1;
    ah_k8s_pod_status (seen, &st);
    CHECK (!st.running);
    CHECK_STR (st.reason, "Evicted: The node was low on resource: memory.");
    CHECK (strstr (st.detail, "n1") != NULL);
    CHECK (ah_k8s_ended_seen (ended, other) == NULL);
    //  The first end stays; a deleted Pod is forgotten.
    json_t *later = json_loads ("{\"metadata\":{\"uid\":\"u1\"},\"status\":{\"phase\":\"Failed\"}}",
                                0, NULL);
    ah_k8s_ended_note (ended, later);
    CHECK (json_object_get (json_object_get (ah_k8s_ended_seen (ended, again), "status"), "reason"));
    ah_k8s_ended_forget (ended, again);
    CHECK (ah_k8s_ended_seen (ended, again) == NULL);
    //  Hostile: no uid, a uid too long, no status, being deleted.
    const char *bad [] = { "null", "{}", "{\"status\":{\"phase\":\"Failed\"}}",
                           "{\"metadata\":{\"uid\":7},\"status\":{\"phase\":\"Failed\"}}",
                           "{\"metadata\":{\"uid\":\"\"},\"status\":{\"phase\":\"Failed\"}}",
                           "{\"metadata\":{\"uid\":\"u3\"}}",
                           "{\"metadata\":{\"uid\":\"u3\"},\"status\":{\"phase\":[]}}",
                           "{\"metadata\":{\"uid\":\"u3\",\"deletionTimestamp\":\"x\"},"
                           "\"status\":{\"phase\":\"Failed\"}}",
                           "{\"metadata\":{\"uid\":\"0123456789012345678901234567890123456789"
                           "012345678901234567890123456789\"},\"status\":{\"phase\":\"Failed\"}}" };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        json_t *pod = json_loads (bad [i], JSON_DECODE_ANY, NULL);
        ah_k8s_ended_note (ended, pod);
        CHECK (ah_k8s_ended_seen (ended, pod) == NULL);
        ah_k8s_ended_forget (ended, pod);
        json_decref (pod);
    }
    CHECK (json_object_size (ended) == 0);
    //  Bounded: past K8S_ENDED_MAX all is forgotten, the new one kept.
    for (int i = 0; i <= K8S_ENDED_MAX; i++) {
        char uid [32];
        snprintf (uid, sizeof uid, "n%d", i);
        json_t *pod = json_pack ("{s:{s:s} s:{s:s}}", "metadata", "uid", uid, "status", "phase", "Succeeded");
        ah_k8s_ended_note (ended, pod);
        json_decref (pod);
    }
    CHECK (json_object_size (ended) == 1);
    json_decref (evicted);
    json_decref (again);
    json_decref (other);
    json_decref (later);
    json_decref (ended);
}

int main (void)
{
    s_test_reader ();
    s_test_pod_status ();
    s_test_ended ();
    s_test_pod ();
    s_test_claim_policy_secret ();
    s_test_hostile_spec ();
    return CHECK_DONE ();
}
