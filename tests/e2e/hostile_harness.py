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
  slow     on a prompt: an update, 8 s of nothing, an update, the stop
  load     keeps its sessions in the file sessions.json of its home and
           advertises loadSession: session/load replays a session's
           history (updates "replay: ..."); a prompt's answer quotes the
           earlier prompts of its session ("you said before: ...")
  resume   the same, advertising sessionCapabilities.resume instead
           (session/resume: no replay)
Whatever the mode, it writes its pid into the file pid of its home.  (other)  behaves: one update, the stop end_turn"""
import json
import os
import sys
import time

mode = open("mode").read().strip() if os.path.exists("mode") else ""
out = sys.stdout
with open("pid", "w") as f:
    f.write(str(os.getpid()))


def sessions():
    try:
        with open("sessions.json") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def keep(d):
    with open("sessions.json.tmp", "w") as f:
        json.dump(d, f)
    os.rename("sessions.json.tmp", "sessions.json")


def chunk(sid, text):
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})


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
        caps = {"loadSession": True} if mode == "load" else {"sessionCapabilities": {"resume": {}}} \
            if mode == "resume" else {}
        if mode != "silent":
            send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": 1, "agentCapabilities": caps}})
    elif method == "session/new":
        sid = "s-%d-%s" % (os.getpid(), mid)
        d = sessions()
        d[sid] = []
        keep(d)
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": sid}})
    elif method in ("session/load", "session/resume"):
        sid = m["params"]["sessionId"]
        d = sessions()
        if sid not in d or mode not in ("load", "resume"):
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32002, "message": "no session %s" % sid}})
            continue
        if method == "session/load":
            for text in d[sid]:
                chunk(sid, "replay: " + text)
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
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
        elif mode == "slow":
            update("thinking")
            time.sleep(8)
            update("done")
        elif mode == "flood":
            for i in range(5000):
                update("u%d" % i)
        elif mode in ("load", "resume"):
            d = sessions()
            said = d.get(sid, [])
            update("you said before: " + " | ".join(said) if said else "nothing before")
            d[sid] = said + [m["params"]["prompt"][0]["text"]]
            keep(d)
        else:
            update("fine")
        send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
