"""The write side at scale: a sustained load, its stalls and memory, and large values.

``load``: N puts of ``--value-size`` bytes (keys ``key%013d`` shuffled as ``inkpen bench`` does)
from ``--concurrency`` threads on a fresh local directory with a ``--flush-ms`` interval. Prints
one JSON line with the overall rate, the per-second throughput (median, minimum after the first
10 s, seconds below 20% of the median), put latency percentiles and max, the peak RSS of the
writer process and of its compute workers (sampled every 0.2 s), and, after a clean close, the
bytes and objects on the store and their ratio to ``N x (key + value)``. ``--sigkill-at F`` runs
the load in a child process, kills it with SIGKILL after a fraction F of N was acknowledged, and
times the open that follows.

``large``: raw fsync'd file bandwidth of the same directory (write + fsync a file of the value
size, read it back) against ``Bookie.put`` and ``Bookie.get`` of values of that size, each from
``--threads`` threads (16 by default), printed as MB/s and ratios.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import inkpen
from inkpen.cli.workloads import Latencies, SharedSeconds, bench_keys

BUCKET = b"bench"


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _store_size(root: str) -> tuple[int, int]:
    """Bytes and objects under ``root``; a hard-linked file's bytes count once."""
    total = count = 0
    seen: set[tuple[int, int]] = set()
    for dirpath, _, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(dirpath, name))
            count += 1
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total, count


def load(args: argparse.Namespace, root: str, progress: Any = None) -> dict[str, Any]:
    """The load: the benchmark's own bookkeeping stays the same size whatever N is (keys made
    when asked for, 8 bytes each; latencies in histograms), so the peak RSS printed is the
    writer's, not the benchmark's."""
    options: dict[str, Any] = {"flush_policy": "interval", "flush_interval": args.flush_ms / 1e3}
    options.update(json.loads(args.options))
    value = random.Random(3).randbytes(args.value_size)
    keys = bench_keys(args.n)
    total = len(keys)
    turns = itertools.count()  # next() on it is atomic: each index goes to one client
    stop = threading.Event()
    rss = {"writer": 0.0, "workers": 0.0}

    def sampler() -> None:
        while not stop.wait(0.2):
            me = os.getpid()
            rss["writer"] = max(rss["writer"], _rss_mb(me))
            rss["workers"] = max(rss["workers"], sum(_rss_mb(c) for c in _children(me)))
            if progress is not None:
                progress(sum(recorded.whole.counts))

    book = inkpen.open(root, **options)

    def client() -> None:
        clock = time.perf_counter
        mine = recorded.client()
        try:
            while True:
                index = next(turns)
                if index >= total:
                    return
                key = keys[index]
                began = clock()
                book.put(BUCKET, key, value)
                finished = clock()
                mine.record(finished, finished - began)
        finally:
            mine.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(args.concurrency)]
    watcher = threading.Thread(target=sampler, daemon=True)
    started = time.perf_counter()
    recorded = SharedSeconds(started)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    close_began = time.perf_counter()
    book.close()
    close_s = time.perf_counter() - close_began
    stop.set()
    watcher.join()
    timing = recorded.merged(seconds)
    latencies = Latencies.merged(timing.seconds)
    per_second = timing.counts
    steady = per_second[10:-1] or per_second
    median = statistics.median(steady) if steady else 0
    size, objects = _store_size(root)
    began = time.perf_counter()
    inkpen.open(root, **options).close()
    return {
        "workload": "load",
        "n": args.n,
        "value_size": args.value_size,
        "ops_per_s": round(args.n / seconds, 1),
        "seconds": round(seconds, 1),
        "median_per_s": median,
        "min_per_s_after_10s": min(steady) if steady else 0,
        "seconds_below_20pct": sum(1 for c in steady if c < 0.2 * median),
        "first_half_per_s": round(
            sum(per_second[: len(per_second) // 2]) / max(1, len(per_second) // 2)
        ),
        "second_half_per_s": round(
            sum(per_second[len(per_second) // 2 :]) / max(1, len(per_second) - len(per_second) // 2)
        ),
        "p50_ms": round(latencies.quantile(0.5) * 1e3, 2),
        "p99_ms": round(latencies.quantile(0.99) * 1e3, 2),
        "max_ms": round(latencies.max * 1e3, 1),
        "writer_peak_rss_mb": round(rss["writer"], 1),
        "workers_peak_rss_mb": round(rss["workers"], 1),
        "close_s": round(close_s, 2),
        "clean_open_s": round(time.perf_counter() - began, 2),
        "store_bytes": size,
        "store_objects": objects,
        "store_ratio": round(size / (args.n * (16 + args.value_size)), 2),
    }


def sigkill_open(args: argparse.Namespace, root: str) -> dict[str, Any]:
    child = subprocess.Popen(
        [sys.executable, __file__, "load-child", *sys.argv[2:], "--root", root],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    target = int(args.n * args.sigkill_at)
    for line in child.stdout:
        if int(line) >= target:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    began = time.perf_counter()
    book = inkpen.open(root)
    opened = time.perf_counter() - began
    book.close()
    return {"workload": "sigkill_open", "killed_after": target, "open_s": round(opened, 2)}


def large(args: argparse.Namespace, root: str) -> dict[str, Any]:
    size = args.value_size
    count = max(1, args.total_mb * 2**20 // size)
    threads = args.threads
    value = random.Random(4).randbytes(size)
    raw_dir = os.path.join(root, "raw")
    os.makedirs(raw_dir)

    def each(work: Any) -> None:
        """Run ``work(i)`` for every value, from ``threads`` threads."""
        with ThreadPoolExecutor(threads) as pool:
            for _ in pool.map(work, range(count)):
                pass

    def raw_write(i: int) -> None:
        path = os.path.join(raw_dir, f"{i}")
        with open(path, "wb") as f:
            f.write(value)
            f.flush()
            os.fsync(f.fileno())
        dfd = os.open(raw_dir, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)

    def raw_read(i: int) -> None:
        with open(os.path.join(raw_dir, f"{i}"), "rb") as f:
            if len(f.read()) != size:
                raise SystemExit("raw read returned a short file")

    began = time.perf_counter()
    each(raw_write)
    raw_put = count * size / (time.perf_counter() - began)
    began = time.perf_counter()
    each(raw_read)
    raw_get = count * size / (time.perf_counter() - began)
    db = os.path.join(root, "db")
    options: dict[str, Any] = {"flush_policy": "idle"}
    options.update(json.loads(args.options))
    peak = [0.0]
    stop = threading.Event()

    def sampler() -> None:
        while not stop.wait(0.2):
            peak[0] = max(peak[0], _rss_mb(os.getpid()))

    threading.Thread(target=sampler, daemon=True).start()
    book = inkpen.open(db, **options)

    def put(i: int) -> None:
        book.put(BUCKET, b"big%08d" % i, value)

    def get(i: int) -> None:
        if book.get(BUCKET, b"big%08d" % i) != value:
            raise SystemExit("large get returned other bytes")

    began = time.perf_counter()
    each(put)
    put_rate = count * size / (time.perf_counter() - began)
    after_put_rss = _rss_mb(os.getpid())
    book.close()
    book = inkpen.open(db, **options)
    began = time.perf_counter()
    each(get)
    get_rate = count * size / (time.perf_counter() - began)
    book.close()
    stop.set()
    size_db, objects = _store_size(db)
    mb = 2**20
    return {
        "workload": "large",
        "value_size": size,
        "values": count,
        "threads": threads,
        "raw_put_mb_s": round(raw_put / mb, 1),
        "put_mb_s": round(put_rate / mb, 1),
        "put_ratio": round(put_rate / raw_put, 2),
        "raw_get_mb_s": round(raw_get / mb, 1),
        "get_mb_s": round(get_rate / mb, 1),
        "get_ratio": round(get_rate / raw_get, 2),
        "rss_after_puts_mb": round(after_put_rss, 1),
        "peak_rss_mb": round(peak[0], 1),
        "store_bytes": size_db,
        "store_objects": objects,
        "store_ratio": round(size_db / (count * size), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["load", "large", "sigkill", "load-child"])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--flush-ms", type=int, default=10)
    parser.add_argument("--total-mb", type=int, default=256)
    parser.add_argument(
        "--threads", type=int, default=16, help="large: client threads (raw and inkpen alike)"
    )
    parser.add_argument("--sigkill-at", type=float, default=0.8)
    parser.add_argument("--options", default="{}", help="JSON of extra inkpen options")
    parser.add_argument("--root", default=None)
    args = parser.parse_args()
    if args.mode == "load-child":

        def progress(done: int) -> None:
            print(done, flush=True)

        load(args, args.root, progress)
        return
    with tempfile.TemporaryDirectory(prefix="inkpen-scale-", dir=args.root) as base:
        root = os.path.join(base, "db")
        if args.mode == "load":
            result = load(args, root)
        elif args.mode == "sigkill":
            result = sigkill_open(args, root)
        else:
            result = large(args, base)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
