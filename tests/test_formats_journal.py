"""Journal files: round trips on every read path, fencing segments, the read budget, damage."""

from __future__ import annotations

import os
import random
import struct
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inkpen.errors import CorruptionError
from inkpen.formats.journal import (
    EMPTY_JOURNAL_SIZE,
    HEADER_SIZE,
    JournalEntry,
    JournalHeader,
    JournalReader,
    Kind,
    build_journal,
    decode_journal,
    iter_journal,
    read_header,
)
from inkpen.formats.keys import MAX_KEY_BYTES, LedgerValue, index_key, object_key
from inkpen.formats.manifest_codec import encode_manifest
from inkpen.formats.sst import build_sst
from support.fetching import CountingFetch, memory_fetch

NAME = "journal/00000000000000000187.jnl"
U64 = st.integers(0, 2**64 - 1)
index_specs = st.lists(
    st.tuples(st.sampled_from([0, 1]), st.binary(max_size=20), st.binary(max_size=20)),
    max_size=4,
).map(tuple)
bodies = st.one_of(
    st.binary(max_size=600),
    st.integers(0, 3000).map(lambda n: b"ab" * n),  # compressible: stored snappy-compressed
)
raw_entries = st.lists(
    st.tuples(
        st.integers(1, 10**6),
        st.sampled_from(Kind),
        st.binary(max_size=40),
        bodies,
        index_specs,
        st.none() | U64,
        U64,
    ),
    max_size=40,
)


def to_entries(first_sqn: int, raws: list[tuple[Any, ...]]) -> list[JournalEntry]:
    entries = []
    sqn = first_sqn
    for gap, kind, key, body, specs, expiry, modified in raws:
        sqn += gap
        payload = body if kind is Kind.OBJECT else None
        entries.append(JournalEntry(sqn, kind, key, payload, specs, expiry, modified))
    return entries


def open_reader(data: bytes, **kw: Any) -> JournalReader:
    return JournalReader.open(NAME, len(data), lambda s, e: data[s:e], **kw)


@settings(max_examples=150)
@given(st.integers(0, 2**63), raw_entries, U64, st.integers(1, 5000))
def test_round_trip_on_every_read_path(
    first_sqn: int, raws: list[tuple[Any, ...]], epoch: int, chunk_size: int
) -> None:
    entries = to_entries(first_sqn, raws)
    data = build_journal(entries, writer_epoch=epoch)
    header, decoded = decode_journal(data, NAME)
    assert decoded == entries
    assert list(iter_journal(data, NAME)) == entries
    assert header == read_header(data[:HEADER_SIZE], NAME)
    assert header.writer_epoch == epoch
    assert header.entry_count == len(entries)
    assert header.size == len(data)
    if entries:
        assert (header.min_sqn, header.max_sqn) == (entries[0].sqn, entries[-1].sqn)
    reader = open_reader(data)
    for entry in entries:
        assert reader.get(entry.sqn, entry.kind, entry.ledger_key) == entry
        other = Kind.TOMBSTONE if entry.kind is Kind.OBJECT else Kind.OBJECT
        assert reader.get(entry.sqn, other, entry.ledger_key) is None
        assert reader.get(entry.sqn, entry.kind, entry.ledger_key + b"?") is None
    assert list(reader.iter_entries(chunk_size)) == entries
    locations = reader.locations()
    assert [reader.read_at(offset, length) for offset, length in locations] == entries


def test_multi_mib_values_round_trip() -> None:
    rng = random.Random(7)
    entries = [
        JournalEntry(
            10, Kind.OBJECT, object_key(b"b", b"random"), rng.randbytes(3 << 20), (), None, 1
        ),
        JournalEntry(
            11,
            Kind.OBJECT,
            object_key(b"b", b"repetitive"),
            b"inkpen" * (1 << 20),
            ((1, b"f_bin", b"t"),),
            99,
            2,
        ),
        JournalEntry(12, Kind.OBJECT, object_key(b"b", b"empty"), b"", (), None, 3),
    ]
    data = build_journal(entries, writer_epoch=1)
    assert len(data) < (3 << 20) + (6 << 20) // 2  # the repetitive body was compressed
    assert decode_journal(data, NAME)[1] == entries
    reader = open_reader(data)
    assert [reader.get(e.sqn, e.kind, e.ledger_key) for e in entries] == entries
    assert list(reader.iter_entries(chunk_size=1 << 20)) == entries


@pytest.mark.parametrize(
    ("body", "compressed"),
    [
        (random.Random(1).randbytes(1 << 20), False),  # incompressible: stored as it is
        (b"inkpen" * (1 << 18), True),  # compressible throughout
        # compressible at the start, middle and end only: the sample says compress, and the
        # whole is compressed when that saves an eighth (it does not here: kept as it is)
        (
            b"a" * (16 << 10)
            + random.Random(2).randbytes(496 << 10)
            + b"b" * (16 << 10)
            + random.Random(3).randbytes(496 << 10)
            + b"c" * (16 << 10),
            False,
        ),
        # random at the sampled places, compressible elsewhere: stored as it is (the trade)
        (
            random.Random(4).randbytes(16 << 10)
            + b"x" * (256 << 10)
            + random.Random(5).randbytes(16 << 10)
            + b"y" * (256 << 10)
            + random.Random(6).randbytes(16 << 10),
            False,
        ),
    ],
    ids=["random", "repetitive", "sampled-yes-whole-no", "sampled-no"],
)
def test_a_large_body_is_compressed_only_when_its_sample_and_the_whole_save_an_eighth(
    body: bytes, compressed: bool
) -> None:
    entry = JournalEntry(5, Kind.OBJECT, object_key(b"b", b"k"), body, (), None, 1)
    data = build_journal([entry], writer_epoch=1)
    assert (len(data) < len(body)) is compressed
    assert decode_journal(data, NAME)[1] == [entry]
    assert open_reader(data).get(5, Kind.OBJECT, entry.ledger_key) == entry


def test_keys_and_terms_at_the_documented_limit_round_trip() -> None:
    big = os.urandom(MAX_KEY_BYTES)
    key = object_key(big, big, big)
    entry = JournalEntry(1, Kind.KEY_CHANGES, key, None, ((1, big, big), (0, big, b"")), None, 5)
    data = build_journal([entry], writer_epoch=0)
    assert open_reader(data).get(1, Kind.KEY_CHANGES, key) == entry
    assert decode_journal(data, NAME)[1] == [entry]


@pytest.mark.parametrize("epoch", [0, 1, 42, 2**64 - 1])
def test_an_empty_journal_is_a_fixed_size_fence(epoch: int) -> None:
    data = build_journal([], writer_epoch=epoch)
    assert len(data) == EMPTY_JOURNAL_SIZE == HEADER_SIZE
    header = read_header(data, NAME)
    assert header == JournalHeader(1, epoch, 0, 0, 0, HEADER_SIZE, 0)
    assert header.is_empty
    assert decode_journal(data, NAME) == (header, [])
    fetch = CountingFetch(data)
    reader = JournalReader.open(NAME, len(data), fetch)
    assert len(fetch.calls) == 1
    assert reader.get(1, Kind.OBJECT, b"k") is None
    assert list(reader.iter_entries()) == []
    assert reader.locations() == []


def test_a_non_empty_journal_is_never_the_fence_size() -> None:
    smallest = build_journal(
        [JournalEntry(0, Kind.TOMBSTONE, b"", None, (), None, 0)], writer_epoch=0
    )
    assert len(smallest) > EMPTY_JOURNAL_SIZE


def test_read_header_needs_only_the_first_bytes() -> None:
    data = build_journal([JournalEntry(5, Kind.OBJECT, b"k", b"v", (), None, 0)], writer_epoch=9)
    header = read_header(data[:HEADER_SIZE], NAME)
    assert (header.writer_epoch, header.entry_count, header.min_sqn, header.max_sqn) == (9, 1, 5, 5)


def test_read_budget_two_reads_to_open_one_per_get() -> None:
    entries = [
        JournalEntry(i, Kind.OBJECT, object_key(b"b", b"k%d" % i), b"value-%d" % i, (), None, i)
        for i in range(1, 2001)
    ]
    data = build_journal(entries, writer_epoch=1)
    fetch = CountingFetch(data)
    reader = JournalReader.open(NAME, len(data), fetch)
    header = reader.header
    assert fetch.calls == [(0, HEADER_SIZE), (header.hash_offset, len(data))]
    for entry in entries[::97]:
        before = len(fetch.calls)
        assert reader.get(entry.sqn, Kind.OBJECT, entry.ledger_key) == entry
        assert len(fetch.calls) == before + 1
    before = len(fetch.calls)
    assert list(reader.iter_entries(chunk_size=16 * 1024)) == entries
    reads = fetch.calls[before:]
    assert len(reads) == -(-(header.hash_offset - HEADER_SIZE) // (16 * 1024))
    assert reads[0][0] == HEADER_SIZE and reads[-1][1] == header.hash_offset


def test_sqn_base_shifts_sqns_both_ways() -> None:
    entries = [
        JournalEntry(i, Kind.OBJECT, b"k%d" % i, b"v", ((1, b"f", b"t"),), None, 0)
        for i in range(0, 10)
    ]
    data = build_journal(entries, writer_epoch=1)
    reader = open_reader(data, sqn_base=500)
    assert (reader.min_sqn, reader.max_sqn) == (500, 509)
    assert reader.get(503, Kind.OBJECT, b"k3") == entries[3]._replace(sqn=503)
    assert reader.get(3, Kind.OBJECT, b"k3") is None
    assert [e.sqn for e in reader.iter_entries()] == list(range(500, 510))
    offset, length = reader.locations()[2]
    assert reader.read_at(offset, length).sqn == 502


def test_index_specs_and_metadata_rebuild_the_ledger_entry() -> None:
    key = object_key(b"users", b"alice")
    specs = ((1, b"email_bin", b"a@example.com"), (0, b"email_bin", b"old@example.com"))
    entry = JournalEntry(77, Kind.OBJECT, key, b"{}", specs, 1_700_000_360_000, 1_700_000_000_000)
    (decoded,) = decode_journal(build_journal([entry], writer_epoch=1), NAME)[1]
    assert decoded.index_specs == specs
    assert decoded.expiry_ms == 1_700_000_360_000
    assert decoded.last_modified_ms == 1_700_000_000_000
    assert index_key(b"users", b"email_bin", decoded.index_specs[0][2], key)


def unchecked_entry(*fields: Any) -> JournalEntry:
    """An entry that may hold fields of the wrong type: only the checks at run time refuse it."""
    return JournalEntry(*fields)


@pytest.mark.parametrize(
    ("entries", "error"),
    [
        (
            [
                JournalEntry(2, Kind.OBJECT, b"a", b"", (), None, 0),
                JournalEntry(2, Kind.OBJECT, b"b", b"", (), None, 0),
            ],
            ValueError,
        ),
        (
            [
                JournalEntry(3, Kind.OBJECT, b"a", b"", (), None, 0),
                JournalEntry(1, Kind.OBJECT, b"b", b"", (), None, 0),
            ],
            ValueError,
        ),
        ([JournalEntry(-1, Kind.OBJECT, b"a", b"", (), None, 0)], ValueError),
        ([JournalEntry(1, Kind.TOMBSTONE, b"a", b"x", (), None, 0)], ValueError),
        ([JournalEntry(1, Kind.OBJECT, b"a", None, (), None, 0)], TypeError),
        ([unchecked_entry(1, Kind.OBJECT, "a", b"", (), None, 0)], TypeError),
        ([unchecked_entry(1, 9, b"a", b"", (), None, 0)], ValueError),
        ([JournalEntry(1, Kind.OBJECT, b"a", b"", ((2, b"f", b"t"),), None, 0)], ValueError),
        ([unchecked_entry(1, Kind.OBJECT, b"a", b"", ((1, "f", b"t"),), None, 0)], TypeError),
        ([JournalEntry(1, Kind.OBJECT, b"a", b"", (), -3, 0)], ValueError),
        ([JournalEntry(1, Kind.OBJECT, b"a", b"", (), None, 2**64)], ValueError),
    ],
)
def test_bad_entries_are_refused(entries: list[JournalEntry], error: type[Exception]) -> None:
    with pytest.raises(error):
        build_journal(entries, writer_epoch=1)


@pytest.mark.parametrize("epoch", [-1, 2**64, 1.5])
def test_bad_epoch_is_refused(epoch: object) -> None:
    with pytest.raises((ValueError, TypeError), match="writer_epoch"):
        build_journal([], writer_epoch=epoch)  # type: ignore[arg-type]


def test_bad_reader_arguments_are_refused() -> None:
    data = build_journal([JournalEntry(1, Kind.OBJECT, b"a", b"v", (), None, 0)], writer_epoch=1)
    reader = open_reader(data)
    with pytest.raises(ValueError, match="locations"):
        reader.read_at(0, 10)
    with pytest.raises(ValueError, match="locations"):
        reader.read_at(HEADER_SIZE, len(data))
    with pytest.raises(ValueError, match="chunk_size"):
        list(reader.iter_entries(chunk_size=0))


# --- damage ------------------------------------------------------------------------------------

DAMAGE_ENTRIES = [
    JournalEntry(
        100 + i,
        kind,
        object_key(b"b", b"k%d" % i),
        (b"xy" * 200 if i % 2 else b"v%d" % i) if kind is Kind.OBJECT else None,
        ((1, b"f", b"t%d" % i),) if i % 3 == 0 else (),
        5 if i == 4 else None,
        i,
    )
    for i, kind in enumerate([Kind.OBJECT, Kind.TOMBSTONE, Kind.KEY_CHANGES] * 4)
]
DAMAGE_JOURNAL = build_journal(DAMAGE_ENTRIES, writer_epoch=3)


def flip(data: bytes, offset: int, mask: int) -> bytes:
    return data[:offset] + bytes([data[offset] ^ mask]) + data[offset + 1 :]


def read_everything(data: bytes) -> list[CorruptionError]:
    """Use every read path; assert every answer is exact; return the corruption errors seen."""
    seen: list[CorruptionError] = []

    def attempt(check: Callable[[], object]) -> None:
        try:
            check()
        except CorruptionError as exc:
            seen.append(exc)

    def whole() -> None:
        assert decode_journal(data, NAME)[1] == DAMAGE_ENTRIES

    def lazily() -> None:
        assert list(iter_journal(data, NAME)) == DAMAGE_ENTRIES

    attempt(whole)
    attempt(lazily)
    attempt(lambda: read_header(data, NAME))
    readers: list[JournalReader] = []
    attempt(lambda: readers.append(open_reader(data)))
    if readers:
        reader = readers[0]
        for entry in DAMAGE_ENTRIES:

            def lookup(entry: JournalEntry = entry) -> None:
                assert reader.get(entry.sqn, entry.kind, entry.ledger_key) == entry

            attempt(lookup)

        def scan() -> None:
            assert list(reader.iter_entries(chunk_size=97)) == DAMAGE_ENTRIES

        def by_location() -> None:
            found = [reader.read_at(o, n) for o, n in reader.locations()]
            assert found == DAMAGE_ENTRIES

        attempt(scan)
        attempt(by_location)
    return seen


def assert_detected(offset: int, mask: int) -> None:
    errors = read_everything(flip(DAMAGE_JOURNAL, offset, mask))
    assert errors, f"flipping byte {offset} with {mask:#x} went unnoticed"
    for exc in errors:
        assert exc.object_name == NAME
        assert exc.offset is not None and exc.offset <= offset
        assert NAME in str(exc)


def test_the_damage_fixture_reads_cleanly() -> None:
    assert read_everything(DAMAGE_JOURNAL) == []


@settings(max_examples=400)
@given(st.integers(0, len(DAMAGE_JOURNAL) - 1), st.integers(1, 255))
def test_any_flipped_byte_is_detected_on_some_read_path(offset: int, mask: int) -> None:
    assert_detected(offset, mask)


def test_every_byte_is_covered_by_a_check() -> None:
    for offset in range(len(DAMAGE_JOURNAL)):
        assert_detected(offset, 0x80)


def test_truncation_and_wrong_size_are_corruption() -> None:
    data = DAMAGE_JOURNAL
    for size in (len(data) - 1, len(data) + 1, HEADER_SIZE - 1):
        with pytest.raises(CorruptionError) as info:
            JournalReader.open(NAME, size, lambda s, e: data[s:e])
        assert info.value.object_name == NAME
    with pytest.raises(CorruptionError, match="header says"):
        decode_journal(data[:-1], NAME)
    with pytest.raises(CorruptionError, match="too short"):
        read_header(data[: HEADER_SIZE - 1], NAME)


def test_other_kinds_of_file_are_refused_clearly() -> None:
    sst, _ = build_sst([(b"k%03d" % i, LedgerValue(i, 0, None, 0, 0, 0)) for i in range(100)])
    manifest = encode_manifest({"writer_epoch": 1})
    for other in (sst, manifest):
        with pytest.raises(CorruptionError, match="not an inkpen journal"):
            decode_journal(other, NAME)
        with pytest.raises(CorruptionError, match="not an inkpen journal"):
            JournalReader.open(NAME, len(other), memory_fetch(other))
    with pytest.raises(CorruptionError, match="manifest"):
        read_header(manifest, NAME)


def test_a_newer_format_version_asks_for_an_upgrade() -> None:
    data = bytearray(DAMAGE_JOURNAL)
    struct.pack_into(">H", data, 6, 2)
    struct.pack_into(">I", data, HEADER_SIZE - 4, zlib.crc32(data[: HEADER_SIZE - 4]))
    for attempt in (lambda: read_header(bytes(data), NAME), lambda: open_reader(bytes(data))):
        with pytest.raises(CorruptionError, match="upgrade inkpen") as info:
            attempt()
        assert info.value.offset == 6
