"""Journal indexes kept in a byte-bounded cache (``journal_index_cache_bytes``).

A version 2 reader keeps its SQN block index in a shared :class:`LruCache` and reads it again
when evicted; a version 1 reader pages its hash region (it keeps the table directory and a CRC
per slot page, and lookups take pages from the cache). These tests check that answers equal a
model dict and the held reader's, that the cache never weighs more than its budget however many
files are open, that each lookup reads what the format promises, and that damaged index bytes are
caught, at open and after it.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

import inkpen
from inkpen.errors import CorruptionError, UsageError
from inkpen.formats.cache import LruCache
from inkpen.formats.journal import (
    PAGE_BYTES,
    PAGE_WEIGHT,
    JournalEntry,
    JournalReader,
    Kind,
    build_journal,
    read_header,
)
from inkpen.objectstore import CountingStore, open_store
from inkpen.options import Options
from support.damage import flip
from support.fetching import CountingFetch, memory_fetch

FILES = 24
PER_FILE = 400


def make_files(rng: random.Random, version: int = 1) -> list[tuple[str, bytes, list[JournalEntry]]]:
    files = []
    sqn = 1
    for number in range(FILES):
        entries = []
        for _ in range(PER_FILE):
            key = b"k%08d" % rng.randrange(10**8)
            entries.append(JournalEntry(sqn, Kind.OBJECT, key, rng.randbytes(20), (), None, sqn))
            sqn += 1
        name = f"journal/{number:020d}.jnl"
        files.append((name, build_journal(entries, writer_epoch=1, version=version), entries))
    return files


def test_paged_lookups_equal_a_model_and_the_cache_stays_within_its_budget() -> None:
    rng = random.Random(11)
    files = make_files(rng)
    budget = 6 * PAGE_WEIGHT
    cache = LruCache(budget)
    paged: list[tuple[JournalReader, CountingFetch]] = []
    whole: list[JournalReader] = []
    model: dict[tuple[int, bytes], tuple[int, bytes]] = {}
    for number, (name, data, entries) in enumerate(files):
        fetch = CountingFetch(data)
        paged.append((JournalReader.open(name, len(data), fetch, index_cache=cache), fetch))
        whole.append(JournalReader.open(name, len(data), memory_fetch(data)))
        for entry in entries:
            model[(entry.sqn, entry.ledger_key)] = (number, entry.value or b"")
    assert cache.weight == 0  # open keeps no slots
    slot_bytes = sum(2 * PER_FILE * 16 for _ in files)
    assert slot_bytes > 20 * budget  # the tables could never all fit

    asks = list(model)
    asks += [(sqn + 10**6, key) for sqn, key in rng.sample(list(model), 300)]  # absent
    asks += [(sqn, key + b"x") for sqn, key in rng.sample(list(model), 300)]  # absent
    rng.shuffle(asks)
    weights = []
    for sqn, key in asks:
        expected = model.get((sqn, key))
        for number, (reader, fetch) in enumerate(paged):
            fetch.calls.clear()
            got = reader.value(sqn, Kind.OBJECT, key)
            want = expected[1] if expected is not None and expected[0] == number else None
            assert got == want
            assert whole[number].value(sqn, Kind.OBJECT, key) == want
            pages = [call for call in fetch.calls if call[0] >= reader.header.hash_offset]
            assert len(pages) <= 2 and all(end - start <= PAGE_BYTES for start, end in pages)
            weights.append(cache.weight)
    assert max(weights) <= budget
    assert min(weights[100:]) > budget - PAGE_WEIGHT  # it was used, not bypassed
    stats = cache.stats()
    assert stats.hits > 0 and stats.misses > 0


def test_a_paged_reader_answers_every_read_path_like_a_whole_one() -> None:
    name, data, entries = make_files(random.Random(12))[0]
    reader = JournalReader.open(name, len(data), CountingFetch(data), index_cache=LruCache(0))
    held = JournalReader.open(name, len(data), lambda s, e: data[s:e])
    assert reader.locations() == held.locations()
    for entry in entries:
        assert reader.get(entry.sqn, entry.kind, entry.ledger_key) == entry
        located = reader.locate(entry.sqn, entry.kind, entry.ledger_key)
        assert located == held.locate(entry.sqn, entry.kind, entry.ledger_key)
        assert located is not None
        assert reader.values_at([located]) == [entry.value]
    assert reader.get(entries[0].sqn, Kind.TOMBSTONE, entries[0].ledger_key) is None


def test_locate_many_answers_as_locate_does_in_few_reads_of_whole_pages() -> None:
    rng = random.Random(14)
    name, data, entries = make_files(rng)[0]
    fetch = CountingFetch(data)
    cache = LruCache(1 << 20)
    reader = JournalReader.open(name, len(data), fetch, index_cache=cache)
    held = JournalReader.open(name, len(data), lambda s, e: data[s:e])
    header = reader.header
    wanted = [(e.sqn, e.kind, e.ledger_key) for e in rng.sample(entries, 250)]
    wanted += [(sqn + 10**6, kind, key) for sqn, kind, key in wanted[:20]]  # absent
    wanted += [(sqn, Kind.TOMBSTONE, key) for sqn, _, key in wanted[:20]]  # absent
    wanted += [(-5, Kind.OBJECT, b"k"), (1 << 64, Kind.OBJECT, b"k")]  # no such SQN here
    rng.shuffle(wanted)

    fetch.calls.clear()
    located = reader.locate_many(wanted)
    assert located == [held.locate(*ask) for ask in wanted]
    assert sum(where is not None for where in located) == 250
    slot_reads = [(s, e) for s, e in fetch.calls if s >= header.hash_offset]
    assert not [call for call in fetch.calls if call not in slot_reads]  # no record is read
    slots_at = header.hash_offset + 2048
    assert all((s - slots_at) % PAGE_BYTES == 0 for s, _ in slot_reads)  # whole pages
    assert len(slot_reads) < 5  # 250 of 400 entries: their pages joined, not one read each
    assert cache.weight == 0  # pages a window wants once must not evict a point read's

    every = [(e.sqn, e.kind, e.ledger_key) for e in entries]
    for ask in every:
        reader.locate(*ask)  # now the cache holds every page
    fetch.calls.clear()
    assert reader.locate_many(wanted) == located
    assert fetch.calls == []  # pages the cache holds are taken from it
    assert held.locate_many(wanted) == located  # a held region reads nothing either


def test_locate_many_checks_every_page_it_reads() -> None:
    name, data, entries = make_files(random.Random(15))[0]
    header = read_header(data, name)
    fetch = CountingFetch(data)
    reader = JournalReader.open(name, len(data), fetch, index_cache=LruCache(1 << 20))
    fetch.data = flip(data, header.hash_offset + 2048 + 5 * PAGE_BYTES + 3, 0x41)  # page 5 damaged
    with pytest.raises(CorruptionError) as info:
        reader.locate_many([(e.sqn, e.kind, e.ledger_key) for e in entries])
    assert info.value.object_name == name


def test_every_damaged_slot_byte_is_caught_at_open_and_after_it() -> None:
    name, data, entries = make_files(random.Random(13))[0]
    header = read_header(data, name)
    for offset in range(header.hash_offset, len(data), 7):
        damaged = flip(data, offset, 0x41)
        with pytest.raises(CorruptionError) as info:
            JournalReader.open(
                name, len(data), CountingFetch(damaged), index_cache=LruCache(1 << 20)
            )
        assert info.value.object_name == name

        fetch = CountingFetch(data)
        reader = JournalReader.open(name, len(data), fetch, index_cache=LruCache(0))
        fetch.data = damaged  # the bytes change under an open reader
        errors = 0
        for entry in entries:
            try:
                assert reader.get(entry.sqn, entry.kind, entry.ledger_key) == entry
            except CorruptionError as exc:
                assert exc.object_name == name
                errors += 1
        if header.hash_offset + 2048 <= offset < len(data) - 4:  # a slot (the rest is held)
            assert errors, f"a flipped slot byte at {offset} went unnoticed by every get"
            with pytest.raises(CorruptionError):
                reader.locations()
        else:
            assert errors == 0


def test_the_option_is_checked() -> None:
    assert Options().journal_index_cache_bytes == 32 * 1024 * 1024
    for bad in (-1, 1.5, True, "32MiB"):
        with pytest.raises(UsageError, match="journal_index_cache_bytes"):
            Options(journal_index_cache_bytes=bad)  # type: ignore[arg-type]


def test_a_database_reads_right_through_a_tiny_index_cache(
    make_store_url: Callable[[str], str],
) -> None:
    url = make_store_url("local")
    rng = random.Random(14)
    options = {"roll_segments": 4, "journal_index_cache_bytes": 160}  # no index fits
    model = {b"key%06d" % i: rng.randbytes(60) for i in range(3000)}
    with inkpen.open(url, **options) as book:
        for key, value in model.items():
            book.put("b", key, value)
    store = CountingStore(open_store(url))
    try:
        assert len(list(store.list("journal/"))) > 4  # several journal files
        with inkpen.open(store, **options) as book:
            for key in rng.sample(sorted(model), 500):
                assert book.get("b", key) == model[key]
            with book.objects("b") as rows:
                assert {key: value for _, key, value in rows} == model
    finally:
        store.close()


# --- version 2: the SQN block index ------------------------------------------------------------


def block_ranges(data: bytes) -> list[tuple[int, int]]:
    """``(start, end)`` of every block of a version 2 file, decoded here from its index region."""
    header = read_header(data, "x")
    region = data[header.hash_offset : len(data) - 4]
    offsets = [int.from_bytes(region[at + 8 : at + 16], "big") for at in range(0, len(region), 16)]
    return list(zip(offsets, [*offsets[1:], header.hash_offset], strict=True))


def test_block_indexes_under_a_tiny_cache_answer_as_a_model_within_the_budget() -> None:
    rng = random.Random(21)
    files = make_files(rng, version=2)
    one_index = len(block_ranges(files[0][1])) * 16
    budget = 3 * (one_index + 400)  # about three of the 24 files' indexes
    cache = LruCache(budget)
    readers: list[tuple[JournalReader, CountingFetch, set[tuple[int, int]]]] = []
    model: dict[tuple[int, bytes], tuple[int, bytes]] = {}
    for number, (name, data, entries) in enumerate(files):
        fetch = CountingFetch(data)
        readers.append(
            (JournalReader.open(name, len(data), fetch, index_cache=cache), fetch, set())
        )
        readers[-1][2].update(block_ranges(data))
        for entry in entries:
            model[(entry.sqn, entry.ledger_key)] = (number, entry.value or b"")
    assert cache.weight <= budget
    asks = rng.sample(list(model), 1500)
    asks += [(sqn, key + b"x") for sqn, key in rng.sample(list(model), 200)]  # absent
    rng.shuffle(asks)
    weights = []
    index_reads = 0
    for sqn, key in asks:
        expected = model.get((sqn, key))
        for number, (reader, fetch, blocks) in enumerate(readers):
            fetch.calls.clear()
            got = reader.value(sqn, Kind.OBJECT, key)
            want = expected[1] if expected is not None and expected[0] == number else None
            assert got == want
            header = reader.header
            if not header.min_sqn <= sqn <= header.max_sqn:
                assert fetch.calls == []  # outside the file's SQN range: nothing is read
                continue
            index = [call for call in fetch.calls if call == (header.hash_offset, header.size)]
            others = [call for call in fetch.calls if call not in index]
            assert len(index) <= 1 and len(others) == 1
            assert others[0] in blocks  # exactly one block, read whole
            index_reads += len(index)
            weights.append(cache.weight)
    assert max(weights) <= budget
    assert index_reads > 0  # evicted indexes were read again
    assert cache.stats().hits > 0


def test_a_block_index_that_fits_makes_every_get_one_read() -> None:
    name, data, entries = make_files(random.Random(22), version=2)[0]
    fetch = CountingFetch(data)
    reader = JournalReader.open(name, len(data), fetch, index_cache=LruCache(1 << 20))
    assert len(fetch.calls) == 2  # the header, the index
    blocks = set(block_ranges(data))
    assert len(blocks) > 1
    for entry in entries:
        fetch.calls.clear()
        assert reader.get(entry.sqn, entry.kind, entry.ledger_key) == entry
        assert len(fetch.calls) == 1 and fetch.calls[0] in blocks


def test_locate_many_of_a_block_index_reads_nothing_and_names_blocks() -> None:
    rng = random.Random(23)
    name, data, entries = make_files(rng, version=2)[0]
    fetch = CountingFetch(data)
    reader = JournalReader.open(name, len(data), fetch, index_cache=LruCache(1 << 20))
    blocks = set(block_ranges(data))
    chosen = rng.sample(entries, 250)
    wanted = [(e.sqn, e.kind, e.ledger_key) for e in chosen]
    fetch.calls.clear()
    located = reader.locate_many(wanted)
    assert fetch.calls == []
    assert located == [reader.locate(*ask) for ask in wanted]
    assert all(where is not None and (where[1], where[1] + where[2]) in blocks for where in located)
    assert len({where[1] for where in located if where is not None}) < len(located)  # shared
    order = sorted(range(len(located)), key=lambda at: located[at][1])  # type: ignore[index]
    bodies = reader.values_at([located[at] for at in order])  # type: ignore[misc]
    assert bodies == [chosen[at].value for at in order]
    assert len(fetch.calls) == 1  # the blocks touch: one read of all of them
    for where, entry in zip(located, chosen, strict=True):
        assert where is not None
        block = data[where[1] : where[1] + where[2]]
        assert reader.body_of(block, where[0], where[1]) == entry.value


def test_every_damaged_block_index_byte_is_caught_at_open_and_after_it() -> None:
    name, data, entries = make_files(random.Random(24), version=2)[0]
    header = read_header(data, name)
    for offset in range(header.hash_offset, len(data), 3):
        damaged = flip(data, offset, 0x41)
        with pytest.raises(CorruptionError) as info:
            JournalReader.open(
                name, len(data), CountingFetch(damaged), index_cache=LruCache(1 << 20)
            )
        assert info.value.object_name == name
        assert info.value.offset == header.hash_offset

        fetch = CountingFetch(data)
        reader = JournalReader.open(name, len(data), fetch, index_cache=LruCache(0))
        fetch.data = damaged  # the index, evicted at once, is read again damaged
        for entry in entries[::50]:
            with pytest.raises(CorruptionError):
                reader.get(entry.sqn, entry.kind, entry.ledger_key)
