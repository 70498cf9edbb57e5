"""Following a writer from another process: views that move forward on their own.

A following Reader (``inkpen.open_reader(url, follow=True)``) starts like any Reader, from a lease
checkpoint on the latest manifest, and then keeps up with the writer. Every ``refresh_interval``
its :class:`Follower` thread does one refresh: it probes the segments (2), then reads the
manifest (1) and, after a re-pin, probes again, so that a segment rolled and collected before the
probe reached it is found in the journal file the newer manifest names. Every write acknowledged
before a refresh begins is readable when it ends.

1. **Manifest.** Ask for the latest manifest id (one LIST of the ids above the last one seen).
   When the latest manifest names other files than the pinned one (``ledger``,
   ``journal.files`` or ``journal.last_rolled_segment`` differ: new L0 files, merges, rolls,
   journal compactions), **re-pin**: establish a new lease checkpoint on the latest state, build
   its views (reusing every SST and journal file reader already open and every segment already
   read), publish them, then close the old lease. Manifests that changed only checkpoints or
   cursors (the follower's own lease refreshes among them) cost nothing more.
2. **Segments.** Probe the next segment slots, from the first id not yet examined: GET
   ``journal/<id>.jnl`` until one is absent (SlateDB readers poll the WAL the same way). A
   segment with entries whose epoch is not below the highest seen is applied: its entries go
   into a memory table of the ledger view and into the journal view; a fence (no entries)
   raises the epoch; a lower epoch is rejected (the reader rule). Every acknowledged write is in
   a segment before its ``put`` returns, so a follower reads it within about one interval.

Views are immutable and swapped whole under a lock, and :meth:`Follower.wait_for_change` wakes
tails (:meth:`Follower.add_listener` tells those that wait in an event loop, without a thread).
What protects what a follower reads: the current lease pins the manifest its files come from, and
segments above that manifest's window are read as soon as they appear. A segment rolled and
collected before the probe reached it shows as an absent slot; the probe stops there, and the
manifest read after it already names the roll (GC deletes only segments the latest manifest has
rolled), so the same refresh re-pins onto the journal file that holds it. A read through views
taken before a re-pin may find a file the old lease no longer protects gone: the Reader then
re-resolves through the current views (as the writer's read path does), never reporting it as
corruption. An idle follower makes two store requests per interval (the manifest LIST and the
probe) plus its lease's refreshes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

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
from inkpen.actors.read.checkpoint_views import OPENERS, ManifestViews
from inkpen.errors import InkpenError
from inkpen.logs import get_logger
from inkpen.manifest.checkpoints import CheckpointLease
from inkpen.manifest.clones import StoreResolver
from inkpen.manifest.fencing import EpochRule
from inkpen.manifest.levels import Levels
from inkpen.manifest.model import JournalFileDescriptor, Manifest, SstDescriptor
from inkpen.manifest.store import ManifestStore
from inkpen.manifest.table_store import TableStore
from inkpen.options import Options

log = get_logger("inkpen.follower")

MAX_PROBE = 256
"""Segments read by one refresh at most (the rest at the next one)."""
MAX_MEM_TABLES = 8
"""Memory tables of probed segments kept apart before they are merged into one."""


def names_other_files(latest: Manifest, pinned: Manifest) -> bool:
    """True when ``latest`` names files ``pinned`` does not (or the other way round)."""
    return (
        latest.ledger != pinned.ledger
        or latest.journal.files != pinned.journal.files
        or latest.journal.last_rolled_segment != pinned.journal.last_rolled_segment
    )


class Follower:
    """The moving state of a following Reader (see the module docstring)."""

    def __init__(
        self,
        *,
        manifests: ManifestStore,
        resolver: StoreResolver,
        options: Options,
        lease: CheckpointLease,
        views: ManifestViews,
        interval: float,
        tables: TableStore | None = None,
    ) -> None:
        self._manifests = manifests
        self._resolver = resolver
        self._options = options
        self._tables = TableStore.for_options(resolver, options) if tables is None else tables
        self._interval = interval
        self._lease = lease
        self._pinned = lease.manifest
        self._views = views
        self._segments: dict[int, SegmentTable] = {s.segment_id: s for s in views.journal.segments}
        self._next_probe = lease.manifest.journal.next_segment
        self._epochs = EpochRule()
        self._version = 0
        self._refresh_lock = threading.Lock()
        self._changed = threading.Condition()
        self._listeners: list[Callable[[], object]] = []
        self._stop = threading.Event()
        self.refreshes = 0
        self.repins = 0
        self._thread = threading.Thread(target=self._run, name="inkpen-follower", daemon=True)
        self._thread.start()

    # -- what readers see ---------------------------------------------------------------------

    @property
    def views(self) -> ManifestViews:
        return self._views

    @property
    def lease(self) -> CheckpointLease:
        return self._lease

    @property
    def version(self) -> int:
        """Goes up whenever new views are published."""
        return self._version

    def wait_for_change(self, version: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for views newer than ``version``; True if they came."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._version == version and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return self._version != version

    @property
    def stopped(self) -> bool:
        """True once :meth:`close` began: no views will change any more."""
        return self._stop.is_set()

    def add_listener(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback()`` (in the follower's thread, quickly) whenever new views are
        published and when the follower stops; answers a function that removes it. Lets a waiter
        that must not block a thread (an asyncio tail) learn what :meth:`wait_for_change` learns.
        """
        with self._changed:
            self._listeners.append(callback)

        def remove() -> None:
            with self._changed:
                if callback in self._listeners:
                    self._listeners.remove(callback)

        return remove

    def _notify(self) -> None:
        """Wake the threads in :meth:`wait_for_change` and call the listeners."""
        with self._changed:
            self._changed.notify_all()
            listeners = list(self._listeners)
        for callback in listeners:
            try:
                callback()
            except Exception as exc:  # one listener's failure must not keep news from the rest
                log.error("follower.listener_failed", url=self._manifests.url, error=repr(exc))

    # -- refreshing -----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.refresh()
            except InkpenError as exc:
                log.warning("follower.refresh_failed", url=self._manifests.url, error=str(exc))
            except Exception as exc:  # keep following: the next interval tries again
                log.error("follower.refresh_failed", url=self._manifests.url, error=repr(exc))

    def refresh(self) -> bool:
        """One refresh now (see the module docstring); True if new views were published."""
        with self._refresh_lock:
            if self._stop.is_set():
                return False
            self.refreshes += 1
            # Probe first, then the manifest: a slot found absent because its segment was
            # rolled and collected meanwhile shows in the manifest read after it, and the re-pin
            # (and a second probe from its window) picks up what it held. So every write
            # acknowledged before a refresh begins is readable when it ends.
            changed = self._probe()
            latest = self._manifests.latest()
            if latest is not None and names_other_files(latest.manifest, self._pinned):
                self._repin()
                self._probe()
                changed = True
            if changed:
                with self._changed:
                    self._version += 1
                self._notify()
            return changed

    def _repin(self) -> None:
        new_lease = CheckpointLease.establish(
            self._manifests,
            lifetime=self._options.checkpoint_lifetime,
            metadata={"follower": "1"},
            allow_missing_segments=self._options.allow_missing_segments,
        )
        try:
            views = self._build(new_lease.manifest, new_lease.manifest_id)
        except BaseException:
            new_lease.close()
            raise
        old, self._lease, self._pinned = self._lease, new_lease, new_lease.manifest
        self._views = views
        self.repins += 1
        log.debug("follower.repinned", url=self._manifests.url, manifest=new_lease.manifest_id)
        old.close()

    def _build(self, manifest: Manifest, manifest_id: int) -> ManifestViews:
        """Views of ``manifest``, reusing open file readers and segments already read."""
        old_ledger, old_journal = self._views.ledger, self._views.journal
        ssts = {(h.descriptor.root, h.descriptor.name): h for h in old_ledger.handles()}
        journals = {(h.descriptor.root, h.descriptor.name): h for h in old_journal.files}

        def sst(d: SstDescriptor) -> SstHandle:
            found = ssts.get((d.root, d.name))
            return found if found is not None else SstHandle(d, self._tables.open_sst(d))

        def jnl(d: JournalFileDescriptor) -> JournalHandle:
            found = journals.get((d.root, d.name))
            return found if found is not None else JournalHandle(d, self._tables.open_journal(d))

        with ThreadPoolExecutor(max_workers=OPENERS) as pool:
            levels = [list(pool.map(sst, level)) for level in manifest.ledger.levels]
            files = list(pool.map(jnl, manifest.journal.files))
        # Segments the new manifest has rolled are in its journal files now; those of its window
        # not probed yet are probed next (the new lease protects them).
        rolled = manifest.journal.last_rolled_segment
        for i in [i for i in self._segments if i <= rolled]:
            del self._segments[i]
        self._next_probe = max(self._next_probe, rolled + 1)
        segments = [self._segments[i] for i in sorted(self._segments)]
        persisted = manifest.ledger.persisted_sqn
        tail = MemTable.of([e for entries in replay(files, segments, persisted) for e in entries])
        ledger = LedgerView(
            manifest_id=manifest_id,
            mem=(tail,) if len(tail) else (),
            files=Levels(tuple(tuple(level) for level in levels)),
            persisted_sqn=persisted,
        )
        return ManifestViews(CacheView(), ledger, JournalView.of(files, segments, manifest_id))

    def _probe(self) -> bool:
        """Read the next segment slots until one is absent; True if any entries were added."""
        added: list[SegmentTable] = []
        for _ in range(MAX_PROBE):
            segment_id = self._next_probe
            segment = self._tables.read_segment(segment_id)
            if segment is None:
                break
            self._next_probe = segment_id + 1
            if not self._epochs.accepts(segment.writer_epoch):
                log.warning(
                    "follower.segment_rejected",
                    segment=segment_id,
                    epoch=segment.writer_epoch,
                    newer=self._epochs.highest,
                )
                continue
            entries = segment.entries
            if not entries:
                continue
            table = SegmentTable(
                segment_id,
                entries[0].sqn,
                entries[-1].sqn,
                {e.sqn: e for e in entries},
                segment.size,
            )
            if table.last_sqn <= self._views.journal.max_sqn():
                continue  # already held (read by a re-pin's window)
            self._segments[segment_id] = table
            added.append(table)
        if not added:
            return False
        views = self._views
        journal = views.journal
        mem = list(views.ledger.mem)
        for table in added:
            journal = journal.with_segment(table)
            pairs = [e for entries in replay([], [table], 0) for e in entries]
            mem.insert(0, MemTable.of(pairs))
        if len(mem) > MAX_MEM_TABLES:
            mem = [MemTable.merged(mem)]
        ledger = views.ledger
        ledger = LedgerView(
            manifest_id=ledger.manifest_id,
            mem=tuple(mem),
            files=ledger.files,
            persisted_sqn=ledger.persisted_sqn,
        )
        self._views = ManifestViews(views.cache, ledger, journal)
        return True

    def close(self, on_lease: Callable[[CheckpointLease], None] | None = None) -> None:
        """Stop following and release the current lease. Idempotent."""
        self._stop.set()
        self._notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=max(10.0, self._interval * 2))
        with self._refresh_lock:
            self._lease.close()
