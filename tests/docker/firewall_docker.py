#!/usr/bin/python3
"""tests/docker/firewall_docker.py: a sandbox of a runtime that needs no
network reaches nothing on the host but the tunnel's socket, with no host
firewall rule at all; and `agenthold serve` tells the operator at start
what a sandbox *with* a network (a runtime with needs_network) reaches:
under the default sandbox.docker.egress (tunnel) none has one, which it
says without probing; under bridge it probes.

With the real server and the real static sandboxd:
  1. no rule: an agent of the default runtime becomes running (its
     sandboxd dialed the tunnel's unix socket); its container has network
     mode none; from inside, a host service listening on all addresses,
     the tunnel's TCP port and the API's port answer on no host address
     (nor on any gateway of the engine's networks), and the outside world
     does not answer either. The server's probe line says sandboxes
     without a network reach only the tunnel's socket; for networked ones
     it says whether the host answered them (sandboxd's prohibit routes
     keep it from answering) and, when it did, warns with the rule.
  2. with root and iptables only: the recommended rule added for the
     test's pool (as an operator would): a restarted server says a
     networked sandbox reaches no host port, and no warning; the agent is
     running again. The rule is removed at the end, also on failure.

usage: firewall_docker.py AGENTHOLD_BINARY (sandboxd next to it)
Exits 77 without a Docker Engine; skips part 2 (said) without root and
iptables. Ports from ahserver.free_port (+ one the OS picks), pool 10.213.160.0/20,
prefix dockerfirewall<pid>."""
import os
import shutil
import socket
import subprocess
import sys
import time

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ahdocker import Fail, Harness, engine, exec_in, host_addresses, host_service  # noqa: E402
import ahserver  # noqa: E402  (on the path ahdocker set)

h = Harness("docker.firewall", sys.argv[1], "10.213.160.0/20")
RULES = [["INPUT", "-s", h.pool, "-j", "DROP"]]
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


def can_firewall():
    return os.geteuid() == 0 and shutil.which("iptables") and \
        iptables("-L", "INPUT", "-n").returncode == 0


def scenario(h):
    service = host_service(h)
    # 1. No rule at all: the default runtime's sandbox has no network.
    since = 0
    h.start_server()
    a = h.cli("create", "walled")
    h.check(a["state"] == "running", "create -> running (sandboxd dialed the tunnel's socket): %r"
            % a["state"])
    c = h.container(a["id"])
    h.check(c["HostConfig"]["NetworkMode"] == "none" and
            set(c["NetworkSettings"]["Networks"]) <= {"none"},
            "the sandbox has no network: %r %r" % (c["HostConfig"]["NetworkMode"],
                                                   list(c["NetworkSettings"]["Networks"])))
    addrs = host_addresses()
    h.check(len(addrs) >= 2, "host addresses to try: %r" % addrs)
    for addr in addrs:
        for port, what in ((service, "a host service on 0.0.0.0"), (h.tunnel_port, "the tunnel's TCP port"),
                           (h.api_port, "the API's port")):
            h.check(not connects(c["Id"], addr, port),
                    "%s does not answer the sandbox on %s:%d" % (what, addr, port))
    # The service is really there: the host itself reaches it.
    with socket.create_connection(("127.0.0.1", service), timeout=2) as s:
        h.check(s.recv(64).startswith(b"hello-from-host"), "the host service answers the host")
    h.check(not connects(c["Id"], "1.1.1.1", 80), "the outside world does not answer")
    print("%d host addresses x 3 ports: nothing answers the sandbox" % len(addrs))
    # The default sandbox.docker.egress (tunnel): no sandbox has a network,
    # a networked runtime's included, so the probe has nothing to probe.
    line = firewall_line(since)
    print(line)
    h.check(" INFO " in line and "no sandbox has a network" in line
            and "no host firewall rule is needed" in line,
            "under the default egress the server says no sandbox has a network: %s" % line)
    h.check(not [n for n in engine("GET", "/networks")[1] if n["Name"].startswith(h.prefix + "-probe-")],
            "no probe network was made under the default egress")
    # sandbox.docker.egress bridge, which an operator must choose: sandboxes
    # of a networked runtime get a network of their own, and the probe
    # tells whether the host's addresses answer them.
    h.server.terminate()
    h.check(h.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")
    h.env["AGENTHOLD_SANDBOX_DOCKER_EGRESS"] = "bridge"
    since = os.path.getsize(h.log)
    h.start_server()
    line = firewall_line(since)
    print(line)
    h.check("have none and reach only the tunnel's socket" in line,
            "the server says sandboxes without a network reach only the tunnel's socket: %s" % line)
    if " WARN " in line:
        h.check(("iptables -I INPUT -s %s -j DROP" % h.pool) in line and "needs_network" in line,
                "the warning is about networked sandboxes and names the rule: %s" % line)

    # 2. The rule, as docs/docker.md recommends, for this pool only.
    if not can_firewall():
        h.check(not ahserver.required("docker"), "part 2 (the host rule) needs root and iptables, and docker "
                "is required (AH_TEST_REQUIRE): the firewall is untested")
        print("\n*** docker.firewall: part 2 SKIPPED: needs root and iptables (it adds and removes "
              "a host rule for its own pool) ***\n", file=sys.stderr)
    else:
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
        h.check(" INFO " in line and "a sandbox with a network on %s reaches no host port" % h.pool
                in line, "with the rule the server says networked sandboxes reach no host port: %s"
                % line)
        h.wait_state("walled", "running", 30)
        with open(h.log) as f:
            text = f.read()[since:]
        h.check("WARN [docker] host firewall" not in text, "no firewall warning with the rule")

    h.check(h.cli("rm", "walled")["state"] == "destroyed", "rm")
    h.server.terminate()
    h.check(h.server.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")


if __name__ == "__main__":
    if can_firewall():
        remove_stale_rules()
    h.cleanups.append(remove_rules)
    sys.exit(h.run(scenario))
