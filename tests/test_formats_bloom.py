"""Bloom filters: no false negatives, under 1% false positives at the default, stable bytes."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inkpen.formats.bloom import DEFAULT_BITS_PER_KEY, BloomFilter, bloom_hash


@given(st.sets(st.binary(max_size=24), max_size=200), st.integers(1, 20))
def test_no_false_negatives(keys: set[bytes], bits_per_key: int) -> None:
    bloom = BloomFilter.build(keys, bits_per_key)
    assert all(bloom.may_contain(key) for key in keys)
    assert all(bloom.may_contain_hash(bloom_hash(key)) for key in keys)


@given(st.sets(st.binary(max_size=24), max_size=100), st.integers(1, 20))
def test_serialization_round_trips(keys: set[bytes], bits_per_key: int) -> None:
    bloom = BloomFilter.build(keys, bits_per_key)
    again = BloomFilter.from_bytes(bloom.to_bytes())
    assert again.to_bytes() == bloom.to_bytes()
    assert again.probes == bloom.probes
    assert all(again.may_contain(key) for key in keys)


def test_false_positive_rate_at_the_default_is_under_one_percent() -> None:
    rng = random.Random(20240611)
    members = {rng.randbytes(16) for _ in range(100_000)}
    absent = [key for key in (rng.randbytes(16) for _ in range(100_000)) if key not in members]
    bloom = BloomFilter.build(members)
    assert all(bloom.may_contain(key) for key in members)
    rate = sum(map(bloom.may_contain, absent)) / len(absent)
    print(f"bloom false-positive rate at {DEFAULT_BITS_PER_KEY} bits/key: {rate:.4%}")
    assert bloom.probes == 7
    assert rate < 0.01


def test_empty_filter_contains_nothing() -> None:
    bloom = BloomFilter.build([])
    assert not bloom.may_contain(b"")
    assert not bloom.may_contain(b"anything")


def test_bytes_are_the_same_in_another_process() -> None:
    keys = [b"key-%d" % i for i in range(500)]
    here = BloomFilter.build(keys).to_bytes()
    script = (
        "import sys; from inkpen.formats.bloom import BloomFilter; "
        "sys.stdout.write(BloomFilter.build([b'key-%d' % i for i in range(500)]).to_bytes().hex())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    there = subprocess.run(
        [sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True
    ).stdout
    assert bytes.fromhex(there) == here


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x01\x07",
        b"\x02\x07" + (64).to_bytes(8, "big") + bytes(8),  # unknown version
        b"\x01\x00" + (64).to_bytes(8, "big") + bytes(8),  # no probes
        b"\x01\x07" + (64).to_bytes(8, "big") + bytes(7),  # bit array too short
        b"\x01\x07" + (60).to_bytes(8, "big") + bytes(8),  # bit count not a multiple of 8
    ],
)
def test_nonsense_bytes_are_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        BloomFilter.from_bytes(data)


@given(st.binary(max_size=40))
def test_arbitrary_bytes_parse_only_when_consistent(data: bytes) -> None:
    try:
        bloom = BloomFilter.from_bytes(data)
    except ValueError:
        return
    assert bloom.to_bytes() == data


@pytest.mark.parametrize("bits", [0, -1, 256, 2.5])
def test_bad_bits_per_key_is_refused(bits: object) -> None:
    with pytest.raises(ValueError, match="bits_per_key"):
        BloomFilter.build([b"a"], bits)  # type: ignore[arg-type]


@pytest.mark.parametrize("bits_per_key", [10, 4, 16])  # k = 7 (written out), 3, 11
def test_a_hash_probe_answers_as_a_key_probe(bits_per_key: int) -> None:
    members = [b"member-%d" % i for i in range(2000)]
    bloom = BloomFilter.build(members, bits_per_key)
    for key in [*members, *(b"absent-%d" % i for i in range(20_000))]:
        assert bloom.may_contain_hash(bloom_hash(key)) == bloom.may_contain(key)
    assert all(bloom.may_contain_hash(bloom_hash(key)) for key in members)
