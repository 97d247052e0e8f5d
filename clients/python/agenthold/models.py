"""agenthold/models.py: the server's objects as dataclasses. Each is made
from the server's JSON by from_json(), which takes the fields it knows
(absent ones are None) and keeps the whole object in .raw, so a field the
server adds later is still reachable (obj.raw["new_field"]). docs/api.md
says what each field means."""
import dataclasses
import json
from typing import Any, Dict, List, Optional, Type, TypeVar

from .errors import ProtocolError

T = TypeVar("T", bound="Model")


@dataclasses.dataclass
class Model:
    raw: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls: Type[T], d: Any) -> T:
        if not isinstance(d, dict):
            raise ProtocolError("%s: the server answered %s, not a JSON object" % (cls.__name__, type(d).__name__))
        names = {f.name for f in dataclasses.fields(cls)} - {"raw"}
        kw: Dict[str, Any] = {k: d.get(k) for k in names}
        obj = cls(**kw)
        obj.raw = d
        return obj


@dataclasses.dataclass
class Agent(Model):
    id: str = ""
    name: str = ""
    state: str = ""
    tenant: Optional[str] = None
    connected: Optional[bool] = None
    error: Optional[str] = None
    runtime: Optional[str] = None
    image: Optional[str] = None
    cpus: Optional[float] = None
    memory_mb: Optional[int] = None
    idle_minutes: Optional[float] = None
    needs_rebuild: Optional[bool] = None
    progress: Optional[str] = None
    created_at: Optional[str] = None
    last_activity_at: Optional[str] = None


@dataclasses.dataclass
class ExecResult(Model):
    """The answer of a command run to its end (POST .../exec)."""
    status: int = 0
    signal: Optional[int] = None
    timed_out: bool = False
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False


@dataclasses.dataclass
class ExecExit(Model):
    """The exit record of a streamed exec."""
    status: int = 0
    signal: Optional[int] = None
    timed_out: bool = False


@dataclasses.dataclass(frozen=True)
class ExecOutput:
    """One record of a streamed exec's output: stream is "stdout" or "stderr"."""
    stream: str
    data: bytes


@dataclasses.dataclass
class FileEntry(Model):
    name: str = ""
    type: str = ""
    size: Optional[int] = None
    mode: Optional[int] = None
    mtime: Optional[Any] = None
    path: Optional[str] = None
    depth: Optional[int] = None
    uploaded: Optional[bool] = None


@dataclasses.dataclass
class TextFile(Model):
    """GET fs/text: a file's content inside JSON, cut at files.max_read_bytes."""
    path: str = ""
    size: int = 0
    content: str = ""
    content_bytes: int = 0
    truncated: bool = False
    max_read_bytes: Optional[int] = None
    notice: Optional[str] = None


@dataclasses.dataclass
class Tenant(Model):
    name: str = ""
    max_sandboxes: Optional[int] = None
    max_running: Optional[int] = None
    max_cpus: Optional[float] = None
    max_memory_mb: Optional[int] = None
    created_at: Optional[str] = None
    sandboxes: Optional[int] = None
    running: Optional[int] = None
    tokens: Optional[int] = None
    egress_allow: Optional[List[str]] = None
    egress_deny: Optional[List[str]] = None


@dataclasses.dataclass
class Token(Model):
    """A token as listed; .token (the secret) is set only in the answer to
    its creation, the one time the server shows it."""
    name: str = ""
    tenant: Optional[str] = None
    admin: Optional[bool] = None
    user: Optional[str] = None
    created_at: Optional[str] = None
    last_used_at: Optional[str] = None
    expires_at: Optional[str] = None
    revoked_at: Optional[str] = None
    token: Optional[str] = None


@dataclasses.dataclass
class Session(Model):
    id: str = ""
    tenant: Optional[str] = None
    backend: Optional[str] = None
    scope: Optional[str] = None
    host: Optional[str] = None
    subject: Optional[str] = None
    state: Optional[str] = None
    lost_reason: Optional[str] = None
    created_at: Optional[str] = None
    opened_at: Optional[str] = None
    created: Optional[bool] = None
    agent: Optional[Agent] = None

    @classmethod
    def from_json(cls, d: Any) -> "Session":
        s = super().from_json(d)
        if isinstance(d.get("agent"), dict):
            s.agent = Agent.from_json(d["agent"])
        return s


@dataclasses.dataclass
class Conversation(Model):
    id: str = ""
    agent_id: Optional[str] = None
    turn_state: Optional[str] = None
    acp_session_id: Optional[str] = None
    created_at: Optional[str] = None
    last_activity_at: Optional[str] = None


@dataclasses.dataclass
class LogEntry(Model):
    """One entry of a conversation's log (and one event of a prompt's
    stream: event "turn" has no seq, its body is the whole data)."""
    seq: Optional[int] = None
    kind: str = ""
    who: Optional[str] = None
    body: Any = None
    at: Optional[str] = None
    at_ms: Optional[int] = None


@dataclasses.dataclass
class ConversationLog(Model):
    """A conversation with one page of its log; next_after is None on the last page."""
    id: str = ""
    agent_id: Optional[str] = None
    turn_state: Optional[str] = None
    entries: List[LogEntry] = dataclasses.field(default_factory=list)
    next_after: Optional[int] = None

    @classmethod
    def from_json(cls, d: Any) -> "ConversationLog":
        c = super().from_json(d)
        c.entries = [LogEntry.from_json(e) for e in (d.get("entries") or [])]
        return c


@dataclasses.dataclass
class Event(Model):
    """One event of GET /api/v1/events: an agent's state as it changes."""
    agent_id: str = ""
    name: str = ""
    state: str = ""
    op: Optional[str] = None
    error: Optional[str] = None
    at: Optional[str] = None
    message: Optional[str] = None
    connected: Optional[bool] = None


@dataclasses.dataclass
class TerminalInfo(Model):
    """A terminal that lasts (GET .../terminals/{id}; screen with GET of one)."""
    id: str = ""
    cols: Optional[int] = None
    rows: Optional[int] = None
    title: Optional[str] = None
    created_at: Optional[str] = None
    state: Optional[str] = None
    clients: Optional[int] = None
    note: Optional[str] = None
    screen: Optional[str] = None


def parse_json(raw: bytes, what: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as e:
        raise ProtocolError("%s: the server's answer is not JSON (%s): %r" % (what, e, raw[:200])) from None
