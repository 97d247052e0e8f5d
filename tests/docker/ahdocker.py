"""tests/docker/ahdocker.py: what the Python Docker tests share: the Engine
API over the unix socket (never the docker CLI), the test image, the
real server as a process with its CLI, leftovers and clean-up by prefix.

Each test makes one Harness with its own prefix (unique per run: the
test's tag and its pid), pool and ports; everything it makes carries the
prefix, so clean-up finds it by label or name even after a failure."""
import base64
import hashlib
import http.client
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.parse
import zipfile

SOCK = os.environ.get("AH_TEST_DOCKER_SOCKET", "/var/run/docker.sock")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import ahserver  # noqa: E402

SKIP = 77
# AH_TEST_DOCKER_VIA=hostd runs a test as the README's first command runs
# the server (docs/hostd.md, "One command, two processes"): serve as root
# becomes the monitor, the server the agenthold user with the remote
# driver, and a local hostd of its own holds the socket. ctest's
# docker.*.hostd tests set it, so the Docker suite's scenarios also go
# through hostd.
VIA_HOSTD = os.environ.get("AH_TEST_DOCKER_VIA", "") == "hostd"


class Fail(Exception):
    pass


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, timeout=60):
        super().__init__("docker")
        self.unix_timeout = timeout

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.unix_timeout)
        self.sock.connect(SOCK)


def engine_raw(method, path, body=None, content_type="application/json", timeout=60):
    """(status, bytes) from the Docker Engine API."""
    c = UnixHTTP(timeout)
    if body is not None and not isinstance(body, (bytes, bytearray)):
        body = json.dumps(body).encode()
    c.request(method, path, body=body, headers={"Content-Type": content_type})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def engine(method, path, body=None, timeout=60):
    """(status, parsed JSON or None) from the Docker Engine API."""
    st, text = engine_raw(method, path, body, timeout=timeout)
    try:
        return st, json.loads(text) if text else None
    except ValueError:
        return st, None


def engine_up():
    try:
        return engine("GET", "/_ping", timeout=5)[0] == 200
    except OSError:
        return False


def q(s):
    return urllib.parse.quote(s, safe="")


def read_file_from_container(cid, path):
    """The bytes of one file in a container (running or stopped), through the
    archive endpoint; None if it is not there."""
    st, data = engine_raw("GET", "/containers/%s/archive?path=%s" % (cid, q(path)))
    if st != 200:
        return None
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        for m in t.getmembers():
            if m.isfile():
                return t.extractfile(m).read()
    return None


def demux(data):
    """The bytes of a multiplexed stream (no TTY): 8-byte headers, then the bytes."""
    out, i = [], 0
    while i + 8 <= len(data):
        n = int.from_bytes(data[i + 4:i + 8], "big")
        out.append(data[i + 8:i + 8 + n])
        i += 8 + n
    return b"".join(out)


def put_home_file(cid, name, data):
    """Writes a file into /home/agent through the archive endpoint (it
    writes through the container's mounts: this lands in the home volume;
    the server does not see it, so it is no activity). Raises Fail when
    the Engine refuses."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        ti.uid = ti.gid = 1000
        ti.mode = 0o644
        t.addfile(ti, io.BytesIO(data))
    st, body = engine_raw("PUT", "/containers/%s/archive?path=%s" % (cid, q("/home/agent")),
                          buf.getvalue(), content_type="application/x-tar")
    if st != 200:
        raise Fail("writing %s into the home: %d %s" % (name, st, body[:200]))


def exec_in(cid, cmd, timeout=30):
    """Runs cmd (a list) in a running container through the Engine API;
    returns its output (stdout and stderr together) as text."""
    st, j = engine("POST", "/containers/%s/exec" % cid,
                   {"Cmd": cmd, "AttachStdout": True, "AttachStderr": True})
    if st != 201:
        raise Fail("exec in %s: %d %r" % (cid[:12], st, j))
    st, out = engine_raw("POST", "/exec/%s/start" % j["Id"], {"Detach": False, "Tty": False},
                         timeout=timeout)
    return demux(out).decode(errors="replace")


def build_image(tag, files, dockerfile):
    """POST /build with an in-memory context: files maps the name in the
    context to a host path (followed if a link) or to bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        def add_bytes(name, data, mode=0o644):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = mode
            t.addfile(ti, io.BytesIO(data))
        add_bytes("Dockerfile", dockerfile.encode())
        for name, src in files.items():
            if isinstance(src, bytes):
                add_bytes(name, src)
            else:
                t.add(os.path.realpath(src), arcname=name, recursive=True)
    st, out = engine_raw("POST", "/build?t=%s&rm=1&forcerm=1" % q(tag), buf.getvalue(),
                         content_type="application/x-tar", timeout=300)
    if st != 200 or b'"error"' in out:
        raise Fail("building image %s: HTTP %d: %s" % (tag, st, out[-2000:].decode(errors="replace")))


def wheel(path):
    """A pure-Python wheel, made by hand (no build tools): agenthold_probe 1.0."""
    files = {
        "agenthold_probe/__init__.py": b"VALUE = 'probe-ok'\n",
        "agenthold_probe-1.0.dist-info/METADATA":
            b"Metadata-Version: 2.1\nName: agenthold-probe\nVersion: 1.0\n",
        "agenthold_probe-1.0.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("agenthold_probe-1.0.dist-info/RECORD",
                   "".join("%s,,\n" % n for n in files) + "agenthold_probe-1.0.dist-info/RECORD,,\n")


def package_index(root):
    """A PEP 503 simple index under root/simple holding wheel()'s package
    (agenthold-probe, module agenthold_probe, VALUE 'probe-ok')."""
    d = os.path.join(root, "simple", "agenthold-probe")
    os.makedirs(d)
    wheel(os.path.join(d, "agenthold_probe-1.0-py3-none-any.whl"))
    with open(os.path.join(d, "index.html"), "w") as f:
        f.write('<html><body><a href="agenthold_probe-1.0-py3-none-any.whl">'
                'agenthold_probe-1.0-py3-none-any.whl</a></body></html>\n')


def npm_registry(root, base):
    """An npm registry under root/npm, reached at base + "/npm/" (base: the
    server's own URL, written into the packument): one package,
    agenthold-probe 1.0.0, whose module exports 'npm-probe-ok'; its tarball
    under root/npm-tarballs with the integrity npm checks."""
    pkg = {"name": "agenthold-probe", "version": "1.0.0", "main": "index.js"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in (("package/package.json", json.dumps(pkg).encode()),
                           ("package/index.js", b"module.exports = 'npm-probe-ok';\n")):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(data), 0o644
            t.addfile(ti, io.BytesIO(data))
    tgz = buf.getvalue()
    os.makedirs(os.path.join(root, "npm-tarballs"))
    with open(os.path.join(root, "npm-tarballs", "agenthold-probe-1.0.0.tgz"), "wb") as f:
        f.write(tgz)
    dist = {"tarball": base + "/npm-tarballs/agenthold-probe-1.0.0.tgz",
            "shasum": hashlib.sha1(tgz).hexdigest(),
            "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()}
    doc = {"name": "agenthold-probe", "dist-tags": {"latest": "1.0.0"},
           "versions": {"1.0.0": dict(pkg, dist=dist)}}
    os.makedirs(os.path.join(root, "npm"))
    with open(os.path.join(root, "npm", "agenthold-probe"), "w") as f:
        json.dump(doc, f)


def host_service(h):
    """A host service on all addresses (stopped by h's clean-up): answers
    hello-from-host to whoever connects. Its port."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 0))
    s.listen(8)
    s.settimeout(0.5)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, _ = s.accept()
            except OSError:
                continue
            try:
                c.sendall(b"hello-from-host\n")
            finally:
                c.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    h.cleanups.append(lambda: (stop.set(), t.join(), s.close()))
    return s.getsockname()[1]


def connect_cmd(host, port):
    """A shell line that prints OPEN when host:port accepts a connection,
    with whatever the image has (busybox nc, bash's /dev/tcp, python3)."""
    return ("if command -v nc >/dev/null; then nc -w 2 %(h)s %(p)d </dev/null >/dev/null 2>&1 && echo OPEN; "
            "elif [ -x /bin/bash ]; then timeout 3 /bin/bash -c 'echo > /dev/tcp/%(h)s/%(p)d' "
            ">/dev/null 2>&1 && echo OPEN; "
            "elif command -v python3 >/dev/null; then python3 -c 'import socket; "
            "socket.create_connection((\"%(h)s\", %(p)d), 2)' 2>/dev/null && echo OPEN; fi; echo tried"
            % {"h": host, "p": port})


def host_addresses():
    """The host's IPv4 addresses and every gateway of the engine's networks."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    addrs = {a for a in out if ":" not in a and not a.startswith("127.")}
    _, nets = engine("GET", "/networks")
    for n in nets or []:
        for cfg in (n.get("IPAM") or {}).get("Config") or []:
            if cfg.get("Gateway") and ":" not in cfg["Gateway"]:
                addrs.add(cfg["Gateway"])
    return sorted(addrs)


def proc_status(pid):
    """/proc/PID/status as {key: [words]}."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.split()
    return out


def children(pid):
    """The live (not zombie) children of pid."""
    kids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            kids.append(int(p))
    return kids


def zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2:].split()[0] == "Z"


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def fd_links(pid):
    links = []
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            links.append(os.readlink("/proc/%d/fd/%s" % (pid, fd)))
        except OSError:
            pass
    return links


class Harness(ahserver.ServerHarness):
    """One test run: a prefix, a pool, a temp dir, the test image, the
    server (a process on the host, or nothing when the test runs it in a
    container), checks counted."""

    def __init__(self, name, binary, pool, shipped_catalog=False, needs_network=False):
        super().__init__(name, binary, Fail)
        self.tag = "agenthold-test:" + self.prefix
        self.pool = pool
        # Free on every address: the tunnel listens on all of them for the sandboxes.
        self.api_port = ahserver.free_port(fail=Fail, address="0.0.0.0")
        self.tunnel_port = ahserver.free_port(avoid={self.api_port}, fail=Fail, address="0.0.0.0")
        self.extra_images = []
        self.extra_volumes = []
        self.extra_containers = []
        self.cleanups = []
        # All addresses for the tunnel: sandboxes reach it on their network's gateway.
        self.env = ahserver.server_env(self.data, self.api_port, self.tunnel_port, driver="docker",
                                       tunnel_host="", extra={
            "AGENTHOLD_SANDBOX_DEFAULT_IMAGE": self.tag,
            "AGENTHOLD_SANDBOX_DEFAULT_CPUS": "1",
            "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB": "128",
            "AGENTHOLD_SANDBOX_DOCKER_SOCKET": SOCK,
            "AGENTHOLD_SANDBOX_DOCKER_NAME_PREFIX": self.prefix,
            "AGENTHOLD_SANDBOX_DOCKER_NETWORK_POOL": pool,
            # These tests are about the in-process Docker driver (homes
            # under the data dir, the engine behind a proxy, SIGKILL of
            # the process holding the socket): one root process, unless
            # run via hostd (VIA_HOSTD). docker.serve_user runs the
            # default (the server as the agenthold user, a local hostd).
            "AGENTHOLD_SERVER_USER": "none",
        })
        # A sanitized build's sandboxd is dynamic (the sanitizer runtimes do
        # not link statically) and cannot run in a scratch image: its Docker
        # tests (scripts/test's asan phase) deploy the plain build's static
        # one, so the server and hostd under test are the sanitized ones.
        self.sandboxd = os.environ.get("AH_TEST_SANDBOXD") or (
            os.path.join(os.path.dirname(self.bin), "sandboxd") if self.bin else None)
        if os.environ.get("AH_TEST_SANDBOXD"):
            self.env["AGENTHOLD_SANDBOX_SANDBOXD_PATH"] = self.sandboxd
        if VIA_HOSTD:
            self.name += ".hostd"
            del self.env["AGENTHOLD_SERVER_USER"]
            # hostd's socket of this run, not the default's, which another
            # serve may hold; the server's user must reach it and its data
            # directory below the test's.
            self.env["AGENTHOLD_HOSTD_ENDPOINT"] = "ipc://%s/hostd-run/hostd.sock" % self.tmp
            os.chmod(self.tmp, 0o711)
        # These tests are about the driver, not the shipped runtimes: a
        # catalog of their own whose one (default) runtime is the test
        # image, present already, with no network unless needs_network
        # (tests/docker/runtimes_docker.py runs the shipped catalog).
        if not shipped_catalog:
            catalog = os.path.join(self.tmp, "runtimes.json")
            with open(catalog, "w") as f:
                json.dump({"version": 2, "runtimes": [{
                    "alias": "testimage", "image": self.tag, "needs_network": needs_network,
                    "description": "The Docker tests' own busybox image."}]}, f)
            self.env["AGENTHOLD_CATALOG_PATH"] = catalog
        self.url = "http://127.0.0.1:%d" % self.api_port

    def start_server(self, extra_env=None, wait=True, seconds=30, **kw):
        super().start_server(extra_env, wait, seconds, **kw)
        if VIA_HOSTD and wait:
            self.check_hostd_used()

    def kill_server(self):
        """SIGKILL of serve, as a crash would; in the two-process shape its
        hostd and server get SIGTERM from the kernel (PDEATHSIG) and end on
        their own: waited for, so that the next start's /healthz is not
        answered by the old server still shutting down."""
        kids = children(self.server.pid) if self.server and self.server.poll() is None else []
        super().kill_server()
        ahserver.wait_until(lambda: not any(os.path.exists("/proc/%d" % k) and not zombie(k) for k in kids), 60,
                   "serve's hostd and server end after serve was killed", self.fail)

    def check_hostd_used(self):
        """A test run via hostd proves it was: serve's two children are a
        root hostd and the server under another uid, with no Docker
        socket among its files (not the one-process path passing for it)."""
        kids = children(self.server.pid)
        hostd = [k for k in kids if cmdline(k)[:2] == [b"agenthold", b"hostd"]]
        server = [k for k in kids if k not in hostd]
        self.check(len(hostd) == 1 and len(server) == 1,
                   "serve runs a hostd and a server: %r" % [(k, cmdline(k)[:2]) for k in kids])
        self.check(proc_status(hostd[0])["Uid"][0] == "0", "hostd runs as root")
        self.check(proc_status(server[0])["Uid"][0] != "0", "the server does not run as root")
        self.check(not any("docker.sock" in x for x in fd_links(server[0])), "the server holds no Docker socket")

    # -- the engine's view -------------------------------------------------
    def label_filter(self):
        return q(json.dumps({"label": ["agenthold.prefix=" + self.prefix]}))

    def leftovers(self):
        f = self.label_filter()
        _, c = engine("GET", "/containers/json?all=1&filters=" + f)
        _, n = engine("GET", "/networks?filters=" + f)
        _, v = engine("GET", "/volumes?filters=" + f)
        return (c or []), (n or []), ((v or {}).get("Volumes") or [])

    def container(self, agent_id):
        st, j = engine("GET", "/containers/%s-%s/json" % (self.prefix, agent_id))
        return j if st == 200 else None

    def build_test_image(self):
        subprocess.run([os.path.join(HERE, "..", "images", "build-test-image.sh"), self.tag, SOCK],
                       check=True, stdout=subprocess.DEVNULL, timeout=120)

    def cleanup_engine(self):
        """Removes what the run made, sweeping again while something is
        left (a container the engine is still removing holds its volume
        and network; a 409 'removal in progress' is not the end of it)."""
        pf = q(json.dumps({"label": ["agenthold.probe=" + self.prefix]}))
        for _ in range(30):
            self._sweep()
            c, n, v = self.leftovers()
            pc = engine("GET", "/containers/json?all=1&filters=" + pf)[1] or []
            pn = engine("GET", "/networks?filters=" + pf)[1] or []
            if not (c or n or v or pc or pn):
                return
            time.sleep(1)   # pacing: the engine's removals run on its own time

    def _sweep(self):
        for cid in self.extra_containers:
            engine("DELETE", "/containers/%s?force=true&v=true" % cid)
        c, n, v = self.leftovers()
        for x in c:
            engine("DELETE", "/containers/%s?force=true&v=true" % x["Id"])
        c, n, v = self.leftovers()
        for x in n:
            engine("DELETE", "/networks/%s" % x["Id"])
        for x in v:
            engine("DELETE", "/volumes/%s?force=true" % x["Name"])
        # The server's host firewall probe (drivers/docker/probe.c) labels its own.
        pf = q(json.dumps({"label": ["agenthold.probe=" + self.prefix]}))
        _, pc = engine("GET", "/containers/json?all=1&filters=" + pf)
        for x in pc or []:
            engine("DELETE", "/containers/%s?force=true&v=true" % x["Id"])
        _, pn = engine("GET", "/networks?filters=" + pf)
        for x in pn or []:
            engine("DELETE", "/networks/%s" % x["Id"])
        for name in self.extra_volumes:
            engine("DELETE", "/volumes/%s?force=true" % q(name))
        for tag in [self.tag] + self.extra_images:
            engine("DELETE", "/images/%s?force=true" % q(tag))

    # -- the server on the host (ahserver.ServerHarness: start_server, cli, ...)
    def api(self, method, path, body=None, timeout=60):
        status, text = ahserver.request(self.port(), method, path,
                                        json.dumps(body) if body is not None else None,
                                        self.token(), {"Content-Type": "application/json"},
                                        timeout)
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, None

    def finish(self):
        """The end of a scenario: nothing of the prefix is left, and the
        server exits 0 on SIGTERM."""
        c, n, v = self.leftovers()
        self.check(not c and not n and not v, "nothing of the agents is left: %d containers, "
                   "%d networks, %d volumes" % (len(c), len(n), len(v)))
        self.server.terminate()
        self.check(self.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")

    # -- the run -------------------------------------------------------------
    def run(self, scenario, needs_sandboxd=True):
        if not engine_up():
            print("\n*** %s SKIPPED: no Docker Engine at %s ***\n" % (self.name, SOCK),
                  file=sys.stderr)
            shutil.rmtree(self.tmp, ignore_errors=True)
            return SKIP
        if VIA_HOSTD and os.geteuid() != 0:
            print("%s: run via hostd needs root (serve as root starts hostd); as uid %d it would test the "
                  "one-process path instead" % (self.name, os.geteuid()), file=sys.stderr)
            return 1
        if needs_sandboxd and not (self.sandboxd and os.path.exists(self.sandboxd)):
            print("%s: no sandboxd at %s" % (self.name, self.sandboxd), file=sys.stderr)
            return 1
        rc = 1
        ahserver.clean_up_on_signals()     # a pkill'd test still removes its containers
        try:
            self.build_test_image()
            scenario(self)
            print("%s: %d checks passed" % (self.name, self.checks))
            rc = 0
        except (Fail, subprocess.SubprocessError, OSError, ValueError, KeyError, TypeError,
                AttributeError) as e:
            print("FAILED: %s: %s" % (type(e).__name__, e), file=sys.stderr)
            sys.stderr.write("---- server log ----\n" + self.server_log_tail())
        finally:
            self.stop_server()
            for f in self.cleanups:
                try:
                    f()
                except Exception as e:  # clean-up goes on whatever one step did
                    print("clean-up step failed: %s" % e, file=sys.stderr)
            self.cleanup_engine()
            c, n, v = self.leftovers()
            pf = q(json.dumps({"label": ["agenthold.probe=" + self.prefix]}))
            pc = engine("GET", "/containers/json?all=1&filters=" + pf)[1] or []
            pn = engine("GET", "/networks?filters=" + pf)[1] or []
            if c or n or v or pc or pn:
                print("objects left behind with prefix %s: containers %s, networks %s, volumes %s, probes %s %s"
                      % (self.prefix, [(x.get("Names"), x.get("State")) for x in c], [x.get("Name") for x in n],
                         [x.get("Name") for x in v], len(pc), len(pn)), file=sys.stderr)
                rc = 1
            whys = ahserver.verdict([self.server] if self.server else [], [self.log])
            for why in whys:
                print("FAILED: %s" % why, file=sys.stderr)
                rc = 1
            if whys:
                sys.stderr.write(ahserver.sanitizer_report(self.log))
            shutil.rmtree(self.tmp, ignore_errors=True)
        return rc
