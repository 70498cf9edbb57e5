"""The block cache the file readers share: its protocol and a byte-weighted, thread-safe LRU.

Readers cache decoded blocks (ready to search) under keys they choose; the cache only weighs and
evicts. One :class:`LruCache` is meant to be shared by every reader of a database, from many
threads at once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@runtime_checkable
class BlockCache(Protocol):
    """What a reader needs from a cache: look up a key, store a value with its weight in bytes."""

    def get(self, key: Hashable) -> object | None:
        """The cached value, or None."""
        ...

    def put(self, key: Hashable, value: object, weight: int) -> None:
        """Store ``value``, which costs about ``weight`` bytes of memory."""
        ...


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

    __slots__ = ("_capacity", "_entries", "_hits", "_lock", "_misses", "_weight")

    def __init__(self, capacity_bytes: int) -> None:
        if not isinstance(capacity_bytes, int) or capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be a non-negative int, got {capacity_bytes!r}")
        self._capacity = capacity_bytes
        self._entries: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self._weight = 0
        self._hits = 0
        self._misses = 0
        self._lock = threading.Lock()

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
