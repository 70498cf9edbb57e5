"""The key ranges a read scans: from its options and from the filters Spark pushes down.

A read scans encoded ledger-key ranges ``[lo, hi)`` of OBJECT keys (see
:mod:`inkpen.formats.keys`): the whole OBJECT tag when nothing restricts it, else one range per
bucket it may touch, narrowed by the key bounds. A pushed filter is applied *exactly* by these
ranges (Spark does not evaluate it again), so only filters that ranges express exactly are
accepted:

- on ``bucket``: ``=``, ``<=>`` with a value, ``IN (...)``, ``IS NOT NULL``;
- on ``key``, once the buckets are a known finite set: ``=``, ``<``, ``<=``, ``>``, ``>=``,
  ``LIKE 'prefix%'`` (string keys), ``IS NOT NULL``;
- ``IS NOT NULL`` on any column (no column of a read is ever null).

Every other filter is handed back for Spark to evaluate. The byte order of encoded keys is the
order of (bucket, key) with each compared as unsigned bytes, which is Spark's order for binary
values and for strings (UTF-8 byte order), so a range is exactly the filter's set of rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

from inkpen.formats.keys import (
    MAX_KEY_BYTES,
    Tag,
    bucket_prefix,
    key_prefix,
    key_range,
    prefix_end,
)

from .options import KeyType, ReadOptions

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
        )

    def with_buckets(self, values: Iterable[bytes]) -> Scope:
        allowed = frozenset(values)
        return replace(self, buckets=allowed if self.buckets is None else self.buckets & allowed)

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


def _name_value(value: object, key_type: KeyType) -> bytes | None:
    """A filter's literal as bytes, when its type matches the column's and it can be a bucket
    or key at all; else None (the filter is then left to Spark)."""
    if key_type == "string":
        encoded = value.encode("utf-8") if isinstance(value, str) else None
    else:
        encoded = bytes(value) if isinstance(value, bytes | bytearray) else None
    if encoded is None or len(encoded) > MAX_KEY_BYTES:
        return None
    return encoded


def _column(filter_: Filter) -> str | None:
    attribute = getattr(filter_, "attribute", None)
    if not isinstance(attribute, tuple) or len(attribute) != 1:
        return None
    return str(attribute[0]).lower()


def _push_bucket(scope: Scope, filter_: Filter, key_type: KeyType) -> Scope | None:
    if isinstance(filter_, EqualTo | EqualNullSafe):
        value = _name_value(filter_.value, key_type)
        return None if value is None else scope.with_buckets([value])
    if isinstance(filter_, In):
        values = [_name_value(v, key_type) for v in filter_.value if v is not None]
        if any(v is None for v in values):
            return None
        return scope.with_buckets(v for v in values if v is not None)
    return None


def _push_key(scope: Scope, filter_: Filter, key_type: KeyType) -> Scope | None:
    if isinstance(filter_, StringStartsWith):
        if key_type != "string" or not isinstance(filter_.value, str):
            return None
        return replace(scope, prefixes=(*scope.prefixes, filter_.value.encode("utf-8")))
    if not isinstance(
        filter_,
        EqualTo | EqualNullSafe | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual,
    ):
        return None
    value = _name_value(filter_.value, key_type)
    if value is None:
        return None
    if isinstance(filter_, EqualTo | EqualNullSafe | GreaterThan | GreaterThanOrEqual):
        low = Bound(value, not isinstance(filter_, GreaterThan))
        scope = replace(scope, lows=(*scope.lows, low))
    if isinstance(filter_, EqualTo | EqualNullSafe | LessThan | LessThanOrEqual):
        high = Bound(value, not isinstance(filter_, LessThan))
        scope = replace(scope, highs=(*scope.highs, high))
    return scope


def push_filters(
    scope: Scope, filters: Sequence[Filter], key_type: KeyType
) -> tuple[Scope, list[Filter]]:
    """Narrow ``scope`` by the filters ranges express exactly; return it and the other filters
    (the very objects given, as Spark requires).

    Bucket filters go first, since key filters can only be pushed once the buckets are a known
    finite set.
    """
    pushed: set[int] = set()
    for filter_ in filters:
        if isinstance(filter_, IsNotNull):
            pushed.add(id(filter_))
        elif _column(filter_) == "bucket":
            narrowed = _push_bucket(scope, filter_, key_type)
            if narrowed is not None:
                scope = narrowed
                pushed.add(id(filter_))
    if scope.buckets is not None:
        for filter_ in filters:
            if id(filter_) in pushed or _column(filter_) != "key":
                continue
            narrowed = _push_key(scope, filter_, key_type)
            if narrowed is not None:
                scope = narrowed
                pushed.add(id(filter_))
    return scope, [f for f in filters if id(f) not in pushed]
