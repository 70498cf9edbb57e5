"""The SST clerk: one actor per ledger file.

Life cycle (the shared end of life is in :mod:`inkpen.actors.files.file_clerk`)::

    writing ──▶ reading ──▶ delete_pending ──▶ deleted

- ``writing``: the clerk builds its file (from the Penciller's frozen memory for an L0 flush,
  :class:`_BuildL0`, encoding it in the compute pool; or from bytes a merge produced,
  :class:`_WriteSst`), stores it with create-if-absent, and opens a reader on the stored object,
  both through the table store (:mod:`inkpen.manifest.table_store`).
- ``reading``: the clerk's :class:`~inkpen.formats.sst.SstReader` is published in the
  Penciller's views; readers use it directly (it caches the index and bloom filter; decoded
  blocks go to the Bookie's shared block cache), so a lookup costs no message to the clerk.
- A clerk for a file that already exists starts with :class:`_OpenSst` and goes straight to
  ``reading``.

Its request messages are private; callers use :func:`open_async`, :func:`write` and
:func:`build_l0`. :class:`L0Written` / :class:`L0Failed` are its answers to the Penciller.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pykka

from inkpen.actors.base import call, call_async, handles, send
from inkpen.actors.files.file_clerk import FileClerk
from inkpen.actors.kernel import compute
from inkpen.actors.kernel.views import MemTable, SstHandle
from inkpen.errors import InkpenError
from inkpen.formats.keys import LedgerValue
from inkpen.formats.sst import SstInfo, SstShape
from inkpen.logs import get_logger
from inkpen.manifest.model import SstDescriptor

log = get_logger("inkpen.clerk")


@dataclass(frozen=True, slots=True)
class _OpenSst:
    """Ask: open the reader of an existing file; answers its :class:`SstHandle`."""

    descriptor: SstDescriptor


@dataclass(frozen=True, slots=True)
class _WriteSst:
    """Ask: store these SST bytes and open them; answers the :class:`SstHandle`."""

    data: bytes
    info: SstInfo


@dataclass(frozen=True, slots=True)
class _BuildL0:
    """Tell: build an L0 file from frozen memory tables (newest first) and report back."""

    tables: tuple[MemTable, ...]
    reply_to: pykka.ActorRef[Any]
    shape: SstShape
    compute_workers: int = 0


@dataclass(frozen=True, slots=True)
class L0Written:
    """From an SST clerk to the Penciller: the L0 file for ``tables`` is stored and open."""

    tables: tuple[MemTable, ...]
    handle: SstHandle
    max_sqn: int
    seconds: float


@dataclass(frozen=True, slots=True)
class L0Failed:
    """From an SST clerk to the Penciller: the L0 write failed; the tables stay in memory."""

    tables: tuple[MemTable, ...]
    error: BaseException


def open_async(clerk: pykka.ActorRef[Any], descriptor: SstDescriptor) -> pykka.Future[SstHandle]:
    """Ask ``clerk`` to open its existing file; the future answers the handle."""
    return call_async(clerk, _OpenSst(descriptor))


def write(clerk: pykka.ActorRef[Any], data: bytes, info: SstInfo) -> SstHandle:
    """Ask ``clerk`` (writing) to store SST bytes a merge produced and open them."""
    handle: SstHandle = call(clerk, _WriteSst(data, info))
    return handle


def build_l0(
    clerk: pykka.ActorRef[Any],
    tables: tuple[MemTable, ...],
    *,
    reply_to: pykka.ActorRef[Any],
    shape: SstShape,
    compute_workers: int = 0,
) -> None:
    """Tell ``clerk`` (writing) to build an L0 file from frozen memory tables (newest first); it
    answers ``reply_to`` with :class:`L0Written` or :class:`L0Failed`."""
    send(clerk, _BuildL0(tables, reply_to, shape, compute_workers))


def merged_entries(tables: tuple[MemTable, ...]) -> Iterator[tuple[bytes, LedgerValue]]:
    """Entries of tables given newest first, in key order, the newest value of each key only."""
    merged = MemTable.merged(tables)
    entries = merged.entries
    for key in merged.sorted_keys():
        yield key, entries[key]


class SstClerk(FileClerk):
    """Owns one SST object: writes it, opens its reader, and later deletes it.

    Answers :class:`_OpenSst`, :class:`_WriteSst` (asks) and :class:`_BuildL0` (tell), plus the
    delete_pending messages of :class:`~inkpen.actors.files.file_clerk.FileClerk`.
    """

    kind = "sst"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handle: SstHandle | None = None

    def _open(self, descriptor: SstDescriptor) -> SstHandle:
        self.handle = SstHandle(descriptor, self.tables.open_sst(descriptor), self.actor_ref)
        self.state = "reading"
        return self.handle

    @handles(_OpenSst)
    def _open_existing(self, message: _OpenSst) -> SstHandle:
        return self._open(message.descriptor)

    @handles(_WriteSst)
    def _write(self, message: _WriteSst) -> SstHandle:
        if self.state != "writing":
            raise InkpenError(f"SST clerk for {self.name} is {self.state}, not writing")
        return self._open(self.tables.write_sst(message.data, message.info, name=self.name))

    @handles(_BuildL0)
    def _build_l0(self, message: _BuildL0) -> None:
        started = time.monotonic()
        try:
            entries = [(key, tuple(value)) for key, value in merged_entries(message.tables)]
            data, info = compute.run(
                message.compute_workers,
                compute.build_l0,
                entries,
                message.shape,
            )
            handle = self._open(self.tables.write_sst(data, info, name=self.name))
        except Exception as exc:  # reported to the Penciller, which keeps the tables
            log.warning("penciller.l0_write_failed", name=self.name, error=str(exc))
            send(message.reply_to, L0Failed(message.tables, exc))
            self.stop()
            return
        send(
            message.reply_to,
            L0Written(message.tables, handle, info.max_sqn, time.monotonic() - started),
        )
