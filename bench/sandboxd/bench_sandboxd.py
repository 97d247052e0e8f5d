#!/usr/bin/python3
"""bench/sandboxd/bench_sandboxd.py: the static sandboxd's footprint while
idle and connected to a real server's tunnel, against idle `sleep` and
`busybox sh` processes measured over the same window.

usage: bench_sandboxd.py AGENTHOLD_BINARY SANDBOXD_BINARY [--seconds N]

Starts the real `agenthold serve` (fake driver) and creates an agent; the
fake driver runs a sandboxd in-process and writes the agent's boot.json
(tunnel URL and the current per-boot token, whose hash the server keeps).
The benchmark copies that boot card for the static binary and points the
fake driver's copy at a closed port (the in-process sandboxd re-reads it
before each dial, so it cannot take the connection back), then starts the
static sandboxd (--boot, the agent's home, --no-switch-user). Its
connection replaces the in-process one; an exec of `echo $PPID` through the
API proves the static process is the one serving the agent.

Then, over N seconds (default 30; the server pings every 15 s and asks
for stats every 30 s, which is sandboxd's real idle work), for sandboxd
and for the two baselines started at the same time:
  RSS       VmRSS from /proc/PID/status at the end (and VmHWM, the peak);
  CPU       time on CPU during the window, from /proc/PID/task/*/schedstat
            (nanoseconds; clock ticks of /proc/PID/stat where that is
            missing), as ms per minute;
  wakeups   context switches during the window, per minute.
Prints each with the ratios; exits 1 on any error."""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "files"))
from ahserve import BenchError, Server  # noqa: E402


def status(pid):
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k] = v.strip()
    except OSError:
        raise BenchError("process %d is gone" % pid)
    return out


def sample(pid):
    """(rss KiB, hwm KiB, cpu ns, context switches)."""
    st = status(pid)
    rss = int(st["VmRSS"].split()[0])
    hwm = int(st["VmHWM"].split()[0])
    cpu, switches, have_sched = 0, 0, True
    for task in glob.glob("/proc/%d/task/*" % pid):
        try:
            with open(task + "/schedstat") as f:
                cpu += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            have_sched = False
        try:
            with open(task + "/status") as f:
                for line in f:
                    if "ctxt_switches:" in line:
                        switches += int(line.split()[1])
        except OSError:
            pass
    if not have_sched or cpu == 0:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    return rss, hwm, cpu, switches


def connected_pid(srv, agent_id):
    """The pid of the process that serves the agent's exec channel."""
    st, j = srv.call("POST", "/api/v1/agents/%s/exec" % agent_id, {"cmd": "echo $PPID", "timeout": 10},
                     timeout=30)
    if st != 200 or not j or j.get("status") != 0:
        return None
    try:
        return int(j["stdout"].strip())
    except (KeyError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("agenthold")
    ap.add_argument("sandboxd")
    ap.add_argument("--seconds", type=float, default=30, help="idle window (default 30)")
    a = ap.parse_args()
    if not 1 <= a.seconds <= 3600:
        ap.error("--seconds 1..3600")
    sandboxd = os.path.abspath(a.sandboxd)
    with Server(a.agenthold, "ah-bench-sandboxd-") as srv:
        try:
            agent_id = srv.create_agent("bench-idle")
            adir = srv.agent_dir(agent_id)
            with open(os.path.join(adir, "boot.json")) as f:
                boot = json.load(f)
            mine = os.path.join(srv.tmp, "boot.json")
            with open(mine, "w") as f:
                json.dump(boot, f)
            #  The in-process sandboxd re-reads its card before every dial:
            #  a closed port keeps it from taking the connection back.
            dead = dict(boot, tunnel_url="ws://127.0.0.1:1/tunnel")
            with open(os.path.join(adir, "boot.json.tmp"), "w") as f:
                json.dump(dead, f)
            os.rename(os.path.join(adir, "boot.json.tmp"), os.path.join(adir, "boot.json"))

            #  The baselines, started first so they have settled too.
            sleep = srv.spawn(["sleep", "100000"])
            bsh = srv.spawn(["busybox", "sh"], stdin=subprocess.PIPE)
            log = open(os.path.join(srv.tmp, "sandboxd.log"), "wb")
            sbd = srv.spawn([sandboxd, "--boot", mine, "--home", os.path.join(adir, "home"),
                             "--no-switch-user"], stdout=log, stderr=log,
                            env=dict(srv.env, AGENTHOLD_LOG="info"))
            log.close()
            deadline = time.time() + 20
            while connected_pid(srv, agent_id) != sbd.pid:
                if sbd.poll() is not None or time.time() > deadline:
                    with open(os.path.join(srv.tmp, "sandboxd.log"), errors="replace") as f:
                        raise BenchError("the static sandboxd did not take over the agent's tunnel "
                                         "within 20 s:\n%s\n%s" % (f.read()[-2000:], srv.log_tail()))
                time.sleep(0.2)
            time.sleep(1)       # the exec's aftermath (the child's exit, the channel's end)

            procs = [("baseline sleep", sleep.pid), ("baseline busybox sh", bsh.pid),
                     ("sandboxd (static, connected)", sbd.pid)]
            t0 = time.monotonic()
            s0 = [sample(pid) for _, pid in procs]
            time.sleep(a.seconds)
            s1 = [sample(pid) for _, pid in procs]
            window = time.monotonic() - t0
            if connected_pid(srv, agent_id) != sbd.pid:
                raise BenchError("the static sandboxd lost the tunnel during the window:\n%s"
                                 % srv.log_tail())
        except BenchError as e:
            print("bench_sandboxd: %s" % e, file=sys.stderr)
            return 1
    per_min = 60.0 / window
    rows = []
    for (label, _), b, e in zip(procs, s0, s1):
        rows.append((label, e[0], e[1], (e[2] - b[2]) / 1e6 * per_min, (e[3] - b[3]) * per_min))
    print("bench_sandboxd: idle for %.1f s, connected to a real server's tunnel "
          "(pings every 15 s, stats every 30 s); same window for all" % window)
    for label, rss, hwm, cpu, wake in rows:
        print("  %-30s %7d KiB (peak %6d KiB)  %8.3f CPU ms/min  %7.1f wakeups/min"
              % (label, rss, hwm, cpu, wake))
    sbd_row = rows[2]

    def cpu_ratio(base):
        if base[3] <= 0:
            return "n/a (%s used none; sandboxd +%.3f ms/min)" % (base[0].split(" ", 1)[1], sbd_row[3])
        return "%.1fx %s" % (sbd_row[3] / base[3], base[0].split(" ", 1)[1])

    print("  ratios: RSS %.2fx sleep, %.2fx busybox sh; CPU %s, %s"
          % (sbd_row[1] / rows[0][1], sbd_row[1] / rows[1][1], cpu_ratio(rows[0]), cpu_ratio(rows[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
