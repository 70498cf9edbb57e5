"""Views of one manifest for read-only clients (Readers, Spark tasks), built without actors.

A read-only client writes nothing and owns nothing, so it needs no actor system: it builds the same
immutable views a writer publishes (:mod:`inkpen.actors.kernel.views`) straight from one manifest —
typically a checkpoint's — and reads through the ordinary read path. Building them is what a
writer's start-up does, minus the claim:

1. open an SST reader per ledger file and a journal reader per journal file, in parallel, through
   a table store (:mod:`inkpen.manifest.table_store`: each from the store that holds it, a clone
   reading inherited files from its parent's root);
2. read the manifest's unrolled segments ``(last_rolled_segment, next_segment)``, keeping only
   those the reader rule accepts (no segment an older epoch wrote after a newer one; the table
   store's :meth:`~inkpen.manifest.table_store.TableStore.read_segments`); one missing there is
   damage, a :class:`~inkpen.errors.CorruptionError` naming it, unless the option
   ``allow_missing_segments`` lets the client read what is left (logged);
3. replay every journal entry above the ledger's persisted SQN into one memory table
   (:mod:`inkpen.actors.journal.replay`).

The checkpoint the client holds keeps every one of those objects from GC while it reads.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from inkpen.actors.journal.replay import replay
from inkpen.actors.kernel.views import (
    CacheView,
    JournalHandle,
    JournalView,
    LedgerView,
    MemTable,
    SegmentTable,
    SstHandle,
)
from inkpen.manifest.clones import StoreResolver
from inkpen.manifest.fencing import scan_segments, settle_missing
from inkpen.manifest.levels import Levels
from inkpen.manifest.model import Manifest
from inkpen.manifest.table_store import TableStore
from inkpen.options import Options

OPENERS = 8


@dataclass(frozen=True, slots=True)
class ManifestViews:
    """The three views of one manifest, ready for :mod:`inkpen.actors.read.path`."""

    cache: CacheView
    ledger: LedgerView
    journal: JournalView

    def views(self) -> tuple[CacheView, LedgerView, JournalView]:
        return self.cache, self.ledger, self.journal


def load_views(
    resolver: StoreResolver,
    manifest: Manifest,
    manifest_id: int,
    options: Options,
    *,
    tables: TableStore | None = None,
) -> ManifestViews:
    """Open every file ``manifest`` names and replay its journal tail (see module docstring),
    through ``tables`` (by default a new table store with the caches ``options`` size)."""
    if tables is None:
        tables = TableStore.for_options(resolver, options)
    journal_files = manifest.journal.files
    with ThreadPoolExecutor(max_workers=OPENERS) as pool:
        levels = [
            [SstHandle(d, r) for d, r in zip(level, pool.map(tables.open_sst, level), strict=True)]
            for level in manifest.ledger.levels
        ]
        readers = pool.map(tables.open_journal, journal_files)
        files = [JournalHandle(d, r) for d, r in zip(journal_files, readers, strict=True)]
    segments = _read_segments(tables, manifest, options.allow_missing_segments)
    persisted = manifest.ledger.persisted_sqn
    tail = MemTable.of([e for entries in replay(files, segments, persisted) for e in entries])
    ledger = LedgerView(
        manifest_id=manifest_id,
        mem=(tail,) if len(tail) else (),
        files=Levels(tuple(tuple(level) for level in levels)),
        persisted_sqn=persisted,
    )
    journal = JournalView.of(files, segments, manifest_id)
    return ManifestViews(CacheView(), ledger, journal)


def _read_segments(
    tables: TableStore, manifest: Manifest, allow_missing: bool
) -> list[SegmentTable]:
    """The accepted segments of the manifest's window ``(last_rolled_segment, next_segment)``;
    one missing there is settled first (an error, or logged when allowed)."""
    store = tables.store
    state = manifest.journal
    scan = scan_segments(store, state.last_rolled_segment, next_segment=state.next_segment)
    window = replace(scan, missing=tuple(i for i in scan.missing if i < state.next_segment))
    settle_missing(store.url, window, allow=allow_missing)
    ids = [r.id for r in scan.refs if r.id < state.next_segment]
    segments = tables.read_segments(ids, allow_missing=allow_missing)
    return [SegmentTable.read_back(s) for s in segments]
