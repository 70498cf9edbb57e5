"""The manifest codec: round trips, a version check, and damage that never decodes."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inkpen.errors import CorruptionError
from inkpen.formats.journal import JournalEntry, Kind, build_journal
from inkpen.formats.keys import LedgerValue
from inkpen.formats.manifest_codec import FORMAT_VERSION, MAGIC, decode_manifest, encode_manifest
from inkpen.formats.sst import build_sst

NAME = "manifest/00000000000000000042.manifest"

leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.binary(max_size=30)
    | (st.text(max_size=20))
)
documents = st.dictionaries(
    st.text(max_size=12),
    st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=12,
    ),
    max_size=8,
)

DOCUMENT = {
    "version": 1,
    "writer_epoch": 7,
    "journal": {"files": [["journal/compacted/a.jnl", 1, 100]], "rolled_through": 12},
    "levels": [[{"name": "ledger/x.sst", "first": b"o\x00", "last": b"o\xff", "size": 4096}]],
    "persisted_sqn": 100,
    "checkpoints": [],
}
ENCODED = encode_manifest(DOCUMENT)


@settings(max_examples=200)
@given(documents)
def test_round_trip(document: dict[str, object]) -> None:
    assert decode_manifest(encode_manifest(document), NAME) == document


def test_layout_is_magic_version_length_payload_crc() -> None:
    magic, version, length = struct.unpack_from(">4sHI", ENCODED, 0)
    assert (magic, version) == (MAGIC, FORMAT_VERSION)
    assert len(ENCODED) == 10 + length + 4
    assert struct.unpack_from(">I", ENCODED, len(ENCODED) - 4)[0] == zlib.crc32(ENCODED[:-4])


@settings(max_examples=300)
@given(st.integers(0, len(ENCODED) - 1), st.integers(1, 255))
def test_any_flipped_byte_is_detected(offset: int, mask: int) -> None:
    damaged = bytearray(ENCODED)
    damaged[offset] ^= mask
    with pytest.raises(CorruptionError) as info:
        decode_manifest(bytes(damaged), NAME)
    assert info.value.object_name == NAME
    assert NAME in str(info.value)


def test_truncation_is_detected() -> None:
    for size in (0, 5, 13, len(ENCODED) - 1):
        with pytest.raises(CorruptionError):
            decode_manifest(ENCODED[:size], NAME)


def test_other_kinds_of_file_are_refused() -> None:
    sst, _ = build_sst([(b"k", LedgerValue(1, 0, None, 0, 0, 0))])
    journal = build_journal([JournalEntry(1, Kind.OBJECT, b"k", b"v", (), None, 0)], writer_epoch=1)
    for other in (sst, journal, build_journal([], writer_epoch=1)):
        with pytest.raises(CorruptionError, match=r"not an inkpen manifest|too short"):
            decode_manifest(other, NAME)


def test_a_newer_version_asks_for_an_upgrade() -> None:
    newer = encode_manifest(DOCUMENT, version=FORMAT_VERSION + 1)
    with pytest.raises(CorruptionError, match="upgrade inkpen") as info:
        decode_manifest(newer, NAME)
    assert info.value.offset == 4
