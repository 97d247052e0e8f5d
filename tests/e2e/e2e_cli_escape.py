#!/usr/bin/python3
"""tests/e2e/e2e_cli_escape.py: the agenthold CLI never writes a string the
server sent raw to a terminal. The real `agenthold serve` (fake driver,
temporary data directory, ports from ahserver.free_port) holds an agent and a
session; then hostile strings that somehow got stored (written into the
SQLite database directly, as no route would take them) are read back
through `agenthold ls`, `show`, `session ls` and `session show`, each with
and without --json: escape sequences (ESC, BEL, CSI as C1 U+009B, NEL
U+0085, DEL) and bytes that are not UTF-8. What the CLI prints holds no
control character but newline (and no byte that is not UTF-8); the
people's output shows each one escaped (\\x1b, \\u009b), the JSON output
gives the same strings back to a parser.

usage: e2e_cli_escape.py AGENTHOLD_BINARY
Fails loudly (the server's log on stderr); always kills what it started and
removes its temporary directory."""
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahserver  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="ah-e2e-esc-")
DATA = os.path.join(TMP, "data")
LOG = os.path.join(TMP, "server.log")
procs = []
checks = 0


class Fail(Exception):
    pass


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        raise Fail(what)


API_PORT = ahserver.free_port(fail=Fail)
TUNNEL_PORT = ahserver.free_port(avoid={API_PORT}, fail=Fail)
ENV = ahserver.server_env(DATA, API_PORT, TUNNEL_PORT)

# What a hostile string may hold, each as stored and as the people's
# output must show it.
NAME = "evil\x1b]0;owned\x07name"
NAME_SHOWN = "evil\\x1b]0;owned\\x07name"
IMAGE = "img\u009b31mred\x7f"
IMAGE_SHOWN = "img\\u009b31mred\\x7f"
SUBJECT = "subj\u009b2J\u0085next"
SUBJECT_SHOWN = "subj\\u009b2J\\u0085next"
BACKEND = "back\x1b[2J\x08\x0d"
BACKEND_SHOWN = "back\\x1b[2J\\x08\\x0d"
HOST = "host\u0090P\u009c"
HOST_SHOWN = "host\\u0090P\\u009c"
NOT_UTF8 = b"bytes\xff\xc0\xaf\xed\xa0\x80\xc2"     # stored as TEXT; the API makes each '?'


def cli(*args):
    """Run the CLI; (status, stdout bytes, stderr bytes)."""
    p = subprocess.run([BIN] + list(args), env=ENV, cwd=TMP, capture_output=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def safe(what, out):
    """out (bytes) is UTF-8 with no control character but newline."""
    try:
        text = out.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Fail("%s printed bytes that are not UTF-8 (%s): %r" % (what, e, out))
    bad = [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f]
    check(not bad, "%s printed control characters %r raw: %r" % (what, bad, text))
    return text


def printed(*args):
    rc, out, err = cli(*args)
    what = "agenthold " + " ".join(args)
    check(rc == 0, "%s: status %d, stderr %r" % (what, rc, err))
    safe(what + " (stderr)", err)
    return safe(what, out)


def main():
    server = ahserver.serve(BIN, ENV, LOG, cwd=TMP, procs=procs, fail=Fail)
    token = ahserver.read_token(DATA)

    # An agent and a session made the ordinary way.
    ahserver.call_json(API_PORT, token, "POST", "/api/v1/agents", {"name": "plain"}, 201, check)
    _, agent = ahserver.call_json(API_PORT, token, "GET", "/api/v1/agents/plain", None, 200, check)
    _, opened = ahserver.call_json(API_PORT, token, "POST", "/api/v1/sessions?wait=1",
                                   {"scope": "run", "subject": "nightly"}, 201, check)
    session = opened["id"]
    # The routes refuse these strings (tests/api); the database is told.
    db = sqlite3.connect(os.path.join(DATA, "agenthold.db"), timeout=30)
    db.execute("UPDATE agents SET name = ?, image = ? WHERE id = ?", (NAME, IMAGE, agent["id"]))
    db.execute("UPDATE sessions SET subject = ?, backend = ?, host = ? WHERE id = ?",
               (SUBJECT, BACKEND, HOST, session))
    db.execute("INSERT INTO agents (id, name, tenant, image, cpus, memory_mb, idle_minutes, created_at)"
               " SELECT 'b0b0b0b0b0b0', CAST(? AS TEXT), tenant, image, cpus, memory_mb, idle_minutes,"
               " created_at FROM agents WHERE id = ?", (NOT_UTF8, agent["id"]))
    db.commit()
    db.close()

    # People's output: each hostile string escaped, nothing raw.
    out = printed("ls")
    check(NAME_SHOWN in out and IMAGE_SHOWN in out, "ls shows the name and image escaped: %r" % out)
    check("bytes?????" in out, "ls shows the bytes that are not UTF-8 as '?': %r" % out)
    out = printed("show", agent["id"])
    check(NAME_SHOWN in out and IMAGE_SHOWN in out, "show shows the name and image escaped: %r" % out)
    out = printed("session", "show", session)
    for shown in (SUBJECT_SHOWN, BACKEND_SHOWN, HOST_SHOWN):
        check(shown in out, "session show shows %r: %r" % (shown, out))
    out = printed("session", "ls")
    check(SUBJECT_SHOWN in out and BACKEND_SHOWN in out, "session ls shows them escaped: %r" % out)

    # --json: the same strings to a parser, nothing raw on the terminal.
    agents = json.loads(printed("ls", "--json"))
    check(any(a["name"] == NAME and a["image"] == IMAGE for a in agents),
          "ls --json gives the stored strings back: %r" % agents)
    check(json.loads(printed("show", agent["id"], "--json"))["name"] == NAME, "show --json")
    s = json.loads(printed("session", "show", session, "--json"))
    check((s["subject"], s["backend"], s["host"]) == (SUBJECT, BACKEND, HOST),
          "session show --json gives the stored strings back: %r" % s)
    sessions = json.loads(printed("session", "ls", "--json"))
    check(any(x["subject"] == SUBJECT for x in sessions), "session ls --json: %r" % sessions)

    # A server's error message is a server string too.
    rc, out, err = cli("show", "no-such-agent\u009b")
    check(rc != 0, "show of a name that cannot be fails")
    check("\\u009b" in safe("the error", err), "the error shows the name escaped: %r" % err)
    print("e2e_cli_escape: %d checks passed" % checks)


if __name__ == "__main__":
    sys.exit(ahserver.run(main, Fail, procs, TMP, LOG))
