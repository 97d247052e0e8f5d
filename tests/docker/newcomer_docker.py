#!/usr/bin/python3
"""tests/docker/newcomer_docker.py: what a new user does, word for word.

A fresh clone of this checkout (its HEAD commit) in a temporary directory;
the README's first command (the first line of its first ```sh block:
install-deps, build, serve) run there as it stands, in the background, with
only the listeners, data directory, name prefix and network pool moved out
of the way of other tests; then, with the clone's own binary,
`agenthold create alice` (the default runtime, as shipped) and `agenthold
exec alice -- sh -c 'echo hi > ~/x && cat ~/x'` must print hi.

It builds the whole project once more (a few minutes on 2 cores) and runs
install-deps (apt-get; a no-op where everything is installed). The default
runtime's image is built only if no earlier test built it.

usage: newcomer_docker.py SOURCE_DIR
Exits 77 without a Docker Engine or when SOURCE_DIR is no git checkout.
Ports from ahserver.free_port, pool 10.213.208.0/22, prefix dockernewcomer<pid>."""
import os
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from ahdocker import engine_up, Fail, Harness  # noqa: E402
import ahserver  # noqa: E402

SRC = os.path.abspath(sys.argv[1])
h = Harness("docker.newcomer", None, "10.213.208.0/22", shipped_catalog=True)
for key in ("AGENTHOLD_SANDBOX_DEFAULT_IMAGE", "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB",
            "AGENTHOLD_SANDBOX_DEFAULT_CPUS", "AGENTHOLD_SANDBOX_DRIVER"):
    h.env.pop(key, None)           # the embedded defaults: the Docker driver when an engine answers


def first_command(readme):
    with open(readme) as f:
        lines = f.read().splitlines()
    start = lines.index("```sh")
    return lines[start + 1]


def scenario(h):
    head = subprocess.run(["git", "-C", SRC, "rev-parse", "HEAD"], capture_output=True, text=True)
    h.check(head.returncode == 0, "the source is a git checkout: %s" % head.stderr)
    clone = os.path.join(h.tmp, "agenthold")
    subprocess.run(["git", "clone", "-q", SRC, clone], check=True, timeout=120)
    subprocess.run(["git", "-C", clone, "checkout", "-q", head.stdout.strip()], check=True, timeout=60)
    command = first_command(os.path.join(clone, "README.md"))
    h.check("./scripts/install-deps" in command and "agenthold serve" in command,
            "the README starts with the command that installs, builds and serves: %r" % command)
    print("the README's first command: %s" % command)
    log = open(h.log, "a")
    t0 = time.time()
    server = subprocess.Popen(["sh", "-c", command], cwd=clone, env=h.env, stdout=log, stderr=log,
                              start_new_session=True)
    log.close()

    def stop():
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(server.pid, signal.SIGKILL)
    h.cleanups.append(stop)
    ahserver.wait_healthy(server, h.api_port, seconds=900, fail=Fail, tail=h.server_log_tail)
    print("serving %.0f s after the command started" % (time.time() - t0))
    h.bin = os.path.join(clone, "build", "bin", "agenthold")
    env = dict(h.env)
    env["AGENTHOLD_URL"] = h.url            # the token: found under the data directory
    created = subprocess.run([h.bin, "create", "alice"], env=env, cwd=clone, capture_output=True,
                             text=True, timeout=700)
    print(created.stderr.strip()[-800:])
    h.check(created.returncode == 0 and "state:            running" in created.stdout,
            "agenthold create alice: %d %s %s" % (created.returncode, created.stdout, created.stderr))
    said = subprocess.run([h.bin, "exec", "alice", "--", "sh", "-c", "echo hi > ~/x && cat ~/x"],
                          env=env, cwd=clone, capture_output=True, text=True, timeout=60)
    h.check(said.returncode == 0 and said.stdout == "hi\n",
            "agenthold exec alice prints hi: %d %r %r" % (said.returncode, said.stdout, said.stderr))
    subprocess.run([h.bin, "rm", "alice"], env=env, cwd=clone, capture_output=True, timeout=120)


if not engine_up() or not os.path.isdir(os.path.join(SRC, ".git")) and not os.path.isfile(os.path.join(SRC, ".git")):
    print("\n*** docker.newcomer SKIPPED: no Docker Engine, or %s is no git checkout ***\n" % SRC,
          file=sys.stderr)
    sys.exit(77)
sys.exit(h.run(scenario, needs_sandboxd=False))
