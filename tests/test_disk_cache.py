"""The local disk cache (options ``cache_dir``, ``cache_dir_bytes``): a restarted process reads
what it cached with no request; damaged, swapped or deleted part files are never answered; the
bound holds; several processes share one directory while one evicts; only immutable files are
cached, under keys an older object could not answer."""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import inkpen
from inkpen.manifest.disk_cache import LAYOUT, PART_BYTES, DiskCache
from inkpen.objectstore import CountingStore, open_store
from support.disk_cache_process import KEYS, value_of

CHILD = Path(__file__).parent / "support" / "disk_cache_process.py"
NO_MEMORY: dict[str, Any] = {
    "block_cache_bytes": 0,
    "journal_cache_bytes": 0,
    "journal_index_cache_bytes": 0,
}
"""Every read goes through the disk cache."""


def key_of(i: int) -> str:
    return f"k{i:05d}"


@pytest.fixture
def database(durable_kind: str, make_store_url: Callable[[str], str]) -> str:
    """Bucket ``d`` of :data:`KEYS` objects (values of ``value_of``), merged and rolled."""
    url = make_store_url(durable_kind)
    with inkpen.open(url) as book:
        for start in range(0, KEYS, 500):
            batch = inkpen.Batch()
            for i in range(start, min(KEYS, start + 500)):
                batch.put("d", key_of(i), value_of(i))
            book.write(batch)
        book.flush()
        book.compact_ledger()
    return url


@pytest.fixture
def local_database(make_store_url: Callable[[str], str]) -> str:
    url = make_store_url("local")
    with inkpen.open(url) as book:
        for start in range(0, KEYS, 500):
            batch = inkpen.Batch()
            for i in range(start, min(KEYS, start + 500)):
                batch.put("d", key_of(i), value_of(i))
            book.write(batch)
    return url


def part_files(directory: Path) -> list[Path]:
    root = directory / LAYOUT
    return sorted(p for p in root.glob("*/*") if not p.name.startswith(".tmp-"))


def cached_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in (directory / LAYOUT).glob("*/*"))


def get_all(reader: inkpen.Reader | inkpen.Bookie, keys: list[int]) -> None:
    for i in keys:
        assert reader.get("d", key_of(i)) == value_of(i)


SAMPLE = random.Random(9).sample(range(KEYS), 200)


def test_a_restarted_reader_reads_what_it_cached_with_no_request(
    database: str, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    first = CountingStore(open_store(database))
    with inkpen.open_reader(first, cache_dir=str(cache)) as reader:
        before = first.snapshot()["gets"]
        get_all(reader, SAMPLE)
        assert first.snapshot()["gets"] > before  # cold: read from the store
    assert part_files(cache)
    again = CountingStore(open_store(database))
    with inkpen.open_reader(again, cache_dir=str(cache)) as reader:
        before = again.snapshot()["gets"]
        get_all(reader, SAMPLE)
        assert again.snapshot()["gets"] == before
        get_all(reader, SAMPLE)
    first.close()
    again.close()


def test_a_restarted_bookie_reads_what_it_cached_with_no_request(
    database: str, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    with inkpen.open(database, cache_dir=cache) as book:  # an os.PathLike is taken too
        get_all(book, SAMPLE)
    store = CountingStore(open_store(database))
    with inkpen.open(store, cache_dir=str(cache)) as book:
        book.run_gc()  # the GC pass the open started reads through the same store
        before = store.snapshot()["gets"]
        get_all(book, SAMPLE)
        assert store.snapshot()["gets"] == before
    store.close()


def test_an_open_reads_footers_and_indexes_from_the_cache(
    local_database: str, tmp_path: Path
) -> None:
    """A Reader's open reads each file's footer and index: a second open, from the cache."""
    cache = str(tmp_path / "cache")
    with inkpen.open_reader(local_database, cache_dir=cache):
        pass
    store = CountingStore(open_store(local_database))
    with inkpen.open_reader(store, cache_dir=cache):
        ranged = store.snapshot()["gets"]
    with inkpen.open_reader(local_database) as reader:
        metrics = reader.metrics()
        files = sum(metrics.level_files) + metrics.journal_files  # level_files[0] is L0's
    assert files > 0
    # What the open still reads is the manifest (and the segments' listing): no file's parts.
    plain = CountingStore(open_store(local_database))
    with inkpen.open_reader(plain):
        uncached = plain.snapshot()["gets"]
    assert ranged <= uncached - 2 * files
    store.close()
    plain.close()


@pytest.mark.parametrize("damage", ["flip", "truncate", "swap", "empty"])
def test_damaged_part_files_are_dropped_and_read_again(
    local_database: str, tmp_path: Path, damage: str
) -> None:
    cache = tmp_path / "cache"
    with inkpen.open_reader(local_database, cache_dir=str(cache), **NO_MEMORY) as reader:
        get_all(reader, SAMPLE)
    files = part_files(cache)
    assert len(files) >= 2
    for at, path in enumerate(files):
        data = path.read_bytes()
        if damage == "flip":
            spot = len(data) // 2
            path.write_bytes(data[:spot] + bytes([data[spot] ^ 0x40]) + data[spot + 1 :])
        elif damage == "truncate":
            path.write_bytes(data[: len(data) - 7])
        elif damage == "empty":
            path.write_bytes(b"")
        elif at % 2:  # swap: each pair of files trades contents (whole, valid, other keys)
            other = files[at - 1]
            mine = path.read_bytes()
            path.write_bytes(other.read_bytes())
            other.write_bytes(mine)
    store = CountingStore(open_store(local_database))
    with inkpen.open_reader(store, cache_dir=str(cache), **NO_MEMORY) as reader:
        before = store.snapshot()["gets"]
        get_all(reader, SAMPLE)
        assert store.snapshot()["gets"] > before  # the damaged parts were read again
        disk = reader._tables.disk_cache  # type: ignore[union-attr]
        assert disk is not None and disk.stats().damaged > 0
        # Read again and kept whole: now they answer from disk.
        before = store.snapshot()["gets"]
        get_all(reader, SAMPLE)
        assert store.snapshot()["gets"] == before
    store.close()


def test_parts_deleted_under_readers_are_read_again(local_database: str, tmp_path: Path) -> None:
    """Four threads get keys through the disk cache while another deletes part files as they
    come: every value is right."""
    cache = tmp_path / "cache"
    stop = threading.Event()
    errors: list[BaseException] = []
    deleted = 0

    def delete() -> None:
        nonlocal deleted
        while not stop.is_set():
            for path in part_files(cache):
                try:
                    path.unlink()
                    deleted += 1
                except FileNotFoundError:
                    pass
                if stop.is_set():
                    return

    with inkpen.open_reader(local_database, cache_dir=str(cache), **NO_MEMORY) as reader:

        def read(seed: int) -> None:
            try:
                rng = random.Random(seed)
                for _ in range(300):
                    i = rng.randrange(KEYS)
                    assert reader.get("d", key_of(i)) == value_of(i)
            except BaseException as exc:
                errors.append(exc)

        deleter = threading.Thread(target=delete)
        deleter.start()
        readers = [threading.Thread(target=read, args=(seed,)) for seed in range(4)]
        for thread in readers:
            thread.start()
        for thread in readers:
            thread.join()
        stop.set()
        deleter.join()
    assert not errors, errors[0]
    assert deleted > 0


def test_the_bound_holds_while_the_least_recently_used_go(
    local_database: str, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    bound = 1024 * 1024
    with inkpen.open_reader(
        local_database, cache_dir=str(cache), cache_dir_bytes=bound, **NO_MEMORY
    ) as reader:
        rng = random.Random(3)
        for _ in range(400):
            i = rng.randrange(KEYS)
            assert reader.get("d", key_of(i)) == value_of(i)
            assert cached_bytes(cache) <= bound
        disk = reader._tables.disk_cache  # type: ignore[union-attr]
        assert disk is not None and disk.stats().evicted > 0


def test_eviction_keeps_the_most_recently_used(tmp_path: Path) -> None:
    """Parts read again lately outlive parts untouched since they were written."""
    store = open_store(str(tmp_path / "store"))
    store.put_if_absent("ledger/x.sst", bytes(range(256)) * 4096)  # 1 MiB: 16 parts
    size = 1 << 20
    cache = DiskCache(str(tmp_path / "cache"), 1024 * 1024)
    cached = cache.object(store, "ledger/x.sst", size)
    for part in range(8):
        cached.get_range(part * PART_BYTES, part * PART_BYTES + 10)
    files = part_files(tmp_path / "cache")
    old = 1_000_000_000.0
    for at, path in enumerate(sorted(files, key=lambda p: p.stat().st_mtime_ns)):
        os.utime(path, (old + at, old + at))  # written long ago, in order
    hot = cached.get_range(0, 10)  # part 0 read again: marked recent
    assert hot == bytes(range(10))
    for part in range(8, 16):  # eight more parts: the bound forces evictions
        cached.get_range(part * PART_BYTES, part * PART_BYTES + 10)
    assert cache.stats().evicted > 0
    counting = CountingStore(store)
    again = cache.object(counting, "ledger/x.sst", size)
    assert again.get_range(0, 10) == bytes(range(10))
    assert counting.snapshot()["gets"] == 0  # part 0 survived: it was used last
    assert again.get_range(PART_BYTES, PART_BYTES + 10) == bytes(range(10))
    assert counting.snapshot()["gets"] == 1  # part 1 was the least recently used: evicted


def test_two_processes_share_a_directory_while_one_evicts(
    local_database: str, tmp_path: Path
) -> None:
    """One process with a tight bound evicts all the time, the other with a loose one reads
    from the same directory: both read every value right."""
    cache = str(tmp_path / "cache")
    tight, loose = 1024 * 1024, 64 * 1024 * 1024
    children = [
        subprocess.Popen(
            [sys.executable, str(CHILD), local_database, cache, str(bound), str(seed), "600"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed, bound in ((1, tight), (2, loose))
    ]
    outputs = [child.communicate(timeout=600) for child in children]
    for child, (out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, (out, err[-3000:])
        assert out.startswith("ok "), out
    evicted = int(outputs[0][0].split()[3])
    assert evicted > 0  # the tight one evicted
    assert int(outputs[1][0].split()[1]) > 0  # the loose one found parts on disk


def test_only_sst_and_journal_files_are_cached(database: str, tmp_path: Path) -> None:
    """Manifests and journal segments are never kept: every part file names an SST or a
    journal file, its size and its part, under the store's URL."""
    cache = tmp_path / "cache"
    with inkpen.open(database, cache_dir=str(cache)) as book:
        book.put("d", "fresh", b"x" * 3000)  # an unrolled segment too
        get_all(book, SAMPLE)
        assert book.get("d", "fresh") == b"x" * 3000
    with inkpen.open_reader(database, cache_dir=str(cache)) as reader:
        get_all(reader, SAMPLE)
    names = set()
    for path in part_files(cache):
        data = path.read_bytes()
        (length,) = struct.unpack_from(">I", data, 8)
        url, name, size, part = data[12 : 12 + length].decode().split("\x00")
        assert url == open_store(database).url
        assert int(size) > 0 and int(part) >= 0
        names.add(name)
    assert names
    assert all(
        (n.startswith("ledger/") and n.endswith(".sst")) or n.startswith("journal/compacted/")
        for n in names
    ), names


def test_an_object_of_another_size_under_the_same_name_is_never_answered(
    tmp_path: Path,
) -> None:
    """Names are never reused; were one reused, the size in the key keeps the older bytes out."""
    store = open_store(str(tmp_path / "store"))
    store.put("ledger/x.sst", b"a" * 1000)
    cache = DiskCache(str(tmp_path / "cache"), 1024 * 1024)
    assert cache.object(store, "ledger/x.sst", 1000).get_range(0, 1000) == b"a" * 1000
    store.delete("ledger/x.sst")
    store.put("ledger/x.sst", b"b" * 1200)
    counting = CountingStore(store)
    assert cache.object(counting, "ledger/x.sst", 1200).get_range(0, 1000) == b"b" * 1000
    assert counting.snapshot()["gets"] == 1


def test_a_short_answer_of_the_store_is_not_kept(tmp_path: Path) -> None:
    """An object shorter than its descriptor says: the reader gets the short answer (and
    reports the damage), the cache keeps nothing of it."""
    store = open_store(str(tmp_path / "store"))
    store.put("ledger/x.sst", b"a" * 1000)
    cache = DiskCache(str(tmp_path / "cache"), 1024 * 1024)
    assert cache.object(store, "ledger/x.sst", 2000).get_range(0, 2000) == b"a" * 1000
    assert part_files(tmp_path / "cache") == []
