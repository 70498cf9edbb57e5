"""The writer's deletes go in batches: the segments a close collects, and its file clerks' files
(through the batched deleter), with each clerk leaving delete_pending only once its own key's
delete succeeded.

Requests are counted with a counting wrapper; batching is shown by holding the store while
deletes gather (never by timing).
"""

from __future__ import annotations

import math
import threading
from functools import partial

import inkpen
from inkpen.actors.kernel.deleter import Deleter, Outcome
from inkpen.errors import FencedError, StoreError
from inkpen.manifest.paths import is_sst_key, parse_segment_key
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import CountingStore, ObjectStore, open_store
from inkpen.objectstore.base import DELETE_MANY_KEYS
from support.engine import SMALL
from support.refusing import RefusingDeletes
from support.waiting import wait_until


def _segments(store: ObjectStore) -> set[str]:
    return {i.key for i in store.list("journal/") if parse_segment_key(i.key) is not None}


def test_close_deletes_the_rolled_segments_in_requests_of_a_thousand(store_url: str) -> None:
    store = CountingStore(open_store(store_url))
    puts = 1_200  # one put at a time: a segment each, none rolled before the close
    options = {**SMALL, "roll_segments": 100_000, "roll_bytes": 1 << 30, "gc_min_age": 300.0}
    book = inkpen.open(store, **options)
    for i in range(puts):
        book.put("b", f"k{i:05d}", b"v")
    before = _segments(store)
    assert len(before) >= puts
    store.reset()
    book.close()
    gone = before - _segments(store)
    assert len(gone) >= puts  # every data segment was rolled and collected by the close
    # One request per 1,000 segments, and at most two more for the clerks' batches of the
    # files the close's merges and re-roll retired (one at a time, this would be 1,200).
    assert store.snapshot()["deletes"] <= math.ceil(len(gone) / DELETE_MANY_KEYS) + 2
    with inkpen.open(store_url, **options) as again:
        assert again.get("b", "k01199") == b"v"


def test_clerks_whose_deletes_fail_stay_pending_retry_and_go_once_the_store_lets_them(
    store_url: str,
) -> None:
    store = RefusingDeletes(open_store(store_url))
    store.refuse_prefix = "ledger/"  # every SST delete fails until the test lifts it
    with inkpen.open(store, **SMALL) as book:
        for round_ in range(4):
            for first in range(0, 600, 100):
                batch = inkpen.Batch()
                for i in range(first, first + 100):
                    batch.put("b", f"k{i:04d}", b"%d-%d" % (round_, i))
                book.write(batch)
            book.flush()
        book.compact_ledger()
        latest = ManifestStore(store).latest()
        assert latest is not None
        live = {sst.name for sst in latest.manifest.ledger.ssts()}
        stored = {i.key for i in store.list("ledger/") if is_sst_key(i.key)}
        retired = stored - live
        assert retired, "the load should have merged some SSTs away"

        def retried() -> bool:
            pending = book.stats()["ledger_pending_deletes"]
            return pending == len(retired) and all(store.refusals[k] >= 2 for k in retired)

        # Each retired SST's clerk had its delete refused, stayed delete_pending and asked again.
        wait_until(retried, "the refused clerks to retry")
        assert retired <= {i.key for i in store.list("ledger/")}
        store.refuse_prefix = None

        def collected() -> bool:
            now = {i.key for i in store.list("ledger/") if is_sst_key(i.key)}
            return now == live and book.stats()["ledger_pending_deletes"] == 0

        wait_until(collected, "the retired SSTs to be deleted")
        assert book.get("b", "k0599") == b"3-599"


def test_the_deleter_sends_the_names_that_gathered_in_one_batch(store: ObjectStore) -> None:
    held = RefusingDeletes(store)
    keys = [f"ledger/{i:03d}.sst" for i in range(12)]
    for key in keys:
        store.put(key, b"x")
    outcomes: dict[str, StoreError | None] = {}
    lock = threading.Lock()

    def told(key: str) -> Outcome:
        def outcome(error: StoreError | None) -> None:
            with lock:
                outcomes[key] = error

        return outcome

    deleter = Deleter(held, gather=0.0)
    held.gate.clear()
    deleter.delete(keys[0], told(keys[0]))
    wait_until(held.entered.is_set, "the first batch to reach the store")
    held.refuse_prefix = "ledger/01"  # ledger/010.sst and ledger/011.sst fail
    for key in keys[1:]:
        deleter.delete(key, told(key))  # they wait while the first batch is held
    held.gate.set()
    wait_until(lambda: len(outcomes) == len(keys), "every outcome")
    assert held.batches == [keys[:1], keys[1:]]
    assert held.snapshot()["deletes"] == 2
    assert {k for k, e in outcomes.items() if e is not None} == {keys[10], keys[11]}
    assert all(e is None or e.definite for e in outcomes.values())
    assert {i.key for i in store.list("ledger/")} == {keys[10], keys[11]}
    deleter.close()
    held.refuse_prefix = None
    deleter.delete(keys[10], told("after close"))  # sent at once, on this thread
    assert outcomes["after close"] is None
    assert {i.key for i in store.list("ledger/")} == {keys[11]}


def test_a_deleter_whose_writer_was_fenced_deletes_nothing(store: ObjectStore) -> None:
    keys = [f"ledger/{i}.sst" for i in range(3)]
    for key in keys:
        store.put(key, b"x")
    fence: list[FencedError] = []
    outcomes: dict[str, StoreError | None] = {}
    deleter = Deleter(store, gather=0.0, refusal=lambda: fence[0] if fence else None)
    fence.append(FencedError("a newer writer has opened the database"))
    for key in keys:
        deleter.delete(key, partial(outcomes.__setitem__, key))
    wait_until(lambda: len(outcomes) == len(keys), "every outcome")
    deleter.close()
    assert all(e is not None and e.definite and "newer writer" in str(e) for e in outcomes.values())
    assert [i.key for i in store.list("ledger/")] == keys
