"""Journal replay: the ledger entries the journal holds above the ledger's persisted SQN.

The ledger's ``persisted_sqn`` says every journal entry up to it is in SSTs. What lies above it
exists only in the journal, so whoever builds a ledger from a manifest — the Inker at a writer's
start-up (pushing into the Penciller), a read-only view of a manifest (one memory table) — turns
those journal entries back into ledger entries, in SQN order:

1. journal files by their lowest SQN, passing over a file the ledger already holds whole
   (``in_ledger``: a bulk load wrote its SSTs too) or one at or below ``persisted_sqn``;
2. then the unrolled segments, in id order (so SQN order).

Each journal entry above ``persisted_sqn`` becomes its ledger entries
(:func:`~inkpen.actors.journal.changes.replayed_entries`: the object's metadata and one entry per
index spec), exactly as the Bookie made them when the write was acknowledged.

A put whose body the journal left to the ledger (``Kind.VALUE_IN_LEDGER``) is only ever written
at or below ``persisted_sqn`` (the roll and compaction leave a body out only once the ledger has
persisted it), so the replay never meets one; finding one means the ledger lost what it
persisted, and is reported as corruption rather than replayed without its value.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from inkpen.actors.journal.changes import replayed_entries
from inkpen.actors.kernel.views import JournalHandle, SegmentTable
from inkpen.errors import CorruptionError
from inkpen.formats.journal import JournalEntry, Kind
from inkpen.formats.keys import LedgerValue


def replay(
    files: Iterable[JournalHandle],
    segments: Iterable[SegmentTable],
    persisted_sqn: int,
    *,
    inline_limit: int = 0,
) -> Iterator[list[tuple[bytes, LedgerValue]]]:
    """The ledger entries of each journal entry above ``persisted_sqn``, one list per journal
    entry, in SQN order (see the module docstring); values of at most ``inline_limit`` bytes
    are kept in their entries (option ``inline_value_bytes``)."""
    for handle in sorted(files, key=lambda h: h.descriptor.min_sqn):
        descriptor = handle.descriptor
        if descriptor.in_ledger or descriptor.max_sqn <= persisted_sqn:
            continue
        for entry in handle.reader.iter_entries():
            if entry.sqn > persisted_sqn:
                yield replayed_entries(_replayable(entry, handle.name), inline_limit=inline_limit)
    for segment in segments:
        if segment.last_sqn <= persisted_sqn:
            continue
        for sqn in sorted(segment.entries):
            if sqn > persisted_sqn:
                yield replayed_entries(segment.entries[sqn], inline_limit=inline_limit)


def _replayable(entry: JournalEntry, name: str) -> JournalEntry:
    if entry.kind == Kind.VALUE_IN_LEDGER:
        raise CorruptionError(
            name,
            f"SQN {entry.sqn} is above the ledger's persisted SQN but its value was left to the "
            "ledger: the ledger has lost entries it persisted; restore from a backup",
        )
    return entry
