"""tests/lib/ahserver.py: what the Python drivers that start a real
`agenthold serve` share: a free port of the caller's range, the server's
AGENTHOLD_* environment, the wait for /healthz, the admin token, a call
with the bearer token, a terminal session, a driver's main with its
clean-up, and ServerHarness: the server as a process with its log and
its CLI, which the Docker and Kubernetes tests' harnesses build on
(tests/docker/ahdocker.py, tests/kubernetes/ahk8s.py).

Import it by path from the script's own location, e.g. from tests/X/:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
and from bench/X/ with "..", "..", "tests", "lib".

What differs per caller stays a parameter: the port range and where the
walk through it starts (tests running at the same time use different
ranges and offsets), the exception class raised (each driver has its own
Fail), the driver and the other settings."""
import hashlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import traceback
import time


# The one port allocator of the suite. Every test process that needs a
# port takes it here: ports of PORT_RANGE, each reserved by an flock on
# PORT_LOCKS/<port> that the process holds until it exits (the kernel lets
# go of it then, however it ends), so tests run at once (ctest -j) never
# get the same port, and one that is taken by anything else is skipped.
PORT_RANGE = (20000, 29999)
PORT_LOCKS = "/tmp/agenthold-test-ports"
_held = {}


def free_port(*legacy, avoid=(), fail=RuntimeError, address="127.0.0.1", **_ignored):
    """A port nobody listens on, reserved for this process (see above).
    avoid: ports not to return. address: where the port must be free
    ("0.0.0.0" for a server that listens on every address). The old
    positional arguments (lo, hi, start[, avoid]) are accepted and only
    avoid is used."""
    import fcntl
    if len(legacy) >= 4:
        avoid = legacy[3]
    os.makedirs(PORT_LOCKS, mode=0o1777, exist_ok=True)
    lo, hi = PORT_RANGE
    n = hi - lo + 1
    start = (os.getpid() * 97 + len(_held) * 13) % n
    for i in range(n):
        port = lo + (start + i) % n
        if port in avoid or port in _held:
            continue
        fd = os.open(os.path.join(PORT_LOCKS, str(port)), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        s = socket.socket()
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((address, port))
        except OSError:
            os.close(fd)
            continue
        finally:
            s.close()
        _held[port] = fd
        return port
    raise fail("no free port in %d-%d" % (lo, hi))


def server_env(data, api_port, tunnel_port, driver="fake", tunnel_host="127.0.0.1",
               strip=True, extra=None):
    """The environment of `agenthold serve`: the caller's own, without any
    AGENTHOLD_* it has (strip), plus the data dir, driver and listeners."""
    env = {k: v for k, v in os.environ.items() if not (strip and k.startswith("AGENTHOLD_"))}
    env.update({
        "AGENTHOLD_SERVER_DATA_DIR": data,
        "AGENTHOLD_SANDBOX_DRIVER": driver,
        "AGENTHOLD_SERVER_LISTEN": "127.0.0.1:%d" % api_port,
        "AGENTHOLD_SANDBOX_TUNNEL_LISTEN": "%s:%d" % (tunnel_host, tunnel_port),
    })
    env.update(extra or {})
    return env


def wait_healthy(proc, port, seconds=20, fail=RuntimeError, tail=None):
    """Wait until GET /healthz on 127.0.0.1:port answers 200. Raises fail
    when proc exits first (its status, plus tail() when given) or after
    seconds."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise fail("the server exited at start with status %d%s"
                       % (proc.returncode, (":\n" + tail()) if tail else ""))
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            try:
                c.request("GET", "/healthz")
                if c.getresponse().status == 200:
                    return
            finally:
                c.close()
        except OSError:
            pass
        time.sleep(0.1)
    raise fail("the server did not answer /healthz within %d s" % seconds)


class Checks:
    """check(cond, what): counts, and raises fail(what) when cond is false."""
    def __init__(self, fail):
        self.fail = fail
        self.count = 0

    def __call__(self, cond, what):
        self.count += 1
        if not cond:
            raise self.fail(what)


def sha256_file(path, block=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(block)
            if not b:
                return h.hexdigest()
            h.update(b)


def read_token(data):
    """The admin token the server wrote into its data dir."""
    with open(os.path.join(data, "admin.token")) as f:
        return f.read().strip()


def request(port, method, path, body=None, token=None, headers=None, timeout=60):
    """One HTTP request to 127.0.0.1:port; returns (status, raw body).
    body: bytes as they are, a dict or list as JSON (with its
    Content-Type). token: sent as the bearer token. Connection errors are
    raised to the caller."""
    h = {"Authorization": "Bearer " + token} if token else {}
    h.update(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def download(port, path, token, chunk=1 << 20, pause=0.0, timeout=120):
    """GET path read chunk bytes at a time, pause seconds after each (a
    slow client): (status, sha256 hex of the body, its length)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path, headers={"Authorization": "Bearer " + token})
        r = c.getresponse()
        digest, got = hashlib.sha256(), 0
        for piece in iter(lambda: r.read(chunk), b""):
            digest.update(piece)
            got += len(piece)
            if pause:
                time.sleep(pause)
        return r.status, digest.hexdigest(), got
    finally:
        c.close()


def call_json(port, token, method, path, body=None, expect=200, check=None, timeout=60):
    """request() with the answer parsed: (status, JSON or None). With
    expect (not None) and check, checks the status is expect."""
    status, raw = request(port, method, path, body, token, None, timeout)
    try:
        j = json.loads(raw) if raw else None
    except ValueError:
        j = None
    if expect is not None and check is not None:
        check(status == expect, "%s %s: %d (wanted %d): %r" % (method, path, status, expect, raw[:300]))
    return status, j


def stop_all(procs, seconds=10):
    """Ends what is still running of procs: SIGTERM, then SIGKILL after
    seconds."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(seconds)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _signalled(signum, frame):
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)      # the clean-up is not cut short by another
    raise SystemExit(128 + signum)


def clean_up_on_signals():
    """SIGTERM, SIGINT and SIGHUP end the test through its finally: clauses
    (SystemExit, which no `except Exception` takes), so what it started is
    stopped and removed as after a failure: a test stopped by hand
    (pkill) or by its runner leaves no container, volume or server."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _signalled)


def required(label):
    """Whether AH_TEST_REQUIRE (comma-separated labels; .ci/run sets
    docker,k8s) names label: then a part of a test that cannot run here
    fails it with its reason instead of being skipped (tests/README.md)."""
    return label in [x.strip() for x in os.environ.get("AH_TEST_REQUIRE", "").split(",")]


# What a sanitizer, an assert or a crash leaves in a log: a test whose
# server said any of it fails, whatever its checks found.
REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer",
           "Assertion `", "assertion failed", "SUMMARY: AddressSanitizer", "stack-buffer", "heap-use-after-free")
CRASH_SIGNALS = (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE)


def verdict(procs, logs):
    """Why a run that passed its checks still fails: a process of procs
    that ended by a crash signal (SIGABRT: an assert, or a sanitizer with
    abort_on_error), or a sanitizer's or an assert's report in one of the
    logs. A list of sentences, empty when there is none."""
    why = []
    for p in procs:
        if p.returncode is not None and -p.returncode in CRASH_SIGNALS:
            why.append("%s ended by signal %d" % (" ".join(map(str, p.args[:2])) if isinstance(p.args, list)
                                                 else p.args, -p.returncode))
    for path in logs:
        try:
            with open(path, errors="replace") as f:
                lines = [line.rstrip() for line in f if any(r in line for r in REPORTS)]
        except OSError:
            continue
        if lines:
            why.append("%s has %d sanitizer or assertion lines, the first: %s" % (path, len(lines), lines[0][:300]))
    return why


def run(main, fail, procs, tmp, log):
    """Runs main() and returns the exit status: 0, or 1 after fail (said
    on stderr with the end of the server's log), or when verdict() finds
    a crash or a sanitizer's report. Whatever happens, procs are stopped
    and tmp is removed, on a signal too."""
    rc = 1
    clean_up_on_signals()
    try:
        main()
        rc = 0
    except Exception as e:
        if isinstance(e, fail):
            print("FAIL: %s" % e, file=sys.stderr)
        else:
            traceback.print_exc()
        try:
            with open(log) as f:
                sys.stderr.write(f.read()[-6000:])
        except OSError:
            pass
    finally:
        stop_all(procs)
        for why in verdict(procs, [log]):
            print("FAIL: %s" % why, file=sys.stderr)
            rc = 1
        shutil.rmtree(tmp, ignore_errors=True)
    return rc


def terminal(port, agent, token, line, done, seconds=30, while_open=None, early=False):
    """Opens the agent's terminal WebSocket, types line once the shell
    speaks (early: at once, before any output), reads until done(output),
    the server closes it, or seconds pass. while_open(output), when given,
    runs before the terminal closes. Returns (output, what while_open
    returned, the server's close reason or None)."""
    import asyncio
    import websockets

    async def go():
        uri = "ws://127.0.0.1:%d/api/v1/agents/%s/terminal?token=%s" % (port, agent, token)
        out, sent, seen, reason = b"", False, None, None
        async with websockets.connect(uri, open_timeout=60, close_timeout=5) as ws:
            if early:
                await ws.send(line.encode())
                sent = True
            end = time.time() + seconds
            while time.time() < end and not done(out):
                try:
                    m = await asyncio.wait_for(ws.recv(), timeout=0.3)
                    if isinstance(m, bytes):
                        out += m
                except asyncio.TimeoutError:
                    pass
                except websockets.exceptions.ConnectionClosed as e:
                    reason = e.reason if hasattr(e, "reason") else str(e)
                    break
                if not sent and out:
                    await ws.send(line.encode())
                    sent = True
            if while_open and reason is None:
                seen = while_open(out)
        return out, seen, reason
    return asyncio.run(go())


class ServerHarness:
    """One test run of `agenthold serve` as a process: a prefix unique to
    the run (the test's tag and its pid), a temp dir with the data dir and
    the server's log, checks counted, the CLI against the server.

    The subclass sets self.env (the server's environment, server_env()),
    self.url (http://127.0.0.1:PORT, the API as the CLI reaches it) and
    anything of its own; fail is the exception class its checks raise."""

    def __init__(self, name, binary, fail):
        self.name = name
        self.bin = os.path.abspath(binary) if binary else None
        self.fail = fail
        self.prefix = "%s%d" % (name.replace(".", "").replace("_", ""), os.getpid())
        self.tmp = tempfile.mkdtemp(prefix="ah-%s-" % name)
        self.data = os.path.join(self.tmp, "data")
        self.log = os.path.join(self.tmp, "server.log")
        self.checks = 0
        self.server = None
        self.env = {}
        self.url = None

    def check(self, cond, what):
        self.checks += 1
        if not cond:
            raise self.fail(what)

    def port(self):
        """The API's port, from self.url (a test may point it elsewhere)."""
        return int(self.url.rsplit(":", 1)[1])

    def token(self):
        return read_token(self.data)

    def server_log_tail(self, n=6000):
        try:
            with open(self.log) as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def start_server(self, extra_env=None, wait=True, seconds=30):
        """`agenthold serve` with self.env (and extra_env), its output
        appended to self.log; wait: until /healthz answers."""
        env = dict(self.env)
        env.update(extra_env or {})
        with open(self.log, "a") as log:
            log.write("---- server start ----\n")
            log.flush()
            self.server = subprocess.Popen([self.bin, "serve"], env=env, cwd=self.tmp,
                                           stdout=log, stderr=log)
        if wait:
            self.wait_healthy(seconds)

    def wait_healthy(self, seconds=30):
        wait_healthy(self.server, self.port(), seconds, fail=self.fail, tail=self.server_log_tail)

    def kill_server(self):
        """SIGKILL, as a crash would (the caller's test of recovery)."""
        if self.server and self.server.poll() is None:
            self.server.send_signal(signal.SIGKILL)
            self.server.wait()

    def cli_env(self):
        env = dict(self.env)
        env["AGENTHOLD_URL"] = self.url
        env["AGENTHOLD_TOKEN"] = self.token()
        return env

    def cli_run(self, args, timeout=180, stdin=None):
        """The CLI with args as they are: the finished process."""
        return subprocess.run([self.bin] + list(args), env=self.cli_env(), cwd=self.tmp,
                              capture_output=True, text=True, timeout=timeout, input=stdin)

    def run_cli(self, *args, timeout=180, stdin=None):
        """(status, stdout, stderr) of the CLI."""
        p = self.cli_run(args, timeout, stdin)
        return p.returncode, p.stdout, p.stderr

    def cli_raw(self, *args, timeout=180):
        """The CLI with --json: the finished process."""
        return self.cli_run(list(args) + ["--json"], timeout)

    def cli(self, *args, timeout=180):
        """The CLI with --json, which must succeed: its answer parsed."""
        p = self.cli_raw(*args, timeout=timeout)
        self.check(p.returncode == 0, "agenthold %s: status %d: %s" %
                   (" ".join(args), p.returncode, p.stderr.strip()))
        return json.loads(p.stdout)

    def wait_state(self, name, want, seconds=20, interval=0.2):
        """`agenthold show` until the agent is in state want (its answer),
        or fail after seconds."""
        deadline = time.time() + seconds
        while True:
            a = self.cli("show", name)
            if a["state"] == want:
                return a
            if time.time() > deadline:
                raise self.fail("%s: state %s, not %s, after %d s (error: %s)" %
                                (name, a["state"], want, seconds, a.get("error")))
            time.sleep(interval)

    def stop_server(self):
        """Kills the server if it still runs (the end of a run)."""
        if self.server and self.server.poll() is None:
            self.server.kill()
            self.server.wait()
