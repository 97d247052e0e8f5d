#!/usr/bin/python3
"""tests/docker/server_container.py: the server itself run as a container.

Makes the shipped server image with scripts/server-image (FROM scratch,
no registry: the build's `agenthold` and static `sandboxd`, the shared
libraries, lua/ and catalog/), and on top of it root as the user (the
Engine's socket is root's) and the harness's catalog. Runs it through the Engine API with
/var/run/docker.sock mounted, the docker driver and
sandbox.docker.sandboxd_volume set, its API published on 127.0.0.1 and its
data directory bind-mounted at the same path inside (the CLI on the host
reads admin.token there; the home volumes are bound under it).

Shows: the server finds its own container id and says so; an agent created
through the CLI becomes running (sandboxd in the agent's container, which
has no network, dialed the tunnel's unix socket); the Engine API shows the
sandbox mounting the sandboxd volume read-only and the host's side of the
server's data directory mount (its run/) at /run/agenthold, boot.json
naming ws+unix:///run/agenthold/tunnel.sock:/tunnel; the home volume
bound under the data directory and a sleeping agent listed without
starting its container; stop/start through the containerised server; rm
leaves nothing; `docker stop` of the server is an orderly exit (status 0).

usage: server_container.py AGENTHOLD_BINARY SOURCE_DIR (sandboxd next to the binary)
Exits 77 without a Docker Engine. Pool 10.213.112.0/20, prefix
dockerservercontainer<pid>, host port picked by the engine on 127.0.0.1."""
import json
import os
import socket
import subprocess
import sys
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import (Fail, Harness, build_image, connect_cmd, demux, engine,  # noqa: E402
                      engine_raw, host_addresses, host_service, read_file_from_container)

SRC = os.path.abspath(sys.argv[2])
h = Harness("docker.server_container", sys.argv[1], "10.213.112.0/20")
# carol below is the bridge way of a containerised server (its host
# addresses blocked from a network of her own), which an operator must
# choose; the default (tunnel: no network, the egress proxy) is
# docker.isolation's and docker.egress's.
h.env["AGENTHOLD_SANDBOX_DOCKER_EGRESS"] = "bridge"
SERVER_TAG = "agenthold-server-test:" + h.prefix
SERVER_NAME = h.prefix + "-server"
SANDBOXD_VOLUME = h.prefix + "-sandboxd"
h.extra_images.append(SERVER_TAG)
h.extra_volumes.append(SANDBOXD_VOLUME)
h.extra_containers.append(SERVER_NAME)
server_id = None


def catalog_with_net():
    with open(h.env["AGENTHOLD_CATALOG_PATH"]) as f:
        cat = json.load(f)
    net = dict(cat["runtimes"][0], alias="net", needs_network=True,
               description="The test image, with a network.")
    cat["runtimes"].append(net)
    return json.dumps(cat).encode()


def build_server_image():
    """The shipped image (scripts/server-image, as a user makes it), and
    on top of it what this test needs: root (to use the Engine's socket
    it mounts) and the harness's catalog (its test image as the one
    runtime, as the host-side tests have it: this test is about the
    server in a container, not about building the shipped runtimes in
    there), plus the same image as a runtime that needs a network."""
    t0 = time.time()
    base = SERVER_TAG + "-base"
    h.extra_images.append(base)
    p = subprocess.run([os.path.join(SRC, "scripts", "server-image"), h.bin, base],
                       capture_output=True, text=True, timeout=300)
    h.check(p.returncode == 0, "scripts/server-image: %s" % (p.stderr.strip() or p.stdout.strip()))
    build_image(SERVER_TAG, {"test-runtimes.json": catalog_with_net()}, """FROM %s
COPY test-runtimes.json /usr/share/agenthold/test-runtimes.json
USER 0:0
LABEL agenthold.test=true
""" % base)
    print("server image built in %.1f s (%s)" % (time.time() - t0, p.stdout.strip()))


def engine_raw_logs():
    st, data = engine_raw("GET", "/containers/%s/logs?stdout=1&stderr=1" % SERVER_NAME)
    return st, demux(data).decode(errors="replace")


def start_server_container():
    global server_id
    env = ["%s=%s" % kv for kv in h.env.items() if kv[0].startswith("AGENTHOLD_")]
    env = [e for e in env if not e.startswith(("AGENTHOLD_SERVER_DATA_DIR=", "AGENTHOLD_SERVER_LISTEN="))]
    env += ["AGENTHOLD_SERVER_DATA_DIR=" + h.data,
            "AGENTHOLD_SERVER_LISTEN=0.0.0.0:8080",
            "AGENTHOLD_SANDBOX_TUNNEL_LISTEN=:%d" % h.tunnel_port,
            "AGENTHOLD_SANDBOX_DOCKER_SANDBOXD_VOLUME=" + SANDBOXD_VOLUME,
            "AGENTHOLD_SANDBOX_DOCKER_SOCKET=/var/run/docker.sock",
            "AGENTHOLD_POLICY_LUA_DIR=/usr/share/agenthold/lua",
            "AGENTHOLD_CATALOG_PATH=/usr/share/agenthold/test-runtimes.json"]
    os.makedirs(h.data, mode=0o700)
    body = {
        "Image": SERVER_TAG,
        "Env": env,
        "Labels": {"agenthold.test": "true"},
        "ExposedPorts": {"8080/tcp": {}},
        "HostConfig": {
            "Binds": ["%s:/var/run/docker.sock" % os.path.realpath(os.environ.get(
                "AH_TEST_DOCKER_SOCKET", "/var/run/docker.sock")), "%s:%s" % (h.data, h.data)],
            "PortBindings": {"8080/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}]},
            "Init": True,
        },
    }
    st, j = engine("POST", "/containers/create?name=%s" % SERVER_NAME, body)
    h.check(st == 201, "creating the server's container: %d %r" % (st, j))
    server_id = j["Id"]
    st, _ = engine("POST", "/containers/%s/start" % server_id)
    h.check(st == 204, "starting the server's container: %d" % st)
    st, c = engine("GET", "/containers/%s/json" % server_id)
    port = c["NetworkSettings"]["Ports"]["8080/tcp"][0]["HostPort"]
    h.url = "http://127.0.0.1:%s" % port
    try:
        h.wait_healthy(30)
    except Fail:
        _, c = engine("GET", "/containers/%s/json" % server_id)
        raise Fail("the containerised server did not come up (%s): %s" %
                   (c["State"]["Status"], engine_raw_logs()[1][-3000:]))


def scenario(h):
    build_server_image()
    start_server_container()
    h.server_log_tail = lambda n=6000: engine_raw_logs()[1][-n:]
    logs = engine_raw_logs()[1]
    h.check(("runs in container %s" % server_id[:12]) in logs or "agenthold serving" in logs,
            "the server started: %s" % logs[-2000:])

    t0 = time.time()
    a = h.cli("create", "alice")
    h.check(a["state"] == "running", "create -> running through the containerised server: %r" % a)
    print("create -> running in %.2f s (server in a container)" % (time.time() - t0))
    aid = a["id"]
    logs = engine_raw_logs()[1]
    h.check(("runs in container %s" % server_id[:12]) in logs,
            "the server found its own container id %s: %s" % (server_id[:12], logs[-2000:]))

    # The agent's runtime needs no network: the sandbox has none, and dials
    # the server through the tunnel's unix socket, whose directory is the
    # host's side of the server's data directory mount.
    net_name = "%s-net-%s" % (h.prefix, aid)
    st, _ = engine("GET", "/networks/%s" % net_name)
    h.check(st == 404, "the agent has no network: %d" % st)
    sbx = h.container(aid)
    h.check(sbx and sbx["State"]["Running"], "the sandbox runs")
    h.check(sbx["HostConfig"]["NetworkMode"] == "none", "the sandbox's network mode is none: %r" %
            sbx["HostConfig"]["NetworkMode"])
    mounts = {m["Destination"]: m for m in sbx["Mounts"]}
    m = mounts.get("/opt/agenthold")
    h.check(m and m["Type"] == "volume" and m["Name"] == SANDBOXD_VOLUME and not m["RW"],
            "sandboxd comes read-only from volume %s: %r" % (SANDBOXD_VOLUME, m))
    m = mounts.get("/run/agenthold")
    h.check(m and m["Type"] == "bind" and m["Source"] == os.path.join(h.data, "run") and not m["RW"],
            "the tunnel's socket directory is the host's %s/run, read-only: %r" % (h.data, m))
    boot = json.loads(read_file_from_container(sbx["Id"], "/etc/agenthold/boot.json"))
    want_url = "ws+unix:///run/agenthold/tunnel.sock:/tunnel"
    h.check(boot["tunnel_url"] == want_url, "boot.json dials the tunnel's socket: %r" % boot)
    # The sandboxd in the volume is the server's own.
    with open(os.path.join(os.path.dirname(h.bin), "sandboxd"), "rb") as f:
        ours = f.read()
    copied = read_file_from_container(sbx["Id"], "/opt/agenthold/sandboxd")
    h.check(copied == ours, "the volume holds the server's sandboxd (%d vs %d bytes)" %
            (len(copied or b""), len(ours)))

    # The host firewall cannot be probed from inside a container: said so.
    deadline = time.time() + 15
    while "host firewall:" not in logs and time.time() < deadline:
        time.sleep(0.2)
        logs = engine_raw_logs()[1]
    h.check("host firewall: cannot check the host firewall from inside a container" in logs,
            "the firewall probe says it cannot check from a container: %s" % logs[-1500:])

    # The home volume is bound under the data directory, mounted at the
    # same path on both sides: the containerised server reads a sleeping
    # agent's files there without starting its container.
    st, vol = engine("GET", "/volumes/%s-home-%s" % (h.prefix, aid))
    home_dir = os.path.join(h.data, "homes", aid)
    h.check(st == 200 and vol["Options"] == {"type": "none", "o": "bind", "device": home_dir},
            "the home volume is bound to %s: %r" % (home_dir, vol))
    st, _ = h.api("POST", "/api/v1/agents/alice/exec", {"cmd": "echo from-alice > note.txt"})
    h.check(st == 200, "exec in alice: %d" % st)
    h.check(h.cli("stop", "alice")["state"] == "sleeping", "stop -> sleeping")
    h.check(not h.container(aid)["State"]["Running"], "the sandbox is stopped")
    st, note = engine_raw("GET", "/containers/%s/json" % sbx["Id"])
    started = json.loads(note)["State"]["StartedAt"]
    st, j = h.api("GET", "/api/v1/agents/alice/files?path=.")
    h.check(st == 200 and "note.txt" in [e["name"] for e in j["entries"]],
            "a sleeping agent listed through the containerised server: %d %r" % (st, j))
    c = h.container(aid)
    h.check(not c["State"]["Running"] and c["State"]["StartedAt"] == started,
            "the listing did not start the container")
    h.check(h.cli("start", "alice")["state"] == "running", "start -> running (sandboxd back)")

    # A second agent: no network either; the server joins none.
    b = h.cli("create", "bob")
    h.check(b["state"] == "running", "a second agent runs too")
    st, srv = engine("GET", "/containers/%s/json" % server_id)
    h.check(set(srv["NetworkSettings"]["Networks"]) == {"bridge"},
            "the server's container is on no agent network: %r" % sorted(srv["NetworkSettings"]["Networks"]))

    # A runtime that needs a network, with the server in a container: the
    # driver cannot see the host's own addresses from in here, so a helper
    # container in the host's network namespace reads them; sandboxd blocks
    # them with the gateways. A host service on 0.0.0.0 answers the host
    # but the sandbox on none of the host's addresses, while sandboxd still
    # dials back (through the socket).
    service = host_service(h)
    addrs = host_addresses()
    mine = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    mine = [a for a in mine if ":" not in a and not a.startswith("127.")]
    h.check(mine, "the host has addresses of its own to try: %r" % mine)
    c = h.cli("create", "carol", "--runtime", "net")
    h.check(c["state"] == "running", "a networked sandbox of the containerised server dials back: %r" % c)
    logs = engine_raw_logs()[1]
    h.check("the host's own addresses (read by a helper container" in logs,
            "the driver read the host's addresses through a helper container: %s" % logs[-2000:])
    csbx = h.container(c["id"])
    h.check(csbx["HostConfig"]["NetworkMode"] == "%s-net-%s" % (h.prefix, c["id"]),
            "carol has a network of her own: %r" % csbx["HostConfig"]["NetworkMode"])
    blocked = json.loads(read_file_from_container(csbx["Id"], "/etc/agenthold/boot.json"))["blocked"]
    for a in mine:
        h.check(a + "/32" in blocked.split(), "boot.json blocks the host's own %s: %r" % (a, blocked))
    for a in addrs:
        st, r = h.api("POST", "/api/v1/agents/carol/exec", {"cmd": connect_cmd(a, service)})
        h.check(st == 200 and "tried" in r["stdout"] and "OPEN" not in r["stdout"],
                "the host service on 0.0.0.0 does not answer carol on %s:%d: %d %r" % (a, service, st, r))
    with socket.create_connection(("127.0.0.1", service), timeout=2) as sk:
        h.check(sk.recv(64).startswith(b"hello-from-host"), "the host service answers the host")
    h.check(not [x for x in engine("GET", "/containers/json?all=1")[1]
                 if "%s-hostaddr-" % h.prefix in " ".join(x["Names"])],
            "the helper container is gone")
    print("networked sandbox of a containerised server: %d host addresses blocked, %d tried" %
          (len(mine), len(addrs)))

    for name in ("alice", "bob", "carol"):
        h.check(h.cli("rm", name)["state"] == "destroyed", "rm %s" % name)
    c, n, v = h.leftovers()
    # The sandboxd volume is the server's, not an agent's: it stays.
    v = [x for x in v if x["Name"] != SANDBOXD_VOLUME]
    h.check(not c and not n and not v, "nothing of the agents is left: %d containers, %d networks, "
            "%d volumes" % (len(c), len(n), len(v)))
    st, srv = engine("GET", "/containers/%s/json" % server_id)
    h.check(set(srv["NetworkSettings"]["Networks"]) == {"bridge"},
            "the server left the agent networks: %r" % sorted(srv["NetworkSettings"]["Networks"]))

    st, _ = engine("POST", "/containers/%s/stop?t=30" % server_id, timeout=60)
    h.check(st == 204, "docker stop of the server: %d" % st)
    st, srv = engine("GET", "/containers/%s/json" % server_id)
    h.check(srv["State"]["ExitCode"] == 0, "the server exits 0 on SIGTERM: %r\n%s" %
            (srv["State"]["ExitCode"], engine_raw_logs()[1][-2000:]))


sys.exit(h.run(scenario))
