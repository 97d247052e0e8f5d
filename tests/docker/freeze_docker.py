#!/usr/bin/python3
"""tests/docker/freeze_docker.py: the frozen tier (issue 29) on the Docker
driver with the shipped catalog's default runtime and the real static
sandboxd.

With sandbox.idle_minutes 0.05 (3 s), idle_check_interval 1s and
freeze_minutes 1 (60 s, longer than every tunnel timeout: 45 s):
- an idle agent is frozen by the ladder (the container paused, shown
  `frozen` with frozen_at and stops_at, `agenthold ls` says "stops in");
- `sleep 1000 &` started before survives freeze and thaw with the same pid,
  and a file written before is there after;
- kept frozen for 50 s (past the server's and sandboxd's 45 s liveness
  timeouts), an exec thaws it and answers, over the same tunnel
  connection (no new "sandboxd connected", no liveness timeout in the
  log, connected all along);
- reading a file of a frozen agent answers from its home and never thaws it;
- `docker unpause` behind the server's back (Engine API) is noticed: running;
- left idle, it is frozen again and stopped (sleeping) freeze_minutes
  after, the audit naming the sleeper.

usage: freeze_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine. Pool 10.213.56.0/22, prefix
dockerfreeze<pid>; removes everything it made, even on failure."""
import json
import os
import re
import sys
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import Harness, engine  # noqa: E402

FROZEN_FOR_S = 50       # past every tunnel timeout (45 s both ways)
FREEZE_S = 60           # sandbox.freeze_minutes 1

h = Harness("docker.freeze", sys.argv[1], "10.213.56.0/22", shipped_catalog=True)
for key in ("AGENTHOLD_SANDBOX_DEFAULT_IMAGE", "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB"):
    h.env.pop(key, None)
h.env["AGENTHOLD_SANDBOX_IDLE_MINUTES"] = "0.05"
h.env["AGENTHOLD_SANDBOX_IDLE_CHECK_INTERVAL"] = "1s"
h.env["AGENTHOLD_SANDBOX_FREEZE_MINUTES"] = "1"


def agent():
    st, a = h.api("GET", "/api/v1/agents/alice", timeout=10)
    h.check(st == 200, "GET alice: %d %r" % (st, a))
    return a or {}


def wait_state(want, seconds):
    deadline = time.time() + seconds
    while True:
        a = agent()
        if a.get("state") == want or time.time() > deadline:
            return a
        time.sleep(0.1)


def exec_(cmd, timeout=60):
    return h.api("POST", "/api/v1/agents/alice/exec", {"cmd": cmd, "timeout": 20}, timeout=timeout)


def paused(aid):
    c = h.container(aid)
    return c["State"]["Running"], c["State"]["Paused"]


def log_count(pattern):
    with open(h.log, errors="replace") as f:
        return len(re.findall(pattern, f.read()))


def scenario(h):
    h.start_server()
    rc, out, err = h.run_cli("create", "alice", "--json", timeout=900)
    h.check(rc == 0, "create alice: %d %s" % (rc, err))
    a = json.loads(out)
    h.check(a["state"] == "running" and a["runtime"] == "debian",
            "the shipped default runs: %r" % {k: a.get(k) for k in ("state", "runtime")})
    aid = a["id"]
    h.check(a.get("no_freeze") is None, "the docker driver freezes: no_freeze null: %r" % a.get("no_freeze"))
    st, r = exec_("setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!; echo kept > $HOME/before.txt")
    h.check(st == 200 and r["status"] == 0, "a background sleep started: %d %r" % (st, r))
    pid = r["stdout"].strip() if st == 200 else ""
    h.check(pid.isdigit(), "its pid: %r" % pid)

    # Idle: the ladder freezes it (the container paused, not stopped).
    a = wait_state("frozen", 20)
    h.check(a.get("state") == "frozen", "an idle agent is frozen: %s" % a.get("state"))
    h.check(paused(aid) == (True, True), "its container is paused: %r" % (paused(aid),))
    # The sleeper's forecast of the stop comes with its next pass (1 s).
    deadline = time.time() + 5
    while not a.get("stops_at") and time.time() < deadline:
        time.sleep(0.2)
        a = agent()
    h.check(a.get("frozen_at") and a.get("stops_at") and a.get("sleeps_at") is None,
            "frozen_at and stops_at said, sleeps_at not: %r" %
            {k: a.get(k) for k in ("frozen_at", "stops_at", "sleeps_at")})
    rc, out, err = h.run_cli("ls")
    h.check(rc == 0 and re.search(r"alice\s+frozen.*stops in", out), "ls shows it frozen: %s" % out)
    connects = log_count(r"sandboxd connected")
    h.check(connects >= 1, "one connection so far: %d" % connects)

    # Kept frozen past every tunnel timeout; reading never thaws it.
    time.sleep(FROZEN_FOR_S / 2)
    st, body = h.api("GET", "/api/v1/agents/alice/fs/list?path=.", timeout=10)
    h.check(st == 200 and "before.txt" in json.dumps(body), "a frozen agent's files list: %d %r" % (st, body))
    time.sleep(FROZEN_FOR_S / 2)
    a = agent()
    h.check(a.get("state") == "frozen" and paused(aid) == (True, True),
            "still frozen after %d s (a read did not thaw it): %s" % (FROZEN_FOR_S, a.get("state")))

    # Any use thaws: an exec on the frozen agent answers.
    t0 = time.time()
    st, r = exec_("kill -0 %s && echo alive; cat $HOME/before.txt" % pid)
    took = time.time() - t0
    h.check(st == 200 and r["stdout"] == "alive\nkept\n",
            "an exec on a frozen agent thaws it and answers; the sleep has the same pid, the file "
            "is there: %d %r" % (st, r))
    print("frozen -> exec answered in %.3f s" % took)
    a = wait_state("running", 10)       # lifecycle writes it down as the engine's unpause returns
    h.check(a.get("state") == "running" and paused(aid) == (True, False),
            "thawed: %s %r" % (a.get("state"), paused(aid)))
    # The same tunnel: no reconnect, no liveness timeout, now or a little later.
    time.sleep(5)
    h.check(log_count(r"sandboxd connected") == connects,
            "no new sandboxd connection across the thaw (%d, then %d)" % (connects, log_count(r"sandboxd connected")))
    h.check(log_count(r"no ping answer|connection lost") == 0, "no liveness timeout in the log")
    h.check(agent().get("connected") is True, "connected")

    # docker unpause behind the server's back is noticed.
    a = wait_state("frozen", 20)
    h.check(a.get("state") == "frozen", "frozen again: %s" % a.get("state"))
    st, _ = engine("POST", "/containers/%s/unpause" % h.container(aid)["Id"])
    h.check(st == 204, "unpaused through the Engine API: %d" % st)
    a = wait_state("running", 10)
    h.check(a.get("state") == "running", "the server notices the unpause: %s" % a.get("state"))
    st, r = exec_("kill -0 %s && echo alive" % pid)
    h.check(st == 200 and r["stdout"] == "alive\n", "and it answers: %d %r" % (st, r))

    # The ladder's second step: frozen, then stopped freeze_minutes after.
    a = wait_state("frozen", 20)
    h.check(a.get("state") == "frozen", "frozen once more: %s" % a.get("state"))
    t0 = time.time()
    a = wait_state("sleeping", FREEZE_S + 20)
    h.check(a.get("state") == "sleeping", "stopped after freeze_minutes: %s" % a.get("state"))
    h.check(time.time() - t0 >= FREEZE_S - 10, "not before: %.1f s" % (time.time() - t0))
    h.check(not h.container(aid)["State"]["Running"], "its container is stopped")
    st, ops = h.api("GET", "/api/v1/agents/alice/operations")
    kinds = [(o["actor"], o["detail"]) for o in (ops or {}).get("operations", [])]
    h.check(("sleeper", "frozen") in kinds and ("sleeper", "sleeping") in kinds,
            "the audit names the sleeper for the freeze and the stop: %r" % kinds)
    h.check(("reconciler", "running") in kinds, "and the reconciler for the unpause: %r" % kinds)

    h.check(h.cli("rm", "alice")["state"] == "destroyed", "rm")
    c, n, v = h.leftovers()
    h.check(not c and not n and not v, "nothing left: %d %d %d" % (len(c), len(n), len(v)))


sys.exit(h.run(scenario))
