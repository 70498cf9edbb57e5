"""Puts/s of a sharded data set written by one process per shard, against one writer.

    python benchmarks/shards_bench.py [--store local|s3-url] [--shards 8] [--threads 64]
                                      [--n 16000] [--value-bytes 100] [--rounds 1]

Two workloads put ``n`` objects of ``--value-bytes`` in all, from ``threads`` client threads per
writer process:

- ``one writer``: one process, one database (``inkpen.open``), ``threads`` threads;
- ``N writers``: a data set of ``--shards`` shards and one process per shard, each opening it
  with ``inkpen.shards.open(url, shards=[i])`` and putting ``n / shards`` keys that route to its
  shard, from ``threads`` threads of its own.

The clock runs from the moment every process has opened its writer and its threads are ready
(a shared start event) to the moment the last one is done; the figure is puts acknowledged per
second of that wall time. Every process is a Python interpreter of its own, so the writers'
group commit, encoding and store requests run on separate cores when there are cores: the
speed-up is bounded by the machine's core count (``os.cpu_count()`` is printed) and the
store's own throughput.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
import uuid
from multiprocessing.synchronize import Event

import inkpen
from inkpen import shards


def fresh_url(store: str, tmp: str) -> str:
    if store == "local":
        return f"{tmp}/{uuid.uuid4().hex}"
    return store.replace("{uuid}", uuid.uuid4().hex)


def keys_of(shard: int, count: int, per: int) -> list[str]:
    """``per`` keys of bucket ``b`` that route to ``shard`` of ``count``."""
    found: list[str] = []
    i = 0
    while len(found) < per:
        key = f"k{i:09d}"
        if shards.shard_of("b", key, count) == shard:
            found.append(key)
        i += 1
    return found


def put_all(
    book: inkpen.Bookie | shards.ShardedBookie,
    keys: list[str],
    threads: int,
    value: bytes,
    ready: Event | None,
    go: Event | None,
) -> float:
    """Put every key from ``threads`` threads; seconds from the start signal to the last ack."""
    slices = [keys[t::threads] for t in range(threads)]
    barrier = threading.Barrier(threads + 1)

    def writer(mine: list[str]) -> None:
        barrier.wait()
        for key in mine:
            book.put("b", key, value)

    running = [threading.Thread(target=writer, args=(s,)) for s in slices]
    for t in running:
        t.start()
    if ready is not None and go is not None:
        ready.set()
        go.wait()
    barrier.wait()
    began = time.perf_counter()
    for t in running:
        t.join()
    return time.perf_counter() - began


def shard_writer(
    url: str,
    shard: int,
    count: int,
    per: int,
    threads: int,
    value_bytes: int,
    ready: Event,
    go: Event,
    done: multiprocessing.Queue,
) -> None:  # type: ignore[type-arg]
    keys = keys_of(shard, count, per)
    with shards.open(url, shards=[shard]) as book:
        book.put("b", keys[0], b"warm")  # open the shard's writer before the clock starts
        seconds = put_all(book, keys, threads, b"x" * value_bytes, ready, go)
        # The last put is acknowledged now (CLOCK_MONOTONIC is one clock for every process);
        # closing the writer (flushing its ledger) is not part of the figure.
        done.put((shard, seconds, time.monotonic()))


def one_writer(url: str, n: int, threads: int, value_bytes: int) -> float:
    keys = [f"k{i:09d}" for i in range(n)]
    with inkpen.open(url) as book:
        book.put("b", "warm", b"warm")
        seconds = put_all(book, keys, threads, b"x" * value_bytes, None, None)
        return n / seconds  # closing is not part of the figure, as for the shard writers


def many_writers(url: str, count: int, n: int, threads: int, value_bytes: int) -> float:
    shards.create(url, shards=count)
    per = n // count
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    readies = [context.Event() for _ in range(count)]
    done: multiprocessing.Queue = context.Queue()  # type: ignore[type-arg]
    workers = [
        context.Process(
            target=shard_writer,
            args=(url, i, count, per, threads, value_bytes, readies[i], go, done),
        )
        for i in range(count)
    ]
    for w in workers:
        w.start()
    for ready in readies:
        ready.wait()
    began = time.monotonic()
    go.set()
    finished = [done.get() for _ in workers]
    wall = max(at for _i, _s, at in finished) - began
    for w in workers:
        w.join()
    assert len(finished) == count
    return per * count / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="local", help="local, or an s3:// URL with {uuid}")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--n", type=int, default=16_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    print(
        f"cores: {os.cpu_count()}, store: {args.store}, n: {args.n}, "
        f"value: {args.value_bytes} B, threads per writer: {args.threads}"
    )
    with tempfile.TemporaryDirectory(prefix="inkpen-shards-bench-") as tmp:
        single = [
            one_writer(fresh_url(args.store, tmp), args.n, args.threads, args.value_bytes)
            for _ in range(args.rounds)
        ]
        sharded = [
            many_writers(
                fresh_url(args.store, tmp), args.shards, args.n, args.threads, args.value_bytes
            )
            for _ in range(args.rounds)
        ]
    one, many = statistics.median(single), statistics.median(sharded)
    print(f"one writer ({args.threads} threads):            {one:10,.0f} puts/s")
    print(
        f"{args.shards} writers ({args.threads} threads each): {many:10,.0f} puts/s "
        f"({many / one:.2f}x)"
    )


if __name__ == "__main__":
    main()
