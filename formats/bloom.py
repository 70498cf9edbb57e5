"""Bloom filters over ledger keys: built once per SST, probed on every point lookup.

Hashing is stable across processes and machines: one 64-bit BLAKE2b digest of the key gives
two 32-bit halves ``h1`` (high) and ``h2`` (low), and the ``k`` probe positions follow by enhanced
double hashing (``x = h1 mod m``, ``y = h2 mod m``; after probe ``i`` (from 1), ``x += y``, then
``y += i``, both mod ``m``). ``k = round(bits_per_key * ln 2)``, at least 1.

Serialized form (big-endian)::

    offset  size  field
    0       1     format version (u8), currently 1
    1       1     probe count k (u8)
    2       8     bit count m (u64), a positive multiple of 8
    10      m/8   the bit array; bit ``p`` is ``byte[p >> 3] & (1 << (p & 7))``
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterable

DEFAULT_BITS_PER_KEY = 10
"""Bits per key at which the false-positive rate is just under 1%."""

FORMAT_VERSION = 1
_HEADER = struct.Struct(">BBQ")
_HALVES = struct.Struct(">II")
_MIN_BITS = 64
_MAX_PROBES = 64
_USUAL_PROBES = 7


def bloom_hash(key: bytes) -> int:
    """The 64-bit hash a filter probes with; compute once to probe several filters."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def _set_seven(bits: bytearray, hashes: list[int], nbits: int) -> None:
    """Set the probe bits of every hash for k = 7 (the default): the general loop unrolled.

    Building filters runs for every key of every SST written, so this is worth the repetition:
    the positions are exactly those of the loop in :meth:`BloomFilter.from_hashes`.
    """
    for value in hashes:
        x = (value >> 32) % nbits
        y = (value & 0xFFFFFFFF) % nbits
        bits[x >> 3] |= 1 << (x & 7)
        x = (x + y) % nbits
        y = (y + 1) % nbits
        bits[x >> 3] |= 1 << (x & 7)
        x = (x + y) % nbits
        y = (y + 2) % nbits
        bits[x >> 3] |= 1 << (x & 7)
        x = (x + y) % nbits
        y = (y + 3) % nbits
        bits[x >> 3] |= 1 << (x & 7)
        x = (x + y) % nbits
        y = (y + 4) % nbits
        bits[x >> 3] |= 1 << (x & 7)
        x = (x + y) % nbits
        y = (y + 5) % nbits
        bits[x >> 3] |= 1 << (x & 7)
        x = (x + y) % nbits
        y = (y + 6) % nbits
        bits[x >> 3] |= 1 << (x & 7)


def _probe_count(bits_per_key: int) -> int:
    return max(1, min(_MAX_PROBES, round(bits_per_key * math.log(2))))


class BloomFilter:
    """Answers "may this key be in the set?": never a false "no", rarely a false "yes".

    Immutable once built, so it may be shared between threads.
    """

    __slots__ = ("_bits", "_nbits", "_probes")

    def __init__(self, bits: bytes, probes: int) -> None:
        self._bits = bits
        self._nbits = len(bits) * 8
        self._probes = probes

    @classmethod
    def build(cls, keys: Iterable[bytes], bits_per_key: int = DEFAULT_BITS_PER_KEY) -> BloomFilter:
        """A filter holding every key in ``keys``."""
        return cls.from_hashes([bloom_hash(key) for key in keys], bits_per_key)

    @classmethod
    def from_hashes(
        cls, hashes: Iterable[int], bits_per_key: int = DEFAULT_BITS_PER_KEY
    ) -> BloomFilter:
        """A filter holding the keys whose :func:`bloom_hash` values are ``hashes``."""
        if not isinstance(bits_per_key, int) or not 1 <= bits_per_key <= 255:
            raise ValueError(f"bits_per_key must be an int in [1, 255], got {bits_per_key!r}")
        hashes = list(hashes)
        nbits = max(_MIN_BITS, -(-len(hashes) * bits_per_key // 8) * 8)
        probes = _probe_count(bits_per_key)
        bits = bytearray(nbits // 8)
        if probes == _USUAL_PROBES:
            _set_seven(bits, hashes, nbits)
            return cls(bytes(bits), probes)
        for value in hashes:
            x = (value >> 32) % nbits
            y = (value & 0xFFFFFFFF) % nbits
            for i in range(1, probes + 1):
                bits[x >> 3] |= 1 << (x & 7)
                x += y
                if x >= nbits:
                    x -= nbits
                y += i
                if y >= nbits:
                    y -= nbits
        return cls(bytes(bits), probes)

    @property
    def probes(self) -> int:
        """Number of bits tested per key (k)."""
        return self._probes

    @property
    def bit_count(self) -> int:
        """Size of the bit array (m)."""
        return self._nbits

    def may_contain(self, key: bytes) -> bool:
        """False if ``key`` is certainly absent; True if it may be present."""
        high, low = _HALVES.unpack(hashlib.blake2b(key, digest_size=8).digest())
        bits = self._bits
        nbits = self._nbits
        x = high % nbits
        y = low % nbits
        for i in range(1, self._probes + 1):
            if not bits[x >> 3] & (1 << (x & 7)):
                return False
            x += y
            if x >= nbits:
                x -= nbits
            y += i
            if y >= nbits:
                y -= nbits
        return True

    def may_contain_hash(self, value: int) -> bool:
        """:meth:`may_contain` for a key whose :func:`bloom_hash` is ``value``.

        Every point lookup asks this of a file in each level it visits, so for k = 7 (the
        default) the probes are written out, as :func:`_set_seven` sets them."""
        bits = self._bits
        nbits = self._nbits
        x = (value >> 32) % nbits
        y = (value & 0xFFFFFFFF) % nbits
        if self._probes == _USUAL_PROBES:
            return bool(
                bits[x >> 3] & (1 << (x & 7))
                and bits[(x := (x + y) % nbits) >> 3] & (1 << (x & 7))
                and bits[(x := (x + (y := (y + 1) % nbits)) % nbits) >> 3] & (1 << (x & 7))
                and bits[(x := (x + (y := (y + 2) % nbits)) % nbits) >> 3] & (1 << (x & 7))
                and bits[(x := (x + (y := (y + 3) % nbits)) % nbits) >> 3] & (1 << (x & 7))
                and bits[(x := (x + (y := (y + 4) % nbits)) % nbits) >> 3] & (1 << (x & 7))
                and bits[(x := (x + (y := (y + 5) % nbits)) % nbits) >> 3] & (1 << (x & 7))
            )
        for i in range(1, self._probes + 1):
            if not bits[x >> 3] & (1 << (x & 7)):
                return False
            x += y
            if x >= nbits:
                x -= nbits
            y += i
            if y >= nbits:
                y -= nbits
        return True

    def to_bytes(self) -> bytes:
        """The serialized filter (see the module docstring)."""
        return _HEADER.pack(FORMAT_VERSION, self._probes, self._nbits) + self._bits

    @classmethod
    def from_bytes(cls, data: bytes) -> BloomFilter:
        """Parse a serialized filter; ``ValueError`` if the bytes are not one."""
        if len(data) < _HEADER.size:
            raise ValueError(f"a bloom filter is at least {_HEADER.size} bytes, got {len(data)}")
        version, probes, nbits = _HEADER.unpack_from(data, 0)
        if version != FORMAT_VERSION:
            raise ValueError(f"bloom filter format version {version} is not {FORMAT_VERSION}")
        if not 1 <= probes <= _MAX_PROBES:
            raise ValueError(f"bloom filter probe count {probes} is out of range")
        if nbits < _MIN_BITS or nbits % 8 or len(data) - _HEADER.size != nbits // 8:
            raise ValueError(
                f"bloom filter of {nbits} bits does not match its {len(data)}-byte encoding"
            )
        return cls(bytes(data[_HEADER.size :]), probes)
