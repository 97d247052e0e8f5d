#!/usr/bin/python3
"""tests/e2e/e2e_pool.py: warm pools (issue 31) through the real `agenthold
serve` (fake driver, the source's catalog and lua/, whose pool.lua keeps
two warm sandboxes of the default runtime, frozen; sandbox.warm_pool_max 2), with
a 3 s idle timeout and a 1 s idle check:

- the pool fills and stays: warm sandboxes are never put to sleep however
  idle (the sleeper does not look at them), and no listing shows them;
- `agenthold create` takes one: running at once (the 201 says warm), its
  first exec answers, `agenthold pool` counts the hit and shows the pool
  full again;
- the agent taken is an agent like any other: left idle, it falls asleep;
- /metrics counts the hit and the warm sandboxes; the server stops cleanly.

usage: e2e_pool.py AGENTHOLD_BINARY
Always kills the server it started and removes its temporary directory."""
import json
import os
import re
import shutil
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import ahserver  # noqa: E402

SRC = os.path.join(HERE, "..", "..")


class Fail(Exception):
    pass


h = ahserver.ServerHarness("e2e.pool", sys.argv[1], Fail)
h.env = ahserver.server_env(h.data, ahserver.free_port(fail=Fail), ahserver.free_port(fail=Fail), extra={
    "AGENTHOLD_SANDBOX_WARM_POOL_MAX": "2",
    "AGENTHOLD_SANDBOX_IDLE_MINUTES": "0.05",
    "AGENTHOLD_SANDBOX_IDLE_CHECK_INTERVAL": "1s",
    "AGENTHOLD_CATALOG_PATH": os.path.join(SRC, "catalog", "runtimes.json"),
    "AGENTHOLD_POLICY_LUA_DIR": os.path.join(SRC, "lua"),
})
h.url = "http://" + h.env["AGENTHOLD_SERVER_LISTEN"]


def pool_row():
    """agenthold pool's debian row (size, ready, making) and its summary line."""
    rc, out, err = h.run_cli("pool")
    h.check(rc == 0, "agenthold pool: %d %r" % (rc, err))
    m = re.search(r"^debian\s+(\d+)\s+(\d+)\s+(\d+)\s", out, re.M)
    s = re.search(r"^hits (\d+), misses (\d+), drained (\d+)", out, re.M)
    return (tuple(int(x) for x in m.groups()) if m else None), (tuple(int(x) for x in s.groups()) if s else None)


def scenario():
    h.start_server()
    ahserver.wait_until(lambda: pool_row()[0] == (2, 2, 0), 20, "the pool full", Fail)
    # Idle far past the 3 s idle timeout: still warm, still two.
    time.sleep(8)       # the idle timeout (3 s) and several idle checks (1 s) pass
    row, counts = pool_row()
    h.check(row == (2, 2, 0) and counts == (0, 0, 0), "warm sandboxes are never idled: %r %r" % (row, counts))
    st, body = ahserver.request(h.port(), "GET", "/api/v1/agents", None, h.token())
    h.check(st == 200 and json.loads(body)["agents"] == [], "no listing shows them: %d %r" % (st, body))

    t0 = time.monotonic()
    st, body = ahserver.request(h.port(), "POST", "/api/v1/agents", {"name": "x"}, h.token())
    took = time.monotonic() - t0
    a = json.loads(body) if body else {}
    h.check(st == 201 and a.get("state") == "running" and a.get("warm") is True,
            "a create takes a warm sandbox, running in its 201: %d %r" % (st, a))
    print("create (warm) answered running in %.3f s" % took)
    rc, out, err = h.run_cli("exec", "x", "--", "echo", "hi")
    h.check(rc == 0 and out == "hi\n", "its first exec answers: %d %r %r" % (rc, out, err))
    ahserver.wait_until(lambda: pool_row() == ((2, 2, 0), (1, 0, 0)), 20, "the pool refilled, one hit", Fail)
    # The agent taken is an agent: left idle, it falls asleep.
    h.wait_state("x", "sleeping", 20)
    row, counts = pool_row()
    h.check(row == (2, 2, 0), "the warm ones stay: %r" % (row,))
    st, text = ahserver.request(h.port(), "GET", "/metrics", None, h.token())
    text = text.decode()
    h.check(st == 200 and "\nagenthold_warm_pool_hits_total 1\n" in text
            and 'agenthold_warm_sandboxes{runtime="debian",state="frozen"} 2\n' in text,
            "/metrics: one hit, two warm frozen (the shipped pool.lua keeps them frozen)")
    h.check(h.cli("rm", "x")["state"] == "destroyed", "rm x")
    # A clean stop (a sanitized build's leak check runs here).
    h.server.terminate()
    h.check(h.server.wait(timeout=60) == 0, "the server exits 0 on SIGTERM")


try:
    scenario()
    print("e2e.pool: %d checks passed" % h.checks)
    rc = 0
except Fail as e:
    print("FAILED: %s\n---- server log ----\n%s" % (e, h.server_log_tail()), file=sys.stderr)
    rc = 1
finally:
    h.stop_server()
    shutil.rmtree(h.tmp, ignore_errors=True)
sys.exit(rc)
