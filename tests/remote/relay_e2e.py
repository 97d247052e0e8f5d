#!/usr/bin/python3
"""tests/remote/relay_e2e.py: hostd's tunnel relay (hostd.tunnel_relay,
docs/hostd.md "The tunnel across machines") with no Docker Engine: the
relay is hostd's own, the engine is only asked when a call comes.

- tls://: a TLS echo server here stands for the server's tunnel (a
  certificate for 127.0.0.1 made with openssl, its CA given as
  hostd.tunnel_ca); bytes written to hostd's tunnel socket come back
  through TLS, both ways, several connections at once, a 1 MiB round trip.
- The same relay with another CA: the server's certificate is refused,
  the connection closed at once, hostd's log says why.
- tcp://: plain, the same echo.
- A relay target that is not tcp:// or tls:// is refused by the
  configuration, naming the key.

usage: relay_e2e.py AGENTHOLD_BINARY. Ports from ahserver.free_port."""
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahserver  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="ah-relay-")
PROCS = []


class Fail(Exception):
    pass


check = ahserver.Checks(Fail)
def echo_server(port, tls_ctx):
    """Echoes every connection (through TLS when tls_ctx) until the test ends."""
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(16)
    ls.settimeout(0.3)
    stop = threading.Event()

    def one(c):
        try:
            if tls_ctx:
                c = tls_ctx.wrap_socket(c, server_side=True)
            while True:
                data = c.recv(65536)
                if not data:
                    break
                c.sendall(data)
        except (OSError, ssl.SSLError):
            pass
        finally:
            c.close()

    def serve():
        while not stop.is_set():
            try:
                c, _ = ls.accept()
            except OSError:
                continue
            threading.Thread(target=one, args=(c,), daemon=True).start()
        ls.close()
    threading.Thread(target=serve, daemon=True).start()
    return stop


def start_hostd(name, relay, ca=None):
    data = os.path.join(TMP, name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTHOLD_")}
    env.update({"AGENTHOLD_HOSTD_ENDPOINT": "ipc://%s/hostd.sock" % os.path.join(TMP, name + "-run"),
                "AGENTHOLD_HOSTD_DATA_DIR": data,
                "AGENTHOLD_SERVER_DATA_DIR": os.path.join(TMP, "server-" + name),
                "AGENTHOLD_HOSTD_NAME": name,
                "AGENTHOLD_HOSTD_TUNNEL_RELAY": relay,
                # No engine: hostd starts all the same; the relay is its own.
                "AGENTHOLD_SANDBOX_DOCKER_SOCKET": os.path.join(TMP, "no-docker.sock"),
                "AGENTHOLD_SANDBOX_DOCKER_NAME_PREFIX": "ahrelay%d" % os.getpid()})
    if ca:
        env["AGENTHOLD_HOSTD_TUNNEL_CA"] = ca
    log = open(os.path.join(TMP, name + ".log"), "w")
    p = subprocess.Popen([BIN, "hostd"], env=env, cwd=TMP, stdout=log, stderr=log)
    log.close()
    PROCS.append(p)
    sock = os.path.join(data, "run", "tunnel.sock")
    deadline = time.time() + 15
    while not os.path.exists(sock):
        check(time.time() < deadline and p.poll() is None,
              "hostd %s started: %s" % (name, open(os.path.join(TMP, name + ".log")).read()[-2000:]))
        time.sleep(0.05)
    return sock


def roundtrip(sock_path, payload):
    """payload through the relay and back; read while writing (an echo
    that is not read stops the writer, as any stream would)."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(20)
    s.connect(sock_path)
    got = []

    def reader():
        n = 0
        while n < len(payload):
            try:
                data = s.recv(65536)
            except (ConnectionResetError, socket.timeout):   # closed with our bytes unread
                break
            if not data:
                break
            got.append(data)
            n += len(data)
    t = threading.Thread(target=reader)
    t.start()
    try:
        s.sendall(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass
    t.join()
    s.close()
    return b"".join(got)


def main():
    cert, key = os.path.join(TMP, "srv.crt"), os.path.join(TMP, "srv.key")
    other, other_key = os.path.join(TMP, "other.crt"), os.path.join(TMP, "other.key")
    for c, k, cn in ((cert, key, "127.0.0.1"), (other, other_key, "someone-else")):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=" + cn, "-addext", "subjectAltName=IP:" + cn
                        if cn[0].isdigit() else "subjectAltName=DNS:" + cn,
                        "-keyout", k, "-out", c], check=True, capture_output=True, timeout=60)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    tls_port = ahserver.free_port(fail=Fail)
    stops = [echo_server(tls_port, ctx)]
    plain_port = ahserver.free_port(fail=Fail)
    stops.append(echo_server(plain_port, None))
    try:
        sock = start_hostd("tls", "tls://127.0.0.1:%d" % tls_port, cert)
        check(os.stat(sock).st_mode & 0o777 == 0o666, "the relay's socket is 0666 like the server's")
        check(roundtrip(sock, b"hello through TLS\n") == b"hello through TLS\n", "TLS echo")
        results = {}

        def many(i):
            results[i] = roundtrip(sock, (b"%d-" % i) * 3000)
        ts = [threading.Thread(target=many, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        check(all(results[i] == (b"%d-" % i) * 3000 for i in range(8)), "8 connections at once")
        big = os.urandom(1 << 20)
        check(roundtrip(sock, big) == big, "1 MiB both ways through TLS")

        bad = start_hostd("badca", "tls://127.0.0.1:%d" % tls_port, other)
        check(roundtrip(bad, b"x") == b"", "a certificate the CA did not sign: the connection closes")
        time.sleep(0.3)
        log = open(os.path.join(TMP, "badca.log")).read()
        check("cannot go on to the server" in log and "TLS" in log,
              "hostd says why: %s" % log[-800:])

        plain = start_hostd("tcp", "tcp://127.0.0.1:%d" % plain_port)
        check(roundtrip(plain, b"plain\n") == b"plain\n", "tcp:// echo")

        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTHOLD_")}
        env["AGENTHOLD_HOSTD_TUNNEL_RELAY"] = "http://127.0.0.1:1"
        env["AGENTHOLD_HOSTD_DATA_DIR"] = os.path.join(TMP, "refused")
        p = subprocess.run([BIN, "hostd"], env=env, cwd=TMP, capture_output=True, text=True,
                           timeout=30)
        check(p.returncode != 0 and "hostd.tunnel_relay" in p.stdout + p.stderr,
              "a bad relay target is refused naming the key: %r" % (p.stdout + p.stderr)[-500:])
    finally:
        for s in stops:
            s.set()
    print("remote.relay: %d checks passed" % check.count)


def logs():
    for f in sorted(os.listdir(TMP)):
        if f.endswith(".log"):
            print("---- %s ----\n%s" % (f, open(os.path.join(TMP, f)).read()[-3000:]), file=sys.stderr)


def run():
    try:
        main()
    except Exception:
        logs()
        raise


sys.exit(ahserver.run(run, Fail, PROCS, TMP, os.devnull))
