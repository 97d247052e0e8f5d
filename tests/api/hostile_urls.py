#!/usr/bin/python3
"""tests/api/hostile_urls.py: every route of the API, its URL bent every
way a hostile client bends one, against the real `agenthold serve` (fake
driver).

Usage: hostile_urls.py AGENTHOLD

For each route of the router's own table (`agenthold routes --json`: the
ROUTES table below must cover it, and name nothing else), and for each
segment of its path, the segment is replaced by (and, separately, gets
appended) each of: .. %2e%2e %2E%2E ..%2F %2F %00 %0A %0D a%2Fb and an
empty segment (//), raw ".", and the bytes are sent exactly as written
(a raw socket: no client library normalises them). Every answer must be
a 400 (or the exact route the URL names, which none of these is), with
a JSON error; afterwards nothing changed: both agents still exist in
the state they had, the files planted in both homes are intact, and
bob's audit trail (the agent no URL names) has no new row.

Then every route that reads a JSON body gets broken ones (unclosed,
not an object, trailing data, two documents, nesting 5000 deep, NUL
inside a string, a number out of range, a byte-order mark, single
quotes, blanks): each a 400 whose message names the body, and nothing
changed (agents, files, tenants, tokens, sessions, policy values).

Every route that reads a JSON body is sent keys it does not take
(unknown, empty, doubled, with a C1 control) and every route that sets a
number the values that would mean "no limit" or fail later (1e-12 CPUs,
denormals, -0, 1e308, 2^53+1, reals where whole numbers are meant,
off-step values, strings): each a 400 naming the key, nothing changed.

A few whole-request forms go too: raw CR, LF, NUL and TAB inside the
request line, a request line over 4 KiB (414), a head over 16 KiB (431),
bare LF line ends; each answered with its status and the connection
closed, the server still serving."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahserver  # noqa: E402

AGENTHOLD = sys.argv[1]
TMP = tempfile.mkdtemp(prefix="ah-hostile-")
DATA = os.path.join(TMP, "data")


class Fail(Exception):
    pass




check = ahserver.Checks(Fail)


API = ahserver.free_port(fail=Fail)
TUNNEL = ahserver.free_port(avoid={API}, fail=Fail)
TOKEN = None


def raw(request_bytes, timeout=10):
    """Send bytes as they are; returns (status, body bytes)."""
    s = socket.create_connection(("127.0.0.1", API), timeout=timeout)
    try:
        s.sendall(request_bytes)
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep:
                length = None
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        length = int(v.strip())
                if length is not None and len(body) >= length:
                    break
    finally:
        s.close()
    line = data.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    return status, data.partition(b"\r\n\r\n")[2]


def closed_after(request_bytes, timeout=5):
    """Sends bytes as they are and reads to the end: (status, True when
    the server closed the connection within timeout)."""
    s = socket.create_connection(("127.0.0.1", API), timeout=timeout)
    data = b""
    try:
        s.sendall(request_bytes)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        closed = True
    except (socket.timeout, TimeoutError):
        closed = False
    except ConnectionResetError:
        closed = True
    finally:
        s.close()
    parts = data.split(b"\r\n", 1)[0].split(b" ")
    return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0), closed


def send(method, target, body=None):
    body = body if body is not None else b""
    req = ("%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: close\r\n"
           "Content-Length: %d\r\n\r\n" % (method, target, TOKEN, len(body))).encode() + body
    return raw(req)


def api(method, path, body=None):
    status, data = ahserver.request(API, method, path, body=body, token=TOKEN)
    return status, (json.loads(data) if data else None)


# Every route: method, path with its parameters filled in, a body.
ROUTES = [
    ("GET", "/api/v1/agents", None),
    ("POST", "/api/v1/agents", b'{"name":"carol"}'),
    ("GET", "/api/v1/agents/alice", None),
    ("PATCH", "/api/v1/agents/alice", b'{"idle_minutes":30}'),
    ("DELETE", "/api/v1/agents/alice", None),
    ("POST", "/api/v1/agents/alice/start", None),
    ("POST", "/api/v1/agents/alice/stop", None),
    ("POST", "/api/v1/agents/alice/rebuild", None),
    ("GET", "/api/v1/agents/alice/operations", None),
    ("POST", "/api/v1/agents/alice/turns", b"{}"),
    ("POST", "/api/v1/agents/alice/conversations", b"{}"),
    ("GET", "/api/v1/agents/alice/conversations", None),
    ("POST", "/api/v1/agents/alice/terminals", b'{"cols":80,"rows":24}'),
    ("GET", "/api/v1/agents/alice/terminals", None),
    ("GET", "/api/v1/agents/alice/terminals/t0123456789ab", None),
    ("DELETE", "/api/v1/agents/alice/terminals/t0123456789ab", None),
    ("GET", "/api/v1/agents/alice/conversations/0123456789abcdef?after=0&limit=10", None),
    ("POST", "/api/v1/agents/alice/conversations/0123456789abcdef/prompt", b'{"text":"hi"}'),
    ("POST", "/api/v1/agents/alice/conversations/0123456789abcdef/cancel", b"{}"),
    ("POST", "/api/v1/agents/alice/conversations/0123456789abcdef/permissions/7", b'{"option":"allow"}'),
    ("POST", "/api/v1/turns/0123456789abcdef/renew", b"{}"),
    ("DELETE", "/api/v1/turns/0123456789abcdef", None),
    ("POST", "/api/v1/agents/alice/exec", b'{"cmd":"touch hit"}'),
    ("GET", "/api/v1/agents/alice/files?path=.", None),
    ("GET", "/api/v1/agents/alice/files/keep/note.txt", None),
    ("PUT", "/api/v1/agents/alice/files/keep/note.txt", b"overwritten"),
    ("POST", "/api/v1/agents/alice/files/keep/sub?op=mkdir", None),
    ("DELETE", "/api/v1/agents/alice/files/keep/note.txt", None),
    ("GET", "/api/v1/agents/alice/fs/list?path=keep", None),
    ("GET", "/api/v1/agents/alice/fs/file?path=keep/note.txt", None),
    ("GET", "/api/v1/agents/alice/fs/text?path=keep/note.txt", None),
    ("PUT", "/api/v1/agents/alice/fs/file?path=keep/note.txt", b"overwritten"),
    ("DELETE", "/api/v1/agents/alice/fs/file?path=keep/note.txt", None),
    ("POST", "/api/v1/agents/alice/fs/mkdir?path=keep/sub", None),
    ("GET", "/api/v1/agents/alice/tree?path=keep", None),
    ("GET", "/api/v1/files?q=keep", None),
    ("GET", "/api/v1/agents/alice/ports", None),
    ("POST", "/api/v1/agents/alice/ports/8000/link", b'{"expires":3600}'),
    ("GET", "/api/v1/agents/alice/ports/links", None),
    ("PUT", "/api/v1/agents/alice/ports/8000", b'{"public":true}'),
    ("DELETE", "/api/v1/agents/alice/ports/links/0123456789ab", None),
    ("GET", "/p/0123456789ab/8000/4102444800-0123456789ab-00000000000000000000000000000000/x", None),
    ("GET", "/p/0123456789ab/8000/1-00000000000000000000000000000000/x", None),
    ("GET", "/p/0123456789ab/8000/1-00000000000000000000000000000000", None),
    ("HEAD", "/p/0123456789ab/8000/1-00000000000000000000000000000000/x", None),
    ("HEAD", "/p/0123456789ab/8000/1-00000000000000000000000000000000", None),
    ("POST", "/p/0123456789ab/8000/1-00000000000000000000000000000000/x", None),
    ("POST", "/p/0123456789ab/8000/1-00000000000000000000000000000000", None),
    ("PUT", "/p/0123456789ab/8000/1-00000000000000000000000000000000/x", None),
    ("PUT", "/p/0123456789ab/8000/1-00000000000000000000000000000000", None),
    ("PATCH", "/p/0123456789ab/8000/1-00000000000000000000000000000000/x", None),
    ("PATCH", "/p/0123456789ab/8000/1-00000000000000000000000000000000", None),
    ("DELETE", "/p/0123456789ab/8000/1-00000000000000000000000000000000/x", None),
    ("DELETE", "/p/0123456789ab/8000/1-00000000000000000000000000000000", None),
    ("OPTIONS", "/p/0123456789ab/8000/1-00000000000000000000000000000000/x", None),
    ("OPTIONS", "/p/0123456789ab/8000/1-00000000000000000000000000000000", None),
    ("GET", "/api/v1/operations", None),
    ("GET", "/api/v1/policy", None),
    ("POST", "/api/v1/policy/reload", None),
    ("GET", "/api/v1/runtimes", None),
    ("GET", "/api/v1/runtimes/busybox/briefing", None),
    ("GET", "/api/v1/events", None),
    ("GET", "/api/v1/agents/alice/terminal", None),
    ("PUT", "/api/v1/policy", b'{"tenant_max_sandboxes":10}'),
    ("POST", "/api/v1/tenants", b'{"name":"initech"}'),
    ("GET", "/api/v1/tenants", None),
    ("GET", "/api/v1/tenants/acme", None),
    ("PATCH", "/api/v1/tenants/acme", b'{"max_sandboxes":1}'),
    ("DELETE", "/api/v1/tenants/acme", None),
    ("GET", "/api/v1/tenants/acme/egress/secrets", None),
    ("PUT", "/api/v1/tenants/acme/egress/secrets/api.example.com", b'{"header":"X-Key","value":"v"}'),
    ("DELETE", "/api/v1/tenants/acme/egress/secrets/api.example.com", None),
    ("POST", "/api/v1/tokens", b'{"tenant":"acme"}'),
    ("GET", "/api/v1/tokens", None),
    ("DELETE", "/api/v1/tokens/acme-token", None),
    ("POST", "/api/v1/sessions", b'{"scope":"run","subject":"r1"}'),
    ("GET", "/api/v1/sessions", None),
    ("GET", "/api/v1/sessions/run-r1-0123456789", None),
    ("POST", "/api/v1/sessions/run-r1-0123456789/open", None),
    ("DELETE", "/api/v1/sessions/run-r1-0123456789", None),
    ("GET", "/healthz", None),
    ("GET", "/api/v1/openapi.json", None),
    ("GET", "/api/v1/me", None),
    ("POST", "/api/v1/agents/alice/terminal/ticket", None),
    ("GET", "/console/app.js", None),
    ("GET", "/console/terminal/alice?ticket=" + "0" * 64, None),
    ("HEAD", "/console/app.js", None),
    ("GET", "/favicon.ico", None),
    ("HEAD", "/favicon.ico", None),
    ("GET", "/api/v1/agents/alice/briefing", None),
    ("POST", "/api/v1/login", b'{"token":"x"}'),
    ("GET", "/api/v1/login", None),
    ("POST", "/api/v1/logout", None),
    ("GET", "/api/v1/hosts", None),
    ("GET", "/api/v1/pool", None),
    ("GET", "/api/v1/tombstones", None),
    ("DELETE", "/api/v1/tombstones/0123456789ab", None),
    ("GET", "/metrics", None),
    ("POST", "/mcp", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"exec",'
                     b'"arguments":{"agent":"alice","cmd":"touch hit"}}}'),
]
# The root ("/", GET and HEAD) has no segment to bend.
UNBENT = {("GET", "/"), ("HEAD", "/")}


def router_routes():
    """Every route of the router's own table (`agenthold routes --json`)."""
    out = subprocess.run([AGENTHOLD, "routes", "--json"], capture_output=True, text=True, timeout=60)
    check(out.returncode == 0, "agenthold routes --json: %d %s" % (out.returncode, out.stderr))
    return [(r["method"], r["pattern"]) for r in json.loads(out.stdout)]


def check_coverage():
    """ROUTES covers the router's table, both ways: every route of it has
    a request here (a route added to the server without one fails this
    test, naming it), and every request here names a route of it."""
    import re
    table = router_routes()
    check(len(table) >= 50, "the router has its routes: %d" % len(table))

    def matches(pattern, path):
        rx = re.escape(pattern)
        rx = re.sub(r"\\\{[a-z_]+\\\*\\\}", ".+", rx)
        rx = re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", rx)
        return re.fullmatch(rx, path) is not None
    mine = [(m, p.partition("?")[0]) for m, p, _ in ROUTES]
    for method, pattern in table:
        if (method, pattern) in UNBENT:
            continue
        check(any(m == method and matches(pattern, p) for m, p in mine),
              "the router's %s %s has no request in hostile_urls.py's ROUTES" % (method, pattern))
    for m, p in mine:
        check(any(m == method and matches(pattern, p) for method, pattern in table),
              "ROUTES' %s %s is no route of the router's table" % (m, p))

# Routes whose body is JSON (every POST, PATCH and PUT but the files'),
# and bodies no JSON reader should accept or act on: each must be a 400
# naming the body, and change nothing.
BROKEN_BODIES = [
    b"{", b"}", b"{\"name\":", b"[]", b'"alice"', b"null", b"true", b"12", b"\xff\xfe{}",
    b'{"name":"carol"} trailing', b'{"name":"carol"}{"name":"dave"}', b"[" * 5000 + b"]" * 5000,
    b'{"a":' * 3000 + b"1" + b"}" * 3000, b'{"name":"ca\x00rol"}', b'{"name":"carol\u0000"}',
    b"\x00", b'{"name":1e999}', b"\xef\xbb\xbf{}", b"{'name':'carol'}", b" " * 10,
]
JSON_ROUTES = [(m, p) for m, p, _ in ROUTES
               if m in ("POST", "PATCH", "PUT") and "/files" not in p and "/fs/" not in p
               and not p.startswith("/p/")       # a port link's body is the sandbox's web server's
               and p != "/mcp"]                  # a JSON-RPC message, refused in JSON-RPC's terms (mcp.hostile)

# Keys no body takes, and the key each 400 must name.
BAD_KEYS = [
    (b'{"foo":1}', "'foo'"), (b'{"":1}', "''"), (b'{"foo\\u0085":1}', "'foo"),
    (b'{"zz":1,"zz":2}', "'zz'"), (b'{"run":"r1","run":"r1"}', "'run'"),
    (b'{"a_rather_long_key_name_for_jansson":1,"a_rather_long_key_name_for_jansson":2}',
     "'a_rather_long_key_name_for_jansson'"),
]
KEYED_DELETES = [("DELETE", "/api/v1/agents/alice"), ("DELETE", "/api/v1/turns/0123456789abcdef")]
# Values refused everywhere a number is set: denormals, -0, huge, past
# 2^53, a string, a boolean, an array.
NEVER_NUMBERS = ["5e-324", "2.2250738585072009e-308", "-0.0", "1e308", "-1", "9007199254740993",
                 '"1"', "true", "[1]", "{}"]
NUMBER_ROUTES = [
    ("POST", "/api/v1/agents", "cpus", ["1e-12", "1e-9", "4.9e-10", "0.001", "0.015", "0", "1024.01"]),
    ("POST", "/api/v1/agents", "memory_mb", ["5", "0", "512.5", "512.0", "1099511627777"]),
    ("POST", "/api/v1/agents", "idle_minutes", ["0.001", "0", "525601"]),
    ("PATCH", "/api/v1/agents/alice", "cpus", ["1e-12", "0.001", "0.999"]),
    ("PATCH", "/api/v1/agents/alice", "memory_mb", ["1.5", "0"]),
    ("PATCH", "/api/v1/agents/alice", "idle_minutes", ["1e-300", "0.005"]),
    ("PATCH", "/api/v1/tenants/acme", "max_cpus", ["1e-12", "0.005", "1048576.01"]),
    ("PATCH", "/api/v1/tenants/acme", "max_sandboxes", ["1.5", "100001"]),
    ("PATCH", "/api/v1/tenants/acme", "max_memory_mb", ["5", "2.5"]),
    ("POST", "/api/v1/tenants", "max_running", ["0.5", "100001"]),
    ("PUT", "/api/v1/policy", "tenant_max_sandboxes", ["0.5", "100001"]),
    ("PUT", "/api/v1/policy", "pool_max_running", ["1e5", "3.0"]),
    ("POST", "/api/v1/agents/alice/exec", "timeout", ["0", "0.0001", "604800.001"]),
    ("POST", "/api/v1/agents/alice/turns", "lease_ms", ["999", "3600001", "60000.5"]),
    ("POST", "/api/v1/tokens", "expires", ["0", "315360001", "1.5"]),
]

INJECT = ["..", "%2e%2e", "%2E%2E", "..%2F", "%2F", "%00", "%0A", "%0D", "a%2Fb", "", ".",
          "%2e", "..%2f..%2fbob", "%2e%2e%2fbob", "bob%00", "bob%0D%0Astart"]


def bent(path):
    """Every bent form of a path, with the statuses it may get: each
    segment replaced, and each extra segment inserted after each
    position. One is a real route: a path in the home ending in '/'
    names the directory above, so it may be answered for that
    directory (404, 409), which the snapshot shows touches nothing; and
    a port link's prefix ending in '/' is a link (403: made up)."""
    segs = path.split("/")[1:]
    in_home = "/files/" in path
    # A port link's prefix with its '/' is a link too (refused: its
    # capability is made up, 403).
    link = path.startswith("/p/")
    for i in range(len(segs)):
        for inj in INJECT:
            rep = segs[:i] + [inj] + segs[i + 1:]
            last = (in_home or link) and inj == "" and i == len(segs) - 1
            yield "/" + "/".join(rep), (400, 403, 404, 409) if last else (400,)
            ins = segs[:i + 1] + [inj] + segs[i + 1:]
            yield "/" + "/".join(ins), (400, 403, 404, 409) if last else (400,)


def snapshot():
    """The agents, their files, the tenants, tokens, sessions and policy
    values, and how many audit rows bob has (counted first: the two reads
    here add two rows of their own)."""
    bob_ops = api("GET", "/api/v1/agents/bob/operations?limit=1000")[1]["operations"]
    agents = {a["name"]: (a["state"], a["idle_minutes"]) for a in api("GET", "/api/v1/agents")[1]["agents"]}
    agents["tenants"] = api("GET", "/api/v1/tenants")[1]["tenants"]
    agents["tokens"] = [(t["name"], t["revoked_at"]) for t in api("GET", "/api/v1/tokens")[1]["tokens"]]
    agents["sessions"] = [s["id"] for s in api("GET", "/api/v1/sessions")[1]["sessions"]]
    agents["policy"] = api("GET", "/api/v1/policy")[1]["values"]
    homes = {}
    for n in ("alice", "bob"):
        st, data = ahserver.request(API, "GET", "/api/v1/agents/%s/files/keep/note.txt" % n, token=TOKEN)
        homes[n] = (st, data)
        st, j = api("GET", "/api/v1/agents/%s/files?path=keep" % n)
        homes[n + "/ls"] = sorted(e["name"] for e in j["entries"]) if st == 200 else st
    return agents, homes, len(bob_ops)


def main():
    global TOKEN
    env = ahserver.server_env(DATA, API, TUNNEL)
    log = os.path.join(TMP, "server.log")
    procs, rc = [], 1
    try:
        ahserver.serve(AGENTHOLD, env, log, procs=procs, fail=Fail)
        TOKEN = ahserver.read_token(DATA)
        for n in ("alice", "bob"):
            st, j = api("POST", "/api/v1/agents?wait=1", {"name": n})
            check(st == 201 and j["state"] == "running", "create %s: %d %r" % (n, st, j))
            st, _ = api("POST", "/api/v1/agents/%s/files/keep/sub?op=mkdir&parents=1" % n)
            check(st == 201, "mkdir keep/sub in %s: %d" % (n, st))
            st, _ = ahserver.request(API, "PUT", "/api/v1/agents/%s/files/keep/note.txt" % n,
                                     body=b"original " + n.encode(), token=TOKEN)
            check(st == 200, "plant a file in %s: %d" % (n, st))
        st, _ = api("POST", "/api/v1/tenants", {"name": "acme"})
        check(st == 201, "tenant acme: %d" % st)
        st, _ = api("POST", "/api/v1/tokens", {"tenant": "acme", "name": "acme-token"})
        check(st == 201, "token acme-token: %d" % st)
        check_coverage()
        before = snapshot()
        tried = 0
        for method, path, body in ROUTES:
            base, _, query = path.partition("?")
            for p, allowed in bent(base):
                if p == "/":
                    continue            #  the root is a route of its own
                target = p + ("?" + query if query else "")
                st, data = send(method, target, body)
                tried += 1
                try:
                    err = json.loads(data).get("error", "") if data else ""
                except ValueError:
                    err = None
                check(st in allowed and err, "%s %r: want %r with a JSON error, got %d %r"
                      % (method, target, allowed, st, data[:200]))
        # Hostile query values: control characters and encodings in ?path
        for value in ("keep%0Anote.txt", "keep%0D.old", "keep%00x", "keep/note.txt%2F",
                      "keep//note.txt", "/etc/passwd", "keep/../../x", "keep/./note.txt",
                      "keep/note.txt/", "%", "%zz", ""):
            for method, route in (("GET", "fs/file"), ("DELETE", "fs/file"), ("PUT", "fs/file"),
                                  ("GET", "fs/text")):
                st, data = send(method, "/api/v1/agents/alice/%s?path=%s" % (route, value),
                                b"x" if method == "PUT" else None)
                check(st == 400, "%s %s?path=%s: want 400, got %d %r" % (method, route, value, st, data[:200]))
        # Broken JSON on every route that reads a JSON body.
        for method, path in JSON_ROUTES:
            for body in BROKEN_BODIES:
                st, data = send(method, path, body)
                tried += 1
                try:
                    err = json.loads(data).get("error", "") if data else ""
                except ValueError:
                    err = ""
                if body == b'{"name":"carol\u0000"}' and path.endswith("/exec"):
                    # exec's stdin is bytes, so its body may hold an
                    # escaped NUL: what is wrong here is the field.
                    check(st == 400 and "unknown field 'name'" in err,
                          "%s %s with body %r: want 400 naming the field, got %d %r"
                          % (method, path, body, st, data[:200]))
                    continue
                check(st == 400 and ("JSON" in err or "object" in err or "body" in err),
                      "%s %s with body %r: want 400 naming the body, got %d %r"
                      % (method, path, body[:40], st, data[:200]))
        # Where a NUL is allowed (exec's stdin) it stays out of everything
        # else: the command, its environment, its directory.
        for body in (b'{"cmd":"echo a\u0000b"}', b'{"cmd":"env","env":{"A":"x\u0000"}}',
                     b'{"cmd":"env","env":{"A\u0000":"x"}}', b'{"cmd":"pwd","cwd":"keep\u0000"}'):
            st, data = send("POST", "/api/v1/agents/alice/exec", body)
            tried += 1
            check(st == 400 and b"NUL" in data,
                  "POST exec with body %r: want 400 naming the NUL, got %d %r" % (body, st, data[:200]))
        # Keys no route takes: unknown, empty, doubled, with a control
        # character; on every route that reads a JSON body (DELETE with
        # a body too): a 400 naming the key.
        for method, path in JSON_ROUTES + KEYED_DELETES:
            for body, named in BAD_KEYS:
                st, data = send(method, path, body)
                tried += 1
                err = json.loads(data).get("error", "") if data else ""
                # (a route that takes no body at all refuses any)
                check(st == 400 and (named in err or err == "%s takes no body" % path), "%s %s with body %r: want 400 naming %s, got %d %r"
                      % (method, path, body, named, st, data[:200]))
        # Numbers that would mean "no limit" or fail later, on every route
        # that sets one (the bounds of docs/api.md "Numbers").
        for method, path, field, values in NUMBER_ROUTES:
            # (expires takes a duration string too)
            for value in values + [v for v in NEVER_NUMBERS if field != "expires" or v[0] != '"']:
                body = ('{"name":"carol","%s":%s}' if path == "/api/v1/agents" else '{"%s":%s}') % (field, value)
                st, data = send(method, path, body.encode())
                tried += 1
                err = json.loads(data).get("error", "") if data else ""
                check(st == 400 and ("'%s'" % field) in err and ("from" in err or "must be" in err),
                      "%s %s with %s: want 400 naming '%s' and its range, got %d %r"
                      % (method, path, body, field, st, data[:200]))
        after = snapshot()
        check(before[:2] == after[:2], "nothing changed: %r -> %r" % (before, after))
        check(after[2] == before [2] + 2, "bob's audit trail has no row but the snapshot's own "
              "two reads: %d -> %d" % (before[2], after[2]))
        # Requests that cannot be read at all
        for what, req, want in (
                ("CR in the target", b"GET /api/v1/agents\rX HTTP/1.1\r\n\r\n", 400),
                ("LF in the target", b"GET /api/v1/agents\nX HTTP/1.1\r\n\r\n", 400),
                ("NUL in the target", b"GET /api/v1/ag\x00ents HTTP/1.1\r\n\r\n", 400),
                ("TAB in the target", b"GET /api/v1/\tagents HTTP/1.1\r\n\r\n", 400),
                ("bare LF", b"GET /healthz HTTP/1.1\nHost: x\n\n", 400),
                ("long target", b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\n\r\n", 414),
                ("huge head", b"GET /healthz HTTP/1.1\r\nX: " + b"v" * 20000 + b"\r\n\r\n", 431),
                ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505)):
            st, closed = closed_after(req)
            check(st == want and closed, "%s: want %d and the connection closed, got %d (closed: %s)"
                  % (what, want, st, closed))
        st, _ = ahserver.request(API, "GET", "/healthz")
        check(st == 200, "still serving")
        print("hostile_urls: %d bent URLs, %d checks passed" % (tried, check.count))
        rc = 0
    except Fail as e:
        print("hostile_urls: FAILED after %d checks: %s" % (check.count, e), file=sys.stderr)
        print(ahserver.log_tail(log, 4000), file=sys.stderr)
    finally:
        ahserver.stop_all(procs, 20)
        for why in ahserver.verdict(procs):
            print("hostile_urls: FAILED: %s" % why, file=sys.stderr)
            rc = 1
        shutil.rmtree(TMP, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
