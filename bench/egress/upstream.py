#!/usr/bin/python3
"""bench/egress/upstream.py: bench/egress's upstream, a process of its own
on the host (so that the bench's client and this server share no GIL):
a thread per connection on one address, every connection served alike
whoever comes (agenthold's server, tinyproxy, a container reaching it
directly).

- `GET /big` (origin or absolute form): 200 with FILE as the body, sent
  with sendfile(2) on a blocking socket (the kernel copies; the upstream
  is not what a download waits on: the bench prints a host curl's rate);
- `GET /small`: 200 with 3 bytes;
- `GET /stats`: 200 with {"held": connections holding now, "held_max",
  "held_total"} (the bench asks this itself);
- a connection whose first line is `HOLD`: answered `H\\n` at once, then
  held, reading and dropping whatever comes, until the peer closes.

usage: upstream.py ADDRESS PORT FILE
Prints the port once it listens, as one line, then serves until killed."""
import json
import os
import resource
import socket
import socketserver
import sys
import threading

ADDRESS, PORT, FILE = sys.argv[1], int(sys.argv[2]), sys.argv[3]
HEAD_MAX = 16384
stats = {"held": 0, "held_max": 0, "held_total": 0}
lock = threading.Lock()


class Handler(socketserver.StreamRequestHandler):
    def answer(self, status, body, ctype="text/plain"):
        self.wfile.write(("HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                          % (status, ctype, len(body))).encode() + body)

    def hold(self):
        with lock:
            stats["held"] += 1
            stats["held_total"] += 1
            stats["held_max"] = max(stats["held_max"], stats["held"])
        try:
            self.request.sendall(b"H\n")
            while self.request.recv(65536):
                pass
        finally:
            with lock:
                stats["held"] -= 1

    def handle(self):
        try:
            line = self.rfile.readline(HEAD_MAX)
            if line.startswith(b"HOLD"):
                self.hold()
                return
            parts = line.split()
            got = len(line)
            while got <= HEAD_MAX:              # the rest of the head, dropped
                h = self.rfile.readline(HEAD_MAX)
                got += len(h)
                if h in (b"\r\n", b"\n", b""):
                    break
            if len(parts) != 3 or parts[0] != b"GET":
                self.answer("400 Bad Request", b"bad request line\n")
                return
            path = parts[1].decode(errors="replace")
            if "://" in path:
                path = "/" + path.split("://", 1)[1].partition("/")[2]
            if path == "/big":
                size = os.path.getsize(FILE)
                self.request.sendall(("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                                      "Content-Length: %d\r\nConnection: close\r\n\r\n" % size).encode())
                with open(FILE, "rb") as f:
                    self.request.sendfile(f)
            elif path == "/small":
                self.answer("200 OK", b"ok\n")
            elif path == "/stats":
                with lock:
                    body = json.dumps(stats).encode()
                self.answer("200 OK", body, "application/json")
            else:
                self.answer("404 Not Found", b"no such path\n")
        except OSError:
            pass


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 2048


soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
threading.stack_size(256 << 10)
server = Server((ADDRESS, PORT), Handler)
server.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
print(server.server_address[1], flush=True)
server.serve_forever()
