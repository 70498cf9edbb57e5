"""The block cache the file readers share: its protocol and a byte-weighted, thread-safe LRU.

Readers cache decoded blocks (ready to search) under keys they choose; the cache only weighs and
evicts. One :class:`LruCache` is meant to be shared by every reader of a database, from many
threads at once.

No lock is ever held while a value is loaded (a ranged read of the store, a round trip on an
object store): :meth:`LruCache.load` lets one thread load a missing key while the threads that
want the same key wait for its answer (:class:`SingleFlight`), and threads that want other keys
load them at the same time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


@runtime_checkable
class BlockCache(Protocol):
    """What a reader needs from a cache: look up a key, store a value with its weight in bytes."""

    def get(self, key: Hashable) -> object | None:
        """The cached value, or None."""
        ...

    def put(self, key: Hashable, value: object, weight: int) -> None:
        """Store ``value``, which costs about ``weight`` bytes of memory."""
        ...

    def load(self, key: Hashable, loader: Callable[[], tuple[object, int]]) -> object:
        """The value cached under ``key``, or the value ``loader()`` answers (with its weight),
        then cached: one thread runs the loader while the others that want ``key`` wait for
        its answer."""
        ...

    def holds(self, key: Hashable) -> bool:
        """Whether ``key`` is cached, without counting a hit or a miss or making it recent."""
        ...

    def room(self) -> int:
        """Bytes the cache would take now without evicting anything (a hint: other threads may
        change it at any time)."""
        ...


class SingleFlight:
    """One loader per key at a time, and no lock held while it runs.

    The first thread to :meth:`run` a key runs its loader; threads that ask for the same key
    while it runs wait for that answer rather than load it again (two gets of one cold block
    make one request). Threads asking for other keys are never held up: the lock guards only
    the table of loads under way. A waiter whose leader failed runs its own loader (the
    leader's error is the leader's; this thread may succeed, and raises its own error if not).
    """

    __slots__ = ("_lock", "_running", "waiting")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[Hashable, Future[object]] = {}
        self.waiting = 0
        """Threads waiting now for another's load."""

    def __len__(self) -> int:
        """Loads under way."""
        return len(self._running)

    def run(self, key: Hashable, loader: Callable[[], T]) -> T:
        """``loader()``, or the answer of the loader another thread runs for ``key`` now."""
        mine: Future[object] = Future()
        with self._lock:
            running = self._running.setdefault(key, mine)
            if running is not mine:
                self.waiting += 1
        if running is not mine:
            try:
                return running.result()  # type: ignore[return-value]
            except Exception:
                return loader()
            finally:
                with self._lock:
                    self.waiting -= 1
        try:
            value = loader()
        except BaseException as exc:
            mine.set_exception(exc)
            raise
        finally:
            with self._lock:
                del self._running[key]
        mine.set_result(value)
        return value


@dataclass(frozen=True, slots=True)
class CacheStats:
    """A snapshot of a cache's counters."""

    hits: int
    misses: int
    entries: int
    weight: int
    capacity: int


class LruCache:
    """A least-recently-used cache bounded by the total weight (bytes) of what it holds.

    Every operation is O(1); changes take one lock and lookups none, so one cache may be shared
    by many threads. A value heavier than the whole capacity is not cached.
    """

    __slots__ = ("_capacity", "_entries", "_flights", "_hits", "_lock", "_misses", "_weight")

    def __init__(self, capacity_bytes: int) -> None:
        if not isinstance(capacity_bytes, int) or capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be a non-negative int, got {capacity_bytes!r}")
        self._capacity = capacity_bytes
        self._entries: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self._weight = 0
        self._hits = 0
        self._misses = 0
        self._lock = threading.Lock()
        self._flights = SingleFlight()

    def get(self, key: Hashable) -> object | None:
        """The value cached under ``key`` (now the most recently used), or None.

        Every read of every reader comes here, so a lookup takes no lock: a dict lookup and a
        move to the recent end are each atomic under the interpreter lock, and an entry evicted
        between the two is simply a hit on a value that is leaving. The hit and miss counters
        may undercount slightly while threads race; weights and evictions stay exact.
        """
        found = self._entries.get(key)
        if found is None:
            self._misses += 1
            return None
        try:
            self._entries.move_to_end(key)
        except KeyError:
            return found[0]  # evicted by another thread since the lookup: still a hit
        self._hits += 1
        return found[0]

    def load(self, key: Hashable, loader: Callable[[], tuple[object, int]]) -> object:
        """The value cached under ``key``; on a miss, ``loader()`` answers ``(value, weight)``,
        which is cached and answered. One thread loads a missing key while the others that want
        it wait for its answer (:class:`SingleFlight`); no lock is held while it loads."""
        found = self.get(key)
        if found is not None:
            return found
        return self._flights.run(key, lambda: self._loaded(key, loader))

    @property
    def flights(self) -> SingleFlight:
        """The loads under way (:meth:`load`)."""
        return self._flights

    def holds(self, key: Hashable) -> bool:
        """Whether ``key`` is cached now (no hit or miss counted, its recency unchanged)."""
        return key in self._entries

    def room(self) -> int:
        """Capacity not taken, read without the lock (a hint: other threads may change it)."""
        return self._capacity - self._weight

    def _loaded(self, key: Hashable, loader: Callable[[], tuple[object, int]]) -> object:
        found = self._entries.get(key)  # a load that ended between the miss and this one
        if found is not None:
            return found[0]
        value, weight = loader()
        self.put(key, value, weight)
        return value

    def put(self, key: Hashable, value: object, weight: int) -> None:
        """Cache ``value`` under ``key``, evicting the least recently used to stay in capacity."""
        if weight < 0:
            raise ValueError(f"weight must be non-negative, got {weight}")
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._weight -= old[1]
            if weight > self._capacity:
                return
            self._entries[key] = (value, weight)
            self._weight += weight
            while self._weight > self._capacity:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._weight -= evicted

    def clear(self) -> None:
        """Drop everything (the counters stay)."""
        with self._lock:
            self._entries.clear()
            self._weight = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def weight(self) -> int:
        """Total weight of the cached values."""
        with self._lock:
            return self._weight

    def stats(self) -> CacheStats:
        """Hits, misses, entry count, weight and capacity, read together."""
        with self._lock:
            return CacheStats(
                self._hits, self._misses, len(self._entries), self._weight, self._capacity
            )
