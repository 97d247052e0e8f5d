#!/usr/bin/python3
"""tests/docker/firewall_docker.py: from inside a sandbox nothing outside its
network answers but the server's tunnel, and `agenthold serve` tells the
operator at start whether the host firewall makes it so.

Docker leaves the host's INPUT chain open to containers on internal
networks; agenthold does not install host firewall rules (docs/docker.md
says why) but probes at start and warns. This test, with the real server
and the real static sandboxd:
  1. no rule for the test's pool: the server logs a warning naming the
     rule to add; from inside a running sandbox a host service on the
     gateway (a listener on all addresses, not the tunnel port) answers;
  2. the recommended rule added for the test's pool only (iptables, as an
     operator would): a restarted server logs that sandboxes reach no host
     port but the tunnel's, and no warning; the agent is running again (its
     sandboxd dialed the tunnel port through the rule); from inside, the
     host service answers on no host address while the tunnel port does;
     the outside world does not answer either.
The rules are removed at the end, also on failure.

usage: firewall_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine, or without root and iptables (said).
Ports 18370-18379 (+ one the OS picks), pool 10.213.160.0/20, prefix
dockerfirewall<pid>."""
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import Fail, Harness, engine, exec_in  # noqa: E402

h = Harness("docker.firewall", sys.argv[1], "10.213.160.0/20", (18370, 18380))
RULES = [["INPUT", "-s", h.pool, "-j", "DROP"],
         ["INPUT", "-s", h.pool, "-p", "tcp", "--dport", str(h.tunnel_port), "-j", "ACCEPT"]]
inserted = []


def iptables(*args):
    return subprocess.run(["iptables", "-w"] + list(args), capture_output=True, text=True, timeout=30)


def remove_rules():
    for rule in reversed(inserted):
        iptables("-D", *rule)
    inserted.clear()


def remove_stale_rules():
    """Rules for this test's pool left by a run that was killed before its
    clean-up (the pool is this test's alone)."""
    for line in iptables("-S", "INPUT").stdout.splitlines():
        if line.startswith("-A INPUT -s %s " % h.pool):
            iptables("-D", *line.split()[1:])


def host_service():
    """A host service on all addresses (not the tunnel): answers hello."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 0))
    s.listen(8)
    s.settimeout(0.5)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, _ = s.accept()
            except OSError:
                continue
            try:
                c.sendall(b"hello-from-host\n")
            finally:
                c.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    h.cleanups.append(lambda: (stop.set(), t.join(), s.close()))
    return s.getsockname()[1]


def answers(cid, host, port):
    out = exec_in(cid, ["nc", "-w", "2", host, str(port)])
    return "hello-from-host" in out


def connects(cid, host, port):
    # busybox nc exits 0 once connected when stdin is empty (-z is not in every build).
    out = exec_in(cid, ["sh", "-c", "nc -w 2 %s %d </dev/null; echo rc=$?" % (host, port)])
    return "rc=0" in out


def firewall_line(since):
    """The server's 'host firewall:' log line after offset since, waiting."""
    deadline = time.time() + 20
    while time.time() < deadline:
        with open(h.log) as f:
            text = f.read()[since:]
        for line in text.splitlines():
            if "host firewall:" in line:
                return line
        time.sleep(0.2)
    raise Fail("no 'host firewall:' line in the server log within 20 s")


def host_addresses():
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return [a for a in out if ":" not in a and not a.startswith("127.")]


def scenario(h):
    service = host_service()
    # 1. No rule: a warning naming the rule; the gap is real.
    since = 0
    h.start_server()
    line = firewall_line(since)
    print(line)
    h.check(" WARN " in line and ("iptables -I INPUT -s %s -j DROP" % h.pool) in line and
            ("--dport %d -j ACCEPT" % h.tunnel_port) in line,
            "without a rule the server warns and names the rule: %s" % line)
    a = h.cli("create", "walled")
    h.check(a["state"] == "running", "create -> running: %r" % a["state"])
    c = h.container(a["id"])
    net = c["NetworkSettings"]["Networks"]["%s-net-%s" % (h.prefix, a["id"])]
    gateway = net["Gateway"] or net["IPAddress"].rsplit(".", 1)[0] + ".1"
    _, n = engine("GET", "/networks/%s-net-%s" % (h.prefix, a["id"]))
    gateway = n["IPAM"]["Config"][0]["Gateway"]
    h.check(answers(c["Id"], gateway, service),
            "without the rule a host service answers the sandbox on %s:%d" % (gateway, service))

    # 2. The rule, as docs/docker.md recommends, for this pool only.
    h.server.terminate()
    h.check(h.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")
    for rule in RULES:
        p = iptables("-I", *rule)
        h.check(p.returncode == 0, "iptables -I %s: %s" % (" ".join(rule), p.stderr))
        inserted.append(rule)
    since = os.path.getsize(h.log)
    h.start_server()
    line = firewall_line(since)
    print(line)
    h.check(" INFO " in line and "reaches no host port but the tunnel's" in line,
            "with the rule the server says sandboxes reach only the tunnel: %s" % line)
    h.wait_state("walled", "running", 30)
    h.check(connects(c["Id"], gateway, h.tunnel_port),
            "the tunnel port on the gateway is reachable through the rule")
    h.check(not answers(c["Id"], gateway, service),
            "with the rule the host service does not answer on the gateway")
    for addr in host_addresses():
        h.check(not answers(c["Id"], addr, service),
                "with the rule the host service does not answer on %s" % addr)
    h.check(not connects(c["Id"], "1.1.1.1", 80), "the outside world does not answer")
    with open(h.log) as f:
        text = f.read()[since:]
    h.check("WARN [docker] host firewall" not in text, "no firewall warning with the rule")

    h.check(h.cli("rm", "walled")["state"] == "destroyed", "rm")
    h.server.terminate()
    h.check(h.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")


if __name__ == "__main__":
    if os.geteuid() != 0 or not shutil.which("iptables") or iptables("-L", "INPUT", "-n").returncode:
        print("\n*** docker.firewall SKIPPED: needs root and iptables (it adds and removes a host "
              "rule for its own pool) ***\n", file=sys.stderr)
        sys.exit(77)
    remove_stale_rules()
    h.cleanups.append(remove_rules)
    sys.exit(h.run(scenario))
