#!/usr/bin/python3
"""tests/server/test_serve.py: the real server process, start to stop.

Usage: test_serve.py [--docker SOURCE_DIR] -- AGENTHOLD
(started as `AGENTHOLD serve` by tests/lib/ahserver.py serve. --docker
runs the test that needs a Docker Engine instead; exit 77 = skipped when
none is reachable.)

Checks: the admin token file is created 0600 and only its hash reaches
the database; a second server on the same data dir is refused naming the
first one's pid; SIGHUP reloads policies; SIGTERM stops cleanly (exit 0);
a restart keeps the token; a newer schema is refused; the docker driver
with an unreachable socket stops at start with the fix-it message; an
actor that cannot start stops the server; and, through the API, an agent
started on the fake driver reaches running over the tunnel while the
recorder keeps its state changes (the actors are wired to each other)."""
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahserver  # noqa: E402

# The argument after "--" is the agenthold binary.
BIN = sys.argv[sys.argv.index("--") + 1] if "--" in sys.argv else sys.argv[1]
API_PORT = ahserver.free_port()
TUNNEL_PORT = ahserver.free_port(avoid={API_PORT})
FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, file=sys.stderr)


class Server:
    """One server process with its own data dir and log files."""

    def __init__(self, data_dir, env_extra=None, name="server"):
        self.data_dir = data_dir
        self.log_path = os.path.join(os.path.dirname(data_dir), name + ".log")
        self.out_path = os.path.join(os.path.dirname(data_dir), name + ".out")
        # The caller's AGENTHOLD_* are kept (strip=False), as before.
        env = ahserver.server_env(data_dir, API_PORT, TUNNEL_PORT, strip=False,
                                  extra={"AGENTHOLD_LOG": "debug"})
        env.update(env_extra or {})
        self.proc = ahserver.serve(BIN, env, self.log_path, out=self.out_path, ready=False,
                                   cwd=os.path.dirname(data_dir))

    def text(self):
        with open(self.log_path, "rb") as f:
            log = f.read().decode(errors="replace")
        with open(self.out_path, "rb") as f:
            return log + f.read().decode(errors="replace")

    def wait_for(self, pattern, timeout=20):
        """Whether pattern shows in the output within timeout (or before
        the process exits)."""
        try:
            ahserver.wait_until(lambda: re.search(pattern, self.text()) or self.proc.poll() is not None,
                                timeout, "the output says %r" % pattern)
        except RuntimeError:
            pass
        return bool(re.search(pattern, self.text()))

    def wait_exit(self, timeout=30):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def stop(self):
        """Kills it if it still runs; a crash or a sanitizer's report in
        its output fails the test (ahserver.verdict)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for why in ahserver.verdict([self.proc], [self.log_path, self.out_path]):
            check(False, why)


def http_status(path, token=None):
    request = urllib.request.Request("http://127.0.0.1:%d%s" % (API_PORT, path))
    if token:
        request.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def http_json(method, path, token, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request("http://127.0.0.1:%d%s" % (API_PORT, path), data=data, method=method)
    request.add_header("Authorization", "Bearer " + token)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")
    except (OSError, ValueError) as e:
        return None, {"error": str(e)}


def db_rows(data_dir, sql):
    db = sqlite3.connect(os.path.join(data_dir, "agenthold.db"))
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def test_lifecycle_of_the_process(root):
    data_dir = os.path.join(root, "data")
    tap = "ipc://%s/tap" % root
    first = Server(data_dir, name="first", env_extra={"AGENTHOLD_TAP_ENDPOINT": tap})
    context = zmq.Context()
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.LINGER, 0)
    connected = sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    sub.connect(tap)
    try:
        started = first.wait_for(r"agenthold serving: ")
        check(started, "the server printed its start line")
        # The server may be serving before the subscriber's first retry
        # reaches the tap (it connected before the tap was bound).
        check(connected.poll(5000) != 0, "the tap subscriber connected")
        sub.disable_monitor()
        connected.close(0)
        if not started:
            print(first.text(), file=sys.stderr)
            return
        text = first.text()
        token_path = os.path.join(data_dir, "admin.token")
        check(("admin token in %s" % token_path) in text, "the start line names the token file")
        check("driver fake" in text, "the start line names the driver")
        check(stat.S_IMODE(os.stat(data_dir).st_mode) == 0o700, "data dir is 0700")

        # The token: a file of mode 0600 holding 64 hex characters.
        st = os.stat(token_path)
        check(stat.S_IMODE(st.st_mode) == 0o600, "admin.token is mode 0600 (got %o)" % stat.S_IMODE(st.st_mode))
        token = open(token_path).read().strip()
        check(re.fullmatch(r"[0-9a-f]{64}", token) is not None, "the token is 64 hex characters")
        check(not [f for f in os.listdir(data_dir) if f.startswith("admin.token.")],
              "no temp file is left behind")
        # Only its hash is in the database; the token itself is nowhere in it nor in the log.
        rows = db_rows(data_dir, "SELECT name, hash, admin FROM api_tokens")
        check(rows == [("admin", hashlib.sha256(token.encode()).hexdigest(), 1)],
              "api_tokens holds the admin token's hash only: %r" % rows)
        for name in os.listdir(data_dir):
            if name.startswith("agenthold.db"):
                with open(os.path.join(data_dir, name), "rb") as f:
                    check(token.encode() not in f.read(), "the token is not in %s" % name)
        check(token not in text, "the token is not in the log")

        # A second server on the same data dir is refused, naming the first.
        second = Server(data_dir, name="second",
                        env_extra={"AGENTHOLD_SERVER_LISTEN": "127.0.0.1:%d" % ahserver.free_port(),
                                   "AGENTHOLD_SANDBOX_TUNNEL_LISTEN": "127.0.0.1:%d" % ahserver.free_port()})
        code = second.wait_exit(30)
        want = "another agenthold serve is running on %s (pid %d)" % (data_dir, first.proc.pid)
        check(code not in (0, None), "the second server exits non-zero (got %r)" % code)
        check(want in second.text(), "the second server says: " + want)
        second.stop()
        check(first.proc.poll() is None, "the first server still runs")

        # The API is up and knows the admin token by its hash.
        check(http_status("/healthz") == 200, "GET /healthz answers 200")
        check(http_status("/api/v1/agents") == 401, "no token: 401")
        check(http_status("/api/v1/agents", "0" * 64) == 401, "a wrong token: 401")
        check(http_status("/api/v1/agents", token) == 200, "the admin token: 200")

        # The wiring end to end (fake driver): an agent is created and started
        # through the API, its in-process sandboxd says hello over the tunnel,
        # and the recorder has the state changes lifecycle sent it.
        status, body = http_json("POST", "/api/v1/agents", token, {"name": "alice"})
        check(status == 201, "create alice: 201 (got %r %r)" % (status, body))
        status, body = http_json("POST", "/api/v1/agents/alice/start?wait=1", token)
        check(status == 200 and body.get("state") == "running",
              "start alice and wait: running (got %r %r)" % (status, body))
        deadline = time.time() + 5
        states = []
        while time.time() < deadline and "running" not in states:
            states = [r[0] for r in db_rows(data_dir, "SELECT detail FROM operations WHERE kind = 'state'"
                                                      " AND actor = 'api:admin' ORDER BY id")]
            time.sleep(0.1)
        check("running" in states, "the recorder has alice's state changes, caused by the admin's token: %r"
              % states)

        # The tap (tap.endpoint) saw the traffic: [type][sender][dest][map].
        seen = set()
        deadline = time.time() + 5
        while time.time() < deadline and ("SANDBOX_STATE", "lifecycle", "recorder") not in seen:
            if sub.poll(200):
                frames = sub.recv_multipart()
                if len(frames) == 4:
                    seen.add(tuple(f.decode(errors="replace") for f in frames[:3]))
        check(("SANDBOX_STATE", "lifecycle", "recorder") in seen,
              "the tap shows SANDBOX_STATE from lifecycle to recorder: %r" % sorted(seen)[:10])
        check(("tap " + tap) in text, "the start line names the tap")

        # SIGHUP: every policy holder reloads (policy_status.loaded_at moves),
        # and the server keeps running.
        def loaded():
            return dict(db_rows(data_dir, "SELECT holder || '/' || script, loaded_at FROM policy_status"
                                          " WHERE holder IN ('builder', 'sleeper')"))
        before = loaded()
        check(set(before) >= {"builder/briefing.lua", "sleeper/idle.lua"},
              "builder and sleeper hold their policies: %r" % before)
        time.sleep(0.01)        # pacing, not a wait: loaded_at (ms) must be able to move
        first.proc.send_signal(signal.SIGHUP)
        check(first.wait_for(r"SIGHUP: reloading policies", 10), "SIGHUP is logged as a policy reload")
        deadline = time.time() + 10
        after = loaded()
        while time.time() < deadline and not all(after.get(k, 0) > v for k, v in before.items()):
            time.sleep(0.05)
            after = loaded()
        check(before and all(after.get(k, 0) > v for k, v in before.items()),
              "SIGHUP reloaded every policy: %r -> %r" % (before, after))
        check(first.proc.poll() is None, "SIGHUP does not stop the server")

        # SIGTERM (with alice's sandbox running): an orderly shutdown, exit status 0.
        first.proc.send_signal(signal.SIGTERM)
        code = first.wait_exit(30)
        check(code == 0, "SIGTERM: exit status 0 (got %r)" % code)
        check(re.search(r"INFO \[server\] stopped", first.text()) is not None, "the server logs 'stopped'")
    finally:
        first.stop()
        sub.close()
        context.term()

    # A restart keeps the same token (the file is not rewritten, no new row).
    again = Server(data_dir, name="again")
    try:
        check(again.wait_for(r"agenthold serving: "), "the server restarts on the same data dir")
        check(open(os.path.join(data_dir, "admin.token")).read().strip() == token, "the token is kept")
        check(len(db_rows(data_dir, "SELECT * FROM api_tokens")) == 1, "still one token row")
        again.proc.send_signal(signal.SIGINT)
        check(again.wait_exit(30) == 0, "SIGINT: exit status 0")
    finally:
        again.stop()


def test_newer_schema(root):
    data_dir = os.path.join(root, "newer")
    os.makedirs(data_dir, mode=0o700)
    db = sqlite3.connect(os.path.join(data_dir, "agenthold.db"))
    db.execute("PRAGMA user_version = 999")
    db.close()
    server = Server(data_dir, name="newer")
    try:
        code = server.wait_exit(30)
        check(code not in (0, None), "a newer schema: exit non-zero (got %r)" % code)
        text = server.text()
        check("999" in text and "newer" in text, "a newer schema: the message names the version")
        check("agenthold serving" not in text, "a newer schema: the server never started")
        check(not os.path.exists(os.path.join(data_dir, "admin.token")), "a newer schema: no token made")
    finally:
        server.stop()


def test_docker_unreachable(root):
    data_dir = os.path.join(root, "docker")
    server = Server(data_dir, name="docker", env_extra={
        "AGENTHOLD_SANDBOX_DRIVER": "docker",
        "AGENTHOLD_SANDBOX_DOCKER_SOCKET": os.path.join(root, "no-such-docker.sock")})
    try:
        code = server.wait_exit(60)
        check(code not in (0, None), "docker unreachable: exit non-zero (got %r)" % code)
        text = server.text()
        check("no-such-docker.sock" in text, "docker unreachable: the message names the socket")
        check("sandbox.driver: fake" in text and "AGENTHOLD_SANDBOX_DRIVER=fake" in text,
              "docker unreachable: the message names the fake driver: " + text[-600:])
        check("agenthold serving" not in text, "docker unreachable: the server never started")
    finally:
        server.stop()


def test_actor_fails_to_start(root):
    """The api cannot listen (port taken): the server stops, exit 1, and
    says which actor failed; everything it started is stopped again."""
    data_dir = os.path.join(root, "busy")
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    busy = ahserver.free_port()
    blocker.bind(("127.0.0.1", busy))
    blocker.listen(1)
    server = Server(data_dir, name="busy", env_extra={"AGENTHOLD_SERVER_LISTEN": "127.0.0.1:%d" % busy,
                                                      "AGENTHOLD_SANDBOX_TUNNEL_LISTEN": "127.0.0.1:%d"
                                                      % ahserver.free_port()})
    try:
        code = server.wait_exit(30)
        text = server.text()
        check(code == 1, "api cannot listen: exit status 1 (got %r)" % code)
        check("the api actor failed to start" in text, "api cannot listen: the server names the actor")
        check("agenthold serving" not in text, "api cannot listen: no start line")
    finally:
        server.stop()
        blocker.close()


def docker_reachable():
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect("/var/run/docker.sock")
        s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
        answer = s.recv(64)
        s.close()
        return b" 200 " in answer
    except OSError:
        return False


def test_docker_builder(root, source_dir):
    """With a real Docker Engine: the server starts on the docker driver,
    and the builder's image pass builds a locally built runtime image (a
    private copy of the busybox recipe under a tag of this test's own)."""
    tag = "agenthold-test/busybox:serve%d" % os.getpid()
    catalog_dir = os.path.join(root, "catalog")
    shutil.copytree(os.path.join(source_dir, "catalog", "images"), os.path.join(catalog_dir, "images"))
    with open(os.path.join(source_dir, "catalog", "runtimes.json")) as f:
        catalog = json.load(f)
    catalog["runtimes"] = [r for r in catalog["runtimes"] if r["alias"] == "busybox"]
    catalog["runtimes"][0]["image"] = tag
    with open(os.path.join(catalog_dir, "runtimes.json"), "w") as f:
        json.dump(catalog, f)
    data_dir = os.path.join(root, "dockerdata")
    server = Server(data_dir, name="docker-builder", env_extra={
        "AGENTHOLD_SANDBOX_DRIVER": "docker",
        "AGENTHOLD_SANDBOX_DOCKER_NAME_PREFIX": "ahtestserve%d" % os.getpid(),
        "AGENTHOLD_CATALOG_PATH": os.path.join(catalog_dir, "runtimes.json"),
        # The in-process builder (its log line names driver docker).
        "AGENTHOLD_SERVER_USER": "none"})
    try:
        check(server.wait_for(r"agenthold serving: .*driver docker", 30), "docker: the server starts")
        built = server.wait_for(r"runtime busybox: image %s present" % re.escape(tag), 120)
        check(built, "docker: the builder built %s: %s" % (tag, server.text()[-800:]))
        inspect = subprocess.run(["docker", "image", "inspect", tag], capture_output=True)
        check(inspect.returncode == 0, "docker: the image %s exists in the engine" % tag)
        server.proc.send_signal(signal.SIGTERM)
        check(server.wait_exit(60) == 0, "docker: SIGTERM, exit status 0")
    finally:
        server.stop()
        subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True)


def test_tap_cannot_bind(root):
    """A tap.endpoint that cannot be bound stops the server at start."""
    data_dir = os.path.join(root, "badtap")
    server = Server(data_dir, name="badtap", env_extra={
        "AGENTHOLD_TAP_ENDPOINT": "ipc://%s/no-such-dir/tap" % root})
    try:
        code = server.wait_exit(30)
        text = server.text()
        check(code == 1, "bad tap: exit status 1 (got %r)" % code)
        check("tap.endpoint" in text and "no-such-dir" in text, "bad tap: the message names the key and the endpoint")
        check("agenthold serving" not in text, "bad tap: no start line")
    finally:
        server.stop()


def test_second_signal(root):
    """A second signal during shutdown exits at once, status 1 (the
    operator's Ctrl-C twice when a shutdown hangs)."""
    data_dir = os.path.join(root, "twice")
    server = Server(data_dir, name="twice")
    try:
        check(server.wait_for(r"agenthold serving: "), "twice: the server starts")
        os.kill(server.proc.pid, signal.SIGINT)
        os.kill(server.proc.pid, signal.SIGTERM)
        code = server.wait_exit(30)
        check(code == 1, "twice: exit status 1 (got %r)" % code)
        check("during shutdown: exiting now" in server.text(), "twice: the log says why")
    finally:
        server.stop()


def main():
    root = tempfile.mkdtemp(prefix="ah-test-serve-")
    try:
        if "--docker" in sys.argv:
            if not docker_reachable():
                print("no Docker Engine at /var/run/docker.sock: skipped")
                return 77
            test_docker_builder(root, sys.argv[sys.argv.index("--docker") + 1])
        else:
            test_lifecycle_of_the_process(root)
            test_newer_schema(root)
            test_docker_unreachable(root)
            test_actor_fails_to_start(root)
            test_tap_cannot_bind(root)
            test_second_signal(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if FAILURES:
        print("%d failure(s)" % len(FAILURES), file=sys.stderr)
        return 1
    print("server: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
