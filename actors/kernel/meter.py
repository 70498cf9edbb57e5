"""Metrics: what one handle counts while it works, and the :class:`Metrics` value it answers.

Two kinds of figures, kept where the work happens:

- **Per operation** (puts, deletes, batches, gets, ``get_many``, folds): the handle records each
  call where it returns, in a :class:`Recorder` of the :class:`Meter` the handle holds: a
  latency histogram with fixed buckets (:data:`LATENCY_BOUNDS`), the seconds summed and the
  value bytes moved. Application threads record concurrently, so a recorder keeps one cell per
  thread (keyed by the thread's ident) and each thread adds only to its own: no lock and no lost
  update, and :meth:`Recorder.histogram` sums the cells when asked. A thread that ends leaves its
  cell to the next thread given its ident, so the cells stay as many as the threads alive at
  once. A lock per operation measured twice the cost (docs/performance.md, 'What metrics cost').
  ``Options(metrics=False)`` gives every handle recorders that do nothing.
- **Per piece of work of the owners** (L0 writes, merges, journal compactions, GC passes): the
  actor that finishes the work adds to plain attributes of the meter. Each attribute has one
  writer (the Penciller, the Inker or the collector, each one thread), so no lock either; any
  thread may read them.

Everything else :class:`Metrics` holds is read when it is asked for, from what the owners
already keep: the views they publish (files per level, journal files, the last SQN), the
throttle (backpressure), the caches' own counters and the store's request counts
(:class:`~inkpen.objectstore.counting.RequestCounts`, counted by a wrapper around the store).
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from inkpen.errors import ConflictError, InkpenError, UsageError
from inkpen.objectstore.counting import RequestCounts

if TYPE_CHECKING:
    from inkpen.actors.kernel.views import JournalView, LedgerView
    from inkpen.manifest.table_store import TableStore

LATENCY_BOUNDS: tuple[float, ...] = (
    0.000025,
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Upper bounds (seconds) of the latency buckets, 25 µs to 10 s; one more bucket above."""

CACHES = ("block", "journal", "journal_index")
"""The caches :attr:`Metrics.cache_hits` names: SST blocks, journal chunks, journal index pages."""

STORE_REQUESTS = ("put", "get", "head", "list", "delete", "copy")
"""The kinds of store request :attr:`Metrics.store_requests` counts."""

_WIDTH = len(LATENCY_BOUNDS) + 1
_SUM = _WIDTH
_BYTES = _WIDTH + 1
_ITEMS = _WIDTH + 2
_get_ident = threading.get_ident


@dataclass(frozen=True, slots=True)
class Histogram:
    """Latencies of one kind of operation since the handle opened, in fixed buckets.

    ``counts[i]`` operations took at most ``bounds[i]`` seconds and more than ``bounds[i - 1]``;
    the last count, one more than there are bounds, is of those slower than every bound.
    """

    bounds: tuple[float, ...]
    """Upper bounds of the buckets in seconds, ascending (:data:`LATENCY_BOUNDS`)."""
    counts: tuple[int, ...]
    """Operations per bucket (not cumulative); ``len(bounds) + 1`` of them."""
    sum: float
    """Seconds the operations took, all together."""

    @property
    def count(self) -> int:
        """Operations recorded."""
        return sum(self.counts)

    def cumulative(self) -> tuple[int, ...]:
        """Operations at most as slow as each bound, then all of them (Prometheus' ``le``)."""
        total = 0
        out = []
        for n in self.counts:
            total += n
            out.append(total)
        return tuple(out)

    def quantile(self, q: float) -> float:
        """An upper estimate of the ``q`` quantile (0 <= q <= 1) in seconds: the bound of the
        bucket holding it (``inf`` when it is above every bound; 0.0 with nothing recorded)."""
        if isinstance(q, bool) or not isinstance(q, int | float) or not 0.0 <= q <= 1.0:
            raise UsageError(f"q must be a fraction from 0 to 1, got {q!r}")
        total = self.count
        if total == 0:
            return 0.0
        rank = max(1, math.ceil(q * total))
        for bound, seen in zip((*self.bounds, math.inf), self.cumulative(), strict=True):
            if seen >= rank:
                return bound
        return math.inf


class Recorder:
    """One kind of operation's latencies, value bytes and items, recorded from any thread.

    One cell per thread ident (see the module docstring): ``[bucket counts..., seconds, bytes,
    items]``. A thread adds to its own cell only, so the adds need no lock.
    """

    __slots__ = ("_cells",)

    def __init__(self) -> None:
        self._cells: dict[int, list[float]] = {}

    def _cell(self) -> list[float]:
        ident = _get_ident()
        cell = self._cells.get(ident)
        if cell is None:
            cell = self._cells.setdefault(ident, [0] * _WIDTH + [0.0, 0, 0])
        return cell

    def record(self, seconds: float, nbytes: int = 0) -> None:
        """One operation that took ``seconds`` and moved ``nbytes`` bytes of values."""
        cell = self._cells.get(_get_ident()) or self._cell()
        cell[bisect_left(LATENCY_BOUNDS, seconds)] += 1
        cell[_SUM] += seconds
        cell[_BYTES] += nbytes

    def record_many(self, seconds: float, items: int, nbytes: int) -> None:
        """One operation over ``items`` keys or changes (a batch, a ``get_many``)."""
        cell = self._cells.get(_get_ident()) or self._cell()
        cell[bisect_left(LATENCY_BOUNDS, seconds)] += 1
        cell[_SUM] += seconds
        cell[_BYTES] += nbytes
        cell[_ITEMS] += items

    def _totals(self) -> list[float]:
        totals: list[float] = [0] * _WIDTH + [0.0, 0, 0]
        for cell in list(self._cells.values()):
            for i, value in enumerate(cell):
                totals[i] += value
        return totals

    def histogram(self) -> Histogram:
        totals = self._totals()
        return Histogram(
            LATENCY_BOUNDS, tuple(int(n) for n in totals[:_WIDTH]), float(totals[_SUM])
        )

    def figures(self) -> tuple[Histogram, int, int]:
        """The histogram, the value bytes and the items recorded so far."""
        totals = self._totals()
        histogram = Histogram(
            LATENCY_BOUNDS, tuple(int(n) for n in totals[:_WIDTH]), float(totals[_SUM])
        )
        return histogram, int(totals[_BYTES]), int(totals[_ITEMS])


class _Idle(Recorder):
    """The recorder of a handle opened with ``metrics=False``: records nothing."""

    __slots__ = ()

    def record(self, seconds: float, nbytes: int = 0) -> None:
        return None

    def record_many(self, seconds: float, items: int, nbytes: int) -> None:
        return None


class Meter:
    """What one handle (a writer's engine, a Reader) counts; see the module docstring.

    ``enabled`` False (``Options(metrics=False)``): the per-operation recorders do nothing and no
    store requests are counted; the owners' counters are kept anyway (they cost nothing per
    operation).
    """

    __slots__ = (
        "_refusals",
        "conflicts",
        "delete",
        "enabled",
        "folded_bytes",
        "gc_bytes_deleted",
        "gc_deletions",
        "gc_runs",
        "get",
        "get_many",
        "journal_compaction_bytes_read",
        "journal_compaction_bytes_written",
        "journal_compaction_seconds",
        "journal_compactions",
        "journal_reroll_bytes_read",
        "journal_reroll_bytes_written",
        "journal_rerolls",
        "l0_bytes_written",
        "l0_writes",
        "merge_bytes_read",
        "merge_bytes_written",
        "merge_seconds",
        "merges",
        "put",
        "scan",
        "store_counts",
        "write",
        "write_errors",
    )

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        make = Recorder if enabled else _Idle
        self.put = make()
        self.delete = make()
        self.write = make()
        self.get = make()
        self.get_many = make()
        self.scan = make()
        self.store_counts: RequestCounts | None = RequestCounts() if enabled else None
        """Requests counted by the wrapper around the handle's stores (None: not counted)."""
        self._refusals = threading.Lock()
        self.conflicts = 0
        self.write_errors = 0
        # The owners' counters: each has one writer (the actor named), read from anywhere.
        self.l0_writes = 0  # Penciller
        self.l0_bytes_written = 0  # Penciller
        self.merges = 0  # Penciller
        self.merge_bytes_read = 0  # Penciller
        self.merge_bytes_written = 0  # Penciller
        self.merge_seconds = 0.0  # Penciller
        self.journal_compactions = 0  # Inker
        self.journal_compaction_bytes_read = 0  # Inker
        self.journal_compaction_bytes_written = 0  # Inker
        self.journal_compaction_seconds = 0.0  # Inker
        self.journal_rerolls = 0  # Inker
        self.journal_reroll_bytes_read = 0  # Inker
        self.journal_reroll_bytes_written = 0  # Inker
        self.folded_bytes = 0  # Inker: values merges folded to, in written segments
        self.gc_runs = 0  # the garbage collector
        self.gc_deletions = 0  # the garbage collector
        self.gc_bytes_deleted = 0  # the garbage collector

    def refused(self, error: BaseException) -> None:
        """A write raised ``error``: a refused condition counts as a conflict, any other inkpen
        error as a write error (rare: these take a lock)."""
        if not self.enabled or not isinstance(error, InkpenError):
            return
        with self._refusals:
            if isinstance(error, ConflictError):
                self.conflicts += 1
            else:
                self.write_errors += 1

    def metrics(
        self,
        *,
        ledger: LedgerView,
        journal: JournalView,
        tables: TableStore | None,
        backpressure: int = 0,
        throttled_puts: int = 0,
        fenced: bool = False,
    ) -> Metrics:
        """The figures now: this meter's, and those of the views, caches and state given."""
        put, put_bytes, _ = self.put.figures()
        delete, _, _ = self.delete.figures()
        write, write_bytes, write_items = self.write.figures()
        get, get_bytes, _ = self.get.figures()
        get_many, many_bytes, many_keys = self.get_many.figures()
        scan, _, _ = self.scan.figures()
        counted = {} if self.store_counts is None else self.store_counts.snapshot()
        files = ledger.files
        hits, misses = _cache_figures(tables)
        return Metrics(
            enabled=self.enabled,
            puts=put.count,
            deletes=delete.count,
            batches=write.count,
            batch_changes=write_items,
            gets=get.count,
            get_many_calls=get_many.count,
            get_many_keys=many_keys,
            scans=scan.count,
            conflicts=self.conflicts,
            write_errors=self.write_errors,
            value_bytes_written=put_bytes
            + write_bytes
            + (self.folded_bytes if self.enabled else 0),
            value_bytes_read=get_bytes + many_bytes,
            put_seconds=put,
            delete_seconds=delete,
            write_seconds=write,
            get_seconds=get,
            get_many_seconds=get_many,
            scan_seconds=scan,
            store_requests=MappingProxyType(
                {kind: counted.get(f"{kind}s", 0) for kind in STORE_REQUESTS}
            ),
            store_bytes_written=counted.get("bytes_written", 0),
            store_bytes_read=counted.get("bytes_read", 0),
            l0_files=len(files.l0),
            level_files=tuple(files.counts()),
            level_bytes=tuple(files.sizes(lambda h: h.descriptor.size)),
            ledger_mem_entries=ledger.mem_entries(),
            journal_files=len(journal.files),
            journal_bytes=sum(h.descriptor.size for h in journal.files),
            unrolled_segments=len(journal.segments),
            unrolled_bytes=journal.segment_bytes(),
            backpressure=backpressure,
            throttled_puts=throttled_puts,
            cache_hits=hits,
            cache_misses=misses,
            l0_writes=self.l0_writes,
            l0_bytes_written=self.l0_bytes_written,
            merges=self.merges,
            merge_bytes_read=self.merge_bytes_read,
            merge_bytes_written=self.merge_bytes_written,
            merge_seconds=self.merge_seconds,
            journal_compactions=self.journal_compactions,
            journal_compaction_bytes_read=self.journal_compaction_bytes_read,
            journal_compaction_bytes_written=self.journal_compaction_bytes_written,
            journal_compaction_seconds=self.journal_compaction_seconds,
            journal_rerolls=self.journal_rerolls,
            journal_reroll_bytes_read=self.journal_reroll_bytes_read,
            journal_reroll_bytes_written=self.journal_reroll_bytes_written,
            gc_runs=self.gc_runs,
            gc_deletions=self.gc_deletions,
            gc_bytes_deleted=self.gc_bytes_deleted,
            fenced=fenced,
            last_sqn=max(journal.max_sqn(), ledger.persisted_sqn),
        )


IDLE = Meter(enabled=False)
"""A meter that records nothing: the default of handles given none."""


def _cache_figures(
    tables: TableStore | None,
) -> tuple[Mapping[str, int], Mapping[str, int]]:
    caches = (
        (None, None, None)
        if tables is None
        else (tables.block_cache, tables.journal_cache, tables.journal_index_cache)
    )
    hits: dict[str, int] = {}
    misses: dict[str, int] = {}
    for name, cache in zip(CACHES, caches, strict=True):
        stats = None if cache is None else cache.stats()
        hits[name] = 0 if stats is None else stats.hits
        misses[name] = 0 if stats is None else stats.misses
    return MappingProxyType(hits), MappingProxyType(misses)


@dataclass(frozen=True, slots=True)
class Metrics:
    """What ``metrics()`` answers: counters since the handle opened, latency histograms and the
    state now, read without waiting for any actor. A snapshot, not a live view.

    Counts of operations count the calls that returned (a call refused before it did anything,
    say for a bad argument, counts nowhere). With ``Options(metrics=False)`` the operation
    counts, value bytes, histograms and store requests stay 0 (``enabled`` says so); the rest
    is kept anyway. A Reader writes nothing: its write and maintenance figures are 0.
    """

    enabled: bool
    """Whether operations are recorded (the ``metrics`` option)."""

    # -- operations ----------------------------------------------------------------------------
    puts: int
    """``put`` calls acknowledged (durable and visible)."""
    deletes: int
    """``delete`` calls acknowledged."""
    batches: int
    """``write`` (a :class:`~inkpen.Batch`) and ``mput`` calls acknowledged."""
    batch_changes: int
    """Changes in those batches."""
    gets: int
    """``get`` calls answered (the object found or not)."""
    get_many_calls: int
    """``get_many`` calls answered."""
    get_many_keys: int
    """Keys those ``get_many`` calls asked for."""
    scans: int
    """Folds finished (exhausted, closed or collected): ``keys``, ``heads``, ``objects``,
    ``index_query``, ``changes``, ``tictac_tree``, ``buckets`` ..."""
    conflicts: int
    """Conditional writes refused (``ConflictError``): a put, a delete or a whole batch."""
    write_errors: int
    """Writes that raised any other inkpen error (a store outage, a fence, a timeout)."""
    value_bytes_written: int
    """Bytes of values in acknowledged puts and batches; a merge counts the value it folded
    to (not its operand), once the segment holding it is written."""
    value_bytes_read: int
    """Bytes of values answered by ``get`` and ``get_many``."""

    # -- latencies: from the call to its return, in seconds -----------------------------------
    put_seconds: Histogram
    """Acknowledged ``put`` calls."""
    delete_seconds: Histogram
    """Acknowledged ``delete`` calls."""
    write_seconds: Histogram
    """Acknowledged batches (``write``, ``mput``)."""
    get_seconds: Histogram
    """Answered ``get`` calls."""
    get_many_seconds: Histogram
    """Answered ``get_many`` calls (each call once, whatever its keys)."""
    scan_seconds: Histogram
    """Finished folds, from the call that started each to its end."""

    # -- the object store ------------------------------------------------------------------------
    store_requests: Mapping[str, int]
    """Requests made of the store by kind (``put``, ``get``, ``head``, ``list``, ``delete``,
    ``copy``): a ranged get is a ``get``, a listing one ``list`` per page; a store's own retries
    inside one request are not counted. Includes the stores of a clone's parents."""
    store_bytes_written: int
    """Bytes sent to the store by successful puts."""
    store_bytes_read: int
    """Bytes received from the store by successful gets."""

    # -- the ledger ------------------------------------------------------------------------------
    l0_files: int
    """SST files in L0, waiting to be merged down."""
    level_files: tuple[int, ...]
    """SST files per level: ``level_files[0]`` is L0's (as ``stats()["level_files"]``)."""
    level_bytes: tuple[int, ...]
    """Bytes of SST files per level, indexed as ``level_files``."""
    ledger_mem_entries: int
    """Ledger entries held in the Penciller's memory, not yet in an L0 file."""

    # -- the journal -----------------------------------------------------------------------------
    journal_files: int
    """Journal files (rolled segments and compaction output)."""
    journal_bytes: int
    """Bytes of the journal files."""
    unrolled_segments: int
    """Journal segments written and not yet rolled into a journal file."""
    unrolled_bytes: int
    """Bytes of those segments."""

    # -- backpressure ----------------------------------------------------------------------------
    backpressure: int
    """The writer's backpressure now: 0 none, 1 puts are slowed, 2 puts are held."""
    throttled_puts: int
    """Writes that backpressure slowed or held since open."""

    # -- caches ----------------------------------------------------------------------------------
    cache_hits: Mapping[str, int]
    """Lookups found in each cache: ``block`` (SST blocks), ``journal`` (journal file chunks),
    ``journal_index`` (journal files' SQN block indexes). May undercount slightly while
    threads race (the caches count without a lock)."""
    cache_misses: Mapping[str, int]
    """Lookups each cache did not hold (then read from the store), keyed as ``cache_hits``."""

    # -- the owners' work ------------------------------------------------------------------------
    l0_writes: int
    """L0 files written from the Penciller's memory."""
    l0_bytes_written: int
    """Bytes of those L0 files."""
    merges: int
    """Ledger merges committed (moves, which rewrite nothing, are not counted)."""
    merge_bytes_read: int
    """Bytes of the SST files those merges read."""
    merge_bytes_written: int
    """Bytes of the SST files those merges wrote."""
    merge_seconds: float
    """Seconds those merges took to read, merge and write (before their commit)."""
    journal_compactions: int
    """Journal compactions (or head-only trims) committed."""
    journal_compaction_bytes_read: int
    """Bytes of the journal files those compactions replaced."""
    journal_compaction_bytes_written: int
    """Bytes of the journal files they wrote."""
    journal_compaction_seconds: float
    """Seconds those compactions took to score, read and write (before their commit)."""
    journal_rerolls: int
    """Re-rolls committed: journal files rolled before the ledger had persisted their small
    values, written again without those bodies once it had."""
    journal_reroll_bytes_read: int
    """Bytes of the journal files re-rolls replaced."""
    journal_reroll_bytes_written: int
    """Bytes of the journal files they wrote."""
    gc_runs: int
    """GC passes this writer ran (dry runs not counted)."""
    gc_deletions: int
    """Objects those GC passes deleted."""
    gc_bytes_deleted: int
    """Bytes of the objects they deleted."""

    # -- state -----------------------------------------------------------------------------------
    fenced: bool
    """A newer writer has opened the database: this handle writes no more."""
    last_sqn: int
    """The highest SQN the handle can read: the last change acknowledged (a writer) or in
    its checkpoint (a Reader)."""
