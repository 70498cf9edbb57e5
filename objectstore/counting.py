"""Request and byte counts around any object store, for benchmarks and cost checks.

Every call that reaches the store counts as one request of its kind, whether it succeeds or
fails (a list counts one request per page, a ``delete_many`` one delete per
:data:`~inkpen.objectstore.base.DELETE_MANY_KEYS` keys: the requests a batched delete makes);
a call refused as a :class:`UsageError` reached nothing and is not counted. Bytes are counted
for calls that succeed: the payload of a put, the bytes a get returns. A server-side copy moves
no bytes through the caller.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

from inkpen.errors import UsageError

from .base import (
    DEFAULT_PAGE_SIZE,
    DELETE_MANY_KEYS,
    DeleteResult,
    ListPage,
    ObjectInfo,
    ObjectStore,
    StoreBase,
    check_keys,
    put_pieces_if_absent,
)
from .parallel import concurrency

_T = TypeVar("_T")

COUNTERS = ("puts", "gets", "heads", "lists", "deletes", "copies", "bytes_written", "bytes_read")


_INDEX = {name: i for i, name in enumerate(COUNTERS)}
_PUTS, _GETS = _INDEX["puts"], _INDEX["gets"]
_WRITTEN, _READ = _INDEX["bytes_written"], _INDEX["bytes_read"]


class RequestCounts:
    """Request and byte counts by kind (:data:`COUNTERS`), thread-safe; one may be shared by the
    :class:`CountingStore` wrappers of several stores (a database's own and its parents')."""

    __slots__ = ("_lock", "_values")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = [0] * len(COUNTERS)

    def add(self, counter: str, amount: int = 1) -> None:
        with self._lock:
            self._values[_INDEX[counter]] += amount

    def transfer(self, request: int, moved: int, nbytes: int) -> None:
        """One request (slot ``request``) that moved ``nbytes`` (slot ``moved``): both counted
        under one lock."""
        with self._lock:
            values = self._values
            values[request] += 1
            values[moved] += nbytes

    def snapshot(self) -> dict[str, int]:
        """The counts so far, as a new dict keyed by :data:`COUNTERS`."""
        with self._lock:
            return dict(zip(COUNTERS, self._values, strict=True))

    def reset(self) -> None:
        """Set every count back to zero."""
        with self._lock:
            self._values = [0] * len(COUNTERS)


class CountingStore(StoreBase):
    """Wraps a store and counts its requests by kind and its bytes in and out (thread-safe).

    ``puts`` covers ``put`` and ``put_if_absent``; ``gets`` covers ``get`` and ``get_range``.
    ``counts``: where to count (shared with other wrappers); a new :class:`RequestCounts` by
    default.
    """

    def __init__(self, inner: ObjectStore, *, counts: RequestCounts | None = None) -> None:
        self.inner = inner
        self.counts = RequestCounts() if counts is None else counts
        self.concurrency = concurrency(inner)

    @property
    def url(self) -> str:
        return self.inner.url

    def snapshot(self) -> dict[str, int]:
        """The counts so far, as a new dict keyed by :data:`COUNTERS`."""
        return self.counts.snapshot()

    def reset(self) -> None:
        """Set every count back to zero."""
        self.counts.reset()

    def _add(self, counter: str, amount: int = 1) -> None:
        self.counts.add(counter, amount)

    def _request(self, counter: str, operation: Callable[[], _T]) -> _T:
        try:
            result = operation()
        except UsageError:
            raise
        except BaseException:
            self._add(counter)
            raise
        self._add(counter)
        return result

    # -- the protocol ------------------------------------------------------------------------

    # The four calls on every read and write path are written out (no closure; one call that
    # counts the request and its bytes under one lock): a handle with metrics counts every
    # request of its reads and writes through this wrapper.

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        try:
            self.inner.put_if_absent(key, data, metadata=metadata)
        except UsageError:
            raise
        except BaseException:
            self._add("puts")
            raise
        self.counts.transfer(_PUTS, _WRITTEN, memoryview(data).nbytes)

    def put_pieces_if_absent(
        self, key: str, pieces: Sequence[bytes], *, metadata: Mapping[str, str] | None = None
    ) -> None:
        """:meth:`put_if_absent` of the bytes ``pieces`` join into, passed on as pieces
        (:func:`~inkpen.objectstore.base.put_pieces_if_absent`), counted as one put."""
        try:
            put_pieces_if_absent(self.inner, key, pieces, metadata=metadata)
        except UsageError:
            raise
        except BaseException:
            self._add("puts")
            raise
        self.counts.transfer(_PUTS, _WRITTEN, sum(map(len, pieces)))

    def put(self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None) -> None:
        try:
            self.inner.put(key, data, metadata=metadata)
        except UsageError:
            raise
        except BaseException:
            self._add("puts")
            raise
        self.counts.transfer(_PUTS, _WRITTEN, memoryview(data).nbytes)

    def get(self, key: str) -> bytes:
        try:
            data = self.inner.get(key)
        except UsageError:
            raise
        except BaseException:
            self._add("gets")
            raise
        self.counts.transfer(_GETS, _READ, len(data))
        return data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        try:
            data = self.inner.get_range(key, start, end)
        except UsageError:
            raise
        except BaseException:
            self._add("gets")
            raise
        self.counts.transfer(_GETS, _READ, len(data))
        return data

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The inner store's answer, counted as one request per range (what a store that
        cannot serve them together makes)."""
        try:
            found = self.inner.get_ranges(key, ranges)
        except UsageError:
            raise
        except BaseException:
            self._add("gets", len(ranges))
            raise
        self._add("gets", len(ranges))
        self._add("bytes_read", sum(map(len, found)))
        return found

    def head(self, key: str) -> ObjectInfo:
        return self._request("heads", lambda: self.inner.head(key))

    def list_page(
        self, prefix: str = "", *, token: str | None = None, limit: int = DEFAULT_PAGE_SIZE
    ) -> ListPage:
        return self._request(
            "lists", lambda: self.inner.list_page(prefix, token=token, limit=limit)
        )

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """The inner store's listing (which may walk its objects once rather than page by
        page), counted as the requests a paged listing makes: one per page of
        :data:`DEFAULT_PAGE_SIZE` objects."""
        listed = 0
        try:
            for info in self.inner.list(prefix):
                if listed % DEFAULT_PAGE_SIZE == 0:
                    self._add("lists")
                listed += 1
                yield info
        except (UsageError, GeneratorExit):  # a bad prefix, or the caller stopped reading
            raise
        except BaseException:
            self._add("lists")
            raise
        if not listed:
            self._add("lists")

    def delete(self, key: str) -> None:
        self._request("deletes", lambda: self.inner.delete(key))

    def delete_many(self, keys: Iterable[str]) -> DeleteResult:
        """The inner store's batched delete, counted as one delete per
        :data:`~inkpen.objectstore.base.DELETE_MANY_KEYS` keys."""
        wanted = check_keys(keys)
        requests = math.ceil(len(wanted) / DELETE_MANY_KEYS)
        try:
            result = self.inner.delete_many(wanted)
        except UsageError:
            raise
        except BaseException:
            self._add("deletes", requests)
            raise
        self._add("deletes", requests)
        return result

    def copy(self, src_key: str, dest_key: str, *, source: ObjectStore | None = None) -> None:
        self._request("copies", lambda: self.inner.copy(src_key, dest_key, source=source))

    def close(self) -> None:
        self.inner.close()
