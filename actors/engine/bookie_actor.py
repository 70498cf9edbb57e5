"""The Bookie actor: the ledger cache of recent changes, the release of writers, and snapshots.

The public :class:`inkpen.Bookie` handle validates each call and hands writes to the Inker's
intake; this actor is where a durable batch comes back (:class:`ApplyBatch` from the Inker). The
Bookie turns the batch's journal entries into ledger entries (the object's metadata plus one
entry per index spec), adds them to its cache, publishes the cache on the view board, advances
the writer's news of applied changes (``ctx.applied``, which tails of its feed wait on), and only
then releases the batch's callers, so a put that has returned is visible to every later read.

The cache is a short list of immutable tables, newest first; a new table is merged with the one
before it whenever it is at least half that one's size, so there are only a logarithmic number of
tables to search. When the cache reaches ``ledger_cache_entries`` it is merged into one table and
pushed to the Penciller. A refused push (the Penciller's memory is full while L0 files wait for
merges) leaves the cache growing; past twice the threshold writers are slowed, past four times
they are blocked, until the Penciller says there is room (:class:`LedgerRoom`).

Snapshots are made here, because only here are the cache and the ledger view exactly in step:
the Bookie registers a journal clone with the Inker, takes its own cache view, registers a ledger
clone with the Penciller (no push can happen in between: pushes come from this actor), and adds
the Inker's current view for segments written meanwhile.

The Inker and the Penciller tell it ``ApplyBatch`` and ``LedgerRoom`` (declared with their
senders, :mod:`inkpen.actors.write.inker` and :mod:`inkpen.actors.ledger.penciller`, which sit
below this room); everything else is asked through the functions at the end of
this module (``take_snapshot``, ``close_snapshot``, ``compact_journal``, ``push_all``, ``stats``).
"""

from __future__ import annotations

import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pykka

from inkpen.actors.base import ActorGone, InkpenActor, call, handles, send, stop
from inkpen.actors.engine.snapshot_clones import (
    PairedJournal,
    SnapshotParts,
    start_journal_clone,
    start_ledger_clone,
)
from inkpen.actors.journal import inker_clerk as inker_clerk_actor
from inkpen.actors.journal.changes import ledger_entries
from inkpen.actors.journal.inker_clerk import CompactionReport, InkerClerk
from inkpen.actors.kernel.context import EngineContext
from inkpen.actors.kernel.throttle import NONE, SLOW, STOP
from inkpen.actors.kernel.views import CacheView, MemTable
from inkpen.actors.ledger import penciller as penciller_actor
from inkpen.actors.ledger.penciller import LedgerRoom, Penciller, PencillerStats
from inkpen.actors.read.path import lookup
from inkpen.actors.write import inker as inker_actor
from inkpen.actors.write.inker import REOPEN, ApplyBatch, CompactJournal, Inker, InkerStats
from inkpen.errors import FencedError, InkpenError, UsageError
from inkpen.logs import get_logger
from inkpen.options import HEAD_ONLY_TRIM_INTERVAL

log = get_logger("inkpen.bookie")


@dataclass(frozen=True, slots=True)
class _AttachBookie:
    inker: pykka.ActorRef[Inker]
    penciller: pykka.ActorRef[Penciller]
    inker_clerk: pykka.ActorRef[InkerClerk]


@dataclass(frozen=True, slots=True)
class _PushAll:
    """Ask (close): push the whole cache to the Penciller, taken whatever its memory holds."""


@dataclass(frozen=True, slots=True)
class _TakeSnapshot:
    """Ask: build a snapshot; answers its :class:`SnapshotParts`."""

    long_running: bool
    ledger_only: bool


@dataclass(frozen=True, slots=True)
class _CloseSnapshot:
    """Tell: stop a snapshot's clones (releasing their registrations)."""

    snapshot_id: str


@dataclass(frozen=True, slots=True)
class _CompactionDue:
    """From the timer: time for a scheduled journal compaction (``compaction_interval``)."""


@dataclass(frozen=True, slots=True)
class _BookieStats:
    """Ask: the counters of ``Bookie.stats()``, gathered from the three owners."""


@dataclass(frozen=True, slots=True)
class _ShutdownBookie:
    """Ask: stop every live snapshot's clones."""


class LedgerSnapshot:
    """A snapshot as journal compaction uses it: ledger lookups, its highest SQN, release. Its
    journal clone is registered with the Inker before the compaction chooses any file, so every
    journal file a later commit drops (a re-roll, another compaction) stays on the store until
    the compaction releases it: the file's clerk is told to wait, and the writer checkpoint keeps
    it from GC whatever ``min_age``."""

    def __init__(self, parts: SnapshotParts, bookie: pykka.ActorRef[Any]) -> None:
        self._parts = parts
        self._bookie = bookie
        self.max_sqn = parts.max_sqn()

    def get(self, key: bytes) -> Any:
        return lookup(self._parts.cache, self._parts.ledger, key)

    def release(self) -> None:
        send(self._bookie, _CloseSnapshot(self._parts.snapshot_id))


class Bookie(InkpenActor):
    """Owns the ledger cache; applies durable batches; pushes to the Penciller; makes snapshots."""

    def __init__(self, ctx: EngineContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.tables: list[MemTable] = []
        self.inker: pykka.ActorRef[Inker] | None = None
        self.penciller: pykka.ActorRef[Penciller] | None = None
        self.inker_clerk: pykka.ActorRef[InkerClerk] | None = None
        self.snapshots: dict[str, tuple[pykka.ActorRef[Any], ...]] = {}
        self.pushes = 0
        self.refused_pushes = 0

    @handles(_AttachBookie)
    def _attach(self, message: _AttachBookie) -> None:
        self.inker = message.inker
        self.penciller = message.penciller
        self.inker_clerk = message.inker_clerk
        self._schedule_compaction()

    def _schedule_compaction(self) -> None:
        options = self.ctx.options
        interval = options.compaction_interval
        if interval is None and options.head_only is not None:
            interval = HEAD_ONLY_TRIM_INTERVAL  # a head-only store trims its journal on its own
        if interval is not None and options.compaction == "internal":
            self.ctx.scheduler.after(interval, self.actor_ref, _CompactionDue())

    @handles(_CompactionDue)
    def _compaction_due(self, _: _CompactionDue) -> None:
        try:
            if self.ctx.keeper.fenced is None and self.inker_clerk is not None:
                self._compact(CompactJournal(Future()))
        finally:
            self._schedule_compaction()

    # -- the cache --------------------------------------------------------------------------

    def _entries(self) -> int:
        return sum(len(t) for t in self.tables)

    def _publish(self) -> None:
        self.ctx.board.cache = CacheView(tuple(self.tables))

    @handles(ApplyBatch)
    def _apply(self, message: ApplyBatch) -> None:
        batch = message.batch
        pairs = []
        inline = self.ctx.options.inline_value_bytes
        try:
            for change, entry in zip(batch.changes, message.entries, strict=True):
                pairs.extend(
                    ledger_entries(
                        entry, change.bucket, change.key, change.content_hash, inline_limit=inline
                    )
                )
        except Exception as exc:
            log.error("bookie.apply_failed", error=repr(exc))
            batch.fail(
                InkpenError(
                    "these writes are durable in the journal but could not be cached for reads; "
                    f"close and reopen the database to see them ({exc})"
                )
            )
            return
        tables = [MemTable.of(pairs), *self.tables]
        while len(tables) > 1 and 2 * len(tables[0]) >= len(tables[1]):
            tables[0:2] = [MemTable.merged(tables[0:2])]
        self.tables = tables
        self._publish()
        if message.entries:  # readable now: wake the tails of this writer's feed
            self.ctx.applied.advance(message.entries[-1].sqn)
        batch.complete()
        if self._entries() >= self.ctx.options.ledger_cache_entries:
            self._push()
        self._set_pressure()

    def _push(self, *, force: bool = False) -> bool:
        if not self.tables or self.penciller is None:
            return True
        merged = MemTable.merged(self.tables) if len(self.tables) > 1 else self.tables[0]
        if not penciller_actor.push_mem(self.penciller, (merged,), force=force):
            self.refused_pushes += 1
            return False
        self.pushes += 1
        self.tables = []
        self._publish()
        return True

    def _set_pressure(self) -> None:
        ratio = self._entries() / self.ctx.options.ledger_cache_entries
        level = STOP if ratio >= 4 else SLOW if ratio >= 2 else NONE
        self.ctx.throttle.set("ledger_cache", level)

    @handles(LedgerRoom)
    def _room(self, _: LedgerRoom) -> None:
        if self._entries() >= self.ctx.options.ledger_cache_entries:
            self._push()
        self._set_pressure()

    @handles(_PushAll)
    def _push_all(self, _: _PushAll) -> None:
        self._push(force=True)
        self._set_pressure()

    # -- snapshots --------------------------------------------------------------------------

    @handles(_TakeSnapshot)
    def _take(self, message: _TakeSnapshot) -> SnapshotParts:
        assert self.inker is not None and self.penciller is not None
        snapshot_id = uuid.uuid4().hex
        clones: list[pykka.ActorRef[Any]] = []
        try:
            registered = None
            if not message.ledger_only:
                journal_clone, registered = start_journal_clone(
                    self.inker, snapshot_id, message.long_running
                )
                clones.append(journal_clone)
            cache = self.ctx.board.cache
            ledger_clone, ledger = start_ledger_clone(
                self.penciller, snapshot_id, message.long_running
            )
            clones.append(ledger_clone)
        except Exception:
            for clone in clones:
                stop(clone)
            raise
        journal = None if registered is None else PairedJournal(self.ctx.board.journal, registered)
        self.snapshots[snapshot_id] = tuple(clones)
        return SnapshotParts(snapshot_id, cache, ledger, journal, tuple(clones))

    @handles(_CloseSnapshot)
    def _close_snapshot(self, message: _CloseSnapshot) -> None:
        for clone in self.snapshots.pop(message.snapshot_id, ()):
            clone.stop(block=False)

    @handles(CompactJournal)
    def _compact(self, message: CompactJournal) -> None:
        assert self.inker_clerk is not None
        fenced = self.ctx.keeper.fenced
        if fenced is not None:
            message.result.set_exception(fenced)
            return
        if self.ctx.options.compaction == "external":
            message.result.set_exception(
                UsageError(
                    "this Bookie was opened with compaction='external': journal compaction is "
                    "the compactor's (inkpen.open_compactor, or `inkpen compactor URL`)"
                )
            )
            return
        # Not ledger_only: the journal clone registers the files the compaction will choose.
        parts = self._take(_TakeSnapshot(long_running=True, ledger_only=False))
        snapshot = LedgerSnapshot(parts, self.actor_ref)
        if not inker_clerk_actor.compact(self.inker_clerk, snapshot, message.result):
            snapshot.release()
            message.result.set_exception(ActorGone("the Inker's clerk has stopped"))

    # -- the rest -----------------------------------------------------------------------------

    @handles(_BookieStats)
    def _stats(self, _: _BookieStats) -> Stats:
        assert self.inker is not None and self.penciller is not None
        return {
            "ledger_cache_entries": self._entries(),
            "ledger_cache_tables": len(self.tables),
            "pushes": self.pushes,
            "refused_pushes": self.refused_pushes,
            "pressure": self.ctx.throttle.levels(),
            "throttled_puts": self.ctx.throttle.waiting,
            "snapshots": len(self.snapshots),
            "fenced": self.ctx.keeper.fenced is not None,
            "stopped": _stopped(self.ctx),
            **inker_actor.stats(self.inker),
            **penciller_actor.stats(self.penciller),
        }

    @handles(_ShutdownBookie)
    def _shutdown(self, _: _ShutdownBookie) -> None:
        for clones in self.snapshots.values():
            for clone in clones:
                stop(clone)
        self.snapshots.clear()


class Stats(InkerStats, PencillerStats):
    """What ``Bookie.stats()`` answers: a dict with these keys (the Bookie's own below, the
    Inker's in :class:`~inkpen.actors.write.inker.InkerStats`, the Penciller's in
    :class:`~inkpen.actors.ledger.penciller.PencillerStats`). A snapshot, not a live view."""

    ledger_cache_entries: int
    """Recent changes the Bookie holds until the Penciller takes them."""
    ledger_cache_tables: int
    pushes: int
    """Pushes of the cache to the Penciller since open."""
    refused_pushes: int
    """Pushes the Penciller refused (its memory full while L0 waits): backpressure."""
    pressure: dict[str, int]
    """Backpressure level by reason (0 none, 1 slow, 2 stop)."""
    throttled_puts: int
    """Puts held back by backpressure right now."""
    snapshots: int
    fenced: bool
    """A newer writer has opened the database: this handle writes no more."""
    stopped: str | None
    """Why the writer takes no more writes ("reopen the Bookie: ..."), or None."""


def _stopped(ctx: EngineContext) -> str | None:
    """Why this writer takes no more writes, beginning "reopen the Bookie: " (None while it
    does: a store outage stops it only until the store answers again)."""
    error = ctx.throttle.error
    if error is None:
        return None
    if isinstance(error, FencedError):
        return f"{REOPEN}a newer writer has opened the database ({error})"
    text = str(error)
    return text if text.startswith(REOPEN) else f"{REOPEN}{text}"


# -- what other modules ask of the Bookie actor -------------------------------------------------


def attach(
    bookie: pykka.ActorRef[Bookie],
    *,
    inker: pykka.ActorRef[Inker],
    penciller: pykka.ActorRef[Penciller],
    inker_clerk: pykka.ActorRef[InkerClerk],
) -> None:
    """Once at start-up: the actors the Bookie talks to."""
    call(bookie, _AttachBookie(inker, penciller, inker_clerk))


def push_all(bookie: pykka.ActorRef[Bookie]) -> None:
    """Push the whole cache to the Penciller, taken whatever its memory holds."""
    call(bookie, _PushAll())


def take_snapshot(
    bookie: pykka.ActorRef[Bookie], *, long_running: bool, ledger_only: bool
) -> SnapshotParts:
    """Build a snapshot: its frozen views and clone actors."""
    parts: SnapshotParts = call(bookie, _TakeSnapshot(long_running, ledger_only))
    return parts


def close_snapshot(bookie: pykka.ActorRef[Bookie], snapshot_id: str) -> bool:
    """Stop a snapshot's clones, releasing their registrations (a tell); False if the Bookie
    has stopped."""
    return send(bookie, _CloseSnapshot(snapshot_id))


def compact_journal(bookie: pykka.ActorRef[Bookie], result: Future[CompactionReport]) -> None:
    """Start a journal compaction against a fresh ledger snapshot; its report goes to
    ``result``."""
    call(bookie, CompactJournal(result))


def stats(bookie: pykka.ActorRef[Bookie]) -> Stats:
    """The counters of ``Bookie.stats()``, gathered from the three owners."""
    counters: Stats = call(bookie, _BookieStats())
    return counters


def shutdown(bookie: pykka.ActorRef[Bookie], *, timeout: float | None = None) -> None:
    """Stop every live snapshot's clones."""
    call(bookie, _ShutdownBookie(), timeout=timeout)
