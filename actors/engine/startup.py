"""The engine of one open writer: its actors, started in order and stopped in reverse.

Start-up (Leveled's, on SlateDB's manifest):

1. read the latest manifest (an empty root gets a new database; a root holding other objects, a
   destroyed database or an unfinished clone is refused, writing nothing);
2. claim the writer epoch and fence the journal (:func:`inkpen.manifest.fencing.claim_writer`):
   older writers can no longer write a segment or commit a manifest;
3. start the Penciller and the Inker, and one clerk per SST and journal file of the manifest, each
   opening its reader (in parallel: each clerk is its own thread);
4. read the unfolded segments the claim accepted into the Inker's active journal (through the
   table store, :meth:`~inkpen.manifest.table_store.TableStore.read_segments`);
5. start the Bookie and the two owners' clerks and wire them together;
6. replay every journal entry above the ledger's persisted SQN into the Penciller;
7. accept load.

Close writes the open batch, pushes the Bookie's cache, writes the Penciller's memory to L0 (so
the next start-up replays nothing), folds the unfolded segments (``fold_on_close``), drops the
writer checkpoint and stops every actor. A fenced writer skips the writing steps.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pykka

from inkpen.actors.base import call, send, stop
from inkpen.actors.engine.bookie_actor import (
    AttachBookie,
    Bookie,
    BookieStats,
    PushAll,
    ShutdownBookie,
)
from inkpen.actors.engine.context import EngineContext
from inkpen.actors.engine.gc import GarbageCollector
from inkpen.actors.engine.keeper import ManifestKeeper
from inkpen.actors.engine.scheduler import Scheduler
from inkpen.actors.engine.throttle import Throttle
from inkpen.actors.files.in_flight import InFlight
from inkpen.actors.files.start import open_files
from inkpen.actors.journal.clerk import InkerClerk
from inkpen.actors.journal.inker import Attach, FoldNow, Inker, LoadJournal, Replay, Shutdown, Sync
from inkpen.actors.journal.intake import WriteIntake
from inkpen.actors.ledger.clerk import PencillerClerk
from inkpen.actors.ledger.penciller import (
    AttachPenciller,
    CompactLedger,
    FlushMem,
    LoadLevels,
    Penciller,
    ShutdownPenciller,
)
from inkpen.actors.messages import Fenced
from inkpen.actors.read.views import SegmentTable, SstHandle, ViewBoard
from inkpen.errors import FencedError, InkpenError, UsageError
from inkpen.logs import get_logger
from inkpen.manifest.clones import StoreResolver
from inkpen.manifest.fencing import WriterClaim, claim_writer
from inkpen.manifest.model import Manifest
from inkpen.manifest.paths import segment_key
from inkpen.manifest.store import ManifestStore
from inkpen.manifest.table_store import TableStore
from inkpen.objectstore.base import ObjectStore
from inkpen.options import Options

log = get_logger("inkpen.bookie")

CLOSE_WAIT = 600.0


class Engine:
    """The actors of one open Bookie and the shared context they run in."""

    def __init__(
        self,
        ctx: EngineContext,
        intake: WriteIntake,
        *,
        bookie: pykka.ActorRef[Any],
        inker: pykka.ActorRef[Any],
        penciller: pykka.ActorRef[Any],
        inker_clerk: pykka.ActorRef[Any],
        penciller_clerk: pykka.ActorRef[Any],
        collector: pykka.ActorRef[Any],
        owns_store: bool,
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
        self.closed = False

    # -- start-up -----------------------------------------------------------------------------

    @classmethod
    def start(cls, store: ObjectStore, options: Options, *, owns_store: bool) -> Engine:
        started = time.monotonic()
        manifests = ManifestStore(store)
        manifests.open_database(create_if_missing=True)
        claim = claim_writer(manifests, allow_missing_segments=options.allow_missing_segments)
        keeper = ManifestKeeper(
            manifests,
            epoch=claim.epoch,
            writer_checkpoint=_writer_checkpoint(claim),
            latest=claim.versioned,
            timeout=options.manifest_update_timeout,
        )
        resolver = StoreResolver(store)
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
        )
        manifest = claim.versioned.manifest
        intake = WriteIntake(options.max_batch_bytes)
        started_refs: list[pykka.ActorRef[Any]] = []
        told: list[pykka.ActorRef[Any]] = []  # the Bookie and the Inker, once wired

        def fenced(error: FencedError) -> None:
            ctx.halt(error)
            for ref in told:
                send(ref, Fenced(error))

        keeper.on_fenced = fenced
        try:
            penciller = Penciller.start(ctx, persisted_sqn=manifest.ledger.persisted_sqn)
            started_refs.append(penciller)
            inker = Inker.start(
                ctx, intake, epoch=claim.epoch, next_segment=claim.fence_segment + 1
            )
            started_refs.append(inker)
            l0, levels = _open_ssts(ctx, manifest, penciller)
            files = open_files(ctx, inker, manifest.journal.files)
            segments = _read_segments(ctx, claim)
            max_sqn = max(
                [manifest.ledger.persisted_sqn]
                + [h.descriptor.max_sqn for h in files]
                + [s.last_sqn for s in segments]
                + [d.max_sqn for d in manifest.ledger.ssts()]
            )
            call(penciller, LoadLevels(l0, levels))
            call(inker, LoadJournal(files, segments, max_sqn))
            bookie = Bookie.start(ctx)
            started_refs.append(bookie)
            penciller_clerk = PencillerClerk.start(ctx, penciller)
            started_refs.append(penciller_clerk)
            inker_clerk = InkerClerk.start(ctx, inker)
            started_refs.append(inker_clerk)
            call(bookie, AttachBookie(inker, penciller, inker_clerk))
            call(inker, Attach(bookie, penciller, inker_clerk))
            call(penciller, AttachPenciller(bookie, penciller_clerk))

            told.extend((bookie, inker))
            if keeper.fenced is not None:
                fenced(keeper.fenced)
            replayed = call(inker, Replay(manifest.ledger.persisted_sqn))
            collector = GarbageCollector.start(ctx)
            started_refs.append(collector)
        except BaseException:
            for ref in reversed(started_refs):
                stop(ref)
            ctx.scheduler.stop()
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
        log.info("journal.recovery", segments=len(segments), entries=replayed)
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
        )
        if claim.missing:
            try:
                engine._step_over_missing(claim)
            except BaseException:
                engine.close(persist=False)
                raise
        return engine

    def _step_over_missing(self, claim: WriterClaim) -> None:
        """Fold every surviving segment and move ``last_folded_segment`` to the fence, so that
        the missing segments (opened with ``allow_missing_segments``) are below it and later
        opens find no gap."""
        self.roll()
        fence = claim.fence_segment

        def change(m: Manifest) -> Manifest:
            journal = m.journal
            return m.with_journal(
                replace(
                    journal,
                    last_folded_segment=max(journal.last_folded_segment, fence),
                    next_segment=max(journal.next_segment, fence + 1),
                )
            )

        self.ctx.keeper.commit(change, reason="journal.step_over_missing")
        log.warning(
            "journal.missing_segments_folded",
            url=self.ctx.store.url,
            missing=[segment_key(i) for i in claim.missing],
            last_folded_segment=fence,
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
        closed = UsageError("this Bookie is closed")
        self.ctx.throttle.halt(closed)  # puts held back by backpressure end now
        stop(self.collector)
        try:
            if persist:
                self._persist()
        except FencedError:
            log.info("bookie.close_fenced", url=self.ctx.store.url)
        finally:
            self.intake.shut(closed)
            self.ctx.halt(closed)
            for ref, message in (
                (self.bookie, ShutdownBookie()),
                (self.penciller, ShutdownPenciller()),
                (self.inker, Shutdown()),
            ):
                try:
                    call(ref, message, timeout=CLOSE_WAIT)
                except InkpenError as exc:
                    log.warning(
                        "bookie.close_step_failed", step=type(message).__name__, error=str(exc)
                    )
            for ref in (
                self.penciller_clerk,
                self.inker_clerk,
                self.bookie,
                self.penciller,
                self.inker,
            ):
                stop(ref)
            self.ctx.scheduler.stop()
            self.ctx.resolver.close()
            if self._owns_store:
                self.ctx.store.close()
        log.info(
            "bookie.close", url=self.ctx.store.url, ms=round((time.monotonic() - started) * 1000, 2)
        )

    def flush(self) -> None:
        """Write the open batch, then the Bookie's cache and the Penciller's memory to L0."""
        call(self.inker, Sync())
        call(self.bookie, PushAll())
        self._wait_ledger(FlushMem(), "write its memory to L0")

    def roll(self) -> None:
        """Write the open batch and fold every unfolded segment into a journal file."""
        keeper = self.ctx.keeper
        call(self.inker, Sync())
        deadline = time.monotonic() + CLOSE_WAIT
        while keeper.fenced is None and not call(self.inker, FoldNow()):
            if time.monotonic() > deadline:
                raise InkpenError("the journal fold in progress did not finish in time")
            time.sleep(0.01)
        if keeper.fenced is not None:
            raise keeper.fenced

    def compact_ledger(self) -> None:
        """Run merges until no level is over its target and L0 is empty."""
        self._wait_ledger(CompactLedger(), "finish its merges")

    def _wait_ledger(self, message: Any, what: str) -> None:
        """Ask the Penciller until it answers done. Ends with the fence's FencedError once the
        writer is fenced, with the Penciller's error once it has failed for good (it raises
        it), with :class:`ActorGone` once another thread's close has stopped it."""
        keeper = self.ctx.keeper
        deadline = time.monotonic() + CLOSE_WAIT
        room = self.ctx.ledger_room
        while keeper.fenced is None:
            room.clear()
            if call(self.penciller, message):
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
        call(self.inker, Sync())
        self.intake.shut(UsageError("this Bookie is closed"))
        self.flush()
        self.compact_ledger()  # leave L0 merged: the next open starts with no merge to run
        if self.ctx.options.fold_on_close:
            self.roll()
        call(self.penciller, ShutdownPenciller())
        if keeper.fenced is None:
            keeper.drop_writer_checkpoint()

    def stats(self) -> dict[str, Any]:
        return call(self.bookie, BookieStats())


def _writer_checkpoint(claim: WriterClaim) -> str | None:
    for checkpoint in claim.versioned.manifest.checkpoints:
        meta = checkpoint.metadata
        if meta.get("kind") == "writer" and meta.get("epoch") == str(claim.epoch):
            return checkpoint.id
    return None


def _open_ssts(
    ctx: EngineContext, manifest: Manifest, owner: pykka.ActorRef[Any]
) -> tuple[tuple[SstHandle, ...], tuple[tuple[SstHandle, ...], ...]]:
    """Start a clerk per SST and open every reader at once; answers (L0, [L1, ...])."""
    levels = manifest.ledger.levels
    opened = open_files(ctx, owner, [d for level in levels for d in level])
    rows: list[tuple[SstHandle, ...]] = []
    for level in levels:
        rows.append(opened[: len(level)])
        opened = opened[len(level) :]
    if not rows:
        return (), ()
    return rows[0], tuple(rows[1:])


def _read_segments(ctx: EngineContext, claim: WriterClaim) -> tuple[SegmentTable, ...]:
    """Read the segments the claim accepted into memory tables."""
    segments = ctx.tables.read_segments(
        [ref.id for ref in claim.segments], allow_missing=ctx.options.allow_missing_segments
    )
    return tuple(SegmentTable.read_back(s) for s in segments)
