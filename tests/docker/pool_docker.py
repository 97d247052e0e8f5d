#!/usr/bin/python3
"""tests/docker/pool_docker.py: warm pools (issue 31) on the Docker driver
with the shipped catalog's default runtime, the shipped lua/pool.lua (two
warm sandboxes of the default runtime) and the real static sandboxd.

- the pool fills: two warm containers running, no tenant's (not listed,
  /metrics counts them as agenthold_warm_sandboxes);
- a create of the default shape is `running` in its 201 (`warm`: true),
  its home fresh and its own (the agent user's, holding just what a
  cold sandbox's holds: the image's skeleton), its
  first exec answers, its boot token's hash is its own (the database read);
- the pool refills (a third container, two warm again); `agenthold pool`
  and /metrics say size 2, ready 2, one hit;
- two tenants each take from the one pool and see nothing of each other;
- another shape (memory_mb) is a cold create;
- kill -9 of the server right after a take, the refill under way (the pool
  half made), and a restart: the pool is full again and every container of
  the run belongs to a row of the database (nothing orphaned);
- a restart with sandbox.warm_pool_max 0 drains the pool; the agents
  stay; rm leaves nothing.

usage: pool_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine. Pool 10.213.220.0/22, prefix
dockerpool<pid>; removes everything it made, even on failure."""
import json
import os
import re
import sqlite3
import sys
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import Harness, engine  # noqa: E402
import ahserver  # noqa: E402

h = Harness("docker.pool", sys.argv[1], "10.213.220.0/22", shipped_catalog=True)
for key in ("AGENTHOLD_SANDBOX_DEFAULT_IMAGE", "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB",
            "AGENTHOLD_SANDBOX_DEFAULT_CPUS"):
    h.env.pop(key, None)
h.env["AGENTHOLD_SANDBOX_WARM_POOL_MAX"] = "2"


def warm(state="running"):
    """agenthold_warm_sandboxes{runtime="debian",state=...} from /metrics."""
    st, text = ahserver.request(h.port(), "GET", "/metrics", None, h.token(), {}, 10)
    if st != 200:
        return -1
    m = re.search(r'^agenthold_warm_sandboxes\{runtime="debian",state="%s"\} (\d+)$' % state,
                  text if isinstance(text, str) else text.decode(), re.M)
    return int(m.group(1)) if m else 0


def wait_warm(n, seconds, what):
    ahserver.wait_until(lambda: warm() == n, seconds, what, h.fail, interval=0.2)


def containers():
    _, c = engine("GET", "/containers/json?all=1&filters=" + h.label_filter())
    return {x["Labels"].get("agenthold.agent"): x for x in (c or [])}


def db(sql, *args):
    con = sqlite3.connect("file:%s?mode=ro" % os.path.join(h.data, "agenthold.db"), uri=True, timeout=10)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def call(method, path, body=None, token=None, timeout=60):
    st, text = ahserver.request(h.port(), method, path, json.dumps(body) if body is not None else None,
                                token or h.token(), {"Content-Type": "application/json"}, timeout)
    try:
        return st, json.loads(text) if text else None
    except ValueError:
        return st, None


def home_of(name, token=None):
    """What the agent's home holds (names), after checking it is the
    agent user's."""
    st, r = call("POST", "/api/v1/agents/%s/exec" % name,
                 {"cmd": "stat -c %U /home/agent; id -un; ls -A /home/agent", "timeout": 20}, token)
    out = (r or {}).get("stdout", "").split("\n")
    h.check(st == 200 and len(out) >= 2 and out[0] == out[1] and out[0],
            "%s's home is its user's: %d %r" % (name, st, r))
    return sorted(x for x in out[2:] if x)


def take(name, token=None):
    """A create of the default shape; it must be a warm take."""
    t0 = time.monotonic()
    st, a = call("POST", "/api/v1/agents", {"name": name}, token)
    took = time.monotonic() - t0
    h.check(st == 201 and a and a.get("state") == "running" and a.get("warm") is True,
            "create %s takes a warm sandbox, running in its 201: %d %r" % (name, st, a))
    return (a or {}).get("id"), took


def scenario(h):
    h.start_server()
    # The pool fills with the shipped default runtime (its image may have to
    # be built first: minutes on a cold machine).
    wait_warm(2, 900, "two warm sandboxes running")
    warm_ids = {r[0] for r in db("SELECT id FROM agents WHERE pool = 'debian' AND tenant = ''")}
    h.check(len(warm_ids) == 2, "two warm rows, no tenant's: %r" % warm_ids)
    c = containers()
    h.check(set(c) == warm_ids and all(x["State"] == "running" for x in c.values()),
            "their two containers run: %r" % {k: v["State"] for k, v in c.items()})
    st, listed = call("GET", "/api/v1/agents")
    h.check(st == 200 and listed.get("agents") == [], "warm sandboxes are nobody's agents: %r" % listed)

    # A take: running at once, its home empty and its own, exec works.
    aid, took = take("alice")
    h.check(aid in warm_ids, "alice is one of the warm sandboxes")
    print("create (warm) answered running in %.3f s" % took)
    t0 = time.monotonic()
    st, r = call("POST", "/api/v1/agents/alice/exec", {"cmd": "true", "timeout": 20})
    print("its first exec (true) answered in %.3f s" % (time.monotonic() - t0))
    h.check(st == 200 and r["status"] == 0, "its first exec answers: %d %r" % (st, r))
    home = home_of("alice")
    hashes = db("SELECT agent_id, boot_token_hash FROM sandboxes")
    mine = [hh for i, hh in hashes if i == aid]
    h.check(mine and mine[0] and len(mine[0]) == 64 and [hh for _, hh in hashes].count(mine[0]) == 1,
            "its boot token is its own: %r" % hashes)
    st, a = call("GET", "/api/v1/agents/alice")
    h.check(st == 200 and a["tenant"] == "default" and a["state"] == "running" and a["connected"],
            "alice is the default tenant's, running, connected: %r" % a)

    # The pool refills.
    wait_warm(2, 120, "the pool refilled")
    h.check(len(containers()) == 3, "three containers: alice and two warm")
    rc, out, err = h.run_cli("pool")
    h.check(rc == 0 and re.search(r"^debian\s+2\s+2\s+0\s+\d+s\s*$", out, re.M)
            and "hits 1, misses 0, drained 0 (sandbox.warm_pool_max 2)" in out,
            "agenthold pool: size 2, ready 2, one hit: %d %r %r" % (rc, out, err))
    st, text = ahserver.request(h.port(), "GET", "/metrics", None, h.token(), {}, 10)
    text = text.decode() if isinstance(text, bytes) else text
    h.check(st == 200 and "\nagenthold_warm_pool_hits_total 1\n" in text
            and "\nagenthold_warm_pool_misses_total 0\n" in text, "/metrics counts the hit")

    # Two tenants from the one pool, seeing nothing of each other.
    tokens = {}
    for t in ("acme", "globex"):
        st, _ = call("POST", "/api/v1/tenants", {"name": t})
        h.check(st in (200, 201), "tenant %s made: %d" % (t, st))
        rc, out, err = h.run_cli("--tenant", t, "token", "create", "--name", t + "-ci")
        h.check(rc == 0 and len(out.strip()) == 64, "a token of %s: %d %r" % (t, rc, err))
        tokens[t] = out.strip()
    ids = {}
    for t in ("acme", "globex"):
        ids[t], _ = take("w-" + t, tokens[t])
        st, r = call("POST", "/api/v1/agents/w-%s/exec" % t,
                     {"cmd": "echo %s > /home/agent/mine.txt" % t, "timeout": 20}, tokens[t])
        h.check(st == 200 and r["status"] == 0, "%s writes a file: %d %r" % (t, st, r))
        got = home_of("w-" + t, tokens[t])
        h.check(got == sorted(home + ["mine.txt"]), "%s's home holds its own file and nothing of another "
                "agent: %r" % (t, got))
    for t, other in (("acme", "globex"), ("globex", "acme")):
        st, listed = call("GET", "/api/v1/agents", token=tokens[t])
        names = [a["name"] for a in (listed or {}).get("agents", [])]
        h.check(st == 200 and names == ["w-" + t], "%s lists only its own: %r" % (t, names))
        st, _ = call("GET", "/api/v1/agents/%s" % ids[other], token=tokens[t])
        h.check(st == 404, "%s cannot see %s's agent by id: %d" % (t, other, st))
        st, _ = call("POST", "/api/v1/agents/w-%s/exec" % other, {"cmd": "true"}, tokens[t])
        h.check(st == 404, "%s cannot exec in %s's agent: %d" % (t, other, st))

    # Another shape: a cold create.
    st, a = call("POST", "/api/v1/agents", {"name": "bob", "memory_mb": 256})
    h.check(st == 201 and a["state"] == "creating" and not a.get("warm"), "another shape is cold: %d %r" % (st, a))
    h.wait_state("bob", "running", 120)
    cold_home = home_of("bob")
    h.check(home == cold_home, "a warm sandbox's home holds what a cold one's holds (the image's "
            "skeleton) and nothing else: %r vs %r" % (home, cold_home))

    # kill -9 with the pool half made: take one, kill at once.
    wait_warm(2, 120, "the pool full before the kill")
    cid, _ = take("carol")
    h.kill_server()
    h.start_server()
    wait_warm(2, 180, "the pool full again after the restart")
    rows = {r[0] for r in db("SELECT id FROM agents")}
    c = containers()
    h.check(set(c) <= rows, "every container belongs to a row (nothing orphaned): %r" % (set(c) - rows))
    h.check(len(rows) == 7 and len(c) == 7,
            "alice, w-acme, w-globex, bob, carol and two warm: %d rows, %d containers" % (len(rows), len(c)))
    h.wait_state("carol", "running", 60)

    # No warm pools any more: the pool drains, the agents stay.
    h.server.terminate()
    h.check(h.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")
    h.env["AGENTHOLD_SANDBOX_WARM_POOL_MAX"] = "0"
    h.start_server()
    ahserver.wait_until(lambda: not db("SELECT id FROM agents WHERE pool IS NOT NULL"), 120,
                        "the warm rows drained", h.fail, interval=0.2)
    ahserver.wait_until(lambda: len(containers()) == 5, 60, "five containers left", h.fail, interval=0.2)
    for name, tok in (("alice", None), ("bob", None), ("carol", None),
                      ("w-acme", tokens["acme"]), ("w-globex", tokens["globex"])):
        st, _ = call("DELETE", "/api/v1/agents/%s" % name, token=tok)
        h.check(st in (200, 202), "rm %s: %d" % (name, st))
    ahserver.wait_until(lambda: not any(h.leftovers()), 120, "nothing left", h.fail, interval=0.5)
    h.finish()


sys.exit(h.run(scenario))
