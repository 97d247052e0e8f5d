#!/usr/bin/python3
"""tests/sandboxd/test_docker.py: the static sandboxd binary as PID 1 of a
real container (FROM scratch + busybox, tests/images/build-test-image.sh),
talking to a python3-websockets tunnel on the host.

Checks what only a real container shows: the binary runs with no libc in
the image; it runs terminals and commands as `agent` (uid 1000) and chowns
the files it writes; /dev/ptmx terminals work; stats come from the cgroup;
as PID 1 it reaps orphans; a missing boot card is retried until it appears;
`docker stop` (SIGTERM to PID 1) ends it with status 0 quickly.

Skips (exit 77) when no Docker Engine answers on /var/run/docker.sock.
usage: test_docker.py PATH/TO/sandboxd
"""
import asyncio
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import websockets

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tunnel_peer import Yamux, check, failures, passed, run  # noqa: E402

SANDBOXD = os.path.abspath(sys.argv[1])
SOCK = os.environ.get("AH_TEST_DOCKER_SOCKET", "/var/run/docker.sock")
IMAGE = "agenthold-test-sandboxd:%d" % os.getpid()   # per run: parallel runs do not collide
HERE = os.path.dirname(os.path.abspath(__file__))
AGENT = "agent-docker"
TOKEN = "tok-docker"


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self):
        super().__init__("docker", timeout=60)

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(SOCK)


def api(method, path, body=None):
    c = UnixHTTP()
    data = json.dumps(body).encode() if body is not None else None
    c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
    r = c.getresponse()
    raw = r.read()
    c.close()
    try:
        return r.status, json.loads(raw) if raw else None
    except ValueError:
        return r.status, raw


with open(SANDBOXD, "rb") as f:
    if b"/ld-linux" in f.read(4096):
        print("SKIP: %s is not statically linked (a sanitized build?)" % SANDBOXD, file=sys.stderr)
        sys.exit(77)
try:
    status, _ = api("GET", "/_ping")
except OSError as e:
    print("SKIP: no Docker Engine at %s (%s)" % (SOCK, e), file=sys.stderr)
    sys.exit(77)

done = asyncio.Event()
state = {"sessions": 0}


async def session(ws, path=None):
    try:
        await session_body(ws)
    except Exception as e:
        check(False, "session raised %r" % e)
    done.set()


async def session_body(ws):
    state["sessions"] += 1
    y = Yamux(ws)
    sid, h = await y.call({"ch": "hello", "version": 1})
    check(h.get("ok") is True and h.get("user") == "agent", "hello as agent: %r" % h)
    check(h.get("agent_id") == AGENT, "agent id")

    out, err, ex = await run(y, "id -u; id -g; echo $HOME; pwd; echo $$")
    check(out.split() == [b"1000", b"1000", b"/home/agent", b"/home/agent", out.split()[-1]],
          "exec as agent in the home: %r %r" % (out, err))
    check(ex and ex["status"] == 0, "exec status")

    sid, h = await y.call({"ch": "fs.write", "path": "owned.txt"}, fin=False)
    check(h.get("ok") is True, "fs.write ok")
    await y.send(sid, b"mine\n", fin=True)

    def trailer():
        t = y.header(sid)
        if t is not None:
            check(t.get("ok") is True and t.get("size") == 5, "fs.write trailer %r" % t)
            return True
        return False
    await y.until(trailer)
    out, _, _ = await run(y, "stat -c '%u:%g %a' owned.txt; cat owned.txt")
    check(out == b"1000:1000 644\nmine\n", "written file owned by agent: %r" % out)

    # File operations carry the agent's permissions, not root's.
    sid, h = await y.call({"ch": "fs.read", "path": "rootonly"})
    check(h.get("ok") is False and h.get("code") == "EACCES", "root's 0600 file unreadable: %r" % h)
    sid, h = await y.call({"ch": "fs.write", "path": "rootdir/new"})
    check(h.get("ok") is False and h.get("code") == "EACCES", "root's directory unwritable: %r" % h)
    sid, h = await y.call({"ch": "fs.remove", "path": "rootdir/f"})
    check(h.get("ok") is False and h.get("code") == "EACCES", "root's file not removable: %r" % h)
    sid, h = await y.call({"ch": "fs.list", "path": "rootdir"})
    check(h.get("ok") is True, "root's 0755 directory listable: %r" % h)

    # A terminal on /dev/ptmx, as agent.
    sid, h = await y.call({"ch": "pty", "cols": 90, "rows": 20}, fin=False)
    check(h.get("ok") is True, "pty ok %r" % h)
    line = b"id -un; stty size; exit 5\n"
    import struct
    await y.send(sid, struct.pack(">BI", 0, len(line)) + line)
    await y.until(lambda: y.streams[sid]["fin"], 15)
    from tunnel_peer import records, exit_of
    recs = records(y.streams[sid]["data"])
    text = b"".join(p for k, p in recs if k == 1)
    check(b"agent\r\n" in text and b"20 90" in text, "pty output %r" % text)
    check((exit_of(recs) or {}).get("status") == 5, "pty exit status")

    # Orphans: the inner shell exits at once, sleep is reparented to PID 1.
    await run(y, "sh -c 'sleep 0.3 >/dev/null 2>&1 &'; exit 0")
    await asyncio.sleep(2.5)
    out, _, _ = await run(y, "for f in /proc/[0-9]*/stat; do read -r a b c rest < $f; echo $c; done")
    check(b"Z" not in out.split(), "no zombies left (PID 1 reaps): %r" % out)

    sid, h = await y.call({"ch": "stats"})
    check(h.get("ok") is True and h.get("source") == "cgroup" and h.get("cpu_ns", 0) > 0,
          "stats from the cgroup: %r" % h)
    done.set()
    await ws.wait_closed()


async def main():
    tmp = tempfile.mkdtemp(prefix="ah-sandboxd-docker-")
    cid = None
    try:
        r = subprocess.run([os.path.join(HERE, "..", "images", "build-test-image.sh"), IMAGE, SOCK],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            check(False, "test image build: %s" % r.stderr.strip())
            return
        bootdir = os.path.join(tmp, "boot")
        os.mkdir(bootdir)
        # The home: the agent's, with a root-only file and a root directory.
        home = os.path.join(tmp, "home")
        os.mkdir(home)
        with open(os.path.join(home, "rootonly"), "w") as f:
            f.write("root\n")
        os.chmod(os.path.join(home, "rootonly"), 0o600)
        os.mkdir(os.path.join(home, "rootdir"))
        with open(os.path.join(home, "rootdir", "f"), "w") as f:
            f.write("f\n")
        os.chown(home, 1000, 1000)
        os.chmod(tmp, 0o755)
        os.chmod(bootdir, 0o755)
        server = await websockets.serve(session, "0.0.0.0", 0, subprotocols=["agenthold-tunnel"])
        port = server.sockets[0].getsockname()[1]
        status, c = api("POST", "/containers/create?name=ah-sandboxd-test-%d" % os.getpid(), {
            "Image": IMAGE,
            "Cmd": ["/opt/agenthold/sandboxd"],
            "Env": ["AGENTHOLD_LOG=debug"],
            "Labels": {"agenthold.test": "true"},
            "HostConfig": {
                "Binds": [SANDBOXD + ":/opt/agenthold/sandboxd:ro", bootdir + ":/etc/agenthold:ro",
                          home + ":/home/agent"],
            },
        })
        check(status == 201, "container create: %s %r" % (status, c))
        if status != 201:
            return
        cid = c["Id"]
        status, _ = api("POST", "/containers/%s/start" % cid)
        check(status == 204, "container start: %s" % status)
        # No boot card yet: sandboxd must wait and retry. Write it now,
        # with the address the container reaches the host by.
        status, info = api("GET", "/containers/%s/json" % cid)
        gateway = info["NetworkSettings"]["Gateway"]
        check(bool(gateway), "container has a gateway")
        await asyncio.sleep(1.5)
        with open(os.path.join(bootdir, "boot.json.tmp"), "w") as f:
            json.dump({"agent_id": AGENT, "token": TOKEN,
                       "tunnel_url": "ws://%s:%d/tunnel" % (gateway, port)}, f)
        os.rename(os.path.join(bootdir, "boot.json.tmp"), os.path.join(bootdir, "boot.json"))
        try:
            await asyncio.wait_for(done.wait(), 60)
        except asyncio.TimeoutError:
            check(False, "sandboxd in the container never completed a session")
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        status, _ = await loop.run_in_executor(None, api, "POST", "/containers/%s/stop?t=10" % cid)
        took = time.monotonic() - t0
        check(status == 204, "container stop: %s" % status)
        check(took < 5, "SIGTERM to PID 1 ends sandboxd quickly (%.1f s)" % took)
        status, info = api("GET", "/containers/%s/json" % cid)
        check(info["State"]["ExitCode"] == 0, "exit code 0 (got %r)" % info["State"]["ExitCode"])
        server.close()
        await server.wait_closed()
    finally:
        if cid:
            c = UnixHTTP()
            c.request("GET", "/containers/%s/logs?stdout=1&stderr=1" % cid)
            logs = c.getresponse().read()
            c.close()
            if failures or os.environ.get("AH_TEST_VERBOSE"):
                sys.stderr.buffer.write(logs[-4000:])
            api("DELETE", "/containers/%s?force=1" % cid)
        api("DELETE", "/images/%s" % IMAGE.replace(":", "%3A"))
        shutil.rmtree(tmp, ignore_errors=True)


asyncio.run(main())
print("%d checks passed, %d failed" % (len(passed), len(failures)), file=sys.stderr)
sys.exit(1 if failures else 0)
