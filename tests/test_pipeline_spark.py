"""The ``inkpen`` data source in a real local Spark session, on a local directory and SeaweedFS."""

from __future__ import annotations

import contextlib
import io
import re
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import inkpen
from inkpen.manifest.gc import GcOptions, run_gc
from inkpen.manifest.paths import JOURNAL_FILES_PREFIX, LEDGER_PREFIX
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from inkpen.pipeline import pinned_checkpoint
from support.engine import checkpoints

if TYPE_CHECKING:
    from support.spark import JobWatch

pytest_plugins = ("support.spark",)
pytestmark = pytest.mark.spark

Jobs = Callable[[str], AbstractContextManager["JobWatch"]]
ROWS = 50_000
DISTINCT = 20_000


@pytest.fixture
def url(durable_store_url: str) -> str:
    """A fresh store root that Spark's executors can reach: a directory, or SeaweedFS."""
    return durable_store_url


def rows_with_duplicates(spark: SparkSession) -> DataFrame:
    """ROWS rows over DISTINCT keys in four partitions, partition i holding ids [i*R/4, ...)."""
    ids = spark.range(0, ROWS, numPartitions=4)
    key_id = F.col("id") % DISTINCT
    return ids.select(
        F.concat(F.lit("b"), (key_id % 3).cast("string")).alias("bucket"),
        F.format_string("key-%06d", key_id).alias("key"),
        F.concat(F.lit("v"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.array(
            F.struct(
                F.lit("add").alias("op"),
                F.lit("parity_bin").alias("field"),
                (F.col("id") % 2).cast("string").alias("term"),
            )
        ).alias("indexes"),
    )


def expected_last_writes() -> dict[tuple[bytes, bytes], bytes]:
    """The last row of each key wins: the one with the highest id (later partition, later row)."""
    found: dict[tuple[bytes, bytes], bytes] = {}
    for row_id in range(ROWS):
        key_id = row_id % DISTINCT
        found[(b"b%d" % (key_id % 3), b"key-%06d" % key_id)] = b"v%d" % row_id
    return found


def read(spark: SparkSession, url: str, **options: str) -> DataFrame:
    reader = spark.read.format("inkpen").option("path", url)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def triples(frame: DataFrame) -> list[tuple[bytes, bytes, bytes]]:
    return [(bytes(r.bucket), bytes(r.key), bytes(r.value)) for r in frame.collect()]


def test_a_bulk_load_reads_back_as_last_write_wins(
    spark: SparkSession, url: str, spark_jobs: Jobs
) -> None:
    with spark_jobs("load") as load:
        rows_with_duplicates(spark).write.format("inkpen").option("path", url).mode("append").save()
    assert load.tasks_per_job() == [4]
    expected = expected_last_writes()
    with spark_jobs("read") as scan:
        found = triples(read(spark, url, partitions="4"))
    assert scan.tasks_per_job() == [4]
    assert len(found) == len(expected) == DISTINCT  # no key twice, none missing
    assert found == sorted(found)  # partitions are key ranges, in key order
    assert {(b, k): v for b, k, v in found} == expected
    sample = sorted(expected)[::10]
    with inkpen.open(url) as book:
        assert {key: book.get(*key) for key in sample} == {key: expected[key] for key in sample}
        evens = set(book.index_query("b0", "parity_bin", "0", "0"))
    assert evens == {k for (b, k), v in expected.items() if b == b"b0" and int(v[1:]) % 2 == 0}


def test_reads_with_a_small_read_ahead_and_a_disk_cache_read_the_same_rows(
    spark: SparkSession, url: str, tmp_path: Path
) -> None:
    """A 4 KiB read-ahead window (every planned read alone) and a disk cache on the executors'
    machine: the rows are those of the load, read twice (the second time from the cache)."""
    rows_with_duplicates(spark).write.format("inkpen").option("path", url).mode("append").save()
    expected = expected_last_writes()
    cache = tmp_path / "cache"
    for _ in range(2):
        found = triples(
            read(spark, url, partitions="4", read_ahead_bytes="4096", cache_dir=str(cache))
        )
        assert {(b, k): v for b, k, v in found} == expected
        assert len(found) == DISTINCT
    assert list(cache.glob("inkpen-parts-1/*/*"))


def test_a_read_during_writes_sees_exactly_its_checkpoint(spark: SparkSession, url: str) -> None:
    busy = {
        "ledger_cache_entries": 50,
        "l0_cache_entries": 200,
        "max_l0_files": 2,
        "roll_segments": 8,
        "gc_min_age": 0.0,
        "gc_interval": 0.2,
    }
    book = inkpen.open(url, **busy)
    for n in range(1500):
        book.put("live", f"k{n:05d}", b"first %d" % n, indexes=[("add", "n_bin", str(n % 7))])
    for n in range(0, 1500, 10):
        book.delete("live", f"k{n:05d}")
    checkpoint = book.checkpoint(lifetime=900)
    book.put("live", "k00001", b"after the checkpoint")
    book.put("live", "new", b"after the checkpoint")
    stop = threading.Event()

    def churn() -> None:  # flushes, merges, rolls and GC run while Spark reads
        n = 0
        while not stop.is_set():
            book.put("live", f"k{n % 1500:05d}", b"churn")
            n += 1

    writer = threading.Thread(target=churn)
    writer.start()
    try:
        frame = read(spark, url, checkpoint=checkpoint, partitions="3", indexes="true")
        rows = frame.collect()
        heads = read(spark, url, checkpoint=checkpoint, values="false").collect()
    finally:
        stop.set()
        writer.join()
        book.close()
    with inkpen.open_reader(url, checkpoint=checkpoint) as reader:
        expected = list(reader.objects())
        expected_heads = [(b, k, h.sqn, h.size) for b, k, h in reader.heads()]
        sevens = {term: set(reader.index_query("live", "n_bin", term, term)) for term in "0123456"}
    assert [(bytes(r.bucket), bytes(r.key), bytes(r.value)) for r in rows] == expected
    assert len(expected) == 1350 and (b"live", b"new", b"after the checkpoint") not in expected
    assert [(bytes(r.bucket), bytes(r.key), r.sqn, r.size) for r in heads] == expected_heads
    indexed = {(bytes(entry.term).decode(), bytes(r.key)) for r in rows for entry in r.indexes}
    live = {key for _, key, _ in expected}  # a deleted object's index entries are not its row's
    assert indexed == {(term, key) for term, keys in sevens.items() for key in keys & live}


def test_a_read_pins_its_own_checkpoint_when_loaded(spark: SparkSession, tmp_path: Path) -> None:
    url = str(tmp_path / "own-pin")
    with inkpen.open(url) as book:
        for n in range(100):
            book.put("b", f"k{n:03d}", b"before")
        frame = read(spark, url, key_type="string")
        book.put("b", "k000", b"after the load() call")
        book.put("b", "later", b"after the load() call")
        first = [(r.bucket, r.key, bytes(r.value)) for r in frame.collect()]
        second = [(r.bucket, r.key, bytes(r.value)) for r in frame.collect()]
    store = open_store(url)
    try:
        latest = ManifestStore(store).latest()
    finally:
        store.close()
    assert latest is not None
    (pin,) = [cp for cp in latest.manifest.checkpoints if cp.metadata.get("holder") == "spark"]
    assert pin.expire_time is not None and pin.expire_time > pin.create_time
    with inkpen.open_reader(url, checkpoint=pin.id) as reader:
        expected = [(b.decode(), k.decode(), v) for b, k, v in reader.objects()]
    assert first == second == expected
    assert ("b", "k000", b"before") in first and len(first) == 100


def test_a_held_checkpoint_is_read_and_released_when_the_block_ends(
    spark: SparkSession, tmp_path: Path
) -> None:
    url = str(tmp_path / "held")
    with inkpen.open(url) as book:
        book.put("b", "k", b"held")
        with pinned_checkpoint(url, lifetime=60) as held:
            book.put("b", "k", b"after the pin")
            rows = read(spark, url, checkpoint=held).collect()
            assert [bytes(r.value) for r in rows] == [b"held"]
            ids = [cp.id for cp in checkpoints(url)]
            assert held in ids
    assert held not in [cp.id for cp in checkpoints(url)]
    with pytest.raises(Exception, match=f"no checkpoint {held}"):
        read(spark, url, checkpoint=held)


def filters_spark_applies(frame: DataFrame) -> list[str]:
    """The Filter operators of the frame's physical plan (what Spark evaluates after the scan)."""
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        frame.explain()
    return re.findall(r"\bFilter \(.*", text.getvalue())


def test_spark_evaluates_every_filter_and_options_narrow_the_scan(
    spark: SparkSession, tmp_path: Path, spark_jobs: Jobs
) -> None:
    url = str(tmp_path / "filters")
    with inkpen.open(url) as book:
        for bucket in ("a", "b", "c"):
            for n in range(300):
                book.put(bucket, f"k{n:03d}", f"{bucket}{n}".encode())
        book.flush()
    frame = read(spark, url, partitions="3")
    filtered = frame.filter(
        F.col("bucket").isin(b"a", b"c")
        & (F.col("key") > F.lit(b"k100"))
        & (F.col("key") <= F.lit(b"k150"))
    )
    assert len(filters_spark_applies(filtered)) == 1  # nothing is pushed into the source
    assert triples(filtered) == [
        (bucket, b"k%03d" % n, b"%s%d" % (bucket, n))
        for bucket in (b"a", b"c")
        for n in range(101, 151)
    ]
    assert frame.filter(F.col("bucket") == F.lit(b"zzz")).count() == 0
    assert frame.count() == 900
    narrowed = read(spark, url, key_type="string", bucket="b", prefix="k12", partitions="1")
    with spark_jobs("narrowed") as jobs:
        got = [(r.bucket, r.key) for r in narrowed.collect()]
    assert got == [("b", f"k12{n}") for n in range(10)]
    assert filters_spark_applies(narrowed) == []
    assert jobs.tasks_per_job() == [1]


def test_a_read_with_indexes_loads_into_another_database(
    spark: SparkSession, tmp_path: Path
) -> None:
    source, copy = str(tmp_path / "source"), str(tmp_path / "copy")
    with inkpen.open(source) as book:
        for n in range(40):
            book.put("b", f"k{n:02d}", b"%d" % n, indexes=[("add", "mod_bin", str(n % 4))])
        book.put("b", "k00", b"0", indexes=[("remove", "mod_bin", "0")])
    frame = read(spark, source, indexes="true").select("bucket", "key", "value", "indexes")
    frame.write.format("inkpen").option("path", copy).mode("append").save()
    with inkpen.open_reader(source) as original, inkpen.open_reader(copy) as loaded:
        assert list(loaded.objects()) == list(original.objects())
        terms = {t: list(loaded.index_query("b", "mod_bin", t, t)) for t in "0123"}
        assert terms == {t: list(original.index_query("b", "mod_bin", t, t)) for t in "0123"}
    assert terms["0"] == [b"k%02d" % n for n in range(4, 40, 4)]  # k00's entry was removed


def stored(url: str) -> set[str]:
    store = open_store(url)
    try:
        return {i.key for p in (LEDGER_PREFIX, JOURNAL_FILES_PREFIX) for i in store.list(p)}
    finally:
        store.close()


def referenced(url: str) -> set[str]:
    store = open_store(url)
    try:
        latest = ManifestStore(store).latest()
        assert latest is not None
        return {name for _, name in latest.manifest.referenced_objects()}
    finally:
        store.close()


def test_a_failed_job_leaves_nothing_visible_and_gc_removes_its_files(
    spark: SparkSession, url: str
) -> None:
    with inkpen.open(url) as book:
        for n in range(50):
            book.put("b", f"k{n:03d}", b"before")
    with inkpen.open_reader(url) as reader:
        before = list(reader.objects())
    # Partitions 0 and 1 are fine; partition 2 holds one row with a negative ttl. local[2]
    # starts partition 2 only once 0 or 1 has finished (and written its files), and retries no
    # task. The other of 0 and 1 may still be running when the job fails: Spark stops waiting
    # for it, and its files may land after save() has raised, so only the files seen are checked.
    rows = spark.range(0, 3000, numPartitions=3).select(
        F.lit("b").alias("bucket"),
        F.format_string("k%03d", F.col("id") % 1000).alias("key"),
        F.lit(b"loaded").alias("value"),
        F.when(F.col("id") == 2999, F.lit(-1.0)).otherwise(F.lit(None)).cast("double").alias("ttl"),
    )
    with pytest.raises(Exception, match="ttl must be a positive number"):
        rows.write.format("inkpen").option("path", url).mode("append").save()
    with inkpen.open_reader(url) as reader:
        assert list(reader.objects()) == before
    kept = referenced(url)
    orphans = stored(url) - kept
    assert orphans  # a finished task's files, never committed
    report = run_gc(url, options=GcOptions(min_age=0.0, offline=True))
    assert orphans <= set(report.deleted)
    after = stored(url)
    assert kept <= after and not orphans & after
    with inkpen.open_reader(url) as reader:
        assert list(reader.objects()) == before


BAD_WRITES: dict[str, tuple[Callable[[DataFrame], DataFrame], str]] = {
    "missing-value": (lambda df: df.drop("value"), "lacks column.*value"),
    "string-value": (
        lambda df: df.withColumn("value", F.col("value").cast("string")),
        "values must be binary",
    ),
    "extra-column": (lambda df: df.withColumn("colour", F.lit(1)), "colour.*drop them"),
    "numeric-key": (lambda df: df.withColumn("key", F.lit(7)), "key is int; it must be string"),
    "read-sqn": (
        lambda df: df.withColumn("sqn", F.lit(7)).withColumn(
            "last_modified", F.current_timestamp()
        ),
        r"sqn, last_modified, which a load gives every object anew.*drop them",
    ),
    "numeric-kind": (lambda df: df.withColumn("kind", F.lit(1)), "kind must be a string"),
}


@pytest.mark.parametrize("case", sorted(BAD_WRITES))
def test_bad_load_input_fails_on_the_driver_before_any_task(
    spark: SparkSession, tmp_path: Path, case: str, spark_jobs: Jobs
) -> None:
    url = str(tmp_path / "bad")
    change, message = BAD_WRITES[case]
    good = spark.range(0, 10, numPartitions=2).select(
        F.lit("b").alias("bucket"),
        F.col("id").cast("string").alias("key"),
        F.lit(b"v").alias("value"),
    )
    with spark_jobs(f"bad-{case}") as jobs, pytest.raises(Exception, match=message):
        change(good).write.format("inkpen").option("path", url).mode("append").save()
    assert jobs.job_ids == []


def test_other_driver_errors_come_before_any_task(
    spark: SparkSession, tmp_path: Path, spark_jobs: Jobs
) -> None:
    empty = str(tmp_path / "empty")
    frame = spark.range(0, 3).select(
        F.lit("b").alias("bucket"),
        F.col("id").cast("string").alias("key"),
        F.lit(b"v").alias("value"),
    )
    with spark_jobs("driver-errors") as jobs:
        with pytest.raises(Exception, match="no inkpen database at"):
            read(spark, empty)
        with pytest.raises(Exception, match=r"unknown option.*checkpont"):
            read(spark, empty, checkpont="x")
        with pytest.raises(Exception, match=r"read_ahead_bytes=-1 is out of range"):
            read(spark, empty, read_ahead_bytes="-1")
        with pytest.raises(Exception, match=r"cache_dir_bytes=1 is out of range"):
            read(spark, empty, cache_dir="/tmp", cache_dir_bytes="1")
        with pytest.raises(Exception, match=r"only adds to a database: use .mode\('append'\)"):
            frame.write.format("inkpen").option("path", empty).mode("overwrite").save()
        with pytest.raises(Exception, match="needs the database's URL"):
            frame.write.format("inkpen").mode("append").save()
    assert jobs.job_ids == []


def test_a_null_in_a_load_fails_once_naming_the_column_and_loads_nothing(
    spark: SparkSession, url: str, spark_jobs: Jobs
) -> None:
    with inkpen.open(url) as book:
        book.put("b", "kept", b"before")
    rows = spark.range(0, 400, numPartitions=4).select(
        F.lit("b").alias("bucket"),
        F.when(F.col("id") == 250, F.lit(None))
        .otherwise(F.format_string("k%03d", "id"))
        .alias("key"),
        F.lit(b"v").alias("value"),
    )
    with spark_jobs("null-key") as jobs, pytest.raises(Exception) as raised:
        rows.write.format("inkpen").option("path", url).mode("append").save()
    message = str(raised.value)
    assert "column key is null" in message and "row 50 of partition 2" in message
    assert "not committed" in message
    assert jobs.tasks_per_job() == [4]  # every task ran once: none failed, none was retried
    with inkpen.open_reader(url) as reader:
        assert list(reader.objects()) == [(b"b", b"kept", b"before")]


@pytest.mark.parametrize("mode", ["overwrite", "error", "errorifexists", "ignore"])
def test_a_save_mode_other_than_append_is_refused_naming_append(
    spark: SparkSession, tmp_path: Path, mode: str
) -> None:
    url = str(tmp_path / "modes")
    frame = spark.range(0, 3).select(
        F.lit("b").alias("bucket"),
        F.col("id").cast("string").alias("key"),
        F.lit(b"v").alias("value"),
    )
    # Spark refuses error and ignore itself ("use either the Append or Overwrite mode"); inkpen
    # refuses overwrite, saying that append is the one mode that works and how to write it.
    with pytest.raises(Exception, match=r"(?i)\buse\b.*\bappend\b") as refused:
        frame.write.format("inkpen").option("path", url).mode(mode).save()
    if mode == "overwrite":
        message = str(refused.value)
        assert "the only save mode that works" in message
        assert ".mode('append').save()" in message
    assert not (tmp_path / "modes").exists() or not any((tmp_path / "modes").iterdir())
