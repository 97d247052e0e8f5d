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
  client   on a prompt: asks the server fs/* and terminal/* requests,
           good and hostile (paths out of the home, a symlink out, a
           2 MiB write, unknown terminal ids, one terminal too many), and
           answers with one update: the JSON of every answer it got
  permission  on a prompt: asks session/request_permission (an edit,
           options allow and reject) and answers with one update naming
           the outcome it got (client.python answers it by the API)
Whatever the mode, it writes its pid into the file pid of its home.  (other)  behaves: one update, the stop end_turn
Run with --whoami (an admin's harness override, e2e.conversations "override"),
its one update names it instead: "whoami: argv=[...] AH_OVERRIDE=..." (its
arguments and that variable of its environment)."""
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

caps_seen = {}
asked = [0]


def ask(method, params):
    asked[0] += 1
    rid = "c-%d" % asked[0]
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        a = json.loads(line)
        if a.get("id") == rid and "method" not in a:
            return {k: a[k] for k in ("result", "error") if k in a}


def client(sid):
    r = {"caps": caps_seen}
    s = {"sessionId": sid}
    try:
        os.symlink("/etc", "escape")
    except OSError:
        pass
    with open("big.txt", "w") as f:
        f.write("b" * (2 << 20))
    r["write"] = ask("fs/write_text_file", dict(s, path="/home/agent/out.txt", content="hello\nworld\nthird\n"))
    r["on_disk"] = open("out.txt").read() if os.path.exists("out.txt") else None
    r["read"] = ask("fs/read_text_file", dict(s, path="/home/agent/out.txt"))
    r["read_line"] = ask("fs/read_text_file", dict(s, path="/home/agent/out.txt", line=2, limit=1))
    r["dotdot"] = ask("fs/read_text_file", dict(s, path="/home/agent/../../etc/passwd"))
    r["absolute"] = ask("fs/read_text_file", dict(s, path="/etc/passwd"))
    r["relative"] = ask("fs/read_text_file", dict(s, path="out.txt"))
    r["symlink"] = ask("fs/read_text_file", dict(s, path="/home/agent/escape/passwd"))
    r["symlink_write"] = ask("fs/write_text_file", dict(s, path="/home/agent/escape/x", content="x"))
    r["huge_write"] = ask("fs/write_text_file", dict(s, path="/home/agent/huge.txt", content="h" * (2 << 20)))
    r["huge_read"] = ask("fs/read_text_file", dict(s, path="/home/agent/big.txt"))
    r["missing"] = ask("fs/read_text_file", dict(s, path="/home/agent/no/such.txt"))
    t = ask("terminal/create", dict(s, command="sh", args=["-c", "echo hi; echo err >&2; exit 3"],
                                    env=[{"name": "K", "value": "it's"}], cwd="/home/agent"))
    r["create"] = t
    tid = t.get("result", {}).get("terminalId")
    r["wait"] = ask("terminal/wait_for_exit", dict(s, terminalId=tid))
    r["output"] = ask("terminal/output", dict(s, terminalId=tid))
    r["release"] = ask("terminal/release", dict(s, terminalId=tid))
    r["after_release"] = ask("terminal/output", dict(s, terminalId=tid))
    r["unknown"] = ask("terminal/output", dict(s, terminalId="term-nope"))
    r["cwd_out"] = ask("terminal/create", dict(s, command="true", cwd="/tmp"))
    t = ask("terminal/create", dict(s, command="sh", args=["-c", "head -c 100000 /dev/zero | tr '\\0' a"],
                                    outputByteLimit=1000))
    tid = t.get("result", {}).get("terminalId")
    ask("terminal/wait_for_exit", dict(s, terminalId=tid))
    o = ask("terminal/output", dict(s, terminalId=tid)).get("result", {})
    r["limited"] = {"len": len(o.get("output", "")), "truncated": o.get("truncated")}
    ask("terminal/release", dict(s, terminalId=tid))
    ids = []
    for i in range(9):
        a = ask("terminal/create", dict(s, command="sleep", args=["30"]))
        ids.append(a.get("result", {}).get("terminalId"))
        if "error" in a:
            r["ninth"] = a
    r["kill"] = ask("terminal/kill", dict(s, terminalId=ids[0]))
    r["killed"] = ask("terminal/wait_for_exit", dict(s, terminalId=ids[0]))
    for tid in ids:
        if tid:
            ask("terminal/release", dict(s, terminalId=tid))
    return r


for line in sys.stdin:
    m = json.loads(line)
    method, mid = m.get("method"), m.get("id")
    if method == "initialize":
        caps_seen.update(m["params"].get("clientCapabilities", {}))
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
        if "--whoami" in sys.argv[1:]:
            update("whoami: argv=%s AH_OVERRIDE=%s" % (json.dumps(sys.argv[1:]), os.environ.get("AH_OVERRIDE")))
        elif mode == "garbage":
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
        elif mode == "client":
            update(json.dumps(client(sid)))
        elif mode == "permission":
            a = ask("session/request_permission", {"sessionId": sid, "toolCall": {
                "toolCallId": "tc-1", "title": "edit notes.txt", "kind": "edit"}, "options": [
                {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]})
            update("outcome: " + json.dumps(a.get("result", a)))
        else:
            update("fine")
        send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
