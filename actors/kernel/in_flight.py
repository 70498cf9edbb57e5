"""Objects this writer has stored but not yet committed to the manifest.

A new SST or journal file exists on the store a moment before the manifest change that makes it
part of the database. The writer's own GC must never take it for an orphan in that window, so the
clerk that writes a file records its name here first and its owner forgets it once the commit is
done (or has failed, leaving a real orphan). An entry also lapses after ``LAPSE`` seconds, so a
file whose owner never comes back is eventually collected like any other orphan.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

LAPSE = 3600.0


class InFlight:
    """Names of uncommitted objects; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: dict[str, float] = {}

    def add(self, name: str) -> None:
        with self._lock:
            self._names[name] = time.monotonic()

    def discard(self, names: Iterable[str]) -> None:
        with self._lock:
            for name in names:
                self._names.pop(name, None)

    def names(self) -> frozenset[str]:
        cutoff = time.monotonic() - LAPSE
        with self._lock:
            for name in [n for n, t in self._names.items() if t < cutoff]:
                del self._names[name]
            return frozenset(self._names)
