"""inkpen's block cache (formats/cache.py) against cachetools' size-weighted LRU behind a lock.

    pip install cachetools && python benchmarks/cache_compare.py

400,000 get-or-put operations over 20,000 block keys of 400-600 bytes into a 4 MiB cache (about
half the working set fits), one thread; prints ns per operation and the hit ratio, three rounds
each, alternating.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import cachetools

from inkpen.formats.cache import LruCache

N_KEYS, OPS, CAP = 20000, 400_000, 4 * 1024 * 1024
rng = random.Random(1)
keys = [("sst", rng.randrange(N_KEYS)) for _ in range(OPS)]
weights = {k: 400 + (hash(k) % 200) for k in set(keys)}


class CachetoolsLru:
    """cachetools.LRUCache weighed by the block's size, with the lock inkpen's readers need."""

    def __init__(self, capacity: int) -> None:
        self._cache: Any = cachetools.LRUCache(maxsize=capacity, getsizeof=lambda v: v[1])
        self._lock = threading.Lock()

    def get(self, key: object) -> object | None:
        with self._lock:
            found = self._cache.get(key)
        return None if found is None else found[0]

    def put(self, key: object, value: object, weight: int) -> None:
        with self._lock:
            self._cache[key] = (value, weight)


def run(cache: Any) -> tuple[float, float]:
    hits = 0
    started = time.perf_counter()
    for key in keys:
        if cache.get(key) is not None:
            hits += 1
        else:
            cache.put(key, b"block", weights[key])
    return (time.perf_counter() - started) / OPS * 1e9, hits / OPS


def main() -> None:
    makers: list[tuple[str, Any]] = [
        ("inkpen LruCache", lambda: LruCache(CAP)),
        ("cachetools LRUCache+lock", lambda: CachetoolsLru(CAP)),
    ]
    for name, make in makers * 3:
        ns, ratio = run(make())
        print(f"{name:26s} {ns:7.0f} ns/op  hit ratio {ratio:.3f}")


if __name__ == "__main__":
    main()
