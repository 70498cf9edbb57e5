"""Ranged reads of a journal file through the shared chunk cache (:class:`ChunkedFetch`), counted
in bytes read from a memory store: every answer equals a slice of the object, a small range reads
about its own size whether or not it crosses a chunk boundary, and a large one reads whole
chunks that later small reads then find in memory."""

from __future__ import annotations

import random

import pytest

from inkpen.formats.cache import LruCache
from inkpen.manifest.fetch import ChunkedFetch
from inkpen.objectstore import CountingStore, open_store

CHUNK = 4096
SIZE = 10 * CHUNK + 123


@pytest.fixture
def counted() -> tuple[CountingStore, bytes]:
    store = CountingStore(open_store(f"memory://chunked-{random.getrandbits(48):x}"))
    data = random.Random(3).randbytes(SIZE)
    store.put("journal/file", data)
    store.reset()
    return store, data


def fetch_of(store: CountingStore, capacity: int = 1 << 20) -> ChunkedFetch:
    return ChunkedFetch(store, "journal/file", SIZE, LruCache(capacity), CHUNK)


@pytest.mark.parametrize("start", [CHUNK - 100, 3 * CHUNK - 1, 2 * CHUNK - 255])
def test_a_small_range_across_a_chunk_boundary_reads_only_itself(
    counted: tuple[CountingStore, bytes], start: int
) -> None:
    store, data = counted
    fetch = fetch_of(store)
    end = start + CHUNK // 16
    assert fetch(start, end) == data[start:end]
    assert store.snapshot()["bytes_read"] == end - start
    assert fetch(start, end) == data[start:end]  # the second time from the cache
    assert store.snapshot()["bytes_read"] == end - start


def test_a_small_range_across_cached_chunks_reads_nothing(
    counted: tuple[CountingStore, bytes],
) -> None:
    store, data = counted
    fetch = fetch_of(store)
    assert fetch(CHUNK, 3 * CHUNK) == data[CHUNK : 3 * CHUNK]  # large: two whole chunks
    read = store.snapshot()["bytes_read"]
    assert read == 2 * CHUNK
    start = 2 * CHUNK - 40
    assert fetch(start, start + 80) == data[start : start + 80]
    assert store.snapshot()["bytes_read"] == read


def test_every_range_equals_the_slice_and_small_ones_never_read_a_chunk(
    counted: tuple[CountingStore, bytes],
) -> None:
    store, data = counted
    fetch = fetch_of(store, capacity=3 * CHUNK)  # room for a few chunks: entries get evicted
    rng = random.Random(9)
    for _ in range(2000):
        start = rng.randrange(SIZE)
        length = rng.choice([1, 17, CHUNK // 16, CHUNK // 16 + 1, CHUNK, 3 * CHUNK])
        end = min(SIZE, start + length)
        before = store.snapshot()["bytes_read"]
        assert fetch(start, end) == data[start:end]
        if end - start <= CHUNK // 16:
            assert store.snapshot()["bytes_read"] - before <= end - start
