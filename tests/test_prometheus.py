"""``inkpen.prometheus``: a scrape through prometheus_client, parsed back, names the figures of
``metrics()`` in Prometheus' conventions with the values the calls made; without the library the
import says what to install."""

from __future__ import annotations

import asyncio
import importlib
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import inkpen
import inkpen.aio
import inkpen.prometheus
from inkpen import shards
from inkpen.actors.kernel.meter import LATENCY_BOUNDS
from support.waiting import wait_until

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(registry: CollectorRegistry) -> tuple[dict[str, str], Samples]:
    """The registry's text exposition parsed back: family types by name, and every sample's
    value by (sample name, sorted labels)."""
    text = generate_latest(registry).decode()
    types: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return types, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[name, tuple(sorted(labels.items()))]


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def book(make_store_url: Callable[[str], str]) -> Iterator[inkpen.Bookie]:
    with inkpen.open(make_store_url("local"), roll_segments=8) as opened:
        yield opened


def test_a_scrape_names_the_counts_of_the_calls_made(
    book: inkpen.Bookie, registry: CollectorRegistry
) -> None:
    collector = inkpen.prometheus.register(book, registry, labels={})  # one database: no labels
    puts, gets = 150, 40
    for i in range(puts):
        book.put("b", f"k{i:03d}", b"v" * 10)
    for i in range(gets):
        assert book.get("b", f"k{i:03d}") == b"v" * 10
    book.delete("b", "k000")
    book.flush()
    book.compact_ledger()  # L0 merged into L1: files on two levels

    def quiet() -> bool:  # two scrapes in a row agree: no roll or merge between them
        return scrape(registry) == scrape(registry)

    wait_until(quiet, "the background work to settle")
    types, samples = scrape(registry)
    metrics, stats = book.metrics(), book.stats()

    assert types["inkpen_puts"] == types["inkpen_gets"] == "counter"
    assert types["inkpen_put_seconds"] == types["inkpen_get_seconds"] == "histogram"
    assert types["inkpen_l0_files"] == types["inkpen_journal_bytes"] == "gauge"
    assert types["inkpen_store_requests"] == "counter"
    assert value(samples, "inkpen_puts_total") == puts
    assert value(samples, "inkpen_gets_total") == gets
    assert value(samples, "inkpen_deletes_total") == 1
    assert value(samples, "inkpen_value_bytes_written_total") == puts * 10
    assert value(samples, "inkpen_value_bytes_read_total") == gets * 10

    for name, count, histogram in (
        ("inkpen_put_seconds", puts, metrics.put_seconds),
        ("inkpen_get_seconds", gets, metrics.get_seconds),
    ):
        assert value(samples, f"{name}_count") == count
        assert value(samples, f"{name}_bucket", le="+Inf") == count
        assert value(samples, f"{name}_sum") == pytest.approx(histogram.sum)
        buckets = [value(samples, f"{name}_bucket", le=repr(b)) for b in LATENCY_BOUNDS]
        assert buckets == sorted(buckets)  # cumulative
        assert [*buckets, count] == list(histogram.cumulative())

    assert value(samples, "inkpen_l0_files") == stats["l0_files"]
    for level, files in enumerate(stats["level_files"]):
        assert value(samples, "inkpen_level_files", level=str(level)) == files
        assert (
            value(samples, "inkpen_level_bytes", level=str(level)) == (stats["level_bytes"][level])
        )
    assert value(samples, "inkpen_journal_files") == stats["journal_files"]
    assert value(samples, "inkpen_journal_bytes") == stats["journal_bytes"]
    assert value(samples, "inkpen_last_sqn") == stats["sqn"] == puts + 1
    assert value(samples, "inkpen_backpressure") == 0
    assert value(samples, "inkpen_fenced") == 0
    assert value(samples, "inkpen_l0_writes_total") == stats["l0_writes"] > 0
    assert value(samples, "inkpen_merges_total") == stats["merges"]
    assert len(stats["level_files"]) >= 2
    for op, count in metrics.store_requests.items():
        assert value(samples, "inkpen_store_requests_total", op=op) == count
    assert value(samples, "inkpen_store_requests_total", op="put") > 0
    for cache in ("block", "journal", "journal_index"):
        assert value(samples, "inkpen_cache_hits_total", cache=cache) == (metrics.cache_hits[cache])

    registry.unregister(collector)
    assert not any(name.startswith("inkpen_") for name, _ in scrape(registry)[1])


def test_the_default_registry_and_a_closed_handle(make_store_url: Callable[[str], str]) -> None:
    url = make_store_url("memory")
    book = inkpen.open(url)
    collector = inkpen.prometheus.register(book)
    db = {"database": url.removeprefix("memory://")}  # by default, the URL's last path part
    try:
        book.put("b", "k", b"v")
        assert REGISTRY.get_sample_value("inkpen_puts_total", db) == 1
        assert REGISTRY.get_sample_value("inkpen_level_files", {**db, "level": "0"}) == 0
        book.close()
        assert REGISTRY.get_sample_value("inkpen_puts_total", db) is None  # its series end
    finally:
        REGISTRY.unregister(collector)
        book.close()


def test_a_reader_and_an_asyncio_handle(
    make_store_url: Callable[[str], str], registry: CollectorRegistry
) -> None:
    url = make_store_url("local")

    async def write() -> float | None:
        async with inkpen.aio.open(url) as book:
            own = CollectorRegistry()
            inkpen.prometheus.register(book, own, labels={})  # its synchronous handle is asked
            await asyncio.gather(*(book.put("b", f"k{i}", b"xy") for i in range(30)))
            return own.get_sample_value("inkpen_puts_total")

    assert asyncio.run(write()) == 30
    with inkpen.open_reader(url) as reader:
        inkpen.prometheus.register(reader, registry, labels={})
        for i in range(7):
            assert reader.get("b", f"k{i}") == b"xy"
        _, samples = scrape(registry)
        assert value(samples, "inkpen_gets_total") == 7
        assert value(samples, "inkpen_get_seconds_count") == 7
        assert value(samples, "inkpen_puts_total") == 0
        assert value(samples, "inkpen_last_sqn") == 30
        assert value(samples, "inkpen_store_requests_total", op="get") > 0


def test_register_refuses_what_has_no_metrics(registry: CollectorRegistry) -> None:
    with pytest.raises(inkpen.UsageError, match="object with a metrics"):
        inkpen.prometheus.register(object(), registry)


def test_metrics_off_is_exported_as_such(
    make_store_url: Callable[[str], str], registry: CollectorRegistry
) -> None:
    with inkpen.open(make_store_url("memory"), metrics=False) as book:
        inkpen.prometheus.register(book, registry, labels={})
        book.put("b", "k", b"v")
        _, samples = scrape(registry)
    assert value(samples, "inkpen_metrics_enabled") == 0
    assert value(samples, "inkpen_puts_total") == 0
    assert value(samples, "inkpen_put_seconds_count") == 0
    assert math.isclose(value(samples, "inkpen_put_seconds_sum"), 0.0)


def test_without_prometheus_client_the_import_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in sys.modules if n == "prometheus_client" or n.startswith("prometheus_")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "inkpen.prometheus")
    with pytest.raises(ImportError) as caught:
        importlib.import_module("inkpen.prometheus")
    assert isinstance(caught.value, inkpen.UsageError)
    assert "pip install 'inkpen[prometheus]'" in str(caught.value)
    assert caught.value.name == "prometheus_client"


# -- many databases, one registry -------------------------------------------------------------


def test_two_bookies_and_a_data_set_share_one_registry(
    make_store_url: Callable[[str], str], registry: CollectorRegistry, tmp_path: Path
) -> None:
    users, orders = str(tmp_path / "users"), str(tmp_path / "orders")
    data_set = str(tmp_path / "events")
    shards.create(data_set, shards=3)
    with (
        inkpen.open(users) as first,
        inkpen.open(orders) as second,
        shards.open(data_set) as sharded,
    ):
        collector = inkpen.prometheus.register(first, registry)  # labelled "users"
        assert inkpen.prometheus.register(second, registry) is collector  # one per registry
        inkpen.prometheus.register(sharded, registry)
        for i in range(3):
            first.put("b", f"k{i}", b"v")
        second.put("b", "k", b"v")
        keys = [f"e{i}" for i in range(12)]
        for key in keys:
            sharded.put("b", key, b"v")
        _, samples = scrape(registry)
        assert value(samples, "inkpen_puts_total", database="users") == 3
        assert value(samples, "inkpen_puts_total", database="orders") == 1
        per_shard = [sum(1 for k in keys if shards.shard_of("b", k, 3) == i) for i in range(3)]
        for index in range(3):
            assert (
                value(samples, "inkpen_puts_total", database="events", shard=str(index))
                == per_shard[index]
            )
            assert (
                value(samples, "inkpen_level_files", database="events", shard=str(index), level="0")
                == (sharded.metrics(shard=index).level_files or (0,))[0]
            )
        assert value(samples, "inkpen_put_seconds_count", database="orders") == 1
        with pytest.raises(inkpen.UsageError, match="registered in this registry already"):
            inkpen.prometheus.register(second, registry)  # the same labels twice
        inkpen.prometheus.register(second, registry, labels={"database": "orders-again"})
        assert collector.remove(second)
        _, samples = scrape(registry)
        assert ("inkpen_puts_total", (("database", "orders"),)) not in samples
        assert value(samples, "inkpen_puts_total", database="orders-again") == 1
    _, after = scrape(registry)  # closed: every series ends, and the collector lets them go
    assert not any(name.startswith("inkpen_puts") for name, _labels in after)
    assert collector._sources == {}


def test_register_checks_its_labels(
    make_store_url: Callable[[str], str], registry: CollectorRegistry
) -> None:
    with inkpen.open(make_store_url("memory")) as book:
        for labels, message in (
            ({"le": "x"}, "one inkpen's metrics use themselves"),
            ({"shard": "1"}, "one inkpen's metrics use themselves"),
            ({"2fast": "x"}, "not a Prometheus label name"),
            ({"__name": "x"}, "not a Prometheus label name"),
            ({"team": 3}, "must have a str value"),
        ):
            with pytest.raises(inkpen.UsageError, match=message):
                inkpen.prometheus.register(book, registry, labels=labels)  # type: ignore[arg-type]
        assert scrape(registry) == ({}, {})  # nothing registered by the refusals
        inkpen.prometheus.register(book, registry, labels={"team": "search", "database": "db"})
        book.put("b", "k", b"v")
        _, samples = scrape(registry)
        assert value(samples, "inkpen_puts_total", team="search", database="db") == 1


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("s3://bucket/apps/users?endpoint=http://127.0.0.1:8333", "users"),
        ("s3://bucket", "bucket"),
        ("memory://cache", "cache"),
        ("/var/lib/myapp/db/", "db"),
        ("file:///srv/data/orders", "orders"),
    ],
)
def test_the_default_label_is_the_last_part_of_the_url(url: str, name: str) -> None:
    assert inkpen.prometheus.database_name(url) == name
