"""Backends registered by URL scheme: the built-in ones answer their URLs, a registered one opens
through ``open_store`` and ``inkpen.open`` like them, and bad schemes are refused."""

from __future__ import annotations

from urllib.parse import SplitResult

import pytest

import inkpen
from inkpen.objectstore import Backend, ObjectStore, StoreURL, open_store, parse_store_url, register
from inkpen.objectstore.backends import backend, schemes
from inkpen.objectstore.memory import MemoryStore, drop_space
from inkpen.objectstore.url import locations_overlap


def test_the_built_in_schemes_and_their_facts() -> None:
    assert {"file", "memory", "s3"} <= set(schemes())
    assert backend("file").local and backend("file").durable
    assert not backend("memory").local and not backend("memory").durable
    assert backend("s3").durable and not backend("s3").local


def test_an_unknown_scheme_names_the_known_ones() -> None:
    with pytest.raises(inkpen.UsageError, match=r"unknown store URL scheme 'ftp'.*s3://"):
        parse_store_url("ftp://host/db")


def test_a_registered_backend_opens_through_open_store_and_inkpen_open() -> None:
    opened: list[StoreURL] = []

    def parse(parts: SplitResult, url: str, options: dict[str, str]) -> StoreURL:
        if not parts.netloc:
            raise inkpen.UsageError(f"{url} needs a space")
        return StoreURL("testmem", parts.netloc, parts.path.strip("/"), options)

    def open_(parsed: StoreURL) -> ObjectStore:
        opened.append(parsed)
        return MemoryStore(f"testmem-{parsed.location}", prefix=parsed.prefix)

    def place(parsed: StoreURL) -> tuple[str, str, tuple[str, ...]]:
        return "testmem", parsed.location, tuple(p for p in parsed.prefix.split("/") if p)

    register(Backend("testmem", "testmem://space", parse, open_, place, durable=False))
    try:
        assert "testmem" in schemes()
        with open_store("testmem://a/db") as store:
            assert isinstance(store, MemoryStore)
        with inkpen.open("testmem://a/db") as book:
            book.put("b", "k", b"v")
        with inkpen.open("testmem://a/db") as book:
            assert book.get("b", "k") == b"v"
        assert [p.location for p in opened] == ["a", "a", "a"]
        assert locations_overlap("testmem://a/db", "testmem://a/db/inner")
        assert not locations_overlap("testmem://a/db", "testmem://b/db")
        with pytest.raises(inkpen.UsageError, match="needs a space"):
            parse_store_url("testmem:///db")
    finally:
        drop_space("testmem-a")


def _parse_nothing(parts: SplitResult, url: str, options: dict[str, str]) -> StoreURL:
    raise AssertionError("a refused backend is never asked")


def _open_nothing(parsed: StoreURL) -> ObjectStore:
    raise AssertionError("a refused backend is never asked")


def _no_place(parsed: StoreURL) -> tuple[str, str, tuple[str, ...]]:
    raise AssertionError("a refused backend is never asked")


@pytest.mark.parametrize("scheme", ["", "S3", "my-store", "a b"])
def test_a_backend_scheme_must_be_a_lower_case_name(scheme: str) -> None:
    before = schemes()
    refused = Backend(scheme, "x://", _parse_nothing, _open_nothing, _no_place)
    with pytest.raises(inkpen.UsageError, match="lower-case name"):
        register(refused)
    assert schemes() == before
