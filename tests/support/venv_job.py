"""A Spark job as a user runs one from a virtualenv: ``.venv/bin/python venv_job.py`` or
``spark-submit venv_job.py``, without setting anything for Spark's Python workers.

It imports only pyspark and inkpen (so it runs as a plain script, outside the checkout) and
changes no ``PYSPARK_*`` variable. It writes ``--rows`` rows with ``format("inkpen")``; if Spark
did not find the source and ``--register`` is given, it calls ``inkpen.pipeline.register`` and
writes again; then it reads the rows back. With ``--then-python PY`` it stops that session,
starts another whose workers run ``PYSPARK_PYTHON=PY``, and reports what ``register`` said.
It prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

from pyspark.sql import SparkSession

import inkpen.pipeline
from inkpen.errors import UsageError


def start() -> SparkSession:
    session = (
        SparkSession.builder.master("local[2]")
        .appName("inkpen-venv-job")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def write(spark: SparkSession, url: str, rows: int) -> str:
    """``ok``, or Spark's error class and message (``[NAME] ...``), else the error's first line."""
    frame = spark.createDataFrame(
        [("b", f"k{n:04d}", b"v%d" % n) for n in range(rows)],
        "bucket string, key string, value binary",
    )
    try:
        frame.write.format("inkpen").option("path", url).mode("append").save()
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        named = re.search(r"\[[A-Z_]+\][^\n]*", text)
        return named.group(0) if named else text.splitlines()[0]
    return "ok"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--register", action="store_true")
    parser.add_argument("--then-python")
    args = parser.parse_args()
    out: dict[str, Any] = {"driver": sys.executable, "inkpen": inkpen.__file__}
    spark = start()
    try:
        out["workers"] = spark.sparkContext.pythonExec
        out["found"] = write(spark, args.url, args.rows)
        if out["found"] != "ok" and args.register:
            inkpen.pipeline.register(spark)
            out["written"] = write(spark, args.url, args.rows)
        loaded = spark.read.format("inkpen").option("path", args.url).option("key_type", "string")
        out["rows"] = sorted([r.key, bytes(r.value).decode()] for r in loaded.load().collect())
    finally:
        spark.stop()
    if args.then_python:
        os.environ["PYSPARK_PYTHON"] = args.then_python
        spark = start()
        try:
            out["then_workers"] = spark.sparkContext.pythonExec
            try:
                inkpen.pipeline.register(spark)
                out["then_register"] = "ok"
            except UsageError as exc:
                out["then_register"] = f"UsageError: {exc}"
        finally:
            spark.stop()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
