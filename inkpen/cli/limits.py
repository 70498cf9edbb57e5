"""What the machine gives, measured beside ``inkpen bench --scale``'s reads.

A ratio to the machine says more than a ratio to an earlier run of inkpen. After the reads of
one N, :func:`pread_rate` times random 4 KiB ``pread`` calls over the database's own files (on a
local directory store), spread over the files by their size, from 1 thread and from 16, through
descriptors opened beforehand: that is what this disk and page cache can give, in the state the
load and the reads left them, to a reader that knows where every byte lies. A get that reaches
0.8x of it spends little beyond the one read it needs.

:func:`process_io` reads the process's own I/O counters (Linux's ``/proc/self/io``: read calls
and bytes, whatever made them), which the scale run takes around each read loop beside the
store's request counts.
"""

from __future__ import annotations

import bisect
import os
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

READ_BYTES = 4096
"""The size of one timed ``pread``."""
PREAD_CALLS = 20_000
"""Calls timed per thread count."""


def process_io() -> dict[str, int]:
    """This process's I/O counters: ``syscr`` (read calls) and ``rchar`` (bytes those calls
    returned, from the page cache or the disk); empty where ``/proc/self/io`` is missing."""
    try:
        with open("/proc/self/io", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    counters = {}
    for line in lines:
        name, _, value = line.partition(":")
        counters[name.strip()] = int(value)
    return {name: counters[name] for name in ("syscr", "rchar") if name in counters}


def io_per_op(before: dict[str, int], after: dict[str, int], ops: int) -> dict[str, float]:
    """The read calls and bytes between two :func:`process_io` answers, per operation."""
    if not before or not after:
        return {}
    ops = max(1, ops)
    return {
        "os_reads_per_op": round((after["syscr"] - before["syscr"]) / ops, 3),
        "os_bytes_per_op": round((after["rchar"] - before["rchar"]) / ops, 1),
    }


@contextmanager
def _opened(root: str) -> Iterator[tuple[list[int], list[int]]]:
    """Descriptors of every file of at least :data:`READ_BYTES` under ``root``, with the
    running total of their sizes (for picking a file by size)."""
    descriptors: list[int] = []
    totals: list[int] = []
    total = 0
    try:
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    size = os.path.getsize(path)
                    if size < READ_BYTES:
                        continue
                    fd = os.open(path, os.O_RDONLY)
                except OSError:
                    continue  # removed by GC meanwhile
                descriptors.append(fd)
                total += size
                totals.append(total)
        yield descriptors, totals
    finally:
        for fd in descriptors:
            os.close(fd)


def pread_rate(root: str, threads: int, calls: int = PREAD_CALLS, seed: int = 0) -> float | None:
    """Random :data:`READ_BYTES` ``pread`` calls per second over the files under ``root``
    (``calls`` in all, from ``threads`` threads, at offsets drawn from ``seed``: give each pass
    its own, or a pass reads the pages the one before it left in the page cache); None when
    there is no file to read."""
    with _opened(root) as (descriptors, totals):
        if not descriptors:
            return None
        chooser = random.Random(seed)
        picks: list[tuple[int, int]] = []
        for _ in range(calls):
            at = chooser.randrange(totals[-1])
            index = bisect.bisect_right(totals, at)
            size = totals[index] - (totals[index - 1] if index else 0)
            picks.append((descriptors[index], chooser.randrange(size - READ_BYTES + 1)))
        shares = [picks[i::threads] for i in range(threads)]
        failures: list[BaseException] = []
        lock = threading.Lock()

        def read(share: list[tuple[int, int]]) -> None:
            try:
                for fd, offset in share:
                    os.pread(fd, READ_BYTES, offset)
            except OSError as exc:
                with lock:
                    failures.append(exc)

        started = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(read, shares))
        elapsed = time.perf_counter() - started
        if failures:
            raise failures[0]
        return calls / elapsed
