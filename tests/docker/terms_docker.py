#!/usr/bin/python3
"""tests/docker/terms_docker.py: a terminal that lasts across a server
kill -9 and restart (issue 29), with the Docker driver, the real `agenthold
serve` and the real static sandboxd.

A terminal is made (POST .../terminals), a client types `echo` and leaves
a command running; the server is killed with SIGKILL and started again.
sandboxd kept the shell; the new server finds it at the sandbox's
connection (the ptys channel), lists it under the same id, and an attach
draws the screen rebuilt from sandboxd's ring (the echo from before the
kill, the command's output from while the server was away), then the same
shell answers. Then, restarted with the idle ladder's freeze and the
terminal left alone, the agent freezes (docker pause); listing and
reading the terminal do not thaw it, an attach does and the same shell
answers. DELETE ends it; nothing of the agent is left after rm.

usage: terms_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine. Ports from ahserver.free_port, pool
10.213.60.0/22, prefix dockerterms<pid>."""
import os
import sys
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import Harness  # noqa: E402
import ahserver  # noqa: E402

h = Harness("docker.terms", sys.argv[1], "10.213.60.0/22")


def listed():
    st, j = h.api("GET", "/api/v1/agents/tt/terminals")
    h.check(st == 200, "the list: %d %r" % (st, j))
    return {t["id"]: t for t in j["terminals"]}


def scenario(h):
    h.start_server()
    a = h.cli("create", "tt")
    h.check(a["state"] == "running", "create -> running: %r" % a["state"])
    st, j = h.api("POST", "/api/v1/agents/tt/terminals", {"cols": 100, "rows": 30, "title": "kept"})
    h.check(st == 201, "a terminal: %d %r" % (st, j))
    tid = j["id"]
    uri = "ws://127.0.0.1:%d/api/v1/agents/tt/terminal?terminal=%s&cols=100&rows=30&token=%s" % (
        h.port(), tid, h.token())
    out, _, _ = ahserver.term_session(uri, [(b"echo before-$((6*7)) pid-$$-x\n", b"-x\r\n"),
                                       (b"sleep 4; echo after-$((7*7))\n", None)], h.fail, 20)
    pid = out.split(b"pid-")[-1].split(b"-x")[0]
    h.check(pid.isdigit(), "the shell's pid: %r" % out[-200:])

    h.kill_server()
    time.sleep(1)
    h.start_server()
    ahserver.wait_until(lambda: tid in listed() and listed()[tid]["state"] == "running", 30,
                        "the terminal adopted after the restart", fail=h.fail)
    time.sleep(4)                       # the command's output comes while nobody watches
    out, first, _ = ahserver.term_session(uri, [(None, b"after-49"),
                                                (b"echo again-$((2*2)) pid-$$-y\n", b"pid-" + pid + b"-y")],
                                          h.fail, 20)
    h.check(first is not None and b"before-42" in first and b"after-49" in first,
            "the screen rebuilt: from before the kill and from while the server was away: %r"
            % (first or b"")[-400:])
    st, j = h.api("GET", "/api/v1/agents/tt/terminals/" + tid)
    h.check(st == 200 and "again-4" in j["screen"], "GET shows the screen: %d %r" % (st, j))

    # A freeze: restarted with a short idle time and the ladder's freeze,
    # the terminal left alone (it stops counting at once) lets the agent
    # freeze (docker pause); listing and reading it do not thaw it; an
    # attach thaws it and the same shell answers.
    h.kill_server()
    h.start_server(extra_env={"AGENTHOLD_SANDBOX_IDLE_MINUTES": "0.05",
                              "AGENTHOLD_SANDBOX_IDLE_CHECK_INTERVAL": "1s",
                              "AGENTHOLD_SANDBOX_FREEZE_MINUTES": "1",
                              "AGENTHOLD_TERMINAL_DETACHED_COUNTS_FOR": "0s"})
    ahserver.wait_until(lambda: h.cli("show", "tt")["state"] == "frozen", 30, "the agent frozen", fail=h.fail)
    h.check(tid in listed(), "listed while frozen")
    st, j = h.api("GET", "/api/v1/agents/tt/terminals/" + tid)
    h.check(st == 200 and "again-4" in j["screen"], "read while frozen: %d %r" % (st, j))
    h.check(h.cli("show", "tt")["state"] == "frozen", "reading did not thaw it")
    out, first, _ = ahserver.term_session(uri, [(None, b"again-4"),
                                                (b"echo thawed-$((3*3)) pid-$$-z\n", b"pid-" + pid + b"-z")],
                                          h.fail, 30)
    h.check(b"thawed-9" in out, "the attach thawed it; the same shell answers: %r" % out[-200:])
    # The shell answers once the engine has unpaused the container, which
    # may be a moment before lifecycle has written down that it runs.
    ahserver.wait_until(lambda: h.cli("show", "tt")["state"] == "running", 15, "running after the thaw",
                        fail=h.fail)
    st, j = h.api("DELETE", "/api/v1/agents/tt/terminals/" + tid)
    h.check(st == 200 and j["ended"], "DELETE: %d %r" % (st, j))
    h.check(h.cli("rm", "tt")["state"] == "destroyed", "rm")
    h.finish()


sys.exit(h.run(scenario))
