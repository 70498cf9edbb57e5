"""Filters on an ``inkpen`` read return what Spark returns for the same rows in a plain DataFrame.

Spark 4 caches one read plan per loaded DataFrame and reuses it for later scans of it (see
:mod:`inkpen.pipeline.source`), so each test here runs several actions on *one* loaded DataFrame
and compares every answer with the same query on ``spark.createDataFrame`` of the same rows: an
action must never see the narrowing of another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

import inkpen

pytest_plugins = ("support.spark",)
pytestmark = pytest.mark.spark

ROWS = 5000
BUCKETS = ("b0", "b1")


def row(n: int) -> tuple[str, str, bytes]:
    return BUCKETS[n % 2], f"k{n:05d}", b"v%d" % n


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = str(tmp_path_factory.mktemp("filters") / "db")
    with inkpen.open(url) as book:
        for n in range(ROWS):
            book.put(*row(n))
    return url


@pytest.fixture(scope="module")
def oracle(spark: SparkSession) -> DataFrame:
    """The same rows as a plain DataFrame: what every query should return."""
    frame = spark.createDataFrame(
        [row(n) for n in range(ROWS)], "bucket string, key string, value binary"
    )
    return frame.cache()


@pytest.fixture
def loaded(spark: SparkSession, database: str) -> Iterator[DataFrame]:
    """A freshly loaded DataFrame of the database, keys as strings."""
    yield (
        spark.read.format("inkpen")
        .option("path", database)
        .option("key_type", "string")
        .option("partitions", "3")
        .load()
        .select("bucket", "key", "value")
    )


def rows_of(frame: DataFrame) -> list[tuple[str, str, bytes]]:
    return sorted((r.bucket, r.key, bytes(r.value)) for r in frame.collect())


def narrow(low: str, high: str) -> Callable[[DataFrame], Column]:
    return lambda df: (df.bucket == "b1") & (df.key >= low) & (df.key <= high)


def test_a_count_after_a_filtered_count_sees_every_row(
    loaded: DataFrame, oracle: DataFrame
) -> None:
    where = narrow("k01000", "k01999")
    assert loaded.count() == ROWS
    assert loaded.filter(where(loaded)).count() == oracle.filter(where(oracle)).count() == 500
    assert loaded.count() == ROWS
    assert rows_of(loaded) == rows_of(oracle)


def test_explain_of_a_filter_changes_no_later_answer(loaded: DataFrame, oracle: DataFrame) -> None:
    loaded.filter(loaded.bucket == "b1").explain()
    assert loaded.count() == ROWS
    assert (
        loaded.filter(loaded.bucket == "b0").count() == oracle.filter(oracle.bucket == "b0").count()
    )


def test_two_filters_on_one_dataframe_answer_each_its_own(
    loaded: DataFrame, oracle: DataFrame
) -> None:
    first, second = narrow("k00000", "k00999"), narrow("k04000", "k04999")
    a, b = loaded.filter(first(loaded)), loaded.filter(second(loaded))
    assert rows_of(a) == rows_of(oracle.filter(first(oracle)))
    assert rows_of(b) == rows_of(oracle.filter(second(oracle)))
    assert rows_of(a) == rows_of(oracle.filter(first(oracle)))  # a re-run of the first


def test_a_self_join_of_two_filtered_views_matches_the_oracle(
    loaded: DataFrame, oracle: DataFrame
) -> None:
    def joined(frame: DataFrame) -> list[tuple[str, str]]:
        odd = frame.filter(frame.bucket == "b1").select(
            F.substring("key", 2, 4).alias("stem"), F.col("key").alias("odd_key")
        )
        low = frame.filter(frame.key < "k02000").select(
            F.substring("key", 2, 4).alias("stem"), F.col("key").alias("low_key")
        )
        return sorted((r.odd_key, r.low_key) for r in odd.join(low, "stem").collect())

    expected = joined(oracle)
    assert expected  # the two views overlap, so a wrong side would show
    assert joined(loaded) == expected


def test_a_cached_filter_and_the_unfiltered_frame_stay_apart(
    loaded: DataFrame, oracle: DataFrame
) -> None:
    where = narrow("k02000", "k02499")
    cached = loaded.filter(where(loaded)).cache()
    try:
        assert cached.count() == 250
        assert loaded.count() == ROWS
        assert rows_of(cached) == rows_of(oracle.filter(where(oracle)))
    finally:
        cached.unpersist()


def test_reads_work_with_python_pushdown_switched_off(
    spark: SparkSession, database: str, oracle: DataFrame
) -> None:
    setting = "spark.sql.python.filterPushdown.enabled"
    before = spark.conf.get(setting, None)
    spark.conf.set(setting, "false")
    try:
        frame = spark.read.format("inkpen").option("path", database).option("key_type", "string")
        only = frame.load().filter(F.col("bucket") == "b0").select("bucket", "key", "value")
        assert rows_of(only) == rows_of(oracle.filter(oracle.bucket == "b0"))
    finally:
        if before is None:
            spark.conf.unset(setting)
        else:
            spark.conf.set(setting, before)


@pytest.mark.parametrize(
    ("options", "where"),
    [
        ({"bucket": "b1"}, lambda df: df.bucket == "b1"),
        (
            {"bucket": "b0", "start": "k00100", "end": "k00300"},
            lambda df: (df.bucket == "b0") & (df.key >= "k00100") & (df.key <= "k00300"),
        ),
        (
            {"bucket": "b1", "prefix": "k012"},
            lambda df: (df.bucket == "b1") & df.key.startswith("k012"),
        ),
        ({"bucket": "nobody"}, lambda df: df.bucket == "nobody"),
    ],
    ids=["bucket", "start-end", "prefix", "no-such-bucket"],
)
def test_read_options_narrow_exactly_and_only_their_own_dataframe(
    spark: SparkSession,
    database: str,
    oracle: DataFrame,
    options: dict[str, str],
    where: Callable[[DataFrame], Column],
) -> None:
    reader = spark.read.format("inkpen").option("path", database).option("key_type", "string")
    for name, value in options.items():
        reader = reader.option(name, value)
    narrowed = reader.load().select("bucket", "key", "value")
    everything = (
        spark.read.format("inkpen").option("path", database).option("key_type", "string").load()
    )
    assert rows_of(narrowed) == rows_of(oracle.filter(where(oracle)))
    assert everything.count() == ROWS
    assert rows_of(narrowed) == rows_of(oracle.filter(where(oracle)))


keys = st.integers(0, ROWS - 1).map(lambda n: f"k{n:05d}")
bounds = st.tuples(st.sampled_from([">", ">=", "<", "<=", "="]), keys)
filters = st.fixed_dictionaries(
    {
        "buckets": st.none() | st.lists(st.sampled_from([*BUCKETS, "b9"]), min_size=1, max_size=2),
        "bounds": st.lists(bounds, max_size=2),
    }
)
Filter = dict[str, object]


def condition(frame: DataFrame, spec: Filter) -> Column:
    found = F.lit(True)
    buckets = spec["buckets"]
    if isinstance(buckets, list):
        found = found & frame.bucket.isin(*buckets)
    for op, key in spec["bounds"]:  # type: ignore[attr-defined]
        column = frame.key
        found = (
            found
            & {
                ">": column > key,
                ">=": column >= key,
                "<": column < key,
                "<=": column <= key,
                "=": column == key,
            }[op]
        )
    return found


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(actions=st.lists(st.none() | filters, min_size=2, max_size=4))
def test_any_sequence_of_filtered_and_unfiltered_actions_matches_the_oracle(
    spark: SparkSession, database: str, oracle: DataFrame, actions: list[Filter | None]
) -> None:
    frame = (
        spark.read.format("inkpen")
        .option("path", database)
        .option("key_type", "string")
        .load()
        .select("bucket", "key", "value")
    )
    for spec in actions:
        if spec is None:
            assert frame.count() == ROWS
        else:
            got = frame.filter(condition(frame, spec))
            assert rows_of(got) == rows_of(oracle.filter(condition(oracle, spec))), spec
