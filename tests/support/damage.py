"""Damage for tests of corruption: one byte's bits flipped, in bytes or in a file in place."""

from __future__ import annotations

from pathlib import Path


def flip(data: bytes, offset: int, mask: int) -> bytes:
    """``data`` with the byte at ``offset`` XORed with ``mask``."""
    return data[:offset] + bytes([data[offset] ^ mask]) + data[offset + 1 :]


def flip_in_file(path: Path, offset: int, mask: int) -> None:
    """XOR the byte at ``offset`` of the file at ``path`` with ``mask``, in place."""
    with path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ mask]))
