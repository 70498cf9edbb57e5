"""Regressions the state machine found in maintenance: each a minimal, deterministic case.

- A put (or an index add) that expired and was reaped from the ledger must still shadow the older
  value of its key (or the older add) when the ledger is rebuilt from the compacted journal (a
  restored backup). Each case rolls the journal into small files first, so that compaction
  rewrites the file holding the expired write but not the one holding the older write.
- A first hot backup that fails part-way must not poison its destination: taking it again works.
- ``compact_ledger`` does not return while an L0 write that failed waits for its retry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import inkpen
from inkpen.objectstore import FaultPlan, FaultyStore, ObjectStore, open_store
from support.engine import TINY, FakeClock


def _expire_and_compact(book: inkpen.Bookie, clock: FakeClock) -> None:
    """Roll the journal into files of about 4 KiB, let ``ttl=1`` writes expire, then flush,
    merge (reaping what expired) and compact the journal: compaction rewrites the file holding
    the expired write but not the one holding the older write it replaced."""
    for i in range(3):
        book.put("b", f"pad{i}", b"p")
    book.hot_backup().close()
    clock.advance(2)
    book.flush()
    book.compact_ledger()
    book.compact_journal()


def test_expired_put_still_shadows_older_value_after_compaction(
    make_store_url: Callable[[str], str],
) -> None:
    url, dest = make_store_url("memory"), make_store_url("memory")
    clock = FakeClock()
    big = b"x" * 1500
    with inkpen.open(url, clock=clock, **TINY) as book:
        book.put("b", "live0", big)
        book.put("b", "live1", big)
        book.put("b", "k", b"old value, no ttl")
        book.put("b", "junk0", big)
        book.put("b", "junk1", big)
        book.put("b", "k", b"new value", ttl=1)
        book.put("b", "junk0", big)
        book.put("b", "junk1", big)
        _expire_and_compact(book, clock)
        assert book.get("b", "k") is None
        book.hot_backup()(dest)
    with inkpen.open(dest, clock=clock, **TINY) as restored:
        assert restored.get("b", "k") is None
        assert restored.get("b", "live1") == big


def test_a_failed_first_backup_can_be_taken_again(make_store_url: Callable[[str], str]) -> None:
    dest = make_store_url("memory")
    plan = FaultPlan(seed=1, before={"get": 0.3})
    source = FaultyStore(open_store(make_store_url("memory")), plan)
    with source.paused():
        book = inkpen.open(source, **TINY)
        for i in range(60):
            book.put("b", f"k{i}", b"x" * 100)
        backup = book.hot_backup()
    failed = False
    try:
        backup(dest)
    except inkpen.StoreError:
        failed = True
    assert failed, "the fault plan should make this first backup fail part-way"
    assert [i.key for i in open_store(dest).list("journal/compacted/")], "it copied something"
    with source.paused():
        report = book.hot_backup()(dest)
        book.close()
    assert report.files_kept > 0, "files copied by the failed attempt are reused"
    with inkpen.open(dest, **TINY) as restored:
        assert sum(1 for _ in restored.keys("b")) == 60


def test_expired_index_add_still_shadows_an_older_add_after_compaction(
    make_store_url: Callable[[str], str],
) -> None:
    url, dest = make_store_url("memory"), make_store_url("memory")
    clock = FakeClock()
    big = b"x" * 1500
    with inkpen.open(url, clock=clock, **TINY) as book:
        book.put("b", "live0", big)
        book.put("b", "live1", big)
        book.put("b", "k", b"1", indexes=[("add", "f_bin", "t")])  # no expiry
        book.put("b", "junk0", big)
        book.put("b", "junk1", big)
        book.put("b", "k", b"2", indexes=[("add", "f_bin", "t")], ttl=1)  # expires
        book.put("b", "junk0", big)
        book.put("b", "junk1", big)
        book.put("b", "k", b"3")
        _expire_and_compact(book, clock)
        assert list(book.index_query("b", "f_bin", "", "z")) == []
        book.hot_backup()(dest)
    with inkpen.open(dest, clock=clock, **TINY) as restored:
        assert list(restored.index_query("b", "f_bin", "", "z")) == []
        assert restored.get("b", "k") == b"3"


class _FirstLedgerWriteFails(FaultyStore):
    """Fails the first create of an SST (definitely: nothing is stored), nothing else."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner, FaultPlan())
        self.failed: list[str] = []

    def put_if_absent(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        if key.startswith("ledger/") and not self.failed:
            self.failed.append(key)
            raise inkpen.StoreError(f"injected: the first SST write ({key}) fails", definite=True)
        super().put_if_absent(key, data, metadata=metadata)


def test_compact_ledger_writes_the_l0_file_whose_first_write_failed(
    make_store_url: Callable[[str], str],
) -> None:
    store = _FirstLedgerWriteFails(open_store(make_store_url("memory")))
    with inkpen.open(store, **TINY) as book:
        for n in range(TINY["l0_cache_entries"]):  # the last put fills memory: no later push
            book.put("b", f"k{n:03d}", b"v%d" % n)
        book.compact_ledger()  # the failed L0 write's retry is a second away; it goes now
        stats = book.stats()
        assert store.failed, "the first SST write was not made, so nothing was injected"
        assert stats["l0_files"] == 0
        assert stats["ledger_mem_entries"] < TINY["l0_cache_entries"]
        assert stats["level_files"][1] >= 1
        assert book.get("b", "k000") == b"v0"
