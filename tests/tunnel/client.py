"""tests/tunnel/client.py: a scripted sandboxd stand-in for the tunnel tests.

Dials the tunnel actor with python3-websockets and speaks just enough yamux
(the server side of it: answers the streams the tunnel opens) to play the
parts the real sandboxd cannot: a wrong protocol version, a peer that stops
answering pings. Prints one result line on stdout for the C test to check.

usage: client.py URL AGENT TOKEN MODE [ARG]
  MODE auth            connect, print "OK" or "STATUS <http code>", leave
  MODE noagent         like auth without the X-Agenthold-Agent header
  MODE noauth          like auth without the Authorization header
  MODE version N       answer hello with version N (release 0.0.9), print how it ended
  MODE eversion        answer hello with ok=false code EVERSION
  MODE silent          answer hello and every channel but the server's stats
                       with ok, never a ping or a stats request (any frame
                       would show it alive): print "CLOSED" when the server
                       gives up on us
  MODE ok [SECONDS]    answer hello (in 5-byte messages: frames straddle
                       messages), pings and every channel with ok; print
                       "CLOSED ..." when the server closes, "TIMEOUT" after
                       SECONDS (default 20) of silence
  MODE mute            answer hello and pings, never answer a channel
  MODE text            answer hello, then send a text message
  MODE garbage         answer hello, then send bytes that are not yamux
  MODE big             answer hello, then send a 2 MiB binary message (of
                       valid yamux frames: only its size is wrong)
Run with /usr/bin/python3 (Debian's: websockets, msgpack).
"""
import asyncio
import struct
import sys

import msgpack
import websockets

SYN, ACK, FIN, RST = 1, 2, 4, 8


def frame(typ, flags, sid, length, payload=b""):
    return struct.pack(">BBHII", 0, typ, flags, sid, length) + payload


def header(obj):
    body = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(body)) + body


async def send(ws, data):
    """A send after the server closed is dropped, not raised: what the
    server sent before its close (a GoAway) is still read and told."""
    try:
        await ws.send(data)
    except websockets.exceptions.ConnectionClosed:
        pass


async def run(url, agent, token, mode, arg):
    headers = {}
    if mode != "noauth":
        headers["Authorization"] = "Bearer " + token
    if mode != "noagent":
        headers["X-Agenthold-Agent"] = agent
    try:
        ws = await websockets.connect(url, subprotocols=["agenthold-tunnel"],
                                      extra_headers=headers, open_timeout=5,
                                      ping_interval=None, max_size=2 ** 21)
    except websockets.exceptions.InvalidStatusCode as e:
        print("STATUS %d" % e.status_code, flush=True)
        return
    if mode in ("auth", "noauth", "noagent"):
        print("OK", flush=True)
        await ws.close()
        return

    life = float(arg) if mode == "ok" and arg else 20
    buf = b""
    streams = {}        # sid -> bytes received
    answered = set()
    goaway = None
    try:
        while True:
            msg = await asyncio.wait_for(ws.recv(), timeout=life)
            if isinstance(msg, str):
                print("TEXT", flush=True)
                return
            buf += msg
            while len(buf) >= 12:
                _, typ, flags, sid, length = struct.unpack(">BBHII", buf[:12])
                if typ == 0:
                    if len(buf) < 12 + length:
                        break
                    payload = buf[12:12 + length]
                    buf = buf[12 + length:]
                else:
                    payload = b""
                    buf = buf[12:]
                if typ == 2:
                    if flags & SYN and mode != "silent":
                        await send(ws, frame(2, ACK, 0, length))
                    continue
                if typ == 3:
                    goaway = length
                    continue
                if flags & SYN:
                    streams[sid] = b""
                    if mode != "silent":    # silent: ACKs with its answer
                        await send(ws, frame(1, ACK, sid, 0))
                if typ == 0 and sid in streams:
                    streams[sid] += payload
                data = streams.get(sid, b"")
                if sid in answered or len(data) < 4:
                    continue
                n = struct.unpack(">I", data[:4])[0]
                if len(data) < 4 + n:
                    continue
                req = msgpack.unpackb(data[4:4 + n], raw=False)
                answered.add(sid)
                if mode == "silent":
                    if req.get("ch") == "stats":
                        continue
                    await send(ws, frame(1, ACK, sid, 0))
                if req.get("ch") == "hello":
                    if mode == "version":
                        rep = {"ok": True, "version": int(arg), "agent_id": agent,
                               "release": "0.0.9"}
                    elif mode == "eversion":
                        rep = {"ok": False, "code": "EVERSION",
                               "error": "sandboxd speaks tunnel protocol 99, the server speaks %d"
                                        % req.get("version", -1)}
                    else:
                        rep = {"ok": True, "version": req.get("version"), "agent_id": agent}
                    out = frame(0, FIN, sid, len(header(rep)), header(rep))
                    if mode == "ok":
                        # frames may straddle messages: 5 bytes per message
                        for i in range(0, len(out), 5):
                            await send(ws, out[i:i + 5])
                    else:
                        await send(ws, out)
                    if mode == "text":
                        await send(ws, "hello as text")
                    elif mode == "garbage":
                        await send(ws, b"\x07" * 64)
                    elif mode == "big":
                        # valid yamux (ping answers) so only the size is wrong
                        await send(ws, frame(2, ACK, 0, 0) * ((2 << 20) // 12 + 1))
                elif mode == "mute":
                    pass
                else:
                    out = header({"ok": True})
                    await send(ws, frame(0, 0, sid, len(out), out))
    except websockets.exceptions.ConnectionClosed as e:
        print("CLOSED goaway=%s code=%s" % (goaway, e.code), flush=True)
        return
    except asyncio.TimeoutError:
        print("TIMEOUT", flush=True)
        return


def main():
    if len(sys.argv) < 5:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    url, agent, token, mode = sys.argv[1:5]
    arg = sys.argv[5] if len(sys.argv) > 5 else None
    asyncio.run(run(url, agent, token, mode, arg))


if __name__ == "__main__":
    main()
