#!/usr/bin/python3
"""tests/docker/hostd_docker.py: the server and the host agent as separate
processes (docs/hostd.md), on the real Docker Engine.

- `agenthold hostd` runs as root and holds the Docker socket; `agenthold
  serve` runs as a system user made here (useradd) with sandbox.driver
  remote, and cannot open the Docker socket (the test tries, as that user).
- create, exec, files, sleep and wake go through hostd.
- a sleeping agent's files are read without waking it (the server reads
  the home hostd keeps); a stopped container is removed at its TTL through
  hostd, the home kept, and the next start re-creates it.
- hostd killed: the sandbox shows unreachable (with why) while the API
  answers, a start is refused with the reason, `agenthold hosts` says so;
  hostd restarted: the sandbox is running again, the same container, its
  file still there (nothing re-created); started while the lock of the
  one before is still held, it waits for it.
- A host agent that speaks another protocol (a stand-in written here with
  pyzmq) is refused with the sentence that names what runs and what to
  deploy, logged once, shown in `agenthold hosts` and on the agent; the
  real hostd refuses a caller of another protocol (426) and answers
  malformed input with 400 and keeps serving.
- tcp:// with CURVE: a wrong server key, and a server whose key hostd does
  not hold, get no answer (unreachable, the keys named); with the server's
  public key copied into hostd's curve/clients/ it answers.

usage: hostd_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine. Ports from ahserver.free_port, pool
10.213.240.0/20, prefix dockerhostd<pid>."""
import fcntl
import grp
import json
import os
import pwd
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import SOCK, engine, Fail, Harness, ahserver  # noqa: E402

import msgpack  # noqa: E402
import zmq  # noqa: E402

USER = "agenthold-test"
PROTOCOL = 5                            # drivers/remote/wire.h AH_HOSTD_PROTOCOL
h = Harness("docker.hostd", sys.argv[1], "10.213.240.0/20")
h.env["AGENTHOLD_SANDBOX_DRIVER"] = "remote"
h.env["AGENTHOLD_SANDBOX_REMOTE_TIMEOUT"] = "2s"
RUN = os.path.join(h.tmp, "run")
# The harness's catalog is the test image alone: nothing is pulled, and
# doctor finds every image.
os.chmod(h.env["AGENTHOLD_CATALOG_PATH"], 0o644)
IPC = "ipc://%s/hostd.sock" % RUN
h.env["AGENTHOLD_SANDBOX_REMOTE_ENDPOINT"] = IPC
# One configuration for both (hostd reads sleeping homes there for the server).
h.env["AGENTHOLD_HOSTD_DATA_DIR"] = os.path.join(h.tmp, "hostd")
HOSTD = {"proc": None, "log": os.path.join(h.tmp, "hostd.log")}
EXTRA = []                              # other processes of ours (tcp hostd)


def server_user():
    """The unprivileged user the server runs as: made here when absent."""
    try:
        pw = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        USER], check=True, timeout=30)
        h.cleanups.append(lambda: subprocess.run(["userdel", USER], timeout=30))
        pw = pwd.getpwnam(USER)
    h.check(pw.pw_uid != 0, "the server's user is not root")
    try:
        docker_gid = grp.getgrnam("docker").gr_gid
        h.check(docker_gid not in os.getgrouplist(USER, pw.pw_gid),
                "%s is not in the docker group" % USER)
    except KeyError:
        pass
    return pw


def hostd_env(endpoint=IPC, data=None, name="b1", extra=None):
    env = dict(h.env)
    env.update({"AGENTHOLD_HOSTD_ENDPOINT": endpoint,
                "AGENTHOLD_HOSTD_DATA_DIR": data or os.path.join(h.tmp, "hostd"),
                "AGENTHOLD_HOSTD_NAME": name,
                "AGENTHOLD_HOSTD_SERVER_USER": USER})
    env.update(extra or {})
    return env


def start_hostd():
    """Starts hostd; returns once this one says it is serving."""
    log = open(HOSTD["log"], "a")
    since = log.tell()                  # an earlier hostd's lines do not count
    HOSTD["proc"] = subprocess.Popen([h.bin, "hostd"], env=hostd_env(), cwd=h.tmp, stdout=log,
                                     stderr=log)
    log.close()

    def said():
        with open(HOSTD["log"]) as f:
            f.seek(since)
            return f.read()
    sock = os.path.join(RUN, "hostd.sock")
    deadline = time.time() + 20
    while not os.path.exists(sock) or "serving" not in said():
        h.check(time.time() < deadline and HOSTD["proc"].poll() is None,
                "hostd started: %s" % said()[-2000:])
        time.sleep(0.05)


def kill_hostd():
    p = HOSTD["proc"]
    if p and p.poll() is None:
        p.send_signal(signal.SIGKILL)
        p.wait()


def start_server(pw, extra_env=None):
    env = dict(extra_env or {})
    env["HOME"] = h.data
    h.start_server(env, cwd=h.data, user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])


def stop_server():
    if h.server and h.server.poll() is None:
        h.server.terminate()
        h.server.wait(timeout=60)


def fs_cli(*args):
    p = subprocess.run([h.bin, "fs"] + list(args), env=h.cli_env(), cwd=h.tmp,
                       capture_output=True, timeout=60)
    h.check(p.returncode == 0, "agenthold fs %s: %d %s" % (" ".join(args), p.returncode,
                                                           p.stderr.decode(errors="replace")))
    return p.stdout


def exec_out(name, cmd):
    st, r = h.api("POST", "/api/v1/agents/%s/exec" % name, {"cmd": cmd}, timeout=120)
    h.check(st == 200 and r["status"] == 0, "exec %r: %d %r" % (cmd, st, r))
    return r["stdout"]


def hosts():
    return h.cli("hosts")


def wait_host(state, seconds=20, contains=None):
    deadline = time.time() + seconds
    while True:
        hs = hosts()
        if hs and hs[0]["state"] == state and (not contains or contains in (hs[0]["error"] or "")):
            return hs[0]
        if time.time() > deadline:
            raise Fail("host: %r, wanted %s%s" % (hs, state, " with %r" % contains if contains else ""))
        time.sleep(0.2)


def scenario_basic(pw):
    """Create, exec, files, sleep, wake: all through hostd."""
    t0 = time.time()
    a = h.cli("create", "alice", "--memory-mb", "192")
    h.check(a["state"] == "running", "create through hostd waits for sandboxd's hello: %r" % a)
    print("create through hostd -> running in %.2f s" % (time.time() - t0))
    c = h.container(a["id"])
    h.check(c and c["State"]["Running"], "hostd made and started the container")
    h.check(exec_out("alice", "echo through-hostd") == "through-hostd\n", "exec through hostd")
    # A file only the agent may read (the server reads it asleep through hostd).
    exec_out("alice", "mkdir private && echo \"only the agent's\" > private/key && chmod 600 private/key "
                      "&& chmod 700 private")
    local = os.path.join(h.tmp, "up.txt")
    with open(local, "wb") as f:
        f.write(b"kept by the home\n")
    fs_cli("put", "alice", "kept.txt", local)
    h.check(fs_cli("get", "alice", "kept.txt", "-") == b"kept by the home\n", "a file round trip")
    h.check(h.cli("stop", "alice")["state"] == "sleeping", "sleep through hostd")
    h.check(not h.container(a["id"])["State"]["Running"], "the container stopped")
    h.check(h.cli("start", "alice")["state"] == "running", "wake through hostd")
    h.check(exec_out("alice", "cat kept.txt") == "kept by the home\n", "the file survived the sleep")
    hs = wait_host("up")
    h.check(hs["name"] == "b1" and hs["protocol"] == PROTOCOL and hs["version"], "hosts: %r" % hs)
    return a["id"]


def scenario_home_and_ttl(pw, aid):
    """Under hostd, a sleeping agent's files are read without waking it (the
    server reads the home hostd keeps), and a stopped container's lifetime
    ends through hostd (DRIVER_REMOVE_CONTAINER): the home stays, the next
    start re-creates the container."""
    stop_server()
    start_server(pw, {"AGENTHOLD_SANDBOX_CONTAINER_TTL": "3s",
                      "AGENTHOLD_SANDBOX_TTL_CHECK_INTERVAL": "250ms",
                      "AGENTHOLD_FILES_MAX_READ_BYTES": "10"})
    h.wait_state("alice", "running", 30)
    cid = h.container(aid)["Id"]
    h.check(h.cli("stop", "alice")["state"] == "sleeping", "sleep through hostd")
    h.check(fs_cli("get", "alice", "kept.txt", "-") == b"kept by the home\n",
            "a sleeping agent's file read under hostd")
    h.check(fs_cli("get", "alice", "private/key", "-") == b"only the agent's\n",
            "hostd reads the agent's 0600 file in a 0700 directory for the server")
    st, ls = h.api("GET", "/api/v1/agents/alice/files?path=.")
    h.check(st == 200 and "kept.txt" in [e["name"] for e in ls["entries"]], "listed asleep: %d %r" % (st, ls))
    # A read in JSON (fs/text) through hostd, cut at files.max_read_bytes (10 here).
    st, t = h.api("GET", "/api/v1/agents/alice/fs/text?path=kept.txt")
    h.check(st == 200 and t["content"] == "kept by th" and t["truncated"] and t["size"] == 17
            and t["content_bytes"] == 10, "fs/text asleep under hostd, cut at the cap: %d %r" % (st, t))
    st, t = h.api("GET", "/api/v1/agents/alice/fs/text?path=private/key")
    h.check(st == 200 and t["content"] == "only the a" and t["size"] == 17,
            "fs/text of the 0600 file under hostd: %d %r" % (st, t))
    st, t = h.api("GET", "/api/v1/agents/alice/fs/text?path=nothing-here")
    h.check(st == 404, "fs/text of a missing file under hostd: %d %r" % (st, t))
    h.check(not h.container(aid)["State"]["Running"], "the reads woke nothing")
    h.check(h.cli("show", "alice")["state"] == "sleeping", "still sleeping")
    deadline = time.time() + 30
    while h.container(aid) is not None:
        h.check(time.time() < deadline, "hostd removed the container at its TTL: %s" % h.server_log_tail(3000))
        time.sleep(0.25)
    a = h.wait_state("alice", "sleeping", 10)
    h.check(a["container_removed"], "the agent says its container was removed: %r" % a)
    _, vols = engine("GET", "/volumes?filters=" + h.label_filter())
    h.check(len((vols or {}).get("Volumes") or []) == 1, "the home volume stays: %r" % vols)
    h.check(fs_cli("get", "alice", "kept.txt", "-") == b"kept by the home\n",
            "the home read with no container at all")
    h.check(h.cli("start", "alice")["state"] == "running", "the next start re-creates it")
    h.check(h.container(aid)["Id"] != cid, "a new container")
    h.check(exec_out("alice", "cat kept.txt") == "kept by the home\n", "the home survived its container")
    stop_server()
    start_server(pw)
    h.wait_state("alice", "running", 30)


def scenario_no_socket(pw):
    """The process serving the API runs as the unprivileged user and
    cannot open the Docker socket."""
    with open("/proc/%d/status" % h.server.pid) as f:
        uids = [l for l in f if l.startswith("Uid:")][0].split()[1:]
    h.check(all(int(u) == pw.pw_uid for u in uids), "the server runs as %s: %r" % (USER, uids))
    p = subprocess.run(["/usr/bin/python3", "-c",
                        "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])",
                        SOCK], user=pw.pw_uid, group=pw.pw_gid, extra_groups=[],
                       capture_output=True, text=True, timeout=30)
    h.check(p.returncode != 0 and "Permission denied" in p.stderr,
            "the server's user cannot open %s: %d %s" % (SOCK, p.returncode, p.stderr[-300:]))
    fds = os.listdir("/proc/%d/fd" % h.server.pid)
    links = [os.readlink("/proc/%d/fd/%s" % (h.server.pid, fd)) for fd in fds
             if os.path.exists("/proc/%d/fd/%s" % (h.server.pid, fd))]
    h.check(not any("docker.sock" in x for x in links), "the server holds no docker socket")
    st = os.stat(RUN)
    h.check((st.st_mode & 0o777) == 0o700 and st.st_uid == pw.pw_uid,
            "hostd's socket directory is 0700 and the server user's: %o %d" % (st.st_mode, st.st_uid))
    st = os.stat(os.path.join(RUN, "hostd.sock"))
    h.check((st.st_mode & 0o777) == 0o600 and st.st_uid == pw.pw_uid,
            "hostd's socket is 0600 and the server user's: %o" % st.st_mode)


def scenario_unreachable(aid):
    """hostd killed: unreachable while the API answers; back: nothing lost."""
    cid = h.container(aid)["Id"]
    kill_hostd()
    t0 = time.time()
    a = h.wait_state("alice", "unreachable", 15)
    print("hostd killed -> unreachable in %.2f s" % (time.time() - t0))
    h.check("does not answer" in (a["error"] or ""), "the agent says why: %r" % a["error"])
    # Seed 004: the message leaves out the service's address; admins see it.
    h.check("hostd.sock" not in a["error"] and "ipc://" not in a["error"] and RUN not in a["error"],
            "the agent's error does not name the host agent's address: %r" % a["error"])
    st, body = h.api("GET", "/healthz")
    h.check(st == 200, "the API answers while hostd is away")
    hs = wait_host("unreachable", contains="does not answer")
    h.check(RUN in (hs["error"] or ""), "the hosts view (an admin's) names the endpoint: %r" % hs)
    h.check(hs["unreachable_sandboxes"] == 1, "hosts counts the unreachable sandbox: %r" % hs)
    p = h.cli_raw("start", "alice")
    h.check(p.returncode != 0 and "unreachable" in p.stderr, "a start is refused: %s" % p.stderr)
    h.check(h.container(aid)["State"]["Running"], "the container runs on without hostd")
    # A hostd that is going (its serve killed) holds its lock a while after
    # its socket closed: one started meanwhile waits for it, not fails.
    lock = open(os.path.join(h.tmp, "hostd", "hostd.lock"), "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    releaser = threading.Timer(2.0, lock.close)
    releaser.start()
    try:
        start_hostd()
    finally:
        releaser.join()
    h.check("waiting up to 15 s for it to finish" in open(HOSTD["log"]).read(),
            "the new hostd waited for the old one's lock")
    t0 = time.time()
    h.wait_state("alice", "running", 20)
    print("hostd back -> running in %.2f s" % (time.time() - t0))
    h.check(h.container(aid)["Id"] == cid, "the same container: nothing was re-created")
    h.check(exec_out("alice", "cat kept.txt") == "kept by the home\n", "nothing lost")
    wait_host("up")
    # The driver's warning and lifecycle's count; an actor whose own call
    # failed meanwhile says so in its own line, which is not counted here.
    said = [line for line in h.server_log_tail(200000).splitlines()
            if "does not answer (nothing for" in line and ("[remote]" in line or "[lifecycle]" in line)]
    h.check(len(said) <= 2, "the silence is logged once (and once with the count of sandboxes): %d: %s"
            % (len(said), "\n".join(x[:160] for x in said)))


class FakeHostd(threading.Thread):
    """A host agent of another release: answers every call with protocol 99."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.chmod(os.path.dirname(path), 0o755)
        self.sock.bind("ipc://" + path)
        os.chmod(path, 0o666)
        self.calls = 0
        self.stop = False

    def run(self):
        while not self.stop:
            if not self.sock.poll(200):
                continue
            peer, typ, body = self.sock.recv_multipart()
            req = msgpack.unpackb(body).get("req", 0)
            self.calls += 1
            reply = {"req": req, "ok": True, "status": 200, "protocol": 99, "version": "0.0.9",
                     "host": "b9", "ids": ""}
            self.sock.send_multipart([peer, b"REPLY", msgpack.packb(reply)])
        self.sock.close(0)


def scenario_mismatch(pw):
    """A hostd of another protocol is refused with the sentence."""
    path = os.path.join(h.tmp, "fake", "hostd.sock")
    fake = FakeHostd(path)
    fake.start()
    try:
        stop_server()
        mark = len(h.server_log_tail(10 ** 7))
        start_server(pw, {"AGENTHOLD_SANDBOX_REMOTE_ENDPOINT": "ipc://" + path})
        want = ("host b9 runs agenthold hostd 0.0.9 (protocol 99); this server speaks protocol %d: "
                "install agenthold 0.1.0 on b9 and restart hostd" % PROTOCOL)
        hs = wait_host("refused", contains="protocol 99")
        h.check(hs["error"] == want, "the sentence: %r" % hs["error"])
        h.check(hs["name"] == "b9" and hs["version"] == "0.0.9" and hs["protocol"] == 99
                and len(hosts()) == 1, "hosts shows what runs there: %r" % hosts())
        a = h.wait_state("alice", "unreachable", 15)
        h.check(a["error"] == want, "the agent shows the sentence: %r" % a["error"])
        #  Until the watch has asked again (the checks below say if not).
        ahserver.wait_until(lambda: fake.calls >= 2, 10, "", None, 0.1)
        log = h.server_log_tail(10 ** 7)[mark:]
        remote = [l for l in log.splitlines() if "[remote]" in l and want in l]
        h.check(len(remote) == 1, "logged once: %d times" % len(remote))
        h.check(fake.calls >= 2, "the server kept asking: %d" % fake.calls)
        rc, checks = doctor({"AGENTHOLD_SANDBOX_REMOTE_ENDPOINT": "ipc://" + path})
        h.check(rc == 1, "doctor: a hostd of another protocol is a problem")
        failing(checks, "host", want, "deploy the same agenthold release")
    finally:
        fake.stop = True
        fake.join()
    stop_server()
    start_server(pw)
    h.wait_state("alice", "running", 20)
    wait_host("up")


def hostd_call(typ, fields, frames=None):
    """One call to the real hostd as a raw peer (root may open its socket)."""
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.IDENTITY, b"test-%d-%d" % (os.getpid(), time.monotonic_ns()))
    s.connect(IPC)
    try:
        s.send_multipart(frames or [typ.encode(), msgpack.packb(fields)])
        deadline = time.time() + 5
        while True:
            if not s.poll(max(0, int((deadline - time.time()) * 1000))):
                raise Fail("hostd did not answer %s" % (typ or frames))
            parts = s.recv_multipart()
            got = (parts[0].decode(errors="replace"), msgpack.unpackb(parts[1]) if len(parts) > 1 else None)
            # Only a REPLY answers a call; anything else is named, never a KeyError.
            if got[0] == "REPLY" and isinstance(got[1], dict) and "ok" in got[1] and "status" in got[1]:
                return got
            print("hostd_call %s: not a reply, skipped: %r" % (typ or frames, got), file=sys.stderr)
    finally:
        s.close(0)


def scenario_hostd_refuses():
    """The real hostd refuses a caller of another protocol, and hostile input."""
    typ, r = hostd_call("DRIVER_LIST", {"req": 7, "protocol": 99, "version": "9.9.9"})
    h.check(typ == "REPLY" and not r["ok"] and r["status"] == 426 and r["req"] == 7,
            "another protocol is refused: %r" % r)
    h.check("protocol 99" in r["error"] and "9.9.9" in r["error"] and r["protocol"] == PROTOCOL,
            "the refusal names both sides: %r" % r["error"])
    typ, r = hostd_call("DRIVER_FORMAT_DISK", {"req": 8, "protocol": PROTOCOL})
    h.check(not r["ok"] and r["status"] == 400 and "unknown" in r["error"], "unknown type: %r" % r)
    typ, r = hostd_call(None, None, [b"DRIVER_LIST", b"\xc1\xc1not msgpack"])
    h.check(not r["ok"] and r["status"] == 400, "a malformed map: %r" % r)
    typ, r = hostd_call(None, None, [b"DRIVER_LIST"])
    h.check(not r["ok"] and r["status"] == 400, "one frame: %r" % r)
    typ, r = hostd_call("DRIVER_INSPECT", {"req": 9, "protocol": PROTOCOL, "agent_id": "../../etc"})
    h.check(not r["ok"] and r["status"] == 500 and "agent" in r["error"], "a bad id: %r" % r)
    typ, r = hostd_call("DRIVER_IMAGE_BUILD", {"req": 10, "protocol": PROTOCOL, "image": "evil:1"})
    h.check(not r["ok"] and "not in the catalog" in r["error"], "builds only its catalog: %r" % r)
    # HOSTD_HOME (hostd reads a home for the server): what is not a
    # request for a path beneath a home it keeps is refused, never followed.
    for n, f in enumerate(({"op": "write", "path": "x"}, {"path": "."}, {"op": "read", "path": "/etc/passwd"},
                           {"op": "list", "path": ""}, {"op": "list", "path": ".", "agent_id": "../../etc"},
                           {"op": "tree", "path": ".", "agent_id": "ffffffffffff", "max_depth": 2,
                            "max_entries": 10},
                           {"op": "read", "path": "x", "agent_id": "ffffffffffff", "offset": -1})):
        fields = {"req": 20 + n, "protocol": PROTOCOL, "agent_id": "ffffffffffff"}
        fields.update(f)
        typ, r = hostd_call("HOSTD_HOME", fields)
        h.check(typ == "REPLY" and not r["ok"] and r["status"] == 500 and "HOSTD_HOME" in r["error"]
                and "data" not in r and "json" not in r, "HOSTD_HOME %r refused: %r" % (f, r))
    typ, r = hostd_call("HOSTD_HELLO", {"req": 11, "protocol": PROTOCOL})
    h.check(r["ok"] and r["host"] == "b1" and r["driver"] == "docker", "still serving: %r" % r)


def hostd_key(p, data):
    """The public key a tcp:// hostd made at its first start."""
    cert = os.path.join(data, "curve", "hostd.cert")
    def key():
        try:
            with open(cert) as f:
                keys = [l.split("=", 1)[1].strip().strip('"') for l in f if l.strip().startswith("public-key")]
        except OSError:
            return None
        return keys[0] if keys and keys[0] else None
    return ahserver.wait_until(key, 10, "the tcp hostd made its key pair", Fail, 0.05, alive=p)


def scenario_curve(pw):
    """tcp:// with CURVE: wrong keys get nothing; the right ones get in."""
    port = ahserver.free_port(avoid={h.api_port, h.tunnel_port}, fail=Fail, address="0.0.0.0")
    tcp = "tcp://127.0.0.1:%d" % port
    data = os.path.join(h.tmp, "hostd-tcp")
    log = open(os.path.join(h.tmp, "hostd-tcp.log"), "a")
    p = subprocess.Popen([h.bin, "hostd"], env=hostd_env(tcp, data, "b2"), cwd=h.tmp,
                         stdout=log, stderr=log)
    EXTRA.append(p)
    key = hostd_key(p, data)
    cert = os.path.join(data, "curve", "hostd.cert")
    h.check(len(key) == 40, "hostd's public key: %r" % key)
    h.check(os.stat(cert + "_secret").st_mode & 0o077 == 0, "hostd's secret key is private")
    wrong, _ = zmq.curve_keypair()
    stop_server()
    env = {"AGENTHOLD_SANDBOX_REMOTE_ENDPOINT": tcp}
    start_server(pw, dict(env, AGENTHOLD_SANDBOX_REMOTE_SERVER_KEY=wrong.decode()))
    hs = wait_host("unreachable", contains="CURVE keys do not match")
    h.check(hs["name"] == tcp, "a host that never answered is named by its endpoint: %r" % hs)
    stop_server()
    start_server(pw, dict(env, AGENTHOLD_SANDBOX_REMOTE_SERVER_KEY=key))
    wait_host("unreachable", contains="CURVE keys do not match")
    ours = os.path.join(h.data, "curve", "server.cert")
    h.check(os.path.exists(ours) and os.stat(ours + "_secret").st_mode & 0o077 == 0,
            "the server made its key pair, the secret private")
    h.check(not any(x.get("name") == "b2" for x in hosts()), "an unknown server gets no answer")
    shutil.copy(ours, os.path.join(data, "curve", "clients", "server.cert"))
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)
    p = subprocess.Popen([h.bin, "hostd"], env=hostd_env(tcp, data, "b2"), cwd=h.tmp,
                         stdout=log, stderr=log)
    EXTRA.append(p)
    log.close()
    hs = wait_host("up", 20)
    h.check(hs["name"] == "b2", "with the server's key in clients/ hostd answers: %r" % hs)
    stop_server()
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)
    start_server(pw)
    h.wait_state("alice", "running", 20)


def netns():
    """A network namespace of this test's own, joined to this one by a veth
    pair on 10.214.239.0/30 (.1 here, .2 there): hostd runs in it as on
    another machine. (ns, address here, address there); removed at the end."""
    ns = "ahhd%d" % os.getpid()
    here, there = "vh%d" % os.getpid(), "vn%d" % os.getpid()

    def ip(*args, check=True):
        return subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=30,
                              check=check)
    h.cleanups.append(lambda: (ip("link", "del", here, check=False),
                               ip("netns", "del", ns, check=False)))
    ip("netns", "add", ns)
    ip("link", "add", here, "type", "veth", "peer", "name", there)
    ip("link", "set", there, "netns", ns)
    ip("addr", "add", "10.214.239.1/30", "dev", here)
    ip("link", "set", here, "up")
    ip("netns", "exec", ns, "ip", "addr", "add", "10.214.239.2/30", "dev", there)
    ip("netns", "exec", ns, "ip", "link", "set", there, "up")
    ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
    return ns, "10.214.239.1", "10.214.239.2"


def scenario_relay(pw):
    """hostd as on another machine: in a network namespace of its own, on
    tcp:// with CURVE, its own tunnel socket relayed to the server's
    tunnel_listen across the veth pair; the server's own socket is not
    where hostd looks (another server.data_dir in hostd's configuration)."""
    ns, server_addr, hostd_addr = netns()
    port = ahserver.free_port(avoid={h.api_port, h.tunnel_port}, fail=Fail, address="0.0.0.0")
    tcp = "tcp://%s:%d" % (hostd_addr, port)
    data = os.path.join(h.tmp, "hostd-relay")
    clients = os.path.join(data, "curve", "clients")
    os.makedirs(clients, mode=0o700)
    shutil.copy(os.path.join(h.data, "curve", "server.cert"), os.path.join(clients, "server.cert"))
    elsewhere = os.path.join(h.tmp, "not-the-server")
    relay = "tcp://%s:%d" % (server_addr, h.tunnel_port)
    log = open(os.path.join(h.tmp, "hostd-relay.log"), "a")
    p = subprocess.Popen(["ip", "netns", "exec", ns, h.bin, "hostd"], env=hostd_env(tcp, data, "b3", {
        "AGENTHOLD_SERVER_DATA_DIR": elsewhere, "AGENTHOLD_HOSTD_TUNNEL_RELAY": relay}),
        cwd=h.tmp, stdout=log, stderr=log)
    log.close()
    EXTRA.append(p)
    key = hostd_key(p, data)
    sock = os.path.join(data, "run", "tunnel.sock")
    h.check(os.path.exists(sock) and os.stat(sock).st_mode & 0o777 == 0o666,
            "hostd listens on a tunnel socket of its own: %s" % sock)
    stop_server()
    # The server's tunnel listens where the other "machine" reaches it.
    env = {"AGENTHOLD_SANDBOX_REMOTE_ENDPOINT": tcp, "AGENTHOLD_SANDBOX_REMOTE_SERVER_KEY": key,
           "AGENTHOLD_SANDBOX_TUNNEL_LISTEN": "%s:%d" % (server_addr, h.tunnel_port)}
    start_server(pw, env)
    hs = wait_host("up", 20)
    h.check(hs["name"] == "b3", "the relaying hostd in another network namespace answers: %r" % hs)
    # hostd there cannot reach the server's loopback: only the veth pair.
    probe = subprocess.run(["ip", "netns", "exec", ns, "/usr/bin/python3", "-c",
                            "import socket; socket.create_connection(('127.0.0.1', %d), 2)"
                            % h.api_port], capture_output=True, timeout=30)
    h.check(probe.returncode != 0, "hostd's namespace does not reach the server's 127.0.0.1")
    t0 = time.time()
    a = h.cli("create", "relayed")
    h.check(a["state"] == "running", "a sandbox of the relaying hostd dials back: %r" % a)
    print("create through a relaying hostd in another network namespace -> running in %.2f s" % (time.time() - t0))
    sbx = h.container(a["id"])
    mounts = {m["Destination"]: m for m in sbx["Mounts"]}
    m = mounts.get("/run/agenthold")
    h.check(m and m["Source"] == os.path.join(data, "run") and not m["RW"],
            "the sandbox mounts hostd's socket directory, not the server's: %r" % m)
    h.check(exec_out("relayed", "echo through-the-relay").strip() == "through-the-relay",
            "exec through the relay")
    # Asleep on the other "machine": hostd reads its home for the server
    # (HOSTD_HOME over tcp:// + CURVE), a 0600 file too; nothing wakes.
    exec_out("relayed", "mkdir -p notes && printf private > notes/key && chmod 600 notes/key "
                        "&& chmod 700 notes && ln -s /etc/passwd esc")
    h.check(h.cli("stop", "relayed")["state"] == "sleeping", "the relayed agent sleeps")
    h.check(fs_cli("get", "relayed", "notes/key", "-") == b"private",
            "a sleeping agent's 0600 file read through a hostd on another machine")
    st, ls = h.api("GET", "/api/v1/agents/relayed/files?path=notes")
    h.check(st == 200 and [e["name"] for e in ls["entries"]] == ["key"], "listed asleep: %d %r" % (st, ls))
    st, tr = h.api("GET", "/api/v1/agents/relayed/tree")
    h.check(st == 200 and "notes/key" in [e["path"] for e in tr["entries"]], "its tree asleep: %d %r"
            % (st, tr))
    for bad, want in (("../../../etc/passwd", 400), ("notes/../../x", 400), ("nothing-here", 404),
                      ("notes", 409), ("esc", 403)):
        st, r = h.api("GET", "/api/v1/agents/relayed/fs/file?path=" + bad)
        h.check(st == want, "asleep through hostd, %r refused with %d: %d %r" % (bad, want, st, r))
    h.check(h.cli("show", "relayed")["state"] == "sleeping", "the reads woke nothing")
    h.check(h.cli("start", "relayed")["state"] == "running", "the relayed agent wakes")
    rc, checks = doctor(env)
    t = checks["tunnel"]
    h.check(t["status"] == "ok" and "relays it to " + relay in t["detail"] and sock in t["detail"],
            "doctor asks hostd, which tries the socket its sandboxes mount: %r" % t)
    # The server's tunnel gone: the relay's socket answers nothing, doctor says so.
    stop_server()
    rc, checks = doctor(env)
    failing(checks, "tunnel", "nothing answers", "start agenthold serve")
    start_server(pw, env)
    h.wait_state("relayed", "running", 30)
    h.check(h.cli("rm", "relayed")["state"] == "destroyed", "rm through the relaying hostd")
    stop_server()
    p.send_signal(signal.SIGTERM)       # ip netns exec execs hostd: the signal is hostd's
    p.wait(timeout=30)
    h.check(not os.path.exists(sock), "hostd removed its tunnel socket at exit")
    start_server(pw)
    h.wait_state("alice", "running", 20)
    wait_host("up")


def doctor(extra=None):
    """agenthold doctor --json with the server's configuration: (status, checks by name)."""
    env = dict(h.env)
    env.update(extra or {})
    p = subprocess.run([h.bin, "doctor", "--json"], env=env, cwd=h.tmp, capture_output=True,
                       text=True, timeout=60)
    out = json.loads(p.stdout)
    h.check(out["ok"] == (p.returncode == 0), "doctor's ok matches its exit status: %r" % out)
    return p.returncode, {c["name"]: c for c in out["checks"]}


def failing(checks, name, detail, advice):
    c = checks[name]
    h.check(c["status"] == "fail" and detail in c["detail"] and advice in c.get("advice", ""),
            "doctor's %s fails with %r and advises %r: %r" % (name, detail, advice, c))
    others = [n for n, x in checks.items() if x["status"] != "ok" and n != name]
    return others


def scenario_doctor(pw):
    """Each check passing, then failing with its advice."""
    rc, checks = doctor()
    h.check(rc == 0 and all(c["status"] == "ok" for c in checks.values()),
            "doctor: all is well: %r" % [c for c in checks.values() if c["status"] != "ok"])
    for name in ("configuration", "database", "tombstones", "lua limits.lua", "lua idle.lua",
                 "lua briefing.lua", "host", "engine", "isolation", "disk", "images", "tunnel",
                 "tls", "admin token"):
        h.check(name in checks, "doctor checks %s" % name)
    h.check("hostd 0.1.0, protocol %d" % PROTOCOL in checks["host"]["detail"], "host: %r" % checks["host"])
    h.check("API 1." in checks["engine"]["detail"], "engine: %r" % checks["engine"])
    h.check("seccomp on" in checks["isolation"]["detail"], "isolation: %r" % checks["isolation"])
    h.check("GiB free" in checks["disk"]["detail"], "disk: %r" % checks["disk"])
    token = os.path.join(h.data, "admin.token")
    os.chmod(token, 0o644)
    try:
        rc, checks = doctor()
        h.check(rc == 1, "a token readable by others is a problem")
        h.check(failing(checks, "admin token", "mode 0644", "chmod 600") == [], "only the mode")
    finally:
        os.chmod(token, 0o600)
    missing = "agenthold-test-missing:" + h.prefix
    with open(os.path.join(h.tmp, "catalog-missing.json"), "w") as f:
        json.dump({"version": 2, "runtimes": [
            {"alias": "test", "image": h.tag, "description": "the test image"},
            {"alias": "gone", "image": missing, "description": "not on the host"}]}, f)
    rc, checks = doctor({"AGENTHOLD_CATALOG_PATH": os.path.join(h.tmp, "catalog-missing.json")})
    h.check(rc == 1 and failing(checks, "images", missing, "pull") == [], "a missing image")
    lua = os.path.join(h.tmp, "lua-broken")
    shutil.copytree(os.path.join(os.path.dirname(h.bin), "..", "..", "lua"), lua)
    with open(os.path.join(lua, "idle.lua"), "w") as f:
        f.write("function idle(sandbox, facts) return {sleep = \n")
    rc, checks = doctor({"AGENTHOLD_POLICY_LUA_DIR": lua})
    h.check(rc == 1 and failing(checks, "lua idle.lua", "idle.lua", "fix") == [], "a broken script")
    rc, checks = doctor({"AGENTHOLD_SANDBOX_DRIVER": "podman"})
    h.check(rc == 1 and failing(checks, "configuration", "podman", "fix the key") == [],
            "a bad configuration stops the other checks")
    deadline = time.time() + 30
    while True:
        rc, checks = doctor()
        if "not ended yet" not in checks["firewall"]["detail"] or time.time() > deadline:
            break
        time.sleep(1)
    h.check("as the host agent's sandboxes see it" in checks["tunnel"]["detail"]
            and "HTTP " in checks["tunnel"]["detail"], "tunnel, asked of hostd: %r" % checks["tunnel"])
    # The probe ran in hostd, with hostd's configuration: under the default
    # sandbox.docker.egress (tunnel) no sandbox has a network, so it says so
    # without probing (docker.firewall probes under bridge).
    h.check(checks["firewall"]["status"] == "ok"
            and "no host firewall rule is needed" in checks["firewall"]["detail"],
            "the firewall probe ran in hostd: %r" % checks["firewall"])
    h.check("host firewall: " in open(HOSTD["log"]).read(), "hostd logged the probe's outcome")
    # The server stopped: hostd finds nothing behind the socket its sandboxes mount.
    stop_server()
    try:
        rc, checks = doctor()
        h.check(rc == 1 and failing(checks, "tunnel", "tunnel.sock", "start agenthold serve") == [],
                "nothing answers where sandboxes dial")
    finally:
        start_server(pw)
    # A copy of the database with a destroy still owed, and no token file beside it.
    other = os.path.join(h.tmp, "data-copy")
    os.makedirs(other)
    src = sqlite3.connect(os.path.join(h.data, "agenthold.db"))
    dst = sqlite3.connect(os.path.join(other, "agenthold.db"))
    src.backup(dst)
    src.close()
    dst.execute("INSERT INTO tombstones (agent_id, at) VALUES ('0123456789ab', 1)")
    dst.commit()
    rc, checks = doctor({"AGENTHOLD_SERVER_DATA_DIR": other})
    failing(checks, "tombstones", "1 destroy(s) still owed", "start the server")
    failing(checks, "admin token", "No such file", "start the server once")
    dst.execute("PRAGMA user_version = 99")
    dst.commit()
    dst.close()
    rc, checks = doctor({"AGENTHOLD_SERVER_DATA_DIR": other})
    failing(checks, "database", "schema version 99 is newer", "install the agenthold release")
    rc, checks = doctor({"AGENTHOLD_SERVER_DATA_DIR": os.path.join(h.tmp, "data-none")})
    failing(checks, "database", "no database", "start the server once")
    # TLS: a certificate about to expire, then one that is not.
    for days, ok in ((1, False), (60, True)):
        cert, key = (os.path.join(h.tmp, "tls%d.%s" % (days, x)) for x in ("crt", "key"))
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", str(days),
                        "-subj", "/CN=localhost", "-keyout", key, "-out", cert],
                       check=True, capture_output=True, timeout=60)
        rc, checks = doctor({"AGENTHOLD_SERVER_TLS_CERT": cert, "AGENTHOLD_SERVER_TLS_KEY": key})
        if ok:
            h.check(checks["tls"]["status"] == "ok" and "expires in" in checks["tls"]["detail"],
                    "a good certificate: %r" % checks["tls"])
        else:
            failing(checks, "tls", "expires in ", "renew the certificate")  # 0 or 1 day(s) left
    rc, checks = doctor({"AGENTHOLD_SERVER_LISTEN": "0.0.0.0:%d" % h.api_port})
    failing(checks, "tls", "plain HTTP on 0.0.0.0", "set server.tls_cert")
    kill_hostd()
    try:
        rc, checks = doctor()
        h.check(rc == 1, "a stopped hostd is a problem")
        failing(checks, "host", "does not answer", "start `agenthold hostd`")
    finally:
        start_hostd()


def scenario(h):
    pw = server_user()
    os.chmod(h.tmp, 0o711)              # the server's user walks to its data dir
    os.makedirs(h.data, mode=0o700)
    os.chown(h.data, pw.pw_uid, pw.pw_gid)
    start_hostd()
    start_server(pw)
    scenario_no_socket(pw)
    aid = scenario_basic(pw)
    scenario_home_and_ttl(pw, aid)
    scenario_doctor(pw)
    scenario_unreachable(aid)
    scenario_hostd_refuses()
    scenario_mismatch(pw)
    scenario_curve(pw)
    scenario_relay(pw)
    h.check(h.cli("rm", "alice")["state"] == "destroyed", "rm through hostd")
    h.check(h.container(aid) is None, "the container is gone")


def cleanup():
    stop_server()
    kill_hostd()
    for p in EXTRA:
        if p.poll() is None:
            p.kill()
            p.wait()


h.cleanups.append(cleanup)
if os.geteuid() != 0:
    # The server's own user is made with useradd and the server started as it.
    print("\n*** docker.hostd SKIPPED: needs root (CI runs as root) ***\n", file=sys.stderr)
    shutil.rmtree(h.tmp, ignore_errors=True)
    sys.exit(77)
sys.exit(h.run(scenario))
