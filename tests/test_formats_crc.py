"""CRC-32 arithmetic: the CRC of two pieces joined equals zlib's CRC of the joined bytes."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inkpen.formats.crc import combine, crc32_combine, crc32_of, shift


@given(st.binary(max_size=300), st.binary(max_size=3000))
def test_combining_two_crcs_is_the_crc_of_the_joined_bytes(first: bytes, second: bytes) -> None:
    joined = zlib.crc32(first + second)
    assert crc32_combine(zlib.crc32(first), zlib.crc32(second), len(second)) == joined
    assert combine(zlib.crc32(first), zlib.crc32(second), shift(len(second))) == joined
    assert crc32_of(first, memoryview(second)) == joined


@pytest.mark.parametrize("length", [0, 1, 7, 8, 255, 4096, (4 << 20) + 17, (64 << 20) - 1])
def test_a_shift_is_the_crc_of_zero_bytes_that_follow(length: int) -> None:
    # crc32(a + zeros) = combine(crc32(a), crc32(zeros), shift(len)) for any length: check it
    # against zlib over real zero bytes, for lengths from none to tens of MiB.
    head = b"inkpen journal record head"
    zeros = bytes(length)
    assert combine(zlib.crc32(head), zlib.crc32(zeros), shift(length)) == zlib.crc32(head + zeros)


def test_a_negative_length_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        shift(-1)
