#!/usr/bin/python3
"""bench/files/smoke.py: a quick check that a benchmark of bench/files,
bench/term, bench/sandboxd, bench/scale, bench/conversations or bench/mcp runs with tiny sizes, prints its figures and
leaves no temporary directory behind. It times nothing itself.

usage: smoke.py files|term|sandboxd|scale|conversations|mcp COMMAND..."""
import glob
import re
import subprocess
import sys
import tempfile

NUM = r"[0-9]+(?:\.[0-9]+)?"
FIGURES = {
    "files": [r"baseline \(loopback TCP.*\s%s MiB/s" % NUM,
              r"up .*\s%s MiB/s\s+%sx baseline" % (NUM, NUM),
              r"down .*\s%s MiB/s\s+%sx baseline" % (NUM, NUM)],
    "term": [r"baseline \(local pty.*median\s+%s ms\s+p99\s+%s ms" % (NUM, NUM),
             r"terminal WebSocket.*median\s+%s ms\s+p99\s+%s ms\s+%sx / %sx baseline"
             % (NUM, NUM, NUM, NUM)],
    "sandboxd": [r"baseline sleep\s.*\s%s KiB\s.*\s%s CPU ms/min" % (NUM, NUM),
                 r"baseline busybox sh\s.*\s%s KiB\s.*\s%s CPU ms/min" % (NUM, NUM),
                 r"sandboxd\s.*\s%s KiB\s.*\s%s CPU ms/min" % (NUM, NUM),
                 r"ratios: RSS %sx sleep, %sx busybox sh" % (NUM, NUM)],
    "scale": [r"server RSS, %s connected idle: %s MiB .*baseline, no agent: %s MiB" % (NUM, NUM, NUM),
              r"server idle CPU over .*: %s %% of a core .*baseline, no agent: %s %%" % (NUM, NUM),
              r"terminals streaming at once .*every byte checked" ,
              r"fairness, slowest / fastest terminal: %s" % NUM],
    "conversations": [r"baseline \(local pipe\):\s+first update\s+%s ms\s+whole turn\s+%s ms" % (NUM, NUM),
                      r"first update: %sx baseline" % NUM, r"whole turn:\s+%sx baseline" % NUM,
                      r"first update after a sleep: %sx baseline" % NUM,
                      r"updates in one turn .* every one counted",
                      r"server VmRSS: %s KiB early .* %s KiB late" % (NUM, NUM)],
    "mcp": [r"%s\s+REST median\s+%s ms\s+MCP median\s+%s ms\s+%sx" % (tool, NUM, NUM, NUM)
            for tool in ("exec", "list_files", "read_file")],
}


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in FIGURES:
        print("usage: smoke.py files|term|sandboxd|scale|conversations|mcp COMMAND...", file=sys.stderr)
        return 2
    kind = sys.argv[1]
    pattern = "%s/ah-bench-%s-*" % (tempfile.gettempdir(), kind)
    before = set(glob.glob(pattern))
    p = subprocess.run(sys.argv[2:], capture_output=True, text=True, timeout=120)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    bad = []
    #  3: a goal missed (tiny sizes time nothing: only the figures count)
    if p.returncode not in (0, 3):
        bad.append("exited with status %d" % p.returncode)
    for f in FIGURES[kind]:
        if not re.search(f, p.stdout):
            bad.append("no line matching %r" % f)
    left = set(glob.glob(pattern)) - before
    if left:
        bad.append("left behind: %s" % ", ".join(sorted(left)))
    for b in bad:
        print("smoke %s: %s" % (kind, b), file=sys.stderr)
    print("smoke %s: %s" % (kind, "FAILED" if bad else "ok"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
