"""A Reader with a disk cache in its own process, for the tests of a cache directory shared by
several processes.

Run as ``python disk_cache_process.py URL CACHE_DIR CACHE_BYTES SEED GETS``. The database at
URL holds bucket ``d``: keys ``k00000``... whose values ``value_of(i)`` gives. The process opens
``inkpen.open_reader(URL)`` with that disk cache and no memory caches (every read goes through
the disk cache), gets GETS random keys (seeded), checks each value, and prints ``ok <hits>
<misses> <evicted>``; a wrong value, or any error, exits non-zero saying which.
"""

from __future__ import annotations

import random
import sys

import inkpen

KEYS = 3000


def value_of(i: int) -> bytes:
    """The value of key ``k%05d % i``: its own bytes, some kept in the ledger, most in the
    journal."""
    return random.Random(i).randbytes(100 if i % 3 == 0 else 1500)


def main() -> None:
    url, directory = sys.argv[1], sys.argv[2]
    capacity, seed, gets = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    rng = random.Random(seed)
    with inkpen.open_reader(
        url,
        cache_dir=directory,
        cache_dir_bytes=capacity,
        block_cache_bytes=0,
        journal_cache_bytes=0,
        journal_index_cache_bytes=0,
    ) as reader:
        for _ in range(gets):
            i = rng.randrange(KEYS)
            found = reader.get("d", f"k{i:05d}")
            if found != value_of(i):
                print(f"wrong value for k{i:05d}", flush=True)
                sys.exit(2)
        tables = reader._tables
        assert tables is not None and tables.disk_cache is not None
        stats = tables.disk_cache.stats()
    print(f"ok {stats.hits} {stats.misses} {stats.evicted}", flush=True)


if __name__ == "__main__":
    main()
