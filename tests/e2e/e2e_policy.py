#!/usr/bin/python3
"""tests/e2e/e2e_policy.py: PUT /api/v1/policy changes lifetimes and the
exec ceiling at run time (issue 28, point 2), on the real `agenthold serve`
with the fake driver (temporary data directories; ports from
ahserver.free_port).

  idle       the default idle timeout: an agent that named none falls
             asleep per the new value without a restart, one that named
             its own keeps it; the value outlives a restart (a woken agent
             and a new one sleep per it); null goes back to the
             configuration's, and a configuration changed across a restart
             moves the agents that follow it; an update to null follows
             it again
  ttl        container_ttl: a sleeping agent's container is removed at the
             new lifetime (the next sweep), 0 keeps it; the value outlives
             a restart; workspace_ttl then removes a home; GET shows the
             expiries in force
  caps       tenant_max_running lowered holds across a restart, and
             raised lets the next create through at once
  exec       max_exec_timeout: a lower ceiling refuses a longer timeout at
             once and kills a command that names none at it; null restores
             the configuration's 300 s
  refusals   what the seed keeps out (the runtime list, the network mode,
             the OCI runtime, the sandbox's uid, the work directory,
             whether containers persist): 400 with the sentence saying why;
             unknown keys; hostile values (negative, huge, wrong types,
             NaN-like strings, fractions for whole numbers, an empty body,
             JSON's non-numbers) are 400 and change nothing; not an admin:
             403; `agenthold policy set` with each new key, and its own
             refusals

usage: e2e_policy.py AGENTHOLD_BINARY [SCENARIO...]
Always kills what it started and removes its temporary directory."""
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahlocal  # noqa: E402
import ahserver  # noqa: E402

CTX = ahlocal.context("ah-e2e-policy-")
Fail, check = CTX.fail, CTX.check
POLICY = "/api/v1/policy"


def server(name, extra=None):
    return ahlocal.Local(CTX, name, extra).start()


def restart(srv, extra=None):
    srv.stop()
    srv.env.update(extra or {})
    return srv.start()


def values(srv):
    return srv.ok("GET", POLICY)["values"]


def put(srv, body):
    return srv.ok("PUT", POLICY, body=body)["values"]


def agent(srv, name):
    return srv.ok("GET", "/api/v1/agents/" + name)


def wait(what, cond, seconds=20):
    deadline = time.time() + seconds
    while True:
        got = cond()
        if got:
            return got
        if time.time() > deadline:
            raise Fail("never saw %s" % what)
        time.sleep(0.1)


def stays(srv, name, state, seconds):
    end = time.time() + seconds
    while time.time() < end:
        j = agent(srv, name)
        check(j["state"] == state, "%s stays %s for %.0f s: %r" % (name, state, seconds, j["state"]))
        time.sleep(0.3)


# ---------------------------------------------------------------------------
# idle: the default idle timeout

def idle():
    srv = server("idle", {"AGENTHOLD_SANDBOX_IDLE_MINUTES": "60",
                          "AGENTHOLD_SANDBOX_IDLE_CHECK_INTERVAL": "500ms"})
    check(values(srv)["idle_minutes"] == 60, "the configuration's idle_minutes: %r" % values(srv))
    srv.ok("POST", "/api/v1/agents", body={"name": "follows"})
    srv.ok("POST", "/api/v1/agents", body={"name": "own", "idle_minutes": 60})
    srv.ok("POST", "/api/v1/agents", body={"name": "patched"})
    srv.ok("PATCH", "/api/v1/agents/patched", body={"idle_minutes": 60})   # its own from now on
    for name in ("follows", "own", "patched"):
        srv.wait_state(name, ("running",))
    stays(srv, "follows", "running", 2)

    # 0.05 minutes: 3 s. At once, without a restart.
    v = put(srv, {"idle_minutes": 0.05})
    check(v["idle_minutes"] == 0.05 and v["tenant_max_running"] == 10, "PUT answers the values in force: %r" % v)
    check(values(srv)["idle_minutes"] == 0.05, "GET shows it: %r" % values(srv))
    wait("follows taking 0.05 minutes", lambda: agent(srv, "follows")["idle_minutes"] == 0.05, 5)
    t0 = time.time()
    srv.wait_state("follows", ("sleeping",), seconds=15)
    check(time.time() - t0 < 10, "follows fell asleep %.1f s after the change" % (time.time() - t0))
    for name in ("own", "patched"):
        j = agent(srv, name)
        check(j["state"] == "running" and j["idle_minutes"] == 60, "%s keeps its own 60: %r" % (name, j))
    ops = srv.ok("GET", "/api/v1/operations?operation=policy")["operations"]
    check(len(ops) == 1 and '"idle_minutes":0.05' in ops[0]["detail"] and ops[0]["ok"],
          "the change is in the audit trail: %r" % ops)

    # Kept across a restart: a woken agent and a new one sleep per it.
    srv = restart(srv)
    check(values(srv)["idle_minutes"] == 0.05, "after a restart: %r" % values(srv))
    srv.ok("POST", "/api/v1/agents/follows/start?wait=1")
    srv.ok("POST", "/api/v1/agents", body={"name": "later"})
    check(agent(srv, "later")["idle_minutes"] == 0.05, "a new agent gets the value in force: %r"
          % agent(srv, "later"))
    srv.wait_state("later", ("running",))
    srv.wait_state("follows", ("sleeping",), seconds=15)
    srv.wait_state("later", ("sleeping",), seconds=15)
    check(agent(srv, "own")["idle_minutes"] == 60, "own keeps 60: %r" % agent(srv, "own"))

    # null: back to the configuration's; an agent that follows wakes into it.
    v = put(srv, {"idle_minutes": None})
    check(v["idle_minutes"] == 60, "null goes back to the configuration's 60: %r" % v)
    wait("follows back at 60", lambda: agent(srv, "follows")["idle_minutes"] == 60, 5)
    srv.ok("POST", "/api/v1/agents/follows/start?wait=1")
    stays(srv, "follows", "running", 6)

    # The configuration changed across a restart: those that follow move.
    srv = restart(srv, {"AGENTHOLD_SANDBOX_IDLE_MINUTES": "30"})
    check(values(srv)["idle_minutes"] == 30, "the new configuration: %r" % values(srv))
    wait("follows at 30", lambda: agent(srv, "follows")["idle_minutes"] == 30, 5)
    check(agent(srv, "later")["idle_minutes"] == 30, "later follows too: %r" % agent(srv, "later"))
    for name in ("own", "patched"):
        j = agent(srv, name)
        check(j["idle_minutes"] == 60 and not j["idle_default"], "%s keeps 60: %r" % (name, j))
    check(agent(srv, "follows")["idle_default"], "follows says so: %r" % agent(srv, "follows"))
    # An update to null follows the default again, and moves with it.
    j = srv.ok("PATCH", "/api/v1/agents/own", body={"idle_minutes": None})
    check(j["idle_minutes"] == 30 and j["idle_default"], "PATCH null: the default in force: %r" % j)
    put(srv, {"idle_minutes": 45})
    wait("own at 45", lambda: agent(srv, "own")["idle_minutes"] == 45, 5)
    check(agent(srv, "patched")["idle_minutes"] == 60, "patched keeps 60: %r" % agent(srv, "patched"))
    status, j = srv.call("POST", "/api/v1/agents", body={"name": "nul", "idle_minutes": None})
    check(status == 400, "a create takes no null idle_minutes: %d %r" % (status, j))
    srv.stop()


# ---------------------------------------------------------------------------
# ttl: container and workspace lifetimes

def ttl():
    srv = server("ttl", {"AGENTHOLD_SANDBOX_CONTAINER_TTL": "1h",
                         "AGENTHOLD_SANDBOX_TTL_CHECK_INTERVAL": "200ms"})
    v = values(srv)
    check(v["container_ttl"] == 3600 and v["workspace_ttl"] == 0, "the configuration's lifetimes: %r" % v)
    for name in ("k1", "k2"):
        srv.ok("POST", "/api/v1/agents", body={"name": name})
        srv.wait_state(name, ("running",))
    srv.ok("POST", "/api/v1/agents/k1/stop?wait=1")
    j = agent(srv, "k1")
    check(j["container_expires_at"] and not j["container_removed"] and j["workspace_expires_at"] is None,
          "an hour to go, the home for ever: %r" % j)
    time.sleep(1)
    check(not agent(srv, "k1")["container_removed"], "not removed under an hour")

    v = put(srv, {"container_ttl": 2})
    check(v["container_ttl"] == 2, "PUT container_ttl: %r" % v)
    wait("k1's container removed", lambda: agent(srv, "k1")["container_removed"], 15)
    rows = srv.ok("GET", "/api/v1/operations?agent=k1&operation=container.expire")["operations"]
    check(len(rows) == 1 and rows[0]["actor"] == "ttl" and "after 2 s asleep" in rows[0]["detail"],
          "recorded with the value in force: %r" % rows)

    # 0: never, and kept across a restart.
    put(srv, {"container_ttl": 0})
    srv = restart(srv)
    check(values(srv)["container_ttl"] == 0, "container_ttl 0 after a restart: %r" % values(srv))
    srv.ok("POST", "/api/v1/agents/k2/stop?wait=1")
    check(agent(srv, "k2")["container_expires_at"] is None, "no expiry with 0: %r" % agent(srv, "k2"))
    time.sleep(3)
    check(not agent(srv, "k2")["container_removed"], "0 keeps the container: %r" % agent(srv, "k2"))

    # The workspace's lifetime: the homes of both go.
    v = put(srv, {"workspace_ttl": 2})
    check(v["workspace_ttl"] == 2 and v["container_ttl"] == 0, "PUT workspace_ttl: %r" % v)
    wait("k2's home removed", lambda: agent(srv, "k2").get("home_lost"), 15)
    rows = srv.ok("GET", "/api/v1/operations?agent=k2&operation=workspace.expire")["operations"]
    check(len(rows) == 1 and rows[0]["ok"] and rows[0]["actor"] == "ttl", "workspace.expire: %r" % rows)
    v = put(srv, {"workspace_ttl": None, "container_ttl": None})
    check(v["workspace_ttl"] == 0 and v["container_ttl"] == 3600, "back to the configuration's: %r" % v)
    srv.stop()


# ---------------------------------------------------------------------------
# caps: a change outlives a restart; raising one lets the next start through

def caps():
    srv = server("caps")
    refused = ("tenant 'default' already holds 1 of 1 running sandboxes (limits.tenant_max_running); "
               "stop one, or let one go to sleep, first")
    check(put(srv, {"tenant_max_running": 1})["tenant_max_running"] == 1, "PUT tenant_max_running")
    srv.ok("POST", "/api/v1/agents", body={"name": "one"})
    srv.wait_state("one", ("running",))
    status, j = srv.call("POST", "/api/v1/agents", body={"name": "two"})
    check(status == 422 and j["error"] == refused, "the second refused at 1: %d %r" % (status, j))
    srv = restart(srv)
    check(values(srv)["tenant_max_running"] == 1, "1 after a restart: %r" % values(srv))
    srv.ok("POST", "/api/v1/agents/one/start?wait=1")
    status, j = srv.call("POST", "/api/v1/agents", body={"name": "two"})
    check(status == 422 and j["error"] == refused, "still refused after a restart: %d %r" % (status, j))
    put(srv, {"tenant_max_running": 2})
    srv.ok("POST", "/api/v1/agents", body={"name": "two"})
    srv.wait_state("two", ("running",))
    check(put(srv, {"tenant_max_running": None})["tenant_max_running"] == 10, "back to 10")
    srv.stop()


# ---------------------------------------------------------------------------
# exec: the ceiling

def exec_():
    srv = server("exec")
    srv.ok("POST", "/api/v1/agents", body={"name": "e"})
    srv.wait_state("e", ("running",))
    path = "/api/v1/agents/e/exec"
    check(values(srv)["max_exec_timeout"] == 300, "shipped 300 s: %r" % values(srv))
    put(srv, {"max_exec_timeout": 2})
    status, j = srv.call("POST", path, body={"cmd": "true", "timeout": 3})
    check(status == 400 and "over the ceiling of 2 s" in j["error"], "over the new ceiling: %d %r" % (status, j))
    t0 = time.time()
    j = srv.ok("POST", path, body={"cmd": "sleep 20"})
    took = time.time() - t0
    check(j["timed_out"] and j["signal"] == 9 and 1.5 < took < 10,
          "a command naming none is killed at the new ceiling: %.1f s %r" % (took, j))
    put(srv, {"max_exec_timeout": None})
    j = srv.ok("POST", path, body={"cmd": "echo ok", "timeout": 3})
    check(j["status"] == 0 and j["stdout"] == "ok\n", "null restores 300 s: %r" % j)
    srv.stop()


# ---------------------------------------------------------------------------
# refusals: what the seed keeps out, and hostile values

KEPT_OUT = {
    "runtimes": "the runtime catalog is not changed here",
    "catalog": "the runtime catalog is not changed here",
    "network_mode": "the network mode is not changed here",
    "network": "the network mode is not changed here",
    "needs_network": "the network mode is not changed here",
    "oci_runtime": "the OCI runtime is not changed here: it is sandbox.docker.runtime",
    "runtime": "neither the OCI runtime (sandbox.docker.runtime in the configuration) nor the runtime catalog",
    "uid": "the sandbox's uid is not changed here",
    "user": "the sandbox's uid is not changed here",
    "workdir": "the work directory is not changed here",
    "work_dir": "the work directory is not changed here",
    "persist": "whether containers persist is not changed here",
    "persistent": "whether containers persist is not changed here",
}

# (key, value, a piece of the error)
HOSTILE = [
    ("idle_minutes", -1, "must be"), ("idle_minutes", 0, "must be"), ("idle_minutes", 1e308, "must be"),
    ("idle_minutes", 525601, "must be"), ("idle_minutes", 0.001, "must be"), ("idle_minutes", "15", "a number"),
    ("idle_minutes", "NaN", "a number"), ("idle_minutes", True, "a number"), ("idle_minutes", [15], "a number"),
    ("idle_minutes", {"v": 15}, "a number"),
    ("container_ttl", -3600, "must be"), ("container_ttl", 0.5, "must be"), ("container_ttl", 1e20, "must be"),
    ("container_ttl", "24h", "a number"), ("container_ttl", "Infinity", "a number"),
    ("workspace_ttl", -1, "must be"), ("workspace_ttl", 4e9, "must be"), ("workspace_ttl", "inf", "a number"),
    ("max_exec_timeout", 0, "must be"), ("max_exec_timeout", -300, "must be"),
    ("max_exec_timeout", 604801, "must be"), ("max_exec_timeout", 0.0001, "must be"),
    ("max_exec_timeout", "300", "a number"),
    ("tenant_max_running", 2.5, "whole number"), ("tenant_max_running", 10.0, "whole number"),
    ("tenant_max_running", -1, "must be"), ("pool_max_running", 2 ** 53 + 2, "must be"),
    ("pool_max_sandboxes", 100001, "must be"), ("tenant_max_sandboxes", "-nan", "a number"),
]


def refusals():
    srv = server("refusals")
    before = values(srv)
    for key, why in KEPT_OUT.items():
        for value in (1, "x", None, True):
            status, j = srv.call("PUT", POLICY, body={key: value})
            check(status == 400 and j["error"].startswith("field '%s': %s" % (key, why)),
                  "%s=%r refused with why: %d %r" % (key, value, status, j))
    status, j = srv.call("PUT", POLICY, body={"sandbox.docker.runtime": "runsc"})
    check(status == 400 and "unknown field" in j["error"] and "max_exec_timeout" in j["error"],
          "an unknown key names the ones taken: %d %r" % (status, j))
    for key, value, piece in HOSTILE:
        status, j = srv.call("PUT", POLICY, body={key: value})
        check(status == 400 and piece in j["error"] and key in j["error"],
              "%s=%r: 400 naming the key: %d %r" % (key, value, status, j))
    for raw in ('{"idle_minutes": NaN}', '{"idle_minutes": Infinity}', '{"idle_minutes": -0}',
                '{"container_ttl": 1e999}', '{"pool_max_running": 9223372036854775808}', '{}', '[]',
                '{"idle_minutes": 5, "uid": 0}',
                '{"idle_minutes": 5, "idle_minutes": -1}', '{"idle_minutes": 5, "container_ttl": -1}'):
        status, j = srv.call("PUT", POLICY, raw=raw)
        check(status == 400, "%s: 400: %d %r" % (raw, status, j))
    check(values(srv) == before, "nothing refused changed a value: %r" % values(srv))

    # Not an admin.
    rc, out, err = srv.cli("--tenant", "default", "token", "create", "--name", "someone")
    check(rc == 0 and len(out.strip()) == 64, "a tenant's token: %d %r" % (rc, err))
    user = out.strip()
    status, j = srv.call("PUT", POLICY, tok=user, body={"idle_minutes": 1})
    check(status == 403, "a tenant's token may not: %d %r" % (status, j))
    check(srv.call("GET", POLICY, tok=user)[0] == 200, "but may read")

    # The CLI: each new key, decimals, default; its own refusals.
    rc, out, err = srv.cli("policy", "set", "idle_minutes=0.5", "container_ttl=7200", "workspace_ttl=0",
                           "max_exec_timeout=120")
    check(rc == 0 and "idle_minutes = 0.5" in out and "container_ttl = 7200" in out
          and "workspace_ttl = 0 (never)" in out and "max_exec_timeout = 120" in out,
          "policy set: %r %r" % (out, err))
    rc, out, err = srv.cli("policy", "status")
    check(rc == 0 and "idle_minutes = 0.5" in out and "tenant_max_running = 10" in out, "status: %r" % out)
    rc, out, err = srv.cli("policy", "set", "idle_minutes=default", "container_ttl=default")
    check(rc == 0 and "idle_minutes = 15" in out and "container_ttl = 86400" in out, "default: %r" % out)
    for arg in ("idle_minutes=nan", "idle_minutes=-1", "idle_minutes=1e3", "idle_minutes=", "idle_minutes=0x10",
                "idle_minutes=inf"):
        rc, out, err = srv.cli("policy", "set", arg)
        check(rc != 0 and "idle_minutes wants a number" in err, "%s refused by the CLI: %d %r" % (arg, rc, err))
    rc, out, err = srv.cli("policy", "set", "uid=0")
    check(rc != 0 and "the sandbox's uid is not changed here" in err, "uid=0 through the CLI: %d %r" % (rc, err))
    rc, out, err = srv.cli("policy", "set", "idle_minutes=0")
    check(rc != 0 and "idle_minutes" in err, "idle_minutes=0 said by the server: %d %r" % (rc, err))
    srv.stop()


def main():
    for name, f in (("refusals", refusals), ("caps", caps), ("exec", exec_), ("idle", idle), ("ttl", ttl)):
        if not CTX.only or name in CTX.only:
            f()
    print("ok: %d checks" % check.count)


if __name__ == "__main__":
    sys.exit(ahserver.run(main, CTX.fail, CTX.procs, CTX.tmp, CTX.log))
