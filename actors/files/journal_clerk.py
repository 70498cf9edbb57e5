"""The journal-file clerk: one actor per journal file (segments rolled, or compaction output).

Life cycle (the shared end of life is in :mod:`inkpen.actors.files.clerk`)::

    writing ──▶ reading ──▶ delete_pending ──▶ deleted

- ``writing``: the Inker's clerk hands over the entries and bytes of a new file
  (:class:`WriteJournal`); this clerk stores them with create-if-absent and opens a reader, both
  through the table store (:mod:`inkpen.manifest.table_store`). Leveled's active journal file is
  appended to in place; object stores have no append, so inkpen's active journal is the run of
  small segments the Inker writes per group commit, kept in the Inker's memory until they are
  rolled into a file like this one. A segment of at least ``roll_link_bytes`` (large values)
  is not rewritten: the clerk is told :class:`LinkJournal` and stores the segment object itself
  as its file (a hard link or a server-side copy), so a large value is written once.
- ``reading``: the clerk's :class:`~inkpen.formats.journal.JournalReader` (header and hash tables
  loaded once) is published in the Inker's views; value reads go through it and a chunk cache
  shared by the Bookie's journal files, without a message to the clerk.
- A clerk for an existing file starts with :class:`OpenJournal` and goes straight to ``reading``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inkpen.actors.base import handles
from inkpen.actors.files.clerk import FileClerk
from inkpen.actors.read.views import JournalHandle
from inkpen.errors import InkpenError
from inkpen.formats.journal import JournalEntry
from inkpen.manifest.model import JournalFileDescriptor


@dataclass(frozen=True, slots=True)
class OpenJournal:
    """Ask: open the reader of an existing journal file; answers its :class:`JournalHandle`."""

    descriptor: JournalFileDescriptor


@dataclass(frozen=True, slots=True)
class WriteJournal:
    """Ask: store ``entries`` (SQN order), encoded as ``data`` with ``writer_epoch``, as this
    clerk's file and open it; answers the :class:`JournalHandle`."""

    entries: tuple[JournalEntry, ...]
    data: bytes
    writer_epoch: int


@dataclass(frozen=True, slots=True)
class LinkJournal:
    """Ask: store journal segment ``segment_id`` (its bytes already durable) as this clerk's
    file without writing them again, and open it; answers the :class:`JournalHandle`."""

    segment_id: int
    min_sqn: int
    max_sqn: int
    size: int
    entry_count: int


class JournalClerk(FileClerk):
    """Owns one journal-file object: writes it, opens its reader, and later deletes it.

    Answers :class:`OpenJournal`, :class:`WriteJournal`, and the delete_pending messages of
    :class:`~inkpen.actors.files.clerk.FileClerk`.
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

    @handles(OpenJournal)
    def _open_existing(self, message: OpenJournal) -> JournalHandle:
        return self._open(message.descriptor)

    @handles(WriteJournal)
    def _write(self, message: WriteJournal) -> JournalHandle:
        if self.state != "writing":
            raise InkpenError(f"journal clerk for {self.name} is {self.state}, not writing")
        descriptor = self.tables.write_journal(
            message.entries, writer_epoch=message.writer_epoch, data=message.data, name=self.name
        )
        return self._open(descriptor)

    @handles(LinkJournal)
    def _link(self, message: LinkJournal) -> JournalHandle:
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
