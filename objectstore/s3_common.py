"""What inkpen's two S3 stores share: their options and their base class (:mod:`.s3_backend` is
the ``s3://`` backend that chooses between them).

Options come from the URL's query (``?endpoint=http://host:port&region=eu-west-1``) or, when
absent, from the standard AWS variables (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``,
``AWS_REGION``, ``AWS_DEFAULT_REGION``). Tuning options: ``max_attempts`` (tries per request,
default 5), ``connect_timeout`` and ``read_timeout`` (seconds, default 5 and 30). ``client``
picks the HTTP client: ``obstore`` (the default, :mod:`.s3_obstore`, the Rust ``object_store``
crate) or ``boto3`` (:mod:`.s3`); when absent it comes from ``INKPEN_S3_CLIENT``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from inkpen.errors import UsageError

from .base import StoreBase, check_key

DEFAULT_REGION = "us-east-1"
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 30.0
MAX_POOL_CONNECTIONS = 64
"""Connections each S3 client keeps to its endpoint, and the requests paths that issue many run
at once (``S3Base.concurrency``)."""
MAX_KEY_BYTES = 1024
OPTIONS = ("endpoint", "region", "max_attempts", "connect_timeout", "read_timeout", "client")
CLIENTS = ("boto3", "obstore")
DEFAULT_CLIENT = "obstore"


@dataclass(frozen=True, slots=True)
class S3Options:
    """How to reach an S3 service: endpoint, region, retry budget and timeouts."""

    endpoint: str | None
    """``http(s)://host:port`` of an S3-compatible server; None for AWS itself."""
    region: str = DEFAULT_REGION
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    """Tries per request, the first included."""
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    client: str = DEFAULT_CLIENT
    """Which client library sends the requests: ``boto3`` or ``obstore``."""

    @classmethod
    def from_mapping(cls, options: Mapping[str, str]) -> S3Options:
        """Options from a URL's query, falling back to the standard AWS variables."""
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise UsageError(
                f"unknown S3 option(s) {', '.join(unknown)}; known: {', '.join(OPTIONS)}"
            )
        endpoint = options.get("endpoint") or _env_endpoint()
        if endpoint and not endpoint.startswith(("http://", "https://")):
            raise UsageError(f"S3 endpoint {endpoint!r} must start with http:// or https://")
        client = options.get("client") or os.environ.get("INKPEN_S3_CLIENT") or DEFAULT_CLIENT
        if client not in CLIENTS:
            raise UsageError(f"S3 option client={client!r} must be one of {', '.join(CLIENTS)}")
        return cls(
            endpoint=endpoint,
            region=(
                options.get("region")
                or os.environ.get("AWS_REGION")
                or os.environ.get("AWS_DEFAULT_REGION")
                or DEFAULT_REGION
            ),
            max_attempts=_positive_int(options, "max_attempts", DEFAULT_MAX_ATTEMPTS),
            connect_timeout=_positive_float(options, "connect_timeout", DEFAULT_CONNECT_TIMEOUT),
            read_timeout=_positive_float(options, "read_timeout", DEFAULT_READ_TIMEOUT),
            client=client,
        )


class S3Base(StoreBase):
    """What both S3 stores share: the bucket, the prefix their keys live under, the URL, the
    options and the closed state. Each subclass sends the requests through its own client."""

    concurrency = MAX_POOL_CONNECTIONS
    """Requests in flight at once on paths that issue many (:mod:`.parallel`): as many as the
    client keeps connections to the endpoint."""

    def _settle(self, bucket: str, prefix: str, options: Mapping[str, str] | None) -> S3Options:
        """Check and keep the location; answers the parsed options (the subclass's client)."""
        if not isinstance(bucket, str) or not bucket:
            raise UsageError("an S3 store needs a bucket name: s3://bucket/prefix")
        settings = S3Options.from_mapping(options or {})
        self._bucket = bucket
        self._prefix = prefix.strip("/")
        self._root = f"{self._prefix}/" if self._prefix else ""
        self._endpoint = settings.endpoint
        self._region = settings.region
        query = urlencode(sorted((options or {}).items()), safe=":/")
        self._url = f"s3://{bucket}" + (f"/{self._prefix}" if self._prefix else "")
        self._url += f"?{query}" if query else ""
        self._where = f"s3://{bucket}/{self._prefix} (endpoint {self._endpoint or 'AWS'})"
        self._closed = False
        return settings

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def prefix(self) -> str:
        """The key prefix (without trailing ``/``) under which this store's objects live."""
        return self._prefix

    @property
    def endpoint(self) -> str | None:
        """The endpoint URL, or None for AWS itself."""
        return self._endpoint

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"the store {self._url} is closed; open it again to use it")

    def _full(self, key: str) -> str:
        self._check_open()
        full = self._root + check_key(key)
        if len(full.encode("utf-8")) > MAX_KEY_BYTES:
            raise UsageError(
                f"object key {key!r} makes an S3 key longer than {MAX_KEY_BYTES} bytes"
            )
        return full


def _env_endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def _positive_int(options: Mapping[str, str], name: str, default: int) -> int:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"S3 option {name}={raw!r} must be a whole number >= 1")
    return value


def _positive_float(options: Mapping[str, str], name: str, default: float) -> float:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise UsageError(f"S3 option {name}={raw!r} must be a number of seconds > 0")
    return value
