"""The object-store protocol every inkpen layer talks to.

One database lives under one store root (a directory, a bucket + prefix, or a named in-memory
space). Keys are relative to that root, ``/``-separated, never empty, never starting with ``/``,
with no empty, ``.`` or ``..`` segment.

Operations and their contracts (all implementations share them; the conformance suite checks them):

=====================  ============================================================================
``put_if_absent``      create the object only if no object has that key; otherwise raise
                       :class:`AlreadyExistsError` and change nothing. Atomic: concurrent creators
                       of one key get exactly one winner, and the stored bytes are the winner's.
``put``                create or replace the object.
``get``                the whole object; :class:`NotFoundError` if absent.
``get_range``          bytes ``[start, end)``; ``end`` is clipped to the object's size, a start at
                       or past the end gives ``b""``.
``head``               :class:`ObjectInfo` (size, last-modified time, user metadata).
``list``               every object whose key starts with ``prefix``, in key order, paged
                       internally; ``list_page`` exposes one page and the token for the next.
``delete``             remove the object; deleting a missing key is not an error.
``delete_many``        remove many objects, in requests of up to :data:`DELETE_MANY_KEYS` keys
                       (S3's ``DeleteObjects``), several at once; answers a
                       :class:`DeleteResult` naming each key that failed with its error (a
                       missing key is not an error); a failure never hides behind the others.
``copy``               server-side copy within the store, or from another store of the same kind
                       (hard link on a local directory when possible).
=====================  ============================================================================

Failures are mapped to :mod:`inkpen.errors`: a :class:`StoreError` says whether the operation
definitely did not happen (``definite=True``) or may have happened.

A store also says how many requests are worth having in flight on it at once (its class's
``concurrency``; :mod:`.parallel` runs the paths that issue many requests within it).

User metadata is a small ``str -> str`` mapping stored with the object (keys are lower-case ASCII
letters, digits and ``-``; values ASCII). S3 limits a whole object's metadata to 2 KiB, and the S3
store adds its own put id (:data:`PUT_ID_METADATA_KEY`) to conditional writes, so callers get
:data:`MAX_METADATA_BYTES` and may not use that key themselves.
"""

from __future__ import annotations

import builtins
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol, Self, runtime_checkable

from inkpen.errors import StoreError, UsageError

from .parallel import DEFAULT_CONCURRENCY, concurrency, run_bounded

_METADATA_KEY = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
PUT_ID_METADATA_KEY = "inkpen-put-id"
"""Metadata key under which a store records which conditional write created an object."""
MAX_METADATA_BYTES = 2048 - 64
"""User metadata budget: S3's 2 KiB less room for :data:`PUT_ID_METADATA_KEY` and its value."""
DEFAULT_PAGE_SIZE = 1000
DELETE_MANY_KEYS = 1000
"""Keys one ``delete_many`` request carries at most (S3's ``DeleteObjects`` limit); a call with
more keys makes several requests."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a store knows about one object without reading it."""

    key: str
    size: int
    last_modified: float
    """Seconds since the Unix epoch at which the object was last written."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """User metadata; filled by ``head``. ``list`` leaves it empty (S3 does not return it)."""

    def age(self, now: float | None = None) -> float:
        """Seconds since the object was written."""
        return (time.time() if now is None else now) - self.last_modified


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a listing: its objects in key order and the token for the next page."""

    objects: tuple[ObjectInfo, ...]
    next_token: str | None


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """What one ``delete_many`` did: every key it was given is gone (deleted, or absent already)
    except the keys of ``failed``, each with its error: a definite one (that key was not deleted)
    or an indefinite one (it may or may not be gone)."""

    failed: Mapping[str, StoreError] = field(
        default_factory=lambda: MappingProxyType({}), hash=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "failed", MappingProxyType(dict(self.failed)))

    @property
    def ok(self) -> bool:
        """Whether every key is gone."""
        return not self.failed

    def deleted(self, keys: Iterable[str]) -> builtins.list[str]:
        """Those of ``keys`` that are gone, in their order."""
        failed = self.failed
        return [key for key in keys if key not in failed]

    def error(self, url: str) -> StoreError | None:
        """None when every key is gone; else one error that names the failed keys (definite
        only when every failure was)."""
        if not self.failed:
            return None
        keys = sorted(self.failed)
        first = self.failed[keys[0]]
        shown = ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
        return StoreError(
            f"{len(keys)} object(s) of {url} could not be deleted ({shown}): {first}",
            definite=all(e.definite for e in self.failed.values()),
            key=keys[0],
        )

    @staticmethod
    def merge(results: Iterable[DeleteResult]) -> DeleteResult:
        """One result holding the failures of all of ``results``."""
        failed: dict[str, StoreError] = {}
        for result in results:
            failed.update(result.failed)
        return DeleteResult(failed)


@runtime_checkable
class ObjectStore(Protocol):
    """A flat key space of immutable-by-convention objects under one root."""

    @property
    def url(self) -> str:
        """The URL this store was opened from (credentials never included)."""
        ...

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None: ...

    def put(self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None) -> None: ...

    def get(self, key: str) -> bytes: ...

    def get_range(self, key: str, start: int, end: int) -> bytes: ...

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """``get_range`` of every ``(start, end)`` of ``ranges``, of one object, in order.

        A store may serve them together (one open file, or requests an S3 client coalesces);
        each answer is what ``get_range`` would give."""
        ...

    def head(self, key: str) -> ObjectInfo: ...

    def list_page(
        self, prefix: str = "", *, token: str | None = None, limit: int = DEFAULT_PAGE_SIZE
    ) -> ListPage: ...

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]: ...

    def delete(self, key: str) -> None: ...

    def delete_many(self, keys: Iterable[str]) -> DeleteResult:
        """Delete every one of ``keys`` (see the module docstring); raises only for bad input
        (a :class:`~inkpen.errors.UsageError` before anything is deleted): store failures are
        the result's, key by key."""
        ...

    def copy(self, src_key: str, dest_key: str, *, source: ObjectStore | None = None) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self:
        """A store is its own context manager: ``with open_store(url) as store:`` closes it."""
        ...

    def __exit__(self, *exc_info: object) -> None: ...


class StoreBase:
    """Shared argument checks and the paging loop; implementations subclass it."""

    _url: str
    concurrency: int = DEFAULT_CONCURRENCY
    """Requests worth having in flight on this store at once (:mod:`.parallel`)."""

    @property
    def url(self) -> str:
        return self._url

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object under ``prefix`` in key order, fetching one page at a time."""
        check_prefix(prefix)
        token: str | None = None
        while True:
            page = self.list_page(prefix, token=token)  # type: ignore[attr-defined]
            yield from page.objects
            if page.next_token is None:
                return
            token = page.next_token

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]:
        """One ``get_range`` after another; stores that can serve several at once override it."""
        get_range = self.get_range  # type: ignore[attr-defined]
        return [get_range(key, start, end) for start, end in ranges]

    def delete_many(self, keys: Iterable[str]) -> DeleteResult:
        """One ``delete`` per key, up to :attr:`concurrency` at once; stores that delete in
        batches override it."""
        wanted = check_keys(keys)
        delete = self.delete  # type: ignore[attr-defined]

        def one(key: str) -> StoreError | None:
            try:
                delete(key)
            except StoreError as exc:
                return exc
            return None

        found = run_bounded(one, wanted, limit=concurrency(self))
        return DeleteResult(
            {key: error for key, error in zip(wanted, found, strict=True) if error is not None}
        )

    def close(self) -> None:
        """Release connections and handles; the default holds none."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._url!r})"


def check_key(key: str) -> str:
    """Validate an object key, raising :class:`UsageError` with what to fix."""
    if not isinstance(key, str):
        raise UsageError(f"object key must be a str, got {type(key).__name__}")
    if not key:
        raise UsageError("object key must not be empty")
    if key.startswith("/") or key.endswith("/"):
        raise UsageError(f"object key {key!r} must not start or end with '/'")
    if "\x00" in key:
        raise UsageError(f"object key {key!r} must not contain NUL")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise UsageError(f"object key {key!r} has an empty, '.' or '..' segment")
    return key


def check_keys(keys: Iterable[str]) -> builtins.list[str]:
    """Validate the keys of a batched call (all of them, before anything is done: a bad one is
    a :class:`UsageError`); answers them in order, each once."""
    if isinstance(keys, str | bytes):
        raise UsageError("keys must be a collection of str keys, not one key")
    return builtins.list(dict.fromkeys(check_key(key) for key in keys))


def batches(keys: Sequence[str], size: int = DELETE_MANY_KEYS) -> builtins.list[Sequence[str]]:
    """``keys`` in runs of at most ``size``, in order (the requests of a ``delete_many``)."""
    return [keys[i : i + size] for i in range(0, len(keys), size)]


def check_prefix(prefix: str) -> str:
    """Validate a listing prefix (empty means everything)."""
    if not isinstance(prefix, str):
        raise UsageError(f"prefix must be a str, got {type(prefix).__name__}")
    if prefix.startswith("/") or ".." in prefix.split("/"):
        raise UsageError(f"prefix {prefix!r} must be relative and must not contain '..'")
    return prefix


def check_page(token: str | None, limit: int) -> None:
    """A list page's token is None or a str (the last key of the previous page); its limit a
    positive int."""
    if token is not None and not isinstance(token, str):
        raise UsageError(f"list token must be a str or None, got {type(token).__name__}")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise UsageError(f"list limit must be an int >= 1, got {limit!r}")


def check_data(data: bytes) -> bytes:
    """Objects hold bytes; reject anything else before touching the store."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise UsageError(f"object data must be bytes, got {type(data).__name__}")
    return bytes(data)


def check_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    """Validate user metadata: lower-case keys, str values, at most 2 KiB in all."""
    if not metadata:
        return {}
    checked: dict[str, str] = {}
    total = 0
    for k, v in metadata.items():
        if not isinstance(k, str) or not _METADATA_KEY.match(k):
            raise UsageError(
                f"metadata key {k!r} must be lower-case letters, digits and '-', 1-64 characters"
            )
        if k == PUT_ID_METADATA_KEY:
            raise UsageError(f"metadata key {k!r} is reserved for inkpen; choose another name")
        if not isinstance(v, str) or not v.isascii():
            raise UsageError(f"metadata value for {k!r} must be an ASCII str")
        total += len(k) + len(v)
        checked[k] = v
    if total > MAX_METADATA_BYTES:
        raise UsageError(f"metadata is {total} bytes; the limit is {MAX_METADATA_BYTES}")
    return checked


def check_range(start: int, end: int) -> None:
    """A byte range is two ints with 0 <= start <= end."""
    if not isinstance(start, int) or not isinstance(end, int):
        raise UsageError("byte range bounds must be ints")
    if start < 0 or end < start:
        raise UsageError(f"byte range [{start}, {end}) is invalid: need 0 <= start <= end")


def is_local(store: ObjectStore) -> bool:
    """Whether ``store`` (seen through any wrappers) answers with system calls or in memory, not
    with round trips: a local directory or a memory store, whose classes say so with
    ``local = True``. A reader then reads a large journal record in parts
    (:func:`~inkpen.manifest.fetch.reads_in_parts`), and a writer lets several large values
    share one journal segment (``max_batch_bytes``)."""
    return bool(getattr(innermost(store), "local", False))


def put_pieces_if_absent(
    store: ObjectStore,
    key: str,
    pieces: Sequence[bytes],
    *,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """``put_if_absent`` of the bytes ``pieces`` join into, in order.

    A store whose class defines ``put_pieces_if_absent`` beside its own ``put_if_absent`` (a
    local directory writes pieces with gathering writes; the counting wrapper passes them on)
    is given the pieces; any other store is given them joined, so that a class that overrides
    ``put_if_absent`` alone (a wrapper injecting faults, a subclass watching writes) still sees
    every create.
    """
    cls = type(store)
    if _defined_by(cls, "put_pieces_if_absent") is _defined_by(cls, "put_if_absent"):
        cls.put_pieces_if_absent(store, key, pieces, metadata=metadata)  # type: ignore[attr-defined]
    else:
        store.put_if_absent(key, b"".join(pieces), metadata=metadata)


def _defined_by(cls: type, name: str) -> type | None:
    """The class of ``cls``'s method resolution order that defines ``name``, or None."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    return None


def innermost(store: ObjectStore) -> ObjectStore:
    """The store under any wrappers (anything with an ``inner`` store), so that a copy can tell
    whether its source is really a store of its own kind and copy server-side."""
    seen = 0
    while isinstance(getattr(store, "inner", None), ObjectStore) and seen < 32:
        store = store.inner  # type: ignore[attr-defined]
        seen += 1
    return store
