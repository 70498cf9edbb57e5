"""One task of a bulk load: its rows become journal files and SSTs with local SQNs 1..n.

A task does not know where its SQNs will start (the driver decides that at commit time), so it
numbers its entries from 1 and the commit later gives every file of the task one ``sqn_base``
(readers add it to every SQN stored in the file). Steps:

1. check and encode every row as a put, exactly as ``Bookie.put`` would
   (:class:`inkpen.actors.journal.changes.ChangeMaker`: limits, index specs, TTL from the task's
   clock); a row whose ``kind`` (the column a read or the change feed yields) is not ``"put"``
   refuses the load: a load only adds objects;
2. sort the puts by ledger key, stably, so rows with the same key stay in input order;
3. number them 1..n in that order: within the task, a key's last row gets its highest SQN;
4. write the journal entries in SQN order as journal files (a new one at about
   ``journal_bytes``), every row kept, as a run of puts would have journalled them;
5. turn each entry into its ledger entries (:func:`inkpen.actors.journal.changes.ledger_entries`:
   the object plus one entry per index spec), keep the highest SQN's per ledger key, and write
   them in key order as SSTs (a new one at about ``sst_bytes``).

The SSTs therefore hold exactly what replaying the task's journal files would put in the
ledger, so a database rebuilt from its journal (a restored hot backup) holds the same data. The
task returns :class:`LoadedPartition`: its files' descriptors (local SQNs) and row count. Nothing
it writes is visible until the driver's commit names it; a failed or superseded attempt leaves
only orphans for GC.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any, cast

import pyarrow as pa

from inkpen.actors.journal.changes import ChangeMaker, PendingChange, ledger_entries
from inkpen.errors import UsageError
from inkpen.formats.journal import JournalEntry
from inkpen.formats.keys import LedgerValue
from inkpen.formats.sst import SstShape
from inkpen.logs import get_logger
from inkpen.manifest.model import JournalFileDescriptor, SstDescriptor
from inkpen.objectstore import ObjectStore, open_store
from inkpen.options import Options

from .files import write_journal, write_ssts
from .schema import IndexShape, LoadColumns
from .target import LoadTarget

log = get_logger("inkpen.pipeline")

_LEDGER_KEY = itemgetter(3)


@dataclass(frozen=True, slots=True)
class LoadedPartition:
    """What one successful task attempt wrote: files with local SQNs ``1..rows``."""

    partition_id: int
    attempt: int
    rows: int
    journal_files: tuple[JournalFileDescriptor, ...]
    ssts: tuple[SstDescriptor, ...]

    @property
    def files(self) -> tuple[str, ...]:
        """The object keys of every file the attempt wrote."""
        return tuple(f.name for f in self.journal_files) + tuple(s.name for s in self.ssts)


def _index_specs(raw: Any, shape: IndexShape) -> tuple[tuple[Any, Any, Any], ...]:
    if raw is None:
        return ()
    specs = []
    for item in raw:
        if item is None:
            raise UsageError("an entry of indexes is null; drop it or give op, field and term")
        entry = {str(name).lower(): value for name, value in item.items()}
        op = entry["op"] if shape == "ops" else "add"
        specs.append((op, entry["field"], entry["term"]))
    return tuple(specs)


def _column(batch: pa.RecordBatch, name: str | None) -> list[Any]:
    if name is None:
        return [None] * batch.num_rows
    return cast(list[Any], batch.column(name).to_pylist())


def check_puts(
    columns: LoadColumns, batches: Iterable[pa.RecordBatch], options: Options, partition: int
) -> list[PendingChange]:
    """Step 1: every row as a checked put, in input order; a bad row is a ``UsageError``
    naming its number in the task."""
    maker = ChangeMaker(options)
    changes: list[PendingChange] = []
    first_row = 0
    for batch in batches:
        buckets = _column(batch, columns.bucket)
        keys = _column(batch, columns.key)
        values = _column(batch, columns.value)
        indexes = _column(batch, columns.indexes)
        ttls = _column(batch, columns.ttl)
        kinds = _column(batch, columns.kind)
        for i in range(batch.num_rows):
            try:
                if columns.kind is not None and kinds[i] != "put":
                    raise UsageError(
                        f"its {columns.kind} is {kinds[i]!r}, and a bulk load only adds objects "
                        f"(kind 'put'): filter the others out (df.filter(\"{columns.kind} = "
                        "'put'\")) and apply deletes with Bookie.delete"
                    )
                for name, found in (("bucket", buckets[i]), ("key", keys[i]), ("value", values[i])):
                    if found is None:
                        raise UsageError(
                            f"column {name} is null; every row needs a bucket, key and value"
                        )
                specs = _index_specs(indexes[i], columns.index_shape)
                changes.append(maker.put(buckets[i], keys[i], values[i], specs, ttls[i]))
            except UsageError as exc:
                raise UsageError(
                    f"row {first_row + i} of partition {partition} cannot be loaded: {exc}"
                ) from None
        first_row += batch.num_rows
    return changes


def _write(
    store: ObjectStore, target: LoadTarget, changes: list[PendingChange], options: Options
) -> tuple[list[JournalFileDescriptor], list[SstDescriptor]]:
    """Steps 2-5: sort, number, journal, and build the ledger's SSTs."""
    changes.sort(key=_LEDGER_KEY)
    journals: list[JournalFileDescriptor] = []
    ledger: dict[bytes, LedgerValue] = {}
    pending: list[JournalEntry] = []
    pending_bytes = 0
    inline = options.inline_value_bytes
    for sqn, change in enumerate(changes, start=1):
        entry = change.entry(sqn)
        for key, value in ledger_entries(
            entry, change.bucket, change.key, change.content_hash, inline_limit=inline
        ):
            ledger[key] = value
        pending.append(entry)
        pending_bytes += change.weight
        if pending_bytes >= target.journal_bytes:
            journals.append(write_journal(store, pending, writer_epoch=target.writer_epoch))
            pending, pending_bytes = [], 0
    if pending:
        journals.append(write_journal(store, pending, writer_epoch=target.writer_epoch))
    ssts = write_ssts(
        store,
        ((key, ledger[key]) for key in sorted(ledger)),
        replace(SstShape.of(options), target_bytes=target.sst_bytes),
    )
    return journals, ssts


def write_partition(
    target: LoadTarget,
    batches: Iterable[pa.RecordBatch],
    *,
    partition_id: int,
    attempt: int,
    options: Options | None = None,
) -> LoadedPartition:
    """Write one task's rows as journal files and SSTs (module docstring); return what it wrote.

    ``options`` supplies the limits and the clock (``Options()`` by default: the limits a Bookie
    enforces, and the wall clock for last-modified times and TTLs).
    """
    opts = options if options is not None else Options()
    changes = check_puts(target.columns, batches, opts, partition_id)
    return write_changes(target, changes, partition_id=partition_id, attempt=attempt, options=opts)


def write_changes(
    target: LoadTarget,
    changes: list[PendingChange],
    *,
    partition_id: int,
    attempt: int,
    options: Options | None = None,
) -> LoadedPartition:
    """Steps 2-5 for puts already checked and made (step 1's output, or a copy's puts that
    keep their source's times): write them as one task's files; ``changes`` is sorted in place.
    """
    started = time.monotonic()
    opts = options if options is not None else Options()
    rows = len(changes)
    journals: list[JournalFileDescriptor] = []
    ssts: list[SstDescriptor] = []
    if rows:
        store = open_store(target.url)
        try:
            journals, ssts = _write(store, target, changes, opts)
        finally:
            store.close()
    loaded = LoadedPartition(partition_id, attempt, rows, tuple(journals), tuple(ssts))
    log.debug(
        "pipeline.load_task_written",
        url=target.url,
        partition=partition_id,
        attempt=attempt,
        rows=rows,
        journal_files=len(journals),
        ssts=len(ssts),
        bytes=sum(f.size for f in journals) + sum(s.size for s in ssts),
        ms=round((time.monotonic() - started) * 1000, 1),
    )
    return loaded
