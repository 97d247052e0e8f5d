#!/usr/bin/python3
"""tests/docker/e2e_docker.py: the real `agenthold serve` with the Docker
driver and the real static sandboxd, driven by the agenthold CLI, checked
against the Docker Engine API (never the docker CLI).

create -> running (sandboxd's hello through the tunnel on the network's
gateway); the container, volume and network exist with their labels and
limits; stop -> sleeping with the container stopped; start; a `docker stop`
done by hand (through the Engine API) is noticed (sleeping); an update of
the memory and a rebuild change the container; kill -9 of the server and a
restart: the agent is running again; rm -> nothing of it is left.

usage: e2e_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine. Ports from 18320-18339, pool
10.213.96.0/20, prefix ahe2e<pid>. Removes everything it made, even on
failure."""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

SOCK = os.environ.get("AH_TEST_DOCKER_SOCKET", "/var/run/docker.sock")
BIN = os.path.abspath(sys.argv[1])
HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "ahe2e%d" % os.getpid()
TAG = "agenthold-test:" + PREFIX
TMP = tempfile.mkdtemp(prefix="ah-e2e-docker-")
LOG = os.path.join(TMP, "server.log")
checks = 0
server = None


class Fail(Exception):
    pass


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        raise Fail(what)


class UnixHTTP(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(SOCK)


def engine(method, path, body=None):
    """(status, parsed JSON or None) from the Docker Engine API."""
    c = UnixHTTP("docker")
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read()
    c.close()
    try:
        return r.status, json.loads(text) if text else None
    except ValueError:
        return r.status, None


def label_filter():
    return urllib.parse.quote(json.dumps({"label": ["agenthold.prefix=" + PREFIX]}))


def leftovers():
    f = label_filter()
    _, c = engine("GET", "/containers/json?all=1&filters=" + f)
    _, n = engine("GET", "/networks?filters=" + f)
    _, v = engine("GET", "/volumes?filters=" + f)
    return (c or []), (n or []), ((v or {}).get("Volumes") or [])


def cleanup_engine():
    c, n, v = leftovers()
    for x in c:
        engine("DELETE", "/containers/%s?force=true&v=true" % x["Id"])
    for x in n:
        engine("DELETE", "/networks/%s" % x["Id"])
    for x in v:
        engine("DELETE", "/volumes/%s?force=true" % x["Name"])
    engine("DELETE", "/images/%s?force=true" % urllib.parse.quote(TAG, safe=""))


def free_port(avoid=()):
    for port in range(18320 + os.getpid() % 10, 18340):
        if port in avoid:
            continue
        s = socket.socket()
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    raise Fail("no free port in 18320-18339")


API_PORT = free_port()
TUNNEL_PORT = free_port({API_PORT})
ENV = {k: v for k, v in os.environ.items() if not k.startswith("AGENTHOLD_")}
ENV.update({
    "AGENTHOLD_SERVER_DATA_DIR": os.path.join(TMP, "data"),
    "AGENTHOLD_SANDBOX_DRIVER": "docker",
    "AGENTHOLD_SERVER_LISTEN": "127.0.0.1:%d" % API_PORT,
    # All addresses: sandboxes reach the tunnel on their network's gateway.
    "AGENTHOLD_SANDBOX_TUNNEL_LISTEN": ":%d" % TUNNEL_PORT,
    "AGENTHOLD_SANDBOX_DEFAULT_IMAGE": TAG,
    "AGENTHOLD_SANDBOX_DEFAULT_CPUS": "1",
    "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB": "128",
    "AGENTHOLD_SANDBOX_DOCKER_SOCKET": SOCK,
    "AGENTHOLD_SANDBOX_DOCKER_NAME_PREFIX": PREFIX,
    "AGENTHOLD_SANDBOX_DOCKER_NETWORK_POOL": "10.213.96.0/20",
})


def start_server():
    global server
    log = open(LOG, "a")
    log.write("---- server start ----\n")
    log.flush()
    server = subprocess.Popen([BIN, "serve"], env=ENV, cwd=TMP, stdout=log, stderr=log)
    deadline = time.time() + 20
    while time.time() < deadline:
        if server.poll() is not None:
            raise Fail("the server exited at start with status %d" % server.returncode)
        try:
            c = http.client.HTTPConnection("127.0.0.1", API_PORT, timeout=2)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise Fail("the server did not answer /healthz within 20 s")


def cli(*args):
    p = subprocess.run([BIN] + list(args) + ["--json"], env=ENV, cwd=TMP, capture_output=True,
                       text=True, timeout=120)
    check(p.returncode == 0, "agenthold %s: status %d: %s" % (" ".join(args), p.returncode,
                                                           p.stderr.strip()))
    return json.loads(p.stdout)


def wait_state(name, want, seconds=20):
    deadline = time.time() + seconds
    while True:
        a = cli("show", name)
        if a["state"] == want:
            return a
        if time.time() > deadline:
            raise Fail("%s: state %s, not %s, after %d s (error: %s)" %
                       (name, a["state"], want, seconds, a.get("error")))
        time.sleep(0.2)


def api(method, path, body=None):
    with open(os.path.join(TMP, "data", "admin.token")) as f:
        token = f.read().strip()
    c = http.client.HTTPConnection("127.0.0.1", API_PORT, timeout=60)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read()
    return r.status, json.loads(text) if text else None


def container(agent_id):
    st, j = engine("GET", "/containers/%s-%s/json" % (PREFIX, agent_id))
    return j if st == 200 else None


def scenario():
    start_server()
    t0 = time.time()
    a = cli("create", "alice", "--memory-mb", "192")
    check(a["state"] == "running", "create waits for sandboxd's hello: %r" % a["state"])
    print("create -> running in %.2f s" % (time.time() - t0))
    aid = a["id"]
    c = container(aid)
    check(c and c["State"]["Running"], "the container runs")
    check(c["HostConfig"]["Memory"] == 192 * 1024 * 1024 and c["HostConfig"]["Init"],
          "memory and init: %r" % {k: c["HostConfig"][k] for k in ("Memory", "Init")})
    check(c["Config"]["Labels"].get("agenthold.agent") == aid, "labelled with the agent id")
    st, net = engine("GET", "/networks/%s-net-%s" % (PREFIX, aid))
    check(st == 200 and net["Internal"], "its internal network exists")
    st, _ = engine("GET", "/volumes/%s-home-%s" % (PREFIX, aid))
    check(st == 200, "its home volume exists")

    check(cli("stop", "alice")["state"] == "sleeping", "stop -> sleeping")
    check(not container(aid)["State"]["Running"], "the container is stopped")
    check(cli("start", "alice")["state"] == "running", "start -> running")

    # By hand, as an operator would with `docker stop`.
    st, _ = engine("POST", "/containers/%s-%s/stop?t=1" % (PREFIX, aid))
    check(st == 204, "stop by hand through the Engine API")
    wait_state("alice", "sleeping", 15)
    check(cli("start", "alice")["state"] == "running", "start after the stop by hand")

    # Update + rebuild: the new container has the new memory, the home stays.
    st, a = api("PATCH", "/api/v1/agents/alice", {"memory_mb": 256})
    check(st == 200 and a["needs_rebuild"], "PATCH memory_mb: %d %r" % (st, a))
    check(cli("rebuild", "alice")["state"] == "running", "rebuild -> running")
    c = container(aid)
    check(c["HostConfig"]["Memory"] == 256 * 1024 * 1024, "the rebuilt container has 256 MiB")
    check(cli("show", "alice")["needs_rebuild"] is False, "rebuilt: no rebuild needed")

    # The server dies hard while the sandbox runs; a new one finds it running.
    server.send_signal(signal.SIGKILL)
    server.wait()
    check(container(aid)["State"]["Running"], "the sandbox outlives the server")
    start_server()
    wait_state("alice", "running", 60)

    t0 = time.time()
    check(cli("rm", "alice")["state"] == "destroyed", "rm -> destroyed")
    c, n, v = leftovers()
    check(not c and not n and not v, "nothing of the agent is left: %d containers, %d networks, "
          "%d volumes" % (len(c), len(n), len(v)))


def main():
    try:
        st, _ = engine("GET", "/_ping")
    except OSError:
        st = 0
    if st != 200:
        print("\n*** docker.e2e SKIPPED: no Docker Engine at %s ***\n" % SOCK, file=sys.stderr)
        return 77
    if not os.path.exists(os.path.join(os.path.dirname(BIN), "sandboxd")):
        print("docker.e2e: no sandboxd next to %s" % BIN, file=sys.stderr)
        return 1
    rc = 1
    try:
        subprocess.run([os.path.join(HERE, "..", "images", "build-test-image.sh"), TAG, SOCK],
                       check=True, stdout=subprocess.DEVNULL, timeout=120)
        scenario()
        server.send_signal(signal.SIGTERM)
        check(server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")
        print("%d checks passed" % checks)
        rc = 0
    except (Fail, subprocess.SubprocessError, OSError, ValueError, KeyError, TypeError) as e:
        print("FAILED: %s" % e, file=sys.stderr)
        try:
            with open(LOG) as f:
                sys.stderr.write("---- server log ----\n" + f.read()[-6000:])
        except OSError:
            pass
    finally:
        if server and server.poll() is None:
            server.kill()
            server.wait()
        cleanup_engine()
        c, n, v = leftovers()
        if c or n or v:
            print("objects left behind with prefix %s" % PREFIX, file=sys.stderr)
            rc = 1
        shutil.rmtree(TMP, ignore_errors=True)
    return rc


sys.exit(main())
