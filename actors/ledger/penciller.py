"""The Penciller: owner of the ledger (keys, metadata and index entries, never values).

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

The Penciller's clerk (:mod:`inkpen.actors.ledger.clerk`) chooses and runs merges; the
Penciller commits each result in one manifest change and sets the replaced files' clerks to
delete_pending, confirming each deletion only when no registered snapshot older than the change
and no live checkpoint can still read the file.

Lookups never come here: the Penciller publishes a :class:`~inkpen.actors.read.views.LedgerView`
after every change, and readers search it (memory, then L0, then each level; bloom filters first).

Messages: ``AttachPenciller``, ``PushMem``, ``L0Written``/``L0Failed`` (SST clerks), ``FlushMem``,
``MergeDone``/``MergeIdle`` (the clerk), ``RegisterLedger``, ``ReleaseLedger``,
``ConfirmDelete``/``FileDeleted`` (file clerks), ``PencillerStats``, ``ShutdownPenciller``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import pykka

from inkpen.actors.base import handles, send, stop
from inkpen.actors.engine.context import EngineContext
from inkpen.actors.engine.registry import FileOwner
from inkpen.actors.files.clerk import SetForDelete
from inkpen.actors.files.sst_clerk import BuildL0, L0Failed, L0Written, SstClerk
from inkpen.actors.files.start import start_clerk
from inkpen.actors.ledger.clerk import MergeDone, MergeIdle, MergeWork, choose_job
from inkpen.actors.messages import LedgerRoom, PushMem
from inkpen.actors.read.views import LedgerView, Level, MemTable, SstHandle
from inkpen.errors import CorruptionError, FencedError, InkpenError, StoreError
from inkpen.logs import get_logger
from inkpen.manifest.model import Manifest
from inkpen.manifest.paths import new_file_id, sst_key

log = get_logger("inkpen.penciller")

RETRY_AFTER = 1.0
"""Seconds before a failed L0 write or merge is tried again."""


@dataclass(frozen=True, slots=True)
class AttachPenciller:
    """Ask, once at start-up: the actors the Penciller talks to."""

    bookie: pykka.ActorRef[Any]
    clerk: pykka.ActorRef[Any]


@dataclass(frozen=True, slots=True)
class LoadLevels:
    """Ask, once at start-up: the manifest's SST files, open; ``levels[0]`` is L1."""

    l0: tuple[SstHandle, ...]
    levels: tuple[tuple[SstHandle, ...], ...]


@dataclass(frozen=True, slots=True)
class FlushMem:
    """Ask: write memory to L0 now (close); answers True once memory is empty and no write runs."""


@dataclass(frozen=True, slots=True)
class CompactLedger:
    """Ask: answers True once no merge or L0 write is running or due; otherwise starts what is
    due and answers False."""


@dataclass(frozen=True, slots=True)
class RegisterLedger:
    """Ask: register a ledger clone; answers the current :class:`LedgerView`."""

    snapshot_id: str
    long_running: bool


@dataclass(frozen=True, slots=True)
class ReleaseLedger:
    snapshot_id: str


@dataclass(frozen=True, slots=True)
class _RetryFlush:
    """From the timer: try the L0 write that failed again."""


@dataclass(frozen=True, slots=True)
class _RetryMerge:
    """From the timer: try the merge that failed again."""


@dataclass(frozen=True, slots=True)
class PencillerStats:
    """Ask: counters for ``Bookie.stats()``."""


@dataclass(frozen=True, slots=True)
class ShutdownPenciller:
    """Ask: stop merging, stop every file clerk."""


class Penciller(FileOwner):
    """Owns the ledger: memory tables, L0 and levels, their SST clerks, the ledger manifest half."""

    def __init__(self, ctx: EngineContext, *, persisted_sqn: int) -> None:
        super().__init__(ctx, "penciller")
        self.mem: list[MemTable] = []
        self.writing: tuple[MemTable, ...] | None = None
        self.l0: list[SstHandle] = []
        self.levels: list[list[SstHandle]] = []
        self.persisted_sqn = persisted_sqn
        self.bookie: pykka.ActorRef[Any] | None = None
        self.clerk: pykka.ActorRef[Any] | None = None
        self.merging = False
        self._offered: LedgerView | None = None
        self.stopped = False
        self.failed: InkpenError | None = None
        """Why the ledger can change no more (a file it names is gone): flushes raise it."""
        self.l0_writes = 0
        self.merges = 0
        self.moves = 0
        self._publish()

    @handles(LoadLevels)
    def _load(self, message: LoadLevels) -> None:
        """Install the SST files found at start-up (already open)."""
        self.l0 = list(message.l0)
        self.levels = [list(level) for level in message.levels]
        self._publish()

    @handles(AttachPenciller)
    def _attach(self, message: AttachPenciller) -> None:
        self.bookie = message.bookie
        self.clerk = message.clerk
        self._maybe_merge()

    def _publish(self) -> None:
        self.ctx.board.ledger = LedgerView(
            manifest_id=self.ctx.keeper.latest.id,
            mem=tuple(self.mem),
            l0=tuple(self.l0),
            levels=tuple(Level.of(files) for files in self.levels),
            persisted_sqn=self.persisted_sqn,
        )

    def _mem_entries(self) -> int:
        return sum(len(t) for t in self.mem)

    # -- memory and L0 ------------------------------------------------------------------------

    @handles(PushMem)
    def _push(self, message: PushMem) -> bool:
        """Take pushed tables while memory is under twice ``l0_cache_entries``.

        Memory can therefore exceed that limit by at most one push (the Bookie's cache, itself
        bounded by its own backpressure). A refused push starts an L0 write if none runs and L0
        has room, so the Bookie always gets its room back.
        """
        if self.stopped:
            return False
        if not message.force and self._mem_entries() >= 2 * self.ctx.options.l0_cache_entries:
            self._maybe_flush(force=True, respect_l0_limit=True)
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
            and len(self.l0) < options.max_l0_files
        )

    def _maybe_flush(self, *, force: bool = False, respect_l0_limit: bool = False) -> None:
        if self.writing is not None or not self.mem or self.stopped:
            return
        options = self.ctx.options
        if not force and self._mem_entries() < options.l0_cache_entries:
            return
        if (not force or respect_l0_limit) and len(self.l0) >= options.max_l0_files:
            return
        self.writing = tuple(self.mem)
        name = sst_key(new_file_id())
        clerk = self._new_clerk(name)
        send(
            clerk,
            BuildL0(
                self.writing,
                self.actor_ref,
                options.sst_block_bytes,
                options.bloom_bits_per_key,
                options.compute_workers,
            ),
        )

    def _new_clerk(self, name: str) -> pykka.ActorRef[Any]:
        return start_clerk(self.ctx, SstClerk, self.actor_ref, name=name)

    @handles(L0Written)
    def _l0_written(self, message: L0Written) -> None:
        descriptor = message.handle.descriptor
        persisted = max(self.persisted_sqn, message.max_sqn)

        def change(m: Manifest) -> Manifest:
            levels = list(m.ledger.levels) or [()]
            levels[0] = (descriptor, *levels[0])
            return dataclasses.replace(
                m,
                ledger=dataclasses.replace(
                    m.ledger,
                    levels=tuple(levels),
                    persisted_sqn=max(m.ledger.persisted_sqn, persisted),
                ),
            )

        try:
            self.ctx.keeper.commit(change, reason="ledger.l0_flush", new_files=[descriptor.name])
        except InkpenError as exc:
            self.ctx.in_flight.discard([descriptor.name])
            self.writing = None
            stop(message.handle.clerk)
            log.warning("ledger.l0_commit_failed", error=str(exc))
            if isinstance(exc, FencedError):
                self.stopped = True
            else:  # writers may be held back waiting for this flush: nothing else retries it
                self.ctx.scheduler.after(RETRY_AFTER, self.actor_ref, _RetryFlush())
            self._room()
            return
        self.ctx.in_flight.discard([descriptor.name])
        written = {id(t) for t in message.tables}
        self.mem = [t for t in self.mem if id(t) not in written]
        self.writing = None
        self.l0.insert(0, message.handle)
        self.persisted_sqn = persisted
        self.l0_writes += 1
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

    @handles(FlushMem)
    def _flush_mem(self, _: FlushMem) -> bool:
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
        if self.merging or self.clerk is None or self.stopped:
            return
        self.merging = True
        self._offered = self.ctx.board.ledger
        send(self.clerk, MergeWork(self._offered, self.actor_ref))

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
        except FencedError:
            self.stopped = True
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
        self.stopped = True
        self.ctx.halt(error)
        return True

    @handles(_RetryMerge)
    def _retry_merge(self, _: _RetryMerge) -> None:
        self._maybe_merge()

    @handles(CompactLedger)
    def _compact(self, _: CompactLedger) -> bool:
        if self.failed is not None:
            raise self.failed
        if self.stopped:
            return True
        if self.merging:
            return False
        options = self.ctx.options
        job = choose_job(
            self.ctx.board.ledger,
            l1_files=options.l1_target_files,
            fanout=options.level_fanout,
            turn=0,
        )
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
        removed = {h.name for h in job.sources} | {h.name for h in job.targets}
        moved = {h.name for h in message.moved}
        added = [h.descriptor for h in message.added]
        moved_descriptors = [h.descriptor for h in message.moved]
        target = job.target_level

        def change(m: Manifest) -> Manifest:
            levels = [list(level) for level in m.ledger.levels]
            while len(levels) <= target:
                levels.append([])
            levels = [[d for d in level if d.name not in removed] for level in levels]
            levels[target].extend(added)
            levels[target].extend(moved_descriptors)
            levels[target].sort(key=lambda d: d.first_key)
            while len(levels) > 1 and not levels[-1]:
                levels.pop()
            return dataclasses.replace(
                m, ledger=dataclasses.replace(m.ledger, levels=tuple(tuple(lv) for lv in levels))
            )

        try:
            versioned = self.ctx.keeper.commit(
                change, reason="ledger.merge", new_files=[h.name for h in message.added]
            )
        except InkpenError as exc:
            self.ctx.in_flight.discard(h.name for h in message.added)
            log.warning("ledger.merge_commit_failed", error=str(exc))
            for handle in message.added:
                stop(handle.clerk)
            if isinstance(exc, FencedError):
                self.stopped = True
            else:  # as after a failed merge: writers may be waiting for L0 to drain
                self.ctx.scheduler.after(RETRY_AFTER, self.actor_ref, _RetryMerge())
            self._room()
            return
        self.ctx.in_flight.discard(h.name for h in message.added)
        self.l0 = [h for h in self.l0 if h.name not in removed]
        while len(self.levels) < target:
            self.levels.append([])
        self.levels = [[h for h in level if h.name not in removed] for level in self.levels]
        self.levels[target - 1].extend(message.added)
        self.levels[target - 1].extend(message.moved)
        while self.levels and not self.levels[-1]:
            self.levels.pop()
        if message.moved:
            self.moves += 1
        else:
            self.merges += 1
        self._publish()
        for handle in (*job.sources, *job.targets):
            if handle.name in moved or handle.clerk is None:
                continue
            self.pending_deletes[handle.name] = versioned.id
            send(handle.clerk, SetForDelete(versioned.id))
        log.info(
            "ledger.merge",
            source_level=job.source_level,
            target_level=target,
            sources=len(job.sources),
            targets=len(job.targets),
            written=len(message.added),
            moved=len(message.moved),
            basement=job.basement,
            manifest=versioned.id,
        )
        self._room()
        self._maybe_flush()
        self._maybe_merge()

    # -- snapshots and deletes --------------------------------------------------------------

    @handles(RegisterLedger)
    def _register(self, message: RegisterLedger) -> LedgerView:
        view = self.ctx.board.ledger
        self._register_snapshot(message.snapshot_id, long_running=message.long_running)
        return view

    @handles(ReleaseLedger)
    def _release(self, message: ReleaseLedger) -> None:
        self.registry.release(message.snapshot_id)

    # -- the rest -----------------------------------------------------------------------------

    @handles(PencillerStats)
    def _stats(self, _: PencillerStats) -> dict[str, Any]:
        return {
            "ledger_mem_entries": self._mem_entries(),
            "ledger_mem_tables": len(self.mem),
            "l0_writing": self.writing is not None,
            "l0_files": len(self.l0),
            "level_files": [len(level) for level in self.levels],
            "level_bytes": [sum(h.descriptor.size for h in level) for level in self.levels],
            "ledger_bytes": sum(h.descriptor.size for h in self.l0)
            + sum(h.descriptor.size for level in self.levels for h in level),
            "persisted_sqn": self.persisted_sqn,
            "l0_writes": self.l0_writes,
            "merges": self.merges,
            "moves": self.moves,
            "ledger_snapshots": len(self.registry),
            "ledger_pending_deletes": len(self.pending_deletes),
        }

    @handles(ShutdownPenciller)
    def _shutdown(self, _: ShutdownPenciller) -> None:
        self.stopped = True
        for handle in (*self.l0, *(h for level in self.levels for h in level)):
            stop(handle.clerk)
