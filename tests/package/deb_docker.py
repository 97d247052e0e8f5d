#!/usr/bin/python3
"""tests/package/deb_docker.py: the Debian package in a fresh Debian.

Builds agenthold_V_amd64.deb and a newer one (V+upgrade1, same files) with
scripts/package, checks them with lintian, makes a minimal Debian rootfs of
the host's own release with mmdebstrap from the host's mirror (no registry),
holding the package's dependencies and systemd, and imports it as an image
(cached under a key of the suite, the mirror and the dependency list: the
first run pays about a minute, later ones nothing; older keys are removed).
In a container of that image with no network:

- `apt install ./agenthold_V_amd64.deb`: the system user agenthold (no
  login, home /var/lib/agenthold), its data directory 0750 and hostd's 0700
  root's, the yaml, Lua scripts and catalog registered as conffiles, the
  installed config naming the installed paths, `systemd-analyze verify`
  silent on both units;
- the server started as agenthold.service's ExecStart says, as its User=
  (systemd does not run in the container), on the fake driver: an agent
  created through the API (the installed CLI), the server's process the
  agenthold user's, its database the user's; the unit's ExecReload, run as
  its User, reloads the policies (the server's log says so);
- a conffile edited, then `apt install` of the newer build: the version is
  the new one, the edit, the user (same uid) and the database kept, and the
  server started again lists the same agent;
- `apt purge agenthold`: no /etc/agenthold, /var/lib/agenthold,
  /var/lib/agenthold-hostd, user or group, and no path named *agenthold*
  anywhere in the rootfs.

Then in a second container of the same image with systemd as PID 1
(CAP_SYS_ADMIN, no seccomp filter: the units' sandboxing needs mount
namespaces; still no network): install (nothing enabled), `systemctl
enable --now agenthold` brings up both units with their hardening, the
server (agenthold, no capabilities, no_new_privs) reaching hostd (root)
over its ipc socket, an upgrade restarting the server, `systemctl reload
agenthold`, and `apt purge` stopping
both and leaving nothing.

The containers are removed whatever happens. usage: deb_docker.py SOURCE_DIR BIN_DIR
Exits 77 without a Docker Engine, mmdebstrap or lintian (fails instead
when AH_TEST_REQUIRE names docker)."""
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docker"))
from ahdocker import SKIP, Fail, demux, engine, engine_raw, engine_up, q  # noqa: E402
import ahserver  # noqa: E402

SRC = os.path.abspath(sys.argv[1])
BIN = os.path.abspath(sys.argv[2])
REPO = "agenthold-deb-rootfs"
NAME = "agenthold-debtest-%d" % os.getpid()
NAME_SYSTEMD = NAME + "-systemd"
CONFIG = "/etc/agenthold/agenthold.yaml"
APT_ENV = ["DEBIAN_FRONTEND=noninteractive"]
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        raise Fail(what)


def skip_or_fail(why):
    if ahserver.required("docker"):
        print("FAIL: %s (AH_TEST_REQUIRE names docker)" % why)
        sys.exit(1)
    print("SKIPPED: %s" % why)
    sys.exit(SKIP)


def host(cmd, timeout=600, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if p.returncode != 0:
        raise Fail("%s: exit %d: %s" % (" ".join(cmd), p.returncode, (p.stderr or p.stdout)[-3000:]))
    return p.stdout


def sh(cid, script, env=None, timeout=300):
    """(exit status, output) of sh -c script in the container, as root."""
    st, j = engine("POST", "/containers/%s/exec" % cid,
                   {"Cmd": ["sh", "-c", script], "AttachStdout": True, "AttachStderr": True,
                    "Env": env or [], "WorkingDir": "/tmp"})
    if st != 201:
        raise Fail("exec in the container: %d %r" % (st, j))
    st, out = engine_raw("POST", "/exec/%s/start" % j["Id"], {"Detach": False, "Tty": False}, timeout=timeout)
    if st != 200:
        raise Fail("exec start: %d %r" % (st, out[:300]))
    st, info = engine("GET", "/exec/%s/json" % j["Id"])
    return info["ExitCode"], demux(out).decode(errors="replace")


def ok(cid, script, what, env=None, timeout=300):
    code, out = sh(cid, script, env, timeout)
    check(code == 0, "%s: `%s` exited %d: %s" % (what, script, code, out[-3000:]))
    return out


def package_deps(deb):
    """The package names of the .deb's Depends (first alternative each)."""
    field = host(["dpkg-deb", "-f", deb, "Depends"]).strip()
    return sorted({alt.split("|")[0].split("(")[0].split(":")[0].strip() for alt in field.split(",")})


def rootfs_image(deps):
    """REPO:KEY, a minbase rootfs of the host's release with deps and
    systemd, made once per key."""
    with open("/etc/os-release") as f:
        suite = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)["VERSION_CODENAME"]
    sources = "/etc/apt/sources.list.d/debian.sources"
    if not os.path.exists(sources):
        sources = "/etc/apt/sources.list"
    with open(sources, "rb") as f:
        mirror = f.read()
    include = sorted(set(deps) | {"systemd"})
    key = hashlib.sha256(json.dumps([suite, include]).encode() + mirror).hexdigest()[:16]
    ref = "%s:%s" % (REPO, key)
    if engine("GET", "/images/%s/json" % q(ref))[0] == 200:
        print("rootfs image %s cached" % ref)
        return ref
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="ah-deb-rootfs-") as d:
        tar = os.path.join(d, "rootfs.tar")
        with open(sources, "rb") as src:
            host(["mmdebstrap", "--quiet", "--variant=minbase", "--include=" + ",".join(include),
                  suite, tar, "-"], stdin=src, timeout=900)
        with open(tar, "rb") as f:
            st, out = engine_raw("POST", "/images/create?fromSrc=-&repo=%s&tag=%s" % (REPO, key), f.read(),
                                 content_type="application/x-tar", timeout=300)
        if st != 200 or b'"error"' in out:
            raise Fail("importing the rootfs: %d %s" % (st, out[-1000:]))
    # One cached rootfs at a time: the older keys' images go.
    st, imgs = engine("GET", "/images/json?filters=%s" % q(json.dumps({"reference": [REPO]})))
    for img in imgs or []:
        for tag in img.get("RepoTags") or []:
            if tag != ref:
                engine("DELETE", "/images/%s" % q(tag))
    print("rootfs image %s made in %.1f s" % (ref, time.time() - t0))
    return ref


def put_files(cid, paths, where="/opt"):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for p in paths:
            t.add(p, arcname=os.path.basename(p))
    st, body = engine_raw("PUT", "/containers/%s/archive?path=%s" % (cid, q(where)), buf.getvalue(),
                          content_type="application/x-tar")
    check(st == 200, "copying the packages into the container: %d %s" % (st, body[:200]))


def unit(cid, name):
    """Key -> value of a unit's [Service] section as installed."""
    text = ok(cid, "cat /lib/systemd/system/%s" % name, "reading the installed unit")
    keys, section = {}, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            keys[k] = v
    return keys


def start_server(cid):
    """The server as agenthold.service runs it: its ExecStart as its User,
    from /; on the fake driver (the environment wins over the file)."""
    svc = unit(cid, "agenthold.service")
    user, cmd = svc.get("User"), svc.get("ExecStart")
    check(user == "agenthold" and cmd and cmd.startswith("/usr/bin/agenthold serve --config " + CONFIG),
          "agenthold.service runs `agenthold serve --config %s` as agenthold: %r" % (CONFIG, svc))
    st, j = engine("POST", "/containers/%s/exec" % cid, {
        "Cmd": ["sh", "-c", "echo $$ > /tmp/server.pid; cd / && exec setpriv --reuid=%s --regid=%s "
                "--init-groups %s >>/tmp/server.log 2>&1" % (user, user, cmd)],
        "Env": ["AGENTHOLD_SANDBOX_DRIVER=fake"]})
    check(st == 201, "exec of the server: %d %r" % (st, j))
    st, _ = engine_raw("POST", "/exec/%s/start" % j["Id"], {"Detach": True, "Tty": False})
    check(st == 200, "starting the server: %d" % st)
    deadline = time.time() + 30
    while True:
        code, out = sh(cid, "agenthold ls --json --config %s" % CONFIG)
        if code == 0:
            break
        if time.time() > deadline:
            raise Fail("the installed server did not answer in 30 s: %s\nits log: %s" %
                       (out[-500:], sh(cid, "tail -n 30 /tmp/server.log")[1]))
        time.sleep(0.3)
    owner = ok(cid, "stat -c %U /proc/$(cat /tmp/server.pid)", "the server's process").strip()
    check(owner == "agenthold", "the server runs as agenthold, not %r" % owner)


def stop_server(cid):
    ok(cid, "kill -TERM $(cat /tmp/server.pid)", "SIGTERM to the server")
    deadline = time.time() + 20
    while sh(cid, "kill -0 $(cat /tmp/server.pid) 2>/dev/null")[0] == 0:
        if time.time() > deadline:
            raise Fail("the server did not exit within 20 s of SIGTERM")
        time.sleep(0.2)
    log = sh(cid, "cat /tmp/server.log")[1]
    bad = [r for r in ahserver.REPORTS if r in log]
    check(not bad, "the server's log has %r: %s" % (bad, log[-2000:]))


def agents(cid):
    return json.loads(ok(cid, "agenthold ls --json --config %s" % CONFIG, "agenthold ls"))


def make_container(name, image, debs, systemd=False):
    """A started container of image with debs in /opt and no network;
    with systemd, systemd is its PID 1 (it needs CAP_SYS_ADMIN and no
    seccomp filter for the units' sandboxing, and the host's cgroups)."""
    body = {"Image": image, "Cmd": ["sleep", "infinity"], "Labels": {"agenthold.test": "true"},
            "HostConfig": {"NetworkMode": "none", "Init": True}}
    if systemd:
        body["Cmd"] = ["/lib/systemd/systemd"]
        body["HostConfig"] = {"NetworkMode": "none", "CapAdd": ["SYS_ADMIN"],
                              "SecurityOpt": ["seccomp=unconfined"],
                              "Tmpfs": {"/run": "", "/run/lock": "", "/tmp": ""},
                              "Binds": ["/sys/fs/cgroup:/sys/fs/cgroup:ro"]}
    st, j = engine("POST", "/containers/create?name=%s" % name, body)
    check(st == 201, "creating the test container: %d %r" % (st, j))
    cid = j["Id"]
    st, _ = engine("POST", "/containers/%s/start" % cid)
    check(st == 204, "starting the test container: %d" % st)
    put_files(cid, debs)
    return cid


def wait_for(cid, script, what, seconds=30):
    deadline = time.time() + seconds
    while True:
        code, out = sh(cid, script)
        if code == 0:
            return out
        if time.time() > deadline:
            raise Fail("%s: `%s` still fails after %d s: %s" % (what, script, seconds, out[-1500:]))
        time.sleep(0.3)


def under_systemd(image, deb, newer):
    """The units run by systemd itself: `systemctl enable --now agenthold`
    brings up hostd and the server with the units' sandboxing, the server
    as agenthold with no capabilities and no_new_privs, reaching hostd
    over its ipc socket (the installed config's remote driver; no Docker
    Engine in there, so no sandbox); reload; purge stops both."""
    t0 = time.time()
    cid = make_container(NAME_SYSTEMD, image, [deb, newer], systemd=True)
    wait_for(cid, "systemctl is-system-running 2>&1 | grep -qx 'running\\|degraded'",
             "systemd comes up in the container", 60)
    ok(cid, "cd /opt && apt install -y ./%s" % os.path.basename(deb), "apt install under systemd", APT_ENV)
    code, out = sh(cid, "systemctl is-enabled agenthold.service")
    check(out.strip() == "disabled", "the install neither enables nor starts agenthold: %r" % out)
    ok(cid, "systemctl enable --now agenthold", "systemctl enable --now agenthold")
    wait_for(cid, "agenthold ls --config %s" % CONFIG, "the server under systemd answers")
    for u in ("agenthold.service", "agenthold-hostd.service"):
        check(sh(cid, "systemctl is-active " + u)[1].strip() == "active", "%s is active" % u)
    wait_for(cid, "journalctl -u agenthold --no-pager | grep -q 'hostd.sock) answers'",
             "the server reaches hostd over its socket under the unit's sandboxing")
    pid = ok(cid, "systemctl show -p MainPID --value agenthold", "the server's pid").strip()
    status = ok(cid, "cat /proc/%s/status" % pid, "the server's status")
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    check(fields["Uid"].split()[0] == ok(cid, "id -u agenthold", "uid").strip(), "the server is agenthold's")
    check(fields["CapEff"].strip() == "0000000000000000" and fields["CapBnd"].strip() == "0000000000000000",
          "the server has no capabilities: %s / %s" % (fields["CapEff"], fields["CapBnd"]))
    check(fields["NoNewPrivs"].strip() == "1", "the server has no_new_privs")
    hostd = ok(cid, "systemctl show -p MainPID --value agenthold-hostd", "hostd's pid").strip()
    check(ok(cid, "stat -c %u /proc/" + hostd, "hostd's uid").strip() == "0", "hostd runs as root")
    # An upgrade restarts what runs.
    ok(cid, "cd /opt && apt install -y ./%s" % os.path.basename(newer), "apt install of the newer build "
       "under systemd", APT_ENV)
    wait_for(cid, "agenthold ls --config %s" % CONFIG, "the server answers after the upgrade")
    again = ok(cid, "systemctl show -p MainPID --value agenthold", "the server's pid").strip()
    check(again != pid and again != "0", "the upgrade restarted the server (pid %s, then %s)" % (pid, again))
    check(sh(cid, "systemctl is-active agenthold-hostd")[1].strip() == "active", "hostd runs after the upgrade")
    ok(cid, "systemctl reload agenthold", "systemctl reload agenthold")
    ok(cid, "apt purge -y agenthold", "apt purge under systemd", APT_ENV)
    check(sh(cid, "systemctl is-active agenthold agenthold-hostd")[0] != 0, "purge stopped both services")
    exes = ok(cid, "for p in /proc/[0-9]*; do readlink $p/exe; done; true", "processes")
    check("agenthold" not in exes, "no agenthold process is left: %s" % exes)
    check(sh(cid, "getent passwd agenthold")[0] != 0, "the user is gone (systemd)")
    ok(cid, "rm /opt/agenthold_*.deb", "removing the test's own .deb files")
    left = ok(cid, "find / -xdev \\( -path /tmp -o -path /proc -o -path /sys -o -path /run \\) -prune -o "
              "-name '*agenthold*' -print", "find")
    check(left.strip() == "", "nothing named agenthold is left (systemd): %s" % left)
    print("under systemd: enable --now, upgrade, reload, purge in %.1f s" % (time.time() - t0))


def scenario(tmp):
    t0 = time.time()
    version = host([os.path.join(SRC, "scripts", "package"), "--out", tmp, BIN]).strip()
    v1 = os.path.basename(version).split("_")[1]
    v2 = v1 + "+upgrade1"
    deb1 = version
    deb2 = host([os.path.join(SRC, "scripts", "package"), "--version", v2, "--out", tmp, BIN]).strip()
    check(os.path.basename(deb2) == "agenthold_%s_amd64.deb" % v2, "the newer package's name: %s" % deb2)
    print("packages built in %.1f s" % (time.time() - t0))

    t1 = time.time()
    p = subprocess.run(["lintian", "--fail-on", "error,warning", "--info", deb1],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, "lintian: exit %d:\n%s" % (p.returncode, p.stdout + p.stderr))
    print("lintian clean in %.1f s%s" % (time.time() - t1, (": " + p.stdout.strip()) if p.stdout.strip() else ""))

    image = rootfs_image(package_deps(deb1))
    cid = make_container(NAME, image, [deb1, deb2])

    # Install.
    t1 = time.time()
    ok(cid, "cd /opt && apt install -y ./%s" % os.path.basename(deb1), "apt install of %s" % v1, APT_ENV)
    print("installed in %.1f s" % (time.time() - t1))
    pw = ok(cid, "getent passwd agenthold", "the system user").strip().split(":")
    check(int(pw[2]) < 1000 and pw[5] == "/var/lib/agenthold" and pw[6] == "/usr/sbin/nologin",
          "agenthold is a system user, home /var/lib/agenthold, no login: %r" % pw)
    uid = pw[2]
    check(ok(cid, "stat -c '%U:%G %a' /var/lib/agenthold", "the data dir").strip() == "agenthold:agenthold 750",
          "/var/lib/agenthold is agenthold's, 0750")
    check(ok(cid, "stat -c '%U:%G %a' /var/lib/agenthold-hostd", "hostd's dir").strip() == "root:root 700",
          "/var/lib/agenthold-hostd is root's, 0700")
    conff = ok(cid, "dpkg-query -W -f='${Conffiles}' agenthold", "the conffiles")
    for f in (CONFIG, "/etc/agenthold/lua/idle.lua", "/etc/agenthold/lua/limits.lua",
              "/etc/agenthold/catalog/runtimes.json"):
        check((" %s " % f) in conff, "%s is a conffile: %s" % (f, conff))
    cfg = ok(cid, "cat " + CONFIG, "the installed config")
    for line in ("  data_dir: /var/lib/agenthold", "  driver: remote", "  lua_dir: /etc/agenthold/lua",
                 "  path: /etc/agenthold/catalog/runtimes.json",
                 "  sandboxd_path: /usr/lib/agenthold/sandboxd", "  server_user: agenthold"):
        check(line in cfg.splitlines(), "the installed config says %r" % line)
    ok(cid, "test -x /usr/lib/agenthold/sandboxd && test -x /usr/bin/agenthold-server && "
       "test -f /etc/agenthold/catalog/images/busybox/Dockerfile", "the installed files")
    out = ok(cid, "systemd-analyze verify /lib/systemd/system/agenthold.service "
             "/lib/systemd/system/agenthold-hostd.service 2>&1", "systemd-analyze verify")
    check(out.strip() == "", "systemd-analyze verify says nothing: %s" % out)

    # The server from the installed files; an agent on the fake driver.
    start_server(cid)
    a = json.loads(ok(cid, "agenthold create alice --json --config %s" % CONFIG, "agenthold create"))
    check(a.get("state") == "running", "the agent runs: %r" % a)
    listed = agents(cid)
    ids = [x.get("id") for x in (listed if isinstance(listed, list) else listed.get("agents", []))]
    check(a["id"] in ids, "alice is listed: %r" % listed)
    # systemctl reload: the unit's ExecReload, as its User.
    svc = unit(cid, "agenthold.service")
    before = sh(cid, "cat /tmp/server.log")[1].lower().count("reload")
    ok(cid, "setpriv --reuid=agenthold --regid=agenthold --init-groups %s" % svc["ExecReload"],
       "agenthold.service's ExecReload")
    log = sh(cid, "cat /tmp/server.log")[1]
    check(log.lower().count("reload") > before, "the server's log shows the reload: %s" % log[-1500:])
    stop_server(cid)
    check(ok(cid, "stat -c %U /var/lib/agenthold/agenthold.db", "the database").strip() == "agenthold",
          "the database is agenthold's")

    # Upgrade to the newer build: the data, the user and an edited conffile kept.
    ok(cid, "echo '# edited by deb_docker.py' >> " + CONFIG, "editing the config")
    t1 = time.time()
    ok(cid, "cd /opt && apt install -y ./%s" % os.path.basename(deb2), "apt install of %s" % v2, APT_ENV)
    print("upgraded in %.1f s" % (time.time() - t1))
    got = ok(cid, "dpkg-query -W -f='${Version}' agenthold", "the version").strip()
    check(got == v2, "the installed version is %s, not %r" % (v2, got))
    check(ok(cid, "tail -n 1 " + CONFIG, "the config").strip() == "# edited by deb_docker.py",
          "the edited conffile was kept")
    check(ok(cid, "id -u agenthold", "the user").strip() == uid, "the user's uid is kept")
    start_server(cid)
    listed = agents(cid)
    ids = [x.get("id") for x in (listed if isinstance(listed, list) else listed.get("agents", []))]
    check(a["id"] in ids, "alice is still listed after the upgrade: %r" % listed)
    stop_server(cid)

    # Purge: nothing left.
    ok(cid, "apt purge -y agenthold", "apt purge", APT_ENV)
    code, out = sh(cid, "dpkg-query -W -f='${Status}' agenthold")
    check(code != 0 or "not-installed" in out, "dpkg knows no agenthold: %s" % out)
    for path in ("/etc/agenthold", "/var/lib/agenthold", "/var/lib/agenthold-hostd", "/usr/bin/agenthold",
                 "/usr/lib/agenthold", "/lib/systemd/system/agenthold.service"):
        check(sh(cid, "test -e " + path)[0] != 0, "%s is gone after purge" % path)
    check(sh(cid, "getent passwd agenthold")[0] != 0, "the user agenthold is gone")
    check(sh(cid, "getent group agenthold")[0] != 0, "the group agenthold is gone")
    ok(cid, "rm /opt/agenthold_*.deb", "removing the test's own .deb files")
    left = ok(cid, "find / -xdev \\( -path /tmp -o -path /proc -o -path /sys \\) -prune -o "
              "-name '*agenthold*' -print", "find")
    check(left.strip() == "", "nothing named agenthold is left: %s" % left)

    under_systemd(image, deb1, deb2)


def main():
    ahserver.clean_up_on_signals()
    if not engine_up():
        skip_or_fail("no Docker Engine")
    for tool in ("mmdebstrap", "lintian", "dpkg-deb", "dpkg-shlibdeps"):
        if not shutil.which(tool):
            skip_or_fail("no %s (scripts/install-deps)" % tool)
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="ah-deb-")
    try:
        scenario(tmp)
    except Fail as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        for name in (NAME, NAME_SYSTEMD):
            engine("DELETE", "/containers/%s?force=1&v=1" % name)
        shutil.rmtree(tmp, ignore_errors=True)
    print("OK: %d checks in %.1f s" % (checks, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
