#!/usr/bin/python3
"""tests/kubernetes/incluster_k8s.py (ctest k8s.inCluster): the server in
the cluster, as docs/kubernetes.md tells an operator to run it.

deploy/kubernetes/ (namespace.yaml, rbac.yaml, service.yaml, server.yaml) is applied to
the test cluster as shipped, with only what an operator fills in changed:
the namespace (the run's own), the images' tags, the tunnel's address (the
Service's ClusterIP, read after applying the Service, as the manifest
says), the home size, and the sandboxes' default CPUs and memory (a small
node). The server image is made by scripts/server-image from this build
and imported; the server uses its Pod's service-account credentials and
nothing else: the Role it gets is rbac.yaml's, which must be exactly the
table in docs/kubernetes.md ("RBAC: the Role the server needs").

Then, through the Service's ClusterIP (the node is this machine): create
an agent with the shipped busybox runtime; its NetworkPolicy lets it reach
the server's Pods (tunnel_pods) and its sandboxd's hello comes through the
Service; exec with exit codes; a file written and read back (sha256);
sleep (no Pod, the claim kept), a sleeping agent's file read through its
reader Pod (sha256), which neither wakes it nor changes its state; wake with the
home intact; destroy, and nothing of the agent is left in the namespace
(only the server's own objects). The server's log has no refusal from the
API server. Everything is deleted at the end, also on failure.

The test cluster has no kube-proxy: the test puts in the translation
kube-proxy would make for the two Services involved (the API server's
`kubernetes` Service, which in-cluster credentials name, and the
server's), as DNAT rules in a chain of its own (AGENTHOLD-K8S-SVC<n>, nat
PREROUTING and OUTPUT), removed at the end (and by tests/k8s/down). The
test cluster's host-path volumes ignore a Pod's fsGroup, which a real
volume plugin applies: the test gives the data claim's directory to the
server's user (10000), as fsGroup would.

usage: incluster_k8s.py AGENTHOLD_BINARY. Exit 77 (SKIPPED, loudly) when no
test cluster can come up. Ports: none on the host."""
import json
import os
import subprocess
import sys
import time

import yaml

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahk8s import Harness, kjson, kubectl, RUNTIME, SANDBOXD_IMAGE, SRC  # noqa: E402
import ahserver  # noqa: E402

SERVER_IMAGE = "agenthold/server:k8stest"
SERVER_UID = 10000                      # server.yaml's runAsUser, scripts/server-image's user
SERVER_LABELS = "app.kubernetes.io/name=agenthold,app.kubernetes.io/component=server"
h = Harness("k8sincluster", sys.argv[1])
h.server_image = SERVER_IMAGE
CHAIN = "AGENTHOLD-K8S-SVC%d" % (os.getpid() % 100000)


def doc_role():
    """The Role as docs/kubernetes.md's table lists it: (group, resource, verbs)."""
    with open(os.path.join(SRC, "docs", "kubernetes.md")) as f:
        text = f.read()
    h.check("## RBAC: the Role the server needs" in text, "docs/kubernetes.md has its RBAC section")
    section = text.split("## RBAC: the Role the server needs", 1)[1].split("\n## ", 1)[0]
    rules = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`") and cells[1].startswith("`"):
            rules.append((cells[0].strip("`").strip('"'), cells[1].strip("`"),
                          tuple(sorted(v.strip() for v in cells[2].split(",")))))
    return sorted(rules)


def manifest_role(role):
    return sorted((g, r, tuple(sorted(rule["verbs"])))
                  for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"])


def load_manifests():
    objs = []
    names = sorted(os.listdir(os.path.join(SRC, "deploy", "kubernetes")))
    h.check(names == ["namespace.yaml", "rbac.yaml", "server.yaml", "service.yaml"],
            "deploy/kubernetes/ holds the four manifests this test applies: %r" % names)
    for name in names:
        with open(os.path.join(SRC, "deploy", "kubernetes", name)) as f:
            objs += [d for d in yaml.safe_load_all(f) if d]
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def localize(objs):
    """What an operator fills in, and the run's namespace."""
    for (kind, _), o in objs.items():
        if kind == "Namespace":
            o["metadata"]["name"] = h.ns
        else:
            o["metadata"]["namespace"] = h.ns
        for s in o.get("subjects", []):
            s["namespace"] = h.ns
    dep = objs[("Deployment", "agenthold")]
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    h.check(not any(p.get("hostPort") for p in c["ports"]) and not pod.get("hostNetwork"),
            "the server's Pod asks for no host port or network (Pod Security baseline refuses them)")
    h.check(pod["securityContext"]["runAsUser"] == SERVER_UID and c["securityContext"]["capabilities"]["drop"]
            == ["ALL"], "the server runs as %d with every capability dropped" % SERVER_UID)
    h.check(pod.get("enableServiceLinks") is False, "no service links (AGENTHOLD_SERVICE_HOST would stop the server)")
    c["image"] = SERVER_IMAGE
    labels = dep["spec"]["template"]["metadata"]["labels"]
    h.check(labels == dict(kv.split("=") for kv in SERVER_LABELS.split(",")),
            "the server Pod's labels: %r" % labels)


def config_for(cm, tunnel_ip):
    cfg = yaml.safe_load(cm["data"]["agenthold.yaml"])
    k = cfg["sandbox"]["kubernetes"]
    h.check(k["kubeconfig"] == "in-cluster", "the shipped configuration uses the Pod's service account")
    h.check(k["tunnel_pods"] == SERVER_LABELS, "tunnel_pods names the server's Pods: %r" % k.get("tunnel_pods"))
    h.check("TUNNEL_IP" in k["tunnel_url"], "tunnel_url is the operator's to fill in: %r" % k["tunnel_url"])
    k["tunnel_url"] = k["tunnel_url"].replace("TUNNEL_IP", tunnel_ip)
    k["namespace"] = h.ns
    k["sandboxd_image"] = SANDBOXD_IMAGE
    k["home_size"] = "1Gi"
    cfg["sandbox"]["default_cpus"] = 0.5
    cfg["sandbox"]["default_memory_mb"] = 128
    cfg["sandbox"].setdefault("docker", {})["name_prefix"] = h.prefix
    cm["data"]["agenthold.yaml"] = yaml.safe_dump(cfg)
    return cfg


def apply(o):
    kubectl("apply", "-f", "-", stdin=json.dumps(o))


# -- kube-proxy's part, for the two Services --------------------------------
def nat(*args, check=True):
    p = subprocess.run(["iptables", "-w", "-t", "nat"] + list(args), capture_output=True, text=True)
    if check and p.returncode != 0:
        raise h.fail("iptables -t nat %s: %s" % (" ".join(args), p.stderr.strip()))


def nat_setup():
    nat("-N", CHAIN)
    for hook in ("PREROUTING", "OUTPUT"):
        nat("-I", hook, "1", "-m", "comment", "--comment", "agenthold-k8s", "-j", CHAIN)


def nat_service(ip, port, to_ip, to_port):
    nat("-A", CHAIN, "-d", ip + "/32", "-p", "tcp", "--dport", str(port), "-j", "DNAT",
        "--to-destination", "%s:%d" % (to_ip, to_port))


def nat_teardown():
    for hook in ("PREROUTING", "OUTPUT"):
        nat("-D", hook, "-m", "comment", "--comment", "agenthold-k8s", "-j", CHAIN, check=False)
    nat("-F", CHAIN, check=False)
    nat("-X", CHAIN, check=False)


def api_server_service():
    svc = kjson("get", "service", "kubernetes", ns="default")
    ep = kjson("get", "endpoints", "kubernetes", ns="default")
    h.check(svc and ep and ep.get("subsets"), "the API server's Service and endpoints")
    sub = ep["subsets"][0]
    nat_service(svc["spec"]["clusterIP"], svc["spec"]["ports"][0]["port"],
                sub["addresses"][0]["ip"], sub["ports"][0]["port"])


# -- the run ------------------------------------------------------------------
def server_pod():
    j = kjson("get", "pods", "-l", SERVER_LABELS, ns=h.ns) or {"items": []}
    return j["items"][0] if j["items"] else None


def ready(pod):
    return pod and any(c["type"] == "Ready" and c["status"] == "True"
                       for c in pod.get("status", {}).get("conditions", []))


def server_logs():
    return kubectl("logs", "deployment/agenthold", ns=h.ns, check=False, timeout=30).stdout


def agent_objects():
    j = kjson("get", "pods,pvc,secrets,networkpolicies", "-l", "agenthold.io/installation=" + h.prefix,
              ns=h.ns) or {"items": []}
    return [i["kind"] + "/" + i["metadata"]["name"] for i in j["items"]]


def sh(name, script):
    return h.sh(name, script, timeout=120)


def scenario():
    objs = load_manifests()
    role = objs[("Role", "agenthold")]
    h.check(doc_role() == manifest_role(role), "rbac.yaml's Role is docs/kubernetes.md's table:\n%r\n%r"
            % (doc_role(), manifest_role(role)))
    localize(objs)
    nat_setup()
    try:
        deploy(objs)
        drive()
    except Exception:
        sys.stderr.write("---- the server's Pod ----\n" + kubectl(
            "describe", "pods", "-l", SERVER_LABELS, ns=h.ns, check=False).stdout[-3000:])
        sys.stderr.write("---- its log ----\n" + server_logs()[-6000:])
        raise
    finally:
        nat_teardown()


def deploy(objs):
    api_server_service()
    for key in (("Namespace", "agenthold"), ("ServiceAccount", "agenthold"), ("Role", "agenthold"),
                ("RoleBinding", "agenthold"), ("Service", "agenthold")):
        apply(objs[key])
    ns = kjson("get", "namespace", h.ns)
    h.check(ns["metadata"]["labels"].get("pod-security.kubernetes.io/enforce") == "baseline",
            "the namespace enforces Pod Security baseline")
    svc = kjson("get", "service", "agenthold", ns=h.ns)
    svc_ip = svc["spec"]["clusterIP"]
    print("the server's Service: %s" % svc_ip)
    cfg = config_for(objs[("ConfigMap", "agenthold-config")], svc_ip)
    apply(objs[("ConfigMap", "agenthold-config")])
    apply(objs[("PersistentVolumeClaim", "agenthold-data")])
    pvc = h.wait_for("the data claim bound", lambda: (lambda c: c if c and c["status"].get("phase") == "Bound"
                                                      else None)(h.get("pvc", "agenthold-data")), 60)
    pv = kjson("get", "pv", pvc["spec"]["volumeName"])
    data = pv["spec"]["hostPath"]["path"]
    # What fsGroup would do on a volume plugin that applies it.
    os.makedirs(data, exist_ok=True)
    os.chown(data, SERVER_UID, SERVER_UID)
    os.chmod(data, 0o700)
    t0 = time.time()
    apply(objs[("Deployment", "agenthold")])
    pod = h.wait_for("the server's Pod ready", lambda: (lambda p: p if ready(p) else None)(server_pod()), 180)
    print("the server's Pod %s ready in %.1f s at %s on %s" % (pod["metadata"]["name"], time.time() - t0,
                                                              pod["status"]["podIP"], pod["spec"]["nodeName"]))
    h.check(pod["spec"]["serviceAccountName"] == "agenthold", "the Pod runs as the agenthold service account")
    for port in svc["spec"]["ports"]:
        nat_service(svc_ip, port["port"], pod["status"]["podIP"],
                    int(cfg["sandbox"]["tunnel_listen"].rsplit(":", 1)[1]) if port["name"] == "tunnel"
                    else int(cfg["server"]["listen"].rsplit(":", 1)[1]))
    h.url = "http://%s:%d" % (svc_ip, [p["port"] for p in svc["spec"]["ports"] if p["name"] == "api"][0])
    h.data = data                       # admin.token is there


def drive():
    agents = h.cli("ls")
    h.check(isinstance(agents, (list, dict)), "the API answers through the Service: %r" % agents)
    t0 = time.time()
    a = h.cli("create", "alice", "--runtime", RUNTIME)
    h.check(a["state"] == "running", "create waits for sandboxd's hello through the Service: %r (%s)"
            % (a["state"], a.get("error")))
    print("create -> running in %.1f s" % (time.time() - t0))
    aid = a["id"]
    pol = h.get("networkpolicy", "%s-%s" % (h.prefix, aid))
    peers = [r for r in pol["spec"]["egress"] if r.get("to", [{}])[0].get("podSelector")]
    h.check(len(peers) == 1 and peers[0]["to"][0]["podSelector"]["matchLabels"] == dict(
        kv.split("=") for kv in SERVER_LABELS.split(",")) and peers[0]["ports"][0]["port"] == 8090,
        "the sandbox's policy lets it reach the server's Pods on the tunnel's port: %r" % pol["spec"]["egress"])

    for want in (0, 3, 42):
        rc, _ = sh("alice", "exit %d" % want)
        h.check(rc == want, "exec exit %d: got %d" % (want, rc))
    rc, out = sh("alice", "echo out-$((6*7)); id -un; exit 7")
    h.check(rc == 7 and out.split() == ["out-42", "agent"], "exec output and status: %d %r" % (rc, out))

    want = h.file_round_trip("alice", 256 << 10)

    h.check(h.cli("stop", "alice")["state"] == "sleeping", "stop -> sleeping")
    h.check(h.pod(aid) is None and h.claim(aid) is not None, "asleep: no Pod, the claim kept")
    # Reading a sleeping agent's file: through its reader Pod (which dials
    # the server's Service like a sandbox); it neither wakes the agent nor
    # changes its state.
    asleep = os.path.join(h.tmp, "asleep.bin")
    rc, _, err = h.run_cli("fs", "get", "alice", "f.bin", asleep)
    h.check(rc == 0 and ahserver.sha256_file(asleep) == want,
            "a sleeping agent's file on kubernetes, through its reader: %d %r" % (rc, err))
    time.sleep(2)                       # pacing: a window in which the read must not wake it
    h.check(h.cli("show", "alice")["state"] == "sleeping" and h.pod(aid) is None,
            "the read did not wake it")

    t0 = time.time()
    h.check(h.cli("start", "alice")["state"] == "running", "start -> running")
    print("sleeping -> running in %.1f s" % (time.time() - t0))
    h.check(h.home_sha("alice") == want, "the home is intact after sleep and wake")

    h.check(h.cli("rm", "alice")["state"] == "destroyed", "rm -> destroyed")
    deadline = time.time() + 120
    while agent_objects() and time.time() < deadline:
        time.sleep(0.5)
    h.check(not agent_objects(), "nothing of the agent is left: %r" % agent_objects())
    left = kjson("get", "pods,pvc,secrets,networkpolicies,configmaps", ns=h.ns)["items"]
    server_own = {"PersistentVolumeClaim/agenthold-data", "ConfigMap/agenthold-config",
                  "ConfigMap/kube-root-ca.crt", "Pod/" + server_pod()["metadata"]["name"]}
    others = [i["kind"] + "/" + i["metadata"]["name"] for i in left
              if i["kind"] + "/" + i["metadata"]["name"] not in server_own]
    h.check(not others, "the namespace holds the server's own objects alone: %r" % others)
    log = server_logs()
    h.check("forbidden" not in log.lower(), "the API server refused the server nothing (the documented Role "
            "suffices): %s" % "\n".join(x for x in log.splitlines() if "orbidden" in x)[-2000:])


sys.exit(h.run(scenario))
