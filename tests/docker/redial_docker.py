#!/usr/bin/python3
"""tests/docker/redial_docker.py: a running agent across quick server
restarts, as a user runs the server: `agenthold serve` as root in its
two-process shape (the server as the agenthold user, a local hostd), the
default configuration (no sandbox.tunnel_listen given) and the shipped
catalog's default runtime.

- The tunnel listens on its unix socket alone: no process of serve holds a
  TCP listener but the API's (nothing on 8090; hostd's host firewall probe
  has one of its own for a few seconds at its start), and the log says why.
- The server restarted RESTARTS times in a row, each as soon as the agent
  answered: after each, exec works within BOUND s of the API answering
  (sandboxd redials a server that is back within about 250 ms however
  often it restarted; it used to back off for up to ~20 s), and the agent
  then says "connected": true.
- Its sandboxd kept away (its processes stopped with SIGSTOP from the
  host; a paused container would be read as frozen, issue 29) across a
  restart: the agent is running with "connected": false (and
  `agenthold show` says so); an exec
  waits for it (about 5 s) and then answers 409 saying the sandboxd is not
  connected; an exec made while it is away and answered once it is back
  (SIGCONT) succeeds.

usage: redial_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine. Ports from ahserver.free_port, pool 10.213.212.0/22,
prefix dockerredial<pid>. Removes everything it made, even on failure
(tests/docker/ahdocker.py)."""
import json
import os
import re
import signal
import sys
import threading
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import Harness, engine  # noqa: E402

RESTARTS = 4
BOUND = 3.0         # seconds from the API answering to a working exec (generous for a loaded machine)
WAIT = 5.0          # how long a channel waits for a running agent's sandboxd (AH_TUNNEL_CONNECT_WAIT_MS)

h = Harness("docker.redial", sys.argv[1], "10.213.212.0/22", shipped_catalog=True)
# The shipped defaults: the default runtime, its memory, and no tunnel_listen.
for key in ("AGENTHOLD_SANDBOX_DEFAULT_IMAGE", "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB",
            "AGENTHOLD_SANDBOX_TUNNEL_LISTEN", "AGENTHOLD_SERVER_USER"):
    h.env.pop(key, None)
# The README's shape (server.user agenthold, a local hostd), on a hostd
# socket of this run's; the server's user must reach the data directory.
h.env["AGENTHOLD_HOSTD_ENDPOINT"] = "ipc://%s/hostd-run/hostd.sock" % h.tmp
os.chmod(h.tmp, 0o711)


def sandboxd_pids(cname):
    """The host pids of the container's sandboxd processes (below its
    init, docker-init), found through the Engine's State.Pid."""
    st, info = engine("GET", "/containers/%s/json" % cname)
    h.check(st == 200 and info["State"]["Pid"] > 0, "inspect %s: %d" % (cname, st))
    pids = []
    for p in tree(info["State"]["Pid"]):
        try:
            with open("/proc/%d/comm" % p) as f:
                if f.read().strip() == "sandboxd":
                    pids.append(p)
        except OSError:
            pass
    h.check(pids, "the container's sandboxd found below pid %d" % info["State"]["Pid"])
    return pids


def signal_all(pids, sig):
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def tree(pid):
    """pid and its descendants."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def tcp_listeners(pids):
    """The TCP ports the processes pids listen on (their sockets' inodes
    matched with /proc/net/tcp{,6} rows in LISTEN)."""
    inodes = set()
    for p in pids:
        try:
            for fd in os.listdir("/proc/%d/fd" % p):
                try:
                    link = os.readlink("/proc/%d/fd/%s" % (p, fd))
                except OSError:
                    continue
                m = re.match(r"socket:\[(\d+)\]", link)
                if m:
                    inodes.add(m.group(1))
        except OSError:
            pass
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def tunnel_listeners():
    """The TCP ports serve's processes listen on once hostd's host
    firewall probe (a listener of its own on a random port for a few
    seconds, drivers/docker/probe.c) is done: they must come down to the
    API's alone, and 8090 is never among them."""
    deadline = time.time() + 30
    while True:
        ports = tcp_listeners(tree(h.server.pid))
        h.check(8090 not in ports, "nothing of serve listens on 8090: %r" % sorted(ports))
        if ports == {h.api_port} or time.time() > deadline:
            return ports
        time.sleep(0.5)


def agent():
    st, a = h.api("GET", "/api/v1/agents/alice", timeout=10)
    h.check(st == 200, "GET alice: %d %r" % (st, a))
    return a


def exec_(cmd, timeout=30):
    return h.api("POST", "/api/v1/agents/alice/exec", {"cmd": cmd, "timeout": 20}, timeout=timeout)


def restart():
    """SIGTERM to serve (it stops the server and hostd), then serve again;
    the time the API answered."""
    h.server.terminate()
    h.check(h.server.wait(timeout=60) == 0, "serve exits 0 on SIGTERM")
    h.start_server(seconds=60)
    return time.time()


def scenario(h):
    h.start_server(seconds=60)
    log = h.server_log_tail(200000)
    h.check("no TCP listener: the sandboxes of this driver dial the unix socket" in log,
            "the log says the tunnel has no TCP listener and why")
    ports = tunnel_listeners()
    h.check(ports == {h.api_port}, "serve, its server and hostd listen on TCP on the API's port "
            "alone (%d), not 8090: %r" % (h.api_port, sorted(ports)))

    rc, out, err = h.run_cli("create", "alice", "--json", timeout=900)
    h.check(rc == 0, "create alice: %d %s" % (rc, err))
    a = json.loads(out)
    h.check(a["state"] == "running" and a["runtime"] == "debian" and a["connected"] is True,
            "the shipped default runs, connected: %r" % {k: a.get(k) for k in ("state", "runtime", "connected")})
    aid = a["id"]
    st, r = exec_("echo hi")
    h.check(st == 200 and r["stdout"] == "hi\n", "exec: %d %r" % (st, r))

    # Quick restarts, one after the other.
    for i in range(RESTARTS):
        back = restart()
        first_409 = None
        while True:
            st, r = exec_("echo again")
            took = time.time() - back
            if st == 200:
                break
            first_409 = first_409 or (st, r)
            h.check(took < BOUND, "restart %d: exec within %.0f s of the API answering: %d %r after %.2f s"
                    % (i + 1, BOUND, st, r, took))
            time.sleep(0.05)
        h.check(r["stdout"] == "again\n", "restart %d: exec's output: %r" % (i + 1, r))
        h.check(took < BOUND, "restart %d: exec worked %.2f s after the API answered (bound %.0f s)"
                % (i + 1, took, BOUND))
        # The row's connection flag is lifecycle's, told by the tunnel
        # beside the exec's own path: it may follow the exec by a moment
        # on a busy machine, never by seconds.
        a, deadline = agent(), time.time() + 5
        while not (a["state"] == "running" and a["connected"] is True) and time.time() < deadline:
            time.sleep(0.05)
            a = agent()
        h.check(a["state"] == "running" and a["connected"] is True,
                "restart %d: running and connected: %r" % (i + 1, {k: a[k] for k in ("state", "connected")}))
        print("restart %d: exec worked %.2f s after the API answered%s" %
              (i + 1, took, "" if not first_409 else " (answered %d first)" % first_409[0]))
    ports = tunnel_listeners()
    h.check(ports == {h.api_port}, "after the restarts too, no TCP listener but the API's: %r" % sorted(ports))

    # sandboxd kept away across a restart: the agent says it is not connected.
    cname = "%s-%s" % (h.prefix, aid)
    away = sandboxd_pids(cname)
    h.cleanups.append(lambda: signal_all(away, signal.SIGCONT))
    signal_all(away, signal.SIGSTOP)
    restart()
    time.sleep(1.0)                     # pacing: what a redial would take, and more
    a = agent()
    h.check(a["state"] == "running" and a["connected"] is False,
            "running without its sandboxd: connected false: %r" % {k: a[k] for k in ("state", "connected")})
    rc, out, _ = h.run_cli("show", "alice", timeout=30)
    h.check(rc == 0 and "connected:        no" in out, "show says it is not connected: %r" % out[:400])
    t0 = time.time()
    st, r = exec_("echo away")
    waited = time.time() - t0
    error = (r or {}).get("error", "")
    h.check(st == 409 and "is running but its sandboxd is not connected" in error and "waited" in error,
            "exec while sandboxd is away: 409 saying why: %d %r" % (st, r))
    h.check(WAIT - 0.5 <= waited < WAIT + 5, "exec waited about %.0f s for the connection: %.2f s"
            % (WAIT, waited))
    # An exec made while it is away is answered once it is back.
    got = {}

    def late():
        got["t0"] = time.time()
        got["answer"] = exec_("echo back")
        got["t1"] = time.time()
    t = threading.Thread(target=late)
    t.start()
    time.sleep(1.0)                     # pacing: the exec waits while sandboxd is away
    signal_all(away, signal.SIGCONT)
    t.join(30)
    st, r = got.get("answer", (0, None))
    h.check(st == 200 and r["stdout"] == "back\n", "the exec made while sandboxd was away ran once it "
            "was back: %d %r" % (st, r))
    print("exec made while away answered after %.2f s" % (got["t1"] - got["t0"]))
    h.check(agent()["connected"] is True, "connected again")

    rc, out, err = h.run_cli("rm", "alice", timeout=120)
    h.check(rc == 0, "rm alice: %s" % err)
    h.finish()


sys.exit(h.run(scenario))
