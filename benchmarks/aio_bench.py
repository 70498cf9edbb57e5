"""Puts/s from one asyncio event loop (inkpen.aio) against the same puts from threads.

    python benchmarks/aio_bench.py [--store memory|local|s3-url] [--n 20000] [--concurrency 256]

Each round opens a fresh database, then ``concurrency`` writers (tasks of one loop, or threads
sharing one Bookie) put ``n`` objects of ``--value-bytes`` between them; the figure is puts
acknowledged per second of wall time, best and median of ``--rounds``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
import uuid

import inkpen
import inkpen.aio


def fresh_url(store: str, tmp: str) -> str:
    if store == "memory":
        return f"memory://aio-bench-{uuid.uuid4().hex}"
    if store == "local":
        return f"{tmp}/{uuid.uuid4().hex}"
    return store.replace("{uuid}", uuid.uuid4().hex)


def threaded(url: str, n: int, concurrency: int, value: bytes) -> float:
    with inkpen.open(url) as book:
        per = n // concurrency
        start = threading.Barrier(concurrency + 1)

        def writer(w: int) -> None:
            start.wait()
            for i in range(per):
                book.put("b", f"{w:04d}-{i:07d}", value)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(concurrency)]
        for t in threads:
            t.start()
        start.wait()
        began = time.perf_counter()
        for t in threads:
            t.join()
        return per * concurrency / (time.perf_counter() - began)


def async_loop(url: str, n: int, concurrency: int, value: bytes) -> float:
    async def main() -> float:
        async with inkpen.aio.open(url) as book:
            per = n // concurrency

            async def writer(w: int) -> None:
                for i in range(per):
                    await book.put("b", f"{w:04d}-{i:07d}", value)

            began = time.perf_counter()
            await asyncio.gather(*(writer(w) for w in range(concurrency)))
            return per * concurrency / (time.perf_counter() - began)

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="local", help="memory, local, or an s3:// URL")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    value = b"v" * args.value_bytes
    with tempfile.TemporaryDirectory() as tmp:
        figures: dict[str, list[float]] = {"threads": [], "asyncio": []}
        for _ in range(args.rounds):
            url = fresh_url(args.store, tmp)
            figures["threads"].append(threaded(url, args.n, args.concurrency, value))
            url = fresh_url(args.store, tmp)
            figures["asyncio"].append(async_loop(url, args.n, args.concurrency, value))
    print(
        f"store={args.store} n={args.n} concurrency={args.concurrency} "
        f"value_bytes={args.value_bytes} rounds={args.rounds}"
    )
    for kind, values in figures.items():
        print(
            f"{kind:8s} best={max(values):9.0f} puts/s  median={statistics.median(values):9.0f}"
            " puts/s"
        )


if __name__ == "__main__":
    main()
