"""Starting file clerks: the one place an SST or journal-file clerk actor is started.

A clerk is started for one of two reasons, and everything it is given follows from which:

- **an existing file** (a descriptor the manifest names, at start-up): the clerk reads the file
  from the root that holds it (a clone's inherited files live in its parent's store) and deletes
  it later only if this database owns it (``root`` is None). It is asked to open it and answers
  the file's handle (:func:`open_files`, all files at once);
- **a new file** (an L0 flush, a merge, a roll, a journal compaction): the clerk writes into this
  database's own store under a fresh ``<file-id>`` name, recorded in flight
  (:mod:`inkpen.actors.kernel.in_flight`) before the put. It is asked to write bytes a merge or
  a roll produced (:func:`write_new_sst`, :func:`write_new_journal`) or told to build an L0 file
  (the Penciller, which starts it with :func:`start_clerk` and calls
  :func:`~inkpen.actors.files.sst_clerk.build_l0`).

Every clerk reads and writes through the writer's one table store (``ctx.tables``,
:mod:`inkpen.manifest.table_store`), which holds the caches and tells the in-flight set of each
new file. A clerk whose first ask fails is stopped before the error is raised, so a failed open
or write leaves no actor behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

import pykka

from inkpen.actors.base import stop
from inkpen.actors.files import journal_clerk, sst_clerk
from inkpen.actors.files.journal_clerk import JournalClerk
from inkpen.actors.files.sst_clerk import SstClerk
from inkpen.actors.kernel.context import EngineContext
from inkpen.actors.kernel.views import JournalHandle, SegmentTable, SstHandle
from inkpen.formats.journal import JournalEntry
from inkpen.formats.sst import SstInfo
from inkpen.manifest.model import JournalFileDescriptor, SstDescriptor
from inkpen.manifest.table_store import new_name

ClerkKind = type[SstClerk] | type[JournalClerk]


def start_clerk(
    ctx: EngineContext,
    kind: ClerkKind,
    owner: pykka.ActorRef[Any],
    *,
    descriptor: SstDescriptor | JournalFileDescriptor | None = None,
) -> pykka.ActorRef[Any]:
    """Start a ``kind`` clerk reporting to ``owner``: for ``descriptor``'s existing file, or
    (no descriptor) for a new file under a fresh name (the table store's
    :func:`~inkpen.manifest.table_store.new_name`, the one source of new file names)."""
    if descriptor is not None:
        name, owned = descriptor.name, descriptor.root is None
    else:
        name, owned = new_name("sst" if kind is SstClerk else "journal"), True
    return kind.start(
        ctx.tables,
        name,
        owner,
        ctx.scheduler,
        poll_interval=ctx.options.delete_poll_interval,
        owned=owned,
        deleter=ctx.deleter,
    )


def write_new_sst(
    ctx: EngineContext, owner: pykka.ActorRef[Any], data: bytes, info: SstInfo
) -> SstHandle:
    """Start a clerk for a new SST, have it store ``data`` (a merge's output) and open it;
    answers the handle (the clerk is stopped if that fails)."""
    clerk = start_clerk(ctx, SstClerk, owner)
    try:
        return sst_clerk.write(clerk, data, info)
    except Exception:
        stop(clerk)
        raise


def link_new_journal(
    ctx: EngineContext, owner: pykka.ActorRef[Any], segment: SegmentTable
) -> JournalHandle:
    """Start a clerk for a new journal file that is ``segment``'s object itself (linked, not
    rewritten: a large segment's bytes are written once); answers the handle (the clerk is
    stopped if that fails)."""
    clerk = start_clerk(ctx, JournalClerk, owner)
    try:
        return journal_clerk.link(
            clerk,
            segment.segment_id,
            segment.first_sqn,
            segment.last_sqn,
            segment.size,
            len(segment.entries),
        )
    except Exception:
        stop(clerk)
        raise


def write_new_journal(
    ctx: EngineContext,
    owner: pykka.ActorRef[Any],
    entries: tuple[JournalEntry, ...],
    data: bytes,
    writer_epoch: int,
) -> JournalHandle:
    """Start a clerk for a new journal file, have it store ``entries`` encoded as ``data`` and
    open it; answers the handle (the clerk is stopped if that fails)."""
    clerk = start_clerk(ctx, JournalClerk, owner)
    try:
        return journal_clerk.write(clerk, entries, data, writer_epoch)
    except Exception:
        stop(clerk)
        raise


@overload
def open_files(
    ctx: EngineContext, owner: pykka.ActorRef[Any], descriptors: Sequence[SstDescriptor]
) -> tuple[SstHandle, ...]: ...


@overload
def open_files(
    ctx: EngineContext, owner: pykka.ActorRef[Any], descriptors: Sequence[JournalFileDescriptor]
) -> tuple[JournalHandle, ...]: ...


def open_files(
    ctx: EngineContext,
    owner: pykka.ActorRef[Any],
    descriptors: Sequence[SstDescriptor] | Sequence[JournalFileDescriptor],
) -> tuple[SstHandle, ...] | tuple[JournalHandle, ...]:
    """Start a clerk per existing file and open every reader at once (each clerk is its own
    thread); answers the handles in ``descriptors``' order. If any open fails, every clerk
    started here is stopped."""
    clerks: list[pykka.ActorRef[Any]] = []
    try:
        futures: list[pykka.Future[Any]] = []
        for descriptor in descriptors:
            if isinstance(descriptor, SstDescriptor):
                clerk = start_clerk(ctx, SstClerk, owner, descriptor=descriptor)
                futures.append(sst_clerk.open_async(clerk, descriptor))
            else:
                clerk = start_clerk(ctx, JournalClerk, owner, descriptor=descriptor)
                futures.append(journal_clerk.open_async(clerk, descriptor))
            clerks.append(clerk)
        return tuple(f.get() for f in futures)
    except BaseException:
        for clerk in clerks:
            stop(clerk)
        raise
