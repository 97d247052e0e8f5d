#!/usr/bin/python3
"""bench/cli/bench_cli.py: how long a user waits for `agenthold create`,
`stop`, `start`, `rebuild` and `rm`, against the same operation seen on
the server's event stream and against bare Docker Engine API calls, in the
same run, interleaved round by round (which side goes first alternates).

The server is the real one on the default configuration with the Docker
driver: the shipped catalog and its default runtime (debian; its image is
built on the first create of a fresh machine, in the untimed warm-up), the
server as the agenthold user beside its local hostd (the two-process
shape; AGENTHOLD_SERVER_USER=none with --one-process).

- cli: the wall time of the `agenthold` process, from its start to its
  exit (it waits by default: cli/follow.c), as a user types it.
- events: the same operation through the API by this script, from the
  request to the event on GET /api/v1/events (opened once, before) that
  settles the agent: running, sleeping, running, running, destroyed. This
  is what the server itself takes; the CLI's goal is at most 1.1x it.
- bare: the same shipped runtime image with the same static sandboxd as
  its entry point (bench/docker's Bare: a bridge network, the same mounts
  and limits, a boot.json whose tunnel is a unix socket of the bench's),
  from the first engine call to sandboxd's connection accepted (create:
  network + create + start; start: the start of the stopped container),
  and a stop (POST /containers/{id}/stop?t=5) to its answer. The CLI's
  goal for create, start and stop is at most 1.1x these.

Figures: the best of N of each side (N = --rounds, default 5) and their
ratio (the goal's figure: a latency's floor is what the code costs, the
rest is the machine's other tenants), and the median of the rounds' own
ratios beside it.

usage: bench_cli.py [--report] [--rounds N] [--one-process] AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine, 3 when a ratio misses its goal by more
than the noise bound (bench/README.md), 0 with --report whatever the
ratios. Ports from ahserver.free_port, pools 10.214.128.0/22 (ours) and 10.214.112.0/24
(bare, bench/docker's)."""
import json
import os
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "docker"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "docker"))
from ahdocker import read_file_from_container, Harness, Fail  # noqa: E402
from bench_docker import Events, Bare, verdict  # noqa: E402

GOAL = 1.10
OPS = ("create", "stop", "start", "rebuild", "rm")
SETTLES = {"create": "running", "stop": "sleeping", "start": "running", "rebuild": "running",
           "rm": "destroyed"}
BARE_OPS = ("create", "stop", "start")
BUILD_WAIT = 900                    # the first create of a fresh machine builds the runtime


class Cli:
    """The CLI as a user runs it."""
    def __init__(self, h):
        self.h = h
        self.env = h.cli_env()

    def op(self, op, name, timeout=120):
        t0 = time.monotonic()
        p = subprocess.run([self.h.bin, op, name], env=self.env, cwd=self.h.tmp,
                           capture_output=True, text=True, timeout=timeout)
        t1 = time.monotonic()
        # Progress lines ("Preparing the sandbox…") go to stderr: only
        # the status says the operation failed.
        if p.returncode != 0:
            raise Fail("agenthold %s %s: status %d: %s" % (op, name, p.returncode, p.stderr.strip()))
        return t1 - t0


class Api:
    """The operation through the API, timed to its settling event."""
    def __init__(self, h, events):
        self.h = h
        self.events = events

    def op(self, op, name, timeout=120):
        method, path, body, ok = {
            "create": ("POST", "/api/v1/agents", {"name": name}, (201,)),
            "rm": ("DELETE", "/api/v1/agents/" + name, None, (200, 202)),
        }.get(op, ("POST", "/api/v1/agents/%s/%s" % (name, op), None, (200, 202)))
        self.events.clear(name)
        t0 = time.monotonic()
        st, a = self.h.api(method, path, body)
        if st not in ok:
            raise Fail("%s %s: HTTP %d %r" % (method, path, st, a))
        return self.events.wait(name, SETTLES[op], timeout) - t0


def ratio_lines(title, num, den, goal, results):
    """Prints one comparison (best of each, their ratio; the median of
    the rounds' ratios) and keeps its verdict."""
    best = min(num) / min(den)
    per = [x / y for x, y in zip(num, den)]
    v = verdict(best, goal)
    print("  %-26s %8.1f ms / %8.1f ms = %.3f  (median of rounds %.3f: %s)  goal <= %.2f: %s"
          % (title, min(num) * 1000, min(den) * 1000, best, statistics.median(per),
             " ".join("%.2f" % x for x in per), goal, v))
    results.append((title, best, v))


def main():
    args = sys.argv[1:]
    report = "--report" in args
    one = "--one-process" in args
    rounds = 5
    if "--rounds" in args:
        rounds = int(args[args.index("--rounds") + 1])
    pos = [a for i, a in enumerate(args) if not a.startswith("--")
           and not (i > 0 and args[i - 1] == "--rounds")]
    if len(pos) != 1 or rounds < 1:
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 2
    h = Harness("bench.cli", pos[0], "10.214.128.0/22", shipped_catalog=True)
    # The shipped defaults, not the harness's test image and small sandboxes.
    for key in ("AGENTHOLD_SANDBOX_DEFAULT_IMAGE", "AGENTHOLD_SANDBOX_DEFAULT_MEMORY_MB",
                "AGENTHOLD_SANDBOX_DEFAULT_CPUS"):
        h.env.pop(key, None)
    if not one:
        # The two-process shape, with hostd's socket of this run (the
        # default's may be another server's); the agenthold user must
        # reach the data directory below the bench's.
        h.env.pop("AGENTHOLD_SERVER_USER", None)
        h.env["AGENTHOLD_HOSTD_ENDPOINT"] = "ipc://%s/hostd-run/hostd.sock" % h.tmp
        os.chmod(h.tmp, 0o711)
    sandboxd = os.path.join(os.path.dirname(os.path.abspath(pos[0])), "sandboxd")
    results = []

    def scenario(h):
        h.start_server()
        events = Events(h.port(), h.token())
        sides = {"cli": Cli(h), "events": Api(h, events)}
        t = {(s, op): [] for s in ("cli", "events", "bare") for op in OPS}
        bare = None
        try:
            # Warm-up, untimed: the runtime's image (built here the first
            # time), the engine's caches; the bare side's image and blocked
            # routes are our sandbox's own.
            print("warm-up (the first create builds the debian runtime on a fresh machine)...",
                  flush=True)
            sides["cli"].op("create", "warm", timeout=BUILD_WAIT)
            st, a = h.api("GET", "/api/v1/agents/warm")
            c = h.container(a["id"])
            if c is None:
                raise Fail("no container for the warm-up agent")
            image = c["Config"]["Image"]
            card = read_file_from_container(c["Id"], "/etc/agenthold/boot.json")
            if card is None:
                raise Fail("no boot card in our sandbox")
            bare = Bare(h, sandboxd, json.loads(card).get("blocked"), image)
            print("runtime image %s" % image, flush=True)
            for op in ("stop", "start", "rebuild"):
                sides["events"].op(op, "warm")
            sides["cli"].op("rm", "warm")
            bare.create(99)
            bare.stop(99)
            bare.remove(99)
            for r in range(rounds):
                order = ["cli", "events", "bare"]
                if r % 2:
                    order.reverse()
                for op in OPS:
                    for side in order:
                        if side == "bare":
                            if op not in BARE_OPS:
                                continue
                            t0 = time.monotonic()
                            if op == "create":
                                took = bare.create(r)[0]
                            elif op == "start":
                                took = bare.wake(r)[0]
                            else:
                                bare.stop(r)
                                took = time.monotonic() - t0
                        else:
                            took = sides[side].op(op, "%s%d" % (side[0], r))
                        t[(side, op)].append(took)
                bare.remove(r)
                print("round %d: %s" % (r + 1, "  ".join(
                    "%s %s/%s/%s ms" % (op, "%.0f" % (t[("cli", op)][-1] * 1000),
                                        "%.0f" % (t[("events", op)][-1] * 1000),
                                        "%.0f" % (t[("bare", op)][-1] * 1000) if op in BARE_OPS else "-")
                    for op in OPS)), flush=True)
        finally:
            events.close()
            if bare:
                bare.listener.close()
        print("\nbest of %d interleaved rounds (cli / events / bare, ms):" % rounds)
        for op in OPS:
            print("  %-8s %8.1f %8.1f %8s" % (op, min(t[("cli", op)]) * 1000, min(t[("events", op)]) * 1000,
                                              "%.1f" % (min(t[("bare", op)]) * 1000) if op in BARE_OPS else "-"))
        print("\nthe CLI against the same operation on the event stream:")
        for op in OPS:
            ratio_lines("%s cli/events" % op, t[("cli", op)], t[("events", op)], GOAL, results)
        print("\nthe CLI against bare Engine API calls (to sandboxd connected; stop to its answer):")
        for op in BARE_OPS:
            ratio_lines("%s cli/bare" % op, t[("cli", op)], t[("bare", op)], GOAL, results)
        h.finish()

    rc = h.run(scenario)
    if rc != 0:
        return rc
    missed = [x for x in results if x[2] == "MISSED"]
    print("\ngoals: %d of %d met or within noise%s" % (len(results) - len(missed), len(results),
          "" if not missed else "; MISSED: " + ", ".join("%s %.3f" % (m[0], m[1]) for m in missed)))
    return 3 if missed and not report else 0


if __name__ == "__main__":
    sys.exit(main())
