"""The Inker's clerk: rolls segments into journal files and compacts journal files.

Both jobs write new journal files through new journal-file clerks, off the Inker's message loop,
then tell the Inker, which commits the manifest change and publishes the new view.

**Rolling.** The Inker's active journal is a run of small segments (one per group commit). When
their bytes or count pass ``roll_bytes`` / ``roll_segments`` the Inker sends them here
(:class:`_RollSegments`); they are rewritten, in SQN order, as journal files of about
``journal_file_target_bytes`` (:class:`Rolled`), except that a segment of at least
``roll_link_bytes`` is linked as a journal file of its own, not rewritten
(:func:`roll_segments`). Rolling keeps the number of journal objects small and lets GC remove
the segments.

**Compaction** (:func:`compact`, Leveled's Inker's clerk). With a snapshot taken when the
request was made (its ledger view judges the entries; it is registered with the Inker too, before
any file is chosen, so no journal file dropped after that moment is deleted, by its clerk or by
GC, until the compaction has read it):

1. score every journal file by sampling ``compaction_sample_size`` of its records: the score is
   the percentage of sampled bytes the rules of :mod:`inkpen.actors.journal.retention` would keep;
2. pick the best contiguous run of files (Leveled's single-file and max-run thresholds,
   :func:`~inkpen.actors.journal.retention.best_run`); if no run scores above zero, stop;
3. rewrite the run's entries through the same rules (per tag: ``retain`` keeps key changes,
   ``recovr`` drops them) into new journal files;
4. tell the Inker (:class:`CompactionDone`); it commits the swap in one manifest change and sets
   the replaced files' clerks to delete_pending. A chosen file that a newer commit (a re-roll,
   another compaction) replaced meanwhile ends the round as ``replaced_meanwhile`` in the
   report, with nothing committed.

In a head-only store compaction is **trimming** instead (Leveled's ``book_trimjournal``): the
journal files whose every entry the ledger has persisted (``max_sqn <= persisted_sqn`` of the
manifest) are dropped in one manifest change and nothing is written.
"""

from __future__ import annotations

import bisect
import random
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import pykka

from inkpen.actors.base import ActorGone, InkpenActor, handles, send, stop
from inkpen.actors.files.start import link_new_journal, write_new_journal
from inkpen.actors.journal.retention import Judgement, LedgerBodies, file_chunks
from inkpen.actors.kernel import compute
from inkpen.actors.kernel.context import EngineContext
from inkpen.actors.kernel.read_ahead import journals_ahead
from inkpen.actors.kernel.views import JournalHandle, SegmentTable, segment_entries
from inkpen.errors import StoreError
from inkpen.formats.journal import JournalEntry, JournalReader
from inkpen.formats.keys import LedgerValue
from inkpen.logs import get_logger
from inkpen.objectstore.base import is_local
from inkpen.objectstore.parallel import concurrency

log = get_logger("inkpen.inker")


class LedgerSnapshotLike(Protocol):
    """What compaction needs of its snapshot: ledger lookups, its highest SQN, its release. The
    snapshot also holds a registration with the Inker, taken before the compaction chooses its
    files, which keeps every journal file a later commit drops until ``release``."""

    max_sqn: int

    def get(self, key: bytes) -> LedgerValue | None: ...

    def release(self) -> None: ...


@dataclass(frozen=True, slots=True)
class _RollSegments:
    """Inker to clerk: write these segments' entries as journal files; answer :class:`Rolled`."""

    segments: tuple[SegmentTable, ...]
    reply_to: pykka.ActorRef[Any]
    bodies: LedgerBodies | None


def roll(
    clerk: pykka.ActorRef[Any],
    segments: tuple[SegmentTable, ...],
    reply_to: pykka.ActorRef[Any],
    bodies: LedgerBodies | None = None,
) -> None:
    """Tell the clerk to write ``segments``' entries as journal files, without the bodies
    ``bodies`` covers; it answers ``reply_to`` with :class:`Rolled` or :class:`RollFailed`."""
    send(clerk, _RollSegments(segments, reply_to, bodies))


@dataclass(frozen=True, slots=True)
class Rolled:
    """Clerk to Inker: the segments now live in these (open) journal files."""

    segment_ids: tuple[int, ...]
    handles: tuple[JournalHandle, ...]
    bodies_through: int = 0
    """The highest SQN written without its body (0: none): the manifest the roll commits onto
    must have persisted the ledger that far, and hold no live feed cursor below it."""
    waiting: tuple[tuple[str, int], ...] = ()
    """Files written with bodies their ledger entries hold but the ledger had not persisted
    yet, each with the highest such SQN: once the ledger persists it, the file is re-rolled."""


@dataclass(frozen=True, slots=True)
class _Reroll:
    """Inker to clerk: write these files again without the bodies ``bodies`` covers; answer
    :class:`Rerolled`."""

    files: tuple[JournalHandle, ...]
    bodies: LedgerBodies
    reply_to: pykka.ActorRef[Any]


def reroll(
    clerk: pykka.ActorRef[Any],
    files: tuple[JournalHandle, ...],
    bodies: LedgerBodies,
    reply_to: pykka.ActorRef[Any],
) -> None:
    """Tell the clerk to write ``files`` again without the bodies ``bodies`` covers (the ledger
    has persisted them since the files were rolled); it answers ``reply_to`` with
    :class:`Rerolled`."""
    send(clerk, _Reroll(files, bodies, reply_to))


@dataclass(frozen=True, slots=True)
class Rerolled:
    """Clerk to Inker: ``replaced`` files are written again as ``handles``, the bodies up to
    ``bodies_through`` left out (``error``: the work failed, nothing is written)."""

    replaced: tuple[str, ...]
    handles: tuple[JournalHandle, ...]
    bodies_through: int
    waiting: tuple[tuple[str, int], ...] = ()
    bytes_before: int = 0
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class RollFailed:
    error: BaseException


CompactionOutcome = Literal["compacted", "replaced_meanwhile", "nothing_to_do"]


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What one compaction attempt did."""

    scores: dict[str, float] = field(default_factory=dict)
    compacted: tuple[str, ...] = ()
    written: tuple[str, ...] = ()
    bytes_before: int = 0
    bytes_after: int = 0
    entries_kept: int = 0
    entries_reduced: int = 0
    entries_dropped: int = 0
    manifest_id: int | None = None
    kept_above: int | None = None
    """Every entry above this SQN was kept (the ledger snapshot's SQN, or a lower feed cursor)."""
    replaced_meanwhile: tuple[str, ...] = ()
    """Files this compaction chose that a newer commit (a re-roll, another compaction) replaced
    before it could commit: then nothing was committed (``compacted`` and ``written`` are
    empty, the files it wrote are left to GC) and the next compaction judges the newer files."""

    @property
    def outcome(self) -> CompactionOutcome:
        """``"compacted"`` (committed), ``"replaced_meanwhile"`` (see
        :attr:`replaced_meanwhile`) or ``"nothing_to_do"`` (no run scored above zero)."""
        if self.compacted:
            return "compacted"
        return "replaced_meanwhile" if self.replaced_meanwhile else "nothing_to_do"


@dataclass(frozen=True, slots=True)
class _Compact:
    """To the clerk: compact the journal against ``snapshot``; the outcome goes to ``result``."""

    snapshot: LedgerSnapshotLike
    result: Future[CompactionReport]


@dataclass(frozen=True, slots=True)
class CompactionDone:
    """Clerk to Inker: swap ``replaced`` files for ``handles`` and then resolve ``result``."""

    replaced: tuple[str, ...]
    handles: tuple[JournalHandle, ...]
    report: CompactionReport
    result: Future[CompactionReport]
    seconds: float = 0.0
    """How long the compaction took to score, read and write (before its commit)."""


def roll_segments(
    ctx: EngineContext,
    owner: pykka.ActorRef[Any],
    segments: Sequence[SegmentTable],
    target_bytes: int,
    bodies: LedgerBodies | None = None,
) -> tuple[tuple[JournalHandle, ...], int, tuple[tuple[str, int], ...]]:
    """Roll segments (id order) into journal files; answers the files in SQN order, the
    highest SQN written without its body (0: none), and the files that keep bodies the ledger
    has not persisted yet (:attr:`Rolled.waiting`).

    Runs of small segments are rewritten together as files of about ``target_bytes``
    (:func:`write_journal_files`), each put that ``bodies`` covers without its body (its ledger
    entry holds the value, and the ledger has persisted it). A segment of at least
    ``roll_link_bytes`` holding no such put is linked instead: a segment and a journal file
    share one format, so the segment object itself becomes a new journal file
    (:meth:`~inkpen.manifest.table_store.TableStore.link_segment`: a hard link or a server-side
    copy under a fresh file name) and its bytes are written once. The files keep disjoint SQN
    ranges in SQN order, as a roll's always do.
    """
    written = _Written(ctx, owner, target_bytes, bodies)
    try:
        run: list[SegmentTable] = []
        for segment in segments:
            if (
                segment.size < ctx.options.roll_link_bytes
                or not segment.entries
                or (bodies is not None and any(map(bodies.covers, segment.entries.values())))
            ):
                run.append(segment)
                continue
            if run:
                written.rewrite(segment_entries(run))
                run = []
            written.link(segment)
        if run:
            written.rewrite(segment_entries(run))
    except Exception:
        written.abandon()
        raise
    return written.result()


class _Written:
    """The files one roll or re-roll writes: entries rewritten without the bodies ``bodies``
    covers, segments linked whole; which SQN it left out last, and which files keep bodies the
    ledger will hold once it persists them (with the highest such SQN)."""

    def __init__(
        self,
        ctx: EngineContext,
        owner: pykka.ActorRef[Any],
        target_bytes: int,
        bodies: LedgerBodies | None,
    ) -> None:
        self.ctx = ctx
        self.owner = owner
        self.target_bytes = target_bytes
        self.bodies = bodies
        self.handles: list[JournalHandle] = []
        self.left_out = [0]
        self.waiting: list[tuple[str, int]] = []

    def rewrite(self, entries: Iterable[JournalEntry]) -> None:
        waits: list[int] = []
        if self.bodies is not None:
            entries = self.bodies.apply(entries, self.left_out, waits)
        for handle in write_journal_files(self.ctx, self.owner, entries, self.target_bytes):
            self.handles.append(handle)
            self._note(handle, waits)

    def link(self, segment: SegmentTable) -> None:
        handle = link_new_journal(self.ctx, self.owner, segment)
        self.handles.append(handle)
        bodies = self.bodies
        if bodies is not None:
            self._note(handle, sorted(s for s, e in segment.entries.items() if bodies.waits(e)))

    def _note(self, handle: JournalHandle, waits: list[int]) -> None:
        """Record ``handle`` as waiting if one of ``waits`` (ascending SQNs) is in its range."""
        descriptor = handle.descriptor
        i = bisect.bisect_right(waits, descriptor.max_sqn)
        if i and waits[i - 1] >= descriptor.min_sqn:
            self.waiting.append((handle.name, waits[i - 1]))

    def abandon(self) -> None:
        for handle in self.handles:
            stop(handle.clerk)

    def result(self) -> tuple[tuple[JournalHandle, ...], int, tuple[tuple[str, int], ...]]:
        return tuple(self.handles), self.left_out[0], tuple(self.waiting)


def write_journal_files(
    ctx: EngineContext,
    owner: pykka.ActorRef[Any],
    entries: Iterable[JournalEntry],
    target_bytes: int,
) -> tuple[JournalHandle, ...]:
    """Write entries (SQN order) as journal files of about ``target_bytes``, each via its clerk."""
    handles: list[JournalHandle] = []
    try:
        for chunk in file_chunks(entries, target_bytes):
            handles.append(_write_file(ctx, owner, chunk))
    except Exception:
        for handle in handles:
            stop(handle.clerk)
        raise
    return tuple(handles)


def _write_file(
    ctx: EngineContext, owner: pykka.ActorRef[Any], entries: list[JournalEntry]
) -> JournalHandle:
    epoch = ctx.keeper.epoch
    data = compute.run(
        ctx.options.compute_workers, compute.encode_journal, [tuple(e) for e in entries], epoch
    )
    return write_new_journal(ctx, owner, tuple(entries), data, epoch)


def reroll_files(
    ctx: EngineContext,
    owner: pykka.ActorRef[Any],
    files: Sequence[JournalHandle],
    bodies: LedgerBodies,
) -> Rerolled:
    """Write ``files`` (SQN order) again without the bodies ``bodies`` covers, as a roll would
    have written them had the ledger persisted those values then."""
    written = _Written(ctx, owner, ctx.options.journal_file_target_bytes, bodies)
    try:
        for reader in _readers(ctx, files):
            written.rewrite(reader.iter_entries())
    except Exception as exc:
        written.abandon()
        log.warning("journal.reroll_failed", error=str(exc))
        return Rerolled((), (), 0, error=exc)
    handles, through, waiting = written.result()
    return Rerolled(
        tuple(h.name for h in files),
        handles,
        through,
        waiting,
        bytes_before=sum(h.descriptor.size for h in files),
    )


def _readers(ctx: EngineContext, files: Sequence[JournalHandle]) -> Iterable[JournalReader]:
    """Readers of ``files`` to read from start to end, in order: their own, or, where reads
    are round trips, readers over each file read whole while the next ones are fetched
    (:func:`~inkpen.actors.kernel.read_ahead.journals_ahead`)."""
    if is_local(ctx.store):
        return (h.reader for h in files)
    return journals_ahead(ctx.tables, [h.descriptor for h in files])


class InkerClerk(InkpenActor):
    """Rolls and compacts for the Inker. Answers :class:`_RollSegments` and :func:`compact`."""

    def __init__(self, ctx: EngineContext, inker: pykka.ActorRef[Any]) -> None:
        super().__init__()
        self.ctx = ctx
        self.inker = inker

    @handles(_RollSegments)
    def _roll(self, message: _RollSegments) -> None:
        started = time.monotonic()
        try:
            handles, bodies_through, waiting = roll_segments(
                self.ctx,
                self.inker,
                message.segments,
                self.ctx.options.journal_file_target_bytes,
                message.bodies,
            )
        except Exception as exc:
            send(message.reply_to, RollFailed(exc))
            return
        log.debug("journal.roll_written", ms=round((time.monotonic() - started) * 1000, 2))
        ids = tuple(s.segment_id for s in message.segments)
        send(message.reply_to, Rolled(ids, handles, bodies_through, waiting))

    @handles(_Reroll)
    def _reroll(self, message: _Reroll) -> None:
        send(message.reply_to, reroll_files(self.ctx, self.inker, message.files, message.bodies))

    @handles(_Compact)
    def _compact(self, message: _Compact) -> None:
        started = time.perf_counter()
        try:
            outcome = self._run(message.snapshot)
        except Exception as exc:
            message.snapshot.release()
            message.result.set_exception(exc)
            return
        message.snapshot.release()
        report, replaced, handles = outcome
        if not replaced:
            message.result.set_result(report)
            return
        seconds = time.perf_counter() - started
        if not send(self.inker, CompactionDone(replaced, handles, report, message.result, seconds)):
            for handle in handles:
                stop(handle.clerk)
            message.result.set_exception(ActorGone("the Inker has stopped"))

    def _run(
        self, snapshot: LedgerSnapshotLike
    ) -> tuple[CompactionReport, tuple[str, ...], tuple[JournalHandle, ...]]:
        options = self.ctx.options
        if options.head_only is not None:
            return self._trim()
        max_sqn = self._feed_floor(snapshot.max_sqn)
        # The snapshot's registration with the Inker predates this view: a file in it that a
        # re-roll or compaction drops meanwhile stays on the store until the snapshot is
        # released (its clerk is told to wait, the writer checkpoint keeps it from GC).
        files = [h for h in self.ctx.board.journal.files if h.descriptor.min_sqn <= max_sqn]
        judgement = Judgement(
            snapshot.get,
            options,
            max_sqn=max_sqn,
            now_ms=self.ctx.now_ms(),
            trim_through=self.ctx.keeper.latest.manifest.ledger.persisted_sqn,
        )
        rng = random.Random()
        limit = concurrency(self.ctx.store)
        found = judgement.scores([h.reader for h in files], rng, limit=limit)
        scores = {h.name: score for h, score in zip(files, found, strict=True)}
        run = judgement.choose([scores[h.name] for h in files])
        log.debug("journal.compaction_scored", files=len(files), run=run)
        if run is None:
            return CompactionReport(scores=scores), (), ()
        chosen = files[run[0] : run[0] + run[1]]
        counts = judgement.counts
        survivors = judgement.survivors(_readers(self.ctx, chosen))
        handles = write_journal_files(
            self.ctx, self.inker, survivors, options.journal_file_target_bytes
        )
        report = CompactionReport(
            scores=scores,
            compacted=tuple(h.name for h in chosen),
            written=tuple(h.name for h in handles),
            bytes_before=sum(h.descriptor.size for h in chosen),
            bytes_after=sum(h.descriptor.size for h in handles),
            entries_kept=counts["kept"],
            entries_reduced=counts["reduced"],
            entries_dropped=counts["dropped"],
            kept_above=max_sqn,
        )
        return report, tuple(h.name for h in chosen), handles

    def _trim(self) -> tuple[CompactionReport, tuple[str, ...], tuple[JournalHandle, ...]]:
        """A head-only store's compaction (Leveled's ``book_trimjournal``): every journal file
        whose entries are all persisted in the ledger's SSTs is dropped, nothing is written.

        Reads go to the ledger alone, and recovery replays only the journal above the ledger's
        persisted SQN (as committed in the manifest), so those files serve nothing more.
        """
        persisted = self._feed_floor(self.ctx.keeper.latest.manifest.ledger.persisted_sqn)
        trimmed = [h for h in self.ctx.board.journal.files if h.descriptor.max_sqn <= persisted]
        log.info("journal.trim_planned", files=len(trimmed), persisted_sqn=persisted)
        report = CompactionReport(
            compacted=tuple(h.name for h in trimmed),
            bytes_before=sum(h.descriptor.size for h in trimmed),
            entries_dropped=sum(h.descriptor.entry_count for h in trimmed),
            kept_above=persisted,
        )
        return report, report.compacted, ()

    def _feed_floor(self, snapshot_sqn: int) -> int:
        """Entries above this SQN are kept: the snapshot's SQN, or the lowest live feed cursor
        of the latest manifest if lower (re-read, so cursors other processes made count)."""
        keeper = self.ctx.keeper
        try:
            latest = keeper.refresh()
        except StoreError as exc:  # the commit checks the cursors again
            log.warning("journal.compaction_refresh_failed", error=str(exc))
            latest = keeper.latest
        floor = latest.manifest.feed_floor(time.time())
        return snapshot_sqn if floor is None else min(snapshot_sqn, floor)


def compact(
    clerk: pykka.ActorRef[InkerClerk],
    snapshot: LedgerSnapshotLike,
    result: Future[CompactionReport],
) -> bool:
    """Hand the clerk a journal compaction against ``snapshot`` (a tell); the report, or the
    error, goes to ``result``. False if the clerk has stopped."""
    return send(clerk, _Compact(snapshot, result))
