"""Long mixed workloads with tiny files: merges and compaction run all the time, reads stay right.

A dict model follows every write; reads, folds and index queries are compared with it during the
workload (while merges and rolls run in the background) and after explicit merges and journal
compactions. Overwrites and deletes, once compacted and collected, shrink what the store holds.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

import inkpen
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import open_store
from support.engine import TINY, contents
from support.waiting import wait_until


def stored_bytes(url: str, prefix: str) -> tuple[int, int]:
    """(objects, bytes) under a prefix of the store."""
    infos = list(open_store(url).list(prefix))
    return len(infos), sum(i.size for i in infos)


def run_workload(
    book: inkpen.Bookie,
    rng: random.Random,
    rounds: int,
    model: dict[str, bytes],
    index: dict[str, set[str]],
) -> None:
    for step in range(rounds):
        key = f"k{rng.randrange(150):04d}"
        roll = rng.random()
        if roll < 0.15:
            book.delete("w", key, indexes=[("remove", "tag_bin", t) for t in index.pop(key, ())])
            model.pop(key, None)
        else:
            value = rng.randbytes(rng.randrange(0, 300))
            tag = f"t{rng.randrange(10)}"
            old = index.get(key, set())
            specs = [("remove", "tag_bin", t) for t in old if t != tag] + [("add", "tag_bin", tag)]
            book.put("w", key, value, indexes=specs)
            model[key] = value
            index[key] = {tag}
        if step % 97 == 0:
            probe = f"k{rng.randrange(150):04d}"
            assert book.get("w", probe) == model.get(probe)


def check(
    book: inkpen.Bookie | inkpen.Snapshot, model: dict[str, bytes], index: dict[str, set[str]]
) -> None:
    assert contents(book, "w") == {k.encode(): v for k, v in model.items()}
    for tag in (f"t{i}" for i in range(10)):
        expected = sorted(k.encode() for k, tags in index.items() if tag in tags)
        assert list(book.index_query("w", "tag_bin", tag, tag)) == expected


def test_reads_stay_correct_through_merges_and_compaction(store_url: str, store_kind: str) -> None:
    rng = random.Random(42)
    rounds = 400 if store_kind == "s3" else 1500
    model: dict[str, bytes] = {}
    index: dict[str, set[str]] = {}
    with inkpen.open(store_url, **TINY) as book:
        for _ in range(3):
            run_workload(book, rng, rounds, model, index)
            check(book, model, index)
            book.compact_ledger()
            check(book, model, index)
            report = book.compact_journal()
            assert report.scores, "journal compaction scored no file"
            check(book, model, index)
        stats = book.stats()
        assert stats["merges"] > 0 and stats["l0_writes"] > 0
    with inkpen.open(store_url, **TINY) as book:
        check(book, model, index)


def test_compaction_and_gc_shrink_the_store(store_url: str, store_kind: str) -> None:
    value = b"v" * 400
    keys = 60 if store_kind == "s3" else 200
    with inkpen.open(store_url, **TINY) as book:
        for round_ in range(5):
            for i in range(keys):
                book.put("s", f"k{i:04d}", value + bytes([round_]))
        for i in range(0, keys, 2):
            book.delete("s", f"k{i:04d}")
        book.flush()
        book.compact_ledger()
        journal_before = stored_bytes(store_url, "journal/compacted/")[1]
        ledger_before = book.stats()["ledger_bytes"]
        for _ in range(60):
            if not book.compact_journal().compacted:
                break
        else:
            pytest.fail("journal compaction never ran out of work")
        book.compact_ledger()
        # Replaced files are deleted by their clerks once nothing can read them any more.

        def compacted_away_deleted() -> bool:
            if stored_bytes(store_url, "journal/compacted/")[1] < journal_before / 2:
                return True
            book.run_gc(min_age=0)
            return False

        wait_until(
            compacted_away_deleted, "compacted-away journal files deleted", 60, interval=0.05
        )
        assert book.stats()["ledger_bytes"] <= ledger_before
        survivors = {k.decode() for k in book.keys("s")}
        assert survivors == {f"k{i:04d}" for i in range(1, keys, 2)}
        assert book.get("s", "k0001") == value + bytes([4])
    # Deleted and overwritten values stay gone after reopen; the live ones are intact.
    with inkpen.open(store_url, **TINY) as book:
        assert book.get("s", "k0000") is None
        assert book.get("s", f"k{keys - 1:04d}") == value + bytes([4])
        # Files still waiting in delete_pending when the first Bookie closed are orphans now.
        book.run_gc(min_age=0)
        latest = ManifestStore(open_store(store_url)).latest()
        assert latest is not None
        referenced = {name for _, name in latest.manifest.referenced_objects()}
        on_store = {i.key for i in open_store(store_url).list("journal/compacted/")}
        assert on_store == {n for n in referenced if n.startswith("journal/compacted/")}


@pytest.mark.parametrize("strategy", ["retain", "recovr"])
def test_ledger_rebuilt_from_compacted_journal(
    store_url: str, store_kind: str, make_store_url: Callable[[str], str], strategy: str
) -> None:
    """After compaction the journal alone still rebuilds the objects (and, under retain, the
    index entries): a hot backup of it opens with the same contents."""
    options = {**TINY, "reload_strategy": {"o": strategy}}
    model: dict[str, bytes] = {}
    index: dict[str, set[str]] = {}
    with inkpen.open(store_url, **options) as book:
        run_workload(book, random.Random(3), 800, model, index)
        for _ in range(4):
            book.compact_journal()
        backup_url = make_store_url(store_kind)
        book.hot_backup()(backup_url)
    with inkpen.open(backup_url, **options) as restored:
        assert contents(restored, "w") == {k.encode(): v for k, v in model.items()}
        if strategy == "retain":
            check(restored, model, index)
