#!/usr/bin/python3
"""tests/docker/homeread_docker.py: a sleeping agent's files on the Docker
driver, read without waking it.

The real server on the host (docker driver, the test image, pool
10.213.216.0/22, ports from ahserver.free_port). An agent writes files and plants
symlinks that point out of its home (absolute, `..` chains, a
/proc/self/root magic link) through exec, as its own user; the test adds a
device file and a FIFO in the home directory from the host (a sandbox
running without CAP_MKNOD cannot). Then the agent is stopped, and while
the Engine API shows its container stopped throughout (`docker ps` empty
for it, StartedAt unchanged after every request):

  - the home volume is a local volume bound to <data>/homes/<id>
  - the files are listed, read (a 3 MiB file whole) and shown as a tree
  - each planted link is refused (403) on read, list and tree, the device
    and the FIFO are refused (400), `..` and absolute paths are 400
  - writes are 409 naming the state
  - a home without its directory under homes/ (an earlier install's
    volume, simulated by moving the directory aside) answers 409 as
    before, and reads again once it is back
  - running, with that directory moved aside, the tree is sandboxd's
    (fs.tree) and equals the server's own tree of the same home, with
    all, a subdirectory, and the planted links refused
  - the home's directory removed behind the server's back (its volume
    still there): the agent's home is reported lost (home_lost), found by
    the start (which fails saying so; the next start makes it again) or
    by the stop's engine events looked at after the removal (the start
    then makes it again); either way its home is there again, empty
  - rm removes the home's files from <data>/homes

usage: homeread_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine."""
import hashlib
import json
import os
import shutil
import stat
import sys
import urllib.parse

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import Harness, engine, q  # noqa: E402
import ahserver  # noqa: E402

h = Harness("docker.homeread", sys.argv[1], "10.213.216.0/22")
NAME = "reader"


def raw(method, path, body=None):
    return ahserver.request(h.port(), method, path, body, h.token(), None, 120)


def fs(route, path, **args):
    args["path"] = path
    return "/api/v1/agents/%s/%s?%s" % (NAME, route, urllib.parse.urlencode(args))


def scenario(h):
    h.start_server()
    a = h.cli("create", NAME)
    h.check(a["state"] == "running", "create -> running: %r" % a)
    aid = a["id"]
    home = os.path.join(h.data, "homes", aid)
    st, vol = engine("GET", "/volumes/%s-home-%s" % (h.prefix, aid))
    h.check(st == 200 and vol["Driver"] == "local"
            and vol["Options"] == {"type": "none", "o": "bind", "device": home},
            "the home volume is bound to %s: %r" % (home, vol))

    big = os.urandom(3 << 20)
    st, _ = raw("PUT", fs("fs/file", "big.bin"), big)
    h.check(st == 200, "upload 3 MiB: %d" % st)
    st, r = h.api("POST", "/api/v1/agents/%s/exec" % NAME, {"cmd": " && ".join([
        "mkdir -p notes deep/a/b/c node_modules/left-pad .git uploads",
        "echo 'buy milk' > notes/todo.txt", "echo doc > uploads/brief.txt",
        "ln -s /etc/passwd passwd", "ln -s /etc abs", "ln -s ../../../../../../.. up",
        "ln -s notes/../../../../etc sneaky", "ln -s /proc/self/root proc",
        "ln -s notes inner", "id -u"])})
    h.check(st == 200 and r["status"] == 0, "the agent planted its files: %d %r" % (st, r))
    agent_uid = int(r["stdout"].strip())
    h.check(os.lstat(os.path.join(home, "notes", "todo.txt")).st_uid == agent_uid,
            "the agent's files are in %s, owned by its uid %d" % (home, agent_uid))

    h.check(h.cli("stop", NAME)["state"] == "sleeping", "stop -> sleeping")
    c = h.container(aid)
    h.check(not c["State"]["Running"], "the container is stopped")
    started = c["State"]["StartedAt"]
    os.mknod(os.path.join(home, "zero"), 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    os.mkfifo(os.path.join(home, "fifo"))

    def still_stopped(after):
        c = h.container(aid)
        ps = engine("GET", "/containers/json?filters=" + q(json.dumps(
            {"name": ["%s-%s" % (h.prefix, aid)]})))[1]
        h.check(not c["State"]["Running"] and c["State"]["StartedAt"] == started and not ps,
                "the container stayed stopped after %s: %s, started %s (was %s), docker ps %r"
                % (after, c["State"]["Status"], c["State"]["StartedAt"], started, ps))

    st, body = raw("GET", fs("files", "."))
    names = [e["name"] for e in json.loads(body)["entries"]] if st == 200 else []
    h.check(st == 200 and {"notes", "big.bin", "passwd", "zero", "fifo"} <= set(names)
            and "node_modules" not in names and ".git" not in names,
            "the sleeping agent's home listed: %d %r" % (st, names))
    still_stopped("the listing")
    st, body = raw("GET", "/api/v1/agents/%s/files/notes/todo.txt" % NAME)
    h.check(st == 200 and body == b"buy milk\n", "a file read: %d %r" % (st, body[:80]))
    st, body = raw("GET", fs("fs/file", "big.bin"))
    h.check(st == 200 and hashlib.sha256(body).digest() == hashlib.sha256(big).digest(),
            "3 MiB read whole: %d, %d bytes" % (st, len(body)))
    st, body = raw("GET", fs("fs/file", "inner/todo.txt"))
    h.check(st == 200 and body == b"buy milk\n", "a link inside the home is followed: %d" % st)
    still_stopped("the reads")
    st, body = raw("GET", "/api/v1/agents/%s/tree" % NAME)
    t = json.loads(body) if st == 200 else {}
    paths = {e["path"]: e for e in t.get("entries", [])}
    h.check(st == 200 and "deep/a/b/c" in paths and "notes/todo.txt" in paths
            and paths["uploads/brief.txt"].get("uploaded") and paths["abs"]["type"] == "link"
            and not any(p.startswith(("node_modules", ".git", "abs/", "up/", "proc/")) for p in paths),
            "the tree of the sleeping agent: %d %r" % (st, sorted(paths)))
    still_stopped("the tree")

    for path in ("passwd", "abs/passwd", "up/etc/passwd", "sneaky/passwd", "proc/etc/passwd"):
        st, body = raw("GET", fs("fs/file", path))
        h.check(st == 403 and b"escapes the home" in body and b"root:" not in body,
                "read %s through a planted link: %d %r" % (path, st, body[:200]))
    for path in ("abs", "up", "sneaky", "proc"):
        for route in ("fs/list", "tree"):
            st, body = raw("GET", fs(route, path))
            h.check(st == 403 and b"escapes the home" in body,
                    "%s %s: %d %r" % (route, path, st, body[:200]))
    for path in ("zero", "fifo"):
        st, body = raw("GET", fs("fs/file", path))
        h.check(st == 400 and b"not a regular file" in body, "%s refused: %d %r" % (path, st, body[:200]))
    for path in ("../etc/passwd", "notes/../../x", "/etc/passwd", "%s/../../../etc" % aid):
        for route in ("fs/file", "fs/list", "tree"):
            st, body = raw("GET", fs(route, path))
            h.check(st == 400 and b"root:" not in body, "%s %s: %d %r" % (route, path, st, body[:200]))
    still_stopped("the refusals")

    for method, path in (("PUT", fs("fs/file", "new.txt")), ("DELETE", fs("fs/file", "big.bin")),
                         ("POST", fs("fs/mkdir", "d"))):
        st, body = raw(method, path, b"x" if method == "PUT" else None)
        h.check(st == 409 and b"is sleeping" in body, "%s on a sleeping agent: %d %r" % (method, st, body))
    still_stopped("the refused writes")

    # An earlier install's home: no directory under homes/ for it.
    aside = home + ".aside"
    os.rename(home, aside)
    try:
        st, body = raw("GET", fs("files", "."))
        h.check(st == 409 and b"is sleeping" in body, "a home without its directory: 409 as before: %d %r"
                % (st, body))
        st, body = raw("GET", fs("tree", "."))
        h.check(st == 409 and b"not a directory the server reads" in body, "its tree: %d %r" % (st, body))
    finally:
        os.rename(aside, home)
    st, _ = raw("GET", fs("files", "."))
    h.check(st == 200, "read again once the directory is back: %d" % st)
    still_stopped("everything")
    h.check(h.cli("show", NAME)["state"] == "sleeping", "the agent sleeps on")

    # Running, with a home the server does not reach (its directory moved
    # aside; the container still holds its bind): the tree is sandboxd's
    # (fs.tree), and it is the server's own tree, field for field.
    h.check(h.cli("start", NAME)["state"] == "running", "start")
    mine = {}
    for query in ("", "?all=true", "?path=deep", "?path=notes/"):
        st, body = raw("GET", "/api/v1/agents/%s/tree%s" % (NAME, query))
        h.check(st == 200, "the server's tree%s of the running agent: %d %r" % (query, st, body[:200]))
        mine[query] = json.loads(body)
    os.rename(home, aside)
    try:
        for query, want in mine.items():
            st, body = raw("GET", "/api/v1/agents/%s/tree%s" % (NAME, query))
            got = json.loads(body) if st == 200 else body
            h.check(st == 200 and got == want,
                    "sandboxd's tree%s is the server's: %d\n%r\n%r" % (query, st, got, want))
        h.check(len(mine[""]["entries"]) > 10 and len(mine["?all=true"]["entries"]) > len(mine[""]["entries"]),
                "trees of some size: %d, all %d" % (len(mine[""]["entries"]), len(mine["?all=true"]["entries"])))
        for path in ("abs", "up", "sneaky", "proc"):
            st, body = raw("GET", fs("tree", path))
            h.check(st == 403, "sandboxd's tree of %s refused: %d %r" % (path, st, body[:200]))
        for path in ("../etc", "/etc", "notes/../../x"):
            st, body = raw("GET", fs("tree", path))
            h.check(st == 400, "tree %s: %d %r" % (path, st, body[:200]))
        st, body = raw("GET", fs("tree", "big.bin"))
        h.check(st == 409, "the tree of a file: %d %r" % (st, body[:200]))
    finally:
        os.rename(aside, home)
    h.check(h.cli("stop", NAME)["state"] == "sleeping", "stop")

    # The home's directory removed behind the server's back, its volume
    # still there (no event of its own): the loss is recorded and a start
    # begins with an empty home (tests/docker/homelost_docker.py).
    shutil.rmtree(home)
    _, vol = engine("GET", "/volumes/%s-home-%s" % (h.prefix, aid))
    h.check(vol and vol.get("Name"), "the volume is still there: %r" % vol)
    p = h.cli_raw("start", NAME)
    a = h.cli("show", NAME)
    # Two orders, both right: the engine's events of the stop (looked at
    # by the reconciler, which may come after the removal above on a busy
    # machine) found the home gone first: the loss was recorded and the
    # sleeping row put in error then, so this start made it again (state
    # running); or the start found it: it failed, recorded the loss, and
    # the next start makes it again.
    h.check(a["home_lost"] and "its home directory is gone" in a["home_lost"],
            "its home is reported lost: %r" % a)
    if a["state"] == "error":
        h.check("home directory is gone" in (a["error"] or ""),
                "the start says the home's directory is gone: %r (start: %s)" % (a, p.stderr))
        h.check(h.cli("start", NAME)["state"] == "running", "the next start makes it again")
    else:
        h.check(p.returncode == 0 and a["state"] == "running",
                "the loss was seen first from the stop's events: the start made it again: %r (start: %s)"
                % (a, p.stderr))
        print("the stop's events saw the home gone before the start did (both orders are checked)")
    h.check(os.path.isdir(home) and not os.path.exists(os.path.join(home, "big.bin")),
            "its home directory is there again, without the old files")
    h.check(h.cli("rebuild", NAME)["state"] in ("running", "starting"), "a rebuild")
    h.wait_state(NAME, "running", 60)
    h.check(h.cli("show", NAME)["home_lost"], "the loss stays on the record")

    h.check(h.cli("rm", NAME)["state"] == "destroyed", "rm")
    h.check(not os.path.lexists(home), "rm removed the home's files from %s" % home)
    h.check(os.path.exists("/etc/passwd"), "and nothing the links pointed at")


sys.exit(h.run(scenario))
