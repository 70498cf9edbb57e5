"""A small HTTP object service embedding one inkpen Bookie, on the standard library's http.server.

    python examples/http_app.py DATABASE [--host 127.0.0.1] [--port 8080] [--backups DIR]

DATABASE is any store URL (a directory, ``s3://bucket/prefix?endpoint=...``); it is created if
empty. Buckets and keys are path segments (percent-encode ``/`` and the like as ``%2F``):

==========================================================  ========================================
``PUT /objects/BUCKET/KEY?index=F:T&unindex=F:T&ttl=SECS``  store the body; 201 once durable
``GET /objects/BUCKET/KEY``                                 the value, or 404
``HEAD /objects/BUCKET/KEY``                                Content-Length, ETag, X-Inkpen-Sqn,
                                                            Last-Modified (from the ledger alone)
``DELETE /objects/BUCKET/KEY?unindex=F:T``                  204 once the tombstone is durable
``GET /objects/BUCKET?start=&end=&limit=``                  the keys, as a JSON list
``GET /index/BUCKET/FIELD?start=&end=``                     ``[[term, key], ...]`` as JSON
``GET /buckets`` / ``GET /stats``                           JSON
``GET /metrics``                                            ``Bookie.metrics()`` in Prometheus' text
                                                            format (needs ``inkpen[prometheus]``)
``POST /backup``                                            a hot backup into ``--backups``/<UTC
                                                            time>, its report as JSON (no body)
``POST /reopen``                                            after being fenced: open the database
                                                            again, fencing the newer writer
==========================================================  ========================================

The server is a ``ThreadingHTTPServer``: every connection gets a thread and all of them share the
one Bookie, which is thread-safe; PUTs arriving together share journal writes (group commit).
Bad input answers 400 with a message saying what to send, a value over the size limit 413, a
store failure 503. When another process opens the database for writing, this server's Bookie is
fenced: writes answer 409 saying so (reads go on), until ``POST /reopen`` opens the database again
(fencing that other writer in turn) or the server is restarted. Ctrl-C or SIGTERM stops serving
and closes the Bookie cleanly. The hot backup is the way to back up a database an application is
writing: it runs inside the process that owns the Bookie, fencing nobody.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import inkpen

try:  # GET /metrics needs the prometheus extra: pip install 'inkpen[prometheus]'
    import prometheus_client

    import inkpen.prometheus
except ImportError:
    prometheus_client = None  # type: ignore[assignment]

log = logging.getLogger("examples.http_app")

Reply = tuple[int, dict[str, str], bytes]


def _json(status: int, value: Any) -> Reply:
    return status, {"Content-Type": "application/json"}, json.dumps(value).encode()


def _text(value: bytes) -> str:
    return value.decode("utf-8", "backslashreplace")


def _specs(query: dict[str, list[str]]) -> list[tuple[str, str, str]]:
    specs = []
    for op, name in (("add", "index"), ("remove", "unindex")):
        for given in query.get(name, []):
            field, sep, term = given.partition(":")
            if not sep:
                raise inkpen.UsageError(f"{name}={given!r} must be FIELD:TERM")
            specs.append((op, field, term))
    return specs


def _one(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None


class BadRequest(Exception):
    """A request this service cannot act on; the message says what to send instead."""


def _number(query: dict[str, list[str]], name: str, what: str) -> float | None:
    given = _one(query, name)
    if given is None:
        return None
    try:
        value = float(given)
    except ValueError:
        raise BadRequest(f"{name}={given!r} must be {what}") from None
    if not math.isfinite(value) or value <= 0:
        raise BadRequest(f"{name}={given!r} must be {what}")
    return value


class ObjectService:
    """The routes, as plain methods from a parsed request to a reply."""

    def __init__(
        self,
        book: inkpen.Bookie,
        backups: Path | None = None,
        reopen: Callable[[], inkpen.Bookie] | None = None,
    ) -> None:
        self.book = book
        self.backups = backups
        self._reopen = reopen
        self._swap = threading.Lock()
        self.registry: Any = None
        if prometheus_client is not None:
            # The collector asks this service, which answers for the Bookie it holds now.
            self.registry = prometheus_client.CollectorRegistry()
            inkpen.prometheus.register(self, self.registry)

    def metrics(self) -> inkpen.Metrics:
        """The metrics of the Bookie the service holds now (survives a reopen)."""
        return self.book.metrics()

    def prometheus(self) -> Reply:
        if self.registry is None:
            return _json(
                HTTPStatus.NOT_IMPLEMENTED,
                {"error": "prometheus_client is not installed: pip install 'inkpen[prometheus]'"},
            )
        text = prometheus_client.generate_latest(self.registry)
        return HTTPStatus.OK, {"Content-Type": prometheus_client.CONTENT_TYPE_LATEST}, text

    def put(self, bucket: str, key: str, body: bytes, query: dict[str, list[str]]) -> Reply:
        ttl = _number(query, "ttl", "a number of seconds above 0")
        self.book.put(bucket, key, body, indexes=_specs(query), ttl=ttl)
        return _json(HTTPStatus.CREATED, {"bucket": bucket, "key": key, "size": len(body)})

    def get(self, bucket: str, key: str) -> Reply:
        value = self.book.get(bucket, key)
        if value is None:
            return _json(HTTPStatus.NOT_FOUND, {"error": f"no object {bucket}/{key}"})
        return HTTPStatus.OK, {"Content-Type": "application/octet-stream"}, value

    def head(self, bucket: str, key: str) -> Reply:
        found = self.book.head(bucket, key)
        if found is None:
            return HTTPStatus.NOT_FOUND, {}, b""
        modified = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(found.last_modified))
        headers = {
            "Content-Length": str(found.size),
            "ETag": f'"{found.content_hash:016x}"',
            "X-Inkpen-Sqn": str(found.sqn),
            "Last-Modified": modified,
        }
        return HTTPStatus.OK, headers, b""

    def delete(self, bucket: str, key: str, query: dict[str, list[str]]) -> Reply:
        self.book.delete(bucket, key, indexes=_specs(query))
        return HTTPStatus.NO_CONTENT, {}, b""

    def keys(self, bucket: str, query: dict[str, list[str]]) -> Reply:
        limit = int(_number(query, "limit", "a count above 0") or 1000)
        found = []
        with self.book.keys(bucket, _one(query, "start"), _one(query, "end")) as keys:
            for key in keys:
                if len(found) == limit:
                    break
                found.append(_text(key))
        return _json(HTTPStatus.OK, found)

    def index(self, bucket: str, field: str, query: dict[str, list[str]]) -> Reply:
        start, end = _one(query, "start") or "", _one(query, "end") or "\U0010ffff"
        entries = self.book.index_query(bucket, field, start, end, return_terms=True)
        return _json(HTTPStatus.OK, [[_text(term), _text(key)] for term, key in entries])

    def backup(self) -> Reply:
        if self.backups is None:
            return _json(HTTPStatus.NOT_FOUND, {"error": "start the server with --backups DIR"})
        dest = self.backups / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        report = self.book.hot_backup()(str(dest))
        return _json(HTTPStatus.OK, asdict(report))

    def reopen(self) -> Reply:
        """Open the database again (after being fenced): fences the writer that fenced us."""
        if self._reopen is None:
            return _json(HTTPStatus.NOT_FOUND, {"error": "this server cannot reopen its database"})
        with self._swap:
            old, self.book = self.book, self._reopen()
        old.close()  # a fenced Bookie persists nothing more; its readers finish first
        log.warning("reopened %s: any other writer of it is fenced now", self.book.url)
        return _json(HTTPStatus.OK, {"reopened": self.book.url})

    def close(self) -> None:
        """Close the Bookie the service holds now."""
        with self._swap:
            self.book.close()

    def route(self, method: str, path: str, body: bytes) -> Reply:
        """Answer one request."""
        parts = urlsplit(path)
        query = parse_qs(parts.query)
        segments = [unquote(s) for s in parts.path.strip("/").split("/")]
        match method, segments:
            case "PUT", ["objects", bucket, key]:
                return self.put(bucket, key, body, query)
            case "GET", ["objects", bucket, key]:
                return self.get(bucket, key)
            case "HEAD", ["objects", bucket, key]:
                return self.head(bucket, key)
            case "DELETE", ["objects", bucket, key]:
                return self.delete(bucket, key, query)
            case "GET", ["objects", bucket]:
                return self.keys(bucket, query)
            case "GET", ["index", bucket, field]:
                return self.index(bucket, field, query)
            case "GET", ["buckets"]:
                return _json(HTTPStatus.OK, [_text(b) for b in self.book.buckets()])
            case "GET", ["stats"]:
                return _json(HTTPStatus.OK, self.book.stats())
            case "GET", ["metrics"]:
                return self.prometheus()
            case "POST", ["backup"]:
                return self.backup()
            case "POST", ["reopen"]:
                return self.reopen()
        return _json(HTTPStatus.NOT_FOUND, {"error": f"no route {method} {parts.path}"})


def answer_for(error: Exception) -> tuple[int, str]:
    """The HTTP status and message for an error a route raised."""
    if isinstance(error, BadRequest | inkpen.UsageError):
        return HTTPStatus.BAD_REQUEST, str(error)
    if isinstance(error, inkpen.FencedError):
        return HTTPStatus.CONFLICT, (
            f"another process opened the database for writing, so this server can no longer "
            f"write to it ({error}). Reads still work. POST /reopen takes the database back "
            "(fencing that other writer), or restart this server once the other one is done"
        )
    if isinstance(error, inkpen.StoreError):
        return HTTPStatus.SERVICE_UNAVAILABLE, f"the store failed: {error}; try again later"
    log.exception("unexpected error")
    return HTTPStatus.INTERNAL_SERVER_ERROR, f"unexpected {type(error).__name__}: {error}"


class ObjectServer(ThreadingHTTPServer):
    """A threaded HTTP server holding the service its handlers call."""

    daemon_threads = True
    request_queue_size = 128  # socketserver's default of 5 resets connections under a burst

    def __init__(self, address: tuple[str, int], service: ObjectService) -> None:
        self.service = service
        super().__init__(address, Handler)


class Handler(BaseHTTPRequestHandler):
    """Reads a request, hands it to the service, writes the reply."""

    server: ObjectServer
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        started = time.perf_counter()
        try:
            body = self._body()
            if body is None:
                return
            status, headers, payload = self.server.service.route(self.command, self.path, body)
        except Exception as error:  # every failure becomes an answer, never a dropped connection
            code, message = answer_for(error)
            status, headers, payload = _json(code, {"error": message})
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        log.debug(
            "%s %s -> %d in %.2f ms",
            self.command,
            self.path,
            int(status),
            (time.perf_counter() - started) * 1000,
        )

    def _body(self) -> bytes | None:
        """The request body (empty without one); None when a refusal was already sent."""
        if self.command not in ("PUT", "POST"):
            return b""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.send_error(HTTPStatus.LENGTH_REQUIRED, "send a Content-Length, not chunks")
            self.close_connection = True
            return None
        length = self.headers.get("Content-Length")
        if length is None:
            return b""  # no Content-Length and no chunks: HTTP/1.1 says there is no body
        if not length.isdigit():
            self.send_error(HTTPStatus.BAD_REQUEST, f"Content-Length {length!r} is not a size")
            self.close_connection = True
            return None
        if int(length) > self.server.service.book.options.max_value_bytes:
            self.send_error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "the value is over the limit")
            self.close_connection = True
            return None
        return self.rfile.read(int(length))

    do_GET = do_PUT = do_DELETE = do_HEAD = do_POST = _serve

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are logged at DEBUG on ``examples.http_app`` in :meth:`_serve` instead."""


def _stop(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("database", help="store URL or directory of the database")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    parser.add_argument("--backups", type=Path, default=None, help="directory for POST /backup")
    parser.add_argument("--verbose", action="store_true", help="log every request on stderr")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(message)s",
    )
    signal.signal(signal.SIGTERM, _stop)
    service = ObjectService(
        inkpen.open(args.database), args.backups, reopen=lambda: inkpen.open(args.database)
    )
    try:
        server = ObjectServer((args.host, args.port), service)
        host, port = server.server_address[:2]
        print(f"listening on http://{host}:{port} (database {service.book.url})", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    finally:
        service.close()
    print("stopped; database closed", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
