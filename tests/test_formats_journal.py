"""Journal files: round trips on every read path, fencing segments, the read budget, damage."""

from __future__ import annotations

import itertools
import os
import random
import struct
import zlib
from collections.abc import Callable
from typing import Any
from unittest import mock

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inkpen.errors import CorruptionError
from inkpen.formats.journal import (
    EMPTY_JOURNAL_SIZE,
    FORMAT_VERSION,
    HEADER_SIZE,
    INDEX_BLOCK,
    PARTS_FROM,
    PREPARE_FROM,
    JournalEntry,
    JournalHeader,
    JournalReader,
    Kind,
    build_journal,
    decode_journal,
    iter_journal,
    prepare_record,
    read_header,
)
from inkpen.formats.journal import _reader as journal_reader
from inkpen.formats.keys import MAX_KEY_BYTES, LedgerValue, index_key, object_key
from inkpen.formats.manifest_codec import encode_manifest
from inkpen.formats.sst import build_sst
from support.damage import flip
from support.fetching import CountingFetch, PartsFetch, memory_fetch

NAME = "journal/00000000000000000187.jnl"
VERSIONS = [1, 2, 3]
"""Every journal format version: writers write the last, readers read them all."""
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


def kind_in(version: int, kind: Kind) -> Kind:
    """``kind``, or KEY_CHANGES (a body-less kind too) where ``version`` predates it."""
    return Kind.KEY_CHANGES if kind is Kind.VALUE_IN_LEDGER and version < 3 else kind


def to_entries(
    first_sqn: int, raws: list[tuple[Any, ...]], version: int = FORMAT_VERSION
) -> list[JournalEntry]:
    entries = []
    sqn = first_sqn
    for gap, drawn, key, body, specs, expiry, modified in raws:
        sqn += gap
        kind = kind_in(version, drawn)
        payload = body if kind is Kind.OBJECT else None
        entries.append(JournalEntry(sqn, kind, key, payload, specs, expiry, modified))
    return entries


def open_reader(data: bytes, **kw: Any) -> JournalReader:
    return JournalReader.open(NAME, len(data), lambda s, e: data[s:e], **kw)


@settings(max_examples=150)
@given(st.integers(0, 2**63), raw_entries, U64, st.integers(1, 5000), st.sampled_from(VERSIONS))
def test_round_trip_on_every_read_path(
    first_sqn: int, raws: list[tuple[Any, ...]], epoch: int, chunk_size: int, version: int
) -> None:
    entries = to_entries(first_sqn, raws, version)
    data = build_journal(entries, writer_epoch=epoch, version=version)
    header, decoded = decode_journal(data, NAME)
    assert decoded == entries
    assert list(iter_journal(data, NAME)) == entries
    assert header == read_header(data[:HEADER_SIZE], NAME)
    assert header.writer_epoch == epoch
    assert header.version == version
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
    assert header == JournalHeader(FORMAT_VERSION, epoch, 0, 0, 0, HEADER_SIZE, 0)
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


def damage_entries(version: int) -> list[JournalEntry]:
    """Every kind of record the version has, bodies compressed and not, specs and expiries."""
    kinds = [k for k in Kind if kind_in(version, k) is k]
    return [
        JournalEntry(
            100 + i,
            kind,
            object_key(b"b", b"k%d" % i),
            (b"xy" * 200 if i % 2 else b"v%d" % i) if kind is Kind.OBJECT else None,
            ((1, b"f", b"t%d" % i),) if i % 3 == 0 else (),
            5 if i == 4 else None,
            i,
        )
        for i, kind in enumerate(kinds * 4)
    ]


DAMAGE_BY_VERSION = {version: damage_entries(version) for version in VERSIONS}
DAMAGE_ENTRIES = DAMAGE_BY_VERSION[FORMAT_VERSION]
DAMAGE_JOURNAL = build_journal(DAMAGE_ENTRIES, writer_epoch=3)
DAMAGE_JOURNALS = {
    version: build_journal(entries, writer_epoch=3, version=version)
    for version, entries in DAMAGE_BY_VERSION.items()
}


def read_everything(data: bytes, version: int = FORMAT_VERSION) -> list[CorruptionError]:
    """Use every read path; assert every answer is exact; return the corruption errors seen."""
    seen: list[CorruptionError] = []
    expected = DAMAGE_BY_VERSION[version]

    def attempt(check: Callable[[], object]) -> None:
        try:
            check()
        except CorruptionError as exc:
            seen.append(exc)

    def whole() -> None:
        assert decode_journal(data, NAME)[1] == expected

    def lazily() -> None:
        assert list(iter_journal(data, NAME)) == expected

    attempt(whole)
    attempt(lazily)
    attempt(lambda: read_header(data, NAME))
    readers: list[JournalReader] = []
    attempt(lambda: readers.append(open_reader(data)))
    if readers:
        reader = readers[0]
        for entry in expected:

            def lookup(entry: JournalEntry = entry) -> None:
                assert reader.get(entry.sqn, entry.kind, entry.ledger_key) == entry

            attempt(lookup)

        def scan() -> None:
            assert list(reader.iter_entries(chunk_size=97)) == expected

        def by_location() -> None:
            found = [reader.read_at(o, n) for o, n in reader.locations()]
            assert found == expected

        attempt(scan)
        attempt(by_location)
    return seen


def assert_detected(offset: int, mask: int, version: int = FORMAT_VERSION) -> None:
    errors = read_everything(flip(DAMAGE_JOURNALS[version], offset, mask), version)
    assert errors, f"flipping byte {offset} with {mask:#x} went unnoticed"
    for exc in errors:
        assert exc.object_name == NAME
        assert exc.offset is not None and exc.offset <= offset
        assert NAME in str(exc)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_damage_fixture_reads_cleanly(version: int) -> None:
    assert read_everything(DAMAGE_JOURNALS[version], version) == []


@settings(max_examples=400)
@given(st.data(), st.sampled_from(VERSIONS), st.integers(1, 255))
def test_any_flipped_byte_is_detected_on_some_read_path(
    data: st.DataObject, version: int, mask: int
) -> None:
    offset = data.draw(st.integers(0, len(DAMAGE_JOURNALS[version]) - 1))
    assert_detected(offset, mask, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_byte_is_covered_by_a_check(version: int) -> None:
    for offset in range(len(DAMAGE_JOURNALS[version])):
        assert_detected(offset, 0x80, version)


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
    struct.pack_into(">H", data, 6, FORMAT_VERSION + 1)
    struct.pack_into(">I", data, HEADER_SIZE - 4, zlib.crc32(data[: HEADER_SIZE - 4]))
    for attempt in (lambda: read_header(bytes(data), NAME), lambda: open_reader(bytes(data))):
        with pytest.raises(CorruptionError, match="upgrade inkpen") as info:
            attempt()
        assert info.value.offset == 6


# --- version 2: the SQN block index ------------------------------------------------------------


def blocks_of(data: bytes) -> list[tuple[int, int, int]]:
    """``(first SQN, start, end)`` of every block of a version 2 file, decoded here from the
    layout the module docstring gives (not through the reader)."""
    header = read_header(data, NAME)
    region = data[header.hash_offset : len(data) - 4]
    assert zlib.crc32(region) == struct.unpack(">I", data[-4:])[0]
    pairs = [struct.unpack_from(">QQ", region, at) for at in range(0, len(region), 16)]
    ends = [offset for _, offset in pairs[1:]] + [header.hash_offset]
    return [(first, offset, end) for (first, offset), end in zip(pairs, ends, strict=True)]


def layout_entries(layout: str) -> list[JournalEntry]:
    """Entries with SQN gaps (every third SQN is absent) and bodies of the layout's sizes."""
    rng = random.Random(layout)
    sizes = {
        "small": [rng.randrange(0, 120) for _ in range(600)],
        "large": [INDEX_BLOCK + 1, 3 * INDEX_BLOCK, 4 << 20, INDEX_BLOCK * 2],
        "mixed": [rng.choice([0, 10, 900, 3000, 5000, 70_000]) for _ in range(120)],
    }[layout]
    entries: list[JournalEntry] = []
    for i, size in enumerate(sizes):
        sqn = 1000 + 3 * i // 2 * 2  # gaps between some SQNs
        if entries and sqn <= entries[-1].sqn:
            sqn = entries[-1].sqn + 2
        entries.append(
            JournalEntry(sqn, Kind.OBJECT, b"key-%d" % i, rng.randbytes(size), (), None, i)
        )
    return entries


@pytest.mark.parametrize("version", VERSIONS)
def test_each_version_checksums_its_records_as_documented(version: int) -> None:
    """Version 3 records carry CRC-32C, versions 1 and 2 CRC-32 (checked here with the two
    packages directly); the header and the index region carry CRC-32 in every version. A file
    whose version says one checksum and whose records carry the other is damaged."""
    entries = layout_entries("mixed")[:40]
    data = build_journal(entries, writer_epoch=1, version=version)
    header = read_header(data, NAME)
    record_checksum = crc32c.crc32c if version >= 3 else zlib.crc32
    pos = HEADER_SIZE
    while pos < header.hash_offset:
        key_length, value_length = struct.unpack_from(">II", data, pos)
        crc_at = pos + 8 + key_length + value_length
        assert struct.unpack_from(">I", data, crc_at)[0] == record_checksum(data[pos:crc_at])
        pos = crc_at + 4
    assert struct.unpack_from(">I", data, 56)[0] == zlib.crc32(data[:56])
    assert struct.unpack(">I", data[-4:])[0] == zlib.crc32(data[header.hash_offset : -4])
    if version == 1:
        return
    other = bytearray(data)  # the same records under the other block-index version
    struct.pack_into(">H", other, 6, 5 - version)
    struct.pack_into(">I", other, 56, zlib.crc32(other[:56]))
    reader = open_reader(bytes(other))
    for entry in entries:
        with pytest.raises(CorruptionError, match="checksum mismatch"):
            reader.value(entry.sqn, entry.kind, entry.ledger_key)
    with pytest.raises(CorruptionError, match="checksum mismatch"):
        decode_journal(bytes(other), NAME)


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("layout", ["small", "large", "mixed"])
def test_version_2_and_3_blocks_hold_about_4_kib_and_each_get_reads_one(
    layout: str, version: int
) -> None:
    entries = layout_entries(layout)
    data = build_journal(entries, writer_epoch=1, version=version)
    header = read_header(data, NAME)
    assert header.version == version
    blocks = blocks_of(data)
    records: list[tuple[int, int]] = []  # (offset, length) of every record, walked here
    pos = HEADER_SIZE
    while pos < header.hash_offset:
        key_length, value_length = struct.unpack_from(">II", data, pos)
        records.append((pos, 8 + key_length + value_length + 4))
        pos += records[-1][1]
    starts = {offset: at for at, (offset, _) in enumerate(records)}
    for first, start, end in blocks:
        at = starts[start]  # every block starts on a record ...
        assert entries[at].sqn == first  # ... whose SQN the index names
        inside = [length for offset, length in records if start <= offset < end]
        assert sum(inside) == end - start
        assert len(inside) == 1 or end - start <= INDEX_BLOCK  # a big record is a block alone
    for (_, start, end), (_, next_start, _) in itertools.pairwise(blocks):
        # A block is cut only when the next record would not fit.
        assert end - start + records[starts[next_start]][1] > INDEX_BLOCK

    fetch = CountingFetch(data)
    reader = JournalReader.open(NAME, len(data), fetch)
    assert fetch.calls == [(0, HEADER_SIZE), (header.hash_offset, len(data))]
    ranges = {(start, end) for _, start, end in blocks}
    for entry, (offset, length) in zip(entries, records, strict=True):
        fetch.calls.clear()
        assert reader.get(entry.sqn, entry.kind, entry.ledger_key) == entry
        assert reader.value(entry.sqn, entry.kind, entry.ledger_key) == entry.value
        assert len(fetch.calls) == 2 and fetch.calls[0] == fetch.calls[1] in ranges
        if length > INDEX_BLOCK:
            assert fetch.calls[0] == (offset, offset + length)  # exactly the record
    present = {entry.sqn for entry in entries}
    lowest, highest = entries[0].sqn, entries[-1].sqn
    between = [sqn for sqn in range(lowest, highest) if sqn not in present][:50]
    assert between
    for sqn in between:
        fetch.calls.clear()
        assert reader.get(sqn, Kind.OBJECT, b"key-0") is None
        assert len(fetch.calls) == 1 and fetch.calls[0] in ranges
    for sqn in (0, lowest - 1, highest + 1, 2**64 - 1):
        fetch.calls.clear()
        assert reader.get(sqn, Kind.OBJECT, b"key-0") is None
        assert reader.locate(sqn, Kind.OBJECT, b"key-0") is None
        assert fetch.calls == []  # outside the file's SQN range: nothing is read
    assert reader.locations() == records
    assert list(reader.iter_entries(chunk_size=1000)) == entries


def test_the_empty_and_one_entry_files_of_version_2() -> None:
    entry = JournalEntry(7, Kind.TOMBSTONE, b"k", None, (), None, 0)
    data = build_journal([entry], writer_epoch=2)
    assert blocks_of(data) == [(7, HEADER_SIZE, read_header(data, NAME).hash_offset)]
    reader = open_reader(data)
    assert reader.get(7, Kind.TOMBSTONE, b"k") == entry
    assert reader.get(6, Kind.TOMBSTONE, b"k") is None
    assert reader.get(8, Kind.TOMBSTONE, b"k") is None
    for version in (0, 4):
        with pytest.raises(ValueError, match="version"):
            build_journal([entry], writer_epoch=1, version=version)
    trimmed = JournalEntry(8, Kind.VALUE_IN_LEDGER, b"k", None, (), None, 0)
    for version in (1, 2):  # a record kind those versions do not have
        with pytest.raises(ValueError, match="needs journal format version 3"):
            build_journal([entry, trimmed], writer_epoch=1, version=version)
    with pytest.raises(ValueError, match="carries no value"):
        build_journal([trimmed._replace(value=b"body")], writer_epoch=1)


bodies_by_size = st.one_of(
    st.binary(max_size=200),
    st.integers(0, 3 * INDEX_BLOCK).map(lambda n: random.Random(n).randbytes(n)),
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 4), st.sampled_from(Kind), st.binary(max_size=8), bodies_by_size),
        min_size=1,
        max_size=60,
    ),
    st.lists(st.integers(0, 300), max_size=40),
    st.sampled_from(VERSIONS),
    st.integers(0, 50),
)
def test_lookups_of_every_version_equal_a_model(
    raws: list[tuple[int, Kind, bytes, bytes]], asked: list[int], version: int, sqn_base: int
) -> None:
    entries = []
    sqn = 0
    for gap, drawn, key, body in raws:
        sqn += gap
        kind = kind_in(version, drawn)
        value = body if kind is Kind.OBJECT else None
        entries.append(JournalEntry(sqn, kind, key, value, (), None, sqn))
    model = {(e.sqn + sqn_base, e.kind, e.ledger_key): e for e in entries}
    data = build_journal(entries, writer_epoch=1, version=version)
    reader = open_reader(data, sqn_base=sqn_base)
    asks = list(model)
    asks += [(sqn_base + n, Kind.OBJECT, b"") for n in asked]  # mostly absent
    asks += [
        (s, Kind.KEY_CHANGES if k is not Kind.KEY_CHANGES else Kind.OBJECT, key)
        for s, k, key in list(model)[:5]
    ]
    for ask in asks:
        found = model.get(ask)
        shifted = None if found is None else found._replace(sqn=ask[0])
        assert reader.get(*ask) == shifted
        want = None if found is None else (found.value or b"")
        assert reader.value(*ask) == want
    located = reader.locate_many(asks)
    assert located == [reader.locate(*ask) for ask in asks]
    placed = sorted(
        (where[1], where[2], at, where[0]) for at, where in enumerate(located) if where is not None
    )
    if version == 1:  # one slot per record: a located key the model lacks may hash alike
        placed = [p for p in placed if asks[p[2]] in model]
    bodies = reader.values_at([(key, offset, length) for offset, length, _, key in placed])
    for (_, _, at, _), got in zip(placed, bodies, strict=True):
        found = model.get(asks[at])
        assert got == (None if found is None else (found.value or b""))
    assert [reader.read_at(o, n) for o, n in reader.locations()] == [
        e._replace(sqn=e.sqn + sqn_base) for e in entries
    ]
    # Every record read in parts where it can be (a block of one record), whole elsewhere.
    with mock.patch.object(journal_reader, "PARTS_FROM", 1):
        in_parts = JournalReader.open(NAME, len(data), PartsFetch(data), sqn_base=sqn_base)
        for ask in asks:
            found = model.get(ask)
            assert in_parts.value(*ask) == (None if found is None else (found.value or b""))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_sample_draws_distinct_entries_in_file_order(version: int) -> None:
    entries = layout_entries("mixed")
    data = build_journal(entries, writer_epoch=1, version=version)
    fetch = CountingFetch(data)
    reader = JournalReader.open(NAME, len(data), fetch, sqn_base=10)
    shifted = [e._replace(sqn=e.sqn + 10) for e in entries]
    for count in (1, 30, 500):
        fetch.calls.clear()
        drawn = reader.sample(random.Random(count), count)
        assert drawn == [e for e in shifted if e in drawn]  # distinct, in file order
        if version == 1:
            assert len(drawn) == min(count, len(entries))
        else:  # blocks are drawn by size: a large record drawn twice counts once
            assert 0 < len(drawn) <= min(count, len(entries))
            blocks = {(start, end) for _, start, end in blocks_of(data)}
            assert set(fetch.calls) <= blocks and len(set(fetch.calls)) == len(fetch.calls)
    assert reader.sample(random.Random(1), 0) == []


# --- large records read in parts ---------------------------------------------------------------


def record_layout(data: bytes, offset: int) -> tuple[int, int, int]:
    """``(body start, CRC start, end)`` of the record at ``offset``, from the documented layout."""
    key_length, value_length = struct.unpack_from(">II", data, offset)
    value_at = offset + 8 + key_length
    (specs_length,) = struct.unpack_from(">I", data, value_at + 17)
    crc_at = value_at + value_length
    return value_at + 21 + specs_length, crc_at, crc_at + 4


LARGE_ENTRIES = [
    # incompressible, exactly at the size a record is read in parts from
    JournalEntry(3, Kind.OBJECT, b"k-random", random.Random(3).randbytes(PARTS_FROM), (), 9, 1),
    # compressible, with index specs
    JournalEntry(
        5, Kind.OBJECT, b"k-text", b"inkpen " * 40_000, ((1, b"f", b"t"), (0, b"g", b"")), None, 2
    ),
    # a key and specs that outgrow the first read of the head
    JournalEntry(
        6,
        Kind.OBJECT,
        b"K" * 5000,
        random.Random(6).randbytes(100_000),
        tuple((1, b"field_bin", b"term-%05d" % i) for i in range(600)),
        None,
        3,
    ),
    # a block of one record, too small to be read in parts
    JournalEntry(7, Kind.OBJECT, b"k-less", random.Random(7).randbytes(PARTS_FROM - 99), (), 0, 4),
    JournalEntry(8, Kind.TOMBSTONE, b"k-random", None, (), None, 5),
]


def record_offsets(data: bytes) -> list[int]:
    header = read_header(data, NAME)
    offsets = []
    pos = HEADER_SIZE
    while pos < header.hash_offset:
        offsets.append(pos)
        pos = record_layout(data, pos)[2]
    return offsets


@pytest.mark.parametrize("version", VERSIONS)
def test_a_large_record_is_read_in_parts_and_its_body_is_the_bytes_read(version: int) -> None:
    data = build_journal(LARGE_ENTRIES, writer_epoch=1, version=version)
    fetch = PartsFetch(data)
    reader = JournalReader.open(NAME, len(data), fetch)
    for entry, offset in zip(LARGE_ENTRIES, record_offsets(data), strict=True):
        body_at, crc_at, end = record_layout(data, offset)
        fetch.calls.clear()
        fetch.answers.clear()
        got = reader.value(entry.sqn, entry.kind, entry.ledger_key)
        assert got == (entry.value or b"")
        if end - offset < PARTS_FROM:  # read whole, in one read of exactly the record
            assert fetch.calls[-1:] == [(offset, end)]
            continue
        # three ranges of one request: the head as far as a body without index specs starts
        # (lengths, SQN, kind, ledger key, value fields), the rest, the CRC
        head_end = offset + 8 + 9 + len(entry.ledger_key) + 21
        assert fetch.calls == [(offset, head_end), (head_end, crc_at), (crc_at, end)]
        assert (body_at == head_end) is (not entry.index_specs)
        if entry.sqn == 3:  # no specs, stored as it is: the body answered is the very read
            assert got is fetch.answers[1]
    # The other read paths agree.
    assert [reader.get(e.sqn, e.kind, e.ledger_key) for e in LARGE_ENTRIES] == LARGE_ENTRIES
    assert reader.value(3, Kind.OBJECT, b"k-text") is None
    assert reader.value(5, Kind.OBJECT, b"k-random") is None
    assert reader.value(3, Kind.TOMBSTONE, b"k-random") is None


def test_a_block_of_several_records_is_walked_not_read_in_parts() -> None:
    entries = [
        JournalEntry(sqn, Kind.OBJECT, b"k%d" % sqn, b"v" * 100, (), None, 0) for sqn in (1, 2, 3)
    ]
    data = build_journal(entries, writer_epoch=1)
    with mock.patch.object(journal_reader, "PARTS_FROM", 1):
        fetch = PartsFetch(data)
        reader = JournalReader.open(NAME, len(data), fetch)
        for entry in entries:
            fetch.calls.clear()
            assert reader.value(entry.sqn, entry.kind, entry.ledger_key) == entry.value
            # the head read finds the block holds more than one record: the block is walked
            assert fetch.calls[-1] == (HEADER_SIZE, read_header(data, NAME).hash_offset)


@pytest.mark.parametrize("version", VERSIONS)
def test_damage_to_a_large_record_read_in_parts_is_detected(version: int) -> None:
    entries = LARGE_ENTRIES[:3]
    data = build_journal(entries, writer_epoch=1, version=version)
    offsets = record_offsets(data)
    ends = [*offsets[1:], read_header(data, NAME).hash_offset]
    records = list(zip(entries, offsets, ends, strict=True))
    interesting: set[int] = set(range(0, HEADER_SIZE))
    for _, offset, end in records:
        body_at = record_layout(data, offset)[0]
        interesting |= set(range(offset, offset + 96))  # lengths, SQN, kind, the key's start
        interesting |= set(range(offset, body_at, 31))  # through the key and the specs
        interesting |= set(range(body_at - 64, body_at + 64))  # the fields, the specs' end
        interesting |= set(range(body_at, end, 997))  # through the body
        interesting |= set(range(end - 64, end))  # the body's end and the CRC
    interesting |= set(range(records[-1][2], len(data)))  # the index region
    for flipped in sorted(interesting):
        damaged = flip(data, flipped, 0x40)
        try:
            reader = JournalReader.open(NAME, len(damaged), PartsFetch(damaged))
        except CorruptionError as exc:
            assert exc.object_name == NAME and exc.offset is not None and exc.offset <= flipped
            continue
        for entry, offset, end in records:
            try:
                got = reader.value(entry.sqn, entry.kind, entry.ledger_key)
            except CorruptionError as exc:
                assert exc.object_name == NAME
                assert exc.offset is not None and exc.offset <= flipped, (flipped, exc)
                continue
            assert not offset <= flipped < end, f"byte {flipped} flipped went unnoticed"
            assert got == entry.value


# --- large records encoded in the caller's thread ----------------------------------------------


def prepared_for(entry: JournalEntry) -> Any:
    assert entry.value is not None
    return prepare_record(
        entry.ledger_key, entry.value, entry.index_specs, entry.expiry_ms, entry.last_modified_ms
    )


@settings(max_examples=100, deadline=None)
@given(raw_entries, U64, st.sampled_from(VERSIONS), st.data())
def test_records_prepared_in_the_callers_thread_build_the_same_bytes(
    raws: list[tuple[Any, ...]], epoch: int, version: int, data: st.DataObject
) -> None:
    entries = to_entries(1, raws, version)
    plain = build_journal(entries, writer_epoch=epoch, version=version)
    objects = [e for e in entries if e.kind is Kind.OBJECT]
    chosen = data.draw(st.lists(st.sampled_from(objects), unique=True)) if objects else []
    prepared = [prepared_for(e) if e in chosen else None for e in entries]
    assert build_journal(entries, writer_epoch=epoch, version=version, prepared=prepared) == plain
    # One prepared for other fields than its entry's is not used: the entry is encoded afresh.
    stale = [
        None if p is None else prepare_record(p.ledger_key, p.value, ((1, b"other", b""),), 7, 8)
        for p in prepared
    ]
    assert build_journal(entries, writer_epoch=epoch, version=version, prepared=stale) == plain


@pytest.mark.parametrize(
    "body",
    [
        random.Random(9).randbytes(PREPARE_FROM),  # stored as it is
        b"inkpen " * 100_000,  # stored compressed
        random.Random(10).randbytes(3 << 20),
    ],
    ids=["random", "repetitive", "3-mib"],
)
def test_a_prepared_large_record_reads_back_on_every_path(body: bytes) -> None:
    entries = [
        JournalEntry(4, Kind.OBJECT, b"small", b"v", (), None, 1),
        JournalEntry(9, Kind.OBJECT, b"large", body, ((1, b"f_bin", b"t"),), 2**40, 2),
        JournalEntry(10, Kind.TOMBSTONE, b"small", None, (), None, 3),
    ]
    prepared = [None, prepared_for(entries[1]), None]
    assert prepared[1].body is body or len(prepared[1].body) < len(body)
    data = build_journal(entries, writer_epoch=5, prepared=prepared)
    assert data == build_journal(entries, writer_epoch=5)
    assert decode_journal(data, NAME)[1] == entries
    for fetch in (CountingFetch(data), PartsFetch(data)):
        reader = JournalReader.open(NAME, len(data), fetch)
        assert [reader.get(e.sqn, e.kind, e.ledger_key) for e in entries] == entries
        assert reader.value(9, Kind.OBJECT, b"large") == body


def test_a_prepared_record_refuses_what_a_journal_refuses() -> None:
    with pytest.raises(TypeError, match="bytes"):
        prepare_record("k", b"v", (), None, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bytes"):
        prepare_record(b"k", "v", (), None, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="op 0 or 1"):
        prepare_record(b"k", b"v", ((2, b"f", b"t"),), None, 0)
    with pytest.raises(ValueError, match="expiry_ms"):
        prepare_record(b"k", b"v", (), 2**64, 0)
