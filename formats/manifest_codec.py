"""The manifest codec: a msgpack document framed with a magic, a format version and a CRC.

Layout (all integers big-endian)::

    offset  size  field
    0       4     magic b"INKM"
    4       2     format version (u16), currently 1
    6       4     payload length N (u32)
    10      N     payload: msgpack map (str keys; bytes stay bytes)
    10+N    4     CRC-32 (zlib) of bytes [0, 10+N)

The codec knows nothing of the manifest's fields; :mod:`inkpen.manifest.model` maps its frozen
value to and from the document. A version newer than this code understands is refused with a clear
error rather than half-read.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from typing import Any

import msgpack

from inkpen.errors import CorruptionError

MAGIC = b"INKM"
FORMAT_VERSION = 1
_HEADER = struct.Struct(">4sHI")
_CRC = struct.Struct(">I")


def encode_manifest(document: Mapping[str, Any], *, version: int = FORMAT_VERSION) -> bytes:
    """Frame a manifest document as bytes ready to store."""
    payload: bytes = msgpack.packb(dict(document), use_bin_type=True)
    head = _HEADER.pack(MAGIC, version, len(payload))
    body = head + payload
    return body + _CRC.pack(zlib.crc32(body))


def decode_manifest(data: bytes, name: str) -> dict[str, Any]:
    """Check and unframe a stored manifest; ``name`` labels errors (the object key).

    Raises :class:`CorruptionError` for a wrong magic, a bad length, a checksum mismatch, an
    undecodable payload or a format version newer than this code.
    """
    if len(data) < _HEADER.size + _CRC.size:
        raise CorruptionError(name, f"manifest is {len(data)} bytes, too short to hold a header")
    magic, version, length = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise CorruptionError(name, f"not an inkpen manifest (magic {magic!r})", offset=0)
    end = _HEADER.size + length
    if end + _CRC.size != len(data):
        raise CorruptionError(
            name, f"payload length {length} does not match object size {len(data)}", offset=6
        )
    (stored_crc,) = _CRC.unpack_from(data, end)
    if zlib.crc32(memoryview(data)[:end]) != stored_crc:
        raise CorruptionError(name, "manifest checksum mismatch", offset=end)
    if version > FORMAT_VERSION:
        raise CorruptionError(
            name,
            f"manifest format version {version} is newer than this inkpen understands "
            f"(up to {FORMAT_VERSION}); upgrade inkpen to read this database",
            offset=4,
        )
    if version < 1:
        raise CorruptionError(name, f"manifest format version {version} is invalid", offset=4)
    try:
        document = msgpack.unpackb(
            memoryview(data)[_HEADER.size : end], raw=False, strict_map_key=False
        )
    except (ValueError, msgpack.UnpackException) as exc:
        raise CorruptionError(name, f"manifest payload does not decode: {exc}", offset=10) from exc
    if not isinstance(document, dict):
        raise CorruptionError(name, "manifest payload is not a map", offset=10)
    return document
