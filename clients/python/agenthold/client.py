"""agenthold/client.py: the synchronous client of the agenthold REST API
(docs/api.md), the standard library only.

DESIGN: one Client holds the server's URL, the bearer token and an
optional tenant scope (?tenant=). Each call opens its own HTTP connection
(http.client) and closes it, so a Client may be shared between threads
and no connection state outlives a call. Streams (exec ?stream=1, a
download, server-sent events, a terminal) own their connection until they
are read to the end or closed; use them in a `with` block.

Every identifier that goes into the URL is checked first (never empty,
no '/', not '.' or '..', no control character: a ClientError naming it)
and percent-encoded, so an argument never lands on another route than the
one the method names; the server's own grammar (docs/api.md "Names and
paths") then judges the rest and its refusal comes back as an APIError
with its sentence."""
import http.client
import json
import os
import socket
import ssl
import struct
import time
import urllib.parse
from typing import (IO, Any, Callable, Dict, Iterator, List, Optional, Tuple, Union)

from .errors import ClientError, Error, ProtocolError, StreamError, Timeout, TransportError, api_error
from .models import (Agent, Conversation, ConversationLog, Event, ExecExit, ExecOutput, ExecResult,
                     FileEntry, LogEntry, Session, Tenant, TerminalInfo, TextFile, Token, parse_json)
from .ws import WebSocket

JSON = Any
Body = Union[bytes, IO[bytes], None]


def _segment(value: Any, what: str) -> str:
    """One path segment (an agent, a tenant, a token, an id), checked and encoded."""
    if not isinstance(value, str):
        raise ClientError("%s must be a string, not %s" % (what, type(value).__name__))
    if value == "":
        raise ClientError("%s is empty" % what)
    if "/" in value:
        raise ClientError("%s %r holds a '/'" % (what, value))
    if value in (".", ".."):
        raise ClientError("%s %r is a path component, not a name" % (what, value))
    _no_controls(value, what)
    return urllib.parse.quote(value, safe="")


def _no_controls(value: str, what: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ClientError("%s %r is not valid Unicode (a lone surrogate)" % (what, value)) from None
    for ch in value:
        if ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F:
            raise ClientError("%s %r holds a control character (U+%04X)" % (what, value, ord(ch)))


def home_path(path: Any, directory: bool = False) -> str:
    """A path in the sandbox's home (relative to /home/agent), checked as
    the server checks it (docs/api.md "Names and paths") and encoded one
    component at a time. directory: "." (the home) and one trailing '/'
    are allowed."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise ClientError("path must be a string, not %s" % type(path).__name__)
    if directory and path == ".":
        return "."
    if directory and path.endswith("/") and len(path) > 1:
        path = path[:-1]
    if path == "":
        raise ClientError("path is empty (use '.' for the home)")
    if path.startswith("/"):
        raise ClientError("path %r is absolute: paths are relative to the home (/home/agent)" % path)
    _no_controls(path, "path")
    if len(path.encode("utf-8")) > 4095:
        raise ClientError("path is over 4095 bytes")
    parts = path.split("/")
    for p in parts:
        if p == "":
            raise ClientError("path %r has an empty component" % path)
        if p in (".", ".."):
            raise ClientError("path %r has a %r component: paths are never normalised" % (path, p))
        if len(p.encode("utf-8")) > 255:
            raise ClientError("path %r has a component over 255 bytes" % path)
    return "/".join(urllib.parse.quote(p, safe="") for p in parts)


def _dumps(body: Any, what: str) -> bytes:
    """A request's JSON body; a value JSON cannot carry (bytes, a set,
    NaN) is the caller's error, said before sending."""
    try:
        return json.dumps(body, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise ClientError("%s: the body cannot be JSON: %s" % (what, e)) from None


def _drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


class Client:
    """The API of one agenthold server.

    url: http://host:port or https://... (default $AGENTHOLD_URL, else
    http://127.0.0.1:8080). token: the bearer token (default
    $AGENTHOLD_TOKEN). tenant: act within that tenant (an admin's
    ?tenant=; see scoped()). timeout: seconds a call may wait on the
    socket. ssl_context: for https (default: the system's trust)."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, tenant: Optional[str] = None,
                 timeout: float = 60.0, ssl_context: Optional[ssl.SSLContext] = None) -> None:
        url = url or os.environ.get("AGENTHOLD_URL") or "http://127.0.0.1:8080"
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ClientError("url %r: give http://HOST:PORT or https://HOST:PORT" % url)
        if u.path not in ("", "/") or u.query or u.fragment:
            raise ClientError("url %r: give the server's root, without a path" % url)
        self.url = url.rstrip("/")
        self.host = u.hostname
        self.tls = u.scheme == "https"
        try:
            self.port = u.port or (443 if self.tls else 80)
        except ValueError:
            raise ClientError("url %r: the port is not a number from 0 to 65535" % url) from None
        self.token = token if token is not None else os.environ.get("AGENTHOLD_TOKEN")
        if self.token is not None:
            if not isinstance(self.token, str) or not self.token or \
                    not all(33 <= ord(ch) <= 126 for ch in self.token):
                raise ClientError("token must be a non-empty string of visible ASCII (no blank, no control)")
        self.tenant = tenant
        if tenant is not None:
            _segment(tenant, "tenant")
        self.timeout = timeout
        self.max_answer = 256 << 20      # bytes of a JSON answer at most (a hostile server's cannot grow past it)
        self.ssl_context = ssl_context or (ssl.create_default_context() if self.tls else None)

    def scoped(self, tenant: Optional[str]) -> "Client":
        """The same server and token acting within tenant (an admin's ?tenant=)."""
        return Client(self.url, self.token, tenant, self.timeout, self.ssl_context)

    def with_token(self, token: str) -> "Client":
        """The same server with another token (a tenant's, made by create_token)."""
        return Client(self.url, token, self.tenant, self.timeout, self.ssl_context)

    # -- the wire --------------------------------------------------------
    def _target(self, path: str, query: Optional[Dict[str, Any]] = None) -> str:
        q = dict(query or {})
        if self.tenant is not None and "tenant" not in q:
            q["tenant"] = self.tenant
        q = {k: ("1" if v is True else v) for k, v in q.items() if v is not None and v is not False}
        return path + ("?" + urllib.parse.urlencode(q, quote_via=urllib.parse.quote) if q else "")

    def _headers(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        h = {"Authorization": "Bearer " + self.token} if self.token else {}
        h.update(extra or {})
        return h

    def _conn(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        t = self.timeout if timeout is None else timeout
        # blocksize: an upload's body is read and sent 256 KiB at a time (8 KiB by default)
        if self.tls:
            return http.client.HTTPSConnection(self.host, self.port, timeout=t, context=self.ssl_context,
                                               blocksize=1 << 18)
        return http.client.HTTPConnection(self.host, self.port, timeout=t, blocksize=1 << 18)

    def _open(self, method: str, path: str, query: Optional[Dict[str, Any]] = None, body: Body = None,
              headers: Optional[Dict[str, str]] = None, timeout: Optional[float] = None
              ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Sends the request; returns the connection and the response, whose
        status is 2xx (else the APIError is raised and the connection closed)."""
        target = self._target(path, query)
        conn = self._conn(timeout)
        sent: Optional[OSError] = None
        try:
            try:
                conn.request(method, target, body=body, headers=self._headers(headers))
            except OSError as e:
                # The server may answer before it read the whole body (an
                # upload refused: a missing parent, no space) and close the
                # connection: its answer, when it came, says why.
                if conn.sock is None:
                    raise
                sent = e
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            e = sent or e
            raise TransportError("%s %s: %s: %s" % (method, path, self.url, e or type(e).__name__)) from e
        if resp.status >= 300:
            try:
                raw = resp.read(1 << 20)
            except (OSError, http.client.HTTPException):
                raw = b""
            conn.close()
            try:
                j = json.loads(raw)
                msg = j["error"] if isinstance(j, dict) and isinstance(j.get("error"), str) else str(j)
            except ValueError:
                j, msg = None, raw[:300].decode("utf-8", "replace") or resp.reason
            raise api_error(resp.status, msg, method, path, j)
        return conn, resp

    def request(self, method: str, path: str, body: Optional[JSON] = None, query: Optional[Dict[str, Any]] = None,
                timeout: Optional[float] = None) -> JSON:
        """One call with a JSON body (or none): the JSON answer. path is
        sent as given (already encoded): the methods below build it."""
        data, headers = None, {}
        if body is not None:
            data = _dumps(body, "%s %s" % (method, path))
            headers["Content-Type"] = "application/json"
        conn, resp = self._open(method, path, query, data, headers, timeout)
        try:
            raw = resp.read(self.max_answer + 1)
            if len(raw) > self.max_answer:
                raise ProtocolError("%s %s: an answer over %d bytes (Client.max_answer)" % (method, path,
                                                                                          self.max_answer))
        except (OSError, http.client.HTTPException) as e:
            raise TransportError("%s %s: the answer was cut: %s" % (method, path, e)) from e
        finally:
            conn.close()
        return parse_json(raw, "%s %s" % (method, path)) if raw else None

    def _call(self, method: str, path: str, body: Optional[JSON] = None, query: Optional[Dict[str, Any]] = None,
              timeout: Optional[float] = None) -> Dict[str, Any]:
        """request() whose answer must be a JSON object (else ProtocolError)."""
        j = self.request(method, path, body, query, timeout)
        if not isinstance(j, dict):
            raise ProtocolError("%s %s: the answer is not a JSON object: %r" % (method, path, str(j)[:200]))
        return j

    def _list(self, j: JSON, key: str, what: str) -> List[Any]:
        v = self._obj(j, key, what)
        if not isinstance(v, list):
            raise ProtocolError("%s: %r is not a list" % (what, key))
        return v

    def _obj(self, j: JSON, key: str, what: str) -> Any:
        if not isinstance(j, dict) or key not in j:
            raise ProtocolError("%s: the answer has no %r: %r" % (what, key, str(j)[:200]))
        return j[key]

    @staticmethod
    def _checked(path: str) -> str:
        """A directory path for a query argument: checked, sent as written."""
        home_path(path, True)
        return path

    @staticmethod
    def _agent(agent: Union[str, Agent]) -> str:
        return "/api/v1/agents/" + _segment(agent.id if isinstance(agent, Agent) else agent, "agent")

    # -- who and what ------------------------------------------------------
    def healthz(self) -> bool:
        """Whether the server answers GET /healthz (no token needed)."""
        try:
            j = self.request("GET", "/healthz")
        except (TransportError, ProtocolError):
            return False
        return isinstance(j, dict) and j.get("ok") is True

    def me(self) -> Dict[str, Any]:
        """Who the token is: {"token", "tenant", "user", "admin", "scope", ...}."""
        return self._call("GET", "/api/v1/me")

    def runtimes(self) -> List[Dict[str, Any]]:
        """The catalog's runtimes."""
        return self._list(self.request("GET", "/api/v1/runtimes"), "runtimes", "runtimes")

    # -- agents ------------------------------------------------------------
    def create_agent(self, name: str, runtime: Optional[str] = None, image: Optional[str] = None,
                     cpus: Optional[float] = None, memory_mb: Optional[int] = None,
                     idle_minutes: Optional[float] = None, harness: Optional[Dict[str, Any]] = None,
                     wait: bool = False, timeout: Optional[float] = None) -> Agent:
        """POST /api/v1/agents. wait: answer once the sandbox is made
        (running or error); timeout: the server's bound on that wait,
        1..3600 s (default 600; the first create of a runtime on a fresh
        machine builds its image first)."""
        if not isinstance(name, str):
            raise ClientError("name must be a string")
        body = _drop_none({"name": name, "runtime": runtime, "image": image, "cpus": cpus,
                           "memory_mb": memory_mb, "idle_minutes": idle_minutes, "harness": harness})
        q = {"wait": wait, "timeout": timeout if wait else None}
        return Agent.from_json(self.request("POST", "/api/v1/agents", body, q,
                                            timeout=(timeout or 600) + 30 if wait else None))

    def agents(self) -> List[Agent]:
        """Every agent the token sees, by tenant then name."""
        return [Agent.from_json(a) for a in self._obj(self.request("GET", "/api/v1/agents"), "agents", "agents")]

    def agent(self, agent: str) -> Agent:
        """One agent by name or id (NotFound when there is none)."""
        return Agent.from_json(self.request("GET", self._agent(agent)))

    def update_agent(self, agent: str, **fields: Any) -> Agent:
        """PATCH: runtime, image, cpus, memory_mb, idle_minutes (None: the
        default again), harness. Resources apply at the next rebuild."""
        return Agent.from_json(self.request("PATCH", self._agent(agent), fields))

    def _transition(self, agent: str, op: str, wait: bool, timeout: Optional[int]) -> Agent:
        method, path = ("DELETE", self._agent(agent)) if op == "destroy" else ("POST", self._agent(agent) + "/" + op)
        q = {"wait": wait, "timeout": timeout if wait else None}
        return Agent.from_json(self.request(method, path, None, q, timeout=(timeout or 600) + 30 if wait else None))

    def start(self, agent: str, wait: bool = False, timeout: Optional[int] = None) -> Agent:
        """Starts a sleeping (or failed) agent. wait: answer once it runs
        (or is in error); timeout: the server's bound on that wait, 1..3600 s."""
        return self._transition(agent, "start", wait, timeout)

    def stop(self, agent: str, wait: bool = False, timeout: Optional[int] = None) -> Agent:
        """Puts an agent to sleep (its home kept)."""
        return self._transition(agent, "stop", wait, timeout)

    def rebuild(self, agent: str, wait: bool = False, timeout: Optional[int] = None) -> Agent:
        """Makes the sandbox again from its (new) image and resources, the home kept."""
        return self._transition(agent, "rebuild", wait, timeout)

    def destroy(self, agent: str, wait: bool = False, timeout: Optional[int] = None) -> Agent:
        """Removes the agent and its home. With wait the answer's state is "destroyed"."""
        return self._transition(agent, "destroy", wait, timeout)

    def wait_state(self, agent: str, states: Union[str, Tuple[str, ...]], timeout: float = 60.0,
                   interval: float = 0.2) -> Agent:
        """Polls the agent until its state is one of states; Timeout after timeout s."""
        want = (states,) if isinstance(states, str) else tuple(states)
        end = time.monotonic() + timeout
        while True:
            a = self.agent(agent)
            if a.state in want:
                return a
            if time.monotonic() > end:
                raise Timeout("agent %r is %s, not %s, after %g s" % (agent, a.state, "/".join(want), timeout))
            time.sleep(interval)

    def briefing(self, agent: str) -> str:
        """The Markdown the sandbox holds in /etc/agenthold/briefing.md."""
        return str(self._obj(self.request("GET", self._agent(agent) + "/briefing"), "text", "briefing"))

    def ports(self, agent: str) -> List[Dict[str, Any]]:
        """The TCP ports that listen in a running agent's sandbox: [{"port", "address"}]."""
        return self._list(self.request("GET", self._agent(agent) + "/ports"), "ports", "ports")

    def operations(self, agent: Optional[str] = None, limit: Optional[int] = None, before: Optional[int] = None,
                   operation: Optional[str] = None, run: Optional[str] = None, failed: bool = False,
                   q: Optional[str] = None) -> Dict[str, Any]:
        """A page of the audit trail, newest first: {"operations": [...], "next"}
        (pass next as before= for the page after). agent: one agent's."""
        path = self._agent(agent) + "/operations" if agent is not None else "/api/v1/operations"
        return self._call("GET", path, query={"limit": limit, "before": before, "operation": operation,
                                                "run": run, "failed": failed, "q": q})

    # -- turns -----------------------------------------------------------------
    def start_turn(self, agent: str, lease_ms: Optional[int] = None) -> Dict[str, Any]:
        """A lease that keeps the agent awake while a harness works (a
        sleeping agent is woken first): {"turn_id", "expires_at", ...}."""
        return self._call("POST", self._agent(agent) + "/turns", _drop_none({"lease_ms": lease_ms}),
                            timeout=150)

    def renew_turn(self, turn: str, lease_ms: Optional[int] = None) -> Dict[str, Any]:
        return self._call("POST", "/api/v1/turns/" + _segment(turn, "turn") + "/renew",
                            _drop_none({"lease_ms": lease_ms}))

    def end_turn(self, turn: str) -> Dict[str, Any]:
        return self._call("DELETE", "/api/v1/turns/" + _segment(turn, "turn"))

    # -- exec --------------------------------------------------------------
    @staticmethod
    def _exec_body(cmd: str, timeout: Optional[float], cwd: Optional[str], env: Optional[Dict[str, str]],
                   stdin: Optional[str]) -> Dict[str, Any]:
        if not isinstance(cmd, str):
            raise ClientError("cmd must be a string (it runs as /bin/sh -c cmd)")
        if cwd is not None:
            home_path(cwd, True)
        return _drop_none({"cmd": cmd, "timeout": timeout, "cwd": cwd, "env": env, "stdin": stdin})

    def exec(self, agent: str, cmd: str, timeout: Optional[float] = None, cwd: Optional[str] = None,
             env: Optional[Dict[str, str]] = None, stdin: Optional[str] = None) -> ExecResult:
        """Runs /bin/sh -c cmd in the sandbox and answers once it ended:
        status, signal, timed_out and its output (1 MiB a stream kept)."""
        body = self._exec_body(cmd, timeout, cwd, env, stdin)
        return ExecResult.from_json(self.request("POST", self._agent(agent) + "/exec", body,
                                                 timeout=(timeout or 300) + 60))

    def exec_stream(self, agent: str, cmd: str, timeout: Optional[float] = None, cwd: Optional[str] = None,
                    env: Optional[Dict[str, str]] = None, stdin: Optional[str] = None) -> "ExecStream":
        """As exec, the output streamed as the command writes it: iterate
        the ExecStream for ExecOutput records, then read .exit."""
        body = _dumps(self._exec_body(cmd, timeout, cwd, env, stdin), "exec")
        path = self._agent(agent) + "/exec"
        conn, resp = self._open("POST", path, {"stream": True}, body, {"Content-Type": "application/json"},
                                timeout=(timeout or 300) + 60)
        return ExecStream(conn, resp, path)

    # -- files ---------------------------------------------------------------
    def list_files(self, agent: str, path: str = ".", all: bool = False) -> List[FileEntry]:
        """The directory's entries (running or asleep; a sleeping agent is not woken)."""
        j = self.request("GET", self._agent(agent) + "/files",
                         query={"path": self._checked(path), "all": "true" if all else None})
        return [FileEntry.from_json(e) for e in self._obj(j, "entries", "list_files")]

    def tree(self, agent: str, path: str = ".", all: bool = False) -> Dict[str, Any]:
        """The tree under path (docs/api.md, "tree"); entries as FileEntry under "entries"."""
        home_path(path, True)
        j = self._call("GET", self._agent(agent) + "/tree",
                         query={"path": path if path != "." else None, "all": "true" if all else None})
        j["entries"] = [FileEntry.from_json(e) for e in self._obj(j, "entries", "tree")]
        return j

    def read_text(self, agent: str, path: str) -> TextFile:
        """A file's content in JSON, cut at the server's files.max_read_bytes (8 MiB shipped)."""
        home_path(path)
        return TextFile.from_json(self.request("GET", self._agent(agent) + "/fs/text", query={"path": path}))

    def upload(self, agent: str, path: str, data: Union[bytes, bytearray, IO[bytes]], mode: Optional[int] = None,
               size: Optional[int] = None, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Streams data up as the file at path (the parent must exist):
        bytes, or a binary file object read in blocks (its size from size,
        else from the file). The file appears whole or not at all.
        mode: its permission bits (an int, 0o644)."""
        target = self._agent(agent) + "/files/" + home_path(path)
        if isinstance(data, (bytes, bytearray)):
            n = len(data)
            body: Any = bytes(data)
        elif hasattr(data, "read"):
            if size is None:
                try:
                    size = os.fstat(data.fileno()).st_size - data.tell()
                except (OSError, AttributeError, ValueError):
                    try:
                        here = data.seek(0, os.SEEK_CUR)
                        size = data.seek(0, os.SEEK_END) - here
                        data.seek(here)
                    except (OSError, AttributeError, ValueError):
                        raise ClientError("upload: give size= for a file object that cannot tell its size") from None
            n, body = size, _Exact(data, size)
        else:
            raise ClientError("upload: data must be bytes or a binary file object, not %s" % type(data).__name__)
        if mode is not None and (not isinstance(mode, int) or not 0 <= mode <= 0o7777):
            raise ClientError("upload: mode must be permission bits, an int from 0 to 0o7777")
        q = {"mode": "%o" % mode if mode is not None else None}
        conn, resp = self._open("PUT", target, q, body, {"Content-Length": str(n),
                                                         "Content-Type": "application/octet-stream"},
                                timeout)
        try:
            j = parse_json(resp.read(), "PUT " + target)
        except (OSError, http.client.HTTPException) as e:
            raise TransportError("PUT %s: the answer was cut: %s" % (target, e)) from e
        finally:
            conn.close()
        if not isinstance(j, dict):
            raise ProtocolError("PUT %s: the answer is not a JSON object" % target)
        return j

    def download(self, agent: str, path: str, dest: Optional[IO[bytes]] = None, chunk_size: int = 1 << 20,
                 timeout: Optional[float] = None) -> Union[bytes, int]:
        """The file at path, streamed down: into dest (a binary file
        object) a chunk at a time, answering the byte count; without dest,
        the bytes. A stream cut short raises StreamError."""
        with self.open_download(agent, path, timeout) as d:
            if dest is None:
                return b"".join(d.chunks(chunk_size))
            n = 0
            for piece in d.chunks(chunk_size):
                dest.write(piece)
                n += len(piece)
            return n

    def open_download(self, agent: str, path: str, timeout: Optional[float] = None) -> "Download":
        """The file at path as a Download: .size, then chunks() to iterate."""
        target = self._agent(agent) + "/files/" + home_path(path)
        conn, resp = self._open("GET", target, timeout=timeout)
        return Download(conn, resp, target)

    def mkdir(self, agent: str, path: str, parents: bool = False, mode: Optional[int] = None) -> Dict[str, Any]:
        q = {"op": "mkdir", "parents": parents, "mode": "%o" % mode if mode is not None else None}
        return self._call("POST", self._agent(agent) + "/files/" + home_path(path, True), query=q)

    def remove(self, agent: str, path: str, recursive: bool = False) -> Dict[str, Any]:
        return self._call("DELETE", self._agent(agent) + "/files/" + home_path(path),
                            query={"recursive": recursive})

    # -- terminals -----------------------------------------------------------
    def terminal(self, agent: str, cols: Optional[int] = None, rows: Optional[int] = None,
                 terminal: Optional[str] = None, timeout: Optional[float] = 120.0) -> "Terminal":
        """A shell in the sandbox over the terminal WebSocket (a sleeping
        agent is woken first). terminal: attach to a terminal that lasts
        (create_terminal) instead of a shell that ends with the connection."""
        q = {"cols": cols, "rows": rows, "terminal": _segment(terminal, "terminal") if terminal else None}
        target = self._target(self._agent(agent) + "/terminal", q)
        ws = WebSocket.connect(self.host, self.port, target, self._headers(), self.ssl_context, timeout)
        return Terminal(ws)

    def create_terminal(self, agent: str, cols: Optional[int] = None, rows: Optional[int] = None,
                        title: Optional[str] = None) -> TerminalInfo:
        """A terminal that outlives its clients (attach with terminal(agent, terminal=id))."""
        return TerminalInfo.from_json(self.request("POST", self._agent(agent) + "/terminals",
                                                   _drop_none({"cols": cols, "rows": rows, "title": title}),
                                                   timeout=150))

    def terminals(self, agent: str) -> List[TerminalInfo]:
        j = self.request("GET", self._agent(agent) + "/terminals")
        return [TerminalInfo.from_json(t) for t in self._obj(j, "terminals", "terminals")]

    def get_terminal(self, agent: str, terminal: str) -> TerminalInfo:
        """The terminal with its screen's text now (.screen)."""
        return TerminalInfo.from_json(self.request("GET", self._agent(agent) + "/terminals/" +
                                                   _segment(terminal, "terminal")))

    def delete_terminal(self, agent: str, terminal: str) -> Dict[str, Any]:
        return self._call("DELETE", self._agent(agent) + "/terminals/" + _segment(terminal, "terminal"))

    # -- conversations -------------------------------------------------------
    def _conv(self, agent: str, conversation: str) -> str:
        return self._agent(agent) + "/conversations/" + _segment(conversation, "conversation")

    def create_conversation(self, agent: str) -> Conversation:
        return Conversation.from_json(self.request("POST", self._agent(agent) + "/conversations", {}))

    def conversations(self, agent: str) -> List[Conversation]:
        j = self.request("GET", self._agent(agent) + "/conversations")
        return [Conversation.from_json(c) for c in self._obj(j, "conversations", "conversations")]

    def conversation(self, agent: str, conversation: str, after: int = 0, limit: Optional[int] = None
                     ) -> ConversationLog:
        """The conversation and a page of its log (entries after seq `after`)."""
        return ConversationLog.from_json(self.request("GET", self._conv(agent, conversation),
                                                      query={"after": after or None, "limit": limit}))

    def conversation_log(self, agent: str, conversation: str) -> Iterator[LogEntry]:
        """Every entry of the log, page after page."""
        after = 0
        while True:
            page = self.conversation(agent, conversation, after, 1000)
            yield from page.entries
            if page.next_after is None:
                return
            after = page.next_after

    def prompt(self, agent: str, conversation: str, text: str, timeout: Optional[float] = 600.0) -> "EventStream":
        """Sends the prompt and streams the turn: iterate the EventStream
        for LogEntry objects (kind "turn" first, "stop" or an ending
        "error" last) until the turn ends. timeout: seconds of silence."""
        if not isinstance(text, str):
            raise ClientError("text must be a string")
        path = self._conv(agent, conversation) + "/prompt"
        conn, resp = self._open("POST", path, None, _dumps({"text": text}, "prompt"),
                                {"Content-Type": "application/json", "Accept": "text/event-stream"}, timeout)
        return EventStream(conn, resp, path, _log_entry)

    def cancel(self, agent: str, conversation: str) -> Dict[str, Any]:
        return self._call("POST", self._conv(agent, conversation) + "/cancel", {})

    def answer_permission(self, agent: str, conversation: str, request: int, option: str) -> Dict[str, Any]:
        """Answers the permission the harness asked (request: the seq of its "permission" entry)."""
        if not isinstance(request, int) or isinstance(request, bool):
            raise ClientError("request must be the permission entry's seq (an int)")
        return self._call("POST", self._conv(agent, conversation) + "/permissions/%d" % request,
                            {"option": option})

    # -- sessions ------------------------------------------------------------
    def open_session(self, scope: str, subject: Optional[str] = None, backend: Optional[str] = None,
                     host: Optional[str] = None, runtime: Optional[str] = None, wait: bool = False) -> Session:
        """Opens the session of a key (made the first time: .created)."""
        body = _drop_none({"scope": scope, "subject": subject, "backend": backend, "host": host, "runtime": runtime})
        return Session.from_json(self.request("POST", "/api/v1/sessions", body, {"wait": wait},
                                              timeout=660 if wait else None))

    def sessions(self) -> List[Session]:
        j = self.request("GET", "/api/v1/sessions")
        return [Session.from_json(s) for s in self._obj(j, "sessions", "sessions")]

    def session(self, session: str) -> Session:
        return Session.from_json(self.request("GET", "/api/v1/sessions/" + _segment(session, "session")))

    def reopen_session(self, session: str, wait: bool = False) -> Session:
        return Session.from_json(self.request("POST", "/api/v1/sessions/" + _segment(session, "session") + "/open",
                                              None, {"wait": wait}, timeout=660 if wait else None))

    def close_session(self, session: str) -> Dict[str, Any]:
        """Closes the session and destroys its sandbox."""
        return self._call("DELETE", "/api/v1/sessions/" + _segment(session, "session"))

    # -- tenants and tokens (admin) -------------------------------------------
    def create_tenant(self, name: str, **limits: Any) -> Tenant:
        """limits: max_sandboxes, max_running, max_cpus, max_memory_mb, egress_allow, egress_deny."""
        return Tenant.from_json(self.request("POST", "/api/v1/tenants", dict(limits, name=name)))

    def tenants(self) -> List[Tenant]:
        return [Tenant.from_json(t) for t in self._obj(self.request("GET", "/api/v1/tenants"), "tenants", "tenants")]

    def get_tenant(self, name: str) -> Tenant:
        return Tenant.from_json(self.request("GET", "/api/v1/tenants/" + _segment(name, "tenant")))

    def update_tenant(self, name: str, **limits: Any) -> Tenant:
        return Tenant.from_json(self.request("PATCH", "/api/v1/tenants/" + _segment(name, "tenant"), limits))

    def delete_tenant(self, name: str, force: bool = False) -> Dict[str, Any]:
        """Removes the tenant; force: destroying its sandboxes first."""
        return self._call("DELETE", "/api/v1/tenants/" + _segment(name, "tenant"), query={"force": force},
                            timeout=660 if force else None)

    def create_token(self, tenant: Optional[str] = None, name: Optional[str] = None, user: Optional[str] = None,
                     admin: Optional[bool] = None, metrics: Optional[bool] = None,
                     expires: Union[str, int, None] = None) -> Token:
        """A new token; its secret is in .token, this once."""
        body = _drop_none({"tenant": tenant, "name": name, "user": user, "admin": admin, "metrics": metrics,
                           "expires": expires})
        return Token.from_json(self.request("POST", "/api/v1/tokens", body))

    def tokens(self) -> List[Token]:
        return [Token.from_json(t) for t in self._obj(self.request("GET", "/api/v1/tokens"), "tokens", "tokens")]

    def revoke_token(self, name: str) -> Dict[str, Any]:
        return self._call("DELETE", "/api/v1/tokens/" + _segment(name, "token"))

    # -- events ----------------------------------------------------------------
    def events(self, agent: Optional[str] = None, timeout: Optional[float] = 60.0) -> "EventStream":
        """The agents' state changes as they happen (one agent's with
        agent=). Iterate the EventStream for Event objects; it ends when
        the server ends it or timeout seconds pass without a byte (the
        server sends a keep-alive every 15 s)."""
        if agent is not None:
            _segment(agent, "agent")
        conn, resp = self._open("GET", "/api/v1/events", {"agent": agent}, None,
                                {"Accept": "text/event-stream"}, timeout)
        return EventStream(conn, resp, "/api/v1/events", lambda ev, data, id_: Event.from_json(data))


class _Exact:
    """A file object's first n bytes, read in blocks for http.client."""

    def __init__(self, f: IO[bytes], n: int) -> None:
        self.f, self.left = f, n

    def read(self, size: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        want = self.left if size is None or size < 0 else min(size, self.left)
        b = self.f.read(want)
        if not b:
            raise ClientError("upload: the file ended %d bytes before the size given" % self.left)
        self.left -= len(b)
        return b


class _Stream:
    """A response read after the call returned: closes its connection."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, what: str) -> None:
        self.conn, self.resp, self.what = conn, resp, what

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, n: int) -> bytes:
        try:
            return self.resp.read(n)
        except http.client.IncompleteRead as e:
            return e.partial
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise TransportError("%s: the stream broke: %s" % (self.what, e or type(e).__name__)) from e


class ExecStream(_Stream):
    """The records of a streamed exec (docs/api.md: 1 byte kind, 4 bytes
    big-endian length, the bytes). Iterating yields ExecOutput; .exit is
    the ExecExit once the last record came. A channel that broke (kind 5)
    or a stream cut short raises StreamError."""

    exit: Optional[ExecExit] = None

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            b = self._read(n - len(out))
            if not b:
                break
            out += b
        return out

    def __iter__(self) -> Iterator[ExecOutput]:
        try:
            while self.exit is None:
                head = self._exactly(5)
                if len(head) < 5:
                    raise StreamError("%s: the stream ended before the exit record" % self.what)
                kind, n = struct.unpack(">BI", head)
                data = self._exactly(n)
                if len(data) < n:
                    raise StreamError("%s: a record cut short (%d of %d bytes)" % (self.what, len(data), n))
                if kind == 1:
                    yield ExecOutput("stdout", data)
                elif kind == 2:
                    yield ExecOutput("stderr", data)
                elif kind == 4:
                    self.exit = ExecExit.from_json(parse_json(data, self.what))
                elif kind == 5:
                    j = parse_json(data, self.what)
                    raise StreamError("%s: %s" % (self.what, j.get("error") if isinstance(j, dict) else j))
                else:
                    raise ProtocolError("%s: a record of unknown kind %d" % (self.what, kind))
        finally:
            if self.exit is not None:
                self.close()

    def wait(self, on_output: Optional[Callable[[ExecOutput], None]] = None) -> ExecExit:
        """Reads to the end (each record to on_output) and answers the exit."""
        for rec in self:
            if on_output:
                on_output(rec)
        self.close()
        assert self.exit is not None       # __iter__ ends only with it or by raising
        return self.exit


class Download(_Stream):
    """A file streamed down; .size is its Content-Length."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, what: str) -> None:
        super().__init__(conn, resp, what)
        cl = resp.getheader("Content-Length")
        self.size: Optional[int] = int(cl) if cl and cl.isdigit() else None

    def chunks(self, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        got = 0
        try:
            while True:
                b = self._read(chunk_size)
                if not b:
                    break
                got += len(b)
                yield b
        finally:
            self.close()
        if self.size is not None and got != self.size:
            raise StreamError("%s: got %d of %d bytes (the stream broke)" % (self.what, got, self.size))


def _log_entry(event: str, data: Any, id_: Optional[str]) -> LogEntry:
    e = LogEntry.from_json(data)
    if not e.kind:
        e.kind = event
    if e.kind == "turn" and e.body is None:
        e.body = data
    return e


class EventStream(_Stream):
    """Server-sent events (text/event-stream) as objects, made from each
    event's JSON data by make(event, data, id). Comments (keep-alives) are
    skipped. It ends when the server closes the stream."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, what: str,
                 make: Callable[[str, Any, Optional[str]], Any]) -> None:
        super().__init__(conn, resp, what)
        self.make = make

    def _line(self) -> Optional[bytes]:
        try:
            line = self.resp.readline(1 << 24)
        except socket.timeout:
            self.close()
            raise Timeout("%s: nothing within the stream's timeout" % self.what) from None
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise TransportError("%s: the stream broke: %s" % (self.what, e or type(e).__name__)) from e
        if not line:
            return None
        if not line.endswith(b"\n"):
            raise ProtocolError("%s: a line over 16 MiB or cut short" % self.what)
        return line.rstrip(b"\r\n")

    def __iter__(self) -> Iterator[Any]:
        event, data, id_ = "message", [], None  # type: str, List[bytes], Optional[str]
        try:
            while True:
                line = self._line()
                if line is None:
                    return
                if line == b"":
                    if data:
                        yield self.make(event, parse_json(b"\n".join(data), self.what), id_)
                    event, data, id_ = "message", [], None
                    continue
                if line.startswith(b":"):
                    continue
                field, _, value = line.partition(b":")
                value = value[1:] if value.startswith(b" ") else value
                if field == b"data":
                    data.append(value)
                elif field == b"event":
                    event = value.decode("utf-8", "replace")
                elif field == b"id":
                    id_ = value.decode("utf-8", "replace")
        finally:
            self.close()


class Terminal:
    """A shell in the sandbox over the terminal WebSocket: send() what is
    typed (bytes or str), resize(), recv() output as bytes (None once
    the server closed: .close_code and .close_reason say why),
    read_until() to wait for some output."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.output = b""

    @property
    def close_code(self) -> Optional[int]:
        return self.ws.close_code

    @property
    def close_reason(self) -> Optional[str]:
        return self.ws.close_reason

    def send(self, keys: Union[bytes, str]) -> None:
        self.ws.send(keys.encode("utf-8") if isinstance(keys, str) else keys)

    def resize(self, cols: int, rows: int) -> None:
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (cols, rows)):
            raise ClientError("resize: cols and rows must be ints")
        self.ws.send(json.dumps({"cols": cols, "rows": rows}))

    def recv(self, timeout: Optional[float] = None) -> Optional[bytes]:
        """The next output (b"" for a text message, which the server does
        not send), None once closed; Timeout after timeout s."""
        while True:
            m = self.ws.recv(timeout)
            if m is None:
                return None
            if isinstance(m, bytes):
                self.output += m
                return m

    def read_until(self, want: Union[bytes, str], timeout: float = 30.0) -> bytes:
        """Reads until want is in the output received since the call began;
        answers that output. Timeout after timeout s, Error when the
        terminal closes first."""
        w = want.encode("utf-8") if isinstance(want, str) else want
        mark = len(self.output)
        end = time.monotonic() + timeout
        while w not in self.output[mark:]:
            left = end - time.monotonic()
            if left <= 0:
                raise Timeout("never saw %r; got %r" % (w, self.output[mark:][-300:]))
            try:
                if self.recv(left) is None:
                    raise Error("the terminal closed (%s %s) before %r came" % (self.close_code, self.close_reason, w))
            except Timeout:
                continue
        return self.output[mark:]

    def close(self) -> None:
        self.ws.close()

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
