#!/usr/bin/python3
"""bench/freeze/bench_freeze.py: the frozen tier (issue 29) on the real
server as a user runs it: the Docker driver, the shipped catalog's default
runtime (debian) and the real static sandboxd.

Three figures, each against a baseline of the same run:

- frozen -> an exec's answer (`POST /api/v1/agents/NAME/exec` of `echo x`
  on a frozen agent: the API thaws it, unpausing the container through the
  Engine API, and runs the command through the tunnel), against a bare
  Engine API unpause of a paused container of the same image followed by a
  bare exec of the same command in it (create + start, output read); goal:
  median <= 1.2x.
- the same frozen -> exec against sleeping -> exec of the same agent
  (`POST .../start?wait=1` then the same exec); goal: median <= 0.15x.
- a frozen sandbox's CPU over a window (default 60 s) from the Engine's
  stats (its cgroup's), as a share of one core; goal: <= 0.1 %.

The idle ladder does the freezing (sandbox.idle_minutes 0.05, that is 3 s,
checked every second; freeze_minutes 30 so nothing sleeps on its own).
Rounds interleave the three kinds; which of ours and bare goes first
alternates.

usage: bench_freeze.py [--report] [--rounds N] [--cpu-seconds S] AGENTHOLD_BINARY
Exits 77 without a Docker Engine, 3 when a figure misses its goal by more
than the noise bound (bench/README.md), 0 with --report whatever the
figures. Pool 10.214.136.0/22, prefix benchfreeze<pid>; removes what it
made, even on failure."""
import argparse
import os
import statistics
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "docker"))
sys.path.insert(0, os.path.join(HERE, "..", "docker"))
from ahdocker import engine, exec_in, Harness, Fail  # noqa: E402
from bench_docker import verdict  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--report", action="store_true", help="print the verdicts, exit 0 on a miss")
ap.add_argument("--rounds", type=int, default=7)
ap.add_argument("--cpu-seconds", type=float, default=60.0)
ap.add_argument("binary")
args = ap.parse_args()

h = Harness("bench.freeze", args.binary, "10.214.136.0/22", shipped_catalog=True)
for key in ("AGENTHOLD_SANDBOX_DEFAULT_IMAGE", "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB"):
    h.env.pop(key, None)
h.env["AGENTHOLD_SANDBOX_IDLE_MINUTES"] = "0.05"
h.env["AGENTHOLD_SANDBOX_IDLE_CHECK_INTERVAL"] = "1s"
h.env["AGENTHOLD_SANDBOX_FREEZE_MINUTES"] = "30"


def agent():
    st, a = h.api("GET", "/api/v1/agents/alice", timeout=10)
    if st != 200:
        raise Fail("GET alice: %d %r" % (st, a))
    return a


def wait_state(want, seconds=60):
    deadline = time.time() + seconds
    while True:
        a = agent()
        if a.get("state") == want:
            return a
        if time.time() > deadline:
            raise Fail("alice did not become %s within %d s: %s" % (want, seconds, a.get("state")))
        time.sleep(0.05)


def our_exec():
    st, r = h.api("POST", "/api/v1/agents/alice/exec", {"cmd": "echo x", "timeout": 20}, timeout=60)
    if st != 200 or r.get("stdout") != "x\n":
        raise Fail("exec: %d %r" % (st, r))


def ours_frozen():
    wait_state("frozen")
    time.sleep(0.5)                 # settled: the pause answered, the sleeper's pass done
    t0 = time.monotonic()
    our_exec()
    return time.monotonic() - t0


def ours_sleeping():
    st, r = h.api("POST", "/api/v1/agents/alice/stop?wait=1", timeout=120)
    if st not in (200, 202):
        raise Fail("stop: %d %r" % (st, r))
    wait_state("sleeping")
    time.sleep(0.5)
    t0 = time.monotonic()
    st, r = h.api("POST", "/api/v1/agents/alice/start?wait=1", timeout=120)
    if st not in (200, 202):
        raise Fail("start: %d %r" % (st, r))
    our_exec()
    return time.monotonic() - t0


def bare_frozen(cid):
    st, _ = engine("POST", "/containers/%s/pause" % cid)
    if st != 204:
        raise Fail("bare pause: %d" % st)
    time.sleep(0.5)
    t0 = time.monotonic()
    st, _ = engine("POST", "/containers/%s/unpause" % cid)
    if st != 204:
        raise Fail("bare unpause: %d" % st)
    out = exec_in(cid, ["/bin/sh", "-c", "echo x"])
    took = time.monotonic() - t0
    if out != "x\n":
        raise Fail("bare exec: %r" % out)
    return took


def cpu_usec(cid):
    """The container's CPU time so far (the Engine's stats, from its cgroup)."""
    st, j = engine("GET", "/containers/%s/stats?stream=false&one-shot=true" % cid, timeout=30)
    try:
        return j["cpu_stats"]["cpu_usage"]["total_usage"] // 1000
    except (TypeError, KeyError):
        raise Fail("stats of %s: %d %r" % (cid[:12], st, j))


def scenario(h):
    h.start_server()
    rc, out, err = h.run_cli("create", "alice", "--json", timeout=900)
    if rc != 0:
        raise Fail("create alice: %s" % err)
    aid = agent()["id"]
    info = h.container(aid)
    image = info["Config"]["Image"]
    # The bare side: a container of the same image, the same init and memory.
    st, c = engine("POST", "/containers/create?name=%s-bare" % h.prefix, {
        "Image": image, "Entrypoint": ["/bin/sleep", "infinity"], "Cmd": [],
        "Labels": {"agenthold.bench": h.prefix},
        "HostConfig": {"Init": True, "Memory": info["HostConfig"]["Memory"], "NetworkMode": "none"}})
    if st != 201:
        raise Fail("bare create: %d %r" % (st, c))
    bare = c["Id"]
    h.cleanups.append(lambda: engine("DELETE", "/containers/%s?force=true" % bare))
    st, _ = engine("POST", "/containers/%s/start" % bare)
    if st != 204:
        raise Fail("bare start: %d" % st)
    # Warm-up, untimed: one of each.
    ours_frozen()
    bare_frozen(bare)
    frozen, barez, sleeping = [], [], []
    for i in range(args.rounds):
        if i % 2:
            barez.append(bare_frozen(bare))
            frozen.append(ours_frozen())
        else:
            frozen.append(ours_frozen())
            barez.append(bare_frozen(bare))
        sleeping.append(ours_sleeping())
        print("round %d: frozen->exec %.1f ms, bare unpause+exec %.1f ms, sleeping->exec %.1f ms"
              % (i + 1, frozen[-1] * 1e3, barez[-1] * 1e3, sleeping[-1] * 1e3), flush=True)

    # A frozen sandbox's CPU over the window.
    wait_state("frozen")
    time.sleep(1.0)
    cid = h.container(aid)["Id"]
    u0, t0 = cpu_usec(cid), time.monotonic()
    time.sleep(args.cpu_seconds)
    u1, t1 = cpu_usec(cid), time.monotonic()
    if agent().get("state") != "frozen":
        raise Fail("alice left frozen during the CPU window")
    share = (u1 - u0) / 1e6 / (t1 - t0)

    mf, mb, ms = (statistics.median(x) for x in (frozen, barez, sleeping))
    r1, r2 = mf / mb, mf / ms
    results = [
        ("frozen -> exec vs bare unpause + exec (median)", r1, 1.2, "%.2fx" % r1),
        ("frozen -> exec vs sleeping -> exec (median)", r2, 0.15, "%.3fx" % r2),
        ("frozen sandbox CPU, share of one core over %.0f s" % (t1 - t0), share * 100, 0.1,
         "%.4f %%" % (share * 100)),
    ]
    print("\nbench/freeze: %d rounds, runtime %s" % (args.rounds, image))
    print("  frozen -> exec        median %.1f ms (min %.1f, max %.1f)" % (mf * 1e3, min(frozen) * 1e3, max(frozen) * 1e3))
    print("  bare unpause + exec   median %.1f ms (min %.1f, max %.1f)" % (mb * 1e3, min(barez) * 1e3, max(barez) * 1e3))
    print("  sleeping -> exec      median %.1f ms (min %.1f, max %.1f)" % (ms * 1e3, min(sleeping) * 1e3, max(sleeping) * 1e3))
    print("  frozen CPU            %d us over %.1f s" % (u1 - u0, t1 - t0))
    missed = False
    for name, value, goal, shown in results:
        v = verdict(value, goal)
        missed |= v == "MISSED"
        print("  %-58s %-10s goal <= %s: %s" % (name, shown, goal, v))
    rc, _, err = h.run_cli("rm", "alice", timeout=120)
    if rc != 0:
        raise Fail("rm alice: %s" % err)
    h.scenario_missed = missed


h.scenario_missed = False
rc = h.run(scenario)
if rc == 0 and h.scenario_missed and not args.report:
    rc = 3
sys.exit(rc)
