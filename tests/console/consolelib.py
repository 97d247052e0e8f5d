"""tests/console/consolelib.py: what the console's tests share: one real
`agenthold serve` (fake driver, the shipped configuration and lua/) on a
port of ahserver.free_port, its admin token, tenants and their tokens, and calls
with a bearer token."""
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import ahserver  # noqa: E402

SRC = os.path.abspath(os.path.join(HERE, "..", ".."))


class Fail(Exception):
    pass


_checks = [0]


def check(cond, what):
    """One assertion: counted, and Fail(what) when cond is false."""
    _checks[0] += 1
    if not cond:
        raise Fail(what)


def checks():
    return _checks[0]


class Server:
    def __init__(self, binary, prefix):
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.log = os.path.join(self.tmp, "server.log")
        self.data = os.path.join(self.tmp, "data")
        self.port = ahserver.free_port(fail=Fail)
        tunnel = ahserver.free_port(avoid={self.port}, fail=Fail)
        self.env = ahserver.server_env(self.data, self.port, tunnel)
        self.binary = binary
        self.procs = []
        self.proc = None

    def start(self):
        self.proc = ahserver.serve(self.binary, self.env, self.log, cwd=SRC, procs=self.procs, fail=Fail)
        self.admin = ahserver.read_token(self.data)

    def url(self, path=""):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def call(self, method, path, tok=None, body=None, headers=None):
        status, raw = ahserver.request(self.port, method, path, body, tok, headers)
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw

    def ok(self, method, path, tok, body=None):
        status, answer = self.call(method, path, tok, body)
        if status not in (200, 201, 202):
            raise Fail("%s %s: %d %s" % (method, path, status, answer))
        return answer

    def tenant_token(self, tenant):
        """A tenant (made if absent) and a fresh token acting for it."""
        status, _ = self.call("POST", "/api/v1/tenants", self.admin, {"name": tenant})
        if status not in (201, 409):
            raise Fail("creating tenant %s: %d" % (tenant, status))
        return self.ok("POST", "/api/v1/tokens", self.admin, {"tenant": tenant})["token"]

    def agent(self, name, tok, tenant=None):
        path = "/api/v1/agents?wait=1" + ("&tenant=" + tenant if tenant else "")
        a = self.ok("POST", path, tok, {"name": name})
        if a["state"] != "running":
            raise Fail("agent %s is %s, not running: %s" % (name, a["state"], a.get("error")))
        return a

    def run(self, main):
        """main(), then the clean-up whatever happened; the exit status.
        A server that died on the way is said first (its status)."""
        def checked():
            try:
                main()
            finally:
                if self.proc is not None and self.proc.poll() is not None:
                    print("FAIL: the server exited with status %d during the test" % self.proc.returncode,
                          file=sys.stderr)
        return ahserver.run(checked, Fail, self.procs, self.tmp, self.log)


def wait(cond, what, seconds=20, step=0.1):
    """ahserver.wait_until, what (a string or a function giving one) said
    only when it fails."""
    value = ahserver.wait_until(cond, seconds, "", None, step)
    if value:
        return value
    raise Fail("waited %d s for %s" % (seconds, what() if callable(what) else what))


async def ws_refused(uri, headers=None):
    """The status a WebSocket open gets: 101 when it opened (then closed)."""
    import websockets
    try:
        async with websockets.connect(uri, open_timeout=30, extra_headers=headers or {}):
            return 101
    except websockets.exceptions.InvalidStatusCode as e:
        return e.status_code
