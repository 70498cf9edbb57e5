"""External compaction in one process (threads): a writer opened with compaction="external"
merges nothing itself, holds its puts once L0 is full, and adopts what a Compactor commits;
compactors fence each other by the compactor epoch."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable
from typing import Any

import pytest

import inkpen
from inkpen.actors.ledger import compactor_levels
from inkpen.manifest.gc import GcOptions, run_gc
from inkpen.manifest.model import Manifest
from inkpen.manifest.store import ManifestStore
from inkpen.objectstore import ObjectStore, open_store
from support.cli import fails, ok
from support.engine import TINY, missing_objects
from support.waiting import wait_until

EXTERNAL = {**TINY, "compaction": "external"}
DEADLINE = 60.0


def _levels(url: str) -> tuple[tuple[str, ...], ...]:
    store = open_store(url)
    try:
        latest = ManifestStore(store).latest()
        assert latest is not None
        return tuple(tuple(d.name for d in level) for level in latest.manifest.ledger.levels)
    finally:
        store.close()


def test_external_writer_holds_puts_until_a_compactor_merges(store_url: str) -> None:
    book = inkpen.open(store_url, **EXTERNAL)
    model: dict[bytes, bytes] = {}
    done = threading.Event()
    errors: list[BaseException] = []

    def put_many() -> None:
        try:
            for i in range(600):
                key, value = f"k{i:05d}".encode(), f"v{i}".encode() * 3
                book.put("b", key, value)
                model[key] = value
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    try:
        putter = threading.Thread(target=put_many, daemon=True)
        putter.start()
        wait_until(lambda: book.stats().get("waiting_for_compactor") is True, "a full L0", DEADLINE)
        assert not done.is_set(), "600 puts went through with no compactor: nothing held them"
        stats = book.stats()
        assert stats["compaction"] == "external"
        assert stats["l0_files"] == EXTERNAL["max_l0_files"]
        assert stats["merges"] == 0
        assert len(_levels(store_url)) == 1, "the writer merged by itself"
        with pytest.raises(inkpen.UsageError, match="external"):
            book.compact_journal()
        with pytest.raises(inkpen.UsageError, match="external"):
            book.run_gc()
        with inkpen.open_compactor(store_url, **TINY) as compactor:

            def puts_done_after_a_round() -> bool:
                if done.wait(0.05):
                    return True
                compactor.run_once()
                return False

            wait_until(puts_done_after_a_round, "the held puts to finish", DEADLINE, interval=0)
            # The writer may still write its memory to L0 while a round runs: go on until a
            # round ends with L0 empty (the writer is idle now).
            wait_until(
                lambda: compactor.run_once().l0_files == 0, "an empty L0", DEADLINE, interval=0
            )
        assert not errors, errors
        for key, value in model.items():
            assert book.get("b", key) == value
        assert len(model) == 600
    finally:
        book.close()
    with inkpen.open(store_url, **TINY) as again:
        for key, value in model.items():
            assert again.get("b", key) == value


def test_a_newer_compactor_fences_the_older_which_changes_nothing(store_url: str) -> None:
    with inkpen.open(store_url, **EXTERNAL) as book:
        for i in range(60):
            book.put("b", f"k{i:03d}".encode(), b"x" * 20)
        book.flush()
        old = inkpen.open_compactor(store_url, **TINY)
        new = inkpen.open_compactor(store_url, **TINY)
        assert new.epoch == old.epoch + 1
        store = open_store(store_url)
        try:
            before = ManifestStore(store).latest()
            assert before is not None
            with pytest.raises(inkpen.FencedError, match="compactor epoch"):
                old.run_once()
            after = ManifestStore(store).latest()
            assert after is not None and after.id == before.id
            assert new.run_once().l0_files == 0
            assert missing_objects(store) == []
        finally:
            store.close()
            old.close()
            new.close()
        for i in range(60):
            assert book.get("b", f"k{i:03d}".encode()) == b"x" * 20
        wait_until(lambda: book.stats()["l0_files"] == 0, "the writer to adopt the merge", DEADLINE)


def test_writer_and_compactor_threads_keep_every_acknowledged_write(store_url: str) -> None:
    rng = random.Random(18)
    model: dict[bytes, bytes | None] = {}
    stop = threading.Event()
    failures: list[BaseException] = []

    def compact() -> None:
        try:
            compactor.run(stop)
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    with inkpen.open(store_url, **EXTERNAL) as book:
        compactor = inkpen.open_compactor(store_url, **TINY, interval=0.05)
        runner = threading.Thread(target=compact, daemon=True)
        runner.start()
        try:
            for step in range(1500):
                key = f"k{rng.randrange(300):04d}".encode()
                if rng.random() < 0.15:
                    book.delete("b", key)
                    model[key] = None
                else:
                    value = f"{step}".encode() * rng.randrange(1, 8)
                    book.put("b", key, value)
                    model[key] = value
                if step % 300 == 299:
                    for k, v in model.items():
                        assert book.get("b", k) == v, k
            stats = book.stats()
            assert stats["l0_files"] <= EXTERNAL["max_l0_files"]
        finally:
            stop.set()
            runner.join(DEADLINE)
        assert not failures, failures
        assert sum(_count(level) for level in _levels(store_url)[1:]) > 0, "nothing was merged"
    with inkpen.open(store_url, **TINY) as again:
        for k, v in model.items():
            assert again.get("b", k) == v, k
    compactor.close()


def _count(level: tuple[str, ...]) -> int:
    return len(level)


def test_bad_compaction_option_is_refused(store_url: str) -> None:
    with pytest.raises(inkpen.UsageError, match="compaction"):
        inkpen.open(store_url, compaction="sideways")
    with pytest.raises(inkpen.UsageError, match="interval"):
        inkpen.open_compactor(store_url, interval=0)


def test_cli_compactor_once_merges_and_reports(make_store_url: Callable[[str], str]) -> None:
    url = make_store_url("local")
    with inkpen.open(url, **EXTERNAL) as book:
        for i in range(60):  # below what backpressure holds with no compactor
            book.put("b", f"k{i:04d}".encode(), b"y" * 30)
        book.flush()
        assert len(_levels(url)[0]) >= 2
        ran = ok("compactor", url, "--once", "--json")
        document = json.loads(ran.out)
        assert document["l0_files"] == 0
        assert document["merges"] >= 1
        assert document["epoch"] == 1
        assert _levels(url)[0] == ()
        text = ok("compactor", url, "--once")
        assert "compactor epoch 2 claimed" in text.out
        assert "0 merges" in text.out
        for i in range(60):
            assert book.get("b", f"k{i:04d}".encode()) == b"y" * 30
    fails(2, "compactor", url, "--once", "--interval", "soon")


def test_writer_l0_commit_keeps_a_merge_it_has_not_adopted(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer never looks for the compactor's commit: its next L0 commit must still keep it.
    monkeypatch.setattr(compactor_levels, "WATCH_INTERVAL", 3600.0)
    monkeypatch.setattr(compactor_levels, "WATCH_INTERVAL_HELD", 3600.0)
    with inkpen.open(store_url, **EXTERNAL) as book:
        for i in range(40):
            book.put("b", f"a{i:03d}".encode(), b"1")
        book.flush()
        with inkpen.open_compactor(store_url, **TINY) as compactor:
            report = compactor.run_once()
        assert report.merges >= 1
        merged = _levels(store_url)[1:]
        assert merged and merged[0]
        assert book.stats()["l0_files"] > 0, "the writer adopted the merge before its commit"
        for i in range(30):
            book.put("b", f"z{i:03d}".encode(), b"2")
        book.flush()
        after = _levels(store_url)
        assert after[1:] == merged, "the writer's L0 commit undid the compactor's merge"
        assert set(after[0]).isdisjoint(report.replaced)
        for i in range(40):
            assert book.get("b", f"a{i:03d}".encode()) == b"1"
        for i in range(30):
            assert book.get("b", f"z{i:03d}".encode()) == b"2"


def test_a_snapshot_keeps_reading_files_a_compactor_replaced(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The snapshot is taken when the writer's manifest already holds the compactor's merge but
    # its ledger view does not yet: the files the view reads must stay pinned for other
    # processes' GC (the writer checkpoint), and the writer's own deletes wait for the snapshot.
    monkeypatch.setattr(compactor_levels, "WATCH_INTERVAL", 3600.0)
    monkeypatch.setattr(compactor_levels, "WATCH_INTERVAL_HELD", 3600.0)
    with inkpen.open(store_url, **EXTERNAL) as book:
        for i in range(50):
            book.put("b", f"k{i:03d}".encode(), b"old")
        book.flush()
        with inkpen.open_compactor(store_url, **TINY) as compactor:
            report = compactor.run_once()
        assert report.replaced
        book.checkpoint(lifetime=1.0)  # a journal commit: the writer's manifest moves past it
        snap = book.snapshot()
        assert book.stats()["l0_files"] > 0, "the view adopted the merge too early"
        for round_ in range(2):  # two L0 commits: the second moves the writer checkpoint on
            for i in range(50):
                book.put("b", f"k{i:03d}".encode(), f"new{round_}".encode())
            book.flush()
        store = open_store(store_url)
        try:
            run_gc(store, options=GcOptions(min_age=0.0, offline=True))
            assert all(_exists(store, name) for name in report.replaced), (
                "GC deleted files an open snapshot reads"
            )
            for i in range(50):
                assert snap.get("b", f"k{i:03d}".encode()) == b"old"
            snap.close()
            wait_until(
                lambda: not any(_exists(store, name) for name in report.replaced),
                "the replaced files to be deleted once the snapshot closed",
                DEADLINE,
            )
        finally:
            store.close()
        for i in range(50):
            assert book.get("b", f"k{i:03d}".encode()) == b"new1"


def _exists(store: ObjectStore, name: str) -> bool:
    try:
        store.head(name)
    except inkpen.NotFoundError:
        return False
    return True


def test_compactor_compacts_the_journal_and_the_writer_adopts_it(store_url: str) -> None:
    model: dict[bytes, bytes] = {}
    with inkpen.open(store_url, **EXTERNAL, compaction_sample_size=64) as book:
        with inkpen.open_compactor(store_url, **TINY) as compactor:
            for round_ in range(12):
                for i in range(20):  # the same keys again and again: most entries are replaced
                    key, value = f"k{i:02d}".encode(), f"{round_}-{i}".encode() * 4
                    book.put("b", key, value)
                    model[key] = value
                book.flush()
                compactor.run_once()
            snap = book.snapshot()
            report = compactor.run_once()
            journal = report.journal
            assert journal is not None
            if not journal.compacted:  # the last round's files may have been compacted already
                for i in range(20):
                    book.put("b", f"k{i:02d}".encode(), model[f"k{i:02d}".encode()])
                book.flush()
                report = compactor.run_once()
                assert report.journal is not None
                journal = report.journal
        manifest = _latest(store_url)
        names = {d.name for d in manifest.journal.files}
        assert journal.compacted and names.isdisjoint(journal.compacted)
        assert journal.entries_dropped > 0
        for key, value in model.items():
            assert book.get("b", key) == value
            assert snap.get("b", key) == value
        snap.close()
        # Only the writer's own delete_pending clerks delete this soon (the compactor's GC
        # keeps anything younger than a minute): the writer adopted the compaction.
        store = open_store(store_url)
        try:
            wait_until(
                lambda: not any(_exists(store, name) for name in journal.compacted),
                "the writer to adopt the compaction and delete the replaced journal files",
                DEADLINE,
            )
        finally:
            store.close()
        for key, value in model.items():
            assert book.get("b", key) == value
    with inkpen.open(store_url, **TINY) as again:
        for key, value in model.items():
            assert again.get("b", key) == value


def _latest(url: str) -> Manifest:
    store = open_store(url)
    try:
        latest = ManifestStore(store).latest()
        assert latest is not None
        return latest.manifest
    finally:
        store.close()


def test_a_compactor_beside_an_internal_writer_is_refused_and_force_is_fenced_by_the_next(
    store_url: str,
) -> None:
    model = {f"k{i:03d}".encode(): f"v{i}".encode() * 5 for i in range(80)}
    book = inkpen.open(store_url, **TINY)  # compaction="internal": it merges itself
    try:
        for key, value in model.items():
            book.put("b", key, value)
        book.flush()
        assert _latest(store_url).writer_compaction == "internal"
        before = _latest(store_url)
        with pytest.raises(inkpen.UsageError, match='Reopen the writer with compaction="external"'):
            inkpen.open_compactor(store_url, **TINY)
        after = _latest(store_url)
        assert after.compactor_epoch == before.compactor_epoch, "a refused claim wrote"
        not_a_bool: Any = "yes"  # refused at run time
        with pytest.raises(inkpen.UsageError, match="force"):
            inkpen.open_compactor(store_url, **TINY, force=not_a_bool)
        for key, value in model.items():
            assert book.get("b", key) == value
    finally:
        book.close()
    # The writer is gone, but the manifest cannot tell: still refused without force.
    with pytest.raises(inkpen.UsageError, match="force=True"):
        inkpen.open_compactor(store_url, **TINY)
    with inkpen.open_compactor(store_url, **TINY, force=True) as forced:
        forced.run_once()
        # An internal writer claims the database again: the forced compactor stops at once.
        with inkpen.open(store_url, **TINY) as again:
            commits = _latest(store_url)
            with pytest.raises(inkpen.FencedError, match='compaction="internal"'):
                forced.run_once()
            assert _latest(store_url).compactor_epoch == commits.compactor_epoch
            for key, value in model.items():
                assert again.get("b", key) == value
    # A writer reopened with compaction="external" takes a compactor without force.
    with inkpen.open(store_url, **EXTERNAL) as book:
        assert _latest(store_url).writer_compaction == "external"
        with inkpen.open_compactor(store_url, **TINY) as compactor:
            compactor.run_once()
        for key, value in model.items():
            assert book.get("b", key) == value


def test_cli_compactor_refuses_an_internal_writer_unless_forced(
    make_store_url: Callable[[str], str],
) -> None:
    url = make_store_url("local")
    with inkpen.open(url, **TINY) as book:
        for i in range(30):
            book.put("b", f"k{i:04d}".encode(), b"z" * 30)
    epoch = _latest(url).compactor_epoch
    ran = fails(2, "compactor", url, "--once")
    assert 'compaction="external"' in ran.stderr and "--force" in ran.stderr
    assert _latest(url).compactor_epoch == epoch
    document = json.loads(ok("compactor", url, "--once", "--force", "--json").out)
    assert document["epoch"] == epoch + 1
    with inkpen.open(url, **TINY) as book:
        for i in range(30):
            assert book.get("b", f"k{i:04d}".encode()) == b"z" * 30


def test_an_external_writer_opens_without_a_compactor_when_replay_overflows_l0(
    store_url: str,
) -> None:
    """An external writer's open replays the journal into L0 on its own: it must not wait for a
    compactor that may not be running (it would wait for ever). L0 may go past its bound until
    one merges; the writer's puts then wait for it, as usual."""
    roomy = {**TINY, "l0_cache_entries": 100_000, "ledger_cache_entries": 8}
    book = inkpen.open(store_url, **roomy)
    model = {f"k{i:05d}".encode(): f"v{i}".encode() * 4 for i in range(300)}
    for key, value in model.items():
        book.put("b", key, value)
    book.abandon()  # nothing reached L0: all 300 puts live only in the journal
    assert all(not level for level in _levels(store_url))

    opened: list[inkpen.Bookie] = []
    errors: list[BaseException] = []

    def reopen() -> None:
        try:
            opened.append(inkpen.open(store_url, **EXTERNAL))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    opener = threading.Thread(target=reopen, name="reopen-external", daemon=True)
    opener.start()
    opener.join(DEADLINE)
    assert not opener.is_alive(), "the external writer's open waited for a compactor"
    assert not errors, errors
    book = opened[0]
    try:
        assert len(_levels(store_url)[0]) > EXTERNAL["max_l0_files"]
        assert book.get_many("b", list(model)) == list(model.values())
    finally:
        book.close()
    compactor = inkpen.open_compactor(store_url)
    try:
        compactor.run_once()
    finally:
        compactor.close()
    assert len(_levels(store_url)[0]) <= EXTERNAL["max_l0_files"]
    with inkpen.open(store_url, **EXTERNAL) as again:
        assert again.get_many("b", list(model)) == list(model.values())


def test_a_compactor_merge_that_fails_after_storing_outputs_deletes_them(
    store_url: str, store: ObjectStore
) -> None:
    """Outputs are stored as the merge hands them over; a merge that fails later deletes the
    ones it stored and commits nothing, and the next round merges as if it never happened."""
    with inkpen.open(store_url, **{**EXTERNAL, "sst_target_bytes": 1024}) as book:
        for i in range(40):
            book.put("b", f"a{i:03d}".encode(), b"x" * 60)
        book.flush()
        before = _levels(store_url)
        assert before[0], "nothing in L0 to merge"
        ssts_before = {info.key for info in store.list("ledger/")}
        with inkpen.open_compactor(store_url, **{**TINY, "sst_target_bytes": 1024}) as compactor:
            real = compactor.tables.write_sst
            stored: list[str] = []

            def second_fails(data: bytes, info: Any, *, name: str | None = None) -> Any:
                if stored:
                    raise inkpen.StoreError("the store refused this output (a test)", definite=True)
                descriptor = real(data, info, name=name)
                stored.append(descriptor.name)
                return descriptor

            compactor.tables.write_sst = second_fails  # type: ignore[method-assign]
            with pytest.raises(inkpen.StoreError, match="refused this output"):
                compactor.run_once()
            assert stored, "the merge failed before storing anything"
            assert _levels(store_url) == before
            assert {info.key for info in store.list("ledger/")} == ssts_before
            assert not compactor._in_flight_names()
            compactor.tables.write_sst = real  # type: ignore[method-assign]
            report = compactor.run_once()
        assert report.merges >= 1 and report.l0_files == 0
        for i in range(40):
            assert book.get("b", f"a{i:03d}".encode()) == b"x" * 60
