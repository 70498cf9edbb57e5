"""SST files: round trips, lookups and scans, the read budget, the cache, bad input, damage."""

from __future__ import annotations

import random
import struct
import threading
import zlib
from collections.abc import Callable

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inkpen.errors import CorruptionError
from inkpen.formats.bloom import bloom_hash
from inkpen.formats.cache import LruCache
from inkpen.formats.journal import JournalEntry, Kind, build_journal
from inkpen.formats.keys import ACTIVE, MAX_KEY_BYTES, TOMBSTONE, LedgerValue, object_key
from inkpen.formats.manifest_codec import encode_manifest
from inkpen.formats.sst import (
    DEFAULT_BLOCK_SIZE,
    FOOTER_SIZE,
    FORMAT_VERSION,
    RUN_BYTES,
    SstBuilder,
    SstInfo,
    SstReader,
    build_sst,
)
from support.damage import flip
from support.fetching import CountingFetch, memory_fetch

NAME = "ledger/0000000000001-abc.sst"
U64 = st.integers(0, 2**64 - 1)
ledger_values = st.builds(
    LedgerValue,
    sqn=U64,
    status=st.sampled_from([ACTIVE, TOMBSTONE]),
    expiry_ms=st.none() | U64,
    content_hash=U64,
    size=U64,
    last_modified_ms=U64,
)
entry_lists = st.dictionaries(st.binary(max_size=40), ledger_values, min_size=1, max_size=120).map(
    lambda found: sorted(found.items())
)


def value(sqn: int, status: int = ACTIVE) -> LedgerValue:
    return LedgerValue(sqn, status, None, sqn * 7919, sqn % 1000, 1_700_000_000_000 + sqn)


def sample_entries(count: int) -> list[tuple[bytes, LedgerValue]]:
    return [
        (object_key(b"bucket", b"key-%06d" % i), value(i + 1, TOMBSTONE if i % 5 == 0 else ACTIVE))
        for i in range(count)
    ]


def open_reader(data: bytes, **kw: object) -> SstReader:
    return SstReader.open(NAME, len(data), lambda start, end: data[start:end], **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("format_version", [1, FORMAT_VERSION])
@settings(max_examples=150)
@given(
    entry_lists,
    st.integers(64, 2048),
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=40),
    st.lists(st.binary(max_size=40), max_size=20),
)
def test_round_trip(
    format_version: int,
    entries: list[tuple[bytes, LedgerValue]],
    block_size: int,
    start: bytes | None,
    end: bytes | None,
    probes: list[bytes],
) -> None:
    data, info = build_sst(entries, block_size=block_size, format_version=format_version)
    sqns = [v.sqn for _, v in entries]
    assert info == SstInfo(
        size=len(data),
        entry_count=len(entries),
        tombstone_count=sum(v.status == TOMBSTONE for _, v in entries),
        first_key=entries[0][0],
        last_key=entries[-1][0],
        min_sqn=min(sqns),
        max_sqn=max(sqns),
    )
    reader = open_reader(data, cache=LruCache(1 << 20))
    assert reader.info == info
    stored = dict(entries)
    for key, expected in entries:
        assert reader.get(key) == expected
        assert reader.may_contain(key)
    for probe in probes:
        assert reader.get(probe) == stored.get(probe)
    assert reader.version == format_version
    uncached = open_reader(data)
    wanted = sorted({*probes, *(k for k, _ in entries[::3])})
    for key in wanted:
        assert uncached.get(key) == stored.get(key)
    fresh = open_reader(data, cache=LruCache(1 << 20))
    for block in range(fresh.block_count):
        here = [k for k in wanted if fresh.point_block(k, bloom_hash(k)) == block]
        if here:
            assert fresh.get_in_block(block, here) == [stored.get(k) for k in here]
    assert list(reader.iter_range()) == entries
    assert list(reader.iter_range(start, end)) == [
        (k, v) for k, v in entries if (start is None or k >= start) and (end is None or k < end)
    ]


def test_a_key_inside_another_key_or_a_value_is_found_only_where_it_starts() -> None:
    # A block is searched for a key's encoding; the same bytes inside an earlier key, or inside
    # a head-only value, must not be taken for the key.
    inner = msgpack.packb(b"z")
    head_only = tuple.__new__(LedgerValue, (9, ACTIVE, None, 1, 2, 3, inner + inner))
    entries = [
        (b"\x00" + inner + b"tail", value(1)),
        (b"a", head_only),
        (b"m" + inner, value(2)),
        (b"z", value(3)),
    ]
    data, _ = build_sst(entries)
    for cache in (None, LruCache(1 << 20)):
        reader = open_reader(data, cache=cache)
        assert reader.version == FORMAT_VERSION
        assert [reader.get(k) for k, _ in entries] == [v for _, v in entries]
    # b"y" is in no key's place, yet its encoding is inside the first key: no answer for it
    # (get_in_block searches a block without asking the bloom filter first).
    entries[0] = (b"\x00" + msgpack.packb(b"y") + b"tail", value(1))
    data, _ = build_sst(entries)
    for cache in (None, LruCache(1 << 20)):
        reader = open_reader(data, cache=cache)
        assert reader.block_count == 1
        assert reader.get_in_block(0, [b"a", b"y", b"z"]) == [head_only, None, value(3)]


def test_files_of_format_version_1_stay_readable() -> None:
    entries = sample_entries(2000)
    old, _ = build_sst(entries, format_version=1)
    new, _ = build_sst(entries)
    assert struct.unpack_from(">H", old, len(old) - FOOTER_SIZE + 6) == (1,)
    assert struct.unpack_from(">H", new, len(new) - FOOTER_SIZE + 6) == (FORMAT_VERSION,)
    for data in (old, new):
        reader = open_reader(data, cache=LruCache(1 << 22))
        assert [reader.get(k) for k, _ in entries[::7]] == [v for _, v in entries[::7]]
        assert list(reader.iter_range()) == entries


def test_values_come_back_as_ledger_values() -> None:
    data, _ = build_sst(sample_entries(10))
    reader = open_reader(data)
    found = reader.get(object_key(b"bucket", b"key-000003"))
    assert type(found) is LedgerValue
    assert found == value(4)
    assert all(type(v) is LedgerValue for _, v in reader.iter_range())


def test_keys_at_the_documented_limit_round_trip() -> None:
    big = b"\x00\xff" * (MAX_KEY_BYTES // 2)
    entries = sorted((object_key(big[:-i] + bytes([i]), big, big), value(i)) for i in range(1, 6))
    data, _ = build_sst(entries)
    reader = open_reader(data, cache=LruCache(1 << 24))
    assert [reader.get(k) for k, _ in entries] == [v for _, v in entries]
    assert list(reader.iter_range()) == entries


def test_sqn_base_is_added_to_every_sqn() -> None:
    entries = sample_entries(300)
    data, info = build_sst(entries, block_size=512)
    cache = LruCache(1 << 20)
    reader = open_reader(data, sqn_base=1_000_000, cache=cache)
    assert reader.info.min_sqn == info.min_sqn + 1_000_000
    assert reader.info.max_sqn == info.max_sqn + 1_000_000
    shifted = [(k, v._replace(sqn=v.sqn + 1_000_000)) for k, v in entries]
    assert list(reader.iter_range()) == shifted
    assert reader.get(entries[42][0]) == shifted[42][1]
    # A reader without a base sharing the cache still sees the stored SQNs.
    plain = open_reader(data, cache=cache)
    assert plain.get(entries[42][0]) == entries[42][1]


def test_read_budget_two_reads_to_open_one_per_block_and_none_when_cached() -> None:
    entries = sample_entries(2000)
    data, _ = build_sst(entries)
    fetch = CountingFetch(data)
    reader = SstReader.open(NAME, len(data), fetch, cache=LruCache(1 << 22))
    assert len(fetch.calls) == 2
    assert fetch.calls[0] == (len(data) - FOOTER_SIZE, len(data))
    assert fetch.calls[1][1] == len(data) - FOOTER_SIZE
    assert reader.block_count > 10
    key, expected = entries[1234]
    assert reader.get(key) == expected
    assert len(fetch.calls) == 3
    assert reader.get(key) == expected
    assert reader.get(entries[1235][0]) == entries[1235][1]  # same block, already decoded
    assert len(fetch.calls) == 3
    assert reader.get(object_key(b"zzz", b"after-the-last-key")) is None
    assert len(fetch.calls) == 3


def run_of(reader: SstReader, block: int) -> tuple[int, int]:
    """The bytes [start, end) of the run that holds ``block``: every block that starts in the
    same aligned RUN_BYTES of the file (the oracle, from the file's own block offsets)."""
    offsets = reader._block_offsets
    lengths = reader._block_lengths
    k = offsets[block] // RUN_BYTES
    members = [b for b in range(reader.block_count) if offsets[b] // RUN_BYTES == k]
    return offsets[members[0]], offsets[members[-1]] + lengths[members[-1]]


def test_a_point_lookup_reads_its_blocks_run_once() -> None:
    entries = sample_entries(6000)
    data, _ = build_sst(entries)
    fetch = CountingFetch(data)
    reader = SstReader.open(NAME, len(data), fetch, cache=LruCache(1 << 22))
    assert reader.block_count > 3 * RUN_BYTES // DEFAULT_BLOCK_SIZE
    opened = len(fetch.calls)
    runs: set[tuple[int, int]] = set()
    for key, expected in entries[::37]:
        block = reader.point_block(key, bloom_hash(key))
        assert block is not None
        run = run_of(reader, block)
        before = len(fetch.calls)
        assert reader.get(key) == expected
        # One read of exactly the block's run the first time it is wanted; none after.
        assert fetch.calls[before:] == ([] if run in runs else [run])
        runs.add(run)
    assert len(fetch.calls) - opened == len(runs) > 3
    assert all(end - start <= RUN_BYTES + DEFAULT_BLOCK_SIZE for start, end in runs)


def decoded_blocks(reader: SstReader, cache: LruCache) -> set[int]:
    """The blocks of ``reader`` the cache holds decoded for point lookups."""
    return {
        b for b in range(reader.block_count) if cache.holds((reader.name, b, reader.sqn_base, 3))
    }


@pytest.mark.parametrize("format_version", [1, FORMAT_VERSION])
def test_a_block_looked_up_twice_is_kept_decoded_and_answers_as_stored(
    format_version: int,
) -> None:
    entries = sample_entries(3000)
    data, _ = build_sst(entries, format_version=format_version)
    cache = LruCache(1 << 24)
    fetch = CountingFetch(data)
    reader = SstReader.open(NAME, len(data), fetch, cache=cache)
    model = dict(entries)
    key, expected = entries[1500]
    block = reader.point_block(key, bloom_hash(key))
    assert block is not None
    assert reader.get(key) == expected
    # A version 2 block is searched in place the first time; a version 1 block always decodes.
    assert decoded_blocks(reader, cache) == ({block} if format_version == 1 else set())
    assert reader.get(key) == expected
    assert decoded_blocks(reader, cache) == {block}
    rng = random.Random(5)
    absent = [k + b"x" for k, _ in rng.sample(entries, 50)] + [b"", b"zz"]
    wanted = [k for k, _ in rng.sample(entries, 400)] + absent
    assert [reader.get(k) for k in wanted] == [model.get(k) for k in wanted]
    reads = len(fetch.calls)
    for _ in range(2):  # now from blocks kept decoded, reading nothing
        assert [reader.get(k) for k in wanted] == [model.get(k) for k in wanted]
    assert len(fetch.calls) == reads
    in_blocks = {reader.point_block(k, bloom_hash(k)) for k in wanted if k in model}
    assert in_blocks <= decoded_blocks(reader, cache)
    got = reader.get_in_block(block, [entries[1499][0], key, entries[1501][0], key + b"x"])
    assert got == [entries[1499][1], expected, entries[1501][1], None]


@pytest.mark.parametrize("capacity", [16 * 1024, 64 * 1024, 1 << 24])
def test_blocks_kept_decoded_stay_within_the_cache_bound(capacity: int) -> None:
    entries = sample_entries(6000)
    data, _ = build_sst(entries)
    cache = LruCache(capacity)
    reader = open_reader(data, cache=cache)
    model = dict(entries)
    keys = [k for k, _ in entries]
    for _ in range(3):
        for k in keys[::7]:
            assert reader.get(k) == model[k]
            assert cache.weight <= capacity
        assert reader.get_in_block(0, keys[:5]) == [model[k] for k in keys[:5]]
    kept = decoded_blocks(reader, cache)
    if capacity == 1 << 24:
        assert kept == set(range(reader.block_count))  # room for every block looked up twice
    elif capacity == 16 * 1024:
        assert not kept  # one run fills it: no room to keep a block decoded beside it
    else:
        assert len(kept) < reader.block_count


def test_a_scan_reads_runs_of_readahead_and_point_lookups_use_them() -> None:
    entries = sample_entries(20_000)
    data, _ = build_sst(entries)
    fetch = CountingFetch(data)
    reader = SstReader.open(NAME, len(data), fetch, cache=LruCache(1 << 24), readahead=64 * 1024)
    opened = len(fetch.calls)
    assert list(reader.iter_range()) == entries
    scan_reads = fetch.calls[opened:]
    assert all(end - start <= 64 * 1024 + DEFAULT_BLOCK_SIZE for start, end in scan_reads)
    assert [start for start, _ in scan_reads[1:]] == [end for _, end in scan_reads[:-1]]
    assert len(scan_reads) <= len(data) // (64 * 1024 - DEFAULT_BLOCK_SIZE) + 1
    fresh = SstReader.open(NAME, len(data), fetch, cache=reader._cache)
    before = len(fetch.calls)
    assert [fresh.get(k) for k, _ in entries[::11]] == [v for _, v in entries[::11]]
    assert len(fetch.calls) == before  # every block is cached: none is read again


def test_a_damaged_block_fails_each_time_and_spares_its_run() -> None:
    entries = sample_entries(3000)
    data, _ = build_sst(entries, block_size=512)
    reader = open_reader(data)
    middle = reader.block_count // 2
    damaged_at = reader._block_offsets[middle] + 3
    fetch = CountingFetch(flip(data, damaged_at, 0x40))
    reader = SstReader.open(NAME, len(data), fetch, cache=LruCache(1 << 22))
    start, end = run_of(reader, middle)
    in_run = [
        (k, v)
        for k, v in entries
        if start <= reader._block_offsets[reader.point_block(k, bloom_hash(k)) or 0] < end
    ]
    bad = [(k, v) for k, v in in_run if reader.point_block(k, bloom_hash(k)) == middle]
    good = [(k, v) for k, v in in_run if reader.point_block(k, bloom_hash(k)) != middle]
    assert bad and good
    for _ in range(2):  # the damaged block is never cached as good
        for key, _ in bad:
            with pytest.raises(CorruptionError) as info:
                reader.get(key)
            assert info.value.offset == reader._block_offsets[middle] <= damaged_at
        assert [reader.get(k) for k, _ in good] == [v for _, v in good]
        with pytest.raises(CorruptionError):
            reader.get_in_block(middle, [bad[0][0]])
    assert fetch.calls.count((start, end)) == 1


def test_without_a_cache_each_lookup_reads_one_block() -> None:
    entries = sample_entries(500)
    data, _ = build_sst(entries)
    fetch = CountingFetch(data)
    reader = SstReader.open(NAME, len(data), fetch)
    for key, expected in entries[::50]:
        before = len(fetch.calls)
        assert reader.get(key) == expected
        assert len(fetch.calls) == before + 1


def test_iter_range_reads_blocks_lazily() -> None:
    entries = sample_entries(2000)
    data, _ = build_sst(entries)
    fetch = CountingFetch(data)
    reader = SstReader.open(NAME, len(data), fetch)
    scan = reader.iter_range(entries[100][0])
    first = next(scan)
    assert first == entries[100]
    assert len(fetch.calls) == 3
    assert list(reader.iter_range(entries[10][0], entries[12][0])) == entries[10:12]


def test_estimated_size_tracks_the_final_size() -> None:
    builder = SstBuilder()
    for key, v in sample_entries(20_000):
        builder.add(key, v)
    estimate = builder.estimated_size()
    data, info = builder.finish()
    assert info.size == len(data)
    assert abs(estimate - len(data)) <= 0.1 * len(data)


def test_an_empty_sst_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one entry"):
        SstBuilder().finish()
    with pytest.raises(ValueError, match="at least one entry"):
        build_sst([])


def test_keys_out_of_order_are_refused_and_change_nothing() -> None:
    builder = SstBuilder()
    builder.add(b"b", value(1))
    for bad in (b"a", b"b"):
        with pytest.raises(ValueError, match="strictly increasing"):
            builder.add(bad, value(2))
    assert builder.entry_count == 1
    builder.add(b"c", value(3))
    data, info = builder.finish()
    assert info.entry_count == 2
    assert list(open_reader(data).iter_range()) == [(b"b", value(1)), (b"c", value(3))]
    with pytest.raises(ValueError, match="finished"):
        builder.add(b"d", value(4))
    with pytest.raises(ValueError, match="finished"):
        builder.finish()


@pytest.mark.parametrize(
    "bad",
    [
        (1, 2, None, 0, 0),  # too few fields
        (-1, ACTIVE, None, 0, 0, 0),
        (1, 7, None, 0, 0, 0),
        (1, ACTIVE, -5, 0, 0, 0),
        (1, ACTIVE, None, 2**64, 0, 0),
    ],
)
def test_bad_values_are_refused(bad: tuple[int | None, ...]) -> None:
    builder = SstBuilder()
    with pytest.raises(ValueError):
        builder.add(b"k", bad)  # type: ignore[arg-type]
    assert builder.entry_count == 0


def test_bad_builder_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="bytes"):
        SstBuilder().add("k", value(1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="block_size"):
        SstBuilder(block_size=10)
    with pytest.raises(ValueError, match="bloom_bits_per_key"):
        SstBuilder(bloom_bits_per_key=0)


def test_shared_reader_and_cache_serve_many_threads() -> None:
    entries = sample_entries(5000)
    data, _ = build_sst(entries, block_size=1024)
    reader = open_reader(data, cache=LruCache(64 * 1024))  # small: forces evictions
    start = threading.Barrier(6)
    failures: list[str] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        for _ in range(2000):
            key, expected = entries[rng.randrange(len(entries))]
            if reader.get(key) != expected:
                failures.append(f"wrong value for {key!r}")

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


# --- damage ------------------------------------------------------------------------------------

DAMAGE_ENTRIES = sample_entries(40)
DAMAGE_SST, _ = build_sst(DAMAGE_ENTRIES, block_size=256)


def read_everything(data: bytes) -> list[CorruptionError]:
    """Use every read path; assert every answer is exact; return the corruption errors seen."""
    seen: list[CorruptionError] = []

    def attempt(check: Callable[[], None]) -> None:
        try:
            check()
        except CorruptionError as exc:
            seen.append(exc)

    readers: list[SstReader] = []
    attempt(lambda: readers.append(open_reader(data, cache=LruCache(1 << 20))))
    if not readers:
        return seen
    reader = readers[0]
    for key, expected in DAMAGE_ENTRIES:

        def lookup(key: bytes = key, expected: LedgerValue = expected) -> None:
            assert reader.get(key) == expected

        attempt(lookup)
    fresh: list[SstReader] = []
    attempt(lambda: fresh.append(open_reader(data)))
    if fresh:

        def scan() -> None:
            assert list(fresh[0].iter_range()) == DAMAGE_ENTRIES

        attempt(scan)
    return seen


def assert_detected(offset: int, mask: int) -> None:
    errors = read_everything(flip(DAMAGE_SST, offset, mask))
    assert errors, f"flipping byte {offset} with {mask:#x} went unnoticed"
    for exc in errors:
        assert exc.object_name == NAME
        assert exc.offset is not None and exc.offset <= offset
        assert NAME in str(exc)


def test_the_damage_fixture_has_several_blocks() -> None:
    assert open_reader(DAMAGE_SST).block_count >= 4
    assert read_everything(DAMAGE_SST) == []


@settings(max_examples=400)
@given(st.integers(0, len(DAMAGE_SST) - 1), st.integers(1, 255))
def test_any_flipped_byte_is_detected_on_some_read_path(offset: int, mask: int) -> None:
    assert_detected(offset, mask)


def test_every_byte_is_covered_by_a_check() -> None:
    for offset in range(len(DAMAGE_SST)):
        assert_detected(offset, 0x01)


def test_truncated_or_misreported_size_is_corruption() -> None:
    data = DAMAGE_SST
    for size in (len(data) - 1, len(data) + 1, FOOTER_SIZE - 1, FOOTER_SIZE):
        with pytest.raises(CorruptionError) as info:
            SstReader.open(NAME, size, lambda s, e: data[s:e])
        assert info.value.object_name == NAME


def test_other_kinds_of_file_are_refused_clearly() -> None:
    journal = build_journal(
        [JournalEntry(1, Kind.OBJECT, b"k", b"v" * 100, (), None, 0)], writer_epoch=1
    )
    fence = build_journal([], writer_epoch=3)
    manifest = encode_manifest({"version": 1, "writer_epoch": 3, "levels": [[b"x" * 40]]})
    for other in (journal, fence, manifest):
        with pytest.raises(CorruptionError, match=r"not an inkpen SST|too short to be an SST"):
            SstReader.open(NAME, len(other), memory_fetch(other))


def test_a_newer_format_version_asks_for_an_upgrade() -> None:
    data = bytearray(DAMAGE_SST)
    footer_at = len(data) - FOOTER_SIZE
    struct.pack_into(">H", data, footer_at + 6, FORMAT_VERSION + 1)
    struct.pack_into(">I", data, len(data) - 4, zlib.crc32(data[footer_at : len(data) - 4]))
    with pytest.raises(CorruptionError, match="upgrade inkpen") as info:
        open_reader(bytes(data))
    assert info.value.offset == footer_at + 6


def test_a_keys_needle_is_its_msgpack_encoding() -> None:
    from inkpen.formats.sst import _bin_header

    for length in (0, 1, 255, 256, 65535, 65536, 70000):
        key = b"\x00\x01" * (length // 2) + b"k" * (length % 2)
        assert _bin_header(len(key)) + key == msgpack.packb(key)
