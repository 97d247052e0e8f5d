#!/usr/bin/python3
"""tests/clients/client_python_docker.py: the Python client (clients/python)
against the real server with the Docker driver, the shipped catalog and
configuration (the default runtime, debian, built from the host's mirror
the first time and kept), and the real static sandboxd: what client.python
checks on the fake driver, here where a sandbox is a container.

  create (wait) on the default runtime; exec as the agent's user (uid
  10001, python3 there); exec_stream of 4 MiB (sha256 against the
  sandbox's); an upload of 8 MiB from a file object and its download
  (sha256), the listing; a terminal (stty size, echo); stop, then the file
  read while it sleeps (no wake); start, destroy (wait): nothing of the
  agent left in the engine, the server exits 0.

usage: client_python_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine. Ports from ahserver.free_port, pool
10.214.4.0/22, prefix clientpythondocker<pid>."""
import hashlib
import io
import os
import sys

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "docker"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
from ahdocker import Harness  # noqa: E402
import agenthold  # noqa: E402

h = Harness("client.python.docker", sys.argv[1], "10.214.4.0/22", shipped_catalog=True)
for key in ("AGENTHOLD_SANDBOX_DEFAULT_IMAGE", "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB"):
    h.env.pop(key, None)                # the shipped defaults, not the harness's test image
BUILD_WAIT = 1500                       # the first build of the debian runtime on a fresh, busy machine


def scenario(h):
    try:
        steps(h)
    except agenthold.Error as e:        # the harness reports its Fail with the server's log
        raise h.fail("%s: %s" % (type(e).__name__, e))


def steps(h):
    h.start_server()
    c = agenthold.Client(h.url, h.token())
    a = c.create_agent("pyd", wait=True, timeout=BUILD_WAIT)
    h.check(a.state == "running" and a.runtime == c.runtimes()[0]["alias"], "created on the default runtime: %r" % a)
    r = c.exec("pyd", "id -u; python3 -c 'print(6 * 7)'; echo err >&2; exit 4")
    h.check((r.status, r.stdout, r.stderr) == (4, "10001\n42\n", "err\n"), "exec as the agent: %r" % r)
    s = c.exec_stream("pyd", "head -c 4194304 /dev/urandom | tee r.bin")
    dig = hashlib.sha256()
    ex = s.wait(lambda rec: dig.update(rec.data) if rec.stream == "stdout" else None)
    sha = c.exec("pyd", "sha256sum r.bin").stdout.split()[0]
    h.check(ex.status == 0 and dig.hexdigest() == sha, "4 MiB streamed whole")
    blob = os.urandom(8 << 20)
    c.mkdir("pyd", "up")
    c.upload("pyd", "up/blob.bin", io.BytesIO(blob), mode=0o600)
    h.check(c.exec("pyd", "sha256sum up/blob.bin; stat -c %a up/blob.bin").stdout.split()[::2] ==
            [hashlib.sha256(blob).hexdigest(), "600"], "uploaded whole with its mode")
    sink = io.BytesIO()
    h.check(c.download("pyd", "up/blob.bin", sink) == len(blob) and sink.getvalue() == blob, "downloaded whole")
    h.check([(e.name, e.size) for e in c.list_files("pyd", "up")] == [("blob.bin", len(blob))], "listed")
    with c.terminal("pyd", cols=111, rows=22) as t:
        t.send("stty size; echo term-$((8 * 8))\n")
        t.read_until("term-64", timeout=60)
        h.check(b"22 111" in t.output, "the terminal's size: %r" % t.output[-200:])
    h.check(c.stop("pyd", wait=True).state == "sleeping", "stopped")
    h.check(c.download("pyd", "up/blob.bin") == blob and c.agent("pyd").state == "sleeping",
            "read while it sleeps, not woken")
    h.check(c.start("pyd", wait=True).state == "running", "started")
    h.check(c.exec("pyd", "cat up/blob.bin | sha256sum").stdout.split()[0] == hashlib.sha256(blob).hexdigest(),
            "the home kept across the stop")
    h.check(c.destroy("pyd", wait=True).state == "destroyed", "destroyed")
    h.finish()


sys.exit(h.run(scenario))
