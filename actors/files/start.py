"""Starting file clerks: the one place an SST or journal-file clerk actor is started.

A clerk is started for one of two reasons, and everything it is given follows from which:

- **an existing file** (a descriptor the manifest names, at start-up): the clerk reads the file
  from the root that holds it (a clone's inherited files live in its parent's store) and deletes
  it later only if this database owns it (``root`` is None). It is asked :class:`OpenSst` /
  :class:`OpenJournal` and answers the file's handle (:func:`open_files`, all files at once);
- **a new file** (an L0 flush, a merge, a roll, a journal compaction): the clerk writes into this
  database's own store under a fresh ``<file-id>`` name, recorded in flight
  (:mod:`inkpen.actors.files.in_flight`) before the put. It is asked :class:`WriteSst` /
  :class:`WriteJournal` (:func:`write_file`) or told :class:`BuildL0` (the Penciller, which
  starts it with :func:`start_clerk`).

Every clerk reads and writes through the writer's one table store (``ctx.tables``,
:mod:`inkpen.manifest.table_store`), which holds the caches and tells the in-flight set of each
new file. A clerk whose first ask fails is stopped before the error is raised, so a failed open
or write leaves no actor behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

import pykka

from inkpen.actors.base import call, call_async, stop
from inkpen.actors.engine.context import EngineContext
from inkpen.actors.files.journal_clerk import JournalClerk, LinkJournal, OpenJournal, WriteJournal
from inkpen.actors.files.sst_clerk import OpenSst, SstClerk, WriteSst
from inkpen.actors.read.views import JournalHandle, SstHandle
from inkpen.manifest.model import JournalFileDescriptor, SstDescriptor
from inkpen.manifest.table_store import new_name

ClerkKind = type[SstClerk] | type[JournalClerk]


def start_clerk(
    ctx: EngineContext,
    kind: ClerkKind,
    owner: pykka.ActorRef[Any],
    *,
    descriptor: SstDescriptor | JournalFileDescriptor | None = None,
    name: str | None = None,
) -> pykka.ActorRef[Any]:
    """Start a ``kind`` clerk reporting to ``owner``: for ``descriptor``'s existing file, or
    (no descriptor) for a new file under ``name`` (a fresh one by default)."""
    if descriptor is not None:
        name, owned = descriptor.name, descriptor.root is None
    else:
        fresh = new_name("sst" if kind is SstClerk else "journal")
        name, owned = (fresh if name is None else name), True
    return kind.start(
        ctx.tables,
        name,
        owner,
        ctx.scheduler,
        poll_interval=ctx.options.delete_poll_interval,
        owned=owned,
    )


@overload
def write_file(ctx: EngineContext, owner: pykka.ActorRef[Any], message: WriteSst) -> SstHandle: ...


@overload
def write_file(
    ctx: EngineContext, owner: pykka.ActorRef[Any], message: WriteJournal | LinkJournal
) -> JournalHandle: ...


def write_file(
    ctx: EngineContext, owner: pykka.ActorRef[Any], message: WriteSst | WriteJournal | LinkJournal
) -> SstHandle | JournalHandle:
    """Start a clerk for a new file, have it store ``message``'s bytes and open them; answers
    the new file's handle (its clerk is stopped if that fails)."""
    clerk = start_clerk(ctx, SstClerk if isinstance(message, WriteSst) else JournalClerk, owner)
    try:
        handle: SstHandle | JournalHandle = call(clerk, message)
    except Exception:
        stop(clerk)
        raise
    return handle


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
        futures = []
        kind: ClerkKind
        opening: OpenSst | OpenJournal
        for descriptor in descriptors:
            if isinstance(descriptor, SstDescriptor):
                kind, opening = SstClerk, OpenSst(descriptor)
            else:
                kind, opening = JournalClerk, OpenJournal(descriptor)
            clerk = start_clerk(ctx, kind, owner, descriptor=descriptor)
            clerks.append(clerk)
            futures.append(call_async(clerk, opening))
        return tuple(f.get() for f in futures)
    except BaseException:
        for clerk in clerks:
            stop(clerk)
        raise
