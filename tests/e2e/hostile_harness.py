#!/usr/bin/python3
"""tests/e2e/hostile_harness.py: an ACP harness that misbehaves on purpose,
for e2e.conversations (run by the fake driver's sandboxd as a runtime's
harness). What it does is read from the file `mode` in its working
directory (the agent's home, written by the test through the files API):

  garbage  on a prompt: a line that is not JSON, a JSON array, an answer
           to an id never sent, a 5 MiB line; then one update and the stop
  exit     writes a sentence to stderr and exits 3 at once
  silent   never answers initialize
  stderr   writes 10 MiB to stderr first, then behaves
  flood    on a prompt: 5,000 updates, then the stop
  (other)  behaves: one update, the stop end_turn"""
import json
import os
import sys

mode = open("mode").read().strip() if os.path.exists("mode") else ""
out = sys.stdout


def send(obj):
    out.write(json.dumps(obj) + "\n")
    out.flush()


if mode == "exit":
    sys.stderr.write("hostile harness: exiting at once\n")
    sys.stderr.flush()
    sys.exit(3)
if mode == "stderr":
    chunk = "e" * 65535 + "\n"
    for _ in range(160):
        sys.stderr.write(chunk)
    sys.stderr.flush()

for line in sys.stdin:
    m = json.loads(line)
    method, mid = m.get("method"), m.get("id")
    if method == "initialize":
        if mode != "silent":
            send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": 1, "agentCapabilities": {}}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": "s-%s" % mid}})
    elif method == "session/prompt":
        sid = m["params"]["sessionId"]

        def update(text):
            send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": {
                "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})
        if mode == "garbage":
            out.write("{not json\n")
            out.write("[1, 2]\n")
            send({"jsonrpc": "2.0", "id": 9999, "result": {}})
            out.write("x" * (5 << 20) + "\n")
            out.flush()
            update("still here")
        elif mode == "flood":
            for i in range(5000):
                update("u%d" % i)
        else:
            update("fine")
        send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
