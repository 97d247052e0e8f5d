#!/usr/bin/python3
"""tests/e2e/e2e_caps.py: the seed's caps on every command and read, on the
real `agenthold serve` with the fake driver (temporary data directories;
ports from ahserver.free_port).

  exec       sandbox.max_exec_timeout is a ceiling: 300 s shipped, a
             timeout over it refused (400 naming the ceiling and the key),
             at it admitted; with a ceiling of 2 s a command that names no
             timeout is killed at 2 s (sandboxd is told the ceiling), and
             `agenthold exec` without --timeout is held to it too
  read       files.max_read_bytes: GET fs/text of a 100 MiB file (over the
             cap, 8 MiB shipped) is cut there, never inside a UTF-8 character, and
             says so (truncated, size, notice); a small file comes whole;
             the download routes give the same file whole; a sleeping
             agent's home answers the same without waking it; a cap set
             in the configuration holds
  config     hostile values of both keys (negative, zero, huge, wrong
             type) stop the server at start with a message naming the key

usage: e2e_caps.py AGENTHOLD_BINARY [SCENARIO...]
Always kills what it started and removes its temporary directory."""
import hashlib
import json
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahlocal  # noqa: E402
import ahserver  # noqa: E402

CTX = ahlocal.context("ah-e2e-caps-")
BIN, ONLY, TMP, Fail, check = CTX.bin, CTX.only, CTX.tmp, CTX.fail, CTX.check
MiB = 1 << 20


def server(name, extra=None):
    return ahlocal.Local(CTX, name, extra).start()


def running(srv, name):
    srv.ok("POST", "/api/v1/agents", body={"name": name})
    return srv.wait_state(name, ("running",))


# ---------------------------------------------------------------------------
# exec: a ceiling, not a default a caller may raise

def exec_():
    srv = server("exec")
    running(srv, "e")
    path = "/api/v1/agents/e/exec"
    status, j = srv.call("POST", path, body={"cmd": "true", "timeout": 300.5})
    check(status == 400 and "over the ceiling of 300 s" in j["error"]
          and "sandbox.max_exec_timeout" in j["error"], "a timeout over 300 s: %d %r" % (status, j))
    status, j = srv.call("POST", path + "?stream=1", body={"cmd": "true", "timeout": 86400})
    check(status == 400 and "ceiling of 300 s" in j["error"], "the stream form too: %d %r" % (status, j))
    j = srv.ok("POST", path, body={"cmd": "echo ok", "timeout": 300})
    check(j["status"] == 0 and j["stdout"] == "ok\n", "a timeout at the ceiling runs: %r" % j)
    # No exec row for the refused ones: they never reached the sandbox.
    srv.stop()

    srv = server("exec2", {"AGENTHOLD_SANDBOX_MAX_EXEC_TIMEOUT": "2s"})
    running(srv, "e")
    status, j = srv.call("POST", path, body={"cmd": "true", "timeout": 3})
    check(status == 400 and "field 'timeout' = 3 s is over the ceiling of 2 s (sandbox.max_exec_timeout)"
          in j["error"], "a configured ceiling: %d %r" % (status, j))
    t0 = time.monotonic()
    j = srv.ok("POST", path, body={"cmd": "sleep 20"})
    took = time.monotonic() - t0
    check(j["timed_out"] and j["signal"] == 9 and 1.5 < took < 10,
          "a command naming no timeout is killed at the ceiling: %.1f s %r" % (took, j))
    t0 = time.monotonic()
    rc, out, err = srv.cli("exec", "e", "--", "sleep 20")
    took = time.monotonic() - t0
    check(rc == 124 and "timed out" in err and took < 10,
          "agenthold exec without --timeout: the ceiling: %d %r %.1f s" % (rc, err, took))
    rc, out, err = srv.cli("exec", "--timeout", "5", "e", "--", "true")
    check(rc == 1 and "ceiling of 2 s" in err, "agenthold exec --timeout over it: %d %r" % (rc, err))
    srv.stop()


# ---------------------------------------------------------------------------
# read: JSON answers cut at files.max_read_bytes, downloads whole

def big_text(size, cut_at):
    """size bytes of UTF-8 text with a 3-byte character across cut_at."""
    line = b"agenthold reads at most what the seed allows \xe2\x80\x94 and says so\n"
    body = (line * (size // len(line) + 1))[:cut_at - 1]
    body += "\u20ac".encode() + b"x" * (size - cut_at - 2)
    assert len(body) == size and body[cut_at - 1:cut_at + 2] == "\u20ac".encode()
    return body


def text(srv, agent, path):
    return srv.ok("GET", "/api/v1/agents/%s/fs/text?path=%s" % (agent, path))


def read_checks(srv, agent, big, cap, where):
    j = text(srv, agent, "big.txt")
    content = j["content"].encode()
    check(j["truncated"] is True and j["size"] == len(big) and j["max_read_bytes"] == cap,
          "%s: a file over the cap is cut and says so: %r" % (where, {k: v for k, v in j.items() if k != "content"}))
    check(j["content_bytes"] == cap - 1 and content == big[:cap - 1],
          "%s: cut at the cap, the character it would split left out whole: %d bytes"
          % (where, j["content_bytes"]))
    check("files.max_read_bytes" in j["notice"] and str(len(big)) in j["notice"],
          "%s: the notice names the size and the key: %r" % (where, j["notice"]))
    j = text(srv, agent, "small.txt")
    check(j["truncated"] is False and j["content"] == "h\u00e9llo\n" and j["size"] == 7 and "notice" not in j,
          "%s: a small file whole: %r" % (where, j))
    want = hashlib.sha256(big).hexdigest()
    for route in ("files/big.txt", "fs/file?path=big.txt"):
        status, digest, got = ahserver.download(srv.port, "/api/v1/agents/%s/%s" % (agent, route), srv.admin)
        check(status == 200 and got == len(big) and digest == want,
              "%s: the download %s is whole: %d %d bytes" % (where, route, status, got))
    status, j = srv.call("GET", "/api/v1/agents/%s/fs/text?path=nope.txt" % agent)
    check(status == 404, "%s: a missing file: %d %r" % (where, status, j))
    status, j = srv.call("GET", "/api/v1/agents/%s/fs/text?path=." % agent)
    check(status in (400, 409) , "%s: the home is no file: %d %r" % (where, status, j))
    status, j = srv.call("GET", "/api/v1/agents/%s/fs/text?path=../x" % agent)
    check(status == 400, "%s: a path that climbs out: %d %r" % (where, status, j))


def read():
    srv = server("read")
    running(srv, "r")
    cap = 8 * MiB
    big = big_text(100 * MiB + 123, cap)        # the 100 MiB file
    srv.ok("PUT", "/api/v1/agents/r/fs/file?path=big.txt", body=big)
    srv.ok("PUT", "/api/v1/agents/r/fs/file?path=small.txt", body="h\u00e9llo\n".encode())
    read_checks(srv, "r", big, cap, "running")
    # Asleep: the same answers from the home, and the agent stays asleep.
    srv.ok("POST", "/api/v1/agents/r/stop?wait=1")
    srv.wait_state("r", ("sleeping",))
    read_checks(srv, "r", big, cap, "sleeping")
    check(srv.ok("GET", "/api/v1/agents/r")["state"] == "sleeping", "reading did not wake it")
    ops = srv.ok("GET", "/api/v1/agents/r/operations?limit=100")["operations"]
    kinds = [(o["kind"], o["detail"]) for o in ops]
    check(not [k for k, d in kinds if k in ("start", "wake")]
          and sum(1 for k, d in kinds if k == "fs.read" and d == "big.txt") >= 6,
          "the reads are in the audit trail as fs.read, no start: %r" % kinds[:20])
    srv.stop()

    # A cap of the configuration's: 1000 bytes.
    srv = server("read2", {"AGENTHOLD_FILES_MAX_READ_BYTES": "1000"})
    running(srv, "r")
    big = big_text(5000, 1000)
    srv.ok("PUT", "/api/v1/agents/r/fs/file?path=big.txt", body=big)
    srv.ok("PUT", "/api/v1/agents/r/fs/file?path=small.txt", body="h\u00e9llo\n".encode())
    read_checks(srv, "r", big, 1000, "cap 1000")
    srv.stop()


# ---------------------------------------------------------------------------
# config: hostile values stop the server at start

def config():
    data = os.path.join(TMP, "config-data")
    env = ahserver.server_env(data, ahserver.free_port(fail=Fail), ahserver.free_port(fail=Fail))
    cases = [
        ("AGENTHOLD_SANDBOX_MAX_EXEC_TIMEOUT", "-5", "sandbox.max_exec_timeout"),
        ("AGENTHOLD_SANDBOX_MAX_EXEC_TIMEOUT", "0", "from 0.001 to 604800 seconds"),
        ("AGENTHOLD_SANDBOX_MAX_EXEC_TIMEOUT", "1e12", "sandbox.max_exec_timeout"),
        ("AGENTHOLD_SANDBOX_MAX_EXEC_TIMEOUT", "ten", "sandbox.max_exec_timeout"),
        ("AGENTHOLD_FILES_MAX_READ_BYTES", "-1", "files.max_read_bytes = -1: must be from 1 to 268435456"),
        ("AGENTHOLD_FILES_MAX_READ_BYTES", "0", "files.max_read_bytes = 0"),
        ("AGENTHOLD_FILES_MAX_READ_BYTES", "99999999999999", "files.max_read_bytes"),
        ("AGENTHOLD_FILES_MAX_READ_BYTES", "8MiB", "files.max_read_bytes"),
        ("AGENTHOLD_FILES_MAX_READ_BYTES", "1.5", "files.max_read_bytes"),
    ]
    for var, value, said in cases:
        p = ahserver.serve_once(BIN, dict(env, **{var: value}), cwd=TMP)
        check(p.returncode != 0 and said in p.stderr,
              "%s=%s stops the server naming it: %d %r" % (var, value, p.returncode, p.stderr[-400:]))


def main():
    for name, f in (("exec", exec_), ("read", read), ("config", config)):
        if not ONLY or name in ONLY:
            f()
    print("ok: %d checks" % check.count)


if __name__ == "__main__":
    sys.exit(ahserver.run(main, Fail, CTX.procs, TMP, CTX.log))
