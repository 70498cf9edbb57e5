"""Measures ``get_many`` of 100 keys against 100 ``get`` calls, cold and warm, on a local
directory and on SeaweedFS, and prints the figures.

The database holds ``--objects`` objects of 100-byte values, written in batches of 1,000 and then
flushed and merged (values come from journal files, not memory), and is read through a freshly
opened Bookie over a :class:`~inkpen.objectstore.CountingStore`. Each way of reading (a loop of
``get``, one ``get_many``) has ``--rounds`` samples of 100 random keys, no key in two samples;
the two ways take turns, sample by sample, so that the machine's other load weighs on both alike:

- ``cold``: the first pass (no record a sample asks for was read before; the ledger's blocks
  warm up alike for both ways as the pass goes on);
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


WAYS: dict[str, Callable[[inkpen.Bookie, list[str]], list[bytes | None]]] = {
    "get_loop": _loop,
    "get_many": _many,
}


def _pass(
    store: CountingStore, book: inkpen.Bookie, samples: dict[str, list[list[str]]]
) -> dict[str, dict[str, float]]:
    """Each way reads its samples, the ways taking turns sample by sample (so that whatever
    else the machine does weighs on both alike); seconds, bytes and requests per way."""
    seconds = dict.fromkeys(WAYS, 0.0)
    read = dict.fromkeys(WAYS, 0)
    requests = dict.fromkeys(WAYS, 0)
    for turn in range(len(samples["get_loop"])):
        for name, way in WAYS.items():
            keys = samples[name][turn]
            before = store.snapshot()
            started = time.perf_counter()
            values = way(book, keys)
            seconds[name] += time.perf_counter() - started
            after = store.snapshot()
            assert all(value is not None for value in values)
            read[name] += after["bytes_read"] - before["bytes_read"]
            requests[name] += after["gets"] - before["gets"]
    keys_read = len(samples["get_loop"]) * KEYS_PER_CALL
    return {
        name: {
            "keys_per_s": round(keys_read / seconds[name]),
            "bytes_read_per_key": round(read[name] / keys_read, 1),
            "requests_per_key": round(requests[name] / keys_read, 3),
        }
        for name in WAYS
    }


def measure(url: str, objects: int, rounds: int) -> dict[str, object]:
    """Cold: each way reads keys no read asked for before (its own, disjoint from the other
    way's). Warm: the same samples again, the fastest of three passes."""
    started = time.perf_counter()
    load(url, objects)
    loaded = time.perf_counter() - started
    wanted = [f"key{i:08d}" for i in random.Random(2).sample(range(objects), 2 * rounds * 100)]
    samples = {
        name: [wanted[(2 * r + w) * 100 : (2 * r + w + 1) * 100] for r in range(rounds)]
        for w, name in enumerate(WAYS)
    }
    store = CountingStore(open_store(url))
    try:
        with inkpen.open(store) as book:
            cold = _pass(store, book, samples)
            warm = [_pass(store, book, samples) for _ in range(3)]
    finally:
        store.close()
    best = {
        name: max((figures[name] for figures in warm), key=lambda f: f["keys_per_s"])
        for name in WAYS
    }
    passes: dict[str, object] = {}
    for label, figures in (("cold", cold), ("warm", best)):
        speedup = figures["get_many"]["keys_per_s"] / figures["get_loop"]["keys_per_s"]
        passes[label] = {**figures, "get_many_speedup": round(speedup, 2)}
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
