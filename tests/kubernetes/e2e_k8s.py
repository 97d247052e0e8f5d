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
        as Evicted -> error with the cluster's reason (taken from the
        watch's event: the kubelet rewrites the patched status); the server
        killed (-9) in the middle of a create and of a stop, restarted:
        it reconciles from a relist (running, sleeping); rm -> nothing left.

reader  a sleeping agent's files and tree through its reader Pod (sandboxd
        --read-only on the claim, read-only): the listing, a file read
        (sha256 against what was written before the sleep; a 0600 file
        too) and the tree answer 200 while the agent stays sleeping (no
        sandbox Pod); the reader Pod's fields; hostile paths refused;
        writes still refused asleep; the reader deleted after
        sandbox.kubernetes.reader_idle with its Secret; its token on the
        tunnel with a sandbox's hello is closed (the agent stays asleep);
        a wake while a reader is alive removes it first, with the home
        intact; a server killed (-9) with a reader alive removes it when
        it comes back; rm -> nothing left.

egress  the server is the only way out (docs/egress.md) on this driver, with
        the shipped default runtime (debian, made in Docker as the product
        makes it and imported into the cluster) and the image's own curl:
        a plain HTTP upstream of the test's own on the node's address and
        an HTTPS one on 127.0.0.2 (a test CA the server trusts), opened by
        the tenant's list; through the proxy sandboxd runs (the variables
        it set, nothing else) the plain one answers, a name on no list is
        refused with the rule's sentence, and the same upstream asked
        directly (--noproxy) is not reached (the NetworkPolicy); the
        HTTPS one gets the tenant's secret header, which no environment
        (read as root with kubectl exec), process list, home or audit row
        in the Pod holds; the audit has every attempt; the tenant's list
        changed while the sandbox runs applies to the next connection;
        rm -> nothing left.

usage: e2e_k8s.py AGENTHOLD_BINARY life|faults|reader|egress
Exits 77 (SKIPPED, loudly) when no test cluster answers. Ports
from ahserver.free_port, a namespace ah-k8s<scenario><pid> of its own, deleted at
the end."""
import asyncio
import base64
import codecs
import hashlib
import json
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahk8s import Fail, Harness, kjson, RUNTIME, RUNTIME_IMAGE, SANDBOXD_IMAGE, SRC  # noqa: E402
import ahserver  # noqa: E402

SCENARIO = sys.argv[2] if len(sys.argv) > 2 else "life"
h = Harness("k8s" + SCENARIO, sys.argv[1])


def create(name, *extra):
    t0 = time.time()
    a = h.cli("create", name, "--runtime", RUNTIME, *extra)
    h.check(a["state"] == "running", "create %s waits for sandboxd's hello: %r (%s)"
            % (name, a["state"], a.get("error")))
    h.check(a.get("no_freeze") == "the kubernetes driver has no pause: an idle agent is stopped at once",
            "on kubernetes the agent says why it is never frozen: %r" % a.get("no_freeze"))
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
    # Asleep, the tree is read by the agent's reader (k8s.reader tests it
    # in depth); it does not wake the agent.
    status, j = h.api("GET", "/api/v1/agents/alice/tree?path=t")
    h.check(status == 200 and any(e["path"] == "t/a/b/c/deep.txt" for e in j["entries"]),
            "a sleeping agent's tree through its reader: %d %r" % (status, j if status != 200 else ""))
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
    time.sleep(0.5)                     # pacing: killed in the middle of the create
    h.kill_server()
    h.start_server()
    c = h.wait_state("carol", "running", 120)
    cid = c["id"]
    h.check(h.pod(cid) is not None, "carol's Pod after the restart")
    # And in the middle of a stop.
    rc, out, err = h.run_cli("stop", "carol", "--no-wait", "--json")
    h.check(rc == 0, "stop --no-wait: %s" % err)
    time.sleep(0.3)                     # pacing: killed in the middle of the stop
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
    # kubelet would): the agent is in error with the cluster's reason. The
    # real kubelet rewrites that status soon after (the Pod runs): the
    # driver takes the end from the watch's event, not from a read of the
    # Pod after it (drivers/kubernetes/watch.c, ah_k8s_ended_note).
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


def read_raw(path):
    return ahserver.request(h.port(), "GET", path, token=h.token())


def reader():
    h.start_server(extra_env={"AGENTHOLD_SANDBOX_KUBERNETES_READER_IDLE": "6s"})
    a = create("erin")
    eid = a["id"]
    rname = "%s-read-%s" % (h.prefix, eid)
    want = h.file_round_trip("erin", 512 << 10)
    rc, out = h.sh("erin", "cd /home/agent && mkdir -p d/e && echo deep > d/e/deep.txt"
                   " && chmod 600 d/e/deep.txt && ln -s /etc out && echo hi > note.txt"
                   " && head -c 50331648 /dev/urandom > big.bin && sha256sum big.bin", timeout=120)
    h.check(rc == 0, "files written before the sleep: %d %r" % (rc, out))
    big_sha = out.split()[-2]
    h.check(h.cli("stop", "erin")["state"] == "sleeping", "stop -> sleeping")
    h.check(h.pod(eid) is None and h.get("pod", rname) is None, "asleep: no Pod, no reader")
    base = "/api/v1/agents/erin"

    # The listing: a reader Pod is made, the agent sleeps on.
    t0 = time.time()
    status, j = h.api("GET", base + "/files?path=.")
    took = time.time() - t0
    h.check(status == 200, "a sleeping agent's listing: %d %r" % (status, j))
    names = {e["name"] for e in j["entries"]}
    h.check({"f.bin", "d", "out", "note.txt"} <= names, "the listing has what was written: %r" % names)
    print("asleep, the first listing (a reader Pod made and connected) took %.2f s" % took)
    h.check(h.cli("show", "erin")["state"] == "sleeping", "the listing did not wake it")
    h.check(h.pod(eid) is None, "no sandbox Pod was made")
    rp = h.get("pod", rname)
    h.check(rp is not None, "the reader Pod %s exists" % rname)
    labels = rp["metadata"]["labels"]
    h.check(labels.get("agenthold.io/role") == "reader" and labels.get("agenthold.io/agent") == eid,
            "the reader's labels: %r" % labels)
    c = rp["spec"]["containers"][0]
    sc = c["securityContext"]
    h.check(c["image"] == SANDBOXD_IMAGE and c["command"] == ["/sandboxd", "--read-only"]
            and sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] is True
            and sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            and rp["spec"]["automountServiceAccountToken"] is False,
            "the reader: sandboxd --read-only, unprivileged, no capability, read-only root, no token: %r %r"
            % (c["command"], sc))
    home = [v for v in rp["spec"]["volumes"] if v["name"] == "home"][0]
    h.check(home["persistentVolumeClaim"] == {"claimName": "%s-home-%s" % (h.prefix, eid), "readOnly": True},
            "the claim, read-only: %r" % home)
    rsec = kjson("get", "secrets", "-l", "agenthold.io/role=reader", ns=h.ns)["items"]
    h.check(len(rsec) == 1 and rsec[0]["metadata"]["name"].startswith(rname + "-"),
            "one reader Secret: %r" % [x["metadata"]["name"] for x in rsec])

    # A file read: what was written before the sleep (sha256), a 0600 file too.
    status, raw = read_raw(base + "/files/f.bin")
    h.check(status == 200 and hashlib.sha256(raw).hexdigest() == want,
            "a sleeping agent's file through its reader: %d, sha256 %s" % (status, hashlib.sha256(raw).hexdigest()))
    local = os.path.join(h.tmp, "asleep.bin")
    rc, _, err = h.run_cli("fs", "get", "erin", "f.bin", local)
    h.check(rc == 0 and ahserver.sha256_file(local) == want, "fs get of a sleeping agent: %d %s" % (rc, err))
    status, raw = read_raw(base + "/files/d/e/deep.txt")
    h.check(status == 200 and raw == b"deep\n", "a 0600 file of the agent's: %d %r" % (status, raw))

    # A download slower than the reader's idle time (48 MiB read in 256 KiB
    # steps every 0.06 s: about 12 s, reader_idle 6 s; what the server and
    # the sockets hold ahead is some MiB, so the reader serves to the end)
    # is not cut: the API keeps the reader while the bytes flow (READER_KEEP).
    t0 = time.time()
    status, sha, got = ahserver.download(h.port(), base + "/files/big.bin", h.token(), 256 << 10, 0.06)
    took = time.time() - t0
    h.check(status == 200 and got == 48 << 20 and sha == big_sha,
            "a slow download through the reader, longer than its idle time, whole: %d, %d bytes in %.1f s"
            % (status, got, took))
    h.check(took > 8, "the download outlasted the idle time: %.1f s" % took)
    print("a slow 48 MiB download through the reader: %.1f s, whole (reader_idle 6 s)" % took)

    # The tree, as the console's file browser reads it (the reader may be
    # going: its idle time counts from the last bytes it sent, which the
    # slow download's client read long after; then the tree waits for a new
    # one).
    status, t = h.api("GET", base + "/tree")
    h.check(status == 200, "a sleeping agent's tree: %d %r" % (status, t))
    kinds = {e["path"]: e["type"] for e in t["entries"]}
    h.check(kinds.get("d/e/deep.txt") == "file" and kinds.get("out") == "link" and kinds.get("f.bin") == "file"
            and not any(p.startswith("out/") for p in kinds), "the tree: files, a link listed not walked: %r" % kinds)

    # Hostile paths, refused as on a running agent.
    for q, want_status in (("..", 400), ("/etc", 400), ("%2e%2e", 400), ("out", 403), ("note.txt", 409),
                           ("nothere", 404)):
        status, j = h.api("GET", base + "/tree?path=" + q)
        h.check(status == want_status, "asleep, tree ?path=%s: %d (wanted %d): %r" % (q, status, want_status, j))
    for q, ok in (("files/out/passwd", (403,)), ("files/..%2f..%2fetc%2fpasswd", (400, 404)),
                  ("fs/file?path=../etc/passwd", (400,)), ("fs/file?path=out%2fpasswd", (403,)),
                  ("files?path=out", (403,))):
        status, j = h.api("GET", base + "/" + q)
        h.check(status in ok, "asleep, %s: %d (wanted one of %r): %r" % (q, status, ok, j))
    # Writes still need the agent running.
    status, _ = ahserver.request(h.port(), "PUT", base + "/files/new.txt", body=b"x", token=h.token())
    h.check(status == 409, "a write to a sleeping agent: 409 (got %d)" % status)
    h.check(h.cli("show", "erin")["state"] == "sleeping" and h.pod(eid) is None,
            "after every read the agent still sleeps, with no sandbox Pod")

    # The idle time: the reader Pod and its Secret go.
    t0 = time.time()
    h.wait_for("the reader Pod deleted after its idle time", lambda: h.get("pod", rname) is None, 60)
    print("the reader Pod went %.1f s after the last read (reader_idle 6s)" % (time.time() - t0))
    h.wait_for("its Secret deleted", lambda: not kjson("get", "secrets", "-l", "agenthold.io/role=reader",
                                                          ns=h.ns)["items"], 30)

    # Its token is the reader's: with a sandbox's hello the tunnel closes it,
    # and the agent sleeps on.
    status, _ = h.api("GET", base + "/files?path=d")
    h.check(status == 200, "a second reader: %d" % status)
    rsec = kjson("get", "secrets", "-l", "agenthold.io/role=reader", ns=h.ns)["items"]
    card = json.loads(base64.b64decode(rsec[0]["data"]["boot.json"]))
    p = subprocess.run(["/usr/bin/python3", os.path.join(SRC, "tests", "tunnel", "client.py"),
                        "ws://127.0.0.1:%d/tunnel" % h.tunnel_port, eid, card["token"], "ok", "10"],
                       capture_output=True, text=True, timeout=60)
    h.check(p.stdout.startswith("CLOSED"), "the reader token with a sandbox's hello: closed: %r" % p.stdout)
    h.check("a reader token, but sandboxd's hello says mode" in h.server_log_tail(20000),
            "the server says why it closed it")
    h.check(h.cli("show", "erin")["state"] == "sleeping" and h.pod(eid) is None,
            "the reader token did not make a sandbox of anything")
    h.wait_for("the reader removed after its connection was taken over",
               lambda: h.get("pod", rname) is None, 60)

    # A wake while a reader is alive: the reader goes first, the home is intact.
    status, _ = h.api("GET", base + "/files?path=.")
    h.check(status == 200 and h.get("pod", rname) is not None, "a reader alive before the wake: %d" % status)
    h.check(h.cli("start", "erin")["state"] == "running", "start while a reader is alive -> running")
    h.check(h.get("pod", rname) is None, "the wake removed the reader Pod")
    h.check(h.home_sha("erin") == want, "the home is intact after the reads and the wake")
    rc, out = h.sh("erin", "cat /home/agent/d/e/deep.txt")
    h.check(out.strip() == "deep", "the 0600 file is the agent's still: %r" % out)

    # A server killed with a reader alive: the restarted one removes it.
    h.check(h.cli("stop", "erin")["state"] == "sleeping", "stop again")
    status, _ = h.api("GET", base + "/tree?path=d")
    h.check(status == 200 and h.get("pod", rname) is not None, "a reader alive before the kill: %d" % status)
    h.kill_server()
    h.start_server(extra_env={"AGENTHOLD_SANDBOX_KUBERNETES_READER_IDLE": "600s"})
    h.wait_for("the restarted server removed the stray reader", lambda: h.get("pod", rname) is None, 60)
    h.check(h.cli("show", "erin")["state"] == "sleeping", "the agent sleeps on after the restart")
    status, raw = read_raw(base + "/files/note.txt")
    h.check(status == 200 and raw == b"hi\n", "and is read again: %d %r" % (status, raw))

    # Destroy with a reader alive: nothing is left.
    h.check(h.get("pod", rname) is not None, "a reader alive before rm")
    h.check(h.cli("rm", "erin")["state"] == "destroyed", "rm -> destroyed")
    nothing_left()
    h.server.terminate()
    h.check(h.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")


def exec_(name, cmd, timeout=120):
    """A shell command as the agent (the exec route): its answer."""
    st, r = h.api("POST", "/api/v1/agents/%s/exec" % name, body={"cmd": cmd}, timeout=timeout)
    h.check(st == 200 and isinstance(r, dict), "%s: exec %r: HTTP %d %r" % (name, cmd, st, r))
    return r


SECRET = "Bearer sk-K8S-SECRET-7e6d5c4b3a"
SECRET_MARK = "K8S-SECRET-7e6d5c4b3a"


def egress():
    ca, cert, key = ahserver.make_test_ca(os.path.join(h.tmp, "testca"), "127.0.0.2", "k8s.egress", Fail)
    h.env["AGENTHOLD_SANDBOX_EGRESS_UPSTREAM_CA_FILE"] = ca
    h.env["AGENTHOLD_CATALOG_PATH"] = os.path.join(SRC, "catalog", "runtimes.json")
    h.env.pop("AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB", None)
    plain, pt = ahserver.upstream(h.node_ip, h.cleanups)
    tls, tt = ahserver.upstream("127.0.0.2", h.cleanups, cert, key)
    h.start_server()
    st, j = h.api("GET", "/api/v1/runtimes", expect=200)
    deb = [r for r in j["runtimes"] if r["alias"] == "debian"]
    h.check(deb and deb[0]["default"] and deb[0]["needs_network"], "debian, networked, is the default: %r" % deb)
    h.import_runtime("debian", deb[0]["image"])

    st, t = h.api("PATCH", "/api/v1/tenants/default", body={"egress_allow": [pt, tt]})
    h.check(st == 200 and t["egress_allow"] == [pt, tt], "the tenant's list names the upstreams: %d %r" % (st, t))
    rc, out, err = h.run_cli("tenant", "secret", "set", "default", tt, "--header", "Authorization",
                             stdin=SECRET + "\n")
    h.check(rc == 0 and SECRET_MARK not in out + err, "the secret, by the CLI from stdin: %d %r %r" % (rc, out, err))

    t0 = time.time()
    a = h.cli("create", "eve", timeout=300)
    h.check(a["state"] == "running" and a["runtime"] == "debian", "create eve (the default runtime) -> running: "
            "%r %r (%s)" % (a["state"], a.get("runtime"), a.get("error")))
    print("create eve (debian) -> running in %.2f s" % (time.time() - t0))
    aid = a["id"]
    pod = h.pod(aid)
    h.check(pod and pod["spec"]["containers"][0]["image"] == deb[0]["image"], "the Pod runs the debian image")
    pol = h.get("networkpolicy", "%s-%s" % (h.prefix, aid))
    h.check(pol and len(pol["spec"]["egress"]) == 1
            and pol["spec"]["egress"][0]["to"][0]["ipBlock"]["cidr"] == h.node_ip + "/32"
            and pol["spec"]["egress"][0]["ports"][0]["port"] == h.tunnel_port,
            "a networked runtime's Pod may reach the tunnel alone: %r" % (pol and pol["spec"]))

    env = exec_("eve", "env")["stdout"]
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        h.check("%s=http://127.0.0.1:3128" % var in env, "%s points at sandboxd's proxy: %r" % (var, env))
    h.check("SSL_CERT_FILE=/tmp/agenthold-ca/ca-bundle.pem" in env, "the installation's CA is trusted")
    h.check(SECRET_MARK not in env, "env holds no trace of the secret")

    # Through the proxy, nothing but the variables.
    r = exec_("eve", "curl -sS --max-time 30 http://%s/hello" % pt)
    h.check(r["status"] == 0 and r["stdout"] == "ok http://%s/hello\n" % pt,
            "curl reaches the plain upstream through the proxy (the absolute form): %r" % r)
    # The same upstream directly: the NetworkPolicy lets nothing but the tunnel out.
    r = exec_("eve", "curl -sS --noproxy '*' --max-time 5 http://%s/direct" % pt)
    h.check(r["status"] != 0 and [p for p, _ in plain.seen] == ["http://%s/hello" % pt],
            "a direct connection around the proxy does not reach it: %r %r" % (r, plain.seen))
    # A name on no list: the rule's sentence, without a lookup.
    r = exec_("eve", "curl -sS --max-time 30 -w ' %{http_code}' http://example.org/")
    h.check(r["stdout"].endswith(" 403") and "is on neither runtime 'debian''s egress list nor tenant "
            "'default''s allow list" in r["stdout"], "a name on no list is refused with its rule: %r" % r)
    # HTTPS to the host with a secret: the header added by the server.
    r = exec_("eve", "curl -sS --max-time 30 -H 'Authorization: Bearer agent-own' https://%s/secret" % tt)
    h.check(r["status"] == 0 and r["stdout"] == "ok /secret\n" and tls.seen == [("/secret", [SECRET])],
            "curl reaches the host with a secret, which got the secret in place of the agent's: %r %r"
            % (r, tls.seen))

    # No trace in the Pod: the process list, the home, every process's
    # environment and command line read as root (kubectl exec), searched
    # for in rot13 so that the search's own command line is no match.
    r = exec_("eve", "ps auxww")
    h.check(r["status"] == 0 and "PID" in r["stdout"] and SECRET_MARK not in r["stdout"],
            "the process list holds no trace: %r" % r["stdout"][-300:])
    r = exec_("eve", "grep -rl %s /home/agent /tmp/agenthold-ca; echo rc=$?" % SECRET_MARK)
    h.check(r["stdout"].strip() == "rc=1", "the home and the trust files hold no trace: %r" % r)
    podname = "%s-%s" % (h.prefix, aid)
    p = h.kubectl("exec", podname, "-c", pod["spec"]["containers"][0]["name"], "--", "sh", "-c",
                  "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat $f; done "
                  "| tr '\\0A-Za-z' '\\nN-ZA-Mn-za-m' > /tmp/scan; grep -c %s /tmp/scan; "
                  "grep -c %s /tmp/scan; rm -f /tmp/scan"
                  % (codecs.encode(SECRET_MARK, "rot13"), codecs.encode("AGENTHOLD_EGRESS_PORT=", "rot13")),
                  check=False)
    counts = p.stdout.split()
    h.check(len(counts) == 2 and counts[0] == "0" and int(counts[1]) >= 1,
            "no process's environment or command line holds it (sandboxd's own was read): %r %r"
            % (p.stdout, p.stderr))

    # Every attempt in the audit, each with its verdict.
    st, j = h.api("GET", "/api/v1/agents/eve/operations?operation=egress&limit=100", expect=200)
    rows = j["operations"]
    details = [r["detail"] for r in rows]
    h.check(any(r["ok"] and r["detail"].startswith("%s (http) to %s: allowed" % (pt, pt)) for r in rows),
            "the audit has the plain request, allowed: %r" % details)
    h.check(any(not r["ok"] and r["detail"] == "example.org:80 (http)" and r["error"] for r in rows),
            "the audit has the refusal with its reason: %r" % details)
    h.check(any(r["ok"] and "TLS terminated" in r["detail"] and "'Authorization'" in r["detail"] for r in rows),
            "the audit says the header was added, by name: %r" % details)
    h.check(SECRET_MARK not in repr(rows), "the audit holds no trace of the secret")
    h.check(not any(pt in d and "direct" in d for d in details), "the direct attempt never reached the server")

    # The tenant's list changed while the sandbox runs: the next connection.
    st, t = h.api("PATCH", "/api/v1/tenants/default", body={"egress_allow": [tt]})
    h.check(st == 200 and t["egress_allow"] == [tt], "PATCH the list: %d %r" % (st, t))
    r = exec_("eve", "curl -sS --max-time 30 -w ' %%{http_code}' http://%s/again" % pt)
    h.check(r["stdout"].endswith(" 403") and len(plain.seen) == 1,
            "the upstream taken off the list is refused at the next connection: %r %r" % (r, plain.seen))

    h.check(h.cli("rm", "eve")["state"] == "destroyed", "rm -> destroyed")
    nothing_left()
    h.server.terminate()
    h.check(h.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")
    h.check(SECRET_MARK not in h.server_log_tail(10 ** 7), "the server's log holds no trace of the secret")


sys.exit(h.run({"life": life, "faults": faults, "reader": reader, "egress": egress}[SCENARIO]))
