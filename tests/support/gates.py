"""Store wrappers that watch reads in flight, for the tests of concurrent reads and read-ahead.

:class:`GatedStore` holds every ranged read of an SST or journal file, while armed, until
``parties`` of them are in flight at once (a barrier with a deadline): reads that a lock, or a
loop, made one at a time could never all be in flight together, so the barrier breaks and the
read fails. :class:`InFlightStore` counts the reads and bytes in flight and the most seen at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence

from inkpen.errors import StoreError
from inkpen.objectstore import ObjectInfo, ObjectStore
from inkpen.objectstore.base import DEFAULT_PAGE_SIZE, ListPage, StoreBase

FILE_PREFIXES = ("ledger/", "journal/compacted/")


class PassThrough(StoreBase):
    """Every call passed to ``inner`` (subclasses watch the reads)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    @property
    def url(self) -> str:
        return self.inner.url

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        self.inner.put_if_absent(key, data, metadata=metadata)

    def put(self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None) -> None:
        self.inner.put(key, data, metadata=metadata)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self.inner.get_range(key, start, end)

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        return self.inner.get_ranges(key, ranges)

    def head(self, key: str) -> ObjectInfo:
        return self.inner.head(key)

    def list_page(
        self, prefix: str = "", *, token: str | None = None, limit: int = DEFAULT_PAGE_SIZE
    ) -> ListPage:
        return self.inner.list_page(prefix, token=token, limit=limit)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def copy(self, src_key: str, dest_key: str, *, source: ObjectStore | None = None) -> None:
        self.inner.copy(src_key, dest_key, source=source)

    def close(self) -> None:
        self.inner.close()


class GatedStore(PassThrough):
    """While :attr:`armed`, each ranged read of an SST or journal file waits until ``parties``
    such reads are in flight, then all of them go on together; a read that waits ``timeout``
    seconds in vain fails (``StoreError``), and so do the others of its group. ``reads`` counts
    the reads that passed the gate. ``gates(key, start)`` (every file read by default) chooses
    the reads that wait."""

    def __init__(
        self,
        inner: ObjectStore,
        parties: int,
        timeout: float = 30.0,
        gates: Callable[[str, int], bool] | None = None,
    ) -> None:
        super().__init__(inner)
        self.armed = False
        self.reads = 0
        self._gates = gates
        self._count = threading.Lock()
        self._barrier = threading.Barrier(parties, timeout=timeout)

    def _gate(self, key: str, start: int = 0) -> None:
        if not self.armed or not key.startswith(FILE_PREFIXES):
            return
        if self._gates is not None and not self._gates(key, start):
            return
        try:
            self._barrier.wait()
        except threading.BrokenBarrierError:
            raise StoreError(
                f"a read of {key} waited in vain for {self._barrier.parties} reads in flight",
                definite=True,
                key=key,
            ) from None
        with self._count:
            self.reads += 1

    def get_range(self, key: str, start: int, end: int) -> bytes:
        self._gate(key, start)
        return super().get_range(key, start, end)

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        self._gate(key, min((start for start, _ in ranges), default=0))
        return super().get_ranges(key, ranges)


class InFlightStore(PassThrough):
    """Counts the ranged reads of SST and journal files in flight: ``in_flight`` reads of
    ``bytes_in_flight`` bytes now, at most ``most_reads`` and ``most_bytes`` at once, ``started``
    in all; ``after_mark`` counts those that started after :meth:`mark`."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self.in_flight = 0
        self.bytes_in_flight = 0
        self.most_reads = 0
        self.most_bytes = 0
        self.started = 0
        self.after_mark = 0
        self._marked = False

    def mark(self) -> None:
        """Count from now the reads that start (``after_mark``)."""
        with self._lock:
            self._marked = True
            self.after_mark = 0

    def reset(self) -> None:
        """Forget the most seen at once (the counts of reads in flight stay)."""
        with self._lock:
            self.most_reads = self.in_flight
            self.most_bytes = self.bytes_in_flight

    def _begin(self, key: str, size: int) -> bool:
        if not key.startswith(FILE_PREFIXES):
            return False
        with self._lock:
            self.in_flight += 1
            self.bytes_in_flight += size
            self.started += 1
            if self._marked:
                self.after_mark += 1
            self.most_reads = max(self.most_reads, self.in_flight)
            self.most_bytes = max(self.most_bytes, self.bytes_in_flight)
        return True

    def _end(self, size: int) -> None:
        with self._lock:
            self.in_flight -= 1
            self.bytes_in_flight -= size

    def get_range(self, key: str, start: int, end: int) -> bytes:
        size = max(0, end - start)
        counted = self._begin(key, size)
        try:
            return super().get_range(key, start, end)
        finally:
            if counted:
                self._end(size)

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        size = sum(max(0, end - start) for start, end in ranges)
        counted = self._begin(key, size)
        try:
            return super().get_ranges(key, ranges)
        finally:
            if counted:
                self._end(size)
