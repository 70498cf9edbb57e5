"""Planning a Spark read without Spark: read options become exact ranges, partitions tile them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inkpen.errors import UsageError
from inkpen.formats.keys import Tag, index_key, object_key
from inkpen.manifest.model import (
    JournalFileDescriptor,
    JournalState,
    LedgerState,
    Manifest,
    SstDescriptor,
)
from inkpen.pipeline.options import ReadOptions, parse_read_options
from inkpen.pipeline.plan import slice_manifest
from inkpen.pipeline.ranges import KeyRange, Scope
from inkpen.pipeline.splits import KeyScale, split_ranges

names = st.lists(st.sampled_from(b"\x00ab\xff"), min_size=1, max_size=6).map(bytes)
"""Short names over the bytes that matter to the key encoding: NUL, 0xFF and two letters."""


def covered(ranges: list[KeyRange], encoded: bytes) -> bool:
    return any(lo <= encoded < hi for lo, hi in ranges)


def options(**given: object) -> ReadOptions:
    return ReadOptions(url="memory://unused", **given)  # type: ignore[arg-type]


def test_an_unfiltered_read_covers_every_object_and_nothing_else() -> None:
    (whole,) = Scope.of(options()).ranges()
    assert covered([whole], object_key(b"any", b"key"))
    assert covered([whole], object_key(b"\xff\xff", b"\xff"))
    assert not covered([whole], index_key(b"any", b"f", b"t", b"key"))
    assert not covered([whole], object_key(b"any", b"key", tag=Tag.HEAD))


def test_a_bucket_option_gives_one_range_of_that_bucket() -> None:
    (only,) = Scope.of(options(bucket=b"users")).ranges()
    assert covered([only], object_key(b"users", b""))
    assert covered([only], object_key(b"users", b"\xff\xff"))
    assert not covered([only], object_key(b"user", b"sk"))
    assert not covered([only], object_key(b"users\x00", b"k"))


def test_a_prefix_option_covers_exactly_the_keys_that_start_with_it() -> None:
    ranges = Scope.of(options(bucket=b"users", prefix=b"al")).ranges()
    assert covered(ranges, object_key(b"users", b"al"))
    assert covered(ranges, object_key(b"users", b"alice"))
    assert not covered(ranges, object_key(b"users", b"a"))
    assert not covered(ranges, object_key(b"users", b"am"))
    assert not covered(ranges, object_key(b"other", b"alice"))


def test_start_end_and_prefix_need_a_bucket() -> None:
    for name in ("start", "end", "prefix"):
        with pytest.raises(UsageError, match="need option bucket"):
            parse_read_options({"path": "memory://x", name: "k"})


@settings(max_examples=300)
@given(
    bucket=names,
    start=st.none() | names,
    end=st.none() | names,
    prefix=st.none() | names,
    probes=st.lists(st.tuples(names, names), min_size=1, max_size=12),
)
def test_option_ranges_select_exactly_the_matching_objects(
    bucket: bytes,
    start: bytes | None,
    end: bytes | None,
    prefix: bytes | None,
    probes: list[tuple[bytes, bytes]],
) -> None:
    scope = Scope.of(options(bucket=bucket, start=start, end=end, prefix=prefix))
    ranges = scope.ranges()
    assert ranges == sorted(ranges)
    for probe_bucket, key in [*probes, *((bucket, k) for _, k in probes)]:
        expected = (
            probe_bucket == bucket
            and (start is None or key >= start)
            and (end is None or key <= end)
            and (prefix is None or key.startswith(prefix))
        )
        assert covered(ranges, object_key(probe_bucket, key)) == expected, (probe_bucket, key)


@given(
    ends=st.lists(st.binary(max_size=30), min_size=2, max_size=2),
    probes=st.lists(st.binary(max_size=30)),
)
def test_a_key_scale_keeps_key_order(ends: list[bytes], probes: list[bytes]) -> None:
    low, high = sorted(ends)
    scale = KeyScale(low, high)
    keys = [scale.key_at(j / 16) for j in range(17)]
    assert keys == sorted(keys)
    ordered = sorted(probes)
    positions = [scale.position(p) for p in ordered]
    assert positions == sorted(positions)
    assert all(0.0 <= p <= 1.0 for p in positions)


def test_a_key_scale_reads_decimal_keys_as_numbers() -> None:
    scale = KeyScale(b"key-0000", b"key-9999")
    assert scale.key_at(0.125)[:8] == b"key-1249"
    assert scale.position(b"key-5000") == pytest.approx(5000 / 9999)


def sst(name: str, first: bytes, last: bytes, size: int) -> SstDescriptor:
    return SstDescriptor(
        name=f"ledger/{name}.sst",
        first_key=first,
        last_key=last,
        min_sqn=1,
        max_sqn=1,
        size=size,
        entry_count=1,
        tombstone_count=0,
    )


def tiles(ranges: list[KeyRange], partitions: list[tuple[KeyRange, ...]]) -> bool:
    """True when the partitions' ranges, in order, are exactly ``ranges`` cut at points."""
    pieces = [piece for partition in partitions for piece in partition]
    joined: list[KeyRange] = []
    for lo, hi in pieces:
        if not lo < hi:
            return False
        if joined and joined[-1][1] == lo:
            joined[-1] = (joined[-1][0], hi)
        else:
            joined.append((lo, hi))
    return joined == ranges


@settings(max_examples=200)
@given(
    bounds=st.lists(st.binary(min_size=1, max_size=5), min_size=2, max_size=8, unique=True),
    files=st.lists(
        st.tuples(st.binary(max_size=5), st.binary(max_size=5), st.integers(1, 10_000)),
        max_size=12,
    ),
    count=st.integers(1, 9),
)
def test_partitions_tile_the_scan_ranges_exactly(
    bounds: list[bytes], files: list[tuple[bytes, bytes, int]], count: int
) -> None:
    ordered = sorted(bounds)
    ranges = [(ordered[i], ordered[i + 1]) for i in range(0, len(ordered) - 1, 2)]
    ssts = [sst(f"f{i}", min(a, b), max(a, b), size) for i, (a, b, size) in enumerate(files)]
    partitions = split_ranges(ranges, ssts, count)
    assert tiles(ranges, partitions)


def test_partitions_of_overlapping_files_are_balanced() -> None:
    # Eight files spanning the same keys, as eight bulk-load tasks of shuffled rows write them.
    keys = [object_key(b"users", b"key-%07d" % n) for n in range(0, 10_000_000, 1000)]
    ssts = [sst(f"f{i}", keys[0], keys[-1], 4_000_000) for i in range(8)]
    ranges = Scope.of(options(bucket=b"users")).ranges()
    partitions = split_ranges(ranges, ssts, 8)
    assert len(partitions) == 8
    assert tiles(ranges, partitions)
    counts = [sum(covered(list(partition), key) for key in keys) for partition in partitions]
    assert sum(counts) == len(keys)
    assert all(0.8 * len(keys) / 8 <= count <= 1.2 * len(keys) / 8 for count in counts), counts


def test_a_narrow_range_of_wide_files_still_gets_every_partition() -> None:
    # Files spanning four buckets; the read wants a tenth of one bucket, in eight partitions.
    first, last = object_key(b"bucket-0", b"key-0000000"), object_key(b"bucket-3", b"key-9999999")
    ssts = [sst(f"f{i}", first, last, 4_000_000) for i in range(8)]
    scope = Scope.of(options(bucket=b"bucket-1", start=b"key-1000000", end=b"key-1999999"))
    ranges = scope.ranges()
    partitions = split_ranges(ranges, ssts, 8)
    assert len(partitions) == 8
    assert tiles(ranges, partitions)
    keys = [object_key(b"bucket-1", b"key-%07d" % n) for n in range(1_000_000, 2_000_000, 100)]
    counts = [sum(covered(list(partition), key) for key in keys) for partition in partitions]
    assert sum(counts) == len(keys)
    assert all(0.8 * len(keys) / 8 <= count <= 1.2 * len(keys) / 8 for count in counts), counts


def test_a_partition_reads_only_the_files_its_ranges_touch() -> None:
    low, high = sst("low", b"oa", b"ob", 10), sst("high", b"ox", b"oy", 10)
    index = sst("index", b"i", b"i\xff", 10)
    in_ledger = JournalFileDescriptor("journal/compacted/a.jnl", 1, 5, 100, 5, in_ledger=True)
    above = JournalFileDescriptor("journal/compacted/b.jnl", 6, 9, 100, 4)
    manifest = Manifest(
        journal=JournalState(files=(in_ledger, above)),
        ledger=LedgerState(levels=((high, low), (index,)), persisted_sqn=7),
    )
    cut = slice_manifest(manifest, ((b"oa", b"oc"),), values=True, indexes=False)
    assert cut.ledger.levels == ((low,), ())
    assert cut.journal.files == (in_ledger, above)
    with_indexes = slice_manifest(manifest, ((b"ow", b"oz"),), values=False, indexes=True)
    assert with_indexes.ledger.levels == ((high,), (index,))
    assert with_indexes.journal.files == (above,)
