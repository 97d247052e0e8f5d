#!/usr/bin/python3
"""e2e.cli_hostile_server: the agenthold command against a server that
answers with hostile bytes (cli/http.c, proto/httpresp.c): each answer
ends the command with status 1 and a sentence that names the problem,
within seconds, never a crash, a hang or garbage on the terminal.

usage: e2e_cli_hostile_server.py AGENTHOLD"""
import os
import socket
import subprocess
import sys
import threading

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


class Server:
    def __init__(self, answer):
        self.answer = answer
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", ahserver.free_port()))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.t = threading.Thread(target=self.serve, daemon=True)
        self.t.start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                c.settimeout(10)
                data = b""
                while b"\r\n\r\n" not in data:
                    more = c.recv(65536)
                    if not more:
                        break
                    data += more
                c.sendall(self.answer)
            except OSError:
                pass
            finally:
                c.close()

    def close(self):
        self.sock.close()


def main():
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 2
    cli = os.path.abspath(sys.argv[1])
    failures = []
    for name, (answer, want) in CASES.items():
        srv = Server(answer)
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
    print("e2e.cli_hostile_server: %s" % ("FAILED: " + ", ".join(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
