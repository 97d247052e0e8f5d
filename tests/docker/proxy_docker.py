#!/usr/bin/python3
"""tests/docker/proxy_docker.py (docker.proxy): a sandbox's web server
through the server (docs/ports.md) on the Docker driver with the shipped
catalog's default runtime (debian): the agent runs `python3 -m
http.server` on its loopback, where nothing outside its container reaches
it, and the server serves it through a port link.

  - GET / through a link: the directory listing of python's http.server
  - 100 MiB made in the sandbox, downloaded through the link, its sha256
    the one sha256sum gives inside the sandbox
  - GET .../ports lists port 8000; the token form (/t/) answers with the
    tenant's token and 404s another tenant's
  - the port is not published: the container has no port binding
  - a link to a port where nothing listens: 502 naming the port

usage: proxy_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine."""
import hashlib
import http.client
import sys
import os
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import Harness  # noqa: E402
import ahserver  # noqa: E402

h = Harness("docker.proxy", sys.argv[1], "10.213.52.0/22", shipped_catalog=True)
NAME = "site"
MiB = 1 << 20


def get(path, headers=None):
    """(status, sha256 of the body, its length, the first 300 bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", h.port(), timeout=300)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        digest, n, head = hashlib.sha256(), 0, b""
        while True:
            block = r.read(MiB)
            if not block:
                break
            digest.update(block)
            if len(head) < 300:
                head += block[:300 - len(head)]
            n += len(block)
        return r.status, digest.hexdigest(), n, head
    finally:
        c.close()


def scenario(h):
    h.start_server()
    a = h.cli("create", NAME, timeout=900)
    h.check(a["state"] == "running", "create -> running: %r" % a)
    st, r = h.api("POST", "/api/v1/agents/%s/exec" % NAME, {"cmd": " && ".join([
        "mkdir -p www", "cd www", "echo '<h1>hi</h1>' > hello.html",
        "head -c %d /dev/urandom > big.bin" % (100 * MiB), "sha256sum big.bin",
        "(setsid nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 < /dev/null &)",
        ]), "timeout": 120}, timeout=180)
    h.check(st == 200 and r["status"] == 0, "the agent started its web server: %d %r" % (st, r))
    want = r["stdout"].split()[0]

    def listening():
        st, j = h.api("GET", "/api/v1/agents/%s/ports" % NAME)
        return st == 200 and 8000 in [p["port"] for p in j["ports"]]
    ahserver.wait_until(listening, 30, "port 8000 listed as listening", h.fail, 0.2)

    st, link = h.api("POST", "/api/v1/agents/%s/ports/8000/link" % NAME, {"expires": 600})
    h.check(st == 201, "a link: %d %r" % (st, link))
    path = link["path"]
    st, _, _, head = get(path)
    h.check(st == 200 and b"hello.html" in head, "GET / through the link: %d %r" % (st, head))
    st, _, _, head = get(path + "hello.html")
    h.check(st == 200 and head == b"<h1>hi</h1>\n", "a file through the link: %d %r" % (st, head))
    t0 = time.time()
    st, digest, n, _ = get(path + "big.bin")
    took = time.time() - t0
    h.check(st == 200 and n == 100 * MiB and digest == want,
            "100 MiB through the link, whole: %d, %d bytes, sha256 %s (want %s)" % (st, n, digest, want))
    print("100 MiB through the link in %.2f s" % took)

    tpath = "/p/%s/8000/t/hello.html" % a["id"]
    st, _, _, head = get(tpath, {"Authorization": "Bearer " + h.token()})
    h.check(st == 200 and head == b"<h1>hi</h1>\n", "the token form: %d %r" % (st, head))
    st, tenant = h.api("POST", "/api/v1/tenants", {"name": "othercorp"})
    st, tok = h.api("POST", "/api/v1/tokens", {"tenant": "othercorp"})
    st, _, _, head = get(tpath, {"Authorization": "Bearer " + tok["token"]})
    h.check(st == 404, "another tenant's token: 404, got %d %r" % (st, head))

    c = h.container(a["id"])
    h.check(c is not None and not (c["HostConfig"].get("PortBindings") or {}) and not c["NetworkSettings"]["Ports"],
            "nothing of the sandbox is published on the host: %r / %r"
            % (c["HostConfig"].get("PortBindings"), c["NetworkSettings"]["Ports"]))

    st, dead = h.api("POST", "/api/v1/agents/%s/ports/8001/link" % NAME, {})
    st, _, _, head = get(dead["path"])
    h.check(st == 502 and b"8001" in head, "nothing listens on 8001: 502 naming it, got %d %r" % (st, head))
    h.check(h.cli("rm", NAME)["state"] == "destroyed", "rm")


sys.exit(h.run(scenario))
