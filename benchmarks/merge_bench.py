"""Measures a counter kept by a merge operator against the same counter kept by read-modify-write,
on one key of a local directory store, and prints the figures.

Each workload runs ``--ops`` increments in all, shared by 1 and by 8 client threads:

- ``merge``: ``book.merge("counters", "hits", b"1", operator="add")``: the writer folds each
  operand onto the value in the step that writes it, so clients never conflict;
- ``rmw``: a ``head`` and a ``get``, then ``put(..., if_sqn=head.sqn)``, again from the start on
  ``ConflictError`` (the README's increment): with several clients most tries conflict.

Every run checks the counter's final value. Each pair runs ``--rounds`` times, interleaved, on a
fresh database each time. One JSON object per line: the workload, the clients, the median
round's increments per second (and, for rmw, its conflicts) and every round's rate; a last line
has ``merge / rmw`` of the medians per client count.

Run: ``python benchmarks/merge_bench.py [--dir DIR] [--ops N] [--clients 1,8] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import inkpen

BUCKET = "counters"
KEY = "hits"


def add(key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> bytes:
    """A decimal counter: each operand is added to the value (absent: 0)."""
    return str(int(existing or b"0") + sum(int(o) for o in operands)).encode()


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


def _share(ops: int, clients: int, client: int) -> int:
    return ops // clients + (1 if client < ops % clients else 0)


def merge_counter(book: inkpen.Bookie, ops: int, clients: int) -> dict[str, float]:
    def work(client: int) -> None:
        for _ in range(_share(ops, clients, client)):
            book.merge(BUCKET, KEY, b"1", operator="add")

    seconds = _clients(clients, work)
    found = book.get(BUCKET, KEY)
    if found != str(ops).encode():
        raise SystemExit(f"merge counter reads {found!r} after {ops} increments")
    return {"ops_per_s": round(ops / seconds, 1)}


def rmw_counter(book: inkpen.Bookie, ops: int, clients: int) -> dict[str, float]:
    conflicts = [0] * clients

    def work(client: int) -> None:
        for _ in range(_share(ops, clients, client)):
            while True:
                head = book.head(BUCKET, KEY)
                count = int(book.get(BUCKET, KEY) or b"0") if head else 0
                try:
                    book.put(BUCKET, KEY, str(count + 1).encode(), if_sqn=head.sqn if head else 0)
                    break
                except inkpen.ConflictError:
                    conflicts[client] += 1

    seconds = _clients(clients, work)
    found = book.get(BUCKET, KEY)
    if found != str(ops).encode():
        raise SystemExit(f"read-modify-write counter reads {found!r} after {ops} increments")
    return {"ops_per_s": round(ops / seconds, 1), "conflicts": sum(conflicts)}


def bench(
    root: Path, ops: int, client_counts: Sequence[int], rounds: int
) -> list[dict[str, object]]:
    lines: list[dict[str, object]] = []
    ratios: dict[str, float] = {}
    for clients in client_counts:
        runs: dict[str, list[dict[str, float]]] = {"merge": [], "rmw": []}
        for turn in range(rounds):  # interleaved, so a busy spell hits both workloads
            for name, workload in (("merge", merge_counter), ("rmw", rmw_counter)):
                url = str(root / f"{name}-{clients}-{turn}")
                with inkpen.open(url, merge_operators={"add": add}) as book:
                    runs[name].append(workload(book, ops, clients))
        rates: dict[str, float] = {}
        for name, figures in runs.items():
            median = sorted(figures, key=lambda f: f["ops_per_s"])[len(figures) // 2]
            rates[name] = median["ops_per_s"]
            line: dict[str, object] = {
                "workload": name,
                "clients": clients,
                **median,
                "rounds_ops_per_s": [f["ops_per_s"] for f in figures],
            }
            lines.append(line)
            print(json.dumps(line), flush=True)
        ratios[f"{clients}_clients"] = round(rates["merge"] / rates["rmw"], 2)
    summary: dict[str, object] = {"merge_over_rmw": ratios}
    print(json.dumps(summary), flush=True)
    lines.append(summary)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="where the databases go (a temp dir if unset)")
    parser.add_argument("--ops", type=int, default=2000, help="increments per run")
    parser.add_argument("--clients", default="1,8", help="client thread counts, comma separated")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each; the median is shown")
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        bench(args.dir, args.ops, counts, args.rounds)
        return
    with tempfile.TemporaryDirectory(prefix="inkpen-merge-bench-") as root:
        bench(Path(root), args.ops, counts, args.rounds)


if __name__ == "__main__":
    main()
