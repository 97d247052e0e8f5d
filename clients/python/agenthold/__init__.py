"""agenthold: a synchronous Python client for the agenthold server
(docs/api.md). Start with Client:

    import agenthold
    c = agenthold.Client("http://127.0.0.1:8080", token)
    c.create_agent("alice", wait=True)
    print(c.exec("alice", "uname -a").stdout)
"""
from .client import Client, Download, EventStream, ExecStream, Terminal, home_path
from .errors import (APIError, AuthError, ClientError, Conflict, Error, Forbidden, NotFound, ProtocolError,
                     StreamError, Timeout, TransportError)
from .models import (Agent, Conversation, ConversationLog, Event, ExecExit, ExecOutput, ExecResult, FileEntry,
                     LogEntry, Session, Tenant, TerminalInfo, TextFile, Token)
from .ws import WebSocket

__version__ = "0.1.0"
__all__ = ["Client", "Download", "EventStream", "ExecStream", "Terminal", "home_path", "WebSocket",
           "APIError", "AuthError", "ClientError", "Conflict", "Error", "Forbidden", "NotFound", "ProtocolError",
           "StreamError", "Timeout", "TransportError", "Agent", "Conversation", "ConversationLog", "Event", "ExecExit",
           "ExecOutput", "ExecResult", "FileEntry", "LogEntry", "Session", "Tenant", "TerminalInfo", "TextFile",
           "Token"]
