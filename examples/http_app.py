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
``POST /backup``                                            a hot backup into ``--backups``/<UTC
                                                            time>, its report as JSON
==========================================================  ========================================

The server is a ``ThreadingHTTPServer``: every connection gets a thread and all of them share the
one Bookie, which is thread-safe; PUTs arriving together share journal writes (group commit).
Bad input answers 400 with inkpen's message, a value over the size limit 413, a store failure
or a newer writer of the database (which fences this one) 503. Ctrl-C or SIGTERM stops serving
and closes the Bookie cleanly. The hot backup is the way to back up a database an application is
writing: it runs inside the process that owns the Bookie, fencing nobody.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from dataclasses import asdict
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import inkpen
from inkpen.logs import get_logger

log = get_logger("examples.http_app")

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


class ObjectService:
    """The routes, as plain methods from a parsed request to a reply."""

    def __init__(self, book: inkpen.Bookie, backups: Path | None = None) -> None:
        self.book = book
        self.backups = backups

    def put(self, bucket: str, key: str, body: bytes, query: dict[str, list[str]]) -> Reply:
        ttl = _one(query, "ttl")
        self.book.put(
            bucket, key, body, indexes=_specs(query), ttl=None if ttl is None else float(ttl)
        )
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
        limit = int(_one(query, "limit") or 1000)
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
            case "POST", ["backup"]:
                return self.backup()
        return _json(HTTPStatus.NOT_FOUND, {"error": f"no route {method} {parts.path}"})


def status_for(error: Exception) -> int:
    """The HTTP status for an error a route raised."""
    if isinstance(error, inkpen.UsageError | ValueError):
        return HTTPStatus.BAD_REQUEST
    if isinstance(error, inkpen.FencedError | inkpen.StoreError):
        return HTTPStatus.SERVICE_UNAVAILABLE
    return HTTPStatus.INTERNAL_SERVER_ERROR


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
            status, headers, payload = _json(status_for(error), {"error": str(error)})
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        log.debug(
            "http.request",
            method=self.command,
            path=self.path,
            status=int(status),
            ms=round((time.perf_counter() - started) * 1000, 2),
        )

    def _body(self) -> bytes | None:
        """The request body (empty without one); None when a refusal was already sent."""
        if self.command not in ("PUT", "POST"):
            return b""
        length = self.headers.get("Content-Length")
        if length is None:
            self.send_error(HTTPStatus.LENGTH_REQUIRED, "send a Content-Length")
            return None
        if int(length) > self.server.service.book.options.max_value_bytes:
            self.send_error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "the value is over the limit")
            self.close_connection = True
            return None
        return self.rfile.read(int(length))

    do_GET = do_PUT = do_DELETE = do_HEAD = do_POST = _serve

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are logged as structlog events in :meth:`_serve` instead."""


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
    with inkpen.open(args.database) as book:
        server = ObjectServer((args.host, args.port), ObjectService(book, args.backups))
        host, port = server.server_address[:2]
        print(f"listening on http://{host}:{port} (database {book.url})", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    print("stopped; database closed", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
