"""Tictac trees: merkle-like summaries of a key space that two stores exchange to find what differs.

A :class:`TicTacTree` (named after Riak's tictac AAE trees, as Leveled builds them) holds a fixed
number of segments, :data:`SEGMENTS` = 65,536. Every key falls in one segment, chosen by a hash of
the key alone, so the same key lands in the same segment in every store. A segment's hash is the
XOR of the hashes of ``(key, content hash)`` of the keys in it (0 for an empty segment). XOR makes
the tree independent of the order keys are added in, lets it be built incrementally (adding a key
twice removes it again, so a changed object is one removal and one addition) and lets trees of
disjoint key sets be merged (XOR segment by segment).

Two trees are compared segment by segment: :meth:`TicTacTree.compare` returns the ids of the
segments whose hashes differ. Every added, removed or changed key changes its segment's hash
(barring a 64-bit hash collision), so the differing keys are all in those segments and only their
keys need to be read and compared.

Keys are identified by their escaped components (the ledger key encoding of
:mod:`inkpen.formats.keys` without its tag byte), so a bucket, key and subkey map to one segment
whether the object is a normal or a head-only one:

* segment id = the top 16 bits of the CRC-32 (zlib's) of the escaped components: the segment
  needs only an even spread, and a fold computes it for every key it passes;
* key hash = BLAKE2b-64 of the escaped components followed by the content hash (8 bytes,
  big-endian).

Serialized form (:meth:`TicTacTree.to_bytes`), big-endian::

    magic    b"INKTIC"          6 bytes
    version  u16                 1
    segments u32                 65536
    hashes   u64 * segments
    crc      u32                 CRC-32 of everything before it

:meth:`TicTacTree.from_bytes` checks each field and raises :class:`~inkpen.errors.CorruptionError`
on bytes that are not a tree (a version newer than this code asks to upgrade inkpen) and
:class:`~inkpen.errors.UsageError` on an argument that is not bytes. This module does no I/O.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from collections.abc import Iterable
from hashlib import blake2b

from inkpen.errors import CorruptionError, UsageError

from .keys import object_key

SEGMENT_BITS = 16
SEGMENTS = 1 << SEGMENT_BITS
"""The number of segments of every tree."""
FORMAT_VERSION = 1
MAGIC = b"INKTIC"

_HEADER = struct.Struct(">6sHI")
_CRC = struct.Struct(">I")
_SHIFT = 32 - SEGMENT_BITS
_U64 = 1 << 64
_NAME = "tictac tree"
SERIALIZED_SIZE = _HEADER.size + 8 * SEGMENTS + _CRC.size
"""The length of :meth:`TicTacTree.to_bytes`."""


def _digest64(data: bytes) -> int:
    return int.from_bytes(blake2b(data, digest_size=8).digest(), "big")


def escaped_components(bucket: bytes, key: bytes, subkey: bytes = b"") -> bytes:
    """The identity of a key in a tree: its ledger key encoding without the tag byte."""
    return object_key(bucket, key, subkey)[1:]


def segment_of_components(components: bytes) -> int:
    """The segment of a key given by :func:`escaped_components` (or ``ledger_key[1:]``)."""
    return zlib.crc32(components) >> _SHIFT


def key_hash(components: bytes, content_hash: int) -> int:
    """The hash a key contributes to its segment: of its components and its content hash."""
    return _digest64(components + content_hash.to_bytes(8, "big"))


def _as_bytes(name: str, value: object) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise UsageError(f"{name} must be str or bytes, got {type(value).__name__}")


class TicTacTree:
    """A tree of :data:`SEGMENTS` segment hashes; see the module docstring.

    Build one with :meth:`add` (or get one from ``book.tictac_tree()``), compare two with
    :meth:`compare`, combine trees of disjoint key sets with :meth:`merge`, ship one with
    :meth:`to_bytes` / :meth:`from_bytes`.
    """

    SEGMENTS = SEGMENTS
    __slots__ = ("_hashes",)

    def __init__(self) -> None:
        self._hashes = array("Q", bytes(8 * SEGMENTS))

    @staticmethod
    def segment_of(bucket: str | bytes, key: str | bytes, subkey: str | bytes = b"") -> int:
        """The segment (0 <= id < SEGMENTS) that (bucket, key, subkey) falls in, in every tree."""
        return segment_of_components(
            escaped_components(
                _as_bytes("bucket", bucket), _as_bytes("key", key), _as_bytes("subkey", subkey)
            )
        )

    def add(
        self,
        bucket: str | bytes,
        key: str | bytes,
        content_hash: int,
        subkey: str | bytes = b"",
    ) -> None:
        """Add a key with its content hash. Adding the same pair again removes it (XOR)."""
        if type(content_hash) is not int or not 0 <= content_hash < _U64:
            raise UsageError(f"content_hash must be an int in [0, 2**64), got {content_hash!r}")
        components = escaped_components(
            _as_bytes("bucket", bucket), _as_bytes("key", key), _as_bytes("subkey", subkey)
        )
        self.add_components(components, content_hash)

    remove = add
    """Remove a key added with this content hash (the same XOR as :meth:`add`)."""

    def add_components(self, components: bytes, content_hash: int) -> None:
        """:meth:`add` for a key already given as its escaped components (``ledger_key[1:]``)."""
        self._hashes[zlib.crc32(components) >> _SHIFT] ^= _digest64(
            components + content_hash.to_bytes(8, "big")
        )

    def add_all(self, items: Iterable[tuple[bytes, int]]) -> None:
        """:meth:`add_components` for many ``(components, content hash)`` pairs (a fold's loop)."""
        hashes, crc, digest, shift = self._hashes, zlib.crc32, blake2b, _SHIFT
        from_bytes = int.from_bytes
        for components, content_hash in items:
            hashes[crc(components) >> shift] ^= from_bytes(
                digest(components + content_hash.to_bytes(8, "big"), digest_size=8).digest(),
                "big",
            )

    def segment_hash(self, segment: int) -> int:
        """The hash of one segment (0 when it is empty or its keys cancel out)."""
        return self._hashes[_check_segment(segment)]

    def merge(self, other: TicTacTree) -> TicTacTree:
        """A new tree of both trees' keys (for disjoint key sets: a key in both cancels out)."""
        _check_tree(other)
        merged = TicTacTree()
        mine, theirs, out = self._hashes, other._hashes, merged._hashes
        for i in range(SEGMENTS):
            out[i] = mine[i] ^ theirs[i]
        return merged

    def compare(self, other: TicTacTree) -> list[int]:
        """The ids of the segments whose hashes differ, ascending; empty iff the trees are equal."""
        _check_tree(other)
        if self._hashes == other._hashes:
            return []
        theirs = other._hashes
        return [i for i, h in enumerate(self._hashes) if h != theirs[i]]

    def is_empty(self) -> bool:
        """True when every segment hash is 0 (no keys, or keys that cancel out)."""
        return not any(self._hashes)

    def to_bytes(self) -> bytes:
        """The serialized tree (see the module docstring): :data:`SERIALIZED_SIZE` bytes."""
        hashes = array("Q", self._hashes)
        if sys.byteorder == "little":
            hashes.byteswap()
        body = _HEADER.pack(MAGIC, FORMAT_VERSION, SEGMENTS) + hashes.tobytes()
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def from_bytes(cls, data: bytes) -> TicTacTree:
        """Read a tree written by :meth:`to_bytes`; ``CorruptionError`` if ``data`` is not one."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise UsageError(f"TicTacTree.from_bytes takes bytes, got {type(data).__name__}")
        raw = bytes(data)
        if len(raw) < _HEADER.size:
            raise CorruptionError(
                _NAME, f"{len(raw)} bytes is too short for a tree header ({_HEADER.size})"
            )
        magic, version, count = _HEADER.unpack_from(raw)
        if magic != MAGIC:
            raise CorruptionError(_NAME, f"bad magic {magic!r}: not a tictac tree", offset=0)
        if version > FORMAT_VERSION:
            raise CorruptionError(
                _NAME,
                f"format version {version} is newer than this inkpen reads ({FORMAT_VERSION}); "
                "upgrade inkpen",
                offset=6,
            )
        if version != FORMAT_VERSION:
            raise CorruptionError(_NAME, f"unknown format version {version}", offset=6)
        if count != SEGMENTS:
            raise CorruptionError(
                _NAME, f"the tree has {count} segments; inkpen trees have {SEGMENTS}", offset=8
            )
        if len(raw) != SERIALIZED_SIZE:
            raise CorruptionError(
                _NAME, f"{len(raw)} bytes; a serialized tree is {SERIALIZED_SIZE} bytes"
            )
        body, (crc,) = raw[: -_CRC.size], _CRC.unpack_from(raw, len(raw) - _CRC.size)
        if zlib.crc32(body) != crc:
            raise CorruptionError(_NAME, "CRC mismatch: the bytes are damaged", offset=len(body))
        hashes = array("Q")
        hashes.frombytes(body[_HEADER.size :])
        if sys.byteorder == "little":
            hashes.byteswap()
        tree = cls()
        tree._hashes = hashes
        return tree

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TicTacTree):
            return NotImplemented
        return self._hashes == other._hashes

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        used = sum(1 for h in self._hashes if h)
        return f"<inkpen.TicTacTree {used}/{SEGMENTS} segments non-empty>"


def _check_segment(segment: object) -> int:
    if type(segment) is not int or not 0 <= segment < SEGMENTS:
        raise UsageError(f"a segment id is an int in [0, {SEGMENTS}), got {segment!r}")
    return segment


def _check_tree(other: object) -> None:
    if not isinstance(other, TicTacTree):
        raise UsageError(f"expected a TicTacTree, got {type(other).__name__}")


def check_segments(segments: Iterable[int] | None) -> frozenset[int] | None:
    """A ``segments=`` argument as a set of segment ids (None: every segment); ``UsageError``
    on anything else."""
    if segments is None:
        return None
    if isinstance(segments, str | bytes) or not isinstance(segments, Iterable):
        raise UsageError(f"segments must be an iterable of segment ids, got {segments!r}")
    return frozenset(_check_segment(s) for s in segments)
