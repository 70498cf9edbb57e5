"""Measures batch writes and multi-get on a local directory store, and prints the figures.

Figures (one JSON object):

- ``get_many_keys_per_s`` vs ``get_loop_keys_per_s``: reading 100 random keys with one
  ``get_many`` call, against 100 ``get`` calls, over a database of ``--objects`` objects that has
  been flushed and merged (values come from journal files, not memory);
- ``batch_puts_per_s`` vs ``single_puts_per_s``: ``--batches`` batches of 100 small puts, against
  ``--batches * 100`` single puts, both from ``--clients`` threads.

Run: ``python benchmarks/writes_bench.py [--dir DIR] [--objects N] [--batches N] [--clients N]``.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import inkpen


def _clients(count: int, work: Callable[[int], None]) -> float:
    """Run ``work(client)`` on ``count`` threads at once; seconds from start to last finish."""
    barrier = threading.Barrier(count + 1)

    def run(client: int) -> None:
        barrier.wait()
        work(client)

    threads = [threading.Thread(target=run, args=(c,)) for c in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def bench_reads(root: Path, objects: int, rounds: int) -> dict[str, float]:
    rng = random.Random(1)
    with inkpen.open(str(root / "reads")) as book:
        batch = inkpen.Batch()
        for i in range(objects):
            batch.put("b", f"key{i:08d}", rng.randbytes(100))
            if len(batch) == 1000:
                book.write(batch)
                batch = inkpen.Batch()
        book.write(batch)
        book.flush()
        book.compact_ledger()
    with inkpen.open(str(root / "reads")) as book:
        samples = [[f"key{rng.randrange(objects):08d}" for _ in range(100)] for _ in range(rounds)]
        started = time.perf_counter()
        for keys in samples:
            for key in keys:
                book.get("b", key)
        loop = time.perf_counter() - started
        started = time.perf_counter()
        for keys in samples:
            book.get_many("b", keys)
        many = time.perf_counter() - started
    keys_read = rounds * 100
    return {
        "get_loop_keys_per_s": round(keys_read / loop),
        "get_many_keys_per_s": round(keys_read / many),
        "get_many_speedup": round(loop / many, 2),
    }


def bench_writes(root: Path, batches: int, clients: int) -> dict[str, float]:
    value = b"v" * 64
    per_client = batches // clients
    leftover = batches - per_client * clients

    def batch_plan(client: int) -> int:
        return per_client + (1 if client < leftover else 0)

    with inkpen.open(str(root / "batches")) as book:

        def write_batches(client: int) -> None:
            for n in range(batch_plan(client)):
                batch = inkpen.Batch()
                for j in range(100):
                    batch.put("b", f"c{client}-{n}-{j}", value)
                book.write(batch)

        batch_seconds = _clients(clients, write_batches)
    with inkpen.open(str(root / "singles")) as book:

        def write_singles(client: int) -> None:
            for n in range(batch_plan(client) * 100):
                book.put("b", f"c{client}-{n}", value)

        single_seconds = _clients(clients, write_singles)
    puts = batches * 100
    return {
        "batch_puts_per_s": round(puts / batch_seconds),
        "single_puts_per_s": round(puts / single_seconds),
        "batch_speedup": round(single_seconds / batch_seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", help="directory for the databases (default: a temporary one)")
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=200, help="get_many calls of 100 keys")
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        figures = {
            "store": "local directory",
            "objects": args.objects,
            "clients": args.clients,
            "batches": args.batches,
            **bench_reads(root, args.objects, args.rounds),
            **bench_writes(root, args.batches, args.clients),
        }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
