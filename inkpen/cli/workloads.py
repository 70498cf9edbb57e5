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

import itertools
import math
import random
import threading
import time
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import overload

from inkpen.bookie import Bookie

LOAD_SEED = 1
GET_SEED = 2


class BenchmarkFailed(Exception):
    """A workload read back something other than what it wrote: inkpen returned wrong data."""


class Latencies:
    """A latency histogram: logarithmic buckets 1% wide from 1 µs, and the exact maximum.

    It costs the same for 20,000 operations as for 5,000,000, so a load's own bookkeeping does
    not grow with N inside the process whose peak memory the benchmark reports; quantiles are
    within 1% of the exact ones.
    """

    _FLOOR = 1e-6
    _STEP = math.log(1.01)

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.count = 0
        self.max = 0.0

    def record(self, seconds: float) -> None:
        bucket = int(math.log(seconds / self._FLOOR) / self._STEP) if seconds > self._FLOOR else 0
        self.counts[bucket] = self.counts.get(bucket, 0) + 1
        self.count += 1
        if seconds > self.max:
            self.max = seconds

    @classmethod
    def merged(cls, parts: Iterable[Latencies]) -> Latencies:
        whole = cls()
        for part in parts:
            for bucket, count in part.counts.items():
                whole.counts[bucket] = whole.counts.get(bucket, 0) + count
            whole.count += part.count
            whole.max = max(whole.max, part.max)
        return whole

    def quantile(self, q: float) -> float:
        """The latency below which a fraction ``q`` of the operations finished (seconds)."""
        rank = min(self.count - 1, int(self.count * q))
        seen = 0
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            if seen > rank:
                return min(self.max, self._FLOOR * math.exp(self._STEP * (bucket + 1)))
        return self.max


@dataclass(frozen=True, slots=True)
class Timing:
    """What one workload measured: operations, wall time, and each operation's latency."""

    ops: int
    seconds: float
    latencies: Latencies | None = None
    """Per-operation latencies; None for a workload timed as a whole (scan)."""
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
        if lat is not None and lat.count:
            out["p50_ms"] = round(lat.quantile(0.5) * 1e3, 3)
            out["p99_ms"] = round(lat.quantile(0.99) * 1e3, 3)
            out["max_ms"] = round(lat.max * 1e3, 3)
        return out


class BenchKeys(Sequence[bytes]):
    """The protocol's N keys ``key%013d`` in the order the load writes them.

    The order is ``random.Random(LOAD_SEED).shuffle`` of the keys, as the peer harness does; it
    is kept as 8 bytes per key (the shuffled numbers) and each key is made when asked for, so
    the benchmark's own memory stays small beside the writer's at N = 5,000,000.
    """

    def __init__(self, n: int) -> None:
        order = array("q", range(n))
        random.Random(LOAD_SEED).shuffle(order)  # the same swaps as shuffling the keys
        self._order = order

    def __len__(self) -> int:
        return len(self._order)

    @overload
    def __getitem__(self, index: int) -> bytes: ...
    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...
    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        if isinstance(index, slice):
            return [b"key%013d" % i for i in self._order[index]]
        return b"key%013d" % self._order[index]


def bench_keys(n: int) -> BenchKeys:
    """The protocol's N keys, in the shuffled order the load writes them."""
    return BenchKeys(n)


def get_sample(keys: Sequence[bytes], count: int) -> list[bytes]:
    """The keys the get workload reads, in order."""
    return random.Random(GET_SEED).sample(keys, min(count, len(keys)))


def run_load(
    book: Bookie, bucket: bytes, keys: Sequence[bytes], value: bytes, concurrency: int
) -> Timing:
    """Put every key from ``concurrency`` threads, each put waiting until it is durable."""
    total = len(keys)
    turns = itertools.count()  # next() on it is atomic: each index goes to one client
    parts: list[tuple[Latencies, list[int]]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def client() -> None:
        clock = time.perf_counter
        latencies, finished = Latencies(), [0]
        parts.append((latencies, finished))
        while not stop.is_set():
            index = next(turns)
            if index >= total:
                return
            key = keys[index]
            began = clock()
            try:
                book.put(bucket, key, value)
            except BaseException as exc:
                errors.append(exc)
                stop.set()
                return
            done = clock()
            latencies.record(done - began)
            second = int(done - started)
            if second >= len(finished):
                finished.extend([0] * (second + 1 - len(finished)))
            finished[second] += 1

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
    for _, finished in parts:
        for second, count in enumerate(finished):
            per_second[min(len(per_second) - 1, second)] += count
    latencies = Latencies.merged(part for part, _ in parts)
    return Timing(total, seconds, latencies, tuple(per_second))


def run_gets(book: Bookie, bucket: bytes, sample: Sequence[bytes], value: bytes) -> Timing:
    """Get every key of ``sample`` from one thread; each must read back ``value``."""
    seconds, latencies = _get_loop(book, bucket, sample, value)
    return Timing(len(sample), seconds, latencies)


def run_gets_threaded(
    book: Bookie, bucket: bytes, sample: Sequence[bytes], value: bytes, threads: int
) -> Timing:
    """Get every key of ``sample`` from ``threads`` threads, each its share of the sample."""
    results: list[tuple[float, Latencies]] = []
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
    return Timing(len(sample), seconds, Latencies.merged(share for _, share in results))


def _get_loop(
    book: Bookie, bucket: bytes, sample: Sequence[bytes], value: bytes
) -> tuple[float, Latencies]:
    latencies = Latencies()
    clock = time.perf_counter
    started = clock()
    for key in sample:
        began = clock()
        got = book.get(bucket, key)
        latencies.record(clock() - began)
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
