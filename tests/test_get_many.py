"""get_many answers what a loop of get answers over one state: random key sets (repeats, missing,
deleted and expired keys) over keys whose values live in every place a value can be (unrolled
segments, journal files; ledger memory, L0, levels), with the batching limits at their defaults
and squeezed; journal files that GC removes under a batch; damage reported, never read."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

import inkpen
from inkpen.actors.read import many
from inkpen.actors.read.path import Views, lookup, read_value
from inkpen.formats.keys import object_key
from inkpen.manifest.merge_policy import LeveledMergePolicy
from inkpen.objectstore import open_store
from support.engine import SMALL, TINY, FakeClock
from support.waiting import wait_until

KEY_SPACE = 320
LARGE = 70 * 1024  # above many.MANY_LARGE: read alone, as a get reads it


def _key(i: int) -> str:
    return f"k{i:04d}"


class History:
    """A model of bucket ``b``: value and expiry (ms, or None) per key."""

    def __init__(self, book: inkpen.Bookie, clock: FakeClock, seed: int) -> None:
        self.book = book
        self.clock = clock
        self.rng = random.Random(seed)
        self.objects: dict[bytes, tuple[bytes, float | None]] = {}

    def step(self, n: int) -> None:
        rng = self.rng
        key = _key(rng.randrange(KEY_SPACE))
        roll = rng.random()
        if roll < 0.15:
            self.book.delete("b", key)
            self.objects.pop(key.encode(), None)
            return
        if roll < 0.2:
            value = rng.randbytes(LARGE)  # incompressible: the record stays large
        elif roll < 0.3:
            value = b"z" * rng.randrange(300, 3000)  # compressible: stored snappy-compressed
        else:
            value = f"v{n}-".encode() + rng.randbytes(rng.randrange(0, 400))
        ttl = 5.0 if rng.random() < 0.1 else None
        self.book.put("b", key, value, ttl=ttl)
        expires = None if ttl is None else self.clock() + ttl
        self.objects[key.encode()] = (value, expires)

    def live(self, key: str) -> bytes | None:
        found = self.objects.get(key.encode())
        if found is None:
            return None
        value, expires = found
        return value if expires is None or expires > self.clock() else None


@pytest.fixture(params=["default", "squeezed"])
def limits(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The batching limits as shipped, or squeezed so that every call cuts windows, joins and
    splits reads, reads middling records alone, and reads concurrently on any store."""
    if request.param == "squeezed":
        monkeypatch.setattr(many, "MANY_WINDOW", 7)
        monkeypatch.setattr(many, "MANY_GAP", 300)
        monkeypatch.setattr(many, "MANY_RUN", 2000)
        monkeypatch.setattr(many, "MANY_LARGE", 500)
        monkeypatch.setattr(many, "MANY_SLOW_READ", 0.0)  # every read spreads the rest
    return str(request.param)


class PausingPolicy:
    """Leveled's merge choice, which chooses nothing while ``paused`` (an L0 file stays)."""

    def __init__(self) -> None:
        self.inner = LeveledMergePolicy(SMALL["l1_target_files"], SMALL["level_fanout"])
        self.paused = False

    def choose(self, levels: Any, *, turn: int) -> Any:
        return None if self.paused else self.inner.choose(levels, turn=turn)


def _key_sets(rng: random.Random, count: int) -> Iterator[list[str]]:
    for _ in range(count):
        size = rng.choice((1, 2, 5, 40, 150, 400))
        keys = [_key(rng.randrange(KEY_SPACE + 40)) for _ in range(size)]  # some never written
        keys += rng.sample(keys, min(len(keys), rng.randrange(4)))  # repeats
        rng.shuffle(keys)
        yield keys


def test_get_many_answers_what_a_loop_of_get_answers(store_url: str, limits: str) -> None:
    clock = FakeClock()
    policy = PausingPolicy()
    options = {
        **SMALL,
        "roll_segments": 24,
        "journal_cache_bytes": 256 * 1024,
        "merge_policy": policy,
        # Squeezed batching limits are the journal's: every value is read from it there.
        **({"inline_value_bytes": 0} if limits == "squeezed" else {}),
    }
    with inkpen.open(store_url, clock=clock, **options) as book:
        history = History(book, clock, seed=11)
        for n in range(500):  # flushed and merged: levels
            history.step(n)
        book.flush()
        book.compact_ledger()
        policy.paused = True
        for n in range(500, 650):  # flushed, not merged: L0
            history.step(n)
        book.flush()
        for n in range(650, 700):  # memory, and segments not yet rolled
            history.step(n)
        stats = book.stats()
        assert stats["level_files"] and stats["l0_files"], stats
        assert stats["journal_files"] and stats["unrolled_segments"], stats
        assert stats["ledger_mem_entries"] or stats["ledger_cache_entries"], stats
        clock.advance(6.0)  # every ttl'd put expires
        rng = random.Random(12)
        snapshot = book.snapshot()
        try:
            for n, keys in enumerate(_key_sets(rng, 12)):
                expected = [history.live(key) for key in keys]
                assert book.get_many("b", keys) == expected
                assert [book.get("b", key) for key in keys] == expected
                assert snapshot.get_many("b", keys) == expected
                if n % 4 == 0:  # a warm pass: records and blocks cached by the passes before
                    assert book.get_many("b", keys) == expected
            history.step(700)  # the snapshot keeps its state
            later = [_key(i) for i in range(KEY_SPACE)]
            old = snapshot.get_many("b", later)
            assert old == [snapshot.get("b", key) for key in later]
        finally:
            snapshot.close()
        assert book.get_many("b", later) == [history.live(key) for key in later]
    reader = inkpen.open_reader(store_url)
    try:
        keys = [_key(i) for i in range(KEY_SPACE + 10)] * 2
        assert reader.get_many("b", keys) == [reader.get("b", key) for key in keys]
    finally:
        reader.close()


class StaleFirst:
    """A view source that first hands out views taken earlier, then the live ones."""

    def __init__(self, stale: Views, live: Any) -> None:
        self.stale: Views | None = stale
        self.live = live
        self.calls = 0

    def views(self) -> Views:
        self.calls += 1
        stale, self.stale = self.stale, None
        return stale if stale is not None else self.live.views()


def _journal_file_of(views: Views, sqn: int) -> str | None:
    journal = views[2]
    place = journal.place(sqn)  # type: ignore[attr-defined]
    return journal.files[place].name if type(place) is int else None  # type: ignore[attr-defined]


def _present(store_url: str) -> set[str]:
    store = open_store(store_url)
    try:
        return {info.key for info in store.list("journal/")}
    finally:
        store.close()


@pytest.mark.parametrize("overwrite", [False, True], ids=["replaced", "replaced-and-overwritten"])
def test_a_journal_file_gc_removes_under_a_batch(store_url: str, overwrite: bool) -> None:
    """Views taken, then a compaction replaces the journal files they name and GC deletes them:
    the batch finds them gone, places its records again in fresh views and answers one state,
    as a get over the same stale views does."""
    # The values are read from journal files (none kept in the ledger): those are what vanish.
    options = {**TINY, "journal_cache_bytes": 0, "roll_segments": 4, "inline_value_bytes": 0}
    keys = [_key(i) for i in range(60)]
    old = {key: f"old-{i}".encode() * 10 for i, key in enumerate(keys)}
    with inkpen.open(store_url, **options) as book:
        for key in keys:  # each value between two fillers, which die after the views are taken
            book.put("fill", key + "a", b"f" * 1500)
            book.put("b", key, old[key])
            book.put("fill", key + "z", b"f" * 1500)
        book.flush()
        book.compact_ledger()
        source = book._point_source()  # the live views a get reads
        stale = source.views()
        now = book._now_ms()
        lks = [object_key(b"b", key.encode()) for key in keys]
        sqns = [lookup(stale[0], stale[1], lk) for lk in lks]
        files = {_journal_file_of(stale, value[0]) for value in sqns if value is not None}
        files.discard(None)
        assert files, "the values are in journal files"
        for key in keys:
            book.delete("fill", key + "a")
            book.delete("fill", key + "z")
        new = dict(old)
        if overwrite:
            for i, key in enumerate(keys[:20]):
                new[key] = f"new-{i}".encode()
                book.put("b", key, new[key])
        book.flush()
        book.compact_ledger()
        for _ in range(40):
            if not book.compact_journal().compacted:
                break
        wait_until(lambda: files - _present(store_url), "GC deleting a replaced journal file")
        batch_source = StaleFirst(stale, source)
        got = many.read_values(batch_source, lks * 2, now)
        assert batch_source.calls > 1  # it found a file gone and took fresh views
        assert got[len(keys) :] == got[: len(keys)]
        answer = dict(zip(keys, got[: len(keys)], strict=True))
        if overwrite:
            assert answer in (old, new)  # one state, never a mix of the two
        else:
            assert answer == old
            singles = [read_value(StaleFirst(stale, source), lk, now) for lk in lks]
            assert singles == [old[key] for key in keys]
        assert book.get_many("b", keys) == [new[key] for key in keys]


def test_get_many_of_many_keys_reads_them_in_windows(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call for more keys than a window holds is read window by window, every value right."""
    monkeypatch.setattr(many, "MANY_WINDOW", 64)
    reads: list[int] = []
    real = many.journal_bodies

    def counted(journal: object, rows: list[Any]) -> Any:
        reads.append(len(rows))
        return real(journal, rows)

    monkeypatch.setattr(many, "journal_bodies", counted)
    with inkpen.open(store_url, **TINY, inline_value_bytes=0) as book:  # values in the journal
        for first in range(0, 1000, 100):
            batch = inkpen.Batch()
            for i in range(first, first + 100):
                batch.put("b", f"key{i:05d}", b"%d" % i * 3)
            book.write(batch)
        book.flush()
        wanted = [f"key{i:05d}" for i in range(1100)]
        assert book.get_many("b", wanted) == [
            b"%d" % i * 3 if i < 1000 else None for i in range(1100)
        ]
    assert max(reads) == 64 and sum(reads) == 1000, reads
