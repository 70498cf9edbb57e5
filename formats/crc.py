"""CRC-32 arithmetic: the CRC of two pieces joined, from the CRC of each and the second's length.

zlib's CRC-32 (the one :func:`zlib.crc32` computes, which the formats use) is linear over GF(2),
so the CRC of ``a + b`` follows from ``crc32(a)``, ``crc32(b)`` and ``len(b)`` alone: ``crc32(a)``
shifted through ``len(b)`` zero bytes (a multiplication by ``x**(8 * len(b))`` modulo the CRC
polynomial) and added to ``crc32(b)``, as zlib's own ``crc32_combine`` does (Python's
:mod:`zlib` does not offer it). The shift depends on the length only: :func:`shift` computes it
once (tens of microseconds, about 25 multiplications for a few MiB), :func:`combine` then costs
one multiplication.

The journal uses it to checksum a large record without reading its body again once the record's
SQN is known: the body's part of the CRC is computed in the writing caller's thread, the SQN's
part by the journal's writer (:func:`~inkpen.formats.journal.prepare_record`).
"""

from __future__ import annotations

import zlib

_POLY = 0xEDB88320
"""The CRC-32 polynomial, bit-reversed (the least significant bit is the highest power)."""
_ONE = 1 << 31
"""The polynomial 1 (x**0) in the reversed representation."""


def _multiply(a: int, b: int) -> int:
    """``a * b`` modulo the CRC polynomial (both reversed, as zlib's ``multmodp``)."""
    product = 0
    mask = _ONE
    while True:
        if a & mask:
            product ^= b
            if not a & (mask - 1):
                return product
        mask >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


def _powers() -> tuple[int, ...]:
    """``x**(2**k)`` modulo the polynomial for k in 0..31 (x**(2**k) cycles with period 32)."""
    power = _ONE >> 1  # x
    out = [power]
    for _ in range(31):
        power = _multiply(power, power)
        out.append(power)
    return tuple(out)


_X_TO_2_TO = _powers()


def shift(length: int) -> int:
    """``x**(8 * length)`` modulo the polynomial: what shifts a CRC through ``length`` bytes."""
    if length < 0:
        raise ValueError(f"a length is not negative, got {length}")
    product = _ONE
    k = 3  # one byte is eight bits: x**(8 * length) = x**(length * 2**3)
    while length:
        if length & 1:
            product = _multiply(_X_TO_2_TO[k & 31], product)
        length >>= 1
        k += 1
    return product


def combine(first: int, second: int, second_shift: int) -> int:
    """``crc32(a + b)`` from ``first = crc32(a)``, ``second = crc32(b)`` and
    ``second_shift = shift(len(b))``."""
    return _multiply(second_shift, first) ^ second


def crc32_combine(first: int, second: int, second_length: int) -> int:
    """``crc32(a + b)`` from ``crc32(a)``, ``crc32(b)`` and ``len(b)`` (zlib's
    ``crc32_combine``)."""
    return combine(first, second, shift(second_length))


def crc32_of(*pieces: bytes | memoryview) -> int:
    """``crc32`` of the pieces joined, computed piece by piece (nothing is joined)."""
    crc = 0
    for piece in pieces:
        crc = zlib.crc32(piece, crc)
    return crc
