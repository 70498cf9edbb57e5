"""Bad input: a clear UsageError at once, and nothing changed."""

from __future__ import annotations

import pytest

import inkpen
from support.engine import TINY


@pytest.fixture
def book(store_url: str):
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
def test_bad_calls_raise_and_change_nothing(book: inkpen.Bookie, call, message: str) -> None:
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
    store_url: str, options: dict, message: str
) -> None:
    with pytest.raises(inkpen.UsageError, match=message):
        inkpen.open(store_url, **options)
    store = inkpen.objectstore.open_store(store_url)
    assert list(store.list()) == []


def test_unknown_scheme_is_a_usage_error() -> None:
    with pytest.raises(inkpen.UsageError, match="unknown store URL scheme"):
        inkpen.open("ftp://example/db")
