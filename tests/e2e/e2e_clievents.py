#!/usr/bin/python3
"""tests/e2e/e2e_clievents.py: the CLI's waiting follows the server's event
stream (cli/follow.c, docs/cli.md "Waiting"). The real `agenthold serve`
(fake driver, temporary data directory, ports from ahserver.free_port).

- create, stop, start, rebuild and rm through the CLI each exit within
  200 ms of the event that settled the agent (an event stream of our own,
  opened before the command, says when), and after it. Stops (and the stop
  inside rebuild and rm) are made slow with the fake driver's slow-stop
  hook, by amounts that are not multiples of 500 ms, so a CLI that polled
  every 500 ms would come back up to half a second late and fail.
- The event stream cut by a proxy in the middle of a wait: the CLI says
  "the server's event stream broke" and still ends with the agent settled.
- The events route refused (503 from the proxy): the CLI says it cannot
  follow the events and still ends with the agent settled.
- The server killed (SIGKILL) in the middle of a wait: the CLI ends within
  a few seconds with status 1, saying the stream broke and that the
  server cannot be reached; no hang.

usage: e2e_clievents.py AGENTHOLD_BINARY
Always kills what it started and removes its temporary directory."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahserver  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="ah-e2e-clievents-")
DATA = os.path.join(TMP, "data")
LOG = os.path.join(TMP, "server.log")
# The CLI's exit after the settling event, at most (a sanitized build's
# test sets a wider one: tests/e2e/CMakeLists.txt).
BOUND_S = float(os.environ.get("AH_TEST_CLI_BOUND_S", "0.2"))
LISTENER_SLACK_S = 0.05     # how late the test's own listener thread may see an event
procs = []


class Fail(Exception):
    pass


check = ahserver.Checks(Fail)
API_PORT = ahserver.free_port(fail=Fail)
TUNNEL_PORT = ahserver.free_port(avoid={API_PORT}, fail=Fail)
ENV = ahserver.server_env(DATA, API_PORT, TUNNEL_PORT)
server = None


def start_server():
    global server
    server = ahserver.serve(BIN, ENV, LOG, cwd=TMP, procs=procs, fail=Fail)


def token():
    return ahserver.read_token(DATA)


class Events(threading.Thread):
    """Every event of the server's stream with the monotonic time it came."""
    def __init__(self):
        super().__init__(daemon=True)
        self.events = []
        self.lock = threading.Lock()
        self.opened = threading.Event()

    def run(self):
        s = socket.create_connection(("127.0.0.1", API_PORT))
        s.sendall(("GET /api/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n"
                   % token()).encode())
        buf = b""
        while True:
            try:
                piece = s.recv(65536)
            except OSError:
                return
            if not piece:
                return
            now = time.monotonic()
            buf += piece
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.startswith(b": agenthold events"):
                    self.opened.set()
                elif line.startswith(b"data: "):
                    with self.lock:
                        self.events.append((now, json.loads(line[6:])))

    def settled_at(self, name, state, after):
        """When the first event after `after` put agent name in state."""
        with self.lock:
            for t, e in self.events:
                if t >= after and e.get("name") == name and e.get("state") == state:
                    return t
        return None


def cli(*args, env=None, timeout=60):
    """(status, stdout, stderr, when it started, when it had exited)."""
    t0 = time.monotonic()
    p = subprocess.Popen([BIN] + list(args), env=env or ENV, cwd=TMP, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err, t0, time.monotonic()


def agent_id(name):
    st, a = ahserver.call_json(API_PORT, token(), "GET", "/api/v1/agents/" + name)
    check(st == 200, "GET agent %s: %s %s" % (name, st, a))
    return a["id"]


def slow_stop(name, ms):
    """The fake driver's hook: the agent's sandboxd takes ms to end."""
    d = os.path.join(DATA, "fake", agent_id(name))
    check(os.path.isdir(d), "the fake driver has no directory %s" % d)
    with open(os.path.join(d, "slow-stop"), "w") as f:
        f.write("%d\n" % ms)


def timed(ev, name, state, *args):
    """Runs the CLI command args; checks it succeeded and exited after the
    event that put name in state, within BOUND_S of it. Returns the lag."""
    rc, out, err, t0, t1 = cli(*args)
    check(rc == 0, "agenthold %s: status %d: %s" % (" ".join(args), rc, err))
    check(err == "", "agenthold %s said on stderr: %r" % (" ".join(args), err))
    check(out.strip().endswith(state) or ("state:" in out and state in out),
          "agenthold %s printed %r, not the agent %s" % (" ".join(args), out, state))
    #  It did not exit early: the server says the state already. (The
    #  listener below times the event when its thread got to it, which
    #  under load can be a little after the CLI's exit was seen.)
    st, a = ahserver.call_json(API_PORT, token(), "GET", "/api/v1/agents/" + name)
    now = "destroyed" if st == 404 else (a or {}).get("state")
    check(now == state, "agenthold %s exited with %s %s, not %s, on the server" % (" ".join(args), name, now, state))
    #  The listener has had the event (the check below fails without it).
    at = ahserver.wait_until(lambda: ev.settled_at(name, state, t0), 2, "the event", None)
    check(at is not None, "no '%s' event for %s after agenthold %s" % (state, name, " ".join(args)))
    lag = t1 - at
    check(lag >= -LISTENER_SLACK_S, "agenthold %s exited %.3f s BEFORE the '%s' event"
          % (" ".join(args), -lag, state))
    lag = max(lag, 0.0)
    check(lag <= BOUND_S, "agenthold %s exited %.3f s after the '%s' event (bound %.1f s): "
          "it does not follow the event stream" % (" ".join(args), lag, state, BOUND_S))
    print("  agenthold %-28s exited %5.1f ms after '%s' (took %.0f ms)"
          % (" ".join(args), lag * 1000, state, (t1 - t0) * 1000))
    return lag


class Proxy(threading.Thread):
    """A TCP proxy to the server. The event stream's connections are cut
    cut_after_s after they open (mode "cut") or answered 503 (mode
    "refuse"); everything else goes through as it is."""
    def __init__(self, mode, cut_after_s=0.3):
        super().__init__(daemon=True)
        self.mode, self.cut_after_s = mode, cut_after_s
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        self.cut = 0

    def run(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        head = b""
        while b"\r\n\r\n" not in head:
            piece = c.recv(65536)
            if not piece:
                c.close()
                return
            head += piece
        events = head.startswith(b"GET /api/v1/events")
        if events and self.mode == "refuse":
            body = b'{"error":"refused by the test\'s proxy"}'
            c.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
            c.close()
            return
        u = socket.create_connection(("127.0.0.1", API_PORT))
        u.sendall(head)

        def pump(a, b):
            try:
                while True:
                    d = a.recv(65536)
                    if not d:
                        break
                    b.sendall(d)
            except OSError:
                pass
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        threading.Thread(target=pump, args=(c, u), daemon=True).start()
        if events and self.mode == "cut":
            threading.Thread(target=pump, args=(u, c), daemon=True).start()
            time.sleep(self.cut_after_s)
            self.cut += 1
            for s in (c, u):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        else:
            pump(u, c)

    def close(self):
        self.ls.close()


def scenario():
    start_server()
    ev = Events()
    ev.start()
    check(ev.opened.wait(10), "our own event stream did not open")

    print("the CLI ends when the agent settles:")
    timed(ev, "w1", "running", "create", "w1")
    for ms in (300, 700, 1150):
        slow_stop("w1", ms)
        lag = timed(ev, "w1", "sleeping", "stop", "w1")
        timed(ev, "w1", "running", "start", "w1")
    slow_stop("w1", 650)
    timed(ev, "w1", "running", "rebuild", "w1")
    slow_stop("w1", 400)
    timed(ev, "w1", "destroyed", "rm", "w1")
    rc, out, err, _, _ = cli("show", "w1")
    check(rc == 1, "agent w1 is still there after agenthold rm: %s" % out)

    print("the event stream cut in the middle of a wait:")
    timed(ev, "w2", "running", "create", "w2")
    proxy = Proxy("cut", 0.3)
    proxy.start()
    env = dict(ENV, AGENTHOLD_URL="http://127.0.0.1:%d" % proxy.port, AGENTHOLD_TOKEN=token())
    slow_stop("w2", 1500)
    rc, out, err, t0, t1 = cli("stop", "w2", env=env)
    check(proxy.cut >= 1, "the proxy cut no event stream")
    check(rc == 0 and out.strip() == "w2: sleeping",
          "agenthold stop through a cut stream: status %d, %r %r" % (rc, out, err))
    check(err.startswith("agenthold: the server's event stream broke (") and "asking the server" in err,
          "a cut stream is not said clearly: %r" % err)
    proxy.close()

    print("the events route refused:")
    proxy = Proxy("refuse")
    proxy.start()
    env = dict(ENV, AGENTHOLD_URL="http://127.0.0.1:%d" % proxy.port, AGENTHOLD_TOKEN=token())
    rc, out, err, t0, t1 = cli("start", "w2", env=env)
    check(rc == 0 and out.strip() == "w2: running",
          "agenthold start with the events refused: status %d, %r %r" % (rc, out, err))
    check("cannot follow the server's events (the server answered 503: refused by the test's proxy)" in err,
          "a refused stream is not said clearly: %r" % err)
    proxy.close()

    print("the server killed in the middle of a wait:")
    slow_stop("w2", 20000)
    p = subprocess.Popen([BIN, "stop", "w2"], env=ENV, cwd=TMP, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)                 # pacing: a window in which the CLI must not end
    check(p.poll() is None, "agenthold stop ended before the slow stop did")
    server.kill()
    server.wait()
    t_kill = time.monotonic()
    try:
        out, err = p.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise Fail("agenthold stop still waits 15 s after the server was killed")
    took = time.monotonic() - t_kill
    check(p.returncode == 1, "agenthold stop after the server died: status %d" % p.returncode)
    check("the server's event stream broke" in err and "cannot reach the server" in err,
          "the server's death is not said clearly: %r" % err)
    check(took < 5, "agenthold stop took %.1f s to give up after the server died" % took)
    print("  gave up %.2f s after the kill: %s" % (took, err.strip().replace("\n", " | ")))


def main():
    scenario()
    print("e2e.clievents: %d checks passed" % check.count)


if __name__ == "__main__":
    sys.exit(ahserver.run(main, Fail, procs, TMP, LOG))
