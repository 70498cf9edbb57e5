"""Bulk-load generated objects into a local directory store with Spark, then read them back.

    python examples/spark_job.py                  # 1,000,000 objects, Spark local[2]
    python examples/spark_job.py --n 20000        # or INKPEN_SPARK_N=20000

It generates N objects (four buckets, ten-digit keys, values of about 100 bytes), bulk-loads them
in one atomic commit, then reads them back twice: everything, and one bucket's key range (a read
narrowed by the options ``bucket``, ``start`` and ``end``, so only that range is read). Spark
finds the source by name. For each step it prints rows, seconds, rows per second and
the Spark tasks of each job, then the files the load wrote, then everything once more as one
JSON line. ``--dir`` keeps the store in a directory of your choice; by default it lives in a
temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

BUCKETS = 4
FILTER_BUCKET = "bucket-1"


@dataclass
class Step:
    """What one step of the job did and what Spark ran for it."""

    name: str
    rows: int = 0
    seconds: float = 0.0
    tasks_per_job: list[int] = field(default_factory=list)

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    def line(self) -> str:
        return (
            f"{self.name}: {self.rows:,} rows in {self.seconds:.1f} s = "
            f"{self.rows_per_second:,.0f} rows/s; Spark jobs {len(self.tasks_per_job)}, "
            f"tasks per job {self.tasks_per_job}"
        )


@contextmanager
def timed(spark: SparkSession, step: Step) -> Iterator[Step]:
    """Time the block and record the tasks each Spark job it ran completed (stages a job skips,
    because an earlier job of the block computed them, count for nothing)."""
    context = spark.sparkContext
    group = f"{step.name}-{uuid.uuid4().hex[:8]}"
    context.setJobGroup(group, step.name)
    started = time.perf_counter()
    try:
        yield step
    finally:
        step.seconds = time.perf_counter() - started
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        tracker = context.statusTracker()
        for job_id in sorted(tracker.getJobIdsForGroup(group)):
            info = tracker.getJobInfo(job_id)
            stages = [] if info is None else [tracker.getStageInfo(s) for s in info.stageIds]
            step.tasks_per_job.append(sum(s.numCompletedTasks for s in stages if s is not None))


def generate(spark: SparkSession, n: int, partitions: int) -> DataFrame:
    """N objects: bucket ``bucket-<id % 4>``, key ``key-<id, ten digits>``, ~100-byte value."""
    ids = spark.range(0, n, numPartitions=partitions)
    return ids.select(
        F.concat(F.lit("bucket-"), (F.col("id") % BUCKETS).cast("string")).alias("bucket"),
        F.format_string("key-%010d", F.col("id")).alias("key"),
        F.concat(F.lit("value-"), F.col("id").cast("string"), F.lit("-" + "x" * 80))
        .cast("binary")
        .alias("value"),
    )


def count_files(directory: str) -> dict[str, int]:
    """SSTs and journal files in a database directory (docs/layout.md, 'On-store layout')."""
    root = Path(directory)
    return {
        "ssts": sum(1 for _ in root.glob("ledger/*.sst")),
        "journal_files": sum(1 for _ in root.glob("journal/compacted/*.jnl")),
    }


def run(spark: SparkSession, url: str, n: int, partitions: int) -> dict[str, Any]:
    """Load, read all, read one key range; return the figures."""
    load = Step("load")
    with timed(spark, load):
        generate(spark, n, partitions).write.format("inkpen").option("path", url).mode(
            "append"
        ).save()
        load.rows = n
    files = count_files(url)

    read_all = Step("read all")
    with timed(spark, read_all):
        source = spark.read.format("inkpen").option("path", url)
        everything = source.option("partitions", partitions).load()
        totals = everything.select(F.count("*"), F.sum(F.length("value"))).first()
        read_all.rows = int(totals[0]) if totals is not None else 0

    low, high = f"key-{n // 10:010d}", f"key-{n // 5:010d}"
    read_range = Step(f"read {FILTER_BUCKET} [{low}, {high}]")
    with timed(spark, read_range):
        source = spark.read.format("inkpen").option("path", url)  # partitions by size
        chosen = source.option("bucket", FILTER_BUCKET).option("start", low).option("end", high)
        read_range.rows = chosen.load().count()
    expected_range = sum(1 for i in range(n // 10, n // 5 + 1) if i % BUCKETS == 1)
    return {
        "n": n,
        "partitions": partitions,
        "master": spark.sparkContext.master,
        "files_written": files,
        "expected_range_rows": expected_range,
        "steps": [
            {**asdict(step), "rows_per_second": step.rows_per_second}
            for step in (load, read_all, read_range)
        ],
        "lines": [load.line(), read_all.line(), read_range.line()],
    }


def start_spark(master: str) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master(master)
        .appName("inkpen-spark-job")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n", type=int, default=int(os.environ.get("INKPEN_SPARK_N", "1000000")), help="objects"
    )
    parser.add_argument("--partitions", type=int, default=8, help="Spark partitions (tasks)")
    parser.add_argument("--master", default="local[2]", help="Spark master")
    parser.add_argument("--dir", help="store directory (default: a temporary one, removed)")
    args = parser.parse_args(argv)
    if args.n < 1 or args.partitions < 1:
        parser.error("--n and --partitions must be at least 1")
    return args


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> dict[str, Any]:
    """Run the job; with ``spark`` given, on that session (left running), else on a new one."""
    args = parse(argv)
    directory = args.dir or tempfile.mkdtemp(prefix="inkpen-spark-")
    session = spark if spark is not None else start_spark(args.master)
    try:
        results = run(session, os.path.abspath(directory), args.n, args.partitions)
    finally:
        if spark is None:
            session.stop()
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    for line in results["lines"]:
        print(line)
    files = results["files_written"]
    print(f"files written: {files['ssts']} SSTs, {files['journal_files']} journal files")
    print(json.dumps({k: v for k, v in results.items() if k != "lines"}, sort_keys=True))
    return results


if __name__ == "__main__":
    main()
