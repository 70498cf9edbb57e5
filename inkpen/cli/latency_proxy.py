"""A TCP relay that puts a network's latency between a client and a server: the instrument of
``inkpen bench --latency-ms`` and of the test suite's latency tier.

It serves nothing itself: every connection accepted on its loopback port gets a connection of
its own to the upstream server, and each byte read from one side is written to the other side
one way's time later. What it models, per connection and per direction:

- **delay**: a chunk read at ``t`` is written at ``t + one_way + U(0, jitter)``; the set one-way
  time is a floor, jitter only adds to it;
- **order**: a chunk is never written before the chunk read before it (its due time is at least
  its predecessor's), so a stream's bytes keep their order;
- **bandwidth** (optional): a chunk leaves at ``bytes_per_s`` after the one before it, as on a
  link of that rate, and then travels one way;
- **the TCP handshake**: a new connection's first bytes reach the server no sooner than
  ``connect_round_trips`` round trips plus one way after the connect (the client's connect
  returns at once, as it does on loopback, so the round trip it would have waited for is added
  to its first bytes instead);
- **a window**: at most ``window`` bytes wait in one direction; beyond it the relay stops
  reading that side until half has gone (memory stays bounded whatever the rate);
- **ends**: an end of stream (FIN) or reset travels one way behind the last bytes.

Connections never wait for one another: each direction of each connection has its own timeline,
so many requests in flight on many connections take one delay together, not one each.

It also counts the HTTP/1.1 requests clients send, by parsing the client's bytes just far
enough to find where each request ends (``Content-Length``, chunked bodies and trailers) and
what it is (the method, the query, two headers): ``puts``, ``gets`` (``ranged_gets`` of them
had a ``Range``), ``heads``, ``lists``, ``deletes``, ``delete_batches`` (S3's
``DeleteObjects``; ``batch_deleted_keys`` counts the keys they named), ``copies``,
``multipart`` and ``other``; ``requests`` is their sum. A connection whose bytes are not HTTP
is relayed all the same and counted in ``unparsed``.

:class:`LatencyProxy` runs the relay on an event loop in a thread of the calling process;
:class:`ProxyProcess` runs it in a child process (``python -m inkpen.cli.latency_proxy``), so
that its timing does not share an interpreter lock with the process it measures: that is what
the benchmarks and the test suite's fixture use. One asyncio loop relays every connection
(hundreds at once); a thread per direction would put 4 threads per connection under one lock.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Literal
from urllib.parse import urlsplit

DEFAULT_ONE_WAY = 0.0125
"""12.5 ms each way: a 25 ms round trip, the first-byte latency of a nearby S3 region."""
DEFAULT_JITTER_SHARE = 0.1
"""The jitter, as a share of the one-way time, when none is given: up to 1.25 ms by default."""
DEFAULT_WINDOW = 4 * 1024 * 1024
HEAD_LIMIT = 64 * 1024
"""A request head (or chunk-size line) longer than this is not HTTP: counting stops there."""
BATCH_BODY_LIMIT = 8 * 1024 * 1024
COUNTERS = (
    "connections",
    "requests",
    "puts",
    "gets",
    "ranged_gets",
    "heads",
    "lists",
    "deletes",
    "delete_batches",
    "batch_deleted_keys",
    "copies",
    "multipart",
    "other",
    "unparsed",
    "bytes_up",
    "bytes_down",
)
"""What :meth:`LatencyProxy.counts` answers (``bytes_up``: client to server)."""
_REQUEST_KINDS = frozenset(
    ("puts", "gets", "heads", "lists", "deletes", "delete_batches", "copies", "multipart", "other")
)
_LIST_PARAMS = frozenset(
    ("list-type", "prefix", "delimiter", "continuation-token", "marker", "max-keys", "uploads")
)
_Ending = Literal["eof", "close", "abort"]


@dataclass(frozen=True, slots=True)
class Link:
    """The network the relay models between each client and the server (section docstring)."""

    one_way: float = DEFAULT_ONE_WAY
    """Seconds each byte takes from one side to the other, at least."""
    jitter: float = DEFAULT_ONE_WAY * DEFAULT_JITTER_SHARE
    """Up to this many seconds more, drawn uniformly for each chunk."""
    bytes_per_s: float | None = None
    """Each direction of each connection carries at most this many bytes a second."""
    connect_round_trips: int = 1
    """Round trips a new connection costs before its first bytes go (1: TCP's handshake)."""
    window: int = DEFAULT_WINDOW
    seed: int | None = None
    """Seeds the jitter (None: fresh)."""

    def __post_init__(self) -> None:
        if not (self.one_way >= 0 and self.jitter >= 0):
            raise ValueError("one_way and jitter must be seconds >= 0")
        if self.bytes_per_s is not None and not self.bytes_per_s > 0:
            raise ValueError("bytes_per_s must be positive (None: no cap)")
        if self.connect_round_trips < 0 or self.window < 1:
            raise ValueError("connect_round_trips must be >= 0 and window >= 1")

    @classmethod
    def round_trip(
        cls, seconds: float, *, bytes_per_s: float | None = None, seed: int | None = None
    ) -> Link:
        """A link of ``seconds`` per round trip (half each way) and the default jitter share."""
        half = seconds / 2
        return cls(
            one_way=half, jitter=half * DEFAULT_JITTER_SHARE, bytes_per_s=bytes_per_s, seed=seed
        )

    @property
    def round_trip_s(self) -> float:
        return 2 * self.one_way


class Tally:
    """The relay's counts (:data:`COUNTERS`), updated on the loop and read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(COUNTERS, 0)

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._values[name] += amount
            if name in _REQUEST_KINDS:
                self._values["requests"] += amount

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)


class RequestCounter:
    """Finds the HTTP/1.1 requests in a client's byte stream, fed in pieces, and counts each
    by kind into a :class:`Tally`. Nothing is kept but the current line and a DeleteObjects
    body (up to :data:`BATCH_BODY_LIMIT`); a stream that is not HTTP stops the counting."""

    def __init__(self, tally: Tally) -> None:
        self._tally = tally
        self._state: Literal["head", "body", "chunk_size", "chunk_data", "trailer"] = "head"
        self._line = bytearray()
        self._head: list[bytes] = []
        self._remaining = 0
        self._batch: bytearray | None = None
        self.broken = False

    def feed(self, data: bytes) -> None:
        if self.broken:
            return
        try:
            self._feed(data)
        except ValueError:
            self.broken = True
            self._tally.add("unparsed")

    def _feed(self, data: bytes) -> None:
        pos, end = 0, len(data)
        while pos < end:
            if self._state in ("body", "chunk_data"):
                take = min(self._remaining, end - pos)
                if self._batch is not None and len(self._batch) < BATCH_BODY_LIMIT:
                    self._batch += data[pos : pos + take]
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    if self._state == "body":
                        self._request_done()
                    else:
                        self._state = "chunk_size"
                continue
            newline = data.find(b"\n", pos)
            if newline < 0:
                self._line += data[pos:]
                if len(self._line) > HEAD_LIMIT:
                    raise ValueError("line too long")
                return
            self._line += data[pos : newline + 1]
            pos = newline + 1
            line = bytes(self._line).rstrip(b"\r\n")
            self._line.clear()
            self._on_line(line)

    def _on_line(self, line: bytes) -> None:
        if self._state == "head":
            if line:
                self._head.append(line)
                if sum(len(part) for part in self._head) > HEAD_LIMIT:
                    raise ValueError("head too long")
            elif self._head:  # the empty line after the headers
                self._on_head(self._head)
                self._head = []
            return  # blank lines before a request line are allowed
        if self._state == "chunk_size":
            if not line and self._remaining == 0:
                return  # the CRLF after a chunk's data
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                self._state = "trailer"
            else:
                self._state, self._remaining = "chunk_data", size
            return
        if not line:  # "trailer": the empty line ends the message
            self._request_done()

    def _on_head(self, head: list[bytes]) -> None:
        parts = head[0].split(b" ")
        if len(parts) != 3 or not parts[0].isalpha() or not parts[2].startswith(b"HTTP/"):
            raise ValueError("not an HTTP request line")
        headers: dict[bytes, bytes] = {}
        for line in head[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise ValueError("not an HTTP header")
            headers[name.strip().lower()] = value.strip()
        method = parts[0].decode("ascii")
        target = parts[1].decode("latin-1")
        kind = _kind(method, target, headers)
        self._tally.add(kind)
        if kind == "gets" and b"range" in headers:
            self._tally.add("ranged_gets")
        self._batch = bytearray() if kind == "delete_batches" else None
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            self._state, self._remaining = "chunk_size", 0
            return
        length = int(headers.get(b"content-length", b"0"))
        if length < 0:
            raise ValueError("negative Content-Length")
        if length:
            self._state, self._remaining = "body", length
        else:
            self._request_done()

    def _request_done(self) -> None:
        if self._batch is not None:
            self._tally.add("batch_deleted_keys", self._batch.count(b"<Key>"))
            self._batch = None
        self._state, self._remaining = "head", 0


def _kind(method: str, target: str, headers: dict[bytes, bytes]) -> str:
    """Which counter an S3 request of ``method`` on ``target`` (path and query) goes to."""
    path, _, query = target.partition("?")
    params = {part.split("=", 1)[0] for part in query.split("&") if part}
    if method == "PUT":
        if b"x-amz-copy-source" in headers:
            return "copies"
        return "multipart" if "partNumber" in params else "puts"
    if method == "GET":
        segments = [s for s in path.split("/") if s]
        return "lists" if params & _LIST_PARAMS or len(segments) <= 1 else "gets"
    if method == "HEAD":
        return "heads"
    if method == "DELETE":
        return "multipart" if "uploadId" in params else "deletes"
    if method == "POST":
        if "delete" in params:
            return "delete_batches"
        if "uploads" in params or "uploadId" in params:
            return "multipart"
    return "other"


class _Direction:
    """One direction of one relayed connection: what ``source`` sent, written to ``sink`` on
    time."""

    def __init__(self, relay: _Relay, floor: float) -> None:
        self._relay = relay
        self._link = relay.link
        self._loop = relay.loop
        self._queue: deque[tuple[float, bytes]] = deque()
        self._queued = 0
        self._last_due = floor
        self._link_free = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._ending: _Ending | None = None
        self._end_due = 0.0
        self._paused = False
        self.sink_blocked = False
        self.ended = False
        self.source: asyncio.Transport | None = None
        self.sink: asyncio.Transport | None = None
        self.on_ended: Callable[[], None] = lambda: None

    def push(self, data: bytes) -> None:
        now = self._loop.time()
        link = self._link
        left = now
        if link.bytes_per_s is not None:
            left = max(now, self._link_free) + len(data) / link.bytes_per_s
            self._link_free = left
        due = left + link.one_way
        if link.jitter:
            due += self._relay.rng.random() * link.jitter
        due = max(due, self._last_due)
        self._last_due = due
        self._queue.append((due, data))
        self._queued += len(data)
        if self._queued >= link.window:
            self._pause()
        self._arm()

    def end(self, how: _Ending) -> None:
        """The source sent its end (``eof``), closed or was reset: pass that on, one way behind
        its last bytes."""
        if self._ending is not None:
            return
        self._ending = how
        self._end_due = max(self._loop.time() + self._link.one_way, self._last_due)
        self._arm()

    def drop(self) -> None:
        """The sink is gone: nothing more can be delivered."""
        self._queue.clear()
        self._queued = 0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.ended = True

    def connected(self, sink: asyncio.Transport) -> None:
        self.sink = sink
        self._arm()

    def sink_paused(self, paused: bool) -> None:
        self.sink_blocked = paused
        if paused:
            self._pause()
        else:
            self._maybe_resume()

    def _pause(self) -> None:
        if not self._paused and self.source is not None and not self.source.is_closing():
            self._paused = True
            self.source.pause_reading()

    def _maybe_resume(self) -> None:
        if (
            self._paused
            and not self.sink_blocked
            and self._queued <= self._link.window // 2
            and self.source is not None
            and not self.source.is_closing()
        ):
            self._paused = False
            self.source.resume_reading()

    def _arm(self) -> None:
        if self._timer is not None or self.sink is None or self.ended:
            return
        if self._queue:
            self._timer = self._loop.call_at(self._queue[0][0], self._flush)
        elif self._ending is not None:
            self._timer = self._loop.call_at(self._end_due, self._flush)

    def _flush(self) -> None:
        self._timer = None
        sink = self.sink
        if sink is None or self.ended:
            return
        now = self._loop.time()
        queue = self._queue
        due: list[bytes] = []
        while queue and queue[0][0] <= now:
            _, data = queue.popleft()
            self._queued -= len(data)
            due.append(data)
        if due and not sink.is_closing():
            sink.writelines(due)
        if not queue and self._ending is not None and self._end_due <= now:
            self._finish(sink, self._ending)
            return
        self._maybe_resume()
        self._arm()

    def _finish(self, sink: asyncio.Transport, how: _Ending) -> None:
        self.ended = True
        if not sink.is_closing():
            try:
                if how == "abort":
                    sink.abort()
                elif how == "close":
                    sink.close()
                elif sink.can_write_eof():
                    sink.write_eof()
            except OSError:  # the sink's peer is gone already
                sink.abort()
        self.on_ended()


class _Connection:
    """One client connection and its own connection to the server."""

    def __init__(self, relay: _Relay, client: asyncio.Transport) -> None:
        self.relay = relay
        link = relay.link
        now = relay.loop.time()
        self.client = client
        self.server: asyncio.Transport | None = None
        handshake = link.connect_round_trips * 2 * link.one_way
        self.up = _Direction(relay, now + handshake + link.one_way)
        self.down = _Direction(relay, now)
        self.up.source = client
        self.down.sink = client
        self.up.on_ended = self.down.on_ended = self._maybe_close
        self.counter = RequestCounter(relay.tally)

    def _maybe_close(self) -> None:
        if self.up.ended and self.down.ended:
            for transport in (self.client, self.server):
                if transport is not None and not transport.is_closing():
                    transport.close()

    async def connect(self) -> None:
        host, port = self.relay.upstream
        try:
            transport, _ = await self.relay.loop.create_connection(
                lambda: _ServerSide(self), host, port
            )
        except OSError:
            self.client.abort()
            return
        assert isinstance(transport, asyncio.Transport)
        self.server = transport
        self.down.source = transport
        self.up.connected(transport)


class _ClientSide(asyncio.Protocol):
    def __init__(self, relay: _Relay) -> None:
        self._relay = relay
        self._conn: _Connection | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        relay = self._relay
        relay.tally.add("connections")
        self._conn = conn = _Connection(relay, transport)
        relay.connections.add(conn)
        task = relay.loop.create_task(conn.connect())
        relay.tasks.add(task)
        task.add_done_callback(relay.tasks.discard)

    def data_received(self, data: bytes) -> None:
        conn = self._conn
        assert conn is not None
        conn.relay.tally.add("bytes_up", len(data))
        conn.counter.feed(data)
        conn.up.push(data)

    def eof_received(self) -> bool:
        assert self._conn is not None
        self._conn.up.end("eof")
        return True  # keep the client's side open for the answer still on its way

    def connection_lost(self, exc: Exception | None) -> None:
        conn = self._conn
        assert conn is not None
        conn.down.drop()
        conn.up.end("abort" if exc is not None else "close")
        conn.relay.connections.discard(conn)

    def pause_writing(self) -> None:
        assert self._conn is not None
        self._conn.down.sink_paused(True)

    def resume_writing(self) -> None:
        assert self._conn is not None
        self._conn.down.sink_paused(False)


class _ServerSide(asyncio.Protocol):
    def __init__(self, conn: _Connection) -> None:
        self._conn = conn

    def data_received(self, data: bytes) -> None:
        self._conn.relay.tally.add("bytes_down", len(data))
        self._conn.down.push(data)

    def eof_received(self) -> bool:
        self._conn.down.end("eof")
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._conn.up.drop()
        self._conn.down.end("abort" if exc is not None else "close")

    def pause_writing(self) -> None:
        self._conn.up.sink_paused(True)

    def resume_writing(self) -> None:
        self._conn.up.sink_paused(False)


class _Relay:
    """The relay's state on its event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, upstream: tuple[str, int], link: Link):
        self.loop = loop
        self.upstream = upstream
        self.link = link
        self.rng = random.Random(link.seed)
        self.tally = Tally()
        self.connections: set[_Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.server: asyncio.AbstractServer | None = None

    async def start(self, host: str, port: int) -> int:
        self.server = await self.loop.create_server(
            lambda: _ClientSide(self), host, port, backlog=1024, reuse_address=True
        )
        sockets = self.server.sockets
        return int(sockets[0].getsockname()[1])

    def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for conn in list(self.connections):
            for transport in (conn.client, conn.server):
                if transport is not None:
                    transport.abort()
        for task in list(self.tasks):
            task.cancel()


def parse_upstream(url: str) -> tuple[str, int]:
    """``http://host:port`` as (host, port)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise ValueError(f"the upstream must be http://host:port, not {url!r}")
    return parts.hostname, parts.port


class LatencyProxy:
    """The relay on an event loop in a thread of this process, listening on a free loopback
    port: ``endpoint`` is its ``http://127.0.0.1:PORT``. Use as a context manager or call
    :meth:`close`."""

    def __init__(self, upstream: str, link: Link | None = None) -> None:
        self.link = link or Link()
        self._loop = asyncio.new_event_loop()
        self._relay = _Relay(self._loop, parse_upstream(upstream), self.link)
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="latency-proxy", daemon=True
        )
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(self._relay.start("127.0.0.1", 0), self._loop)
        self.port = started.result(timeout=30)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._closed = False

    def counts(self) -> dict[str, int]:
        """Connections, requests by kind and bytes relayed so far (:data:`COUNTERS`)."""
        return self._relay.tally.snapshot()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.call_soon_threadsafe(self._relay.stop)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    def __enter__(self) -> LatencyProxy:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class ProxyProcess:
    """The relay in a child process of its own (``python -m inkpen.cli.latency_proxy``), so
    that neither it nor the process it measures waits for the other's interpreter lock.

    The child prints its endpoint as one JSON line, then answers each ``counts`` line on its
    standard input with a JSON line of :data:`COUNTERS`; it ends when its input closes."""

    def __init__(self, upstream: str, link: Link | None = None) -> None:
        self.link = link = link or Link()
        parse_upstream(upstream)
        command = [
            sys.executable,
            "-c",
            "import sys; from inkpen.cli.latency_proxy import main; sys.exit(main())",
            "--upstream",
            upstream,
            "--one-way-ms",
            repr(link.one_way * 1e3),
            "--jitter-ms",
            repr(link.jitter * 1e3),
            "--connect-round-trips",
            str(link.connect_round_trips),
            "--window",
            str(link.window),
        ]
        if link.bytes_per_s is not None:
            command += ["--bytes-per-s", repr(link.bytes_per_s)]
        if link.seed is not None:
            command += ["--seed", str(link.seed)]
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self._lock = threading.Lock()
        first = self._read_line()
        self.endpoint = str(json.loads(first)["endpoint"])
        self.port = int(self.endpoint.rsplit(":", 1)[1])

    def _read_line(self) -> str:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            status = self._process.wait()
            raise RuntimeError(f"the latency proxy process ended with status {status}")
        return line

    def counts(self) -> dict[str, int]:
        """The child's counts so far (:data:`COUNTERS`)."""
        stdin = self._process.stdin
        assert stdin is not None
        with self._lock:
            stdin.write("counts\n")
            stdin.flush()
            answer: dict[str, int] = json.loads(self._read_line())
        return answer

    def close(self) -> None:
        if self._process.poll() is None:
            with contextlib.suppress(OSError):
                assert self._process.stdin is not None
                self._process.stdin.close()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def counts_delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """What was counted between two :meth:`LatencyProxy.counts` snapshots."""
    return {name: after[name] - before.get(name, 0) for name in after}


async def _serve(args: argparse.Namespace, out: IO[str], commands: IO[str]) -> None:
    loop = asyncio.get_running_loop()
    link = Link(
        one_way=args.one_way_ms / 1e3,
        jitter=args.jitter_ms / 1e3,
        bytes_per_s=args.bytes_per_s,
        connect_round_trips=args.connect_round_trips,
        window=args.window,
        seed=args.seed,
    )
    relay = _Relay(loop, parse_upstream(args.upstream), link)
    port = await relay.start("127.0.0.1", args.port)
    out.write(json.dumps({"endpoint": f"http://127.0.0.1:{port}"}) + "\n")
    out.flush()
    while True:
        line = await loop.run_in_executor(None, commands.readline)
        if not line:
            break
        if line.strip() == "counts":
            out.write(json.dumps(relay.tally.snapshot()) + "\n")
            out.flush()
    relay.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inkpen.cli.latency_proxy",
        description="Relay TCP connections to an upstream server, delaying each direction. "
        "Prints its endpoint as a JSON line; answers 'counts' on stdin; ends when stdin closes.",
    )
    parser.add_argument("--upstream", required=True, help="http://host:port of the server")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: a free one)")
    parser.add_argument("--one-way-ms", type=float, default=DEFAULT_ONE_WAY * 1e3)
    parser.add_argument("--jitter-ms", type=float, default=None)
    parser.add_argument("--bytes-per-s", type=float, default=None)
    parser.add_argument("--connect-round-trips", type=int, default=1)
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    if args.jitter_ms is None:
        args.jitter_ms = args.one_way_ms * DEFAULT_JITTER_SHARE
    try:
        asyncio.run(_serve(args, sys.stdout, sys.stdin))
    except ValueError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
