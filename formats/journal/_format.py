"""The journal file's layout shared by its writer and its reader: the header, the record
fields, the entry and header types, and :func:`read_header`. The layout itself is described in
:mod:`inkpen.formats.journal`."""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from inkpen.errors import CorruptionError

from ..crc import CRC32, CRC32C, Crc

MAGIC = b"INKJNL"
FORMAT_VERSION = 3
"""The version writers write: version 2's layout with CRC-32C record checksums and one more
record kind (:attr:`Kind.VALUE_IN_LEDGER`). Versions 2 (CRC-32 record checksums) and 1 (a CDB hash
region) are still read."""
INDEX_BLOCK = 4 * 1024
"""A version 2 block holds consecutive records up to this many bytes (or one larger record)."""

HEADER = struct.Struct(">6sHQQQQQQ")
CRC = struct.Struct(">I")
HEADER_SIZE = HEADER.size + CRC.size
"""Size in bytes of the fixed header at offset 0."""
EMPTY_JOURNAL_SIZE = HEADER_SIZE
"""Size in bytes of a journal file with no entries (a fencing segment)."""

LENGTHS = struct.Struct(">II")
KEY_HEAD = struct.Struct(">QB")
RECORD_HEAD = struct.Struct(">IIQB")
"""A record's lengths and the fixed start of its key (SQN, kind), read or written in one go."""
VALUE_HEAD = struct.Struct(">BQQI")
SLOT = struct.Struct(">IQI")
BLOCK_ENTRY = struct.Struct(">QQ")
TABLE = struct.Struct(">II")
TABLE_COUNT = 256
DIRECTORY_SIZE = TABLE_COUNT * TABLE.size
MIN_RECORD = LENGTHS.size + KEY_HEAD.size + VALUE_HEAD.size + CRC.size
U32 = 1 << 32
U64 = 1 << 64

HAS_VALUE = 1
COMPRESSED = 2
HAS_EXPIRY = 4
KNOWN_FLAGS = HAS_VALUE | COMPRESSED | HAS_EXPIRY
COPY_TO_CHECK = 64 * 1024
"""Records up to this size are copied to be checksummed (cheaper than a memoryview)."""


class Kind(IntEnum):
    """What a journal entry records."""

    OBJECT = 1
    """A put: the object body and its metadata."""
    TOMBSTONE = 2
    """A delete."""
    KEY_CHANGES = 3
    """Only the index changes and metadata of a put (kept by retain-mode compaction)."""
    VALUE_IN_LEDGER = 4
    """A put whose body the ledger holds: its metadata and index changes, no body. The ledger
    entry of the same SQN carries the value (a small value, option ``inline_value_bytes``), and
    the body was left out of the journal once the ledger had persisted that entry."""


KINDS = {kind.value: kind for kind in Kind}


def record_crc(version: int) -> Crc:
    """The checksum of a record of a file of ``version``: CRC-32C from version 3, else CRC-32
    (the header's and the index region's are CRC-32 in every version)."""
    return CRC32C if version >= 3 else CRC32


Checksum = Callable[[bytes | memoryview, int], int]
"""``checksum(data, running)``: a record checksum (:attr:`Crc.checksum`)."""
new_entry = tuple.__new__


class JournalEntry(NamedTuple):
    """One journal entry: its key ``(sqn, kind, ledger_key)`` and everything needed to replay it.

    ``index_specs`` items are ``(op, field, term)`` with op 1 to add and 0 to remove an index
    entry. ``value`` is the object body for OBJECT entries and None for the other kinds.
    """

    sqn: int
    kind: Kind
    ledger_key: bytes
    value: bytes | None
    index_specs: tuple[tuple[int, bytes, bytes], ...]
    expiry_ms: int | None
    last_modified_ms: int


@dataclass(frozen=True, slots=True)
class JournalHeader:
    """The fixed header of a journal file: who wrote it, what it holds and where its parts are."""

    version: int
    writer_epoch: int
    entry_count: int
    min_sqn: int
    max_sqn: int
    hash_offset: int
    hash_length: int

    @property
    def size(self) -> int:
        """Size of the whole file in bytes."""
        return self.hash_offset + self.hash_length

    @property
    def is_empty(self) -> bool:
        """True for a file with no entries (a fencing segment)."""
        return self.entry_count == 0


def hash_region_length(entry_count: int) -> int:
    if entry_count == 0:
        return 0
    return DIRECTORY_SIZE + 2 * entry_count * SLOT.size + CRC.size


def index_region_fits(header_count: int, length: int) -> bool:
    """True when a version 2 index region of ``length`` bytes may serve ``header_count``
    entries: at least one block, at most one per entry."""
    blocks, rest = divmod(length - CRC.size, BLOCK_ENTRY.size)
    return rest == 0 and 1 <= blocks <= header_count


def read_header(data: bytes, name: str) -> JournalHeader:
    """Check and decode the header of a journal file from (at least) its first HEADER_SIZE bytes.

    Raises :class:`CorruptionError` naming ``name`` for a short read, another kind of file, a
    format version newer than this code, a checksum mismatch or inconsistent fields.
    """
    magic = bytes(data[: len(MAGIC)])
    if magic != MAGIC:
        kind = " (it is an inkpen manifest)" if magic.startswith(b"INKM") else ""
        raise CorruptionError(
            name,
            f"not an inkpen journal file{kind}: magic is {magic!r}, expected {MAGIC!r}",
            offset=0,
        )
    if len(data) < HEADER_SIZE:
        raise CorruptionError(
            name, f"{len(data)} bytes is too short for a journal header ({HEADER_SIZE} bytes)"
        )
    _, version, epoch, count, min_sqn, max_sqn, hash_offset, hash_length = HEADER.unpack_from(
        data, 0
    )
    if version > FORMAT_VERSION:
        raise CorruptionError(
            name,
            f"journal format version {version} is newer than this inkpen reads (up to "
            f"{FORMAT_VERSION}); upgrade inkpen to read this database, unless the header is "
            "damaged",
            offset=6,
        )
    (stored_crc,) = CRC.unpack_from(data, HEADER.size)
    if zlib.crc32(memoryview(data)[: HEADER.size]) != stored_crc:
        raise CorruptionError(name, "journal header checksum mismatch", offset=0)
    if version < 1:
        raise CorruptionError(name, f"journal format version {version} is invalid", offset=6)
    header = JournalHeader(version, epoch, count, min_sqn, max_sqn, hash_offset, hash_length)
    if count == 0:
        consistent = min_sqn == max_sqn == 0 and hash_offset == HEADER_SIZE and hash_length == 0
    else:
        consistent = (
            min_sqn <= max_sqn
            and max_sqn - min_sqn >= count - 1
            and (
                hash_length == hash_region_length(count)
                if version == 1
                else index_region_fits(count, hash_length)
            )
            and hash_offset >= HEADER_SIZE + count * MIN_RECORD
        )
    if not consistent:
        raise CorruptionError(name, f"journal header fields are inconsistent: {header}", offset=0)
    return header


cache_tokens = itertools.count()
"""Distinct keys for what journal readers keep in a shared index cache."""
