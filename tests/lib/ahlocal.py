"""tests/lib/ahlocal.py: one `agenthold serve` on a data directory of its
own, as the end-to-end drivers use it (e2e_life.py, e2e_tenants.py): start
and stop (kept across restarts of the same object), a call with a token
(the admin's unless told), the CLI as that token, and the wait for a
state. Built on tests/lib/ahserver.py; import both by path:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))"""
import json
import os
import subprocess
import sys
import tempfile
import time
import types

import ahserver

ADMIN = object()    # the default token: the server's admin token


class Fail(Exception):
    """A check that did not hold (the drivers' own, when they take context())."""


def context(prefix):
    """What a driver run as `SCRIPT AGENTHOLD_BINARY [SCENARIO...]` owns,
    for Local: .bin, .only (the scenarios named; empty: all), .src, .tmp
    (a new temporary directory named prefix...), .log, .procs, .fail,
    .check; ahserver.run(main, ctx.fail, ctx.procs, ctx.tmp, ctx.log)
    cleans up after it."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    return types.SimpleNamespace(
        bin=os.path.abspath(sys.argv[1]), only=set(sys.argv[2:]),
        src=os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")),
        tmp=tmp, log=os.path.join(tmp, "server.log"), procs=[], fail=Fail, check=ahserver.Checks(Fail))


class Local:
    """ctx: what the driver owns: .bin, .src, .tmp, .log, .procs (every
    process started goes there, for ahserver.run's clean-up), .fail (the
    exception class), .check (an ahserver.Checks or the like)
    (ports come from ahserver.free_port, the suite's one allocator)."""

    def __init__(self, ctx, name, extra=None):
        self.ctx = ctx
        self.dir = os.path.join(ctx.tmp, name)
        os.makedirs(self.dir)
        self.data = os.path.join(self.dir, "data")
        self.port = ahserver.free_port(fail=ctx.fail)
        tunnel = ahserver.free_port(avoid={self.port}, fail=ctx.fail)
        self.env = ahserver.server_env(self.data, self.port, tunnel, extra=extra)
        self.proc = None
        self.admin = None

    def start(self, wrap=()):
        """wrap: argv put before the binary (ahserver.serve's)."""
        with open(self.ctx.log, "a") as log:
            log.write("---- server %s ----\n" % self.dir)
        self.proc = ahserver.serve(self.ctx.bin, self.env, self.ctx.log, cwd=self.ctx.src,
                                   procs=self.ctx.procs, fail=self.ctx.fail, wrap=wrap)
        self.admin = ahserver.read_token(self.data)
        return self

    def stop(self):
        ahserver.stop_all([self.proc])

    def _tok(self, tok):
        return self.admin if tok is ADMIN else tok

    def call(self, method, path, tok=ADMIN, body=None, raw=None, headers=None):
        """(status, the JSON answer or None; {"raw": text} when not JSON).
        tok None: no token at all."""
        status, text = ahserver.request(self.port, method, path, body if raw is None else raw,
                                        self._tok(tok), headers)
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, {"raw": text[:200]}

    def ok(self, method, path, tok=ADMIN, body=None, want=(200, 201, 202), headers=None):
        status, j = self.call(method, path, tok, body, headers=headers)
        self.ctx.check(status in want, "%s %s: want %s, got %d %r" % (method, path, want, status, j))
        return j

    def cli(self, *args, tok=ADMIN, timeout=120):
        """(exit status, stdout, stderr) of `agenthold ARGS` as tok."""
        env = dict(self.env)
        env["AGENTHOLD_TOKEN"] = self._tok(tok)
        p = subprocess.run([self.ctx.bin] + list(args), env=env, cwd=self.dir, capture_output=True,
                           text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout, p.stderr

    def wait_state(self, agent, states, tok=ADMIN, seconds=30):
        deadline = time.time() + seconds
        while True:
            status, j = self.call("GET", "/api/v1/agents/" + agent, tok)
            if status == 200 and j["state"] in states:
                return j
            if time.time() > deadline:
                raise self.ctx.fail("agent %s never reached %s: %d %r" % (agent, states, status, j))
            time.sleep(0.1)
