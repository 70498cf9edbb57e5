"""The change feed as a Spark Structured Streaming source: availableNow, a restart that resumes
exactly where the checkpointed offsets say, the cursor it holds and advances on commit; the one
schema reads and streams share, and a stream's rows loaded back."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.window import Window

import inkpen
from inkpen.pipeline.pinning import HOLDER
from support.engine import TINY, checkpoints
from support.waiting import wait_until

pytest_plugins = ("support.spark",)
pytestmark = pytest.mark.spark


@pytest.fixture
def url(durable_store_url: str) -> str:
    """A fresh store root another process can open too: a directory, or SeaweedFS."""
    return durable_store_url


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
        # The query's cursor, made before the first write: the store keeps every change for it
        # (without one, a value replaced before the query began may be gone).
        book.create_feed_cursor("lake", 0)
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


def stream_to_memory(frame: DataFrame, name: str) -> list[tuple[Any, ...]]:
    """The rows ``frame`` streams into a memory table, in SQN order. A column's type is the
    schema's, known at run time only: Any, as pyspark's Row gives its fields."""
    query = frame.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    assert query.awaitTermination(300), "the availableNow query did not finish"
    assert query.exception() is None
    rows = [tuple(r) for r in frame.sparkSession.table(name).orderBy("sqn").collect()]
    frame.sparkSession.catalog.dropTempView(name)
    return rows


def write_history(url: str) -> list[tuple[int, str, str, bytes | None]]:
    """Puts, overwrites and deletes; the model: (sqn, key, kind, value) of every change. No
    cursor holds them: a new query finds :func:`latest_of_each_key` of them."""
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
        (key, sqn, kind, value) for sqn, key, kind, value in latest_of_each_key(changes)
    ]
    # schema() could not tell the stream from a read and pinned a checkpoint; the stream
    # released it, and holds its default cursor instead (Spark commits a batch when it plans
    # the next, so the cursor is at the start or the end)
    assert spark_pins(url) == read_pin
    with inkpen.open(url, **TINY) as book:
        (own,) = book.feed_cursors()
        assert own.name.startswith("spark-stream-") and own.sqn in (0, 60)
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
        (key, sqn, kind, None if value is None else len(value))
        for sqn, key, kind, value in latest_of_each_key(changes)
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
    with inkpen.open(url, **TINY) as book:  # the sizes stream's own; the refused made none
        assert [c.name[:13] for c in book.feed_cursors()] == ["spark-stream-"]


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
    last: dict[bytes, bytes] = {}  # the last put of each key the stream still had
    for _, key, kind, value in latest_of_each_key(changes):
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


# -- where a new query starts, and the cursor each query holds --------------------------------

Change = tuple[int, str, str, bytes | None]
"""(sqn, key, kind, value): the model of one change written."""


def write_changes(url: str, model: list[Change], n: int, *, bucket: str = "b") -> None:
    """``n`` more changes (puts, some overwrites and deletes), appended to ``model``."""
    with inkpen.open(url, **TINY) as book:
        for _ in range(n):
            i = len(model)
            key = f"k{i % 250:03d}"
            if i % 11 == 10:
                book.delete(bucket, key)
                model.append((i + 1, key, "delete", None))
            else:
                book.put(bucket, key, b"v%d" % i)
                model.append((i + 1, key, "put", b"v%d" % i))


def start_query(
    spark: SparkSession, url: str, out: Path, checkpoint: Path, **options: str
) -> tuple[DataFrame, StreamingQuery]:
    """Start the query (availableNow) into the Parquet table ``out``: its frame and the query."""
    stream = spark.readStream.format("inkpen").option("path", url).option("key_type", "string")
    for name, value in options.items():
        stream = stream.option(name, value)
    frame = stream.load()
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    return frame, query


def run_query(
    spark: SparkSession, url: str, out: Path, checkpoint: Path, **options: str
) -> list[Change]:
    """Run the query (availableNow) into the Parquet table ``out``; the table's rows, by SQN."""
    frame, query = start_query(spark, url, out, checkpoint, **options)
    assert query.awaitTermination(300), "the availableNow query did not finish"
    assert query.exception() is None
    return table_rows(spark, frame, out)


def table_rows(spark: SparkSession, frame: DataFrame, out: Path) -> list[Change]:
    if not out.exists():
        return []
    table = spark.read.schema(frame.schema).parquet(str(out))
    got = [(r.sqn, r.key, r.kind, r.value and bytes(r.value)) for r in table.collect()]
    return sorted(got)


def stream_cursors(url: str) -> dict[str, inkpen.FeedCursor]:
    """The database's feed cursors by name (expired ones too)."""
    from inkpen.manifest.feed_cursors import list_feed_cursors
    from inkpen.manifest.store import ManifestStore
    from inkpen.objectstore import open_store

    manifests = ManifestStore(open_store(url))
    try:
        return {c.name: c for c in list_feed_cursors(manifests)}
    finally:
        manifests.store.close()


def test_a_new_query_beside_a_running_one_streams_the_whole_history(
    spark: SparkSession, tmp_path: Path
) -> None:
    url = str(tmp_path / "db")
    model: list[Change] = []
    a_out, a_checkpoint = tmp_path / "a", tmp_path / "a-checkpoint"
    write_changes(url, model, 300)  # before any cursor: what later writes replaced is let go of
    a_rows = latest_of_each_key(model)
    assert run_query(spark, url, a_out, a_checkpoint) == a_rows
    write_changes(url, model, 300)  # A's cursor holds all of these
    a_rows += model[300:]
    assert run_query(spark, url, a_out, a_checkpoint) == a_rows  # A resumed: none twice
    (a_cursor,) = stream_cursors(url).values()
    write_changes(url, model, 300)
    # B is new (a fresh checkpoint): it starts at the earliest change, whatever A has read, and
    # reads what the store still holds: of the first 300 what no later write replaced, then all
    still = {c[0] for c in latest_of_each_key(model)}
    b_rows = run_query(spark, url, tmp_path / "b", tmp_path / "b-checkpoint")
    assert b_rows == [c for c in model if c[0] > 300 or c[0] in still]
    assert len(b_rows) > 600
    # each query holds a cursor of its own; A's is where A left it
    cursors = stream_cursors(url)
    assert a_cursor.name in cursors and len(cursors) == 2
    (b_name,) = set(cursors) - {a_cursor.name}
    assert a_cursor.name.startswith("spark-stream-") and b_name.startswith("spark-stream-")
    assert cursors[a_cursor.name].sqn == a_cursor.sqn == 300  # committed when A resumed
    assert cursors[b_name].sqn == 0  # B's one batch is committed when B plans the next
    for cursor in cursors.values():
        assert cursor.owner is not None and cursor.owner.startswith("spark stream on ")
        assert cursor.lifetime == 3 * 86400.0 and cursor.expire_time is not None
    # A again: its own position, every change once
    assert run_query(spark, url, a_out, a_checkpoint) == a_rows + model[600:]
    assert stream_cursors(url)[a_cursor.name].sqn == 600


def latest_of_each_key(model: list[Change]) -> list[Change]:
    """What a store that no cursor held keeps of ``model`` once closed: every delete, and the
    last change of every key (each replaced small value left the journal with its ledger
    entry)."""
    last = {key: sqn for sqn, key, _, _ in model}
    return [c for c in model if c[2] == "delete" or last[c[1]] == c[0]]


def test_a_new_query_reads_the_history_still_held_then_every_change(
    spark: SparkSession, tmp_path: Path
) -> None:
    url = str(tmp_path / "db")
    model: list[Change] = []
    write_changes(url, model, 300)  # keys k000-k049 written twice, every eleventh change a delete
    held = latest_of_each_key(model)
    assert len(held) < len(model)  # some history is gone: the query must not fail on it
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    assert run_query(spark, url, out, checkpoint) == held
    # From its start on, the query's cursor holds every change: nothing after it is let go of.
    write_changes(url, model, 300)  # k050-k099 twice among them
    assert len(latest_of_each_key(model[300:])) < 300
    assert run_query(spark, url, out, checkpoint) == held + model[300:]
    (cursor,) = stream_cursors(url).values()
    assert cursor.sqn == 300  # the first run's batch, committed when the second planned


def test_starting_offsets_latest_and_an_sqn(spark: SparkSession, tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    model: list[Change] = []
    write_changes(url, model, 100)
    latest_out, latest_checkpoint = tmp_path / "latest", tmp_path / "latest-checkpoint"
    options = {"startingOffsets": "latest"}
    assert run_query(spark, url, latest_out, latest_checkpoint, **options) == []
    write_changes(url, model, 50)
    # the restart resumes from its checkpoint: the 50 written since the query started
    assert run_query(spark, url, latest_out, latest_checkpoint, **options) == model[100:]
    # an SQN N: the changes above N, as an offset {"sqn": N} means
    sqn_rows = run_query(
        spark, url, tmp_path / "sqn", tmp_path / "sqn-checkpoint", startingOffsets="40"
    )
    assert sqn_rows == model[40:] and sqn_rows[0][0] == 41
    as_offset = run_query(
        spark, url, tmp_path / "json", tmp_path / "json-checkpoint", startingOffsets='{"sqn": 149}'
    )
    assert as_offset == model[149:]
    earliest = run_query(
        spark, url, tmp_path / "zero", tmp_path / "zero-checkpoint", startingOffsets="earliest"
    )
    assert earliest == model
    # the latest query's cursor started at 100; the SQN queries' at their SQNs
    starts = sorted(c.sqn for c in stream_cursors(url).values())
    assert starts == [0, 40, 100, 149]


@pytest.mark.parametrize("bad", ["soon", "-1", "1.5", '{"sqn": -3}', '{"offset": 4}', "true"])
def test_bad_starting_offsets_are_refused_naming_the_option(
    spark: SparkSession, tmp_path: Path, bad: str
) -> None:
    url = str(tmp_path / "db")
    write_changes(url, [], 5)
    stream = spark.readStream.format("inkpen").option("path", url).option("startingOffsets", bad)
    with pytest.raises(Exception, match="option startingOffsets takes earliest"):
        stream_to_memory(stream.load(), "refused_start")
    assert stream_cursors(url) == {}  # nothing changed


def test_starting_offsets_parse() -> None:
    from inkpen.errors import UsageError
    from inkpen.pipeline.stream import parse_stream_options

    def starting(**options: str) -> object:
        return parse_stream_options({"path": "/x", **options}).starting

    assert starting() == "earliest"
    assert starting(startingOffsets=" Latest ") == "latest"
    assert starting(STARTINGOFFSETS="12") == 12
    assert starting(startingOffsets='{"sqn": 0}') == 0
    assert starting(starting_sqn="7") == 7  # the older spelling
    with pytest.raises(UsageError, match="startingOffsets and starting_sqn"):
        starting(startingOffsets="3", starting_sqn="3")
    with pytest.raises(UsageError, match=r"option startingOffsets takes .*; got 'x'"):
        starting(startingOffsets="x")
    with pytest.raises(UsageError, match="option cursor"):
        starting(cursor="")
    with pytest.raises(UsageError, match="cursor_lifetime"):
        parse_stream_options({"path": "/x", "cursor_lifetime": "0"})
    assert parse_stream_options({"path": "/x"}).cursor_lifetime == 3 * 86400.0


def overwrite_and_compact(url: str, model: list[Change], bucket: str) -> None:
    """Write keys of ``bucket`` twice over (into ``model``) and compact: the first round's
    changes are replaced, so journal compaction drops them unless a live cursor holds them."""
    with inkpen.open(url, **TINY) as book:
        for round_ in range(3):
            for j in range(60):
                value = b"%d" % round_ * 40
                book.put(bucket, f"o{j:02d}", value)
                model.append((len(model) + 1, f"o{j:02d}", "put", value))
        book.flush()
        book.compact_ledger()
        for _ in range(20):
            if not book.compact_journal().compacted:
                break


def wait_until_lapsed(url: str, name: str, timeout: float = 60.0) -> None:
    """Poll (with a deadline) until the cursor ``name`` has expired."""
    wait_until(
        lambda: not stream_cursors(url)[name].is_live(time.time()),
        f"cursor {name} to lapse",
        timeout,
        interval=0.1,
    )


def test_a_query_whose_cursor_lapsed_resumes_when_nothing_it_needs_is_gone_else_fails(
    spark: SparkSession, tmp_path: Path
) -> None:
    url = str(tmp_path / "db")
    model: list[Change] = []
    write_changes(url, model, 50)
    gap_out, gap_checkpoint = tmp_path / "gap", tmp_path / "gap-checkpoint"
    short = {"cursor_lifetime": "1"}
    assert run_query(spark, url, gap_out, gap_checkpoint, cursor="gap", **short) == model
    wait_until_lapsed(url, "gap")
    # a live cursor at 50 would hold every change above it; with it lapsed, compaction drops
    # the replaced changes above 50
    overwrite_and_compact(url, model, "r")
    with inkpen.open_reader(url) as reader, pytest.raises(inkpen.FeedGapError) as dropped:
        list(reader.changes(50))
    assert dropped.value.sqn == 51
    # the gap query resumes at 50: the changes it needs are gone, and it says so
    frame, query = start_query(spark, url, gap_out, gap_checkpoint, cursor="gap")
    with pytest.raises(Exception, match=r"FeedGapError.*feed cursor 'gap' lapsed at .* SQN 51"):
        query.awaitTermination(300)
    assert not query.isActive
    assert table_rows(spark, frame, gap_out) == model[:50]  # no fewer rows silently added
    assert "gap" not in stream_cursors(url)  # the cursor made again for nothing is gone
    # where nothing a lapsed query needs was dropped, it re-creates its cursor and goes on
    keep_url = str(tmp_path / "keep-db")
    keep_model: list[Change] = []
    write_changes(keep_url, keep_model, 50)
    keep_out, keep_checkpoint = tmp_path / "keep2", tmp_path / "keep2-checkpoint"
    rows = run_query(spark, keep_url, keep_out, keep_checkpoint, cursor="keep", **short)
    assert rows == keep_model
    wait_until_lapsed(keep_url, "keep")
    write_changes(keep_url, keep_model, 70, bucket="new")  # no overwrites: nothing to drop
    with inkpen.open(keep_url, **TINY) as book:
        book.flush()
        book.compact_ledger()
        book.compact_journal()
    rows = run_query(spark, keep_url, keep_out, keep_checkpoint, cursor="keep")
    assert rows == keep_model
    again = stream_cursors(keep_url)["keep"]
    assert again.is_live(time.time()) and again.lifetime == 3 * 86400.0
