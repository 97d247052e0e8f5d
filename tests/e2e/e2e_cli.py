#!/usr/bin/python3
"""tests/e2e/e2e_cli.py: the real `agenthold serve` (fake driver, temporary
data directory, ports from ahserver.free_port) driven with the agenthold CLI and
raw HTTP: create, list, show, start, stop, rebuild, destroy; bad JSON,
unknown agent, missing token, over-limit resources; the tap; then kill -9
in the middle of operations and a restart: every agent is still there and
none is left in a transitional state.

usage: e2e_cli.py AGENTHOLD_BINARY
Fails loudly (the server's log on stderr); always kills what it started and
removes its temporary directory."""
import asyncio
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import websockets

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahserver  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="ah-e2e-cli-")
TRANSITIONAL = {"creating", "starting", "stopping", "rebuilding", "destroying"}
procs = []
checks = 0


class Fail(Exception):
    pass


API_PORT = ahserver.free_port(fail=Fail)
TUNNEL_PORT = ahserver.free_port(avoid={API_PORT}, fail=Fail)
URL = "http://127.0.0.1:%d" % API_PORT
ENV = ahserver.server_env(os.path.join(TMP, "data"), API_PORT, TUNNEL_PORT, extra={
    "AGENTHOLD_TAP_ENDPOINT": "ipc://%s/tap" % TMP,
})
LOG = os.path.join(TMP, "server.log")
server = None


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        raise Fail(what)


def start_server():
    global server
    server = ahserver.serve(BIN, ENV, LOG, cwd=TMP, procs=procs, fail=Fail)


def cli(*args, env=None, timeout=120):
    """Run the CLI; returns (status, stdout, stderr)."""
    p = subprocess.run([BIN] + list(args), env=env or ENV, cwd=TMP, capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def cli_ok(*args):
    rc, out, err = cli(*args)
    check(rc == 0, "agenthold %s: status %d, stderr: %s" % (" ".join(args), rc, err.strip()))
    return out


def cli_json(*args):
    out = cli_ok(*(list(args) + ["--json"]))
    try:
        return json.loads(out)
    except ValueError:
        raise Fail("agenthold %s --json printed no JSON: %r" % (" ".join(args), out))


def cli_fails(expect, *args, env=None):
    rc, out, err = cli(*args, env=env)
    check(rc != 0, "agenthold %s should fail, printed %r" % (" ".join(args), out))
    check(err.startswith("agenthold: ") and expect in err,
          "agenthold %s: stderr %r does not say %r" % (" ".join(args), err, expect))


def token():
    return ahserver.read_token(os.path.join(TMP, "data"))


def http(method, path, body=None, tok=True, raw=None):
    """Returns (status, parsed JSON or None)."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(URL + path, data=data, method=method)
    if tok is True:
        req.add_header("Authorization", "Bearer " + token())
    elif tok:
        req.add_header("Authorization", "Bearer " + tok)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read()
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        raise Fail("%s %s: answer is not JSON: %r" % (method, path, text[:200]))


def expect_error(status, part, method, path, **kw):
    got, j = http(method, path, **kw)
    check(got == status and j and part in j.get("error", ""),
          "%s %s: want %d naming %r, got %d %r" % (method, path, status, part, got, j))


def state(name):
    return cli_json("show", name)["state"]


def settled(deadline_s):
    """Wait until no agent is transitional; returns the agents."""
    deadline = time.time() + deadline_s
    while True:
        agents = cli_json("ls")
        moving = [a for a in agents if a["state"] in TRANSITIONAL]
        if not moving:
            return agents
        if time.time() > deadline:
            raise Fail("agents stuck in a transitional state: %s" %
                       ", ".join("%s=%s" % (a["name"], a["state"]) for a in moving))
        time.sleep(0.2)


async def terminal_session(url, wake_only=False):
    """Type into a terminal, resize it, exit the shell; returns output and close."""
    out = b""
    async with websockets.connect(url) as ws:
        try:
            # Type once the shell is there (its prompt), as a person would.
            while not out:
                out += await asyncio.wait_for(ws.recv(), 30)
            if wake_only:
                return {"out": out, "code": None, "reason": None}
            if True:
                await ws.send(b"echo hi-$((6*7)); stty size\n")
                while b"hi-42" not in out or b"30 100" not in out:
                    out += await asyncio.wait_for(ws.recv(), 15)
                await ws.send(json.dumps({"cols": 120, "rows": 40}))
                await ws.send(b"stty size; exit 5\n")
            while True:
                m = await asyncio.wait_for(ws.recv(), 15)
                out += m if isinstance(m, bytes) else m.encode()
        except websockets.ConnectionClosed as e:
            return {"out": out, "code": e.code, "reason": e.reason}
        except asyncio.TimeoutError:
            raise Fail("the terminal went quiet; output so far: %r" % out[-300:])


async def terminal_refused(url):
    try:
        async with websockets.connect(url):
            return False
    except websockets.InvalidStatusCode:
        return True
    except (websockets.InvalidHandshake, OSError, websockets.ConnectionClosed):
        return True


def scenario():
    start_server()
    check(os.stat(os.path.join(TMP, "data", "admin.token")).st_mode & 0o077 == 0,
          "admin.token is readable by others")

    # Help and usage
    out = cli_ok("--help")
    check("agenthold create" in out and "agenthold tap" in out, "--help lists the commands")
    check("--memory-mb" in cli_ok("help", "create"), "help create names its options")
    check("--no-wait" in cli_ok("start", "--help"), "start --help")
    rc, _, err = cli("create")
    check(rc == 2 and "which agent" in err, "create without a name is a usage error")
    rc, _, err = cli("create", "x", "--cpus", "lots")
    check(rc == 2 and "--cpus" in err, "a bad --cpus is a usage error naming it")
    rc, _, err = cli("frobnicate")
    check(rc == 2 and "frobnicate" in err, "an unknown command is named")

    # Empty, create, list, show
    check("no agents" in cli_ok("ls"), "ls on an empty server")
    check(cli_json("ls") == [], "ls --json on an empty server")
    a = cli_json("create", "alice", "--cpus", "1", "--memory-mb", "512", "--idle-minutes", "30")
    check(a["name"] == "alice" and a["cpus"] == 1 and a["memory_mb"] == 512
          and a["idle_minutes"] == 30, "create returns the agent: %r" % a)
    check(a["state"] not in TRANSITIONAL, "create waited for the sandbox: %r" % a["state"])
    check(len(a["id"]) == 12 and a["created_at"].endswith("Z"), "id and created_at")
    agents = cli_json("ls")
    check([x["name"] for x in agents] == ["alice"], "ls lists alice: %r" % agents)
    table = cli_ok("ls")
    check(table.splitlines()[0].split()[:3] == ["NAME", "STATE", "IMAGE"], "ls table header: %r" % table)
    check("alice" in table.splitlines()[1], "ls table row")
    check(cli_json("show", a["id"])["name"] == "alice", "show by id")
    # Runtimes: no runtime named is the catalog's first; --runtime picks
    # another, whose memory limit is the default; the briefing comes with
    # the agent; a runtime change marks needs_rebuild.
    check(a["runtime"] == "debian" and a["image"].startswith("agenthold/rt-debian:"),
          "no runtime named: the first of the catalog: %r" % a)
    shown = cli_json("show", "alice")
    check("# Your sandbox: the debian runtime" in shown["briefing"], "show --json has the briefing")
    human = cli_ok("show", "alice")
    check("runtime:          debian" in human and "briefing:" in human and "  - Network:" in human,
          "show prints the runtime and the briefing: %r" % human)
    status, j = http("GET", "/api/v1/agents/alice/briefing")
    check(status == 200 and j["runtime"] == "debian" and j["agent"] == "alice" and
          j["text"] == shown["briefing"], "GET /agents/alice/briefing: %d %r" % (status, j))
    b = cli_json("create", "bobby", "--runtime", "busybox")
    check(b["runtime"] == "busybox" and b["image"] == "agenthold/busybox:2" and b["memory_mb"] == 256,
          "--runtime busybox: %r" % b)
    cli_fails("no runtime 'plan9' in the catalog", "create", "carol", "--runtime", "plan9")
    cli_fails("give runtime or image, not both", "create", "carol", "--runtime", "busybox", "--image", "x:1")
    cli_fails("runtime name 'Bad_Name'", "create", "carol", "--runtime", "Bad_Name")
    expect_error(400, "field 'runtime'", "POST", "/api/v1/agents", body={"name": "carol", "runtime": 7})
    status, j = http("PATCH", "/api/v1/agents/bobby", body={"runtime": "debian"})
    check(status == 200 and j["needs_rebuild"] and j["runtime"] == "debian",
          "a runtime change marks needs_rebuild: %d %r" % (status, j))
    rebuilt = cli_json("rebuild", "bobby")
    shown = cli_json("show", "bobby")
    check(shown["runtime"] == "debian" and not shown["needs_rebuild"] and shown["image"].startswith("agenthold/rt-debian:"),
          "after the rebuild: %r %r" % (rebuilt, shown))
    status, j = http("PATCH", "/api/v1/agents/bobby", body={"image": "example/other:1"})
    check(status == 200 and j["needs_rebuild"] and j.get("runtime") is None,
          "an image leaves the catalog: %d %r" % (status, j))
    expect_error(404, "outside the catalog", "GET", "/api/v1/agents/bobby/briefing")
    cli_ok("rm", "bobby")
    check("memory_mb:" in cli_ok("show", "alice"), "show, human")

    # Transitions, waiting (the default) and not
    check(cli_ok("stop", "alice").strip() == "alice: sleeping", "stop waits until asleep")
    check(state("alice") == "sleeping", "asleep after stop")
    check(cli_ok("start", "alice").strip() == "alice: running", "start waits until running")
    check(state("alice") == "running", "running after start")
    out = cli_ok("rebuild", "alice")
    check(out.strip() in ("alice: running", "alice: sleeping"), "rebuild ends: %r" % out)
    check(state("alice") in ("running", "sleeping"), "settled after rebuild")
    if state("alice") != "running":
        cli_ok("start", "alice")
    j = cli_json("stop", "alice", "--no-wait")
    check(j["state"] in ("stopping", "sleeping"), "--no-wait returns at once: %r" % j["state"])
    settled(30)
    check(state("alice") == "sleeping", "the stop ended")

    # The REST API directly: statuses and messages
    status, j = http("GET", "/api/v1/agents/alice")
    check(status == 200 and j["name"] == "alice", "GET one agent")
    expect_error(401, "bearer token", "GET", "/api/v1/agents", tok=False)
    expect_error(401, "bearer token", "GET", "/api/v1/agents", tok="0" * 64)
    expect_error(400, "bad JSON", "POST", "/api/v1/agents", raw=b'{"name": "x",')
    expect_error(400, "unknown field 'colour'", "POST", "/api/v1/agents", body={"name": "x", "colour": 1})
    expect_error(400, "'cpus'", "POST", "/api/v1/agents", body={"name": "x", "cpus": "many"})
    expect_error(404, "no agent named 'nobody'", "GET", "/api/v1/agents/nobody")
    expect_error(404, "no agent named 'nobody'", "POST", "/api/v1/agents/nobody/start")
    expect_error(409, "alice", "POST", "/api/v1/agents", body={"name": "alice"})
    expect_error(413, "over the limit", "POST", "/api/v1/agents", raw=b" " * (2 << 20))
    status, j = http("POST", "/api/v1/agents", body={"name": "big", "cpus": 64})
    check(status == 422 and "cpus" in j["error"], "over-limit cpus: 422 with the policy's message: %d %r" % (status, j))
    policy_message = j["error"]
    status, j = http("POST", "/api/v1/agents", body={"name": "big", "memory_mb": 10 ** 7})
    check(status == 422 and "memory" in j["error"], "over-limit memory: 422: %d %r" % (status, j))
    status, j = http("PATCH", "/api/v1/agents/alice", body={"cpus": 2})
    check(status == 200 and j["cpus"] == 2, "PATCH cpus: %d %r" % (status, j))

    # The CLI says the server's messages
    cli_fails("no agent named 'nobody'", "show", "nobody")
    cli_fails("no agent named 'nobody'", "start", "nobody")
    cli_fails(policy_message, "create", "big", "--cpus", "64")
    bad = dict(ENV, AGENTHOLD_TOKEN="f" * 64)
    cli_fails("bearer token", "ls", env=bad)
    nodir = dict(ENV, AGENTHOLD_SERVER_DATA_DIR=os.path.join(TMP, "nowhere"))
    cli_fails("admin.token", "ls", env=nodir)
    down = dict(ENV, AGENTHOLD_URL="http://127.0.0.1:1")
    cli_fails("cannot reach the server", "ls", env=down)

    # Policy
    pol = cli_json("policy", "status")
    check(any(p["script"] == "limits.lua" for p in pol["policies"]), "policy status lists limits.lua: %r" % pol)
    check(pol["values"]["tenant_max_sandboxes"] == 200 and pol["values"]["tenant_max_running"] == 10,
          "and the values the limits read: %r" % pol)
    cli_ok("policy", "reload")

    # The audit trail, the runtime catalog, turns: answered by the real
    # recorder, builder and sleeper through the API.
    ops = cli_json("log", "alice", "--limit", "100")
    check(any(o["actor"] == "api:admin" and o["kind"] == "create" for o in ops),
          "log alice shows who created it: %r" % ops[:3])
    check(any(o["kind"] == "state" for o in ops), "log alice shows its states")
    check("ACTOR" in cli_ok("log").splitlines()[0], "log table header")
    runtimes = cli_json("runtimes")
    check(runtimes and all("alias" in r and "image" in r for r in runtimes), "runtimes: %r" % runtimes)
    check(runtimes[0]["default"] and runtimes[0]["alias"] == "debian" and
          runtimes[0]["base_image"] == "debian:bookworm-slim", "the shipped default: %r" % runtimes[0])
    status, j = http("GET", "/api/v1/runtimes/%s/briefing" % runtimes[0]["alias"])
    check(status == 200 and j["text"], "briefing: %d %r" % (status, j))
    expect_error(404, "plan9", "GET", "/api/v1/runtimes/plan9/briefing")
    status, turn = http("POST", "/api/v1/agents/alice/turns", body={"lease_ms": 60000})
    check(status == 201 and turn["turn_id"] and turn["expires_at"], "turn start: %d %r" % (status, turn))
    status, j = http("POST", "/api/v1/turns/%s/renew" % turn["turn_id"], body={"lease_ms": 120000})
    check(status == 200 and j["expires_at_ms"] > turn["expires_at_ms"], "turn renew: %d %r" % (status, j))
    status, j = http("DELETE", "/api/v1/turns/%s" % turn["turn_id"])
    check(status == 200, "turn end: %d %r" % (status, j))
    expect_error(404, "", "POST", "/api/v1/turns/%s/renew" % turn["turn_id"])

    # Exec and files through the tunnel (the fake driver's in-process sandboxd)
    check(state("alice") == "running" or cli_ok("start", "alice"), "alice runs for exec")
    status, j = http("POST", "/api/v1/agents/alice/exec",
                     body={"cmd": "echo out; echo err >&2; cat; exit 3", "stdin": "in\n"})
    check(status == 200 and j["stdout"] == "out\nin\n" and j["stderr"] == "err\n" and j["status"] == 3,
          "exec: %d %r" % (status, j))
    # stdin is bytes: a NUL reaches the command; nowhere else is a NUL taken
    status, j = http("POST", "/api/v1/agents/alice/exec", body={"cmd": "wc -c", "stdin": "a\u0000b\n"})
    check(status == 200 and j["stdout"].strip() == "4" and j["status"] == 0,
          "exec: stdin with a NUL reaches the command whole: %d %r" % (status, j))
    expect_error(400, "cmd", "POST", "/api/v1/agents/alice/exec", body={"cmd": "echo a\u0000b"})
    expect_error(400, "env", "POST", "/api/v1/agents/alice/exec", body={"cmd": "true", "env": {"A": "x\u0000y"}})
    expect_error(400, "NUL", "POST", "/api/v1/agents", body={"name": "nul\u0000name"})
    status, j = http("POST", "/api/v1/agents/alice/exec", body={"cmd": "sleep 10", "timeout": 0.5})
    check(status == 200 and j["timed_out"] and j["signal"] == 9, "exec timeout: %d %r" % (status, j))
    expect_error(400, "'cmd' is required", "POST", "/api/v1/agents/alice/exec", body={"timeout": 1})
    status, j = http("POST", "/api/v1/agents/alice/fs/mkdir?path=work/sub&parents=1")
    check(status == 201 and j["created"], "mkdir: %d %r" % (status, j))
    big = bytes(range(256)) * 4096 + b"end"             # 1 MiB + 3: beyond the tunnel's credit
    status, j = http("POST", "/api/v1/agents/alice/exec",
                     body={"cmd": "head -c %d /dev/zero > work/sub/zero.bin; printf 'hi there' > work/note.txt" % len(big)})
    check(status == 200 and j["status"] == 0, "exec writes files: %r" % j)
    status, j = http("GET", "/api/v1/agents/alice/fs/list?path=work")
    names = sorted(e["name"] for e in j.get("entries", []))
    check(status == 200 and names == ["note.txt", "sub"], "list work: %d %r" % (status, j))
    req = urllib.request.Request(URL + "/api/v1/agents/alice/fs/file?path=work/note.txt")
    req.add_header("Authorization", "Bearer " + token())
    with urllib.request.urlopen(req, timeout=30) as r:
        check(r.read() == b"hi there" and r.headers["Content-Type"] == "application/octet-stream",
              "read note.txt")
    req = urllib.request.Request(URL + "/api/v1/agents/alice/fs/file?path=work/sub/zero.bin")
    req.add_header("Authorization", "Bearer " + token())
    with urllib.request.urlopen(req, timeout=30) as r:
        data = r.read()
    check(len(data) == len(big) and data == bytes(len(big)), "read 1 MiB through the tunnel: %d bytes" % len(data))
    # Upload: 3 MiB of random bytes streamed to fs.write, read back the same
    blob = os.urandom(3 << 20)
    status, j = http("PUT", "/api/v1/agents/alice/fs/file?path=work/blob.bin&mode=600", raw=blob)
    check(status == 200 and j["size"] == len(blob), "upload: %d %r" % (status, j))
    req = urllib.request.Request(URL + "/api/v1/agents/alice/fs/file?path=work/blob.bin")
    req.add_header("Authorization", "Bearer " + token())
    with urllib.request.urlopen(req, timeout=60) as r:
        check(r.read() == blob, "the upload reads back the same")
    status, j = http("GET", "/api/v1/agents/alice/fs/list?path=work")
    modes = {e["name"]: e["mode"] for e in j["entries"]}
    check(modes.get("blob.bin") == 0o600, "upload mode 600: %r" % modes)
    expect_error(404, "No such file", "PUT", "/api/v1/agents/alice/fs/file?path=nodir/x", raw=b"hello")
    expect_error(400, "'..' component", "PUT", "/api/v1/agents/alice/fs/file?path=../x", raw=b"hello")
    expect_error(404, "No such file", "GET", "/api/v1/agents/alice/fs/file?path=work/missing")
    expect_error(400, "'..' component", "GET", "/api/v1/agents/alice/fs/file?path=../../etc/passwd")
    expect_error(400, "'path' is required", "GET", "/api/v1/agents/alice/fs/file")
    expect_error(409, "", "DELETE", "/api/v1/agents/alice/fs/file?path=work")
    status, j = http("DELETE", "/api/v1/agents/alice/fs/file?path=work&recursive=1")
    check(status == 200 and j["removed"], "remove work: %d %r" % (status, j))
    expect_error(404, "", "GET", "/api/v1/agents/alice/fs/list?path=work")
    # The terminal: a WebSocket on a pty in the sandbox
    term_url = "ws://127.0.0.1:%d/api/v1/agents/alice/terminal" % API_PORT
    result = asyncio.run(terminal_session(term_url + "?cols=100&rows=30&token=" + token()))
    check(b"hi-42" in result["out"] and b"30 100" in result["out"], "terminal output: %r" % result["out"][-200:])
    check(b"40 120" in result["out"], "terminal resize reached the pty")
    check(result["code"] == 1000 and "status 5" in result["reason"], "terminal close: %r" % result)
    check(asyncio.run(terminal_refused(term_url + "?token=" + "0" * 64)), "a wrong token is refused")
    check(asyncio.run(terminal_refused(term_url.replace("alice", "nobody") + "?token=" + token())),
          "an unknown agent is refused")

    ops = cli_json("log", "alice")
    check(any(o["kind"] == "terminal.open" and o["actor"] == "api:admin" for o in ops), "terminal in the audit trail")
    check(any(o["kind"] == "terminal.close" and o["actor"] == "api:admin" and o["bytes"] > 0 for o in ops),
          "the terminal's close in the audit trail, with its bytes: %r" % [o for o in ops if "terminal" in o["kind"]])
    check(any(o["kind"] == "exec" and "echo out" in (o["detail"] or "") for o in ops), "exec in the audit trail")
    check(any(o["kind"] == "fs.read" and o["detail"] == "work/note.txt" for o in ops), "fs.read in the audit trail")
    check(any(o["kind"] == "fs.write" and o["detail"] == "work/blob.bin" for o in ops), "fs.write in the audit trail")
    cli_ok("stop", "alice")
    expect_error(409, "sleeping", "POST", "/api/v1/agents/alice/exec", body={"cmd": "true"})
    # A terminal on a sleeping agent wakes it and then serves.
    result = asyncio.run(terminal_session(term_url + "?token=" + token(), wake_only=True))
    check(result["out"], "a terminal on a sleeping agent woke it and shows the shell: %r" % result)
    check(state("alice") == "running", "alice runs after the terminal woke it")

    # The tap: one SANDBOX_* message as a JSON line
    tap = subprocess.Popen([BIN, "tap", "--type", "SANDBOX_*", "--count", "1"], env=ENV, cwd=TMP,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(tap)
    time.sleep(0.5)                         # pacing: ZeroMQ tells no one when a SUB has joined
    cli_ok("start", "alice")
    try:
        out, err = tap.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        raise Fail("agenthold tap printed nothing within 20 s")
    line = json.loads(out.splitlines()[0])
    check(line["type"].startswith("SANDBOX_") and "fields" in line and line["from"] and line["to"],
          "tap line: %r" % line)

    # Destroy
    check(cli_ok("rm", "alice").strip() == "alice: destroyed", "rm waits until destroyed")
    cli_fails("no agent named 'alice'", "show", "alice")
    check(cli_json("ls") == [], "no agents after rm")

    # kill -9 mid-operation, restart: everything still there, nothing
    # transitional once the start-up repair has run, and usable. The kill
    # must catch some agent mid-transition (read from the database the dead
    # server left): rounds repeat until one did.
    names = ["carol", "dave", "erin", "frank"]
    for n in names:
        cli_ok("create", n, "--cpus", "1", "--memory-mb", "256")
    caught = []
    for round in range(5):
        agents = {a["name"]: a["state"] for a in cli_json("ls")}
        for n, st in agents.items():
            if st == "running":
                cli_json("stop", n, "--no-wait")
            elif n != "frank":
                cli_json("start", n, "--no-wait")
        if "frank" in agents:
            http("POST", "/api/v1/agents/frank/rebuild")
        os.kill(server.pid, signal.SIGKILL)
        server.wait()
        db = sqlite3.connect(os.path.join(TMP, "data", "agenthold.db"))
        rows = db.execute("SELECT a.name, s.state FROM agents a JOIN sandboxes s ON s.agent_id = a.id").fetchall()
        db.close()
        caught += [(n, st) for n, st in rows if st in TRANSITIONAL]
        start_server()
        after = settled(30)
        got = sorted(a["name"] for a in after)
        check(got == names, "after the crash every agent is there: %r" % got)
        for a in after:
            check(a["state"] in ("running", "sleeping", "error"), "%s is %s" % (a["name"], a["state"]))
        if caught:
            break
    check(caught, "no kill caught an agent mid-transition in 5 rounds")
    print("e2e_cli: the kill caught %s" % ", ".join("%s %s" % c for c in caught))
    # And usable: each starts and stops.
    for n in names:
        if state(n) != "running":
            cli_ok("start", n)
        check(state(n) == "running", "%s runs after the restart" % n)
    cli_ok("stop", "carol")
    check(state("carol") == "sleeping", "carol sleeps")
    cli_ok("rm", "dave")
    check(sorted(a["name"] for a in cli_json("ls")) == ["carol", "erin", "frank"], "dave removed")

    # An orderly shutdown (SIGTERM) ends with status 0 (and, under ASan, no leak).
    server.send_signal(signal.SIGTERM)
    try:
        rc = server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        raise Fail("the server did not stop within 30 s of SIGTERM")
    check(rc == 0, "the server exited with status %d after SIGTERM" % rc)

def main():
    rc = 1
    try:
        scenario()
        print("e2e_cli: %d checks passed" % checks)
        rc = 0
    except (Fail, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
        print("e2e_cli: FAILED after %d checks: %s: %s" % (checks, type(e).__name__, e), file=sys.stderr)
        try:
            with open(LOG) as f:
                sys.stderr.write("---- server log ----\n" + f.read()[-20000:])
        except OSError:
            pass
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(TMP, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
