"""The ``inkpen`` data source over sharded data sets, in a real local Spark session: reads of every
shard with a ``shard`` column, loads routed by ``shard_of`` with one commit per shard and
``load_id`` retries, and streams with one offset per shard; oracles are dicts of what each shard
holds."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import inkpen
import inkpen.pipeline
import inkpen.shards
from inkpen.errors import InkpenError
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from inkpen.pipeline.options import LoadOptions
from inkpen.pipeline.schema import LoadColumns
from inkpen.pipeline.sharded import data_set_of
from inkpen.pipeline.sharded_load import commit_shards, prepare_sharded_load, write_shards
from inkpen.shards import shard_of, shard_url
from support.engine import TINY

if TYPE_CHECKING:
    from support.spark import JobWatch

pytest_plugins = ("support.spark",)
pytestmark = pytest.mark.spark

Jobs = Callable[[str], AbstractContextManager["JobWatch"]]
Contents = dict[tuple[int, bytes, bytes], bytes]
"""(shard, bucket, key) -> value: what a data set holds."""
SHARDS = 4


def write_objects(url: str, n: int, *, shards: int = SHARDS) -> Contents:
    """Puts ``n`` objects (some overwritten, some deleted) through each shard's own Bookie, routed
    by shard_of; the oracle of what the data set then holds."""
    model: Contents = {}
    books = [inkpen.open(shard_url(url, i)) for i in range(shards)]
    try:
        for i in range(n):
            bucket, key = f"b{i % 3}", f"k{i % (n - n // 5):04d}"
            shard = shard_of(bucket, key, shards)
            if i % 13 == 12:
                books[shard].delete(bucket, key)
                model.pop((shard, bucket.encode(), key.encode()), None)
            else:
                books[shard].put(bucket, key, b"v%d" % i)
                model[(shard, bucket.encode(), key.encode())] = b"v%d" % i
    finally:
        for book in books:
            book.close()
    return model


def read(spark: SparkSession, url: str, **options: str) -> DataFrame:
    reader = spark.read.format("inkpen").option("path", url)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def contents(frame: DataFrame) -> Contents:
    rows = frame.select("shard", "bucket", "key", "value").collect()
    found = {(r.shard, bytes(r.bucket), bytes(r.key)): bytes(r.value) for r in rows}
    assert len(found) == len(rows)  # no object twice
    return found


def shard_contents(url: str, shards: int = SHARDS) -> Contents:
    """What each shard's database holds, read without Spark."""
    found: Contents = {}
    for shard in range(shards):
        with inkpen.open_reader(shard_url(url, shard)) as reader:
            for bucket, key, value in reader.objects():
                found[(shard, bucket, key)] = value
    return found


def latest_ids(url: str, shards: int = SHARDS) -> list[int]:
    """Each shard's latest manifest id (a commit moves it)."""
    ids = []
    for shard in range(shards):
        store = open_store(shard_url(url, shard))
        try:
            latest = ManifestStore(store).latest()
            assert latest is not None
            ids.append(latest.id)
        finally:
            store.close()
    return ids


def test_reading_a_data_set_is_the_union_of_its_shards(
    spark: SparkSession, tmp_path: Path, spark_jobs: Jobs
) -> None:
    url = str(tmp_path / "set")
    inkpen.shards.create(url, shards=SHARDS)
    model = write_objects(url, 300)
    assert {shard for shard, _, _ in model} == set(range(SHARDS))
    with spark_jobs("read") as jobs:
        frame = read(spark, url, partitions="2")
        assert frame.columns == ["bucket", "key", "value", "sqn", "kind", "last_modified", "shard"]
        assert contents(frame) == model
    assert jobs.tasks_per_job() == [2 * SHARDS]  # each shard's own partitions
    # Spark's filters and column pruning over the shard column, and the shard option
    picked = frame.where(F.col("shard") == 2).select("key", "shard").collect()
    assert sorted(bytes(r.key) for r in picked) == sorted(k for s, _, k in model if s == 2)
    narrowed = read(spark, url, shard="1, 3", bucket="b1", key_type="string")
    expected = {k.decode() for s, b, k in model if s in (1, 3) and b == b"b1"}
    assert {r.key for r in narrowed.select("key").collect()} == expected
    assert {r.shard for r in narrowed.select("shard").collect()} == {1, 3}
    # the read pinned one checkpoint per shard: a write after load() is not seen by it
    with inkpen.open(shard_url(url, 0)) as book:
        book.put("late", "k", b"late")
    assert contents(frame) == model
    assert (0, b"late", b"k") in contents(read(spark, url))


def test_small_shards_share_a_partition_and_partitions_gives_each_its_own(
    spark: SparkSession, tmp_path: Path, spark_jobs: Jobs
) -> None:
    url = str(tmp_path / "set")
    inkpen.shards.create(url, shards=SHARDS)
    model = write_objects(url, 200)
    with spark_jobs("packed") as packed:
        assert contents(read(spark, url)) == model
    assert packed.tasks_per_job() == [1]  # four shards far below partition_bytes: one task
    with spark_jobs("per shard") as each:
        assert contents(read(spark, url, partitions="1")) == model
    assert each.tasks_per_job() == [SHARDS]


def rows(spark: SparkSession, n: int, tag: str) -> DataFrame:
    """``n`` rows over ``n // 2`` keys in three partitions; the later row of a key wins."""
    ids = spark.range(0, n, numPartitions=3)
    return ids.select(
        F.concat(F.lit("b"), (F.col("id") % 2).cast("string")).alias("bucket"),
        F.format_string("k%04d", F.col("id") % (n // 2)).alias("key"),
        F.concat(F.lit(tag), F.col("id").cast("string")).cast("binary").alias("value"),
    )


def last_writes(n: int, tag: str, shards: int = SHARDS) -> Contents:
    found: Contents = {}
    for i in range(n):
        bucket, key = f"b{i % 2}", f"k{i % (n // 2):04d}"
        found[(shard_of(bucket, key, shards), bucket.encode(), key.encode())] = f"{tag}{i}".encode()
    return found


def load(frame: DataFrame, url: str, **options: str) -> None:
    writer = frame.write.format("inkpen").option("path", url).mode("append")
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save()


def test_a_load_routes_rows_to_their_shards_and_reads_back(
    spark: SparkSession, durable_store_url: str
) -> None:
    url = durable_store_url
    inkpen.shards.create(url, shards=SHARDS)
    load(rows(spark, 400, "v"), url)
    expected = last_writes(400, "v")
    assert shard_contents(url) == expected  # every row in the shard shard_of names, once
    assert contents(read(spark, url)) == expected


def test_a_retried_load_with_the_same_load_id_commits_nothing_twice(
    spark: SparkSession, tmp_path: Path
) -> None:
    url = str(tmp_path / "set")
    inkpen.shards.create(url, shards=SHARDS)
    # a job whose task fails (a bad row) commits no shard at all
    bad = rows(spark, 300, "bad").withColumn(
        "ttl", F.when(F.col("key") == "k0149", F.lit(-1.0)).otherwise(F.lit(None)).cast("double")
    )
    with pytest.raises(Exception, match="ttl must be a positive number"):
        load(bad, url, load_id="nightly-1")
    assert shard_contents(url) == {}
    # its retry commits every shard once
    load(rows(spark, 300, "first"), url, load_id="nightly-1")
    first = last_writes(300, "first")
    assert shard_contents(url) == first
    ids = latest_ids(url)
    # the same job run again (even with other rows) commits nothing: no manifest moves
    load(rows(spark, 300, "again"), url, load_id="nightly-1")
    assert latest_ids(url) == ids
    assert shard_contents(url) == first
    load(rows(spark, 300, "second"), url, load_id="nightly-2")
    assert shard_contents(url) == last_writes(300, "second")


def test_a_load_that_committed_some_shards_finishes_on_retry_without_doubles(
    tmp_path: Path,
) -> None:
    """The driver's commit fails after some shards committed (here shard 2's files are gone, as
    if GC had taken them); the retried job commits shard 2 alone."""
    url = str(tmp_path / "set")
    inkpen.shards.create(url, shards=SHARDS)
    data_set = data_set_of(url, None)
    assert data_set is not None
    target = prepare_sharded_load(
        LoadOptions(url=url, load_id="job-7"), LoadColumns("bucket", "key", "value"), data_set
    )
    keys = [f"k{i:03d}" for i in range(200)]
    batch = pa.RecordBatch.from_pydict(
        {"bucket": ["b"] * 200, "key": keys, "value": [k.encode() for k in keys]}
    )

    def attempt(number: int) -> list[dict[int, Any] | None]:
        halves = [batch.slice(0, 100), batch.slice(100)]
        return [
            write_shards(target, [half], partition_id=p, attempt=number)
            for p, half in enumerate(halves)
        ]

    first = attempt(0)
    gone = first[1][2].journal_files[0].name  # type: ignore[index]
    store = open_store(shard_url(url, 2))
    try:
        store.delete(gone)
    finally:
        store.close()
    before = latest_ids(url)
    with pytest.raises(InkpenError, match=r"committed shard\(s\) 0, 1, 3 but not 2.*same load_id"):
        commit_shards(target, first)
    committed = latest_ids(url)
    assert committed[2] == before[2] and all(committed[i] > before[i] for i in (0, 1, 3))
    retried = commit_shards(target, attempt(1))
    assert [c.shard for c in retried if c.report is not None] == [2]  # the others skipped
    after = latest_ids(url)
    assert [after[i] for i in (0, 1, 3)] == [committed[i] for i in (0, 1, 3)]
    expected = {(shard_of("b", k, SHARDS), b"b", k.encode()): k.encode() for k in keys}
    assert shard_contents(url) == expected
    for shard in range(SHARDS):  # each row was loaded once: SQNs 1..rows of the shard
        with inkpen.open_reader(shard_url(url, shard)) as reader:
            assert reader.last_sqn == sum(1 for s, _, _ in expected if s == shard)


Change = tuple[int, int, str, str, bytes | None]
"""(shard, sqn, key, kind, value)."""


def write_changes(url: str, model: list[Change], n: int, *, shards: int = SHARDS) -> None:
    """``n`` more changes over every shard (puts, overwrites, deletes), appended to ``model``."""
    books = [inkpen.open(shard_url(url, i)) for i in range(shards)]
    try:
        for _ in range(n):
            i = len(model)
            key = f"k{i % 40:03d}"
            shard = shard_of("b", key, shards)
            sqn = 1 + sum(1 for c in model if c[0] == shard)
            if i % 7 == 6:
                books[shard].delete("b", key)
                model.append((shard, sqn, key, "delete", None))
            else:
                books[shard].put("b", key, b"v%d" % i)
                model.append((shard, sqn, key, "put", b"v%d" % i))
    finally:
        for book in books:
            book.close()


def still_held(model: list[Change]) -> list[Change]:
    """What shards that no cursor held keep of ``model`` once closed: every delete and the last
    change of every key (each replaced small value left the journal with its ledger entry)."""
    last = {(shard, key): sqn for shard, sqn, key, _, _ in model}
    return [c for c in model if c[3] == "delete" or last[(c[0], c[2])] == c[1]]


def run_stream(
    spark: SparkSession, url: str, out: Path, checkpoint: Path, **options: str
) -> list[Change]:
    stream = spark.readStream.format("inkpen").option("path", url).option("key_type", "string")
    for name, value in options.items():
        stream = stream.option(name, value)
    frame = stream.load()
    assert frame.columns[-1] == "shard"
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300), "the availableNow query did not finish"
    assert query.exception() is None
    if not out.exists():
        return []
    table = spark.read.schema(frame.schema).parquet(str(out))
    got = [(r.shard, r.sqn, r.key, r.kind, r.value and bytes(r.value)) for r in table.collect()]
    return sorted(got)


def test_a_stream_over_a_data_set_delivers_every_change_once_across_restarts(
    spark: SparkSession, tmp_path: Path
) -> None:
    url = str(tmp_path / "set")
    inkpen.shards.create(url, shards=SHARDS)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    model: list[Change] = []
    write_changes(url, model, 120)  # no cursor yet: what was replaced is let go of
    first = still_held(model)
    assert len(first) < len(model)
    assert run_stream(spark, url, out, checkpoint, rows_per_partition="20") == sorted(first)
    write_changes(url, model, 80)  # every shard gets more between the runs: the cursors hold them
    assert len({c[0] for c in model[120:]}) == SHARDS
    got = run_stream(spark, url, out, checkpoint, rows_per_partition="20")
    assert got == sorted(first + model[120:])  # nothing lost, nothing twice
    batches = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    offsets = sorted(batches, key=lambda p: int(p.name))
    last = json.loads(offsets[-1].read_text().splitlines()[-1])
    assert sorted(last["shards"]) == [str(i) for i in range(SHARDS)]
    tops = {s: max(c[1] for c in model if c[0] == s) for s in range(SHARDS)}
    assert {int(s): entry["sqn"] for s, entry in last["shards"].items()} == tops


def test_per_shard_starting_offsets_and_the_shard_option(
    spark: SparkSession, tmp_path: Path
) -> None:
    url = str(tmp_path / "set")
    inkpen.shards.create(url, shards=SHARDS)
    model: list[Change] = []
    write_changes(url, model, 100)
    starting = json.dumps({"0": "latest", "1": 5})
    got = run_stream(
        spark, url, tmp_path / "o1", tmp_path / "c1", startingOffsets=starting, shard="0,1,2"
    )
    expected = [c for c in still_held(model) if (c[0] == 1 and c[1] > 5) or c[0] == 2]
    assert got == sorted(expected)
    latest = run_stream(spark, url, tmp_path / "o2", tmp_path / "c2", startingOffsets="latest")
    assert latest == []


def test_bad_options_over_a_data_set_are_refused_saying_what_to_do(
    spark: SparkSession, tmp_path: Path
) -> None:
    url = str(tmp_path / "set")
    inkpen.shards.create(url, shards=SHARDS)
    write_objects(url, 50)
    plain = str(tmp_path / "db")
    with inkpen.open(plain) as book:
        book.put("b", "k", b"v")
    ids = latest_ids(url)
    with pytest.raises(Exception, match=r"names shard\(s\) 4, 9.*has 4 shards, numbered 0 to 3"):
        read(spark, url, shard="1,4,9")
    with pytest.raises(Exception, match="option shard takes a shard number"):
        read(spark, url, shard="two")
    with pytest.raises(Exception, match="option shard is for a sharded data set"):
        read(spark, plain, shard="0")
    with pytest.raises(Exception, match="option checkpoint names one database's checkpoint"):
        read(spark, url, checkpoint="c-1")
    stream = spark.readStream.format("inkpen").option("path", url)
    with pytest.raises(Exception, match="names shard '7', which this stream does not read"):
        stream.option("startingOffsets", '{"7": 3}').load()
    with pytest.raises(Exception, match="over a data set, option startingOffsets takes"):
        stream.option("startingOffsets", "12").load()
    plain_stream = spark.readStream.format("inkpen").option("path", plain)
    with pytest.raises(Exception, match="per-shard startingOffsets is for a sharded data set"):
        plain_stream.option("startingOffsets", '{"0": 3}').load()
    frame = spark.range(3).select(
        F.lit("b").alias("bucket"),
        F.col("id").cast("string").alias("key"),
        F.lit(b"v").alias("value"),
    )
    with pytest.raises(Exception, match="option load_id must be 1 to 200 printable"):
        load(frame, url, load_id=" ")
    assert latest_ids(url) == ids  # nothing changed


def l0_files(url: str) -> int:
    store = open_store(url)
    try:
        latest = ManifestStore(store).latest()
        assert latest is not None
        levels = latest.manifest.ledger.levels
        return len(levels[0]) if levels else 0
    finally:
        store.close()


def test_compact_runs_each_shards_compactor_as_one_spark_task(
    spark: SparkSession, tmp_path: Path, spark_jobs: Jobs
) -> None:
    url = str(tmp_path / "set")
    inkpen.shards.create(url, shards=2)
    external = {**TINY, "compaction": "external", "max_l0_files": 64}
    model: Contents = {}
    for shard in range(2):
        with inkpen.open(shard_url(url, shard), **external) as book:
            for i in range(60):
                book.put("b", f"k{i % 45:03d}", b"v%d" % i)
                model[(shard, b"b", b"k%03d" % (i % 45))] = b"v%d" % i
    assert all(l0_files(shard_url(url, shard)) > 1 for shard in range(2))
    with spark_jobs("compact") as jobs:
        done = inkpen.pipeline.compact(spark, url)
    assert jobs.tasks_per_job() == [2]
    assert [c.shard for c in done] == [0, 1]
    assert all(c.merges > 0 and c.l0_files == 0 for c in done), [c.summary for c in done]
    assert all(l0_files(shard_url(url, shard)) == 0 for shard in range(2))
    assert shard_contents(url, 2) == model
    with pytest.raises(inkpen.UsageError, match="not a sharded data set"):
        inkpen.pipeline.compact(spark, shard_url(url, 0))
