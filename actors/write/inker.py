"""The Inker: owner of the journal.

The Inker assigns sequence numbers (SQNs), writes the journal, and owns the journal half of the
manifest. Its pieces:

- the **intake** (:mod:`inkpen.actors.journal.intake`): puts from any thread gather into a batch;
  the Inker writes each batch as one **journal segment** (``journal/<id>.jnl``, create-if-absent at
  the next id, stamped with the writer epoch and the durable floor). A put's caller is released
  only after its segment and every earlier one are durably written and the Bookie has cached its
  ledger entries. ``flush_policy`` decides when the open batch is taken: ``idle`` as soon as the
  window of writes in flight has room (a batch fills while the earlier segments are being
  written: group commit), ``interval`` at most one segment per ``flush_interval`` (a batch that
  opens sooner after the last write began waits for the rest of the interval; one that opens
  later is taken at once); a batch of ``max_batch_bytes`` is closed at once either way and taken
  as soon as the window lets it, closed batches in the order they closed.
- the **window**: up to ``segments_in_flight`` segment writes are in flight at once, on a pool
  of as many threads; the Inker's own thread never waits on a store request. A write's outcome
  comes back as a message; the segments whose write and every earlier one's landed are
  **installed** in id order (SQN order): published, and applied by the Bookie, which releases
  their callers. A later batch's conditions (``if_sqn``, transactions' guards, the index entries
  a delete reaches, the values merges fold onto) are checked against every earlier segment
  issued, in flight or written (:mod:`inkpen.actors.write.conditions`). Each segment records
  the last segment installed when it was issued (its durable floor), so a crash that leaves a gap
  under segments that landed is told from damage (:mod:`inkpen.manifest.fencing`). Up to the claim's
  ``sequential_until`` (where a fenced writer's writes in flight may still land) one segment is
  in flight at a time, and a slot holding an older epoch is stepped over.
- the **active journal**: installed segments stay in memory (published in the Inker's view, so
  gets find their values without a store read) until the Inker's clerk **rolls** them into a
  journal file and the manifest records the roll (``last_rolled_segment``; ``next_segment`` is
  one past the last segment installed, never one in flight).
- **journal files** (``journal/compacted/<id>.jnl``), one clerk each, serving value reads.
- the **snapshot register** for journal clones, and the delete confirmations of its files.

Segments are written through the writer's table store
(:meth:`~inkpen.manifest.table_store.TableStore.write_segment`), which owns the retries and the
read back; the Inker only acts on the outcome. When a write fails, nothing more is issued until
every write of the window has ended; then (:meth:`Inker._resolve`):

- a slot taken by a newer epoch (a newer writer opened the database) or holding other bytes of
  this writer's epoch (a loss) stops the Inker for good: the batches from that segment up fail
  with that error, those below it (landed after one of unknown outcome) as of unknown outcome;
- the segments above the last one that may have landed all failed definitely: nothing of them is
  anywhere, so their batches fail definitely and their SQNs and slots are given out again (the
  conditions forget them);
- the segments up to that one (the first failed, of unknown outcome or refused, and any that
  landed after it, built on its SQNs) are **unsettled**: their batches fail with an indefinite
  ``StoreError`` (the writes may still land), and the Inker writes each of them again with the
  same bytes into the same slot until all have landed (create-if-absent, then a read back: its
  own bytes there mean it landed), then installs them (their writes become visible) and goes
  on. It tries on every batch that comes meanwhile (each of which fails definitely while the
  store still does not answer) and on a timer, every :data:`SETTLE_RETRY_MAX` seconds at most.

Only a fence, or a slot holding other bytes of this writer's epoch (a loss that nothing can
repair), stops the Inker for good: then the handle must be reopened. ``sync`` (flush, roll,
checkpoints, close) waits for every batch taken so far to be settled; closing without persisting
(``abandon``) fails the batches still in flight as of unknown outcome and waits (up to
:data:`SHUTDOWN_WAIT`) for their writes to end.

Other modules ask the Inker through the functions at the end of this module (``sync``,
``roll_now``, ``take_checkpoint``, ``register``, ``release``, ``replay``, ``stats``, ...); its
messages are private. It also answers ``Rolled``/``RollFailed``/``CompactionDone`` (from its
clerk) and ``ConfirmDelete``/``FileDeleted`` (from file clerks).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypedDict

import pykka

from inkpen.actors.base import ActorGone, call, handles, send, stop
from inkpen.actors.files.registry import FileOwner
from inkpen.actors.files.start import open_files
from inkpen.actors.journal import compactor_files
from inkpen.actors.journal import replay as journal_replay
from inkpen.actors.journal.changes import value_in_ledger
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
from inkpen.actors.write.conditions import ConditionChecker
from inkpen.errors import FencedError, InkpenError, StoreError, UsageError
from inkpen.formats.journal import JournalEntry, build_journal, build_journal_parts
from inkpen.logs import get_logger
from inkpen.manifest.fencing import SegmentBytes
from inkpen.manifest.model import Checkpoint, Manifest, VersionedManifest
from inkpen.manifest.paths import segment_key
from inkpen.manifest.table_store import SEGMENT_WRITE_ATTEMPTS

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
SHUTDOWN_WAIT = 30.0
"""Seconds a closing Inker waits for the segment writes still in flight to end (a closed or
abandoned writer leaves the store as it is once they have, as a crash would)."""


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
    """From the intake: a batch opened (its first change)."""


@dataclass(frozen=True, slots=True)
class _BatchFull:
    """From the intake: a batch filled up and waits, closed, to be taken."""


@dataclass(frozen=True, slots=True)
class _FlushDue:
    """From the timer (``flush_policy="interval"``): the open batch may be taken now."""


@dataclass(frozen=True, slots=True)
class _Sync:
    """Ask: close the open batch and issue what the window lets through; answers the batches
    taken so far and not settled yet (the caller waits for them)."""


@dataclass(frozen=True, slots=True)
class _Written:
    """From the writing pool: the write of ``flight``'s segment ended, landing in ``slot`` (None
    when it failed with ``error``); ``settle``: a write of a settling round."""

    flight: _Flight
    slot: int | None
    error: InkpenError | None
    settle: bool


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
class _Flight:
    """One segment issued and not installed yet: in flight, landed behind an earlier one still
    in flight, or failed (waiting for the window to be resolved, or unsettled)."""

    segment_id: int
    batch: WriteGroup
    """The callers' batch (released once the Bookie has applied :attr:`applied`)."""
    applied: WriteGroup
    """What the Bookie settles once it has cached the entries (and what the conditions count)."""
    data: SegmentBytes
    entries: tuple[JournalEntry, ...]
    floor: int
    """The segment id through which every segment was durable when this one was issued."""
    step_over: bool
    """Written where a fenced writer's write may still land: a slot holding an older epoch is
    stepped over (one segment in flight at a time there)."""
    started: float
    writing: bool = True
    landed: bool = False
    error: InkpenError | None = None
    """The failure of its last write (None once it landed)."""
    retried: bool = False
    """Written again after a failure: a slot holding exactly its bytes means it landed."""


@dataclass(slots=True)
class _Unsettled:
    """Segments at the head of the window whose outcome is unknown (or that landed after one whose
    outcome is unknown): written again until they all land; nothing new is issued meanwhile."""

    since: float
    """``time.monotonic()`` when the first outcome became unknown."""
    error: InkpenError
    """The latest failure to settle them."""
    tries: int = 0
    retry_after: float = SETTLE_RETRY_FIRST
    settling: int = 0
    """Writes of the settling round still in flight."""
    count: int = 0
    """How many segments were unsettled."""


class _Writers:
    """The Inker's writing pool: ``count`` daemon threads, started with the Inker (a writer's
    threads are all there once it is open, and none holds up the interpreter's exit), each
    running segment writes as they are handed over."""

    def __init__(self, count: int) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._idle = threading.Condition()
        self._pending = 0
        self._shut = False
        self._threads = [
            threading.Thread(target=self._run, name=f"inkpen-segments-{i}", daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, job: Callable[[], object]) -> bool:
        """Run ``job`` on a free thread; False once the pool is shut (nothing runs)."""
        with self._idle:
            if self._shut:
                return False
            self._pending += 1
        self._jobs.put(job)
        return True

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except Exception as exc:  # a job reports its own outcome; never lose a thread
                log.error("inker.writer_job_failed", error=repr(exc))
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def shutdown(self, *, timeout: float) -> bool:
        """Take no more jobs, wait up to ``timeout`` seconds for those handed over to end, then
        let the threads go; answers whether they all ended."""
        with self._idle:
            first = not self._shut
            self._shut = True
            ended = self._idle.wait_for(lambda: self._pending == 0, timeout)
        if first:
            for _ in self._threads:
                self._jobs.put(None)
        return ended


class InkerStats(TypedDict):
    """The Inker's part of :class:`inkpen.Stats`."""

    unsettled_segment: int | None
    """A journal segment whose write has an unknown outcome (a store outage), or None."""
    segments_in_flight: int
    """Journal segments issued and not yet acknowledged (written, or being written)."""
    segments_waiting: int
    """Of those, the segments written that wait for an earlier one's write to land."""
    unsettled_s: float | None
    """Seconds that segment has waited to be settled."""
    settled_segments: int
    """Segments of unknown outcome settled since open (written again or found landed)."""
    sqn: int
    """The last SQN of an acknowledged change (its segment and every earlier one durable)."""
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


class Inker(FileOwner):
    """Owns the journal: SQNs, segments, the active journal, journal files and their clerks."""

    def __init__(
        self,
        ctx: EngineContext,
        intake: WriteIntake,
        conditions: ConditionChecker,
        *,
        epoch: int,
        next_segment: int,
        segments_in_flight: int = 1,
        sequential_until: int = 0,
    ) -> None:
        super().__init__(ctx, "inker")
        self.epoch = epoch
        self.next_segment = next_segment
        """The slot the next segment issued takes."""
        self.installed_through = next_segment - 1
        """The last segment installed: every segment up to it is durable (the durable floor)."""
        self.limit = segments_in_flight
        self.sequential_until = sequential_until
        """Up to this slot, a fenced writer's write may still land: one segment at a time, a
        slot holding an older epoch stepped over (:attr:`WriterClaim.sequential_until`)."""
        self.sqn = 0
        """The last SQN given to a change of a segment issued."""
        self.durable_sqn = 0
        """The last SQN of a segment installed."""
        self.flights: deque[_Flight] = deque()
        """The window: segments issued and not installed, in id order."""
        self.held: list[WriteGroup] = []
        """Batches taken while segments are unsettled, waiting for the next settling round."""
        self.failing = False
        """A write of the window failed: nothing is issued until the window is resolved."""
        self.closed = False
        self._flush_timer = False
        self.pool = _Writers(segments_in_flight)
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
        """While the head of the window is of unknown outcome (nothing new is written)."""
        self._settle_timer = False
        self.settled_segments = 0
        self.segments_written = 0
        self.bytes_written = 0
        self.last_write_started = float("-inf")
        ref = self.actor_ref
        self.intake = intake
        self.conditions = conditions
        intake.connect(lambda _: ref.tell(_BatchOpened()), lambda _: ref.tell(_BatchFull()))
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
        self.sqn = self.durable_sqn = message.max_sqn
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
    def _opened(self, _: _BatchOpened) -> None:
        self._pump()

    @handles(_BatchFull)
    def _full(self, _: _BatchFull) -> None:
        self._pump()

    @handles(_FlushDue)
    def _due(self, _: _FlushDue) -> None:
        self._flush_timer = False
        self._pump()

    @handles(_Sync)
    def _sync(self, _: _Sync) -> tuple[WriteGroup, ...]:
        """Close the open batch and issue what the window lets through; answers every batch not
        settled yet that was taken so far (the caller waits for them outside this actor)."""
        waiting = self.intake.close_open()
        self._pump()
        flights = tuple(f.batch for f in self.flights)
        return (*flights, *self.held, *waiting)

    def _window(self) -> int:
        """How many segments may be in flight now: one at a time up to the last slot a fenced
        writer's write may still take (:attr:`sequential_until`), then ``segments_in_flight``."""
        if self.next_segment <= self.sequential_until or any(f.step_over for f in self.flights):
            return 1
        return self.limit

    def _pump(self) -> None:
        """Issue the batches waiting in the intake, oldest first, while the window has room.

        Nothing is issued while the window is failing (a write failed and others are still in
        flight: what to do is decided once they have all ended) or while segments are unsettled
        (their bytes are written again first; the batches taken meanwhile wait for that, as
        :attr:`held`). A stopped Inker fails whatever waits."""
        if self.stopped is not None:
            self._fail_waiting(self.stopped)
            return
        if self.failing:
            return
        if self.unsettled is not None:
            while (batch := self.intake.take_next(open_too=True)) is not None:
                self.held.append(batch)
            if self.held:
                self._try_settle()
            return
        while self.held and len(self.flights) < self._window():
            self._issue(self.held.pop(0))
        while len(self.flights) < self._window() and not self.failing:
            batch = self.intake.take_next(open_too=self._open_due())
            if batch is None:
                return
            self._issue(batch)

    def _open_due(self) -> bool:
        """Whether the open batch may be taken now (``flush_policy``): at once when idle; under
        ``interval`` once ``flush_interval`` has passed since the last segment write began (a
        timer is set to take it then)."""
        options = self.ctx.options
        if options.flush_policy == "idle":
            return True
        wait = self.last_write_started + options.flush_interval - time.monotonic()
        if wait <= 0:
            return True
        if not self._flush_timer and self.intake.pending():
            self._flush_timer = True
            self.ctx.scheduler.after(wait, self.actor_ref, _FlushDue())
        return False

    def _issue(self, batch: WriteGroup) -> None:
        """Check the batch's conditions, give it SQNs, encode it and start its segment write.

        The conditions are checked against every segment issued before, in flight or written
        (the checker counts them from now on), so a later batch sees an earlier one's writes."""
        started = self.last_write_started = time.monotonic()
        first = self.sqn + 1
        if batch.conditional or batch.expands or batch.merges:
            # The check (conditions, the index entries a delete or ttl put reaches, the values
            # merges fold onto) and the SQNs are one step: nothing else assigns SQNs meanwhile.
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
        applied = WriteGroup()
        applied.changes = changes
        applied.add_done_callback(functools.partial(_release, batch))
        flight = _Flight(
            segment_id,
            batch,
            applied,
            data,
            entries,
            floor=self.installed_through,
            step_over=segment_id <= self.sequential_until,
            started=started,
        )
        self.next_segment = segment_id + 1
        self.sqn = entries[-1].sqn
        self.conditions.written(applied, entries, checked=batch)
        self.flights.append(flight)
        self._start(flight, attempts=SEGMENT_WRITE_ATTEMPTS)

    def _start(self, flight: _Flight, *, attempts: int, settle: bool = False) -> None:
        """Write ``flight``'s segment on the writing pool; the outcome comes back as
        :class:`_Written` (the Inker's thread never waits on a store request)."""
        flight.writing = True
        tables = self.ctx.tables
        ref = self.actor_ref
        epoch = self.epoch

        def write() -> None:
            slot: int | None = None
            error: InkpenError | None = None
            try:
                slot = tables.write_segment(
                    flight.segment_id,
                    flight.data,
                    writer_epoch=epoch,
                    attempts=attempts,
                    retried=flight.retried,
                    durable_floor=flight.floor,
                    step_over_older=flight.step_over,
                )
            except InkpenError as exc:
                error = exc
            except BaseException as exc:  # the table store maps store failures; be safe
                error = StoreError(f"writing a journal segment raised {exc!r}", definite=False)
            send(ref, _Written(flight, slot, error, settle))

        if not self.pool.submit(write):  # the pool is shut: the Inker is closing
            flight.writing = False
            flight.error = UsageError("this Bookie is closed")
            self.failing = True

    @handles(_Written)
    def _written(self, message: _Written) -> None:
        """A segment write ended: install every segment whose write and every earlier one's
        landed (their callers are released in SQN order), and decide about failures once no
        write of the window is in flight."""
        flight = message.flight
        flight.writing = False
        if self.closed:
            return
        if message.error is None:
            assert message.slot is not None
            flight.landed = True
            flight.error = None
            if message.slot != flight.segment_id:  # stepped over an older epoch's slot
                flight.segment_id = message.slot
                self.next_segment = max(self.next_segment, message.slot + 1)
        else:
            flight.error = message.error
            if self.unsettled is None:
                self.failing = True
        self._install_landed()
        if message.settle:
            self._settle_round_ended()
        elif self.failing and not any(f.writing for f in self.flights):
            self._resolve()
        self._pump()

    def _install_landed(self) -> None:
        """Install the landed segments at the head of the window, in id order."""
        while self.flights and self.flights[0].landed:
            self._install(self.flights.popleft())
        if self.unsettled is not None and not self.flights:
            self._settled()
        if self.failing and not self.flights:
            self.failing = False

    def _install(self, flight: _Flight) -> None:
        """A segment and every earlier one are durable: publish it and have the Bookie apply it
        (which releases its callers)."""
        entries = flight.entries
        data = flight.data
        self.installed_through = flight.segment_id
        self.durable_sqn = entries[-1].sqn
        size = len(data) if isinstance(data, bytes) else sum(map(len, data))
        table = SegmentTable(
            flight.segment_id, entries[0].sqn, entries[-1].sqn, {e.sqn: e for e in entries}, size
        )
        self.segments.append(table)
        self._note_bodies(table)
        self.ctx.board.journal = self.ctx.board.journal.with_segment(table)
        self.segments_written += 1
        self.bytes_written += size
        if self.bookie is None or not send(self.bookie, ApplyBatch(flight.applied, entries)):
            flight.applied.fail(ActorGone("the Bookie has stopped"))
        log.debug(
            "journal.segment_flush",
            segment=flight.segment_id,
            first_sqn=entries[0].sqn,
            last_sqn=entries[-1].sqn,
            entries=len(entries),
            bytes=size,
            floor=flight.floor,
            ms=round((time.monotonic() - flight.started) * 1000, 2),
        )
        self._after_write()

    def _resolve(self) -> None:
        """A write of the window failed and none is in flight any more: settle the callers.

        The window is the segments issued and not installed, oldest first; its first one failed
        (the landed ones before it are installed). A fence, or a slot holding other bytes of this
        writer's epoch, stops the Inker: the segments from the first such one up fail with that
        error (none of them can be read: the slots hold other segments, or lie above a newer
        writer's fence), those below it as of unknown outcome. Otherwise, the segments above the
        last one that may have landed (landed, or of unknown outcome) all failed definitely:
        nothing of them is anywhere, so their callers fail definitely and their SQNs and slots
        are given out again. The segments up to that one stay: later ones were built on the
        earlier ones' SQNs and state, so each is written again with the same bytes until it
        lands (settled: :meth:`_try_settle`), and their callers fail as of unknown outcome."""
        self.failing = False
        flights = list(self.flights)
        if not flights:
            return
        fatal = next(
            (i for i, f in enumerate(flights) if f.error is not None and _is_fatal(f.error)),
            None,
        )
        if fatal is not None or self.stopped is not None:
            cut = len(flights) if fatal is None else fatal
            stop_error = self.stopped
            error = None if fatal is None else flights[fatal].error
            if error is not None:
                # Stopped (and fenced, for a fence) before any caller hears of it, so that a
                # caller who catches the error finds the handle saying so.
                self._stop_writing(error)
            for flight in flights[:cut]:
                flight.batch.finish(self._unknown(flight, flights[0]))
            if error is not None:
                for flight in flights[fatal:]:
                    flight.batch.finish(error)
            elif stop_error is not None:
                self._fail_waiting(stop_error)
            self.flights.clear()
            return
        kept = max(
            (i for i, f in enumerate(flights) if f.landed or _maybe_landed(f.error)), default=-1
        )
        for flight in reversed(flights[kept + 1 :]):  # definitely written nowhere: give back
            self.conditions.withdrawn(flight.applied)
            self.flights.pop()
            assert flight.error is not None
            flight.batch.finish(self._not_written(flight, flight.error))
        if kept < 0:
            rewound = flights[0]
            self.next_segment = rewound.segment_id
            self.sqn = rewound.entries[0].sqn - 1
            return
        if kept + 1 < len(flights):
            rewound = flights[kept + 1]
            self.next_segment = rewound.segment_id
            self.sqn = rewound.entries[0].sqn - 1
        first = flights[0]
        for flight in flights[: kept + 1]:
            flight.batch.finish(self._unknown(flight, first))
        assert first.error is not None
        self.unsettled = _Unsettled(time.monotonic(), first.error, count=kept + 1)
        log.warning(
            "journal.segment_unsettled",
            segment=first.segment_id,
            segments=[f.segment_id for f in flights[: kept + 1]],
            error=str(first.error),
        )
        self._schedule_settle()

    def _not_written(self, flight: _Flight, failure: InkpenError) -> StoreError:
        """The error of a batch whose segment was definitely not written."""
        return StoreError(
            f"journal segment {flight.segment_id} was not written to {self.ctx.store.url}, "
            f"so this batch of writes did not happen: {Exception.__str__(failure)}",
            definite=True,
            key=segment_key(flight.segment_id),
        )

    def _unknown(self, flight: _Flight, first: _Flight) -> StoreError:
        """The error of a batch whose segment may land (or has landed after one that may not)."""
        failure = first.error
        cause = "" if failure is None else f" ({Exception.__str__(failure)})"
        if flight is first:
            what = f"the outcome of writing journal segment {flight.segment_id}"
        else:
            what = (
                f"journal segment {flight.segment_id} depends on segment {first.segment_id}, and "
                f"the outcome of writing that one"
            )
        return StoreError(
            f"{what} to {self.ctx.store.url} is unknown{cause}; these writes may still land: the "
            "Bookie writes the same segments again once the store answers (read the keys to "
            "know), and takes new writes after that",
            definite=False,
            key=segment_key(flight.segment_id),
        )

    def _fail_waiting(self, error: InkpenError) -> None:
        """Fail every batch taken or closed and not issued (the Inker writes no more)."""
        held, self.held = self.held, []
        for batch in held:
            batch.finish(error)
        while (waiting := self.intake.take_next(open_too=True)) is not None:
            waiting.finish(error)

    # -- segments of unknown outcome --------------------------------------------------------

    def _try_settle(self) -> None:
        """Start a round of settling: write each unsettled segment that has not landed again,
        with the same bytes into the same slot (a read back tells whether an earlier attempt
        landed). Its outcome comes back as :class:`_Written` messages; the round ends when all
        have (:meth:`_settle_round_ended`)."""
        pending = self.unsettled
        if pending is None or pending.settling or self.stopped is not None:
            return
        todo = [f for f in self.flights if not f.landed and not f.writing]
        if not todo:
            return
        pending.tries += 1
        pending.settling = len(todo)
        for flight in todo:
            flight.retried = True
            self._start(flight, attempts=1, settle=True)

    def _settle_round_ended(self) -> None:
        pending = self.unsettled
        if pending is None:
            return  # installed meanwhile: every unsettled segment landed
        pending.settling -= 1
        if pending.settling > 0:
            return
        fatal = next((f.error for f in self.flights if f.error and _is_fatal(f.error)), None)
        if fatal is not None:  # a fence, or a slot holding a loss: stop for good
            self.unsettled = None
            self._stop_writing(fatal)
            self.flights.clear()
            return
        errors = [f.error for f in self.flights if f.error is not None]
        if errors:
            pending.error = errors[0]
        held, self.held = self.held, []
        if held:
            error = self._held_back()
            for batch in held:
                batch.finish(error)
        self._schedule_settle()

    def _settled(self) -> None:
        """Every unsettled segment landed and is installed: those writes are visible (their
        callers were told the outcome is unknown), and writing goes on."""
        pending = self.unsettled
        assert pending is not None
        self.unsettled = None
        self.settled_segments += pending.count
        log.info(
            "journal.segment_settled",
            segment=self.installed_through,
            segments=pending.count,
            last_sqn=self.durable_sqn,
            tries=pending.tries,
            unsettled_s=round(time.monotonic() - pending.since, 3),
        )

    def _held_back(self) -> StoreError:
        """The error of a batch not written because a segment's outcome is still unknown."""
        pending = self.unsettled
        assert pending is not None
        segment_id = self.flights[0].segment_id if self.flights else self.installed_through
        return StoreError(
            f"this batch of writes was not written: the outcome of journal segment "
            f"{segment_id} is still unknown, as the store at {self.ctx.store.url} has "
            f"not answered for {time.monotonic() - pending.since:.1f}s "
            f"({Exception.__str__(pending.error)}); the Bookie takes writes again once the "
            "store answers",
            definite=True,
            key=segment_key(segment_id),
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
        if self.unsettled.settling:
            self._schedule_settle()
            return
        self._try_settle()

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
            self._fail_waiting(error)
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
        self._fail_waiting(self._stopped)

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
        next_segment = self.installed_through + 1  # durable: a segment in flight may not land
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
        """A checkpoint covers the journal files and every segment installed so far (the caller
        synced first): a reader at it replays the segments above the ledger's persisted SQN, so
        it sees every acknowledged write."""
        if self.stopped is not None:
            raise self.stopped
        if self.unsettled is not None:
            raise self._held_back()
        now = time.time()
        expire = None if message.lifetime is None else now + message.lifetime
        next_segment = self.installed_through + 1
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
        head = self.flights[0].segment_id if pending is not None and self.flights else None
        return {
            "unsettled_segment": head,
            "segments_in_flight": len(self.flights),
            "segments_waiting": sum(1 for f in self.flights if f.landed),
            "unsettled_s": None if pending is None else time.monotonic() - pending.since,
            "settled_segments": self.settled_segments,
            "sqn": self.durable_sqn,
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

    def on_stop(self) -> None:
        """The actor stops (after its shutdown, or when a failed start-up stops it): the writing
        threads go once their writes end."""
        self.pool.shutdown(timeout=0)

    @handles(_Shutdown)
    def _shutdown(self, _: _Shutdown) -> None:
        stopped = self.stopped or UsageError("this Bookie is closed")
        self._stopped = self._stopped or stopped
        self.closed = True
        self.intake.shut(stopped)
        self._fail_waiting(stopped)
        for flight in self.flights:  # only when abandoned: a close waits for them first
            flight.batch.finish(
                StoreError(
                    f"the Bookie was closed while journal segment {flight.segment_id} was "
                    "being written: these writes may have landed (read the keys to know)",
                    definite=False,
                    key=segment_key(flight.segment_id),
                )
            )
        self.flights.clear()
        # What lands, lands now, not under a writer opened after this one.
        self.pool.shutdown(timeout=SHUTDOWN_WAIT)
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


def sync(inker: pykka.ActorRef[Inker]) -> None:
    """Write the open batch now and wait until it and every batch before it is settled: written
    and applied (so cached by the Bookie), or failed."""
    batches: tuple[WriteGroup, ...] = call(inker, _Sync())
    for batch in batches:
        with contextlib.suppress(InkpenError):  # its callers learn why; a sync only waits
            batch.wait()


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
    sync(inker)
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


def _release(callers: WriteGroup, applied: WriteGroup) -> None:
    """The Bookie settled the segment's applied group: release its callers (unless they were
    answered already, with an unknown outcome)."""
    callers.finish(applied.error)


def _is_fatal(error: InkpenError) -> bool:
    """A failure that stops the Inker for good: a fence, a slot holding a loss, a bug (anything
    but a store error)."""
    return not isinstance(error, StoreError)


def _maybe_landed(error: InkpenError | None) -> bool:
    """Whether a failed segment write may still have landed (an unknown outcome)."""
    return isinstance(error, StoreError) and not error.definite
