#!/usr/bin/python3
"""bench/files/bench_files.py: file throughput up and down through the API
against a raw loopback TCP copy of the same bytes, in the same run.

usage: bench_files.py AGENTHOLD_BINARY [--mib N] [--rounds R] [--docker IMAGE]

Starts the real `agenthold serve` (fake driver: sandboxd in-process, its
home under the data directory), creates an agent, and per round:
  up:       PUT /api/v1/agents/{id}/fs/file?path=bench.bin (Content-Length,
            the body read from a local file in 1 MiB blocks), timed until
            the server's answer, i.e. until sandboxd wrote, fsynced and
            renamed the file;
  down:     GET .../fs/file?path=bench.bin into a local file, 1 MiB reads;
  baseline: the same local file read in 1 MiB blocks and sent over a plain
            loopback TCP connection to another process, which writes it to
            a file and fsyncs it (as sandboxd does) before answering one byte.
With --docker IMAGE our side runs on the Docker driver instead: the real
static sandboxd in a container of IMAGE (a local image; the driver mounts
sandboxd), and a fourth and fifth figure are the goal's peer:
  docker cp in:  `docker cp SRC CONTAINER:/home/agent/cp.bin` into the
            same container (the CLI tars the file, the engine unpacks it
            into the container's home volume; no fsync);
  docker cp out: `docker cp CONTAINER:/home/agent/bench.bin DST`, the file
            our upload left there (the engine tars it, the CLI unpacks it).
Each side writes a new file every round: the baseline's copy, the upload
and docker cp's are removed after the round, untimed (replacing a file
frees the old one's blocks inside the timed rename).
The rounds are interleaved (baseline, up, down) so the machine's noise
falls on all three; each figure is the median over the rounds, with its
ratio to the baseline of the same run. The same client code (Python,
1 MiB blocks) drives all three, so the ratio is the cost of the path:
HTTP in libwebsockets, the bus, the tunnel actor, yamux over WebSocket,
sandboxd and its temporary file. SHA-256 is checked outside the timed part:
the source, the file as it landed in the sandbox's home, the download and
the baseline's copy must all agree. Exits 1 on any mismatch or error."""
import argparse
import hashlib
import http.client
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ahserve  # noqa: E402
from ahserve import ahdocker  # noqa: E402
from ahserve import BenchError, Goals, Server, median  # noqa: E402

BLOCK = 1 << 20


def sha256_file(path):
    return ahserve.ahserver.sha256_file(path, BLOCK)


def make_source(path, size):
    """size bytes of random data (not compressible, not all zero)."""
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            b = os.urandom(min(BLOCK, left))
            f.write(b)
            h.update(b)
            left -= len(b)
    return h.hexdigest()


def receiver(port_file, out_path):
    """Baseline peer (another process): accept one connection, write what
    comes to out_path, fsync, answer one byte."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(ls.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    buf = bytearray(BLOCK)
    view = memoryview(buf)
    while True:
        c, _ = ls.accept()
        with open(out_path, "wb") as f:
            while True:
                n = c.recv_into(buf)
                if n == 0:
                    break
                f.write(view[:n])
            f.flush()
            os.fsync(f.fileno())
        c.sendall(b"k")
        c.close()


def baseline(port, src, size):
    t0 = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port))
    with open(src, "rb") as f:
        while True:
            b = f.read(BLOCK)
            if not b:
                break
            s.sendall(b)
    s.shutdown(socket.SHUT_WR)
    if s.recv(1) != b"k":
        raise BenchError("the baseline receiver did not answer")
    s.close()
    return time.perf_counter() - t0


def upload(srv, agent_id, src, size):
    conn = http.client.HTTPConnection("127.0.0.1", srv.api_port, timeout=300, blocksize=BLOCK)
    t0 = time.perf_counter()
    with open(src, "rb") as f:
        conn.request("PUT", "/api/v1/agents/%s/fs/file?path=bench.bin" % agent_id, body=f,
                     headers={"Authorization": "Bearer " + srv.token(),
                              "Content-Length": str(size),
                              "Content-Type": "application/octet-stream"})
        r = conn.getresponse()
        body = r.read()
    dt = time.perf_counter() - t0
    conn.close()
    if r.status not in (200, 201):
        raise BenchError("PUT fs/file: %d %s\n%s" % (r.status, body[:300], srv.log_tail()))
    return dt


def download(srv, agent_id, dst, size):
    conn = http.client.HTTPConnection("127.0.0.1", srv.api_port, timeout=300)
    buf = bytearray(BLOCK)
    view = memoryview(buf)
    got = 0
    t0 = time.perf_counter()
    conn.request("GET", "/api/v1/agents/%s/fs/file?path=bench.bin" % agent_id,
                 headers={"Authorization": "Bearer " + srv.token()})
    r = conn.getresponse()
    if r.status != 200:
        raise BenchError("GET fs/file: %d %s\n%s" % (r.status, r.read()[:300], srv.log_tail()))
    with open(dst, "wb") as f:
        while True:
            n = r.readinto(buf)
            if not n:
                break
            f.write(view[:n])
            got += n
    dt = time.perf_counter() - t0
    conn.close()
    if got != size:
        raise BenchError("GET fs/file: %d bytes of %d" % (got, size))
    return dt


def remove(srv, agent_id, name):
    """DELETE fs/file (untimed)."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.api_port, timeout=120)
    conn.request("DELETE", "/api/v1/agents/%s/fs/file?path=%s" % (agent_id, name),
                 headers={"Authorization": "Bearer " + srv.token()})
    r = conn.getresponse()
    body = r.read()
    conn.close()
    if r.status != 200:
        raise BenchError("DELETE fs/file: %d %s" % (r.status, body[:300]))


def docker_cp(src, dst):
    """One `docker cp` (the CLI, as a user runs it), timed."""
    t0 = time.perf_counter()
    p = subprocess.run(["docker", "cp", src, dst], capture_output=True, text=True, timeout=600)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise BenchError("docker cp %s %s: status %d: %s" % (src, dst, p.returncode, p.stderr.strip()))
    return dt


def sha256_in(cid, path):
    """sha256 of a file inside the container (its own sha256sum)."""
    out = ahdocker.exec_in(cid, ["sha256sum", path], timeout=120)
    h = out.split()[0] if out.split() else ""
    if len(h) != 64:
        raise BenchError("sha256sum %s in the container: %r" % (path, out[:200]))
    return h


#  With the fake driver sandboxd runs inside the server as threads of
#  this name: the sandbox's side of the transfer, not the server's.
SANDBOX_THREADS = ("ah-sandboxd",)


class RssWatch:
    """The server's largest VmRSS while a transfer runs (sampled every
    20 ms), to show memory stays flat."""
    def __init__(self, srv):
        self.srv = srv
        self.peak = srv.rss_kib()
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.wait(0.02):
            try:
                self.peak = max(self.peak, self.srv.rss_kib())
            except OSError:
                return

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join()
        return False


def cpu_delta(before, after):
    return {k: after[k] - before.get(k, 0.0) for k in after}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("agenthold")
    ap.add_argument("--mib", type=int, default=256, help="file size in MiB (default 256)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, medians printed (default 3)")
    ap.add_argument("--docker", metavar="IMAGE",
                    help="our side on the Docker driver in a container of IMAGE, against docker cp "
                         "into and out of the same container")
    a = ap.parse_args()
    if a.docker and not ahdocker.engine_up():
        print("bench_files: no Docker Engine at %s" % ahdocker.SOCK, file=sys.stderr)
        return 77
    if a.mib < 1 or a.mib > 4096 or a.rounds < 1 or a.rounds > 50:
        ap.error("--mib 1..4096 (the API takes uploads up to 4 GiB), --rounds 1..50")
    size = a.mib << 20
    rx = None
    goals = Goals()
    with Server(a.agenthold, "ah-bench-files-", docker_image=a.docker) as srv:
        try:
            src = os.path.join(srv.tmp, "src.bin")
            dst = os.path.join(srv.tmp, "down.bin")
            base_out = os.path.join(srv.tmp, "baseline.bin")
            port_file = os.path.join(srv.tmp, "rx.port")
            want = make_source(src, size)
            agent_id = srv.create_agent("bench-files")
            cid = srv.container(agent_id) if a.docker else None
            if a.docker:
                def landed_sha():
                    return sha256_in(cid, "/home/agent/bench.bin")
            else:
                def landed_sha():
                    return sha256_file(os.path.join(srv.agent_dir(agent_id), "home", "bench.bin"))
            cp_out = os.path.join(srv.tmp, "cp-out.bin")
            t_cp_in, t_cp_out = [], []
            rx = srv.spawn([sys.executable, os.path.abspath(__file__), "--receiver",
                            port_file, base_out])
            deadline = time.time() + 10
            while not os.path.exists(port_file):
                if time.time() > deadline or rx.poll() is not None:
                    raise BenchError("the baseline receiver did not start")
                time.sleep(0.05)
            with open(port_file) as f:
                rx_port = int(f.read())
            t_base, t_up, t_down = [], [], []
            cpu_up, cpu_down = [], []
            rss_before = srv.rss_kib()
            rss_peak = rss_before
            for r in range(a.rounds):
                t_base.append(baseline(rx_port, src, size))
                if sha256_file(base_out) != want:
                    raise BenchError("round %d: the baseline's copy differs from the source" % r)
                os.unlink(base_out)
                c0 = srv.thread_cpu()
                with RssWatch(srv) as w:
                    t_up.append(upload(srv, agent_id, src, size))
                rss_peak = max(rss_peak, w.peak)
                cpu_up.append(cpu_delta(c0, srv.thread_cpu()))
                if landed_sha() != want:
                    raise BenchError("round %d: the uploaded file differs from the source" % r)
                if a.docker:
                    t_cp_in.append(docker_cp(src, "%s:/home/agent/cp.bin" % cid))
                    if sha256_in(cid, "/home/agent/cp.bin") != want:
                        raise BenchError("round %d: docker cp's copy in differs from the source" % r)
                    t_cp_out.append(docker_cp("%s:/home/agent/bench.bin" % cid, cp_out))
                    if sha256_file(cp_out) != want:
                        raise BenchError("round %d: docker cp's copy out differs from the source" % r)
                    os.unlink(cp_out)
                c0 = srv.thread_cpu()
                with RssWatch(srv) as w:
                    t_down.append(download(srv, agent_id, dst, size))
                rss_peak = max(rss_peak, w.peak)
                cpu_down.append(cpu_delta(c0, srv.thread_cpu()))
                if sha256_file(dst) != want:
                    raise BenchError("round %d: the downloaded file differs from the source" % r)
                os.unlink(dst)
                #  Every side writes a new file each round, as the baseline
                #  does (its copy is unlinked above): replacing a file of
                #  this size also frees the old one's blocks inside the
                #  rename (90 ms of 256 MiB here), a cost the baseline never
                #  paid.
                remove(srv, agent_id, "bench.bin")
                if a.docker:
                    ahdocker.exec_in(cid, ["rm", "-f", "/home/agent/cp.bin"], timeout=120)
            base = a.mib / median(t_base)
            up = a.mib / median(t_up)
            down = a.mib / median(t_down)
            print("bench_files: %d MiB, %d round(s), medians; sha256 %s... checked "
                  "(source = sandbox's copy = download = baseline copy%s); our side: %s"
                  % (a.mib, a.rounds, want[:16], " = docker cp's copies" if a.docker else "",
                     "Docker driver, sandboxd in a container of " + a.docker if a.docker
                     else "fake driver, sandboxd in the server process"))
            print("  baseline (loopback TCP, file to file + fsync) %9.1f MiB/s" % base)
            print("  up   (PUT fs/file through the API)            %9.1f MiB/s   %.3fx baseline   %s"
                  % (up, up / base, goals.at_least("up/baseline", up / base, 0.6)))
            print("  down (GET fs/file through the API)            %9.1f MiB/s   %.3fx baseline   %s"
                  % (down, down / base, goals.at_least("down/baseline", down / base, 0.6)))
            if a.docker:
                cp_in = a.mib / median(t_cp_in)
                cp_o = a.mib / median(t_cp_out)
                print("  docker cp in  (same container)               %9.1f MiB/s" % cp_in)
                print("  docker cp out (same container)               %9.1f MiB/s" % cp_o)
                print("  up   / docker cp in                           %9.3fx            %s"
                      % (up / cp_in, goals.at_least("up/docker cp in", up / cp_in, 1.0)))
                print("  down / docker cp out                          %9.3fx            %s"
                      % (down / cp_o, goals.at_least("down/docker cp out", down / cp_o, 1.0)))
            gib = a.mib / 1024.0
            for name, cpu in (("up", cpu_up), ("down", cpu_down)):
                per = {k: median([c.get(k, 0.0) for c in cpu]) / gib for k in set().union(*cpu)}
                total = sum(v for k, v in per.items() if k not in SANDBOX_THREADS)
                parts = ", ".join("%s %.2f" % (k, v) for k, v in
                                  sorted(per.items(), key=lambda kv: -kv[1]) if v >= 0.01)
                print("  %-4s server CPU %5.2f s/GiB   %s   (threads: %s)"
                      % (name, total, goals.at_most(name + " CPU s/GiB", total, 1.5), parts))
            print("  server memory: VmRSS %.1f MiB before, at most %.1f MiB during the transfers (+%.1f MiB)"
                  % (rss_before / 1024.0, rss_peak / 1024.0, (rss_peak - rss_before) / 1024.0))
        except BenchError as e:
            print("bench_files: %s" % e, file=sys.stderr)
            return 1
    return goals.status("bench_files")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--receiver":
        receiver(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(main())
