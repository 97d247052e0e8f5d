"""tests/lib/ahserver.py: the one place the tests and benches start a
real `agenthold serve` (serve(): its log, its readiness, its place among
the processes the clean-up ends), the one port allocator (free_port), the
one wait (wait_until), and what the Python drivers share around them: the
server's AGENTHOLD_* environment, the admin token, a call with the bearer
token, a terminal session, a driver's main with its clean-up and its
verdict on how the server ended, and ServerHarness: the server as a
process with its log and its CLI, which the Docker and Kubernetes tests'
harnesses build on (tests/docker/ahdocker.py, tests/kubernetes/ahk8s.py).

Import it by path from the script's own location, e.g. from tests/X/:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
and from bench/X/ with "..", "..", "tests", "lib".

What differs per caller stays a parameter: the exception class raised
(each driver has its own Fail), the driver and the other settings."""
import hashlib
import http.client
import http.server
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
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


def free_port(avoid=(), fail=RuntimeError, address="127.0.0.1"):
    """A port nobody listens on, reserved for this process (see above).
    avoid: ports not to return. address: where the port must be free
    ("0.0.0.0" for a server that listens on every address)."""
    import fcntl
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
    AGENTHOLD_* it has (strip), plus the data dir, driver and listeners.
    No warm pools (sandbox.warm_pool_max 0) unless extra asks for them: a
    test counts the sandboxes it makes."""
    env = {k: v for k, v in os.environ.items() if not (strip and k.startswith("AGENTHOLD_"))}
    env.update({
        "AGENTHOLD_SERVER_DATA_DIR": data,
        "AGENTHOLD_SANDBOX_DRIVER": driver,
        "AGENTHOLD_SERVER_LISTEN": "127.0.0.1:%d" % api_port,
        "AGENTHOLD_SANDBOX_TUNNEL_LISTEN": "%s:%d" % (tunnel_host, tunnel_port),
        "AGENTHOLD_SANDBOX_WARM_POOL_MAX": "0",
    })
    env.update(extra or {})
    return env


def wait_until(pred, timeout, what, fail=RuntimeError, interval=0.05, alive=None):
    """The one wait of the suite, for an event or a condition instead of a
    fixed sleep: calls pred() until it returns something true (which is
    returned), and raises fail("WHAT: not within N s") after timeout
    seconds; with fail None it returns pred's last value instead, for a
    caller whose own check says what was wrong. alive: a process that must
    keep running (its exit ends the wait at once). A pred that raises
    OSError counts as not yet (a connection refused)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = pred()
        except OSError:
            got = None
        if got:
            return got
        if alive is not None and alive.poll() is not None:
            if fail is None:
                return got
            raise fail("%s: the process exited with status %d first" % (what, alive.returncode))
        if time.monotonic() > deadline:
            if fail is None:
                return got
            raise fail("%s: not within %g s" % (what, timeout))
        time.sleep(interval)


def healthz(port):
    """Whether GET /healthz on 127.0.0.1:port answers 200 now."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        c.request("GET", "/healthz")
        return c.getresponse().status == 200
    finally:
        c.close()


def log_tail(path, n=6000):
    """The last n characters of the file at path ("" when there is none)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def log_has(path, pattern):
    """The log's text when the regular expression pattern is in it, else None."""
    import re
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    return text if re.search(pattern, text) else None


def wait_healthy(proc, port, seconds=20, fail=RuntimeError, tail=None):
    """Wait until GET /healthz on 127.0.0.1:port answers 200. Raises fail
    when proc exits first (its status, plus tail() when given) or after
    seconds."""
    try:
        wait_until(lambda: healthz(port), seconds, "the server answers /healthz on port %d" % port,
                   fail, 0.1, alive=proc)
    except fail as e:
        raise fail("%s%s" % (e, (":\n" + tail()) if tail else ""))


def listen_port(env):
    """The API's port of a server_env() environment."""
    return int(env["AGENTHOLD_SERVER_LISTEN"].rsplit(":", 1)[1])


def serve(binary, env, log, cwd=None, procs=None, ready=True, seconds=30, fail=RuntimeError,
          out=None, wrap=(), **popen):
    """The one place a test starts `agenthold serve`: binary serve with env
    (server_env()), in cwd, its output appended to the file log (after a
    "---- server start ----" line; out: a separate file for stdout),
    added to procs (the list run() stops and judges), and waited for:
      ready True       GET /healthz on env's AGENTHOLD_SERVER_LISTEN answers 200
      ready a string   a regular expression found in log
      ready a callable until it returns something true
      ready False      not waited for
    each within seconds, raising fail (with the end of the log) when it
    is not ready or exits first (stopping it then unless procs holds it). wrap: argv put before the binary
    (setpriv ...); popen: Popen's other keywords (user, start_new_session).
    The process returned has .ah_log, which verdict() reads too."""
    with open(log, "ab") as f:
        f.write(b"---- server start ----\n")
        f.flush()
        o = open(out, "ab") if out else f
        try:
            proc = subprocess.Popen(list(wrap) + [binary, "serve"], env=env, cwd=cwd,
                                    stdout=o, stderr=f, **popen)
        finally:
            if out:
                o.close()
    proc.ah_log = log
    if procs is not None:
        procs.append(proc)
    if ready is False:
        return proc
    if ready is True:
        port = listen_port(env)
        pred, what = (lambda: healthz(port)), "the server answers /healthz on port %d" % port
    elif isinstance(ready, str):
        pred, what = (lambda: log_has(log, ready)), "the server's log says %r" % ready
    else:
        pred, what = ready, "the server is ready"
    try:
        wait_until(pred, seconds, what, fail, 0.05, alive=proc)
    except fail as e:
        if procs is None:
            stop_all([proc])            # nobody else would
        raise fail("%s:\n%s" % (e, log_tail(log, 3000)))
    return proc


def serve_once(binary, env, cwd=None, timeout=60):
    """`agenthold serve` that is expected to stop by itself (a refused
    configuration): the finished process, its output captured as text."""
    return subprocess.run([binary, "serve"], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


class Checks:
    """check(cond, what): counts, and raises fail(what) when cond is false."""
    def __init__(self, fail):
        self.fail = fail
        self.count = 0

    def __call__(self, cond, what):
        self.count += 1
        if not cond:
            raise self.fail(what)


def make_test_ca(d, ip, name, fail=RuntimeError):
    """A test CA (P-256, made with openssl in the new directory d) and a
    server certificate for the address ip that it signed, as the egress
    tests' HTTPS upstreams use: (ca.pem, cert.pem, key.pem) paths. name
    goes in the CA's subject. A failing openssl raises fail with its
    message."""
    os.makedirs(d)
    f = {n: os.path.join(d, n) for n in ("ca.key", "ca.pem", "up.key", "up.csr", "up.pem", "ext.cnf")}

    def openssl(*args):
        p = subprocess.run(["openssl"] + list(args), capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise fail("openssl %s: %s" % (" ".join(args[:2]), p.stderr[-400:]))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", f["ca.key"], "-out", f["ca.pem"], "-days", "2",
            "-subj", "/CN=agenthold %s test CA" % name,
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    openssl("req", *ec, "-keyout", f["up.key"], "-out", f["up.csr"], "-subj", "/CN=" + ip)
    with open(f["ext.cnf"], "w") as x:
        x.write("subjectAltName=IP:%s\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n" % ip)
    openssl("x509", "-req", "-in", f["up.csr"], "-CA", f["ca.pem"], "-CAkey", f["ca.key"], "-CAcreateserial",
            "-out", f["up.pem"], "-days", "2", "-extfile", f["ext.cnf"])
    return f["ca.pem"], f["up.pem"], f["up.key"]


class _Recorded(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.server.seen.append((self.path, self.headers.get_all("Authorization") or []))
        body = ("ok %s\n" % self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def upstream(addr, cleanups, cert=None, key=None):
    """An upstream of a test's own on addr (a port the kernel picks), the
    egress tests' HTTP or, with cert and key, HTTPS server: each GET is
    answered "ok PATH\n" and its path (as the client sent it: the absolute
    form through a proxy) and Authorization headers are kept in .seen, a
    list of (path, [values]). Its shutdown goes on cleanups. Returns the
    server and "addr:port"."""
    srv = http.server.ThreadingHTTPServer((addr, 0), _Recorded)
    if cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.seen = []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    cleanups.append(srv.shutdown)
    return srv, "%s:%d" % (addr, srv.server_address[1])


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
    raised to the caller. With AH_OPENAPI_CHECK set, a JSON answer is
    checked against docs/openapi.json (openapi_check below)."""
    h = {"Authorization": "Bearer " + token} if token else {}
    h.update(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        raw = r.read()
        openapi_check(method, path, r.status, r.getheader("Content-Type", ""), raw)
        return r.status, raw
    finally:
        c.close()


# ---------------------------------------------------------------------
# Every JSON answer against the OpenAPI document (AH_OPENAPI_CHECK=1, or
# the path of another document): the operation of the request's method
# and path in docs/openapi.json, the response of its status (else its
# "default"), and the answer validated against that response's
# application/json schema (python3-jsonschema, Draft 2020-12). A status
# the operation does not document, a JSON answer where it documents
# none, or an answer off its schema raises OpenAPIMismatch. Not checked:
# answers that are not JSON (files, streams, metrics), the port links'
# raw routes (the sandbox's own answers), and a 404 or 405 for a path no
# route takes (the router's "no route"). At exit it says on stderr how
# many answers it checked; AH_OPENAPI_SEEN=FILE appends to FILE a line
# "METHOD /path/{template} status" for each answer checked.

class OpenAPIMismatch(Exception):
    pass


_openapi = {}


def _openapi_load():
    if "ops" in _openapi:
        return _openapi["ops"]
    import atexit
    import re
    import jsonschema
    where = os.environ.get("AH_OPENAPI_CHECK", "")
    if where in ("1", "true", "yes"):
        where = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "openapi.json")
    with open(where) as f:
        doc = json.load(f)
    ops = []
    for p, item in doc["paths"].items():
        params = {}
        for m, o in item.items():
            for x in o.get("parameters", []) if isinstance(o, dict) else []:
                x = _openapi_ref(doc, x)
                if x.get("in") == "path":
                    params[x["name"]] = x.get("x-agenthold-rest-of-path", False)
        rx = "".join(("(?:.+)" if params.get(seg[1:-1]) else "[^/]+") if seg.startswith("{") else re.escape(seg)
                     for seg in re.split(r"(\{[^}]+\})", p) if seg)
        for m, o in item.items():
            if m in ("get", "head", "post", "put", "patch", "delete", "options"):
                ops.append((m.upper(), re.compile("^" + rx + "$"), p.count("{"), p, o))
    ops.sort(key=lambda t: t[2])         # literal segments before captures, as the router's tables
    _openapi.update(doc=doc, ops=ops, checked=0, jsonschema=jsonschema,
                    resolver=jsonschema.RefResolver.from_schema(doc))

    def said():
        print("openapi: %d JSON answers checked against %s" % (_openapi["checked"], os.path.relpath(where)),
              file=sys.stderr)
    atexit.register(said)
    return ops


def _openapi_ref(doc, node):
    while isinstance(node, dict) and "$ref" in node:
        cur = doc
        for part in node["$ref"][2:].split("/"):
            cur = cur[part.replace("~1", "/").replace("~0", "~")]
        node = cur
    return node


def openapi_check(method, path, status, content_type, raw):
    """Checks one answer (see above) when AH_OPENAPI_CHECK is set."""
    if os.environ.get("AH_OPENAPI_CHECK", "") in ("", "0"):
        return
    ops = _openapi_load()
    doc = _openapi["doc"]
    target = path.partition("?")[0]
    found = next(((p, o) for m, rx, _, p, o in ops if m == method.upper() and rx.match(target)), None)
    is_json = content_type.split(";")[0].strip() == "application/json"
    if found is None:
        if 200 <= status < 300:
            raise OpenAPIMismatch("%s %s answered %d, and docs/openapi.json has no such operation"
                                  % (method, target, status))
        return                          # the router's 404/405 for no route
    p, o = found
    if o.get("x-agenthold-raw") or not is_json or method.upper() == "HEAD":
        return
    responses = o.get("responses", {})
    r = responses.get(str(status)) or responses.get("%dXX" % (status // 100)) or responses.get("default")
    if r is None:
        raise OpenAPIMismatch("%s %s (%s) answered %d, which docs/openapi.json does not document (it has %s)"
                              % (method, target, p, status, ", ".join(sorted(responses))))
    r = _openapi_ref(doc, r)
    schema = r.get("content", {}).get("application/json", {}).get("schema")
    if schema is None:
        raise OpenAPIMismatch("%s %s (%s) answered %d with JSON, and docs/openapi.json describes no JSON there"
                              % (method, target, p, status))
    try:
        answer = json.loads(raw)
    except ValueError:
        raise OpenAPIMismatch("%s %s answered %d as application/json that is not JSON: %r"
                              % (method, target, status, raw[:200]))
    js = _openapi["jsonschema"]
    errors = sorted(js.Draft202012Validator(schema, resolver=_openapi["resolver"]).iter_errors(answer),
                    key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        raise OpenAPIMismatch("%s %s (%s) answered %d off docs/openapi.json's schema: %s at /%s (%d errors); "
                              "the answer: %s" % (method, target, p, status, e.message,
                                                  "/".join(map(str, e.absolute_path)), len(errors),
                                                  raw[:400].decode(errors="replace")))
    _openapi["checked"] += 1
    seen = os.environ.get("AH_OPENAPI_SEEN")
    if seen:                            # which operations and statuses the tests reach (a coverage list)
        with open(seen, "a") as f:
            f.write("%s %s %d\n" % (method.upper(), p, status))


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


class CannedServer:
    """A hostile or fake HTTP server on a port of free_port(): each
    connection's request head is read (and kept in .heard), then answer
    (bytes, sent as they are) and the connection is closed. For the
    clients' tests of what a server may send (e2e.cli_hostile_server,
    client.python)."""
    def __init__(self, answer):
        import threading
        self.answer = answer
        self.heard = b""        # every request's bytes
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", free_port()))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.t = threading.Thread(target=self.serve, daemon=True)
        self.t.start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                c.settimeout(10)
                data = b""
                while b"\r\n\r\n" not in data:
                    more = c.recv(65536)
                    if not more:
                        break
                    data += more
                self.heard += data
                c.sendall(self.answer)
            except OSError:
                pass
            finally:
                c.close()

    def close(self):
        self.sock.close()


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


def verdict(procs, logs=()):
    """Why a run that passed its checks still fails: a process of procs
    that ended by a crash signal (SIGABRT: an assert, or a sanitizer with
    abort_on_error), or a sanitizer's or an assert's report in one of the
    logs (and in each process's .ah_log, serve()'s). A list of
    sentences, empty when there is none."""
    why = []
    logs = list(logs) + [p.ah_log for p in procs if getattr(p, "ah_log", None) and p.ah_log not in logs]
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


def sanitizer_report(log, limit=12000):
    """The first sanitizer or assertion report of log (from its first
    such line, at most limit characters), so that a failure in CI shows
    its stack; "" when there is none or the log cannot be read."""
    try:
        with open(log, errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    starts = [text.find(r) for r in REPORTS if text.find(r) >= 0]
    if not starts:
        return ""
    start = text.rfind("\n", 0, min(starts)) + 1
    return "--- %s, from its first report ---\n%s\n" % (log, text[start:start + limit])


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
        whys = verdict(procs, [log])
        for why in whys:
            print("FAIL: %s" % why, file=sys.stderr)
            rc = 1
        if whys:
            sys.stderr.write(sanitizer_report(log))
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


def term_session(uri, steps, fail, seconds=15):
    """A terminal WebSocket at uri (a terminal that lasts: ?terminal=ID)
    driven step by step: for each (send, want), sends send (bytes, or
    None) and reads until want (bytes, or None: whatever comes within
    0.3 s) shows in what came since the step began; fail(...) is raised
    when it does not within seconds. Returns (everything received, the
    first message, the server's close reason or None)."""
    import asyncio
    import websockets

    async def go():
        out, first = b"", None
        async with websockets.connect(uri, open_timeout=60, close_timeout=5) as ws:
            for send, want in steps:
                if send is not None:
                    await ws.send(send)
                mark, end = len(out), time.time() + seconds
                while time.time() < end and (want is None or want not in out[mark:]):
                    try:
                        m = await asyncio.wait_for(ws.recv(), timeout=0.3)
                    except asyncio.TimeoutError:
                        if want is None:
                            break
                        continue
                    except websockets.exceptions.ConnectionClosed as e:
                        return out, first, e.reason
                    if isinstance(m, bytes):
                        first = m if first is None else first
                        out += m
                if want is not None and want not in out[mark:]:
                    raise fail("never saw %r; got %r" % (want, out[-600:]))
        return out, first, None
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
        return log_tail(self.log, n)

    def start_server(self, extra_env=None, wait=True, seconds=30, cwd=None, **popen):
        """`agenthold serve` (serve()) with self.env (and extra_env), its
        output appended to self.log, in cwd (self.tmp); wait: until
        /healthz answers on self.port(). popen: user, group..."""
        env = dict(self.env)
        env.update(extra_env or {})
        self.server = serve(self.bin, env, self.log, cwd=cwd or self.tmp, ready=False, **popen)
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
