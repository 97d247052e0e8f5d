#!/usr/bin/python3
"""tests/e2e/e2e_tls.py: what a network peer can reach of the server.

Usage: e2e_tls.py AGENTHOLD

1. Listen addresses are honoured exactly: for server.listen and
   sandbox.tunnel_listen in each form (an IPv4 literal, 0.0.0.0, an IPv6
   literal, every address), the listening sockets (ss -ltnH) show
   exactly that address; a host that is not an IP address is refused at
   start naming the key.
2. TLS: with server.tls_cert/tls_key (a certificate made here with
   openssl), the API answers HTTPS only (a plain HTTP request gets no
   HTTP answer), the CLI speaks https with the server's certificate
   (create, ls, exec, fs put/get round trip, term over wss with the
   shell's exit status), a client trusting another CA is refused, and
   the server warns at start when it listens off loopback without TLS."""
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import traceback
import http.client

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahserver  # noqa: E402

AGENTHOLD = sys.argv[1]
TMP = tempfile.mkdtemp(prefix="ah-e2e-tls-")


class Fail(Exception):
    pass


PROCS = []      # every server started, judged at the end (ahserver.verdict)
check = ahserver.Checks(Fail)


def listening(port):
    out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
    addrs = set()
    for line in out.splitlines():
        local = line.split()[3]
        host, _, p = local.rpartition(":")
        if p == str(port):
            addrs.add(host)
    return addrs


class Server:
    def __init__(self, name, listen, tunnel, extra=None):
        self.data = os.path.join(TMP, name)
        self.log_path = os.path.join(TMP, name + ".log")
        env = ahserver.server_env(self.data, 0, 0, extra=extra)
        env["AGENTHOLD_SERVER_LISTEN"] = listen
        env["AGENTHOLD_SANDBOX_TUNNEL_LISTEN"] = tunnel
        self.env = env
        self.proc = ahserver.serve(AGENTHOLD, env, self.log_path, procs=PROCS, ready=False)

    def wait_line(self, pattern, seconds=15):
        """The log once pattern is in it, the server exited, or seconds
        passed (the caller's check tells which)."""
        try:
            ahserver.wait_until(lambda: ahserver.log_has(self.log_path, pattern) or self.proc.poll() is not None,
                                seconds, "the log says %r" % pattern, Fail, 0.1)
        except Fail:
            pass
        return ahserver.log_tail(self.log_path, 1 << 30)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def test_listen_forms():
    forms = [("127.0.0.1", {"127.0.0.1"}), ("0.0.0.0", {"0.0.0.0"}), ("[::1]", {"[::1]"}),
             ("", {"*"})]
    for host, want in forms:
        api, tun = ahserver.free_port(fail=Fail), None
        tun = ahserver.free_port(avoid={api}, fail=Fail)
        s = Server("listen-%s" % (host.strip("[]").replace(":", "_").replace(".", "_") or "all"),
                   "%s:%d" % (host, api), "%s:%d" % (host, tun))
        try:
            text = s.wait_line(r"agenthold serving")
            check("agenthold serving" in text, "server with listen '%s' started: %s" % (host, text[-800:]))
            check(listening(api) == want, "server.listen '%s:%d': listening on %r, want %r"
                  % (host, api, listening(api), want))
            check(listening(tun) == want, "sandbox.tunnel_listen '%s:%d': listening on %r, want %r"
                  % (host, tun, listening(tun), want))
            warned = "plain HTTP" in text
            check(warned == (host not in ("127.0.0.1", "[::1]")),
                  "the plain-HTTP warning is given exactly off loopback (listen '%s'): %r" % (host, warned))
        finally:
            s.stop()
    for key, env in (("server.listen", "AGENTHOLD_SERVER_LISTEN"), ("sandbox.tunnel_listen",
                                                                    "AGENTHOLD_SANDBOX_TUNNEL_LISTEN")):
        extra = {env: "localhost:%d" % ahserver.free_port(fail=Fail)}
        p = ahserver.serve_once(AGENTHOLD, dict(ahserver.server_env(os.path.join(TMP, "bad"), ahserver.free_port(fail=Fail),
                                                                    ahserver.free_port(fail=Fail)), **extra), timeout=30)
        check(p.returncode != 0 and key in p.stderr and "IP address" in p.stderr,
              "a host name in %s is refused at start naming the key: %d %r" % (key, p.returncode, p.stderr[-300:]))


def make_cert(name, cn):
    key, cert = os.path.join(TMP, name + ".key"), os.path.join(TMP, name + ".pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=" + cn, "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def cli(server, *args, env=None, timeout=60, input=None):
    e = dict(server.env, AGENTHOLD_SERVER_DATA_DIR=server.data)
    e.pop("AGENTHOLD_URL", None)
    e.update(env or {})
    return subprocess.run([AGENTHOLD] + list(args), env=e, capture_output=True, timeout=timeout, input=input)


def term(server, name, keys):
    import pty
    import select
    pid, fd = pty.fork()
    if pid == 0:
        e = dict(server.env, AGENTHOLD_SERVER_DATA_DIR=server.data)
        os.execve(AGENTHOLD, [AGENTHOLD, "term", name], e)
    out, sent, t0 = b"", False, time.time()
    while time.time() - t0 < 30:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                d = os.read(fd, 4096)
            except OSError:
                break
            if not d:
                break
            out += d
        if not sent and (b"$ " in out or b"# " in out or time.time() - t0 > 3):
            os.write(fd, keys)
            sent = True
    _, st = os.waitpid(pid, 0)
    return os.WEXITSTATUS(st), out


def test_tls():
    cert, key = make_cert("server", "127.0.0.1")
    other, _ = make_cert("other", "127.0.0.1")
    api, tun = ahserver.free_port(fail=Fail), None
    tun = ahserver.free_port(avoid={api}, fail=Fail)
    s = Server("tls", "127.0.0.1:%d" % api, "127.0.0.1:%d" % tun,
               extra={"AGENTHOLD_SERVER_TLS_CERT": cert, "AGENTHOLD_SERVER_TLS_KEY": key})
    try:
        text = s.wait_line(r"agenthold serving")
        check("agenthold serving: api https://127.0.0.1:%d" % api in text, "the server says it serves https: %s" % text[-600:])
        # HTTPS with the server's certificate: answers
        ctx = ssl.create_default_context(cafile=cert)
        c = http.client.HTTPSConnection("127.0.0.1", api, context=ctx, timeout=10)
        c.request("GET", "/healthz")
        check(c.getresponse().status == 200, "healthz over https")
        c.close()
        # Plain HTTP on the TLS port: no HTTP answer
        sk = socket.create_connection(("127.0.0.1", api), timeout=5)
        sk.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            data = sk.recv(4096)
        except (ConnectionResetError, socket.timeout):
            data = b""
        sk.close()
        check(not data.startswith(b"HTTP/1.1 200"), "plain HTTP on the TLS port gets no answer: %r" % data[:80])
        # Another CA: refused
        ctx2 = ssl.create_default_context(cafile=other)
        try:
            c = http.client.HTTPSConnection("127.0.0.1", api, context=ctx2, timeout=10)
            c.request("GET", "/healthz")
            c.getresponse()
            check(False, "a client trusting another CA must be refused")
        except ssl.SSLError:
            pass
        # The CLI: https with the server's own certificate from the configuration
        p = cli(s, "create", "tlsy")
        check(p.returncode == 0, "create over https: %r" % p.stderr)
        p = cli(s, "start", "tlsy")
        check(p.returncode == 0, "start over https: %r" % p.stderr)
        p = cli(s, "ls")
        check(p.returncode == 0 and b"tlsy" in p.stdout, "ls over https: %r" % (p.stdout + p.stderr))
        p = cli(s, "exec", "tlsy", "--", "sh", "-c", "echo secret-$((6*7))")
        check(p.returncode == 0 and b"secret-42" in p.stdout, "exec over https: %r" % (p.stdout + p.stderr))
        blob = os.urandom(3 << 20)
        src, dst = os.path.join(TMP, "blob"), os.path.join(TMP, "blob.back")
        with open(src, "wb") as f:
            f.write(blob)
        p = cli(s, "fs", "put", "tlsy", "blob", src)
        check(p.returncode == 0, "fs put over https: %r" % p.stderr)
        p = cli(s, "fs", "get", "tlsy", "blob", dst)
        check(p.returncode == 0 and open(dst, "rb").read() == blob, "fs get over https: same bytes")
        p = cli(s, "ls", env={"AGENTHOLD_CA": other})
        check(p.returncode != 0 and b"certificate" in p.stderr.lower(), "the CLI trusting another CA is refused: %r"
              % p.stderr)
        status, out = term(s, "tlsy", b"echo hello-$((6*7)); exit 5\r")
        check(status == 5 and b"hello-42" in out, "agenthold term over wss: exit %d, %r" % (status, out[-200:]))
    finally:
        s.stop()


def main():
    try:
        test_listen_forms()
        test_tls()
        ahserver.stop_all(PROCS)
        for why in ahserver.verdict(PROCS):
            raise Fail(why)
        print("e2e_tls: %d checks passed" % check.count)
        return 0
    except Exception as e:
        print("e2e_tls: FAILED after %d checks: %s" % (check.count, e), file=sys.stderr)
        if not isinstance(e, Fail):
            traceback.print_exc()
        for name in sorted(os.listdir(TMP)):
            if name.endswith(".log"):
                with open(os.path.join(TMP, name), errors="replace") as f:
                    sys.stderr.write("--- %s (end)\n%s\n" % (name, f.read()[-4000:]))
        return 1
    finally:
        ahserver.stop_all(PROCS)
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
