#!/usr/bin/python3
"""tests/e2e/e2e_secrets.py: a tenant's egress secrets (docs/egress.md
"Secrets") on the real `agenthold serve` (fake driver), by the API and the
CLI as an admin uses them:

- api: PUT sets a header for a host (name, name:port, an address), again
  replaces it; GET lists host, port, header and when, never the value;
  DELETE removes it (404 after); only an admin; a tenant that does not
  exist is a 404.
- hostile: header names that are not HTTP tokens, that frame or route the
  request (Host, Content-Length, ...), too long; values with CR, LF, NUL,
  other control bytes, blanks at an end, too long, empty; hosts that are
  patterns, bad ports, bare IPv6, junk; a missing field, an unknown one;
  the 65th secret of a tenant. Each a 400 (409) naming the field, and
  none shows the value back.
- cli: `tenant secret set TENANT HOST --header NAME` reads the value from
  stdin (not argv), `secret ls`, `secret rm`.
- at rest: the database holds the value sealed (not its bytes, not its
  base64), the key file <data_dir>/secrets.key is 32 bytes, mode 0600; a
  sealed value moved to another row does not open (the tunnel side is
  tunnel.secrets'); a key file others may read stops the server with a
  sentence that says so; the log holds no value; removing the tenant
  removes its secrets.

usage: e2e_secrets.py AGENTHOLD_BINARY"""
import json
import os
import sqlite3
import stat
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahlocal  # noqa: E402
import ahserver  # noqa: E402

CTX = ahlocal.context("ah-e2e-secrets-")
check = CTX.check
SECRET = "Bearer sk-TESTSECRET-4f1c2d9e8b7a"
SECRET2 = "Bearer sk-OTHERSECRET-00aa11bb22"


def cli_stdin(srv, stdin, *args, tok=None):
    env = dict(srv.env)
    env["AGENTHOLD_TOKEN"] = tok or srv.admin
    p = subprocess.run([CTX.bin] + list(args), env=env, cwd=srv.dir, capture_output=True, text=True,
                       timeout=60, input=stdin)
    return p.returncode, p.stdout, p.stderr


def db_rows(srv, sql, *args):
    db = sqlite3.connect(os.path.join(srv.data, "agenthold.db"))
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def main():
    srv = ahlocal.Local(CTX, "secrets").start()
    adm = srv.admin
    base = "/api/v1/tenants/acme/egress/secrets"
    srv.ok("POST", "/api/v1/tenants", adm, {"name": "acme"})
    # The egress CA is made at the first start (its key 0600).
    ca_key, ca_pem = os.path.join(srv.data, "egress-ca.key"), os.path.join(srv.data, "egress-ca.pem")
    check(stat.S_IMODE(os.stat(ca_key).st_mode) == 0o600 and "BEGIN CERTIFICATE" in open(ca_pem).read(),
          "the egress CA: its certificate, its key 0600")
    first_ca = open(ca_pem).read()
    # The key is made at its first need, not before.
    key = os.path.join(srv.data, "secrets.key")
    check(not os.path.exists(key), "no secrets key before the first secret")

    # -- api
    j = srv.ok("PUT", base + "/api.example.com", adm, {"header": "Authorization", "value": SECRET})
    check(j["host"] == "api.example.com" and j["port"] == 443 and j["header"] == "Authorization"
          and "value" not in j and SECRET not in json.dumps(j), "PUT answers the row without the value: %r" % j)
    st = os.stat(key)
    check(stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == 32, "the key: 32 bytes, 0600: %o %d"
          % (stat.S_IMODE(st.st_mode), st.st_size))
    j = srv.ok("PUT", base + "/API.Example.com.:8443", adm, {"header": "X-Api-Key", "value": SECRET2})
    check(j["host"] == "api.example.com" and j["port"] == 8443, "name:port, normalised: %r" % j)
    srv.ok("PUT", base + "/127.0.0.2:9443", adm, {"header": "Authorization", "value": SECRET})
    srv.ok("PUT", base + "/%5B2001:db8::1%5D:443", adm, {"header": "Authorization", "value": SECRET})
    j = srv.ok("GET", base, adm)
    got = [(s["host"], s["port"], s["header"]) for s in j["secrets"]]
    check(got == [("127.0.0.2", 9443, "Authorization"), ("2001:db8::1", 443, "Authorization"),
                  ("api.example.com", 443, "Authorization"), ("api.example.com", 8443, "X-Api-Key")],
          "GET lists host, port and header: %r" % got)
    check(SECRET not in json.dumps(j) and SECRET2 not in json.dumps(j) and all(s["created_at"] for s in j["secrets"]),
          "GET never shows a value: %r" % j)
    # Again: replaced, one row.
    srv.ok("PUT", base + "/api.example.com", adm, {"header": "Authorization", "value": SECRET2})
    n = db_rows(srv, "SELECT count(*) FROM egress_secrets WHERE tenant = 'acme' AND host = 'api.example.com' "
                     "AND port = 443")[0][0]
    check(n == 1, "a second PUT replaces: %d rows" % n)

    # Only an admin; only a tenant that exists.
    tok = srv.ok("POST", "/api/v1/tokens", adm, {"tenant": "acme"})["token"]
    for method, body in (("GET", None), ("PUT", {"header": "A", "value": "b"}), ("DELETE", None)):
        path = base if method == "GET" else base + "/api.example.com"
        status, j = srv.call(method, path, tok, body)
        check(status == 403, "a tenant's own token may not %s secrets: %d %r" % (method, status, j))
    status, j = srv.call("PUT", "/api/v1/tenants/nobody/egress/secrets/a.example", adm,
                         {"header": "A", "value": "b"})
    check(status == 404 and "no tenant 'nobody'" in j["error"], "no such tenant: %d %r" % (status, j))

    # -- hostile
    cases = [
        ("a.example", {"header": "Bad Header", "value": "v"}, 400, "field 'header'"),
        ("a.example", {"header": "X:Y", "value": "v"}, 400, "not an HTTP field name"),
        ("a.example", {"header": "Host", "value": "v"}, 400, "frames or routes"),
        ("a.example", {"header": "content-length", "value": "1"}, 400, "frames or routes"),
        ("a.example", {"header": "Transfer-Encoding", "value": "chunked"}, 400, "frames or routes"),
        ("a.example", {"header": "X" * 65, "value": "v"}, 400, "longer than 64"),
        ("a.example", {"header": "", "value": "v"}, 400, "is empty"),
        ("a.example", {"header": "Authorization", "value": "Bearer x\r\nX-Injected: 1"}, 400, "CR or LF"),
        ("a.example", {"header": "Authorization", "value": "Bearer x\nY"}, 400, "CR or LF"),
        ("a.example", {"header": "Authorization", "value": "a\u0000b"}, 400, "NUL"),
        ("a.example", {"header": "Authorization", "value": "a\u0007b"}, 400, "control"),
        ("a.example", {"header": "Authorization", "value": " lead"}, 400, "blank"),
        ("a.example", {"header": "Authorization", "value": "x" * 8193}, 400, "8192"),
        ("a.example", {"header": "Authorization", "value": ""}, 400, "empty"),
        ("a.example", {"header": "Authorization"}, 400, "required"),
        ("a.example", {"header": "Authorization", "value": "v", "extra": 1}, 400, "extra"),
        ("a.example", {"header": "Authorization", "value": 3}, 400, "value"),
        ("%2A.example.com", {"header": "A", "value": "v"}, 400, "pattern"),
        ("a.example:0", {"header": "A", "value": "v"}, 400, "port"),
        ("a.example:65536", {"header": "A", "value": "v"}, 400, "port"),
        ("a.example:44x", {"header": "A", "value": "v"}, 400, "port"),
        ("2001:db8::1", {"header": "A", "value": "v"}, 400, "brackets"),
        ("bad_%7E.host", {"header": "A", "value": "v"}, 400, "host"),
        ("-a.example", {"header": "A", "value": "v"}, 400, "host"),
        ("a" * 300, {"header": "A", "value": "v"}, 400, "host"),
    ]
    for host, body, want, says in cases:
        status, j = srv.call("PUT", base + "/" + host, adm, body)
        text = json.dumps(j)
        check(status == want and says in (j or {}).get("error", ""), "PUT %s %r: want %d naming %r, got %d %r"
              % (host[:40], {k: str(v)[:30] for k, v in body.items()}, want, says, status, j))
        v = body.get("value")
        check(not isinstance(v, str) or len(v) < 4 or v not in text, "a refusal does not show the value back")
    # The cap: 64 a tenant.
    held = len(srv.ok("GET", base, adm)["secrets"])
    for i in range(64 - held):
        srv.ok("PUT", base + "/h%d.example" % i, adm, {"header": "A", "value": "v%d" % i})
    status, j = srv.call("PUT", base + "/one-more.example", adm, {"header": "A", "value": "v"})
    check(status == 409 and "64" in j["error"], "the 65th secret is refused: %d %r" % (status, j))
    srv.ok("PUT", base + "/h0.example", adm, {"header": "A", "value": "again"})  # replacing one is fine
    for i in range(64 - held):
        srv.ok("DELETE", base + "/h%d.example" % i, adm)

    # -- cli
    rc, out, err = cli_stdin(srv, SECRET + "\n", "tenant", "secret", "set", "acme", "cli.example:8443",
                             "--header", "X-Token")
    check(rc == 0 and "cli.example" in out and SECRET not in out + err, "CLI secret set: %d %r %r" % (rc, out, err))
    rows = db_rows(srv, "SELECT header, length(value) FROM egress_secrets WHERE host = 'cli.example' AND port = 8443")
    check(rows == [("X-Token", len(SECRET) + 29)], "the CLI's value, its newline dropped, sealed: %r" % rows)
    rc, out, err = cli_stdin(srv, "", "tenant", "secret", "set", "acme", "cli.example", "--header", "X-Token")
    check(rc != 0 and "stdin" in err, "an empty stdin is refused: %d %r" % (rc, err))
    rc, out, err = cli_stdin(srv, "v\n", "tenant", "secret", "set", "acme", "cli.example")
    check(rc != 0 and "--header" in err, "no --header: %d %r" % (rc, err))
    rc, out, err = cli_stdin(srv, "a\rb\n", "tenant", "secret", "set", "acme", "cli.example", "--header", "X")
    check(rc != 0 and "CR or LF" in err, "a CR in the value, by the CLI: %d %r" % (rc, err))
    rc, out, err = cli_stdin(srv, "", "tenant", "secret", "ls", "acme")
    check(rc == 0 and "cli.example" in out and "X-Token" in out and "8443" in out and SECRET not in out
          and SECRET2 not in out, "CLI secret ls: %r" % out)
    rc, out, err = cli_stdin(srv, "", "tenant", "secret", "ls", "acme", "--json")
    check(rc == 0 and len(json.loads(out)["secrets"]) == 5, "CLI secret ls --json: %r" % out)
    rc, out, err = cli_stdin(srv, "", "tenant", "secret", "rm", "acme", "cli.example:8443")
    check(rc == 0 and "removed" in out, "CLI secret rm: %d %r %r" % (rc, out, err))
    rc, out, err = cli_stdin(srv, "", "tenant", "secret", "rm", "acme", "cli.example:8443")
    check(rc != 0 and "no egress secret" in err, "CLI secret rm again: %d %r" % (rc, err))
    srv.ok("DELETE", base + "/%5B2001:db8::1%5D", adm)
    status, j = srv.call("DELETE", base + "/%5B2001:db8::1%5D", adm)
    check(status == 404, "DELETE again: %d %r" % (status, j))

    # -- at rest
    rows = db_rows(srv, "SELECT value FROM egress_secrets")
    import base64
    for (blob,) in rows:
        check(isinstance(blob, bytes) and blob[0] == 1 and len(blob) >= 29, "sealed: version 1, nonce, tag")
        for s in (SECRET, SECRET2):
            check(s.encode() not in blob and base64.b64encode(s.encode()) not in blob, "no plain value in the row")
    with open(os.path.join(srv.data, "agenthold.db"), "rb") as f:
        raw = f.read()
    check(SECRET.encode() not in raw and SECRET2.encode() not in raw, "the database file has no value")
    srv.stop()
    with open(CTX.log, errors="replace") as f:
        log = f.read()
    check(SECRET not in log and SECRET2 not in log and "egress secret for api.example.com:443 (header Authorization)"
          in log, "the log names host and header, never the value")

    # A key others may read stops the server, saying so.
    os.chmod(key, 0o640)
    env = dict(srv.env)
    p = ahserver.serve_once(CTX.bin, env, cwd=CTX.src, timeout=30)
    rc, out = p.returncode, p.stdout + p.stderr
    check(rc != 0 and "secrets.key" in out and "0640" in out and "chmod 600" in out,
          "a key of mode 0640 stops the server: %d %r" % (rc, out[-600:]))
    os.chmod(key, 0o600)
    srv.start()
    check(len(srv.ok("GET", base, adm)["secrets"]) == 3, "kept across a restart")
    check(open(ca_pem).read() == first_ca, "the same CA after a restart")
    srv.ok("DELETE", "/api/v1/tenants/acme", adm)
    n = db_rows(srv, "SELECT count(*) FROM egress_secrets")[0][0]
    check(n == 0, "the secrets go with the tenant: %d left" % n)
    srv.stop()
    print("ok: %d checks" % check.count)


if __name__ == "__main__":
    sys.exit(ahserver.run(main, CTX.fail, CTX.procs, CTX.tmp, CTX.log))
