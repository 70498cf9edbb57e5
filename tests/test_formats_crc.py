"""The formats' checksums: CRC-32 and CRC-32C against known values, and the CRC of two pieces
joined, combined from theirs, against the checksum of the joined bytes."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inkpen.formats.crc import CRC32, CRC32C, Crc

CRCS = [CRC32, CRC32C]


def test_the_checksums_are_the_standard_ones() -> None:
    # The check values of the CRC catalogue: the CRC of the nine ASCII digits.
    assert CRC32.of(b"123456789") == 0xCBF43926
    assert CRC32C.of(b"123456789") == 0xE3069283
    assert CRC32C.of(b"1234", memoryview(b"56789")) == 0xE3069283
    assert CRC32C.checksum(b"56789", CRC32C.checksum(b"1234", 0)) == 0xE3069283


@pytest.mark.parametrize("crc", CRCS, ids=repr)
@given(first=st.binary(max_size=300), second=st.binary(max_size=3000))
def test_combining_two_crcs_is_the_crc_of_the_joined_bytes(
    crc: Crc, first: bytes, second: bytes
) -> None:
    joined = crc.of(first + second)
    assert crc.combine(crc.of(first), crc.of(second), crc.shift(len(second))) == joined
    assert crc.of(first, memoryview(second)) == joined


@pytest.mark.parametrize("crc", CRCS, ids=repr)
@pytest.mark.parametrize("length", [0, 1, 7, 8, 255, 4096, (4 << 20) + 17, (64 << 20) - 1])
def test_a_shift_moves_a_crc_through_that_many_bytes(crc: Crc, length: int) -> None:
    head = b"inkpen journal record head"
    zeros = bytes(length)
    assert crc.combine(crc.of(head), crc.of(zeros), crc.shift(length)) == crc.of(head + zeros)


@pytest.mark.parametrize("crc", CRCS, ids=repr)
def test_shifts_add_up_for_lengths_of_any_size(crc: Crc) -> None:
    """Moving a CRC through ``a`` bytes and then ``b`` is moving it through ``a + b``, at every
    size: past 512 MiB too, where x**(2**32) is not x for CRC-32C (a period of 32 in the
    powers of x, as zlib may assume for CRC-32, would give wrong shifts there)."""
    rng = random.Random(1)
    lengths = [0, 1, 255, 256, 65_535, 2**29 - 1, 2**29, 2**32 - 1, 2**32, 2**40 + 12_345]
    lengths += [rng.randrange(2**45) for _ in range(200)]
    for a, b in itertools.pairwise(lengths):
        assert crc.combine(crc.shift(a), 0, crc.shift(b)) == crc.shift(a + b)
    with pytest.raises(ValueError, match="a length is in"):
        crc.shift(-1)
    with pytest.raises(ValueError, match="a length is in"):
        crc.shift(2**60)
