"""The write side at scale: a sustained load, its stalls and memory, and large values.

``load``: N puts of ``--value-size`` bytes (keys ``key%013d`` shuffled as ``inkpen bench`` does)
from ``--concurrency`` threads on a fresh local directory with a ``--flush-ms`` interval. Prints
one JSON line with the overall rate, the per-second throughput (median, minimum after the first
10 s, seconds below 20% of the median), put latency percentiles and max, the peak RSS of the
writer process and of its compute workers (sampled every 0.2 s), and, after a clean close, the
bytes and objects on the store and their ratio to ``N x (key + value)``. ``--sigkill-at F`` runs
the load in a child process, kills it with SIGKILL after a fraction F of N was acknowledged, and
times the open that follows.

``large``: raw fsync'd file bandwidth of the same filesystem (write + fsync a file of the value
size and its directory, read it back) against ``Bookie.put`` and ``Bookie.get`` of values of that
size, each from ``--threads`` threads (16 by default), printed as MB/s and ratios. Both sides run
with the allocator setting the Bookie applies (glibc's mmap threshold), in ``--rounds`` rounds
that alternate which side goes first; the medians of the per-round figures and ratios are
printed, with the process's CPU seconds per GiB on each side (less sensitive to other load
than the rates) and the peak RSS while inkpen ran. ``--value-sizes 262144,4194304,33554432``
runs each size in a process of its own.
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
from inkpen.actors.kernel.heap import limit_heap_growth
from inkpen.cli.workloads import Latencies, SharedSeconds, bench_keys
from inkpen.options import Options

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


def _heap_threshold(options: dict[str, Any]) -> int:
    """The mmap threshold ``inkpen.open(**options)`` applies (0: glibc's own dynamic one)."""
    threshold = options.get("malloc_mmap_threshold", Options().malloc_mmap_threshold)
    return int(threshold)


def large(args: argparse.Namespace, root: str) -> dict[str, Any]:
    """Raw fsync'd files against ``Bookie.put`` / ``Bookie.get`` of one value size, in rounds.

    Both sides run in one process state: the allocator setting the Bookie applies when it opens
    (glibc's mmap threshold, ``malloc_mmap_threshold``) is applied before either side runs, so
    that the raw loop does not get the heap reuse of glibc's rising threshold while inkpen gets
    fresh mappings. Each round writes ``--total-mb`` both ways into fresh directories of the same
    filesystem and reads it back both ways (inkpen after a clean close and reopen), the order of
    the two sides alternating round by round; ratios are taken within a round, and the medians
    of the rounds are reported.
    """
    size = args.value_size
    count = max(1, args.total_mb * 2**20 // size)
    threads = args.threads
    value = random.Random(4).randbytes(size)
    options: dict[str, Any] = {"flush_policy": "idle"}
    options.update(json.loads(args.options))
    threshold = _heap_threshold(options)
    applied = limit_heap_growth(threshold)
    load_before = os.getloadavg()
    peak = {"all": 0.0, "inkpen": 0.0}
    inkpen_phase = threading.Event()
    stop = threading.Event()

    def sampler() -> None:
        while not stop.wait(0.1):
            rss = _rss_mb(os.getpid())
            peak["all"] = max(peak["all"], rss)
            if inkpen_phase.is_set():
                peak["inkpen"] = max(peak["inkpen"], rss)

    threading.Thread(target=sampler, daemon=True).start()

    cpu: dict[str, float] = {}

    def each(work: Any) -> float:
        """Run ``work(i)`` for every value from ``threads`` threads; MB/s. The process's CPU
        seconds per GiB it took go to ``cpu`` under the name of ``work``."""
        began = time.perf_counter()
        cpu_began = time.process_time()
        with ThreadPoolExecutor(threads) as pool:
            for _ in pool.map(work, range(count)):
                pass
        cpu[work.__name__] = (time.process_time() - cpu_began) / (count * size / 2**30)
        return count * size / (time.perf_counter() - began) / 2**20

    def raw_put(raw_dir: str) -> float:
        os.makedirs(raw_dir)

        def write(i: int) -> None:
            with open(os.path.join(raw_dir, f"{i}"), "wb") as f:
                f.write(value)
                f.flush()
                os.fsync(f.fileno())
            dfd = os.open(raw_dir, os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)

        return each(write)

    def raw_get(raw_dir: str) -> float:
        def read(i: int) -> None:
            with open(os.path.join(raw_dir, f"{i}"), "rb") as f:
                if f.read() != value:  # checked as inkpen's gets are: the same compare
                    raise SystemExit("raw read returned other bytes")

        return each(read)

    def inkpen_put(db: str) -> float:
        book = inkpen.open(db, **options)
        inkpen_phase.set()

        def put(i: int) -> None:
            book.put(BUCKET, b"big%08d" % i, value)

        try:
            return each(put)
        finally:
            after_puts.append(_rss_mb(os.getpid()))
            book.close()
            inkpen_phase.clear()

    def inkpen_get(db: str) -> float:
        book = inkpen.open(db, **options)
        inkpen_phase.set()

        def get(i: int) -> None:
            if book.get(BUCKET, b"big%08d" % i) != value:
                raise SystemExit("large get returned other bytes")

        try:
            return each(get)
        finally:
            book.close()
            inkpen_phase.clear()

    after_puts: list[float] = []
    rounds: list[dict[str, Any]] = []
    for number in range(args.rounds):
        raw_dir = os.path.join(root, f"raw{number}")
        db = os.path.join(root, f"db{number}")
        inkpen_first = number % 2 == 1
        figures: dict[str, Any] = {"round": number, "first": "inkpen" if inkpen_first else "raw"}
        puts = [("put_mb_s", inkpen_put, db), ("raw_put_mb_s", raw_put, raw_dir)]
        gets = [("get_mb_s", inkpen_get, db), ("raw_get_mb_s", raw_get, raw_dir)]
        for phase in (puts, gets):
            for name, run, where in phase if inkpen_first else reversed(phase):
                figures[name] = round(run(where), 1)
        for name in ("write", "put", "read", "get"):
            figures[f"{name}_cpu_s_per_gib"] = round(cpu[name], 2)
        figures["put_ratio"] = round(figures["put_mb_s"] / figures["raw_put_mb_s"], 2)
        figures["get_ratio"] = round(figures["get_mb_s"] / figures["raw_get_mb_s"], 2)
        if number == 0:
            figures["store_bytes"], figures["store_objects"] = _store_size(db)
        rounds.append(figures)
    stop.set()

    def median(name: str) -> float:
        return round(statistics.median(r[name] for r in rounds), 2)

    return {
        "workload": "large",
        "value_size": size,
        "values": count,
        "threads": threads,
        "rounds": args.rounds,
        "mmap_threshold": threshold if applied else 0,
        "raw_put_mb_s": median("raw_put_mb_s"),
        "put_mb_s": median("put_mb_s"),
        "put_ratio": median("put_ratio"),
        "raw_get_mb_s": median("raw_get_mb_s"),
        "get_mb_s": median("get_mb_s"),
        "get_ratio": median("get_ratio"),
        "cpu_s_per_gib": {
            name: median(f"{name}_cpu_s_per_gib") for name in ("write", "put", "read", "get")
        },
        "rss_after_puts_mb": round(max(after_puts), 1),
        "peak_rss_mb": round(peak["inkpen"], 1),
        "peak_rss_all_mb": round(peak["all"], 1),
        "store_bytes": rounds[0]["store_bytes"],
        "store_objects": rounds[0]["store_objects"],
        "store_ratio": round(rounds[0]["store_bytes"] / (count * size), 3),
        "load_avg": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "per_round": [
            {k: v for k, v in r.items() if k not in ("store_bytes", "store_objects")}
            for r in rounds
        ],
    }


def large_sizes(args: argparse.Namespace) -> None:
    """``large`` for every size of ``--value-sizes``, each in a process of its own (a fresh
    allocator state), one JSON line each."""
    for size in (int(s) for s in args.value_sizes.split(",")):
        argv = [a for a in sys.argv[2:]]
        at = argv.index("--value-sizes")
        del argv[at : at + 2]
        subprocess.run(
            [sys.executable, __file__, "large", "--value-size", str(size), *argv], check=True
        )


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
    parser.add_argument(
        "--value-sizes",
        default=None,
        help="large: several value sizes (comma-separated), each run in a process of its own",
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="large: rounds, alternating which side goes first"
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
    if args.mode == "large" and args.value_sizes:
        large_sizes(args)
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
