#!/usr/bin/python3
"""tests/e2e/e2e_life.py: how long things live and what was done, on the
real `agenthold serve` (fake driver, the shipped configuration and lua/,
ports from ahserver.free_port), driven with raw HTTP and the agenthold CLI.

- audit: each operation's row with its fields (who, the agent's id, name
  and tenant, the run from X-Agenthold-Run, byte counts of a read and a
  write, `exit 2` for a failing command, a signal, a timeout), the run a
  turn carries (what its token does on the agent while it is open), the
  filters (agent,
  operation, run, failed, text, tenant), keyset paging that stays correct
  while rows arrive, rows kept (with the name) after the agent is deleted,
  `agenthold log`; hostile filters and run ids refused.
- retention: rows whose clock says 40 days ago (the test writes their
  time) are deleted by the sweep at start, the 20-day-old ones kept, and
  the sweep is recorded with its count.
- lifetimes: with a container TTL of 2 s, a stopped sandbox's container is
  removed at its TTL (container_expires_at shown before), its home intact,
  and the next start re-creates it with the files there; with a
  workspace TTL, the home is removed and the session opened on it is
  reported lost; a sandbox in error ends both lifetimes too, staying in
  error with its error. Each decision is in the audit trail as actor "ttl".
- tombstones: a destroy failed by an injected driver fault
  (<data>/fake/fail-destroy) keeps its tombstone (`agenthold tombstones`
  shows attempts, next attempt, last error), is retried after the backoff,
  across a server restart, and the tombstone is gone once the driver
  confirms; an admin forgets another one, recorded with its count.
- metrics: GET /metrics for the admin and a metrics token only, terminal
  bytes counted while the terminal is open, the tunnel's sessions as the
  tunnel counts them, and `promtool check metrics` passes on it.

usage: e2e_life.py AGENTHOLD_BINARY
Fails loudly (the server's log on stderr); always kills what it started and
removes its temporary directory."""
import json
import os
import sqlite3
import shutil
import subprocess
import sys
import tempfile
import time
import types
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahlocal  # noqa: E402
import ahserver  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
SRC = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TMP = tempfile.mkdtemp(prefix="ah-e2e-life-")
LOG = os.path.join(TMP, "server.log")
procs = []


class Fail(Exception):
    pass


check = ahserver.Checks(Fail)


CTX = types.SimpleNamespace(bin=BIN, src=SRC, tmp=TMP, log=LOG, procs=procs, fail=Fail,
                            check=check)


class Server(ahlocal.Local):
    """One `agenthold serve` on a data directory of its own (kept across
    restarts of the same object)."""

    def __init__(self, name, extra=None):
        super().__init__(CTX, name, extra)

    def ops(self, query, tok=ahlocal.ADMIN):
        return self.ok("GET", "/api/v1/operations?" + query, tok)

    def wait_ops(self, query, cond, seconds=30, what="rows"):
        deadline = time.time() + seconds
        while True:
            rows = self.ops(query)["operations"]
            if cond(rows):
                return rows
            if time.time() > deadline:
                raise Fail("never saw %s for ?%s; last %r" % (what, query, rows[:5]))
            time.sleep(0.2)


def run_hdr(run):
    return {"X-Agenthold-Run": run}


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise Fail("no %s in /metrics:\n%s" % (name, text))


def terminal_live(srv, agent, tok):
    """Types into a terminal and, while it is still open, reads /metrics:
    (output, the exposition then)."""
    def metrics_now(out):
        status, text = ahserver.request(srv.port, "GET", "/metrics", None, srv.admin)
        check(status == 200, "/metrics while a terminal is open: %d" % status)
        # And the audit trail has its bytes before it closes.
        srv.wait_ops("operation=terminal.bytes&agent=" + agent, lambda rows: len(rows) >= 1 and rows[0]["bytes"] > 0,
                     seconds=10, what="terminal.bytes while the terminal is open")
        return text.decode()
    out, text, _ = ahserver.terminal(srv.port, agent, tok, "echo term$((6*7))\n", lambda out: b"term42" in out,
                                     seconds=20, while_open=metrics_now)
    return out, text


def turn_runs(srv, acme):
    """A turn's run stamps what its token does on the agent while the turn
    is open, without a header: files, exec, terminal. Another token's
    requests meanwhile, and the token's after the turn, carry none. A
    turn that names no run is its own run (its id)."""
    turn = srv.ok("POST", "/api/v1/agents/alpha/turns", acme, {"run": "run-5"})
    srv.ok("POST", "/api/v1/agents/alpha/exec", acme, {"cmd": "echo in-turn"})
    status, _ = ahserver.request(srv.port, "PUT", "/api/v1/agents/alpha/files/turn.txt", b"abc", acme)
    check(status == 200, "PUT during a turn: %d" % status)
    srv.ok("POST", "/api/v1/agents/alpha/exec", body={"cmd": "echo by-admin"})
    out, text = terminal_live(srv, "alpha", acme)
    check(b"term42" in out, "the terminal answered: %r" % out[-200:])
    check(metric(text, 'agenthold_bytes_total{channel="terminal"}') > 0,
          "terminal bytes are counted while the terminal is open:\n%s" % text)
    srv.ok("DELETE", "/api/v1/turns/%s" % turn["turn_id"], acme)
    srv.ok("POST", "/api/v1/agents/alpha/exec", acme, {"cmd": "echo after-turn"})
    rows = srv.wait_ops("run=run-5", lambda rows: len(rows) >= 6 and rows[0]["kind"] == "turn.end",
                        what="the turn's rows")
    periodic = [o for o in rows if o["kind"] == "terminal.bytes"]
    rows = [o for o in rows if o["kind"] != "terminal.bytes"]
    check([o["kind"] for o in rows] == ["turn.end", "terminal.close", "terminal.open", "fs.write", "exec",
                                        "turn.begin"]
          and all(o["actor"] == "api:acme-ci" for o in rows + periodic),
          "what the turn's token did while it was open carries its run: %r" % rows)
    check(rows[1]["bytes"] > 0 and periodic and 0 < sum(o["bytes"] for o in periodic) <= rows[1]["bytes"],
          "terminal.bytes rows while it was open, terminal.close with the total: %r %r" % (periodic, rows[1]))
    for cmd in ("echo by-admin", "echo after-turn"):
        row = srv.wait_ops("agent=alpha&operation=exec&q=" + urllib.parse.quote(cmd), lambda rows: len(rows) == 1,
                           what=cmd)[0]
        check(row["run"] is None, "%r carries no run: %r" % (cmd, row))
    turn = srv.ok("POST", "/api/v1/agents/alpha/turns", acme)
    srv.ok("POST", "/api/v1/agents/alpha/exec", acme, {"cmd": "echo own-run"})
    srv.ok("POST", "/api/v1/agents/alpha/exec", acme, {"cmd": "echo named"}, headers=run_hdr("run-6"))
    srv.ok("DELETE", "/api/v1/turns/%s" % turn["turn_id"], acme)
    rows = srv.wait_ops("run=" + turn["turn_id"], lambda rows: len(rows) == 3, what="the unnamed turn's rows")
    check([(o["kind"], o["detail"]) for o in rows]
          == [("turn.end", "turn " + turn["turn_id"]), ("exec", "echo own-run"),
              ("turn.begin", "turn " + turn["turn_id"])],
          "a turn that names no run is its own run: %r" % rows)
    rows = srv.wait_ops("run=run-6", lambda rows: len(rows) == 1, what="run-6")
    check(rows[0]["detail"] == "echo named", "a run named in the request wins over the turn's: %r" % rows)


# ---------------------------------------------------------------------------
# The audit trail

def audit():
    srv = Server("audit", {"AGENTHOLD_AUDIT_TERMINAL_BYTES_INTERVAL": "300ms"}).start()
    rc, out, err = srv.cli("tenant", "create", "acme")
    check(rc == 0, "tenant create acme: %r" % err)
    rc, acme, err = srv.cli("--tenant", "acme", "token", "create", "--name", "acme-ci")
    acme = acme.strip()
    check(rc == 0 and len(acme) == 64, "token for acme: %r" % err)
    a = srv.ok("POST", "/api/v1/agents?wait=1", acme, {"name": "alpha"}, headers=run_hdr("run-1"))
    aid = a["id"]
    srv.wait_state("alpha", ("running",))
    payload = b"x" * 12345
    status, _ = ahserver.request(srv.port, "PUT", "/api/v1/agents/alpha/files/nodir/todo.txt", payload, acme,
                                 run_hdr("run-0"))
    check(status == 404, "PUT into a directory that is not there: %d" % status)
    srv.ok("POST", "/api/v1/agents/alpha/files/notes?op=mkdir", acme, headers=run_hdr("run-1"))
    status, _ = ahserver.request(srv.port, "PUT", "/api/v1/agents/alpha/files/notes/todo.txt", payload, acme,
                                 run_hdr("run-1"))
    check(status == 200, "PUT a file: %d" % status)
    status, body = ahserver.request(srv.port, "GET", "/api/v1/agents/alpha/files/notes/todo.txt", None, acme,
                                    run_hdr("run-2"))
    check(status == 200 and body == payload, "GET the file back: %d %d bytes" % (status, len(body)))
    r = srv.ok("POST", "/api/v1/agents/alpha/exec", acme, {"cmd": "echo hi; exit 2"}, headers=run_hdr("run-2"))
    check(r["status"] == 2, "exit 2 is the command's status: %r" % r)
    r = srv.ok("POST", "/api/v1/agents/alpha/exec", acme, {"cmd": "kill -9 $$"}, headers=run_hdr("run-2"))
    check(r["signal"] == 9, "a command killed by signal 9: %r" % r)
    r = srv.ok("POST", "/api/v1/agents/alpha/exec", acme, {"cmd": "true", "run": "run-2"})
    for bad in ({"cmd": "true", "run": 5}, {"cmd": "true", "run": "a b"}):
        status, j = srv.call("POST", "/api/v1/agents/alpha/exec", acme, bad)
        check(status == 400 and "run" in j["error"], "field run %r refused: %d %r" % (bad, status, j))
    status, j = srv.call("POST", "/api/v1/agents/alpha/exec", acme, {"cmd": "true", "run": "run-9"},
                         headers=run_hdr("run-2"))
    check(status == 400 and "differs" in j["error"], "a field run that differs from the header: %d %r" % (status, j))
    turn = srv.ok("POST", "/api/v1/agents/alpha/turns", acme, {"run": "run-4"})
    srv.ok("DELETE", "/api/v1/turns/%s" % turn["turn_id"], acme, headers=run_hdr("run-4"))
    rows = srv.wait_ops("run=run-4", lambda rows: len(rows) == 2, what="the turn's rows")
    check([o["kind"] for o in rows] == ["turn.end", "turn.begin"] and all(o["agent_name"] == "alpha" for o in rows)
          and rows[1]["detail"] == "turn " + turn["turn_id"], "a turn's begin and end carry its run: %r" % rows)
    turn_runs(srv, acme)
    # Hostile run ids and filters.
    for bad in ("", "a b", "x" * 129, "caf\u00e9".encode().decode("latin-1"), "tab\there"):
        status, j = srv.call("GET", "/api/v1/agents/alpha", acme, headers={"X-Agenthold-Run": bad})
        check(status == 400 and "X-Agenthold-Run" in j["error"], "run %r refused: %d %r" % (bad, status, j))
    for q in ("run=a%20b", "agent=..%2Fetc", "operation=", "q=", "limit=0", "before=-1", "failed=maybe",
              "q=" + "x" * 257, "bogus=1"):
        status, j = srv.call("GET", "/api/v1/operations?" + q, acme)
        check(status == 400, "filter ?%s refused: %d %r" % (q, status, j))

    # Each row's fields.
    rows = srv.wait_ops("run=run-2&limit=100", lambda rows: len([o for o in rows if o["kind"] == "exec"]) == 3,
                        what="three exec rows of run-2")
    execs = [o for o in rows if o["kind"] == "exec"]
    check([(o["ok"], o["error"]) for o in execs] == [(True, None), (False, "signal 9"), (False, "exit 2")],
          "exec rows, newest first: ok, 'signal 9', 'exit 2': %r" % execs)
    check(all(o["detail"] in ("true", "kill -9 $$", "echo hi; exit 2") for o in execs),
          "exec rows carry the command, never the output: %r" % execs)
    for o in rows:
        check(o["agent_id"] == aid and o["agent_name"] == "alpha" and o["tenant"] == "acme"
              and o["run"] == "run-2" and o["actor"] == "api:acme-ci",
              "a row of run-2 names the agent, tenant, run and token: %r" % o)
    reads = [o for o in rows if o["kind"] == "fs.read"]
    check(len(reads) == 1 and reads[0]["bytes"] == 12345 and reads[0]["detail"] == "notes/todo.txt",
          "the read's row has its byte count and path: %r" % reads)
    rows = srv.ops("run=run-1&operation=fs.write")["operations"]
    check(len(rows) == 1 and rows[0]["bytes"] == 12345 and rows[0]["ok"],
          "the write's row has its byte count: %r" % rows)
    rows = srv.ops("run=run-0")["operations"]
    check(len(rows) == 1 and not rows[0]["ok"] and rows[0]["bytes"] is None and "No such file" in rows[0]["error"],
          "a refused write is a failure without a byte count: %r" % rows)
    rows = srv.ops("run=run-1&operation=create")["operations"]
    check(len(rows) == 1 and rows[0]["actor"] == "api:acme-ci", "the create is run-1's: %r" % rows)
    states = srv.ops("agent=alpha&operation=state&limit=100")["operations"]
    check(states and all(o["actor"] == "api:acme-ci" for o in states),
          "every state step of alpha says the token that caused it: %r" % states)
    # Filters.
    failed = srv.ops("agent=alpha&failed=1&operation=exec")["operations"]
    check(sorted(o["error"] for o in failed) == ["exit 2", "signal 9"], "failed=1: %r" % failed)
    failed = srv.ops("agent=alpha&failed=1")["operations"]
    check(len(failed) == 3 and not any(o["ok"] for o in failed), "failed=1, every kind: %r" % failed)
    found = srv.ops("q=" + urllib.parse.quote("exit 2"))["operations"]
    check([o["detail"] for o in found] == ["echo hi; exit 2"], "q finds the command: %r" % found)
    found = srv.ops("q=" + urllib.parse.quote("%"))["operations"]
    check(found == [], "q: a %% is literal: %r" % found)
    check(srv.ops("tenant=default&agent=alpha")["operations"] == [],
          "an admin within tenant default sees none of acme's rows")
    rc, out, err = srv.cli("log", "alpha", "--operation", "exec", "--failed", tok=acme)
    check(rc == 0 and "exit 2" in out and "signal 9" in out and "true" not in out.split("exec")[-1],
          "agenthold log --operation exec --failed: %d %r %r" % (rc, out, err))

    # Paging while rows arrive: 30 reads in pages of 7, 5 more between pages.
    for i in range(30):
        srv.ok("GET", "/api/v1/agents/alpha/files?path=.", acme, headers=run_hdr("page"))
    srv.wait_ops("run=page&limit=1000", lambda rows: len(rows) == 30, what="30 rows of run page")
    seen, before, pages = [], None, 0
    while True:
        q = "run=page&limit=7" + ("&before=%d" % before if before else "")
        page = srv.ops(q)
        seen += [o["id"] for o in page["operations"]]
        pages += 1
        for i in range(5):
            srv.ok("GET", "/api/v1/agents/alpha/files?path=.", acme, headers=run_hdr("page"))
        if page["next"] is None:
            break
        before = page["next"]
    check(len(seen) == 30 and len(set(seen)) == 30 and seen == sorted(seen, reverse=True),
          "keyset paging read the 30 rows once each, newest first (%d pages): %r" % (pages, seen))
    rc, out, err = srv.cli("log", "--run", "page", "--all", "--limit", "9", "--json", tok=acme)
    check(rc == 0 and len(json.loads(out)) >= 30 + 5 * pages, "log --all pages through: %d %r" % (rc, err))

    # Deleted: the rows stay, with the name and tenant.
    srv.ok("DELETE", "/api/v1/agents/alpha?wait=1", acme, headers=run_hdr("run-3"))
    rows = srv.wait_ops("agent=alpha&operation=state",
                        lambda rows: rows and rows[0]["detail"] == "destroyed", what="destroyed")
    check(rows[0]["agent_name"] == "alpha" and rows[0]["tenant"] == "acme" and rows[0]["actor"] == "api:acme-ci",
          "the last state keeps the name, tenant and cause: %r" % rows[0])
    rows = srv.ops("agent=alpha&limit=1000", acme)["operations"]
    check(len(rows) > 50 and all(o["agent_name"] == "alpha" for o in rows),
          "after the delete, the trail is found by name with the tenant's token: %d rows" % len(rows))
    srv.stop()
    return srv


def retention(srv):
    """The test's own clock: rows whose time says 40 and 20 days ago."""
    db = sqlite3.connect(os.path.join(srv.data, "agenthold.db"))
    now = int(time.time() * 1000)
    with db:
        db.execute("DELETE FROM operations WHERE kind = 'retention.sweep'")
        db.execute("UPDATE operations SET at = ? WHERE run = 'page'", (now - 40 * 86400000,))
        db.execute("UPDATE operations SET at = ? WHERE run = 'run-2'", (now - 20 * 86400000,))
        old = db.execute("SELECT count(*) FROM operations WHERE run = 'page'").fetchone()[0]
    db.close()
    check(old >= 30, "rows to age: %d" % old)
    srv.start()                 # the sweep runs at start (audit.retention_days: 30 by default)
    rows = srv.wait_ops("operation=retention.sweep", lambda rows: len(rows) == 1, what="the sweep's row")
    check(rows[0]["actor"] == "recorder" and rows[0]["ok"]
          and rows[0]["detail"] == "deleted %d operations older than 30 days" % old,
          "the sweep recorded its count (%d): %r" % (old, rows[0]))
    check(srv.ops("run=page")["operations"] == [], "rows past retention are gone")
    check(len(srv.ops("run=run-2")["operations"]) >= 4, "rows within retention stay")
    srv.stop()


# ---------------------------------------------------------------------------
# Lifetimes

def lifetimes():
    srv = Server("ttl", {"AGENTHOLD_SANDBOX_CONTAINER_TTL": "2s",
                         "AGENTHOLD_SANDBOX_WORKSPACE_TTL": "6s",
                         "AGENTHOLD_SANDBOX_TTL_CHECK_INTERVAL": "200ms"}).start()
    a = srv.ok("POST", "/api/v1/agents?wait=1", body={"name": "keeper"})
    srv.wait_state("keeper", ("running",))
    status, _ = ahserver.request(srv.port, "PUT", "/api/v1/agents/keeper/files/kept.txt", b"still here",
                                 srv.admin)
    check(status == 200, "write a file: %d" % status)
    j = srv.ok("POST", "/api/v1/agents/keeper/stop?wait=1")
    j = srv.wait_state("keeper", ("sleeping",))
    check(j["container_expires_at"] and j["workspace_expires_at"] and not j["container_removed"],
          "a sleeping agent shows when its container and home expire: %r" % j)
    check(j["container_expires_at"] < j["workspace_expires_at"], "the container goes first: %r" % j)
    sbx = os.path.join(srv.data, "fake", a["id"])
    rows = srv.wait_ops("agent=keeper&operation=container.expire", lambda rows: len(rows) == 1, seconds=15,
                        what="container.expire")
    check(rows[0]["actor"] == "ttl" and rows[0]["ok"] and "home kept" in rows[0]["detail"],
          "the container's end is recorded by ttl: %r" % rows[0])
    j = srv.wait_state("keeper", ("sleeping",))
    check(j["container_removed"] and j["container_expires_at"] is None,
          "the agent shows its container removed: %r" % j)
    check(not os.path.exists(os.path.join(sbx, "image")), "the fake container (its image file) is gone")
    with open(os.path.join(sbx, "home", "kept.txt")) as f:
        check(f.read() == "still here", "the home is intact")
    states = srv.ops("agent=keeper&operation=state&limit=5")["operations"]
    check(any(o["actor"] == "ttl" and "expire" in o["detail"] for o in states),
          "the guarded step is recorded with its cause: %r" % states)
    # The next start re-creates it, the file still there.
    srv.ok("POST", "/api/v1/agents/keeper/start?wait=1")
    j = srv.wait_state("keeper", ("running",))
    check(not j["container_removed"], "started again: the container is back %r" % j)
    status, body = ahserver.request(srv.port, "GET", "/api/v1/agents/keeper/files/kept.txt", None, srv.admin)
    check(status == 200 and body == b"still here", "the file is read in the re-created sandbox: %d" % status)
    srv.ok("DELETE", "/api/v1/agents/keeper?wait=1")

    # The workspace: a session's home removed after 6 s unused; the session is lost.
    s = srv.ok("POST", "/api/v1/sessions?wait=1", body={"scope": "conversation", "subject": "c-ttl"})
    name = s["agent"]["name"]
    srv.wait_state(name, ("running",))
    srv.ok("POST", "/api/v1/agents/%s/stop?wait=1" % name)
    rows = srv.wait_ops("operation=workspace.expire", lambda rows: len(rows) == 1, seconds=20,
                        what="workspace.expire")
    check(rows[0]["actor"] == "ttl" and rows[0]["agent_name"] == name and rows[0]["ok"],
          "the home's end is recorded by ttl: %r" % rows[0])
    check(not os.path.exists(os.path.join(srv.data, "fake", s["agent"]["id"], "home")),
          "the session's home is gone")
    status, j = srv.call("POST", "/api/v1/sessions/%s/open" % urllib.parse.quote(s["id"]))
    st, got = srv.call("GET", "/api/v1/sessions/%s" % urllib.parse.quote(s["id"]))
    check(st == 200 and got["state"] == "lost" and "workspace_ttl" in (got["lost_reason"] or ""),
          "the session opened by its reference is reported lost: %d %r (open: %d %r)" % (st, got, status, j))

    # A sandbox in error ends its lifetimes too (its container stopped):
    # the row stays in error with its error, and a start makes it again.
    b = srv.ok("POST", "/api/v1/agents?wait=1", body={"name": "broken"})
    srv.wait_state("broken", ("running",))
    srv.ok("POST", "/api/v1/agents/broken/stop?wait=1")
    with open(os.path.join(srv.data, "fake", b["id"], "fail-start"), "w") as f:
        f.write("injected: the sandbox will not start\n")
    srv.call("POST", "/api/v1/agents/broken/start?wait=1")
    j = srv.wait_state("broken", ("error",))
    check(j["container_expires_at"] and j["workspace_expires_at"] and "will not start" in j["error"],
          "an agent in error shows when its container and home expire: %r" % j)
    rows = srv.wait_ops("agent=broken&operation=container.expire", lambda rows: len(rows) == 1, seconds=15,
                        what="container.expire of the agent in error")
    check(rows[0]["actor"] == "ttl" and rows[0]["ok"], "recorded by ttl: %r" % rows[0])
    j = srv.wait_state("broken", ("error",))
    check(j["container_removed"] and "will not start" in j["error"] and j["container_expires_at"] is None,
          "still in error with its error, its container removed: %r" % j)
    check(not os.path.exists(os.path.join(srv.data, "fake", b["id"], "image")), "its container is gone")
    rows = srv.wait_ops("agent=broken&operation=workspace.expire", lambda rows: len(rows) == 1, seconds=20,
                        what="workspace.expire of the agent in error")
    check(rows[0]["actor"] == "ttl" and rows[0]["ok"], "recorded by ttl: %r" % rows[0])
    j = srv.wait_state("broken", ("error",))
    check(j["home_lost"] and "workspace_ttl" in j["home_lost"] and "will not start" in j["error"]
          and j["workspace_expires_at"] is None, "its home is gone, the row in error still: %r" % j)
    states = srv.ops("agent=broken&operation=state&limit=20")["operations"]
    check(any(o["actor"] == "ttl" and o["detail"].startswith("error (op expire") for o in states),
          "the guarded steps are recorded by ttl: %r" % states)
    srv.ok("POST", "/api/v1/agents/broken/start?wait=1")
    j = srv.wait_state("broken", ("running",))
    # sandboxd's hello may be heard before the start's own outcome (which
    # clears container_removed) on a busy machine: a moment, not seconds.
    deadline = time.time() + 5
    while j["container_removed"] and time.time() < deadline:
        time.sleep(0.05)
        j = srv.wait_state("broken", ("running",))
    check(not j["container_removed"], "a start makes it again: %r" % j)
    srv.stop()


# ---------------------------------------------------------------------------
# Tombstones

def tombstones():
    srv = Server("tomb", {"AGENTHOLD_SANDBOX_DESTROY_RETRY_MIN": "1s",
                          "AGENTHOLD_SANDBOX_DESTROY_RETRY_MAX": "3s",
                          "AGENTHOLD_SANDBOX_TTL_CHECK_INTERVAL": "200ms"}).start()
    ids = {}
    for name in ("doomed", "forgotten"):
        ids[name] = srv.ok("POST", "/api/v1/agents?wait=1", body={"name": name})["id"]
        srv.wait_state(name, ("running",))
    fault = os.path.join(srv.data, "fake", "fail-destroy")
    with open(fault, "w") as f:
        f.write("injected: the engine is away\n")
    for name in ("doomed", "forgotten"):
        srv.ok("DELETE", "/api/v1/agents/%s" % name)
        srv.wait_state(name, ("error",))
    tombs = srv.ok("GET", "/api/v1/tombstones")["tombstones"]
    check(sorted(t["agent_id"] for t in tombs) == sorted(ids.values()), "two tombstones: %r" % tombs)
    for t in tombs:
        check(t["attempts"] >= 1 and t["next_attempt_at"] and "engine is away" in t["last_error"],
              "a tombstone says its attempts, next attempt and last error: %r" % t)
    rc, out, err = srv.cli("tombstones")
    check(rc == 0 and ids["doomed"] in out and "NEXT ATTEMPT" in out and "engine is away" in out,
          "agenthold tombstones lists them: %d %r %r" % (rc, out, err))
    # A tenant's token may not see them.
    rc, tok, err = srv.cli("--tenant", "default", "token", "create")
    status, j = srv.call("GET", "/api/v1/tombstones", tok.strip())
    check(status == 403, "tombstones are an admin's: %d %r" % (status, j))
    # Forget one: recorded with its count.
    rc, out, err = srv.cli("tombstones", "forget", ids["forgotten"])
    check(rc == 0 and "forgotten" in out, "tombstones forget: %d %r %r" % (rc, out, err))
    rows = srv.wait_ops("operation=tombstone.forget", lambda rows: len(rows) == 1, what="tombstone.forget")
    check(rows[0]["actor"] == "api:admin" and rows[0]["detail"].startswith("forgot 1 tombstone")
          and rows[0]["agent_name"] == "forgotten", "the forget is recorded with its count: %r" % rows[0])
    status, j = srv.call("DELETE", "/api/v1/tombstones/%s" % ids["forgotten"])
    check(status == 404, "a forgotten tombstone is gone: %d %r" % (status, j))
    status, j = srv.call("DELETE", "/api/v1/tombstones/not-an-id")
    check(status == 400, "a tombstone is named by an agent id: %d %r" % (status, j))
    # The retry after the backoff: attempts grow while the fault stays.
    deadline = time.time() + 20
    while True:
        t = [t for t in srv.ok("GET", "/api/v1/tombstones")["tombstones"] if t["agent_id"] == ids["doomed"]]
        if t and t[0]["attempts"] >= 3:
            break
        check(time.time() < deadline, "the destroy is retried: %r" % t)
        time.sleep(0.2)
    retries = srv.ops("agent=doomed&operation=state&limit=100")["operations"]
    check(any(o["actor"] == "tombstone-retry" and o["detail"].startswith("destroying") for o in retries),
          "a retry is recorded as tombstone-retry: %r" % retries[:5])
    # Across a restart: the fault goes while the server is down.
    srv.stop()
    os.unlink(fault)
    srv.start()
    deadline = time.time() + 20
    while srv.ok("GET", "/api/v1/tombstones")["tombstones"]:
        check(time.time() < deadline, "the tombstone goes once the driver confirms")
        time.sleep(0.2)
    status, _ = srv.call("GET", "/api/v1/agents/%s" % ids["doomed"])
    check(status == 404, "the agent is gone: %d" % status)
    check(not os.path.exists(os.path.join(srv.data, "fake", ids["doomed"])), "its sandbox is gone")
    rows = srv.ops("agent=%s&operation=state" % ids["doomed"])["operations"]
    check(rows[0]["detail"] == "destroyed" and rows[0]["actor"] == "tombstone-retry",
          "the destroy that succeeded was the retry's: %r" % rows[0])
    return srv


# ---------------------------------------------------------------------------
# Metrics

def metrics(srv):
    rc, mtok, err = srv.cli("token", "create", "--metrics", "--name", "scraper")
    mtok = mtok.strip()
    check(rc == 0 and len(mtok) == 64 and "reading /metrics only" in err, "a metrics token: %r" % err)
    status, text = ahserver.request(srv.port, "GET", "/metrics", None, mtok)
    check(status == 200, "a metrics token reads /metrics: %d" % status)
    status, _ = ahserver.request(srv.port, "GET", "/api/v1/agents", None, mtok)
    check(status == 403, "a metrics token reads nothing else: %d" % status)
    rc, tok, err = srv.cli("--tenant", "default", "token", "create")
    status, _ = ahserver.request(srv.port, "GET", "/metrics", None, tok.strip())
    check(status == 403, "a tenant's token does not read /metrics: %d" % status)
    status, _ = ahserver.request(srv.port, "GET", "/metrics", None, None)
    check(status == 401, "no token, no metrics: %d" % status)
    for body in ({"metrics": True, "admin": True}, {"metrics": True, "tenant": "default"}, {"metrics": "yes"},
                 {"metrics": 1}):
        status, j = srv.call("POST", "/api/v1/tokens", body=body)
        check(status == 400, "token %r refused: %d %r" % (body, status, j))
    status, j = srv.call("POST", "/api/v1/tokens", mtok, {"metrics": True})
    check(status == 403, "a metrics token makes no tokens: %d %r" % (status, j))
    toks = srv.ok("GET", "/api/v1/tokens")["tokens"]
    check([t["metrics"] for t in toks if t["name"] == "scraper"] == [True], "token ls says which reads metrics")
    # Something to count: a create, a sleep and a wake.
    srv.ok("POST", "/api/v1/agents?wait=1", body={"name": "counted"})
    srv.wait_state("counted", ("running",))
    srv.ok("POST", "/api/v1/agents/counted/stop?wait=1")
    srv.ok("POST", "/api/v1/agents/counted/start?wait=1")
    srv.wait_state("counted", ("running",))
    # A command that outlives its timeout: its row says so.
    r = srv.ok("POST", "/api/v1/agents/counted/exec", body={"cmd": "sleep 30", "timeout": 1})
    rows = srv.wait_ops("agent=counted&operation=exec", lambda rows: len(rows) == 1, what="the timed-out exec")
    check(not rows[0]["ok"] and rows[0]["error"].startswith("timed out (signal"),
          "a timeout is a failure that says so: %r (answer %r)" % (rows[0], r))
    status, text = ahserver.request(srv.port, "GET", "/metrics", None, srv.admin)
    text = text.decode()
    check(status == 200, "the admin reads /metrics: %d" % status)
    check(metric(text, "agenthold_tunnel_sessions") == 1 and metric(text, "agenthold_tunnel_connections") == 1,
          "the tunnel holds the running sandbox's session:\n%s" % text)
    for want in ('agenthold_sandboxes{state="running",tenant="default"} 1',
                 'agenthold_wakes_total{cause="api"} 1', 'agenthold_sleeps_total{cause="api"} 1',
                 'agenthold_transition_duration_seconds_count{transition="create"} 1',
                 'agenthold_transition_duration_seconds_count{transition="wake"} 1',
                 'agenthold_api_requests_total{route="/api/v1/tombstones",status="200"}',
                 'agenthold_tombstones 0', 'agenthold_policy_errors{holder="lifecycle",script="limits.lua"} 0',
                 '# TYPE agenthold_bytes_total counter', 'agenthold_runtime_images{state="present"}',
                 'agenthold_sweep_results{kind="tombstone.forget",result="ok"} 1'):
        check(want in text, "/metrics has %r:\n%s" % (want, text))
    promtool = shutil.which("promtool")
    check(promtool is not None, "promtool is installed (scripts/install-deps: Debian's prometheus)")
    p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    check(p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(),
          "promtool check metrics passes: %d %r %r" % (p.returncode, p.stdout, p.stderr))
    srv.stop()


def main():
    retention(audit())
    lifetimes()
    metrics(tombstones())
    print("e2e.life: %d checks passed" % check.count)


if __name__ == "__main__":
    sys.exit(ahserver.run(main, Fail, procs, TMP, LOG))
