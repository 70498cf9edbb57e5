"""Snapshots hold their files through merges and compactions, and let them go when released.

A snapshot taken before 10,000 overwrites keeps returning the old values and rolling over the old
set while merges and journal compaction replace every file it reads; once it is closed — or its
registration times out — those files are deleted.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pykka

import inkpen
from inkpen.objectstore import open_store
from support.engine import SMALL
from support.waiting import wait_until

ROWS = 500
ROUNDS = 20  # 500 keys x 20 rounds = 10,000 overwrites


def files_read_by(snapshot: inkpen.Snapshot) -> set[str]:
    """Names of the stored files a snapshot's views read."""
    parts = snapshot._parts  # the snapshot's frozen views
    names = {h.name for h in parts.ledger.handles()}
    assert parts.journal is not None
    names |= {h.name for h in parts.journal.registered.files}
    return names


def live_files(book: inkpen.Bookie) -> set[str]:
    """Names of the files the Bookie's current views read."""
    with book.snapshot() as now:
        return files_read_by(now)


def stored(url: str) -> set[str]:
    return {info.key for info in open_store(url).list("")}


def load_and_snapshot(book: inkpen.Bookie, **snapshot_options: bool) -> inkpen.Snapshot:
    for i in range(ROWS):
        book.put("s", f"k{i:04d}", b"old-%d" % i)
    book.flush()
    book.compact_ledger()
    return book.snapshot(**snapshot_options)


def overwrite_everything(book: inkpen.Bookie) -> None:
    """ROUNDS overwrites of every key, from 16 threads (so group commit batches them)."""

    def overwrite(first: int) -> None:
        for round_ in range(ROUNDS):
            for i in range(first, ROWS, 16):
                book.put("s", f"k{i:04d}", b"new-%d-%d" % (round_, i))

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(overwrite, range(16)))
    book.flush()
    book.compact_ledger()
    for _ in range(40):
        if not book.compact_journal().compacted:
            break


def test_snapshot_keeps_its_files_until_closed(store_url: str, store_kind: str) -> None:
    with inkpen.open(store_url, **SMALL) as book:
        snap = load_and_snapshot(book, long_running=True)
        held = files_read_by(snap)
        assert held
        overwrite_everything(book)
        assert book.stats()["merges"] > 0
        # Most files the snapshot reads were replaced by merges and compaction, yet they all
        # still exist and the snapshot still answers from them.
        live = live_files(book)
        replaced = held - live
        assert len(replaced) > len(held) // 2
        book.run_gc(min_age=0)
        assert held <= stored(store_url)
        assert snap.get("s", "k0007") == b"old-7"
        assert dict((k, v) for _, k, v in snap.objects("s")) == {
            f"k{i:04d}".encode(): b"old-%d" % i for i in range(ROWS)
        }
        assert book.get("s", "k0007") == b"new-%d-7" % (ROUNDS - 1)
        snap.close()

        # Released: the clerks delete the replaced files (and GC anything left over).
        def gone() -> bool:
            book.run_gc(min_age=0)
            return not (replaced & stored(store_url))

        wait_until(gone)
        assert book.get("s", "k0499") == b"new-%d-499" % (ROUNDS - 1)


def test_abandoned_snapshot_stops_holding_files_after_its_timeout(store_url: str) -> None:
    options = {**SMALL, "snapshot_timeout_short": 1.0}
    with inkpen.open(store_url, **options) as book:
        snap = load_and_snapshot(book)
        held = files_read_by(snap)
        assert book.stats()["ledger_snapshots"] == 1
        overwrite_everything(book)
        replaced = held - live_files(book)
        assert replaced

        def gone() -> bool:
            book.run_gc(min_age=0)
            return not (replaced & stored(store_url))

        # Never closed: once the short timeout lapses the registration is dropped and the
        # replaced files go (how long they were held is the first test's concern).
        wait_until(gone)
        # The lapsed registrations are dropped by their owners on their own schedule: wait on
        # the counts asserted, not on the deletes next to them.
        wait_until(lambda: book.stats()["ledger_snapshots"] == 0)
        wait_until(lambda: book.stats()["journal_snapshots"] == 0)
        snap.close()


def test_close_stops_the_clerks_of_files_still_pending_delete(store_url: str) -> None:
    """A snapshot keeps replaced files in delete_pending; closing the Bookie must stop their
    clerks too, so none outlives it (and none deletes through a closed store later)."""
    before = {ref.actor_urn for ref in pykka.ActorRegistry.get_all()}
    book = inkpen.open(store_url, **SMALL)
    snap = load_and_snapshot(book, long_running=True)
    overwrite_everything(book)
    pending = book.stats()
    assert pending["ledger_pending_deletes"] + pending["journal_pending_deletes"] > 0
    book.close()
    left = [
        ref
        for ref in pykka.ActorRegistry.get_all()
        if ref.actor_urn not in before and ref.is_alive()
    ]
    assert left == [], f"actors alive after close: {[r.actor_class.__name__ for r in left]}"
    snap.close()
