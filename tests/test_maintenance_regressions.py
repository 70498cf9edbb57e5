"""Regressions the state machine found in maintenance: each a minimal, deterministic case.

- A put (or an index add) that expired and was reaped from the ledger must still shadow the older
  value of its key (or the older add) when the ledger is rebuilt from the compacted journal (a
  restored backup). Each case rolls the journal into small files first, so that compaction
  rewrites the file holding the expired write but not the one holding the older write.
- A first hot backup that fails part-way must not poison its destination: taking it again works.
"""

from __future__ import annotations

from collections.abc import Callable

import inkpen
from inkpen.objectstore import FaultPlan, FaultyStore, open_store
from support.engine import TINY, FakeClock


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
        for i in range(3):
            book.put("b", f"pad{i}", b"p")
        book.hot_backup().close()  # rolls the journal: segments become files of about 4 KiB
        clock.advance(2)
        book.flush()
        book.compact_ledger()
        book.compact_journal()
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
        for i in range(3):
            book.put("b", f"pad{i}", b"p")
        book.hot_backup().close()  # rolls the journal: segments become files of about 4 KiB
        clock.advance(2)
        book.flush()
        book.compact_ledger()
        book.compact_journal()
        assert list(book.index_query("b", "f_bin", "", "z")) == []
        book.hot_backup()(dest)
    with inkpen.open(dest, clock=clock, **TINY) as restored:
        assert list(restored.index_query("b", "f_bin", "", "z")) == []
        assert restored.get("b", "k") == b"3"
