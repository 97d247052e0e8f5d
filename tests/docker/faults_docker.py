#!/usr/bin/python3
"""tests/docker/faults_docker.py: the real `agenthold serve` with the Docker
driver killed with SIGKILL in the middle of create, of start and of
destroy, then started again: it comes back to a consistent state.

For each operation the test asks for it through the REST API (no wait),
kills the server after a delay from a list that spans the operation
(tens to hundreds of ms), and reads the stored state from the database
while the server is dead: that says which phase the kill caught
(creating, starting, destroying, or already done). Each operation must
have been caught in its middle at least once. After each restart it
waits until the agent has settled and checks, against the database and
the Engine API (never the docker CLI):
  - an interrupted create or start ends running (sandboxd connected);
    an interrupted destroy ends with the agent gone and its container,
    volume, network and tombstone gone;
  - the networks table matches the engine's networks of this prefix
    exactly (agent and subnet): no leaked subnet, no network without a row;
  - every container, volume and network of this prefix belongs to a
    stored agent (no orphans); a running row has a running container and
    a sleeping row a stopped one.
docker.e2e already covers a kill while running; this covers the phases.

usage: faults_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine. Ports from ahserver.free_port, pool
10.213.128.0/20, prefix dockerfaults<pid>."""
import ipaddress
import os
import sqlite3
import sys
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import Fail, Harness, engine  # noqa: E402

h = Harness("docker.faults", sys.argv[1], "10.213.128.0/20")
DELAYS = {
    "create": [0.03, 0.05, 0.08, 0.15, 0.3],
    "start": [0.02, 0.06, 0.12, 0.25],
    "destroy": [0.0, 0.02, 0.06, 0.12, 0.25],
}
MIDDLE = {"create": ("creating", "starting"), "start": ("starting",), "destroy": ("destroying",)}
caught = {op: [] for op in DELAYS}


def db():
    c = sqlite3.connect(os.path.join(h.data, "agenthold.db"), timeout=10)
    c.row_factory = sqlite3.Row
    return c


def stored_state(agent_id):
    with db() as c:
        r = c.execute("SELECT state FROM sandboxes WHERE agent_id = ?", (agent_id,)).fetchone()
        if r:
            return r["state"]
        t = c.execute("SELECT 1 FROM tombstones WHERE agent_id = ?", (agent_id,)).fetchone()
        return "tombstone" if t else "gone"


def agent_labels(objs, key="Labels"):
    return {(o.get(key) or {}).get("agenthold.agent") for o in objs} - {None}


def consistent(where, seconds=10):
    """The database and the engine agree; raises Fail naming what does not.
    The engine may lag behind sandboxd: a start's process runs, and says
    hello, before the engine's own state says running (on a loaded
    machine, for a second or more). So a disagreement is looked at again
    until seconds have passed."""
    deadline = time.time() + seconds
    while True:
        try:
            return s_consistent(where)
        except Fail:
            if time.time() > deadline:
                raise
            time.sleep(0.3)


def s_consistent(where):
    with db() as c:
        agents = {r["id"] for r in c.execute("SELECT id FROM agents")}
        states = {r["agent_id"]: r["state"] for r in c.execute("SELECT agent_id, state FROM sandboxes")}
        rows = {(r["agent_id"], r["subnet"]) for r in c.execute("SELECT agent_id, subnet FROM networks")}
        tombs = {r["agent_id"] for r in c.execute("SELECT agent_id FROM tombstones")}
    cs, ns, vs = h.leftovers()
    nets = set()
    for n in ns:
        _, full = engine("GET", "/networks/%s" % n["Id"])
        nets.add((full["Labels"].get("agenthold.agent"), full["IPAM"]["Config"][0]["Subnet"]))
    h.check(rows == nets, "%s: the networks table %r matches the engine's networks %r" %
            (where, sorted(rows), sorted(nets)))
    for owner, subnet in rows:
        net = ipaddress.ip_network(subnet)
        h.check(net.subnet_of(ipaddress.ip_network(h.pool)), "%s: %s inside the pool" % (where, subnet))
    h.check(len({s for _, s in rows}) == len(rows), "%s: no subnet given twice" % where)
    for kind, objs in (("container", cs), ("volume", vs)):
        stray = agent_labels(objs) - agents
        h.check(not stray, "%s: %ss of agents not stored: %r" % (where, kind, stray))
    h.check(not ({a for a, _ in rows} - agents), "%s: networks rows of agents not stored" % where)
    h.check(not (tombs & agents) and not tombs, "%s: destroys still owed: %r" % (where, tombs))
    by_agent = {c["Labels"].get("agenthold.agent"): c for c in cs}
    for aid, st in states.items():
        c = by_agent.get(aid)
        mine = ["%s %s %s" % (x["Names"], x["State"], x["Status"]) for x in cs
                if x["Labels"].get("agenthold.agent") == aid]
        if st == "running":
            h.check(c and c["State"] == "running", "%s: %s stored running, containers %r" %
                    (where, aid, mine))
        elif st == "sleeping":
            h.check(c and c["State"] != "running", "%s: %s stored sleeping, container %r" %
                    (where, aid, c and c["State"]))
        else:
            raise Fail("%s: %s left in state %s" % (where, aid, st))
    return len(rows)


def settle(name, want, seconds=40):
    """Waits for the agent to reach want ('gone' for a destroy)."""
    deadline = time.time() + seconds
    while True:
        st, a = h.api("GET", "/api/v1/agents/%s" % name)
        state = "gone" if st == 404 else (a or {}).get("state")
        if state == want:
            return
        if time.time() > deadline:
            raise Fail("%s: state %s, not %s, %d s after the restart (error: %s)" %
                       (name, state, want, seconds, (a or {}).get("error")))
        time.sleep(0.2)


def kill_during(op, name, delay):
    """Asks for op on name, kills the server after delay, returns the agent
    id and the stored state at the kill."""
    if op == "create":
        st, a = h.api("POST", "/api/v1/agents", {"name": name})
        h.check(st == 201, "create %s: %d %r" % (name, st, a))
    elif op == "start":
        st, a = h.api("POST", "/api/v1/agents/%s/start" % name)
        h.check(st in (200, 202), "start %s: %d %r" % (name, st, a))
    else:
        st, a = h.api("DELETE", "/api/v1/agents/%s" % name)
        h.check(st in (200, 202), "destroy %s: %d %r" % (name, st, a))
    time.sleep(delay)                   # pacing: killed this far into the operation
    h.kill_server()
    state = stored_state(a["id"])
    caught[op].append(state)
    cs, ns, vs = h.leftovers()
    left = [kind for kind, objs in (("container", cs), ("network", ns), ("volume", vs))
            if a["id"] in agent_labels(objs)]
    print("SIGKILL %3d ms into %-7s: stored state %-10s engine has %s" %
          (delay * 1000, op, state, "+".join(left) or "nothing"))
    return a["id"], state


def scenario(h):
    h.start_server()
    n = 0
    # Create: killed at each delay, restarted, the agent ends running.
    for delay in DELAYS["create"]:
        n += 1
        name = "c%d" % n
        kill_during("create", name, delay)
        h.start_server()
        settle(name, "running")
        consistent("after a kill during create of %s" % name)

    # Start: one agent put to sleep, then started and killed, each delay.
    st, _ = h.api("POST", "/api/v1/agents/c1/stop?wait=1")
    h.check(st == 200, "stop c1: %d" % st)
    for delay in DELAYS["start"]:
        kill_during("start", "c1", delay)
        h.start_server()
        settle("c1", "running")
        consistent("after a kill during start")
        st, a = h.api("POST", "/api/v1/agents/c1/stop?wait=1")
        h.check(st == 200 and a["state"] == "sleeping", "stop c1 again: %d %r" % (st, a))

    # Destroy: each created agent destroyed with a kill in its middle.
    names = ["c%d" % i for i in range(1, n + 1)]
    for name, delay in zip(names, DELAYS["destroy"]):
        kill_during("destroy", name, delay)
        h.start_server()
        settle(name, "gone")
        consistent("after a kill during destroy of %s" % name)

    for op, states in caught.items():
        h.check(any(s in MIDDLE[op] for s in states),
                "a kill caught %s in its middle (%s) at least once: %r" % (op, MIDDLE[op], states))

    for name in names[len(DELAYS["destroy"]):]:
        st, _ = h.api("DELETE", "/api/v1/agents/%s?wait=1" % name)
        h.check(st == 200, "rm %s: %d" % (name, st))
    h.check(consistent("at the end") == 0, "no subnet left allocated")
    c, nets, v = h.leftovers()
    h.check(not c and not nets and not v, "nothing left: %d %d %d" % (len(c), len(nets), len(v)))
    h.server.terminate()
    h.check(h.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")


sys.exit(h.run(scenario))
