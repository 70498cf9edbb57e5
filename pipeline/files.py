"""Writing the files a bulk load adds: journal files and SSTs under fresh, unique names.

Every file is written through the table store (:mod:`inkpen.manifest.table_store`): it gets a
new ``<file-id>`` (milliseconds plus 48 random bits, :func:`inkpen.manifest.paths.new_file_id`)
and is created with create-if-absent, so no write can
replace another's file: a retried task attempt writes new files beside the ones an earlier
attempt may have left, and only the files named in the commit ever become part of the database.
The descriptors returned describe the files as written; SQNs in them are the ones stored in the
file, which for a task's files are local (1..n) until the commit gives them a base.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from inkpen.formats.journal import JournalEntry
from inkpen.formats.keys import LedgerValue
from inkpen.formats.sst import SstBuilder, SstShape
from inkpen.manifest.model import JournalFileDescriptor, SstDescriptor
from inkpen.manifest.table_store import TableStore
from inkpen.objectstore import ObjectStore


def write_ssts(
    store: ObjectStore,
    entries: Iterable[tuple[bytes, LedgerValue]],
    shape: SstShape,
) -> list[SstDescriptor]:
    """Write entries (strictly increasing keys) as SSTs of ``shape``, of about
    ``shape.target_bytes`` each.

    A new SST also starts where the key's tag changes, so index entries and objects never share
    a file: an object range then meets only object files, whose first and last keys say how the
    objects spread (which is what read planning balances partitions by).
    """
    written: list[SstDescriptor] = []
    builder: SstBuilder | None = None
    tag = -1
    for key, value in entries:
        if builder is not None and key[0] != tag:
            written.append(_store_sst(store, builder))
            builder = None
        if builder is None:
            builder = shape.builder()
            tag = key[0]
        builder.add(key, value)
        if builder.estimated_size() >= shape.target_bytes:
            written.append(_store_sst(store, builder))
            builder = None
    if builder is not None:
        written.append(_store_sst(store, builder))
    return written


def _store_sst(store: ObjectStore, builder: SstBuilder) -> SstDescriptor:
    data, info = builder.finish()
    return TableStore(store).write_sst(data, info)


def write_journal(
    store: ObjectStore, entries: Sequence[JournalEntry], *, writer_epoch: int
) -> JournalFileDescriptor:
    """Write entries (strictly increasing SQNs, at least one) as one journal file."""
    if not entries:
        raise ValueError("a bulk-loaded journal file holds at least one entry")
    return TableStore(store).write_journal(entries, writer_epoch=writer_epoch)
