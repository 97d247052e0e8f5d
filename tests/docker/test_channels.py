#!/usr/bin/python3
"""tests/docker/test_channels.py: exec, files and the terminal through the
REST API, end to end with the real `agenthold serve` on the Docker driver,
the real static sandboxd in the busybox test image (tests/images/), and a
sandbox's home that outlives stop, start and rebuild (a terminal and a
file round trip work; stop, start and rebuild keep the files in the
home).

Exec: `id -un` is agent, exit statuses and stderr pass through, a signal
is reported, a timeout kills. Files: a 6 MiB upload comes back identical
(sha256), busybox's sha256sum inside agrees, it is owned by agent with the
asked mode, fs/list shows it, mkdir and delete work. Hostile paths
(../etc/passwd, /etc/passwd, a symlink out of the home) are refused with
400 (as written) or 403 (through a symlink) and /etc is unchanged (checked
with exec). The terminal WebSocket:
`echo hello-$((6*7))` answers hello-42, `stty size` follows a resize, the
shell's exit status closes it. Stop, start, and a rebuild after a PATCH of
the memory (a new container) keep the file in the home. The CLI's exec,
if the CLI has one.

usage: test_channels.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine. Ports from ahserver.free_port, pool 10.213.176.0/20,
prefix dockerchannels<pid>. Removes everything it made, even on failure
(tests/docker/ahdocker.py)."""
import asyncio
import difflib
import hashlib
import http.client
import json
import os
import subprocess
import sys
import time
import urllib.parse

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import Fail, Harness, read_file_from_container  # noqa: E402

try:
    import websockets
except ImportError:                     # checked in the scenario, with a clear message
    websockets = None

h = Harness("docker.channels", sys.argv[1], "10.213.176.0/20")
NAME = "chan"
BLOB_MIB = 6
HOME = "/home/agent"


def raw(method, path, body=None, headers=None, timeout=120):
    """(status, headers, bytes) of one API request with a raw body."""
    host, port = h.url[7:].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=timeout)
    hd = {"Authorization": "Bearer " + h.token()}
    hd.update(headers or {})
    c.request(method, path, body=body, headers=hd)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data


def spliced_bytes():
    """agenthold_spliced_bytes_total of GET /metrics."""
    st, _, data = raw("GET", "/metrics")
    h.check(st == 200, "GET /metrics: %d" % st)
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("agenthold_spliced_bytes_total "):
            return int(float(line.split()[1]))
    raise Fail("GET /metrics has no agenthold_spliced_bytes_total")


def fs(route, path, **args):
    args["path"] = path
    return "/api/v1/agents/%s/fs/%s?%s" % (NAME, route, urllib.parse.urlencode(args))


def exec_(cmd, **kw):
    body = {"cmd": cmd}
    body.update(kw)
    st, r = h.api("POST", "/api/v1/agents/%s/exec" % NAME, body, timeout=120)
    h.check(st == 200 and isinstance(r, dict), "exec %r: HTTP %d %r" % (cmd, st, r))
    return r


def sh(cmd):
    """stdout of a command that must succeed."""
    r = exec_(cmd)
    h.check(r["status"] == 0, "exec %r: status %r, stderr %r" % (cmd, r["status"], r["stderr"]))
    return r["stdout"]


def refused(method, path, body=None, want=403):
    """want: the status, or the statuses, a refusal may have (a path that
    is hostile as written is the API's 400; one that leads out through a
    symlink is sandboxd's 403)."""
    st, _, data = raw(method, path, body)
    wants = want if isinstance(want, tuple) else (want,)
    h.check(st in wants, "%s %s is refused with %r: got %d %r" % (method, path, wants, st, data[:200]))
    try:
        msg = json.loads(data).get("error", "")
    except ValueError:
        msg = ""
    h.check(msg, "the refusal says why: %r" % data[:200])
    return msg


def download(path):
    st, hd, data = raw("GET", fs("file", path))
    h.check(st == 200, "GET %s: %d %r" % (path, st, data[:200]))
    h.check(int(hd.get("content-length", -1)) == len(data),
            "Content-Length %s matches the %d bytes" % (hd.get("content-length"), len(data)))
    return data


def home_file_intact(blob_sha, blob_len, when):
    """The uploaded file is in the home, whole, owned by agent (exec and a download)."""
    out = sh("sha256sum %s/data/blob.bin; stat -c '%%U %%u %%a %%s' %s/data/blob.bin" % (HOME, HOME))
    lines = out.split("\n")
    h.check(lines[0].split()[0] == blob_sha, "%s: sha256sum inside is %r, uploaded %s" %
            (when, lines[0], blob_sha))
    h.check(lines[1] == "agent 1000 640 %d" % blob_len, "%s: owner, mode, size: %r" % (when, lines[1]))
    h.check(hashlib.sha256(download("data/blob.bin")).hexdigest() == blob_sha,
            "%s: downloaded back identical" % when)


async def terminal_session(url):
    """Type into the terminal, resize it, exit the shell: (output, close
    code, close reason)."""
    out = b""

    async def read_until(ws, needle, seconds=15):
        """Reads until needle shows (b"" is any output; None the close)."""
        nonlocal out
        deadline = time.time() + seconds
        while needle is None or needle not in out or not out.strip():
            left = deadline - time.time()
            if left <= 0:
                raise Fail("the terminal never showed %r; output so far: %r" % (needle, out[-400:]))
            try:
                m = await asyncio.wait_for(ws.recv(), left)
            except asyncio.TimeoutError:
                continue
            except websockets.ConnectionClosed as e:
                if needle is None:
                    return e.code, e.reason
                raise Fail("the terminal closed (%s %s) before %r; output: %r" %
                           (e.code, e.reason, needle, out[-400:]))
            out += m if isinstance(m, bytes) else m.encode()

    async with websockets.connect(url) as ws:
        # Type once the shell is there (its prompt), as a person would.
        await read_until(ws, b"", 30)
        await ws.send(b"echo hello-$((6*7))\n")
        # The echoed keystrokes say hello-$((6*7)); only the shell says 42.
        await read_until(ws, b"hello-42")
        await ws.send(b"stty size; echo user=$(id -un)\n")
        await read_until(ws, b"30 100")
        await read_until(ws, b"user=agent")
        await ws.send(json.dumps({"cols": 132, "rows": 43}))
        await ws.send(b"stty size\n")
        await read_until(ws, b"43 132")
        await ws.send(b"exit 5\n")
        code, reason = await read_until(ws, None)
        return out, code, reason


def cli_exec_pass():
    """`agenthold exec` if the CLI has it: the command's exit status is the CLI's."""
    p = subprocess.run([h.bin, "--help"], env=h.cli_env(), capture_output=True, text=True, timeout=30)
    helptext = p.stdout + p.stderr
    if not any(line.split()[:2] == ["agenthold", "exec"] for line in helptext.splitlines()):
        print("NOTE: `agenthold --help` lists no exec command: the CLI exec pass is left out")
        return
    p = subprocess.run([h.bin, "exec", NAME, "--", "sh", "-c", "id -un; echo to-err >&2; exit 7"],
                       env=h.cli_env(), capture_output=True, text=True, timeout=60)
    h.check(p.returncode == 7, "agenthold exec exits with the command's status 7: %d (%s)" %
            (p.returncode, p.stderr.strip()))
    h.check("agent" in p.stdout and "to-err" in p.stderr, "agenthold exec passes the output on: %r %r"
            % (p.stdout, p.stderr))
    p = subprocess.run([h.bin, "exec", NAME, "--", "true"], env=h.cli_env(), capture_output=True,
                       text=True, timeout=60)
    h.check(p.returncode == 0, "agenthold exec true exits 0: %d (%s)" % (p.returncode, p.stderr))
    print("agenthold exec: exit statuses pass through")


def scenario(h):
    if websockets is None:
        raise Fail("/usr/bin/python3 has no websockets module (apt-get install python3-websockets)")
    h.start_server()
    a = h.cli("create", NAME, "--memory-mb", "128")
    h.check(a["state"] == "running", "create -> running: %r (%s)" % (a["state"], a.get("error")))
    aid = a["id"]
    cid1 = h.container(aid)["Id"]

    # -- exec ----------------------------------------------------------------
    r = exec_("id -un; id -u; pwd")
    h.check(r["status"] == 0 and r["stdout"] == "agent\n1000\n%s\n" % HOME,
            "exec runs as agent in the home: %r" % r)
    r = exec_("echo out; echo err >&2; exit 7")
    h.check(r["status"] == 7 and r["stdout"] == "out\n" and r["stderr"] == "err\n" and
            not r["timed_out"], "exit status and both streams pass through: %r" % r)
    r = exec_("kill -9 $$")
    h.check(r["status"] == -1 and r["signal"] == 9, "a command killed by a signal says so: %r" % r)
    sh("mkdir -p work")
    r = exec_("cat; pwd", stdin="from-stdin\n", cwd="work")
    h.check(r["status"] == 0 and r["stdout"] == "from-stdin\n%s/work\n" % HOME, "stdin and cwd: %r" % r)
    refused("POST", "/api/v1/agents/%s/exec" % NAME, json.dumps({"cmd": "pwd", "cwd": "/tmp"}), want=400)
    refused("POST", "/api/v1/agents/%s/exec" % NAME, json.dumps({"cmd": "pwd", "cwd": "../.."}), want=400)
    h.check(exec_("echo $GREETING", env={"GREETING": "hi"})["stdout"] == "hi\n", "env passes")
    t0 = time.time()
    r = exec_("echo started; sleep 60; echo never", timeout=2)
    took = time.time() - t0
    h.check(r["timed_out"] and r["signal"] == 9 and "never" not in r["stdout"],
            "a command past its timeout is killed: %r" % r)
    h.check(r["stdout"] == "started\n", "its output until then is kept: %r" % r["stdout"])
    h.check(took < 15, "the timeout of 2 s answered after %.1f s" % took)
    ps = sh("ps -o pid,user,args")
    h.check("ps -o pid" in ps and "sleep 60" not in ps,
            "nothing of the timed-out command is left running: %r" % ps)

    # -- files ---------------------------------------------------------------
    st, r = h.api("POST", fs("mkdir", "data"))
    h.check(st == 201 and r.get("created"), "mkdir data: %d %r" % (st, r))
    blob = os.urandom(BLOB_MIB << 20)
    blob_sha = hashlib.sha256(blob).hexdigest()
    spliced = spliced_bytes()
    t0 = time.time()
    st, _, data = raw("PUT", fs("file", "data/blob.bin", mode="640"), blob,
                      {"Content-Type": "application/octet-stream"})
    up = time.time() - t0
    h.check(st == 200, "upload of %d MiB: %d %r" % (BLOB_MIB, st, data[:200]))
    # The body went from our socket to sandboxd's by splice (the container
    # dials the tunnel's unix socket), all but the first reads.
    spliced = spliced_bytes() - spliced
    h.check(len(blob) - (2 << 20) <= spliced <= len(blob),
            "%d of the upload's %d bytes were spliced" % (spliced, len(blob)))
    r = json.loads(data)
    h.check(r.get("size") == len(blob), "the upload's answer has its size: %r" % r)
    t0 = time.time()
    home_file_intact(blob_sha, len(blob), "after the upload")
    h.check(sh("ls -A %s/data" % HOME) == "blob.bin\n", "no temporary file is left beside it")
    # Seen by the engine too, in the home volume (not only through sandboxd).
    inside = read_file_from_container(cid1, HOME + "/data/blob.bin")
    h.check(inside is not None and hashlib.sha256(inside).hexdigest() == blob_sha,
            "the Engine API's archive of the container has the same file")
    print("%d MiB up in %.2f s; checked and down in %.2f s" % (BLOB_MIB, up, time.time() - t0))

    st, r = h.api("GET", fs("list", "data"))
    h.check(st == 200, "fs list data: %d %r" % (st, r))
    e = [x for x in r["entries"] if x["name"] == "blob.bin"]
    h.check(len(e) == 1 and e[0]["type"] == "file" and e[0]["size"] == len(blob),
            "fs list shows blob.bin with its size: %r" % r["entries"])
    st, r = h.api("GET", "/api/v1/agents/%s/fs/list" % NAME)
    h.check(st == 200 and any(x["name"] == "data" and x["type"] == "dir" for x in r["entries"]),
            "fs list of the home shows data/: %r" % r)

    st, r = h.api("POST", fs("mkdir", "data/a/b/c", parents="1"))
    h.check(st == 201, "mkdir -p data/a/b/c: %d %r" % (st, r))
    st, _, _ = raw("PUT", fs("file", "data/a/b/c/note.txt"), b"note\n")
    h.check(st == 200, "a small file in the new directory: %d" % st)
    h.check(sh("stat -c '%%U %%F' %s/data/a/b/c; cat %s/data/a/b/c/note.txt" % (HOME, HOME)) ==
            "agent directory\nnote\n", "the directories are agent's and the file is there")
    refused("POST", fs("mkdir", "data"), want=409)
    refused("DELETE", fs("file", "data/a"), want=409)          # not empty
    st, r = h.api("DELETE", fs("file", "data/a/b/c/note.txt"))
    h.check(st == 200 and r.get("removed"), "delete a file: %d %r" % (st, r))
    h.check(sh("ls %s/data/a/b/c | wc -l" % HOME).strip() == "0", "the file is gone inside")
    refused("GET", fs("file", "data/a/b/c/note.txt"), want=404)
    st, r = h.api("DELETE", fs("file", "data/a", recursive="1"))
    h.check(st == 200 and r.get("removed"), "delete a tree with recursive=1: %d %r" % (st, r))
    h.check(exec_("test -e %s/data/a" % HOME)["status"] == 1, "the tree is gone inside")

    # -- hostile paths -------------------------------------------------------
    # Names, modes, owners, sizes and times outside the home (not /proc: its
    # link count follows the processes).
    outside = "sha256sum /etc/passwd /etc/group; ls -A / /home; ls -la /etc /tmp; ls -ld / /etc /home /tmp"
    before = sh(outside)
    sh("ln -s /etc %s/etclink && ln -s ../../etc/passwd %s/pwlink" % (HOME, HOME))
    for p, want in (("../etc/passwd", 400), ("/etc/passwd", 400), ("../../etc/passwd", 400),
                    ("data/../../../etc/passwd", 400), ("etclink/passwd", 403),
                    ("etclink/../etc/passwd", 400)):
        refused("PUT", fs("file", p), b"root::0:0::/root:/bin/sh\n", want=want)
        refused("GET", fs("file", p), want=want)
        refused("DELETE", fs("file", p), want=want)
    # A symlink as the last component: never followed out. Reading it is
    # refused; a write replaces the link itself (temp file renamed onto
    # it), a delete removes the link, never its target.
    refused("GET", fs("file", "pwlink"))
    st, _, data = raw("PUT", fs("file", "pwlink"), b"root::0:0::/root:/bin/sh\n")
    h.check(st in (200, 403), "PUT onto a symlink out of the home: %d %r" % (st, data[:200]))
    if st == 200:
        h.check(sh("test -L pwlink || test ! -f pwlink || echo replaced") == "replaced\n",
                "the upload replaced the link with a file in the home")
        sh("rm pwlink && ln -s ../../etc/passwd pwlink")
    st, _, data = raw("DELETE", fs("file", "pwlink"))
    h.check(st in (200, 403), "DELETE of a symlink out of the home: %d %r" % (st, data[:200]))
    if st == 200:
        h.check(exec_("test -L pwlink")["status"] == 1, "the delete removed the link")
    else:
        sh("rm pwlink")
    refused("GET", fs("list", "/etc"), want=400)
    refused("GET", fs("list", "../.."), want=400)
    refused("GET", fs("list", "etclink"))
    refused("POST", fs("mkdir", "../evil"), want=400)
    refused("POST", fs("mkdir", "/tmp/evil"), want=400)
    refused("POST", fs("mkdir", "etclink/evil"))
    after = sh(outside)
    h.check(after == before, "nothing outside the home changed: %r" %
            [x for x in difflib.ndiff(before.splitlines(), after.splitlines()) if x[:1] in "+-"])
    h.check(exec_("test -e /home/evil || test -e /tmp/evil || test -e /etc/evil")["status"] == 1,
            "no directory was made outside the home")
    sh("rm %s/etclink" % HOME)

    # -- the terminal --------------------------------------------------------
    url = "ws://127.0.0.1:%d/api/v1/agents/%s/terminal?cols=100&rows=30&token=%s" % (
        h.api_port, NAME, h.token())
    try:
        out, code, reason = asyncio.run(asyncio.wait_for(terminal_session(url), 60))
    except (OSError, asyncio.TimeoutError, websockets.WebSocketException) as e:
        raise Fail("the terminal: %s: %s" % (type(e).__name__, e))
    h.check(code == 1000 and "status 5" in (reason or ""),
            "the shell's exit closes the terminal with its status: %r %r" % (code, reason))
    st, ops = h.api("GET", "/api/v1/agents/%s/operations?limit=1000" % NAME)
    h.check(st == 200, "the audit trail: %d" % st)
    trail = json.dumps(ops["operations"])
    h.check("id -un" in trail and "data/blob.bin" in trail and "terminal" in trail,
            "exec, files and the terminal are in the audit trail")

    # -- stop, start, rebuild keep the home -----------------------------------
    h.check(h.cli("stop", NAME)["state"] == "sleeping", "stop -> sleeping")
    st, r = h.api("POST", "/api/v1/agents/%s/exec" % NAME, {"cmd": "true"})
    h.check(st == 409 and "sleeping" in r.get("error", ""), "exec on a sleeping agent: %d %r" % (st, r))
    st, _, body = raw("GET", fs("file", "data/blob.bin"))
    h.check(st == 200 and hashlib.sha256(body).hexdigest() == blob_sha,
            "a download from a sleeping agent is read without waking it: %d" % st)
    h.check(not h.container(aid)["State"]["Running"], "the download left the container stopped")
    h.check(h.cli("start", NAME)["state"] == "running", "start -> running")
    home_file_intact(blob_sha, len(blob), "after stop and start")

    st, a = h.api("PATCH", "/api/v1/agents/%s" % NAME, {"memory_mb": 160})
    h.check(st == 200 and a["needs_rebuild"], "PATCH memory_mb: %d %r" % (st, a))
    a = h.cli("rebuild", NAME)
    h.check(a["state"] == "running" and a["needs_rebuild"] is False, "rebuild -> running: %r" % a)
    c = h.container(aid)
    h.check(c["Id"] != cid1 and c["HostConfig"]["Memory"] == 160 << 20,
            "the rebuild made a new container with 160 MiB")
    vols = [m.get("Name") for m in c["Mounts"] if m.get("Destination") == HOME]
    h.check(vols == ["%s-home-%s" % (h.prefix, aid)], "the same home volume: %r" % vols)
    home_file_intact(blob_sha, len(blob), "after the rebuild")
    h.check(exec_("id -un")["stdout"] == "agent\n", "exec in the rebuilt sandbox")

    cli_exec_pass()

    h.check(h.cli("rm", NAME)["state"] == "destroyed", "rm -> destroyed")
    h.finish()


sys.exit(h.run(scenario))
