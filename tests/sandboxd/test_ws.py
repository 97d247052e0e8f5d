#!/usr/bin/python3
"""tests/sandboxd/test_ws.py: the real static sandboxd binary against a real
WebSocket server (python3-websockets) playing the agenthold tunnel.

The server refuses the first upgrade with 401 (sandboxd must retry with
backoff), checks the upgrade headers (token, agent id, subprotocol) on the
second, speaks yamux as the client (odd stream ids) over binary messages
split at arbitrary places, runs hello, ping, exec, fs.write and fs.read,
then drops the connection: sandboxd must reconnect and say hello again.
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

SANDBOXD = sys.argv[1]
TOKEN = "tok-123.secret"
AGENT = "agent-ws"
SYN, ACK, FIN, RST = 1, 2, 4, 8

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("CHECK failed:", what, file=sys.stderr)


class Yamux:
    """The smallest yamux client that will do for a test."""

    def __init__(self, ws):
        self.ws = ws
        self.buf = b""
        self.next_id = 1
        self.streams = {}
        self.split = 0

    async def frame(self, typ, flags, sid, length, payload=b""):
        data = struct.pack(">BBHII", 0, typ, flags, sid, length) + payload
        # Straddle messages on purpose: cut each frame at a moving point.
        self.split = (self.split + 5) % 17
        cut = min(self.split, len(data))
        if cut:
            await self.ws.send(data[:cut])
        if cut < len(data):
            await self.ws.send(data[cut:])

    async def open(self, header, fin=True, body=b""):
        sid = self.next_id
        self.next_id += 2
        self.streams[sid] = {"data": b"", "fin": False, "rst": False}
        packed = msgpack.packb(header)
        hdr = struct.pack(">I", len(packed)) + packed
        await self.frame(1, SYN, sid, 0)
        await self.frame(0, 0, sid, len(hdr), hdr)
        if body:
            await self.frame(0, 0, sid, len(body), body)
        if fin:
            await self.frame(1, FIN, sid, 0)
        return sid

    async def send(self, sid, data, fin=False):
        await self.frame(0, FIN if fin else 0, sid, len(data), data)

    async def feed(self, msg):
        check(isinstance(msg, bytes), "sandboxd sends binary messages only")
        self.buf += msg
        while len(self.buf) >= 12:
            ver, typ, flags, sid, length = struct.unpack(">BBHII", self.buf[:12])
            check(ver == 0, "yamux version 0")
            if typ == 0:
                if len(self.buf) < 12 + length:
                    return
                payload = self.buf[12:12 + length]
                self.buf = self.buf[12 + length:]
                st = self.streams.get(sid)
                if st is not None:
                    st["data"] += payload
                    # Give the window back as we go (we keep everything).
                    st["credit"] = st.get("credit", 0) + length
                    if st["credit"] >= 128 * 1024:
                        await self.frame(1, 0, sid, st["credit"])
                        st["credit"] = 0
            else:
                self.buf = self.buf[12:]
                st = self.streams.get(sid)
                if typ == 2 and flags & SYN:
                    await self.frame(2, ACK, 0, length)
            if st is not None and sid:
                if flags & FIN:
                    st["fin"] = True
                if flags & RST:
                    st["rst"] = True

    async def until(self, cond, timeout=10):
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while not cond():
            left = end - loop.time()
            if left <= 0:
                raise TimeoutError("yamux: condition not met in time")
            await self.feed(await asyncio.wait_for(self.ws.recv(), left))

    def header(self, sid):
        """Take one length-prefixed msgpack header from the stream's data."""
        st = self.streams[sid]
        if len(st["data"]) < 4:
            return None
        (n,) = struct.unpack(">I", st["data"][:4])
        if len(st["data"]) < 4 + n:
            return None
        m = msgpack.unpackb(st["data"][4:4 + n])
        st["data"] = st["data"][4 + n:]
        return m

    async def call(self, header, body=b"", fin=True):
        sid = await self.open(header, fin=fin, body=body)
        holder = {}

        def got():
            if "h" not in holder:
                h = self.header(sid)
                if h is not None:
                    holder["h"] = h
            return "h" in holder
        await self.until(got)
        return sid, holder["h"]


def records(data):
    out = []
    while len(data) >= 5:
        kind, n = struct.unpack(">BI", data[:5])
        if len(data) < 5 + n:
            break
        out.append((kind, data[5:5 + n]))
        data = data[5 + n:]
    return out


state = {"upgrades": 0, "sessions": 0}
done = asyncio.Event()


async def process_request(path, headers):
    state["upgrades"] += 1
    if state["upgrades"] == 1:
        return http.HTTPStatus.UNAUTHORIZED, [], b"first try refused on purpose\n"
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
        proc = subprocess.Popen([SANDBOXD, "--boot", boot, "--home", home, "--no-switch-user"], env=env)
        await asyncio.wait_for(done.wait(), 30)
        check(state["upgrades"] == 3, "refused, served, reconnected (%d upgrades)" % state["upgrades"])
        check(os.path.exists(os.path.join(home, "w.bin")), "the file landed in the home")
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.get_running_loop().run_in_executor(None, lambda: proc.wait(10))
        check(rc == 0, "SIGTERM exits 0 (got %r)" % rc)
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
print("%d failures" % len(failures), file=sys.stderr)
sys.exit(1 if failures else 0)
