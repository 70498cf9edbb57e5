"""Journal files written: entries encoded into records (:func:`build_journal`,
:func:`build_journal_parts`), a large put's record encoded ahead in its own thread
(:func:`prepare_record`), and the index region (a version 2 block index, or a version 1 hash
region for tests of old files)."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import msgpack
import snappy

from ..crc import CRC32C
from . import _format
from ._format import (
    COMPRESSED,
    DIRECTORY_SIZE,
    FORMAT_VERSION,
    HAS_EXPIRY,
    HAS_VALUE,
    HEADER_SIZE,
    INDEX_BLOCK,
    MAGIC,
    TABLE_COUNT,
    U32,
    U64,
    Checksum,
    JournalEntry,
    Kind,
    record_crc,
)

# The record layout's structs and the kinds by code, bound here by assignment: CPython 3.11
# compiles a method call on a name bound by an import as an attribute load (no LOAD_METHOD),
# which cost a tenth of a get's time.
BLOCK_ENTRY = _format.BLOCK_ENTRY
CRC = _format.CRC
HEADER = _format.HEADER
KEY_HEAD = _format.KEY_HEAD
LENGTHS = _format.LENGTHS
RECORD_HEAD = _format.RECORD_HEAD
SLOT = _format.SLOT
TABLE = _format.TABLE
VALUE_HEAD = _format.VALUE_HEAD
KINDS = _format.KINDS

_COMPRESS_MIN = 256
_SAMPLE_FROM = 256 * 1024
"""Bodies from this size are compressed only when a sample of them compresses."""
_SAMPLE_PIECE = 16 * 1024


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
            return HAS_VALUE | COMPRESSED, packed
    return HAS_VALUE, value


def _encode_specs(index_specs: Sequence[tuple[int, bytes, bytes]]) -> bytes:
    """The msgpack of an entry's index specs, each checked to be (op, field, term)."""
    for spec in index_specs:
        if len(spec) != 3 or spec[0] not in (0, 1):
            raise ValueError(f"index spec {spec!r} is not (op, field, term) with op 0 or 1")
        if type(spec[1]) is not bytes or type(spec[2]) is not bytes:
            raise TypeError(f"index spec {spec!r}: field and term must be bytes")
    packed: bytes = msgpack.packb([tuple(spec) for spec in index_specs], use_bin_type=True)
    return packed


def _encode_record(entry: JournalEntry, checksum: Checksum) -> tuple[bytes, bytes, int]:
    """Encode one entry: the record without its CRC, the CRC (by ``checksum``), and the hash of
    the record key."""
    sqn, given_kind, ledger_key, value, index_specs, expiry_ms, last_modified_ms = entry
    kind = KINDS.get(given_kind)
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
        flags |= HAS_EXPIRY
    last_modified = last_modified_ms
    if type(last_modified) is not int or not 0 <= last_modified < U64:
        last_modified = _check_uint(last_modified_ms, 64, "last_modified_ms")
    specs = _encode_specs(index_specs) if index_specs else b""
    key_length = KEY_HEAD.size + len(ledger_key)
    value_length = VALUE_HEAD.size + len(specs) + len(body)
    if key_length >= U32 or value_length >= U32:
        raise ValueError(f"entry sqn {sqn} is too large for a journal record (4 GiB at most)")
    head = RECORD_HEAD.pack(key_length, value_length, sqn, kind)
    record = b"".join(
        (head, ledger_key, VALUE_HEAD.pack(flags, last_modified, expiry, len(specs)), specs, body)
    )
    key_hash = zlib.crc32(ledger_key, zlib.crc32(head[LENGTHS.size :]))
    return record, CRC.pack(checksum(record, 0)), key_hash


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
        flags |= HAS_EXPIRY
    last_modified = _check_uint(last_modified_ms, 64, "last_modified_ms")
    specs = _encode_specs(index_specs) if index_specs else b""
    fields = b"".join(
        (ledger_key, VALUE_HEAD.pack(flags, last_modified, expiry, len(specs)), specs)
    )
    key_length = KEY_HEAD.size + len(ledger_key)
    value_length = VALUE_HEAD.size + len(specs) + len(body)
    if key_length >= U32 or value_length >= U32:
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
    head = RECORD_HEAD.pack(prepared.key_length, prepared.value_length, sqn, Kind.OBJECT)
    crc = CRC32C.combine(CRC32C.checksum(head, 0), prepared.crc, prepared.shift)
    key_hash = zlib.crc32(prepared.ledger_key, zlib.crc32(head[LENGTHS.size :]))
    return head, CRC.pack(crc), key_hash


def _encode_hash_region(slots: list[tuple[int, int, int]]) -> bytes:
    """Lay out the 256 CDB hash tables for ``(hash, offset, length)`` of every record."""
    tables: list[list[tuple[int, int, int]]] = [[] for _ in range(TABLE_COUNT)]
    for slot in slots:
        tables[slot[0] & 255].append(slot)
    directory = bytearray(DIRECTORY_SIZE)
    area = bytearray(2 * len(slots) * SLOT.size)
    first = 0
    for index, members in enumerate(tables):
        count = 2 * len(members)
        TABLE.pack_into(directory, index * TABLE.size, first, count)
        taken = [False] * count
        for slot in members:
            position = (slot[0] >> 8) % count
            while taken[position]:
                position = position + 1 if position + 1 < count else 0
            taken[position] = True
            SLOT.pack_into(area, (first + position) * SLOT.size, *slot)
        first += count
    region = bytes(directory) + bytes(area)
    return region + CRC.pack(zlib.crc32(region))


def _encode_block_index(firsts: list[int], offsets: list[int]) -> bytes:
    """The block index region (versions 2 and 3): ``(first SQN, offset)`` of every block, then
    its CRC."""
    region = b"".join(map(BLOCK_ENTRY.pack, firsts, offsets))
    return region + CRC.pack(zlib.crc32(region))


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
    checksum = record_crc(version).checksum
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
        if type(sqn) is not int or not 0 <= sqn < U64:
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
            length = len(head) + len(ready.fields) + len(ready.body) + CRC.size
        else:
            record, crc, key_hash = _encode_record(entry, checksum)
            parts.append(record)
            parts.append(crc)
            length = len(record) + CRC.size
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
    head = HEADER.pack(MAGIC, version, epoch, count, min_sqn, max_sqn, offset, len(region))
    return [head + CRC.pack(zlib.crc32(head)), *parts, region]
