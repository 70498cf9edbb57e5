"""Fencing: a second writer opening the database stops the first from writing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial

import pytest

import inkpen
from inkpen.manifest.paths import LEDGER_PREFIX
from inkpen.objectstore import FaultPlan, FaultyStore, open_store
from support.cli import ok
from support.engine import (
    TINY,
    GatedLedgerStore,
    HoldingStore,
    RacingWriters,
    missing_objects,
)
from support.hooks import HookedStore
from support.latency_proxy import STORE_KIND_PARAMS, with_latency
from support.waiting import wait_until

THROTTLED = {**TINY, "ledger_cache_entries": 4, "l0_cache_entries": 8, "max_l0_files": 1}
"""Backpressure reaches "stop" after a few dozen puts while the ledger cannot flush."""
PUTTERS = 4
DEADLINE = 30.0


@pytest.fixture(params=with_latency(STORE_KIND_PARAMS, tier=True))
def store_kind(request: pytest.FixtureRequest) -> str:
    """Each kind of store, and SeaweedFS behind the latency proxy (the latency tier)."""
    return str(request.param)


@pytest.mark.parametrize("store_kind", with_latency(STORE_KIND_PARAMS, tier=False))
def test_second_open_fences_the_first(store_url: str) -> None:
    first = inkpen.open(store_url, **TINY)
    for i in range(30):
        first.put("b", f"k{i}", b"first")
    # No merges or GC in the second writer: the first's files stay, so it reads what it has.
    second = inkpen.open(store_url, **{**TINY, "compaction": "external"})
    with pytest.raises(inkpen.FencedError):
        first.put("b", "after-fence", b"first")
    with pytest.raises(inkpen.FencedError):
        first.delete("b", "k0")
    # A fenced Bookie still reads what it has.
    assert first.get("b", "k3") == b"first"
    second.put("b", "k3", b"second")
    assert second.get("b", "k0") == b"first"
    first.close()
    second.close()
    with inkpen.open(store_url, **TINY) as third:
        assert third.get("b", "after-fence") is None
        assert third.get("b", "k0") == b"first"
        assert third.get("b", "k3") == b"second"
        assert third.stats()["writer_epoch"] == 3


def test_a_fenced_bookie_whose_files_were_replaced_says_it_was_fenced(store_url: str) -> None:
    """Once the newer writer's merges have replaced and deleted files the fenced Bookie's views
    name, its reads of them raise FencedError (telling what to do), never a bare NotFoundError,
    and never a wrong value."""
    uncached = {**TINY, "block_cache_bytes": 0, "journal_cache_bytes": 0}
    first = inkpen.open(store_url, **uncached)
    keys = [f"k{i:03}" for i in range(60)]
    for key in keys:
        first.put("b", key, b"first")
    first.flush()
    store = open_store(store_url)
    first_era = {info.key for info in store.list(LEDGER_PREFIX)}
    second = inkpen.open(store_url, **TINY)
    for key in keys:
        second.put("b", key, b"second")
    second.compact_ledger()

    def replaced() -> set[str]:
        from inkpen.manifest.store import ManifestStore

        latest = ManifestStore(store).latest()
        assert latest is not None
        named = {name for root, name in latest.manifest.referenced_objects() if root is None}
        return first_era - named

    def deleted() -> bool:
        present = {info.key for info in store.list(LEDGER_PREFIX)}
        return not replaced() & present

    wait_until(deleted, "the newer writer deletes the ledger files it replaced", DEADLINE)
    assert replaced(), "the newer writer's merges replaced none of the first writer's files"
    outcomes: list[bytes | str | None] = []
    for key in keys:
        try:
            outcomes.append(first.get("b", key))
        except inkpen.FencedError as exc:
            assert "Close it" in str(exc)
            outcomes.append("fenced")
    assert set(outcomes) <= {b"first", "fenced"}
    assert "fenced" in outcomes
    first.close()
    second.close()


def test_writes_racing_a_fence_either_land_or_fail(store_url: str) -> None:
    first = inkpen.open(store_url, **TINY)
    writers = RacingWriters(first, 4, limit=10_000)
    writers.start()
    second = inkpen.open(store_url, **TINY)
    writers.join()
    acknowledged, refused = writers.acknowledged, writers.refused
    assert len(refused) == 4, "every writer thread of the fenced Bookie must end with FencedError"
    second.put("race", "second", b"2")
    first.close()
    second.close()
    with inkpen.open(store_url, **TINY) as book:
        stored = {key.decode() for key in book.keys("race")}
    assert set(acknowledged) <= stored
    assert not set(refused) & stored
    assert stored - set(acknowledged) == {"second"}


def test_a_landed_segment_whose_outcome_cannot_be_read_back_is_not_reported_definite() -> None:
    """Creates land but lose their response, and every read fails: the put's outcome is unknown,
    so it must fail as indefinite (never "definitely did not happen"); later puts fail definitely
    while it stays unknown, and once the store answers again the Bookie settles it (it landed:
    it becomes visible) and takes writes again, without a reopen."""
    store = FaultyStore(open_store("memory://landed-unknown"), FaultPlan(seed=1))
    book = inkpen.open(store, **TINY)
    book.put("b", "before", b"0")
    store.plan = FaultPlan(
        seed=1,
        after={"put_if_absent": 1.0},
        before=dict.fromkeys(("get", "get_range", "head", "list"), 1.0),
    )
    with pytest.raises(inkpen.StoreError) as failed:
        book.put("b", "k", b"written")
    assert failed.value.definite is False
    assert "may still land" in str(failed.value)
    with pytest.raises(inkpen.StoreError, match="still unknown") as held:
        book.put("b", "other", b"x")
    assert held.value.definite is True
    stats = book.stats()
    assert stats["unsettled_segment"] is not None and stats["stopped"] is None
    store.plan = FaultPlan(seed=1)
    book.put("b", "after", b"2")  # settles the segment of "k" first, then writes its own
    assert book.get("b", "k") == b"written"  # it had landed
    assert book.get("b", "other") is None
    stats = book.stats()
    assert stats["unsettled_segment"] is None and stats["settled_segments"] == 1
    assert stats["stopped"] is None
    book.abandon()
    with inkpen.open(store, **TINY) as reopened:
        assert {k: reopened.get("b", k) for k in ("before", "k", "other", "after")} == {
            "before": b"0",
            "k": b"written",
            "other": None,
            "after": b"2",
        }


class Outcome:
    """Runs ``work`` on a daemon thread and keeps what it raised (None: it returned)."""

    def __init__(self, work: Callable[[], object]) -> None:
        self.error: BaseException | None = None
        self._work = work
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._work()
        except BaseException as exc:
            self.error = exc

    def ended_by(self, deadline: float) -> bool:
        self.thread.join(timeout=max(0.0, deadline - time.monotonic()))
        return not self.thread.is_alive()


@pytest.mark.parametrize("learns_by", ["commit", "probe"])
def test_puts_held_by_backpressure_end_when_the_writer_is_fenced(
    store_url: str, learns_by: str
) -> None:
    """Puts blocked at "stop" (the ledger cannot flush) and a flush waiting for the ledger end
    with FencedError once a second writer opens: the first learns of the fence from its L0 commit
    ("commit") or, with nothing of its own under way, from the fence probe of its blocked puts
    ("probe"). Every put it acknowledged is in the second writer's database."""
    gated = GatedLedgerStore(open_store(store_url))
    first = inkpen.open(gated, **THROTTLED)
    acknowledged: list[str] = []
    lock = threading.Lock()

    def put_until_refused(index: int) -> None:
        for n in range(100_000):
            key = f"p{index}-{n}"
            first.put("t", key, key.encode())
            with lock:
                acknowledged.append(key)

    putters = [Outcome(partial(put_until_refused, i)) for i in range(PUTTERS)]
    wait_until(lambda: first.stats()["throttled_puts"] == PUTTERS, "puts to block", DEADLINE)
    flush = Outcome(first.flush)
    second = inkpen.open(store_url, **TINY)
    try:
        if learns_by == "commit":
            gated.gate.set()
        deadline = time.monotonic() + DEADLINE
        hung = [i for i, p in enumerate(putters) if not p.ended_by(deadline)]
        assert not hung, f"puts of threads {hung} still wait after the fence"
        assert flush.ended_by(deadline), "flush still waits after the fence"
        for putter in putters:
            assert isinstance(putter.error, inkpen.FencedError), repr(putter.error)
        assert isinstance(flush.error, inkpen.FencedError), repr(flush.error)
        with pytest.raises(inkpen.FencedError):
            first.put("t", "after", b"x")
        assert acknowledged
        for key in acknowledged:
            assert second.get("t", key) == key.encode(), key
        second.put("t", "second", b"2")
    finally:
        gated.gate.set()
        first.close()
        second.close()
    with inkpen.open(store_url, **TINY) as third:
        assert {k.decode() for k in third.keys("t")} == {*acknowledged, "second"}


def test_a_fenced_writer_that_does_not_know_it_deletes_nothing_with_its_gc(
    store_url: str, store_kind: str
) -> None:
    """A second writer has stored a file it has not committed yet; the first, fenced but not
    aware of it (it has written nothing since), runs its GC at min_age=0. The GC must see the
    newer epoch and delete nothing; the second writer's data all reads back afterwards."""
    first = inkpen.open(store_url, **TINY)
    for n in range(40):
        first.put("a", f"k{n}", b"first %d" % n)
    store = open_store(store_url)
    holding = HoldingStore(store)
    second = inkpen.open(holding, **TINY)
    try:

        def write_second() -> None:
            for n in range(60):
                second.put("b", f"k{n}", b"second %d" % n)

        writes = Outcome(write_second)
        assert holding.held.wait(DEADLINE), "the second writer stored no file"
        assert holding.name is not None
        with pytest.raises(inkpen.FencedError):
            first.run_gc(min_age=0)
        assert store.head(holding.name).size > 0  # NotFoundError: the fenced writer deleted it
        with pytest.raises(inkpen.FencedError):  # and it knows it is fenced now
            first.put("a", "late", b"x")
        holding.release.set()
        assert writes.ended_by(time.monotonic() + DEADLINE) and writes.error is None
        second.flush()
        second.compact_ledger()
        assert missing_objects(store) == []
        for n in range(40):
            assert second.get("a", f"k{n}") == b"first %d" % n
        for n in range(60):
            assert second.get("b", f"k{n}") == b"second %d" % n
    finally:
        holding.release.set()
        first.close()
        second.close()
    assert missing_objects(store) == []
    with inkpen.open(store_url, **TINY) as third:
        assert len(list(third.keys("b"))) == 60
        assert third.get("a", "late") is None
    store.close()
    if store_kind != "memory":
        assert ok("verify", store_url).lines[-1].startswith("result: all ")


def test_a_writer_fenced_during_its_start_up_replay_fails_its_open(
    durable_store_url: str,
) -> None:
    """A crashed writer left puts the ledger never persisted. The next writer's start-up replay
    fills its Penciller while its first L0 write is held back, so the replay waits for room;
    another writer opens meanwhile. The waiting open must end with FencedError (it learns of the
    fence by asking the manifest), not wait for room for minutes."""
    url = durable_store_url
    crashed = inkpen.open(url, ledger_cache_entries=10_000, l0_cache_entries=100_000)
    for n in range(200):
        crashed.put("b", f"k{n:03d}", b"v")
    crashed.abandon()

    held, release = threading.Event(), threading.Event()

    def hold_l0_write() -> None:
        held.set()
        release.wait(timeout=120)

    store = HookedStore(open_store(url))
    store.before_create(LEDGER_PREFIX, hold_l0_write)
    outcome: list[BaseException | None] = []

    def open_second() -> None:
        try:
            inkpen.open(store, **TINY).abandon()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    second = threading.Thread(target=open_second, daemon=True)
    second.start()
    try:
        assert held.wait(timeout=120), "the replay never wrote an L0 file"
        with inkpen.open(url) as third:
            assert third.get("b", "k199") == b"v"
            second.join(timeout=60)
            assert not second.is_alive(), "the fenced open is still waiting for ledger room"
            assert len(outcome) == 1 and isinstance(outcome[0], inkpen.FencedError), outcome
    finally:
        release.set()
        second.join(timeout=60)
        store.close()
