"""``s3://bucket/prefix``: S3 or any S3-compatible store, through boto3.

Options come from the URL's query (``?endpoint=http://host:port&region=eu-west-1``) or, when
absent, from the standard AWS variables (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``,
``AWS_REGION``, ``AWS_DEFAULT_REGION``); credentials come from boto3's usual chain. Tuning
options: ``max_attempts`` (tries per request, default 5), ``connect_timeout`` and
``read_timeout`` (seconds, default 5 and 30). ``client`` picks the HTTP client: ``obstore`` (the
default, :mod:`.s3_obstore`, the Rust ``object_store`` crate) or ``boto3`` (this module); when
absent it comes from ``INKPEN_S3_CLIENT``.

One boto3 (botocore) client per store, shared by every thread (the clients are thread-safe),
with adaptive retries and path-style addressing when an endpoint is given.

Create-if-absent is ``PutObject`` with ``If-None-Match: *``. Every such write carries a fresh
put id in its user metadata (``inkpen-put-id``). When a response is lost (a read timeout after
the request was sent), boto3 retries; if the first attempt had landed, the retry is refused
with 412 PreconditionFailed (or 409 ConditionalRequestConflict while the first is still in
flight). So a refusal is never taken at face value: the store HEADs the object, and if the put
id there is its own, the earlier attempt won and the call succeeds. A retry can therefore
never turn a success into a failure.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import botocore.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from botocore.loaders import Loader, create_loader

from inkpen.errors import AlreadyExistsError, InkpenError, StoreError, UsageError

from .base import (
    DEFAULT_PAGE_SIZE,
    PUT_ID_METADATA_KEY,
    ListPage,
    ObjectInfo,
    ObjectStore,
    StoreBase,
    check_data,
    check_key,
    check_metadata,
    check_page,
    check_prefix,
    check_range,
    innermost,
)
from .s3_errors import error_code, http_status, map_s3_error

DEFAULT_REGION = "us-east-1"
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 30.0
MAX_POOL_CONNECTIONS = 64
MAX_KEY_BYTES = 1024
OPTIONS = ("endpoint", "region", "max_attempts", "connect_timeout", "read_timeout", "client")
CLIENTS = ("boto3", "obstore")
DEFAULT_CLIENT = "obstore"

_CONDITION_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
_CONFLICT_ROUNDS = 6
"""How often a create-if-absent is re-sent while S3 reports a conflicting write in flight."""
_CONFLICT_BACKOFF = 0.05


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


class S3Store(S3Base):
    """Objects under one bucket + prefix of an S3-compatible service.

    Opening checks that the bucket exists (a missing bucket is a :class:`UsageError` that says
    to create it; an unreachable endpoint is a definite :class:`StoreError`).
    """

    def __init__(
        self, bucket: str, prefix: str = "", options: Mapping[str, str] | None = None
    ) -> None:
        settings = self._settle(bucket, prefix, options)
        self._client = _new_session().create_client(
            "s3",
            endpoint_url=settings.endpoint,
            region_name=settings.region,
            config=Config(
                retries={"mode": "adaptive", "total_max_attempts": settings.max_attempts},
                connect_timeout=settings.connect_timeout,
                read_timeout=settings.read_timeout,
                max_pool_connections=MAX_POOL_CONNECTIONS,
                s3={"addressing_style": "path"} if settings.endpoint else None,
            ),
        )
        self._check_bucket()

    @property
    def client(self) -> Any:
        """The boto3 S3 client this store sends every request through (for event hooks)."""
        return self._client

    # -- writes ------------------------------------------------------------------------------

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        full = self._full(key)
        body = check_data(data)
        put_id = uuid.uuid4().hex
        tagged = {**check_metadata(metadata), PUT_ID_METADATA_KEY: put_id}
        for round_ in range(_CONFLICT_ROUNDS):
            try:
                self._client.put_object(
                    Bucket=self._bucket, Key=full, Body=body, Metadata=tagged, IfNoneMatch="*"
                )
                return
            except ClientError as exc:
                code, status = error_code(exc), http_status(exc)
                if status not in (409, 412) and code not in _CONDITION_CODES:
                    raise self._error(exc, "put_if_absent", key) from None
                retried = exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) > 0
            except BotoCoreError as exc:
                raise self._error(exc, "put_if_absent", key) from None
            owner = self._put_id_of(key, full)
            if owner == put_id:
                return  # an earlier attempt of this very call landed
            if owner is not None:
                raise AlreadyExistsError(
                    f"object {key!r} already exists in {self._url}", key=key
                ) from None
            if status == 412 or code == "PreconditionFailed":
                if retried:
                    raise StoreError(
                        f"S3 put_if_absent of {key!r} at {self._where} was refused after a "
                        "retry and the object is gone now; it may have been ours",
                        definite=False,
                        key=key,
                    )
                raise AlreadyExistsError(
                    f"object {key!r} existed in {self._url} (and was deleted since)", key=key
                )
            # 409: another conditional write of this key was in flight; try again shortly.
            time.sleep(random.uniform(0, _CONFLICT_BACKOFF * 2**round_))
        raise StoreError(
            f"S3 put_if_absent of {key!r} at {self._where} kept conflicting with writes in "
            "flight; read the key to see whether it landed",
            definite=False,
            key=key,
        )

    def put(self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None) -> None:
        full = self._full(key)
        body = check_data(data)
        checked = check_metadata(metadata)
        try:
            self._client.put_object(Bucket=self._bucket, Key=full, Body=body, Metadata=checked)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, "put", key) from None

    def delete(self, key: str) -> None:
        full = self._full(key)
        try:
            self._client.delete_object(Bucket=self._bucket, Key=full)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, "delete", key) from None

    def copy(self, src_key: str, dest_key: str, *, source: ObjectStore | None = None) -> None:
        dest = self._full(dest_key)
        origin = self if source is None else source
        inner = innermost(origin)
        if isinstance(inner, S3Store) and inner._endpoint == self._endpoint:
            copy_source = {"Bucket": inner._bucket, "Key": inner._full(src_key)}
            try:
                self._client.copy_object(Bucket=self._bucket, Key=dest, CopySource=copy_source)
            except (ClientError, BotoCoreError) as exc:
                raise self._error(exc, "copy", src_key, where=inner._where) from None
            return
        info = origin.head(src_key)
        self.put(dest_key, origin.get(src_key), metadata=info.metadata)

    # -- reads -------------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        full = self._full(key)
        try:
            response = self._client.get_object(Bucket=self._bucket, Key=full)
            return bytes(response["Body"].read())
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, "get", key) from None

    def get_range(self, key: str, start: int, end: int) -> bytes:
        full = self._full(key)
        check_range(start, end)
        if start == end:
            return b""
        try:
            response = self._client.get_object(
                Bucket=self._bucket, Key=full, Range=f"bytes={start}-{end - 1}"
            )
            return bytes(response["Body"].read())
        except ClientError as exc:
            if http_status(exc) == 416:
                return b""  # the range starts at or past the end of the object
            raise self._error(exc, "get_range", key) from None
        except BotoCoreError as exc:
            raise self._error(exc, "get_range", key) from None

    def head(self, key: str) -> ObjectInfo:
        full = self._full(key)
        try:
            response = self._client.head_object(Bucket=self._bucket, Key=full)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, "head", key) from None
        metadata = dict(response.get("Metadata", {}))
        metadata.pop(PUT_ID_METADATA_KEY, None)
        return ObjectInfo(
            key, response["ContentLength"], response["LastModified"].timestamp(), metadata
        )

    def list_page(
        self, prefix: str = "", *, token: str | None = None, limit: int = DEFAULT_PAGE_SIZE
    ) -> ListPage:
        self._check_open()
        check_prefix(prefix)
        check_page(token, limit)
        request: dict[str, Any] = {
            "Bucket": self._bucket,
            "Prefix": self._root + prefix,
            "MaxKeys": min(limit, 1000),
        }
        if token is not None:
            request["StartAfter"] = self._root + token
        try:
            response = self._client.list_objects_v2(**request)
            while response.get("IsTruncated") and not response.get("Contents"):
                request["ContinuationToken"] = response["NextContinuationToken"]
                response = self._client.list_objects_v2(**request)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, "list", prefix or None) from None
        skip = len(self._root)
        found = tuple(
            ObjectInfo(item["Key"][skip:], item["Size"], item["LastModified"].timestamp())
            for item in response.get("Contents", ())
        )
        more = bool(response.get("IsTruncated")) and bool(found)
        return ListPage(found, found[-1].key if more else None)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._client.close()

    # -- internals ---------------------------------------------------------------------------

    def _error(
        self, exc: Exception, action: str, key: str | None, *, where: str | None = None
    ) -> InkpenError:
        return map_s3_error(exc, action=action, key=key, where=where or self._where)

    def _put_id_of(self, key: str, full: str) -> str | None:
        """The put id on the object now at ``full``; None when there is no object."""
        try:
            response = self._client.head_object(Bucket=self._bucket, Key=full)
        except ClientError as exc:
            if http_status(exc) == 404:
                return None
            raise self._undecided(key, exc) from None
        except BotoCoreError as exc:
            raise self._undecided(key, exc) from None
        return str(response.get("Metadata", {}).get(PUT_ID_METADATA_KEY, ""))

    def _undecided(self, key: str, exc: Exception) -> StoreError:
        return StoreError(
            f"S3 put_if_absent of {key!r} at {self._where} was refused and the object could not "
            f"be read back to see whose write won ({exc}); read the key to find out",
            definite=False,
            key=key,
        )

    def _check_bucket(self) -> None:
        try:
            self._client.head_bucket(Bucket=self._bucket)
        except ClientError as exc:
            self._client.close()
            if http_status(exc) == 400:
                raise UsageError(
                    f"S3 endpoint {self._endpoint or 'AWS'} rejected the bucket name "
                    f"{self._bucket!r} ({error_code(exc)}); bucket names are 3-63 lower-case "
                    "letters, digits, '.' and '-'"
                ) from None
            if http_status(exc) == 404 or error_code(exc) == "NoSuchBucket":
                raise UsageError(
                    f"S3 bucket {self._bucket!r} does not exist at endpoint "
                    f"{self._endpoint or 'AWS (' + self._region + ')'}; create it first "
                    f"(for example: aws s3 mb s3://{self._bucket}) or fix the URL"
                ) from None
            raise self._error(exc, "open", None) from None
        except BotoCoreError as exc:
            self._client.close()
            raise self._error(exc, "open", None) from None


def open_s3_store(
    bucket: str, prefix: str = "", options: Mapping[str, str] | None = None
) -> ObjectStore:
    """The S3 store for ``s3://bucket/prefix?options``, on the client its options pick."""
    if S3Options.from_mapping(options or {}).client == "obstore":
        from .s3_obstore import ObstoreS3Store

        return ObstoreS3Store(bucket, prefix, options)
    return S3Store(bucket, prefix, options)


_loader: Loader | None = None
_loader_lock = threading.Lock()


def _new_session() -> botocore.session.Session:
    """A fresh botocore context (credentials are resolved per store) sharing one data loader:
    parsing the S3 service model costs about 100 ms, reusing it about 10 ms per store."""
    global _loader
    with _loader_lock:
        if _loader is None:
            _loader = create_loader()
        loader = _loader
    session = botocore.session.Session()
    session.register_component("data_loader", loader)
    return session


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
