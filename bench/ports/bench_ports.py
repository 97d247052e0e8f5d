#!/usr/bin/python3
"""bench/ports/bench_ports.py: a sandbox's web server through the server's
port proxy (issue 30, docs/ports.md) against the same server reached
directly, on the real server as a user runs it: the Docker driver, the
shipped catalog's default runtime (debian, a networked runtime on a bridge
of its own) and the real static sandboxd.

The agent runs `python3 -m http.server` on every address of its
container, serving a 1 KiB file and a file of --mib MiB. Two figures,
each against the direct path of the same run, blocks interleaved (which
goes first alternates):

- request latency: a GET of the 1 KiB file on a new connection, through a
  port link (`/p/{agent}/8000/{capability}/small.bin`: API, the tunnel,
  sandboxd's port channel, the sandbox's loopback) against the same GET
  sent straight to a container's address on a plain bridge network (the
  same image, the same memory, the same `python3 -m http.server` and files
  of the same sizes, in a container and network of the bench's own: the
  agent's own bridge takes no connection from the host, agenthold's host
  firewall); goal: median <= 1.2x.
- throughput: the large file downloaded (sha256 checked against the one
  sha256sum gives inside the sandbox) the same two ways; goal: >= 0.8x.

usage: bench_ports.py [--report] [--samples N] [--mib M] [--rounds R] AGENTHOLD_BINARY
Exits 77 without a Docker Engine, 3 when a figure misses its goal by more
than the noise bound (bench/README.md), 0 with --report whatever the
figures. Pools 10.214.140.0/22 (ours) and 10.214.144.0/28 (the bare
bridge); removes what it made, even on failure."""
import argparse
import hashlib
import http.client
import os
import statistics
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "docker"))
sys.path.insert(0, os.path.join(HERE, "..", "docker"))
from ahdocker import Harness, Fail, engine, exec_in  # noqa: E402
from bench_docker import verdict  # noqa: E402
import ahserver  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--report", action="store_true", help="print the verdicts, exit 0 on a miss")
ap.add_argument("--samples", type=int, default=200, help="latency samples each way")
ap.add_argument("--mib", type=int, default=100, help="the large file's size")
ap.add_argument("--rounds", type=int, default=3, help="downloads each way")
ap.add_argument("binary")
args = ap.parse_args()

MiB = 1 << 20
h = Harness("bench.ports", args.binary, "10.214.140.0/22", shipped_catalog=True)
for key in ("AGENTHOLD_SANDBOX_DEFAULT_IMAGE", "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB"):
    h.env.pop(key, None)


def get(host, port, path, want_len=None):
    """(seconds to the whole answer, sha256 hex, length) of one GET on a new connection."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection(host, port, timeout=300)
    try:
        c.request("GET", path)
        r = c.getresponse()
        digest, n = hashlib.sha256(), 0
        while True:
            block = r.read(MiB)
            if not block:
                break
            digest.update(block)
            n += len(block)
        took = time.monotonic() - t0
        if r.status != 200 or (want_len is not None and n != want_len):
            raise Fail("GET %s:%d%s: %d, %d bytes" % (host, port, path, r.status, n))
        return took, digest.hexdigest(), n
    finally:
        c.close()


def scenario(h):
    h.start_server()
    rc, out, err = h.run_cli("create", "site", "--json", timeout=900)
    if rc != 0:
        raise Fail("create site: %s" % err)
    st, a = h.api("GET", "/api/v1/agents/site")
    st, r = h.api("POST", "/api/v1/agents/site/exec", {"cmd": " && ".join([
        "mkdir -p www", "cd www", "head -c 1024 /dev/urandom > small.bin",
        "head -c %d /dev/urandom > big.bin" % (args.mib * MiB), "sha256sum big.bin",
        "(setsid nohup python3 -m http.server 8000 >/dev/null 2>&1 < /dev/null &)"]), "timeout": 120},
        timeout=180)
    if st != 200 or r["status"] != 0:
        raise Fail("the agent's web server: %d %r" % (st, r))
    want = r["stdout"].split()[0]

    def listening():
        st, j = h.api("GET", "/api/v1/agents/site/ports")
        return st == 200 and 8000 in [p["port"] for p in j["ports"]]
    ahserver.wait_until(listening, 30, "port 8000 listening", Fail, 0.2)
    st, link = h.api("POST", "/api/v1/agents/site/ports/8000/link", {"expires": 3600})
    if st != 201:
        raise Fail("link: %d %r" % (st, link))
    path = link["path"]
    info = h.container(a["id"])
    # The bare side: the same image and server on a plain bridge.
    net = "%s-bare" % h.prefix
    st, _ = engine("POST", "/networks/create", {"Name": net, "Driver": "bridge", "CheckDuplicate": True,
                                                "IPAM": {"Config": [{"Subnet": "10.214.144.0/28"}]}})
    if st != 201:
        raise Fail("bare network: %d" % st)
    st, c = engine("POST", "/containers/create?name=%s-bare" % h.prefix, {
        "Image": info["Config"]["Image"], "WorkingDir": "/srv",
        "Entrypoint": ["/bin/sh", "-c", "head -c 1024 /dev/urandom > small.bin && head -c %d /dev/urandom > big.bin"
                       " && touch ready && exec python3 -m http.server 8000" % (args.mib * MiB)],
        "Cmd": [], "HostConfig": {"Init": True, "Memory": info["HostConfig"]["Memory"], "NetworkMode": net}})
    if st != 201:
        engine("DELETE", "/networks/%s" % net)
        raise Fail("bare container: %d %r" % (st, c))
    bare_id = c["Id"]
    h.cleanups.append(lambda: engine("DELETE", "/containers/%s?force=true" % bare_id))
    h.cleanups.append(lambda: engine("DELETE", "/networks/%s" % net))      # once the container is gone
    if engine("POST", "/containers/%s/start" % bare_id)[0] != 204:
        raise Fail("bare start")
    st, j = engine("GET", "/containers/%s/json" % bare_id)
    direct = j["NetworkSettings"]["Networks"][net]["IPAddress"]
    ahserver.wait_until(lambda: "ready" in exec_in(bare_id, ["ls", "/srv"]), 60, "the bare files made", Fail, 0.2)
    want_bare = exec_in(bare_id, ["sha256sum", "/srv/big.bin"]).split()[0]
    time.sleep(1.0)                     # its http.server listening
    ours = lambda p: get("127.0.0.1", h.port(), path + p)      # noqa: E731
    
    bare = lambda p: get(direct, 8000, "/" + p)                 # noqa: E731
    # Warm-up, untimed.
    for _ in range(5):
        ours("small.bin")
        bare("small.bin")

    lat_ours, lat_bare = [], []
    block = 20
    for b in range(0, args.samples, block):
        sides = [(ours, lat_ours), (bare, lat_bare)]
        if (b // block) % 2:
            sides.reverse()
        for fn, out in sides:
            for _ in range(block):
                out.append(fn("small.bin")[0])
    tput_ours, tput_bare = [], []
    for i in range(args.rounds):
        sides = [(ours, tput_ours), (bare, tput_bare)]
        if i % 2:
            sides.reverse()
        for fn, out in sides:
            took, digest, n = fn("big.bin")
            if digest != (want if fn is ours else want_bare) or n != args.mib * MiB:
                raise Fail("the large file came back different: %s %d (want %s)" % (digest, n, want))
            out.append(n / MiB / took)
        print("round %d: through the link %.0f MiB/s, direct %.0f MiB/s" % (i + 1, tput_ours[-1], tput_bare[-1]),
              flush=True)

    lo, lb = statistics.median(lat_ours), statistics.median(lat_bare)
    to, tb = statistics.median(tput_ours), statistics.median(tput_bare)
    r1, r2 = lo / lb, to / tb
    print("\nbench/ports: %d latency samples each way, %d downloads of %d MiB each way, runtime %s"
          % (len(lat_ours), args.rounds, args.mib, a.get("image")))
    print("  GET 1 KiB, new connection: through the link median %.2f ms (p99 %.2f), direct %.2f ms (p99 %.2f)"
          % (lo * 1e3, sorted(lat_ours)[int(len(lat_ours) * 0.99) - 1] * 1e3,
             lb * 1e3, sorted(lat_bare)[int(len(lat_bare) * 0.99) - 1] * 1e3))
    print("  download %d MiB: through the link %.0f MiB/s, direct %.0f MiB/s (medians)" % (args.mib, to, tb))
    missed = False
    v1 = verdict(r1, 1.2)
    # throughput: at least 0.8x (verdict() judges at-most goals: invert)
    v2 = verdict(0.8 / r2, 1.0) if r2 > 0 else "MISSED"
    for name, shown, goal, v in (("request latency, link / direct (median)", "%.2fx" % r1, "<= 1.2", v1),
                                 ("download throughput, link / direct (median)", "%.2fx" % r2, ">= 0.8", v2)):
        missed |= v == "MISSED"
        print("  %-48s %-8s goal %s: %s" % (name, shown, goal, v))
    rc, _, err = h.run_cli("rm", "site", timeout=120)
    if rc != 0:
        raise Fail("rm site: %s" % err)
    h.scenario_missed = missed


h.scenario_missed = False
rc = h.run(scenario)
if rc == 0 and h.scenario_missed and not args.report:
    rc = 3
sys.exit(rc)
