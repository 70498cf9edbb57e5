"""Folds read ahead (option ``read_ahead_bytes``): what they yield equals a model whatever the
window, the bytes read ahead stay within the window, reads overlap on a slow store, and a fold
stopped early cancels its reads ahead without leaving threads behind."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import inkpen
from inkpen.actors.read import ahead as ahead_module
from inkpen.actors.read.ahead import READ_AHEAD_THREADS, Planned, ReadAhead
from inkpen.objectstore import FaultPlan, FaultyStore, open_store
from support.engine import SMALL
from support.gates import InFlightStore
from support.waiting import wait_until

Model = dict[tuple[str, bytes], bytes]
WINDOWS = [0, 1024, 64 * 1024, 8 * 1024 * 1024]


def write(book: inkpen.Bookie, model: Model, count: int, seed: int) -> None:
    """``count`` changes in buckets ``a`` and ``b``: small values (kept in the ledger), values
    in the journal, overwrites, deletes, index entries; ``model`` follows them."""
    rng = random.Random(seed)
    for _ in range(count):
        bucket = rng.choice("ab")
        key = b"k%05d" % rng.randrange(count)
        old = model.get((bucket, key))
        dropped = [] if old is None else [("remove", "len_int", str(len(old)))]
        if rng.random() < 0.1:
            book.delete(bucket, key, indexes=dropped)
            model.pop((bucket, key), None)
            continue
        value = rng.randbytes(rng.choice((30, 200, 3000)))
        book.put(bucket, key, value, indexes=[*dropped, ("add", "len_int", str(len(value)))])
        model[(bucket, key)] = value


def expected(
    model: Model, bucket: str, start: bytes | None = None, end: bytes | None = None
) -> list[tuple[bytes, bytes]]:
    return sorted(
        (key, value)
        for (b, key), value in model.items()
        if b == bucket and (start is None or key >= start) and (end is None or key <= end)
    )


def check_folds(handle: inkpen.Bookie | inkpen.Reader | inkpen.Snapshot, model: Model) -> None:
    for bucket in "ab":
        every = expected(model, bucket)
        assert [(k, v) for _, k, v in handle.objects(bucket)] == every
        assert [(k, v) for _, k, v in handle.objects(bucket, reverse=True)] == every[::-1]
        assert list(handle.keys(bucket)) == [k for k, _ in every]
        assert list(handle.keys(bucket, reverse=True)) == [k for k, _ in every][::-1]
        assert [k for _, k, _ in handle.heads(bucket)] == [k for k, _ in every]
        middle = expected(model, bucket, b"k00100", b"k00700")
        found = handle.objects(bucket, b"k00100", b"k00700")
        assert [(k, v) for _, k, v in found] == middle
        found = handle.objects(bucket, b"k00100", b"k00700", reverse=True)
        assert [(k, v) for _, k, v in found] == middle[::-1]
        sized = sorted(k for k, v in every if len(v) == 200)
        assert sorted(handle.index_query(bucket, "len_int", "200", "200")) == sized
    together = sorted((b.encode(), k, v) for (b, k), v in model.items())
    assert list(handle.objects()) == together


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Model]:
    """A closed local database of several levels, journal files and overwrites."""
    url = str(tmp_path_factory.mktemp("ahead") / "db")
    model: Model = {}
    with inkpen.open(url, **SMALL) as book:
        write(book, model, 1500, seed=1)
    return url, model


@pytest.mark.parametrize("window", WINDOWS)
def test_a_reader_s_folds_equal_the_model_whatever_the_window(
    database: tuple[str, Model], window: int
) -> None:
    url, model = database
    with inkpen.open_reader(url, read_ahead_bytes=window, block_cache_bytes=16 * 1024) as reader:
        levels = reader.metrics().level_files
        assert sum(levels) > 4, levels  # several files to read ahead across
        check_folds(reader, model)


@pytest.mark.parametrize("window", [1024, 8 * 1024 * 1024])
def test_a_live_bookie_s_folds_and_snapshots_equal_the_model(store_url: str, window: int) -> None:
    """Memory tables, L0 files and levels merged in one fold, with the window read ahead."""
    model: Model = {}
    with inkpen.open(store_url, read_ahead_bytes=window, **SMALL) as book:
        write(book, model, 800, seed=2)
        check_folds(book, model)
        with book.snapshot() as snap:
            frozen = dict(model)
            write(book, model, 200, seed=3)
            check_folds(snap, frozen)
        check_folds(book, model)


def slow_store(url: str, delay: float) -> InFlightStore:
    return InFlightStore(FaultyStore(open_store(url), FaultPlan(delay=(delay, delay))))


def test_reads_ahead_overlap_and_stay_within_the_window(database: tuple[str, Model]) -> None:
    """On a store whose every read takes 2 ms, a fold with a 128 KiB window has several reads in
    flight, and never more bytes than the window plus the one read it waits for."""
    url, model = database
    window = 128 * 1024
    store = slow_store(url, 0.002)
    with inkpen.open_reader(store, read_ahead_bytes=window) as reader:
        store.reset()
        started = store.started
        check_folds(reader, model)
        assert store.started > started
        largest_read = 256 * 1024 + 64 * 1024  # a planned SST read: runs up to 256 KiB
        assert store.most_bytes <= window + largest_read, store.most_bytes
        assert store.most_reads > 1, store.most_reads


@pytest.fixture(scope="module")
def many_files(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A closed local database whose ledger is about a hundred small files."""
    url = str(tmp_path_factory.mktemp("many") / "db")
    rng = random.Random(4)
    with inkpen.open(url, **SMALL) as book:
        for start in range(0, 20_000, 500):
            batch = inkpen.Batch()
            for i in range(start, start + 500):
                batch.put("a", b"k%06d" % i, rng.randbytes(30))
            book.write(batch)
    return url


def test_a_fold_stopped_early_cancels_its_reads_ahead(many_files: str) -> None:
    """Folds stopped after a few rows: the reads they queued ahead are cancelled (at most the
    pool's threads, which had each taken one, start after the fold is closed), every read ends,
    and the threads stay the pool's."""
    store = slow_store(many_files, 0.05)  # slow enough that reads stay queued
    for _ in range(3):
        with inkpen.open_reader(store, read_ahead_bytes=64 * 1024 * 1024) as reader:
            files = sum(reader.metrics().level_files)
            assert files > 3 * READ_AHEAD_THREADS, files  # more planned reads than threads
            fold = reader.objects()
            for _ in range(5):
                next(fold)
            fold.close()
            store.mark()
            _drain_pool()
            wait_until(lambda: store.in_flight == 0, "every read ahead ended")
            assert store.after_mark <= READ_AHEAD_THREADS, store.after_mark
    threads = [t for t in threading.enumerate() if t.name.startswith("inkpen-ahead")]
    assert len(threads) <= READ_AHEAD_THREADS


def _drain_pool() -> None:
    """Wait until every task queued on the read-ahead pool before now has started (the pool
    takes its queue in order)."""
    pool = ahead_module._shared_pool()
    pool.submit(lambda: None).result(timeout=60)


# -- the read-ahead itself, over planned reads of its own ------------------------------------


class Reads:
    """Planned reads that each wait for ``release`` (unless set), counting those in flight."""

    def __init__(self, count: int, size: int) -> None:
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0
        self.started: list[int] = []
        self.count = count
        self.size = size

    def read(self, number: int) -> bytes:
        with self.lock:
            self.started.append(number)
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            assert self.release.wait(60)
            return b"%d" % number
        finally:
            with self.lock:
                self.in_flight -= 1

    def plan(self, owner: object = None, skip: set[int] | None = None) -> Iterator[Planned]:
        for number in range(self.count):
            skipped = skip is not None and number in skip
            yield Planned(
                owner,
                (number * self.size, (number + 1) * self.size, number, number + 1),
                lambda number=number: self.read(number),  # type: ignore[misc]
                self.size,
                (lambda: True) if skipped else None,
            )


def test_planned_reads_are_answered_in_order_within_the_window() -> None:
    reads = Reads(40, 1000)
    reads.release.set()
    with ReadAhead(8000) as ahead:
        stream = ahead.stream(reads.plan())
        answers = [stream.take_next() for _ in range(40)]
        assert answers == [b"%d" % n for n in range(40)]
        assert ahead.held == 0
    assert sorted(reads.started) == list(range(40))


def test_the_window_bounds_the_reads_in_flight() -> None:
    """Reads that never end until released: the read-ahead starts as many as the window holds
    and no more, and starts the next only when one is taken."""
    reads = Reads(40, 1000)
    with ReadAhead(5000) as ahead:
        stream = ahead.stream(reads.plan())
        ahead.start()
        wait_until(lambda: len(reads.started) == 5, "five reads started")
        assert ahead.held == 5000
        taker = threading.Thread(target=stream.take_next)
        taker.start()
        reads.release.set()
        taker.join()
        wait_until(lambda: len(reads.started) == 6, "the sixth read started")
    assert reads.most <= 6


def test_take_finds_a_read_by_owner_and_offset_dropping_those_before() -> None:
    owner = object()
    reads = Reads(10, 100)
    reads.release.set()
    with ReadAhead(10_000) as ahead:
        stream = ahead.stream(reads.plan(owner))
        piece, answer = stream.take(owner, 450)  # type: ignore[misc]
        assert piece == (400, 500, 4, 5) and answer == b"4"
        assert stream.take(object(), 550) is None  # another owner's: not planned here
        assert stream.take(owner, 50) is None  # dropped: behind the stream now
        piece, answer = stream.take(owner, 999)  # type: ignore[misc]
        assert answer == b"9"
        wait_until(lambda: ahead.held == 0, "the dropped reads leave the window")


def test_a_skipped_read_is_made_when_it_is_taken_after_all() -> None:
    reads = Reads(3, 100)
    reads.release.set()
    with ReadAhead(10_000) as ahead:
        stream = ahead.stream(reads.plan(skip={1}))
        assert stream.take_next() == b"0"
        wait_until(lambda: 2 in reads.started, "the read after the skipped one")
        assert 1 not in reads.started
        assert stream.take_next() == b"1"  # wanted after all: read now, in this thread
        assert stream.take_next() == b"2"


def test_closing_cancels_the_reads_not_started() -> None:
    """Sixty planned reads in the window, the pool runs at most its threads' worth: closing
    cancels the rest, which never start; those under way end and leave the window."""
    reads = Reads(60, 100)
    ahead = ReadAhead(60 * 100)
    ahead.stream(reads.plan())
    ahead.start()
    wait_until(lambda: len(reads.started) == READ_AHEAD_THREADS, "the pool's threads busy")
    ahead.close()
    reads.release.set()
    _drain_pool()
    wait_until(lambda: reads.in_flight == 0, "the reads under way ended")
    wait_until(lambda: ahead.held == 0, "every read left the window")
    assert len(reads.started) == READ_AHEAD_THREADS


def test_a_failed_read_raises_where_it_is_taken() -> None:
    def fail() -> Any:
        raise inkpen.NotFoundError("gone", key="ledger/x.sst")

    with ReadAhead(10_000) as ahead:
        stream = ahead.stream(iter([Planned(None, (0, 1, 0, 1), fail, 1)]))
        with pytest.raises(inkpen.NotFoundError, match="gone"):
            stream.take_next()
        assert ahead.held == 0
