#!/usr/bin/python3
"""tests/mcp/mcp_hostile.py: POST /mcp (docs/mcp.md) against the real
`agenthold serve` on the fake driver (sandboxd a local process, so exec
and files are real), every answer's JSON-RPC shape checked.

  protocol   initialize (the client's version answered when known, else
             the latest), notifications/initialized 202 without a body,
             ping, tools/list (9 tools, each inputSchema an object schema
             refusing other properties), resources/templates/list
  tools      create_agent, exec (status, stdout, stderr), write_file and
             read_file (text, and base64 both ways for bytes that are not
             UTF-8), list_files, search_files (matches, none, a path out
             of the home refused), open_port (a URL on this server),
             stop_agent and start_agent; the REST route's audit rows show
             the calls; the same answer as the REST route (exec, list)
  resources  resources/list (the agents' homes), resources/read of a
             file (text, blob), of a directory (the listing), of a
             missing file (-32002), of a malformed or foreign URI (-32602)
  hostile    a malformed body (-32700), an empty one, an array (a batch:
             -32600), not an object, no or a wrong "jsonrpc", a bad id,
             an unknown method (-32601), params not an object (-32602),
             an unknown tool (named), unknown, missing and wrongly typed
             arguments (named), paths with '..', '/', NUL, %00 and an
             encoded '/' (the route's 400 as isError, nothing written),
             an agent name with '/', '..' and NUL, a 13 MiB body (413),
             a foreign Origin (403; none and the server's own pass), an
             unknown MCP-Protocol-Version (400), an Accept admitting
             neither application/json nor text/event-stream (406; none,
             */*, application/* and text/* pass), GET and DELETE (405 with
             Allow: POST), no token (401), a read over 8 MiB (isError, and
             -32603 with status 413 as a resource);
             the server stays up and its log has no sanitizer report
  tenant     another tenant's token: its agent is the same 404 sentence
             as a nonexistent one, for tools and resources
  leave      8 tool calls at once, each its own answer; a client that
             leaves mid-exec: the command's audit row says so, the server
             serves on

usage: mcp_hostile.py AGENTHOLD_BINARY [SCENARIO...]"""
import base64
import itertools
import json
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahlocal  # noqa: E402
import ahserver  # noqa: E402

CTX = ahlocal.context("ah-mcp-hostile-")
check = CTX.check
Fail = CTX.fail
SERVER = None
IDS = itertools.count(1)     # next() is atomic: calls from threads get ids of their own


def server():
    global SERVER
    if SERVER is None:
        SERVER = ahlocal.Local(CTX, "srv").start()
    return SERVER


def post(body, tok=ahlocal.ADMIN, headers=None, method="POST"):
    """(status, headers dict, raw body) of one request to /mcp."""
    import http.client
    s = server()
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    tok = s.admin if tok is ahlocal.ADMIN else tok
    if tok:
        h["Authorization"] = "Bearer " + tok
    h.update(headers or {})
    h = {k: v for k, v in h.items() if v is not None}     # None: the header not sent
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
    try:
        c.request(method, "/mcp", body=raw if method == "POST" else None, headers=h)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def envelope(raw, want_id):
    """A JSON-RPC 2.0 answer: exactly jsonrpc, id and one of result/error."""
    try:
        j = json.loads(raw)
    except ValueError:
        raise Fail("not JSON: %r" % raw[:300])
    check(isinstance(j, dict) and j.get("jsonrpc") == "2.0" and "id" in j and j["id"] == want_id
          and (("result" in j) != ("error" in j)) and set(j) <= {"jsonrpc", "id", "result", "error"},
          "a JSON-RPC answer with id %r: %r" % (want_id, j))
    if "error" in j:
        e = j["error"]
        check(isinstance(e, dict) and isinstance(e.get("code"), int) and isinstance(e.get("message"), str)
              and e["message"], "an error object: %r" % e)
    return j


def rpc(method, params=None, tok=ahlocal.ADMIN, headers=None, http_status=200):
    my = next(IDS)
    msg = {"jsonrpc": "2.0", "id": my, "method": method}
    if params is not None:
        msg["params"] = params
    status, h, raw = post(msg, tok, headers)
    check(status == http_status, "%s: HTTP %d, want %d: %r" % (method, status, http_status, raw[:300]))
    check(h.get("content-type", "").startswith("application/json"), "%s: JSON: %r" % (method, h))
    return envelope(raw, my)


def error_of(j, code, *words):
    check("error" in j and j["error"]["code"] == code, "want error %d: %r" % (code, j))
    for w in words:
        check(w in j["error"]["message"], "error message names %r: %r" % (w, j["error"]["message"]))
    return j["error"]


def tool(name, args=None, tok=ahlocal.ADMIN, error=False):
    """The result of tools/call; checks its shape and isError."""
    j = rpc("tools/call", {"name": name, "arguments": args or {}}, tok)
    check("result" in j, "%s: a result: %r" % (name, j))
    res = j["result"]
    check(isinstance(res.get("content"), list) and res["content"] and isinstance(res.get("isError"), bool),
          "%s: content and isError: %r" % (name, res))
    for c in res["content"]:
        check(c.get("type") in ("text", "resource"), "content type: %r" % c)
        if c["type"] == "text":
            check(isinstance(c.get("text"), str), "text content: %r" % c)
    check(res["isError"] == error, "%s %r: isError %s, want %s: %r" % (name, args, res["isError"], error, res))
    return res


def text_of(res):
    return res["content"][0]["text"]


def json_of(res):
    return json.loads(text_of(res))


def ensure_box(name="box"):
    s = server()
    st, j = s.call("GET", "/api/v1/agents/" + name)
    if st == 404:
        res = tool("create_agent", {"name": name})
        check(json_of(res)["state"] == "running" and res["structuredContent"]["name"] == name,
              "create_agent waits for running: %r" % res)
    return name


def protocol():
    j = rpc("initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                           "clientInfo": {"name": "t", "version": "1"}})
    r = j["result"]
    check(r["protocolVersion"] == "2025-03-26" and "tools" in r["capabilities"] and "resources" in r["capabilities"]
          and r["serverInfo"]["name"] == "agenthold", "initialize: %r" % r)
    r = rpc("initialize", {"protocolVersion": "2099-01-01", "capabilities": {},
                           "clientInfo": {"name": "t", "version": "1"}})["result"]
    check(r["protocolVersion"] == "2025-06-18", "an unknown version gets the latest: %r" % r)
    error_of(rpc("initialize", {"capabilities": {}}), -32602, "protocolVersion")
    status, h, raw = post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    check(status == 202 and raw == b"", "notifications/initialized: 202 without a body: %d %r" % (status, raw))
    status, h, raw = post({"jsonrpc": "2.0", "id": 99, "result": {}})
    check(status == 202 and raw == b"", "a client's answer: 202: %d %r" % (status, raw))
    check(rpc("ping")["result"] == {}, "ping")
    tools = rpc("tools/list")["result"]["tools"]
    names = sorted(t["name"] for t in tools)
    check(names == sorted(["create_agent", "start_agent", "stop_agent", "exec", "read_file", "write_file",
                           "list_files", "search_files", "open_port"]), "nine tools: %r" % names)
    for t in tools:
        s = t["inputSchema"]
        check(s["type"] == "object" and s["additionalProperties"] is False and isinstance(s["properties"], dict)
              and set(s["required"]) <= set(s["properties"]) and t["description"],
              "%s's inputSchema: %r" % (t["name"], s))
        for p, d in s["properties"].items():
            check(d["type"] in ("string", "integer", "number", "boolean", "object") and d["description"],
                  "%s.%s: %r" % (t["name"], p, d))
    tl = rpc("resources/templates/list")["result"]["resourceTemplates"]
    check(len(tl) == 1 and tl[0]["uriTemplate"] == "agenthold://agents/{agent}/files/{path}", "templates: %r" % tl)
    print("protocol: ok")


def tools():
    s = server()
    ensure_box()
    r = json_of(tool("exec", {"agent": "box", "cmd": "echo out; echo err >&2; exit 3"}))
    check(r["status"] == 3 and r["stdout"] == "out\n" and r["stderr"] == "err\n", "exec: %r" % r)
    r = json_of(tool("exec", {"agent": "box", "cmd": "pwd; echo \"$A\"; cat", "cwd": ".", "env": {"A": "x y"},
                              "stdin": "in"}))
    check(r["stdout"].endswith("\nx y\nin") and r["status"] == 0, "exec cwd env stdin: %r" % r)
    rest = s.ok("POST", "/api/v1/agents/box/exec", body={"cmd": "echo same"})
    via = json_of(tool("exec", {"agent": "box", "cmd": "echo same"}))
    check(via == rest, "the tool's answer is the route's: %r vs %r" % (via, rest))
    res = tool("write_file", {"agent": "box", "path": "d/hello.txt", "content": "héllo\nworld needle\n"},
               error=True)
    check("404" in text_of(res) or "409" in text_of(res) or "ENOENT" in text_of(res) or "No such" in text_of(res),
          "a write into a missing directory is the route's refusal: %r" % res)
    s.ok("POST", "/api/v1/agents/box/files/d?op=mkdir", want=(201,))
    tool("write_file", {"agent": "box", "path": "d/hello.txt", "content": "héllo\nworld needle\n"})
    check(text_of(tool("read_file", {"agent": "box", "path": "d/hello.txt"})) == "héllo\nworld needle\n",
          "read_file text")
    raw = bytes(range(256)) * 4
    tool("write_file", {"agent": "box", "path": "d/bin", "content": base64.b64encode(raw).decode(),
                        "encoding": "base64"})
    res = tool("read_file", {"agent": "box", "path": "d/bin"})
    c = res["content"][0]
    check(c["type"] == "resource" and base64.b64decode(c["resource"]["blob"]) == raw, "read_file blob: %r" % c)
    st, got = ahserver.request(s.port, "GET", "/api/v1/agents/box/files/d/bin", token=s.admin)
    check(st == 200 and got == raw, "written whole, as the REST route reads it")
    j = rpc("tools/call", {"name": "write_file", "arguments": {"agent": "box", "path": "d/x", "content": "@@",
                                                                "encoding": "base64"}})
    error_of(j, -32602, "base64")
    j = rpc("tools/call", {"name": "write_file", "arguments": {"agent": "box", "path": "d/x", "content": "a",
                                                                "encoding": "rot13"}})
    error_of(j, -32602, "encoding")
    tool("write_file", {"agent": "box", "path": "d/secret", "content": "s", "mode": "600"})
    check(json_of(tool("exec", {"agent": "box", "cmd": "stat -c %a d/secret"}))["stdout"] == "600\n", "mode 600")
    check(text_of(tool("write_file", {"agent": "box", "path": "d/m", "content": "s", "mode": "9z"},
                       error=True)).startswith("400"), "a bad mode is the route's 400")
    ls = json_of(tool("list_files", {"agent": "box", "path": "d"}))
    rest = s.ok("GET", "/api/v1/agents/box/files?path=d")
    check(ls == rest and sorted(e["name"] for e in ls["entries"]) == ["bin", "hello.txt", "secret"],
          "list_files: %r" % ls)
    home = json_of(tool("list_files", {"agent": "box"}))
    check(any(e["name"] == "d" for e in home["entries"]), "list_files of the home: %r" % home)
    res = tool("search_files", {"agent": "box", "pattern": "needle"})
    m = res["structuredContent"]["matches"]
    check(m == [{"path": "d/hello.txt", "line": 2, "text": "world needle"}] and json_of(res)["matches"] == m,
          "search_files: %r" % res)
    res = tool("search_files", {"agent": "box", "pattern": "-e nothing-here$(id)", "path": "d"})
    check(res["structuredContent"] == {"matches": [], "truncated": False}, "no match, no injection: %r" % res)
    tool("exec", {"agent": "box", "cmd": "for i in $(seq 1 30); do echo hit >> d/many; done"})
    res = tool("search_files", {"agent": "box", "pattern": "hit", "path": "d/many", "max_results": 5})
    check(len(res["structuredContent"]["matches"]) == 5 and res["structuredContent"]["truncated"], "max: %r" % res)
    for bad in ("../", "/etc", "d/../..", ""):
        error_of(rpc("tools/call", {"name": "search_files", "arguments": {"agent": "box", "pattern": "x",
                                                                           "path": bad}}), -32602, "path")
    error_of(rpc("tools/call", {"name": "search_files", "arguments": {"agent": "box", "pattern": "x",
                                                                       "max_results": 0}}), -32602, "max_results")
    res = tool("open_port", {"agent": "box", "port": 8080})
    o = res["structuredContent"]
    check(o["url"] == "http://127.0.0.1:%d%s" % (s.port, o["path"]) and o["port"] == 8080, "open_port: %r" % o)
    check("port" in text_of(tool("open_port", {"agent": "box", "port": 70000}, error=True)), "port off range")
    st = json_of(tool("stop_agent", {"agent": "box"}))
    check(st["state"] == "sleeping", "stop_agent waits: %r" % st)
    check(text_of(tool("read_file", {"agent": "box", "path": "d/hello.txt"})) == "héllo\nworld needle\n",
          "a sleeping agent's file read without waking it")
    st = json_of(tool("start_agent", {"agent": "box"}))
    check(st["state"] == "running", "start_agent waits: %r" % st)
    ops = s.ok("GET", "/api/v1/agents/box/operations?limit=200")["operations"]
    kinds = {o["kind"] for o in ops}
    check({"exec", "fs.write", "fs.read", "stop", "start"} <= kinds, "the routes' audit rows: %r" % kinds)
    print("tools: ok")


def resources():
    s = server()
    ensure_box()
    s.ok("POST", "/api/v1/agents/box/files/r?op=mkdir", want=(201, 409))
    tool("write_file", {"agent": "box", "path": "r/a b%.txt", "content": "text here"})
    tool("write_file", {"agent": "box", "path": "r/bin", "content": base64.b64encode(b"\xff\xfe\x00").decode(),
                        "encoding": "base64"})
    lst = rpc("resources/list")["result"]["resources"]
    check({"uri": "agenthold://agents/box/files/", "name": "box"}.items() <= next(
        (x for x in lst if x["name"] == "box"), {}).items(), "resources/list: %r" % lst)
    c = rpc("resources/read", {"uri": "agenthold://agents/box/files/r/a%20b%25.txt"})["result"]["contents"]
    check(len(c) == 1 and c[0]["text"] == "text here" and c[0]["uri"].endswith("a%20b%25.txt"), "read text: %r" % c)
    c = rpc("resources/read", {"uri": "agenthold://agents/box/files/r%2Fbin"})["result"]["contents"]
    check(base64.b64decode(c[0]["blob"]) == b"\xff\xfe\x00", "read blob (an encoded '/'): %r" % c)
    c = rpc("resources/read", {"uri": "agenthold://agents/box/files/r/"})["result"]["contents"]
    check(c[0]["mimeType"] == "application/json" and {e["name"] for e in json.loads(c[0]["text"])["entries"]}
          == {"a b%.txt", "bin"}, "a directory's listing: %r" % c)
    c = rpc("resources/read", {"uri": "agenthold://agents/box/files"})["result"]["contents"]
    check(any(e["name"] == "r" for e in json.loads(c[0]["text"])["entries"]), "the home's listing")
    e = error_of(rpc("resources/read", {"uri": "agenthold://agents/box/files/r/none"}), -32002)
    check(e["data"]["status"] == 404, "a missing file: %r" % e)
    e = error_of(rpc("resources/read", {"uri": "agenthold://agents/nobody/files/x"}), -32002, "nobody")
    for bad in ("file:///etc/passwd", "agenthold://agents/box", "agenthold://agents/box/other/x",
                "agenthold://agents/box/files/%zz", "agenthold://agents/box/files/%4"):
        error_of(rpc("resources/read", {"uri": bad}), -32602)
    for bad in ("agenthold://agents/box/files/../../etc/passwd", "agenthold://agents/box/files/r/%00x",
                "agenthold://agents/%2E%2E/files/x", "agenthold://agents/box/files/%2E%2E/x"):
        e = error_of(rpc("resources/read", {"uri": bad}), -32602)
        check(e["data"]["status"] == 400, "%s: the route's 400: %r" % (bad, e))
    error_of(rpc("resources/read", {}), -32602, "uri")
    error_of(rpc("resources/read", {"uri": 5}), -32602, "uri")
    print("resources: ok")


def hostile():
    s = server()
    ensure_box()

    def bad(raw, code, http_status, *words, headers=None):
        status, h, body = post(raw, headers=headers)
        check(status == http_status, "%r: HTTP %d, want %d: %r" % (str(raw)[:60], status, http_status, body[:300]))
        j = envelope(body, None)
        error_of(j, code, *words)

    bad(b"{", -32700, 400, "parse error")
    bad(b"", -32700, 400, "empty")
    bad(b"\xff\xfe", -32700, 400)
    bad(b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}', -32700, 400)
    bad(b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', -32600, 400, "batch")
    bad(b"[]", -32600, 400, "batch")
    bad(b'"ping"', -32600, 400, "object")
    bad(b"42", -32600, 400)
    bad(b'{"id":1,"method":"ping"}', -32600, 400, "jsonrpc")
    bad(b'{"jsonrpc":"1.0","id":1,"method":"ping"}', -32600, 400, "jsonrpc")
    bad(b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', -32600, 400, "id")
    bad(b'{"jsonrpc":"2.0","id":{},"method":"ping"}', -32600, 400, "id")
    status, h, body = post(b'{"jsonrpc":"2.0","id":7,"method":5}')
    check(status == 400 and json.loads(body)["error"]["code"] == -32600 and json.loads(body)["id"] == 7,
          "a method not a string: %r" % body)
    error_of(rpc("nope/nothing"), -32601, "nope/nothing")
    error_of(rpc("tools/call\u0000x"), -32601)
    status, h, body = post({"jsonrpc": "2.0", "id": "s", "method": "ping", "params": [1]})
    error_of(envelope(body, "s"), -32602, "params")
    error_of(rpc("tools/call", {"name": "rm_rf"}), -32602, "rm_rf")
    error_of(rpc("tools/call", {}), -32602, "name")
    error_of(rpc("tools/call", {"name": 5}), -32602, "name")
    error_of(rpc("tools/call", {"name": "exec", "arguments": []}), -32602, "arguments")
    error_of(rpc("tools/call", {"name": "exec", "arguments": {"agent": "box", "cmd": "true", "sudo": 1}}),
             -32602, "unknown argument 'sudo'", "exec takes")
    error_of(rpc("tools/call", {"name": "exec", "arguments": {"agent": "box"}}), -32602, "cmd")
    error_of(rpc("tools/call", {"name": "exec", "arguments": {"agent": "box", "cmd": ["ls"]}}), -32602,
             "'cmd'", "string", "array")
    error_of(rpc("tools/call", {"name": "exec", "arguments": {"agent": 5, "cmd": "x"}}), -32602, "agent")
    error_of(rpc("tools/call", {"name": "open_port", "arguments": {"agent": "box", "port": "80"}}), -32602, "port")
    error_of(rpc("tools/call", {"name": "open_port", "arguments": {"agent": "box", "port": 80.5}}), -32602, "port")
    error_of(rpc("tools/call", {"name": "list_files", "arguments": {"agent": "box", "all": "yes"}}), -32602, "all")
    # The route's own checks, as isError with its sentence
    check("timeout" in text_of(tool("exec", {"agent": "box", "cmd": "true", "timeout": 1e9}, error=True)),
          "the route's bound on timeout")
    check("NUL" in text_of(tool("exec", {"agent": "box", "cmd": "echo a\u0000b"}, error=True)), "NUL in cmd")
    for path in ("a%00b", "a%2F..%2Fb"):
        # '%' is a byte of a name like any other: never decoded into a NUL or a '/'
        tool("write_file", {"agent": "box", "path": path, "content": "literal"})
        check(text_of(tool("read_file", {"agent": "box", "path": path})) == "literal", "read back %r" % path)
        check(path in [e["name"] for e in json_of(tool("list_files", {"agent": "box"}))["entries"]],
              "%r is a name in the home" % path)
    for path in ("../x", "../../etc/passwd", "/etc/passwd", "d/../../x", "a\u0000b", "a//b", ".", "x\u0001"):
        t = text_of(tool("write_file", {"agent": "box", "path": path, "content": "pwned"}, error=True))
        check(t.startswith("400") or t.startswith("403"), "write_file %r: the route's refusal: %r" % (path, t))
        t = text_of(tool("read_file", {"agent": "box", "path": path}, error=True))
        check(t[:3] in ("400", "403", "404"), "read_file %r: %r" % (path, t))
    check("pwned" not in json.dumps(s.ok("POST", "/api/v1/agents/box/exec",
                                         body={"cmd": "grep -rl pwned . /tmp 2>/dev/null; true"})),
          "nothing written anywhere")
    for agent in ("bo/x", "..", ".", "", "box\u0000", "box%00", "BOX", "x" * 300):
        t = text_of(tool("exec", {"agent": agent, "cmd": "true"}, error=True))
        check(t[:3] in ("400", "404"), "agent %r: %r" % (agent, t))
    # Sizes: the body's cap, an answer over 8 MiB
    status, h, body = post({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "exec", "arguments": {"agent": "box", "cmd": "x" * (13 << 20)}}})
    check(status == 413 and b"over the limit" in body, "a 13 MiB body: %d %r" % (status, body[:200]))
    res = tool("exec", {"agent": "box", "cmd": "true", "stdin": "y" * (300 << 10)}, error=True)
    check("stdin" in text_of(res), "the route's stdin bound: %r" % text_of(res)[:200])
    tool("exec", {"agent": "box", "cmd": "head -c 9437184 /dev/zero > big"})
    res = tool("read_file", {"agent": "box", "path": "big"}, error=True)
    check("8 MiB" in text_of(res), "a 9 MiB read: %r" % text_of(res)[:200])
    e = error_of(rpc("resources/read", {"uri": "agenthold://agents/box/files/big"}), -32603, "8 MiB")
    check(e["data"] == {"uri": "agenthold://agents/box/files/big", "status": 413}, "a 9 MiB resource: %r" % e)
    # The transport's checks
    bad({"jsonrpc": "2.0", "id": 1, "method": "ping"}, -32600, 403, "Origin",
        headers={"Origin": "http://evil.example"})
    bad({"jsonrpc": "2.0", "id": 1, "method": "ping"}, -32600, 403, "Origin",
        headers={"Origin": "null"})
    check("result" in rpc("ping", headers={"Origin": "http://127.0.0.1:%d" % s.port}), "the server's own Origin")
    bad({"jsonrpc": "2.0", "id": 1, "method": "ping"}, -32600, 400, "MCP-Protocol-Version",
        headers={"MCP-Protocol-Version": "1999-01-01"})
    for v in ("2025-06-18", "2025-03-26"):
        check("result" in rpc("ping", headers={"MCP-Protocol-Version": v}), "version %s" % v)
    # Accept: a client that takes neither application/json nor
    # text/event-stream (nor a range holding one) is a 406; none is taken.
    for accept in ("text/html", "application/xml, text/plain", "application/json;q=0, text/event-stream;q=0",
                   "text/html;q=1, application/jsonx", "image/*", ""):
        bad({"jsonrpc": "2.0", "id": 1, "method": "ping"}, -32600, 406, "Accept", "application/json",
            "text/event-stream", headers={"Accept": accept})
    status, h, body = post({"jsonrpc": "2.0", "method": "notifications/initialized"}, headers={"Accept": "text/html"})
    check(status == 406 and json.loads(body)["error"]["code"] == -32600, "a notification, Accept text/html: %d %r"
          % (status, body))
    for accept in (None, "application/json", "text/event-stream", "*/*", "application/*", "text/*",
                   "text/html, APPLICATION/JSON; charset=utf-8", "text/event-stream;q=0.1, text/html"):
        check("result" in rpc("ping", headers={"Accept": accept}), "Accept %r is taken" % accept)
    for method in ("GET", "DELETE", "PUT"):
        status, h, body = post(b"", method=method)
        check(status == 405 and h.get("allow") == "POST", "%s /mcp: 405 Allow POST: %d %r" % (method, status, h))
    status, h, body = post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, tok=None)
    check(status == 401, "no token: %d" % status)
    status, h, body = post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, tok="0" * 64)
    check(status == 401, "a wrong token: %d" % status)
    check(ahserver.healthz(s.port), "the server is up")
    print("hostile: ok")


def tenant():
    s = server()
    ensure_box()
    st, j = s.call("GET", "/api/v1/tenants/other")
    if st == 404:
        s.ok("POST", "/api/v1/tenants", body={"name": "other"})
    rc, out, err = s.cli("--tenant", "other", "token", "create")
    check(rc == 0 and len(out.strip()) == 64, "a token of tenant other: %r" % err)
    tok = out.strip()
    mine = text_of(tool("exec", {"agent": "box", "cmd": "true"}, tok=tok, error=True))
    none = text_of(tool("exec", {"agent": "nosuch", "cmd": "true"}, tok=tok, error=True))
    check(mine.startswith("404") and mine.replace("box", "X") == none.replace("nosuch", "X"),
          "another tenant's agent is a nonexistent one: %r vs %r" % (mine, none))
    for name, args in (("read_file", {"path": "d/hello.txt"}), ("write_file", {"path": "x", "content": "x"}),
                       ("list_files", {}), ("search_files", {"pattern": "x"}), ("open_port", {"port": 80}),
                       ("stop_agent", {}), ("start_agent", {})):
        args["agent"] = "box"
        t = text_of(tool(name, args, tok=tok, error=True))
        check(t.startswith("404") and "box" in t, "%s as another tenant: %r" % (name, t))
    e = error_of(rpc("resources/read", {"uri": "agenthold://agents/box/files/d/hello.txt"}, tok=tok), -32002)
    check(e["data"]["status"] == 404, "a resource of another tenant: %r" % e)
    lst = rpc("resources/list", tok=tok)["result"]["resources"]
    check(lst == [], "another tenant lists none of ours: %r" % lst)
    made = json_of(tool("create_agent", {"name": "theirs"}, tok=tok))
    check(made["tenant"] == "other", "made in the token's tenant: %r" % made)
    print("tenant: ok")


def leave():
    import socket
    import threading
    s = server()
    ensure_box()
    got = {}

    def one(n):
        got[n] = json_of(tool("exec", {"agent": "box", "cmd": "sleep 0.2; echo %d" % n}))["stdout"]
    threads = [threading.Thread(target=one, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    check(got == {n: "%d\n" % n for n in range(8)}, "8 calls at once, each its own answer: %r" % got)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "exec", "arguments": {"agent": "box", "cmd": "sleep 5; echo mcp-left-marker"}}}).encode()
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (s.admin.encode(), len(body), body))
    time.sleep(0.5)
    sock.close()

    def recorded():
        ops = s.ok("GET", "/api/v1/agents/box/operations?limit=50")["operations"]
        return [o for o in ops if o["kind"] == "exec" and "mcp-left-marker" in json.dumps(o)]
    ops = ahserver.wait_until(recorded, 20, "the left exec's audit row", Fail)
    check("left" in json.dumps(ops[0]), "the audit row says the client left: %r" % ops[0])
    check(text_of(tool("exec", {"agent": "box", "cmd": "echo on"})) and ahserver.healthz(s.port), "serves on")
    print("leave: ok")


SCENARIOS = [("protocol", protocol), ("tools", tools), ("resources", resources), ("hostile", hostile),
             ("tenant", tenant), ("leave", leave)]


def main():
    for name, fn in SCENARIOS:
        if not CTX.only or name in CTX.only:
            t0 = time.monotonic()
            fn()
            print("  (%s: %.1f s)" % (name, time.monotonic() - t0))
    print("mcp.hostile: %d checks passed" % check.count)


if __name__ == "__main__":
    sys.exit(ahserver.run(main, Fail, CTX.procs, CTX.tmp, CTX.log))
