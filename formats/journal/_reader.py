"""Journal files read: :class:`JournalReader` (entries by key through the file's index, by
location, at random, or all in order, by ranged reads), and the whole-file checks and decodes
(:func:`iter_journal`, :func:`decode_journal`) used to replay small segments."""

from __future__ import annotations

import random
import zlib
from array import array
from collections.abc import Iterator, Sequence

import snappy

from inkpen.errors import CorruptionError

from ..cache import BlockCache
from ..fetching import Fetch, fetch_exact, short_read
from . import _format
from ._block_index import BlockIndex, decode_block_index
from ._format import (
    COMPRESSED,
    HAS_VALUE,
    HEADER_SIZE,
    KNOWN_FLAGS,
    MIN_RECORD,
    U64,
    JournalEntry,
    JournalHeader,
    Kind,
    read_header,
    record_crc,
)
from ._hash_index import HashIndex, HeldHashIndex
from ._hash_pages import PagedHashIndex
from ._records import block_records, find_in_block, parse_record, record_body

# The record layout's structs, bound here by assignment: CPython 3.11 compiles a method call
# on a name bound by an import as an attribute load (no LOAD_METHOD), which cost a tenth of a
# get's time.
BLOCK_ENTRY = _format.BLOCK_ENTRY
CRC = _format.CRC
KEY_HEAD = _format.KEY_HEAD
LENGTHS = _format.LENGTHS
RECORD_HEAD = _format.RECORD_HEAD
VALUE_HEAD = _format.VALUE_HEAD

DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024

PARTS_FROM = 64 * 1024
"""A record this large or larger is read in parts by :meth:`JournalReader.value` when its fetch
says ranged reads are cheap (``in_parts``: a local directory, memory): its head, its body
straight into a bytes object of its own, and its CRC, in one request of three ranges, so that
the body is copied once (by the read) and checksummed once, never sliced out of a buffer
holding the whole record."""


class _SequenceCheck:
    """Checks that a scan finds exactly the entries the header promises, in SQN order, and (for
    a version 2 file, given its index's arrays) that every block starts on a record with the
    block's first SQN."""

    __slots__ = ("block", "count", "firsts", "header", "name", "offsets", "previous")

    def __init__(
        self,
        header: JournalHeader,
        name: str,
        blocks: tuple[array[int], array[int]] | None = None,
    ) -> None:
        self.header = header
        self.name = name
        self.count = 0
        self.previous = -1
        self.firsts: array[int] | None = None
        self.offsets: array[int] | None = None
        if blocks is not None:
            self.firsts, self.offsets = blocks
        self.block = 0

    def step(self, sqn: int, offset: int) -> None:
        header = self.header
        if (
            sqn <= self.previous
            or sqn > header.max_sqn
            or (self.count == 0 and sqn != header.min_sqn)
        ):
            raise CorruptionError(
                self.name, f"journal record SQN {sqn} is out of order or range", offset=offset
            )
        offsets, firsts = self.offsets, self.firsts
        if offsets is not None and firsts is not None and self.block < len(offsets):
            block = self.block
            start = offsets[block]
            if start == offset:
                if firsts[block] != sqn:
                    raise CorruptionError(
                        self.name,
                        f"journal block index names SQN {firsts[block]} (block {block}) "
                        f"where the record is SQN {sqn}",
                        offset=header.hash_offset + block * BLOCK_ENTRY.size,
                    )
                self.block = block + 1
            elif start < offset:
                raise CorruptionError(
                    self.name,
                    f"journal block index puts block {block} at {start}, inside a record",
                    offset=header.hash_offset + block * BLOCK_ENTRY.size,
                )
        self.previous = sqn
        self.count += 1

    def finish(self) -> None:
        header = self.header
        if self.count != header.entry_count or (self.count and self.previous != header.max_sqn):
            raise CorruptionError(
                self.name,
                f"journal holds {self.count} records, its header says {header.entry_count}",
                offset=header.hash_offset,
            )
        offsets = self.offsets
        if offsets is not None and self.block != len(offsets):
            raise CorruptionError(
                self.name,
                f"journal block index puts block {self.block} where no record starts",
                offset=header.hash_offset + self.block * BLOCK_ENTRY.size,
            )


def _check_whole(
    data: bytes, name: str
) -> tuple[JournalHeader, tuple[array[int], array[int]] | None]:
    """Check a whole file's header, size and index region; return the header and (version 2)
    the block index's arrays."""
    header = read_header(data, name)
    if len(data) != header.size:
        raise CorruptionError(
            name, f"object is {len(data)} bytes but its header says {header.size}", offset=0
        )
    blocks = None
    if header.entry_count:
        region = bytes(data[header.hash_offset :])
        if header.version == 1:
            HeldHashIndex(region, header, name)
        else:
            blocks = decode_block_index(region, header, name)
    return header, blocks


def iter_journal(data: bytes, name: str) -> Iterator[JournalEntry]:
    """Check a whole journal file's header and index region, then yield its entries lazily
    (checking that the index's blocks start where the records say)."""
    header, blocks = _check_whole(data, name)
    return _iter_buffer(data, header, name, blocks)


def _iter_buffer(
    data: bytes,
    header: JournalHeader,
    name: str,
    blocks: tuple[array[int], array[int]] | None = None,
) -> Iterator[JournalEntry]:
    check = _SequenceCheck(header, name, blocks)
    checksum = record_crc(header.version).checksum
    pos = HEADER_SIZE
    end = header.hash_offset
    while pos < end:
        _, entry, after = parse_record(data, pos, end, name, 0, 0, checksum)
        check.step(entry.sqn, pos)
        pos = after
        yield entry
    check.finish()


def decode_journal(data: bytes, name: str) -> tuple[JournalHeader, list[JournalEntry]]:
    """Check and decode a whole journal file (used to replay small segments)."""
    header, blocks = _check_whole(data, name)
    return header, list(_iter_buffer(data, header, name, blocks))


class JournalReader:
    """Reads one journal object by ranged reads: entries by key, by location, or all in order.

    Open loads the header and the index region (two ranged reads); each :meth:`get` then costs
    one more ranged read: of the record's block (version 2) or of the record (version 1).
    ``sqn_base`` is added to every SQN returned and subtracted from every SQN asked for (files
    written by a bulk load number their entries from 0). Immutable after open, so one reader may
    serve many threads.
    """

    __slots__ = (
        "_checksum",
        "_fetch",
        "_in_parts",
        "_index",
        "header",
        "name",
        "size",
        "sqn_base",
    )

    def __init__(
        self,
        name: str,
        size: int,
        fetch: Fetch,
        header: JournalHeader,
        index: HashIndex | BlockIndex | None,
        sqn_base: int,
    ) -> None:
        self.name = name
        self.size = size
        self.header = header
        self.sqn_base = sqn_base
        self._fetch = fetch
        self._index = index
        self._in_parts = bool(getattr(fetch, "in_parts", False))
        self._checksum = record_crc(header.version).checksum

    @classmethod
    def open(
        cls,
        name: str,
        size: int,
        fetch: Fetch,
        *,
        sqn_base: int = 0,
        index_cache: BlockCache | None = None,
    ) -> JournalReader:
        """Open journal object ``name`` of ``size`` bytes, read through ``fetch(start, end)``.

        Without ``index_cache`` the index region is held for the reader's life. With one, a
        version 2 block index is kept in ``index_cache`` (16 bytes per block of about 4 KiB;
        read again, whole, when evicted) and a version 1 hash region is paged: the reader keeps
        about 4 bytes per 32 entries and lookups take the slot pages they need from
        ``index_cache`` (one more ranged read of a page when it misses)."""
        header = read_header(fetch_exact(fetch, 0, min(size, HEADER_SIZE), name), name)
        if header.size != size:
            raise CorruptionError(
                name, f"object is {size} bytes but its header says {header.size}", offset=0
            )
        index: HashIndex | BlockIndex | None = None
        if header.entry_count and header.version >= 2:
            index = BlockIndex.load(fetch, header, name, index_cache)
        elif header.entry_count:
            if index_cache is None:
                region = fetch_exact(fetch, header.hash_offset, size, name)
                index = HeldHashIndex(region, header, name)
            else:
                index = PagedHashIndex.open(fetch, header, name, index_cache)
        return cls(name, size, fetch, header, index, sqn_base)

    @property
    def entry_count(self) -> int:
        """Number of entries in the file."""
        return self.header.entry_count

    @property
    def min_sqn(self) -> int:
        """Lowest SQN in the file (with ``sqn_base`` added)."""
        return self.header.min_sqn + self.sqn_base

    @property
    def max_sqn(self) -> int:
        """Highest SQN in the file (with ``sqn_base`` added)."""
        return self.header.max_sqn + self.sqn_base

    def get(self, sqn: int, kind: Kind, ledger_key: bytes) -> JournalEntry | None:
        """The entry with this key, or None; costs one ranged read when the SQN is in the file.

        A version 2 index evicted from the index cache costs one more read (of the index); a
        paged version 1 index may cost one more ranged read, of the slot page the probe needs.
        """
        index = self._index
        stored_sqn = sqn - self.sqn_base
        if index is None or not 0 <= stored_sqn < U64:
            return None
        if isinstance(index, BlockIndex):
            found = self._find(index, stored_sqn, kind, ledger_key)
            if found is None:
                return None
            data, start, end, base = found
            return parse_record(data, start, end, self.name, base, self.sqn_base, self._checksum)[1]
        key = KEY_HEAD.pack(stored_sqn, kind) + ledger_key
        for offset, length in index.candidates(zlib.crc32(key)):
            data = self._fetch(offset, offset + length)
            if len(data) != length:
                raise short_read(self.name, offset, offset + length, len(data))
            record_key, entry, end = parse_record(
                data, 0, length, self.name, offset, self.sqn_base, self._checksum
            )
            if end != length:
                raise CorruptionError(
                    self.name,
                    "journal record length disagrees with its hash slot",
                    offset=offset,
                )
            if record_key == key:
                return entry
        return None

    def value(self, sqn: int, kind: Kind, ledger_key: bytes) -> bytes | None:
        """The object body of the entry with this key (``b""`` if it has none), or None when the
        file does not hold the key: :meth:`get` for readers that want only the value.

        The record is checked exactly as :meth:`get` checks it (lengths, CRC, kind and flags)
        but not decoded into a :class:`JournalEntry`; folds call this once per object.
        """
        index = self._index
        stored_sqn = sqn - self.sqn_base
        if index is None or not 0 <= stored_sqn < U64:
            return None
        key = KEY_HEAD.pack(stored_sqn, kind) + ledger_key
        if isinstance(index, BlockIndex):
            block = index.block_of(stored_sqn)
            if block is None:
                return None
            if self._in_parts and block[2] - block[1] >= PARTS_FROM:
                body = self._value_in_parts(block[1], block[2], key, block[0])
                if body is not None:
                    return body
            found = self._find(index, stored_sqn, kind, ledger_key, block)
            if found is None:
                return None
            data, start, end, base = found
            record = data if start == 0 and end == len(data) else data[start:end]
            return record_body(record, key, self.name, base + start, self._checksum)
        for offset, length in index.candidates(zlib.crc32(key)):
            if self._in_parts and length >= PARTS_FROM:
                in_parts = self._value_in_parts(offset, offset + length, key, None)
                if in_parts is not None:
                    return in_parts
            data = self._fetch(offset, offset + length)
            if len(data) != length:
                raise short_read(self.name, offset, offset + length, len(data))
            body = record_body(data, key, self.name, offset, self._checksum)
            if body is not None:
                return body
        return None

    def _value_in_parts(
        self, start: int, end: int, key: bytes, first_sqn: int | None
    ) -> bytes | None:
        """The body of the record ``[start, end)`` whose key is ``key``, read in parts (see
        :data:`PARTS_FROM`), past the journal cache, in one request of three ranges: the head
        as far as the body starts in a record without index specs (lengths, key, value
        fields), the rest of the record into a bytes object of its own, and the CRC. The CRC is
        checked over the head and the rest as they are (CRC-32C runs without the interpreter
        lock over a large body). Without index specs the rest is the body, copied once, by the
        read; with them the body is sliced out of it.

        Answers None when the range is not one record with that key (a block of
        several records, another record, lengths or fields that do not add up, the first SQN
        not the index's ``first_sqn``): the caller then reads it whole, which raises the error
        that damage deserves or walks the block."""
        name = self.name
        head_end = start + LENGTHS.size + len(key) + VALUE_HEAD.size
        if head_end + CRC.size > end:
            return None
        ranges = [(start, head_end), (head_end, end - CRC.size), (end - CRC.size, end)]
        many = getattr(self._fetch, "direct_many", None)
        if many is None:
            fetch = getattr(self._fetch, "direct", self._fetch)
            head, rest, stored = (fetch(a, b) for a, b in ranges)
        else:
            head, rest, stored = many(ranges)
        for (a, b), got in zip(ranges, (head, rest, stored), strict=True):
            if len(got) != b - a:
                raise short_read(name, a, b, len(got))
        key_length, value_length, record_sqn, kind_code = RECORD_HEAD.unpack_from(head, 0)
        value_at = LENGTHS.size + key_length
        crc_at = value_at + value_length
        if (
            key_length != len(key)
            or value_length < VALUE_HEAD.size
            or crc_at + CRC.size != end - start
            or (first_sqn is not None and record_sqn != first_sqn)
            or head[LENGTHS.size : value_at] != key
        ):
            return None
        flags, _, _, specs_length = VALUE_HEAD.unpack_from(head, value_at)
        body_at = value_at + VALUE_HEAD.size + specs_length
        if body_at > crc_at or flags & ~KNOWN_FLAGS or not flags & HAS_VALUE:
            return None
        if kind_code != Kind.OBJECT:
            return None
        checksum = self._checksum
        if checksum(rest, checksum(head, 0)) != CRC.unpack(stored)[0]:
            raise CorruptionError(name, "journal record checksum mismatch", offset=start)
        body = rest if not specs_length else rest[specs_length:]
        if flags & COMPRESSED:
            try:
                unpacked: bytes = snappy.decompress(body)
                return unpacked
            except Exception as exc:  # snappy raises assorted types on damaged input
                raise CorruptionError(
                    name, f"journal record payload does not decode: {exc}", offset=start
                ) from exc
        return body if type(body) is bytes else bytes(body)

    def _find(
        self,
        index: BlockIndex,
        stored_sqn: int,
        kind: Kind,
        ledger_key: bytes,
        found: tuple[int, int, int] | None = None,
    ) -> tuple[bytes, int, int, int] | None:
        """Read the block that would hold the key (one ranged read, through the journal cache)
        and find its record: ``(block bytes, record start, record end, block offset)``, the
        record not yet checked; None when the file does not hold the key (``found``: the block,
        when the caller has it)."""
        if found is None:
            found = index.block_of(stored_sqn)
        if found is None:
            return None
        first, start, end = found
        data = self._fetch(start, end)
        if len(data) != end - start:
            raise short_read(self.name, start, end, len(data))
        key = KEY_HEAD.pack(stored_sqn, kind) + ledger_key
        at = find_in_block(data, key, first, self.name, start, self._checksum)
        return None if at is None else (data, at[0], at[1], start)

    def locate(self, sqn: int, kind: Kind, ledger_key: bytes) -> tuple[bytes, int, int] | None:
        """Where the entry with this key would be, from the index alone (no record read; a
        paged version 1 index may read a slot page, an evicted version 2 index is read again):
        ``(record key, offset, length)`` of the bytes to read for it, or None when the file
        cannot hold it. Version 2 names the block whose SQN range holds the key (several keys
        may share one); version 1 the first record whose hash slot matches. A scan sorts these
        by offset, reads them (:meth:`values_at`, :meth:`read_records`) and answers each with
        :meth:`body_of`; one that turns out not to hold the key (two keys that hash alike, or
        an SQN the block does not hold) is answered by :meth:`value`."""
        index = self._index
        key = self._record_key(sqn, kind, ledger_key)
        if index is None or key is None:
            return None
        if isinstance(index, BlockIndex):
            found = index.block_of(sqn - self.sqn_base)
            return None if found is None else (key, found[1], found[2] - found[1])
        for offset, length in index.candidates(zlib.crc32(key)):
            return key, offset, length
        return None

    def locate_many(
        self, wanted: Sequence[tuple[int, Kind, bytes]]
    ) -> list[tuple[bytes, int, int] | None]:
        """:meth:`locate` of every ``(sqn, kind, ledger_key)`` of ``wanted``, in its order.

        A paged index first reads the slot pages the probes start on, in as few reads as they
        allow (:meth:`PagedHashIndex.load_pages`): a scan's window wants hundreds of records of one
        file, whose pages lie all over its hash region, and one read per page was most of what
        a scanned row cost once the regions outgrew the index cache. A version 2 index answers
        every one from its blocks' SQNs, reading nothing; keys of one block share its range, and
        a caller reads each block once (neighbours joined into one read)."""
        index = self._index
        if index is None:
            return [None] * len(wanted)
        if isinstance(index, BlockIndex):
            arrays = index.arrays()  # once: an index evicted at once is read once, not per key
            out_blocks: list[tuple[bytes, int, int] | None] = []
            for sqn, kind, ledger_key in wanted:
                key = self._record_key(sqn, kind, ledger_key)
                found = None if key is None else index.block_of(sqn - self.sqn_base, arrays)
                out_blocks.append(
                    None if key is None or found is None else (key, found[1], found[2] - found[1])
                )
            return out_blocks
        keys = [self._record_key(sqn, kind, ledger_key) for sqn, kind, ledger_key in wanted]
        hashes = [None if key is None else zlib.crc32(key) for key in keys]
        first_page = index.first_page
        pages = index.load_pages(
            page for h in hashes if h is not None and (page := first_page(h)) is not None
        )
        candidates = index.candidates
        out: list[tuple[bytes, int, int] | None] = []
        for key, key_hash in zip(keys, hashes, strict=True):
            slot = None if key_hash is None else next(candidates(key_hash, pages), None)
            out.append(None if key is None or slot is None else (key, slot[0], slot[1]))
        return out

    def _record_key(self, sqn: int, kind: Kind, ledger_key: bytes) -> bytes | None:
        """The record key of an entry this file could hold, or None for an SQN it cannot."""
        stored_sqn = sqn - self.sqn_base
        if not 0 <= stored_sqn < U64:
            return None
        return KEY_HEAD.pack(stored_sqn, kind) + ledger_key

    def values_at(
        self, wanted: list[tuple[bytes, int, int]], max_run: int = DEFAULT_CHUNK_SIZE
    ) -> list[bytes | None]:
        """The bodies of the records ``wanted`` names (``(record key, offset, length)`` as
        :meth:`locate` answers, sorted by offset; several keys may name one version 2 block),
        each checked as :meth:`value` checks it; None for a record or block that does not hold
        its key.

        Ranges that touch one another are read together, up to ``max_run`` bytes a read; no
        byte is read twice and none outside the ranges asked for, and the reads go past the
        journal cache (a scan must not evict what point reads use)."""
        name = self.name
        fetch = getattr(self._fetch, "direct", self._fetch)
        records_end = self.header.hash_offset
        out: list[bytes | None] = []
        i = 0
        count = len(wanted)
        while i < count:
            _, start, length = wanted[i]
            end = start + length
            j = i + 1
            while j < count:
                at, size = wanted[j][1], wanted[j][2]
                if at + size <= end and at >= start:
                    j += 1  # another key of a block already in this read
                elif at == end and end - start < max_run:
                    end += size
                    j += 1
                else:
                    break
            if start < HEADER_SIZE or end > records_end:
                raise CorruptionError(
                    name, "journal hash slot points outside the records", offset=start
                )
            data = fetch(start, end)
            if len(data) != end - start:
                raise short_read(name, start, end, len(data))
            for key, offset, length in wanted[i:j]:
                at = offset - start
                record = data if at == 0 and length == len(data) else data[at : at + length]
                out.append(self.body_of(record, key, offset))
            i = j
        return out

    def read_records(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the records region, read past the journal cache, whole."""
        self._check_records_range(start, end)
        fetch = getattr(self._fetch, "direct", self._fetch)
        data = fetch(start, end)
        if len(data) != end - start:
            raise short_read(self.name, start, end, len(data))
        return data

    def read_records_many(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """:meth:`read_records` of every ``(start, end)`` of ``ranges``, asked of the store
        together when the fetch can (``direct_many``): a scan's reads of one file in a window."""
        for start, end in ranges:
            self._check_records_range(start, end)
        many = getattr(self._fetch, "direct_many", None)
        if many is None:
            fetch = getattr(self._fetch, "direct", self._fetch)
            found = [fetch(start, end) for start, end in ranges]
        else:
            found = many(ranges)
        for (start, end), data in zip(ranges, found, strict=True):
            if len(data) != end - start:
                raise short_read(self.name, start, end, len(data))
        return found

    def _check_records_range(self, start: int, end: int) -> None:
        """Raise unless ``[start, end)`` is a non-empty range inside the records region."""
        if start < HEADER_SIZE or end > self.header.hash_offset or end <= start:
            raise CorruptionError(
                self.name, "journal hash slot points outside the records", offset=start
            )

    def cached_record(self, offset: int, length: int) -> bytes | None:
        """The record at ``offset`` of ``length`` bytes if the journal cache holds it (read by
        a point read, a multi-get, a scan or a merge), else None; reads nothing."""
        peek = getattr(self._fetch, "cached", None)
        return None if peek is None else peek(offset, offset + length)

    def keep_record(self, offset: int, record: bytes) -> None:
        """Offer a record read past the cache to the journal cache, which keeps it as a point
        read's record-sized read would be kept (a cache that takes no records ignores it)."""
        keep = getattr(self._fetch, "keep", None)
        if keep is not None:
            keep(offset, offset + len(record), record)

    def body_of(self, record: bytes, key: bytes, offset: int) -> bytes | None:
        """The body of the record with record key ``key`` in ``record`` (the bytes read from
        ``offset`` that :meth:`locate` named: a whole record, or a version 2 block), checked as
        :meth:`value` checks it; None if they do not hold that key."""
        index = self._index
        if not isinstance(index, BlockIndex):
            return record_body(record, key, self.name, offset, self._checksum)
        block = index.block_at(offset)
        first = None if block is None else block[0]
        at = find_in_block(record, key, first, self.name, offset, self._checksum)
        if at is None:
            return None
        start, end = at
        found = record if start == 0 and end == len(record) else record[start:end]
        return record_body(found, key, self.name, offset + start, self._checksum)

    def locations(self) -> list[tuple[int, int]]:
        """``(offset, length)`` of every record, in file order; a version 2 file reads its
        blocks for it (past the journal cache, in reads of up to 4 MiB) and checks every
        record's lengths, CRC and SQN order, and every block's start."""
        index = self._index
        if index is None:
            return []
        if isinstance(index, HashIndex):
            return index.locations()
        return [(at, length) for at, length, _ in self._records_of_blocks(index.blocks())]

    def _records_of_blocks(
        self, blocks: Sequence[tuple[int, int, int]]
    ) -> list[tuple[int, int, bytes]]:
        """``(offset, length, record key)`` of every record of ``blocks`` (``(first SQN, start,
        end)`` of consecutive blocks, as the index gives them), read in runs of whole blocks."""
        fetch = getattr(self._fetch, "direct", self._fetch)
        out: list[tuple[int, int, bytes]] = []
        i = 0
        while i < len(blocks):
            start = blocks[i][1]
            j = i + 1
            while (
                j < len(blocks)
                and blocks[j][1] == blocks[j - 1][2]
                and (blocks[j][2] - start <= DEFAULT_CHUNK_SIZE)
            ):
                j += 1
            data = fetch_exact(fetch, start, blocks[j - 1][2], self.name)
            for first, at, end in blocks[i:j]:
                out.extend(
                    block_records(
                        data[at - start : end - start], first, self.name, at, self._checksum
                    )
                )
            i = j
        return out

    def sample(self, rng: random.Random, count: int) -> list[JournalEntry]:
        """About ``count`` entries drawn at random, in file order (for scoring a file's worth):
        version 1 draws among every record; version 2 draws ``count`` blocks with replacement,
        weighted by their size, and from a block drawn ``m`` times ``m`` of its records (all of
        them when it holds fewer), so that it reads only the blocks it draws, each once."""
        index = self._index
        if index is None or count <= 0:
            return []
        if isinstance(index, HashIndex):
            locations = index.locations()
            chosen = sorted(rng.sample(locations, min(count, len(locations))))
            return [self.read_at(offset, length) for offset, length in chosen]
        blocks = index.blocks()
        weights = [end - start for _, start, end in blocks]
        draws: dict[int, int] = {}
        for number in rng.choices(range(len(blocks)), weights=weights, k=count):
            draws[number] = draws.get(number, 0) + 1
        fetch = getattr(self._fetch, "direct", self._fetch)
        out: list[JournalEntry] = []
        for number in sorted(draws):
            first, start, end = blocks[number]
            data = fetch_exact(fetch, start, end, self.name)
            records = block_records(data, first, self.name, start, self._checksum)
            for at, length, _ in sorted(rng.sample(records, min(draws[number], len(records)))):
                rel = at - start
                entry = parse_record(
                    data, rel, rel + length, self.name, start, self.sqn_base, self._checksum
                )[1]
                out.append(entry)
        return out

    def read_at(self, offset: int, length: int) -> JournalEntry:
        """The entry of the record at ``offset`` of ``length`` bytes, as :meth:`locations` gives."""
        records_end = self.header.hash_offset
        if offset < HEADER_SIZE or length < MIN_RECORD or offset + length > records_end:
            raise ValueError(
                f"[{offset}, {offset + length}) is not a record range of journal {self.name}; "
                "use the offsets and lengths that locations() returns"
            )
        return self._read_record(offset, length)[1]

    def _read_record(self, offset: int, length: int) -> tuple[bytes, JournalEntry]:
        data = fetch_exact(self._fetch, offset, offset + length, self.name)
        key, entry, end = parse_record(
            data, 0, length, self.name, offset, self.sqn_base, self._checksum
        )
        if end != length:
            raise CorruptionError(
                self.name, "journal record length disagrees with its hash slot", offset=offset
            )
        return key, entry

    def iter_entries(self, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[JournalEntry]:
        """Every entry in SQN order, read from the records region in ranges of ``chunk_size``."""
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        name = self.name
        sqn_base = self.sqn_base
        index = self._index
        blocks = index.arrays() if isinstance(index, BlockIndex) else None
        check = _SequenceCheck(self.header, name, blocks)
        checksum = self._checksum
        end = self.header.hash_offset
        pos = HEADER_SIZE
        buf = b""
        buf_start = pos
        while pos < end:
            buf_end = buf_start + len(buf)
            if buf_end - pos < MIN_RECORD:
                buf, buf_start = self._refill(buf, buf_start, pos, pos + MIN_RECORD, chunk_size)
                buf_end = buf_start + len(buf)
            key_length, value_length = LENGTHS.unpack_from(buf, pos - buf_start)
            record_end = pos + LENGTHS.size + key_length + value_length + CRC.size
            if record_end > end:
                raise CorruptionError(name, "journal record lengths are damaged", offset=pos)
            if record_end > buf_end:
                buf, buf_start = self._refill(buf, buf_start, pos, record_end, chunk_size)
            _, entry, after = parse_record(
                buf, pos - buf_start, record_end - buf_start, name, buf_start, sqn_base, checksum
            )
            check.step(entry.sqn - sqn_base, pos)
            pos = buf_start + after
            yield entry
        check.finish()

    def _refill(
        self, buf: bytes, buf_start: int, pos: int, needed_end: int, chunk_size: int
    ) -> tuple[bytes, int]:
        """Keep ``buf`` from ``pos`` on and read on to at least ``needed_end``."""
        end = self.header.hash_offset
        have_end = buf_start + len(buf)
        read_end = min(end, max(needed_end, pos + chunk_size))
        if read_end < needed_end:
            raise CorruptionError(self.name, "journal record is truncated", offset=pos)
        more = fetch_exact(self._fetch, have_end, read_end, self.name)
        return buf[pos - buf_start :] + more, pos
