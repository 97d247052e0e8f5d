#!/usr/bin/python3
"""tests/e2e/e2e_tap.py: the monitoring tap never carries data. The real
`agenthold serve` (fake driver, temporary data directory, ports from
ahserver.free_port) with tap.endpoint set; a subscriber takes every frame the
tap publishes, and `agenthold tap` prints its JSON lines, while a file
holding a marker is uploaded and downloaded through the API and a
terminal session types a second marker that the shell echoes back.

Neither marker may appear in any frame of the tap; the CHAN_DATA
messages that carried them must be there, with their metadata only
({chan, bytes}), and their byte counts must add up to the transfers.

usage: e2e_tap.py AGENTHOLD_BINARY
Always kills what it started and removes its temporary directory."""
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

import msgpack
import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahserver  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="ah-e2e-tap-")
DATA = os.path.join(TMP, "data")
TAP = "ipc://%s/tap" % TMP
LOG = os.path.join(TMP, "server.log")
procs = []


class Fail(Exception):
    pass


check = ahserver.Checks(Fail)


API_PORT = ahserver.free_port(fail=Fail)
TUNNEL_PORT = ahserver.free_port(avoid={API_PORT}, fail=Fail)
ENV = ahserver.server_env(DATA, API_PORT, TUNNEL_PORT, extra={"AGENTHOLD_TAP_ENDPOINT": TAP})
#  Made here, so no earlier run and nothing else can have them: the file's
#  and the terminal's bytes, never a path, a name or a command line.
FILE_MARK = ("filemark-%s-" % uuid.uuid4().hex).encode()
TERM_MARK = "termmark%s" % uuid.uuid4().hex
FILE = FILE_MARK * ((1 << 20) // len(FILE_MARK))


def api(method, path, body=None, expect=200, timeout=60):
    status, raw = ahserver.request(API_PORT, method, path, body, ahserver.read_token(DATA), None, timeout)
    check(expect is None or status == expect, "%s %s: %d (wanted %s): %r" % (method, path, status, expect, raw[:300]))
    return status, raw


class Subscriber(threading.Thread):
    """Every tap message, as its raw frames, until stopped."""
    def __init__(self):
        super().__init__(daemon=True)
        self.frames = []
        self.stop = False
        self.sock = zmq.Context.instance().socket(zmq.SUB)
        self.sock.setsockopt(zmq.RCVHWM, 1000000)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(TAP)

    def run(self):
        while not self.stop:
            if self.sock.poll(100):
                self.frames.append(self.sock.recv_multipart())
        self.sock.close(0)


def chan_bytes(frames):
    """{(sender, destination): bytes} of the CHAN_DATA messages among frames."""
    sent = {}
    for msg in list(frames):
        if len(msg) == 4 and msg[0] == b"CHAN_DATA":
            try:
                n = msgpack.unpackb(msg[3], raw=False)["bytes"]
            except (ValueError, KeyError, TypeError, msgpack.UnpackException):
                continue
            key = (msg[1].decode(errors="replace"), msg[2].decode(errors="replace"))
            sent[key] = sent.get(key, 0) + n
    return sent


def enough(frames):
    """Whether the tap has shown the whole file and terminal exchange."""
    sent = chan_bytes(frames)
    return (sent.get(("api", "tunnel"), 0) >= len(FILE) + len(TERM_MARK)
            and sent.get(("tunnel", "api"), 0) >= len(FILE) + 2 * len(TERM_MARK))


def terminal(agent, line, want):
    """Types line once the shell speaks; the output until want shows twice
    (the line echoed as typed, then the command's output)."""
    return ahserver.terminal(API_PORT, agent, ahserver.read_token(DATA), line,
                             lambda out: out.count(want) >= 2)[0]


def main():
    server = ahserver.serve(BIN, ENV, LOG, cwd=TMP, procs=procs, fail=Fail)
    api("POST", "/api/v1/agents?wait=1", {"name": "tapped"}, expect=None, timeout=120)
    api("POST", "/api/v1/agents/tapped/start?wait=1", expect=None, timeout=120)

    sub = Subscriber()
    sub.start()
    cli = subprocess.Popen([BIN, "tap", "--endpoint", TAP, "--type", "CHAN_*"], env=ENV, cwd=TMP,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    procs.append(cli)
    #  Pacing, not a wait for an event: ZeroMQ tells no one when a SUB's
    #  subscription has reached the PUB (the slow joiner), least of all
    #  for the CLI's socket in another process.
    time.sleep(1)

    path = "/api/v1/agents/tapped/files/%s" % urllib.parse.quote("tap/check.bin")
    api("POST", "/api/v1/agents/tapped/files/tap?op=mkdir&parents=1", expect=201)
    api("PUT", path, FILE)
    _, back = api("GET", path)
    check(back == FILE, "the file came back different (%d bytes)" % len(back))
    out = terminal("tapped", "echo %s\n" % TERM_MARK, TERM_MARK.encode() + b"\r\n")
    check(out.count(TERM_MARK.encode()) >= 2, "the terminal did not echo the marker: %r" % out[-300:])
    #  The last messages reach the subscriber: the CHAN_DATA it counted
    #  covers the file and the terminal both ways (the checks below say
    #  what is missing).
    ahserver.wait_until(lambda: enough(sub.frames), 10, "the tap's last messages", None)
    sub.stop = True
    sub.join(5)
    cli.terminate()
    lines, _ = cli.communicate(timeout=10)

    #  Nothing of the data, in any frame.
    frames = [f for msg in sub.frames for f in msg]
    check(len(sub.frames) > 0, "the tap published nothing")
    for mark in (FILE_MARK, TERM_MARK.encode(), FILE_MARK[:16], TERM_MARK[:16].encode()):
        check(not any(mark in f for f in frames), "the tap carried data: %r" % mark)
        check(mark not in lines, "agenthold tap printed data: %r" % mark)
    #  The CHAN_DATA that carried it, by its metadata.
    for msg in sub.frames:
        check(len(msg) == 4, "a tap message of %d frames" % len(msg))
        if msg[0] != b"CHAN_DATA":
            continue
        meta = msgpack.unpackb(msg[3], raw=False)
        check(set(meta) == {"chan", "bytes"}, "CHAN_DATA on the tap holds %r" % sorted(meta))
    sent = chan_bytes(sub.frames)
    check(sent.get(("api", "tunnel"), 0) >= len(FILE) + len(TERM_MARK),
          "CHAN_DATA api -> tunnel on the tap counts %d bytes" % sent.get(("api", "tunnel"), 0))
    check(sent.get(("tunnel", "api"), 0) >= len(FILE) + 2 * len(TERM_MARK),
          "CHAN_DATA tunnel -> api on the tap counts %d bytes" % sent.get(("tunnel", "api"), 0))
    types = {msg[0] for msg in sub.frames}
    check({b"CHAN_OPEN", b"CHAN_ACK", b"REPLY"} <= types, "control messages missing on the tap: %r" % types)
    check(b'"type":"CHAN_DATA"' in lines and b'"bytes":' in lines,
          "agenthold tap printed no CHAN_DATA metadata: %r" % lines[:300])
    print("e2e_tap: %d checks passed (%d tap messages, %d CHAN_DATA bytes counted)"
          % (check.count, len(sub.frames), sum(sent.values())))


if __name__ == "__main__":
    sys.exit(ahserver.run(main, Fail, procs, TMP, LOG))
