"""Reads on a store whose every request costs a round trip: cold gets from 1 and 32 threads, a
cold full scan with and without the delay, and a restart that reads its hot blocks from a local
disk cache. Prints the figures as JSON.

The database (``--n`` objects of ``--value-size`` bytes, written in batches of 1,000, flushed and
merged) lives in a local directory. Each measured handle reads it through a
:class:`~inkpen.objectstore.CountingStore` over a :class:`~inkpen.objectstore.FaultyStore` that
delays every request by ``--delay-ms`` (``FaultPlan(delay=(d, d))``; no failures), so a request
costs what a round trip to an object store costs, whatever the store does with it.

- ``cold_gets``: keys spaced through the key order so that no two share a ledger run (every get
  is cold: its ledger block is not cached), read by 1 thread and then, other keys, by
  ``--threads`` threads; gets/s of each, the ratio, store requests per get.
- ``scan``: ``Bookie.objects()`` over every object from a freshly opened handle (nothing
  cached), without the delay, with it, and with it but no read-ahead (``read_ahead_bytes=0``),
  the three taking turns ``--rounds`` times (the fastest of each); rows/s of each, the ratios to
  the scan without delay, requests per 1,000 rows.
- ``disk_cache``: a handle with ``cache_dir`` reads a set of keys, closes; a new handle on the
  same directory (a restarted process) reads them again: requests per get of each.

Run: ``python benchmarks/latency_reads.py [--n 100000] [--value-size 100] [--delay-ms 25]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import inkpen
from inkpen.objectstore import CountingStore, FaultPlan, FaultyStore, open_store

BUCKET = "b"


def key_of(i: int) -> str:
    return f"key{i:09d}"


def load(url: str, n: int, value_size: int) -> None:
    rng = random.Random(1)
    with inkpen.open(url) as book:
        batch = inkpen.Batch()
        for i in range(n):
            batch.put(BUCKET, key_of(i), rng.randbytes(value_size))
            if len(batch) == 1000:
                book.write(batch)
                batch = inkpen.Batch()
        if len(batch):
            book.write(batch)
        book.flush()
        book.compact_ledger()


@contextmanager
def delayed(url: str, delay: float) -> Iterator[CountingStore]:
    """The database at ``url`` through a store that delays every request by ``delay`` s."""
    inner = open_store(url)
    store: Any = inner if delay <= 0 else FaultyStore(inner, FaultPlan(delay=(delay, delay)))
    counting = CountingStore(store)
    try:
        yield counting
    finally:
        counting.close()


def requests(store: CountingStore) -> int:
    counts = store.snapshot()
    return counts["gets"] + counts["heads"] + counts["lists"]


@contextmanager
def opened(store: CountingStore, **options: Any) -> Iterator[inkpen.Bookie]:
    with inkpen.open(store, **options) as book:
        # Merges left due and the GC pass an open starts read through the same store: let them
        # end so that what is counted around the reads is the reads'.
        book.compact_ledger()
        book.run_gc()
        yield book


def spaced_keys(n: int, count: int, seed: int) -> list[str]:
    """``count`` keys evenly spaced through the key order (no two in one ledger run at the
    default sizes), shuffled."""
    stride = n // count
    keys = [key_of(i * stride + stride // 2) for i in range(count)]
    random.Random(seed).shuffle(keys)
    return keys


def timed_gets(book: inkpen.Bookie, keys: Sequence[str], threads: int) -> float:
    """Seconds for ``threads`` threads to get ``keys`` (a share each); every value checked."""
    errors: list[BaseException] = []
    start = threading.Barrier(threads + 1)

    def run(share: Sequence[str]) -> None:
        try:
            start.wait()
            for key in share:
                if book.get(BUCKET, key) is None:
                    raise AssertionError(f"{key} is missing")
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(keys[i::threads],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - began
    if errors:
        raise errors[0]
    return seconds


def cold_gets(url: str, n: int, delay: float, threads: int, one: int, many: int) -> dict[str, Any]:
    keys = spaced_keys(n, one + many, seed=3)
    alone, together = keys[:one], keys[one:]
    with delayed(url, delay) as store, opened(store) as book:
        before = requests(store)
        t1 = timed_gets(book, alone, 1)
        middle = requests(store)
        tn = timed_gets(book, together, threads)
        after = requests(store)
    rate1, raten = one / t1, many / tn
    return {
        "one_thread_gets_per_s": round(rate1, 1),
        f"{threads}_threads_gets_per_s": round(raten, 1),
        "ratio": round(raten / rate1, 2),
        "requests_per_get_one_thread": round((middle - before) / one, 3),
        f"requests_per_get_{threads}_threads": round((after - middle) / many, 3),
    }


def scan(url: str, n: int, delay: float, **options: Any) -> dict[str, Any]:
    """A full scan from a freshly opened handle: nothing of the ledger or journal cached."""
    with delayed(url, delay) as store, opened(store, **options) as book:
        before = requests(store)
        began = time.perf_counter()
        rows = sum(1 for _ in book.objects(BUCKET))
        seconds = time.perf_counter() - began
        used = requests(store) - before
    assert rows == n, (rows, n)
    return {
        "rows_per_s": round(rows / seconds),
        "seconds": round(seconds, 2),
        "requests_per_1000_rows": round(1000 * used / rows, 2),
    }


def scans(url: str, n: int, delay: float, rounds: int) -> dict[str, Any]:
    """Cold full scans without the delay, with it, and with it but no read-ahead
    (``read_ahead_bytes=0``), taking turns ``rounds`` times; the fastest of each."""
    ways: dict[str, tuple[float, dict[str, Any]]] = {
        "no_delay": (0.0, {}),
        "delayed": (delay, {}),
        "delayed_no_read_ahead": (delay, {"read_ahead_bytes": 0}),
    }
    best: dict[str, dict[str, Any]] = {}
    for _ in range(rounds):
        for name, (pause, options) in ways.items():
            found = scan(url, n, pause, **options)
            if name not in best or found["rows_per_s"] > best[name]["rows_per_s"]:
                best[name] = found
    plain = best["no_delay"]["rows_per_s"]
    return {
        **best,
        "ratio": round(best["delayed"]["rows_per_s"] / plain, 2),
        "ratio_no_read_ahead": round(best["delayed_no_read_ahead"]["rows_per_s"] / plain, 2),
    }


def disk_cache(url: str, n: int, delay: float, count: int) -> dict[str, Any]:
    keys = spaced_keys(n, count, seed=4)
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="inkpen-disk-cache-") as directory:
        options = {"cache_dir": directory, "cache_dir_bytes": 1 << 30}
        for label in ("first_process", "restarted_process"):
            with delayed(url, delay) as store, opened(store, **options) as book:
                before = requests(store)
                seconds = timed_gets(book, keys, 1)
                figures[f"{label}_requests_per_get"] = round((requests(store) - before) / count, 3)
                figures[f"{label}_gets_per_s"] = round(count / seconds, 1)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--gets-one", type=int, default=80, help="cold gets of the 1 thread")
    parser.add_argument("--gets-many", type=int, default=960, help="cold gets of the threads")
    parser.add_argument("--cached-gets", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2, help="scans of each kind; the fastest")
    parser.add_argument(
        "--parts", default="gets,scan,disk", help="comma-separated: gets, scan, disk"
    )
    args = parser.parse_args()
    delay = args.delay_ms / 1000
    parts = set(args.parts.split(","))
    results: dict[str, Any] = {
        "n": args.n,
        "value_size": args.value_size,
        "delay_ms": args.delay_ms,
    }
    with tempfile.TemporaryDirectory(prefix="inkpen-latency-") as directory:
        url = str(Path(directory) / "db")
        began = time.perf_counter()
        load(url, args.n, args.value_size)
        results["load_s"] = round(time.perf_counter() - began, 1)
        if "gets" in parts:
            results["cold_gets"] = cold_gets(
                url, args.n, delay, args.threads, args.gets_one, args.gets_many
            )
            print(json.dumps({"cold_gets": results["cold_gets"]}), file=sys.stderr, flush=True)
        if "scan" in parts:
            results["scan"] = scans(url, args.n, delay, args.rounds)
            print(json.dumps({"scan": results["scan"]}), file=sys.stderr, flush=True)
        if "disk" in parts:
            if "cache_dir" in {f for f in inkpen.Options.__dataclass_fields__}:
                results["disk_cache"] = disk_cache(url, args.n, delay, args.cached_gets)
            else:
                results["disk_cache"] = "no cache_dir option in this inkpen"
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
