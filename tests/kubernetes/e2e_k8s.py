#!/usr/bin/python3
"""tests/kubernetes/e2e_k8s.py: the real `agenthold serve` with
`sandbox.driver: kubernetes` on the test cluster (tests/k8s/up), the real
static sandboxd delivered by the sandboxd image, the shipped busybox
runtime, driven by the CLI and checked against the cluster with kubectl.

life    create -> running (sandboxd's hello through the tunnel over TCP):
        the Pod (labels, node, capabilities, seccomp, no privilege
        escalation, sandboxd from the init container, limits), its claim,
        boot Secret and NetworkPolicy; terminal echo; exec exit codes; a
        1 MiB file round trip with sha256 (fs put / get, and sha256sum in
        the sandbox); the tree (sandboxd's fs.tree) against what find sees,
        hostile paths refused on the tree and the files routes; the policy enforced (the server's API port is not
        reachable from the sandbox, the tunnel is); stop -> sleeping (no
        Pod, the claim kept) and start with the home intact; rebuild (a new
        Pod) keeping the home; rm -> nothing left in the namespace.
faults  a Pod deleted with kubectl behind the server's back -> sleeping,
        and it starts again with its home; a claim deleted behind its back
        -> error with the home lost, never recreated empty; a Pod Failed
        as Evicted -> error with the cluster's reason; the server
        killed (-9) in the middle of a create and of a stop, restarted:
        it reconciles from a relist (running, sleeping); rm -> nothing left.

usage: e2e_k8s.py AGENTHOLD_BINARY life|faults
Exits 77 (SKIPPED, loudly) when no test cluster answers. Ports
19450-19469, a namespace ah-k8s<scenario><pid> of its own, deleted at
the end."""
import asyncio
import json
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahk8s import Harness, kjson, RUNTIME, RUNTIME_IMAGE, SANDBOXD_IMAGE  # noqa: E402

SCENARIO = sys.argv[2] if len(sys.argv) > 2 else "life"
PORTS = {"life": (19450, 19460), "faults": (19460, 19470)}[SCENARIO]
h = Harness("k8s" + SCENARIO, sys.argv[1], PORTS)


def create(name, *extra):
    t0 = time.time()
    a = h.cli("create", name, "--runtime", RUNTIME, *extra)
    h.check(a["state"] == "running", "create %s waits for sandboxd's hello: %r (%s)"
            % (name, a["state"], a.get("error")))
    print("create %s -> running in %.2f s" % (name, time.time() - t0))
    return a


def nothing_left():
    deadline = time.time() + 120
    while h.leftovers() and time.time() < deadline:
        time.sleep(0.5)
    h.check(not h.leftovers(), "nothing left in the namespace: %r" % h.leftovers())


async def terminal(url):
    import websockets
    out = b""
    async with websockets.connect(url) as ws:
        try:
            while not out:
                out += await asyncio.wait_for(ws.recv(), 30)
            await ws.send(b"echo hi-$((6*7)); id -un\n")
            while b"hi-42" not in out or b"agent" not in out.split(b"hi-42")[-1]:
                out += await asyncio.wait_for(ws.recv(), 15)
            await ws.send(b"exit 5\n")
            while True:
                m = await asyncio.wait_for(ws.recv(), 15)
                out += m if isinstance(m, bytes) else m.encode()
        except websockets.ConnectionClosed as e:
            return out, e.code, e.reason


def life():
    h.start_server()
    a = create("alice")
    aid = a["id"]
    pod = h.pod(aid)
    h.check(pod and pod["status"]["phase"] == "Running", "the Pod runs")
    labels = pod["metadata"]["labels"]
    h.check(labels.get("agenthold.io/agent") == aid and labels.get("agenthold.io/installation") == h.prefix,
            "labelled with the agent and the installation: %r" % labels)
    node = pod["spec"].get("nodeName")
    h.check(node, "scheduled on a node")
    print("alice runs on node %s" % node)
    c = pod["spec"]["containers"][0]
    h.check(c["image"] == RUNTIME_IMAGE and c["command"] == ["/opt/agenthold/sandboxd"],
            "the runtime's image with sandboxd as entrypoint: %r %r" % (c["image"], c["command"]))
    sc = c["securityContext"]
    h.check(sc["capabilities"]["drop"] == ["ALL"] and "NET_ADMIN" not in sc["capabilities"]["add"]
            and sc["allowPrivilegeEscalation"] is False and sc["seccompProfile"]["type"] == "RuntimeDefault",
            "capabilities, no escalation, seccomp: %r" % sc)
    h.check(c["resources"]["limits"]["memory"] == "256Mi", "the runtime's memory limit: %r" % c["resources"])
    init = pod["spec"]["initContainers"][0]
    h.check(init["image"] == SANDBOXD_IMAGE, "sandboxd comes from %s" % SANDBOXD_IMAGE)
    claim = h.claim(aid)
    h.check(claim and claim["status"]["phase"] == "Bound", "its home claim is bound")
    secrets = kjson("get", "secrets", "-l", "agenthold.io/agent=" + aid, ns=h.ns)["items"]
    h.check(len(secrets) == 1 and secrets[0]["metadata"]["name"].startswith("%s-boot-%s-" % (h.prefix, aid))
            and secrets[0].get("immutable") is True
            and pod["spec"]["volumes"][2]["secret"]["secretName"] == secrets[0]["metadata"]["name"],
            "one boot Secret of its own name, mounted: %r" % [x["metadata"]["name"] for x in secrets])
    boot1 = secrets[0]["metadata"]["name"]
    pol = h.get("networkpolicy", "%s-%s" % (h.prefix, aid))
    h.check(pol and pol["spec"]["egress"][0]["to"][0]["ipBlock"]["cidr"] == h.node_ip + "/32"
            and pol["spec"]["egress"][0]["ports"][0]["port"] == h.tunnel_port and len(pol["spec"]["egress"]) == 1,
            "its NetworkPolicy lets it reach the tunnel alone: %r" % (pol and pol["spec"]))
    # Inside: the agent's account, the briefing, a memory-backed /tmp.
    rc, out = h.sh("alice", "id -un; cat /etc/agenthold/boot.json >/dev/null 2>&1 && echo READ || echo DENIED;"
                   " test -r /etc/agenthold/briefing.md && echo BRIEF; grep ' /tmp ' /proc/mounts | cut -d' ' -f3")
    h.check(rc == 0 and out.split() == ["agent", "DENIED", "BRIEF", "tmpfs"],
            "agent account, boot.json root's alone, briefing readable, /tmp a tmpfs: %r" % out)

    # Terminal echo.
    url = "ws://127.0.0.1:%d/api/v1/agents/alice/terminal?cols=100&rows=30&token=%s" % (h.api_port, h.token())
    out, code, reason = asyncio.run(terminal(url))
    h.check(b"hi-42" in out and code == 1000 and "status 5" in reason,
            "terminal echo and exit: %r %r %r" % (out[-200:], code, reason))
    # Exec exit codes.
    for want in (0, 3, 42):
        rc, _ = h.sh("alice", "exit %d" % want)
        h.check(rc == want, "exec exit %d: got %d" % (want, rc))
    rc, out = h.sh("alice", "echo out; echo err >&2; exit 7")
    h.check(rc == 7 and "out" in out, "exec output and status: %d %r" % (rc, out))

    # A file round trip with sha256.
    want = h.file_round_trip("alice", 1 << 20)

    # The tree (the console's file browser) through sandboxd's fs.tree,
    # and hostile paths refused on the tree and the files routes.
    h.tree_and_hostile("alice")

    # The policy holds: the server's API port on the node is not reachable
    # from the sandbox (the tunnel is: it is connected).
    rc, out = h.sh("alice", "wget -q -T 3 -O - http://%s:%d/healthz && echo REACHED || echo BLOCKED"
                   % (h.node_ip, h.api_port), timeout=30)
    h.check("BLOCKED" in out, "the NetworkPolicy keeps the sandbox from the node's other ports: %r" % out)

    # Sleep and wake: no Pod while asleep, the claim kept, the home intact.
    uid1 = pod["metadata"]["uid"]
    t0 = time.time()
    h.check(h.cli("stop", "alice")["state"] == "sleeping", "stop -> sleeping")
    print("stop -> sleeping in %.2f s" % (time.time() - t0))
    h.check(h.pod(aid) is None, "no Pod while asleep")
    h.check(h.claim(aid) is not None, "the claim stays while asleep")
    # Asleep, the tree is a 409 naming the claim; it does not wake the agent.
    status, j = h.api("GET", "/api/v1/agents/alice/tree")
    h.check(status == 409 and "PersistentVolumeClaim" in (j or {}).get("error", ""),
            "a sleeping agent's tree: 409 saying why: %d %r" % (status, j))
    h.check(h.cli("show", "alice")["state"] == "sleeping" and h.pod(aid) is None,
            "the tree did not wake it")
    t0 = time.time()
    h.check(h.cli("start", "alice")["state"] == "running", "start -> running")
    print("sleeping -> running in %.2f s" % (time.time() - t0))
    h.check(h.home_sha("alice") == want, "the home is intact after sleep and wake")
    secrets = kjson("get", "secrets", "-l", "agenthold.io/agent=" + aid, ns=h.ns)["items"]
    h.check([x["metadata"]["name"] for x in secrets] != [boot1] and len(secrets) == 1,
            "a new boot Secret for the new boot, the old one gone: %r" % [x["metadata"]["name"] for x in secrets])

    # Rebuild: a new Pod on the same claim.
    h.check(h.cli("rebuild", "alice")["state"] == "running", "rebuild -> running")
    pod = h.pod(aid)
    h.check(pod and pod["metadata"]["uid"] != uid1, "the rebuild made a new Pod")
    h.check(h.home_sha("alice") == want, "the home is kept across the rebuild")
    h.check(h.claim(aid)["metadata"]["uid"] == claim["metadata"]["uid"], "the same claim")

    h.check(h.cli("rm", "alice")["state"] == "destroyed", "rm -> destroyed")
    nothing_left()
    h.server.terminate()
    h.check(h.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")


def faults():
    h.start_server()
    # A Pod deleted behind the server's back: the agent sleeps.
    b = create("bob")
    bid = b["id"]
    rc, _ = h.sh("bob", "echo kept > /home/agent/mark")
    h.check(rc == 0, "wrote a mark")
    h.kubectl("delete", "pod", "%s-%s" % (h.prefix, bid), "--wait=false")
    h.wait_state("bob", "sleeping", 60)
    h.check(h.cli("start", "bob")["state"] == "running", "start after the Pod was deleted by hand")
    rc, out = h.sh("bob", "cat /home/agent/mark")
    h.check(out.strip() == "kept", "the home survived: %r" % out)

    # The server killed in the middle of a create, restarted: it finishes.
    rc, out, err = h.run_cli("create", "carol", "--runtime", RUNTIME, "--no-wait", "--json")
    h.check(rc == 0, "create --no-wait: %s" % err)
    time.sleep(0.5)
    h.kill_server()
    h.start_server()
    c = h.wait_state("carol", "running", 120)
    cid = c["id"]
    h.check(h.pod(cid) is not None, "carol's Pod after the restart")
    # And in the middle of a stop.
    rc, out, err = h.run_cli("stop", "carol", "--no-wait", "--json")
    h.check(rc == 0, "stop --no-wait: %s" % err)
    time.sleep(0.3)
    h.kill_server()
    h.start_server()
    h.wait_state("carol", "sleeping", 120)
    h.wait_for("carol's Pod gone", lambda: h.pod(cid) is None, 60)
    # Killed while the agent runs, its Pod deleted meanwhile: the relist at
    # start sees it (no event can tell).
    h.check(h.cli("start", "carol")["state"] == "running", "carol starts again")
    h.kill_server()
    h.kubectl("delete", "pod", "%s-%s" % (h.prefix, cid), "--wait=true")
    h.start_server()
    h.wait_state("carol", "sleeping", 60)

    # A Pod the cluster failed for it (Evicted; set on its status as the
    # kubelet would): the agent is in error with the cluster's reason.
    d = create("dave")
    h.kubectl("patch", "pod", "%s-%s" % (h.prefix, d["id"]), "--subresource=status", "--type=merge",
              "-p", json.dumps({"status": {"phase": "Failed", "reason": "Evicted",
                                           "message": "The node was low on resource: memory."}}))
    a = h.wait_state("dave", "error", 60)
    h.check("Evicted" in (a.get("error") or "") and "low on resource" in a["error"],
            "the agent's error says why: %r" % a.get("error"))

    # A claim deleted behind its back: the home is lost, reported; the
    # claim is never silently made again empty.
    h.kubectl("delete", "pvc", "%s-home-%s" % (h.prefix, bid), "--wait=false")
    a = h.wait_state("bob", "error", 60)
    h.check(a.get("home_lost"), "the home is reported lost: %r" % a)
    print("bob: %s; home_lost: %s" % (a.get("error"), a.get("home_lost")))
    claim = h.claim(bid)
    h.check(claim is None or claim["metadata"].get("deletionTimestamp"),
            "no new claim was made for bob: %r" % (claim and claim["metadata"]))

    for name in ("bob", "carol", "dave"):
        h.check(h.cli("rm", name)["state"] == "destroyed", "rm %s -> destroyed" % name)
    nothing_left()
    h.server.terminate()
    h.check(h.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")


sys.exit(h.run({"life": life, "faults": faults}[SCENARIO]))
