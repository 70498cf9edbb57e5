"""Backpressure: a writer far faster than the ledger can flush is slowed, then blocked."""

from __future__ import annotations

import threading

import inkpen
from inkpen.objectstore import open_store
from support.engine import GatedLedgerStore
from support.waiting import wait_until

OPTIONS = {
    "ledger_cache_entries": 50,
    "l0_cache_entries": 100,
    "max_l0_files": 1,
    "sst_target_bytes": 4096,
    "delete_poll_interval": 0.05,
}


def test_memory_stays_bounded_while_the_ledger_cannot_flush(store_url: str) -> None:
    store = GatedLedgerStore(open_store(store_url))
    book = inkpen.open(store, **OPTIONS)
    written = 0
    done = threading.Event()

    def writer() -> None:
        nonlocal written
        for i in range(5000):
            book.put("bp", f"k{i:05d}", b"x" * 20)
            written = i + 1
        done.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    store.waiting.wait(timeout=60)
    # The writer ends up blocked: no progress while the gate is shut.
    wait_until(lambda: book.stats()["pressure"].get("ledger_cache") == 2)
    blocked_at = written
    stats = book.stats()
    assert stats["ledger_cache_entries"] <= 4 * OPTIONS["ledger_cache_entries"] + 1
    # The Penciller takes pushes while under twice its L0 size: at most one cache beyond it.
    assert stats["ledger_mem_entries"] <= (
        2 * OPTIONS["l0_cache_entries"] + 4 * OPTIONS["ledger_cache_entries"] + 1
    )
    assert stats["refused_pushes"] > 0
    assert not done.is_set()
    assert blocked_at < 5000
    assert book.stats()["ledger_cache_entries"] == stats["ledger_cache_entries"]
    store.gate.set()
    assert done.wait(timeout=120)
    thread.join()
    assert book.get("bp", "k04999") == b"x" * 20
    assert sum(1 for _ in book.keys("bp")) == 5000
    assert book.stats()["pressure"].get("ledger_cache", 0) == 0
    book.close()
