"""``inkpen reshard SRC DEST --shards M``: copy a data set or a database into a new data set of M
shards, on a Spark session of this machine.

The work is :func:`inkpen.pipeline.reshard` (docs/data-sets.md, 'Resharding'): one checkpoint
per source shard, a Spark job that copies every object into its new shard, one atomic commit
per new shard
(a rerun after a failure commits only the missing ones) and a verification of counts and tictac
trees before the command reports success. Every check that needs no Spark (the shard count, the
two locations, what each holds) runs first, so a refused command starts no JVM. PySpark is
imported only here, when the command runs: the rest of the command line works without the
``spark`` extra.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING

import click

from . import render
from .failures import EXIT_FAILED, CommandFailed
from .progress import progress
from .targets import checked_url

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_SETTINGS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "8",
}


def _local_spark(master: str) -> SparkSession:
    """A Spark session on this machine whose Python workers run this interpreter (which has
    inkpen), with the ``inkpen`` source registered."""
    from pyspark.sql import SparkSession

    import inkpen.pipeline

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName("inkpen reshard")
    for name, value in SPARK_SETTINGS.items():
        builder = builder.config(name, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    inkpen.pipeline.register(session)
    return session


def _ranges(shards: tuple[int, ...]) -> str:
    """``0-3, 5, 7-9`` (``none`` when empty)."""
    if not shards:
        return "none"
    runs: list[list[int]] = []
    for shard in shards:
        if runs and shard == runs[-1][1] + 1:
            runs[-1][1] = shard
        else:
            runs.append([shard, shard])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@click.command()
@click.argument("url", metavar="SRC")
@click.argument("dest")
@click.option(
    "--shards", type=int, required=True, help="The new data set's shard count (1 to 4096)."
)
@click.option(
    "--master",
    default="local[*]",
    show_default=True,
    help="The Spark master of the session the command starts.",
)
@click.option(
    "--checkpoint-lifetime",
    type=float,
    default=86400.0,
    show_default=True,
    help="Seconds the source's checkpoints outlive a failed run, for its rerun.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def reshard(
    url: str, dest: str, shards: int, master: str, checkpoint_lifetime: float, as_json: bool
) -> None:
    """Copy the data set or database at SRC into a new data set of SHARDS shards at DEST.

    Reads SRC at one checkpoint per shard (its objects are not changed), writes each object,
    with its index entries, TTL and last-modified time, into the shard it routes to, commits
    each new shard atomically and verifies the copy (object, index-entry and byte counts, and
    tictac trees of both sides) before it reports success. DEST must be empty or absent. After
    a failure run the same command again: it reads the same checkpoints (while they live) and
    commits only the shards still missing. Runs on a local Spark session (the spark extra).
    On a sharded data set it reads every shard (no --shard: the copy is of the whole set).

    \b
    Example:
      inkpen reshard ./events ./events-16 --shards 16
      inkpen reshard s3://b/events s3://b/events-32 --shards 32 --master 'local[8]'
    """
    src = url
    checked_url(src, must_exist=True)
    checked_url(dest, must_exist=False)
    try:
        from inkpen.pipeline.reshard import check_reshard
        from inkpen.pipeline.reshard import reshard as run_reshard
    except ImportError as exc:
        raise CommandFailed(str(exc), EXIT_FAILED) from exc
    check_reshard(src, dest, shards=shards)  # refuse before a JVM starts
    with progress("reshard", f"resharding {src} into {dest}") as bar:
        bar.phase("starting Spark")
        spark = _local_spark(master)
        try:
            report = run_reshard(
                spark,
                src,
                dest,
                shards=shards,
                checkpoint_lifetime=checkpoint_lifetime,
                phase=bar.phase,
            )
        finally:
            spark.stop()
    if as_json:
        render.echo_json(asdict(report))
        return
    origin = f"{report.source_shards} shards" if report.source_is_data_set else "a database"
    click.echo(f"resharded {src} ({origin}) into {dest} ({report.shards} shards)")
    click.echo(
        f"verified   {report.objects:,} objects, {report.index_entries:,} index entries, "
        f"{render.size(report.value_bytes)} of values: counts and tictac trees match"
    )
    click.echo(
        f"committed  shards {_ranges(report.committed)} ({report.rows_loaded:,} rows) in "
        f"{report.copy_tasks} copy task(s); already there: {_ranges(report.resumed)}"
    )
