#!/usr/bin/python3
"""tests/docker/sleep_docker.py: sleep and wake with the Docker driver, the
real `agenthold serve` and the real static sandboxd.

With sandbox.idle_minutes 0.05 (3 s) and idle_check_interval 1s: an
untouched agent falls asleep near its predicted sleeps_at (the container
stopped by the sleeper, the home volume kept, a file written in the home
before still there); a start wakes it and it is running again through
sandboxd (a fresh boot.json token, the container running, the file still
there); a turn held keeps it awake past its idle time, and once the turn
ends it falls asleep again; after a server kill and restart (kept down past
its idle time) it gets its whole idle time again from the restart. Checked through the CLI, the REST API and the
Engine API (never the docker CLI).

usage: sleep_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine. Ports from ahserver.free_port, pool
10.213.144.0/20, prefix dockersleep<pid>."""
import datetime
import json
import os
import sys
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import engine, put_home_file, read_file_from_container, Harness  # noqa: E402

h = Harness("docker.sleep", sys.argv[1], "10.213.144.0/20")
h.env["AGENTHOLD_SANDBOX_IDLE_MINUTES"] = "0.05"
h.env["AGENTHOLD_SANDBOX_IDLE_CHECK_INTERVAL"] = "1s"
h.env["AGENTHOLD_SANDBOX_FREEZE_MINUTES"] = "0"     # this test is about sleep; freeze_docker.py the ladder
CHECK_S = 1.0
IDLE_S = 3.0


def wait_for(name, want, seconds):
    deadline = time.time() + seconds
    while True:
        a = h.cli("show", name)
        if a["state"] == want:
            return a, time.time()
        if time.time() > deadline:
            return a, None
        time.sleep(0.1)


def boot_token(cid):
    return json.loads(read_file_from_container(cid, "/etc/agenthold/boot.json"))["token"]


def scenario(h):
    h.start_server()
    a = h.cli("create", "sleepy")
    h.check(a["state"] == "running", "create -> running: %r" % a["state"])
    aid = a["id"]
    cid = h.container(aid)["Id"]
    vol = "%s-home-%s" % (h.prefix, aid)
    put_home_file(cid, "survivor.txt", b"still here after sleep\n")
    token1 = boot_token(cid)

    # The forecast is made at each check: within one interval it is there.
    deadline = time.time() + 3 * CHECK_S
    while True:
        a = h.cli("show", "sleepy")
        if a.get("sleeps_at") or time.time() > deadline or a["state"] != "running":
            break
        time.sleep(0.1)
    h.check(a.get("sleeps_at"), "a running agent says when it falls asleep: %r" % a)
    h.check(a.get("last_activity_at"), "and its last activity")
    sleeps_at = a["sleeps_at"]

    # Untouched: it falls asleep, within one check interval of its forecast.
    t0 = time.time()
    a, asleep_at = wait_for("sleepy", "sleeping", IDLE_S + 5 * CHECK_S + 10)
    h.check(asleep_at is not None, "an untouched agent falls asleep (state %s)" % a["state"])
    print("fell asleep %.1f s after the check began (idle 3 s, checks every 1 s)" %
          (asleep_at - t0))
    forecast = datetime.datetime.strptime(sleeps_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    # Stopping takes its own time (docker stop of sandboxd under docker-init).
    h.check(asleep_at <= forecast + CHECK_S + 2.5,
            "asleep %.2f s after the forecast sleeps_at (one check is %.0f s)" %
            (asleep_at - forecast, CHECK_S))
    print("asleep %.2f s after its forecast sleeps_at" % (asleep_at - forecast))
    c = h.container(aid)
    h.check(c and not c["State"]["Running"], "the sleeper stopped the container")
    h.check(c["State"]["ExitCode"] in (0, 143), "stopped, not crashed: exit %r" %
            c["State"]["ExitCode"])
    st, _ = engine("GET", "/volumes/%s" % vol)
    h.check(st == 200, "the home volume is kept while asleep")
    h.check(read_file_from_container(cid, "/home/agent/survivor.txt") == b"still here after sleep\n",
            "the file in the home is there while asleep")
    st, ops = h.api("GET", "/api/v1/agents/sleepy/operations")
    if st == 200:
        # Nobody asked for a stop through the API: the stop was the sleeper's.
        kinds = [(o["actor"], o["kind"], o["detail"]) for o in ops["operations"]]
        h.check(("sleeper", "state", "sleeping") in kinds and
                not [k for k in kinds if k[0].startswith("api:") and k[1] == "stop"],
                "the audit trail shows a stop nobody asked for: %r" % kinds)

    # A turn on a sleeping agent wakes it and starts once it runs.
    st, turn = h.api("POST", "/api/v1/agents/sleepy/turns", {})
    after = h.cli("show", "sleepy")["state"]
    h.check(st == 201 and after == "running",
            "a turn on the sleeping agent wakes it: HTTP %d, state then %s" % (st, after))
    if st == 201:
        h.api("DELETE", "/api/v1/turns/%s" % turn["turn_id"])
    h.cli("stop", "sleepy")

    # Wake: a start brings it back through sandboxd.
    t0 = time.time()
    a = h.cli("start", "sleepy")
    h.check(a["state"] == "running", "start wakes it: %r (%s)" % (a["state"], a.get("error")))
    print("sleeping -> running in %.2f s" % (time.time() - t0))
    c = h.container(aid)
    h.check(c["State"]["Running"] and c["Id"] == cid, "the same container runs again")
    h.check(boot_token(cid) != token1, "a fresh per-boot token was written before the start")
    h.check(read_file_from_container(cid, "/home/agent/survivor.txt") == b"still here after sleep\n",
            "the file in the home survived the sleep")

    # A turn held keeps it awake past its idle time; ended, it sleeps again.
    st, turn = h.api("POST", "/api/v1/agents/sleepy/turns", {"lease_ms": 30000})
    h.check(st == 201, "a turn starts: %d %r" % (st, turn))
    time.sleep(IDLE_S + 3 * CHECK_S)    # pacing: past its idle time
    a = h.cli("show", "sleepy")
    h.check(a["state"] == "running", "a running turn keeps it awake: %s" % a["state"])
    h.check("turn" in json.dumps(a.get("awake_because")), "awake because of the turn: %r" %
            a.get("awake_because"))
    st, _ = h.api("DELETE", "/api/v1/turns/%s" % turn["turn_id"])
    h.check(st == 200, "the turn ends: %d" % st)
    a, asleep_at = wait_for("sleepy", "sleeping", IDLE_S + 5 * CHECK_S + 10)
    h.check(asleep_at is not None, "after the turn it falls asleep again (%s)" % a["state"])
    h.check(not h.container(aid)["State"]["Running"], "the container is stopped again")

    # Seed 000: "After a server restart, the idle clock of running agents
    # starts again." Woken, then the server killed and kept down for longer
    # than the idle time: the agent's last use is then older than its idle
    # minutes, yet the restarted server gives it its whole idle time again,
    # counted from the restart, and only then puts it to sleep.
    h.check(h.cli("start", "sleepy")["state"] == "running", "woken before the restart")
    h.kill_server()
    time.sleep(IDLE_S + 2 * CHECK_S)    # pacing: the server is away past the idle time
    h.check(h.container(aid)["State"]["Running"], "the sandbox ran on while the server was away")
    restarted = time.time()
    h.start_server()
    a = h.cli("show", "sleepy")
    h.check(a["state"] == "running", "running after the restart: %s" % a["state"])
    deadline = time.time() + 3 * CHECK_S
    while not a.get("sleeps_at") and time.time() < deadline and a["state"] == "running":
        time.sleep(0.1)
        a = h.cli("show", "sleepy")
    h.check(a.get("sleeps_at"), "a forecast after the restart: %r" % a)
    forecast = datetime.datetime.strptime(a["sleeps_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    h.check(forecast >= restarted + IDLE_S - 0.5,
            "the idle clock starts again at the restart: sleeps_at %.2f s after it (idle %.0f s)" %
            (forecast - restarted, IDLE_S))
    a, asleep_at = wait_for("sleepy", "sleeping", IDLE_S + 5 * CHECK_S + 10)
    h.check(asleep_at is not None, "after its new idle time it falls asleep (%s)" % a["state"])
    h.check(asleep_at >= restarted + IDLE_S - 0.5,
            "not asleep before its idle time after the restart: %.2f s" % (asleep_at - restarted))
    print("after a restart: asleep %.2f s after it (idle %.0f s)" % (asleep_at - restarted, IDLE_S))

    h.check(h.cli("rm", "sleepy")["state"] == "destroyed", "rm")
    c, n, v = h.leftovers()
    h.check(not c and not n and not v, "nothing left: %d %d %d" % (len(c), len(n), len(v)))
    h.server.terminate()
    h.check(h.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")


sys.exit(h.run(scenario))
