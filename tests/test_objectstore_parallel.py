"""Running many store requests at once within a bound (:mod:`inkpen.objectstore.parallel`), and
the bound each kind of store names.

Overlap is shown with barriers that only open when the expected number of calls are in flight
together (a run that kept fewer in flight would break them), never with timing.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from inkpen.errors import UsageError
from inkpen.objectstore import CountingStore, FaultPlan, FaultyStore, ObjectStore
from inkpen.objectstore.local import LOCAL_CONCURRENCY
from inkpen.objectstore.parallel import (
    DEFAULT_CONCURRENCY,
    MEMORY_CONCURRENCY,
    concurrency,
    in_pool_thread,
    run_bounded,
)
from inkpen.objectstore.s3_common import MAX_POOL_CONNECTIONS

BARRIER_TIMEOUT = 60.0


class _Flight:
    """Counts the calls in flight and the most there ever were."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1


def test_at_most_limit_calls_are_in_flight_and_results_keep_their_order() -> None:
    flight = _Flight()
    together = threading.Barrier(3, timeout=BARRIER_TIMEOUT)

    def call(i: int) -> int:
        with flight:
            together.wait()  # opens only when three calls are in flight at once
            return i * i

    assert run_bounded(call, range(12), limit=3) == [i * i for i in range(12)]
    assert flight.most == 3


def test_weights_keep_the_bytes_in_flight_within_the_budget() -> None:
    flight = _Flight()
    pairs = threading.Barrier(2, timeout=BARRIER_TIMEOUT)

    def call(weight: int) -> int:
        with flight:
            if weight == 4:
                pairs.wait()  # two of weight 4 fit in 10 bytes; a third would not
            return weight

    weights = [4] * 8 + [100]  # one item alone always runs, whatever it weighs
    found = run_bounded(call, weights, limit=8, weigh=lambda w: w, max_bytes=10)
    assert found == weights
    assert flight.most == 2


def test_the_first_failing_item_in_order_is_raised_and_no_more_are_started() -> None:
    started: list[int] = []
    lock = threading.Lock()

    def call(i: int) -> int:
        with lock:
            started.append(i)
        if i in (5, 7):
            raise ValueError(f"item {i}")
        return i

    with pytest.raises(ValueError, match="item 5"):
        run_bounded(call, range(200), limit=4)
    assert len(started) < 200


def test_done_is_told_of_each_success_one_at_a_time() -> None:
    told: list[int] = []
    busy = threading.Lock()

    def done(item: int, result: int) -> None:
        assert busy.acquire(blocking=False), "done called while another done ran"
        try:
            told.append(result)
        finally:
            busy.release()

    run_bounded(lambda i: i + 1, range(50), limit=8, done=done)
    assert sorted(told) == list(range(1, 51))


def test_a_run_inside_a_pool_thread_runs_its_items_in_that_thread() -> None:
    def inner(_: int) -> tuple[str, bool]:
        return threading.current_thread().name, in_pool_thread()

    def outer(_: int) -> tuple[str, list[tuple[str, bool]]]:
        return threading.current_thread().name, run_bounded(inner, range(5), limit=5)

    for thread, inside in run_bounded(outer, range(4), limit=4):
        assert thread.startswith("inkpen-io")
        assert inside == [(thread, True)] * 5  # inline: no pool thread waits on another
    assert not in_pool_thread()


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_a_bad_limit_is_refused(limit: Any) -> None:
    with pytest.raises(UsageError):
        run_bounded(lambda i: i, [1, 2], limit=limit)


def test_each_kind_of_store_names_its_bound_and_wrappers_pass_it_on(
    store: ObjectStore, store_kind: str
) -> None:
    expected = {
        "memory": MEMORY_CONCURRENCY,
        "local": LOCAL_CONCURRENCY,
        "s3": MAX_POOL_CONNECTIONS,
    }
    assert concurrency(store) == expected[store_kind]
    assert concurrency(CountingStore(store)) == expected[store_kind]
    assert concurrency(FaultyStore(store, FaultPlan())) == expected[store_kind]
    stand_in = FaultyStore(store, FaultPlan(delay=(0.0, 0.0)), concurrency=48)
    assert concurrency(CountingStore(stand_in)) == 48
    assert concurrency(object()) == DEFAULT_CONCURRENCY
    with pytest.raises(UsageError):
        FaultyStore(store, FaultPlan(), concurrency=0)
