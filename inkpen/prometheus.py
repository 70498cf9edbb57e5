"""inkpen's metrics for Prometheus (the ``prometheus`` extra: ``pip install 'inkpen[prometheus]'``).

::

    import inkpen, inkpen.prometheus, prometheus_client

    book = inkpen.open("/var/lib/myapp/db")
    inkpen.prometheus.register(book)            # into prometheus_client's default registry
    prometheus_client.start_http_server(9100)   # or serve generate_latest() from your own server

:func:`register` adds a custom collector: nothing is counted twice and nothing runs between
scrapes; at each scrape the collector asks the handle for :meth:`~inkpen.Bookie.metrics` (which
waits for no actor) and yields metric families named ``inkpen_...`` in Prometheus' conventions:
counters end in ``_total``, sizes are ``_bytes``, times ``_seconds``, latencies are histograms
(``inkpen_put_seconds``, ``inkpen_get_seconds``, ...; buckets from 25 µs to 10 s). Per-level
figures carry a ``level`` label (``"0"`` is L0), store requests an ``op`` label, caches a
``cache`` label. A handle closed since answers nothing (its series end).

Importing this module without ``prometheus_client`` raises an error that is both an
:class:`ImportError` and an :class:`inkpen.UsageError`, saying what to install.

OpenTelemetry is not offered: its API has no asynchronous (observed) histogram, so the
histograms inkpen keeps could only be handed over by recording every operation a second time.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from inkpen.actors.kernel.meter import Histogram, Metrics
from inkpen.errors import UsageError

__all__ = ["InkpenCollector", "register"]


class _MissingExtra(UsageError, ImportError):
    """inkpen.prometheus was imported without prometheus_client installed."""


try:
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
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


class InkpenCollector(Collector):
    """A Prometheus collector of one handle's :class:`inkpen.Metrics`, read at each scrape."""

    def __init__(self, source: MetricsSource) -> None:
        self._source = source

    def describe(self) -> Iterable[Metric]:
        """The families, without samples: lets a registry check names without a scrape."""
        return list(_families(None))

    def collect(self) -> Iterable[Metric]:
        try:
            figures = self._source.metrics()
        except UsageError:  # closed: its series end
            return []
        return list(_families(figures))


def register(source: Any, registry: CollectorRegistry | None = None) -> InkpenCollector:
    """Export ``source``'s metrics through ``registry`` (prometheus_client's default registry
    by default); answers the collector (``registry.unregister(collector)`` takes it back).

    ``source``: an :class:`inkpen.Bookie` or :class:`inkpen.Reader`, an ``inkpen.aio`` handle
    (its synchronous handle is asked), or any object whose ``metrics()`` answers
    :class:`inkpen.Metrics`. One handle per registry: the names are the same for every handle.
    """
    metrics = getattr(source, "metrics", None)
    if metrics is not None and inspect.iscoroutinefunction(metrics):
        source = getattr(source, "sync", None)
        metrics = getattr(source, "metrics", None)
    if not callable(metrics):
        raise UsageError(
            "register takes an inkpen handle (Bookie, Reader, an inkpen.aio handle) or an "
            f"object with a metrics() method, got {type(source).__name__}"
        )
    collector = InkpenCollector(source)
    (REGISTRY if registry is None else registry).register(collector)
    return collector


def _families(figures: Metrics | None) -> Iterator[Metric]:
    """Every family; with ``figures`` None, empty ones (for ``describe``)."""
    for field, text in _COUNTERS:
        counter = CounterMetricFamily(PREFIX + field, text)
        if figures is not None:
            counter.add_metric([], float(getattr(figures, field)))
        yield counter
    for field, name, text in _GAUGES:
        gauge = GaugeMetricFamily(PREFIX + name, text)
        if figures is not None:
            gauge.add_metric([], float(getattr(figures, field)))
        yield gauge
    for field, name, label, text, is_counter in _LABELLED:
        family: CounterMetricFamily | GaugeMetricFamily = (
            CounterMetricFamily(PREFIX + name, text, labels=[label])
            if is_counter
            else GaugeMetricFamily(PREFIX + name, text, labels=[label])
        )
        if figures is not None:
            values: Mapping[str, int] = getattr(figures, field)
            for key, value in values.items():
                family.add_metric([key], float(value))
        yield family
    for name, field, text in (
        ("level_files", "level_files", "SST files per level (level 0 is L0)"),
        ("level_bytes", "level_bytes", "bytes of SST files per level (level 0 is L0)"),
    ):
        gauge = GaugeMetricFamily(PREFIX + name, text, labels=["level"])
        if figures is not None:
            for level, value in enumerate(getattr(figures, field) or (0,)):  # L0 at least
                gauge.add_metric([str(level)], float(value))
        yield gauge
    for field, name, text in _HISTOGRAMS:
        family_h = HistogramMetricFamily(PREFIX + name, text)
        if figures is not None:
            histogram: Histogram = getattr(figures, field)
            family_h.add_metric([], _buckets(histogram), histogram.sum)
        yield family_h


def _buckets(histogram: Histogram) -> list[tuple[str, float]]:
    """Cumulative ``(le, count)`` pairs, ``+Inf`` last, as Prometheus wants them."""
    bounds = [repr(float(b)) for b in histogram.bounds] + ["+Inf"]  # as prometheus_client writes
    return [(le, float(n)) for le, n in zip(bounds, histogram.cumulative(), strict=True)]
