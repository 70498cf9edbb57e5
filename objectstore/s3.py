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

import random
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import botocore.session
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ProxyConnectionError,
)
from botocore.loaders import Loader, create_loader

from inkpen.errors import AlreadyExistsError, InkpenError, StoreError, UsageError

from .base import (
    DEFAULT_PAGE_SIZE,
    PUT_ID_METADATA_KEY,
    DeleteResult,
    ListPage,
    ObjectInfo,
    ObjectStore,
    batches,
    check_data,
    check_keys,
    check_metadata,
    check_page,
    check_prefix,
    check_range,
    innermost,
)
from .parallel import run_bounded
from .s3_common import MAX_POOL_CONNECTIONS, S3Base
from .s3_errors import (
    error_code,
    http_status,
    map_delete_error,
    map_s3_error,
    whole_request_error,
)

_CONDITION_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
_CONFLICT_ROUNDS = 6
"""How often a create-if-absent is re-sent while S3 reports a conflicting write in flight."""
_CONFLICT_BACKOFF = 0.05


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
        # Whether an attempt of the create under way on this thread may have gone out (see
        # _note_attempt): botocore raises only its last attempt's failure.
        self._attempts = threading.local()
        self._client.meta.events.register("needs-retry.s3.PutObject", self._note_attempt)
        self._check_bucket()

    def _note_attempt(self, response: Any = None, caught_exception: Any = None, **_: Any) -> None:
        """botocore's ``needs-retry`` hook, called after every attempt of a ``PutObject``: an
        attempt that got an answer, or failed other than by never connecting, may have landed.
        (It decides nothing: botocore's own retry handler answers the event.)"""
        never_sent = isinstance(
            caught_exception, EndpointConnectionError | ConnectTimeoutError | ProxyConnectionError
        )
        if response is not None or (caught_exception is not None and not never_sent):
            self._attempts.may_have_landed = True

    def _landed_maybe(self) -> bool:
        """Whether an attempt of this thread's latest create may have gone out."""
        return bool(getattr(self._attempts, "may_have_landed", False))

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
            self._attempts.may_have_landed = False
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
                error = self._error(exc, "put_if_absent", key)
                if isinstance(error, StoreError) and error.definite and self._landed_maybe():
                    # "could not connect" on a retry: an earlier attempt may have landed
                    raise StoreError(
                        f"{error}; an earlier attempt of it went out and may have taken effect",
                        definite=False,
                        key=key,
                    ) from None
                raise error from None
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

    def delete_many(self, keys: Iterable[str]) -> DeleteResult:
        """``DeleteObjects`` requests of up to 1,000 keys, up to :attr:`concurrency` at once;
        the errors S3 names key by key are each key's, and a request that fails as a whole
        fails each of its keys with that error."""
        wanted = check_keys(keys)
        full = {self._full(key): key for key in wanted}
        found = run_bounded(self._delete_batch, batches(list(full)), limit=self.concurrency)
        failed: dict[str, StoreError] = {}
        for errors in found:
            failed.update((full[path], error) for path, error in errors.items())
        return DeleteResult(failed)

    def _delete_batch(self, paths: Sequence[str]) -> dict[str, StoreError]:
        """One ``DeleteObjects`` request of ``paths`` (full keys): the errors, by full key."""
        try:
            response = self._client.delete_objects(
                Bucket=self._bucket,
                Delete={"Objects": [{"Key": path} for path in paths], "Quiet": True},
            )
        except (ClientError, BotoCoreError) as exc:
            error = self._error(exc, "delete_many", None)
            if isinstance(error, UsageError):  # credentials, parameters: the caller's to fix
                raise error from None
            return dict.fromkeys(paths, whole_request_error(error, self._url))
        errors: dict[str, StoreError] = {}
        asked = set(paths)
        skip = len(self._root)
        for item in response.get("Errors", ()):
            path = str(item.get("Key", ""))
            if path in asked:
                refused = map_delete_error(
                    str(item.get("Code", "")),
                    str(item.get("Message", "")),
                    key=path[skip:],
                    where=self._where,
                )
                if refused is not None:
                    errors[path] = refused
        return errors

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
