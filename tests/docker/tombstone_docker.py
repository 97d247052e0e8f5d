#!/usr/bin/python3
"""tests/docker/tombstone_docker.py: a destroy the Docker Engine could not
be asked for is owed, retried, and done, across a server restart.

The server reaches the Engine through a unix-socket proxy of this test
(every connection relayed to the real socket). With the proxy stopped (the
Engine's API out of reach), a destroy fails: the agent is in error, its
tombstone says the attempts, the next attempt and the driver's error, and
the retry comes back after sandbox.destroy_retry_min (1 s here), doubling
to destroy_retry_max (2 s). The server is stopped, the proxy started again,
the server started again: the retry destroys the sandbox (the Engine has
no container, network or volume of it left), the tombstone and the agent
are gone, and the audit trail says the retry did it.

usage: tombstone_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine. Ports from ahserver.free_port, pool
10.213.240.0/20, prefix dockertombstone<pid>."""
import os
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import SOCK, Harness  # noqa: E402

h = Harness("docker.tombstone", sys.argv[1], "10.213.240.0/20")
h.env["AGENTHOLD_SANDBOX_DESTROY_RETRY_MIN"] = "1s"
h.env["AGENTHOLD_SANDBOX_DESTROY_RETRY_MAX"] = "2s"
h.env["AGENTHOLD_SANDBOX_TTL_CHECK_INTERVAL"] = "200ms"


class Proxy:
    """A unix socket relaying each connection to the Engine's; stop()
    closes the listener and every connection, as an Engine gone away."""

    def __init__(self, path):
        self.path = path
        self.listener = None
        self.conns = []
        self.lock = threading.Lock()

    def start(self):
        if os.path.exists(self.path):
            os.unlink(self.path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(64)
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def stop(self):
        listener, self.listener = self.listener, None
        if listener:
            listener.close()
        if os.path.exists(self.path):
            os.unlink(self.path)
        with self.lock:
            for s in self.conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.conns = []

    def _accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(SOCK)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def tombstones(h):
    st, j = h.api("GET", "/api/v1/tombstones")
    h.check(st == 200, "GET /api/v1/tombstones: %d %r" % (st, j))
    return j["tombstones"]


def scenario(h):
    proxy = Proxy(os.path.join(h.tmp, "engine.sock"))
    h.cleanups.append(proxy.stop)
    proxy.start()
    h.env["AGENTHOLD_SANDBOX_DOCKER_SOCKET"] = proxy.path
    h.start_server()
    a = h.cli("create", "owed")
    h.check(a["state"] == "running", "create -> running: %r" % a["state"])
    aid = a["id"]

    # The Engine out of reach: the destroy fails and is owed.
    proxy.stop()
    st, j = h.api("DELETE", "/api/v1/agents/owed")
    h.check(st == 202, "the destroy is accepted: %d %r" % (st, j))
    a = h.wait_state("owed", "error", 60)
    h.check(a.get("error"), "the agent is in error after the destroy, saying why: %r" % a)
    deadline = time.time() + 30
    while True:
        t = [t for t in tombstones(h) if t["agent_id"] == aid]
        if t and t[0]["attempts"] >= 2:
            break
        h.check(time.time() < deadline, "the destroy is retried while the Engine is away: %r" % t)
        time.sleep(0.2)
    h.check(t[0]["next_attempt_at"] and t[0]["last_error"], "the tombstone says when and why: %r" % t[0])
    print("tombstone after %d attempts: %s" % (t[0]["attempts"], t[0]["last_error"]))
    h.check(h.container(aid) is not None, "the container is still there (nothing was destroyed)")

    # Across a restart: the Engine comes back while the server is down.
    h.server.terminate()
    h.check(h.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")
    proxy.start()
    h.start_server()
    deadline = time.time() + 60
    while [t for t in tombstones(h) if t["agent_id"] == aid]:
        h.check(time.time() < deadline, "the tombstone goes once the destroy succeeds")
        time.sleep(0.2)
    st, _ = h.api("GET", "/api/v1/agents/%s" % aid)
    h.check(st == 404, "the agent is gone: %d" % st)
    c, n, v = h.leftovers()
    h.check(not c and not n and not v, "nothing of it left in the Engine: %d %d %d" % (len(c), len(n), len(v)))
    st, ops = h.api("GET", "/api/v1/agents/%s/operations?operation=state" % aid)
    h.check(st == 200 and ops["operations"][0]["detail"] == "destroyed"
            and ops["operations"][0]["actor"] == "tombstone-retry",
            "the audit trail says the retry destroyed it: %r" % ops["operations"][:3])
    h.server.terminate()
    h.check(h.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")


sys.exit(h.run(scenario))
