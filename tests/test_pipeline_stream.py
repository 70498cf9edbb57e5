"""The change feed as a Spark Structured Streaming source: availableNow, a restart that resumes
exactly where the checkpointed offsets say, the cursor it holds and advances on commit; the one
schema reads and streams share, and a stream's rows loaded back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

import inkpen
from inkpen.pipeline.pinning import HOLDER
from support.engine import TINY, checkpoints

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


def spark_pins(url: str) -> list[str]:
    """The checkpoints a Spark read pinned for itself (the stream must leave none)."""
    return [c.id for c in checkpoints(url) if c.metadata.get("holder") == HOLDER]


def stream_to_memory(frame: DataFrame, name: str) -> list[tuple[object, ...]]:
    query = frame.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    assert query.awaitTermination(300), "the availableNow query did not finish"
    assert query.exception() is None
    rows = [tuple(r) for r in frame.sparkSession.table(name).orderBy("sqn").collect()]
    frame.sparkSession.catalog.dropTempView(name)
    return rows


def write_history(url: str) -> list[tuple[int, str, str, bytes | None]]:
    """Puts, overwrites and deletes; the model: (sqn, key, kind, value) of every change."""
    changes: list[tuple[int, str, str, bytes | None]] = []
    with inkpen.open(url, **TINY) as book:
        for i in range(60):
            key = f"k{i % 25:02d}"
            if i % 9 == 8:
                book.delete("b", key)
                changes.append((len(changes) + 1, key, "delete", None))
            else:
                book.put("b", key, b"v%d" % i)
                changes.append((len(changes) + 1, key, "put", b"v%d" % i))
    return changes


def test_the_plain_readstream_call_streams_with_the_schema_of_a_read(
    spark: SparkSession, tmp_path: Path
) -> None:
    url = str(tmp_path / "db")
    changes = write_history(url)
    read = spark.read.format("inkpen").option("path", url).option("key_type", "string").load()
    read_pin = spark_pins(url)
    assert len(read_pin) == 1  # the read's own, live until it expires
    stream = spark.readStream.format("inkpen").option("path", url).option("key_type", "string")
    frame = stream.load()
    assert frame.isStreaming and frame.schema == read.schema
    assert frame.columns == ["bucket", "key", "value", "sqn", "kind", "last_modified"]
    # a read's rows: the latest change of each live object, so every kind is "put"
    live: dict[str, tuple[int, bytes]] = {}
    for sqn, key, kind, value in changes:
        if kind == "put":
            assert value is not None
            live[key] = (sqn, value)
        else:
            live.pop(key, None)
    got_read = [(r.key, r.sqn, r.kind, bytes(r.value)) for r in read.collect()]
    assert got_read == [(k, sqn, "put", v) for k, (sqn, v) in sorted(live.items())]
    rows = stream_to_memory(frame, "plain")
    assert [(r[1], r[3], r[4], r[2] and bytes(r[2])) for r in rows] == [
        (key, sqn, kind, value) for sqn, key, kind, value in changes
    ]
    # schema() could not tell the stream from a read and pinned a checkpoint; the stream
    # released it, and holds its default cursor instead (Spark commits a batch when it plans
    # the next, so the cursor is at the start or the end)
    assert spark_pins(url) == read_pin
    with inkpen.open(url, **TINY) as book:
        assert {c.name: c.sqn for c in book.feed_cursors()}["spark-stream"] in (0, 60)
    # the harmless feed=true gives the same rows
    again = stream.option("feed", "true").option("cursor", "again").load()
    assert again.schema == read.schema
    assert stream_to_memory(again, "with_feed") == rows


def test_a_stream_of_sizes_and_the_options_a_stream_refuses(
    spark: SparkSession, tmp_path: Path
) -> None:
    url = str(tmp_path / "db")
    changes = write_history(url)
    heads = spark.read.format("inkpen").option("path", url).option("values", "false").load()
    read_pin = spark_pins(url)  # the read's own, live until it expires
    assert len(read_pin) == 1
    sizes = spark.readStream.format("inkpen").option("path", url).option("values", "false")
    frame = sizes.load()
    assert len(spark_pins(url)) == 2  # load() cannot tell the stream from a read
    assert frame.schema == heads.schema
    assert frame.columns == ["bucket", "key", "size", "sqn", "kind", "last_modified"]
    rows = stream_to_memory(frame, "sizes")
    assert [(bytes(r[1]).decode(), r[3], r[4], r[2]) for r in rows] == [
        (key, sqn, kind, None if value is None else len(value)) for sqn, key, kind, value in changes
    ]
    assert spark_pins(url) == read_pin
    refused = {
        "indexes": ("true", "indexes=true is for spark.read"),
        "bucket": ("b", r"bucket are for spark.read"),
        "partitions": ("2", r"partitions are for spark.read"),
    }
    for option, (value, message) in refused.items():
        load = spark.readStream.format("inkpen").option("path", url).option(option, value)
        with pytest.raises(Exception, match=message):
            stream_to_memory(load.load(), f"refused_{option}")
        assert spark_pins(url) == read_pin, f"the stream with {option} left its read's pin"
    with inkpen.open(url, **TINY) as book:
        assert [c.name for c in book.feed_cursors()] == ["spark-stream"]  # the sizes stream's


def test_a_streamed_table_loads_into_another_database_once_deletes_are_filtered(
    spark: SparkSession, tmp_path: Path
) -> None:
    url, copy = str(tmp_path / "db"), str(tmp_path / "copy")
    changes = write_history(url)
    table = tmp_path / "table"
    query = (
        spark.readStream.format("inkpen")
        .option("path", url)
        .load()
        .writeStream.format("parquet")
        .option("path", str(table))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300) and query.exception() is None
    full = spark.read.parquet(str(table))
    streamed = full.drop("sqn", "last_modified")
    with pytest.raises(Exception, match=r"kind is 'delete', and a bulk load only adds objects"):
        streamed.write.format("inkpen").option("path", copy).mode("append").save()
    with inkpen.open(copy) as book:  # the refused load created the database, loaded nothing
        assert list(book.objects()) == []
    with pytest.raises(Exception, match=r"sqn, last_modified.*drop them"):
        spark.read.parquet(str(table)).write.format("inkpen").option("path", copy).mode(
            "append"
        ).save()
    # the last put of each key
    newest = Window.partitionBy("key").orderBy(F.col("sqn").desc())
    puts = (
        full.filter(F.col("kind") == "put")
        .withColumn("n", F.row_number().over(newest))
        .filter(F.col("n") == 1)
        .drop("n", "sqn", "last_modified")
    )
    puts.write.format("inkpen").option("path", copy).mode("append").save()
    last: dict[bytes, bytes] = {}
    for _, key, kind, value in changes:
        if kind == "put":
            assert value is not None
            last[key.encode()] = value
    with inkpen.open_reader(copy) as loaded:
        assert list(loaded.objects()) == [(b"b", k, v) for k, v in sorted(last.items())]
    # a read written back (kind included) gives the same objects as the source
    read_back = str(tmp_path / "read-back")
    source = spark.read.format("inkpen").option("path", url).load()
    source.drop("sqn", "last_modified").write.format("inkpen").option("path", read_back).mode(
        "append"
    ).save()
    with inkpen.open_reader(read_back) as loaded, inkpen.open_reader(url) as original:
        assert list(loaded.objects()) == list(original.objects())


def test_stream_options_are_checked(spark: SparkSession, tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    with inkpen.open(url, **TINY) as book:
        book.put("b", "k", b"v")
    with pytest.raises(Exception, match=r"cursor are for the change feed.*spark.readStream"):
        spark.read.format("inkpen").option("path", url).option("cursor", "c").load().collect()
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
