#!/usr/bin/python3
"""tests/e2e/e2e_conversations.py: conversations end to end (issue 26) on the
real `agenthold serve` with the fake driver (sandboxd a local process), a
catalog of the test's own whose runtime "acp" names the ACP Go SDK's example
agent as its harness (built by tests/acp/build-example-agent; exit 77, said
loudly, when it cannot be built here: no Go >= 1.24 or no way to the module
proxy), and a runtime "plain" that names none.

  turn       create a conversation (201, 16 hex), prompt: the stream (SSE)
             opens with "turn", carries the text chunks and the tool calls
             (a read and an edit), the permission the edit asks and its
             answer by lua/permission.lua (reject: who "policy", decided_by
             "rule", and why), and ends with the stop end_turn; the log read back
             holds the same entries in order after the prompt (who
             api:admin), pages with ?after&limit; the list shows it idle;
             the audit has the prompt's size and not its text
  answer     a permission answered by the API (POST .../permissions/SEQ):
             an option not offered, a bad or unknown request 400/404, the
             answer logged with who and decided_by "api", once only
  busy       a second prompt while a turn runs: 409; cancel when idle: 409
  cancel     cancel mid-turn (after the first update): 202, the stream
             ends with the stop "cancelled"
  tenant     another tenant's token: 404 on every route (the 6)
  killed     the harness killed (SIGKILL, by its pid) mid-turn: the stream
             ends with an error entry naming the signal, never hangs; the
             next prompt starts it again and its turn ends end_turn
  noharness  an agent whose runtime names no harness: 409 saying so
  crash      the server killed (SIGKILL) mid-turn and started again: the
             turn is ended with an error entry saying so, the conversation
             idle, and it takes the next prompt (which wakes the agent:
             the notice "Starting the sandbox…" right after the prompt)
  harness    hostile harnesses (tests/e2e/hostile_harness.py): lines not
             ACP, an unknown id and a 5 MiB line are error entries and the
             turn goes on; one that exits at once ends the turn with its
             status and stderr; 10 MiB of stderr is drained; 5,000 updates
             stream and are logged; one that never answers initialize ends
             the turn at 30 s
  restore    harnesses that load (and that resume) their sessions, kept in
             their home: after the harness is killed, the next prompt's
             answer quotes the earlier prompt (the conversation continued;
             a load's replay not logged again, no notice); the example
             agent, which does neither, gets a fresh session and the
             notice that the context was reset (killed, crash)
  awake      a turn keeps its agent awake (idle.lua's conversation_turns):
             an agent of idle_minutes 0.05 stays running through an 8 s
             turn and sleeps after it
  policy     lua/permission.lua decides: edited (allow all) it takes effect
             at the next permission; broken, the previous version stays;
             failing in its call, the compiled rule decides and the log
             says why
  cli        `agenthold prompt` and `agenthold conversations` against the
             server: the reply streamed to stdout, tool calls and the
             permission on stderr, exit 0 at end_turn; --conversation
             reuses the conversation (and its ACP session); `--` lets the
             text start with a dash; --json one event a line; a turn that
             fails (the harness exits) exits 1 with its error and stderr;
             SIGINT cancels the turn (exit 130, the log's stop cancelled);
             an unknown agent, another tenant's agent, an unknown
             conversation exit 1 with the server's sentence; --help and
             usage errors (exit 2)
  override   an admin's harness override (field "harness" of create and
             update): on the runtime "acp" the override's harness runs
             instead of the example agent (its argv and environment in
             its answer), the agent object shows its command and only
             the names of its environment (the audit too); cleared
             (null), the runtime's runs again after the next boot; on the
             runtime "plain" (no harness) the override makes prompts
             work; a tenant's token gets 403 with the sentence (API and
             `agenthold create --harness`); hostile overrides (control
             characters, an empty or blank command, 65 arguments, one of
             4097 bytes, a huge environment, a bad name, unknown keys)
             400 with the catalog's sentence, nothing made or changed
  hostile    malformed prompt bodies (not JSON, no text, a number, empty,
             a NUL, an unknown key) 400; a text over 256 KiB 413 naming
             the bound; a body over 1 MiB 413; bad paging 400; an unknown
             conversation 404

usage: e2e_conversations.py AGENTHOLD_BINARY BUILD_SCRIPT OUTDIR [SCENARIO...]"""
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahlocal  # noqa: E402
import ahserver  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
BUILD = os.path.abspath(sys.argv[2])
OUTDIR = os.path.abspath(sys.argv[3])
ONLY = set(sys.argv[4:])
SRC = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TMP = tempfile.mkdtemp(prefix="ah-e2e-conv-")
LOG = os.path.join(TMP, "server.log")
procs = []


class Fail(Exception):
    pass


check = ahserver.Checks(Fail)
CTX = types.SimpleNamespace(bin=BIN, src=SRC, tmp=TMP, log=LOG, procs=procs, fail=Fail, check=check)
AGENT = None        # the example agent's path, once built


def build_agent():
    p = subprocess.run([BUILD, OUTDIR], capture_output=True, text=True, timeout=600)
    if p.returncode == 2:
        sys.stderr.write("SKIPPED: the ACP Go SDK's example agent cannot be built here "
                         "(no Go >= 1.24 or no way to the module proxy):\n%s\n" % p.stderr[-2000:])
        sys.exit(77)
    if p.returncode != 0 or not p.stdout.strip():
        raise Fail("build-example-agent failed (%d): %s" % (p.returncode, p.stderr[-2000:]))
    return p.stdout.strip()


def catalog(path):
    # The harness is a copy of the agent under a name of this run's own,
    # so that the test finds (and kills) only the process it started.
    own = os.path.join(TMP, "acp-agent-%d" % os.getpid())
    with open(AGENT, "rb") as src, open(own, "wb") as dst:
        dst.write(src.read())
    os.chmod(own, 0o755)
    with open(path, "w") as f:
        json.dump({"version": 2, "runtimes": [
            {"alias": "acp", "description": "the ACP Go SDK's example agent", "image": "agenthold/acp-test:1",
             "harness": {"command": [own], "env": {"AH_E2E": "1"}}},
            {"alias": "plain", "description": "no harness", "image": "agenthold/plain-test:1"},
            {"alias": "hostile", "description": "a harness that misbehaves", "image": "agenthold/hostile-test:1",
             "harness": {"command": [sys.executable, os.path.join(SRC, "tests", "e2e", "hostile_harness.py")]}}]}, f)
    return own


SERVER = None
HARNESS = None
LUA = os.path.join(TMP, "lua")


def server():
    global SERVER, HARNESS
    if SERVER is None:
        cat = os.path.join(TMP, "catalog.json")
        HARNESS = catalog(cat)
        # The shipped scripts in a directory of the test's own: "policy"
        # edits permission.lua there.
        shutil.copytree(os.path.join(SRC, "lua"), LUA)
        SERVER = ahlocal.Local(CTX, "conv", {"AGENTHOLD_CATALOG_PATH": cat,
                                             "AGENTHOLD_POLICY_LUA_DIR": LUA,
                                             "AGENTHOLD_SANDBOX_IDLE_CHECK_INTERVAL": "1s",
                                             # its scenarios keep more than the 10 running a tenant may
                                             "AGENTHOLD_LIMITS_TENANT_MAX_RUNNING": "40",
                                             "AGENTHOLD_LIMITS_POOL_MAX_RUNNING": "40",
                                             "AGENTHOLD_CONVERSATIONS_PERMISSION_TIMEOUT": "2s"}).start()
        SERVER.ok("POST", "/api/v1/agents", body={"name": "a", "runtime": "acp"})
        SERVER.wait_state("a", ("running",))
    return SERVER


def conv(srv, agent="a"):
    j = srv.ok("POST", "/api/v1/agents/%s/conversations" % agent, body={}, want=(201,))
    check(len(j["id"]) == 16 and all(c in "0123456789abcdef" for c in j["id"]), "a conversation id: %r" % j)
    return j["id"]


class Stream:
    """POST .../prompt and read its server-sent events on a thread."""

    def __init__(self, srv, cid, text, tok=None, agent="a"):
        self.events = []
        self.status = None
        self.error = None
        self.done = threading.Event()
        self.c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        body = json.dumps({"text": text})
        self.c.request("POST", "/api/v1/agents/%s/conversations/%s/prompt" % (agent, cid), body=body,
                       headers={"Authorization": "Bearer " + (tok or srv.admin),
                                "Content-Type": "application/json"})
        self.r = self.c.getresponse()
        self.status = self.r.status
        if self.status != 200:
            self.body = self.r.read()
            self.done.set()
            return
        check(self.r.getheader("Content-Type") == "text/event-stream", "SSE: %r" % self.r.getheaders())
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            ev = {}
            while True:
                line = self.r.fp.readline()
                if not line:
                    break
                line = line.decode().rstrip("\n")
                if line == "":
                    if ev:
                        ev["data"] = json.loads(ev.get("data", "null"))
                        self.events.append(ev)
                    ev = {}
                    continue
                k, _, v = line.partition(": ")
                ev[k] = v
        except Exception as e:      # noqa: BLE001: said in the check
            self.error = repr(e)
        finally:
            self.done.set()

    def wait(self, seconds=60):
        check(self.done.wait(seconds), "the stream ended within %d s: %r" % (seconds, self.events[-3:]))
        check(self.error is None, "the stream read cleanly: %s" % self.error)
        return self.events

    def until(self, pred, seconds=30):
        ahserver.wait_until(lambda: any(pred(e) for e in self.events) or self.done.is_set(), seconds,
                            "an event", fail=Fail)


def log(srv, cid, query=""):
    return srv.ok("GET", "/api/v1/agents/a/conversations/%s%s" % (cid, query))


# ---------------------------------------------------------------------------

def turn():
    srv = server()
    cid = conv(srv)
    s = Stream(srv, cid, "hello there")
    check(s.status == 200, "the prompt streams: %r" % s.status)
    evs = s.wait()
    kinds = [e["event"] for e in evs]
    check(kinds[0] == "turn" and evs[0]["data"]["conversation"] == cid and evs[0]["data"]["prompt_seq"] == 1,
          "the stream opens with the turn: %r" % evs[:1])
    check(kinds[-1] == "stop" and evs[-1]["data"]["body"]["stopReason"] == "end_turn",
          "the stream ends with the stop end_turn: %r" % evs[-1:])
    chunks = [e for e in evs if e["event"] == "update"
              and e["data"]["body"].get("sessionUpdate") == "agent_message_chunk"]
    check(len(chunks) >= 2 and all(e["data"]["who"] == "harness" for e in chunks), "text chunks: %r" % kinds)
    tools = [e["data"]["body"] for e in evs if e["event"] == "tool_call"]
    check(any(t.get("kind") == "read" for t in tools) and any(t.get("kind") == "edit" for t in tools)
          and any(t.get("sessionUpdate") == "tool_call_update" for t in tools), "tool calls: %r" % tools)
    perm = kinds.index("permission")
    ans = evs[perm + 1]["data"]
    check(ans["kind"] == "permission_answer" and ans["who"] == "policy" and ans["body"]["decided_by"] == "rule"
          and ans["body"]["optionId"] == "reject" and ans["body"]["rule"] == "lua/permission.lua"
          and ans["body"]["why"] == "only reads are allowed; this tool call is 'edit'",
          "the edit's permission is rejected by permission.lua, and it says who and why: %r" % ans)
    check([int(e["id"]) for e in evs[1:]] == list(range(2, len(evs) + 1)), "ids are the log's seq: %r"
          % [e.get("id") for e in evs])
    # The log read back: the prompt, then exactly what streamed.
    j = log(srv, cid)
    ents = j["entries"]
    check(ents[0]["kind"] == "prompt" and ents[0]["who"] == "api:admin" and ents[0]["body"]["text"] == "hello there",
          "the log starts with the prompt: %r" % ents[:1])
    check([(e["seq"], e["kind"]) for e in ents[1:]] == [(e["data"]["seq"], e["event"]) for e in evs[1:]],
          "the log holds what streamed, in order")
    check(j["turn_state"] == "idle" and j["acp_session_id"] and j["next_after"] is None, "idle after: %r"
          % {k: j[k] for k in ("turn_state", "acp_session_id", "next_after")})
    p1 = log(srv, cid, "?limit=3")
    p2 = log(srv, cid, "?after=%d&limit=3" % p1["next_after"])
    check([e["seq"] for e in p1["entries"]] == [1, 2, 3] and p1["next_after"] == 3
          and [e["seq"] for e in p2["entries"]] == [4, 5, 6], "pages: %r %r" % (p1["next_after"], p2["entries"][:1]))
    listed = srv.ok("GET", "/api/v1/agents/a/conversations")["conversations"]
    check(any(c["id"] == cid and c["turn_state"] == "idle" for c in listed), "listed: %r" % listed)
    ops = srv.ok("GET", "/api/v1/agents/a/operations?operation=conversation.prompt")["operations"]
    check(ops and ops[0]["bytes"] == len("hello there") and ops[0]["ok"]
          and "hello" not in json.dumps(ops[0]), "the audit has the size, not the text: %r" % ops[:1])
    # A second turn in the same conversation reuses its ACP session.
    evs2 = Stream(srv, cid, "again").wait()
    check(evs2[-1]["event"] == "stop", "a second turn: %r" % evs2[-1:])
    check(log(srv, cid)["acp_session_id"] == j["acp_session_id"], "the same ACP session")
    print("turn: %d events, %d chunks, %d tool calls; the permission rejected by the rule"
          % (len(evs), len(chunks), len(tools)))


def answer():
    srv = server()
    cid = conv(srv)
    base = "/api/v1/agents/a/conversations/%s/permissions/" % cid
    s = Stream(srv, cid, "edit, and I will say yes")
    s.until(lambda e: e["event"] == "permission")
    req = [e for e in s.events if e["event"] == "permission"][0]["data"]["seq"]
    for path, body, want, says in ((base + str(req), {"option": "maybe"}, 400, "allow, reject"),
                                   (base + "x", {"option": "allow"}, 400, "seq"),
                                   (base + "99999", {"option": "allow"}, 404, "no permission request"),
                                   (base + str(req), {}, 400, "option")):
        status, j = srv.call("POST", path, body=body)
        check(status == want and says in j["error"], "%s %r: %d %r" % (path, body, status, j))
    j = srv.ok("POST", base + str(req), body={"option": "allow"}, want=(200,))
    check(j["answered"] is True, "answered: %r" % j)
    status, j = srv.call("POST", base + str(req), body={"option": "allow"})
    check(status == 404, "answered once only: %d %r" % (status, j))
    evs = s.wait()
    ans = answer_of(evs)
    check(ans["who"] == "api:admin" and ans["body"]["decided_by"] == "api" and ans["body"]["optionId"] == "allow"
          and ans["body"]["request"] == req, "the caller's answer, and who: %r" % ans)
    check(evs[-1]["event"] == "stop" and evs[-1]["data"]["body"]["stopReason"] == "end_turn", "the turn ends: %r"
          % evs[-1:])
    ops = srv.ok("GET", "/api/v1/agents/a/operations?operation=conversation.permission")["operations"]
    check(ops and "permission %d: allow" % req in ops[0]["detail"], "the audit has the answer: %r" % ops[:1])
    print("answer: permission %d answered 'allow' by the API; its log says who" % req)


def busy_cancel():
    srv = server()
    cid = conv(srv)
    status, j = srv.call("POST", "/api/v1/agents/a/conversations/%s/cancel" % cid, body={})
    check(status == 409 and "no turn is running" in j["error"], "cancel when idle: %d %r" % (status, j))
    s = Stream(srv, cid, "go and then stop")
    s.until(lambda e: e["event"] == "update")
    status, j = srv.call("POST", "/api/v1/agents/a/conversations/%s/prompt" % cid, body={"text": "more"})
    check(status == 409 and "a turn is running" in j["error"], "a second prompt meanwhile: %d %r" % (status, j))
    j = srv.ok("POST", "/api/v1/agents/a/conversations/%s/cancel" % cid, body={}, want=(202,))
    check(j["cancelling"] is True, "cancel: %r" % j)
    evs = s.wait(30)
    check(evs[-1]["event"] == "stop" and evs[-1]["data"]["body"]["stopReason"] == "cancelled",
          "the cancelled turn ends with the stop cancelled: %r" % evs[-2:])
    check(log(srv, cid)["turn_state"] == "idle", "idle after the cancel")
    # Cancelled while a permission waits for an answer: the cancel answers it.
    s = Stream(srv, cid, "edit, then stop")
    s.until(lambda e: e["event"] == "permission")
    srv.ok("POST", "/api/v1/agents/a/conversations/%s/cancel" % cid, body={}, want=(202,))
    evs2 = s.wait(30)
    ans = answer_of(evs2)
    check(ans["who"] == "server" and ans["body"]["decided_by"] == "the cancel" and ans["body"]["outcome"] == "cancelled"
          and evs2[-1]["event"] == "stop", "the waiting permission is cancelled, the turn ends: %r" % evs2[-3:])
    # (The example agent then ends its turn "end_turn": its choice, logged as it said.)
    print("cancel: the turn stopped 'cancelled' after %d events; a waiting permission answered by the cancel"
          % len(evs))


def tenant():
    srv = server()
    cid = conv(srv)
    srv.ok("POST", "/api/v1/tenants", body={"name": "other"})
    rc, out, err = srv.cli("--tenant", "other", "token", "create")
    check(rc == 0 and len(out.strip()) == 64, "a token of tenant other: %r" % err)
    tok = out.strip()
    base = "/api/v1/agents/a/conversations"
    for method, path, body in (("POST", base, {}), ("GET", base, None), ("GET", base + "/" + cid, None),
                               ("POST", base + "/" + cid + "/prompt", {"text": "hi"}),
                               ("POST", base + "/" + cid + "/cancel", {}),
                               ("POST", base + "/" + cid + "/permissions/2", {"option": "allow"})):
        status, j = srv.call(method, path, tok, body)
        check(status == 404, "another tenant's %s %s: %d %r" % (method, path, status, j))
    # And its own agent does not reach this conversation by id.
    print("tenant: another tenant's token gets 404 on the 6 routes")


def harness_pids():
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.readlink("/proc/%s/exe" % d) == HARNESS:
                    pids.append(int(d))
            except OSError:
                pass
    return pids


def killed():
    srv = server()
    cid = conv(srv)
    s = Stream(srv, cid, "work, then die")
    s.until(lambda e: e["event"] == "update")
    pids = harness_pids()
    check(len(pids) == 1, "one harness process runs: %r" % pids)
    os.kill(pids[0], signal.SIGKILL)
    evs = s.wait(30)
    last = evs[-1]["data"]
    check(evs[-1]["event"] == "error" and "killed by signal 9" in last["body"]["error"] and last["who"] == "server",
          "the turn ends with an error entry naming the signal: %r" % evs[-1:])
    check(log(srv, cid)["entries"][-1]["kind"] == "error" and log(srv, cid)["turn_state"] == "idle",
          "the log ends with it, the conversation idle")
    evs = Stream(srv, cid, "again").wait()
    check(evs[-1]["event"] == "stop" and evs[-1]["data"]["body"]["stopReason"] == "end_turn",
          "the next prompt starts the harness again: %r" % evs[-1:])
    # The example agent neither loads nor resumes: a fresh session, and the notice.
    check(evs[1]["event"] == "notice" and evs[1]["data"]["body"]["notice"] == RESET,
          "the context reset is said: %r" % evs[:2])
    print("killed: error entry %r; the next turn ran" % last["body"]["error"])


def noharness():
    srv = server()
    srv.ok("POST", "/api/v1/agents", body={"name": "p", "runtime": "plain"})
    srv.wait_state("p", ("running",))
    cid = conv(srv, "p")
    status, j = srv.call("POST", "/api/v1/agents/p/conversations/%s/prompt" % cid, body={"text": "hi"})
    check(status == 409 and "names no harness" in j["error"], "no harness: %d %r" % (status, j))
    print("noharness: %s" % j["error"])


def hostile():
    srv = server()
    cid = conv(srv)
    path = "/api/v1/agents/a/conversations/%s/prompt" % cid
    for raw, want, says in ((b"{", 400, ""), (b"[]", 400, ""), (b"{}", 400, "text"),
                            (b'{"text": 5}', 400, "text"), (b'{"text": ""}', 400, "empty"),
                            (b'{"text": "a\\u0000b"}', 400, "u0000"), (b'{"text": "hi", "x": 1}', 400, "x"),
                            (b'{"text": "hi", "text": "ho"}', 400, "text")):
        status, j = srv.call("POST", path, raw=raw)
        check(status == want and says in (j or {}).get("error", ""), "%r: %d %r" % (raw, status, j))
    big = json.dumps({"text": "x" * (256 * 1024 + 1)}).encode()
    status, j = srv.call("POST", path, raw=big)
    check(status == 413 and "262144" in j["error"], "a text over 256 KiB: %d %r" % (status, j))
    status, j = srv.call("POST", path, raw=json.dumps({"text": "x" * (2 << 20)}).encode())
    check(status == 413, "a body over 1 MiB: %d %r" % (status, j))
    evs = Stream(srv, cid, "y" * (256 * 1024)).wait()
    check(evs[-1]["event"] == "stop", "a text of exactly 256 KiB is taken: %r" % evs[-1:])
    for q in ("?after=-1", "?limit=0", "?limit=1001", "?after=x"):
        status, j = srv.call("GET", "/api/v1/agents/a/conversations/%s%s" % (cid, q))
        check(status == 400, "paging %s: %d %r" % (q, status, j))
    for other in ("0123456789abcdef", "nothex", "%2e%2e"):
        status, j = srv.call("GET", "/api/v1/agents/a/conversations/" + other)
        check(status in (400, 404), "conversation %r: %d %r" % (other, status, j))
        status, j = srv.call("POST", "/api/v1/agents/a/conversations/%s/prompt" % other, body={"text": "hi"})
        check(status in (400, 404), "prompt to %r: %d %r" % (other, status, j))
    print("hostile: bodies refused; the text bound 262144 bytes")


def cli():
    srv = server()
    rc, out, err = srv.cli("prompt", "a", "hello", "from", "the", "cli")
    check(rc == 0 and "ACP Go Example Agent" in out, "prompt: the reply on stdout, exit 0: %d %r %r" % (rc, out, err))
    lines = err.splitlines()
    check(lines[0].startswith("conversation ") and len(lines[0].split()[1]) == 16, "prompt: the id first: %r" % err)
    cid = lines[0].split()[1]
    check("[tool] Reading project files (read)" in lines and "[permission] reject, decided by rule" in lines,
          "prompt: the tool calls and the permission on stderr: %r" % lines)
    ents = log(srv, cid)["entries"]
    check(ents[0]["body"]["text"] == "hello from the cli" and ents[-1]["kind"] == "stop", "prompt: logged: %r"
          % ents[:1])
    session = log(srv, cid)["acp_session_id"]
    rc, out, err = srv.cli("conversations", "a")
    row = [ln for ln in out.splitlines() if ln.startswith(cid)]
    check(rc == 0 and out.startswith("ID") and row and row[0].split()[1] == "idle" and session in row[0],
          "conversations: a table with it, idle, its session: %d %r" % (rc, out))
    rc, out, err = srv.cli("conversations", "a", "--json")
    check(rc == 0 and any(c["id"] == cid for c in json.loads(out)), "conversations --json: %d %r" % (rc, err))
    # --conversation: the same conversation and ACP session; after --, a dash is text.
    rc, out, err = srv.cli("prompt", "a", "--conversation", cid, "--", "--not-an-option", "again")
    check(rc == 0 and err.splitlines()[0] == "conversation " + cid, "--conversation: %d %r" % (rc, err))
    j = log(srv, cid)
    prompts = [e["body"]["text"] for e in j["entries"] if e["kind"] == "prompt"]
    check(prompts == ["hello from the cli", "--not-an-option again"] and j["acp_session_id"] == session,
          "--conversation: the second prompt in the same conversation and session: %r" % prompts)
    rc, out, err = srv.cli("prompt", "a", "--json", "in", "json")
    evs = [json.loads(ln) for ln in out.splitlines()]
    check(rc == 0 and "conversation" in evs[0] and evs[-1]["kind"] == "stop"
          and evs[-1]["body"]["stopReason"] == "end_turn" and any(e.get("kind") == "tool_call" for e in evs),
          "--json: one event a line: %d %r" % (rc, evs[-1:]))
    # A failed turn: the harness exits at once.
    name, _ = hostile_agent(srv, "c-exit", "exit")
    rc, out, err = srv.cli("prompt", name, "go")
    check(rc == 1 and "[error] the harness exited with status 3" in err and "exiting at once" in err
          and "agenthold prompt: the turn failed: the harness exited with status 3" in err,
          "a failed turn exits 1 saying why, with the harness's stderr: %d %r" % (rc, err))
    # SIGINT mid-turn cancels the turn and reads on to its stop.
    env = dict(srv.env)
    env["AGENTHOLD_TOKEN"] = srv.admin
    p = subprocess.Popen([BIN, "prompt", "a", "--conversation", cid, "work", "then", "stop"], env=env,
                         cwd=srv.dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(p)
    seen = []
    for line in p.stderr:
        seen.append(line)
        if line.startswith("[tool]"):
            p.send_signal(signal.SIGINT)
            break
    rest = p.communicate(timeout=30)[1]
    check(p.returncode == 130 and "[cancel] cancelling the turn" in rest and "stop reason cancelled" in rest,
          "SIGINT cancels the turn, exit 130: %r %r" % (p.returncode, seen + [rest]))
    last = log(srv, cid)["entries"][-1]
    check(last["kind"] == "stop" and last["body"]["stopReason"] == "cancelled" and log(srv, cid)["turn_state"] == "idle",
          "the log ends with the stop cancelled: %r" % last)
    # Refusals: the server's sentence, exit 1.
    srv.call("POST", "/api/v1/tenants", body={"name": "clio"})
    rc, tok, err = srv.cli("--tenant", "clio", "token", "create")
    check(rc == 0, "a token of tenant clio: %r" % err)
    tok = tok.strip()
    for args, tk, says in ((("prompt", "nosuch", "hi"), None, "no agent named 'nosuch'"),
                           (("conversations", "nosuch"), None, "no agent named 'nosuch'"),
                           (("prompt", "a", "--conversation", "0123456789abcdef", "hi"), None,
                            "no conversation '0123456789abcdef' of agent 'a'"),
                           (("prompt", "a", "hi"), tok, "no agent named 'a'"),
                           (("prompt", "a", "--conversation", cid, "hi"), tok, "no agent named 'a'"),
                           (("conversations", "a"), tok, "no agent named 'a'")):
        rc, out, err = srv.cli(*args, tok=tk) if tk else srv.cli(*args)
        check(rc == 1 and says in err and not out, "%r: exit 1 saying %r: %d %r %r" % (args, says, rc, out, err))
    # Help and usage.
    for args in (("prompt", "--help"), ("help", "prompt"), ("conversations", "--help")):
        rc, out, err = srv.cli(*args)
        check(rc == 0 and out.startswith("usage: agenthold " + args[-1 if args[0] == "help" else 0]),
              "%r: the usage: %d %r" % (args, rc, out))
    for args, says in ((("prompt",), "needs NAME and TEXT"), (("prompt", "a"), "needs NAME and TEXT"),
                       (("prompt", "a", "--bogus", "x"), "unknown option '--bogus'"),
                       (("prompt", "a", "--conversation"), "--conversation needs a value"),
                       (("conversations",), "needs NAME"), (("conversations", "a", "b"), "unexpected argument 'b'")):
        rc, out, err = srv.cli(*args)
        check(rc == 2 and says in err, "%r: exit 2 saying %r: %d %r" % (args, says, rc, err))
    print("cli: prompt streamed, --conversation reused, a failed turn exit 1, SIGINT cancelled (130), refusals")


def override():
    srv = server()
    hh = os.path.join(SRC, "tests", "e2e", "hostile_harness.py")
    mine = {"command": [sys.executable, hh, "--whoami", "two words"],
            "env": {"AH_OVERRIDE": "from the admin", "API_KEY": "not-to-be-shown"}}
    shown = {"command": mine["command"], "env": ["AH_OVERRIDE", "API_KEY"]}

    def texts(evs):
        return [e["data"]["body"]["content"]["text"] for e in evs if e["event"] == "update"]
    # On the runtime "acp": the override's harness runs instead of the example agent.
    j = srv.ok("POST", "/api/v1/agents", body={"name": "ov", "runtime": "acp", "harness": mine})
    check(j.get("harness") == shown and "not-to-be-shown" not in json.dumps(j),
          "create: the agent shows the override's command and its variables' names only: %r" % j.get("harness"))
    srv.wait_state("ov", ("running",))
    cid = conv(srv, "ov")
    evs = Stream(srv, cid, "who are you?", agent="ov").wait()
    check(texts(evs) == ['whoami: argv=["--whoami", "two words"] AH_OVERRIDE=from the admin']
          and evs[-1]["event"] == "stop" and evs[-1]["data"]["body"]["stopReason"] == "end_turn",
          "the override's harness answered, with its argv and environment: %r" % texts(evs))
    # Cleared: the runtime's harness from the next start of it on.
    j = srv.ok("PATCH", "/api/v1/agents/ov", body={"harness": None})
    check(srv.ok("GET", "/api/v1/agents/ov")["harness"] is None, "cleared: harness null")
    rc, out, err = srv.cli("stop", "ov")
    check(rc == 0, "stop: %r" % err)
    evs = Stream(srv, cid, "and now?", agent="ov").wait()
    check(any("ACP Go Example Agent" in x for x in texts(evs)) and evs[-1]["event"] == "stop",
          "after the next boot the runtime's harness runs again: %r" % texts(evs)[:2])
    # Set by an update, on the runtime that names no harness: prompts work.
    srv.ok("POST", "/api/v1/agents", body={"name": "ov-plain", "runtime": "plain"})
    srv.wait_state("ov-plain", ("running",))
    pcid = conv(srv, "ov-plain")
    status, j = srv.call("POST", "/api/v1/agents/ov-plain/conversations/%s/prompt" % pcid, body={"text": "hi"})
    check(status == 409 and "names no harness" in j["error"], "no harness yet: %d %r" % (status, j))
    j = srv.ok("PATCH", "/api/v1/agents/ov-plain", body={"harness": mine})
    check(j.get("harness") == shown, "update: the override shown: %r" % j.get("harness"))
    evs = Stream(srv, pcid, "hi", agent="ov-plain").wait()
    check(texts(evs) and texts(evs)[0].startswith("whoami:"), "the override runs where the runtime names none: %r"
          % [e["event"] for e in evs])
    ops = srv.ok("GET", "/api/v1/operations?limit=1000&agent=ov-plain")["operations"]
    upd = [o for o in ops if o["kind"] == "update"]
    check(upd and "whoami" in upd[0]["detail"] and "not-to-be-shown" not in json.dumps(ops),
          "the audit has the command, not the environment's values: %r" % upd[:1])
    # A tenant's token: 403 with the sentence, on create and update, API and CLI.
    rc, tok, err = srv.cli("--tenant", "default", "token", "create")
    check(rc == 0, "a tenant token: %r" % err)
    tok = tok.strip()
    for method, path, body in (("POST", "/api/v1/agents", {"name": "ov-t", "runtime": "plain", "harness": mine}),
                               ("PATCH", "/api/v1/agents/ov-plain", {"harness": mine}),
                               ("PATCH", "/api/v1/agents/ov-plain", {"harness": None})):
        status, j = srv.call(method, path, tok, body)
        check(status == 403 and "field 'harness'" in j["error"] and "an admin's to set" in j["error"],
              "a tenant's %s %s with harness: %d %r" % (method, path, status, j))
    check(srv.call("GET", "/api/v1/agents/ov-t")[0] == 404, "nothing made by the refused create")
    check(srv.ok("GET", "/api/v1/agents/ov-plain")["harness"] == shown, "nothing changed by the refused updates")
    rc, out, err = srv.cli("create", "ov-t", "--runtime", "plain", "--harness", json.dumps(mine), tok=tok)
    check(rc == 1 and "an admin's to set" in err, "agenthold create --harness as a tenant: %d %r" % (rc, err))
    # The CLI as an admin.
    rc, out, err = srv.cli("create", "ov-cli", "--runtime", "plain", "--no-wait", "--json", "--harness",
                           json.dumps({"command": ["/bin/agent", "--acp"]}))
    check(rc == 0 and json.loads(out)["harness"] == {"command": ["/bin/agent", "--acp"], "env": []},
          "agenthold create --harness: %d %r %r" % (rc, out[-300:], err))
    rc, out, err = srv.cli("create", "ov-cli2", "--harness", "{not json")
    check(rc == 2 and "--harness wants a JSON object" in err, "--harness not JSON: %d %r" % (rc, err))
    rc, out, err = srv.cli("create", "ov-cli2", "--harness", '{"command": []}')
    check(rc == 1 and "harness.command" in err, "--harness refused by the server: %d %r" % (rc, err))
    # Hostile overrides: the catalog's own sentences, nothing made or changed.
    many_env = {"K%d" % i: "v" for i in range(65)}
    for h, says in (("a string", "harness"), ({}, "harness.command\" must be a non-empty array"),
                    ({"command": []}, "non-empty array"), ({"command": "agent"}, "non-empty array"),
                    ({"command": [""]}, "item 0 must be a non-empty string"), ({"command": [1]}, "item 0"),
                    ({"command": ["   "]}, "is blank"),
                    ({"command": ["a\u001bb"]}, "control character"), ({"command": ["a", "x\ny"]}, "control character"),
                    ({"command": ["a\u009bb"]}, "control character"),
                    ({"command": ["a"], "env": {"K": "bell\u0007"}}, "control character"),
                    ({"command": ["a"], "env": {"1K": "v"}}, "not a variable name"),
                    ({"command": ["a"], "env": many_env}, "more than 64 entries"),
                    ({"command": ["a"], "env": {"K": "v" * 1001}}, "at most 1000 bytes"),
                    ({"command": ["a"], "env": ["K=v"]}, "harness.env"),
                    ({"command": ["a"] * 65}, "at most 64"), ({"command": ["x" * 4097]}, "at most 4096 bytes"),
                    ({"command": ["a"], "cwd": "/"}, "unknown field \"cwd\""), (["a"], "harness")):
        status, j = srv.call("POST", "/api/v1/agents", body={"name": "ov-bad", "runtime": "plain", "harness": h})
        check(status == 400 and says in j["error"], "create with harness %.80r: 400 saying %r: %d %r"
              % (h, says, status, j))
        status, j = srv.call("PATCH", "/api/v1/agents/ov-plain", body={"harness": h})
        check(status == 400 and says in j["error"], "update with harness %.80r: %d %r" % (h, status, j))
    check(srv.call("GET", "/api/v1/agents/ov-bad")[0] == 404
          and srv.ok("GET", "/api/v1/agents/ov-plain")["harness"] == shown, "nothing made or changed")
    print("override: the admin's harness ran instead of the runtime's; 403 for a tenant; %d hostile overrides "
          "refused" % 19)


def answer_of(evs):
    kinds = [e["event"] for e in evs]
    check("permission" in kinds, "a permission was asked: %r" % kinds)
    return evs[kinds.index("permission") + 1]["data"]


def policy():
    srv = server()
    cid = conv(srv)
    path = os.path.join(LUA, "permission.lua")
    with open(path) as f:
        shipped = f.read()

    def script(text):
        with open(path, "w") as f:
            f.write(text)
        time.sleep(1.2)         # the policy host looks at the file at most once a second

    # Edited: the next permission is the new script's, no restart.
    script('function permission(r) return { allow = true, why = "the test allows " .. r.tool_kind } end\n')
    ans = answer_of(Stream(srv, cid, "edit it").wait())
    check(ans["body"]["optionId"] == "allow" and ans["body"]["why"] == "the test allows edit"
          and ans["who"] == "policy", "the edited script allows: %r" % ans)
    # Broken (does not compile): the version in force stays.
    script("function permission(r) return { allow = \n")
    ans = answer_of(Stream(srv, cid, "again").wait())
    check(ans["body"]["optionId"] == "allow", "a broken script leaves the previous one in force: %r" % ans)
    # Failing in the call: the compiled rule decides, and the log says why.
    script('function permission(r) error("no decision today") end\n')
    ans = answer_of(Stream(srv, cid, "and again").wait())
    check(ans["body"]["optionId"] == "reject" and ans["body"]["rule"] == "allow reads, reject the rest"
          and "no decision today" in ans["body"]["rule_error"], "a failing call falls back to the rule: %r" % ans)
    script(shipped)
    ans = answer_of(Stream(srv, cid, "once more").wait())
    check(ans["body"]["optionId"] == "reject" and ans["body"]["rule"] == "lua/permission.lua",
          "the shipped script again: %r" % ans)
    print("policy: permission.lua edited, broken and failing; each answer says who decided")


def crash():
    srv = server()
    cid = conv(srv)
    s = Stream(srv, cid, "work while the server dies")
    s.until(lambda e: e["event"] == "update")
    check(log(srv, cid)["turn_state"] == "running", "the turn runs")
    srv.proc.kill()                 # SIGKILL: nothing of the server's runs after it
    srv.proc.wait()
    s.done.wait(10)
    srv.start()
    j = log(srv, cid)
    last = j["entries"][-1]
    check(j["turn_state"] == "idle" and last["kind"] == "error" and last["who"] == "server"
          and "the server stopped during this turn" in last["body"]["error"],
          "after a kill -9 and a restart the turn is ended with the reason: %r %r" % (j["turn_state"], last))
    # The fake driver's sandboxes died with the server: the prompt wakes it.
    evs = Stream(srv, cid, "and now").wait()
    check(evs[-1]["event"] == "stop", "the conversation takes a prompt again, waking its agent: %r" % evs[-1:])
    check(evs[1]["event"] == "notice" and evs[1]["data"]["body"]["notice"] == "Starting the sandbox\u2026"
          and evs[1]["data"]["seq"] == evs[0]["data"]["prompt_seq"] + 1,
          "the log says the prompt woke it, right after the prompt: %r" % evs[:2])
    check(evs[2]["event"] == "notice" and evs[2]["data"]["body"]["notice"] == RESET,
          "then that the context was reset: %r" % evs[:3])
    print("crash: the turn cut by kill -9 ended at the restart: %r" % last["body"]["error"])


def hostile_agent(srv, name, mode):
    """An agent of the runtime "hostile", running, its harness's mode
    written in its home, and a conversation of it: (name, id)."""
    srv.ok("POST", "/api/v1/agents", body={"name": name, "runtime": "hostile"})
    srv.wait_state(name, ("running",))
    status, _ = ahserver.request(srv.port, "PUT", "/api/v1/agents/%s/files/mode" % name, mode.encode(), srv.admin)
    check(status in (200, 201), "the mode written: %d" % status)
    return name, conv(srv, name)


def hostile_harness():
    srv = server()

    def turn(mode, seconds=60):
        name, cid = hostile_agent(srv, "h-" + mode, mode)
        t0 = time.time()
        evs = Stream(srv, cid, "go", agent=name).wait(seconds)
        return name, cid, evs, time.time() - t0

    def errors(evs):
        return [e["data"]["body"]["error"] for e in evs if e["event"] == "error"]

    name, cid, evs, _ = turn("garbage")
    errs = errors(evs)
    check(evs[-1]["event"] == "stop" and any(e["data"]["body"].get("content", {}).get("text") == "still here"
                                             for e in evs if e["event"] == "update"),
          "garbage: the turn goes on to its stop: %r" % [e["event"] for e in evs])
    check(sum("not ACP" in e for e in errs) == 2 and any("unknown id 9999" in e for e in errs)
          and any("longer than 4194304 bytes" in e for e in errs), "garbage: each refusal is an error entry: %r" % errs)
    name, cid, evs, _ = turn("exit")
    last = evs[-1]["data"]["body"]
    check(evs[-1]["event"] == "error" and "exited with status 3" in last["error"]
          and "exiting at once" in last.get("stderr", ""), "exit: an error entry with its stderr: %r" % last)
    name, cid, evs, _ = turn("stderr")
    check(evs[-1]["event"] == "stop", "stderr: 10 MiB of stderr drained, the turn ends: %r" % evs[-1:])
    name, cid, evs, took = turn("flood")
    ups = [e for e in evs if e["event"] == "update"]
    check(len(ups) == 5000 and evs[-1]["event"] == "stop", "flood: 5,000 updates streamed: %d" % len(ups))
    page = srv.ok("GET", "/api/v1/agents/%s/conversations/%s?after=4990&limit=1000" % (name, cid))
    check(page["entries"][-1]["seq"] == 5002 and page["entries"][-1]["kind"] == "stop", "flood: all logged: %r"
          % page["entries"][-1:])
    print("hostile harness: garbage (%d error entries), exit, 10 MiB of stderr, 5,000 updates in %.1f s"
          % (len(errs), took))
    name, cid, evs, took = turn("silent", seconds=60)
    check(evs[-1]["event"] == "error" and "did not answer initialize within 30 s" in evs[-1]["data"]["body"]["error"]
          and 29 < took < 45, "silent: the turn ends at 30 s: %r after %.1f s" % (evs[-1:], took))
    print("hostile harness: one that never answers initialize ended after %.1f s" % took)


def serve():
    """The harness's own requests (hostile_harness.py "client"): fs/* and
    terminal/* served in the home, the hostile ones refused with JSON-RPC
    errors, each in the audit trail by path or command."""
    srv = server()
    name, cid = hostile_agent(srv, "s-client", "client")
    evs = Stream(srv, cid, "go", agent=name).wait(90)
    check(evs[-1]["event"] == "stop", "client: the turn ends with its stop: %r" % evs[-3:])
    ups = [e["data"]["body"].get("content", {}).get("text", "") for e in evs if e["event"] == "update"]
    check(len(ups) == 1, "client: one update with the answers: %r" % ups)
    r = json.loads(ups[0])

    def err(key, part):
        e = r.get(key, {}).get("error", {})
        check("result" not in r.get(key, {}) and part in e.get("message", ""),
              "client: %s refused naming %r: %r" % (key, part, r.get(key)))
    check(r["caps"].get("fs") == {"readTextFile": True, "writeTextFile": True} and r["caps"].get("terminal") is True,
          "client: initialize advertised fs and terminal: %r" % r["caps"])
    check(r["write"].get("result") == {} and r["on_disk"] == "hello\nworld\nthird\n",
          "client: fs/write_text_file wrote the file: %r %r" % (r["write"], r["on_disk"]))
    check(r["read"].get("result") == {"content": "hello\nworld\nthird\n"}, "client: read back: %r" % r["read"])
    check(r["read_line"].get("result") == {"content": "world\n"}, "client: line 2, limit 1: %r" % r["read_line"])
    err("dotdot", "'..'")
    err("absolute", "not under /home/agent")
    err("relative", "not under /home/agent")
    err("symlink", "")
    err("symlink_write", "")
    err("huge_write", "over the 1048576")
    err("huge_read", "over the 1048576")
    err("missing", "")
    check(r["create"].get("result", {}).get("terminalId", "").startswith("term-"), "client: a terminal: %r" % r["create"])
    check(r["wait"].get("result") == {"exitCode": 3, "signal": None}, "client: wait_for_exit: %r" % r["wait"])
    out = r["output"].get("result", {})
    check("hi" in out.get("output", "") and "err" in out.get("output", "") and out.get("truncated") is False
          and out.get("exitStatus", {}).get("exitCode") == 3, "client: terminal/output: %r" % out)
    check(r["release"].get("result") == {}, "client: released: %r" % r["release"])
    err("after_release", "no such terminal")
    err("unknown", "no such terminal")
    err("cwd_out", "not under /home/agent")
    check(r["limited"]["truncated"] is True and 0 < r["limited"]["len"] <= 1000,
          "client: outputByteLimit keeps the last 1000 bytes: %r" % r["limited"])
    err("ninth", "too many terminals: 8")
    check(r["kill"].get("result") == {} and r["killed"].get("result", {}).get("signal") == "SIGKILL",
          "client: terminal/kill ends it by signal 9: %r %r" % (r["kill"], r["killed"]))
    deadline = time.time() + 10
    while True:
        rows = srv.ok("GET", "/api/v1/operations?limit=1000&agent=" + name)["operations"]
        if sum(o["kind"] == "harness.terminal.release" for o in rows) >= 9 or time.time() > deadline:
            break
        time.sleep(0.2)
    kinds = [(o["kind"], o["detail"], o["ok"]) for o in rows]
    check(("harness.fs.write", "out.txt", True) in kinds and ("harness.fs.read", "out.txt", True) in kinds
          and any(k == "harness.fs.read" and d == "/etc/passwd" and not ok for k, d, ok in kinds)
          and any(k == "harness.terminal" and "exit 3" in (d or "") and ok for k, d, ok in kinds)
          and not any("hello" in (o["detail"] or "") for o in rows),
          "client: audited by path and command, never contents: %r" % kinds)
    st = srv.ok("GET", "/api/v1/agents/%s" % name)
    check(st.get("state") == "running", "client: the server and the agent run on: %r" % st.get("state"))
    print("serve: fs/* and terminal/* served, %d hostile requests refused with JSON-RPC errors" % 12)


def awake():
    srv = server()
    name, cid = hostile_agent(srv, "w-slow", "slow")
    srv.ok("PATCH", "/api/v1/agents/" + name, body={"idle_minutes": 0.05})     # 3 s
    s = Stream(srv, cid, "take your time", agent=name)
    time.sleep(6.5)             # twice the idle window, six checks of the sleeper
    j = srv.ok("GET", "/api/v1/agents/" + name)
    check(j["state"] == "running" and not s.done.is_set(), "a running turn keeps its agent awake: %s, %r"
          % (j["state"], j.get("awake_because")))
    evs = s.wait(30)
    check(evs[-1]["event"] == "stop", "the slow turn ends: %r" % evs[-1:])
    j = srv.wait_state(name, ("sleeping",), seconds=20)
    print("awake: a turn of 8 s kept an agent of idle_minutes 0.05 awake; it slept after")


RESET = "The sandbox restarted and the harness could not restore this conversation; its context was reset."


def restore():
    srv = server()
    for mode in ("load", "resume"):
        name, cid = hostile_agent(srv, "r-" + mode, mode)

        def texts(evs):
            return [e["data"]["body"]["content"]["text"] for e in evs if e["event"] == "update"]
        evs = Stream(srv, cid, "remember banana", agent=name).wait()
        check(texts(evs) == ["nothing before"] and evs[-1]["event"] == "stop", "%s: first turn %r" % (mode, evs))
        status, pid = ahserver.request(srv.port, "GET", "/api/v1/agents/%s/files/pid" % name, token=srv.admin)
        pid = int(pid)
        os.kill(pid, signal.SIGKILL)        # a new process: its sessions are gone from memory

        def gone():
            try:
                os.kill(pid, 0)
                return False
            except OSError:
                return True
        ahserver.wait_until(gone, 10, "the harness gone", fail=Fail)
        time.sleep(0.5)                     # its EXIT reaches the actor
        evs = Stream(srv, cid, "what did I say?", agent=name).wait()
        kinds = [e["event"] for e in evs]
        check(texts(evs) == ["you said before: remember banana"] and "notice" not in kinds,
              "%s: the conversation continues in a new process, no notice: %r" % (mode, evs))
        ents = srv.ok("GET", "/api/v1/agents/%s/conversations/%s" % (name, cid))["entries"]
        check(not any("replay:" in json.dumps(e["body"]) for e in ents), "%s: a load's replay is not logged" % mode)
        print("restore: %s: the conversation continued after the harness restarted" % mode)


SCENARIOS = [("turn", turn), ("answer", answer), ("busy", busy_cancel), ("tenant", tenant), ("killed", killed),
             ("noharness", noharness), ("hostile", hostile), ("cli", cli), ("override", override), ("harness", hostile_harness), ("serve", serve), ("policy", policy),
             ("restore", restore), ("awake", awake),
             ("crash", crash)]


def main():
    global AGENT
    unknown = ONLY - {name for name, _ in SCENARIOS}
    check(not unknown, "no such scenario: %s" % ", ".join(sorted(unknown)))
    AGENT = build_agent()
    for name, fn in SCENARIOS:
        if not ONLY or name in ONLY:
            fn()


if __name__ == "__main__":
    ahserver.clean_up_on_signals()
    sys.exit(ahserver.run(main, Fail, procs, TMP, LOG))
