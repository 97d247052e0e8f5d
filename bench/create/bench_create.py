#!/usr/bin/python3
"""bench/create/bench_create.py: create -> first command (issue 31's table:
the cold path, then with the warm pool), through the API as a client would, on the
Docker driver with the shipped catalog's default runtime, against the
floor a Docker sandbox cannot beat: a bare Engine API exec of `true` into
an already running container, measured in the same run.

Ours, per agent: POST /api/v1/agents?wait=1 (the agent running, its
sandboxd connected), then POST /api/v1/agents/{name}/exec {"cmd": "true"}
until it answers status 0; timed from the create's request to the exec's
answer. Three shapes, as the field's public benchmark runs them:
sequential (one after another), staggered (one started every 200 ms), and
a burst (all at once, one thread each). The caps are raised for the run
(PUT /api/v1/policy), so a refusal is a failure, not a limit. Each create
is accounted for: succeeded, refused (with its sentence) or failed.

Bare: POST /containers/{id}/exec + /exec/{id}/start of `true` into one
running container of the same image, timed the same way, interleaved with
the sequential rounds.

With the pool (issue 31, docs/lifecycle.md "Warm pools"), in the same run
after the cold rows: the server restarted with a pool of the default
runtime as large as the burst (a pool.lua of the run's own,
sandbox.warm_pool_max to match), the same three shapes again, each shape
and each sequential create started once the pool is full again (GET
/api/v1/pool: its refill done, the engine quiet); a create that finds the
pool empty is a cold create and counted in the figures as it is.

usage: bench_create.py [--sequential N] [--staggered N] [--burst N] [--no-pool | --pool-only] [--frozen] AGENTHOLD_BINARY
(--pool-only: the pool's rows alone, without the cold ones or the ratio to them;
--frozen: the run's pool.lua keeps its warm sandboxes frozen, as the shipped
one does, and each create waits until the pool is full and frozen; without
it they run)
Prints median, p95, p99 and the success rate of each shape, and the
sequential median as a ratio of the bare exec's. Exits 77 without a
Docker Engine, 1 when a create is lost (neither succeeded nor refused with
a sentence) or something is left behind. Ports from ahserver.free_port,
pool 10.215.0.0/16, prefix benchcreate<pid>."""
import json
import os
import statistics
import sys
import threading
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "docker"))
from ahdocker import engine, engine_raw, Harness, Fail  # noqa: E402


def arg(name, default):
    if name in sys.argv:
        i = sys.argv.index(name)
        v = int(sys.argv[i + 1])
        del sys.argv[i:i + 2]
        return v
    return default


NO_POOL = "--no-pool" in sys.argv
if NO_POOL:
    sys.argv.remove("--no-pool")
POOL_ONLY = "--pool-only" in sys.argv
if POOL_ONLY:
    sys.argv.remove("--pool-only")
FROZEN = "--frozen" in sys.argv
if FROZEN:
    sys.argv.remove("--frozen")
SEQ = arg("--sequential", 10)
STAG = arg("--staggered", 10)
BURST = arg("--burst", 100)
h = Harness("bench.create", sys.argv[1], "10.215.0.0/16", shipped_catalog=True)


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * len(xs) + 0.5)) - 1))
    return xs[k]


def one(name, out):
    """Create -> first command for one agent: (seconds, None) or (None, why)."""
    t0 = time.monotonic()
    st, a = h.api("POST", "/api/v1/agents?wait=1", {"name": name}, timeout=600)
    if st not in (200, 201) or not a or a.get("state") != "running":
        out[name] = (None, "create %d: %s" % (st, (a or {}).get("error") or a))
        return
    st, r = h.api("POST", "/api/v1/agents/%s/exec" % name, {"cmd": "true"}, timeout=120)
    if st != 200 or r.get("status") != 0:
        out[name] = (None, "exec %d: %r" % (st, r))
        return
    out[name] = (time.monotonic() - t0, None)


def bare_exec(cid):
    t0 = time.monotonic()
    st, j = engine("POST", "/containers/%s/exec" % cid, {"Cmd": ["true"], "AttachStdout": True,
                                                          "AttachStderr": True})
    if st != 201:
        raise Fail("bare exec create: %d %r" % (st, j))
    st, _ = engine_raw("POST", "/exec/%s/start" % j["Id"], {"Detach": False, "Tty": False})
    if st != 200:
        raise Fail("bare exec start: %d" % st)
    return time.monotonic() - t0


def line(label, out):
    ok = [v for v, why in out.values() if v is not None]
    bad = {k: why for k, (v, why) in out.items() if v is None}
    print("%-26s n=%3d  ok %5.1f%%  median %6.0f ms  p95 %6.0f ms  p99 %6.0f ms" %
          (label, len(out), 100.0 * len(ok) / max(1, len(out)), 1000 * pct(ok, 50), 1000 * pct(ok, 95),
           1000 * pct(ok, 99)))
    for k, why in list(bad.items())[:5]:
        print("    %s: %s" % (k, why))
    return ok, bad


def raise_caps(h):
    st, _ = h.api("PUT", "/api/v1/policy", {"tenant_max_running": 100000, "pool_max_running": 100000,
                                            "tenant_max_sandboxes": 100000, "pool_max_sandboxes": 100000})
    h.check(st == 200, "caps raised for the run: %d" % st)


def shapes(prefix, before=None):
    """The three shapes: ({name: (s, why)} sequential, staggered, burst),
    the burst's wall time. before(): called (untimed) before each
    sequential create and before the staggered and burst shapes."""
    seq, stag, burst = {}, {}, {}
    for i in range(SEQ):
        if before:
            before(1)
        one("%ss%d" % (prefix, i), seq)
    if before:
        before(STAG)
    threads = []
    for i in range(STAG):
        t = threading.Thread(target=one, args=("%st%d" % (prefix, i), stag))
        t.start()
        threads.append(t)
        time.sleep(0.2)
    for t in threads:
        t.join()
    if before:
        before(BURST)
    threads = [threading.Thread(target=one, args=("%sb%d" % (prefix, i), burst)) for i in range(BURST)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return seq, stag, burst, time.monotonic() - t0


def pool_ready(h, n, seconds=1800):
    """Until the default runtime's pool holds n warm sandboxes ready (with
    --frozen: n frozen)."""
    deadline = time.monotonic() + seconds
    while True:
        st, p = h.api("GET", "/api/v1/pool", timeout=30)
        ready = (p or {}).get("pools", [{}])[0].get("frozen" if FROZEN else "ready", 0) if st == 200 else 0
        if ready >= n:
            return
        if time.monotonic() > deadline:
            raise Fail("the pool did not fill to %d ready within %d s (%d)" % (n, seconds, ready))
        time.sleep(0.2)   # pacing: a poll of the pool, not a wait for an event


def report(h, label, bare, seq, stag, burst, wall):
    """The table's rows of one run of the shapes; checks every create is
    accounted for. (sequential ok times, burst ok times)."""
    print("%-26s n=%3d                median %6.1f ms  p95 %6.1f ms" %
          ("bare docker exec true", len(bare), 1000 * pct(bare, 50), 1000 * pct(bare, 95)))
    s_ok, _ = line(label + "sequential", seq)
    line(label + "staggered 200 ms", stag)
    b_ok, _ = line(label + "burst of %d" % BURST, burst)
    print("%sburst wall time %.1f s" % (label, wall))
    if s_ok and bare:
        print("%ssequential median / bare exec median: %.1fx" % (label, pct(s_ok, 50) / pct(bare, 50)))
    if b_ok and s_ok:
        print("%sburst p95 / sequential median: %.1fx" % (label, pct(b_ok, 95) / pct(s_ok, 50)))
    lost = lost_of(seq, stag, burst)
    h.check(not lost, "%severy create accounted for (succeeded or refused by a limit): lost %r" % (label, lost[:5]))
    return s_ok, b_ok


def lost_of(*outs):
    return [k for out in outs for k, (v, why) in out.items()
            if v is None and "already holds" not in (why or "")]


def scenario(h):
    h.start_server()
    raise_caps(h)
    # The runtime's image built first (the first create waits for it).
    warm = {}
    one("warm", warm)
    h.check(warm["warm"][0] is not None, "the first agent: %r" % (warm["warm"],))
    cid = h.container(h.cli("show", "warm")["id"])["Id"]
    for _ in range(3):
        bare_exec(cid)
    s_ok = None
    if not POOL_ONLY:
        bare = []
        seq, stag, burst, wall = shapes("", lambda n: bare.append(bare_exec(cid)) if n == 1 else None)
        print("bench.create: create -> first command (exec true) through the API, Docker driver, "
              "the shipped default runtime, no pool")
        s_ok, _ = report(h, "", bare, seq, stag, burst, wall)
        names = list(seq) + list(stag) + list(burst)
        for n in names:
            h.api("DELETE", "/api/v1/agents/%s?wait=1" % n, timeout=300)
    if NO_POOL:
        return

    # With the pool: the same server restarted with a pool as large as the
    # burst (the bare exec's container, "warm", stays running throughout).
    lua = os.path.join(h.tmp, "lua")
    os.makedirs(lua, exist_ok=True)
    src = os.path.join(HERE, "..", "..", "lua")
    for f in os.listdir(src):
        if f.endswith(".lua") and f != "pool.lua":
            with open(os.path.join(src, f)) as i, open(os.path.join(lua, f), "w") as o:
                o.write(i.read())
    size = max(BURST, STAG, 1)
    with open(os.path.join(lua, "pool.lua"), "w") as f:
        f.write("function size(runtime, clock)\n  if runtime.default then return { size = %d, frozen = %s } end\n"
                "  return { size = 0 }\nend\n" % (size, "true" if FROZEN else "false"))
    h.server.terminate()
    h.check(h.server.wait(timeout=60) == 0, "the cold server exits 0")
    h.env["AGENTHOLD_POLICY_LUA_DIR"] = lua
    h.env["AGENTHOLD_SANDBOX_WARM_POOL_MAX"] = str(size)
    h.start_server()
    raise_caps(h)
    pbare = []

    def before(n):
        # The pool full again (its refill done: the engine quiet), then
        # the bare exec of this round, then the timed create.
        pool_ready(h, size)
        if n == 1:
            pbare.append(bare_exec(cid))
    pseq, pstag, pburst, pwall = shapes("p", before)
    st, pool = h.api("GET", "/api/v1/pool")
    print("with the pool (size %d, %s): hits %s, misses %s" % (size, "frozen" if FROZEN else "running",
                                                              (pool or {}).get("hits"), (pool or {}).get("misses")))
    ps_ok, _ = report(h, "pool ", pbare, pseq, pstag, pburst, pwall)
    if ps_ok and s_ok:
        print("pool sequential median / cold sequential median: %.3fx (goal <= 0.1x)" % (pct(ps_ok, 50) / pct(s_ok, 50)))
    for n in ["warm"] + list(pseq) + list(pstag) + list(pburst):
        h.api("DELETE", "/api/v1/agents/%s?wait=1" % n, timeout=300)


sys.exit(h.run(scenario))
