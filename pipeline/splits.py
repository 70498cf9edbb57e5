"""Splitting a read's key ranges into partitions of about equal size, from the manifest alone.

The driver plans partitions without opening a single file: every SST descriptor in the manifest
gives a key interval ``[first_key, last_key]`` and a size, and a :class:`KeyScale` maps the keys
between them to ``[0, 1]`` and back. Each file's size is taken as spread evenly over that scale.
Where a file meets a scan range, its share of the range is cut into *pieces* at evenly spaced
points of the scale, each weighing its part of the file's size; the pieces of all files,
overlapping or not, are sorted by key and walked in order, and a partition boundary is placed at
a piece's key whenever the partition so far holds its share of the total.

Correctness does not depend on the estimate. Boundaries are arbitrary byte strings, and the
partitions are the scan ranges cut at those boundaries, so they are contiguous, disjoint and
cover every scan range exactly: each object key falls in exactly one partition, which reads the
newest version of it from every source (memory, L0, levels). Only balance depends on how evenly
keys are spread between the files' first and last keys; skewed keys give uneven partitions.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from fractions import Fraction

from inkpen.manifest.model import SstDescriptor

from .options import MAX_PARTITIONS
from .ranges import KeyRange

PIECES_PER_PARTITION = 16
"""Pieces each partition is cut from, on average: the grain of the balance."""
MAX_PIECES_PER_FILE = 1024
_WIDTH = 24
"""Bytes after the common prefix that a scale reads as a number: enough to reach past a bucket
name into the key (bytes equal in both ends count for nothing)."""

Piece = tuple[bytes, float]


class KeyScale:
    """Positions in ``[0, 1]`` for the keys from ``low`` to ``high``, and keys for positions.

    After the common prefix of ``low`` and ``high``, the next :data:`_WIDTH` bytes (zero-padded)
    are read as digits of a mixed-radix number: position ``i`` counts from the smaller of the
    two ends' bytes there, in steps of one, up to the larger (a position where both agree counts
    for nothing; a key's byte outside that span counts as the nearer end). So decimal keys
    scale as decimal numbers (``key-0000`` to ``key-9999`` has ``key-1249`` at an eighth, not a
    byte value no key has) and arbitrary bytes as base-256 ones.
    """

    __slots__ = ("_bases", "_prefix", "_radixes", "_span", "_start", "high", "low")

    def __init__(self, low: bytes, high: bytes) -> None:
        self.low, self.high = low, high
        common = 0
        limit = min(len(low), len(high))
        while common < limit and low[common] == high[common]:
            common += 1
        self._prefix = low[:common]
        a, b = self._digits(low), self._digits(high)
        self._bases = [min(x, y) for x, y in zip(a, b, strict=True)]
        self._radixes = [abs(x - y) + 1 for x, y in zip(a, b, strict=True)]
        self._start = self._number(a)
        self._span = self._number(b) - self._start

    def _digits(self, key: bytes) -> bytes:
        start = len(self._prefix)
        return key[start : start + _WIDTH].ljust(_WIDTH, b"\0")

    def _number(self, digits: bytes) -> int:
        # A digit outside its span counts as the nearer end, and so do all digits after it
        # (the key then lies beyond every key with that end digit): the number keeps key order.
        value = 0
        clamp: int | None = None  # after a clamped digit: 0 (below) or radix - 1 (above)
        for digit, base, radix in zip(digits, self._bases, self._radixes, strict=True):
            if clamp is not None:
                step = 0 if clamp == 0 else radix - 1
            elif digit < base:
                step, clamp = 0, 0
            elif digit > base + radix - 1:
                step, clamp = radix - 1, 1
            else:
                step = digit - base
            value = value * radix + step
        return value

    def position(self, key: bytes) -> float:
        """Where ``key`` lies: 0 at or below ``low``, 1 at or above ``high``."""
        if key <= self.low or self._span <= 0:
            return 0.0
        if key >= self.high:
            return 1.0
        return (self._number(self._digits(key)) - self._start) / self._span

    def key_at(self, position: float) -> bytes:
        """A key at ``position`` (in ``[0, 1]``): the prefix and the scaled digits."""
        if self._span <= 0:
            return self.low
        fraction = Fraction(min(max(position, 0.0), 1.0))  # exact: a float product could
        point = self._start + int(fraction * self._span)  # round past the end of the span
        digits = bytearray(_WIDTH)
        for i in reversed(range(_WIDTH)):
            point, digit = divmod(point, self._radixes[i])
            digits[i] = self._bases[i] + digit
        return self._prefix + bytes(digits)


def _shares(ranges: Sequence[KeyRange], sst: SstDescriptor) -> list[tuple[float, float]]:
    """For each range ``sst`` meets, the span of its scale inside that range."""
    scale = KeyScale(sst.first_key, sst.last_key)
    found = []
    for lo, hi in ranges:
        if sst.first_key < hi and sst.last_key >= lo:
            start, stop = scale.position(lo), scale.position(hi)
            found.append((start, max(stop, start)))
    return found


def touched_bytes(ranges: Sequence[KeyRange], ssts: Sequence[SstDescriptor]) -> float:
    """The bytes of SSTs that lie in ``ranges``, each file's size spread over its scale (a file
    whose first and last key are one key counts whole)."""
    total = 0.0
    for sst in ssts:
        spans = _shares(ranges, sst)
        if spans:
            share = sum(stop - start for start, stop in spans)
            total += sst.size * (share if sst.first_key < sst.last_key else 1.0)
    return total


def partition_count(
    ranges: Sequence[KeyRange],
    ssts: Sequence[SstDescriptor],
    *,
    journal_bytes: int,
    partition_bytes: int,
    values: bool,
) -> int:
    """How many partitions a read of ``ranges`` wants: its estimated bytes / ``partition_bytes``.

    The estimate is the SST bytes in the ranges, plus (when values are read) the same share of
    the journal files' size.
    """
    estimate = estimated_bytes(ranges, ssts, journal_bytes=journal_bytes, values=values)
    return max(1, min(MAX_PARTITIONS, math.ceil(estimate / partition_bytes)))


def estimated_bytes(
    ranges: Sequence[KeyRange],
    ssts: Sequence[SstDescriptor],
    *,
    journal_bytes: int,
    values: bool,
) -> float:
    """The bytes a read of ``ranges`` reads, as :func:`partition_count` estimates them."""
    touched = touched_bytes(ranges, ssts)
    if not values:
        return touched
    everything = sum(sst.size for sst in ssts)
    return touched + journal_bytes * (touched / everything if everything else 1.0)


def _pieces(ranges: Sequence[KeyRange], ssts: Sequence[SstDescriptor], count: int) -> list[Piece]:
    """(key, weight) pieces of the files' parts inside ``ranges``, sorted by key."""
    parts: list[tuple[SstDescriptor, float, float, float]] = []
    for sst in ssts:
        for start, stop in _shares(ranges, sst):
            weight = sst.size * (stop - start if sst.first_key < sst.last_key else 1.0)
            parts.append((sst, start, stop, weight))
    total = sum(weight for *_, weight in parts)
    pieces: list[Piece] = []
    if not total:
        return pieces
    for sst, start, stop, weight in parts:
        wanted = math.ceil(PIECES_PER_PARTITION * count * weight / total - 1e-6)
        n = max(1, min(MAX_PIECES_PER_FILE, wanted))
        scale = KeyScale(sst.first_key, sst.last_key)
        step = (stop - start) / n
        pieces.extend((scale.key_at(start + j * step), weight / n) for j in range(n))
    pieces.sort(key=lambda piece: piece[0])
    return pieces


def _by_range(ranges: Sequence[KeyRange], count: int) -> list[tuple[KeyRange, ...]]:
    """Without size information: whole ranges, grouped into at most ``count`` partitions."""
    groups = min(count, len(ranges))
    size = math.ceil(len(ranges) / groups)
    return [tuple(ranges[i : i + size]) for i in range(0, len(ranges), size)]


def split_ranges(
    ranges: Sequence[KeyRange], ssts: Sequence[SstDescriptor], count: int
) -> list[tuple[KeyRange, ...]]:
    """Cut sorted, disjoint ``ranges`` into about ``count`` partitions of about equal size.

    Each partition is a tuple of sorted, disjoint ranges; together they cover ``ranges``
    exactly. No ranges give one empty partition (Spark runs at least one task).
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    if not ranges:
        return [()]
    starts = [lo for lo, _ in ranges]
    pieces = [p for p in _pieces(ranges, ssts, count) if _inside(p[0], ranges, starts)]
    total = sum(weight for _, weight in pieces)
    if count == 1 or not total:
        return _by_range(ranges, count)
    target = total / count
    partitions: list[tuple[KeyRange, ...]] = []
    current: list[KeyRange] = []
    held = 0.0
    at = 0
    for lo, hi in ranges:
        start = lo
        while at < len(pieces) and pieces[at][0] < hi:
            key, weight = pieces[at]
            at += 1
            if key < lo:
                continue
            if held >= target * (1 - 1e-9) and key > start:  # float sums fall just short
                current.append((start, key))
                partitions.append(tuple(current))
                current, start, held = [], key, 0.0
            held += weight
        current.append((start, hi))
    partitions.append(tuple(current))
    return partitions


def _inside(key: bytes, ranges: Sequence[KeyRange], starts: Sequence[bytes]) -> bool:
    at = bisect_right(starts, key) - 1
    return at >= 0 and key < ranges[at][1]
