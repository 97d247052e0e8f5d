#!/usr/bin/python3
"""tests/console/console_cookie.py: the console's sign-in by cookie
(docs/api.md "Signing in with a cookie"), sleeps_at from the moment an
agent runs, and /favicon.ico, on the real `agenthold serve` (fake driver,
ports from ahserver.free_port).

- login: POST /api/v1/login trades a token for an HttpOnly,
  SameSite=Strict cookie (no Secure on plain HTTP) and a CSRF value; a
  wrong, revoked or metrics-only token, a foreign Origin, an unknown field
  are refused and set no cookie.
- routes with the cookie: GET /me (the tenant, the CSRF again), the agents
  list (that tenant's only), an agent, a file written and read back, an
  agent made and deleted, a terminal ticket, the event stream; admin
  routes refused to a tenant's cookie and allowed to an admin's.
- CSRF: a state-changing request with the cookie and without the header,
  with a wrong one, with two, or from a foreign Origin is a 403 and
  changes nothing; a GET from a foreign Origin too.
- hostile cookies: forged, truncated, overlong, upper-case, doubled, in
  two headers, another session's CSRF value: refused; another tenant's
  cookie sees none of this tenant's agents.
- logout: the session ends on the server; the same cookie replayed is a
  401 on every route; revoking a token ends its sessions.
- bounds: 1,000 sign-ins with one token of tenant acme beside a session
  of tenant other and one of another acme token: both still work, the
  flooding token keeps only its 16 newest; a tenant whose tokens hold 128
  sessions is refused a 129th (429 naming the bound) and no one is signed
  out; the same for terminal tickets (1,000 beside another tenant's and
  another token's ticket, which still open the terminal; 64 per tenant).
- a removed tenant's token gives its id to the next token made (checked
  in the database): its old cookie and ticket are refused, never taken
  for the new token.
- sleeps_at: set from the moment an agent runs (idle_minutes after its
  start), before the sleeper's first pass, and moved on by a use.
- /favicon.ico: the icon, no token needed.

usage: console_cookie.py AGENTHOLD_BINARY"""
import asyncio
import datetime
import http.client
import json
import os
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from consolelib import Fail, Server, check, checks, ws_refused  # noqa: E402
import ahserver  # noqa: E402  (on the path consolelib set)

COOKIE = "agenthold_session"


def call(srv, method, path, cookie=None, csrf=None, body=None, headers=None, token=None):
    """(status, JSON or raw, response headers as a dict of lists)."""
    h = {}
    if cookie is not None:
        h["Cookie"] = cookie
    if csrf is not None:
        h["X-Agenthold-CSRF"] = csrf
    if token is not None:
        h["Authorization"] = "Bearer " + token
    h.update(headers or {})
    data = None
    if isinstance(body, (dict, list)):
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    elif body is not None:
        data = body
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    try:
        c.putrequest(method, path, skip_accept_encoding=True)
        for k, v in h.items():
            for one in (v if isinstance(v, list) else [v]):
                c.putheader(k, one)
        if data is not None:
            c.putheader("Content-Length", str(len(data)))
        c.endheaders(data)
        r = c.getresponse()
        raw = r.read()
        ahserver.openapi_check(method, path, r.status, r.getheader("Content-Type", ""), raw)
        hdrs = {}
        for k, v in r.getheaders():
            hdrs.setdefault(k.lower(), []).append(v)
    finally:
        c.close()
    try:
        return r.status, json.loads(raw) if raw else None, hdrs
    except ValueError:
        return r.status, raw, hdrs


def login(srv, token, origin=True):
    headers = {"Origin": "http://127.0.0.1:%d" % srv.port} if origin else {}
    status, answer, h = call(srv, "POST", "/api/v1/login", body={"token": token}, headers=headers)
    check(status == 200, "login: 200, got %d %s" % (status, answer))
    sc = h.get("set-cookie", [])
    check(len(sc) == 1, "login: one Set-Cookie, got %s" % sc)
    parts = [p.strip() for p in sc[0].split(";")]
    name, _, value = parts[0].partition("=")
    attrs = {p.split("=")[0].lower() for p in parts[1:]}
    check(name == COOKIE and len(value) == 64 and all(c in "0123456789abcdef" for c in value),
          "the cookie is %s=<64 hex>: %s" % (COOKIE, sc[0]))
    check("httponly" in attrs and "samesite=strict" in [p.lower() for p in parts[1:]] and "path=/" in
          [p.lower() for p in parts[1:]], "HttpOnly, SameSite=Strict, Path=/: %s" % sc[0])
    check("secure" not in attrs, "no Secure on plain HTTP (the browser would drop it): %s" % sc[0])
    check(value != token and token not in sc[0], "the cookie is not the token")
    check(len(answer["csrf"]) == 64 and answer["cookie"] is True and answer["csrf"] != value,
          "login answers a CSRF value of its own: %s" % {k: v for k, v in answer.items() if k != "csrf"})
    return "%s=%s" % (COOKIE, value), answer


def refused_login(srv, body, want, what, headers=None):
    status, answer, h = call(srv, "POST", "/api/v1/login", body=body, headers=headers)
    check(status == want, "%s: %d, got %d %s" % (what, want, status, answer))
    check("set-cookie" not in h, "%s: no cookie" % what)
    return answer


def logins(srv, acme_tok):
    refused_login(srv, {"token": "0" * 64}, 401, "a wrong token")
    refused_login(srv, {"token": ""}, 400, "an empty token")
    refused_login(srv, {"token": 5}, 400, "a token that is not a string")
    refused_login(srv, {"token": "x" * 300}, 400, "an overlong token")
    refused_login(srv, {"token": acme_tok, "tenant": "other"}, 400, "an unknown field")
    refused_login(srv, b"token=" + acme_tok.encode(), 400, "a form body")
    refused_login(srv, {"token": acme_tok}, 403, "a login from another Origin",
                  {"Origin": "http://evil.example"})
    refused_login(srv, {"token": acme_tok}, 403, "a login from an Origin that starts like ours",
                  {"Origin": "http://127.0.0.1:%d.evil.example" % srv.port})
    metrics = srv.ok("POST", "/api/v1/tokens", srv.admin, {"name": "scraper", "metrics": True})["token"]
    refused_login(srv, {"token": metrics}, 403, "a metrics-only token")
    gone = srv.ok("POST", "/api/v1/tokens", srv.admin, {"tenant": "acme", "name": "gone"})["token"]
    srv.ok("DELETE", "/api/v1/tokens/gone", srv.admin)
    answer = refused_login(srv, {"token": gone}, 401, "a revoked token")
    check("revoked" in answer["error"], "a revoked token says so: %s" % answer)


def with_cookie(srv, cookie, csrf, acme, theirs):
    origin = {"Origin": "http://127.0.0.1:%d" % srv.port}
    status, me, _ = call(srv, "GET", "/api/v1/me", cookie)
    check(status == 200 and me["tenant"] == "acme" and me["admin"] is False and me["cookie"] is True
          and me["csrf"] == csrf, "GET /api/v1/me with the cookie: the token's tenant, the CSRF value")
    status, listing, _ = call(srv, "GET", "/api/v1/agents", cookie)
    names = sorted(a["name"] for a in listing["agents"])
    check(status == 200 and "web" in names and "secret" not in names,
          "the cookie lists the tenant's agents only: %s" % names)
    status, a, _ = call(srv, "GET", "/api/v1/agents/%s" % theirs["id"], cookie)
    check(status == 404, "another tenant's agent by cookie: 404, got %d" % status)
    status, a, _ = call(srv, "GET", "/api/v1/agents/web", cookie)
    check(status == 200 and a["id"] == acme["id"], "GET an agent by cookie")
    # A write needs the CSRF header; then it lands and reads back.
    path = "/api/v1/agents/web/files/cookie.txt"
    status, answer, _ = call(srv, "PUT", path, cookie, body=b"by cookie\n")
    check(status == 403 and "X-Agenthold-CSRF" in answer["error"], "a PUT by cookie without CSRF: 403 %s" % answer)
    status, answer, _ = call(srv, "GET", path, cookie)
    check(status == 404, "...and nothing was written: %d" % status)
    status, answer, _ = call(srv, "PUT", path, cookie, "f" * 64, body=b"by cookie\n")
    check(status == 403, "a PUT with a wrong CSRF value: 403, got %d" % status)
    status, answer, _ = call(srv, "PUT", path, cookie, csrf[:-1], body=b"by cookie\n")
    check(status == 403, "a PUT with a truncated CSRF value: 403, got %d" % status)
    status, answer, _ = call(srv, "PUT", path, cookie, [csrf, csrf], body=b"by cookie\n")
    check(status == 403, "a PUT with the CSRF header twice: 403, got %d" % status)
    status, answer, _ = call(srv, "PUT", path, cookie, csrf, body=b"by cookie\n",
                             headers={"Origin": "http://evil.example"})
    check(status == 403 and "Origin" in answer["error"], "a PUT from a foreign Origin, even with the CSRF value: 403")
    status, answer, _ = call(srv, "GET", "/api/v1/agents", cookie, headers={"Origin": "http://evil.example"})
    check(status == 403, "a GET by cookie from a foreign Origin: 403, got %d" % status)
    status, answer, _ = call(srv, "PUT", path, cookie, csrf, body=b"by cookie\n", headers=origin)
    check(status in (200, 201), "a PUT with the cookie and the CSRF value: %d %s" % (status, answer))
    status, raw, _ = call(srv, "GET", path, cookie)
    check(status == 200 and raw == b"by cookie\n", "...reads back by cookie: %r" % raw)
    # Create and delete an agent, make a terminal ticket, read the events.
    status, made, _ = call(srv, "POST", "/api/v1/agents?wait=1", cookie, body={"name": "by-cookie"})
    check(status == 403, "create by cookie without CSRF: 403, got %d" % status)
    status, made, _ = call(srv, "POST", "/api/v1/agents?wait=1", cookie, csrf, body={"name": "by-cookie"})
    check(status in (200, 201) and made["tenant"] == "acme" and made["state"] == "running",
          "create by cookie: in the token's tenant: %d %s" % (status, made))
    status, _, _ = call(srv, "DELETE", "/api/v1/agents/by-cookie", cookie)
    check(status == 403, "delete by cookie without CSRF: 403, got %d" % status)
    status, _, _ = call(srv, "DELETE", "/api/v1/agents/by-cookie?wait=1", cookie, csrf)
    check(status in (200, 202, 204), "delete by cookie: %d" % status)
    status, t, _ = call(srv, "POST", "/api/v1/agents/web/terminal/ticket", cookie, csrf)
    check(status == 201 and len(t["ticket"]) == 64, "a terminal ticket by cookie: %d" % status)
    status, _, _ = call(srv, "POST", "/api/v1/agents/web/terminal/ticket", cookie)
    check(status == 403, "a ticket by cookie without CSRF: 403, got %d" % status)
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    c.request("GET", "/api/v1/events", headers={"Cookie": cookie})
    r = c.getresponse()
    check(r.status == 200 and "text/event-stream" in r.getheader("content-type", ""),
          "the event stream by cookie: %d" % r.status)
    c.close()
    # A tenant's cookie is not an admin's.
    status, _, _ = call(srv, "GET", "/api/v1/tenants", cookie)
    check(status == 403, "GET /api/v1/tenants with a tenant's cookie: 403, got %d" % status)
    status, _, _ = call(srv, "GET", "/api/v1/agents?tenant=other", cookie)
    check(status == 403, "?tenant=other with acme's cookie: 403, got %d" % status)


def hostile_cookies(srv, cookie, csrf, other_cookie):
    value = cookie.split("=", 1)[1]
    cases = [
        ("forged", "%s=%s" % (COOKIE, "f" * 64)),
        ("truncated", "%s=%s" % (COOKIE, value[:-1])),
        ("overlong", "%s=%s0" % (COOKIE, value)),
        ("upper-case", "%s=%s" % (COOKIE, value.upper())),
        ("empty", "%s=" % COOKIE),
        ("doubled", "%s; %s=%s" % (cookie, COOKIE, "f" * 64)),
        ("doubled, the good one second", "%s=%s; %s" % (COOKIE, "f" * 64, cookie)),
        ("with a NUL-like byte", "%s=%s\x01" % (COOKIE, value[:-1])),
        ("SQL", "%s=' OR 1=1 --" % COOKIE),
    ]
    for what, header in cases:
        try:
            status, answer, _ = call(srv, "GET", "/api/v1/agents", header)
        except ValueError:
            continue            # http.client refuses to send it at all
        check(status in (400, 401), "a %s cookie: refused, got %d %s" % (what, status, answer))
    status, _, _ = call(srv, "GET", "/api/v1/agents", [cookie, cookie])
    check(status == 401, "the cookie in two Cookie headers: 401, got %d" % status)
    status, _, _ = call(srv, "GET", "/api/v1/agents", "other=1; %s; theme=dark" % cookie)
    check(status == 200, "the cookie among other cookies: 200, got %d" % status)
    status, listing, _ = call(srv, "GET", "/api/v1/agents", other_cookie)
    check(status == 200 and [a["name"] for a in listing["agents"]] == ["secret"],
          "the other tenant's cookie sees its own agent only: %s" % listing)
    status, _, _ = call(srv, "GET", "/api/v1/agents/web", other_cookie)
    check(status == 404, "the other tenant's cookie: acme's agent is a 404, got %d" % status)
    status, _, _ = call(srv, "PUT", "/api/v1/agents/web/files/x", other_cookie, csrf, body=b"x")
    check(status == 403, "the other tenant's cookie with acme's CSRF value: 403, got %d" % status)
    # A bearer token in the header wins: a bad one is not rescued by a cookie.
    status, _, _ = call(srv, "GET", "/api/v1/agents", cookie, token="0" * 64)
    check(status == 401, "a wrong bearer token with a good cookie: 401, got %d" % status)


def session_probe(srv, cookie, csrf):
    status, answer, _ = call(srv, "GET", "/api/v1/login")
    check(status == 200 and answer == {"signed_in": False}, "GET /api/v1/login without a cookie: %s" % answer)
    status, answer, _ = call(srv, "GET", "/api/v1/login", "%s=%s" % (COOKIE, "f" * 64))
    check(status == 200 and answer == {"signed_in": False}, "GET /api/v1/login with a forged cookie: %s" % answer)
    status, answer, _ = call(srv, "GET", "/api/v1/login", cookie)
    check(status == 200 and answer["signed_in"] is True and answer["csrf"] == csrf and answer["tenant"] == "acme",
          "GET /api/v1/login with the cookie: signed in, the CSRF value")
    status, answer, _ = call(srv, "GET", "/api/v1/login", cookie, headers={"Origin": "http://evil.example"})
    check(status == 403, "GET /api/v1/login from a foreign Origin: 403, got %d" % status)


def logouts(srv, acme_tok):
    origin = {"Origin": "http://127.0.0.1:%d" % srv.port}
    cookie, me = login(srv, acme_tok)
    status, _, _ = call(srv, "POST", "/api/v1/logout", cookie)
    check(status == 403, "logout without CSRF: 403, got %d" % status)
    status, answer, h = call(srv, "POST", "/api/v1/logout", cookie, me["csrf"], headers=origin)
    check(status == 200 and answer["signed_out"] is True, "logout: %d %s" % (status, answer))
    sc = h.get("set-cookie", [""])[0]
    check(sc.startswith(COOKIE + "=;") and "Max-Age=0" in sc, "logout clears the cookie: %s" % sc)
    for method, path in (("GET", "/api/v1/me"), ("GET", "/api/v1/agents"), ("GET", "/api/v1/agents/web"),
                         ("POST", "/api/v1/logout"), ("POST", "/api/v1/agents/web/terminal/ticket")):
        status, answer, _ = call(srv, method, path, cookie, me["csrf"])
        check(status == 401 and "signed out" in answer["error"],
              "the cookie replayed after logout: %s %s 401, got %d %s" % (method, path, status, answer))
    status, answer, _ = call(srv, "GET", "/api/v1/login", cookie)
    check(answer == {"signed_in": False}, "GET /api/v1/login after logout: not signed in: %s" % answer)
    # Revoking the token ends its sessions at once.
    tmp = srv.ok("POST", "/api/v1/tokens", srv.admin, {"tenant": "acme", "name": "laptop"})["token"]
    c1, _ = login(srv, tmp)
    c2, _ = login(srv, tmp)
    check(c1 != c2, "two sign-ins, two sessions")
    status, _, _ = call(srv, "GET", "/api/v1/agents", c1)
    check(status == 200, "a session of token laptop works")
    srv.ok("DELETE", "/api/v1/tokens/laptop", srv.admin)
    for c in (c1, c2):
        status, answer, _ = call(srv, "GET", "/api/v1/agents", c)
        check(status == 401, "revoking the token ends its sessions: got %d %s" % (status, answer))
    # An admin's cookie acts as an admin.
    admin_cookie, admin_me = login(srv, srv.admin)
    check(admin_me["admin"] is True, "an admin signs in as an admin")
    status, tenants, _ = call(srv, "GET", "/api/v1/tenants", admin_cookie)
    check(status == 200 and "acme" in [t["name"] for t in tenants["tenants"]], "an admin's cookie lists tenants")
    status, made, _ = call(srv, "POST", "/api/v1/tenants", admin_cookie, admin_me["csrf"], {"name": "made-by-cookie"},
                           headers=origin)
    check(status == 201, "an admin's cookie makes a tenant: %d %s" % (status, made))


def fast_login(srv, token):
    """A sign-in, checked less than login() does (a flood of them): the
    cookie, or the refusal (status, answer)."""
    headers = {"Origin": "http://127.0.0.1:%d" % srv.port}
    status, answer, h = call(srv, "POST", "/api/v1/login", body={"token": token}, headers=headers)
    if status != 200:
        check("set-cookie" not in h, "a refused sign-in sets no cookie")
        return None, (status, answer)
    return h["set-cookie"][0].split(";")[0], answer


def works(srv, cookie, tenant):
    status, me, _ = call(srv, "GET", "/api/v1/me", cookie)
    return status == 200 and me["tenant"] == tenant


def session_bounds(srv, acme_tok, other_tok):
    """No tenant and no token signs anyone else out."""
    theirs, _ = login(srv, other_tok)
    mine, _ = login(srv, acme_tok)
    flood = srv.ok("POST", "/api/v1/tokens", srv.admin, {"tenant": "acme", "name": "flood"})["token"]
    made = []
    for i in range(1000):
        cookie, refused = fast_login(srv, flood)
        check(cookie is not None, "sign-in %d of one token: 200, got %s" % (i, refused))
        made.append(cookie)
    check(works(srv, theirs, "other"), "another tenant's session still works after 1,000 sign-ins of acme's")
    check(works(srv, mine, "acme"), "another acme token's session still works after 1,000 sign-ins of "
          "token flood of the same tenant")
    alive = [c for c in made if works(srv, c, "acme")]
    check(alive == made[-16:], "the flooding token keeps its own 16 newest sessions: %d alive, newest %s"
          % (len(alive), alive == made[-len(alive):]))
    # A tenant at its bound: tokens that hold 128 sessions between them;
    # a sign-in by a ninth is refused, and no one's session ends.
    srv.call("POST", "/api/v1/tenants", srv.admin, {"name": "crowd"})
    crowd = [srv.ok("POST", "/api/v1/tokens", srv.admin, {"tenant": "crowd", "name": "crowd-%d" % i})["token"]
             for i in range(9)]
    held = []
    for tok in crowd[:8]:
        for _ in range(16):
            cookie, refused = fast_login(srv, tok)
            check(cookie is not None, "crowd sign-ins up to 128: got %s" % (refused,))
            held.append(cookie)
    cookie, (status, answer) = fast_login(srv, crowd[8])
    check(cookie is None and status == 429 and "tenant 'crowd' holds 128 console sessions" in answer["error"]
          and "128 per tenant, 16 per token" in answer["error"],
          "the 129th session of a tenant: 429 naming the bound, got %d %s" % (status, answer))
    check(all(works(srv, c, "crowd") for c in held), "the refused sign-in ended none of the tenant's sessions")
    for c in (theirs, mine):
        check(works(srv, c, "other" if c == theirs else "acme"), "nor another tenant's")
    # A token at its own bound still signs in (its own oldest goes).
    cookie, refused = fast_login(srv, crowd[0])
    check(cookie is not None and not works(srv, held[0], "crowd") and works(srv, held[1], "crowd")
          and works(srv, held[16], "crowd"),
          "a token at 16 signs in again: its own oldest ends, nothing else: %s" % (refused,))
    # A token revoked: its sessions count for nothing, the tenant has room.
    srv.ok("DELETE", "/api/v1/tokens/crowd-1", srv.admin)
    check(not any(works(srv, c, "crowd") for c in held[16:32]), "the revoked crowd-1's sessions ended")
    cookie, refused = fast_login(srv, crowd[8])
    check(cookie is not None and works(srv, cookie, "crowd"),
          "with crowd-1 revoked, the ninth token signs in: %s" % (refused,))
    # Another tenant signs in as before.
    extra, _ = login(srv, other_tok)
    check(works(srv, extra, "other"), "another tenant signs in while crowd is at its bound")
    # Revoking the flooding token ends its 16, which then count for nothing.
    srv.ok("DELETE", "/api/v1/tokens/flood", srv.admin)
    check(not any(works(srv, c, "acme") for c in made[-16:]), "the revoked token's sessions ended")


def ticket(srv, agent, token=None, cookie=None, csrf=None):
    status, t, _ = call(srv, "POST", "/api/v1/agents/%s/terminal/ticket" % agent["id"], cookie, csrf, token=token)
    return status, t


def redeem(srv, agent, t):
    base = "ws://127.0.0.1:%d/console/terminal/" % srv.port
    origin = {"Origin": "http://127.0.0.1:%d" % srv.port}
    return asyncio.run(ws_refused(base + "%s?ticket=%s" % (agent["id"], t), origin))


def ticket_bounds(srv, acme_tok, other_tok, acme, theirs):
    status, t_theirs = ticket(srv, theirs, other_tok)
    status2, t_mine = ticket(srv, acme, acme_tok)
    check(status == 201 and status2 == 201, "tickets of other and of acme: %d %d" % (status, status2))
    flood = srv.ok("POST", "/api/v1/tokens", srv.admin, {"tenant": "acme", "name": "ticket-flood"})["token"]
    made = []
    for i in range(1000):
        status, t = ticket(srv, acme, flood)
        check(status == 201, "ticket %d of one token: 201, got %d %s" % (i, status, t))
        made.append(t["ticket"])
    code = redeem(srv, theirs, t_theirs["ticket"])
    check(code == 101, "another tenant's ticket still opens the terminal after 1,000 of acme's: %s" % code)
    code = redeem(srv, acme, t_mine["ticket"])
    check(code == 101, "another acme token's ticket still opens it after 1,000 of token ticket-flood: %s" % code)
    code = redeem(srv, acme, made[0])
    check(code == 401, "the flooding token's oldest ticket was its own to lose: %s" % code)
    code = redeem(srv, acme, made[-1])
    check(code == 101, "its newest opens: %s" % code)
    # 64 per tenant: four tokens of tenant tix hold 16 each, a fifth is
    # refused, and no one's ticket ends.
    first = srv.tenant_token("tix")
    tix = srv.agent("tix-web", first)
    crowd = [first] + [srv.ok("POST", "/api/v1/tokens", srv.admin, {"tenant": "tix"})["token"] for _ in range(4)]
    held = []
    for tok in crowd[:4]:
        for _ in range(16):
            status, t = ticket(srv, tix, tok)
            check(status == 201, "tix tickets up to 64: got %d %s" % (status, t))
            held.append(t["ticket"])
    status, t_other = ticket(srv, theirs, other_tok)
    status, t = ticket(srv, tix, crowd[4])
    check(status == 429 and "tenant 'tix' holds 64 terminal tickets" in t["error"]
          and "64 per tenant, 16 per token" in t["error"],
          "the 65th ticket of a tenant: 429 naming the bound, got %d %s" % (status, t))
    code = redeem(srv, theirs, t_other["ticket"])
    check(code == 101, "another tenant's ticket opens while tix is at its bound: %s" % code)
    check(redeem(srv, tix, held[0]) == 101 and redeem(srv, tix, held[-1]) == 101,
          "the refused ticket ended none of the tenant's")


def reused_id(srv):
    """A removed tenant's token leaves its id to the next token made: its
    cookie and its ticket must not act as that new token."""
    db = os.path.join(srv.data, "agenthold.db")

    def token_id(name):
        con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=10)
        try:
            row = con.execute("SELECT id, (SELECT max(id) FROM api_tokens) FROM api_tokens WHERE name = ?",
                              (name,)).fetchone()
        finally:
            con.close()
        return row
    srv.ok("POST", "/api/v1/tenants", srv.admin, {"name": "leaving"})
    tok = srv.ok("POST", "/api/v1/tokens", srv.admin, {"tenant": "leaving", "name": "leaving-tok"})["token"]
    old_id, highest = token_id("leaving-tok")
    check(old_id == highest, "the leaving token has the highest id (%s of %s): its id will be reused"
          % (old_id, highest))
    agent = srv.agent("doomed", tok)
    cookie, me = login(srv, tok)
    status, t = ticket(srv, agent, cookie=cookie, csrf=me["csrf"])
    check(status == 201, "a ticket of the leaving tenant: %d" % status)
    srv.ok("DELETE", "/api/v1/tenants/leaving?force=1", srv.admin)
    srv.ok("POST", "/api/v1/tenants", srv.admin, {"name": "arriving"})
    new_tok = srv.ok("POST", "/api/v1/tokens", srv.admin, {"tenant": "arriving", "name": "arriving-tok"})["token"]
    new_id, _ = token_id("arriving-tok")
    check(new_id == old_id, "the new token got the removed token's id %s (got %s)" % (old_id, new_id))
    for method, path in (("GET", "/api/v1/me"), ("GET", "/api/v1/agents")):
        status, answer, _ = call(srv, method, path, cookie)
        check(status == 401, "the removed tenant's cookie after its id was reused: %s %s 401, got %d %s"
              % (method, path, status, answer))
    status, answer, _ = call(srv, "GET", "/api/v1/login", cookie)
    check(answer == {"signed_in": False}, "...and GET /api/v1/login: not signed in: %s" % answer)
    code = redeem(srv, agent, t["ticket"])
    check(code == 401, "the removed tenant's ticket: 401, got %s" % code)
    fresh, _ = login(srv, new_tok)
    check(works(srv, fresh, "arriving"), "the new token signs in as itself")


def iso_ms(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp() * 1000


def sleeps_at(srv, acme_tok):
    a = srv.ok("POST", "/api/v1/agents?wait=1", acme_tok, {"name": "sleepy", "idle_minutes": 10})
    check(a["state"] == "running", "sleepy runs")
    a = srv.ok("GET", "/api/v1/agents/sleepy", acme_tok)
    check(a["sleeps_at"] is not None and a["awake_because"] == "recent use",
          "sleeps_at is there from the start (before the sleeper's first pass): %s / %s"
          % (a["sleeps_at"], a["awake_because"]))
    start = iso_ms(a["last_activity_at"])
    first = iso_ms(a["sleeps_at"])
    check(abs(first - (start + 10 * 60000)) < 1000,
          "sleeps_at is idle_minutes after the start: %s vs %s" % (a["sleeps_at"], a["last_activity_at"]))
    listed = [x for x in srv.ok("GET", "/api/v1/agents", acme_tok)["agents"] if x["name"] == "sleepy"][0]
    check(listed["sleeps_at"] == a["sleeps_at"], "the list carries it too")
    time.sleep(1.2)             # pacing: the use must come 1 s after the first sleeps_at (checked below)
    status, _ = srv.call("PUT", "/api/v1/agents/sleepy/files/touch.txt", acme_tok, b"x")
    check(status in (200, 201), "a use of sleepy: %d" % status)

    def moved():
        b = srv.ok("GET", "/api/v1/agents/sleepy", acme_tok)
        return b if b["sleeps_at"] and iso_ms(b["sleeps_at"]) >= first + 1000 else None
    deadline = time.time() + 10
    b = None
    while time.time() < deadline and not b:
        b = moved()
        time.sleep(0.2)
    check(b is not None, "a use moves sleeps_at on at once (not at the sleeper's next pass)")
    srv.ok("POST", "/api/v1/agents/sleepy/stop?wait=1", acme_tok)
    c = srv.ok("GET", "/api/v1/agents/sleepy", acme_tok)
    check(c["state"] == "sleeping" and c["sleeps_at"] is None and c["awake_because"] is None,
          "a sleeping agent has no sleeps_at: %s" % c["sleeps_at"])
    srv.ok("POST", "/api/v1/agents/sleepy/start?wait=1", acme_tok)
    d = srv.ok("GET", "/api/v1/agents/sleepy", acme_tok)
    check(d["sleeps_at"] is not None and iso_ms(d["sleeps_at"]) > iso_ms(b["sleeps_at"]),
          "woken, sleeps_at is there again at once, counted from the wake")


def favicon(srv):
    status, raw, h = call(srv, "GET", "/favicon.ico")
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "web", "console",
                           "favicon.svg"), "rb") as f:
        want = f.read()
    check(status == 200 and raw == want and h.get("content-type") == ["image/svg+xml"],
          "/favicon.ico answers the icon without a token: %d %s" % (status, h.get("content-type")))


def main_for(srv):
    def main():
        srv.start()
        acme_tok = srv.tenant_token("acme")
        other_tok = srv.tenant_token("other")
        acme = srv.agent("web", acme_tok)
        theirs = srv.agent("secret", other_tok)
        favicon(srv)
        logins(srv, acme_tok)
        cookie, me = login(srv, acme_tok)
        other_cookie, _ = login(srv, other_tok, origin=False)
        with_cookie(srv, cookie, me["csrf"], acme, theirs)
        hostile_cookies(srv, cookie, me["csrf"], other_cookie)
        session_probe(srv, cookie, me["csrf"])
        logouts(srv, acme_tok)
        session_bounds(srv, acme_tok, other_tok)
        ticket_bounds(srv, acme_tok, other_tok, acme, theirs)
        reused_id(srv)
        sleeps_at(srv, acme_tok)
        print("console.cookie: %d checks passed" % checks())
    return main


if __name__ == "__main__":
    server = Server(os.path.abspath(sys.argv[1]), "ah-console-cookie-")
    sys.exit(server.run(main_for(server)))
