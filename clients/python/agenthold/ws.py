"""agenthold/ws.py: a small synchronous WebSocket client (RFC 6455), the
standard library only, for the terminal routes. Client frames are masked;
fragments are reassembled; pings are answered; a message is capped
(max_message, 16 MiB by default) so a hostile server cannot make it grow
without bound. One thread uses one WebSocket."""
import base64
import hashlib
import json
import os
import socket
import ssl
import struct
from typing import Dict, Optional, Tuple, Union

from .errors import ProtocolError, Timeout, TransportError, api_error

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10


class WebSocket:
    """A connected WebSocket. recv() returns the next message (bytes for a
    binary message, str for a text one) or None once the connection is
    closed; then close_code and close_reason say how."""

    def __init__(self, sock: socket.socket, rest: bytes = b"", max_message: int = 16 << 20) -> None:
        self.sock = sock
        self._buf = rest
        self.max_message = max_message
        self.closed = False
        self.close_code: Optional[int] = None
        self.close_reason: Optional[str] = None

    # -- opening ---------------------------------------------------------
    @classmethod
    def connect(cls, host: str, port: int, target: str, headers: Dict[str, str],
                tls: Optional[ssl.SSLContext] = None, timeout: Optional[float] = 60.0) -> "WebSocket":
        """Opens ws(s)://host:port/target with headers. A refusal before
        the upgrade (the server's JSON error) raises the APIError for it."""
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            if tls is not None:
                sock = tls.wrap_socket(sock, server_hostname=host)
        except OSError as e:
            raise TransportError("cannot reach %s:%d: %s" % (host, port, e)) from e
        key = base64.b64encode(os.urandom(16)).decode()
        lines = ["GET %s HTTP/1.1" % target, "Host: %s:%d" % ("[%s]" % host if ":" in host else host, port), "Upgrade: websocket",
                 "Connection: Upgrade", "Sec-WebSocket-Key: " + key, "Sec-WebSocket-Version: 13"]
        lines += ["%s: %s" % kv for kv in headers.items()]
        try:
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            head, rest = cls._read_head(sock)
        except OSError as e:
            sock.close()
            raise TransportError("WebSocket %s: %s" % (target.split("?")[0], e)) from e
        status, fields = cls._parse_head(head)
        if status != 101:
            body = rest
            try:
                want = int(fields.get("content-length", "0"))
                while len(body) < min(want, 1 << 20):
                    b = sock.recv(65536)
                    if not b:
                        break
                    body += b
            except (OSError, ValueError):
                pass
            sock.close()
            try:
                j = json.loads(body)
                msg = j.get("error", str(j)) if isinstance(j, dict) else str(j)
            except ValueError:
                j, msg = None, body[:300].decode("utf-8", "replace")
            raise api_error(status, msg, "GET", target.split("?")[0], j)
        accept = base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()
        if fields.get("sec-websocket-accept") != accept:
            sock.close()
            raise ProtocolError("the server's Sec-WebSocket-Accept is wrong")
        return cls(sock, rest)

    @staticmethod
    def _read_head(sock: socket.socket) -> Tuple[bytes, bytes]:
        buf = b""
        while b"\r\n\r\n" not in buf:
            b = sock.recv(4096)
            if not b:
                raise ProtocolError("the connection closed before the server's answer to the upgrade")
            buf += b
            if len(buf) > 65536:
                raise ProtocolError("the answer to the upgrade has a head over 64 KiB")
        head, rest = buf.split(b"\r\n\r\n", 1)
        return head, rest

    @staticmethod
    def _parse_head(head: bytes) -> Tuple[int, Dict[str, str]]:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise ProtocolError("not an HTTP status line: %r" % lines[0][:100])
        fields = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            fields[k.strip().lower()] = v.strip()
        return int(parts[1]), fields

    # -- frames ----------------------------------------------------------
    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            b = self.sock.recv(max(65536, n - len(self._buf)))
            if not b:
                raise EOFError
            self._buf += b
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def _frame(self) -> Tuple[bool, int, bytes]:
        b0, b1 = self._read(2)
        if b0 & 0x70:
            raise ProtocolError("a frame with reserved bits set")
        if b1 & 0x80:
            raise ProtocolError("a masked frame from the server")
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self._read(8))[0]
        if n > self.max_message:
            raise ProtocolError("a frame of %d bytes, over the %d this client takes" % (n, self.max_message))
        return bool(b0 & 0x80), b0 & 0x0F, self._read(n)

    def _send(self, op: int, payload: bytes) -> None:
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = struct.pack(">BB", 0x80 | op, 0x80 | n)
        elif n < 65536:
            head = struct.pack(">BBH", 0x80 | op, 0x80 | 126, n)
        else:
            head = struct.pack(">BBQ", 0x80 | op, 0x80 | 127, n)
        masked = bytes(b ^ mask[i & 3] for i, b in enumerate(payload)) if n < 4096 else \
            (int.from_bytes(payload, "big") ^ int.from_bytes((mask * (n // 4 + 1))[:n], "big")).to_bytes(n, "big")
        try:
            self.sock.sendall(head + mask + masked)
        except OSError as e:
            raise TransportError("WebSocket send: %s" % e) from e

    # -- the API ---------------------------------------------------------
    def send(self, data: Union[bytes, str]) -> None:
        """A binary message for bytes, a text message for str."""
        if self.closed:
            raise TransportError("the WebSocket is closed (%s %s)" % (self.close_code, self.close_reason))
        if isinstance(data, str):
            self._send(OP_TEXT, data.encode("utf-8"))
        else:
            self._send(OP_BINARY, bytes(data))

    def recv(self, timeout: Optional[float] = None) -> Union[bytes, str, None]:
        """The next message, None once closed. Raises Timeout (a
        TimeoutError) when timeout seconds pass without one."""
        if self.closed:
            return None
        self.sock.settimeout(timeout)
        msg, op = b"", None
        try:
            while True:
                fin, opcode, payload = self._frame()
                if opcode == OP_PING:
                    self._send(OP_PONG, payload)
                    continue
                if opcode == OP_PONG:
                    continue
                if opcode == OP_CLOSE:
                    self.close_code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else 1005
                    self.close_reason = payload[2:].decode("utf-8", "replace")
                    try:
                        self._send(OP_CLOSE, payload[:2])
                    except TransportError:
                        pass
                    self._shut()
                    return None
                if opcode in (OP_TEXT, OP_BINARY):
                    if op is not None:
                        raise ProtocolError("a new message inside a fragmented one")
                    op = opcode
                elif opcode != OP_CONT or op is None:
                    raise ProtocolError("an unknown or stray frame (opcode %d)" % opcode)
                msg += payload
                if len(msg) > self.max_message:
                    raise ProtocolError("a message over %d bytes" % self.max_message)
                if fin:
                    return msg.decode("utf-8", "replace") if op == OP_TEXT else msg
        except EOFError:
            self.close_code, self.close_reason = 1006, "the connection closed without a close frame"
            self._shut()
            return None
        except socket.timeout:
            if msg:
                # a message cut by the timeout cannot be resumed: the stream is lost
                self._shut()
                raise ProtocolError("a fragmented message stopped half way")
            raise Timeout("no WebSocket message within %g s" % (timeout or 0)) from None
        except OSError as e:
            self._shut()
            raise TransportError("WebSocket receive: %s" % e) from e

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Sends a close frame and waits (up to 2 s) for the server's."""
        if self.closed:
            return
        try:
            self._send(OP_CLOSE, struct.pack(">H", code) + reason.encode("utf-8")[:120])
            while not self.closed:
                if self.recv(timeout=2) is None:
                    break
        except (TransportError, ProtocolError, OSError):
            pass
        self._shut()

    def _shut(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "WebSocket":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
