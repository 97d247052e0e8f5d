#!/usr/bin/python3
"""tests/docker/secrets_docker.py: secrets the sandbox never sees
(docs/egress.md "Secrets"), the whole path as a user has it: the Docker
driver, the shipped default runtime (debian), the server's default
egress (the tunnel), the CLI for the secret.

Upstreams of the test's own, on 127.0.0.2 (opened by the tenant's list,
the dangerous switch tests use): two HTTPS servers (Python's ssl) whose
certificate a test CA signed, made here with openssl, which the server
trusts through sandbox.egress_upstream_ca_file. Each writes down the
Authorization header of every request it gets.

- `agenthold tenant secret set default 127.0.0.2:A --header Authorization`
  with the value on stdin;
- inside the sandbox, the image's own curl, as the agent: `curl
  https://127.0.0.2:A/` gets through (it trusts the installation's CA
  through the variables sandboxd set) and the upstream got the secret,
  also in place of a header the agent sent itself; trusting the test CA
  alone fails there (the server terminated the TLS), and succeeds for
  127.0.0.2:B, which has no secret: that upstream sees the sandbox's own
  TLS and its own header, untouched;
- no trace of the secret: `env`, the home (grep -r), /proc/*/environ of
  every process (as root, through the engine) and the process list (ps)
  inside the sandbox, the trust files sandboxd wrote, the server's log,
  the audit rows (which say the header was added, by name).

usage: secrets_docker.py AGENTHOLD_BINARY SOURCE_DIR (sandboxd next to it)
Exits 77 without a Docker Engine. Pool 10.213.64.0/22, prefix dockersecrets<pid>."""
import codecs
import os
import sys
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import Fail, Harness, exec_in, put_home_file  # noqa: E402
import ahserver  # noqa: E402  (on the path ahdocker set)

h = Harness("docker.secrets", sys.argv[1], "10.213.64.0/22")
SOURCE = os.path.abspath(sys.argv[2])
for k in ("AGENTHOLD_SANDBOX_DEFAULT_IMAGE", "AGENTHOLD_SANDBOX_DEFAULT_CPUS",
          "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB"):
    h.env.pop(k, None)
h.env["AGENTHOLD_CATALOG_PATH"] = os.path.join(SOURCE, "catalog", "runtimes.json")
SECRET = "Bearer sk-DOCKER-SECRET-5a4b3c2d1e"
SECRET_MARK = "DOCKER-SECRET-5a4b3c2d1e"


def exec_(name, cmd, timeout=120):
    st, r = h.api("POST", "/api/v1/agents/%s/exec" % name, {"cmd": cmd}, timeout=timeout)
    h.check(st == 200 and isinstance(r, dict), "%s: exec %r: HTTP %d %r" % (name, cmd, st, r))
    return r


def scenario(h):
    ca, cert, key = ahserver.make_test_ca(os.path.join(h.tmp, "testca"), "127.0.0.2", "docker.secrets", Fail)
    h.env["AGENTHOLD_SANDBOX_EGRESS_UPSTREAM_CA_FILE"] = ca
    a, ta = ahserver.upstream("127.0.0.2", h.cleanups, cert, key)
    b, tb = ahserver.upstream("127.0.0.2", h.cleanups, cert, key)
    h.start_server()
    deadline = time.time() + 540
    while True:
        st, j = h.api("GET", "/api/v1/runtimes")
        rts = {(r.get("alias") or r.get("name")): r for r in j["runtimes"]}
        state = rts.get("debian", {}).get("image_state")
        if state in ("present", "error", "missing") or time.time() > deadline:
            break
        time.sleep(1)
    if state != "present":
        h.check(not ahserver.required("docker"), "the debian runtime cannot be had here (%s), and docker is "
                "required (AH_TEST_REQUIRE)" % state)
        print("\n*** docker.secrets SKIPPED: the debian runtime's image cannot be had here (%s) ***\n" % state,
              file=sys.stderr)
        h.stop_server()
        return
    st, t = h.api("PATCH", "/api/v1/tenants/default", {"egress_allow": [ta, tb]})
    h.check(st == 200, "the tenant's list names the upstreams: %d %r" % (st, t))
    rc, out, err = h.run_cli("tenant", "secret", "set", "default", ta, "--header", "Authorization",
                             stdin=SECRET + "\n")
    h.check(rc == 0 and SECRET_MARK not in out + err, "the secret, by the CLI from stdin: %d %r %r" % (rc, out, err))

    st, ag = h.api("POST", "/api/v1/agents?wait=1", {"name": "sec", "runtime": "debian"}, timeout=240)
    h.check(st in (200, 201) and ag["state"] == "running", "create sec (debian): %d %r" % (st, ag))
    cid = h.container(ag["id"])["Id"]

    # Through: the agent's own curl, trusting what sandboxd set up.
    r = exec_("sec", "curl -sS --max-time 30 https://%s/hello" % ta)
    h.check(r["status"] == 0 and r["stdout"] == "ok /hello\n", "curl reaches the host with a secret: %r" % r)
    h.check(a.seen == [("/hello", [SECRET])], "the upstream got the secret: %r" % a.seen)
    r = exec_("sec", "curl -sS --max-time 30 -H 'Authorization: Bearer agent-own' https://%s/again" % ta)
    h.check(r["status"] == 0 and a.seen[-1] == ("/again", [SECRET]), "the agent's own header is replaced: %r %r" % (r, a.seen))
    # The server terminated it: the test CA alone does not verify what the sandbox saw there.
    put_home_file(cid, "testca.pem", open(ca, "rb").read())
    r = exec_("sec", "curl -sS --max-time 30 --cacert ~/testca.pem https://%s/x" % ta)
    h.check(r["status"] != 0 and len(a.seen) == 2, "trusting the test CA alone fails at the host with a "
            "secret (its TLS is the server's): %r" % r)
    # No secret: untouched, the upstream's own TLS and the agent's own header.
    r = exec_("sec", "curl -sS --max-time 30 --cacert ~/testca.pem -H 'Authorization: Bearer agent-own' "
              "https://%s/plain" % tb)
    h.check(r["status"] == 0 and r["stdout"] == "ok /plain\n" and b.seen == [("/plain", ["Bearer agent-own"])],
            "a host without a secret is carried untouched: %r %r" % (r, b.seen))

    # No trace inside: env, the home, every process's environment (as root), ps, the trust files.
    env = exec_("sec", "env")["stdout"]
    h.check("SSL_CERT_FILE=/tmp/agenthold-ca/ca-bundle.pem" in env
            and "NODE_EXTRA_CA_CERTS=/tmp/agenthold-ca/egress-ca.pem" in env, "the variables point at the CA: %r" % env)
    h.check(SECRET_MARK not in env, "env holds no trace of the secret")
    r = exec_("sec", "grep -rl %s /home/agent /tmp/agenthold-ca; echo rc=$?" % SECRET_MARK)
    h.check(r["stdout"].strip() == "rc=1", "the home and the trust files hold no trace: %r" % r)
    r = exec_("sec", "ps auxww")
    h.check(r["status"] == 0 and "PID" in r["stdout"] and SECRET_MARK not in r["stdout"],
            "the process list holds no trace: %r" % r["stdout"][:300])
    # Searched for in rot13, so that the search's own command line (which
    # names what it looks for) is not a match.
    out = exec_in(cid, ["sh", "-c", "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat $f; done "
                        "| tr '\\0A-Za-z' '\\nN-ZA-Mn-za-m' > /tmp/scan; grep -c %s /tmp/scan; "
                        "grep -c %s /tmp/scan; rm -f /tmp/scan"
                        % (codecs.encode(SECRET_MARK, "rot13"), codecs.encode("AGENTHOLD_EGRESS_PORT=", "rot13"))])
    counts = out.split()
    # The control: sandboxd's own environment as the engine gave it is read.
    h.check(len(counts) == 2 and counts[0] == "0" and int(counts[1]) >= 1,
            "no process's environment or command line holds it (read as root; sandboxd's "
            "environment was read): %r" % out)
    # The server: its log and the audit.
    st, j = h.api("GET", "/api/v1/agents/sec/operations?operation=egress&limit=100")
    rows = j["operations"] if st == 200 else []
    h.check(any(r["ok"] and "TLS terminated" in r["detail"] and "'Authorization'" in r["detail"] for r in rows),
            "the audit says the header was added: %r" % [r["detail"] for r in rows][:6])
    h.check(SECRET_MARK not in repr(rows), "the audit holds no trace of the secret")
    st, a2 = h.api("DELETE", "/api/v1/agents/sec?wait=1", timeout=120)
    h.check(st == 200, "rm: %d %r" % (st, a2))
    h.check(SECRET_MARK not in h.server_log_tail(10 ** 7), "the server's log holds no trace of the secret")
    h.finish()


sys.exit(h.run(scenario))
