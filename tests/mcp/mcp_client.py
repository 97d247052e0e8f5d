#!/usr/bin/python3
"""tests/mcp/mcp_client.py: a real MCP client, the official Go SDK's
(github.com/modelcontextprotocol/go-sdk v1.8.0, pinned in
tests/mcp/goclient/go.mod and go.sum), against POST /mcp of the real
`agenthold serve` on the fake driver.

The client (tests/mcp/goclient/main.go) is built into OUTDIR with the Go
at /usr/local/go (else the one on PATH), GOFLAGS=-mod=readonly, its module
and build caches the machine's, shared by the build trees and kept between
runs ($AH_TEST_MCP_CACHE, else /var/cache/agenthold-mcp as root,
~/.cache/agenthold-mcp otherwise: a cold build takes a minute or more on 2
cores, a warm one seconds). No Go, or no way to the module proxy: exit 77,
said on stderr (ctest reports it skipped). It connects with the
streamable HTTP transport and the bearer token as the SDK does by
default, then lists the tools, creates an agent, runs a command, writes,
reads, lists and searches a file, lists the resources and their template
and reads resources (text, a listing, blobs, one just under the 8 MiB
cap, one over it, hostile paths, another tenant's agent "theirs", made
here with a file in it, as none) and meets an unknown tool and a path
out of the home. Afterwards,
through the REST API: the agent it made exists in the token's tenant,
and the routes' audit trail holds its create, exec and file operations.

usage: mcp_client.py AGENTHOLD_BINARY OUTDIR"""
import os
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahlocal  # noqa: E402
import ahserver  # noqa: E402

OUTDIR = os.path.abspath(sys.argv.pop(2)) if len(sys.argv) > 2 else None
CTX = ahlocal.context("ah-mcp-client-")
check = CTX.check
Fail = CTX.fail
HERE = os.path.dirname(os.path.abspath(__file__))


def skip(why):
    sys.stderr.write("SKIPPED: the MCP Go SDK client cannot be built here: %s\n" % why)
    shutil.rmtree(CTX.tmp, ignore_errors=True)
    sys.exit(77)


def build():
    go = "/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else shutil.which("go")
    if not go:
        skip("no Go toolchain (/usr/local/go or PATH)")
    # The module and build caches are the machine's, shared by every build
    # tree (plain, ASan) and kept between runs, as tests/acp's are: a cold
    # build takes minutes on 2 cores, a warm one seconds. go.mod and go.sum
    # pin the SDK; -mod=readonly keeps the source tree untouched.
    cache = os.environ.get("AH_TEST_MCP_CACHE") or ("/var/cache/agenthold-mcp" if os.geteuid() == 0
                                                    else os.path.expanduser("~/.cache/agenthold-mcp"))
    os.makedirs(cache, exist_ok=True)
    env = dict(os.environ, GOPATH=os.path.join(cache, "gopath"), GOMODCACHE=os.path.join(cache, "gopath", "pkg", "mod"),
               GOCACHE=os.path.join(cache, "build"), GOFLAGS="-mod=readonly -buildvcs=false", CGO_ENABLED="0",
               GOTOOLCHAIN="local")
    src = os.path.join(HERE, "goclient")
    p = subprocess.run([go, "mod", "download", "github.com/modelcontextprotocol/go-sdk"], cwd=src, env=env,
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        skip("cannot fetch github.com/modelcontextprotocol/go-sdk v1.8.0 from the module proxy: %s"
             % p.stderr[-1500:])
    out = os.path.join(OUTDIR, "mcp-goclient")
    t0 = time.monotonic()
    p = subprocess.run(["nice", go, "build", "-trimpath", "-o", out, "."], cwd=src, env=env, capture_output=True,
                       text=True, timeout=900)
    check(p.returncode == 0, "go build of tests/mcp/goclient: %s" % p.stderr[-3000:])
    print("built %s in %.1f s" % (out, time.monotonic() - t0))
    return out


def main():
    client = build()
    srv = ahlocal.Local(CTX, "srv").start()
    srv.ok("POST", "/api/v1/tenants", body={"name": "gotenant"})
    rc, out, err = srv.cli("--tenant", "gotenant", "token", "create")
    check(rc == 0 and len(out.strip()) == 64, "a token of tenant gotenant: %r" % err)
    tok = out.strip()
    # Another tenant's agent holding a file: the client must not reach it.
    srv.ok("POST", "/api/v1/tenants", body={"name": "elsewhere"})
    rc, out, err = srv.cli("--tenant", "elsewhere", "token", "create")
    check(rc == 0 and len(out.strip()) == 64, "a token of tenant elsewhere: %r" % err)
    other = out.strip()
    srv.ok("POST", "/api/v1/agents?wait=1", tok=other, body={"name": "theirs"})
    st, _ = srv.call("PUT", "/api/v1/agents/theirs/files/secret.txt", tok=other, raw=b"not yours\n",
                     headers={"Content-Type": "application/octet-stream"})
    check(st in (200, 201), "a file in the other tenant's agent: %d" % st)
    p = subprocess.run([client, "http://127.0.0.1:%d/mcp" % srv.port, tok, "goagent", "theirs"],
                       capture_output=True, text=True, timeout=300)
    sys.stdout.write(p.stdout)
    check(p.returncode == 0 and "goclient: all checks passed" in p.stdout,
          "the Go client (%d): %s%s" % (p.returncode, p.stdout[-2000:], p.stderr[-3000:]))
    a = srv.ok("GET", "/api/v1/agents/goagent", tok=tok)
    check(a["tenant"] == "gotenant" and a["state"] == "running", "made in the token's tenant: %r" % a)
    ops = srv.ok("GET", "/api/v1/agents/goagent/operations?limit=200", tok=tok)["operations"]
    kinds = {o["kind"] for o in ops}
    check({"create", "exec", "fs.write", "fs.read"} <= kinds, "the routes' audit rows: %r" % sorted(kinds))
    print("mcp.client: %d checks passed" % check.count)


if __name__ == "__main__":
    if not OUTDIR:
        print(__doc__.rsplit("usage: ", 1)[1], file=sys.stderr)
        sys.exit(2)
    sys.exit(ahserver.run(main, Fail, CTX.procs, CTX.tmp, CTX.log))
