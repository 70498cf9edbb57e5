"""The engine of one open writer: its actors, started in order and stopped in reverse.

Start-up (Leveled's, on SlateDB's manifest):

1. read the latest manifest (an empty root gets a new database; a root holding other objects, a
   destroyed database or an unfinished clone is refused, writing nothing);
2. claim the writer epoch and fence the journal (:func:`inkpen.manifest.fencing.claim_writer`):
   older writers can no longer write a segment or commit a manifest;
3. start the Penciller and the Inker, and one clerk per SST and journal file of the manifest, each
   opening its reader (in parallel: each clerk is its own thread);
4. read the unrolled segments the claim accepted into the Inker's active journal (through the
   table store, :meth:`~inkpen.manifest.table_store.TableStore.read_segments`);
5. start the Bookie and the two owners' clerks and wire them together;
6. replay every journal entry above the ledger's persisted SQN into the Penciller;
7. accept load.

Close writes the open batch, pushes the Bookie's cache, writes the Penciller's memory to L0 (so
the next start-up replays nothing), rolls the unrolled segments (``roll_on_close``), drops the
writer checkpoint and stops every actor. A fenced writer skips the writing steps.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, TypeVar

import pykka

from inkpen.actors.base import ActorGone, stop
from inkpen.actors.engine import bookie_actor
from inkpen.actors.engine.bookie_actor import Bookie, Stats
from inkpen.actors.engine.collector import GarbageCollector, collect, request_gc
from inkpen.actors.engine.hot_backup import HotBackup
from inkpen.actors.engine.snapshot_clones import SnapshotParts
from inkpen.actors.files.start import open_files
from inkpen.actors.journal.changes import PendingChange
from inkpen.actors.journal.guards import CommitGuard
from inkpen.actors.journal.inker_clerk import CompactionReport, InkerClerk
from inkpen.actors.journal.intake import WriteGroup, WriteIntake, batch_limit, in_flight_limit
from inkpen.actors.kernel.context import EngineContext
from inkpen.actors.kernel.deleter import Deleter
from inkpen.actors.kernel.heap import limit_heap_growth
from inkpen.actors.kernel.in_flight import InFlight
from inkpen.actors.kernel.keeper import ManifestKeeper
from inkpen.actors.kernel.meter import Meter, Metrics
from inkpen.actors.kernel.news import Applied
from inkpen.actors.kernel.scheduler import Scheduler
from inkpen.actors.kernel.throttle import Throttle
from inkpen.actors.kernel.views import SegmentTable, SstHandle, ViewBoard
from inkpen.actors.ledger import penciller as penciller_actor
from inkpen.actors.ledger.penciller import Penciller
from inkpen.actors.ledger.penciller_clerk import PencillerClerk
from inkpen.actors.write import inker as inker_actor
from inkpen.actors.write.commits import CommitRecord
from inkpen.actors.write.conditions import ConditionChecker
from inkpen.actors.write.inker import Inker
from inkpen.errors import AlreadyExistsError, FencedError, InkpenError, StoreError, UsageError
from inkpen.logs import get_logger
from inkpen.manifest.clones import StoreResolver
from inkpen.manifest.fencing import WriterClaim, claim_writer
from inkpen.manifest.gc import GcReport
from inkpen.manifest.model import Manifest
from inkpen.manifest.paths import segment_key
from inkpen.manifest.store import ManifestStore, RootState
from inkpen.manifest.table_store import TableStore
from inkpen.objectstore.base import ObjectStore, is_local
from inkpen.objectstore.counting import CountingStore
from inkpen.options import Options

log = get_logger("inkpen.bookie")

CLOSE_WAIT = 600.0
AWAIT_SLICE = 0.5
"""Seconds between looks at whether the engine was closed while a caller awaits an actor."""

T = TypeVar("T")


def open_in_mode(manifests: ManifestStore, mode: str | None) -> Manifest:
    """Open (creating if empty) the database for a writer in head-only ``mode`` (None: normal);
    answers the manifest found.

    The mode is recorded in the first manifest; a database opened in any other mode is refused
    with a :class:`UsageError` before anything is claimed or written.
    """
    if mode is not None and manifests.check_root_state() is RootState.EMPTY:
        # A concurrent opener may have created it first: its mode is checked below.
        with contextlib.suppress(AlreadyExistsError):
            manifests.create(Manifest(head_only=mode))
    manifest = manifests.open_database(create_if_missing=True).manifest
    found = manifest.head_only
    if found == mode:
        return manifest
    if found is None:
        raise UsageError(
            f"the database at {manifests.url} is not a head-only store; switching it to "
            f"head_only={mode!r} is refused. Open it without head_only, or create a new "
            "database with head_only"
        )
    raise UsageError(
        f"the database at {manifests.url} is a head-only store (head_only={found!r}); open it "
        f"with head_only={found!r} (switching modes is refused)"
    )


def check_merge_operators(url: str, manifest: Manifest, options: Options) -> None:
    """Refuse (:class:`UsageError`, before anything is claimed or written) a writer lacking a
    merge operator the database records: later merges of its keys would have no operator."""
    missing = [name for name in manifest.merge_operators if name not in options.merge_operators]
    if missing:
        names = ", ".join(repr(name) for name in missing)
        example = ", ".join(f"{name!r}: fn" for name in missing)
        raise UsageError(
            f"the database at {url} was written with merge operator(s) {names}; open it with "
            f"inkpen.open(url, merge_operators={{{example}}}) giving the same operator(s)"
        )


class Engine:
    """The actors of one open Bookie and the shared context they run in.

    The public handle (:class:`inkpen.Bookie`) speaks only to this class's typed methods
    (``write``, ``flush``, ``compact_journal``, ``run_gc``, ``take_snapshot``, ``checkpoint``,
    ``hot_backup``, ``stats``, ``metrics``, ``close``, ...); the actors' messages stay private to
    their modules."""

    def __init__(
        self,
        ctx: EngineContext,
        intake: WriteIntake,
        *,
        bookie: pykka.ActorRef[Bookie],
        inker: pykka.ActorRef[Inker],
        penciller: pykka.ActorRef[Penciller],
        inker_clerk: pykka.ActorRef[InkerClerk],
        penciller_clerk: pykka.ActorRef[PencillerClerk],
        collector: pykka.ActorRef[GarbageCollector],
        owns_store: bool,
        commits: CommitRecord | None = None,
    ) -> None:
        self.ctx = ctx
        self.intake = intake
        self.bookie = bookie
        self.inker = inker
        self.penciller = penciller
        self.inker_clerk = inker_clerk
        self.penciller_clerk = penciller_clerk
        self.collector = collector
        self._owns_store = owns_store
        self.commits = commits if commits is not None else CommitRecord(1)
        """Recent commits, which transactions register with (:mod:`inkpen.actors.write.commits`)."""
        self.closed = False
        self._operators_lock = threading.Lock()
        self._recorded_operators = frozenset(ctx.keeper.latest.manifest.merge_operators)

    # -- start-up -----------------------------------------------------------------------------

    @classmethod
    def start(cls, store: ObjectStore, options: Options, *, owns_store: bool) -> Engine:
        started = time.monotonic()
        limit_heap_growth(options.malloc_mmap_threshold)
        meter = Meter(options.metrics)
        counts = meter.store_counts
        wrap: Callable[[ObjectStore], ObjectStore] | None = None
        if counts is not None:  # every request of this writer is counted, its parents' too

            def wrap(inner: ObjectStore) -> ObjectStore:
                return CountingStore(inner, counts=counts)

            store = wrap(store)
        manifests = ManifestStore(store)
        found = open_in_mode(manifests, options.head_only)
        check_merge_operators(manifests.url, found, options)
        segments_in_flight = in_flight_limit(options.segments_in_flight, is_local(store))
        claim = claim_writer(
            manifests,
            allow_missing_segments=options.allow_missing_segments,
            compaction=options.compaction,
            segments_in_flight=segments_in_flight,
        )
        keeper = ManifestKeeper(
            manifests,
            epoch=claim.epoch,
            writer_checkpoint=claim.writer_checkpoint,
            latest=claim.versioned,
            timeout=options.manifest_update_timeout,
        )
        resolver = StoreResolver(store, wrap=wrap)
        in_flight = InFlight()
        ctx = EngineContext(
            store=store,
            resolver=resolver,
            options=options,
            keeper=keeper,
            scheduler=Scheduler(),
            board=ViewBoard(),
            throttle=Throttle(probe=keeper.refresh),
            tables=TableStore.for_options(resolver, options, on_write=in_flight.add),
            in_flight=in_flight,
            meter=meter,
            deleter=Deleter(store, refusal=lambda: keeper.fenced),
        )
        manifest = claim.versioned.manifest
        intake = WriteIntake(batch_limit(options.max_batch_bytes, is_local(store)))
        commits = CommitRecord(options.transaction_window_keys)
        started_refs: list[pykka.ActorRef[Any]] = []

        def fenced(error: FencedError) -> None:
            # Every actor asks the keeper whether the writer is fenced; what waits (held puts,
            # the open batch, ledger waits) is woken here.
            ctx.halt(error)
            intake.shut(error)

        keeper.on_fenced = fenced
        try:
            penciller = Penciller.start(ctx, persisted_sqn=manifest.ledger.persisted_sqn)
            started_refs.append(penciller)
            inker = Inker.start(
                ctx,
                intake,
                ConditionChecker(
                    ctx.board, options.merge_operators, options.max_value_bytes, commits, meter
                ),
                epoch=claim.epoch,
                next_segment=claim.fence_segment + 1,
                segments_in_flight=segments_in_flight,
                sequential_until=claim.sequential_until,
            )
            started_refs.append(inker)
            levels = _open_ssts(ctx, manifest, penciller)
            files = open_files(ctx, inker, manifest.journal.files)
            segments = _read_segments(ctx, claim)
            max_sqn = max(
                [manifest.ledger.persisted_sqn]
                + [h.descriptor.max_sqn for h in files]
                + [s.last_sqn for s in segments]
                + [d.max_sqn for d in manifest.ledger.ssts()]
            )
            penciller_actor.load_levels(penciller, levels)
            inker_actor.load(inker, files, segments, max_sqn)
            ctx.applied.advance(max_sqn)  # replayed below: readable once the open returns
            bookie = Bookie.start(ctx)
            started_refs.append(bookie)
            penciller_clerk = PencillerClerk.start(ctx, penciller)
            started_refs.append(penciller_clerk)
            inker_clerk = InkerClerk.start(ctx, inker)
            started_refs.append(inker_clerk)
            bookie_actor.attach(bookie, inker=inker, penciller=penciller, inker_clerk=inker_clerk)
            inker_actor.attach(inker, bookie=bookie, penciller=penciller, clerk=inker_clerk)
            penciller_actor.attach(penciller, bookie=bookie, clerk=penciller_clerk)

            replayed = inker_actor.replay(inker, manifest.ledger.persisted_sqn)
            collector = GarbageCollector.start(ctx)
            started_refs.append(collector)
        except BaseException:
            for ref in reversed(started_refs):
                stop(ref)
            ctx.scheduler.stop()
            ctx.close_deleter()
            raise
        log.info(
            "bookie.open",
            url=store.url,
            epoch=claim.epoch,
            manifest=claim.versioned.id,
            ssts=sum(1 for _ in manifest.ledger.ssts()),
            journal_files=len(files),
            segments=len(segments),
            replayed=replayed,
            sqn=max_sqn,
            ms=round((time.monotonic() - started) * 1000, 2),
        )
        log.debug("journal.recovery", segments=len(segments), entries=replayed)
        engine = cls(
            ctx,
            intake,
            bookie=bookie,
            inker=inker,
            penciller=penciller,
            inker_clerk=inker_clerk,
            penciller_clerk=penciller_clerk,
            collector=collector,
            owns_store=owns_store,
            commits=commits,
        )
        if claim.missing:
            try:
                engine._step_over_missing(claim)
            except BaseException:
                engine.close(persist=False)
                raise
        return engine

    def _step_over_missing(self, claim: WriterClaim) -> None:
        """Roll every surviving segment and move ``last_rolled_segment`` to the fence, so that
        the missing segments (opened with ``allow_missing_segments``) are below it and later
        opens find no gap."""
        self.roll()
        fence = claim.fence_segment

        def change(m: Manifest) -> Manifest:
            journal = m.journal
            return m.with_journal(
                replace(
                    journal,
                    last_rolled_segment=max(journal.last_rolled_segment, fence),
                    next_segment=max(journal.next_segment, fence + 1),
                )
            )

        self.ctx.keeper.commit(change, reason="journal.step_over_missing")
        log.warning(
            "journal.missing_segments_rolled",
            url=self.ctx.store.url,
            missing=[segment_key(i) for i in claim.missing],
            last_rolled_segment=fence,
        )

    # -- close --------------------------------------------------------------------------------

    def close(self, *, persist: bool = True) -> None:
        """Persist what memory holds, then stop every actor. Idempotent.

        With ``persist=False`` nothing more is written: the store is left exactly as a process
        killed at this moment would leave it (every acknowledged write is already durable).
        """
        if self.closed:
            return
        self.closed = True
        started = time.monotonic()
        self.ctx.applied.stop()  # tails of the feed end instead of waiting
        closed = UsageError("this Bookie is closed")
        self.ctx.throttle.halt(closed)  # puts held back by backpressure end now
        if not persist:  # a crash at this moment: no commit and no file write after it
            self.ctx.keeper.halt(closed)
            self.ctx.tables.halt(closed, timeout=CLOSE_WAIT)
        stop(self.collector)
        try:
            if persist:
                self._persist()
        except FencedError:
            log.info("bookie.close_fenced", url=self.ctx.store.url)
        finally:
            self.intake.shut(closed)
            self.ctx.halt(closed)
            steps: tuple[tuple[str, Callable[[], None]], ...] = (
                ("ShutdownBookie", lambda: bookie_actor.shutdown(self.bookie, timeout=CLOSE_WAIT)),
                (
                    "ShutdownPenciller",
                    lambda: penciller_actor.shutdown(self.penciller, timeout=CLOSE_WAIT),
                ),
                ("Shutdown", lambda: inker_actor.shutdown(self.inker, timeout=CLOSE_WAIT)),
            )
            for step, run in steps:
                try:
                    run()
                except InkpenError as exc:
                    log.warning("bookie.close_step_failed", step=step, error=str(exc))
            for ref in (
                self.penciller_clerk,
                self.inker_clerk,
                self.bookie,
                self.penciller,
                self.inker,
            ):
                stop(ref)
            self.ctx.scheduler.stop()
            self.ctx.close_deleter(send=persist)  # before the store closes
            self.ctx.resolver.close()
            if self._owns_store:
                self.ctx.store.close()
        log.info(
            "bookie.close", url=self.ctx.store.url, ms=round((time.monotonic() - started) * 1000, 2)
        )

    def flush(self) -> None:
        """Write the open batch, then the Bookie's cache and the Penciller's memory to L0."""
        inker_actor.sync(self.inker)
        bookie_actor.push_all(self.bookie)
        self._wait_ledger(penciller_actor.flush_mem, "write its memory to L0")

    def roll(self) -> None:
        """Write the open batch and roll every unrolled segment into a journal file; then
        re-roll the files whose small values the ledger has persisted since they were rolled,
        so the journal keeps those bodies no longer."""
        keeper = self.ctx.keeper
        inker_actor.sync(self.inker)
        deadline = time.monotonic() + CLOSE_WAIT
        for step, what in (
            (inker_actor.roll_now, "roll"),
            (inker_actor.reroll_now, "re-roll"),
        ):
            while keeper.fenced is None and not step(self.inker):
                if time.monotonic() > deadline:
                    raise InkpenError(f"the journal {what} in progress did not finish in time")
                time.sleep(0.01)
        if keeper.fenced is not None:
            raise keeper.fenced

    def compact_ledger(self) -> None:
        """Run merges until no level is over its target and L0 is empty."""
        self._wait_ledger(penciller_actor.compact, "finish its merges")

    def _wait_ledger(self, ask: Callable[[pykka.ActorRef[Penciller]], bool], what: str) -> None:
        """Ask the Penciller until it answers done. Ends with the fence's FencedError once the
        writer is fenced, with the Penciller's error once it has failed for good (it raises
        it), with :class:`ActorGone` once another thread's close has stopped it."""
        keeper = self.ctx.keeper
        deadline = time.monotonic() + CLOSE_WAIT
        room = self.ctx.ledger_room
        while keeper.fenced is None:
            room.clear()
            if ask(self.penciller):
                break
            if time.monotonic() > deadline:
                raise InkpenError(f"the ledger did not {what} in time")
            room.wait(timeout=1.0)
        if keeper.fenced is not None:
            raise keeper.fenced

    def _persist(self) -> None:
        keeper = self.ctx.keeper
        if keeper.fenced is not None:
            return
        inker_actor.sync(self.inker)
        self.intake.shut(UsageError("this Bookie is closed"))
        self.flush()
        if self.ctx.options.roll_on_close:
            self.roll()
        penciller_actor.shutdown(self.penciller)
        if keeper.fenced is None:
            keeper.drop_writer_checkpoint()
        if keeper.fenced is None and self.ctx.options.compaction == "internal":
            try:  # the segments just rolled: the store keeps each write once, not twice
                collect(self.ctx, self.ctx.options.gc_min_age)
            except FencedError:
                raise
            except Exception as exc:
                log.warning("bookie.close_gc_failed", error=str(exc))

    # -- the handle's API ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.ctx.store.url

    @property
    def applied(self) -> Applied:
        """The last SQN the writer has applied, and the news tails of its feed wait on."""
        return self.ctx.applied

    @property
    def board(self) -> ViewBoard:
        """The views the actors publish: the lock-free read path reads them."""
        return self.ctx.board

    def write(self, change: PendingChange) -> None:
        """Hand a checked change to the write intake (after backpressure); returns once it is
        durable in a journal segment and visible to reads."""
        self.ctx.throttle.wait()
        batch, unit = self.intake.submit(change)
        self._wait_unit(batch, unit)

    def write_unit(self, changes: list[PendingChange], guard: CommitGuard | None = None) -> None:
        """Hand checked changes to the write intake as one unit, written in one journal segment
        (all or nothing); returns once durable and visible, or raises why none was written.
        ``guard``: a transaction's commit conditions (``ConflictError`` when one fails)."""
        self.ctx.throttle.wait()
        batch, unit = self.intake.submit_unit(changes, guard)
        self._wait_unit(batch, unit)

    def merge_operator_recorded(self, name: str) -> bool:
        """Whether the manifest is known to name merge operator ``name`` already."""
        return name in self._recorded_operators

    def record_merge_operators(self, names: Iterable[str]) -> None:
        """Make the manifest name the merge operators ``names``, whose merges have just landed
        (one manifest commit the first time a name lands; nothing for names recorded already).

        Called after the write, so a merge that is refused records nothing. The merge is
        acknowledged whatever happens here: a commit that fails (a store outage, a fence) is
        logged as ``merge.operator_not_recorded`` and made again at the name's next merge."""
        wanted = sorted({name for name in names if name not in self._recorded_operators})
        if not wanted:
            return
        with self._operators_lock:
            wanted = [name for name in wanted if name not in self._recorded_operators]
            if not wanted:
                return

            def change(m: Manifest) -> Manifest:
                if all(name in m.merge_operators for name in wanted):
                    return m
                return replace(m, merge_operators=tuple(sorted({*m.merge_operators, *wanted})))

            try:
                self.ctx.keeper.commit(change, reason="merge.operator_recorded")
            except InkpenError as exc:
                log.warning(
                    "merge.operator_not_recorded", url=self.url, operators=wanted, error=str(exc)
                )
                return
            self._recorded_operators = self._recorded_operators | set(wanted)
        log.info("merge.operator_recorded", url=self.url, operators=wanted)

    def _wait_unit(self, batch: WriteGroup, unit: int) -> None:
        timeout = self.ctx.options.put_timeout
        if not batch.wait_unit(unit, timeout):
            raise put_timed_out(self.url, timeout)

    def submit(
        self, changes: list[PendingChange], guard: CommitGuard | None = None
    ) -> tuple[WriteGroup, int]:
        """Hand checked changes (one unit) to the write intake without waiting: answers their
        batch and unit number; the batch's settling (:meth:`WriteGroup.add_done_callback`) says when
        it is durable and visible, then :meth:`WriteGroup.check_unit` whether the unit was refused.
        Consults no backpressure: the caller does that first (:attr:`throttle`)."""
        return self.intake.submit_unit(changes, guard)

    @property
    def throttle(self) -> Throttle:
        """The writer's backpressure (its level, how many puts it holds)."""
        return self.ctx.throttle

    def admission(self) -> float | None:
        """For a put that must not block its thread: raises why the writer halted; else 0.0 (go
        on), a delay to yield for first, or None (wait in a thread: :meth:`wait_for_room`)."""
        return self.ctx.throttle.admission()

    def wait_for_room(self) -> None:
        """Block until backpressure lets a put join a batch (raises once the writer halted)."""
        self.ctx.throttle.wait()

    @property
    def manifests(self) -> ManifestStore:
        """The database's manifest store (feed cursors and other CAS updates made beside the
        writer's own commits)."""
        return ManifestStore(self.ctx.keeper.manifests.store)

    def fence(self) -> FencedError | None:
        """The fence that stopped this writer, if any; when none is known yet the manifest is
        read again, which finds a newer writer's epoch (and halts this one) if there is one.
        A store that cannot be read answers None: nothing is known of a fence then."""
        keeper = self.ctx.keeper
        if keeper.fenced is None:
            try:
                keeper.refresh()
            except FencedError as exc:
                return exc
            except InkpenError:
                return None
        return keeper.fenced

    def take_snapshot(self, *, long_running: bool, ledger_only: bool) -> SnapshotParts:
        """A snapshot's frozen views, registered with their owners; give it back with
        :meth:`release_snapshot`."""
        return bookie_actor.take_snapshot(
            self.bookie, long_running=long_running, ledger_only=ledger_only
        )

    def release_snapshot(self, snapshot_id: str) -> None:
        """Release a snapshot's registrations (quietly nothing once the engine has stopped)."""
        bookie_actor.close_snapshot(self.bookie, snapshot_id)

    def compact_journal(self) -> CompactionReport:
        """Run one journal compaction and return its report."""
        result: concurrent.futures.Future[CompactionReport] = concurrent.futures.Future()
        bookie_actor.compact_journal(self.bookie, result)
        return self._await(result)

    def run_gc(self, *, min_age: float | None, dry_run: bool) -> GcReport:
        """Run the writer's GC now and return its report."""
        try:
            result = request_gc(self.collector, min_age=min_age, dry_run=dry_run)
        except ActorGone:
            raise UsageError("this Bookie is closed; open the database again") from None
        return self._await(result)

    def checkpoint(self, lifetime: float | None, name: str | None) -> str:
        """Commit a checkpoint of everything acknowledged so far; returns its id."""
        return inker_actor.take_checkpoint(self.inker, lifetime, name).id

    def hot_backup(self) -> HotBackup:
        """Roll the journal, snapshot it and return the backup to run."""
        self.roll()
        parts = self.take_snapshot(long_running=True, ledger_only=False)
        assert parts.journal is not None
        return HotBackup(
            parts.journal.registered,
            parts.ledger,
            self.ctx.resolver,
            self.ctx.keeper.epoch,
            lambda: self.release_snapshot(parts.snapshot_id),
            tuple(sorted(self._recorded_operators)),
            self.ctx.options.head_only,
        )

    def stats(self) -> Stats:
        return bookie_actor.stats(self.bookie)

    @property
    def meter(self) -> Meter:
        """What the handle records its operations in (and the owners their work)."""
        return self.ctx.meter

    def metrics(self) -> Metrics:
        """The writer's :class:`Metrics`, read from the meter, the published views, the throttle
        and the caches: no actor is asked, so it answers at once however busy they are."""
        ctx = self.ctx
        board = ctx.board
        throttle = ctx.throttle
        return ctx.meter.metrics(
            ledger=board.ledger,
            journal=board.journal,
            tables=ctx.tables,
            backpressure=throttle.level,
            throttled_puts=throttle.throttled,
            fenced=ctx.keeper.fenced is not None,
        )

    def _await(self, result: concurrent.futures.Future[T]) -> T:
        """The answer of work handed to an actor; ends with UsageError if the engine is closed
        (a stopped actor drops the messages still in its mailbox, so the answer never comes)."""
        while True:
            try:
                return result.result(timeout=AWAIT_SLICE)
            except concurrent.futures.TimeoutError:
                if self.closed and not result.done():
                    raise UsageError(
                        "this Bookie was closed before the work finished; open the database again"
                    ) from None


def put_timed_out(url: str, timeout: float | None) -> StoreError:
    """The error of a put not acknowledged within the ``put_timeout`` option."""
    return StoreError(
        f"the store at {url} did not acknowledge this write's journal segment within "
        f"put_timeout={timeout:g}s; the write may still land (read the key to know). The "
        "Bookie goes on retrying; a store that stays down makes later writes fail",
        definite=False,
    )


def _open_ssts(
    ctx: EngineContext, manifest: Manifest, owner: pykka.ActorRef[Any]
) -> tuple[tuple[SstHandle, ...], ...]:
    """Start a clerk per SST and open every reader at once; answers their handles level by
    level, as the manifest lists them (``[0]`` is L0)."""
    levels = manifest.ledger.levels
    opened = open_files(ctx, owner, [d for level in levels for d in level])
    rows: list[tuple[SstHandle, ...]] = []
    for level in levels:
        rows.append(opened[: len(level)])
        opened = opened[len(level) :]
    return tuple(rows)


def _read_segments(ctx: EngineContext, claim: WriterClaim) -> tuple[SegmentTable, ...]:
    """Read the segments the claim accepted into memory tables."""
    segments = ctx.tables.read_segments(
        [ref.id for ref in claim.segments], allow_missing=ctx.options.allow_missing_segments
    )
    return tuple(SegmentTable.read_back(s) for s in segments)
