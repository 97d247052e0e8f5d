#!/usr/bin/python3
"""tests/e2e/e2e_homeread.py: reading a home without waking its sandbox,
on the real `agenthold serve` with the fake driver (its home is
<data>/fake/<id>/home; temporary data directory; ports from ahserver.free_port).

  sleeping   a stopped agent's files listed and read while its state stays
             sleeping (no start in its audit trail); writes still 409
  tree       a home of 10,000 files on 9 levels: 2,000 entries, 6 levels,
             both limits reported; node_modules and .git (and the
             product's own names) absent and not counted unless ?all=true;
             an unreadable directory skipped and the listing marked
             incomplete; uploads/ marked as put there by a person
  hostile    symlinks planted in the home (absolute, `..` chains, a link to
             /proc/self/root), a FIFO and a device file: refused on the
             direct path (read, list, tree), nothing outside the home
             shown; hostile paths on the tree route (control characters,
             encoded, `..`, absolute, empty components, over-long)
  running    the tree of a running agent, and its sandboxd listing with the
             same names left out and uploads marked
  cli        agenthold fs tree AGENT [PATH] (--all, --json)
  allfiles   GET /api/v1/files: a tenant's files across its agents, newest
             first, grouped by agent and session (access_label,
             owner_name), uploads/ and name filters, limits said; a user
             session's files its person's alone; tenants apart; hostile
             queries 400; nothing started

When run as root the server runs without CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH (setpriv), so a directory of mode 000 is unreadable to
it as it would be to an unprivileged server.

usage: e2e_homeread.py AGENTHOLD_BINARY [SCENARIO...]
Always kills what it started and removes its temporary directory."""
import json
import os
import shutil
import stat
import subprocess
import sys
import time
import urllib.parse

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahlocal  # noqa: E402
import ahserver  # noqa: E402

CTX = ahlocal.context("ah-e2e-homeread-")
BIN, ONLY, TMP, Fail, check = CTX.bin, CTX.only, CTX.tmp, CTX.fail, CTX.check
SRV = ahlocal.Local(CTX, "main")
DATA, API_PORT, ENV = SRV.data, SRV.port, SRV.env


def token():
    return ahserver.read_token(DATA)


def request(method, path, body=None, timeout=60):
    return ahserver.request(API_PORT, method, path, body, token(), None, timeout)


def api(method, path, body=None, expect=200, timeout=60):
    return ahserver.call_json(API_PORT, token(), method, path, body, expect, check, timeout)


def q(s):
    return urllib.parse.quote(s, safe="")


def start_server():
    wrap = ()
    if os.geteuid() == 0:
        drop = "-dac_override,-dac_read_search"
        wrap = ("setpriv", "--bounding-set", drop, "--inh-caps", drop)
    SRV.start(wrap=wrap)


def create(name, running):
    _, a = api("POST", "/api/v1/agents?wait=1", {"name": name}, expect=None, timeout=120)
    check(a and a.get("id"), "create %s: %r" % (name, a))
    want = "running" if running else "sleeping"
    api("POST", "/api/v1/agents/%s/%s?wait=1" % (name, "start" if running else "stop"),
        expect=None, timeout=120)
    _, a = api("GET", "/api/v1/agents/" + name)
    check(a["state"] == want, "%s is %s, wanted %s" % (name, a["state"], want))
    return a["id"], os.path.join(DATA, "fake", a["id"], "home")


def state(name):
    return api("GET", "/api/v1/agents/" + name)[1]["state"]


def write(path, data=b"x"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


# ---------------------------------------------------------------------------

def s_sleeping():
    aid, home = create("sleepy", running=False)
    write(os.path.join(home, "notes", "todo.txt"), b"buy milk\n")
    write(os.path.join(home, "big.bin"), bytes(range(256)) * 8192)      # 2 MiB
    _, j = api("GET", "/api/v1/agents/sleepy/files?path=notes")
    check([e["name"] for e in j["entries"]] == ["todo.txt"] and j["entries"][0]["type"] == "file"
          and j["entries"][0]["size"] == 9, "the listing of a sleeping agent: %r" % j)
    st, raw = request("GET", "/api/v1/agents/sleepy/files/notes/todo.txt")
    check(st == 200 and raw == b"buy milk\n", "a sleeping agent's file read: %d %r" % (st, raw[:100]))
    st, raw = request("GET", "/api/v1/agents/sleepy/fs/file?path=big.bin")
    check(st == 200 and raw == bytes(range(256)) * 8192, "2 MiB read back whole: %d, %d bytes" % (st, len(raw)))
    st, raw = request("GET", "/api/v1/agents/sleepy/files/notes")
    check(st == 409 and b"is a directory" in raw, "reading a directory: %d %r" % (st, raw))
    st, raw = request("GET", "/api/v1/agents/sleepy/files/nope")
    check(st == 404, "a missing file: %d %r" % (st, raw))
    check(state("sleepy") == "sleeping", "reading did not wake the agent")
    for method, path in (("PUT", "/api/v1/agents/sleepy/files/new.txt"),
                         ("DELETE", "/api/v1/agents/sleepy/files/big.bin"),
                         ("POST", "/api/v1/agents/sleepy/files/d?op=mkdir")):
        st, raw = request(method, path, b"data" if method == "PUT" else None)
        check(st == 409 and b"is sleeping" in raw, "%s on a sleeping agent: %d %r" % (method, st, raw))
    check(os.path.exists(os.path.join(home, "big.bin")) and not os.path.exists(os.path.join(home, "new.txt")),
          "no write reached the home")
    #  The recorder writes the rows a moment after the answers: wait for
    #  them (the checks below say what is missing).
    last = {}

    def audited():
        _, last["ops"] = api("GET", "/api/v1/agents/sleepy/operations?limit=1000")
        last["kinds"] = [o["kind"] for o in last["ops"]["operations"]]
        return "fs.read" in last["kinds"] and "fs.list" in last["kinds"]
    ahserver.wait_until(audited, 5, "the reads in the audit trail", None)
    ops, kinds = last["ops"], last["kinds"]
    check("fs.read" in kinds and "fs.list" in kinds, "the reads are in the audit trail: %r" % kinds)
    starts = [o for o in ops["operations"] if o["kind"] in ("start", "wake")]
    check(len(starts) <= 1, "no start after the stop: %r" % starts)   # the create's own start at most
    check(state("sleepy") == "sleeping", "still sleeping at the end")


def build_deep(home):
    """10,000 files on 9 levels: levels 1-4 small, the depth-5 directory
    holds 2,500 files and a-lv6 (sorted first), levels 6-9 the rest."""
    n = 0
    d = home
    for level in range(1, 10):
        sub = os.path.join(d, "a-lv%d" % level)
        os.makedirs(sub)
        # files beside a-lvN inside d (d is at depth level-1)
        count = 2500 if level == 6 else 10 if level <= 5 else None
        if count is None:
            count = (10000 - n) // (10 - level) if level < 9 else 10000 - n
        for i in range(count):
            with open(os.path.join(d, "f%05d" % i), "wb"):
                pass
        n += count
        d = sub
    check(n == 10000, "the home holds 10,000 files: %d" % n)
    for hidden in ("node_modules/left-pad", ".git/objects", ".venv/lib", "__pycache__"):
        os.makedirs(os.path.join(home, hidden))
        for i in range(50):
            write(os.path.join(home, hidden, "h%02d" % i))
    write(os.path.join(home, ".agenthold-state"))
    write(os.path.join(home, ".report.txt.ah-0123abcd"))
    write(os.path.join(home, "uploads", "brief.pdf"), b"%PDF")
    locked = os.path.join(home, "locked")
    os.makedirs(locked)
    write(os.path.join(locked, "secret"))
    os.chmod(locked, 0)


def s_tree():
    aid, home = create("deep", running=False)
    build_deep(home)
    t0 = time.time()
    _, t = api("GET", "/api/v1/agents/deep/tree")
    took = time.time() - t0
    paths = [e["path"] for e in t["entries"]]
    depths = [e["depth"] for e in t["entries"]]
    print("tree of 10,000 files: %d entries in %.3f s" % (t["count"], took))
    check(t["count"] == 2000 and len(paths) == 2000, "2,000 entries: %d" % t["count"])
    check(max(depths) == 6 and t["max_depth"] == 6 and t["max_entries"] == 2000,
          "6 levels: deepest %d, %r" % (max(depths), {k: t[k] for k in ("max_depth", "max_entries")}))
    check(t["depth_limit_reached"] and t["entries_limit_reached"], "both limits reported: %r" %
          {k: t[k] for k in ("depth_limit_reached", "entries_limit_reached")})
    check(depths == sorted(depths), "breadth first: depths never go back up")
    check(paths[0] == "a-lv1", "sorted within a directory: %r" % paths[:3])
    for hidden in ("node_modules", ".git", ".venv", "__pycache__", ".agenthold-state", ".report.txt.ah-0123abcd"):
        check(not any(p == hidden or p.startswith(hidden + "/") or "/" + hidden in p for p in paths),
              "%s absent from the tree" % hidden)
    check("locked" in paths, "the unreadable directory is itself listed")
    check(t["incomplete"] and [s["path"] for s in t["skipped"]] == ["locked"]
          and "permission denied" in t["skipped"][0]["error"],
          "the unreadable directory skipped, the listing incomplete: %r" % t["skipped"])
    check(not any(p.startswith("locked/") for p in paths), "nothing under locked/")
    up = [e for e in t["entries"] if e["path"].startswith("uploads")]
    check(any(e["path"] == "uploads/brief.pdf" and e.get("uploaded") for e in up)
          and not any(e.get("uploaded") for e in up if e["path"] == "uploads"),
          "uploads/brief.pdf marked as put there by a person: %r" % up)
    # asked for: shown and counted
    _, a = api("GET", "/api/v1/agents/deep/tree?all=true")
    apaths = [e["path"] for e in a["entries"]]
    check("node_modules" in apaths and ".git" in apaths and "node_modules/left-pad" in apaths
          and ".agenthold-state" in apaths, "?all=true shows the toolchain folders")
    check(a["count"] == 2000 and len(apaths) == 2000, "and counts them within the same limit")
    hidden_depth2 = [p for p in apaths if p.startswith((".git/", "node_modules/", ".venv/", "__pycache__/"))]
    check(len(hidden_depth2) >= 2 + 50, "their entries count: %d" % len(hidden_depth2))
    # a subtree
    _, s = api("GET", "/api/v1/agents/deep/tree?path=a-lv1/a-lv2/")
    check(s["path"] == "a-lv1/a-lv2" and s["entries"][0]["path"] == "a-lv1/a-lv2/a-lv3"
          and s["entries"][0]["depth"] == 1, "a subtree names full paths, depth from it: %r" % s["entries"][:1])
    # the files listing leaves the same names out
    _, top = api("GET", "/api/v1/agents/deep/files?path=.")
    names = [e["name"] for e in top["entries"]]
    check("node_modules" not in names and ".git" not in names and "a-lv1" in names and "locked" in names,
          "the files listing leaves the toolchain out: %r" % names[:8])
    _, top = api("GET", "/api/v1/agents/deep/files?path=.&all=1")
    check("node_modules" in [e["name"] for e in top["entries"]], "...unless ?all")
    _, up = api("GET", "/api/v1/agents/deep/files?path=uploads")
    check(up["entries"][0].get("uploaded") is True, "a listing of uploads/ marks its entries: %r" % up)
    st, raw = request("GET", "/api/v1/agents/deep/files?path=locked")
    check(st == 403, "listing the unreadable directory itself: %d %r" % (st, raw))
    st, raw = request("GET", "/api/v1/agents/deep/tree?path=locked")
    check(st == 403 and b"permission denied" in raw, "a tree whose root refuses is an error: %d %r" % (st, raw))
    st, raw = request("GET", "/api/v1/agents/deep/tree?path=f00000")
    check(st in (404, 409), "a tree rooted at a file or nothing: %d %r" % (st, raw))
    st, raw = request("GET", "/api/v1/agents/deep/tree?path=a-lv1/f00000")
    check(st == 409 and b"not a directory" in raw, "a tree rooted at a file: %d %r" % (st, raw))
    check(state("deep") == "sleeping", "the tree did not wake it")
    os.chmod(os.path.join(home, "locked"), 0o700)


def s_hostile():
    aid, home = create("hostile", running=False)
    write(os.path.join(home, "sub", "ok.txt"), b"inside")
    links = {
        "abs": "/etc",                                  # absolute
        "passwd": "/etc/passwd",
        "up": "../../../../../../../../..",             # climbs out
        "sneaky": "sub/../../..",                       # climbs out through a real directory
        "proc": "/proc/self/root",                      # a magic link
        "inner": "sub",                                 # inside: followed
        "loop": "loop",
    }
    for name, target in links.items():
        os.symlink(target, os.path.join(home, name))
    os.mkfifo(os.path.join(home, "fifo"))
    if os.geteuid() == 0:
        os.mknod(os.path.join(home, "zero"), 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    secret = os.path.join(DATA, "fake", "outside-secret")
    write(secret, b"SECRET-OUTSIDE")
    A = "/api/v1/agents/hostile"
    for path in ("abs/passwd", "passwd", "up/etc/passwd", "sneaky/outside-secret", "proc/etc/passwd",
                 "abs", "up"):
        st, raw = request("GET", A + "/fs/file?path=" + q(path))
        check(st in (403, 400) and b"root:" not in raw and b"SECRET" not in raw,
              "read %s through a planted link: %d %r" % (path, st, raw[:200]))
    for path in ("abs", "up", "sneaky", "proc"):
        st, raw = request("GET", A + "/fs/list?path=" + q(path))
        check(st == 403 and b"escapes the home" in raw, "list %s: %d %r" % (path, st, raw[:200]))
        st, raw = request("GET", A + "/tree?path=" + q(path))
        check(st == 403 and b"escapes the home" in raw, "tree %s: %d %r" % (path, st, raw[:200]))
    st, raw = request("GET", A + "/fs/file?path=loop")
    check(st == 403, "a symlink loop: %d %r" % (st, raw[:200]))
    st, raw = request("GET", A + "/fs/file?path=inner/ok.txt")
    check(st == 200 and raw == b"inside", "a link inside the home is followed: %d %r" % (st, raw))
    t0 = time.time()
    st, raw = request("GET", A + "/fs/file?path=fifo", timeout=10)
    check(st == 400 and b"not a regular file" in raw and time.time() - t0 < 5,
          "a FIFO is refused at once: %d %r" % (st, raw[:200]))
    if os.geteuid() == 0:
        st, raw = request("GET", A + "/fs/file?path=zero", timeout=10)
        check(st == 400 and b"not a regular file" in raw, "a device file is refused: %d %r" % (st, raw[:200]))
    _, t = api("GET", A + "/tree")
    ents = {e["path"]: e for e in t["entries"]}
    check(ents["abs"]["type"] == "link" and ents["up"]["type"] == "link" and "inner/ok.txt" not in ents,
          "the tree lists links and never descends them: %r" % sorted(ents))
    check(not any("passwd/" in p or p.startswith("abs/") for p in ents), "nothing outside the home listed")
    check(not t["incomplete"], "links are not skipped directories: %r" % t["skipped"])
    # hostile paths on the tree route
    for path in ("..", "../x", "sub/../..", "%2e%2e", "%2e%2e%2fetc", "/etc", "%2Fetc", "sub//ok",
                 "sub/./x", "a%01b", "a%7fb", "%00", "x%0a", "a" * 256, ("d/" * 2100) + "x", ""):
        st, raw = request("GET", A + "/tree?path=" + path)
        check(st in (400, 414) and b"root:" not in raw, "tree ?path=%.60s: %d %r" % (path, st, raw[:200]))
    st, raw = request("GET", A + "/tree?path=.&all=maybe")
    check(st == 400, "a bad ?all: %d" % st)
    st, raw = request("GET", A + "/tree?depth=3")
    check(st == 400, "an unknown query argument: %d %r" % (st, raw[:200]))
    st, raw = request("GET", "/api/v1/agents/%2e%2e/tree")
    check(st in (400, 404), "a hostile agent name: %d" % st)
    st, raw = request("GET", "/api/v1/agents/nobody/tree")
    check(st == 404, "an unknown agent: %d" % st)
    check(state("hostile") == "sleeping", "still sleeping")


def s_running():
    aid, home = create("busy", running=True)
    api("POST", "/api/v1/agents/busy/files/uploads?op=mkdir", expect=201)
    st, raw = request("PUT", "/api/v1/agents/busy/files/uploads/report.csv", b"a,b\n")
    check(st == 200, "upload into uploads/: %d %r" % (st, raw))
    os.makedirs(os.path.join(home, "node_modules", "x"))
    write(os.path.join(home, "src", "main.c"))
    _, t = api("GET", "/api/v1/agents/busy/tree")
    paths = {e["path"]: e for e in t["entries"]}
    check(set(paths) == {"uploads", "uploads/report.csv", "src", "src/main.c"} and
          paths["uploads/report.csv"].get("uploaded") and not t["incomplete"]
          and not t["depth_limit_reached"] and not t["entries_limit_reached"],
          "a running agent's tree: %r" % t)
    _, l = api("GET", "/api/v1/agents/busy/files?path=.")
    check(sorted(e["name"] for e in l["entries"]) == ["src", "uploads"], "sandboxd's listing leaves "
          "node_modules out: %r" % l["entries"])
    _, l = api("GET", "/api/v1/agents/busy/files?path=.&all=true")
    check("node_modules" in [e["name"] for e in l["entries"]], "...unless ?all")
    _, l = api("GET", "/api/v1/agents/busy/files?path=uploads")
    check(l["entries"][0].get("uploaded") is True, "sandboxd's listing of uploads/ marked: %r" % l)
    check(state("busy") == "running", "still running")


def s_cli():
    env = dict(ENV, AGENTHOLD_URL="http://127.0.0.1:%d" % API_PORT, AGENTHOLD_TOKEN=token())
    aid, home = create("clitree", running=False)
    write(os.path.join(home, "docs", "a.md"))
    write(os.path.join(home, ".git", "HEAD"))
    p = subprocess.run([BIN, "fs", "tree", "clitree"], env=env, capture_output=True, text=True, timeout=30)
    check(p.returncode == 0 and "docs/a.md" in p.stdout and ".git" not in p.stdout,
          "agenthold fs tree: %d %r %r" % (p.returncode, p.stdout, p.stderr))
    p = subprocess.run([BIN, "fs", "tree", "clitree", "--all", "--json"], env=env, capture_output=True,
                       text=True, timeout=30)
    j = json.loads(p.stdout) if p.returncode == 0 else {}
    check(".git/HEAD" in [e["path"] for e in j.get("entries", [])], "fs tree --all --json: %r" % p.stdout[:300])
    p = subprocess.run([BIN, "fs", "ls", "clitree"], env=env, capture_output=True, text=True, timeout=30)
    check(p.returncode == 0 and "docs/" in p.stdout and ".git" not in p.stdout, "fs ls: %r" % p.stdout)
    p = subprocess.run([BIN, "fs", "ls", "clitree", "--all"], env=env, capture_output=True, text=True, timeout=30)
    check(p.returncode == 0 and ".git/" in p.stdout, "fs ls --all: %r" % p.stdout)
    p = subprocess.run([BIN, "fs", "tree", "clitree", "docs"], env=env, capture_output=True, text=True, timeout=30)
    check(p.returncode == 0 and "docs/a.md" in p.stdout, "fs tree AGENT PATH: %r" % p.stdout)
    p = subprocess.run([BIN, "fs", "tree", "clitree", "../etc"], env=env, capture_output=True, text=True, timeout=30)
    check(p.returncode != 0 and "'..'" in p.stderr, "fs tree with '..': %d %r" % (p.returncode, p.stderr))
    check(state("clitree") == "sleeping", "the CLI's tree did not wake it")


def s_allfiles():
    """GET /api/v1/files (seed 004, "All files"): a tenant's files across
    its agents, newest first, grouped by agent and session, with
    access_label and owner_name; uploads/ and name filters; a user
    session's files its person's alone; another tenant sees nothing of
    them; reading starts nothing."""
    adm = token()

    def as_(tok, method, path, body=None, expect=200):
        return ahserver.call_json(API_PORT, tok, method, path, body, expect, check, 120)

    as_(adm, "POST", "/api/v1/tenants", {"name": "filesco"}, expect=201)
    as_(adm, "POST", "/api/v1/tenants", {"name": "otherco"}, expect=201)
    ann = as_(adm, "POST", "/api/v1/tokens", {"tenant": "filesco", "user": "ann@filesco.example"},
              expect=201)[1]["token"]
    bob = as_(adm, "POST", "/api/v1/tokens", {"tenant": "filesco", "user": "bob@filesco.example"},
              expect=201)[1]["token"]
    eve = as_(adm, "POST", "/api/v1/tokens", {"tenant": "otherco"}, expect=201)[1]["token"]
    as_(ann, "POST", "/api/v1/agents?wait=1", {"name": "plain"}, expect=201)
    _, run = as_(ann, "POST", "/api/v1/sessions?wait=1", {"scope": "run", "subject": "nightly-7"},
                 expect=201)
    _, mine = as_(ann, "POST", "/api/v1/sessions?wait=1", {"scope": "user"}, expect=201)
    as_(eve, "POST", "/api/v1/agents?wait=1", {"name": "evil"}, expect=201)
    homes = {}
    for tok, name in ((ann, "plain"), (ann, run["id"]), (ann, mine["id"]), (eve, "evil")):
        _, a = as_(tok, "GET", "/api/v1/agents/" + q(name))
        homes[name] = (a["id"], os.path.join(DATA, "fake", a["id"], "home"))
        as_(tok, "POST", "/api/v1/agents/%s/stop?wait=1" % q(name), expect=None)
    now = time.time()
    # Files with their times: the newest is in the run's home.
    plan = [("plain", "report.pdf", now - 300), ("plain", "uploads/brief.docx", now - 100),
            (run["id"], "out/results.csv", now - 10), (run["id"], "node_modules/x/index.js", now - 5),
            (mine["id"], "diary.txt", now - 50), ("evil", "secret-report.txt", now - 1)]
    for name, rel, t in plan:
        path = os.path.join(homes[name][1], rel)
        write(path, b"data of " + rel.encode())
        os.utime(path, (t, t))

    _, j = as_(ann, "GET", "/api/v1/files")
    groups = [(g["agent"], [f["path"] for f in g["files"]]) for g in j["groups"]]
    check(groups == [(run["id"], ["out/results.csv"]), (mine["id"], ["diary.txt"]),
                     ("plain", ["uploads/brief.docx", "report.pdf"])],
          "ann's files, newest first, grouped by agent, hidden names left out: %r" % groups)
    by = {g["agent"]: g for g in j["groups"]}
    check(by[run["id"]]["scope"] == "run" and by[run["id"]]["session_id"] == run["id"]
          and by[run["id"]]["access_label"] == "one run" and by[run["id"]]["owner_name"] is None,
          "a run session's group: %r" % by[run["id"]])
    check(by[mine["id"]]["owner_name"] == "ann@filesco.example"
          and by[mine["id"]]["access_label"] == "one person", "a user session's owner: %r" % by[mine["id"]])
    check(by["plain"]["session_id"] is None and by["plain"]["owner_name"] is None
          and by["plain"]["access_label"].startswith("direct"), "an agent of no session: %r" % by["plain"])
    f = by["plain"]["files"][0]
    check(f["uploaded"] is True and f["size"] == len(b"data of uploads/brief.docx") and f["name"] == "brief.docx",
          "a file's fields: %r" % f)
    check(j["count"] == 4 and not j["limit_reached"] and j["not_listed"] == [], "counts: %r" % j)
    _, j = as_(ann, "GET", "/api/v1/files?uploads=true")
    check([(g["agent"], [f["path"] for f in g["files"]]) for g in j["groups"]] ==
          [("plain", ["uploads/brief.docx"])], "uploads only: %r" % j["groups"])
    _, j = as_(ann, "GET", "/api/v1/files?q=REPORT")
    check([f["path"] for g in j["groups"] for f in g["files"]] == ["report.pdf"],
          "search by name, any case, this tenant's only: %r" % j["groups"])
    _, j = as_(ann, "GET", "/api/v1/files?all=true&limit=2")
    check([f["path"] for g in j["groups"] for f in g["files"]] ==
          ["node_modules/x/index.js", "out/results.csv"] and j["limit_reached"] and j["count"] == 2,
          "all=true shows the hidden names; the limit is said: %r" % j)
    # A user session is its person's: bob (same tenant) does not see it.
    _, j = as_(bob, "GET", "/api/v1/files")
    check(mine["id"] not in [g["agent"] for g in j["groups"]] and
          "diary.txt" not in json.dumps(j), "another person's user session is not shown: %r" % j["groups"])
    # Another tenant sees its own only; an admin names the tenant.
    _, j = as_(eve, "GET", "/api/v1/files")
    check([g["agent"] for g in j["groups"]] == ["evil"], "another tenant's listing: %r" % j["groups"])
    _, j = as_(adm, "GET", "/api/v1/files?tenant=filesco")
    check(len(j["groups"]) == 3, "an admin sees the tenant's every group: %r" % j["groups"])
    # Hostile queries.
    for bad in ("q=", "q=%01x", "q=" + "a" * 257, "limit=0", "limit=2001", "limit=x", "uploads=maybe",
                "path=.."):
        st, raw = ahserver.request(API_PORT, "GET", "/api/v1/files?" + bad, None, ann)
        check(st == 400, "GET /api/v1/files?%s: 400, got %d %r" % (bad[:40], st, raw[:200]))
    st, _ = ahserver.request(API_PORT, "GET", "/api/v1/files", None, "0" * 64)
    check(st == 401, "a wrong token: %d" % st)
    # Nothing was started, and the listing is in the audit trail.
    for tok, name in ((ann, "plain"), (ann, run["id"]), (ann, mine["id"]), (eve, "evil")):
        _, a = as_(tok, "GET", "/api/v1/agents/" + q(name))
        check(a["state"] == "sleeping", "%s still sleeps after the listings: %s" % (name, a["state"]))

    def audited():
        _, ops = as_(adm, "GET", "/api/v1/operations?tenant=filesco&limit=200")
        return [o for o in ops["operations"] if o["kind"] == "fs.all"]
    ahserver.wait_until(audited, 5, "fs.all in the audit trail", Fail)


SCENARIOS = [("sleeping", s_sleeping), ("tree", s_tree), ("hostile", s_hostile), ("running", s_running),
             ("cli", s_cli), ("allfiles", s_allfiles)]


def main():
    start_server()
    for name, fn in SCENARIOS:
        if ONLY and name not in ONLY:
            continue
        t0 = time.time()
        fn()
        print("%-10s ok (%.1f s)" % (name, time.time() - t0))
    print("e2e.homeread: %d checks passed" % check.count)


def cleanup_locked():
    for root, dirs, _ in os.walk(TMP):
        for d in dirs:
            try:
                os.chmod(os.path.join(root, d), 0o700)
            except OSError:
                pass


if __name__ == "__main__":
    try:
        rc = ahserver.run(main, Fail, CTX.procs, TMP, CTX.log)
    finally:
        cleanup_locked()
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
