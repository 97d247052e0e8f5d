#!/usr/bin/python3
"""tests/clients/client_python.py: the Python client (clients/python,
package agenthold) against the real `agenthold serve` (fake driver:
sandboxd a local process, so exec, files and terminals are real), with a
catalog of the test's own whose first runtime "py" names a well-behaved
ACP harness (tests/e2e/hostile_harness.py in its default mode: one update,
then the stop) and a runtime "plain" that names none.

  install    pip install --no-index --no-build-isolation of a copy of
             clients/python into a venv made with --system-site-packages
             and into a --target directory; the rest imports the package
             from that target (what a user gets, not the source tree)
  types      mypy --strict on the installed package (Python 3.9 and 3.11)
  agents     create (wait), get by name and id, list, update, stop, start,
             rebuild, destroy (wait: "destroyed", then NotFound); a start
             without wait answers the transitional state; 409 on a taken
             name; briefing, ports (a port of the test's own), a turn
             started, renewed, ended (then 404), the audit trail paged
  exec       status, stdout, stderr, cwd, env, stdin, a timeout (signal 9);
             exec_stream: records in order, stdout and stderr apart, 8 MiB
             whole (sha256), a nonzero exit; a refused timeout (400)
  files      mkdir, upload from bytes and from a file object (24 MiB,
             streamed), download into a file object and as bytes (sha256),
             list, tree, read_text, remove; names with unicode, spaces,
             '%', '?', '#' round trip and are what `ls` shows in the
             sandbox; a symlink out of the home is 403; a missing file 404;
             a sleeping agent's file read without waking it
  terminal   echo, resize (stty size), the shell's exit (1000 and its
             status); a terminal that lasts: created, attached, its screen
             read, listed, deleted (then 404)
  conv       create, list, prompt (turn ... update ... stop end_turn), the
             log read back (paged) with the same seqs, cancel when idle
             409, a permission not asked 404, a runtime without harness
             409; a permission the harness asks (hostile_harness.py's
             mode "permission") answered by answer_permission: an option
             not offered 400, then "allow" logged as decided by the API
             and received by the harness
  sessions   open (created), open again (same id, not created), list, get,
             reopen, close, reopen a closed one 410, unknown 404
  tenants    tenant create/list/get/update/delete (409 with sandboxes,
             force), tokens create/list/revoke; a tenant's token sees its
             own agents only, admin routes 403, revoked 401 naming it
  events     the stream of one agent: a stop's stopping then sleeping
  hostile    names with '/', '..', '.', '', control characters, non-str:
             ClientError before sending; unicode and over-long names: the
             server's 400 as APIError; home paths '..', absolute, '//',
             './': ClientError; a wrong token 401; a port nobody listens
             on: TransportError; a fake server answering not-JSON, a body
             cut short, an exec stream cut short, a bad WebSocket accept:
             ProtocolError or StreamError, never another exception; every
             hostile answer of e2e.cli_hostile_server (a head over 16 KiB,
             a body over the cap, bad chunks, two lengths, ...): an
             agenthold.Error within seconds
  tls        a server with server.tls_cert: https and wss with the
             certificate trusted (exec stream, files, terminal, events); an
             untrusted one and plain http to it: TransportError
  docs       every ```python block of clients/python/README.md run in
             order in one interpreter, and the README's Python example

usage: client_python.py AGENTHOLD_BINARY [SCENARIO...]"""
import hashlib
import io
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahlocal  # noqa: E402
import ahserver  # noqa: E402

CTX = ahlocal.context("ah-client-py-")
check = CTX.check
Fail = CTX.fail
PY = "/usr/bin/python3"
SITE = os.path.join(CTX.tmp, "site")
ag = None           # the agenthold module, once installed
SERVER = None


def want_raise(exc, fn, *args, **kw):
    """fn(*args, **kw) must raise exc (an agenthold class); answers it."""
    try:
        fn(*args, **kw)
    except exc as e:
        return e
    except Exception as e:  # noqa: BLE001 (what the client must never do is the point)
        raise Fail("%s%r: raised %s (%s), not %s" % (fn.__name__, args, type(e).__name__, e, exc.__name__))
    raise Fail("%s%r: raised nothing, wanted %s" % (fn.__name__, args, exc.__name__))


def install():
    global ag
    src = os.path.join(CTX.tmp, "src")
    shutil.copytree(os.path.join(CTX.src, "clients", "python"), src)
    p = subprocess.run([PY, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--quiet",
                        "--target", SITE, src], capture_output=True, text=True, timeout=180)
    check(p.returncode == 0, "pip install --target: %d %s" % (p.returncode, p.stderr[-2000:]))
    for f in ("__init__.py", "client.py", "ws.py", "models.py", "errors.py", "py.typed"):
        check(os.path.exists(os.path.join(SITE, "agenthold", f)), "installed: agenthold/%s" % f)
    venv = os.path.join(CTX.tmp, "venv")
    p = subprocess.run([PY, "-m", "venv", "--system-site-packages", "--without-pip", venv],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, "venv: %s" % p.stderr[-1000:])
    vpy = os.path.join(venv, "bin", "python")
    p = subprocess.run([vpy, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--quiet", src],
                       capture_output=True, text=True, timeout=180)
    check(p.returncode == 0, "pip install into the venv: %d %s" % (p.returncode, p.stderr[-2000:]))
    p = subprocess.run([vpy, "-c", "import agenthold; print(agenthold.__file__, agenthold.__version__)"],
                       capture_output=True, text=True, timeout=60, cwd=CTX.tmp)
    check(p.returncode == 0 and p.stdout.startswith(venv), "the venv imports its own copy: %r %r" %
          (p.stdout, p.stderr[-500:]))
    sys.path.insert(0, SITE)
    import agenthold
    check(agenthold.__file__.startswith(SITE), "imported from the target: %s" % agenthold.__file__)
    ag = agenthold
    print("install: pip --no-index into a venv and a target: ok")


def types():
    p = subprocess.run([PY, "-m", "mypy", "--version"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, "mypy is not installed (python3-mypy; scripts/install-deps installs it): %s"
          % p.stderr.strip()[-300:])
    cache = os.path.join(CTX.tmp, "mypy-cache")
    for version in ("3.9", "3.11"):
        p = subprocess.run([PY, "-m", "mypy", "--strict", "--python-version", version, "--cache-dir", cache,
                            os.path.join(SITE, "agenthold")], capture_output=True, text=True, timeout=300,
                           cwd=CTX.tmp)
        check(p.returncode == 0 and "Success" in p.stdout, "mypy --strict (Python %s): %s" % (version, p.stdout[-2000:]))
    print("types: mypy --strict clean for 3.9 and 3.11")


def server():
    global SERVER
    if SERVER is None:
        cat = os.path.join(CTX.tmp, "catalog.json")
        with open(cat, "w") as f:
            json.dump({"version": 2, "runtimes": [
                {"alias": "py", "description": "a harness that behaves", "image": "agenthold/py-test:1",
                 "harness": {"command": [PY, os.path.join(CTX.src, "tests", "e2e", "hostile_harness.py")]}},
                {"alias": "plain", "description": "no harness", "image": "agenthold/plain-test:1"}]}, f)
        SERVER = ahlocal.Local(CTX, "srv", {"AGENTHOLD_CATALOG_PATH": cat,
                                            "AGENTHOLD_LIMITS_TENANT_MAX_RUNNING": "40",
                                            "AGENTHOLD_LIMITS_POOL_MAX_RUNNING": "40"}).start()
    return SERVER


def client(token=None, **kw):
    s = server()
    return ag.Client("http://127.0.0.1:%d" % s.port, token or s.admin, **kw)


def agents():
    c = client()
    a = c.create_agent("life", wait=True)
    check(isinstance(a, ag.Agent) and a.state == "running" and a.name == "life" and len(a.id) == 12
          and a.tenant == "default" and a.runtime == "py", "create wait: %r" % a)
    check(c.agent(a.id).name == "life" and c.agent("life").id == a.id, "get by id and by name")
    check(a.raw["id"] == a.id and "sleeps_at" in a.raw, "raw keeps the whole object")
    check([x.id for x in c.agents() if x.name == "life"] == [a.id], "listed")
    e = want_raise(ag.Conflict, c.create_agent, "life")
    check(e.status == 409 and "exists already" in e.message, "taken name: %s" % e)
    e = want_raise(ag.APIError, c.create_agent, "longwait", wait=True, timeout=3601)
    check(e.status == 400 and "timeout" in e.message and not any(x.name == "longwait" for x in c.agents()),
          "create's wait bound reaches the server, which refuses 3601 s: %s" % e)
    w = c.create_agent("shortwait", wait=True, timeout=3600)
    check(w.state == "running", "create wait within 3600 s: %r" % w)
    c.destroy("shortwait", wait=True)
    u = c.update_agent("life", idle_minutes=12.5, cpus=0.5)
    check(u.idle_minutes == 12.5 and u.cpus == 0.5 and u.needs_rebuild is True, "update: %r" % u)
    s = c.stop("life", wait=True)
    check(s.state == "sleeping", "stop wait: %s" % s.state)
    st = c.start("life")
    check(st.state in ("starting", "running"), "start without wait answers at once: %s" % st.state)
    c.wait_state("life", "running", 30)
    r = c.rebuild("life", wait=True)
    check(r.state == "running" and r.needs_rebuild is False, "rebuild wait: %r" % r)
    b = c.briefing("life")
    check(isinstance(b, str) and b.strip(), "briefing: %r" % b[:100])
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", ahserver.free_port(fail=Fail)))
    lsock.listen(1)
    port = lsock.getsockname()[1]
    try:
        check({"port": port, "address": "127.0.0.1"} in c.ports("life"), "a listening port shown")
    finally:
        lsock.close()
    check(all({"port", "address"} <= set(p) for p in c.ports("life")), "ports' fields")
    t = c.start_turn("life", lease_ms=5000)
    check(re.fullmatch(r"[0-9a-f]+", t.get("turn_id", "")) and t.get("agent_id") == a.id, "turn: %r" % t)
    r = c.renew_turn(t["turn_id"], lease_ms=9000)
    check(r.get("expires_at_ms", 0) > t["expires_at_ms"], "renewed later: %r %r" % (t, r))
    check(c.end_turn(t["turn_id"]).get("ended") is True, "turn ended")
    want_raise(ag.NotFound, c.end_turn, t["turn_id"])
    ops = c.operations(agent="life", limit=200)
    kinds = [o["kind"] for o in ops["operations"]]
    check({"create", "update", "stop", "start", "rebuild", "turn.begin", "turn.end"} <= set(kinds),
          "the audit trail: %r" % kinds)
    page = c.operations(limit=1)
    check(len(page["operations"]) == 1 and page["next"] is not None, "paged: %r" % page)
    check(c.operations(before=page["next"], limit=1)["operations"][0]["id"] < page["operations"][0]["id"],
          "the next page is older")
    d = c.destroy("life", wait=True)
    check(d.state == "destroyed" and d.id == a.id, "destroy wait: %r" % d)
    e = want_raise(ag.NotFound, c.agent, "life")
    check("no agent named 'life'" in e.message, "gone: %s" % e.message)
    print("agents: ok")


def ensure_box(c, name="box"):
    try:
        a = c.agent(name)
    except ag.NotFound:
        a = c.create_agent(name, wait=True)
    if a.state != "running":
        a = c.start(name, wait=True)
    return a


def exec_():
    c = client()
    ensure_box(c)
    r = c.exec("box", "echo out; echo err >&2; exit 7")
    check(isinstance(r, ag.ExecResult) and (r.status, r.stdout, r.stderr) == (7, "out\n", "err\n")
          and r.signal in (None, 0) and not r.timed_out, "exec: %r" % r)
    c.mkdir("box", "sub")
    r = c.exec("box", "pwd; echo \"$A-$B\"; cat", cwd="sub", env={"A": "x y", "B": "ü"}, stdin="in\tput")
    check(r.status == 0 and r.stdout.endswith("/home/sub\nx y-ü\nin\tput"), "cwd, env, stdin: %r" % r.stdout)
    t0 = time.monotonic()
    r = c.exec("box", "sleep 30", timeout=0.5)
    check(r.timed_out and r.signal == 9 and time.monotonic() - t0 < 10, "timeout: %r" % r)
    e = want_raise(ag.APIError, c.exec, "box", "true", timeout=100000)
    check(e.status == 400 and "ceiling" in e.message, "over the ceiling: %s" % e)
    with c.exec_stream("box", "echo a; echo b >&2; sleep 0.2; echo c; exit 3") as s:
        recs = list(s)
    check([(x.stream, x.data) for x in recs if x.stream == "stdout"] in
          ([("stdout", b"a\n"), ("stdout", b"c\n")], [("stdout", b"a\nc\n")])
          and b"".join(x.data for x in recs if x.stream == "stderr") == b"b\n"
          and s.exit.status == 3 and not s.exit.timed_out, "stream: %r %r" % (recs, s.exit))
    s = c.exec_stream("box", "head -c 8388608 /dev/urandom | tee big.bin | cat; echo done >&2")
    h = hashlib.sha256()

    def take(rec):
        if rec.stream == "stdout":
            h.update(rec.data)
    got = s.wait(take)
    sha = c.exec("box", "sha256sum big.bin | cut -d' ' -f1").stdout.strip()
    check(got.status == 0 and h.hexdigest() == sha, "8 MiB streamed whole: %s vs %s" % (h.hexdigest(), sha))
    n = c.exec("box", "stat -c %s big.bin").stdout.strip()
    check(n == "8388608", "size %s" % n)
    c.remove("box", "big.bin")
    print("exec: ok")


def files():
    c = client()
    ensure_box(c)
    c.mkdir("box", "f/a/b", parents=True)
    odd = "f/ünï cöde %41 ?x #y.txt"
    c.upload("box", odd, "hello\n".encode())
    check(c.download("box", odd) == b"hello\n", "odd name round trip")
    ls = c.exec("box", "ls f").stdout
    check("ünï cöde %41 ?x #y.txt\n" in ls, "ls shows the name as given: %r" % ls)
    big = os.path.join(CTX.tmp, "big.up")
    with open(big, "wb") as f:
        for i in range(24):
            f.write(hashlib.sha256(b"%d" % i).digest() * 32768)
    sha = ahserver.sha256_file(big)
    with open(big, "rb") as f:
        j = c.upload("box", "f/a/b/big.bin", f, mode=0o640)
    check(j.get("size") == 24 << 20, "upload answer: %r" % j)
    check(c.exec("box", "sha256sum f/a/b/big.bin; stat -c %a f/a/b/big.bin").stdout.split()[::2] == [sha, "640"],
          "uploaded whole with its mode")
    sink = open(os.path.join(CTX.tmp, "big.down"), "wb")
    with sink:
        n = c.download("box", "f/a/b/big.bin", sink, chunk_size=65536)
    check(n == 24 << 20 and ahserver.sha256_file(sink.name) == sha, "downloaded whole")
    with c.open_download("box", "f/a/b/big.bin") as d:
        check(d.size == 24 << 20, "Content-Length: %r" % d.size)
        first = next(d.chunks(1000))
        check(len(first) == 1000, "a chunk of 1000")
    ents = {e.name: e for e in c.list_files("box", "f")}
    check(set(ents) == {"a", "ünï cöde %41 ?x #y.txt"} and ents["a"].type == "dir"
          and ents["ünï cöde %41 ?x #y.txt"].size == 6, "list: %r" % ents)
    check([e.name for e in c.list_files("box", "f/a/")] == ["b"], "a directory with a trailing /")
    t = c.tree("box", "f")
    check(sorted(e.path for e in t["entries"]) == ["f/a", "f/a/b", "f/a/b/big.bin", "f/ünï cöde %41 ?x #y.txt"],
          "tree: %r" % [e.path for e in t["entries"]])
    txt = c.read_text("box", odd)
    check(txt.content == "hello\n" and txt.size == 6 and not txt.truncated, "read_text: %r" % txt)
    for n in (1000, 40 << 20):          # refused before (1000) and while the body is sent (40 MiB)
        e = want_raise(ag.NotFound, c.upload, "box", "f/no/such/dir/x", io.BytesIO(b"z" * n))
        check(e.status == 404 and e.message, "an upload under a missing directory (%d bytes): %s" % (n, e))
    e = want_raise(ag.NotFound, c.download, "box", "f/nope")
    check(e.status == 404, "missing: %s" % e)
    c.exec("box", "ln -s /etc f/out")
    e = want_raise(ag.Forbidden, c.download, "box", "f/out/passwd")
    check(e.status == 403, "a symlink out: %s" % e)
    e = want_raise(ag.Conflict, c.remove, "box", "f/a")
    check(e.status == 409, "a non-empty directory: %s" % e)
    c.remove("box", "f/a", recursive=True)
    check("a" not in {x.name for x in c.list_files("box", "f")}, "removed")
    c.stop("box", wait=True)
    check(c.download("box", odd) == b"hello\n" and c.agent("box").state == "sleeping",
          "a sleeping agent's file read without waking it")
    e = want_raise(ag.Conflict, c.upload, "box", "f/w", b"x")
    check("sleeping" in e.message, "a write to a sleeping agent: %s" % e.message)
    c.start("box", wait=True)
    c.remove("box", "f", recursive=True)
    print("files: ok")


def terminal():
    c = client()
    ensure_box(c)
    with c.terminal("box", cols=90, rows=20) as t:
        t.send("stty size; echo marker-$((40 + 2))\n")
        t.read_until("marker-42")
        check(b"20 90" in t.output, "the size given: %r" % t.output[-300:])
        quiet = None
        for _ in range(50):                     # the prompt's output, then 0.3 s of nothing
            try:
                t.recv(timeout=0.3)
            except ag.Timeout as e:
                quiet = e
                break
        check(isinstance(quiet, TimeoutError), "recv on a quiet shell: a Timeout, a TimeoutError: %r" % quiet)
        want_raise(ag.Timeout, t.read_until, "never-printed", timeout=0.5)
        t.send("echo alive-$((1 + 2))\n")
        t.read_until("alive-3")                  # the terminal goes on after a timeout
        want_raise(ag.ClientError, t.resize, "120", 33)
        t.resize(120, 33)
        t.send("stty size\n")
        t.read_until("33 120")
        t.send("exit 5\n")
        while t.recv(timeout=15) is not None:
            pass
        check(t.close_code == 1000 and "status 5" in (t.close_reason or ""),
              "the shell's end: %s %r" % (t.close_code, t.close_reason))
        e = want_raise(ag.TransportError, t.send, "x")
    info = c.create_terminal("box", cols=80, rows=24, title="kept")
    check(re.fullmatch(r"t[0-9a-f]{12}", info.id) and info.title == "kept", "created: %r" % info)
    with c.terminal("box", terminal=info.id) as t:
        t.send("echo attached-$((3 * 3))\n")
        t.read_until("attached-9")
    lst = c.terminals("box")
    check([x.id for x in lst] == [info.id] and lst[0].state == "running", "still there: %r" % lst)
    scr = ahserver.wait_until(lambda: "attached-9" in (c.get_terminal("box", info.id).screen or ""), 10,
                              "the screen shows the output", Fail)
    check(scr, "screen")
    d = c.delete_terminal("box", info.id)
    check(d.get("ended") is True, "deleted: %r" % d)
    e = want_raise(ag.NotFound, c.get_terminal, "box", info.id)
    check("has no terminal" in e.message, "gone: %s" % e.message)
    e = want_raise(ag.APIError, c.terminal, "box", terminal="tnope")
    check(e.status == 400, "a malformed terminal id: %s" % e)
    e = want_raise(ag.NotFound, c.terminal, "nobody")
    check("no agent named 'nobody'" in e.message, "terminal of no agent: %s" % e)
    print("terminal: ok")


def conv():
    c = client()
    ensure_box(c)
    cv = c.create_conversation("box")
    check(isinstance(cv, ag.Conversation) and re.fullmatch(r"[0-9a-f]{16}", cv.id), "created: %r" % cv)
    with c.prompt("box", cv.id, "hello there") as turn:
        evs = list(turn)
    kinds = [e.kind for e in evs]
    check(kinds[0] == "turn" and kinds[-1] == "stop" and "update" in kinds
          and evs[-1].body.get("stopReason") == "end_turn", "the turn: %r" % kinds)
    check(evs[0].body.get("conversation") == cv.id, "turn names the conversation: %r" % evs[0].body)
    log = list(c.conversation_log("box", cv.id))
    check(log[0].kind == "prompt" and log[0].body.get("text") == "hello there" and log[0].who == "api:admin",
          "the prompt logged: %r" % log[0])
    check([e.seq for e in log[1:]] == [e.seq for e in evs[1:]], "the log holds the stream's entries: %r %r" %
          ([e.seq for e in log], [e.seq for e in evs]))
    page = c.conversation("box", cv.id, after=0, limit=1)
    check(len(page.entries) == 1 and page.next_after == page.entries[0].seq, "paged: %r" % page)
    lst = c.conversations("box")
    check([x.id for x in lst] == [cv.id] and lst[0].turn_state == "idle", "listed idle: %r" % lst)
    e = want_raise(ag.Conflict, c.cancel, "box", cv.id)
    check(e.status == 409, "cancel when idle: %s" % e)
    e = want_raise(ag.NotFound, c.answer_permission, "box", cv.id, 999, "allow")
    check(e.status == 404, "a permission never asked: %s" % e)
    want_raise(ag.ClientError, c.answer_permission, "box", cv.id, "1", "allow")
    e = want_raise(ag.NotFound, c.conversation, "box", "0123456789abcdef")
    check("no conversation" in e.message, "unknown conversation: %s" % e)
    # a permission the harness asks, answered through the API
    c.create_agent("permbox", wait=True)
    c.upload("permbox", "mode", b"permission\n")        # read by the harness at its start
    cp = c.create_conversation("permbox")
    evs = []
    with c.prompt("permbox", cp.id, "edit it") as turn:
        for ev in turn:
            evs.append(ev)
            if ev.kind == "permission":
                check([o["optionId"] for o in ev.body["options"]] == ["allow", "reject"], "offered: %r" % ev.body)
                e = want_raise(ag.APIError, c.answer_permission, "permbox", cp.id, ev.seq, "maybe")
                check(e.status == 400 and "not one the harness offered" in e.message, "an option not offered: %s" % e)
                r = c.answer_permission("permbox", cp.id, ev.seq, "allow")
                check(r.get("answered") is True and str(r.get("request")) == str(ev.seq), "answered: %r" % r)
    ans = [e for e in evs if e.kind == "permission_answer"]
    check(len(ans) == 1 and ans[0].body.get("optionId") == "allow" and ans[0].body.get("decided_by") == "api",
          "the answer logged: %r" % [(e.kind, e.body) for e in evs])
    said = " ".join(json.dumps(e.body) for e in evs if e.kind == "update")
    check("allow" in said and evs[-1].kind == "stop", "the harness got the answer: %r" % said[:300])
    c.destroy("permbox", wait=True)
    c.create_agent("plainbox", runtime="plain", wait=True)
    cp = c.create_conversation("plainbox")
    e = want_raise(ag.Conflict, c.prompt, "plainbox", cp.id, "hi")
    check("names no harness" in e.message, "no harness: %s" % e)
    c.destroy("plainbox", wait=True)
    print("conv: ok")


def sessions():
    c = client()
    s = c.open_session("run", subject="job-42 ü", backend="ci", wait=True)
    check(isinstance(s, ag.Session) and s.created is True and s.state == "live" and s.agent is not None
          and s.agent.state == "running" and s.subject == "job-42 ü", "opened: %r" % s)
    s2 = c.open_session("run", subject="job-42 ü", backend="ci")
    check(s2.id == s.id and s2.created is False, "attached: %r" % s2)
    check(s.id in [x.id for x in c.sessions()], "listed")
    check(c.session(s.id).agent.id == s.agent.id, "get")
    check(c.reopen_session(s.id).id == s.id, "reopen")
    d = c.close_session(s.id)
    check(d.get("closed") is True, "closed: %r" % d)
    e = want_raise(ag.APIError, c.reopen_session, s.id)
    check(e.status == 410, "a closed session: %s" % e)
    e = want_raise(ag.NotFound, c.session, "nope")
    check(e.status == 404, "unknown session: %s" % e)
    e = want_raise(ag.APIError, c.open_session, "galaxy", subject="x")
    check(e.status == 400, "a bad scope: %s" % e)
    print("sessions: ok")


def tenants():
    c = client()
    ensure_box(c)
    t = c.create_tenant("globex", max_running=2)
    check(isinstance(t, ag.Tenant) and t.name == "globex" and t.max_running == 2, "created: %r" % t)
    check("globex" in [x.name for x in c.tenants()], "listed")
    check(c.update_tenant("globex", max_running=3, egress_allow=["example.org"]).max_running == 3, "updated")
    check(c.get_tenant("globex").egress_allow == ["example.org"], "get")
    e = want_raise(ag.Conflict, c.create_tenant, "globex")
    check("exists already" in e.message, "taken: %s" % e)
    tok = c.create_token(tenant="globex", name="gx-bot", user="bot@globex.example", expires="1d")
    check(isinstance(tok, ag.Token) and len(tok.token or "") == 64 and tok.tenant == "globex"
          and tok.expires_at, "token: %r" % tok)
    listed = {x.name: x for x in c.tokens()}
    check("gx-bot" in listed and listed["gx-bot"].token is None and listed["gx-bot"].user == "bot@globex.example",
          "tokens listed, never the secret")
    gx = c.with_token(tok.token)
    me = gx.me()
    check(me["tenant"] == "globex" and me["admin"] is False and me["token"] == "gx-bot", "me: %r" % me)
    gx.create_agent("gx1")
    check([a.name for a in gx.agents()] == ["gx1"], "its own agents only")
    check([a.name for a in c.scoped("globex").agents()] == ["gx1"], "the admin scoped to it")
    e = want_raise(ag.NotFound, gx.agent, "box")
    check(e.message == "no agent named 'box'", "another tenant's agent: %s" % e.message)
    e = want_raise(ag.Forbidden, gx.tenants)
    check("admin" in e.message, "admin route: %s" % e.message)
    e = want_raise(ag.Forbidden, gx.scoped("default").agents)
    check("globex" in e.message, "another tenant's scope: %s" % e.message)
    e = want_raise(ag.Conflict, c.delete_tenant, "globex")
    check("still holds" in e.message, "a tenant with sandboxes: %s" % e.message)
    r = c.revoke_token("gx-bot")
    check(r.get("revoked") is True, "revoked: %r" % r)
    e = want_raise(ag.AuthError, gx.agents)
    check("was revoked" in e.message and e.status == 401, "revoked token: %s" % e.message)
    r = c.delete_tenant("globex", force=True)
    check(r.get("removed") is True, "removed: %r" % r)
    want_raise(ag.NotFound, c.get_tenant, "globex")
    print("tenants: ok")


def events():
    c = client()
    ensure_box(c)
    seen = []
    with c.events(agent="box", timeout=30) as stream:
        c.stop("box")
        for ev in stream:
            check(isinstance(ev, ag.Event) and ev.name == "box", "an event of box: %r" % ev)
            seen.append(ev.state)
            if ev.state == "sleeping":
                break
    check("stopping" in seen and seen[-1] == "sleeping", "states: %r" % seen)
    # an admin's stream of every agent sees another's too
    with c.events(timeout=30) as stream:
        c.start("box")
        states = []
        for ev in stream:
            states.append((ev.name, ev.state))
            if ev.state == "running":
                break
    check(("box", "running") in states, "every agent's stream: %r" % states)
    with c.events(agent="box", timeout=1) as stream:
        want_raise(ag.Timeout, list, stream)           # nothing happens to box meanwhile
    want_raise(ag.Timeout, c.wait_state, "box", "error", timeout=0.5)
    e = want_raise(ag.NotFound, c.events, agent="nobody")
    check(e.status == 404, "events of no agent: %s" % e)
    print("events: ok")


def hostile():
    c = client()
    ensure_box(c)
    for bad in ("a/b", "..", ".", "", "x\ny", "tab\there", "\x85"):
        for fn in (c.agent, c.start, c.destroy, c.list_files):
            e = want_raise(ag.ClientError, fn, bad)
            check(isinstance(e, ValueError) and str(e), "a ValueError naming it: %s" % e)
        want_raise(ag.ClientError, c.get_tenant, bad)
        want_raise(ag.ClientError, c.revoke_token, bad)
        want_raise(ag.ClientError, c.session, bad)
    for bad in (None, 7, b"box", ["box"]):
        want_raise(ag.ClientError, c.agent, bad)
    for bad in ("ünïcode", "Box", "a" * 64, "0123456789ab", "a%2Fb"):
        e = want_raise(ag.APIError, c.agent, bad)
        check(e.status in (400, 404) and e.message, "the server's refusal of %r: %s" % (bad, e))
    e = want_raise(ag.APIError, c.create_agent, "ünï")
    check(e.status == 400 and "name" in e.message, "a unicode name at create: %s" % e)
    e = want_raise(ag.APIError, c.create_agent, "a/b")
    check(e.status == 400, "a '/' in a created name: %s" % e)
    e = want_raise(ag.APIError, c.create_agent, "x" * 100000)
    check(e.status in (400, 413), "a huge name: %s" % e)
    e = want_raise(ag.APIError, c.create_tenant, "Ünï")
    check(e.status == 400, "a unicode tenant: %s" % e)
    e = want_raise(ag.APIError, c.open_session, "run", subject="bad\u009bsubject")
    check(e.status == 400 and "control character" in e.message, "a C1 character: %s" % e)
    for bad in ("../x", "a/../b", "/etc/passwd", "a//b", "./a", "a/.", "", "a\x00b", "x" * 300, "a/"):
        want_raise(ag.ClientError, c.download, "box", bad)
        want_raise(ag.ClientError, c.upload, "box", bad, b"x")
    for bad in ("..", "/", "a/../b"):
        want_raise(ag.ClientError, c.list_files, "box", bad)
        want_raise(ag.ClientError, c.exec, "box", "true", cwd=bad)
    want_raise(ag.ClientError, c.agent, "a\ud800")
    want_raise(ag.ClientError, c.download, "box", "f\udcff")
    e = want_raise(ag.ClientError, c.exec, "box", "true", env={"A": b"bytes"})
    check("cannot be JSON" in str(e), "bytes in a body: %s" % e)
    want_raise(ag.ClientError, c.exec, "box", "true", timeout=float("nan"))
    want_raise(ag.ClientError, c.update_agent, "box", cpus={1, 2})
    e = want_raise(ag.APIError, c.open_session, "run", subject="lone \ud800 surrogate")
    check(e.status == 400, "a lone surrogate in a body: the server's 400: %s" % e)
    for tok in ("tök", "a b", "", "x\x7f"):
        want_raise(ag.ClientError, ag.Client, "http://127.0.0.1:1", tok)
    want_raise(ag.ClientError, c.upload, "box", "x", "a str, not bytes")
    want_raise(ag.ClientError, c.exec, "box", ["ls"])
    check(c.exec("box", "ls /home/agent/x 2>/dev/null; echo $?").stdout.strip() != "0", "nothing was written")
    e = want_raise(ag.AuthError, c.with_token("f" * 64).agents)
    check(e.status == 401 and "bearer token" in e.message, "a wrong token: %s" % e)
    want_raise(ag.ClientError, ag.Client, "ftp://x", "t")
    want_raise(ag.ClientError, ag.Client, "http://127.0.0.1:1/api", "t")
    want_raise(ag.ClientError, ag.Client, "http://127.0.0.1:1", "t\r\nX: y")
    dead = ahserver.free_port(fail=Fail)
    e = want_raise(ag.TransportError, ag.Client("http://127.0.0.1:%d" % dead, "t").agents)
    check(isinstance(e, OSError), "TransportError is an OSError")
    check(ag.Client("http://127.0.0.1:%d" % dead, "t").healthz() is False, "healthz of nobody: False")
    # a server that answers what this client cannot read
    fakes = []
    try:
        f = ahserver.CannedServer(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        fakes.append(f)
        fc = ag.Client("http://127.0.0.1:%d" % f.port, "t")
        want_raise(ag.ProtocolError, fc.agents)
        f = ahserver.CannedServer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]")
        fakes.append(f)
        want_raise(ag.ProtocolError, ag.Client("http://127.0.0.1:%d" % f.port, "t").agent, "x")
        want_raise(ag.ProtocolError, ag.Client("http://127.0.0.1:%d" % f.port, "t").agents)
        f = ahserver.CannedServer(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
        fakes.append(f)
        want_raise(ag.StreamError, ag.Client("http://127.0.0.1:%d" % f.port, "t").download, "a", "x")
        f = ahserver.CannedServer(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n\x01\x00\x00\x00\x10abcd")
        fakes.append(f)
        s = ag.Client("http://127.0.0.1:%d" % f.port, "t").exec_stream("a", "x")
        want_raise(ag.StreamError, s.wait)
        f = ahserver.CannedServer(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n\x07\x00\x00\x00\x00\x04\x00\x00")
        fakes.append(f)
        s = ag.Client("http://127.0.0.1:%d" % f.port, "t").exec_stream("a", "x")
        want_raise(ag.ProtocolError, s.wait)
        f = ahserver.CannedServer(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 9\r\n\r\nnot json!")
        fakes.append(f)
        e = want_raise(ag.APIError, ag.Client("http://127.0.0.1:%d" % f.port, "t").agents)
        check(e.status == 502 and e.message == "not json!", "a non-JSON error: %r" % e.message)
        f = ahserver.CannedServer(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       b"Sec-WebSocket-Accept: forged\r\n\r\n")
        fakes.append(f)
        want_raise(ag.ProtocolError, ag.Client("http://127.0.0.1:%d" % f.port, "t").terminal, "a")
        f = ahserver.CannedServer(b"garbage\r\n\r\n")
        fakes.append(f)
        want_raise(ag.Error, ag.Client("http://127.0.0.1:%d" % f.port, "t").agents)
        want_raise(ag.ProtocolError, ag.Client("http://127.0.0.1:%d" % f.port, "t").terminal, "a")
        f = ahserver.CannedServer(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: {not json\n\n")
        fakes.append(f)
        with ag.Client("http://127.0.0.1:%d" % f.port, "t").events() as s:
            want_raise(ag.ProtocolError, list, s)
        # the CLI's hostile answers (e2e.cli_hostile_server): each an agenthold.Error within seconds
        sys.path.insert(0, os.path.join(CTX.src, "tests", "e2e"))
        import e2e_cli_hostile_server as hs
        for name, (answer, _) in hs.CASES.items():
            f = ahserver.CannedServer(answer)
            fakes.append(f)
            hc = ag.Client("http://127.0.0.1:%d" % f.port, "t", timeout=10)
            hc.max_answer = 16 << 20
            t0 = time.monotonic()
            want_raise(ag.Error, hc.agents)
            check(time.monotonic() - t0 < 10, "%s: answered within 10 s" % name)
    finally:
        for f in fakes:
            f.close()
    check(c.agent("box").state == "running", "the server is unharmed")
    print("hostile: ok")


def tls():
    key, cert = os.path.join(CTX.tmp, "tls.key"), os.path.join(CTX.tmp, "tls.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    s = ahlocal.Local(CTX, "tls", {"AGENTHOLD_SERVER_TLS_CERT": cert, "AGENTHOLD_SERVER_TLS_KEY": key})
    s.proc = ahserver.serve(CTX.bin, s.env, CTX.log, cwd=CTX.src, procs=CTX.procs, fail=Fail,
                            ready=r"listening on https://")
    s.admin = ahserver.read_token(s.data)
    url = "https://127.0.0.1:%d" % s.port
    c = ag.Client(url, s.admin, ssl_context=ssl.create_default_context(cafile=cert))
    check(c.me()["admin"] is True and c.healthz(), "https: me")
    c.create_agent("sec", wait=True)
    with c.exec_stream("sec", "echo over-tls") as st:
        check(b"".join(r.data for r in st) == b"over-tls\n" and st.exit.status == 0, "https: exec stream")
    c.upload("sec", "t.bin", b"\x00\xff" * 100000)
    check(c.download("sec", "t.bin") == b"\x00\xff" * 100000, "https: files")
    with c.terminal("sec") as t:
        t.send("echo wss-$((5 * 5))\n")
        t.read_until("wss-25")
    with c.events(agent="sec", timeout=30) as ev:
        c.stop("sec")
        check(any(e.state == "sleeping" for e in ev), "https: events")
    e = want_raise(ag.TransportError, ag.Client(url, s.admin).agents)
    check("certificate" in str(e).lower(), "an untrusted certificate: %s" % e)
    e = want_raise(ag.TransportError, ag.Client(url, s.admin).terminal, "sec")
    check("certificate" in str(e).lower(), "wss with an untrusted certificate: %s" % e)
    e = want_raise(ag.TransportError, ag.Client("http://127.0.0.1:%d" % s.port, s.admin).agents)
    c.destroy("sec", wait=True)
    s.stop()
    print("tls: ok")


def run_blocks(blocks, what, env):
    """The blocks run in order in one interpreter (each sees what the
    earlier made); a failure names the block and its first line."""
    prog = ("import sys, traceback\nsys.path.insert(0, %r)\nblocks = %r\ng = {'__name__': '__main__'}\n"
            "for i, b in enumerate(blocks):\n"
            "    try:\n        exec(compile(b, '%s block %%d' %% (i + 1), 'exec'), g)\n"
            "    except BaseException:\n        traceback.print_exc()\n"
            "        print('FAILED in block %%d: %%s' %% (i + 1, b.splitlines()[0]), file=sys.stderr)\n"
            "        sys.exit(1)\nprint('%%d blocks ran' %% len(blocks))\n") % (SITE, blocks, what)
    p = subprocess.run([PY, "-c", prog], env=env, capture_output=True, text=True, timeout=300, cwd=CTX.tmp)
    check(p.returncode == 0, "%s: the examples failed:\n%s\n%s" % (what, p.stdout[-2000:], p.stderr[-4000:]))
    return p.stdout


def docs():
    s = server()
    env = dict(os.environ, AGENTHOLD_URL="http://127.0.0.1:%d" % s.port, AGENTHOLD_TOKEN=s.admin)
    env.pop("PYTHONPATH", None)
    with open(os.path.join(CTX.src, "clients", "python", "README.md")) as f:
        blocks = re.findall(r"^```python\n(.*?)^```", f.read(), re.S | re.M)
    check(len(blocks) >= 9, "the client's README has its examples: %d" % len(blocks))
    out = run_blocks(blocks, "clients/python/README.md", env)
    check("%d blocks ran" % len(blocks) in out, "all ran: %r" % out[-300:])
    check("refused: path '../etc/passwd' has a '..' component" in out, "the refusal printed: %r" % out[-800:])
    check("404 no agent named 'demo'" in out, "the other tenant's 404 printed")
    c = client()
    check("demo" not in [a.name for a in c.agents()], "the examples cleaned up after themselves")
    with open(os.path.join(CTX.src, "README.md")) as f:
        text = f.read()
    top = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    check(len(top) == 1, "README.md has one Python example: %d" % len(top))
    run_blocks(top, "README.md", env)
    check("readme" not in [a.name for a in c.agents()], "the README's example cleaned up")
    print("docs: %d + %d examples ran" % (len(blocks), len(top)))


SCENARIOS = [("types", types), ("agents", agents), ("exec", exec_), ("files", files), ("terminal", terminal), ("conv", conv),
             ("sessions", sessions), ("tenants", tenants), ("events", events), ("hostile", hostile),
             ("tls", tls), ("docs", docs)]


def main():
    install()
    for name, fn in SCENARIOS:
        if not CTX.only or name in CTX.only:
            t0 = time.monotonic()
            fn()
            print("  (%s: %.1f s)" % (name, time.monotonic() - t0))
    print("client.python: %d checks passed" % check.count)


if __name__ == "__main__":
    sys.exit(ahserver.run(main, Fail, CTX.procs, CTX.tmp, CTX.log))
