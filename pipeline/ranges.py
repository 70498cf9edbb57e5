"""The key ranges a read scans, from its options (``bucket``, ``start``, ``end``, ``prefix``).

A read scans encoded ledger-key ranges ``[lo, hi)`` of OBJECT keys (see
:mod:`inkpen.formats.keys`): the whole OBJECT tag when nothing restricts it, else one range per
bucket it may touch, narrowed by the key bounds and prefixes. The byte order of encoded keys is
the order of (bucket, key) with each compared as unsigned bytes, which is Spark's order for
binary values and for strings (UTF-8 byte order), so a range is exactly the option's set of rows.

A :class:`Scope` is a frozen value made once per DataFrame from its options; nothing narrows it
later (Spark filters are not pushed down: see :mod:`.source` for why).
"""

from __future__ import annotations

from dataclasses import dataclass

from inkpen.formats.keys import (
    Tag,
    bucket_prefix,
    key_prefix,
    key_range,
    prefix_end,
)

from .options import ReadOptions

KeyRange = tuple[bytes, bytes]
"""Encoded ledger keys ``lo <= key < hi``."""

OBJECT_TAG = bytes([Tag.OBJECT])


@dataclass(frozen=True, slots=True)
class Bound:
    """One end of a key interval: the key and whether it is included."""

    key: bytes
    inclusive: bool


@dataclass(frozen=True, slots=True)
class Scope:
    """The set of objects a read covers: buckets, and key bounds that apply within each."""

    buckets: frozenset[bytes] | None = None
    """None: every bucket."""
    lows: tuple[Bound, ...] = ()
    highs: tuple[Bound, ...] = ()
    prefixes: tuple[bytes, ...] = ()

    @classmethod
    def of(cls, options: ReadOptions) -> Scope:
        return cls(
            buckets=None if options.bucket is None else frozenset({options.bucket}),
            lows=() if options.start is None else (Bound(options.start, True),),
            highs=() if options.end is None else (Bound(options.end, True),),
            prefixes=() if options.prefix is None else (options.prefix,),
        )

    def ranges(self) -> list[KeyRange]:
        """The encoded ranges, sorted and disjoint (empty when nothing can match)."""
        if self.buckets is None:
            return [(OBJECT_TAG, prefix_end(OBJECT_TAG))]
        found = []
        for bucket in sorted(self.buckets):
            lo = bucket_prefix(Tag.OBJECT, bucket)
            hi = prefix_end(lo)
            for low in self.lows:
                if low.inclusive:
                    lo = max(lo, key_range(Tag.OBJECT, bucket, low.key, None)[0])
                else:
                    lo = max(lo, key_range(Tag.OBJECT, bucket, None, low.key)[1])
            for high in self.highs:
                if high.inclusive:
                    hi = min(hi, key_range(Tag.OBJECT, bucket, None, high.key)[1])
                else:
                    hi = min(hi, key_range(Tag.OBJECT, bucket, high.key, None)[0])
            for prefix in self.prefixes:
                start = key_prefix(Tag.OBJECT, bucket, prefix)
                lo, hi = max(lo, start), min(hi, prefix_end(start))
            if lo < hi:
                found.append((lo, hi))
        return found
