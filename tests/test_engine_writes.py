"""Atomic write batches, conditional writes, get_many, reverse folds and index entries that
follow their object, on every store."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

import inkpen
from inkpen.batch import MAX_BATCH_CHANGES
from inkpen.errors import StoreError
from inkpen.formats.journal import decode_journal
from inkpen.formats.keys import object_key
from inkpen.manifest.paths import segment_key
from inkpen.objectstore import open_store
from support.engine import TINY, FakeClock, contents


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def book(store_url: str, clock: FakeClock) -> Iterator[inkpen.Bookie]:
    with inkpen.open(store_url, clock=clock, **TINY) as opened:
        yield opened


# -- batches --------------------------------------------------------------------------------


def test_batch_applies_every_change_in_order_and_survives_reopen(
    store_url: str, clock: FakeClock
) -> None:
    with inkpen.open(store_url, clock=clock, **TINY) as book:
        book.put("b", "gone", b"old")
        batch = inkpen.Batch()
        batch.put("b", "k1", b"first", indexes=[("add", "f_bin", "x")])
        batch.put("b", "k2", b"two")
        batch.put("b", "k1", b"second")  # a later change to the same key wins
        batch.delete("b", "gone")
        assert len(batch) == 4
        before = book.stats()["sqn"]
        book.write(batch)
        assert book.stats()["sqn"] == before + 4
        assert contents(book, "b") == {b"k1": b"second", b"k2": b"two"}
        assert list(book.index_query("b", "f_bin", "x", "x")) == [b"k1"]
    with inkpen.open(store_url, clock=clock, **TINY) as book:
        assert contents(book, "b") == {b"k1": b"second", b"k2": b"two"}


def test_empty_batch_is_a_no_op(book: inkpen.Bookie) -> None:
    before = book.stats()
    book.write(inkpen.Batch())
    after = book.stats()
    assert after["sqn"] == before["sqn"]
    assert after["segments_written"] == before["segments_written"]


def _segment_keys(store_url: str, segment_id: int) -> list[bytes]:
    store = open_store(store_url)
    try:
        key = segment_key(segment_id)
        _, entries = decode_journal(store.get(key), key)
    finally:
        store.close()
    return [e.ledger_key for e in entries]


@pytest.mark.parametrize("max_batch_bytes", [1024 * 1024, 1024], ids=["fits", "oversized"])
def test_a_batch_is_one_journal_segment(
    store_url: str, clock: FakeClock, max_batch_bytes: int
) -> None:
    """Written with concurrent single puts: the batch's changes share one segment and no other
    write lands between them; a batch above max_batch_bytes gets a segment of its own."""
    options: dict[str, Any] = {
        **TINY,
        "roll_segments": 10_000,
        "roll_bytes": 512 * 1024 * 1024,
        "roll_on_close": False,  # the segments stay, unrolled, for the test to read
        "max_batch_bytes": max_batch_bytes,
    }
    with inkpen.open(store_url, clock=clock, **options) as book:
        stop = threading.Event()

        def others() -> None:
            i = 0
            while not stop.is_set():
                book.put("other", f"o{i}", b"x" * 50)
                i += 1

        threads = [threading.Thread(target=others) for _ in range(4)]
        for thread in threads:
            thread.start()
        try:
            batch = inkpen.Batch()
            for i in range(40):
                batch.put("b", f"k{i:03}", b"v" * 100)
            book.write(batch)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        heads = [book.head("b", f"k{i:03}") for i in range(40)]
        sqns = [h.sqn for h in heads if h is not None]
        assert len(sqns) == 40
        assert sqns == list(range(sqns[0], sqns[0] + 40))  # contiguous: nothing between
        segments = book.stats()["next_segment"]
    batch_keys = {object_key(b"b", f"k{i:03}".encode()) for i in range(40)}
    holding = [
        seg
        for seg in range(1, segments)
        if batch_keys & set(_segment_keys_or_empty(store_url, seg))
    ]
    assert len(holding) == 1, holding
    found = _segment_keys(store_url, holding[0])
    assert batch_keys <= set(found)
    if max_batch_bytes == 1024:
        assert set(found) == batch_keys  # a segment of its own


def _segment_keys_or_empty(store_url: str, segment_id: int) -> list[bytes]:
    try:
        return _segment_keys(store_url, segment_id)
    except inkpen.NotFoundError:
        return []


# -- conditional writes -----------------------------------------------------------------------


def test_if_sqn_put_and_delete(book: inkpen.Bookie, clock: FakeClock) -> None:
    book.put("b", "k", b"v1", if_sqn=0)
    first = book.head("b", "k")
    assert first is not None
    with pytest.raises(inkpen.ConflictError) as caught:
        book.put("b", "k", b"again", if_sqn=0)
    assert (caught.value.expected, caught.value.actual) == (0, first.sqn)
    assert caught.value.bucket == b"b" and caught.value.key == b"k"
    with pytest.raises(inkpen.ConflictError):
        book.put("b", "k", b"stale", if_sqn=first.sqn + 1)
    assert book.get("b", "k") == b"v1" and book.head("b", "k") == first  # nothing written
    book.put("b", "k", b"v2", if_sqn=first.sqn)
    second = book.head("b", "k")
    assert second is not None and book.get("b", "k") == b"v2"
    with pytest.raises(inkpen.ConflictError):
        book.delete("b", "k", if_sqn=first.sqn)
    assert book.get("b", "k") == b"v2"
    book.delete("b", "k", if_sqn=second.sqn)
    assert book.get("b", "k") is None
    book.put("b", "k", b"v3", if_sqn=0)  # deleted counts as absent
    book.put("b", "t", b"short", ttl=10)
    clock.advance(11)
    book.put("b", "t", b"new", if_sqn=0)  # expired counts as absent
    assert book.get("b", "t") == b"new"


def test_conflict_rejects_the_whole_batch(book: inkpen.Bookie) -> None:
    book.put("b", "a", b"1")
    head = book.head("b", "a")
    assert head is not None
    before = book.stats()["sqn"]
    batch = inkpen.Batch()
    batch.put("b", "x", b"new")
    batch.delete("b", "a")
    batch.put("b", "a", b"2", if_sqn=head.sqn + 7)
    with pytest.raises(inkpen.ConflictError):
        book.write(batch)
    assert book.get("b", "x") is None and book.get("b", "a") == b"1"
    assert book.stats()["sqn"] == before
    ok = inkpen.Batch()
    ok.put("b", "a", b"2", if_sqn=head.sqn)
    ok.put("b", "a", b"3")  # a later change to the same key in the same batch wins
    ok.put("b", "y", b"y", if_sqn=0)
    book.write(ok)
    assert book.get_many("b", ["a", "y"]) == [b"3", b"y"]


def test_conditional_puts_in_one_segment_cannot_both_succeed(store_url: str) -> None:
    """With interval group commit, racing if_sqn=0 puts on one key share a segment: one wins."""
    with inkpen.open(store_url, flush_policy="interval", flush_interval=0.5, **TINY) as book:
        book.put("b", "warm", b"up")  # the next batch waits for the rest of the interval
        barrier = threading.Barrier(8)
        outcomes: list[str] = []
        lock = threading.Lock()

        def racer(n: int) -> None:
            barrier.wait()
            try:
                book.put("b", "key", f"racer {n}".encode(), if_sqn=0)
                result = "won"
            except inkpen.ConflictError:
                result = "lost"
            with lock:
                outcomes.append(result)

        threads = [threading.Thread(target=racer, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == ["lost"] * 7 + ["won"]
        value = book.get("b", "key")
        assert value is not None and value.startswith(b"racer ")


def test_eight_threads_incrementing_one_counter_lose_no_update(book: inkpen.Bookie) -> None:
    per_thread = 25
    book.put("c", "n", b"0")
    errors: list[BaseException] = []

    def increment() -> None:
        try:
            for _ in range(per_thread):
                while True:
                    head = book.head("c", "n")
                    assert head is not None
                    value = int(book.get("c", "n") or b"0")
                    try:
                        book.put("c", "n", str(value + 1).encode(), if_sqn=head.sqn)
                        break
                    except inkpen.ConflictError:
                        continue
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=increment) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert book.get("c", "n") == str(8 * per_thread).encode()


class _LostAnswers:
    """A store that performs the next journal segment write, then reports a lost answer."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.armed = False
        self.fired = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        self._inner.put_if_absent(key, data, metadata=metadata)
        if self.armed and key.startswith("journal/0"):
            self.armed = False
            self.fired += 1
            raise StoreError(f"lost the answer of {key}", definite=False, key=key)


def test_a_conditional_put_whose_first_attempt_landed_reports_success(store_url: str) -> None:
    inner = open_store(store_url)
    store = _LostAnswers(inner)
    try:
        with inkpen.open(store, **TINY) as book:
            book.put("b", "k", b"v1")
            head = book.head("b", "k")
            assert head is not None
            store.armed = True
            book.put("b", "k", b"v2", if_sqn=head.sqn)  # no ConflictError against itself
            assert store.fired == 1
            assert book.get("b", "k") == b"v2"
            store.armed = True
            batch = inkpen.Batch().put("b", "n", b"new", if_sqn=0)
            book.write(batch)
            assert store.fired == 2 and book.get("b", "n") == b"new"
    finally:
        inner.close()


# -- get_many, reverse folds, index entries --------------------------------------------------


def _random_history(book: inkpen.Bookie, seed: int) -> dict[bytes, bytes]:
    rng = random.Random(seed)
    model: dict[bytes, bytes] = {}
    for i in range(300):
        key = f"k{rng.randrange(120):04}"
        if rng.random() < 0.2:
            book.delete("b", key)
            model.pop(key.encode(), None)
        else:
            value = f"v{i}".encode() * rng.randrange(1, 5)
            book.put("b", key, value, indexes=[("add", "f_bin", key[-1])])
            model[key.encode()] = value
        if i % 97 == 0:
            book.flush()
    return model


def test_get_many_matches_get_and_the_model(book: inkpen.Bookie, store_url: str) -> None:
    model = _random_history(book, 3)
    asked = [f"k{i:04}" for i in range(130)] + ["k0001", "k0001"]
    expected = [model.get(k.encode()) for k in asked]
    assert book.get_many("b", asked) == expected
    assert book.get_many("b", asked) == [book.get("b", k) for k in asked]
    assert book.get_many("b", []) == []
    assert book.get_many("nobucket", ["x"]) == [None]
    with book.snapshot() as snap:
        book.put("b", "k0001", b"later")
        assert snap.get_many("b", asked) == expected
    book.compact_ledger()
    reader = inkpen.open_reader(store_url)
    try:
        model[b"k0001"] = b"later"
        assert reader.get_many("b", asked) == [model.get(k.encode()) for k in asked]
    finally:
        reader.close()


def test_reverse_folds_are_forward_folds_backwards(book: inkpen.Bookie) -> None:
    model = _random_history(book, 5)
    book.compact_ledger()
    _random_history(book, 6)  # memory and L0 over the levels
    forward = list(book.keys("b"))
    assert list(book.keys("b", reverse=True)) == forward[::-1]
    assert list(book.keys("b", "k0030", "k0090", reverse=True)) == [
        k for k in forward[::-1] if b"k0030" <= k <= b"k0090"
    ]
    assert list(book.heads("b", reverse=True)) == list(book.heads("b"))[::-1]
    assert list(book.heads(reverse=True)) == list(book.heads())[::-1]
    assert list(book.objects("b", reverse=True)) == list(book.objects("b"))[::-1]
    terms = list(book.index_query("b", "f_bin", "0", "9", return_terms=True))
    assert (
        terms
        and list(book.index_query("b", "f_bin", "0", "9", return_terms=True, reverse=True))
        == terms[::-1]
    )
    assert model  # the first history left live objects
    with pytest.raises(inkpen.UsageError):
        book.objects("b", order="sqn", reverse=True)
    with pytest.raises(inkpen.UsageError):
        book.keys("b", reverse=1)  # type: ignore[arg-type]


def test_delete_drops_index_entries_it_does_not_list(book: inkpen.Bookie, clock: FakeClock) -> None:
    book.put("u", "alice", b"a", indexes=[("add", "city_bin", "Oslo"), ("add", "age_int", "30")])
    book.put("u", "bob", b"b", indexes=[("add", "city_bin", "Oslo")])
    book.put("u", "carol", b"c", indexes=[("add", "city_bin", "Oslo")], ttl=5)
    assert list(book.index_query("u", "city_bin", "Oslo", "Oslo")) == [b"alice", b"bob", b"carol"]
    book.delete("u", "alice")  # lists no index entry
    clock.advance(6)  # carol expires
    assert list(book.index_query("u", "city_bin", "Oslo", "Oslo")) == [b"bob"]
    assert list(book.index_query("u", "age_int", "0", "99")) == []
    book.flush()
    book.compact_ledger()
    assert list(book.index_query("u", "city_bin", "Oslo", "Oslo", reverse=True)) == [b"bob"]
    book.put("u", "bob", b"b2")  # a put that does not mention a term keeps it
    assert list(book.index_query("u", "city_bin", "Oslo", "Oslo")) == [b"bob"]


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, "1", 1.5, True, [1], 2**64])
def test_bad_if_sqn_is_a_usage_error_and_writes_nothing(book: inkpen.Bookie, bad: Any) -> None:
    before = book.stats()["sqn"]
    with pytest.raises(inkpen.UsageError):
        book.put("b", "k", b"v", if_sqn=bad)
    with pytest.raises(inkpen.UsageError):
        book.delete("b", "k", if_sqn=bad)
    with pytest.raises(inkpen.UsageError):
        inkpen.Batch().put("b", "k", b"v", if_sqn=bad)
    assert book.stats()["sqn"] == before and book.get("b", "k") is None


def test_bad_batches_are_usage_errors_and_write_nothing(book: inkpen.Bookie) -> None:
    before = book.stats()["sqn"]
    batch = inkpen.Batch()
    with pytest.raises(inkpen.UsageError):
        batch.put("b", "k", "not bytes")  # type: ignore[arg-type]
    with pytest.raises(inkpen.UsageError):
        batch.put(42, "k", b"v")  # type: ignore[arg-type]
    with pytest.raises(inkpen.UsageError):
        batch.delete("b", "")
    with pytest.raises(inkpen.UsageError):
        book.write([("b", "k", b"v")])  # type: ignore[arg-type]
    batch.put("b", "good", b"v")
    batch.put("b", "bad", b"v", indexes=[("upsert", "f_bin", "t")])  # checked at write
    with pytest.raises(inkpen.UsageError):
        book.write(batch)
    assert book.stats()["sqn"] == before and book.get("b", "good") is None
    done = inkpen.Batch().put("b", "once", b"v")
    book.write(done)
    with pytest.raises(inkpen.UsageError):
        book.write(done)  # a batch reused after write
    with pytest.raises(inkpen.UsageError):
        done.put("b", "more", b"v")
    with pytest.raises(inkpen.UsageError):
        book.get_many("b", "k")  # one key, not a sequence of keys
    full = inkpen.Batch()
    for i in range(MAX_BATCH_CHANGES):
        full.delete("b", f"d{i}")
    with pytest.raises(inkpen.UsageError):
        full.delete("b", "one too many")
    assert book.stats()["sqn"] == before + 1


def test_the_checker_lets_one_of_two_conditional_puts_in_one_segment_through() -> None:
    """Two units in one intake batch (one segment), both if_sqn=0 on one key: the second is
    checked against the first, not against the published views, and is rejected."""
    from inkpen.actors.journal.changes import ChangeMaker
    from inkpen.actors.journal.intake import WriteIntake
    from inkpen.actors.kernel.views import ViewBoard
    from inkpen.actors.write.conditions import ConditionChecker

    make = ChangeMaker(inkpen.Options())
    intake = WriteIntake(1024 * 1024)
    opened: list[object] = []
    intake.connect(opened.append, opened.append)
    first, _ = intake.submit(make.put("b", "k", b"a", (), None, if_sqn=0))
    second, unit_b = intake.submit_unit(
        [make.put("b", "other", b"o", (), None), make.put("b", "k", b"b", (), None, if_sqn=0)]
    )
    assert first is second and first.conditional
    accepted = ConditionChecker(ViewBoard()).check(first, 1, 0)
    assert [c.value for c in accepted] == [b"a"]
    assert set(first.rejected) == {unit_b}
    rejected = first.rejected[unit_b]
    assert isinstance(rejected, inkpen.ConflictError)
    assert rejected.actual == 1  # the SQN the first put gets
