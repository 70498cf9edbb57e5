"""A store that shows whether requests overlap: :class:`OverlapStore`.

``expect(kind, parties, prefix)`` holds the next ``parties`` requests of ``kind`` (``"get"``,
``"head"``, ``"copy"``, ``"delete_many"``) on keys under ``prefix`` at a barrier that opens only
once all of them are in flight together: code that sends them one after another never gets
there, and the barrier's deadline breaks it (the request then fails, and so does the test). It
never measures time: a run that overlaps passes at once, however busy the machine. ``most``
records, per kind, the most requests ever in flight at once.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TypeVar

from inkpen.objectstore import ObjectInfo, ObjectStore
from inkpen.objectstore.base import DeleteResult
from inkpen.objectstore.counting import CountingStore

T = TypeVar("T")
BARRIER_TIMEOUT = 60.0


class OverlapStore(CountingStore):
    """Counts requests as :class:`CountingStore` does; holds the expected ones at a barrier."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self._barriers: list[tuple[str, str | tuple[str, ...], threading.Barrier, list[int]]] = []
        self._flying: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.met: list[str] = []

    def expect(self, kind: str, parties: int, prefix: str | tuple[str, ...] = "") -> None:
        """Hold the next ``parties`` requests of ``kind`` under ``prefix`` (or one of several)
        until they are all in flight at once."""
        with self._lock:
            self._barriers.append(
                (kind, prefix, threading.Barrier(parties, timeout=BARRIER_TIMEOUT), [parties])
            )

    def _run(self, kind: str, key: str, operation: Callable[[], T]) -> T:
        barrier: threading.Barrier | None = None
        with self._lock:
            self._flying[kind] += 1
            self.most[kind] = max(self.most[kind], self._flying[kind])
            for wanted, prefix, candidate, left in self._barriers:
                if wanted == kind and key.startswith(prefix) and left[0] > 0:
                    left[0] -= 1
                    barrier = candidate
                    break
        try:
            if barrier is not None and barrier.wait() == 0:
                with self._lock:
                    self.met.append(kind)
            return operation()
        finally:
            with self._lock:
                self._flying[kind] -= 1

    def get(self, key: str) -> bytes:
        return self._run("get", key, lambda: super(OverlapStore, self).get(key))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self._run("get", key, lambda: super(OverlapStore, self).get_range(key, start, end))

    def head(self, key: str) -> ObjectInfo:
        return self._run("head", key, lambda: super(OverlapStore, self).head(key))

    def copy(self, src_key: str, dest_key: str, *, source: ObjectStore | None = None) -> None:
        self._run(
            "copy",
            dest_key,
            lambda: super(OverlapStore, self).copy(src_key, dest_key, source=source),
        )

    def delete_many(self, keys: Iterable[str]) -> DeleteResult:
        wanted = list(keys)
        first = wanted[0] if wanted else ""
        return self._run(
            "delete_many", first, lambda: super(OverlapStore, self).delete_many(wanted)
        )
