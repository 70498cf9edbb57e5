"""The version 2 (and 3) journal index: the first SQN and the offset of every block of about
:data:`~inkpen.formats.journal.INDEX_BLOCK` bytes, checked and decoded at open, then held for
the reader's life or kept in a shared byte-weighted cache."""

from __future__ import annotations

import bisect
import itertools
import sys
import zlib
from array import array
from typing import TypeAlias, cast

from inkpen.errors import CorruptionError

from ..cache import BlockCache
from ..fetching import Fetch, fetch_exact
from . import _format
from ._format import HEADER_SIZE, MIN_RECORD, JournalHeader, cache_tokens

# The record layout's structs, bound here by assignment: CPython 3.11 compiles a method call
# on a name bound by an import as an attribute load (no LOAD_METHOD), which cost a tenth of a
# get's time.
BLOCK_ENTRY = _format.BLOCK_ENTRY
CRC = _format.CRC

_BLOCK_OVERHEAD = 400
"""What a cached block index weighs beyond its 16 bytes per block (two arrays, the entry)."""


Arrays: TypeAlias = "tuple[array[int], array[int]]"
"""The first SQN and the offset of every block of a file, as two arrays."""


class BlockIndex:
    """The SQN block index of one version 2 journal file: the first SQN and the offset of
    every block, as two arrays (:meth:`arrays`). Of two kinds: :class:`HeldBlockIndex` holds
    them for the reader's life (no cache: tools and tests), :class:`CachedBlockIndex` keeps them
    in a byte-weighted LRU the database's journal files share."""

    __slots__ = ("count", "header", "name")

    def __init__(self, arrays: Arrays, header: JournalHeader, name: str) -> None:
        self.header = header
        self.name = name
        self.count = len(arrays[0])

    @staticmethod
    def load(
        fetch: Fetch, header: JournalHeader, name: str, cache: BlockCache | None
    ) -> HeldBlockIndex | CachedBlockIndex:
        """Read the index region of the file behind ``fetch`` (past the journal cache), check
        it and keep it: held without ``cache``, in ``cache`` with one."""
        fetch = getattr(fetch, "direct", fetch)
        region = fetch_exact(fetch, header.hash_offset, header.size, name)
        arrays = decode_block_index(region, header, name)
        if cache is None:
            return HeldBlockIndex(arrays, header, name)
        return CachedBlockIndex(arrays, header, name, fetch, cache)

    def arrays(self) -> Arrays:
        """The first SQNs and the offsets of the blocks."""
        raise NotImplementedError

    def block_of(
        self, stored_sqn: int, arrays: Arrays | None = None
    ) -> tuple[int, int, int] | None:
        """``(first SQN, start, end)`` of the block that would hold ``stored_sqn``, or None
        when the file's SQN range does not cover it (``arrays``: :meth:`arrays`, when the
        caller has them)."""
        header = self.header
        if not header.min_sqn <= stored_sqn <= header.max_sqn:
            return None
        firsts, offsets = self.arrays() if arrays is None else arrays
        k = bisect.bisect_right(firsts, stored_sqn) - 1
        end = offsets[k + 1] if k + 1 < len(offsets) else header.hash_offset
        return firsts[k], offsets[k], end

    def block_at(self, offset: int) -> tuple[int, int] | None:
        """``(first SQN, end)`` of the block that starts at ``offset``, or None if none does."""
        firsts, offsets = self.arrays()
        k = bisect.bisect_left(offsets, offset)
        if k == len(offsets) or offsets[k] != offset:
            return None
        end = offsets[k + 1] if k + 1 < len(offsets) else self.header.hash_offset
        return firsts[k], end

    def blocks(self) -> list[tuple[int, int, int]]:
        """``(first SQN, start, end)`` of every block, in file order."""
        firsts, offsets = self.arrays()
        ends = [*offsets[1:], self.header.hash_offset]
        return list(zip(firsts, offsets, ends, strict=True))


def decode_block_index(
    region: bytes, header: JournalHeader, name: str
) -> tuple[array[int], array[int]]:
    """Check a version 2 index region (its CRC and that its blocks cover the records region in
    order) and decode it into the blocks' first SQNs and offsets."""
    at = header.hash_offset
    body_length = len(region) - CRC.size
    if body_length < BLOCK_ENTRY.size or body_length % BLOCK_ENTRY.size:
        raise CorruptionError(name, "journal block index is truncated", offset=at)
    view = memoryview(region)
    if zlib.crc32(view[:body_length]) != CRC.unpack_from(region, body_length)[0]:
        raise CorruptionError(name, "journal block index checksum mismatch", offset=at)
    pairs = array("Q")
    pairs.frombytes(view[:body_length])
    if sys.byteorder == "little":
        pairs.byteswap()
    firsts, offsets = pairs[0::2], pairs[1::2]
    ordered = all(a < b for a, b in itertools.pairwise(firsts)) and all(
        b - a >= MIN_RECORD for a, b in itertools.pairwise(offsets)
    )
    if (
        not ordered
        or firsts[0] != header.min_sqn
        or firsts[-1] > header.max_sqn
        or offsets[0] != HEADER_SIZE
        or header.hash_offset - offsets[-1] < MIN_RECORD
    ):
        raise CorruptionError(name, "journal block index is inconsistent", offset=at)
    return firsts, offsets


class HeldBlockIndex(BlockIndex):
    """A block index held for the reader's life."""

    __slots__ = ("held",)

    def __init__(self, arrays: Arrays, header: JournalHeader, name: str) -> None:
        super().__init__(arrays, header, name)
        self.held = arrays

    def arrays(self) -> Arrays:
        return self.held


class CachedBlockIndex(BlockIndex):
    """A block index kept in ``cache`` (a byte-weighted LRU the database's journal files
    share), weighing 16 bytes per block: a lookup that finds it evicted reads the region again
    (past the journal cache) and checks its CRC."""

    __slots__ = ("cache", "fetch", "token")

    def __init__(
        self, arrays: Arrays, header: JournalHeader, name: str, fetch: Fetch, cache: BlockCache
    ) -> None:
        super().__init__(arrays, header, name)
        self.fetch = fetch
        self.cache = cache
        self.token = next(cache_tokens)
        cache.put(self.token, arrays, self.weight)

    @property
    def weight(self) -> int:
        """What the index weighs in a cache."""
        return self.count * BLOCK_ENTRY.size + _BLOCK_OVERHEAD

    def arrays(self) -> Arrays:
        """The arrays from the cache, or read again (one thread reads them; the others that
        want them wait for it)."""
        found = self.cache.get(self.token)
        if found is None:
            found = self.cache.load(self.token, self._reload)
        return cast("Arrays", found)

    def _reload(self) -> tuple[Arrays, int]:
        region = fetch_exact(self.fetch, self.header.hash_offset, self.header.size, self.name)
        return decode_block_index(region, self.header, self.name), self.weight
