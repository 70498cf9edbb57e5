"""Spark's automatic registration of Python data sources finds inkpen's (format ``inkpen``) here.

Spark 4 registers the ``DefaultSource`` of every installed top-level module whose name starts with
``pyspark_``, so ``spark.read.format("inkpen")`` works without ``inkpen.pipeline.register(spark)``.
"""

from inkpen.pipeline import DefaultSource

__all__ = ["DefaultSource"]
