#!/usr/bin/python3
"""tests/e2e/e2e_sandbox.py: the sandbox end to end. The real `agenthold serve`
(fake driver: sandboxd in-process, its home under <data>/fake/<id>/home;
temporary data directory; ports from ahserver.free_port) driven through the REST
API, the terminal WebSocket, the tunnel port and the CLI:

  terminal   the WebSocket types `echo` and reads the output back, exit status
  files      the /files routes; a stopped agent read without waking, its
             writes 409 naming the state
  big        512 MiB from a seeded PRNG up and down, streamed on both sides,
             same sha256 through the API and in the home
  hostile    .., absolute, symlink out (made with exec `ln -s /etc out`),
             very long, NUL, empty: refused with the status named, nothing
             written outside the home
  exec       exit codes, stderr, timeout
  exec_stream  ?stream=1: output as it comes, 20 MiB whole, the exit record
  reconnect  the tunnel's TCP connection killed with `ss -K` (a real RST
             seen by both ends): sandboxd redials, channels work again
  token      a forged and a stale token on the tunnel port: 401
  cli        agenthold exec's status, agenthold fs put/get round trip
  term       agenthold term on a pty: echo, resize (SIGWINCH), the shell's
             status, settings restored (also on SIGTERM), piped input
  ports      GET .../ports and agenthold ports: a listening port of the
             test's own shown, gone once closed; asleep: 409, not woken

usage: e2e_sandbox.py AGENTHOLD_BINARY [SCENARIO...]
Always kills what it started and removes its temporary directory."""
import asyncio
import fcntl
import hashlib
import http.client
import json
import os
import random
import select
import signal
import socket
import subprocess
import struct
import sys
import tempfile
import termios
import time
import urllib.parse

import websockets

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahserver  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
ONLY = set(sys.argv[2:])
TMP = tempfile.mkdtemp(prefix="ah-e2e-sbx-")
DATA = os.path.join(TMP, "data")
BIG = 512 << 20
procs = []


class Fail(Exception):
    pass


check = ahserver.Checks(Fail)


API_PORT = ahserver.free_port(fail=Fail)
TUNNEL_PORT = ahserver.free_port(avoid={API_PORT}, fail=Fail)
ENV = ahserver.server_env(DATA, API_PORT, TUNNEL_PORT, extra={
})
LOG = os.path.join(TMP, "server.log")


def token():
    return ahserver.read_token(DATA)


def request(method, path, body=None, headers=None, timeout=60):
    """(status, raw body bytes)."""
    try:
        return ahserver.request(API_PORT, method, path, body, token(), headers, timeout)
    except (ConnectionError, http.client.HTTPException) as e:
        return 0, str(e).encode()


def api(method, path, body=None, expect=200, timeout=60):
    status, raw = request(method, path, body, timeout=timeout)
    try:
        j = json.loads(raw) if raw else None
    except ValueError:
        j = None
    if expect is not None:
        check(status == expect, "%s %s: %d (wanted %d): %r" % (method, path, status, expect, raw[:300]))
    return status, j


def start_server():
    server = ahserver.serve(BIN, ENV, LOG, cwd=TMP, procs=procs, fail=Fail)
    return server


def files(agent, path=""):
    return "/api/v1/agents/%s/files/%s" % (agent, urllib.parse.quote(path))


def home_of(agent_id):
    return os.path.join(DATA, "fake", agent_id, "home")


def exec_(agent, cmd, timeout=30, expect=200):
    return api("POST", "/api/v1/agents/%s/exec" % agent, {"cmd": cmd, "timeout": timeout},
               expect=expect, timeout=timeout + 30)[1]


def terminal(agent, send, expect, tok=None, wait=20, early=False):
    """Types send once the prompt is there (early: at once, before any
    output); returns (output, close reason)."""
    out, _, reason = ahserver.terminal(API_PORT, agent, tok or token(), send,
                                       lambda out: bool(expect) and expect.encode() in out,
                                       seconds=wait, early=early)
    return out, reason


#  --------------------------------------------------------------------
#  Scenarios

def s_terminal(a):
    out, _ = terminal(a["name"], "echo term$((6*7))\n", "term42")
    check(b"term42" in out, "the terminal did not echo: %r" % out[-300:])
    #  Typed before the shell is up (sandboxd keeps what the pty does not
    #  take yet): 20 KiB of no-ops, then lines whose output is not their echo.
    early = (": " + "y" * 200 + "\n") * 100 + "echo early$((6*7)); echo late$((6*8))\n"
    out, _ = terminal(a["name"], early, "late48", early=True, wait=30)
    check(b"early42" in out and b"late48" in out, "keystrokes typed before the prompt were lost: %r"
          % out[-300:])
    out, reason = terminal(a["name"], "exit 7\n", None, wait=10)
    check(reason is not None and "7" in reason, "the terminal's close did not carry exit 7: %r" % reason)


def s_files(a):
    n = a["name"]
    api("POST", files(n, "fdir/sub") + "?op=mkdir&parents=1", expect=201)
    st, raw = request("PUT", files(n, "fdir/sub/a b.txt"), b"hello files\n")
    check(st == 200, "PUT: %d %r" % (st, raw))
    st, raw = request("GET", files(n, "fdir/sub/a b.txt"))
    check(st == 200 and raw == b"hello files\n", "GET: %d %r" % (st, raw))
    _, j = api("GET", "/api/v1/agents/%s/files?path=fdir/sub" % n)
    names = [e["name"] for e in j["entries"]]
    check(names == ["a b.txt"] and j["entries"][0]["size"] == 12, "list: %r" % j)
    with open(os.path.join(home_of(a["id"]), "fdir/sub/a b.txt"), "rb") as f:
        check(f.read() == b"hello files\n", "the home's copy differs")
    # A name that is not UTF-8 (sandboxd sends it as it is): listed with
    # '?' for its bad bytes, and the listing keeps every other entry.
    odd = os.path.join(home_of(a["id"]).encode(), b"fdir/sub/odd-\xff\xfe.txt")
    with open(odd, "wb") as f:
        f.write(b"x")
    _, j = api("GET", "/api/v1/agents/%s/files?path=fdir/sub" % n)
    names = sorted(e["name"] for e in j["entries"])
    check(names == ["a b.txt", "odd-??.txt"], "a name that is not UTF-8, listed from sandboxd: %r" % j)
    os.unlink(odd)
    api("DELETE", files(n, "fdir/sub/a b.txt"))
    check(not os.path.exists(os.path.join(home_of(a["id"]), "fdir/sub/a b.txt")), "DELETE left the file")
    st, raw = request("POST", files(n, "fdir/x"))
    check(st == 400 and b"op=mkdir" in raw, "POST without op: %d %r" % (st, raw))
    st, raw = request("GET", files(n, "nope.txt"))
    check(st == 404, "GET of a missing file: %d %r" % (st, raw))
    #  The old aliases still answer.
    st, raw = request("GET", "/api/v1/agents/%s/fs/list?path=fdir" % n)
    check(st == 200 and b"sub" in raw, "fs/list alias: %d %r" % (st, raw))
    #  A stopped agent: read without waking it (listing, a file); every
    #  write is 409 naming the state.
    api("POST", "/api/v1/agents/%s/stop?wait=1" % n, timeout=120)
    state = api("GET", "/api/v1/agents/%s" % n)[1]["state"]
    check(state != "running", "stop left it running")
    st, raw = request("GET", "/api/v1/agents/%s/files?path=fdir" % n)
    check(st == 200 and b'"sub"' in raw, "a stopped agent's directory lists: %d %r" % (st, raw))
    st, raw = request("GET", files(n, "nope.txt"))
    check(st == 404, "a missing file of a stopped agent: %d %r" % (st, raw))
    check(api("GET", "/api/v1/agents/%s" % n)[1]["state"] == state, "reading did not wake it")
    for method, path in (("PUT", files(n, "x")), ("DELETE", files(n, "x")),
                         ("POST", files(n, "x") + "?op=mkdir")):
        st, raw = request(method, path, b"data" if method == "PUT" else None)
        check(st == 409 and (" is %s;" % state).encode() in raw, "%s %s on a stopped agent: %d %r" % (method, path, st, raw))
    api("POST", "/api/v1/agents/%s/start?wait=1" % n, timeout=120)


class PRNGStream:
    """512 MiB from a seeded PRNG, made as read, hashed as it goes."""
    def __init__(self, seed, size):
        self.rng = random.Random(seed)
        self.left = size
        self.sha = hashlib.sha256()

    def read(self, n=-1):
        n = self.left if n < 0 else min(n, self.left, 1 << 20)
        if n <= 0:
            return b""
        b = self.rng.randbytes(n)
        self.sha.update(b)
        self.left -= n
        return b


def s_big(a):
    n = a["name"]
    src = PRNGStream(20261129, BIG)
    t0 = time.time()
    c = http.client.HTTPConnection("127.0.0.1", API_PORT, timeout=120)
    c.putrequest("PUT", files(n, "big.bin"))
    c.putheader("Authorization", "Bearer " + token())
    c.putheader("Content-Length", str(BIG))
    c.endheaders()
    while True:
        b = src.read(1 << 20)
        if not b:
            break
        c.send(b)
    r = c.getresponse()
    body = r.read()
    c.close()
    check(r.status == 200 and json.loads(body)["size"] == BIG, "big upload: %d %r" % (r.status, body))
    t1 = time.time()
    c = http.client.HTTPConnection("127.0.0.1", API_PORT, timeout=120)
    c.request("GET", files(n, "big.bin"), headers={"Authorization": "Bearer " + token()})
    r = c.getresponse()
    check(r.status == 200, "big download: %d" % r.status)
    down, got = hashlib.sha256(), 0
    while True:
        b = r.read(1 << 20)
        if not b:
            break
        down.update(b)
        got += len(b)
    c.close()
    t2 = time.time()
    home = hashlib.sha256()
    with open(os.path.join(home_of(a["id"]), "big.bin"), "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            home.update(b)
    check(got == BIG, "downloaded %d bytes of %d" % (got, BIG))
    check(down.hexdigest() == src.sha.hexdigest(), "sha256 down %s != up %s" % (down.hexdigest(), src.sha.hexdigest()))
    check(home.hexdigest() == src.sha.hexdigest(), "the home's copy has another sha256")
    print("big: 512 MiB up %.1f s, down %.1f s, sha256 %s" % (t1 - t0, t2 - t1, src.sha.hexdigest()[:16]))
    os.unlink(os.path.join(home_of(a["id"]), "big.bin"))


def tree(root):
    """Every path under root (with size and mtime), the home excluded."""
    out = {}
    for d, dirs, fs in os.walk(root):
        if os.path.abspath(d) == os.path.abspath(home_of(A_ID)):
            dirs[:] = []
            continue
        for x in dirs + fs:
            p = os.path.join(d, x)
            try:
                st = os.lstat(p)
                out[p] = (st.st_size, st.st_mtime_ns)
            except OSError:
                pass
    return out


def s_hostile(a):
    n = a["name"]
    exec_(n, "ln -s /etc out && ln -s .. up && mkdir -p inner")
    home = home_of(a["id"])
    check(os.path.islink(os.path.join(home, "out")), "exec did not make the symlink")
    watch = os.path.dirname(home)          # <data>/fake/<id>: around the home
    before = tree(watch)
    before_tmp = set(os.listdir(TMP))
    etc_before = set(os.listdir("/etc"))
    long_name = "a" * 5000
    #  (what, method, raw URL path, statuses accepted: refusals only)
    cases = []
    for m in ("GET", "PUT", "DELETE", "POST"):
        q = "?op=mkdir" if m == "POST" else ""
        base = "/api/v1/agents/%s/files/" % n
        cases += [
            #  lws resolves dot segments before routing: these leave the
            #  files route (404/405 from wherever they land, 400 for ?op).
            ("dotdot", m, base + "../../../../tmp/evil" + q, (400, 403, 404, 405)),
            ("dotdot-encoded", m, base + "%2E%2E/%2E%2E/evil" + q, (400, 403, 404, 405)),
            ("dotdot-inner", m, base + "inner/%2E%2E/%2E%2E/evil" + q, (400, 403, 404, 405)),
            ("dotdot-stop", m, base + "%2E%2E/stop" + q, (400, 404, 405)),
            ("absolute-encoded", m, base + "%2Fetc%2Fevil" + q, (400, 403, 404)),
            ("symlink-out", m, base + "out/evil" + q, (400, 403, 404)),
            ("symlink-up", m, base + "up/evil" + q, (400, 403, 404)),
            ("long", m, base + long_name + q, (400, 414)),
            ("long-component", m, base + "c" * 300 + q, (400,)),
            ("nul", m, base + "a%00b" + q, (0, 400)),
            ("empty", m, base + q, (400, 405)),
        ]
    lst = "/api/v1/agents/%s/files?path=" % n
    cases += [
        ("list-dotdot", "GET", lst + "..", (400, 403)),
        ("list-dotdot-deep", "GET", lst + "inner/../..", (400, 403)),
        ("list-absolute", "GET", lst + "/etc", (400, 403)),
        ("list-symlink", "GET", lst + "out", (400, 403)),
        ("list-symlink-up", "GET", lst + "up", (400, 403)),
        ("list-nul", "GET", lst + "a%00b", (0, 400)),
        ("list-empty", "GET", lst, (400,)),
        ("list-none", "GET", "/api/v1/agents/%s/files" % n, (400,)),
        ("list-long", "GET", lst + "b" * 1200, (400, 414)),
        ("list-long-component", "GET", lst + "/".join(["d" * 300] * 3), (400,)),
        ("alias-put-dotdot", "PUT", "/api/v1/agents/%s/fs/file?path=../evil" % n, (400, 403)),
        ("alias-put-absolute", "PUT", "/api/v1/agents/%s/fs/file?path=/tmp/evil" % n, (400, 403)),
        ("alias-put-symlink", "PUT", "/api/v1/agents/%s/fs/file?path=out/evil" % n, (400, 403)),
        ("alias-mkdir-symlink", "POST", "/api/v1/agents/%s/fs/mkdir?path=out/evil" % n, (400, 403)),
        ("alias-rm-symlink", "DELETE", "/api/v1/agents/%s/fs/file?path=out/passwd" % n, (400, 403)),
        ("alias-read-symlink", "GET", "/api/v1/agents/%s/fs/file?path=out/passwd" % n, (400, 403)),
    ]
    for what, m, path, ok in cases:
        st, raw = raw_request(m, path, b"evil\n" if m == "PUT" else None)
        check(st in ok, "hostile %s %s %s: %d %r" % (what, m, path[:120], st, raw[:200]))
        check(st == 0 or b"error" in raw, "hostile %s: no error named: %r" % (what, raw[:200]))
    _, ag = api("GET", "/api/v1/agents/%s" % n)
    check(ag["state"] == "running", "the hostile requests changed the agent: %s" % ag["state"])
    after = tree(watch)
    check(before == after, "something changed around the home: %r" %
          sorted(set(after.items()) ^ set(before.items()))[:5])
    check(set(os.listdir("/etc")) == etc_before, "/etc changed")
    check(set(os.listdir(TMP)) == before_tmp, "the temporary directory changed")
    check(not os.path.exists("/tmp/evil") and not os.path.exists("/etc/evil"), "evil landed outside")
    check(os.path.isdir("/etc") and os.path.exists("/etc/passwd"), "/etc/passwd went away")
    for x in os.listdir(home):
        check("evil" not in x, "evil landed in the home: %s" % x)
    print("hostile: %d requests refused" % len(cases))


def raw_request(method, path, body):
    """A request line written as is (no client normalisation); (status, body)."""
    s = socket.create_connection(("127.0.0.1", API_PORT), timeout=30)
    try:
        head = "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: close\r\n" % (
            method, path, token())
        head += "Content-Length: %d\r\n\r\n" % len(body or b"")
        s.sendall(head.encode() + (body or b""))
        data = b""
        while True:
            try:
                b = s.recv(65536)
            except ConnectionError:
                break
            if not b:
                break
            data += b
    finally:
        s.close()
    if not data.startswith(b"HTTP/1."):
        return 0, data
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[-1]


def s_exec(a):
    n = a["name"]
    for code in (0, 1, 42, 255):
        j = exec_(n, "echo out$((%d+1)); echo err >&2; exit %d" % (code, code))
        check(j["status"] == code and j["stdout"] == "out%d\n" % (code + 1) and j["stderr"] == "err\n"
              and not j["timed_out"], "exec exit %d: %r" % (code, j))
    t0 = time.time()
    j = exec_(n, "sleep 30", timeout=1)
    check(j["timed_out"] and time.time() - t0 < 15, "exec did not time out: %r" % j)
    api("POST", "/api/v1/agents/%s/exec" % n, {"timeout": 1}, expect=400)


def exec_stream(agent, cmd, timeout=30):
    """POST exec?stream=1; yields (kind, payload, seconds since the request)."""
    c = http.client.HTTPConnection("127.0.0.1", API_PORT, timeout=timeout + 30)
    t0 = time.time()
    c.request("POST", "/api/v1/agents/%s/exec?stream=1" % agent,
              body=json.dumps({"cmd": cmd, "timeout": timeout}).encode(),
              headers={"Authorization": "Bearer " + token(), "Content-Type": "application/json"})
    r = c.getresponse()
    check(r.status == 200 and r.getheader("Content-Type") == "application/vnd.agenthold.exec-records",
          "exec?stream=1: %d %s" % (r.status, r.getheader("Content-Type")))

    def exact(n):
        b = b""
        while len(b) < n:
            x = r.read(n - len(b))
            if not x:
                raise Fail("exec?stream=1 ended inside a record")
            b += x
        return b
    try:
        while True:
            h = r.read(5)
            if not h:
                return
            if len(h) < 5:
                h += exact(5 - len(h))
            kind, n = h[0], int.from_bytes(h[1:5], "big")
            yield kind, exact(n), time.time() - t0
    finally:
        c.close()


def s_exec_stream(a):
    n = a["name"]
    recs = list(exec_stream(n, "echo first; sleep 2; echo second >&2; exit 6"))
    kinds = [k for k, _, _ in recs]
    check(kinds[-1] == 4 and json.loads(recs[-1][1]) == {"status": 6, "signal": 0, "timed_out": False},
          "exec stream's end: %r" % recs[-1:])
    first = [t for k, d, t in recs if k == 1 and b"first" in d]
    check(first and recs[-1][2] - first[0] > 1.5, "the first line did not come before the end: %r" % recs)
    check(any(k == 2 and d == b"second\n" for k, d, _ in recs), "no stderr record: %r" % recs)
    #  20 MiB: over the buffered form's 1 MiB cap, streamed whole.
    sha, size = hashlib.sha256(), 0
    for k, d, _ in exec_stream(n, "head -c 20971520 /dev/zero | tr '\\0' 'z'"):
        if k == 1:
            sha.update(d)
            size += len(d)
        last = (k, d)
    check(size == 20 << 20 and sha.hexdigest() == hashlib.sha256(b"z" * (20 << 20)).hexdigest(),
          "exec stream of 20 MiB: %d bytes" % size)
    check(last[0] == 4 and json.loads(last[1])["status"] == 0, "20 MiB end: %r" % (last,))
    recs = list(exec_stream(n, "sleep 30", timeout=1))
    check(recs[-1][0] == 4 and json.loads(recs[-1][1])["timed_out"], "exec stream timeout: %r" % recs[-1:])
    st, raw = request("GET", "/api/v1/agents/%s?stream=1" % n)
    check(st == 400, "stream on another route: %d" % st)


def tunnel_conns():
    out = subprocess.run(["ss", "-Htn", "state", "established", "dport", "= :%d" % TUNNEL_PORT],
                         capture_output=True, text=True).stdout
    return [l.split()[2] for l in out.splitlines() if l.strip()]


def wait_back(n):
    """Waits until sandboxd of agent n has redialled and answers an exec."""
    deadline = time.time() + 30
    j = None
    while time.time() < deadline:
        st, j = api("POST", "/api/v1/agents/%s/exec" % n, {"cmd": "echo back$((40+2))"}, expect=None)
        if st == 200:
            break
        time.sleep(0.5)
    check(j and j.get("stdout") == "back42\n", "exec after the reconnect: %r" % j)


def s_reconnect(a):
    n = a["name"]
    before = tunnel_conns()
    check(len(before) == 1, "one tunnel connection expected, ss shows %r" % before)
    #  A real RST on both ends of the live connection (needs CAP_NET_ADMIN).
    r = subprocess.run(["ss", "-K", "-tn", "dport", "= :%d" % TUNNEL_PORT], capture_output=True, text=True)
    check(r.returncode == 0, "ss -K failed: %s" % r.stderr)
    deadline = time.time() + 30
    after = []
    while time.time() < deadline:
        after = tunnel_conns()
        if after and after != before:
            break
        time.sleep(0.2)
    check(after and after != before, "sandboxd did not redial: %r -> %r (ss -K needs CAP_NET_ADMIN and a "
          "kernel with CONFIG_INET_DIAG_DESTROY)" % (before, after))
    wait_back(n)
    out, _ = terminal(n, "echo again$((6*7))\n", "again42")
    check(b"again42" in out, "terminal after the reconnect: %r" % out[-200:])
    with open(LOG) as f:
        log = f.read()
    check("sandboxd connected" in log and "tunnel connection" in log, "the log does not show the reconnect")


def tunnel_status(agent_id, tok):
    async def go():
        uri = "ws://127.0.0.1:%d/tunnel" % TUNNEL_PORT
        try:
            ws = await websockets.connect(uri, subprotocols=["agenthold-tunnel"], open_timeout=5,
                                          extra_headers={"Authorization": "Bearer " + tok,
                                                         "X-Agenthold-Agent": agent_id})
        except websockets.exceptions.InvalidStatusCode as e:
            return e.status_code
        await ws.close()
        return 101
    return asyncio.run(go())


def s_token(a):
    with open(os.path.join(DATA, "fake", a["id"], "boot.json")) as f:
        boot = json.load(f)
    forged = "%064x" % random.Random(7).getrandbits(256)
    check(tunnel_status(a["id"], forged) == 401, "a forged token was not refused with 401")
    check(tunnel_status(a["id"], "") == 401, "an empty token was not refused with 401")
    check(tunnel_status("nosuchagent", boot["token"]) == 401, "another agent's id was not refused")
    #  A restart makes a fresh token: the old one is stale.
    api("POST", "/api/v1/agents/%s/stop?wait=1" % a["name"], timeout=120)
    api("POST", "/api/v1/agents/%s/start?wait=1" % a["name"], timeout=120)
    with open(os.path.join(DATA, "fake", a["id"], "boot.json")) as f:
        fresh = json.load(f)["token"]
    check(fresh != boot["token"], "a start did not make a fresh token")
    check(tunnel_status(a["id"], boot["token"]) == 401, "a stale token was not refused with 401")
    # Another agent's live token, the API's token, bent copies: refused.
    _, b = api("POST", "/api/v1/agents?wait=1", {"name": "sbx-other"}, expect=None, timeout=120)
    with open(os.path.join(DATA, "fake", b["id"], "boot.json")) as f:
        theirs = json.load(f)["token"]
    check(tunnel_status(a["id"], theirs) == 401, "another agent's token was not refused")
    check(tunnel_status(b["id"], fresh) == 401, "a token under another agent's id was not refused")
    check(tunnel_status(a["id"], ahserver.read_token(DATA)) == 401, "the API's token opened the tunnel")
    for bent in (fresh.upper(), fresh + "0", fresh[:-1], " " + fresh + " x", fresh + "\t"):
        check(tunnel_status(a["id"], bent) == 401, "a bent token %r... was not refused" % bent[:8])
    st, _ = ahserver.request(API_PORT, "GET", "/api/v1/agents", token=fresh)
    check(st == 401, "a sandbox's boot token worked on the API: %d" % st)
    # A destroyed agent's last token is worth nothing.
    api("DELETE", "/api/v1/agents/sbx-other?wait=1", expect=None, timeout=120)
    check(tunnel_status(b["id"], theirs) == 401, "a destroyed agent's token was not refused")
    check(tunnel_status(a["id"], fresh) == 101, "the live token stopped working")
    #  That tunnel replaced sandboxd's own, which redials.
    wait_back(a["name"])


def cli(*args, timeout=60):
    p = subprocess.run([BIN] + list(args), env=ENV, cwd=TMP, capture_output=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def s_cli(a):
    n = a["name"]
    rc, out, err = cli("exec", n, "--", "sh", "-c", "echo cli-out; echo cli-err >&2; exit 9")
    check(rc == 9 and out == b"cli-out\n" and err == b"cli-err\n", "agenthold exec: %d %r %r" % (rc, out, err))
    rc, out, err = cli("exec", n, "--", "echo", "a b", "$HOME")
    check(rc == 0 and out == b"a b $HOME\n", "agenthold exec quoting: %d %r %r" % (rc, out, err))
    rc, out, err = cli("exec", "--timeout", "1", n, "--", "sleep 20")
    check(rc == 124 and b"timed out" in err, "agenthold exec timeout: %d %r" % (rc, err))
    local = os.path.join(TMP, "cli-up.bin")
    with open(local, "wb") as f:
        f.write(random.Random(3).randbytes(5 << 20))
    rc, out, err = cli("fs", "mkdir", n, "clidir/deep", "-p")
    check(rc == 0, "agenthold fs mkdir: %d %r" % (rc, err))
    rc, out, err = cli("fs", "put", n, "clidir/deep/up.bin", local)
    check(rc == 0, "agenthold fs put: %d %r" % (rc, err))
    back = os.path.join(TMP, "cli-down.bin")
    rc, out, err = cli("fs", "get", n, "clidir/deep/up.bin", back)
    check(rc == 0, "agenthold fs get: %d %r" % (rc, err))
    with open(local, "rb") as f1, open(back, "rb") as f2:
        check(f1.read() == f2.read(), "agenthold fs put/get: the bytes differ")
    rc, out, err = cli("fs", "ls", n, "clidir/deep")
    check(rc == 0 and b"up.bin" in out and b"5242880" in out, "agenthold fs ls: %r" % out)
    rc, out, err = cli("fs", "rm", n, "clidir", "-r")
    check(rc == 0 and not os.path.exists(os.path.join(home_of(a["id"]), "clidir")), "agenthold fs rm -r: %r" % err)
    rc, out, err = cli("fs", "rm", n, "../../" + n)
    check(rc == 1 and api("GET", "/api/v1/agents/%s" % n)[1]["state"] == "running", "fs rm ../../NAME: %r" % err)
    rc, out, err = cli("fs", "get", n, "../etc/passwd", os.path.join(TMP, "evil"))
    check(rc == 1 and err.startswith(b"agenthold fs get: ") and not os.path.exists(os.path.join(TMP, "evil"))
          and not os.path.exists(os.path.join(TMP, "evil.part")), "agenthold fs get ..: %d %r" % (rc, err))
    # Control characters in a path are refused, never cut: keep survives.
    rc, out, err = cli("fs", "mkdir", n, "keep")
    check(rc == 0, "agenthold fs mkdir keep: %r" % err)
    rc, out, err = cli("fs", "put", n, "keep/file.txt", local)
    check(rc == 0, "agenthold fs put keep/file.txt: %r" % err)
    for bad in ("keep\n.tmp", "keep\r.old", "keep\t", "keep/\x1b[31mred", "keep\x7f", "keep/file.txt\n"):
        for args in (["fs", "rm", n, bad, "-r"], ["fs", "ls", n, bad], ["fs", "mkdir", n, bad],
                     ["fs", "put", n, bad, local], ["fs", "get", n, bad, os.path.join(TMP, "ctl.out")]):
            rc, out, err = cli(*args)
            check(rc == 1 and b"control character" in err, "agenthold %s %r: %d %r" % (args[1], bad, rc, err))
            check(b"\x1b" not in err and b"\r" not in err.rstrip(b"\n"), "the error echoes no control character")
    check(os.path.isfile(os.path.join(home_of(a["id"]), "keep", "file.txt")), "keep/file.txt survived")
    check(not os.path.exists(os.path.join(TMP, "ctl.out")), "nothing was downloaded")
    # A trailing / after a file's name is not the file.
    rc, out, err = cli("fs", "get", n, "keep/file.txt/", os.path.join(TMP, "slash.out"))
    check(rc == 1 and not os.path.exists(os.path.join(TMP, "slash.out")), "fs get FILE/: %d %r" % (rc, err))
    rc, out, err = cli("fs", "rm", n, "keep/file.txt/")
    check(rc == 1 and os.path.isfile(os.path.join(home_of(a["id"]), "keep", "file.txt")), "fs rm FILE/: %r" % err)
    rc, out, err = cli("fs", "frob", n, "x")
    check(rc == 2 and b"unknown operation" in err, "agenthold fs frob: %d %r" % (rc, err))
    rc, out, err = cli("exec", "--help")
    check(rc == 0 and b"usage: agenthold exec" in out, "agenthold exec --help: %r" % out)


def term_session(name, script, resize=None, kill=None):
    """agenthold term on a pty of our own (the slave kept, to read its
    settings afterwards). script: lines typed once output shows the
    prompt, each after the last one's expected text. Returns (output,
    exit status, termios before, termios after)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    before = termios.tcgetattr(slave)

    def ctty():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    p = subprocess.Popen([BIN, "term", name], env=ENV, cwd=TMP, stdin=slave, stdout=slave,
                         stderr=slave, preexec_fn=ctty)
    procs.append(p)
    out = b""

    def read_until(want, t):
        nonlocal out
        end = time.time() + t
        while time.time() < end and (want is None or want not in out):
            r, _, _ = select.select([master], [], [], 0.1)
            if r:
                try:
                    out += os.read(master, 65536)
                except OSError:
                    return
    read_until(b"#", 20)
    for send, want in script:
        if send == "RESIZE":
            #  The kernel sends the pty's foreground group SIGWINCH.
            fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", resize[0], resize[1], 0, 0))
            time.sleep(0.5)     # pacing: nothing tells when the CLI has passed the new size on
            continue
        if send == "KILL":
            p.send_signal(kill)
            break
        os.write(master, send.encode())
        read_until(want.encode() if want else None, 15)
    try:
        status = p.wait(20)
    except subprocess.TimeoutExpired:
        p.kill()
        status = -1
    read_until(None, 0.3)
    after = termios.tcgetattr(slave)
    os.close(master)
    os.close(slave)
    return out, status, before, after


def s_term(a):
    n = a["name"]
    out, status, before, after = term_session(n, [
        ("stty size; echo term$((6*7))\r", "term42"),
        ("RESIZE", None),
        ("stty size; exit 5\r", "logout")], resize=(33, 111))
    check(b"term42" in out and b"24 80" in out, "agenthold term did not echo: %r" % out[-300:])
    check(b"33 111" in out, "agenthold term did not pass the resize on: %r" % out[-300:])
    check(status == 5, "agenthold term exited %d, the shell 5: %r" % (status, out[-300:]))
    check(after == before, "agenthold term left the terminal's settings changed")
    out, status, before, after = term_session(n, [("echo x$((6*7))\r", "x42"), ("KILL", None)],
                                              kill=signal.SIGTERM)
    check(status == 128 + signal.SIGTERM, "agenthold term on SIGTERM exited %d" % status)
    check(after == before, "agenthold term left the terminal raw after SIGTERM")
    p = subprocess.run([BIN, "term", n], env=ENV, cwd=TMP, input=b"echo piped$((6*7)); exit 4\n",
                       capture_output=True, timeout=30)
    check(p.returncode == 4 and b"piped42" in p.stdout, "agenthold term with piped input: %d %r"
          % (p.returncode, p.stdout[-200:]))
    rc, out, err = cli("term", "nosuch")
    check(rc == 1 and b"no agent named 'nosuch'" in err, "agenthold term nosuch: %d %r" % (rc, err))


def s_ports(a):
    """GET /api/v1/agents/{a}/ports and `agenthold ports`: a TCP server of
    the test's own listening on the loopback shows (the fake driver's
    sandboxd shares the host's network namespace); once it closes, it is
    gone; a sleeping agent is a 409 and is not woken; another tenant 404."""
    n = a["name"]
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    port = lsock.getsockname()[1]
    try:
        _, j = api("GET", "/api/v1/agents/%s/ports" % n)
        check(j["agent"] == n and {"port": port, "address": "127.0.0.1"} in j["ports"],
              "the listening port %d is listed: %r" % (port, j))
        check(all(1 <= p["port"] <= 65535 for p in j["ports"]) and
              [p["port"] for p in j["ports"]] == sorted(p["port"] for p in j["ports"]), "by port: %r" % j)
        rc, out, err = cli("ports", n)
        check(rc == 0 and b"PORT" in out and (b"%d" % port) in out, "agenthold ports: %d %r %r" % (rc, out, err))
        rc, out, err = cli("ports", n, "--json")
        check(rc == 0 and {"port": port, "address": "127.0.0.1"} in json.loads(out),
              "agenthold ports --json: %r" % out[:300])
    finally:
        lsock.close()
    _, j = api("GET", "/api/v1/agents/%s/ports" % n)
    check(port not in [p["port"] for p in j["ports"]], "a closed port is gone: %r" % j)
    rc, out, err = cli("ports")
    check(rc == 2 and b"which agent" in err, "agenthold ports without a name: %d %r" % (rc, err))
    st, raw = request("GET", "/api/v1/agents/nosuch/ports")
    check(st == 404, "no such agent: %d" % st)
    # Asleep: not woken, a 409 that names the state.
    api("POST", "/api/v1/agents/%s/stop?wait=1" % n, expect=None, timeout=120)
    st, raw = request("GET", "/api/v1/agents/%s/ports" % n)
    check(st == 409 and b"is sleeping" in raw, "a sleeping agent's ports: %d %r" % (st, raw))
    check(api("GET", "/api/v1/agents/" + n)[1]["state"] == "sleeping", "the request woke nothing")
    api("POST", "/api/v1/agents/%s/start?wait=1" % n, expect=None, timeout=120)


SCENARIOS = [("terminal", s_terminal), ("files", s_files), ("hostile", s_hostile), ("exec", s_exec),
             ("exec_stream", s_exec_stream),
             ("cli", s_cli), ("term", s_term), ("reconnect", s_reconnect), ("token", s_token), ("big", s_big),
             ("ports", s_ports)]
A_ID = None


def main():
    global A_ID
    start_server()
    _, a = api("POST", "/api/v1/agents?wait=1", {"name": "sbx1"}, expect=None, timeout=120)
    check(a and a.get("id"), "create: %r" % a)
    api("POST", "/api/v1/agents/sbx1/start?wait=1", expect=None, timeout=120)
    _, a = api("GET", "/api/v1/agents/sbx1")
    check(a["state"] == "running", "the agent is %s" % a["state"])
    A_ID = a["id"]
    for name, fn in SCENARIOS:
        if ONLY and name not in ONLY:
            continue
        t0 = time.time()
        fn(a)
        print("ok %s (%.1f s)" % (name, time.time() - t0), flush=True)
    print("e2e_sandbox: %d checks passed" % check.count)


if __name__ == "__main__":
    sys.exit(ahserver.run(main, Fail, procs, TMP, LOG))
