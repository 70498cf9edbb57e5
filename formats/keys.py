"""Ledger keys and ledger values: the byte encoding whose order is the key order, and the metadata.

A ledger key is a tag byte followed by its components, each escaped the FoundationDB way and
terminated::

    byte 0x00 inside a component  ->  0x00 0xFF
    end of each component         ->  0x00 0x00

An escaped component never contains ``0x00 0x00``, and a terminator sorts below both ``0x00 0xFF``
and any non-zero byte, so comparing encoded keys as bytes compares their tuples of components:
a component that is a prefix of another sorts first, and embedded NULs sort where they should.

========  ===========  ================================================
tag       byte         components
========  ===========  ================================================
OBJECT    0x6F ("o")   bucket, key, subkey
HEAD      0x68 ("h")   bucket, key, subkey (head-only objects)
INDEX     0x69 ("i")   bucket, field, term, object key
REVERSE   0x72 ("r")   bucket, object key, field, term
========  ===========  ================================================

Every index entry has a REVERSE twin with the same value: the object's own list of its index
entries, so the writer can find them all (a delete removes them) with one range read of
:func:`reverse_prefix`. REVERSE keys sort apart from every other tag and no fold reads them.

A ledger value is a :class:`LedgerValue` tuple (SQN, status, expiry, content hash, size,
last-modified time); index entries carry a content hash and size of 0.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

MAX_KEY_BYTES = 65536
"""Longest bucket, key, subkey, field or term, in bytes."""

ACTIVE = 0
"""Status of a live entry."""
TOMBSTONE = 1
"""Status of a deleted entry."""

_ESCAPE_FROM = b"\x00"
_ESCAPE_TO = b"\x00\xff"
_TERMINATOR = b"\x00\x00"


class Tag(IntEnum):
    """The kind of a ledger key; its value is the key's first byte."""

    OBJECT = 0x6F
    HEAD = 0x68
    INDEX = 0x69
    REVERSE = 0x72


_TAGS = {tag.value: tag for tag in Tag}
_TAG_BYTES = {tag: bytes([tag]) for tag in Tag}
_OBJECT_TAG_VALUES = frozenset((Tag.OBJECT.value, Tag.HEAD.value))
_OBJECT_TAG_BYTES = {Tag.OBJECT: _TAG_BYTES[Tag.OBJECT], Tag.HEAD: _TAG_BYTES[Tag.HEAD]}


@dataclass(frozen=True, slots=True)
class LedgerKey:
    """A decoded ledger key.

    For INDEX keys ``key`` is the index field, ``subkey`` the term and ``object_key`` the key of
    the object the entry points at; for REVERSE keys ``key`` is the object key, ``subkey`` the
    field and ``object_key`` the term; ``object_key`` is empty for the other tags.
    """

    tag: Tag
    bucket: bytes
    key: bytes
    subkey: bytes
    object_key: bytes = b""


class LedgerValue(NamedTuple):
    """The ledger's metadata for one key; the higher SQN wins when two entries meet."""

    sqn: int
    status: int
    expiry_ms: int | None
    content_hash: int
    size: int
    last_modified_ms: int


def head_value(value: LedgerValue) -> bytes | None:
    """The value a head-only object's ledger entry carries as a seventh field, else None.

    Entries of HEAD keys written by ``Bookie.mput`` hold ``(sqn, status, expiry, hash, size,
    last_modified, value)``; every other entry has the six named fields only.
    """
    return value[6] if len(value) > 6 else None


def is_live(value: LedgerValue, now_ms: int) -> bool:
    """True when the entry is active and has not expired at ``now_ms``."""
    return value.status == ACTIVE and (value.expiry_ms is None or value.expiry_ms > now_ms)


def content_hash(value: bytes) -> int:
    """A stable 64-bit hash of an object body (BLAKE2b, 8-byte digest, big-endian)."""
    return int.from_bytes(hashlib.blake2b(value, digest_size=8).digest(), "big")


def _escape(component: bytes, what: str) -> bytes:
    if type(component) is not bytes:
        raise TypeError(f"{what} must be bytes, not {type(component).__name__}")
    if len(component) > MAX_KEY_BYTES:
        raise ValueError(f"{what} is {len(component)} bytes; the limit is {MAX_KEY_BYTES}")
    return component.replace(_ESCAPE_FROM, _ESCAPE_TO) + _TERMINATOR


def _tag_byte(tag: Tag) -> bytes:
    tag_byte = _TAG_BYTES.get(tag)
    if tag_byte is None:
        raise ValueError(f"{tag!r} is not a ledger key tag (one of {[t.name for t in Tag]})")
    return tag_byte


def _object_tag_byte(tag: Tag) -> bytes:
    if tag == Tag.INDEX or tag == Tag.REVERSE:
        raise ValueError(
            "index keys have four components; build them with index_key() or reverse_key()"
        )
    return _tag_byte(tag)


def object_key(bucket: bytes, key: bytes, subkey: bytes = b"", *, tag: Tag = Tag.OBJECT) -> bytes:
    """Encode the ledger key of an object (or, with ``tag=Tag.HEAD``, a head-only object)."""
    if (
        type(bucket) is bytes
        and type(key) is bytes
        and type(subkey) is bytes
        and len(bucket) <= MAX_KEY_BYTES
        and len(key) <= MAX_KEY_BYTES
        and len(subkey) <= MAX_KEY_BYTES
        and tag in _OBJECT_TAG_BYTES
    ):  # every put and get comes here: the checks of _escape, made once
        return b"".join(
            (
                _OBJECT_TAG_BYTES[tag],
                bucket.replace(_ESCAPE_FROM, _ESCAPE_TO),
                _TERMINATOR,
                key.replace(_ESCAPE_FROM, _ESCAPE_TO),
                _TERMINATOR,
                subkey.replace(_ESCAPE_FROM, _ESCAPE_TO),
                _TERMINATOR,
            )
        )
    return b"".join(
        (
            _object_tag_byte(tag),
            _escape(bucket, "bucket"),
            _escape(key, "key"),
            _escape(subkey, "subkey"),
        )
    )


def index_key(bucket: bytes, field: bytes, term: bytes, object_key: bytes) -> bytes:
    """Encode the ledger key of an index entry: ``term`` of ``field`` points at ``object_key``."""
    return b"".join(
        (
            _TAG_BYTES[Tag.INDEX],
            _escape(bucket, "bucket"),
            _escape(field, "field"),
            _escape(term, "term"),
            _escape(object_key, "object key"),
        )
    )


def reverse_key(bucket: bytes, key: bytes, field: bytes, term: bytes) -> bytes:
    """Encode the REVERSE twin of an index entry: object ``key`` has ``term`` in ``field``."""
    return b"".join(
        (
            _TAG_BYTES[Tag.REVERSE],
            _escape(bucket, "bucket"),
            _escape(key, "key"),
            _escape(field, "field"),
            _escape(term, "term"),
        )
    )


def reverse_prefix(bucket: bytes, key: bytes) -> bytes:
    """The prefix of every REVERSE key of object (bucket, key)."""
    return _TAG_BYTES[Tag.REVERSE] + _escape(bucket, "bucket") + _escape(key, "key")


def reverse_parts(encoded: bytes) -> tuple[bytes, bytes]:
    """``(field, term)`` of an encoded REVERSE key; ``ValueError`` if it is not one."""
    if not encoded or encoded[0] != Tag.REVERSE:
        raise ValueError(f"not a reverse index ledger key: {encoded[:64]!r}")
    _, _, field, term = _components(encoded, 4)
    return field, term


def _components(encoded: bytes, count: int) -> list[bytes]:
    parts = encoded[1:].split(_TERMINATOR)
    if len(parts) != count + 1 or parts[-1]:
        raise ValueError(
            f"ledger key does not hold {count} terminated components: {encoded[:64]!r}"
        )
    del parts[-1]
    for index, raw in enumerate(parts):
        if _ESCAPE_FROM in raw:
            if raw.count(_ESCAPE_FROM) != raw.count(_ESCAPE_TO):
                raise ValueError(f"ledger key has a bad escape: {encoded[:64]!r}")
            parts[index] = raw.replace(_ESCAPE_TO, _ESCAPE_FROM)
    return parts


def decode_key(encoded: bytes) -> LedgerKey:
    """Decode an encoded ledger key; ``ValueError`` if it is malformed."""
    if not encoded:
        raise ValueError("an encoded ledger key is never empty")
    tag = _TAGS.get(encoded[0])
    if tag is None:
        raise ValueError(f"ledger key has unknown tag byte 0x{encoded[0]:02x}")
    if tag is Tag.INDEX:
        bucket, field, term, target = _components(encoded, 4)
        return LedgerKey(tag, bucket, field, term, target)
    if tag is Tag.REVERSE:
        bucket, key, field, term = _components(encoded, 4)
        return LedgerKey(tag, bucket, key, field, term)
    bucket, key, subkey = _components(encoded, 3)
    return LedgerKey(tag, bucket, key, subkey)


def object_parts(encoded: bytes) -> tuple[bytes, bytes]:
    """``(bucket, key)`` of an encoded OBJECT or HEAD key: :func:`decode_key` for folds, which
    need only those two; ``ValueError`` if ``encoded`` is not such a key."""
    if not encoded or encoded[0] not in _OBJECT_TAG_VALUES:
        raise ValueError(f"not an object ledger key: {encoded[:64]!r}")
    parts = encoded[1:].split(_TERMINATOR)
    if len(parts) == 4 and not parts[3] and _ESCAPE_FROM not in parts[0]:
        key = parts[1]
        if _ESCAPE_FROM not in key and _ESCAPE_FROM not in parts[2]:
            return parts[0], key  # no NUL anywhere: nothing to unescape or check
    bucket, key, _ = _components(encoded, 3)
    return bucket, key


def prefix_end(prefix: bytes) -> bytes:
    """The smallest byte string greater than every string that starts with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        raise ValueError("no byte string is greater than every string starting with 0xFF bytes")
    return stripped[:-1] + bytes([stripped[-1] + 1])


def bucket_prefix(tag: Tag, bucket: bytes) -> bytes:
    """The prefix shared by every key of ``tag`` in ``bucket``."""
    return _tag_byte(tag) + _escape(bucket, "bucket")


def key_range(
    tag: Tag, bucket: bytes, start: bytes | None, end: bytes | None
) -> tuple[bytes, bytes]:
    """Encoded ``[lo, hi)`` covering the keys of ``tag`` in ``bucket`` with start <= key <= end.

    Both ends are inclusive on the key component (every subkey of ``end`` is covered); None
    leaves that end open. For INDEX this ranges over fields.
    """
    prefix = bucket_prefix(tag, bucket)
    lo = prefix if start is None else prefix + _escape(start, "start key")
    hi = prefix_end(prefix if end is None else prefix + _escape(end, "end key"))
    return lo, hi


def key_prefix(tag: Tag, bucket: bytes, prefix: bytes) -> bytes:
    """The encoded prefix every key of ``tag`` in ``bucket`` starting with ``prefix`` shares.

    ``[key_prefix(...), prefix_end(key_prefix(...)))`` holds exactly those keys (for INDEX:
    the fields starting with ``prefix``).
    """
    return bucket_prefix(tag, bucket) + _escape(prefix, "key prefix")[: -len(_TERMINATOR)]


def index_range(
    bucket: bytes, field: bytes, start_term: bytes | None, end_term: bytes | None
) -> tuple[bytes, bytes]:
    """Encoded ``[lo, hi)`` covering index entries of ``field`` with start_term <= term <= end_term.

    Both ends are inclusive (every object key under ``end_term`` is covered); None leaves that
    end open.
    """
    prefix = bucket_prefix(Tag.INDEX, bucket) + _escape(field, "field")
    lo = prefix if start_term is None else prefix + _escape(start_term, "start term")
    hi = prefix_end(prefix if end_term is None else prefix + _escape(end_term, "end term"))
    return lo, hi
