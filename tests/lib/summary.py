#!/usr/bin/python3
"""tests/lib/summary.py: what the whole suite ran, per phase and label, and
whether that is enough.

scripts/test runs ctest once per phase (plain, asan, fuzz, k8s), each
with --output-junit; this reads those reports and the labels of each build's
tests (ctest --show-only=json-v1) and prints:
- per phase and label: passed, failed, skipped;
- every skipped test with its reason (the last line of its output that says
  skip, else its last line);
- the closing line "total: N passed, N failed, N skipped".

A label named in AH_TEST_REQUIRE (comma-separated, e.g. "docker,k8s"; .ci/run
sets it) must have run: a skipped test of that label, or a label of which no
test ran at all, fails the run, naming the test and why it skipped. So does
each --fail "reason" (scripts/test passes one when the k8s cluster's build
failed and k8s is required). Exit status: 0 when nothing failed and every
required label ran, else 1.

usage: summary.py [--fail REASON]... PHASE=BUILD_DIR=JUNIT.xml ..."""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET


def labels_of(build):
    """test name -> its labels, for the tests of one build directory."""
    out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"], capture_output=True,
                         text=True, check=True).stdout
    labels = {}
    for t in json.loads(out).get("tests", []):
        found = []
        for p in t.get("properties", []):
            if p.get("name") == "LABELS":
                found = list(p.get("value") or [])
        labels[t["name"]] = found
    return labels


def reason_of(case):
    text = (case.findtext("system-out") or "").strip().splitlines()
    said = [line for line in text if "skip" in line.lower()]
    line = said[-1] if said else (text[-1] if text else "(it printed nothing)")
    return line.strip()[:300]


def main(argv):
    required = [x for x in os.environ.get("AH_TEST_REQUIRE", "").replace(" ", "").split(",") if x]
    extra_fail = []
    phases = []
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--fail":
            extra_fail.append(args.pop(0))
        elif a.count("=") == 2:
            phases.append(a.split("="))
        else:
            print("summary.py: %r is not PHASE=BUILD_DIR=JUNIT.xml" % a, file=sys.stderr)
            return 2
    passed = failed = skipped = 0
    ran_label = {}                  # label -> how many of its tests ran (passed or failed)
    problems = list(extra_fail)
    skips = []
    print("== summary (per phase and label: passed / failed / skipped)")
    for phase, build, junit in phases:
        if not os.path.exists(junit):
            problems.append("phase %s left no report (%s): it did not run" % (phase, junit))
            continue
        labels = labels_of(build)
        per = {}
        for case in ET.parse(junit).getroot().iter("testcase"):
            name = case.get("name")
            status = case.get("status")
            kind = "passed" if status == "run" else "failed" if status == "fail" else "skipped"
            for label in labels.get(name, []) or ["(none)"]:
                per.setdefault(label, {"passed": 0, "failed": 0, "skipped": 0})[kind] += 1
                if kind != "skipped":
                    ran_label[label] = ran_label.get(label, 0) + 1
            if kind == "passed":
                passed += 1
            elif kind == "failed":
                failed += 1
            else:
                skipped += 1
                why = reason_of(case)
                skips.append((phase, name, labels.get(name, []), why))
                for label in labels.get(name, []):
                    if label in required:
                        problems.append("required label %s: %s (%s) skipped: %s" % (label, name, phase, why))
        for label in sorted(per):
            c = per[label]
            print("  %-6s %-10s %4d / %d / %d" % (phase, label, c["passed"], c["failed"], c["skipped"]))
    for label in required:
        if not ran_label.get(label):
            problems.append("required label %s: no test of it ran" % label)
    if skips:
        print("== skipped (%d)" % len(skips))
        for phase, name, labels, why in skips:
            print("  %s %s [%s]: %s" % (phase, name, ",".join(labels), why))
    if required:
        print("== required labels (AH_TEST_REQUIRE): %s" % ", ".join(required))
    for p in problems:
        print("FAILED: " + p)
    print()
    print("total: %d passed, %d failed, %d skipped" % (passed, failed + len(problems), skipped))
    return 0 if failed == 0 and not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
