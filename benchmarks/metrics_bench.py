"""What recording metrics costs, piece by piece (``inkpen bench --metrics both`` gives the whole).

    python benchmarks/metrics_bench.py

1. One record into a latency histogram, from 1 and from 8 threads: nothing recorded (the
   recorder of ``metrics=False``), inkpen's per-thread cells, and the same adds under one lock.
2. One ``get_range`` on an in-memory store, bare and through the ``CountingStore`` a handle with
   metrics wraps its store in.
3. Gets through two Readers of one database (30,000 objects of 100 bytes) taking turns by blocks
   of 250 keys, CPU time of the reading thread per get: metrics on against off, and off against
   off (the noise floor of that comparison on this machine).

4. 150,000 puts of 100 bytes from 128 threads on one Bookie while the handle's recorders are
   swapped between recording and not every 0.25 s (the store's request counting stays on: a load
   makes a few hundred requests): puts/s in each half.

Figures are the best of several rounds (1, 2), totals over 12,000 gets (3) or over the load (4);
ns or µs per operation. Thread CPU time in 1-3, not wall time, so that other processes on a busy
machine weigh less.
"""

from __future__ import annotations

import itertools
import random
import tempfile
import threading
import time
from bisect import bisect_left
from collections.abc import Callable

import inkpen
from inkpen.actors.kernel.meter import LATENCY_BOUNDS, Meter, Recorder
from inkpen.objectstore import CountingStore, open_store

RECORDS = 200_000
ROUNDS = 7


class LockedRecorder:
    """The same adds as :class:`Recorder` into one shared cell, under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cell: list[float] = [0] * (len(LATENCY_BOUNDS) + 1) + [0.0, 0]

    def record(self, seconds: float, nbytes: int = 0) -> None:
        i = bisect_left(LATENCY_BOUNDS, seconds)
        with self._lock:
            cell = self._cell
            cell[i] += 1
            cell[-2] += seconds
            cell[-1] += nbytes


def _records(record: Callable[[float, int], None], count: int) -> None:
    for _ in range(count):
        record(0.0003, 100)


def per_record(make: Callable[[], object], threads: int) -> float:
    """Best wall ns per record over ROUNDS, ``threads`` threads sharing one recorder."""
    best = float("inf")
    each = RECORDS // threads
    for _ in range(ROUNDS):
        record = make().record  # type: ignore[attr-defined]
        workers = [threading.Thread(target=_records, args=(record, each)) for _ in range(threads)]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        best = min(best, time.perf_counter() - started)
    return best / (each * threads) * 1e9


def store_overhead() -> tuple[float, float]:
    store = open_store("memory://metrics-bench")
    store.put("k", b"x" * 4096)
    counted = CountingStore(store)

    def best(target: object) -> float:
        get_range = target.get_range  # type: ignore[attr-defined]
        found = float("inf")
        for _ in range(ROUNDS):
            started = time.thread_time()
            for _ in range(100_000):
                get_range("k", 100, 200)
            found = min(found, time.thread_time() - started)
        return found / 100_000 * 1e9

    return best(store), best(counted)


def gets_taking_turns(on: bool) -> tuple[float, float]:
    """CPU µs per get of a Reader with metrics ``on`` and of one without, by turns."""
    directory = tempfile.mkdtemp(prefix="inkpen-metrics-bench-")
    with inkpen.open(directory) as book:
        for start in range(0, 30_000, 1000):
            batch = inkpen.Batch()
            for i in range(start, start + 1000):
                batch.put("b", b"key%013d" % i, b"v" * 100)
            book.write(batch)
    keys = [b"key%013d" % i for i in range(30_000)]
    random.Random(2).shuffle(keys)
    first = inkpen.open_reader(directory, metrics=on)
    second = inkpen.open_reader(directory, metrics=False)
    spent, done = [0.0, 0.0], [0, 0]
    for turn, j in enumerate(range(0, 24_000, 500)):
        pairs = [(0, first, keys[j : j + 250]), (1, second, keys[j + 250 : j + 500])]
        for side, reader, share in reversed(pairs) if turn % 2 else pairs:
            started = time.thread_time()
            for key in share:
                reader.get("b", key)
            spent[side] += time.thread_time() - started
            done[side] += len(share)
    first.close()
    second.close()
    return spent[0] / done[0] * 1e6, spent[1] / done[1] * 1e6


def puts_with_recording_toggled() -> tuple[float, float]:
    """Puts/s while recording and while not, from one load on one Bookie (section 4)."""
    book = inkpen.open(tempfile.mkdtemp(prefix="inkpen-metrics-bench-"), flush_interval=0.01)
    recording, idle = book._meter, Meter(enabled=False)
    total = 150_000
    turns = itertools.count()
    done = itertools.count()

    def client() -> None:
        while (i := next(turns)) < total:
            book.put("b", b"key%013d" % i, b"x" * 100)
            next(done)

    workers = [threading.Thread(target=client) for _ in range(128)]
    for worker in workers:
        worker.start()
    sides = {True: [0, 0.0], False: [0, 0.0]}
    on = False
    while any(worker.is_alive() for worker in workers):
        book._meter = recording if on else idle
        before, started = _count(done), time.perf_counter()
        time.sleep(0.25)
        sides[on][0] += _count(done) - before
        sides[on][1] += time.perf_counter() - started
        on = not on
    for worker in workers:
        worker.join()
    book._meter = recording
    book.close()
    return sides[True][0] / sides[True][1], sides[False][0] / sides[False][1]


def _count(counter: itertools.count[int]) -> int:
    """How far ``counter`` has counted, without counting."""
    return int(repr(counter)[6:-1])


def main() -> None:
    makers: list[tuple[str, Callable[[], object]]] = [
        ("nothing recorded (metrics=False)", lambda: Meter(enabled=False).get),
        ("per-thread cells (inkpen)", Recorder),
        ("one cell under a lock", LockedRecorder),
    ]
    for threads in (1, 8):
        for name, make in makers:
            print(f"record, {threads} thread(s), {name}: {per_record(make, threads):.0f} ns")
    bare, counted = store_overhead()
    print(f"get_range: bare {bare:.0f} ns, through CountingStore {counted:.0f} ns")
    for on in (True, False):
        a, b = gets_taking_turns(on)
        label = "metrics on against off" if on else "off against off (noise)"
        print(f"gets, {label}: {a:.1f} vs {b:.1f} µs CPU per get ({(a - b) / b * 100:+.1f}%)")
    on, off = puts_with_recording_toggled()
    cost = (off - on) / off * 100
    print(f"puts, recording on against off: {on:.0f} vs {off:.0f} puts/s ({cost:+.1f}%)")


if __name__ == "__main__":
    main()
