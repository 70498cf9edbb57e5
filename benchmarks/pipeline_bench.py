"""Measures puts with several journal segment writes in flight, on a local directory with and
without a delay on every store request, and prints the figures.

For each client count and each ``segments_in_flight`` (k), a fresh database takes ``--puts``
puts of ``--value-size`` bytes from that many threads, on a plain local directory and through
:class:`~inkpen.objectstore.faults.FaultyStore` with ``FaultPlan(delay=...)`` (every request
waits 20 to 30 ms by default: an object store's round trip), the two taking turns ``--rounds``
times (a shared machine's load moves between runs). Printed per k, the median of the rounds:
puts/s, put latency p50 and p99 in ms, segments written and the mean puts per segment; for the
delayed runs, the ratio of their puts/s to the same k's without delay.
With round trip r and k writes in flight, a put waits at least r plus the wait for its batch, and
throughput is at most k x batch / r (the clients bound the batch).

Run: ``python benchmarks/pipeline_bench.py [--puts N] [--rounds R] [--clients 128,256]
[--k 1,2,4,8,16] [--delay 0.02,0.03] [--flush-policy idle|interval] [--dir DIR] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import inkpen
from inkpen.objectstore import open_store
from inkpen.objectstore.faults import FaultPlan, FaultyStore


@dataclass(frozen=True)
class Run:
    clients: int
    k: int
    delayed: bool
    puts_per_s: float
    p50_ms: float
    p99_ms: float
    segments: int
    puts_per_segment: float


def load(
    path: Path,
    *,
    clients: int,
    k: int,
    puts: int,
    value_size: int,
    delay: tuple[float, float] | None,
    flush_policy: str,
) -> Run:
    """Load one fresh database; answers its figures (the open is not timed, and the database is
    abandoned rather than closed: close's own requests are another matter)."""
    shutil.rmtree(path, ignore_errors=True)
    store = open_store(str(path))
    target = store if delay is None else FaultyStore(store, FaultPlan(seed=1, delay=delay))
    book = inkpen.open(target, segments_in_flight=k, flush_policy=flush_policy)
    value = os.urandom(value_size)
    per_client = puts // clients
    latencies: list[list[float]] = [[] for _ in range(clients)]
    barrier = threading.Barrier(clients + 1)

    def client(index: int) -> None:
        mine = latencies[index]
        barrier.wait()
        for n in range(per_client):
            began = time.perf_counter()
            book.put("b", f"c{index:03d}-{n:07d}", value)
            mine.append(time.perf_counter() - began)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    before = book.stats()["segments_written"]
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    segments = book.stats()["segments_written"] - before
    book.abandon()
    store.close()
    shutil.rmtree(path, ignore_errors=True)
    every = sorted(t for mine in latencies for t in mine)
    done = len(every)
    return Run(
        clients=clients,
        k=k,
        delayed=delay is not None,
        puts_per_s=round(done / seconds),
        p50_ms=round(statistics.median(every) * 1000, 1),
        p99_ms=round(every[min(done - 1, int(done * 0.99))] * 1000, 1),
        segments=segments,
        puts_per_segment=round(done / max(1, segments), 1),
    )


def median_run(runs: list[Run]) -> Run:
    """The medians of ``runs`` (one configuration's rounds), figure by figure."""
    first = runs[0]
    return Run(
        clients=first.clients,
        k=first.k,
        delayed=first.delayed,
        puts_per_s=statistics.median(r.puts_per_s for r in runs),
        p50_ms=statistics.median(r.p50_ms for r in runs),
        p99_ms=statistics.median(r.p99_ms for r in runs),
        segments=round(statistics.median(r.segments for r in runs)),
        puts_per_segment=statistics.median(r.puts_per_segment for r in runs),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--puts", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", default="128,256")
    parser.add_argument("--k", default="1,2,4,8,16")
    parser.add_argument("--delay", default="0.02,0.03", help="low,high seconds per request")
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--flush-policy", default="idle", choices=("idle", "interval"))
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="one JSON object per median")
    args = parser.parse_args()
    low, high = (float(x) for x in args.delay.split(","))
    root = Path(args.dir or tempfile.mkdtemp(prefix="inkpen-pipeline-"))
    ks = [int(x) for x in args.k.split(",")]
    for clients in (int(x) for x in args.clients.split(",")):
        for k in ks:
            rounds: dict[bool, list[Run]] = {False: [], True: []}
            for _ in range(args.rounds):
                for delay in (None, (low, high)):
                    run = load(
                        root / "db",
                        clients=clients,
                        k=k,
                        puts=args.puts,
                        value_size=args.value_size,
                        delay=delay,
                        flush_policy=args.flush_policy,
                    )
                    rounds[delay is not None].append(run)
            plain, slowed = median_run(rounds[False]), median_run(rounds[True])
            for run in (plain, slowed):
                if args.json:
                    print(json.dumps(asdict(run)), flush=True)
                    continue
                ratio = f"  {run.puts_per_s / plain.puts_per_s:.2f}x" if run.delayed else ""
                print(
                    f"clients={clients:<4} k={k:<3} {'delay' if run.delayed else 'none ':<5} "
                    f"{run.puts_per_s:>7.0f} puts/s  p50 {run.p50_ms:>6} ms  p99 "
                    f"{run.p99_ms:>6} ms  {run.segments:>6} segments "
                    f"({run.puts_per_segment} puts each){ratio}",
                    flush=True,
                )
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
