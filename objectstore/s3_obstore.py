"""``s3://bucket/prefix``: the S3 store on obstore (the Rust ``object_store`` crate), the default.

The same contract, options and object layout as :class:`~inkpen.objectstore.s3.S3Store` (boto3):
either client reads what the other wrote. The default S3 client; the URL option ``client=boto3``
(or ``INKPEN_S3_CLIENT=boto3``) picks boto3 instead.
Credentials come from boto3's usual chain when it finds any (profiles, SSO, instance roles),
else from obstore's own (environment, instance metadata).

Where ``object_store`` differs from S3's own API, this module bridges it:

- **listing** in object_store is by path segment (prefix ``a/b`` lists ``a/b/...`` only), while
  inkpen's prefixes are plain string prefixes; a listing therefore asks for the prefix's
  directory, starting after the page token (S3 ``StartAfter``), and keeps the keys that start
  with the prefix. object_store pages through S3 itself (1,000 keys a request); a page of
  ``limit`` keys is the first ``limit`` of that stream.
- **head** returns no user metadata in object_store, so ``head`` is a ``GET`` with the head
  option, whose attributes carry it (one request, as with boto3).
- **ranged reads** past the end are an error (416) in object_store; here they give ``b""``.
- **create-if-absent** is a put with ``mode="create"`` (``If-None-Match: *``), sent through a
  client that never retries by itself: object_store reports only its last attempt's failure,
  and "could not connect" after a re-sent create may hide a first attempt that landed, so the
  store re-sends a create itself, only while nothing went out (no connection, or 503), and a
  connect failure stays a definite one. As with boto3 a refusal is never taken at face value:
  the store reads the put id (``inkpen-put-id``) on the object, and its own id means an earlier
  attempt of this very call landed. A refusal whose object is gone when read back (deleted
  since, or a conflict in flight: 409) is tried again after a short random pause.
- **a create that got no answer** (the connection closed, was reset or timed out after the
  request went out): object_store reports a transport error although the object may have
  landed. The store then reads the put id back as after a refusal: its own id is a success,
  another's is "already exists", no object means the create is sent once more.

Failures map to :mod:`inkpen.errors` as with boto3 (see :mod:`.s3_errors`), from the HTTP status
object_store reports; an error with no status is a definite failure when the connection was
never made (object_store's transport error kind ``Connect``) and an indefinite one otherwise
(a reset connection, ``Interrupted``, may have delivered the whole request).
"""

from __future__ import annotations

import random
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from inkpen.errors import AlreadyExistsError, InkpenError, NotFoundError, StoreError, UsageError

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
from .s3_errors import whole_request_error

if TYPE_CHECKING:
    from obstore.store import ClientConfig

try:
    import obstore
    from obstore import exceptions as ob_errors
    from obstore.store import S3Store as _ObS3Store
except ImportError:  # pragma: no cover - depends on the installed extras
    obstore = None  # type: ignore[assignment]

_USER_METADATA = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_STATUS = re.compile(r"status code: (\d{3})")
_HTTP_KIND = re.compile(r"HttpError \{\s*kind: (\w+)")
_RETRIES = re.compile(r"after (\d+) retries")
_WRITES = frozenset({"put", "put_if_absent", "delete", "copy"})
"""The actions whose failed request may have taken effect."""
_CREATE_BACKOFF = 0.1
"""The first pause before a create is sent again (it doubles each time, up to 2 s)."""
_CONFLICT_ROUNDS = 6
_CONFLICT_BACKOFF = 0.05
_CREDENTIAL_LIFETIME = timedelta(minutes=5)


RANGES_COALESCE = 64 * 1024
"""``get_ranges`` reads through gaps up to this size to join two ranges into one request."""


class ObstoreS3Store(S3Base):
    """Objects under one bucket + prefix of an S3-compatible service, through obstore.

    Opening checks that the bucket exists, as :class:`~inkpen.objectstore.s3.S3Store` does.
    """

    def __init__(
        self, bucket: str, prefix: str = "", options: Mapping[str, str] | None = None
    ) -> None:
        if obstore is None:
            raise UsageError(
                "the S3 client obstore (the default) needs the obstore package, a dependency of "
                "inkpen: reinstall inkpen (pip install --force-reinstall inkpen), or use boto3 "
                "with the URL option client=boto3"
            )
        settings = self._settle(bucket, prefix, options)
        config: dict[str, Any] = {"region": settings.region}
        if settings.endpoint:
            config["endpoint"] = settings.endpoint
            config["virtual_hosted_style_request"] = False
        client_options: ClientConfig = {
            "allow_http": True,
            "connect_timeout": timedelta(seconds=settings.connect_timeout),
            "read_timeout": timedelta(seconds=settings.read_timeout),
            "pool_max_idle_per_host": str(MAX_POOL_CONNECTIONS),
        }
        retry_timeout = timedelta(
            seconds=settings.max_attempts * (settings.connect_timeout + settings.read_timeout)
        )
        credentials = _boto_credentials()
        self._store = _ObS3Store(
            bucket,
            client_options=client_options,
            retry_config={"max_retries": settings.max_attempts - 1, "retry_timeout": retry_timeout},
            credential_provider=credentials,
            **config,
        )
        # Creates go through a client that never sends a request twice (see _create).
        self._once = _ObS3Store(
            bucket,
            client_options=client_options,
            retry_config={"max_retries": 0, "retry_timeout": retry_timeout},
            credential_provider=credentials,
            **config,
        )
        self._attempts = settings.max_attempts
        self._check_bucket()

    # -- writes ------------------------------------------------------------------------------

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        full = self._full(key)
        body = check_data(data)
        put_id = uuid.uuid4().hex
        tagged = {**check_metadata(metadata), PUT_ID_METADATA_KEY: put_id}
        unanswered: InkpenError | None = None
        resent = False
        for round_ in range(_CONFLICT_ROUNDS):
            try:
                self._create(full, body, tagged)
                return
            except (ob_errors.AlreadyExistsError, ob_errors.PreconditionError):
                unanswered = None
            except Exception as exc:
                status = _status(exc)
                if status == 409:
                    unanswered = None
                else:
                    error = self._error(exc, "put_if_absent", key)
                    if status is not None or not _may_have_landed(error):
                        raise error from None
                    # No answer (connection reset mid-request, timeout): object_store does not
                    # re-send a create then, yet the request may have landed. Read back.
                    unanswered = error
            owner = self._put_id_of(key, full, unanswered)
            if owner == put_id:
                return  # an earlier attempt of this very call landed
            if owner is not None:
                raise AlreadyExistsError(f"object {key!r} already exists in {self._url}", key=key)
            # Refused or unanswered, yet nothing there now: deleted since, another write was in
            # flight, or ours never landed. The create stays conditional, so send it again (after
            # no answer only once: the endpoint may be down, and each send has its own retries).
            if unanswered is not None:
                if resent:
                    raise unanswered
                resent = True
            time.sleep(random.uniform(0, _CONFLICT_BACKOFF * 2**round_))
        if unanswered is not None:
            raise unanswered
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
            obstore.put(self._store, full, body, attributes=checked)
        except Exception as exc:
            raise self._error(exc, "put", key) from None

    def delete(self, key: str) -> None:
        full = self._full(key)
        try:
            obstore.delete(self._store, full)
        except Exception as exc:
            if isinstance(exc, ob_errors.NotFoundError) and "NoSuchBucket" not in str(exc):
                return
            raise self._error(exc, "delete", key) from None

    def delete_many(self, keys: Iterable[str]) -> DeleteResult:
        """obstore's bulk delete, one call per 1,000 keys (object_store sends each as one S3
        ``DeleteObjects`` request), up to :attr:`concurrency` calls at once.

        obstore stops at a batch's first failing key and reports that one alone, so the keys of
        a batch that failed are deleted again one at a time (deleting is idempotent, an absent
        key no error), up to :attr:`concurrency` at once, which tells each key's outcome: a
        failure is never hidden behind another.
        """
        wanted = check_keys(keys)
        full = {self._full(key): key for key in wanted}
        refused = run_bounded(self._delete_batch, batches(list(full)), limit=self.concurrency)
        again = [path for paths in refused for path in paths]
        found = run_bounded(self._delete_one, again, limit=self.concurrency)
        return DeleteResult(
            {full[path]: error for path, error in zip(again, found, strict=True) if error}
        )

    def _delete_batch(self, paths: Sequence[str]) -> Sequence[str]:
        """One bulk delete of ``paths`` (full keys); answers them all when it failed (each is
        then deleted alone), none when it succeeded."""
        try:
            obstore.delete(self._store, list(paths))
        except Exception as exc:
            error = self._error(exc, "delete_many", None)
            if isinstance(error, UsageError):
                raise error from None
            return paths
        return ()

    def _delete_one(self, path: str) -> StoreError | None:
        """Delete the object at ``path`` (a full key): None when it is gone, else why not."""
        try:
            obstore.delete(self._store, path)
        except Exception as exc:
            if isinstance(exc, ob_errors.NotFoundError) and "NoSuchBucket" not in str(exc):
                return None
            error = self._error(exc, "delete", path[len(self._root) :])
            if isinstance(error, UsageError):
                raise error from None
            return whole_request_error(error, self._url)
        return None

    def copy(self, src_key: str, dest_key: str, *, source: ObjectStore | None = None) -> None:
        dest = self._full(dest_key)
        origin = self if source is None else source
        inner = innermost(origin)
        if (
            isinstance(inner, ObstoreS3Store)
            and inner._endpoint == self._endpoint
            and inner._bucket == self._bucket
        ):
            try:
                obstore.copy(self._store, inner._full(src_key), dest)
            except Exception as exc:
                raise self._error(exc, "copy", src_key, where=inner._where) from None
            return
        info = origin.head(src_key)
        self.put(dest_key, origin.get(src_key), metadata=info.metadata)

    # -- reads -------------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        full = self._full(key)
        try:
            return bytes(obstore.get(self._store, full).bytes())
        except Exception as exc:
            raise self._error(exc, "get", key) from None

    def get_range(self, key: str, start: int, end: int) -> bytes:
        full = self._full(key)
        check_range(start, end)
        if start == end:
            return b""
        try:
            return bytes(obstore.get_range(self._store, full, start=start, end=end))
        except Exception as exc:
            if _status(exc) == 416:
                return b""  # the range starts at or past the end of the object
            raise self._error(exc, "get_range", key) from None

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The ranges in the requests obstore makes of them (it joins neighbours at most
        :data:`RANGES_COALESCE` apart and runs up to ten requests at once); a
        failure is answered range by range, as :meth:`get_range` answers it."""
        for start, end in ranges:
            check_range(start, end)
        wanted = [(start, end) for start, end in ranges if end > start]
        if not wanted:
            return [b""] * len(ranges)
        try:
            found = obstore.get_ranges(
                self._store,
                self._full(key),
                starts=[start for start, _ in wanted],
                ends=[end for _, end in wanted],
                coalesce=RANGES_COALESCE,
            )
        except Exception:
            return super().get_ranges(key, ranges)  # each range, with its own error or answer
        answers = iter(bytes(part) for part in found)
        return [next(answers) if end > start else b"" for start, end in ranges]

    def head(self, key: str) -> ObjectInfo:
        full = self._full(key)
        try:
            result = obstore.get(self._store, full, options={"head": True})
        except Exception as exc:
            raise self._error(exc, "head", key) from None
        meta = result.meta
        return ObjectInfo(
            key, meta["size"], meta["last_modified"].timestamp(), _user_metadata(result.attributes)
        )

    def list_page(
        self, prefix: str = "", *, token: str | None = None, limit: int = DEFAULT_PAGE_SIZE
    ) -> ListPage:
        self._check_open()
        check_prefix(prefix)
        check_page(token, limit)
        wanted = self._root + prefix
        directory = wanted[: wanted.rfind("/") + 1]
        # Start after the token, or just before the prefix (so that a key equal to it is seen).
        after = self._root + token if token is not None else wanted[:-1] or None
        if after is not None and directory and after < directory:
            after = None
        skip = len(self._root)
        found: list[ObjectInfo] = []
        more = False
        try:
            stream = obstore.list(
                self._store, directory.rstrip("/") or None, offset=after, chunk_size=1000
            )
            for chunk in stream:
                for item in chunk:
                    path = item["path"]
                    if not path.startswith(wanted):
                        if path > wanted:
                            break
                        continue
                    if len(found) == limit:
                        more = True
                        break
                    found.append(
                        ObjectInfo(path[skip:], item["size"], item["last_modified"].timestamp())
                    )
                else:
                    continue
                break
        except Exception as exc:
            raise self._error(exc, "list", prefix or None) from None
        return ListPage(tuple(found), found[-1].key if more else None)

    def close(self) -> None:
        self._closed = True

    # -- internals ---------------------------------------------------------------------------

    def _error(
        self, exc: Exception, action: str, key: str | None, *, where: str | None = None
    ) -> InkpenError:
        return map_obstore_error(exc, action=action, key=key, where=where or self._where)

    def _create(self, full: str, body: bytes, tagged: Mapping[str, str]) -> None:
        """One create, sent again (up to ``max_attempts`` times, after a growing pause) only
        while nothing went out: the connection was never made, or the server refused it busy
        (503). object_store reports only its last attempt's failure, so had it re-sent a create
        itself, "could not connect" could follow an attempt that went out whole and landed;
        sending them from here keeps a connect failure a definite one."""
        for attempt in range(self._attempts):
            try:
                obstore.put(self._once, full, body, mode="create", attributes=dict(tagged))
                return
            except Exception as exc:
                text = str(exc)
                unsent = _http_kind(text) == "Connect" or "tcp connect error" in text
                if attempt + 1 >= self._attempts or not (unsent or _status(exc) == 503):
                    raise
            time.sleep(random.uniform(0.5, 1.0) * min(_CREATE_BACKOFF * 2**attempt, 2.0))

    def _put_id_of(self, key: str, full: str, unanswered: InkpenError | None) -> str | None:
        """The put id on the object now at ``full``; None when there is no object.
        ``unanswered``: the error of a create that got no answer (None when it was refused)."""
        try:
            result = obstore.get(self._store, full, options={"head": True})
        except Exception as exc:
            if isinstance(exc, ob_errors.NotFoundError) or _status(exc) == 404:
                return None
            what = "got no answer" if unanswered is not None else "was refused"
            raise StoreError(
                f"S3 put_if_absent of {key!r} at {self._where} {what} and the object could not "
                f"be read back to see whose write won ({_first_line(exc)}); read the key to "
                "find out",
                definite=False,
                key=key,
            ) from None
        return str(result.attributes.get(PUT_ID_METADATA_KEY, ""))

    def _check_bucket(self) -> None:
        try:
            for _chunk in obstore.list(self._store, self._prefix or None, chunk_size=1):
                break
        except Exception as exc:
            status, text = _status(exc), str(exc)
            if status == 400:
                raise UsageError(
                    f"S3 endpoint {self._endpoint or 'AWS'} rejected the bucket name "
                    f"{self._bucket!r}; bucket names are 3-63 lower-case letters, digits, '.' "
                    "and '-'"
                ) from None
            if "NoSuchBucket" in text or status == 404:
                raise UsageError(
                    f"S3 bucket {self._bucket!r} does not exist at endpoint "
                    f"{self._endpoint or 'AWS (' + self._region + ')'}; create it first "
                    f"(for example: aws s3 mb s3://{self._bucket}) or fix the URL"
                ) from None
            raise self._error(exc, "open", None) from None


def map_obstore_error(exc: Exception, *, action: str, key: str | None, where: str) -> InkpenError:
    """The inkpen error for an obstore failure ``exc`` (the same mapping as boto3's, from the
    HTTP status object_store reports)."""
    subject = f"S3 {action} of {key!r} at {where}" if key is not None else f"S3 {action} at {where}"
    text = str(exc)
    status = _status(exc)
    reason = _first_line(exc)
    if "NoSuchBucket" in text:
        return StoreError(
            f"{subject} failed: the bucket does not exist (any more); create it or fix the URL",
            definite=True,
            key=key,
        )
    if (obstore is not None and isinstance(exc, ob_errors.NotFoundError)) or status == 404:
        return NotFoundError(f"{subject}: no such object", key=key)
    if obstore is not None and isinstance(
        exc, ob_errors.PermissionDeniedError | ob_errors.UnauthenticatedError
    ):
        status = 403
    if obstore is not None and isinstance(exc, ob_errors.InvalidPathError):
        return UsageError(f"{subject} was refused before sending: {reason}")
    if status == 403:
        return StoreError(
            f"{subject} was denied ({reason}); check the credentials and the bucket policy",
            definite=True,
            key=key,
        )
    if status == 503:
        return StoreError(
            f"{subject} was refused by a busy server ({reason}); retry later",
            definite=True,
            key=key,
        )
    if status is not None and status >= 500:
        return StoreError(f"{subject} failed on the server ({reason})", definite=False, key=key)
    if status is not None:
        return StoreError(f"{subject} was rejected ({reason})", definite=True, key=key)
    if _http_kind(text) == "Connect" or "tcp connect error" in text:
        retries = _retries(text)
        if retries and action in _WRITES:
            # object_store reports the last attempt's failure only: an earlier one may have been
            # sent whole and lost its answer (the server went down after taking it), and taken
            # effect. Only a connect failure with no retry before it sent nothing.
            return StoreError(
                f"{subject} could not connect after {retries} retries ({reason}); an earlier "
                "attempt may have reached the store and taken effect",
                definite=False,
                key=key,
            )
        return StoreError(
            f"{subject} could not connect: {reason}; check that the endpoint is right and running",
            definite=True,
            key=key,
        )
    return StoreError(f"{subject} got no complete answer: {reason}", definite=False, key=key)


def _status(exc: Exception) -> int | None:
    """The HTTP status object_store reports in ``exc``'s message, if any."""
    found = _STATUS.search(str(exc))
    return int(found.group(1)) if found else None


def _retries(text: str) -> int:
    """How many times object_store sent the request again before the error it reports."""
    found = _RETRIES.search(text)
    return int(found.group(1)) if found else 0


def _http_kind(text: str) -> str | None:
    """The kind of transport failure (``Connect``, ``Interrupted``, ``Timeout``, ...) in an
    obstore message's debug dump, if any."""
    found = _HTTP_KIND.search(text)
    return found.group(1) if found else None


def _may_have_landed(error: InkpenError) -> bool:
    """Whether a write that failed with ``error`` may still have taken effect."""
    return isinstance(error, StoreError) and error.definite is False


def _first_line(exc: Exception) -> str:
    """obstore's message without the debug dump that follows it."""
    return str(exc).split("\n", 1)[0].strip() or type(exc).__name__


def _user_metadata(attributes: Mapping[str, str]) -> dict[str, str]:
    """The user metadata among an object's attributes (lower-case keys; the standard attributes
    such as ``Content-Type`` are capitalised), less inkpen's put id."""
    return {
        k: v for k, v in attributes.items() if _USER_METADATA.match(k) and k != PUT_ID_METADATA_KEY
    }


def _boto_credentials() -> Any:
    """A credential provider over boto3's chain, or None to let obstore find credentials."""
    import botocore.session

    found = botocore.session.Session().get_credentials()
    if found is None:
        return None

    def provide() -> dict[str, Any]:
        frozen = found.get_frozen_credentials()
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            "expires_at": datetime.now(UTC) + _CREDENTIAL_LIFETIME,
        }

    return provide
