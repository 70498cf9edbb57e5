"""pipeline/: the PySpark data source ``inkpen``: read a checkpoint as a DataFrame, bulk-load one.

::

    import inkpen.pipeline
    inkpen.pipeline.register(spark)

    df = spark.read.format("inkpen").option("path", url).load()          # one checkpoint
    df.filter("bucket = X'7573657273'").show()                            # pushed down
    rows.write.format("inkpen").option("path", url).mode("append").save() # one atomic commit

Reads pin a checkpoint when the DataFrame is loaded (:mod:`.pinning`), split the key space into
partitions balanced by size (:mod:`.plan`, :mod:`.splits`), push bucket and key-range filters
down (:mod:`.ranges`) and stream each partition as Arrow batches (:mod:`.scan`). Bulk loads write
sorted journal files and SSTs per task (:mod:`.load_task`) and commit them all in one manifest
CAS, fencing any live writer and keeping its acknowledged writes (:mod:`.commit`, :mod:`.tail`).
Options are listed in :mod:`.options`, the schemas in :mod:`.schema`. README.md's Spark section
and DESIGN.md section 9 describe the protocols.
"""

from __future__ import annotations

from typing import Any

from .commit import LoadReport, commit_load
from .load_task import LoadedPartition, write_partition
from .pinning import pinned_checkpoint
from .source import NAME, InkpenDataSource, InkpenReader, InkpenWriter

DefaultSource = InkpenDataSource
"""The name Spark's automatic registration looks for in a top-level ``pyspark_*`` module."""

PUSHDOWN_SETTING = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> None:
    """Register the ``inkpen`` format with a SparkSession, and let it take pushed filters.

    Spark refuses to plan a Python data source that accepts filters while
    ``spark.sql.python.filterPushdown.enabled`` is false (its default), so this turns it on.
    """
    spark.conf.set(PUSHDOWN_SETTING, "true")
    spark.dataSource.register(InkpenDataSource)


__all__ = [
    "NAME",
    "PUSHDOWN_SETTING",
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
