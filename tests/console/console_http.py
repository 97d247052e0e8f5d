#!/usr/bin/python3
"""tests/console/console_http.py: the web console's routes at the HTTP level,
on the real `agenthold serve` (fake driver, ports from ahserver.free_port).

- headers: every console file answers with the strict Content-Security-
  Policy (no 'unsafe-inline', no other origin, frame-ancestors 'none'),
  X-Frame-Options DENY, nosniff and no-referrer; HEAD the same, no body.
- the assets: each file of web/console/ is served byte for byte from the
  binary (not read from the tree: the test copies the binary away from it),
  with its type; no inline script, no inline handler, no URL of another
  origin in any of them.
- hostile asset paths on a raw socket: '..' written or encoded, encoded
  slashes, NULs, control characters, a trailing slash, case changes,
  unknown names, query arguments: 400 or 404, never a file's bytes.
- sign-in: GET /api/v1/me names the token's tenant; no Set-Cookie anywhere.
- terminal tickets: a ticket needs a token, is refused for another
  tenant's agent (404), opens the terminal WebSocket once (an echo comes
  back), is refused a second time, for another agent, from another
  Origin, with the token itself in the URL, and after its token was
  revoked.

usage: console_http.py AGENTHOLD_BINARY"""
import asyncio
import os
import shutil
import socket
import time
import sys

import websockets

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from consolelib import Fail, Server, SRC, check, checks, ws_refused  # noqa: E402

CONSOLE = os.path.join(SRC, "web", "console")
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png"}
def raw(port, request):
    """One request as bytes on a fresh socket: (status, head, body)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(request)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep:
                length = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if length and len(body) >= length[0]:
                    break
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers.setdefault(k.strip().lower(), []).append(v.strip())
    return int(lines[0].split()[1]), headers, body


def get(port, target, method="GET", extra=b""):
    return raw(port, b"%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s\r\n"
               % (method.encode(), target, extra))


def check_console_headers(h, what):
    csp = h.get("content-security-policy", [""])
    check(len(csp) == 1, "%s: one Content-Security-Policy" % what)
    directives = {d.split()[0]: d.split()[1:] for d in csp[0].split(";") if d.strip()}
    check(directives.get("default-src") == ["'none'"], "%s: default-src 'none' (%s)" % (what, csp))
    check(directives.get("script-src") == ["'self'"], "%s: script-src 'self' only (%s)" % (what, csp))
    check(directives.get("style-src") == ["'self'"], "%s: style-src 'self' only" % what)
    check(directives.get("connect-src") == ["'self'"], "%s: connect-src 'self' only" % what)
    check(directives.get("frame-ancestors") == ["'none'"], "%s: frame-ancestors 'none'" % what)
    check(directives.get("base-uri") == ["'none'"] and directives.get("form-action") == ["'none'"],
          "%s: base-uri and form-action 'none'" % what)
    check("unsafe" not in csp[0] and "*" not in csp[0] and "http" not in csp[0],
          "%s: nothing unsafe, no wildcard, no other origin in the CSP" % what)
    check(h.get("x-frame-options") == ["DENY"], "%s: X-Frame-Options DENY" % what)
    check(h.get("x-content-type-options") == ["nosniff"], "%s: nosniff" % what)
    check(h.get("referrer-policy") == ["no-referrer"], "%s: no-referrer" % what)
    check("set-cookie" not in h, "%s: no cookie is ever set" % what)


def assets(srv):
    names = sorted(os.listdir(CONSOLE))
    check("index.html" in names and "app.js" in names and "term.js" in names, "the console's files exist")
    for name in names:
        with open(os.path.join(CONSOLE, name), "rb") as f:
            want = f.read()
        status, h, body = get(srv.port, b"/console/" + name.encode())
        check(status == 200, "/console/%s: 200, got %d" % (name, status))
        check(body == want, "/console/%s: the bytes of web/console/%s" % (name, name))
        check(h.get("content-type") == [TYPES[os.path.splitext(name)[1]]], "/console/%s: its type" % name)
        check_console_headers(h, "/console/" + name)
        text = want.decode("utf-8")
        check("http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
              and "//cdn" not in text, "%s: names no other origin" % name)
        if name.endswith(".html"):
            low = text.lower()
            check(low.count("<script") == low.count("<script type=\"module\" src=\"/console/"),
                  "%s: every script is a file of the console (no inline script)" % name)
            check(" onclick=" not in low and " onload=" not in low and " style=" not in low,
                  "%s: no inline handler or style" % name)
        if name.endswith(".js"):
            check("innerHTML" not in text and "eval(" not in text and "localStorage" not in text
                  and "sessionStorage" not in text and "document.cookie" not in text,
                  "%s: no innerHTML, eval, storage or cookie" % name)
    status, h, body = get(srv.port, b"/")
    with open(os.path.join(CONSOLE, "index.html"), "rb") as f:
        check(status == 200 and body == f.read(), "/ is index.html")
    check_console_headers(h, "/")
    status, h, body = get(srv.port, b"/console/app.js", "HEAD")
    check(status == 200 and body == b"" and int(h["content-length"][0]) == os.path.getsize(
        os.path.join(CONSOLE, "app.js")), "HEAD /console/app.js: the length, no body")
    check_console_headers(h, "HEAD /console/app.js")


def hostile(srv):
    cases = [
        (b"/console/../CMakeLists.txt", (400,)), (b"/console/..%2fCMakeLists.txt", (400,)),
        (b"/console/%2e%2e/CMakeLists.txt", (400,)), (b"/console/%2e%2e", (400,)),
        (b"/console/..", (400,)), (b"/console/.", (400,)), (b"/console/./app.js", (400,)),
        (b"/console/%2fetc%2fpasswd", (400,)), (b"/console/app.js%00", (400,)),
        (b"/console/app.js%00.png", (400,)), (b"/console/app%0a.js", (400,)),
        (b"/console/app.js/", (400,)), (b"/console//app.js", (400,)), (b"/console/", (400,)),
        (b"/console/APP.JS", (404,)), (b"/console/app.js.map", (404,)), (b"/console/nope.js", (404,)),
        (b"/console/%61pp.js%20", (404,)), (b"/console/web_assets.c", (404,)),
        (b"/console/assets.c", (404,)), (b"/console/embed.cmake", (404,)),
        (b"/console/app.js?x=1", (400,)), (b"/console/app.js?tenant=default", (400,)),
        (b"/console/sub/app.js", (401, 404)), (b"/console", (401, 404)),
        (b"/index.html", (401, 404)), (b"/app.js", (401, 404)),
        (b"/console/..%5capp.js", (404,)), (b"/console/%252e%252e", (404,)),
    ]
    app = open(os.path.join(CONSOLE, "app.js"), "rb").read()
    for target, want in cases:
        status, h, body = get(srv.port, target)
        check(status in want, "GET %r: %s, got %d %r" % (target, want, status, body[:120]))
        check(body != app and b"cmake_minimum_required" not in body
              and b"root:" not in body, "GET %r: no file's bytes" % target)
    status, h, body = get(srv.port, b"/console/app.js", "POST", b"Content-Length: 0\r\n")
    check(status in (401, 405), "POST /console/app.js refused, got %d" % status)
    status, h, body = get(srv.port, b"/console/app.js", "DELETE")
    check(status in (401, 405), "DELETE /console/app.js refused, got %d" % status)


def signin(srv, acme_tok):
    status, me = srv.call("GET", "/api/v1/me", acme_tok)
    check(status == 200 and me["tenant"] == "acme" and me["admin"] is False, "GET /api/v1/me: %s" % me)
    status, me = srv.call("GET", "/api/v1/me", srv.admin)
    check(status == 200 and me["admin"] is True, "GET /api/v1/me as admin: %s" % me)
    status, answer = srv.call("GET", "/api/v1/me", "0" * 64)
    check(status == 401 and "wrong bearer token" in answer["error"], "a wrong token: 401 %s" % answer)
    status, answer = srv.call("GET", "/api/v1/me")
    check(status == 401, "no token: 401")
    status, h, _ = get(srv.port, b"/api/v1/me", extra=b"Authorization: Bearer " + acme_tok.encode() + b"\r\n")
    check("set-cookie" not in h, "signing in sets no cookie")


async def ws_echo(uri, headers=None):
    async with websockets.connect(uri, open_timeout=30, close_timeout=5,
                                  extra_headers=headers or {}) as ws:
        await ws.send(b"echo tick-$((6*7))\r")
        seen = b""
        while b"tick-42" not in seen:
            data = await asyncio.wait_for(ws.recv(), 20)
            seen += data if isinstance(data, bytes) else data.encode()
        await ws.send(b"exit\r")
    return seen


def ws_close_code(port, target, payload):
    """Opens the terminal's WebSocket by hand, sends a close frame with
    payload (masked, as a client's), and returns the code of the close
    frame the server answers with (None: none came)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nOrigin: http://127.0.0.1:%d\r\n"
                  b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                  b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n" % (target.encode(), port, port))
        data = b""
        while b"\r\n\r\n" not in data:
            more = s.recv(4096)
            if not more:
                return None
            data += more
        if not data.startswith(b"HTTP/1.1 101"):
            return None
        data = data.partition(b"\r\n\r\n")[2]
        mask = b"\x01\x02\x03\x04"
        s.sendall(bytes([0x88, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        deadline = time.time() + 10
        while time.time() < deadline:
            # Frames from the server (unmasked): skip all but the close.
            while len(data) >= 2:
                n = data[1] & 0x7f
                hl = 2 + (2 if n == 126 else 8 if n == 127 else 0)
                if len(data) < hl:
                    break
                if n >= 126:
                    n = int.from_bytes(data[2:hl], "big")
                if len(data) < hl + n:
                    break
                if data[0] & 0x0f == 0x8:
                    return int.from_bytes(data[hl:hl + 2], "big") if n >= 2 else 1005
                data = data[hl + n:]
            more = s.recv(4096)
            if not more:
                return None
            data += more
        return None
    finally:
        s.close()


def tickets(srv, acme_tok, acme, theirs):
    base = "ws://127.0.0.1:%d/console/terminal/" % srv.port
    status, _ = srv.call("POST", "/api/v1/agents/%s/terminal/ticket" % acme["id"])
    check(status == 401, "a ticket without a token: 401, got %d" % status)
    status, answer = srv.call("POST", "/api/v1/agents/%s/terminal/ticket" % theirs["id"], acme_tok)
    check(status == 404, "a ticket for another tenant's agent: 404, got %d %s" % (status, answer))
    status, answer = srv.call("POST", "/api/v1/agents/%s/terminal/ticket" % theirs["name"], acme_tok)
    check(status == 404, "...by its name too: 404, got %d" % status)

    t = srv.ok("POST", "/api/v1/agents/%s/terminal/ticket" % acme["name"], acme_tok)
    check(t["agent_id"] == acme["id"] and len(t["ticket"]) == 64 and t["ticket"] != acme_tok
          and t["expires_in_s"] == 30, "a ticket: %s" % t)
    origin = {"Origin": "http://127.0.0.1:%d" % srv.port}
    seen = asyncio.run(ws_echo(base + "%s?ticket=%s&cols=100&rows=30" % (acme["id"], t["ticket"]), origin))
    check(b"tick-42" in seen, "the ticket opened the terminal and the echo came back")
    code = asyncio.run(ws_refused(base + "%s?ticket=%s" % (acme["id"], t["ticket"]), origin))
    check(code == 401, "a used ticket: 401, got %s" % code)

    t = srv.ok("POST", "/api/v1/agents/%s/terminal/ticket" % acme["id"], acme_tok)
    code = asyncio.run(ws_refused(base + "%s?ticket=%s" % (theirs["id"], t["ticket"]), origin))
    check(code == 401, "a ticket for another agent: 401, got %s" % code)
    code = asyncio.run(ws_refused(base + "%s?ticket=%s" % (acme["id"], t["ticket"]), origin))
    check(code == 401, "...and that spent it: 401, got %s" % code)

    t = srv.ok("POST", "/api/v1/agents/%s/terminal/ticket" % acme["id"], acme_tok)
    code = asyncio.run(ws_refused(base + "%s?ticket=%s" % (acme["id"], t["ticket"]),
                                  {"Origin": "http://evil.example"}))
    check(code == 403, "another Origin: 403, got %s" % code)
    code = asyncio.run(ws_refused(base + "%s?ticket=%s" % (acme["id"], t["ticket"]),
                                  {"Origin": "http://127.0.0.1:%d.evil.example" % srv.port}))
    check(code == 403, "an Origin that only starts like ours: 403, got %s" % code)
    code = asyncio.run(ws_refused(base + "%s?token=%s" % (acme["id"], acme_tok), origin))
    check(code == 400, "the token itself in the console's URL: 400, got %s" % code)
    code = asyncio.run(ws_refused(base + "%s?ticket=%s" % (acme["id"], "f" * 64), origin))
    check(code == 401, "a forged ticket: 401, got %s" % code)
    code = asyncio.run(ws_refused(base + "%s?ticket=%s" % (acme["id"], "x' OR 1=1"), origin))
    check(code in (400, 401), "a hostile ticket: refused, got %s" % code)

    # Close frames a client may not send (RFC 6455 5.5.1, 7.4) are answered
    # 1002; a good code is echoed.
    for payload, want in ((b"\x03\xe8", 1000), (b"\x0f\xa1bye", 4001), (b"\x03", 1002),
                          (b"\x03\xee", 1002), (b"\x03\xed", 1002), (b"\x03\xf7", 1002),
                          (b"\x00\x00", 1002), (b"\x13\x88", 1002)):
        t = srv.ok("POST", "/api/v1/agents/%s/terminal/ticket" % acme["id"], acme_tok)
        code = ws_close_code(srv.port, "/console/terminal/%s?ticket=%s" % (acme["id"], t["ticket"]), payload)
        check(code == want, "a client's close %r: the server answers %d, got %s" % (payload, want, code))

    # A ticket outlives nothing: its token revoked meanwhile, it is refused.
    tmp = srv.ok("POST", "/api/v1/tokens", srv.admin, {"tenant": "acme", "name": "short-lived"})["token"]
    t = srv.ok("POST", "/api/v1/agents/%s/terminal/ticket" % acme["id"], tmp)
    srv.ok("DELETE", "/api/v1/tokens/short-lived", srv.admin)
    code = asyncio.run(ws_refused(base + "%s?ticket=%s" % (acme["id"], t["ticket"]), origin))
    check(code == 401, "a ticket whose token was revoked: 401, got %s" % code)


def main_for(srv):
    def main():
        srv.start()
        acme_tok = srv.tenant_token("acme")
        other_tok = srv.tenant_token("other")
        acme = srv.agent("web", acme_tok)
        theirs = srv.agent("secret", other_tok)
        assets(srv)
        hostile(srv)
        signin(srv, acme_tok)
        tickets(srv, acme_tok, acme, theirs)
        print("console.http: %d checks passed" % checks())
    return main


if __name__ == "__main__":
    # The binary runs from a copy in the temporary directory, so what it
    # serves can only come from inside it.
    server = Server(None, "ah-console-http-")
    binary = os.path.join(server.tmp, "agenthold")
    shutil.copy(os.path.abspath(sys.argv[1]), binary)
    # serve execs agenthold-server from the client's directory (docs/cli.md).
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "agenthold-server"),
                os.path.join(server.tmp, "agenthold-server"))
    sandboxd = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "sandboxd")
    if os.path.exists(sandboxd):
        shutil.copy(sandboxd, os.path.join(server.tmp, "sandboxd"))
    server.binary = binary
    sys.exit(server.run(main_for(server)))
