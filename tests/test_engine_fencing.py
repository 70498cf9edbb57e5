"""Fencing: a second writer opening the database stops the first from writing."""

from __future__ import annotations

import pytest

import inkpen
from inkpen.objectstore import FaultPlan, FaultyStore, open_store
from support.engine import TINY, RacingWriters


def test_second_open_fences_the_first(store_url: str) -> None:
    first = inkpen.open(store_url, **TINY)
    for i in range(30):
        first.put("b", f"k{i}", b"first")
    second = inkpen.open(store_url, **TINY)
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
    so it must fail as indefinite (never "definitely did not happen"), and the Bookie must stop
    writing rather than reuse the slot."""
    store = FaultyStore(open_store("memory://landed-unknown"), FaultPlan(seed=1))
    book = inkpen.open(store, **TINY)
    store.plan = FaultPlan(
        seed=1,
        after={"put_if_absent": 1.0},
        before=dict.fromkeys(("get", "get_range", "head", "list"), 1.0),
    )
    with pytest.raises(inkpen.StoreError) as failed:
        book.put("b", "k", b"written")
    assert failed.value.definite is False
    store.plan = FaultPlan(seed=1)
    with pytest.raises(inkpen.StoreError, match="stopped writing"):
        book.put("b", "other", b"x")
    book.abandon()
    with inkpen.open(store, **TINY) as reopened:
        assert reopened.get("b", "k") == b"written"  # it had landed
        assert reopened.get("b", "other") is None
