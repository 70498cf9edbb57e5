"""The checksums of the formats, and their arithmetic: the CRC of two pieces joined, from theirs.

Two 32-bit CRCs are used: CRC-32 (zlib's, :func:`zlib.crc32`: every checksum of every format
until journal format version 3) and CRC-32C (Castagnoli, the ``crc32c`` package: the records of
journal files from version 3, computed with the CPU's CRC32 instruction at about 25 GB/s a core
against zlib's 4, and without the interpreter lock from 1 MiB on). Each is a :class:`Crc`.

Both are linear over GF(2), so the CRC of ``a + b`` follows from ``crc(a)``, ``crc(b)`` and
``len(b)`` alone: ``crc(a)`` shifted through ``len(b)`` zero bytes (a multiplication by
``x**(8 * len(b))`` modulo the polynomial) and added to ``crc(b)``, as zlib's own
``crc32_combine`` does (Python's :mod:`zlib` does not offer it). The shift depends on the length
only: :meth:`Crc.shift` computes it (at most four multiplications, from tables made on first
use: about 20 µs), :meth:`Crc.combine` then costs one (about 3 µs). Powers of x are taken by
squaring, never by a period: x**(2**32) is x modulo CRC-32's polynomial but not CRC-32C's.

The journal uses it to checksum a large record without reading its body again once the record's
SQN is known: the body's part is computed in the writing caller's thread, the SQN's by the
journal's writer (:func:`~inkpen.formats.journal.prepare_record`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

_ONE = 1 << 31
"""The polynomial 1 (x**0) in the bit-reversed representation the CRCs use."""
_MAX_LENGTH_BITS = 60
"""Lengths :meth:`Crc.shift` takes are below ``2**60`` bytes."""


class Crc:
    """One 32-bit reflected CRC: its checksum function and the arithmetic of combining."""

    __slots__ = ("_powers", "_shifts", "checksum", "name", "poly")

    def __init__(self, name: str, poly: int, checksum: Callable[[bytes | memoryview, int], int]):
        self.name = name
        self.poly = poly
        """The polynomial, bit-reversed (the least significant bit is the highest power)."""
        self.checksum = checksum
        """``checksum(data, running)``: the CRC of ``data``, continuing ``running`` (0 to
        start)."""
        power = _ONE >> 1  # x
        powers = [power]
        for _ in range(_MAX_LENGTH_BITS + 2):  # x**(2**k), by squaring: no period is assumed
            power = self._multiply(power, power)  # (x**(2**32) is x for CRC-32, not CRC-32C)
            powers.append(power)
        self._powers = tuple(powers)
        self._shifts: tuple[tuple[int, ...], ...] = ()

    def __repr__(self) -> str:
        return f"Crc({self.name})"

    def of(self, *pieces: bytes | memoryview) -> int:
        """The CRC of the pieces joined, computed piece by piece (nothing is joined)."""
        crc = 0
        checksum = self.checksum
        for piece in pieces:
            crc = checksum(piece, crc)
        return crc

    def _multiply(self, a: int, b: int) -> int:
        """``a * b`` modulo the polynomial (zlib's ``multmodp``)."""
        poly = self.poly
        product = 0
        mask = _ONE
        while True:
            if a & mask:
                product ^= b
                if not a & (mask - 1):
                    return product
            mask >>= 1
            b = (b >> 1) ^ poly if b & 1 else b >> 1

    def shift(self, length: int) -> int:
        """``x**(8 * length)`` modulo the polynomial: what moves a CRC through ``length``
        bytes. A length below 4 GiB costs at most four multiplications, one per byte of it,
        from tables of ``x**(8 * v * 256**i)`` made on the first call (1,020 multiplications,
        a few milliseconds); a longer one one more multiplication per bit set above."""
        if not 0 <= length < 1 << _MAX_LENGTH_BITS:
            raise ValueError(f"a length is in [0, 2**{_MAX_LENGTH_BITS}), got {length}")
        shifts = self._shifts or self._make_shifts()
        product = _ONE
        for table in shifts:
            if not length:
                return product
            byte = length & 255
            if byte:
                product = self._multiply(table[byte], product)
            length >>= 8
        k = 3 + 8 * len(shifts)  # x**(8 * length) = x**(length * 2**3), length's bits from 32
        powers = self._powers
        while length:
            if length & 1:
                product = self._multiply(powers[k], product)
            length >>= 1
            k += 1
        return product

    def _make_shifts(self) -> tuple[tuple[int, ...], ...]:
        """``x**(8 * v * 256**i)`` for every byte value v of each byte i of a 32-bit length."""
        tables = []
        for i in range(4):
            unit = self._powers[3 + 8 * i]  # x**(8 * 256**i) = x**(2**(3 + 8i))
            table = [_ONE]
            for _ in range(255):
                table.append(self._multiply(table[-1], unit))
            tables.append(tuple(table))
        self._shifts = tuple(tables)
        return self._shifts

    def combine(self, first: int, second: int, second_shift: int) -> int:
        """``crc(a + b)`` from ``first = crc(a)``, ``second = crc(b)`` and
        ``second_shift = shift(len(b))``."""
        return self._multiply(second_shift, first) ^ second


_RELEASE_FROM = 1 << 20
"""CRC-32C gives up the interpreter lock for buffers of this many bytes or more (1 MiB: 40 µs
of work); below, giving it up and taking it back costs more than the checksum when many threads
want the lock (a 256 KiB get spent a quarter of its time there)."""


_crc32c_impl: Callable[[bytes | memoryview, int, int], int] | None = None


def _crc32c(data: bytes | memoryview, value: int = 0) -> int:
    """``crc32c.crc32c``, holding the interpreter lock below :data:`_RELEASE_FROM`; the package
    is imported on the first checksum (its own import reads package metadata: tens of ms)."""
    impl = _crc32c_impl
    if impl is None:
        impl = _load_crc32c()
    return impl(data, value, 1 if len(data) >= _RELEASE_FROM else 0)


def _load_crc32c() -> Callable[[bytes | memoryview, int, int], int]:
    global _crc32c_impl
    import crc32c

    _crc32c_impl = crc32c.crc32c
    return _crc32c_impl


CRC32 = Crc("CRC-32", 0xEDB88320, zlib.crc32)
"""zlib's CRC-32 (ISO-HDLC)."""
CRC32C = Crc("CRC-32C", 0x82F63B78, _crc32c)
"""CRC-32C (Castagnoli), in hardware where the CPU has the instruction."""
