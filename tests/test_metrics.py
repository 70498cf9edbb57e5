"""``metrics()``: the counts and histograms against a model of the calls made, the files per level
and the journal against ``stats()`` and the manifest, the store requests against a counting
wrapper of our own, on the Bookie, the Reader, a snapshot and the asyncio handles."""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import inkpen
import inkpen.aio
from inkpen.actors.kernel.meter import LATENCY_BOUNDS, Recorder
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import CountingStore, open_store
from support.engine import TINY, GatedLedgerStore
from support.waiting import wait_until

BUCKET = "m"
REQUEST_COUNTERS = {
    "put": "puts",
    "get": "gets",
    "head": "heads",
    "list": "lists",
    "delete": "deletes",
    "copy": "copies",
}
"""Metrics.store_requests' kinds, and CountingStore's names for them."""


@dataclass
class Model:
    """What the calls made so far must have counted."""

    counts: Counter[str] = field(default_factory=Counter)
    written: int = 0
    read: int = 0
    values: dict[str, bytes] = field(default_factory=dict)

    def expect(self, metrics: inkpen.Metrics) -> None:
        c = self.counts
        assert metrics.puts == c["puts"]
        assert metrics.deletes == c["deletes"]
        assert metrics.batches == c["batches"]
        assert metrics.batch_changes == c["batch_changes"]
        assert metrics.gets == c["gets"]
        assert metrics.get_many_calls == c["get_many_calls"]
        assert metrics.get_many_keys == c["get_many_keys"]
        assert metrics.scans == c["scans"]
        assert metrics.conflicts == c["conflicts"]
        assert metrics.write_errors == c["write_errors"]
        assert metrics.value_bytes_written == self.written
        assert metrics.value_bytes_read == self.read
        for name, histogram in (
            ("puts", metrics.put_seconds),
            ("deletes", metrics.delete_seconds),
            ("batches", metrics.write_seconds),
            ("gets", metrics.get_seconds),
            ("get_many_calls", metrics.get_many_seconds),
            ("scans", metrics.scan_seconds),
        ):
            assert histogram.count == c[name], name
            assert histogram.bounds == LATENCY_BOUNDS
            assert len(histogram.counts) == len(LATENCY_BOUNDS) + 1
            assert histogram.cumulative()[-1] == c[name]
            assert (histogram.sum > 0) == (c[name] > 0), name


def random_calls(book: Any, model: Model, rng: random.Random, steps: int) -> None:
    """``steps`` calls of every kind on ``book`` (a Bookie), counted in ``model``."""
    for _ in range(steps):
        key = f"k{rng.randrange(40)}"
        roll = rng.random()
        if roll < 0.35:
            value = rng.randbytes(rng.randrange(1, 300))
            book.put(BUCKET, key, value)
            model.values[key] = value
            model.counts["puts"] += 1
            model.written += len(value)
        elif roll < 0.6:
            got = book.get(BUCKET, key)
            assert got == model.values.get(key)
            model.counts["gets"] += 1
            model.read += 0 if got is None else len(got)
        elif roll < 0.68:
            book.delete(BUCKET, key)
            model.values.pop(key, None)
            model.counts["deletes"] += 1
        elif roll < 0.76:
            batch = inkpen.Batch()
            size = rng.randrange(1, 5)
            for i in range(size):
                value = rng.randbytes(rng.randrange(1, 50))
                batch.put(BUCKET, f"batch{i}", value)
                model.values[f"batch{i}"] = value
                model.written += len(value)
            book.write(batch)
            model.counts["batches"] += 1
            model.counts["batch_changes"] += size
        elif roll < 0.84:
            # A condition that cannot hold (the key is never at SQN 2**40): refused, not a put.
            with pytest.raises(inkpen.ConflictError):
                book.put(BUCKET, key, b"never", if_sqn=2**40)
            model.counts["conflicts"] += 1
        elif roll < 0.92:
            keys = [f"k{rng.randrange(40)}" for _ in range(rng.randrange(1, 6))]
            values = book.get_many(BUCKET, keys)
            assert values == [model.values.get(k) for k in keys]
            model.counts["get_many_calls"] += 1
            model.counts["get_many_keys"] += len(keys)
            model.read += sum(len(v) for v in values if v is not None)
        else:
            found = list(book.keys(BUCKET))
            assert len(found) == len(model.values)
            model.counts["scans"] += 1


def test_counts_and_histograms_follow_the_calls(store_url: str) -> None:
    model = Model()
    started = time.perf_counter()
    with inkpen.open(store_url, **TINY) as book:
        model.expect(book.metrics())  # all zero at open
        random_calls(book, model, random.Random(11), 300)
        with pytest.raises(inkpen.UsageError):
            book.put(BUCKET, "", b"an empty key is refused before anything is done")
        metrics = book.metrics()
        elapsed = time.perf_counter() - started
        model.expect(metrics)
        assert metrics.enabled
        histograms = (metrics.put_seconds, metrics.get_seconds, metrics.write_seconds)
        spent = sum(h.sum for h in (*histograms, metrics.delete_seconds, metrics.scan_seconds))
        spent += metrics.get_many_seconds.sum
        assert 0 < spent <= elapsed  # one thread: the calls' times fit in the test's
        assert metrics.last_sqn == book.stats()["sqn"]
        assert not metrics.fenced and metrics.backpressure == 0
    with pytest.raises(inkpen.UsageError, match="closed"):
        book.metrics()


def test_a_snapshot_counts_in_its_bookies_metrics(store_url: str) -> None:
    with inkpen.open(store_url) as book:
        book.put(BUCKET, "a", b"12345")
        with book.snapshot() as snap:
            assert snap.get(BUCKET, "a") == b"12345"
            assert snap.get_many(BUCKET, ["a", "b"]) == [b"12345", None]
            assert list(snap.keys(BUCKET)) == [b"a"]
        metrics = book.metrics()
    assert (metrics.gets, metrics.get_many_calls, metrics.get_many_keys) == (1, 1, 2)
    assert (metrics.scans, metrics.value_bytes_read) == (1, 10)


def test_many_threads_lose_no_count(store_url: str) -> None:
    threads, each = 8, 60
    with inkpen.open(store_url) as book:
        barrier = threading.Barrier(threads)

        def client(t: int) -> None:
            barrier.wait()
            for i in range(each):
                book.put(BUCKET, f"t{t}-{i}", b"v" * (t + 1))
                assert book.get(BUCKET, f"t{t}-{i}") == b"v" * (t + 1)

        workers = [threading.Thread(target=client, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        metrics = book.metrics()
    assert metrics.puts == metrics.put_seconds.count == threads * each
    assert metrics.gets == metrics.get_seconds.count == threads * each
    expected_bytes = sum(each * (t + 1) for t in range(threads))
    assert metrics.value_bytes_written == metrics.value_bytes_read == expected_bytes


def _state(metrics: inkpen.Metrics) -> tuple[Any, ...]:
    return (
        metrics.level_files,
        metrics.level_bytes,
        metrics.ledger_mem_entries,
        metrics.journal_files,
        metrics.journal_bytes,
        metrics.unrolled_segments,
        metrics.unrolled_bytes,
        metrics.l0_writes,
        metrics.merges,
    )


def _settled(book: inkpen.Bookie) -> tuple[inkpen.Metrics, inkpen.Stats]:
    """``metrics()`` and ``stats()`` with no roll, L0 write or merge between them: background
    work goes on after a put returns, so both are read until a read before and after agree."""
    found: list[tuple[inkpen.Metrics, inkpen.Stats]] = []

    def quiet() -> bool:
        before, stats = book.metrics(), book.stats()
        after = book.metrics()
        found[:] = [(after, stats)]
        return _state(before) == _state(after) and stats["sqn"] == after.last_sqn

    wait_until(quiet, "the background work to settle")
    return found[0]


def test_files_per_level_and_the_journal_match_stats_and_the_manifest(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        for i in range(400):
            book.put(BUCKET, f"key{i:04d}", b"value %d" % i)
        for i in range(0, 400, 3):
            book.delete(BUCKET, f"key{i:04d}")
        book.flush()
        book.compact_ledger()
        metrics, stats = _settled(book)
        assert metrics.level_files == tuple(stats["level_files"])
        assert metrics.level_bytes == tuple(stats["level_bytes"])
        assert metrics.l0_files == stats["l0_files"] == metrics.level_files[0]
        assert metrics.ledger_mem_entries == stats["ledger_mem_entries"]
        assert metrics.journal_files == stats["journal_files"]
        assert metrics.journal_bytes == stats["journal_bytes"]
        assert metrics.unrolled_segments == stats["unrolled_segments"]
        assert metrics.unrolled_bytes == stats["unrolled_bytes"]
        assert metrics.last_sqn == stats["sqn"] == 400 + len(range(0, 400, 3))
        assert metrics.l0_writes == stats["l0_writes"] > 0
        assert metrics.merges == stats["merges"] > 0
        assert metrics.merge_bytes_read > 0 and metrics.merge_bytes_written > 0
        assert metrics.merge_seconds > 0
        assert metrics.l0_bytes_written > 0
        with open_store(store_url) as store:
            latest = ManifestStore(store).latest()
        assert latest is not None
        ledger = latest.manifest.ledger
        assert metrics.level_files == tuple(len(level) for level in ledger.levels)
        assert metrics.level_bytes == tuple(sum(d.size for d in level) for level in ledger.levels)
        assert metrics.journal_files == len(latest.manifest.journal.files)
        assert metrics.journal_bytes == sum(d.size for d in latest.manifest.journal.files)

        report = book.compact_journal()
        after = book.metrics()
        assert after.journal_compactions == (1 if report.compacted else 0)
        assert after.journal_compaction_bytes_read == report.bytes_before
        assert after.journal_compaction_bytes_written == report.bytes_after
        assert (after.journal_compaction_seconds > 0) == bool(report.compacted)
        # A pass the writer schedules itself (after a roll) may run between two reads of the
        # metrics: look again until a pass of this test's ran alone, then its figures must be
        # exactly what the metrics added.
        for _ in range(20):
            before_gc = book.metrics()
            gc = book.run_gc(min_age=0.0)
            collected = book.metrics()
            assert collected.gc_runs >= before_gc.gc_runs + 1
            if collected.gc_runs == before_gc.gc_runs + 1:
                break
        assert collected.gc_runs == before_gc.gc_runs + 1, "a scheduled pass ran every time"
        assert collected.gc_deletions - before_gc.gc_deletions == len(gc.deleted)
        assert collected.gc_bytes_deleted - before_gc.gc_bytes_deleted == gc.bytes_deleted


def _stable(read: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
    """``read()`` once two reads in a row agree (background work may be making requests)."""
    seen: list[tuple[Any, ...]] = []

    def settled() -> bool:
        seen.append(read())
        return len(seen) > 1 and seen[-1] == seen[-2]

    wait_until(settled, "the store's counts to settle")
    return seen[-1]


def test_a_fresh_database_answers_l0_in_its_files_per_level(
    store_url: str, store_kind: str, make_store_url: Callable[[str], str]
) -> None:
    with inkpen.open(store_url) as book:
        metrics = book.metrics()
        assert (metrics.level_files, metrics.level_bytes, metrics.l0_files) == ((0,), (0,), 0)
        stats = book.stats()
        assert (stats["level_files"], stats["level_bytes"]) == ([0], [0])
        book.put(BUCKET, "k", b"v")
        assert book.metrics().level_files[0] == 0  # still in memory
        book.flush()
        assert book.metrics().level_files[0] == book.stats()["l0_files"] == 1
    with inkpen.open_reader(store_url) as reader:
        assert sum(reader.metrics().level_files) == 1  # L0's, or L1's once the close merged it
    empty_url = make_store_url(store_kind)
    with inkpen.open(empty_url) as empty:
        assert empty.metrics().level_files == (0,)
    with inkpen.open_reader(empty_url) as reader:
        assert reader.metrics().level_files == (0,)


def test_a_merge_counts_the_value_it_folded_to_not_its_operand(store_url: str) -> None:
    def append(key: bytes, existing: bytes | None, operands: Any) -> bytes:
        return (existing or b"") + b"".join(operands)

    def refuse(key: bytes, existing: bytes | None, operands: Any) -> bytes:
        raise ValueError("no")

    operators = {"append": append, "refuse": refuse}
    with inkpen.open(store_url, merge_operators=operators) as book:
        book.put(BUCKET, "log", b"x" * 100)
        book.merge(BUCKET, "log", b"ab", operator="append")  # writes 102 bytes
        book.merge(BUCKET, "log", b"c", operator="append")  # writes 103 bytes
        book.write(
            inkpen.Batch()
            .merge(BUCKET, "log", b"d", operator="append")  # 104
            .put(BUCKET, "other", b"12345")  # 5
            .merge(BUCKET, "new", b"e", operator="append")  # 1
        )
        with pytest.raises(inkpen.UsageError):
            book.merge(BUCKET, "log", b"f", operator="refuse")  # refused: nothing written
        with pytest.raises(inkpen.UsageError):
            book.write(inkpen.Batch().merge(BUCKET, "new", b"g", operator="refuse"))
        metrics = book.metrics()
        assert metrics.value_bytes_written == 100 + 102 + 103 + 104 + 5 + 1
        assert (metrics.puts, metrics.batches, metrics.batch_changes) == (3, 1, 3)
        assert book.get(BUCKET, "log") == b"x" * 100 + b"abcd"
    with inkpen.open(store_url, merge_operators=operators, metrics=False) as quiet:
        quiet.merge(BUCKET, "log", b"h", operator="append")
        assert quiet.metrics().value_bytes_written == 0


def test_store_requests_equal_what_the_store_saw(store_url: str) -> None:
    outer = CountingStore(open_store(store_url))
    with inkpen.open(outer, **TINY) as book:
        for i in range(120):
            book.put(BUCKET, f"k{i}", b"x" * 100)
        book.flush()
        for i in range(0, 120, 7):
            assert book.get(BUCKET, f"k{i}") == b"x" * 100

        def both() -> tuple[Any, ...]:
            seen = outer.snapshot()
            metrics = book.metrics()
            return (
                dict(metrics.store_requests),
                metrics.store_bytes_written,
                metrics.store_bytes_read,
                {kind: seen[plural] for kind, plural in REQUEST_COUNTERS.items()},
                seen["bytes_written"],
                seen["bytes_read"],
            )

        mine, written, read, theirs, their_written, their_read = _stable(both)
    assert mine == theirs
    assert (written, read) == (their_written, their_read)
    assert mine["put"] > 0 and mine["get"] + mine["list"] > 0


def test_metrics_off_records_no_operation_and_keeps_the_state(store_url: str) -> None:
    outer = CountingStore(open_store(store_url))
    with inkpen.open(outer, metrics=False, **TINY) as book:
        model = Model()
        random_calls(book, model, random.Random(5), 120)
        book.flush()
        metrics, stats = _settled(book)
    assert not metrics.enabled
    Model().expect(metrics)  # every operation count and histogram is zero
    assert set(metrics.store_requests.values()) == {0}
    assert (metrics.store_bytes_written, metrics.store_bytes_read) == (0, 0)
    assert outer.snapshot()["puts"] > 0  # the store was used all the same
    assert metrics.level_files == tuple(stats["level_files"])
    assert metrics.journal_bytes == stats["journal_bytes"]
    assert metrics.l0_writes == stats["l0_writes"] > 0
    assert metrics.last_sqn == stats["sqn"] > 0


def test_backpressure_and_throttled_puts(store_url: str) -> None:
    store = GatedLedgerStore(open_store(store_url))
    options = {"ledger_cache_entries": 50, "l0_cache_entries": 100, "max_l0_files": 1}
    book = inkpen.open(store, **options)
    done = threading.Event()

    def writer() -> None:
        for i in range(3000):
            book.put("bp", f"k{i:05d}", b"x" * 20)
        done.set()

    thread = threading.Thread(target=writer, daemon=True)
    try:
        thread.start()
        assert store.waiting.wait(timeout=60)
        wait_until(lambda: book.metrics().backpressure == 2, "puts to be held")
        held = book.metrics()
        assert held.backpressure == max(book.stats()["pressure"].values())
        assert held.throttled_puts > 0
        assert not done.is_set()
    finally:
        store.gate.set()
    assert done.wait(timeout=120)
    thread.join()
    after = book.metrics()
    assert after.puts == 3000 and after.backpressure == 0
    assert after.throttled_puts >= held.throttled_puts
    book.close()


def test_a_fenced_writer_says_so_and_counts_its_refused_write(durable_store_url: str) -> None:
    with inkpen.open(durable_store_url) as first:
        first.put(BUCKET, "a", b"1")
        with inkpen.open(durable_store_url):
            with pytest.raises(inkpen.FencedError):
                first.put(BUCKET, "b", b"2")
            metrics = first.metrics()
    assert metrics.fenced and metrics.write_errors == 1 and metrics.puts == 1


def test_a_reader_counts_its_reads_and_sees_its_checkpoints_files(store_url: str) -> None:
    with inkpen.open(store_url, **TINY) as book:
        for i in range(150):
            book.put(BUCKET, f"k{i:03d}", b"v%03d" % i)
        book.flush()
    model = Model()
    with inkpen.open_reader(store_url) as reader:
        model.expect(reader.metrics())
        for i in range(0, 150, 10):
            assert reader.get(BUCKET, f"k{i:03d}") == b"v%03d" % i
            model.counts["gets"] += 1
            model.read += 4
        assert reader.get(BUCKET, "absent") is None
        model.counts["gets"] += 1
        assert reader.get_many(BUCKET, ["k001", "k002", "nope"]) == [b"v001", b"v002", None]
        model.counts.update(get_many_calls=1, get_many_keys=3)
        model.read += 8
        assert sum(1 for _ in reader.objects(BUCKET)) == 150
        with reader.keys(BUCKET) as keys:
            next(keys)  # closed early: still one fold
        model.counts["scans"] += 2
        metrics = reader.metrics()
        model.expect(metrics)
        assert metrics.last_sqn == reader.last_sqn == 150
        assert sum(metrics.store_requests.values()) > 0 and metrics.store_bytes_read > 0
        assert sum(metrics.cache_misses.values()) > 0
        assert (metrics.puts, metrics.merges, metrics.l0_writes, metrics.backpressure) == (
            0,
            0,
            0,
            0,
        )
        with open_store(store_url) as store:
            pinned = ManifestStore(store).read(reader.manifest_id)
        assert metrics.level_files == tuple(len(level) for level in pinned.ledger.levels)
        assert metrics.journal_files == len(pinned.journal.files)
    with pytest.raises(inkpen.UsageError, match="closed"):
        reader.metrics()


def test_a_following_readers_metrics_follow_the_writer(store_url: str) -> None:
    with inkpen.open(store_url) as book:
        book.put(BUCKET, "a", b"1")
        with inkpen.open_reader(store_url, follow=True, refresh_interval=3600) as reader:
            assert reader.metrics().last_sqn == 1
            for i in range(5):
                book.put(BUCKET, f"k{i}", b"v")
            book.flush()
            wait_until(lambda: reader.refresh() or reader.metrics().last_sqn == 6)
            metrics = reader.metrics()
            assert metrics.last_sqn == 6
            with open_store(store_url) as store:
                pinned = ManifestStore(store).read(reader.manifest_id)
            assert metrics.level_files == tuple(len(level) for level in pinned.ledger.levels)


def test_the_asyncio_handles_answer_the_same_metrics(store_url: str) -> None:
    async def run() -> tuple[inkpen.Metrics, inkpen.Metrics, inkpen.Metrics, int]:
        async with inkpen.aio.open(store_url) as book:
            await asyncio.gather(*(book.put(BUCKET, f"k{i}", b"abc") for i in range(20)))
            await book.delete(BUCKET, "k0")
            batch = inkpen.Batch()
            batch.put(BUCKET, "x", b"12")
            batch.put(BUCKET, "y", b"34")
            await book.write(batch)
            with pytest.raises(inkpen.ConflictError):
                await book.put(BUCKET, "k1", b"no", if_sqn=0)
            assert await book.get(BUCKET, "k1") == b"abc"
            assert [k async for k in book.keys(BUCKET)][:1] == [b"k1"]
            written = await book.metrics()
            sync_view = book.sync.metrics()
            sqn = (await book.stats())["sqn"]
        async with inkpen.aio.open_reader(store_url) as reader:
            assert await reader.get(BUCKET, "x") == b"12"
            read = await reader.metrics()
        return written, sync_view, read, sqn

    written, sync_view, read, sqn = asyncio.run(run())
    model = Model()
    model.counts.update(
        puts=20, deletes=1, batches=1, batch_changes=2, conflicts=1, gets=1, scans=1
    )
    model.written, model.read = 20 * 3 + 4, 3
    model.expect(written)
    assert sync_view.puts == written.puts and sync_view.scans == written.scans
    assert (read.gets, read.value_bytes_read, read.puts) == (1, 2, 0)
    assert read.last_sqn == written.last_sqn == sqn >= 23


def test_histogram_buckets_and_quantiles() -> None:
    recorder = Recorder()
    for seconds in (0.00001, 0.0003, 0.0003, 0.002, 0.002, 0.002, 7.0, 99.0):
        recorder.record(seconds)
    histogram = recorder.histogram()
    by_bound = dict(zip((*LATENCY_BOUNDS, math.inf), histogram.counts, strict=True))
    assert by_bound[0.000025] == 1  # at most 25 µs
    assert by_bound[0.0005] == 2  # above 250 µs, at most 500 µs
    assert by_bound[0.0025] == 3
    assert by_bound[10.0] == 1 and by_bound[math.inf] == 1
    assert histogram.count == 8 and histogram.cumulative()[-1] == 8
    assert histogram.sum == pytest.approx(0.00001 + 0.0006 + 0.006 + 7.0 + 99.0)
    assert histogram.quantile(0.0) == 0.000025
    assert histogram.quantile(0.5) == 0.0025  # the 4th of 8 is in the 2.5 ms bucket
    assert histogram.quantile(0.875) == 10.0
    assert histogram.quantile(1.0) == math.inf
    assert Recorder().histogram().quantile(0.99) == 0.0
    for bad in (-0.1, 1.5, math.nan, True, "0.5"):
        with pytest.raises(inkpen.UsageError, match="fraction"):
            histogram.quantile(bad)  # type: ignore[arg-type]


def test_a_thread_that_ends_leaves_its_counts(store_url: str) -> None:
    recorder = Recorder()

    def record(n: int) -> None:
        for _ in range(n):
            recorder.record(0.001, 10)

    for n in (3, 4, 5):  # one after another: each thread may reuse the last one's cell
        worker = threading.Thread(target=record, args=(n,))
        worker.start()
        worker.join()
    histogram, nbytes, _ = recorder.figures()
    assert histogram.count == 12 and nbytes == 120


@pytest.fixture
def book_on_memory(make_store_url: Callable[[str], str]) -> Iterator[inkpen.Bookie]:
    with inkpen.open(make_store_url("memory")) as book:
        yield book


def test_metrics_are_frozen_values(book_on_memory: inkpen.Bookie) -> None:
    metrics = book_on_memory.metrics()
    with pytest.raises(AttributeError):
        metrics.puts = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        metrics.store_requests["put"] = 1  # type: ignore[index]
    book_on_memory.put(BUCKET, "k", b"v")
    assert metrics.puts == 0 and book_on_memory.metrics().puts == 1
