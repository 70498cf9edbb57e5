"""The change feed as a Spark Structured Streaming source: availableNow, a restart that resumes
exactly where the checkpointed offsets say, the cursor it holds and advances on commit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import inkpen
from support.engine import TINY

pytest_plugins = ("support.spark",)
pytestmark = pytest.mark.spark


@pytest.fixture(
    params=[pytest.param("local", id="local"), pytest.param("s3", id="s3", marks=pytest.mark.s3)]
)
def url(request: pytest.FixtureRequest, make_store_url: Callable[[str], str]) -> str:
    return make_store_url(request.param)


def run_available_now(spark: SparkSession, url: str, out: Path, checkpoint: Path) -> None:
    query = (
        spark.readStream.format("inkpen")
        .option("path", url)
        .option("feed", "true")
        .option("cursor", "lake")
        .option("rows_per_partition", "40")
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300), "the availableNow query did not finish"
    assert query.exception() is None


def test_stream_available_now_then_restart_resumes_exactly(
    spark: SparkSession, url: str, tmp_path: Path
) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    expected: list[tuple[int, bytes, str, bytes | None]] = []
    with inkpen.open(url, **TINY) as book:
        for i in range(100):
            sqn = i + 1
            if i % 7 == 3:
                book.delete("b", f"k{i - 1}")
                expected.append((sqn, f"k{i - 1}".encode(), "delete", None))
            else:
                book.put("b", f"k{i}", f"v{i}".encode())
                expected.append((sqn, f"k{i}".encode(), "put", f"v{i}".encode()))
    run_available_now(spark, url, out, checkpoint)
    df = spark.read.parquet(str(out))
    assert df.columns == ["bucket", "key", "value", "sqn", "kind", "last_modified"]
    got = sorted((r.sqn, bytes(r.key), r.kind, r.value and bytes(r.value)) for r in df.collect())
    assert got == expected
    with inkpen.open(url, **TINY) as book:
        # Spark commits a batch to its source when it plans the next one: the cursor holds
        # everything a restart may read again
        first = {c.name: c.sqn for c in book.feed_cursors()}["lake"]
        assert first in (0, 100)
        for i in range(100, 150):
            book.put("c", f"k{i}", f"v{i}".encode())
            expected.append((len(expected) + 1, f"k{i}".encode(), "put", f"v{i}".encode()))
        # compaction cannot take what the stream has not consumed: overwrite and compact
        book.flush()
        book.compact_ledger()
        book.compact_journal()
    run_available_now(spark, url, out, checkpoint)  # the same query restarted
    df = spark.read.parquet(str(out))
    got = sorted((r.sqn, bytes(r.key), r.kind, r.value and bytes(r.value)) for r in df.collect())
    assert got == expected  # nothing lost, nothing repeated
    with inkpen.open(url, **TINY) as book:
        # the restart committed the first run's batch; its own last one waits for the next
        assert {c.name: c.sqn for c in book.feed_cursors()}["lake"] in (100, 150)


def test_stream_options_are_checked(spark: SparkSession, tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    with inkpen.open(url, **TINY) as book:
        book.put("b", "k", b"v")
    with pytest.raises(Exception, match="feed"):
        spark.readStream.format("inkpen").option("path", url).load().writeStream.format(
            "memory"
        ).queryName("nofeed").trigger(availableNow=True).start().awaitTermination(120)
    with pytest.raises(Exception, match=r"misspelt|unknown|cursr"):
        spark.readStream.format("inkpen").option("path", url).option("feed", "true").option(
            "cursr", "x"
        ).load()
    with pytest.raises(Exception, match="readStream"):
        spark.read.format("inkpen").option("path", url).option("feed", "true").load().collect()


def test_the_example_stream_job_streams_every_change_once(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util
    import json
    import sys

    path = Path(__file__).resolve().parent.parent / "examples" / "stream_job.py"
    spec = importlib.util.spec_from_file_location("stream_job_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    assert module.main(["--n", "1500", "--dir", str(tmp_path / "job")], spark=spark) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("streamed 1,500 changes in ")
    assert lines[1] == "exactly once, in SQN order: True"
    report = json.loads(lines[2])
    assert (report["changes"], report["rows"], report["exactly_once"]) == (1500, 1500, True)
