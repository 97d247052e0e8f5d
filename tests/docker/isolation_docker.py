#!/usr/bin/python3
"""tests/docker/isolation_docker.py: what a sandbox is and what it can reach,
for a fresh agent of every runtime in the shipped catalog
(catalog/runtimes.json), with the default configuration (no limits, image
or isolation setting given), plus an image whose account is only its USER.

For each agent, the container as the Engine API shows it: every
capability dropped but CHOWN, DAC_OVERRIDE, FOWNER, KILL, SETGID, SETUID;
no-new-privileges; not privileged, no seccomp override; a 64 MiB tmpfs at
/tmp; network mode none; the default limits (2 CPUs, 4096 MiB, 4096 pids);
exactly four mounts (the home volume, sandboxd alone read-only, the tunnel's
socket directory read-only, /tmp). Then inside it, through the product (exec
and `agenthold fs put`, i.e. as the agent): the account is the image's
(`agent`, else the image's USER, else uid 10001) with its supplementary
groups, no capability in effect, NoNewPrivs and seccomp on; the home
belongs to it; `touch /home/agent/x` and `fs put` succeed and make files of
its own; writing outside the home (/, /etc, /opt/agenthold, /run/agenthold)
fails; no network interface but lo; a listener the test opens on 0.0.0.0 of
the host, the tunnel's TCP port and the API's port answer on no host
address. sandboxd dials back (the agent runs, and runs again after a stop
and a start, the home still the agent's).

A runtime of a network (needs_network; the shipped default, debian) has
no network either under the default sandbox.docker.egress (tunnel): what
it runs is pointed at sandboxd's egress proxy, its own curl reaches an
upstream of the test's that the tenant's list names and is refused, with
the rule's sentence, anything else; a connection around the proxy has no
route; the audit has both kinds (docs/egress.md). Its own tools go out
the same way, as they are: pip from the test's index and git over https
from an HTTPS upstream of the test's (a test CA the sandbox is told to
trust), apt from this machine's Debian mirror (deb.debian.org, the
catalog entry's list); each in the audit. A runtime whose image the server cannot build here
is skipped loudly; at least one runtime must be tested.

usage: isolation_docker.py AGENTHOLD_BINARY SOURCE_DIR (sandboxd next to it)
Exits 77 without a Docker Engine. Ports from ahserver.free_port, pool 10.213.192.0/20,
prefix dockerisolation<pid>."""
import functools
import http.server
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import Fail, Harness, build_image, connect_cmd, host_addresses, host_service, npm_registry, package_index  # noqa: E402
import ahserver  # noqa: E402  (on the path ahdocker set)

h = Harness("docker.isolation", sys.argv[1], "10.213.192.0/20")
SOURCE = os.path.abspath(sys.argv[2])
# The default configuration: the harness's own image and limits go.
for k in ("AGENTHOLD_SANDBOX_DEFAULT_IMAGE", "AGENTHOLD_SANDBOX_DEFAULT_CPUS",
          "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB"):
    h.env.pop(k, None)
h.env["AGENTHOLD_CATALOG_PATH"] = os.path.join(SOURCE, "catalog", "runtimes.json")
CAPS = {"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"}
CAP_BITS = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "KILL": 5, "SETGID": 6, "SETUID": 7}
USER_TAG = "agenthold-test-user:" + h.prefix
BUSYBOX = "/bin/busybox"


def user_image():
    """No `agent` account; the image's USER is `worker` (uid 4242, group
    4343, also in group 5555); WORKDIR made the mount point root's."""
    build_image(USER_TAG, {
        "busybox": BUSYBOX,
        "passwd": b"root:x:0:0:root:/root:/bin/sh\nworker:x:4242:4343:w:/home/agent:/bin/sh\n",
        "group": b"root:x:0:\nworker:x:4343:\nextra:x:5555:root,worker\n",
    }, "FROM scratch\nCOPY busybox /bin/busybox\n"
       "RUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n"
       "COPY passwd /etc/passwd\nCOPY group /etc/group\n"
       "WORKDIR /home/agent\nUSER worker\n")
    h.extra_images.append(USER_TAG)


def exec_(name, cmd):
    st, r = h.api("POST", "/api/v1/agents/%s/exec" % name, {"cmd": cmd}, timeout=120)
    h.check(st == 200 and isinstance(r, dict), "%s: exec %r: HTTP %d %r" % (name, cmd, st, r))
    return r


def sh(name, cmd):
    r = exec_(name, cmd)
    h.check(r["status"] == 0, "%s: %r: status %r, stderr %r, stdout's end %r"
            % (name, cmd, r["status"], r["stderr"], r["stdout"][-1500:]))
    return r["stdout"]


def status_field(text, key):
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    return None


def inspect_container(name, aid, networked, memory):
    c = h.container(aid)
    hc = c["HostConfig"]
    h.check(c["State"]["Running"], "%s: the container runs" % name)
    h.check(hc["CapDrop"] == ["ALL"] or [x.upper() for x in hc["CapDrop"]] in (["ALL"], ["CAP_ALL"]),
            "%s: every capability dropped: %r" % (name, hc["CapDrop"]))
    added = {x.upper().replace("CAP_", "") for x in hc["CapAdd"] or []}
    is_net = hc["NetworkMode"] != "none"
    h.check(not is_net, "%s: no network, even for a runtime that needs one (%r): the default "
            "sandbox.docker.egress is the tunnel: %r" % (name, networked, hc["NetworkMode"]))
    want_caps = CAPS | ({"NET_ADMIN"} if is_net else set())
    h.check(added == want_caps, "%s: only sandboxd's capabilities added: %r" % (name, sorted(added)))
    sec = hc.get("SecurityOpt") or []
    h.check(any(x.startswith("no-new-privileges") for x in sec), "%s: no-new-privileges: %r" % (name, sec))
    h.check(not any("seccomp" in x for x in sec) and not hc["Privileged"],
            "%s: the engine's seccomp profile, not privileged: %r" % (name, sec))
    h.check(hc["NetworkMode"] in ("none", "%s-net-%s" % (h.prefix, aid)),
            "%s: network mode none or its own network: %r" % (name, hc["NetworkMode"]))
    h.check(hc["NanoCpus"] == 2 * 10**9 and hc["Memory"] == memory << 20 and hc["PidsLimit"] == 4096,
            "%s: the default limits: %r" % (name, {k: hc[k] for k in ("NanoCpus", "Memory", "PidsLimit")}))
    h.check(c["Config"]["User"] == "0:0" and c["Config"]["Entrypoint"] == ["/opt/agenthold/sandboxd"],
            "%s: sandboxd starts as root: %r %r" % (name, c["Config"]["User"], c["Config"]["Entrypoint"]))
    mounts = {m["Destination"]: m for m in c["Mounts"]}
    base = {"/home/agent", "/opt/agenthold/sandboxd", "/run/agenthold", "/etc/agenthold"}
    h.check(set(mounts) in (base | {"/tmp"}, base),
            "%s: nothing mounted but the home, sandboxd, the tunnel's socket, the boot card's "
            "directory and /tmp: %r" % (name, sorted(mounts)))
    home = mounts["/home/agent"]
    h.check(home["Type"] == "volume" and home["RW"], "%s: the home is a volume: %r" % (name, home))
    sbd = mounts["/opt/agenthold/sandboxd"]
    want = os.path.join(os.path.dirname(h.bin), "sandboxd")
    h.check(sbd["Type"] == "bind" and sbd["Source"] == want and not sbd["RW"],
            "%s: sandboxd alone, read-only (never its directory): %r" % (name, sbd))
    tun = mounts["/run/agenthold"]
    h.check(tun["Type"] == "bind" and tun["Source"] == os.path.join(h.data, "run") and not tun["RW"],
            "%s: the tunnel's socket directory, read-only: %r" % (name, tun))
    card = mounts["/etc/agenthold"]
    h.check(card["Type"] == "bind" and card["Source"] == os.path.join(h.data, "boot", aid)
            and not card["RW"], "%s: the boot card's directory, read-only: %r" % (name, card))
    tmp = [m for m in hc.get("Mounts") or [] if m.get("Target") == "/tmp"]
    h.check(tmp and tmp[0]["Type"] == "tmpfs" and tmp[0]["TmpfsOptions"]["SizeBytes"] == 64 << 20,
            "%s: a 64 MiB tmpfs at /tmp: %r" % (name, tmp))
    return c


def inside(name, aid, want_uid, want_gid, want_groups, service, addrs, networked):
    """Checks through the product, as the agent."""
    ids = sh(name, "id -u; id -g; id -G").split()
    h.check(int(ids[0]) == want_uid and int(ids[1]) == want_gid,
            "%s: commands run as uid %d gid %d: %r" % (name, want_uid, want_gid, ids))
    h.check(set(int(x) for x in ids[2:]) == set(want_groups),
            "%s: with the supplementary groups %r: %r" % (name, want_groups, ids[2:]))
    # The boot card (its token) is root's: the agent can neither read it
    # nor write where it lies.
    card = sh(name, "cat /etc/agenthold/boot.json 2>&1; echo rc=$?; touch /etc/agenthold/x 2>&1; echo rc=$?")
    h.check(card.count("rc=0") == 0 and "token" not in card,
            "%s: the agent cannot read the boot card or write beside it: %r" % (name, card))
    st = sh(name, "cat /proc/self/status")
    h.check(status_field(st, "CapEff") == "0" * 16 and status_field(st, "CapPrm") == "0" * 16,
            "%s: no capability in effect: %r" % (name, status_field(st, "CapEff")))
    bnd = int(status_field(st, "CapBnd"), 16)
    h.check(bnd == sum(1 << b for b in CAP_BITS.values()) | ((1 << 12) if networked else 0),
            "%s: the bounding set is sandboxd's six: %x" % (name, bnd))
    h.check(status_field(st, "NoNewPrivs") == "1" and status_field(st, "Seccomp") == "2",
            "%s: NoNewPrivs 1, Seccomp 2 (filter): %r %r" % (name, status_field(st, "NoNewPrivs"),
                                                           status_field(st, "Seccomp")))
    # Nothing of the server's side in the agent's environment (the driver
    # hands sandboxd the image's USER as AGENTHOLD_USER; sandboxd takes it out).
    env = sh(name, "env")
    h.check("AGENTHOLD_" not in env, "%s: no AGENTHOLD_ variable in the agent's environment: %r"
            % (name, [l for l in env.splitlines() if "AGENTHOLD_" in l]))
    owner = sh(name, "stat -c '%u %g' /home/agent").split()
    h.check([int(x) for x in owner] == [want_uid, want_gid],
            "%s: the home is the agent's: %r" % (name, owner))
    sh(name, "touch /home/agent/x")
    h.check(sh(name, "stat -c %u /home/agent/x").strip() == str(want_uid), "%s: x is the agent's" % name)
    local = os.path.join(h.tmp, "put-%s.txt" % name)
    with open(local, "w") as f:
        f.write("put by %s\n" % name)
    p = h.cli_raw("fs", "put", name, "sub/put.txt", local)
    if p.returncode != 0:            # a PATH one level down needs its directory
        sh(name, "mkdir -p /home/agent/sub")
        p = h.cli_raw("fs", "put", name, "sub/put.txt", local)
    h.check(p.returncode == 0, "%s: agenthold fs put: %d %s" % (name, p.returncode, p.stderr))
    got = sh(name, "cat /home/agent/sub/put.txt; stat -c %u /home/agent/sub/put.txt").split("\n")
    h.check(got[0] == "put by %s" % name and got[1] == str(want_uid),
            "%s: the file put is there and the agent's: %r" % (name, got))
    for path in ("/x", "/etc/x", "/opt/agenthold/x", "/run/agenthold/x", "/usr/x"):
        r = exec_(name, "touch %s" % path)
        h.check(r["status"] != 0, "%s: writing %s fails: %r" % (name, path, r))
    r = exec_(name, "echo t > /tmp/t && cat /tmp/t")
    h.check(r["status"] == 0 and r["stdout"] == "t\n", "%s: /tmp is writable: %r" % (name, r))
    # The network: nothing but lo, and nothing of the host answers.
    ifs = sh(name, "ls /sys/class/net").split()
    h.check(ifs == ["lo"] or (networked and sorted(ifs) == ["eth0", "lo"]),
            "%s: no network interface but lo (and eth0 with a network): %r" % (name, ifs))
    for addr in addrs:
        for port, what in ((service, "a host service on 0.0.0.0"), (h.tunnel_port, "the tunnel's TCP port"),
                           (h.api_port, "the API's port")):
            out = sh(name, connect_cmd(addr, port))
            h.check("tried" in out and "OPEN" not in out,
                    "%s: %s does not answer on %s:%d: %r" % (name, what, addr, port, out))


class Upstream(http.server.BaseHTTPRequestHandler):
    """The test's own upstream on 127.0.0.2: names the path it was asked for."""
    protocol_version = "HTTP/1.0"

    def do_GET(self):
        body = ("hello from the upstream: %s\n" % self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Files(http.server.SimpleHTTPRequestHandler):
    """The test's HTTPS upstream: files (a pip index, a git repository)."""
    def log_message(self, *args):
        pass


_tls_upstream = []


def tls_upstream():
    """An HTTPS server of the test's own on 127.0.0.2, its certificate from
    a test CA made here with openssl (the sandbox is told to trust it, as a
    user would for a private index): a pip index (package_index) and a git
    repository served the dumb way (git update-server-info). Returns its
    port and the CA's PEM; one server for every runtime that asks."""
    if _tls_upstream:
        return _tls_upstream
    d = os.path.join(h.tmp, "tls-upstream")
    www = os.path.join(d, "www")
    os.makedirs(www)

    def run(*args, cwd=None):
        subprocess.run(list(args), cwd=cwd, check=True, capture_output=True, timeout=60)
    ca, cert, key = ahserver.make_test_ca(os.path.join(d, "ca"), "127.0.0.2", "docker.isolation", Fail)
    package_index(www)
    src = os.path.join(d, "src")
    run("git", "init", "-q", src)
    with open(os.path.join(src, "README"), "w") as x:
        x.write("carried by agenthold's egress proxy\n")
    ident = ["-c", "user.email=test@agenthold.invalid", "-c", "user.name=test"]
    run("git", *ident, "add", "README", cwd=src)
    run("git", *ident, "commit", "-qm", "one", cwd=src)
    run("git", "clone", "-q", "--bare", src, os.path.join(www, "repo.git"))
    run("git", "update-server-info", cwd=os.path.join(www, "repo.git"))
    srv = http.server.ThreadingHTTPServer(("127.0.0.2", 0), functools.partial(Files, directory=www))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    h.cleanups.append(srv.shutdown)
    npm_registry(www, "https://127.0.0.2:%d" % srv.server_address[1])
    with open(ca) as x:
        _tls_upstream.extend((srv.server_address[1], x.read()))
    return _tls_upstream


def tools_through_proxy(name, entry):
    """What the runtime's own tools install from, through the proxy as they
    are (the environment sandboxd gives them, no option naming the proxy):
    pip from the test's index and git over https from the test's HTTPS
    upstream (its CA put in the home and named, as a user would for a
    private index), and apt from this machine's Debian mirror, the one the
    image was built from (deb.debian.org on the catalog entry's list). The
    audit has each."""
    port, pem = tls_upstream()
    up = "127.0.0.2:%d" % port
    # The mirror's address: this machine's deb.debian.org sits in a range
    # the proxy refuses whatever the name (docs/egress.md); an admin's entry
    # naming the address opens it, as for the test's own upstreams.
    mirror = socket.getaddrinfo("deb.debian.org", 80, socket.AF_INET)[0][4][0]
    allow = [entry, up, "%s:80" % mirror]
    st, t = h.api("PATCH", "/api/v1/tenants/default", {"egress_allow": allow})
    h.check(st == 200 and t["egress_allow"] == allow, "%s: the tenant's list: %d %r" % (name, st, t))
    sh(name, "cat > ~/test-ca.pem <<'EOF'\n%sEOF" % pem)
    out = sh(name, "curl -sS --max-time 20 --cacert ~/test-ca.pem https://%s/simple/agenthold-probe/" % up)
    h.check("agenthold_probe-1.0-py3-none-any.whl" in out, "%s: curl over https through the proxy: %r"
            % (name, out[:200]))
    # sandboxd points REQUESTS_CA_BUNDLE, PIP_CERT and GIT_SSL_CAINFO at its
    # bundle (the egress CA, docs/egress.md), and those variables outrank
    # pip's --cert and git's http.sslCAInfo: another CA is named by them.
    out = sh(name, "REQUESTS_CA_BUNDLE=~/test-ca.pem pip install -q --no-cache-dir --disable-pip-version-check "
                   "--index-url https://%s/simple/ agenthold-probe 2>&1 && python3 -c "
                   "'import agenthold_probe; print(agenthold_probe.VALUE)'" % up)
    h.check(out.strip().endswith("probe-ok"), "%s: pip installs from the test's index through the proxy: %r"
            % (name, out[-400:]))
    out = sh(name, "GIT_SSL_CAINFO=$HOME/test-ca.pem git clone -q https://%s/repo.git ~/cloned 2>&1 && "
                   "cat ~/cloned/README" % up)
    h.check(out.endswith("carried by agenthold's egress proxy\n"), "%s: git clone over https through "
            "the proxy: %r" % (name, out[-400:]))
    npm = bool(sh(name, "command -v npm || true").strip())
    if npm:
        # npm reads the proxy from HTTPS_PROXY (its https-proxy's default).
        out = sh(name, "mkdir -p ~/npmtest && cd ~/npmtest && npm install --no-audit --no-fund "
                       "--cafile ~/test-ca.pem --registry https://%s/npm/ agenthold-probe 2>&1 && "
                       "node -e \"console.log(require('agenthold-probe'))\"" % up)
        h.check(out.strip().endswith("npm-probe-ok"), "%s: npm installs from the test's registry through "
                "the proxy: %r" % (name, out[-600:]))
    apt = ("-o Dir::State::Lists=$HOME/apt/lists -o Dir::Cache::Archives=$HOME/apt/archives "
           "-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o Debug::NoLocking=1")
    out = sh(name, "mkdir -p ~/apt/lists/partial ~/apt/archives/partial ~/apt/dl && "
                   "apt-get -q %s update 2>&1 && cd ~/apt/dl && apt-get -q %s download jq 2>&1 && "
                   "dpkg-deb -f jq_*.deb Package" % (apt, apt))
    h.check(out.endswith("\njq\n"), "%s: apt-get update and download from the Debian mirror through "
            "the proxy: %r" % (name, out[-600:]))
    st, j = h.api("GET", "/api/v1/agents/%s/operations?operation=egress&limit=200" % name)
    rows = [r["detail"] for r in (j["operations"] if st == 200 else []) if r["ok"]]
    h.check(any(d.startswith(up + " (connect)") for d in rows)
            and any(d.startswith("deb.debian.org:80 (http)") for d in rows),
            "%s: the audit has the tools' connections: %r" % (name, rows[-10:]))
    sh(name, "rm -rf ~/apt ~/cloned ~/npmtest ~/.npm ~/test-ca.pem ~/.local/lib/python3*/site-packages/agenthold_probe*")
    print("%s: curl, pip%s and git over https, apt from the mirror, through the proxy"
          % (name, ", npm" if npm else ""))


def through_proxy(name, service):
    """A runtime that needs a network goes out through sandboxd's egress
    proxy alone (docs/egress.md): what it runs is pointed at it; the
    image's own curl reaches an upstream the tenant's list names (the
    test's, on 127.0.0.2: the dangerous switch of naming an address), and
    is refused, with the rule's sentence, a name on no list, the host
    service and the metadata address; nothing goes around the proxy."""
    env = dict(l.split("=", 1) for l in sh(name, "env").splitlines() if "=" in l)
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        h.check(env.get(k) == "http://127.0.0.1:3128", "%s: %s points at the proxy: %r" % (name, k, env.get(k)))
    h.check(env.get("NO_PROXY") == env.get("no_proxy") == "localhost,127.0.0.1",
            "%s: NO_PROXY: %r" % (name, env.get("NO_PROXY")))
    up = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Upstream)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    h.cleanups.append(up.shutdown)
    entry = "127.0.0.2:%d" % up.server_address[1]
    st, t = h.api("PATCH", "/api/v1/tenants/default", {"egress_allow": [entry]})
    h.check(st == 200 and t["egress_allow"] == [entry], "%s: the tenant's list names %s: %d %r"
            % (name, entry, st, t))
    try:
        out = sh(name, "curl -sS --max-time 20 http://%s/through" % entry)
        # The head goes upstream as it came: the absolute form (docs/egress.md).
        h.check(out == "hello from the upstream: http://%s/through\n" % entry, "%s: curl reaches the "
                "allowed upstream through the proxy: %r" % (name, out))
        for url, why in (("http://example.invalid/", "is on neither runtime"),
                         ("https://example.invalid/", None),
                         ("http://127.0.0.1:%d/" % service, None),
                         ("http://169.254.169.254/latest/meta-data/", "is on neither runtime")):
            r = exec_(name, "curl -sS --max-time 20 -w '\\n%%{http_code}' %s" % url)
            # https: the proxy's 403 comes back to the CONNECT; curl says so.
            got = r["stdout"] + r["stderr"]
            h.check(r["status"] != 0 or r["stdout"].rstrip().endswith("\n403"),
                    "%s: %s is refused: %r" % (name, url, r))
            if why:
                h.check("403" in got and why in got, "%s: %s: the refusal names the rule: %r" % (name, url, got))
        # Around the proxy there is no way: no route at all.
        r = exec_(name, "curl -sS --noproxy '*' --max-time 10 http://%s/around" % entry)
        h.check(r["status"] != 0, "%s: a connection around the proxy fails: %r" % (name, r))
        st, j = h.api("GET", "/api/v1/agents/%s/operations?operation=egress&limit=100" % name)
        rows = j["operations"] if st == 200 else []
        h.check(any(r["ok"] and r["detail"].startswith(entry + " (http) to " + entry) for r in rows)
                and any(not r["ok"] and r["detail"].startswith("example.invalid:80 (http)") for r in rows)
                and any(not r["ok"] and r["detail"].startswith("example.invalid:443 (connect)") for r in rows),
                "%s: the audit has the carried and the refused connections: %r"
                % (name, [(r["ok"], r["detail"]) for r in rows]))
        tools_through_proxy(name, entry)
    finally:
        h.api("PATCH", "/api/v1/tenants/default", {"egress_allow": []})


def scenario(h):
    with open(os.path.join(SOURCE, "catalog", "runtimes.json")) as f:
        shipped = {r.get("alias") or r.get("name") for r in json.load(f)["runtimes"]}
    h.check(shipped, "the shipped catalog has runtimes")
    user_image()
    service = host_service(h)
    addrs = host_addresses()
    h.check(len(addrs) >= 2, "host addresses to try: %r" % addrs)
    # The service is there: the host reaches it.
    with socket.create_connection(("127.0.0.1", service), timeout=2) as s:
        h.check(s.recv(64).startswith(b"hello-from-host"), "the host service answers the host")

    h.start_server()
    # The builder settles every runtime (present, built, or an error).
    deadline = time.time() + 540
    while True:
        st, j = h.api("GET", "/api/v1/runtimes")
        h.check(st == 200, "GET /api/v1/runtimes: %d" % st)
        rts = {(r.get("alias") or r.get("name")): r for r in j["runtimes"]}
        states = {k: r.get("image_state") for k, r in rts.items()}
        if all(s in ("present", "error", "missing") for s in states.values()) or time.time() > deadline:
            break
        time.sleep(1)
    h.check(set(states) == shipped, "the server serves the shipped catalog: %r" % states)
    cases = []
    for alias, rt in sorted(rts.items()):
        if states[alias] != "present":
            h.check(not ahserver.required("docker"),
                    "runtime %s of the shipped catalog cannot be had here (%s), and docker is required "
                    "(AH_TEST_REQUIRE): its isolation is untested" % (alias, states[alias]))
            print("\n*** docker.isolation: runtime %s SKIPPED: its image %s cannot be had here (%s) ***\n"
                  % (alias, rt.get("image"), states[alias]), file=sys.stderr)
            continue
        cases.append(("rt-" + alias, {"runtime": alias}, rt.get("image"), bool(rt.get("needs_network")),
                      rt.get("mem_limit_mb") or 4096))
    h.check(cases, "at least one runtime of the shipped catalog can be tested here")
    # An image outside the catalog: whether it gets a network is lifecycle's default.
    cases.append(("user-image", {"image": USER_TAG}, USER_TAG, None, 4096))

    for name, body, image, networked, memory in cases:
        t0 = time.time()
        body = dict(body, name=name)
        st, a = h.api("POST", "/api/v1/agents?wait=1", body, timeout=180)
        h.check(st in (200, 201) and a["state"] == "running",
                "%s (%s): create -> running (sandboxd dialed back): %d %r" % (name, image, st, a))
        print("%s (%s): running in %.2f s" % (name, image, time.time() - t0))
        aid = a["id"]
        c = inspect_container(name, aid, networked, memory)
        needs = bool(networked)
        networked = c["HostConfig"]["NetworkMode"] != "none"
        # The account: `agent` when the image has one, else its USER, else 10001.
        passwd = sh(name, "cat /etc/passwd 2>/dev/null; true")
        accounts = {l.split(":")[0]: l.split(":") for l in passwd.splitlines() if l.count(":") == 6}
        if "agent" in accounts:
            uid, gid = int(accounts["agent"][2]), int(accounts["agent"][3])
            groups = {gid}
        elif image == USER_TAG:
            uid, gid, groups = 4242, 4343, {4343, 5555}
        else:
            uid = gid = 10001
            groups = {10001}
        inside(name, aid, uid, gid, groups, service, addrs, networked)
        if needs:
            through_proxy(name, service)
        # Stop and start: sandboxd dials back, the home stays the agent's.
        st, a = h.api("POST", "/api/v1/agents/%s/stop?wait=1" % name)
        h.check(st == 200 and a["state"] == "sleeping", "%s: stop: %d %r" % (name, st, a))
        st, a = h.api("POST", "/api/v1/agents/%s/start?wait=1" % name, timeout=120)
        h.check(st == 200 and a["state"] == "running", "%s: start -> running again: %d %r" % (name, st, a))
        owner = sh(name, "stat -c %u /home/agent /home/agent/x").split()
        h.check(owner == [str(uid)] * 2, "%s: after a restart the home is still the agent's: %r"
                % (name, owner))
        st, a = h.api("DELETE", "/api/v1/agents/%s?wait=1" % name, timeout=120)
        h.check(st == 200, "%s: rm: %d %r" % (name, st, a))
    h.finish()


sys.exit(h.run(scenario))
