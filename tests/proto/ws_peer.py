#!/usr/bin/python3
"""tests/proto/ws_peer.py: a real WebSocket server (python3-websockets) for
tests/proto/test_ws.c. Prints its port on stdout, then serves one client:
offers the agenthold-tunnel subprotocol, sends a binary message in three
fragments and a ping, echoes the client's messages (a binary echo names
its size first, as text), and on the client's text "bye" closes with code
4000 and reason "done". Exits once that client is gone.

usage: ws_peer.py
"""
import asyncio
import sys

import websockets


async def session(ws, path=None):
    try:
        await ws.send([b"frag-one|", b"frag-two|", b"frag-three"])
        pong = ws.ping(b"are you there")
        await asyncio.wait_for(pong, 5)
        await ws.send("pong ok")
        async for msg in ws:
            if msg == "bye":
                await ws.close(4000, "done")
                break
            if isinstance(msg, bytes):
                await ws.send("binary %d" % len(msg))
            await ws.send(msg)
    finally:
        done.set()


async def main():
    global done
    done = asyncio.Event()
    server = await websockets.serve(session, "127.0.0.1", 0, subprotocols=["agenthold-tunnel"],
                                    max_size=None)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.wait_for(done.wait(), 30)
    server.close()
    await server.wait_closed()


asyncio.run(main())
