#!/usr/bin/python3
"""tests/e2e/e2e_tenants.py: tenants, tokens, sessions and limits on the real
`agenthold serve` (fake driver, the shipped configuration and lua/, ports
from ahserver.free_port), driven with raw HTTP and the agenthold CLI.

- matrix: two tenants and an admin, each with tokens; every operation of
  the API (list, show, change, start, stop, rebuild, rm, terminal, files,
  exec, events, audit, turns, sessions) and of the CLI tried by each
  caller on each tenant's sandboxes: a cross-tenant attempt is a 404 (as
  for an agent that does not exist) and changes nothing; the admin
  succeeds, within every tenant or the one --tenant names.
- limits: the seed's caps count what runs: 10 running beside 15 asleep,
  the 11th create, a start and a wake refused with the seed's sentence
  naming the cap; a pool of 20 running shared by three tenants; 50
  concurrent creates at 9 of 10 admit exactly one; the kept cap (every
  sandbox, asleep too) refuses a create;
  limits.lua edited while the server runs takes effect; a broken edit
  keeps the old rule and `agenthold policy status` says why; PUT
  /api/v1/policy changes a cap at run time.
- sessions: 20 concurrent opens of one key make one sandbox; each scope;
  a user session for the token's person only; a lost session (sandbox
  destroyed; its files removed behind the server's back) is reported as
  lost with the reason, and opening the key again starts a fresh one.
- tokens: shown once, only a hash in the database file (the file is
  read), revoked and expired tokens refused at once, forged ones too.

usage: e2e_tenants.py AGENTHOLD_BINARY
Fails loudly (the server's log on stderr); always kills what it started and
removes its temporary directory."""
import concurrent.futures
import hashlib
import http.client
import json
import os
import shutil
import socket
import sqlite3
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
TMP = tempfile.mkdtemp(prefix="ah-e2e-tenants-")
LOG = os.path.join(TMP, "server.log")
procs = []


class Fail(Exception):
    pass


check = ahserver.Checks(Fail)


CTX = types.SimpleNamespace(bin=BIN, src=SRC, tmp=TMP, log=LOG, procs=procs, fail=Fail,
                            check=check)


class Server(ahlocal.Local):
    """One `agenthold serve` on a data directory of its own."""

    def __init__(self, name, extra=None):
        super().__init__(CTX, name, extra)

    def token(self, tenant=None, user=None, name=None, expires=None, admin=False):
        """A token made with the CLI, as an admin would: printed once on stdout."""
        args = (["--tenant", tenant] if tenant else []) + ["token", "create"]
        args += (["--user", user] if user else []) + (["--name", name] if name else [])
        args += (["--expires", expires] if expires else []) + (["--admin"] if admin else [])
        rc, out, err = self.cli(*args)
        check(rc == 0 and len(out.strip()) == 64, "token create %s: %d %r %r" % (args, rc, out, err))
        check("shown this once" in err, "token create says the token is shown once: %r" % err)
        return out.strip()


def upgrade_status(srv, path, tok):
    """The status of a WebSocket upgrade request (the terminal)."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    try:
        s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                   "Authorization: Bearer %s\r\n\r\n" % (path, tok)).encode())
        head = s.recv(4096).decode("latin-1")
        return int(head.split(" ")[1])
    finally:
        s.close()


def events(srv, tok, query=""):
    """An open event stream: a (connection, response) pair."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    c.request("GET", "/api/v1/events" + query, headers={"Authorization": "Bearer " + tok})
    r = c.getresponse()
    return c, r


def read_events(r, until, seconds=10):
    """data: objects of an event stream until one satisfies until()."""
    got = []
    deadline = time.time() + seconds
    while time.time() < deadline:
        line = r.fp.readline()
        if line.startswith(b"data: "):
            got.append(json.loads(line[6:]))
            if until(got[-1]):
                return got
    raise Fail("the event stream never showed what was awaited; got %r" % got)


# ---------------------------------------------------------------------------
# The matrix

def matrix():
    srv = Server("matrix").start()
    adm = srv.admin
    for t in ("acme", "globex"):
        rc, out, err = srv.cli("tenant", "create", t, tok=adm)
        check(rc == 0 and "name:" in out, "tenant create %s: %d %r" % (t, rc, err))
    rc, out, err = srv.cli("tenant", "create", "acme", tok=adm)
    check(rc == 1 and "exists" in err, "a second tenant 'acme' is refused: %d %r" % (rc, err))
    tok = {"acme": srv.token("acme", "alice"), "globex": srv.token("globex", "bob")}
    # Each tenant's agents: the same names in both (unique within a tenant only).
    agents = {}
    for t in ("acme", "globex"):
        for name in ("shared", "victim"):
            a = srv.ok("POST", "/api/v1/agents?wait=1", tok[t], {"name": name})
            check(a["tenant"] == t, "an agent created with %s's token is %s's: %r" % (t, t, a))
            agents[(t, name)] = a["id"]
    srv.ok("POST", "/api/v1/agents/shared/start?wait=1", tok["acme"])
    srv.ok("POST", "/api/v1/agents/shared/start?wait=1", tok["globex"])
    sess = {t: srv.ok("POST", "/api/v1/sessions?wait=1", tok[t], {"scope": "conversation", "subject": "c-1"})
            for t in ("acme", "globex")}
    check(sess["acme"]["id"] != sess["globex"]["id"], "one key in two tenants is two sessions")
    turn = {t: srv.ok("POST", "/api/v1/agents/shared/turns", tok[t], {})["turn_id"] for t in ("acme", "globex")}

    # Each tenant sees its own.
    for t, other in (("acme", "globex"), ("globex", "acme")):
        listed = srv.ok("GET", "/api/v1/agents", tok[t])["agents"]
        check(sorted(a["id"] for a in listed)
              == sorted([agents[(t, n)] for n in ("shared", "victim")] + [sess[t]["agent"]["id"]]),
              "%s lists its own agents only: %r" % (t, listed))
        ops = srv.ok("GET", "/api/v1/operations?limit=1000", tok[t])["operations"]
        foreign = {agents[(other, n)] for n in ("shared", "victim")} | {sess[other]["agent"]["id"]}
        check(ops and not [o for o in ops if o.get("agent_id") in foreign],
              "%s's audit shows nothing of %s's agents" % (t, other))
        listed = srv.ok("GET", "/api/v1/sessions", tok[t])["sessions"]
        check([s["id"] for s in listed] == [sess[t]["id"]], "%s lists its own session only: %r" % (t, listed))
        check(srv.ok("GET", "/api/v1/agents/shared", tok[t])["id"] == agents[(t, "shared")],
              "the name 'shared' is %s's own agent for %s's token" % (t, t))

    # A name two tenants hold names nobody for an admin acting within every
    # tenant: a 409 on every route that takes an agent, the event stream too.
    for path in ("/api/v1/agents/shared", "/api/v1/events?agent=shared", "/api/v1/agents/shared/operations"):
        status, j = srv.call("GET", path, adm)
        check(status == 409 and "more than one tenant" in j["error"], "admin %s: 409, got %d %r" % (path, status, j))
    status, j = srv.call("POST", "/api/v1/agents/shared/turns", adm, {})
    check(status == 409 and "more than one tenant" in j["error"], "admin turn on 'shared': %d %r" % (status, j))

    def snapshot(t):
        rows = {}
        for n in ("shared", "victim"):
            a = srv.ok("GET", "/api/v1/agents/%s?tenant=%s" % (agents[(t, n)], t), adm)
            ops = srv.ok("GET", "/api/v1/agents/%s/operations?limit=1000" % agents[(t, n)], adm)["operations"]
            rows[n] = (a["state"], a["idle_minutes"], len(ops))
        s = srv.ok("GET", "/api/v1/sessions/%s" % sess[t]["id"], adm)
        return rows, s["state"]

    # Every cross-tenant attempt, by id and by name where names differ.
    for t, other in (("acme", "globex"), ("globex", "acme")):
        before = snapshot(other)
        for n in ("shared", "victim"):
            target = agents[(other, n)]
            a = "/api/v1/agents/" + target
            attempts = [
                ("GET", a, None), ("PATCH", a, {"idle_minutes": 3}),
                ("POST", a + "/start", None), ("POST", a + "/stop", None),
                ("POST", a + "/rebuild", None), ("DELETE", a, None),
                ("GET", a + "/files?path=.", None), ("GET", a + "/files/x.txt", None),
                ("POST", a + "/files/newdir?op=mkdir", None), ("DELETE", a + "/files/x.txt", None),
                ("GET", a + "/fs/list?path=.", None), ("POST", a + "/exec", {"cmd": "true"}),
                ("GET", a + "/operations", None), ("POST", a + "/turns", {}),
                ("GET", "/api/v1/events?agent=" + target, None),
                ("POST", "/api/v1/turns/%s/renew" % turn[other], {}),
                ("DELETE", "/api/v1/turns/%s" % turn[other], None),
                ("GET", "/api/v1/sessions/" + sess[other]["id"], None),
                ("POST", "/api/v1/sessions/%s/open" % sess[other]["id"], None),
                ("DELETE", "/api/v1/sessions/" + sess[other]["id"], None),
            ]
            for method, path, body in attempts:
                status, j = srv.call(method, path, tok[t], body)
                check(status == 404, "%s's token: %s %s of %s's agent: want 404, got %d %r"
                      % (t, method, path, other, status, j))
            status, _ = srv.call("PUT", a + "/files/planted.txt", tok[t], raw=b"hostile")
            check(status == 404, "%s's token: PUT a file into %s's agent: %d" % (t, other, status))
            st = upgrade_status(srv, a + "/terminal", tok[t])
            check(st == 404, "%s's token: a terminal on %s's agent: want 404, got %d" % (t, other, st))
        # A tenant's token may not act within another tenant by ?tenant=.
        status, j = srv.call("GET", "/api/v1/agents?tenant=" + other, tok[t])
        check(status == 403, "%s's token asking for ?tenant=%s: %d %r" % (t, other, status, j))
        check(snapshot(other) == before, "%s's attempts changed nothing of %s's" % (t, other))

    # The CLI says the same, for every command that names an agent.
    for t, other in (("acme", "globex"), ("globex", "acme")):
        target = agents[(other, "victim")]
        for args in (["show", target], ["start", target], ["stop", target], ["rebuild", target],
                     ["rm", target], ["log", target], ["exec", target, "--", "true"],
                     ["fs", "ls", target, "."], ["turn", target, "--", "true"], ["term", target],
                     ["session", "show", sess[other]["id"]], ["session", "close", sess[other]["id"]],
                     ["session", "open", sess[other]["id"]]):
            rc, out, err = srv.cli(*args, tok=tok[t])
            check(rc == 1 and ("no agent" in err or "no session" in err),
                  "CLI %s with %s's token on %s's: %d %r %r" % (args, t, other, rc, out, err))
        rc, out, err = srv.cli("ls", tok=tok[t])
        check(rc == 0 and target not in out and agents[(t, "victim")] not in out and "victim" in out,
              "CLI ls with %s's token: %r" % (t, out))

    # An admin sees every tenant, and acts within one with --tenant.
    rc, out, err = srv.cli("ls", "--json", tok=adm)
    check(rc == 0 and len(json.loads(out)) == 6, "the admin lists every agent: %r" % out)
    status, j = srv.call("GET", "/api/v1/agents/shared", adm)
    check(status == 409 and "more than one tenant" in j["error"] and "?tenant=" in j["error"],
          "an admin naming an agent two tenants hold is told how to choose: %d %r" % (status, j))
    for t in ("acme", "globex"):
        rc, out, err = srv.cli("--tenant", t, "show", "shared", "--json", tok=adm)
        check(rc == 0 and json.loads(out)["id"] == agents[(t, "shared")], "admin --tenant %s show: %r" % (t, err))
        rc, out, err = srv.cli("ls", "--tenant", t, "--json", tok=adm)
        check(rc == 0 and len(json.loads(out)) == 3, "admin ls --tenant %s: %r" % (t, out))
        sid = agents[(t, "shared")]
        check(srv.ok("GET", "/api/v1/agents/%s/files?path=." % sid, adm) is not None, "admin lists files")
        srv.ok("PUT", "/api/v1/agents/%s/files/admin.txt" % sid, adm, {"x": 1}, want=(200, 201, 204))
        rc, out, err = srv.cli("--tenant", t, "exec", "shared", "--", "cat admin.txt", tok=adm)
        check(rc == 0 and '"x"' in out, "admin --tenant %s exec: %d %r %r" % (t, rc, out, err))
        rc, out, err = srv.cli("--tenant", t, "fs", "ls", "shared", ".", tok=adm)
        check(rc == 0 and "admin.txt" in out, "admin --tenant %s fs ls: %r" % (t, out))
        rc, out, err = srv.cli("--tenant", t, "log", "shared", tok=adm)
        check(rc == 0 and "create" in out, "admin --tenant %s log: %r" % (t, out))
        srv.ok("POST", "/api/v1/agents/%s/turns" % sid, adm, {})
        srv.ok("POST", "/api/v1/turns/%s/renew" % turn[t], adm, {})
        srv.ok("DELETE", "/api/v1/turns/%s" % turn[t], adm)
        check(upgrade_status(srv, "/api/v1/agents/%s/terminal" % sid, adm) == 101, "admin opens a terminal")
        srv.ok("GET", "/api/v1/sessions/" + sess[t]["id"], adm)
        srv.ok("POST", "/api/v1/sessions/%s/open?wait=1" % sess[t]["id"], adm)
        rc, out, err = srv.cli("--tenant", t, "rebuild", "victim", tok=adm)
        check(rc == 0, "admin --tenant %s rebuild: %r" % (t, err))
        rc, out, err = srv.cli("--tenant", t, "start", "victim", tok=adm)
        check(rc == 0 and "running" in out, "admin --tenant %s start: %r" % (t, err))
        rc, out, err = srv.cli("--tenant", t, "stop", "victim", tok=adm)
        check(rc == 0 and "sleeping" in out, "admin --tenant %s stop: %r" % (t, err))
        rc, out, err = srv.cli("--tenant", t, "session", "close", sess[t]["id"], tok=adm)
        check(rc == 0, "admin --tenant %s session close: %r" % (t, err))
        rc, out, err = srv.cli("--tenant", t, "rm", "victim", tok=adm)
        check(rc == 0 and "destroyed" in out, "admin --tenant %s rm: %r" % (t, err))

    # A destroyed agent's last rows are still its tenant's.
    for t in ("acme", "globex"):
        ops = srv.ok("GET", "/api/v1/agents/%s/operations?limit=1000" % agents[(t, "victim")], tok[t])["operations"]
        kinds = [(o["kind"], o.get("detail")) for o in ops]
        check(("state", "destroyed") in kinds or any(d and d.startswith("destroyed") for k, d in kinds),
              "%s sees its destroyed agent's last state: %r" % (t, kinds[:5]))
        status, j = srv.call("GET", "/api/v1/agents/%s/operations" % agents[(t, "victim")],
                             tok["globex" if t == "acme" else "acme"])
        check(status == 404, "and the other tenant does not: %d" % status)

    # Events: a tenant's stream shows its own agents' changes only.
    c, r = events(srv, tok["acme"])
    try:
        srv.ok("POST", "/api/v1/agents/shared/stop?wait=1", tok["globex"])
        srv.ok("POST", "/api/v1/agents/shared/stop?wait=1", tok["acme"])
        got = read_events(r, lambda e: e["agent_id"] == agents[("acme", "shared")] and e["state"] == "sleeping")
        check(not [e for e in got if e["agent_id"] == agents[("globex", "shared")]],
              "acme's event stream shows nothing of globex's: %r" % got)
    finally:
        c.close()

    # A tenant's token is no admin's.
    for method, path, body in (("GET", "/api/v1/tenants", None), ("POST", "/api/v1/tenants", {"name": "x"}),
                               ("DELETE", "/api/v1/tenants/globex?force=1", None), ("GET", "/api/v1/tokens", None),
                               ("POST", "/api/v1/tokens", {"tenant": "acme"}),
                               ("PUT", "/api/v1/policy", {"tenant_max_sandboxes": 100}),
                               ("POST", "/api/v1/policy/reload", None)):
        status, j = srv.call(method, path, tok["acme"], body)
        check(status == 403, "acme's token: %s %s wants an admin: %d %r" % (method, path, status, j))

    # Removing a tenant that holds sandboxes needs --force, which destroys them.
    rc, out, err = srv.cli("tenant", "rm", "globex", tok=adm)
    check(rc == 1 and "still holds 1 sandboxes" in err and "--force" in err, "tenant rm without --force: %r" % err)
    rc, out, err = srv.cli("tenant", "rm", "globex", "--force", tok=adm)
    check(rc == 0 and "removed" in out, "tenant rm --force: %d %r" % (rc, err))
    status, _ = srv.call("GET", "/api/v1/agents", tok["globex"])
    check(status == 401, "a removed tenant's token is refused: %d" % status)
    status, j = srv.call("GET", "/api/v1/agents/%s" % agents[("globex", "shared")], adm)
    check(status == 404, "a removed tenant's sandboxes are destroyed: %d %r" % (status, j))
    srv.stop()


# ---------------------------------------------------------------------------
# Limits

def limits():
    lua = os.path.join(TMP, "lua")
    shutil.copytree(os.path.join(SRC, "lua"), lua)
    srv = Server("limits", extra={"AGENTHOLD_POLICY_LUA_DIR": lua}).start()
    adm = srv.admin
    tok = {}
    for t in ("t1", "t2", "t3"):
        srv.ok("POST", "/api/v1/tenants", adm, {"name": t})
        tok[t] = srv.token(t)

    def create(t, name):
        return srv.call("POST", "/api/v1/agents", tok[t], {"name": name})

    def made(t, name):
        status, j = create(t, name)
        check(status in (201, 202), "%s's sandbox %s: %d %r" % (t, name, status, j))

    def stop(t, name):
        # made() does not wait: a stop needs the create done first.
        srv.wait_state(name, ("running",), tok[t])
        srv.ok("POST", "/api/v1/agents/%s/stop?wait=1" % name, tok[t])

    def running_sentence(t, n, key="limits.tenant_max_running"):
        return ("tenant '%s' already holds %d of %d running sandboxes (%s); stop one, or let one go "
                "to sleep, first" % (t, n, n, key))

    # The seed's caps count what holds the host: t1 keeps 15 asleep, and
    # still runs 10 (25 kept in all: the kept cap is 200).
    for i in range(15):
        made("t1", "s%d" % i)
        if i in (9, 14):
            for k in range(i - 9 if i == 9 else 10, i + 1):
                stop("t1", "s%d" % k)
    for i in range(10):
        made("t1", "a%d" % i)
    listed = srv.ok("GET", "/api/v1/agents", tok["t1"])["agents"]
    check(len(listed) == 25 and sum(a["state"] == "sleeping" for a in listed) == 15,
          "t1: 10 running and 15 asleep: %r" % sorted((a["name"], a["state"]) for a in listed))
    status, j = create("t1", "a10")
    check(status == 422 and j["error"] == running_sentence("t1", 10),
          "the 11th: the seed's sentence naming the cap: %d %r" % (status, j))
    rc, out, err = srv.cli("create", "a10", "--no-wait", tok=tok["t1"])
    check(rc == 1 and "tenant 't1' already holds 10 of 10 running sandboxes" in err, "CLI create: %r" % err)
    # A start of a sleeping one, and a wake (a turn on it), over the cap.
    status, j = srv.call("POST", "/api/v1/agents/s0/start", tok["t1"])
    check(status == 422 and j["error"] == running_sentence("t1", 10), "a start over the cap: %d %r" % (status, j))
    status, j = srv.call("POST", "/api/v1/agents/s0/turns", tok["t1"], {})
    check(status == 422 and j["error"] == "agent 's0' could not be started: " + running_sentence("t1", 10),
          "a wake over the cap: %d %r" % (status, j))
    check(srv.ok("GET", "/api/v1/agents/s0", tok["t1"])["state"] == "sleeping", "the refused one sleeps on")
    # A rebuild of a sleeping one ends running: it takes a place too.
    status, j = srv.call("POST", "/api/v1/agents/s1/rebuild", tok["t1"])
    check(status == 422 and j["error"] == running_sentence("t1", 10), "a rebuild over the cap: %d %r" % (status, j))
    # One goes to sleep: its place is there for the wake.
    stop("t1", "a9")
    srv.ok("POST", "/api/v1/agents/s0/turns", tok["t1"], {})
    srv.wait_state("s0", ("running",), tok["t1"])

    # The pool of 20 running: t2 takes the other 10, t3 gets none.
    for i in range(10):
        made("t2", "b%d" % i)
    status, j = create("t3", "c0")
    check(status == 422 and j["error"] == "the pool already holds 20 of 20 running sandboxes (every tenant "
          "together: limits.pool_max_running)", "t3 meets the pool's cap: %d %r" % (status, j))
    # Freed room is there for whoever asks first: asleep is enough.
    stop("t2", "b9")
    srv.ok("POST", "/api/v1/agents", tok["t3"], {"name": "c0"})

    # 50 concurrent creates at 9 of 10 (t1, the pool at 19): exactly one admitted.
    stop("t2", "b8")        # the pool has room: 18
    stop("t1", "a8")        # t1 runs 9 of 10, the pool 17
    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        results = list(pool.map(lambda i: create("t1", "race%d" % i), range(50)))
    admitted = [j for s, j in results if s in (201, 202)]
    refused = [j for s, j in results if s == 422 and j["error"] == running_sentence("t1", 10)]
    check(len(admitted) == 1 and len(refused) == 49,
          "50 concurrent creates at 9 of 10: %d admitted, %d refused: %r"
          % (len(admitted), len(refused), [r for r in results if r[0] not in (201, 202)][:3]))
    listed = srv.ok("GET", "/api/v1/agents", tok["t1"])["agents"]
    check(sum(a["state"] in ("running", "starting", "creating") for a in listed) == 10 and len(listed) == 26,
          "t1 runs 10 and keeps 26: %r" % sorted((a["name"], a["state"]) for a in listed))

    # The kept cap: every sandbox counts, asleep too; PUT /api/v1/policy
    # changes it at run time.
    stop("t1", "a7")        # room to run: the kept cap is what refuses
    rc, out, err = srv.cli("policy", "set", "tenant_max_sandboxes=26", tok=adm)
    check(rc == 0 and "tenant_max_sandboxes = 26" in out, "policy set: %r %r" % (out, err))
    status, j = create("t1", "kept")
    check(status == 422 and j["error"] == "tenant 't1' already holds 26 of 26 kept sandboxes, asleep or not "
          "(limits.tenant_max_sandboxes)", "the kept cap refuses a create: %d %r" % (status, j))
    srv.ok("POST", "/api/v1/agents/a7/start?wait=1", tok["t1"])       # a start takes no kept place
    rc, out, err = srv.cli("policy", "set", "tenant_max_sandboxes=default", tok=adm)
    check(rc == 0 and "tenant_max_sandboxes = 200" in out, "policy set default: %r" % out)
    # ... and the running cap too.
    rc, out, err = srv.cli("policy", "set", "tenant_max_running=11", tok=adm)
    check(rc == 0 and "tenant_max_running = 11" in out, "policy set: %r %r" % (out, err))
    srv.ok("POST", "/api/v1/agents", tok["t1"], {"name": "eleven"})
    status, j = create("t1", "twelve")
    check(status == 422 and j["error"] == running_sentence("t1", 11), "at 11: %r" % j)
    rc, out, err = srv.cli("policy", "set", "tenant_max_running=default", tok=adm)
    check(rc == 0 and "tenant_max_running = 10" in out, "policy set default: %r" % out)
    status, j = srv.call("PUT", "/api/v1/policy", adm, {"runtimes": []})
    check(status == 400 and "catalog" in j["error"], "the catalog is not changed by PUT /policy: %r" % j)
    # A tenant's own limit beats the server's.
    rc, out, err = srv.cli("tenant", "set", "t3", "--max-sandboxes", "1", tok=adm)
    check(rc == 0 and "max_sandboxes: 1" in out.replace("  ", " ").replace("  ", " "), "tenant set: %r" % out)
    status, j = create("t3", "c1")
    check(status == 422 and j["error"] == "tenant 't3' already holds 1 of 1 kept sandboxes, asleep or not "
          "(its max_sandboxes)", "t3 at 1 of 1: %r" % j)
    # Running caps hold for a create too (a create starts what it makes).
    srv.ok("PATCH", "/api/v1/tenants/t3", adm, {"max_sandboxes": None, "max_running": 1})
    srv.wait_state("c0", ("running",), tok["t3"])
    status, j = create("t3", "c1")
    check(status == 422 and j["error"] == running_sentence("t3", 1, "its max_running"),
          "a create over max_running: %r" % j)
    srv.ok("POST", "/api/v1/agents/c0/stop?wait=1", tok["t3"])
    srv.ok("POST", "/api/v1/agents", tok["t3"], {"name": "c1"})
    srv.wait_state("c1", ("running",), tok["t3"])
    status, j = srv.call("POST", "/api/v1/agents/c0/start", tok["t3"])
    check(status == 422 and "already holds 1 of 1 running" in j["error"], "a start over max_running: %r" % j)
    # Opens waiting on a refused first open are told why.
    srv.ok("PATCH", "/api/v1/tenants/t3", adm, {"max_sandboxes": 2})
    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        results = list(pool.map(lambda i: srv.call("POST", "/api/v1/sessions", tok["t3"],
                                                    {"scope": "run", "subject": "over"}), range(5)))
    check(all(st in (409, 422) and "already holds 2 of 2 kept" in j["error"] for st, j in results),
          "every open of a refused key says why: %r" % results)

    # limits.lua edited while the server runs: the next decision uses it.
    path = os.path.join(lua, "limits.lua")
    shipped = open(path).read()
    edited = shipped.replace("function admit(tenant, request, usage, limits)\n",
                             "function admit(tenant, request, usage, limits)\n"
                             "  if request.name == 'forbidden' then\n"
                             "    return { allow = false, message = 'the edited rule refuses forbidden' }\n"
                             "  end\n", 1)
    check(edited != shipped, "the test's edit applies to the shipped limits.lua")
    time.sleep(1.1)                     # a new mtime, whatever the file system's resolution
    with open(path, "w") as f:
        f.write(edited)
    status, j = create("t3", "forbidden")
    check(status == 422 and j["error"] == "the edited rule refuses forbidden", "the edit took effect: %d %r" % (status, j))
    # A broken edit: the previous rule stays, and policy status says why.
    time.sleep(1.1)
    with open(path, "w") as f:
        f.write(edited + "\nthis is not lua (\n")
    status, j = create("t3", "forbidden")
    check(status == 422 and j["error"] == "the edited rule refuses forbidden", "a broken edit keeps the rule: %r" % j)
    rc, out, err = srv.cli("policy", "status", "--json", tok=adm)
    st = [p for p in json.loads(out)["policies"] if p["script"] == "limits.lua"]
    check(st and st[0]["error"] and "limits.lua" in st[0]["error"], "policy status names the broken edit: %r" % st)
    time.sleep(1.1)
    with open(path, "w") as f:
        f.write(shipped)
    status, j = create("t3", "forbidden")
    check(status == 422 and j["error"] == "tenant 't3' already holds 2 of 2 kept sandboxes, asleep or not "
          "(its max_sandboxes)", "the shipped rule again: %r" % j)
    srv.stop()


# ---------------------------------------------------------------------------
# Sessions

def sessions():
    srv = Server("sessions").start()
    adm = srv.admin
    for t in ("acme", "globex"):
        srv.ok("POST", "/api/v1/tenants", adm, {"name": t})
    alice, carol = srv.token("acme", "alice"), srv.token("acme", "carol")
    nobody, bob = srv.token("acme"), srv.token("globex", "bob")

    # 20 concurrent opens of one key: one sandbox.
    key = {"scope": "conversation", "subject": "thread-42", "backend": "slack", "host": "T0123"}
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        results = list(pool.map(lambda i: srv.call("POST", "/api/v1/sessions?wait=1", alice, key), range(20)))
    ids = {j["id"] for s, j in results if s in (200, 201)}
    agents = {j["agent"]["id"] for s, j in results if s in (200, 201) and j.get("agent")}
    check(len(ids) == 1 and len(agents) == 1 and all(s in (200, 201) for s, _ in results),
          "20 concurrent opens: one session, one sandbox: %r" % [(s, j) for s, j in results][:3])
    check(sum(1 for s, j in results if j.get("created")) == 1, "exactly one open made it")
    listed = srv.ok("GET", "/api/v1/agents", alice)["agents"]
    check(len(listed) == 1, "one sandbox in the tenant: %r" % listed)
    sid = ids.pop()
    check(sid.startswith("conv-slack-thread-42-"), "a readable prefix and an unguessable part: %s" % sid)

    # Each scope is a sandbox of its own; the same key in another tenant too.
    seen = {sid}
    for scope, subject in (("run", "r-1"), ("channel", "C042"), ("agent", "support-bot"), ("conversation", "c-9")):
        j = srv.ok("POST", "/api/v1/sessions?wait=1", alice, {"scope": scope, "subject": subject})
        check(j["id"] not in seen and j["agent"]["state"] == "running", "scope %s: %r" % (scope, j))
        seen.add(j["id"])
        again = srv.ok("POST", "/api/v1/sessions", alice, {"scope": scope, "subject": subject})
        check(again["id"] == j["id"] and not again["created"], "scope %s again attaches" % scope)
    other = srv.ok("POST", "/api/v1/sessions?wait=1", bob, key)
    check(other["id"] not in seen and other["tenant"] == "globex", "the same key in globex is globex's own")

    # User scope: the token's person, and nobody else's.
    mine = srv.ok("POST", "/api/v1/sessions?wait=1", alice, {"scope": "user"})
    check(mine["subject"] == "alice" and mine["id"].startswith("user-alice-"), "alice's user session: %r" % mine)
    theirs = srv.ok("POST", "/api/v1/sessions?wait=1", carol, {"scope": "user"})
    check(theirs["id"] != mine["id"], "carol gets her own, not alice's")
    for t, body in ((carol, {"scope": "user", "subject": "alice"}), (nobody, {"scope": "user"}),
                    (nobody, {"scope": "user", "subject": "alice"})):
        status, j = srv.call("POST", "/api/v1/sessions", t, body)
        check(status == 403, "a user session for another person is refused: %d %r" % (status, j))
    status, j = srv.call("POST", "/api/v1/sessions/%s/open" % mine["id"], carol)
    check(status == 403 and "alice" in j["error"], "carol cannot open alice's user session by reference: %r" % j)
    rc, out, err = srv.cli("session", "open", "user", "--json", tok=alice)
    check(rc == 0 and json.loads(out)["id"] == mine["id"], "CLI session open user: %r" % err)
    rc, out, err = srv.cli("session", "ls", tok=alice)
    check(rc == 0 and mine["id"] in out and theirs["id"] in out and other["id"] not in out, "CLI session ls: %r" % out)

    # Lost: its sandbox destroyed.
    j = srv.ok("POST", "/api/v1/sessions?wait=1", alice, {"scope": "conversation", "subject": "doomed"})
    srv.ok("DELETE", "/api/v1/agents/%s?wait=1" % j["agent"]["id"], alice)
    shown = srv.ok("GET", "/api/v1/sessions/" + j["id"], alice)
    check(shown["state"] == "lost" and "destroyed" in shown["lost_reason"], "a destroyed sandbox: lost: %r" % shown)
    status, e = srv.call("POST", "/api/v1/sessions/%s/open" % j["id"], alice)
    check(status == 410 and "lost" in e["error"] and "destroyed" in e["error"], "opened by reference: 410: %r" % e)
    rc, out, err = srv.cli("session", "open", j["id"], tok=alice)
    check(rc == 1 and "lost" in err, "CLI session open ID of a lost one: %r" % err)
    fresh = srv.ok("POST", "/api/v1/sessions?wait=1", alice, {"scope": "conversation", "subject": "doomed"})
    check(fresh["id"] != j["id"] and fresh["created"] and fresh["agent"]["state"] == "running",
          "the key again: a fresh session: %r" % fresh)

    # Lost: its files removed behind the server's back (while it was down).
    victim = srv.ok("POST", "/api/v1/sessions?wait=1", alice, {"scope": "channel", "subject": "gone"})
    srv.ok("PUT", "/api/v1/agents/%s/files/work.txt" % victim["agent"]["id"], alice, {"w": 1}, want=(200, 201, 204))
    srv.stop()
    shutil.rmtree(os.path.join(srv.data, "fake", victim["agent"]["id"]))
    srv.start()
    deadline = time.time() + 20
    while True:
        shown = srv.ok("GET", "/api/v1/sessions/" + victim["id"], alice)
        if shown["state"] == "lost" or time.time() > deadline:
            break
        time.sleep(0.2)
    check(shown["state"] == "lost" and "files are gone" in shown["lost_reason"],
          "files removed outside: the session is lost with the reason: %r" % shown)
    status, e = srv.call("POST", "/api/v1/sessions/%s/open" % victim["id"], alice)
    check(status == 410 and "files are gone" in e["error"], "not silently replaced by an empty one: %r" % e)
    a = srv.ok("GET", "/api/v1/agents/" + victim["agent"]["id"], alice)
    check(a["home_lost"], "the agent says its home is lost: %r" % a)
    fresh = srv.ok("POST", "/api/v1/sessions?wait=1", alice, {"scope": "channel", "subject": "gone"})
    check(fresh["id"] != victim["id"] and fresh["agent"]["state"] == "running", "then a fresh one by name")
    status, _ = srv.call("GET", "/api/v1/agents/%s/files/work.txt" % fresh["agent"]["id"], alice)
    check(status == 404, "the fresh one starts empty: %d" % status)

    time.sleep(0.05)                    # pacing: a later opened_at (ms) must be possible
    later = srv.ok("POST", "/api/v1/sessions/%s/open" % mine["id"], alice)
    check(later["opened_at"] > mine["opened_at"], "opened_at is this open's: %r" % later)
    # Closing: the session ends, and its sandbox with it.
    rc, out, err = srv.cli("session", "close", mine["id"], tok=alice)
    check(rc == 0 and "closed" in out, "CLI session close: %r %r" % (out, err))
    deadline = time.time() + 20
    while srv.call("GET", "/api/v1/agents/" + mine["agent"]["id"], alice)[0] != 404:
        check(time.time() < deadline, "a closed session's sandbox is destroyed")
        time.sleep(0.1)
    status, e = srv.call("POST", "/api/v1/sessions/%s/open" % mine["id"], alice)
    check(status == 410 and "closed" in e["error"], "a closed session opened by reference: %r" % e)
    bad = [({"scope": "planet", "subject": "x"}, 400), ({"scope": "run"}, 400),
           ({"scope": "run", "subject": "a\x01b"}, 400), ({"scope": "run", "subject": "x" * 300}, 400),
           ({"scope": "run", "subject": "x", "runtime": "../etc"}, 400),
           ({"scope": "run", "subject": "x", "extra": 1}, 400), ([], 400)]
    for body, want in bad:
        status, j = srv.call("POST", "/api/v1/sessions", alice, body)
        check(status == want and j and j.get("error"), "a bad open %r: %d %r" % (body, status, j))
    status, j = srv.call("POST", "/api/v1/sessions", alice, raw=b"{not json")
    check(status == 400 and "JSON" in j["error"], "broken JSON: %r" % j)
    srv.stop()


# ---------------------------------------------------------------------------
# Tokens

def tokens():
    srv = Server("tokens").start()
    adm = srv.admin
    srv.ok("POST", "/api/v1/tenants", adm, {"name": "acme"})
    tok = srv.token("acme", "alice", name="ci-token")
    srv.ok("GET", "/api/v1/agents", tok)
    listed = srv.ok("GET", "/api/v1/tokens", adm)["tokens"]
    check("ci-token" in [t["name"] for t in listed], "token ls has it")
    check(tok not in json.dumps(listed) and not [t for t in listed if "token" in t or "hash" in t],
          "token ls never shows a token nor its hash")
    # last_used_at is written through the API's writer, after the request
    # that used it was answered: it shows within a moment.
    def ci_row():
        return [t for t in srv.ok("GET", "/api/v1/tokens", adm)["tokens"] if t["name"] == "ci-token"][0]
    ahserver.wait_until(lambda: ci_row()["last_used_at"], 5, "the token's last_used_at written", Fail)
    row = ci_row()
    check(row["tenant"] == "acme" and row["user"] == "alice" and row["last_used_at"], "its fields: %r" % row)
    rc, out, err = srv.cli("token", "ls", tok=adm)
    check(rc == 0 and "ci-token" in out and tok not in out, "CLI token ls: %r" % out)

    # The database file holds the hash, never the token.
    db = sqlite3.connect(os.path.join(srv.data, "agenthold.db"))
    try:
        h = db.execute("SELECT hash FROM api_tokens WHERE name = 'ci-token'").fetchone()[0]
    finally:
        db.close()
    check(h == hashlib.sha256(tok.encode()).hexdigest(), "the row keeps the token's SHA-256")
    for suffix in ("", "-wal", "-shm"):
        p = os.path.join(srv.data, "agenthold.db" + suffix)
        if os.path.exists(p):
            raw = open(p, "rb").read()
            check(tok.encode() not in raw and tok.upper().encode() not in raw and bytes.fromhex(tok) not in raw,
                  "agenthold.db%s holds no token" % suffix)

    # Revoked: refused at once.
    rc, out, err = srv.cli("token", "revoke", "ci-token", tok=adm)
    check(rc == 0 and "revoked" in out, "CLI token revoke: %r" % err)
    status, j = srv.call("GET", "/api/v1/agents", tok)
    check(status == 401 and "revoked" in j["error"], "a revoked token: 401 naming why: %d %r" % (status, j))
    rc, out, err = srv.cli("token", "revoke", "ci-token", tok=adm)
    check(rc == 1 and "no token" in err, "revoking twice: %r" % err)

    # Expired: refused once its time is up.
    short = srv.token("acme", expires="2s")
    srv.ok("GET", "/api/v1/agents", short)
    time.sleep(2.5)                     # pacing: its 2 s must run out
    status, j = srv.call("GET", "/api/v1/agents", short)
    check(status == 401 and "expired" in j["error"], "an expired token: 401 naming why: %d %r" % (status, j))

    # Forged, truncated, another encoding, empty: refused alike.
    live = srv.token("acme")
    for bad in ("0" * 64, live[:-1] + ("0" if live[-1] != "0" else "1"), live[:32], live.upper(),
                live + "00", urllib.parse.quote(live + "\x00"), "", live + " x"):
        status, _ = srv.call("GET", "/api/v1/agents", bad if bad else None)
        check(status == 401, "a forged token %r...: 401, got %d" % (bad[:10], status))
    status, j = srv.call("GET", "/api/v1/agents", None, headers={"Authorization": "Basic " + live})
    check(status == 401, "another scheme: 401")
    rc, out, err = srv.cli("--tenant", "acme", "token", "create", "--admin", "--name", "ops", tok=adm)
    check(rc == 0 and len(out.strip()) == 64, "an admin token made with --tenant set: %r" % err)
    status, _ = srv.call("GET", "/api/v1/tenants", out.strip())
    check(status == 200, "and it is an admin's: %d" % status)
    # Bad requests for tokens are clear.
    for body, part in (({"tenant": "nosuch"}, "no tenant"), ({}, "tenant"), ({"tenant": "acme", "expires": "soon"}, "expires"),
                       ({"tenant": "acme", "expires": 2 ** 62}, "expires"), ({"tenant": "acme", "expires": -5}, "expires"),
                       ({"tenant": "acme", "user": "a b"}, "user"), ({"tenant": "acme", "admin": "yes"}, "admin"),
                       ({"tenant": "acme", "name": "../x"}, "name"), ({"tenant": "acme", "bogus": 1}, "bogus")):
        status, j = srv.call("POST", "/api/v1/tokens", adm, body)
        check(status in (400, 404) and part in j["error"], "token create %r: %d %r" % (body, status, j))
    srv.stop()


def removal():
    """A removed tenant leaves nothing a later tenant can read, whatever
    it is called: not its audit rows (exec command lines among them), its
    sessions, its open event streams, its tokens; an admin still reads its
    rows, relabelled "<name> (removed <time>)"."""
    srv = Server("removal").start()
    adm = srv.admin
    srv.ok("POST", "/api/v1/tenants", adm, {"name": "acme"})
    old = srv.token("acme", "alice", name="acme-old")
    a = srv.ok("POST", "/api/v1/agents?wait=1", old, {"name": "box"})
    srv.ok("POST", "/api/v1/agents/box/start?wait=1", old)
    srv.ok("POST", "/api/v1/agents/box/exec", old, {"cmd": "echo OLD-ACME-SECRET"})
    srv.ok("POST", "/api/v1/sessions?wait=1", old, {"scope": "conversation", "subject": "old-conv"})
    conn, stream = events(srv, old)

    gone = srv.ok("DELETE", "/api/v1/tenants/acme?force=1", adm)
    check(gone["removed"] and gone["audit_label"].startswith("acme (removed ") and gone["audit_rows"] > 0,
          "the removal says how its audit rows are kept: %r" % gone)
    # Its event stream ends with it (read to the end: b"" once closed).
    stream.fp.raw._sock.settimeout(10)
    try:
        while stream.fp.readline():
            pass
        ended = True
    except (OSError, socket.timeout):
        ended = False
    conn.close()
    check(ended, "the removed tenant's open event stream is closed")
    status, j = srv.call("GET", "/api/v1/agents", old)
    check(status == 401, "the removed tenant's token is refused: %d %r" % (status, j))

    before = ahserver.request(srv.port, "GET", "/metrics", None, adm)[1]
    before = before.decode() if isinstance(before, bytes) else before
    check('tenant="globex"' not in before and 'tenant="acme"' not in before and "agenthold_sandboxes" in before,
          "/metrics has no series of the removed tenant")

    # A new tenant of the same name, with a token of the same name.
    srv.ok("POST", "/api/v1/tenants", adm, {"name": "acme"})
    new = srv.token("acme", "alice", name="acme-old")
    srv.ok("POST", "/api/v1/agents?wait=1", new, {"name": "box"})
    srv.ok("POST", "/api/v1/agents/box/start?wait=1", new)
    srv.ok("POST", "/api/v1/agents/box/exec", new, {"cmd": "echo NEW-ACME"})
    ops = srv.ok("GET", "/api/v1/operations?limit=1000", new)["operations"]
    text = json.dumps(ops)
    check("NEW-ACME" in text, "the new tenant reads its own trail: %r" % ops[:3])
    check("OLD-ACME-SECRET" not in text and a["id"] not in text,
          "the new tenant reads nothing of the removed one's trail: %s" % text[:600])
    check(all(o["tenant"] == "acme" for o in ops), "every row it reads is its own: %r" % ops[:3])
    for path in ("/api/v1/operations?q=OLD-ACME", "/api/v1/operations?agent=" + a["id"],
                 "/api/v1/agents/%s/operations" % a["id"]):
        status, j = srv.call("GET", path, new)
        check(status == 404 or (status == 200 and j["operations"] == []),
              "%s for the new tenant: nothing of the old: %d %r" % (path, status, j))
    check(srv.ok("GET", "/api/v1/sessions", new)["sessions"] == [], "no session of the removed tenant")
    status, _ = srv.call("GET", "/api/v1/tombstones", new)
    check(status == 403, "tombstones are an admin's to read: %d" % status)
    # The admin still reads it, under its label, and not as the new tenant's.
    kept = srv.ok("GET", "/api/v1/operations?q=OLD-ACME-SECRET", adm)["operations"]
    check(kept and all(o["tenant"] == gone["audit_label"] for o in kept),
          "the admin reads the removed tenant's rows under its label: %r" % kept)
    scoped = srv.ok("GET", "/api/v1/operations?limit=1000&tenant=acme", adm)["operations"]
    check("OLD-ACME-SECRET" not in json.dumps(scoped), "?tenant=acme is the new tenant only")

    # A row of the old name that was not relabelled (a removal whose
    # relabelling failed, a row that arrived late): older than the new
    # tenant, so out of its sight.
    db = sqlite3.connect(os.path.join(srv.data, "agenthold.db"), timeout=30)
    try:
        made = db.execute("SELECT created_at FROM tenants WHERE name = 'acme'").fetchone()[0]
        db.execute("INSERT INTO operations (at, tenant, actor, kind, detail, ok) VALUES (?, 'acme', 'api:x',"
                   " 'exec', 'LEFTOVER-ROW', 1)", (made - 1,))
        db.commit()
    finally:
        db.close()
    for tok in (new, adm):
        ops = srv.ok("GET", "/api/v1/operations?limit=1000&tenant=acme", tok)["operations"]
        check("LEFTOVER-ROW" not in json.dumps(ops), "a row older than the tenant is not the tenant's")
    srv.stop()


def egress_lists():
    """A tenant's egress allow and deny lists (docs/egress.md, migration 11):
    set by the API and the CLI, checked entry by entry, kept across a
    restart, gone with the tenant."""
    srv = Server("egress").start()
    adm = srv.admin
    srv.ok("POST", "/api/v1/tenants", adm, {"name": "acme", "egress_allow": ["*.example.org"]})
    t = srv.ok("GET", "/api/v1/tenants/acme", adm)
    check(t["egress_allow"] == ["*.example.org"] and t["egress_deny"] == [], "made with a list: %r" % t)
    t = srv.ok("PATCH", "/api/v1/tenants/acme", adm,
               {"egress_allow": ["pypi.org:443", "10.77.0.0/16", "*"], "egress_deny": ["evil.example.org"]})
    check(t["egress_allow"] == ["pypi.org:443", "10.77.0.0/16", "*"] and t["egress_deny"] == ["evil.example.org"],
          "PATCH replaces the lists, in order: %r" % t)
    for bad, says in ((["*.*.org"], "entry 0 '*.*.org'"), (["a.org:0"], "port"), (["ok.org", 3], "entry 1"),
                      (["10.0.0.0/40"], "entry 0"), ("a.org", "must be an array"), (["x"] * 257, "at most 256")):
        status, j = srv.call("PATCH", "/api/v1/tenants/acme", adm, {"egress_allow": bad})
        check(status == 400 and says in j.get("error", ""), "refused %r: %d %r" % (bad, status, j))
    t = srv.ok("GET", "/api/v1/tenants/acme", adm)
    check(t["egress_allow"] == ["pypi.org:443", "10.77.0.0/16", "*"], "a refused PATCH changed nothing: %r" % t)
    rc, out, err = srv.cli("tenant", "set", "acme", "--egress-allow", "deb.debian.org,*.github.com:443",
                           "--egress-deny", "none", tok=adm)
    check(rc == 0 and "deb.debian.org,*.github.com:443" in out, "CLI tenant set: %r %r" % (out, err))
    t = srv.ok("GET", "/api/v1/tenants/acme", adm)
    check(t["egress_allow"] == ["deb.debian.org", "*.github.com:443"] and t["egress_deny"] == [],
          "the CLI's lists: %r" % t)
    rc, out, err = srv.cli("tenant", "set", "acme", "--egress-allow", "bad entry", tok=adm)
    check(rc != 0 and "entry 0" in err, "CLI with a bad entry: %r" % err)
    srv.stop()
    srv.start()
    t = srv.ok("GET", "/api/v1/tenants/acme", adm)
    check(t["egress_allow"] == ["deb.debian.org", "*.github.com:443"], "kept across a restart: %r" % t)
    srv.ok("DELETE", "/api/v1/tenants/acme", adm)
    db = sqlite3.connect(os.path.join(srv.data, "agenthold.db"))
    try:
        n = db.execute("SELECT count(*) FROM tenant_egress WHERE tenant = 'acme'").fetchone()[0]
    finally:
        db.close()
    check(n == 0, "the lists go with the tenant: %d rows left" % n)
    srv.stop()


def main():
    egress_lists()
    matrix()
    limits()
    sessions()
    tokens()
    removal()
    print("ok: %d checks" % check.count)



if __name__ == "__main__":
    sys.exit(ahserver.run(main, Fail, procs, TMP, LOG))
