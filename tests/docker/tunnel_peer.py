#!/usr/bin/python3
"""tests/docker/tunnel_peer.py: the server's side of the tunnel, just far
enough to prove a sandbox made by the Docker driver boots: it listens on
all addresses, accepts sandboxd's WebSocket upgrade on /tunnel (subprotocol
agenthold-tunnel, Authorization: Bearer <token>, X-Agenthold-Agent: <id>),
opens the hello channel over yamux (docs/tunnel.md) and checks the reply.

Writes the reply header as JSON to --out and exits 0 once hello succeeded;
exits 1 on a wrong header or reply, 2 on timeout. Run with /usr/bin/python3
(Debian's, which has python3-websockets and python3-msgpack)."""
import argparse
import asyncio
import json
import struct
import sys

import msgpack
import websockets

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
p.add_argument("--token", required=True)
p.add_argument("--agent", required=True)
p.add_argument("--out", required=True)
p.add_argument("--timeout", type=float, default=40)
args = p.parse_args()

done = asyncio.Event()
result = {"code": 2}


def refuse(why):
    print("tunnel_peer: refused: " + why, file=sys.stderr)
    return (401, [], (why + "\n").encode())


def process_request(path, headers):
    if path != "/tunnel":
        return refuse("path " + path)
    if headers.get("Authorization") != "Bearer " + args.token:
        return refuse("Authorization " + str(headers.get("Authorization")))
    if headers.get("X-Agenthold-Agent") != args.agent:
        return refuse("X-Agenthold-Agent " + str(headers.get("X-Agenthold-Agent")))
    return None


def frame(typ, flags, stream, length, payload=b""):
    return struct.pack(">BBHII", 0, typ, flags, stream, length) + payload


async def handler(ws, path=None):
    if ws.subprotocol != "agenthold-tunnel":
        print("tunnel_peer: subprotocol %r" % ws.subprotocol, file=sys.stderr)
        result["code"] = 1
        done.set()
        return
    hello = msgpack.packb({"ch": "hello", "version": 1})
    body = struct.pack(">I", len(hello)) + hello
    # Open stream 1 (we are the yamux client), send the header, half-close.
    await ws.send(frame(1, 1, 1, 0))
    await ws.send(frame(0, 4, 1, len(body), body))
    buf = b""
    got = b""
    while True:
        msg = await ws.recv()
        if isinstance(msg, str):
            result["code"] = 1
            break
        buf += msg
        while len(buf) >= 12:
            ver, typ, flags, sid, length = struct.unpack(">BBHII", buf[:12])
            need = 12 + (length if typ == 0 else 0)
            if len(buf) < need:
                break
            payload = buf[12:need]
            buf = buf[need:]
            if typ == 2 and flags & 1:                      # ping: answer it
                await ws.send(frame(2, 2, 0, length))
            if typ == 0 and sid == 1:
                got += payload
        if len(got) >= 4:
            n = struct.unpack(">I", got[:4])[0]
            if len(got) >= 4 + n:
                reply = msgpack.unpackb(got[4:4 + n], raw=False)
                with open(args.out, "w") as f:
                    json.dump(reply, f)
                ok = (reply.get("ok") is True and reply.get("agent_id") == args.agent
                      and reply.get("version") == 1)
                result["code"] = 0 if ok else 1
                await ws.send(frame(3, 0, 0, 0))           # go away, normal
                break
    done.set()


async def main():
    async with websockets.serve(handler, "0.0.0.0", args.port, subprotocols=["agenthold-tunnel"],
                                process_request=process_request):
        try:
            await asyncio.wait_for(done.wait(), args.timeout)
        except asyncio.TimeoutError:
            print("tunnel_peer: no hello within %.0f s" % args.timeout, file=sys.stderr)
    return result["code"]


sys.exit(asyncio.run(main()))
