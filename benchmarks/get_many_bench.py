"""Measures ``get_many`` of 100 keys against 100 ``get`` calls, cold and warm, on a local
directory and on SeaweedFS, and prints the figures.

The database holds ``--objects`` objects of 100-byte values, written in batches of 1,000 and then
flushed and merged (values come from journal files, not memory). Each way of reading runs over
the same ``--rounds`` samples of 100 random keys, on a freshly opened Bookie over a
:class:`~inkpen.objectstore.CountingStore`:

- ``cold``: the first pass after open (block and journal caches empty);
- ``warm``: the same samples again (every block and record they need is cached), the fastest
  of three passes.

Figures per store and pass: keys/s of each way and the speedup, bytes read from the store per
key and store requests per key.

Run: ``python benchmarks/get_many_bench.py [--objects N] [--rounds N] [--stores local,s3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import inkpen
from inkpen.objectstore import CountingStore, open_store

KEYS_PER_CALL = 100


def load(url: str, objects: int) -> None:
    rng = random.Random(1)
    with inkpen.open(url) as book:
        batch = inkpen.Batch()
        for i in range(objects):
            batch.put("b", f"key{i:08d}", rng.randbytes(100))
            if len(batch) == 1000:
                book.write(batch)
                batch = inkpen.Batch()
        if len(batch):
            book.write(batch)
        book.flush()
        book.compact_ledger()


def _loop(book: inkpen.Bookie, keys: list[str]) -> list[bytes | None]:
    return [book.get("b", key) for key in keys]


def _many(book: inkpen.Bookie, keys: list[str]) -> list[bytes | None]:
    return book.get_many("b", keys)


def _pass(
    store: CountingStore,
    book: inkpen.Bookie,
    samples: list[list[str]],
    read: Callable[[inkpen.Bookie, list[str]], list[bytes | None]],
    repeats: int = 1,
) -> dict[str, float]:
    """One timed pass over ``samples`` (the fastest of ``repeats``); bytes and requests are
    those of the first."""
    before = store.snapshot()
    seconds = float("inf")
    after = before
    for repeat in range(repeats):
        started = time.perf_counter()
        for keys in samples:
            values = read(book, keys)
            assert all(value is not None for value in values)
        seconds = min(seconds, time.perf_counter() - started)
        if repeat == 0:
            after = store.snapshot()
    keys_read = len(samples) * KEYS_PER_CALL
    return {
        "keys_per_s": round(keys_read / seconds),
        "bytes_read_per_key": round((after["bytes_read"] - before["bytes_read"]) / keys_read, 1),
        "requests_per_key": round((after["gets"] - before["gets"]) / keys_read, 3),
    }


def measure(url: str, objects: int, rounds: int) -> dict[str, object]:
    started = time.perf_counter()
    load(url, objects)
    loaded = time.perf_counter() - started
    rng = random.Random(2)
    samples = [
        [f"key{rng.randrange(objects):08d}" for _ in range(KEYS_PER_CALL)] for _ in range(rounds)
    ]
    passes: dict[str, dict[str, dict[str, float]]] = {"cold": {}, "warm": {}}
    for name, read in (("get_loop", _loop), ("get_many", _many)):
        store = CountingStore(open_store(url))
        try:
            with inkpen.open(store) as book:
                passes["cold"][name] = _pass(store, book, samples, read)
                passes["warm"][name] = _pass(store, book, samples, read, repeats=3)
        finally:
            store.close()
    for figures in passes.values():
        figures["get_many_speedup"] = round(  # type: ignore[assignment]
            figures["get_many"]["keys_per_s"] / figures["get_loop"]["keys_per_s"], 2
        )
    return {"load_s": round(loaded, 1), **passes}


@contextmanager
def _local_root() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="inkpen-bench-") as directory:
        yield str(Path(directory) / "db")


@contextmanager
def _seaweed_root() -> Iterator[str]:
    from inkpen.objectstore.seaweed import DUMMY_CREDENTIALS, start_seaweed

    os.environ.update(DUMMY_CREDENTIALS)
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    with tempfile.TemporaryDirectory(prefix="inkpen-bench-") as directory:
        server = start_seaweed(Path(directory) / "seaweed")
        try:
            yield f"s3://{server.new_bucket()}/bench?endpoint={server.endpoint}"
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=100, help="samples of 100 keys per pass")
    parser.add_argument("--stores", default="local,s3", help="comma-separated: local, s3")
    args = parser.parse_args()
    roots = {"local": _local_root, "s3": _seaweed_root}
    results: dict[str, object] = {"objects": args.objects, "keys_per_call": KEYS_PER_CALL}
    for name in args.stores.split(","):
        with roots[name]() as url:
            results[name] = measure(url, args.objects, args.rounds)
        print(json.dumps({name: results[name]}), file=sys.stderr, flush=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
