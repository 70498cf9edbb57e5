"""Ledger keys: round trips, byte order equals tuple order, range helpers, limits, ledger values."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import inkpen.formats.keys as keys_module
from inkpen.formats.keys import (
    ACTIVE,
    MAX_KEY_BYTES,
    TOMBSTONE,
    LedgerKey,
    LedgerValue,
    Tag,
    bucket_prefix,
    content_hash,
    decode_key,
    index_key,
    index_range,
    is_live,
    key_range,
    object_key,
    prefix_end,
)

# Small alphabets make prefixes, embedded NULs and 0xFF bytes common.
tiny = st.lists(st.sampled_from([0x00, 0x01, 0x61, 0xFF]), max_size=4).map(bytes)
any_bytes = st.binary(max_size=40)
object_tags = st.sampled_from([Tag.OBJECT, Tag.HEAD])


def as_tuple(decoded: LedgerKey) -> tuple[Any, ...]:
    if decoded.tag is Tag.INDEX:
        return (decoded.tag, decoded.bucket, decoded.key, decoded.subkey, decoded.object_key)
    return (decoded.tag, decoded.bucket, decoded.key, decoded.subkey)


def encode(parts: tuple[Any, ...]) -> bytes:
    if parts[0] is Tag.INDEX:
        return index_key(*parts[1:])
    return object_key(parts[1], parts[2], parts[3], tag=parts[0])


key_tuples = st.one_of(
    st.tuples(object_tags, tiny, tiny, tiny),
    st.tuples(st.just(Tag.INDEX), tiny, tiny, tiny, tiny),
)


@given(object_tags, any_bytes, any_bytes, any_bytes)
def test_object_key_round_trips(tag: Tag, bucket: bytes, key: bytes, subkey: bytes) -> None:
    decoded = decode_key(object_key(bucket, key, subkey, tag=tag))
    assert decoded == LedgerKey(tag, bucket, key, subkey, b"")


@given(any_bytes, any_bytes, any_bytes, any_bytes)
def test_index_key_round_trips(bucket: bytes, field: bytes, term: bytes, target: bytes) -> None:
    decoded = decode_key(index_key(bucket, field, term, target))
    assert decoded == LedgerKey(Tag.INDEX, bucket, field, term, target)


@given(st.lists(key_tuples, max_size=40))
def test_byte_order_is_tuple_order(tuples: list[tuple[Any, ...]]) -> None:
    unique = sorted(set(tuples))
    encoded = sorted({encode(parts) for parts in unique})
    assert len(encoded) == len(unique)
    assert [as_tuple(decode_key(k)) for k in encoded] == unique


def test_prefixes_and_nuls_sort_as_tuples() -> None:
    cases = [b"", b"\x00", b"\x00\x00", b"\x00\xff", b"\x01", b"a", b"a\x00", b"a\x00b", b"ab"]
    encoded = [object_key(b"b", case) for case in cases]
    assert encoded == sorted(encoded)
    assert object_key(b"a", b"\xff") < object_key(b"a\x00", b"")


def test_keys_at_the_limit_round_trip_and_longer_are_refused() -> None:
    big = bytes(range(256)) * (MAX_KEY_BYTES // 256)
    assert len(big) == MAX_KEY_BYTES
    assert decode_key(object_key(big, big, big)) == LedgerKey(Tag.OBJECT, big, big, big)
    assert decode_key(index_key(big, big, big, big)).object_key == big
    with pytest.raises(ValueError, match="limit"):
        object_key(b"b", big + b"x")
    with pytest.raises(ValueError, match="limit"):
        index_key(b"b", b"f", big + b"x", b"k")


def test_bad_components_are_refused_clearly() -> None:
    with pytest.raises(TypeError, match="bucket must be bytes"):
        object_key("users", b"k")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="index_key"):
        object_key(b"b", b"k", tag=Tag.INDEX)
    with pytest.raises(ValueError, match="not a ledger key tag"):
        object_key(b"b", b"k", tag=0x20)  # type: ignore[arg-type]


@given(st.binary(max_size=30))
def test_decode_rejects_or_is_canonical(data: bytes) -> None:
    try:
        decoded = decode_key(data)
    except ValueError:
        return
    assert encode(as_tuple(decoded)) == data


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"z\x00\x00\x00\x00\x00\x00",
        b"ob\x00\x00k\x00\x00",
        b"ob\x00\x00k\x00\x00\x00\x00x",
        b"ob\x00a\x00\x00k\x00\x00\x00\x00",
    ],
)
def test_decode_rejects_malformed(bad: bytes) -> None:
    with pytest.raises(ValueError):
        decode_key(bad)


@given(tiny, st.binary(max_size=6))
def test_prefix_end_bounds_exactly_the_prefixed_strings(prefix: bytes, other: bytes) -> None:
    prefix = b"o" + prefix
    end = prefix_end(prefix)
    assert (prefix <= other < end) == other.startswith(prefix)
    assert (prefix <= prefix + other < end) is True


def test_prefix_end_of_all_ff_is_refused() -> None:
    with pytest.raises(ValueError):
        prefix_end(b"\xff\xff")
    assert prefix_end(b"a\xff") == b"b"


@given(
    st.lists(st.tuples(object_tags, tiny, tiny, tiny), max_size=30),
    st.lists(st.tuples(tiny, tiny, tiny, tiny), max_size=10),
    object_tags,
    tiny,
    st.none() | tiny,
    st.none() | tiny,
)
def test_key_range_covers_exactly_the_intended_keys(
    objects: list[tuple[Any, ...]],
    indexes: list[tuple[Any, ...]],
    tag: Tag,
    bucket: bytes,
    start: bytes | None,
    end: bytes | None,
) -> None:
    population = {encode(parts): parts for parts in objects}
    population.update({encode((Tag.INDEX, *parts)): (Tag.INDEX, *parts) for parts in indexes})
    lo, hi = key_range(tag, bucket, start, end)
    got = {parts for enc, parts in population.items() if lo <= enc < hi}
    want = {
        parts
        for parts in population.values()
        if parts[0] is tag
        and parts[1] == bucket
        and (start is None or start <= parts[2])
        and (end is None or parts[2] <= end)
    }
    assert got == want
    prefix = bucket_prefix(tag, bucket)
    assert all(enc.startswith(prefix) for enc, parts in population.items() if parts in want)


@given(
    st.lists(st.tuples(tiny, tiny, tiny, tiny), max_size=30),
    st.lists(st.tuples(object_tags, tiny, tiny, tiny), max_size=10),
    tiny,
    tiny,
    st.none() | tiny,
    st.none() | tiny,
)
def test_index_range_covers_exactly_the_intended_terms(
    indexes: list[tuple[Any, ...]],
    objects: list[tuple[Any, ...]],
    bucket: bytes,
    field: bytes,
    start: bytes | None,
    end: bytes | None,
) -> None:
    population = {encode((Tag.INDEX, *parts)): parts for parts in indexes}
    population.update({encode(parts): parts for parts in objects})
    lo, hi = index_range(bucket, field, start, end)
    got = {parts for enc, parts in population.items() if lo <= enc < hi}
    want = {
        parts
        for parts in indexes
        if parts[0] == bucket
        and parts[1] == field
        and (start is None or start <= parts[2])
        and (end is None or parts[2] <= end)
    }
    assert got == want


def test_ledger_value_is_a_cheap_tuple_and_liveness_follows_status_and_expiry() -> None:
    live = LedgerValue(
        sqn=5, status=ACTIVE, expiry_ms=None, content_hash=1, size=3, last_modified_ms=10
    )
    assert tuple(live) == (5, ACTIVE, None, 1, 3, 10)
    assert is_live(live, now_ms=10**15)
    assert not is_live(live._replace(status=TOMBSTONE), now_ms=0)
    expiring = live._replace(expiry_ms=1000)
    assert is_live(expiring, now_ms=999)
    assert not is_live(expiring, now_ms=1000)


@settings(max_examples=50)
@given(st.binary(max_size=200))
def test_content_hash_is_a_stable_64_bit_blake2b(value: bytes) -> None:
    expected = int.from_bytes(hashlib.blake2b(value, digest_size=8).digest(), "big")
    assert content_hash(value) == expected
    assert 0 <= content_hash(value) < 2**64


def test_content_hash_known_values() -> None:
    # Pinned: content hashes are stored in SSTs, so the algorithm must never drift.
    assert content_hash(b"") == 0xE4A6A0577479B2B4
    assert content_hash(b"inkpen") == 0x27376BF91C2D529E


def test_key_prefix_covers_exactly_the_keys_starting_with_it() -> None:
    keys = [b"", b"a", b"ab", b"ab\x00", b"abc", b"abd", b"ac", b"b", b"a\x00b"]
    encoded = {k: keys_module.object_key(b"bucket", k) for k in keys}
    lo = keys_module.key_prefix(keys_module.Tag.OBJECT, b"bucket", b"ab")
    hi = keys_module.prefix_end(lo)
    inside = {k for k, e in encoded.items() if lo <= e < hi}
    assert inside == {k for k in keys if k.startswith(b"ab")}
