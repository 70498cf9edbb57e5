"""Measures the Spark streaming source: ``--n`` changes streamed into Parquet on ``local[2]``.

Steps, each timed:

1. **load**: ``--n`` puts of ``--value-bytes`` values into a local directory store, written in
   batches of ``--batch`` changes (``inkpen.Batch`` and ``Bookie.write``), then the store closes;
2. **stream**: ``spark.readStream.format("inkpen").option("path", url).load()`` (the plain call,
   no other option) into a Parquet table with ``trigger(availableNow=True)``: every change, from
   SQN 1 to the last, in as many micro-batches as the source's defaults give;
3. **check**: the table holds SQNs 1..n exactly once (a Spark count and min/max of ``sqn``).

Prints the figures as one JSON object; ``stream_rows_per_s`` is rows over the stream step's
wall time (query start to termination, Spark's fixed costs included). Run:
``python benchmarks/stream_bench.py [--n 1000000] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time

import structlog
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import inkpen


def load(url: str, n: int, batch_size: int, value_bytes: int) -> float:
    """Write ``n`` puts in batches; returns seconds."""
    value = b"v" * value_bytes
    started = time.monotonic()
    with inkpen.open(url) as book:
        batch = inkpen.Batch()
        for i in range(n):
            batch.put("bench", f"{i:010d}", value)
            if len(batch) == batch_size:
                book.write(batch)
                batch = inkpen.Batch()
        book.write(batch)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=5_000, help="changes per Bookie.write")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dir", default=None, help="keep the store and table here")
    args = parser.parse_args()
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    logging.getLogger("inkpen").setLevel(logging.WARNING)
    base = args.dir or tempfile.mkdtemp(prefix="inkpen-stream-bench-")
    url, table, checkpoint = (os.path.join(base, p) for p in ("db", "table", "checkpoint"))
    os.makedirs(url, exist_ok=True)
    results: dict[str, object] = {"n": args.n, "master": args.master}
    try:
        load_s = load(url, args.n, args.batch, args.value_bytes)
        results["load_s"] = round(load_s, 1)
        results["load_puts_per_s"] = round(args.n / load_s)
        spark = (
            SparkSession.builder.master(args.master)
            .appName("inkpen-stream-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            started = time.monotonic()
            query = (
                spark.readStream.format("inkpen")
                .option("path", url)
                .load()
                .writeStream.format("parquet")
                .option("path", table)
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            stream_s = time.monotonic() - started
            if query.exception() is not None:
                raise RuntimeError(f"the stream failed: {query.exception()}")
            batches = len(query.recentProgress)
            row = (
                spark.read.parquet(table)
                .agg(
                    F.count("*").alias("rows"),
                    F.countDistinct("sqn").alias("distinct"),
                    F.min("sqn").alias("lo"),
                    F.max("sqn").alias("hi"),
                )
                .collect()[0]
            )
        finally:
            spark.stop()
        results["stream_s"] = round(stream_s, 1)
        results["stream_rows"] = row.rows
        results["stream_rows_per_s"] = round(row.rows / stream_s)
        results["micro_batches"] = batches
        results["exactly_once"] = (row.rows, row.distinct, row.lo, row.hi) == (
            args.n,
            args.n,
            1,
            args.n,
        )
        results["load_average"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
