"""The timed workloads of ``inkpen bench``: load, get and scan over one open Bookie.

They follow the benchmark protocol shared with the peer harness, so that both systems can be
compared as ratios: N keys ``key%013d`` shuffled with ``random.Random(1)``, all in one bucket,
every value the same ``value_size`` random bytes (as the peer does).

- **load**: N puts from C client threads; each put returns only once it is durable in a journal
  object, so a client waits for durability before its next put.
- **get**: the keys ``random.Random(2).sample`` picks, one client, every value checked.
- **scan**: one pass over every object of the bucket in key order, every key's order and every
  value checked.

Each workload answers a :class:`Timing`; nothing here opens a store or prints.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from inkpen.bookie import Bookie

LOAD_SEED = 1
GET_SEED = 2


class BenchmarkFailed(Exception):
    """A workload read back something other than what it wrote: inkpen returned wrong data."""


@dataclass(frozen=True, slots=True)
class Timing:
    """What one workload measured: operations, wall time, and each operation's latency."""

    ops: int
    seconds: float
    latencies: tuple[float, ...] = ()
    """Seconds per operation, sorted; empty for a workload timed as a whole (scan)."""
    per_second: tuple[int, ...] = ()
    """Operations finished in each whole second of the run (the load only)."""

    def figures(self) -> dict[str, float | int]:
        """``ops``, ``seconds``, ``ops_per_s`` and, with latencies, ``p50_ms`` / ``p99_ms`` /
        ``max_ms``."""
        out: dict[str, float | int] = {
            "ops": self.ops,
            "seconds": round(self.seconds, 3),
            "ops_per_s": round(self.ops / self.seconds, 1) if self.seconds > 0 else 0.0,
        }
        lat = self.latencies
        if lat:
            out["p50_ms"] = round(lat[len(lat) // 2] * 1e3, 3)
            out["p99_ms"] = round(lat[int(len(lat) * 0.99)] * 1e3, 3)
            out["max_ms"] = round(lat[-1] * 1e3, 3)
        return out


def bench_keys(n: int) -> list[bytes]:
    """The protocol's N keys, in the shuffled order the load writes them."""
    keys = [b"key%013d" % i for i in range(n)]
    random.Random(LOAD_SEED).shuffle(keys)
    return keys


def get_sample(keys: Sequence[bytes], count: int) -> list[bytes]:
    """The keys the get workload reads, in order."""
    return random.Random(GET_SEED).sample(list(keys), min(count, len(keys)))


def run_load(
    book: Bookie, bucket: bytes, keys: Sequence[bytes], value: bytes, concurrency: int
) -> Timing:
    """Put every key from ``concurrency`` threads, each put waiting until it is durable."""
    queue = list(reversed(keys))
    latencies: list[float] = []
    finished: list[float] = []
    errors: list[BaseException] = []

    def client() -> None:
        clock = time.perf_counter
        while True:
            try:
                key = queue.pop()
            except IndexError:
                return
            started = clock()
            try:
                book.put(bucket, key, value)
            except BaseException as exc:
                errors.append(exc)
                queue.clear()
                return
            done = clock()
            latencies.append(done - started)
            finished.append(done)

    threads = [
        threading.Thread(target=client, name=f"bench-load-{i}", daemon=True)
        for i in range(max(1, concurrency))
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    if errors:
        raise errors[0]
    per_second = [0] * max(1, int(seconds) + 1)
    for done in finished:
        per_second[min(len(per_second) - 1, int(done - started))] += 1
    return Timing(len(keys), seconds, tuple(sorted(latencies)), tuple(per_second))


def run_gets(book: Bookie, bucket: bytes, sample: Sequence[bytes], value: bytes) -> Timing:
    """Get every key of ``sample`` from one thread; each must read back ``value``."""
    seconds, latencies = _get_loop(book, bucket, sample, value)
    latencies.sort()
    return Timing(len(sample), seconds, tuple(latencies))


def run_gets_threaded(
    book: Bookie, bucket: bytes, sample: Sequence[bytes], value: bytes, threads: int
) -> Timing:
    """Get every key of ``sample`` from ``threads`` threads, each its share of the sample."""
    results: list[tuple[float, list[float]]] = []
    errors: list[BaseException] = []

    def client(share: Sequence[bytes]) -> None:
        try:
            results.append(_get_loop(book, bucket, share, value))
        except BaseException as exc:
            errors.append(exc)

    workers = [
        threading.Thread(target=client, args=(sample[i::threads],), name=f"bench-get-{i}")
        for i in range(threads)
    ]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - started
    if errors:
        raise errors[0]
    latencies = sorted(lat for _, share in results for lat in share)
    return Timing(len(sample), seconds, tuple(latencies))


def _get_loop(
    book: Bookie, bucket: bytes, sample: Sequence[bytes], value: bytes
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    clock = time.perf_counter
    started = clock()
    for key in sample:
        began = clock()
        got = book.get(bucket, key)
        latencies.append(clock() - began)
        if got != value:
            raise BenchmarkFailed(
                f"get {key!r} returned {_describe(got)}, not the {len(value)} bytes written"
            )
    return clock() - started, latencies


def run_scan(book: Bookie, bucket: bytes, value: bytes, expected: int) -> Timing:
    """Read every object of ``bucket`` in key order; all ``expected`` must be there."""
    count = 0
    previous = b""
    started = time.perf_counter()
    with book.objects(bucket) as rows:
        for _, key, got in rows:
            if got != value or key <= previous:
                raise BenchmarkFailed(
                    f"scan gave {key!r} after {previous!r} with {_describe(got)}; expected keys "
                    f"in order, each with the {len(value)} bytes written"
                )
            previous = key
            count += 1
    seconds = time.perf_counter() - started
    if count != expected:
        raise BenchmarkFailed(f"scan found {count} objects, {expected} were written")
    return Timing(count, seconds)


def _describe(got: bytes | None) -> str:
    return "nothing" if got is None else f"{len(got)} other bytes"
