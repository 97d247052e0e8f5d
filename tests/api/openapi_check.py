#!/usr/bin/python3
"""tests/api/openapi_check.py: docs/openapi.json against the router and
against the OpenAPI 3.1 schema, then as the server serves it.

Usage: openapi_check.py AGENTHOLD [DOC]

1. The document is valid OpenAPI 3.1: it passes the specification's own
   JSON Schema (tests/api/openapi/oas-3.1-schema.json, the OAI's
   src/schemas/validation/schema.yaml of the v3.1-dev branch as JSON) with
   python3-jsonschema's Draft 2020-12 validator; every Schema Object in it
   passes the 2020-12 meta-schema; every $ref resolves. (Debian 12 has no
   python3-openapi-spec-validator.) A broken copy must fail the same
   validator, so the validator is known to bite.
2. The document and the router (`agenthold routes --json`) name the same
   (method, pattern) pairs, both ways. The router's `{name}` is OpenAPI's
   `{name}`; its `{name*}` (the rest of the path, slashes kept) is
   `{name}` whose parameter says `x-agenthold-rest-of-path: true`, and no
   other parameter says so. Per operation: the path parameters are the
   braces of the path; the query parameters are the route's query keys,
   plus `tenant` on every route but the public ones (raw routes, whose
   query passes as sent, state none); a public route has `security: []`,
   an admin's says `x-agenthold-admin`; a WebSocket route answers 101; a
   route with a JSON body (R_BODY) has an application/json request body
   whose properties are exactly the route's fields (plus "run", which
   every body may carry), each of the same JSON types, refusing any other
   key (additionalProperties false); a streamed body (R_STREAM) is
   application/octet-stream; a JSON-RPC body (R_RPC: POST /mcp) is
   application/json with x-agenthold-rpc; no other route has a request body.
3. `agenthold serve` (fake driver) answers GET /api/v1/openapi.json with
   no token: 200, application/json, the file's bytes exactly, and neither
   the admin token nor its hash in it. Then the e2e hook
   (tests/lib/ahserver.py with AH_OPENAPI_CHECK) passes this server's real
   answers (agents made, listed, shown, run, stopped and destroyed; errors;
   tenants, policy, runtimes, files, tree, audit, sessions) and refuses
   forged answers off the document."""
import copy
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

import jsonschema

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ahserver  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
AGENTHOLD = sys.argv[1]
DOC_PATH = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "..", "..", "docs", "openapi.json")
OAS_SCHEMA = os.path.join(HERE, "openapi", "oas-3.1-schema.json")
METHODS = ("get", "head", "post", "put", "patch", "delete", "options", "trace")
TYPES = {"string", "number", "boolean", "object", "null", "array"}


class Fail(Exception):
    pass


check = ahserver.Checks(Fail)
problems = []


def problem(cond, what):
    """Collects every disagreement (all are said, not only the first)."""
    check.count += 1
    if not cond:
        problems.append(what)


def resolve(doc, node):
    """node with its local $ref followed (one level at a time, to the end)."""
    seen = 0
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            raise Fail("a $ref that is not local: %s" % ref)
        node = doc
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise Fail("$ref %s does not resolve" % ref)
            node = node[part]
        seen += 1
        if seen > 20:
            raise Fail("$ref loop at %s" % ref)
    return node


def every_ref(doc, node, where="#"):
    if isinstance(node, dict):
        if "$ref" in node:
            resolve(doc, {"$ref": node["$ref"]})
        for k, v in node.items():
            every_ref(doc, v, where + "/" + k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            every_ref(doc, v, "%s/%d" % (where, i))


def schema_objects(doc):
    """Every Schema Object of the document: components, parameters and
    media types (with where it is, for the message)."""
    out = [("#/components/schemas/" + k, v) for k, v in doc.get("components", {}).get("schemas", {}).items()]
    for k, p in doc.get("components", {}).get("parameters", {}).items():
        out.append(("#/components/parameters/%s/schema" % k, p.get("schema", {})))

    def media(where, content):
        for mt, m in (content or {}).items():
            if "schema" in m:
                out.append(("%s/content/%s/schema" % (where, mt), m["schema"]))

    for k, r in doc.get("components", {}).get("responses", {}).items():
        media("#/components/responses/" + k, r.get("content"))
    for path, item in doc["paths"].items():
        for m in METHODS:
            o = item.get(m)
            if not o:
                continue
            where = "%s %s" % (m.upper(), path)
            for p in o.get("parameters", []):
                if "schema" in p:
                    out.append((where + " parameter " + p["name"], p["schema"]))
            if "requestBody" in o:
                media(where + " requestBody", resolve(doc, o["requestBody"]).get("content"))
            for st, r in o.get("responses", {}).items():
                media("%s %s" % (where, st), resolve(doc, r).get("content"))
    return out


def validate(doc, oas):
    """Raises jsonschema's ValidationError or SchemaError on what is wrong."""
    jsonschema.Draft202012Validator(oas).validate(doc)
    for where, s in schema_objects(doc):
        try:
            jsonschema.Draft202012Validator.check_schema(s)
        except jsonschema.SchemaError as e:
            raise jsonschema.SchemaError("%s: %s" % (where, e.message))


def step_validator(doc):
    with open(OAS_SCHEMA) as f:
        oas = json.load(f)
    jsonschema.Draft202012Validator.check_schema(oas)
    try:
        validate(doc, oas)
    except (jsonschema.ValidationError, jsonschema.SchemaError) as e:
        raise Fail("docs/openapi.json is not valid OpenAPI 3.1: %s (at %s)"
                   % (e.message, "/".join(map(str, getattr(e, "absolute_path", [])))))
    every_ref(doc, doc)
    check(doc["openapi"].startswith("3.1."), "openapi is %r, not 3.1.x" % doc["openapi"])
    # The validator bites: each broken copy must be refused.
    first = next(iter(doc["paths"]))
    m = next(k for k in doc["paths"][first] if k in METHODS)
    breakers = {
        "a response without its description": lambda d: d["paths"][first][m]["responses"].__setitem__(
            "299", {"content": {}}),
        "an unknown key in an operation": lambda d: d["paths"][first][m].__setitem__("responsez", {}),
        "a path not starting with /": lambda d: d["paths"].__setitem__("nope", {}),
        "a parameter in 'body'": lambda d: d["paths"][first][m].__setitem__(
            "parameters", [{"name": "x", "in": "body", "schema": {}}]),
        "openapi 2.0": lambda d: d.__setitem__("openapi", "2.0"),
        "a schema whose type is 'text'": lambda d: d["components"]["schemas"].__setitem__("X", {"type": "text"}),
    }
    for what, breaker in breakers.items():
        broken = copy.deepcopy(doc)
        breaker(broken)
        try:
            validate(broken, oas)
            refused = False
        except (jsonschema.ValidationError, jsonschema.SchemaError):
            refused = True
        check(refused, "the validator takes a document with %s: it does not check what it should" % what)


def openapi_path(pattern):
    """The router's pattern as an OpenAPI path, and the names of its
    rest-of-path captures."""
    rest = re.findall(r"\{([A-Za-z0-9_]+)\*\}", pattern)
    return re.sub(r"\{([A-Za-z0-9_]+)\*\}", r"{\1}", pattern), set(rest)


def schema_types(doc, s):
    """The JSON types a property's schema lets through (integer counts as
    number, as for the router)."""
    s = resolve(doc, s)
    if "oneOf" in s or "anyOf" in s:
        out = set()
        for b in s.get("oneOf", []) + s.get("anyOf", []):
            out |= schema_types(doc, b)
        return out
    if "const" in s:
        v = s["const"]
        return {"null" if v is None else "boolean" if isinstance(v, bool) else "number"
                if isinstance(v, (int, float)) else "string" if isinstance(v, str) else "object"}
    t = s.get("type")
    if t is None:
        return set(TYPES)
    t = [t] if isinstance(t, str) else t
    return {"number" if x == "integer" else x for x in t}


def step_router(doc):
    out = subprocess.run([AGENTHOLD, "routes", "--json"], capture_output=True, text=True, timeout=60)
    check(out.returncode == 0, "agenthold routes --json: exit %d %s" % (out.returncode, out.stderr))
    routes = json.loads(out.stdout)
    check(len(routes) > 50, "the router lists only %d routes" % len(routes))
    router = {}
    for r in routes:
        path, rest = openapi_path(r["pattern"])
        key = (r["method"].lower(), path)
        check(key not in router, "the router lists %s %s twice" % (r["method"], r["pattern"]))
        router[key] = (r, rest)
    documented = {(m, p) for p, item in doc["paths"].items() for m in item if m in METHODS}
    for m, p in sorted(set(router) - documented):
        problem(False, "the router's %s %s is not in docs/openapi.json" % (m.upper(), router[(m, p)][0]["pattern"]))
    for m, p in sorted(documented - set(router)):
        problem(False, "docs/openapi.json's %s %s is no route of the router" % (m.upper(), p))
    for (m, p), (r, rest) in sorted(router.items()):
        if (m, p) not in documented:
            continue
        item = doc["paths"][p]
        o = item[m]
        name = "%s %s" % (m.upper(), p)
        params = [resolve(doc, x) for x in item.get("parameters", []) + o.get("parameters", [])]
        path_params = {x["name"]: x for x in params if x["in"] == "path"}
        braces = set(re.findall(r"\{([A-Za-z0-9_]+)\}", p))
        problem(set(path_params) == braces, "%s: path parameters %s, the path has %s"
                % (name, sorted(path_params), sorted(braces)))
        for pn, x in path_params.items():
            problem(bool(x.get("x-agenthold-rest-of-path")) == (pn in rest),
                    "%s: parameter %s is%s the rest of the path in the router, the document says otherwise"
                    % (name, pn, "" if pn in rest else " not"))
        query = {x["name"] for x in params if x["in"] == "query"}
        if r["raw"]:
            problem(not query and o.get("x-agenthold-raw") is True,
                    "%s: a raw route (its query passes as sent) says x-agenthold-raw and states no query" % name)
        else:
            want = set(r["query"]) | (set() if r["public"] else {"tenant"})
            problem(query == want, "%s: query parameters %s, the router takes %s" % (name, sorted(query), sorted(want)))
        problem((o.get("security") == []) == r["public"],
                "%s: public in the router: %s; security [] in the document: %s"
                % (name, r["public"], o.get("security") == []))
        problem(bool(o.get("x-agenthold-admin")) == r["admin"], "%s: admin %s, x-agenthold-admin %s"
                % (name, r["admin"], o.get("x-agenthold-admin")))
        problem(bool(o.get("x-agenthold-metrics")) == r["metrics"], "%s: metrics %s, x-agenthold-metrics %s"
                % (name, r["metrics"], o.get("x-agenthold-metrics")))
        problem(("101" in o["responses"]) == r["upgrade"], "%s: a WebSocket in the router: %s; a 101 answer: %s"
                % (name, r["upgrade"], "101" in o["responses"]))
        if not r["raw"] and not r["upgrade"]:
            problem(any(st.startswith("2") for st in o["responses"]), "%s: no 2xx answer documented" % name)
        rb = resolve(doc, o["requestBody"]) if "requestBody" in o else None
        content = (rb or {}).get("content", {})
        if r["stream"]:
            problem("application/octet-stream" in content, "%s: a streamed body, documented as %s"
                    % (name, sorted(content)))
        elif r.get("rpc"):
            # A JSON-RPC message (POST /mcp): its fields are its protocol's
            # (docs/mcp.md), checked by its handler, not by the router's table.
            problem("application/json" in content and o.get("x-agenthold-rpc") is True,
                    "%s: a JSON-RPC body, documented as %s without x-agenthold-rpc" % (name, sorted(content)))
        elif r["body"]:
            problem("application/json" in content, "%s: takes a JSON body, documented as %s" % (name, sorted(content)))
            if "application/json" not in content:
                continue
            s = resolve(doc, content["application/json"]["schema"])
            props = s.get("properties", {})
            problem(s.get("additionalProperties") is False, "%s: the body schema must refuse other keys "
                    "(additionalProperties false), as the router does" % name)
            fields = {f["name"]: set(f["types"]) for f in (r["fields"] or [])}
            taken = {k for k, t in fields.items() if t}
            problem(set(props) - {"run"} == taken, "%s: body properties %s, the router takes %s"
                    % (name, sorted(set(props) - {"run"}), sorted(taken)))
            problem("run" in props, "%s: every body may carry \"run\"; the schema lacks it" % name)
            for k in taken & set(props):
                got = schema_types(doc, props[k])
                problem(got == fields[k], "%s: field %s is %s in the router, %s in the document"
                        % (name, k, sorted(fields[k]), sorted(got)))
        else:
            problem(rb is None, "%s: takes no body, the document gives it one" % name)
    check(not problems, "docs/openapi.json and the router disagree:\n  " + "\n  ".join(problems))
    return len(router)


def step_served(doc_bytes):
    tmp = tempfile.mkdtemp(prefix="ah-openapi-")
    data = os.path.join(tmp, "data")
    log = os.path.join(tmp, "server.log")
    procs = []

    def main():
        env = ahserver.server_env(data, ahserver.free_port(fail=Fail), ahserver.free_port(fail=Fail))
        port = ahserver.listen_port(env)
        ahserver.serve(AGENTHOLD, env, log, procs=procs, fail=Fail)
        token = ahserver.read_token(data)
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/api/v1/openapi.json")
        resp = c.getresponse()
        body = resp.read()
        c.close()
        check(resp.status == 200, "GET /api/v1/openapi.json without a token: %d %r" % (resp.status, body[:200]))
        check(resp.getheader("Content-Type", "").startswith("application/json"),
              "GET /api/v1/openapi.json: Content-Type %r" % resp.getheader("Content-Type"))
        check(body == doc_bytes, "GET /api/v1/openapi.json is not docs/openapi.json as built (%d bytes, the "
              "file %d): rebuild" % (len(body), len(doc_bytes)))
        for secret in (token, hashlib.sha256(token.encode()).hexdigest()):
            check(secret.encode() not in body, "the served document holds the admin token or its hash")
        # A token changes nothing; another method is a 405.
        st, again = ahserver.request(port, "GET", "/api/v1/openapi.json", token=token)
        check(st == 200 and again == body, "with a token: %d" % st)
        st, _ = ahserver.request(port, "POST", "/api/v1/openapi.json", body=b"", token=token)
        check(st == 405, "POST /api/v1/openapi.json: %d, not 405" % st)
        st, _ = ahserver.request(port, "GET", "/api/v1/openapi.json?x=1")
        check(st == 400, "GET /api/v1/openapi.json?x=1: %d, not 400 (an unknown query argument)" % st)
        step_hook(port, token)

    return ahserver.run(main, Fail, procs, tmp, log)


def step_hook(port, token):
    """The e2e hook (tests/lib/ahserver.py, AH_OPENAPI_CHECK): real answers
    of this server pass it, forged ones off the document do not."""
    os.environ["AH_OPENAPI_CHECK"] = DOC_PATH
    before = ahserver._openapi.get("checked", 0)
    calls = [("POST", "/api/v1/agents?wait=1", {"name": "doc"}, 201), ("GET", "/api/v1/agents", None, 200),
             ("GET", "/api/v1/agents/doc", None, 200), ("GET", "/api/v1/agents/nobody", None, 404),
             ("POST", "/api/v1/agents", {"name": "x", "gpus": 1}, 400), ("GET", "/api/v1/me", None, 200),
             ("POST", "/api/v1/tenants", {"name": "acme"}, 201), ("GET", "/api/v1/tenants", None, 200),
             ("GET", "/api/v1/policy", None, 200), ("GET", "/api/v1/runtimes", None, 200),
             ("POST", "/api/v1/agents/doc/exec", {"cmd": "echo hi"}, 200),
             ("GET", "/api/v1/agents/doc/files?path=.", None, 200), ("GET", "/api/v1/agents/doc/tree", None, 200),
             ("GET", "/api/v1/operations?limit=5", None, 200), ("GET", "/api/v1/sessions", None, 200),
             ("POST", "/api/v1/agents/doc/stop?wait=1", None, 200), ("DELETE", "/api/v1/agents/doc?wait=1", None, 200)]
    for method, path, body, want in calls:
        st, raw = ahserver.request(port, method, path, body=body, token=token)
        check(st == want, "%s %s: %d (wanted %d): %r" % (method, path, st, want, raw[:300]))
    st, _ = ahserver.request(port, "GET", "/api/v1/agents")
    check(st == 401, "GET /api/v1/agents without a token: %d" % st)
    checked = ahserver._openapi["checked"] - before
    check(checked == len(calls) + 1, "the hook checked %d of %d JSON answers" % (checked, len(calls) + 1))
    forged = [("GET", "/api/v1/agents", 200, b'{"agents": [{"id": "x"}]}', "an agent without its fields"),
              ("GET", "/api/v1/healthz", 200, b'{"ok": true}', "a 2xx of no documented route"),
              ("GET", "/healthz", 200, b'{"ok": "yes"}', "a wrong type"),
              ("GET", "/api/v1/agents/a", 404, b'{"message": "x"}', "an error without \"error\""),
              ("POST", "/api/v1/agents/a/turns", 200, b'{"turn_id": "t", "agent_id": "a", "expires_at": "x", '
               b'"expires_at_ms": 1}', "a 200 where the route answers 201 (the default is an error)"),
              ("GET", "/api/v1/me", 200, b'not json', "JSON that is not")]
    for method, path, status, raw, what in forged:
        try:
            ahserver.openapi_check(method, path, status, "application/json", raw)
            caught = False
        except ahserver.OpenAPIMismatch:
            caught = True
        check(caught, "the hook let through %s (%s %s %d)" % (what, method, path, status))


def main():
    with open(DOC_PATH, "rb") as f:
        doc_bytes = f.read()
    try:
        doc = json.loads(doc_bytes)
        step_validator(doc)
        n = step_router(doc)
    except Fail as e:
        print("FAIL: %s" % e, file=sys.stderr)
        return 1
    rc = step_served(doc_bytes)
    if rc == 0:
        print("ok: docs/openapi.json is valid OpenAPI 3.1 and documents the router's %d routes; "
              "served as built (%d checks)" % (n, check.count))
    return rc


if __name__ == "__main__":
    sys.exit(main())
