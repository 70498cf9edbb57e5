"""The Penciller: owner of the ledger (keys, metadata, index entries and small values).

The ledger is a log-structured merge tree:

- **memory**: tables of ledger entries pushed by the Bookie, newest first;
- **L0**: SST files written from memory, newest first, possibly overlapping;
- **L1 and below**: SST files in key order, non-overlapping within a level; level n holds about
  ``l1_target_files * level_fanout ** (n - 1)`` files before its clerk merges one down.

When memory reaches ``l0_cache_entries`` and fewer than ``max_l0_files`` L0 files wait to be
merged, the Penciller freezes its memory and a new SST clerk writes it as an L0 file, off the
Penciller's loop; the Penciller then commits the file to the manifest together with the ledger's
persisted SQN (every journal entry up to it is now in SSTs, so start-up replays only what is
above). Pushes are taken while memory is below twice ``l0_cache_entries``; beyond that they are
refused, the Bookie keeps its cache, and writers are slowed and then blocked: memory stays
bounded however far merges fall behind.

Levels are numbered as everywhere in inkpen (0 is L0) and held as one pure
:class:`~inkpen.manifest.levels.Levels` value: an L0 write or a merge result is applied to
it once, and the published view and the manifest change are both derived from the new value
(:meth:`~inkpen.manifest.levels.Levels.to_manifest` is the one conversion to the manifest's
shape).

The Penciller's clerk (:mod:`inkpen.actors.ledger.penciller_clerk`) runs the merges the merge policy
(:mod:`inkpen.manifest.merge_policy`) chooses; the Penciller commits each result in one
manifest change and sets the replaced files' clerks to delete_pending, confirming each deletion
only when no registered snapshot older than the change and no live checkpoint can still read
the file.

Lookups never come here: the Penciller publishes a :class:`~inkpen.actors.kernel.views.LedgerView`
after every change, and readers search it (memory, then L0, then each level; bloom filters first).

Other modules ask the Penciller through the functions at the end of this module (``push_mem``,
``flush_mem``, ``compact``, ``register``, ``release``, ``stats``, ...); its messages are private.
It also answers ``L0Written``/``L0Failed`` (SST clerks), ``MergeDone``/``MergeIdle`` (its clerk)
and ``ConfirmDelete``/``FileDeleted`` (file clerks).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypedDict

import pykka

from inkpen.actors.base import call, handles, send, stop
from inkpen.actors.files.registry import FileOwner
from inkpen.actors.files.sst_clerk import L0Failed, L0Written, SstClerk, build_l0
from inkpen.actors.files.start import open_files, start_clerk
from inkpen.actors.kernel.context import EngineContext
from inkpen.actors.kernel.keeper import commit_or_roll_back
from inkpen.actors.kernel.views import LedgerView, MemTable, SstHandle
from inkpen.actors.ledger import compactor_levels
from inkpen.actors.ledger.penciller_clerk import MergeDone, MergeIdle, offer_work, policy_for
from inkpen.errors import CorruptionError, FencedError, InkpenError, StoreError
from inkpen.formats.sst import SstShape
from inkpen.logs import get_logger
from inkpen.manifest.levels import LevelError, Levels
from inkpen.manifest.merge_policy import MergePolicy
from inkpen.manifest.merging import add_l0
from inkpen.manifest.model import Manifest, SstDescriptor, VersionedManifest

log = get_logger("inkpen.penciller")

RETRY_AFTER = 1.0
"""Seconds before a failed L0 write or merge is tried again."""


@dataclass(frozen=True, slots=True)
class LedgerRoom:
    """Penciller to Bookie: an L0 write or a merge finished; pushes may be taken again. (Declared
    with its sender, which sits below the Bookie.)"""


@dataclass(frozen=True, slots=True)
class _AttachPenciller:
    """Ask, once at start-up: the actors the Penciller talks to."""

    bookie: pykka.ActorRef[Any]
    clerk: pykka.ActorRef[Any]


@dataclass(frozen=True, slots=True)
class _LoadLevels:
    """Ask, once at start-up: the manifest's SST files, open, in the manifest's shape
    (``levels[n]`` is Ln; ``levels[0]`` is L0)."""

    levels: tuple[tuple[SstHandle, ...], ...]


@dataclass(frozen=True, slots=True)
class _PushMem:
    """Take these ledger tables (newest first); answers True if taken.

    ``force`` takes them even when the Penciller's memory is over its limit (close, replay
    of last resort). ``past_l0_limit``: when refused, write memory to L0 even if
    ``max_l0_files`` already wait (the replay of a writer whose merges are a compactor's, which
    may not be running: its room must come from L0 writes alone)."""

    tables: tuple[MemTable, ...]
    force: bool = False
    past_l0_limit: bool = False


@dataclass(frozen=True, slots=True)
class _FlushMem:
    """Ask: write memory to L0 now (close); answers True once memory is empty and no write runs."""


@dataclass(frozen=True, slots=True)
class _CompactLedger:
    """Ask: answers True once no merge or L0 write is running or due; otherwise starts what is
    due and answers False."""


@dataclass(frozen=True, slots=True)
class _RegisterLedger:
    """Ask: register a ledger clone; answers the current :class:`LedgerView`."""

    snapshot_id: str
    long_running: bool


@dataclass(frozen=True, slots=True)
class _ReleaseLedger:
    snapshot_id: str


@dataclass(frozen=True, slots=True)
class _RetryFlush:
    """From the timer: try the L0 write that failed again."""


@dataclass(frozen=True, slots=True)
class _RetryMerge:
    """From the timer: try the merge that failed again."""


@dataclass(frozen=True, slots=True)
class _Watch:
    """From the timer (external compaction): look for a compactor's commits."""


class PencillerStats(TypedDict):
    """The Penciller's part of :class:`inkpen.Stats`. Per-level lists index from L0."""

    ledger_mem_entries: int
    ledger_mem_tables: int
    l0_writing: bool
    """An L0 file is being written from memory."""
    l0_files: int
    level_files: list[int]
    """Files per level: ``level_files[0]`` is L0's."""
    level_bytes: list[int]
    """Bytes per level, indexed as ``level_files``."""
    ledger_bytes: int
    persisted_sqn: int
    """Every change up to this SQN is in an SST."""
    l0_writes: int
    merges: int
    moves: int
    """Merges done by a manifest change alone (a file that overlapped nothing below)."""
    ledger_snapshots: int
    ledger_pending_deletes: int
    compaction: str
    """``internal`` (this writer merges) or ``external`` (a compactor process does)."""
    waiting_for_compactor: bool
    """External compaction: L0 is full and writers wait for the compactor."""


@dataclass(frozen=True, slots=True)
class _PencillerStats:
    """Ask: counters for ``Bookie.stats()``."""


@dataclass(frozen=True, slots=True)
class _ShutdownPenciller:
    """Ask: stop merging, stop every file clerk."""


class Penciller(FileOwner):
    """Owns the ledger: memory tables, L0 and levels, their SST clerks, the ledger manifest half."""

    def __init__(self, ctx: EngineContext, *, persisted_sqn: int) -> None:
        super().__init__(ctx, "penciller")
        self.mem: list[MemTable] = []
        self.writing: tuple[MemTable, ...] | None = None
        self.levels: Levels[SstHandle] = Levels()
        self.policy: MergePolicy = policy_for(ctx.options)
        self.persisted_sqn = persisted_sqn
        self.bookie: pykka.ActorRef[Any] | None = None
        self.clerk: pykka.ActorRef[Any] | None = None
        self.merging = False
        self._offered: LedgerView | None = None
        self._stopped = False
        """Stopped other than by the fence (closed, a lost file); the keeper holds the fence."""
        self.failed: InkpenError | None = None
        """Why the ledger can change no more (a file it names is gone): flushes raise it."""
        self.l0_writes = 0
        self.merges = 0
        self.moves = 0
        self.external = ctx.options.compaction == "external"
        """Merges are a compactor process's: adopt its levels (:mod:`.external`), run none."""
        self.adopted = ctx.keeper.latest.id
        """External compaction: the manifest whose levels the published view holds."""
        self._publish()

    @property
    def stopped(self) -> bool:
        """Whether the ledger changes no more: closed, failed for good, or fenced (the keeper)."""
        return self._stopped or self.ctx.keeper.fenced is not None

    @handles(_LoadLevels)
    def _load(self, message: _LoadLevels) -> None:
        """Install the SST files found at start-up (already open)."""
        self.levels = Levels(message.levels)
        self._publish()

    @handles(_AttachPenciller)
    def _attach(self, message: _AttachPenciller) -> None:
        self.bookie = message.bookie
        self.clerk = message.clerk
        if self.external:
            self.ctx.keeper.set_floor("penciller.view", self.adopted)
            self.ctx.scheduler.after(compactor_levels.WATCH_INTERVAL, self.actor_ref, _Watch())
        self._maybe_merge()

    def _publish(self) -> None:
        self.ctx.board.ledger = LedgerView(
            manifest_id=self.ctx.keeper.latest.id,
            mem=tuple(self.mem),
            files=self.levels,
            persisted_sqn=self.persisted_sqn,
        )

    def _mem_entries(self) -> int:
        return sum(len(t) for t in self.mem)

    # -- memory and L0 ------------------------------------------------------------------------

    @handles(_PushMem)
    def _push(self, message: _PushMem) -> bool:
        """Take pushed tables while memory is under twice ``l0_cache_entries``.

        Memory can therefore exceed that limit by at most one push (the Bookie's cache, itself
        bounded by its own backpressure). A refused push starts an L0 write if none runs and L0
        has room, so the Bookie always gets its room back.
        """
        if self.stopped:
            return False
        if not message.force and self._mem_entries() >= 2 * self.ctx.options.l0_cache_entries:
            self._maybe_flush(force=True, respect_l0_limit=not message.past_l0_limit)
            return False
        self.mem[0:0] = list(message.tables)
        self._publish()
        self._maybe_flush()
        return True

    def _flush_due(self) -> bool:
        """Whether memory is over its limit and L0 has room: an L0 write should be under way
        (after a failed one, the retry timer has not fired yet)."""
        options = self.ctx.options
        return (
            self.writing is None
            and not self.stopped
            and self._mem_entries() >= options.l0_cache_entries
            and len(self.levels.l0) < options.max_l0_files
        )

    def _maybe_flush(self, *, force: bool = False, respect_l0_limit: bool = False) -> None:
        if self.writing is not None or not self.mem or self.stopped:
            return
        options = self.ctx.options
        if not force and self._mem_entries() < options.l0_cache_entries:
            return
        if (not force or respect_l0_limit) and len(self.levels.l0) >= options.max_l0_files:
            return
        self.writing = tuple(self.mem)
        clerk = start_clerk(self.ctx, SstClerk, self.actor_ref)  # a fresh name, new_name's
        build_l0(
            clerk,
            self.writing,
            reply_to=self.actor_ref,
            shape=SstShape.of(options),
            compute_workers=options.compute_workers,
        )

    @handles(L0Written)
    def _l0_written(self, message: L0Written) -> None:
        descriptor = message.handle.descriptor
        persisted = max(self.persisted_sqn, message.max_sqn)
        after = self.levels.with_l0(message.handle)

        def change(m: Manifest) -> Manifest:
            if self.external:  # the compactor's changes stay: add to the latest manifest's L0
                return add_l0(m, descriptor, persisted)
            return dataclasses.replace(
                m,
                ledger=dataclasses.replace(
                    m.ledger,
                    levels=after.map(_descriptor).to_manifest(),
                    persisted_sqn=max(m.ledger.persisted_sqn, persisted),
                ),
            )

        def install(versioned: VersionedManifest) -> None:
            written = {id(t) for t in message.tables}
            self.mem = [t for t in self.mem if id(t) not in written]
            self.writing = None
            self.levels = after
            if self.external:
                try:
                    self._adopt(versioned, known=(message.handle,))
                except Exception as exc:  # the view keeps its older files; the watch retries
                    log.warning("ledger.adopt_failed", error=str(exc))
            self.persisted_sqn = persisted
            self.l0_writes += 1
            meter = self.ctx.meter
            meter.l0_writes += 1
            meter.l0_bytes_written += descriptor.size
            self._publish()
            log.info(
                "ledger.l0_flush",
                name=descriptor.name,
                entries=descriptor.entry_count,
                bytes=descriptor.size,
                persisted_sqn=persisted,
                ms=round(message.seconds * 1000, 2),
            )
            self._room()
            self._maybe_merge()
            self._maybe_flush()

        def roll_back(_: InkpenError) -> None:
            self.writing = None
            self._room()

        commit_or_roll_back(
            self.ctx.keeper,
            change,
            reason="ledger.l0_flush",
            failed_event="ledger.l0_commit_failed",
            new_files=[message.handle],
            in_flight=self.ctx.in_flight,
            install=install,
            roll_back=roll_back,
            # writers may be held back waiting for this flush: nothing else retries it
            retry=lambda after: self.ctx.scheduler.after(after, self.actor_ref, _RetryFlush()),
        )

    @handles(L0Failed)
    def _l0_failed(self, message: L0Failed) -> None:
        self.writing = None
        if self._failed_for_good(()):
            self._room()
            return
        self._room()
        self.ctx.scheduler.after(RETRY_AFTER, self.actor_ref, _RetryFlush())

    @handles(_RetryFlush)
    def _retry_flush(self, _: _RetryFlush) -> None:
        self._maybe_flush()

    @handles(_FlushMem)
    def _flush_mem(self, _: _FlushMem) -> bool:
        if self.failed is not None:
            raise self.failed
        if self.stopped or (not self.mem and self.writing is None):
            return True
        self._maybe_flush(force=True)
        return False

    def _room(self) -> None:
        self.ctx.ledger_room.set()
        if self.bookie is not None:
            send(self.bookie, LedgerRoom())

    # -- merges -----------------------------------------------------------------------------

    def _maybe_merge(self) -> None:
        if self.external or self.merging or self.clerk is None or self.stopped:
            return
        self.merging = True
        self._offered = self.ctx.board.ledger
        offer_work(self.clerk, self._offered, self.actor_ref)

    @handles(MergeIdle)
    def _merge_idle(self, message: MergeIdle) -> None:
        self.merging = False
        if message.failed and self._failed_for_good(message.missing):
            self._room()
            return
        self._room()
        if message.failed:
            self.ctx.scheduler.after(RETRY_AFTER, self.actor_ref, _RetryMerge())
        elif self.ctx.board.ledger is not self._offered:
            # The ledger changed while the clerk looked at an older view: offer the new one.
            self._maybe_merge()

    def _failed_for_good(self, missing: tuple[str, ...]) -> bool:
        """After a failed L0 write or merge: re-read the manifest before retrying.

        A newer writer epoch there fences this writer (its merges may well have deleted our
        inputs). An input the latest manifest still names but the store no longer holds is lost:
        retrying would spin for ever, so the Penciller stops and halts the writer, loudly.
        Answers True when there is to be no retry.
        """
        keeper = self.ctx.keeper
        try:
            latest = keeper.refresh()
        except FencedError:  # the keeper holds the fence now: stopped
            return True
        except StoreError as exc:
            log.warning("ledger.refresh_failed", error=str(exc))
            return False
        if not missing:
            return False
        named = {name for _, name in latest.manifest.referenced_objects()}
        lost = [name for name in missing if name in named]
        if not lost:
            return False
        error = CorruptionError(
            lost[0],
            f"the ledger file is named by manifest {latest.id} but gone from the store (deleted "
            "by another process); this Bookie has stopped writing. Run `inkpen verify` on the "
            "database and restore it from a backup",
        )
        log.error("ledger.file_missing", name=lost[0], manifest=latest.id)
        self.failed = error
        self._stopped = True
        self.ctx.halt(error)
        return True

    @handles(_RetryMerge)
    def _retry_merge(self, _: _RetryMerge) -> None:
        self._maybe_merge()

    @handles(_CompactLedger)
    def _compact(self, _: _CompactLedger) -> bool:
        if self.failed is not None:
            raise self.failed
        if self.stopped:
            return True
        if self.merging:
            return False
        job = None if self.external else self.policy.choose(self.levels, turn=0)
        if job is None and self.writing is None and not self._flush_due():
            return True
        self._maybe_flush()  # a failed L0 write waiting for its retry goes now
        self._maybe_merge()
        return False

    @handles(MergeDone)
    def _merge_done(self, message: MergeDone) -> None:
        self.merging = False
        if self.stopped:
            self.ctx.in_flight.discard(h.name for h in message.added)
            for handle in message.added:
                stop(handle.clerk)
            return
        job = message.job
        try:
            after = self.levels.apply(
                (h.name for h in job.inputs), job.target_level, job.outputs(message.added)
            )
        except LevelError as exc:  # an impossible result: dropped like a failed commit
            self.ctx.in_flight.discard(h.name for h in message.added)
            log.warning("ledger.merge_commit_failed", error=str(exc))
            for handle in message.added:
                stop(handle.clerk)
            self.ctx.scheduler.after(RETRY_AFTER, self.actor_ref, _RetryMerge())
            self._room()
            return

        def change(m: Manifest) -> Manifest:
            return dataclasses.replace(
                m, ledger=dataclasses.replace(m.ledger, levels=after.map(_descriptor).to_manifest())
            )

        commit_or_roll_back(
            self.ctx.keeper,
            change,
            reason="ledger.merge",
            new_files=message.added,
            in_flight=self.ctx.in_flight,
            install=lambda versioned: self._install_merge(message, after, versioned),
            roll_back=lambda _: self._room(),
            # as after a failed merge: writers may be waiting for L0 to drain
            retry=lambda after: self.ctx.scheduler.after(after, self.actor_ref, _RetryMerge()),
        )

    def _install_merge(
        self, message: MergeDone, after: Levels[SstHandle], versioned: VersionedManifest
    ) -> None:
        job = message.job
        moved = {h.name for h in job.sources} if job.move else set()
        self.levels = after
        if job.move:
            self.moves += 1
        else:
            self.merges += 1
            meter = self.ctx.meter
            meter.merges += 1
            meter.merge_bytes_read += sum(h.descriptor.size for h in job.inputs)
            meter.merge_bytes_written += sum(h.descriptor.size for h in message.added)
            meter.merge_seconds += message.seconds
        self._publish()
        for handle in (*job.sources, *job.targets):
            if handle.name in moved or handle.clerk is None:
                continue
            self.retire(handle.name, handle.clerk, versioned.id)
        log.info(
            "ledger.merge",
            source_level=job.source_level,
            target_level=job.target_level,
            sources=len(job.sources),
            targets=len(job.targets),
            written=len(message.added),
            moved=len(moved),
            basement=job.basement,
            manifest=versioned.id,
        )
        self._room()
        self._maybe_flush()
        self._maybe_merge()

    # -- external compaction ----------------------------------------------------------------

    @handles(_Watch)
    def _watch(self, _: _Watch) -> None:
        if self.stopped:
            return
        try:
            latest = self.ctx.keeper.refresh()
            if latest.id > self.adopted:
                self._adopt(latest)
        except FencedError:
            return  # the keeper holds the fence: stopped
        except Exception as exc:
            log.warning("ledger.adopt_failed", error=str(exc))
        held = len(self.levels.l0) >= self.ctx.options.max_l0_files
        interval = compactor_levels.WATCH_INTERVAL_HELD if held else compactor_levels.WATCH_INTERVAL
        self.ctx.scheduler.after(interval, self.actor_ref, _Watch())

    def _adopt(self, versioned: VersionedManifest, known: tuple[SstHandle, ...] = ()) -> None:
        """Take the levels of ``versioned`` (a compactor's merges); set what they replaced to
        delete_pending at its id. The view floor keeps the writer checkpoint at or below the
        manifest the published view holds, so other processes' GC keeps its files."""
        wanted = versioned.manifest.ledger.levels
        if not compactor_levels.same_files(self.levels, wanted):
            levels, dropped = compactor_levels.adopt(
                self.levels,
                wanted,
                lambda missing: open_files(self.ctx, self.actor_ref, missing),
                known,
            )
            self.levels = levels
            for handle in dropped:
                if handle.clerk is not None:
                    self.retire(handle.name, handle.clerk, versioned.id)
            log.info(
                "ledger.adopted",
                manifest=versioned.id,
                l0_files=len(levels.l0),
                dropped=len(dropped),
            )
        self.adopted = max(self.adopted, versioned.id)
        self.ctx.keeper.set_floor("penciller.view", self.adopted)
        self._publish()
        self._room()
        self._maybe_flush()

    # -- snapshots and deletes --------------------------------------------------------------

    def _snapshot_floor(self) -> int:
        latest = self.ctx.keeper.latest.id
        return min(latest, self.adopted) if self.external else latest

    @handles(_RegisterLedger)
    def _register(self, message: _RegisterLedger) -> LedgerView:
        view = self.ctx.board.ledger
        self._register_snapshot(message.snapshot_id, long_running=message.long_running)
        return view

    @handles(_ReleaseLedger)
    def _release(self, message: _ReleaseLedger) -> None:
        self.registry.release(message.snapshot_id)

    # -- the rest -----------------------------------------------------------------------------

    @handles(_PencillerStats)
    def _stats(self, _: _PencillerStats) -> PencillerStats:
        return {
            "ledger_mem_entries": self._mem_entries(),
            "ledger_mem_tables": len(self.mem),
            "l0_writing": self.writing is not None,
            "l0_files": len(self.levels.l0),
            "level_files": self.levels.counts(),
            "level_bytes": self.levels.sizes(_size),
            "ledger_bytes": sum(h.descriptor.size for h in self.levels.all_files()),
            "persisted_sqn": self.persisted_sqn,
            "l0_writes": self.l0_writes,
            "merges": self.merges,
            "moves": self.moves,
            "ledger_snapshots": len(self.registry),
            "ledger_pending_deletes": len(self.pending_deletes),
            "compaction": "external" if self.external else "internal",
            "waiting_for_compactor": self.external
            and len(self.levels.l0) >= self.ctx.options.max_l0_files,
        }

    @handles(_ShutdownPenciller)
    def _shutdown(self, _: _ShutdownPenciller) -> None:
        self._stopped = True
        for handle in self.levels.all_files():
            stop(handle.clerk)
        self.stop_retiring()


# -- what other modules ask of the Penciller ----------------------------------------------------


def attach(
    penciller: pykka.ActorRef[Penciller],
    *,
    bookie: pykka.ActorRef[Any],
    clerk: pykka.ActorRef[Any],
) -> None:
    """Once at start-up: the actors the Penciller talks to."""
    call(penciller, _AttachPenciller(bookie, clerk))


def load_levels(
    penciller: pykka.ActorRef[Penciller], levels: tuple[tuple[SstHandle, ...], ...]
) -> None:
    """Once at start-up: the manifest's SST files, open, in the manifest's shape (``levels[0]``
    is L0)."""
    call(penciller, _LoadLevels(levels))


def push_mem(
    penciller: pykka.ActorRef[Penciller],
    tables: tuple[MemTable, ...],
    *,
    force: bool = False,
    past_l0_limit: bool = False,
) -> bool:
    """Hand ledger tables (newest first) to the Penciller; True if it took them.
    ``past_l0_limit``: a refusal still starts an L0 write when L0 is full (see ``_PushMem``)."""
    taken: bool = call(penciller, _PushMem(tables, force, past_l0_limit))
    return taken


def flush_mem(penciller: pykka.ActorRef[Penciller]) -> bool:
    """Write memory to L0 now; True once memory is empty and no write runs (raises the
    Penciller's error once it failed for good)."""
    done: bool = call(penciller, _FlushMem())
    return done


def compact(penciller: pykka.ActorRef[Penciller]) -> bool:
    """True once no merge or L0 write is running or due; otherwise starts what is due."""
    done: bool = call(penciller, _CompactLedger())
    return done


def register(
    penciller: pykka.ActorRef[Penciller], snapshot_id: str, long_running: bool
) -> LedgerView:
    """Register a ledger clone; answers the current ledger view."""
    view: LedgerView = call(penciller, _RegisterLedger(snapshot_id, long_running))
    return view


def release(penciller: pykka.ActorRef[Penciller], snapshot_id: str) -> None:
    """Drop a ledger clone's registration (a tell)."""
    send(penciller, _ReleaseLedger(snapshot_id))


def stats(penciller: pykka.ActorRef[Penciller]) -> PencillerStats:
    """Counters for ``Bookie.stats()``."""
    counters: PencillerStats = call(penciller, _PencillerStats())
    return counters


def shutdown(penciller: pykka.ActorRef[Penciller], *, timeout: float | None = None) -> None:
    """Stop merging and stop every file clerk."""
    call(penciller, _ShutdownPenciller(), timeout=timeout)


def _descriptor(handle: SstHandle) -> SstDescriptor:
    return handle.descriptor


def _size(handle: SstHandle) -> int:
    return handle.descriptor.size
