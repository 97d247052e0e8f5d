#!/usr/bin/python3
"""tests/e2e/e2e_terms.py: terminals that last (issue 29), on the real
`agenthold serve` with the fake driver (its sandboxd in-process, real
yamux over the tunnel; temporary data directory, ports from
ahserver.free_port).

  last      POST .../terminals makes one (201, its id); a client attaches
            by id and sees `echo` run; it goes, with a command still
            running; the list shows the terminal with no client; a
            reattach gets the earlier screen and what came meanwhile
            first, then live output; GET shows the screen; two clients
            (the newer writes, the older watches); the CLI's `terms` and
            `term --attach`; the shell's exit ends the clients and the
            list says exited; DELETE ends one (its clients closed, 404
            after)
  scope     another tenant's token (404, the agent unseen), another agent
            of the same tenant (404 naming the terminal), on the list, the
            object, DELETE and the WebSocket
  cap       32 terminals on one agent, the 33rd refused (429 naming the
            cap); DELETE frees a place
  hostile   sizes negative, zero, huge, of the wrong type or over the
            area; unknown fields; ids malformed or unknown on every route
  tunnel    the tunnel's TCP connection killed with `ss -K` while a command
            runs with nobody attached: the same shell (its pid) after
            sandboxd redialled, and the output of the gap on the reattach
  flood     output at full speed to a client that never reads: that client
            is closed (1008), the server's memory stays bounded (RSS), the
            shell is not held back by it, a new client gets the screen
  scrollback  12,000 lines printed: a reattach draws the last 10,000 of
            them (terminal.scrollback_lines) before the screen, no older;
            that reattach takes at most 1.2x a fresh terminal's first
            answer (medians of 5); bold red and the program's title kept
  idle      (a server of its own: idle after 3 s, terminal.detached_counts_for
            5s) a terminal with a client keeps the agent awake (awake_because
            terminal); left alone it still does for 5 s, then the agent
            sleeps, which ends the terminal (its screen readable)
  sleep     the agent stopped: its terminal ended, saying the sleep ended
            it, its screen still readable

usage: e2e_terms.py AGENTHOLD_BINARY [SCENARIO...]
Always kills what it started and removes its temporary directory."""
import asyncio
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahlocal  # noqa: E402
import ahserver  # noqa: E402
import websockets  # noqa: E402

CTX = ahlocal.context("ah-e2e-terms-")
BIN, ONLY, TMP, Fail, check = CTX.bin, CTX.only, CTX.tmp, CTX.fail, CTX.check


def ws_uri(srv, agent, tid, tok=None, size=True):
    q = "terminal=%s&token=%s" % (tid, tok or srv.admin)
    if size:
        q += "&cols=80&rows=24"
    return "ws://127.0.0.1:%d/api/v1/agents/%s/terminal?%s" % (srv.port, agent, q)


def session(uri, steps, seconds=15):
    return ahserver.term_session(uri, steps, Fail, seconds)


def run(coro):
    return asyncio.run(coro)


def upgrade_status(uri):
    async def go():
        try:
            async with websockets.connect(uri, open_timeout=30):
                return 101
        except websockets.exceptions.InvalidStatusCode as e:
            return e.status_code
    return run(go())


def server():
    srv = ahlocal.Local(CTX, "srv").start()
    for a in ("a", "b"):
        srv.ok("POST", "/api/v1/agents", body={"name": a})
        srv.wait_state(a, ("running",))
    return srv


def create(srv, agent="a", body=None, tok=ahlocal.ADMIN):
    j = srv.ok("POST", "/api/v1/agents/%s/terminals" % agent, tok=tok, body=body or {"cols": 80, "rows": 24})
    check(len(j["id"]) == 13 and j["id"][0] == "t" and j["cols"] == 80 and j["rows"] == 24,
          "a new terminal: its id and size: %r" % j)
    return j["id"]


def listed(srv, agent="a"):
    return {t["id"]: t for t in srv.ok("GET", "/api/v1/agents/%s/terminals" % agent)["terminals"]}


def last(srv):
    tid = create(srv, body={"cols": 80, "rows": 24, "title": "build"})
    out, first, reason = session(ws_uri(srv, "a", tid), [
        (b"echo hello-$((6*7))\n", b"hello-42"),
        (b"sleep 1.5; echo later-$((2*3))\n", None)])
    check(reason is None, "the first client saw the echo and left: %r" % reason)
    t = listed(srv)[tid]
    check(t["clients"] == 0 and t["state"] == "running" and t["title"] == "build",
          "listed with no client while detached: %r" % t)
    time.sleep(2.5)
    out, first, reason = session(ws_uri(srv, "a", tid), [(None, b"later-6")], seconds=5)
    check(first is not None and b"hello-42" in first and b"later-6" in first,
          "a reattach gets the earlier screen and what came meanwhile first: %r" % (first or b"")[-400:])
    out, first, reason = session(ws_uri(srv, "a", tid), [
        (b"echo live-$((3*3))\n", b"live-9")])
    check(b"hello-42" in first, "the screen again on the next attach: %r" % first[-300:])
    j = srv.ok("GET", "/api/v1/agents/a/terminals/" + tid)
    check("live-9" in j["screen"] and "hello-42" in j["screen"], "GET shows the screen: %r" % j)

    # Two clients: the newer writes, the older only watches.
    async def two():
        async with websockets.connect(ws_uri(srv, "a", tid)) as old:
            await asyncio.sleep(0.3)
            async with websockets.connect(ws_uri(srv, "a", tid)) as new:
                await asyncio.sleep(0.3)
                n = listed(srv)[tid]["clients"]
                await old.send(b"echo from-old-$((1+1))\n")
                await new.send(b"echo from-new-$((2+2))\n")
                seen = b""
                end = time.time() + 8
                while time.time() < end and b"from-new-4" not in seen:
                    try:
                        m = await asyncio.wait_for(old.recv(), timeout=0.3)
                        seen += m if isinstance(m, bytes) else b""
                    except asyncio.TimeoutError:
                        pass
                return n, seen
    n, seen = run(two())
    check(n == 2, "two clients listed: %d" % n)
    check(b"from-new-4" in seen and b"from-old-2" not in seen,
          "the watcher sees the writer's output, its own input dropped: %r" % seen[-300:])

    # The CLI: the list, and an attach that types and sees.
    rc, out, err = srv.cli("terms", "a")
    check(rc == 0 and tid in out and "build" in out, "agenthold terms a: %d %r %r" % (rc, out, err))
    env = dict(srv.env)
    env["AGENTHOLD_TOKEN"] = srv.admin
    import subprocess
    p = subprocess.run([BIN, "term", "a", "--attach", tid], env=env, cwd=srv.dir, capture_output=True,
                       timeout=60, input=b"echo cli-$((5*5))\nsleep 1\n")
    check(b"live-9" in p.stdout and b"cli-25" in p.stdout,
          "agenthold term --attach: the screen, then what it typed: %d %r %r"
          % (p.returncode, p.stdout[-400:], p.stderr[-300:]))
    check(listed(srv)[tid]["state"] == "running", "the terminal outlives the CLI's attach")

    # The shell's exit: the client is told, the list says exited.
    out, first, reason = session(ws_uri(srv, "a", tid), [(b"exit 3\n", b"never")], seconds=8)
    check(reason and "status 3" in reason, "the shell's exit closes the client: %r" % reason)
    t = listed(srv)[tid]
    check(t["state"] == "exited" and "status 3" in t["note"], "listed as exited: %r" % t)
    srv.ok("DELETE", "/api/v1/agents/a/terminals/" + tid)
    check(tid not in listed(srv), "DELETE removes an exited one")

    # DELETE of a live one with a client attached: the client is closed.
    tid = create(srv)
    async def deleted():
        async with websockets.connect(ws_uri(srv, "a", tid)) as ws:
            await asyncio.sleep(0.5)
            j = srv.ok("DELETE", "/api/v1/agents/a/terminals/" + tid)
            try:
                while True:
                    await asyncio.wait_for(ws.recv(), timeout=5)
            except websockets.exceptions.ConnectionClosed as e:
                return j, e.reason
    j, reason = run(deleted())
    check(j == {"id": tid, "ended": True} and "ended" in (reason or ""),
          "DELETE ends it and closes its client: %r %r" % (j, reason))
    status, j = srv.call("GET", "/api/v1/agents/a/terminals/" + tid)
    check(status == 404, "gone after DELETE: %d %r" % (status, j))
    for kind in ("terminal.create", "terminal.end"):
        ops = srv.ok("GET", "/api/v1/agents/a/operations?operation=" + kind)["operations"]
        check(any(tid in (o.get("detail") or "") for o in ops), "%s in the audit trail: %r" % (kind, ops[:2]))
    check(upgrade_status(ws_uri(srv, "a", tid)) == 404, "no attach after DELETE")


def scope(srv):
    tid = create(srv)
    rc, out, err = srv.cli("tenant", "create", "other")
    check(rc == 0, "tenant create other: %d %r" % (rc, err))
    rc, out, err = srv.cli("--tenant", "other", "token", "create")
    other = out.strip()
    check(rc == 0 and len(other) == 64, "a token of the other tenant: %d %r" % (rc, err))
    for method in ("GET", "DELETE"):
        status, j = srv.call(method, "/api/v1/agents/a/terminals/" + tid, tok=other)
        check(status == 404, "another tenant: %s of the terminal: 404, got %d %r" % (method, status, j))
        status, j = srv.call(method, "/api/v1/agents/b/terminals/" + tid)
        check(status == 404 and "no terminal" in j["error"],
              "another agent: %s of the terminal: 404, got %d %r" % (method, status, j))
    status, j = srv.call("GET", "/api/v1/agents/a/terminals", tok=other)
    check(status == 404, "another tenant: the list: 404, got %d" % status)
    status, j = srv.call("POST", "/api/v1/agents/a/terminals", tok=other, body={})
    check(status == 404, "another tenant: a create: 404, got %d" % status)
    check(upgrade_status(ws_uri(srv, "a", tid, tok=other)) == 404, "another tenant: the attach: 404")
    check(upgrade_status(ws_uri(srv, "b", tid)) == 404, "another agent: the attach: 404")
    check(tid in listed(srv), "still there after all that")
    check(listed(srv, "b") == {}, "the other agent lists none")
    srv.ok("DELETE", "/api/v1/agents/a/terminals/" + tid)


def cap(srv):
    ids = [create(srv, "b") for _ in range(32)]
    status, j = srv.call("POST", "/api/v1/agents/b/terminals", body={})
    check(status == 429 and "32 terminals" in j["error"], "the 33rd: 429 naming the cap: %d %r" % (status, j))
    check(len(listed(srv, "b")) == 32, "32 listed")
    srv.ok("DELETE", "/api/v1/agents/b/terminals/" + ids[0])
    # Its place is free once its shell is gone (the hang-up takes a moment).
    ahserver.wait_until(lambda: srv.call("POST", "/api/v1/agents/b/terminals", body={"cols": 80, "rows": 24})[0] == 201,
                        10, "a place freed by DELETE", fail=Fail)
    tid = [i for i in listed(srv, "b") if i not in ids][0]
    # The new one works (its shell started under the sandbox's own cap too).
    out, first, reason = session(ws_uri(srv, "b", tid), [(b"echo cap-$((4*4))\n", b"cap-16")])
    for i in ids[1:] + [tid]:
        srv.ok("DELETE", "/api/v1/agents/b/terminals/" + i)
    check(listed(srv, "b") == {}, "all ended")


def hostile(srv):
    path = "/api/v1/agents/a/terminals"
    for body, words in (({"cols": -1}, "cols"), ({"cols": 0}, "cols"), ({"rows": 100000}, "rows"),
                        ({"cols": 1e300}, "cols"), ({"cols": "80"}, "cols"), ({"cols": 80.5}, "cols"),
                        ({"cols": 1000, "rows": 1000}, "cells"), ({"shell": "/bin/bash"}, "shell"),
                        ({"title": "x" * 300}, "title"), ({"title": 5}, "title")):
        status, j = srv.call("POST", path, body=body)
        check(status == 400 and words in j["error"], "POST %r: 400 naming %s, got %d %r" % (body, words, status, j))
    status, j = srv.call("POST", path, raw=b"{not json", headers={"Content-Type": "application/json"})
    check(status == 400, "bad JSON: %d" % status)
    for tid, want in (("xyz", 400), ("t00000000000g", 400), ("T000000000000", 400), ("t0000000000000", 400),
                      ("t000000000000", 404), ("%2e%2e", 400), ("t00000000000%00", 400)):
        status, j = srv.call("GET", path + "/" + tid)
        check(status == want, "GET id %r: want %d, got %d %r" % (tid, want, status, j))
        status, j = srv.call("DELETE", path + "/" + tid)
        check(status == want, "DELETE id %r: want %d, got %d %r" % (tid, want, status, j))
    for q, want in (("terminal=xyz", 400), ("terminal=t000000000000", 404),
                    ("terminal=t000000000000&cols=-5&rows=24", 400),
                    ("terminal=t000000000000&cols=1000&rows=1000", 400)):
        uri = "ws://127.0.0.1:%d/api/v1/agents/a/terminal?%s&token=%s" % (srv.port, q, srv.admin)
        st = upgrade_status(uri)
        check(st == want, "attach %s: want %d, got %d" % (q, want, st))
    check(listed(srv) == {}, "nothing made by all that")


def tunnel(srv):
    import subprocess
    port = srv.env["AGENTHOLD_SANDBOX_TUNNEL_LISTEN"].rsplit(":", 1)[1]
    tid = create(srv)
    out, first, reason = session(ws_uri(srv, "a", tid), [
        (b"echo pid-$$-x\n", b"-x\r\n"),
        (b"sleep 2; echo during-$((3+4))\n", None)])
    pid = out.split(b"pid-")[-1].split(b"-x")[0]
    check(pid.isdigit(), "the shell's pid: %r" % out[-200:])
    r = subprocess.run(["ss", "-K", "-tn", "dport", "= :%s" % port], capture_output=True, text=True)
    check(r.returncode == 0, "ss -K: %r" % r.stderr)
    time.sleep(4)
    ahserver.wait_until(lambda: listed(srv)[tid]["state"] == "running", 20, "the terminal back", fail=Fail)
    out, first, reason = session(ws_uri(srv, "a", tid), [
        (None, b"during-7"), (b"echo pid-$$-y\n", b"pid-" + pid + b"-y")])
    check(b"during-7" in first, "the gap's output on the reattach: %r" % first[-300:])
    with open(CTX.log) as f:
        log = f.read()
    check("sandboxd connected" in log, "the log shows the reconnect")
    srv.ok("DELETE", "/api/v1/agents/a/terminals/" + tid)


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def flood(srv):
    tid = create(srv)
    base = rss_kb(srv.proc.pid)

    async def go():
        peak, closed = base, None
        async with websockets.connect(ws_uri(srv, "a", tid), max_queue=1, read_limit=1 << 16) as lazy:
            await lazy.send(b"tr '\\0' x < /dev/zero\n")
            end = time.time() + 60
            while time.time() < end:
                peak = max(peak, rss_kb(srv.proc.pid))
                t = listed(srv)[tid]
                if t["clients"] == 0 and closed is None:
                    closed = time.time()
                    break
                await asyncio.sleep(0.5)
            try:
                await asyncio.wait_for(lazy.recv(), timeout=0.1)
            except Exception:
                pass
            code = lazy.close_code
        return peak, closed, code
    peak, closed, code = run(go())
    check(closed is not None, "the client that never reads was let go")
    check(peak - base < 96 * 1024, "the server's memory stays bounded: RSS %d kB -> %d kB" % (base, peak))
    # A new client gets the screen (the flood's x's) and, writing now,
    # stops the flood; the shell answers.
    out, first, reason = session(ws_uri(srv, "a", tid), [
        (None, b"xxxxxxxx"), (b"\x03", None), (b"echo flood-$((8*8))\n", b"flood-64")], seconds=60)
    check(b"xxxxxxxxxxxxxxxx" in first, "the new client gets the screen first: %r" % first[:200])
    check(listed(srv)[tid]["state"] == "running", "the terminal outlived the flood")
    srv.ok("DELETE", "/api/v1/agents/a/terminals/" + tid)


def scrollback(srv):
    tid = create(srv)
    session(ws_uri(srv, "a", tid), [(b"seq 1 12000; echo seq-$((6*6))\n", b"seq-36\r\n")], seconds=60)
    # The ratio: a reattach drawing 10,000 lines against a fresh
    # terminal's first answer, median of 5 each (made, attached, an echo
    # typed at once answered: the shell is up), at most 1.2x.
    fresh, again = [], []
    for _ in range(5):
        t0 = time.monotonic()
        new = create(srv)
        session(ws_uri(srv, "a", new), [(b"echo up-$((1+1))\n", b"up-2")])
        fresh.append(time.monotonic() - t0)
        srv.ok("DELETE", "/api/v1/agents/a/terminals/" + new)
        t0 = time.monotonic()
        session(ws_uri(srv, "a", tid), [(None, b"seq-36")])
        again.append(time.monotonic() - t0)
    fresh.sort()
    again.sort()
    print("scrollback: a fresh terminal's first answer in %.0f ms, a reattach with 10,000 lines in %.0f ms "
          "(medians of 5): %.2fx" % (fresh[2] * 1000, again[2] * 1000, again[2] / fresh[2]))
    check(again[2] <= 1.2 * fresh[2], "a reattach at most 1.2x a fresh prompt: %r %r" % (again, fresh))
    t0 = time.monotonic()
    out, first, reason = session(ws_uri(srv, "a", tid), [(None, b"seq-36")])
    took = time.monotonic() - t0
    lines = first.split(b"\r\n")
    check(b"12000" in lines and b"2100" in lines and b"1900" not in lines,
          "the last 10,000 lines, no older: %d lines from %r" % (len(lines), lines[1:3]))
    print("scrollback: a reattach with 10,000 lines drawn in %.0f ms (%d bytes)" % (took * 1000, len(first)))
    # Attributes and the title come back as the program set them.
    session(ws_uri(srv, "a", tid), [
        (b"printf '\\033]2;my-title\\007\\033[1;31mred\\033[0m-%s\\n' $((5+5))\n", b"-10\r\n")])
    out, first, reason = session(ws_uri(srv, "a", tid), [(None, b"-10")])
    check(b"\x1b[0;1;31mred\x1b[0m-10" in first, "bold red again on the reattach: %r" % first[-300:])
    check(listed(srv)[tid]["title"] == "my-title", "the program's title: %r" % listed(srv)[tid])
    srv.ok("DELETE", "/api/v1/agents/a/terminals/" + tid)


def sleep(srv):
    srv.ok("POST", "/api/v1/agents", body={"name": "c"})
    srv.wait_state("c", ("running",))
    tid = create(srv, "c")
    session(ws_uri(srv, "c", tid), [(b"echo slept-$((9*9))\n", b"slept-81")])
    srv.ok("POST", "/api/v1/agents/c/stop?wait=1")
    ahserver.wait_until(lambda: listed(srv, "c")[tid]["state"] == "ended", 20, "the terminal ended", fail=Fail)
    j = srv.ok("GET", "/api/v1/agents/c/terminals/" + tid)
    check("sleep ended the terminal" in j["note"] and "slept-81" in j["screen"],
          "ended by the sleep, its screen readable: %r" % j)
    out, first, reason = session(ws_uri(srv, "c", tid), [(None, b"slept-81")])
    check(b"slept-81" in first, "an attach draws it, then closes: %r %r" % (first, reason))
    srv.ok("DELETE", "/api/v1/agents/c/terminals/" + tid)


def idle(srv):
    own = ahlocal.Local(CTX, "idle", {"AGENTHOLD_TERMINAL_DETACHED_COUNTS_FOR": "5s",
                                      "AGENTHOLD_SANDBOX_IDLE_MINUTES": "0.05",
                                      "AGENTHOLD_SANDBOX_IDLE_CHECK_INTERVAL": "1s"}).start()
    own.ok("POST", "/api/v1/agents", body={"name": "d"})
    own.wait_state("d", ("running",))
    tid = create(own, "d")

    def agent():
        return own.ok("GET", "/api/v1/agents/d")

    async def attached():
        async with websockets.connect(ws_uri(own, "d", tid)) as ws:
            await ws.send(b"echo idle-$((1+2))\n")
            await asyncio.sleep(6)          # twice the idle time (3 s), a client attached
            return agent()
    a = run(attached())
    check(a["state"] == "running" and a["awake_because"] == "terminal",
          "a client attached keeps it awake: %s %s" % (a["state"], a["awake_because"]))
    left = time.monotonic()
    time.sleep(2.5)
    a = agent()
    check(a["state"] == "running" and a["awake_because"] == "terminal",
          "left alone 2.5 s of 5: still counts: %s %s" % (a["state"], a["awake_because"]))
    ahserver.wait_until(lambda: agent()["state"] in ("stopping", "sleeping"), 20, "the agent sleeps", fail=Fail)
    took = time.monotonic() - left
    check(took > 4.5, "it slept only once the terminal stopped counting: %.1f s after the client left" % took)
    ahserver.wait_until(lambda: listed(own, "d")[tid]["state"] == "ended", 10, "the terminal ended", fail=Fail)
    j = own.ok("GET", "/api/v1/agents/d/terminals/" + tid)
    check("sleep ended the terminal" in j["note"] and "idle-3" in j["screen"],
          "the sleep ended it, its screen readable: %r" % j)
    own.stop()


def main():
    srv = server()
    for name, f in (("last", last), ("scope", scope), ("cap", cap), ("hostile", hostile),
                    ("tunnel", tunnel), ("flood", flood), ("scrollback", scrollback), ("idle", idle),
                    ("sleep", sleep)):
        if not ONLY or name in ONLY:
            f(srv)
    srv.stop()
    print("ok: %d checks" % check.count)


if __name__ == "__main__":
    sys.exit(ahserver.run(main, Fail, CTX.procs, TMP, CTX.log))
