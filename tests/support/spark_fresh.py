"""A Spark job in a fresh process and session, for the pipeline tests that need one of their own.

It never calls ``inkpen.pipeline.register`` and leaves Python filter pushdown at Spark's default,
so ``format("inkpen")`` works only if Spark found the source by itself (``pyspark_inkpen``). It
bulk-loads ``--rows`` rows into ``--url``, reads them back whole and filtered, and prints one
JSON line: where inkpen was imported from and what each action returned.

    python -m support.spark_fresh --master local-cluster[2,1,1024] --url DIR --rows 3000
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import inkpen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--url", required=True)
    parser.add_argument("--rows", type=int, default=3000)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master(args.master)
        .appName("inkpen-fresh-session")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.executorEnv.PYTHONSAFEPATH", "1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        rows = spark.range(0, args.rows, numPartitions=4).select(
            F.concat(F.lit("b"), (F.col("id") % 2).cast("string")).alias("bucket"),
            F.format_string("k%05d", F.col("id")).alias("key"),
            F.concat(F.lit("v"), F.col("id").cast("string")).cast("binary").alias("value"),
        )
        rows.write.format("inkpen").option("path", args.url).mode("append").save()
        frame = spark.read.format("inkpen").option("path", args.url).option("key_type", "string")
        loaded = frame.load()
        whole = sorted((r.bucket, r.key, bytes(r.value)) for r in loaded.collect())
        filtered = loaded.filter((F.col("bucket") == "b1") & (F.col("key") < "k01000")).count()
        after = loaded.count()
        print(
            json.dumps(
                {
                    "inkpen": inkpen.__file__,
                    "executors": spark.sparkContext.getConf().get("spark.master"),
                    "rows": len(whole),
                    "right": whole
                    == sorted((f"b{n % 2}", f"k{n:05d}", b"v%d" % n) for n in range(args.rows)),
                    "filtered": filtered,
                    "count_after": after,
                }
            ),
            flush=True,
        )
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
