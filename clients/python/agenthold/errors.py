"""agenthold/errors.py: what the client raises. Everything is an
agenthold.Error, so one `except agenthold.Error` catches every failure the
client knows of; ClientError is also a ValueError (the caller's input was
refused before anything was sent) and TransportError an OSError (the
server could not be reached or the connection broke)."""
from typing import Any, Optional


class Error(Exception):
    """Base of every exception this package raises."""


class ClientError(Error, ValueError):
    """An argument refused before any request was sent (a name holding '/',
    a home path with '..', a value of the wrong type)."""


class TransportError(Error, OSError):
    """The server could not be reached, or the connection broke."""


class Timeout(Error, TimeoutError):
    """A wait ran out: wait_state, a terminal's recv or read_until, an
    event stream silent longer than its timeout. Also a TimeoutError."""


class ProtocolError(Error):
    """The server answered something this client cannot read (not JSON
    where JSON was due, a record cut short, a WebSocket frame off the RFC)."""


class StreamError(Error):
    """A stream ended without its last word: an exec's channel broke
    (record kind 5), a download shorter than its Content-Length."""


class APIError(Error):
    """The server answered with an error status. .status is the HTTP status,
    .message the server's sentence ({"error": ...}), .method and .path the
    request, .body the parsed answer (or None)."""

    def __init__(self, status: int, message: str, method: str = "", path: str = "",
                 body: Optional[Any] = None) -> None:
        super().__init__("%s %s: %d %s" % (method, path, status, message))
        self.status = status
        self.message = message
        self.method = method
        self.path = path
        self.body = body


class AuthError(APIError):
    """401: a missing, wrong, revoked or expired token."""


class Forbidden(APIError):
    """403."""


class NotFound(APIError):
    """404: no such agent, tenant, token, session, file..."""


class Conflict(APIError):
    """409: a state that forbids the call, a name taken."""


_BY_STATUS = {401: AuthError, 403: Forbidden, 404: NotFound, 409: Conflict}


def api_error(status: int, message: str, method: str, path: str, body: Optional[Any] = None) -> APIError:
    """The APIError subclass for status."""
    return _BY_STATUS.get(status, APIError)(status, message, method, path, body)
