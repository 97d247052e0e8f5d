#!/usr/bin/python3
"""bench/egress/hold.py: runs INSIDE the sandbox (the bench copies it
there): opens N connections at once to the egress proxy, each a
`CONNECT TARGET`, and holds every one the proxy carries (after its
`200`, `HOLD` goes upstream and the upstream's `H` comes back: the
connection is through end to end).

It writes OUT (JSON, replaced atomically) once every connection has its
answer: {"phase": "held", "held", "refused" (503s), "other", "first_503"
(the proxy's sentence, which states the cap), "errors"}; then waits for
the file STOP, and before closing checks that each held connection is
still open (none readable: no EOF, nothing unasked); then closes them all
and writes {"phase": "closed", "still_open", ...}.

usage: hold.py N PROXY TARGET OUT STOP   (PROXY: host:port, 127.0.0.1:3128 in a sandbox)"""
import json
import os
import resource
import selectors
import socket
import sys
import time

N, TARGET, OUT, STOP = int(sys.argv[1]), sys.argv[3], sys.argv[4], sys.argv[5]
PROXY = (sys.argv[2].rpartition(":")[0], int(sys.argv[2].rpartition(":")[2]))
ANSWER_S = 60                           # every connection answered within this
HOLD_S = 600                            # held at most this long without STOP


def write(state):
    tmp = OUT + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.rename(tmp, OUT)


soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft < N + 64:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, N + 64), hard))

sel = selectors.DefaultSelector()
conns = {}                              # socket -> {"state", "buf"}
state = {"phase": "opening", "n": N, "held": 0, "refused": 0, "other": 0, "first_503": None, "errors": []}


def end(s, kind, why=None):
    state[kind] += 1
    if why and len(state["errors"]) < 5:
        state["errors"].append(why)
    c = conns[s]
    c["state"] = kind
    if kind != "held":
        sel.unregister(s)
        s.close()


for _ in range(N):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(PROXY)
    conns[s] = {"state": "connecting", "buf": b""}
    sel.register(s, selectors.EVENT_WRITE)

pending = N
deadline = time.monotonic() + ANSWER_S
while pending and time.monotonic() < deadline:
    for key, ev in sel.select(timeout=1.0):
        s = key.fileobj
        c = conns[s]
        try:
            if c["state"] == "connecting":
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    end(s, "other", "connect: %s" % os.strerror(err))
                    pending -= 1
                    continue
                s.send(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (TARGET, TARGET)).encode())
                c["state"] = "asked"
                sel.modify(s, selectors.EVENT_READ)
                continue
            data = s.recv(65536)
            if not data:
                end(s, "other", "closed in state %s after %r" % (c["state"], c["buf"][:200]))
                pending -= 1
                continue
            c["buf"] += data
            if c["state"] == "asked":
                head, sep, rest = c["buf"].partition(b"\r\n\r\n")
                if not sep:
                    continue
                status = head.split(b" ", 2)[1:2]
                if status == [b"200"]:
                    c["state"], c["buf"] = "through", rest
                    s.send(b"HOLD\n")
                elif status == [b"503"]:
                    # The proxy's sentence, which states the cap: read whole (it closes after).
                    body = rest
                    try:
                        s.setblocking(True)
                        s.settimeout(2)
                        while True:
                            more = s.recv(4096)
                            if not more:
                                break
                            body += more
                    except OSError:
                        pass
                    if state["first_503"] is None:
                        state["first_503"] = body.decode(errors="replace").strip()[:300]
                    end(s, "refused")
                    pending -= 1
                    continue
                else:
                    end(s, "other", "answer %r" % head[:200])
                    pending -= 1
                    continue
            if c["state"] == "through" and c["buf"].startswith(b"H\n"):
                c["buf"] = c["buf"][2:]
                end(s, "held")
                pending -= 1
        except OSError as e:
            end(s, "other", "%s: %s" % (c["state"], e))
            pending -= 1

state["unanswered"] = pending
state["phase"] = "held"
write(state)

deadline = time.monotonic() + HOLD_S
while not os.path.exists(STOP) and time.monotonic() < deadline:
    time.sleep(0.05)

# Still open: a held connection that is readable now got an EOF or bytes
# nobody asked for while held.
held = [s for s, c in conns.items() if c["state"] == "held"]
ready = {key.fileobj for key, _ in sel.select(timeout=0)}
state["still_open"] = sum(1 for s in held if s not in ready)
for s in list(conns):
    if conns[s]["state"] in ("held", "through", "asked", "connecting"):
        try:
            sel.unregister(s)
        except (KeyError, ValueError):
            pass
        s.close()
state["phase"] = "closed"
write(state)
