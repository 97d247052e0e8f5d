#!/usr/bin/python3
"""e2e.twobins: the agenthold command is two binaries (docs/cli.md): the
client links none of the server's libraries, and its server commands
(serve, hostd, doctor, routes, tap) exec agenthold-server from its own
directory, the same process, with the same arguments.

usage: e2e_twobins.py AGENTHOLD (agenthold-server next to it)"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahserver  # noqa: E402

SERVER_ONLY_LIBS = ("libzmq", "libczmq", "libwebsockets", "libsqlite3", "liblua", "libmsgpackc", "libev.")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, **kw)


def main():
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 2
    cli = os.path.abspath(sys.argv[1])
    server = os.path.join(os.path.dirname(cli), "agenthold-server")
    check(os.access(server, os.X_OK), "agenthold-server is built next to agenthold")

    # The client loads none of the server's libraries.
    ldd = run(["ldd", cli]).stdout
    loaded = [lib for lib in SERVER_ONLY_LIBS if lib in ldd]
    check(not loaded, "agenthold links none of the server's libraries (found: %s)" % ", ".join(loaded))
    check("libzmq" in run(["ldd", server]).stdout, "agenthold-server links the server's libraries")

    # A server command through the client is the server's answer.
    a = run([cli, "routes", "--json"])
    b = run([server, "routes", "--json"])
    check(a.returncode == 0 and a.stdout == b.stdout and a.stdout.startswith("["),
          "agenthold routes --json is agenthold-server's (status %d, %d bytes against %d)"
          % (a.returncode, len(a.stdout), len(b.stdout)))
    h = run([cli, "serve", "--help"])
    check(h.returncode == 0 and "usage: agenthold serve" in h.stdout,
          "agenthold serve --help answers through agenthold-server: %r" % h.stdout[:80])

    # The same process: `agenthold serve` keeps its pid (systemd, the
    # tests and kill(1) see the one they started).
    tmp = tempfile.mkdtemp(prefix="ah-twobins-")
    try:
        env = ahserver.server_env(os.path.join(tmp, "data"), ahserver.free_port(), ahserver.free_port())
        log = os.path.join(tmp, "server.log")
        p = ahserver.serve(cli, env, log)
        try:
            exe = os.readlink("/proc/%d/exe" % p.pid)
            check(os.path.samefile(exe, server),
                  "agenthold serve is agenthold-server in the same process (pid %d runs %s)" % (p.pid, exe))
        finally:
            p.terminate()
            p.wait(timeout=30)
        check(p.returncode == 0, "the exec'd server stops on SIGTERM with status 0 (%s): %s"
              % (p.returncode, ahserver.log_tail(log, 300)))
        bad = ahserver.verdict([p], [log])
        check(not bad, "the server's exit and log are clean: %s" % bad)

        # Without agenthold-server beside it: a sentence, status 1.
        lone = os.path.join(tmp, "agenthold")
        shutil.copy(cli, lone)
        r = run([lone, "serve"])
        check(r.returncode == 1 and "agenthold-server" in r.stderr and "installed next to" in r.stderr,
              "agenthold serve without agenthold-server says so: %d %r" % (r.returncode, r.stderr.strip()))
        # The client commands still work alone (they need no server binary).
        r = run([lone, "help", "create"])
        check(r.returncode == 0 and "usage: agenthold create" in r.stdout, "the client alone runs its commands")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("e2e.twobins: %s" % ("FAILED: " + "; ".join(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
