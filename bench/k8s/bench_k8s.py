#!/usr/bin/python3
"""bench/k8s/bench_k8s.py: what agenthold adds on a cluster. In one run on
the test cluster (tests/k8s/up), ROUNDS times each:

  agenthold   `agenthold create` -> running (claim, policy, Secret, Pod,
              sandboxd's hello through the tunnel), and `agenthold start`
              of a sleeping agent -> running (Secret, Pod, hello);
  baseline    `kubectl create` of an equivalent Pod (the same runtime and
              sandboxd images, init container, claim, Secret; sandboxd
              started with a boot card pointing nowhere, so it runs) and
              polled until it is Running: for the
              create a new claim too, for the wake the claim kept.

Prints medians and the ratios agenthold / baseline.
usage: bench_k8s.py AGENTHOLD_BINARY   (exit 77 without a cluster)"""
import json
import os
import statistics
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "kubernetes"))
from ahk8s import Harness, kubectl, RUNTIME, RUNTIME_IMAGE, SANDBOXD_IMAGE  # noqa: E402

ROUNDS = int(os.environ.get("AGENTHOLD_BENCH_ROUNDS", "5"))
h = Harness("k8sbench", sys.argv[1])


def baseline_objects(i, with_claim):
    name = "bare-%d" % i
    objs = []
    if with_claim:
        objs.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": name + "-home"},
                     "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    objs.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name + "-boot"},
                 "stringData": {"boot.json": json.dumps({"agent_id": "0000000000%02x" % i, "token": "x",
                                                         "tunnel_url": "ws://127.0.0.1:9/tunnel"})}})
    objs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                 "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                          "terminationGracePeriodSeconds": 0,
                          "initContainers": [{"name": "sandboxd", "image": SANDBOXD_IMAGE,
                                              "imagePullPolicy": "IfNotPresent",
                                              "command": ["/sandboxd", "--install", "/opt/agenthold"],
                                              "volumeMounts": [{"name": "sandboxd", "mountPath": "/opt/agenthold"}]}],
                          "containers": [{"name": "sandbox", "image": RUNTIME_IMAGE,
                                          "imagePullPolicy": "IfNotPresent",
                                          "command": ["/opt/agenthold/sandboxd"],
                                          "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                                                        "requests": {"cpu": "50m", "memory": "256Mi"}},
                                          "volumeMounts": [
                                              {"name": "home", "mountPath": "/home/agent"},
                                              {"name": "sandboxd", "mountPath": "/opt/agenthold", "readOnly": True},
                                              {"name": "boot", "mountPath": "/etc/agenthold", "readOnly": True}]}],
                          "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": name + "-home"}},
                                      {"name": "sandboxd", "emptyDir": {}},
                                      {"name": "boot", "secret": {"secretName": name + "-boot"}}]}})
    return name, {"apiVersion": "v1", "kind": "List", "items": objs}


def bare_round(i, with_claim):
    name, objs = baseline_objects(i, with_claim)
    t0 = time.time()
    kubectl("create", "-f", "-", ns=h.ns, stdin=json.dumps(objs))
    h.wait_for("bare pod %s running" % name,
               lambda: (h.get("pod", name) or {}).get("status", {}).get("phase") == "Running", 120)
    took = time.time() - t0
    kubectl("delete", "pod/" + name, "secret/" + name + "-boot", "--wait=true", "--grace-period=1",
            ns=h.ns, check=False, timeout=120)
    h.wait_for("bare pod %s gone" % name, lambda: h.get("pod", name) is None, 60)
    return took


def bench():
    h.start_server()
    ah_create, ah_wake, bare_create, bare_wake = [], [], [], []
    for i in range(ROUNDS):
        name = "b%d" % i
        t0 = time.time()
        a = h.cli("create", name, "--runtime", RUNTIME)
        ah_create.append(time.time() - t0)
        h.check(a["state"] == "running", "create -> running")
        h.check(h.cli("stop", name)["state"] == "sleeping", "stop")
        t0 = time.time()
        h.check(h.cli("start", name)["state"] == "running", "start")
        ah_wake.append(time.time() - t0)
        h.cli("rm", name)
        bare_create.append(bare_round(i, True))
        bare_wake.append(bare_round(i, False))          # the claim of the create kept
        kubectl("delete", "pvc", "bare-%d-home" % i, "--wait=false", ns=h.ns, check=False)

    def med(xs):
        return statistics.median(xs)
    print("bench.k8s: %d rounds (median seconds)" % ROUNDS)
    print("  create -> running     agenthold %.2f s   bare kubectl create %.2f s   ratio %.2f"
          % (med(ah_create), med(bare_create), med(ah_create) / med(bare_create)))
    print("  sleeping -> running   agenthold %.2f s   bare kubectl create %.2f s   ratio %.2f"
          % (med(ah_wake), med(bare_wake), med(ah_wake) / med(bare_wake)))


sys.exit(h.run(bench))
