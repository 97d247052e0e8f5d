#!/usr/bin/python3
"""tests/docker/egress_docker.py: the server is the only way out
(docs/egress.md) on the Docker driver, with the real server and the real
static sandboxd: with sandbox.docker.egress tunnel (the default), a sandbox of a runtime
that needs_network gets no network (NetworkMode none, no agent network,
no route), its sandboxd runs the egress proxy on 127.0.0.1:3128 and what
it runs is pointed at it; through the proxy each request is decided by
lua/egress.lua (a refusal read as 403 with the rule's sentence), and
what the rule allows is resolved by the server, each address checked
(loopback, private, metadata... refused) and carried: busybox wget and a
CONNECT through nc reach an HTTP upstream of the test's own on the host
(127.0.0.2) once the tenant's list names its address and port, the
dangerous switch; nothing else. Malformed requests are answered 400 by
the proxy; a direct connection has no route; every attempt is in the
audit trail, a carried one with its address, bytes and duration; a
tenant's list changed while the sandbox runs applies to the next
connection; GET /metrics counts the tenant's egress (nine denied, two
allowed, the bytes each way of the two ends).

The runtime is the Docker tests' busybox image marked needs_network (the
shipped debian runtime's image needs a Debian build; docs/egress.md).
No address outside the machine is ever reached: the only upstream is
the test's own on 127.0.0.2, and no name but localhost (/etc/hosts) is
ever resolved.

usage: egress_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine. Pool 10.213.232.0/22, prefix from the
harness; everything it made is removed, even on failure."""
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import Harness, engine  # noqa: E402
import ahserver  # noqa: E402  (tests/lib, on the path once ahdocker is in)

h = Harness("docker.egress", sys.argv[1], "10.213.232.0/22", needs_network=True)
# sandbox.docker.egress is left to its default, tunnel.
h.env.pop("AGENTHOLD_SANDBOX_DOCKER_EGRESS", None)


def run_in(h, name, cmd):
    """A shell command in the sandbox through sandboxd (what an agent runs)."""
    rc, out, err = h.run_cli("exec", name, "--timeout", "20", "--", "sh", "-c", cmd)
    return rc, out + err


def ask(h, name, request):
    """One request to the proxy from inside; its answer as the client read it."""
    return run_in(h, name, "printf '%s' | nc 127.0.0.1 3128" % request.replace("\r\n", "\\r\\n"))[1]


class Upstream(http.server.BaseHTTPRequestHandler):
    """The test's own upstream: every request answered with a line that
    names the path it was asked for."""
    protocol_version = "HTTP/1.0"
    seen = []

    def do_GET(self):
        Upstream.seen.append(self.path)
        body = ("hello from the upstream: %s\n" % self.path).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def scenario(h):
    # On 127.0.0.2: inside the sandbox NO_PROXY names 127.0.0.1, so a
    # client would not ask the proxy for it.
    up = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Upstream)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    upt = "127.0.0.2:%d" % up.server_address[1]
    try:
        carried(h, upt)
    finally:
        up.shutdown()
        up.server_close()


def carried(h, upt):
    h.start_server()
    a = h.cli("create", "alice")
    h.check(a["state"] == "running", "create -> running: %r" % a["state"])
    aid = a["id"]
    c = h.container(aid)
    st, _ = engine("GET", "/networks/%s-net-%s" % (h.prefix, aid))
    h.check(st == 404 and c["HostConfig"]["NetworkMode"] == "none",
            "a networked runtime gets no network: %d %r" % (st, c["HostConfig"]["NetworkMode"]))
    h.check("AGENTHOLD_EGRESS_PORT=3128" in c["Config"]["Env"], "sandboxd told the proxy's port: %r"
            % c["Config"]["Env"])

    rc, out = run_in(h, "alice", "env | sort; ip route; ip addr")
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        h.check("%s=http://127.0.0.1:3128" % var in out, "%s points at the proxy" % var)
    h.check("NO_PROXY=localhost,127.0.0.1" in out and "no_proxy=localhost,127.0.0.1" in out, "NO_PROXY")
    h.check("AGENTHOLD_EGRESS_PORT" not in out, "the server's variable is not the agent's")
    h.check("default" not in out and "eth0" not in out, "no route, no interface but lo: %r" % out)

    # A direct connection, bypassing the proxy: no route at all.
    rc, out = run_in(h, "alice", "echo x | nc -w 2 10.213.232.1 80; echo x | nc -w 2 1.1.1.1 443; echo rc=$?")
    h.check(out.lower().count("unreachable") >= 2, "both say Network is unreachable: %r" % out)

    # Through the proxy: decided by the rule, refused with its sentence.
    out = ask(h, "alice", "CONNECT deb.debian.org:443 HTTP/1.1\r\n\r\n")
    h.check(out.startswith("HTTP/1.1 403 ") and "is on neither runtime 'testimage''s egress list nor tenant "
            "'default''s allow list" in out, "a name on no list: %r" % out)
    out = ask(h, "alice", "CONNECT 10.1.2.3:22 HTTP/1.1\r\n\r\n")
    h.check(out.startswith("HTTP/1.1 403 ") and "10.1.2.3:22" in out, "a raw private address: %r" % out)
    out = ask(h, "alice", "CONNECT 127.0.0.1:8090 HTTP/1.1\r\n\r\n")
    h.check(out.startswith("HTTP/1.1 403 ") and "127.0.0.1:8090" in out, "the loopback: %r" % out)
    out = ask(h, "alice", "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: x\r\n\r\n")
    h.check(out.startswith("HTTP/1.1 403 "), "the metadata address: %r" % out)
    # Malformed: answered by the proxy itself.
    out = ask(h, "alice", "CONNECT nohost HTTP/1.1\r\n\r\n")
    h.check(out.startswith("HTTP/1.1 400 ") and "host:port" in out, "CONNECT without a port: %r" % out)
    out = ask(h, "alice", "CONNECT 0x7f.1:80 HTTP/1.1\r\n\r\n")
    h.check(out.startswith("HTTP/1.1 400 "), "a numeric-looking host: %r" % out)
    # busybox wget honours http_proxy and reports the refusal.
    rc, out = run_in(h, "alice", "wget -q -O- http://example.org/ 2>&1; echo rc=$?")
    h.check("403" in out and "rc=1" in out, "wget through the proxy is refused: %r" % out)

    # The tenant's list, changed while the sandbox runs: the next
    # connection. An allow entry lets localhost through the rule; what
    # it resolves to (127.0.0.1) is refused by the address check.
    st, t = h.api("PATCH", "/api/v1/tenants/default", {"egress_allow": ["localhost"]})
    h.check(st == 200 and t["egress_allow"] == ["localhost"], "PATCH the tenant's list: %d %r" % (st, t))
    out = ask(h, "alice", "CONNECT localhost:8090 HTTP/1.1\r\n\r\n")
    h.check(out.startswith("HTTP/1.1 403 ") and "localhost resolves to " in out and ": loopback, refused" in out,
            "a name that resolves to the loopback: %r" % out)
    rc, out, err = h.run_cli("tenant", "set", "default", "--egress-deny", "localhost")
    h.check(rc == 0, "CLI tenant set --egress-deny: %r" % err)
    out = ask(h, "alice", "CONNECT localhost:8090 HTTP/1.1\r\n\r\n")
    h.check("deny list (entry 'localhost')" in out, "the deny entry wins at once: %r" % out)

    # The dangerous switch: an entry naming the upstream's address and
    # port opens it, and only it.
    st, t = h.api("PATCH", "/api/v1/tenants/default", {"egress_allow": [upt], "egress_deny": []})
    h.check(st == 200 and t["egress_allow"] == [upt], "PATCH: the upstream's address: %d %r" % (st, t))
    rc, out = run_in(h, "alice", "wget -q -O- http://%s/hello 2>&1; echo rc=$?" % upt)
    h.check("hello from the upstream: http://%s/hello" % upt in out and "rc=0" in out,
            "wget through the proxy reaches the upstream: %r" % out)
    out = ask(h, "alice", "CONNECT %s HTTP/1.1\r\n\r\nGET /tunnelled HTTP/1.0\r\n\r\n" % upt)
    h.check(out.startswith("HTTP/1.1 200 Connection established") and
            "hello from the upstream: /tunnelled" in out, "CONNECT carries the bytes both ways: %r" % out)
    h.check(Upstream.seen == ["http://%s/hello" % upt, "/tunnelled"], "the upstream saw both: %r" % Upstream.seen)
    # Anything else stays refused, each with its reason.
    other = "127.0.0.2:%d" % (int(upt.split(":")[1]) ^ 1)
    out = ask(h, "alice", "CONNECT %s HTTP/1.1\r\n\r\n" % other)
    h.check(out.startswith("HTTP/1.1 403 ") and "is on neither runtime" in out, "another port: %r" % out)
    out = ask(h, "alice", "CONNECT 10.1.2.3:22 HTTP/1.1\r\n\r\n")
    h.check(out.startswith("HTTP/1.1 403 "), "still a raw private address: %r" % out)

    # The audit trail has every attempt that reached the server.
    st, j = h.api("GET", "/api/v1/agents/alice/operations?operation=egress&limit=100")
    rows = j["operations"] if st == 200 else []
    details = [r["detail"] for r in rows]
    for want in ("deb.debian.org:443 (connect)", "10.1.2.3:22 (connect)", "127.0.0.1:8090 (connect)",
                 "169.254.169.254:80 (http)", "example.org:80 (http)", "localhost:8090 (connect)",
                 "%s (connect)" % other):
        h.check(want in details, "the audit has %s: %r" % (want, details))
    h.check(any(d.startswith("localhost:8090 (connect) to ") for d in details),
            "the audit has the address localhost resolved to: %r" % details)
    refused = [r for r in rows if not r["ok"]]
    h.check(all(r["error"] and r["agent_id"] == aid for r in refused), "each refusal with its reason")
    h.check(len(refused) == 9, "nine refused attempts reached the server (the malformed two did not): %d"
            % len(refused))
    ok = [r["detail"] for r in rows if r["ok"]]
    h.check(sorted(ok) == sorted(["%s (http) to %s: allowed by tenant 'default''s allow list (entry '%s')"
                                  % (upt, upt, upt),
                                  "%s (connect) to %s: allowed by tenant 'default''s allow list (entry '%s')"
                                  % (upt, upt, upt)]), "the two carried, with address and rule: %r" % ok)
    st, j = h.api("GET", "/api/v1/agents/alice/operations?operation=egress.end&limit=100")
    ends = j["operations"] if st == 200 else []
    h.check(len(ends) == 2 and all(r["ok"] and r["bytes"] > 0 and " bytes out, " in r["detail"]
                                   and " ms" in r["detail"] for r in ends),
            "each carried one's end: bytes each way, duration: %r" % ends)

    # GET /metrics (admin token): the tenant's counts, to the connection
    # and to the byte. Nine denied, two allowed, none failed; the bytes
    # are the two ends' bytes each way, and the CONNECT's out is exactly
    # the 27 bytes of its request after the proxy's 200.
    outs, ins = [], []
    for r in ends:
        m = re.search(r": (\d+) bytes out, (\d+) bytes in, ", r["detail"])
        outs.append(int(m.group(1)) if m else -1)
        ins.append(int(m.group(2)) if m else -1)
        if m and r["detail"].startswith("%s (connect)" % upt):
            h.check(int(m.group(1)) == len("GET /tunnelled HTTP/1.0\r\n\r\n"),
                    "the CONNECT's bytes out are its request's: %r" % r["detail"])
    st, text = ahserver.request(h.port(), "GET", "/metrics", None, h.token())
    text = text.decode() if isinstance(text, bytes) else ""
    h.check(st == 200, "GET /metrics: %d" % st)
    want = {
        'agenthold_egress_connections_total{tenant="default",verdict="allowed"}': 2,
        'agenthold_egress_connections_total{tenant="default",verdict="denied"}': 9,
        'agenthold_egress_connections_total{tenant="default",verdict="failed"}': 0,
        'agenthold_egress_bytes_total{tenant="default",direction="out"}': sum(outs),
        'agenthold_egress_bytes_total{tenant="default",direction="in"}': sum(ins),
    }
    got = {}
    for line in text.splitlines():
        if line.startswith("agenthold_egress_"):
            name, _, value = line.rpartition(" ")
            got[name] = int(value)
    h.check(got == want and min(outs + ins) > 0, "the egress metrics: %r, want %r" % (got, want))
    # With their samples, the exposition still passes promtool.
    promtool = shutil.which("promtool")
    h.check(promtool is not None, "promtool is installed (scripts/install-deps: Debian's prometheus)")
    if promtool:
        p = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True)
        h.check(p.returncode == 0, "promtool check metrics: %r" % (p.stdout + p.stderr))

    h.check(h.cli("rm", "alice")["state"] == "destroyed", "rm -> destroyed")
    h.finish()


sys.exit(h.run(scenario))
