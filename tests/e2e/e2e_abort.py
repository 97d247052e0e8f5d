#!/usr/bin/python3
"""tests/e2e/e2e_abort.py: a file transfer killed half way, from either
side, leaves nothing behind. The real `agenthold serve` (fake driver:
sandboxd in-process, its home under <data>/fake/<id>/home; temporary data
directory; ports from ahserver.free_port), 64 MiB files:

  client-up     a PUT whose client resets its connection after 8 MiB
  client-down   a GET whose client resets its connection after 4 MiB
  sandbox-up    a PUT whose tunnel connection is reset (`ss -K`: a real RST
                on both ends) after 8 MiB: the client is told (an error
                status or a closed connection, never 200)
  sandbox-down  a GET whose tunnel connection is reset after 4 MiB: the
                client gets fewer bytes than announced, never a whole file

After each reset sandboxd is back (an exec answers) within
AH_TEST_REDIAL_BOUND_S (5 s; 15 s in a sanitized build) of it, every
time: its redial of 125-250 ms, and the backoff a hello resets, hold
across the six resets.

After each: no file at the destination name (or the old one, whole), no
temporary file of the write in the home, no channel left open in the
tunnel (agenthold_tunnel_channels of GET /metrics is 0), no descriptor of the server
process left open on a file in the home (sandboxd runs inside the server
with the fake driver: an fs.read or fs.write channel that leaked would
hold its file open), the server's descriptor count back where it was, and
a full upload and download of the same name that round-trips (sha256).
Each case runs three times in a row. Also: an upload's body is spliced
(agenthold_spliced_bytes_total grows by it), and only the body: a PUT of
0 B to 3 MiB with a GET of the same file in the same write is answered
twice, the GET with the exact bytes; a body trickled in pieces lands
whole and costs the server little CPU while it waits. And: `curl -T` of 3 MiB (it sends
`Expect: 100-continue` and waits up to a second for the 100) is answered
well within that second, and its file lands whole. And: a tunnel reset is
told on the agent's events stream, "connected": false and then true, the
state running in both.

usage: e2e_abort.py AGENTHOLD_BINARY
Always kills what it started and removes its temporary directory."""
import hashlib
import http.client
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahserver  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="ah-e2e-abort-")
DATA = os.path.join(TMP, "data")
LOG = os.path.join(TMP, "server.log")
SIZE = 64 << 20
BLOCK = 1 << 20
procs = []
#  How soon sandboxd is back after a reset (wait_tunnel); a sanitized
#  build's dial and hello are slower (tests/e2e/CMakeLists.txt).
REDIAL_BOUND_S = float(os.environ.get("AH_TEST_REDIAL_BOUND_S", "5"))
REDIALS = []


class Fail(Exception):
    pass


check = ahserver.Checks(Fail)


API_PORT = ahserver.free_port(fail=Fail)
TUNNEL_PORT = ahserver.free_port(avoid={API_PORT}, fail=Fail)
ENV = ahserver.server_env(DATA, API_PORT, TUNNEL_PORT, extra={"AGENTHOLD_LOG": "info"})


def token():
    return ahserver.read_token(DATA)


def api(method, path, body=None, expect=200, timeout=60):
    st, raw = ahserver.request(API_PORT, method, path, body, token(), timeout=timeout)
    if expect is not None:
        check(st == expect, "%s %s: %d %s" % (method, path, st, raw[:300]))
    try:
        return st, json.loads(raw) if raw else None
    except ValueError:
        return st, raw


def block(i):
    """The i-th MiB of the test data (deterministic, incompressible enough)."""
    return hashlib.sha256(b"abort-%d" % i).digest() * (BLOCK // 32)


def file_path(name):
    return "/api/v1/agents/%s/fs/file?path=%s" % (AGENT, name)


def raw_request(method, path, length=None):
    """A socket with the request head sent (body to follow)."""
    s = socket.create_connection(("127.0.0.1", API_PORT), timeout=30)
    head = "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n" % (method, path, token())
    if length is not None:
        head += "Content-Length: %d\r\nContent-Type: application/octet-stream\r\n" % length
    s.sendall((head + "\r\n").encode())
    return s


def reset(s):
    """Close with an RST, as a killed client does."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def kill_tunnel():
    """Resets the tunnel's connection; returns when (time.monotonic())."""
    r = subprocess.run(["ss", "-K", "-tn", "dport", "= :%d" % TUNNEL_PORT], capture_output=True, text=True)
    check(r.returncode == 0, "ss -K failed: %s" % r.stderr)
    return time.monotonic()


def home_fds(pid):
    """The server's descriptors open on files in the agent's home."""
    out = []
    base = "/proc/%d/fd" % pid
    for fd in os.listdir(base):
        try:
            target = os.readlink(os.path.join(base, fd))
        except OSError:
            continue
        if target.startswith(HOME + "/"):     #  the home itself sandboxd keeps open
            out.append(target)
    return out


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def fd_targets(pid):
    """What each of the server's descriptors is open on (a failure names
    the ones the baseline did not have)."""
    out = []
    base = "/proc/%d/fd" % pid
    for fd in os.listdir(base):
        try:
            out.append(os.readlink(os.path.join(base, fd)))
        except OSError:
            pass
    return sorted(out)


BASELINE_FDS = []                       # fd_targets() when the baseline was taken


def metric(name):
    st, raw = ahserver.request(API_PORT, "GET", "/metrics", None, token(), timeout=30)
    check(st == 200, "GET /metrics: %d %r" % (st, raw[:200]))
    for line in raw.decode(errors="replace").splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    raise Fail("GET /metrics has no %s" % name)


def tunnel_channels():
    """agenthold_tunnel_channels of GET /metrics: the channels the tunnel
    holds open (a leaked file channel stays in its table)."""
    return metric("agenthold_tunnel_channels")


def wait_clean(pid, name, baseline, old=None):
    """Until nothing of the killed transfer is left (10 s at most): no
    channel open in the tunnel either."""
    deadline = time.time() + 10
    while True:
        chans = tunnel_channels()
        temps = [f for f in os.listdir(HOME) if f.startswith(".%s.ah-" % name)]
        fds = home_fds(pid)
        count = fd_count(pid)
        dest = os.path.join(HOME, name)
        if old is None:
            dest_ok = not os.path.exists(dest)
        else:
            dest_ok = os.path.exists(dest) and ahserver.sha256_file(dest) == old
        if not temps and not fds and count <= baseline and dest_ok and chans == 0:
            return
        if time.time() > deadline:
            check(chans == 0, "%s: the tunnel still holds %d channel(s) open" % (name, chans))
            check(not temps, "%s: the write's temporary file is still there: %r" % (name, temps))
            check(not fds, "%s: the server still holds files of the home open: %r" % (name, fds))
            extra = list(fd_targets(pid))
            for t in BASELINE_FDS:
                if t in extra:
                    extra.remove(t)
            check(count <= baseline, "%s: the server holds %d descriptors, %d before; open beyond the "
                  "baseline's: %r" % (name, count, baseline, extra))
            check(dest_ok, "%s: the destination holds a partial or changed file" % name)
        time.sleep(0.1)


def wait_tunnel(reset_at):
    """Until sandboxd has redialled and answers an exec, and that within
    REDIAL_BOUND_S of the reset at reset_at. A connection that ended is
    redialled after 125-250 ms, at least 1 s after it began, and a hello
    resets the backoff (docs/sandboxd.md): so each of the test's six
    resets is back within the same bound, the dial and the hello (slow
    under ASan) included. A backoff that climbed instead (1 s doubling to
    30 s) misses it by the third."""
    def up():
        st, j = api("POST", "/api/v1/agents/%s/exec" % AGENT, {"cmd": "echo up"}, expect=None)
        return st == 200 and isinstance(j, dict) and j.get("stdout") == "up\n"
    ahserver.wait_until(up, 30 + 15, "sandboxd back after the tunnel reset", Fail, 0.1)
    took = time.monotonic() - reset_at
    REDIALS.append(took)
    check(took <= REDIAL_BOUND_S, "sandboxd came back %.2f s after the tunnel reset (bound %.1f s; "
          "the ones before: %s): its backoff did not reset after the last hello"
          % (took, REDIAL_BOUND_S, ", ".join("%.2f" % t for t in REDIALS[:-1])))


def round_trip(name):
    """A whole upload and download of name: the path still works."""
    want = hashlib.sha256()
    c = http.client.HTTPConnection("127.0.0.1", API_PORT, timeout=120)
    c.putrequest("PUT", file_path(name))
    c.putheader("Authorization", "Bearer " + token())
    c.putheader("Content-Length", str(SIZE))
    c.endheaders()
    for i in range(SIZE // BLOCK):
        b = block(i)
        want.update(b)
        c.send(b)
    r = c.getresponse()
    body = r.read()
    check(r.status == 200, "round trip PUT %s: %d %s" % (name, r.status, body[:200]))
    c.request("GET", file_path(name), headers={"Authorization": "Bearer " + token()})
    r = c.getresponse()
    got = hashlib.sha256()
    n = 0
    while True:
        b = r.read(BLOCK)
        if not b:
            break
        got.update(b)
        n += len(b)
    c.close()
    check(r.status == 200 and n == SIZE and got.hexdigest() == want.hexdigest(),
          "round trip GET %s: %d, %d bytes, sha %s" % (name, r.status, n, got.hexdigest()[:16]))
    return want.hexdigest()


def send_some(s, mib):
    for i in range(mib):
        s.sendall(block(i))


def case_client_up(pid, baseline):
    s = raw_request("PUT", file_path("cu.bin"), SIZE)
    send_some(s, 8)
    reset(s)
    wait_clean(pid, "cu.bin", baseline)


def case_client_down(pid, baseline, whole):
    s = raw_request("GET", file_path("whole.bin"))
    got = 0
    while got < (4 << 20):
        b = s.recv(BLOCK)
        check(b, "the download ended after %d bytes" % got)
        got += len(b)
    reset(s)
    wait_clean(pid, "whole.bin", baseline, whole)


def case_sandbox_up(pid, baseline):
    s = raw_request("PUT", file_path("su.bin"), SIZE)
    send_some(s, 8)
    reset_at = kill_tunnel()
    #  The client keeps sending until the server answers or closes.
    status = None
    try:
        for i in range(8, SIZE // BLOCK):
            s.sendall(block(i))
    except OSError:
        pass
    try:
        s.settimeout(20)
        head = s.recv(4096)
        if head.startswith(b"HTTP/1.1 "):
            status = int(head[9:12])
    except OSError:
        pass
    reset(s)
    check(status != 200, "an upload whose tunnel broke was answered 200")
    wait_tunnel(reset_at)
    wait_clean(pid, "su.bin", baseline)


def case_sandbox_down(pid, baseline, whole):
    s = raw_request("GET", file_path("whole.bin"))
    s.settimeout(20)
    buf = b""
    while b"\r\n\r\n" not in buf:
        b = s.recv(BLOCK)
        check(b, "no answer head to the download")
        buf += b
    head, body = buf.split(b"\r\n\r\n", 1)
    check(head.startswith(b"HTTP/1.1 200"), "download head: %r" % head[:100])
    got = len(body)
    while got < (4 << 20):
        b = s.recv(BLOCK)
        check(b, "the download ended after %d bytes" % got)
        got += len(b)
    reset_at = kill_tunnel()
    try:
        while True:
            b = s.recv(BLOCK)
            if not b:
                break
            got += len(b)
    except OSError:
        pass
    s.close()
    check(got < SIZE, "a download whose tunnel broke delivered all %d bytes" % got)
    wait_tunnel(reset_at)
    wait_clean(pid, "whole.bin", baseline, whole)


def read_answer(s, buf):
    """One HTTP answer from s (buf: bytes already read): (status, body, rest)."""
    while b"\r\n\r\n" not in buf:
        b = s.recv(1 << 16)
        check(b, "the connection closed before an answer's head: %r" % buf[:200])
        buf += b
    head, buf = buf.split(b"\r\n\r\n", 1)
    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    length = int(m.group(1)) if m else 0
    while len(buf) < length:
        b = s.recv(1 << 20)
        check(b, "the connection closed inside an answer's body")
        buf += b
    return int(head[9:12]), buf[:length], buf[length:]


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def case_splice(pid, baseline):
    """An upload's body goes from the client's socket to sandboxd's by
    splice (agenthold_spliced_bytes_total counts it), and only the body:
    a request sent in the same write right behind it is read as a request.
    A body that comes in pieces with pauses costs no CPU while it waits."""
    before = metric("agenthold_spliced_bytes_total")
    round_trip("spliced.bin")
    moved = metric("agenthold_spliced_bytes_total") - before
    check(moved >= SIZE - (2 << 20) and moved <= SIZE,
          "a %d-byte upload: %d bytes spliced (all but the first reads expected)" % (SIZE, moved))
    auth = "Authorization: Bearer %s\r\n" % token()
    for size in (0, 1, 65535, 65536, 65537, (1 << 20) + 7, (3 << 20) + 7):
        body = os.urandom(size)
        name = "pipelined-%d.bin" % size
        put = ("PUT %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n"
               % (file_path(name), auth, size)).encode()
        get = ("GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (file_path(name), auth)).encode()
        s = socket.create_connection(("127.0.0.1", API_PORT), timeout=60)
        s.sendall(put + body + get)
        st, answer, rest = read_answer(s, b"")
        check(st == 200 and json.loads(answer).get("size") == size,
              "PUT of %d bytes with a GET behind it: %d %r" % (size, st, answer[:200]))
        st, got, rest = read_answer(s, rest)
        check(st == 200 and got == body, "the GET behind a %d-byte PUT: %d, %d bytes back%s"
              % (size, st, len(got), "" if got == body else " (different)"))
        s.close()
        os.unlink(os.path.join(HOME, name))
    #  In pieces: 4 MiB in 8 sends, 0.25 s apart.
    before = metric("agenthold_spliced_bytes_total")
    want = hashlib.sha256()
    s = raw_request("PUT", file_path("trickled.bin"), 4 << 20)
    time.sleep(0.3)             # pacing: the head is read and the body waited for before the CPU is measured
    cpu0, t0 = cpu_s(pid), time.monotonic()
    for i in range(8):
        piece = block(i)[:512 << 10]
        want.update(piece)
        s.sendall(piece)
        time.sleep(0.25)        # pacing: the trickle itself
    cpu = cpu_s(pid) - cpu0
    wall = time.monotonic() - t0
    st, answer, _ = read_answer(s, b"")
    s.close()
    check(st == 200, "trickled PUT: %d %r" % (st, answer[:200]))
    check(ahserver.sha256_file(os.path.join(HOME, "trickled.bin")) == want.hexdigest(),
          "the trickled upload landed different")
    check(metric("agenthold_spliced_bytes_total") - before >= (3 << 20),
          "the trickled upload was not spliced")
    check(cpu < 0.5 * wall, "the server used %.2f s of CPU in %.2f s of a trickled upload "
          "(a watcher that spins?)" % (cpu, wall))
    wait_clean(pid, "no-such.bin", baseline)


def case_expect():
    src = os.path.join(TMP, "expect.bin")
    with open(src, "wb") as f:
        for i in range(3):
            f.write(block(i))
    times = []
    for i in range(3):
        t0 = time.monotonic()
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-T", src,
                            "-H", "Authorization: Bearer " + token(),
                            "http://127.0.0.1:%d%s" % (API_PORT, file_path("expect.bin"))],
                           capture_output=True, text=True, timeout=30)
        times.append(time.monotonic() - t0)
        check(r.stdout == "200", "curl -T: %r %r" % (r.stdout, r.stderr[-200:]))
    check(sorted(times)[1] < 0.5, "curl -T of 3 MiB took %.2f s (an unanswered Expect stalls 1 s)"
          % sorted(times)[1])
    check(ahserver.sha256_file(os.path.join(HOME, "expect.bin")) == ahserver.sha256_file(src),
          "the file curl -T sent landed different")


class Events:
    """GET /api/v1/events?agent=... read in a thread: each event's JSON kept."""

    def __init__(self, agent):
        self.events = []
        self.conn = http.client.HTTPConnection("127.0.0.1", API_PORT, timeout=300)
        self.conn.request("GET", "/api/v1/events?agent=" + agent, headers={"Authorization": "Bearer " + token()})
        self.resp = self.conn.getresponse()
        check(self.resp.status == 200, "the events stream: %d" % self.resp.status)
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        try:
            for line in self.resp:
                if line.startswith(b"data: "):
                    self.events.append(json.loads(line[6:]))
        except (OSError, ValueError, http.client.HTTPException):
            pass

    def close(self):
        self.conn.close()


def case_connected():
    """A tunnel that goes and comes back is told on the events stream:
    "connected": false, then "connected": true, the state running in both."""
    ev = Events(AGENT)
    time.sleep(0.3)
    wait_tunnel(kill_tunnel())

    def told():
        flags = [e.get("connected") for e in ev.events if "connected" in e]
        return False in flags and True in flags[flags.index(False):]
    ahserver.wait_until(told, 10, "connected false then true on the events stream", Fail, 0.1)
    said = [e for e in ev.events if "connected" in e]
    check(all(e["state"] == "running" and e["agent_id"] == AGENT for e in said),
          "the connected events carry the agent and its state: %r" % said)
    ev.close()


def main():
    global AGENT, HOME
    server = ahserver.serve(BIN, ENV, LOG, cwd=TMP, procs=procs, fail=Fail)
    _, j = api("POST", "/api/v1/agents?wait=1", {"name": "aborted"}, expect=201, timeout=120)
    AGENT = j["id"]
    HOME = os.path.join(DATA, "fake", AGENT, "home")
    check(os.path.isdir(HOME), "no home at %s" % HOME)
    case_expect()
    case_connected()
    whole = round_trip("whole.bin")
    #  The baseline once the round trip's channels are closed and the
    #  server's descriptor count holds still.
    seen = []

    def settled():
        seen.append(fd_count(server.pid))
        return tunnel_channels() == 0 and len(seen) >= 2 and seen[-1] == seen[-2]
    ahserver.wait_until(settled, 10, "the round trip's channels closed and the descriptors settled", Fail, 0.1)
    baseline = seen[-1]
    BASELINE_FDS.extend(fd_targets(server.pid))
    case_splice(server.pid, baseline)
    for rnd in range(3):
        case_client_up(server.pid, baseline)
        case_client_down(server.pid, baseline, whole)
        case_sandbox_up(server.pid, baseline)
        case_sandbox_down(server.pid, baseline, whole)
    check(round_trip("after.bin"), "the path works after the aborts")
    print("e2e_abort: %d checks passed (sandboxd back after each reset in %s s)"
          % (check.count, ", ".join("%.2f" % t for t in REDIALS)))


if __name__ == "__main__":
    sys.exit(ahserver.run(main, Fail, procs, TMP, LOG))
