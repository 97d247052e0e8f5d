#!/usr/bin/python3
"""bench/scale/bench_scale.py: one server holding many connected sandboxd
processes: its memory and idle CPU, and many terminals streaming at once.

usage: bench_scale.py AGENTHOLD_BINARY SANDBOXD_BINARY [--agents 1000]
                      [--terminals 100] [--lines 50000] [--seconds 30]

Starts the real `agenthold serve` with the fake driver told to run no
sandboxd itself (sandbox.fake_sandboxd: external): every start writes the
agent's boot.json (tunnel URL, per-boot token) and waits for a hello. For
each agent created through the API the benchmark starts the real static
sandboxd on that boot.json (--boot, the agent's home, --no-switch-user),
one process each, so everything the server does is its own: the figures
are the server's process alone.

Baseline, same run: the same server before any agent exists, over a window
of the same length (RSS and CPU), printed beside and as a ratio.

  RSS        the server's VmRSS with every sandboxd connected and idle
             (goal <= 64 MiB); the peak (VmHWM) is printed too;
  idle CPU   the server's CPU (all its threads, /proc/PID/task/*/stat)
             over --seconds while every sandboxd is connected and nothing
             is asked (sandboxd's pings every 15 s and their answers, stats
             every 30 s, sleeper passes: its idle work), as % of one core
             (goal <= 1 %);
  terminals  --terminals WebSocket terminals on as many agents, opened
             first, then each runs `seq` of --lines numbers at once; every
             byte of every stream is checked (the numbers in order, none
             missing), and each terminal's rate is its bytes over its own
             time from the command to its end marker (echo is turned off
             before the clock starts). Fairness = slowest / fastest (goal
             >= 0.5). Printed beside: how far apart the first bytes came
             (the shells start 100 seq at once) and this client's CPU
             share (one asyncio loop: near 100 % it would be what limits
             and orders the streams).

Exits 1 on an error (a sandboxd that never connects, a terminal that loses
or garbles a byte), 3 when a goal misses beyond the noise bound."""
import argparse
import asyncio
import ctypes
import glob
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import websockets

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "files"))
from ahserve import BenchError, Goals, Server, median  # noqa: E402

RSS_GOAL_MIB = 64
CPU_GOAL_PCT = 1.0
FAIR_GOAL = 0.5
TIMEOUT = 120


def server_sample(srv):
    """(VmRSS KiB, VmHWM KiB, CPU seconds of every thread)."""
    rss = hwm = 0
    with open("/proc/%d/status" % srv.proc.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm, sum(srv.thread_cpu().values())


def idle_window(srv, seconds):
    """(RSS KiB at the end, HWM KiB, % of one core over the window)."""
    _, _, c0 = server_sample(srv)
    t0 = time.monotonic()
    time.sleep(seconds)
    rss, hwm, c1 = server_sample(srv)
    return rss, hwm, 100.0 * (c1 - c0) / (time.monotonic() - t0)


_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent():
    """In each sandboxd child: killed when the bench dies, even by SIGKILL
    (a ctest timeout), so no sandboxd outlives it dialing a dead server."""
    _libc.prctl(1, signal.SIGKILL)          # PR_SET_PDEATHSIG


def _exit_on_signal(signum, frame):
    raise SystemExit(128 + signum)          # SIGTERM/SIGINT: the finally blocks clean up


class Fleet:
    """The static sandboxd processes, one per agent; all ended by stop()."""
    def __init__(self, srv, sandboxd):
        self.srv = srv
        self.sandboxd = os.path.abspath(sandboxd)
        self.procs = {}         # agent id -> Popen
        self.log = open(os.path.join(srv.tmp, "sandboxd.log"), "ab")
        self.env = dict(srv.env, AGENTHOLD_LOG="warn")

    def start_ready(self):
        """Starts a sandboxd for every boot.json that has none yet."""
        for boot in glob.glob(os.path.join(self.srv.data, "fake", "*", "boot.json")):
            agent = os.path.basename(os.path.dirname(boot))
            if agent in self.procs:
                continue
            self.procs[agent] = subprocess.Popen(
                [self.sandboxd, "--boot", boot, "--home", os.path.join(os.path.dirname(boot), "home"),
                 "--no-switch-user"], stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL,
                env=self.env, start_new_session=True, preexec_fn=_die_with_parent)

    def dead(self):
        return [a for a, p in self.procs.items() if p.poll() is not None]

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except OSError:
                    pass
        deadline = time.time() + 10
        for p in self.procs.values():
            try:
                p.wait(max(0.01, deadline - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait()
        self.procs = {}
        self.log.close()


def create_all(srv, fleet, n):
    """Creates n agents (8 requests at a time), starting each one's
    sandboxd as its boot.json appears; returns their ids once all run."""
    errors = []
    ids = []
    lock = threading.Lock()

    def create(i):
        st, j = srv.call("POST", "/api/v1/agents?wait=1", {"name": "s%04d" % i})
        with lock:
            if st not in (200, 201) or not j or j.get("state") != "running":
                errors.append("create s%04d: %d %r" % (i, st, j))
            else:
                ids.append(j["id"])

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(create, i) for i in range(n)]
        while not all(f.done() for f in futures):
            fleet.start_ready()
            if errors:
                break
            time.sleep(0.05)
        for f in futures:
            f.cancel()
    if errors:
        raise BenchError("%s\n%s" % ("\n".join(errors[:5]), srv.log_tail()))
    dead = fleet.dead()
    if dead:
        raise BenchError("%d sandboxd processes exited (agent %s ...)" % (len(dead), dead[0]))
    return sorted(ids)


def connected(srv, ids):
    """How many of ids the server says run (sandboxd said hello)."""
    st, j = srv.call("GET", "/api/v1/agents")
    if st != 200 or not j:
        raise BenchError("GET /api/v1/agents: %d" % st)
    want = set(ids)
    return sum(1 for a in j["agents"] if a["id"] in want and a["state"] == "running")


async def settle(ws):
    """Reads until the terminal has been quiet for a second."""
    while True:
        try:
            await asyncio.wait_for(ws.recv(), 1.0)
        except asyncio.TimeoutError:
            return


async def stream_one(srv, agent_id, lines, start, results, idx):
    url = "ws://127.0.0.1:%d/api/v1/agents/%s/terminal?cols=200&rows=50&token=%s" % (
        srv.api_port, agent_id, srv.token())
    #  Echo goes off before the clock starts (stty is a process of its own
    #  to start: 100 of them at once would be timed too). The end marker is
    #  computed by the shell, so the command line never contains it.
    cmd = b"seq 1 %d; echo XE$((6*7))ND\n" % lines
    marker = b"XE42ND"
    expect = b"\r\n".join(b"%d" % i for i in range(1, lines + 1)) + b"\r\n"
    async with websockets.connect(url, ping_interval=None, max_size=None, open_timeout=TIMEOUT) as ws:
        await settle(ws)                # the prompt and anything the login prints
        await ws.send(b"stty -echo\n")
        await settle(ws)
        await start.wait()
        t0 = time.monotonic()
        await ws.send(cmd)
        buf = bytearray()
        first = None
        deadline = t0 + TIMEOUT
        while marker not in buf[-4096:]:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError("terminal %d: no end marker within %d s (%d bytes)" % (idx, TIMEOUT, len(buf)))
            m = await asyncio.wait_for(ws.recv(), left)
            if first is None:
                first = time.monotonic()
            buf += m if isinstance(m, bytes) else m.encode()
        end = time.monotonic()
        await ws.send(b"exit\n")
    at = buf.find(b"1\r\n2\r\n")
    if at < 0 or buf[at:at + len(expect)] != bytes(expect):
        got = buf[at:at + len(expect)] if at >= 0 else buf[:200]
        bad = next((k for k in range(min(len(got), len(expect))) if got[k] != expect[k]), min(len(got), len(expect)))
        raise BenchError("terminal %d (agent %s): the stream differs from seq 1 %d at byte %d of %d: %r"
                         % (idx, agent_id, lines, bad, len(expect), bytes(got[bad:bad + 40])))
    results[idx] = (len(expect), t0, first, end)


async def terminals(srv, ids, lines):
    """Streams on every terminal at once: ([(bytes, t0, first, end)] per
    terminal on the monotonic clock, wall seconds, this client's CPU
    seconds over the streaming)."""
    start = asyncio.Event()
    results = [None] * len(ids)
    tasks = [asyncio.ensure_future(stream_one(srv, a, lines, start, results, i)) for i, a in enumerate(ids)]
    await asyncio.sleep(0)
    #  Every terminal opened and settled (echo off) before any command goes.
    deadline = time.time() + TIMEOUT
    while time.time() < deadline and not all(t.done() for t in tasks):
        await asyncio.sleep(0.5)
        opened = sum(1 for t in tasks if not t.done())
        if opened == len(tasks):
            await asyncio.sleep(4.5)          # past each one's two 1 s settles
            break
    t0 = time.monotonic()
    c0 = time.process_time()
    start.set()
    try:
        await asyncio.gather(*tasks)
    except (OSError, websockets.InvalidHandshake, websockets.ConnectionClosed, asyncio.TimeoutError) as e:
        for t in tasks:
            t.cancel()
        raise BenchError("terminal: %r\n%s" % (e, srv.log_tail()))
    return results, time.monotonic() - t0, time.process_time() - c0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("agenthold")
    ap.add_argument("sandboxd")
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--terminals", type=int, default=100)
    ap.add_argument("--lines", type=int, default=50000, help="each terminal's seq length (default 50000)")
    ap.add_argument("--seconds", type=float, default=30, help="idle windows (default 30)")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, _exit_on_signal)
    if not 1 <= a.agents <= 5000 or not 1 <= a.terminals <= a.agents or not 10 <= a.lines <= 10**6 \
       or not 1 <= a.seconds <= 3600:
        ap.error("--agents 1..5000, --terminals 1..agents, --lines 10..1e6, --seconds 1..3600")
    env = {
        "AGENTHOLD_SANDBOX_FAKE_SANDBOXD": "external",
        "AGENTHOLD_LIMITS_POOL_MAX_SANDBOXES": str(a.agents + 10),
        "AGENTHOLD_LIMITS_TENANT_MAX_SANDBOXES": str(a.agents + 10),
        # every agent runs at once: the running caps (10 a tenant, 20 in
        # all, shipped) are raised as far
        "AGENTHOLD_LIMITS_POOL_MAX_RUNNING": str(a.agents + 10),
        "AGENTHOLD_LIMITS_TENANT_MAX_RUNNING": str(a.agents + 10),
    }
    goals = Goals()
    with Server(a.agenthold, "ah-bench-scale-", env=env) as srv:
        fleet = Fleet(srv, a.sandboxd)
        try:
            b_rss, b_hwm, b_cpu = idle_window(srv, a.seconds)
            t0 = time.monotonic()
            ids = create_all(srv, fleet, a.agents)
            made = time.monotonic() - t0
            n = connected(srv, ids)
            if n != a.agents:
                raise BenchError("%d of %d agents run after the creates" % (n, a.agents))
            time.sleep(2)                       # the creates' aftermath
            rss, hwm, cpu = idle_window(srv, a.seconds)
            n = connected(srv, ids)
            dead = fleet.dead()
            if n != a.agents or dead:
                raise BenchError("after the idle window %d of %d run, %d sandboxd exited\n%s"
                                 % (n, a.agents, len(dead), srv.log_tail()))
            results, wall, client_cpu = asyncio.run(terminals(srv, ids[:a.terminals], a.lines))
            rss_after, hwm_after, _ = server_sample(srv)
        except BenchError as e:
            print("bench_scale: %s" % e, file=sys.stderr)
            return 1
        finally:
            fleet.stop()
    mib = 1024.0
    #  A terminal's rate: its bytes over its own time, from its command to
    #  its end marker (every command goes at once; echo was turned off
    #  before, so no stty is timed). When each seq's first line came out
    #  (100 processes started at once on a shared machine: the kernel's
    #  doing) and this client's CPU share (one asyncio loop: a loop near
    #  100 % would be what limits and orders the streams) are printed apart.
    rates = [b / (end - t0) / 2**20 for b, t0, _, end in results]
    total = sum(r[0] for r in results)
    fair = min(rates) / max(rates)
    spread = max(r[2] for r in results) - min(r[2] for r in results)
    went = min(r[1] for r in results)
    print("bench_scale: %d static sandboxd processes connected to one server (fake driver, no"
          " in-process sandboxd); %d created and connected in %.1f s" % (a.agents, a.agents, made))
    print("  server RSS, %d connected idle: %.1f MiB (peak %.1f)   baseline, no agent: %.1f MiB"
          "   ratio %.2f   %s" % (a.agents, rss / mib, hwm / mib, b_rss / mib, rss / max(b_rss, 1),
                                 goals.at_most("rss", rss / mib, RSS_GOAL_MIB)))
    print("  server idle CPU over %.0f s, %d connected: %.2f %% of a core   baseline, no agent: %.2f %%"
          "   %s" % (a.seconds, a.agents, cpu, b_cpu, goals.at_most("idle cpu", cpu, CPU_GOAL_PCT)))
    print("  %d terminals streaming at once (seq 1 %d each, %d bytes, every byte checked): %.1f MiB in %.2f s;"
          " per terminal MiB/s min %.2f median %.2f max %.2f; first bytes within %.2f s of each other;"
          " this client (one asyncio loop) used %.0f %% of a core" % (
              len(results), a.lines, results[0][0], total / 2**20, wall, min(rates), median(rates),
              max(rates), spread, 100.0 * client_cpu / wall))
    print("  fairness, slowest / fastest terminal: %.2f   %s" % (fair, goals.at_least("fairness", fair, FAIR_GOAL)))
    print("  terminals ended %.2f to %.2f s after the first command went" % (
        min(r[3] for r in results) - went, max(r[3] for r in results) - went))
    print("  server RSS after the terminals: %.1f MiB (peak %.1f)" % (rss_after / mib, hwm_after / mib))
    return goals.status("bench_scale")


if __name__ == "__main__":
    sys.exit(main())
