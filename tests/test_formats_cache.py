"""The shared LRU block cache: byte-weighted eviction in recency order, and safety under threads."""

from __future__ import annotations

import random
import threading

import pytest

from inkpen.formats.cache import BlockCache, LruCache, SingleFlight
from support.waiting import wait_until


def test_evicts_least_recently_used_by_weight() -> None:
    cache = LruCache(100)
    cache.put("a", 1, 40)
    cache.put("b", 2, 40)
    assert cache.get("a") == 1  # "b" is now the least recently used
    cache.put("c", 3, 40)
    assert cache.get("b") is None
    assert cache.get("a") == 1
    assert cache.get("c") == 3
    assert cache.weight == 80
    assert len(cache) == 2


def test_replacing_a_key_reweighs_it() -> None:
    cache = LruCache(100)
    cache.put("a", 1, 90)
    cache.put("a", 2, 10)
    assert cache.weight == 10
    assert cache.get("a") == 2


def test_value_heavier_than_capacity_is_not_cached() -> None:
    cache = LruCache(100)
    cache.put("small", 1, 10)
    cache.put("huge", 2, 101)
    assert cache.get("huge") is None
    assert cache.get("small") == 1


def test_stats_count_hits_and_misses() -> None:
    cache = LruCache(10)
    cache.put("a", 1, 1)
    cache.get("a")
    cache.get("b")
    stats = cache.stats()
    counters = (stats.hits, stats.misses, stats.entries, stats.weight, stats.capacity)
    assert counters == (1, 1, 1, 1, 10)
    cache.clear()
    assert len(cache) == 0
    assert cache.weight == 0


def test_is_a_block_cache() -> None:
    assert isinstance(LruCache(1), BlockCache)


@pytest.mark.parametrize("capacity", [-1, 1.5, "10"])
def test_bad_capacity_is_refused(capacity: object) -> None:
    with pytest.raises(ValueError, match="capacity_bytes"):
        LruCache(capacity)  # type: ignore[arg-type]


def test_weight_stays_consistent_under_many_threads() -> None:
    cache = LruCache(1000)
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        try:
            for _ in range(5000):
                key = rng.randrange(200)
                if rng.random() < 0.5:
                    cache.put(key, (key, seed), rng.randrange(1, 60))
                else:
                    found = cache.get(key)
                    assert found is None or (isinstance(found, tuple) and found[0] == key)
        except BaseException as exc:  # surfaced in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert 0 < cache.weight <= 1000
    stats = cache.stats()
    assert stats.hits + stats.misses > 0
    # If the weight accounting had drifted, refilling with known weights would expose it.
    for key in range(1000, 1010):
        cache.put(key, key, 100)
    assert cache.weight == 1000
    assert len(cache) == 10
    assert all(cache.get(key) == key for key in range(1000, 1010))


def test_load_caches_what_the_loader_answers() -> None:
    cache = LruCache(100)
    calls: list[str] = []

    def loader() -> tuple[object, int]:
        calls.append("a")
        return "value", 10

    assert cache.load("a", loader) == "value"
    assert cache.load("a", loader) == "value"
    assert calls == ["a"]
    assert cache.weight == 10
    assert cache.holds("a") and not cache.holds("b")


def test_one_loader_per_key_while_the_others_wait() -> None:
    """Eight threads load one key: one loader runs (the others are seen waiting for it while
    it is held), all get its value."""
    cache = LruCache(1000)
    release = threading.Event()
    calls: list[int] = []

    def loader() -> tuple[object, int]:
        calls.append(1)
        assert release.wait(30)
        return "shared", 1

    found: list[object] = []
    threads = [
        threading.Thread(target=lambda: found.append(cache.load("k", loader))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    wait_until(lambda: cache.flights.waiting == 7, "seven threads waiting for the loader")
    assert len(cache.flights) == 1
    release.set()
    for thread in threads:
        thread.join()
    assert found == ["shared"] * 8
    assert calls == [1]
    assert len(cache.flights) == 0 and cache.flights.waiting == 0


def test_loads_of_different_keys_run_at_once() -> None:
    """Sixteen keys loaded by sixteen threads: every loader is under way at the same time (a
    barrier inside the loader breaks if one lock made them take turns)."""
    cache = LruCache(1000)
    barrier = threading.Barrier(16, timeout=30)

    def loader(key: int) -> tuple[object, int]:
        barrier.wait()
        return key, 1

    found: dict[int, object] = {}

    def load(key: int) -> None:
        found[key] = cache.load(key, lambda: loader(key))

    threads = [threading.Thread(target=load, args=(key,)) for key in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found == {key: key for key in range(16)}


def test_a_waiter_whose_leader_failed_loads_for_itself() -> None:
    flights = SingleFlight()
    release = threading.Event()
    started = threading.Event()

    def failing() -> str:
        started.set()
        assert release.wait(30)
        raise OSError("the store refused")

    errors: list[BaseException] = []

    def lead() -> None:
        try:
            flights.run("k", failing)
        except OSError as exc:
            errors.append(exc)

    leader = threading.Thread(target=lead)
    leader.start()
    assert started.wait(30)
    answers: list[str] = []
    follower = threading.Thread(target=lambda: answers.append(flights.run("k", lambda: "own")))
    follower.start()
    wait_until(lambda: flights.waiting == 1, "the follower waiting")
    release.set()
    leader.join()
    follower.join()
    assert [str(e) for e in errors] == ["the store refused"]
    assert answers == ["own"]
    assert len(flights) == 0
