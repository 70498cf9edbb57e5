"""inkpen's metrics for Prometheus (the ``prometheus`` extra: ``pip install 'inkpen[prometheus]'``).

::

    import inkpen, inkpen.prometheus, prometheus_client

    book = inkpen.open("/var/lib/myapp/db")
    inkpen.prometheus.register(book)            # into prometheus_client's default registry
    prometheus_client.start_http_server(9100)   # or serve generate_latest() from your own server

:func:`register` adds the handle to the registry's inkpen collector (one per registry, made by
the first call): nothing is counted twice and nothing runs between scrapes; at each scrape the
collector asks each handle for :meth:`~inkpen.Bookie.metrics` (which waits for no actor) and
yields metric families named ``inkpen_...`` in Prometheus' conventions: counters end in
``_total``, sizes are ``_bytes``, times ``_seconds``, latencies are histograms
(``inkpen_put_seconds``, ``inkpen_get_seconds``, ...; buckets from 25 µs to 10 s). Per-level
figures carry a ``level`` label (``"0"`` is L0), store requests an ``op`` label, caches a
``cache`` label.

Many handles, one registry: each handle's series carry its constant ``labels``, by default
``{"database": NAME}`` with NAME the last part of its URL's path (``/var/lib/myapp/users`` ->
``users``), so one registry exports many databases; two handles with the same labels are
refused (name them apart with ``labels=``). A sharded data set (``inkpen.shards.open``) exports
one series per shard it has opened, labelled ``shard="0"``, ``"1"``, ... beside its database
label. A handle closed since answers nothing: its series end, and the collector lets it go.

Importing this module without ``prometheus_client`` raises an error that is both an
:class:`ImportError` and an :class:`inkpen.UsageError`, saying what to install.

OpenTelemetry is not offered: its API has no asynchronous (observed) histogram, so the
histograms inkpen keeps could only be handed over by recording every operation a second time.
"""

from __future__ import annotations

import inspect
import os
import re
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from inkpen._shard_handle import ShardedBookie
from inkpen.actors.kernel.meter import Histogram, Metrics
from inkpen.errors import UsageError

__all__ = ["InkpenCollector", "register"]


class _MissingExtra(UsageError, ImportError):
    """inkpen.prometheus was imported without prometheus_client installed."""


try:
    from prometheus_client.core import Metric
    from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry
except ImportError as _exc:
    _missing = _MissingExtra(
        "inkpen.prometheus exports inkpen's metrics through prometheus_client, which is not "
        "installed: install inkpen with its prometheus extra, pip install 'inkpen[prometheus]'"
    )
    _missing.name = "prometheus_client"
    raise _missing from _exc


class MetricsSource(Protocol):
    """What :func:`register` takes: a handle answering :class:`inkpen.Metrics` (a Bookie, a
    Reader, or anything delegating to one)."""

    def metrics(self) -> Metrics: ...


_COUNTERS: tuple[tuple[str, str], ...] = (
    ("puts", "put calls acknowledged (durable and visible)"),
    ("deletes", "delete calls acknowledged"),
    ("batches", "write (Batch) and mput calls acknowledged"),
    ("batch_changes", "changes in the acknowledged batches"),
    ("gets", "get calls answered"),
    ("get_many_calls", "get_many calls answered"),
    ("get_many_keys", "keys asked for by get_many calls"),
    ("scans", "folds finished (keys, heads, objects, index queries, changes, ...)"),
    ("conflicts", "conditional writes refused (ConflictError)"),
    ("write_errors", "writes that raised another inkpen error"),
    ("value_bytes_written", "bytes of values in acknowledged writes"),
    ("value_bytes_read", "bytes of values answered by get and get_many"),
    ("store_bytes_written", "bytes sent to the object store by puts"),
    ("store_bytes_read", "bytes received from the object store by gets"),
    ("throttled_puts", "writes that backpressure slowed or held"),
    ("l0_writes", "L0 files written from the ledger's memory"),
    ("l0_bytes_written", "bytes of the L0 files written"),
    ("merges", "ledger merges committed"),
    ("merge_bytes_read", "bytes of SST files merges read"),
    ("merge_bytes_written", "bytes of SST files merges wrote"),
    ("merge_seconds", "seconds merges took to read, merge and write"),
    ("journal_compactions", "journal compactions committed"),
    ("journal_compaction_bytes_read", "bytes of journal files compactions replaced"),
    ("journal_compaction_bytes_written", "bytes of journal files compactions wrote"),
    ("journal_compaction_seconds", "seconds journal compactions took before their commit"),
    ("journal_rerolls", "journal files rolled again without the small values the ledger holds"),
    ("journal_reroll_bytes_read", "bytes of journal files re-rolls replaced"),
    ("journal_reroll_bytes_written", "bytes of journal files re-rolls wrote"),
    ("gc_runs", "GC passes run by this writer"),
    ("gc_deletions", "objects GC passes deleted"),
    ("gc_bytes_deleted", "bytes of the objects GC passes deleted"),
)
"""(Metrics field, help) of every counter: ``inkpen_<field>_total``."""

_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("l0_files", "l0_files", "SST files in L0, waiting to be merged down"),
    ("ledger_mem_entries", "ledger_mem_entries", "ledger entries in memory, not yet in L0"),
    ("journal_files", "journal_files", "journal files"),
    ("journal_bytes", "journal_bytes", "bytes of the journal files"),
    ("unrolled_segments", "unrolled_segments", "journal segments not yet rolled into a file"),
    ("unrolled_bytes", "unrolled_bytes", "bytes of the unrolled journal segments"),
    ("backpressure", "backpressure", "backpressure now: 0 none, 1 puts slowed, 2 puts held"),
    ("fenced", "fenced", "1 once a newer writer has opened the database"),
    ("last_sqn", "last_sqn", "the highest SQN the handle can read"),
    ("enabled", "metrics_enabled", "1 when operations are recorded (the metrics option)"),
)
"""(Metrics field, name without ``inkpen_``, help) of every gauge."""

_HISTOGRAMS: tuple[tuple[str, str, str], ...] = (
    ("put_seconds", "put_seconds", "latency of acknowledged put calls"),
    ("delete_seconds", "delete_seconds", "latency of acknowledged delete calls"),
    ("write_seconds", "write_seconds", "latency of acknowledged batches (write, mput)"),
    ("get_seconds", "get_seconds", "latency of get calls"),
    ("get_many_seconds", "get_many_seconds", "latency of get_many calls"),
    ("scan_seconds", "scan_seconds", "duration of folds, from their start to their end"),
)
"""(Metrics field, name without ``inkpen_``, help) of every latency histogram."""

_LABELLED: tuple[tuple[str, str, str, str, bool], ...] = (
    ("store_requests", "store_requests", "op", "requests made of the object store", True),
    ("cache_hits", "cache_hits", "cache", "lookups a cache held", True),
    ("cache_misses", "cache_misses", "cache", "lookups a cache did not hold", True),
)
"""(Metrics field, name, label, help, is a counter) of the figures keyed by a label."""

PREFIX = "inkpen_"
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_OWN_LABELS = frozenset({"le", "op", "cache", "level", "shard", "quantile"})
"""Label names inkpen's families use themselves: not for constant labels."""

Labels = tuple[tuple[str, str], ...]
Figures = list[tuple[dict[str, str], Metrics]]
"""What one scrape found: each series' labels and its handle's metrics."""


class InkpenCollector(Collector):
    """The Prometheus collector of one registry's inkpen handles, each with its constant labels;
    :func:`register` makes one per registry and adds the handles to it."""

    def __init__(
        self, source: MetricsSource | None = None, labels: Mapping[str, str] | None = None
    ):
        self._lock = threading.Lock()
        self._sources: dict[Labels, MetricsSource] = {}
        if source is not None:
            self.add(source, {} if labels is None else labels)

    def add(self, source: MetricsSource, labels: Mapping[str, str]) -> None:
        """Export ``source``'s metrics with the constant ``labels`` (checked by :func:`register`);
        the same labels twice are refused."""
        key = tuple(sorted(labels.items()))
        with self._lock:
            if key in self._sources:
                shown = ", ".join(f"{k}={v!r}" for k, v in key) or "no labels"
                raise UsageError(
                    f"a handle with {shown} is registered in this registry already: give each "
                    'handle labels of its own, register(book, registry, labels={"database": '
                    '"users"}), or unregister the other one first (collector.remove(book))'
                )
            self._sources[key] = source

    def remove(self, source: MetricsSource) -> bool:
        """Stop exporting ``source`` (a handle given to :func:`register`, or its aio handle);
        True if it was exported."""
        wanted = _sync_of(source)
        with self._lock:
            for key, found in list(self._sources.items()):
                if found is wanted:
                    del self._sources[key]
                    return True
        return False

    def describe(self) -> Iterable[Metric]:
        """The families, without samples: lets a registry check names without a scrape."""
        return list(_families([]))

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            sources = list(self._sources.items())
        figures: Figures = []
        for key, source in sources:
            try:
                figures.extend(_figures(dict(key), source))
            except UsageError:  # closed: its series end, and it is let go
                with self._lock:
                    if self._sources.get(key) is source:
                        del self._sources[key]
        return list(_families(figures))


def _figures(labels: dict[str, str], source: MetricsSource) -> Figures:
    """The series of one handle: one, or one per opened shard of a data set."""
    if isinstance(source, ShardedBookie):
        found = []
        for index in sorted(source.opened_shards):
            found.append(({**labels, "shard": str(index)}, source.metrics(shard=index)))
        return found
    return [(labels, source.metrics())]


_COLLECTORS: weakref.WeakKeyDictionary[CollectorRegistry, InkpenCollector] = (
    weakref.WeakKeyDictionary()
)
_COLLECTORS_LOCK = threading.Lock()


def _sync_of(source: Any) -> Any:
    """The handle whose ``metrics()`` is asked: an inkpen.aio handle's synchronous one."""
    metrics = getattr(source, "metrics", None)
    if metrics is not None and inspect.iscoroutinefunction(metrics):
        return getattr(source, "sync", None)
    return source


def register(
    source: Any,
    registry: CollectorRegistry | None = None,
    labels: Mapping[str, str] | None = None,
) -> InkpenCollector:
    """Export ``source``'s metrics through ``registry`` (prometheus_client's default registry
    by default), with the constant ``labels``; answers the registry's inkpen collector
    (``collector.remove(source)`` takes the handle back, ``registry.unregister(collector)``
    every handle of the registry).

    ``source``: an :class:`inkpen.Bookie` or :class:`inkpen.Reader`, a sharded data set's
    ``ShardedBookie`` (a ``shard`` label per shard it has opened), an ``inkpen.aio`` handle
    (its synchronous handle is asked), or any object whose ``metrics()`` answers
    :class:`inkpen.Metrics`. ``labels``: by default ``{"database": NAME}``, NAME being the last
    part of the handle's URL path (no label for an object without a ``url``); ``{}`` for none.
    Handles of one registry need labels of their own: the same labels twice are refused.
    """
    source = _sync_of(source)
    metrics = getattr(source, "metrics", None)
    if not callable(metrics):
        raise UsageError(
            "register takes an inkpen handle (Bookie, Reader, ShardedBookie, an inkpen.aio "
            f"handle) or an object with a metrics() method, got {type(source).__name__}"
        )
    chosen = _default_labels(source) if labels is None else _check_labels(labels)
    target = REGISTRY if registry is None else registry
    with _COLLECTORS_LOCK:
        collector = _COLLECTORS.get(target)
        if collector is None or not _registered(target, collector):
            collector = InkpenCollector()
            collector.add(source, chosen)
            target.register(collector)
            _COLLECTORS[target] = collector
        else:
            collector.add(source, chosen)
    return collector


def _registered(registry: CollectorRegistry, collector: InkpenCollector) -> bool:
    """Whether ``collector`` is still in ``registry`` (``registry.unregister`` takes it out)."""
    return any(found is collector for found in registry._collector_to_names)


def _check_labels(labels: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(labels, Mapping):
        raise UsageError(f"labels must be a mapping of label names to str values, got {labels!r}")
    for name, value in labels.items():
        if not isinstance(name, str) or not _LABEL_NAME.match(name) or name.startswith("__"):
            raise UsageError(
                f"label name {name!r} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, "
                "not starting with __)"
            )
        if name in _OWN_LABELS:
            raise UsageError(
                f"label name {name!r} is one inkpen's metrics use themselves "
                f"({', '.join(sorted(_OWN_LABELS))}); choose another"
            )
        if not isinstance(value, str):
            raise UsageError(f"label {name!r} must have a str value, got {value!r}")
    return dict(labels)


def _default_labels(source: Any) -> dict[str, str]:
    url = getattr(source, "url", None)
    if not isinstance(url, str):
        return {}
    return {"database": database_name(url)}


def database_name(url: str) -> str:
    """The last part of a store URL's path (``s3://bucket/apps/users?endpoint=...`` ->
    ``users``; ``memory://name`` -> ``name``; ``./data/db`` -> ``db``): a database's default
    label."""
    if "://" in url:
        parts = urlsplit(url)
        tail = parts.path.rstrip("/").rsplit("/", 1)[-1]
        return tail or parts.netloc or url
    return os.path.basename(os.path.normpath(url)) or url


def _families(figures: Figures) -> Iterator[Metric]:
    """Every family, with a sample per series of ``figures`` (none: empty, for ``describe``)."""
    for field, text in _COUNTERS:
        family = Metric(PREFIX + field, text, "counter")
        for labels, found in figures:
            family.add_sample(PREFIX + field + "_total", labels, float(getattr(found, field)))
        yield family
    for field, name, text in _GAUGES:
        family = Metric(PREFIX + name, text, "gauge")
        for labels, found in figures:
            family.add_sample(PREFIX + name, labels, float(getattr(found, field)))
        yield family
    for field, name, label, text, is_counter in _LABELLED:
        family = Metric(PREFIX + name, text, "counter" if is_counter else "gauge")
        sample = PREFIX + name + ("_total" if is_counter else "")
        for labels, found in figures:
            values: Mapping[str, int] = getattr(found, field)
            for key, value in values.items():
                family.add_sample(sample, {**labels, label: key}, float(value))
        yield family
    for name, text in (
        ("level_files", "SST files per level (level 0 is L0)"),
        ("level_bytes", "bytes of SST files per level (level 0 is L0)"),
    ):
        family = Metric(PREFIX + name, text, "gauge")
        for labels, found in figures:
            for level, value in enumerate(getattr(found, name) or (0,)):  # L0 at least
                family.add_sample(PREFIX + name, {**labels, "level": str(level)}, float(value))
        yield family
    for field, name, text in _HISTOGRAMS:
        family = Metric(PREFIX + name, text, "histogram")
        for labels, found in figures:
            histogram: Histogram = getattr(found, field)
            for le, count in _buckets(histogram):
                family.add_sample(PREFIX + name + "_bucket", {**labels, "le": le}, count)
            family.add_sample(PREFIX + name + "_count", labels, float(histogram.count))
            family.add_sample(PREFIX + name + "_sum", labels, histogram.sum)
        yield family


def _buckets(histogram: Histogram) -> list[tuple[str, float]]:
    """Cumulative ``(le, count)`` pairs, ``+Inf`` last, as Prometheus wants them."""
    bounds = [repr(float(b)) for b in histogram.bounds] + ["+Inf"]  # as prometheus_client writes
    return [(le, float(n)) for le, n in zip(bounds, histogram.cumulative(), strict=True)]
