"""Measures transactions against batches, uncontended and contended, and prints the figures.

- ``uncontended``: ``--threads`` threads, each on keys of its own: a transaction that reads two
  keys and writes them (``book.transaction()``: get, get, put, put, commit) against a batch of
  two puts (``book.write``), for ``--seconds`` each, taking turns ``--rounds`` times so that the
  machine's other load weighs on both alike. Figures: commits/s of each (the best round and the
  median) and the ratio transaction / batch.
- ``contended``: the same threads move amounts between ``--hot`` accounts (read two, write two),
  under ``inkpen.retrying``, at each isolation level: commits/s, and the conflict rate (attempts
  that ended in ``ConflictError`` / attempts).

Run: ``python benchmarks/txn_bench.py [--store memory|local] [--threads 8] [--seconds 2]``;
one JSON line per figure, then a summary.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import inkpen

VALUE = b"v" * 100


def _run(threads: int, seconds: float, body: Callable[[int, random.Random], None]) -> int:
    """Run ``body(thread, rng)`` in a loop on each thread until the deadline; count the calls."""
    deadline = time.monotonic() + seconds
    counts = [0] * threads

    def worker(n: int) -> None:
        rng = random.Random(n)
        while time.monotonic() < deadline:
            body(n, rng)
            counts[n] += 1

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return sum(counts)


def uncontended(book: inkpen.Bookie, threads: int, seconds: float, rounds: int) -> dict[str, float]:
    keys = 1000

    def txn(n: int, rng: random.Random) -> None:
        a, b = rng.sample(range(keys), 2)
        with book.transaction() as t:
            t.get("u", f"t{n}-{a}")
            t.get("u", f"t{n}-{b}")
            t.put("u", f"t{n}-{a}", VALUE)
            t.put("u", f"t{n}-{b}", VALUE)

    def batch(n: int, rng: random.Random) -> None:
        a, b = rng.sample(range(keys), 2)
        write = inkpen.Batch()
        write.put("u", f"t{n}-{a}", VALUE).put("u", f"t{n}-{b}", VALUE)
        book.write(write)

    txn_rates: list[float] = []
    batch_rates: list[float] = []
    for _ in range(rounds):
        batch_rates.append(_run(threads, seconds, batch) / seconds)
        txn_rates.append(_run(threads, seconds, txn) / seconds)
    figures = {
        "txn_per_s_best": max(txn_rates),
        "txn_per_s_median": statistics.median(txn_rates),
        "batch_per_s_best": max(batch_rates),
        "batch_per_s_median": statistics.median(batch_rates),
        "ratio_best": max(txn_rates) / max(batch_rates),
        "ratio_median": statistics.median(
            t / b for t, b in zip(txn_rates, batch_rates, strict=True)
        ),
    }
    print(json.dumps({"workload": "uncontended", **{k: round(v, 2) for k, v in figures.items()}}))
    return figures


def contended(
    book: inkpen.Bookie, threads: int, seconds: float, hot: int, isolation: str
) -> dict[str, float]:
    accounts = [f"a{i}" for i in range(hot)]
    for account in accounts:
        book.put("c", account, b"1000")
    attempts = [0] * threads
    done = [0] * threads

    def transfer(n: int, rng: random.Random) -> None:
        def once() -> None:
            attempts[n] += 1
            src, dst = rng.sample(accounts, 2)
            with book.transaction(isolation) as t:
                have, other = (int(v or b"0") for v in t.get_many("c", [src, dst]))
                amount = min(have, rng.randint(1, 10))
                t.put("c", src, str(have - amount).encode())
                t.put("c", dst, str(other + amount).encode())

        try:
            inkpen.retrying(once, attempts=1000, base_delay=0.0005, max_delay=0.01)
        except inkpen.ConflictError:
            return  # gave up: not a commit
        done[n] += 1

    _run(threads, seconds, transfer)
    commits = sum(done)
    total = sum(int(v or b"0") for v in book.get_many("c", accounts))
    assert total == 1000 * hot, f"the total moved: {total}"
    tried = sum(attempts)
    figures = {
        "commits_per_s": commits / seconds,
        "attempts": float(tried),
        "conflict_rate": (tried - commits) / max(1, tried),
    }
    print(
        json.dumps(
            {
                "workload": "contended",
                "isolation": isolation,
                "hot_keys": hot,
                **{k: round(v, 3) for k, v in figures.items()},
            }
        )
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("memory", "local"), default="memory")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hot", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        url = "memory://txn-bench" if args.store == "memory" else str(Path(scratch) / "db")
        with inkpen.open(url) as book:
            flat = uncontended(book, args.threads, args.seconds, args.rounds)
            hot = {
                iso: contended(book, args.threads, args.seconds, args.hot, iso)
                for iso in ("snapshot", "serializable")
            }
    print(
        f"{args.store}, {args.threads} threads: transactions {flat['txn_per_s_median']:,.0f}/s "
        f"vs batches {flat['batch_per_s_median']:,.0f}/s (median ratio "
        f"{flat['ratio_median']:.2f}, best {flat['ratio_best']:.2f}); contended on {args.hot} "
        f"keys: snapshot {hot['snapshot']['commits_per_s']:,.0f}/s with "
        f"{hot['snapshot']['conflict_rate']:.0%} conflicts, serializable "
        f"{hot['serializable']['commits_per_s']:,.0f}/s with "
        f"{hot['serializable']['conflict_rate']:.0%} conflicts"
    )


if __name__ == "__main__":
    main()
