"""A real TCP proxy in front of an HTTP server that can lose one chosen response.

:class:`LossyProxy` listens on a free loopback port and forwards every HTTP/1.1 request of each
client connection to the server over a connection of its own, one request at a time, passing
each response back. A test arms it with :meth:`LossyProxy.lose_response_of`: the next request
that matches (method, a substring of the path, the headers it must carry) is forwarded and the
server's whole response is read, so the request *did* take effect, and then the client
connection is dropped without that response: reset (``RST``, ``how="reset"``) or closed cleanly
(``FIN``, ``how="close"``). The client sees what a lost answer looks like on the wire, whatever
library it is: no mocks, no hooks into the client.

HTTP is parsed only as far as finding where each message ends: a request or response body is
``Content-Length`` bytes or ``Transfer-Encoding: chunked`` (chunks and trailers are passed on
as they are); responses to ``HEAD`` and 1xx/204/304 responses have none; a response with
neither header ends when the server closes. ``Expect: 100-continue`` is answered by the proxy
itself (``100 Continue``) and not forwarded, so the server never sends interim responses.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from dataclasses import dataclass, field
from urllib.parse import urlsplit

_HEAD_LIMIT = 64 * 1024
_READ = 64 * 1024


class _Closed(Exception):
    """The peer closed the connection between or inside messages."""


@dataclass
class _Message:
    """One HTTP message as it was read: its head (start line and headers) and body bytes."""

    head: bytes
    body: bytes

    @property
    def start_line(self) -> str:
        return self.head.split(b"\r\n", 1)[0].decode("latin-1")

    def header(self, name: str) -> str | None:
        wanted = name.lower().encode("latin-1")
        for line in self.head.split(b"\r\n")[1:]:
            key, sep, value = line.partition(b":")
            if sep and key.strip().lower() == wanted:
                return value.strip().decode("latin-1")
        return None

    def raw(self) -> bytes:
        return self.head + self.body


@dataclass
class LossRule:
    """Which request's response to lose, and how; ``lost`` is set once it has been lost."""

    method: str
    path_contains: str
    headers: dict[str, str]
    how: str
    skip: int = 0
    """How many matching requests pass untouched before the one whose response is lost."""
    lost: threading.Event = field(default_factory=threading.Event)
    status: int | None = None
    """The status of the response the server sent and the client never saw."""
    request_line: str | None = None

    def matches(self, request: _Message) -> bool:
        method, _, rest = request.start_line.partition(" ")
        path = rest.rsplit(" ", 1)[0]
        if method != self.method or self.path_contains not in path:
            return False
        return all(request.header(k) == v for k, v in self.headers.items())


class _Reader:
    """Buffered reads of whole HTTP messages from one socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def _fill(self) -> None:
        chunk = self._sock.recv(_READ)
        if not chunk:
            raise _Closed
        self._buffer += chunk

    def _take(self, n: int) -> bytes:
        while len(self._buffer) < n:
            self._fill()
        taken, self._buffer = self._buffer[:n], self._buffer[n:]
        return taken

    def _through(self, end: bytes, what: str) -> bytes:
        """The bytes up to and including the first ``end``."""
        while end not in self._buffer:
            if len(self._buffer) > _HEAD_LIMIT:
                raise ValueError(f"HTTP {what} too long")
            self._fill()
        taken, self._buffer = self._buffer.split(end, 1)
        return taken + end

    def _line(self) -> bytes:
        return self._through(b"\r\n", "line")

    def head(self) -> bytes:
        return self._through(b"\r\n\r\n", "head")

    def body(self, message: _Message, *, until_close: bool = False) -> bytes:
        encoding = (message.header("Transfer-Encoding") or "").lower()
        if "chunked" in encoding:
            return self._chunked()
        length = message.header("Content-Length")
        if length is not None:
            return self._take(int(length))
        if not until_close:
            return b""
        while True:
            try:
                self._fill()
            except _Closed:
                rest, self._buffer = self._buffer, b""
                return rest

    def _chunked(self) -> bytes:
        out = b""
        while True:
            size_line = self._line()
            out += size_line
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while True:  # trailers, up to the empty line
                    line = self._line()
                    out += line
                    if line == b"\r\n":
                        return out
            out += self._take(size + 2)


class LossyProxy:
    """Forwards HTTP/1.1 between clients and ``upstream`` (``http://host:port``); loses the
    responses of the requests its rules pick. Use as a context manager or call :meth:`close`."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"upstream must be http://host:port, not {upstream!r}")
        self._upstream = (parts.hostname, parts.port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._rules: list[LossRule] = []
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._lose_all: str | None = None
        self.requests: list[str] = []
        """Every request line forwarded, in order (with ``Transfer-Encoding`` when chunked)."""
        self._acceptor = threading.Thread(target=self._accept, name="lossy-proxy", daemon=True)
        self._acceptor.start()

    def __enter__(self) -> LossyProxy:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def lose_response_of(
        self,
        method: str,
        path_contains: str,
        *,
        headers: dict[str, str] | None = None,
        how: str = "reset",
        skip: int = 0,
    ) -> LossRule:
        """Lose the response of the next request (after ``skip`` matching ones) with this
        method whose path contains ``path_contains`` and that carries ``headers``; the client
        connection is reset (``"reset"``) or closed (``"close"``) instead."""
        if how not in ("reset", "close"):
            raise ValueError(f"how must be 'reset' or 'close', not {how!r}")
        rule = LossRule(method, path_contains, dict(headers or {}), how, skip)
        with self._lock:
            self._rules.append(rule)
        return rule

    def lose_all(self, *, how: str = "reset") -> None:
        """Lose the response of every request from now on until :meth:`heal`: each is forwarded
        and takes effect, and its client connection is reset or closed instead of answered."""
        if how not in ("reset", "close"):
            raise ValueError(f"how must be 'reset' or 'close', not {how!r}")
        with self._lock:
            self._lose_all = how

    def heal(self) -> None:
        """Pass every response on again (after :meth:`lose_all`)."""
        with self._lock:
            self._lose_all = None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets = list(self._sockets)
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self._listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked reading it
        for thread in [self._acceptor, *self._threads]:
            thread.join(timeout=10)

    # -- internals ---------------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed:
                    client.close()
                    return
                self._sockets.add(client)
                thread = threading.Thread(
                    target=self._serve, args=(client,), name="lossy-proxy-conn", daemon=True
                )
                self._threads.append(thread)
            thread.start()

    def _pick(self, request: _Message) -> LossRule | None:
        with self._lock:
            if self._lose_all is not None:
                return LossRule("", "", {}, self._lose_all)
            for rule in self._rules:
                if rule.matches(request):
                    if rule.skip:
                        rule.skip -= 1
                        return None
                    self._rules.remove(rule)
                    return rule
        return None

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            upstream = socket.create_connection(self._upstream)
            with self._lock:
                self._sockets.add(upstream)
            from_client, from_server = _Reader(client), _Reader(upstream)
            while True:
                request = _Message(from_client.head(), b"")
                if (request.header("Expect") or "").lower() == "100-continue":
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    request.head = _without_header(request.head, "Expect")
                request.body = from_client.body(request)
                encoding = request.header("Transfer-Encoding")
                with self._lock:
                    self.requests.append(
                        request.start_line + (f" [{encoding}]" if encoding else "")
                    )
                rule = self._pick(request)
                upstream.sendall(request.raw())
                response = self._response(from_server, request)
                if rule is not None:
                    rule.status = int(response.start_line.split(" ", 2)[1])
                    rule.request_line = request.start_line
                    rule.lost.set()  # before the drop, which the client may see at once
                    if rule.how == "reset":
                        _abort(client)
                    else:
                        client.shutdown(socket.SHUT_RDWR)
                        client.close()
                    return
                client.sendall(response.raw())
                if (response.header("Connection") or "").lower() == "close":
                    return
        except (_Closed, OSError, ValueError):
            return
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    sock.close()
                    with self._lock:
                        self._sockets.discard(sock)

    def _response(self, reader: _Reader, request: _Message) -> _Message:
        while True:
            response = _Message(reader.head(), b"")
            status = int(response.start_line.split(" ", 2)[1])
            if 100 <= status < 200:
                continue  # interim; the proxy answered Expect itself
            if request.start_line.startswith("HEAD ") or status in (204, 304):
                return response
            response.body = reader.body(response, until_close=True)
            return response


def _without_header(head: bytes, name: str) -> bytes:
    wanted = name.lower().encode("latin-1")
    lines = head[:-4].split(b"\r\n")
    kept = [lines[0]] + [
        line for line in lines[1:] if line.partition(b":")[0].strip().lower() != wanted
    ]
    return b"\r\n".join(kept) + b"\r\n\r\n"


def _abort(sock: socket.socket) -> None:
    """Close ``sock`` with a reset (RST) rather than a clean FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
