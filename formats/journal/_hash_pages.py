"""The paged version 1 hash index: slot pages read on demand through a shared cache, each
checked against the CRC taken of it when the file was opened."""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Iterable, Iterator
from typing import cast

from inkpen.errors import CorruptionError

from ..cache import BlockCache
from ..fetching import Fetch, fetch_exact
from . import _format
from ._format import DIRECTORY_SIZE, JournalHeader, cache_tokens
from ._hash_index import PAGE_BYTES, PAGE_MASK, PAGE_SHIFT, HashIndex

# The record layout's structs, bound here by assignment: CPython 3.11 compiles a method call
# on a name bound by an import as an attribute load (no LOAD_METHOD), which cost a tenth of a
# get's time.
CRC = _format.CRC
SLOT = _format.SLOT

PAGE_WEIGHT = PAGE_BYTES + 160
"""What a cached page weighs: its bytes and the cache entry, key and object headers around them."""
_OPEN_PIECE = 1024 * PAGE_BYTES
"""Open reads a hash region in pieces of at most this many slot bytes (1 MiB)."""
PAGE_GAP = 4
"""Slot pages at most this many apart are read together by :meth:`JournalReader.locate_many`
(the pages between them come along and are dropped)."""
PAGE_RUN = 256 * PAGE_BYTES
"""The largest read of slot pages :meth:`JournalReader.locate_many` makes (256 KiB)."""


class PagedHashIndex(HashIndex):
    """A hash region left on the store: open reads it once in pieces, checks its CRC and keeps
    only the directory and a CRC-32 per page of :data:`PAGE_BYTES` of slots (4 bytes per 32
    entries); a lookup then takes the page its probe needs from ``cache`` (a byte-weighted LRU
    shared by the database's journal files) or reads that page alone and checks it against its
    CRC before using or caching it."""

    __slots__ = ("cache", "fetch", "page_crcs", "token")

    def __init__(
        self,
        directory: bytes,
        header: JournalHeader,
        name: str,
        page_crcs: array[int],
        cache: BlockCache,
        fetch: Fetch,
    ) -> None:
        super().__init__(directory, header, name)
        self.page_crcs = page_crcs
        self.cache = cache
        self.fetch = fetch
        self.token = next(cache_tokens)

    @classmethod
    def open(
        cls, fetch: Fetch, header: JournalHeader, name: str, cache: BlockCache
    ) -> PagedHashIndex:
        """Read the region of the file behind ``fetch`` in pieces, check its CRC, and keep the
        directory and the CRC of every page; the slots are left on the store."""
        fetch = getattr(fetch, "direct", fetch)  # past the journal cache: slots are not records
        start = header.hash_offset
        size = header.size
        slots_end = size - CRC.size
        crcs = array("I")
        crc = 0
        directory = b""
        stored = -1
        pos = start
        while pos < size:
            end = min(size, (start + DIRECTORY_SIZE if pos == start else pos) + _OPEN_PIECE)
            piece = fetch_exact(fetch, pos, end, name)
            view = memoryview(piece)
            if pos == start:
                directory = bytes(view[:DIRECTORY_SIZE])
            if end == size:
                (stored,) = CRC.unpack_from(piece, len(piece) - CRC.size)
                view = view[: len(piece) - CRC.size]
            crc = zlib.crc32(view, crc)
            slots = view[DIRECTORY_SIZE:] if pos == start else view
            for at in range(0, len(slots), PAGE_BYTES):
                crcs.append(zlib.crc32(slots[at : at + PAGE_BYTES]))
            pos = end
        if crc != stored or len(directory) != DIRECTORY_SIZE or slots_end < start:
            raise CorruptionError(name, "journal hash region checksum mismatch", offset=start)
        return cls(directory, header, name, crcs, cache, fetch)

    def _page(self, number: int) -> bytes:
        """Slot page ``number``, from the cache or read alone and checked against its CRC."""
        key = (self.token, number)
        cache = self.cache
        page = cache.get(key)
        if page is None:  # one thread reads it; the others that want it wait for it
            page = cache.load(key, lambda: self._read_page(number))
        return cast(bytes, page)

    def _read_page(self, number: int) -> tuple[bytes, int]:
        start = self.slots_at + number * PAGE_BYTES
        end = min(start + PAGE_BYTES, self.slots_end)
        page = fetch_exact(self.fetch, start, end, self.name)
        self._check_page(number, page, start)
        return page, PAGE_WEIGHT

    def _check_page(self, number: int, page: bytes | memoryview, offset: int) -> None:
        """Raise unless slot page ``number`` (read at ``offset``) has the CRC taken at open."""
        if zlib.crc32(page) != self.page_crcs[number]:
            raise CorruptionError(self.name, "journal hash region checksum mismatch", offset=offset)

    def load_pages(self, numbers: Iterable[int]) -> dict[int, bytes]:
        """Slot pages ``numbers`` by number: the ones the cache holds from there, the others
        read in runs, pages at most :data:`PAGE_GAP` apart joined into one read of at most
        :data:`PAGE_RUN` bytes, each checked against its CRC. Pages read here are not cached: a
        scan wants each once per window and must not evict a point read's."""
        cache = self.cache
        token = self.token
        pages: dict[int, bytes] = {}
        missing: list[int] = []
        for number in sorted(set(numbers)):
            page = cache.get((token, number))
            if page is None:
                missing.append(number)
            else:
                pages[number] = cast(bytes, page)
        i = 0
        while i < len(missing):
            first = last = missing[i]
            j = i + 1
            while j < len(missing):
                number = missing[j]
                if number - last > PAGE_GAP or (number - first + 1) * PAGE_BYTES > PAGE_RUN:
                    break
                last = number
                j += 1
            start = self.slots_at + first * PAGE_BYTES
            end = min(self.slots_at + (last + 1) * PAGE_BYTES, self.slots_end)
            data = fetch_exact(self.fetch, start, end, self.name)
            for number in missing[i:j]:
                at = (number - first) * PAGE_BYTES
                page = data[at : at + PAGE_BYTES]
                self._check_page(number, page, start + at)
                pages[number] = page
            i = j
        return pages

    def candidates(
        self, key_hash: int, pages: dict[int, bytes] | None = None
    ) -> Iterator[tuple[int, int]]:
        """:meth:`HashIndex.candidates`, taking pages from ``pages`` first, then the cache."""
        table = (key_hash & 255) << 1
        tables = self.tables
        count = tables[table + 1]
        if not count:
            return
        first = tables[table]
        position = (key_hash >> 8) % count
        unpack = SLOT.unpack_from
        size = SLOT.size
        page = b""
        page_number = -1
        for _ in range(count):
            slot = first + position
            number = slot >> PAGE_SHIFT
            if number != page_number:
                found = pages.get(number) if pages else None
                page = self._page(number) if found is None else found
                page_number = number
            slot_hash, offset, length = unpack(page, (slot & PAGE_MASK) * size)
            if not length:
                return
            if slot_hash == key_hash:
                yield offset, length
            position = position + 1 if position + 1 < count else 0

    def locations(self) -> list[tuple[int, int]]:
        """:meth:`HashIndex.locations`, reading the slots whole (past the cache) and checking
        every page."""
        body = memoryview(fetch_exact(self.fetch, self.slots_at, self.slots_end, self.name))
        for number, at in enumerate(range(0, len(body), PAGE_BYTES)):
            self._check_page(number, body[at : at + PAGE_BYTES], self.slots_at + at)
        return sorted((offset, length) for _, offset, length in SLOT.iter_unpack(body) if length)
