"""Where values live: values of at most ``inline_value_bytes`` are kept in the ledger beside
their keys, so gets, multi-gets and key-order scans of them read SSTs alone; larger values are
read from the journal. Every read is checked against a model dict, and which objects each read
touched is recorded by the store under the Bookie.

Also here: rolled segments do not wait ``gc_min_age`` (the writer deletes them once no live
checkpoint pins them), while a checkpoint that pins them keeps them readable.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence

import pytest

import inkpen
from inkpen.actors.read import path
from inkpen.manifest import ManifestStore
from inkpen.manifest.paths import parse_segment_key
from inkpen.objectstore import CountingStore, ObjectStore, open_store

SMALL = 100
THRESHOLD = 1024


class KeyRecordingStore(CountingStore):
    """Counts as CountingStore does and records the key of every read, in order."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.read_keys: list[str] = []
        self._keys_lock = threading.Lock()

    def _note(self, key: str) -> None:
        with self._keys_lock:
            self.read_keys.append(key)

    def get(self, key: str) -> bytes:
        self._note(key)
        return super().get(key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        self._note(key)
        return super().get_range(key, start, end)

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        self._note(key)
        return super().get_ranges(key, ranges)

    def reads_since(self, mark: int) -> list[str]:
        with self._keys_lock:
            return self.read_keys[mark:]

    def mark(self) -> int:
        with self._keys_lock:
            return len(self.read_keys)


def value_for(key: bytes, size: int) -> bytes:
    return random.Random(key).randbytes(size)


def load(
    url: str, sizes: Callable[[int], int], count: int, **options: object
) -> dict[bytes, bytes]:
    """``count`` puts of shuffled keys in batches, key ``i`` with a value of ``sizes(i)`` bytes;
    the model."""
    keys = [b"key%06d" % i for i in range(count)]
    model = {key: value_for(key, sizes(i)) for i, key in enumerate(keys)}
    random.Random(7).shuffle(keys)
    with inkpen.open(url, **options) as book:
        for first in range(0, count, 200):
            batch = inkpen.Batch()
            for key in keys[first : first + 200]:
                batch.put("b", key, model[key])
            book.write(batch)
    return model


@pytest.fixture
def local_url(make_store_url: Callable[[str], str]) -> str:
    return make_store_url("local")


def settled(store: ObjectStore, **options: object) -> inkpen.Bookie:
    """A Bookie over ``store`` whose start-up merges and GC pass have finished, so that what a
    test counts afterwards is its own reads."""
    book = inkpen.open(store, **options)
    book.compact_ledger()
    book.run_gc()
    return book


def test_a_cold_get_of_a_small_value_reads_one_ledger_block_and_no_journal(
    local_url: str,
) -> None:
    model = load(local_url, lambda i: SMALL, 6000)
    store = KeyRecordingStore(open_store(local_url))
    try:
        with settled(store) as book:
            for key in random.Random(3).sample(sorted(model), 300):
                mark = store.mark()
                assert book.get("b", key) == model[key]
                read = store.reads_since(mark)
                assert len(read) <= 1, read  # one SST block at most; none when cached
                assert all(name.startswith("ledger/") for name in read), read
            head = book.head("b", key)
            assert head is not None
            assert head.value is None  # an object's head never carries its value
    finally:
        store.close()


def test_values_above_the_threshold_are_read_from_the_journal(local_url: str) -> None:
    # Every third value is one byte above the threshold, the others at it and below.
    def sizes(i: int) -> int:
        return THRESHOLD + 1 if i % 3 == 0 else (THRESHOLD if i % 3 == 1 else i % 200)

    model = load(local_url, sizes, 1500, inline_value_bytes=THRESHOLD)
    store = KeyRecordingStore(open_store(local_url))
    try:
        with settled(store, inline_value_bytes=THRESHOLD) as book:
            journal_gets = 0
            for key in sorted(model):
                mark = store.mark()
                assert book.get("b", key) == model[key]
                journal_reads = [k for k in store.reads_since(mark) if k.startswith("journal/")]
                if len(model[key]) > THRESHOLD:
                    # One read of the value's journal block, or none when an earlier get of
                    # a value in the same block left it cached.
                    assert len(journal_reads) <= 1, (key, journal_reads)
                    journal_gets += len(journal_reads)
                else:
                    assert journal_reads == [], (key, len(model[key]))
            assert journal_gets > 0
            keys = sorted(model)
            assert book.get_many("b", keys) == [model[k] for k in keys]
            with book.objects("b") as rows:
                assert [(k, v) for _, k, v in rows] == sorted(model.items())
    finally:
        store.close()


@pytest.mark.parametrize("reverse", [False, True])
def test_a_scan_mixing_ledger_and_journal_values_keeps_key_order_across_windows(
    local_url: str, monkeypatch: pytest.MonkeyPatch, reverse: bool
) -> None:
    # Values the ledger keeps leave at once while no journal read waits before them; after a
    # value the journal holds, they wait in its window. Small windows cross every case: runs
    # of small values before, between and after large ones, and a long run of small ones.
    monkeypatch.setattr(path, "SCAN_WINDOW", 7)

    def sizes(i: int) -> int:
        return THRESHOLD + 1 + i if i % 11 in (3, 4) and i < 600 else i % 200

    model = load(local_url, sizes, 900, inline_value_bytes=THRESHOLD)
    with settled(open_store(local_url), inline_value_bytes=THRESHOLD) as book:
        with book.objects("b", reverse=reverse) as rows:
            got = [(bucket, k, v) for bucket, k, v in rows]
        assert got == sorted(((b"b", k, v) for k, v in model.items()), reverse=reverse)
        assert got[0][1] == (b"key000899" if reverse else b"key000000")
        with book.objects("b", "key000100", "key000700") as rows:
            inside = [(k, v) for _, k, v in rows]
        assert inside == sorted(
            (k, v) for k, v in model.items() if b"key000100" <= k <= b"key000700"
        )


def test_a_scan_of_small_values_reads_no_journal(local_url: str) -> None:
    model = load(local_url, lambda i: i % 300, 5000)
    store = KeyRecordingStore(open_store(local_url))
    try:
        with settled(store) as book:
            mark = store.mark()
            with book.objects("b") as rows:
                got = [(k, v) for _, k, v in rows]
            assert got == sorted(model.items())
            assert not [k for k in store.reads_since(mark) if k.startswith("journal/")]
            mark = store.mark()
            keys = random.Random(4).sample(sorted(model), 500)
            assert book.get_many("b", keys) == [model[k] for k in keys]
            assert not [k for k in store.reads_since(mark) if k.startswith("journal/")]
    finally:
        store.close()


def test_a_store_written_without_inline_values_reads_and_moves_over(local_url: str) -> None:
    """A database whose ledger keeps no values (as every earlier version wrote it) opens with
    inline values on: old entries read from the journal, new ones from the ledger, and merges
    of the two agree with the model."""
    model = load(local_url, lambda i: i % 150, 3000, inline_value_bytes=0)
    store = KeyRecordingStore(open_store(local_url))
    try:
        with settled(store) as book:
            key = sorted(model)[17]
            mark = store.mark()
            assert book.get("b", key) == model[key]
            assert any(k.startswith("journal/") for k in store.reads_since(mark))
            rng = random.Random(8)
            for new in rng.sample(sorted(model), 800):
                model[new] = rng.randbytes(rng.randrange(0, 400))
                book.put("b", new, model[new])
            book.flush()
            book.compact_ledger()
            with book.objects("b") as rows:
                assert [(k, v) for _, k, v in rows] == sorted(model.items())
            assert book.get_many("b", sorted(model)) == [model[k] for k in sorted(model)]
    finally:
        store.close()
    with inkpen.open(local_url, inline_value_bytes=0) as book:  # and back: every value reads
        assert all(book.get("b", k) == v for k, v in model.items())


def test_values_survive_a_crash_and_replay_into_the_ledger(local_url: str) -> None:
    model = load(local_url, lambda i: SMALL, 500)
    book = inkpen.open(local_url)
    rng = random.Random(11)
    for key in rng.sample(sorted(model), 200):
        model[key] = rng.randbytes(rng.choice([0, 10, THRESHOLD, THRESHOLD + 1, 5000]))
        book.put("b", key, model[key])
    book.abandon()  # as a crash: nothing more is written
    store = KeyRecordingStore(open_store(local_url))
    try:
        with inkpen.open(store) as reopened:
            for key, value in model.items():
                assert reopened.get("b", key) == value
            # The replayed writes went to the ledger with their small values.
            key = next(k for k in model if len(model[k]) <= THRESHOLD)
            mark = store.mark()
            assert reopened.get("b", key) == model[key]
            assert not [k for k in store.reads_since(mark) if k.startswith("journal/")]
    finally:
        store.close()


def test_the_option_is_checked() -> None:
    with pytest.raises(inkpen.UsageError, match="inline_value_bytes"):
        inkpen.Options(inline_value_bytes=-1)
    with pytest.raises(inkpen.UsageError, match="inline_value_bytes"):
        inkpen.Options(inline_value_bytes=64 * 1024 + 1)


def segments_on(store: ObjectStore) -> set[int]:
    found = {parse_segment_key(info.key) for info in store.list("journal/")}
    return {segment for segment in found if segment is not None}


def test_rolled_segments_are_deleted_at_close_without_waiting_for_gc_min_age(
    local_url: str,
) -> None:
    model = load(local_url, lambda i: SMALL, 2000)
    store = open_store(local_url)
    try:
        latest = ManifestStore(store).latest()
        assert latest is not None
        rolled = latest.manifest.journal.last_rolled_segment
        # The default gc_min_age (300 s) has not passed, yet no rolled data segment is left
        # (the fence slots, of a few bytes each, are kept).
        assert all(
            segment > rolled or info.size < 100
            for info in store.list("journal/")
            if (segment := parse_segment_key(info.key)) is not None
        )
        with inkpen.open(store) as book:
            assert all(book.get("b", k) == v for k, v in model.items())
    finally:
        store.close()


def test_a_checkpoint_keeps_the_segments_it_pins(local_url: str) -> None:
    model = load(local_url, lambda i: SMALL, 200)
    with inkpen.open(local_url) as book:
        for i in range(50):
            key = b"late%03d" % i
            model[key] = value_for(key, SMALL)
            book.put("b", key, model[key])
        pinned = book.checkpoint(lifetime=3600)  # pins the unrolled segments of these puts
        for i in range(50):
            key = b"later%03d" % i
            model[key] = value_for(key, SMALL)
            book.put("b", key, model[key])
    with (
        inkpen.open_reader(local_url, checkpoint=pinned) as reader,
        reader.objects("b") as rows,
    ):
        got = {k: v for _, k, v in rows}
    assert got == {k: v for k, v in model.items() if not k.startswith(b"later")}
