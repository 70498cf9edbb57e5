"""Spark over a sharded data set against one database: bulk-load and read rows/s, and the ratios.

    python benchmarks/spark_shards_bench.py                    # N = 200,000, 8 shards, local[2]
    python benchmarks/spark_shards_bench.py --n 50000 --shards 4 --partitions 4

The same generated DataFrame (four buckets, ten-digit keys, values of about 100 bytes) is loaded
into one database and into a data set of ``--shards`` shards, each in a fresh temporary
directory, then each is read back whole (every value, summed by Spark). It prints rows/s of each
step and the ratios data set / one database, then everything once more as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import inkpen.pipeline
import inkpen.shards


def generate(spark: SparkSession, n: int, partitions: int) -> DataFrame:
    ids = spark.range(0, n, numPartitions=partitions)
    return ids.select(
        F.concat(F.lit("bucket-"), (F.col("id") % 4).cast("string")).alias("bucket"),
        F.format_string("key-%010d", F.col("id")).alias("key"),
        F.concat(F.lit("value-"), F.col("id").cast("string"), F.lit("-" + "x" * 80))
        .cast("binary")
        .alias("value"),
    )


def load_and_read(spark: SparkSession, url: str, n: int, partitions: int) -> dict[str, float]:
    frame = generate(spark, n, partitions)
    started = time.perf_counter()
    frame.write.format("inkpen").option("path", url).mode("append").save()
    loaded = time.perf_counter() - started
    started = time.perf_counter()
    totals = (
        spark.read.format("inkpen")
        .option("path", url)
        .load()
        .select(F.count("*"), F.sum(F.length("value")))
        .first()
    )
    read = time.perf_counter() - started
    assert totals is not None and int(totals[0]) == n, totals
    return {"load_rows_per_s": n / loaded, "read_rows_per_s": n / read}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=4, help="Spark partitions of the load")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(args.master)
        .appName("inkpen-shards-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    inkpen.pipeline.register(spark)
    root = tempfile.mkdtemp(prefix="inkpen-shards-bench-")
    try:
        generate(spark, 1000, 2).count()  # warm the JVM and the Python workers
        one = load_and_read(spark, os.path.join(root, "one"), args.n, args.partitions)
        sharded_url = os.path.join(root, "set")
        inkpen.shards.create(sharded_url, shards=args.shards)
        sharded = load_and_read(spark, sharded_url, args.n, args.partitions)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    result = {
        "n": args.n,
        "shards": args.shards,
        "partitions": args.partitions,
        "master": args.master,
        "one_database": one,
        "data_set": sharded,
        "load_ratio": sharded["load_rows_per_s"] / one["load_rows_per_s"],
        "read_ratio": sharded["read_rows_per_s"] / one["read_rows_per_s"],
    }
    print(f"N = {args.n:,}, {args.master}, load partitions {args.partitions}")
    for name, figures in (("one database", one), (f"{args.shards} shards", sharded)):
        print(
            f"{name:>12}: load {figures['load_rows_per_s']:>9,.0f} rows/s, "
            f"read {figures['read_rows_per_s']:>9,.0f} rows/s"
        )
    load_ratio, read_ratio = result["load_ratio"], result["read_ratio"]
    print(f"ratio (shards / one): load {load_ratio:.2f}x, read {read_ratio:.2f}x")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
