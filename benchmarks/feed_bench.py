"""Measures the change feed and following Readers on a local directory and on SeaweedFS.

For each store: ``--n`` puts (values of 100 bytes) by ``--clients`` threads, so that they share
group-commit segments; then

- **feed rows/s**: a Reader's ``changes()`` over all of them (journal files, read in chunks);
- **idle follower requests/min**: a following Reader (``refresh_interval`` 1 s) on a store
  wrapped in a request counter, watched for ``--idle`` seconds while nothing is written;
- **follower lag**: while ``--clients`` threads put ``--lag-n`` more objects, a following Reader
  (``refresh_interval`` ``--interval``) tails ``changes(wait=...)``; the lag of a change is the
  time from its ``put`` returning to the follower yielding it (p50 / p99 / max, ms), with the
  machine's load average (``os.getloadavg()``, as ``uptime`` shows it) when the tail ends.

The follower runs in this process beside the writer (on a 2-core machine they compete for it).
Output is one JSON object. Run: ``python benchmarks/feed_bench.py [--n N] [--stores local,s3]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog

import inkpen
from inkpen.objectstore import open_store
from inkpen.objectstore.counting import CountingStore


def put_all(
    book: inkpen.Bookie, prefix: str, n: int, clients: int, acked: dict[bytes, float]
) -> None:
    def client(c: int) -> None:
        for i in range(c, n, clients):
            key = f"{prefix}{i:09d}"
            book.put("bench", key, b"v" * 100)
            acked[key.encode()] = time.monotonic()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _pct(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {
        "p50": round(statistics.median(values), 1),
        "p99": round(values[min(len(values) - 1, int(len(values) * 0.99))], 1),
        "max": round(values[-1], 1),
    }


def measure(url: str, args: argparse.Namespace) -> dict[str, object]:
    result: dict[str, object] = {}
    with inkpen.open(url) as book:
        started = time.monotonic()
        put_all(book, "a", args.n, args.clients, {})
        result["puts_per_s"] = round(args.n / (time.monotonic() - started))
    with inkpen.open_reader(url) as reader:
        started = time.monotonic()
        rows = sum(1 for _ in reader.changes())
        seconds = time.monotonic() - started
        assert rows == args.n, (rows, args.n)
        result["feed_rows"] = rows
        result["feed_rows_per_s"] = round(rows / seconds)
    store = CountingStore(open_store(url))
    with inkpen.open(url) as book:
        follower = inkpen.open_reader(store, follow=True, refresh_interval=1.0)
        try:
            before = store.snapshot()
            time.sleep(args.idle)
            after = store.snapshot()
            requests = sum(after[k] - before[k] for k in ("puts", "gets", "heads", "lists"))
            result["idle_follower_requests_per_min"] = round(requests * 60 / args.idle, 1)
            result["idle_follower_requests"] = {
                k: after[k] - before[k] for k in ("puts", "gets", "heads", "lists", "deletes")
            }
        finally:
            follower.close()
        acked: dict[bytes, float] = {}
        lags: list[float] = []
        with inkpen.open_reader(url, follow=True, refresh_interval=args.interval) as tail:
            since = tail.last_sqn
            writer = threading.Thread(
                target=put_all, args=(book, "b", args.lag_n, args.clients, acked)
            )
            writer.start()
            seen = 0
            deadline = time.monotonic() + 600
            while seen < args.lag_n and time.monotonic() < deadline:
                for change in tail.changes(since, wait=5.0):
                    now = time.monotonic()
                    since = change.sqn
                    seen += 1
                    ack = acked.get(change.key)
                    if ack is not None:  # not yet recorded: the put is returning right now
                        lags.append(max(0.0, now - ack) * 1000)
            writer.join()
            load_average = os.getloadavg()  # 1-minute average: the load the lag was taken under
        result["lag_changes"] = seen
        result["lag_clients"] = args.clients
        result["load_average_1_5_15"] = [round(x, 2) for x in load_average]
        result["lag_refresh_interval_s"] = args.interval
        result["lag_ms"] = _pct(lags)
    return result


@contextmanager
def _seaweed_root() -> Iterator[str]:
    support = Path(__file__).resolve().parent.parent / "tests"
    sys.path.insert(0, str(support))
    from support.seaweed import DUMMY_CREDENTIALS, start_seaweed

    os.environ.update(DUMMY_CREDENTIALS)
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    with tempfile.TemporaryDirectory(prefix="inkpen-bench-") as directory:
        server = start_seaweed(Path(directory) / "seaweed")
        try:
            yield f"s3://{server.new_bucket()}/bench?endpoint={server.endpoint}"
        finally:
            server.stop()


@contextmanager
def _local_root() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="inkpen-bench-") as directory:
        yield str(Path(directory) / "db")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--idle", type=float, default=30.0, help="seconds to watch idle")
    parser.add_argument("--lag-n", type=int, default=5_000)
    parser.add_argument("--interval", type=float, default=0.25, help="follower refresh (s)")
    parser.add_argument("--stores", default="local,s3", help="comma-separated: local, s3")
    args = parser.parse_args()
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    roots = {"local": _local_root, "s3": _seaweed_root}
    results: dict[str, object] = {"n": args.n, "clients": args.clients}
    for name in args.stores.split(","):
        with roots[name]() as url:
            results[name] = measure(url, args)
        print(json.dumps({name: results[name]}), file=sys.stderr, flush=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
