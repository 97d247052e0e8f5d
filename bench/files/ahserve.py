"""bench/files/ahserve.py: a real `agenthold serve` for the benchmarks
(bench/files, bench/term, bench/sandboxd import it).

The fake driver (sandboxd in-process), a temporary data directory, ports
from the suite's one allocator (tests/lib/ahserver.py free_port), the
server started by its serve(). Use as a context manager: the
server is stopped (SIGTERM, then SIGKILL after 10 s) and the directory
removed whatever happens, and every process still in its process group is
killed."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "docker"))
import ahserver  # noqa: E402
import ahdocker  # noqa: E402


class BenchError(Exception):
    pass


#  With docker_image: the Docker driver's network pool (one /22 of the
#  test pools' 10.213.0.0/16 that no test uses).
DOCKER_POOL = "10.213.216.0/22"


class Server:
    def __init__(self, binary, prefix="ah-bench-", env=None, docker_image=None):
        self.binary = os.path.abspath(binary)
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.data = os.path.join(self.tmp, "data")
        self.api_port = ahserver.free_port(fail=BenchError)
        self.tunnel_port = ahserver.free_port(avoid={self.api_port}, fail=BenchError,
                                              address="0.0.0.0" if docker_image else "127.0.0.1")
        self.url = "http://127.0.0.1:%d" % self.api_port
        #  No tap: with one, the api's channels take the bus so the tap
        #  sees them (docs/architecture.md); the benchmarks measure the
        #  default path.
        extra = {"AGENTHOLD_LOG": "warn"}
        self.docker_prefix = None
        if docker_image:
            #  The Docker driver, the real static sandboxd in a container
            #  of docker_image (the one runtime of a catalog of its own);
            #  everything it makes carries docker_prefix, removed in close().
            self.docker_prefix = "benchfiles%d" % os.getpid()
            catalog = os.path.join(self.tmp, "runtimes.json")
            with open(catalog, "w") as f:
                json.dump({"version": 2, "runtimes": [{
                    "alias": "bench", "image": docker_image, "needs_network": False,
                    "description": "the benchmark's image"}]}, f)
            extra.update({
                "AGENTHOLD_SANDBOX_DEFAULT_IMAGE": docker_image,
                "AGENTHOLD_SANDBOX_DOCKER_SOCKET": ahdocker.SOCK,
                "AGENTHOLD_SANDBOX_DOCKER_NAME_PREFIX": self.docker_prefix,
                "AGENTHOLD_SANDBOX_DOCKER_NETWORK_POOL": DOCKER_POOL,
                "AGENTHOLD_CATALOG_PATH": catalog,
                #  One root process holding the socket (the in-process
                #  driver), as the figures of bench/README.md were taken:
                #  not the server as `agenthold` beside a hostd of its own
                #  (server.user), which also needs a data directory that
                #  user can reach (mkdtemp's is 0700).
                "AGENTHOLD_SERVER_USER": "none",
            })
        extra.update(env or {})
        self.env = ahserver.server_env(self.data, self.api_port, self.tunnel_port,
                                       driver="docker" if docker_image else "fake",
                                       tunnel_host="" if docker_image else "127.0.0.1", extra=extra)
        self.log_path = os.path.join(self.tmp, "server.log")
        self.proc = None
        self.extra = []             # other processes to end with the server
        self._token = None

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def start(self):
        #  Its own process group, so that close() also ends what it left.
        self.proc = ahserver.serve(self.binary, self.env, self.log_path, cwd=self.tmp, ready=False,
                                   start_new_session=True)
        ahserver.wait_healthy(self.proc, self.api_port, fail=BenchError, tail=self.log_tail)

    def log_tail(self, n=30):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def spawn(self, argv, **kw):
        """A helper process ended (SIGTERM, then SIGKILL) by close()."""
        p = subprocess.Popen(argv, start_new_session=True, **kw)
        self.extra.append(p)
        return p

    def close(self):
        for p in self.extra + ([self.proc] if self.proc else []):
            #  SIGTERM, then SIGKILL to whatever is left in its group.
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
                if sig == signal.SIGTERM and p.poll() is not None:
                    continue
                try:
                    os.killpg(p.pid, sig)
                except OSError:
                    pass
                try:
                    p.wait(wait)
                except subprocess.TimeoutExpired:
                    pass
        self.extra = []
        self.proc = None
        if self.docker_prefix:
            self._docker_cleanup()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _docker_cleanup(self):
        """Every container, network and volume of docker_prefix (the
        agents' and the firewall probe's), by label."""
        for label in ("agenthold.prefix", "agenthold.probe"):
            f = ahdocker.q(json.dumps({"label": ["%s=%s" % (label, self.docker_prefix)]}))
            for x in ahdocker.engine("GET", "/containers/json?all=1&filters=" + f)[1] or []:
                ahdocker.engine("DELETE", "/containers/%s?force=true&v=true" % x["Id"])
            for x in ahdocker.engine("GET", "/networks?filters=" + f)[1] or []:
                ahdocker.engine("DELETE", "/networks/%s" % x["Id"])
            vols = (ahdocker.engine("GET", "/volumes?filters=" + f)[1] or {}).get("Volumes") or []
            for x in vols:
                ahdocker.engine("DELETE", "/volumes/%s?force=true" % x["Name"])

    def container(self, agent_id):
        """The Docker driver's container of the agent (its name)."""
        return "%s-%s" % (self.docker_prefix, agent_id)

    def thread_cpu(self):
        """{thread name: CPU seconds (user + system)} of the server's own
        threads, from /proc/PID/task/*/stat; threads of one name add up."""
        out = {}
        tick = os.sysconf("SC_CLK_TCK")
        base = "/proc/%d/task" % self.proc.pid
        for tid in os.listdir(base):
            try:
                with open("%s/%s/stat" % (base, tid)) as f:
                    st = f.read()
            except OSError:
                continue
            name = st[st.index("(") + 1:st.rindex(")")]
            fields = st[st.rindex(")") + 2:].split()
            out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
        return out

    def rss_kib(self):
        """The server's resident memory now (VmRSS, KiB)."""
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def token(self):
        if self._token is None:
            self._token = ahserver.read_token(self.data)
        return self._token

    def call(self, method, path, body=None, timeout=120):
        """(status, parsed JSON or None)."""
        status, text = ahserver.request(self.api_port, method, path, body, self.token(),
                                        timeout=timeout)
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            raise BenchError("%s %s: answer is not JSON: %r" % (method, path, text[:200]))

    def create_agent(self, name):
        """Create an agent and wait until it runs; returns its id."""
        st, j = self.call("POST", "/api/v1/agents?wait=1", {"name": name})
        if st != 201 and st != 200 or not j or j.get("state") != "running":
            raise BenchError("create %s: %d %r\n%s" % (name, st, j, self.log_tail()))
        return j["id"]

    def agent_dir(self, agent_id):
        """The fake driver's directory of the agent (boot.json, home/)."""
        return os.path.join(self.data, "fake", agent_id)


#  The noise bound of bench/README.md: a figure misses its goal only when
#  it is more than this fraction on the wrong side of it.
NOISE = 0.10
GOAL_MISSED = 3                     # exit status when a goal is missed


class Goals:
    """Goals of one benchmark run: at_least / at_most record a figure
    against its goal and return the words to print after it; status() is
    0, or GOAL_MISSED when one missed by more than NOISE."""
    def __init__(self):
        self.missed = []

    def at_least(self, name, value, goal):
        ok = value >= goal * (1 - NOISE)
        if not ok:
            self.missed.append(name)
        return "goal >= %g: %s" % (goal, "met" if value >= goal else "within noise" if ok else "MISSED")

    def at_most(self, name, value, goal):
        ok = value <= goal * (1 + NOISE)
        if not ok:
            self.missed.append(name)
        return "goal <= %g: %s" % (goal, "met" if value <= goal else "within noise" if ok else "MISSED")

    def status(self, prog):
        if self.missed:
            print("%s: goal missed beyond the %d%% noise bound: %s"
                  % (prog, NOISE * 100, ", ".join(self.missed)))
            return GOAL_MISSED
        return 0


def median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def percentile(v, p):
    """Nearest-rank percentile (p in 0..100)."""
    s = sorted(v)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]
