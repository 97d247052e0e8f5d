"""tests/sandboxd/tunnel_peer.py: the server side of the tunnel, just
enough of it for tests: a yamux client (odd stream ids) over a
python3-websockets connection, channel headers and records.

Each frame is cut at a moving point and sent as two WebSocket messages, so
sandboxd must reassemble frames that straddle messages.
"""
import asyncio
import struct
import sys

import msgpack

failures = []
passed = []


def check(cond, what):
    if cond:
        passed.append(what)
    else:
        failures.append(what)
        print("CHECK failed:", what, file=sys.stderr)


SYN, ACK, FIN, RST = 1, 2, 4, 8

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
    """(kind, payload) pairs of the complete records in data."""
    out = []
    while len(data) >= 5:
        kind, n = struct.unpack(">BI", data[:5])
        if len(data) < 5 + n:
            break
        out.append((kind, data[5:5 + n]))
        data = data[5 + n:]
    return out




def exit_of(recs):
    """The EXIT record's map, or None."""
    if recs and recs[-1][0] == 4:
        return msgpack.unpackb(recs[-1][1])
    return None


async def run(y, cmd, timeout=10, stdin=None):
    """exec cmd; returns (stdout bytes, stderr bytes, exit map)."""
    sid, h = await y.call({"ch": "exec", "cmd": cmd, "timeout": timeout}, fin=stdin is None)
    check(h.get("ok") is True, "exec %r: %r" % (cmd, h))
    if stdin is not None:
        await y.send(sid, struct.pack(">BI", 0, len(stdin)) + stdin)
        await y.send(sid, struct.pack(">BI", 5, 0), fin=True)
    await y.until(lambda: y.streams[sid]["fin"] or y.streams[sid]["rst"], timeout + 10)
    recs = records(y.streams[sid]["data"])
    out = b"".join(p for k, p in recs if k == 1)
    err = b"".join(p for k, p in recs if k == 2)
    return out, err, exit_of(recs)
