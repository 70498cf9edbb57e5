"""Clones: the actors behind a snapshot, each registered with the owner whose files it reads.

A snapshot (Leveled's clone) is built from the owners' immutable state: the Bookie's cache view,
the Penciller's ledger view and the Inker's journal view. Two clone actors hold them:

- a :class:`LedgerClone` registers with the Penciller (so SSTs its view names are not deleted),
- a :class:`JournalClone` registers with the Inker (so journal files likewise).

A registration lapses after its timeout (``snapshot_timeout_short`` for queries,
``snapshot_timeout_long`` for long folds), so an abandoned clone holds nothing back for ever; a
clone releases its registration when it stops. Reads never go through a clone's mailbox: the
snapshot reads the views the clones hold, in the reader's own thread.

The journal side keeps two views: the one the Inker gave at registration (every file it names is
protected from that moment) and the Inker's current view taken after the ledger view (it holds
every segment the ledger view can name). A journal lookup tries the newer first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pykka

from inkpen.actors.base import InkpenActor, call, handles, stop
from inkpen.actors.kernel.views import CacheView, JournalView, LedgerView
from inkpen.actors.ledger import penciller as penciller_actor
from inkpen.actors.ledger.penciller import Penciller
from inkpen.actors.write import inker as inker_actor
from inkpen.actors.write.inker import Inker
from inkpen.formats.journal import JournalEntry, Kind


@dataclass(frozen=True, slots=True)
class _Establish:
    """Ask a clone to register with its owner; answers the owner's view."""


class LedgerClone(InkpenActor):
    """Holds a registered ledger view for one snapshot; releases it on stop."""

    def __init__(
        self, penciller: pykka.ActorRef[Penciller], snapshot_id: str, long_running: bool
    ) -> None:
        super().__init__()
        self.penciller = penciller
        self.snapshot_id = snapshot_id
        self.long_running = long_running
        self.view: LedgerView | None = None

    @handles(_Establish)
    def _establish(self, _: _Establish) -> LedgerView:
        self.view = penciller_actor.register(self.penciller, self.snapshot_id, self.long_running)
        return self.view

    def on_stop(self) -> None:
        if self.view is not None:
            penciller_actor.release(self.penciller, self.snapshot_id)


class JournalClone(InkpenActor):
    """Holds a registered journal view for one snapshot; releases it on stop."""

    def __init__(self, inker: pykka.ActorRef[Inker], snapshot_id: str, long_running: bool) -> None:
        super().__init__()
        self.inker = inker
        self.snapshot_id = snapshot_id
        self.long_running = long_running
        self.view: JournalView | None = None

    @handles(_Establish)
    def _establish(self, _: _Establish) -> JournalView:
        self.view = inker_actor.register(self.inker, self.snapshot_id, self.long_running)
        return self.view

    def on_stop(self) -> None:
        if self.view is not None:
            inker_actor.release(self.inker, self.snapshot_id)


def start_ledger_clone(
    penciller: pykka.ActorRef[Penciller], snapshot_id: str, long_running: bool
) -> tuple[pykka.ActorRef[LedgerClone], LedgerView]:
    """Start a ledger clone registered with the Penciller; answers it and its view."""
    clone = LedgerClone.start(penciller, snapshot_id, long_running)
    try:
        view: LedgerView = call(clone, _Establish())
    except BaseException:
        stop(clone)
        raise
    return clone, view


def start_journal_clone(
    inker: pykka.ActorRef[Inker], snapshot_id: str, long_running: bool
) -> tuple[pykka.ActorRef[JournalClone], JournalView]:
    """Start a journal clone registered with the Inker; answers it and its view."""
    clone = JournalClone.start(inker, snapshot_id, long_running)
    try:
        view: JournalView = call(clone, _Establish())
    except BaseException:
        stop(clone)
        raise
    return clone, view


@dataclass(frozen=True, slots=True)
class PairedJournal:
    """A snapshot's journal: the view after its ledger view, backed by the registered one."""

    current: JournalView
    registered: JournalView

    def entry(self, sqn: int, kind: Kind, ledger_key: bytes) -> JournalEntry | None:
        found = self.current.entry(sqn, kind, ledger_key)
        if found is None:
            found = self.registered.entry(sqn, kind, ledger_key)
        return found


@dataclass(frozen=True, slots=True)
class SnapshotParts:
    """What the Bookie hands a new snapshot: its frozen views and its clone actors."""

    snapshot_id: str
    cache: CacheView
    ledger: LedgerView
    journal: PairedJournal | None
    clones: tuple[pykka.ActorRef[Any], ...]

    def max_sqn(self) -> int:
        """The highest SQN the ledger side of the snapshot can see."""
        sqns = [t.max_sqn for t in self.cache.tables]
        sqns += [t.max_sqn for t in self.ledger.mem]
        sqns.append(self.ledger.persisted_sqn)
        sqns += [h.descriptor.max_sqn for h in self.ledger.handles()]
        return max(sqns)
