"""Cold reads go to the store together: a cold get is one request, 32 threads' cold gets are all
in flight at once (no lock is held across a request anywhere on the read path: block cache, file
handles, journal blocks, indexes), and threads that want the same block share one read.

The gate (:class:`~support.gates.GatedStore`) lets no read of an SST or journal file through
until 32 are in flight: a lock held across a request by any layer, or reads made one at a time,
would keep them from all being in flight, and the gets would fail."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator

import pytest

import inkpen
from inkpen.formats.cache import LruCache
from inkpen.formats.keys import LedgerValue, object_key
from inkpen.formats.sst import SstReader, build_sst
from inkpen.objectstore import CountingStore, open_store
from support.gates import GatedStore
from support.waiting import wait_until

THREADS = 32
SMALL = 6000
"""Objects of 100 bytes (their values kept in the ledger)."""
LARGE = 4000
"""Objects of 2,000 bytes (their values in the journal)."""


def small_key(i: int) -> str:
    return f"k{i:06d}"


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[tuple[str, str], bytes]]:
    """A local database: bucket ``s`` of small values, ``j`` of values in the journal; merged
    into one level, its segments rolled into journal files of about 256 KiB. Answers its URL and
    the model."""
    url = str(tmp_path_factory.mktemp("concurrent") / "db")
    rng = random.Random(1)
    model: dict[tuple[str, str], bytes] = {}
    with inkpen.open(url, roll_bytes=256 * 1024, max_batch_bytes=64 * 1024) as book:
        batch = inkpen.Batch()
        for bucket, count, size in (("s", SMALL, 100), ("j", LARGE, 2000)):
            for i in range(count):
                value = rng.randbytes(size)
                model[(bucket, small_key(i))] = value
                batch.put(bucket, small_key(i), value)
                if len(batch) == 100:  # a batch is one segment, never split
                    book.write(batch)
                    batch = inkpen.Batch()
        book.flush()
        book.compact_ledger()
    return url, model


def spaced(count: int, total: int) -> list[str]:
    """``total // count``-spaced keys: no two in one ledger run (about 80 small entries)."""
    stride = total // THREADS
    return [small_key(i * stride + stride // 2) for i in range(count)]


def run_threads(work: Callable[[int], None], count: int = THREADS) -> None:
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            work(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


@pytest.fixture
def gated(
    database: tuple[str, dict[tuple[str, str], bytes]],
) -> Iterator[tuple[GatedStore, inkpen.Reader]]:
    url, _ = database
    store = GatedStore(open_store(url), THREADS)
    reader = inkpen.open_reader(store)
    try:
        yield store, reader
    finally:
        reader.close()
        store.close()


def test_a_cold_get_is_one_request(database: tuple[str, dict[tuple[str, str], bytes]]) -> None:
    url, model = database
    store = CountingStore(open_store(url))
    with inkpen.open_reader(store) as reader:
        for key in spaced(THREADS, SMALL):
            before = store.snapshot()["gets"]
            assert reader.get("s", key) == model[("s", key)]
            assert store.snapshot()["gets"] - before == 1
        for key in spaced(THREADS, LARGE):
            assert reader.head("j", key) is not None  # its ledger block, now cached
            before = store.snapshot()["gets"]
            assert reader.get("j", key) == model[("j", key)]
            assert store.snapshot()["gets"] - before == 1


def test_32_cold_gets_of_ledger_blocks_are_in_flight_together(
    database: tuple[str, dict[tuple[str, str], bytes]],
    gated: tuple[GatedStore, inkpen.Reader],
) -> None:
    _, model = database
    store, reader = gated
    keys = spaced(THREADS, SMALL)
    store.armed = True
    run_threads(lambda i: _check(reader.get("s", keys[i]), model[("s", keys[i])]))
    assert store.reads == THREADS


def test_32_cold_gets_of_journal_blocks_are_in_flight_together(
    database: tuple[str, dict[tuple[str, str], bytes]],
    gated: tuple[GatedStore, inkpen.Reader],
) -> None:
    _, model = database
    store, reader = gated
    keys = spaced(THREADS, LARGE)
    for key in keys:
        assert reader.head("j", key) is not None  # ledger blocks cached: a get reads its block
    store.armed = True
    run_threads(lambda i: _check(reader.get("j", keys[i]), model[("j", keys[i])]))
    assert store.reads == THREADS


def test_32_cold_gets_that_read_evicted_journal_indexes_are_in_flight_together(
    database: tuple[str, dict[tuple[str, str], bytes]],
) -> None:
    """With no room for journal block indexes (``journal_index_cache_bytes=0``), a get reads its
    file's index again, then its block: gets of keys in different journal files read their
    indexes all at once, then their blocks all at once."""
    url, model = database
    with inkpen.open_reader(url) as probe:
        files = probe._current().journal.files
        first_sqn = SMALL + 1  # bucket j was written after bucket s, in key order
        keys = [
            small_key(handle.descriptor.min_sqn - first_sqn)
            for handle in files
            if handle.descriptor.min_sqn >= first_sqn
        ]
    assert len(keys) >= 8, len(keys)
    store = GatedStore(open_store(url), len(keys))
    with inkpen.open_reader(store, journal_index_cache_bytes=0) as reader:
        for key in keys:
            assert reader.head("j", key) is not None
        store.armed = True
        run_threads(lambda i: _check(reader.get("j", keys[i]), model[("j", keys[i])]), len(keys))
    assert store.reads == 2 * len(keys)


def _check(found: bytes | None, expected: bytes) -> None:
    assert found == expected


def test_threads_wanting_one_cold_block_share_one_read() -> None:
    """Eight threads get keys of one block of a cold SST: one read, the other seven wait for
    it (they are seen waiting before the read is let go)."""
    entries = [
        (object_key(b"b", b"k%04d" % i), LedgerValue(i + 1, 0, None, 0, 10, 0)) for i in range(200)
    ]
    data, _ = build_sst(entries)
    release = threading.Event()
    reads: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        reads.append((start, end))
        if len(reads) > 2:  # the footer and the tail are the open's
            assert release.wait(30)
        return data[start:end]

    cache = LruCache(1 << 20)
    reader = SstReader.open("ledger/x.sst", len(data), fetch, cache=cache)
    opened = len(reads)
    wanted = [entries[i] for i in range(8)]  # the first block holds them all
    found: list[object] = [None] * len(wanted)

    def get(i: int) -> None:
        found[i] = reader.get(wanted[i][0])

    threads = [threading.Thread(target=get, args=(i,)) for i in range(len(wanted))]
    for thread in threads:
        thread.start()
    wait_until(lambda: cache.flights.waiting == len(wanted) - 1, "seven threads waiting")
    assert len(reads) == opened + 1
    release.set()
    for thread in threads:
        thread.join()
    assert found == [value for _, value in wanted]
    assert len(reads) == opened + 1


@pytest.mark.s3
def test_32_cold_gets_are_in_flight_together_on_seaweedfs(
    make_store_url: Callable[[str], str],
) -> None:
    """The same over S3 (obstore, SeaweedFS): its client too lets 32 requests be in flight."""
    url = make_store_url("s3")
    rng = random.Random(2)
    model = {small_key(i): rng.randbytes(100) for i in range(SMALL)}
    with inkpen.open(url) as book:
        for start in range(0, SMALL, 1000):
            batch = inkpen.Batch()
            for i in range(start, start + 1000):
                batch.put("s", small_key(i), model[small_key(i)])
            book.write(batch)
        book.flush()
        book.compact_ledger()
    store = GatedStore(open_store(url), THREADS)
    keys = spaced(THREADS, SMALL)
    try:
        with inkpen.open_reader(store) as reader:
            store.armed = True
            run_threads(lambda i: _check(reader.get("s", keys[i]), model[keys[i]]))
    finally:
        store.close()
    assert store.reads == THREADS
