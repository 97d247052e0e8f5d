#!/usr/bin/python3
"""tests/docker/ttl_docker.py: the container lifetime on the Docker driver,
the real `agenthold serve` and the real static sandboxd.

With sandbox.container_ttl 3s: a stopped agent shows container_expires_at;
at its TTL the container is removed (the Engine has no such container any
more) while its home volume and network stay, the file written in the home
with them; the audit trail says the TTL did it; the next start re-creates
the container from the image, sandboxd says hello again, and the file is
still in the home. Checked through the CLI, the REST API and the Engine
API (never the docker CLI).

usage: ttl_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine. Ports from ahserver.free_port, pool
10.213.224.0/20, prefix dockerttl<pid>."""
import os
import sys
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import engine, put_home_file, q, read_file_from_container, Harness  # noqa: E402

h = Harness("docker.ttl", sys.argv[1], "10.213.224.0/20")
h.env["AGENTHOLD_SANDBOX_CONTAINER_TTL"] = "3s"
h.env["AGENTHOLD_SANDBOX_TTL_CHECK_INTERVAL"] = "500ms"
TTL_S = 3.0


def scenario(h):
    h.start_server()
    a = h.cli("create", "expiring")
    h.check(a["state"] == "running", "create -> running: %r" % a["state"])
    aid = a["id"]
    cid = h.container(aid)["Id"]
    vol = "%s-home-%s" % (h.prefix, aid)
    net = "%s-net-%s" % (h.prefix, aid)
    put_home_file(cid, "kept.txt", b"the home outlives its container\n")
    # A network only when the runtime needs one (docs/docker.md).
    had_net = engine("GET", "/networks/%s" % q(net))[0] == 200

    a = h.cli("stop", "expiring")
    h.check(a["state"] == "sleeping", "stop -> sleeping: %r" % a["state"])
    stopped = time.time()
    a = h.cli("show", "expiring")
    h.check(a.get("container_expires_at") and not a.get("container_removed"),
            "a sleeping agent says when its container expires: %r" % a)
    h.check(h.container(aid) is not None, "the stopped container is there before its TTL")

    # At its TTL (and within a check interval or two) the container goes.
    deadline = stopped + TTL_S + 15
    while h.container(aid) is not None:
        h.check(time.time() < deadline, "the container is removed at its TTL")
        time.sleep(0.2)
    gone_after = time.time() - stopped
    print("container removed %.1f s after the stop (TTL %.0f s, checks every 0.5 s)" % (gone_after, TTL_S))
    h.check(gone_after >= TTL_S - 0.5, "not before its TTL: %.1f s" % gone_after)
    st, _ = engine("GET", "/volumes/%s" % vol)
    h.check(st == 200, "the home volume stays")
    st, _ = engine("GET", "/networks/%s" % q(net))
    h.check(st == (200 if had_net else 404), "the agent's network stays as it was (%s): %d" %
            ("had one" if had_net else "none", st))
    a = h.wait_state("expiring", "sleeping")
    deadline = time.time() + 10
    while not a.get("container_removed") and time.time() < deadline:
        time.sleep(0.2)
        a = h.cli("show", "expiring")
    h.check(a.get("container_removed") and a.get("container_expires_at") is None,
            "the agent shows its container removed, still asleep: %r" % a)
    st, ops = h.api("GET", "/api/v1/agents/expiring/operations?operation=container.expire")
    h.check(st == 200 and len(ops["operations"]) == 1 and ops["operations"][0]["actor"] == "ttl"
            and ops["operations"][0]["ok"], "the audit trail says the TTL removed it: %r" % ops)
    # The reconciler's view of a container gone on purpose changes nothing.
    time.sleep(2)                       # pacing: a window in which nothing may change
    a = h.cli("show", "expiring")
    h.check(a["state"] == "sleeping" and not a.get("error"), "still asleep, no error: %r" % a)

    # The next start re-creates it from the image, the home as it was.
    a = h.cli("start", "expiring")
    h.check(a["state"] == "running", "start re-creates and runs it: %r (%s)" % (a["state"], a.get("error")))
    c = h.container(aid)
    h.check(c and c["State"]["Running"] and c["Id"] != cid, "a new container runs")
    h.check(read_file_from_container(c["Id"], "/home/agent/kept.txt") == b"the home outlives its container\n",
            "the file in the home survived its container")
    a = h.cli("show", "expiring")
    h.check(not a.get("container_removed"), "the container is back: %r" % a)

    h.check(h.cli("rm", "expiring")["state"] == "destroyed", "rm")
    c, n, v = h.leftovers()
    h.check(not c and not n and not v, "nothing left: %d %d %d" % (len(c), len(n), len(v)))
    h.server.terminate()
    h.check(h.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")


sys.exit(h.run(scenario))
