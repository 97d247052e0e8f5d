#!/usr/bin/python3
"""tests/docker/serve_user_docker.py: the README's first command as root,
on the real Docker Engine, with the shipped catalog and the default
configuration but for the ports, the data directory and the name prefix
(so clean-up takes only what this test made): `agenthold serve` runs the
server as the `agenthold` user, without the Docker socket, and a local
`agenthold hostd` (root) holds it (docs/hostd.md, "One command, two
processes").

- server.user names no user: serve refuses to start and says how to fix it.
- A data directory an earlier root run left (server.user none) is given to
  the user at the next start; the admin token is the same.
- The process serving the API (the pid in the lock file) runs as the
  agenthold user: uid, gid, groups (no supplementary group), no_new_privs;
  as those credentials it cannot open /var/run/docker.sock (the test
  tries), it holds no Docker socket, and `agenthold doctor` says so; hostd
  is another process, root.
- An agent of the default runtime works end to end through hostd: `id`,
  a file written in /home/agent and read back, a 24 MiB upload spliced
  (agenthold_spliced_bytes_total) that lands whole (sha256sum inside) and
  is the agent's.
- hostd silent (SIGSTOP): the agent turns unreachable while the API
  answers; then killed (SIGKILL): serve restarts hostd and the agent is
  running again, the same container, its file there. (A hostd killed
  outright is back within a second, before any call to it times out: the
  agent is rightly never called unreachable then, so the silence is made
  with SIGSTOP.)
- A second installation (its own data directory, ports and name prefix,
  nothing else changed) runs beside it, as root too: its own hostd on its
  own socket (/run/<prefix>-hostd/), an agent created, woken and removed
  there while the first one's agent runs on untouched.
- SIGTERM to serve: exit 0, and neither the server nor hostd is left.

usage: serve_user_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine. Ports from ahserver.free_port, prefix
dockerserveuser<pid>, the default network pool."""
import hashlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from ahdocker import SOCK, Fail, Harness, children, cmdline, fd_links, proc_status  # noqa: E402
import ahserver  # noqa: E402

SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
USER = "agenthold"


def installation(name):
    """A Harness for one installation: the defaults but for where it
    listens, where it keeps its state, and the prefix of what it makes in
    the engine (which names its host agent's socket too)."""
    x = Harness(name, sys.argv[1], "10.213.0.0/16", shipped_catalog=True)
    x.env = ahserver.server_env(x.data, x.api_port, x.tunnel_port, driver="docker", tunnel_host="",
                                extra={"AGENTHOLD_SANDBOX_DOCKER_NAME_PREFIX": x.prefix})
    # The server's user must reach its data directory under the test's.
    os.chmod(x.tmp, 0o711)
    return x


def hostd_sock(x):
    """hostd.endpoint's default: the installation's, by its name prefix."""
    return "/run/%s-hostd/hostd.sock" % x.prefix


h = installation("docker.serve_user")
IPC_SOCK = hostd_sock(h)
PIDS = []                               # every server and hostd pid seen, for the clean-up


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
        return stat[stat.rindex(")") + 2] != "Z"
    except OSError:
        return False


def hostd_pid(seconds=15, not_pid=None, x=None):
    """The hostd serve started (a child whose command is `agenthold hostd`)."""
    x = x or h
    deadline = time.time() + seconds
    while time.time() < deadline:
        for k in children(x.server.pid):
            if cmdline(k)[:2] == [b"agenthold", b"hostd"] and k != not_pid:
                PIDS.append(k)
                return k
        time.sleep(0.1)
    raise Fail("no agenthold hostd under serve (pid %d) within %d s" % (x.server.pid, seconds))


def server_pid():
    with open(os.path.join(h.data, "agenthold.lock")) as f:
        pid = int(f.read().strip())
    PIDS.append(pid)
    return pid


def metric(name):
    """A counter of GET /metrics."""
    st, raw = ahserver.request(h.port(), "GET", "/metrics", token=h.token())
    h.check(st == 200, "GET /metrics: %d" % st)
    for line in raw.decode(errors="replace").splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    raise Fail("GET /metrics has no %s" % name)


def exec_out(name, cmd, x=None):
    x = x or h
    st, r = x.api("POST", "/api/v1/agents/%s/exec" % name, {"cmd": cmd}, timeout=120)
    h.check(st == 200 and r["status"] == 0, "exec %r: %d %r" % (cmd, st, r))
    return r["stdout"]


def answers(sock):
    return subprocess.run(["/usr/bin/python3", "-c", "import socket,sys; s=socket.socket(socket.AF_UNIX); "
                           "s.connect(sys.argv[1])", sock], capture_output=True).returncode == 0


def kill_leftovers():
    for pid in PIDS:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def scenario_no_user():
    env = dict(h.env)
    env["AGENTHOLD_SERVER_USER"] = "ah-no-such-user"
    p = ahserver.serve_once(h.bin, env, cwd=h.tmp, timeout=60)
    h.check(p.returncode == 1, "a missing server.user stops serve (status 1): %d" % p.returncode)
    h.check("server.user 'ah-no-such-user': no such user" in p.stderr and "useradd" in p.stderr
            and "server.user: none" in p.stderr, "the error says how to fix it: %s" % p.stderr[-600:])
    h.check("agenthold serving" not in p.stdout, "nothing served")


def scenario_earlier_root_run():
    """A first start as one root process leaves root's files; the next
    start (the default) gives them to the server's user."""
    h.start_server({"AGENTHOLD_SERVER_USER": "none"})
    token = h.token()
    h.server.terminate()
    h.check(h.server.wait(timeout=60) == 0, "the root run stops with status 0")
    st = os.stat(os.path.join(h.data, "agenthold.db"))
    h.check(st.st_uid == 0, "the root run's database is root's")
    # The shipped lua/ and catalog below a directory the server's user
    # cannot pass (as a clone in /root is): it reads them all the same.
    private = os.path.join(h.tmp, "private")
    os.mkdir(private, 0o700)
    shutil.copytree(os.path.join(SRC, "lua"), os.path.join(private, "lua"))
    shutil.copytree(os.path.join(SRC, "catalog"), os.path.join(private, "catalog"))
    h.start_server({"AGENTHOLD_POLICY_LUA_DIR": os.path.join(private, "lua"),
                    "AGENTHOLD_CATALOG_PATH": os.path.join(private, "catalog", "runtimes.json")})
    log = h.server_log_tail(200000)
    h.check("cannot pass a directory above %s/lua" % private in log
            and "idle.lua loaded from /proc/self/fd/" in log,
            "policies below a directory the server's user cannot pass are read through a descriptor")
    with open(os.path.join(private, "lua", "idle.lua"), "a") as f:
        f.write("\n-- edited after the start\n")
    p = h.cli_run(["policy", "reload"], 60)
    h.check(p.returncode == 0, "policy reload: %d %s" % (p.returncode, p.stderr[-300:]))
    # The reload is fire and forget (202): wait for the sleeper to do it.
    deadline = time.time() + 20
    while (h.server_log_tail(200000).count("idle.lua loaded from /proc/self/fd/") < 2
           and time.time() < deadline):
        time.sleep(0.1)
    h.check(h.server_log_tail(200000).count("idle.lua loaded from /proc/self/fd/") == 2,
            "a reload reads the edited script through the same descriptor")
    for name in ("", "agenthold.db", "admin.token", "agenthold.lock", "run"):
        st = os.stat(os.path.join(h.data, name))
        h.check(st.st_uid == PW.pw_uid and st.st_gid == PW.pw_gid,
                "%s is the server user's now: %d:%d" % (name or "the data directory", st.st_uid, st.st_gid))
    h.check(h.token() == token, "the same admin token")
    h.check("an earlier run as root left in %s to %s" % (h.data, USER) in h.server_log_tail(200000),
            "serve's log says it gave the files over")


def scenario_processes():
    spid = server_pid()
    kids = children(h.server.pid)
    hpid = hostd_pid()
    h.check(spid in kids and hpid in kids and spid != hpid,
            "serve (pid %d) runs the server (%d) and hostd (%d): %r" % (h.server.pid, spid, hpid, kids))
    s = proc_status(spid)
    h.check(s["Uid"] == [str(PW.pw_uid)] * 4, "the API process's uids are %s's: %r" % (USER, s["Uid"]))
    h.check(s["Gid"] == [str(PW.pw_gid)] * 4, "its gids are %s's: %r" % (USER, s["Gid"]))
    h.check(s.get("Groups") == [str(PW.pw_gid)], "no supplementary group but its own: %r" % s.get("Groups"))
    h.check(s["NoNewPrivs"] == ["1"], "no new privileges")
    hs = proc_status(hpid)
    h.check(hs["Uid"] == ["0"] * 4, "hostd runs as root: %r" % hs["Uid"])
    # As the API process's very credentials: the Docker socket refuses.
    groups = [int(g) for g in s.get("Groups", [])]
    p = subprocess.run(["/usr/bin/python3", "-c",
                        "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])",
                        SOCK], user=int(s["Uid"][0]), group=int(s["Gid"][0]), extra_groups=groups,
                       capture_output=True, text=True, timeout=30)
    h.check(p.returncode != 0 and "Permission denied" in p.stderr,
            "the API process's credentials cannot open %s: %d %s" % (SOCK, p.returncode, p.stderr[-300:]))
    h.check(not any("docker.sock" in x for x in fd_links(spid)), "the server holds no Docker socket")
    st = os.stat(os.path.dirname(IPC_SOCK))
    h.check(st.st_uid == PW.pw_uid and (st.st_mode & 0o777) == 0o700,
            "hostd's socket directory is 0700 and %s's" % USER)
    p = subprocess.run([h.bin, "doctor", "--json"], env=h.cli_env(), cwd=h.tmp, capture_output=True,
                       text=True, timeout=120)
    checks = {c["name"]: c for c in json.loads(p.stdout)["checks"]}
    u = checks.get("server user") or {}
    h.check(u.get("status") == "ok" and ("runs as %s" % USER) in u.get("detail", "")
            and "cannot open" in u.get("detail", "") and ("pid %d" % spid) in u.get("detail", ""),
            "doctor: the server runs as %s and cannot open the socket: %r" % (USER, u))
    h.check(checks.get("host", {}).get("status") == "ok", "doctor: the local hostd answers: %r"
            % checks.get("host"))
    return spid, hpid


def scenario_agent():
    a = h.cli("create", "alice", timeout=900)
    h.check(a["state"] == "running", "created on the default runtime: %r" % a.get("state"))
    ident = exec_out("alice", "id")
    h.check(ident.startswith("uid=") and "uid=0(" not in ident, "id in the sandbox: %r" % ident)
    exec_out("alice", "echo kept by the home > /home/agent/kept.txt")
    h.check(exec_out("alice", "cat /home/agent/kept.txt") == "kept by the home\n", "a file read back")
    # An upload as a user sends one: the server (the agenthold user, its
    # pipes capped by pipe-max-size) splices the body from the client's
    # socket to the container's sandboxd; the file lands whole, the agent's.
    blob = os.urandom(24 << 20)
    before = metric("agenthold_spliced_bytes_total")
    st, body = ahserver.request(h.port(), "PUT", "/api/v1/agents/alice/fs/file?path=blob.bin", blob,
                                token=h.token(), headers={"Content-Type": "application/octet-stream"},
                                timeout=180)
    h.check(st == 200 and json.loads(body).get("size") == len(blob), "PUT of 24 MiB: %d %r" % (st, body[:200]))
    spliced = metric("agenthold_spliced_bytes_total") - before
    h.check(len(blob) - (2 << 20) <= spliced <= len(blob),
            "%d of the upload's %d bytes were spliced" % (spliced, len(blob)))
    out = exec_out("alice", "sha256sum /home/agent/blob.bin; stat -c '%U %s' /home/agent/blob.bin")
    h.check(out == "%s  /home/agent/blob.bin\nagent %d\n" % (hashlib.sha256(blob).hexdigest(), len(blob)),
            "the uploaded file in the sandbox: %r" % out)
    # Asleep, the agent's private file is read without waking it: hostd
    # reads it for the server, which runs as another user (HOSTD_HOME).
    exec_out("alice", "mkdir -p /home/agent/private && echo mine > /home/agent/private/key "
                      "&& chmod 600 /home/agent/private/key && chmod 700 /home/agent/private")
    h.check(h.cli("stop", "alice")["state"] == "sleeping", "alice sleeps")
    st, body = ahserver.request(h.port(), "GET", "/api/v1/agents/alice/fs/file?path=private/key",
                                token=h.token())
    h.check(st == 200 and body == b"mine\n", "a sleeping agent's 0600 file read: %d %r" % (st, body[:200]))
    for bad, want in (("private/../../etc/passwd", 400), ("/etc/passwd", 400), ("private/none", 404)):
        st, body = ahserver.request(h.port(), "GET", "/api/v1/agents/alice/fs/file?path=" + bad,
                                    token=h.token())
        h.check(st == want, "asleep, %r refused with %d: %d %r" % (bad, want, st, body[:200]))
    st, tree = h.api("GET", "/api/v1/agents/alice/tree?path=private")
    h.check(st == 200 and [e["path"] for e in tree["entries"]] == ["private/key"], "its tree asleep: %d %r"
            % (st, tree))
    h.check(not h.container(a["id"])["State"]["Running"] and h.cli("show", "alice")["state"] == "sleeping",
            "the reads woke nothing")
    h.check(h.cli("start", "alice")["state"] == "running", "alice wakes")
    return a["id"]


def scenario_second_installation(hpid):
    """Seed 000: "change name_prefix to run several installations on one
    host". A second `agenthold serve` as root with its own data directory,
    ports and prefix and nothing else changed runs beside the first: its
    own host agent on its own socket, an agent created and woken in each,
    neither disturbing the other."""
    x = installation("docker.serve_user2")

    def clean():
        for k in children(x.server.pid) if x.server and x.server.poll() is None else []:
            PIDS.append(k)
        x.stop_server()
        x.cleanup_engine()
        c, n, v = x.leftovers()
        if c or n or v:
            print("objects left behind with prefix %s: %d %d %d" % (x.prefix, len(c), len(n), len(v)),
                  file=sys.stderr)
        shutil.rmtree(x.tmp, ignore_errors=True)
        shutil.rmtree(os.path.dirname(hostd_sock(x)), ignore_errors=True)
    h.cleanups.append(clean)
    x.start_server(seconds=60)
    xpid = hostd_pid(30, x=x)
    h.check(xpid != hpid, "each installation runs its own hostd: %d, %d" % (hpid, xpid))
    ahserver.wait_until(lambda: answers(hostd_sock(x)), 30, "the second hostd's socket", Fail)
    h.check(answers(IPC_SOCK), "the first installation's hostd still answers on %s" % IPC_SOCK)
    b = x.cli("create", "bob", timeout=900)
    h.check(b["state"] == "running", "the second installation creates an agent: %r" % b)
    h.check(exec_out("bob", "echo bob > /home/agent/who; cat /home/agent/who", x) == "bob\n",
            "and runs a command in it")
    h.check(x.cli("stop", "bob")["state"] == "sleeping", "bob sleeps")
    h.check(x.cli("start", "bob")["state"] == "running", "bob wakes")
    h.check(exec_out("bob", "cat /home/agent/who", x) == "bob\n", "bob's home after the wake")
    h.check([a["name"] for a in x.cli("ls")] == ["bob"], "the second installation knows bob only")
    h.check(h.cli("show", "alice")["state"] == "running" and
            exec_out("alice", "cat /home/agent/kept.txt") == "kept by the home\n",
            "the first installation's agent runs on, untouched")
    h.check("bob" not in [a["name"] for a in h.cli("ls")], "and the first knows nothing of bob")
    h.check(x.cli("rm", "bob", timeout=180)["state"] == "destroyed", "rm bob")
    x.server.terminate()
    h.check(x.server.wait(timeout=60) == 0, "the second serve exits 0 on SIGTERM")
    h.check(not answers(hostd_sock(x)), "its hostd is gone")
    h.check(answers(IPC_SOCK), "the first installation's hostd still answers")


def scenario_hostd_dies(aid, hpid):
    cid = h.container(aid)["Id"]
    os.kill(hpid, signal.SIGSTOP)
    t0 = time.time()
    try:
        h.wait_state("alice", "unreachable", 30)
        print("hostd stopped -> unreachable in %.2f s" % (time.time() - t0))
        st, _ = h.api("GET", "/healthz")
        h.check(st == 200, "the API answers while hostd is away")
        h.check(h.cli("show", "alice")["state"] == "unreachable", "the API answers about the agent")
    finally:
        os.kill(hpid, signal.SIGKILL)   # a stopped process dies of it too
    new = hostd_pid(30, not_pid=hpid)
    h.check(proc_status(new)["Uid"] == ["0"] * 4, "serve restarted hostd (pid %d), root" % new)
    h.wait_state("alice", "running", 40)
    print("hostd back -> running in %.2f s" % (time.time() - t0))
    h.check(h.container(aid)["Id"] == cid, "the same container: nothing was re-created")
    h.check(exec_out("alice", "cat /home/agent/kept.txt") == "kept by the home\n", "nothing lost")
    h.check("restarting it in" in h.server_log_tail(200000), "serve's log says it restarts hostd")
    return new


def scenario(_):
    global PW
    try:
        PW = pwd.getpwnam(USER)
    except KeyError:
        raise Fail("no user %s: scripts/install-deps makes it" % USER)
    h.cleanups.append(kill_leftovers)
    scenario_no_user()
    scenario_earlier_root_run()
    spid, hpid = scenario_processes()
    aid = scenario_agent()
    scenario_second_installation(hpid)
    hpid = scenario_hostd_dies(aid, hpid)
    h.cli("rm", "alice", timeout=180)
    h.server.terminate()
    h.check(h.server.wait(timeout=60) == 0, "serve exits 0 on SIGTERM")
    ahserver.wait_until(lambda: not alive(spid) and not alive(hpid), 5, "", None)
    h.check(not alive(spid) and not alive(hpid), "neither the server nor hostd is left")
    h.check(not os.path.exists(IPC_SOCK) or
            subprocess.run(["/usr/bin/python3", "-c", "import socket,sys; s=socket.socket(socket.AF_UNIX); "
                            "s.connect(sys.argv[1])", IPC_SOCK], capture_output=True).returncode != 0,
            "nothing answers on hostd's socket")


PW = None
sys.exit(h.run(scenario))
