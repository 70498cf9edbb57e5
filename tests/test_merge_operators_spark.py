"""A Spark read of a database written with merges sees the folded values, with no operator given
to Spark: the journal holds folded values (docs/writes.md, 'Merge operators')."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import inkpen

pytest_plugins = ("support.spark",)
pytestmark = pytest.mark.spark


def add(key: bytes, existing: bytes | None, operands: Sequence[bytes]) -> bytes:
    return str(int(existing or b"0") + sum(int(o) for o in operands)).encode()


def test_a_spark_read_sees_folded_values(spark: SparkSession, tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    model: dict[str, bytes] = {}
    with inkpen.open(url, merge_operators={"add": add}, ledger_cache_entries=16) as book:
        for i in range(200):
            key = f"c{i % 7}"
            book.merge("counters", key, str(i).encode(), operator="add")
            model[key] = add(b"", model.get(key), [str(i).encode()])
        book.delete("counters", "c3")
        del model["c3"]
        book.merge("counters", "c3", b"5", operator="add")
        model["c3"] = b"5"
        book.flush()
    rows = (
        spark.read.format("inkpen")
        .option("path", url)
        .option("key_type", "string")
        .load()
        .select("key", "value")
        .collect()
    )
    assert {r.key: bytes(r.value) for r in rows} == model
