"""tests/kubernetes/ahk8s.py: what the tests and the benchmark of the
kubernetes driver share: the test cluster (tests/k8s/up: its kubeconfig,
kubectl, the node's address), the images it needs (the sandboxd image made
by scripts/sandboxd-image, the shipped busybox runtime built by the product
in Docker, both imported with tests/k8s/import-image), a namespace of the
run's own, and `agenthold serve` with `sandbox.driver: kubernetes`.

No cluster answering: a loud SKIPPED line and exit 77 (reported skipped,
never passed). Everything the run made (namespace, server, temp dir) is
removed even on failure; the images are kept (as a user's nodes keep them)."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))
import ahserver  # noqa: E402

SKIP = 77
K8S_DIR = os.environ.get("AH_TEST_K8S_DIR", "/tmp/agenthold-k8s")
KUBECONFIG = os.path.join(K8S_DIR, "admin.kubeconfig")
KUBECTL = os.path.join(K8S_DIR, "bin", "kubectl")
# The cluster's scripts (tests/k8s/); another checkout's with AH_TEST_K8S_TOOLS.
TOOLS = os.environ.get("AH_TEST_K8S_TOOLS", os.path.join(SRC, "tests", "k8s"))
SANDBOXD_IMAGE = "agenthold/sandboxd:k8stest"
RUNTIME = "busybox"                     # the shipped runtime the tests create agents with
RUNTIME_IMAGE = "agenthold/busybox:2"


class Fail(Exception):
    pass


def node_ip():
    out = subprocess.run(["ip", "-4", "route", "get", "1.1.1.1"], capture_output=True, text=True).stdout
    parts = out.split()
    return parts[parts.index("src") + 1] if "src" in parts else None


def kubectl(*args, ns=None, check=True, timeout=60, stdin=None):
    cmd = [KUBECTL, "--kubeconfig", KUBECONFIG] + (["-n", ns] if ns else []) + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=stdin)
    if check and p.returncode != 0:
        raise Fail("kubectl %s: %s" % (" ".join(args), p.stderr.strip()))
    return p


def kjson(*args, ns=None):
    p = kubectl(*(list(args) + ["-o", "json"]), ns=ns, check=False)
    return json.loads(p.stdout) if p.returncode == 0 else None


def cluster_up():
    if not (os.path.exists(KUBECONFIG) and os.access(KUBECTL, os.X_OK)):
        return False
    try:
        return kubectl("get", "--raw", "/readyz", check=False, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def docker_image_present(image):
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0


class Harness(ahserver.ServerHarness):
    """One run: a namespace and prefix of its own, the server, checks counted."""

    def __init__(self, name, binary):
        super().__init__(name, binary, Fail)
        self.sandboxd = os.path.join(os.path.dirname(self.bin), "sandboxd")
        self.ns = "ah-" + self.prefix
        self.ns_made = False
        self.server_image = None        # a tag: import_images makes it with scripts/server-image too
        self.node_ip = node_ip()
        self.api_port = ahserver.free_port(fail=Fail)
        self.tunnel_port = ahserver.free_port(avoid={self.api_port}, fail=Fail)
        self.env = ahserver.server_env(self.data, self.api_port, self.tunnel_port,
                                       driver="kubernetes", tunnel_host="", extra={
            "AGENTHOLD_SANDBOX_DEFAULT_CPUS": "0.5",
            "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB": "128",
            "AGENTHOLD_SANDBOX_DOCKER_NAME_PREFIX": self.prefix,
            "AGENTHOLD_SANDBOX_KUBERNETES_KUBECONFIG": KUBECONFIG,
            "AGENTHOLD_SANDBOX_KUBERNETES_NAMESPACE": self.ns,
            "AGENTHOLD_SANDBOX_KUBERNETES_HOME_SIZE": "1Gi",
            "AGENTHOLD_SANDBOX_KUBERNETES_SANDBOXD_IMAGE": SANDBOXD_IMAGE,
            "AGENTHOLD_SANDBOX_KUBERNETES_TUNNEL_URL": "ws://%s:%d/tunnel" % (self.node_ip, self.tunnel_port),
            "AGENTHOLD_SANDBOX_KUBERNETES_IMAGE_PULL_POLICY": "IfNotPresent",
        })
        self.url = "http://127.0.0.1:%d" % self.api_port
        self.cleanups = []              # run at the end, whatever happened (a scenario's upstreams)

    # -- images ---------------------------------------------------------------
    def build_runtime_in_docker(self, alias=RUNTIME, image=RUNTIME_IMAGE, seconds=240):
        """A shipped runtime's image (alias, tagged image as the catalog
        makes it), built by the product: a short `agenthold serve` with the
        docker driver and a catalog of that runtime alone prewarms it.
        Nothing to do when Docker has it (docker.shipped_images made it)."""
        if docker_image_present(image):
            return
        with open(os.path.join(SRC, "catalog", "runtimes.json")) as f:
            shipped = json.load(f)
        rt = [r for r in shipped["runtimes"] if r["alias"] == alias]
        self.check(rt and rt[0].get("image", image) == image, "the shipped catalog has %s as %s" % (alias, image))
        bdir = os.path.join(self.tmp, "build-" + alias)
        os.makedirs(bdir)
        os.symlink(os.path.join(SRC, "catalog", "images"), os.path.join(bdir, "images"))
        with open(os.path.join(bdir, "runtimes.json"), "w") as f:
            json.dump({"version": shipped["version"], "runtimes": rt}, f)
        port = ahserver.free_port(fail=Fail)
        tport = ahserver.free_port(avoid={port}, fail=Fail)
        env = ahserver.server_env(os.path.join(bdir, "data"), port, tport, driver="docker", extra={
            "AGENTHOLD_CATALOG_PATH": os.path.join(bdir, "runtimes.json"),
            "AGENTHOLD_SANDBOX_DOCKER_NAME_PREFIX": self.prefix + "build",
            # Only its builder is wanted: one process, no local hostd.
            "AGENTHOLD_SERVER_USER": "none"})
        procs = []
        try:
            # Ready when the image it prewarms is there.
            ahserver.serve(self.bin, env, os.path.join(bdir, "server.log"), cwd=bdir, procs=procs,
                           fail=Fail, seconds=seconds, ready=lambda: docker_image_present(image))
        except Fail as e:
            raise Fail("building %s in Docker failed: %s" % (image, e))
        finally:
            ahserver.stop_all(procs)

    def import_runtime(self, alias, image, seconds=600):
        """Another shipped runtime (the default, debian, say) in the
        cluster: made in Docker as the product makes it, then imported."""
        self.build_runtime_in_docker(alias, image, seconds)
        p = subprocess.run([os.path.join(TOOLS, "import-image"), image], capture_output=True, text=True,
                           timeout=600)
        self.check(p.returncode == 0, "import-image %s: %s" % (image, p.stderr.strip()))
        print(p.stdout.strip())

    def import_images(self):
        p = subprocess.run([os.path.join(SRC, "scripts", "sandboxd-image"), self.sandboxd, SANDBOXD_IMAGE],
                           capture_output=True, text=True, timeout=120)
        self.check(p.returncode == 0, "scripts/sandboxd-image: %s" % p.stderr.strip())
        images = [SANDBOXD_IMAGE, RUNTIME_IMAGE]
        if self.server_image:
            p = subprocess.run([os.path.join(SRC, "scripts", "server-image"), self.bin, self.server_image],
                               capture_output=True, text=True, timeout=300)
            self.check(p.returncode == 0, "scripts/server-image: %s" % p.stderr.strip())
            print(p.stdout.strip())
            images.append(self.server_image)
        self.build_runtime_in_docker()
        imp = os.path.join(TOOLS, "import-image")
        self.check(os.access(imp, os.X_OK), "the cluster's import-image script at %s" % imp)
        p = subprocess.run([imp] + images, capture_output=True, text=True, timeout=300)
        self.check(p.returncode == 0, "import-image: %s" % p.stderr.strip())

    # -- the cluster's view --------------------------------------------------------
    def kubectl(self, *args, check=True, timeout=60):
        return kubectl(*args, ns=self.ns, check=check, timeout=timeout)

    def get(self, kind, name):
        return kjson("get", kind, name, ns=self.ns)

    def pod(self, aid):
        return self.get("pod", "%s-%s" % (self.prefix, aid))

    def claim(self, aid):
        return self.get("pvc", "%s-home-%s" % (self.prefix, aid))

    def leftovers(self):
        """Everything in the namespace (not only what carries our labels)."""
        j = kjson("get", "pods,pvc,secrets,networkpolicies,configmaps", ns=self.ns) or {"items": []}
        # The namespace's own (kube-root-ca.crt) is the cluster's, not ours.
        return [i["kind"] + "/" + i["metadata"]["name"] for i in j["items"]
                if i["metadata"]["name"] != "kube-root-ca.crt"]

    def wait_for(self, what, fn, seconds=60):
        return ahserver.wait_until(fn, seconds, what, Fail, 0.3)

    # -- the server (ahserver.ServerHarness: start_server, cli, wait_state, ...)
    def file_round_trip(self, name, size, path="f.bin"):
        """size random bytes written into name's home with `fs put`, read
        back with `fs get` and with sha256sum in the sandbox, both checked:
        their sha256."""
        data = os.urandom(size)
        want = hashlib.sha256(data).hexdigest()
        local = os.path.join(self.tmp, "put.bin")
        with open(local, "wb") as f:
            f.write(data)
        rc, _, err = self.run_cli("fs", "put", name, path, local)
        self.check(rc == 0, "fs put: %s" % err)
        back = os.path.join(self.tmp, "back.bin")
        rc, _, err = self.run_cli("fs", "get", name, path, back)
        self.check(rc == 0, "fs get: %s" % err)
        with open(back, "rb") as f:
            self.check(hashlib.sha256(f.read()).hexdigest() == want, "fs get returns what fs put wrote (sha256)")
        self.check(self.home_sha(name, path) == want, "sha256sum in the sandbox matches")
        return want

    def api(self, method, path, expect=None, body=None, timeout=60):
        """(status, JSON or None) from the server's API."""
        return ahserver.call_json(self.port(), self.token(), method, path, body=body, expect=expect,
                                  check=self.check if expect is not None else None, timeout=timeout)

    def tree_and_hostile(self, name):
        """The tree of a running agent (sandboxd's fs.tree on this driver)
        against the files written in it and what find sees there; hostile
        paths refused on the tree and the files routes alike."""
        rc, out = self.sh(name, "cd /home/agent && mkdir -p t/a/b/c t/node_modules t/e"
                          " && echo deep > t/a/b/c/deep.txt && echo x > t/x.txt"
                          " && echo m > t/node_modules/m.js && echo s > t/.agenthold-s"
                          " && ln -s /etc t/out && ln -s a t/in && ln -s ../../f.bin t/up"
                          " && printf v > \"t/$(printf 'n\\377')\""
                          " && find t -mindepth 1 ! -name 'n?' | sort")
        self.check(rc == 0, "files written for the tree: %d %r" % (rc, out))
        found = {p for p in out.split("\n") if p and "node_modules" not in p and ".agenthold" not in p}
        base = "/api/v1/agents/%s" % name
        status, t = self.api("GET", base + "/tree?path=t", expect=200)
        paths = {e["path"] for e in t["entries"]}
        self.check(paths == found | {"t/n?"},
                   "the tree lists what find sees (a name not UTF-8 as '?'): %r vs %r"
                   % (sorted(paths), sorted(found)))
        kinds = {e["path"]: (e["type"], e["depth"]) for e in t["entries"]}
        self.check(kinds.get("t/a/b/c/deep.txt") == ("file", 4) and kinds.get("t/a") == ("dir", 1)
                   and kinds.get("t/out") == ("link", 1) and kinds.get("t/in") == ("link", 1),
                   "types and depths: %r" % kinds)
        self.check(not any(p.startswith(("t/out/", "t/in/", "t/up/")) for p in paths),
                   "links listed, never walked (/etc is not in the tree)")
        self.check(t["path"] == "t" and t["count"] == len(t["entries"]) and t["max_depth"] == 6
                   and t["max_entries"] == 2000 and t["incomplete"] is False
                   and t["depth_limit_reached"] is False and t["entries_limit_reached"] is False
                   and t["skipped"] == [],
                   "the Docker tree's shape and limits: %r" % {k: v for k, v in t.items() if k != "entries"})
        e = t["entries"][0]
        self.check(set(e) >= {"path", "name", "type", "size", "mode", "mtime", "depth"},
                   "an entry's fields: %r" % e)
        status, t = self.api("GET", base + "/tree?path=t&all=true", expect=200)
        paths = {e["path"] for e in t["entries"]}
        self.check({"t/node_modules/m.js", "t/.agenthold-s"} <= paths, "all=true shows the hidden names")
        status, t = self.api("GET", base + "/tree", expect=200)
        self.check(t["path"] == "." and any(e["path"] == "t/a/b/c/deep.txt" for e in t["entries"]),
                   "the tree of the home")
        # Hostile paths: refused on the tree and on the files routes.
        for q, want_status in (("..", 400), ("/etc", 400), ("%2e%2e", 400), ("%2Fetc", 400),
                               ("t/../..", 400), ("t/out", 403), ("t/up", 403), ("t/x.txt", 409),
                               ("nothere", 404)):
            status, j = self.api("GET", base + "/tree?path=" + q)
            self.check(status == want_status, "tree ?path=%s: %d (wanted %d): %r" % (q, status, want_status, j))
        for q, ok in (("files/t/out/passwd", (403,)), ("files/t/up", (400, 403)),
                      ("files/..%2f..%2fetc%2fpasswd", (400, 404)), ("fs/file?path=../etc/passwd", (400,)),
                      ("fs/file?path=/etc/passwd", (400,)), ("fs/file?path=t%2fout%2fpasswd", (403,)),
                      ("files?path=t/out", (403,))):
            status, j = self.api("GET", base + "/" + q)
            self.check(status in ok, "%s: %d (wanted one of %r): %r" % (q, status, ok, j))
        status, raw = ahserver.request(self.port(), "GET", base + "/files/t/in/b/c/deep.txt", token=self.token())
        self.check(status == 200 and raw == b"deep\n", "a link inside the home is followed: %d %r" % (status, raw))
        # The server's limits hold on sandboxd's walk: 2,100 files, 2,000 listed.
        rc, out = self.sh(name, "mkdir -p /home/agent/many && cd /home/agent/many"
                          " && for i in $(seq 2100); do : > f$i; done && ls | wc -l", timeout=120)
        self.check(rc == 0 and out.strip() == "2100", "2,100 files made: %d %r" % (rc, out))
        t0 = time.time()
        status, t = self.api("GET", base + "/tree?path=many", expect=200)
        took = time.time() - t0
        self.check(t["count"] == 2000 and len(t["entries"]) == 2000 and t["entries_limit_reached"] is True,
                   "the tree stops at files.tree_max_entries: %d entries, limit reached %r"
                   % (t["count"], t["entries_limit_reached"]))
        print("tree of a running agent on kubernetes: %d entries, hostile paths refused; "
              "2,000 of 2,100 entries through sandboxd in %.3f s" % (len(paths), took))

    def home_sha(self, name, path="f.bin"):
        rc, out = self.sh(name, "sha256sum /home/agent/%s" % path, timeout=120)
        self.check(rc == 0 and out.split(), "sha256sum in the sandbox: %d %r" % (rc, out))
        return out.split()[0]

    def sh(self, name, script, timeout=60):
        """exec as the agent: (status, stdout)."""
        rc, out, err = self.run_cli("exec", name, "--", "sh", "-c", script, timeout=timeout)
        return rc, out

    # -- the run -----------------------------------------------------------------
    def bring_up(self):
        """The cluster answering, brought up with tests/k8s/up when it is not
        and we are root (as k8s.cluster does; taken down again at the end
        unless AH_TEST_K8S_KEEP=1, which scripts/test sets). None when it
        answers; else the reason it cannot here (a skip) or raises Fail."""
        if cluster_up():
            return None
        up = os.path.join(TOOLS, "up")
        if os.geteuid() != 0 or not os.access(up, os.X_OK):
            return "no Kubernetes test cluster answers (%s; bring it up with tests/k8s/up as root)" % KUBECONFIG
        rc = subprocess.run([up], stdin=subprocess.DEVNULL, timeout=3000).returncode
        if rc == 2:
            return "the test cluster cannot come up on this machine (see the tests/k8s/up message above)"
        if rc != 0 or not cluster_up():
            raise Fail("tests/k8s/up failed (exit %d)" % rc)
        self.brought_up = os.environ.get("AH_TEST_K8S_KEEP") != "1"
        return None

    def run(self, scenario):
        self.brought_up = False
        ahserver.clean_up_on_signals()     # a pkill'd test still takes its cluster down
        try:
            why = self.bring_up()
        except (Fail, subprocess.SubprocessError, OSError) as e:
            print("%s: FAILED: %s" % (self.name, e), file=sys.stderr)
            shutil.rmtree(self.tmp, ignore_errors=True)
            return 1
        if why:
            print("\n*** %s SKIPPED: %s ***\n" % (self.name, why), file=sys.stderr)
            shutil.rmtree(self.tmp, ignore_errors=True)
            return SKIP
        if not os.path.exists(self.sandboxd) or not self.node_ip:
            print("%s: no sandboxd next to %s, or no node address" % (self.name, self.bin), file=sys.stderr)
            return 1
        rc = 1
        try:
            self.import_images()
            kubectl("create", "namespace", self.ns)
            self.ns_made = True
            scenario()
            print("%s: %d checks passed" % (self.name, self.checks))
            rc = 0
        except (Fail, subprocess.SubprocessError, OSError, ValueError, KeyError, TypeError,
                AttributeError) as e:
            print("FAILED: %s: %s" % (type(e).__name__, e), file=sys.stderr)
            sys.stderr.write("---- server log ----\n" + self.server_log_tail())
            if self.ns_made:
                sys.stderr.write("---- namespace ----\n" + kubectl(
                    "get", "all,pvc,secrets,networkpolicies", "-o", "wide", ns=self.ns, check=False).stdout)
        finally:
            self.stop_server()
            for f in self.cleanups:
                try:
                    f()
                except Exception as e:  # clean-up goes on whatever one step did
                    print("clean-up step failed: %s" % e, file=sys.stderr)
            if self.ns_made:
                kubectl("delete", "namespace", self.ns, "--wait=true", "--timeout=120s", check=False,
                        timeout=150)
            shutil.rmtree(self.tmp, ignore_errors=True)
            if self.brought_up:
                subprocess.run([os.path.join(TOOLS, "down")], stdin=subprocess.DEVNULL, timeout=600)
        return rc
