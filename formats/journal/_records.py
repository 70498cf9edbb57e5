"""Journal records read back: one record checked and decoded (:func:`parse_record`), a record's
body alone (:func:`record_body`), and the walk of a version 2 block's records
(:func:`find_in_block`, :func:`block_records`). Every record is checked (lengths, checksum,
kind and flags) before any of its bytes are returned."""

from __future__ import annotations

import msgpack
import snappy

from inkpen.errors import CorruptionError

from . import _format
from ._format import (
    COMPRESSED,
    COPY_TO_CHECK,
    HAS_EXPIRY,
    HAS_VALUE,
    KNOWN_FLAGS,
    MIN_RECORD,
    Checksum,
    JournalEntry,
    Kind,
    new_entry,
)

# The record layout's structs and the kinds by code, bound here by assignment: CPython 3.11
# compiles a method call on a name bound by an import as an attribute load (no LOAD_METHOD),
# which cost a tenth of a get's time.
CRC = _format.CRC
KEY_HEAD = _format.KEY_HEAD
LENGTHS = _format.LENGTHS
RECORD_HEAD = _format.RECORD_HEAD
VALUE_HEAD = _format.VALUE_HEAD
KINDS = _format.KINDS


def find_in_block(
    block: bytes, key: bytes, first_sqn: int | None, name: str, base: int, checksum: Checksum
) -> tuple[int, int] | None:
    """``(start, end)`` within ``block`` (the bytes of one block, read from offset ``base``) of
    the record whose key is ``key``, or None when the block does not hold it.

    Every record walked past is checked (lengths, CRC, SQN order; the first one's SQN against
    the index's ``first_sqn`` when given); the one found is left for the caller to check, so
    that a large record's bytes are checksummed once."""
    sqn = KEY_HEAD.unpack_from(key)[0]
    limit = len(block)
    pos = 0
    previous = -1
    while pos < limit:
        if limit - pos < MIN_RECORD:
            raise CorruptionError(name, "journal record is truncated", offset=base + pos)
        key_length, value_length, record_sqn, _ = RECORD_HEAD.unpack_from(block, pos)
        crc_at = pos + LENGTHS.size + key_length + value_length
        end = crc_at + CRC.size
        if key_length < KEY_HEAD.size or value_length < VALUE_HEAD.size or end > limit:
            raise CorruptionError(name, "journal record lengths are damaged", offset=base + pos)
        if (pos == 0 and first_sqn is not None and record_sqn != first_sqn) or (
            record_sqn <= previous
        ):
            raise CorruptionError(
                name, f"journal record SQN {record_sqn} is out of order or range", offset=base + pos
            )
        if record_sqn >= sqn and block[pos + LENGTHS.size : pos + LENGTHS.size + key_length] == key:
            return pos, end
        checked = (
            block[pos:crc_at] if crc_at - pos <= COPY_TO_CHECK else memoryview(block)[pos:crc_at]
        )
        if checksum(checked, 0) != CRC.unpack_from(block, crc_at)[0]:
            raise CorruptionError(name, "journal record checksum mismatch", offset=base + pos)
        if record_sqn > sqn:
            return None  # past it (the record checked first: its SQN is no answer unchecked)
        previous = record_sqn
        pos = end
    return None


def block_records(
    block: bytes, first_sqn: int, name: str, base: int, checksum: Checksum
) -> list[tuple[int, int, bytes]]:
    """``(offset, length, record key)`` of every record of ``block`` (read from ``base``), each
    checked as :func:`find_in_block` checks the records it walks past."""
    out: list[tuple[int, int, bytes]] = []
    limit = len(block)
    pos = 0
    previous = -1
    while pos < limit:
        if limit - pos < MIN_RECORD:
            raise CorruptionError(name, "journal record is truncated", offset=base + pos)
        key_length, value_length, record_sqn, _ = RECORD_HEAD.unpack_from(block, pos)
        crc_at = pos + LENGTHS.size + key_length + value_length
        end = crc_at + CRC.size
        if key_length < KEY_HEAD.size or value_length < VALUE_HEAD.size or end > limit:
            raise CorruptionError(name, "journal record lengths are damaged", offset=base + pos)
        if (pos == 0 and record_sqn != first_sqn) or record_sqn <= previous:
            raise CorruptionError(
                name, f"journal record SQN {record_sqn} is out of order or range", offset=base + pos
            )
        checked = (
            block[pos:crc_at] if crc_at - pos <= COPY_TO_CHECK else memoryview(block)[pos:crc_at]
        )
        if checksum(checked, 0) != CRC.unpack_from(block, crc_at)[0]:
            raise CorruptionError(name, "journal record checksum mismatch", offset=base + pos)
        out.append(
            (base + pos, end - pos, bytes(block[pos + LENGTHS.size : crc_at - value_length]))
        )
        previous = record_sqn
        pos = end
    return out


def parse_record(
    buf: bytes, pos: int, limit: int, name: str, base: int, sqn_base: int, checksum: Checksum
) -> tuple[bytes, JournalEntry, int]:
    """Check and decode the record at ``buf[pos:]`` (``base`` = file offset of ``buf[0]``).

    Returns the record's raw key, its entry (SQN shifted by ``sqn_base``) and the position just
    past it. ``limit`` bounds the record within ``buf``.
    """
    if limit - pos < MIN_RECORD:
        raise CorruptionError(name, "journal record is truncated", offset=base + pos)
    key_length, value_length, sqn, kind_code = RECORD_HEAD.unpack_from(buf, pos)
    key_at = pos + LENGTHS.size
    value_at = key_at + key_length
    crc_at = value_at + value_length
    if key_length < KEY_HEAD.size or value_length < VALUE_HEAD.size or crc_at + 4 > limit:
        raise CorruptionError(name, "journal record lengths are damaged", offset=base + pos)
    (stored_crc,) = CRC.unpack_from(buf, crc_at)
    checked = buf[pos:crc_at] if crc_at - pos <= COPY_TO_CHECK else memoryview(buf)[pos:crc_at]
    if checksum(checked, 0) != stored_crc:
        raise CorruptionError(name, "journal record checksum mismatch", offset=base + pos)
    flags, last_modified, expiry, specs_length = VALUE_HEAD.unpack_from(buf, value_at)
    kind = KINDS.get(kind_code)
    specs_at = value_at + VALUE_HEAD.size
    body_at = specs_at + specs_length
    if kind is None or flags & ~KNOWN_FLAGS or body_at > crc_at:
        raise CorruptionError(name, "journal record fields are invalid", offset=base + pos)
    has_value = flags & HAS_VALUE
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
            if flags & COMPRESSED:
                value = snappy.decompress(value)
    except Exception as exc:  # msgpack and snappy raise assorted types on damaged input
        raise CorruptionError(
            name, f"journal record payload does not decode: {exc}", offset=base + pos
        ) from exc
    key = buf[key_at:value_at]
    if type(key) is not bytes:
        key = bytes(key)
    entry = new_entry(
        JournalEntry,
        (
            sqn + sqn_base,
            kind,
            key[KEY_HEAD.size :],
            value,
            index_specs,
            expiry if flags & HAS_EXPIRY else None,
            last_modified,
        ),
    )
    return key, entry, crc_at + CRC.size


def record_body(
    data: bytes, key: bytes, name: str, offset: int, checksum: Checksum
) -> bytes | None:
    """Check the whole record ``data`` (read from ``offset``); its body if its key is ``key``,
    None if it is another record whose key hashes alike."""
    length = len(data)
    if length < MIN_RECORD:
        raise CorruptionError(name, "journal record is truncated", offset=offset)
    key_length, value_length = LENGTHS.unpack_from(data, 0)
    value_at = LENGTHS.size + key_length
    crc_at = value_at + value_length
    if key_length < KEY_HEAD.size or value_length < VALUE_HEAD.size or crc_at + 4 != length:
        raise CorruptionError(
            name, "journal record length disagrees with its hash slot", offset=offset
        )
    checked = data[:crc_at] if crc_at <= COPY_TO_CHECK else memoryview(data)[:crc_at]
    if checksum(checked, 0) != CRC.unpack_from(data, crc_at)[0]:
        raise CorruptionError(name, "journal record checksum mismatch", offset=offset)
    if data[LENGTHS.size : value_at] != key:
        return None
    flags, _, _, specs_length = VALUE_HEAD.unpack_from(data, value_at)
    kind = KINDS.get(data[LENGTHS.size + 8])
    body_at = value_at + VALUE_HEAD.size + specs_length
    if kind is None or flags & ~KNOWN_FLAGS or body_at > crc_at:
        raise CorruptionError(name, "journal record fields are invalid", offset=offset)
    has_value = flags & HAS_VALUE
    if (kind is Kind.OBJECT) != bool(has_value) or (not has_value and body_at != crc_at):
        raise CorruptionError(name, "journal record value does not match its kind", offset=offset)
    body = data[body_at:crc_at]
    if flags & COMPRESSED:
        try:
            body = snappy.decompress(body)
        except Exception as exc:  # snappy raises assorted types on damaged input
            raise CorruptionError(
                name, f"journal record payload does not decode: {exc}", offset=offset
            ) from exc
    return body if type(body) is bytes else bytes(body)
