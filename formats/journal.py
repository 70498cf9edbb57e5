"""Journal files: immutable files of journal entries in SQN order, found by SQN with ranged reads.

A journal file holds the entries of one group commit (a segment) or of a compaction run, in
strictly increasing SQN order. Every entry carries what is needed to rebuild its ledger entry and
its index entries, so the ledger can always be rebuilt from the journal alone.

Layout (all integers big-endian; offsets are from the start of the object)::

    header, 60 bytes at offset 0
      0   6  magic b"INKJNL"
      6   2  format version (u16): 3 (1 and 2 are still read)
      8   8  writer epoch (u64) of the writer that built the file
      16  8  entry count (u64)
      24  8  lowest SQN (u64; 0 when empty)
      32  8  highest SQN (u64; 0 when empty)
      40  8  index region offset (u64) = end of the records region
      48  8  index region length (u64; 0 when empty)
      56  4  CRC-32 of header bytes [0, 56)

    records, from offset 60 to the index region, in SQN order; one record is
      0       4  key length K (u32)
      4       4  value length V (u32)
      8       K  key: SQN (u64), kind (u8), encoded ledger key
      8+K     V  value: flags (u8), last-modified ms (u64), expiry ms (u64), index-spec length
                 S (u32), S bytes of msgpack [[op, field, term], ...], then the object body
      8+K+V   4  checksum of record bytes [0, 8+K+V): CRC-32C from version 3, CRC-32 in 1 and 2

    index region, versions 2 and 3 (absent when the file has no entries): the SQN block index
      0     16*B  B blocks: first SQN (u64), offset of the block's first record (u64)
      16*B  4     CRC-32 of region bytes [0, 16*B)

    index region, version 1: the CDB hash region
      0          2048  256 table descriptors: first slot (u32), slot count (u32)
      2048       16*N  N = 2 * entry count slots: hash (u32), record offset (u64), record length
                       (u32); a record length of 0 marks an empty slot
      2048+16*N  4     CRC-32 of region bytes [0, 2048+16*N)

Record kinds: 1 OBJECT (a put, with its body), 2 TOMBSTONE (a delete), 3 KEY_CHANGES (a put's
index changes, its value dropped by compaction), 4 VALUE_IN_LEDGER (version 3: a put whose body
its ledger entry holds; no body). Only OBJECT records carry a body.

Value flags: bit 0 the entry has an object body, bit 1 the body is snappy-compressed, bit 2 the
expiry field is set. A body of 256 bytes or more is stored compressed when that saves at least an
eighth of it; from 256 KiB, only when its start, middle and end (16 KiB each) compressed together
save an eighth, so that an incompressible large value costs no compression pass.

Version 3 is version 2 with two changes, which arrived together: record checksums are CRC-32C
(Castagnoli), which the CPU computes at about six times zlib's CRC-32 (:mod:`inkpen.formats.crc`:
on a large value's get the checksum pass was a third of the time), and a record may be of kind
4, VALUE_IN_LEDGER. The header's and the index region's checksums stay CRC-32. An inkpen that
knows neither refuses a version 3 file by its version ("upgrade inkpen").

Version 2 and 3 lookup: a block is a run of consecutive records of about :data:`INDEX_BLOCK`
bytes (a record that large or larger is a block alone); block ``k`` spans
``[offset_k, offset_k+1)`` (the last one ends where the index region starts). A lookup of
``(sqn, kind, ledger_key)`` takes the last block whose first SQN is at most ``sqn``, reads that
block in one ranged read and walks its records to the one with that key: one read, of about
4 KiB (a large record: exactly the record).
The index is 16 bytes per block (about 0.4% of the records); a reader reads it whole at open and
checks its CRC, then holds it or keeps it in a byte-weighted cache (re-read when evicted).
Below, "version 2" names the block-index layout, which versions 2 and 3 share.

Version 1 lookup is CDB's: the hash ``h`` is the CRC-32 of the record key; table ``h & 255`` is
probed linearly from slot ``(h >> 8) % slot_count`` until the key is found or an empty slot is
met. Each table has twice as many slots as entries, so probes stay short. A slot names a record's
offset and length, so one ranged read fetches it whole. Writers write version 3 only.

Every byte is covered by a checksum: the header's, each record's, and the index region's (checked
when a reader opens the file). A large record read in parts (:data:`PARTS_FROM`) is checksummed
over its parts as they were read, never joined. A version 1 reader either holds the hash region
or pages it: at open it computes a CRC-32 of every 1 KiB page of slots and later checks each page
it reads against it. A damaged file raises :class:`CorruptionError` naming the object and the
offset of the damaged part; damaged bytes are never returned as data.

A file with no entries is only a header (:data:`EMPTY_JOURNAL_SIZE` bytes): a writer writes one
into the next segment slot to fence older writers, and a listing can recognise it by its size.
"""

from __future__ import annotations

import bisect
import itertools
import random
import struct
import sys
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import msgpack
import snappy

from inkpen.errors import CorruptionError

from .cache import BlockCache
from .crc import CRC32, CRC32C, Crc
from .fetching import Fetch, fetch_exact, short_read

MAGIC = b"INKJNL"
FORMAT_VERSION = 3
"""The version writers write: version 2's layout with CRC-32C record checksums and one more
record kind (:attr:`Kind.VALUE_IN_LEDGER`). Versions 2 (CRC-32 record checksums) and 1 (a CDB hash
region) are still read."""
INDEX_BLOCK = 4 * 1024
"""A version 2 block holds consecutive records up to this many bytes (or one larger record)."""

_HEADER = struct.Struct(">6sHQQQQQQ")
_CRC = struct.Struct(">I")
HEADER_SIZE = _HEADER.size + _CRC.size
"""Size in bytes of the fixed header at offset 0."""
EMPTY_JOURNAL_SIZE = HEADER_SIZE
"""Size in bytes of a journal file with no entries (a fencing segment)."""

_LENGTHS = struct.Struct(">II")
_KEY_HEAD = struct.Struct(">QB")
_RECORD_HEAD = struct.Struct(">IIQB")
"""A record's lengths and the fixed start of its key (SQN, kind), read or written in one go."""
_VALUE_HEAD = struct.Struct(">BQQI")
_SLOT = struct.Struct(">IQI")
_BLOCK_ENTRY = struct.Struct(">QQ")
_TABLE = struct.Struct(">II")
_TABLE_COUNT = 256
_DIRECTORY_SIZE = _TABLE_COUNT * _TABLE.size
_MIN_RECORD = _LENGTHS.size + _KEY_HEAD.size + _VALUE_HEAD.size + _CRC.size
_U32 = 1 << 32
_U64 = 1 << 64

_HAS_VALUE = 1
_COMPRESSED = 2
_HAS_EXPIRY = 4
_KNOWN_FLAGS = _HAS_VALUE | _COMPRESSED | _HAS_EXPIRY
_COMPRESS_MIN = 256
_SAMPLE_FROM = 256 * 1024
"""Bodies from this size are compressed only when a sample of them compresses."""
_SAMPLE_PIECE = 16 * 1024
_COPY_TO_CHECK = 64 * 1024
"""Records up to this size are copied to be checksummed (cheaper than a memoryview)."""

DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024

PARTS_FROM = 64 * 1024
"""A record this large or larger is read in parts by :meth:`JournalReader.value` when its fetch
says ranged reads are cheap (``in_parts``: a local directory, memory): its head, its body
straight into a bytes object of its own, and its CRC, in one request of three ranges, so that
the body is copied once (by the read) and checksummed once, never sliced out of a buffer
holding the whole record."""


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


_KINDS = {kind.value: kind for kind in Kind}


def _record_crc(version: int) -> Crc:
    """The checksum of a record of a file of ``version``: CRC-32C from version 3, else CRC-32
    (the header's and the index region's are CRC-32 in every version)."""
    return CRC32C if version >= 3 else CRC32


_Checksum = Callable[[bytes | memoryview, int], int]
"""``checksum(data, running)``: a record checksum (:attr:`Crc.checksum`)."""
_WHOLE = object()
"""What a read in parts answers when the record must be read whole instead."""
_new_entry = tuple.__new__


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


def _hash_region_length(entry_count: int) -> int:
    if entry_count == 0:
        return 0
    return _DIRECTORY_SIZE + 2 * entry_count * _SLOT.size + _CRC.size


def _index_region_fits(header_count: int, length: int) -> bool:
    """True when a version 2 index region of ``length`` bytes may serve ``header_count``
    entries: at least one block, at most one per entry."""
    blocks, rest = divmod(length - _CRC.size, _BLOCK_ENTRY.size)
    return rest == 0 and 1 <= blocks <= header_count


def _check_uint(value: object, bits: int, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not 0 <= value < (1 << bits):
        raise ValueError(f"{what} must be in [0, 2**{bits}), got {value}")
    return int(value)


# ---------------------------------------------------------------------------------------------
# Building


def _worth_compressing(body: bytes) -> bool:
    """Whether compressing ``body`` whole may save an eighth: bodies up to
    :data:`_SAMPLE_FROM` are simply tried; a larger one is tried only when three pieces of it
    (its start, middle and end, :data:`_SAMPLE_PIECE` bytes each) save an eighth together.
    Incompressible large values (media, already compressed data) then cost no compression pass;
    a value compressible only away from the three pieces is stored as it is."""
    size = len(body)
    if size < _SAMPLE_FROM:
        return True
    middle = (size - _SAMPLE_PIECE) // 2
    view = memoryview(body)
    sample = b"".join(
        (view[:_SAMPLE_PIECE], view[middle : middle + _SAMPLE_PIECE], view[-_SAMPLE_PIECE:])
    )
    return len(snappy.compress(sample)) <= len(sample) - (len(sample) >> 3)


def _stored_body(value: object, sqn: int) -> tuple[int, bytes]:
    """The flags and the stored body of an OBJECT entry's value: compressed when that saves an
    eighth (:func:`_worth_compressing` decides whether to try)."""
    if not isinstance(value, bytes):
        raise TypeError(
            f"an OBJECT entry's value must be bytes, not {type(value).__name__} (sqn {sqn})"
        )
    if len(value) >= _COMPRESS_MIN and _worth_compressing(value):
        packed = snappy.compress(value)
        if len(packed) <= len(value) - (len(value) >> 3):
            return _HAS_VALUE | _COMPRESSED, packed
    return _HAS_VALUE, value


def _encode_specs(index_specs: Sequence[tuple[int, bytes, bytes]]) -> bytes:
    """The msgpack of an entry's index specs, each checked to be (op, field, term)."""
    for spec in index_specs:
        if len(spec) != 3 or spec[0] not in (0, 1):
            raise ValueError(f"index spec {spec!r} is not (op, field, term) with op 0 or 1")
        if type(spec[1]) is not bytes or type(spec[2]) is not bytes:
            raise TypeError(f"index spec {spec!r}: field and term must be bytes")
    packed: bytes = msgpack.packb([tuple(spec) for spec in index_specs], use_bin_type=True)
    return packed


def _encode_record(entry: JournalEntry, checksum: _Checksum) -> tuple[bytes, bytes, int]:
    """Encode one entry: the record without its CRC, the CRC (by ``checksum``), and the hash of
    the record key."""
    sqn, given_kind, ledger_key, value, index_specs, expiry_ms, last_modified_ms = entry
    kind = _KINDS.get(given_kind)
    if kind is None:
        raise ValueError(f"journal entry kind {entry[1]!r} is not one of {[k.name for k in Kind]}")
    if type(ledger_key) is not bytes:
        raise TypeError(f"ledger_key must be bytes, not {type(ledger_key).__name__}")
    flags = 0
    body = b""
    if kind is Kind.OBJECT:
        flags, body = _stored_body(value, sqn)
    elif value is not None:
        raise ValueError(f"a {kind.name} entry carries no value; got {type(value).__name__}")
    if expiry_ms is None:
        expiry = 0
    else:
        expiry = _check_uint(expiry_ms, 64, "expiry_ms")
        flags |= _HAS_EXPIRY
    last_modified = last_modified_ms
    if type(last_modified) is not int or not 0 <= last_modified < _U64:
        last_modified = _check_uint(last_modified_ms, 64, "last_modified_ms")
    specs = _encode_specs(index_specs) if index_specs else b""
    key_length = _KEY_HEAD.size + len(ledger_key)
    value_length = _VALUE_HEAD.size + len(specs) + len(body)
    if key_length >= _U32 or value_length >= _U32:
        raise ValueError(f"entry sqn {sqn} is too large for a journal record (4 GiB at most)")
    head = _RECORD_HEAD.pack(key_length, value_length, sqn, kind)
    record = b"".join(
        (head, ledger_key, _VALUE_HEAD.pack(flags, last_modified, expiry, len(specs)), specs, body)
    )
    key_hash = zlib.crc32(ledger_key, zlib.crc32(head[_LENGTHS.size :]))
    return record, _CRC.pack(checksum(record, 0)), key_hash


PREPARE_FROM = 64 * 1024
"""A put's value this large or larger is encoded in the caller's thread
(:func:`prepare_record`), leaving the journal's one writer the SQN alone."""


class PreparedRecord(NamedTuple):
    """An OBJECT record encoded but for its SQN, made by :func:`prepare_record` in the thread of
    the put, so that the journal's one writer thread neither compresses, checksums nor copies a
    large body: :func:`build_journal` packs the SQN and combines two CRCs.

    It serves only the entry it was made from: the same ledger key, value (the very object),
    index specs, expiry and last-modified time (:meth:`serves`); a change the writer rewrote
    before writing it (a merge folded, index specs a ttl implies) is encoded afresh."""

    ledger_key: bytes
    value: bytes
    index_specs: tuple[tuple[int, bytes, bytes], ...]
    expiry_ms: int | None
    last_modified_ms: int
    key_length: int
    """K of the record layout: the SQN, the kind and the ledger key."""
    value_length: int
    """V of the record layout: the value fields, the index specs and the stored body."""
    fields: bytes
    """The record's bytes from the ledger key to the body: the ledger key, flags,
    last-modified, expiry, the index specs' length and the specs."""
    body: bytes
    """The body as stored (the value itself, or its snappy compression)."""
    crc: int
    """CRC-32C of ``fields + body`` (the record checksum of :data:`FORMAT_VERSION`)."""
    shift: int
    """:meth:`~inkpen.formats.crc.Crc.shift` of ``len(fields + body)``: the record's CRC is
    ``combine(crc(the record's first 17 bytes), crc, shift)``."""

    def serves(self, entry: JournalEntry) -> bool:
        """Whether this is the encoding of ``entry`` (whatever its SQN)."""
        return (
            entry[3] is self.value
            and entry[1] == Kind.OBJECT
            and entry[2] == self.ledger_key
            and entry[5] == self.expiry_ms
            and entry[6] == self.last_modified_ms
            and tuple(entry[4]) == self.index_specs
        )


def prepare_record(
    ledger_key: bytes,
    value: bytes,
    index_specs: tuple[tuple[int, bytes, bytes], ...],
    expiry_ms: int | None,
    last_modified_ms: int,
) -> PreparedRecord:
    """Encode the OBJECT entry of these fields but for its SQN (see :class:`PreparedRecord`):
    the compression choice, the value fields and specs, and the CRC of all of it, computed
    without joining anything (zlib checksums a large body without the interpreter lock).
    Raises ``ValueError`` / ``TypeError`` as :func:`build_journal` would for the entry."""
    if type(ledger_key) is not bytes:
        raise TypeError(f"ledger_key must be bytes, not {type(ledger_key).__name__}")
    flags, body = _stored_body(value, 0)
    expiry = 0
    if expiry_ms is not None:
        expiry = _check_uint(expiry_ms, 64, "expiry_ms")
        flags |= _HAS_EXPIRY
    last_modified = _check_uint(last_modified_ms, 64, "last_modified_ms")
    specs = _encode_specs(index_specs) if index_specs else b""
    fields = b"".join(
        (ledger_key, _VALUE_HEAD.pack(flags, last_modified, expiry, len(specs)), specs)
    )
    key_length = _KEY_HEAD.size + len(ledger_key)
    value_length = _VALUE_HEAD.size + len(specs) + len(body)
    if key_length >= _U32 or value_length >= _U32:
        raise ValueError("the entry is too large for a journal record (4 GiB at most)")
    return PreparedRecord(
        ledger_key,
        value,
        tuple(index_specs),
        expiry_ms,
        last_modified_ms,
        key_length,
        value_length,
        fields,
        body,
        CRC32C.of(fields, body),
        CRC32C.shift(len(fields) + len(body)),
    )


def _prepared_parts(prepared: PreparedRecord, sqn: int) -> tuple[bytes, bytes, int]:
    """The record's head (lengths, SQN, kind), its CRC, and the hash of its record key."""
    head = _RECORD_HEAD.pack(prepared.key_length, prepared.value_length, sqn, Kind.OBJECT)
    crc = CRC32C.combine(CRC32C.checksum(head, 0), prepared.crc, prepared.shift)
    key_hash = zlib.crc32(prepared.ledger_key, zlib.crc32(head[_LENGTHS.size :]))
    return head, _CRC.pack(crc), key_hash


def _encode_hash_region(slots: list[tuple[int, int, int]]) -> bytes:
    """Lay out the 256 CDB hash tables for ``(hash, offset, length)`` of every record."""
    tables: list[list[tuple[int, int, int]]] = [[] for _ in range(_TABLE_COUNT)]
    for slot in slots:
        tables[slot[0] & 255].append(slot)
    directory = bytearray(_DIRECTORY_SIZE)
    area = bytearray(2 * len(slots) * _SLOT.size)
    first = 0
    for index, members in enumerate(tables):
        count = 2 * len(members)
        _TABLE.pack_into(directory, index * _TABLE.size, first, count)
        taken = [False] * count
        for slot in members:
            position = (slot[0] >> 8) % count
            while taken[position]:
                position = position + 1 if position + 1 < count else 0
            taken[position] = True
            _SLOT.pack_into(area, (first + position) * _SLOT.size, *slot)
        first += count
    region = bytes(directory) + bytes(area)
    return region + _CRC.pack(zlib.crc32(region))


def _encode_block_index(firsts: list[int], offsets: list[int]) -> bytes:
    """The block index region (versions 2 and 3): ``(first SQN, offset)`` of every block, then
    its CRC."""
    region = b"".join(map(_BLOCK_ENTRY.pack, firsts, offsets))
    return region + _CRC.pack(zlib.crc32(region))


def build_journal(
    entries: Iterable[JournalEntry],
    *,
    writer_epoch: int,
    version: int = FORMAT_VERSION,
    prepared: Sequence[PreparedRecord | None] = (),
) -> bytes:
    """Build a whole journal file from entries given in strictly increasing SQN order.

    Zero entries is valid and gives a header-only file of :data:`EMPTY_JOURNAL_SIZE` bytes.
    Raises ``ValueError`` / ``TypeError`` for entries out of order or malformed. ``version`` 1
    or 2 builds an earlier format (a CDB hash region; CRC-32 record checksums, and no
    :attr:`Kind.VALUE_IN_LEDGER` record), which only tests of old files want. ``prepared``: the
    :class:`PreparedRecord` of each entry, in order (None, or missing, for an entry encoded
    here); one that does not serve its entry is ignored (and all of them in a file of another
    version than :data:`FORMAT_VERSION`).
    """
    return b"".join(
        build_journal_parts(entries, writer_epoch=writer_epoch, version=version, prepared=prepared)
    )


def build_journal_parts(
    entries: Iterable[JournalEntry],
    *,
    writer_epoch: int,
    version: int = FORMAT_VERSION,
    prepared: Sequence[PreparedRecord | None] = (),
) -> list[bytes]:
    """:func:`build_journal`'s bytes as the pieces they are made of, in order, not joined: a
    store that writes pieces (``os.writev``) never copies a prepared record's body."""
    epoch = _check_uint(writer_epoch, 64, "writer_epoch")
    if version not in (1, 2, FORMAT_VERSION):
        raise ValueError(
            f"journal format version must be 1, 2 or {FORMAT_VERSION}, got {version!r}"
        )
    checksum = _record_crc(version).checksum
    if version != FORMAT_VERSION:
        prepared = ()
    parts: list[bytes] = []
    slots: list[tuple[int, int, int]] = []
    firsts: list[int] = []
    offsets: list[int] = []
    block_fill = 0
    count = 0
    offset = HEADER_SIZE
    min_sqn = max_sqn = 0
    previous = -1
    for entry in entries:
        if len(entry) != len(JournalEntry._fields):
            raise ValueError(f"a journal entry has {len(JournalEntry._fields)} fields: {entry!r}")
        sqn = entry[0]
        if type(sqn) is not int or not 0 <= sqn < _U64:
            sqn = _check_uint(sqn, 64, "sqn")
        if sqn <= previous:
            raise ValueError(
                f"journal entries must be in strictly increasing SQN order: {sqn} after {previous}"
            )
        if previous < 0:
            min_sqn = sqn
        previous = max_sqn = sqn
        if version < 3 and entry[1] == Kind.VALUE_IN_LEDGER:
            raise ValueError(f"a VALUE_IN_LEDGER entry (sqn {sqn}) needs journal format version 3")
        ready = prepared[count] if count < len(prepared) else None
        if ready is not None and ready.serves(entry):
            head, crc, key_hash = _prepared_parts(ready, sqn)
            parts += (head, ready.fields, ready.body, crc)
            length = len(head) + len(ready.fields) + len(ready.body) + _CRC.size
        else:
            record, crc, key_hash = _encode_record(entry, checksum)
            parts.append(record)
            parts.append(crc)
            length = len(record) + _CRC.size
        if version == 1:
            slots.append((key_hash, offset, length))
        elif not block_fill or block_fill + length > INDEX_BLOCK:
            firsts.append(sqn)
            offsets.append(offset)
            block_fill = length
        else:
            block_fill += length
        count += 1
        offset += length
    if not count:
        region = b""
    elif version == 1:
        region = _encode_hash_region(slots)
    else:
        region = _encode_block_index(firsts, offsets)
    head = _HEADER.pack(MAGIC, version, epoch, count, min_sqn, max_sqn, offset, len(region))
    return [head + _CRC.pack(zlib.crc32(head)), *parts, region]


# ---------------------------------------------------------------------------------------------
# Reading


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
    _, version, epoch, count, min_sqn, max_sqn, hash_offset, hash_length = _HEADER.unpack_from(
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
    (stored_crc,) = _CRC.unpack_from(data, _HEADER.size)
    if zlib.crc32(memoryview(data)[: _HEADER.size]) != stored_crc:
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
                hash_length == _hash_region_length(count)
                if version == 1
                else _index_region_fits(count, hash_length)
            )
            and hash_offset >= HEADER_SIZE + count * _MIN_RECORD
        )
    if not consistent:
        raise CorruptionError(name, f"journal header fields are inconsistent: {header}", offset=0)
    return header


_PAGE_SHIFT = 6
_PAGE_SLOTS = 1 << _PAGE_SHIFT
_PAGE_MASK = _PAGE_SLOTS - 1
PAGE_BYTES = _PAGE_SLOTS * _SLOT.size
"""A hash region's slots are read and cached in pages of this many bytes (64 slots): small, so
that a cold get stays within 16 KiB read with its SST block and record."""
PAGE_WEIGHT = PAGE_BYTES + 160
"""What a cached page weighs: its bytes and the cache entry, key and object headers around them."""
_OPEN_PIECE = 1024 * PAGE_BYTES
"""Open reads a hash region in pieces of at most this many slot bytes (1 MiB)."""
PAGE_GAP = 4
"""Slot pages at most this many apart are read together by :meth:`JournalReader.locate_many`
(the pages between them come along and are dropped)."""
PAGE_RUN = 256 * PAGE_BYTES
"""The largest read of slot pages :meth:`JournalReader.locate_many` makes (256 KiB)."""
_tokens = itertools.count()


class _HashIndex:
    """The hash region of one journal file: its table directory and its slots.

    Held whole (``region``: the region's bytes, checked once) or paged: open reads the region
    once in pieces, checks its CRC and keeps only the directory and a CRC-32 per page of
    :data:`PAGE_BYTES` of slots (4 bytes per 32 entries); a lookup then takes the page its
    probe needs from ``cache`` (a byte-weighted LRU shared by the database's journal files) or
    reads that page alone and checks it against its CRC before using or caching it.
    """

    __slots__ = (
        "cache",
        "fetch",
        "name",
        "page_crcs",
        "region",
        "slots_at",
        "slots_end",
        "tables",
        "token",
    )

    def __init__(
        self,
        directory: bytes,
        header: JournalHeader,
        name: str,
        *,
        region: bytes | None = None,
        page_crcs: array[int] | None = None,
        cache: BlockCache | None = None,
        fetch: Fetch | None = None,
    ) -> None:
        tables = array("I", struct.unpack(f">{2 * _TABLE_COUNT}I", directory))
        expected_first = 0
        for at in range(0, 2 * _TABLE_COUNT, 2):
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
        self.region = region
        self.page_crcs = page_crcs
        self.cache = cache
        self.fetch = fetch
        self.slots_at = header.hash_offset + _DIRECTORY_SIZE
        self.slots_end = header.size - _CRC.size
        self.token = next(_tokens)

    @classmethod
    def whole(cls, region: bytes, header: JournalHeader, name: str) -> _HashIndex:
        """The index of a region read whole: its CRC checked, its bytes held."""
        body_length = len(region) - _CRC.size
        (stored_crc,) = _CRC.unpack_from(region, body_length)
        if zlib.crc32(memoryview(region)[:body_length]) != stored_crc:
            raise CorruptionError(
                name, "journal hash region checksum mismatch", offset=header.hash_offset
            )
        return cls(bytes(region[:_DIRECTORY_SIZE]), header, name, region=region)

    @classmethod
    def paged(cls, fetch: Fetch, header: JournalHeader, name: str, cache: BlockCache) -> _HashIndex:
        """Read the region of the file behind ``fetch`` in pieces, check its CRC, and keep the
        directory and the CRC of every page; the slots are left on the store."""
        fetch = getattr(fetch, "direct", fetch)  # past the journal cache: slots are not records
        start = header.hash_offset
        size = header.size
        slots_end = size - _CRC.size
        crcs = array("I")
        crc = 0
        directory = b""
        stored = -1
        pos = start
        while pos < size:
            end = min(size, (start + _DIRECTORY_SIZE if pos == start else pos) + _OPEN_PIECE)
            piece = fetch_exact(fetch, pos, end, name)
            view = memoryview(piece)
            if pos == start:
                directory = bytes(view[:_DIRECTORY_SIZE])
            if end == size:
                (stored,) = _CRC.unpack_from(piece, len(piece) - _CRC.size)
                view = view[: len(piece) - _CRC.size]
            crc = zlib.crc32(view, crc)
            slots = view[_DIRECTORY_SIZE:] if pos == start else view
            for at in range(0, len(slots), PAGE_BYTES):
                crcs.append(zlib.crc32(slots[at : at + PAGE_BYTES]))
            pos = end
        if crc != stored or len(directory) != _DIRECTORY_SIZE or slots_end < start:
            raise CorruptionError(name, "journal hash region checksum mismatch", offset=start)
        return cls(
            directory,
            header,
            name,
            page_crcs=crcs,
            cache=cache,
            fetch=fetch,
        )

    def _page(self, number: int) -> bytes:
        """Slot page ``number``, from the cache or read alone and checked against its CRC."""
        key = (self.token, number)
        cache = self.cache
        page = cache.get(key)  # type: ignore[union-attr]
        if page is None:  # one thread reads it; the others that want it wait for it
            page = cache.load(key, lambda: self._read_page(number))  # type: ignore[union-attr]
        return page  # type: ignore[return-value]

    def _read_page(self, number: int) -> tuple[bytes, int]:
        start = self.slots_at + number * PAGE_BYTES
        end = min(start + PAGE_BYTES, self.slots_end)
        page = fetch_exact(self.fetch, start, end, self.name)  # type: ignore[arg-type]
        self._check_page(number, page, start)
        return page, PAGE_WEIGHT

    def _check_page(self, number: int, page: bytes | memoryview, offset: int) -> None:
        """Raise unless slot page ``number`` (read at ``offset``) has the CRC taken at open."""
        if zlib.crc32(page) != self.page_crcs[number]:  # type: ignore[index]
            raise CorruptionError(self.name, "journal hash region checksum mismatch", offset=offset)

    def first_page(self, key_hash: int) -> int | None:
        """The slot page a probe for ``key_hash`` starts on, or None when its table is empty."""
        table = (key_hash & 255) << 1
        count = self.tables[table + 1]
        if not count:
            return None
        return int((self.tables[table] + (key_hash >> 8) % count) >> _PAGE_SHIFT)

    def load_pages(self, numbers: Iterable[int]) -> dict[int, bytes]:
        """Slot pages ``numbers`` by number (none for a held region): the ones the cache holds
        from there, the others read in runs, pages at most :data:`PAGE_GAP` apart joined into one
        read of at most :data:`PAGE_RUN` bytes, each checked against its CRC. Pages read here
        are not cached: a scan wants each once per window and must not evict a point read's."""
        cache = self.cache
        if self.region is not None or cache is None:
            return {}
        token = self.token
        pages: dict[int, bytes] = {}
        missing: list[int] = []
        for number in sorted(set(numbers)):
            page = cache.get((token, number))
            if page is None:
                missing.append(number)
            else:
                pages[number] = page  # type: ignore[assignment]
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
            data = fetch_exact(self.fetch, start, end, self.name)  # type: ignore[arg-type]
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
        """Yield ``(offset, length)`` of every record whose slot carries ``key_hash``; a paged
        index takes its pages from ``pages`` (:meth:`load_pages`) first, then the cache."""
        table = (key_hash & 255) << 1
        tables = self.tables
        count = tables[table + 1]
        if not count:
            return
        first = tables[table]
        position = (key_hash >> 8) % count
        unpack = _SLOT.unpack_from
        region = self.region
        page = b""
        page_number = -1
        for _ in range(count):
            slot = first + position
            if region is not None:
                slot_hash, offset, length = unpack(region, _DIRECTORY_SIZE + slot * _SLOT.size)
            else:
                number = slot >> _PAGE_SHIFT
                if number != page_number:
                    found = pages.get(number) if pages else None
                    page = self._page(number) if found is None else found
                    page_number = number
                slot_hash, offset, length = unpack(page, (slot & _PAGE_MASK) * _SLOT.size)
            if not length:
                return
            if slot_hash == key_hash:
                yield offset, length
            position = position + 1 if position + 1 < count else 0

    def locations(self) -> list[tuple[int, int]]:
        """``(offset, length)`` of every record, in file order; a paged index reads its slots
        whole for this (past the cache) and checks every page."""
        region = self.region
        if region is not None:
            body = memoryview(region)[_DIRECTORY_SIZE : len(region) - _CRC.size]
        else:
            body = memoryview(fetch_exact(self.fetch, self.slots_at, self.slots_end, self.name))  # type: ignore[arg-type]
            for number, at in enumerate(range(0, len(body), PAGE_BYTES)):
                self._check_page(number, body[at : at + PAGE_BYTES], self.slots_at + at)
        return sorted((offset, length) for _, offset, length in _SLOT.iter_unpack(body) if length)


_BLOCK_OVERHEAD = 400
"""What a cached block index weighs beyond its 16 bytes per block (two arrays, the entry)."""


class _BlockIndex:
    """The SQN block index of one version 2 journal file: the first SQN and the offset of
    every block, as two arrays.

    Held for the reader's life (no cache: tools and tests) or kept in ``cache`` (a byte-weighted
    LRU the database's journal files share), weighing 16 bytes per block: a lookup that finds
    it evicted reads the region again (past the journal cache) and checks its CRC.
    """

    __slots__ = ("cache", "count", "fetch", "header", "held", "name", "token")

    def __init__(
        self,
        arrays: tuple[array[int], array[int]],
        header: JournalHeader,
        name: str,
        fetch: Fetch,
        cache: BlockCache | None,
    ) -> None:
        self.header = header
        self.name = name
        self.fetch = fetch
        self.cache = cache
        self.count = len(arrays[0])
        self.token = next(_tokens)
        self.held = arrays if cache is None else None
        if cache is not None:
            cache.put(self.token, arrays, self.weight)

    @property
    def weight(self) -> int:
        """What the index weighs in a cache."""
        return self.count * _BLOCK_ENTRY.size + _BLOCK_OVERHEAD

    @classmethod
    def load(
        cls, fetch: Fetch, header: JournalHeader, name: str, cache: BlockCache | None
    ) -> _BlockIndex:
        """Read the index region of the file behind ``fetch`` (past the journal cache), check
        it and keep it (held, or in ``cache``)."""
        fetch = getattr(fetch, "direct", fetch)
        region = fetch_exact(fetch, header.hash_offset, header.size, name)
        return cls(_decode_block_index(region, header, name), header, name, fetch, cache)

    def arrays(self) -> tuple[array[int], array[int]]:
        """The first SQNs and the offsets of the blocks: held, cached, or read again."""
        held = self.held
        if held is not None:
            return held
        cache = self.cache
        found = cache.get(self.token)  # type: ignore[union-attr]
        if found is None:  # one thread reads it again; the others that want it wait for it
            found = cache.load(self.token, self._reload)  # type: ignore[union-attr]
        return found  # type: ignore[return-value]

    def _reload(self) -> tuple[tuple[array[int], array[int]], int]:
        region = fetch_exact(self.fetch, self.header.hash_offset, self.header.size, self.name)
        return _decode_block_index(region, self.header, self.name), self.weight

    def block_of(
        self, stored_sqn: int, arrays: tuple[array[int], array[int]] | None = None
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


def _decode_block_index(
    region: bytes, header: JournalHeader, name: str
) -> tuple[array[int], array[int]]:
    """Check a version 2 index region (its CRC and that its blocks cover the records region in
    order) and decode it into the blocks' first SQNs and offsets."""
    at = header.hash_offset
    body_length = len(region) - _CRC.size
    if body_length < _BLOCK_ENTRY.size or body_length % _BLOCK_ENTRY.size:
        raise CorruptionError(name, "journal block index is truncated", offset=at)
    view = memoryview(region)
    if zlib.crc32(view[:body_length]) != _CRC.unpack_from(region, body_length)[0]:
        raise CorruptionError(name, "journal block index checksum mismatch", offset=at)
    pairs = array("Q")
    pairs.frombytes(view[:body_length])
    if sys.byteorder == "little":
        pairs.byteswap()
    firsts, offsets = pairs[0::2], pairs[1::2]
    ordered = all(a < b for a, b in itertools.pairwise(firsts)) and all(
        b - a >= _MIN_RECORD for a, b in itertools.pairwise(offsets)
    )
    if (
        not ordered
        or firsts[0] != header.min_sqn
        or firsts[-1] > header.max_sqn
        or offsets[0] != HEADER_SIZE
        or header.hash_offset - offsets[-1] < _MIN_RECORD
    ):
        raise CorruptionError(name, "journal block index is inconsistent", offset=at)
    return firsts, offsets


def _find_in_block(
    block: bytes, key: bytes, first_sqn: int | None, name: str, base: int, checksum: _Checksum
) -> tuple[int, int] | None:
    """``(start, end)`` within ``block`` (the bytes of one block, read from offset ``base``) of
    the record whose key is ``key``, or None when the block does not hold it.

    Every record walked past is checked (lengths, CRC, SQN order; the first one's SQN against
    the index's ``first_sqn`` when given); the one found is left for the caller to check, so
    that a large record's bytes are checksummed once."""
    sqn = _KEY_HEAD.unpack_from(key)[0]
    limit = len(block)
    pos = 0
    previous = -1
    while pos < limit:
        if limit - pos < _MIN_RECORD:
            raise CorruptionError(name, "journal record is truncated", offset=base + pos)
        key_length, value_length, record_sqn, _ = _RECORD_HEAD.unpack_from(block, pos)
        crc_at = pos + _LENGTHS.size + key_length + value_length
        end = crc_at + _CRC.size
        if key_length < _KEY_HEAD.size or value_length < _VALUE_HEAD.size or end > limit:
            raise CorruptionError(name, "journal record lengths are damaged", offset=base + pos)
        if (pos == 0 and first_sqn is not None and record_sqn != first_sqn) or (
            record_sqn <= previous
        ):
            raise CorruptionError(
                name, f"journal record SQN {record_sqn} is out of order or range", offset=base + pos
            )
        if (
            record_sqn >= sqn
            and block[pos + _LENGTHS.size : pos + _LENGTHS.size + key_length] == key
        ):
            return pos, end
        checked = (
            block[pos:crc_at] if crc_at - pos <= _COPY_TO_CHECK else memoryview(block)[pos:crc_at]
        )
        if checksum(checked, 0) != _CRC.unpack_from(block, crc_at)[0]:
            raise CorruptionError(name, "journal record checksum mismatch", offset=base + pos)
        if record_sqn > sqn:
            return None  # past it (the record checked first: its SQN is no answer unchecked)
        previous = record_sqn
        pos = end
    return None


def _block_records(
    block: bytes, first_sqn: int, name: str, base: int, checksum: _Checksum
) -> list[tuple[int, int, bytes]]:
    """``(offset, length, record key)`` of every record of ``block`` (read from ``base``), each
    checked as :func:`_find_in_block` checks the records it walks past."""
    out: list[tuple[int, int, bytes]] = []
    limit = len(block)
    pos = 0
    previous = -1
    while pos < limit:
        if limit - pos < _MIN_RECORD:
            raise CorruptionError(name, "journal record is truncated", offset=base + pos)
        key_length, value_length, record_sqn, _ = _RECORD_HEAD.unpack_from(block, pos)
        crc_at = pos + _LENGTHS.size + key_length + value_length
        end = crc_at + _CRC.size
        if key_length < _KEY_HEAD.size or value_length < _VALUE_HEAD.size or end > limit:
            raise CorruptionError(name, "journal record lengths are damaged", offset=base + pos)
        if (pos == 0 and record_sqn != first_sqn) or record_sqn <= previous:
            raise CorruptionError(
                name, f"journal record SQN {record_sqn} is out of order or range", offset=base + pos
            )
        checked = (
            block[pos:crc_at] if crc_at - pos <= _COPY_TO_CHECK else memoryview(block)[pos:crc_at]
        )
        if checksum(checked, 0) != _CRC.unpack_from(block, crc_at)[0]:
            raise CorruptionError(name, "journal record checksum mismatch", offset=base + pos)
        out.append(
            (base + pos, end - pos, bytes(block[pos + _LENGTHS.size : crc_at - value_length]))
        )
        previous = record_sqn
        pos = end
    return out


def _parse_record(
    buf: bytes, pos: int, limit: int, name: str, base: int, sqn_base: int, checksum: _Checksum
) -> tuple[bytes, JournalEntry, int]:
    """Check and decode the record at ``buf[pos:]`` (``base`` = file offset of ``buf[0]``).

    Returns the record's raw key, its entry (SQN shifted by ``sqn_base``) and the position just
    past it. ``limit`` bounds the record within ``buf``.
    """
    if limit - pos < _MIN_RECORD:
        raise CorruptionError(name, "journal record is truncated", offset=base + pos)
    key_length, value_length, sqn, kind_code = _RECORD_HEAD.unpack_from(buf, pos)
    key_at = pos + _LENGTHS.size
    value_at = key_at + key_length
    crc_at = value_at + value_length
    if key_length < _KEY_HEAD.size or value_length < _VALUE_HEAD.size or crc_at + 4 > limit:
        raise CorruptionError(name, "journal record lengths are damaged", offset=base + pos)
    (stored_crc,) = _CRC.unpack_from(buf, crc_at)
    checked = buf[pos:crc_at] if crc_at - pos <= _COPY_TO_CHECK else memoryview(buf)[pos:crc_at]
    if checksum(checked, 0) != stored_crc:
        raise CorruptionError(name, "journal record checksum mismatch", offset=base + pos)
    flags, last_modified, expiry, specs_length = _VALUE_HEAD.unpack_from(buf, value_at)
    kind = _KINDS.get(kind_code)
    specs_at = value_at + _VALUE_HEAD.size
    body_at = specs_at + specs_length
    if kind is None or flags & ~_KNOWN_FLAGS or body_at > crc_at:
        raise CorruptionError(name, "journal record fields are invalid", offset=base + pos)
    has_value = flags & _HAS_VALUE
    if (kind is Kind.OBJECT) != bool(has_value) or (not has_value and body_at != crc_at):
        raise CorruptionError(
            name, "journal record value does not match its kind", offset=base + pos
        )
    index_specs: tuple[tuple[int, bytes, bytes], ...] = ()
    value: bytes | None = None
    try:
        if specs_length:
            index_specs = msgpack.unpackb(buf[specs_at:body_at], use_list=False, raw=False)
        if has_value:
            value = buf[body_at:crc_at]
            if type(value) is not bytes:
                value = bytes(value)
            if flags & _COMPRESSED:
                value = snappy.decompress(value)
    except Exception as exc:  # msgpack and snappy raise assorted types on damaged input
        raise CorruptionError(
            name, f"journal record payload does not decode: {exc}", offset=base + pos
        ) from exc
    key = buf[key_at:value_at]
    if type(key) is not bytes:
        key = bytes(key)
    entry = _new_entry(
        JournalEntry,
        (
            sqn + sqn_base,
            kind,
            key[_KEY_HEAD.size :],
            value,
            index_specs,
            expiry if flags & _HAS_EXPIRY else None,
            last_modified,
        ),
    )
    return key, entry, crc_at + _CRC.size


def _record_body(
    data: bytes, key: bytes, name: str, offset: int, checksum: _Checksum
) -> bytes | None:
    """Check the whole record ``data`` (read from ``offset``); its body if its key is ``key``,
    None if it is another record whose key hashes alike."""
    length = len(data)
    if length < _MIN_RECORD:
        raise CorruptionError(name, "journal record is truncated", offset=offset)
    key_length, value_length = _LENGTHS.unpack_from(data, 0)
    value_at = _LENGTHS.size + key_length
    crc_at = value_at + value_length
    if key_length < _KEY_HEAD.size or value_length < _VALUE_HEAD.size or crc_at + 4 != length:
        raise CorruptionError(
            name, "journal record length disagrees with its hash slot", offset=offset
        )
    checked = data[:crc_at] if crc_at <= _COPY_TO_CHECK else memoryview(data)[:crc_at]
    if checksum(checked, 0) != _CRC.unpack_from(data, crc_at)[0]:
        raise CorruptionError(name, "journal record checksum mismatch", offset=offset)
    if data[_LENGTHS.size : value_at] != key:
        return None
    flags, _, _, specs_length = _VALUE_HEAD.unpack_from(data, value_at)
    kind = _KINDS.get(data[_LENGTHS.size + 8])
    body_at = value_at + _VALUE_HEAD.size + specs_length
    if kind is None or flags & ~_KNOWN_FLAGS or body_at > crc_at:
        raise CorruptionError(name, "journal record fields are invalid", offset=offset)
    has_value = flags & _HAS_VALUE
    if (kind is Kind.OBJECT) != bool(has_value) or (not has_value and body_at != crc_at):
        raise CorruptionError(name, "journal record value does not match its kind", offset=offset)
    body = data[body_at:crc_at]
    if flags & _COMPRESSED:
        try:
            body = snappy.decompress(body)
        except Exception as exc:  # snappy raises assorted types on damaged input
            raise CorruptionError(
                name, f"journal record payload does not decode: {exc}", offset=offset
            ) from exc
    return body if type(body) is bytes else bytes(body)


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
                        offset=header.hash_offset + block * _BLOCK_ENTRY.size,
                    )
                self.block = block + 1
            elif start < offset:
                raise CorruptionError(
                    self.name,
                    f"journal block index puts block {block} at {start}, inside a record",
                    offset=header.hash_offset + block * _BLOCK_ENTRY.size,
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
                offset=header.hash_offset + self.block * _BLOCK_ENTRY.size,
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
            _HashIndex.whole(region, header, name)
        else:
            blocks = _decode_block_index(region, header, name)
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
    checksum = _record_crc(header.version).checksum
    pos = HEADER_SIZE
    end = header.hash_offset
    while pos < end:
        _, entry, after = _parse_record(data, pos, end, name, 0, 0, checksum)
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
        index: _HashIndex | _BlockIndex | None,
        sqn_base: int,
    ) -> None:
        self.name = name
        self.size = size
        self.header = header
        self.sqn_base = sqn_base
        self._fetch = fetch
        self._index = index
        self._in_parts = bool(getattr(fetch, "in_parts", False))
        self._checksum = _record_crc(header.version).checksum

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
        index: _HashIndex | _BlockIndex | None = None
        if header.entry_count and header.version >= 2:
            index = _BlockIndex.load(fetch, header, name, index_cache)
        elif header.entry_count:
            if index_cache is None:
                region = fetch_exact(fetch, header.hash_offset, size, name)
                index = _HashIndex.whole(region, header, name)
            else:
                index = _HashIndex.paged(fetch, header, name, index_cache)
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
        if index is None or not 0 <= stored_sqn < _U64:
            return None
        if type(index) is _BlockIndex:
            found = self._find(index, stored_sqn, kind, ledger_key)
            if found is None:
                return None
            data, start, end, base = found
            return _parse_record(data, start, end, self.name, base, self.sqn_base, self._checksum)[
                1
            ]
        key = _KEY_HEAD.pack(stored_sqn, kind) + ledger_key
        for offset, length in index.candidates(zlib.crc32(key)):  # type: ignore[union-attr]
            data = self._fetch(offset, offset + length)
            if len(data) != length:
                raise short_read(self.name, offset, offset + length, len(data))
            record_key, entry, end = _parse_record(
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
        if index is None or not 0 <= stored_sqn < _U64:
            return None
        key = _KEY_HEAD.pack(stored_sqn, kind) + ledger_key
        if type(index) is _BlockIndex:
            block = index.block_of(stored_sqn)
            if block is None:
                return None
            if self._in_parts and block[2] - block[1] >= PARTS_FROM:
                body = self._value_in_parts(block[1], block[2], key, block[0])
                if body is not _WHOLE:
                    return body  # type: ignore[return-value]
            found = self._find(index, stored_sqn, kind, ledger_key, block)
            if found is None:
                return None
            data, start, end, base = found
            record = data if start == 0 and end == len(data) else data[start:end]
            return _record_body(record, key, self.name, base + start, self._checksum)
        for offset, length in index.candidates(zlib.crc32(key)):  # type: ignore[union-attr]
            if self._in_parts and length >= PARTS_FROM:
                body = self._value_in_parts(offset, offset + length, key, None)
                if body is not _WHOLE:
                    return body  # type: ignore[return-value]
            data = self._fetch(offset, offset + length)
            if len(data) != length:
                raise short_read(self.name, offset, offset + length, len(data))
            body = _record_body(data, key, self.name, offset, self._checksum)
            if body is not None:
                return body
        return None

    def _value_in_parts(self, start: int, end: int, key: bytes, first_sqn: int | None) -> object:
        """The body of the record ``[start, end)`` whose key is ``key``, read in parts (see
        :data:`PARTS_FROM`), past the journal cache, in one request of three ranges: the head
        as far as the body starts in a record without index specs (lengths, key, value
        fields), the rest of the record into a bytes object of its own, and the CRC. The CRC is
        checked over the head and the rest as they are (CRC-32C runs without the interpreter
        lock over a large body). Without index specs the rest is the body, copied once, by the
        read; with them the body is sliced out of it.

        Answers :data:`_WHOLE` when the range is not one record with that key (a block of
        several records, another record, lengths or fields that do not add up, the first SQN
        not the index's ``first_sqn``): the caller then reads it whole, which raises the error
        that damage deserves or walks the block."""
        name = self.name
        head_end = start + _LENGTHS.size + len(key) + _VALUE_HEAD.size
        if head_end + _CRC.size > end:
            return _WHOLE
        ranges = [(start, head_end), (head_end, end - _CRC.size), (end - _CRC.size, end)]
        many = getattr(self._fetch, "direct_many", None)
        if many is None:
            fetch = getattr(self._fetch, "direct", self._fetch)
            head, rest, stored = (fetch(a, b) for a, b in ranges)
        else:
            head, rest, stored = many(ranges)
        for (a, b), got in zip(ranges, (head, rest, stored), strict=True):
            if len(got) != b - a:
                raise short_read(name, a, b, len(got))
        key_length, value_length, record_sqn, kind_code = _RECORD_HEAD.unpack_from(head, 0)
        value_at = _LENGTHS.size + key_length
        crc_at = value_at + value_length
        if (
            key_length != len(key)
            or value_length < _VALUE_HEAD.size
            or crc_at + _CRC.size != end - start
            or (first_sqn is not None and record_sqn != first_sqn)
            or head[_LENGTHS.size : value_at] != key
        ):
            return _WHOLE
        flags, _, _, specs_length = _VALUE_HEAD.unpack_from(head, value_at)
        body_at = value_at + _VALUE_HEAD.size + specs_length
        if body_at > crc_at or flags & ~_KNOWN_FLAGS or not flags & _HAS_VALUE:
            return _WHOLE
        if kind_code != Kind.OBJECT:
            return _WHOLE
        checksum = self._checksum
        if checksum(rest, checksum(head, 0)) != _CRC.unpack(stored)[0]:
            raise CorruptionError(name, "journal record checksum mismatch", offset=start)
        body = rest if not specs_length else rest[specs_length:]
        if flags & _COMPRESSED:
            try:
                return snappy.decompress(body)
            except Exception as exc:  # snappy raises assorted types on damaged input
                raise CorruptionError(
                    name, f"journal record payload does not decode: {exc}", offset=start
                ) from exc
        return body if type(body) is bytes else bytes(body)

    def _find(
        self,
        index: _BlockIndex,
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
        key = _KEY_HEAD.pack(stored_sqn, kind) + ledger_key
        at = _find_in_block(data, key, first, self.name, start, self._checksum)
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
        if type(index) is _BlockIndex:
            found = index.block_of(sqn - self.sqn_base)
            return None if found is None else (key, found[1], found[2] - found[1])
        for offset, length in index.candidates(zlib.crc32(key)):  # type: ignore[union-attr]
            return key, offset, length
        return None

    def locate_many(
        self, wanted: Sequence[tuple[int, Kind, bytes]]
    ) -> list[tuple[bytes, int, int] | None]:
        """:meth:`locate` of every ``(sqn, kind, ledger_key)`` of ``wanted``, in its order.

        A paged index first reads the slot pages the probes start on, in as few reads as they
        allow (:meth:`_HashIndex.load_pages`): a scan's window wants hundreds of records of one
        file, whose pages lie all over its hash region, and one read per page was most of what
        a scanned row cost once the regions outgrew the index cache. A version 2 index answers
        every one from its blocks' SQNs, reading nothing; keys of one block share its range, and
        a caller reads each block once (neighbours joined into one read)."""
        index = self._index
        if index is None:
            return [None] * len(wanted)
        if type(index) is _BlockIndex:
            arrays = index.arrays()  # once: an index evicted at once is read once, not per key
            out_blocks: list[tuple[bytes, int, int] | None] = []
            for sqn, kind, ledger_key in wanted:
                key = self._record_key(sqn, kind, ledger_key)
                found = None if key is None else index.block_of(sqn - self.sqn_base, arrays)
                out_blocks.append(None if found is None else (key, found[1], found[2] - found[1]))  # type: ignore[arg-type]
            return out_blocks
        keys = [self._record_key(sqn, kind, ledger_key) for sqn, kind, ledger_key in wanted]
        hashes = [None if key is None else zlib.crc32(key) for key in keys]
        assert type(index) is _HashIndex
        first_page = index.first_page
        pages = index.load_pages(
            page for h in hashes if h is not None and (page := first_page(h)) is not None
        )
        candidates = index.candidates
        out: list[tuple[bytes, int, int] | None] = []
        for key, key_hash in zip(keys, hashes, strict=True):
            slot = None if key_hash is None else next(candidates(key_hash, pages), None)
            out.append(None if slot is None else (key, slot[0], slot[1]))  # type: ignore[arg-type]
        return out

    def _record_key(self, sqn: int, kind: Kind, ledger_key: bytes) -> bytes | None:
        """The record key of an entry this file could hold, or None for an SQN it cannot."""
        stored_sqn = sqn - self.sqn_base
        if not 0 <= stored_sqn < _U64:
            return None
        return _KEY_HEAD.pack(stored_sqn, kind) + ledger_key

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
        if type(index) is not _BlockIndex:
            return _record_body(record, key, self.name, offset, self._checksum)
        block = index.block_at(offset)
        first = None if block is None else block[0]
        at = _find_in_block(record, key, first, self.name, offset, self._checksum)
        if at is None:
            return None
        start, end = at
        found = record if start == 0 and end == len(record) else record[start:end]
        return _record_body(found, key, self.name, offset + start, self._checksum)

    def locations(self) -> list[tuple[int, int]]:
        """``(offset, length)`` of every record, in file order; a version 2 file reads its
        blocks for it (past the journal cache, in reads of up to 4 MiB) and checks every
        record's lengths, CRC and SQN order, and every block's start."""
        index = self._index
        if index is None:
            return []
        if type(index) is _HashIndex:
            return index.locations()
        return [(at, length) for at, length, _ in self._block_records(index.blocks())]  # type: ignore[union-attr]

    def _block_records(
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
                    _block_records(
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
        if type(index) is _HashIndex:
            locations = index.locations()
            chosen = sorted(rng.sample(locations, min(count, len(locations))))
            return [self.read_at(offset, length) for offset, length in chosen]
        blocks = index.blocks()  # type: ignore[union-attr]
        weights = [end - start for _, start, end in blocks]
        draws: dict[int, int] = {}
        for number in rng.choices(range(len(blocks)), weights=weights, k=count):
            draws[number] = draws.get(number, 0) + 1
        fetch = getattr(self._fetch, "direct", self._fetch)
        out: list[JournalEntry] = []
        for number in sorted(draws):
            first, start, end = blocks[number]
            data = fetch_exact(fetch, start, end, self.name)
            records = _block_records(data, first, self.name, start, self._checksum)
            for at, length, _ in sorted(rng.sample(records, min(draws[number], len(records)))):
                rel = at - start
                entry = _parse_record(
                    data, rel, rel + length, self.name, start, self.sqn_base, self._checksum
                )[1]
                out.append(entry)
        return out

    def read_at(self, offset: int, length: int) -> JournalEntry:
        """The entry of the record at ``offset`` of ``length`` bytes, as :meth:`locations` gives."""
        records_end = self.header.hash_offset
        if offset < HEADER_SIZE or length < _MIN_RECORD or offset + length > records_end:
            raise ValueError(
                f"[{offset}, {offset + length}) is not a record range of journal {self.name}; "
                "use the offsets and lengths that locations() returns"
            )
        return self._read_record(offset, length)[1]

    def _read_record(self, offset: int, length: int) -> tuple[bytes, JournalEntry]:
        data = fetch_exact(self._fetch, offset, offset + length, self.name)
        key, entry, end = _parse_record(
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
        blocks = index.arrays() if type(index) is _BlockIndex else None
        check = _SequenceCheck(self.header, name, blocks)
        checksum = self._checksum
        end = self.header.hash_offset
        pos = HEADER_SIZE
        buf = b""
        buf_start = pos
        while pos < end:
            buf_end = buf_start + len(buf)
            if buf_end - pos < _MIN_RECORD:
                buf, buf_start = self._refill(buf, buf_start, pos, pos + _MIN_RECORD, chunk_size)
                buf_end = buf_start + len(buf)
            key_length, value_length = _LENGTHS.unpack_from(buf, pos - buf_start)
            record_end = pos + _LENGTHS.size + key_length + value_length + _CRC.size
            if record_end > end:
                raise CorruptionError(name, "journal record lengths are damaged", offset=pos)
            if record_end > buf_end:
                buf, buf_start = self._refill(buf, buf_start, pos, record_end, chunk_size)
            _, entry, after = _parse_record(
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
