"""What every file clerk shares: the end of a file's life (delete_pending, then deletion).

Every stored SST and journal file has one clerk actor (Leveled's file processes). A clerk's states::

    writing ──(object written, reader open)──▶ reading ──(_SetForDelete)──▶ delete_pending
                                                                              │
                            ◀──(_DeleteDeferred: poll again, back-off doubles)─┤
                                                                              ▼
                                               (_DeleteConfirmed) object deleted, clerk stops

A clerk enters ``delete_pending`` when a committed manifest no longer names its file. From then on
it still serves reads, and it asks its owner (the Penciller for SSTs, the Inker for journal files)
with :class:`ConfirmDelete` whether the file may go; the owner answers "delete" only when no
registered snapshot older than the change and no live checkpoint can still read it
(:func:`answer_confirm_delete`); otherwise "deferred", and the clerk asks again later, waiting twice
as long each time (up to a minute). Owners never wait on a clerk (all messages here are tells), so a
clerk and its owner cannot deadlock.

A confirmed clerk hands its file to the writer's batched deleter
(:mod:`inkpen.actors.kernel.deleter`), which deletes the files of several clerks in one request,
and stays in ``delete_pending`` until it hears how its own key's delete ended: gone, and the clerk
stops; failed, and it asks its owner again later, waiting twice as long each time (without a
deleter it deletes the file itself).

Messages a clerk answers are private to this module; owners send them through
:func:`set_for_delete` and :func:`answer_confirm_delete`. :class:`ConfirmDelete` and
:class:`FileDeleted` go the other way: they are the owner protocol, handled by the Inker, the
Penciller and the snapshot registry that decides for them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pykka

from inkpen.actors.base import InkpenActor, handles, send
from inkpen.actors.kernel.deleter import Deleter
from inkpen.actors.kernel.scheduler import Scheduler
from inkpen.errors import StoreError
from inkpen.logs import get_logger
from inkpen.manifest.table_store import TableStore

log = get_logger("inkpen.clerk")

MAX_POLL_INTERVAL = 60.0


@dataclass(frozen=True, slots=True)
class _SetForDelete:
    """To a clerk: the manifest with id ``change_id`` dropped your file."""

    change_id: int


@dataclass(frozen=True, slots=True)
class ConfirmDelete:
    """From a clerk to its owner: may ``name``, dropped at ``change_id``, be deleted now?"""

    name: str
    change_id: int
    clerk: pykka.ActorRef[Any]


@dataclass(frozen=True, slots=True)
class _DeleteConfirmed:
    """To a clerk: delete your file and stop."""


@dataclass(frozen=True, slots=True)
class _DeleteDone:
    """To a clerk, from the batched deleter: how the delete of your file ended (None: gone)."""

    error: StoreError | None


@dataclass(frozen=True, slots=True)
class _DeleteDeferred:
    """To a clerk: something may still read your file; ask again later."""


@dataclass(frozen=True, slots=True)
class FileDeleted:
    """From a clerk to its owner: the object is gone and the clerk has stopped."""

    name: str


def set_for_delete(clerk: pykka.ActorRef[Any], change_id: int) -> None:
    """Tell ``clerk`` that the manifest with id ``change_id`` dropped its file."""
    send(clerk, _SetForDelete(change_id))


def answer_confirm_delete(clerk: pykka.ActorRef[Any], *, may_delete: bool) -> None:
    """An owner's answer to :class:`ConfirmDelete`: delete now, or ask again later."""
    send(clerk, _DeleteConfirmed() if may_delete else _DeleteDeferred())


@dataclass(frozen=True, slots=True)
class _Poll:
    pass


class FileClerk(InkpenActor):
    """Base of the per-file clerks: owns one object's name and the delete_pending protocol."""

    kind = "file"

    def __init__(
        self,
        tables: TableStore,
        name: str,
        owner: pykka.ActorRef[Any],
        scheduler: Scheduler,
        *,
        poll_interval: float,
        owned: bool = True,
        deleter: Deleter | None = None,
    ) -> None:
        super().__init__()
        self.tables = tables
        self.name = name
        self.owner = owner
        self.scheduler = scheduler
        self.state = "writing"
        self._poll_interval = poll_interval
        self._next_wait = poll_interval
        self._change_id = 0
        self._owned = owned
        """False for files of a parent database (clones): they are never deleted from here."""
        self._deleter = deleter
        self._deleting = False
        """The file is with the deleter: polls wait for its outcome."""

    @handles(_SetForDelete)
    def _set_for_delete(self, message: _SetForDelete) -> None:
        if self.state == "delete_pending":
            return
        self.state = "delete_pending"
        self._change_id = message.change_id
        log.debug("clerk.delete_pending", kind=self.kind, name=self.name, change=message.change_id)
        self._schedule_poll()

    @handles(_Poll)
    def _poll(self, _: _Poll) -> None:
        if self.state == "delete_pending" and not self._deleting:
            send(self.owner, ConfirmDelete(self.name, self._change_id, self.actor_ref))

    @handles(_DeleteDeferred)
    def _deferred(self, _: _DeleteDeferred) -> None:
        log.debug("clerk.delete_deferred", kind=self.kind, name=self.name)
        self._next_wait = min(MAX_POLL_INTERVAL, self._next_wait * 2)
        self._schedule_poll()

    @handles(_DeleteConfirmed)
    def _confirmed(self, _: _DeleteConfirmed) -> None:
        if not self._owned:
            self._gone()
        elif self._deleter is not None:
            if not self._deleting:
                self._deleting = True
                ref = self.actor_ref
                self._deleter.delete(self.name, lambda error: send(ref, _DeleteDone(error)))
        else:
            try:
                self.tables.delete(self.name)
            except StoreError as exc:
                self._done(_DeleteDone(exc))
                return
            self._gone()

    @handles(_DeleteDone)
    def _done(self, message: _DeleteDone) -> None:
        self._deleting = False
        if message.error is None:
            self._gone()
            return
        log.warning("clerk.delete_failed", kind=self.kind, name=self.name, error=str(message.error))
        self._next_wait = min(MAX_POLL_INTERVAL, self._next_wait * 2)  # as after a deferral
        self._schedule_poll()

    def _gone(self) -> None:
        """The file is deleted (or not this database's to delete): tell the owner, stop."""
        log.debug("clerk.deleted", kind=self.kind, name=self.name)
        send(self.owner, FileDeleted(self.name))
        self.stop()

    def _schedule_poll(self) -> None:
        wait = self._next_wait * random.uniform(0.8, 1.2)
        self.scheduler.after(wait, self.actor_ref, _Poll())
