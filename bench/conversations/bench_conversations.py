#!/usr/bin/python3
"""bench/conversations/bench_conversations.py: a turn through agenthold
against the same harness driven over a local pipe, in the same run
(issue 26, "Performance").

usage: bench_conversations.py AGENTHOLD_BINARY [--rounds N] [--updates K] [--cold N] [--flood S]

Both sides run bench/conversations/instant_harness.py, an ACP harness that
answers at once (K agent_message_chunk updates, then the stop end_turn),
so the figures are the path's and not the harness's.
  ours:  the real `agenthold serve` (fake driver: sandboxd in-process runs
         the harness through its proc channel), an agent of a catalog
         runtime that names the harness, one conversation; each turn is
         POST .../conversations/{id}/prompt on a new connection, read as
         server-sent events: the API, the conversations actor, the tunnel,
         yamux, sandboxd's proc channel, the harness's pipes, and back.
  pipe:  the same harness as a child of this process, ACP written to its
         stdin and read from its stdout directly (initialize and
         session/new once, untimed), the same session/prompt each turn.
Timed per turn: from the request (the prompt's first byte) to the first
update, and to the stop (the whole turn). Turns alternate side by side
(which goes first alternates) after untimed warm-up turns; medians, and
their ratios to the pipe's. Goals (issue 26): first update and whole turn
each <= 1.1x the pipe's.

--cold N (default 3): a prompt to a sleeping agent (stopped first,
untimed): the wake (the request to the stream's first event, sent once the
agent runs), the harness's start, initialize and session (to the first
update), the turn's end; against the same agent's plain start (POST
.../start?wait=1, to running) plus the harness started cold on a pipe
(spawn, initialize, session/new, the prompt, to its first update),
measured alternately. Goal: first update <= 1.1x that sum.

--flood S (default 60): one turn of 1,000 updates a second for S seconds
in one conversation, read as it streams: every update counted (the
stream's and the log's), the server's VmRSS sampled every 0.5 s. Goal:
its memory does not grow: the median of the last fifth of the samples at
most 1.0x the median of the second fifth (the first is the warm-up).

Exits 1 on an error (a turn that does not end with end_turn, a refused
request), 3 when a goal is missed beyond the 10 % noise bound
(bench/README.md)."""
import argparse
import http.client
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "files"))
from ahserve import BenchError, Goals, Server, median  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
HARNESS = os.path.join(HERE, "instant_harness.py")
PROMPT = "answer at once"


def ms(s):
    return s * 1000.0


class Pipe:
    """The harness on a local pipe: one process, one ACP session."""

    def __init__(self, cwd, updates):
        self.p = subprocess.Popen([sys.executable, HARNESS, str(updates)], cwd=cwd, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, bufsize=0)
        self.next_id = 0
        self.ask("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        self.session = self.ask("session/new", {"cwd": cwd, "mcpServers": []})["sessionId"]

    def send(self, method, params):
        self.next_id += 1
        self.p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                                        "params": params}) + "\n").encode())
        return self.next_id

    def ask(self, method, params):
        mid = self.send(method, params)
        while True:
            m = json.loads(self.p.stdout.readline())
            if m.get("id") == mid:
                if "result" not in m:
                    raise BenchError("pipe: %s answered %r" % (method, m))
                return m["result"]

    def turn(self):
        """(seconds to the first update, to the stop)."""
        t0 = time.perf_counter()
        mid = self.send("session/prompt", {"sessionId": self.session,
                                           "prompt": [{"type": "text", "text": PROMPT}]})
        first = None
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise BenchError("pipe: the harness exited mid-turn")
            m = json.loads(line)
            if first is None and m.get("method") == "session/update":
                first = time.perf_counter() - t0
            if m.get("id") == mid:
                if m.get("result", {}).get("stopReason") != "end_turn":
                    raise BenchError("pipe: the turn ended %r" % m)
                return first, time.perf_counter() - t0

    def close(self):
        self.p.stdin.close()
        try:
            self.p.wait(5)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def cold_pipe(cwd, updates):
    """A harness started cold on a pipe: spawn, initialize, session/new,
    the prompt, to its first update (seconds)."""
    t0 = time.perf_counter()
    p = Pipe(cwd, updates)
    first, _ = p.turn()
    took = time.perf_counter() - t0
    p.close()
    if first is None:
        raise BenchError("pipe: no update")
    return took


def our_turn(srv, agent, cid):
    """(seconds to the stream's first event, to the first update, to the
    stop) of one prompt through the API."""
    c = http.client.HTTPConnection("127.0.0.1", srv.api_port, timeout=120)
    body = json.dumps({"text": PROMPT})
    t0 = time.perf_counter()
    c.request("POST", "/api/v1/agents/%s/conversations/%s/prompt" % (agent, cid), body=body,
              headers={"Authorization": "Bearer " + srv.token(), "Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise BenchError("prompt: %d %r\n%s" % (r.status, r.read()[:300], srv.log_tail()))
    head = first = None
    kind = None
    try:
        while True:
            line = r.fp.readline()
            if not line:
                raise BenchError("prompt: the stream ended before the stop\n%s" % srv.log_tail())
            line = line.rstrip(b"\r\n")
            if line.startswith(b"event: "):
                kind = line[7:].decode()
                if head is None:
                    head = time.perf_counter() - t0
                if kind == "update" and first is None:
                    first = time.perf_counter() - t0
            elif line.startswith(b"data: ") and kind in ("stop", "error"):
                d = json.loads(line[6:])
                if kind == "error" or d["body"].get("stopReason") != "end_turn":
                    raise BenchError("prompt: the turn ended %s %r" % (kind, d))
                return head, first, time.perf_counter() - t0
    finally:
        c.close()


def flood(srv, cid, seconds, goals, rate=1000):
    """One turn of rate updates a second for seconds, the server's RSS
    sampled as it streams."""
    c = http.client.HTTPConnection("127.0.0.1", srv.api_port, timeout=120)
    c.request("POST", "/api/v1/agents/conv/conversations/%s/prompt" % cid,
              body=json.dumps({"text": "flood %g %d" % (seconds, rate)}),
              headers={"Authorization": "Bearer " + srv.token(), "Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise BenchError("flood: %d %r" % (r.status, r.read()[:300]))
    samples, updates, kind, stop = [], 0, None, None
    t0 = next_sample = time.monotonic()
    while stop is None:
        line = r.fp.readline()
        if not line:
            raise BenchError("flood: the stream ended before the stop\n%s" % srv.log_tail())
        if line.startswith(b"event: "):
            kind = line[7:].rstrip(b"\r\n").decode()
            updates += kind == "update"
            if kind in ("stop", "error"):
                stop = kind
        if time.monotonic() >= next_sample:
            samples.append(srv.rss_kib())
            next_sample += 0.5
    took = time.monotonic() - t0
    c.close()
    want = int(seconds * rate)
    st, j = srv.call("GET", "/api/v1/agents/conv/conversations/%s?after=0&limit=1" % cid)
    if stop != "stop" or updates != want:
        raise BenchError("flood: %d of %d updates streamed, ended by %s" % (updates, want, stop))
    n = len(samples)
    early, late = median(samples[n // 5:2 * n // 5] or samples), median(samples[4 * n // 5:] or samples)
    print("bench/conversations: %d updates in one turn (%d a second asked) streamed in %.1f s, every one counted"
          % (updates, rate, took))
    print("  server VmRSS: %d KiB early (second fifth), %d KiB late (last fifth), max %d KiB: %.3fx   %s"
          % (early, late, max(samples), late / early, goals.at_most("memory under 1,000 updates a second",
                                                                      late / early, 1.0)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("agenthold")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--updates", type=int, default=3)
    ap.add_argument("--cold", type=int, default=3)
    ap.add_argument("--flood", type=float, default=60)
    a = ap.parse_args()
    goals = Goals()
    # The catalog lives in the server's own directory (made before it starts).
    srv = Server(a.agenthold, prefix="ah-bench-conversations-")
    try:
        cat = os.path.join(srv.tmp, "runtimes.json")
        with open(cat, "w") as f:
            json.dump({"version": 2, "runtimes": [{
                "alias": "bench", "image": "agenthold/bench-conversations:1",
                "description": "the benchmark's instant harness",
                "harness": {"command": [sys.executable, HARNESS, str(a.updates)]}}]}, f)
        srv.env["AGENTHOLD_CATALOG_PATH"] = cat
        srv.start()
        srv.create_agent("conv")
        st, j = srv.call("POST", "/api/v1/agents/conv/conversations", {})
        if st != 201:
            raise BenchError("conversation: %d %r" % (st, j))
        cid = j["id"]
        pipe_dir = os.path.join(srv.tmp, "pipe")
        os.makedirs(pipe_dir)
        pipe = Pipe(pipe_dir, a.updates)
        try:
            for _ in range(5):                  # warm-up, untimed: the harness started, caches
                our_turn(srv, "conv", cid)
                pipe.turn()
            ours_first, ours_turn, pipe_first, pipe_turn = [], [], [], []
            for i in range(a.rounds):
                for side in ((0, 1) if i % 2 == 0 else (1, 0)):
                    if side == 0:
                        _, f, t = our_turn(srv, "conv", cid)
                        ours_first.append(f)
                        ours_turn.append(t)
                    else:
                        f, t = pipe.turn()
                        pipe_first.append(f)
                        pipe_turn.append(t)
        finally:
            pipe.close()
        pf, pt, of, ot = (median(x) for x in (pipe_first, pipe_turn, ours_first, ours_turn))
        print("bench/conversations: %d turns each side, %d updates a turn, interleaved; medians"
              % (a.rounds, a.updates))
        print("  baseline (local pipe):   first update %8.3f ms   whole turn %8.3f ms" % (ms(pf), ms(pt)))
        print("  agenthold (API, SSE):    first update %8.3f ms   whole turn %8.3f ms" % (ms(of), ms(ot)))
        print("  first update: %.2fx baseline (+%.3f ms)   %s"
              % (of / pf, ms(of - pf), goals.at_most("first update", of / pf, 1.1)))
        print("  whole turn:   %.2fx baseline (+%.3f ms)   %s"
              % (ot / pt, ms(ot - pt), goals.at_most("whole turn", ot / pt, 1.1)))
        if a.cold > 0:
            wake, harness, first, whole, start, cold = [], [], [], [], [], []
            for i in range(a.cold):
                for side in ((0, 1) if i % 2 == 0 else (1, 0)):
                    st, j = srv.call("POST", "/api/v1/agents/conv/stop?wait=1")
                    if st not in (200, 202) or j.get("state") != "sleeping":
                        raise BenchError("stop: %d %r" % (st, j))
                    if side == 0:
                        h, f, t = our_turn(srv, "conv", cid)
                        wake.append(h)
                        harness.append(f - h)
                        first.append(f)
                        whole.append(t)
                    else:
                        t0 = time.perf_counter()
                        st, j = srv.call("POST", "/api/v1/agents/conv/start?wait=1")
                        if st not in (200, 202) or j.get("state") != "running":
                            raise BenchError("start: %d %r" % (st, j))
                        start.append(time.perf_counter() - t0)
                        cold.append(cold_pipe(pipe_dir, a.updates))
            base = median(start) + median(cold)
            print("bench/conversations: a prompt to a sleeping agent, %d each side, alternating; medians" % a.cold)
            print("  baseline: start to running %8.3f ms + the harness cold on a pipe to its first update %8.3f ms"
                  " = %8.3f ms" % (ms(median(start)), ms(median(cold)), ms(base)))
            print("  agenthold: first update %8.3f ms (the wake %8.3f ms, then the harness's start, initialize,"
                  " session and prompt %8.3f ms), whole turn %8.3f ms"
                  % (ms(median(first)), ms(median(wake)), ms(median(harness)), ms(median(whole))))
            print("  first update after a sleep: %.2fx baseline   %s"
                  % (median(first) / base, goals.at_most("first update after a sleep", median(first) / base, 1.1)))
        if a.flood > 0:
            flood(srv, cid, a.flood, goals)
    finally:
        srv.close()
    return goals.status("bench/conversations")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print("bench/conversations: %s" % e, file=sys.stderr)
        sys.exit(1)
