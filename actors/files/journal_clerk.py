"""The journal-file clerk: one actor per journal file (segments rolled, or compaction output).

Life cycle (the shared end of life is in :mod:`inkpen.actors.files.file_clerk`)::

    writing ──▶ reading ──▶ delete_pending ──▶ deleted

- ``writing``: the Inker's clerk hands over the entries and bytes of a new file
  (:class:`_WriteJournal`); this clerk stores them with create-if-absent and opens a reader, both
  through the table store (:mod:`inkpen.manifest.table_store`). Leveled's active journal file is
  appended to in place; object stores have no append, so inkpen's active journal is the run of
  small segments the Inker writes per group commit, kept in the Inker's memory until they are
  rolled into a file like this one. A segment of at least ``roll_link_bytes`` (large values)
  is not rewritten: the clerk is asked :func:`link` and stores the segment object itself
  as its file (a hard link or a server-side copy), so a large value is written once.
- ``reading``: the clerk's :class:`~inkpen.formats.journal.JournalReader` (header and SQN block
  index loaded once, the index kept in the table store's journal index cache) is
  published in the Inker's views; value reads go through it and a chunk cache shared by the
  Bookie's journal files, without a message to the clerk.
- A clerk for an existing file starts with :class:`_OpenJournal` and goes straight to ``reading``.

Its request messages are private; callers use :func:`open_async`, :func:`write` and :func:`link`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pykka

from inkpen.actors.base import call, call_async, handles
from inkpen.actors.files.file_clerk import FileClerk
from inkpen.actors.kernel.views import JournalHandle
from inkpen.errors import InkpenError
from inkpen.formats.journal import JournalEntry
from inkpen.manifest.model import JournalFileDescriptor


@dataclass(frozen=True, slots=True)
class _OpenJournal:
    """Ask: open the reader of an existing journal file; answers its :class:`JournalHandle`."""

    descriptor: JournalFileDescriptor


@dataclass(frozen=True, slots=True)
class _WriteJournal:
    """Ask: store ``entries`` (SQN order), encoded as ``data`` with ``writer_epoch``, as this
    clerk's file and open it; answers the :class:`JournalHandle`."""

    entries: tuple[JournalEntry, ...]
    data: bytes
    writer_epoch: int


def open_async(
    clerk: pykka.ActorRef[Any], descriptor: JournalFileDescriptor
) -> pykka.Future[JournalHandle]:
    """Ask ``clerk`` to open its existing journal file; the future answers the handle."""
    return call_async(clerk, _OpenJournal(descriptor))


def write(
    clerk: pykka.ActorRef[Any], entries: tuple[JournalEntry, ...], data: bytes, writer_epoch: int
) -> JournalHandle:
    """Ask ``clerk`` (writing) to store ``entries`` encoded as ``data`` and open the file."""
    handle: JournalHandle = call(clerk, _WriteJournal(entries, data, writer_epoch))
    return handle


@dataclass(frozen=True, slots=True)
class _LinkJournal:
    """Ask: store journal segment ``segment_id`` (its bytes already durable) as this clerk's
    file without writing them again, and open it; answers the :class:`JournalHandle`."""

    segment_id: int
    min_sqn: int
    max_sqn: int
    size: int
    entry_count: int


def link(
    clerk: pykka.ActorRef[Any],
    segment_id: int,
    min_sqn: int,
    max_sqn: int,
    size: int,
    entry_count: int,
) -> JournalHandle:
    """Ask ``clerk`` (writing) to store segment ``segment_id`` as its file without writing its
    bytes again (a link or server-side copy), and open it."""
    handle: JournalHandle = call(
        clerk, _LinkJournal(segment_id, min_sqn, max_sqn, size, entry_count)
    )
    return handle


class JournalClerk(FileClerk):
    """Owns one journal-file object: writes it, opens its reader, and later deletes it.

    Answers :class:`_OpenJournal`, :class:`_WriteJournal`, and the delete_pending messages of
    :class:`~inkpen.actors.files.file_clerk.FileClerk`.
    """

    kind = "journal"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handle: JournalHandle | None = None

    def _open(self, descriptor: JournalFileDescriptor) -> JournalHandle:
        reader = self.tables.open_journal(descriptor)
        self.handle = JournalHandle(descriptor, reader, self.actor_ref)
        self.state = "reading"
        return self.handle

    @handles(_OpenJournal)
    def _open_existing(self, message: _OpenJournal) -> JournalHandle:
        return self._open(message.descriptor)

    @handles(_WriteJournal)
    def _write(self, message: _WriteJournal) -> JournalHandle:
        if self.state != "writing":
            raise InkpenError(f"journal clerk for {self.name} is {self.state}, not writing")
        descriptor = self.tables.write_journal(
            message.entries, writer_epoch=message.writer_epoch, data=message.data, name=self.name
        )
        return self._open(descriptor)

    @handles(_LinkJournal)
    def _link(self, message: _LinkJournal) -> JournalHandle:
        if self.state != "writing":
            raise InkpenError(f"journal clerk for {self.name} is {self.state}, not writing")
        descriptor = self.tables.link_segment(
            message.segment_id,
            min_sqn=message.min_sqn,
            max_sqn=message.max_sqn,
            size=message.size,
            entry_count=message.entry_count,
            name=self.name,
        )
        return self._open(descriptor)
