"""The version 1 journal index: a CDB hash region of 256 tables of slots, probed linearly.

:class:`HashIndex` checks the table directory and finds the slot page a probe starts on;
:class:`HeldHashIndex` holds the whole region (read and checked once). The paged kind, which
keeps only a CRC per page of slots and reads pages through a shared cache, is
:class:`~inkpen.formats.journal._hash_pages.PagedHashIndex`.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Iterable, Iterator

from inkpen.errors import CorruptionError

from . import _format
from ._format import DIRECTORY_SIZE, TABLE_COUNT, JournalHeader

# The record layout's structs, bound here by assignment: CPython 3.11 compiles a method call
# on a name bound by an import as an attribute load (no LOAD_METHOD), which cost a tenth of a
# get's time.
CRC = _format.CRC
SLOT = _format.SLOT

PAGE_SHIFT = 6
PAGE_SLOTS = 1 << PAGE_SHIFT
PAGE_MASK = PAGE_SLOTS - 1
PAGE_BYTES = PAGE_SLOTS * SLOT.size
"""A hash region's slots are read and cached in pages of this many bytes (64 slots): small, so
that a cold get stays within 16 KiB read with its SST block and record."""


class HashIndex:
    """The hash region of one journal file: its table directory (checked here) and its slots,
    which each kind keeps its own way."""

    __slots__ = ("name", "slots_at", "slots_end", "tables")

    def __init__(self, directory: bytes, header: JournalHeader, name: str) -> None:
        tables = array("I", struct.unpack(f">{2 * TABLE_COUNT}I", directory))
        expected_first = 0
        for at in range(0, 2 * TABLE_COUNT, 2):
            first, count = tables[at], tables[at + 1]
            if first != expected_first or count % 2:
                raise CorruptionError(
                    name, "journal hash table directory is inconsistent", offset=header.hash_offset
                )
            expected_first += count
        if expected_first != 2 * header.entry_count:
            raise CorruptionError(
                name,
                f"journal hash tables hold {expected_first} slots for {header.entry_count} entries",
                offset=header.hash_offset,
            )
        self.name = name
        self.tables = tables
        self.slots_at = header.hash_offset + DIRECTORY_SIZE
        self.slots_end = header.size - CRC.size

    def first_page(self, key_hash: int) -> int | None:
        """The slot page a probe for ``key_hash`` starts on, or None when its table is empty."""
        table = (key_hash & 255) << 1
        count = self.tables[table + 1]
        if not count:
            return None
        return int((self.tables[table] + (key_hash >> 8) % count) >> PAGE_SHIFT)

    def load_pages(self, numbers: Iterable[int]) -> dict[int, bytes]:
        """Slot pages ``numbers`` by number, for :meth:`candidates` (none for a held region)."""
        return {}

    def candidates(
        self, key_hash: int, pages: dict[int, bytes] | None = None
    ) -> Iterator[tuple[int, int]]:
        """Yield ``(offset, length)`` of every record whose slot carries ``key_hash``
        (``pages``: from :meth:`load_pages`)."""
        raise NotImplementedError

    def locations(self) -> list[tuple[int, int]]:
        """``(offset, length)`` of every record, in file order."""
        raise NotImplementedError


class HeldHashIndex(HashIndex):
    """A hash region read whole: its CRC checked once, its bytes held."""

    __slots__ = ("region",)

    def __init__(self, region: bytes, header: JournalHeader, name: str) -> None:
        body_length = len(region) - CRC.size
        (stored_crc,) = CRC.unpack_from(region, body_length)
        if zlib.crc32(memoryview(region)[:body_length]) != stored_crc:
            raise CorruptionError(
                name, "journal hash region checksum mismatch", offset=header.hash_offset
            )
        super().__init__(bytes(region[:DIRECTORY_SIZE]), header, name)
        self.region = region

    def candidates(
        self, key_hash: int, pages: dict[int, bytes] | None = None
    ) -> Iterator[tuple[int, int]]:
        table = (key_hash & 255) << 1
        tables = self.tables
        count = tables[table + 1]
        if not count:
            return
        first = tables[table]
        position = (key_hash >> 8) % count
        unpack = SLOT.unpack_from
        size = SLOT.size
        region = self.region
        for _ in range(count):
            slot_hash, offset, length = unpack(region, DIRECTORY_SIZE + (first + position) * size)
            if not length:
                return
            if slot_hash == key_hash:
                yield offset, length
            position = position + 1 if position + 1 < count else 0

    def locations(self) -> list[tuple[int, int]]:
        region = self.region
        body = memoryview(region)[DIRECTORY_SIZE : len(region) - CRC.size]
        return sorted((offset, length) for _, offset, length in SLOT.iter_unpack(body) if length)
