"""pipeline/: the PySpark data source ``inkpen``: read a checkpoint as a DataFrame, bulk-load one.

::

    df = spark.read.format("inkpen").option("path", url).load()          # one checkpoint
    users = (spark.read.format("inkpen").option("path", url)
             .option("bucket", "users").option("prefix", "a").load())    # narrowed by options
    rows.write.format("inkpen").option("path", url).mode("append").save() # one atomic commit

Spark finds the source by name through the top-level module ``pyspark_inkpen`` installed with
the package; :func:`register` does the same by hand. Reads pin a checkpoint when the DataFrame is
loaded (:mod:`.pinning`), narrow the key space by the options ``bucket``, ``start``, ``end`` and
``prefix`` (:mod:`.ranges`; Spark filters are not pushed down, see :mod:`.source` for why),
split it into partitions balanced by size (:mod:`.plan`, :mod:`.splits`) and stream each
partition as Arrow batches (:mod:`.scan`). Bulk loads write
sorted journal files and SSTs per task (:mod:`.load_task`) and commit them all in one manifest
CAS, fencing any live writer and keeping its acknowledged writes (:mod:`.commit`, :mod:`.tail`).
Over a sharded data set (:mod:`inkpen.shards`) reads, loads and streams work per shard
(:mod:`.sharded`, :mod:`.sharded_load`, :mod:`.sharded_stream`), and :func:`compact` runs every
shard's compactor as one Spark task (:mod:`.compaction`), and :func:`reshard` copies a data set
or a database into a data set of another shard count, verified (:mod:`.reshard`). Options are
listed in :mod:`.options`, the schemas in :mod:`.schema`; :mod:`.interpreter` picks the Python
that :func:`register` gives the source's workers. README.md's Spark section and docs/spark.md
describe the protocols.
"""

from __future__ import annotations

from typing import Any

from . import _requires  # noqa: F401  (first: says which extra to install)
from .commit import LoadReport, commit_load
from .compaction import ShardCompaction, compact
from .interpreter import worker_python
from .load_task import LoadedPartition, write_partition
from .pinning import pinned_checkpoint
from .reshard import ReshardMismatchError, ReshardReport, reshard
from .source import NAME, InkpenDataSource, InkpenReader, InkpenWriter

DefaultSource = InkpenDataSource
"""The name Spark's automatic registration looks for in a top-level ``pyspark_*`` module."""


def register(spark: Any) -> None:
    """Register the ``inkpen`` format with a running SparkSession, with workers that can run it.

    Not needed where inkpen is installed in the Python that Spark's workers run: Spark 4 finds
    the source there by itself (through ``pyspark_inkpen``). Spark's workers run
    ``PYSPARK_PYTHON``, else ``python3``; when that Python cannot import inkpen (a job run as
    ``.venv/bin/python job.py`` without activating the virtualenv) and ``PYSPARK_PYTHON`` is not
    set and the master is local, the source is registered to run its workers with this
    interpreter instead (logged as ``pipeline.worker_python``); other sources and UDFs keep
    Spark's choice. Otherwise a :class:`~inkpen.errors.UsageError` says what to set
    (:mod:`.interpreter`). No session setting is changed: the source takes no pushed filters,
    so ``spark.sql.python.filterPushdown.enabled`` may be on or off.
    """
    context = spark.sparkContext
    python = worker_python(spark)
    if python == context.pythonExec:
        spark.dataSource.register(InkpenDataSource)
        return
    # pyspark gives a registered source the context's interpreter when it pickles the class
    # (pyspark.sql.udf._wrap_function reads SparkContext.pythonExec): lend it ours meanwhile.
    spark_choice = context.pythonExec
    context.pythonExec = python
    try:
        spark.dataSource.register(InkpenDataSource)
    finally:
        context.pythonExec = spark_choice


__all__ = [
    "NAME",
    "DefaultSource",
    "InkpenDataSource",
    "InkpenReader",
    "InkpenWriter",
    "LoadReport",
    "LoadedPartition",
    "ReshardMismatchError",
    "ReshardReport",
    "ShardCompaction",
    "commit_load",
    "compact",
    "pinned_checkpoint",
    "register",
    "reshard",
    "write_partition",
]
