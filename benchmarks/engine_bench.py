"""Engine figures on a local directory: durable puts/s, gets/s after reopen, recovery time.

Run: ``python benchmarks/engine_bench.py [--n 100000]``. Prints one JSON object per figure:

- ``puts``: durable puts/s from 1 thread and from 64 threads (each put returns only once its
  journal segment is on disk, ``flush_policy="idle"``);
- ``gets``: gets/s from one thread after a clean close and reopen (20,000 random keys);
- ``recovery``: the time to open a database whose last N writes were never written to the ledger
  (the writer was abandoned as a crash would leave it, so the next open replays them all).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import threading
import time

import inkpen


def puts(root: str, n: int, threads: int) -> float:
    value = os.urandom(100)
    keys = [f"key{i:013d}" for i in range(n)]
    random.Random(1).shuffle(keys)
    lock = threading.Lock()
    with inkpen.open(root) as book:

        def client() -> None:
            while True:
                with lock:
                    if not keys:
                        return
                    key = keys.pop()
                book.put("b", key, value)

        started = time.perf_counter()
        workers = [threading.Thread(target=client) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return n / (time.perf_counter() - started)


def gets(root: str, n: int, count: int) -> float:
    sample = random.Random(2).sample(range(n), min(count, n))
    with inkpen.open(root) as book:
        started = time.perf_counter()
        for i in sample:
            if book.get("b", f"key{i:013d}") is None:
                raise SystemExit(f"key{i:013d} is missing")
        return len(sample) / (time.perf_counter() - started)


def recovery(root: str, n: int) -> tuple[float, int]:
    value = os.urandom(100)
    # Ledger caches larger than N keep every write in memory until the crash.
    book = inkpen.open(root, ledger_cache_entries=n + 1, l0_cache_entries=n + 1)
    lock = threading.Lock()
    keys = list(range(n))

    def client() -> None:
        while True:
            with lock:
                if not keys:
                    return
                i = keys.pop()
            book.put("b", f"key{i:013d}", value)

    workers = [threading.Thread(target=client) for _ in range(64)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    book.abandon()
    started = time.perf_counter()
    reopened = inkpen.open(root)
    seconds = time.perf_counter() - started
    stats = reopened.stats()
    reopened.close()
    return seconds, stats["persisted_sqn"]


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--single-thread-n", type=int, default=2_000)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="inkpen-engine-bench-")
    try:
        single = os.path.join(base, "single")
        emit(
            figure="puts",
            threads=1,
            ops=args.single_thread_n,
            ops_per_s=round(puts(single, args.single_thread_n, 1), 1),
        )
        many = os.path.join(base, "many")
        emit(figure="puts", threads=64, ops=args.n, ops_per_s=round(puts(many, args.n, 64), 1))
        emit(figure="gets", threads=1, ops=20_000, ops_per_s=round(gets(many, args.n, 20_000), 1))
        seconds, persisted = recovery(os.path.join(base, "crash"), args.n)
        emit(
            figure="recovery",
            entries=args.n,
            persisted_sqn_before=0,
            seconds=round(seconds, 3),
            persisted_sqn_after=persisted,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
