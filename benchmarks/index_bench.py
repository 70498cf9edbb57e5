"""Measures writes that carry index entries on a local directory store, and prints the figures.

Figures (one JSON object), each from ``--clients`` threads writing at once:

- ``indexed_puts_per_s``: ``--objects`` puts of 100-byte values with two index terms each;
- ``ttl_puts_per_s``: the same objects put again with a ``ttl`` and no index specs (the writer
  shortens the life of their index entries to the put's own);
- ``deletes_per_s``: every object deleted without naming its index entries (the writer removes
  them all);
- ``deletes_after_flush_per_s``: the same over objects whose entries were flushed and merged
  into SSTs first, so each delete reads the object's entries from ledger files.

Run: ``python benchmarks/index_bench.py [--dir DIR] [--objects N] [--clients N]``.
"""

from __future__ import annotations

import argparse
import json
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


def _keys(objects: int, clients: int, client: int) -> range:
    return range(client, objects, clients)


def bench(root: Path, objects: int, clients: int) -> dict[str, float]:
    value = b"v" * 100
    figures: dict[str, float] = {}
    with inkpen.open(str(root / "a")) as book:

        def put(client: int) -> None:
            for i in _keys(objects, clients, client):
                terms = (("add", "name_bin", f"n{i:08d}"), ("add", "age_int", f"{i % 90:04d}"))
                book.put("b", f"key{i:08d}", value, indexes=terms)

        figures["indexed_puts_per_s"] = objects / _clients(clients, put)

        def ttl_put(client: int) -> None:
            for i in _keys(objects, clients, client):
                book.put("b", f"key{i:08d}", value, ttl=3600)

        figures["ttl_puts_per_s"] = objects / _clients(clients, ttl_put)

        def delete(client: int) -> None:
            for i in _keys(objects, clients, client):
                book.delete("b", f"key{i:08d}")

        figures["deletes_per_s"] = objects / _clients(clients, delete)
        left = sum(1 for _ in book.index_query("b", "name_bin", "", "z"))
        assert left == 0, f"{left} index entries answer after every object was deleted"
    with inkpen.open(str(root / "b")) as book:
        _clients(clients, put)
        book.flush()
        book.compact_ledger()
    with inkpen.open(str(root / "b")) as book:
        figures["deletes_after_flush_per_s"] = objects / _clients(clients, delete)
    return {name: round(figure) for name, figure in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--clients", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        figures = bench(Path(tmp), args.objects, args.clients)
    print(json.dumps({"objects": args.objects, "clients": args.clients, **figures}))


if __name__ == "__main__":
    main()
