"""SST files: immutable sorted runs of ledger entries ``(encoded key, LedgerValue)``.

Layout (integers big-endian unless said; every block is followed by the CRC-32 of its stored
bytes, and each offset/length below spans a block together with its CRC)::

    data blocks     one after another from offset 0, each holding about ``block_size`` bytes
                    of entries before compression; a value is
                    [sqn, status, expiry|nil, hash, size, lmd(, value)]; version 2:
                      snappy(head, offsets, msgpack [key, value, key, value, ...])
                      head     u8 width of an offset (2 or 4), u32 entry count
                      offsets  little-endian, one per entry: where its key starts in the array
                    version 1 (written before; still read):
                      snappy(msgpack [[key, ...], [value, ...]])
    index block     snappy(msgpack [[first key of each block], [offset], [length]])
    bloom block     the serialized BloomFilter of every key (see inkpen.formats.bloom)
    meta block      msgpack map: first_key, last_key, entries, tombstones, min_sqn, max_sqn,
                    block_size, bloom_bits, blocks
    footer, the last 48 bytes
      0   6  magic b"INKSST"
      6   2  format version (u16), 2 (1 is read too)
      8   8  index block offset (u64)
      16  4  index block length (u32)
      20  8  bloom block offset (u64)
      28  4  bloom block length (u32)
      32  8  meta block offset (u64)
      40  4  meta block length (u32)
      44  4  CRC-32 of footer bytes [0, 44)

Index, bloom and meta are contiguous and end where the footer starts, so a reader opens a file
with two ranged reads: the footer, then everything from the index offset to the footer. A point
lookup then costs a bloom probe, a bisect of the index and at most one read. The shared cache
holds data blocks as stored (snappy), a run at a time (:data:`RUN_BYTES`: every block that
starts in one aligned 12 KiB of the file, one read and one cache entry), weighed by their size;
a block's CRC is checked the first time its cached run gives it out. The first point lookup
of a version 2 block decompresses it and searches for the key's msgpack encoding, counts a
match only where the offsets table says an entry starts, and decodes that entry's value alone;
the next one (while the block's run is cached) decodes the block whole (one msgpack call)
and keeps it decoded in the same cache, under ``(name, block, sqn_base, 3)``, weighed by its
memory (its decompressed bytes plus :data:`_DECODED_ENTRY` an entry), so the cache's one bound
covers runs and decoded blocks alike; it does so only while the cache has room for it without
evicting anything, so a cache too small for what the gets use keeps blocks as stored rather
than decode and evict them in turn. A block kept decoded answers a lookup
with a bisect, without the bloom filter and without decompressing. Version 1 blocks are
decoded and kept at once. Scans and merges decode whole blocks and keep nothing decoded.

Any damaged byte fails a CRC and raises :class:`CorruptionError` naming the object and the offset
of the damaged block; damaged bytes are never returned as data.
"""

from __future__ import annotations

import struct
import sys
import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, repeat
from operator import add, itemgetter
from typing import Any, Protocol, cast

import msgpack
import snappy

from inkpen.errors import CorruptionError

from .bloom import DEFAULT_BITS_PER_KEY, BloomFilter, bloom_hash
from .cache import BlockCache
from .fetching import Fetch, Piece, Prefetched, fetch_exact, short_read
from .keys import LedgerValue

MAGIC = b"INKSST"
FORMAT_VERSION = 2
"""Version 2 lays out a data block for point lookups without decoding it (see the module
docstring); version 1 files, written before, are read as they are."""
DEFAULT_BLOCK_SIZE = 4096
DEFAULT_READAHEAD = 256 * 1024
RUN_BYTES = 12 * 1024
"""A reader with a cache reads and caches data blocks a run at a time: a run is every block
that starts in one aligned ``RUN_BYTES`` of the file (so a run spans at most ``RUN_BYTES`` plus
the length of its last block). A point lookup reads one run, so that a cold get reads at most
about 16 KiB in all (its SST run and its journal record); a scan or a merge reads the runs of
``readahead`` bytes at once."""

_FOOTER_BODY = struct.Struct(">6sHQIQIQI")
_CRC = struct.Struct(">I")
FOOTER_SIZE = _FOOTER_BODY.size + _CRC.size
"""Size in bytes of the fixed footer at the end of every SST."""

_ENTRY_OVERHEAD = 40
"""Rough encoded size of a LedgerValue plus framing, used to cut blocks and estimate sizes."""
_U64 = 1 << 64
_MIN_BLOCK_SIZE = 64
_MAX_BLOCK_SIZE = 64 * 1024 * 1024
_MAKE_VALUE = LedgerValue._make
_new_tuple = tuple.__new__
_RUN = 2
"""The last part of the cache key of a run of stored blocks (:data:`RUN_BYTES`)."""
_STORED_OVERHEAD = 300
"""Memory of a cached run beyond its bytes: the run object, its check flags, its cache key and
the cache's entry."""
_Decoded = tuple[tuple[bytes, ...], tuple[tuple[Any, ...], ...]]
"""A data block kept decoded for point lookups: its keys and its values as msgpack gives them."""
_POINT = 3
"""The last part of the cache key of a data block kept decoded for point lookups."""
_DECODED_ENTRY = 240
"""Memory of one entry of a block kept decoded beyond its share of the decompressed bytes (its
key and value objects; measured with tracemalloc on blocks of 100-byte values: a 4 KB block of
25 entries takes about 9.8 KB decoded)."""
_CRC_SIZE = 4
_U32_AT = struct.Struct(">I").unpack_from
_crc32 = zlib.crc32
_VALUE_LENGTHS = {len(LedgerValue._fields), len(LedgerValue._fields) + 1}
"""Six fields, or seven when the ledger keeps the value: a head-only object's, or an object's of
at most ``inline_value_bytes``."""
_V2_HEAD = struct.Struct(">BI")
"""A version 2 block's head: the width of its offsets (2 or 4) and its entry count."""
_V2_OFFSETS = {2: "<%dH", 4: "<%dI"}
_CAST_OFFSETS = (
    sys.byteorder == "little" and struct.calcsize("H") == 2 and struct.calcsize("I") == 4
)
"""Little-endian offsets are read in place (a memoryview cast) where the machine's order is
the file's; elsewhere they are unpacked."""
_unpackb = msgpack.unpackb
_V2_HEAD_SIZE = _V2_HEAD.size


def _bin_header(length: int) -> bytes:
    """The msgpack header of a bin of ``length`` bytes (a key's encoding is it plus the key)."""
    if length < 0x100:
        return b"\xc4" + length.to_bytes(1, "big")
    if length < 0x10000:
        return b"\xc5" + length.to_bytes(2, "big")
    return b"\xc6" + length.to_bytes(4, "big")


_SQN_OF = itemgetter(0)
_STATUS_OF = itemgetter(1)


@dataclass(frozen=True, slots=True)
class SstInfo:
    """What an SST holds, as recorded in its meta block (SQNs include any ``sqn_base``)."""

    size: int
    entry_count: int
    tombstone_count: int
    first_key: bytes
    last_key: bytes
    min_sqn: int
    max_sqn: int


def _framed(stored: bytes) -> bytes:
    return stored + _CRC.pack(zlib.crc32(stored))


def _checked_value(value: Any) -> LedgerValue:
    if len(value) not in _VALUE_LENGTHS:
        raise ValueError(f"a ledger value has {len(LedgerValue._fields)} fields: {value!r}")
    if len(value) > len(LedgerValue._fields):
        if type(value[6]) is not bytes:
            raise ValueError(f"a ledger value's seventh field (its value) must be bytes: {value!r}")
        value = _new_tuple(LedgerValue, tuple(value))
    elif type(value) is not LedgerValue:
        value = _MAKE_VALUE(value)
    sqn, status, expiry, content_hash, size, last_modified = value[:6]
    if not (
        0 <= sqn < _U64
        and status in (0, 1)
        and (expiry is None or 0 <= expiry < _U64)
        and 0 <= content_hash < _U64
        and 0 <= size < _U64
        and 0 <= last_modified < _U64
    ):
        raise ValueError(f"ledger value fields out of range: {value!r}")
    return cast(LedgerValue, value)


class SstBuilder:
    """Accumulates entries in strictly increasing key order and lays them out as one SST."""

    __slots__ = (
        "_block_bytes",
        "_block_size",
        "_bloom_bits",
        "_chunks",
        "_finished",
        "_first_key",
        "_format_version",
        "_hashes",
        "_index_key_bytes",
        "_index_keys",
        "_index_lengths",
        "_index_offsets",
        "_keys",
        "_last_key",
        "_max_sqn",
        "_min_sqn",
        "_offset",
        "_tombstones",
        "_values",
        "entry_count",
    )

    def __init__(
        self,
        *,
        block_size: int = DEFAULT_BLOCK_SIZE,
        bloom_bits_per_key: int = DEFAULT_BITS_PER_KEY,
        format_version: int = FORMAT_VERSION,
    ) -> None:
        if format_version not in (1, FORMAT_VERSION):
            raise ValueError(
                f"format_version must be 1 or {FORMAT_VERSION}, got {format_version!r}"
            )
        if not isinstance(block_size, int) or not _MIN_BLOCK_SIZE <= block_size <= _MAX_BLOCK_SIZE:
            raise ValueError(
                f"block_size must be an int in [{_MIN_BLOCK_SIZE}, {_MAX_BLOCK_SIZE}], "
                f"got {block_size!r}"
            )
        if not isinstance(bloom_bits_per_key, int) or not 1 <= bloom_bits_per_key <= 255:
            raise ValueError(
                f"bloom_bits_per_key must be an int in [1, 255], got {bloom_bits_per_key!r}"
            )
        self._block_size = block_size
        self._bloom_bits = bloom_bits_per_key
        self._format_version = format_version
        self._chunks: list[bytes] = []
        self._offset = 0
        self._keys: list[bytes] = []
        self._values: list[LedgerValue] = []
        self._block_bytes = 0
        self._hashes: list[int] = []
        self._index_keys: list[bytes] = []
        self._index_key_bytes = 0
        self._index_offsets: list[int] = []
        self._index_lengths: list[int] = []
        self._first_key: bytes | None = None
        self._last_key: bytes | None = None
        self._min_sqn = _U64
        self._max_sqn = -1
        self._tombstones = 0
        self._finished = False
        self.entry_count = 0
        """Entries added so far."""

    def add(self, key: bytes, value: LedgerValue) -> None:
        """Append an entry; ``key`` must sort after every key added before.

        Every key of every SST written passes here, so only the checks that must refuse bad
        input at once run per entry; bloom hashes and SQN statistics are taken a block at a time.
        """
        if self._finished:
            raise ValueError("this SstBuilder has finished; start a new one")
        if type(key) is not bytes:
            raise TypeError(f"an SST key must be bytes, not {type(key).__name__}")
        last = self._last_key
        if last is not None and key <= last:
            raise ValueError(
                f"SST keys must be strictly increasing: {key[:64]!r} after {last[:64]!r}"
            )
        if type(value) is LedgerValue and len(value) == 6:
            sqn, status, expiry, content_hash, size, last_modified = value
            if not (
                0 <= sqn < _U64
                and (status == 0 or status == 1)
                and (expiry is None or 0 <= expiry < _U64)
                and 0 <= content_hash < _U64
                and 0 <= size < _U64
                and 0 <= last_modified < _U64
            ):
                raise ValueError(f"ledger value fields out of range: {value!r}")
        else:
            value = _checked_value(value)
            if len(value) > 6:
                self._block_bytes += len(value[6])
        if last is None:
            self._first_key = key
        self._last_key = key
        self._keys.append(key)
        self._values.append(value)
        self.entry_count += 1
        self._block_bytes += len(key) + _ENTRY_OVERHEAD
        if self._block_bytes >= self._block_size:
            self._flush_block()

    def _flush_block(self) -> None:
        keys = self._keys
        if not keys:
            return
        values = self._values
        self._hashes.extend(map(bloom_hash, keys))
        sqns = list(map(_SQN_OF, values))
        low, high = min(sqns), max(sqns)
        if low < self._min_sqn:
            self._min_sqn = low
        if high > self._max_sqn:
            self._max_sqn = high
        self._tombstones += sum(map(_STATUS_OF, values))  # TOMBSTONE is 1, ACTIVE 0
        if self._format_version == 1:
            stored = snappy.compress(msgpack.packb([keys, values], use_bin_type=True))
        else:
            stored = snappy.compress(_pack_block(keys, values))
        block = _framed(stored)
        self._index_keys.append(keys[0])
        self._index_key_bytes += len(keys[0])
        self._index_offsets.append(self._offset)
        self._index_lengths.append(len(block))
        self._chunks.append(block)
        self._offset += len(block)
        self._keys = []
        self._values = []
        self._block_bytes = 0

    def estimated_size(self) -> int:
        """About how many bytes :meth:`finish` would produce now (to roll files at a size)."""
        index = self._index_key_bytes + 24 * (len(self._index_keys) + 1)
        bloom = self.entry_count * self._bloom_bits // 8 + 16
        meta = 2 * len(self._last_key or b"") + 160
        return self._offset + self._block_bytes + index + bloom + meta + FOOTER_SIZE

    def finish(self) -> tuple[bytes, SstInfo]:
        """Lay out the file; return its bytes and what it holds. An empty SST is refused."""
        if self._finished:
            raise ValueError("this SstBuilder has finished; start a new one")
        if not self.entry_count:
            raise ValueError("an SST holds at least one entry; add entries before finish()")
        self._flush_block()
        self._finished = True
        first_key = self._first_key
        last_key = self._last_key
        assert first_key is not None and last_key is not None
        index = _framed(
            snappy.compress(
                msgpack.packb(
                    [self._index_keys, self._index_offsets, self._index_lengths],
                    use_bin_type=True,
                )
            )
        )
        bloom = _framed(BloomFilter.from_hashes(self._hashes, self._bloom_bits).to_bytes())
        self._hashes = []
        meta = _framed(
            msgpack.packb(
                {
                    "first_key": first_key,
                    "last_key": last_key,
                    "entries": self.entry_count,
                    "tombstones": self._tombstones,
                    "min_sqn": self._min_sqn,
                    "max_sqn": self._max_sqn,
                    "block_size": self._block_size,
                    "bloom_bits": self._bloom_bits,
                    "blocks": len(self._index_keys),
                },
                use_bin_type=True,
            )
        )
        index_offset = self._offset
        bloom_offset = index_offset + len(index)
        meta_offset = bloom_offset + len(bloom)
        footer_body = _FOOTER_BODY.pack(
            MAGIC,
            self._format_version,
            index_offset,
            len(index),
            bloom_offset,
            len(bloom),
            meta_offset,
            len(meta),
        )
        footer = footer_body + _CRC.pack(zlib.crc32(footer_body))
        data = b"".join([*self._chunks, index, bloom, meta, footer])
        self._chunks = []
        info = SstInfo(
            size=len(data),
            entry_count=self.entry_count,
            tombstone_count=self._tombstones,
            first_key=first_key,
            last_key=last_key,
            min_sqn=self._min_sqn,
            max_sqn=self._max_sqn,
        )
        return data, info


def _array_header(items: int) -> bytes:
    if items < 16:
        return bytes((0x90 | items,))
    if items < 0x10000:
        return b"\xdc" + items.to_bytes(2, "big")
    return b"\xdd" + items.to_bytes(4, "big")


def _pack_block(keys: list[bytes], values: list[LedgerValue]) -> bytes:
    """A version 2 data block before compression: head, offsets, flat msgpack array."""
    count = len(keys)
    pack = msgpack.Packer().pack  # one packer per block: half the cost of packb per item
    array = [_array_header(2 * count)]
    array.extend(chain.from_iterable(zip(map(pack, keys), map(pack, values), strict=True)))
    lengths = list(map(len, array))
    offsets = list(accumulate(map(add, lengths[1::2], lengths[2::2]), initial=lengths[0]))
    width = 2 if offsets.pop() <= 0xFFFF else 4
    table = struct.pack(_V2_OFFSETS[width] % count, *offsets)
    return b"".join([_V2_HEAD.pack(width, count), table, *array])


DEFAULT_TARGET_BYTES = 4 * 1024 * 1024


class SstOptionsSource(Protocol):
    """Where :meth:`SstShape.of` reads the options (:class:`inkpen.Options` has them)."""

    @property
    def sst_block_bytes(self) -> int: ...

    @property
    def bloom_bits_per_key(self) -> int: ...

    @property
    def sst_target_bytes(self) -> int: ...


@dataclass(frozen=True, slots=True)
class SstShape:
    """How new SST files are built: the one value that carries every build option from the
    options to each place a file is built (L0 writes, merges in the compute workers, the
    compactor, bulk loads). A new build option is a field here and an option read in :meth:`of`."""

    block_bytes: int = DEFAULT_BLOCK_SIZE
    """Entries are cut into blocks of about this many bytes."""
    bloom_bits_per_key: int = DEFAULT_BITS_PER_KEY
    target_bytes: int = DEFAULT_TARGET_BYTES
    """A merge or a load starts a new file once the current one reaches about this size."""
    format_version: int = FORMAT_VERSION

    @classmethod
    def of(cls, options: SstOptionsSource) -> SstShape:
        """The shape the options ask for (``sst_block_bytes``, ``bloom_bits_per_key``,
        ``sst_target_bytes``)."""
        return cls(
            block_bytes=options.sst_block_bytes,
            bloom_bits_per_key=options.bloom_bits_per_key,
            target_bytes=options.sst_target_bytes,
        )

    def builder(self) -> SstBuilder:
        """A builder of one file of this shape."""
        return SstBuilder(
            block_size=self.block_bytes,
            bloom_bits_per_key=self.bloom_bits_per_key,
            format_version=self.format_version,
        )


def build_sst(
    entries: Iterable[tuple[bytes, LedgerValue]],
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    bloom_bits_per_key: int = DEFAULT_BITS_PER_KEY,
    format_version: int = FORMAT_VERSION,
) -> tuple[bytes, SstInfo]:
    """Build one SST from entries in strictly increasing key order."""
    builder = SstBuilder(
        block_size=block_size,
        bloom_bits_per_key=bloom_bits_per_key,
        format_version=format_version,
    )
    for key, value in entries:
        builder.add(key, value)
    return builder.finish()


def _unframe(data: bytes, start: int, length: int, name: str, base: int, what: str) -> bytes:
    """Check the CRC of the block at ``data[start:start+length]``; return its stored bytes."""
    end = start + length - _CRC.size
    (stored_crc,) = _CRC.unpack_from(data, end)
    view = memoryview(data)[start:end]
    if zlib.crc32(view) != stored_crc:
        raise CorruptionError(name, f"SST {what} checksum mismatch", offset=base + start)
    return bytes(view)


class _Layout:
    """The decoded footer of an SST: where its index, bloom and meta blocks are."""

    __slots__ = ("bloom_length", "index_length", "index_offset", "meta_length", "version")

    def __init__(self, footer: bytes, size: int, name: str) -> None:
        at = size - FOOTER_SIZE
        fields = _FOOTER_BODY.unpack_from(footer, 0)
        magic, version, index_offset, index_length, bloom_offset, bloom_length = fields[:6]
        meta_offset, meta_length = fields[6:]
        if magic != MAGIC:
            raise CorruptionError(
                name,
                f"not an inkpen SST: footer magic is {magic!r}, expected {MAGIC!r}",
                offset=at,
            )
        if version > FORMAT_VERSION:
            raise CorruptionError(
                name,
                f"SST format version {version} is newer than this inkpen reads (up to "
                f"{FORMAT_VERSION}); upgrade inkpen to read this database, unless the footer is "
                "damaged",
                offset=at + 6,
            )
        (stored_crc,) = _CRC.unpack_from(footer, _FOOTER_BODY.size)
        if zlib.crc32(memoryview(footer)[: _FOOTER_BODY.size]) != stored_crc:
            raise CorruptionError(name, "SST footer checksum mismatch", offset=at)
        if version < 1:
            raise CorruptionError(name, f"SST format version {version} is invalid", offset=at + 6)
        if not (
            min(index_length, bloom_length, meta_length) > _CRC.size
            and index_offset + index_length == bloom_offset
            and bloom_offset + bloom_length == meta_offset
            and meta_offset + meta_length == at
        ):
            raise CorruptionError(
                name,
                f"SST footer does not describe a {size}-byte object (wrong size or damaged)",
                offset=at,
            )
        self.index_offset = index_offset
        self.index_length = index_length
        self.bloom_length = bloom_length
        self.meta_length = meta_length
        self.version = version


def _index_matches(
    first_keys: list[bytes],
    offsets: list[int],
    lengths: list[int],
    blocks: int,
    data_end: int,
    info: SstInfo,
) -> bool:
    """True when the index tiles the data region exactly and agrees with the meta block."""
    if not blocks >= 1 or not len(first_keys) == len(offsets) == len(lengths) == blocks:
        return False
    position = 0
    for offset, length in zip(offsets, lengths, strict=True):
        if offset != position or length <= _CRC.size:
            return False
        position += length
    return (
        position == data_end
        and first_keys[0] == info.first_key
        and info.first_key <= info.last_key
        and info.entry_count >= blocks
    )


class _Tail:
    """The decoded index, bloom and meta blocks of an SST (everything after the data blocks)."""

    __slots__ = ("bloom", "first_keys", "info", "lengths", "offsets", "version")

    def __init__(self, tail: bytes, layout: _Layout, size: int, name: str, sqn_base: int) -> None:
        base = layout.index_offset
        index_stored = _unframe(tail, 0, layout.index_length, name, base, "index block")
        bloom_at = layout.index_length
        bloom_stored = _unframe(tail, bloom_at, layout.bloom_length, name, base, "bloom block")
        meta_at = bloom_at + layout.bloom_length
        meta_stored = _unframe(tail, meta_at, layout.meta_length, name, base, "meta block")
        try:
            first_keys, offsets, lengths = msgpack.unpackb(
                snappy.decompress(index_stored), use_list=True, raw=False
            )
            bloom = BloomFilter.from_bytes(bloom_stored)
            meta = msgpack.unpackb(meta_stored, raw=False)
            info = SstInfo(
                size=size,
                entry_count=meta["entries"],
                tombstone_count=meta["tombstones"],
                first_key=meta["first_key"],
                last_key=meta["last_key"],
                min_sqn=meta["min_sqn"] + sqn_base,
                max_sqn=meta["max_sqn"] + sqn_base,
            )
            consistent = _index_matches(first_keys, offsets, lengths, meta["blocks"], base, info)
        except Exception as exc:  # msgpack, snappy and the bloom parser raise assorted types
            raise CorruptionError(
                name, f"SST index, bloom or meta block does not decode: {exc}", offset=base
            ) from exc
        if not consistent:
            raise CorruptionError(name, "SST index does not match its meta block", offset=base)
        self.first_keys: list[bytes] = first_keys
        self.offsets: list[int] = offsets
        self.lengths: list[int] = lengths
        self.bloom = bloom
        self.info = info
        self.version = layout.version


class _Run:
    """A run of an SST's data blocks as read (each block followed by its CRC), as the block
    cache holds it: the number of its first block, its offset in the file, its bytes, and
    which of its blocks have passed their CRC check.

    The only state that changes is in ``checked`` and ``pointed``: a flag goes from 0 to 1 once
    its block's CRC has been checked (once a point lookup has searched the block in place),
    never back, so a reader that sees 0 (another thread may be setting it) checks again and
    finds the same answer (or searches in place once more than needed)."""

    __slots__ = ("checked", "data", "first", "pointed", "start")

    def __init__(self, first: int, start: int, data: bytes, blocks: int) -> None:
        self.first = first
        self.start = start
        self.data = data
        self.checked = bytearray(blocks)
        self.pointed = bytearray(blocks)
        """Which blocks a point lookup has searched in place (the next one to use the block
        keeps it decoded, :meth:`SstReader._admit`)."""


def _decoded_weight(payload: bytes, entries: int) -> int:
    """The memory a block decompressed to ``payload``, of ``entries`` entries, takes decoded."""
    return len(payload) + _DECODED_ENTRY * entries + _STORED_OVERHEAD


def _search_decoded(
    keys: tuple[bytes, ...], values: list[LedgerValue], key: bytes
) -> LedgerValue | None:
    position = bisect_left(keys, key)
    if position < len(keys) and keys[position] == key:
        return values[position]
    return None


class SstReader:
    """Reads one SST object by ranged reads: point lookups and forward range scans.

    Open costs two ranged reads and keeps the index, bloom filter and meta in memory. Data
    blocks go through the shared ``cache`` (if any) as stored, a run at a time, under ``(name,
    run number, sqn_base, 2)``. ``sqn_base`` is added to every SQN returned (files written by a
    bulk load number from 0). Immutable after open (but for the check flags of the runs it
    caches, see :class:`_Run`), so one reader may serve many threads.
    """

    __slots__ = (
        "_block_lengths",
        "_block_offsets",
        "_bloom",
        "_cache",
        "_fetch",
        "_first_keys",
        "_readahead",
        "info",
        "name",
        "size",
        "sqn_base",
        "version",
    )

    def __init__(
        self,
        name: str,
        size: int,
        fetch: Fetch,
        cache: BlockCache | None,
        sqn_base: int,
        tail: _Tail,
        readahead: int = 0,
    ) -> None:
        self.name = name
        self._readahead = readahead
        self.size = size
        self.sqn_base = sqn_base
        self._fetch = fetch
        self._cache = cache
        self._first_keys = tail.first_keys
        self._block_offsets = tail.offsets
        self._block_lengths = tail.lengths
        self._bloom = tail.bloom
        self.info = tail.info
        self.version = tail.version
        """The file's format version (1 or 2)."""

    @classmethod
    def open(
        cls,
        name: str,
        size: int,
        fetch: Fetch,
        *,
        cache: BlockCache | None = None,
        sqn_base: int = 0,
        readahead: int = DEFAULT_READAHEAD,
    ) -> SstReader:
        """Open SST object ``name`` of ``size`` bytes, read through ``fetch(start, end)``.

        ``readahead``: with a ``cache``, a scan or a merge that finds a block missing reads its
        run (:data:`RUN_BYTES`) and the runs after it, up to this many bytes in all, in one
        ranged read; the runs wait in the cache still encoded. On an object store every read is
        a round trip, so this turns a scan's hundreds of block reads per file into a few (below
        :data:`RUN_BYTES`: one run per read, as a point lookup always reads).
        """
        if size < FOOTER_SIZE:
            raise CorruptionError(
                name, f"{size} bytes is too short to be an SST (the footer alone is {FOOTER_SIZE})"
            )
        layout = _Layout(fetch_exact(fetch, size - FOOTER_SIZE, size, name), size, name)
        tail_bytes = fetch_exact(fetch, layout.index_offset, size - FOOTER_SIZE, name)
        tail = _Tail(tail_bytes, layout, size, name, sqn_base)
        return cls(name, size, fetch, cache, sqn_base, tail, readahead)

    @property
    def block_count(self) -> int:
        """Number of data blocks."""
        return len(self._first_keys)

    def may_contain(self, key: bytes) -> bool:
        """False if ``key`` is certainly not in this file (key range and bloom filter)."""
        info = self.info
        return info.first_key <= key <= info.last_key and self._bloom.may_contain(key)

    def get(self, key: bytes, *, key_hash: int | None = None) -> LedgerValue | None:
        """The value stored under ``key``, or None; at most one block read.

        ``key_hash`` is ``bloom_hash(key)`` when the caller has it already (one hash serves every
        file a lookup visits). A block kept decoded in the cache answers without the bloom
        filter (searching it costs less than probing the filter).
        """
        info = self.info
        if not info.first_key <= key <= info.last_key:
            return None
        block = bisect_right(self._first_keys, key) - 1
        cache = self._cache
        if cache is not None:
            decoded: _Decoded | None = cache.get((self.name, block, self.sqn_base, _POINT))  # type: ignore[assignment]
            if decoded is not None:
                keys, raw_values = decoded
                position = bisect_left(keys, key)
                if position < len(keys) and keys[position] == key:
                    return self._one_value(raw_values[position], block)
                return None
        bloom = self._bloom
        if not (bloom.may_contain(key) if key_hash is None else bloom.may_contain_hash(key_hash)):
            return None
        if cache is None:
            keys, values = self._block(block)
            position = bisect_left(keys, key)
            if position < len(keys) and keys[position] == key:
                return values[position]
            return None
        run = self._run(block, cache)  # a point lookup reads one run
        payload = self._payload(block, self._from_run(block, run))
        if self.version > 1 and not self._admit(block, run, payload, cache):
            return self._lookup(block, payload, key)
        point_keys, raw_values = self._keep_decoded(block, payload, cache)
        position = bisect_left(point_keys, key)
        if position < len(point_keys) and point_keys[position] == key:
            return self._one_value(raw_values[position], block)
        return None

    def _admit(self, block: int, run: _Run, payload: bytes, cache: BlockCache) -> bool:
        """Whether a point lookup keeps version 2 ``block`` (decompressed: ``payload``) decoded:
        the second one to use it while its run is cached does, if the cache has room for it
        without evicting anything. The first searches it in place, so a block looked up once is
        never decoded whole; and a cache too small for the blocks gets use keeps them as stored
        (decoding a block costs several searches in place: blocks decoded and evicted in turn
        would cost more than they save)."""
        index = block - run.first
        pointed = run.pointed
        if not pointed[index]:
            pointed[index] = 1
            return False
        count = _V2_HEAD.unpack_from(payload, 0)[1] if len(payload) >= _V2_HEAD_SIZE else 0
        return cache.room() >= _decoded_weight(payload, count)

    def _keep_decoded(self, block: int, payload: bytes, cache: BlockCache) -> _Decoded:
        """Decode ``block`` (decompressed: ``payload``) for point lookups: its keys, its values
        as msgpack gives them; keep it in the cache, weighed by its memory
        (:func:`_decoded_weight`), if the cache has room for it without evicting anything."""
        keys, raw_values = self._decode_payload(block, payload)
        weight = _decoded_weight(payload, len(keys))
        if cache.room() >= weight:
            cache.put((self.name, block, self.sqn_base, _POINT), (keys, raw_values), weight)
        return keys, raw_values

    def point_block(self, key: bytes, key_hash: int) -> int | None:
        """The data block :meth:`get` would search for ``key`` (``key_hash`` its bloom hash), or
        None when the key range or the bloom filter rules this file out; reads nothing."""
        info = self.info
        if not info.first_key <= key <= info.last_key or not self._bloom.may_contain_hash(key_hash):
            return None
        return bisect_right(self._first_keys, key) - 1

    def block_of(self, key: bytes) -> int | None:
        """The data block that would hold ``key``, or None outside the file's key range; asks
        neither the bloom filter nor the cache, reads nothing."""
        info = self.info
        if not info.first_key <= key <= info.last_key:
            return None
        return bisect_right(self._first_keys, key) - 1

    def may_contain_hash(self, key_hash: int) -> bool:
        """The bloom filter's answer for a key whose :func:`bloom_hash` is ``key_hash``."""
        return self._bloom.may_contain_hash(key_hash)

    def get_in_block(
        self, block: int, keys: Sequence[bytes], *, cached_only: bool = False
    ) -> list[LedgerValue | None] | None:
        """:meth:`get` of several keys (sorted) that :meth:`point_block` placed in ``block``:
        the block is found in the cache or read (at most once) and searched for each key.
        With ``cached_only``, None (and no read) when the block is not in the cache."""
        cache = self._cache
        if cache is None:
            if cached_only:
                return None
            block_keys, values = self._block(block)
            return [_search_decoded(block_keys, values, key) for key in keys]
        decoded: _Decoded | None = cache.get((self.name, block, self.sqn_base, _POINT))  # type: ignore[assignment]
        if decoded is None:
            run_key = (self.name, self._block_offsets[block] // RUN_BYTES, self.sqn_base, _RUN)
            run: _Run | None = cache.get(run_key)  # type: ignore[assignment]
            if run is None:
                if cached_only:
                    return None
                run = cache.load(run_key, lambda: self._read_runs(block, cache, 0))  # type: ignore[assignment]
                assert run is not None
            payload = self._payload(block, self._from_run(block, run))
            if self.version > 1 and not self._admit(block, run, payload, cache):
                return [self._lookup(block, payload, key) for key in keys]
            decoded = self._keep_decoded(block, payload, cache)
        point_keys, raw_values = decoded
        out: list[LedgerValue | None] = []
        for key in keys:
            position = bisect_left(point_keys, key)
            if position < len(point_keys) and point_keys[position] == key:
                out.append(self._one_value(raw_values[position], block))
            else:
                out.append(None)
        return out

    def _one_value(self, raw: tuple[Any, ...], block: int) -> LedgerValue:
        """One value of a block decoded for point lookups, checked and made a LedgerValue."""
        if type(raw) is not tuple or len(raw) not in _VALUE_LENGTHS:
            raise CorruptionError(
                self.name,
                f"SST data block {block} does not decode: a ledger value has "
                f"{len(LedgerValue._fields)} fields",
                offset=self._block_offsets[block],
            )
        if self.sqn_base:
            return _new_tuple(LedgerValue, (raw[0] + self.sqn_base, *raw[1:]))  # 6 or 7 fields
        return _new_tuple(LedgerValue, raw)

    def _payload(self, block: int, stored: bytes) -> bytes:
        """The decompressed bytes of a block's checked stored bytes."""
        try:
            return snappy.decompress(stored)  # type: ignore[no-any-return]
        except Exception as exc:  # snappy raises assorted types on damaged input
            raise CorruptionError(
                self.name,
                f"SST data block {block} does not decode: {exc}",
                offset=self._block_offsets[block],
            ) from exc

    def _lookup(self, block: int, payload: bytes, key: bytes) -> LedgerValue | None:
        """``key``'s value in a version 2 block, decoding that value alone.

        The key's msgpack encoding is searched for in the block's array (a C search); a match
        counts only where an entry starts (the offsets table says where; a key's bytes may
        also appear inside another key or a value), and the value is what follows it up to
        the next entry."""
        try:
            width, count = _V2_HEAD.unpack_from(payload, 0)
            start = _V2_HEAD_SIZE + width * count
            needle = _bin_header(len(key)) + key  # the key's msgpack encoding
            probe = needle.rstrip(b"\x00")  # a common last byte slows the search in C
            at = payload.find(probe, start)
            if at < 0:
                return None
            offsets: Sequence[int]
            if _CAST_OFFSETS:
                table = memoryview(payload)[_V2_HEAD_SIZE:start]
                offsets = table.cast("H") if width == 2 else table.cast("I")
            else:
                offsets = struct.unpack_from(_V2_OFFSETS[width] % count, payload, _V2_HEAD_SIZE)
            while True:
                rel = at - start
                position = bisect_left(offsets, rel)
                if position < count and offsets[position] == rel and payload.startswith(needle, at):
                    end = start + offsets[position + 1] if position + 1 < count else len(payload)
                    raw = _unpackb(memoryview(payload)[at + len(needle) : end], use_list=False)
                    break
                at = payload.find(probe, at + 1)
                if at < 0:
                    return None
        except Exception as exc:  # struct, msgpack and dict lookups raise assorted types
            raise CorruptionError(
                self.name,
                f"SST data block {block} does not decode: {exc}",
                offset=self._block_offsets[block],
            ) from exc
        return self._one_value(raw, block)

    def _entries(self, raw: bytes) -> tuple[tuple[bytes, ...], tuple[tuple[Any, ...], ...]]:
        """A decompressed block's keys and values as msgpack gives them (one C call)."""
        if self.version == 1:
            return msgpack.unpackb(raw, use_list=False, raw=False)  # type: ignore[no-any-return]
        width, count = _V2_HEAD.unpack_from(raw, 0)
        flat = msgpack.unpackb(
            memoryview(raw)[_V2_HEAD.size + width * count :], use_list=False, raw=False
        )
        if type(flat) is not tuple or len(flat) != 2 * count:
            raise ValueError(f"a block of {count} entries holds {len(flat)} items")
        return flat[0::2], flat[1::2]

    def _decode_raw(
        self, block: int, stored: bytes
    ) -> tuple[tuple[bytes, ...], tuple[tuple[Any, ...], ...]]:
        """Decode the checked stored bytes of ``block`` for point lookups: its keys and its
        values as msgpack gives them (each is made a LedgerValue, and its length checked, only
        when found). One snappy and one msgpack call, both in C."""
        return self._decode_payload(block, self._payload(block, stored))

    def _decode_payload(
        self, block: int, payload: bytes
    ) -> tuple[tuple[bytes, ...], tuple[tuple[Any, ...], ...]]:
        """:meth:`_decode_raw` of the decompressed bytes of ``block``."""
        try:
            keys, raw_values = self._entries(payload)
        except Exception as exc:  # msgpack raises assorted types on damaged input
            raise CorruptionError(
                self.name,
                f"SST data block {block} does not decode: {exc}",
                offset=self._block_offsets[block],
            ) from exc
        if not keys or len(keys) != len(raw_values) or keys[0] != self._first_keys[block]:
            raise CorruptionError(
                self.name,
                f"SST data block {block} does not match the index",
                offset=self._block_offsets[block],
            )
        return keys, raw_values

    def iter_range(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        prefetched: Prefetched | None = None,
    ) -> Iterator[tuple[bytes, LedgerValue]]:
        """Entries with ``start <= key < end`` in key order (None = open), block by block.

        ``prefetched``: the reads of :meth:`scan_plan`, made ahead by another thread; the scan
        takes each as it gets there instead of reading it then."""
        first_keys = self._first_keys
        block = 0 if start is None else max(0, bisect_right(first_keys, start) - 1)
        held: dict[int, _Run] = {}
        scanned = prefetched is not None and self._cache is not None
        while block < len(first_keys):
            if end is not None and first_keys[block] >= end:
                return
            if scanned:
                keys, values = self._scan_block(block, prefetched, held)  # type: ignore[arg-type]
            else:
                keys, values = self._block(block)
            low = 0 if start is None else bisect_left(keys, start)
            high = len(keys) if end is None else bisect_left(keys, end)
            if low == 0 and high == len(keys):
                yield from zip(keys, values, strict=True)
            else:
                yield from zip(keys[low:high], values[low:high], strict=True)
            block += 1

    def iter_range_reverse(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        prefetched: Prefetched | None = None,
    ) -> Iterator[tuple[bytes, LedgerValue]]:
        """:meth:`iter_range` in descending key order, block by block from the last
        (``prefetched``: the reads of ``scan_plan(start, end, reverse=True)``)."""
        first_keys = self._first_keys
        block = len(first_keys) - 1 if end is None else bisect_left(first_keys, end) - 1
        held: dict[int, _Run] = {}
        scanned = prefetched is not None and self._cache is not None
        while block >= 0:
            if scanned:
                keys, values = self._scan_block(block, prefetched, held)  # type: ignore[arg-type]
            else:
                keys, values = self._block(block)
            low = 0 if start is None else bisect_left(keys, start)
            high = len(keys) if end is None else bisect_left(keys, end)
            for i in range(high - 1, low - 1, -1):
                yield keys[i], values[i]
            if start is not None and first_keys[block] <= start:
                return
            block -= 1

    def _block(self, block: int) -> tuple[tuple[bytes, ...], list[LedgerValue]]:
        cache = self._cache
        if cache is None:
            offset = self._block_offsets[block]
            length = self._block_lengths[block]
            data = fetch_exact(self._fetch, offset, offset + length, self.name)
            return self._decode(block, self._checked(block, data, 0))
        # Decoded blocks are not cached: a block decodes from its cached run in a few
        # microseconds, while a decoded block weighs twice its bytes and is made of objects
        # the interpreter's cycle collector would walk again and again.
        return self._decode(block, self._stored(block, cache, self._readahead))

    def _stored(self, block: int, cache: BlockCache, readahead: int = 0) -> bytes:
        """The checked stored bytes of ``block`` (snappy, without the CRC): from its cached run,
        or read with the runs after it up to ``readahead`` bytes (one run when 0)."""
        return self._from_run(block, self._run(block, cache, readahead))

    def _run(self, block: int, cache: BlockCache, readahead: int = 0) -> _Run:
        """The cached run of ``block``; when missing, read with the runs after it up to
        ``readahead`` bytes (one run when 0)."""
        key = (self.name, self._block_offsets[block] // RUN_BYTES, self.sqn_base, _RUN)
        found = cache.get(key)
        if found is None:
            # One thread reads a missing run; the others that want it wait for that read.
            found = cache.load(key, lambda: self._read_runs(block, cache, readahead))
        return found  # type: ignore[return-value]

    def _from_run(self, block: int, run: _Run) -> bytes:
        """The stored bytes of ``block`` from its cached ``run``, the block's CRC checked the
        first time the run gives it out."""
        offset = self._block_offsets[block]
        at = offset - run.start
        end = at + self._block_lengths[block] - _CRC_SIZE
        data = run.data
        stored = data[at:end]
        checked = run.checked
        index = block - run.first
        if not checked[index]:
            if _crc32(stored) != _U32_AT(data, end)[0]:
                raise CorruptionError(
                    self.name, f"SST data block {block} checksum mismatch", offset=offset
                )
            checked[index] = 1
        return stored

    def _checked(self, block: int, data: bytes, at: int) -> bytes:
        """The stored bytes of ``block`` found at ``data[at:]``, its CRC checked."""
        offset = self._block_offsets[block]
        length = self._block_lengths[block]
        return _unframe(data, at, length, self.name, offset - at, f"data block {block}")

    def _read_runs(self, block: int, cache: BlockCache, readahead: int) -> tuple[_Run, int]:
        """Read the run of ``block`` and the runs after it up to ``readahead`` bytes in all (at
        least the one run) in one ranged read, cache each run after the first as read (a run's
        blocks are checked as they are used), and answer ``block``'s run with its weight, for
        the caller to cache (:meth:`BlockCache.load`).

        A run is every block that starts in one aligned :data:`RUN_BYTES` of the file, so the
        run that holds a block is known without asking the cache anything else, and a miss
        costs one read and one cache entry per run, however many blocks the run holds."""
        offsets = self._block_offsets
        lengths = self._block_lengths
        first_run = offsets[block] // RUN_BYTES
        runs = max(1, readahead // RUN_BYTES)
        first = bisect_left(offsets, first_run * RUN_BYTES)
        last = bisect_left(offsets, (first_run + runs) * RUN_BYTES) - 1
        start = offsets[first]
        data = fetch_exact(self._fetch, start, offsets[last] + lengths[last], self.name)
        if runs == 1:
            return _Run(first, start, data, last + 1 - first), len(data) + _STORED_OVERHEAD
        name, base = self.name, self.sqn_base
        wanted = None
        for run, found, weight in self._cut_runs(data, start, first_run, first_run + runs):
            if run == first_run:
                wanted = found, weight
            else:
                cache.put((name, run, base, _RUN), found, weight)
        assert wanted is not None  # the run of ``block`` holds ``block``
        return wanted

    def _cut_runs(
        self, data: bytes, start: int, first_run: int, end_run: int
    ) -> Iterator[tuple[int, _Run, int]]:
        """``(run number, run, weight)`` of every run ``first_run`` to ``end_run`` (exclusive)
        in which a block starts, cut from ``data`` (the file's bytes from ``start``, whole
        runs)."""
        offsets = self._block_offsets
        lengths = self._block_lengths
        run_first = bisect_left(offsets, first_run * RUN_BYTES)
        for run in range(first_run, end_run):
            run_last = bisect_left(offsets, (run + 1) * RUN_BYTES, run_first) - 1
            if run_last < run_first:
                continue  # no block starts in this run (a block longer than a run)
            run_start = offsets[run_first]
            piece = data[run_start - start : offsets[run_last] + lengths[run_last] - start]
            found = _Run(run_first, run_start, piece, run_last + 1 - run_first)
            yield run, found, len(piece) + _STORED_OVERHEAD
            run_first = run_last + 1

    # -- scans that read ahead ------------------------------------------------------------------

    def scan_plan(
        self, start: bytes | None = None, end: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[Piece]:
        """The reads a scan of ``[start, end)`` (:meth:`iter_range`, or
        :meth:`iter_range_reverse` with ``reverse``) makes of this file when nothing is cached,
        in the order it makes them: ``(start, end, first run, end run)``, runs (:data:`RUN_BYTES`)
        grouped up to ``readahead`` bytes a read. A scan handed these reads ahead
        (``prefetched``) takes each one when it gets there. None without a cache."""
        if self._cache is None:
            return
        first_keys = self._first_keys
        low = 0 if start is None else max(0, bisect_right(first_keys, start) - 1)
        high = len(first_keys) - 1 if end is None else bisect_left(first_keys, end) - 1
        if high < low:
            return
        offsets = self._block_offsets
        lengths = self._block_lengths
        first_run, last_run = offsets[low] // RUN_BYTES, offsets[high] // RUN_BYTES
        step = max(1, self._readahead // RUN_BYTES)
        if reverse:
            groups = (
                (max(first_run, top - step), top) for top in range(last_run + 1, first_run, -step)
            )
        else:
            groups = (
                (bottom, min(last_run + 1, bottom + step))
                for bottom in range(first_run, last_run + 1, step)
            )
        for bottom, top in groups:
            first = bisect_left(offsets, bottom * RUN_BYTES)
            last = bisect_left(offsets, top * RUN_BYTES) - 1
            if last >= first:
                yield offsets[first], offsets[last] + lengths[last], bottom, top

    def read_piece(self, piece: Piece) -> bytes:
        """The bytes of ``piece`` (one of :meth:`scan_plan`'s), read as planned: one ranged
        read, checked for length when the scan takes it."""
        return self._fetch(piece[0], piece[1])

    def holds_runs(self, piece: Piece) -> bool:
        """Whether the cache holds every run of ``piece`` (one of :meth:`scan_plan`'s): a scan
        reading ahead then skips the read. Asks without counting a hit or a miss."""
        cache = self._cache
        if cache is None:
            return False
        name, base = self.name, self.sqn_base
        offsets = self._block_offsets
        first = bisect_left(offsets, piece[2] * RUN_BYTES)
        for run in range(piece[2], piece[3]):
            if first < len(offsets) and offsets[first] < (run + 1) * RUN_BYTES:
                if not cache.holds((name, run, base, _RUN)):
                    return False
                first = bisect_left(offsets, (run + 1) * RUN_BYTES, first)
        return True

    def _scan_block(
        self, block: int, prefetched: Prefetched, held: dict[int, _Run]
    ) -> tuple[tuple[bytes, ...], list[LedgerValue]]:
        """:meth:`_block` in a scan reading ahead: the block's run from ``held`` (the runs of the
        last piece taken), the cache, or the next piece ``prefetched`` took for this reader,
        which is cut into runs and cached; read here only when no piece holds it."""
        cache = self._cache
        assert cache is not None
        offset = self._block_offsets[block]
        number = offset // RUN_BYTES
        run = held.get(number)
        if run is None:
            key = (self.name, number, self.sqn_base, _RUN)
            run = cache.get(key)  # type: ignore[assignment]
            if run is None:
                got = prefetched.take(self, offset)
                if got is not None:
                    (start, end, first_run, end_run), data = got
                    if len(data) != end - start:
                        raise short_read(self.name, start, end, len(data))
                    held.clear()
                    name, base = self.name, self.sqn_base
                    for found_number, found, weight in self._cut_runs(
                        data, start, first_run, end_run
                    ):
                        cache.put((name, found_number, base, _RUN), found, weight)
                        held[found_number] = found
                    run = held.get(number)
                if run is None:
                    readahead = self._readahead
                    run = cache.load(key, lambda: self._read_runs(block, cache, readahead))  # type: ignore[assignment]
        return self._decode(block, self._from_run(block, run))  # type: ignore[arg-type]

    def _decode(self, block: int, stored: bytes) -> tuple[tuple[bytes, ...], list[LedgerValue]]:
        """Decode the checked stored bytes of ``block``: its keys and its values."""
        name = self.name
        offset = self._block_offsets[block]
        try:
            raw = snappy.decompress(stored)
            keys, raw_values = self._entries(raw)
            base = self.sqn_base
            if base:
                values = [_new_tuple(LedgerValue, (v[0] + base, *v[1:])) for v in raw_values]
            else:
                values = list(map(_new_tuple, repeat(LedgerValue), raw_values))
            if values and not set(map(len, values)) <= _VALUE_LENGTHS:
                raise ValueError(f"a ledger value has {len(LedgerValue._fields)} fields")
        except Exception as exc:  # msgpack and snappy raise assorted types on damaged input
            raise CorruptionError(
                name, f"SST data block {block} does not decode: {exc}", offset=offset
            ) from exc
        if not keys or len(keys) != len(values) or keys[0] != self._first_keys[block]:
            raise CorruptionError(
                name, f"SST data block {block} does not match the index", offset=offset
            )
        return keys, values
