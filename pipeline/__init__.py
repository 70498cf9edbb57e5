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
Options are listed in :mod:`.options`, the schemas in :mod:`.schema`. README.md's Spark section
and DESIGN.md section 9 describe the protocols.
"""

from __future__ import annotations

from typing import Any

from . import _requires  # noqa: F401  (first: says which extra to install)
from .commit import LoadReport, commit_load
from .load_task import LoadedPartition, write_partition
from .pinning import pinned_checkpoint
from .source import NAME, InkpenDataSource, InkpenReader, InkpenWriter

DefaultSource = InkpenDataSource
"""The name Spark's automatic registration looks for in a top-level ``pyspark_*`` module."""


def register(spark: Any) -> None:
    """Register the ``inkpen`` format with a SparkSession by hand.

    Not needed where inkpen is installed in the Python that Spark's workers run: Spark 4 finds
    the source there by itself (through ``pyspark_inkpen``). No session setting is needed or
    changed: the source takes no pushed filters, so ``spark.sql.python.filterPushdown.enabled``
    may be on or off.
    """
    spark.dataSource.register(InkpenDataSource)


__all__ = [
    "NAME",
    "DefaultSource",
    "InkpenDataSource",
    "InkpenReader",
    "InkpenWriter",
    "LoadReport",
    "LoadedPartition",
    "commit_load",
    "pinned_checkpoint",
    "register",
    "write_partition",
]
