#!/usr/bin/python3
"""bench/term/bench_term.py: terminal echo round trip through the API's
terminal WebSocket against the same shell on a local pty, in the same run.

usage: bench_term.py AGENTHOLD_BINARY [--samples N] [--docker IMAGE [--docker-driver]]

Starts the real `agenthold serve` (fake driver: sandboxd in-process runs
the terminal's shell as this user), creates an agent, and opens
  ws:   GET /api/v1/agents/{id}/terminal (80x24): keystroke -> libwebsockets
        -> the bus -> the tunnel actor -> yamux over WebSocket -> sandboxd
        -> its pty -> the shell's echo -> all the way back;
  pty:  the same login shell (this user's, from /etc/passwd, with the
        environment sandboxd gives it) on a local pty made with forkpty,
        read and written directly: the baseline;
  docker: with --docker IMAGE (a local image with /bin/bash), the peer
        of the goal: a raw Docker Engine API exec of bash -l with Tty in a
        container of that image, its start hijacked (Upgrade: tcp) and
        read and written directly. The container (ah-bench-term-PID,
        label agenthold.bench) is removed whatever happens. Our side still
        runs on the fake driver (sandboxd in-process, not in that
        container): the ratio is the path's, not the container's.
        With --docker-driver our side runs on the Docker driver (the real
        static sandboxd in a container of IMAGE, its shell as the agent)
        and the exec attach goes into that same container: both cross the
        same namespaces and cgroup.
One sample: send "x", time until an "x" comes back. Then a DEL (untimed)
to keep the line short, waiting for its backspace so nothing of it is
left for the next sample. Samples are taken in interleaved blocks of 100
(ws, pty, ws, ...) after 20 warm-up samples each, so the machine's noise
falls on both. The same Python client code drives both; the ratio is the
cost of the path. Prints median and p99 of each and their ratios; exits 1
on any error (an echo that does not come within 10 s, a refused terminal)."""
import argparse
import asyncio
import fcntl
import os
import pty
import pwd
import select
import struct
import sys
import termios
import time

import websockets

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "files"))
from ahserve import BenchError, Goals, Server, median, percentile  # noqa: E402

BLOCK = 100
DOCKER_SOCK = "/var/run/docker.sock"


def docker_call(method, path, body=None, upgrade=False):
    """One Engine API request over the unix socket: (status, body), or
    with upgrade the hijacked socket once the engine answered 101."""
    import json
    import socket
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(DOCKER_SOCK)
    data = json.dumps(body).encode() if body is not None else b""
    head = "%s %s HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % (
        method, path, len(data))
    if upgrade:
        head += "Connection: Upgrade\r\nUpgrade: tcp\r\n"
    else:
        head += "Connection: close\r\n"
    s.sendall(head.encode() + b"\r\n" + data)
    buf = b""
    while b"\r\n\r\n" not in buf:
        b = s.recv(65536)
        if not b:
            break
        buf += b
    status = int(buf[9:12]) if buf.startswith(b"HTTP/1.") else 0
    rest = buf.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in buf else b""
    if upgrade:
        if status != 101:
            s.close()
            raise BenchError("docker exec start: HTTP %d %r" % (status, buf[:200]))
        return s, rest
    while True:
        b = s.recv(65536)
        if not b:
            break
        rest += b
    s.close()
    if b"Transfer-Encoding: chunked" in buf:
        out, r = b"", rest
        while r:
            line, _, r = r.partition(b"\r\n")
            n = int(line.split(b";")[0] or b"0", 16)
            if n == 0:
                break
            out, r = out + r[:n], r[n + 2:]
        rest = out
    return status, json.loads(rest) if rest.strip() else None


class DockerAttach:
    """The peer: bash -l in a container, through a raw exec attach."""

    def __init__(self, image, container=None):
        #  container: exec into that one (our agent's, --docker-driver),
        #  which is not ours to remove.
        self.own = container is None
        self.name = container or "ah-bench-term-%d" % os.getpid()
        self.sock = None
        if self.own:
            self._create(image)
        st, j = docker_call("POST", "/containers/%s/exec" % self.name, {
            "AttachStdin": True, "AttachStdout": True, "AttachStderr": True, "Tty": True,
            "Env": ["TERM=xterm-256color"], "Cmd": ["/bin/bash", "-l"]})
        if st != 201:
            raise BenchError("docker exec create: HTTP %d %r" % (st, j))
        self.sock, self.pending = docker_call("POST", "/exec/%s/start" % j["Id"],
                                              {"Detach": False, "Tty": True}, upgrade=True)
        self.sock.setblocking(True)

    def _create(self, image):
        st, j = docker_call("POST", "/containers/create?name=%s" % self.name, {
            "Image": image, "Entrypoint": ["sleep", "100000"], "Cmd": [],
            "Labels": {"agenthold.bench": "term"}})
        if st != 201:
            raise BenchError("docker create: HTTP %d %r" % (st, j))
        st, j = docker_call("POST", "/containers/%s/start" % self.name)
        if st not in (204, 304):
            raise BenchError("docker start: HTTP %d %r" % (st, j))

    def read_until(self, want):
        buf, self.pending = self.pending, b""
        deadline = time.perf_counter() + TIMEOUT
        while want not in buf:
            left = deadline - time.perf_counter()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise BenchError("docker attach: no %r within %.0f s; got %r" % (want, TIMEOUT, buf[-200:]))
            b = self.sock.recv(65536)
            if not b:
                raise BenchError("docker attach: the stream ended")
            buf += b
        return buf

    def settle(self):
        deadline = time.time() + TIMEOUT
        while time.time() < deadline and select.select([self.sock], [], [], 0.5)[0]:
            if not self.sock.recv(65536):
                break
        self.pending = b""

    def sample(self):
        t0 = time.perf_counter()
        self.sock.sendall(KEY)
        self.read_until(KEY)
        dt = time.perf_counter() - t0
        self.sock.sendall(DEL)
        self.read_until(b"\x08")
        return dt

    def close(self):
        if self.sock:
            self.sock.close()
        if self.own:
            docker_call("DELETE", "/containers/%s?force=true" % self.name)
WARMUP = 20
TIMEOUT = 10.0
KEY, DEL = b"x", b"\x7f"


class Local:
    """The baseline: the login shell on a local pty."""

    def __init__(self, home):
        pw = pwd.getpwuid(os.getuid())
        shell = pw.pw_shell or "/bin/sh"
        env = {"HOME": home, "USER": pw.pw_name, "LOGNAME": pw.pw_name, "SHELL": shell,
               "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "TERM": "xterm-256color"}
        pid, fd = pty.fork()
        if pid == 0:
            try:
                os.chdir(home)
                os.execve(shell, ["-" + os.path.basename(shell)], env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))

    def read_until(self, want):
        buf = b""
        deadline = time.perf_counter() + TIMEOUT
        while want not in buf:
            left = deadline - time.perf_counter()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise BenchError("local pty: no %r within %.0f s; got %r" % (want, TIMEOUT, buf[-200:]))
            try:
                buf += os.read(self.fd, 65536)
            except OSError as e:
                raise BenchError("local pty: %s" % e)
        return buf

    def settle(self):
        """Read until the shell has been quiet for 0.5 s (its prompt)."""
        deadline = time.time() + TIMEOUT
        while time.time() < deadline and select.select([self.fd], [], [], 0.5)[0]:
            os.read(self.fd, 65536)

    def sample(self):
        t0 = time.perf_counter()
        os.write(self.fd, KEY)
        self.read_until(KEY)
        dt = time.perf_counter() - t0
        os.write(self.fd, DEL)
        self.read_until(b"\x08")
        return dt

    def close(self):
        try:
            os.write(self.fd, b"exit\n")
        except OSError:
            pass
        deadline = time.time() + 5
        while time.time() < deadline:
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                break
            time.sleep(0.05)
        else:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


async def ws_read_until(ws, want):
    buf = b""
    deadline = time.perf_counter() + TIMEOUT
    while want not in buf:
        left = deadline - time.perf_counter()
        try:
            m = await asyncio.wait_for(ws.recv(), max(left, 0.001))
        except asyncio.TimeoutError:
            raise BenchError("terminal: no %r within %.0f s; got %r" % (want, TIMEOUT, buf[-200:]))
        buf += m if isinstance(m, bytes) else m.encode()
    return buf


async def ws_settle(ws):
    deadline = time.time() + TIMEOUT
    while time.time() < deadline:
        try:
            await asyncio.wait_for(ws.recv(), 0.5)
        except asyncio.TimeoutError:
            return


async def ws_sample(ws):
    t0 = time.perf_counter()
    await ws.send(KEY)
    await ws_read_until(ws, KEY)
    dt = time.perf_counter() - t0
    await ws.send(DEL)
    await ws_read_until(ws, b"\x08")
    return dt


async def run(srv, agent_id, samples, image=None, same_container=False):
    url = "ws://127.0.0.1:%d/api/v1/agents/%s/terminal?cols=80&rows=24&token=%s" % (
        srv.api_port, agent_id, srv.token())
    #  The local shell's home: the fake driver's home of the agent, or (on
    #  the Docker driver, whose home is in a volume) a directory of ours.
    home = srv.tmp if same_container else os.path.join(srv.agent_dir(agent_id), "home")
    local = Local(home)
    t_ws, t_pty, t_dk = [], [], []
    dk = None
    try:
        if image:
            dk = DockerAttach(image, srv.container(agent_id) if same_container else None)
            dk.settle()
        async with websockets.connect(url, ping_interval=None, max_size=None) as ws:
            await ws_settle(ws)
            local.settle()
            for _ in range(WARMUP):
                await ws_sample(ws)
                local.sample()
                if dk:
                    dk.sample()
            while len(t_ws) < samples:
                n = min(BLOCK, samples - len(t_ws))
                for _ in range(n):
                    t_ws.append(await ws_sample(ws))
                for _ in range(n):
                    t_pty.append(local.sample())
                for _ in range(n if dk else 0):
                    t_dk.append(dk.sample())
            await ws.send(b"exit\n")
            try:
                while True:
                    await asyncio.wait_for(ws.recv(), TIMEOUT)
            except websockets.ConnectionClosed as e:
                if e.code != 1000:
                    raise BenchError("terminal: closed with %s %r at exit" % (e.code, e.reason))
            except asyncio.TimeoutError:
                raise BenchError("terminal: still open %.0f s after exit" % TIMEOUT)
    except (OSError, websockets.InvalidHandshake, websockets.ConnectionClosed) as e:
        raise BenchError("terminal: %s\n%s" % (e, srv.log_tail()))
    finally:
        local.close()
        if dk:
            dk.close()
    return t_ws, t_pty, t_dk


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("agenthold")
    ap.add_argument("--samples", type=int, default=1000, help="samples of each (default 1000)")
    ap.add_argument("--docker", metavar="IMAGE", help="also a raw Docker exec attach in a container of IMAGE")
    ap.add_argument("--docker-driver", action="store_true",
                    help="with --docker: our side on the Docker driver in a container of IMAGE, and the "
                         "exec attach into that same container (both cross the same namespaces)")
    a = ap.parse_args()
    if a.samples < 1 or a.samples > 100000:
        ap.error("--samples 1..100000")
    if a.docker_driver and not a.docker:
        ap.error("--docker-driver needs --docker IMAGE")
    with Server(a.agenthold, "ah-bench-term-", docker_image=a.docker if a.docker_driver else None) as srv:
        try:
            agent_id = srv.create_agent("bench-term")
            t_ws, t_pty, t_dk = asyncio.run(run(srv, agent_id, a.samples, a.docker, a.docker_driver))
        except BenchError as e:
            print("bench_term: %s" % e, file=sys.stderr)
            return 1
    shell = pwd.getpwuid(os.getuid()).pw_shell or "/bin/sh"
    ws_med, ws_p99 = median(t_ws) * 1e3, percentile(t_ws, 99) * 1e3
    pty_med, pty_p99 = median(t_pty) * 1e3, percentile(t_pty, 99) * 1e3
    print("bench_term: %d echo round trips of each, %s login shell, interleaved blocks of %d; our side: %s"
          % (a.samples, shell, BLOCK, "Docker driver, the same container as the exec attach"
             if a.docker_driver else "fake driver (sandboxd in the server process)"))
    print("  baseline (local pty, forkpty)      median %7.3f ms   p99 %7.3f ms" % (pty_med, pty_p99))
    print("  terminal WebSocket through the API median %7.3f ms   p99 %7.3f ms   "
          "%.2fx / %.2fx baseline" % (ws_med, ws_p99, ws_med / pty_med, ws_p99 / pty_p99))
    if not t_dk:
        return 0
    dk_med, dk_p99 = median(t_dk) * 1e3, percentile(t_dk, 99) * 1e3
    goals = Goals()
    print("  Docker exec attach (Tty, hijacked) median %7.3f ms   p99 %7.3f ms" % (dk_med, dk_p99))
    print("  ours / Docker attach: median %.2fx   %s" % (ws_med / dk_med, goals.at_most("median", ws_med / dk_med, 1.0)))
    print("  ours / Docker attach: p99    %.2fx   %s" % (ws_p99 / dk_p99, goals.at_most("p99", ws_p99 / dk_p99, 1.2)))
    return goals.status("bench_term")


if __name__ == "__main__":
    sys.exit(main())
