"""The writer's own maintenance never deletes a journal file that its own work is about to read.

Journal compaction and re-rolls run one after another in the Inker's clerk; the Inker commits
each when it is done, and a commit retires the files it replaced (their clerks delete them once
the Inker says nothing may read them, and the writer's GC may collect them at any ``min_age``).
So a compaction can choose a file that a re-roll, written just before it, replaces before the
compaction has read it; and a re-roll can be handed a file that a compaction running ahead of it
in the clerk replaces. Each piece of work registers with the Inker before its inputs are chosen:
the retired file stays until the work has read it, and the work then ends as "replaced
meanwhile", with nothing committed.

The first tests drive each interleaving step by step through store hooks (events, no sleeps);
the last runs a writer with its maintenance loop beside three Reader processes.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import random
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import inkpen
from inkpen.actors.engine import bookie_actor
from inkpen.actors.journal.inker_clerk import CompactionReport
from inkpen.manifest import ManifestStore
from inkpen.objectstore import open_store
from support.engine import TINY
from support.hooks import HookedStore
from support.logs import capture_logs
from support.waiting import wait_until

JOURNAL_FILES = "journal/compacted/"
WAIT = 60.0
"""Seconds a hook waits for the step it expects before the test gives up (never reached when
the interleaving goes as planned)."""

STILL = {
    **TINY,
    # Nothing rolls, pushes or merges unless the test asks: the only store work is the one the
    # hooks expect. Files are rolled whole by the test (one output file per rewritten input).
    "roll_segments": 100_000,
    "roll_bytes": 1 << 30,
    "ledger_cache_entries": 100_000,
    "l0_cache_entries": 100_000,
    "max_l0_files": 100,
    "journal_file_target_bytes": 1 << 20,
    "journal_cache_bytes": 0,  # every read of a journal file goes to the store
}


Model = dict[str, bytes]


def waiting_files(book: inkpen.Bookie, rounds: int = 4, keys: int = 40) -> tuple[Model, list[str]]:
    """Write ``rounds`` values of ``keys`` keys, roll them into journal files while the ledger has
    persisted none of them (so each file waits to be rolled again without its small bodies),
    then persist the ledger: the next write makes a re-roll of every file due. Answers the model
    and the journal files, in SQN order."""
    model: Model = {}
    for r in range(rounds):
        for i in range(keys):
            key = f"k{i:03d}"
            value = f"{r}-{key}".encode() * 8
            book.put("b", key, value)
            model[key] = value
            if i % 5 == 0:  # never written again: every file holds something to keep
                book.put("b", f"u{r}-{key}", value)
                model[f"u{r}-{key}"] = value
            if i % 10 == 9:
                book._engine.roll()  # several files, each waiting for the ledger
    book._engine.roll()
    book.flush()
    book.compact_ledger()  # no merge runs while the hooks wait
    files = [h.name for h in book._engine.ctx.board.journal.files]
    assert len(files) >= 4, files
    return model, files


def fate(events: list[dict[str, Any]], name: str) -> str | None:
    """``deleted`` once the clerk of ``name`` deleted it, ``deferred`` once its owner told it to
    wait, else None."""
    for event in list(events):
        if event.get("name") == name and event["event"] == "clerk.deleted":
            return "deleted"
    for event in list(events):
        if event.get("name") == name and event["event"] == "clerk.delete_deferred":
            return "deferred"
    return None


def named_now(url: str) -> set[str]:
    store = open_store(url)
    try:
        latest = ManifestStore(store).latest()
        assert latest is not None
        return {f.name for f in latest.manifest.journal.files}
    finally:
        store.close()


def on_store(url: str, name: str) -> bool:
    store = open_store(url)
    try:
        return any(info.key == name for info in store.list(JOURNAL_FILES))
    finally:
        store.close()


def assert_holds(book: inkpen.Bookie, model: Model) -> None:
    for key, value in model.items():
        assert book.get("b", key) == value, key
    with book.objects("b") as rows:
        assert {k.decode(): v for _, k, v in rows} == model


@pytest.fixture
def url(make_store_url: Callable[[str], str]) -> str:
    return make_store_url("local")


def test_a_compaction_reads_the_files_a_re_roll_replaced_under_it(url: str) -> None:
    """A re-roll is written; a compaction queued behind it in the clerk chooses the files the
    re-roll is about to replace; the re-roll commits, the replaced files' clerks ask to delete
    them and GC runs with ``min_age=0``; only then does the compaction read them."""
    store = HookedStore(open_store(url))
    failures: list[str] = []
    compaction: concurrent.futures.Future[CompactionReport] = concurrent.futures.Future()
    reading = threading.Event()
    fates: dict[str, str | None] = {}
    with capture_logs() as events, inkpen.open(store, **STILL) as book:
        model, files = waiting_files(book)
        first = files[0]

        def compaction_reads(key: str) -> None:  # the clerk, scoring its first file
            reading.set()
            if not wait_until_or(lambda: first not in named_now(url), failures, "re-roll"):
                return
            if not wait_until_or(lambda: fate(events, first) is not None, failures, "poll"):
                return
            fates[first] = fate(events, first)
            report = book.run_gc(min_age=0)
            if first in report.deleted:
                failures.append(f"GC deleted {first}, which the compaction is about to read")

        def re_roll_commits(_: str) -> None:  # the Inker, before its re-roll's commit
            if not reading.wait(WAIT):
                failures.append("the compaction never read its first file")

        def re_roll_writes() -> None:  # the clerk, writing the re-roll's first file
            # The re-roll has read its first input: from now on a read of it is the
            # compaction's. Queue the compaction behind the re-roll, and hold the re-roll's
            # commit until the compaction has chosen its files and begun reading them.
            store.before_read(first, compaction_reads)
            store.before_head(JOURNAL_FILES, re_roll_commits)
            bookie_actor.compact_journal(book._engine.bookie, compaction)

        store.before_create(JOURNAL_FILES, re_roll_writes)
        book.put("b", "poke", b"p")  # the Inker looks after a write: every file is due
        model["poke"] = b"p"
        report = compaction.result(timeout=WAIT)
        assert failures == []
        assert fates == {first: "deferred"}  # the compaction's registration held it
        assert report.outcome == "replaced_meanwhile"
        assert first in report.replaced_meanwhile
        assert (report.compacted, report.written, report.manifest_id) == ((), (), None)
        assert set(report.replaced_meanwhile) <= set(files) - named_now(url)
        # Released after the compaction, the file goes; nothing else was lost.
        wait_until(lambda: not on_store(url, first), f"{first} deleted once it was read")
        assert_holds(book, model)
        assert not [e for e in events if e["log_level"] in ("warning", "error")], events
        again = book.compact_journal()  # the next compaction judges the re-rolled files
        assert again.outcome in ("compacted", "nothing_to_do")
        assert_holds(book, model)
    with inkpen.open(url) as book:
        assert_holds(book, model)


@pytest.mark.parametrize("collector", ["clerk", "gc"])
def test_a_re_roll_reads_the_files_a_compaction_replaced_under_it(url: str, collector: str) -> None:
    """A compaction runs in the clerk; a write meanwhile hands the clerk a re-roll of every file,
    queued behind it; the compaction commits and the files it replaced are collected (by their
    clerks, or by GC with ``min_age=0`` once nothing else holds the writer checkpoint back);
    only then does the re-roll read them."""
    poll = 0.05 if collector == "clerk" else 3600.0  # "gc": no clerk deletes anything first
    store = HookedStore(open_store(url))
    failures: list[str] = []
    fates: dict[str, str | None] = {}
    with (
        capture_logs() as events,
        inkpen.open(store, **{**STILL, "delete_poll_interval": poll}) as book,
    ):
        model, files = waiting_files(book)

        def re_roll_reads(_: str) -> None:  # the clerk, the re-roll reading its first file
            if not wait_until_or(lambda: named_now(url) != set(files), failures, "compaction"):
                return
            replaced = set(files) - named_now(url)
            if collector == "clerk":
                wait_until_or(
                    lambda: all(fate(events, name) for name in replaced), failures, "polls"
                )
                fates.update((name, fate(events, name)) for name in replaced)
                return
            # Nothing but the re-roll may hold the writer checkpoint back: the compaction's
            # snapshot is gone, and a commit after that moves the checkpoint up.
            if not wait_until_or(
                lambda: book.stats()["ledger_snapshots"] == 0, failures, "snapshot release"
            ):
                return
            book.checkpoint(lifetime=60.0)
            deleted = replaced & set(book.run_gc(min_age=0).deleted)
            if deleted:
                failures.append(f"GC deleted {sorted(deleted)}, which the re-roll is to read")

        def compaction_writes() -> None:  # a file clerk, storing the compaction's output
            book.put("b", "poke", b"p")  # the Inker hands the clerk a re-roll of every file
            book.stats()  # answered once the Inker has handled that write to its end
            store.before_read(files[0], re_roll_reads)  # the re-roll reads in SQN order

        store.before_create(JOURNAL_FILES, compaction_writes)
        report = book.compact_journal()
        model["poke"] = b"p"
        assert report.outcome == "compacted", report
        assert set(report.compacted) <= set(files)
        answers = ("failed", "replaced_meanwhile", "committed", "commit_failed")
        answered = [f"journal.reroll_{a}" for a in answers]

        def answer() -> list[dict[str, Any]]:
            return [e for e in list(events) if e["event"] in answered]

        wait_until(answer, "the re-roll's answer")
        assert failures == []
        assert [e["event"] for e in answer()] == ["journal.reroll_replaced_meanwhile"], answer()
        if collector == "clerk":  # the re-roll's registration held them
            assert fates == dict.fromkeys(report.compacted, "deferred")
        assert not [e for e in events if e["log_level"] in ("warning", "error")], events
        assert book.stats()["journal_snapshots"] == 0  # the re-roll's registration is gone
        assert_holds(book, model)
    with inkpen.open(url) as book:
        assert_holds(book, model)


CHURN = Path(__file__).parent / "support" / "reader_churn.py"
READERS = 3
LIFETIME = 3.0
BUSY = {
    "ledger_cache_entries": 40,
    "l0_cache_entries": 120,
    "max_l0_files": 2,
    "sst_target_bytes": 4096,
    "sst_block_bytes": 512,
    "l1_target_files": 2,
    "level_fanout": 2,
    "roll_segments": 4,  # rolls outrun the ledger: files wait for re-rolls
    "roll_bytes": 64 * 1024,
    "journal_file_target_bytes": 32 * 1024,
    "compaction_interval": 0.1,  # scheduled compactions beside the requested ones
    "delete_poll_interval": 0.01,
    "gc_min_age": 0.0,
}
"""Small files: a few seconds of writes flush, merge, roll, re-roll and compact many times."""


def run_busy_writer(url: str, seconds: float, out: Path) -> None:
    """Puts and deletes from two threads, a maintenance loop (journal compaction, merges,
    flushes, short checkpoints, GC with ``min_age=0``) and three Reader processes opening,
    reading and closing Readers, for ``seconds``: no maintenance call fails, no Reader fails
    (but for a lease a starved machine let lapse), and the database holds the model after."""
    model: Model = {}
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[str] = []
    outcomes: dict[str, int] = {}

    def writes(t: int) -> None:
        rng = random.Random(t)
        while not stop.is_set():
            key = f"t{t}-{rng.randrange(60):02d}"
            if rng.random() < 0.15:
                book.delete("r", key)
                with lock:
                    model.pop(key, None)
            else:
                size = 2000 if rng.random() < 0.1 else rng.randrange(8, 1000)  # some large
                value = rng.randbytes(size // 2).hex().encode()  # text: the Readers decode it
                book.put("r", key, value)
                with lock:
                    model[key] = value

    def maintenance() -> None:
        step = 0
        while not stop.is_set():
            step += 1
            report = book.compact_journal()
            outcomes[report.outcome] = outcomes.get(report.outcome, 0) + 1
            book.compact_ledger()
            book.flush()
            if step % 5 == 0:
                book.checkpoint(lifetime=0.5)
            book.run_gc(min_age=0)

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                stop.set()

        return run

    outputs = [out / f"reader-{n}.jsonl" for n in range(READERS)]
    with inkpen.open(url, **BUSY) as book:
        works: list[Callable[[], None]] = [
            functools.partial(writes, 0),
            functools.partial(writes, 1),
            maintenance,
        ]
        threads = [threading.Thread(target=guarded(work)) for work in works]
        for thread in threads:
            thread.start()
        readers: list[subprocess.Popen[bytes]] = []
        try:
            for n, output in enumerate(outputs):
                with output.open("w") as sink:
                    # Between cycles no lease pins: files dropped then may go at once.
                    command = [
                        sys.executable,
                        str(CHURN),
                        url,
                        str(LIFETIME),
                        str(seconds),
                        str(n),
                        "1.0",
                    ]
                    readers.append(subprocess.Popen(command, stdout=sink))
            for reader in readers:
                reader.wait(timeout=seconds + 120.0)

            def worked() -> bool:
                done = book.metrics()
                return bool(errors) or (done.journal_compactions > 0 and done.journal_rerolls > 0)

            wait_until(worked, "a committed compaction and re-roll", timeout=120.0)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=120.0)
            for reader in readers:
                if reader.poll() is None:
                    reader.kill()
                reader.wait(timeout=30)
        assert errors == [], errors
        assert not any(thread.is_alive() for thread in threads)
        done = book.metrics()
        print(
            f"busy writer: compactions {outcomes}, {done.journal_compactions} committed, "
            f"{done.journal_rerolls} re-rolls, {done.gc_runs} GC passes"
        )
        assert done.journal_compactions > 0 and done.journal_rerolls > 0, (outcomes, done)
        for key, value in model.items():
            assert book.get("r", key) == value, key
        with book.objects("r") as rows:
            assert {k.decode(): v for _, k, v in rows} == model
    assert [reader.returncode for reader in readers] == [0] * READERS
    failed, cycles = [], 0
    for output in outputs:
        lines = [json.loads(line) for line in output.read_text().splitlines()]
        assert lines and "done" in lines[-1], f"{output.name} did not finish"
        for line in lines[:-1]:
            error = str(line.get("error", ""))
            if error and not error.startswith("CheckpointLapsedError"):
                failed.append(f"{error}\n{line.get('traceback', '')}")
            cycles += "error" not in line
    assert not failed, f"{len(failed)} reader cycles failed:\n" + "\n".join(failed[:3])
    assert cycles >= READERS, f"only {cycles} reader cycles read"
    with inkpen.open(url) as book, book.objects("r") as rows:
        assert {k.decode(): v for _, k, v in rows} == model


def test_maintenance_beside_writes_and_readers(
    make_store_url: Callable[[str], str], tmp_path: Path
) -> None:
    """The bounded run: a few seconds on a local directory."""
    run_busy_writer(
        make_store_url("local"), float(os.environ.get("INKPEN_BUSY_SECONDS", 5)), tmp_path
    )


@pytest.mark.slow
def test_maintenance_beside_writes_and_readers_for_longer(
    durable_store_url: str, tmp_path: Path
) -> None:
    """The long run, on a local directory and on SeaweedFS."""
    run_busy_writer(durable_store_url, 30.0, tmp_path)


def wait_until_or(check: Callable[[], bool], failures: list[str], what: str) -> bool:
    """:func:`wait_until` inside a hook, where an assertion would only end an actor's message:
    a timeout is recorded in ``failures`` (and answers False)."""
    try:
        wait_until(check, what, WAIT)
    except AssertionError as exc:
        failures.append(str(exc))
        return False
    return True
