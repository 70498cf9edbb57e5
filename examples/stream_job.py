"""Stream the changes of a live inkpen store into a Parquet table with Spark Structured Streaming.

    python examples/stream_job.py                 # 100,000 changes, Spark local[2]
    python examples/stream_job.py --n 20000 --dir ./.inkpen-demo/stream

A writer thread puts (and now and then deletes) N objects into a store while a streaming query
reads the store's change feed (``spark.readStream.format("inkpen").option("path", url)``) and
appends every change to a Parquet table. When the writer is done the query processes what is
left and stops; the job checks that the table holds every change exactly once, in SQN order
1..N, and prints rows, seconds and rows per second, then the same as one JSON line. The query
starts at the earliest change (``startingOffsets``, ``earliest`` by default) and holds the feed
cursor ``orders-stream`` (``.option("cursor", name)``; without it a query names one of its own in
its checkpoint's offsets), renewed as it commits, so the store keeps every change it has not
read. The job makes that cursor, at SQN 0, before the writer starts: a store lets go of a
replaced small value once its ledger holds the value (and journal compaction of any replaced
change) unless a cursor holds it, and a query that began later would find only the changes
still there (the latest of every key, and every change after it started).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

from pyspark.sql import SparkSession

import inkpen

CURSOR = "orders-stream"
"""The feed cursor the query holds: made before the first write, so every change is kept."""


def write_changes(url: str, n: int, done: threading.Event) -> None:
    with inkpen.open(url) as book:
        for i in range(n):
            if i % 10 == 9:
                book.delete("orders", f"{i - 1:010d}")
            else:
                book.put("orders", f"{i:010d}", b"x" * 100)
    done.set()


def main(argv: list[str] | None = None, *, spark: SparkSession | None = None) -> int:
    """Run the job; ``spark``: a session to use (left running) instead of a new one."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=int(os.environ.get("INKPEN_STREAM_N", 100_000)))
    parser.add_argument("--dir", default=None, help="keep the store and table here")
    args = parser.parse_args(argv)
    base = args.dir or tempfile.mkdtemp(prefix="inkpen-stream-")
    url, table, checkpoint = (os.path.join(base, p) for p in ("db", "table", "checkpoint"))
    os.makedirs(url, exist_ok=True)
    with inkpen.open(url) as book:  # the stream needs a database to start on
        book.create_feed_cursor(CURSOR, 0, lifetime=86400, owner="examples/stream_job.py")
    own = spark is None
    spark = spark or (
        SparkSession.builder.master("local[2]")
        .appName("inkpen-stream-job")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    if own:
        spark.sparkContext.setLogLevel("ERROR")
    try:
        done = threading.Event()
        writer = threading.Thread(target=write_changes, args=(url, args.n, done))
        started = time.monotonic()
        writer.start()
        query = (
            spark.readStream.format("inkpen")
            .option("path", url)
            .option("cursor", CURSOR)
            .load()
            .writeStream.format("parquet")
            .option("path", table)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="1 second")
            .start()
        )
        writer.join()
        query.processAllAvailable()
        query.stop()
        seconds = time.monotonic() - started
        sqns = [r.sqn for r in spark.read.parquet(table).select("sqn").orderBy("sqn").collect()]
        exact = sqns == list(range(1, args.n + 1))
        figures = {
            "changes": args.n,
            "rows": len(sqns),
            "exactly_once": exact,
            "seconds": round(seconds, 2),
            "rows_per_second": round(len(sqns) / seconds),
        }
        print(
            f"streamed {len(sqns):,} changes in {seconds:.1f} s ({figures['rows_per_second']:,}/s)"
        )
        print(f"exactly once, in SQN order: {exact}")
        print(json.dumps(figures))
        return 0 if exact else 1
    finally:
        if own:
            spark.stop()
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
