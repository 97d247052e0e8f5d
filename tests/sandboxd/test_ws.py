#!/usr/bin/python3
"""tests/sandboxd/test_ws.py: the real static sandboxd binary against a real
WebSocket server (python3-websockets) playing the agenthold tunnel.

The server refuses the first upgrade with 401 (sandboxd must retry with
backoff), checks the upgrade headers (token, agent id, subprotocol) on the
second, speaks yamux as the client (odd stream ids) over binary messages
split at arbitrary places, runs hello, ping, exec, fs.write and fs.read,
then drops the connection: sandboxd must reconnect and say hello again.
Then the server goes away and comes back, three times (2.5 s of refused
dials each): sandboxd must be back within 1 s of each return.
Finally SIGTERM must end sandboxd with status 0 within a few seconds.

usage: test_ws.py PATH/TO/sandboxd
"""
import asyncio
import http
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

import msgpack
import websockets

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tunnel_peer import FIN, Yamux, check, failures, passed, records  # noqa: E402

SANDBOXD = sys.argv[1]
TOKEN = "tok-123.secret"
AGENT = "agent-ws"
state = {"upgrades": 0, "sessions": 0}
done = asyncio.Event()


async def process_request(path, headers):
    state["upgrades"] += 1
    if state["upgrades"] == 1:
        return http.HTTPStatus.UNAUTHORIZED, [], b"token does not match (first try refused on purpose)\n"
    check(path == "/tunnel", "path /tunnel (got %r)" % path)
    check(headers.get("Authorization") == "Bearer " + TOKEN, "bearer token sent")
    check(headers.get("X-Agenthold-Agent") == AGENT, "agent id header sent")
    check(headers.get("Sec-WebSocket-Protocol") == "agenthold-tunnel", "subprotocol offered")
    return None


async def session(ws, path=None):
    try:
        await session_body(ws)
    except Exception as e:          # the server swallows handler errors: count them
        check(False, "session raised %r" % e)
        done.set()


async def session_body(ws):
    state["sessions"] += 1
    n = state["sessions"]
    check(ws.subprotocol == "agenthold-tunnel", "subprotocol agreed")
    y = Yamux(ws)
    sid, h = await y.call({"ch": "hello", "version": 1})
    check(h.get("ok") is True and h.get("version") == 1, "hello ok (session %d): %r" % (n, h))
    check(h.get("agent_id") == AGENT, "hello names the agent")
    if n == 1:
        sid, h = await y.call({"ch": "ping"})
        check(h == {"ok": True}, "ping ok")
        await y.until(lambda: y.streams[sid]["fin"])

        sid, h = await y.call({"ch": "exec", "cmd": "echo hi; echo oops >&2; exit 4", "timeout": 10})
        check(h.get("ok") is True, "exec ok")
        await y.until(lambda: y.streams[sid]["fin"])
        recs = records(y.streams[sid]["data"])
        check((1, b"hi\n") in recs and (2, b"oops\n") in recs, "exec output records %r" % recs)
        check(recs and recs[-1][0] == 4 and msgpack.unpackb(recs[-1][1])["status"] == 4,
              "exec exit status")

        payload = os.urandom(300000)      # more than one window
        sid, h = await y.call({"ch": "fs.write", "path": "w.bin"}, fin=False)
        check(h.get("ok") is True, "fs.write ok")
        for i in range(0, len(payload), 60000):
            await y.send(sid, payload[i:i + 60000])
            # let sandboxd's window updates in (we send at most 256 KiB)
            if i + 60000 >= 240000 and i < 240000:
                await asyncio.sleep(0.2)
                while True:
                    try:
                        await y.feed(await asyncio.wait_for(ws.recv(), 0.2))
                    except asyncio.TimeoutError:
                        break
        await y.frame(1, FIN, sid, 0)
        trailer = {}

        def got_trailer():
            t = y.header(sid)
            if t is not None:
                trailer.update(t)
            return bool(trailer)
        await y.until(got_trailer)
        check(trailer.get("ok") is True and trailer.get("size") == len(payload), "fs.write trailer %r" % trailer)

        sid, h = await y.call({"ch": "fs.read", "path": "w.bin"})
        check(h.get("ok") is True and h.get("size") == len(payload), "fs.read ok")
        await y.until(lambda: y.streams[sid]["fin"] or len(y.streams[sid]["data"]) >= len(payload))
        check(y.streams[sid]["data"] == payload, "fs.read returns what was written")

        sid, h = await y.call({"ch": "fs.read", "path": "../etc/passwd"})
        check(h.get("ok") is False and h.get("code") == "EACCES", "escape refused %r" % h)
        # Drop the connection: sandboxd must come back.
        await ws.close()
        return
    done.set()
    await ws.wait_closed()


async def main():
    tmp = tempfile.mkdtemp(prefix="ah-sandboxd-ws-")
    proc = None
    try:
        home = os.path.join(tmp, "home")
        os.mkdir(home)
        server = await websockets.serve(session, "127.0.0.1", 0, subprotocols=["agenthold-tunnel"],
                                        process_request=process_request, max_size=None)
        port = server.sockets[0].getsockname()[1]
        boot = os.path.join(tmp, "boot.json")
        with open(boot, "w") as f:
            json.dump({"agent_id": AGENT, "token": TOKEN,
                       "tunnel_url": "ws://127.0.0.1:%d/tunnel" % port}, f)
        env = dict(os.environ, AGENTHOLD_LOG="debug")
        log = open(os.path.join(tmp, "sandboxd.log"), "w+")
        proc = subprocess.Popen([SANDBOXD, "--boot", boot, "--home", home, "--no-switch-user"],
                                env=env, stderr=log)
        await asyncio.wait_for(done.wait(), 30)

        # Idle and connected, sandboxd must sleep in poll: at most a few
        # clock ticks of CPU over two seconds.
        def cpu_ticks():
            with open("/proc/%d/stat" % proc.pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])
        t0 = cpu_ticks()
        await asyncio.sleep(2)
        spent = cpu_ticks() - t0
        check(spent <= 3, "idle sandboxd used %d ticks in 2 s" % spent)
        check(state["upgrades"] == 3, "refused, served, reconnected (%d upgrades)" % state["upgrades"])
        check(os.path.exists(os.path.join(home, "w.bin")), "the file landed in the home")

        # The server restarts, quickly and again: while nobody listens
        # sandboxd's dials are refused, and it must not back off from that
        # (it used to double its wait on every refusal, up to ~20 s after a
        # few restarts): each time the listener is back it connects within
        # about 250 ms of it (bound: 1 s here).
        back = {"at": 0.0, "took": []}
        again = asyncio.Event()

        async def redial_session(ws, path=None):
            back["took"].append(asyncio.get_running_loop().time() - back["at"])
            again.set()
            await ws.wait_closed()
        for i in range(3):
            server.close()                          # closes the connection too
            await server.wait_closed()
            await asyncio.sleep(2.5)                # several refused dials
            again.clear()
            back["at"] = asyncio.get_running_loop().time()
            server = await websockets.serve(redial_session, "127.0.0.1", port,
                                            subprotocols=["agenthold-tunnel"], max_size=None)
            await asyncio.wait_for(again.wait(), 30)
        check(len(back["took"]) == 3 and max(back["took"]) < 1.0,
              "back within 1 s of each of 3 restarts: %s" % ["%.2f" % t for t in back["took"]])
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.get_running_loop().run_in_executor(None, lambda: proc.wait(10))
        check(rc == 0, "SIGTERM exits 0 (got %r)" % rc)
        log.seek(0)
        text = log.read()
        sys.stderr.write(text[-3000:])
        check("401 Unauthorized: token does not match" in text, "the refusal's reason is logged")
        check("connection lost: server closed the WebSocket" in text, "the loss is logged")
        server.close()
        await server.wait_closed()
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)

    # Usage errors and --help
    r = subprocess.run([SANDBOXD, "--help"], capture_output=True, text=True)
    check(r.returncode == 0 and "--boot" in r.stdout, "--help")
    r = subprocess.run([SANDBOXD, "--bogus"], capture_output=True, text=True)
    check(r.returncode == 2, "bad option exits 2")


asyncio.run(main())
print("%d checks passed, %d failed" % (len(passed), len(failures)), file=sys.stderr)
sys.exit(1 if failures else 0)
