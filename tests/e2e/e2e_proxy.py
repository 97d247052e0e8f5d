#!/usr/bin/python3
"""tests/e2e/e2e_proxy.py: a sandbox's web server reached through the
server (actors/api/proxy.c, docs/ports.md), on the real `agenthold serve`
with the fake driver (its sandboxd shares the host's network, so a web
server of the test's own on 127.0.0.1 is the sandbox's web server).

  link      POST /api/v1/agents/{a}/ports/{port}/link: a path with the
            capability; hostile ports and lifetimes 400; another tenant's
            token 404
  revoke    GET .../ports/links lists the link (id, port, expiry, maker; not
            the capability), DELETE .../ports/links/{id} revokes it: the
            invalid link's 403 and nothing reaches the sandbox; another
            tenant's list and revocation 404, hostile ids 400/404;
            `agenthold links` and `agenthold unlink`; after a restart a
            revoked link stays revoked and a standing one works
  forward   a GET and a POST of 1 MiB through the link: the sandbox's server
            sees the path and query as sent, Host 127.0.0.1:PORT, no
            Authorization, no agenthold_session cookie (other cookies
            pass), no Forwarded / X-Forwarded-* the client made up; the
            answer carries CSP sandbox and Referrer-Policy no-referrer and
            loses the sandbox's Set-Cookie, Clear-Site-Data and HSTS; the
            bare prefix is a 308 to the prefix with its '/'
  refused   a signature bent by one digit, another port, a longer expiry,
            another agent, an unknown agent, a port that is not a number:
            403/404 and nothing reaches the sandbox's server
  token     /p/{id}/{port}/t/...: the tenant's bearer token instead of a
            link (401 without or wrong, 404 another tenant's, a cookie is
            no credential there); the token does not reach the sandbox
  public    PUT .../ports/{port} {"public": true}: hostile bodies and ports
            400, another tenant 404; /p/{id}/{port}/public/ refused (403)
            while not marked, and while marked under the shipped
            ports.lua (private); open to anyone once ports.lua allows it
            (edited in place: applies within a second), for that port
            only; marked private again: 403; kept over a restart
  hostile   the sandbox's server answers a head over 64 KiB, a control
            byte in a header, a blank before a header's colon, a folded
            line, not HTTP, nothing: 502 naming it; interim 1xx heads
            dropped and the final one rewritten (no cookie slips by); a server
            that never answers: 504 after ports.answer_timeout; nothing
            listens on the port: 502 naming the port; a chunked request
            body: 411
  websocket a WebSocket upgrade through the link to a real WebSocket echo
            server (python3-websockets) in the sandbox: text and a 1 MiB
            binary message round trip byte for byte; the sandbox's server
            gets Host 127.0.0.1:PORT and no Authorization; an open, silent
            WebSocket keeps an agent with idle_minutes 0.05 awake (a terminal's
            rule), which sleeps once it closes; the sandbox's server
            closing ends the client's connection; an upgrade to a server
            that does not upgrade passes its answer; a POST upgrade and one
            without Connection: Upgrade are 400
  wake      the agent asleep: a request through the link wakes it and is
            answered
  audit     port.link and port.request rows in the agent's audit trail

usage: e2e_proxy.py AGENTHOLD_BINARY [SCENARIO...]
Always kills what it started and removes its temporary directory."""
import hashlib
import http.client
import http.server
import json
import os
import shutil
import socket
import sys
import threading
import time
import urllib.parse

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahlocal  # noqa: E402
import ahserver  # noqa: E402

CTX = ahlocal.context("ah-e2e-proxy-")
Fail, check = CTX.fail, CTX.check
SEEN = []           # (method, path, headers dict lower-cased, body sha256) the upstream got


class Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def handle_one(self):
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n) if n else b""
        SEEN.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                     hashlib.sha256(body).hexdigest()))
        p = self.path.split("?")[0]
        if p == "/hang":
            time.sleep(6)
            return
        raw = {
            "/bighead": b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (70 << 10) + b"\r\n\r\n",
            "/ctl": b"HTTP/1.1 200 OK\r\nX-Bad: a\x01b\r\nContent-Length: 2\r\n\r\nok",
            "/nothttp": b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
            "/nothing": b"",
            "/spacename": b"HTTP/1.1 200 OK\r\nSet-Cookie : agenthold_session=x; Path=/\r\nContent-Length: 2\r\n\r\nok",
            "/folded": b"HTTP/1.1 200 OK\r\nX-A: a\r\n Set-Cookie: agenthold_session=x\r\nContent-Length: 2\r\n\r\nok",
            "/interim": (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
                         b"HTTP/1.1 200 OK\r\nSet-Cookie: agenthold_session=x; Path=/\r\nContent-Length: 5\r\n\r\nfinal"),
        }.get(p)
        if raw is not None:
            self.wfile.write(raw)
            self.close_connection = True
            return
        out = body if p == "/echo" else b"hello from the sandbox"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(out)))
        self.send_header("Set-Cookie", "agenthold_session=planted; Path=/")
        self.send_header("Clear-Site-Data", '"cookies"')
        self.send_header("Strict-Transport-Security", "max-age=99999")
        self.send_header("X-App", "kept")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = handle_one


def upstream():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", ahserver.free_port(fail=Fail)), Upstream)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def fetch(port, method, path, headers=None, body=None):
    """(status, headers as a list of (lower name, value), body) of one request."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=150)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, [(k.lower(), v) for k, v in r.getheaders()], r.read()
    finally:
        c.close()


def hdr(headers, name):
    return [v for k, v in headers if k == name]


def ws_upstream():
    """A WebSocket echo server on 127.0.0.1 (the fake driver's sandbox
    shares the host's network), on a thread of its own: its port and what
    it saw of each handshake (path, headers lower-cased). A message "bye"
    makes it close the connection."""
    import asyncio
    import websockets
    loop = asyncio.new_event_loop()
    port = ahserver.free_port(fail=Fail)
    seen = []

    async def echo(ws, *_):
        seen.append((ws.path, {k.lower(): v for k, v in ws.request_headers.raw_items()}))
        async for m in ws:
            if m == "bye":
                await ws.close()
                return
            await ws.send(m)

    ready = threading.Event()

    def run():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(websockets.serve(echo, "127.0.0.1", port, max_size=None))
        ready.set()
        loop.run_forever()
    threading.Thread(target=run, daemon=True).start()
    check(ready.wait(10), "the WebSocket echo server started")
    return port, seen


def ws_run(coro):
    import asyncio
    return asyncio.run(coro)


def link(srv, agent, port, tok=ahlocal.ADMIN, body=None, want=201):
    status, j = srv.call("POST", "/api/v1/agents/%s/ports/%s/link" % (agent, port), tok, body or {})
    check(status == want, "link %s:%s %r: want %d, got %d %r" % (agent, port, body, want, status, j))
    return j


def main():
    # the shipped lua/ as it is, in a directory of the test's (public edits ports.lua)
    lua_dir = os.path.join(CTX.tmp, "lua")
    shutil.copytree(os.path.join(CTX.src, "lua"), lua_dir)
    srv = ahlocal.Local(CTX, "proxy", {"AGENTHOLD_PORTS_ANSWER_TIMEOUT": "2s",
                                       "AGENTHOLD_SANDBOX_IDLE_CHECK_INTERVAL": "500ms",
                                       "AGENTHOLD_POLICY_LUA_DIR": lua_dir}).start()
    up = upstream()
    port = up.server_address[1]
    web = srv.ok("POST", "/api/v1/agents?wait=1", body={"name": "web"})
    other = srv.ok("POST", "/api/v1/agents?wait=1", body={"name": "other"})
    srv.ok("POST", "/api/v1/tenants", body={"name": "evilco"})
    evil = srv.ok("POST", "/api/v1/tokens", body={"tenant": "evilco"})["token"]

    # link
    path = link(srv, "web", port)["path"]
    check(path.startswith("/p/%s/%d/" % (web["id"], port)) and path.endswith("/"), "a link's path: %s" % path)
    for bad_port in ("0", "65536", "abc", "080", "-1"):
        link(srv, "web", bad_port, want=400)
    for bad in ({"expires": 10}, {"expires": 31 * 86400}, {"expires": 1.5}, {"expires": "1h"}, {"x": 1}):
        link(srv, "web", port, body=bad, want=400)
    link(srv, "web", port, tok=evil, want=404)
    # `agenthold link NAME PORT`: the whole URL, usable as it is
    rc, out, err = srv.cli("link", "web", str(port), "--expires", "120")
    url = out.split("\n")[0]
    check(rc == 0 and url.startswith("http://127.0.0.1:%d/p/%s/%d/" % (srv.port, web["id"], port)),
          "agenthold link: %d %r %r" % (rc, out, err))
    st, _, body = fetch(srv.port, "GET", url.split(":%d" % srv.port, 1)[1] + "hello")
    check(st == 200 and body == b"hello from the sandbox", "the CLI's link works: %d %r" % (st, body[:100]))
    rc, out, err = srv.cli("link", "web", str(port), "--json")
    check(rc == 0 and json.loads(out)["url"].endswith(json.loads(out)["path"]), "link --json: %r" % out)
    for args, said in ((["web", "x"], "must be a number"), (["web", "0"], "must be a number"),
                       (["web", str(port), "--expires", "abc"], "--expires"), (["web"], "which agent and which port"),
                       (["web", str(port), "--expires", "5"], "'expires'")):
        rc, out, err = srv.cli("link", *args)
        check(rc != 0 and said in err, "agenthold link %s: refused naming %r: %d %r" % (args, said, rc, err))

    # forward
    SEEN.clear()
    st, h, body = fetch(srv.port, "GET", path + "hello/there?x=1&y=%2F", {
        "Authorization": "Bearer " + srv.admin, "Cookie": "agenthold_session=secret; app=1; b=2",
        "X-Forwarded-For": "6.6.6.6", "Forwarded": "for=6.6.6.6", "X-Real-IP": "6.6.6.6"})
    check(st == 200 and body == b"hello from the sandbox", "GET through the link: %d %r" % (st, body[:200]))
    check(len(SEEN) == 1, "one request reached the sandbox: %r" % SEEN)
    method, got_path, got, _ = SEEN[0]
    check(got_path == "/hello/there?x=1&y=%2F", "the path and query as sent: %r" % got_path)
    check(got.get("host") == "127.0.0.1:%d" % port, "Host: %r" % got.get("host"))
    check("authorization" not in got, "no Authorization reaches the sandbox: %r" % got)
    check(got.get("cookie") == "app=1; b=2", "the session cookie is taken out, others pass: %r" % got.get("cookie"))
    check(not any(k in got for k in ("x-forwarded-for", "forwarded", "x-real-ip")),
          "no made-up forwarding headers: %r" % got)
    check(got.get("x-forwarded-prefix") == path.rstrip("/") and got.get("x-forwarded-proto") == "http"
          and got.get("x-forwarded-host") == "127.0.0.1:%d" % srv.port,
          "where the client reached it: %r" % {k: v for k, v in got.items() if k.startswith("x-forwarded")})
    check(hdr(h, "content-security-policy") == ["sandbox allow-scripts allow-forms allow-popups allow-downloads"],
          "CSP sandbox on the answer: %r" % h)
    check(hdr(h, "referrer-policy") == ["no-referrer"], "Referrer-Policy: %r" % h)
    check(not hdr(h, "set-cookie") and not hdr(h, "clear-site-data") and not hdr(h, "strict-transport-security"),
          "the sandbox sets no cookie, clears nothing, pins nothing on the API's origin: %r" % h)
    check(hdr(h, "x-app") == ["kept"], "its own headers pass: %r" % h)
    big = os.urandom(1 << 20)
    st, h, body = fetch(srv.port, "POST", path + "echo", {"Content-Type": "application/octet-stream"}, big)
    check(st == 200 and body == big, "1 MiB POSTed and echoed whole: %d %d" % (st, len(body)))
    st, h, _ = fetch(srv.port, "GET", path.rstrip("/"))
    check(st == 308 and hdr(h, "location") == [path], "the bare prefix: 308 to %s, got %d %r" % (path, st, h))

    # the token form: /p/{id}/{port}/t/ with the tenant's bearer token
    tpath = "/p/%s/%d/t/hello" % (web["id"], port)
    SEEN.clear()
    st, _, body = fetch(srv.port, "GET", tpath, {"Authorization": "Bearer " + srv.admin})
    check(st == 200 and body == b"hello from the sandbox", "the token form: %d %r" % (st, body[:120]))
    check(len(SEEN) == 1 and "authorization" not in SEEN[0][2], "its token does not reach the sandbox: %r" % SEEN)
    st, _, body = fetch(srv.port, "GET", tpath)
    check(st == 401, "the token form without a token: 401, got %d %r" % (st, body[:120]))
    st, _, body = fetch(srv.port, "GET", tpath, {"Authorization": "Bearer " + evil})
    check(st == 404, "another tenant's token: 404, got %d %r" % (st, body[:120]))
    st, _, body = fetch(srv.port, "GET", tpath, {"Authorization": "Bearer " + "0" * 64})
    check(st == 401, "a wrong token: 401, got %d" % st)
    st, _, body = fetch(srv.port, "GET", tpath, {"Cookie": "agenthold_session=" + "0" * 64})
    check(st == 401, "a cookie is no credential for the token form: 401, got %d" % st)

    # refused
    SEEN.clear()
    expiry, lid, sig = path.split("/")[4].split("-")
    bent = "%x" % ((int(sig[-1], 16) + 1) % 16)
    lbent = "%x" % ((int(lid[-1], 16) + 1) % 16)
    cases = [
        path.replace(sig, sig[:-1] + bent),
        path.replace(lid, lid[:-1] + lbent),
        path.replace(lid, lid.upper()),
        path.replace("-" + lid + "-", "-"),             # the v1 form (no id): refused
        path.replace(lid, "0" * 12),
        path.replace("/%d/" % port, "/%d/" % (port + 1)),
        path.replace(expiry + "-", str(int(expiry) + 3600) + "-"),
        path.replace(web["id"], other["id"]),
        path.replace(web["id"], "0123456789ab"),
        path.replace(sig, sig.upper()),
        path.replace(sig, sig + "0"),
        path.replace(expiry + "-", "-"),
        path.replace("/%d/" % port, "/%d.0/" % port),
        path.replace("/%d/" % port, "/abc/"),
    ]
    # A link id or signature of digits alone has no case to change: that
    # "mutation" is the good link itself (CI met an id of 12 digits).
    for bad in [c for c in cases if c != path]:
        st, _, body = fetch(srv.port, "GET", bad + "x")
        check(st in (403, 404), "%s: refused, got %d %r" % (bad, st, body[:120]))
    check(SEEN == [], "nothing reached the sandbox's server: %r" % SEEN)

    # revoke: listed (never the capability), revoked -> 403 and nothing
    # reaches the sandbox, another tenant can neither list nor revoke
    made = link(srv, "web", port, body={"expires": 600})
    rpath = made["path"]
    check(made["id"] == rpath.split("/")[4].split("-")[1] and made["made_by"], "the link's id and maker: %r" % made)
    st, _, body = fetch(srv.port, "GET", rpath + "hello")
    check(st == 200 and body == b"hello from the sandbox", "a fresh link works: %d %r" % (st, body[:100]))
    links = srv.ok("GET", "/api/v1/agents/web/ports/links")["links"]
    mine = [l for l in links if l["id"] == made["id"]]
    check(len(mine) == 1 and mine[0]["port"] == port and mine[0]["expires_at"] == made["expires_at"]
          and mine[0]["made_by"] == made["made_by"] and "path" not in mine[0],
          "listed with its port, expiry and maker, not its capability: %r" % mine)
    check(not any(l["port"] == port and l["id"] != made["id"] and "sig" in l for l in links), "no signature listed")
    check(srv.ok("GET", "/api/v1/agents/other/ports/links")["links"] == [], "another agent's list is its own")
    st, j = srv.call("GET", "/api/v1/agents/web/ports/links", evil)
    check(st == 404, "another tenant lists: 404, got %d %r" % (st, j))
    st, j = srv.call("DELETE", "/api/v1/agents/web/ports/links/" + made["id"], evil)
    check(st == 404, "another tenant revokes: 404, got %d %r" % (st, j))
    st, j = srv.call("DELETE", "/api/v1/agents/other/ports/links/" + made["id"])
    check(st == 404, "revoked through another agent: 404, got %d %r" % (st, j))
    st, _, body = fetch(srv.port, "GET", rpath + "hello")
    check(st == 200, "still works after the refused revocations: %d %r" % (st, body[:100]))
    for hostile in ("0" * 12, "ABCDEF012345", "x", "0123456789abc", "..", "%2e%2e", "%00" + "0" * 11,
                    made["id"] + "%20", "' OR 1=1 --", "a" * 4000):
        st, j = srv.call("DELETE", "/api/v1/agents/web/ports/links/" + urllib.parse.quote(hostile, safe="%."))
        check(st in (400, 404), "a hostile link id %r: 400/404, got %d %r" % (hostile[:40], st, j))
    st, j = srv.call("DELETE", "/api/v1/agents/web/ports/links/" + made["id"])
    check(st == 200 and j.get("revoked") is True, "the tenant revokes it: %d %r" % (st, j))
    st, j = srv.call("DELETE", "/api/v1/agents/web/ports/links/" + made["id"])
    check(st == 404, "revoked twice: 404, got %d %r" % (st, j))
    check(not [l for l in srv.ok("GET", "/api/v1/agents/web/ports/links")["links"] if l["id"] == made["id"]],
          "no longer listed")
    SEEN.clear()
    for suffix in ("hello", "", "x?y=1"):
        st, _, body = fetch(srv.port, "GET", rpath + suffix)
        check(st == 403 and b"this port link is not valid, or has expired" in body,
              "a revoked link: the invalid link's 403, got %d %r" % (st, body[:160]))
    st, _, body = fetch(srv.port, "GET", rpath.rstrip("/"))
    check(st == 403, "a revoked link's bare prefix: 403, got %d" % st)
    check(SEEN == [], "nothing reached the sandbox through a revoked link: %r" % SEEN)
    # the CLI: links, unlink
    other_link = link(srv, "web", port, body={"expires": 900})
    rc, out, err = srv.cli("links", "web")
    check(rc == 0 and other_link["id"] in out and str(port) in out and made["id"] not in out,
          "agenthold links: %d %r %r" % (rc, out, err))
    rc, out, err = srv.cli("links", "web", "--json")
    check(rc == 0 and other_link["id"] in [l["id"] for l in json.loads(out)], "links --json: %r" % out)
    rc, out, err = srv.cli("unlink", "web", other_link["id"], tok=evil)
    check(rc != 0 and "no agent" in err.lower() + out.lower(), "another tenant's unlink: %d %r %r" % (rc, out, err))
    rc, out, err = srv.cli("unlink", "web", other_link["id"])
    check(rc == 0, "agenthold unlink: %d %r %r" % (rc, out, err))
    st, _, body = fetch(srv.port, "GET", other_link["path"] + "hello")
    check(st == 403, "unlinked by the CLI: 403, got %d" % st)
    rc, out, err = srv.cli("unlink", "web", other_link["id"])
    check(rc != 0 and "no port link" in err, "unlink twice: %d %r" % (rc, err))
    rc, out, err = srv.cli("unlink", "web")
    check(rc != 0 and "usage" in err, "unlink without an id: %d %r" % (rc, err))
    SEEN.clear()

    # hostile
    for p, want in (("bighead", "port %d is over 65536 bytes" % port), ("ctl", "control byte"),
                    ("nothttp", "port %d did not answer with HTTP/1.x" % port),
                    ("nothing", "port %d closed the connection before answering" % port)):
        st, _, body = fetch(srv.port, "GET", path + p)
        check(st == 502 and want in body.decode("utf-8", "replace"), "%s: 502 naming it, got %d %r" % (p, st, body[:200]))
    for p, want in (("spacename", "without a proper name"), ("folded", "without a proper name")):
        st, _, body = fetch(srv.port, "GET", path + p)
        check(st == 502 and want in body.decode(), "%s: 502 naming it, got %d %r" % (p, st, body[:200]))
    st, h, body = fetch(srv.port, "GET", path + "interim")
    check(st == 200 and body == b"final" and not hdr(h, "set-cookie") and hdr(h, "content-security-policy"),
          "interim 1xx heads dropped, the final one rewritten: %d %r %r" % (st, h, body))
    t0 = time.time()
    st, _, body = fetch(srv.port, "GET", path + "hang")
    check(st == 504 and "ports.answer_timeout" in body.decode() and time.time() - t0 < 5,
          "a server that never answers: 504 after ports.answer_timeout (2 s), got %d %r in %.1f s"
          % (st, body[:200], time.time() - t0))
    free = ahserver.free_port(fail=Fail)
    dead = link(srv, "web", free)["path"]
    st, _, body = fetch(srv.port, "GET", dead)
    check(st == 502 and ("port %d" % free) in body.decode(), "nothing listens: 502 naming the port, got %d %r" % (st, body))
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    c.putrequest("POST", path + "echo")
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    c.send(b"2\r\nhi\r\n0\r\n\r\n")
    r = c.getresponse()
    check(r.status == 411, "a chunked body: 411, got %d" % r.status)
    c.close()

    # websocket
    import websockets
    wport, wseen = ws_upstream()
    wpath = link(srv, "web", wport)["path"]
    uri = "ws://127.0.0.1:%d%sechoing?x=1" % (srv.port, wpath)

    async def round_trip():
        async with websockets.connect(uri, max_size=None, extra_headers={"Authorization": "Bearer nope"}) as ws:
            await ws.send("hello")
            text = await ws.recv()
            big = os.urandom(1 << 20)
            await ws.send(big)
            back = await ws.recv()
            return text, hashlib.sha256(back).hexdigest() == hashlib.sha256(big).hexdigest()
    text, same = ws_run(round_trip())
    check(text == "hello" and same, "a WebSocket through the link: text and 1 MiB binary echoed: %r %r" % (text, same))
    check(wseen and wseen[-1][0] == "/echoing?x=1", "the sandbox's WebSocket server got the path as sent: %r"
          % (wseen[-1][0] if wseen else None))
    wh = wseen[-1][1] if wseen else {}
    check(wh.get("host") == "127.0.0.1:%d" % wport and "authorization" not in wh
          and wh.get("upgrade", "").lower() == "websocket",
          "its handshake: Host rewritten, no Authorization, Upgrade passed: %r" % wh)

    # an open, silent WebSocket keeps an agent awake as a terminal does
    srv.ok("POST", "/api/v1/agents?wait=1", body={"name": "wsidle", "idle_minutes": 0.05})
    ipath = link(srv, "wsidle", wport)["path"]

    async def held_open():
        async with websockets.connect("ws://127.0.0.1:%d%sheld" % (srv.port, ipath)) as ws:
            await ws.send("ping")
            await ws.recv()
            import asyncio
            await asyncio.sleep(7)          # past its 3 s idle timeout, checked every 0.5 s
            st = srv.ok("GET", "/api/v1/agents/wsidle")["state"]
            await ws.send("bye")
            try:
                await ws.recv()
            except websockets.ConnectionClosed:
                return st, True
            return st, False
    st, closed = ws_run(held_open())
    check(st == "running", "a silent WebSocket through a port kept its agent awake 7 s past 3 s idle: %s" % st)
    check(closed, "the sandbox's server closing ends the client's WebSocket")
    ahserver.wait_until(lambda: srv.ok("GET", "/api/v1/agents/wsidle")["state"] == "sleeping", 20,
                        "once the WebSocket closed, the idle agent sleeps", Fail)

    async def not_upgraded():
        try:
            async with websockets.connect("ws://127.0.0.1:%d%shello" % (srv.port, path)):
                return None
        except websockets.InvalidStatusCode as e:
            return e.status_code
    check(ws_run(not_upgraded()) == 200, "an upgrade to a server that does not upgrade: its answer passes")
    for method, headers, why in (("POST", {"Upgrade": "websocket", "Connection": "Upgrade", "Content-Length": "0"},
                                  "a POST upgrade"),
                                 ("GET", {"Upgrade": "websocket"}, "an upgrade without Connection: Upgrade")):
        st, _, body = fetch(srv.port, method, wpath + "echoing", headers)
        check(st == 400 and b"WebSocket upgrade is a GET with Connection: Upgrade" in body,
              "%s: 400 saying why, got %d %r" % (why, st, body[:200]))

    # wake
    srv.ok("POST", "/api/v1/agents/web/stop?wait=1")
    check(srv.ok("GET", "/api/v1/agents/web")["state"] == "sleeping", "asleep before the request")
    st, _, body = fetch(srv.port, "GET", path + "hello")
    check(st == 200 and body == b"hello from the sandbox", "the request woke it and was answered: %d %r" % (st, body))
    check(srv.ok("GET", "/api/v1/agents/web")["state"] == "running", "running after it")

    # audit
    def audited():
        ops = srv.ok("GET", "/api/v1/agents/web/operations?limit=200")["operations"]
        return ("port.link" in [o["kind"] for o in ops]
                and [o for o in ops if o["kind"] == "port.request" and o["ok"]
                     and o.get("detail") == "GET :%d /hello/there" % port])
    try:
        ahserver.wait_until(audited, 10, "port.link and the request's method, port and path (no query) audited", Fail)
    except Fail:
        ops = srv.ok("GET", "/api/v1/agents/web/operations?limit=200")["operations"]
        print("port ops: %r" % [(o["kind"], o.get("detail"), o["ok"]) for o in ops if o["kind"].startswith("port")])
        raise
    # public: PUT .../ports/{port} {"public": true} marks it; the shipped
    # ports.lua (private) still refuses; a ports.lua that allows opens it
    ppath = "/p/%s/%d/public/" % (web["id"], port)
    SEEN.clear()
    st, _, body = fetch(srv.port, "GET", ppath + "hello")
    check(st == 403 and b"this port link is not valid" in body, "not marked public: 403, got %d %r" % (st, body[:120]))
    for bad in ({}, {"public": "yes"}, {"public": 1}, {"public": True, "x": 1}):
        st, j = srv.call("PUT", "/api/v1/agents/web/ports/%d" % port, body=bad)
        check(st == 400, "PUT public %r: 400, got %d %r" % (bad, st, j))
    for bad_port in ("0", "65536", "abc", "080"):
        st, j = srv.call("PUT", "/api/v1/agents/web/ports/" + bad_port, body={"public": True})
        check(st == 400, "PUT public on port %s: 400, got %d %r" % (bad_port, st, j))
    st, j = srv.call("PUT", "/api/v1/agents/web/ports/%d" % port, evil, body={"public": True})
    check(st == 404, "another tenant marks it: 404, got %d %r" % (st, j))
    st, j = srv.call("PUT", "/api/v1/agents/web/ports/%d" % port, body={"public": True})
    check(st == 200 and j.get("public") is True, "marked public: %d %r" % (st, j))
    st, _, body = fetch(srv.port, "GET", ppath + "hello")
    check(st == 403 and b"this port link is not valid" in body,
          "marked public, the shipped ports.lua (private): 403, got %d %r" % (st, body[:120]))
    check(SEEN == [], "nothing reached the sandbox: %r" % SEEN)
    with open(os.path.join(lua_dir, "ports.lua"), "w") as f:
        f.write("function decide(tenant, agent, port)\n"
                "  return { allow = port.number == %d and tenant.name == 'default', why = 'test rule' }\n"
                "end\n" % port)
    time.sleep(1.5)                     # the policy host's file check (1 s)
    st, _, body = fetch(srv.port, "GET", ppath + "hello?q=1")
    check(st == 200 and body == b"hello from the sandbox", "public and allowed: no credential, %d %r" % (st, body[:120]))
    check(len(SEEN) == 1 and SEEN[0][1] == "/hello?q=1", "the sandbox got the path: %r" % SEEN)
    st, h, _ = fetch(srv.port, "GET", ppath.rstrip("/"))
    check(st == 308 and hdr(h, "location") == [ppath], "the public bare prefix: 308, got %d %r" % (st, h))
    st, _, body = fetch(srv.port, "GET", "/p/%s/%d/public/hello" % (other["id"], port))
    check(st == 403, "another agent's port, not marked: 403, got %d" % st)
    st, _, body = fetch(srv.port, "GET", "/p/%s/%d/public/hello" % (web["id"], free))
    check(st == 403, "another port of the agent, not marked: 403, got %d" % st)
    st, j = srv.call("PUT", "/api/v1/agents/web/ports/%d" % free, body={"public": True})
    st, _, body = fetch(srv.port, "GET", "/p/%s/%d/public/hello" % (web["id"], free))
    check(st == 403, "marked, but ports.lua refuses that port: 403, got %d" % st)
    st, j = srv.call("PUT", "/api/v1/agents/web/ports/%d" % port, body={"public": False})
    check(st == 200 and j.get("public") is False, "marked private again: %d %r" % (st, j))
    SEEN.clear()
    st, _, body = fetch(srv.port, "GET", ppath + "hello")
    check(st == 403 and SEEN == [], "private again: 403 and nothing reaches the sandbox, got %d %r" % (st, SEEN))
    st, j = srv.call("PUT", "/api/v1/agents/web/ports/%d" % port, body={"public": True})
    check(st == 200, "public again, for the restart: %d" % st)

    # restart: a revoked link stays revoked, a standing one stands
    kept = link(srv, "web", port, body={"expires": 600})
    gone = link(srv, "web", port, body={"expires": 600})
    srv.ok("DELETE", "/api/v1/agents/web/ports/links/" + gone["id"])
    srv.stop()
    srv.start()
    SEEN.clear()
    st, _, body = fetch(srv.port, "GET", gone["path"] + "hello")
    check(st == 403, "a revoked link after a restart: 403, got %d %r" % (st, body[:160]))
    check(SEEN == [], "nothing reached the sandbox: %r" % SEEN)
    st, _, body = fetch(srv.port, "GET", kept["path"] + "hello")
    check(st == 200 and body == b"hello from the sandbox", "a standing link after a restart: %d %r" % (st, body[:160]))
    st, _, body = fetch(srv.port, "GET", ppath + "hello")
    check(st == 200, "a public port after a restart: %d %r" % (st, body[:120]))
    ids = [l["id"] for l in srv.ok("GET", "/api/v1/agents/web/ports/links")["links"]]
    check(kept["id"] in ids and gone["id"] not in ids, "listed after a restart: %r" % ids)
    up.shutdown()
    srv.stop()
    print("e2e.proxy: %d checks passed" % check.count)


if __name__ == "__main__":
    sys.exit(ahserver.run(main, Fail, CTX.procs, CTX.tmp, CTX.log))
