"""Bad input: a clear UsageError at once, and nothing changed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import inkpen
from inkpen.objectstore import open_store
from support.engine import TINY, checkpoints


@pytest.fixture
def book(store_url: str) -> Iterator[inkpen.Bookie]:
    with inkpen.open(store_url, max_value_bytes=1024, max_indexes=2, **TINY) as opened:
        opened.put("b", "k", b"original")
        yield opened


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda b: b.put(1, "k", b"v"), "bucket must be str or bytes"),
        (lambda b: b.put("b", None, b"v"), "key must be str or bytes"),
        (lambda b: b.put("b", "k", "not bytes"), "value must be bytes"),
        (lambda b: b.put("", "k", b"v"), "bucket must not be empty"),
        (lambda b: b.put("b", "", b"v"), "key must not be empty"),
        (lambda b: b.put("b", "x" * 65537, b"v"), "key is 65537 bytes"),
        (lambda b: b.put("b", "k", b"v" * 1025), "value is 1025 bytes"),
        (lambda b: b.put("b", "k", b"v", ttl=0), "ttl must be a positive number"),
        (lambda b: b.put("b", "k", b"v", ttl="soon"), "ttl must be a positive number"),
        (lambda b: b.put("b", "k", b"v", ttl=float("inf")), "ttl must be a positive number"),
        (lambda b: b.put("b", "k", b"v", ttl=1e300), "ttl must be a positive number"),
        (lambda b: b.put("b", "k", b"v", indexes=[("set", "f", "t")]), 'must be "add" or'),
        (lambda b: b.put("b", "k", b"v", indexes=[("add", "f")]), "3-tuple"),
        (lambda b: b.put("b", "k", b"v", indexes="add"), "indexes must be a sequence"),
        (
            lambda b: b.put("b", "k", b"v", indexes=[("add", "", "t")]),
            "index field must not be empty",
        ),
        (
            lambda b: b.put("b", "k", b"v", indexes=[("add", "f", str(i)) for i in range(3)]),
            "limit is 2",
        ),
        (lambda b: b.delete("b", 3.5), "key must be str or bytes"),
        (lambda b: list(b.objects(start="a")), "needs a bucket"),
        (lambda b: list(b.objects("b", order="random")), "order must be"),
        (lambda b: list(b.index_query("b", "f", "a", "z", regex="(")), "does not compile"),
    ],
)
def test_bad_calls_raise_and_change_nothing(
    book: inkpen.Bookie, call: Callable[[inkpen.Bookie], Any], message: str
) -> None:
    before = book.stats()["sqn"]
    with pytest.raises(inkpen.UsageError, match=message.replace("(", r"\(")):
        call(book)
    assert book.stats()["sqn"] == before
    assert book.get("b", "k") == b"original"


def test_closed_bookie_refuses_every_call(store_url: str) -> None:
    book = inkpen.open(store_url, **TINY)
    book.put("b", "k", b"v")
    book.close()
    book.close()
    for call in (
        lambda: book.put("b", "k", b"w"),
        lambda: book.get("b", "k"),
        lambda: book.delete("b", "k"),
        lambda: list(book.keys("b")),
        lambda: book.snapshot(),
        lambda: book.stats(),
    ):
        with pytest.raises(inkpen.UsageError, match="closed"):
            call()
    with inkpen.open(store_url, **TINY) as again:
        assert again.get("b", "k") == b"v"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"flush_policy": "sometimes"}, "flush_policy"),
        ({"l0_cache_entries": 0}, "out of range"),
        ({"no_such_option": 1}, "unknown option"),
        ({"reload_strategy": {"o": "keep"}}, "reload_strategy"),
        ({"single_file_compaction_pct": 80.0, "max_run_compaction_pct": 70.0}, "must not exceed"),
    ],
)
def test_bad_options_are_refused_before_touching_the_store(
    store_url: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(inkpen.UsageError, match=message):
        inkpen.open(store_url, **options)
    store = inkpen.objectstore.open_store(store_url)
    assert list(store.list()) == []


def test_unknown_scheme_is_a_usage_error() -> None:
    with pytest.raises(inkpen.UsageError, match="unknown store URL scheme"):
        inkpen.open("ftp://example/db")


HUGE = 10**400
SURROGATE = "a\ud800b"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda b: b.put("b", "k", b"v", ttl=HUGE), "ttl must be a positive number"),
        (lambda b: b.put("b", "k", b"v", ttl=float("nan")), "ttl must be a positive number"),
        (lambda b: b.put("b", "k", b"v", ttl=True), "ttl must be a positive number"),
        (lambda b: b.checkpoint(HUGE), "lifetime must be a positive number"),
        (lambda b: b.checkpoint(float("nan")), "lifetime must be a positive number"),
        (lambda b: b.checkpoint(float("inf")), "lifetime must be a positive number"),
        (lambda b: b.checkpoint(True), "lifetime must be a positive number"),
        (lambda b: b.checkpoint(60, name=SURROGATE), "not valid Unicode"),
        (lambda b: b.checkpoint(60, name="a\x00b"), "NUL"),
        (lambda b: b.checkpoint(60, name=7), "name must be a str"),
        (lambda b: b.run_gc(min_age=HUGE), "min_age must be a number"),
        (lambda b: b.run_gc(min_age=float("nan")), "min_age must be a number"),
        (lambda b: b.run_gc(min_age=-1), "min_age must be a number"),
        (lambda b: b.run_gc(min_age=False), "min_age must be a number"),
        (lambda b: b.run_gc(dry_run="yes"), "dry_run must be True or False"),
        (lambda b: b.put(SURROGATE, "k", b"v"), "bucket is not valid Unicode"),
        (lambda b: b.put("b", SURROGATE, b"v"), "key is not valid Unicode"),
        (
            lambda b: b.put("b", "k", b"v", indexes=[("add", "f", SURROGATE)]),
            "index term is not valid Unicode",
        ),
        (
            lambda b: b.put("b", "k", b"v", indexes=[("add", SURROGATE, "t")]),
            "index field is not valid Unicode",
        ),
        (lambda b: b.put("b", "k", b"v", indexes=[(["add"], "f", "t")]), 'must be "add" or'),
        (lambda b: b.delete("b", SURROGATE), "key is not valid Unicode"),
        (lambda b: b.get(SURROGATE, "k"), "bucket is not valid Unicode"),
        (lambda b: list(b.keys("b", start=SURROGATE)), "start is not valid Unicode"),
        (lambda b: b.snapshot(long_running=1), "long_running must be True or False"),
        (lambda b: list(b.index_query("b", "f", "a", "z", return_terms=1)), "return_terms"),
        (lambda b: list(b.index_query("b", "f", "a", "z", regex="a{9999999999}")), "compile"),
        (lambda b: list(b.objects("b", order=["key"])), "order must be"),
    ],
)
def test_arguments_out_of_every_range_are_usage_errors(
    book: inkpen.Bookie, store_url: str, call: Callable[[inkpen.Bookie], Any], message: str
) -> None:
    before = book.stats()["sqn"], checkpoints(store_url)
    with pytest.raises(inkpen.UsageError, match=message):
        call(book)
    assert (book.stats()["sqn"], checkpoints(store_url)) == before
    assert book.get("b", "k") == b"original"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"roll_on_close": float("inf")}, "roll_on_close must be True or False"),
        ({"roll_on_close": 1}, "roll_on_close must be True or False"),
        ({"allow_missing_segments": "yes"}, "allow_missing_segments must be True or False"),
        ({"gc_min_age": HUGE}, "out of range"),
        ({"checkpoint_lifetime": float("nan")}, "out of range"),
        ({"flush_interval": True}, "must be a number"),
        ({"max_batch_bytes": HUGE}, "out of range"),
        ({"max_batch_bytes": 4096.0}, "must be an int"),
        ({"clock": None}, "clock"),
        ({"read_ahead_bytes": -1}, "read_ahead_bytes=-1 is out of range"),
        ({"read_ahead_bytes": HUGE}, "read_ahead_bytes=.* is out of range"),
        ({"read_ahead_bytes": 1.5}, "read_ahead_bytes must be an int"),
        ({"read_ahead_bytes": True}, "read_ahead_bytes must be an int"),
        ({"cache_dir": 5}, "cache_dir must be a directory path"),
        ({"cache_dir": b"/tmp/x"}, "cache_dir must be a directory path"),
        ({"cache_dir": ""}, "cache_dir='' is not a usable directory path"),
        ({"cache_dir": "a\x00b"}, "is not a usable directory path"),
        ({"cache_dir_bytes": 1024}, "cache_dir_bytes=1024 is out of range"),
        ({"cache_dir_bytes": "1G"}, "cache_dir_bytes must be an int"),
    ],
)
def test_more_bad_options_are_refused_before_touching_the_store(
    store_url: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(inkpen.UsageError, match=message):
        inkpen.open(store_url, **options)
    with pytest.raises(inkpen.UsageError, match=message):
        inkpen.open_reader(store_url, **options)
    assert list(open_store(store_url).list()) == []


def test_reader_arguments_are_checked(book: inkpen.Bookie, store_url: str) -> None:
    with pytest.raises(inkpen.UsageError, match="not valid Unicode"):
        inkpen.open_reader(store_url, checkpoint=SURROGATE)
    with pytest.raises(inkpen.UsageError, match="checkpoint must be"):
        not_a_name: Any = 5  # the wrong type on purpose
        inkpen.open_reader(store_url, checkpoint=not_a_name)


@pytest.mark.parametrize(
    "name", ["a\x00b", "a\ud800b", "file://{root}/a%00b"], ids=["nul", "surrogate", "file-url-nul"]
)
def test_unusable_local_paths_are_usage_errors(tmp_path: Path, name: str) -> None:
    url = name.format(root=tmp_path) if "{root}" in name else str(tmp_path / name)
    for opener in (inkpen.open, inkpen.open_reader):
        with pytest.raises(inkpen.UsageError, match=r"NUL|cannot encode"):
            opener(url)
    assert list(tmp_path.iterdir()) == []


def test_unusable_s3_and_memory_urls_are_usage_errors() -> None:
    for url in ("s3://bucket\ud800/db", "memory://a\x00b"):
        with pytest.raises(inkpen.UsageError, match=r"NUL|not valid Unicode"):
            inkpen.open(url)


def test_hot_backup_destination_must_be_a_url_or_store(book: inkpen.Bookie) -> None:
    backup = book.hot_backup()
    with pytest.raises(inkpen.UsageError, match="destination must be"):
        backup(42)  # type: ignore[arg-type]
    backup.close()


def test_refusing_a_directory_of_other_files_leaves_nothing_behind(tmp_path: Path) -> None:
    root = tmp_path / "not-a-db"
    root.mkdir()
    (root / "notes.txt").write_text("mine")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    for opener in (inkpen.open, inkpen.open_reader):
        with pytest.raises(inkpen.UsageError, match="not an inkpen database"):
            opener(str(root))
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


# -- fuzzing every argument -------------------------------------------------------------------

SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)
BAD_TEXT = st.builds(
    lambda a, s, b: a + s + b, st.text(max_size=5), SURROGATES, st.text(max_size=5)
)
WRONG_TYPE = st.one_of(
    st.integers(), st.floats(), st.none(), st.booleans(), st.lists(st.integers(), max_size=2)
)
BAD_NAME = st.one_of(BAD_TEXT, WRONG_TYPE.filter(lambda v: v is not None))
BAD_SECONDS = st.one_of(
    st.integers(min_value=10**10),
    st.integers(max_value=-1),
    st.sampled_from([float("nan"), float("inf"), float("-inf"), True, False, HUGE, -HUGE]),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
)
BAD_FLAG = st.one_of(st.integers(), st.floats(), st.none(), st.text(max_size=3))

BAD_CALLS = st.one_of(
    st.builds(lambda v: lambda b: b.put(v, "k", b"v"), BAD_NAME),
    st.builds(lambda v: lambda b: b.put("b", v, b"v"), BAD_NAME),
    st.builds(lambda v: lambda b: b.put("b", "k", b"v", indexes=[("add", v, "t")]), BAD_NAME),
    st.builds(lambda v: lambda b: b.put("b", "k", b"v", indexes=[("add", "f", v)]), BAD_NAME),
    st.builds(lambda v: lambda b: b.put("b", "k", b"v", indexes=[(v, "f", "t")]), WRONG_TYPE),
    st.builds(lambda v: lambda b: b.put("b", "k", b"v", ttl=v), BAD_SECONDS),
    st.builds(lambda v: lambda b: b.delete(v, "k"), BAD_NAME),
    st.builds(lambda v: lambda b: b.get("b", v), BAD_NAME),
    st.builds(lambda v: lambda b: b.checkpoint(v), BAD_SECONDS),
    st.builds(lambda v: lambda b: b.checkpoint(60, name=v), BAD_NAME),
    st.builds(lambda v: lambda b: b.run_gc(min_age=v), BAD_SECONDS),
    st.builds(lambda v: lambda b: b.run_gc(dry_run=v), BAD_FLAG),
    st.builds(lambda v: lambda b: b.snapshot(ledger_only=v), BAD_FLAG),
    st.builds(lambda v: lambda b: list(b.index_query("b", v, "a", "z")), BAD_NAME),
    st.builds(
        lambda v: lambda b: list(b.index_query("b", "f", "a", "z", return_terms=v)), BAD_FLAG
    ),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(call=BAD_CALLS)
def test_fuzzed_bad_arguments_raise_usage_errors_and_change_nothing(
    book: inkpen.Bookie, store_url: str, call: Callable[[inkpen.Bookie], Any]
) -> None:
    before = book.stats()["sqn"], checkpoints(store_url)
    with pytest.raises(inkpen.UsageError):
        call(book)
    assert (book.stats()["sqn"], checkpoints(store_url)) == before
    assert book.get("b", "k") == b"original"


OPTION_VALUES = {
    "roll_on_close": BAD_FLAG,
    "metrics": BAD_FLAG,
    "allow_missing_segments": BAD_FLAG,
    "gc_min_age": BAD_SECONDS,
    "checkpoint_lifetime": BAD_SECONDS,
    "flush_interval": BAD_SECONDS,
    "compaction_interval": BAD_SECONDS,
    "max_batch_bytes": st.one_of(
        st.integers(min_value=2**40), st.integers(max_value=0), st.floats(), st.text(max_size=3)
    ),
    "compute_workers": st.one_of(st.integers(min_value=65), st.floats(), st.booleans()),
    "transaction_max_keys": st.one_of(
        st.integers(min_value=1_000_001), st.integers(max_value=0), st.floats(), st.booleans()
    ),
    "transaction_max_bytes": st.one_of(
        st.integers(min_value=2**28 + 1), st.integers(max_value=1023), st.floats(), st.text()
    ),
    "transaction_window_keys": st.one_of(
        st.integers(min_value=100_000_001), st.integers(max_value=0), st.floats(), st.booleans()
    ),
    "flush_policy": st.one_of(BAD_TEXT, WRONG_TYPE),
    "reload_strategy": st.one_of(
        WRONG_TYPE.filter(lambda v: v is not None and not isinstance(v, list)),
        st.dictionaries(BAD_TEXT, st.just("retain"), min_size=1, max_size=1),
    ),
    "merge_operators": st.one_of(
        WRONG_TYPE.filter(lambda v: not isinstance(v, dict)),
        st.dictionaries(st.sampled_from(("", "a\x00", 7, b"add")), st.just(len), min_size=1),
        st.dictionaries(
            st.sampled_from(("add", "x")), WRONG_TYPE.filter(lambda v: not callable(v)), min_size=1
        ),
    ),
}


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_fuzzed_bad_options_are_usage_errors(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(OPTION_VALUES)))
    value = data.draw(OPTION_VALUES[name])
    with pytest.raises(inkpen.UsageError, match=name):
        inkpen.Options.build(**{name: value})


def test_old_roll_option_names_still_work_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="fold_bytes is now called roll_bytes"):
        options = inkpen.Options.build(fold_bytes=1024, fold_on_close=False)
    assert options.roll_bytes == 1024
    assert options.roll_on_close is False
    with pytest.raises(inkpen.UsageError, match="give only roll_segments"):
        inkpen.Options.build(fold_segments=3, roll_segments=4)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda b: b.create_feed_cursor("x", 2**64), "sqn must be an SQN"),
        (lambda b: b.create_feed_cursor("x", 2**63), "sqn must be an SQN"),
        (lambda b: b.create_feed_cursor("x", lifetime=1e30), "lifetime must be a positive"),
        (lambda b: b.create_feed_cursor("x\x01"), "printable"),
        (lambda b: b.advance_feed_cursor("c", 10**23), "sqn must be an SQN"),
        (lambda b: list(b.changes(2**63)), "since must be an SQN"),
        (lambda b: list(b.heads("b", max_objects=2**64)), "max_objects must be an int"),
    ],
)
def test_sqns_lifetimes_and_counts_beyond_the_formats_are_refused(
    book: inkpen.Bookie, store_url: str, call: Callable[[inkpen.Bookie], Any], message: str
) -> None:
    book.create_feed_cursor("c", 1)
    before = checkpoints(store_url), book.feed_cursors()
    with pytest.raises(inkpen.UsageError, match=message):
        call(book)
    assert (checkpoints(store_url), book.feed_cursors()) == before
    with pytest.raises(inkpen.UsageError, match="the last SQN"):  # an SQN, past the last
        book.create_feed_cursor("x", 2**63 - 1)


def test_a_cache_dir_that_cannot_be_made_is_refused_before_the_store_is_touched(
    store_url: str, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"not a directory")
    for opener in (inkpen.open, inkpen.open_reader):
        with pytest.raises(inkpen.UsageError, match="cannot be used as a disk cache"):
            opener(store_url, cache_dir=str(blocker / "cache"))
    assert list(open_store(store_url).list()) == []
