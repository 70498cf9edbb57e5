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
SCAN_TICK = 1024
"""The scan looks at the clock once per this many rows (its per-second counts)."""


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

    def add(self, other: Latencies) -> None:
        """Count ``other``'s operations in this histogram too."""
        counts = self.counts
        for bucket, count in other.counts.items():
            counts[bucket] = counts.get(bucket, 0) + count
        self.count += other.count
        self.max = max(self.max, other.max)

    @classmethod
    def merged(cls, parts: Iterable[Latencies]) -> Latencies:
        whole = cls()
        for part in parts:
            whole.add(part)
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


class PerSecond:
    """Latencies by the whole second of the run in which each operation finished.

    One per client thread (nothing is shared, so nothing is locked): recording costs what
    recording into one :class:`Latencies` costs, and the run's own histogram is these merged.
    A workload timed as a whole (the scan) counts its rows per second with :meth:`tick`.
    """

    def __init__(self, started: float) -> None:
        self.started = started
        self.seconds: list[Latencies] = []
        self.counts: list[int] = []

    def _slot(self, done: float) -> int:
        return self._second_slot(max(0, int(done - self.started)))

    def _second_slot(self, second: int) -> int:
        if second >= len(self.counts):
            grow = second + 1 - len(self.counts)
            self.seconds.extend(Latencies() for _ in range(grow))
            self.counts.extend([0] * grow)
        return second

    def record(self, done: float, seconds: float) -> None:
        """An operation that took ``seconds`` finished at ``done`` (``perf_counter``)."""
        second = self._slot(done)
        self.seconds[second].record(seconds)
        self.counts[second] += 1

    def tick(self, done: float, count: int = 1) -> None:
        """``count`` operations without latencies finished at ``done``."""
        self.counts[self._slot(done)] += count

    @classmethod
    def merged(cls, parts: Sequence[PerSecond], total_seconds: float) -> PerSecond:
        """The parts (of one run: the same ``started``) added up, one slot per whole second of
        ``total_seconds`` (an operation past the last is counted in it)."""
        whole = cls(parts[0].started if parts else 0.0)
        slots = max(1, int(total_seconds) + 1)
        shares: list[list[Latencies]] = [[] for _ in range(slots)]
        whole.counts = [0] * slots
        for part in parts:
            for i, latencies in enumerate(part.seconds):
                shares[min(slots - 1, i)].append(latencies)
            for i, count in enumerate(part.counts):
                whole.counts[min(slots - 1, i)] += count
        whole.seconds = [Latencies.merged(share) for share in shares]
        return whole


class SharedSeconds:
    """The per-second latencies of one run recorded from many client threads.

    Each client records into its own :meth:`client` (no lock per operation), which holds only the
    second it is in and adds it to the run's :class:`PerSecond` under a lock when it moves on
    (and when it is closed). The run keeps one histogram per second whatever the number of
    clients: one per second *and client* (a :class:`PerSecond` each, merged at the end) took about
    4 KB each, 330 MB for a 5,000,000-put load from 256 clients, all counted in the peak RSS of
    the writer process the benchmark reports.
    """

    def __init__(self, started: float) -> None:
        self.whole = PerSecond(started)
        self._lock = threading.Lock()

    def client(self) -> ClientSeconds:
        """A recorder for one client thread; close it when the client is done."""
        return ClientSeconds(self)

    def _add(self, second: int, latencies: Latencies, count: int) -> None:
        whole = self.whole
        with self._lock:
            slot = whole._second_slot(second)
            whole.seconds[slot].add(latencies)
            whole.counts[slot] += count

    def merged(self, total_seconds: float) -> PerSecond:
        """What every closed client recorded, one slot per whole second of ``total_seconds``
        (as :meth:`PerSecond.merged`)."""
        with self._lock:
            return PerSecond.merged([self.whole], total_seconds)


class ClientSeconds:
    """One client's recorder of a :class:`SharedSeconds`: the second it is in, nothing older."""

    def __init__(self, run: SharedSeconds) -> None:
        self._run = run
        self._started = run.whole.started
        self._second = 0
        self._latencies = Latencies()
        self._count = 0

    def record(self, done: float, seconds: float) -> None:
        """An operation that took ``seconds`` finished at ``done`` (``perf_counter``)."""
        second = max(0, int(done - self._started))
        if second != self._second:
            self.close()
            self._second = second
        self._latencies.record(seconds)
        self._count += 1

    def close(self) -> None:
        """Add what this client recorded since the last close to the run's seconds."""
        if self._count:
            self._run._add(self._second, self._latencies, self._count)
            self._latencies = Latencies()
            self._count = 0


@dataclass(frozen=True, slots=True)
class Timing:
    """What one workload measured: operations, wall time, and each operation's latency."""

    ops: int
    seconds: float
    latencies: Latencies | None = None
    """Per-operation latencies; None for a workload timed as a whole (scan)."""
    per_second: tuple[int, ...] = ()
    """Operations finished in each whole second of the run (the last one partial)."""
    second_latencies: tuple[Latencies, ...] = ()
    """The latencies of the operations finished in each of those seconds (none for a workload
    timed as a whole)."""
    started: float = 0.0
    """``time.perf_counter()`` when the workload began."""

    @classmethod
    def of(cls, ops: int, seconds: float, per_second: PerSecond, *, timed: bool = True) -> Timing:
        """A run's timing from its (merged) :class:`PerSecond`; ``timed``: it recorded each
        operation's latency."""
        second_latencies = tuple(per_second.seconds) if timed else ()
        return cls(
            ops,
            seconds,
            Latencies.merged(second_latencies) if timed else None,
            tuple(per_second.counts),
            second_latencies,
            per_second.started,
        )

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
    is kept as 4 bytes per key (the shuffled numbers; 8 from 2**32 keys) and each key is made
    when asked for, so the benchmark's own memory stays small beside the writer's: 20 MB at
    N = 5,000,000.
    """

    def __init__(self, n: int) -> None:
        order = array("I" if n <= 2**32 else "q", range(n))
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
    errors: list[BaseException] = []
    stop = threading.Event()

    def client() -> None:
        clock = time.perf_counter
        mine = recorded.client()
        try:
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
                mine.record(done, done - began)
        finally:
            mine.close()

    threads = [
        threading.Thread(target=client, name=f"bench-load-{i}", daemon=True)
        for i in range(max(1, concurrency))
    ]
    started = time.perf_counter()
    recorded = SharedSeconds(started)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    if errors:
        raise errors[0]
    return Timing.of(total, seconds, recorded.merged(seconds))


def run_gets(book: Bookie, bucket: bytes, sample: Sequence[bytes], value: bytes) -> Timing:
    """Get every key of ``sample`` from one thread; each must read back ``value``."""
    started = time.perf_counter()
    recorded = _get_loop(book, bucket, sample, value, started)
    seconds = time.perf_counter() - started
    return Timing.of(len(sample), seconds, PerSecond.merged([recorded], seconds))


def run_gets_threaded(
    book: Bookie, bucket: bytes, sample: Sequence[bytes], value: bytes, threads: int
) -> Timing:
    """Get every key of ``sample`` from ``threads`` threads, each its share of the sample."""
    results: list[PerSecond] = []
    errors: list[BaseException] = []

    def client(share: Sequence[bytes]) -> None:
        try:
            results.append(_get_loop(book, bucket, share, value, started))
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
    return Timing.of(len(sample), seconds, PerSecond.merged(results, seconds))


def _get_loop(
    book: Bookie, bucket: bytes, sample: Sequence[bytes], value: bytes, started: float
) -> PerSecond:
    recorded = PerSecond(started)
    clock = time.perf_counter
    for key in sample:
        began = clock()
        got = book.get(bucket, key)
        done = clock()
        recorded.record(done, done - began)
        if got != value:
            raise BenchmarkFailed(
                f"get {key!r} returned {_describe(got)}, not the {len(value)} bytes written"
            )
    return recorded


def run_scan(book: Bookie, bucket: bytes, value: bytes, expected: int) -> Timing:
    """Read every object of ``bucket`` in key order; all ``expected`` must be there."""
    count = 0
    previous = b""
    clock = time.perf_counter
    started = clock()
    recorded = PerSecond(started)
    with book.objects(bucket) as rows:
        for _, key, got in rows:
            if got != value or key <= previous:
                raise BenchmarkFailed(
                    f"scan gave {key!r} after {previous!r} with {_describe(got)}; expected keys "
                    f"in order, each with the {len(value)} bytes written"
                )
            previous = key
            count += 1
            if count % SCAN_TICK == 0:
                recorded.tick(clock(), SCAN_TICK)
    recorded.tick(clock(), count % SCAN_TICK)
    seconds = clock() - started
    if count != expected:
        raise BenchmarkFailed(f"scan found {count} objects, {expected} were written")
    return Timing.of(count, seconds, PerSecond.merged([recorded], seconds), timed=False)


def _describe(got: bytes | None) -> str:
    return "nothing" if got is None else f"{len(got)} other bytes"
