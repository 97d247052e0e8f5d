#!/usr/bin/python3
"""tests/docker/boot_peer.py: the server's side of the tunnel, just far
enough to prove a sandbox made by the Docker driver boots: it listens on
the tunnel's unix socket (--unix) or all addresses (--port), accepts sandboxd's WebSocket upgrade on /tunnel (subprotocol
agenthold-tunnel, Authorization: Bearer <token>, X-Agenthold-Agent: <id>),
then opens hello and ping over yamux (docs/tunnel.md) with the Yamux client
of tests/sandboxd/tunnel_peer.py.

Writes hello's reply header as JSON to --out and exits 0 once hello and
ping succeeded; 1 on a wrong header or reply, 2 on timeout. Run with
/usr/bin/python3 (Debian's: python3-websockets, python3-msgpack)."""
import argparse
import asyncio
import json
import os
import sys

import websockets

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sandboxd"))
from tunnel_peer import Yamux  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, help="listen on all addresses at this TCP port")
p.add_argument("--unix", help="listen on this unix socket (what a sandbox without a network dials)")
p.add_argument("--token", required=True)
p.add_argument("--agent", required=True)
p.add_argument("--out", required=True)
p.add_argument("--timeout", type=float, default=40)
args = p.parse_args()

done = asyncio.Event()
result = {"code": 2}


def refuse(why):
    print("boot_peer: refused: " + why, file=sys.stderr)
    return (401, [], (why + "\n").encode())


def process_request(path, headers):
    if path != "/tunnel":
        return refuse("path " + path)
    if headers.get("Authorization") != "Bearer " + args.token:
        return refuse("Authorization " + str(headers.get("Authorization")))
    if headers.get("X-Agenthold-Agent") != args.agent:
        return refuse("X-Agenthold-Agent " + str(headers.get("X-Agenthold-Agent")))
    return None


async def handler(ws, path=None):
    result["code"] = 1
    try:
        if ws.subprotocol != "agenthold-tunnel":
            print("boot_peer: subprotocol %r" % ws.subprotocol, file=sys.stderr)
            return
        y = Yamux(ws)
        _, hello = await y.call({"ch": "hello", "version": 1})
        with open(args.out, "w") as f:
            json.dump(hello, f)
        if not (hello.get("ok") is True and hello.get("agent_id") == args.agent
                and hello.get("version") == 1):
            print("boot_peer: hello answered %r" % hello, file=sys.stderr)
            return
        _, ping = await y.call({"ch": "ping"})
        if ping.get("ok") is not True:
            print("boot_peer: ping answered %r" % ping, file=sys.stderr)
            return
        await y.frame(3, 0, 0, 0)                           # go away, normal
        result["code"] = 0
    except Exception as e:                                  # a test: say it, fail
        print("boot_peer: %r" % e, file=sys.stderr)
    finally:
        done.set()


async def main():
    if args.unix:
        if os.path.exists(args.unix):
            os.unlink(args.unix)
        server = websockets.unix_serve(handler, args.unix, subprotocols=["agenthold-tunnel"],
                                       process_request=process_request)
    else:
        server = websockets.serve(handler, "0.0.0.0", args.port, subprotocols=["agenthold-tunnel"],
                                  process_request=process_request)
    async with server:
        if args.unix:
            os.chmod(args.unix, 0o666)
        try:
            await asyncio.wait_for(done.wait(), args.timeout)
        except asyncio.TimeoutError:
            print("boot_peer: no hello within %.0f s" % args.timeout, file=sys.stderr)
    return result["code"]


sys.exit(asyncio.run(main()))
