#!/usr/bin/python3
"""bench/conversations/instant_harness.py: an ACP harness that answers at
once, for bench/conversations (both sides run this same file): initialize
and session/new answered as they come; a session/prompt answered with
UPDATES agent_message_chunk updates (default 3) and the stop end_turn,
with no pause, so the benchmark measures the path and not the harness.
A prompt whose text is "flood SECONDS RATE" is answered with RATE updates
a second for SECONDS seconds (paced by the clock), then the stop.

usage: instant_harness.py [UPDATES]      (ACP on stdin/stdout, a line each)"""
import json
import sys
import time

UPDATES = int(sys.argv[1]) if len(sys.argv) > 1 else 3
out = sys.stdout


def send(obj):
    out.write(json.dumps(obj) + "\n")
    out.flush()


n = 0
while True:
    line = sys.stdin.readline()
    if not line:
        break
    m = json.loads(line)
    method, mid = m.get("method"), m.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": 1, "agentCapabilities": {}}})
    elif method == "session/new":
        n += 1
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": "bench-%d" % n}})
    elif method == "session/prompt":
        sid = m["params"]["sessionId"]
        words = m["params"]["prompt"][0]["text"].split()
        if len(words) == 3 and words[0] == "flood":
            seconds, rate = float(words[1]), int(words[2])
            t0 = time.monotonic()
            total = int(seconds * rate)
            for i in range(total):
                ahead = t0 + i / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
                send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": {
                    "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "u%d" % i}}}})
            send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
            continue
        for i in range(UPDATES):
            send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": {
                "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "part %d " % i}}}})
        send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
    elif mid is not None and method:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no such method"}})
