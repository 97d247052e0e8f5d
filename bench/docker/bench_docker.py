#!/usr/bin/python3
"""bench/docker/bench_docker.py: create -> running and sleeping -> running
through the real server (API, lifecycle, the Docker driver, the tunnel, the
real static sandboxd), timed to sandboxd's hello, against a bare Engine API
doing the least that gets the same process up and connected, in the same
run, interleaved round by round.

Ours: from the API request (POST /api/v1/agents for a create, POST
/api/v1/agents/{name}/start for a wake) to the event stream's `running`
for the agent, which lifecycle publishes once sandboxd said hello on the
tunnel with the boot's token (GET /api/v1/events, opened before).

Bare: the same image, the same static sandboxd as its entry point, the
same HostConfig (init, limits, capabilities, tmpfs, the home bound to a
directory of the host as ours is), a bridge network with a way out (what
the runtime's needs_network makes ours), a boot.json in a bind-mounted directory
whose tunnel_url is a unix socket of the bench's; timed from the first
engine call (POST /networks/create for a create, POST /containers/{id}/start
for a wake) to the bench's accept() of sandboxd's connection (a thread
blocked in accept() from before the first call): the
container's process is up and has made its connection, the point that
matches our hello (which comes after that connection, a WebSocket upgrade
and one yamux round).

The runtime is the Docker tests' busybox image (tests/images), in a
catalog of the bench's own with needs_network true (so our create makes a
network as the bare one does, under sandbox.docker.egress bridge: the
default, tunnel, makes none): the shipped catalog's images take minutes
to build and are not what is measured. The server runs with
AGENTHOLD_LOG=debug: its driver logs each engine call's time, which gives
our side's shares.

usage: bench_docker.py [--report] [--rounds N] AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine, 3 when a ratio misses its goal by more
than the noise bound (bench/README.md), 0 with --report whatever the
ratios. Ports from ahserver.free_port, pools 10.214.96.0/20 (ours) and 10.214.112.0/24
(bare)."""
import json
import os
import re
import select
import shutil
import socket
import statistics
import sys
import threading
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "docker"))
from ahdocker import engine, read_file_from_container, Harness, Fail  # noqa: E402

GOAL = 1.05
NOISE = 0.10
BARE_SUBNET = "10.214.112.%d/28"


def verdict(ratio, goal):
    if ratio <= goal:
        return "met"
    if ratio <= goal * (1 + NOISE):
        return "within noise"
    return "MISSED"


class Events:
    """The server's event stream, read on a thread: the monotonic time at
    which each agent name was last seen reaching each state."""

    def __init__(self, port, token):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.sendall(("GET /api/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                           "Accept: text/event-stream\r\n\r\n" % token).encode())
        self.seen = {}
        self.cond = threading.Condition()
        self.open = threading.Event()
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()
        if not self.open.wait(10):
            raise Fail("the event stream did not open")

    def read(self):
        buf = b""
        self.sock.settimeout(None)
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return
            now = time.monotonic()
            if not chunk:
                return
            buf += chunk
            if b"agenthold events" in buf:
                self.open.set()
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.startswith(b"data: "):
                    continue
                try:
                    e = json.loads(line[6:])
                except ValueError:
                    continue
                with self.cond:
                    self.seen[(e.get("name"), e.get("state"))] = now
                    self.cond.notify_all()

    def clear(self, name):
        with self.cond:
            for k in [k for k in self.seen if k[0] == name]:
                del self.seen[k]

    def wait(self, name, state, seconds=60):
        deadline = time.monotonic() + seconds
        with self.cond:
            while (name, state) not in self.seen:
                if (name, "error") in self.seen:
                    raise Fail("%s went to error" % name)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Fail("%s: no %s event within %d s" % (name, state, seconds))
                self.cond.wait(left)
            return self.seen[(name, state)]

    def close(self):
        self.sock.close()


class Bare:
    """The bare side: one container at a time, listened for on a unix
    socket of the bench's. image: the harness's test image unless named
    (bench/cli runs the shipped default runtime's)."""

    def __init__(self, h, sandboxd, blocked, image=None):
        self.h = h
        self.image = image or h.tag
        self.sandboxd = sandboxd
        self.run = os.path.join(h.tmp, "bare-run")
        self.card = os.path.join(h.tmp, "bare-card")
        os.makedirs(self.run, exist_ok=True)
        os.makedirs(self.card, exist_ok=True)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(os.path.join(self.run, "bare.sock"))
        os.chmod(os.path.join(self.run, "bare.sock"), 0o666)
        self.listener.listen(64)
        self.blocked = blocked

    def drain(self):
        """Connections left from a sandboxd that retried: accepted and closed."""
        while select.select([self.listener], [], [], 0)[0]:
            c, _ = self.listener.accept()
            c.close()

    def arm(self):
        """A thread blocked in accept() from now on, so the connection's
        time is when it came, not when the engine's answer did."""
        self.got = []
        self.acceptor = threading.Thread(target=self.accept_one, daemon=True)
        self.acceptor.start()

    def accept_one(self):
        if select.select([self.listener], [], [], 30)[0]:
            c, _ = self.listener.accept()
            self.got.append(time.monotonic())
            c.close()

    def accepted(self):
        self.acceptor.join()
        if not self.got:
            raise Fail("the bare sandboxd did not connect within 30 s")
        return self.got[0]

    def card_for(self, r, subnet_base):
        card = {"agent_id": "b%011x" % r, "token": "bench",
                "tunnel_url": "ws+unix:///run/agenthold/bare.sock:/tunnel"}
        if self.blocked is not None:
            card["blocked"] = self.blocked
        path = os.path.join(self.card, "boot.json")
        with open(path + ".tmp", "w") as f:
            json.dump(card, f)
        os.chmod(path + ".tmp", 0o600)
        os.rename(path + ".tmp", path)

    def create(self, r):
        """(total, steps) of network + create + start to the connection."""
        h = self.h
        net = "%s-barenet%d" % (h.prefix, r)
        name = "%s-bare%d" % (h.prefix, r)
        labels = {"agenthold.prefix": h.prefix}
        self.card_for(r, 0)
        home = os.path.join(h.tmp, "barehome%d" % r)
        os.makedirs(home, exist_ok=True)
        self.drain()
        self.arm()
        body = {
            "Image": self.image, "Hostname": "bare%d" % r, "Entrypoint": ["/opt/agenthold/sandboxd"],
            "Cmd": [], "User": "0:0", "Env": ["AGENTHOLD_USER="], "Labels": labels,
            "HostConfig": {
                "Init": True, "NanoCpus": 1000000000, "Memory": 128 << 20, "PidsLimit": 100,
                "Mounts": [
                    # The home bound to a directory of the host, as ours is
                    # (a volume bound to <data_dir>/homes/<id>): the same
                    # mounts at each start.
                    {"Type": "bind", "Source": home, "Target": "/home/agent"},
                    {"Type": "bind", "Source": self.sandboxd, "Target": "/opt/agenthold/sandboxd",
                     "ReadOnly": True},
                    {"Type": "bind", "Source": self.run, "Target": "/run/agenthold", "ReadOnly": True},
                    {"Type": "bind", "Source": self.card, "Target": "/etc/agenthold", "ReadOnly": True},
                    {"Type": "tmpfs", "Target": "/tmp", "TmpfsOptions": {"SizeBytes": 64 << 20,
                                                                          "Mode": 0o1777}}],
                "NetworkMode": net, "RestartPolicy": {"Name": "no"}, "CapDrop": ["ALL"],
                "CapAdd": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID", "NET_ADMIN"],
                "SecurityOpt": ["no-new-privileges"],
                "Sysctls": {"net.ipv6.conf.all.disable_ipv6": "1",
                            "net.ipv6.conf.default.disable_ipv6": "1"}},
            "NetworkingConfig": {"EndpointsConfig": {net: {"IPAMConfig": {
                "IPv4Address": BARE_SUBNET.split("/")[0] % (16 * (r % 16) + 8)}}}},
        }
        subnet = BARE_SUBNET % (16 * (r % 16))
        gateway = BARE_SUBNET.split("/")[0] % (16 * (r % 16) + 1)
        t0 = time.monotonic()
        # The kind of network the runtime asks for (needs_network: a bridge
        # with a way out, as the driver makes it).
        st, _ = engine("POST", "/networks/create", {
            "Name": net, "Driver": "bridge", "Internal": False, "Attachable": False,
            "CheckDuplicate": True, "Labels": labels,
            "IPAM": {"Config": [{"Subnet": subnet, "Gateway": gateway}]}})
        t1 = time.monotonic()
        if st != 201:
            raise Fail("bare network create: HTTP %d" % st)
        st, _ = engine("POST", "/containers/create?name=%s" % name, body)
        t2 = time.monotonic()
        if st != 201:
            raise Fail("bare container create: HTTP %d" % st)
        st, _ = engine("POST", "/containers/%s/start" % name)
        t3 = time.monotonic()
        if st != 204:
            raise Fail("bare start: HTTP %d" % st)
        t4 = self.accepted()
        return t4 - t0, {"POST /networks/create": t1 - t0, "POST /containers/create": t2 - t1,
                         "POST /containers/{id}/start": t3 - t2,
                         "connected after the start's answer": t4 - t3}

    def stop(self, r):
        st, _ = engine("POST", "/containers/%s-bare%d/stop?t=5" % (self.h.prefix, r))
        if st not in (204, 304):
            raise Fail("bare stop: HTTP %d" % st)

    def wake(self, r):
        self.drain()
        self.arm()
        t0 = time.monotonic()
        st, _ = engine("POST", "/containers/%s-bare%d/start" % (self.h.prefix, r))
        t1 = time.monotonic()
        if st != 204:
            raise Fail("bare start: HTTP %d" % st)
        t2 = self.accepted()
        return t2 - t0, {"POST /containers/{id}/start": t1 - t0,
                         "connected after the start's answer": t2 - t1}

    def remove(self, r):
        engine("DELETE", "/containers/%s-bare%d?force=true&v=true" % (self.h.prefix, r))
        engine("DELETE", "/networks/%s-barenet%d" % (self.h.prefix, r))
        shutil.rmtree(os.path.join(self.h.tmp, "barehome%d" % r), ignore_errors=True)


CALL = re.compile(r"\[docker\] engine (\w+) (\S+): (-?\d+) in ([0-9.]+) ms")


def call_kind(method, path):
    path = path.split("?")[0]
    path = re.sub(r"^/v[0-9.]+", "", path)
    for pat, kind in ((r"^/containers/create$", "/containers/create"),
                      (r"^/containers/[^/]+/start$", "/containers/{id}/start"),
                      (r"^/containers/[^/]+/archive$", "/containers/{id}/archive"),
                      (r"^/containers/[^/]+/json$", "/containers/{id}/json"),
                      (r"^/networks/create$", "/networks/create"),
                      (r"^/volumes/create$", "/volumes/create"),
                      (r"^/volumes/[^/]+$", "/volumes/{name}"),
                      (r"^/images/.+/json$", "/images/{name}/json")):
        if re.match(pat, path):
            return "%s %s" % (method, kind)
    return "%s %s" % (method, path)


class Ours:
    def __init__(self, h):
        self.h = h
        self.events = Events(h.port(), h.token())
        self.log_at = 0
        self.ids = {}

    def skip(self):
        """Forget what the log holds so far."""
        with open(self.h.log) as f:
            f.seek(0, 2)
            self.log_at = f.tell()

    def calls(self, agent_id):
        """The engine calls the server logged for agent_id since skip():
        paths naming it, and the creates that name nothing (the
        reconciler's listings are not the agent's). The driver logs a call
        when it returns, which may be after the hello: waits for the
        start's line."""
        deadline = time.monotonic() + 10
        while True:
            with open(self.h.log) as f:
                f.seek(self.log_at)
                text = f.read()
            if re.search(r"engine POST \S*/containers/[^/ ]*%s/start:" % agent_id, text) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        out = {}
        for m in CALL.finditer(text):
            k = call_kind(m.group(1), m.group(2))
            if agent_id in m.group(2) or k in ("POST /networks/create", "POST /volumes/create"):
                out[k] = out.get(k, 0.0) + float(m.group(4)) / 1000
        return out

    def create(self, r):
        name = "ours%d" % r
        self.skip()
        t0 = time.monotonic()
        st, a = self.h.api("POST", "/api/v1/agents", {"name": name})
        if st != 201:
            raise Fail("create %s: HTTP %d %r" % (name, st, a))
        t1 = self.events.wait(name, "running")
        self.ids[r] = a["id"]
        return t1 - t0, self.calls(a["id"]), a["id"]

    def stop(self, r):
        name = "ours%d" % r
        self.events.clear(name)
        st, a = self.h.api("POST", "/api/v1/agents/%s/stop" % name)
        if st not in (200, 202):
            raise Fail("stop %s: HTTP %d %r" % (name, st, a))
        self.events.wait(name, "sleeping")

    def wake(self, r):
        name = "ours%d" % r
        self.events.clear(name)
        self.skip()
        t0 = time.monotonic()
        st, a = self.h.api("POST", "/api/v1/agents/%s/start" % name)
        if st not in (200, 202):
            raise Fail("start %s: HTTP %d %r" % (name, st, a))
        t1 = self.events.wait(name, "running")
        return t1 - t0, self.calls(self.ids[r])

    def remove(self, r):
        self.h.api("DELETE", "/api/v1/agents/ours%d?wait=1" % r)


def shares(title, total, steps):
    """Lines of each step's median ms and its share of the median total."""
    lines = []
    keys = sorted({k for s in steps for k in s}, key=lambda k: -statistics.median(
        [s.get(k, 0.0) for s in steps]))
    accounted = 0.0
    for k in keys:
        v = statistics.median([s.get(k, 0.0) for s in steps])
        accounted += v
        lines.append("    %-34s %7.1f ms  %3.0f%%" % (k, v * 1000, 100 * v / total))
    return ["  %s: %.1f ms (median)" % (title, total * 1000)] + lines, accounted


def main():
    args = sys.argv[1:]
    report = "--report" in args
    rounds = 7
    if "--rounds" in args:
        rounds = int(args[args.index("--rounds") + 1])
    pos = [a for i, a in enumerate(args) if not a.startswith("--")
           and not (i > 0 and args[i - 1] == "--rounds")]
    if len(pos) != 1:
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 2
    # The runtime: the test image, with a network (bench/README.md says why).
    h = Harness("bench.docker", pos[0], "10.214.96.0/20", needs_network=True)
    h.env["AGENTHOLD_LOG"] = "debug"
    h.env["AGENTHOLD_SANDBOX_IDLE_MINUTES"] = "600"
    # The bridge way (a network of its own), as the bare run makes one: the
    # default, tunnel, makes no network and would flatter ours.
    h.env["AGENTHOLD_SANDBOX_DOCKER_EGRESS"] = "bridge"
    sandboxd = os.path.join(os.path.dirname(os.path.abspath(pos[0])), "sandboxd")
    result = {}

    def scenario(h):
        h.start_server()
        ours = Ours(h)
        bare = None
        oc, bc, ow, bw = [], [], [], []
        ocs, bcs, ows, bws = [], [], [], []
        try:
            # A warm-up of each side, untimed: the first create pays for
            # the engine's caches (the image's layers, the sandboxd file).
            _, _, aid = ours.create(99)
            # The same blocked routes for the bare sandboxd as ours got
            # (the card inside the container: a server before the boot
            # directory wrote it there).
            card = read_file_from_container("%s-%s" % (h.prefix, aid), "/etc/agenthold/boot.json")
            if card is None:
                raise Fail("no boot card in our sandbox")
            blocked = json.loads(card).get("blocked")
            bare = Bare(h, sandboxd, blocked)
            bare.create(99)
            ours.remove(99)
            bare.remove(99)
            for r in range(rounds):
                sides = [("ours", ours), ("bare", bare)]
                if r % 2:
                    sides.reverse()
                for which, side in sides:
                    out = side.create(r)
                    (oc if which == "ours" else bc).append(out[0])
                    (ocs if which == "ours" else bcs).append(out[1])
                for which, side in sides:
                    side.stop(r)
                for which, side in sides:
                    t, s = side.wake(r)
                    (ow if which == "ours" else bw).append(t)
                    (ows if which == "ours" else bws).append(s)
                for which, side in sides:
                    side.remove(r)
        finally:
            ours.events.close()
            if bare:
                bare.listener.close()
        for name, o, b, os_, bs in (("create -> running", oc, bc, ocs, bcs),
                                    ("sleeping -> running", ow, bw, ows, bws)):
            mo, mb = statistics.median(o), statistics.median(b)
            print("%s, median of %d interleaved rounds" % (name, rounds))
            lines, acc = shares("ours, API request -> sandboxd's hello (event stream)", mo, os_)
            print("\n".join(lines))
            print("    %-34s %7.1f ms  %3.0f%%  (server, sandboxd's boot, dial, hello%s)" % (
                "the rest", (mo - acc) * 1000, 100 * (mo - acc) / mo,
                "; the network's calls overlap the others'" if name.startswith("create") else ""))
            lines, _ = shares("bare, first engine call -> sandboxd's connection accepted", mb, bs)
            print("\n".join(lines))
            # A round's two runs are back to back, so the machine's load
            # hits both: the median of the rounds' own ratios is the goal's
            # figure (as in bench/hostd); the ratio of the medians is shown.
            per = [x / y for x, y in zip(o, b)]
            print("  ratio of the medians ours/bare: %.3f" % (mo / mb))
            print("  median of the rounds' ratios  : %.3f (rounds: %s)" % (
                statistics.median(per), " ".join("%.2f" % x for x in per)))
            result[name] = statistics.median(per)
        h.finish()

    rc = h.run(scenario)
    if rc != 0:
        return rc
    missed = 0
    for name in ("create -> running", "sleeping -> running"):
        v = verdict(result[name], GOAL)
        missed += v == "MISSED"
        print("goal: %s <= %.2fx bare (to sandboxd connected): %s (%.3f)" % (name, GOAL, v, result[name]))
    return 3 if missed and not report else 0


if __name__ == "__main__":
    sys.exit(main())
