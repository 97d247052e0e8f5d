#!/usr/bin/python3
"""tests/remote/netthread_e2e.py: the server's network thread does not wait
on a slow host agent (issue 25). No Docker Engine: hostd reads a home
that is a plain directory under its data directory.

- The agent is made and put to sleep with the fake driver, then the
  server is started again with the remote driver and a local
  `agenthold hostd` whose HOSTD_HOME answers are each delayed on purpose
  (AH_TEST_HOSTD_HOME_DELAY_MS, a test-only knob of hostd).
- One client downloads a file of SIZE_MIB (default 32 MiB: 128 pieces of
  256 KiB, each delayed DELAY_MS = 100 ms, about 13 s; AH_TEST_NETTHREAD_MIB
  sets another size, 100 for the issue's) from the sleeping agent's home
  through hostd, checked byte for byte.
- Meanwhile another client makes HTTP round trips (GET /healthz on one
  keep-alive connection) to the same thread that serves the API and the
  tunnel: the 95th percentile must stay within P95_MS (10 ms) and the
  worst within MAX_MS (100 ms, one delayed answer: room for a loaded
  machine's scheduling; a network thread that waits is at 200 ms). A network
  thread that waited on hostd would hold each round trip that arrives
  during a read for up to the whole delay.

usage: netthread_e2e.py AGENTHOLD_BINARY"""
import hashlib
import http.client
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahserver  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="ah-netthread-")
DATA = os.path.join(TMP, "data")
LOG = os.path.join(TMP, "server.log")
HOSTD_LOG = os.path.join(TMP, "hostd.log")
SIZE_MIB = int(os.environ.get("AH_TEST_NETTHREAD_MIB", "32"))
DELAY_MS = 100
P95_MS = 10.0
MAX_MS = 100.0
procs = []


class Fail(Exception):
    pass


check = ahserver.Checks(Fail)
API_PORT = ahserver.free_port(fail=Fail)
TUNNEL_PORT = ahserver.free_port(avoid={API_PORT}, fail=Fail)
HOSTD = "ipc://%s/hostd.sock" % TMP
REMOTE = {"AGENTHOLD_HOSTD_ENDPOINT": HOSTD, "AGENTHOLD_SANDBOX_REMOTE_ENDPOINT": HOSTD,
          "AGENTHOLD_SANDBOX_DOCKER_SOCKET": os.path.join(TMP, "no-docker.sock")}


def token():
    return ahserver.read_token(DATA)


def api(method, path, body=None, expect=200, timeout=60):
    return ahserver.call_json(API_PORT, token(), method, path, body, expect, check, timeout)


def start_server(driver):
    env = ahserver.server_env(DATA, API_PORT, TUNNEL_PORT, driver=driver, extra=REMOTE)
    server = subprocess.Popen([BIN, "serve"], env=env, cwd=TMP, stdout=open(LOG, "a"),
                              stderr=subprocess.STDOUT)
    procs.append(server)
    ahserver.wait_healthy(server, API_PORT, fail=Fail)
    return server


def stop(p):
    p.terminate()
    p.wait(20)


def pattern_file(path, mib):
    """A file of mib MiB whose every MiB differs; its sha256."""
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for i in range(mib):
            block = (i.to_bytes(4, "little") + bytes(range(252))) * 4096
            f.write(block)
            h.update(block)
    return h.hexdigest()


def main():
    # The agent, made and put to sleep where no host agent is needed.
    server = start_server("fake")
    _, a = api("POST", "/api/v1/agents?wait=1", {"name": "big"}, expect=None, timeout=120)
    check(a and a.get("id"), "create: %r" % (a,))
    api("POST", "/api/v1/agents/big/stop?wait=1", expect=None, timeout=120)
    check(api("GET", "/api/v1/agents/big")[1]["state"] == "sleeping", "big sleeps")
    stop(server)

    env = ahserver.server_env(DATA, API_PORT, TUNNEL_PORT, driver="remote", extra=REMOTE)
    env["AH_TEST_HOSTD_HOME_DELAY_MS"] = str(DELAY_MS)
    hostd = subprocess.Popen([BIN, "hostd"], env=env, cwd=TMP, stdout=open(HOSTD_LOG, "a"),
                             stderr=subprocess.STDOUT)
    procs.append(hostd)
    deadline = time.monotonic() + 20
    while not os.path.exists(HOSTD[len("ipc://"):]):
        check(hostd.poll() is None and time.monotonic() < deadline,
              "hostd serves: %s" % open(HOSTD_LOG).read()[-2000:])
        time.sleep(0.05)

    # The agent's home where hostd keeps homes (<data>-hostd/homes/<id>).
    home = os.path.join(DATA + "-hostd", "homes", a["id"])
    os.makedirs(home, mode=0o755)
    digest = pattern_file(os.path.join(home, "big.bin"), SIZE_MIB)

    start_server("remote")
    check(api("GET", "/api/v1/agents/big")[1]["state"] == "sleeping", "big still sleeps")
    t0 = time.monotonic()
    _, listing = api("GET", "/api/v1/agents/big/files?path=.", timeout=30)
    check([e["name"] for e in listing["entries"]] == ["big.bin"],
          "hostd lists the home: %r" % listing)
    check(time.monotonic() - t0 >= DELAY_MS / 1000.0, "hostd's answer was delayed")

    # The download, in a thread of its own.
    got = {}

    def download():
        status, sha, size = ahserver.download(API_PORT, "/api/v1/agents/big/files/big.bin", token())
        got.update(status=status, size=size, sha=sha)

    t = threading.Thread(target=download)
    started = time.monotonic()
    t.start()
    time.sleep(0.2)                         # the first piece is asked for
    probe = http.client.HTTPConnection("127.0.0.1", API_PORT, timeout=30)
    lat = []
    while t.is_alive():
        s = time.monotonic()
        probe.request("GET", "/healthz")
        r = probe.getresponse()
        r.read()
        lat.append((time.monotonic() - s) * 1000.0)
        check(r.status == 200, "healthz during the download: %d" % r.status)
        time.sleep(0.005)
    t.join()
    took = time.monotonic() - started
    probe.close()

    check(got.get("status") == 200 and got.get("size") == SIZE_MIB << 20 and got.get("sha") == digest,
          "the download through hostd whole: %r" % got)
    lat.sort()
    p95 = lat[int(len(lat) * 0.95)] if lat else 0
    print("%d MiB through hostd (%d ms per answer) in %.1f s; %d round trips meanwhile: "
          "median %.2f ms, p95 %.2f ms, max %.2f ms"
          % (SIZE_MIB, DELAY_MS, took, len(lat), lat[len(lat) // 2], p95, lat[-1]))
    check(len(lat) >= 20, "enough round trips during the download: %d" % len(lat))
    check(p95 <= P95_MS, "the 95th percentile round trip during the download is %.1f ms (bound %.0f ms)"
          % (p95, P95_MS))
    check(lat[-1] <= MAX_MS, "the worst round trip during the download is %.1f ms (bound %.0f ms)"
          % (lat[-1], MAX_MS))
    check(api("GET", "/api/v1/agents/big")[1]["state"] == "sleeping", "reading did not wake it")

    # Clients that leave in the middle (a piece being read for them):
    # the server goes on serving, and the next download is whole.
    for _ in range(3):
        c = http.client.HTTPConnection("127.0.0.1", API_PORT, timeout=30)
        c.request("GET", "/api/v1/agents/big/files/big.bin",
                  headers={"Authorization": "Bearer " + token()})
        r = c.getresponse()
        check(r.status == 200 and len(r.read(300 << 10)) == 300 << 10, "a download begins")
        c.close()
    time.sleep(2 * DELAY_MS / 1000.0)
    _, listing = api("GET", "/api/v1/agents/big/files?path=.", timeout=30)
    check(listing["entries"][0]["size"] == SIZE_MIB << 20, "listed after the left downloads: %r" % listing)


sys.exit(ahserver.run(main, Fail, procs, TMP, LOG))
