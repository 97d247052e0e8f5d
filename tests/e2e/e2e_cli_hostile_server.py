#!/usr/bin/python3
"""e2e.cli_hostile_server: the agenthold command against a server that
answers with hostile bytes (cli/http.c, proto/httpresp.c): each answer
ends the command with status 1 and a sentence that names the problem,
within seconds, never a crash, a hang or garbage on the terminal. And
hostile tokens (AGENTHOLD_TOKEN with CR, LF, a space, DEL, UTF-8, over
1 KiB): refused naming the byte, with nothing sent to the server.

usage: e2e_cli_hostile_server.py AGENTHOLD"""
import os
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahserver  # noqa: E402

BIG = 20 << 20
ESC_BODY = b'{"error":"x\\u001b[2Jy\\u0007"}'

# name: (the bytes the server sends after reading the request, what stderr must say)
CASES = {
    "head over 16 KiB": (b"HTTP/1.1 200 OK\r\nX: " + b"a" * 20000 + b"\r\n\r\n", "larger than 16 KiB"),
    "body over 16 MiB": (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % BIG + b"[" * BIG, "larger than 16777216 bytes"),
    "chunk size not hex": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "not a hex number"),
    "chunk without CRLF": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[]XX", "does not end with CRLF"),
    "closed mid-body": (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n[1,2", "in the middle of its answer"),
    "closed before answering": (b"", "closed the connection before answering"),
    "not HTTP": (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "HTTP/1.x status line"),
    "bare LF head": (b"HTTP/1.1 200 OK\nContent-Length: 2\n\n[]", "larger than 16 KiB|CRLF|closed the connection"),
    "two lengths": (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n[]", "two different"),
    "gzip coding": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "not chunked"),
    "control byte in header": (b"HTTP/1.1 200 OK\r\nX: a\x1b[2Jb\r\nContent-Length: 2\r\n\r\n[]", "control byte"),
    "not JSON": (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "not JSON"),
    "error with escape": (b"HTTP/1.1 400 Bad\r\nContent-Length: %d\r\n\r\n%s" % (len(ESC_BODY), ESC_BODY),
                          "x\\x1b[2Jy"),
}


def main():
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 2
    cli = os.path.abspath(sys.argv[1])
    failures = []
    for name, (answer, want) in CASES.items():
        srv = ahserver.CannedServer(answer)
        env = dict(os.environ, AGENTHOLD_URL="http://127.0.0.1:%d" % srv.port, AGENTHOLD_TOKEN="t",
                   AGENTHOLD_CONFIG="")
        try:
            p = subprocess.run([cli, "ls"], env=env, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
            err = p.stderr.decode("utf-8", "replace")
            said = any(w in err for w in want.split("|"))
            clean = "\x1b" not in err and "\x07" not in err and "\x1b" not in p.stdout.decode("utf-8", "replace")
            ok = p.returncode == 1 and said and clean
            print("%s %-24s status %d: %s" % ("ok  " if ok else "FAIL", name, p.returncode, err.strip()[:160]))
            if not ok:
                failures.append(name)
        except subprocess.TimeoutExpired:
            print("FAIL %-24s the command hung" % name)
            failures.append(name)
        finally:
            srv.close()
    # A hostile token (AGENTHOLD_TOKEN): refused before anything is sent;
    # a CR or LF would otherwise start a header of its own.
    ok_answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]"
    for name, token, want in (("CRLF in token", "t\r\nX-Injected: 1", "0x0d"),
                              ("LF in token", "t\nX-Injected: 1", "0x0a"),
                              ("space in token", "t X", "0x20"),
                              ("DEL in token", "t\x7f", "0x7f"),
                              ("UTF-8 in token", "t\u00e9", "0xc3"),
                              ("token over 1 KiB", "t" * 2000, "over 1024 bytes")):
        srv = ahserver.CannedServer(ok_answer)
        env = dict(os.environ, AGENTHOLD_URL="http://127.0.0.1:%d" % srv.port, AGENTHOLD_TOKEN=token,
                   AGENTHOLD_CONFIG="")
        try:
            p = subprocess.run([cli, "ls"], env=env, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
            err = p.stderr.decode("utf-8", "replace")
            ok = p.returncode == 1 and want in err and "token" in err and srv.heard == b""
            print("%s %-24s status %d: %s (server heard %d bytes)" % ("ok  " if ok else "FAIL", name,
                  p.returncode, err.strip()[:160], len(srv.heard)))
            if not ok:
                failures.append(name)
        finally:
            srv.close()
    # The same server with a good token: the command works (the cases above fail for their token).
    srv = ahserver.CannedServer(ok_answer)
    env = dict(os.environ, AGENTHOLD_URL="http://127.0.0.1:%d" % srv.port, AGENTHOLD_TOKEN="good-token",
               AGENTHOLD_CONFIG="")
    p = subprocess.run([cli, "ls"], env=env, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    srv.close()
    if p.returncode != 0 or b"Authorization: Bearer good-token\r\n" not in srv.heard:
        print("FAIL good token: status %d, heard %r" % (p.returncode, srv.heard[:300]))
        failures.append("good token")
    print("e2e.cli_hostile_server: %s" % ("FAILED: " + ", ".join(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
