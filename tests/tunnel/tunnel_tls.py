#!/usr/bin/python3
"""tests/tunnel/tunnel_tls.py: the tunnel's TLS listener (sandbox.tunnel_tls:
on), dialled directly rather than through hostd's relay (remote.relay and
docker.hostd cover that way).

The real server (fake driver, `fake_sandboxd: external`: a start writes the
agent's boot card and waits for the hello of a sandboxd someone else runs)
with a certificate for 127.0.0.1 made here by openssl. The sandbox's part
is played by tests/tunnel/client.py (websockets + yamux + the hello), which
trusts the CA given in SSL_CERT_FILE:
- wss:// with the server's CA: the upgrade is accepted with the agent's
  token, the hello is answered and the agent becomes running.
- wss:// with a wrong token: 401, TLS or not.
- wss:// trusting another CA: the client refuses the server's certificate;
  the agent is not connected.
- ws:// (no TLS) on the TLS port: no upgrade.
The static sandboxd speaks no TLS (a sandbox dials the server's unix socket,
or hostd's relay: docs/hostd.md), so it takes no part here.

usage: tunnel_tls.py AGENTHOLD_BINARY. Ports from ahserver.free_port."""
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import http.client

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import ahserver  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
CLIENT = os.path.join(HERE, "client.py")
TMP = tempfile.mkdtemp(prefix="ah-tunnel-tls-")
DATA = os.path.join(TMP, "data")
LOG = os.path.join(TMP, "server.log")
PROCS = []


class Fail(Exception):
    pass


check = ahserver.Checks(Fail)


def make_cert(name, cn):
    cert, key = os.path.join(TMP, name + ".crt"), os.path.join(TMP, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=" + cn,
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def https(port, ca, method, path, body=None, token=None):
    ctx = ssl.create_default_context(cafile=ca)
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    try:
        h = {"Authorization": "Bearer " + token} if token else {}
        if body is not None:
            body = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        raw = r.read()
        return r.status, (json.loads(raw) if raw else None)
    finally:
        c.close()


def client(url, agent, token, mode, ca, arg=None, timeout=30):
    env = dict(os.environ)
    env["SSL_CERT_FILE"] = ca
    p = subprocess.run(["/usr/bin/python3", CLIENT, url, agent, token, mode] + ([arg] if arg else []),
                       env=env, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout.strip(), p.stderr


def main():
    cert, key = make_cert("server", "127.0.0.1")
    other, _ = make_cert("other", "someone-else")
    api = ahserver.free_port(fail=Fail)
    tun = ahserver.free_port(avoid={api}, fail=Fail)
    env = ahserver.server_env(DATA, api, tun, driver="fake", extra={
        "AGENTHOLD_SERVER_TLS_CERT": cert, "AGENTHOLD_SERVER_TLS_KEY": key,
        "AGENTHOLD_SANDBOX_TUNNEL_TLS": "on", "AGENTHOLD_SANDBOX_FAKE_SANDBOXD": "external"})
    # Ready when it answers on https.
    ahserver.serve(BIN, env, LOG, cwd=TMP, procs=PROCS, fail=Fail, seconds=30,
                   ready=lambda: https(api, cert, "GET", "/healthz")[0] == 200)
    token = ahserver.read_token(DATA)
    st, a = https(api, cert, "POST", "/api/v1/agents", {"name": "tls1"}, token)
    check(st in (200, 201, 202), "create: %d %r" % (st, a))
    aid = a["id"]
    boot = os.path.join(DATA, "fake", aid, "boot.json")
    ahserver.wait_until(lambda: os.path.exists(boot), 20, "the boot card is written", Fail)
    with open(boot) as f:
        card = json.load(f)
    url = "wss://127.0.0.1:%d/tunnel" % tun

    rc, out, err = client(url, aid, "0" * 64, "auth", cert)
    check(out == "STATUS 401", "a wrong token over TLS: 401: %r %s" % (out, err[-300:]))

    rc, out, err = client(url, aid, card["token"], "auth", other)
    check(out != "OK" and "CERTIFICATE_VERIFY_FAILED" in err,
          "a client trusting another CA refuses the server: %r %s" % (out, err[-300:]))

    rc, out, err = client("ws://127.0.0.1:%d/tunnel" % tun, aid, card["token"], "auth", cert)
    check(out != "OK" and not out.startswith("STATUS 101"),
          "plain ws:// on the TLS port gets no upgrade: %r %s" % (out, err[-300:]))
    st, a = https(api, cert, "GET", "/api/v1/agents/tls1", token=token)
    check(a["state"] != "running", "no sandbox connected yet: %r" % a["state"])

    # The right CA, the agent's token: upgraded, the hello answered, running.
    env2 = dict(os.environ)
    env2["SSL_CERT_FILE"] = cert
    peer = subprocess.Popen(["/usr/bin/python3", CLIENT, url, aid, card["token"], "ok", "30"],
                            env=env2, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    PROCS.append(peer)
    deadline = time.time() + 20
    while True:
        st, a = https(api, cert, "GET", "/api/v1/agents/tls1", token=token)
        if a["state"] == "running":
            break
        check(peer.poll() is None and time.time() < deadline,
              "the agent runs once its sandbox dialled wss:// (state %s): %s" % (a["state"], peer.stderr.read()[-500:] if peer.poll() is not None else ""))
        time.sleep(0.1)
    with open(LOG) as f:
        text = f.read()
    check("TLS" in text or "tls" in text, "the server's log names its TLS tunnel listener")
    PROCS[0].terminate()
    check(PROCS[0].wait(timeout=30) == 0, "the server exits 0 on SIGTERM")
    print("tunnel.tls: %d checks passed" % check.count)


sys.exit(ahserver.run(main, Fail, PROCS, TMP, LOG))
