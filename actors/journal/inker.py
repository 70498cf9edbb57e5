"""The Inker: owner of the journal.

The Inker assigns sequence numbers (SQNs), writes the journal, and owns the journal half of the
manifest. Its pieces:

- the **intake** (:mod:`inkpen.actors.journal.intake`): puts from any thread gather into a batch;
  the Inker writes each batch as one **journal segment** (``journal/<id>.jnl``, create-if-absent at
  the next contiguous id, stamped with the writer epoch). A put's caller is released only after its
  segment is durably written and the Bookie has cached its ledger entries. ``flush_policy``
  decides when a batch is written: ``idle`` as soon as the Inker is free (a batch fills while the
  previous segment is being written: group commit), ``interval`` at most one segment per
  ``flush_interval`` (a batch that opens sooner after the last write waits for the rest of the
  interval; one that opens later is written at once); a batch of ``max_batch_bytes`` is written
  at once either way.
- the **active journal**: written segments stay in memory (published in the Inker's view, so
  gets find their values without a store read) until the Inker's clerk **rolls** them into a
  journal file and the manifest records the roll (``last_rolled_segment``).
- **journal files** (``journal/compacted/<id>.jnl``), one clerk each, serving value reads.
- the **snapshot register** for journal clones, and the delete confirmations of its files.

Segments are written through the writer's table store
(:meth:`~inkpen.manifest.table_store.TableStore.write_segment`), which owns the retries and the
read back; the Inker only acts on the outcome. A segment write that finds its slot taken by a
newer epoch means a newer writer has opened the database: the Inker is fenced, fails the batch
and every later one with ``FencedError``, and writes nothing more. A write whose outcome is
unknown is retried with the same bytes into the same slot (the bytes decide whether an earlier
attempt landed). If the outcome stays unknown (the store is down, or its answers are lost), the
batch fails with an indefinite ``StoreError`` and the segment stays **unsettled**: the Inker
writes nothing else (a later segment must not leave a gap that would hide it) and **settles** it
once the store answers, by writing the same bytes into the same slot again (create-if-absent,
then a read back: its own bytes there mean it landed). It tries on every batch that comes
meanwhile (each of which fails definitely while the store still does not answer) and on a timer,
every :data:`SETTLE_RETRY_MAX` seconds at most. Once settled, the segment is installed as any
written one (its writes become visible: they landed) and writing goes on. Only a fence, or a slot
holding other bytes of this writer's epoch (a loss that nothing can repair), stops the Inker for
good: then the handle must be reopened.

Other modules ask the Inker through the functions at the end of this module (``sync``,
``roll_now``, ``take_checkpoint``, ``register``, ``release``, ``replay``, ``stats``, ...); its
messages are private. It also answers ``Rolled``/``RollFailed``/``CompactionDone`` (from its
clerk) and ``ConfirmDelete``/``FileDeleted`` (from file clerks).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict

import pykka

from inkpen.actors.base import ActorGone, call, handles, send, stop
from inkpen.actors.files.registry import FileOwner
from inkpen.actors.files.start import open_files
from inkpen.actors.journal import compactor_files
from inkpen.actors.journal import replay as journal_replay
from inkpen.actors.journal.changes import PendingChange, value_in_ledger
from inkpen.actors.journal.inker_clerk import (
    CompactionDone,
    CompactionReport,
    Rerolled,
    Rolled,
    RollFailed,
    reroll,
    reroll_files,
    roll,
    roll_segments,
)
from inkpen.actors.journal.intake import WriteGroup, WriteIntake
from inkpen.actors.journal.retention import LedgerBodies
from inkpen.actors.kernel.context import EngineContext
from inkpen.actors.kernel.keeper import commit_or_roll_back
from inkpen.actors.kernel.throttle import NONE, SLOW, STOP
from inkpen.actors.kernel.views import (
    JournalHandle,
    JournalView,
    MemTable,
    SegmentTable,
)
from inkpen.actors.ledger import penciller as penciller_actor
from inkpen.errors import FencedError, InkpenError, StoreError, UsageError
from inkpen.formats.journal import JournalEntry, build_journal, build_journal_parts
from inkpen.logs import get_logger
from inkpen.manifest.fencing import SegmentBytes
from inkpen.manifest.model import Checkpoint, Manifest, VersionedManifest
from inkpen.manifest.paths import segment_key

REPLAY_PROBE_AFTER = 2.0
"""Seconds a start-up replay waits for ledger room before asking the manifest for a newer epoch."""

log = get_logger("inkpen.inker")

ROLL_RETRY_AFTER = 1.0
SETTLE_RETRY_FIRST = 0.1
SETTLE_RETRY_MAX = 1.0
"""Seconds between the timer's tries to settle a segment of unknown outcome (doubling from
:data:`SETTLE_RETRY_FIRST` up to this), besides the try every new batch makes."""
REOPEN = "reopen the Bookie: "
"""How the error of a writer stopped for good begins (its puts, ``stats()["stopped"]``)."""


# -- messages it sends the Bookie (declared with their sender, which sits below the Bookie) ---


@dataclass(frozen=True, slots=True)
class ApplyBatch:
    """Inker to Bookie: these entries are durable and visible in the journal view; cache their
    ledger entries, then release the batch's callers."""

    batch: WriteGroup
    entries: tuple[JournalEntry, ...]


@dataclass(frozen=True, slots=True)
class CompactJournal:
    """To the Bookie (from the engine, or from the Inker retrying a compaction whose commit
    failed): start a journal compaction against a fresh ledger snapshot; its report goes to
    ``result``."""

    result: Future[CompactionReport]


# -- messages ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Attach:
    """Ask, once at start-up: the actors the Inker talks to."""

    bookie: pykka.ActorRef[Any]
    penciller: pykka.ActorRef[Any]
    clerk: pykka.ActorRef[Any]


@dataclass(frozen=True, slots=True)
class _LoadJournal:
    """Ask, once at start-up: the journal files (open), unrolled segments and highest SQN."""

    files: tuple[JournalHandle, ...]
    segments: tuple[SegmentTable, ...]
    max_sqn: int


@dataclass(frozen=True, slots=True)
class _BatchOpened:
    batch: WriteGroup


@dataclass(frozen=True, slots=True)
class _BatchFull:
    batch: WriteGroup


@dataclass(frozen=True, slots=True)
class _FlushDue:
    batch: WriteGroup


@dataclass(frozen=True, slots=True)
class _Sync:
    """Ask: write the open batch now; answers the highest durable SQN."""


@dataclass(frozen=True, slots=True)
class _RollNow:
    """Ask: roll every unrolled segment into journal files; answers when committed."""


@dataclass(frozen=True, slots=True)
class _RerollNow:
    """Ask: re-roll every file whose bodies the ledger has persisted since; answers when
    committed."""


@dataclass(frozen=True, slots=True)
class _RegisterJournal:
    """Ask: register a journal clone; answers the Inker's current view."""

    snapshot_id: str
    long_running: bool


@dataclass(frozen=True, slots=True)
class _ReleaseJournal:
    snapshot_id: str


@dataclass(frozen=True, slots=True)
class _Replay:
    """Ask at start-up: push every journal entry above ``persisted_sqn`` into the ledger."""

    persisted_sqn: int


@dataclass(frozen=True, slots=True)
class _TakeCheckpoint:
    """Ask: write the open batch, then record a checkpoint of everything durable so far;
    answers the new :class:`~inkpen.manifest.model.Checkpoint`."""

    lifetime: float | None
    name: str | None


@dataclass(frozen=True, slots=True)
class _Watch:
    """From the timer (external compaction): adopt a compactor's journal files."""


@dataclass(frozen=True, slots=True)
class _RetryRoll:
    """From the timer: try the roll that failed again."""


@dataclass(frozen=True, slots=True)
class _SettleDue:
    """From the timer: try again to settle the segment whose outcome is unknown."""


@dataclass(slots=True)
class _Unsettled:
    """A segment whose write has an unknown outcome: the bytes to write again into its slot,
    and what to install once they are known to be there."""

    segment_id: int
    data: SegmentBytes
    entries: tuple[JournalEntry, ...]
    changes: list[PendingChange]
    since: float
    """``time.monotonic()`` when its outcome first became unknown."""
    error: InkpenError
    """The latest failure to settle it."""
    tries: int = 0
    retry_after: float = SETTLE_RETRY_FIRST


class InkerStats(TypedDict):
    """The Inker's part of :class:`inkpen.Stats`."""

    unsettled_segment: int | None
    """A journal segment whose write has an unknown outcome (a store outage), or None."""
    unsettled_s: float | None
    """Seconds that segment has waited to be settled."""
    settled_segments: int
    """Segments of unknown outcome settled since open (written again or found landed)."""
    sqn: int
    """The last SQN given to a change."""
    writer_epoch: int
    next_segment: int
    unrolled_segments: int
    """Journal segments written and not yet rolled into a journal file."""
    unrolled_bytes: int
    journal_files: int
    journal_bytes: int
    segments_written: int
    """Segments this writer wrote since open."""
    segment_bytes_written: int
    journal_snapshots: int
    """Live snapshot registrations with the Inker."""
    journal_pending_deletes: int
    """Journal files replaced and waiting until no snapshot or checkpoint needs them."""


@dataclass(frozen=True, slots=True)
class _InkerStats:
    """Ask: counters for ``Bookie.stats()``."""


@dataclass(frozen=True, slots=True)
class _Shutdown:
    """Ask: stop writing, stop the file clerks."""


# -- the actor --------------------------------------------------------------------------------


class Conditions(Protocol):
    """What the Inker asks of the checker of conditional writes (the engine hands it
    :class:`inkpen.actors.read.conditions.ConditionChecker`, which reads the published views)."""

    def written(self, batch: WriteGroup, entries: tuple[JournalEntry, ...]) -> None:
        """A segment was written for ``batch``: its entries count until the views show them."""

    def check(self, batch: WriteGroup, first_sqn: int, now_ms: int) -> list[PendingChange]:
        """The changes of ``batch`` to write, with the index specs they imply; rejected units go
        to ``batch.rejected``."""


class Inker(FileOwner):
    """Owns the journal: SQNs, segments, the active journal, journal files and their clerks."""

    def __init__(
        self,
        ctx: EngineContext,
        intake: WriteIntake,
        conditions: Conditions,
        *,
        epoch: int,
        next_segment: int,
    ) -> None:
        super().__init__(ctx, "inker")
        self.epoch = epoch
        self.next_segment = next_segment
        self.sqn = 0
        self.files: dict[str, JournalHandle] = {}
        self.segments: list[SegmentTable] = []
        self.bookie: pykka.ActorRef[Any] | None = None
        self.penciller: pykka.ActorRef[Any] | None = None
        self.clerk: pykka.ActorRef[Any] | None = None
        self.rolling = False
        self.bodies_after: int | None = None
        """The ledger's persisted SQN when this writer opened (set by the start-up replay):
        entries above it became ledger entries under this writer's ``inline_value_bytes``, so
        a roll may leave out the bodies their ledger entries hold. None: leave out none."""
        self.ledger_bodies: dict[int, bool] = {}
        """Per unrolled segment id: whether it holds a put whose ledger entry keeps the value."""
        self.waiting_bodies: dict[str, int] = {}
        """Journal files rolled with bodies their ledger entries hold, the ledger not having
        persisted them yet: the highest such SQN of each. Re-rolled once it has."""
        self.rerolling = False
        self.reroll_registration: str | None = None
        """The registration that keeps the files a re-roll in the clerk reads (see
        :meth:`_reroll_due`), until its answer comes back."""
        self._stopped: InkpenError | None = None
        """Why the Inker stopped writing other than the fence (the keeper holds that)."""
        self.unsettled: _Unsettled | None = None
        """The segment whose outcome is unknown, while it is (nothing else is written)."""
        self._settle_timer = False
        self.settled_segments = 0
        self.segments_written = 0
        self.bytes_written = 0
        self.last_write_started = float("-inf")
        ref = self.actor_ref
        self.intake = intake
        self.conditions = conditions
        intake.connect(lambda b: ref.tell(_BatchOpened(b)), lambda b: ref.tell(_BatchFull(b)))
        self.external = ctx.options.compaction == "external"
        self.adopted = ctx.keeper.latest.id
        """External compaction: the manifest whose journal files the published view holds."""
        self._publish()

    # -- wiring ---------------------------------------------------------------------------

    @handles(_LoadJournal)
    def _load(self, message: _LoadJournal) -> None:
        """Install the journal found at start-up: open files, replayable segments, top SQN."""
        self.files = {h.name: h for h in message.files}
        self.segments = list(message.segments)
        for segment in self.segments:
            self._note_bodies(segment)
        self.sqn = message.max_sqn
        self._publish()

    @handles(_Attach)
    def _attach(self, message: _Attach) -> None:
        self.bookie = message.bookie
        self.penciller = message.penciller
        self.clerk = message.clerk
        if self.external:
            self.ctx.keeper.set_floor("inker.view", self.adopted)
            self.ctx.scheduler.after(compactor_files.WATCH_INTERVAL, self.actor_ref, _Watch())

    def _publish(self) -> None:
        self.ctx.board.journal = JournalView.of(
            list(self.files.values()), self.segments, self.ctx.keeper.latest.id
        )

    # -- group commit ---------------------------------------------------------------------

    @handles(_BatchOpened)
    def _opened(self, message: _BatchOpened) -> None:
        options = self.ctx.options
        if options.flush_policy == "idle":
            batch = self.intake.take(message.batch)
            if batch is not None:
                self._write(batch)
            return
        wait = self.last_write_started + options.flush_interval - time.monotonic()
        if wait <= 0:
            batch = self.intake.take(message.batch)
            if batch is not None:
                self._write(batch)
        else:
            self.ctx.scheduler.after(wait, self.actor_ref, _FlushDue(message.batch))

    @handles(_FlushDue)
    def _due(self, message: _FlushDue) -> None:
        batch = self.intake.take(message.batch)
        if batch is not None:
            self._write(batch)

    @handles(_BatchFull)
    def _full(self, message: _BatchFull) -> None:
        self._write(message.batch)

    @handles(_Sync)
    def _sync(self, _: _Sync) -> int:
        batch = self.intake.take()
        if batch is not None:
            self._write(batch)
        return self.sqn

    def _write(self, batch: WriteGroup) -> None:
        if self.stopped is not None:
            batch.fail(self.stopped)
            return
        if self.unsettled is not None and not self._settle():
            batch.fail(self._held_back())
            return
        started = self.last_write_started = time.monotonic()
        first = self.sqn + 1
        if batch.conditional or batch.expands or batch.merges:
            # The check (conditions, the index entries a delete or ttl put reaches, the values
            # merges fold onto) and the append are one step: nothing else assigns SQNs meanwhile.
            now_ms = int(self.ctx.options.clock() * 1000)
            batch.changes = self.conditions.check(batch, first, now_ms)
            if not batch.changes:
                batch.complete()  # every unit was rejected: nothing to write
                return
        try:
            changes = batch.changes
            entries = tuple(change.entry(first + i) for i, change in enumerate(changes))
            data: SegmentBytes
            if any(c.prepared for c in changes):
                # Large values: their records' pieces as the puts' threads made them, written
                # without being joined where the store can (a local directory).
                data = build_journal_parts(
                    entries, writer_epoch=self.epoch, prepared=[c.prepared for c in changes]
                )
            else:
                data = build_journal(entries, writer_epoch=self.epoch)
        except Exception as exc:  # validation lets nothing through that fails here; be safe
            log.error("journal.encode_failed", error=repr(exc))
            batch.fail(
                InkpenError(
                    f"this batch of writes could not be encoded, nothing was written: {exc}"
                )
            )
            return
        segment_id = self.next_segment
        try:
            self.ctx.tables.write_segment(segment_id, data, writer_epoch=self.epoch)
        except StoreError as failure:
            if failure.definite:
                batch.fail(
                    StoreError(
                        f"journal segment {segment_id} was not written to {self.ctx.store.url}, "
                        "so this batch of writes did not happen: "
                        f"{Exception.__str__(failure)}",
                        definite=True,
                        key=segment_key(segment_id),
                    )
                )
                return
            error = StoreError(
                f"the outcome of writing journal segment {segment_id} to {self.ctx.store.url} "
                f"is unknown ({failure}); these writes may still land: the Bookie writes the same "
                "segment again once the store answers (read the keys to know), and takes new "
                "writes after that",
                definite=False,
                key=segment_key(segment_id),
            )
            self.unsettled = _Unsettled(
                segment_id, data, entries, list(batch.changes), time.monotonic(), failure
            )
            log.warning("journal.segment_unsettled", segment=segment_id, error=str(failure))
            batch.fail(error)
            self._schedule_settle()
            return
        except InkpenError as exc:  # a fence, or a slot holding a loss: stop for good
            self._stop_writing(exc)
            batch.fail(exc)
            return
        self._install(batch, segment_id, data, entries)
        log.debug(
            "journal.segment_flush",
            segment=segment_id,
            first_sqn=first,
            last_sqn=self.sqn,
            entries=len(entries),
            bytes=self.segments[-1].size,
            ms=round((time.monotonic() - started) * 1000, 2),
        )
        self._after_write()

    def _install(
        self,
        batch: WriteGroup,
        segment_id: int,
        data: SegmentBytes,
        entries: tuple[JournalEntry, ...],
    ) -> None:
        """A segment is durable: give out its SQNs, publish it, have the Bookie apply it."""
        first = entries[0].sqn
        self.sqn = entries[-1].sqn
        self.next_segment = segment_id + 1
        size = len(data) if isinstance(data, bytes) else sum(map(len, data))
        table = SegmentTable(segment_id, first, self.sqn, {e.sqn: e for e in entries}, size)
        self.segments.append(table)
        self._note_bodies(table)
        self.ctx.board.journal = self.ctx.board.journal.with_segment(table)
        self.segments_written += 1
        self.bytes_written += size
        self.conditions.written(batch, entries)
        if self.bookie is None or not send(self.bookie, ApplyBatch(batch, entries)):
            batch.fail(ActorGone("the Bookie has stopped"))

    # -- a segment of unknown outcome -------------------------------------------------------

    def _settle(self) -> bool:
        """Try once to settle the unsettled segment: write its bytes into its slot again (a
        read back tells whether an earlier attempt landed). True once it is installed; False
        while the store does not answer, or when a fence or a loss stopped the Inker."""
        pending = self.unsettled
        assert pending is not None
        pending.tries += 1
        try:
            self.ctx.tables.write_segment(
                pending.segment_id,
                pending.data,
                writer_epoch=self.epoch,
                attempts=1,
                retried=True,
            )
        except StoreError as exc:  # refused, or unknown again: still unsettled
            pending.error = exc
            return False
        except InkpenError as exc:  # a fence, or a slot holding a loss: stop for good
            self.unsettled = None
            self._stop_writing(exc)
            return False
        self.unsettled = None
        # Its callers were told the outcome is unknown; it landed, so its writes are installed
        # (visible, and counted by the conditions of later batches) under a batch of their own.
        settled = WriteGroup()
        settled.changes = pending.changes
        self._install(settled, pending.segment_id, pending.data, pending.entries)
        self.settled_segments += 1
        log.info(
            "journal.segment_settled",
            segment=pending.segment_id,
            last_sqn=self.sqn,
            tries=pending.tries,
            unsettled_s=round(time.monotonic() - pending.since, 3),
        )
        self._after_write()
        return True

    def _held_back(self) -> StoreError:
        """The error of a batch not written because a segment's outcome is still unknown."""
        pending = self.unsettled
        assert pending is not None
        return StoreError(
            f"this batch of writes was not written: the outcome of journal segment "
            f"{pending.segment_id} is still unknown, as the store at {self.ctx.store.url} has "
            f"not answered for {time.monotonic() - pending.since:.1f}s "
            f"({Exception.__str__(pending.error)}); the Bookie takes writes again once the "
            "store answers",
            definite=True,
            key=segment_key(pending.segment_id),
        )

    def _schedule_settle(self) -> None:
        pending = self.unsettled
        if pending is None or self._settle_timer or self.stopped is not None:
            return
        self._settle_timer = True
        self.ctx.scheduler.after(pending.retry_after, self.actor_ref, _SettleDue())
        pending.retry_after = min(SETTLE_RETRY_MAX, pending.retry_after * 2)

    @handles(_SettleDue)
    def _settle_due(self, _: _SettleDue) -> None:
        self._settle_timer = False
        if self.unsettled is None or self.stopped is not None:
            return
        if not self._settle():
            self._schedule_settle()

    def _after_write(self) -> None:
        options = self.ctx.options
        unrolled = sum(s.size for s in self.segments)
        count = len(self.segments)
        ratio = max(unrolled / options.roll_bytes, count / options.roll_segments)
        if not self.rolling and ratio >= 1:
            self._start_roll(self._rollable(force=ratio >= 2))
        level = STOP if ratio >= 4 else SLOW if ratio >= 2 else NONE
        self.ctx.throttle.set("journal", level)
        self._reroll_due()

    # -- bodies the ledger holds ------------------------------------------------------------

    def _note_bodies(self, segment: SegmentTable) -> None:
        limit = self.ctx.options.inline_value_bytes
        self.ledger_bodies[segment.segment_id] = any(
            value_in_ledger(e, limit) for e in segment.entries.values()
        )

    def _bodies(self) -> LedgerBodies | None:
        """Which bodies a roll may leave out now: those of puts this writer made into ledger
        entries holding the value, up to the ledger's persisted SQN (and never above a live
        feed cursor, whose consumer still reads those values from the journal). None in a
        head-only store: its journal only serves recovery and is dropped whole once persisted
        (:meth:`inkpen.Bookie.trim_journal`), so leaving bodies out would only add rewrites."""
        if self.bodies_after is None or self.ctx.options.head_only is not None:
            return None
        manifest = self.ctx.keeper.latest.manifest
        through = manifest.ledger.persisted_sqn
        floor = manifest.feed_floor(time.time())
        if floor is not None:
            through = min(through, floor)
        return LedgerBodies(self.bodies_after, through, self.ctx.options.inline_value_bytes)

    def _rollable(self, *, force: bool) -> tuple[SegmentTable, ...]:
        """The segments to roll now: the run from the oldest up to the first that still waits
        for the ledger to persist the values it holds (rolled later, those bodies are left out
        of the journal file); every segment when ``force`` (the backlog is twice the roll
        thresholds, where writers start to be slowed: the bodies stay in the journal)."""
        bodies = self._bodies()
        if force or bodies is None:
            return tuple(self.segments)
        ready: list[SegmentTable] = []
        for segment in self.segments:
            waits = (
                segment.last_sqn > max(bodies.through, bodies.after)
                and self.ledger_bodies[segment.segment_id]
            )
            if waits:
                break
            ready.append(segment)
        return tuple(ready)

    def _reroll_due(self) -> None:
        """Re-roll the files rolled with bodies the ledger has persisted since, if any (one
        re-roll at a time, through the clerk)."""
        if self.rerolling or self.clerk is None or self.stopped is not None:
            return
        due = self._rerollable()
        if due:
            bodies = self._bodies()
            assert bodies is not None
            self.rerolling = True
            # The clerk reads these files later, perhaps after a compaction it is running now
            # has replaced them: registered, they stay on the store until the answer is back.
            self.reroll_registration = f"reroll-{uuid.uuid4().hex}"
            self._register_snapshot(self.reroll_registration, long_running=True)
            reroll(self.clerk, due, bodies, self.actor_ref)

    def _rerollable(self) -> tuple[JournalHandle, ...]:
        if not self.waiting_bodies:
            return ()
        bodies = self._bodies()
        if bodies is None:
            return ()
        due = [
            self.files[name]
            for name, top in self.waiting_bodies.items()
            if top <= bodies.through and name in self.files
        ]
        return tuple(sorted(due, key=lambda h: h.descriptor.min_sqn))

    @property
    def stopped(self) -> InkpenError | None:
        """Why the Inker writes no more: its own stop, or the fence the keeper holds."""
        return self._stopped or self.ctx.keeper.fenced

    def _stop_writing(self, error: InkpenError) -> None:
        """Stop for good (a fence, or a loss nothing can repair): every later put fails."""
        if self.stopped is None:
            log.error("inker.stopped_writing", epoch=self.epoch, error=str(error))
        if isinstance(error, FencedError):
            self.intake.shut(error)
            self.ctx.keeper.fence(error)  # halts the writer through the keeper's callback
            return
        if self._stopped is None:
            # Later puts never reach a segment (nor do those held back by backpressure):
            # definitely not written.
            self._stopped = StoreError(
                f"{REOPEN}it has stopped writing for good ({error}); close it and open the "
                "database again, which recovers every write that landed",
                definite=True,
            )
        self.intake.shut(self._stopped)
        self.ctx.halt(self._stopped)

    # -- rolling ----------------------------------------------------------------------------

    def _start_roll(self, segments: tuple[SegmentTable, ...]) -> None:
        if not segments or self.clerk is None or self.stopped is not None:
            return
        self.rolling = True
        roll(self.clerk, segments, self.actor_ref, self._bodies())

    @handles(_RollNow)
    def _roll_now(self, _: _RollNow) -> bool:
        """Roll every unrolled segment now, on this thread (close, hot backup).

        Answers True once nothing is left unrolled, False while the clerk's roll is still in
        flight (ask again after it lands).
        """
        if self.rolling:
            return False
        if self.stopped is not None or not self.segments:
            return True
        segments = tuple(self.segments)
        handles, bodies_through, waiting = roll_segments(
            self.ctx,
            self.actor_ref,
            segments,
            self.ctx.options.journal_file_target_bytes,
            self._bodies(),
        )
        ids = tuple(s.segment_id for s in segments)
        self._rolled(Rolled(ids, handles, bodies_through, waiting))
        return not self.segments

    @handles(_RerollNow)
    def _reroll_now(self, _: _RerollNow) -> bool:
        """Re-roll, on this thread, every file whose bodies the ledger has persisted since it
        was rolled (close). Answers True once none is due, False while the clerk's re-roll is
        in flight."""
        if self.rerolling:
            return False
        if self.stopped is not None or self.clerk is None:
            return True
        due = self._rerollable()
        if not due:
            return True
        bodies = self._bodies()
        assert bodies is not None
        self.rerolling = True
        self._rerolled(reroll_files(self.ctx, self.actor_ref, due, bodies))
        return not self._rerollable()

    @handles(Rolled)
    def _rolled(self, message: Rolled) -> None:
        self.rolling = False
        if not message.handles:
            return
        last = max(message.segment_ids)
        descriptors = tuple(h.descriptor for h in message.handles)
        next_segment = self.next_segment
        bodies_through = message.bodies_through

        def change(m: Manifest) -> Manifest:
            if bodies_through:
                floor = m.feed_floor(time.time())
                if m.ledger.persisted_sqn < bodies_through or (
                    floor is not None and floor < bodies_through
                ):
                    # Only a feed cursor made meanwhile (by any process) can do this: redo the
                    # roll with the bodies above it kept.
                    raise InkpenError(
                        f"the roll left bodies up to SQN {bodies_through} to the ledger, but the "
                        f"manifest has persisted the ledger to {m.ledger.persisted_sqn} and holds "
                        f"a feed cursor at {floor}; the roll is done again"
                    )
            journal = m.journal
            files = tuple(sorted((*journal.files, *descriptors), key=lambda d: d.min_sqn))
            return dataclasses.replace(
                m,
                journal=dataclasses.replace(
                    journal,
                    files=files,
                    last_rolled_segment=max(journal.last_rolled_segment, last),
                    next_segment=max(journal.next_segment, next_segment),
                ),
            )

        def install(versioned: VersionedManifest) -> None:
            for handle in message.handles:
                self.files[handle.name] = handle
            self.waiting_bodies.update(message.waiting)
            self.segments = [s for s in self.segments if s.segment_id > last]
            for segment_id in message.segment_ids:
                self.ledger_bodies.pop(segment_id, None)
            if self.external:
                self._adopt(versioned)
            self._publish()
            log.debug(
                "journal.roll",
                segments=len(message.segment_ids),
                last_segment=last,
                files=[h.name for h in message.handles],
                bytes=sum(d.size for d in descriptors),
            )
            self._after_write()

        commit_or_roll_back(
            self.ctx.keeper,
            change,
            reason="journal.roll",
            new_files=message.handles,
            in_flight=self.ctx.in_flight,
            install=install,
            roll_back=lambda _: None,  # the segments stay unrolled; a fence stops the Inker
            retry=lambda after: self.ctx.scheduler.after(after, self.actor_ref, _RetryRoll()),
        )

    @handles(RollFailed)
    def _roll_failed(self, message: RollFailed) -> None:
        self.rolling = False
        log.warning("journal.roll_failed", error=str(message.error))
        self.ctx.scheduler.after(ROLL_RETRY_AFTER, self.actor_ref, _RetryRoll())

    @handles(_RetryRoll)
    def _retry_roll(self, _: _RetryRoll) -> None:
        self._after_write()

    # -- external compaction ------------------------------------------------------------------

    @handles(_Watch)
    def _watch(self, _: _Watch) -> None:
        if self.ctx.keeper.fenced is not None or self._stopped is not None:
            return
        latest = self.ctx.keeper.latest  # refreshed by the Penciller's watch
        if latest.id > self.adopted:
            self._adopt(latest)
            self._publish()
        self.ctx.scheduler.after(compactor_files.WATCH_INTERVAL, self.actor_ref, _Watch())

    def _adopt(self, versioned: VersionedManifest) -> None:
        """Take the journal files of ``versioned`` (a compactor's compactions); set those they
        replaced to delete_pending at its id; the view floor pins them for other processes."""
        try:
            files, dropped = compactor_files.adopt(
                self.files,
                versioned.manifest.journal.files,
                lambda missing: open_files(self.ctx, self.actor_ref, missing),
            )
        except Exception as exc:  # the view keeps its files; the next look tries again
            log.warning("journal.adopt_failed", error=str(exc))
            return
        self.files = files
        for handle in dropped:
            if handle.clerk is not None:
                self.retire(handle.name, handle.clerk, versioned.id)
        if dropped:
            log.info("journal.adopted", manifest=versioned.id, dropped=len(dropped))
        self.adopted = max(self.adopted, versioned.id)
        self.ctx.keeper.set_floor("inker.view", self.adopted)

    def _snapshot_floor(self) -> int:
        latest = self.ctx.keeper.latest.id
        return min(latest, self.adopted) if self.external else latest

    # -- compaction -------------------------------------------------------------------------

    def _replaced_meanwhile(self, chosen: tuple[str, ...]) -> list[str]:
        """The files of ``chosen`` (a compaction's or re-roll's inputs) that a commit since
        replaced; the work written from them is of no use any more."""
        return sorted(name for name in chosen if name not in self.files)

    def _discard(self, handles: tuple[JournalHandle, ...]) -> None:
        """Files written for a commit that will not happen: nothing names them, GC removes them."""
        self.ctx.in_flight.discard([h.name for h in handles])
        for handle in handles:
            stop(handle.clerk)

    @handles(CompactionDone)
    def _compacted(self, message: CompactionDone) -> None:
        """Swap compacted files in and set the replaced ones for deletion; a compaction whose
        inputs a newer commit replaced meanwhile ends as ``replaced_meanwhile``."""
        replaced = set(message.replaced)
        gone = self._replaced_meanwhile(message.replaced)
        if gone:
            self._discard(message.handles)
            log.info("journal.compaction_replaced_meanwhile", replaced=gone)
            message.result.set_result(
                dataclasses.replace(
                    message.report, compacted=(), written=(), replaced_meanwhile=tuple(gone)
                )
            )
            return

        def install(versioned: VersionedManifest) -> None:
            meter = self.ctx.meter
            meter.journal_compactions += 1
            meter.journal_compaction_bytes_read += message.report.bytes_before
            meter.journal_compaction_bytes_written += message.report.bytes_after
            meter.journal_compaction_seconds += message.seconds
            log.info(
                "journal.compaction_committed",
                replaced=sorted(replaced),
                written=[h.name for h in message.handles],
                manifest=versioned.id,
            )
            message.result.set_result(dataclasses.replace(message.report, manifest_id=versioned.id))

        def roll_back(error: InkpenError) -> None:
            if isinstance(error, FencedError):  # no retry: the caller learns of the fence
                message.result.set_exception(error)

        def retry(after: float) -> None:
            # Compact again against a fresh ledger snapshot; the caller waits for that report.
            assert self.bookie is not None
            self.ctx.scheduler.after(after, self.bookie, CompactJournal(message.result))

        self._swap(
            replaced,
            message.handles,
            kept_above=message.report.kept_above,
            reason="journal.compaction",
            install=install,
            roll_back=roll_back,
            retry=retry,
        )

    @handles(Rerolled)
    def _rerolled(self, message: Rerolled) -> None:
        """Swap re-rolled files in (as a compaction's: same SQNs, some bodies left out)."""
        if self.reroll_registration is not None:
            self.registry.release(self.reroll_registration)
            self.reroll_registration = None
        if message.error is not None or not message.replaced:
            self.rerolling = False
            return
        gone = self._replaced_meanwhile(message.replaced)
        if gone:  # a compaction replaced them: it has judged those bodies already
            self._discard(message.handles)
            self.rerolling = False
            log.debug("journal.reroll_replaced_meanwhile", replaced=gone)
            return

        def install(versioned: VersionedManifest) -> None:
            self.rerolling = False
            self.waiting_bodies.update(message.waiting)
            meter = self.ctx.meter
            meter.journal_rerolls += 1
            meter.journal_reroll_bytes_read += message.bytes_before
            meter.journal_reroll_bytes_written += sum(h.descriptor.size for h in message.handles)
            log.info(
                "journal.reroll_committed",
                replaced=list(message.replaced),
                written=[h.name for h in message.handles],
                bodies_through=message.bodies_through,
                bytes_before=message.bytes_before,
                bytes_after=sum(h.descriptor.size for h in message.handles),
                manifest=versioned.id,
            )

        def roll_back(_: InkpenError) -> None:
            self.rerolling = False  # the next write asks again

        self._swap(
            set(message.replaced),
            message.handles,
            kept_above=message.bodies_through or None,
            reason="journal.reroll",
            install=install,
            roll_back=roll_back,
            retry=lambda after: None,
        )

    def _swap(
        self,
        replaced: set[str],
        handles: tuple[JournalHandle, ...],
        *,
        kept_above: int | None,
        reason: str,
        install: Callable[[VersionedManifest], None],
        roll_back: Callable[[InkpenError], None],
        retry: Callable[[float], object],
    ) -> None:
        """Commit ``handles`` in place of the ``replaced`` journal files and set those for
        deletion; refused (``roll_back``, then ``retry``) when a replaced file is no longer
        named, or when a live feed cursor lies below ``kept_above``, the SQN above which every
        entry was kept whole (a cursor made meanwhile: the work is done again against it)."""
        added = tuple(h.descriptor for h in handles)

        def change(m: Manifest) -> Manifest:
            floor = m.feed_floor(time.time())
            if kept_above is not None and floor is not None and floor < kept_above:
                raise InkpenError(
                    f"a feed cursor at SQN {floor} is below the SQN {kept_above} above which "
                    f"this {reason} kept every entry whole; it is done again against the cursor"
                )
            named = {d.name for d in m.journal.files}
            if not replaced <= named:
                raise InkpenError(
                    f"journal files {sorted(replaced - named)} this {reason} replaces were "
                    "replaced meanwhile; it is not committed"
                )
            kept = tuple(d for d in m.journal.files if d.name not in replaced)
            files = tuple(sorted((*kept, *added), key=lambda d: d.min_sqn))
            return dataclasses.replace(m, journal=dataclasses.replace(m.journal, files=files))

        def installed(versioned: VersionedManifest) -> None:
            for handle in handles:
                self.files[handle.name] = handle
            for name in replaced:
                self.waiting_bodies.pop(name, None)
                gone = self.files.pop(name, None)
                if gone is not None and gone.clerk is not None:
                    self.retire(name, gone.clerk, versioned.id)
            self._publish()
            install(versioned)

        commit_or_roll_back(
            self.ctx.keeper,
            change,
            reason=reason,
            new_files=handles,
            in_flight=self.ctx.in_flight,
            install=installed,
            roll_back=roll_back,
            retry=retry,
        )

    # -- checkpoints --------------------------------------------------------------------------

    @handles(_TakeCheckpoint)
    def _checkpoint(self, message: _TakeCheckpoint) -> Checkpoint:
        """A checkpoint covers the journal files and every segment written so far: a reader at
        it replays the segments above the ledger's persisted SQN, so it sees every acknowledged
        write."""
        self._sync(_Sync())
        if self.stopped is not None:
            raise self.stopped
        if self.unsettled is not None:
            raise self._held_back()
        now = time.time()
        expire = None if message.lifetime is None else now + message.lifetime
        next_segment = self.next_segment
        made: list[Checkpoint] = []

        def change(m: Manifest, new_id: int) -> Manifest:
            checkpoint = Checkpoint(
                id=str(uuid.uuid4()),
                manifest_id=new_id,
                create_time=now,
                expire_time=expire,
                name=message.name,
                metadata={"kind": "bookie", "epoch": str(self.epoch)},
            )
            made[:] = [checkpoint]
            journal = dataclasses.replace(
                m.journal, next_segment=max(m.journal.next_segment, next_segment)
            )
            return dataclasses.replace(m, journal=journal).with_checkpoint(checkpoint)

        versioned = self.ctx.keeper.commit_at(change, reason="checkpoint.create")
        log.debug(
            "checkpoint.created", id=made[0].id, manifest=versioned.id, lifetime=message.lifetime
        )
        return made[0]

    # -- snapshots and deletes --------------------------------------------------------------

    @handles(_RegisterJournal)
    def _register(self, message: _RegisterJournal) -> JournalView:
        view = self.ctx.board.journal
        self._register_snapshot(message.snapshot_id, long_running=message.long_running)
        return view

    @handles(_ReleaseJournal)
    def _release(self, message: _ReleaseJournal) -> None:
        self.registry.release(message.snapshot_id)

    # -- start-up replay ----------------------------------------------------------------------

    @handles(_Replay)
    def _replay(self, message: _Replay) -> int:
        """Push journal entries above the ledger's persisted SQN into the Penciller, in order
        (:mod:`inkpen.actors.journal.replay`), in tables of about ``ledger_cache_entries``."""
        assert self.penciller is not None
        persisted = message.persisted_sqn
        self.bodies_after = persisted
        batch_entries = self.ctx.options.ledger_cache_entries
        pending: list[tuple[bytes, Any]] = []
        replayed = 0

        def flush() -> None:
            nonlocal pending
            if pending:
                self._push_replayed(MemTable.of(pending))
                pending = []

        inline = self.ctx.options.inline_value_bytes
        replayed_from = journal_replay.replay(
            self.files.values(), self.segments, persisted, inline_limit=inline
        )
        for ledger_entries in replayed_from:
            pending.extend(ledger_entries)
            replayed += 1
            if len(pending) >= batch_entries:
                flush()
        flush()
        return replayed

    def _push_replayed(self, table: MemTable) -> None:
        """Push one replayed table, waiting while the Penciller has no room; ends with the
        writer's error once it is halted (fenced, failed, closed). A writer fenced during its
        own start-up commits nothing that would tell it, so a wait that lasts asks the manifest
        every ``REPLAY_PROBE_AFTER`` seconds.

        A writer with ``compaction="external"`` does not wait for merges here: no compactor may
        be running while it opens, so a refused push writes L0 past ``max_l0_files``, which
        only costs reads until a compactor merges it (its puts, after open, wait as usual)."""
        assert self.penciller is not None
        room = self.ctx.ledger_room
        external = self.ctx.options.compaction == "external"
        deadline = time.monotonic() + 600.0
        while True:
            halted = self.ctx.throttle.error
            if halted is not None:
                raise halted
            room.clear()
            if penciller_actor.push_mem(self.penciller, (table,), past_l0_limit=external):
                return
            left = deadline - time.monotonic()
            if left <= 0:
                penciller_actor.push_mem(self.penciller, (table,), force=True)
                return
            if not room.wait(timeout=min(left, REPLAY_PROBE_AFTER)):
                self.ctx.keeper.refresh()  # raises FencedError (and halts) if a newer writer opened

    # -- the rest -----------------------------------------------------------------------------

    @handles(_InkerStats)
    def _stats(self, _: _InkerStats) -> InkerStats:
        pending = self.unsettled
        return {
            "unsettled_segment": None if pending is None else pending.segment_id,
            "unsettled_s": None if pending is None else time.monotonic() - pending.since,
            "settled_segments": self.settled_segments,
            "sqn": self.sqn,
            "writer_epoch": self.epoch,
            "next_segment": self.next_segment,
            "unrolled_segments": len(self.segments),
            "unrolled_bytes": sum(s.size for s in self.segments),
            "journal_files": len(self.files),
            "journal_bytes": sum(h.descriptor.size for h in self.files.values()),
            "segments_written": self.segments_written,
            "segment_bytes_written": self.bytes_written,
            "journal_snapshots": len(self.registry),
            "journal_pending_deletes": len(self.pending_deletes),
        }

    @handles(_Shutdown)
    def _shutdown(self, _: _Shutdown) -> None:
        stopped = self.stopped or UsageError("this Bookie is closed")
        self._stopped = self._stopped or stopped
        self.intake.shut(stopped)
        for handle in self.files.values():
            stop(handle.clerk)
        self.files.clear()
        self.stop_retiring()


# -- what other modules ask of the Inker --------------------------------------------------------


def attach(
    inker: pykka.ActorRef[Inker],
    *,
    bookie: pykka.ActorRef[Any],
    penciller: pykka.ActorRef[Any],
    clerk: pykka.ActorRef[Any],
) -> None:
    """Once at start-up: the actors the Inker talks to."""
    call(inker, _Attach(bookie, penciller, clerk))


def load(
    inker: pykka.ActorRef[Inker],
    files: tuple[JournalHandle, ...],
    segments: tuple[SegmentTable, ...],
    max_sqn: int,
) -> None:
    """Once at start-up: the journal files (open), unrolled segments and highest SQN."""
    call(inker, _LoadJournal(files, segments, max_sqn))


def replay(inker: pykka.ActorRef[Inker], persisted_sqn: int) -> int:
    """At start-up: push every journal entry above ``persisted_sqn`` into the ledger; answers
    how many were replayed."""
    replayed: int = call(inker, _Replay(persisted_sqn))
    return replayed


def sync(inker: pykka.ActorRef[Inker]) -> int:
    """Write the open batch now; answers the highest durable SQN."""
    sqn: int = call(inker, _Sync())
    return sqn


def roll_now(inker: pykka.ActorRef[Inker]) -> bool:
    """Roll every unrolled segment; True once none is left, False while a roll is in flight."""
    done: bool = call(inker, _RollNow())
    return done


def reroll_now(inker: pykka.ActorRef[Inker]) -> bool:
    """Re-roll the files whose bodies the ledger has persisted since they were rolled; True
    once none is due, False while a re-roll is in flight."""
    done: bool = call(inker, _RerollNow())
    return done


def take_checkpoint(
    inker: pykka.ActorRef[Inker], lifetime: float | None, name: str | None
) -> Checkpoint:
    """Write the open batch, then commit a checkpoint of everything durable so far."""
    made: Checkpoint = call(inker, _TakeCheckpoint(lifetime, name))
    return made


def register(inker: pykka.ActorRef[Inker], snapshot_id: str, long_running: bool) -> JournalView:
    """Register a journal clone; answers the Inker's current view."""
    view: JournalView = call(inker, _RegisterJournal(snapshot_id, long_running))
    return view


def release(inker: pykka.ActorRef[Inker], snapshot_id: str) -> None:
    """Drop a journal clone's registration (a tell)."""
    send(inker, _ReleaseJournal(snapshot_id))


def stats(inker: pykka.ActorRef[Inker]) -> InkerStats:
    """Counters for ``Bookie.stats()``."""
    counters: InkerStats = call(inker, _InkerStats())
    return counters


def shutdown(inker: pykka.ActorRef[Inker], *, timeout: float | None = None) -> None:
    """Stop writing and stop the file clerks."""
    call(inker, _Shutdown(), timeout=timeout)
