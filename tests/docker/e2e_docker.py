#!/usr/bin/python3
"""tests/docker/e2e_docker.py: the real `agenthold serve` with the Docker
driver and the real static sandboxd, driven by the agenthold CLI, checked
against the Docker Engine API (never the docker CLI).

create -> running (sandboxd's hello through the tunnel's unix socket);
the container (no network) and volume exist with their labels and limits; stop -> sleeping with the container stopped; start; a `docker stop`
done by hand (through the Engine API) is noticed (sleeping); an update of
the memory and a rebuild change the container; kill -9 of the server and a
restart: the agent is running again; rm -> nothing of it is left.

usage: e2e_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine. Ports from ahserver.free_port, pool
10.213.96.0/20, prefix dockere2e<pid>. Removes everything it made, even on
failure (tests/docker/ahdocker.py)."""
import os
import signal
import sys
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import Harness, engine  # noqa: E402

h = Harness("docker.e2e", sys.argv[1], "10.213.96.0/20")


def scenario(h):
    h.start_server()
    t0 = time.time()
    a = h.cli("create", "alice", "--memory-mb", "192")
    h.check(a["state"] == "running", "create waits for sandboxd's hello: %r" % a["state"])
    print("create -> running in %.2f s" % (time.time() - t0))
    aid = a["id"]
    c = h.container(aid)
    h.check(c and c["State"]["Running"], "the container runs")
    h.check(c["HostConfig"]["Memory"] == 192 * 1024 * 1024 and c["HostConfig"]["Init"],
            "memory and init: %r" % {k: c["HostConfig"][k] for k in ("Memory", "Init")})
    h.check(c["Config"]["Labels"].get("agenthold.agent") == aid, "labelled with the agent id")
    st, _ = engine("GET", "/networks/%s-net-%s" % (h.prefix, aid))
    h.check(st == 404 and c["HostConfig"]["NetworkMode"] == "none",
            "no network (its runtime needs none): %d %r" % (st, c["HostConfig"]["NetworkMode"]))
    st, _ = engine("GET", "/volumes/%s-home-%s" % (h.prefix, aid))
    h.check(st == 200, "its home volume exists")

    h.check(h.cli("stop", "alice")["state"] == "sleeping", "stop -> sleeping")
    h.check(not h.container(aid)["State"]["Running"], "the container is stopped")
    h.check(h.cli("start", "alice")["state"] == "running", "start -> running")

    # By hand, as an operator would with `docker stop`.
    st, _ = engine("POST", "/containers/%s-%s/stop?t=1" % (h.prefix, aid))
    h.check(st == 204, "stop by hand through the Engine API")
    h.wait_state("alice", "sleeping", 15)
    h.check(h.cli("start", "alice")["state"] == "running", "start after the stop by hand")

    # Update + rebuild: the new container has the new memory, the home stays.
    st, a = h.api("PATCH", "/api/v1/agents/alice", {"memory_mb": 256})
    h.check(st == 200 and a["needs_rebuild"], "PATCH memory_mb: %d %r" % (st, a))
    h.check(h.cli("rebuild", "alice")["state"] == "running", "rebuild -> running")
    c = h.container(aid)
    h.check(c["HostConfig"]["Memory"] == 256 * 1024 * 1024, "the rebuilt container has 256 MiB")
    h.check(h.cli("show", "alice")["needs_rebuild"] is False, "rebuilt: no rebuild needed")

    # The server dies hard while the sandbox runs; a new one finds it running.
    h.kill_server()
    h.check(h.container(aid)["State"]["Running"], "the sandbox outlives the server")
    h.start_server()
    h.wait_state("alice", "running", 60)

    t0 = time.time()
    h.check(h.cli("rm", "alice")["state"] == "destroyed", "rm -> destroyed")
    c, n, v = h.leftovers()
    h.check(not c and not n and not v, "nothing of the agent is left: %d containers, %d networks, "
            "%d volumes" % (len(c), len(n), len(v)))
    h.server.send_signal(signal.SIGTERM)
    h.check(h.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")


sys.exit(h.run(scenario))
