"""Checking stored objects: every checksum of an SST, a journal file, a segment or a manifest.

Each check reads the whole object once and decodes it with the codecs the engine reads with
(``inkpen.formats``), which verify every CRC, then cross-checks what they found. SSTs, journal
files and segments are read, and their readers opened, through the database's table store
(:mod:`inkpen.manifest.table_store`), from whichever root holds them:

- **SST**: footer, index, bloom and meta blocks, then every data block in order (its CRC, that it
  decodes, that its first key matches the index); keys strictly increasing; the entry count and
  last key against the meta block; size, key range, entry count and SQN range against the
  manifest's descriptor.
- **Journal file / segment**: header, hash region and every record in file order (CRC, lengths,
  SQN order, count against the header); then every hash-table slot must lead to a record of the
  length it records; size, entry count and SQN range against the descriptor (journal files).
- **Manifest**: framing, CRC, and that the document is a valid manifest.

A failed check is reported with the object's key and the offset of the damaged part (None when
the damage is not in one place, such as a size that disagrees with the manifest).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from inkpen.errors import CorruptionError, NotFoundError
from inkpen.formats.journal import iter_journal
from inkpen.manifest.model import JournalFileDescriptor, SstDescriptor, decode
from inkpen.manifest.table_store import TableStore


class Kind(enum.StrEnum):
    MANIFEST = "manifest"
    SST = "sst"
    JOURNAL = "journal file"
    SEGMENT = "segment"


class Status(enum.StrEnum):
    OK = "ok"
    DAMAGED = "damaged"
    MISSING = "missing"
    """A required object is absent."""
    GONE = "gone"
    """Absent, but nothing needs it any more (GC removed it while the check ran)."""


@dataclass(frozen=True, slots=True)
class Target:
    """One object to check."""

    kind: Kind
    key: str
    root: str | None = None
    """Store URL of the database holding it; None for the database being checked."""
    expected: SstDescriptor | JournalFileDescriptor | None = None
    """What the manifest says of the file, to check it against."""
    size: int = 0
    """Its size as far as known, for progress."""

    @property
    def name(self) -> str:
        """The key, prefixed by the holding root's URL when that is another database."""
        return self.key if self.root is None else f"{self.root} {self.key}"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What checking one object found."""

    target: Target
    status: Status
    units: int = 0
    """Blocks (SSTs) or records (journal files, segments) checked."""
    offset: int | None = None
    detail: str = ""


def _mismatch(name: str, what: str, found: object, expected: object) -> CorruptionError:
    return CorruptionError(name, f"{what} is {found} but the manifest says {expected}")


def _check_size(name: str, data: bytes, expected: SstDescriptor | JournalFileDescriptor) -> None:
    if len(data) != expected.size:
        raise _mismatch(name, "object size", len(data), expected.size)


def check_sst(data: bytes, target: Target) -> int:
    """Check an SST (see the module docstring); answers the number of data blocks."""
    name = target.key
    expected = target.expected
    if expected is not None:
        _check_size(name, data, expected)
    base = expected.sqn_base if expected is not None else 0
    reader = TableStore.sst_in_memory(name, data, sqn_base=base)
    info = reader.info
    count = 0
    previous: bytes | None = None
    for key, _value in reader.iter_range():
        if previous is not None and key <= previous:
            raise CorruptionError(name, f"SST keys are out of order after entry {count}")
        previous = key
        count += 1
    if count != info.entry_count or previous != info.last_key:
        raise CorruptionError(
            name, f"SST holds {count} entries but its meta block says {info.entry_count}"
        )
    if isinstance(expected, SstDescriptor):
        found = (info.first_key, info.last_key, info.entry_count, info.min_sqn, info.max_sqn)
        wanted = (
            expected.first_key,
            expected.last_key,
            expected.entry_count,
            expected.min_sqn,
            expected.max_sqn,
        )
        if found != wanted:
            raise CorruptionError(
                name, "SST key range, entry count or SQN range disagrees with the manifest"
            )
    return reader.block_count


def check_journal(data: bytes, target: Target) -> int:
    """Check a journal file or segment (see the module docstring); answers its record count."""
    name = target.key
    expected = target.expected
    if expected is not None:
        _check_size(name, data, expected)
    count = sum(1 for _ in iter_journal(data, name))
    reader = TableStore.journal_in_memory(name, data)
    locations = reader.locations()
    if len(locations) != count:
        raise CorruptionError(
            name,
            f"journal index lists {len(locations)} records but the file holds {count}",
            offset=reader.header.hash_offset,
        )
    for offset, length in locations:
        try:
            reader.read_at(offset, length)
        except ValueError as exc:
            raise CorruptionError(
                name, f"journal hash slot points outside the records: {exc}", offset=offset
            ) from exc
    if isinstance(expected, JournalFileDescriptor):
        header = reader.header
        base = expected.sqn_base
        found = (header.entry_count, header.min_sqn + base, header.max_sqn + base)
        wanted = (expected.entry_count, expected.min_sqn, expected.max_sqn)
        if found != wanted:
            raise CorruptionError(
                name, "journal entry count or SQN range disagrees with the manifest", offset=0
            )
    return count


def check_manifest(data: bytes, target: Target) -> int:
    """Check a manifest version: framing, CRC and a valid document."""
    decode(data, target.key)
    return 1


CHECKERS: dict[Kind, Callable[[bytes, Target], int]] = {
    Kind.MANIFEST: check_manifest,
    Kind.SST: check_sst,
    Kind.JOURNAL: check_journal,
    Kind.SEGMENT: check_journal,
}


def read(tables: TableStore, target: Target) -> bytes:
    """``target`` as stored: a manifest from its root's store, any other object through the
    table store."""
    if target.kind is Kind.MANIFEST:
        return tables.store_for(target.root).get(target.key)
    return tables.read_object(target.key, root=target.root)


def check(tables: TableStore, target: Target) -> Outcome:
    """Read ``target`` (through ``tables``, the checked database's table store, which finds the
    store of another root) and check it; absence is :attr:`Status.MISSING`."""
    try:
        data = read(tables, target)
    except NotFoundError:
        return Outcome(target, Status.MISSING, detail="named by a manifest but absent")
    try:
        units = CHECKERS[target.kind](data, target)
    except CorruptionError as exc:
        return Outcome(target, Status.DAMAGED, offset=exc.offset, detail=exc.detail)
    return Outcome(target, Status.OK, units=units)
