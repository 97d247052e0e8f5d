#!/usr/bin/python3
"""bench/mcp/bench_mcp.py: an MCP tool call (POST /mcp, docs/mcp.md)
against the same REST call, in one run against one server (the fake
driver, sandboxd in-process), for exec (`echo hi`), list_files (the home)
and read_file (a 4 KiB file). Each side keeps one connection open
(keep-alive) and the calls alternate, which side goes first alternating;
each answer is checked (status, no isError, the bytes read). The figure
is the ratio of the medians, MCP over REST; goal <= 1.2x each: the tool
call is the REST route served internally (actors/api/sub.c), plus the
JSON-RPC envelope and one turn of the API's loop.

usage: bench_mcp.py AGENTHOLD_BINARY [--rounds N] (default 300)
Exits 3 when a figure misses its goal beyond the noise bound
(bench/README.md), 1 on an error."""
import argparse
import http.client
import json
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "files"))
from ahserve import BenchError, Goals, Server, median  # noqa: E402

CONTENT = "x" * 4095 + "\n"


class Side:
    """One keep-alive connection with the admin token."""

    def __init__(self, srv):
        self.conn = http.client.HTTPConnection("127.0.0.1", srv.api_port, timeout=60)
        self.headers = {"Authorization": "Bearer " + srv.token(), "Content-Type": "application/json"}
        self.id = 0

    def call(self, method, path, body=None):
        t0 = time.perf_counter()
        self.conn.request(method, path, body=None if body is None else json.dumps(body), headers=self.headers)
        r = self.conn.getresponse()
        raw = r.read()
        return time.perf_counter() - t0, r.status, raw

    def tool(self, name, args):
        self.id += 1
        took, status, raw = self.call("POST", "/mcp", {"jsonrpc": "2.0", "id": self.id, "method": "tools/call",
                                                       "params": {"name": name, "arguments": args}})
        j = json.loads(raw) if status == 200 else {}
        res = j.get("result") or {}
        if status != 200 or res.get("isError") is not False:
            raise BenchError("tools/call %s: %d %r" % (name, status, raw[:300]))
        return took, res["content"][0]["text"]


CASES = [
    ("exec", "POST", "/api/v1/agents/bench/exec", {"cmd": "echo hi"}, {"agent": "bench", "cmd": "echo hi"},
     lambda raw: json.loads(raw)["stdout"] == "hi\n"),
    ("list_files", "GET", "/api/v1/agents/bench/files?path=.", None, {"agent": "bench"},
     lambda raw: any(e["name"] == "four.txt" for e in json.loads(raw)["entries"])),
    ("read_file", "GET", "/api/v1/agents/bench/files/four.txt", None, {"agent": "bench", "path": "four.txt"},
     lambda raw: (raw.decode() if isinstance(raw, bytes) else raw) == CONTENT),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("agenthold")
    ap.add_argument("--rounds", type=int, default=300)
    a = ap.parse_args()
    goals = Goals()
    with Server(a.agenthold, prefix="ah-bench-mcp-") as srv:
        srv.create_agent("bench")
        rest, mcp = Side(srv), Side(srv)
        mcp.tool("write_file", {"agent": "bench", "path": "four.txt", "content": CONTENT})
        print("bench/mcp: %d calls each side, alternating, one keep-alive connection each; medians" % a.rounds)
        for name, method, path, body, args, ok in CASES:
            for _ in range(10):             # warm-up, untimed
                rest.call(method, path, body)
                mcp.tool(name, args)
            r_times, m_times = [], []
            for i in range(a.rounds):
                for side in ((0, 1) if i % 2 == 0 else (1, 0)):
                    if side == 0:
                        took, status, raw = rest.call(method, path, body)
                        if status != 200 or not ok(raw):
                            raise BenchError("%s %s: %d %r" % (method, path, status, raw[:200]))
                        r_times.append(took)
                    else:
                        took, text = mcp.tool(name, args)
                        if not ok(text):
                            raise BenchError("%s: %r" % (name, text[:200]))
                        m_times.append(took)
            r, m = median(r_times), median(m_times)
            print("  %-10s REST median %7.3f ms   MCP median %7.3f ms   %.2fx   %s"
                  % (name, r * 1e3, m * 1e3, m / r, goals.at_most(name, m / r, 1.2)))
    return goals.status("bench/mcp")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print("bench/mcp: %s" % e, file=sys.stderr)
        sys.exit(1)
